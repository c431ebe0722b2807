"""Source ingestion: from the paths a user names to a stream of text segments with provenance.

This module owns collecting, and is the package's front door:

* `collect_sources` turns command-line paths (files, folders, zip archives, "-" for standard
  input) into an ordered list of `Source`s, deciding each document's format (formats.detect) and
  refusing what memagent cannot read, before any model work starts. An archive is read like a
  folder: each document inside it is a source of its own, titled "archive.zip/inner/a.docx". A
  compressed file ("build.log.gz", compressed.py) is one source, of the kind of the file inside.
* `read_source` (from `reading`, where it lives) streams one source's text as `Segment`s: it
  opens the file (or the archive member), hands it to its format's reader (one module per
  format family in this package) and numbers the reader's parts with character offsets.

For every source, the texts of its segments concatenated in order are the source's full text,
and each segment's `offset` is the number of characters before it in that text.

Problems the user can fix raise `MemagentError`; lesser things (skipped files, replaced bytes,
pages that fail) are reported through the `warn` callback, one line each.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import posixpath
import stat
import zipfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import IO, NamedTuple

from ..errors import EXIT_USAGE, MemagentError
from . import archive, compressed, formats
from .base import STDIN_PATH, OcrMode, Segment, Source, Warn, open_error, os_reason, printable, short_reason, title_of
from .digests import file_id, file_sha256
from .reading import read_source
from .text import SNIFF_SIZE, ByteStream

__all__ = [
    "ByteStream",
    "Segment",
    "Source",
    "Warn",
    "collect_at",
    "collect_sources",
    "file_id",
    "file_sha256",
    "read_source",
    "STDIN_PATH",
    "SNIFF_SIZE",
]


# --------------------------------------------------------------------------------------------
# Collecting sources


def collect_sources(
    paths: Sequence[str],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    stdin_is_piped: bool = False,
    ocr: OcrMode = "auto",
    found: Collection[str] = (),
    warn: Warn,
    empty_ok: bool = False,
) -> list[Source]:
    """Expand the user's paths into the ordered list of sources to read.

    Each path is a file, a folder or "-" (stdin, at most once); with no paths, piped stdin is
    read. Files are kept in the order named. Folders are walked recursively in sorted order:
    at each level the entries, files and folders interleaved, are sorted by name (code point
    order, so "B.txt" < "a.txt" and "ch10" < "ch2"), and a folder's contents come where its
    name sorts. Inside folders, hidden entries (name starts with "."), binary files, special
    files and folders reached twice (symlink loops) are skipped with a note through `warn`.
    A zip archive (named, or in a folder) is read like a folder, its members in sorted order,
    with the same patterns and rules, within the ARCHIVE_* bounds. A compressed file (gzip, bzip2,
    xz; zstd on Python 3.14+) is judged by the file inside it. Image files need OCR: with
    `ocr` "never", or without the ocr extra, they are refused when named and skipped in folders.
    Sources found in folders and archives are marked `found`: one that then cannot be read is
    skipped with a note (see read_source), while a file named directly is an error. `found` names
    files to be marked so though named: a resumed run's, which it first found in a folder. A folder
    with no readable file is an error, unless `empty_ok` (`watch`: documents may come).

    `include`/`exclude` are fnmatch-style patterns matched against a file's path relative to
    the named folder (with "/" separators) and against its bare name; with no include
    patterns every file is wanted, and exclude wins. Exclude patterns also prune whole
    subfolders. Files named directly are never filtered. A file reached twice (named twice,
    named and inside a named folder, or linked) is listed once, where it is first reached.
    """
    if ocr == "always":
        from .ocr import OCR_INSTALL, ocr_available

        if not ocr_available():
            raise MemagentError(
                "--ocr always needs OCR, which is not installed", hint=f"Install it: {OCR_INSTALL}", exit_code=EXIT_USAGE
            )
    if not paths:
        if stdin_is_piped:
            return [_stdin_source()]
        raise MemagentError(
            "Nothing to read",
            hint="Name a file or folder, or pipe text into memagent",
            exit_code=EXIT_USAGE,
        )
    collector = _Collector(_Filters.make(include, exclude), warn, ocr, frozenset(found))
    collector.empty_ok = empty_ok
    for path in paths:
        collector.add(path)
    return collector.sources


def collect_at(
    folder: str,
    paths: Sequence[str],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    ocr: OcrMode = "auto",
    warn: Warn,
) -> list[Source]:
    """What `collect_sources([folder])` finds at `paths`, each a file or folder somewhere under the
    named `folder`, found without walking the rest (`watch`: the paths the file system said changed).
    Each is judged as the walk judges it: a hidden name or an excluded folder on its way leaves it
    out, a binary or special file is skipped with the walk's note, a folder is walked whole and an
    archive opened. Titles and paths are the walk's (the folder as named, joined with the path
    under it). A path outside the folder, or no longer there, finds nothing."""
    collector = _Collector(_Filters.make(include, exclude), warn, ocr)
    root = os.path.abspath(folder)
    for path in paths:
        rel = os.path.relpath(os.path.abspath(path), root)
        if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
            continue
        parts = rel.split(os.sep)
        if any(part.startswith(".") for part in parts[:-1]):
            continue  # the walk never enters a hidden folder
        above = [posixpath.join(*parts[: k + 1]) for k in range(len(parts) - 1)]
        if any(collector._filters.excludes(a, posixpath.basename(a)) for a in above):
            continue  # an excluded folder is pruned whole
        directory = os.path.join(folder, *parts[:-1])
        if not all(os.path.isdir(os.path.join(folder, *parts[: k + 1])) for k in range(len(parts) - 1)):
            continue  # a folder on its way is gone (or is a file now)
        visited: set[tuple[int, int]] = set()
        skipped = _Skipped(title_of(directory))
        step = collector._classify(_PathEntry(directory, parts[-1]), posixpath.dirname("/".join(parts)), visited, skipped)
        skipped.report(warn)
        entry = os.path.join(directory, parts[-1])
        if isinstance(step, Source):
            collector.sources.append(step)
        elif isinstance(step, _Subfolder):
            for k in range(len(parts)):  # the folders above it, as the walk would have visited them
                key = file_id(os.path.join(folder, *parts[:k]))
                if key is not None:
                    visited.add(key)
            collector._walk(entry, "/".join(parts), visited)
        elif isinstance(step, _Archive):
            collector._add_archive(entry, title_of(entry), "/".join(parts), named=False)
    return collector.sources


class _PathEntry:
    """A folder's entry named by its path, as os.scandir's DirEntry gives one (what _classify asks
    of it): for a path found without listing its folder."""

    def __init__(self, directory: str, name: str):
        self.name = name
        self.path = os.path.join(directory, name)

    def stat(self) -> os.stat_result:
        return os.stat(self.path)

    def is_dir(self) -> bool:
        return os.path.isdir(self.path)

    def is_symlink(self) -> bool:
        return os.path.islink(self.path)


def without_written(sources: list[Source], written: Collection[str], warn: Warn) -> list[Source]:
    """`sources` less the files the command itself writes (results, a spreadsheet) that a folder's
    walk met, each with a note: a rerun over the folder does not read its own earlier results as
    documents. Compared by device and inode, so a link or another spelling of the path is the same file."""
    ids = {key for key in map(file_id, written) if key is not None}
    if not ids:
        return sources
    kept = []
    for source in sources:
        if source.found and file_id(source.path) in ids:
            warn(f"skipped {printable(source.title)} (written by this command)")
        else:
            kept.append(source)
    return kept


def _stdin_source() -> Source:
    return Source(path=STDIN_PATH, title="stdin", kind="stdin", size=None)


@dataclass(frozen=True)
class _Filters:
    include: tuple[str, ...]
    exclude: tuple[str, ...]

    @classmethod
    def make(cls, include: Sequence[str], exclude: Sequence[str]) -> _Filters:
        # "build/" on a command line means the folder build; fnmatch would never match it.
        def clean(patterns: Sequence[str]) -> tuple[str, ...]:
            return tuple(p.rstrip("/") or p for p in patterns)

        return cls(clean(include), clean(exclude))

    def excludes(self, rel: str, name: str) -> bool:
        return _matches_any(self.exclude, rel, name)

    def wants_file(self, rel: str, name: str) -> bool:
        if self.excludes(rel, name):
            return False
        return not self.include or _matches_any(self.include, rel, name)


def _matches_any(patterns: tuple[str, ...], rel: str, name: str) -> bool:
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


@dataclass
class _Skipped:
    """What one folder's scan left out, reported as one note per reason."""

    title: str  # the folder's or archive's title, as shown
    by_reason: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, name: str) -> None:
        self.by_reason.setdefault(reason, []).append(name)

    def report(self, warn: Warn) -> None:
        for reason, names in self.by_reason.items():
            if len(names) == 1:
                warn(f"skipped {os.path.join(self.title, printable(names[0]))} ({reason})")
            else:
                shown = ", ".join(map(printable, names[:3])) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                warn(f"skipped {len(names)} entries in {self.title} ({reason}): {shown}")


class _Collector:
    """Accumulates sources across all named paths, remembering what it has already taken."""

    def __init__(self, filters: _Filters, warn: Warn, ocr: OcrMode = "auto", found: frozenset[str] = frozenset()) -> None:
        self.sources: list[Source] = []
        self._filters = filters
        self._ocr = ocr
        self._found = found  # named files to mark `found`, as if met in a folder (a resumed run's)
        self._warn = warn
        self._seen_files: set[tuple[int, int]] = set()
        self._stdin_taken = False
        self.empty_ok = False  # a folder with nothing readable is no error

    def add(self, path: str) -> None:
        if path == STDIN_PATH:
            self._add_stdin()
            return
        info = _stat_named(path)
        if stat.S_ISDIR(info.st_mode):
            self._add_directory(path, info)
        else:
            self._add_named_file(path, info)

    def _add_stdin(self) -> None:
        if self._stdin_taken:
            raise MemagentError(
                '"-" (standard input) is named more than once',
                hint="Name it once; stdin can be read only once",
                exit_code=EXIT_USAGE,
            )
        self._stdin_taken = True
        self.sources.append(_stdin_source())

    def _add_named_file(self, path: str, info: os.stat_result) -> None:
        special = _special_kind(info.st_mode)
        if special == "named pipe":
            # A pipe (such as bash's <(command)) is read once, as a stream like stdin: it is not
            # sniffed here, and _read_stream refuses binary data in its first bytes instead.
            self.sources.append(Source(path, title_of(path), "text", None, pipe=True))
            return
        if special is not None:
            # A device can be endless (/dev/zero, /dev/urandom) or block forever (/dev/tty,
            # /proc/kmsg); a socket cannot be opened at all.
            raise MemagentError(
                f"{printable(path)} is a {special}, not a file; memagent reads files, folders, pipes and stdin",
                hint=f"Copy what you want read into a file first, e.g. head -c 1M {printable(path)} > sample.txt",
                exit_code=EXIT_USAGE,
            )
        if self._seen_before(info):
            self._warn(f"{title_of(path)} is named more than once; reading it once")
            return
        try:
            head = _sniff(path)
        except OSError as exc:
            raise open_error(path, exc) from exc
        kind, refusal = self._judge(os.path.basename(path), head, lambda: open(path, "rb"))
        if kind == formats.ARCHIVE:
            if self._add_archive(path, title_of(path), os.path.basename(path), named=True) == 0:
                raise MemagentError(
                    f"No readable files in {printable(path)}",
                    hint="It has no documents memagent reads, or --include/--exclude left none out",
                )
            return
        if refusal is not None:
            raise MemagentError(f"{printable(path)}: {refusal.message}", hint=refusal.hint)
        assert kind is not None
        self.sources.append(Source(path, title_of(path), kind, info.st_size, found=path in self._found))

    def _judge(self, name: str, head: bytes, reopen: Callable[[], IO[bytes]]) -> tuple[str | None, _Refusal | None]:
        """The kind of the document called `name` whose first bytes are `head`, or why it is
        not read. A compressed file (compressed.method) is judged by the file inside it, whose
        first bytes are read through `reopen` (the file's bytes from the start)."""
        method = compressed.method(name, head)
        if method is None:
            kind = formats.detect(name, head)
            return kind, (None if kind == formats.ARCHIVE else self._refusal(kind, name, head))
        if not compressed.available(method):
            return None, _Refusal(compressed.UNAVAILABLE, compressed.UNAVAILABLE, compressed.UNAVAILABLE_HINT)
        try:
            with reopen() as raw:
                head = compressed.peek(raw, method, SNIFF_SIZE)
        except compressed.Damaged as exc:
            said = f"not readable: {exc}"
            return None, _Refusal(said, said, "Check that it is a complete, undamaged file")
        except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
            said = f"cannot be read: {short_reason(exc)}"
            return None, _Refusal(said, said, "Check that it is a complete, undamaged file")
        name = compressed.inner_name(name)
        kind = formats.detect(name, head)
        if kind == formats.ARCHIVE:
            said = f"a {method}-compressed archive, which memagent does not open"
            return None, _Refusal(said, said, f"Decompress it and name {printable(posixpath.basename(name))}")
        return kind, self._refusal(kind, name, head)

    def _refusal(self, kind: str | None, name: str, head: bytes) -> _Refusal | None:
        """Why a document of `kind` cannot be read here, and what to do; None if it can."""
        if kind is None:
            legacy = formats.legacy_format(name, head)
            if legacy is not None:
                said = f"{legacy[0]} format, which memagent cannot read"
                return _Refusal(said, said, f"Save it as {legacy[1]} and name that file")
            if formats.is_tar(head):
                said = "a tar archive, which memagent does not open"
                return _Refusal(said, said, "Extract it (tar -xf) and name the folder")
            return _Refusal(
                "binary",
                "looks like a binary file of a kind memagent does not read",
                "See docs/FORMATS.md for the formats memagent reads",
            )
        if kind == "image":
            from .ocr import OCR_INSTALL, ocr_available

            if self._ocr == "never":
                said = "an image, read only with OCR, and OCR is off (--ocr never)"
                return _Refusal(said, said, "Drop --ocr never")
            if not ocr_available():
                said = "an image, read only with OCR, which is not installed"
                return _Refusal(said, said, f"Install it: {OCR_INSTALL}")
        return None

    def _add_directory(self, root: str, info: os.stat_result) -> None:
        visited = {(info.st_dev, info.st_ino)}
        if self._walk(root, "", visited) == 0 and not self.empty_ok:
            raise MemagentError(
                f"No readable files in {printable(root)}",
                hint="It has no documents memagent reads, or --include/--exclude left none out; "
                "hidden and binary files are skipped",
            )

    def _walk(self, directory: str, rel: str, visited: set[tuple[int, int]]) -> int:
        """Add the readable files under `directory` in sorted order; return how many were found.

        Files already taken elsewhere count as found (they are readable) but are not added
        twice. `rel` is `directory` relative to the named folder, with "/" separators, for
        matching patterns ("" for the named folder itself).
        """
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as exc:
            if not rel:  # the folder the user named
                raise open_error(directory, exc) from exc
            self._warn(f"skipped {title_of(directory)} ({os_reason(exc)})")
            return 0
        skipped = _Skipped(title_of(directory))
        # Classify the whole folder first so its notes come before those of its subfolders.
        plan = [self._classify(entry, rel, visited, skipped) for entry in entries]
        skipped.report(self._warn)
        found = 0
        for step in plan:
            if isinstance(step, Source):
                self.sources.append(step)
                found += 1
            elif step is _ALREADY_TAKEN:
                found += 1
            elif isinstance(step, _Subfolder):
                subfolder = os.path.join(directory, step.name)
                found += self._walk(subfolder, posixpath.join(rel, step.name), visited)
            elif isinstance(step, _Archive):
                path = os.path.join(directory, step.name)
                found += self._add_archive(path, title_of(path), posixpath.join(rel, step.name), named=False)
        return found

    def _classify(
        self, entry: os.DirEntry[str] | _PathEntry, rel_dir: str, visited: set[tuple[int, int]], skipped: _Skipped
    ) -> Source | _Subfolder | _Archive | _AlreadyTaken | None:
        """Decide what to do with one folder entry.

        Returns a Source to add, a _Subfolder or _Archive to walk, _ALREADY_TAKEN, or None to skip it.
        """
        name = entry.name
        rel = posixpath.join(rel_dir, name)
        if name.startswith("."):
            skipped.add("hidden", name + "/" if entry.is_dir() else name)
            return None
        try:
            info = entry.stat()  # follows symlinks: linked files and folders are read
        except OSError as exc:
            skipped.add("broken link" if entry.is_symlink() else os_reason(exc), name)
            return None
        if stat.S_ISDIR(info.st_mode):
            return self._classify_directory(name, rel, info, visited, skipped)
        if not stat.S_ISREG(info.st_mode):
            skipped.add(_special_kind(info.st_mode) or "not a regular file", name)
            return None
        if not self._filters.wants_file(rel, name):
            return None
        if self._seen_before(info):
            return _ALREADY_TAKEN
        try:
            head = _sniff(entry.path)
        except OSError as exc:
            skipped.add(os_reason(exc), name)
            return None
        kind, refusal = self._judge(name, head, lambda: open(entry.path, "rb"))
        if kind == formats.ARCHIVE:
            return _Archive(name)
        if refusal is not None:
            skipped.add(refusal.note, name)
            return None
        assert kind is not None
        return Source(entry.path, title_of(entry.path), kind, info.st_size, found=True)

    def _add_archive(self, path: str, title: str, rel: str, *, named: bool) -> int:
        """Add the documents inside the zip archive at `path`; return how many were found. A zip
        that cannot be opened is an error when named, and skipped with a note inside a folder."""
        try:
            with open(path, "rb") as file:
                return self._walk_archive(file, path, title, rel, (), 1)
        except archive.ArchiveRefused as refused:
            if named:
                raise MemagentError(f"{title}: {refused}", hint=refused.hint) from None
            self._warn(f"skipped {title} ({refused})")
        except (OSError, ValueError) as exc:
            if named:
                raise open_error(path, exc) if isinstance(exc, OSError) else MemagentError(f"{title}: {exc}") from exc
            self._warn(f"skipped {title} ({short_reason(exc)})")
        return 0

    def _walk_archive(self, file: IO[bytes], path: str, title: str, rel: str, prefix: tuple[str, ...], depth: int) -> int:
        members = archive.listing(file, title)
        skipped = _Skipped(title)
        found = 0
        with members.archive:
            for info in members.infos:
                name = info.filename
                parts = name.split("/")
                base = parts[-1]
                member_rel = posixpath.join(rel, name)
                if archive.unsafe_name(name):
                    skipped.add("unsafe name: never read or written", name)
                    continue
                if any(p.startswith(".") for p in parts) or parts[0] == "__MACOSX":
                    skipped.add("hidden", name)
                    continue
                ancestors = [posixpath.join(rel, *parts[: k + 1]) for k in range(len(parts) - 1)]
                if any(self._filters.excludes(a, posixpath.basename(a)) for a in ancestors):
                    continue
                if not self._filters.wants_file(member_rel, base):
                    continue
                problem = archive.member_problem(info)
                if problem is not None:
                    skipped.add(problem, name)
                    continue
                try:
                    with members.archive.open(info) as opened:
                        head = opened.read(SNIFF_SIZE)
                except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
                    skipped.add(f"cannot be read: {short_reason(exc)}", name)
                    continue
                kind, refusal = self._judge(base, head, functools.partial(members.archive.open, info))
                member_title = f"{title}/{printable(name)}"
                if kind == formats.ARCHIVE:
                    if depth >= archive.MAX_DEPTH:
                        skipped.add(f"archive nested more than {archive.MAX_DEPTH} deep", name)
                        continue
                    try:
                        with archive.extract(members.archive, info, member_title) as inner:
                            found += self._walk_archive(inner, path, member_title, member_rel, prefix + (name,), depth + 1)
                    except archive.ArchiveRefused as refused:
                        skipped.add(str(refused), name)
                    continue
                if refusal is not None:
                    skipped.add(refusal.note, name)
                    continue
                assert kind is not None
                self.sources.append(Source(path, member_title, kind, info.file_size, prefix + (name,), found=True))
                found += 1
        skipped.report(self._warn)
        return found

    def _classify_directory(
        self, name: str, rel: str, info: os.stat_result, visited: set[tuple[int, int]], skipped: _Skipped
    ) -> _Subfolder | None:
        if self._filters.excludes(rel, name):
            return None
        key = (info.st_dev, info.st_ino)
        if key in visited:
            # Reached again through a symlink: following it could loop forever.
            skipped.add("folder already visited through another path", name + "/")
            return None
        visited.add(key)
        return _Subfolder(name)

    def _seen_before(self, info: os.stat_result) -> bool:
        key = (info.st_dev, info.st_ino)
        if key in self._seen_files:
            return True
        self._seen_files.add(key)
        return False


@dataclass(frozen=True)
class _Subfolder:
    name: str


@dataclass(frozen=True)
class _Archive:
    name: str


class _Refusal(NamedTuple):
    """A document that cannot be read here: `note` in a folder's skip list, `message` and
    `hint` in the error when it was named."""

    note: str
    message: str
    hint: str


class _AlreadyTaken:
    """A folder entry that is a file already in the list (hard link, symlink, named twice):
    readable, so the folder is not "empty", but not added again."""


_ALREADY_TAKEN = _AlreadyTaken()


def _stat_named(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except (OSError, ValueError) as exc:
        # ValueError: a path no file can have, such as one with a NUL byte or (on POSIX) a lone
        # surrogate that stands for no byte (UnicodeEncodeError is a ValueError). os.stat
        # raises it instead of OSError; found by tests/test_fuzz.py.
        raise open_error(path, exc) from exc


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "named pipe"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
)


def is_pipe(path: str) -> bool:
    """Whether `path` names a pipe or FIFO, read once as a stream (False where it cannot be looked at)."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _special_kind(mode: int) -> str | None:
    """What a path that is neither a regular file nor a folder is, in words; None for those two."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((kind for test, kind in _SPECIAL_KINDS if test(mode)), "special file")


def _sniff(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read(SNIFF_SIZE)
