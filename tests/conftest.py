"""Shared fixtures: paths to ../shared, tiny GGUF models made once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def run_memagent(*args, input=None, env=None, cwd=None, drop=("MEMAGENT_MODEL",)):
    """`memagent ARGS` as a user runs it: a real process, stdout and stderr apart, NO_COLOR,
    and none of the caller's own model choice (`drop` names variables not passed on)."""
    full = {k: v for k, v in os.environ.items() if k not in drop}
    full.update({"NO_COLOR": "1", **(env or {})})
    return subprocess.run([sys.executable, "-m", "memagent_cli", *map(str, args)], input=input, capture_output=True,
                          text=True, env=full, cwd=cwd or REPO, timeout=300)


def shared_path(*parts: str) -> Path:
    """A file under ../shared (the project's reference material), or skip the test."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not here (CI clones the repo with ../shared beside it)")
    return path


@pytest.fixture(autouse=True)
def memagent_home(tmp_path, monkeypatch) -> Path:
    """Every test records traces in its own store, never in the user's (subprocesses inherit it)."""
    home = tmp_path / "memagent-home"
    monkeypatch.setenv("MEMAGENT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def qwen2_vocab() -> Path:
    return shared_path("fixtures", "ggml-vocab-qwen2.gguf")


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Tiny qwen2 GGUFs: `random` writes varied text to its budget; `long` emits a 40-byte
    token forever; `stop` ends its turn at once; `bare` has no chat template."""
    from tinymodel import LONG_TOKEN, build_vocab, write_tiny_qwen2

    vocab = build_vocab()
    out = tmp_path_factory.mktemp("models")
    return {
        "random": write_tiny_qwen2(out / "random.gguf", seed=1),
        "long": write_tiny_qwen2(out / "long.gguf", constant=True, bias={vocab.token_id(LONG_TOKEN.encode()): 30.0}),
        "stop": write_tiny_qwen2(out / "stop.gguf", constant=True, bias={vocab.special["<|im_end|>"]: 30.0}),
        "bare": write_tiny_qwen2(out / "bare.gguf", seed=2, chat_template=None),
    }


def words(n: int, seed: int = 0) -> str:
    """n words of plain prose in lines: a document for tests."""
    import random

    rng = random.Random(seed)
    vocab = "the river city banks flooded in spring while a quick brown fox ran over lazy dogs near old mills".split()
    lines, line = [], []
    for _ in range(n):
        line.append(rng.choice(vocab))
        if len(line) == 11:
            lines.append(" ".join(line) + ".")
            line = []
    lines.append(" ".join(line))
    return "\n".join(lines).strip()


@pytest.fixture(scope="session")
def gpt2_pre_model(tmp_path_factory):
    """A model whose pre-tokenizer (GPT-2's) has no tiktoken pattern here: the fallback path."""
    from tinymodel import write_tiny_qwen2

    return write_tiny_qwen2(tmp_path_factory.mktemp("fallback") / "gpt2pre.gguf", seed=4, pre="gpt-2")


@pytest.fixture
def spawned():
    """Processes a test starts; any still running at teardown is killed, so a failed
    assertion never leaves a `memagent ask` burning a core."""
    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
