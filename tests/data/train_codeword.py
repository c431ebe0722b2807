"""Train the tiny qwen2 model that performs the MemAgent protocol on the code-word task.

    pip install -e '.[test,train]'
    python tests/data/train_codeword.py train            # ~30 min on 2 cores, writes codeword.gguf, .json, .npz
    python tests/data/train_codeword.py evaluate         # accuracy through memagent itself
    python tests/data/train_codeword.py logits           # PyTorch's logits, for the agreement test

The model answers "What is the code word?" over documents of filler prose holding at most
one "The code word is amber falcon." (see tests/codeword.py). It is trained on the exact
protocol prompts (the strings below are written out from ../shared/reference, not taken
from memagent, so a memagent that builds a prompt wrong gets wrong answers), wrapped in the
Qwen2.5 chat format, with sections cut the way memagent cuts them: the document is tokenized
whole and a section is a window of ids decoded back to text.

PyTorch is needed only here (the `train` extra); the tests read the GGUF this writes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository: testkit, the task and the GGUF writer

from testkit import codeword  # noqa: E402
from testkit.tinymodel import CONTROL_TOKENS, build_vocab, write_qwen2_gguf  # noqa: E402

OUT = HERE / "codeword.gguf"
TAIL_LOGITS = 24  # positions of reference logits kept per prompt: the file stays small


@dataclass
class TrainConfig:
    seed: int = 1234  # python, numpy and torch seeds: same seed, same model
    steps: int = 5000  # optimizer steps
    batch: int = 24  # samples per step
    lr: float = 2e-3  # AdamW peak learning rate
    warmup: int = 200  # linear warm-up steps, then cosine decay to lr * min_lr_ratio
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    n_layer: int = 4  # transformer blocks
    n_embd: int = 128  # model width
    n_head: int = 4  # query heads (head size 32)
    n_head_kv: int = 2  # key/value heads (grouped-query attention, as in Qwen2)
    n_ff: int = 384  # SwiGLU width
    n_merges: int = 460  # BPE merges: with 256 bytes and 3 control tokens, ~720 tokens
    section_tokens: int = 64  # the chunk size the tests run memagent with (--chunk-tokens)
    final_fraction: float = 0.25  # share of final-answer samples; the rest are memory updates
    threads: int = 2  # torch CPU threads
    rope_base: float = 10000.0


# The protocol's prompts, verbatim (one space after "<problem>", newline after the last line).
MEMORY_PROMPT = """You are presented with a problem, a section of an article that may contain the answer to the problem, and a previous memory. Please read the provided section carefully and update the memory with the new information that helps to answer the problem. Be sure to retain all relevant details from the previous memory while adding any new, useful information.

<problem> 
{problem}
</problem>

<memory>
{memory}
</memory>

<section>
{chunk}
</section>

Updated memory:
"""  # noqa: W291
FINAL_PROMPT = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory and put the answer in \\boxed{{}}.

<problem> 
{problem}
</problem>

<memory>
{memory}
</memory>

Your answer:
"""  # noqa: W291
INITIAL_MEMORY = "No previous memory"
CHAT = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------------------
# Vocabulary and tokenizer


def make_vocab(cfg: TrainConfig):
    corpus = "\n".join([MEMORY_PROMPT, FINAL_PROMPT, CHAT, INITIAL_MEMORY] * 4) + "\n" + codeword.vocabulary_corpus()
    return build_vocab(corpus, n_merges=cfg.n_merges)


def make_encoding(vocab):
    """tiktoken over the vocabulary: rank = id, control tokens as specials (the ids llama.cpp gives)."""
    import tiktoken

    from testkit.tinymodel import QWEN2_PRETOKENIZE_PATTERN

    ranks = {tok: i for i, (tok, kind) in enumerate(zip(vocab.tokens, vocab.token_types)) if kind == 1}
    return tiktoken.Encoding(
        "codeword", pat_str=QWEN2_PRETOKENIZE_PATTERN, mergeable_ranks=ranks, special_tokens=dict(vocab.special)
    )


# ---------------------------------------------------------------------------
# Samples: (prompt ids, reply ids); loss is taken on the reply only


class Samples:
    def __init__(self, cfg: TrainConfig, vocab, rng: random.Random):
        self.cfg, self.rng = cfg, rng
        self.enc = make_encoding(vocab)
        self.end = vocab.special["<|im_end|>"]
        self.specials = set(CONTROL_TOKENS)

    def prompt_ids(self, prompt: str) -> list[int]:
        return self.enc.encode(CHAT.format(prompt=prompt), allowed_special=self.specials)

    def reply_ids(self, reply: str) -> list[int]:
        return self.enc.encode_ordinary(reply) + [self.end]

    def memory_sample(self) -> tuple[list[int], list[int], str]:
        """A section cut from a whole tokenized document: it holds the fact whole, part of it, or none."""
        rng, cfg = self.rng, self.cfg
        length = cfg.section_tokens if rng.random() < 0.75 else rng.randint(1, cfg.section_tokens)
        doc = codeword.make_document(rng, rng.randint(length, 4 * cfg.section_tokens), fact=rng.random() < 0.7)
        text = doc.text
        if rng.random() < 0.3:  # several files: memagent's layout, headers anywhere in a section
            text = self._several(doc.text)
        ids = self.enc.encode_ordinary(text)
        start = self._window(ids, text, doc, length)
        section = self.enc.decode(ids[start : start + length])
        whole = doc.value is not None and codeword.fact_sentence(doc.value) in section
        memory = INITIAL_MEMORY
        if not whole and rng.random() < 0.4:  # the fact was found in an earlier section
            memory = codeword.fact_sentence(codeword.random_value(rng))
        reply = codeword.fact_sentence(doc.value) if whole else memory
        prompt = MEMORY_PROMPT.format(problem=codeword.QUESTION, memory=memory, chunk=section)
        return self.prompt_ids(prompt), self.reply_ids(reply), "whole" if whole else "keep"

    def _several(self, text: str) -> str:
        """The document as one of 2-4 files laid out as memagent lays out several sources:
        "Document {i}:\n{title}\n{text}" blocks joined by a blank line."""
        rng = self.rng
        n = rng.randint(2, 4)
        texts = [codeword.make_document(rng, rng.randint(20, 150), fact=False).text for _ in range(n - 1)]
        texts.insert(rng.randint(0, n - 1), text)
        blocks = [f"Document {i + 1}:\n{codeword.random_title(rng)}\n{t}" for i, t in enumerate(texts)]
        return "\n\n".join(blocks)

    def _window(self, ids: list[int], text: str, doc, length: int) -> int:
        """A window start: over the fact (half the time), across its edge, or anywhere."""
        rng = self.rng
        last = max(0, len(ids) - length)
        r = rng.random()
        if doc.fact_at is None or r < 0.3:
            return rng.randint(0, last)
        offsets, pos = [], 0
        for tok in ids:  # character offset of each token (the text is ASCII)
            offsets.append(pos)
            pos += len(self.enc.decode_single_token_bytes(tok))
        at = text.index(codeword.fact_sentence(doc.value))  # other files may come before it
        lo = max(i for i, o in enumerate(offsets) if o <= at)
        hi = max(i for i, o in enumerate(offsets) if o < at + len(codeword.fact_sentence(doc.value)))
        if r < 0.75:  # over the fact, whole if the window is long enough
            a, b = max(0, min(hi - length + 1, last)), max(0, min(lo, last))
            return rng.randint(min(a, b), max(a, b))  # a > b: the window is shorter than the fact
        edge = rng.choice((lo, hi))  # a window that ends or starts inside the fact
        return min(last, max(0, edge - rng.randint(0, length)))

    def final_sample(self) -> tuple[list[int], list[int], str]:
        rng = self.rng
        if rng.random() < 0.3:
            memory, answer = INITIAL_MEMORY, codeword.NO_ANSWER
        else:
            answer = codeword.random_value(rng)
            memory = codeword.fact_sentence(answer)
        prompt = FINAL_PROMPT.format(problem=codeword.QUESTION, memory=memory)
        return self.prompt_ids(prompt), self.reply_ids(f"\\boxed{{{answer}}}"), "final"

    def draw(self):
        return self.final_sample() if self.rng.random() < self.cfg.final_fraction else self.memory_sample()


# ---------------------------------------------------------------------------
# The model: Qwen2 as llama.cpp runs it (RMSNorm, q/k/v biases, NEOX rotary, GQA, SwiGLU)


def build_model(cfg: TrainConfig, n_vocab: int):
    import torch
    from torch import nn
    from torch.nn import functional as F

    head = cfg.n_embd // cfg.n_head
    kv = head * cfg.n_head_kv

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(cfg.n_embd))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    def rotate(x, cos, sin):  # "rotate halves" (NEOX), as llama.cpp's qwen2 and Hugging Face's Qwen2
        a, b = x[..., : head // 2], x[..., head // 2 :]
        return x * cos + torch.cat((-b, a), dim=-1) * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.ffn_norm = RMSNorm(), RMSNorm()
            self.q = nn.Linear(cfg.n_embd, cfg.n_embd)
            self.k = nn.Linear(cfg.n_embd, kv)
            self.v = nn.Linear(cfg.n_embd, kv)
            self.o = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
            self.gate = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
            self.up = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
            self.down = nn.Linear(cfg.n_ff, cfg.n_embd, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            h = self.attn_norm(x)
            q = self.q(h).view(B, T, cfg.n_head, head).transpose(1, 2)
            k = self.k(h).view(B, T, cfg.n_head_kv, head).transpose(1, 2)
            v = self.v(h).view(B, T, cfg.n_head_kv, head).transpose(1, 2)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            group = cfg.n_head // cfg.n_head_kv  # query head i reads key/value head i // group
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(B, T, cfg.n_embd))
            h = self.ffn_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(n_vocab, cfg.n_embd)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.n_layer))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(cfg.n_embd, n_vocab, bias=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)
            inv = 1.0 / cfg.rope_base ** (torch.arange(0, head, 2).float() / head)
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, ids):
            t = torch.arange(ids.shape[1], dtype=torch.float32)
            angles = torch.outer(t, self.inv_freq)
            angles = torch.cat((angles, angles), dim=-1)
            cos, sin = angles.cos(), angles.sin()
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, cos, sin)
            return self.lm_head(self.norm(x))

    return Model()


def gguf_tensors(model, cfg: TrainConfig) -> dict:
    """The weights under llama.cpp's qwen2 tensor names; NEOX rotary needs no permutation."""
    t = {"token_embd.weight": model.embed.weight, "output_norm.weight": model.norm.weight, "output.weight": model.lm_head.weight}
    for i, b in enumerate(model.blocks):
        p = f"blk.{i}."
        t.update(
            {
                p + "attn_norm.weight": b.attn_norm.weight,
                p + "ffn_norm.weight": b.ffn_norm.weight,
                p + "attn_q.weight": b.q.weight,
                p + "attn_q.bias": b.q.bias,
                p + "attn_k.weight": b.k.weight,
                p + "attn_k.bias": b.k.bias,
                p + "attn_v.weight": b.v.weight,
                p + "attn_v.bias": b.v.bias,
                p + "attn_output.weight": b.o.weight,
                p + "ffn_gate.weight": b.gate.weight,
                p + "ffn_up.weight": b.up.weight,
                p + "ffn_down.weight": b.down.weight,
            }
        )
    return {name: w.detach().float().numpy().copy() for name, w in t.items()}


# ---------------------------------------------------------------------------
# Training


def batch_tensors(samples):
    import torch

    length = max(len(p) + len(r) for p, r, _ in samples)
    ids = torch.zeros((len(samples), length), dtype=torch.long)
    targets = torch.full((len(samples), length), -100, dtype=torch.long)
    for row, (prompt, reply, _) in enumerate(samples):
        seq = prompt + reply
        ids[row, : len(seq)] = torch.tensor(seq)
        # position j predicts token j + 1: the loss covers the reply tokens only
        targets[row, len(prompt) - 1 : len(seq) - 1] = torch.tensor(reply)
    return ids, targets


def greedy_reply(model, prompt: list[int], end: int, limit: int = 24) -> list[int]:
    import torch

    out: list[int] = []
    with torch.no_grad():
        for _ in range(limit):
            nxt = int(model(torch.tensor([prompt + out]))[0, -1].argmax())
            if nxt == end:
                break
            out.append(nxt)
    return out


def check(model, held_out, end: int) -> dict[str, float]:
    """Exact-reply accuracy on held-out samples, by kind."""
    right: dict[str, list[int]] = {}
    for prompt, reply, kind in held_out:
        right.setdefault(kind, []).append(greedy_reply(model, prompt, end) + [end] == reply)
    return {kind: round(sum(v) / len(v), 3) for kind, v in sorted(right.items())}


def seed_everything(cfg) -> None:
    """Python, NumPy and PyTorch from one seed, on a fixed thread count (the float order)."""
    import numpy as np
    import torch

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)


def optimizer(model, cfg):
    """AdamW, weight decay on the matrices only."""
    import torch

    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )


def set_learning_rate(opt, cfg, step: int) -> float:
    """Linear warm-up, then cosine down to min_lr_ratio of the peak."""
    if step <= cfg.warmup:
        lr = cfg.lr * step / cfg.warmup
    else:
        progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        lr = cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
    for group in opt.param_groups:
        group["lr"] = lr
    return lr


def train(cfg: TrainConfig, out: Path) -> dict:
    import torch

    seed_everything(cfg)
    vocab = make_vocab(cfg)
    data = Samples(cfg, vocab, random.Random(cfg.seed))
    checker = Samples(cfg, vocab, random.Random(cfg.seed + 1))
    held_out = [checker.draw() for _ in range(90)]
    model = build_model(cfg, len(vocab.tokens))
    opt = optimizer(model, cfg)
    print(f"vocabulary {len(vocab.tokens)} tokens, {sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    t0 = time.time()
    for step in range(1, cfg.steps + 1):
        lr = set_learning_rate(opt, cfg, step)
        ids, targets = batch_tensors([data.draw() for _ in range(cfg.batch)])
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
        if step % 1000 == 0 or step == cfg.steps:
            model.eval()
            print(f"step {step} held-out exact replies: {check(model, held_out, data.end)}", flush=True)
            model.train()
    model.eval()
    record = {
        "config": asdict(cfg),
        "train_seconds": round(time.time() - t0),
        "final_loss": round(loss.item(), 5),
        "held_out": check(model, held_out, data.end),
        "n_vocab": len(vocab.tokens),
    }
    save(model, cfg, vocab, out, name="memagent-codeword-tiny")
    return record


def save(model, cfg, vocab, out: Path, **gguf) -> None:
    """The trained weights as a GGUF llama.cpp runs, and as PyTorch's .pt beside it (not committed:
    for the torch/llama.cpp agreement check and for looking into the weights later)."""
    import torch

    write_qwen2_gguf(
        out,
        vocab=vocab,
        tensors=gguf_tensors(model, cfg),
        n_head=cfg.n_head,
        n_head_kv=cfg.n_head_kv,
        context_length=2048,
        rope_freq_base=cfg.rope_base,
        **gguf,
    )
    torch.save(model.state_dict(), out.with_suffix(".pt"))


def reference_logits(out: Path, cfg: TrainConfig = TrainConfig()) -> Path:
    """PyTorch's logits for three held-out prompts with their replies, saved beside the GGUF, so a
    test can check llama.cpp computes the same without needing torch (tests/test_trained.py)."""
    import numpy as np
    import torch

    torch.set_num_threads(cfg.threads)
    vocab = make_vocab(cfg)
    model = build_model(cfg, len(vocab.tokens))
    model.load_state_dict(torch.load(out.with_suffix(".pt")))
    model.eval()
    samples = Samples(cfg, vocab, random.Random(cfg.seed + 2))
    arrays, kinds = {}, []
    while len(kinds) < 3:
        prompt, reply, kind = samples.draw()
        if kind in kinds:
            continue
        ids = prompt + reply
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0].numpy()
        arrays[f"ids{len(kinds)}"] = np.array(ids, dtype=np.int32)
        arrays[f"logits{len(kinds)}"] = logits[-TAIL_LOGITS:].astype(np.float32)  # the reply and what leads to it
        kinds.append(kind)
    path = out.with_name(out.stem + "-logits.npz")
    np.savez_compressed(path, count=len(kinds), **arrays)
    return path


# ---------------------------------------------------------------------------
# Evaluation through memagent itself


def evaluate(model_path: Path, n_docs: int, doc_tokens: int, seed: int) -> dict:
    """Greedy runs of memagent's library over generated documents (the tests' settings)."""
    import tempfile

    from memagent_cli import AgentConfig, ask
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    section = TrainConfig.section_tokens
    config = AgentConfig(chunk_tokens=section, memory_tokens=32, answer_tokens=24, temperature=0.0)
    tokenizer = load_tokenizer(read_gguf(model_path))
    rng = random.Random(seed)
    right, cut, misses = 0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_docs):
            doc = codeword.make_document(rng, doc_tokens)
            if codeword.cut_by_boundary(doc, tokenizer.encode, lambda ids: decode(tokenizer, ids), section):
                cut += 1
                continue
            path = Path(tmp) / f"doc{i}.txt"
            path.write_text(doc.text)
            result = ask(codeword.QUESTION, [str(path)], model=model_path, config=config)
            if result.answer == doc.value:
                right += 1
            else:
                misses.append({"doc": i, "expected": doc.value, "answer": result.answer, "memory": result.memory})
    whole = n_docs - cut
    return {
        "docs": n_docs,
        "doc_tokens": doc_tokens,
        "seed": seed,
        "fact_cut_by_boundary": cut,
        "whole": whole,
        "right": right,
        "accuracy_on_whole": round(right / max(1, whole), 4),
        "misses": misses,
    }


def command_line(doc: str | None, steps: int, out: Path, doc_tokens: int):
    """The `train` and `evaluate` commands every training script here has; the caller adds its own."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train and write the GGUF (and a .json record beside it)")
    t.add_argument("--steps", type=int, default=steps)
    t.add_argument("--out", type=Path, default=out)
    e = sub.add_parser("evaluate", help="accuracy of a GGUF through memagent, greedy")
    e.add_argument("--model", type=Path, default=out)
    e.add_argument("--docs", type=int, default=60)
    e.add_argument("--tokens", type=int, default=doc_tokens)
    e.add_argument("--seed", type=int, default=7)
    return ap, sub


def main(argv=None) -> int:
    ap, sub = command_line(__doc__, TrainConfig.steps, OUT, doc_tokens=2000)
    r = sub.add_parser("logits", help="write PyTorch's logits for the trained weights (the .pt) beside the GGUF")
    r.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.command == "train":
        record = train(TrainConfig(steps=args.steps), args.out)
        reference_logits(args.out)
        record["evaluation"] = evaluate(args.out, 60, 2000, 7)
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record, indent=2))
    elif args.command == "logits":
        print(reference_logits(args.out))
    else:
        print(json.dumps(evaluate(args.model, args.docs, args.tokens, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
