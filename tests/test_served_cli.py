"""`memagent ask` and `memagent eval` driving a served model (llama-cpp-python's real server)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import llama_server, run_memagent, words, write_clean_model

BUDGETS = ["--chunk-tokens", "96", "--memory-tokens", "6", "--answer-tokens", "6", "--temperature", "0"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return write_clean_model(tmp_path_factory.mktemp("clean") / "clean.gguf")


@pytest.fixture(scope="module")
def url(clean, tmp_path_factory):
    with llama_server(clean, tmp_path_factory.mktemp("srv")) as base:
        yield base


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(400, seed=11))
    return path


def _served(url, *more):
    return ["--engine", "openai", "--base-url", url, *more]


def test_served_run_equals_the_embedded_one(clean, url, doc):
    here = json.loads(run_memagent("ask", "-m", clean, doc, "Who?", *BUDGETS, "--threads", "1", "--json").stdout)
    for how in (["--tokenizer", str(clean)], []):  # our tokenizer from the GGUF, or the server's own endpoint
        done = run_memagent("ask", *_served(url, *how), doc, "Who?", *BUDGETS, "--json")
        assert done.returncode == 0, done.stderr
        there = json.loads(done.stdout)
        assert there["document_tokens"] == here["document_tokens"]
        assert [s["memory"] for s in there["steps"]] == [s["memory"] for s in here["steps"]]
        assert there["answer"] == here["answer"] and there["device"].startswith("served: ")


def test_four_questions_at_once(clean, url, doc):
    questions = ["Who?", "What?", "Where?", "Why not?"]
    args = [a for q in questions for a in ("-q", q)]
    done = run_memagent(
        "ask", *_served(url, "--tokenizer", str(clean)), doc, *args, "--parallel", "4", *BUDGETS, "--json", "--verbose"
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["question"] for r in results] == questions
    alone = json.loads(run_memagent("ask", *_served(url, "--tokenizer", str(clean)), doc, "Where?", *BUDGETS, "--json").stdout)
    assert [s["memory"] for s in results[2]["steps"]] == [s["memory"] for s in alone["steps"]]
    # --verbose shows each request, with the neutral sampling values and without the document.
    sent = [line for line in done.stderr.splitlines() if line.startswith("POST ")]
    assert len(sent) == sum(len(r["steps"]) + 1 for r in results)
    assert '"repeat_penalty": 1.0' in sent[0] and '"min_p": 0.0' in sent[0] and "river" not in done.stderr


def test_server_gone_mid_run_fails_clearly_and_resumes(clean, doc, tmp_path):
    long_doc = tmp_path / "long.txt"
    long_doc.write_text(words(3000, seed=12))
    args = ["ask", *BUDGETS, "--memory-tokens", "12", long_doc, "Who?"]
    with llama_server(clean, tmp_path) as base:
        whole = run_memagent(*args[:1], *_served(base, "--tokenizer", str(clean)), *args[1:], "--json")
        assert whole.returncode == 0, whole.stderr
        expected = json.loads(whole.stdout)
        port = base.split(":")[2].split("/")[0]
        proc = subprocess.Popen(
            # --fresh: the answer above would be given again, reading nothing
            [
                sys.executable,
                "-m",
                "memagent_cli",
                *args[:1],
                *_served(base, "--tokenizer", str(clean)),
                *args[1:],
                "--json",
                "--fresh",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for line in proc.stderr:
                if line.startswith("step 3/"):
                    llama_server.proc.kill()  # the server dies mid-run
                    llama_server.proc.wait()
                    break
            out, rest = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 1
    error, stopped = rest.strip().splitlines()[-2:]
    assert error.startswith(f"error: The server at {base} refused the connection (5 attempts).") and "check --base-url" in error
    assert "trying again (5/5)" in rest  # retried with backoff first
    assert stopped.startswith("The run stopped after step 3. Resume with: memagent ask --resume ")
    run_id = stopped.rsplit(" ", 1)[1]
    # The same server back on the same address: the run goes on from its last step.
    with llama_server(clean, tmp_path, port=int(port)) as again:
        assert again == base
        resumed = run_memagent("ask", "--resume", run_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    done = json.loads(resumed.stdout)
    assert [s["memory"] for s in done["steps"]] == [s["memory"] for s in expected["steps"]]
    assert done["answer"] == expected["answer"]


def test_eval_on_a_served_engine_in_parallel(clean, url, tmp_path):
    items = tmp_path / "niah.jsonl"
    assert run_memagent("eval", "make-niah", "--tokens", "250", "--n", "4", "-o", items, "-m", clean).returncode == 0
    out_served, out_here = tmp_path / "served.jsonl", tmp_path / "here.jsonl"
    started = time.monotonic()
    served = run_memagent(
        "eval", items, *_served(url, "--tokenizer", str(clean)), *BUDGETS, "--parallel", "4", "-o", out_served, "--json"
    )
    assert served.returncode == 0, served.stderr
    assert time.monotonic() - started < 120
    here = run_memagent("eval", items, "-m", clean, *BUDGETS, "--threads", "1", "-o", out_here, "--json")
    assert json.loads(served.stdout)["n"] == json.loads(here.stdout)["n"] == 4

    def rows(path):
        return {r["id"]: r["raw"] for r in map(json.loads, path.read_text().splitlines())}

    assert rows(out_served) == rows(out_here)  # same replies, whichever order the items finished in


def test_one_question_failing_leaves_the_others(clean, doc):
    """A scripted server that rejects every request about one question (HTTP 400): that
    question fails with its own error and trace; the other is answered; the exit code is 1."""
    from test_served import WHOLE_REPLY, Peer, send_json, send_sse

    def script(n, handler, body):
        if b"Forbidden topic?" in body:
            send_json(handler, 400, {"error": {"message": "this prompt is not allowed", "code": 400}})
        else:
            send_sse(handler, WHOLE_REPLY)

    with Peer(script) as peer:
        done = run_memagent(
            "ask",
            *_served(peer.url, "--tokenizer", str(clean), "--served-model", "m"),
            doc,
            "-q",
            "Fine question?",
            "-q",
            "Forbidden topic?",
            *BUDGETS,
            "--json",
        )
    assert done.returncode == 1
    fine, bad = json.loads(done.stdout)["results"]
    assert fine["answer"] == "Hello world" and fine["question"] == "Fine question?"
    assert bad["question"] == "Forbidden topic?" and "HTTP 400" in bad["error"] and "not allowed" in bad["error"]
    assert "error: Q2: The server at " in done.stderr
    runs = {r["question"]: r["status"] for r in json.loads(run_memagent("traces", "list", "--json").stdout)["runs"]}
    assert runs == {"Fine question?": "complete", "Forbidden topic?": "failed"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--engine", "vllm"], "error: Unknown engine 'vllm'. Use --engine llama (the default) or --engine openai."),
        (
            ["--engine", "openai"],
            "error: --engine openai needs --base-url. e.g. --base-url http://127.0.0.1:8000/v1 for a local vLLM or llama-server.",
        ),
        (
            ["--engine", "openai", "--base-url", "gpu-box:8000"],
            "error: --base-url 'gpu-box:8000' is not an http(s) URL, nor a file of them. e.g. http://127.0.0.1:8000/v1",
        ),
        (["--base-url", "http://127.0.0.1:1/v1"], "error: --base-url and --served-model need --engine openai."),
        (["--timeout", "5"], "error: --timeout needs --engine openai: the embedded engine waits on no server."),
        (
            ["--tokenizer", "m.gguf"],
            "error: --tokenizer needs --engine openai: the embedded engine reads its model's own vocabulary. Drop it,"
            " or give the model with -m.",
        ),
        (
            ["--engine", "openai", "--base-url", "http://127.0.0.1:1/v1", "--timeout", "0"],
            "error: --timeout 0 is not a positive number of seconds.",
        ),
    ],
)
@pytest.mark.parametrize("command", ["ask", "eval"])
def test_served_options_are_checked_first(doc, command, args, message):
    done = run_memagent(command, *args, doc, *(["Who?"] if command == "ask" else []))
    assert done.returncode == 2
    assert done.stderr.strip() == message


def test_a_server_that_stops_answering_ends_the_run_within_the_timeout_and_resumes(clean, tmp_path):
    import signal

    from memagent_cli.model.served.transport import longest_wait

    long_doc = tmp_path / "long.txt"
    long_doc.write_text(words(3000, seed=12))
    args = ["ask", *BUDGETS, "--memory-tokens", "12", long_doc, "Who?", "--json"]
    with llama_server(clean, tmp_path) as base:
        served = _served(base, "--tokenizer", str(clean), "--timeout", "0.5")
        proc = subprocess.Popen(
            [sys.executable, "-m", "memagent_cli", *args[:1], *served, *args[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for line in proc.stderr:
                if line.startswith("step 2/"):
                    # Stopped, the server still accepts connections (the kernel does) and answers none.
                    llama_server.proc.send_signal(signal.SIGSTOP)
                    stopped_at = time.monotonic()
                    break
            out, rest = proc.communicate(timeout=120)
            elapsed = time.monotonic() - stopped_at
        finally:
            llama_server.proc.send_signal(signal.SIGCONT)
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1 and "Traceback" not in rest, rest
        error, stopped = rest.strip().splitlines()[-2:]
        assert error.startswith(f"error: The server at {base} timed out: it sent nothing for 0.5 s (5 attempts).")
        assert "give it longer with --timeout" in error
        assert stopped.startswith("The run stopped after step 2. Resume with: memagent ask --resume ")
        assert elapsed < longest_wait(0.5, 4, 1.0) + 5  # timeout x attempts and the backoff between them
        resumed = run_memagent("ask", "--resume", stopped.rsplit(" ", 1)[1], "--json", "--timeout", "30")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["answer"]
