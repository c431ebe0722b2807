"""PDFs, page by page with pypdf; pages without a text layer are recognised with OCR.

`--ocr auto` (the default) recognises only pages whose text layer is empty, `always` every page
(for a text layer that is garbage), `never` none. Without the `ocr` extra, pages that needed it
are named in one note with the command that installs it.

Every page's text layer is read first, so that what recurs on most pages (running heads, page
numbers) can be told from the text, and the document's words decide which hyphens at line ends
belong to their word (pdftext.tidy); the pages are then given in order, as tidied, or recognised.
A page whose drawing has ruling lines that could bound a table is searched for tables with PDFium,
and they are given as rows (pdftables).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import MemagentError
from .base import Part, Place, ReadContext, Warn, short_reason
from .ocr import OCR_INSTALL, PdfOcr, ocr_available
from .pdftables import Pieces, Rules, Table, find_tables, place
from .pdftext import tidy

if TYPE_CHECKING:
    from pypdf import PdfReader


def read_pdf(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    reader = _open_pdf(file, context.title, context.password)
    total = len(reader.pages)
    ocr: PdfOcr | None = None
    scanned: list[int] = []  # pages with no text but an image, that OCR did not read
    any_text = False
    finder = _Tables(file, context.password)
    try:
        pages = list(_page_texts(reader, context.title, context.warn, finder))
    finally:
        finder.close()
    tidied = tidy([text for _, text, _ in pages], [tables for _, _, tables in pages])
    try:
        for (number, text, _), tidy_text in zip(pages, tidied.pages):
            # An empty page that draws an image looks scanned; one that draws nothing is blank.
            drawn = not text.strip() and context.ocr != "never" and _has_images(reader, number)
            wanted = context.ocr == "always" or (context.ocr == "auto" and drawn)
            if wanted and ocr is None and ocr_available():
                ocr = PdfOcr(file, context, total)
            if wanted and ocr is not None:
                recognised = ocr.page_text(number)
                if recognised.strip():
                    any_text = True
                    yield Part(recognised, Place("page", number, ocr=True))
                    continue
            if text.strip():
                any_text = True
                yield Part(tidy_text, Place("page", number))  # blank when all it had was a running head
            elif ocr is None and (context.ocr == "never" or drawn):
                scanned.append(number)
    finally:
        if ocr is not None:
            ocr.close()
    left_out = tidied.note(context.title, total)
    if left_out:
        context.warn(left_out)
    _report(context, scanned, total, any_text, ocr is not None)


def _report(context: ReadContext, scanned: list[int], total: int, any_text: bool, recognised: bool) -> None:
    """One note for what was not read: pages that look scanned (OCR off or not installed), or
    a document with no text at all."""
    if context.ocr == "never":
        why = "it may be scanned; OCR is off: --ocr never"
    elif not ocr_available():
        why = f"it may be scanned; to read it with OCR: {OCR_INSTALL}"
    else:
        why = "OCR found none either" if recognised else "no text layer and no images"
    if not any_text:
        context.warn(f"{context.title} has no extractable text ({why})")
    elif scanned and (context.ocr == "never" or not ocr_available()):
        pages = f"{len(scanned)} of {total} pages have" if len(scanned) > 1 else f"page {scanned[0]} of {total} has"
        context.warn(f"{context.title}: {pages} no text layer ({why})")


def _has_images(reader: PdfReader, number: int) -> bool:
    """Whether a page draws any external object (a scan is an image XObject): a page with none
    is blank, and rendering it for OCR would find nothing."""
    try:
        resources = reader.pages[number - 1].get("/Resources")
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        return bool(xobjects is not None and len(xobjects.get_object()))
    except Exception:  # a damaged resource dictionary: let OCR look
        return True


def _open_pdf(file: BinaryIO, title: str, password: str | None) -> PdfReader:
    # pypdf is imported here so that commands which never meet a PDF do not pay for it.
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        # An open file rather than the path: given a path, pypdf reads the whole file into
        # memory first; given a file, it seeks and reads what each page needs.
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
            f"Cannot read PDF {title}: {short_reason(exc)}",
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


def _page_texts(reader: PdfReader, title: str, warn: Warn, finder: _Tables) -> Iterator[tuple[int, str, list[Table]]]:
    """(1-based page number, text, tables) for each page, "" for one without text; failing pages
    skipped with a note. A page with tables has each in its text as a line pdftables.MARK, its
    index, MARK, where its lines stood."""
    from pypdf.errors import DependencyError

    for number in range(1, len(reader.pages) + 1):
        rules, pieces = Rules(), Pieces()
        try:
            page = reader.pages[number - 1]
            text = page.extract_text(visitor_operand_before=rules, visitor_text=pieces) or ""
            tables = finder.tables(number, page, rules, pieces) if rules.promising(pieces, float(page.mediabox.height)) else []
            placed = place(pieces, tables, float(page.mediabox.height)) if tables else None
            if placed is None:
                tables = []
            else:
                text = placed
        except DependencyError as exc:
            if _needs_crypto(exc):
                raise _dependency_error(title, exc) from exc
            warn(f"{title}: skipped page {number} ({short_reason(exc)})")
            continue
        except Exception as exc:  # one damaged page should not cost the rest of the document
            warn(f"{title}: skipped page {number} ({short_reason(exc)})")
            continue
        # newlines, lone surrogates and control characters are mended where every reader's parts are numbered
        yield number, _ligatures(text), [replace(t, rows=tuple(tuple(map(_ligatures, row)) for row in t.rows)) for t in tables]


class _Tables:
    """PDFium's view of the document (pypdfium2), opened for the first page that may hold a table;
    a page it cannot read keeps pypdf's text."""

    def __init__(self, file: BinaryIO, password: str | None) -> None:
        self.file = file
        self.password = password
        self.document: Any = None
        self.failed = False

    def tables(self, number: int, page: Any, rules: Rules, pieces: Pieces) -> list[Table]:
        # PDFium measures from the media box's bottom left, pypdf's pieces and rules from the page
        # space's origin: the two agree where the box starts at 0, 0 and the page is not turned
        box = page.mediabox
        if self.failed or page.rotation % 360 or float(box.left) or float(box.bottom):
            return []
        try:
            if self.document is None:
                self.document = _open_pdfium(self.file, self.password)
            drawn = self.document[number - 1]
            textpage = drawn.get_textpage()
            try:
                return find_tables(textpage, float(box.height), rules, pieces)
            finally:
                textpage.close()
                drawn.close()
        except Exception:  # a page PDFium cannot read keeps pypdf's text
            self.failed = self.document is None
            return []

    def close(self) -> None:
        if self.document is not None:
            self.document.close()


def _open_pdfium(file: BinaryIO, password: str | None) -> Any:
    """The PDF for PDFium (pypdfium2), on the file pypdf reads: both seek before every read. pypdf
    has unlocked it with the password, or with none where only an owner password is set."""
    import pypdfium2 as pdfium  # type: ignore[import-untyped]

    failure: Exception | None = None
    for tried in dict.fromkeys((password, None)):
        file.seek(0)
        try:
            return pdfium.PdfDocument(file, password=tried)
        except pdfium.PdfiumError as exc:
            failure = exc
    raise failure or RuntimeError("no password to try")


# TeX's OT1 fonts put the ff, fi, fl, ffi and ffl ligatures at codes 11-15; a PDF whose fonts map
# no glyph names for them gives those codes as text ("\x0cle de\x0cnes" for "file defines"). Where
# one stands before a lower-case letter it is such a ligature; elsewhere (an encoding table's
# cells) it is dropped with the other control characters.
_LIGATURE = re.compile(r"[\x0b-\x0f](?=[a-z])")
_LIGATURES = {"\x0b": "ff", "\x0c": "fi", "\x0d": "fl", "\x0e": "ffi", "\x0f": "ffl"}


def _ligatures(text: str) -> str:
    return _LIGATURE.sub(lambda match: _LIGATURES[match.group()], text)


def _needs_crypto(exc: Exception) -> bool:
    message = str(exc)
    return "AES" in message or "cryptography" in message


def _dependency_error(title: str, exc: Exception) -> MemagentError:
    if _needs_crypto(exc):
        return MemagentError(
            f"{title} is AES-encrypted and the cryptography package is missing",
            hint="Install pypdf's crypto extra: pip install 'pypdf[crypto]'",
        )
    return MemagentError(f"Cannot read PDF {title}: {short_reason(exc)}")
