"""`--each` and `batch` over a pool of two real llama-cpp-python servers serving the trained code-word
model: every answer right and attributed to its own file, equal to the embedded engine's; a server
killed mid-job leaves the other to finish with nothing repeated; no server left is one line."""

from __future__ import annotations

import json
import signal

import pytest
from helpers import CODEWORD_MODEL, free_port, llama_server, read_line, run_memagent, spawn_memagent, whole_fact

from testkit.codeword import QUESTION

BUDGETS = ["--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "24", "--temperature", "0"]


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    values = {}
    for k, seed in enumerate((1, 40, 80, 120, 160, 200)):
        doc = whole_fact(300, seed)
        (folder / f"d{k}.txt").write_text(doc.text, encoding="utf-8")
        values[f"docs/d{k}.txt"] = doc.value
    return tmp_path, values


def served(*urls):
    return ["--engine", "openai", *(a for url in urls for a in ("--base-url", url)), "--tokenizer", str(CODEWORD_MODEL)]


def requests_served(workdir) -> int:
    """Chat requests a server's access log shows it answered."""
    return (workdir / "server.log").read_text(errors="replace").count("POST /v1/chat/completions")


def test_each_over_two_servers_answers_every_file_as_the_embedded_engine_does(docs, tmp_path):
    cwd, values = docs
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    with llama_server(CODEWORD_MODEL, tmp_path / "s1") as one, llama_server(CODEWORD_MODEL, tmp_path / "s2") as two:
        done = run_memagent(
            "ask", "docs", "--each", "-q", QUESTION, *served(one, two), *BUDGETS, "--parallel", "4", "--json", cwd=cwd
        )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert {r["document"]: r["answer"] for r in results} == values
    assert all(span["path"] == r["document"] for r in results for e in r["evidence"] for span in e["spans"])
    assert all(r["device"].startswith("served: ") and "2 servers" in r["device"] for r in results)
    # the load was spread: both servers answered a share of the calls
    calls = sum(len(r["steps"]) + 1 for r in results)
    shares = [requests_served(tmp_path / "s1"), requests_served(tmp_path / "s2")]
    assert sum(shares) == calls and min(shares) >= calls // 5, shares
    here = run_memagent(
        "ask", "docs", "--each", "-q", QUESTION, "-m", CODEWORD_MODEL, *BUDGETS, "--threads", "1", "--json", cwd=cwd
    )
    embedded = json.loads(here.stdout)["results"]
    assert [[s["memory"] for s in r["steps"]] for r in results] == [[s["memory"] for s in r["steps"]] for r in embedded]


def test_a_server_killed_mid_job_leaves_the_other_to_finish(docs, tmp_path, spawned):
    cwd, values = docs
    job = cwd / "job.jsonl"
    job.write_text("".join(json.dumps({"custom_id": d, "sources": [d], "question": QUESTION}) + "\n" for d in values))
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    with llama_server(CODEWORD_MODEL, tmp_path / "s1") as one:
        doomed = llama_server.proc
        with llama_server(CODEWORD_MODEL, tmp_path / "s2") as two:
            (cwd / "urls.txt").write_text(f"# the pool\n{one}\n\n{two}  # the second\n")  # --base-url FILE
            proc = spawn_memagent("batch", job, "-o", "out.jsonl", *served("urls.txt"), *BUDGETS, "--parallel", "2", cwd=cwd)
            spawned.append(proc)
            assert read_line(proc).startswith("[1/6]")  # a line done: the job is under way on both
            doomed.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    rows = [json.loads(line) for line in (cwd / "out.jsonl").read_text().splitlines()]
    assert sorted(r["custom_id"] for r in rows) == sorted(values)  # every line once: nothing repeated
    assert {r["custom_id"]: r["answer"] for r in rows} == values
    assert "Traceback" not in err
    assert f"warning: The server at {one} " in err  # its loss was seen, and its calls went to the other


def test_no_server_left_is_one_line_and_keeps_what_finished(docs, tmp_path):
    cwd, values = docs
    job = cwd / "job.jsonl"
    job.write_text(json.dumps({"custom_id": "a", "sources": ["docs/d0.txt"], "question": QUESTION}) + "\n")
    dead = [f"http://127.0.0.1:{free_port()}/v1" for _ in range(2)]
    done = run_memagent("batch", job, "-o", "out.jsonl", *served(*dead), *BUDGETS, "--timeout", "2", cwd=cwd, timeout=600)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "2 servers" in errors[0] and "Traceback" not in done.stderr


def test_every_server_lost_mid_job_stops_it_in_one_line_and_a_rerun_goes_on(docs, tmp_path, spawned):
    cwd, values = docs
    job = cwd / "job.jsonl"
    job.write_text("".join(json.dumps({"custom_id": d, "sources": [d], "question": QUESTION}) + "\n" for d in values))
    ports = [free_port(), free_port()]
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    with llama_server(CODEWORD_MODEL, tmp_path / "s1", port=ports[0]) as one:
        first = llama_server.proc
        with llama_server(CODEWORD_MODEL, tmp_path / "s2", port=ports[1]) as two:
            second = llama_server.proc
            proc = spawn_memagent("batch", job, "-o", "out.jsonl", *served(one, two), *BUDGETS, "--parallel", "2", cwd=cwd)
            spawned.append(proc)
            assert read_line(proc).startswith("[1/6]")
            first.send_signal(signal.SIGKILL)
            second.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: All 2 servers failed; the last error: The server at ")
    assert "Run the same command again to go on." in err and "Traceback" not in err
    kept = [json.loads(line) for line in (cwd / "out.jsonl").read_text().splitlines()]
    assert 1 <= len(kept) < 6 and all(r["answer"] == values[r["custom_id"]] for r in kept)

    (tmp_path / "s3").mkdir()
    (tmp_path / "s4").mkdir()
    with (
        llama_server(CODEWORD_MODEL, tmp_path / "s3", port=ports[0]),
        llama_server(CODEWORD_MODEL, tmp_path / "s4", port=ports[1]),
    ):
        again = run_memagent("batch", job, "-o", "out.jsonl", *served(one, two), *BUDGETS, "--parallel", "2", cwd=cwd)
    assert again.returncode == 0, again.stderr
    rows = [json.loads(line) for line in (cwd / "out.jsonl").read_text().splitlines()]
    assert rows[: len(kept)] == kept and sorted(r["custom_id"] for r in rows) == sorted(values)
    assert {r["custom_id"]: r["answer"] for r in rows} == values
