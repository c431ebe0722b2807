"""How a place in the input is said to a person: "report.pdf pp. 3–5", "notes.txt chars 0–900".

The one formatter of provenance, for the live view, `traces show`, the exports and the JSON
docs alike. It reads span dicts (the shape `Span.to_dict` writes and traces store), so printing
a stored trace needs neither chunking nor numpy."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

HEADERS_ONLY = "(document headers only)"  # a chunk of layout text alone: "Document 2:" and a title


def describe_span(span: Mapping[str, Any]) -> str:
    """'report.pdf p. 3', 'report.pdf pp. 3–5', or 'notes.txt chars 0–900' for text without pages."""
    path = str(span.get("path", "?"))
    pages = span.get("pages")
    if pages:
        first, last = pages[0], pages[-1]
        return f"{path} p. {first}" if first == last else f"{path} pp. {first}–{last}"
    start, end = span.get("start"), span.get("end")
    if start is not None and end is not None:
        return f"{path} chars {start:,}–{end:,}"
    return path


def describe_spans(spans: Iterable[Mapping[str, Any]]) -> str:
    """Every span of a chunk, joined by "; "."""
    return "; ".join(describe_span(s) for s in spans) or HEADERS_ONLY
