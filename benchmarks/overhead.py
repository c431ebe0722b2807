"""B1: what memagent adds to the engine's own work: the same MemAgent run (tiny model, greedy, every
step its whole budget) by a bare llama-cpp-python loop, by `ask --quiet --no-trace` and by `ask`
drawing its live view on a pty, each a fresh process, interleaved, at two sizes that separate the
fixed cost from the cost per generated token (target 1.10x at the reference budgets).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.engines import tokenizer, tokenizer_and_chat
from benchmarks.harness.fixtures import exact_prose, shared_code
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.runner import memagent, run
from benchmarks.harness.timing import interleave, median

TITLE = "memagent against the bare engine"
QUICK = ["--repeat", "1"]
RATIO = Target("≤ 1.10")
QUESTION = "What happened at the old mill?"
SIZES = {"small": (6, 1000, 256, 64), "large": (8, 5000, 1024, 256)}  # steps, chunk, memory, answer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=3, help="rounds of (bare, quiet, live), interleaved")


def make_inputs(folder: Path, steps: int, chunk: int) -> tuple[Path, Path]:
    """A tiny random Qwen2 model and a document of `steps` full chunks (the last one a token short at most)."""
    model = shared_code("tinymodel").write_tiny_qwen2(folder / "tiny.gguf", seed=1)
    doc = folder / "doc.txt"
    doc.write_text(exact_prose(tokenizer(model), steps * chunk, seed=3), encoding="utf-8")
    return model, doc


def bare(model: Path, doc: Path, question: str, chunk: int, memory_tokens: int, answer_tokens: int) -> dict:
    """The engine alone: the reference protocol with llama-cpp-python's own generate loop."""
    import llama_cpp

    from memagent_cli.core.memagent import INITIAL_MEMORY, final_prompt, memory_prompt
    from memagent_cli.model.runtime import quiet_llama_logs

    t0 = time.perf_counter()
    quiet_llama_logs()
    tok, chat = tokenizer_and_chat(model)
    ids = tok.encode(doc.read_text(encoding="utf-8").strip())
    llm = llama_cpp.Llama(
        model_path=str(model),
        n_ctx=chunk + 2 * memory_tokens + 1024,
        n_batch=2048,
        n_threads=1,
        n_threads_batch=os.cpu_count(),
        verbose=False,
    )
    memory, generated = INITIAL_MEMORY, 0

    def run(prompt: str, budget: int) -> str:
        nonlocal generated
        out = []
        for token in llm.generate(chat.encode(tok, prompt), top_k=1, temp=0.0, repeat_penalty=1.0, min_p=0.0):
            out.append(token)
            if len(out) == budget:
                break
        generated += len(out)
        return llm.detokenize(out).decode("utf-8", errors="replace")

    for start in range(0, len(ids), chunk):
        memory = run(
            memory_prompt(question, memory, tok.decode_bytes(ids[start : start + chunk]).decode("utf-8", "replace")),
            memory_tokens,
        )
    run(final_prompt(question, memory), answer_tokens)
    llm.close()
    return {"seconds": time.perf_counter() - t0, "generated": generated}


def size(steps: int, chunk: int, memory: int, answer: int, repeat: int) -> dict:
    """One size: the three ways, `repeat` rounds interleaved; medians and ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        model, doc = make_inputs(Path(tmp), steps, chunk)
        budgets = ["--chunk-tokens", chunk, "--memory-tokens", memory, "--answer-tokens", answer]
        # --no-speculate: the bare loop drafts nothing; this measures memagent's own cost (B6 measures drafts)
        ask = ["ask", doc, QUESTION, "-m", model, "--threads", "1", *budgets, "--temperature", "0", "--no-speculate", "--json"]
        child = [sys.executable, "-m", "benchmarks.overhead", str(model), str(doc), QUESTION, *map(str, (chunk, memory, answer))]

        def quiet() -> tuple[float, int]:
            r = memagent(*ask, "--quiet", "--no-trace", home=Path(tmp))
            return r.seconds, sum(s["generated_tokens"] for s in r.record()["steps"]) + answer

        def live() -> tuple[float, int]:  # --fresh: with the trace store on, a repeat would be answered from it
            r = memagent(*ask, "--fresh", home=Path(tmp), terminal=True)
            return r.seconds, sum(s["generated_tokens"] for s in r.record()["steps"]) + answer

        def bare_side() -> tuple[float, int]:
            r = run(child)
            return r.seconds, json.loads(r.stdout)["generated"]

        runs = interleave({"bare": bare_side, "quiet": quiet, "live": live}, repeat)
    generated = runs["bare"][0][1]
    assert all(g == generated for v in runs.values() for _, g in v), "the runs did different work"
    seconds = {k: median([s for s, _ in v]) for k, v in runs.items()}
    return {
        "steps": steps,
        "chunk_tokens": chunk,
        "memory_tokens": memory,
        "generated_tokens": generated,
        **{f"{k}_seconds": v for k, v in seconds.items()},
        "quiet_ratio": round(seconds["quiet"] / seconds["bare"], 3),
        "live_ratio": round(seconds["live"] / seconds["bare"], 3),
    }


def measure(args: argparse.Namespace) -> dict:
    result = {name: size(*shape, repeat=args.repeat) for name, shape in SIZES.items()}
    small, large = result["small"], result["large"]
    for view in ("quiet", "live"):  # extra time = fixed + per generated token: two sizes solve for both
        extra_small = small[f"{view}_seconds"] - small["bare_seconds"]
        extra_large = large[f"{view}_seconds"] - large["bare_seconds"]
        per_token = (extra_large - extra_small) / (large["generated_tokens"] - small["generated_tokens"])
        result[f"{view}_us_per_token"] = round(per_token * 1e6, 1)
        result[f"{view}_fixed_ms"] = round((extra_small - per_token * small["generated_tokens"]) * 1e3)
    return result


def rows(m: dict, results: object) -> list[Row]:
    large = m["large"]
    return [
        RATIO.row("memagent --quiet / bare engine, reference budgets", large["quiet_ratio"]),
        RATIO.row("memagent with live view / bare engine, reference budgets", large["live_ratio"]),
        Row("overhead per generated token, quiet / live (µs)", f"{m['quiet_us_per_token']} / {m['live_us_per_token']}"),
        Row("fixed overhead, quiet / live (ms: start-up, imports)", f"{m['quiet_fixed_ms']} / {m['live_fixed_ms']}"),
    ]


def section(m: dict, results: object) -> str:
    s, g = m["small"], m["large"]
    return f"""The same MemAgent run (same document, tiny model, prompts and token budgets; greedy, every
step generating its full budget) three ways, each a fresh process: a bare llama-cpp-python loop
(`Llama.generate`), `memagent ask --quiet --no-trace`, and `memagent ask` drawing its live view
on a pseudo-terminal with the trace store on. Two sizes separate the fixed cost (start-up,
imports, reading) from the cost per generated token:

| size | generated tokens | bare (s) | quiet (s) | live (s) |
|---|---|---|---|---|
| short budgets (1000-token chunks, 256-token memory) | {s["generated_tokens"]} | {s["bare_seconds"]} | {s["quiet_seconds"]} | {s["live_seconds"]} |
| reference budgets (5000-token chunks, 1024-token memory) | {g["generated_tokens"]} | {g["bare_seconds"]} | {g["quiet_seconds"]} | {g["live_seconds"]} |

The per-token and fixed figures are a two-point fit between the sizes and swing by tens of µs
between runs on this shared 2-core machine (they can come out negative); the ratios are the
robust figures."""


if __name__ == "__main__":  # the bare side's own process: MODEL DOC QUESTION CHUNK MEMORY ANSWER
    model, doc, question, chunk, memory, answer = sys.argv[1:]
    print(json.dumps(bare(Path(model), Path(doc), question, int(chunk), int(memory), int(answer))))
