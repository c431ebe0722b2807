"""B9's documents: seeded, varied text, and a realistic file of each format made with the format's
own writer (a .xls as BIFF8 records, built by the tests' officefiles, and a .rtf as RTF text)."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

from benchmarks.harness.fixtures import shared_code

# --------------------------------------------------------------------------------------------
# Text to fill documents with: seeded, varied English (and Japanese for the cp932 file)

_WORDS = """
the a of and to in is was for on that with as by at from it this be are which or an were not
but have has had their its they one all been more when who also would there some into after
other than over most only new about these can two may first time any three year years city
river council report market water bridge station school harbour railway company committee
budget survey engineers workers farmers students village museum library hospital factory
energy storage quarterly revenue shipment contract tender inspection maintenance schedule
flooded repaired measured approved delayed expanded reported recorded increased reduced moved
northern southern eastern western central old new large small early late public private local
national regional annual monthly weekly daily heavy light modern historic narrow wide steady
signed reviewed opened closed built rebuilt planned funded audited surveyed mapped drafted
""".split()
_NAMES = "Ada Grace Alan Edsger Barbara Donald Frances Ken Radia Tim Margaret John Hedy Claude".split()
_JAPANESE = (
    "東京の川沿いに新しい図書館が開かれました。",
    "市議会は来年度の予算案を承認した。",
    "橋の点検は毎月第二月曜日に行われます。",
    "技術者たちは洪水の記録を地図にまとめた。",
    "工場の出荷量は三月に十二パーセント増えた。",
    "駅前の古い倉庫は博物館として再建される予定です。",
    "学生たちは川の水質を毎週測定している。",
    "港湾会社は新しい契約書に署名しました。",
    "報告書によると、鉄道の利用者は増加している。",
    "農家は春の雨が遅れたことを心配していた。",
)


def sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(7, 18))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), str(rng.randint(2, 2030)))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(_NAMES))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?")


def paragraph(rng: random.Random, sentences: tuple[int, int] = (3, 6)) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(*sentences)))


def title(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 5))).title()


def _row(rng: random.Random, n: int) -> list[object]:
    """A realistic table row: an id, a date, a name, a category, amounts, a note, a flag."""
    return [
        n,
        dt.date(2020, 1, 1) + dt.timedelta(days=rng.randrange(1500)),
        f"{rng.choice(_NAMES)} {rng.choice(_WORDS).title()}",
        rng.choice(("north", "south", "east", "west", "central")),
        round(rng.uniform(-5000, 50000), 2),
        rng.randint(0, 900),
        sentence(rng),
        rng.random() < 0.5,
    ]


HEADER = ["id", "date", "name", "region", "amount", "quantity", "note", "paid"]


def _with(element, *children):
    """An odfpy element with `children` added to it, in order."""
    for child in children:
        element.addElement(child)
    return element


# --------------------------------------------------------------------------------------------
# Documents, each made with its format's own writer. `n` sets the size.


def make_docx(path: Path, n: int) -> None:
    import docx

    rng = random.Random(1)
    document = docx.Document()
    document.add_heading("Annual report of the river authority", 0)
    for section in range(n):
        document.add_heading(title(rng), 1)
        for k in range(4):
            p = document.add_paragraph(paragraph(rng))
            if k == 1 and section % 3 == 0:
                document.add_comment(p.runs, text=sentence(rng), author=rng.choice(_NAMES))
        for _ in range(3):
            document.add_paragraph(sentence(rng), style="List Bullet")
        if section % 4 == 0:
            rows = [_row(rng, i) for i in range(6)]
            table = document.add_table(rows=len(rows) + 1, cols=5)
            for c, name in enumerate(("id", "date", "name", "region", "amount")):
                table.cell(0, c).text = name
            for r, row in enumerate(rows, 1):
                for c in range(5):
                    table.cell(r, c).text = str(row[c])
    document.save(str(path))


def make_pptx(path: Path, n: int) -> None:
    import pptx
    from pptx.util import Inches

    rng = random.Random(2)
    deck = pptx.Presentation()
    for number in range(n):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title(rng)
        body = slide.placeholders[1].text_frame
        body.text = sentence(rng)
        for level in (0, 1, 1, 0, 1):
            p = body.add_paragraph()
            p.text = sentence(rng)
            p.level = level
        if number % 4 == 0:
            rows = [_row(rng, i) for i in range(5)]
            shape = slide.shapes.add_table(len(rows), 4, Inches(1), Inches(5), Inches(8), Inches(2))
            for r, row in enumerate(rows):
                for c in range(4):
                    shape.table.cell(r, c).text = str(row[c])
        slide.notes_slide.notes_text_frame.text = paragraph(rng, (2, 4))
    deck.save(str(path))


def make_xlsx(path: Path, n: int, sheets: int = 3) -> None:
    import openpyxl

    rng = random.Random(3)
    book = openpyxl.Workbook(write_only=True)
    for s in range(sheets):
        sheet = book.create_sheet(f"Ledger {2021 + s}")
        sheet.append(HEADER)
        for i in range(n // sheets):
            sheet.append(_row(rng, i))
    book.save(str(path))


def make_ods(path: Path, n: int) -> None:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    rng = random.Random(4)
    doc = OpenDocumentSpreadsheet()
    for s in range(2):
        table = Table(name=f"Ledger {2021 + s}")
        table.addElement(_with(TableRow(), *(_with(TableCell(valuetype="string"), P(text=name)) for name in HEADER)))
        for i in range(n // 2):
            row = TableRow()
            for value in _row(rng, i):
                if isinstance(value, bool):
                    cell = TableCell(valuetype="boolean", booleanvalue=str(value).lower())
                    shown = "TRUE" if value else "FALSE"
                elif isinstance(value, (int, float)):
                    cell = TableCell(valuetype="float", value=value)
                    shown = str(value)
                elif isinstance(value, dt.date):
                    cell = TableCell(valuetype="date", datevalue=value.isoformat())
                    shown = value.isoformat()
                else:
                    cell = TableCell(valuetype="string")
                    shown = str(value)
                row.addElement(_with(cell, P(text=shown)))
            table.addElement(row)
        doc.spreadsheet.addElement(table)
    doc.save(str(path))


def make_odt(path: Path, n: int) -> None:
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableRow
    from odf.text import H, List, ListItem, Note, NoteBody, NoteCitation, P, Span

    rng = random.Random(5)
    doc = OpenDocumentText()
    notes = 0
    for section in range(n):
        doc.text.addElement(H(outlinelevel=1, text=title(rng)))
        for k in range(4):
            p = P(text=paragraph(rng))
            if k == 2 and section % 2 == 0:
                notes += 1
                body = _with(NoteBody(), P(text=sentence(rng)))
                p.addElement(_with(Note(id=f"ftn{notes}", noteclass="footnote"), NoteCitation(text=str(notes)), body))
                p.addElement(Span(text=" " + sentence(rng)))
            doc.text.addElement(p)
        doc.text.addElement(_with(List(), *(_with(ListItem(), P(text=sentence(rng))) for _ in range(3))))
        if section % 4 == 0:
            table = Table(name=f"Table{section}")
            for i in range(6):
                table.addElement(_with(TableRow(), *(_with(TableCell(), P(text=str(v))) for v in _row(rng, i)[:5])))
            doc.text.addElement(table)
    doc.save(str(path))


def make_odp(path: Path, n: int) -> None:
    from odf.draw import Frame, Page, TextBox
    from odf.namespaces import PRESENTATIONNS
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout, PageLayoutProperties
    from odf.text import P

    rng = random.Random(6)
    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm", printorientation="landscape"))
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)

    def frame(cls: str, texts: list[str]) -> Frame:
        shape = Frame(width="24cm", height="4cm", x="1cm", y="1cm")
        shape.setAttrNS(PRESENTATIONNS, "class", cls)
        return _with(shape, _with(TextBox(), *(P(text=text) for text in texts)))

    for number in range(n):
        page = Page(name=f"page{number + 1}", masterpagename=master)
        page.addElement(frame("title", [title(rng)]))
        page.addElement(frame("outline", [sentence(rng) for _ in range(6)]))
        page.addElement(_with(Notes(), frame("notes", [paragraph(rng, (2, 4))])))
        doc.presentation.addElement(page)
    doc.save(str(path))


def make_epub(path: Path, n: int) -> None:
    import warnings

    from ebooklib import epub

    rng = random.Random(7)
    book = epub.EpubBook()
    book.set_identifier("benchmark-river-book")
    book.set_title("The River Authority")
    book.set_language("en")
    book.add_author("Ada Lovelace")
    chapters = []
    for number in range(1, n + 1):
        name = title(rng)
        body = [f"<h1>Chapter {number}: {name}</h1>"]
        for k in range(18):
            body.append(f"<p>{paragraph(rng)}</p>")
            if k % 6 == 5:
                body.append("<ul>" + "".join(f"<li>{sentence(rng)}</li>" for _ in range(3)) + "</ul>")
        chapter = epub.EpubHtml(title=name, file_name=f"chap_{number:03d}.xhtml", lang="en")
        chapter.content = "\n".join(body)
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        epub.write_epub(str(path), book)


def make_html(path: Path, n: int) -> None:
    """A page with the chrome of a real site (navigation, sidebar, footer) around an article."""
    from html import escape

    rng = random.Random(8)
    nav = "".join(f'<li><a href="/{w}">{escape(w.title())}</a></li>' for w in rng.sample(_WORDS, 30))
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>River report | City news</title>',
        "<style>" + "body{margin:0} .nav li{display:inline} " * 40 + "</style>",
        "<script>" + "window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)} " * 40 + "</script>",
        f'</head><body><header><nav class="nav"><ul>{nav}</ul></nav></header><main><article>',
        "<h1>River report</h1>",
    ]
    for section in range(n):
        parts.append(f"<h2>{escape(title(rng))}</h2>")
        for _ in range(4):
            parts.append(f"<p>{escape(paragraph(rng))}</p>")
        if section % 3 == 0:
            rows = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in _row(rng, i)[:5]) + "</tr>" for i in range(5))
            parts.append(f"<table>{rows}</table>")
    parts.append(f"</article></main><aside><ul>{nav}</ul></aside><footer><p>© City news</p><ul>{nav}</ul></footer>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")


def make_feed(path: Path, n: int) -> None:
    from email.utils import format_datetime
    from xml.sax.saxutils import escape

    rng = random.Random(9)
    items = []
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(n):
        body = "".join(f"<p>{paragraph(rng)}</p>" for _ in range(3))
        items.append(
            f"<item><title>{escape(title(rng))}</title><link>https://example.org/news/{i}</link>"
            f"<guid>https://example.org/news/{i}</guid><pubDate>{format_datetime(start + dt.timedelta(hours=i))}</pubDate>"
            f"<description>{escape(body)}</description></item>"
        )
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel><title>City news</title>'
        "<link>https://example.org/</link><description>News from the river authority</description>"
        + "\n".join(items)
        + "</channel></rss>",
        encoding="utf-8",
    )


def make_eml(path: Path, n: int) -> None:
    from email.message import EmailMessage

    rng = random.Random(10)
    message = EmailMessage()
    message["From"] = "Ada Lovelace <ada@example.org>"
    message["To"] = "Council <council@example.org>"
    message["Subject"] = "Quarterly report and ledger"
    message["Date"] = "Tue, 04 Mar 2025 09:30:00 +0000"
    plain = "\n\n".join(paragraph(rng) for _ in range(n))
    message.set_content(plain)
    message.add_alternative(
        "<html><body>" + "".join(f"<p>{p}</p>" for p in plain.split("\n\n")) + "</body></html>", subtype="html"
    )
    ledger = "\n".join(",".join(str(v) for v in _row(rng, i)) for i in range(n * 4))
    message.add_attachment(ledger.encode(), maintype="text", subtype="csv", filename="ledger.csv")
    notes = "\n\n".join(paragraph(rng) for _ in range(n // 2))
    message.add_attachment(notes.encode(), maintype="text", subtype="plain", filename="minutes.txt")
    path.write_bytes(bytes(message))


def make_ipynb(path: Path, n: int) -> None:
    import base64

    rng = random.Random(11)
    png = base64.b64encode(bytes(rng.randrange(256) for _ in range(3000))).decode()
    cells: list[dict] = []
    for k in range(n):
        if k % 5 == 0:
            cells.append({"cell_type": "markdown", "metadata": {}, "source": [f"## {title(rng)}\n", "\n", paragraph(rng)]})
        code = [f"df_{k} = load('{rng.choice(_WORDS)}.csv')\n", f"df_{k}.groupby('region').sum()\n"]
        outputs: list[dict] = [
            {"output_type": "stream", "name": "stdout", "text": [sentence(rng) + "\n" for _ in range(3)]},
            {
                "output_type": "execute_result",
                "execution_count": k + 1,
                "metadata": {},
                "data": {"text/plain": ["\t".join(str(v) for v in _row(rng, i)[:6]) + "\n" for i in range(8)]},
            },
        ]
        if k % 7 == 3:
            outputs.append(
                {"output_type": "display_data", "metadata": {}, "data": {"image/png": png, "text/plain": ["<Figure>"]}}
            )
        cells.append({"cell_type": "code", "execution_count": k + 1, "metadata": {}, "source": code, "outputs": outputs})
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}, "language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


def make_rtf(path: Path, n: int) -> None:
    """RTF as a word processor writes it: a font and colour table, styled runs, escaped
    non-ASCII characters, one paragraph a line."""
    rng = random.Random(12)
    lines = [
        r"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0\froman Times New Roman;}{\f1\fswiss Arial;}}",
        r"{\colortbl;\red0\green0\blue0;\red200\green0\blue0;}",
        r"{\info{\title River report}{\author Ada Lovelace}}",
        r"\paperw11906\paperh16838\margl1440\margr1440\widowctrl\ftnbj",
    ]
    for k in range(n):
        if k % 8 == 0:
            lines.append(r"\pard\sb240\sa120\b\f1\fs32 " + title(rng) + r"\b0\f0\fs24\par")
        words = paragraph(rng).split(" ")
        words[1] = r"{\b " + words[1] + "}"
        words[4] = r"{\i " + words[4] + "}"
        lines.append(r"\pard\sa120\fs24 " + " ".join(words) + r" \u8212? caf\'e9 \par")
    lines.append("}")
    path.write_text("\n".join(lines), encoding="ascii")


def make_txt_cp932(path: Path, n: int) -> None:
    rng = random.Random(13)
    lines = []
    for _ in range(n):
        lines.append("".join(rng.choice(_JAPANESE) for _ in range(rng.randint(2, 6))))
    path.write_bytes("\r\n".join(lines).encode("cp932"))


def make_pdf(path: Path, n: int) -> None:
    from fpdf import FPDF

    rng = random.Random(14)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for _ in range(n):
        pdf.add_page()
        pdf.set_font("Helvetica", style="B", size=13)
        pdf.multi_cell(0, 7, title(rng), new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=10)
        for _ in range(5):
            pdf.multi_cell(0, 5, paragraph(rng), new_x="LMARGIN", new_y="NEXT")
            pdf.ln(2)
    pdf.output(str(path))


def make_xls(path: Path, n: int) -> None:
    """An Excel 97-2003 workbook: BIFF8 records (numbers, dates, labels, booleans) in a compound
    file, built by tests/officefiles.py as tests/test_office.py builds its own."""
    rng = random.Random(15)
    biff8 = shared_code("officefiles").biff8

    sheets = {f"Ledger {2021 + s}": [HEADER] + [_row(rng, i) for i in range(n // 2)] for s in range(2)}
    path.write_bytes(
        biff8({name: [(r, c, v) for r, row in enumerate(rows) for c, v in enumerate(row)] for name, rows in sheets.items()})
    )


# --------------------------------------------------------------------------------------------
# The libraries' own extraction loops
