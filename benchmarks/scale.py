"""B3: flat cost per step and flat memory whatever the input's length; PDF ingestion speed.

For generated documents of 50K, 500K and 5M tokens, `memagent ask` runs as a real process
with a tiny model and a small memory; after `--steps` steps it is interrupted (the rest would
only repeat the same work). Measured per size, in one run:
  - seconds per step (median of the steps after the input was read whole): 5M/50K ratio <= 1.1
  - peak RSS of the process: targets growth <= 100 MB from 50K to 5M (the whole input is read
    ahead while the model works, so this includes holding every chunk's text)
  - time from process start to the first step's start: target <= 2 s whatever the size
And a 1000-page PDF read through memagent's ingestion against pypdf's own page loop
(target: throughput ratio >= 0.95).

    python benchmarks/scale.py [--steps 12] [--sizes 50000,500000,5000000] [--pages 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def document(path: Path, tokens: int, tok) -> int:
    """Writes prose of about `tokens` tokens; returns the exact count."""
    from helpers import words

    block = words(20_000, seed=5) + "\n"
    per_block = len(tok.encode(block))
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(max(1, round(tokens / per_block))):
            fh.write(block)
    return len(tok.encode(path.read_text(encoding="utf-8").strip()))


def _peak_rss_mb(pid: int) -> float | None:
    """The process's own peak RSS (VmHWM). Not wait4's ru_maxrss: that high-water mark survives
    exec, so a child forked from a big parent reports the parent's peak."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_steps(model: Path, doc: Path, steps: int, home: Path) -> dict:
    args = [
        sys.executable,
        "-m",
        "memagent_cli",
        "ask",
        str(doc),
        "q",
        "-m",
        str(model),
        "--chunk-tokens",
        "5000",
        "--memory-tokens",
        "32",
        "--answer-tokens",
        "4",
        "--temperature",
        "0",
        "--no-trace",
        "--threads",
        "1",
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMAGENT_HOME": str(home)},
        cwd=REPO,
    )
    seconds, first, first_done, peak = [], None, None, None
    for line in proc.stderr:  # plain progress: "step k/N path: M memory tokens, S.Ss" (N is "?" while reading)
        m = re.match(r"step (\d+)/(\S+) .*, ([\d.]+)s$", line.strip())
        if not m:
            continue
        if first is None:
            first, first_done = float(m.group(3)), time.perf_counter() - t0
        if m.group(2) == "?":
            continue
        seconds.append(float(m.group(3)))  # the input is read whole: steps from here are the steady state
        if len(seconds) >= min(steps, int(m.group(2))):  # and the peak memory, every chunk held, is reached
            peak = _peak_rss_mb(proc.pid)
            proc.send_signal(signal.SIGINT)
            break
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = status
    if peak is None:  # not Linux: the child's rusage (which may include its parent's peak before exec)
        peak = usage.ru_maxrss / 1024
    return {
        "steps_run": len(seconds),
        "seconds_per_step": round(statistics.median(seconds), 3),
        "first_step_start_seconds": round(first_done - first, 3),
        "peak_rss_mb": round(peak, 1),
    }


def pdf_ingestion(folder: Path, pages: int) -> dict:
    from fpdf import FPDF
    from helpers import words
    from pypdf import PdfReader

    from memagent_cli.ingest.sources import collect_sources, read_source

    pdf = FPDF()
    pdf.set_font("Helvetica", size=9)
    for page in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 4, words(250, seed=page))
    path = folder / "big.pdf"
    pdf.output(str(path))

    def bare() -> int:
        with open(path, "rb") as fh:
            return sum(len(p.extract_text() or "") for p in PdfReader(fh).pages)

    def ours() -> int:
        (source,) = collect_sources([str(path)], warn=lambda m: None)
        return sum(len(s.text) for s in read_source(source, warn=lambda m: None))

    times = {"bare": [], "ours": []}
    for _ in range(4):  # interleaved
        for name, fn in (("bare", bare), ("ours", ours)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    best = {k: statistics.median(v) for k, v in times.items()}
    return {
        "pages": pages,
        "pypdf_seconds": round(best["bare"], 2),
        "memagent_seconds": round(best["ours"], 2),
        "throughput_ratio": round(best["bare"] / best["ours"], 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--sizes", default="50000,500000,5000000")
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)

    from tinymodel import write_tiny_qwen2

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    result: dict = {"sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = write_tiny_qwen2(folder / "tiny.gguf", seed=1)
        tok = load_tokenizer(read_gguf(model))
        for size in (int(s) for s in args.sizes.split(",")):
            doc = folder / f"doc-{size}.txt"
            tokens = document(doc, size, tok)
            result["sizes"][size] = {"tokens": tokens, **run_steps(model, doc, args.steps, folder)}
        result["pdf"] = pdf_ingestion(folder, args.pages)
    sizes = sorted(result["sizes"])
    small, large = result["sizes"][sizes[0]], result["sizes"][sizes[-1]]
    result["step_time_ratio"] = round(large["seconds_per_step"] / small["seconds_per_step"], 3)
    result["rss_growth_mb"] = round(large["peak_rss_mb"] - small["peak_rss_mb"], 1)
    result["max_first_step_seconds"] = max(r["first_step_start_seconds"] for r in result["sizes"].values())
    print(json.dumps(result, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
