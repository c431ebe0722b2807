"""B18: answers found again (core/keys.py, traces/found.py): the store's look-up among 10,000 runs
(lookup; target 50 ms), `ask --each` rerun over 100 unchanged documents with SmolLM2-135M (each), a
log grown by 5% continued against read from the start (grown), `watch` from a file settling to its
row (watch), and `watch` over folders of 100, 1,000 and 10,000 documents (scale): its first pass,
a restart with every answer known (target: 10,000 in 10 s), its CPU while idle and while one file
is appended to every second (target: 2% of a core at 10,000), its peak memory. Each part is a part
of the results; a run of some keeps the others.
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness.engines import tokenizer
from benchmarks.harness.fixtures import real_prose, shared_code, smollm2
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.results import REPO, cores, today
from benchmarks.harness.runner import log, memagent

TITLE = "answers found again"
QUICK = ["--only", "lookup", "--only", "watch", "--only", "scale", "--runs", "1000", "--files", "10"]
QUICK += ["--sizes", "100,1000", "--idle", "5", "--changing", "10"]
LOOKUP = Target("≤ 50")
RESTART = Target("≤ 10")  # seconds, a restart over 10,000 documents whose answers are all known
CHANGING = Target("≤ 2")  # % of a core, one file of 10,000 appended to every second (watch's own, less its runs)
WARM_UP = 8  # seconds of appends before the measured ones: the first reading as the file grows loads the model
PARTS = ("lookup", "each", "grown", "watch", "scale")
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
    from memagent_cli.core.keys import answer_key
    from memagent_cli.core.pipeline import SourceOptions, find_sources
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
    env = {**os.environ, "MEMAGENT_HOME": str(home), "NO_COLOR": "1", "PYTHONPATH": str(REPO)}  # this checkout's code
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


def scale(work: Path, sizes: list[int], idle: float = 20.0, changing: float = 30.0) -> dict[str, Any]:
    """`watch` over a folder of each size (see _folder_watched)."""
    return {"sizes": [_folder_watched(work / str(n), n, idle, changing) for n in sizes], "idle_seconds": idle}


def _folder_watched(work: Path, documents: int, idle: float, changing: float) -> dict[str, Any]:
    """One folder of `documents` code-word documents (3 chunks of 64 tokens each, each its own text,
    untouched for an hour), watched by two processes in turn: the first reads every document (its
    first pass: seconds to the last row, of which its runs' own seconds as they recorded them); the
    second finds every answer in the store (a restart: seconds and CPU seconds from its start to its
    table written), then is left idle for `idle` seconds, then one document is appended a line every
    second (WARM_UP seconds first, then `changing` seconds measured): the CPU each takes, as a share of
    one core, and of the appends' the share its runs (reading the file's new chunks as it grows)
    recorded, and the rest, watch's own. Peak resident memory of each process."""
    import signal
    import sqlite3

    texts = shared_code("texts")
    docs, home = work / "docs", work / "home"
    docs.mkdir(parents=True)
    bases = [texts.whole_fact(150, 7 * k).text for k in range(50)]
    old = time.time() - 3600  # settled long ago
    for n in range(documents):
        path = docs / f"doc-{n:05}.txt"
        path.write_text(f"{bases[n % len(bases)]}\nIt is entry {n} of the register.\n", encoding="utf-8")
        os.utime(path, (old, old))
    args = ["watch", "docs", "-q", "What is the code word?", *map(str, texts.CODEWORD_ASK), "--temperature", "0"]
    args += ["--threads", "1", "--csv", "out.csv", "--quiet"]
    out = work / "out.csv"
    figures: dict[str, Any] = {"documents": documents}

    def rows() -> int:
        try:
            return out.read_bytes().count(b"\n") - 1
        except FileNotFoundError:
            return 0

    def watched(phases: Callable[[int, float], None]) -> float:
        """A watch process through `phases(pid, started)`, then SIGTERM; its peak RSS (MB)."""
        pid: list[int] = []

        def during(alive: Callable[[], bool]) -> None:
            started = time.perf_counter()
            while not pid:
                time.sleep(0.01)
            try:
                phases(pid[0], started)
            finally:
                os.kill(pid[0], signal.SIGTERM)

        done = memagent(
            *args,
            home=home,
            cwd=work,
            env={"PYTHONPATH": str(REPO)},  # this checkout's code, whatever is installed
            watch=lambda p, _status: pid.append(p) if not pid else None,
            during=during,
            every=0.5,
            check=False,
        )
        return done.peak_rss_mb

    def until_rows(pid: int, started: float) -> tuple[float, float]:
        while rows() < documents:
            if not os.path.exists(f"/proc/{pid}"):
                raise SystemExit("watch ended early")
            time.sleep(0.2)
        return time.perf_counter() - started, _cpu(pid)

    def first(pid: int, started: float) -> None:
        figures["first_seconds"], figures["first_cpu_seconds"] = until_rows(pid, started)

    figures["first_peak_rss_mb"] = watched(first)
    with sqlite3.connect(home / "traces.db") as db:
        query = "SELECT count(*), sum(json_extract(result, '$.timings.total_seconds')) FROM runs WHERE status = 'complete'"
        runs, run_seconds = db.execute(query).fetchone()
    assert runs == documents, (runs, documents)
    figures["runs_seconds"] = round(run_seconds, 2)
    figures["first_ms_per_document"] = round(1000 * figures["first_seconds"] / documents, 2)
    figures["own_ms_per_document"] = round(1000 * (figures["first_seconds"] - run_seconds) / documents, 2)

    def append(seconds: float) -> None:
        for _ in range(int(seconds)):
            with open(docs / "doc-00000.txt", "a", encoding="utf-8") as f:
                f.write("The night guard waits near the old well.\n")
            time.sleep(1.0)

    def restart(pid: int, started: float) -> None:
        figures["restart_seconds"], figures["restart_cpu_seconds"] = until_rows(pid, started)
        before = _cpu(pid)
        time.sleep(idle)
        figures["idle_cpu_percent"] = round(100 * (_cpu(pid) - before) / idle, 2)
        append(WARM_UP)  # its first reading as it grows loads the model: once, not a change's cost
        since = datetime.now(timezone.utc).isoformat(timespec="microseconds")
        before, t0 = _cpu(pid), time.perf_counter()
        append(changing)
        window = time.perf_counter() - t0
        figures["changing_cpu_percent"] = round(100 * (_cpu(pid) - before) / window, 2)
        with sqlite3.connect(home / "traces.db") as db:
            query = "SELECT count(*), sum(json_extract(result, '$.timings.total_seconds')) FROM runs WHERE ended_at >= ?"
            read, seconds = db.execute(query, (since,)).fetchone()
        figures["changing_runs"] = read
        figures["changing_runs_percent"] = round(100 * (seconds or 0.0) / window, 2)
        figures["changing_own_percent"] = round(max(0.0, figures["changing_cpu_percent"] - figures["changing_runs_percent"]), 2)

    out.unlink()
    figures["restart_peak_rss_mb"] = watched(restart)
    for key in ("first_seconds", "first_cpu_seconds", "restart_seconds", "restart_cpu_seconds"):
        figures[key] = round(figures[key], 2)
    log("scale", figures)
    return figures


def _cpu(pid: int) -> float:
    """A live process's CPU seconds so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", choices=PARTS, action="append", help="a part to run (again for more; default all)")
    parser.add_argument("--runs", type=int, default=10_000, help="finished runs in the look-up's store")
    parser.add_argument("--files", type=int, default=100, help="files arriving at once in the watch part")
    parser.add_argument("--sizes", default="100,1000,10000", help="documents in each folder of the scale part")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds the scale part measures a watch idle")
    parser.add_argument("--changing", type=float, default=30.0, help="seconds it appends to one file every second")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for part in args.only or PARTS:
        with tempfile.TemporaryDirectory() as work:
            if part == "lookup":
                results[part] = lookup(Path(work), runs=args.runs)
            elif part == "watch":
                results[part] = watch(Path(work), files=args.files)
            elif part == "scale":
                sizes = [int(n) for n in str(args.sizes).split(",")]
                results[part] = scale(Path(work), sizes, idle=args.idle, changing=args.changing)
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
        *_scale_rows(m.get("scale")),
    ]


def _scale_rows(scaled: dict[str, Any] | None) -> list[Row]:
    if not scaled:
        return []
    sizes = scaled["sizes"]
    big = sizes[-1]
    each = " / ".join(f"{s['documents']:,}" for s in sizes)
    return [
        Row(
            f"`watch`, first pass: its own ms a document, at {each} documents",
            " / ".join(str(s["own_ms_per_document"]) for s in sizes),
        ),
        RESTART.row(f"`watch`, a restart over {big['documents']:,} documents, every answer known (s)", big["restart_seconds"]),
        CHANGING.row(
            f"`watch` over {big['documents']:,} documents, one file appended every second: its own CPU (% of a core)",
            big["changing_own_percent"],
            f"{big['changing_cpu_percent']}% with its {big['changing_runs']} runs reading the new chunks",
        ),
        Row(
            f"`watch` idle (% of a core) / peak memory (MB), at {each} documents",
            " / ".join(f"{s['idle_cpu_percent']}" for s in sizes)
            + "; "
            + " / ".join(f"{s['restart_peak_rss_mb']:.0f}" for s in sizes),
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
  at once, {w["burst_seconds_to_last_row"]} s from their settling to the last row ({w["burst_seconds_per_file"]} s a file{f"; {w['note']}" if w.get("note") else ""}).{_scale_section(m.get("scale"))}"""


def _scale_section(scaled: dict[str, Any] | None) -> str:
    if not scaled:
        return ""
    lines = [
        "| documents | first pass (s) | its runs (s) | watch's own, a document (ms) | restart, every answer known (s) | its CPU (s) "
        "| idle (% of a core) | one file appended every second: all / its runs / watch's own (% of a core) "
        "| peak memory, first pass / restart (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in scaled["sizes"]:
        lines.append(
            f"| {s['documents']:,} | {s['first_seconds']} | {s['runs_seconds']} | {s['own_ms_per_document']} | {s['restart_seconds']} "
            f"| {s['restart_cpu_seconds']} | {s['idle_cpu_percent']} "
            f"| {s['changing_cpu_percent']} / {s['changing_runs_percent']} / {s['changing_own_percent']} "
            f"| {s['first_peak_rss_mb']:.0f} / {s['restart_peak_rss_mb']:.0f} |"
        )
    table = "\n".join(lines)
    busy = f" Measured {scaled['note']}." if scaled.get("note") else ""
    return f"""
- **`watch` over a folder of 100, 1,000 and 10,000 documents** (`--only scale`): code-word documents of
  3 chunks of 64 tokens, each its own text, with the code-word model (`--threads 1`, `--quiet`). The
  first pass reads every one; of its wall time, the runs' own (the seconds each run recorded: reading,
  the model, its trace) and watch's own (finding, keys, look-ups, rows, writing the CSV), a document.
  Then a second process over the same folder, every answer in the store: a restart, from its start to
  its table written (the goal: 10,000 documents in 10 s); then {scaled["idle_seconds"]:.0f} s idle; then one document
  appended a line every second (it never settles: read as it grows, its complete chunks each time it
  has grown by about a chunk; after {WARM_UP} s of appends, whose first reading loads the model). Of its CPU,
  the runs' share is the seconds its runs recorded (wall time: an upper bound where the machine is
  busy), watch's own the rest (the goal: under 2% of a core at 10,000 documents). Before (issue 53,
  5,000 documents): a restart took 220 s, an append a second 33% of a core, since every change walked
  the folder and every row rewrote the whole CSV.{busy}

{table}"""
