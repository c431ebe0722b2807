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
from typing import BinaryIO, cast

from ..errors import MemagentError
from . import archive, compressed, formats
from .base import (
    UNIT_SEPARATOR,
    OcrMode,
    OcrProgress,
    Part,
    ReadContext,
    Segment,
    Source,
    Unreadable,
    Warn,
    expand_ligatures,
    normalise_newlines,
    open_error,
    printable,
    short_reason,
    title_of,
    unfinished_escape,
    unreadable,
    without_controls,
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

    Text and stdin segments hold at most BLOCK_SIZE + 3 characters each (see text.read_stream),
    and an escape sequence left unfinished by the block before (at most base.ESCAPE_HOLD).
    Documents with units (pages, slides, sheets, chapters) yield a segment per unit that has
    text, every one after the first starting with UNIT_SEPARATOR, so the segments still
    concatenate to the full text; units with no text (or only white space) are left out.
    Segment text is valid Unicode (see base.printable) with "\\n" newlines and no other control
    character but tab (see base.without_controls).

    `stdin` is the binary stream read for the stdin source (default: sys.stdin.buffer).
    Errors surface on the first `next()`, like the reading itself. A source `found` in a folder
    or archive that cannot be read is skipped instead, with one note through `warn` naming it and
    the cause (what it yielded before the fault is kept); one named is an error.
    """
    segments = _read_source(source, password, warn, stdin, index, ocr, on_ocr)
    if not source.found:
        yield from segments
        return
    started = False
    try:
        for segment in segments:
            started = True
            yield segment
    except MemagentError as exc:
        warn(f"skipped {'the rest of ' if started else ''}{source.title} ({_cause(exc, source.title)})")


def _cause(exc: MemagentError, title: str) -> str:
    """Why a document could not be read, for a note that already names it."""
    if isinstance(exc, Unreadable):
        return exc.reason
    message = exc.message
    for prefix in (f"{title}: ", f"Cannot read {title}: ", f"Cannot open {title}: "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    if message.startswith(f"{title} "):  # "x.gz expands past …": "skipped x.gz (it expands past …)"
        return "it " + message[len(title) + 1 :]
    return message


def _read_source(
    source: Source,
    password: str | None,
    warn: Warn,
    stdin: ByteStream | None,
    index: int,
    ocr: OcrMode,
    on_ocr: Callable[[OcrProgress], None] | None,
) -> Iterator[Segment]:
    name = posixpath.basename(source.member[-1]) if source.member else os.path.basename(source.path)
    context = ReadContext(
        source.title,
        compressed.inner_name(name) if _compression(source, name) else name,
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
    with _open_document(source, name) as file:
        yield from _numbered(_read(file, source.kind, context), index)


def _compression(source: Source, name: str) -> bool:
    """Whether `source` may be a compressed file: its name says so (its bytes decide)."""
    return source.kind != "stdin" and source.size is not None and compressed.inner_name(name) != name


@contextlib.contextmanager
def _open_document(source: Source, name: str) -> Iterator[BinaryIO]:
    # A text file is read unbuffered, so each read is one system call and a pipe's data is
    # passed on as soon as it arrives.
    streamed = source.kind == "text" and not source.member
    try:
        file = open(source.path, "rb", buffering=0 if streamed else -1)
    except (OSError, ValueError) as exc:  # ValueError: see _stat_named
        raise open_error(source.path, exc) from exc
    with contextlib.ExitStack() as stack:
        document: BinaryIO = stack.enter_context(file)
        if source.member:
            member = archive.open_member(file, source.member, title_of(source.path), source.title)
            document = cast(BinaryIO, stack.enter_context(member))  # a SpooledTemporaryFile reads and seeks as one
        if _compression(source, name):
            method = compressed.method(name, _head(document))
            if method is not None:
                inside = compressed.opened(document, method, source.title, seekable=source.kind != "text")
                document = stack.enter_context(inside)
        yield document


def _head(file: BinaryIO) -> bytes:
    """A regular file's first bytes, the file left where it was (at its start)."""
    start = file.tell()
    head = b""
    while len(head) < compressed.MAGIC_SIZE and (block := file.read(compressed.MAGIC_SIZE - len(head))):
        head += block
    file.seek(start)
    return head


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
    """Parts to Segments: offsets counted, units separated, blank units dropped, ligatures written
    out (base.expand_ligatures: every format, so the model, the search and the quotes see "defines"), control
    characters removed (base.without_controls; an escape sequence a streamed block ends in is
    held back until the next block finishes it)."""
    offset = 0
    held = Part("")  # the unfinished escape sequence a joined part ended in
    for part in parts:
        text = expand_ligatures(printable(normalise_newlines(part.text)))
        if held.text and part.joined:
            text = held.text + text
        elif held.text:  # a new unit: what was held ends the last one
            last = without_controls(held.text)
            if last:
                yield Segment(index, last, offset, held.place)
                offset += len(last)
        held = Part("")
        if part.joined:
            cut = unfinished_escape(text)
            if cut < len(text):
                text, held = text[:cut], Part(text[cut:], part.place, True)
        text = without_controls(text)
        if not part.joined:
            if not text.strip():
                continue
            if offset:
                text = UNIT_SEPARATOR + text
        elif not text:
            continue
        yield Segment(index, text, offset, part.place)
        offset += len(text)
    last = without_controls(held.text)
    if last:
        yield Segment(index, last, offset, held.place)
