"""Real documents from Debian's own packages (tests/data/samples, origins and licenses in
tests/data/README.md), each with the defect a new user met reading Debian's manuals: what
`memagent inspect --text` reads of each, and that one bad file never stops a folder."""

from __future__ import annotations

import gzip
import re
import shutil
import zipfile

import pytest
from helpers import REPO, read_path, run_memagent

from memagent_cli.ingest.base import title_of

SAMPLES = REPO / "tests" / "data" / "samples"
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

pytestmark = pytest.mark.usefixtures("no_network")


def test_an_odt_whose_manifest_lists_a_missing_thumbnail_is_read_with_a_note():
    odt = SAMPLES / "live-manual-cut.en.odt"
    with zipfile.ZipFile(odt) as package:  # the defect is still there
        assert "Thumbnails/thumbnail.png" in package.read("META-INF/manifest.xml").decode()
        assert "Thumbnails/thumbnail.png" not in package.namelist()
        assert b"<office:body>  <office:text" in package.read("content.xml")  # indented: odfpy's first child is white space
    text, places, notes = read_path(odt)
    assert text.startswith("Live Systems Manual\n\nAbout\n\nAbout this manual")
    assert "This manual serves as a single access point to all documentation related to the Live Systems Project" in text
    assert "live-build: A collection of scripts used to build customized live systems." in text
    assert [p.label for p in places][:2] == ["Live Systems Manual", "About"]
    assert notes == [
        f"{title_of(str(odt))}: its manifest lists parts it lacks (Configurations2/accelerator/current.xml, "
        "Thumbnails/thumbnail.png, layout-cache); its text is read without them"
    ]


def test_an_epubs_fragment_links_are_places_in_its_chapters_not_missing_files():
    epub = SAMPLES / "live-manual-cut.en.epub"
    with zipfile.ZipFile(epub) as book:
        opf = book.read("OEBPS/content.opf").decode()
    assert 'href="about-manual.xhtml#o8"' in opf and 'idref="about-manual.xhtml#o8"' in opf
    text, places, notes = read_path(epub)
    assert notes == []  # once: "52 files listed in the book missing from it: OEBPS/about-manual.xhtml#o8, …"
    assert text.count("##### 1.1 For the impatient") == 1  # the chapter is read once, not once per fragment
    assert "First, read this chapter, About this manual, from the beginning" in text
    labels = [p.label for p in places if p.unit == "chapter"]
    assert len(labels) == len(set(labels)) == 7


def test_sphinx_header_links_never_reach_the_model():
    page = SAMPLES / "os-sphinx-cut.html"
    raw = page.read_text(encoding="utf-8")
    assert raw.count('class="headerlink"') == 9
    text, places, notes = read_path(page)
    assert "¶" not in text and notes == []
    assert "\n- os.name\n  The name of the operating system dependent module imported." in text
    assert [p.label for p in places if p.label] == [
        "os — Miscellaneous operating system interfaces",
        "File Names, Command Line Arguments, and Environment Variables",
        "Python UTF-8 Mode",
        "Process Parameters",
    ]


def test_a_pdf_text_layers_control_characters_are_dropped():
    text, _, notes = read_path(SAMPLES / "pspicture-p3.pdf")
    assert notes == [] and not CONTROLS.search(text)
    assert text.startswith("2 Examples\nA picture built with LATEX’s line and circle fonts.\n")
    assert "The same picture built with PostScript \\special’s." in text


def test_texs_ligatures_given_as_control_codes_become_letters():
    text, _, notes = read_path(SAMPLES / "pandora-p3.pdf")
    assert notes == [] and not CONTROLS.search(text)
    assert "The next line goes into all files and in addition prevents docstrip from" in text
    assert "adding any further code from the main source file (such as a character table." in text


def test_a_gzipped_debian_changelog_is_read_as_text():
    text, places, notes = read_path(SAMPLES / "hello.changelog.Debian.gz")
    assert notes == [] and places[0].unit is None
    assert text == gzip.decompress((SAMPLES / "hello.changelog.Debian.gz").read_bytes()).decode()
    assert text.startswith("hello (2.10-3) unstable; urgency=medium\n\n  * Add some autopkgtests. Closes: #871622.")


def test_a_man_page_reads_as_a_reader_sees_it():
    text, places, notes = read_path(SAMPLES / "hello.1.gz")
    assert notes == []
    assert text.split("\n\n")[:8] == [
        "HELLO(1) — User Commands",
        "NAME",
        "hello - friendly greeting program",
        "SYNOPSIS",
        "hello [OPTION]...",
        "DESCRIPTION",
        "Print a friendly, customizable greeting.",
        "-h, --help\n    display this help and exit",
    ]
    assert "-g, --greeting=TEXT\n    use TEXT as the greeting message" in text
    assert "Copyright © 2014 Free Software Foundation, Inc." in text
    assert "See man/hello.x <http://git.savannah.gnu.org/cgit/hello.git/tree/man/hello.x> how to add" in text
    assert "\n    info hello\n" in text
    assert [(p.number, p.label) for p in places][:3] == [(None, None), (1, "NAME"), (2, "SYNOPSIS")]
    assert "\\" not in text and not re.search(r"^\.[A-Za-z]", text, re.MULTILINE)


def test_a_bsd_mdoc_man_page_reads_as_a_reader_sees_it():
    text, places, notes = read_path(SAMPLES / "tmux-cut.1.gz")
    assert notes == []
    assert text.startswith("TMUX(1)\n\nNAME\n\ntmux — terminal multiplexer\n\nSYNOPSIS\n\n")
    assert (
        "tmux [-2CDluvV] [-c shell-command] [-f file] [-L socket-name] [-S socket-path] [-T features] [command [flags]]" in text
    )
    assert "(the pty(4) manual page documents the technical details of pseudo terminals)" in text
    assert "(with the ‘C-b d’ key strokes). tmux may be reattached using:\n\n    $ tmux attach" in text
    assert "\n-c shell-command\n    Execute shell-command using the default shell." in text
    assert "Given twice (-CC) disables echo." in text  # an .Xo … .Xc tag
    assert "\nC-Up, C-Down\nC-Left, C-Right\n    Resize the current pane in steps of one cell." in text
    assert [p.label for p in places if p.label] == ["NAME", "SYNOPSIS", "DESCRIPTION", "DEFAULT KEY BINDINGS"]
    assert not re.search(r"^\.[A-Za-z]|\\f|\b(Fl|Ar|Op|Nm|Xr|Ql)\b", text, re.MULTILINE)
    raw = gzip.decompress((SAMPLES / "tmux-cut.1.gz").read_bytes()).decode()
    assert len(text) < 0.9 * len(raw)


def test_one_unreadable_file_never_stops_a_folder(tmp_path):
    """As on Debian's manuals: the ODT that stopped the folder is read, and a file that cannot be
    read at all is skipped with one note naming it and why; named alone it is still an error."""
    corpus = tmp_path / "corpus"
    (corpus / "office").mkdir(parents=True)
    for name in ("live-manual-cut.en.odt", "hello.1.gz", "hello.changelog.Debian.gz"):
        shutil.copy(SAMPLES / name, corpus / "office" / name)
    (corpus / "office" / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    (corpus / "zz-last.txt").write_text("The last file is read too.\n", encoding="utf-8")
    done = run_memagent("inspect", "corpus", "--text", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for expected in (
        "Live Systems Manual",
        "hello - friendly greeting program",
        "hello (2.10-3) unstable",
        "The last file is read too.",
    ):
        assert expected in done.stdout
    notes = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert notes == [
        "warning: skipped corpus/office/broken.docx (it is damaged, truncated or not a Word file (File is not a zip file))",
        "warning: corpus/office/live-manual-cut.en.odt: its manifest lists parts it lacks "
        "(Configurations2/accelerator/current.xml, Thumbnails/thumbnail.png, layout-cache); its text is read without them",
    ]
    alone = run_memagent("inspect", "corpus/office/broken.docx", "--text", cwd=tmp_path)
    assert alone.returncode == 1 and alone.stdout == ""
    assert alone.stderr.startswith("error: Cannot read Word file corpus/office/broken.docx: it is damaged")
