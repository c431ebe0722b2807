"""One results file per benchmark, benchmarks/results/B6.json, in one schema:

    {"name": "B6", "when": "2026-11-21 17:42 UTC", "machine": "x86_64, Python 3.11.7, 2 cores",
     "commit": "ae38447", "args": {...}, "metrics": {...}, "targets": [{"what", "result", "target", "met"}]}

`metrics` is the benchmark's own (its module's `measure`); `targets` are its summary rows that are
held to a target, as last checked. A run replaces the top-level parts of `metrics` it measured and
keeps the others: a part only a lent GPU can measure stays when this CPU runs the rest.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness.registry import Row

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine() -> str:
    """This machine as the sections name it."""
    return f"{platform.machine()}, Python {platform.python_version()}, {cores()} cores"


def gpu_name() -> str:
    """The NVIDIA GPU as nvidia-smi names it: model, memory, driver."""
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip() or "no NVIDIA GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "no NVIDIA GPU"


def commit() -> str | None:
    """The checkout's commit, with "+changes" when the working tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def path(name: str) -> Path:
    return RESULTS / f"{name}.json"


def load(name: str) -> dict | None:
    """Benchmark `name`'s results file, or None before its first run."""
    p = path(name)
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else None


def targets(rows: list[Row]) -> list[dict]:
    """The rows held to a target, as a results file keeps them."""
    return [asdict(r) for r in rows if r.met is not None]


def record(name: str, args: dict, metrics: dict, previous: dict | None = None) -> dict:
    """The results file's contents for a run that measured `metrics` (merged over `previous`'s);
    its targets are filled in once its rows are known."""
    merged = {**(previous or {}).get("metrics", {}), **metrics}
    return {
        "name": name,
        "when": now(),
        "machine": machine(),
        "commit": commit(),
        "args": args,
        "metrics": merged,
        "targets": [],
    }


def save(result: dict, to: Path | None = None) -> Path:
    target = to or path(result["name"])
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)  # a run cut short never leaves half a file where the doc reads it
    return target


class Results:
    """Every benchmark's results, read when first asked for: what a section compares with."""

    def __init__(self, *fresh: dict) -> None:
        """`fresh`: results files not saved yet, which stand in for the ones on disk."""
        self._cache: dict[str, dict | None] = {r["name"]: r for r in fresh}

    def file(self, name: str) -> dict | None:
        if name not in self._cache:
            self._cache[name] = load(name)
        return self._cache[name]

    def metrics(self, name: str) -> dict | None:
        found = self.file(name)
        return found["metrics"] if found else None
