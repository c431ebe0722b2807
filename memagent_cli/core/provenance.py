"""How a place in the input is said to a person: "report.pdf pp. 3–5", "deck.pptx slide 12",
'data.xlsx sheet "Q3"', 'book.epub ch. 4 "The Storm"', 'page.html § "Results"',
"scan.pdf p. 3 (OCR)", "notes.txt chars 0–900".

The one formatter of provenance, for the live view, `traces show`, the exports and the JSON
docs alike. It reads span dicts (the shape `Span.to_dict` writes and traces store), so printing
a stored trace needs neither chunking nor numpy. Spans stored before units existed have only
`pages`, and read as pages."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

HEADERS_ONLY = "(document headers only)"  # a chunk of layout text alone: "Document 2:" and a title

# unit: (one, several) as the words before a number
_NUMBERED = {"page": ("p.", "pp."), "slide": ("slide", "slides"), "chapter": ("ch.", "chs."), "sheet": ("sheet", "sheets")}


def describe_span(span: Mapping[str, Any]) -> str:
    """Where a span lies, in words: see the module docstring for the forms."""
    path = str(span.get("path", "?"))
    unit = span.get("unit") or ("page" if span.get("pages") else None)
    units = span.get("units") or span.get("pages")
    labels = span.get("labels") or [None, None]
    if unit is not None and (units or any(labels)):
        where = _units(str(unit), units, labels)
        return f"{path} {where}" + (" (OCR)" if span.get("ocr") else "")
    start, end = span.get("start"), span.get("end")
    if start is not None and end is not None:
        return f"{path} chars {start:,}–{end:,}"
    return path


def _units(unit: str, units: list[int] | None, labels: list[str | None]) -> str:
    first_label, last_label = labels[0], labels[-1]
    if unit == "sheet" and first_label:  # a sheet is known by its name, not its place in the book
        return f'sheet "{first_label}"' if first_label == last_label else f'sheets "{first_label}"–"{last_label}"'
    if unit == "section":
        if first_label == last_label:
            return f'§ "{first_label}"' if first_label else "§"
        return f'§§ "{first_label or "…"}"–"{last_label or "…"}"'
    one, several = _NUMBERED.get(unit, (unit, unit + "s"))
    if not units:
        return one
    first, last = units[0], units[-1]
    if first == last:
        return f'{one} {first} "{first_label}"' if unit == "chapter" and first_label else f"{one} {first}"
    return f"{several} {first}–{last}"


def describe_extent(source: Mapping[str, Any]) -> str:
    """How much of a source was read, in its units: "12 pages", "3 slides", "1 sheet"; "" for
    running text. Reads a source record (docs/JSON.md, "source"), old traces' `pages` too."""
    unit = source.get("unit") or ("page" if source.get("pages") else None)
    count = source.get("units") or source.get("pages")
    if not unit or not count:
        return ""
    return f"{count:,} {unit}" + ("" if count == 1 else "s")


def describe_spans(spans: Iterable[Mapping[str, Any]]) -> str:
    """Every span of a chunk, joined by "; "."""
    return "; ".join(describe_span(s) for s in spans) or HEADERS_ONLY
