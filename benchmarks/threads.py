"""B7: generation threads, 1 against every core, with the machine idle and beside a busy process
(SmolLM2-135M at the reference context), and what the default's two policies (the load average
before, the CPU clocks sampled now after) choose at the two moments the load average gets wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import time
from collections.abc import Iterator

from benchmarks.harness.engines import Bare, tokenizer
from benchmarks.harness.fixtures import real_prose, smollm2
from benchmarks.harness.registry import Row
from benchmarks.harness.results import cores as available

TITLE = "generation threads"
QUICK = ["--repeat", "1", "--burst", "5", "--context", "1000", "--tokens", "16"]


def _spin() -> None:  # a CPU-bound neighbour: another user's build, a browser tab
    while True:
        pass


@contextlib.contextmanager
def neighbour(busy: bool = True) -> Iterator[None]:
    """A CPU-bound process beside this one while the block runs (none unless `busy`)."""
    hog = multiprocessing.Process(target=_spin, daemon=True) if busy else None
    if hog is not None:
        hog.start()
    try:
        yield
    finally:
        if hog is not None:
            hog.terminate()
            hog.join()


def read_prompt(bare, n_threads: int, start: list[int], tokens: int) -> float:
    """Tokens a second reading the last `tokens` of `start` after the rest (a step's chunk)."""
    import llama_cpp

    llama_cpp.llama_set_n_threads(bare.ctx, n_threads, n_threads)
    n = len(start) - tokens
    llama_cpp.llama_memory_seq_rm(bare.mem, 0, n, -1)
    t0 = time.perf_counter()
    bare.decode([(t, n + i, 0, i == tokens - 1) for i, t in enumerate(start[n:])])
    return tokens / (time.perf_counter() - t0)


def policies(cores: int) -> dict[str, int | float]:
    """What each default chooses now: the load average's (before) and the sampled clocks' (after)."""
    from memagent_cli.model import runtime

    load = os.getloadavg()[0]
    busy = runtime.busy_now()
    return {
        "load_average": round(load, 2),
        "busy_now": round(busy, 2) if busy is not None else -1.0,
        "before": max(1, min(cores, cores - round(load))),
        "after": runtime.default_threads(busy),
    }


def moments(cores: int, burst: float) -> dict[str, dict[str, int | float]]:
    """The policies just after a `burst`-second busy command ended, and just after a busy process started."""
    with neighbour():
        time.sleep(burst)
    time.sleep(0.5)
    ended = policies(cores)
    time.sleep(max(0.0, 90 - burst))  # the load average sinks back a little before the second moment
    with neighbour():
        time.sleep(0.5)
        started = policies(cores)
    return {"idle, just after a busy command ended": ended, "beside a busy process that just started": started}


def generate(bare, n_threads: int, start: list[int], tokens: int) -> float:
    import llama_cpp

    llama_cpp.llama_set_n_threads(bare.ctx, n_threads, os.cpu_count() or 1)
    n = len(start)
    llama_cpp.llama_memory_seq_rm(bare.mem, 0, n - 1, -1)
    t0 = time.perf_counter()
    bare.decode([(start[-1], n - 1, 0, True)])
    bare.generate(n, tokens)
    return (tokens - 1) / (time.perf_counter() - t0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--context", type=int, default=5500, help="tokens in the cache before generating")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per run")
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens read after the context, per run")
    parser.add_argument("--burst", type=float, default=60.0, help="seconds the busy command runs before the first moment")


def measure(args: argparse.Namespace) -> dict:
    model = smollm2()
    tok = tokenizer(model)
    text = real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf", "crazyones.pdf")
    ids = tok.encode(text)[: args.context]
    cores = available()
    counts = sorted({1, cores})
    bare = Bare(model, args.context + args.tokens + 64, 1, False, gpu_layers=0)
    bare.prompt(ids)
    runs: dict[str, list[float]] = {}
    prompts: dict[str, list[float]] = {}
    for load in ("idle", "beside one busy process"):
        with neighbour(load != "idle"):
            for _ in range(args.repeat):
                for n in counts:
                    key = f"{n} thread{'s' if n > 1 else ''}, {load}"
                    runs.setdefault(key, []).append(generate(bare, n, ids, args.tokens))
                    prompts.setdefault(key, []).append(read_prompt(bare, n, ids, args.prompt))
    bare.close()
    chosen = moments(cores, args.burst)
    results = {
        "model": "SmolLM2-135M-Instruct Q4_1",
        "context_tokens": len(ids),
        "cores": cores,
        "tok_s": {k: round(statistics.median(v), 1) for k, v in runs.items()},
        "spread": {k: [round(min(v), 1), round(max(v), 1)] for k, v in runs.items()},
        "prompt_tokens": args.prompt,
        "prompt_tok_s": {k: round(statistics.median(v), 1) for k, v in prompts.items()},
        "burst_seconds": args.burst,
        "policies": chosen,
    }
    return results


def rows(b7: dict, results: object) -> list[Row]:
    """Generation speed on one thread and on every core, idle and beside a busy process."""
    out = []
    for load in ("idle", "beside one busy process"):
        speeds = {k.split(" ")[0]: v for k, v in b7["tok_s"].items() if k.endswith(load)}
        one, many = speeds.get("1"), max(speeds.items(), key=lambda kv: int(kv[0]))
        out.append(Row(f"generation tok/s, 1 thread / {many[0]} threads, {load} ({b7['model']})", f"{one} / {many[1]}"))
    return out


def section(b7: dict, results: object) -> str:
    prompt = b7.get("prompt_tok_s", {})
    rows = "\n".join(
        f"| {k} | {v} | {b7['spread'][k][0]}–{b7['spread'][k][1]} | {prompt.get(k, '–')} |" for k, v in b7["tok_s"].items()
    )
    policies = ""
    if b7.get("policies"):
        lines = []
        for moment, p in b7["policies"].items():
            where = "idle" if moment.startswith("idle") else "beside one busy process"
            speed = {n: b7["tok_s"].get(f"{n} thread{'s' if n > 1 else ''}, {where}", "–") for n in (p["before"], p["after"])}
            lines.append(
                f"| {moment} | {p['load_average']} → {p['before']} ({speed[p['before']]} tok/s) |"
                f" {p['busy_now']} → {p['after']} ({speed[p['after']]} tok/s) |"
            )
        policies = f"""
The default's two policies at the two moments the load average gets wrong, measured in the same run
(the first {b7["burst_seconds"]:.0f} s after a command began keeping one core busy, the second half a
second after a busy process started); the speed is the table's above for that thread count:

| moment | 1-minute load average → threads (before) | busy cores now → threads (after) |
|---|---|---|
{chr(10).join(lines)}
"""
    return f"""`python -m benchmarks run B7`: {b7["model"]} at a {b7["context_tokens"]:,}-token context on {b7["cores"]} cores,
64 generated tokens per run and a {b7.get("prompt_tokens", 256)}-token prompt read after the context,
interleaved; median and range in tokens per second.

| threads, machine | generation tok/s | range | prompt tok/s |
|---|---|---|---|
{rows}

Every core is best on an idle machine, and threads that outnumber the free cores collapse (llama.cpp's
threads spin waiting for each other). The default is therefore the cores not busy with other work now:
the kernel's CPU clocks (/proc/stat) read 0.1 s apart, less this process's own time, a core counting
as busy when other work kept it so half the time or more; at least one (`model.runtime.default_threads`).
It followed the 1-minute load average before, which still counts a command that has just ended and not
yet one that has just begun. Without /proc/stat (macOS) the load average decides, and half the cores
where neither exists (Windows); `--threads` overrides it, and `memagent doctor` shows the choice.
{policies}
"""
