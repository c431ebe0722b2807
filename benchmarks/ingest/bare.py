"""B9's other side: each format's library doing its own bare extraction loop on the same file."""

from __future__ import annotations

import json
from pathlib import Path


def bare_docx(path: Path) -> str:
    import docx

    document = docx.Document(str(path))
    out = [p.text for p in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            out.extend(cell.text for cell in row.cells)
    return "\n".join(out)


def bare_pptx(path: Path) -> str:
    import pptx

    out = []
    for slide in pptx.Presentation(str(path)).slides:
        for shape in slide.shapes:
            if shape.has_text_frame:
                out.append(shape.text_frame.text)
            if shape.has_table:
                for row in shape.table.rows:
                    out.extend(cell.text for cell in row.cells)
        if slide.has_notes_slide:
            out.append(slide.notes_slide.notes_text_frame.text)
    return "\n".join(out)


def bare_xlsx(path: Path) -> str:
    import openpyxl

    book = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    out = []
    for sheet in book.worksheets:
        for row in sheet.iter_rows(values_only=True):
            out.append("\t".join("" if v is None else str(v) for v in row))
    book.close()
    return "\n".join(out)


def bare_xls(path: Path) -> str:
    import xlrd

    book = xlrd.open_workbook(str(path))
    out = []
    for sheet in book.sheets():
        for r in range(sheet.nrows):
            out.append("\t".join(str(v) for v in sheet.row_values(r)))
    return "\n".join(out)


def bare_ods(path: Path) -> str:
    from odf import teletype
    from odf.opendocument import load
    from odf.table import Table, TableCell, TableRow

    out = []
    for table in load(str(path)).spreadsheet.getElementsByType(Table):
        for row in table.getElementsByType(TableRow):
            out.append("\t".join(teletype.extractText(cell) for cell in row.getElementsByType(TableCell)))
    return "\n".join(out)


def bare_odt(path: Path) -> str:
    from odf import teletype
    from odf.opendocument import load

    return "\n".join(teletype.extractText(block) for block in load(str(path)).text.childNodes)


def bare_odp(path: Path) -> str:
    from odf import teletype
    from odf.draw import Page
    from odf.opendocument import load

    return "\n".join(teletype.extractText(page) for page in load(str(path)).presentation.getElementsByType(Page))


def bare_epub(path: Path) -> str:
    import warnings

    import lxml.html
    from ebooklib import epub

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        book = epub.read_epub(str(path))
    out = []
    for idref, _ in book.spine:
        item = book.get_item_with_id(idref)
        if item is not None:
            out.append(lxml.html.fromstring(item.get_content()).text_content())
    return "\n".join(out)


def bare_html(path: Path) -> str:
    import trafilatura

    return trafilatura.extract(path.read_bytes().decode("utf-8", "replace")) or ""


def bare_feed(path: Path) -> str:
    import feedparser

    parsed = feedparser.parse(str(path))
    return "\n".join(f"{e.get('title', '')}\n{e.get('summary', '')}" for e in parsed.entries)


def bare_eml(path: Path) -> str:
    from email import policy
    from email.parser import BytesParser

    with open(path, "rb") as fh:
        message = BytesParser(policy=policy.default).parse(fh)
    out = [message.get_body(preferencelist=("plain", "html")).get_content()]
    for attachment in message.iter_attachments():
        content = attachment.get_content()
        if isinstance(content, str):
            out.append(content)
    return "\n".join(out)


def bare_ipynb(path: Path) -> str:
    notebook = json.loads(path.read_bytes())
    out = []
    for cell in notebook["cells"]:
        out.append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            out.append("".join(output.get("text") or output.get("data", {}).get("text/plain") or []))
    return "\n".join(out)


def bare_rtf(path: Path) -> str:
    from striprtf.striprtf import rtf_to_text

    return rtf_to_text(path.read_text(encoding="ascii"))


def bare_txt(path: Path) -> str:
    return path.read_bytes().decode("cp932")


def bare_pdf(path: Path) -> str:
    from pypdf import PdfReader

    with open(path, "rb") as fh:
        return "\n".join(page.extract_text() for page in PdfReader(fh).pages)
