"""From published safetensors to an answer: `models pull` converts when the Hub has no GGUF.

A fake Hub on 127.0.0.1 (tests/fakehub.py, the Hub's real protocol) serves a tiny sharded bf16 Qwen2
checkpoint carrying the real Qwen2.5 tokenizer, as BytedTsinghua-SIA publishes RL-MemoryAgent. The
pull lists it, says what it will cost, downloads, converts, quantizes with llama.cpp and registers;
then `ask --model NAME` answers with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakehub import FakeHub
from helpers import shared_path, sigint_default, words
from test_hub import point_at
from test_pull_cli import FAST, memagent

from memagent_cli.errors import MemagentError
from testkit.hfcheckpoint import TINY, write_checkpoint

REPO_ID = "owner/tiny-qwen2"
WEIGHTS_14B = "BytedTsinghua-SIA/RL-MemoryAgent-14B"  # the catalog's `weights` for memagent-14b


@pytest.fixture(scope="session")
def checkpoint_files(tmp_path_factory) -> dict[str, bytes]:
    folder = write_checkpoint(
        tmp_path_factory.mktemp("hubckpt") / "ck", TINY, seed=7, shards=2, tokenizer=shared_path("fixtures", "hf", "qwen2.5")
    )
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    files["README.md"] = b"# a tiny checkpoint\n"
    return files


@pytest.fixture
def hub(checkpoint_files):
    fake = FakeHub()
    fake.add_repo(REPO_ID, checkpoint_files)
    fake.add_repo(WEIGHTS_14B, checkpoint_files)
    with fake:
        yield fake


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(300), encoding="utf-8")
    return path


def _installed(hub, tmp_path) -> list[str]:
    return [m["name"] for m in json.loads(memagent(hub, tmp_path, "models", "list", "--json").stdout)["installed"]]


def _staging(home: Path) -> list[str]:
    folder = home / "models" / ".staging"
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_pull_a_safetensors_repository_then_ask(hub, tmp_path, doc, memagent_home):
    pulled = memagent(hub, tmp_path, "models", "pull", f"hf:{REPO_ID}", "--quant", "q8_0", "--json")
    assert pulled.returncode == 0, pulled.stderr
    record = json.loads(pulled.stdout)
    assert record["name"] == "tiny-qwen2:q8_0" and record["quantization"] == "q8_0"
    plan_line = pulled.stderr.splitlines()[0]
    # Said before the first byte: what it downloads, the peak disk and the time, per stage.
    assert re.match(
        r"tiny-qwen2:q8_0: downloads 4\d MiB; converts and quantizes to q8_0 \(~\d+ MiB\); "
        r"needs \d+ MiB of free disk at its peak; takes about \d+ s "
        r"\(download \d+ s at 50 MB/s, convert \d+ s, quantize \d+ s\)$",
        plan_line,
    ), plan_line
    for stage in ("download", "convert", "quantize"):
        assert f"{stage} 100%" in pulled.stderr
    assert record["source"].startswith(f"hf:{REPO_ID}@")
    assert _staging(memagent_home) == []  # intermediates are gone once the model is installed
    asked = memagent(hub, tmp_path, "ask", doc, "What is it about?", "--model", "tiny-qwen2:q8_0", "--json", *FAST)
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    assert result["model"]["path"] == record["path"] and result["steps"]
    assert all(step["generated_tokens"] > 0 for step in result["steps"])


def test_the_catalog_model_is_converted_from_its_published_weights(hub, tmp_path, memagent_home):
    """No candidate repository has a GGUF of memagent-14b: pull converts the catalog's `weights` repository."""
    pulled = memagent(hub, tmp_path, "models", "pull", "memagent-14b:q8_0")
    assert pulled.returncode == 0, pulled.stderr
    assert "installed memagent-14b:q8_0" in pulled.stderr
    assert _installed(hub, tmp_path) == ["memagent-14b:q8_0"]
    assert memagent(hub, tmp_path, "models", "path", "memagent-14b:q8_0").stdout.strip().endswith("-Q8_0.gguf")


def test_models_convert_takes_a_hub_repository_at_a_revision(hub, tmp_path):
    commit = hub._repos[REPO_ID].commit
    pulled = memagent(hub, tmp_path, "models", "convert", f"hf:{REPO_ID}@{commit}", "-Q", "f16", "--json")
    assert pulled.returncode == 0, pulled.stderr
    record = json.loads(pulled.stdout)
    assert record["name"] == "tiny-qwen2:f16" and record["source"] == f"hf:{REPO_ID}@{commit}"
    assert "quantize" not in pulled.stderr  # f16 is what the converter writes itself


def test_offline_refuses_a_hub_conversion_before_any_request(hub, tmp_path):
    proc = memagent(hub, tmp_path, "models", "convert", f"hf:{REPO_ID}", "--offline")
    assert proc.returncode == 1 and "Downloads are off" in proc.stderr
    assert hub.requests == []


def test_a_missing_weights_repository_is_one_line(tmp_path):
    with FakeHub() as empty:
        proc = memagent(empty, tmp_path, "models", "pull", "memagent-7b")
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert "No Hub repository has a q4_k_m GGUF of memagent-7b" in line and "BytedTsinghua-SIA/RL-MemoryAgent-7B" in line


@pytest.fixture
def in_process_hub(hub, monkeypatch, tmp_path):
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    point_at(monkeypatch, hub.url)
    return hub


def test_an_interrupted_pull_resumes_the_stage_it_was_in(in_process_hub, memagent_home):
    from memagent_cli.install import pulling, registry

    hub = in_process_hub
    hub.cut_after = 5_000_000  # the connection drops inside the first shard
    plan = pulling.plan_pull(f"hf:{REPO_ID}", quant="q8_0")
    first_download = plan.download_bytes
    with pytest.raises(MemagentError, match="interrupted"):
        pulling.execute(plan)
    assert registry.load() == {}

    # Again: the download resumes where it stopped (a Range request); stop it as quantizing begins.
    plan = pulling.plan_pull(f"hf:{REPO_ID}", quant="q8_0")
    assert 0 < plan.download_bytes < first_download

    def stop_at_quantize(stage, done, total):
        if stage == "quantize":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pulling.execute(plan, progress=stop_at_quantize)
    assert any(rng and rng.startswith("bytes=") for _, _, rng in hub.requests)
    assert registry.load() == {} and not plan.dest.exists()  # nothing looks installed
    staged = _staging(memagent_home)
    assert any(name.endswith("-intermediate.gguf") for name in staged)
    assert not any(name.endswith(".safetensors") for name in staged)  # shards go once the intermediate is whole

    # A third time: download and convert are done and not redone; only quantizing runs.
    hub.requests.clear()
    plan = pulling.plan_pull(f"hf:{REPO_ID}", quant="q8_0")
    assert plan.download_bytes == 0 and set(plan.seconds) == {"download", "quantize"}
    stages = set()
    name, record = pulling.execute(plan, progress=lambda stage, done, total: stages.add(stage))
    assert stages == {"quantize"} and name == "tiny-qwen2:q8_0"
    assert not any(path.endswith(".safetensors") for _, path, _ in hub.requests)
    assert registry.get(name)["path"] == str(plan.dest) and _staging(memagent_home) == []


def test_two_pulls_of_one_source_do_not_share_the_staging_folder(in_process_hub, memagent_home):
    from memagent_cli.install import pulling

    plan = pulling.plan_pull(f"hf:{REPO_ID}", quant="q8_0")
    plan.staging.mkdir(parents=True)
    with pulling._StagingLock(plan.staging):
        with pytest.raises(MemagentError, match="Another memagent is already working"):
            pulling.execute(pulling.plan_pull(f"hf:{REPO_ID}", quant="q8_0"))


def test_ctrl_c_during_a_pull_says_how_to_resume_and_the_rerun_skips_what_was_done(hub, tmp_path, spawned):
    import os
    import signal
    import subprocess
    import sys

    from helpers import REPO
    from test_pull_cli import env_for

    proc = subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", "models", "pull", f"hf:{REPO_ID}", "--quant", "q8_0"],
        stderr=subprocess.PIPE,
        preexec_fn=sigint_default,  # Ctrl-C must reach it even when pytest runs with SIGINT ignored
        stdout=subprocess.DEVNULL,
        env=env_for(hub, tmp_path),
        cwd=REPO,
        text=True,
    )
    spawned.append(proc)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("convert…"):
            os.kill(proc.pid, signal.SIGINT)  # converting has begun: the vocabulary alone takes seconds
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, "".join(seen) + rest
    assert "interrupted during convert: nothing is installed yet. Run the same command again" in rest
    assert "Traceback" not in rest
    again = memagent(hub, tmp_path, "models", "pull", f"hf:{REPO_ID}", "--quant", "q8_0")
    assert again.returncode == 0, again.stderr
    assert "downloads" not in again.stderr.splitlines()[0] and "download" not in again.stderr.split("\n", 1)[1]
    assert "convert 100%" in again.stderr and "installed tiny-qwen2:q8_0" in again.stderr


def test_the_plan_for_memagent_7b_states_what_the_readme_says(memagent_home):
    """RL-MemoryAgent-7B's listing (4 bf16 shards, 15.23 GB): what the user is told before the first byte."""
    from memagent_cli.install import pulling
    from memagent_cli.install.hub import HubFile

    repo = "BytedTsinghua-SIA/RL-MemoryAgent-7B"
    shards = [3_945_441_440, 3_864_726_320, 3_864_726_424, 3_556_377_672]  # about the sizes of Qwen2.5-7B's four shards
    files = [HubFile(repo, f"model-{i + 1:05d}-of-00004.safetensors", size, "0" * 64, "c" * 40) for i, size in enumerate(shards)]
    files += [
        HubFile(repo, name, 1000, None, "c" * 40)
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json")
    ]
    plan = pulling._convert_plan_hub(repo, files, "q4_k_m", "memagent-7b:q4_k_m")
    assert plan.download_bytes == sum(shards) + 4000
    assert 4.5e9 < plan.result_bytes < 4.9e9  # the real Q4_K_M is 4.68 GB
    # Shards and the bf16 intermediate side by side is the peak: ~30.5 GB, "~31 GB" in the README.
    assert 30.3e9 < plan.peak_disk < 31e9 and plan.disk_needed == plan.peak_disk
    assert set(plan.seconds) == {"download", "convert", "quantize"}
    line = plan.describe()
    assert line.startswith(
        "downloads 14.2 GiB; converts and quantizes to q4_k_m (~4.4 GiB); needs 28.4 GiB of free disk at its peak; takes about "
    )


def test_the_plan_for_qwenlong_states_download_disk_and_time(memagent_home):
    """QwenLong-L1.5-30B-A3B's published weights (16 bf16 shards, 61.07 GB): the same plan, stated
    before the first byte, with a Q4_K_M about the size community builds of Qwen3-30B-A3B have."""
    from memagent_cli.install import catalog, pulling
    from memagent_cli.install.hub import HubFile

    entry, quant = catalog.require("qwenlong-l1.5-30b-a3b")
    assert (entry.protocol, quant, entry.weights) == ("qwenlong", "q4_k_m", "Tongyi-Zhiwen/QwenLong-L1.5-30B-A3B")
    shards = [3_817_000_000] * 15 + [3_815_000_000]
    files = [
        HubFile(entry.weights, f"model-{i + 1:05d}-of-00016.safetensors", size, "0" * 64, "c" * 40)
        for i, size in enumerate(shards)
    ]
    files += [
        HubFile(entry.weights, name, 1000, None, "c" * 40)
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json")
    ]
    plan = pulling._convert_plan_hub(entry.weights, files, quant, "qwenlong-l1.5-30b-a3b:q4_k_m")
    assert plan.download_bytes == sum(shards) + 4000
    assert 17.5e9 < plan.result_bytes < 19.5e9  # community Q4_K_M builds of Qwen3-30B-A3B: ~18.6 GB
    assert 121e9 < plan.peak_disk < 123.5e9  # the shards and the bf16 intermediate side by side
    assert plan.describe().startswith("downloads 56.9 GiB; converts and quantizes to q4_k_m (~17.")
    assert set(plan.seconds) == {"download", "convert", "quantize"}
