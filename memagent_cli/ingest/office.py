"""Office documents: Word, PowerPoint and Excel (Office Open XML and 97-2003 .xls), their
OpenDocument counterparts (.odt, .odp, .ods) and RTF.

This module owns turning each of them into text with provenance:

* Word (.docx) and OpenDocument text: the body in document order (paragraphs, headings, list
  items, tables as " | " rows, equations, text boxes, image alt text), split into sections at
  headings; footnotes, endnotes and comments follow in a last "Notes" part.
* PowerPoint (.pptx) and OpenDocument presentations: one part per slide, titled by the slide's
  title; text, tables, charts (title and series values), alt text and speaker notes.
* Excel (.xlsx, .xls) and OpenDocument spreadsheets: one unit per sheet, rows as tab-separated
  lines, streamed in blocks of ROWS_PER_PART rows so a large sheet is never held whole.
* RTF: the text without its control words.

Images are never read, only their descriptions. Nothing a document points at (external
relationships, linked images, remote templates) is opened: the libraries used here load only
the parts inside the package, and their XML parsers resolve no external entities.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from .base import Part, Place, ReadContext, printable, short_reason, unreadable
from .formats import BY_KIND

# Rows per part of a streamed sheet: the rest of a sheet follows in `joined` parts, so a sheet
# of millions of rows costs the memory of one block.
ROWS_PER_PART = 2000

# The most columns and rows a sheet has in Excel and LibreOffice. An OpenDocument cell or row
# may say it repeats a million times; past these bounds the file is not a real sheet.
MAX_COLUMNS = 16_384
MAX_ROWS = 1_048_576

# A zip package member that unpacks to more than this, at more than MAX_RATIO to 1, is a zip
# bomb: the Word, PowerPoint and OpenDocument libraries load every member into memory.
BOMB_FLOOR = 64 << 20
MAX_RATIO = 200
MAX_UNPACKED = 2 << 30  # all members together, where the library loads them all

LABEL_LENGTH = 80

_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file: .xls, .doc, .ppt, or an encrypted package
_ENCRYPTED_HINT = "memagent cannot open encrypted Office files; save an unprotected copy and name that"
_DAMAGED_HINT = "Check that it is a complete, undamaged file"


# --------------------------------------------------------------------------------------------
# Shared helpers


def _label(text: str) -> str | None:
    """A unit's label: white space collapsed, at most LABEL_LENGTH characters; None if empty."""
    label = " ".join(printable(text).split())
    if not label:
        return None
    return label if len(label) <= LABEL_LENGTH else label[: LABEL_LENGTH - 1] + "…"


def _one_line(text: str) -> str:
    """A table cell's text on one line, so each row stays one line."""
    return " ".join(text.split())


def _what(kind: str) -> str:
    return BY_KIND[kind].what


def _check_package(file: BinaryIO, context: ReadContext, kind: str, *, streamed: Callable[[str], bool] | None = None) -> None:
    """Refuse, with a one-line reason, a zip-based document that cannot be read: an encrypted
    Office file, a damaged or truncated zip, a zip bomb, a password-protected OpenDocument file.

    Detection of encryption: an unencrypted Office Open XML document (.docx, .xlsx, .pptx) is
    always a zip package. Office encrypts one by wrapping it in an OLE compound file (the
    format of .doc and .xls) holding an "EncryptedPackage" stream, so a file with that name
    that starts with the OLE signature is encrypted, or is an old binary file renamed.
    `streamed` names the members the library reads as a stream, which may unpack far.
    """
    what = _what(kind)
    head = file.read(len(_OLE))
    file.seek(0)
    if head == _OLE:
        raise _ole_error(file, context.title, kind)
    try:
        with zipfile.ZipFile(file) as package:
            infos = package.infolist()
            if kind in ("odt", "odp", "ods") and _odf_encrypted(package):
                raise unreadable(
                    context.title, what, "it is password-protected", _ENCRYPTED_HINT.replace("Office", "OpenDocument")
                )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise unreadable(
            context.title, what, f"it is damaged, truncated or not a {what} ({short_reason(exc)})", _DAMAGED_HINT
        ) from exc
    finally:
        file.seek(0)
    loaded = [i for i in infos if streamed is None or not streamed(i.filename)]
    for info in loaded:
        if info.file_size > BOMB_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise unreadable(
                context.title, what, f"{printable(info.filename)} is compressed over {MAX_RATIO}:1 (a zip bomb?)", _DAMAGED_HINT
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
    what = _what(kind)
    streams = _ole_streams(file)
    if streams is None:
        reason = f"it is password-protected or not a readable {what} (an OLE compound file, not a zip package)"
        return unreadable(title, what, reason, _ENCRYPTED_HINT)
    if "encryptedpackage" in streams:
        return unreadable(title, what, "it is password-protected", _ENCRYPTED_HINT)
    old = {"docx": "Word 97-2003 (.doc)", "pptx": "PowerPoint 97-2003 (.ppt)", "xlsx": "Excel 97-2003 (.xls)"}.get(kind, "older")
    ending = {"docx": ".docx", "pptx": ".pptx", "xlsx": ".xlsx"}.get(kind, "a current format")
    return unreadable(title, what, f"it is a {old} file with a new name", f"Save it as {ending} and name that file")


def _ole_streams(file: BinaryIO) -> set[str] | None:
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


class _Discard:
    """A text stream that keeps nothing: the libraries that print to stdout (odfpy on bad XML,
    xlrd's warnings) must not write into memagent's output. `written` says whether they tried."""

    written = False

    def write(self, text: str) -> int:
        self.written = self.written or bool(text)
        return len(text)

    def flush(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# Word (.docx)

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
_WP = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"

# Subtrees with no reading text: properties (w:tabs in w:pPr holds w:tab elements that are
# tab stops, not tabs), deleted and moved-away text, field codes, and the fallback copy of
# markup-compatibility content (the same text box again, as VML).
_W_SKIP = {
    _W + "pPr",
    _W + "rPr",
    _W + "del",
    _W + "moveFrom",
    _W + "instrText",
    _W + "delText",
    _W + "sectPr",
    _W + "tblPr",
    _W + "trPr",
    _W + "tcPr",
    _W + "tblGrid",
    _MC + "Fallback",
    _W + "footnoteRef",
    _W + "endnoteRef",
    _W + "annotationRef",
    _W + "commentRangeStart",
    _W + "commentRangeEnd",
    _W + "fldData",
}
_W_CHARS = {_W + "tab": "\t", _W + "ptab": "\t", _W + "br": "\n", _W + "cr": "\n", _W + "noBreakHyphen": "-"}
_HEADING_NAME = re.compile(r"(heading [1-9]|title)$", re.IGNORECASE)


class _Sections:
    """Blocks of a text document, (text, is it a heading), to parts: text before the first
    heading has no unit; each heading starts a section labelled by it. `count` says how many."""

    def __init__(self) -> None:
        self.count = 0

    def parts(self, blocks: Iterable[tuple[str, bool]]) -> Iterator[Part]:
        place = Place()
        lines: list[str] = []
        for text, heading in blocks:
            if not text.strip():
                continue
            if heading:
                if lines:
                    yield Part("\n".join(lines), place)
                self.count += 1
                place, lines = Place("section", self.count, _label(text)), []
            lines.append(text)
        if lines:
            yield Part("\n".join(lines), place)


def read_docx(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A Word document's text: sections split at headings, then its notes and comments."""
    _check_package(file, context, "docx")
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    try:
        document = docx.Document(file)
        word = _Word(document.styles.element)
        body = document.element.body
    except Exception as exc:  # python-docx raises KeyError, XMLSyntaxError, PackageNotFoundError…
        raise unreadable(context.title, _what("docx"), short_reason(exc), _DAMAGED_HINT) from exc

    sections = _Sections()
    yield from sections.parts(word.blocks(body))

    notes = []
    for reltype, kind in ((RT.FOOTNOTES, "Footnote"), (RT.ENDNOTES, "Endnote"), (RT.COMMENTS, "Comment")):
        element = _related_xml(document.part, reltype)
        if element is None:
            continue
        try:
            notes += word.notes(element, kind)
        except Exception as exc:  # a damaged notes part loses the notes, not the document
            context.warn(f"{context.title}: the {kind.lower()}s could not be read ({short_reason(exc)})")
    if notes:
        yield Part("\n".join(notes), Place("section", sections.count + 1, "Notes"))


def _related_xml(part: Any, reltype: str) -> Any:
    """The XML of the package part `part` relates to by `reltype`, if it has one inside the
    package. External relationships are skipped: their targets are never opened."""
    from docx.oxml.parser import parse_xml

    for rel in part.rels.values():
        if rel.reltype == reltype and not rel.is_external:
            target = rel.target_part
            element = getattr(target, "element", None)
            # python-docx has no class of its own for footnotes and endnotes: their part is a
            # plain Part with bytes, parsed here with python-docx's own (entity-free) parser.
            return element if element is not None else parse_xml(target.blob)
    return None


class _Word:
    """Text from WordprocessingML: block order, headings, lists, tables, notes."""

    def __init__(self, styles: Any) -> None:
        self.styles = _ParagraphStyles(styles)
        self.note_numbers: dict[tuple[str, str], int] = {}
        self.note_counts: dict[str, int] = {}

    def blocks(self, container: Any) -> Iterator[tuple[str, bool]]:
        """(text, is heading) for each paragraph and table in `container`, in document order."""
        for child in container:
            tag = child.tag
            if tag == _W + "p":
                yield self.paragraph(child)
            elif tag == _W + "tbl":
                yield self.table(child), False
            elif tag in (_W + "sdt", _W + "customXml", _W + "sdtContent", _MC + "AlternateContent", _MC + "Choice"):
                # content controls (a cover page, a table of contents) hold ordinary blocks
                yield from self.blocks(child)

    def paragraph(self, p: Any) -> tuple[str, bool]:
        out: list[str] = []
        self.inline(p, out)
        text = "".join(out).strip()
        ppr = p.find(_W + "pPr")
        style_id = None
        direct_outline = direct_list = None
        level = 0
        if ppr is not None:
            style = ppr.find(_W + "pStyle")
            style_id = style.get(_W + "val") if style is not None else None
            outline = ppr.find(_W + "outlineLvl")
            if outline is not None:
                direct_outline = _int(outline.get(_W + "val"), 9) < 9
            numpr = ppr.find(_W + "numPr")
            if numpr is not None:
                num_id = numpr.find(_W + "numId")
                direct_list = num_id is None or num_id.get(_W + "val") != "0"
                ilvl = numpr.find(_W + "ilvl")
                level = _int(ilvl.get(_W + "val") if ilvl is not None else None, 0)
        heading, listed = self.styles.kind(style_id)
        heading = direct_outline if direct_outline is not None else heading
        listed = direct_list if direct_list is not None else listed
        if listed and not heading and text:
            text = "  " * min(level, 8) + "- " + text
        return text, heading

    def inline(self, element: Any, out: list[str]) -> None:
        for child in element:
            tag = child.tag
            if not isinstance(tag, str) or tag in _W_SKIP:
                continue  # lxml comments and processing instructions have a function as tag
            if tag == _W + "t" or tag == _M + "t":
                out.append(child.text or "")
            elif tag in _W_CHARS:
                out.append(_W_CHARS[tag])
            elif tag == _W + "footnoteReference" or tag == _W + "endnoteReference":
                kind = "Footnote" if tag == _W + "footnoteReference" else "Endnote"
                out.append(f"[{kind} {self.note_number(kind, child.get(_W + 'id') or '')}]")
            elif tag == _WP + "docPr":
                alt = child.get("descr") or child.get("title")
                if alt and alt.strip():
                    out.append(f" [Image: {_one_line(alt)}] ")
            elif tag == _W + "txbxContent":
                inner = [text for text, _ in self.blocks(child) if text.strip()]
                if inner:
                    out.append("\n" + "\n".join(inner) + "\n")
            else:
                self.inline(child, out)

    def table(self, tbl: Any) -> str:
        rows = []
        for tr in _w_children(tbl, _W + "tr"):
            cells = []
            for tc in _w_children(tr, _W + "tc"):
                cells.append(_one_line(" ".join(text for text, _ in self.blocks(tc))))
            if any(cells):
                rows.append(" | ".join(cells))
        return "\n".join(rows)

    def note_number(self, kind: str, note_id: str) -> int:
        """Notes are numbered in the order the body refers to them, as Word shows them (their
        ids are not their numbers: the separators take the first ids)."""
        key = (kind, note_id)
        if key not in self.note_numbers:
            self.note_counts[kind] = self.note_counts.get(kind, 0) + 1
            self.note_numbers[key] = self.note_counts[kind]
        return self.note_numbers[key]

    def notes(self, root: Any, kind: str) -> list[str]:
        tag = {"Footnote": "footnote", "Endnote": "endnote", "Comment": "comment"}[kind]
        found: list[tuple[int, str]] = []
        for note in root.iter(_W + tag):
            if note.get(_W + "type") not in (None, "normal"):
                continue  # the separator lines between body and notes
            text = "\n".join(t for t, _ in self.blocks(note) if t.strip()).strip()
            if not text:
                continue
            if kind == "Comment":
                author = _one_line(note.get(_W + "author") or "")
                found.append((len(found), f"[Comment by {author}] {text}" if author else f"[Comment] {text}"))
            else:
                number = self.note_number(kind, note.get(_W + "id") or "")
                found.append((number, f"[{kind} {number}] {text}"))
        return [text for _, text in sorted(found, key=lambda item: item[0])]


def _w_children(element: Any, tag: str) -> Iterator[Any]:
    """`element`'s children with `tag`, looking through content controls that wrap them."""
    for child in element:
        if child.tag == tag:
            yield child
        elif child.tag in (_W + "sdt", _W + "sdtContent", _W + "customXml"):
            yield from _w_children(child, tag)


class _ParagraphStyles:
    """Which paragraph styles are headings (by name or outline level) and which are lists,
    following each style's basedOn chain as Word does."""

    def __init__(self, styles: Any) -> None:
        self.by_id: dict[str, Any] = {}
        self.default: str | None = None
        for style in styles.iter(_W + "style"):
            if style.get(_W + "type") not in (None, "paragraph"):
                continue
            style_id = style.get(_W + "styleId")
            if style_id:
                self.by_id[style_id] = style
                if style.get(_W + "default") in ("1", "true", "on"):
                    self.default = style_id
        self.cache: dict[str | None, tuple[bool, bool]] = {}

    def kind(self, style_id: str | None) -> tuple[bool, bool]:
        """(is a heading, is a list item) for paragraphs of `style_id` (None: the default)."""
        if style_id is None:
            style_id = self.default
        if style_id not in self.cache:
            self.cache[style_id] = self._resolve(style_id)
        return self.cache[style_id]

    def _resolve(self, style_id: str | None) -> tuple[bool, bool]:
        heading: bool | None = None
        listed: bool | None = None
        seen: set[str] = set()
        while style_id is not None and style_id not in seen and style_id in self.by_id:
            seen.add(style_id)
            style = self.by_id[style_id]
            name = style.find(_W + "name")
            if heading is None and name is not None and _HEADING_NAME.match((name.get(_W + "val") or "").strip()):
                heading = True
            ppr = style.find(_W + "pPr")
            if ppr is not None:
                outline = ppr.find(_W + "outlineLvl")
                if heading is None and outline is not None:
                    heading = _int(outline.get(_W + "val"), 9) < 9
                numpr = ppr.find(_W + "numPr")
                if listed is None and numpr is not None:
                    num_id = numpr.find(_W + "numId")
                    listed = num_id is None or num_id.get(_W + "val") != "0"
            based = style.find(_W + "basedOn")
            style_id = based.get(_W + "val") if based is not None else None
        return bool(heading), bool(listed)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


# --------------------------------------------------------------------------------------------
# PowerPoint (.pptx)


def read_pptx(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A presentation's slides, one part each, hidden slides included (marked "[Hidden slide]")."""
    _check_package(file, context, "pptx")
    import pptx

    try:
        presentation = pptx.Presentation(file)
        slides = list(presentation.slides)
    except Exception as exc:  # python-pptx raises KeyError, XMLSyntaxError, PackageNotFoundError…
        raise unreadable(context.title, _what("pptx"), short_reason(exc), _DAMAGED_HINT) from exc
    for number, slide in enumerate(slides, 1):
        try:
            title, text = _slide_text(slide, context, number)
        except Exception as exc:  # one damaged slide loses that slide
            context.warn(f"{context.title}: slide {number} could not be read ({short_reason(exc)})")
            continue
        yield Part(text, Place("slide", number, _label(title) if title else None))


def _slide_text(slide: Any, context: ReadContext, number: int) -> tuple[str, str]:
    lines: list[str] = []
    if slide.element.get("show") in ("0", "false"):
        lines.append("[Hidden slide]")
    title_shape = slide.shapes.title
    title = ""
    if title_shape is not None and title_shape.has_text_frame:
        title = _frame_text(title_shape.text_frame)
        if title.strip():
            lines.append(title)
    for shape in slide.shapes:
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        _shape_text(shape, lines, context, number)
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = _frame_text(frame).strip() if frame is not None else ""
        if notes:
            lines.append(f"Notes: {notes}")
    return title, "\n".join(line for line in lines if line.strip())


def _shape_text(shape: Any, lines: list[str], context: ReadContext, number: int) -> None:
    # isinstance, not shape_type: shape_type raises NotImplementedError for shapes it does not know
    from pptx.shapes.group import GroupShape
    from pptx.shapes.picture import Picture

    if isinstance(shape, GroupShape):
        for inner in shape.shapes:
            _shape_text(inner, lines, context, number)
        return
    if shape.has_text_frame:
        lines.append(_frame_text(shape.text_frame))
    if getattr(shape, "has_table", False) and shape.has_table:
        for row in shape.table.rows:
            cells = [_one_line(cell.text) for cell in row.cells if not cell.is_spanned]
            if any(cells):
                lines.append(" | ".join(cells))
    if getattr(shape, "has_chart", False) and shape.has_chart:
        try:
            lines += _chart_lines(shape.chart)
        except Exception as exc:  # charts come in many shapes python-pptx reads only in part
            context.warn(f"{context.title}: a chart on slide {number} could not be read ({short_reason(exc)})")
    alt = _alt_text(shape)
    if alt:
        kind = "Image" if isinstance(shape, Picture) else "Alt text"
        lines.append(f"[{kind}: {alt}]")


def _frame_text(frame: Any) -> str:
    # python-pptx writes a line break inside a paragraph as a vertical tab
    lines = []
    for paragraph in frame.paragraphs:
        text = paragraph.text.replace("\v", "\n")
        if text.strip():
            lines.append("  " * min(paragraph.level, 8) + text)
    return "\n".join(lines)


def _alt_text(shape: Any) -> str:
    """A shape's description (its cNvPr descr, else title): the alt text of a picture."""
    for properties in shape.element.iter("{http://schemas.openxmlformats.org/presentationml/2006/main}cNvPr"):
        alt = properties.get("descr") or properties.get("title") or ""
        return _one_line(alt)
    return ""


def _chart_lines(chart: Any) -> list[str]:
    lines = []
    if chart.has_title and chart.chart_title.has_text_frame:
        title = _one_line(chart.chart_title.text_frame.text)
        lines.append(f"Chart: {title}" if title else "Chart")
    else:
        lines.append("Chart")
    for plot in chart.plots:
        try:
            categories = [_one_line(str(c)) for c in plot.categories]
        except Exception:  # XY and bubble plots have no categories
            categories = []
        for series in plot.series:
            values = [_cell_text(v) for v in series.values]
            if len(categories) == len(values):
                shown = ", ".join(f"{c} = {v}" for c, v in zip(categories, values))
            else:
                shown = ", ".join(values)
            name = _one_line(series.name or "")
            lines.append(f"Series {name}: {shown}" if name else f"Series: {shown}")
    return lines


# --------------------------------------------------------------------------------------------
# OpenDocument text and presentations (.odt, .odp)

_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
_PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"
_SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
_DC = "http://purl.org/dc/elements/1.1/"

_ELEMENT = 1  # xml.dom.Node.ELEMENT_NODE, as odfpy's nodes say it
_TEXT_NODE = 3

# Elements whose content is not reading text: change-tracking copies of deleted text,
# declarations, forms, and the settings of indexes (their entries are in text:index-body).
_ODF_SKIP = {
    (_TEXT, "tracked-changes"),
    (_TEXT, "sequence-decls"),
    (_TEXT, "variable-decls"),
    (_TEXT, "user-field-decls"),
    (_OFFICE, "forms"),
    (_TEXT, "table-of-content-source"),
    (_TEXT, "illustration-index-source"),
    (_TEXT, "alphabetical-index-source"),
    (_TEXT, "index-title-template"),
    (_TABLE, "table-columns"),
    (_TABLE, "table-column"),
    (_TABLE, "table-column-group"),
    (_TABLE, "named-expressions"),
    (_SVG, "title"),
    (_SVG, "desc"),
    (_PRESENTATION, "notes"),
    (_DRAW, "page-thumbnail"),
}


# odfpy builds the whole document tree, about 30 bytes of memory per byte of XML (a 7 MB
# content.xml took 203 MiB): past this much XML a file is refused rather than the memory spent.
ODF_MAX_XML = 24 << 20


def _load_odf(file: BinaryIO, context: ReadContext, kind: str) -> Any:
    _check_package(file, context, kind)
    _check_odf_size(file, context, kind)
    from odf.opendocument import load  # type: ignore[import-untyped]

    sink = _Discard()
    try:
        # odfpy prints a part that is not well-formed XML to stdout, whole, and goes on
        with contextlib.redirect_stdout(sink):
            document = load(file)
    except Exception as exc:  # odfpy raises KeyError, SAX errors, UnicodeDecodeError…
        raise unreadable(context.title, _what(kind), short_reason(exc), _DAMAGED_HINT) from exc
    if sink.written:
        raise unreadable(context.title, _what(kind), "its XML is not well-formed", _DAMAGED_HINT)
    return document


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
            _what(kind),
            f"its content is {size / 2**20:,.0f} MB of XML, more than memagent reads whole ({ODF_MAX_XML >> 20} MB)",
            f"Save it as {better}, which memagent reads as a stream",
        )


def read_odt(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An OpenDocument text: sections split at headings, then its notes and comments."""
    document = _load_odf(file, context, "odt")
    body = getattr(document, "text", None)
    if body is None:
        raise unreadable(context.title, _what("odt"), "it holds no text body (another OpenDocument kind?)", _DAMAGED_HINT)
    odf = _Odf()
    sections = _Sections()
    yield from sections.parts(odf.blocks(body))
    if odf.notes or odf.comments:
        yield Part("\n".join(odf.notes + odf.comments), Place("section", sections.count + 1, "Notes"))


def read_odp(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An OpenDocument presentation's slides (draw:page), one part each, with speaker notes."""
    document = _load_odf(file, context, "odp")
    body = getattr(document, "presentation", None)
    if body is None:
        raise unreadable(context.title, _what("odp"), "it holds no slides (another OpenDocument kind?)", _DAMAGED_HINT)
    number = 0
    for page in body.childNodes:
        if page.nodeType != _ELEMENT or page.qname != (_DRAW, "page"):
            continue
        number += 1
        try:
            odf = _Odf()
            lines = [text for text, _ in odf.blocks(page) if text.strip()]
            for notes in _odf_elements(page, (_PRESENTATION, "notes")):
                said = "\n".join(text for text, _ in odf.blocks(notes) if text.strip())
                if said:
                    lines.append(f"Notes: {said}")
            lines += odf.notes + odf.comments
            title = _odp_title(page) or page.getAttrNS(_DRAW, "name") or ""
        except Exception as exc:  # one damaged slide loses that slide
            context.warn(f"{context.title}: slide {number} could not be read ({short_reason(exc)})")
            continue
        yield Part("\n".join(lines), Place("slide", number, _label(title)))


def _odp_title(page: Any) -> str:
    for frame in _odf_elements(page, (_DRAW, "frame")):
        if frame.getAttrNS(_PRESENTATION, "class") == "title":
            return " ".join(text for text, _ in _Odf().blocks(frame))
    return ""


def _odf_elements(node: Any, qname: tuple[str, str]) -> Iterator[Any]:
    """The elements named `qname` among `node`'s children (not deeper)."""
    for child in node.childNodes:
        if child.nodeType == _ELEMENT and child.qname == qname:
            yield child


class _Odf:
    """Text from OpenDocument content, walked over odfpy's element tree."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.comments: list[str] = []
        self.note_count = {"footnote": 0, "endnote": 0}

    def blocks(self, node: Any, depth: int = 0) -> Iterator[tuple[str, bool]]:
        """(text, is heading) for each paragraph, heading, list item and table in `node`."""
        for child in node.childNodes:
            if child.nodeType != _ELEMENT or child.qname in _ODF_SKIP:
                continue
            qname = child.qname
            if qname in ((_TEXT, "p"), (_TEXT, "h")):
                yield self.paragraph(child), qname == (_TEXT, "h")
            elif qname == (_TEXT, "list"):
                yield from self.list_items(child, depth)
            elif qname == (_TABLE, "table"):
                yield self.table(child), False
            elif qname == (_DRAW, "frame"):
                alt = _odf_alt(child)
                if alt:
                    yield f"[Image: {alt}]", False
                yield from self.blocks(child, depth)
            else:  # sections, index bodies, text boxes, shapes and groups on a slide
                yield from self.blocks(child, depth)

    def list_items(self, node: Any, depth: int) -> Iterator[tuple[str, bool]]:
        for item in node.childNodes:
            if item.nodeType != _ELEMENT or item.qname not in ((_TEXT, "list-item"), (_TEXT, "list-header")):
                continue
            first = item.qname == (_TEXT, "list-item")
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
            if child.nodeType != _ELEMENT or child.qname in _ODF_SKIP:
                continue
            qname = child.qname
            if qname == (_TEXT, "s"):
                out.append(" " * min(_int(child.getAttrNS(_TEXT, "c"), 1), 100))
            elif qname == (_TEXT, "tab"):
                out.append("\t")
            elif qname == (_TEXT, "line-break"):
                out.append("\n")
            elif qname == (_TEXT, "note"):
                out.append(self.note(child))
            elif qname == (_OFFICE, "annotation"):
                self.comment(child)
            elif qname == (_OFFICE, "annotation-end"):
                continue
            elif qname == (_DRAW, "frame"):
                alt = _odf_alt(child)
                if alt:
                    out.append(f" [Image: {alt}] ")
                inner = [text for text, _ in self.blocks(child) if text.strip()]
                if inner:
                    out.append("\n" + "\n".join(inner) + "\n")
            elif qname == (_TEXT, "list"):
                out.append("\n" + "\n".join(text for text, _ in self.list_items(child, 0)) + "\n")
            elif qname == (_TABLE, "table"):
                out.append("\n" + self.table(child) + "\n")
            else:
                self.inline(child, out)

    def note(self, node: Any) -> str:
        kind = "endnote" if node.getAttrNS(_TEXT, "note-class") == "endnote" else "footnote"
        self.note_count[kind] += 1
        number = str(self.note_count[kind])
        body = ""
        for child in node.childNodes:
            if child.nodeType != _ELEMENT:
                continue
            if child.qname == (_TEXT, "note-citation"):
                number = _one_line(self.paragraph(child)) or number
            elif child.qname == (_TEXT, "note-body"):
                body = "\n".join(text for text, _ in self.blocks(child) if text.strip())
        label = f"{kind.capitalize()} {number}"
        self.notes.append(f"[{label}] {body}")
        return f"[{label}]"

    def comment(self, node: Any) -> None:
        author = ""
        for child in _odf_elements(node, (_DC, "creator")):
            author = _one_line(self.paragraph(child))
        text = "\n".join(t for t, _ in self.blocks(node) if t.strip())
        if text:
            self.comments.append(f"[Comment by {author}] {text}" if author else f"[Comment] {text}")

    def table(self, node: Any) -> str:
        rows = []
        for row, repeat in _odf_rows(node):
            cells = _odf_cells(row, lambda cell: _one_line(" ".join(t for t, _ in self.blocks(cell))))
            if any(cells):
                rows += [" | ".join(cells)] * min(repeat, 100)
        return "\n".join(rows)


def _odf_alt(frame: Any) -> str:
    """A frame's description (svg:desc, else svg:title): an image's alt text."""
    found = {"title": "", "desc": ""}
    for child in frame.childNodes:
        if child.nodeType == _ELEMENT and child.qname in ((_SVG, "title"), (_SVG, "desc")):
            found[child.qname[1]] = _one_line("".join(_odf_plain(child)))
    return found["desc"] or found["title"]


def _odf_plain(node: Any) -> Iterator[str]:
    for child in node.childNodes:
        if child.nodeType == _TEXT_NODE:
            yield child.data
        elif child.nodeType == _ELEMENT:
            yield from _odf_plain(child)


_ROW_GROUPS = {(_TABLE, "table-header-rows"), (_TABLE, "table-row-group"), (_TABLE, "table-rows")}


def _odf_rows(table: Any) -> Iterator[tuple[Any, int]]:
    """A table's rows, through row groups, with how often each repeats."""
    for child in table.childNodes:
        if child.nodeType != _ELEMENT:
            continue
        if child.qname == (_TABLE, "table-row"):
            yield child, max(_int(child.getAttrNS(_TABLE, "number-rows-repeated"), 1), 1)
        elif child.qname in _ROW_GROUPS:
            yield from _odf_rows(child)


def _odf_cells(row: Any, text_of: Callable[[Any], str]) -> list[str]:
    """A row's cell texts, repeats honoured up to MAX_COLUMNS, trailing empty cells dropped.

    A run of repeated empty cells is only counted: it becomes cells only when a cell with text
    follows, so a row that ends in "16,000 empty cells" (as LibreOffice saves every row) costs
    nothing."""
    cells: list[str] = []
    empty = 0
    for cell in row.childNodes:
        if cell.nodeType != _ELEMENT or cell.qname not in ((_TABLE, "table-cell"), (_TABLE, "covered-table-cell")):
            continue
        repeat = max(_int(cell.getAttrNS(_TABLE, "number-columns-repeated"), 1), 1)
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


# --------------------------------------------------------------------------------------------
# Spreadsheets: rows as tab-separated lines


def _cell_text(value: object) -> str:
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


def _row_line(values: Iterable[object]) -> str:
    cells = [_cell_text(v) for v in values]
    while cells and not cells[-1].strip():
        cells.pop()
    return "\t".join(cells)


def _sheet_parts(name: str, number: int, lines: Iterable[str]) -> Iterator[Part]:
    """A sheet as parts: "Sheet: NAME" and the first ROWS_PER_PART rows, then each further block
    of rows as a `joined` part starting with a newline. Empty rows are skipped; a sheet with no
    rows yields nothing."""
    place = Place("sheet", number, _label(name))
    batch: list[str] = []
    first = True
    for line in lines:
        if not line.strip():
            continue
        batch.append(line)
        if len(batch) >= ROWS_PER_PART:
            yield _sheet_block(name, place, batch, first)
            first, batch = False, []
    if batch:
        yield _sheet_block(name, place, batch, first)


def _sheet_block(name: str, place: Place, batch: list[str], first: bool) -> Part:
    head = f"Sheet: {_one_line(printable(name))}\n" if first else "\n"
    return Part(head + "\n".join(batch), place, joined=not first)


def read_xlsx(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An Excel workbook's sheets, streamed: formulas give the values Excel saved with them."""
    head = file.read(len(_OLE))
    file.seek(0)
    if head == _OLE and {"workbook", "book"} & (_ole_streams(file) or set()):
        yield from read_xls(file, context)  # an .xls file named .xlsx
        return
    # Worksheets are streamed row by row in read-only mode, so only the other parts are bounded.
    _check_package(file, context, "xlsx", streamed=lambda name: name.startswith("xl/worksheets/"))
    import openpyxl  # type: ignore[import-untyped]

    # openpyxl warns (on stderr) about every workbook feature it does not keep, such as data
    # validation or conditional formatting, none of which matters to the text.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"openpyxl\.")
    try:
        workbook = openpyxl.load_workbook(file, read_only=True, data_only=True, keep_links=False)
    except Exception as exc:  # openpyxl raises KeyError, InvalidFileException, XML errors…
        raise unreadable(context.title, _what("xlsx"), short_reason(exc), _DAMAGED_HINT) from exc
    try:
        for number, name in enumerate(workbook.sheetnames, 1):
            try:
                sheet: Any = workbook[name]
                if not hasattr(sheet, "iter_rows"):
                    continue  # a chart sheet
                # The saved dimensions are often wrong ("A1:XFD1048576"); without them each row
                # is as long as its last cell, not padded to the dimension's width.
                sheet.reset_dimensions()
                yield from _sheet_parts(name, number, (_row_line(row) for row in sheet.iter_rows(values_only=True)))
            except Exception as exc:  # a damaged sheet loses that sheet (or its rest)
                context.warn(f"{context.title}: sheet {number} ({_label(name)}) could not be read ({short_reason(exc)})")
    finally:
        workbook.close()


def read_xls(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An Excel 97-2003 workbook's sheets, with the values saved for formulas and dates
    converted with the workbook's date system (1900 or 1904)."""
    import xlrd  # type: ignore[import-untyped]

    head = file.read(4)
    file.seek(0)
    if head == b"PK\x03\x04":
        yield from read_xlsx(file, context)  # an .xlsx file named .xls
        return
    what = _what("xls")
    log = _Discard()
    with _mapped(file) as contents:
        try:
            book = xlrd.open_workbook(file_contents=contents, on_demand=True, logfile=log, ragged_rows=True)
        except Exception as exc:  # xlrd raises XLRDError, CompDocError, struct.error…
            reason = short_reason(exc)
            # FILEPASS in a BIFF file, or an encrypted .xlsx (EncryptedPackage) named .xls
            if "encrypted" in reason.lower() or "encryptedpackage" in (_ole_streams(file) or set()):
                raise unreadable(context.title, what, "it is password-protected", _ENCRYPTED_HINT) from exc
            raise unreadable(context.title, what, reason, _DAMAGED_HINT) from exc
        try:
            for index, name in enumerate(book.sheet_names()):
                try:
                    sheet = book.sheet_by_index(index)
                    lines = (_row_line(_xls_values(sheet.row(r), book.datemode)) for r in range(sheet.nrows))
                    yield from _sheet_parts(name, index + 1, lines)
                except Exception as exc:  # a damaged sheet loses that sheet
                    context.warn(f"{context.title}: sheet {index + 1} ({_label(name)}) could not be read ({short_reason(exc)})")
                finally:
                    book.unload_sheet(index)
        finally:
            book.release_resources()


@contextlib.contextmanager
def _mapped(file: BinaryIO) -> Iterator[Any]:
    """The file's bytes for xlrd: mapped from disk when it is a real file (the pages are read as
    needed and shared with the OS cache), else read whole (an archive member in memory)."""
    import io
    import mmap

    mapped = None
    if isinstance(file, (io.BufferedReader, io.FileIO)):  # not a temporary file, which would be written to disk
        with contextlib.suppress(OSError, ValueError):
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    if mapped is None:
        yield file.read()
        return
    try:
        yield mapped
    finally:
        mapped.close()


def _xls_values(cells: list[Any], datemode: int) -> Iterator[object]:
    import xlrd

    for cell in cells:
        kind = cell.ctype
        if kind == xlrd.XL_CELL_DATE:
            yield _xls_date(cell.value, datemode)
        elif kind == xlrd.XL_CELL_BOOLEAN:
            yield bool(cell.value)
        elif kind == xlrd.XL_CELL_ERROR:
            yield xlrd.error_text_from_code.get(cell.value, "#ERROR")
        elif kind in (xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK):
            yield None
        else:
            yield cell.value


def _xls_date(value: float, datemode: int) -> object:
    import xlrd

    try:
        when = xlrd.xldate.xldate_as_datetime(value, datemode)
    except (ValueError, OverflowError, xlrd.xldate.XLDateError):
        return value
    if value < 1:  # a time of day without a date
        return when.time()
    return when


def read_ods(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An OpenDocument spreadsheet's sheets: values as saved (dates as ISO), repeated cells and
    rows expanded only where they hold something."""
    document = _load_odf(file, context, "ods")
    body = getattr(document, "spreadsheet", None)
    if body is None:
        raise unreadable(context.title, _what("ods"), "it holds no sheets (another OpenDocument kind?)", _DAMAGED_HINT)
    tables = [t for t in body.childNodes if t.nodeType == _ELEMENT and t.qname == (_TABLE, "table")]
    for number, table in enumerate(tables, 1):
        name = table.getAttrNS(_TABLE, "name") or f"Sheet{number}"
        try:
            yield from _sheet_parts(name, number, _ods_lines(table, context, name))
        except Exception as exc:  # a damaged sheet loses that sheet
            context.warn(f"{context.title}: sheet {number} ({_label(name)}) could not be read ({short_reason(exc)})")


def _ods_lines(table: Any, context: ReadContext, name: str) -> Iterator[str]:
    rows = 0
    odf = _Odf()
    for row, repeat in _odf_rows(table):
        line = "\t".join(_odf_cells(row, lambda cell: _ods_value(cell, odf)))
        if not line.strip():
            rows += repeat  # empty rows, however many, cost nothing
            continue
        for _ in range(min(repeat, MAX_ROWS - rows)):
            yield line
        rows += repeat
        if rows >= MAX_ROWS:
            context.warn(f"{context.title}: sheet {_label(name)} claims over {MAX_ROWS:,} rows; the rest is skipped")
            return


def _ods_value(cell: Any, odf: _Odf) -> str:
    kind = cell.getAttrNS(_OFFICE, "value-type")
    if kind in ("float", "percentage", "currency"):
        value = cell.getAttrNS(_OFFICE, "value")
        if value:
            return _cell_text(_number(value))
    elif kind == "date":
        value = cell.getAttrNS(_OFFICE, "date-value")
        if value:
            return str(value).removesuffix("T00:00:00")
    elif kind == "time":
        value = cell.getAttrNS(_OFFICE, "time-value")
        if value:
            return _iso_duration(value)
    elif kind == "boolean":
        value = cell.getAttrNS(_OFFICE, "boolean-value")
        if value:
            return "TRUE" if value.lower() == "true" else "FALSE"
    texts = [odf.paragraph(p) for p in _odf_elements(cell, (_TEXT, "p"))]
    return _cell_text("\n".join(t for t in texts if t))


def _number(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


_DURATION = re.compile(r"-?P(?:\d+D)?T(\d+)H(\d+)M(\d+(?:\.\d+)?)S$")


def _iso_duration(value: str) -> str:
    """An OpenDocument time ("PT13H05M00S") as 13:05:00; other durations as written."""
    match = _DURATION.match(value)
    if not match:
        return value
    hours, minutes, seconds = match.groups()
    return f"{int(hours):02d}:{int(minutes):02d}:{seconds.split('.')[0].zfill(2)}"


# --------------------------------------------------------------------------------------------
# RTF

# Every brace gets a line of its own (RTF ignores line breaks between tokens), and a control
# word starts a new line once a line is long: striprtf runs regular expressions over each line
# that take time quadratic in its length (its hyperlink pattern), which on a one-line RTF of a
# few megabytes never ends. A backslash pair is kept together so "\{" stays an escaped brace.
_RTF_TOKEN = re.compile(r"\\[a-zA-Z]|\\[\s\S]|[{}]|\n")
_RTF_LINE = 1024


def read_rtf(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An RTF document's text, without its control words."""
    from striprtf import striprtf

    rtf_to_text: Any = striprtf.rtf_to_text  # untyped

    raw = file.read()
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError:
        # RTF is 7-bit with escapes; raw 8-bit bytes come from writers that use the ANSI code page
        source = raw.decode("cp1252", "replace")
    del raw
    if not source.lstrip().startswith("{\\rtf"):
        context.warn(f"{context.title} does not start like an RTF file; read as RTF all the same")
    text = rtf_to_text(_rtf_short_lines(source), errors="replace")
    yield Part(text)


def _rtf_short_lines(source: str) -> str:
    out: list[str] = []
    start = 0  # where the text not yet copied starts
    line = 0  # where the current line starts
    for match in _RTF_TOKEN.finditer(source):
        token = match.group()
        at = match.start()
        if token == "\n":
            line = at + 1
        elif token in "{}" or (len(token) == 2 and token[1].isalpha() and at - line > _RTF_LINE):
            out.append(source[start:at])
            out.append("\n")
            start = line = at
    out.append(source[start:])
    return "".join(out)
