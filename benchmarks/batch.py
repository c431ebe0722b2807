"""B8: questions batched in one llama.cpp context, on this CPU, with a model of realistic shape.

Batching pays where each token's weights, not its attention, dominate the memory traffic, so
this uses a random-weight GGUF with Qwen2.5-1.5B-Instruct's exact shapes, quantized to Q4_K_M by
llama.cpp (benchmarks/shapes.py builds it once). One sequence reads a 5,000-token chunk; its cache
is copied to the others (llama_memory_seq_cp: the same cells a prompt would make); then each
round generates one token for 1 or for 4 sequences in one llama_decode, interleaved, and the
aggregate tokens per second are compared. Target: 4 sequences at least 2.5x one.

    python benchmarks/batch.py [--context 5000] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=5000)
    parser.add_argument("--steps", type=int, default=12, help="generation rounds per measurement")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "memagent-bench-shapes")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    import gpu_step
    import llama_cpp
    import shapes

    model = shapes.build("qwen2.5-1.5b", args.work)
    n = args.context
    bare = gpu_step.Bare(model, n + args.steps + 64, 4, False, gpu_layers=0)
    ids = [(i * 7919) % 150000 + 100 for i in range(n)]  # any tokens: speed does not read them
    t0 = time.perf_counter()
    bare.prompt(ids, 0)
    bare.sync()
    prompt_seconds = time.perf_counter() - t0
    for s in (1, 2, 3):
        llama_cpp.llama_memory_seq_cp(bare.mem, 0, s, -1, -1)

    def generate(sequences: int) -> float:
        for s in range(4):
            llama_cpp.llama_memory_seq_rm(bare.mem, s, n, -1)
        t = time.perf_counter()
        for k in range(args.steps):
            bare.decode([(1000 + k, n + k, s, True) for s in range(sequences)])
            for i in range(sequences):
                bare.sample(i)
        return sequences * args.steps / (time.perf_counter() - t)

    runs: dict[int, list[float]] = {1: [], 4: []}
    for _ in range(args.repeat):
        for sequences in runs:
            runs[sequences].append(generate(sequences))
    bare.close()
    one, four = (statistics.median(runs[k]) for k in (1, 4))
    results = {
        "model": "random-weight Qwen2.5-1.5B-shaped Q4_K_M",
        "context_tokens": n,
        "prompt_tok_s": round(n / prompt_seconds, 1),
        "one_tok_s": round(one, 2),
        "four_tok_s": round(four, 2),
        "gain": round(four / one, 2),
    }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
