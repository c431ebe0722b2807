"""OCR: text from images and from PDF pages without a text layer (the `ocr` extra).

This module owns the recognition engine (RapidOCR on ONNX Runtime, with the detection and
recognition models that ship inside the rapidocr wheel: nothing is downloaded), the rendering of
a PDF page to pixels (pypdfium2), the reading of image files (Pillow) and the layout that turns
recognised text boxes back into lines and paragraphs. `pdf.read_pdf` decides which pages need
OCR and calls `PdfOcr`; image files come here through `read_image`.

The engine is loaded once per process, on the first page or image that needs it (about a second),
and runs on every core. Nothing it does reaches stderr, which is memagent's live view.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, TypeVar

from ..errors import MemagentError
from .base import OcrProgress, Part, Place, ReadContext, short_reason, unreadable

if TYPE_CHECKING:
    from PIL.Image import Image

OCR_INSTALL = "pip install 'memagent-cli[ocr]'"

# A PDF page is rendered at RENDER_DPI, and any picture (page or image file) is read with its
# longer side at most MAX_SIDE pixels (a Letter or A4 page at 200 dpi fits). Text lines are cut
# from that picture and scaled to 48 pixels high for recognition, which takes most of the time:
# rendering at 150 or 300 dpi read the test pages (6- to 11-point print, a 19th-century scan) no
# better and little faster. The detector that finds the lines looks at the picture reduced to
# DETECT_SIDE: larger, it missed the few thin lines of a sparse page (at 2500 px it found nothing
# on a page with two lines of 12-point text), smaller (960) it began to miss 6-point print.
RENDER_DPI = 200
T = TypeVar("T")

MAX_SIDE = 2500
DETECT_SIDE = 1280

# An image file over this many pixels is refused unread (a decompression bomb, or a poster memagent
# could not recognise in reasonable time anyway); Pillow's own limit is about 89 million.
MAX_IMAGE_PIXELS = 100_000_000


@functools.cache
def ocr_available() -> bool:
    """Whether the ocr extra's libraries are installed (looked up, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("rapidocr", "onnxruntime", "pypdfium2"))


# --------------------------------------------------------------------------------------------
# PDF pages


class PdfOcr:
    """Recognises pages of one PDF, opened once with pypdfium2 and closed by `close()`.

    `file` is the open PDF (pypdf reads it too: both seek before every read, so they can share
    it). Each recognised page is reported through `context.on_ocr`.
    """

    def __init__(self, file: BinaryIO, context: ReadContext, total_pages: int) -> None:
        self._context = context
        self._total = total_pages
        self._seconds = 0.0  # spent recognising this document's pages
        self._document = _open_pdfium(file, context)

    def page_text(self, number: int) -> str:
        """The recognised text of page `number` (1-based); "" (with a note) if it cannot be read."""
        started = time.monotonic()
        try:
            text = _recognise_page(self._document, number)
        except MemagentError:
            raise
        except Exception as exc:  # one page pdfium cannot draw should not cost the others
            self._context.warn(f"{self._context.title}: could not recognise page {number} ({short_reason(exc)})")
            text = ""
        self._seconds += time.monotonic() - started
        _report(self._context, number, self._total, self._seconds)
        return text

    def close(self) -> None:
        self._document.close()


def _open_pdfium(file: BinaryIO, context: ReadContext) -> Any:
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    # pypdf has already unlocked the file with the password, or with none where only an owner
    # password is set; a --password meant for another file must not stop that second case here.
    for password in dict.fromkeys((context.password, None)):
        file.seek(0)
        try:
            return pdfium.PdfDocument(file, password=password)
        except pdfium.PdfiumError as exc:
            failure: Exception = exc
    raise unreadable(
        context.title,
        "PDF",
        f"cannot render its pages for OCR ({short_reason(failure)})",
        "Check that it is a complete, undamaged PDF",
    )


def _recognise_page(document: Any, number: int) -> str:
    return _with_page_picture(document, number, lambda picture, height, scale: recognise(picture))


def _with_page_picture(document: Any, number: int, use: Callable[[Any, float, float], T]) -> T:
    """`use(picture, page height in points, pixels a point)` on page `number` (1-based) rendered as
    OCR reads it: grey, at RENDER_DPI, at most MAX_SIDE pixels a side."""
    page = document[number - 1]
    try:
        width, height = page.get_size()
        scale = min(RENDER_DPI / 72, MAX_SIDE / max(width, height, 1))
        bitmap = page.render(scale=scale, grayscale=True)
        try:
            # A view of pdfium's buffer: used before the bitmap is closed.
            return use(bitmap.to_numpy(), height, scale)
        finally:
            bitmap.close()
    finally:
        page.close()


def page_boxes(document: Any, number: int) -> list[tuple[str, tuple[float, float, float, float]]]:
    """The text RapidOCR reads on page `number` (1-based) of a pypdfium2 document, box by box in the
    order `layout` reads them, each box in the page's own space (left, bottom, right, top, in points):
    where `traces export --format pdf` puts the highlight of a quote from a scanned page. [] for a
    page read turned (its boxes follow the turned picture, not the page) or with nothing on it."""

    def read(picture: Any, height: float, scale: float) -> list[tuple[str, tuple[float, float, float, float]]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, _, turns = _run(_engine(), picture)
        boxes, texts = getattr(result, "boxes", None), getattr(result, "txts", None)
        if turns or boxes is None or texts is None:
            return []
        return _in_page_space(boxes, texts, height, scale)

    return _with_page_picture(document, number, read)


def _in_page_space(boxes: Any, texts: Any, height: float, scale: float) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Recognised boxes (pixels, from the top) in reading order, in PDF space (points, from the bottom)."""
    found = []
    for line in _reading_lines([[(float(x), float(y)) for x, y in box] for box in boxes], list(texts)):
        for box in line:
            xs, ys = [x for x, _ in box.corners], [y for _, y in box.corners]
            found.append((box.text, (min(xs) / scale, height - max(ys) / scale, max(xs) / scale, height - min(ys) / scale)))
    return found


def _report(context: ReadContext, done: int, total: int, seconds: float) -> None:
    if context.on_ocr is not None:
        context.on_ocr(OcrProgress(context.title, done=done, total=total, seconds=seconds))


# --------------------------------------------------------------------------------------------
# Image files


def read_image(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An image file's recognised text: one part for a single image (no unit: a picture is not
    a page), one per page for a multi-page TIFF."""
    if not ocr_available():
        raise MemagentError(f"Cannot read image {context.title}: OCR is not installed", hint=f"Install it: {OCR_INSTALL}")
    image = _open_image(file, context.title)
    with image:
        frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
        seconds = 0.0
        found = False
        for index in range(frames):
            try:
                picture = _frame(image, index, context.title)
            except MemagentError:
                raise
            except (OSError, ValueError, SyntaxError, EOFError) as exc:
                if index == 0:
                    raise _damaged(context.title, exc) from exc
                context.warn(f"{context.title}: skipped page {index + 1} of {frames} ({_image_reason(exc)})")
                continue
            started = time.monotonic()
            text = recognise(picture)
            seconds += time.monotonic() - started
            _report(context, index + 1, frames, seconds)
            found = found or bool(text.strip())
            yield Part(text, Place("page", index + 1, ocr=True) if frames > 1 else Place(ocr=True))
    if not found:
        context.warn(f"{context.title} has no extractable text (OCR found none)")


def _open_image(file: BinaryIO, title: str) -> Image:
    from PIL import Image as PILImage

    with warnings.catch_warnings():
        # Pillow warns (on stderr) between its pixel limit and twice it; _check_size decides.
        warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
        try:
            return PILImage.open(file)  # reads the header only
        except PILImage.DecompressionBombError:
            raise _too_large(title, None) from None
        except (OSError, ValueError, SyntaxError) as exc:  # UnidentifiedImageError is an OSError
            raise _damaged(title, exc) from exc


def _frame(image: Image, index: int, title: str) -> Image:
    """Frame `index` of `image`, its size checked before its pixels are decoded, then prepared."""
    from PIL import Image as PILImage
    from PIL import ImageOps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
        image.seek(index)
        _check_size(image, title)
        if image.format == "JPEG":
            image.draft("RGB", (MAX_SIDE, MAX_SIDE))  # a large photo decoded at a half or a quarter
        return _prepared(ImageOps.exif_transpose(image))


def _damaged(title: str, exc: BaseException) -> MemagentError:
    return unreadable(title, "image", _image_reason(exc), "Check that it is a complete, undamaged image file")


def _check_size(image: Image, title: str) -> None:
    width, height = image.size
    if width * height > MAX_IMAGE_PIXELS:
        raise _too_large(title, (width, height))


def _too_large(title: str, size: tuple[int, int] | None) -> MemagentError:
    shown = f"{size[0]:,} x {size[1]:,} pixels" if size else "too many pixels"
    return unreadable(
        title,
        "image",
        f"{shown}, over the {MAX_IMAGE_PIXELS // 1_000_000} million memagent reads",
        "Scale it down first, or crop it to the text",
    )


def _image_reason(exc: BaseException) -> str:
    from PIL import UnidentifiedImageError

    if isinstance(exc, UnidentifiedImageError):
        return "not an image Pillow can read (damaged, or not the format its name says)"
    return short_reason(exc)


def _prepared(image: Image) -> Image:
    """`image` as 8-bit RGB or RGBA (RapidOCR puts transparency on a contrasting background),
    its longer side at most MAX_SIDE. Decodes the pixels: errors in the data surface here."""
    from PIL import Image as PILImage

    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        image = _stretched(image)
    elif image.mode not in ("RGB", "RGBA", "L", "LA"):
        has_alpha = "A" in image.mode or "transparency" in image.info
        image = image.convert("RGBA" if has_alpha else "RGB")
    if max(image.size) > MAX_SIDE:
        ratio = MAX_SIDE / max(image.size)
        image = image.resize(
            (max(1, round(image.width * ratio)), max(1, round(image.height * ratio))), PILImage.Resampling.LANCZOS
        )
    else:
        image.load()
    if image.mode == "LA":
        image = image.convert("RGBA")
    return image


def _stretched(image: Image) -> Image:
    """A 16-bit or float greyscale image as 8 bits, its range stretched (Pillow's own conversion clips)."""
    import numpy as np
    from PIL import Image as PILImage

    values = np.asarray(image, dtype=np.float32)
    low, high = float(values.min()), float(values.max())
    scaled = (values - low) * (255.0 / (high - low)) if high > low else np.zeros_like(values)
    return PILImage.fromarray(scaled.astype(np.uint8), mode="L")


# --------------------------------------------------------------------------------------------
# The engine


@functools.cache
def _engine() -> Any:
    """RapidOCR with the models inside its wheel, named by path so no download is ever tried
    (without a path, rapidocr checks its model folder against the URLs of default_models.yaml),
    its logging switched off and ONNX Runtime on every core."""
    import logging
    from pathlib import Path

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnxruntime  # type: ignore[import-untyped]
        import rapidocr
        from rapidocr import RapidOCR

        # rapidocr's logger writes to stderr; ONNX Runtime's C++ log too, below errors.
        quiet = logging.getLogger("RapidOCR")
        quiet.handlers = [logging.NullHandler()]
        quiet.propagate = False
        quiet.disabled = True
        onnxruntime.set_default_logger_severity(3)

        models = Path(rapidocr.__file__).parent / "models"
        paths = {task: models / name for task, name in _MODELS.items()}
        missing = [p.name for p in paths.values() if not p.is_file()]
        if missing:
            raise MemagentError(
                f"OCR cannot start: rapidocr's models are missing ({', '.join(missing)})",
                hint=f"Reinstall it: {OCR_INSTALL} --force-reinstall",
            )
        try:
            return RapidOCR(
                params={
                    "Global.log_level": "critical",
                    "Global.max_side_len": MAX_SIDE,
                    "Det.model_path": str(paths["Det"]),
                    # At most DETECT_SIDE on the longer side. rapidocr's default instead enlarges
                    # a picture to 736 px on the shorter side: a small image (a line of text, a
                    # screenshot) took ten times as long to read, and read no better.
                    "Det.limit_type": "max",
                    "Det.limit_side_len": DETECT_SIDE,
                    "Cls.model_path": str(paths["Cls"]),
                    # The classifier votes on the page's direction (see _run) but turns no line
                    # itself: on English text it calls a fair share of upright lines upside down.
                    "Cls.cls_thresh": 1.01,
                    "Rec.model_path": str(paths["Rec"]),
                    "EngineConfig.onnxruntime.intra_op_num_threads": _cores(),
                }
            )
        except Exception as exc:
            raise MemagentError(f"OCR cannot start: {short_reason(exc)}", hint=f"Reinstall it: {OCR_INSTALL}") from exc


# The PP-OCRv6 models in the rapidocr 3.x wheel: one detector, the multilingual recogniser
# (Chinese, English and Latin-script languages) and the classifier that turns upside-down lines.
_MODELS = {"Det": "PP-OCRv6_det_small.onnx", "Rec": "PP-OCRv6_rec_small.onnx", "Cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx"}


def _cores() -> int:
    # The cores this process may run on (a container's CPU set), where the OS says.
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def recognise(picture: Any) -> str:
    """The text in `picture` (a Pillow image, or a NumPy array in BGR or grey), laid out in lines
    and paragraphs. A page scanned sideways or upside down is turned upright and read again."""
    engine = _engine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, seen, turns = _run(engine, picture)
        if turns:
            import numpy as np

            turned, _, _ = _run(engine, np.ascontiguousarray(np.rot90(seen, turns)), orient=False)
            # The vote can be wrong: an upright page read turned reads far worse. (A sideways
            # page reads about as well either way, its lines being turned one by one.)
            if _confidence(turned) > _confidence(result) - 0.05:
                result = turned
    boxes = getattr(result, "boxes", None)
    texts = getattr(result, "txts", None)
    if boxes is None or texts is None:
        return ""
    return layout([[(float(x), float(y)) for x, y in box] for box in boxes], list(texts))


def _run(engine: Any, picture: Any, *, orient: bool = True) -> tuple[Any, Any, int]:
    """RapidOCR's result for `picture`, the picture as it read it (BGR), and the quarter turns
    (counter-clockwise, for numpy.rot90) that would set the page upright: 0 for most pages.

    RapidOCR reads a line whatever its direction: it turns tall line crops a quarter and its
    classifier turns upside-down ones, but not every one (it lets doubtful ones be), and its
    boxes then follow the page's turned axes, so the reading order would come out wrong. The
    page's direction is the majority of the lines': tall or wide boxes, classified as upright or
    not. This runs RapidOCR's own steps (as its __call__ does) to see the classifier's verdicts;
    a rapidocr without them is simply called, and turned pages read as they are.
    """
    steps = ("load_img", "preprocess_img", "run_ocr_steps", "build_final_output")
    if not orient or not all(hasattr(engine, name) for name in steps):
        return engine(picture), None, 0
    original = engine.load_img(picture)
    image, record = engine.preprocess_img(original)
    det, cls, rec, crops = engine.run_ocr_steps(image, record)
    turns = _turns(getattr(det, "boxes", None), getattr(cls, "cls_res", None))
    return engine.build_final_output(original, det, cls, rec, crops, record), original, turns


def _confidence(result: Any) -> float:
    """The mean confidence of a result's characters."""
    texts, scores = getattr(result, "txts", None) or (), getattr(result, "scores", None) or ()
    total = sum(len(t) for t in texts)
    return sum(len(t) * float(s) for t, s in zip(texts, scores)) / total if total else 0.0


def _turns(boxes: Any, verdicts: Any) -> int:
    if boxes is None or not verdicts or len(boxes) != len(verdicts):
        return 0
    tall = wide = flipped = upright = 0.0
    for box, (label, _) in zip(boxes, verdicts):
        (x0, y0), (x1, y1), _, (x3, y3) = box[:4]
        across, down = float(abs(x1 - x0) + abs(y1 - y0)), float(abs(x3 - x0) + abs(y3 - y0))
        weight = max(across, down)  # a long line says more than a page number
        if down > across:
            tall += weight
        else:
            wide += weight
        if "180" in str(label):
            flipped += weight
        else:
            upright += weight
    if tall > wide:
        return -1 if flipped > upright else 1  # turned a quarter clockwise: turn it back
    return 2 if flipped > 2 * upright else 0  # a clear vote: a wrong one costs a second reading


# --------------------------------------------------------------------------------------------
# Layout


@dataclass(frozen=True)
class _Box:
    left: float
    centre: float  # vertical
    height: float  # of the text line itself, not of its (possibly skewed) bounding rectangle
    text: str
    corners: tuple[tuple[float, float], ...] = ()  # as recognised, in the picture's pixels


def layout(boxes: Sequence[Sequence[tuple[float, float]]], texts: Sequence[str]) -> str:
    """Recognised text boxes (four corners each, clockwise from top left) as text in reading
    order: top to bottom; boxes on the same line left to right, joined by a space; a blank line
    where the gap between two lines is larger than a line."""
    lines = _reading_lines(boxes, texts)
    if not lines:
        return ""
    heights = sorted(b.height for line in lines for b in line)
    typical = heights[len(heights) // 2]
    out: list[str] = []
    previous: list[_Box] | None = None
    for line in lines:
        if previous is not None:
            gap = _top(line) - _bottom(previous)
            out.append("\n\n" if gap > 0.8 * typical else "\n")
        out.append(" ".join(b.text for b in line))
        previous = line
    return "".join(out)


def _reading_lines(boxes: Sequence[Sequence[tuple[float, float]]], texts: Sequence[str]) -> list[list[_Box]]:
    """The boxes with text in lines, top to bottom, each line's boxes left to right."""
    items = []
    for corners, text in zip(boxes, texts):
        text = " ".join(text.split())
        if not text or len(corners) < 4:
            continue
        ys = [y for _, y in corners[:4]]
        height = max(1.0, min(_distance(corners[0], corners[3]), _distance(corners[0], corners[1])))
        items.append(_Box(min(x for x, _ in corners[:4]), (min(ys) + max(ys)) / 2, height, text, tuple(corners[:4])))
    items.sort(key=lambda b: b.centre)
    lines: list[list[_Box]] = []
    for box in items:
        if lines:
            line = lines[-1]
            centre = sum(b.centre for b in line) / len(line)
            if abs(box.centre - centre) < 0.5 * min(box.height, min(b.height for b in line)):
                line.append(box)
                continue
        lines.append([box])
    return [sorted(line, key=lambda b: b.left) for line in lines]


def _top(line: list[_Box]) -> float:
    return min(b.centre - b.height / 2 for b in line)


def _bottom(line: list[_Box]) -> float:
    return max(b.centre + b.height / 2 for b in line)


def _distance(a: tuple[float, float], b: tuple[float, float]) -> float:
    return float(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5)
