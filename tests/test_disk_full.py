"""A full disk while a trace is written, or a model downloaded or converted (docs/RELIABILITY.md).

Real limits, not mocks: a size-limited tmpfs where the tests run as root and may mount (else
skipped, with the reason), and RLIMIT_FSIZE, which makes the kernel refuse a write past a size as a
full disk does (Python ignores SIGXFSZ, so the write fails with EFBIG)."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, read_line, run_memagent, spawn_memagent, words
from test_pull_cli import env_for, memagent
from test_pull_convert import REPO_ID, _installed, _staging, checkpoint_files, hub  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and tmpfs as Linux has them")

SMALL = ["--chunk-tokens", "200", "--memory-tokens", "16", "--answer-tokens", "8", "--temperature", "0"]


def pull_with_file_size_limit(hub, tmp_path, limit: int) -> subprocess.CompletedProcess:  # noqa: F811
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "memagent_cli", "models", "pull", f"hf:{REPO_ID}", "--quant", "q8_0"],
        capture_output=True,
        text=True,
        env=env_for(hub, tmp_path),
        cwd=REPO,
        timeout=300,
        preexec_fn=preexec,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_the_disk_filling_during_a_download_is_one_line_and_registers_nothing(hub, tmp_path, memagent_home):  # noqa: F811
    proc = pull_with_file_size_limit(hub, tmp_path, 1 << 20)  # every shard is larger
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    (error,) = _error_lines(proc.stderr)
    assert "The disk filled up during the download of tiny-qwen2:q8_0 (File too large)" in error
    assert "run the same command again; finished stages are kept" in error
    assert _installed(hub, tmp_path) == []
    partial = [p for p in _staging(memagent_home) if p.endswith(".partial")]
    assert partial, "what was downloaded is kept, to resume from"
    again = memagent(hub, tmp_path, "models", "pull", f"hf:{REPO_ID}", "--quant", "q8_0")
    assert again.returncode == 0, again.stderr
    assert _installed(hub, tmp_path) == ["tiny-qwen2:q8_0"] and _staging(memagent_home) == []


def test_the_disk_filling_during_the_conversion_keeps_the_download_and_registers_nothing(
    hub,  # noqa: F811
    checkpoint_files,  # noqa: F811
    tmp_path,
    memagent_home,
):
    # Room for every downloaded file, not for the GGUF they make together.
    limit = max(len(data) for data in checkpoint_files.values()) + (1 << 20)
    proc = pull_with_file_size_limit(hub, tmp_path, limit)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    (error,) = _error_lines(proc.stderr)
    assert "The disk filled up during the convert of tiny-qwen2:q8_0" in error
    assert _installed(hub, tmp_path) == []
    staged = _staging(memagent_home)
    assert not [p for p in staged if p.endswith(".gguf")], "no half-written GGUF looks whole"
    assert sum(p.endswith(".safetensors") for p in staged) == 2  # the download is kept
    again = memagent(hub, tmp_path, "models", "pull", f"hf:{REPO_ID}", "--quant", "q8_0")
    assert again.returncode == 0, again.stderr
    assert "download" not in again.stderr.split("\n", 1)[1], "the shards are not fetched again"
    assert _installed(hub, tmp_path) == ["tiny-qwen2:q8_0"]


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs: a really small filesystem (needs root and permission to mount)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Write a file until the filesystem has no room left."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        block = b"\0" * 65536
        while True:
            try:
                out.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(block) == 1:
                    return filler
                block = block[: len(block) // 2]


def test_the_disk_filling_while_a_trace_is_written_keeps_the_answer_and_the_steps(small_disk, tmp_path, models, spawned):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(6000), encoding="utf-8")  # tens of steps: the disk fills mid-run
    home = small_disk / "home"
    whole = run_memagent("ask", doc, "q", "-m", models["random"], "--json", "--no-trace", *SMALL)
    proc = spawn_memagent("ask", doc, "q", "-m", models["random"], "--json", *SMALL, env={"MEMAGENT_HOME": str(home)})
    spawned.append(proc)
    for _ in range(3):
        assert read_line(proc).startswith("step ")
    filler = fill(small_disk)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert err.count("The trace could not be written (database or disk is full); the run goes on without it.") == 1
    assert json.loads(out)["answer"] == json.loads(whole.stdout)["answer"]  # the answer paid for is printed

    filler.unlink()
    listed = run_memagent("traces", "list", "--json", env={"MEMAGENT_HOME": str(home)})
    assert listed.returncode == 0, listed.stderr  # the database still opens
    (run,) = json.loads(listed.stdout)["runs"]
    steps = len(json.loads(whole.stdout)["steps"])
    assert 3 <= run["step_count"] < steps  # kept up to the last step written before the disk filled
    resumed = run_memagent("ask", "--resume", run["id"], "--json", env={"MEMAGENT_HOME": str(home)})
    assert resumed.returncode == 0, resumed.stderr
    assert [s["memory"] for s in json.loads(resumed.stdout)["steps"]] == [s["memory"] for s in json.loads(whole.stdout)["steps"]]
