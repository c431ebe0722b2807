"""Text from outside never reaches a terminal as control sequences.

File names, document text, model names and questions carrying CSI, OSC, BEL and C1 bytes go
through every command that shows them; nothing raw may come out on stdout or stderr. (JSON output
escapes them by construction; the HTML export escapes as HTML.)
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
from helpers import REPO, drain_terminal, run_memagent, words

from memagent_cli.cli.textout import visible

# CSI (colour, clear screen), OSC (retitle the window, ended by BEL), a bare BEL and C1 CSI (0x9b).
HOSTILE = "\x1b[31mred\x1b[2J\x1b]0;pwned\x07bell\x07c1\x9b31m"
RAW = ("\x1b", "\x07", "\x9b")
FAST = ["--chunk-tokens", "300", "--memory-tokens", "6", "--answer-tokens", "4", "--temperature", "0"]


def _clean(proc, what: str) -> None:
    for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        found = [c for c in RAW if c in text]
        assert not found, f"{what}: {stream} carries {found!r}: {text[:400]!r}"


@pytest.fixture
def hostile_folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / f"{HOSTILE}.txt").write_text(f"{words(400)}\n{HOSTILE}\n", encoding="utf-8")
    (folder / f"bin{HOSTILE}.dat").write_bytes(b"\x00\x01\x02binary" * 50)  # skipped, with a note naming it
    return folder


def test_ask_and_inspect_show_hostile_names_harmlessly(hostile_folder, models):
    _clean(run_memagent("inspect", hostile_folder, "--model", models["random"]), "inspect")
    # --show-prompt piped is data, like a piped answer: stdout keeps the exact text the model sees.
    shown = run_memagent("inspect", hostile_folder, "--model", models["random"], "--question", HOSTILE, "--show-prompt", "1")
    assert HOSTILE in shown.stdout
    shown.stdout = ""
    _clean(shown, "inspect --show-prompt")
    _clean(run_memagent("ask", hostile_folder, HOSTILE, "-m", models["random"], *FAST), "ask, piped")
    missing = run_memagent("ask", hostile_folder / f"gone{HOSTILE}.txt", "q", "-m", models["random"], *FAST)
    assert missing.returncode == 1
    _clean(missing, "ask, a missing file")


def test_traces_show_hostile_text_harmlessly(hostile_folder, models):
    asked = run_memagent("ask", hostile_folder, HOSTILE, "-m", models["random"], "--json", *FAST)
    assert asked.returncode == 0, asked.stderr
    _clean(asked, "ask --json")  # JSON escapes control characters
    run_id = json.loads(asked.stdout)["trace"]
    for args in (
        ["traces", "list"],
        ["traces", "show", run_id],
        ["traces", "show", run_id, "--json"],
        ["traces", "diff", run_id, "1", "2"],
        ["traces", "search", "red"],
        ["traces", "export", run_id, "--format", "markdown"],
        ["traces", "export", run_id, "--format", "jsonl"],
    ):
        proc = run_memagent(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        _clean(proc, " ".join(args))


def test_models_and_doctor_show_hostile_names_harmlessly(models):
    added = run_memagent("models", "add", models["random"], "--name", HOSTILE)
    assert added.returncode == 0, added.stderr
    _clean(added, "models add")
    for args in (["models", "list"], ["models", "info", HOSTILE], ["doctor"]):
        proc = run_memagent(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        _clean(proc, " ".join(args))
    _clean(run_memagent("models", "info", HOSTILE + "x"), "models info, unknown name")


def test_eval_shows_hostile_items_harmlessly(tmp_path, models):
    data = tmp_path / "items.jsonl"
    data.write_text(
        json.dumps({"id": HOSTILE, "context": words(200) + HOSTILE, "input": HOSTILE, "answers": [HOSTILE]}) + "\n",
        encoding="utf-8",
    )
    _clean(run_memagent("eval", data, "-m", models["random"], *FAST), "eval")


# One token the model below writes again and again: an OSC retitle ended by BEL, a clear-scrollback
# CSI and a C1 CSI (U+009B, as UTF-8), none of which the file name, the document or the question holds.
MODEL_PAYLOAD = "\x1b]2;owned\x07\x1b[3J\u009b7m"
QUESTION = "who\x1b[5m is\x1b]0;asked\x07 it\x9b?"


@pytest.fixture(scope="module")
def echo_model(tmp_path_factory):
    """A tiny model whose every token is MODEL_PAYLOAD: the default vocabulary plus a chain of
    merges that builds the payload as one token (id = 256 + merge rank, controls last)."""
    from testkit.tinymodel import CONTROL_TOKENS, TinyVocab, build_vocab, write_tiny_qwen2

    base = build_vocab()
    payload = MODEL_PAYLOAD.encode("utf-8")
    merges, known = list(base.merges), set(base.tokens)
    for end in range(2, len(payload) + 1):
        if payload[:end] not in known:
            merges.append((payload[: end - 1], payload[end - 1 : end]))
            known.add(payload[:end])
    tokens = base.tokens[:256] + [a + b for a, b in merges]
    special = {name: len(tokens) + i for i, name in enumerate(CONTROL_TOKENS)}
    tokens += [name.encode("utf-8") for name in CONTROL_TOKENS]
    vocab = TinyVocab(tokens=tokens, token_types=[1] * (len(tokens) - 3) + [3] * 3, merges=merges, special=special)
    path = tmp_path_factory.mktemp("echo") / "echo.gguf"
    return write_tiny_qwen2(path, vocab=vocab, constant=True, bias={vocab.token_id(payload): 30.0})


def _on_a_terminal(args, spawned) -> tuple[int, str]:
    """`memagent ARGS` with stdout and stderr on one pseudo-terminal (so the live view draws and the
    answer is printed for a person); everything it wrote, decoded with raw bytes kept as surrogates."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "MEMAGENT_MODEL", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env.update(TERM="xterm-256color", COLUMNS="200", LINES="50")
    proc = subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        cwd=REPO,
        env=env,
    )
    spawned.append(proc)
    os.close(follower)
    shown = drain_terminal(leader)
    return proc.wait(timeout=60), shown.decode("utf-8", errors="surrogateescape")


@pytest.mark.parametrize("questions", [1, 2], ids=["one question", "several questions"])
def test_ask_on_a_terminal_shows_hostile_names_text_and_output_harmlessly(hostile_folder, echo_model, spawned, questions):
    doc = hostile_folder / f"{HOSTILE}.txt"
    # Several questions take the multi-question view and print "Qn: question" before each answer.
    asked = [QUESTION] if questions == 1 else ["-q", QUESTION, "-q", "Second?"]
    code, screen = _on_a_terminal(["ask", doc, *asked, "-m", echo_model, *FAST], spawned)
    assert code == 0, screen[-2000:]
    # The live view drew, with its own escapes (the multi-question view is a table, "Qn ...").
    assert "\x1b[" in screen and ("Memory" in screen if questions == 1 else "Q2: Second?" in screen)
    planted = (
        "\x1b[31mred",  # the name's CSI (the view's own red is followed by its own text)
        "\x1b[2J",
        "\x1b[3J",
        "\x1b[5m",
        "\x1b]",  # any OSC: the view writes none
        "\x07",
        "\x9b",  # C1 CSI as a character (UTF-8 C2 9B) ...
        "\udc9b",  # ... or as a lone byte
    )
    found = [p for p in planted if p in screen]
    assert not found, f"raw on the terminal: {found!r}\n{screen[-1500:]!r}"
    # And each was shown, as visible() renders it: the name (header and step lines), the question,
    # and the model's own writing (the memory panel, the answer).
    # (The multi-question view names no file: its rows are the questions.)
    for text in (HOSTILE, QUESTION, MODEL_PAYLOAD * 2) if questions == 1 else (QUESTION, MODEL_PAYLOAD * 2):
        assert visible(text) in screen, (visible(text), screen[-1500:])
