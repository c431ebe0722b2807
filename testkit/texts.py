"""Paths to the test data, prose and the trained code-word model's documents: what the tests and
the benchmarks both read."""

from __future__ import annotations

import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The part of the project's ../shared folder (protocol notes, third-party fixtures) that tests read,
# kept in the repository so that a fresh clone runs every test: tests/data/shared/README.md says
# each file's origin and license.
SHARED = REPO / "tests" / "data" / "shared"
CODEWORD_MODEL = REPO / "tests" / "data" / "codeword.gguf"
CODEWORD_FACT = "The code word is amber falcon."
# `ask` on the code-word model with the section size it was trained on, and small budgets.
CODEWORD_ASK = ["-m", CODEWORD_MODEL, "--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "24"]


def words(n: int, seed: int = 0) -> str:
    """n words of plain prose in lines: a document for tests."""
    import random

    rng = random.Random(seed)
    vocab = "the river city banks flooded in spring while a quick brown fox ran over lazy dogs near old mills".split()
    lines, line = [], []
    for _ in range(n):
        line.append(rng.choice(vocab))
        if len(line) == 11:
            lines.append(" ".join(line) + ".")
            line = []
    lines.append(" ".join(line))
    return "\n".join(lines).strip()


def codeword_tokenizer():
    """The trained code-word model's tokenizer (tests/data/codeword.gguf): (encode, decode)."""
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    tok = load_tokenizer(read_gguf(REPO / "tests" / "data" / "codeword.gguf"))
    return tok.encode, lambda ids: decode(tok, ids)


_codeword_tokenizer = functools.lru_cache(maxsize=1)(codeword_tokenizer)  # loaded once for all the documents made


def whole_fact(n_tokens: int, seed: int = 0, where: float = 0.5):
    """A code-word document of about `n_tokens` with the fact at `where` (0 start .. 1 end), from the
    first seed from `seed` on whose fact no 64-token chunk cuts (the trained model then finds it)."""
    import random

    from testkit.codeword import cut_by_boundary, make_document

    encode, decode = _codeword_tokenizer()
    for s in range(seed, seed + 200):
        doc = make_document(random.Random(s), n_tokens, where=where)
        if not cut_by_boundary(doc, encode, decode, 64):
            return doc
    raise AssertionError("no seed gave a whole fact")  # pragma: no cover
