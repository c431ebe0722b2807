"""Quotes: the few sentences of the sources an answer rests on, found without another model call.

This module owns how a run's answer is tied back to the exact text the model read. The answer is
written from the final memory alone, and the memory is the model's own words; but the steps whose
additions reach the final memory are known (memdiff.evidence_steps), and so is the text each of them
read, piece by piece with its source, page and character offset (chunking.Anchor). So: the answer,
and the statements of the final memory that share its words, are the claims; the sentences of the
evidence steps' text are the candidates; the candidates that hold most of the claims' words, weighted
by how rare each word is among the candidates, are the quotes.

- Sentences are cut by sentencex (Wikimedia's segmenter: ~300 languages, rules in Rust, MIT; it
  gives character offsets, so a quote stays an exact substring). A sentence longer than
  MAX_QUOTE_CHARS is cut down to the run of its clauses that holds the matched words.
- Words are compared by rapidfuzz (MIT, C++) where they are long enough to be inflected ("amendment"
  and "amendments"), exactly where they are short ("3", "May").
- A word's weight is its inverse document frequency over the candidate sentences: "the" and the
  question's own words weigh little wherever they recur, a name or a number much. No stop-word list,
  so no language is favoured.

Nothing here is shown that is not in the source: a quote is `chunk.text[a:b]` of a chunk a step
read, and where no sentence holds enough of the claims (a paraphrasing model, an answer gathered
from many places), there are no quotes and the step-level evidence stands alone.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, TypedDict

from ..ingest.base import UNIT_SEPARATOR

if TYPE_CHECKING:  # chunking brings numpy: describe_quote is for `memagent --help`'s light imports too
    from .chunking import Chunk

MAX_QUOTES = 3
MAX_QUOTE_CHARS = 300
MIN_SCORE = 0.5  # share of the claims' weight the quotes must hold together
MIN_GAIN = 0.15  # share of it each quote must add to what those before it hold
FUZZY_MIN_LENGTH = 5  # shorter words match exactly: "3" is not "8", "May" is not "Mar"
FUZZY_CUTOFF = 85.0  # rapidfuzz ratio: "amendments" matches "amendment" (95), "signed" not "signal" (67)
SEGMENTER_LANGUAGE = "en"  # sentencex's rules; its fallbacks serve other scripts

_WORD = re.compile(r"\w+", re.UNICODE)
_CLAUSE_END = re.compile(r"[;:,\n]|\s[–—-]\s")


QUOTE_FIELDS = ("text", "source", "location", "start", "end", "step")


class QuoteDict(TypedDict):
    """A quote as JSON gives it (docs/JSON.md, "quote")."""

    text: str
    source: str  # the source's path, as in the record's "sources"
    location: str  # "report.pdf p. 12"
    start: int  # character offsets into the source's own text as `inspect --text` prints it
    end: int
    step: int  # the memory step that read it


@dataclass(frozen=True)
class Quote:
    text: str
    source: int  # index into the run's sources
    path: str
    location: str
    start: int
    end: int
    step: int
    score: float  # the share of the claims' weight it holds
    form: str | None = None  # the Unicode normal form the offsets count in (the tokenizer's), if any
    pages: tuple[int, int] | None = None  # the first and last PDF page it is on, where its source has pages

    def place(self) -> dict[str, Any]:
        """Where the quote is, without its text: what the trace store keeps (docs/TRACES.md)."""
        return {
            "source": self.source,
            "start": self.start,
            "end": self.end,
            "step": self.step,
            "location": self.location,
            "form": self.form,
            "pages": list(self.pages) if self.pages else None,
        }

    def to_dict(self) -> QuoteDict:
        return {
            "text": self.text,
            "source": self.path,
            "location": self.location,
            "start": self.start,
            "end": self.end,
            "step": self.step,
        }


@dataclass(frozen=True)
class _Candidate:
    chunk: Chunk
    start: int  # character offsets in the chunk's text
    end: int
    words: frozenset[str]


def words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def find_quotes(
    answer: str,
    memory: str,
    chunks: Sequence[Chunk],
    sources: Sequence[Mapping[str, Any]],
    starts: Sequence[int | None] = (),
    form: str | None = None,
) -> list[Quote]:
    """The quotes (at most MAX_QUOTES, best first) that `answer` rests on, from `chunks` (the
    chunks of the evidence steps); none when no sentence holds enough of it. `memory` is the final
    memory; `sources` the run's source records (their "path" and "title"); `starts` each source's
    first offset read (IngestStats.source_starts), which offsets are counted from; `form` the
    normal form the text was put in (the tokenizer's), kept with each quote."""
    candidates = [c for chunk in chunks for c in _sentences(chunk)]
    if not candidates or not words(answer):
        return []
    weight = _weights(candidates)
    claims = _claims(answer, memory, weight)
    if not claims:
        return []
    matches = _matcher(claims, {w for c in candidates for w in c.words})
    total = sum(claims.values())

    # (share of the claims' weight held, order, sentence, claim words held), for those that may be quotes
    rare = _rare_answer(answer, weight)
    scored = []
    for i, candidate in enumerate(candidates):
        got = {claim for claim in claims if matches[claim] & candidate.words}
        if len(got) >= 2 or (rare is not None and got == {rare}):
            scored.append((sum(claims[w] for w in got) / total, i, candidate, got))
    # Greedy cover: the best sentence, then those that add most of what is not yet held (an answer
    # gathered from several places gets a quote for each); kept when together they hold MIN_SCORE.
    chosen: list[tuple[float, _Candidate, set[str]]] = []
    covered: set[str] = set()
    while len(chosen) < MAX_QUOTES:
        best: tuple[float, float, int, _Candidate, set[str]] | None = None
        for score, i, candidate, got in scored:
            gain = sum(claims[w] for w in got - covered) / total
            key = (gain, score, -i)
            if gain >= MIN_GAIN and (best is None or key > best[:3]):
                best = (gain, score, -i, candidate, got)
        if best is None:
            break
        chosen.append((best[1], best[3], best[4]))
        covered |= best[4]
    if sum(claims[w] for w in covered) / total < MIN_SCORE:
        return []
    quotes = []
    for score, candidate, got in chosen:
        quote = _quote(candidate, {m for claim in got for m in matches[claim]}, score, sources, starts)
        if quote is not None:
            quotes.append(replace(quote, form=form))
    return quotes


def _sentences(chunk: Chunk) -> list[_Candidate]:
    """The sentences of a chunk's document text (never its layout text: headers, separators), each
    within one source: a run of anchors of one source is segmented alone. A sentence runs on over a
    page break, as it does over a line break (the pages' separator is read as one, see
    `_page_breaks_as_lines`)."""
    from sentencex import get_sentence_boundaries

    found: list[_Candidate] = []
    for lo, hi in _source_runs(chunk):
        text = chunk.text[lo:hi]
        for b in get_sentence_boundaries(SEGMENTER_LANGUAGE, _page_breaks_as_lines(chunk, lo, text)):
            start, end = _trimmed(text, b["start_index"], b["end_index"])
            if end > start and "\ufffd" not in text[start:end]:
                found.append(_Candidate(chunk, lo + start, lo + end, frozenset(words(text[start:end]))))
    return [c for c in found if c.words]


def _page_breaks_as_lines(chunk: Chunk, lo: int, text: str) -> str:
    """`text` (the chunk's from `lo`) with the blank line between two pages (UNIT_SEPARATOR, where
    an anchor of a page follows one of a page) as a line break of the same length: sentencex ends a
    sentence at a blank line, and a sentence that a page break splits ("…is read and digested" /
    "by TeX's stomach.") is one sentence to its reader, and to a quote."""
    out = text
    for before, anchor in zip(chunk.anchors, chunk.anchors[1:]):
        at = anchor.at - lo
        if 0 < at < len(text) and _is_page(before.place) and _is_page(anchor.place) and text.startswith(UNIT_SEPARATOR, at):
            out = out[:at] + " \n" + out[at + len(UNIT_SEPARATOR) :]
    return out


def _is_page(place: Any) -> bool:
    return place is not None and place.unit == "page"


def _source_runs(chunk: Chunk) -> list[tuple[int, int]]:
    """[lo, hi) ranges of the chunk's text that are one source's text, uninterrupted."""
    runs: list[tuple[int, int]] = []
    anchors = chunk.anchors
    for k, anchor in enumerate(anchors):
        end = anchors[k + 1].at if k + 1 < len(anchors) else len(chunk.text)
        if anchor.source is None:
            continue
        if runs and anchors[k - 1].source == anchor.source and runs[-1][1] == anchor.at:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((anchor.at, end))
    return runs


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _weights(candidates: Sequence[_Candidate]) -> dict[str, float]:
    """Each word's inverse document frequency over the candidate sentences."""
    df: dict[str, int] = {}
    for c in candidates:
        for w in c.words:
            df[w] = df.get(w, 0) + 1
    n = len(candidates)
    return {w: math.log(1 + n / k) for w, k in df.items()}


def _claims(answer: str, memory: str, weight: Mapping[str, float]) -> dict[str, float]:
    """The words a quote should hold, with their weights: the answer's, twice over, and those of the
    memory's statements that share an answer word (what the memory said around the answer). A word
    no candidate holds weighs as the rarest: it counts against every sentence alike."""
    rarest = max(weight.values(), default=1.0)
    asked = set(words(answer))
    claims = {w: 2 * weight.get(w, rarest) for w in asked}
    for statement in re.split(r"(?<=[.!?])\s+|\n+", memory):
        said = set(words(statement))
        if said & asked:
            for w in said - asked:
                claims.setdefault(w, weight.get(w, rarest))
    return claims


def _matcher(claims: Mapping[str, float], vocabulary: set[str]) -> dict[str, set[str]]:
    """For each claim word, the candidates' words that count as it."""
    from rapidfuzz import fuzz, process

    long_words = [w for w in vocabulary if len(w) >= FUZZY_MIN_LENGTH]
    out: dict[str, set[str]] = {}
    for claim in claims:
        same = {claim} & vocabulary
        if len(claim) >= FUZZY_MIN_LENGTH:
            found = process.extract(claim, long_words, scorer=fuzz.ratio, score_cutoff=FUZZY_CUTOFF, limit=None)
            same |= {w for w, _, _ in found}
        out[claim] = same
    return out


def _rare_answer(answer: str, weight: Mapping[str, float]) -> str | None:
    """The answer's one word where it is a single word rare among the sentences (a name, a code):
    a sentence holding it alone may be a quote. None otherwise."""
    asked = set(words(answer))
    if len(asked) != 1:
        return None
    word = next(iter(asked))
    rarest = max(weight.values(), default=0.0)
    return word if weight.get(word, rarest) >= 0.75 * rarest else None


def _quote(
    candidate: _Candidate,
    matched: set[str],
    score: float,
    sources: Sequence[Mapping[str, Any]],
    starts: Sequence[int | None],
) -> Quote | None:
    """The candidate, tightened, as a quote located in its source."""
    from .chunking import Span

    chunk = candidate.chunk
    lo, hi = _tightened(chunk.text, candidate.start, candidate.end, matched)
    at = [a.at for a in chunk.anchors]
    first, last = bisect_right(at, lo) - 1, bisect_right(at, hi - 1) - 1
    anchor = chunk.anchors[first] if first >= 0 else None
    if anchor is None or anchor.source is None:
        return None
    src = anchor.source
    start = anchor.offset + (lo - anchor.at) - ((starts[src] if src < len(starts) else None) or 0)
    end = start + hi - lo
    within = chunk.anchors[first : last + 1]
    places = [a.place for a in within if a.place is not None and a.place.unit is not None]
    record = sources[src] if src < len(sources) else {}
    title = str(record.get("title") or record.get("path") or "?")
    part = anchor.place.part if anchor.place is not None else None
    ocr = any(a.place is not None and a.place.ocr for a in within)
    span = Span(src, title, places[0] if places else None, places[-1] if places else None, start, end, part, ocr)
    pages = [p.number for p in places if p.unit == "page" and p.number is not None and p.part is None]
    return Quote(
        chunk.text[lo:hi],
        src,
        str(record.get("path") or title),
        span.describe(),
        start,
        end,
        chunk.index,
        round(score, 3),
        pages=(pages[0], pages[-1]) if pages else None,
    )


def _tightened(text: str, start: int, end: int, matched: set[str]) -> tuple[int, int]:
    """The sentence [start, end) as a quote: whole when short; with lines broken in it (a heading
    run into the sentence, a PDF's hard line breaks), the lines from the first to the last holding a
    matched word; over MAX_QUOTE_CHARS, the run of its clauses (cut at , ; : line breaks and dashes)
    holding the most matched words, shortest first; a clause alone too long, the words around the
    first match."""
    if end - start <= MAX_QUOTE_CHARS:
        if "\n" not in text[start:end]:
            return start, end
        lines = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text[start:end])]
        held = [(a, b) for a, b in lines if set(words(text[start + a : start + b])) & matched]
        if not held:
            return start, end
        return _trimmed(text, start + held[0][0], start + held[-1][1])
    cuts = sorted({start, end, *(m.end() for m in _CLAUSE_END.finditer(text, start, end))})
    best: tuple[int, int, int] | None = None  # (-words held, length, start)
    for i in range(len(cuts) - 1):
        for j in range(i + 1, len(cuts)):
            a, b = _trimmed(text, cuts[i], cuts[j])
            if b - a > MAX_QUOTE_CHARS:
                break
            key = (-len(set(words(text[a:b])) & matched), b - a, a)
            if b > a and key[0] < 0 and (best is None or key < best):
                best = key
    if best is not None:
        return best[2], best[2] + best[1]
    first = min((m.start() for m in _WORD.finditer(text, start, end) if m.group().casefold() in matched), default=start)
    a = max(start, first - MAX_QUOTE_CHARS // 3)
    while start < a < first and not text[a - 1].isspace():
        a += 1
    b = min(end, a + MAX_QUOTE_CHARS)
    while b < end and b > a and not text[b].isspace():
        b -= 1
    return _trimmed(text, a, b)


def describe_quote(n: int, quote: Mapping[str, Any]) -> str:
    """A quote on one line, as stdout (--cite), the live view and `traces show` print it:
    `[1] report.pdf p. 12: "The 2019 amendment was signed by …"` (its white space runs as one space)."""
    return f'[{n}] {quote["location"]}: "{" ".join(str(quote["text"]).split())}"'


def describe_quotes(quotes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The quotes, best first, one numbered line each (describe_quote)."""
    return [describe_quote(n, quote) for n, quote in enumerate(quotes, 1)]


NO_QUOTE = "no sentence of the sources holds enough of the answer to quote; the evidence is where it was read"
