"""Tests for memagent_cli.ingest.ebook: EPUB books, chapter by chapter in reading order.

Books are written here with ebooklib's own writer, then damaged or given DRM with zipfile where
a test needs it, and read both by read_epub and by the full path (collect_sources / read_source).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from ebooklib import epub
from helpers import read_path

from memagent_cli.errors import MemagentError
from memagent_cli.ingest.base import Place, ReadContext
from memagent_cli.ingest.ebook import read_epub

PNG = b"\x89PNG\r\n\x1a\n" + b"IMAGEBYTES" * 100


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def chapter(number: int, body: str, title: str | None = None) -> epub.EpubHtml:
    item = epub.EpubHtml(title=title or f"Chapter {number}", file_name=f"text/ch{number}.xhtml", lang="en")
    item.content = body
    return item


def make_book(path: Path, *, nav: bool = True, cover: bool = True) -> Path:
    """A book whose spine order (2, 1, 3) differs from its manifest order, with a cover page, an
    image, a table of contents naming two of the three chapters, and two authors."""
    book = epub.EpubBook()
    book.set_identifier("urn:test:storm")
    book.set_title("The Storm Book")
    book.set_language("en")
    book.add_author("Ann Author")
    book.add_author("Bob Writer")
    if cover:
        book.set_cover("images/cover.png", PNG)
    one = chapter(1, "<h1>The Calm</h1><p>The sea was flat.</p><p>Gulls <i>slept</i> on the water.</p>")
    two = chapter(2, "<section><h2>Prologue heading</h2><p>Before it all began.</p></section>")
    three = chapter(3, '<p>No heading here.<br/>Just text.</p><img src="../images/cover.png" alt="cover"/>')
    for item in (one, two, three):
        book.add_item(item)
    book.toc = [epub.Link("text/ch1.xhtml", "I. The Calm Before", "c1"), epub.Link("text/ch2.xhtml#start", "Prologue", "c2")]
    book.add_item(epub.EpubNcx())
    if nav:
        book.add_item(epub.EpubNav())
    book.spine = (["cover"] if cover else []) + [two, one, three]
    epub.write_epub(str(path), book)
    return path


BOOK_TEXT = (
    "Title: The Storm Book\nAuthors: Ann Author, Bob Writer\n\n"
    "## Prologue heading\n\nBefore it all began.\n\n"
    "# The Calm\n\nThe sea was flat.\n\nGulls slept on the water.\n\n"
    "No heading here.\nJust text."
)
BOOK_PLACES = [
    Place(),
    Place("chapter", 1, "Prologue"),
    Place("chapter", 2, "I. The Calm Before"),
    Place("chapter", 3, None),
]


def read_parts(data: bytes, name: str = "book.epub") -> tuple[list, list[str]]:
    notes: list[str] = []
    return list(read_epub(io.BytesIO(data), ReadContext(name, name, notes.append))), notes


def test_chapters_in_spine_order_titled_from_the_table_of_contents(in_tmp):
    path = make_book(in_tmp / "storm.epub")
    text, places, notes = read_path(path)
    assert text == BOOK_TEXT
    assert places == BOOK_PLACES
    assert notes == []


def test_the_reader_skips_the_cover_page_and_never_reads_image_bytes(in_tmp):
    parts, notes = read_parts(make_book(in_tmp / "storm.epub").read_bytes())
    assert [p.place for p in parts] == BOOK_PLACES
    assert all("IMAGEBYTES" not in p.text and "PNG" not in p.text for p in parts)
    assert notes == []


def test_a_chapter_outside_the_table_of_contents_is_titled_by_its_first_heading(in_tmp):
    book = epub.EpubBook()
    book.set_identifier("x")
    book.set_title("Untitled chapters")
    items = [chapter(1, "<div><p>Intro.</p><h3>  Section\n three  </h3><p>Body.</p></div>"), chapter(2, "<p>Only text.</p>")]
    for item in items:
        book.add_item(item)
    book.toc = []
    book.add_item(epub.EpubNcx())
    book.spine = items
    path = in_tmp / "u.epub"
    epub.write_epub(str(path), book)
    parts, _ = read_parts(path.read_bytes())
    assert [(p.text, p.place) for p in parts] == [
        ("Title: Untitled chapters", Place()),
        ("Intro.\n\n### Section three\n\nBody.", Place("chapter", 1, "Section three")),
        ("Only text.", Place("chapter", 2, None)),
    ]


def test_an_epub2_book_takes_chapter_titles_from_its_ncx(in_tmp):
    path = make_book(in_tmp / "old.epub", nav=False, cover=False)
    with zipfile.ZipFile(path) as archive:
        assert not any(name.endswith("nav.xhtml") for name in archive.namelist())
    text, places, _ = read_path(path)
    assert places == BOOK_PLACES
    assert text == BOOK_TEXT


def test_a_book_inside_a_zip_archive_is_read_from_its_temporary_file(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    with zipfile.ZipFile(in_tmp / "books.zip", "w") as archive:
        archive.write(book, "shelf/storm.epub")
    book.unlink()
    text, places, _ = read_path(in_tmp / "books.zip")
    assert text == BOOK_TEXT
    assert places == BOOK_PLACES


def rewrite(path: Path, out: Path, replace: dict[str, bytes | None]) -> Path:
    """A copy of the zip at `path` with members replaced, added, or (None) removed."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename not in replace:
                target.writestr(info, source.read(info))
        for name, data in replace.items():
            if data is not None:
                target.writestr(name, data)
    return out


def encryption(*entries: tuple[str, str]) -> bytes:
    data = "".join(
        f'<enc:EncryptedData><enc:EncryptionMethod Algorithm="{algorithm}"/>'
        f'<enc:CipherData><enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData>'
        for algorithm, uri in entries
    )
    return (
        '<?xml version="1.0"?><encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        f'xmlns:enc="http://www.w3.org/2001/04/xmlenc#">{data}</encryption>'
    ).encode()


AES = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
IDPF_FONT = "http://www.idpf.org/2008/embedding"


def test_a_drm_protected_book_is_refused_in_one_line(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    locked = rewrite(book, in_tmp / "locked.epub", {"META-INF/encryption.xml": encryption((AES, "EPUB/text/ch1.xhtml"))})
    with pytest.raises(MemagentError) as caught:
        read_path(locked)
    assert caught.value.message == "Cannot read EPUB locked.epub: it is DRM-protected"
    assert "DRM" in caught.value.hint


def test_font_obfuscation_is_not_drm(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    fonts = encryption(
        (IDPF_FONT, "EPUB/fonts/a.otf"), ("http://ns.adobe.com/pdf/enc#RC", "EPUB/fonts/b.ttf"), (AES, "EPUB/fonts/c.woff")
    )
    obfuscated = rewrite(book, in_tmp / "fonts.epub", {"META-INF/encryption.xml": fonts})
    text, places, _ = read_path(obfuscated)
    assert text == BOOK_TEXT and places == BOOK_PLACES


def test_a_truncated_book_is_refused_in_one_line(in_tmp):
    data = make_book(in_tmp / "storm.epub").read_bytes()
    (in_tmp / "cut.epub").write_bytes(data[: len(data) // 2])
    with pytest.raises(MemagentError) as caught:
        read_path(in_tmp / "cut.epub")
    assert caught.value.message.startswith("Cannot read EPUB cut.epub: it is not a complete zip archive (")
    assert "\n" not in caught.value.message


def test_a_book_whose_package_file_is_missing_is_refused_in_one_line(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    container = (
        b'<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
        b'<rootfiles><rootfile full-path="OEBPS/missing.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'
    )
    broken = rewrite(book, in_tmp / "broken.epub", {"META-INF/container.xml": container})
    with pytest.raises(MemagentError) as caught:
        read_path(broken)
    assert caught.value.message == "Cannot read EPUB broken.epub: its package file OEBPS/missing.opf is missing"


def test_a_zip_without_a_container_is_refused(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    broken = rewrite(book, in_tmp / "bare.epub", {"META-INF/container.xml": None})
    with pytest.raises(MemagentError, match=r"^Cannot read EPUB bare\.epub: it has no META-INF/container\.xml"):
        read_path(broken)


def test_a_book_missing_files_and_its_table_of_contents_still_reads(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    damaged = rewrite(book, in_tmp / "damaged.epub", {"EPUB/nav.xhtml": None, "EPUB/toc.ncx": None, "EPUB/text/ch3.xhtml": None})
    text, places, notes = read_path(damaged)
    # Without a table of contents, chapters are titled by their headings.
    assert places == [Place(), Place("chapter", 1, "Prologue heading"), Place("chapter", 2, "The Calm")]
    assert text == BOOK_TEXT.rsplit("\n\nNo heading", 1)[0]
    assert notes == [
        "damaged.epub: 3 files listed in the book missing from it: EPUB/text/ch3.xhtml, EPUB/toc.ncx, EPUB/nav.xhtml"
    ]


def test_an_empty_or_damaged_chapter_does_not_stop_the_book(in_tmp):
    book = make_book(in_tmp / "storm.epub")
    junk = rewrite(book, in_tmp / "junk.epub", {"EPUB/text/ch1.xhtml": b"\x00\xff\xfe<html><body><p>Half a chap"})
    text, places, _ = read_path(junk)
    assert places[2] == Place("chapter", 2, "I. The Calm Before")
    assert "Half a chap" in text
