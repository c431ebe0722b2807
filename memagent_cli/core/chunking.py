"""From source segments to token chunks with provenance, streamed.

The reference tokenizes the whole document (stripped) at once and cuts consecutive slices
of `chunk_tokens` ids. We get the same ids without holding the document: text is
tokenized in blocks cut only where a letter is followed by a non-letter, where no
pre-token of the byte-level BPE patterns can span the cut, so block-wise ids equal
whole-text ids (tests check this at thousands of cuts). A block with no such place just
grows until one comes or the input ends.

Several sources are laid out as the training data was: `Document {i}:\\n{title}\\n{text}`
blocks joined by a blank line (a source with no text, one skipped as unreadable, has none); one
source is its text alone.

Where the model's tokenizer normalizes text (NFC, Qwen's), the laid-out text is normalized before
it is cut, as the reference tokenizes the normalized document: chunk text, the prompts built from
it and the spans' character offsets (counted in each source's normalized text) all agree.
"""

from __future__ import annotations

import hashlib
import re
import sys
import unicodedata
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence, TypedDict

from ..ingest.base import Place
from ..ingest.sources import Segment, Source
from ..model.tokenizer import Tokenizer, normalizer
from .memagent import DOCUMENT_HEADER, DOCUMENT_SEPARATOR
from .provenance import describe_span, describe_spans

# Characters gathered before a block is tokenized: enough that tokenizer calls are few, few
# enough that a slow pipe's text reaches the model soon (a chunk is ~20K characters).
MIN_BLOCK_CHARS = 1 << 14
# Past this, a block with no safe cut (a multi-megabyte run of "=" or white space, which is a
# single pre-token) is tokenized where it stands: exact ids there would cost the whole run in
# memory and ~0.8 us per character in BPE; the ids near such a cut may differ by a token.
MAX_BLOCK_CHARS = 1 << 22


@dataclass(frozen=True)
class Piece:
    """Laid-out document text. `source` is None for layout text (headers, separators)."""

    text: str
    source: int | None = None
    place: Place | None = None  # where in its source: page, slide, sheet…; None for layout text
    offset: int = 0  # character offset of `text` in its source's text


class SpanDict(TypedDict):
    """A span as JSON, traces and `describe_span` give it (docs/JSON.md, "span")."""

    source: int
    path: str  # the source's title, and "/" and the part for a document inside it (an attachment)
    unit: str | None  # "page", "slide", "sheet", "chapter", "section"; None for running text
    units: list[int] | None  # [first, last] unit numbers
    labels: list[str | None] | None  # [first, last] unit labels: sheet names, chapter titles, headings
    pages: list[int] | None  # [first, last] when the unit is a page, else None
    ocr: bool  # some of the span's text was recognised from a page image
    start: int
    end: int


@dataclass(frozen=True)
class Span:
    """The part of one source (and of one document inside it) a chunk covers."""

    source: int
    title: str
    first: Place | None  # the first and last places with a unit (None: running text)
    last: Place | None
    start: int  # character offsets within the source's extracted text
    end: int
    part: str | None = None  # the document inside the source (an attachment), as Place.part
    ocr: bool = False

    @property
    def first_page(self) -> int | None:
        return self.first.page if self.first is not None else None

    @property
    def last_page(self) -> int | None:
        return self.last.page if self.last is not None else None

    def describe(self) -> str:
        return describe_span(self.to_dict())

    def to_dict(self) -> SpanDict:
        first, last = self.first, self.last
        unit = first.unit if first is not None and last is not None else None
        units = [first.number, last.number] if first and last and first.number is not None and last.number is not None else None
        return {
            "source": self.source,
            "path": f"{self.title}/{self.part}" if self.part else self.title,
            "unit": unit,
            "units": units,
            "labels": [first.label, last.label] if first is not None and last is not None else None,
            "pages": units if unit == "page" else None,
            "ocr": self.ocr,
            "start": self.start,
            "end": self.end,
        }


@dataclass(frozen=True)
class Anchor:
    """Where a run of a chunk's text comes from: from character `at` of the chunk's text on (to
    the next anchor), the text of source `source` from its character `offset` (counted as spans
    count), at `place`. `source` None is layout text (a "Document 2:" header, a separator). Quotes
    are located by these, to the page and the character."""

    at: int
    source: int | None
    offset: int
    place: Place | None


@dataclass(frozen=True)
class Chunk:
    index: int  # 1-based, the memory step that reads it
    text: str
    tokens: int
    spans: tuple[Span, ...]
    end_token: int  # document tokens read up to and including this chunk
    anchors: tuple[Anchor, ...] = ()  # one per piece of laid-out text in the chunk, in order
    # the chunk's ids (InfMem cuts its retrieval units from them), 4 bytes each: an InfMem run holds
    # every chunk of its input; not part of a chunk's identity
    ids: Sequence[int] = field(default=(), repr=False, compare=False)

    def describe(self) -> str:
        """Where the chunk's text came from, e.g. "report.pdf pp. 3–5; notes.txt chars 0–900"."""
        return describe_spans(span.to_dict() for span in self.spans)

    @property
    def digest(self) -> str:
        """What the chunk says, as a digest of its token ids (sha256 of them as little-endian 32-bit
        numbers): a later run whose chunk has the same digest reads the same text (reuse.Continued)."""
        ids = array("I", self.ids)
        if sys.byteorder == "big":
            ids.byteswap()
        return hashlib.sha256(ids.tobytes()).hexdigest()


@dataclass
class IngestStats:
    """Counts filled in while the document is read; final once `done` is set."""

    document_tokens: int = 0
    source_tokens: list[int] = field(default_factory=list)
    source_pages: list[int] = field(default_factory=list)  # per source: the last unit number read (page, slide…)
    source_units: list[str | None] = field(default_factory=list)  # per source: the unit it is read in
    # per source: the offset (as spans count) of its first character that is read, the white space
    # before it being stripped; offsets less this are offsets into what `inspect --text` prints of it
    source_starts: list[int | None] = field(default_factory=list)
    held_tokens: int = 0  # the end of a document still being written, left unread (iter_chunks' hold_last)
    done: bool = False

    def source_records(self, sources: Sequence[Source]) -> list[dict[str, Any]]:
        """Each source as --json lists it (docs/JSON.md, "source"); a trace adds its fingerprint."""
        return [
            {
                "path": s.path,
                "title": s.title,
                "kind": s.kind,
                "size": s.size,
                "pages": (self.source_pages[i] or None) if self.source_units[i] == "page" else None,
                "unit": self.source_units[i],
                "units": self.source_pages[i] or None,
                "tokens": self.source_tokens[i],
            }
            for i, s in enumerate(sources)
        ]


def layout(sources: Sequence[Source], read: Callable[[Source], Iterable[Segment]]) -> Iterator[Piece]:
    """The document as the model reads it: stripped text, with headers for several sources.

    Of several sources, one that gives no text (a file in a folder skipped as unreadable, an empty
    one) gets no header either: a document's header is laid out before its first text, and the
    documents shown are numbered 1, 2, … as if it were not there. Its note says why."""
    several = len(sources) > 1
    stripper = _Stripper()
    shown = 0  # documents laid out so far
    for i, source in enumerate(sources):
        if several:
            body, headed = _Stripper(), False
            for seg in read(source):
                for piece in body.feed(Piece(seg.text, i, seg.place, seg.offset)):
                    if not headed:  # the source's first text: its header goes first
                        headed = True
                        shown += 1
                        if shown > 1:
                            yield from stripper.feed(Piece(DOCUMENT_SEPARATOR), layout=True)
                        yield from stripper.feed(Piece(DOCUMENT_HEADER.format(index=shown, title=source.title)), layout=True)
                    yield piece
        else:
            for seg in read(source):
                yield from stripper.feed(Piece(seg.text, i, seg.place, seg.offset))


class _Stripper:
    """Streaming str.strip(): drops leading white space, holds trailing white space back
    until more text proves it is not trailing."""

    def __init__(self) -> None:
        self.started = False
        self.held: list[Piece] = []

    def feed(self, piece: Piece, layout: bool = False) -> Iterator[Piece]:
        text = piece.text
        if layout:  # layout text is emitted as is, and ends any held white space's doubt
            yield from self.held
            self.held = []
            self.started = True
            yield piece
            return
        if not self.started:
            stripped = text.lstrip()
            piece = Piece(stripped, piece.source, piece.place, piece.offset + len(text) - len(stripped))
            text = stripped
            if not text:
                return
            self.started = True
        body = text.rstrip()
        if not body:
            self.held.append(piece)
            return
        yield from self.held
        self.held = []
        yield Piece(body, piece.source, piece.place, piece.offset)
        if len(body) < len(text):
            self.held.append(Piece(text[len(body) :], piece.source, piece.place, piece.offset + len(body)))


def normalized(pieces: Iterable[Piece], normalize: Callable[[str], str]) -> Iterator[Piece]:
    """The pieces with their text normalized (`normalize`: NFC), so that their concatenation is the
    normalization of the whole text, and offsets counted in each source's normalized text.

    Normalizing can join characters across a piece's end ("e" | U+0301 -> "é", in a text file read
    in blocks), so a piece's tail from its last normalization boundary is held back and normalized
    with what follows it in the same source. A source's pieces are consecutive in its text, and the
    white space `layout` strips keeps its length under NFC, so a per-source shift maps offsets."""
    shift: dict[int | None, int] = {}  # per source: normalized offset - original offset

    def emit(p: Piece) -> Piece:
        text = normalize(p.text)
        moved = shift.get(p.source, 0)
        shift[p.source] = moved + len(text) - len(p.text)
        return Piece(text, p.source, p.place, p.offset + moved)

    held: Piece | None = None
    for piece in pieces:
        if not piece.text:
            continue
        if held is not None:
            # What of this piece is normalized with the held text: all of it where it goes on in the
            # same place, else the characters before its first boundary (none after a page break).
            take = 0
            if piece.source is not None and piece.source == held.source and held.offset + len(held.text) == piece.offset:
                take = len(piece.text) if piece.place == held.place else _first_boundary(piece.text)
            joined = Piece(held.text + piece.text[:take], held.source, held.place, held.offset)
            piece = Piece(piece.text[take:], piece.source, piece.place, piece.offset + take)
            held = None
            if piece.text:
                yield emit(joined)
            else:
                piece = joined
        if _boundary_after(piece.text[-1]):  # the usual case: nothing to hold, the piece stays whole
            yield emit(piece)
            continue
        cut = _last_boundary(piece.text)
        if not cut and len(piece.text) >= MAX_BLOCK_CHARS:  # megabytes of combining marks: not held for ever
            yield emit(piece)
            continue
        if cut:
            yield emit(Piece(piece.text[:cut], piece.source, piece.place, piece.offset))
        held = Piece(piece.text[cut:], piece.source, piece.place, piece.offset + cut)
    if held is not None:
        yield emit(held)


def _boundary_before(ch: str) -> bool:
    """Whether normalization never joins `ch` to what precedes it: no combining mark (these reorder
    and compose), no Hangul vowel or final jamo (they compose with a syllable before them). Checked
    against Python's Unicode tables: every character composing with a preceding one is one of these."""
    if ch < "\x80":
        return True
    if unicodedata.combining(ch) or unicodedata.category(ch).startswith("M"):
        return False
    return not ("\u1161" <= ch <= "\u1175" or "\u11a8" <= ch <= "\u11c2")


def _boundary_after(ch: str) -> bool:
    """Whether normalization never joins `ch` to what follows it: ASCII other than letters and the
    three that compose with U+0338 ("=" and U+0338 make "≠"). Other characters are held, to be sure."""
    return ch < "\x80" and not ch.isalpha() and ch not in "<=>"


def _last_boundary(text: str) -> int:
    """The index of the last character with a normalization boundary before it, or 0."""
    for i in range(len(text) - 1, 0, -1):
        if _boundary_before(text[i]):
            return i
    return 0


def _first_boundary(text: str) -> int:
    """The index of the first character with a normalization boundary before it, or len(text)."""
    return next((i for i, ch in enumerate(text) if _boundary_before(ch)), len(text))


def _inside(pattern: re.Pattern[str] | None, text: str, i: int) -> bool:
    """Whether index i falls strictly inside a match of `pattern` in text (a user-defined
    token such as [PAD151646], which the tokenizer keeps whole wherever it appears)."""
    if pattern is None:
        return False
    return any(m.start() < i < m.end() for m in pattern.finditer(text, max(0, i - 64), i + 64))


def _last_safe_cut(text: str, before: str, unsplittable: re.Pattern[str] | None = None) -> int:
    """Index in `text` of the last place where a letter is followed by a non-letter (`before`
    is the character preceding `text`), or -1.

    In the byte-level BPE pre-tokenizer patterns (Qwen2, Llama 3) a run of letters is matched
    greedily and ends at its last letter, and no earlier match looks past it, so that place
    is always a pre-token boundary: tokenizing the two sides apart gives the same ids."""
    for i in range(len(text) - 1, -1, -1):
        previous = text[i - 1] if i else before
        if previous.isalpha() and not text[i].isalpha() and not _inside(unsplittable, text, i):  # isalpha: \p{L}
            return i
    return -1


def blocks(
    pieces: Iterable[Piece], on_forced_cut: Callable[[int], None] | None = None, unsplittable: re.Pattern[str] | None = None
) -> Iterator[list[Piece]]:
    """Groups pieces into blocks that can be tokenized independently: a block is cut at the
    last safe place in the newest piece once MIN_BLOCK_CHARS are gathered. Only the newest
    piece is searched, so a huge input with no safe place (one long line) stays linear; past
    MAX_BLOCK_CHARS it is cut anyway and `on_forced_cut` hears of it."""
    buf: list[Piece] = []
    size = 0
    for piece in pieces:
        if not piece.text:
            continue
        before = buf[-1].text[-1] if buf else ""
        buf.append(piece)
        size += len(piece.text)
        if size < MIN_BLOCK_CHARS:
            continue
        cut = _last_safe_cut(piece.text, before, unsplittable)
        if cut < 0:
            if size >= MAX_BLOCK_CHARS:
                if on_forced_cut is not None:
                    on_forced_cut(size)
                yield buf
                buf, size = [], 0
            continue
        head, tail = _split_at(buf, size - len(piece.text) + cut)
        if head:
            yield head
        buf, size = tail, sum(len(p.text) for p in tail)
    if buf:
        yield buf


def _split_at(pieces: list[Piece], cut: int) -> tuple[list[Piece], list[Piece]]:
    pos = 0
    for k, p in enumerate(pieces):
        if pos + len(p.text) > cut:
            local = cut - pos
            head = pieces[:k] + ([Piece(p.text[:local], p.source, p.place, p.offset)] if local else [])
            tail = [Piece(p.text[local:], p.source, p.place, p.offset + local)] + pieces[k + 1 :]
            return head, tail
        pos += len(p.text)
    return pieces, []


@dataclass
class _Placed:
    """A piece with its byte range in the whole document."""

    piece: Piece
    start: int
    data: bytes

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    def char_at(self, byte_pos: int) -> int:
        """Character offset in the source of a document byte position inside this piece."""
        local = min(max(byte_pos - self.start, 0), len(self.data))
        return self.piece.offset + len(self.data[:local].decode("utf-8", errors="ignore"))


def iter_chunks(
    pieces: Iterable[Piece],
    tokenizer: Tokenizer,
    chunk_tokens: int,
    sources: Sequence[Source],
    stats: IngestStats | None = None,
    warn: Callable[[str], None] | None = None,
    hold_last: bool = False,
) -> Iterator[Chunk]:
    """Consecutive slices of `chunk_tokens` ids of the whole laid-out document, decoded.

    `hold_last`: the document is still being written (`watch`), so its last chunk, whole or not,
    is left out (a chunk is given once a token after it is read, so text appended later cannot
    change it), and `stats` count the tokens of the chunks given."""
    stats = stats if stats is not None else IngestStats()
    stats.source_tokens = [0] * len(sources)
    stats.source_pages = [0] * len(sources)
    stats.source_units = [None] * len(sources)
    stats.source_starts = [None] * len(sources)
    normalize = normalizer(tokenizer)
    if normalize is not None:
        pieces = normalized(pieces, normalize)
    pending: list[int] = []
    placed: list[_Placed] = []  # pieces not yet wholly behind the chunk start
    doc_bytes = 0  # bytes placed so far
    chunk_start = 0  # byte where the pending ids begin
    index = 0
    tokens_done = 0

    def emit(ids: list[int]) -> Chunk:
        nonlocal chunk_start, index, tokens_done, placed
        data = tokenizer.decode_bytes(ids)
        start, end = chunk_start, chunk_start + len(data)
        index += 1
        tokens_done += len(ids)
        chunk = Chunk(
            index,
            data.decode("utf-8", errors="replace"),
            len(ids),
            _spans(placed, start, end, sources),
            tokens_done,
            _anchors(placed, start, data),
            array("I", ids),
        )
        chunk_start = end
        placed = [p for p in placed if p.end > end]
        return chunk

    warned: list[int] = []

    def forced(size: int) -> None:
        if warn is not None and not warned:
            warned.append(size)
            warn(
                f"The input has a run of over {size:,} characters with no word boundary; it is tokenized in "
                "parts, so chunk boundaries near it may differ from the reference by a token."
            )

    for block in blocks(pieces, forced, getattr(tokenizer, "unsplittable", None)):
        text = "".join(p.text for p in block)
        ids = tokenizer.encode(text)
        block_start = doc_bytes
        for p in block:
            data = p.text.encode("utf-8")
            placed.append(_Placed(p, doc_bytes, data))
            doc_bytes += len(data)
            if p.source is not None and stats.source_starts[p.source] is None:
                stats.source_starts[p.source] = p.offset
            if p.source is not None and p.place is not None and p.place.unit is not None and p.place.part is None:
                if stats.source_units[p.source] in (None, p.place.unit):
                    stats.source_units[p.source] = p.place.unit
                    stats.source_pages[p.source] = max(stats.source_pages[p.source], p.place.number or 0)
        _count_source_tokens(stats, block, block_start, ids, tokenizer)
        stats.document_tokens += len(ids)
        pending += ids
        while len(pending) >= chunk_tokens + (1 if hold_last else 0):
            head, pending = pending[:chunk_tokens], pending[chunk_tokens:]
            yield emit(head)
    if hold_last:
        _hold(stats, len(pending))
    elif pending:
        yield emit(pending)
    stats.done = True


def _hold(stats: IngestStats, held: int) -> None:
    """The last `held` tokens, left unread, taken off the counts (from the last sources: they end the document)."""
    stats.held_tokens = held
    stats.document_tokens -= held
    for i in reversed(range(len(stats.source_tokens))):
        taken = min(held, stats.source_tokens[i])
        stats.source_tokens[i] -= taken
        held -= taken


def _count_source_tokens(stats: IngestStats, block: list[Piece], block_start: int, ids: list[int], tokenizer: Tokenizer) -> None:
    """Attributes each token to the source its first byte belongs to."""
    import numpy as np

    lengths = tokenizer.byte_lengths[np.asarray(ids, dtype=np.int64)]
    starts = block_start + np.cumsum(lengths) - lengths
    pos = block_start
    for p in block:
        n = len(p.text.encode("utf-8"))
        if p.source is not None:
            lo, hi = np.searchsorted(starts, [pos, pos + n])
            stats.source_tokens[p.source] += int(hi - lo)
        pos += n


def _spans(placed: list[_Placed], start: int, end: int, sources: Sequence[Source]) -> tuple[Span, ...]:
    """The spans of the chunk [start, end): one per run of a source, of one document inside it
    (an attachment) and of one kind of unit."""
    spans: list[Span] = []
    for p in placed:
        if p.piece.source is None or p.end <= start or p.start >= end:
            continue
        src, whole = p.piece.source, p.piece.place or Place()
        place = whole if whole.unit is not None else None
        lo, hi = p.char_at(start), p.char_at(end)
        last = spans[-1] if spans else None
        if last is not None and last.source == src and last.part == whole.part and _same_unit(last.last, place):
            spans[-1] = Span(
                src, last.title, last.first or place, place or last.last, last.start, hi, last.part, last.ocr or whole.ocr
            )
        else:
            spans.append(Span(src, sources[src].title, place, place, lo, hi, whole.part, whole.ocr))
    return tuple(spans)


def _anchors(placed: list[_Placed], start: int, data: bytes) -> tuple[Anchor, ...]:
    """The anchors of the chunk whose bytes are `data`, from document byte `start`: each piece's
    part of the chunk, at its character offset in the chunk's text. Pieces end on characters, so
    decoding each part alone counts the characters the whole chunk's decoding has (a character cut
    at the chunk's edge is one replacement character either way)."""
    anchors: list[Anchor] = []
    at = 0
    end = start + len(data)
    for p in placed:
        lo, hi = max(p.start, start), min(p.end, end)
        if hi <= lo:
            continue
        anchors.append(Anchor(at, p.piece.source, p.char_at(lo), p.piece.place))
        at += len(data[lo - start : hi - start].decode("utf-8", errors="replace"))
    return tuple(anchors)


def _same_unit(a: Place | None, b: Place | None) -> bool:
    """Whether text at place `b` continues a span that reached place `a` (running text continues any)."""
    return a is None or b is None or a.unit == b.unit
