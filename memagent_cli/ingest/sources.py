"""Source ingestion: from the paths a user names to a stream of plain text.

This module owns two steps and nothing else:

* `collect_sources` turns command-line paths (files, folders, "-" for standard input) into an
  ordered list of `Source`s, deciding for each file whether it is a PDF or text and refusing
  what memagent cannot read, before any model work starts.
* `read_source` streams one source's text as `Segment`s of bounded size, so a consumer can
  start on the first part of a large file before the rest is read. Text files and stdin are
  decoded incrementally (UTF-8 by default, UTF-8/16/32 byte-order marks honoured, bad bytes
  replaced, newlines normalised to "\\n"); PDFs are read page by page with pypdf.

For every source, the texts of its segments concatenated in order are the source's full text,
and each segment's `offset` is the number of characters before it in that text.

Problems the user can fix raise `MemagentError`; lesser things (skipped files, replaced bytes,
PDF pages that fail) are reported through the `warn` callback, one line each.
"""

from __future__ import annotations

import codecs
import fnmatch
import os
import posixpath
import re
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, Protocol

from ..errors import EXIT_USAGE, MemagentError

if TYPE_CHECKING:
    from pypdf import PdfReader

# Bytes read per step from a text file or stdin, and so (give or take one) the most characters
# in a text segment. A module constant so tests can make it tiny to exercise block boundaries.
BLOCK_SIZE = 1 << 20

# How much of a file is inspected to tell text from binary.
SNIFF_SIZE = 8 * 1024

# What stands between two pages' texts in a PDF's full text.
PAGE_SEPARATOR = "\n\n"

STDIN_PATH = "-"


class ByteStream(Protocol):
    """What is read of stdin: a binary stream's `read` (and `read1`, used when it has one)."""

    def read(self, n: int = -1, /) -> bytes: ...


Warn = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    """One document to read.

    `path` is what the user named or the file found in a folder ("-" for stdin); `title` is
    the name shown to the model: the path relative to the current directory when it lies
    under it, else absolute, and "stdin" for standard input. `kind` is "pdf", "text" or
    "stdin"; `size` is the size on disk in bytes, None for stdin and pipes.
    """

    path: str
    title: str
    kind: str
    size: int | None


@dataclass(frozen=True)
class Segment:
    """A piece of one source's text, in reading order.

    `source` is the index of the Source in the list from `collect_sources`, `page` the 1-based
    PDF page (None for text), `offset` the number of characters before `text` in the source's
    full text.
    """

    source: int
    text: str
    page: int | None
    offset: int


# --------------------------------------------------------------------------------------------
# Collecting sources


def collect_sources(
    paths: Sequence[str],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    stdin_is_piped: bool = False,
    warn: Warn,
) -> list[Source]:
    """Expand the user's paths into the ordered list of sources to read.

    Each path is a file, a folder or "-" (stdin, at most once); with no paths, piped stdin is
    read. Files are kept in the order named. Folders are walked recursively in sorted order:
    at each level the entries, files and folders interleaved, are sorted by name (code point
    order, so "B.txt" < "a.txt" and "ch10" < "ch2"), and a folder's contents come where its
    name sorts. Inside folders, hidden entries (name starts with "."), binary files, special
    files and folders reached twice (symlink loops) are skipped with a note through `warn`.

    `include`/`exclude` are fnmatch-style patterns matched against a file's path relative to
    the named folder (with "/" separators) and against its bare name; with no include
    patterns every file is wanted, and exclude wins. Exclude patterns also prune whole
    subfolders. Files named directly are never filtered. A file reached twice (named twice,
    named and inside a named folder, or linked) is listed once, where it is first reached.
    """
    if not paths:
        if stdin_is_piped:
            return [_stdin_source()]
        raise MemagentError(
            "Nothing to read",
            hint="Name a file or folder, or pipe text into memagent",
            exit_code=EXIT_USAGE,
        )
    collector = _Collector(_Filters.make(include, exclude), warn)
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

    directory: str
    by_reason: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, name: str) -> None:
        self.by_reason.setdefault(reason, []).append(name)

    def report(self, warn: Warn) -> None:
        for reason, names in self.by_reason.items():
            if len(names) == 1:
                warn(f"skipped {_join_title(self.directory, names[0])} ({reason})")
            else:
                shown = ", ".join(map(_printable, names[:3])) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
                warn(f"skipped {len(names)} entries in {_title(self.directory)} ({reason}): {shown}")


class _Collector:
    """Accumulates sources across all named paths, remembering what it has already taken."""

    def __init__(self, filters: _Filters, warn: Warn) -> None:
        self.sources: list[Source] = []
        self._filters = filters
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
            self.sources.append(Source(path, _title(path), _kind_from_name(path), None))
            return
        if special is not None:
            # A device can be endless (/dev/zero, /dev/urandom) or block forever (/dev/tty,
            # /proc/kmsg); a socket cannot be opened at all.
            raise MemagentError(
                f"{_printable(path)} is a {special}, not a file; memagent reads files, folders, pipes and stdin",
                hint=f"Copy what you want read into a file first, e.g. head -c 1M {_printable(path)} > sample.txt",
                exit_code=EXIT_USAGE,
            )
        if self._seen_before(info):
            self._warn(f"{_title(path)} is named more than once; reading it once")
            return
        try:
            head = _sniff(path)
        except OSError as exc:
            raise _open_error(path, exc) from exc
        kind = _kind(path, head)
        if kind is None:
            raise MemagentError(
                f"{_printable(path)} looks like a binary file; memagent reads text and PDF files",
                hint="Name a text or PDF file",
            )
        self.sources.append(Source(path, _title(path), kind, info.st_size))

    def _add_directory(self, root: str, info: os.stat_result) -> None:
        visited = {(info.st_dev, info.st_ino)}
        if self._walk(root, "", visited) == 0:
            raise MemagentError(
                f"No readable files in {_printable(root)}",
                hint="It has no text or PDF files, or --include/--exclude left none out; hidden and binary files are skipped",
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
        skipped = _Skipped(directory)
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
        return found

    def _classify(
        self, entry: os.DirEntry[str], rel_dir: str, visited: set[tuple[int, int]], skipped: _Skipped
    ) -> Source | _Subfolder | _AlreadyTaken | None:
        """Decide what to do with one folder entry.

        Returns a Source to add, a _Subfolder to walk, _ALREADY_TAKEN, or None to skip it.
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
        kind = _kind(name, head)
        if kind is None:
            skipped.add("binary", name)
            return None
        return Source(entry.path, _title(entry.path), kind, info.st_size)

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
    shown = _printable(path)
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


# A NUL byte marks a binary file, except in UTF-16/32 text, where most characters have one.
_WIDE_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)


def _kind(path: str, head: bytes) -> str | None:
    """The kind ("pdf" or "text") from a file's name and first bytes; None if it looks binary."""
    if head.startswith(b"%PDF-"):
        return "pdf"
    if _kind_from_name(path) == "pdf":
        return "pdf"
    if b"\0" in head and not head.startswith(_WIDE_BOMS):
        return None
    return "text"


def _kind_from_name(path: str) -> str:
    return "pdf" if path.lower().endswith(".pdf") else "text"


def _title(path: str) -> str:
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute, os.getcwd())
    except ValueError:  # another drive on Windows
        return _printable(absolute)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return _printable(absolute)
    return _printable(relative)


def _join_title(directory: str, name: str) -> str:
    return os.path.join(_title(directory), _printable(name))


def _printable(text: str) -> str:
    """`text` as valid Unicode, each lone surrogate replaced by U+FFFD.

    A file name that is not UTF-8 comes from the OS with its bad bytes as lone surrogates
    (Python's surrogateescape), and pypdf's text can hold them too (it decodes UTF-16 with
    "surrogatepass"). Such a string cannot be encoded as UTF-8: a title or page text holding
    one crashed chunking (UnicodeEncodeError), the tokenizer and printing. Found by
    tests/test_fuzz.py. A surrogate pair split over two strings and joined (a PDF font mapping
    one code to each half of an emoji) becomes the character it stands for. A Source's `path`
    keeps the name as it is, to open the file with.
    """
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


_SURROGATE = re.compile("[\ud800-\udfff]")


# --------------------------------------------------------------------------------------------
# Reading sources


def read_source(
    source: Source,
    *,
    password: str | None = None,
    warn: Warn,
    stdin: ByteStream | None = None,
    index: int = 0,
) -> Iterator[Segment]:
    """Stream `source`'s text as Segments, each tagged with `index` (its place in the list).

    Text and stdin segments hold at most BLOCK_SIZE + 3 characters each: one block's worth,
    plus what earlier reads left held back (a final "\\r" and a character cut by the block's
    end, or the first bytes of a file when reads were too short to tell its byte-order mark).
    A PDF yields one segment per page that has text; every page after the first carries
    PAGE_SEPARATOR at the start of its segment text, so the segments still concatenate to the
    full text. Pages with no text (or only white space) are left out of the full text
    altogether. Page text is valid Unicode (see _printable).

    `stdin` is the binary stream read for the stdin source (default: sys.stdin.buffer).
    Errors surface on the first `next()`, like the reading itself.
    """
    if source.kind == "pdf":
        yield from _read_pdf(source, index, password, warn)
    elif source.kind == "stdin":
        yield from _read_stream(stdin if stdin is not None else sys.stdin.buffer, source.title, index, warn)
    else:
        try:
            # Unbuffered, so each read is one system call and a pipe's data is passed on as
            # soon as it arrives.
            file = open(source.path, "rb", buffering=0)
        except (OSError, ValueError) as exc:  # ValueError: see _stat_named
            raise _open_error(source.path, exc) from exc
        with file:
            yield from _read_stream(file, source.title, index, warn)


def _read_stream(stream: ByteStream, title: str, index: int, warn: Warn) -> Iterator[Segment]:
    # read1 returns what is there instead of waiting to fill the block: a slow pipe's first
    # lines reach the consumer early.
    read = getattr(stream, "read1", None) or stream.read
    decoder = _TextDecoder()
    offset = 0
    head = b""  # the first SNIFF_SIZE bytes: a stream is told from binary data as a file is
    while True:
        block = read(BLOCK_SIZE)
        if len(head) < SNIFF_SIZE:
            head += block[: SNIFF_SIZE - len(head)]
            _check_stream_head(head, title, ended=not block)
        text = decoder.feed(block, final=not block)
        if text:
            yield Segment(index, text, None, offset)
            offset += len(text)
        if not block:
            break
    if decoder.replaced_bytes:
        warn(f"{title}: invalid {decoder.encoding} replaced ({_count(decoder.replaced_bytes, 'byte')})")


def _check_stream_head(head: bytes, title: str, *, ended: bool) -> None:
    """Refuse a stream (stdin, a pipe) whose first bytes are not text, before any is used: binary
    data such as `cat /dev/urandom |` would otherwise be read, and paid for, without end."""
    if len(head) < 4 and not ended:  # a byte-order mark may still be coming
        return
    if head.startswith(b"%PDF-"):
        raise MemagentError(
            f"{title} is a PDF arriving as a stream; memagent reads PDFs from files",
            hint="Save it to a file and name the file",
        )
    if b"\0" in head and not head.startswith(_WIDE_BOMS):
        raise MemagentError(
            f"{title} looks like binary data; memagent reads text and PDF files",
            hint="Pipe text, or name a text or PDF file",
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# Byte-order marks, longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
)
_LONGEST_BOM = 4


# Undecodable bytes become U+FFFD, like errors="replace", but are also counted, so a file's
# damage is reported once with its size. The codec registry is global, so the count lives in
# a thread-local and each decode call reads it before and after.
_REPLACE_AND_COUNT = "memagent.sources.replace-and-count"
_replacements = threading.local()


def _replace_and_count(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _replacements.count = getattr(_replacements, "count", 0) + (error.end - error.start)
    return "\ufffd", error.end


codecs.register_error(_REPLACE_AND_COUNT, _replace_and_count)


class _TextDecoder:
    """Bytes to text, fed block by block: finds the byte-order mark, decodes incrementally
    (so characters split between blocks come out whole), counts replaced bytes and turns
    "\\r\\n" and lone "\\r" into "\\n" (holding back a final "\\r" in case "\\n" begins the
    next block)."""

    def __init__(self) -> None:
        self.encoding = "UTF-8"
        self.replaced_bytes = 0
        self._decoder: codecs.IncrementalDecoder | None = None
        self._head = b""
        self._held_cr = False

    def feed(self, data: bytes, *, final: bool) -> str:
        if self._decoder is None:
            # The byte-order mark may arrive split over several short reads from a pipe.
            self._head += data
            if len(self._head) < _LONGEST_BOM and not final:
                return ""
            data = self._start(self._head)
            self._head = b""
        return self._newlines(self._decode(data, final), final)

    def _start(self, head: bytes) -> bytes:
        codec = "utf-8"
        for bom, name, label in _BOMS:
            if head.startswith(bom):
                codec, self.encoding, head = name, label, head[len(bom) :]
                break
        self._decoder = codecs.getincrementaldecoder(codec)(errors=_REPLACE_AND_COUNT)
        return head

    def _decode(self, data: bytes, final: bool) -> str:
        assert self._decoder is not None
        before = getattr(_replacements, "count", 0)
        text = self._decoder.decode(data, final)
        self.replaced_bytes += getattr(_replacements, "count", 0) - before
        return text

    def _newlines(self, text: str, final: bool) -> str:
        if self._held_cr:
            text = "\r" + text
            self._held_cr = False
        if text.endswith("\r") and not final:
            text = text[:-1]
            self._held_cr = True
        return _normalise_newlines(text)


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --------------------------------------------------------------------------------------------
# PDFs


def _read_pdf(source: Source, index: int, password: str | None, warn: Warn) -> Iterator[Segment]:
    try:
        # An open file rather than the path: given a path, pypdf reads the whole file into
        # memory first; given a file, it seeks and reads what each page needs.
        file = open(source.path, "rb")
    except (OSError, ValueError) as exc:  # ValueError: see _stat_named
        raise _open_error(source.path, exc) from exc
    with file:
        reader = _open_pdf(file, source.title, password)
        offset = 0
        for number, text in _page_texts(reader, source.title, warn):
            if offset:
                text = PAGE_SEPARATOR + text
            yield Segment(index, text, number, offset)
            offset += len(text)
    if offset == 0:
        warn(f"{source.title} has no extractable text (it may be scanned; OCR is not done)")


def _open_pdf(file: BinaryIO, title: str, password: str | None) -> PdfReader:
    # pypdf is imported here so that commands which never meet a PDF do not pay for it.
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(file, strict=False)
        if reader.is_encrypted:
            _unlock(reader, title, password)
        len(reader.pages)  # a broken page tree fails here, as "cannot read", not mid-stream
    except MemagentError:
        raise
    except DependencyError as exc:
        raise _dependency_error(title, exc) from exc
    except Exception as exc:  # pypdf raises many exception types on damaged files
        raise MemagentError(
            f"Cannot read PDF {title}: {_short_reason(exc)}",
            hint="Check that it is a complete, undamaged PDF",
        ) from exc
    return reader


def _unlock(reader: PdfReader, title: str, password: str | None) -> None:
    from pypdf import PasswordType

    if password and reader.decrypt(password) != PasswordType.NOT_DECRYPTED:
        return
    # A file whose user password is empty (only an owner password, restricting printing and
    # the like) opens for anyone, even when --password was meant for another file. An empty
    # *owner* password does not count: pypdf accepts it, but the author set a user password to
    # keep readers out, and PDF viewers ask for it.
    if reader.decrypt("") == PasswordType.USER_PASSWORD:
        return
    if password is None:
        raise MemagentError(f"{title} is encrypted", hint="Pass --password PASSWORD")
    raise MemagentError(f"Wrong password for {title}", hint="Check the password given with --password")


def _page_texts(reader: PdfReader, title: str, warn: Warn) -> Iterator[tuple[int, str]]:
    """(1-based page number, text) for each page with text; failing pages skipped with a note."""
    from pypdf.errors import DependencyError

    for number in range(1, len(reader.pages) + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except DependencyError as exc:
            if _needs_crypto(exc):
                raise _dependency_error(title, exc) from exc
            warn(f"{title}: skipped page {number} ({_short_reason(exc)})")
            continue
        except Exception as exc:  # one damaged page should not cost the rest of the document
            warn(f"{title}: skipped page {number} ({_short_reason(exc)})")
            continue
        text = _printable(_normalise_newlines(text))
        if text.strip():
            yield number, text


def _needs_crypto(exc: Exception) -> bool:
    message = str(exc)
    return "AES" in message or "cryptography" in message


def _dependency_error(title: str, exc: Exception) -> MemagentError:
    if _needs_crypto(exc):
        return MemagentError(
            f"{title} is AES-encrypted and the cryptography package is missing",
            hint="Install pypdf's crypto extra: pip install 'pypdf[crypto]'",
        )
    return MemagentError(f"Cannot read PDF {title}: {_short_reason(exc)}")


def _short_reason(exc: Exception, limit: int = 120) -> str:
    lines = str(exc).strip().splitlines()
    reason = _printable(lines[0]) if lines else type(exc).__name__
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"
