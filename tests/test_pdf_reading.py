"""Real PDFs read as a person reads them (docs/FORMATS.md, "PDF text"): running heads and page numbers
left out and named once, contents' leader dots shortened, words hyphenated at a line end made whole;
and a quote across a joined word or across a page break (a running foot and head left out between)
highlighted on the right glyphs of the right pages.

The PDFs are pages of Heiko Oberdiek's EuroTeX'99 paper as Debian's TeX Live documentation ships it,
made by pdfTeX (tests/data/samples/hyperref-paper-p3-5.pdf and -p21.pdf; origin and license in
tests/data/README.md). The model is a fake OpenAI server on 127.0.0.1 (tests/fakeserver.py) that
answers from what the prompts hold; the reading, the chunking, the quotes, the trace store and the
export are memagent's own, through the real `memagent` process."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pypdf
import pypdfium2 as pdfium
import pytest
from fakeserver import MEMORY_MARK, FakeServer
from helpers import REPO, run_memagent, shared_path

SAMPLES = REPO / "tests" / "data" / "samples"
PAGES = SAMPLES / "hyperref-paper-p3-5.pdf"  # the paper's pages 3 to 5
CONTENTS = SAMPLES / "hyperref-paper-p21.pdf"  # its table of contents
VOCAB = shared_path("fixtures", "ggml-vocab-qwen2.gguf")
HEADS = ("PDF information and navigation elements", "EuroTEX´99 Proceedings")
ACROSS_PAGES = "But in the last step the text in the .toc file is read and digested\n\nby TEX’s stomach."
ACROSS_HYPHEN = "There are differences\nwith WinAnsiEncoding."


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    path = tmp_path / PAGES.name
    shutil.copy(PAGES, path)
    return path


def shown(path: Path) -> tuple[str, str]:
    done = run_memagent("inspect", path.name, "--text", cwd=path.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_running_heads_and_feet_are_left_out_and_named_once(pages):
    raw = [page.extract_text() for page in pypdf.PdfReader(pages).pages]
    assert raw[0].startswith("PDF information and navigation elements 3\n")  # the file has them
    assert raw[1].startswith("4 PDF information and navigation elements\n")  # a left page's head
    assert all(page.rstrip().endswith("EuroTEX´99 Proceedings") for page in raw)
    text, notes = shown(pages)
    assert not any(head in text for head in HEADS)
    assert notes.splitlines() == [
        f"warning: {pages.name}: left out the running heads and feet of 3 of 3 pages: "
        "'PDF information and navigation elements 3'; '4 PDF information and navigation elements'; "
        "'EuroTEX´99 Proceedings'"
    ]
    # each page begins with its own first line, and the sentence the page break splits is whole
    assert [page.split("\n", 1)[0] for page in text.split("\n\n")] == [
        "2 Strings in TEX and PDF",
        "by TEX’s stomach. For the bookmarks, however, the argument is only written to",
        "3 Encoding handling",
    ]
    assert ACROSS_PAGES in text


def test_words_hyphenated_at_line_ends_are_whole(pages):
    raw = "\n".join(page.extract_text() for page in pypdf.PdfReader(pages).pages)
    breaks = re.findall(r"(\w+)-\n(\w+)", raw)
    assert breaks == [
        ("Uni", "code"),
        ("dif", "ferences"),
        ("book", "marks"),
        ("hyphen", "ation"),
        ("en", "codings"),
        ("cir", "cumvently"),
    ]
    text, _ = shown(pages)
    assert not re.search(r"\w-\n\w", text)
    # the rest of the word is moved up to its first part; the line's other words stay on their line
    assert "possible encodings are PDFDocEncoding or Unicode:\nPDFDocEncoding is" in text
    assert ACROSS_HYPHEN in text
    assert "general document information, bookmarks,\ntext annotations" in text
    assert "ligatures, or hyphenation.\n◦ No manipulation" in text
    assert "one of the two PDF encodings\n\\pdfstringdef" in text
    assert "selects the font slot directly, circumvently\nthe font encoding mechanism." in text
    # nothing else changed: the file's text less each page's first and last line (its head and
    # foot), hyphens, white space and ligatures aside
    bodies = ["\n".join(page.extract_text().strip().split("\n")[1:-1]) for page in pypdf.PdfReader(pages).pages]
    assert _bare(text) == _bare("".join(bodies).replace("ﬁ", "fi"))


def _bare(text: str) -> str:
    return "".join(text.split()).replace("-", "")


def test_contents_leader_dots_are_one_ellipsis(tmp_path):
    path = tmp_path / CONTENTS.name
    shutil.copy(CONTENTS, path)
    raw = pypdf.PdfReader(path).pages[0].extract_text()
    assert "\n2.1 Strings of PDF format . . . . . . . . . . . . . . . . . . . . 3\n" in raw
    text, notes = shown(path)
    assert notes == ""  # one page: nothing recurs
    lines = text.splitlines()
    assert "2.1 Strings of PDF format … 3" in lines
    assert "6.1 Providing an alternative with \\texorpdfstring … 14" in lines
    assert ". ." not in text
    assert sum("…" in line for line in lines) == sum(". . . ." in line for line in raw.splitlines()) == 32
    assert len(text) < 0.6 * len(raw)


def served(url: str, *more: str) -> list[str]:
    return ["--engine", "openai", "--base-url", url, "--tokenizer", str(VOCAB), *more]


def ask(pages: Path, question: str, said: str, answer: str) -> dict:
    """`memagent ask` over the pages, the memory copying the sentence that holds `said` (with its line
    and page breaks as spaces) and the answer `answer`: the run's JSON."""

    def reply(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        if MEMORY_MARK in prompt[-40:]:
            section = prompt.rpartition("<section>")[2].partition("</section>")[0]
            flat = " ".join(section.split())
            return said if said in flat else "Nothing relevant."
        return f"\\boxed{{{answer}}}"

    with FakeServer(reply=reply) as server:
        done = run_memagent(
            "ask", pages.name, question, *served(server.url, "--chunk-tokens", "4000"), "--json", cwd=pages.parent
        )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def highlighted(run: dict, pages: Path) -> dict[int, str]:
    """`traces export --format pdf` of the run: for each page with a highlight, the page's glyphs (as
    PDFium reads them, white space left out) whose middles the highlight covers."""
    marked = pages.parent / "marked.pdf"
    wrote = run_memagent("traces", "export", run["trace"], "--format", "pdf", "-o", marked, cwd=pages.parent)
    assert wrote.returncode == 0, wrote.stderr
    assert "(1 of 1 quotes highlighted)" in wrote.stderr
    covered: dict[int, str] = {}
    document = pdfium.PdfDocument(str(pages))
    for number, page in enumerate(pypdf.PdfReader(marked).pages, 1):
        annots = [a.get_object() for a in page.get("/Annots", [])]
        quads = [[float(v) for v in a["/QuadPoints"]] for a in annots if a["/Subtype"] == "/Highlight"]
        boxes = [q[k : k + 8] for q in quads for k in range(0, len(q), 8)]
        if not boxes:
            continue
        textpage = document[number - 1].get_textpage()
        text = textpage.get_text_range()
        glyphs = []
        for i, ch in enumerate(text):
            left, bottom, right, top = textpage.get_charbox(i)
            x, y = (left + right) / 2, (bottom + top) / 2
            if right > left and not ch.isspace() and any(b[0] <= x <= b[2] and b[5] <= y <= b[1] for b in boxes):
                glyphs.append(ch)
        covered[number] = "".join(glyphs)
    return covered


def test_a_quote_across_a_page_break_is_highlighted_on_both_pages(pages):
    """The sentence that page 1 ends and page 2 begins, with the running foot of page 1 and the head
    of page 2 between them in the file: one quote, located on pages 1–2, whose offsets slice `inspect
    --text`, highlighted over its words on page 1 and on page 2 and over no head or foot."""
    run = ask(
        pages,
        "What reads and digests the text in the .toc file in the last step?",
        "But in the last step the text in the .toc file is read and digested by TEX’s stomach.",
        "TEX’s stomach",
    )
    (quote,) = run["quotes"]
    assert ACROSS_PAGES in quote["text"]  # with the clauses around it that the quote finder keeps
    assert quote["location"] == f"{pages.name} pp. 1–2"
    text, _ = shown(pages)
    assert text[quote["start"] : quote["end"]] == quote["text"]
    first, second = quote["text"].split("\n\n")
    assert first.endswith("is read and digested") and second.startswith("by TEX’s stomach.")
    assert highlighted(run, pages) == {1: "".join(first.split()), 2: "".join(second.split())}


def test_a_quote_across_a_joined_word_is_highlighted_with_its_hyphen(pages):
    """ "dif-" + "ferences": memagent reads "differences", the page draws "dif-" at a line's end;
    the quote holds "differences" and its highlight covers both parts and the hyphen between."""
    run = ask(
        pages,
        "With which encoding are there differences?",
        "There are differences with WinAnsiEncoding.",
        "WinAnsiEncoding",
    )
    (quote,) = run["quotes"]
    assert quote["text"].endswith(ACROSS_HYPHEN)  # with the clause before it that the quote finder keeps
    assert quote["location"] == f"{pages.name} p. 1"
    text, _ = shown(pages)
    assert text[quote["start"] : quote["end"]] == quote["text"]
    covered = highlighted(run, pages)
    assert list(covered) == [1]
    # PDFium gives the line-end hyphen as U+FFFE, on the hyphen's glyph
    assert covered[1].replace("\ufffe", "-") == "".join(quote["text"].split()).replace("differences", "dif-ferences")


@pytest.mark.parametrize(
    "lines, whole",
    [
        # lines as pypdf gives them in TeX Live's manuals (docs/FORMATS.md measured the rule on them)
        ("One of the largest differences is in the com-\nmands used to write packages", "commands\nused"),
        ("designed to help you produce well-\nstructured classes; well-structured code", "well-structured\nclasses"),
        ("Chris Rowley. Addison-\nWesley, Reading", "Addison-Wesley,\nReading"),
        ("running an up-\nto-date system", "up-to-date\nsystem"),
        ("the quark is f-\nexpanded.", "f-expanded."),
        ("a soft hyphen: hyphen\u00ad\nation stays whole", "hyphenation\nstays"),
        ("LATEX’s encoding-\ndependent commands, see the dependent list and encoding", "encoding-dependent\ncommands"),
    ],
)
def test_which_hyphens_at_line_ends_are_kept(lines, whole):
    """The rule docs/FORMATS.md states, on lines from the measured manuals: the document's own words
    decide (a compound seen elsewhere keeps its hyphen, a word seen whole drops it), a compound that
    goes on, a capital after the hyphen and a part of one letter keep it, a soft hyphen never does,
    two parts of four letters that are each the document's words keep it."""
    from memagent_cli.ingest.pdftext import tidy

    (text,) = tidy([lines]).pages
    assert whole in text


def test_the_running_heads_left_out_are_named_once_in_the_record(pages, models):
    """`ask --json`'s record keeps the note (its `notes`), as stderr said it, once."""
    budgets = ["--chunk-tokens", "400", "--memory-tokens", "8", "--answer-tokens", "4", "--temperature", "0"]
    done = run_memagent("ask", pages.name, "What is this about?", "-m", models["random"], "--json", *budgets, cwd=pages.parent)
    assert done.returncode == 0, done.stderr
    notes = json.loads(done.stdout)["notes"]
    heads = [n for n in notes if "left out the running heads and feet of 3 of 3 pages" in n]
    assert len(heads) == 1 and heads[0].startswith(f"{pages.name}: ")
