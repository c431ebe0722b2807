"""The served parts' plumbing: tests/fakeserver.py's servers in a process of their own, the CLI
run against them with its CPU, RSS and timings measured, the job files, and the checks that every
run answered once."""

from __future__ import annotations

import collections
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness.fixtures import REPO
from benchmarks.harness.results import now
from benchmarks.harness.runner import run
from benchmarks.jobs.page import BUDGETS, TOKENIZER

WORDS = (
    "river stone paper garden window silver market letter doctor engine forest island member number orange planet "
    "rocket summer ticket winter yellow bridge castle dinner finger hammer jacket kitten ladder mirror needle pencil"
).split()
SERVED_QUESTION = "Which record is this?"
ANSWER_TEXT = "42"  # what tests/fakeserver.py's default reply boxes


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


def run_cli(
    argv: list[str],
    *,
    env: dict[str, str],
    results: Path | None = None,
    during: Callable[[Callable[[], bool]], None] | None = None,
) -> Measured:
    """Runs `python -m memagent_cli ARGV` to its end (runner.run, /proc read every 0.1 s).
    `during(alive)` runs meanwhile in this thread."""
    cpu: dict[int, float] = {}
    first: list[float] = []
    resident: list[float] = []
    tick = os.sysconf("SC_CLK_TCK")
    start = time.perf_counter()

    def watch(pid: int, status: dict[str, int]) -> None:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as f:
                    fields = f.read().rpartition(")")[2].split()
                cpu[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            pass  # a thread (or the process) ended meanwhile
        if first:  # before the first result: the start's own peak (the tokenizer)
            resident.append(status["VmRSS"] / 1024)
        elif results is not None:
            try:
                if results.stat().st_size:
                    first.append(time.perf_counter() - start)
            except OSError:
                pass

    # The peak is VmHWM, not os.wait4's ru_maxrss: Linux carries the peak of the memory a process
    # had before its exec over, here the (v)forked copy of this benchmark.
    done = run([sys.executable, "-m", "memagent_cli", *argv], env=env, check=False, watch=watch, during=during, every=0.1)
    last = time.time() - results.stat().st_mtime if results is not None and results.exists() else None
    main = cpu.get(done.pid, 0.0)
    return Measured(
        rc=done.returncode,
        wall=done.seconds,
        user=done.user_seconds,
        sys=done.cpu_seconds - done.user_seconds,
        rss_mb=done.peak_rss_mb,
        rss_running_mb=max(resident) if resident else None,
        rss_end_mb=resident[-1] if resident else None,
        main_cpu=main,
        workers_cpu=sum(cpu.values()) - main,
        first_result=first[0] if first else None,
        last_result=last,
        stdout=done.stdout,
        stderr=done.stderr,
    )


def tokenizer() -> Any:
    from benchmarks.harness.engines import tokenizer as load

    return load(REPO / TOKENIZER)


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


def flags(urls: Path, parallel: int) -> list[str]:
    """The CLI's options for the fake servers whose URLs `urls` lists."""
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
        "when": now(),
    }


def read_results(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def chain_keys(ids: list[str]) -> dict[str, str]:
    """Each custom_id's key as the servers see it (X-Session-ID), as memagent derives it."""
    from memagent_cli.core.jobs import Job
    from memagent_cli.model.served.http_engine import wire_key

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
