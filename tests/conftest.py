"""Shared fixtures: a trace store per test, tiny GGUF models made once per session, processes
killed at teardown, no network. What is not a fixture lives in helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import shared_path


def pytest_configure(config) -> None:
    """Under pytest-xdist with no more workers than cores, each worker (and every process it
    starts, which inherits the affinity) keeps to a core of its own. llama.cpp's threads wait for
    each other by spinning, so two workers' runs each taking both cores made every run several
    times slower than alone (a 100K-token document: 16 s alone, 60 to 161 s beside another test);
    one core each, they cost what they cost alone on one core. Nothing is asserted on this: runs
    choose their threads from the affinity, as on a user's machine restricted by taskset."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if 1 < count <= len(cores):
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


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
    from testkit.tinymodel import LONG_TOKEN, build_vocab, write_tiny_qwen2

    vocab = build_vocab()
    out = tmp_path_factory.mktemp("models")
    return {
        "random": write_tiny_qwen2(out / "random.gguf", seed=1),
        "long": write_tiny_qwen2(out / "long.gguf", constant=True, bias={vocab.token_id(LONG_TOKEN.encode()): 30.0}),
        "stop": write_tiny_qwen2(out / "stop.gguf", constant=True, bias={vocab.special["<|im_end|>"]: 30.0}),
        "bare": write_tiny_qwen2(out / "bare.gguf", seed=2, chat_template=None),
    }


@pytest.fixture(scope="session")
def gpt2_pre_model(tmp_path_factory):
    """A model whose pre-tokenizer (GPT-2's) has no tiktoken pattern here: the fallback path."""
    from testkit.tinymodel import write_tiny_qwen2

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


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: nothing a document points at may be fetched."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture
def steady_timings(monkeypatch):
    """The draft policy's decode costs pinned to what it assumes before any timing (each token a
    decode holds adds 5% of a one-token decode), whatever this machine's load makes of the
    engine's own timings: on a busy CPU a noisy fit says drafts do not pay, and a test that asserts
    drafts were checked, or that means to run them, would depend on other processes. Every
    DraftPolicy (the lone engine's and the batching driver's) reads its costs through `cost`."""
    from memagent_cli.model.speculate import PRIOR_EXTRA, DraftPolicy

    monkeypatch.setattr(DraftPolicy, "cost", lambda self: (1 - PRIOR_EXTRA, PRIOR_EXTRA))
