"""The code-word task in QwenLong-L1.5's format: what the trained stand-in (tests/data/qwenlong.gguf)
writes, and documents for the tests that run it.

The task is testkit/codeword.py's ("What is the code word?" over filler prose holding at most one
"The code word is amber falcon."); the protocol is memagent's `qwenlong`. Every reply is a short
reasoning, "\\n</think>\\n\\n" (the chat template's generation prompt opened the reasoning with
"<think>\\n"), then for a memory update the memory and the plan:

    The section has the code word.
    </think>

    <memory>
    The code word is amber falcon.
    </memory>
    <plan>
    Keep the code word.
    </plan>

("Nothing new here." when the section holds no whole fact, the memory and plan then as they were;
"Nothing found yet." and "Look for the code word." before the fact), and for the final prompt the
answer: `amber falcon`, or `unknown` with no fact in memory, in capitals when the question's
instruction line (q_inst) says "Answer in capital letters.".

The training script (tests/data/train_qwenlong.py) builds its replies from here; the tests check
answers and memories against the same strings.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

from testkit import codeword

MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "qwenlong.gguf"
CHUNK_TOKENS = 128  # the section length it was trained on: run it with --chunk-tokens 128

THINK_END = "\n</think>\n\n"
FOUND, NOTHING = "The section has the code word.", "Nothing new here."
NOT_YET = "Nothing found yet."  # shares no words with the fact sentence: nothing to confuse
LOOK, KEEP = "Look for the code word.", "Keep the code word."
HAS, HAS_NOT = "The memory has the code word.", "The memory has no code word."
CAPITALS, LOWER_CASE = "Answer in capital letters.", "Answer in lower case."
# The instruction lines (q_inst) the final prompt may carry, and what each does to the answer.
INSTRUCTIONS = {"": str, CAPITALS: str.upper, LOWER_CASE: str}


def memory_block(memory: str, plan: str) -> str:
    """A memory with its plan, as a memory update writes them (and memagent keeps them)."""
    return f"<memory>\n{memory}\n</memory>\n<plan>\n{plan}\n</plan>"


def memory_after(value: str | None) -> str:
    """The memory and plan once the fact with `value` was read (None: not yet)."""
    return memory_block(codeword.fact_sentence(value), KEEP) if value else memory_block(NOT_YET, LOOK)


def memory_reply(memory: str, found: bool) -> str:
    """The reply to a memory update: `memory` is the fact sentence or NOT_YET."""
    plan = KEEP if memory != NOT_YET else LOOK
    return (FOUND if found else NOTHING) + THINK_END + memory_block(memory, plan)


def final_reply(value: str | None, instruction: str = "") -> str:
    return (HAS if value is not None else HAS_NOT) + THINK_END + answer(value, instruction)


def answer(value: str | None, instruction: str = "") -> str:
    """The answer the final reply gives (after its reasoning)."""
    return INSTRUCTIONS[instruction](value if value is not None else codeword.NO_ANSWER)


def question(instruction: str = "") -> str:
    """The final prompt's question: q_core, then q_inst on its own line (memagent's choice)."""
    return codeword.QUESTION + ("\n" + instruction if instruction else "")


@functools.lru_cache(maxsize=1)
def tokenizer():
    """The trained model's tokenizer, as memagent loads it: (encode, decode)."""
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    tok = load_tokenizer(read_gguf(MODEL))
    return tok.encode, lambda ids: decode(tok, ids)


def whole_fact(n_tokens: int, seed: int = 0, where: float = 0.5) -> codeword.Document:
    """A code-word document of about `n_tokens` with the fact at `where` (0 start .. 1 end), from the
    first seed from `seed` on whose fact no chunk of CHUNK_TOKENS cuts (the model then finds it)."""
    encode, decode = tokenizer()
    for s in range(seed, seed + 200):
        doc = codeword.make_document(random.Random(s), n_tokens, where=where)
        if not codeword.cut_by_boundary(doc, encode, decode, CHUNK_TOKENS):
            return doc
    raise AssertionError("no seed gave a whole fact")  # pragma: no cover
