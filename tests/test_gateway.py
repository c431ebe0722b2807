"""memagent behind a real router: the SGLang Model Gateway (`sglang-router`, a Rust binary in its wheel)
in front of two llama-cpp-python servers serving the trained code-word model. `ask` through it
answers as a server does directly; `ask --each` and `batch` answer every document right; the server
answering the job killed mid-job leaves the other to finish it, every answer right.

What the gateway (0.3.2) needs from a worker, as docs/SERVING.md says: `--backend openai` (without it
the gateway probes each worker as an SGLang runtime and never registers it), and `--health-check-endpoint
/v1/models`, since llama-cpp-python's server has no /health: its health checks would mark both
workers unhealthy after 3 intervals (60 s each by default), and the gateway would then answer every
request 404 "No worker available". The gateway's /v1/models lists one model, "unknown"; memagent
sends that name and the gateway passes any name through. It has no tokenize endpoint memagent can
use, so memagent cuts the chunks itself: `--tokenizer` with the model's GGUF.

Its OpenAI backend neither spreads requests nor retries them: every request goes to one worker,
whatever the --policy, until that worker's circuit breaker opens (after two failed requests here);
a request that fails on the way (a refused connection: HTTP 503 "Failed to contact upstream"; a
reply cut off mid-stream) reaches memagent, whose retries ask again and land on the other worker.
The test asserts what a user needs (every answer, right, once, and the other worker answering after
the kill), not whose retries carried it, so a gateway that spread or retried itself would pass too."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import CODEWORD_MODEL, WAIT, free_port, llama_server, read_line, run_memagent, spawn_memagent, whole_fact

from testkit.codeword import QUESTION
from testkit.processes import until_ready

BUDGETS = ["--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "24", "--temperature", "0"]
INSTALL = "pip install sglang-router (in the test extra: pip install -e '.[test]')"


@pytest.fixture(scope="module", autouse=True)
def router_installed():
    """The gateway's Python package; where it is missing a skip that says how to get it, or under
    CI (`CI` set), which must run these tests, a failure."""
    if importlib.util.find_spec("sglang_router") is None:
        message = f"the SGLang Model Gateway is not installed: {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def gateway_command(port: int, metrics_port: int, workers: list[str]) -> list[str]:
    """The gateway as docs/SERVING.md starts it: on 127.0.0.1 (its default is every interface), its
    Prometheus exporter on 127.0.0.1 and a free port (its default, 0.0.0.0:29000, would collide
    between two gateways), the workers by their root URL (no /v1)."""
    return [
        sys.executable,
        "-m",
        "sglang_router.launch_router",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--worker-urls",
        *workers,
        "--backend",
        "openai",
        "--health-check-endpoint",
        "/v1/models",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port),
    ]


@contextlib.contextmanager
def sglang_gateway(workers: list[str], workdir: Path):
    """The SGLang Model Gateway in front of `workers` (base URLs, …/v1); yields its base URL (…/v1)
    once it lists every worker healthy, and stops it after."""
    import httpx2

    port = free_port()
    roots = [url.removesuffix("/v1") for url in workers]
    log = workdir / "gateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(gateway_command(port, free_port(), roots), stdout=out, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        listed = httpx2.get(f"{root}/workers", timeout=2).json().get("workers", [])
        return sorted(w["url"] for w in listed if w.get("is_healthy")) == sorted(roots)

    with until_ready(proc, log, "the gateway", healthy, not_yet=(httpx2.TransportError, ValueError), within=120, every=0.2):
        yield f"{root}/v1"


def served(url: str) -> list[str]:
    # The gateway has no tokenize endpoint memagent can use: the chunks are cut here.
    return ["--engine", "openai", "--base-url", url, "--tokenizer", str(CODEWORD_MODEL)]


def write_docs(folder: Path, seeds) -> dict[str, str]:
    """Code-word documents docs/d0.txt... under `folder`; {path as given: its code word}."""
    (folder / "docs").mkdir()
    values = {}
    for k, seed in enumerate(seeds):
        doc = whole_fact(300, seed)
        (folder / "docs" / f"d{k}.txt").write_text(doc.text, encoding="utf-8")
        values[f"docs/d{k}.txt"] = doc.value
    return values


def write_job(path: Path, documents) -> Path:
    path.write_text("".join(json.dumps({"custom_id": d, "sources": [d], "question": QUESTION}) + "\n" for d in documents))
    return path


def requests_served(workdir: Path) -> int:
    """Chat requests a server's access log shows it answered."""
    return (workdir / "server.log").read_text(errors="replace").count("POST /v1/chat/completions")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Two servers and the gateway in front: (the gateway's URL, the first server's URL)."""
    one, two, gate = (tmp_path_factory.mktemp(name) for name in ("s1", "s2", "gateway"))
    with llama_server(CODEWORD_MODEL, one) as first, llama_server(CODEWORD_MODEL, two) as second:
        with sglang_gateway([first, second], gate) as url:
            yield url, first


@pytest.fixture
def docs(tmp_path):
    return tmp_path, write_docs(tmp_path, (1, 40, 80, 120))


def test_ask_through_the_gateway_answers_as_a_server_directly(stack, docs):
    url, direct = stack
    cwd, values = docs
    runs = {}
    for name, base in (("gateway", url), ("direct", direct)):
        done = run_memagent("ask", "docs/d0.txt", "-q", QUESTION, *served(base), *BUDGETS, "--json", cwd=cwd)
        assert done.returncode == 0, done.stderr
        runs[name] = json.loads(done.stdout)
    assert runs["gateway"]["answer"] == runs["direct"]["answer"] == values["docs/d0.txt"]
    assert [s["memory"] for s in runs["gateway"]["steps"]] == [s["memory"] for s in runs["direct"]["steps"]]
    assert runs["gateway"]["device"].startswith("served: ") and runs["gateway"]["device"].endswith(f" at {url}")


def test_each_through_the_gateway_answers_every_file(stack, docs):
    url, _ = stack
    cwd, values = docs
    done = run_memagent("ask", "docs", "--each", "-q", QUESTION, *served(url), *BUDGETS, "--parallel", "4", "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert {r["document"]: r["answer"] for r in json.loads(done.stdout)["results"]} == values


def test_batch_through_the_gateway_answers_every_line(stack, docs):
    url, _ = stack
    cwd, values = docs
    job = write_job(cwd / "job.jsonl", values)
    done = run_memagent("batch", job, "-o", "out.jsonl", *served(url), *BUDGETS, "--parallel", "2", cwd=cwd)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (cwd / "out.jsonl").read_text().splitlines()]
    assert sorted(r["custom_id"] for r in rows) == sorted(values)
    assert {r["custom_id"]: r["answer"] for r in rows} == values


def test_the_answering_server_killed_mid_job_leaves_the_other_to_finish(tmp_path, spawned, monkeypatch):
    # The servers' access logs written as requests come, to see which one the gateway is using.
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    values = write_docs(tmp_path, range(1, 481, 40))  # 12 documents
    job = write_job(tmp_path / "job.jsonl", values)
    dirs = [tmp_path / "s1", tmp_path / "s2", tmp_path / "gateway"]
    for folder in dirs:
        folder.mkdir()
    procs = {}
    with llama_server(CODEWORD_MODEL, dirs[0]) as first:
        procs[0] = llama_server.proc
        with llama_server(CODEWORD_MODEL, dirs[1]) as second:
            procs[1] = llama_server.proc
            with sglang_gateway([first, second], dirs[2]) as url:
                proc = spawn_memagent("batch", job, "-o", "out.jsonl", *served(url), *BUDGETS, "--parallel", "2", cwd=tmp_path)
                spawned.append(proc)
                deadline = time.monotonic() + WAIT
                while not (line := read_line(proc, deadline)).startswith("[1/12]"):  # a document done: under way
                    assert line, proc.stderr.read()
                answered = [requests_served(folder) for folder in dirs[:2]]
                victim = 0 if answered[0] else 1  # the server answering the job (the gateway uses one at a time)
                assert answered[victim] > 0, answered
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                before = requests_served(dirs[1 - victim])
                out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["custom_id"] for r in rows) == sorted(values)  # every line once
    assert {r["custom_id"]: r["answer"] for r in rows} == values
    assert requests_served(dirs[1 - victim]) > before  # the other server answered the rest
