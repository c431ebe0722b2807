"""The one interface every reader speaks, and the records that carry provenance.

A reader turns one document (an open, seekable binary file) into `Part`s: pieces of text in
reading order, each with the `Place` it comes from (page 3, slide 12, sheet "Q3", chapter 4
"The Storm", section "Results", an attachment's page). `sources.read_source` numbers the parts
into `Segment`s with character offsets, so offsets and separators are kept in one place and no
reader repeats them.

Readers live one per format family in this package (text, pdf, office, ebook, web, mail,
notebook, ocr; archives are expanded into sources by `sources` itself) and import their libraries
inside the reading function, so that `memagent --help` loads none of them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import BinaryIO, Literal, Protocol

from ..errors import MemagentError

Warn = Callable[[str], None]

# The units a place can name, in the words the JSON uses (docs/JSON.md, "span").
Unit = Literal["page", "slide", "sheet", "chapter", "section"]

# What stands between two units' texts (two pages, two slides) in a document's full text.
UNIT_SEPARATOR = "\n\n"

OcrMode = Literal["auto", "always", "never"]


@dataclass(frozen=True)
class Place:
    """Where a part of a document sits: its unit and that unit's number and label.

    `unit` None is plain running text (a text file, a mail body). `number` is 1-based (page 3,
    slide 12, the 2nd sheet); `label` the unit's name where it has one (sheet "Q3", chapter
    "The Storm", section "Results"). `ocr` says the text was recognised from an image. `part`
    names a document inside this one (a mail's attachment "report.pdf"), so the place reads
    "mail.eml/report.pdf p. 2".
    """

    unit: Unit | None = None
    number: int | None = None
    label: str | None = None
    ocr: bool = False
    part: str | None = None

    @property
    def page(self) -> int | None:
        return self.number if self.unit == "page" else None

    def within(self, part: str) -> Place:
        """This place, in a document that is itself `part` of another (an attachment)."""
        return replace(self, part=part if self.part is None else f"{part}/{self.part}")


NOWHERE = Place()


@dataclass(frozen=True)
class Part:
    """A reader's piece of text. Parts that start a new unit are separated by UNIT_SEPARATOR
    in the full text; a `joined` part continues the one before it with nothing between (the
    blocks of a streamed text file)."""

    text: str
    place: Place = NOWHERE
    joined: bool = False


@dataclass(frozen=True)
class Source:
    """One document to read.

    `path` is what the user named or the file found in a folder ("-" for stdin); `title` is
    the name shown to the model: the path relative to the current directory when it lies
    under it, else absolute, and "stdin" for standard input. `kind` is the format (formats.FORMATS:
    "pdf", "text", "docx", …) or "stdin"; `size` is the size in bytes, None for stdin and pipes.
    `member` names the document inside the archive at `path` (one name per level of nesting):
    `path` "a.zip", `member` ("inner/b.docx",), `title` "a.zip/inner/b.docx". `found` marks a
    document found inside a folder or archive rather than named: one that cannot be read is then
    skipped with a note instead of stopping the run. A compressed file (`log.gz`) keeps its own
    path and title; `kind` is the format of the file inside it (see compressed.method). `pipe` marks
    a named pipe (bash's `<(cmd)`, a FIFO); it and stdin are `stream`s.
    """

    path: str
    title: str
    kind: str
    size: int | None
    member: tuple[str, ...] = ()
    found: bool = False
    pipe: bool = False

    @property
    def stream(self) -> bool:
        """Whether the source gives its text only once (stdin, a pipe): nothing may open it a
        second time, to hash it or to read it again."""
        return self.pipe or self.kind == "stdin"


@dataclass(frozen=True)
class Segment:
    """A piece of one source's text, in reading order.

    `source` is the index of the Source in the list from `collect_sources`, `offset` the number
    of characters before `text` in the source's full text, `place` where the text comes from.
    """

    source: int
    text: str
    offset: int
    place: Place = NOWHERE

    @property
    def page(self) -> int | None:
        return self.place.page


@dataclass(frozen=True)
class OcrProgress:
    """One recognised page or image, for the live view: `done` of `total` in `title`, after
    `seconds` of recognition in this document."""

    title: str
    done: int
    total: int
    seconds: float


@dataclass
class ReadContext:
    """What a reader is told besides its bytes.

    `title` names the document in notes and errors; `name` is its file name (a zip member's or
    attachment's own name), from which readers of inner documents pick a format. `nested`
    reads a document found inside this one (a mail's attachment) with the reader its name and
    bytes call for; `depth` counts how deep such nesting already is.
    """

    title: str
    name: str
    warn: Warn
    password: str | None = None
    ocr: OcrMode = "auto"
    on_ocr: Callable[[OcrProgress], None] | None = None
    depth: int = 0
    nested: Callable[[BinaryIO, str, ReadContext], Iterator[Part]] | None = field(default=None, repr=False)


class Reader(Protocol):
    """A format family's reading function: `(file, context) -> parts in reading order`.

    `file` is open for binary reading and seekable. A reader raises `MemagentError` (see
    `unreadable`) for a document it cannot read at all, and reports lesser losses (a sheet that
    fails, a skipped attachment) through `context.warn`, one line each.
    """

    def __call__(self, file: BinaryIO, context: ReadContext, /) -> Iterator[Part]: ...


class Unreadable(MemagentError):
    """A document that cannot be read, with its `reason` alone for a note that names it."""

    def __init__(self, message: str, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


def unreadable(title: str, what: str, reason: str, hint: str) -> MemagentError:
    """The one-line error for a document that cannot be read: 'Cannot read Word file a.docx: …'."""
    return Unreadable(f"Cannot read {what} {title}: {reason}", reason, hint=hint)


def short_reason(exc: BaseException, limit: int = 120) -> str:
    """An exception's first line, printable and at most `limit` characters."""
    lines = str(exc).strip().splitlines()
    reason = printable(lines[0]) if lines else type(exc).__name__
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def printable(text: str) -> str:
    """`text` as valid Unicode, each lone surrogate replaced by U+FFFD.

    A file name that is not UTF-8 comes from the OS with its bad bytes as lone surrogates
    (Python's surrogateescape), and pypdf's text can hold them too (it decodes UTF-16 with
    "surrogatepass"). Such a string cannot be encoded as UTF-8: a title or page text holding
    one crashed chunking (UnicodeEncodeError), the tokenizer and printing. Found by
    tests/test_fuzz.py. A surrogate pair split over two strings and joined (a PDF font mapping
    one code to each half of an emoji) becomes the character it stands for. A Source's `path`
    keeps the name as it is, to open the file with.
    """
    if text.isascii():  # one C pass: most text is done here
        return text
    try:
        text.encode("utf-8")  # a C pass too, and 2.6x faster than searching for surrogates
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# The Latin ligatures of Unicode's Alphabetic Presentation Forms (U+FB00-U+FB06), as NFKC
# decomposes them: TeX-made PDFs give "deﬁnes" for "defines", which the model reads as rare byte
# tokens, InfMem's search does not match and a reader cannot find. ſt (U+FB05) becomes "st", its
# long s the plain one, as NFKC has it: the long s is only an old way to write s, and a search for
# "first" must find "ﬁrﬅ". Only these are expanded: NFKC on the whole text would also change
# superscripts, fractions and full-width forms, which mean something.
_LIGATURES = {0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl", 0xFB05: "st", 0xFB06: "st"}


def expand_ligatures(text: str) -> str:
    """`text` with the Latin ligature characters written out in their letters."""
    if text.isascii():
        return text
    return text.translate(_LIGATURES)


# Terminal escape sequences (CSI, OSC, single-character) and the other C0/C1 controls, which a
# mail header or a notebook's colored traceback carries: the model gains nothing from them.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_]?)|\x9b[0-?]*[ -/]*[@-~]?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> str:
    """`text` without escape sequences and control characters (tabs and newlines kept)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


# What the model never reads: terminal escape sequences (CSI with its final byte, 7- and 8-bit;
# OSC up to its terminator, at most 512 characters and never past a line; the two- and three-byte
# ones such as ESC ( B), then the single C0 and C1 controls but newline and tab.
_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]{0,512}(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]")
# A sequence begun at the end of a text and not yet finished: a streamed text's next block may
# finish it (reading._numbered holds it back until then).
_UNFINISHED = re.compile(r"\x1b\[[0-?]*[ -/]*|\x9b[0-?]*[ -/]*|\x1b\][^\x07\x1b\n]{0,512}\x1b?|\x1b[ -/]*")
_ESCAPE_START = re.compile("[\x1b\x9b]")
_NO_CONTROLS = re.compile(r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]*")
_VERTICAL = str.maketrans("\x0b\x0c", "\n\n")


def without_controls(text: str) -> str:
    """`text` as the model may read it: no control character but newline and tab. Vertical
    tabs and form feeds (a page break in a text file) become newlines; escape sequences (a
    terminal log's colours) and the other C0 and C1 controls, which some PDFs' text layers
    carry, are dropped. Every reader's text passes here (reading._numbered); checking a clean
    text costs ~12 ms a megabyte."""
    if _NO_CONTROLS.fullmatch(text) is not None:
        return text
    return _CONTROLS.sub("", _SEQUENCE.sub("", text.translate(_VERTICAL)))


ESCAPE_HOLD = 520  # the most characters of an unfinished escape sequence held back (OSC: 512 and its ESC ])


def unfinished_escape(text: str) -> int:
    """Where an escape sequence begun near the end of `text` but not finished starts, or
    len(text): what a streamed text holds back until its next block."""
    tail = max(0, len(text) - ESCAPE_HOLD)
    for match in _ESCAPE_START.finditer(text, tail):
        if _UNFINISHED.fullmatch(text, match.start()) is not None:
            return match.start()
    return len(text)


def normalise_newlines(text: str) -> str:
    if "\r" not in text:  # one C scan; the text reader's parts are normalised already
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


STDIN_PATH = "-"


def title_of(path: str) -> str:
    """The name a file is shown by: relative to the current directory when it lies under it,
    else absolute; printable."""
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute, os.getcwd())
    except ValueError:  # another drive on Windows
        return printable(absolute)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return printable(absolute)
    return printable(relative)


def open_error(path: str, exc: OSError | ValueError) -> MemagentError:
    """The one-line error for a path that cannot be opened."""
    shown = printable(path)
    if isinstance(exc, FileNotFoundError):
        return MemagentError(f"{shown}: no such file or folder", hint="Check the path")
    if isinstance(exc, PermissionError):
        return MemagentError(f"{shown}: permission denied", hint="Check the file's permissions")
    if isinstance(exc, ValueError):
        return MemagentError(f"{shown} is not a valid file name", hint="Check the path")
    return MemagentError(f"Cannot open {shown}: {os_reason(exc)}")


def os_reason(exc: OSError) -> str:
    """An OS error's reason in lower case: "permission denied"."""
    return (exc.strerror or str(exc)).lower()
