"""OCR: image files and PDF pages without a text layer, read with RapidOCR (the ocr extra).

The pictures are made here: a page of large Helvetica text written by fpdf2 and rendered by
pypdfium2, so no system font is needed. OCR is not exact, so recognised text is checked for its
key words (lowercased) and their order; places, notes and errors are checked exactly.
"""

from __future__ import annotations

import io
import socket
import struct
import zlib
from typing import Any

import pytest

pytest.importorskip("rapidocr")
pytest.importorskip("pypdfium2")

from fpdf import FPDF  # noqa: E402
from PIL import Image  # noqa: E402

from memagent_cli.errors import MemagentError  # noqa: E402
from memagent_cli.ingest import ocr  # noqa: E402
from memagent_cli.ingest.base import OcrProgress, Place, ReadContext  # noqa: E402
from memagent_cli.ingest.sources import collect_sources, read_source  # noqa: E402

FIRST = ["Quarterly report of the river company", "Shipments rose by twelve percent in March"]
FIRST_WORDS = ["quarterly", "report", "river", "company", "shipments", "twelve", "percent", "march"]
SECOND = ["Lighthouse keepers signed the second page"]
SECOND_WORDS = ["lighthouse", "keepers", "signed", "second"]


def _text_pdf(lines: list[str], *, size: int = 16) -> bytes:
    """A small page of Helvetica lines with a text layer."""
    pdf = FPDF(unit="mm", format=(130, 12 + 9 * len(lines)))
    pdf.set_margins(6, 6, 6)
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("Helvetica", size=size)
    for line in lines:
        pdf.cell(0, 9, line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def _picture(lines: list[str]) -> Image.Image:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(_text_pdf(lines))
    try:
        return document[0].render(scale=200 / 72).to_pil().convert("RGB")
    finally:
        document.close()


def _scanned_pdf(*pages: Image.Image | list[str]) -> bytes:
    """A PDF whose pages are the given pictures (no text layer) or text lines (a text layer)."""
    pdf = FPDF(unit="mm")
    pdf.set_auto_page_break(False)
    for page in pages:
        if isinstance(page, Image.Image):
            width = 130
            pdf.add_page(format=(width, width * page.height / page.width))
            pdf.image(page, x=0, y=0, w=width)
        else:
            pdf.add_page(format=(130, 12 + 9 * len(page)))
            pdf.set_font("Helvetica", size=16)
            pdf.set_xy(6, 6)
            for line in page:
                pdf.cell(0, 9, line, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


@pytest.fixture(scope="module")
def first() -> Image.Image:
    return _picture(FIRST)


@pytest.fixture(scope="module")
def second() -> Image.Image:
    return _picture(SECOND)


def _read(path: Any, notes: list[str], progress: list[OcrProgress] | None = None, **options: Any) -> list[Any]:
    sources = collect_sources([str(path)], warn=notes.append)
    assert len(sources) == 1
    return list(read_source(sources[0], warn=notes.append, on_ocr=progress.append if progress is not None else None, **options))


def _has_words(text: str, words: list[str]) -> None:
    lowered = text.lower()
    missing = [w for w in words if w not in lowered]
    assert not missing, f"{missing} not in {text!r}"


def _in_order(text: str, *words: str) -> None:
    lowered = text.lower()
    positions = [lowered.index(w) for w in words]
    assert positions == sorted(positions), text


# --------------------------------------------------------------------------------------------
# Image files


def test_png_is_recognised_as_one_unit_in_reading_order(tmp_path: Any, first: Image.Image) -> None:
    path = tmp_path / "scan.png"
    first.save(path)
    notes: list[str] = []
    progress: list[OcrProgress] = []
    segments = _read(path, notes, progress)
    assert [s.place for s in segments] == [Place(ocr=True)]
    _has_words(segments[0].text, FIRST_WORDS)
    _in_order(segments[0].text, "quarterly", "river", "shipments", "march")
    assert "\n" in segments[0].text  # the two lines stay two lines
    assert [(p.title, p.done, p.total) for p in progress] == [(str(path), 1, 1)]
    assert notes == []


def test_multipage_tiff_gives_one_page_per_frame(tmp_path: Any, first: Image.Image, second: Image.Image) -> None:
    path = tmp_path / "fax.tiff"
    first.save(path, save_all=True, append_images=[second.convert("L")], compression="tiff_lzw")
    notes: list[str] = []
    progress: list[OcrProgress] = []
    segments = _read(path, notes, progress)
    assert [s.place for s in segments] == [Place("page", 1, ocr=True), Place("page", 2, ocr=True)]
    _has_words(segments[0].text, FIRST_WORDS)
    _has_words(segments[1].text, SECOND_WORDS)
    assert "lighthouse" not in segments[0].text.lower()
    assert [(p.done, p.total) for p in progress] == [(1, 2), (2, 2)]
    assert progress[1].seconds >= progress[0].seconds > 0


def test_a_page_scanned_sideways_reads_in_order() -> None:
    # Lines of falling length: read as they lie, the boxes of a turned page would come out
    # shortest first.
    lines = ["The longest line of this page comes first here", "then a short one", "and a middling line at the end"]
    turned = _picture(lines).transpose(Image.Transpose.ROTATE_270)  # a quarter turn clockwise
    buffer = io.BytesIO()
    turned.save(buffer, format="PNG")
    buffer.seek(0)
    parts = list(ocr.read_image(buffer, ReadContext("turned.png", "turned.png", lambda note: None)))
    assert len(parts) == 1
    _has_words(parts[0].text, ["longest", "first", "short", "middling", "end"])
    _in_order(parts[0].text, "longest", "short", "middling")


def test_junk_named_png_is_one_line_error(tmp_path: Any) -> None:
    path = tmp_path / "photo.png"
    path.write_bytes(b"this is not a picture at all\n" * 20)
    with pytest.raises(MemagentError) as caught:
        _read(path, [])
    message = str(caught.value)
    assert (
        caught.value.message
        == f"Cannot read image {path}: not an image Pillow can read (damaged, or not the format its name says)"
    )
    assert "\n" not in message and "Traceback" not in message


def test_truncated_png_is_one_line_error(tmp_path: Any, first: Image.Image) -> None:
    whole = io.BytesIO()
    first.save(whole, format="PNG")
    path = tmp_path / "cut.png"
    path.write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    with pytest.raises(MemagentError) as caught:
        _read(path, [])
    assert caught.value.message.startswith(f"Cannot read image {path}: ")
    assert "truncated" in caught.value.message and "\n" not in str(caught.value)


def test_image_without_text_says_so(tmp_path: Any) -> None:
    path = tmp_path / "blank.png"
    Image.new("RGB", (400, 300), "white").save(path)
    notes: list[str] = []
    assert _read(path, notes) == []
    assert notes == [f"{path} has no extractable text (OCR found none)"]


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares width x height pixels but holds almost no data: costless unless decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("width", "height", "said"),
    [
        (60_000, 60_000, "too many pixels"),  # past Pillow's own bomb limit: refused as Pillow opens it
        (12_000, 10_000, "12,000 x 10,000 pixels"),  # under Pillow's limit, over memagent's
    ],
)
def test_huge_image_is_refused_before_decoding(tmp_path: Any, width: int, height: int, said: str) -> None:
    path = tmp_path / "poster.png"
    path.write_bytes(_png_header_only(width, height))
    with pytest.raises(MemagentError) as caught:
        _read(path, [])
    assert caught.value.message == f"Cannot read image {path}: {said}, over the 100 million memagent reads"


def test_image_without_the_ocr_extra_names_the_install(monkeypatch: pytest.MonkeyPatch, first: Image.Image) -> None:
    monkeypatch.setattr(ocr, "ocr_available", lambda: False)
    buffer = io.BytesIO()
    first.save(buffer, format="PNG")
    buffer.seek(0)
    with pytest.raises(MemagentError) as caught:
        list(ocr.read_image(buffer, ReadContext("a.png", "a.png", lambda note: None)))
    assert ocr.OCR_INSTALL in str(caught.value)


# --------------------------------------------------------------------------------------------
# PDF pages


def test_scanned_page_of_a_pdf_is_recognised_and_reported(tmp_path: Any, second: Image.Image) -> None:
    path = tmp_path / "mixed.pdf"
    path.write_bytes(_scanned_pdf(["Typed page about harbour tides"], second))
    notes: list[str] = []
    progress: list[OcrProgress] = []
    segments = _read(path, notes, progress)
    assert [s.place for s in segments] == [Place("page", 1), Place("page", 2, ocr=True)]
    assert segments[0].text.strip() == "Typed page about harbour tides"
    _has_words(segments[1].text, SECOND_WORDS)
    assert segments[1].text.startswith("\n\n")
    assert [(p.title, p.done, p.total) for p in progress] == [(str(path), 2, 2)]
    assert notes == []


def test_ocr_never_reads_nothing_from_a_scanned_pdf_and_says_so(tmp_path: Any, first: Image.Image) -> None:
    path = tmp_path / "scan.pdf"
    path.write_bytes(_scanned_pdf(first))
    notes: list[str] = []
    progress: list[OcrProgress] = []
    assert _read(path, notes, progress, ocr="never") == []
    assert notes == [f"{path} has no extractable text (it may be scanned; OCR is off: --ocr never)"]
    assert progress == []


def test_ocr_always_rereads_a_page_with_a_text_layer(tmp_path: Any) -> None:
    path = tmp_path / "typed.pdf"
    path.write_bytes(_text_pdf(FIRST))
    notes: list[str] = []
    segments = _read(path, notes, ocr="always")
    assert [s.place for s in segments] == [Place("page", 1, ocr=True)]
    _has_words(segments[0].text, FIRST_WORDS)
    assert notes == []


# --------------------------------------------------------------------------------------------
# The engine and the layout


def test_engine_loads_offline_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], second: Image.Image
) -> None:
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    ocr._engine.cache_clear()
    _has_words(ocr.recognise(second), SECOND_WORDS)
    assert attempts == []
    assert capfd.readouterr() == ("", "")


def _box(left: float, top: float, right: float, bottom: float) -> list[tuple[float, float]]:
    return [(left, top), (right, top), (right, bottom), (left, bottom)]


def test_layout_joins_lines_and_splits_paragraphs() -> None:
    boxes = [
        _box(300, 102, 500, 122),  # the right half of the first line, found first
        _box(10, 100, 280, 120),
        _box(10, 130, 400, 150),
        _box(10, 190, 400, 210),  # after a gap of two lines: a new paragraph
        _box(10, 220, 90, 240),
    ]
    texts = ["line one,", "This is", "line  two.", "New paragraph", " "]
    assert ocr.layout(boxes, texts) == "This is line one,\nline two.\n\nNew paragraph"
    assert ocr.layout([], []) == ""
