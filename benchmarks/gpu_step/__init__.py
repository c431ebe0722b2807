"""B4: one reference MemAgent step (a 5,000-token chunk, 1,024 generated tokens) on a GPU, on a
random-weight Qwen2.5-7B-shaped Q4_K_M, through memagent and through the bare engine: the step
(bare, memagent), memagent's engine against the bare loop at 1, 4 and 16 sequences (engine),
end to end (e2e), sequences batched (batch), what checking k drafts costs (verify), doctor, and B6's
cases on the GPU (speculate); flash attention on and off.

    python -m benchmarks run B4 --device gpu [--parts ...]   (on a lent GPU: the `gpu` part)
    python -m benchmarks run B4                              (this CPU: the engine part, SmolLM2)

Each run keeps the other part. The section in docs/PERFORMANCE.md says how each is measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_step.page import rows, section
from benchmarks.harness.engines import Bare, engine_vs_bare, tokenizer_and_chat
from benchmarks.harness.fixtures import QWEN25_VOCAB, exact_prose, smollm2
from benchmarks.harness.results import gpu_name, now
from benchmarks.harness.runner import log, run
from benchmarks.harness.runner import memagent as memagent_run

TITLE = "one step on a GPU"
QUICK = ["--engine-tokens", "32", "--sequences", "1,4"]
GPU_PARTS = "bare,memagent,engine,e2e,batch,verify,doctor"
__all__ = ["TITLE", "QUICK", "add_arguments", "measure", "rows", "section"]

QUESTION = "What did the committee decide about the old mill?"
QUESTIONS = [
    QUESTION,
    "Who wrote the letter to the harbour master?",
    "When was the bridge over the river rebuilt?",
    "Which village lost its school, and why?",
]


def questions(n: int) -> list[str]:
    """n questions for n sequences: the four, repeated with spaces after them (distinct for `ask -q`;
    the memory prompt strips the spaces)."""
    return [QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS)) for i in range(n)]


def make_doc(model: Path, folder: Path, chunk: int) -> Path:
    """A document of exactly `chunk` tokens (or just under): one step."""
    doc = folder / "doc.txt"
    doc.write_text(exact_prose(tokenizer_and_chat(model)[0], chunk, seed=7), encoding="utf-8")
    return doc


def step_prompts(model: Path, doc: Path, questions: list[str]) -> list[list[int]]:
    """The memory prompt of the first step for each question, as memagent builds it."""
    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt

    tok, chat = tokenizer_and_chat(model)
    chunk_text = doc.read_text(encoding="utf-8")
    return [chat.encode(tok, memory_prompt(q, INITIAL_MEMORY, chunk_text)) for q in questions]


# --- the bare engine ---------------------------------------------------------------------------


def bare_step(engine: Bare, prompts: list[list[int]], gen: int) -> dict:
    """All sequences' prompts, then `gen` tokens each, one llama_decode per generation step."""
    engine.clear()
    n = len(prompts)
    t0 = time.perf_counter()
    for seq, ids in enumerate(prompts):
        engine.prompt(ids[:-1], seq)
    # every sequence's last prompt token in one batch, as a batched engine starts its generation
    engine.decode([(ids[-1], len(ids) - 1, seq, True) for seq, ids in enumerate(prompts)])
    last = [engine.sample(i) for i in range(n)]
    t1 = time.perf_counter()
    pos = [len(ids) for ids in prompts]
    first_token_at = t1
    for _ in range(gen - 1):
        engine.decode([(last[s], pos[s], s, True) for s in range(n)])
        last = [engine.sample(i) for i in range(n)]
        pos = [p + 1 for p in pos]
    engine.sync()
    t2 = time.perf_counter()
    return {
        "sequences": n,
        "prompt_tokens": sum(len(p) for p in prompts),
        "prompt_seconds": round(t1 - t0, 4),
        "generate_seconds": round(t2 - first_token_at, 4),
        "generated_tokens": n * gen,
        "prompt_tok_s": round(sum(len(p) for p in prompts) / (t1 - t0), 1),
        "gen_tok_s": round(n * (gen - 1) / (t2 - first_token_at), 1),
        "step_seconds": round(t2 - t0, 4),
    }


def verify_cost(engine: Bare, prompt: list[int], ks: tuple[int, ...] = (1, 2, 4, 8, 16), repeat: int = 20) -> dict:
    """ms of one llama_decode of k tokens after the prompt (what checking k drafts costs)."""
    engine.clear()
    engine.prompt(prompt)
    engine.sync()
    n = len(prompt)
    out = {}
    for k in ks:
        times = [engine.timed_decode(n, [prompt[(n - k + i) % n] for i in range(k)]) for _ in range(repeat + 2)]
        out[k] = round(statistics.median(times[2:]) * 1000, 3)  # two warm-ups: graph capture, first launch
    return {"ms": out, "ratio": {k: round(v / out[1], 3) for k, v in out.items()}}


# --- memagent ------------------------------------------------------------------------------------


def memagent(args_: list[str], home: Path) -> tuple[dict, float]:
    r = memagent_run(*args_, home=home, cwd=home)
    return r.record(), r.seconds


def ask_args(
    model: Path, doc: Path, questions: list[str], chunk: int, memory: int, answer: int, fa: bool | None, *extra: str
) -> list[str]:
    a = ["ask", str(doc)]
    if len(questions) == 1:
        a.append(questions[0])
    else:
        for q in questions:
            a += ["-q", q]
    a += ["-m", str(model), "--json", "--quiet", "--no-trace", "--temperature", "0", "--gpu-layers", "auto"]
    a += ["--chunk-tokens", str(chunk), "--memory-tokens", str(memory), "--answer-tokens", str(answer)]
    if fa is not None:
        a.append("--flash-attn" if fa else "--no-flash-attn")
    return [*a, *extra]


def bare_process(model: Path, doc: Path, n_ctx: int, memory: int, answer: int, fa: bool) -> float:
    """The same protocol as one `ask` (load, the step, the final answer) in a fresh process."""
    args = [str(model), str(doc), str(n_ctx), str(memory), str(answer), str(int(fa))]
    return run([sys.executable, "-m", "benchmarks.gpu_step", *args]).seconds


def bare_run(model: Path, doc: Path, n_ctx: int, memory: int, answer: int, fa: bool) -> None:
    from memagent_cli.core.memagent import final_prompt

    engine = Bare(model, n_ctx, 1, fa)
    prompt = step_prompts(model, doc, [QUESTION])[0]
    engine.prompt(prompt)
    ids = engine.generate(len(prompt), memory)
    tok, chat = tokenizer_and_chat(model)
    final = chat.encode(tok, final_prompt(QUESTION, tok.decode_bytes(ids).decode("utf-8", "replace")))
    engine.clear()
    engine.prompt(final)
    engine.generate(len(final), answer)
    engine.sync()
    engine.close()


# --- the run -----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="which part of the results to measure")
    parser.add_argument("--shape", default="qwen2.5-7b", help="the random-weight model's shape (GPU)")
    parser.add_argument("--work", type=Path, default=None, help="where the model is built (kept between runs)")
    parser.add_argument("--vocab", type=Path, default=None)
    parser.add_argument("--chunk", type=int, help="chunk tokens (default: 5000 on a GPU, 400 on this CPU)")
    parser.add_argument("--memory", type=int, default=1024)
    parser.add_argument("--answer", type=int, default=32)
    parser.add_argument("--sequences", default="1,4,16")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--parts", help=f"default: {GPU_PARTS} on a GPU, engine on this CPU")
    parser.add_argument("--model", type=Path, default=None, help="this GGUF instead of building --shape (CPU: SmolLM2)")
    parser.add_argument("--engine-tokens", type=int, help="tokens per sequence in the engine part (256 GPU, 64 CPU)")


def measure(args: argparse.Namespace) -> dict:
    gpu = args.device == "gpu"
    args.gpu_layers = -1 if gpu else 0
    args.parts = args.parts or (GPU_PARTS if gpu else "engine")
    args.chunk = args.chunk or (5000 if gpu else 400)
    args.engine_tokens = args.engine_tokens or (256 if gpu else 64)
    if not gpu:
        args.model = args.model or smollm2()
        args.repeat = max(args.repeat, 3)
        args.work = args.work or Path(tempfile.gettempdir()) / "memagent-b4-cpu"
    measured = _measure(args)
    if gpu:
        return {"gpu": measured}
    return {"cpu": {**measured, "model": "SmolLM2-135M-Instruct Q4_1", "when": now()}}


def _measure(args: argparse.Namespace) -> dict:
    parts = set(args.parts.split(","))
    seqs = [int(x) for x in args.sequences.split(",")]

    import llama_cpp

    from benchmarks.harness import shapes
    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt
    from memagent_cli.model.runtime import available_cores

    work = args.work or Path(tempfile.mkdtemp(prefix="memagent-b4-"))
    model = args.model or shapes.build(args.shape, work, args.vocab or QWEN25_VOCAB)
    work.mkdir(parents=True, exist_ok=True)
    doc = make_doc(model, work, args.chunk)
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "device": gpu_name() if args.gpu_layers != 0 else f"this CPU ({available_cores()} cores)",
        "offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "shape": args.model.name if args.model else args.shape,
        "model_bytes": model.stat().st_size,
        "chunk_tokens": args.chunk,
        "memory_tokens": args.memory,
    }
    log(json.dumps(results))
    prompt = step_prompts(model, doc, [QUESTION])[0]
    n_ctx = len(prompt) + args.memory + 64

    if "memagent" in parts or "bare" in parts:
        for fa in (True, False):
            key = "fa_on" if fa else "fa_off"
            rows: dict = {"bare": [], "memagent": [], "bare_wall": [], "memagent_wall": []}
            for _ in range(args.repeat):
                if "bare" in parts:
                    engine = Bare(model, n_ctx, 1, fa)
                    bare_step(engine, [prompt], 16)  # warm-up: kernels, CUDA graphs
                    rows["bare"].append(bare_step(engine, [prompt], args.memory))
                    engine.close()
                if "memagent" in parts:
                    # against the bare loop, which drafts nothing: memagent's own cost alone
                    memagent_args = ask_args(model, doc, [QUESTION], args.chunk, args.memory, args.answer, fa, "--no-speculate")
                    out, wall = memagent(memagent_args, home)
                    step = out["steps"][0]
                    rows["memagent"].append({"step_seconds": step["seconds"], "generated": step["generated_tokens"]})
                    rows["memagent_wall"].append(round(wall, 3))
                    rows["gpu"], rows["device"] = out.get("gpu"), out.get("device")
                    rows["bare_wall"].append(round(bare_process(model, doc, n_ctx, args.memory, args.answer, fa), 3))
            if rows["bare"] and rows["memagent"]:
                b = statistics.median(r["step_seconds"] for r in rows["bare"])
                m = statistics.median(r["step_seconds"] for r in rows["memagent"])
                rows["step_ratio"] = round(m / b, 3)
                rows["wall_ratio"] = round(statistics.median(rows["memagent_wall"]) / statistics.median(rows["bare_wall"]), 3)
            results[key] = rows
            log(key, json.dumps(rows))

    if "engine" in parts:
        # memagent against the bare loop at 1, 4 and 16 sequences, the step's prompts (B4's target);
        # flash attention as memagent picks it: on where layers run on a GPU
        chunk_text = doc.read_text(encoding="utf-8")
        messages = [memory_prompt(q, INITIAL_MEMORY, chunk_text) for q in questions(max(seqs))]
        results["engine"] = engine_vs_bare(model, messages, args.engine_tokens, seqs, args.repeat, args.gpu_layers)

    if "e2e" in parts:
        # memagent end to end with its defaults (flash attention on where layers are on the GPU):
        # one question with drafts and without, then 1, 4 and 16 questions batched.
        rows = {}
        for spec in (True, False):
            flag = "--speculate" if spec else "--no-speculate"
            out, wall = memagent(ask_args(model, doc, [QUESTION], args.chunk, args.memory, args.answer, None, flag), home)
            step = out["steps"][0]
            rows[flag] = {
                "step_seconds": step["seconds"],
                "generated": step["generated_tokens"],
                "drafted": step["drafted_tokens"],
                "accepted": step["accepted_tokens"],
                "wall": round(wall, 3),
                "device": out.get("device"),
            }
            log("e2e", flag, json.dumps(rows[flag]))
        for n in seqs:
            qs = questions(n)
            extra = ("--batch", "--parallel", str(n))
            out, wall = memagent(ask_args(model, doc, qs, args.chunk, args.memory, args.answer, None, *extra), home)
            runs = out.get("results", [out])
            generated = sum(s["generated_tokens"] for r in runs for s in r["steps"])
            steps = [s["seconds"] for r in runs for s in r["steps"]]
            rows[f"questions_{n}"] = {
                "wall": round(wall, 3),
                "generated": generated,
                "longest_step_seconds": max(steps),
                "device": runs[0].get("device"),
            }
            log("e2e", n, json.dumps(rows[f"questions_{n}"]))
        one = rows.get("questions_1")
        if one:
            for n in seqs:
                row = rows[f"questions_{n}"]
                row["wall_vs_n_single_runs"] = round(row["wall"] / (n * one["wall"]), 3)
        results["e2e"] = rows

    if "batch" in parts:
        for fa in (True, False):
            key = "batch_fa_on" if fa else "batch_fa_off"
            engine = Bare(model, n_ctx, max(seqs), fa)
            prompts_all = step_prompts(model, doc, questions(max(seqs)))
            rows = {}
            for n in seqs:
                bare_step(engine, prompts_all[:n], 8)  # warm-up at this batch shape
                rows[n] = bare_step(engine, prompts_all[:n], min(args.memory, 512))
            rows["gain_vs_1"] = {n: round(rows[n]["gen_tok_s"] / rows[seqs[0]]["gen_tok_s"], 2) for n in seqs}
            engine.close()
            results[key] = rows
            log(key, json.dumps(rows))

    if "verify" in parts:
        for fa in (True, False):
            engine = Bare(model, n_ctx, 1, fa)
            results["verify_fa_on" if fa else "verify_fa_off"] = verify_cost(engine, prompt)
            engine.close()
            log("verify", fa, json.dumps(results["verify_fa_on" if fa else "verify_fa_off"]))

    if "doctor" in parts:
        memagent_run("models", "add", model, "--name", "b4", home=home, check=False)
        out, _ = memagent(["doctor", "--json"], home)
        results["doctor"] = {"gpu": out.get("gpu"), "models": out.get("models")}
        log("doctor", json.dumps(results["doctor"]))

    if "speculate" in parts:  # B6's two cases with every layer on the GPU
        from benchmarks import speculate

        speculate.GPU_LAYERS = -1
        results["speculate"] = {"copying": speculate.copying(args.repeat), "real": speculate.real(args.repeat, 2000, 256, 3)}
    return results
