"""B18: answers found again (core/reuse.py, traces/reuse.py): the store's look-up among 10,000 runs
(lookup; target 50 ms), `ask --each` rerun over 100 unchanged documents with SmolLM2-135M (each), a
log grown by 5% continued against read from the start (grown), and `watch` from a file settling to
its row (watch). Each part is a part of the results; a run of some keeps the others.
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

from benchmarks.harness.engines import tokenizer
from benchmarks.harness.fixtures import real_prose, shared_code, smollm2
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.results import cores, today
from benchmarks.harness.runner import memagent

TITLE = "answers found again"
QUICK = ["--only", "lookup", "--only", "watch", "--runs", "1000", "--files", "10"]
LOOKUP = Target("≤ 50")
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


def _memagent(home: Path, cwd: Path, *args: str) -> tuple[float, Any]:
    done = memagent(*args, home=home, cwd=cwd, env={"MEMAGENT_FRESH": ""})
    return done.seconds, done


def _prose_documents(folder: Path, count: int, tokens: int, tok: Any) -> None:
    """`count` documents of about `tokens` tokens each, cut from real prose."""
    from memagent_cli.model.tokenizer import decode

    ids = tok.encode(real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf"))
    folder.mkdir(parents=True)
    for n in range(count):
        start = (n * tokens * 7) % max(1, len(ids) - tokens)
        (folder / f"doc-{n:03}.txt").write_text(decode(tok, ids[start : start + tokens]), encoding="utf-8")


def each(work: Path, documents: int = 100, tokens: int = 600) -> dict[str, Any]:
    """A rerun of `ask --each` over unchanged documents against the first run."""
    from memagent_cli.core.pipeline import SourceOptions, find_sources
    from memagent_cli.core.reuse import answer_key
    from memagent_cli.model.llama import EmbeddedOptions
    from memagent_cli.traces.store import TraceStore

    model = smollm2()
    tok = tokenizer(model)
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
    from memagent_cli.model.tokenizer import decode

    model = smollm2()
    tok = tokenizer(model)
    ids = tok.encode(real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf"))
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

    helpers = shared_code("texts")
    CODEWORD_ASK, whole_fact = helpers.CODEWORD_ASK, helpers.whole_fact

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", choices=PARTS, action="append", help="a part to run (again for more; default all)")
    parser.add_argument("--runs", type=int, default=10_000, help="finished runs in the look-up's store")
    parser.add_argument("--files", type=int, default=100, help="files arriving at once in the watch part")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for part in args.only or PARTS:
        with tempfile.TemporaryDirectory() as work:
            if part == "lookup":
                results[part] = lookup(Path(work), runs=args.runs)
            elif part == "watch":
                results[part] = watch(Path(work), files=args.files)
            else:
                results[part] = {"each": each, "grown": grown}[part](Path(work))
        print(part, results[part], file=sys.stderr, flush=True)
    results["when"] = today()
    results["conditions"] = f"this {cores()}-core CPU"
    return results


def rows(m: dict[str, Any], results: object) -> list[Row]:
    k, e, g, w = m["lookup"], m["each"], m["grown"], m["watch"]
    return [
        LOOKUP.row(f"an answer's look-up among {k['runs']:,} stored runs, median (ms)", k["answered_ms_median"]),
        Row(f"`ask --each` over {e['documents']} unchanged documents, first run / rerun (SmolLM2-135M)", f"{e['ratio']:.0f}×"),
        Row("the rerun's hashing and look-ups, share of its wall time", f"{100 * e['lookup_share_of_rerun']:.1f}%"),
        Row("a log grown by 5%, read from the start / continued (SmolLM2-135M)", f"{g['ratio']}×"),
        Row(
            f"`watch`: a file settled to its row written; {w['files']} at once, to the last row (s)",
            f"{w['one_file_seconds']} / {w['burst_seconds_to_last_row']}",
        ),
    ]


def section(m: dict[str, Any], results: object) -> str:
    k, e, g, w = m["lookup"], m["each"], m["grown"], m["watch"]
    busy = f" ({e['note']})" if e.get("note") else ""
    return f"""`python -m benchmarks run B18` ({m["when"]}, {m["conditions"]}).

- **The look-up**: a real trace store of {k["runs"]:,} finished runs (each with 3 steps and its record, {k["db_bytes"] / 1e6:.0f} MB):
  finding a run by its answer key, with its steps and record, takes {k["answered_ms_median"]} ms (median of 200; the
  slowest {k["answered_ms_max"]:.1f} ms), a key no run has {k["missed_ms_mean"]} ms, a lineage key {k["continuable_ms_median"]} ms. Both are one row of a partial
  index on the key (`runs_answer_key`, `runs_lineage_key`; a test checks the query plan uses it), so
  the time does not grow with the store. Target: under {k["target_ms"]} ms.
- **A rerun of `ask --each`** over {e["documents"]} unchanged documents of real prose ({e["tokens_each"]} tokens each, {e["steps"]} steps
  in all; SmolLM2-135M-Instruct, greedy, 256-token chunks): the first run took {e["first_seconds"]:.0f} s{busy}, the rerun {e["rerun_seconds"]} s, the whole process from start to the last row: {e["ratio"]:.0f}× faster.
  Of the rerun, hashing the {e["documents"]} documents and looking their keys up took {1000 * e["lookup_seconds"]:.0f} ms ({100 * e["lookup_share_of_rerun"]:.1f}%); the rest is
  the interpreter starting, finding the files and reading each answer's quotes again from its document.
- **A log grown by 5%**: {g["chunks_first"]} chunks read ({g["first_seconds"]:.1f} s), then {g["chunks_grown"] - g["chunks_first"]} chunks' worth of text appended. Continued,
  the run took {g["steps_taken"]} steps from the first one and read {g["chunks_grown"] - g["steps_taken"]} ({g["continued_seconds"]:.1f} s); read from the start with `--fresh`,
  {g["chunks_grown"]} ({g["from_start_seconds"]:.1f} s): {g["ratio"]}× faster, and {"the same answer" if g["same_answer"] else "a DIFFERENT answer"} (greedy: the steps taken are the steps it would have
  written).
- **`watch`** over a folder (inotify, `--settle {w["settle_seconds"]}`) with the trained code-word model of tests/data,
  whose steps cost milliseconds, so this is watch's own work (noticing the change, waiting for the
  file to settle, hashing it, looking it up, reading it, rewriting the CSV whole): from a file
  having settled to its row in the CSV, {w["one_file_seconds"]} s (median of 5, the model loaded); {w["files"]} files copied in
  at once, {w["burst_seconds_to_last_row"]} s from their settling to the last row ({w["burst_seconds_per_file"]} s a file)."""
