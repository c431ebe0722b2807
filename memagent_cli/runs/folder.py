"""A watched folder's state (`memagent watch`): each document as last seen, since when it has not
changed, the version its rows were made for, which documents are due to be read, and when to look
again. Pure logic: it is told what was found and what time it is (`clock`), and touches no file
(runs/finding.py looks at the folder; cli/watch.py runs and writes).

A document is read once it has *settled*: neither its size nor its modification time has changed
for `settle` seconds, so a file still being copied is not read half-written. A plain-text file
seen growing (longer at one look than at the one before, and not empty then: a log) is read as it
*grows*: once it has grown by about a chunk since its last reading, its complete chunks are read
(continued from that reading) and its last, partial chunk waits; the answer so far stands until it
settles and is read to its end. A file copied in at once, or made empty and then written at once,
waits to settle.

Looking: the file system names what changed, and only those paths are looked at. The whole folder
is looked at again when a batch of changes is so large that some may have been lost (watchfiles
drops the event by which notify says the kernel's queue overflowed, so its size is the sign), and
at a slow interval that keeps such looks to a small share of the time however large the folder.
The outputs are written at most so often that writing them takes a small share of the time
(`Spacer`): a burst of answers is one write, a lone answer is written at once.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from ..ingest.compressed import inner_name
from ..ingest.sources import Source

SETTLE_SECONDS = 2.0
BYTES_PER_TOKEN = 3.0  # a first guess for text never read (English prose runs about 4): a chunk's bytes
LOOK_EVERY = 60.0  # the least interval between looks at the whole folder
LOOK_SHARE = 0.005  # ... and at most this share of the time spent on them (199 × a look's seconds apart)
LOST_BATCH = 4096  # changes named at once from which some may have been lost: the whole folder is looked at
WRITE_SHARE = 0.1  # the most of the time writing the outputs may take


# Where a document's rows go: the index of the path named that found it, then the names on its way
# down (folders, the file, the members of an archive), compared as the walk sorts them.
Place = tuple[int, tuple[str, ...]]


class Stat(NamedTuple):
    """A file's version as `watch` compares them: size and modification time."""

    size: int
    mtime_ns: int


def _above(path: str) -> list[str]:
    """The folders above a path (absolute), to the root."""
    out = []
    parent = os.path.dirname(path)
    while parent and parent not in out and parent != path:
        out.append(parent)
        path, parent = parent, os.path.dirname(parent)
    return out


def growable(source: Source) -> bool:
    """Whether a document's text read so far is the start of its text to come, so its complete
    chunks may be read while it is written: plain text, not compressed, not inside an archive."""
    return source.kind == "text" and not source.member and inner_name(source.path) == source.path


@dataclass
class Doc:
    """A document as last seen: its source and version, since when (clock time) that version has not
    changed, where its rows go (`place`, compared), its file (`at`), the version its final rows were made for
    (`done`), the size its last reading began at, and how many bytes make a chunk of it, as that
    reading counted (None: not read yet)."""

    source: Source
    stat: Stat
    since: float
    place: Place
    at: str  # its file, absolute
    done: Stat | None = None
    read_size: int = 0
    chunk_bytes: float | None = None
    grew: bool = False  # seen longer than when last seen, since its last reading to the end


@dataclass
class Folder:
    """Every document watched, by title. `chunk_tokens`: the runs' chunk size, for reading growing
    files (None: never read as they grow, as for InfMem, whose every step may search the whole text)."""

    settle: float = SETTLE_SECONDS
    chunk_tokens: int | None = None
    clock: Callable[[], float] = time.time
    docs: dict[str, Doc] = field(default_factory=dict)
    _order: list[Doc] | None = None  # the documents by place, until one comes or goes
    _files: dict[str, set[str]] = field(default_factory=dict)  # titles by file (absolute path): an archive's are several
    _folders: set[str] = field(default_factory=set)  # the folders above the files (absolute), some maybe gone
    _pending: set[str] = field(default_factory=set)  # the documents whose final rows are not for the version there

    def found(self, source: Source, stat: Stat, mtime: float, place: Place, at: str) -> str | None:
        """A document as found now (its modification time `mtime` in clock seconds; `at`: its file,
        absolute): its state word where it is new or changed ("settling": wait for it; "queued":
        settled already), else None."""
        now = self.clock()
        doc = self.docs.get(source.title)
        if doc is None:
            # first seen: settled already if it has not changed for `settle` (a file being copied has)
            self.docs[source.title] = Doc(source, stat, min(now, mtime), place, at)
            self._pending.add(source.title)
            self._order = None
            self._files.setdefault(at, set()).add(source.title)
            self._folders.update(_above(at))
            return "settling" if now - mtime < self.settle else "queued"
        if doc.place != place or doc.at != at:
            self._unfile(doc)
            doc.place, doc.at = place, at
            self._files.setdefault(at, set()).add(source.title)
            self._folders.update(_above(at))
            self._order = None
        doc.source = source
        if doc.stat == stat:
            return None
        doc.grew = doc.grew or 0 < doc.stat.size < stat.size  # from empty: a file made, then written at once
        doc.stat, doc.since = stat, now
        self._pending.add(source.title)
        return "growing" if doc.grew and self._grows(doc) else "settling"

    def gone(self, title: str) -> Doc | None:
        """A document no longer there leaves; it, or None if it was not known."""
        doc = self.docs.pop(title, None)
        if doc is not None:
            self._order = None
            self._pending.discard(title)
            self._unfile(doc)
        return doc

    def _unfile(self, doc: Doc) -> None:
        titles = self._files.get(doc.at)
        if titles is not None:
            titles.discard(doc.source.title)
            if not titles:
                del self._files[doc.at]

    def at(self, path: str) -> list[str]:
        """The documents whose file is `path` (absolute), or under it where it is (was) a folder."""
        titles = list(self._files.get(path, ()))
        if path in self._folders:
            below = path.rstrip(os.sep) + os.sep
            titles += [t for file, known in self._files.items() if file.startswith(below) for t in known]
        return titles

    def others(self, titles: Iterable[str]) -> list[str]:
        """The documents known but not among `titles` (what a look at everything found)."""
        there = set(titles)
        return [title for title in self.docs if title not in there]

    def settled(self, doc: Doc) -> bool:
        return self.clock() - doc.since >= self.settle

    def due(self) -> tuple[list[Doc], list[Doc]]:
        """The documents to read now: those settled in a version without its rows (read to the end),
        and those still growing by about a chunk since their last reading (their complete chunks)."""
        final: list[Doc] = []
        growing: list[Doc] = []
        for doc in sorted((self.docs[t] for t in self._pending), key=lambda d: d.place):
            if self.settled(doc):
                final.append(doc)
            elif self._grown(doc):
                growing.append(doc)
        return final, growing

    def _grows(self, doc: Doc) -> bool:
        """Whether it may be read as it grows: seen growing, of a kind whose start stays as it grows."""
        return doc.grew and self.chunk_tokens is not None and growable(doc.source)

    def _grown(self, doc: Doc) -> bool:
        if not self._grows(doc):
            return False
        assert self.chunk_tokens is not None
        chunk = doc.chunk_bytes if doc.chunk_bytes is not None else self.chunk_tokens * BYTES_PER_TOKEN
        return doc.stat.size >= doc.read_size + chunk

    def began(self, doc: Doc, growing: bool) -> None:
        """Its reading began (of its complete chunks where `growing`): its rows will be for this version."""
        doc.read_size = doc.stat.size
        if not growing:
            doc.done, doc.grew = doc.stat, False
            self._pending.discard(doc.source.title)

    def stopped(self, title: str) -> None:
        """Its reading was stopped (it changed meanwhile): read again once it settles."""
        doc = self.docs.get(title)
        if doc is not None:
            doc.done = None
            doc.since = self.clock()
            self._pending.add(title)

    def counted(self, title: str, size: int | None, tokens: int) -> None:
        """A reading of the document when it had `size` bytes found `tokens` tokens: how many bytes
        make one of its chunks, for when to read it again as it grows."""
        doc = self.docs.get(title)
        if doc is not None and size and tokens > 0 and self.chunk_tokens is not None:
            doc.chunk_bytes = size / tokens * self.chunk_tokens

    def wait(self) -> float | None:
        """Seconds until the first document not yet settled will have, else None (nothing pending)."""
        now = self.clock()
        waits = [self.docs[t].since + self.settle - now for t in self._pending]
        return max(0.05, min(waits)) if waits else None

    def ordered(self) -> list[Doc]:
        """The documents in the order the sources are found (their places)."""
        if self._order is None:
            self._order = sorted(self.docs.values(), key=lambda d: d.place)
        return self._order


@dataclass
class Spacer:
    """When a costly thing (a look at the whole folder, a write of the outputs) may be done again:
    one that took s seconds, ending now, is followed by at least `least` seconds and at least
    s × (1 / share − 1) seconds without another, so it takes at most `share` of the time."""

    share: float
    least: float = 0.0
    clock: Callable[[], float] = time.monotonic
    next: float = 0.0

    def due(self) -> bool:
        return self.clock() >= self.next

    def done(self, seconds: float) -> None:
        """It was done, ending now, in `seconds`."""
        self.next = self.clock() + max(self.least, seconds * (1 / self.share - 1))

    def wait(self) -> float:
        return max(0.0, self.next - self.clock())


def looks() -> Spacer:
    """When to look at the whole folder again: at most every LOOK_EVERY seconds, LOOK_SHARE of the time."""
    return Spacer(LOOK_SHARE, LOOK_EVERY)


def writes() -> Spacer:
    """When the outputs may be written again: WRITE_SHARE of the time at the most (a burst of answers
    is one write, a lone answer is written at once)."""
    return Spacer(WRITE_SHARE)


def lost_some(changes: int) -> bool:
    """Whether a batch of this many changed paths may have lost some."""
    return changes >= LOST_BATCH
