"""A stored run's quotes, read again from their sources.

The trace store keeps where each quote is (source, character offsets, step, location) and never the
text, as it keeps no document text at all; this module owns getting the text back for `traces show`
and the exports: each source is read again (the same readers and layout as the run, so the offsets
count in the same text) once its sha256 is checked against the run's. A source gone, changed, or
read from standard input is said in one line, and its quotes are left out.
"""

from __future__ import annotations

import os
import unicodedata
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, cast

from ..core.pipeline import SourceOptions, find_sources, source_text
from ..errors import MemagentError
from ..ingest.base import STDIN_PATH, OcrMode
from ..ingest.sources import Source, file_sha256

CONTEXT_CHARS = 300  # of a quote's paragraph shown on each side of it, at most (HTML, Markdown)


def stored_quotes(run: Mapping[str, Any], warn: Callable[[str], None], context: bool = False) -> list[dict[str, Any]]:
    """The run's quotes with their text (docs/JSON.md, "quote", and `pages`: the first and last PDF
    page, or None), best first; notes to `warn`."""
    sources = run.get("sources") or []

    def read(index: int, form: str | None) -> str | None:
        return _text(sources[index], form, run, warn)

    return [
        {
            **_quote(place, text, sources[index].get("path")),
            "pages": place.get("pages"),
            **(paragraph(text, place["start"], place["end"]) if context else {}),
        }
        for place, text, index in _placed(run.get("quotes") or [], len(sources), read)
    ]


def reused_quotes(
    places: Sequence[Mapping[str, Any]],
    sources: Sequence[Source],
    ocr: str,
    warn: Callable[[str], None],
    text: str | None = None,
) -> list[dict[str, Any]]:
    """Quote records (docs/JSON.md, "quote") of a reused answer's stored `places`, their text read
    from `sources`, the documents found now (whose content is the stored run's: its answer key
    matched), or from `text`, the one document given inline (a `batch` line's context)."""
    options = SourceOptions(ocr=cast(OcrMode, ocr))  # the run's --ocr, checked when it was given

    def read(index: int, form: Any) -> str | None:  # a form the run's reader used: one of unicodedata's
        if text is not None:  # laid out alone, as `source_text` lays a file out: stripped, normalized
            return unicodedata.normalize(form, text.strip()) if form else text.strip()
        try:
            return source_text(sources[index], options, lambda _: None, form)
        except MemagentError as exc:
            warn(f"{sources[index].title} could not be read again ({exc.message}); its quotes are not shown.")
            return None

    return [_quote(place, read_text, sources[index].path) for place, read_text, index in _placed(places, len(sources), read)]


def _placed(
    places: Iterable[Mapping[str, Any]], count: int, read: Callable[[int, str | None], str | None]
) -> Iterator[tuple[Mapping[str, Any], str, int]]:
    """Each place (in order) whose source, one of `count`, can be read, with that source's text and
    index; each source read once, by `read(index, form)` (None: it cannot be, and was said why)."""
    texts: dict[int, str | None] = {}
    for place in places:
        index = int(place["source"])
        if index >= count:
            continue
        if index not in texts:
            texts[index] = read(index, place.get("form"))
        found = texts[index]
        if found is not None:
            yield place, found, index


def _quote(place: Mapping[str, Any], text: str, path: str | None) -> dict[str, Any]:
    """A quote record (docs/JSON.md, "quote") of a stored place in its source's `text`."""
    return {
        "text": text[place["start"] : place["end"]],
        "source": path,
        "location": place.get("location"),
        "start": place["start"],
        "end": place["end"],
        "step": place.get("step"),
    }


def paragraph(text: str, start: int, end: int, limit: int = CONTEXT_CHARS) -> dict[str, str]:
    """The rest of the quote's paragraph (up to a blank line, at most `limit` characters, in whole
    words) on each side: {"before", "after"}."""
    lo = max(text.rfind("\n\n", 0, start) + 2 if "\n\n" in text[:start] else 0, start - limit)
    hi = text.find("\n\n", end)
    hi = min(len(text) if hi < 0 else hi, end + limit)
    while lo < start and lo > 0 and not text[lo - 1].isspace():
        lo += 1
    while hi > end and hi < len(text) and not text[hi].isspace():
        hi -= 1
    return {"before": text[lo:start].lstrip(), "after": text[end:hi].rstrip()}


def _text(record: Mapping[str, Any], form: str | None, run: Mapping[str, Any], warn: Callable[[str], None]) -> str | None:
    title = record.get("title") or record.get("path") or "?"
    path = record.get("abspath") or record.get("path")
    if path is None or path == STDIN_PATH or not record.get("sha256"):
        warn(f"{title}: the quotes from standard input cannot be shown again (its text is not kept).")
        return None
    try:
        now = file_sha256(path)
    except OSError:
        warn(f"{title} is no longer at {path}; its quotes cannot be shown.")
        return None
    if now != record["sha256"]:
        warn(f"{title} has changed since the run; its quotes are not shown (they point into the text it had).")
        return None
    settings = run.get("settings") or {}
    options = SourceOptions(ocr=settings.get("ocr", "auto"))
    try:
        found = find_sources([path], options, lambda _: None)
        member = record.get("member")
        if member:
            found = [s for s in found if list(s.member or ()) == list(member)]
        if len(found) != 1:
            warn(f"{title}: its text could not be found again in {os.path.basename(path)}; its quotes are not shown.")
            return None
        return source_text(found[0], options, lambda _: None, form)
    except MemagentError as exc:
        warn(f"{title} could not be read again ({exc.message}); its quotes are not shown.")
        return None
