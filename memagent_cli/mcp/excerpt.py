"""The passage a piece of evidence cites: where in the text a step read, the words its memory
update added came from, so a host can quote the document rather than the model's memory.

An evidence step (memdiff.evidence_steps) added words that the final memory still holds. Its
chunk is the text the model read; the excerpt is the part of that text (at most EXCERPT_CHARS)
around those words: where an added phrase appears verbatim (case and punctuation aside), else
the stretch where the most added words gather (words rare in the chunk weigh more), else the
chunk's start. The source and location are those of the span the excerpt lies in.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..core.chunking import Chunk, Span
from ..core.events import StepRecord
from ..core.memagent import DOCUMENT_HEADER
from ..core.memdiff import changes
from ..core.provenance import describe_span, describe_spans

EXCERPT_CHARS = 300
_WORD = re.compile(r"\w+")
_HEADER = re.compile(re.escape(DOCUMENT_HEADER.split("{index}")[0]) + r"(\d+):\n")
MIN_PHRASE_WORDS = 3  # shorter added runs ("is", "2019") match by chance: they count as words only


def cite(step: StepRecord, limit: int = EXCERPT_CHARS) -> dict[str, Any]:
    """One evidence item: {step, source, location, excerpt}."""
    chunk = step.chunk
    added, _ = changes(step.previous_memory, step.memory)
    lo, hi = find_passage(chunk.text, added, limit)
    span = span_at(chunk, lo)
    return {
        "step": step.index,
        "source": span.to_dict()["path"] if span is not None else "",
        "location": describe_span(span.to_dict()) if span is not None else describe_spans([]),
        "excerpt": _cut_out(chunk.text, lo, hi),
    }


def find_passage(text: str, added: list[str], limit: int = EXCERPT_CHARS) -> tuple[int, int]:
    """The [start, end) of `text`, at most `limit` characters, that the added runs came from."""
    for run in sorted(added, key=len, reverse=True):
        words = _WORD.findall(run)
        if len(words) < MIN_PHRASE_WORDS:
            continue
        match = re.search(r"\W+".join(map(re.escape, words)), text, re.IGNORECASE)
        if match is not None:
            return _widen(text, match.start(), match.end(), limit)
    wanted = {w.lower() for run in added for w in _WORD.findall(run) if len(w) > 2}
    found = [(m.start(), m.end(), m.group().lower()) for m in _WORD.finditer(text) if m.group().lower() in wanted]
    if not found:
        return 0, min(len(text), limit)
    counts = Counter(word for _, _, word in found)
    best, best_at, score, first = -1.0, (0, 0), 0.0, 0
    for last, (_, end, word) in enumerate(found):  # the window of matches ending at `last`, as long as fits
        score += 1 / counts[word]
        while end - found[first][0] > limit:
            score -= 1 / counts[found[first][2]]
            first += 1
        if score > best:
            best, best_at = score, (found[first][0], end)
    return _widen(text, *best_at, limit)


def _widen(text: str, lo: int, hi: int, limit: int) -> tuple[int, int]:
    """[lo, hi) grown evenly on both sides to `limit` characters (or cut to it), then drawn in
    to whole words where it cuts one."""
    if hi - lo >= limit:
        hi = lo + limit
    else:
        room = limit - (hi - lo)
        left = min(lo, room // 2)
        right = min(len(text) - hi, room - left)
        left = min(lo, room - right)
        start, end = lo - left, hi + right
        while start < lo and start > 0 and not text[start - 1].isspace():
            start += 1
        while end > hi and end < len(text) and not text[end].isspace():
            end -= 1
        lo, hi = start, end
    return lo, hi


def _cut_out(text: str, lo: int, hi: int) -> str:
    """text[lo:hi] on one line, with … where it was cut."""
    body = " ".join(text[lo:hi].split())
    return ("…" if lo > 0 else "") + body + ("…" if hi < len(text) else "")


def span_at(chunk: Chunk, position: int) -> Span | None:
    """The span of the chunk that the text at `position` belongs to: that of the last document
    header before it ("Document 2:" and a title), else the chunk's first."""
    if not chunk.spans:
        return None
    source = chunk.spans[0].source
    for header in _HEADER.finditer(chunk.text, 0, max(0, position)):
        source = int(header.group(1)) - 1
    return next((span for span in chunk.spans if span.source == source), chunk.spans[0])
