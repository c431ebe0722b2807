"""A real TeX-made PDF's ligatures, end to end: a page of the hyperref bundle's EuroTeX'99 paper as
Debian's TeX Live documentation ships it (tests/data/samples/hyperref-paper-p8.pdf, pdfTeX; origin and
license in tests/data/README.md), whose text pypdf gives as "\\edef deﬁnes a macro" (U+FB01).

memagent writes the ligatures out where segments are made (ingest/reading.py), so `inspect --text`,
the model, InfMem's search and the quotes read "defines"; a quote's offsets index that text, and the
highlighted PDF still covers the quote's glyphs, though the text has more characters than the page has
glyphs. The model here is a fake OpenAI server on 127.0.0.1 (tests/fakeserver.py) that answers from
what the prompts hold, so what it is sent is what is checked; the PDF, its reading, the chunking, the
search, the trace store and the export are memagent's own, through the real process."""

from __future__ import annotations

import json
import re
import shutil

import pypdf
import pypdfium2 as pdfium
import pytest
from fakeserver import MEMORY_MARK, FakeServer
from helpers import REPO, run_memagent, shared_path

TEX_PAGE = REPO / "tests" / "data" / "samples" / "hyperref-paper-p8.pdf"
LIGATURE = re.compile("[\ufb00-\ufb06]")
VOCAB = shared_path("fixtures", "ggml-vocab-qwen2.gguf")
LOCAL = "All the following tasks, definitions and redefinitions are made in a group to keep\nthem local:"
FILLER = (
    "The harbour was quiet that morning. Gulls circled the old lighthouse. "
    "Fishermen mended their nets on the pier. The market opened late because of the rain. "
)


@pytest.fixture
def page(tmp_path):
    path = tmp_path / "hyperref-paper-p8.pdf"
    shutil.copy(TEX_PAGE, path)
    return path


def served(url: str, *more: str) -> list[str]:
    return ["--engine", "openai", "--base-url", url, "--tokenizer", str(VOCAB), *more]


def test_the_page_is_read_with_its_ligatures_written_out(page):
    raw = pypdf.PdfReader(page).pages[0].extract_text()
    assert "\\edef de\ufb01nes a macro" in raw and len(LIGATURE.findall(raw)) == 6  # the file still has them
    shown = run_memagent("inspect", page.name, "--text", cwd=page.parent)
    assert shown.returncode == 0, shown.stderr
    assert not LIGATURE.search(shown.stdout)
    assert "\\edef defines a macro with the expansion of the argument." in shown.stdout
    assert "\\@gobble the first backslash can be removed." in shown.stdout
    assert LOCAL in shown.stdout
    # nothing else changed: the page's text is pypdf's with each ligature in its letters, and its one
    # word hyphenated at a line's end whole (tests/test_pdf_reading.py)
    assert "But stom-\nach commands are" in raw
    assert shown.stdout.strip() == raw.replace("\ufb01", "fi").replace("stom-\nach commands", "stomach\ncommands").strip()


def test_the_model_reads_defines_and_the_quote_is_highlighted_on_its_glyphs(page, tmp_path):
    """MemAgent over the page: the section the model is sent says "definitions and redefinitions"
    (its memory copies the sentence only where it does), the quote's offsets slice `inspect --text`
    exactly, and `traces export --format pdf` puts the highlight over the quote's glyphs and no other:
    pypdf's text has "deﬁnitions" where the page draws one glyph, PDFium's has "fi" on that glyph's box."""
    sent: list[str] = []

    def reply(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        sent.append(prompt)
        if MEMORY_MARK in prompt[-40:]:
            section = prompt.rpartition("<section>")[2].partition("</section>")[0]
            found = re.search(r"All the following tasks, [^:]*", section)
            return " ".join(found.group().split()) + "." if found else "Nothing relevant."
        return "\\boxed{In a group, to keep the definitions and redefinitions local.}"

    with FakeServer(reply=reply) as server:
        done = run_memagent(
            "ask",
            page.name,
            "Where are the definitions and redefinitions made?",
            *served(server.url, "--chunk-tokens", "2000"),
            "--json",
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    assert "\\edef defines a macro" in sent[0] and not any(LIGATURE.search(p) for p in sent)
    out = json.loads(done.stdout)
    assert out["answer"] == "In a group, to keep the definitions and redefinitions local."
    (quote,) = out["quotes"]
    assert quote["text"] == LOCAL and quote["location"] == f"{page.name} p. 1"
    shown = run_memagent("inspect", page.name, "--text", cwd=tmp_path).stdout
    assert shown[quote["start"] : quote["end"]] == quote["text"]  # after three ligatures written out
    # three ligatures before it, each a character more, and "stom-\nach " made "stomach\n", two fewer:
    # pypdf's own text has it one character earlier
    assert pypdf.PdfReader(page).pages[0].extract_text().index(LOCAL[:20]) == quote["start"] - 3 + 2

    marked = tmp_path / "marked.pdf"
    wrote = run_memagent("traces", "export", out["trace"], "--format", "pdf", "-o", marked, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    assert "(1 of 1 quotes highlighted)" in wrote.stderr
    annots = [a.get_object() for a in pypdf.PdfReader(marked).pages[0]["/Annots"]]
    quads = [float(v) for v in next(a for a in annots if a["/Subtype"] == "/Highlight")["/QuadPoints"]]
    boxes = [quads[k : k + 8] for k in range(0, len(quads), 8)]

    textpage = pdfium.PdfDocument(str(page))[0].get_textpage()
    text = textpage.get_text_range()
    # PDFium's text: "\r\n" between the lines, the fi glyph as "f" and "i", each with the glyph's box
    first, last = text.index(LOCAL.split("\n")[0]), text.index("them local:") + len("them local:")
    assert textpage.get_charbox(first + LOCAL.index("fi")) == textpage.get_charbox(first + LOCAL.index("fi") + 1)
    for i in range(len(text)):
        left, bottom, right, top = textpage.get_charbox(i)
        if right <= left or text[i].isspace():
            continue
        x, y = (left + right) / 2, (bottom + top) / 2
        covered = any(q[0] <= x <= q[2] and q[5] <= y <= q[1] for q in boxes)
        assert covered == (first <= i < last), f"glyph {i} {text[i]!r}"


def test_an_infmem_search_for_defines_finds_the_page(page, tmp_path):
    """InfMem over a folder: three files of filler, then the TeX page. Step 1's search for "defines"
    (a word the page has only as "deﬁnes" in its PDF text) ranks the page's passage first, by its page,
    and the memory write is sent that passage with the word written out."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (folder / name).write_text(FILLER * 12, encoding="utf-8")
    shutil.copy(page, folder / "z-hyperref.pdf")  # last: a search that misses it ties and ranks it last
    writes: list[str] = []

    def reply(request: dict) -> str:
        head, _, stage_two = request["prompt"].rpartition("<|im_start|>assistant\n")
        if stage_two:
            return ""
        if "You are a Retrieval Planner." in head:
            if "\\edef" in head.rpartition("CURRENT MEMORY:\n")[2]:
                return "<think>\nDone.\n</think>\n\nSTOP"
            return '<think>\nSearch.\n</think>\n\n\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "defines"}'
        if "<recurrent_chunk>" in head:
            writes.append(head)
            seen = head.partition("<retrieved_chunk>")[2].partition("<memory>")[0]
            found = re.search(r"\\edef defines a macro[^.]*\.", seen)
            return "<think>\nWriting.\n</think>\n\n" + (" ".join(found.group().split()) if found else "Nothing yet.")
        return "<think>\nFrom memory.\n</think>\n\nTherefore, the answer is a macro with the expansion of the argument."

    with FakeServer(reply=reply) as server:
        done = run_memagent(
            "ask", "docs", "What does \\edef do?", *served(server.url, "--protocol", "infmem"), "--json", cwd=tmp_path
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    (search,) = out["steps"][0]["decision"]["searches"]
    assert search["query"] == "defines"
    best = search["units"][0]["location"]  # the page's first passage, after the end of c.txt
    assert re.fullmatch(r"docs/c\.txt chars [\d,]+–[\d,]+; docs/z-hyperref\.pdf p\. 1", best), best
    assert f"plan 1: search 'defines' found {best} | " in done.stderr
    assert "\\edef defines a macro with the expansion of the argument." in writes[0]
    assert out["steps"][0]["memory"] == "\\edef defines a macro with the expansion of the argument."
    assert out["answer"] == "a macro with the expansion of the argument"  # its final period dropped, as answers are
