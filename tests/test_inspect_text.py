"""`memagent inspect --text`: exactly the text the model will read, from the real process, with no
model; and `--ocr`, as a user gives it."""

from __future__ import annotations

import zipfile

import pytest
from helpers import run_memagent

from memagent_cli.core.pipeline import SourceOptions, document_text
from memagent_cli.errors import MemagentError
from memagent_cli.ingest import ocr
from memagent_cli.ingest.sources import collect_sources


def make_docx(path):
    import docx

    document = docx.Document()
    document.add_heading("Results", level=1)
    document.add_paragraph("The harbour held forty boats.")
    table = document.add_table(rows=2, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Item", "Count"
    table.rows[1].cells[0].text, table.rows[1].cells[1].text = "Boats", "40"
    document.save(path)
    return path


def test_text_is_the_layout_ask_reads_and_needs_no_model(tmp_path, monkeypatch):
    make_docx(tmp_path / "report.docx")
    (tmp_path / "page.html").write_text(
        "<html><head><title>Harbour</title><script>var x = 'script text';</script></head><body><nav>Home | About</nav>"
        "<article><h1>Harbour</h1><p>" + "The boats came home at dusk. " * 20 + "</p></article></body></html>",
        encoding="utf-8",
    )
    with zipfile.ZipFile(tmp_path / "more.zip", "w") as archive:
        archive.writestr("notes/a.txt", "archived note\n")
    done = run_memagent("inspect", "--text", "report.docx", "page.html", "more.zip", cwd=tmp_path, env={"MEMAGENT_MODEL": ""})
    assert done.returncode == 0, done.stderr
    monkeypatch.chdir(tmp_path)
    expected = "".join(document_text(["report.docx", "page.html", "more.zip"], SourceOptions(), lambda note: None))
    assert done.stdout == expected  # piped: exact, with no newline added
    assert done.stdout.startswith("Document 1:\nreport.docx\nResults\nThe harbour held forty boats.\nItem | Count\nBoats | 40")
    assert "Document 3:\nmore.zip/notes/a.txt\narchived note" in done.stdout
    assert "script text" not in done.stdout and "Home | About" not in done.stdout
    assert done.stderr == ""


def test_text_from_stdin_and_a_legacy_encoding_with_its_note(tmp_path):
    (tmp_path / "legacy.csv").write_bytes("名前,年齢\n山田,30\n".encode("cp932") * 5)
    done = run_memagent("inspect", "--text", "legacy.csv", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "名前,年齢\n山田,30\n" * 4 + "名前,年齢\n山田,30"
    assert done.stderr.strip() == "warning: legacy.csv is not UTF-8; decoded as cp932 (detected)"
    piped = run_memagent("inspect", "--text", input="piped words\n")
    assert piped.returncode == 0 and piped.stdout == "piped words"


def test_a_file_memagent_cannot_read_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))
    done = run_memagent("inspect", "--text", "old.doc", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Word 97-2003 format" in done.stderr and "Traceback" not in done.stderr


def test_a_file_skipped_in_a_folder_leaves_no_empty_document_header(tmp_path):
    """The text the model reads from a folder with an unreadable file among good ones: the good
    ones numbered 1, 2, no "Document N:" header with nothing under it, one note for the bad one."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha text\n", encoding="utf-8")
    (folder / "b.docx").write_bytes(b"PK\x03\x04 not really a zip")
    (folder / "c.txt").write_text("gamma text\n", encoding="utf-8")
    done = run_memagent("inspect", "--text", "docs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Document 1:\ndocs/a.txt\nalpha text\n\nDocument 2:\ndocs/c.txt\ngamma text"
    assert done.stderr.splitlines() == [
        "warning: skipped docs/b.docx (it is damaged, truncated or not a Word file (File is not a zip file))"
    ]


def test_ocr_takes_only_its_three_values(tmp_path):
    (tmp_path / "a.txt").write_text("words")
    done = run_memagent("inspect", "--text", "--ocr", "sometimes", "a.txt", cwd=tmp_path)
    assert done.returncode == 2 and "sometimes" in done.stderr and "auto" in done.stderr
    assert run_memagent("inspect", "--text", "--ocr", "NEVER", "a.txt", cwd=tmp_path).stdout == "words"
    shown = run_memagent("ask", "--help", env={"COLUMNS": "200"}).stdout
    assert "'memagent-cli[ocr]'" in shown  # the extra's brackets are not taken for markup


def test_ocr_always_without_the_extra_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(ocr, "ocr_available", lambda: False)
    (tmp_path / "a.txt").write_text("words")
    with pytest.raises(MemagentError) as caught:
        collect_sources([str(tmp_path / "a.txt")], ocr="always", warn=lambda note: None)
    assert caught.value.exit_code == 2 and "pip install 'memagent-cli[ocr]'" in str(caught.value)


def test_an_image_without_the_extra_is_refused_named_and_skipped_in_a_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(ocr, "ocr_available", lambda: False)
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    (tmp_path / "scan.png").write_bytes(png)
    with pytest.raises(MemagentError, match="read only with OCR, which is not installed") as caught:
        collect_sources([str(tmp_path / "scan.png")], warn=lambda note: None)
    assert "pip install 'memagent-cli[ocr]'" in str(caught.value)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "scan.png").write_bytes(png)
    (tmp_path / "folder" / "a.txt").write_text("words")
    notes: list[str] = []
    found = collect_sources([str(tmp_path / "folder")], warn=notes.append)
    assert [s.kind for s in found] == ["text"]
    assert len(notes) == 1 and "scan.png" in notes[0] and "not installed" in notes[0]
    notes.clear()
    collect_sources([str(tmp_path / "folder")], ocr="never", warn=notes.append)
    assert len(notes) == 1 and "--ocr never" in notes[0]


PHRASE = "The harbour held forty boats."


def _docx(path):
    import docx

    document = docx.Document()
    document.add_paragraph(PHRASE)
    document.save(path)


def _pptx(path):
    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Harbour"
    slide.notes_slide.notes_text_frame.text = PHRASE
    deck.save(path)


def _xlsx(path):
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["Note"])
    book.active.append([PHRASE])
    book.save(path)


def _odt(path):
    from odf.opendocument import OpenDocumentText
    from odf.text import P

    document = OpenDocumentText()
    document.text.addElement(P(text=PHRASE))
    document.save(str(path))


def _epub(path):
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("x")
    book.set_title("Harbour")
    chapter = epub.EpubHtml(title="One", file_name="one.xhtml")
    chapter.content = f"<h1>One</h1><p>{PHRASE}</p>"
    book.add_item(chapter)
    book.spine = [chapter]
    book.toc = [chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    epub.write_epub(str(path), book)


def _eml(path):
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "a@example.org", "b@example.org", "Boats"
    message.set_content(PHRASE)
    path.write_bytes(bytes(message))


WRITERS = {
    "report.docx": _docx,
    "deck.pptx": _pptx,
    "data.xlsx": _xlsx,
    "text.odt": _odt,
    "book.epub": _epub,
    "mail.eml": _eml,
    "page.html": lambda p: p.write_text(f"<html><body><nav>Menu</nav><article><p>{PHRASE}</p></article></body></html>"),
    "feed.rss": lambda p: p.write_text(
        '<rss version="2.0"><channel><title>T</title><item><title>I</title>'
        f"<description>&lt;p&gt;{PHRASE}&lt;/p&gt;</description></item></channel></rss>"
    ),
    "notes.ipynb": lambda p: p.write_text(
        '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["'
        + PHRASE
        + '"]}]}'
    ),
    "letter.rtf": lambda p: p.write_text(r"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard " + PHRASE + r"\par}"),
    "legacy.txt": lambda p: p.write_bytes(("Café " + PHRASE).encode("cp1252")),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_reader_through_inspect_text(tmp_path, monkeypatch, name):
    """Each format, through the real command: the text holds the document's words, none of its
    markup, and is exactly what the pipeline reads."""
    WRITERS[name](tmp_path / name)
    done = run_memagent("inspect", "--text", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert PHRASE in done.stdout
    assert not any(mark in done.stdout for mark in ("<p>", "<html", "{\\rtf", '"cell_type"', "<item>", "Menu"))
    monkeypatch.chdir(tmp_path)
    assert done.stdout == "".join(document_text([name], SourceOptions(), lambda note: None))
