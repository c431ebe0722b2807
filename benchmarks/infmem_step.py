"""B17: one InfMem step at Qwen3-4B's exact shapes and one MemAgent step at Qwen2.5-7B's (random
weights, every call its whole budget), memagent's engine against llama-cpp-python's generate loop
(target 1.05x), and what each makes of a 1M-token input.

A CPU run is the `cpu` part of the results, a GPU run (benchmarks/gpu/infmem.sh) the `gpu` part.
The section in docs/PERFORMANCE.md says how they are measured.
"""

from __future__ import annotations

import argparse
import statistics
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from benchmarks.harness import shapes
from benchmarks.harness.engines import bare_think, finished, memagent_engine
from benchmarks.harness.fixtures import QWEN25_VOCAB, exact_prose
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.results import today
from benchmarks.harness.runner import log

TITLE = "an InfMem step at Qwen3-4B's shapes, a MemAgent step at Qwen2.5-7B's"
QUICK = ["--layers", "2", "--repeat", "1", "--memory-tokens", "32"]
RATIO = Target("≤ 1.05")

QUESTION = "What did the committee decide about the old mill?"
CHUNK, UNIT, MEMORY = 5000, 500, 1024
DOCUMENT = 1_000_000
STOPS = (0.10, 0.25, 1.0)


def infmem_prompts(tok, memory_tokens: int) -> list:
    """The step's two prompts (RawPrompt), as core/infmem_loop renders them."""
    from memagent_cli.core import infmem
    from memagent_cli.core.infmem_loop import raw_chat

    memory = exact_prose(tok, memory_tokens, seed=11)
    history = infmem.history_text(100, 200, [("old mill", 8), ("committee decision", 8), ("vote on the mill", 8)])
    planner = raw_chat(
        infmem.TOOL_SYSTEM, infmem.PLANNER_PROMPT.format(prompt=QUESTION, retrieval_history=history, memory=memory)
    )
    units = [exact_prose(tok, UNIT, seed=20 + k) for k in range(infmem.RESULTS)]
    write = raw_chat(
        None,
        infmem.MEMORY_PROMPT.format(
            prompt=QUESTION, retrieve=infmem.retrieved_block(units), chunk=exact_prose(tok, CHUNK, seed=7), memory=memory
        ),
    )
    return [planner, write]


def memagent_infmem(eng, prompts: list, budget: int) -> dict:
    """The step through memagent's engine: each prompt's two stages, as _Reading.think makes them."""
    from memagent_cli.core import infmem
    from memagent_cli.model.engine import Sampling

    def call(prompt, tokens: int):
        return finished(eng.complete_raw(prompt, tokens, Sampling(temperature=0.0, top_p=1.0)))

    t0 = time.perf_counter()
    out = {"prompt_tokens": 0, "generated": 0, "prompt_seconds": 0.0, "generate_seconds": 0.0}
    for i, prompt in enumerate(prompts):
        first = call(prompt, infmem.THINKING_TOKENS)
        second = call(prompt.then(infmem.closed_thinking(first.text)), budget)
        if i == 0:
            out["planner_seconds"] = time.perf_counter() - t0
        for done in (first, second):
            out["prompt_tokens"] += done.prompt_tokens - done.cached_tokens
            out["generated"] += done.completion_tokens
            out["prompt_seconds"] += done.prompt_seconds
            out["generate_seconds"] += done.generate_seconds
    out["seconds"] = time.perf_counter() - t0
    return out


def bare_infmem(llm, tok, prompts: list, budget: int) -> dict:
    """The same generations with llama-cpp-python alone (its own prefix reuse, as B16)."""
    t0 = time.perf_counter()
    generated = 0
    for prompt in prompts:
        first, second = bare_think(llm, tok, prompt, budget)
        generated += len(tok.encode(first)) + len(tok.encode(second))
    return {"seconds": time.perf_counter() - t0, "generated_about": generated}


def memagent_step(eng, memory_tokens: int) -> dict:
    """One MemAgent memory step through memagent's engine (rule: the memory prompt, 1,024 written)."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.engine import Sampling

    memagent = get("memagent")
    tok = eng.tokenizer
    message = memagent.memory_prompt(QUESTION, exact_prose(tok, memory_tokens, seed=11), exact_prose(tok, CHUNK, seed=7))
    t0 = time.perf_counter()
    done = finished(eng.complete(message, memory_tokens, Sampling(temperature=0.0)))
    return {
        "seconds": time.perf_counter() - t0,
        "prompt_tokens": done.prompt_tokens - done.cached_tokens,
        "generated": done.completion_tokens,
        "prompt_seconds": done.prompt_seconds,
        "generate_seconds": done.generate_seconds,
    }


def answer_seconds(per_token: float, prompt_rate: float, thinking: bool) -> float:
    """The final answer's cost from a step's rates: its prompt (the memory and the question, about
    1,300 tokens) and its reply (InfMem: the thinking's 1,024 tokens and a short answer; MemAgent:
    a short answer)."""
    return 1300 / prompt_rate + (1024 + 32 if thinking else 32) * per_token


def median(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", action="store_true", help="every layer on the GPU (the gpu part)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/b17"))
    parser.add_argument("--vocab", type=Path, default=QWEN25_VOCAB)
    parser.add_argument("--layers", type=int, help="fewer layers than the real models (a quick check, not a result)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--memory-tokens", type=int, default=MEMORY)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: memagent's choice)")
    parser.add_argument("--parts", default="build,step")


def measure(args: argparse.Namespace) -> dict:
    parts = set(args.parts.split(","))

    import llama_cpp

    from memagent_cli.model.runtime import quiet_llama_logs

    quiet_llama_logs()
    models = {}
    for shape in ("qwen3-4b", "qwen2.5-7b"):
        layers = args.layers or shapes.SHAPES[shape]["n_layer"]
        t0 = time.perf_counter()
        models[shape] = shapes.build(shape, args.work, args.vocab, fast=True, n_layer=layers)
        log(f"{models[shape].name}: {models[shape].stat().st_size / 1e9:.2f} GB ({time.perf_counter() - t0:.0f} s)")
    if "step" not in parts:
        return {}
    when = today()

    budget = args.memory_tokens
    n_ctx = 12288  # the write's prompt (about 8,300 tokens) and both stages' 2,048
    options = {"gpu_layers": -1 if args.gpu else 0, "threads": args.threads, "speculate": False, "batch": False}
    four = memagent_engine(models["qwen3-4b"], n_ctx, **options)
    tok4 = four.tokenizer
    prompts = infmem_prompts(tok4, budget)
    llm = llama_cpp.Llama(
        model_path=str(models["qwen3-4b"]),
        n_ctx=n_ctx,
        n_batch=min(2048, n_ctx),
        n_ubatch=512,
        n_gpu_layers=-1 if args.gpu else 0,
        n_threads=four.threads,
        n_threads_batch=four.threads_batch,
        flash_attn=four.flash_attn,
        verbose=False,
    )
    log(f"InfMem step at Qwen3-4B's shapes on {four.description}")
    ours, bare = [], []
    for r in range(args.repeat):
        ours.append(memagent_infmem(four, prompts, budget))
        bare.append(bare_infmem(llm, tok4, prompts, budget))
        log(f"  round {r + 1}: memagent {ours[-1]['seconds']:.1f} s, bare {bare[-1]['seconds']:.1f} s")
    device = four.description
    four.close()
    del llm

    seven = memagent_engine(models["qwen2.5-7b"], 8192, **options)
    log(f"MemAgent step at Qwen2.5-7B's shapes on {seven.description}")
    steps7 = []
    for r in range(args.repeat):
        steps7.append(memagent_step(seven, budget))
        log(f"  round {r + 1}: {steps7[-1]['seconds']:.1f} s")
    seven.close()

    infmem_s, memagent_s = median(ours, "seconds"), median(steps7, "seconds")
    per_token4 = median(ours, "generate_seconds") / statistics.median(o["generated"] for o in ours)
    rate4 = statistics.median(o["prompt_tokens"] for o in ours) / median(ours, "prompt_seconds")
    per_token7 = median(steps7, "generate_seconds") / statistics.median(o["generated"] for o in steps7)
    rate7 = statistics.median(o["prompt_tokens"] for o in steps7) / median(steps7, "prompt_seconds")
    planner_s = median(ours, "planner_seconds")  # the stopping step calls the planner alone
    chunks = DOCUMENT // CHUNK
    index_s = 0.29  # B15: the 1M-token index
    tta = {
        f"infmem_stop_{int(f * 100)}pct": round(
            index_s + round(f * chunks) * infmem_s + (planner_s if f < 1 else 0) + answer_seconds(per_token4, rate4, True), 1
        )
        for f in STOPS
    }
    tta["memagent_all"] = round(chunks * memagent_s + answer_seconds(per_token7, rate7, False), 1)
    row = {
        "when": when,
        "label": "a GPU" if args.gpu else "this CPU",
        "conditions": device,
        "device": device,
        "layers": args.layers or "real",
        "memory_tokens": budget,
        "repeat": args.repeat,
        "infmem_step": {
            "memagent_seconds": infmem_s,
            "planner_seconds": planner_s,
            "bare_seconds": median(bare, "seconds"),
            "ratio": round(infmem_s / median(bare, "seconds"), 3),
            "prompt_tokens": ours[0]["prompt_tokens"],
            "generated": ours[0]["generated"],
            "prompt_tok_s": round(rate4, 1),
            "generate_tok_s": round(1 / per_token4, 1),
        },
        "memagent_step_7b": {
            "seconds": memagent_s,
            "prompt_tokens": steps7[0]["prompt_tokens"],
            "generated": steps7[0]["generated"],
            "prompt_tok_s": round(rate7, 1),
            "generate_tok_s": round(1 / per_token7, 1),
        },
        "step_ratio_infmem4b_over_memagent7b": round(infmem_s / memagent_s, 3),
        "time_to_answer_1m_seconds": tta,
    }
    return {"gpu" if args.gpu else "cpu": row}


def _r(x: float, places: int = 0) -> str:
    """Rounded half up, as a reader rounds (Python's round() goes to even: 928.5 to 928)."""
    q = Decimal(str(x)).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP)
    return f"{q:,}"


def _break_even(tta: dict) -> float:
    """The share of the chunks at which InfMem's time to answer reaches MemAgent's (linear in it)."""
    low, high = tta["infmem_stop_10pct"], tta["infmem_stop_100pct"]
    return 0.1 + (tta["memagent_all"] - low) / ((high - low) / 0.9)


def rows(m: dict, results: object) -> list[Row]:
    out = []
    for part in ("gpu", "cpu"):
        if part in m:
            r = m[part]
            where = m[part].get("label", part)
            what = f"memagent / bare engine, one InfMem step at Qwen3-4B's shapes, {where}"
            out.append(RATIO.row(what, r["infmem_step"]["ratio"]))
            what = f"an InfMem step (4B) / a MemAgent step (7B), full budgets, {where}"
            out.append(Row(what, f"{_r(r['step_ratio_infmem4b_over_memagent7b'], 2)}×"))
    return out


def section(m: dict, results: object) -> str:
    g, c = m.get("gpu"), m.get("cpu")
    repeat = (g or c or {}).get("repeat")
    out = [
        f"""`python -m benchmarks run B17` (on a GPU: `benchmarks/gpu/infmem.sh`, which builds llama-cpp-python
with CUDA and the models in the same call). Random-weight models of each model's exact shapes at
Q4_K_M (harness/shapes.py: a 2-layer model quantized by llama.cpp, its layers' bytes repeated by llama.cpp's
own rule for which layers get more bits), the real Qwen2.5 vocabulary with Qwen3's added tokens for
the 4B. Their control tokens never win a greedy choice, so every call writes its whole budget: the
longest step each protocol can take. One InfMem step is the planner (Qwen-Agent's tool system
message, a 1,024-token memory, three searches in the history) and the memory write (a 5,000-token
chunk, the four 500-token units a search found, the memory), each in two stages: 1,024 thinking
tokens, the forced close, 1,024 more. One MemAgent step is the 5,000-token chunk and a 1,024-token
memory, 1,024 tokens written. Drafts off on both engines (the bare loop has none; random weights
never accept one), one context, the bare loop llama-cpp-python's `Llama.generate` on the same ids
with the same context settings; interleaved, median of {repeat}."""
    ]
    if g:
        i, s7, t = g["infmem_step"], g["memagent_step_7b"], g["time_to_answer_1m_seconds"]
        faster = s7["generate_tok_s"] and i["generate_tok_s"] / s7["generate_tok_s"]
        out.append(f"""**{g["when"]}, {g["label"]}** ({g["conditions"]}):

| | prompt tokens read | generated | memagent | bare | memagent / bare |
|---|---|---|---|---|---|
| InfMem step, Qwen3-4B shapes | {i["prompt_tokens"]:,} ({_r(i["prompt_tok_s"])} tok/s) | {i["generated"]:,} ({_r(i["generate_tok_s"])} tok/s) | {_r(i["memagent_seconds"], 2)} s (planner {_r(i["planner_seconds"], 2)} s) | {_r(i["bare_seconds"], 2)} s | **{i["ratio"]}×** |
| MemAgent step, Qwen2.5-7B shapes | {s7["prompt_tokens"]:,} ({_r(s7["prompt_tok_s"])} tok/s) | {s7["generated"]:,} ({_r(s7["generate_tok_s"])} tok/s) | {_r(s7["seconds"], 2)} s | — | — |

At full budgets an InfMem step costs {_r(g["step_ratio_infmem4b_over_memagent7b"], 2)}× a MemAgent step: it generates four times the tokens
(two calls, each thinking first), and a 4B model decodes only {_r(faster, 2)}× faster than a 7B one on this GPU
(decoding is bound by reading the weights, and both are a few GB). Time to answer a 1M-token input
(200 chunks of 5,000 tokens), each read chunk one step, the stopping step's planner call, the final
answer (1,024 thinking tokens for InfMem) and the index (0.29 s, B15):

| InfMem-4B stops after | 10% of the chunks | 25% | 100% | MemAgent-7B (reads all) |
|---|---|---|---|---|
| {g.get("short", "GPU")} | {_r(t["infmem_stop_10pct"])} s | {_r(t["infmem_stop_25pct"])} s | {_r(t["infmem_stop_100pct"])} s | {_r(t["memagent_all"])} s |

So at the longest thinking InfMem answers sooner than MemAgent only when it stops within the first
~{_r(100 * _break_even(t))}% of the chunks. The paper's 3.9× less inference time on average is measured with a trained model that
closes its thinking early and stops early; these figures are the upper bound of a step, not what
a trained model's steps cost.""")
    if c:
        i, s7, t = c["infmem_step"], c["memagent_step_7b"], c["time_to_answer_1m_seconds"]
        hours = {k: v / 3600 for k, v in t.items()}
        than = f", not {_r(g['step_ratio_infmem4b_over_memagent7b'], 2)}×" if g else ""
        out.append(f"""**{c["when"]}, {c["label"]}** ({c["conditions"]}):

| | memagent | bare | memagent / bare |
|---|---|---|---|
| InfMem step, Qwen3-4B shapes | {_r(i["memagent_seconds"])} s | {_r(i["bare_seconds"])} s | **{i["ratio"]}×** |
| MemAgent step, Qwen2.5-7B shapes | {_r(s7["seconds"])} s | — | — |

Here prompts are read at {i["prompt_tok_s"]} tok/s (4B) and {s7["prompt_tok_s"]} tok/s (7B), and tokens are written at {i["generate_tok_s"]} and {s7["generate_tok_s"]}
tok/s, so reading costs far more than on a GPU, and the 4B's smaller size shows: an InfMem step is
{_r(c["step_ratio_infmem4b_over_memagent7b"], 2)}× a MemAgent step{than}. For a 1M-token input: InfMem {_r(hours["infmem_stop_10pct"], 1)} h stopping after 10% of the
chunks, {_r(hours["infmem_stop_25pct"], 1)} h after 25%, {_r(hours["infmem_stop_100pct"])} h reading all, against MemAgent-7B's {_r(hours["memagent_all"])} h. On two cores neither is a way
to read a million tokens; the break-even is the same kind of figure (about {_r(100 * _break_even(t))}% of the chunks).""")
    return "\n\n".join(out)
