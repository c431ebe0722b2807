"""Bad input and faults, each with a clear outcome and nothing lost (docs/RELIABILITY.md).

Cases covered elsewhere are named in RELIABILITY.md with their test; these are the rest."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from helpers import REPO, read_line, run_memagent, sigint_default, spawn_memagent, words
from typer.testing import CliRunner

from memagent_cli.cli.app import app
from memagent_cli.errors import MemagentError

SMALL = ["--chunk-tokens", "200", "--memory-tokens", "16", "--answer-tokens", "8", "--temperature", "0"]


run = run_memagent  # a real `memagent` process, as a user runs it


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(1200), encoding="utf-8")
    return path


def in_process(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"NO_COLOR": "1"})


def test_latin1_text_is_read_with_a_warning(tmp_path, models):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Café crème, naïve façade. ".encode("latin-1") * 50)
    proc = run("ask", path, "q", "-m", models["random"], "--json", *SMALL)
    assert proc.returncode == 0
    assert "latin1.txt is not UTF-8; decoded as cp1252 (detected)" in proc.stderr
    assert "replaced" not in proc.stderr and json.loads(proc.stdout)["document_tokens"] > 0


def test_empty_stdin_and_empty_file(tmp_path, models):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    stdin = run("ask", "q", "-m", models["random"], input="")
    assert stdin.returncode == 1 and "Nothing came in on standard input" in stdin.stderr and "Traceback" not in stdin.stderr
    proc = run("ask", empty, "q", "-m", models["random"])
    assert proc.returncode == 1 and "There is no text to read" in proc.stderr and "Traceback" not in proc.stderr


def test_an_architecture_this_llama_cpp_cannot_load(doc, models, tmp_path):
    data = models["random"].read_bytes()
    at = data.index(b"qwen2", data.index(b"general.architecture"))
    alien = tmp_path / "alien.gguf"
    alien.write_bytes(data[:at] + b"qwenx" + data[at + 5 :])
    proc = run("ask", doc, "q", "-m", alien, "--no-trace")
    assert proc.returncode == 1 and "unknown model architecture: 'qwenx'" in proc.stderr
    assert "upgrade it (pip install -U llama-cpp-python)" in proc.stderr and proc.stderr.count("\n") == 1


def run_with_peak_rss(tmp_path, *args, timeout=300) -> tuple[subprocess.CompletedProcess, int]:
    """`memagent ARGS` as `run` runs it, and its peak resident set in bytes: the rusage wait4 gives
    for this one process (RUSAGE_CHILDREN would be the largest of every child the suite waited for)."""
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    env["NO_COLOR"] = "1"
    with open(tmp_path / "stdout", "w+", encoding="utf-8") as out, open(tmp_path / "stderr", "w+", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memagent_cli", *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            cwd=REPO,
        )
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    return done, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB elsewhere


def test_not_enough_memory_to_load_suggests_what_to_lower(doc, models, tmp_path):
    """A context whose KV cache no machine has the memory for (4e9 tokens: 953.7 GiB for this model) is
    refused with the numbers before llama.cpp allocates anything. It used to be handed to llama.cpp,
    whose process reached 19.4 GB on a 24 GB machine before the load failed."""
    proc, peak = run_with_peak_rss(tmp_path, "ask", doc, "q", "-m", models["random"], "--ctx", "4000000000", "--no-trace")
    assert proc.returncode == 1 and "Not enough memory: lower --ctx (now 4,000,000,000;" in proc.stderr
    assert "A context of 4,000,000,000 tokens needs 953.7 GiB of KV cache" in proc.stderr and "of memory is free" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert peak < 2 * 1024**3, f"peak resident set {peak / 1024**3:.1f} GiB"


def test_a_context_is_checked_against_the_free_memory_given():
    """The check itself, on a model's sizes and free-memory figures given to it: the machine's KV
    cache against its free memory (its weights are mapped from the file, not counted), the GPU's
    share against the GPU's."""
    from memagent_cli.model.memory import ModelMemory, check_context_fits

    # 4 layers of 1 MiB, 1 MiB of other tensors, 1 KiB of KV cache per token per layer
    mem = ModelMemory(5 * 2**20, [2**20] * 4, 2**20, 4, 4096, kv_per_layer=[1024] * 4, n_vocab=1000)
    check_context_fits(mem, 2000, host_free=8 * 2**20)  # 7.8 MiB of cache
    with pytest.raises(MemagentError) as caught:
        check_context_fits(mem, 3000, host_free=8 * 2**20)  # 11.7 MiB
    assert caught.value.message == "A context of 3,000 tokens needs 12 MiB of KV cache; 8 MiB of memory is free"
    assert caught.value.hint is not None and caught.value.hint.startswith(
        "Not enough memory: lower --ctx (now 3,000; about 2,048 fit)"
    )
    # every layer on the GPU: the machine keeps 1 MiB of weights and no cache; the GPU takes the rest
    check_context_fits(mem, 2000, gpu_layers=-1, host_free=10 * 2**20, gpu_free=64 * 2**20)
    with pytest.raises(MemagentError, match=r"needs 12 MiB of GPU memory \(8 MiB of it KV cache\); 10 MiB is free"):
        check_context_fits(mem, 2000, gpu_layers=-1, host_free=10 * 2**20, gpu_free=10 * 2**20)
    check_context_fits(mem, 10**9)  # no figure, no check


@pytest.mark.parametrize("delay", [0.0, 0.03, 0.1])
def test_sigint_during_startup_or_model_load(tmp_path, models, delay, memagent_home, spawned):
    """From the moment memagent runs (its trace store exists), Ctrl-C is clean at any point.
    (Before that, in the interpreter's own start-up, Python prints its own traceback.)"""
    doc = tmp_path / "long.txt"
    doc.write_text(words(30000), encoding="utf-8")  # seconds of work: the signal lands mid-run
    proc = spawn_memagent("ask", doc, "q", "-m", models["random"], *SMALL)
    spawned.append(proc)
    deadline = time.monotonic() + 30
    while not (memagent_home / "traces.db").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay)  # opening the store, reading sources, loading the model, the first step
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err and out == ""


def test_an_interrupt_that_passed_through_exec_still_exits_130(tmp_path):
    """Ctrl-C while a dataclass is being built (importing llama_cpp builds many) raises inside an
    exec() of source text. memagent handles it, and still exits with its own 130 rather than being
    killed by SIGINT, the way CPython ends `python -m` when it thinks the interrupt went unhandled."""
    package = tmp_path / "interrupted_in_exec"
    package.mkdir()
    (package / "__main__.py").write_text(
        "from memagent_cli.cli import app, entry\n"
        "def interrupted_in_exec(**options):  # main() calls the app with click's options\n"
        "    exec('raise KeyboardInterrupt')  # where the signal lands: in code made from text\n"
        "app.app = interrupted_in_exec  # what main() runs as the command\n"
        "entry.main()\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", package.name], cwd=tmp_path, capture_output=True, text=True, preexec_fn=sigint_default
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "interrupted\n", "")


def test_sigint_during_the_final_answer_then_resume(tmp_path, models, spawned):
    doc = tmp_path / "short.txt"
    doc.write_text(words(60), encoding="utf-8")
    proc = spawn_memagent(
        "ask", doc, "q", "-m", models["random"], "--memory-tokens", "4", "--answer-tokens", "20000", "--temperature", "0"
    )
    spawned.append(proc)
    assert read_line(proc).startswith("step 1/1")  # the only step is done: now the answer
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Resume with: memagent ask --resume" in err and out == ""
    listed = json.loads(run("traces", "list", "--json").stdout)["runs"]
    assert listed[0]["status"] == "interrupted" and listed[0]["step_count"] == 1


def test_internal_errors_are_one_line_keep_the_run_and_show_a_traceback_with_debug(doc, models):
    # A fault injected into the agent at step 2, as a bug would surface.
    code = (
        "import sys, memagent_cli.core.protocols as protocols\n"
        "real = protocols.Protocol.memory_prompt\n"
        "def broken(self, q, memory, chunk):\n"
        "    if memory not in ('No previous memory', ''): raise RuntimeError('boom')  # step 2\n"
        "    return real(self, q, memory, chunk)\n"
        "protocols.Protocol.memory_prompt = broken\n"
        "from memagent_cli.cli.app import main\n"
        "sys.argv = ['memagent'] + sys.argv[1:]\n"
        "main()\n"
    )
    base = [sys.executable, "-c", code, "ask", str(doc), "q", "-m", str(models["random"]), *SMALL]
    env = {k: v for k, v in os.environ.items() if k not in ("MEMAGENT_MODEL", "MEMAGENT_DEBUG")}
    proc = subprocess.run(base, capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "internal error: RuntimeError: boom" in proc.stderr and "memagent doctor" in proc.stderr
    (failed,) = json.loads(run("traces", "list", "--json").stdout)["runs"]
    assert failed["status"] == "failed" and failed["step_count"] == 1 and "boom" in failed["error"]
    debug = subprocess.run(base + ["--debug"], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "RuntimeError: boom" in debug.stderr
    resumed = run("ask", "--resume", failed["id"], "--json")  # the bug gone, the run goes on
    assert resumed.returncode == 0 and len(json.loads(resumed.stdout)["steps"]) > 1


def test_disk_full_while_writing_the_trace_still_prints_the_answer(doc, models, monkeypatch):
    from memagent_cli.traces import store

    def full(self, run_id, step):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store.TraceStore, "add_step", full)
    result = in_process("ask", doc, "q", "-m", models["long"], *SMALL)
    assert result.exit_code == 0 and result.stdout.strip().startswith("=" * 40)
    assert "The trace could not be written (database or disk is full); the run goes on without it." in result.stderr


def test_a_locked_trace_database_runs_untraced_with_a_warning(doc, models, memagent_home, monkeypatch):
    from memagent_cli.traces import store

    store.TraceStore().close()  # create it
    holder = sqlite3.connect(memagent_home / "traces.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.3)
    try:
        result = in_process("ask", doc, "q", "-m", models["long"], *SMALL)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 0 and result.stdout.strip()
    assert "Another memagent process holds the trace database" in result.stderr
    # the store opens (under WAL, a writer's lock does not stop reading); writing the run is what fails
    assert "); the run goes on without it." in result.stderr and "This run is not recorded." not in result.stderr


def test_a_corrupt_trace_database_is_moved_aside_and_replaced(doc, models, memagent_home):
    memagent_home.mkdir(parents=True, exist_ok=True)
    (memagent_home / "traces.db").write_bytes(b"this is not sqlite" * 100)
    proc = run("ask", doc, "q", "-m", models["random"], "--json", *SMALL)
    assert proc.returncode == 0 and "damaged" in proc.stderr
    assert list(memagent_home.glob("traces.db.corrupt-*")), "the damaged file is kept"
    assert json.loads(run("traces", "list", "--json").stdout)["runs"][0]["id"] == json.loads(proc.stdout)["trace"]


def test_a_file_that_changes_while_it_is_read(tmp_path, models, monkeypatch):
    """A file appended to while memagent reads it: the run goes on, and says its answer may mix the
    old text and the new. memagent looks at the file (size, time) before reading it and after its
    last text; a small file is read at once, a window no process outside can be sure to write in,
    so the append is made in it, by the pipeline's read_source as its last text has been read."""
    from memagent_cli.core import pipeline

    path = tmp_path / "growing.txt"
    path.write_text(words(3000), encoding="utf-8")
    read_source = pipeline.read_source

    def read_then_appended(source, **options):
        yield from read_source(source, **options)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(words(50) + "\n")

    monkeypatch.setattr(pipeline, "read_source", read_then_appended)
    result = in_process("ask", path, "q", "-m", models["random"], *SMALL)
    assert result.exit_code == 0 and result.stdout.strip()
    assert "growing.txt changed while it was read; the answer may mix its old and new text." in result.stderr


def test_no_secrets_in_traces(doc, models, memagent_home):
    secrets = {"HF_TOKEN": "hf_SECRETtoken123", "MEMAGENT_API_KEY": "sk-SECRET-456", "OPENAI_API_KEY": "sk-SECRET-789"}
    proc = run("ask", doc, "q", "-m", models["random"], *SMALL, env=secrets)
    assert proc.returncode == 0
    raw = b"".join(p.read_bytes() for p in memagent_home.glob("traces.db*"))
    assert raw and not any(secret.encode() in raw for secret in secrets.values())


def test_a_file_name_that_is_not_utf8(tmp_path, models):
    folder = tmp_path / "weird"
    folder.mkdir()
    name = os.fsdecode(b"n\x80me.txt")  # a lone surrogate in Python: no stream can encode it raw
    (folder / name).write_text(words(200), encoding="utf-8")
    proc = run("ask", folder, "q", "-m", models["random"], "--json", *SMALL)
    assert proc.returncode == 0 and "internal error" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["sources"][0]["path"] == os.path.join(str(folder), name)  # the \udc80 escape names it exactly
    listed = run("traces", "list", env={"COLUMNS": "300"})
    assert listed.returncode == 0 and "n\ufffdme.txt" in listed.stdout  # shown, not crashed on
    shown = json.loads(run("traces", "show", "last", "--json").stdout)
    assert shown["sources"][0]["path"] == os.path.join(str(folder), name)


def test_a_device_named_as_a_source_is_refused_at_once(models):
    started = time.monotonic()
    proc = run("ask", "/dev/zero", "q", "-m", models["random"])
    assert proc.returncode == 2 and proc.stderr.count("\n") <= 2 and "Traceback" not in proc.stderr
    assert "/dev/zero is a character device, not a file" in proc.stderr
    assert time.monotonic() - started < 30


def test_an_endless_binary_stdin_is_refused_within_seconds(models):
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    with open("/dev/urandom", "rb") as endless:
        proc = subprocess.run(
            [sys.executable, "-m", "memagent_cli", "ask", "q", "-m", str(models["random"])],
            stdin=endless,
            capture_output=True,
            text=True,
            env={**env, "NO_COLOR": "1"},
            cwd=REPO,
            timeout=60,
        )
    assert proc.returncode == 1 and "stdin looks like binary data" in proc.stderr and "Traceback" not in proc.stderr


def test_process_substitution_is_read_as_a_stream(doc, models, tmp_path):
    # bash's <(command) names a pipe, /dev/fd/63: read once, as stdin is.
    command = f'exec "{sys.executable}" -m memagent_cli ask <(cat "{doc}") q -m "{models["random"]}" --json --no-trace'
    proc = subprocess.run(["bash", "-c", command + " " + " ".join(SMALL)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (source,) = out["sources"]
    assert source["path"].startswith("/dev/fd/") and source["size"] is None
    inspected = json.loads(run("inspect", doc, "-m", models["random"], "--json").stdout)
    assert out["document_tokens"] == inspected["document_tokens"] > 0  # the same text as the file itself
