"""Compressed files (`.gz`, `.bz2`, `.xz`, and `.zst` where Python reads it): read as the file
inside them, whose format is told by its own name and bytes (`build.log.gz` is text,
`report.pdf.gz` a PDF, `tmux.1.gz` a manual page).

A file is taken for compressed by its ending and its first bytes together: a `.gz` file that
is not gzip data is read as what it is. The file inside is decompressed as it is read, within
the bounds of archives (archive.MAX_BYTES in all, archive.MAX_RATIO past archive.RATIO_FLOOR), so
a small file that would expand without end is stopped where it passes them. Text streams
through; other formats, whose libraries seek, get the file inside in an anonymous temporary file
(in memory up to archive.SPOOL_BYTES), never at a path of its own name.

Python's standard library reads gzip, bzip2 and xz; zstd only from Python 3.14 on (its
`compression.zstd`): on an older Python a `.zst` file is refused with a note saying so.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import tempfile
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, cast

from ..errors import MemagentError
from . import archive
from .base import short_reason

# ending -> (method, first bytes)
_METHODS = {
    ".gz": ("gzip", b"\x1f\x8b"),
    ".bz2": ("bzip2", b"BZh"),
    ".xz": ("xz", b"\xfd7zXZ\x00"),
    ".zst": ("zstd", b"\x28\xb5\x2f\xfd"),
}
MAGIC_SIZE = 6


class Damaged(Exception):
    """Compressed data that cannot be decompressed, or that passes the bounds."""


def method(name: str, head: bytes) -> str | None:
    """ "gzip", "bzip2", "xz" or "zstd" where `name` ends so and `head` (the file's first bytes)
    starts as such data does; else None."""
    for ending, (found, magic) in _METHODS.items():
        if name.lower().endswith(ending) and len(name) > len(ending):
            return found if head.startswith(magic) else None
    return None


def inner_name(name: str) -> str:
    """The name of the file inside: `name` without its compression ending."""
    for ending in _METHODS:
        if name.lower().endswith(ending):
            return name[: -len(ending)]
    return name


def available(method: str) -> bool:
    """Whether this Python reads `method` (zstd needs Python 3.14's compression.zstd)."""
    return method != "zstd" or _zstd() is not None


UNAVAILABLE = "zstd-compressed, which memagent reads on Python 3.14 and later only"
UNAVAILABLE_HINT = "Decompress it first (zstd -d FILE) and name the file inside"


def _zstd() -> Any:
    try:
        return importlib.import_module("compression.zstd")
    except ImportError:
        return None


def _errors() -> tuple[type[BaseException], ...]:
    import lzma
    import zlib

    found: list[type[BaseException]] = [OSError, EOFError, ValueError, zlib.error, lzma.LZMAError]
    zstd = _zstd()
    if zstd is not None:
        found.append(zstd.ZstdError)
    return tuple(found)


def _decompressing(file: IO[bytes], method: str) -> IO[bytes]:
    if method == "gzip":
        import gzip

        return cast(IO[bytes], gzip.GzipFile(fileobj=file, mode="rb"))
    if method == "bzip2":
        import bz2

        return bz2.BZ2File(file)
    if method == "xz":
        import lzma

        return lzma.LZMAFile(file)
    zstd = _zstd()
    if zstd is None:  # collecting refused it already; a file that changed since is said so
        raise Damaged(UNAVAILABLE)
    opened: IO[bytes] = zstd.ZstdFile(file)
    return opened


def peek(file: IO[bytes], method: str, size: int) -> bytes:
    """The first `size` bytes of the file inside; raises Damaged with a reason."""
    try:
        with _decompressing(file, method) as inner:
            return inner.read(size)
    except _errors() as exc:
        raise Damaged(f"damaged {method} data ({short_reason(exc)})") from exc


def limit(compressed_size: int) -> int:
    """The most bytes a file of `compressed_size` bytes may expand to: archive.MAX_RATIO times
    its size, but never less than archive.RATIO_FLOOR nor more than archive.MAX_BYTES."""
    return min(max(archive.RATIO_FLOOR, archive.MAX_RATIO * compressed_size), archive.MAX_BYTES)


class Bounded(io.RawIOBase):
    """The file inside, read through its decompressor and stopped with a MemagentError where it
    expands past `limit` bytes, or where its data is damaged."""

    def __init__(self, inner: IO[bytes], method: str, title: str, limit: int) -> None:
        super().__init__()
        self._inner = inner
        self._method = method
        self._title = title
        self._limit = limit
        self._read = 0
        self._errors = _errors()

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        want = self._limit + 1 - self._read
        if size is not None and size >= 0:
            want = min(want, size)
        try:
            data = self._inner.read(want) if want > 0 else b""
        except self._errors as exc:
            raise MemagentError(
                f"Cannot read {self._title}: damaged {self._method} data ({short_reason(exc)})",
                hint="Check that it is a complete, undamaged file",
            ) from exc
        self._read += len(data)
        if self._read > self._limit:
            raise MemagentError(
                f"{self._title} expands past {self._limit / 2**20:,.0f} MiB, over {archive.MAX_RATIO}:1 "
                "(a compression bomb?); memagent stops there",
                hint="Decompress it yourself if you trust it, and name what you want read",
            )
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


@contextlib.contextmanager
def opened(file: BinaryIO, method: str, title: str, *, seekable: bool) -> Iterator[BinaryIO]:
    """The file inside `file` (compressed with `method`), within the bounds. `seekable` spools it
    to an anonymous temporary file first, for the readers that seek; else it streams."""
    start = file.tell()
    size = file.seek(0, io.SEEK_END) - start
    file.seek(start)
    try:
        inner = _decompressing(file, method)
    except Damaged as exc:
        raise MemagentError(f"Cannot read {title}: {exc}") from None
    with Bounded(inner, method, title, limit(size)) as stream:
        if not seekable:
            yield stream  # type: ignore[misc]  # a RawIOBase reads as a BinaryIO
            return
        with tempfile.SpooledTemporaryFile(max_size=archive.SPOOL_BYTES) as spool:
            while block := stream.read(1 << 20):
                spool.write(block)
            spool.seek(0)
            yield spool  # type: ignore[misc]  # a SpooledTemporaryFile reads and seeks as a BinaryIO
