"""Reading one source: open its file (or the document inside an archive), hand it to its
format's reader, and number the reader's parts into `Segment`s.

The numbering is the one place offsets and separators are made: units (pages, slides, sheets)
are separated by UNIT_SEPARATOR, blank units dropped, newlines normalised and lone surrogates
replaced, so that a source's segments concatenate to its full text and each `offset` counts the
characters before it. A document inside another (a mail's attachment) is read by the reader its
name and bytes call for, its places marked `within` it.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from ..errors import MemagentError
from . import archive, formats
from .base import (
    UNIT_SEPARATOR,
    OcrMode,
    OcrProgress,
    Part,
    ReadContext,
    Segment,
    Source,
    Warn,
    normalise_newlines,
    open_error,
    printable,
    short_reason,
    title_of,
    unreadable,
)
from .text import SNIFF_SIZE, ByteStream, read_stream


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
        raise open_error(source.path, exc) from exc
    with file:
        if not source.member:
            yield file
            return
        with archive.open_member(file, source.member, title_of(source.path), source.title) as member:
            yield member  # type: ignore[misc]  # a SpooledTemporaryFile reads and seeks as a BinaryIO


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
    elif context.depth >= archive.MAX_DEPTH:
        why = f"nested more than {archive.MAX_DEPTH} deep"
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
