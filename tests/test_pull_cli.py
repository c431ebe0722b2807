"""Getting a model as a user does: real `memagent` processes against a fake Hub on 127.0.0.1
that speaks the Hub's protocol (tests/fakehub.py), pointed to by HF_ENDPOINT."""

import json
import os
import pty
import subprocess
import sys

import pytest
from fakehub import FakeHub
from helpers import REPO, drain_terminal, read_terminal_until, words

SEVEN_B = "mradermacher/RL-MemoryAgent-7B-GGUF"  # the catalog's first candidate for memagent-7b
FAST = ["--chunk-tokens", "300", "--memory-tokens", "6", "--answer-tokens", "4", "--temperature", "0"]


@pytest.fixture
def hub(models, tmp_path):
    fake = FakeHub()
    data = models["random"].read_bytes()
    fake.add_repo(SEVEN_B, {"RL-MemoryAgent-7B.Q4_K_M.gguf": data, "README.md": b"# card"})
    fake.add_repo("owner/tiny-GGUF", {"tiny-Q8_0.gguf": models["long"].read_bytes()})
    with fake:
        yield fake


def env_for(hub, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("MEMAGENT_MODEL", "HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update(NO_COLOR="1", HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def memagent(hub, tmp_path, *args, **extra):
    return subprocess.run(
        [sys.executable, "-m", "memagent_cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env_for(hub, tmp_path, **extra),
        cwd=REPO,
        timeout=300,
    )


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(300), encoding="utf-8")
    return path


def test_pull_the_default_then_ask_with_no_flags(hub, tmp_path, doc, models):
    pulled = memagent(hub, tmp_path, "models", "pull", "memagent-7b", "--json")
    assert pulled.returncode == 0, pulled.stderr
    record = json.loads(pulled.stdout)
    assert record["name"] == "memagent-7b:q4_k_m" and record["sha256"] == hub.sha256(SEVEN_B, "RL-MemoryAgent-7B.Q4_K_M.gguf")
    assert open(record["path"], "rb").read() == models["random"].read_bytes()
    assert "installed memagent-7b:q4_k_m" in pulled.stderr
    asked = memagent(hub, tmp_path, "ask", doc, "q", "--json", *FAST)
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["model"]["path"] == record["path"]
    listed = json.loads(memagent(hub, tmp_path, "models", "list", "--json").stdout)
    assert [m["name"] for m in listed["installed"]] == ["memagent-7b:q4_k_m"]
    removed = memagent(hub, tmp_path, "models", "rm", "memagent-7b")
    assert removed.returncode == 0 and not os.path.exists(record["path"])  # a pulled file goes with it


def test_pull_any_hub_gguf_by_quantization(hub, tmp_path, doc):
    pulled = memagent(hub, tmp_path, "models", "pull", "hf:owner/tiny-GGUF:q8_0")
    assert pulled.returncode == 0, pulled.stderr
    asked = memagent(hub, tmp_path, "ask", doc, "q", "-m", "hf:owner/tiny-GGUF:q8_0", "--quiet", *FAST)
    assert asked.returncode == 0 and asked.stdout == "=" * 40 * 4 + "\n"
    missing = memagent(hub, tmp_path, "models", "pull", "hf:owner/tiny-GGUF:q4_k_m")
    assert missing.returncode == 1 and "Q8_0" in missing.stderr  # says what there is


def test_first_run_offers_the_download_on_a_terminal(hub, tmp_path, doc, spawned):
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", "ask", str(doc), "q", *FAST],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env_for(hub, tmp_path),
        cwd=REPO,
    )
    spawned.append(proc)
    os.close(follower)
    seen = read_terminal_until(leader, b"[Y/n]")
    # The numbers `models pull` would say, before anything is downloaded.
    offer = b" ".join(seen.split())  # the terminal may wrap the line
    assert b"memagent-7b:q4_k_m is not installed. Getting it downloads " in offer
    assert b"free disk at its peak; takes about" in offer and b"Start now? [Y/n]" in offer
    assert [r for r in hub.requests if "/resolve/" in r[1] or "/cdn/" in r[1]] == []
    os.write(leader, b"y\n")
    drain_terminal(leader)
    answer = proc.stdout.read()
    assert proc.wait(timeout=120) == 0 and answer.strip()
    listed = json.loads(memagent(hub, tmp_path, "models", "list", "--json").stdout)
    assert [m["name"] for m in listed["installed"]] == ["memagent-7b:q4_k_m"]


def test_no_build_and_no_weights_on_the_hub_says_both(hub, tmp_path):
    proc = memagent(hub, tmp_path, "models", "pull", "memagent-14b")
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "No Hub repository has a q4_k_m GGUF of memagent-14b" in line
    assert "No repository BytedTsinghua-SIA/RL-MemoryAgent-14B on the Hub" in line


def test_offline_refuses_before_touching_the_network(hub, tmp_path, doc):
    for args, extra in (
        (["models", "pull", "memagent-7b", "--offline"], {}),
        (["models", "pull", "memagent-7b"], {"HF_HUB_OFFLINE": "1"}),
    ):
        proc = memagent(hub, tmp_path, *args, **extra)
        assert proc.returncode == 1 and "Downloads are off" in proc.stderr
    assert hub.requests == []  # refused before any listing or download
    asked = memagent(hub, tmp_path, "ask", doc, "q", "--offline")
    assert asked.returncode == 2 and "memagent models pull memagent-7b:q4_k_m" in asked.stderr


def test_checksum_mismatch_installs_nothing(hub, tmp_path):
    hub.wrong_sha = True
    proc = memagent(hub, tmp_path, "models", "pull", "memagent-7b")
    assert proc.returncode == 1 and "checksum mismatch" in proc.stderr
    listed = json.loads(memagent(hub, tmp_path, "models", "list", "--json").stdout)
    assert listed["installed"] == []
