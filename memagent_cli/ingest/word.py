"""Word (.docx), OpenDocument text (.odt) and RTF documents as text with provenance.

* Word and OpenDocument text: the body in document order (paragraphs, headings, list items,
  tables as " | " rows, equations, text boxes, image alt text), split into sections at
  headings; footnotes, endnotes and comments follow in a last "Notes" part.
* RTF: the text without its control words.

The package checks and the OpenDocument walk are shared with the other families in office.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from .base import Part, Place, ReadContext, short_reason, unreadable
from .office import DAMAGED_HINT, Odf, check_package, int_or, load_odf, one_line, unit_label, what_of

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
                place, lines = Place("section", self.count, unit_label(text)), []
            lines.append(text)
        if lines:
            yield Part("\n".join(lines), place)


def read_docx(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A Word document's text: sections split at headings, then its notes and comments."""
    check_package(file, context, "docx")
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    try:
        document = docx.Document(file)
        word = _Word(document.styles.element)
        body = document.element.body
    except Exception as exc:  # python-docx raises KeyError, XMLSyntaxError, PackageNotFoundError…
        raise unreadable(context.title, what_of("docx"), short_reason(exc), DAMAGED_HINT) from exc

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
                direct_outline = int_or(outline.get(_W + "val"), 9) < 9
            numpr = ppr.find(_W + "numPr")
            if numpr is not None:
                num_id = numpr.find(_W + "numId")
                direct_list = num_id is None or num_id.get(_W + "val") != "0"
                ilvl = numpr.find(_W + "ilvl")
                level = int_or(ilvl.get(_W + "val") if ilvl is not None else None, 0)
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
                    out.append(f" [Image: {one_line(alt)}] ")
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
                cells.append(one_line(" ".join(text for text, _ in self.blocks(tc))))
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
                author = one_line(note.get(_W + "author") or "")
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
                    heading = int_or(outline.get(_W + "val"), 9) < 9
                numpr = ppr.find(_W + "numPr")
                if listed is None and numpr is not None:
                    num_id = numpr.find(_W + "numId")
                    listed = num_id is None or num_id.get(_W + "val") != "0"
            based = style.find(_W + "basedOn")
            style_id = based.get(_W + "val") if based is not None else None
        return bool(heading), bool(listed)


# --------------------------------------------------------------------------------------------
# OpenDocument text (.odt)


def read_odt(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An OpenDocument text: sections split at headings, then its notes and comments."""
    document = load_odf(file, context, "odt")
    body = getattr(document, "text", None)
    if body is None:
        raise unreadable(context.title, what_of("odt"), "it holds no text body (another OpenDocument kind?)", DAMAGED_HINT)
    odf = Odf()
    sections = _Sections()
    yield from sections.parts(odf.blocks(body))
    if odf.notes or odf.comments:
        yield Part("\n".join(odf.notes + odf.comments), Place("section", sections.count + 1, "Notes"))


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
