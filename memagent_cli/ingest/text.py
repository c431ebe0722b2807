"""Plain text: files, stdin and pipes, in any common encoding, streamed block by block.

A byte-order mark names UTF-8/16/32. Without one, text that is valid UTF-8 is read as UTF-8;
text whose first block is not is decoded with the encoding charset-normalizer detects in that
block (cp932, GB18030, EUC-KR, Windows-1252, Latin-1…), named in a one-line note. Bytes that
still fail to decode become U+FFFD, counted in one warning. Newlines are normalised to "\\n".
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Iterator
from typing import BinaryIO, Protocol

from ..errors import MemagentError
from .base import Part, ReadContext, count, normalise_newlines
from .formats import looks_binary

# Bytes read per step, and so (give or take one) the most characters in a text part. A module
# constant so tests can make it tiny to exercise block boundaries.
BLOCK_SIZE = 1 << 20

# How much of a stream is inspected to tell text from binary data.
SNIFF_SIZE = 8 * 1024


class ByteStream(Protocol):
    """What is read of stdin: a binary stream's `read` (and `read1`, used when it has one)."""

    def read(self, n: int = -1, /) -> bytes: ...


def read_text(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A text file's parts: its decoded blocks, all `joined` (text has no units to separate)."""
    return read_stream(file, context)


def read_stream(stream: ByteStream, context: ReadContext) -> Iterator[Part]:
    """Text from a stream, decoded as it arrives: a slow pipe's first lines reach the model early."""
    # read1 returns what is there instead of waiting to fill the block.
    read = getattr(stream, "read1", None) or stream.read
    decoder = _TextDecoder()
    head = b""  # the first SNIFF_SIZE bytes: a stream is told from binary data as a file is
    while True:
        block = read(BLOCK_SIZE)
        if len(head) < SNIFF_SIZE:
            head += block[: SNIFF_SIZE - len(head)]
            _check_stream_head(head, context.title, ended=not block)
        text = decoder.feed(block, final=not block)
        if decoder.detected:
            context.warn(f"{context.title} is not UTF-8; decoded as {decoder.encoding} (detected)")
            decoder.detected = False
        # A chosen encoding decodes the whole first window at once: it is passed on in blocks too.
        for start in range(0, len(text), BLOCK_SIZE):
            yield Part(text[start : start + BLOCK_SIZE], joined=True)
        if not block:
            break
    if decoder.replaced_bytes:
        context.warn(f"{context.title}: invalid {decoder.encoding} replaced ({count(decoder.replaced_bytes, 'byte')})")


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
    if looks_binary(head):
        raise MemagentError(
            f"{title} looks like binary data; memagent reads text and documents from files",
            hint="Pipe text, or save the data to a file and name the file",
        )


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


# Text without a byte-order mark is UTF-8 unless its first DETECT_SIZE bytes say otherwise.
DETECT_SIZE = 64 * 1024


def detect_encoding(data: bytes) -> str | None:
    """The encoding charset-normalizer finds for `data` (a Python codec name), or None when it
    finds none or finds UTF-8/ASCII."""
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None:
        return "cp1252" if _reads_as_western(data) else None
    if best.encoding in ("utf_8", "ascii"):
        return None
    if not best.encoding.startswith(_MULTIBYTE) and _reads_as_western(data):
        # On short Western text charset-normalizer often ranks another single-byte code page
        # first ("crème" as "crčme" in cp1250, or as Urdu in cp1006); Windows-1252 that reads
        # as Western words is far the likelier.
        return "cp1252"
    return str(best.encoding)


_MULTIBYTE = ("cp932", "shift_jis", "euc", "gb", "big5", "cp949", "cp950", "johab", "iso2022", "hz", "utf")


def _reads_as_western(data: bytes) -> bool:
    """Whether `data` in Windows-1252 reads as Western text: every non-ASCII character a letter
    (or a common typographic mark), and most letters plain ASCII. Symbols inside words mark
    another code page (Polish in cp1250: "Za¿ó³æ"); words of accented letters alone mark
    another script ("Ïðèâåò" is Russian in cp1251)."""
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return False
    wide = [c for c in text if ord(c) > 127]
    if not all(c.isalpha() or c in _TYPOGRAPHIC for c in wide):
        return False
    letters = sum(c.isalpha() for c in text)
    return sum(c.isalpha() for c in wide) <= 0.3 * letters


_TYPOGRAPHIC = frozenset(
    "\u201e\u201a\u2039\u203a\u2022\u2122\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u00a0\u00ab\u00bb\u20ac\u00b0\u00a3\u00a7\u00b7"
)


def choose_encoding(window: bytes, ascii_prefix: int, *, cut: bool) -> str | None:
    """The codec for text without a byte-order mark whose first bytes are `window` (DETECT_SIZE
    of them, or all there is), the first `ascii_prefix` of them ASCII and the next one not; None
    for UTF-8. `cut`: more bytes follow the window, so a character may be cut at its end.

    The rule reads only the bytes, never how they arrived, so a file, a pipe and stdin fed in
    any pieces decode the same: a window that is valid UTF-8 is UTF-8; else the detected
    encoding, if it reads the ASCII prefix (already passed on) as ASCII."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(window, final=not cut)
        return None
    except UnicodeDecodeError:
        pass
    if b"\0" in window:  # UTF-16/32 without a mark, or binary data: no guess is better than UTF-8's
        return None
    found = detect_encoding(window)
    if found is None or found.startswith(("utf_16", "utf_32")):
        return None
    prefix = window[:ascii_prefix]
    try:
        if prefix.decode(found) != prefix.decode("ascii"):
            return None
    except UnicodeDecodeError:
        return None
    return found


def decode_text(data: bytes) -> tuple[str, str | None]:
    """A short text given as bytes (a question typed in a terminal that is not UTF-8, a file of
    questions) decoded by the rule documents follow: UTF-8 when it is valid; else Windows-1252 where
    it reads as Western words, or the encoding detected (choose_encoding); else UTF-8 with
    replacement characters. Returns the text and the codec
    used when it was not UTF-8 ("utf-8, with replacement characters" for the last)."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        pass
    if _reads_as_western(data) or _latin_letters(data):
        found: str | None = "cp1252"  # first: a few words are too few for detection ("café?" reads as Johab)
    else:
        found = choose_encoding(data, next((i for i, byte in enumerate(data) if byte > 127), len(data)), cut=False)
    if found is not None:
        try:
            return data.decode(found), found
        except UnicodeDecodeError:
            pass
    return data.decode("utf-8", "replace"), "utf-8, with replacement characters"


def _latin_letters(data: bytes) -> bool:
    """Whether `data` has a few non-ASCII bytes, each a Latin letter in Windows-1252 ("né",
    "Müller", "café?"): a word or two, which _reads_as_western's proportions cannot judge. More
    of them is a text detection can judge (a word in another script reads as Latin letters too:
    "Ïðèâåò" is Russian in cp1251)."""
    try:
        wide = [c for c in data.decode("cp1252") if ord(c) > 127]
    except UnicodeDecodeError:
        return False
    return len(wide) <= 3 and all(c.isalpha() and "\u00c0" <= c <= "\u017f" for c in wide)


class _TextDecoder:
    """Bytes to text, fed block by block: finds the byte-order mark or, without one, the
    encoding (choose_encoding); decodes incrementally (so characters split between blocks come
    out whole), counts replaced bytes and turns "\r\n" and lone "\r" into "\n" (holding back a
    final "\r" in case "\n" begins the next block).

    ASCII is passed on as it arrives. At the first other byte within the first DETECT_SIZE, the
    rest of that window is gathered (or the input's end) before the encoding is chosen: only
    text that is not plain ASCII waits."""

    def __init__(self) -> None:
        self.encoding = "UTF-8"
        self.detected = False  # set once when a detected encoding is chosen, for the caller's note
        self.replaced_bytes = 0
        self._decoder: codecs.IncrementalDecoder | None = None
        self._head = b""  # bytes before the byte-order mark is known
        self._window = b""  # the first bytes, while the encoding is undecided
        self._ascii = 0  # how many bytes of the window were ASCII and passed on
        self._held_cr = False

    def feed(self, data: bytes, *, final: bool) -> str:
        if self._decoder is None and not self._window:
            # The byte-order mark may arrive split over several short reads from a pipe.
            self._head += data
            if len(self._head) < _LONGEST_BOM and not final:
                return ""
            data, self._head = self._head, b""
            bom = self._bom(data)
            data = data[len(bom) :] if bom else data
        if self._decoder is None:
            return self._newlines(self._probe(data, final), final)
        return self._newlines(self._decode(data, final), final)

    def _bom(self, head: bytes) -> bytes | None:
        for bom, name, label in _BOMS:
            if head.startswith(bom):
                if self._decoder is None:
                    self._decoder = codecs.getincrementaldecoder(name)(errors=_REPLACE_AND_COUNT)
                    self.encoding = label
                return bom
        return None

    def _probe(self, data: bytes, final: bool) -> str:
        """Undecided: pass ASCII on; from the first other byte, gather the window, then choose."""
        start = len(self._window)
        self._window += data
        if start == self._ascii:  # all ASCII so far: pass on what still is
            run = len(data) - len(data.lstrip(_ASCII_BYTES)) if data else 0
            self._ascii += run
            passed = data[:run].decode("ascii")
            if self._ascii == len(self._window) and len(self._window) < DETECT_SIZE and not final:
                return passed
        else:
            passed = ""
        if len(self._window) < DETECT_SIZE and not final:
            return passed
        window = self._window[:DETECT_SIZE]
        codec = None
        if self._ascii < len(window):
            codec = choose_encoding(window, self._ascii, cut=len(self._window) > DETECT_SIZE or not final)
        if codec is not None:
            self.encoding, self.detected = codecs.lookup(codec).name, True
        self._decoder = codecs.getincrementaldecoder(codec or "utf-8")(errors=_REPLACE_AND_COUNT)
        rest, self._window = self._window[self._ascii :], b""
        return passed + self._decode(rest, final)

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
        return normalise_newlines(text)


_ASCII_BYTES = bytes(range(128))
