"""The default thread count follows the cores idle now, read from the kernel's CPU clocks: the
policy is tested on given figures and given /proc files, never on this machine's load."""

from __future__ import annotations

import os
import sys

import pytest

from memagent_cli.model import runtime
from memagent_cli.model.runtime import CpuTimes, busy_cores, busy_now, cpu_times, default_threads, threads_for


def test_every_idle_core_and_no_busy_one():
    """B7: 2 threads on 2 idle cores ran 1.73x as fast as 1; beside one busy process 0.58x of 1."""
    assert threads_for(2, 0.0) == 2
    assert threads_for(2, 0.3) == 2  # a neighbour busy under half the time leaves the core
    assert threads_for(2, 0.5) == 1  # half the time or more takes it
    assert threads_for(2, 1.0) == 1
    assert threads_for(2, 2.0) == 1  # always one
    assert threads_for(16, 3.4) == 13
    assert threads_for(1, 0.0) == 1


def test_the_clocks_read_now_decide_not_the_load_average(monkeypatch):
    """The issue: an idle machine right after a busy command has a 1-minute load average of
    about 1, which took a core away; the clocks read now say idle."""
    monkeypatch.setattr(runtime, "available_cores", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.07, 0.6, 0.3), raising=False)
    assert default_threads(sample=lambda: 0.02) == 2
    # a neighbour that has just started is counted at once (its load average is still 0)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0), raising=False)
    assert default_threads(sample=lambda: 0.97) == 1


def test_without_the_clocks_the_load_average_then_half_the_cores(monkeypatch):
    monkeypatch.setattr(runtime, "available_cores", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 0.0, 0.0), raising=False)
    assert default_threads(sample=lambda: None) == 3  # macOS: no /proc/stat

    def no_load() -> tuple[float, float, float]:
        raise OSError

    monkeypatch.setattr(os, "getloadavg", no_load, raising=False)
    assert default_threads(sample=lambda: None) == 2  # Windows: neither


def test_busy_cores_from_two_readings():
    """Busy time on the allowed cores, less this process's own, over the time one core saw."""
    before = CpuTimes(cores=2, busy=1000, total=5000, own=300)
    # 0.1 s at 100 ticks a second on 2 cores: 20 ticks passed; 12 were busy, 2 of them ours
    after = CpuTimes(cores=2, busy=1012, total=5020, own=302)
    assert busy_cores(before, after) == pytest.approx(1.0)
    # all of the busy time ours (a document read ahead while the model loads): no neighbour
    assert busy_cores(before, CpuTimes(2, 1010, 5020, 310)) == 0.0
    # never above the cores, never below 0 (our ticks and the machine's are sampled apart)
    assert busy_cores(before, CpuTimes(2, 1030, 5020, 300)) == 2.0
    assert busy_cores(before, CpuTimes(2, 1000, 5020, 305)) == 0.0
    # no time passed, or the affinity changed between the readings
    assert busy_cores(before, before) is None
    assert busy_cores(before, CpuTimes(3, 1012, 5030, 302)) is None


def test_busy_now_samples_twice():
    readings = iter([CpuTimes(2, 100, 1000, 10), CpuTimes(2, 105, 1020, 10)])
    assert busy_now(0.0, read=lambda: next(readings)) == pytest.approx(0.5)
    assert busy_now(0.0, read=lambda: None) is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux: the affinity names the cores read")
def test_cpu_times_reads_the_allowed_cores_and_this_process(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  90 0 30 300 10 0 0 0 0 0\n"
        "cpu0 10 0 5 100 5 0 0 2 0 0\n"
        "cpu1 40 0 10 50 0 0 1 0 0 0\n"
        "cpu2 40 0 15 150 5 0 0 0 0 0\n"
        "intr 1 2 3\n",
        encoding="ascii",
    )
    own = tmp_path / "self-stat"
    # comm may hold spaces and parentheses; utime and stime are the 14th and 15th fields
    own.write_text("4242 (python (x) y) R 1 4242 4242 0 -1 4194304 100 0 0 0 37 5 0 0 20 0 3 0 100\n", encoding="ascii")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    times = cpu_times(str(stat), str(own))
    assert times == CpuTimes(cores=2, busy=17 + 51, total=122 + 101, own=42)  # cpu2 is not ours
    assert cpu_times(str(tmp_path / "missing"), str(own)) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_this_machine_gives_a_figure_within_its_cores():
    busy = busy_now(0.05)
    assert busy is not None and 0.0 <= busy <= runtime.available_cores()


def test_a_runs_threads_follow_the_cores_its_neighbours_leave_free(monkeypatch):
    """Threads not given are chosen again before each reply, from the CPU clocks since the last one
    began: a neighbour that starts mid-run takes a thread back, one that ends gives it back, and the
    replies are what an engine with its threads fixed writes. The clocks are given, not read."""
    from helpers import CODEWORD_MODEL, codeword_prompts, reply

    from memagent_cli.model import llama
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    readings = iter(
        [
            CpuTimes(cores=2, busy=0, total=0, own=0),  # at load
            CpuTimes(cores=2, busy=20, total=200, own=20),  # only this process worked: both cores free
            CpuTimes(cores=2, busy=240, total=400, own=40),  # a neighbour kept a core busy
            CpuTimes(cores=2, busy=440, total=600, own=60),  # still there
            CpuTimes(cores=2, busy=460, total=800, own=80),  # gone
        ]
    )
    monkeypatch.setattr(llama, "cpu_times", lambda: next(readings))
    monkeypatch.setattr(llama, "default_threads", lambda: 2)
    monkeypatch.setattr(llama, "available_cores", lambda: 2)
    info = read_gguf(CODEWORD_MODEL)
    engine = llama.LlamaEngine(
        info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=1024, options=llama.EmbeddedOptions(gpu_layers=0)
    )
    fixed = llama.LlamaEngine(
        info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=1024, options=llama.EmbeddedOptions(gpu_layers=0, threads=2)
    )
    try:
        import llama_cpp

        seen = []
        for message in codeword_prompts(4):
            assert reply(engine, message).text == reply(fixed, message).text
            ctx = engine._model().ctx
            # the prompt is read on as many threads: a second one spun against the neighbour too
            seen.append((llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)))
        assert seen == [(2, 2), (1, 1), (1, 1), (2, 2)] and fixed.threads == 2
    finally:
        engine.close()
        fixed.close()
