"""B4: one reference MemAgent step on a GPU, through memagent and through the bare engine.

The reference step: a 5,000-token chunk in the memory prompt, 1,024 generated memory tokens,
on a random-weight Qwen2.5-7B-shaped Q4_K_M built by benchmarks/shapes.py (its control tokens
never win, so every step generates its whole budget). Everything is measured side by side in
one run, on one device:

  bare      llama.cpp through llama-cpp-python's low-level API, no Python loop beyond one
            llama_decode per token: the engine's own time for the step
  memagent  `memagent ask --json` as a user runs it; the step's own seconds (prompt + generation)
            from its JSON, and the wall time of the whole process against a bare process doing
            the same protocol (load, the step, a short final answer)
  engine    memagent's engine against the bare loop at 1, 4 and 16 sequences, the step's prompts
            already read, generation at the same shape (engine_vs_bare; flash attention on where
            layers run on a GPU). Target: memagent at most 1.05x the bare loop's time
  batch     N sequences (1, 4, 16) in one llama.cpp context (n_seq_max = N, per-sequence KV): each
            generation step of all sequences is one llama_decode; aggregate tokens per second
  verify    what a speculative check of k drafted tokens costs: one llama_decode of k tokens at
            the step's context against one of a single token (k = 1 .. 16)

each with flash attention on and off (engine: as memagent picks it). Also `memagent doctor --json`
and the `gpu` record of `ask --json`, which say whether every layer went to the GPU.

    python benchmarks/gpu_step.py [--shape qwen2.5-7b] [--work DIR] [--json FILE]

The engine part on this CPU, with a small model (the CPU figure B4 reports beside the GPU's):

    python benchmarks/gpu_step.py --parts engine --gpu-layers 0 --model SmolLM2.gguf --chunk 400 --engine-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

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


def device_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        return out or "no NVIDIA GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "no NVIDIA GPU"


def make_doc(model: Path, folder: Path, chunk: int) -> Path:
    """A document of exactly `chunk` tokens: one step."""
    from helpers import words

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    tok = load_tokenizer(read_gguf(model))
    n = chunk
    while True:
        text = words(n, seed=7)
        ids = tok.encode(text)
        if len(ids) >= chunk:
            break
        n = int(n * 1.3)
    text = tok.decode_bytes(ids[:chunk]).decode("utf-8", errors="ignore")
    # the cut may leave a token that re-encodes differently: trim until it is exactly `chunk` or just under
    while len(tok.encode(text.strip())) > chunk:
        text = text[:-1]
    doc = folder / "doc.txt"
    doc.write_text(text.strip(), encoding="utf-8")
    return doc


def step_prompts(model: Path, doc: Path, questions: list[str]) -> list[list[int]]:
    """The memory prompt of the first step for each question, as memagent builds it."""
    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
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
    import llama_cpp

    engine.clear()
    engine.prompt(prompt)
    engine.sync()
    n = len(prompt)
    out = {}
    for k in ks:
        times = []
        for r in range(repeat + 2):
            t0 = time.perf_counter()
            engine.decode([(prompt[(n - k + i) % n], n + i, 0, True) for i in range(k)])
            engine.sync()
            if r >= 2:  # two warm-ups: graph capture, first launch
                times.append(time.perf_counter() - t0)
            llama_cpp.llama_memory_seq_rm(engine.mem, 0, n, -1)
        out[k] = round(statistics.median(times) * 1000, 3)
    return {"ms": out, "ratio": {k: round(v / out[1], 3) for k, v in out.items()}}


# --- memagent's engine against the bare loop, N sequences at the same shape ---------------------


def engine_vs_bare(
    model: Path,
    messages: list[str],
    gen: int,
    counts: list[int],
    *,
    gpu_layers: int,
    flash_attn: bool,
    threads: int,
    repeat: int,
) -> dict:
    """memagent's engine against a bare llama_decode loop at the same shape. For each N in
    `counts`, N sequences (the first N `messages`, each a user message) generate `gen` tokens
    each after their prompt: greedy, no drafts (the bare loop drafts nothing), one token per
    sequence per llama_decode.

    memagent is `LlamaEngine` as `ask` builds it: its own loop for one sequence; for several,
    model/batched.py's driver with one caller thread per sequence, as `ask -q` runs questions.
    The bare side is `Bare` with the same context: cells per sequence, n_batch, a KV cache per
    sequence, flash attention, threads. Both read every prompt once, untimed; each timed run then
    keeps all of a prompt but its last token in the cache (memagent by its own prefix reuse),
    decodes that token for every sequence and generates. Interleaved, the order swapped each
    round; medians. A sequence ends at an end of turn on both sides, so each side's tokens per
    second are its own count over its own time."""
    import llama_cpp

    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
    messages = messages[: max(counts)]
    prompts = [chat.encode(tok, m) for m in messages]
    n_ctx = max(len(p) for p in prompts) + gen + 16
    out: dict = {
        "context_tokens": round(statistics.mean(len(p) for p in prompts)),
        "generated_per_sequence": gen,
        "threads": threads,
        "gpu_layers": gpu_layers,
        "flash_attn": flash_attn,
        "repeat": repeat,
    }
    for n in counts:
        engine = LlamaEngine(
            info,
            tok,
            chat,
            n_ctx=n_ctx,
            sequences=n,
            options=EmbeddedOptions(gpu_layers=gpu_layers, threads=threads, flash_attn=flash_attn, speculate=False, batch=n > 1),
        )
        assert engine.sequences == n, engine.description
        # memagent's own n_batch: llama-cpp-python's context for one sequence, batched.py's for several
        n_batch = min(2048, n_ctx) if n == 1 else 512
        bare = Bare(model, n_ctx, n, flash_attn, gpu_layers=gpu_layers, threads=threads, n_batch=n_batch)
        vocab = llama_cpp.llama_model_get_vocab(bare.model)
        for s in range(n):
            bare.prompt(prompts[s][:-1], s)
        _memagent_generate(engine, messages[:n], gen)  # reads the prompts into its cache
        runs: dict[str, list[tuple[float, int]]] = {"memagent": [], "bare": []}
        for r in range(repeat):
            for side in ("bare", "memagent") if r % 2 == 0 else ("memagent", "bare"):
                if side == "bare":
                    runs[side].append(_bare_generate(bare, prompts[:n], gen, vocab))
                else:
                    runs[side].append(_memagent_generate(engine, messages[:n], gen))
        engine.close()
        bare.close()
        tok_s = {side: statistics.median(made / seconds for seconds, made in v) for side, v in runs.items()}
        out[str(n)] = {
            "memagent_tok_s": round(tok_s["memagent"], 2),
            "bare_tok_s": round(tok_s["bare"], 2),
            "tok_s_ratio": round(tok_s["memagent"] / tok_s["bare"], 3),  # memagent / bare: at least 0.95 (B8)
            "time_ratio": round(tok_s["bare"] / tok_s["memagent"], 3),  # memagent / bare: at most 1.05 (B4)
            "memagent_generated": runs["memagent"][0][1],
            "bare_generated": runs["bare"][0][1],
            "memagent_seconds": [round(s, 3) for s, _ in runs["memagent"]],
            "bare_seconds": [round(s, 3) for s, _ in runs["bare"]],
        }
        print("engine", n, json.dumps(out[str(n)]), file=sys.stderr, flush=True)
    return out


def _memagent_generate(engine, messages: list[str], gen: int) -> tuple[float, int]:
    """Seconds and tokens for `messages` through memagent's engine, one caller thread each when
    there are several (they start together)."""
    import threading

    from memagent_cli.model.engine import CompletionDone, Sampling

    done: list = [None] * len(messages)
    failed: list[BaseException] = []

    def one(i: int) -> None:
        try:
            for item in engine.complete(messages[i], gen, Sampling(temperature=0.0)):
                if isinstance(item, CompletionDone):
                    done[i] = item
        except BaseException as exc:  # re-raised in the caller
            failed.append(exc)

    if len(messages) == 1:
        t0 = time.perf_counter()
        one(0)
    else:
        start = threading.Barrier(len(messages) + 1)

        def worker(i: int) -> None:
            start.wait()
            one(i)

        workers = [threading.Thread(target=worker, args=(i,)) for i in range(len(messages))]
        for w in workers:
            w.start()
        start.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
    seconds = time.perf_counter() - t0
    if failed:
        raise failed[0]
    return seconds, sum(d.completion_tokens for d in done)


def _bare_generate(bare: Bare, prompts: list[list[int]], gen: int, vocab) -> tuple[float, int]:
    """Seconds and tokens for the same through the bare loop: every prompt's last token in one
    llama_decode, then one token for each live sequence per llama_decode."""
    import llama_cpp

    for s, p in enumerate(prompts):
        llama_cpp.llama_memory_seq_rm(bare.mem, s, len(p) - 1, -1)
    t0 = time.perf_counter()
    bare.decode([(p[-1], len(p) - 1, s, True) for s, p in enumerate(prompts)])
    last = [bare.sample(i) for i in range(len(prompts))]
    pos = [len(p) for p in prompts]
    live = [s for s in range(len(prompts)) if not llama_cpp.llama_vocab_is_eog(vocab, last[s])]
    made = len(live)
    count = dict.fromkeys(live, 1)
    while True:
        live = [s for s in live if count[s] < gen]
        if not live:
            break
        bare.decode([(last[s], pos[s], s, True) for s in live])
        for i, s in enumerate(list(live)):
            pos[s] += 1
            last[s] = bare.sample(i)
            if llama_cpp.llama_vocab_is_eog(vocab, last[s]):
                live.remove(s)
            else:
                count[s] += 1
                made += 1
    bare.sync()
    return time.perf_counter() - t0, made


# --- memagent ------------------------------------------------------------------------------------


def memagent(args_: list[str], home: Path) -> tuple[dict, float]:
    env = {**os.environ, "MEMAGENT_HOME": str(home), "NO_COLOR": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "memagent_cli", *args_], capture_output=True, text=True, env=env, cwd=home, timeout=900
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"memagent {' '.join(args_[:2])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), seconds


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
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, __file__, "--bare-run", str(model), str(doc), str(n_ctx), str(memory), str(answer), str(int(fa))],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    return time.perf_counter() - t0


def bare_run(model: Path, doc: Path, n_ctx: int, memory: int, answer: int, fa: bool) -> None:
    from memagent_cli.core.memagent import final_prompt
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    engine = Bare(model, n_ctx, 1, fa)
    prompt = step_prompts(model, doc, [QUESTION])[0]
    engine.prompt(prompt)
    pos, token, ids = len(prompt), engine.sample(-1), []
    for _ in range(memory):
        ids.append(token)
        engine.decode([(token, pos, 0, True)])
        pos, token = pos + 1, engine.sample(-1)
    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
    final = chat.encode(tok, final_prompt(QUESTION, tok.decode_bytes(ids).decode("utf-8", "replace")))
    engine.clear()
    engine.prompt(final)
    pos, token = len(final), engine.sample(-1)
    for _ in range(answer - 1):
        engine.decode([(token, pos, 0, True)])
        pos, token = pos + 1, engine.sample(-1)
    engine.sync()
    engine.close()


# --- the run -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen2.5-7b")
    parser.add_argument("--work", type=Path, default=None, help="where the model is built (kept between runs)")
    parser.add_argument("--vocab", type=Path, default=None)
    parser.add_argument("--chunk", type=int, default=5000)
    parser.add_argument("--memory", type=int, default=1024)
    parser.add_argument("--answer", type=int, default=32)
    parser.add_argument("--sequences", default="1,4,16")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--parts", default="bare,memagent,engine,e2e,batch,verify,doctor")
    parser.add_argument("--model", type=Path, default=None, help="this GGUF instead of building --shape")
    parser.add_argument("--gpu-layers", type=int, default=-1, help="for the engine part: 0 measures it on the CPU")
    parser.add_argument("--engine-tokens", type=int, default=256, help="tokens per sequence in the engine part")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))

    import llama_cpp
    import shapes

    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt
    from memagent_cli.model.runtime import available_cores

    work = args.work or Path(tempfile.mkdtemp(prefix="memagent-b4-"))
    model = args.model or shapes.build(args.shape, work, args.vocab or shapes.DEFAULT_VOCAB)
    work.mkdir(parents=True, exist_ok=True)
    doc = make_doc(model, work, args.chunk)
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "device": device_name() if args.gpu_layers != 0 else f"this CPU ({available_cores()} cores)",
        "offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "shape": args.model.name if args.model else args.shape,
        "model_bytes": model.stat().st_size,
        "chunk_tokens": args.chunk,
        "memory_tokens": args.memory,
    }
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
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
        seqs = [int(x) for x in args.sequences.split(",")]
        chunk_text = doc.read_text(encoding="utf-8")
        messages = [memory_prompt(q, INITIAL_MEMORY, chunk_text) for q in questions(max(seqs))]
        results["engine"] = engine_vs_bare(
            model,
            messages,
            args.engine_tokens,
            seqs,
            gpu_layers=args.gpu_layers,
            flash_attn=args.gpu_layers != 0,
            threads=available_cores(),
            repeat=max(args.repeat, 3),
        )

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
        for n in [int(x) for x in args.sequences.split(",")]:
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
            for n in [int(x) for x in args.sequences.split(",")]:
                row = rows[f"questions_{n}"]
                row["wall_vs_n_single_runs"] = round(row["wall"] / (n * one["wall"]), 3)
        results["e2e"] = rows

    if "batch" in parts:
        seqs = [int(x) for x in args.sequences.split(",")]
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
        env = {**os.environ, "MEMAGENT_HOME": str(home), "NO_COLOR": "1"}
        subprocess.run(
            [sys.executable, "-m", "memagent_cli", "models", "add", str(model), "--name", "b4"],
            env=env,
            cwd=REPO,
            capture_output=True,
        )
        out, _ = memagent(["doctor", "--json"], home)
        results["doctor"] = {"gpu": out.get("gpu"), "models": out.get("models")}
        log("doctor", json.dumps(results["doctor"]))

    import speculate

    return speculate.report(results, args.json)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--bare-run":
        m, d, c, mem, ans, fa = sys.argv[2:8]
        bare_run(Path(m), Path(d), int(c), int(mem), int(ans), bool(int(fa)))
        sys.exit(0)
    main()
