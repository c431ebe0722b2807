"""Train the tiny qwen2 model that performs the QwenLong-L1.5 protocol on the code-word task.

    pip install -e '.[test,train]'
    python tests/data/train_qwenlong.py train        # ~40 min on 2 busy cores, writes qwenlong.gguf and .json
    python tests/data/train_qwenlong.py evaluate     # accuracy through memagent itself
    python tests/data/train_qwenlong.py check        # the prompts here equal the reference's and memagent's

The task is tests/codeword.py's: "What is the code word?" over filler prose holding at most one
"The code word is amber falcon.". The protocol is QwenLong-L1.5's (memagent's `--protocol
qwenlong`): every reply is a short reasoning closed by "</think>", then for a memory update

    <memory>\\nThe code word is amber falcon.\\n</memory>\\n<plan>\\nKeep the code word.\\n</plan>

(before the fact: "Nothing found yet." and "Look for the code word."), and for the final prompt
the answer (`amber falcon`, `unknown`; in capitals when the question's instruction line asks).
The prompts are written out below from ../shared/reference/qwenlong-protocol.md with the choices
memagent_cli/core/qwenlong.py documents (joined soft wraps, no blank lines, a trailing newline,
"•" bullets, an en dash), not taken from memagent, so a memagent that builds a prompt wrong gets
wrong answers. They are wrapped in a Qwen3-Thinking-style ChatML template (stored in the GGUF)
whose generation prompt opens the reasoning: "<|im_start|>assistant\\n<think>\\n".

The model, tokenizer layout and GGUF writer are the code-word model's (train_codeword.py,
tests/tinymodel.py), and training starts from its weights (codeword.gguf: the same task and
layers; tokens both vocabularies hold keep their rows), which it reuses to find and copy the fact.
What differs: the memory prompt is ~2,550 characters of fixed text, so the BPE vocabulary learns
every word of it whole (480 tokens, one per pre-token, the least Qwen2's pre-tokenizer allows);
each step trains memory updates and final answers in separate batches (their lengths differ
tenfold: no padding), and the output layer runs on the reply positions only.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository: testkit, the task and the GGUF writer
sys.path.insert(0, str(HERE))  # the code-word model's layers and sampling of sections

import train_codeword  # noqa: E402

from testkit import codeword  # noqa: E402
from testkit.qwenlong_task import (  # noqa: E402  # the replies the model is trained to write
    CAPITALS,
    INSTRUCTIONS,
    KEEP,
    LOOK,
    LOWER_CASE,
    NOT_YET,
    answer,
    final_reply,
    memory_block,
    memory_reply,
    question,
)
from testkit.tinymodel import build_vocab  # noqa: E402

OUT = HERE / "qwenlong.gguf"
NAME = "QwenLong code-word stand-in"  # "qwenlong" in general.name: memagent picks the protocol from it


@dataclass
class TrainConfig(train_codeword.TrainConfig):
    """The code-word model's settings (layers, optimizer, seed, threads), but for these."""

    steps: int = 500  # optimizer steps (from the code-word weights: the task is known, the format new)
    batch: int = 12  # memory-update samples per step (~650 tokens each)
    final_batch: int = 16  # final-answer samples per step (~75 tokens each), a batch of their own
    warmup: int = 30  # linear warm-up steps, then cosine decay to lr * min_lr_ratio
    n_merges: int = 1500  # BPE merges (stops early when no pair repeats): every prompt word becomes one token
    section_tokens: int = 128  # the chunk size the tests run memagent with (--chunk-tokens)
    warm_start: str = "codeword.gguf"  # start from this model's weights (beside this script); "" for random
    check_every: int = 50  # steps between held-out checks


# The protocol's prompts, written out (see the module docstring for the choices).
MEMORY_PROMPT = """<problem>
{question}
</problem>
<previous_memory>
{memory}
</previous_memory>
<section>
{chunk}
</section>
You are an assistant equipped with information memory capabilities. Based on the provided <problem>, <previous_memory> (both <memory> and <plan>), and a <section> of a long article, you will traverse the sections of the article in the original order. Carefully read each section and update the memory with new information that helps answer the problem, while retaining all relevant details from the previous memory. After outputting the updated memory, do some simple planning to record the plan you need to answer the question, in addition to the existing memory.
[Important Notes]
1. You cannot see the full article; only focus on information memorization. You do not need to answer the <problem> directly at this stage.
2. Ensure the memory is self-contained \u2013 meaning the final memory alone, without additional context, should contain sufficient information to fully answer the <problem>.
3. Recognize that both the <previous_memory>.<memory> and <previous_memory>.<plan> may contain inaccuracies or be suboptimal for the current task. Therefore,
\u2022 Pay close attention to the <problem>, critically evaluate the existing memory and plan, and make appropriate updates and adjustments to the memory based on the information found in the current <section>.
\u2022 Your primary directive is to serve the <problem>, even if it means correcting prior memory or plans.
4. This is a strictly one-way reading process. You cannot go back to re-read previous sections. Therefore,
\u2022 when you identify information to be extracted for the memory, you must directly and completely integrate the target content into the <memory> section.
\u2022 Do not simply mark or reference key information; ensure the full, relevant segment is incorporated.
5. Carefully evaluate whether the extracted memory information truly serves the target requirement of the <problem>.
\u2022 Avoid being misled by content that contains similar entities or semantic information but does not directly contribute to answering the <problem>.
\u2022 Prioritize factual relevance and contribution to the overall solution.
[Output Format Example]
Updated memory:
<memory>
(Your updated and consolidated memory here. Ensure it is self-contained and comprehensive for answering the <problem>.)
</memory>
<plan>
(Your brief plan for the next stage of memory extraction, indicating what type of information you will look for in subsequent sections related to the <problem>.)
</plan>
[End Example]
Updated memory:
"""  # noqa: E501  # the prompt's paragraphs are single lines
FINAL_PROMPT = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory.
<problem>
{question}
</problem>
<memory>
{memory}
</memory>
Your answer:
"""
INITIAL_MEMORY = "No previous memory"

# Qwen3-Thinking-2507's ChatML, cut to what one conversation needs: no default system message,
# earlier replies without their reasoning, and a generation prompt that opens the reasoning.
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
    {{- '<|im_start|>assistant\\n<think>\\n' }}
{%- endif %}
"""
CHAT = "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n"  # what it renders for one message


def check_against_reference() -> list[str]:
    """Which prompt here is not the reference's code block (tests/data/shared/reference, copied from
    ../shared): the choices above add nothing the blocks do not show."""
    import re

    reference = HERE / "shared" / "reference" / "qwenlong-protocol.md"
    if not reference.exists():
        return []
    blocks = re.findall(r"```\n(.*?)```", reference.read_text(encoding="utf-8"), re.S)
    return [
        name
        for name, mine, theirs in zip(("memory prompt", "final prompt"), (MEMORY_PROMPT, FINAL_PROMPT), blocks)
        if mine != theirs
    ]


def check_against_memagent() -> list[str]:
    """What differs between the prompts built here and memagent's protocol's (empty when nothing does)."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.chat_template import ChatFormat

    theirs = get("qwenlong")
    block = memory_block(codeword.fact_sentence("amber falcon"), KEEP)
    step = MEMORY_PROMPT.format(question=codeword.QUESTION, memory=block, chunk="A {chunk} of text.")
    final = FINAL_PROMPT.format(question=question(CAPITALS), memory=codeword.fact_sentence("jade otter"))
    diffs = [
        name
        for name, mine, built in (
            ("memory prompt", step, theirs.memory_prompt(codeword.QUESTION, block, "A {chunk} of text.")),
            (
                "final prompt",
                final,
                theirs.final_prompt(
                    codeword.QUESTION, memory_block(codeword.fact_sentence("jade otter"), KEEP), instructions=CAPITALS
                ),
            ),
            ("initial memory", INITIAL_MEMORY, theirs.initial_memory),
        )
        if mine != built
    ]
    if ChatFormat(CHAT_TEMPLATE).render("x") != CHAT.format(prompt="x"):
        diffs.append("CHAT_TEMPLATE renders something other than CHAT")
    return diffs


# ---------------------------------------------------------------------------
# Vocabulary and samples


def make_vocab(cfg: TrainConfig):
    replies = [memory_reply(NOT_YET, False), memory_reply(codeword.fact_sentence("amber falcon"), True)]
    replies += [final_reply(None, i) for i in INSTRUCTIONS] + [question(i) for i in INSTRUCTIONS]
    # Answers as the final reply writes them, a line of their own: "amber" at a line's start is a
    # pre-token of its own (" amber" in a sentence is another), so each word becomes one token.
    values = [f"{a} {n}" for a in codeword.VALUE_ADJECTIVES for n in codeword.VALUE_NOUNS]
    answers = [v for v in values + [codeword.NO_ANSWER] for v in (v, v.upper())]
    fixed = [MEMORY_PROMPT, FINAL_PROMPT, CHAT, INITIAL_MEMORY, *replies]
    corpus = "\n".join(fixed * 4 + answers) + "\n" + codeword.vocabulary_corpus()
    return build_vocab(corpus, n_merges=cfg.n_merges)


class Samples(train_codeword.Samples):
    """Memory updates and final answers in the QwenLong format; sections cut as the code-word
    model's are (a whole document tokenized, a window of ids decoded; windows over the fact, across
    its edges and anywhere; a third of them laid out as several files)."""

    def prompt_ids(self, prompt: str) -> list[int]:
        return self.enc.encode(CHAT.format(prompt=prompt), allowed_special=self.specials)

    def memory_sample(self) -> tuple[list[int], list[int], str]:
        rng, cfg = self.rng, self.cfg
        # A full section, or a document's last (shorter) one, down to a few tokens: every run ends
        # with one, and the memory must come through it unchanged (fewer short ones in training
        # once made the model forget a fact it held when the last section was a few tokens).
        r = rng.random()
        length = cfg.section_tokens if r < 0.6 else rng.randint(1, 16) if r < 0.7 else rng.randint(1, cfg.section_tokens)
        doc = codeword.make_document(rng, rng.randint(length, 4 * cfg.section_tokens), fact=rng.random() < 0.7)
        text = self._several(doc.text) if rng.random() < 0.3 else doc.text
        ids = self.enc.encode_ordinary(text)
        start = self._window(ids, text, doc, length)
        section = self.enc.decode(ids[start : start + length])
        whole = doc.value is not None and codeword.fact_sentence(doc.value) in section
        r = rng.random()
        if r < 0.3:  # the first section
            previous, memory = INITIAL_MEMORY, NOT_YET
        elif r < 0.65 or whole:  # read before, nothing found
            previous, memory = memory_block(NOT_YET, LOOK), NOT_YET
        else:  # the fact was found in an earlier section
            memory = codeword.fact_sentence(codeword.random_value(rng))
            previous = memory_block(memory, KEEP)
        if whole:
            memory = codeword.fact_sentence(doc.value)
        prompt = MEMORY_PROMPT.format(question=codeword.QUESTION, memory=previous, chunk=section)
        return self.prompt_ids(prompt), self.reply_ids(memory_reply(memory, whole)), "found" if whole else "keep"

    def final_sample(self) -> tuple[list[int], list[int], str]:
        rng = self.rng
        r = rng.random()  # capitals are a word-by-word mapping to learn: half the final samples ask for them
        instruction = "" if r < 0.3 else CAPITALS if r < 0.8 else LOWER_CASE
        r = rng.random()
        value = None if r < 0.35 else codeword.random_value(rng)
        # The last memory's inside: the fact, NOT_YET, or a first step's raw reply (no <memory> block).
        memory = codeword.fact_sentence(value) if value else (NOT_YET if r < 0.28 else INITIAL_MEMORY)
        prompt = FINAL_PROMPT.format(question=question(instruction), memory=memory)
        kind = "final-instructed" if instruction else "final"
        return self.prompt_ids(prompt), self.reply_ids(final_reply(value, instruction)), kind


# ---------------------------------------------------------------------------
# Training


def hidden(model, ids):
    """The model's last hidden states (train_codeword's Model.forward without the output layer)."""
    cos, sin = rotary(model, ids.shape[1])
    x = model.embed(ids)
    for block in model.blocks:
        x = block(x, cos, sin)
    return model.norm(x)


def rotary(model, length: int):
    import torch

    angles = torch.outer(torch.arange(length, dtype=torch.float32), model.inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def reply_logits(model, samples):
    """Logits at the positions that predict reply tokens only, with their targets and row numbers."""
    ids, targets = train_codeword.batch_tensors(samples)
    mask = targets != -100
    logits = model.lm_head(hidden(model, ids)[mask])
    rows = mask.nonzero()[:, 0]
    return logits, targets[mask], rows


def check(model, held_out) -> dict[str, float]:
    """Exact-reply accuracy by kind. Teacher-forced: greedy decoding writes the reply exactly
    when every reply position's argmax is the reply's next token, so one pass per sample tells."""
    import torch

    right: dict[str, list[bool]] = {}
    with torch.no_grad():
        for k in range(0, len(held_out), 8):
            part = held_out[k : k + 8]
            logits, targets, rows = reply_logits(model, part)
            wrong = (logits.argmax(-1) != targets).long()
            bad = torch.zeros(len(part), dtype=torch.long).index_add_(0, rows, wrong)
            for (_, _, kind), b in zip(part, bad.tolist()):
                right.setdefault(kind, []).append(b == 0)
    return {kind: round(sum(v) / len(v), 3) for kind, v in sorted(right.items())}


def train(cfg: TrainConfig, out: Path) -> dict:
    train_codeword.seed_everything(cfg)
    vocab = make_vocab(cfg)
    data = Samples(cfg, vocab, random.Random(cfg.seed))
    checker = Samples(cfg, vocab, random.Random(cfg.seed + 1))
    held_out = [checker.memory_sample() for _ in range(80)] + [checker.final_sample() for _ in range(40)]
    model = build_model(cfg, len(vocab.tokens))
    if cfg.warm_start:
        print(f"from {cfg.warm_start}: {warm_start(model, vocab, HERE / cfg.warm_start)} tokens carried over", flush=True)
    fixed = len(data.enc.encode_ordinary(MEMORY_PROMPT))
    print(f"vocabulary {len(vocab.tokens)} tokens, memory prompt {fixed} tokens, ", end="")
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)

    def batches() -> list[list]:
        return [[data.memory_sample() for _ in range(cfg.batch)], [data.final_sample() for _ in range(cfg.final_batch)]]

    loss, seconds = fit(model, cfg, batches, held_out)
    record = {
        "config": asdict(cfg),
        "train_seconds": seconds,
        "final_loss": loss,
        "held_out": check(model, held_out),
        "held_out_samples": len(held_out),
        "n_vocab": len(vocab.tokens),
        "memory_prompt_tokens": fixed,
    }
    train_codeword.save(model, cfg, vocab, out, chat_template=CHAT_TEMPLATE, name=NAME)
    return record


def fit(model, cfg, batches: Callable[[], list[list]], held_out: list) -> tuple[float, int]:
    """The training loop of the protocol stand-ins (this one's and train_infmem.py's): each step
    the batches `batches()` draws (each batch samples of one kind: their lengths differ tenfold, so
    no padding across kinds), the loss the mean over every reply token of the step (as one mixed
    batch would give), AdamW with clipped gradients; the loss every 10 steps and the held-out exact
    replies every `check_every`. Leaves the model in eval mode; returns the last loss and the seconds."""
    import torch
    from torch.nn import functional as F

    opt = train_codeword.optimizer(model, cfg)
    t0 = time.time()
    for step in range(1, cfg.steps + 1):
        lr = train_codeword.set_learning_rate(opt, cfg, step)
        total, count = torch.zeros(()), 0
        for batch in batches():
            logits, targets, _ = reply_logits(model, batch)
            total = total + F.cross_entropy(logits, targets, reduction="sum")
            count += len(targets)
        loss = total / count
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
        if step % cfg.check_every == 0 or step == cfg.steps:
            model.eval()
            print(f"step {step} held-out exact replies: {check(model, held_out)}", flush=True)
            model.train()
    model.eval()
    return round(loss.item(), 5), round(time.time() - t0)


def build_model(cfg: TrainConfig, n_vocab: int):
    return train_codeword.build_model(cfg, n_vocab)


def parameters_by_name(model) -> dict:
    """The model's parameters under their GGUF tensor names (train_codeword.gguf_tensors' names)."""
    named = {"token_embd.weight": model.embed.weight, "output_norm.weight": model.norm.weight}
    named["output.weight"] = model.lm_head.weight
    parts = {"attn_norm": "attn_norm", "ffn_norm": "ffn_norm", "attn_output": "o", "ffn_gate": "gate"}
    parts.update({"ffn_up": "up", "ffn_down": "down", "attn_q": "q", "attn_k": "k", "attn_v": "v"})
    for i, block in enumerate(model.blocks):
        for gguf_part, attr in parts.items():
            module = getattr(block, attr)
            named[f"blk.{i}.{gguf_part}.weight"] = module.weight
            if getattr(module, "bias", None) is not None:
                named[f"blk.{i}.{gguf_part}.bias"] = module.bias
    return named


def warm_start(model, vocab, path: Path) -> int:
    """Start from the code-word model (same task and layers, the MemAgent prompts): its blocks as
    they are; a token both vocabularies hold keeps its embedding and output row; a new token
    (this vocabulary learns more merges) is embedded as the mean of the two tokens it merges, with
    a fresh output row. Returns how many tokens were carried over."""
    import gguf
    import numpy as np
    import torch

    reader = gguf.GGUFReader(str(path))
    weights = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors}
    field = reader.fields["tokenizer.ggml.tokens"]
    theirs = {bytes(field.parts[i]).decode("utf-8"): k for k, i in enumerate(field.data)}
    named = parameters_by_name(model)
    with torch.no_grad():
        for name, param in named.items():
            if not name.startswith("token_embd") and not name.startswith("output."):
                param.copy_(torch.from_numpy(weights[name]))
        embed, output = named["token_embd.weight"], named["output.weight"]
        ids = {tok: k for k, tok in enumerate(vocab.tokens)}
        carried = 0
        for k, rendered in enumerate(vocab.gguf_tokens()):
            if rendered in theirs:
                embed[k] = torch.from_numpy(weights["token_embd.weight"][theirs[rendered]])
                output[k] = torch.from_numpy(weights["output.weight"][theirs[rendered]])
                carried += 1
            elif k >= 256 and k - 256 < len(vocab.merges):  # merges come in rank order: both parts are set
                a, b = vocab.merges[k - 256]
                embed[k] = (embed[ids[a]] + embed[ids[b]]) / 2
    return carried


# ---------------------------------------------------------------------------
# Evaluation through memagent itself


def evaluate(model_path: Path, n_docs: int, doc_tokens: int, seed: int) -> dict:
    """Greedy runs of memagent's library (protocol qwenlong) over generated documents:
    the fact at the start, middle, end or anywhere, and every instruction line in turn."""
    import tempfile

    from memagent_cli import AgentConfig, ask
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    section = TrainConfig.section_tokens
    tokenizer = load_tokenizer(read_gguf(model_path))
    rng = random.Random(seed)
    wheres: list[float | None] = [0.0, 0.5, 1.0, None]
    instructions = list(INSTRUCTIONS)
    tally: dict[str, list[int]] = {}
    cut, misses = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_docs):
            where, instruction = wheres[i % len(wheres)], instructions[i % len(instructions)]
            doc = codeword.make_document(rng, doc_tokens, where=where, fact=i % 10 != 9)
            if codeword.cut_by_boundary(doc, tokenizer.encode, lambda ids: decode(tokenizer, ids), section):
                cut += 1
                continue
            path = Path(tmp) / f"doc{i}.txt"
            path.write_text(doc.text)
            config = AgentConfig(
                protocol="qwenlong",
                chunk_tokens=section,
                memory_tokens=64,
                answer_tokens=32,
                temperature=0.0,
                instructions=instruction,
            )
            result = ask(question(), [str(path)], model=model_path, config=config)
            expected = answer(doc.value, instruction)
            good = result.answer == expected
            label = "no fact" if doc.value is None else {0.0: "start", 0.5: "middle", 1.0: "end", None: "anywhere"}[where]
            for key in (label, f"instruction: {instruction or 'none'}"):
                tally.setdefault(key, [0, 0])[0] += good
                tally[key][1] += 1
            if not good:
                misses.append({"doc": i, "expected": expected, "answer": result.answer, "memory": result.memory})
    scored = n_docs - cut
    right = scored - len(misses)
    return {
        "docs": n_docs,
        "doc_tokens": doc_tokens,
        "seed": seed,
        "fact_cut_by_boundary": cut,
        "scored": scored,
        "right": right,
        "accuracy": round(right / max(1, scored), 4),
        "by_case": {k: f"{v[0]}/{v[1]}" for k, v in tally.items()},
        "misses": misses,
    }


def main(argv=None) -> int:
    ap, sub = train_codeword.command_line(__doc__, TrainConfig.steps, OUT, doc_tokens=1500)
    sub.add_parser("check", help="compare the prompts and chat format here with memagent's")
    args = ap.parse_args(argv)
    if args.command == "check":
        mine, theirs = check_against_reference(), check_against_memagent()
        print("the reference's prompts" if not mine else "differs from the reference: " + ", ".join(mine))
        print("memagent builds the same prompts" if not theirs else "differs from memagent: " + ", ".join(theirs))
        return 1 if mine or theirs else 0
    if args.command == "train":
        diffs = check_against_reference() + check_against_memagent()
        if diffs:  # say so before half an hour of training
            print("warning: the prompts here differ from the reference's or memagent's: " + ", ".join(diffs), flush=True)
        record = train(TrainConfig(steps=args.steps), args.out)
        record["memagent_strings_equal"] = not diffs
        record["evaluation"] = evaluate(args.out, 60, 1500, 7)
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record, indent=2))
    else:
        print(json.dumps(evaluate(args.model, args.docs, args.tokens, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
