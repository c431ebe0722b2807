"""Streaming chunking against the reference's whole-text tokenization."""

import math
import random

import pytest

from memagent_cli.core import chunking
from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
from memagent_cli.core.readahead import ReadAhead
from memagent_cli.ingest.base import Place
from memagent_cli.ingest.sources import Segment, Source
from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.tokenizer import decode, load_tokenizer


@pytest.fixture(scope="module")
def tok(qwen2_vocab):
    return load_tokenizer(read_gguf(qwen2_vocab))


def prose(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    words = "alpha beta, gamma. delta: 42 épée 中文 (x) 'quoted' tab\there end! 7".split(" ")
    out = []
    for _ in range(lines):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))
        out.append(line + rng.choice(["", " ", ".", "  ", "!\n"]))
    return "\n".join(out)


def source(title: str, kind: str = "text") -> Source:
    return Source(path=title, title=title, kind=kind, size=None)


def reader(texts: dict[str, list[tuple[str, int | None]]]):
    """Reads sources from memory: each is a list of (text, page) segments."""

    def read(src: Source):
        offset = 0
        for text, page in texts[src.title]:
            yield Segment(source=0, text=text, offset=offset, place=Place("page", page) if page else Place())
            offset += len(text)

    return read


def run(tok, texts, chunk_tokens, block_chars=None, monkeypatch=None):
    if block_chars and monkeypatch:
        monkeypatch.setattr(chunking, "MIN_BLOCK_CHARS", block_chars)
    sources = [source(t) for t in texts]
    stats = IngestStats()
    chunks = list(iter_chunks(layout(sources, reader(texts)), tok, chunk_tokens, sources, stats))
    return chunks, stats, sources


@pytest.mark.parametrize("block_chars", [1, 97, 1000, 1 << 18])
def test_streamed_ids_equal_whole_text_ids(tok, monkeypatch, block_chars):
    text = prose(1, 600)
    segments = [(text[i : i + 333], None) for i in range(0, len(text), 333)]
    chunks, stats, _ = run(tok, {"a.txt": segments}, 100, block_chars, monkeypatch)
    whole = tok.encode(text.strip())
    assert stats.done and stats.document_tokens == len(whole)
    assert len(chunks) == math.ceil(len(whole) / 100)
    for k, chunk in enumerate(chunks):
        ids = whole[k * 100 : (k + 1) * 100]
        assert chunk.tokens == len(ids)
        assert chunk.text == decode(tok, ids)  # the reference's slice, decoded
    assert chunks[-1].end_token == len(whole)


def test_chunks_concatenate_back_to_the_document(tok):
    text = "\n\n  " + "plain words and 12 numbers\n" * 300 + " \n\t"
    chunks, _, _ = run(tok, {"a.txt": [(text[:1000], None), (text[1000:], None)]}, 37)
    assert "".join(c.text for c in chunks) == text.strip()  # stripped, like the reference
    assert all(c.tokens == 37 for c in chunks[:-1]) and 0 < chunks[-1].tokens <= 37


def test_several_sources_use_the_training_layout(tok):
    texts = {"notes/a.md": [("  first text \n", None)], "b.txt": [("second", None), (" text\n\n", None)]}
    chunks, stats, _ = run(tok, texts, 5000)
    assert len(chunks) == 1
    assert chunks[0].text == "Document 1:\nnotes/a.md\nfirst text\n\nDocument 2:\nb.txt\nsecond text"
    assert 0 < sum(stats.source_tokens) < stats.document_tokens  # headers count only in the document


def test_a_source_without_text_gets_no_header_and_the_rest_are_numbered_on(tok):
    """A file in a folder that is skipped (unreadable: its reader gives nothing) or holds only white
    space: no empty "Document N:" header for it reaches the model, and the documents after it are
    numbered as if it were not there."""
    texts = {"a.txt": [("first text", None)], "bad.docx": [], "blank.txt": [(" \n\t", None)], "c.txt": [("last text", None)]}
    chunks, stats, _ = run(tok, texts, 5000)
    assert [c.text for c in chunks] == ["Document 1:\na.txt\nfirst text\n\nDocument 2:\nc.txt\nlast text"]
    assert stats.source_tokens[1:3] == [0, 0] and [s.source for s in chunks[0].spans] == [0, 3]
    only, _, _ = run(tok, {"bad.docx": [], "c.txt": [("last text", None)]}, 5000)
    assert [c.text for c in only] == ["Document 1:\nc.txt\nlast text"]
    none, stats, _ = run(tok, {"bad.docx": [], "blank.txt": [("  ", None)]}, 5000)
    assert none == [] and stats.document_tokens == 0  # nothing to read: the run says so, not headers


def test_provenance_spans_map_back_to_pages_and_offsets(tok):
    pages = [(f"Page {p} says {'word ' * 50}".strip() + ("\n\n" if p < 6 else ""), p) for p in range(1, 7)]
    full = "".join(t for t, _ in pages)
    chunks, stats, sources = run(tok, {"r.pdf": pages}, 40)
    assert stats.source_pages == [6]
    first, last = chunks[0].spans[0], chunks[-1].spans[0]
    assert (first.first_page, last.last_page) == (1, 6)
    assert first.describe().startswith("r.pdf p")
    for chunk in chunks:
        (span,) = chunk.spans
        assert full[span.start : span.end] == chunk.text
    assert chunks[0].spans[0].start == 0 and chunks[-1].spans[0].end == len(full.strip())


def test_spans_name_their_unit_labels_parts_and_ocr(tok):
    def read(src: Source):
        parts = [
            ("intro text before any heading\n", Place()),
            ("sheet one rows " * 8, Place("sheet", 1, "Q3")),
            ("\n\nsheet two rows " * 8, Place("sheet", 2, "Q4")),
            ("\n\nthe body of the mail " * 8, Place(part=None)),
            ("\n\nscanned words " * 8, Place("page", 2, ocr=True, part="scan.pdf")),
        ]
        offset = 0
        for text, place in parts:
            yield Segment(0, text, offset, place)
            offset += len(text)

    sources = [source("mail.eml")]
    stats = IngestStats()
    (chunk,) = list(iter_chunks(layout(sources, read), tok, 5000, sources, stats))
    spans = [span.to_dict() for span in chunk.spans]
    assert [(s["path"], s["unit"], s["units"], s["labels"], s["ocr"]) for s in spans] == [
        ("mail.eml", "sheet", [1, 2], ["Q3", "Q4"], False),
        ("mail.eml/scan.pdf", "page", [2, 2], [None, None], True),
    ]
    assert spans[1]["pages"] == [2, 2] and spans[0]["pages"] is None
    assert chunk.describe() == 'mail.eml sheets "Q3"–"Q4"; mail.eml/scan.pdf p. 2 (OCR)'
    assert stats.source_units == ["sheet"] and stats.source_pages == [2]  # an attachment's pages are not the mail's
    record = stats.source_records(sources)[0]
    assert (record["unit"], record["units"], record["pages"]) == ("sheet", 2, None)


@pytest.mark.parametrize(
    "span, said",
    [
        ({"path": "r.pdf", "pages": [3, 5], "start": 0, "end": 9}, "r.pdf pp. 3–5"),  # a trace from before units
        ({"path": "r.pdf", "unit": "page", "units": [3, 3], "labels": [None, None], "ocr": True}, "r.pdf p. 3 (OCR)"),
        ({"path": "d.pptx", "unit": "slide", "units": [12, 12], "labels": ["Plan", "Plan"]}, "d.pptx slide 12"),
        ({"path": "d.pptx", "unit": "slide", "units": [12, 14], "labels": [None, None]}, "d.pptx slides 12–14"),
        ({"path": "x.xlsx", "unit": "sheet", "units": [2, 2], "labels": ["Q3", "Q3"]}, 'x.xlsx sheet "Q3"'),
        (
            {"path": "b.epub", "unit": "chapter", "units": [4, 4], "labels": ["The Storm", "The Storm"]},
            'b.epub ch. 4 "The Storm"',
        ),
        ({"path": "b.epub", "unit": "chapter", "units": [4, 6], "labels": ["A", "C"]}, "b.epub chs. 4–6"),
        ({"path": "p.html", "unit": "section", "units": [2, 2], "labels": ["Results", "Results"]}, 'p.html § "Results"'),
        ({"path": "p.html", "unit": "section", "units": [2, 3], "labels": ["A", "B"]}, 'p.html §§ "A"–"B"'),
        ({"path": "n.txt", "unit": None, "units": None, "start": 0, "end": 900}, "n.txt chars 0–900"),
    ],
)
def test_describe_span_says_each_unit_its_own_way(span, said):
    from memagent_cli.core.provenance import describe_span

    assert describe_span(span) == said


def test_split_character_is_replaced_like_the_reference(tok):
    text = "🦙" * 40
    chunks, _, _ = run(tok, {"a": [(text, None)]}, 3)
    whole = tok.encode(text)
    assert [c.text for c in chunks] == [decode(tok, whole[i : i + 3]) for i in range(0, len(whole), 3)]
    assert b"".join(tok.decode_bytes(whole[i : i + 3]) for i in range(0, len(whole), 3)) == text.encode()


def test_empty_input_gives_no_chunks(tok):
    chunks, stats, _ = run(tok, {"a": [("  \n\n ", None)]}, 10)
    assert chunks == [] and stats.document_tokens == 0 and stats.done


def test_read_ahead_hands_errors_to_the_consumer():
    def broken():
        yield 1
        raise ValueError("boom")

    got = []
    with pytest.raises(ValueError, match="boom"):
        for item in ReadAhead(broken()):
            got.append(item)
    assert got == [1]


def test_blocks_cut_only_between_a_letter_and_a_non_letter(monkeypatch):
    monkeypatch.setattr(chunking, "MIN_BLOCK_CHARS", 50)
    text = prose(2, 300)
    pieces = [chunking.Piece(text[i : i + 40], 0, None, i) for i in range(0, len(text), 40)]
    found = list(chunking.blocks(pieces))
    assert len(found) > 20
    assert "".join(p.text for block in found for p in block) == text
    for block in found[:-1]:
        joined = "".join(p.text for p in block)
        following = "".join(p.text for p in found[found.index(block) + 1])
        assert joined[-1].isalpha() and not following[0].isalpha()


def test_a_huge_run_with_no_word_boundary_is_cut_with_one_warning(tok, monkeypatch):
    monkeypatch.setattr(chunking, "MAX_BLOCK_CHARS", 50_000)
    text = "intro words\n" + "=" * 200_000 + "\nend"
    notes = []
    sources = [source("a")]
    chunks = list(
        iter_chunks(
            layout(sources, reader({"a": [(text[i : i + 10_000], None) for i in range(0, len(text), 10_000)]})),
            tok,
            1000,
            sources,
            IngestStats(),
            notes.append,
        )
    )
    assert len(notes) == 1 and "no word boundary" in notes[0]
    assert "".join(c.text for c in chunks) == text  # nothing lost, only ids near the cuts may differ
    whole = len(tok.encode(text))
    assert abs(sum(c.tokens for c in chunks) - whole) <= 5
