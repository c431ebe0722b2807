"""Text from outside never reaches a terminal as control sequences.

File names, document text, model names and questions carrying CSI, OSC, BEL and C1 bytes go
through every command that shows them; nothing raw may come out on stdout or stderr. (JSON output
escapes them by construction; the HTML export escapes as HTML.)
"""

from __future__ import annotations

import json

import pytest
from conftest import run_memagent, words

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
    assert missing.returncode != 0
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
