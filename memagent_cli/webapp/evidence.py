"""A quote's place, as the page shows it: on a PDF, the page drawn as an image (pypdfium2) with the
quote's lines marked over it, from the glyph boxes the highlighted-PDF export finds
(traces/pdfmarks.locate); in any other document, the passage with the quote marked and some text
around it (traces/quoting.paragraph). The quotes' text is read again from the sources, checked
against the run's digests (a source changed or gone since is said, as `traces show` says it), and
only from a source under the page's roots.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from ..errors import MemagentError
from ..runs.guard import Roots

PAGE_SCALE = 1.5  # pixels per PDF point of a drawn page: 918 × 1188 for a US Letter page


@dataclass(frozen=True)
class Box:
    """A marked line on a drawn page, in percent of the page's width and height from its top left."""

    left: float
    top: float
    width: float
    height: float


@dataclass(frozen=True)
class Page:
    """A PDF page a quote is on (1-based), its size as drawn (pixels), and its marked lines."""

    number: int
    width: int
    height: int
    boxes: tuple[Box, ...]


Quoted = tuple[list[dict[str, Any] | None], list[str]]
_QUOTED: collections.OrderedDict[tuple[Any, ...], Quoted] = collections.OrderedDict()
QUOTED_KEPT = 64  # runs' quotes kept read: a run's page is opened again (and once more when it ends)
_QUOTED_LOCK = threading.Lock()


def quotes_of(run: Mapping[str, Any], roots: Roots, only: int | None = None) -> Quoted:
    """`read_quotes`, kept for the sources as they are now (by size and modification time): reading a
    long PDF's text again takes seconds, and each opening of a run's page would."""
    key = (run["id"], len(run.get("quotes") or []), only, *map(_version, run.get("sources") or []))
    with _QUOTED_LOCK:
        kept = _QUOTED.get(key)
        if kept is not None:
            _QUOTED.move_to_end(key)
    if kept is None:
        kept = read_quotes(run, roots, only)
        with _QUOTED_LOCK:
            _QUOTED[key] = kept
            while len(_QUOTED) > QUOTED_KEPT:
                _QUOTED.popitem(last=False)
    return list(kept[0]), list(kept[1])  # the caller's own lists: a page adds its notes to them


def _version(source: Mapping[str, Any]) -> tuple[Any, ...] | None:
    try:
        info = os.stat(str(source.get("abspath") or source.get("path")))
    except (OSError, ValueError):
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def read_quotes(run: Mapping[str, Any], roots: Roots, only: int | None = None) -> Quoted:
    """The run's quotes (or quote number `only`, 1-based, alone) in order, each with its text read again
    and its paragraph (traces/quoting.stored_quotes), or None where it cannot be shown; and the notes
    that say why. A source outside `roots` is never read."""
    from ..traces.quoting import stored_quotes

    places = list(run.get("quotes") or [])
    sources = list(run.get("sources") or [])
    wanted = range(len(places)) if only is None else [only - 1] if 0 < only <= len(places) else []
    notes: list[str] = []
    hidden = {i for i, source in enumerate(sources) if not _under(source, roots)}
    for i in sorted(hidden & {int(places[n]["source"]) for n in wanted}):
        title = sources[i].get("title") or sources[i].get("path")
        notes.append(
            f"{title} lies outside the folders this page serves, so its quotes are not shown"
            " (memagent serve FOLDER serves its folder)."
        )
    shown = [n for n in wanted if int(places[n]["source"]) not in hidden]
    found = stored_quotes({**run, "quotes": [places[n] for n in shown]}, notes.append, context=True)
    by_place = {(q["source"], q["start"], q["end"], q["step"]): q for q in found}
    quotes: list[dict[str, Any] | None] = []
    for n in wanted:
        place = places[n]
        path = sources[int(place["source"])].get("path") if int(place["source"]) < len(sources) else None
        quotes.append(by_place.get((path, place["start"], place["end"], place.get("step"))))
    return quotes, list(dict.fromkeys(notes))


def source_index(run: Mapping[str, Any], quote: Mapping[str, Any]) -> int | None:
    """The index among the run's sources of the one a quote is from (by its path)."""
    for i, source in enumerate(run.get("sources") or []):
        if quote.get("source") in (source.get("path"), source.get("abspath")):
            return i
    return None


def pdf_pages(path: str, text: str, pages: Sequence[int] | None) -> list[Page]:
    """Where `text` is on the PDF at `path`, as marked lines on each page it spans; [] where PDFium's
    text does not hold it (the passage is shown instead)."""
    from ..traces.pdfmarks import locate

    with _opened(path) as document:
        first, last = (int(pages[0]), int(pages[-1])) if pages else (1, len(document))
        found = []
        for mark in locate(document, text, first, last):
            # the page as drawn (get_cropbox falls back to US Letter where the box is inherited)
            left, bottom, right, top = document[mark.page - 1].get_bbox()
            width, height = right - left, top - bottom
            boxes = tuple(
                Box(
                    100 * (b_left - left) / width,
                    100 * (top - b_top) / height,
                    100 * (b_right - b_left) / width,
                    100 * (b_top - b_bottom) / height,
                )
                for b_left, b_bottom, b_right, b_top in mark.boxes
            )
            found.append(Page(mark.page, round(width * PAGE_SCALE), round(height * PAGE_SCALE), boxes))
        return found


def page_png(path: str, number: int) -> bytes:
    """Page `number` (1-based) of the PDF at `path`, drawn as a PNG."""
    with _opened(path) as document:
        if not 1 <= number <= len(document):
            raise MemagentError(f"{os.path.basename(path)} has no page {number}.")
        image = document[number - 1].render(scale=PAGE_SCALE).to_pil()
        out = io.BytesIO()
        image.save(out, format="PNG", optimize=False)
        return out.getvalue()


@contextlib.contextmanager
def _opened(path: str) -> Iterator[Any]:
    """The PDF at `path` opened with PDFium, closed after; one that cannot be opened is said in a line."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    try:
        document = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        raise MemagentError(f"Cannot open {os.path.basename(path)} to draw it: {exc}.") from None
    try:
        yield document
    finally:
        document.close()


def readable_source(run: Mapping[str, Any], index: int, roots: Roots) -> str:
    """The real path of the run's source `index`, where the page may read it (under its roots, and
    the same file the run read); raises MemagentError saying why not."""
    from ..ingest.sources import file_sha256

    sources = list(run.get("sources") or [])
    if not 0 <= index < len(sources):
        raise MemagentError(f"Run {str(run['id'])[:8]} has no source {index + 1}.")
    source = sources[index]
    if not _under(source, roots):
        raise MemagentError(f"{source.get('title')} lies outside the folders this page serves.")
    real = os.path.realpath(str(source.get("abspath") or source.get("path")))
    try:
        same = file_sha256(real) == source.get("sha256")
    except OSError:
        raise MemagentError(f"{source.get('title')} is no longer at {source.get('abspath')}.") from None
    if not same:
        raise MemagentError(f"{source.get('title')} has changed since the run; its pages are not drawn.")
    return real


def _under(source: Mapping[str, Any], roots: Roots) -> bool:
    path = source.get("abspath") or source.get("path")
    if not path or source.get("kind") == "stdin" or source.get("stream"):
        return False
    return roots.covers(os.path.realpath(str(path)))
