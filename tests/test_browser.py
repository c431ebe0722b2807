"""The pages memagent writes, drawn by a real browser (headless Chromium): a run exported as HTML
with its quotes marked and its hide-dropped-text switch working, an `ask --each --html` page, and
the live view's SVG. Where Chromium is missing these skip, saying how to install it; under CI,
which installs it (.ci/run), they fail instead."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import CODEWORD_ASK, REPO, chromium, headless_browser, png_pixels, run_memagent, screenshot, whole_fact

QUESTION = "What is the code word?"
DEL_BACKGROUND = b"\xfb\xdc\xdc"  # the export's `--del` colour, behind struck-out text


@pytest.fixture(scope="module")
def browser() -> str:
    return headless_browser()


@pytest.fixture
def exported(tmp_path, memagent_home, browser):
    """A real run of the trained code-word model over a document with the fact, quoted (--cite),
    exported as HTML: its record and the page."""
    doc = whole_fact(400, 3, where=0.5)
    (tmp_path / "notes.txt").write_text(doc.text, encoding="utf-8")
    done = run_memagent("ask", "notes.txt", QUESTION, *CODEWORD_ASK, "--temperature", "0", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["answer"] == doc.value and record["quotes"]
    page = tmp_path / "run.html"
    wrote = run_memagent("traces", "export", record["trace"], "--format", "html", "-o", page, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    return record, page


class Marks(HTMLParser):
    """The text inside each <mark> of a DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        if tag == "mark":
            self.depth += 1
            self.marks.append("")

    def handle_endtag(self, tag):
        if tag == "mark":
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.marks[-1] += data


def test_each_quote_is_marked_in_the_page_the_browser_builds(exported):
    record, page = exported
    dom = chromium(page, "--dump-dom").stdout
    parsed = Marks()
    parsed.feed(dom)
    quotes = [q["text"] for q in record["quotes"]]
    assert parsed.marks == quotes, (parsed.marks, quotes)


def test_the_hide_dropped_text_switch_hides_the_struck_text(exported, tmp_path):
    """The switch is CSS alone (no script): drawn with it on, the memory's struck-out text (its
    pink background) is gone from the timeline, while the legend's sample of it stays."""
    _, page = exported
    html = page.read_text(encoding="utf-8")
    assert "<del>No previous memory</del>" in html  # step 1 dropped the initial memory
    on = tmp_path / "run-hidden.html"
    on.write_text(
        html.replace('<input type="checkbox" id="hide-del">', '<input type="checkbox" id="hide-del" checked>'), encoding="utf-8"
    )
    assert on.read_text(encoding="utf-8") != html

    def struck(path: Path) -> int:
        _, _, pixels = png_pixels(screenshot(path, tmp_path / f"{path.stem}.png"))
        return sum(px == DEL_BACKGROUND for row in pixels for px in row)

    shown, hidden = struck(page), struck(on)
    assert 0 < hidden < shown, (shown, hidden)


def test_an_each_page_is_drawn(tmp_path, memagent_home, browser):
    docs = tmp_path / "docs"
    docs.mkdir()
    for k in range(3):
        (docs / f"d{k}.txt").write_text(whole_fact(300, 10 + k).text, encoding="utf-8")
    done = run_memagent("ask", "docs", "--each", "-q", QUESTION, *CODEWORD_ASK, "--html", "page.html", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    width, height, pixels = png_pixels(screenshot(tmp_path / "page.html", tmp_path / "each.png"))
    colours = {px for row in pixels for px in row}
    assert (width, height) == (1200, 1600) and len(colours) > 50
    assert b"\xf4\xf5\xf7" in colours and any(max(px) < 0x60 for px in colours)  # the page's background, dark text


def test_the_live_view_svg_is_drawn(tmp_path, browser):
    svg = REPO / "docs" / "live-view.svg"
    width = int(float(re.search(r'width="([\d.]+)', svg.read_text(encoding="utf-8")).group(1)))
    _, _, pixels = png_pixels(screenshot(svg, tmp_path / "live.png", size=(width, 700)))
    colours = {px for row in pixels for px in row}
    assert len(colours) > 20, "the terminal's colours were drawn, not a blank picture"
