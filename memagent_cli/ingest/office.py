"""What the Office families share: Word, PowerPoint and Excel (Office Open XML and 97-2003
.xls), their OpenDocument counterparts (.odt, .odp, .ods) and RTF, read by the sibling modules
word, slides and sheets.

This module owns the checks made before a package is handed to a library (encryption, damage,
zip bombs, OLE files with a new name), unit labels and the names of the formats in messages,
loading an OpenDocument file, and the walk of OpenDocument content that turns its elements
into text (paragraphs, lists, tables, notes, comments, alt text).

Images are never read, only their descriptions. Nothing a document points at (external
relationships, linked images, remote templates) is opened: the libraries used here load only
the parts inside the package, and their XML parsers resolve no external entities.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import math
import zipfile
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from . import archive
from .base import ReadContext, printable, short_reason, unreadable
from .formats import BY_KIND

# The most columns a sheet has in Excel and LibreOffice (MAX_ROWS, in sheets, is the most
# rows). An OpenDocument cell may say it repeats a million times; past this bound the file is
# not a real sheet.
MAX_COLUMNS = 16_384

# A zip package member that unpacks to more than this, at more than archive.MAX_RATIO to 1, is a zip
# bomb: the Word, PowerPoint and OpenDocument libraries load every member into memory.
BOMB_FLOOR = 64 << 20
MAX_UNPACKED = 2 << 30  # all members together, where the library loads them all

LABEL_LENGTH = 80

OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file: .xls, .doc, .ppt, or an encrypted package
ENCRYPTED_HINT = "memagent cannot open encrypted Office files; save an unprotected copy and name that"
DAMAGED_HINT = "Check that it is a complete, undamaged file"


# --------------------------------------------------------------------------------------------
# Shared helpers


def unit_label(text: str) -> str | None:
    """A unit's label: white space collapsed, at most LABEL_LENGTH characters; None if empty."""
    label = " ".join(printable(text).split())
    if not label:
        return None
    return label if len(label) <= LABEL_LENGTH else label[: LABEL_LENGTH - 1] + "…"


def one_line(text: str) -> str:
    """A table cell's text on one line, so each row stays one line."""
    return " ".join(text.split())


def what_of(kind: str) -> str:
    return BY_KIND[kind].what


def check_package(file: BinaryIO, context: ReadContext, kind: str, *, streamed: Callable[[str], bool] | None = None) -> None:
    """Refuse, with a one-line reason, a zip-based document that cannot be read: an encrypted
    Office file, a damaged or truncated zip, a zip bomb, a password-protected OpenDocument file.

    Detection of encryption: an unencrypted Office Open XML document (.docx, .xlsx, .pptx) is
    always a zip package. Office encrypts one by wrapping it in an OLE compound file (the
    format of .doc and .xls) holding an "EncryptedPackage" stream, so a file with that name
    that starts with the OLE signature is encrypted, or is an old binary file renamed.
    `streamed` names the members the library reads as a stream, which may unpack far.
    """
    what = what_of(kind)
    head = file.read(len(OLE))
    file.seek(0)
    if head == OLE:
        raise _ole_error(file, context.title, kind)
    try:
        with zipfile.ZipFile(file) as package:
            infos = package.infolist()
            if kind in ("odt", "odp", "ods") and _odf_encrypted(package):
                raise unreadable(
                    context.title, what, "it is password-protected", ENCRYPTED_HINT.replace("Office", "OpenDocument")
                )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise unreadable(
            context.title, what, f"it is damaged, truncated or not a {what} ({short_reason(exc)})", DAMAGED_HINT
        ) from exc
    finally:
        file.seek(0)
    loaded = [i for i in infos if streamed is None or not streamed(i.filename)]
    for info in loaded:
        if archive.too_compressed(info, BOMB_FLOOR):
            raise unreadable(
                context.title,
                what,
                f"{printable(info.filename)} is compressed over {archive.MAX_RATIO}:1 (a zip bomb?)",
                DAMAGED_HINT,
            )
    total = sum(i.file_size for i in loaded)
    if total > MAX_UNPACKED:
        raise unreadable(
            context.title,
            what,
            f"it unpacks to {total / 2**30:.1f} GiB, over the {MAX_UNPACKED >> 30} GiB memagent loads",
            "Split it into smaller documents",
        )


def _odf_encrypted(package: zipfile.ZipFile) -> bool:
    """An OpenDocument file saved with a password keeps its zip but encrypts content.xml; the
    manifest says so with encryption-data."""
    try:
        with package.open("META-INF/manifest.xml") as manifest:
            return b"encryption-data" in manifest.read(4 << 20)
    except KeyError:
        return False


def _ole_error(file: BinaryIO, title: str, kind: str) -> Exception:
    """Why an OLE compound file named as an Office Open XML document cannot be read."""
    what = what_of(kind)
    streams = ole_streams(file)
    if streams is None:
        reason = f"it is password-protected or not a readable {what} (an OLE compound file, not a zip package)"
        return unreadable(title, what, reason, ENCRYPTED_HINT)
    if "encryptedpackage" in streams:
        return unreadable(title, what, "it is password-protected", ENCRYPTED_HINT)
    old = {"docx": "Word 97-2003 (.doc)", "pptx": "PowerPoint 97-2003 (.ppt)", "xlsx": "Excel 97-2003 (.xls)"}.get(kind, "older")
    ending = {"docx": ".docx", "pptx": ".pptx", "xlsx": ".xlsx"}.get(kind, "a current format")
    return unreadable(title, what, f"it is a {old} file with a new name", f"Save it as {ending} and name that file")


def ole_streams(file: BinaryIO) -> set[str] | None:
    """The lower-case names of an OLE file's top-level streams; None if it cannot be parsed."""
    try:
        import olefile  # type: ignore[import-untyped]  # installed with extract-msg
    except ImportError:
        return None
    try:
        ole = olefile.OleFileIO(file)
        try:
            return {"/".join(entry).lower() for entry in ole.listdir(streams=True, storages=False)}
        finally:
            ole.close()
    except Exception:  # olefile raises several types on a damaged header
        return None
    finally:
        file.seek(0)


class Discard:
    """A text stream that keeps nothing: the libraries that print to stdout (odfpy on bad XML,
    xlrd's warnings) must not write into memagent's output. `written` says whether they tried."""

    written = False

    def write(self, text: str) -> int:
        self.written = self.written or bool(text)
        return len(text)

    def flush(self) -> None:
        pass


def int_or(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def cell_text(value: object) -> str:
    """A cell's value as text: numbers as written (3, not 3.0), dates in ISO 8601, TRUE/FALSE.
    Tabs and newlines inside a cell become spaces so a row stays one tab-separated line."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.time() == dt.time() and value.tzinfo is None:
            return value.date().isoformat()
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    text = printable(str(value))
    if "\t" in text or "\n" in text or "\r" in text:
        text = " ".join(text.split())
    return text


# --------------------------------------------------------------------------------------------
# OpenDocument: loading, and the walk of text, presentation and spreadsheet content

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"
_SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
_DC = "http://purl.org/dc/elements/1.1/"

ELEMENT = 1  # xml.dom.Node.ELEMENT_NODE, as odfpy's nodes say it
_TEXT_NODE = 3

# Elements whose content is not reading text: change-tracking copies of deleted text,
# declarations, forms, and the settings of indexes (their entries are in text:index-body).
_ODF_SKIP = {
    (TEXT, "tracked-changes"),
    (TEXT, "sequence-decls"),
    (TEXT, "variable-decls"),
    (TEXT, "user-field-decls"),
    (OFFICE, "forms"),
    (TEXT, "table-of-content-source"),
    (TEXT, "illustration-index-source"),
    (TEXT, "alphabetical-index-source"),
    (TEXT, "index-title-template"),
    (TABLE, "table-columns"),
    (TABLE, "table-column"),
    (TABLE, "table-column-group"),
    (TABLE, "named-expressions"),
    (_SVG, "title"),
    (_SVG, "desc"),
    (PRESENTATION, "notes"),
    (DRAW, "page-thumbnail"),
}


# odfpy builds the whole document tree, about 30 bytes of memory per byte of XML (a 7 MB
# content.xml took 203 MiB): past this much XML a file is refused rather than the memory spent.
ODF_MAX_XML = 24 << 20


def load_odf(file: BinaryIO, context: ReadContext, kind: str) -> Any:
    check_package(file, context, kind)
    _check_odf_size(file, context, kind)
    from odf.opendocument import load  # type: ignore[import-untyped]

    sink = Discard()
    try:
        text_parts = _odf_text_parts(file, context, kind)
        # odfpy prints a part that is not well-formed XML to stdout, whole, and goes on
        with contextlib.redirect_stdout(sink):
            document = load(text_parts)
    except Exception as exc:  # odfpy raises KeyError, SAX errors, UnicodeDecodeError…
        raise unreadable(context.title, what_of(kind), short_reason(exc), DAMAGED_HINT) from exc
    if sink.written:
        raise unreadable(context.title, what_of(kind), "its XML is not well-formed", DAMAGED_HINT)
    _odf_body(document)
    return document


def _odf_body(document: Any) -> None:
    """Point the document's `text`, `presentation` or `spreadsheet` at its body's first element.
    odfpy takes the body's first child, which is white space where the XML is indented (as
    SiSU's live-manual files are): such a document read as empty."""
    for body in document.topnode.childNodes:
        if body.nodeType == ELEMENT and body.qname == (OFFICE, "body"):
            for child in body.childNodes:
                if child.nodeType == ELEMENT and child.qname[0] == OFFICE:
                    setattr(document, child.qname[1], child)
                    return


# The parts of an OpenDocument package that hold its text, which odfpy is given; the rest
# (pictures, thumbnails, settings, embedded objects, caches) is never read.
_ODF_TEXT_PARTS = ("content.xml", "styles.xml", "meta.xml")
_MANIFEST = "META-INF/manifest.xml"
_MIMETYPES = {
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
    "ods": "application/vnd.oasis.opendocument.spreadsheet",
}


def _odf_text_parts(file: BinaryIO, context: ReadContext, kind: str) -> io.BytesIO:
    """A package of the document's text parts alone, with a manifest naming just those, for
    odfpy's `load`: it reads every part the manifest lists, pictures and thumbnails included, and
    fails on one the package lacks, as real files do (a listed Thumbnails/thumbnail.png that is
    not there); the text is read all the same, and the missing parts are named in a note."""
    lean = io.BytesIO()
    with zipfile.ZipFile(file) as package, zipfile.ZipFile(lean, "w", zipfile.ZIP_STORED) as out:
        names = set(package.namelist())
        if "content.xml" not in names:
            raise unreadable(context.title, what_of(kind), "it has no content.xml", DAMAGED_HINT)
        mimetype = _MIMETYPES[kind]
        if "mimetype" in names:
            mimetype = package.read("mimetype").decode("ascii", "replace").strip() or mimetype
        missing = _odf_missing(package, names)
        if missing:
            shown = ", ".join(printable(name) for name in missing[:3]) + (
                f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            )
            context.warn(f"{context.title}: its manifest lists parts it lacks ({shown}); its text is read without them")
        out.writestr("mimetype", mimetype)
        present = [name for name in _ODF_TEXT_PARTS if name in names]
        entries = "".join(
            f'<manifest:file-entry manifest:full-path="{name}" manifest:media-type="text/xml"/>' for name in present
        )
        out.writestr(
            _MANIFEST,
            '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest '
            'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0">'
            f'<manifest:file-entry manifest:full-path="/" manifest:media-type="{mimetype}"/>{entries}</manifest:manifest>',
        )
        for name in present:
            out.writestr(name, package.read(name))
    file.seek(0)
    lean.seek(0)
    return lean


def _odf_missing(package: zipfile.ZipFile, names: set[str]) -> list[str]:
    """The files the package's manifest lists that it does not hold (its folders aside)."""
    if _MANIFEST not in names:
        return [_MANIFEST]
    from odf.opendocument import manifestlist

    try:
        listed = manifestlist(package.read(_MANIFEST))
    except Exception:  # a damaged manifest: the text parts are read all the same
        return [_MANIFEST]
    return sorted(name for name in listed if name != "/" and not name.endswith("/") and name not in names)


def _check_odf_size(file: BinaryIO, context: ReadContext, kind: str) -> None:
    try:
        with zipfile.ZipFile(file) as package:
            size = package.getinfo("content.xml").file_size
    except (KeyError, zipfile.BadZipFile, OSError):
        return  # odfpy's own error names what is wrong
    finally:
        file.seek(0)
    if size > ODF_MAX_XML:
        better = {"ods": ".xlsx", "odt": ".docx", "odp": ".pptx"}[kind]
        raise unreadable(
            context.title,
            what_of(kind),
            f"its content is {size / 2**20:,.0f} MB of XML, more than memagent reads whole ({ODF_MAX_XML >> 20} MB)",
            f"Save it as {better}, which memagent reads as a stream",
        )


def odf_elements(node: Any, qname: tuple[str, str]) -> Iterator[Any]:
    """The elements named `qname` among `node`'s children (not deeper)."""
    for child in node.childNodes:
        if child.nodeType == ELEMENT and child.qname == qname:
            yield child


class Odf:
    """Text from OpenDocument content, walked over odfpy's element tree."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.comments: list[str] = []
        self.note_count = {"footnote": 0, "endnote": 0}

    def blocks(self, node: Any, depth: int = 0) -> Iterator[tuple[str, bool]]:
        """(text, is heading) for each paragraph, heading, list item and table in `node`."""
        for child in node.childNodes:
            if child.nodeType != ELEMENT or child.qname in _ODF_SKIP:
                continue
            qname = child.qname
            if qname in ((TEXT, "p"), (TEXT, "h")):
                yield self.paragraph(child), qname == (TEXT, "h")
            elif qname == (TEXT, "list"):
                yield from self.list_items(child, depth)
            elif qname == (TABLE, "table"):
                yield self.table(child), False
            elif qname == (DRAW, "frame"):
                alt = _odf_alt(child)
                if alt:
                    yield f"[Image: {alt}]", False
                yield from self.blocks(child, depth)
            else:  # sections, index bodies, text boxes, shapes and groups on a slide
                yield from self.blocks(child, depth)

    def list_items(self, node: Any, depth: int) -> Iterator[tuple[str, bool]]:
        for item in node.childNodes:
            if item.nodeType != ELEMENT or item.qname not in ((TEXT, "list-item"), (TEXT, "list-header")):
                continue
            first = item.qname == (TEXT, "list-item")
            for text, heading in self.blocks(item, depth + 1):
                if first and text.strip() and not heading and not text.startswith("  " * (depth + 1) + "- "):
                    text = "  " * depth + "- " + text
                    first = False
                yield text, heading

    def paragraph(self, node: Any) -> str:
        out: list[str] = []
        self.inline(node, out)
        return "".join(out).strip()

    def inline(self, node: Any, out: list[str]) -> None:
        for child in node.childNodes:
            if child.nodeType == _TEXT_NODE:
                out.append(child.data)
                continue
            if child.nodeType != ELEMENT or child.qname in _ODF_SKIP:
                continue
            qname = child.qname
            if qname == (TEXT, "s"):
                out.append(" " * min(int_or(child.getAttrNS(TEXT, "c"), 1), 100))
            elif qname == (TEXT, "tab"):
                out.append("\t")
            elif qname == (TEXT, "line-break"):
                out.append("\n")
            elif qname == (TEXT, "note"):
                out.append(self.note(child))
            elif qname == (OFFICE, "annotation"):
                self.comment(child)
            elif qname == (OFFICE, "annotation-end"):
                continue
            elif qname == (DRAW, "frame"):
                alt = _odf_alt(child)
                if alt:
                    out.append(f" [Image: {alt}] ")
                inner = [text for text, _ in self.blocks(child) if text.strip()]
                if inner:
                    out.append("\n" + "\n".join(inner) + "\n")
            elif qname == (TEXT, "list"):
                out.append("\n" + "\n".join(text for text, _ in self.list_items(child, 0)) + "\n")
            elif qname == (TABLE, "table"):
                out.append("\n" + self.table(child) + "\n")
            else:
                self.inline(child, out)

    def note(self, node: Any) -> str:
        kind = "endnote" if node.getAttrNS(TEXT, "note-class") == "endnote" else "footnote"
        self.note_count[kind] += 1
        number = str(self.note_count[kind])
        body = ""
        for child in node.childNodes:
            if child.nodeType != ELEMENT:
                continue
            if child.qname == (TEXT, "note-citation"):
                number = one_line(self.paragraph(child)) or number
            elif child.qname == (TEXT, "note-body"):
                body = "\n".join(text for text, _ in self.blocks(child) if text.strip())
        label = f"{kind.capitalize()} {number}"
        self.notes.append(f"[{label}] {body}")
        return f"[{label}]"

    def comment(self, node: Any) -> None:
        author = ""
        for child in odf_elements(node, (_DC, "creator")):
            author = one_line(self.paragraph(child))
        text = "\n".join(t for t, _ in self.blocks(node) if t.strip())
        if text:
            self.comments.append(f"[Comment by {author}] {text}" if author else f"[Comment] {text}")

    def table(self, node: Any) -> str:
        rows = []
        for row, repeat in odf_rows(node):
            cells = odf_cells(row, lambda cell: one_line(" ".join(t for t, _ in self.blocks(cell))))
            if any(cells):
                rows += [" | ".join(cells)] * min(repeat, 100)
        return "\n".join(rows)


def _odf_alt(frame: Any) -> str:
    """A frame's description (svg:desc, else svg:title): an image's alt text."""
    found = {"title": "", "desc": ""}
    for child in frame.childNodes:
        if child.nodeType == ELEMENT and child.qname in ((_SVG, "title"), (_SVG, "desc")):
            found[child.qname[1]] = one_line("".join(_odf_plain(child)))
    return found["desc"] or found["title"]


def _odf_plain(node: Any) -> Iterator[str]:
    for child in node.childNodes:
        if child.nodeType == _TEXT_NODE:
            yield child.data
        elif child.nodeType == ELEMENT:
            yield from _odf_plain(child)


_ROW_GROUPS = {(TABLE, "table-header-rows"), (TABLE, "table-row-group"), (TABLE, "table-rows")}


def odf_rows(table: Any) -> Iterator[tuple[Any, int]]:
    """A table's rows, through row groups, with how often each repeats."""
    for child in table.childNodes:
        if child.nodeType != ELEMENT:
            continue
        if child.qname == (TABLE, "table-row"):
            yield child, max(int_or(child.getAttrNS(TABLE, "number-rows-repeated"), 1), 1)
        elif child.qname in _ROW_GROUPS:
            yield from odf_rows(child)


def odf_cells(row: Any, text_of: Callable[[Any], str]) -> list[str]:
    """A row's cell texts, repeats honoured up to MAX_COLUMNS, trailing empty cells dropped.

    A run of repeated empty cells is only counted: it becomes cells only when a cell with text
    follows, so a row that ends in "16,000 empty cells" (as LibreOffice saves every row) costs
    nothing."""
    cells: list[str] = []
    empty = 0
    for cell in row.childNodes:
        if cell.nodeType != ELEMENT or cell.qname not in ((TABLE, "table-cell"), (TABLE, "covered-table-cell")):
            continue
        repeat = max(int_or(cell.getAttrNS(TABLE, "number-columns-repeated"), 1), 1)
        text = text_of(cell)
        if not text:
            empty += repeat
            continue
        room = MAX_COLUMNS - len(cells)
        cells += [""] * min(empty, room)
        empty = 0
        cells += [text] * min(repeat, max(MAX_COLUMNS - len(cells), 0))
        if len(cells) >= MAX_COLUMNS:
            break
    return cells
