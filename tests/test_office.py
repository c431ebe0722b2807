"""Tests for memagent_cli.ingest.office, word, slides and sheets: Word, PowerPoint, Excel, OpenDocument and RTF.

Every document is built here with its format's own writer (python-docx, python-pptx, openpyxl,
odfpy); the .xls files and the OLE containers of encrypted Office files, which no installed
library writes, are assembled byte by byte (a minimal compound file and BIFF8 records). Each
test reads through the reader function and through collect_sources/read_source, as the CLI does.
"""

from __future__ import annotations

import datetime as dt
import io
import struct
import zipfile
from pathlib import Path

import pytest

from memagent_cli.errors import MemagentError
from memagent_cli.ingest import office, sheets, slides, word
from memagent_cli.ingest.base import Part, Place, ReadContext
from memagent_cli.ingest.sources import collect_sources, read_source
from testkit.officefiles import biff8, cfb


def _png() -> bytes:
    """A 1x1 PNG, for pictures whose bytes must never reach the text."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0")) + chunk(b"IEND", b"")


PNG = _png()
W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


# --------------------------------------------------------------------------------------------
# Helpers


def read_parts(reader, path: Path, notes: list[str] | None = None) -> list[Part]:
    context = ReadContext(path.name, path.name, (notes if notes is not None else []).append)
    with open(path, "rb") as file:
        return list(reader(file, context))


def read_path(path: Path, notes: list[str] | None = None) -> tuple[str, list[Place]]:
    """The full text and the segments' places, through the dispatcher as the CLI reads."""
    warn = (notes if notes is not None else []).append
    sources = collect_sources([str(path)], warn=warn)
    assert len(sources) == 1
    segments = list(read_source(sources[0], warn=warn))
    return "".join(s.text for s in segments), [s.place for s in segments]


def error_of(path: Path) -> str:
    """The one-line error the dispatcher raises for `path`."""
    sources = collect_sources([str(path)], warn=lambda _: None)
    with pytest.raises(MemagentError) as caught:
        list(read_source(sources[0], warn=lambda _: None))
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Titles are relative to the current directory: short, as the messages are checked whole."""
    monkeypatch.chdir(tmp_path)


pytestmark = pytest.mark.usefixtures("no_network")


# --------------------------------------------------------------------------------------------
# Word


def make_docx(path: Path, build) -> Path:
    import docx

    document = docx.Document()
    build(document)
    document.save(str(path))
    return path


def add_xml(paragraph, xml: str) -> None:
    from docx.oxml import parse_xml

    paragraph._p.append(parse_xml(xml))


def add_notes_part(document, kind: str, notes: dict[int, str]) -> None:
    """A footnotes or endnotes part (python-docx writes neither), with Word's two separators."""
    from docx.opc.constants import CONTENT_TYPE as CT
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part as OpcPart

    body = "".join(
        f'<w:{kind} w:id="{i}"><w:p><w:r><w:{kind}Ref/></w:r><w:r><w:t xml:space="preserve"> {text}</w:t></w:r></w:p></w:{kind}>'
        for i, text in notes.items()
    )
    separators = (
        f'<w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{kind}>'
        f'<w:{kind} w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/></w:r></w:p></w:{kind}>'
    )
    xml = f'<w:{kind}s xmlns:w="{W_NS}">{separators}{body}</w:{kind}s>'.encode()
    content_type, reltype = (CT.WML_FOOTNOTES, RT.FOOTNOTES) if kind == "footnote" else (CT.WML_ENDNOTES, RT.ENDNOTES)
    part = OpcPart(PackURI(f"/word/{kind}s.xml"), content_type, xml, document.part.package)
    document.part.relate_to(part, reltype)


def test_docx_keeps_body_order_headings_lists_tables_and_sections(tmp_path):
    def build(d):
        d.add_paragraph("Preface before any heading.")
        d.add_heading("Introduction", level=1)
        d.add_paragraph("First point", style="List Bullet")
        d.add_paragraph("Second point", style="List Number")
        table = d.add_table(rows=2, cols=2)
        table.cell(0, 0).text, table.cell(0, 1).text = "Name", "Age"
        table.cell(1, 0).text, table.cell(1, 1).text = "Ada", "36"
        d.add_paragraph("After the table.")
        d.add_heading("Results", level=2)
        d.add_paragraph("We found it.")

    path = make_docx(tmp_path / "a.docx", build)
    parts = read_parts(word.read_docx, path)
    assert parts == [
        Part("Preface before any heading.", Place()),
        Part(
            "Introduction\n- First point\n- Second point\nName | Age\nAda | 36\nAfter the table.",
            Place("section", 1, "Introduction"),
        ),
        Part("Results\nWe found it.", Place("section", 2, "Results")),
    ]
    text, places = read_path(path)
    assert text == "\n\n".join(p.text for p in parts)
    assert places == [Place(), Place("section", 1, "Introduction"), Place("section", 2, "Results")]


def test_docx_keeps_notes_comments_equations_alt_text_and_captions(tmp_path):
    def build(d):
        p = d.add_paragraph("A claim")
        add_xml(p, f'<w:r xmlns:w="{W_NS}"><w:footnoteReference w:id="1"/></w:r>')
        p.add_run(" and another")
        add_xml(p, f'<w:r xmlns:w="{W_NS}"><w:endnoteReference w:id="1"/></w:r>')
        add_notes_part(d, "footnote", {1: "Source: the archive."})
        add_notes_part(d, "endnote", {1: "Later work agrees."})
        commented = d.add_paragraph("Disputed sentence.")
        d.add_comment(commented.runs, text="Check this figure.", author="Grace")
        eq = d.add_paragraph("Energy: ")
        add_xml(
            eq,
            '<m:oMath xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math">'
            "<m:r><m:t>E=mc</m:t></m:r><m:sSup><m:e/><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup></m:oMath>",
        )
        d.add_picture(io.BytesIO(PNG))
        docpr = d.inline_shapes[0]._inline.docPr
        docpr.set("descr", "A lighthouse at dusk")
        d.add_paragraph("Figure 1: The lighthouse", style="Caption")

    path = make_docx(tmp_path / "n.docx", build)
    parts = read_parts(word.read_docx, path)
    assert parts == [
        Part(
            "A claim[Footnote 1] and another[Endnote 1]\nDisputed sentence.\nEnergy: E=mc2\n"
            "[Image: A lighthouse at dusk]\nFigure 1: The lighthouse",
            Place(),
        ),
        Part(
            "[Footnote 1] Source: the archive.\n[Endnote 1] Later work agrees.\n[Comment by Grace] Check this figure.",
            Place("section", 1, "Notes"),
        ),
    ]
    text, places = read_path(path)
    assert "PNG" not in text and "IHDR" not in text
    assert places == [Place(), Place("section", 1, "Notes")]


def test_docx_tracked_deletions_and_textbox_fallbacks_are_not_repeated(tmp_path):
    mc = "http://schemas.openxmlformats.org/markup-compatibility/2006"

    def build(d):
        p = d.add_paragraph("Kept ")
        add_xml(p, f'<w:del xmlns:w="{W_NS}" w:id="9" w:author="x"><w:r><w:delText>deleted words</w:delText></w:r></w:del>')
        add_xml(p, f'<w:ins xmlns:w="{W_NS}" w:id="10" w:author="x"><w:r><w:t>inserted</w:t></w:r></w:ins>')
        box = d.add_paragraph()
        add_xml(
            box,
            f'<w:r xmlns:w="{W_NS}" xmlns:mc="{mc}"><mc:AlternateContent>'
            f'<mc:Choice Requires="wps"><w:txbxContent><w:p><w:r><w:t>Boxed note</w:t></w:r></w:p></w:txbxContent></mc:Choice>'
            f"<mc:Fallback><w:txbxContent><w:p><w:r><w:t>Boxed note</w:t></w:r></w:p></w:txbxContent></mc:Fallback>"
            f"</mc:AlternateContent></w:r>",
        )

    parts = read_parts(word.read_docx, make_docx(tmp_path / "t.docx", build))
    assert [p.text for p in parts] == ["Kept inserted\nBoxed note"]


def test_docx_external_relationships_are_never_opened(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SWORDFISH")
    from docx.opc.constants import RELATIONSHIP_TYPE as RT

    def build(d):
        p = d.add_paragraph("Linked things: ")
        link = d.part.relate_to(secret.as_uri(), RT.HYPERLINK, is_external=True)
        add_xml(p, f'<w:hyperlink xmlns:w="{W_NS}" xmlns:r="{R_NS}" r:id="{link}"><w:r><w:t>the file</w:t></w:r></w:hyperlink>')
        # A linked (not embedded) picture: r:link, TargetMode="External", at a file and a URL.
        for target in (secret.as_uri(), "http://127.0.0.1:9/x.png"):
            rid = d.part.relate_to(target, RT.IMAGE, is_external=True)
            add_xml(
                d.add_paragraph(),
                f'<w:r xmlns:w="{W_NS}"><w:drawing><wp:inline '
                f'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing">'
                f'<wp:extent cx="10" cy="10"/><wp:docPr id="{len(rid) + 5}" name="p" descr="linked picture"/>'
                f'<a:graphic xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main">'
                f'<a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/picture">'
                f'<pic:pic xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture">'
                f'<pic:nvPicPr><pic:cNvPr id="0" name="p"/><pic:cNvPicPr/></pic:nvPicPr>'
                f'<pic:blipFill><a:blip xmlns:r="{R_NS}" r:link="{rid}"/></pic:blipFill><pic:spPr/></pic:pic>'
                f"</a:graphicData></a:graphic></wp:inline></w:drawing></w:r>",
            )
        # A remote template, as attached by Word's "Document Template" setting.
        template = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/attachedTemplate"
        d.part._settings_part.relate_to("http://127.0.0.1:9/evil.dotm", template, is_external=True)

    path = make_docx(tmp_path / "links.docx", build)
    text, _ = read_path(path)
    assert text == "Linked things: the file\n[Image: linked picture]\n[Image: linked picture]"
    assert "SWORDFISH" not in text


# --------------------------------------------------------------------------------------------
# Bad Office Open XML files


@pytest.mark.parametrize(("name", "what"), [("x.docx", "Word file"), ("x.pptx", "PowerPoint file"), ("x.xlsx", "Excel file")])
def test_truncated_and_random_office_files_are_one_line_errors(tmp_path, name, what):
    import docx

    whole = tmp_path / "whole.docx"
    docx.Document().save(str(whole))
    data = whole.read_bytes()
    half = tmp_path / name
    half.write_bytes(data[: len(data) // 2])
    message = error_of(half)
    assert message.startswith(f"Cannot read {what} {name}: it is damaged, truncated or not a {what}")
    noise = tmp_path / f"noise{Path(name).suffix}"
    noise.write_bytes(bytes(range(256)) * 40)
    assert error_of(noise).startswith(f"Cannot read {what} noise{Path(name).suffix}: it is damaged")


def test_a_zip_that_is_not_a_word_file(tmp_path):
    path = tmp_path / "x.docx"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("hello.txt", "hi")
    assert error_of(path).startswith("Cannot read Word file x.docx: ")


@pytest.mark.parametrize("suffix", [".docx", ".xlsx", ".pptx"])
def test_ole_signature_named_as_office_open_xml_is_refused(tmp_path, suffix):
    # An OLE header and padding: not parseable as a compound file, so the message says both
    # things it may be.
    path = tmp_path / f"x{suffix}"
    path.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 4000)
    message = error_of(path)
    assert "is password-protected or not a readable" in message
    assert "memagent cannot open encrypted Office files" in message


def test_encrypted_office_file_is_password_protected(tmp_path):
    # What Office writes for a password-protected .docx: a compound file with EncryptionInfo
    # and EncryptedPackage streams.
    path = tmp_path / "secret.docx"
    path.write_bytes(cfb({"EncryptionInfo": b"\x04\x00\x04\x00", "EncryptedPackage": b"\x99" * 5000}))
    message = error_of(path)
    assert message == (
        "Cannot read Word file secret.docx: it is password-protected. "
        "memagent cannot open encrypted Office files; save an unprotected copy and name that"
    )


def test_old_word_file_with_a_new_name(tmp_path):
    path = tmp_path / "old.docx"
    path.write_bytes(cfb({"WordDocument": b"\x00" * 100}))
    assert error_of(path).startswith("Cannot read Word file old.docx: it is a Word 97-2003 (.doc) file with a new name")


def test_zip_bomb_member_is_refused(tmp_path, monkeypatch):
    import docx

    monkeypatch.setattr(office, "BOMB_FLOOR", 1 << 20)
    path = tmp_path / "bomb.docx"
    docx.Document().save(str(path))
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/media/huge.bin", b"\0" * (2 << 20))
    assert "is compressed over 200:1 (a zip bomb?)" in error_of(path)


# --------------------------------------------------------------------------------------------
# PowerPoint


def make_pptx(path: Path) -> Path:
    import pptx
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "Quarterly Review"
    first.placeholders[1].text = "Prepared by Ops"

    second = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    second.shapes.title.text = "Numbers"
    table = second.shapes.add_table(2, 2, Inches(0.5), Inches(1.5), Inches(4), Inches(1)).table
    for (r, c), value in {(0, 0): "Region", (0, 1): "Sales", (1, 0): "North", (1, 1): "12"}.items():
        table.cell(r, c).text = value
    data = CategoryChartData()
    data.categories = ["Q1", "Q2"]
    data.add_series("Sales", (1.5, 2.0))
    chart = second.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(5), Inches(1.5), Inches(4), Inches(3), data).chart
    chart.has_title = True
    chart.chart_title.text_frame.text = "Sales by quarter"
    picture = second.shapes.add_picture(io.BytesIO(PNG), Inches(1), Inches(5))
    picture._element.nvPicPr.cNvPr.set("descr", "A rising line")
    group = second.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(6), Inches(2), Inches(1)).text_frame.text = "Grouped text"
    second.notes_slide.notes_text_frame.text = "Mention the dip."

    third = deck.slides.add_slide(deck.slide_layouts[6])  # blank
    box = third.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame
    box.text = "Backup slide"
    box.add_paragraph().text = "Second line"
    box.paragraphs[1].level = 1
    third._element.set("show", "0")
    deck.save(str(path))
    return path


def test_pptx_reads_each_slide_with_tables_charts_alt_text_groups_and_notes(tmp_path):
    path = make_pptx(tmp_path / "deck.pptx")
    parts = read_parts(slides.read_pptx, path)
    assert parts == [
        Part("Quarterly Review\nPrepared by Ops", Place("slide", 1, "Quarterly Review")),
        Part(
            "Numbers\nRegion | Sales\nNorth | 12\nChart: Sales by quarter\nSeries Sales: Q1 = 1.5, Q2 = 2\n"
            "[Image: A rising line]\nGrouped text\nNotes: Mention the dip.",
            Place("slide", 2, "Numbers"),
        ),
        Part("[Hidden slide]\nBackup slide\n  Second line", Place("slide", 3, None)),
    ]
    text, places = read_path(path)
    assert text == "\n\n".join(p.text for p in parts)
    assert places == [p.place for p in parts]


# --------------------------------------------------------------------------------------------
# Excel


def make_xlsx(path: Path) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    first = book.active
    first.title = "Q3 Sales"
    first.append(["Region", "Units", "Price", "Shipped", "Paid"])
    first.append([])  # an empty row, skipped
    first.append(["North", 12, 2.5, dt.date(2024, 3, 5), True])
    first.append(["South\tcoast", 7, None, dt.datetime(2024, 3, 6, 14, 30), False, None, None])
    first.append([None, None, 0.1])
    notes = book.create_sheet("Notes")
    notes.append(["Line one\nline two"])
    book.create_sheet("Empty")
    book.save(str(path))
    return path


def test_xlsx_reads_each_sheet_as_tab_separated_rows(tmp_path):
    path = make_xlsx(tmp_path / "book.xlsx")
    parts = read_parts(sheets.read_xlsx, path)
    assert parts == [
        Part(
            "Sheet: Q3 Sales\nRegion\tUnits\tPrice\tShipped\tPaid\nNorth\t12\t2.5\t2024-03-05\tTRUE\n"
            "South coast\t7\t\t2024-03-06T14:30:00\tFALSE\n\t\t0.1",
            Place("sheet", 1, "Q3 Sales"),
        ),
        Part("Sheet: Notes\nLine one line two", Place("sheet", 2, "Notes")),
    ]
    text, places = read_path(path)
    assert text == "\n\n".join(p.text for p in parts)
    assert places == [p.place for p in parts]


def test_xlsx_streams_a_long_sheet_in_joined_blocks(tmp_path, monkeypatch):
    import openpyxl

    monkeypatch.setattr(sheets, "ROWS_PER_PART", 3)
    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet("Log")
    for i in range(1, 8):
        sheet.append([f"row {i}", i])
    path = tmp_path / "long.xlsx"
    book.save(str(path))
    parts = read_parts(sheets.read_xlsx, path)
    place = Place("sheet", 1, "Log")
    assert parts == [
        Part("Sheet: Log\nrow 1\t1\nrow 2\t2\nrow 3\t3", place),
        Part("\nrow 4\t4\nrow 5\t5\nrow 6\t6", place, joined=True),
        Part("\nrow 7\t7", place, joined=True),
    ]
    text, places = read_path(path)
    assert text == "Sheet: Log\n" + "\n".join(f"row {i}\t{i}" for i in range(1, 8))
    assert places == [place] * 3


def rewrite_member(path: Path, member: str, change) -> None:
    """Replace one member of a zip package with `change(old text)`."""
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    members[member] = change(members[member].decode()).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


def test_xlsx_formula_cells_give_their_cached_values(tmp_path):
    # openpyxl saves formulas without the value Excel would cache beside them, so the value is
    # put into the sheet's XML here, as Excel writes it: <c><f>A1+A2</f><v>5</v></c>.
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Calc"
    sheet.append([2, 3, "=A1+B1", "=SUM(A1:B1)"])
    path = tmp_path / "calc.xlsx"
    book.save(str(path))
    rewrite_member(path, "xl/worksheets/sheet1.xml", lambda xml: xml.replace("<f>A1+B1</f><v></v>", "<f>A1+B1</f><v>5</v>"))
    assert "<v>5</v>" in zipfile.ZipFile(path).read("xl/worksheets/sheet1.xml").decode()
    text, _ = read_path(path)
    # The formula with a cached value gives the value; the one without gives nothing, never
    # its formula text.
    assert text == "Sheet: Calc\n2\t3\t5"


def test_xlsx_with_a_whole_sheet_dimension_is_not_padded(tmp_path):
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["a", "b"])
    path = tmp_path / "dim.xlsx"
    book.save(str(path))
    rewrite_member(path, "xl/worksheets/sheet1.xml", lambda xml: xml.replace('ref="A1:B1"', 'ref="A1:XFD1048576"'))
    text, _ = read_path(path)
    assert text == "Sheet: Sheet\na\tb"


def test_xlsx_damaged_sheet_is_a_note_and_the_rest_is_read(tmp_path):
    path = make_xlsx(tmp_path / "bad.xlsx")
    rewrite_member(path, "xl/worksheets/sheet2.xml", lambda xml: xml[: len(xml) // 2])
    notes: list[str] = []
    text, places = read_path(path, notes)
    assert text.startswith("Sheet: Q3 Sales\nRegion\tUnits")
    assert places == [Place("sheet", 1, "Q3 Sales")]
    assert len(notes) == 1 and notes[0].startswith("bad.xlsx: sheet 2 (Notes) could not be read (")


def test_xls_reads_values_dates_and_cached_formula_results(tmp_path):
    path = tmp_path / "old.xls"
    path.write_bytes(
        biff8(
            {
                "Budget": [
                    (0, 0, "Item"),
                    (0, 1, "Cost"),
                    (0, 2, "Due"),
                    (0, 3, "Paid"),
                    (2, 0, "Rent"),
                    (2, 1, 1200),
                    (2, 2, dt.date(2024, 2, 29)),
                    (2, 3, True),
                    (3, 0, "Total"),
                    (3, 1, ("formula", 1250.5)),
                ],
                "Blank": [],
                "Other": [(0, 2, "far right")],
            }
        )
    )
    parts = read_parts(sheets.read_xls, path)
    assert parts == [
        Part("Sheet: Budget\nItem\tCost\tDue\tPaid\nRent\t1200\t2024-02-29\tTRUE\nTotal\t1250.5", Place("sheet", 1, "Budget")),
        Part("Sheet: Other\n\t\tfar right", Place("sheet", 3, "Other")),
    ]
    text, places = read_path(path)
    assert text == "\n\n".join(p.text for p in parts)
    assert places == [p.place for p in parts]


def test_xls_dates_follow_the_1904_date_system(tmp_path):
    path = tmp_path / "mac.xls"
    path.write_bytes(biff8({"S": [(0, 0, dt.date(2001, 5, 17))]}, datemode=1))
    assert read_path(path)[0] == "Sheet: S\n2001-05-17"


def test_encrypted_xls_is_password_protected(tmp_path):
    path = tmp_path / "locked.xls"
    path.write_bytes(biff8({"S": [(0, 0, "x")]}, encrypted=True))
    assert error_of(path).startswith("Cannot read Excel 97-2003 file locked.xls: it is password-protected.")


def test_damaged_xls_is_a_one_line_error(tmp_path):
    path = tmp_path / "cut.xls"
    path.write_bytes(biff8({"S": [(0, 0, "x")]})[:700])
    assert error_of(path).startswith("Cannot read Excel 97-2003 file cut.xls: ")


def test_xls_file_named_xlsx_and_xlsx_named_xls_are_read(tmp_path):
    wrong = tmp_path / "really-xls.xlsx"
    wrong.write_bytes(biff8({"S": [(0, 0, "old format")]}))
    assert read_path(wrong)[0] == "Sheet: S\nold format"
    other = make_xlsx(tmp_path / "really-xlsx.xls")
    assert read_path(other)[0].startswith("Sheet: Q3 Sales\nRegion")


# --------------------------------------------------------------------------------------------
# OpenDocument


def make_odt(path: Path) -> Path:
    from odf.dc import Creator
    from odf.draw import Frame, Image
    from odf.office import Annotation
    from odf.opendocument import OpenDocumentText
    from odf.svg import Desc
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, List, ListItem, Note, NoteBody, NoteCitation, P, S

    doc = OpenDocumentText()
    doc.text.addElement(P(text="Before any heading."))
    doc.text.addElement(H(outlinelevel=1, text="Chapter One"))
    p = P(text="A claim")
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="Source: the archive."))
    note.addElement(body)
    p.addElement(note)
    p.addText(" with")
    p.addElement(S(c=2))
    p.addText("spaces.")
    remark = Annotation()
    remark.addElement(Creator(text="Lin"))
    remark.addElement(P(text="Needs a citation."))
    p.addElement(remark)
    doc.text.addElement(p)
    fruits = List()
    for name in ("apples", "pears"):
        item = ListItem()
        item.addElement(P(text=name))
        fruits.addElement(item)
    inner = List()
    inner_item = ListItem()
    inner_item.addElement(P(text="green pears"))
    inner.addElement(inner_item)
    item.addElement(inner)
    doc.text.addElement(fruits)
    table = Table(name="Prices")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for row in (("Fruit", "Price"), ("apples", "3")):
        tr = TableRow()
        for value in row:
            cell = TableCell()
            cell.addElement(P(text=value))
            tr.addElement(cell)
        table.addElement(tr)
    doc.text.addElement(table)
    doc.text.addElement(H(outlinelevel=2, text="Pictures"))
    holder = P()
    frame = Frame(width="1cm", height="1cm", anchortype="as-char")
    frame.addElement(Image(href=doc.addPicture("Pictures/dot.png", "image/png", PNG)))
    frame.addElement(Desc(text="A red dot"))
    holder.addElement(frame)
    doc.text.addElement(holder)
    doc.save(str(path))
    return path


def test_odt_reads_sections_lists_tables_notes_comments_and_alt_text(tmp_path):
    path = make_odt(tmp_path / "doc.odt")
    parts = read_parts(word.read_odt, path)
    assert parts == [
        Part("Before any heading.", Place()),
        Part(
            "Chapter One\nA claim[Footnote 1] with  spaces.\n- apples\n- pears\n  - green pears\nFruit | Price\napples | 3",
            Place("section", 1, "Chapter One"),
        ),
        Part("Pictures\n[Image: A red dot]", Place("section", 2, "Pictures")),
        Part("[Footnote 1] Source: the archive.\n[Comment by Lin] Needs a citation.", Place("section", 3, "Notes")),
    ]
    text, places = read_path(path)
    assert text == "\n\n".join(p.text for p in parts)
    assert places == [p.place for p in parts]


def make_ods(path: Path, rows) -> Path:
    """An .ods with one sheet "Data"; `rows` is a list of (cells, rows-repeated), each cell a
    dict of TableCell attributes plus "text"."""
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    doc = OpenDocumentSpreadsheet()
    table = Table(name="Data")
    for cells, repeat in rows:
        row = TableRow(numberrowsrepeated=repeat) if repeat > 1 else TableRow()
        for spec in cells:
            spec = dict(spec)
            text = spec.pop("text", None)
            cell = TableCell(**spec)
            if text is not None:
                cell.addElement(P(text=text))
            row.addElement(cell)
        table.addElement(row)
    doc.spreadsheet.addElement(table)
    doc.save(str(path))
    return path


def test_ods_reads_values_dates_and_repeats_without_expanding_empty_runs(tmp_path):
    path = make_ods(
        tmp_path / "data.ods",
        [
            ([{"valuetype": "string", "text": "Item"}, {"valuetype": "string", "text": "When"}], 1),
            (
                [
                    {"valuetype": "float", "value": "12", "text": "12.00"},
                    {"valuetype": "date", "datevalue": "2024-03-05", "text": "05/03/24"},
                    {"valuetype": "boolean", "booleanvalue": "true", "text": "TRUE"},
                    {"valuetype": "time", "timevalue": "PT13H05M00S", "text": "1:05 PM"},
                    {"numbercolumnsrepeated": 3},
                    {"valuetype": "percentage", "value": "0.25", "text": "25%"},
                    {"numbercolumnsrepeated": 16000},  # LibreOffice pads every row to the last column
                ],
                1,
            ),
            ([{"numbercolumnsrepeated": 1024}], 1_048_000),  # and the sheet to the last row
            ([{"valuetype": "string", "text": "same"}, {"valuetype": "float", "value": "1.5"}], 3),
        ],
    )
    parts = read_parts(sheets.read_ods, path)
    assert parts == [
        Part(
            "Sheet: Data\nItem\tWhen\n12\t2024-03-05\tTRUE\t13:05:00\t\t\t\t0.25\nsame\t1.5\nsame\t1.5\nsame\t1.5",
            Place("sheet", 1, "Data"),
        )
    ]
    text, places = read_path(path)
    assert text == parts[0].text and places == [Place("sheet", 1, "Data")]


def test_ods_caps_repeats_of_cells_with_content(tmp_path, monkeypatch):
    monkeypatch.setattr(sheets, "MAX_ROWS", 4)
    path = make_ods(
        tmp_path / "bomb.ods",
        [([{"valuetype": "string", "text": "x", "numbercolumnsrepeated": 10_000_000}], 10_000_000)],
    )
    notes: list[str] = []
    parts = read_parts(sheets.read_ods, path, notes)
    lines = "".join(p.text for p in parts).split("\n")
    assert lines[0] == "Sheet: Data" and len(lines) == 5
    assert all(line == "\t".join(["x"] * office.MAX_COLUMNS) for line in lines[1:])
    assert notes == ["bomb.ods: sheet Data claims over 4 rows; the rest is skipped"]


def test_an_ods_too_large_for_odfpy_is_refused_before_it_is_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(office, "ODF_MAX_XML", 2000)
    rows = [([{"valuetype": "string", "text": f"row {k} " * 10}], 1) for k in range(40)]
    path = make_ods(tmp_path / "big.ods", rows)
    message = error_of(path)
    assert "big.ods" in message and "MB of XML, more than memagent reads whole" in message
    assert "Save it as .xlsx" in message


def make_odp(path: Path) -> Path:
    from odf.draw import CustomShape, Frame, Image, Page, TextBox
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout, PageLayoutProperties
    from odf.svg import Title
    from odf.text import P

    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm", printorientation="landscape"))
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)

    def frame(cls: str | None, *texts: str):
        shape = Frame(width="20cm", height="3cm", x="1cm", y="1cm")
        if cls:
            shape.setAttrNS(PRESENTATIONNS, "class", cls)
        box = TextBox()
        for text in texts:
            box.addElement(P(text=text))
        shape.addElement(box)
        return shape

    first = Page(name="page1", masterpagename=master)
    first.addElement(frame("title", "Welcome"))
    first.addElement(frame("outline", "Agenda item one", "Agenda item two"))
    notes = Notes()
    notes.addElement(frame("notes", "Greet everyone."))
    first.addElement(notes)
    doc.presentation.addElement(first)

    second = Page(name="Details", masterpagename=master)
    shape = CustomShape(width="5cm", height="2cm", x="1cm", y="1cm")
    shape.addElement(P(text="Inside a shape"))
    second.addElement(shape)
    picture = Frame(width="2cm", height="2cm", x="1cm", y="5cm")
    picture.addElement(Image(href=doc.addPicture("Pictures/dot.png", "image/png", PNG)))
    picture.addElement(Title(text="Logo"))
    second.addElement(picture)
    doc.presentation.addElement(second)
    doc.save(str(path))
    return path


def test_odp_reads_each_slide_with_title_text_alt_text_and_notes(tmp_path):
    path = make_odp(tmp_path / "talk.odp")
    parts = read_parts(slides.read_odp, path)
    assert parts == [
        Part("Welcome\nAgenda item one\nAgenda item two\nNotes: Greet everyone.", Place("slide", 1, "Welcome")),
        Part("Inside a shape\n[Image: Logo]", Place("slide", 2, "Details")),
    ]
    text, places = read_path(path)
    assert text == "\n\n".join(p.text for p in parts)
    assert places == [p.place for p in parts]


def test_password_protected_odf_is_refused(tmp_path):
    path = make_odt(tmp_path / "locked.odt")
    rewrite_member(
        path,
        "META-INF/manifest.xml",
        lambda xml: xml.replace(
            'manifest:full-path="content.xml"',
            'manifest:full-path="content.xml"><manifest:encryption-data manifest:checksum-type="SHA1"/></manifest:file-entry'
            '><manifest:file-entry manifest:media-type="" manifest:full-path="x"',
        ),
    )
    assert error_of(path) == (
        "Cannot read OpenDocument text locked.odt: it is password-protected. "
        "memagent cannot open encrypted OpenDocument files; save an unprotected copy and name that"
    )


def test_odf_with_broken_xml_is_one_line_and_prints_nothing(tmp_path, capfd):
    path = make_odt(tmp_path / "cut.odt")
    rewrite_member(path, "content.xml", lambda xml: xml[: len(xml) // 2])
    assert error_of(path) == (
        "Cannot read OpenDocument text cut.odt: its XML is not well-formed. Check that it is a complete, undamaged file"
    )
    assert capfd.readouterr().out == ""


def test_odf_truncated_is_one_line(tmp_path):
    data = make_ods(tmp_path / "whole.ods", [([{"valuetype": "string", "text": "x"}], 1)]).read_bytes()
    path = tmp_path / "half.ods"
    path.write_bytes(data[: len(data) // 2])
    assert error_of(path).startswith("Cannot read OpenDocument spreadsheet half.ods: it is damaged, truncated or not a")


# --------------------------------------------------------------------------------------------
# RTF

RTF = r"""{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0\fswiss\fcharset0 Arial;}{\f1\fnil\fcharset128 MS Mincho;}}
{\colortbl;\red255\green0\blue0;}
\pard\b Caf\'e9\b0  costs 5\u8364? today.\par
{\field{\*\fldinst{HYPERLINK "http://127.0.0.1:9/x"}}{\fldrslt{the site}}}\par
{\pict\pngblip\picw1\pich1 89504e470d0a1a0a}\par
{\f1 \'82\'a0}\par
Brace \{ and backslash \\ kept.\par
Tab\tab end.}"""


def test_rtf_text_without_control_words(tmp_path):
    path = tmp_path / "letter.rtf"
    path.write_text(RTF, encoding="ascii")
    expected = "Café costs 5€ today.\nthe site\n\nあ\nBrace { and backslash \\ kept.\nTab\tend."
    assert read_parts(word.read_rtf, path) == [Part(expected, Place())]
    text, places = read_path(path)
    assert text == expected and places == [Place()]


def test_rtf_on_one_long_line_does_not_hang(tmp_path):
    # striprtf's hyperlink pattern takes time quadratic in the length of a line holding many
    # field starts: this one line would take minutes without the reader's line breaking.
    import time

    path = tmp_path / "one-line.rtf"
    path.write_text("{\\rtf1 Start " + "{\\field{\\*\\fldinst{" * 20_000 + " end}", encoding="ascii")
    started = time.monotonic()
    text, _ = read_path(path)
    assert time.monotonic() - started < 10
    assert text == "Start "  # the rest is inside the unclosed field codes


def test_text_named_rtf_is_read_with_a_note(tmp_path):
    path = tmp_path / "plain.rtf"
    path.write_text("just words", encoding="ascii")
    notes: list[str] = []
    assert read_path(path, notes)[0] == "just words"
    assert notes == ["plain.rtf does not start like an RTF file; read as RTF all the same"]


# --------------------------------------------------------------------------------------------
# Through an archive: each reader gets an anonymous temporary file, not a path


def test_office_documents_inside_a_zip_archive(tmp_path):
    make_docx(tmp_path / "a.docx", lambda d: d.add_paragraph("Word inside"))
    make_ods(tmp_path / "b.ods", [([{"valuetype": "string", "text": "Calc inside"}], 1)])
    (tmp_path / "c.xls").write_bytes(biff8({"S": [(0, 0, "Excel inside")]}))
    make_pptx(tmp_path / "d.pptx")
    with zipfile.ZipFile(tmp_path / "all.zip", "w") as z:
        for name in ("a.docx", "b.ods", "c.xls", "d.pptx"):
            z.write(tmp_path / name, f"docs/{name}")
    notes: list[str] = []
    sources = collect_sources([str(tmp_path / "all.zip")], warn=notes.append)
    texts = ["".join(s.text for s in read_source(source, warn=notes.append)) for source in sources]
    assert [s.title for s in sources] == [
        "all.zip/docs/a.docx",
        "all.zip/docs/b.ods",
        "all.zip/docs/c.xls",
        "all.zip/docs/d.pptx",
    ]
    assert texts[:3] == ["Word inside", "Sheet: Data\nCalc inside", "Sheet: S\nExcel inside"]
    assert texts[3].startswith("Quarterly Review\nPrepared by Ops\n\nNumbers\n")
    assert notes == []


def test_pptx_hyperlinks_to_files_are_not_opened(tmp_path):
    import pptx
    from pptx.util import Inches

    secret = tmp_path / "secret.txt"
    secret.write_text("SWORDFISH")
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])
    run = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1)).text_frame.paragraphs[0].add_run()
    run.text = "see the file"
    run.hyperlink.address = secret.as_uri()
    path = tmp_path / "link.pptx"
    deck.save(str(path))
    assert read_path(path) == ("see the file", [Place("slide", 1, None)])


def test_encrypted_xlsx_named_xls_is_password_protected(tmp_path):
    path = tmp_path / "locked-new.xls"
    path.write_bytes(cfb({"EncryptionInfo": b"\x04\x00\x04\x00", "EncryptedPackage": b"\x99" * 5000}))
    assert error_of(path).startswith("Cannot read Excel 97-2003 file locked-new.xls: it is password-protected.")
