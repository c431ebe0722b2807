"""Quotes: the sentences an answer rests on, found in the text the evidence steps read (core/quotes.py).

The alignment is tested on chunks made by memagent's own reading and chunking, with Qwen2.5's real
vocabulary (tests/data/shared/fixtures), so every quote's offsets are checked against the text
`inspect --text` prints; end to end with the trained code-word model through the real process,
its trace store and `traces show`."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from helpers import REPO, run_memagent
from test_trained import RUN

from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
from memagent_cli.core.pipeline import SourceOptions, source_text
from memagent_cli.core.quotes import MAX_QUOTE_CHARS, describe_quote, find_quotes
from memagent_cli.ingest.reading import read_source
from memagent_cli.ingest.sources import collect_sources
from testkit.codeword import QUESTION, fact_sentence

VOCAB = REPO / "tests" / "data" / "shared" / "fixtures" / "qwen2.5-vocab-llamacpp.gguf"


@pytest.fixture(scope="module")
def tokenizer():
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    return load_tokenizer(read_gguf(VOCAB))


def read(tmp_path: Path, tokenizer, files: dict[str, str], chunk_tokens: int = 200):
    """The chunks memagent makes of `files` (written to tmp_path, read as one folder), and the
    records and first offsets find_quotes is given."""
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    found = collect_sources([str(tmp_path / name) for name in files], warn=lambda _: None)
    stats = IngestStats()
    pieces = layout(found, lambda s: read_source(s, warn=lambda _: None, index=found.index(s)))
    chunks = list(iter_chunks(pieces, tokenizer, chunk_tokens, found, stats))
    records = [{"path": s.path, "title": s.title} for s in found]
    return chunks, records, stats.source_starts, found


def own_text(source) -> str:
    return source_text(source, SourceOptions(), lambda _: None, "NFC")


SIGNED = "The 2019 amendment was signed by Alice Johnson, Chief Financial Officer, on 3 May 2019."
FILLER = (
    "The harbour was quiet that morning. Gulls circled the old lighthouse. "
    "Fishermen mended their nets on the pier. The market opened late because of the rain. "
)


def test_the_sentence_holding_the_answer_is_quoted_exactly_where_it_is(tmp_path, tokenizer):
    chunks, records, starts, found = read(
        tmp_path,
        tokenizer,
        {
            "a.txt": FILLER * 3,
            "b.txt": "\n\n"
            + FILLER
            + "The 2019 amendment was signed by Alice Johnson, Chief Financial Officer, on 3 May 2019. "
            + FILLER,
        },
        chunk_tokens=1000,
    )
    quotes = find_quotes("Alice Johnson", "Alice Johnson (CFO) signed the 2019 amendment on 3 May.", chunks, records, starts)
    assert quotes, "no quote"
    q = quotes[0]
    assert q.text == SIGNED
    assert q.source == 1 and q.path == str(tmp_path / "b.txt")
    assert own_text(found[1])[q.start : q.end] == q.text  # offsets into b.txt's own text, its blank lines stripped
    assert q.location == f"{found[1].title} chars {q.start:,}–{q.end:,}"
    assert any(q.text in c.text and c.index == q.step for c in chunks)


def test_a_paraphrasing_memory_gives_no_quote(tmp_path, tokenizer):
    """Nothing in the text holds the answer's words: no quote, never a made-up one."""
    chunks, records, starts, _ = read(tmp_path, tokenizer, {"a.txt": FILLER * 4})
    assert find_quotes("A northern trader", "Someone from up north brokered it.", chunks, records, starts) == []
    assert find_quotes("", "The harbour was quiet.", chunks, records, starts) == []


def test_an_answer_from_two_places_gets_a_quote_for_each(tmp_path, tokenizer):
    text = (
        FILLER
        + "The first office opened in Trondheim in 1990. "
        + FILLER * 2
        + "A second office opened in Stavanger in 1995. "
        + FILLER
    )
    chunks, records, starts, found = read(tmp_path, tokenizer, {"a.txt": text}, chunk_tokens=400)
    memory = "Offices: Trondheim (1990), Stavanger (1995)."
    quotes = find_quotes("Trondheim and Stavanger", memory, chunks, records, starts)
    texts = [q.text for q in quotes]
    assert "The first office opened in Trondheim in 1990." in texts
    assert "A second office opened in Stavanger in 1995." in texts
    assert len(quotes) <= 3
    for q in quotes:
        assert own_text(found[0])[q.start : q.end] == q.text


def test_a_long_sentence_is_cut_to_the_clauses_that_hold_the_answer(tmp_path, tokenizer):
    clauses = [f"the {w} committee met on the {k}th floor" for k, w in enumerate(["budget", "safety", "hiring", "travel"] * 4)]
    sentence = (
        "During the long review, " + ", ".join(clauses[:6]) + "; the final contract was awarded to Meridian Shipping Ltd"
        ", " + ", ".join(clauses[6:]) + "."
    )
    assert len(sentence) > 2 * MAX_QUOTE_CHARS
    chunks, records, starts, found = read(tmp_path, tokenizer, {"a.txt": FILLER + sentence + " " + FILLER}, chunk_tokens=400)
    quotes = find_quotes("Meridian Shipping Ltd", "The contract was awarded to Meridian Shipping Ltd.", chunks, records, starts)
    assert quotes
    q = quotes[0]
    assert len(q.text) <= MAX_QUOTE_CHARS and "awarded to Meridian Shipping Ltd" in q.text
    assert q.text in sentence and own_text(found[0])[q.start : q.end] == q.text


def test_document_headers_are_never_quoted(tmp_path, tokenizer):
    """Several sources are laid out under "Document 2:\\n<title>": a title holding the answer's words
    is layout text, not a sentence of the document."""
    chunks, records, starts, _ = read(tmp_path, tokenizer, {"falcon.txt": FILLER, "amber.txt": FILLER})
    assert find_quotes("amber falcon", "The code word is amber falcon.", chunks, records, starts) == []


def test_one_line_per_quote():
    quote = {"text": "The code word\nis  amber falcon.", "location": "report.pdf p. 3"}
    assert describe_quote(2, quote) == '[2] report.pdf p. 3: "The code word is amber falcon."'


def make_doc(path: Path, value: str, sentence_after: str) -> None:
    path.write_text(
        "The river waits near the long table. "
        + fact_sentence(value)
        + " "
        + sentence_after
        + " The choir runs past the open window.",
        encoding="utf-8",
    )


def test_the_trace_keeps_where_a_quote_is_and_shows_it_from_the_source(tmp_path, memagent_home):
    """End to end through the real process: `--json` and `--cite` give the quote; the trace store
    holds its place and not a word of the document beyond what the memory copied; `traces show`
    reads the text again, and says in one line when the file changed."""
    doc = tmp_path / "notes.txt"
    after = "The lighthouse follows an empty cart for many years."
    make_doc(doc, "amber falcon", after)
    done = run_memagent("ask", doc.name, QUESTION, *RUN, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == "amber falcon"
    (quote,) = out["quotes"]
    assert quote["text"] == fact_sentence("amber falcon") and quote["source"] == "notes.txt" and quote["step"] == 1
    assert doc.read_text(encoding="utf-8")[quote["start"] : quote["end"]] == quote["text"]

    cited = run_memagent("ask", doc.name, QUESTION, *RUN, "--cite", "--no-trace", cwd=tmp_path)
    assert cited.stdout.splitlines() == ["amber falcon", f'[1] {quote["location"]}: "{quote["text"]}"']

    db = memagent_home / "traces.db"
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT quotes FROM runs WHERE id = ?", (out["trace"],)).fetchone()
    place = {"source": 0, "start": quote["start"], "end": quote["end"], "step": 1, "location": quote["location"]}
    assert json.loads(stored) == [{**place, "form": "NFC", "pages": None}]
    for name in [db] + list(db.parent.glob("traces.db-*")):
        assert after.encode() not in Path(name).read_bytes()

    shown = run_memagent("traces", "show", out["trace"], cwd=tmp_path)
    assert shown.returncode == 0 and f'quote [1] {quote["location"]}: "{quote["text"]}"' in shown.stdout
    as_json = json.loads(run_memagent("traces", "show", out["trace"], "--json", cwd=tmp_path).stdout)
    assert as_json["quotes"] == [quote]

    page = run_memagent("traces", "export", out["trace"], "--format", "html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert f"<h3>[1] {quote['location']}</h3>" in page.stdout
    assert f"The river waits near the long table. <mark>{quote['text']}</mark> {after}" in page.stdout
    markdown = run_memagent("traces", "export", out["trace"], "--format", "markdown", cwd=tmp_path).stdout
    assert f"**[1] {quote['location']}**" in markdown and f"table. **{quote['text']}** The lighthouse" in markdown

    make_doc(doc, "amber falcon", "An edited sentence.")
    shown = run_memagent("traces", "show", out["trace"], cwd=tmp_path)
    assert shown.returncode == 0 and "quote [1]" not in shown.stdout
    assert shown.stderr.count("\n") == 1 and "notes.txt has changed since the run" in shown.stderr


def test_the_pdf_comes_back_with_the_quote_highlighted(tmp_path, memagent_home):
    """`traces export RUN --format pdf`: a real /Highlight annotation whose QuadPoints cover the
    quote's glyphs on its page, a note with the question and answer, and every page's text as it was;
    drawn by PDFium's renderer, the quote's line is yellow and the others are not."""
    import pypdf
    import pypdfium2 as pdfium
    from test_formats_trained import pdf_with_the_fact_on_page_three

    path, value = pdf_with_the_fact_on_page_three(tmp_path)
    done = run_memagent("ask", path.name, QUESTION, *RUN, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == value and out["quotes"][0]["location"] == "report.pdf p. 3"

    exported = tmp_path / "marked.pdf"
    wrote = run_memagent("traces", "export", out["trace"], "--format", "pdf", "-o", exported, cwd=tmp_path)
    assert wrote.returncode == 0, wrote.stderr
    assert "(1 of 1 quotes highlighted)" in wrote.stderr

    before, after = pypdf.PdfReader(path), pypdf.PdfReader(exported)
    assert [p.extract_text() for p in before.pages] == [p.extract_text() for p in after.pages]
    annots = {i + 1: [a.get_object() for a in (p.get("/Annots") or [])] for i, p in enumerate(after.pages)}
    assert all(not annots[n] for n in annots if n != 3)
    highlight = next(a for a in annots[3] if a["/Subtype"] == "/Highlight")
    note = next(a for a in annots[3] if a["/Subtype"] == "/Text")
    assert note["/Contents"].startswith(f"Question: {QUESTION}\nAnswer: {value}")
    quads = [float(v) for v in highlight["/QuadPoints"]]
    boxes = [quads[k : k + 8] for k in range(0, len(quads), 8)]

    document = pdfium.PdfDocument(str(path))
    textpage = document[2].get_textpage()
    text = textpage.get_text_range()
    first = text.index(fact_sentence(value))
    for i in range(first, first + len(fact_sentence(value))):
        left, bottom, right, top = textpage.get_charbox(i)
        if right <= left:
            continue
        x, y = (left + right) / 2, (bottom + top) / 2
        assert any(q[0] <= x <= q[2] and q[5] <= y <= q[1] for q in boxes), f"glyph {text[i]!r} not covered"

    page = pdfium.PdfDocument(str(exported))[2]
    scale = 2
    image = page.render(scale=scale, draw_annots=True).to_pil().convert("RGB")
    height = page.get_height()
    left, top, right, bottom = boxes[0][0], boxes[0][1], boxes[0][2], boxes[0][5]

    def yellow(x: float, y: float) -> bool:
        r, g, b = image.getpixel((int(x * scale), int((height - y) * scale)))
        return r > 200 and g > 180 and b < 140

    assert yellow(left + 2, (top + bottom) / 2) and yellow(right - 2, bottom + 1)
    assert not yellow(left + 2, top + 12)  # the line above

    refused = run_memagent("traces", "export", out["trace"], "--format", "pdf", cwd=tmp_path)
    assert refused.returncode == 2 and "-o OUT.pdf" in refused.stderr


def test_a_quote_on_a_scanned_page_is_highlighted_over_the_words_ocr_read(tmp_path, memagent_home):
    """A page with no text layer: the export reads it again with OCR, as the run did, and puts the
    highlight over the recognised words of the quote: every glyph of the fact's line (where the typed
    page the scan was made of has them) is covered, and no glyph of the lines around it."""
    pytest.importorskip("rapidocr")
    import pypdf
    import pypdfium2 as pdfium
    from test_formats_trained import scanned_pdf_with_the_fact

    path, value = scanned_pdf_with_the_fact(tmp_path)
    done = run_memagent("ask", path.name, QUESTION, *RUN, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == value and out["quotes"][0]["location"] == "scan.pdf p. 1 (OCR)"
    exported = tmp_path / "marked.pdf"
    wrote = run_memagent("traces", "export", out["trace"], "--format", "pdf", "-o", exported, cwd=tmp_path)
    assert wrote.returncode == 0 and "(1 of 1 quotes highlighted)" in wrote.stderr, wrote.stderr
    annots = [a.get_object() for a in pypdf.PdfReader(exported).pages[0]["/Annots"]]
    quads = [float(v) for v in next(a for a in annots if a["/Subtype"] == "/Highlight")["/QuadPoints"]]
    boxes = [quads[k : k + 8] for k in range(0, len(quads), 8)]

    def covered(x: float, y: float) -> bool:
        return any(q[0] <= x <= q[2] and q[5] <= y <= q[1] for q in boxes)

    textpage = pdfium.PdfDocument(str(tmp_path / "typed.pdf"))[0].get_textpage()
    text = textpage.get_text_range()
    first = text.index(fact_sentence(value))
    for i in range(len(text)):
        left, bottom, right, top = textpage.get_charbox(i)
        if right <= left or text[i].isspace():
            continue
        inside = first <= i < first + len(fact_sentence(value))
        assert covered((left + right) / 2, (bottom + top) / 2) == inside, f"glyph {i} {text[i]!r}"


def test_the_jobs_page_marks_each_runs_quote(tmp_path, memagent_home):
    """`ask --each --html`: each run's section has its quote, marked, under its location."""
    folder = tmp_path / "docs"
    folder.mkdir()
    make_doc(folder / "a.txt", "amber falcon", "The lighthouse follows an empty cart for many years.")
    make_doc(folder / "b.txt", "copper mantis", "A small boat leans against the ferry.")
    done = run_memagent("ask", "docs", "--each", "-q", QUESTION, *RUN, "--html", "page.html", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    for result in json.loads(done.stdout)["results"]:
        (quote,) = result["quotes"]
        assert f"<h4>[1] {quote['location']}</h4>" in page and f"<mark>{quote['text']}</mark>" in page


# --- ligatures: a TeX-made PDF (crazyones.pdf, xdvipdfmx) extracts as "misﬁts" and "diﬀerently" --------

CRAZY = REPO / "tests" / "data" / "shared" / "fixtures" / "real-pdfs" / "crazyones.pdf"
LIGATURE = re.compile("[\ufb00-\ufb06]")


def test_a_tex_pdf_is_read_with_its_ligatures_written_out(tmp_path, tokenizer):
    """What pypdf gives is "misﬁts" (U+FB01); what inspect --text, the model and the quotes see is
    "misfits", and a quote's offsets slice that text exactly."""
    import shutil

    import pypdf

    raw = "".join(p.extract_text() for p in pypdf.PdfReader(CRAZY).pages)
    assert "mis\ufb01ts" in raw and "di\ufb00erently" in raw  # the file still has them

    pdf = tmp_path / "crazyones.pdf"
    shutil.copy(CRAZY, pdf)
    shown = run_memagent("inspect", pdf, "--text", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "The misfits. The rebels." in shown.stdout and "differently" in shown.stdout
    assert not LIGATURE.search(shown.stdout)

    found = collect_sources([str(pdf)], warn=lambda _: None)
    stats = IngestStats()
    pieces = layout(found, lambda s: read_source(s, warn=lambda _: None, index=0))
    chunks = list(iter_chunks(pieces, tokenizer, 1000, found, stats))
    records = [{"path": s.path, "title": s.title} for s in found]
    quotes = find_quotes("the misfits and the rebels", "Here's to the misfits, the rebels.", chunks, records, stats.source_starts)
    assert quotes and "misfits" in quotes[0].text
    text = own_text(found[0])
    assert text[quotes[0].start : quotes[0].end] == quotes[0].text
    assert shown.stdout.strip().endswith(text.strip()[-40:])  # the text inspect prints is that text


def test_infmem_search_finds_a_word_a_ligature_held(tmp_path):
    """InfMem's BM25 search for "differently" finds the unit that pypdf gave as "diﬀerently"."""
    from memagent_cli.core.infmem import Search

    pdf_text = source_text(collect_sources([str(CRAZY)], warn=lambda _: None)[0], SourceOptions(), lambda _: None, "NFC")
    units = [FILLER * 4, pdf_text, "Gulls circled the lighthouse. " * 20]
    # the reference's BM25 splits on white space, so the word is as the page has it, period and all
    assert "differently." in pdf_text.split()
    assert Search(units).top("differently.", n=1) == [1]


def test_the_highlight_finds_the_glyphs_of_an_expanded_quote():
    """The quote says "misfits" where the page draws "mis", one ﬁ glyph, "ts" (PDFium gives that
    glyph as "f" and "i"): the highlight covers the quote's glyphs and no other glyph of the page."""
    import pypdfium2 as pdfium

    from memagent_cli.traces.pdfmarks import locate

    document = pdfium.PdfDocument(str(CRAZY))
    marked = locate(document, "The misfits. The rebels.", 1, 1)
    assert [m.page for m in marked] == [1] and marked[0].boxes
    textpage = document[0].get_textpage()
    page_text = textpage.get_text_range()
    start = page_text.index("The misfits. The rebels.")
    for i in range(len(page_text)):
        left, bottom, right, top = textpage.get_charbox(i)
        if right <= left or page_text[i].isspace():
            continue
        x, y = (left + right) / 2, (bottom + top) / 2
        covered = any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in marked[0].boxes)
        assert covered == (start <= i < start + len("The misfits. The rebels.")), f"glyph {i} {page_text[i]!r}"
