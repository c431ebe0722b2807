"""B3: flat cost per step and flat memory whatever the input's length; PDF ingestion speed.

For generated documents of 50K, 500K and 5M tokens, `memagent ask` runs as a real process with a
tiny model and a small memory; after `--steps` steps it is interrupted (the rest would only repeat
the same work). Per size: seconds per step (median of the steps after the input was read whole;
5M/50K at most 1.1), peak RSS (growth 50K to 5M at most 100 MB: the whole input is read ahead, so
this holds every chunk's text), process start to the first step's start (at most 2 s). And a
1000-page PDF read through memagent's ingestion against pypdf's own page loop (at least 0.95x).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.engines import tokenizer
from benchmarks.harness.fixtures import REPO, shared_code
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.runner import vmhwm_mb
from benchmarks.harness.timing import race

TITLE = "length"
QUICK = ["--steps", "8", "--pages", "300"]
STEP_RATIO = Target("≤ 1.1")
RSS_GROWTH = Target("≤ 100")
FIRST_STEP = Target("≤ 2")
PDF_RATIO = Target("≥ 0.95")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=12, help="steps run at each size before the run is interrupted")
    parser.add_argument("--sizes", default="50000,500000,5000000", help="document sizes in tokens, comma-separated")
    parser.add_argument("--pages", type=int, default=1000, help="pages of the generated PDF")


def document(path: Path, tokens: int, tok) -> int:
    """Writes prose of about `tokens` tokens; returns the exact count."""
    block = shared_code("texts").words(20_000, seed=5) + "\n"
    per_block = len(tok.encode(block))
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(max(1, round(tokens / per_block))):
            fh.write(block)
    return len(tok.encode(path.read_text(encoding="utf-8").strip()))


def run_steps(model: Path, doc: Path, steps: int, home: Path) -> dict:
    budgets = ["--chunk-tokens", "5000", "--memory-tokens", "32", "--answer-tokens", "4", "--temperature", "0"]
    args = [
        sys.executable,
        "-m",
        "memagent_cli",
        "ask",
        str(doc),
        "q",
        "-m",
        str(model),
        *budgets,
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
            peak = vmhwm_mb(proc.pid)
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
    from pypdf import PdfReader

    from memagent_cli.ingest.sources import collect_sources, read_source

    pdf = FPDF()
    pdf.set_font("Helvetica", size=9)
    for page in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 4, shared_code("texts").words(250, seed=page))
    path = folder / "big.pdf"
    pdf.output(str(path))

    def bare() -> int:
        with open(path, "rb") as fh:
            return sum(len(p.extract_text() or "") for p in PdfReader(fh).pages)

    def ours() -> int:
        (source,) = collect_sources([str(path)], warn=lambda m: None)
        return sum(len(s.text) for s in read_source(source, warn=lambda m: None))

    times = race({"bare": bare, "ours": ours}, rounds=4)
    best = {k: statistics.median(v) for k, v in times.items()}
    return {
        "pages": pages,
        "pypdf_seconds": round(best["bare"], 2),
        "memagent_seconds": round(best["ours"], 2),
        "throughput_ratio": round(best["bare"] / best["ours"], 3),
    }


def measure(args: argparse.Namespace) -> dict:
    result: dict = {"sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = shared_code("tinymodel").write_tiny_qwen2(folder / "tiny.gguf", seed=1)
        tok = tokenizer(model)
        for size in (int(s) for s in args.sizes.split(",")):
            doc = folder / f"doc-{size}.txt"
            tokens = document(doc, size, tok)
            result["sizes"][str(size)] = {"tokens": tokens, **run_steps(model, doc, args.steps, folder)}
        result["pdf"] = pdf_ingestion(folder, args.pages)
    sizes = sorted(result["sizes"], key=int)
    small, large = result["sizes"][sizes[0]], result["sizes"][sizes[-1]]
    result["step_time_ratio"] = round(large["seconds_per_step"] / small["seconds_per_step"], 3)
    result["rss_growth_mb"] = round(large["peak_rss_mb"] - small["peak_rss_mb"], 1)
    result["max_first_step_seconds"] = max(r["first_step_start_seconds"] for r in result["sizes"].values())
    return result


def rows(m: dict, results: object) -> list[Row]:
    pdf = m["pdf"]
    return [
        STEP_RATIO.row("seconds per step, 5M / 50K tokens", m["step_time_ratio"]),
        RSS_GROWTH.row("peak RSS growth 50K → 5M tokens (MB)", m["rss_growth_mb"]),
        FIRST_STEP.row("start to first step, largest input (s)", m["max_first_step_seconds"]),
        PDF_RATIO.row(f"PDF ingestion ({pdf['pages']} pages) / pypdf's own loop", pdf["throughput_ratio"]),
    ]


def section(m: dict, results: object) -> str:
    sizes = "\n".join(
        f"| {int(n):,} | {r['tokens']:,} | {r['seconds_per_step']} | {r['peak_rss_mb']} | {r['first_step_start_seconds']} |"
        for n, r in sorted(m["sizes"].items(), key=lambda kv: int(kv[0]))
    )
    steps = next(iter(m["sizes"].values()))["steps_run"]
    return f"""| target tokens | tokens | seconds per step | peak RSS (MB) | start to first step (s) |
|---|---|---|---|---|
{sizes}

Each size runs {steps} steps with a tiny model and a 32-token memory and is then interrupted: the
remaining steps repeat the same work. The whole input is read ahead while the model works, so
peak RSS includes every chunk's text."""
