"""Source ingestion: from the paths a user names to a stream of text segments with provenance.

This module owns two steps:

* `collect_sources` turns command-line paths (files, folders, zip archives, "-" for standard
  input) into an ordered list of `Source`s, deciding each document's format (formats.detect) and
  refusing what memagent cannot read, before any model work starts. An archive is read like a
  folder: each document inside it is a source of its own, titled "archive.zip/inner/a.docx".
* `read_source` streams one source's text as `Segment`s: it opens the file (or the archive
  member), hands it to its format's reader (one module per format family in this package) and
  numbers the reader's parts with character offsets, separating units (pages, slides, sheets).

For every source, the texts of its segments concatenated in order are the source's full text,
and each segment's `offset` is the number of characters before it in that text.

Problems the user can fix raise `MemagentError`; lesser things (skipped files, replaced bytes,
pages that fail) are reported through the `warn` callback, one line each.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import stat
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from ..errors import EXIT_USAGE, MemagentError
from . import formats
from .base import (
    UNIT_SEPARATOR,
    OcrMode,
    OcrProgress,
    Part,
    ReadContext,
    Segment,
    Warn,
    normalise_newlines,
    printable,
    short_reason,
    unreadable,
)
from .text import SNIFF_SIZE, ByteStream, read_stream

__all__ = ["ByteStream", "Segment", "Source", "Warn", "collect_sources", "read_source", "STDIN_PATH", "SNIFF_SIZE"]

STDIN_PATH = "-"

# Archives: what is expanded at most, so a zip bomb costs neither the disk nor the memory. A
# member is extracted to an anonymous temporary file (never to a path of its name), in memory up
# to SPOOL_BYTES.
ARCHIVE_MAX_DEPTH = 3  # an archive inside an archive inside an archive, and no deeper
ARCHIVE_MAX_BYTES = 4 << 30  # the uncompressed size of all the members of one archive
ARCHIVE_MAX_RATIO = 200  # uncompressed / compressed, for a member past RATIO_FLOOR
RATIO_FLOOR = 1 << 20
ARCHIVE_MAX_MEMBERS = 100_000
SPOOL_BYTES = 32 << 20


@dataclass(frozen=True)
class Source:
    """One document to read.

    `path` is what the user named or the file found in a folder ("-" for stdin); `title` is
    the name shown to the model: the path relative to the current directory when it lies
    under it, else absolute, and "stdin" for standard input. `kind` is the format (formats.FORMATS:
    "pdf", "text", "docx", …) or "stdin"; `size` is the size in bytes, None for stdin and pipes.
    `member` names the document inside the archive at `path` (one name per level of nesting):
    `path` "a.zip", `member` ("inner/b.docx",), `title` "a.zip/inner/b.docx".
    """

    path: str
    title: str
    kind: str
    size: int | None
    member: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# Collecting sources


def collect_sources(
    paths: Sequence[str],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    stdin_is_piped: bool = False,
    ocr: OcrMode = "auto",
    warn: Warn,
) -> list[Source]:
    """Expand the user's paths into the ordered list of sources to read.

    Each path is a file, a folder or "-" (stdin, at most once); with no paths, piped stdin is
    read. Files are kept in the order named. Folders are walked recursively in sorted order:
    at each level the entries, files and folders interleaved, are sorted by name (code point
    order, so "B.txt" < "a.txt" and "ch10" < "ch2"), and a folder's contents come where its
    name sorts. Inside folders, hidden entries (name starts with "."), binary files, special
    files and folders reached twice (symlink loops) are skipped with a note through `warn`.
    A zip archive (named, or in a folder) is read like a folder, its members in sorted order,
    with the same patterns and rules, within the ARCHIVE_* bounds. Image files need OCR: with
    `ocr` "never", or without the ocr extra, they are refused when named and skipped in folders.

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
    collector = _Collector(_Filters.make(include, exclude), warn, ocr)
    for path in paths:
        collector.add(path)
    return collector.sources


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

    def __init__(self, filters: _Filters, warn: Warn, ocr: OcrMode = "auto") -> None:
        self.sources: list[Source] = []
        self._filters = filters
        self._ocr = ocr
        self._warn = warn
        self._seen_files: set[tuple[int, int]] = set()
        self._stdin_taken = False

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
            self.sources.append(Source(path, _title(path), "text", None))
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
            self._warn(f"{_title(path)} is named more than once; reading it once")
            return
        try:
            head = _sniff(path)
        except OSError as exc:
            raise _open_error(path, exc) from exc
        kind = formats.detect(path, head)
        if kind == formats.ARCHIVE:
            if self._add_archive(path, _title(path), os.path.basename(path), named=True) == 0:
                raise MemagentError(
                    f"No readable files in {printable(path)}",
                    hint="It has no documents memagent reads, or --include/--exclude left none out",
                )
            return
        refusal = self._refusal(kind, path, head)
        if refusal is not None:
            raise MemagentError(f"{printable(path)}: {refusal[0]}", hint=refusal[1])
        assert kind is not None
        self.sources.append(Source(path, _title(path), kind, info.st_size))

    def _refusal(self, kind: str | None, name: str, head: bytes) -> tuple[str, str] | None:
        """Why a document of `kind` cannot be read here, and what to do; None if it can."""
        if kind is None:
            legacy = formats.legacy_format(name, head)
            if legacy is not None:
                return f"{legacy} format, which memagent cannot read", f"Save it as {legacy_fix(legacy)} and name that file"
            return (
                "looks like a binary file of a kind memagent does not read",
                "See docs/FORMATS.md for the formats memagent reads",
            )
        if kind == "image":
            from .ocr import OCR_INSTALL, ocr_available

            if self._ocr == "never":
                return "an image, read only with OCR, and OCR is off (--ocr never)", "Drop --ocr never"
            if not ocr_available():
                return "an image, read only with OCR, which is not installed", f"Install it: {OCR_INSTALL}"
        return None

    def _add_directory(self, root: str, info: os.stat_result) -> None:
        visited = {(info.st_dev, info.st_ino)}
        if self._walk(root, "", visited) == 0:
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
                raise _open_error(directory, exc) from exc
            self._warn(f"skipped {_title(directory)} ({_reason(exc)})")
            return 0
        skipped = _Skipped(_title(directory))
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
                found += self._add_archive(path, _title(path), posixpath.join(rel, step.name), named=False)
        return found

    def _classify(
        self, entry: os.DirEntry[str], rel_dir: str, visited: set[tuple[int, int]], skipped: _Skipped
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
            skipped.add("broken link" if entry.is_symlink() else _reason(exc), name)
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
            skipped.add(_reason(exc), name)
            return None
        kind = formats.detect(name, head)
        if kind == formats.ARCHIVE:
            return _Archive(name)
        refusal = self._refusal(kind, name, head)
        if refusal is not None:
            skipped.add("binary" if kind is None and not formats.legacy_format(name, head) else refusal[0], name)
            return None
        assert kind is not None
        return Source(entry.path, _title(entry.path), kind, info.st_size)

    def _add_archive(self, path: str, title: str, rel: str, *, named: bool) -> int:
        """Add the documents inside the zip archive at `path`; return how many were found. A zip
        that cannot be opened is an error when named, and skipped with a note inside a folder."""
        try:
            with open(path, "rb") as file:
                return self._walk_archive(file, path, title, rel, (), 1)
        except _ArchiveRefused as refused:
            if named:
                raise MemagentError(f"{title}: {refused}", hint=refused.hint) from None
            self._warn(f"skipped {title} ({refused})")
        except (OSError, ValueError) as exc:
            if named:
                raise _open_error(path, exc) if isinstance(exc, OSError) else MemagentError(f"{title}: {exc}") from exc
            self._warn(f"skipped {title} ({short_reason(exc)})")
        return 0

    def _walk_archive(self, file: IO[bytes], path: str, title: str, rel: str, prefix: tuple[str, ...], depth: int) -> int:
        members = _list_archive(file, title)
        skipped = _Skipped(title)
        found = 0
        with members.archive:
            for info in members.infos:
                name = info.filename
                parts = name.split("/")
                base = parts[-1]
                member_rel = posixpath.join(rel, name)
                if _unsafe_member(name):
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
                problem = _member_problem(info)
                if problem is not None:
                    skipped.add(problem, name)
                    continue
                try:
                    with members.archive.open(info) as opened:
                        head = opened.read(SNIFF_SIZE)
                except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
                    skipped.add(f"cannot be read: {short_reason(exc)}", name)
                    continue
                kind = formats.detect(base, head)
                member_title = f"{title}/{printable(name)}"
                if kind == formats.ARCHIVE:
                    if depth >= ARCHIVE_MAX_DEPTH:
                        skipped.add(f"archive nested more than {ARCHIVE_MAX_DEPTH} deep", name)
                        continue
                    try:
                        with _extract(members.archive, info, member_title) as inner:
                            found += self._walk_archive(inner, path, member_title, member_rel, prefix + (name,), depth + 1)
                    except _ArchiveRefused as refused:
                        skipped.add(str(refused), name)
                    continue
                refusal = self._refusal(kind, base, head)
                if refusal is not None:
                    skipped.add("binary" if kind is None and not formats.legacy_format(base, head) else refusal[0], name)
                    continue
                assert kind is not None
                self.sources.append(Source(path, member_title, kind, info.file_size, prefix + (name,)))
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
        raise _open_error(path, exc) from exc


def _open_error(path: str, exc: OSError | ValueError) -> MemagentError:
    shown = printable(path)
    if isinstance(exc, FileNotFoundError):
        return MemagentError(f"{shown}: no such file or folder", hint="Check the path")
    if isinstance(exc, PermissionError):
        return MemagentError(f"{shown}: permission denied", hint="Check the file's permissions")
    if isinstance(exc, ValueError):
        return MemagentError(f"{shown} is not a valid file name", hint="Check the path")
    return MemagentError(f"Cannot open {shown}: {_reason(exc)}")


def _special_kind(mode: int) -> str | None:
    """What a path that is neither a regular file nor a folder is, in words; None for those two."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _sniff(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read(SNIFF_SIZE)


def _title(path: str) -> str:
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute, os.getcwd())
    except ValueError:  # another drive on Windows
        return printable(absolute)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return printable(absolute)
    return printable(relative)


def _join_title(directory: str, name: str) -> str:
    return os.path.join(_title(directory), printable(name))


def legacy_fix(legacy: str) -> str:
    return ".pptx" if legacy.startswith("PowerPoint") else ".docx"


# --------------------------------------------------------------------------------------------
# Archives


class _ArchiveRefused(Exception):
    """An archive (or a member) past the bounds, or not a zip: said in a note or an error."""

    def __init__(self, reason: str, hint: str = "Check that it is a complete zip archive") -> None:
        super().__init__(reason)
        self.hint = hint


@dataclass
class _Members:
    archive: zipfile.ZipFile
    infos: list[zipfile.ZipInfo]  # the files, sorted by name


def _list_archive(file: IO[bytes], title: str) -> _Members:
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise _ArchiveRefused(f"not a readable zip archive ({short_reason(exc)})") from exc
    infos = sorted((i for i in archive.infolist() if not i.is_dir()), key=lambda i: i.filename)
    if len(infos) > ARCHIVE_MAX_MEMBERS:
        archive.close()
        raise _ArchiveRefused(
            f"{len(infos):,} files in one archive, over the {ARCHIVE_MAX_MEMBERS:,} memagent opens",
            hint="Extract the documents you want read and name them",
        )
    total = sum(i.file_size for i in infos)
    if total > ARCHIVE_MAX_BYTES:
        archive.close()
        raise _ArchiveRefused(
            f"{total / 2**30:.1f} GiB uncompressed, over the {ARCHIVE_MAX_BYTES >> 30} GiB memagent expands (a zip bomb?)",
            hint="Extract the documents you want read and name them",
        )
    return _Members(archive, infos)


def _unsafe_member(name: str) -> bool:
    """A member name that would point outside the archive if it were ever used as a path:
    absolute, with a drive, with "..", or with backslashes. memagent writes no member anywhere,
    but such a name marks a hostile archive, so the member is not read either."""
    parts = name.split("/")
    return name.startswith("/") or "\\" in name or ".." in parts or (len(name) > 1 and name[1] == ":") or "\0" in name


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    if info.flag_bits & 0x1:
        return "encrypted"
    if info.file_size > RATIO_FLOOR and info.file_size > ARCHIVE_MAX_RATIO * max(info.compress_size, 1):
        return f"compressed over {ARCHIVE_MAX_RATIO}:1, a zip bomb?"
    return None


@contextlib.contextmanager
def _extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, title: str) -> Iterator[IO[bytes]]:
    """The member's bytes in an anonymous temporary file (memory up to SPOOL_BYTES), seekable,
    as the readers need. zipfile stops at the declared size and checks the CRC, so a member
    cannot expand past what the bounds were checked against."""
    problem = _member_problem(info)
    if problem is not None:
        raise _ArchiveRefused(problem)
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    try:
        try:
            with archive.open(info) as member:
                while block := member.read(1 << 20):
                    spool.write(block)
        except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
            raise MemagentError(
                f"Cannot read {title} from its archive: {short_reason(exc)}",
                hint="Check that the archive is complete and undamaged",
            ) from exc
        spool.seek(0)
        yield spool
    finally:
        spool.close()


# --------------------------------------------------------------------------------------------
# Reading sources


def read_source(
    source: Source,
    *,
    password: str | None = None,
    warn: Warn,
    stdin: ByteStream | None = None,
    index: int = 0,
    ocr: OcrMode = "auto",
    on_ocr: Callable[[OcrProgress], None] | None = None,
) -> Iterator[Segment]:
    """Stream `source`'s text as Segments, each tagged with `index` (its place in the list).

    Text and stdin segments hold at most BLOCK_SIZE + 3 characters each (see text.read_stream).
    Documents with units (pages, slides, sheets, chapters) yield a segment per unit that has
    text, every one after the first starting with UNIT_SEPARATOR, so the segments still
    concatenate to the full text; units with no text (or only white space) are left out.
    Segment text is valid Unicode (see base.printable) with "\\n" newlines.

    `stdin` is the binary stream read for the stdin source (default: sys.stdin.buffer).
    Errors surface on the first `next()`, like the reading itself.
    """
    context = ReadContext(
        source.title,
        posixpath.basename(source.member[-1]) if source.member else os.path.basename(source.path),
        warn,
        password,
        ocr,
        on_ocr,
        0,
        _read_nested,
    )
    if source.kind == "stdin":
        yield from _numbered(read_stream(stdin if stdin is not None else sys.stdin.buffer, context), index)
        return
    with _open_document(source) as file:
        yield from _numbered(_read(file, source.kind, context), index)


@contextlib.contextmanager
def _open_document(source: Source) -> Iterator[BinaryIO]:
    # A text file is read unbuffered, so each read is one system call and a pipe's data is
    # passed on as soon as it arrives.
    streamed = source.kind == "text" and not source.member
    try:
        file = open(source.path, "rb", buffering=0 if streamed else -1)
    except (OSError, ValueError) as exc:  # ValueError: see _stat_named
        raise _open_error(source.path, exc) from exc
    with contextlib.ExitStack() as stack:
        stack.enter_context(file)
        current: IO[bytes] = file
        title = _title(source.path)
        for name in source.member:
            try:
                archive = stack.enter_context(zipfile.ZipFile(current))
                info = archive.getinfo(name)
                title = f"{title}/{printable(name)}"
                current = stack.enter_context(_extract(archive, info, title))
            except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
                raise MemagentError(
                    f"Cannot read {source.title}: {short_reason(exc)}", hint="Check that the archive did not change"
                ) from exc
            except _ArchiveRefused as refused:
                raise MemagentError(f"{source.title}: {refused}", hint=refused.hint) from None
        yield current  # type: ignore[misc]  # a SpooledTemporaryFile reads and seeks as a BinaryIO


def _read(file: BinaryIO, kind: str, context: ReadContext) -> Iterator[Part]:
    """The reader's parts; a library's own exception (from a damaged file) becomes one line."""
    try:
        yield from formats.reader(kind)(file, context)
    except MemagentError:
        raise
    except Exception as exc:  # the libraries raise many types on damaged files
        raise unreadable(
            context.title, formats.what(kind), short_reason(exc), "Check that it is a complete, undamaged file"
        ) from exc


def _read_nested(file: BinaryIO, name: str, context: ReadContext) -> Iterator[Part]:
    """A document inside another (a mail's attachment) as parts of the outer one, each placed
    `within` its name. One that cannot be read is skipped with a note; the rest goes on."""
    head = file.read(SNIFF_SIZE)
    file.seek(0)
    kind = formats.detect(name, head)
    title = f"{context.title}/{printable(name)}"
    why = None
    if kind is None:
        why = "binary"
    elif kind == formats.ARCHIVE:
        why = "an archive inside a document is not opened"
    elif context.depth >= ARCHIVE_MAX_DEPTH:
        why = f"nested more than {ARCHIVE_MAX_DEPTH} deep"
    elif kind == "image":
        from .ocr import ocr_available

        if context.ocr == "never" or not ocr_available():
            why = "an image, and OCR is off or not installed"
    if why is not None or kind is None:
        context.warn(f"skipped {title} ({why})")
        return
    inner = ReadContext(title, name, context.warn, context.password, context.ocr, context.on_ocr, context.depth + 1, _read_nested)
    first = True
    try:
        for part in _read(file, kind, inner):
            yield Part(part.text, part.place.within(printable(name)), part.joined and not first)
            first = False
    except MemagentError as exc:
        context.warn(f"skipped the rest of {title} ({exc.message})")


def _numbered(parts: Iterable[Part], index: int) -> Iterator[Segment]:
    """Parts to Segments: offsets counted, units separated, blank units dropped."""
    offset = 0
    for part in parts:
        text = printable(normalise_newlines(part.text))
        if not part.joined:
            if not text.strip():
                continue
            if offset:
                text = UNIT_SEPARATOR + text
        elif not text:
            continue
        yield Segment(index, text, offset, part.place)
        offset += len(text)
