"""The model's normalizer: Qwen's tokenizer.json normalizes text to NFC before tokenizing, so
decomposed text (PDFs, macOS file names) must reach the model as the composed ids it was trained
on. Checked against the `tokenizers` library's own ids for the Qwen2.5 tokenizer.json."""

from __future__ import annotations

import unicodedata

import pytest
from helpers import run_memagent, shared_path

from memagent_cli.core import chunking
from memagent_cli.core.agent import check_question
from memagent_cli.core.chunking import IngestStats, Piece, iter_chunks, layout, normalized
from memagent_cli.core.config import AgentConfig
from memagent_cli.ingest.base import Place
from memagent_cli.ingest.sources import Segment, Source
from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.tokenizer import decode, encode_template, load_tokenizer, normal_form, normalizer

# Decomposed and otherwise non-NFC text: base letters with combining marks (one composes, "q" has no
# precomposed form), marks out of canonical order, singletons (Angstrom and Ohm signs), Hangul jamo,
# a composition exclusion that NFC lengthens (U+0958), a two-part Tamil vowel sign, and plain text.
DECOMPOSED = (
    "Cafe\u0301 cre\u0300me bru\u0302le\u0301e, q\u0301 and A\u030a vs \u212b, 5 \u2126. "
    "Vie\u0323\u0302t and Vie\u0302\u0323t; \u1112\u1161\u11ab\u1100\u1173\u11af \u1100\u1161 "
    "\u0958\u0915\u093c \u0b95\u0bc6\u0bbe na\u0308i\u0308ve Zu\u0308rich 東京 🦙 ok.\n"
)


@pytest.fixture(scope="module")
def tok(qwen2_vocab):
    return load_tokenizer(read_gguf(qwen2_vocab))


@pytest.fixture(scope="module")
def hf():
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(shared_path("fixtures", "hf", "qwen2.5", "tokenizer.json")))


def hf_ids(hf, text: str) -> list[int]:
    return hf.encode(text, add_special_tokens=False).ids


def test_the_fixture_really_normalizes_and_the_text_really_is_not_nfc(hf):
    assert hf.normalizer is not None and hf.normalizer.normalize_str("e\u0301") == "\u00e9"
    assert unicodedata.normalize("NFC", DECOMPOSED) != DECOMPOSED
    assert len(unicodedata.normalize("NFC", "\u0958")) == 2  # NFC can lengthen text: offsets must follow


def test_qwen_vocabularies_normalize_to_nfc_as_their_tokenizer_json_does(tok, hf, qwen2_vocab):
    assert normal_form(read_gguf(qwen2_vocab)) == "NFC"
    assert normal_form(read_gguf(shared_path("fixtures", "qwen2.5-vocab-llamacpp.gguf"))) == "NFC"
    assert normalizer(tok) is not None
    assert tok.encode(DECOMPOSED) == hf_ids(hf, DECOMPOSED) == tok.encode(unicodedata.normalize("NFC", DECOMPOSED))
    assert decode(tok, tok.encode(DECOMPOSED)) == unicodedata.normalize("NFC", DECOMPOSED) == hf.decode(hf_ids(hf, DECOMPOSED))


def test_a_vocabulary_that_does_not_normalize_leaves_text_as_it_is(tmp_path):
    from testkit.tinymodel import write_tiny_qwen2

    for pre in ("llama-bpe", "gpt-2"):  # tiktoken's path, and llama.cpp's fallback
        info = read_gguf(write_tiny_qwen2(tmp_path / f"{pre}.gguf", seed=3, pre=pre))
        other = load_tokenizer(info)
        assert normal_form(info) is None and normalizer(other) is None
        assert decode(other, other.encode(DECOMPOSED)) == DECOMPOSED
        src = [Source("a.txt", "a.txt", "text", None)]
        read = lambda s: segments(DECOMPOSED, 1)  # noqa: E731
        chunks = list(iter_chunks(layout(src, read), other, 5000, src))
        assert [c.text for c in chunks] == [DECOMPOSED.strip()]
        assert (chunks[0].spans[0].start, chunks[0].spans[0].end) == (0, len(DECOMPOSED.strip()))


def segments(text: str, size: int, pages: bool = False) -> list[Segment]:
    """The text in segments of `size` characters, cut anywhere (between a letter and its accent too)."""
    out = []
    for n, i in enumerate(range(0, len(text), size)):
        out.append(Segment(0, text[i : i + size], i, Place("page", n // 3 + 1) if pages else Place()))
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50, 10_000])
@pytest.mark.parametrize("pages", [False, True])
def test_decomposed_document_chunks_to_the_ids_of_hugging_faces_tokenizer(tok, hf, monkeypatch, size, pages):
    text = DECOMPOSED * 20
    monkeypatch.setattr(chunking, "MIN_BLOCK_CHARS", 40)  # many blocks, so cuts fall near accents
    src = [Source("doc.txt", "doc.txt", "text", None)]
    stats = IngestStats()
    chunk_tokens = 37
    chunks = list(iter_chunks(layout(src, lambda s: segments(text, size, pages)), tok, chunk_tokens, src, stats))

    nfc = unicodedata.normalize("NFC", text)
    ids = hf_ids(hf, text.strip())  # the reference: the whole (stripped) document, normalized by tokenizers
    expected = [ids[i : i + chunk_tokens] for i in range(0, len(ids), chunk_tokens)]
    assert [c.tokens for c in chunks] == [len(e) for e in expected]
    assert [c.text for c in chunks] == [tok.decode_bytes(e).decode("utf-8", errors="replace") for e in expected]
    assert stats.document_tokens == len(ids) == stats.source_tokens[0]
    # Provenance counts characters of the normalized text: consecutive, covering it all, and each
    # chunk that decodes whole is exactly its span of that text.
    spans = [c.spans[0] for c in chunks]
    assert all(len(c.spans) == 1 for c in chunks) or pages
    assert spans[0].start == 0 and spans[-1].end == len(nfc.rstrip())
    assert all(a.end == b.start for a, b in zip(spans, spans[1:]))
    whole = [c for c in chunks if "\ufffd" not in c.text and len(c.spans) == 1]
    assert whole and all(nfc[c.spans[0].start : c.spans[0].end] == c.text for c in whole)


def test_several_sources_and_a_decomposed_file_name(tok, hf):
    """macOS writes file names decomposed: the title in the header is normalized with the text."""
    titles = ["Cafe\u0301.txt", "notes.txt"]
    texts = {titles[0]: "Cre\u0300me bru\u0302le\u0301e.", titles[1]: "\u212bngstro\u0308m"}
    src = [Source(t, t, "text", None) for t in titles]
    chunks = list(iter_chunks(layout(src, lambda s: segments(texts[s.title], 1)), tok, 5000, src))
    reference = "Document 1:\nCafe\u0301.txt\nCre\u0300me bru\u0302le\u0301e.\n\nDocument 2:\nnotes.txt\n\u212bngstro\u0308m"
    assert chunks[0].text == unicodedata.normalize("NFC", reference) and chunks[0].tokens == len(hf_ids(hf, reference))
    assert [(s.source, s.start, s.end) for s in chunks[0].spans] == [(0, 0, 13), (1, 0, 8)]


def test_streamed_normalization_equals_the_whole_texts(tok):
    """Every cut of a tricky text into two pieces of one source, and into pages: the pieces' text is
    the NFC of the whole, each piece's offset points at its text in the normalized source."""
    text = "a\u0302\u0323e\u0301\u0301x\u1100\u1161\u11a8\u0958\u0bc6\u0bbe\u212b."
    nfc = unicodedata.normalize("NFC", text)
    for cut in range(len(text) + 1):
        for place in (Place(), Place("page", 2)):
            pieces = [Piece(text[:cut], 0, Place(), 0), Piece(text[cut:], 0, place, cut)]
            out = list(normalized(pieces, lambda t: unicodedata.normalize("NFC", t)))
            assert "".join(p.text for p in out) == nfc, cut
            assert all(nfc[p.offset : p.offset + len(p.text)] == p.text for p in out), cut


@pytest.mark.parametrize("seed", range(3))
def test_streamed_normalization_of_random_text_and_cuts(seed):
    import random

    rng = random.Random(seed)
    alphabet = list("ae q<=>.\n [PAD151646]") + list(DECOMPOSED) + ["\u0338", "\u0323", "\u0345", "\uac00", "\u11a8", "\u0f73"]
    normalize = lambda t: unicodedata.normalize("NFC", t)  # noqa: E731
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        cuts = sorted({0, len(text), *(rng.randint(0, len(text)) for _ in range(rng.randint(0, 6)))})
        pieces = [Piece(text[a:b], 0, Place("page", rng.choice([1, 2])), a) for a, b in zip(cuts, cuts[1:])]
        out = list(normalized(pieces, normalize))
        nfc = normalize(text)
        assert "".join(p.text for p in out) == nfc, ascii(text)
        assert all(nfc[p.offset : p.offset + len(p.text)] == p.text for p in out), ascii(text)


def test_the_question_and_the_prompt_are_normalized(tok, hf):
    assert check_question("  Que\u0301 dit A\u030a? ", tok, AgentConfig()) == "Qué dit Å?"
    user = "Que dit le cafe\u0301 de l'\u212bngstro\u0308m?"
    template = ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    prompt = encode_template(tok, [(template[0], True), (user, False), (template[1], True)])
    assert prompt == hf_ids(hf, template[0] + user + template[1])  # the reference tokenizes the rendered prompt


def test_inspect_shows_the_text_as_extracted_and_the_prompt_normalized(tmp_path, models):
    """`inspect --text` needs no model, so it prints the text as extracted; the prompt of a memory
    step (what the model reads) is normalized as the model's tokenizer normalizes it."""
    doc = tmp_path / "Cafe\u0301.txt"
    doc.write_text("Le cafe\u0301 du A\u030angstro\u0308m.\n" * 3, encoding="utf-8")
    shown = run_memagent("inspect", "--text", doc.name, cwd=tmp_path, env={"MEMAGENT_MODEL": ""})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == ("Le cafe\u0301 du A\u030angstro\u0308m.\n" * 3).strip()
    prompt = run_memagent("inspect", doc.name, "-m", models["random"], "--question", "Quoi?", "--show-prompt", "1", cwd=tmp_path)
    assert prompt.returncode == 0, prompt.stderr
    assert "<section>\n" + "\n".join(["Le caf\u00e9 du \u00c5ngstr\u00f6m."] * 3) + "\n</section>" in prompt.stdout
    assert unicodedata.is_normalized("NFC", prompt.stdout)


def test_inspect_text_with_a_model_prints_what_that_model_reads(tmp_path):
    """`inspect --text -m MODEL` is the text as that model's tokenizer normalizes it; without -m, as extracted."""
    from helpers import CODEWORD_MODEL

    doc = tmp_path / "cafe\u0301.txt"
    doc.write_text("Cafe\u0301 au lait, A\u030a.\n", encoding="utf-8")
    plain = run_memagent("inspect", doc, "--text")
    normal = run_memagent("inspect", doc, "--text", "-m", CODEWORD_MODEL)
    assert plain.returncode == 0 and normal.returncode == 0, plain.stderr + normal.stderr
    assert "Cafe\u0301 au lait" in plain.stdout
    assert normal.stdout == unicodedata.normalize("NFC", plain.stdout) != plain.stdout
