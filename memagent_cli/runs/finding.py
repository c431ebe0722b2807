"""What the watched paths hold (`memagent watch`): every document, as `ask --each` finds them (a look
at everything), or the documents at the paths the file system said changed, found without walking
the rest (ingest.sources.collect_at). Each comes with its version (runs/folder.py's Stat) and its
place among the rows. A note a look gives (a skipped file) is said once, not at every look."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from ..core.pipeline import SourceOptions, find_sources
from ..ingest.sources import Source, collect_at, without_written
from .folder import Place, Stat


@dataclass(frozen=True)
class Found:
    """A document found, its version, its modification time (seconds), its place, and its path made absolute."""

    source: Source
    stat: Stat
    mtime: float
    place: Place
    at: str


@dataclass
class Finder:
    """Looks at the watched `paths` (folders, and files named) as `sources` says to read them; says
    each new note to `warn`."""

    paths: Sequence[str]
    sources: SourceOptions
    warn: Callable[[str], None]
    said: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._roots = [os.path.abspath(p) for p in self.paths]

    def everything(self) -> list[Found]:
        """Every document the paths name now."""
        notes: list[str] = []
        there = [p for p in self.paths if os.path.exists(p)]
        found = find_sources(there, self.sources, notes.append, empty_ok=True) if there else []
        self._say(notes)
        return self._versions(found)

    def at(self, changed: Iterable[str]) -> list[Found]:
        """The documents at the `changed` paths (absolute), each a file or a folder under a folder
        watched, or a file named: what is there now (nothing where a path is gone)."""
        notes: list[str] = []
        found: list[Source] = []
        by_folder: dict[int, list[str]] = {}
        for path in changed:
            for index, root in enumerate(self._roots):
                if path == root:  # a file named (read as named), or a folder named made again: all of it
                    if os.path.exists(path):
                        found += find_sources([self.paths[index]], self.sources, notes.append, empty_ok=True)
                    break
                if path.startswith(root + os.sep) and os.path.isdir(self.paths[index]):
                    by_folder.setdefault(index, []).append(path)
                    break
        for index, paths in by_folder.items():
            s = self.sources
            found += collect_at(self.paths[index], paths, include=s.include, exclude=s.exclude, ocr=s.ocr, warn=notes.append)
        found = without_written(found, self.sources.written, notes.append)
        self._say(notes)
        return self._versions(found)

    def stale(self, known: Iterable[tuple[str, Stat]]) -> set[str]:
        """The files (absolute) of `known` (each with the version last seen) that are another version
        now, or gone: what --poll checks at each interval itself, for its watcher (notify's
        PollWatcher) compares modification times to the second and misses a change within one."""
        out = set()
        for path, stat in known:
            try:
                info = os.stat(path)
            except OSError:
                out.add(path)
                continue
            if (info.st_size, info.st_mtime_ns) != stat:
                out.add(path)
        return out

    def _versions(self, found: list[Source]) -> list[Found]:
        out = []
        for source in found:
            try:
                info = os.stat(source.path)
            except OSError:  # gone since it was found: the next look says so
                continue
            at = os.path.abspath(source.path)
            out.append(Found(source, Stat(info.st_size, info.st_mtime_ns), info.st_mtime, self.place(source, at), at))
        return out

    def place(self, source: Source, path: str) -> Place:
        """Where the source's rows go (`path`: its own, absolute): after those of the paths named
        before the one that found it, and within a folder in the walk's order (each level sorted by name)."""
        for index, root in enumerate(self._roots):
            if path == root:
                return index, tuple(source.member)
            if path.startswith(root + os.sep):
                parts = os.path.relpath(path, root).split(os.sep)
                return index, (*parts, *(p for name in source.member for p in name.split("/")))
        return len(self._roots), (path,)

    def _say(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self.said:
                self.said.add(note)
                self.warn(note)
