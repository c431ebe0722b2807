"""Teach the code-word model to answer in JSON when the final prompt asks for it (`--schema`).

    pip install -e '.[test,train]'
    python tests/data/train_schema.py train       # a few minutes on 2 cores: writes schema.gguf and .json
    python tests/data/train_schema.py evaluate    # right values through memagent's own library, greedy

Starts from codeword.gguf's weights (the same vocabulary and layers) and goes on training on its
samples, with a share of final answers whose problem carries memagent's schema instructions (the
question, a newline, then "Answer with JSON only, matching this JSON Schema:" and the schema): the
reply is the JSON object, the code word as a field's value. The memory updates are trained as
before: under --schema their prompts do not change. So the tests of `--schema` check right values,
not only valid ones: the grammar makes any reply valid JSON, only the model can make it right.

The instructions' text is written out here, not taken from memagent (core/schema.py's INSTRUCTIONS):
a memagent that words them differently gets wrong answers.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository: testkit, the task
sys.path.insert(0, str(HERE))  # the code-word training script, whose model and samples these are

import train_codeword  # noqa: E402
from train_codeword import FINAL_PROMPT, INITIAL_MEMORY  # noqa: E402

from testkit import codeword  # noqa: E402

OUT = HERE / "schema.gguf"
NAME = "memagent-codeword-schema-tiny"
INSTRUCTIONS = "Answer with JSON only, matching this JSON Schema:\n{schema}"
# Field names for the code word: code_word most (the concise form `code_word` makes memagent's own
# question "What is the code word?", the one the memory updates were trained with).
FIELDS = ("code_word", "code_word", "code_word", "codeword", "word", "secret")


@dataclass
class TrainConfig(train_codeword.TrainConfig):
    steps: int = 600  # from codeword.gguf's weights
    lr: float = 1e-3
    warmup: int = 30
    json_fraction: float = 0.4  # answers in JSON; of the rest, final_fraction are \boxed{} answers
    warm_start: str = "codeword.gguf"


def wire(item: dict, multi: bool) -> dict:
    """What the model is asked to write: the item, or {"items": [item, ...]} (--schema-multi)."""
    if not multi:
        return item
    return {"type": "object", "properties": {"items": {"type": "array", "items": item}}, "required": ["items"]}


class Samples(train_codeword.Samples):
    def json_sample(self) -> tuple[list[int], list[int], str]:
        rng = self.rng
        value = None if rng.random() < 0.3 else codeword.random_value(rng)
        memory = INITIAL_MEMORY if value is None else codeword.fact_sentence(value)
        kind = rng.choice(("one", "found", "multi"))
        name = rng.choice(FIELDS)
        spec: dict = {"type": "string"}
        if rng.random() < 0.25:
            spec["description"] = rng.choice(("the code word", "the secret code word", "two words"))
        item: dict = {"type": "object", "properties": {name: spec}, "required": [name]}
        if kind == "found":
            item["properties"]["found"] = {"type": "boolean"}
            item["required"].append("found")
        schema = json.dumps(wire(item, kind == "multi"), separators=(",", ":"))
        problem = codeword.QUESTION + "\n" + INSTRUCTIONS.format(schema=schema)
        said = value or codeword.NO_ANSWER
        if kind == "one":
            reply: dict = {name: said}
        elif kind == "found":
            reply = {name: said, "found": value is not None}
        else:
            reply = {"items": [{name: value}] if value else []}
        prompt = FINAL_PROMPT.format(problem=problem, memory=memory)
        return self.prompt_ids(prompt), self.reply_ids(json.dumps(reply)), f"json-{kind}"

    def draw(self):
        if self.rng.random() < self.cfg.json_fraction:
            return self.json_sample()
        return super().draw()


def check(model, held_out, end: int) -> dict[str, float]:
    """Exact-reply accuracy on held-out samples, by kind (JSON replies run longer than \\boxed{} ones)."""
    right: dict[str, list[int]] = {}
    for prompt, reply, kind in held_out:
        right.setdefault(kind, []).append(train_codeword.greedy_reply(model, prompt, end, limit=64) + [end] == reply)
    return {kind: round(sum(v) / len(v), 3) for kind, v in sorted(right.items())}


def train(cfg: TrainConfig, out: Path) -> dict:
    import torch
    from train_qwenlong import warm_start

    train_codeword.seed_everything(cfg)
    vocab = train_codeword.make_vocab(cfg)
    data = Samples(cfg, vocab, random.Random(cfg.seed))
    checker = Samples(cfg, vocab, random.Random(cfg.seed + 1))
    held_out = [checker.draw() for _ in range(120)]
    model = train_codeword.build_model(cfg, len(vocab.tokens))
    carried = warm_start(model, vocab, HERE / cfg.warm_start)
    assert carried == len(vocab.tokens), "the code-word model's vocabulary is this one"
    model.eval()
    before = check(model, held_out, data.end)
    print(f"from {cfg.warm_start}: held-out exact replies {before}", flush=True)
    model.train()
    opt = train_codeword.optimizer(model, cfg)
    t0 = time.time()
    for step in range(1, cfg.steps + 1):
        lr = train_codeword.set_learning_rate(opt, cfg, step)
        ids, targets = train_codeword.batch_tensors([data.draw() for _ in range(cfg.batch)])
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
    model.eval()
    record = {
        "config": asdict(cfg),
        "train_seconds": round(time.time() - t0),
        "final_loss": round(loss.item(), 5),
        "held_out_before": before,
        "held_out": check(model, held_out, data.end),
        "n_vocab": len(vocab.tokens),
    }
    train_codeword.save(model, cfg, vocab, out, name=NAME)
    return record


def evaluate(model_path: Path, n_docs: int, doc_tokens: int, seed: int) -> dict:
    """Greedy runs of memagent's library with --schema's settings over generated documents: the
    concise form `code_word`, `code_word, found bool`, and `code_word` with --schema-multi."""
    import tempfile

    from memagent_cli import AgentConfig, ask
    from memagent_cli.core.schema import parse_schema
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    section = TrainConfig.section_tokens
    tokenizer = load_tokenizer(read_gguf(model_path))
    rng = random.Random(seed)
    shapes = [("code_word", False), ("code_word, found bool", False), ("code_word", True)]
    right, cut, misses = 0, 0, []
    tally: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n_docs):
            doc = codeword.make_document(rng, doc_tokens, fact=i % 10 != 9)
            if codeword.cut_by_boundary(doc, tokenizer.encode, lambda ids: decode(tokenizer, ids), section):
                cut += 1
                continue
            spec, multi = shapes[i % len(shapes)]
            schema = parse_schema(spec, multi)
            path = Path(tmp) / f"doc{i}.txt"
            path.write_text(doc.text)
            config = AgentConfig(
                chunk_tokens=section,
                memory_tokens=32,
                answer_tokens=48,
                temperature=0.0,
                answer_schema=schema.to_config(),
                answer_schema_multi=multi,
            )
            # `code_word` alone makes the question the model was trained with; the other needs it asked
            asked = "" if (spec, multi) == ("code_word", False) else codeword.QUESTION
            result = ask(asked, [str(path)], model=model_path, config=config)
            said = doc.value or codeword.NO_ANSWER
            expected = (
                [{"code_word": doc.value}]
                if multi and doc.value
                else []
                if multi
                else {"code_word": said, **({"found": doc.value is not None} if "found" in spec else {})}
            )
            good = result.data == expected
            key = spec + (" (multi)" if multi else "")
            tally.setdefault(key, [0, 0])[0] += good
            tally[key][1] += 1
            right += good
            if not good:
                misses.append({"doc": i, "expected": expected, "data": result.data, "memory": result.memory})
    scored = n_docs - cut
    return {
        "docs": n_docs,
        "doc_tokens": doc_tokens,
        "seed": seed,
        "fact_cut_by_boundary": cut,
        "scored": scored,
        "right": right,
        "accuracy": round(right / max(1, scored), 4),
        "by_schema": {k: f"{v[0]}/{v[1]}" for k, v in tally.items()},
        "misses": misses,
    }


def main(argv=None) -> int:
    ap, _ = train_codeword.command_line(__doc__, TrainConfig.steps, OUT, doc_tokens=1000)
    args = ap.parse_args(argv)
    if args.command == "train":
        record = train(TrainConfig(steps=args.steps), args.out)
        record["evaluation"] = evaluate(args.out, 60, 1000, 7)
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record, indent=2))
    else:
        print(json.dumps(evaluate(args.model, args.docs, args.tokens, args.seed), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
