"""A PDF source with a run's quotes highlighted (`traces export RUN --format pdf`).

This module owns putting quotes back on the page: a copy of the PDF with one `/Highlight` annotation
per quote, its QuadPoints over the quote's glyphs (one quadrilateral per line), and one note (`/Text`)
annotation holding the question and the answer. The page content is not touched, so every viewer
shows the highlights and lists them, and the text is what it was.

- **Where the glyphs are: pypdfium2** (PDFium's bindings; Apache-2.0 and BSD-3-Clause, already what
  memagent renders scanned pages with for OCR): each character's box in page space. pypdf only gives
  positions per text-showing operator, not per glyph.
- **Writing the annotations: pypdf** (BSD-3-Clause, memagent's PDF reader): its annotation classes
  write the dictionaries the PDF specification names, and a clone keeps every page as it was.

A quote's text is what memagent's reader (pypdf) extracted and tidied (ingest/pdftext.py); PDFium
extracts the same page with other white space and ligatures ("ﬁ" as "fi"), its line-end hyphens as
U+FFFE, its contents' leader dots, its running heads and its tables' cells without " | ". So both are
compared in NFKC form, case folded, without white space, hyphens and "|", a run of dots as one, each
character of PDFium's text keeping its index; a quote that a page break splits is found piece by
piece (its pieces in order, at most `MAX_GAP` characters apart: the running foot and head memagent
left out), as is one that runs over a table's cells. A page without a text layer (a scan, which
memagent read with OCR) is read again with RapidOCR, as memagent read it, and the quote is highlighted
over the boxes of the words it recognised (`ingest.ocr.page_boxes`). A quote found neither way is left
unhighlighted and said.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import MemagentError

HIGHLIGHT_COLOR = "ffeb3b"
MAX_GAP = 400  # folded characters between a quote's pieces on the page: a running foot and head
# Left out of both sides of the comparison: hyphens (memagent joins "com-" + "mands", PDFium gives
# U+FFFE), U+FFFE/U+FFFF (PDFium's own marks) and "|" (memagent parts a table's cells with " | ").
# A run of dots is compared as one (memagent shortens leader dots to "…", which NFKC makes "...").
_UNCOMPARED = frozenset("-\u2010\u00ad\ufffe\uffff|")
# Where a quote is found piece by piece: a page break, a table's cell boundary
_PIECES = re.compile(r"\n\n| \| ")


@dataclass(frozen=True)
class Marked:
    """A quote put on the page: its 1-based page and the line boxes (left, bottom, right, top)."""

    page: int
    boxes: tuple[tuple[float, float, float, float], ...]


def _folded(text: str, at: int = 0) -> tuple[str, list[int]]:
    """`text` in NFKC, case folded, without white space and hyphens, each run of dots as one; and
    for each character left, the index in `text` (plus `at`) it came from."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        for c in unicodedata.normalize("NFKC", ch).casefold():
            if c.isspace() or c in _UNCOMPARED or (c == "." and out and out[-1] == "."):
                continue
            out.append(c)
            where.append(at + i)
    return "".join(out), where


def locate(document: Any, quote: str, first_page: int, last_page: int) -> list[Marked]:
    """Where `quote` is in `document` (a pypdfium2 PdfDocument) between the 1-based pages given
    (one page either side too, for a quote that a page break splits), as line boxes per page; []
    when PDFium's text does not hold it."""
    wanted, _ = _folded(quote)
    if not wanted:
        return []
    lo, hi = max(1, first_page), min(len(document), last_page + 1)
    texts: list[tuple[int, Any, int]] = []  # (page number, text page, offset in the joined folded text)
    joined: list[str] = []
    owner: list[tuple[int, int]] = []  # per folded character: (index into texts, char index on its page)
    for number in range(lo, hi + 1):
        textpage = document[number - 1].get_textpage()
        count = textpage.count_chars()
        text = textpage.get_text_range(0, count) if count else ""
        folded, where = _folded(text)
        texts.append((number, textpage, len(joined)))
        joined.extend(folded)
        owner.extend((len(texts) - 1, i) for i in where)
    spans = _spans("".join(joined), wanted, quote)
    if not spans:
        return _locate_scanned(document, wanted, [(number, textpage) for number, textpage, _ in texts])
    chars = [place for start, end in spans for place in owner[start:end]]
    marks: list[Marked] = []
    for k, (number, textpage, _) in enumerate(texts):
        mine = sorted({i for page, i in chars if page == k})
        if mine:
            boxes = _lines([textpage.get_charbox(i) for i in range(mine[0], mine[-1] + 1)])
            if boxes:
                marks.append(Marked(number, tuple(boxes)))
    return marks


def _spans(text: str, wanted: str, quote: str) -> list[tuple[int, int]]:
    """Where `wanted` (the folded `quote`) is in `text` (folded pages): one span, or, for a quote
    that a page break splits (its "\n\n") or that runs over a table's cells (" | ", which the page
    may draw in another order), one span per piece, in order, each at most MAX_GAP characters after
    the last; [] where it is not."""
    found = text.find(wanted)
    if found >= 0:
        return [(found, found + len(wanted))]
    pieces = [folded for folded, _ in map(_folded, _PIECES.split(quote)) if folded]
    if len(pieces) < 2:
        return []
    start = text.find(pieces[0])
    while start >= 0:
        spans = [(start, start + len(pieces[0]))]
        for piece in pieces[1:]:
            at = spans[-1][1]
            found = text.find(piece, at, at + MAX_GAP + len(piece))
            if found < 0:
                break
            spans.append((found, found + len(piece)))
        else:
            return spans
        start = text.find(pieces[0], start + 1)
    return []


def _locate_scanned(document: Any, wanted: str, pages: Sequence[tuple[int, Any]]) -> list[Marked]:
    """`wanted` (folded) on the pages without a text layer, over the boxes of the words OCR reads
    there; [] where there are none, or OCR is not installed, or it reads the quote otherwise."""
    from ..ingest.ocr import ocr_available, page_boxes

    scanned = [number for number, textpage in pages if textpage.count_chars() == 0]
    if not scanned or not ocr_available():
        return []
    joined: list[str] = []
    owner: list[tuple[int, int, int]] = []  # per folded character: page, box, its index in the box
    boxes: list[tuple[tuple[float, float, float, float], int]] = []  # each box, and its folded length
    for number in scanned:
        for text, box in page_boxes(document, number):
            folded, _ = _folded(text)
            joined.append(folded)
            owner.extend((number, len(boxes), i) for i in range(len(folded)))
            boxes.append((box, len(folded)))
    found = "".join(joined).find(wanted)
    if found < 0:
        return []
    spans: dict[tuple[int, int], list[int]] = {}  # (page, box): the quote's first and last character in it
    for number, k, i in owner[found : found + len(wanted)]:
        span = spans.setdefault((number, k), [i, i])
        span[1] = i
    marks: dict[int, list[tuple[float, float, float, float]]] = {}
    for (number, k), (first, last) in spans.items():
        (left, bottom, right, top), n = boxes[k]
        # A box is a run of words, often a whole line: the quote's share of it, by its characters.
        width = (right - left) / max(1, n)
        marks.setdefault(number, []).append((left + first * width, bottom, left + (last + 1) * width, top))
    return [Marked(number, tuple(_lines(found_boxes))) for number, found_boxes in marks.items()]


def _lines(charboxes: Sequence[tuple[float, float, float, float]]) -> list[tuple[float, float, float, float]]:
    """Character boxes (left, bottom, right, top) joined into one box per line: a box starts a new
    line where it does not overlap the line's height or runs back to the left."""
    lines: list[list[float]] = []
    for left, bottom, right, top in charboxes:
        if right <= left or top <= bottom:  # generated characters (line breaks) have no box
            continue
        if lines:
            line = lines[-1]
            overlap = min(top, line[3]) - max(bottom, line[1])
            if overlap > 0.3 * min(top - bottom, line[3] - line[1]) and left >= line[0] - 1:
                line[0], line[1], line[2], line[3] = (
                    min(line[0], left),
                    min(line[1], bottom),
                    max(line[2], right),
                    max(line[3], top),
                )
                continue
        lines.append([left, bottom, right, top])
    return [(a, b, c, d) for a, b, c, d in lines]


def highlight(
    source: Path, quotes: Sequence[Mapping[str, Any]], note: str, destination: Path, password: str | None = None
) -> tuple[int, list[str]]:
    """Writes `destination`: `source` with each quote (its `text` and `pages`) highlighted and `note`
    in a note annotation on the first quote's page. Returns how many quotes were highlighted and the
    texts of those that could not be found on their pages."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]
    from pypdf import PdfReader, PdfWriter
    from pypdf.annotations import Highlight, Text
    from pypdf.generic import ArrayObject, FloatObject, NameObject, TextStringObject

    try:
        document = pdfium.PdfDocument(str(source), password=password)
    except pdfium.PdfiumError as exc:
        raise MemagentError(
            f"Cannot open {source} to highlight it: {exc}.", "Check that the PDF is there and readable."
        ) from None
    try:
        marks: list[tuple[Mapping[str, Any], list[Marked]]] = []
        missing: list[str] = []
        for quote in quotes:
            pages = quote.get("pages") or [1, len(document)]
            found = locate(document, str(quote["text"]), int(pages[0]), int(pages[-1]))
            if found:
                marks.append((quote, found))
            else:
                missing.append(str(quote["text"]))
    finally:
        document.close()
    reader = PdfReader(str(source))
    if reader.is_encrypted:
        reader.decrypt(password or "")
    writer = PdfWriter(clone_from=reader)
    for n, (quote, found) in enumerate(marks, 1):
        for mark in found:
            quads: list[float] = []
            for left, bottom, right, top in mark.boxes:
                quads += [left, top, right, top, left, bottom, right, bottom]  # upper left, upper right, lower left, lower right
            rect = (
                min(b[0] for b in mark.boxes),
                min(b[1] for b in mark.boxes),
                max(b[2] for b in mark.boxes),
                max(b[3] for b in mark.boxes),
            )
            annotation = Highlight(
                rect=rect, quad_points=ArrayObject(FloatObject(v) for v in quads), highlight_color=HIGHLIGHT_COLOR, printing=True
            )
            annotation[NameObject("/Contents")] = TextStringObject(f"[{n}] {quote.get('location', '')}")
            annotation[NameObject("/T")] = TextStringObject("memagent")
            writer.add_annotation(page_number=mark.page - 1, annotation=annotation)
    if marks:
        first = marks[0][1][0]
        left, _, _, top = first.boxes[0]
        comment = Text(rect=(max(0.0, left - 24), top, max(0.0, left - 24) + 20, top + 20), text=note, open=False)
        comment[NameObject("/T")] = TextStringObject("memagent")
        writer.add_annotation(page_number=first.page - 1, annotation=comment)
    try:
        with open(destination, "wb") as out:
            writer.write(out)
    except OSError as exc:
        raise MemagentError(f"Cannot write {destination}: {exc.strerror}.", "Name a file in a folder you can write to.") from None
    return len(marks), missing
