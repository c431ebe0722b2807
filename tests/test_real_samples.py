"""Documents saved by Word and PowerPoint themselves (tests/data/samples, from python-docx's and
python-pptx's public test suites, MIT): what `memagent inspect --text` prints for each."""

from __future__ import annotations

import pytest
from helpers import REPO, read_path, run_memagent

SAMPLES = REPO / "tests" / "data" / "samples"

pytestmark = pytest.mark.usefixtures("no_network")


def test_a_word_files_comments_follow_its_body():
    text, places, notes = read_path(SAMPLES / "comments-rich-para.docx")
    body, _, comments = text.partition("\n\n")
    assert body.splitlines() == [
        "Document text",
        "Some text worthy of note.",
        "Other document text.",
        "Other text worthy of note.",
        "Paragraph 5",
        "Paragraph 6",
        "Paragraph 7",
    ]
    assert comments.splitlines()[0] == "[Comment by Steve Canny] Text with hyperlink https://google.com embedded."
    assert len(comments.splitlines()) == 4 and "Paragraph with Heading 2 paragraph style." in comments
    assert places[-1].label == "Notes" and notes == []


def test_hyperlinks_keep_their_text_and_are_never_followed():
    text, _, notes = read_path(SAMPLES / "par-hyperlinks.docx")
    assert text.splitlines() == [
        "No hyperlinks",
        "One awesome hyperlink.",
        "Three hyperlinks: the first one here, the second one, and the third.",
    ]
    assert notes == []


def test_a_charts_series_are_read_as_values():
    text, places, _ = read_path(SAMPLES / "cht-charts.pptx")
    assert "Series Series 1: Category 1 = 4.3, Category 2 = 2.5, Category 3 = 3.5, Category 4 = 4.5" in text
    assert "Series Series 3: Category 1 = 2, Category 2 = 2, Category 3 = 3, Category 4 = 5" in text
    assert {p.unit for p in places} == {"slide"}


def test_inspect_text_prints_a_slide_with_an_external_link():
    done = run_memagent("inspect", "--text", SAMPLES / "ext-rels.pptx")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == "Code is available at the python-pptx repository on GitHub"
