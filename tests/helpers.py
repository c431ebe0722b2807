"""What tests share that is not a fixture (testkit holds what the benchmarks use too): running memagent as a user does,
paths to the shared test data, documents, servers and the trained code-word model's engine. conftest.py keeps
the fixtures, built on these."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Callable

import pytest

from testkit.processes import free_port, until_ready
from testkit.texts import CODEWORD_ASK, CODEWORD_FACT, CODEWORD_MODEL, REPO, SHARED, codeword_tokenizer, whole_fact, words

__all__ = ["CODEWORD_ASK", "CODEWORD_FACT", "CODEWORD_MODEL", "REPO", "SHARED", "codeword_tokenizer", "whole_fact", "words"]


def run_memagent(*args, input=None, env=None, cwd=None, drop=("MEMAGENT_MODEL",), timeout=300):
    """`memagent ARGS` as a user runs it: a real process, stdout and stderr apart, NO_COLOR,
    and none of the caller's own model choice (`drop` names variables not passed on). `timeout`
    bounds a hung run, with room for a machine busy with other work (the suite must pass beside
    two CPU-bound processes on two cores, about three times slower)."""
    full = {k: v for k, v in os.environ.items() if k not in drop}
    full.update({"NO_COLOR": "1", **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "memagent_cli", *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        env=full,
        cwd=cwd or REPO,
        timeout=timeout,
    )


def sigint_default() -> None:
    """preexec_fn for a child a test interrupts with SIGINT: started from a background job or a
    service manager, pytest inherits SIGINT ignored and its children would too (the Unix convention
    memagent keeps), so the Ctrl-C under test would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn_memagent(*args, env=None, cwd=None, preexec_fn=sigint_default, **popen) -> subprocess.Popen:
    """`memagent ARGS` started as a user starts it, for a test that watches it run or signals it:
    stdout and stderr piped as text unless given, none of the caller's own model choice, and SIGINT
    at its default (`preexec_fn`). Add it to the `spawned` fixture so a failed test stops it."""
    full = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    full.update(env or {})
    popen = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", *map(str, args)], cwd=cwd or REPO, env=full, preexec_fn=preexec_fn, **popen
    )


WAIT = 300  # seconds a test waits for a line or a state it expects, on a machine busy with other work


def read_line(proc: subprocess.Popen, deadline: float | None = None) -> str:
    """The next line of a spawned process's stderr ("" at its end), or the test fails (and the
    process is killed) at `deadline` (time.monotonic(); WAIT seconds from now if not given). The
    read blocks in a thread of its own, so that a process that hangs without a word fails the test
    instead of hanging the suite."""
    if deadline is None:
        deadline = time.monotonic() + WAIT
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stderr.readline()), daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    if not got:
        proc.kill()
        reader.join(10)
        pytest.fail(f"no line from pid {proc.pid} by the deadline")
    return got[0]


def wait_for_steps(proc: subprocess.Popen, steps: int, timeout: float = WAIT) -> None:
    """Reads a spawned `memagent ask`'s stderr (its plain progress) until `steps` step lines have
    come, whatever other lines come between (notes, an InfMem planner's decisions); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < steps:
        line = read_line(proc, deadline)
        assert line, proc.stderr.read()
        seen += line.startswith("step ")


def wait_until(done: Callable[[], object], proc: subprocess.Popen | None = None, timeout: float = WAIT, what: str = "") -> None:
    """Looks whether `done()` holds every 0.05 s until it does; fails once `proc` (if given) has
    exited, or after `timeout`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert proc is None or proc.poll() is None, f"the process exited ({proc.returncode}) before {what or 'that'}"
        assert time.monotonic() < deadline, f"waited {timeout} s for {what or 'that'}"
        time.sleep(0.05)


def read_terminal_until(
    leader: int, marker: bytes, timeout: float = WAIT, count: int = 1, seen: bytearray | None = None
) -> bytes:
    """What a program writes to a pseudo-terminal, read until `marker` is in it `count` times; fails
    after `timeout`, or if the program closes the terminal first. `seen`: what was read before, which
    the reading goes on (and counts) from."""
    deadline = time.monotonic() + timeout
    seen = bytearray() if seen is None else seen
    while seen.count(marker) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} on the terminal after {timeout} s:\n{seen[-3000:].decode(errors='replace')}"
        if select.select([leader], [], [], min(left, 1.0))[0]:  # blocks until it writes, or a second passes
            seen += os.read(leader, 65536)  # OSError once it has closed the terminal
    return bytes(seen)


def drain_terminal(leader: int, timeout: float = WAIT) -> bytes:
    """All a program writes to a pseudo-terminal until it closes it. Read while it draws, or it
    blocks on a full buffer; closes `leader`. Fails if it has not closed it after `timeout`."""
    deadline = time.monotonic() + timeout
    shown = b""
    try:
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"the terminal was still open after {timeout} s:\n{shown[-3000:].decode(errors='replace')}"
            if not select.select([leader], [], [], min(left, 1.0))[0]:  # blocks until it writes, or a second passes
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the program closed the terminal: it has exited
                break
            if not data:
                break
            shown += data
    finally:
        os.close(leader)
    return shown


def shared_path(*parts: str) -> Path:
    """A file of the shared test data (tests/data/shared: reference notes and fixtures)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: tests/data/shared/README.md lists what belongs there")
    return path


@contextlib.contextmanager
def llama_server(model: Path, workdir: Path, *extra: str, port: int | None = None):
    """llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`, from the
    test extra) serving `model` on a free port of 127.0.0.1; yields its base URL (…/v1) and
    stops it after. The process is at `llama_server.proc` for tests that kill it."""
    import httpx2

    port = port or free_port()
    log = workdir / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "2048",
                "--n_threads",
                "1",
                "--n_threads_batch",
                "1",
                # by default it drops a streaming reply when another request arrives
                "--interrupt_requests",
                "false",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    llama_server.proc = proc
    base = f"http://127.0.0.1:{port}/v1"

    def answers() -> bool:
        return httpx2.get(f"{base}/models", timeout=2).status_code == 200

    with until_ready(proc, log, "llama_cpp.server", answers, not_yet=(httpx2.TransportError,), stop_within=10):
        yield base


def write_clean_model(path: Path) -> Path:
    """A tiny random qwen2 that never emits a control token, a token over 32 bytes or a token that
    is not whole UTF-8 on its own: llama-cpp-python's server drops the bytes of the last two kinds
    (abetlen/llama-cpp-python#2362, and its stream decodes with errors="ignore"), the embedded
    engine does not, and served-engine tests compare sampling, not those decoders. Its replies
    run to max_tokens."""
    from testkit.tinymodel import build_vocab, write_tiny_qwen2

    vocab = build_vocab()
    banned = {}
    for i, (token, kind) in enumerate(zip(vocab.tokens, vocab.token_types)):
        try:
            token.decode("utf-8")
            whole = True
        except UnicodeDecodeError:
            whole = False
        if kind == 3 or len(token) > 32 or not whole:
            banned[i] = -30.0
    return write_tiny_qwen2(path, seed=1, bias=banned)


# --- the trained code-word model's engine, for tests that compare replies ---------------------


def codeword_engine(sequences: int = 1, **options):
    """memagent's embedded engine on the trained code-word model (tests/data), one thread."""
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(CODEWORD_MODEL)
    settings = EmbeddedOptions(gpu_layers=0, threads=1, **options)
    return LlamaEngine(info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=1024, sequences=sequences, options=settings)


def codeword_document(path: Path, empty_sections: int) -> Path:
    """A code-word document at `path`: the fact in its first 64-token section, then sections without it."""
    import random

    from testkit.codeword import make_document

    rng = random.Random(5)
    sections = [make_document(rng, 64, where=0.5).text] + [make_document(rng, 64, fact=False).text for _ in range(empty_sections)]
    path.write_text("\n".join(sections), encoding="utf-8")
    return path


def codeword_steps(n: int) -> list[tuple[str, str]]:
    """n memory prompts with the memory each holds: the fact in every third chunk, the fact or no
    memory in turn."""
    import random

    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt
    from testkit.codeword import QUESTION, make_document

    steps = []
    for s in range(n):
        memory = CODEWORD_FACT if s % 2 else INITIAL_MEMORY
        steps.append((memory_prompt(QUESTION, memory, make_document(random.Random(s), 64, fact=s % 3 == 0).text), memory))
    return steps


def codeword_prompts(n: int) -> list[str]:
    return [prompt for prompt, _ in codeword_steps(n)]


def reply(engine, message: str, max_tokens: int = 32, temperature: float = 0.0, seed: int | None = 3, expect: str = ""):
    """One complete() call to its CompletionDone, checking the streamed text adds up to it."""
    from memagent_cli.model.engine import CompletionDone, PromptRead, Sampling, TextDelta

    streamed, done = [], None
    for item in engine.complete(message, max_tokens, Sampling(temperature=temperature, seed=seed), expect):
        if isinstance(item, TextDelta):
            streamed.append(item.text)
        elif isinstance(item, PromptRead):
            assert not streamed and done is None and 0 < item.done <= item.total  # the prompt is read first
        else:
            assert isinstance(item, CompletionDone)
            done = item
    assert done is not None and "".join(streamed) == done.text
    return done


def read_path(path):
    """What memagent reads of one document by the full path: (text, segment places, notes)."""
    from memagent_cli.ingest.sources import collect_sources, read_source

    notes: list[str] = []
    sources = collect_sources([str(path)], warn=notes.append)
    assert len(sources) == 1
    segments = list(read_source(sources[0], warn=notes.append))
    return "".join(s.text for s in segments), [s.place for s in segments], notes


def mcp_stdio(home: Path, cwd: Path, *args):
    """The MCP SDK's parameters for `memagent mcp ARGS` as a client starts it over stdio, with this
    test's trace store (the SDK passes a few variables on, not PYTHONPATH: the code under test too)."""
    from mcp.client.stdio import StdioServerParameters

    env = {"MEMAGENT_HOME": str(home), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "memagent_cli", "mcp", *map(str, args)], env=env, cwd=str(cwd)
    )


# --- a real browser: headless Chromium (Debian's chromium-headless-shell) ---------------------

BROWSERS = ("chromium-headless-shell", "headless_shell", "chromium", "chromium-browser", "google-chrome")
INSTALL_BROWSER = "apt-get install chromium-headless-shell (as root; .ci/run does it)"


def headless_browser() -> str:
    """The headless Chromium that draws the pages; where none is installed a skip that says how
    to get one, or under CI (`CI` set), which must run these tests, a failure."""
    import shutil

    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found:
        return found
    message = f"headless Chromium is not installed (none of {', '.join(BROWSERS)} on PATH): {INSTALL_BROWSER}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def chromium(page: Path, *flags: str, size: tuple[int, int] = (1200, 1600)) -> subprocess.CompletedProcess:
    """Headless Chromium on `page` with `flags` (--dump-dom, --screenshot=FILE) and a throwaway
    profile; root needs --no-sandbox."""
    # The profile is a temporary directory, never beside the page: a page of the repository
    # (docs/live-view.svg) would leave Chromium's caches in the work tree, and parallel runs
    # would share one profile.
    with tempfile.TemporaryDirectory(prefix="memagent-chromium-") as profile:
        argv = [headless_browser(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
        argv += [f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}", *flags, page.as_uri()]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def screenshot(page: Path, shot: Path, size: tuple[int, int] = (1200, 1600)) -> Path:
    chromium(page, f"--screenshot={shot}", size=size)
    assert shot.is_file()
    return shot


def png_pixels(path: Path) -> tuple[int, int, list[list[bytes]]]:
    """(width, height, rows of RGB pixels) of an 8-bit RGB or RGBA PNG, its filters undone."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG layout {header}"
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [[r[i : i + 3] for i in range(0, stride, bpp)] for r in rows]
