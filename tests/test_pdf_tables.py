"""Tables in real PDFs read as rows, cells apart by " | " (docs/FORMATS.md, "PDF tables"), and the whole
text `memagent inspect --text` gives for each sample, through the real process.

The PDFs were made by tools nobody here wrote (origins and licences in tests/data/README.md):

- `array-p2.pdf`: TeX Live's array.pdf, page 2, "Table 1: The preamble options": a table ruled in a grid
  (pdfTeX), its second column of paragraphs that wrap, a label set in the middle of its row (m-columns);
- `booktabs-p2.pdf`: booktabs.pdf, page 2: two tables with booktabs' rules (top, middle, bottom, a
  partial rule under a heading that spans two columns) and a tableau ruled in part (pdfTeX);
- `libreoffice-table.pdf`: a table with borders made by LibreOffice Writer 7.4 from
  `libreoffice-table.fodt` (a header row, a column of notes that wrap);
- `elsarticle-5p-p2.pdf`: a page of Elsevier's two-column specimen paper (pdfTeX), which has no table:
  its text is pypdf's, column after column, with its words hyphenated at line ends made whole;
- `hyperref-paper-p3-5.pdf`: three pages with running heads and feet (tests/test_pdf_reading.py).

The model in the quote test is a fake OpenAI server on 127.0.0.1 (tests/fakeserver.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pypdf
import pytest
from helpers import REPO, run_memagent
from test_pdf_reading import ask, highlighted, shown

SAMPLES = REPO / "tests" / "data" / "samples"
NAMES = ["array-p2", "booktabs-p2", "libreoffice-table", "elsarticle-5p-p2", "hyperref-paper-p3-5"]


def copied(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.pdf"
    shutil.copy(SAMPLES / f"{name}.pdf", path)
    return path


@pytest.mark.parametrize("name", NAMES)
def test_the_text_inspect_gives(tmp_path, name):
    """Each sample's text, whole, as tests/data/samples/NAME.inspect.txt holds it (read by hand)."""
    text, _ = shown(copied(tmp_path, name))
    assert text == (SAMPLES / f"{name}.inspect.txt").read_text(encoding="utf-8")


def test_a_tex_table_ruled_in_a_grid(tmp_path):
    """array.pdf's Table 1: pypdf gives each cell's lines apart, a wrapped cell's words spread over
    lines; memagent gives a row per option, its description whole and its hyphens joined."""
    path = copied(tmp_path, "array-p2")
    raw = pypdf.PdfReader(path).pages[0].extract_text()
    assert "m{width}\nDefines a column of width width. Every entry will be cen-\ntered in proportion" in raw
    text, notes = shown(path)
    assert notes == ""
    rows = text.splitlines()
    assert rows[1:3] == ["l | Left adjusted column.", "c | Centered adjusted column."]
    assert (
        "m{width} | Defines a column of width width. Every entry will be centered in proportion to the rest of the line. "
        "It is somewhat like \\parbox{width}." in rows
    )
    # a label TeX set on its own line between its cell's two lines (">{decl.}") is its row's
    decl = ">{decl.} | Can be used before an l, r, c, p, m or a b option. It inserts decl. directly in front of the entry"
    assert f"{decl} of the column." in rows
    rule = "| | Inserts a vertical line. The distance between two columns will be enlarged by the width of the line"
    assert f"{rule} in contrast to the original definition of LATEX." in rows
    # two headings (in the second column: " | Unchanged options", the page's first line) and thirteen options
    assert rows[0] == "| Unchanged options" and sum("| " in row for row in rows) == 15
    # the caption and the text after the table are pypdf's, in their place
    assert rows[rows.index("Table 1: The preamble options.") - 1].startswith("W{align}{width} | Like w but spits out")


def test_booktabs_tables(tmp_path):
    """booktabs.pdf's two tables with only horizontal rules: the columns from the gaps the lines leave,
    a row per line, the heading that spans two columns a row of its own, a row with its first cell
    empty ("each") a row, not a wrapped line of the one above."""
    text, _ = shown(copied(tmp_path, "booktabs-p2"))
    table = [
        " | Item | ",
        "Animal | Description | Price ($)",
        "Gnat | per gram | 13.65",
        " | each | 0.01",
        "Gnu | stuffed | 92.50",
    ]
    lines = text.splitlines()
    first = lines.index(table[0])
    assert lines[first : first + 5] == table
    assert lines.count("Animal | Description | Price ($)") == 2  # the same table set twice
    # the tableau ruled in part: its vertical rules part some columns, the gaps the others
    assert "gnats | gram | $13.65" in lines and "emu |  | 33.33" in lines


def test_a_libreoffice_table(tmp_path):
    """A LibreOffice table with borders: the header row first, each note whole in its row."""
    text, _ = shown(copied(tmp_path, "libreoffice-table"))
    lines = text.splitlines()
    start = lines.index("Planet | Distance (AU) | Note")
    assert lines[start + 1] == "Mercury | 0.39 | The smallest planet, with almost no atmosphere to keep the heat of the day " + (
        "through its long night."
    )
    assert lines[start + 5] == "Jupiter | 5.20 | The largest planet; its Great Red Spot is a storm wider than the Earth " + (
        "that has lasted for centuries."
    )
    assert lines[start + 6].startswith("Distances are mean distances")
    # the paragraph above the table keeps its last line (a line's baseline just above the table's rule)
    assert lines[start - 1] == "what sets it apart from its neighbours."


def test_a_page_without_tables_keeps_pypdf_text(tmp_path):
    """The two-column page: pypdf's text, column after column, less its hyphens at line ends; nothing
    added, nothing left out."""
    path = copied(tmp_path, "elsarticle-5p-p2")
    raw = pypdf.PdfReader(path).pages[0].extract_text()
    text, notes = shown(path)
    assert notes == "" and " | " not in text
    squeeze = str.maketrans("", "", " \n-")
    assert text.translate(squeeze) == raw.replace("ﬀ", "ff").replace("ﬁ", "fi").replace("ﬃ", "ffi").translate(squeeze)
    assert "considered semiclassically.\nFor the same reason" in text  # "semi-" / "classically. For the same…"
    assert "the life-time of the WGM" in text
    assert text.index("There are few experiments") < text.index("Here we introduced the initial state")


def test_a_quote_in_a_table_row_is_highlighted_on_its_cells(tmp_path):
    """A quote of a table's row ("Mars | 1.52 | Olympus Mons, …"): its offsets slice `inspect --text`,
    and the highlighted PDF covers the row's glyphs, the cells the page draws apart."""
    path = copied(tmp_path, "libreoffice-table")
    run = ask(
        path,
        "Where does Olympus Mons stand?",
        "Mars | 1.52 | Olympus Mons, the tallest volcano known, stands on its surface.",
        "On Mars, the tallest volcano known",
    )
    (quote,) = run["quotes"]
    assert quote["text"] == "Mars | 1.52 | Olympus Mons, the tallest volcano known, stands on its surface."
    text, _ = shown(path)
    assert text[quote["start"] : quote["end"]] == quote["text"]
    assert highlighted(run, path) == {1: "Mars1.52OlympusMons,thetallestvolcanoknown,standsonitssurface."}


def test_inspect_text_and_the_model_read_the_same_rows(tmp_path):
    """What the model is sent holds the table's rows as `inspect --text` gives them."""
    path = copied(tmp_path, "libreoffice-table")
    run = ask(path, "What is Earth's distance?", "Earth | 1.00 | Liquid water on its surface.", "1.00 AU")
    assert run["answer"] == "1.00 AU"
    assert run["steps"][0]["memory"] == "Earth | 1.00 | Liquid water on its surface."
    done = run_memagent("inspect", path.name, "--text", cwd=tmp_path)
    assert "Earth | 1.00 | Liquid water on its surface." in done.stdout
