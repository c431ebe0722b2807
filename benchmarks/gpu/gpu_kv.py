"""GPU side of the KV-cache refusal (issue 33, item 7), on a real GPU: a context whose cache the
GPU cannot hold is refused before llama.cpp allocates anything there. Each case runs `memagent ask`
on a tiny model while nvidia-smi is polled for the GPU memory in use; the positive control (a
context that fits, every layer offloaded) shows that the poll sees an allocation. Prints JSON.
A partial offload that fits on paper (400M tokens, --gpu-layers 2 of this model: 48 GiB of cache
on the machine, 95 GiB on an H200) is not a case here: llama.cpp then really allocates it, which
took over 80 s on the H200 in session 13."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def gpu_used_mib() -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True
    )
    return int(out.stdout.split()[0])


def case(model: Path, doc: Path, *flags: str) -> dict:
    """One `ask`, the GPU memory in use polled while it runs (harness/runner.run's readings)."""
    from benchmarks.harness.runner import run

    base = gpu_used_mib()
    peak = [base]

    def poll(pid: int, status: dict[str, int]) -> None:
        peak[0] = max(peak[0], gpu_used_mib())

    budgets = ["--temperature", "0", "--memory-tokens", "16", "--answer-tokens", "8"]
    ask = ["ask", str(doc), "Who?", "-m", str(model), "--no-trace", "--quiet", *budgets, *flags]
    done = run([sys.executable, "-m", "memagent_cli", *ask], env={"NO_COLOR": "1"}, check=False, watch=poll)
    return {
        "flags": " ".join(flags),
        "rc": done.returncode,
        "seconds": round(done.seconds, 2),
        "peak_rss_mib": int(done.peak_rss_mb),
        "gpu_mib_before": base,
        "gpu_mib_peak": peak[0],
        "stderr": done.stderr.strip().splitlines()[-3:],
    }


def main() -> int:
    from benchmarks.harness.fixtures import shared_code

    write_tiny_qwen2 = shared_code("tinymodel").write_tiny_qwen2

    work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/kv")
    work.mkdir(parents=True, exist_ok=True)
    model = write_tiny_qwen2(work / "tiny.gguf", n_layer=3, n_embd=64, n_head=4, n_head_kv=2)
    doc = work / "doc.txt"
    doc.write_text("The quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    cases = [
        ("fits, every layer on the GPU", ["--gpu-layers", "-1"]),
        ("400M tokens, every layer on the GPU", ["--ctx", "400000000", "--gpu-layers", "-1"]),
        ("400M tokens, auto", ["--ctx", "400000000"]),
        ("4e9 tokens, auto (the suite's case)", ["--ctx", "4000000000"]),
    ]
    results = []
    for name, flags in cases:
        results.append({"case": name, **case(model, doc, *flags)})
        print(json.dumps(results[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
