"""Compressed files read as the file inside, within the archive bounds; manual pages rendered
from troff; documents that cannot be read skipped inside folders; control characters never
reaching the model."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zipfile
from pathlib import Path

import pytest
from fpdf import FPDF
from helpers import CODEWORD_ASK, run_memagent

from memagent_cli.errors import MemagentError
from memagent_cli.ingest import archive, compressed, man
from memagent_cli.ingest import text as textmod
from memagent_cli.ingest.base import Place, ReadContext
from memagent_cli.ingest.sources import Source, collect_sources, read_source

pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def read(paths, notes: list[str] | None = None, **kwargs) -> tuple[list[Source], list[str]]:
    """Each source's text, as `ask` reads them; notes collected."""
    notes = [] if notes is None else notes
    sources = collect_sources([str(p) for p in paths], warn=notes.append, **kwargs)
    texts = ["".join(s.text for s in read_source(source, warn=notes.append)) for source in sources]
    return sources, texts


def pdf_bytes(pages: list[str]) -> bytes:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


# --------------------------------------------------------------------------------------------
# Compressed files


@pytest.mark.parametrize("ending, pack", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_a_compressed_text_is_read_as_the_text_inside(in_tmp, ending, pack):
    (in_tmp / f"build.log{ending}").write_bytes(pack(b"step 1 ok\r\nstep 2 failed: disk full\n"))
    sources, texts = read([f"build.log{ending}"])
    assert [(s.title, s.kind) for s in sources] == [(f"build.log{ending}", "text")]
    assert texts == ["step 1 ok\nstep 2 failed: disk full\n"]


def test_a_compressed_pdf_is_read_as_a_pdf_with_its_pages(in_tmp):
    (in_tmp / "report.pdf.gz").write_bytes(gzip.compress(pdf_bytes(["First page", "Second page"])))
    notes: list[str] = []
    (source,) = collect_sources(["report.pdf.gz"], warn=notes.append)
    segments = list(read_source(source, warn=notes.append))
    assert source.kind == "pdf" and notes == []
    assert [(s.text.strip(), s.place) for s in segments] == [("First page", Place("page", 1)), ("Second page", Place("page", 2))]


def test_compressed_files_in_folders_and_zip_archives_are_read(in_tmp):
    (in_tmp / "logs").mkdir()
    (in_tmp / "logs" / "a.log.gz").write_bytes(gzip.compress(b"alpha\n"))
    (in_tmp / "logs" / "b.txt.xz").write_bytes(lzma.compress(b"beta\n"))
    with zipfile.ZipFile(in_tmp / "logs" / "c.zip", "w") as bundle:
        bundle.writestr("inner/c.txt.bz2", bz2.compress(b"gamma\n"))
    notes: list[str] = []
    sources, texts = read(["logs"], notes)
    assert [s.title for s in sources] == ["logs/a.log.gz", "logs/b.txt.xz", "logs/c.zip/inner/c.txt.bz2"]
    assert texts == ["alpha\n", "beta\n", "gamma\n"] and notes == []
    assert all(s.found for s in sources)


def test_a_file_named_gz_that_is_not_gzip_is_read_as_what_it_is(in_tmp):
    (in_tmp / "notes.gz").write_text("plain text, misnamed\n", encoding="utf-8")
    _, texts = read(["notes.gz"])
    assert texts == ["plain text, misnamed\n"]


def test_a_compression_bomb_stops_at_the_archive_ratio(in_tmp):
    data = gzip.compress(b"a" * (8 << 20))  # 8 MiB at ~1000:1
    (in_tmp / "bomb.txt.gz").write_bytes(data)
    (source,) = collect_sources(["bomb.txt.gz"], warn=lambda note: None)
    with pytest.raises(MemagentError, match=r"bomb.txt.gz expands past 2 MiB, over 200:1 \(a compression bomb\?\)"):
        for _ in read_source(source, warn=lambda note: None):
            pass
    assert compressed.limit(len(data)) == archive.MAX_RATIO * len(data) > archive.RATIO_FLOOR
    # in a folder: what was read is kept, the rest skipped with a note
    (in_tmp / "dir").mkdir()
    (in_tmp / "bomb.txt.gz").rename(in_tmp / "dir" / "bomb.txt.gz")
    (in_tmp / "dir" / "ok.txt").write_text("fine\n", encoding="utf-8")
    notes: list[str] = []
    _, texts = read(["dir"], notes)
    assert texts[1] == "fine\n" and 0 < len(texts[0]) <= compressed.limit(len(data))
    assert notes == [
        "skipped the rest of dir/bomb.txt.gz (it expands past 2 MiB, over 200:1 (a compression bomb?); memagent stops there)"
    ]


@pytest.mark.parametrize("ending, pack", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_a_bomb_of_zeros_is_judged_binary_before_it_is_expanded(in_tmp, ending, pack):
    """50 MiB of zero bytes (about 50 KB as gzip, less as bzip2 or xz), named as a text would be:
    its first decompressed bytes say binary, so it is refused named and skipped in a folder, never
    expanded."""
    (in_tmp / "dir").mkdir()
    name = f"zeros.txt{ending}"
    (in_tmp / "dir" / name).write_bytes(pack(bytes(50 << 20)))
    (in_tmp / "dir" / "ok.txt").write_text("fine\n", encoding="utf-8")
    notes: list[str] = []
    _, texts = read(["dir"], notes)
    assert texts == ["fine\n"] and notes == [f"skipped dir/{name} (binary)"]
    with pytest.raises(MemagentError, match=f"dir/{name}: looks like a binary file"):
        collect_sources([f"dir/{name}"], warn=notes.append)


def test_damaged_compressed_data_is_an_error_when_named_and_a_note_in_a_folder(in_tmp):
    whole = gzip.compress(b"some text that is long enough to be cut short\n" * 200)
    (in_tmp / "dir").mkdir()
    (in_tmp / "dir" / "cut.txt.gz").write_bytes(whole[:20])
    (in_tmp / "dir" / "ok.txt").write_text("fine\n", encoding="utf-8")
    notes: list[str] = []
    sources, texts = read(["dir"], notes)
    assert texts == ["fine\n"]
    assert notes == [
        "skipped dir/cut.txt.gz (not readable: damaged gzip data "
        "(Compressed file ended before the end-of-stream marker was reached))"
    ]
    with pytest.raises(MemagentError, match="cut.txt.gz: not readable: damaged gzip data"):
        collect_sources(["dir/cut.txt.gz"], warn=notes.append)


def test_compressed_archives_and_tar_files_are_refused_with_what_to_do(in_tmp):
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as bundle:
        bundle.writestr("a.txt", "a")
    (in_tmp / "bundle.zip.gz").write_bytes(gzip.compress(zipped.getvalue()))
    tar = b"a.txt".ljust(257, b"\0") + b"ustar\x0000" + b"\0" * 250
    (in_tmp / "bundle.tar.gz").write_bytes(gzip.compress(tar))
    with pytest.raises(
        MemagentError, match=r"a gzip-compressed archive, which memagent does not open\. Decompress it and name bundle.zip"
    ):
        collect_sources(["bundle.zip.gz"], warn=lambda note: None)
    with pytest.raises(MemagentError, match=r"a tar archive, which memagent does not open\. Extract it"):
        collect_sources(["bundle.tar.gz"], warn=lambda note: None)


def test_zstd_needs_python_3_14(in_tmp):
    (in_tmp / "a.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 16)
    if compressed.available("zstd"):  # Python 3.14+: compression.zstd reads it
        from compression import zstd  # type: ignore[import-not-found]

        (in_tmp / "a.txt.zst").write_bytes(zstd.compress(b"zstd text\n"))
        assert read(["a.txt.zst"])[1] == ["zstd text\n"]
        return
    with pytest.raises(MemagentError, match="zstd-compressed, which memagent reads on Python 3.14 and later only"):
        collect_sources(["a.txt.zst"], warn=lambda note: None)


# --------------------------------------------------------------------------------------------
# A document that cannot be read, found in a folder


def test_a_folder_reads_every_good_file_and_notes_the_one_bad_one(in_tmp):
    (in_tmp / "docs").mkdir()
    (in_tmp / "docs" / "a.txt").write_text("first\n", encoding="utf-8")
    (in_tmp / "docs" / "b.pdf").write_bytes(b"%PDF-1.4 truncated")
    (in_tmp / "docs" / "c.txt").write_text("third\n", encoding="utf-8")
    notes: list[str] = []
    sources, texts = read(["docs"], notes)
    assert [s.title for s in sources] == ["docs/a.txt", "docs/b.pdf", "docs/c.txt"]
    assert texts == ["first\n", "", "third\n"]
    assert len(notes) == 1 and notes[0].startswith("skipped docs/b.pdf (")
    with pytest.raises(MemagentError, match="Cannot read PDF docs/b.pdf"):
        read(["docs/b.pdf"])


def test_a_file_gone_before_it_is_read_is_skipped_in_a_folder(in_tmp):
    (in_tmp / "docs").mkdir()
    (in_tmp / "docs" / "a.txt").write_text("first\n", encoding="utf-8")
    (in_tmp / "docs" / "b.txt").write_text("second\n", encoding="utf-8")
    notes: list[str] = []
    sources = collect_sources(["docs"], warn=notes.append)
    (in_tmp / "docs" / "a.txt").unlink()
    texts = ["".join(s.text for s in read_source(source, warn=notes.append)) for source in sources]
    assert texts == ["", "second\n"] and notes == ["skipped docs/a.txt (no such file or folder)"]


def test_ask_over_a_folder_with_a_bad_file_answers_and_notes_it(in_tmp):
    (in_tmp / "docs").mkdir()
    (in_tmp / "docs" / "a.txt").write_text("The code word is amber falcon.\n", encoding="utf-8")
    (in_tmp / "docs" / "b.docx").write_bytes(b"not a zip")
    done = run_memagent("ask", "docs", "What is the code word?", *CODEWORD_ASK, "--json", cwd=in_tmp)
    assert done.returncode == 0, done.stderr
    assert "warning: skipped docs/b.docx (it is damaged, truncated or not a Word file (File is not a zip file))" in done.stderr
    named = run_memagent("ask", "docs/b.docx", "What is the code word?", *CODEWORD_ASK, cwd=in_tmp)
    assert named.returncode == 1 and "Cannot read Word file docs/b.docx" in named.stderr


# --------------------------------------------------------------------------------------------
# Control characters


def test_no_control_character_but_newline_and_tab_reaches_the_model(in_tmp):
    (in_tmp / "build.log").write_bytes(
        b"\x1b[1;31merror:\x1b[0m linker failed\x07\tcode 2\x0cpage two\x1b]0;title\x07 end\x7f\xc2\x85\x00".replace(b"\x00", b"")
    )
    assert read(["build.log"])[1] == ["error: linker failed\tcode 2\npage two end"]


def test_an_escape_sequence_cut_by_a_block_boundary_is_still_removed(in_tmp, monkeypatch):
    data = b"red \x1b[31mword\x1b[0m and \x1b]0;a window title\x07done\n"
    (in_tmp / "log.txt").write_bytes(data)
    whole = read(["log.txt"])[1]
    for size in range(1, 12):
        monkeypatch.setattr(textmod, "BLOCK_SIZE", size)
        assert read(["log.txt"])[1] == whole == ["red word and done\n"], size


# --------------------------------------------------------------------------------------------
# Manual pages


def render(source: str) -> str:
    parts = list(man.read_man(io.BytesIO(source.encode()), ReadContext("x.1", "x.1", lambda note: None)))
    return "\n\n".join(part.text for part in parts)


def test_man_escapes_become_the_characters_they_show():
    page = ".TH X 1\n.SH NAME\n\\fBx\\fR \\- a \\(lqtest\\(rq \\[em] \\*(lqquoted\\*(rq \\e path\\ name \\(co \\[u00E9]\\&.\n"
    assert render(page) == "X(1)\n\nNAME\n\nx - a “test” — “quoted” \\ path name © é."


def test_man_strings_conditionals_and_macro_definitions():
    page = (
        '.TH X 1\n.de XX\n.B never shown\n..\n.ie n .ds Q "nroff\n.el .ds Q troff\n'
        ".if t \\{\\\n.B not for nroff\n.\\}\n.if n \\{\\\nshown for nroff\n.\\}\n.SH NAME\nwe are \\*Q\n.ig\nignored\n..\n"
    )
    assert render(page) == "X(1)\n\nshown for nroff\n\nNAME\n\nwe are nroff"


def test_man_tagged_paragraphs_no_fill_and_tables():
    page = (
        '.TH X 1\n.SH OPTIONS\n.TP\n.BR \\-a , " \\-\\-all"\nshow all\n.IP \\(bu 2\nbullet\n.nf\nkeep\n  this\n.fi\n'
        ".TS\ntab(:);\nl l.\nkey:value\n_\nT{\nlong\ncell\nT}:two\n.TE\n"
    )
    assert render(page) == (
        "X(1)\n\nOPTIONS\n\n-a, --all\n    show all\n\n•\n    bullet\n    keep\n      this\n\n"
        "    key | value\n    long cell | two"
    )


def test_a_section_ending_with_no_troff_is_plain_text(in_tmp):
    (in_tmp / "version.1").write_text("version one notes\n", encoding="utf-8")
    (in_tmp / "page.1").write_text('.\\" a page\n.TH PAGE 1\n.SH NAME\npage\n', encoding="utf-8")
    sources, texts = read(["version.1", "page.1"])
    assert [s.kind for s in sources] == ["text", "man"]
    assert texts == ["version one notes\n", "PAGE(1)\n\nNAME\n\npage"]


def test_man_strings_built_of_strings_and_deep_nesting_stay_bounded():
    doubling = "".join(
        f".ds {name} \\*{previous}\\*{previous}\n" for previous, name in zip("abcdefghijklmnopqrst", "bcdefghijklmnopqrstu")
    )
    assert len(render(".ds a " + "x" * 100 + "\n" + doubling + "\\*u\n")) == 4096
    assert render(".Op " + "Op " * 3000 + "x\n").count("[") == 33  # enclosures past 32 deep are words
    assert render(".if n " * 3000 + "text\n") == ""
