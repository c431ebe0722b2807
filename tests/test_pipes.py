"""Sources that give their text once (docs/RELIABILITY.md): bash's `<(cmd)`, a FIFO with a writer that
has finished or is still writing, and stdin, through `ask`, `-q` several and `--each`, with the trace
store on (the default). Each is read once; nothing opens it a second time, to hash it for the answer
look-up or to resume it or follow up on it, which each refuse in one line."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import REPO, run_memagent, spawn_memagent, wait_for_steps, words

SMALL = ["--chunk-tokens", "200", "--memory-tokens", "16", "--answer-tokens", "8", "--temperature", "0"]


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(1200), encoding="utf-8")
    return path


def bash(command, timeout=120):
    """A command line run by bash (for its `<(…)`), in the repository, memagent as `M`."""
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    env["NO_COLOR"] = "1"
    line = f'M() {{ "{sys.executable}" -m memagent_cli "$@"; }}; {command}'
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def tokens_of(doc, model):
    return json.loads(run_memagent("inspect", doc, "-m", model, "--json").stdout)["document_tokens"]


@pytest.mark.parametrize("extra", [[], ["--fresh"]])
def test_process_substitution_is_read_once_with_the_trace_store_on(doc, models, extra):
    model = models["random"]
    proc = bash(f'M ask <(cat "{doc}") q -m "{model}" --json {" ".join(SMALL + extra)}')
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (source,) = out["sources"]
    assert source["path"].startswith("/dev/fd/") and source["size"] is None
    assert out["document_tokens"] == tokens_of(doc, model) > 0  # the whole text, as the file itself gives it
    assert out["trace"]  # recorded all the same


def test_a_pipe_is_never_given_a_stored_answer(doc, models):
    """The same text through a pipe twice is read twice: what a pipe gives is known only once read."""
    model = models["random"]
    first = bash(f'M ask <(cat "{doc}") q -m "{model}" --json {" ".join(SMALL)}')
    second = bash(f'M ask <(cat "{doc}") q -m "{model}" --json {" ".join(SMALL)}')
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "answered before" not in second.stderr
    assert json.loads(second.stdout)["trace"] != json.loads(first.stdout)["trace"]


def test_several_questions_over_a_pipe_read_it_once(doc, models):
    model = models["random"]
    proc = bash(f'M ask <(cat "{doc}") -q one -q two -m "{model}" --json {" ".join(SMALL)}')
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert [r["question"] for r in results] == ["one", "two"]
    assert [r["document_tokens"] for r in results] == [tokens_of(doc, model)] * 2


def test_each_over_a_pipe(doc, models):
    model = models["random"]
    one = bash(f'M ask <(cat "{doc}") --each -q one -m "{model}" --jsonl /dev/stdout {" ".join(SMALL)}')
    assert one.returncode == 0, one.stderr
    (record,) = [json.loads(line) for line in one.stdout.splitlines() if line.startswith("{")]
    assert record["answer"] is not None and record["document_tokens"] == tokens_of(doc, model)
    several = bash(f'M ask <(cat "{doc}") --each -q one -q two -m "{model}" {" ".join(SMALL)}', timeout=60)
    assert several.returncode == 2
    assert "a pipe, can be read once, so --each cannot ask it several questions" in several.stderr
    assert several.stderr.count("\n") == 1 and "Traceback" not in several.stderr


def fifo_writer(fifo, data: bytes, pause: float = 0.0):
    """A writer that opens the FIFO (blocking until memagent opens it), writes `data` in two halves
    `pause` seconds apart, and closes it."""

    def write():
        with open(fifo, "wb") as pipe:
            pipe.write(data[: len(data) // 2])
            pipe.flush()
            time.sleep(pause)
            pipe.write(data[len(data) // 2 :])

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("pause", [0.0, 1.5], ids=["finished-writer", "slow-writer"])
def test_a_fifo_is_read_once_and_resume_and_follow_ups_refuse_it(doc, models, tmp_path, pause):
    model = models["random"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = fifo_writer(fifo, doc.read_bytes(), pause)
    proc = run_memagent("ask", fifo, "q", "-m", model, "--json", *SMALL, timeout=120)
    writer.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["document_tokens"] == tokens_of(doc, model)
    # Nobody writes to the FIFO now: anything that opened it again would wait for good (timeout).
    follow = run_memagent("ask", "-c", "and then?", "-m", model, timeout=60)
    assert follow.returncode == 1, follow.stderr
    assert f"{fifo} was a pipe, read once as it came, so conversation" in follow.stderr
    assert "cannot read it again for a follow-up" in follow.stderr and follow.stderr.count("\n") == 1


def test_an_interrupted_run_over_a_pipe_cannot_be_resumed(doc, models, tmp_path):
    """A run over a FIFO whose writer stops half-way is failed (kept); resuming it says why not, at once."""
    model = models["random"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = spawn_memagent("ask", fifo, "q", "-m", model, *SMALL, env={"NO_COLOR": "1"})
    try:
        with open(fifo, "wb") as pipe:
            # Enough for steps to be taken before the writer is done (the chunker holds back the
            # text's last few kilobytes until more comes or the pipe ends).
            pipe.write(words(12000).encode()[:40000])
            pipe.flush()
            wait_for_steps(proc, 1)
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    listed = json.loads(run_memagent("traces", "list", "--json").stdout)["runs"]
    (stopped,) = [r for r in listed if r["status"] == "interrupted"]
    resumed = run_memagent("ask", "--resume", "last", "-m", model, timeout=60)
    assert resumed.returncode == 1, resumed.stderr
    assert f"{fifo} was a pipe, read once as it came, so run {stopped['id'][:8]} cannot be resumed" in resumed.stderr
    assert "Traceback" not in resumed.stderr


def test_chat_refuses_a_pipe_it_would_read_again(doc, models, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = run_memagent("chat", fifo, "-m", models["random"], input="q\n", timeout=60)
    assert proc.returncode == 2
    assert f"{fifo} is a pipe: chat reads its sources again for every question" in proc.stderr
