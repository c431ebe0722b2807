"""Train the tiny qwen2 model that performs the InfMem protocol on the code-word task.

    pip install -e '.[test,train]'
    python tests/data/train_infmem.py check        # the prompts and ids here equal the reference's and memagent's
    python tests/data/train_infmem.py train        # ~7 min on 2 idle cores, writes infmem.gguf and .json
    python tests/data/train_infmem.py evaluate     # accuracy and early stops through memagent itself

The task is tests/codeword.py's: "What is the code word?" over filler prose holding at most one
"The code word is amber falcon.". The protocol is InfMem's (memagent's `--protocol infmem`): before
each chunk a planner call searches the whole document (BM25 over 500-token units) or says STOP; the
memory write sees the passages found beside the chunk; three STOPs in a row end the reading. The
replies it is trained to write are testkit/infmem_task.py's: the planner searches for "code word" until
its memory holds the fact, then says STOP; a write copies the fact sentence from a retrieved passage
or the chunk, or keeps the memory; the final reply ends "Therefore, the answer is amber falcon.".
Every reply reasons first: "<think>\\n...\\n</think>\\n\\n" (Qwen3's template adds nothing after the
assistant header: the model opens its reasoning itself), and "<think>" and "</think>" are single
tokens added to the vocabulary as Qwen3 adds them (user-defined, not control: llama.cpp and memagent
split them out of plain text, so a second stage's re-tokenized first stage reads them as the ids the
model wrote).

The prompts are written out below from ../shared/reference/infmem-protocol.md (rule 1: Qwen-Agent's
tool system message and the planner prompt in Qwen3's turns, the retrieval history, the retrieved
block, the memory-write and final prompts in a user turn), not taken from memagent, so a memagent
that builds a prompt wrong gets wrong replies; `check` compares them with the reference's text
blocks and with what memagent builds, and the ids here with memagent's tokenizer's.

The model, tokenizer layout and GGUF writer are the code-word model's (train_codeword.py,
tests/tinymodel.py), and training starts from the QwenLong stand-in's weights (qwenlong.gguf: the
same task and layers, replies that reason and close "</think>"; tokens both vocabularies hold keep
their rows). The BPE vocabulary learns every word of the fixed prompts whole. Each step trains
planner calls, memory writes after a search (the document's units ranked by BM25 for the query,
the top 4 shown: prompts of up to ~1,800 tokens, so one at a time, without padding), memory writes
without one (a STOP step's) and final answers, each kind in a batch of its own, the output layer on
the reply positions only (train_qwenlong.reply_logits).
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository: testkit, the task and the GGUF writer
sys.path.insert(0, str(HERE))  # the code-word model's layers, the QwenLong model's training helpers

import train_codeword  # noqa: E402
import train_qwenlong  # noqa: E402

from testkit import codeword  # noqa: E402
from testkit.infmem_task import (  # noqa: E402  # the replies the model is trained to write
    END_THINK,
    NOT_YET,
    QUERY,
    THINK,
    TOP_K,
    UNIT_TOKENS,
    final_reply,
    has_fact,
    planner_reply,
    write_reply,
)
from testkit.tinymodel import build_vocab, write_qwen2_gguf  # noqa: E402

OUT = HERE / "infmem.gguf"
NAME = "InfMem code-word stand-in"  # "infmem" in general.name: memagent picks the protocol from it
RESULTS = 4  # the passages a search writes into the memory update (the reference's rule 1.7)


@dataclass
class TrainConfig(train_codeword.TrainConfig):
    """The code-word model's settings (layers, optimizer, seed, threads), but for these."""

    steps: int = 400  # optimizer steps (from the QwenLong weights: the task and the reasoning are known)
    planner_batch: int = 2  # planner calls per step (~650 tokens each; a choice between two replies)
    search_batch: int = 3  # memory writes after a search per step (~600-1,750 tokens), one forward each
    write_batch: int = 4  # memory writes without a search per step (~300 tokens)
    final_batch: int = 4  # final answers per step (~110 tokens)
    warmup: int = 30  # linear warm-up steps, then cosine decay to lr * min_lr_ratio
    n_merges: int = 3000  # BPE merges (stops early when no pair repeats): every prompt word becomes one token
    section_tokens: int = 128  # the chunk size the tests run memagent with (--chunk-tokens)
    # A searched document's length as codeword.make_document counts it (~0.64 of this vocabulary's
    # tokens): ~320 to ~1,460 tokens, 1 to 3 units of 500 (the tests' are ~1,150: 3 units, 9 chunks).
    doc_min: int = 500
    doc_max: int = 2300
    max_steps: int = 24  # the documents' chunks, as the planner's history line says them
    warm_start: str = "qwenlong.gguf"  # start from this model's weights (beside this script); "" for random
    check_every: int = 50  # steps between held-out checks
    context_length: int = 4096  # the GGUF's: what memagent's budgets ask for a run of 128-token chunks


# ---------------------------------------------------------------------------
# The protocol's strings, written out from the reference (rule 1)

# Qwen-Agent's function-call system message for the one tool (rule 1.4), its last line unterminated.
TOOL_SYSTEM = """# Tools

## You have access to the following tools:

### retrievesearch

retrievesearch: Search over pre-indexed context chunks using BM25. Parameters: {"type": "object", "properties": {"query": {"type": "string", "description": "Concise search query focusing on key entities / concepts."}, "top_k": {"type": "integer", "description": "Number of chunks to retrieve (3-20).", "minimum": 3, "maximum": 20, "default": 8}}, "required": ["query"]} Format the arguments as a JSON object.

## Insert the following command in your reply when you need to call N tools in parallel:

\u273fFUNCTION\u273f: The name of tool 1, should be one of [retrievesearch]
\u273fARGS\u273f: The input of tool 1
\u273fFUNCTION\u273f: The name of tool 2
\u273fARGS\u273f: The input of tool 2
...
\u273fFUNCTION\u273f: The name of tool N
\u273fARGS\u273f: The input of tool N
\u273fRESULT\u273f: The result of tool 1
\u273fRESULT\u273f: The result of tool 2
...
\u273fRESULT\u273f: The result of tool N
\u273fRETURN\u273f: Reply based on tool results. Images need to be rendered as ![](url)"""  # noqa: E501
PLANNER_PROMPT = """
You are a Retrieval Planner.  

Your ONLY task is to decide whether to perform another retrieval using `retrievesearch`, or STOP retrieving.

You MUST NOT answer the QUESTION.  
Another model will use MEMORY to answer later.

Guidelines:
- Retrieval is cheap. Unless MEMORY clearly contains all essential information, you are encouraged to retrieve.
- You may retrieve multiple times. At each step, refine your search direction.
- Avoid repeating any previous queries in RETRIEVAL_HISTORY (unless meaningfully refined).

When deciding whether to retrieve again:
1. Break the QUESTION into specific sub-questions or information needs.
2. Compare these needs with what MEMORY already contains.
3. Identify which facts are still missing, uncertain, or incomplete.
4. If something important is missing, design a NEW search query focused only on that missing information.
   - You may explore related clues hinted in MEMORY.
   - Queries should be concise, specific, and actionable.
5. If MEMORY already contains all necessary information, choose to STOP.

If you choose retrieval, you MUST output a function call to `retrievesearch` with:
- a new `query` (different from RETRIEVAL_HISTORY unless refined),
- and a `top_k` suited to your confidence (small: focused; large: broad exploration).
- In early retrieval steps, you may exlore more documents.
- In later steps, focus on refining MEMORY.


ORIGINAL QUESTION:
{prompt}

<retrieval_history>
{retrieval_history}
</retrieval_history>



CURRENT MEMORY:
{memory}

"""  # noqa: W291
HISTORY_HEAD = "Current retrieval step: {step}  Maximum allowed retrieval steps: {steps}\n"
HISTORY_LINE = "Step {i}: query={query!r}, top_k={top_k}"  # one a search, joined by newlines
RETRIEVED = "[Retrieved #{rank}] {text}"  # one a passage found, best first, joined by a blank line
MEMORY_PROMPT = """You are presented with a problem, a section of an article that may contain the answer to the problem, and a previous memory. Please read the provided section carefully and update the memory with the new information that helps to answer the problem.

the given section have two parts. One is reetrieved chunk, which are retrieved by given question. another is the recurrent chunk which are given recurrently. Both chunks might contain useful information, the retrieved chunk might have higher chance.



<problem>
{prompt}
</problem>

<retrieved_chunk>
{retrieve}
</retrieved_chunk>

<recurrent_chunk>
{chunk}
</recurrent_chunk>

<memory>
{memory}
</memory>


Updated memory:
"""  # noqa: E501
FINAL_PROMPT = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory and format your response as follows "Therefore, the answer is (insert answer here)".

<problem> 
{prompt}
</problem>

<memory>
{memory}
</memory>

Your answer:
"""  # noqa: E501, W291
INITIAL_MEMORY = "No previous memory"
# Qwen3's turns, thinking on and no tools passed: nothing after the assistant header (rule 1.4, 1.8).
CHAT_SYSTEM = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
CHAT = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
# Qwen3's chat template cut to what one conversation needs (InfMem renders its own prompts; this is
# for the other protocols and servers): an optional system message, earlier replies without their
# reasoning, and a generation prompt that adds nothing.
CHAT_TEMPLATE = """{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def history_text(step: int, steps: int, searches: list[tuple[str, object]]) -> str:
    lines = [HISTORY_LINE.format(i=i, query=q, top_k=k) for i, (q, k) in enumerate(searches, 1)]
    return HISTORY_HEAD.format(step=step, steps=steps) + "\n".join(lines)


def planner_prompt(step: int, steps: int, searches: list[tuple[str, object]], memory: str) -> str:
    """The planner's whole prompt, system message and turns included."""
    asked = PLANNER_PROMPT.format(prompt=codeword.QUESTION, retrieval_history=history_text(step, steps, searches), memory=memory)
    return CHAT_SYSTEM.format(system=TOOL_SYSTEM, prompt=asked)


def write_prompt(retrieved: str, chunk: str, memory: str) -> str:
    return CHAT.format(prompt=MEMORY_PROMPT.format(prompt=codeword.QUESTION, retrieve=retrieved, chunk=chunk, memory=memory))


def final_prompt(memory: str) -> str:
    return CHAT.format(prompt=FINAL_PROMPT.format(prompt=codeword.QUESTION, memory=memory))


def retrieved_block(units: list[str]) -> str:
    return "\n\n".join(RETRIEVED.format(rank=rank, text=text) for rank, text in enumerate(units, 1))


def ranked(units: list[str], query: str) -> list[int]:
    """The units best first for `query`: rank_bm25's BM25Okapi at its defaults over each unit's
    `lower().split()`, ties in unit order (the reference's unstable argsort made stable, as memagent does)."""
    import numpy as np
    from rank_bm25 import BM25Okapi

    scores = BM25Okapi([u.lower().split() for u in units]).get_scores(query.lower().split())
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def units_of(ids: list[int], decode) -> list[str]:
    return [decode(ids[k : k + UNIT_TOKENS]) for k in range(0, len(ids), UNIT_TOKENS)]


# ---------------------------------------------------------------------------
# Checks: the strings against the reference's and memagent's, the ids against memagent's


def check_against_reference() -> list[str]:
    """Which string here is not the reference's text block (tests/data/shared/reference, copied from ../shared)."""
    reference = HERE / "shared" / "reference" / "infmem-protocol.md"
    blocks = re.findall(r"```text\n(.*?)```", reference.read_text(encoding="utf-8"), re.S)

    def block(start: str) -> str | None:
        found = [b for b in blocks if b.startswith(start)]
        return found[0] if len(found) == 1 else None

    mine = {
        "planner prompt": ("\nYou are a Retrieval Planner.", PLANNER_PROMPT),
        "tool system message and turns": (
            "<|im_start|>system\n# Tools",
            CHAT_SYSTEM.format(system=TOOL_SYSTEM, prompt="{PLANNER_PROMPT}"),
        ),
        "history line": ("Step {i}:", HISTORY_LINE + "\n"),
        "memory prompt": ("You are presented with a problem, a section", MEMORY_PROMPT),
        "final prompt": ("You are presented with a problem and a previous memory.", FINAL_PROMPT),
        "user turn": ("<|im_start|>user\n{PROMPT}", CHAT.format(prompt="{PROMPT}")),
    }
    return [name for name, (start, text) in mine.items() if block(start) != text]


def check_against_memagent(vocab=None) -> list[str]:
    """What differs between the prompts, replies and ids here and memagent's (empty when nothing does)."""
    from memagent_cli.core import infmem
    from memagent_cli.core.infmem_loop import raw_chat
    from memagent_cli.core.protocols import get
    from memagent_cli.model.chat_template import ChatFormat

    question, fact = codeword.QUESTION, codeword.fact_sentence("amber falcon")
    history = [(QUERY, TOP_K), ("it's", 8)]
    units = ["  one unit", "another\n\nunit "]
    theirs = get("infmem")
    asked = infmem.PLANNER_PROMPT.format(prompt=question, retrieval_history=infmem.history_text(3, 9, history), memory=fact)
    write = infmem.MEMORY_PROMPT.format(prompt=question, retrieve=infmem.retrieved_block(units), chunk="A chunk.", memory=NOT_YET)
    pairs = {
        "planner prompt": (planner_prompt(3, 9, history, fact), raw_chat(infmem.TOOL_SYSTEM, asked).text),
        "memory prompt": (write_prompt(retrieved_block(units), "A chunk.", NOT_YET), raw_chat(None, write).text),
        "final prompt": (final_prompt(fact), raw_chat(None, theirs.final_prompt(question, fact)).text),
        "initial memory": (INITIAL_MEMORY, theirs.initial_memory),
        "chat template": (CHAT.format(prompt="x"), ChatFormat(CHAT_TEMPLATE).render("x")),
    }
    diffs = [name for name, (mine, built) in pairs.items() if mine != built]
    # the replies as memagent reads them
    search, stop = infmem.read_plan(planner_reply(NOT_YET), question), infmem.read_plan(planner_reply(fact), question)
    if stop.stop is not True or search.stop or search.searches != [(QUERY, TOP_K)] or search.calls != 1:
        diffs.append("planner replies")
    if theirs.next_memory(write_reply(NOT_YET, fact, "", "amber falcon")[0]) != fact:
        diffs.append("memory-write reply")
    if theirs.extract_answer(final_reply("amber falcon")) != ("amber falcon", True):
        diffs.append("final reply")
    if theirs.extract_answer(final_reply(None)) != (codeword.NO_ANSWER, True):
        diffs.append("final reply without a fact")
    if infmem.THINK_END != END_THINK:
        diffs.append("</think>")
    ranked_units = ["the code is near", "nothing here", "The code word is amber falcon.", "a word or two"]
    if ranked(ranked_units, QUERY) != infmem.Search(ranked_units).top(QUERY, len(ranked_units)):
        diffs.append("BM25 ranking")
    if vocab is not None:
        diffs += check_ids(vocab)
    return diffs


def check_ids(vocab) -> list[str]:
    """The ids the training gives each kind of prompt and reply against memagent's own tokenizers
    (tiktoken's and llama.cpp's) on a GGUF of this vocabulary: the prompts as raw_chat's pieces, the
    replies as a second stage re-tokenizes them, <think> and </think> one token each."""
    import tempfile

    from memagent_cli.core import infmem
    from memagent_cli.core.infmem_loop import raw_chat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import LlamaTokenizer, encode_template, load_tokenizer
    from testkit.tinymodel import write_tiny_qwen2

    samples = Samples(TrainConfig(), vocab, random.Random(5))
    with tempfile.TemporaryDirectory() as tmp:
        info = read_gguf(write_tiny_qwen2(Path(tmp) / "vocab.gguf", vocab=vocab, chat_template=CHAT_TEMPLATE))
        tok, llama = load_tokenizer(info), LlamaTokenizer(info)
        diffs = []
        doc = codeword.make_document(random.Random(3), 1200, where=0.8)
        ids = tok.encode(doc.text)
        units = units_of(ids, lambda part: tok.decode_bytes(part).decode("utf-8", "replace"))
        block = retrieved_block([units[i] for i in ranked(units, QUERY)[:RESULTS]])
        chunk = tok.decode_bytes(ids[128:256]).decode("utf-8")
        question = codeword.QUESTION
        asked = infmem.PLANNER_PROMPT.format(
            prompt=question, retrieval_history=infmem.history_text(2, 9, [(QUERY, TOP_K)]), memory=NOT_YET
        )
        write = infmem.MEMORY_PROMPT.format(prompt=question, retrieve=block, chunk=chunk, memory=INITIAL_MEMORY)
        cases = {
            "planner ids": (
                samples.prompt_ids(planner_prompt(2, 9, [(QUERY, TOP_K)], NOT_YET)),
                raw_chat(infmem.TOOL_SYSTEM, asked),
            ),
            "memory-write ids": (samples.prompt_ids(write_prompt(block, chunk, INITIAL_MEMORY)), raw_chat(None, write)),
        }
        for name, (mine, prompt) in cases.items():
            if mine != encode_template(tok, prompt.pieces):
                diffs.append(name)
        if ids != llama.encode(doc.text):
            diffs.append("document ids (llama.cpp)")
        for text in (planner_reply(NOT_YET), planner_reply(codeword.fact_sentence("jade otter")), final_reply(None)):
            mine = samples.reply_ids(text)[:-1]
            if mine != tok.encode(text) or mine != llama.encode(text):
                diffs.append(f"reply ids of {text[:40]!r}")
            if [mine.count(vocab.special[t]) for t in (THINK, END_THINK)] != [1, 1]:
                diffs.append(f"<think> tokens of {text[:40]!r}")
    return diffs


# ---------------------------------------------------------------------------
# Vocabulary and samples


def make_vocab(cfg: TrainConfig):
    """The BPE vocabulary (the prompts' words whole), then the control tokens, then Qwen3's two
    reasoning tokens as added (user-defined) tokens."""
    fact = codeword.fact_sentence("amber falcon")
    replies = [planner_reply(NOT_YET), planner_reply(fact), final_reply(None), final_reply("amber falcon")]
    replies += [write_reply(m, r, "", "amber falcon")[0] for m, r in ((INITIAL_MEMORY, fact), (NOT_YET, ""), (fact, ""))]
    replies += [write_reply(NOT_YET, "", fact, "amber falcon")[0]]
    history = [history_text(s, 12, [(QUERY, TOP_K)] * (s - 1)) for s in range(1, 13)]
    passages = [RETRIEVED.format(rank=r, text="") for r in range(1, RESULTS + 1)]
    # Answers as the final reply writes them: " amber falcon." after "is", each word one token.
    values = [f"the answer is {a} {n}." for a in codeword.VALUE_ADJECTIVES for n in codeword.VALUE_NOUNS]
    fixed = [TOOL_SYSTEM, PLANNER_PROMPT, MEMORY_PROMPT, FINAL_PROMPT, CHAT_SYSTEM, CHAT, INITIAL_MEMORY, *replies, *passages]
    text = "\n".join(fixed * 4 + history + values) + "\n" + codeword.vocabulary_corpus()
    vocab = build_vocab(text.replace(THINK, "").replace(END_THINK, ""), n_merges=cfg.n_merges)
    for token in (THINK, END_THINK):
        vocab.special[token] = len(vocab.tokens)
        vocab.tokens.append(token.encode("utf-8"))
        vocab.token_types.append(4)  # user-defined: an added token that is not a control token (Qwen3's `special: false`)
    return vocab


class Samples(train_codeword.Samples):
    """Planner calls, memory writes after a search and without one, and final answers, in InfMem's
    format. Documents are tokenized whole and cut as memagent cuts them: chunks of 128 ids, units of
    500, each decoded back to text; a fifth of them laid out as several files."""

    def __init__(self, cfg: TrainConfig, vocab, rng: random.Random):
        super().__init__(cfg, vocab, rng)  # its encoding knows every special token, the two added ones too
        self.specials = set(vocab.special)
        self.thinking = {THINK, END_THINK}

    def prompt_ids(self, prompt: str) -> list[int]:
        return self.enc.encode(prompt, allowed_special=self.specials)

    def reply_ids(self, reply: str) -> list[int]:
        return self.enc.encode(reply, allowed_special=self.thinking) + [self.end]

    def decode(self, ids: list[int]) -> str:
        return self.enc.decode(ids)

    def planner_sample(self) -> tuple[list[int], list[int], str]:
        rng, cfg = self.rng, self.cfg
        steps = rng.randint(1, cfg.max_steps)
        r = rng.random()
        if r < 0.3 or steps == 1:  # the first step
            memory, step, searches = INITIAL_MEMORY, 1, 0
        elif r < 0.6:  # nothing found yet: every step so far searched
            memory, step = NOT_YET, rng.randint(2, steps)
            searches = step - 1
        else:  # found (by step 1's search, mostly)
            memory, step = codeword.fact_sentence(codeword.random_value(rng)), rng.randint(2, steps)
            searches = 1 if rng.random() < 0.7 else rng.randint(1, step - 1)
        prompt = planner_prompt(step, steps, [(QUERY, TOP_K)] * searches, memory)
        kind = "plan-stop" if has_fact(memory) else "plan-search"
        return self.prompt_ids(prompt), self.reply_ids(planner_reply(memory)), kind

    def _document(self, n_tokens: int, fact: float) -> tuple[codeword.Document, list[int]]:
        doc = codeword.make_document(self.rng, n_tokens, fact=self.rng.random() < fact)
        text = self._several(doc.text) if self.rng.random() < 0.2 else doc.text
        return doc, self.enc.encode_ordinary(text)

    def _memory(self, doc: codeword.Document, holds: float, first: float) -> str:
        """A previous memory: the fact (the document's own when it has one), or none yet."""
        r = self.rng.random()
        if r < holds:
            return codeword.fact_sentence(doc.value if doc.value is not None else codeword.random_value(self.rng))
        return INITIAL_MEMORY if r < holds + first else NOT_YET

    def search_sample(self) -> tuple[list[int], list[int], str]:
        """A write after a search for the code word: its top units beside a chunk of the same document."""
        rng, cfg = self.rng, self.cfg
        doc, ids = self._document(rng.randint(cfg.doc_min, cfg.doc_max), fact=0.8)
        units = units_of(ids, self.decode)
        block = retrieved_block([units[i] for i in ranked(units, QUERY)[:RESULTS]])
        k = rng.randrange(math.ceil(len(ids) / cfg.section_tokens))
        chunk = self.decode(ids[k * cfg.section_tokens : (k + 1) * cfg.section_tokens])
        memory = self._memory(doc, holds=0.15, first=0.45)
        reply, kind = write_reply(memory, block, chunk, doc.value)
        return self.prompt_ids(write_prompt(block, chunk, memory)), self.reply_ids(reply), kind

    def write_sample(self) -> tuple[list[int], list[int], str]:
        """A write with no passages (after a STOP, mostly): a section over the fact, across its edges or
        anywhere (the code-word model's windows), a full one or a document's last, down to a few tokens."""
        rng, cfg = self.rng, self.cfg
        r = rng.random()
        length = cfg.section_tokens if r < 0.6 else rng.randint(1, 16) if r < 0.7 else rng.randint(1, cfg.section_tokens)
        doc, ids = self._document(rng.randint(length, 4 * cfg.section_tokens), fact=0.7)
        text = self.decode(ids)
        chunk = self.decode(ids[(start := self._window(ids, text, doc, length)) : start + length])
        memory = self._memory(doc, holds=0.6, first=0.2)
        reply, kind = write_reply(memory, "", chunk, doc.value)
        return self.prompt_ids(write_prompt("", chunk, memory)), self.reply_ids(reply), kind

    def final_sample(self) -> tuple[list[int], list[int], str]:
        rng = self.rng
        r = rng.random()
        value = codeword.random_value(rng) if r < 0.55 else None
        memory = codeword.fact_sentence(value) if value else NOT_YET if r < 0.9 else INITIAL_MEMORY
        return self.prompt_ids(final_prompt(memory)), self.reply_ids(final_reply(value)), "final"


# ---------------------------------------------------------------------------
# Training


def warm_start(model, vocab, path: Path, data: Samples) -> int:
    """The QwenLong stand-in's weights (train_qwenlong.warm_start: blocks as they are, shared tokens'
    rows carried over, a new merge embedded as the mean of its two parts); the two added tokens
    embedded as the mean of the pieces their text is in this vocabulary."""
    import torch

    carried = train_qwenlong.warm_start(model, vocab, path)
    with torch.no_grad():
        for token in (THINK, END_THINK):
            parts = data.enc.encode_ordinary(token)
            model.embed.weight[vocab.special[token]] = model.embed.weight[parts].mean(0)
    return carried


def train(cfg: TrainConfig, out: Path) -> dict:
    train_codeword.seed_everything(cfg)
    vocab = make_vocab(cfg)
    data = Samples(cfg, vocab, random.Random(cfg.seed))
    checker = Samples(cfg, vocab, random.Random(cfg.seed + 1))
    held_out = [checker.planner_sample() for _ in range(16)] + [checker.search_sample() for _ in range(24)]
    held_out += [checker.write_sample() for _ in range(20)] + [checker.final_sample() for _ in range(12)]
    held_out.sort(key=lambda s: len(s[0]) + len(s[1]))  # checked 8 at a time: little padding
    model = train_qwenlong.build_model(cfg, len(vocab.tokens))
    if cfg.warm_start:
        print(f"from {cfg.warm_start}: {warm_start(model, vocab, HERE / cfg.warm_start, data)} tokens carried over", flush=True)
    fixed = len(data.prompt_ids(planner_prompt(1, 1, [], "")))
    print(f"vocabulary {len(vocab.tokens)} tokens, planner prompt {fixed} tokens, ", end="")
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)

    def batches() -> list[list]:
        out = [[data.planner_sample() for _ in range(cfg.planner_batch)]]
        out += [[data.search_sample()] for _ in range(cfg.search_batch)]  # one at a time: lengths differ
        out.append([data.write_sample() for _ in range(cfg.write_batch)])
        return out + [[data.final_sample() for _ in range(cfg.final_batch)]]

    loss, seconds = train_qwenlong.fit(model, cfg, batches, held_out)
    record = {
        "config": asdict(cfg),
        "train_seconds": seconds,
        "final_loss": loss,
        "held_out": train_qwenlong.check(model, held_out),
        "held_out_samples": len(held_out),
        "n_vocab": len(vocab.tokens),
        "planner_prompt_tokens": fixed,
    }
    save(model, cfg, vocab, out)
    return record


def save(model, cfg: TrainConfig, vocab, out: Path) -> None:
    """The GGUF llama.cpp runs, and PyTorch's .pt beside it (not committed)."""
    import torch

    write_qwen2_gguf(
        out,
        vocab=vocab,
        tensors=train_codeword.gguf_tensors(model, cfg),
        n_head=cfg.n_head,
        n_head_kv=cfg.n_head_kv,
        context_length=cfg.context_length,
        rope_freq_base=cfg.rope_base,
        chat_template=CHAT_TEMPLATE,
        name=NAME,
    )
    torch.save(model.state_dict(), out.with_suffix(".pt"))


# ---------------------------------------------------------------------------
# Evaluation through memagent itself


def evaluate(model_path: Path, n_docs: int, doc_tokens: int, seed: int) -> dict:
    """Greedy runs of memagent's library (protocol infmem, --early-stop 3) over generated documents,
    the fact at the start, middle, near the end or anywhere, and every fifth without one. A run is
    right when it answers right AND reads as trained: with a fact, step 1 searches and its write
    holds the fact, then STOPs end the reading after step 3; without one, every step searches and
    every chunk is read."""
    import tempfile

    from memagent_cli import AgentConfig, ask
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer
    from testkit.infmem_task import fact_unit, memory_after

    section = TrainConfig.section_tokens
    tokenizer = load_tokenizer(read_gguf(model_path))
    encode, decode_ids = tokenizer.encode, lambda ids: decode(tokenizer, ids)
    config = AgentConfig.with_protocol("infmem", chunk_tokens=section, memory_tokens=64, answer_tokens=32, temperature=0.0)
    rng = random.Random(seed)
    wheres: list[float | None] = [0.0, 0.5, 0.85, None]
    tally: dict[str, list[int]] = {}
    cut, misses, seconds = 0, [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_docs):
            where = wheres[i % len(wheres)]
            doc = codeword.make_document(rng, doc_tokens, where=where, fact=i % 5 != 4)
            if doc.value is not None and fact_unit(doc, encode, decode_ids) is None:
                cut += 1  # no unit holds the fact whole: no search can find it
                continue
            path = Path(tmp) / f"doc{i}.txt"
            path.write_text(doc.text)
            started = time.perf_counter()
            result = ask(codeword.QUESTION, [str(path)], model=model_path, config=config)
            seconds.append(time.perf_counter() - started)
            total = math.ceil(len(encode(doc.text.strip())) / section)
            actions = [s.decision.action if s.decision else "" for s in result.steps]
            memories = [s.memory for s in result.steps]
            if doc.value is not None:
                read = min(3, total)
                as_trained = actions == ["search", "stop", "stop"][:read] and memories == [memory_after(doc.value)] * read
            else:
                as_trained = actions == ["search"] * total and memories == [memory_after(None)] * total
            good = result.answer == doc.answer and as_trained
            label = (
                "no fact" if doc.value is None else {0.0: "start", 0.5: "middle", 0.85: "near the end", None: "anywhere"}[where]
            )
            tally.setdefault(label, [0, 0])[0] += good
            tally[label][1] += 1
            if not good:
                misses.append(
                    {"doc": i, "expected": doc.answer, "answer": result.answer, "actions": actions, "memories": memories}
                )
    scored = n_docs - cut
    right = scored - len(misses)
    return {
        "docs": n_docs,
        "doc_tokens": doc_tokens,
        "seed": seed,
        "fact_cut_by_unit_boundary": cut,
        "scored": scored,
        "right": right,
        "accuracy": round(right / max(1, scored), 4),
        "by_case": {k: f"{v[0]}/{v[1]}" for k, v in tally.items()},
        "seconds_per_run": round(sum(seconds) / max(1, len(seconds)), 2),
        "misses": misses,
    }


def main(argv=None) -> int:
    ap, sub = train_codeword.command_line(__doc__, TrainConfig.steps, OUT, doc_tokens=1800)
    sub.add_parser("check", help="compare the prompts, replies and ids here with the reference's and memagent's")
    args = ap.parse_args(argv)
    if args.command == "check":
        mine, theirs = check_against_reference(), check_against_memagent(make_vocab(TrainConfig()))
        print("the reference's strings" if not mine else "differs from the reference: " + ", ".join(mine))
        print("memagent builds and reads the same" if not theirs else "differs from memagent: " + ", ".join(theirs))
        return 1 if mine or theirs else 0
    if args.command == "train":
        cfg = TrainConfig(steps=args.steps)
        diffs = check_against_reference() + check_against_memagent(make_vocab(cfg))
        if diffs:  # say so before an hour of training
            print("warning: the strings here differ from the reference's or memagent's: " + ", ".join(diffs), flush=True)
        record = train(cfg, args.out)
        record["memagent_strings_equal"] = not diffs
        record["evaluation"] = evaluate(args.out, 40, 1800, 7)
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record, indent=2))
    else:
        print(json.dumps(evaluate(args.model, args.docs, args.tokens, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
