"""The code-word task in InfMem's format: what the trained stand-in (tests/data/infmem.gguf) writes,
and documents for the tests that run it.

The task is tests/codeword.py's ("What is the code word?" over filler prose holding at most one
"The code word is amber falcon."); the protocol is memagent's `infmem`. Every reply opens its
reasoning itself (Qwen3's template adds nothing after the assistant header), closes it, then:

- the planner, while its memory holds no code word, searches the whole document for it

      <think>
      The memory has no code word.
      </think>

      ✿FUNCTION✿: retrievesearch
      ✿ARGS✿: {"query": "code word", "top_k": 4}

  and once it holds one says STOP ("The memory has the code word." then "STOP"): three STOPs in a
  row end the reading (the default --early-stop 3);
- a memory write says where it saw the fact ("A retrieved chunk has the code word." when one of
  the passages the search found holds the fact sentence whole, "The recurrent chunk has the code
  word." when only the chunk does, "The memory has the code word." when the memory already held
  it, "Nothing new here." otherwise), then the memory: the fact sentence, or "Nothing found yet.";
- the final answer says whether the memory holds the fact, then "Therefore, the answer is amber
  falcon." ("unknown" without it), the form InfMem's answer is read from.

So a document whose fact lies in a late chunk is answered after three steps: step 1's search finds
the fact's passage ahead of the chunk being read and the write copies it; steps 2 and 3 say STOP
and keep it; step 4's STOP ends the reading. Without a fact every step searches and the whole
document is read. The training script (tests/data/train_infmem.py) builds its replies from here;
the tests check the runs against the same strings.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

from testkit import codeword

MODEL = Path(__file__).resolve().parents[1] / "tests" / "data" / "infmem.gguf"
CHUNK_TOKENS = 128  # the section length it was trained on: run it with --chunk-tokens 128
UNIT_TOKENS = 500  # InfMem's retrieval units (memagent_cli/core/infmem.py UNIT_TOKENS), in this model's tokens

THINK, END_THINK = "<think>", "</think>"  # single tokens, added to the vocabulary as Qwen3 adds them
QUERY, TOP_K = "code word", 4
SEARCH_CALL = f'\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {{"query": "{QUERY}", "top_k": {TOP_K}}}'
HAS, HAS_NOT = "The memory has the code word.", "The memory has no code word."
IN_RETRIEVED, IN_CHUNK = "A retrieved chunk has the code word.", "The recurrent chunk has the code word."
NOTHING = "Nothing new here."
NOT_YET = "Nothing found yet."  # the memory before the fact: shares no words with the fact sentence


def reply(thinking: str, text: str) -> str:
    """A whole reply: the reasoning the model opens and closes itself, then what it says."""
    return f"{THINK}\n{thinking}\n{END_THINK}\n\n{text}"


def has_fact(memory: str) -> bool:
    return memory.startswith("The code word is ")


def planner_reply(memory: str) -> str:
    """The planner's reply to a memory: STOP once it holds the fact, a search for it until then."""
    return reply(HAS, "STOP") if has_fact(memory) else reply(HAS_NOT, SEARCH_CALL)


def write_reply(memory: str, retrieved: str, chunk: str, value: str | None) -> tuple[str, str]:
    """(the reply to a memory write, the kind of write it is). `value` is the document's fact."""
    fact = codeword.fact_sentence(value) if value is not None else None
    if has_fact(memory):
        return reply(HAS, memory), "write-keep"
    if fact is not None and fact in retrieved:
        return reply(IN_RETRIEVED, fact), "write-retrieved"
    if fact is not None and fact in chunk:
        return reply(IN_CHUNK, fact), "write-chunk"
    return reply(NOTHING, NOT_YET), "write-nothing"


def final_reply(value: str | None) -> str:
    answer = value if value is not None else codeword.NO_ANSWER
    return reply(HAS if value is not None else HAS_NOT, f"Therefore, the answer is {answer}.")


def memory_after(value: str | None) -> str:
    """The memory once the fact with `value` was read (None: not yet)."""
    return codeword.fact_sentence(value) if value is not None else NOT_YET


@functools.lru_cache(maxsize=1)
def tokenizer():
    """The trained model's tokenizer, as memagent loads it: (encode, decode)."""
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    tok = load_tokenizer(read_gguf(MODEL))
    return tok.encode, lambda ids: decode(tok, ids)


def pieces(text: str, size: int, encode, decode) -> list[str]:
    """A single text file's ids (memagent reads it stripped) cut every `size` tokens, each decoded:
    its chunks (size CHUNK_TOKENS) or its retrieval units (UNIT_TOKENS)."""
    ids = encode(text.strip())
    return [decode(ids[k : k + size]) for k in range(0, len(ids), size)]


def fact_unit(doc: codeword.Document, encode, decode) -> int | None:
    """The retrieval unit that holds the fact sentence whole (None: none does)."""
    if doc.value is None:
        return None
    fact = codeword.fact_sentence(doc.value)
    return next((k for k, unit in enumerate(pieces(doc.text, UNIT_TOKENS, encode, decode)) if fact in unit), None)


def whole_fact(n_tokens: int, seed: int = 0, where: float = 0.5) -> codeword.Document:
    """A code-word document of about `n_tokens` with the fact at `where` (0 start .. 1 end), from the
    first seed from `seed` on whose fact neither a chunk of CHUNK_TOKENS nor a retrieval unit cuts."""
    encode, decode = tokenizer()
    for s in range(seed, seed + 200):
        doc = codeword.make_document(random.Random(s), n_tokens, where=where)
        whole = not codeword.cut_by_boundary(doc, encode, decode, CHUNK_TOKENS)
        if whole and fact_unit(doc, encode, decode) is not None:
            return doc
    raise AssertionError("no seed gave a whole fact")  # pragma: no cover
