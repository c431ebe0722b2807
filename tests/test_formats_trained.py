"""Answers from every format: the trained code-word model (tests/data/codeword.gguf) finds a fact
that sits in a Word table, in a slide's speaker notes, in an EPUB chapter, in a web page's
article and on a scanned page, through the real `memagent ask` process.

Each document is built with its format's own writer. The fact must lie whole inside one 64-token
chunk of what memagent reads (the model was trained on 64-token sections), so each builder tries
seeds until `document_text` (the text `inspect --text` prints) has it whole; the check uses
memagent's own reading, so a reader that garbles the fact fails here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers import codeword_tokenizer, run_memagent
from test_trained import RUN

from memagent_cli.core.pipeline import SourceOptions, document_text
from testkit.codeword import QUESTION, fact_sentence, filler_sentence, random_value


@pytest.fixture(scope="module")
def tokenizer():
    return codeword_tokenizer()


def read_text(path: Path) -> str:
    return "".join(document_text([str(path)], SourceOptions(), lambda note: None))


def whole_in_a_chunk(text: str, value: str, tokenizer) -> bool:
    encode, decode = tokenizer
    ids = encode(text.strip())
    return any(fact_sentence(value) in decode(ids[k : k + 64]) for k in range(0, len(ids), 64))


def prose(rng: random.Random, n: int) -> str:
    return " ".join(filler_sentence(rng) for _ in range(n))


def build(tmp_path: Path, tokenizer, make) -> tuple[Path, str]:
    """`make(rng, value, path)` writes a document holding the fact; the first seed whose text as
    memagent reads it holds the fact whole in one chunk is kept."""
    for seed in range(40):
        rng = random.Random(seed)
        value = random_value(rng)
        path = make(rng, value)
        text = read_text(path)
        assert fact_sentence(value) in text, text  # the reader kept the fact, word for word
        if whole_in_a_chunk(text, value, tokenizer):
            return path, value
    raise AssertionError("no seed put the fact whole in one chunk")  # pragma: no cover


def answer(path: Path) -> dict:
    done = run_memagent("ask", path.name, QUESTION, *RUN, "--json", "--no-trace", cwd=path.parent)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    out["stderr"] = done.stderr
    return out


def first_quote(out: dict, path: Path, value: str, location: str) -> dict:
    """The run's first quote is the fact's sentence, at `location`, and its offsets point at it in
    the text `inspect --text` prints of that file."""
    quote = out["quotes"][0]
    assert fact_sentence(value) in quote["text"] and len(quote["text"]) <= 300, quote
    assert quote["location"] == location and quote["source"] == path.name, quote
    assert read_text(path)[quote["start"] : quote["end"]] == quote["text"]
    return quote


def evidence_places(out: dict) -> list[str]:
    from memagent_cli.core.provenance import describe_span

    return [describe_span(span) for item in out["evidence"] for span in item["spans"]]


def evidence_covers(out: dict, unit: str, number: int) -> bool:
    """Whether the evidence's spans cover unit `number` (slide 2, chapter 2) of the one source."""
    spans = [span for item in out["evidence"] for span in item["spans"]]
    return any(span["unit"] == unit and span["units"][0] <= number <= span["units"][1] for span in spans)


def test_a_fact_in_a_word_table(tmp_path, tokenizer):
    import docx

    def make(rng, value):
        document = docx.Document()
        document.add_heading("Harbour report", level=1)
        document.add_paragraph(prose(rng, 3))
        table = document.add_table(rows=3, cols=2)
        for row, (left, right) in zip(table.rows, [("Item", "Note"), ("Lamps", prose(rng, 1)), ("Code", fact_sentence(value))]):
            row.cells[0].text, row.cells[1].text = left, right
        document.add_paragraph(prose(rng, 3))
        path = tmp_path / "report.docx"
        document.save(path)
        return path

    path, value = build(tmp_path, tokenizer, make)
    out = answer(path)
    assert out["answer"] == value
    assert out["sources"][0]["kind"] == "docx"
    first_quote(out, path, value, 'report.docx § "Harbour report"')


def test_a_fact_in_a_slides_speaker_notes(tmp_path, tokenizer):
    from pptx import Presentation

    def make(rng, value):
        deck = Presentation()
        for k in range(3):
            slide = deck.slides.add_slide(deck.slide_layouts[1])
            slide.shapes.title.text = f"Part {k + 1}"
            slide.placeholders[1].text = prose(rng, 1)
            if k == 1:
                slide.notes_slide.notes_text_frame.text = fact_sentence(value)
        path = tmp_path / "deck.pptx"
        deck.save(path)
        return path

    path, value = build(tmp_path, tokenizer, make)
    out = answer(path)
    assert out["answer"] == value
    assert evidence_covers(out, "slide", 2)  # the notes are the second slide's
    first_quote(out, path, value, "deck.pptx slide 2")
    assert all(place.startswith("deck.pptx slide") for place in evidence_places(out))


def test_a_fact_in_an_epub_chapter(tmp_path, tokenizer):
    from ebooklib import epub

    def make(rng, value):
        book = epub.EpubBook()
        book.set_identifier("codeword-test")
        book.set_title("The Harbour")
        book.add_author("A. Writer")
        chapters = []
        for k in range(3):
            body = prose(rng, 2) + (" " + fact_sentence(value) if k == 1 else "") + " " + prose(rng, 1)
            chapter = epub.EpubHtml(title=f"Chapter {k + 1}", file_name=f"ch{k + 1}.xhtml", lang="en")
            chapter.content = f"<h1>Chapter {k + 1}</h1><p>{body}</p>"
            book.add_item(chapter)
            chapters.append(chapter)
        book.toc = chapters
        book.spine = chapters
        book.add_item(epub.EpubNcx())
        book.add_item(epub.EpubNav())
        path = tmp_path / "book.epub"
        epub.write_epub(str(path), book)
        return path

    path, value = build(tmp_path, tokenizer, make)
    out = answer(path)
    assert out["answer"] == value
    assert evidence_covers(out, "chapter", 2)
    first_quote(out, path, value, 'book.epub ch. 2 "Chapter 2"')
    assert all(place.startswith("book.epub ch") for place in evidence_places(out))


def test_a_fact_in_a_web_pages_article(tmp_path, tokenizer):
    def make(rng, value):
        nav = "".join(f'<li><a href="/p{k}">Menu entry {k}</a></li>' for k in range(40))
        article = "".join(f"<p>{prose(rng, 2)}</p>" for _ in range(3))
        page = (
            "<!doctype html><html><head><title>Harbour news</title><style>body{color:red}</style>"
            "<script>var tracking = 'code word is not here';</script></head><body>"
            f"<nav><ul>{nav}</ul></nav><main><article><h1>Harbour news</h1>{article}"
            f"<p>{prose(rng, 1)} {fact_sentence(value)} {prose(rng, 1)}</p></article></main>"
            "<footer>Copyright footer text, all rights reserved. Contact us. Privacy policy.</footer></body></html>"
        )
        path = tmp_path / "page.html"
        path.write_text(page, encoding="utf-8")
        return path

    path, value = build(tmp_path, tokenizer, make)
    text = read_text(path)
    assert "Menu entry" not in text and "tracking" not in text and "footer" not in text.lower()
    out = answer(path)
    assert out["answer"] == value
    assert first_quote(out, path, value, out["quotes"][0]["location"])["location"].startswith("page.html")


def scanned_pdf_with_the_fact(tmp_path: Path, tokenizer=None) -> tuple[Path, str]:
    """scan.pdf: one page that is only an image of three typed lines, the fact the second (rendered
    from typed.pdf, kept beside it: the image covers the page, so typed.pdf's glyph boxes are where
    the scan shows them); and the fact's value."""
    import pypdfium2 as pdfium
    from fpdf import FPDF

    def make(rng, value):
        lines = [filler_sentence(rng), fact_sentence(value), filler_sentence(rng)]
        typed = FPDF()
        typed.add_page()
        typed.set_font("Helvetica", size=14)
        for line in lines:
            typed.cell(0, 12, line, new_x="LMARGIN", new_y="NEXT")
        typed.output(str(tmp_path / "typed.pdf"))
        rendered = pdfium.PdfDocument(str(tmp_path / "typed.pdf"))[0].render(scale=200 / 72).to_pil()
        image = tmp_path / "page.png"
        rendered.convert("L").save(image)
        scan = FPDF()
        scan.add_page()
        scan.image(str(image), x=0, y=0, w=scan.w)
        path = tmp_path / "scan.pdf"
        scan.output(str(path))
        return path

    return build(tmp_path, tokenizer or codeword_tokenizer(), make)


def test_a_fact_on_a_scanned_page(tmp_path, tokenizer):
    """A page that is only an image (rendered here from a PDF's text, then the text thrown away)
    is read by OCR, and the fact it shows is found."""
    pytest.importorskip("rapidocr")
    path, value = scanned_pdf_with_the_fact(tmp_path, tokenizer)
    out = answer(path)
    assert out["answer"] == value
    assert evidence_places(out) and all(place == "scan.pdf p. 1 (OCR)" for place in evidence_places(out))
    assert out["sources"][0]["pages"] == 1
    assert "OCR scan.pdf: page 1 of 1" in out["stderr"]  # the progress line, piped
    first_quote(out, path, value, "scan.pdf p. 1 (OCR)")


def quote_chars(path: Path, value: str) -> str:
    """Where the fact's sentence is in a file of running text, as a location says it."""
    start = read_text(path).index(fact_sentence(value))
    return f"{start:,}–{start + len(fact_sentence(value)):,}"


def pdf_with_the_fact_on_page_three(tmp_path: Path, tokenizer=None) -> tuple[Path, str]:
    """A 5-page PDF, a sentence a line, the fact on page 3 whole in one 64-token chunk; and its value."""
    from fpdf import FPDF

    def make(rng, value):
        pdf = FPDF()
        pdf.set_font("Helvetica", size=10)
        for k in range(5):
            pdf.add_page()
            sentences = [filler_sentence(rng) for _ in range(4)]
            if k == 2:
                sentences.insert(2, fact_sentence(value))
            for sentence in sentences:  # a line each: a line broken inside the fact would hide it from this model
                pdf.cell(0, 6, sentence, new_x="LMARGIN", new_y="NEXT")
        path = tmp_path / "report.pdf"
        pdf.output(str(path))
        return path

    return build(tmp_path, tokenizer or codeword_tokenizer(), make)


def test_a_fact_on_page_three_of_a_pdf(tmp_path, tokenizer):
    """The quote is located on its page, not on the step's eight-page stretch."""
    path, value = pdf_with_the_fact_on_page_three(tmp_path, tokenizer)
    out = answer(path)
    assert out["answer"] == value
    first_quote(out, path, value, "report.pdf p. 3")


def test_a_fact_in_one_file_of_a_folder(tmp_path, tokenizer):
    """In a folder, a quote's source is the one file and its offsets count in that file's own text,
    not in the blocks the files are joined into ("Document 2:" and the rest)."""
    folder = tmp_path / "notes"
    folder.mkdir()

    def make(rng, value):
        (folder / "a.txt").write_text(prose(rng, 3), encoding="utf-8")
        (folder / "b.txt").write_text("\n\n" + prose(rng, 1) + " " + fact_sentence(value) + " " + prose(rng, 1), encoding="utf-8")
        return folder

    _, value = build(tmp_path, tokenizer, make)
    done = run_memagent("ask", "notes", QUESTION, *RUN, "--json", "--no-trace", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["answer"] == value
    b = folder / "b.txt"
    quote = out["quotes"][0]
    assert quote["source"] == str(Path("notes") / "b.txt") and fact_sentence(value) in quote["text"]
    assert read_text(b)[quote["start"] : quote["end"]] == quote["text"]
    assert quote["location"] == f"notes/b.txt chars {quote['start']:,}–{quote['end']:,}"
