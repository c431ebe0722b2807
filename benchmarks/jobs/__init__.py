"""B10: many runs at once (`ask --each`, `batch`): `--each` batched against one after another with
SmolLM2-135M (embedded); and the real CLI against tests/fakeserver.py's servers in a process of their
own: 1,000 `batch` chains at a fixed latency against the ideal (scale; target 1.1x), memory as the
job grows (rss; flat), and a server killed mid-job (loss). Each part is a part of the results; a run
of one keeps the others. The section in docs/PERFORMANCE.md says how each is measured.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import engines, runner
from benchmarks.harness.fixtures import real_prose, smollm2
from benchmarks.jobs import served
from benchmarks.jobs.page import CHUNK, MEMORY, rows, section
from benchmarks.jobs.served import Servers

TITLE = "many runs at once (`ask --each`, `batch`)"
QUICK = ["--only", "loss"]  # about a minute; embedded takes twelve
__all__ = ["TITLE", "QUICK", "add_arguments", "measure", "rows", "section"]
QUESTION = "What is this document about?"
PARTS = ("embedded", "scale", "rss", "loss")


def embedded(work: Path, documents: int = 4, chunk: int = 500, steps: int = 3, memory: int = 64) -> dict[str, Any]:
    """Batched --each against one run after another, on this machine's CPU (or a lent GPU)."""
    model = smollm2()
    tok = engines.tokenizer(model)
    ids = tok.encode(real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf", "multilang.pdf"))
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
        done = runner.run([sys.executable, "-m", "memagent_cli", "ask", *common, *extra])
        return done.seconds, done.record()["results"]

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
    ids = served.write_job(path, served.tokenizer(), name[0], chains, (steps - 1) * CHUNK)
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
    quiet = ["--quiet", *([] if trace else ["--no-trace"])]
    argv = ["batch", str(job.path), "-o", str(results), *served.flags(urls, parallel), *quiet]
    wait = job.latency if latency is None else latency
    with Servers(job.servers, wait, job.slots, urls, pieces) as fake:
        run = served.run_cli(argv, env=served.environment(home), results=results, during=during(fake) if during else None)
        stats = fake.close()
    served.failed(run, name)
    rows = served.read_results(results) if results.exists() else []
    got = {**served.figures(run, job.requests), **served.timings(rows, run), "latency": wait}
    if wait > 0:
        got["ideal_seconds"] = round(job.requests * wait / (job.servers * job.slots), 2)
        got["ratio"] = round(run.wall / got["ideal_seconds"], 3)
    elif got["startup_seconds"] is not None:
        got["requests_per_second"] = round(job.requests / (run.wall - got["startup_seconds"]), 1)
    got["servers_cpu_seconds"] = round(fake.cpu_seconds, 2)
    got["checks"] = served.checked(job.ids, rows, stats, job.steps)
    if trace:
        got["trace_store_mb"] = round(sum(f.stat().st_size for f in home.glob("traces.db*")) / 2**20, 1)
    got["command"] = served.shown(argv, work, home)
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
        "machine": served.machine(),
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

    find_sources([str(warm)], SourceOptions(), lambda _: None)  # the readers' modules imported: not counted
    tracemalloc.start()
    found = find_sources([str(folder)], SourceOptions(), lambda _: None)
    sources = tracemalloc.get_traced_memory()[0]
    jobs = [
        Job(key=f"{d.title}\n{served.SERVED_QUESTION}", question=served.SERVED_QUESTION, sources=(d,), title=d.title)
        for d in found
    ]
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
    tok = served.tokenizer()
    tokens = CHUNK * 3 // 4  # one chunk: a memory update and the answer
    parallel = servers * slots // 4
    out: dict[str, Any] = {"machine": served.machine(), "sizes": list(sizes), "servers": servers, "slots": slots}
    out.update({"parallel": parallel, "context_tokens": tokens, "batch": {}, "each": {}})
    urls, home = work / "urls.txt", work / "home-rss"
    for kind in ("batch", "each"):
        for size in sizes:
            results = work / f"{kind}-{size}.results.jsonl"
            if kind == "batch":
                job = work / f"rss-{size}.jsonl"
                ids = served.write_job(job, tok, "r", size, tokens)
                argv = ["batch", str(job), "-o", str(results)]
            else:
                folder = work / f"docs-{size}"
                folder.mkdir()
                for n in range(size):
                    (folder / f"doc{n:05d}.txt").write_text(served.context(tok, n, tokens) + "\n", encoding="utf-8")
                argv = ["ask", str(folder), "--each", "-q", served.SERVED_QUESTION, "--jsonl", str(results)]
            argv += [*served.flags(urls, parallel), "--quiet", "--no-trace"]
            with Servers(servers, 0.0, slots, urls) as fake:
                run = served.run_cli(argv, env=served.environment(home), results=results)
                stats = fake.close()
            served.failed(run, f"rss {kind} {size}")
            rows = served.read_results(results) if results.exists() else []
            named = [str(r.get("custom_id" if kind == "batch" else "document")) for r in rows]
            got = {
                **served.figures(run, 2 * size),
                "lines": len(rows),
                "once": len(set(named)) == len(named) == size and (kind != "batch" or set(named) == set(ids)),
                "answers": sum(r.get("answer") == served.ANSWER_TEXT for r in rows),
                "requests": sum(server["requests"] for server in stats),
                "in_flight": sum(server["max_in_flight"] for server in stats),  # at most, summed over the servers
                "command": served.shown(argv, work, home),
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
    out: dict[str, Any] = {"machine": served.machine(), "chains": chains, "steps": steps, "servers": servers, "slots": slots}
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", choices=PARTS, help="run one part (the others are kept)")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    parts: dict[str, Callable[[Path], dict[str, Any]]] = {"embedded": embedded, "scale": scale, "rss": rss, "loss": loss}
    for name in PARTS:
        if args.only not in (None, name):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            results[name] = parts[name](Path(tmp))
            print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return results
