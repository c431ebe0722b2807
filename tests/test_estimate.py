"""`inspect`'s time estimate: what it counts (a token reads the weights and the K and V of every
token before it; every memory update writes its full budget) and how this machine's recorded runs
calibrate it. Figures are given, never timed (B12 in docs/PERFORMANCE.md compares with real runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_memagent

from memagent_cli.core import inspection
from memagent_cli.core.inspection import CPU_SPEEDS, Speeds, inspect_sources, measured_factor, run_seconds, step_shapes
from memagent_cli.core.pipeline import SourceOptions
from memagent_cli.model.gguf import read_gguf
from memagent_cli.traces.store import TraceStore

CODEWORD = Path(__file__).parent / "data" / "codeword.gguf"
UNIT = Speeds(prompt_weights=100.0, prompt_kv=10.0, generation_weights=50.0, generation_kv=5.0, per_token=0.5, threads=2)


def test_a_token_reads_the_weights_and_every_token_before_it():
    # a prompt of 4 from an empty cache: 4 passes over 100 bytes of weights, and 0+1+2+3 ~ 4*4/2 tokens of K and V
    assert UNIT.prompt_seconds(4, weights=100.0, kv=10.0) == pytest.approx(4 * 1.0 + 10 * 8 / 10)
    # 2 tokens after 10 in the cache: the weights twice, and 10.5 + 11.5 ~ 2*10 + 2*2/2 tokens of K and V
    assert UNIT.generation_seconds(2, 10, weights=100.0, kv=5.0) == pytest.approx(2 * (2.0 + 0.5) + 5 * 22 / 5)
    # a long context costs more than its weights for a small model: the old estimate's blind spot
    weights, kv = 98e6, 23040.0  # SmolLM2-135M Q4_1
    at_6k = CPU_SPEEDS.generation_seconds(1, 6000, weights, kv)
    assert at_6k > 2 * CPU_SPEEDS.generation_seconds(1, 0, weights, kv)


def test_threads_scale_prompts_and_never_promise_faster_generation():
    assert UNIT.on(2) == UNIT
    four = UNIT.on(4)
    assert four.prompt_weights == 200.0 and four.prompt_kv == 20.0
    assert four.generation_weights == 50.0 and four.per_token == 0.5  # memory-bound: no gain assumed
    one = UNIT.on(1)
    assert one.prompt_weights == 50.0 and one.generation_weights == 25.0 and one.per_token == 1.0
    gpu = Speeds(1.0, 1.0, 1.0, 1.0, 0.0)
    assert gpu.on(8) is gpu


@pytest.fixture
def report(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("the river flooded the old mill in spring\n" * 300, encoding="utf-8")
    return inspect_sources(
        [str(doc)],
        model=str(CODEWORD),
        question="What flooded?",
        chunk_tokens=500,
        memory_tokens=64,
        sources=SourceOptions(),
        warn=lambda _: None,
    )


def test_every_call_at_its_full_budget(report):
    calls = step_shapes(report)
    assert len(calls) == report.steps + 1 and report.steps >= 2
    assert sum(report.chunk_sizes) == report.stats.document_tokens
    fixed = calls[1][0] - report.chunk_sizes[1] - 64
    # the first step reads the initial memory ("No previous memory"), every later one a full memory
    assert fixed < calls[0][0] - report.chunk_sizes[0] < fixed + 64
    assert [p for p, _ in calls[1:-1]] == [fixed + c + 64 for c in report.chunk_sizes[1:]]
    assert all(g == 64 for _, g in calls[:-1])
    assert calls[-1][1] == 1024  # the answer's budget (the protocol's)


def test_without_recorded_runs_the_reference_speeds(report, monkeypatch):
    monkeypatch.setattr("memagent_cli.model.runtime.gpu_offload_supported", lambda: False)
    monkeypatch.setattr("memagent_cli.model.runtime.available_cores", lambda: 2)
    est = inspection.estimate(report, runs=[])
    weights, kv, _ = inspection.model_shape(report.info)
    calls = step_shapes(report)
    work = sum(run_seconds(CPU_SPEEDS, calls, weights, kv)) * (1 + inspection.CALIBRATION_MARGIN)
    start = inspection.START_SECONDS + CODEWORD.stat().st_size / inspection.LOAD_BYTES_PER_SECOND
    assert est["seconds"] == round(work + start, 1)
    assert est["calibrated_by_runs"] == 0 and "reference machine" in est["assumes"] and "idle" in est["assumes"]
    assert est["device"] == "CPU (2 cores)"


def _run(path: str, size: int, device: str, steps: list[tuple[int, int, float]], **settings: object) -> dict:
    return {
        "model": {"name": "m", "path": path, "size": size},
        "settings": {"device": device, **settings},
        "steps": [{"prompt_tokens": p, "generated_tokens": g, "seconds": s} for p, g, s in steps],
    }


def test_recorded_runs_of_the_model_calibrate_it():
    info = read_gguf(CODEWORD)
    weights, kv, _ = inspection.model_shape(info)
    path, size = str(CODEWORD.resolve()), info.file_size
    one = sum(run_seconds(CPU_SPEEDS.on(2), [(600, 64)], weights, kv))
    slow = sum(run_seconds(CPU_SPEEDS.on(1), [(600, 64)], weights, kv))
    runs = [
        _run(path, size, "CPU (2 threads)", [(600, 64, 3 * one), (600, 64, 3 * one)]),  # 3x the reference
        _run(path, size, "CPU (1 thread)", [(600, 64, 2 * slow)]),  # priced on the thread it had
        _run(path, size, "CPU (2 threads)", [(600, 64, 4 * one), (600, 0, 0.0)]),  # a step of no time is skipped
        _run(path, size + 1, "CPU (2 threads)", [(600, 64, 100 * one)]),  # another file at that path
        _run("/elsewhere.gguf", size, "CPU (2 threads)", [(600, 64, 100 * one)]),
        _run(path, size, "GPU (4/4 layers offloaded)", [(600, 64, 100 * one)]),
        _run(path, size, "CPU (2 threads)", [(600, 64, 100 * one)], engine={"kind": "llama-server"}),
    ]
    factor, n = measured_factor(info, False, CPU_SPEEDS, 2, runs)
    assert n == 3 and factor == pytest.approx(3.0)
    assert measured_factor(info, False, CPU_SPEEDS, 2, []) is None
    many = [_run(path, size, "CPU (2 threads)", [(600, 64, (k + 1) * one)]) for k in range(20)]
    assert measured_factor(info, False, CPU_SPEEDS, 2, many) == (pytest.approx(5.5), inspection.CALIBRATION_RUNS)


def test_a_run_recorded_in_the_trace_store_calibrates_inspect(tmp_path, memagent_home):
    """The real path: `ask` records its steps, `inspect` reads them back (nothing timed is compared)."""
    doc = tmp_path / "doc.txt"
    doc.write_text("the river flooded the old mill in spring\n" * 120, encoding="utf-8")
    budgets = ["--chunk-tokens", "300", "--memory-tokens", "16"]
    before = run_memagent("inspect", doc, "-m", CODEWORD, "--question", "What flooded?", *budgets, "--json")
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["estimate"]["calibrated_by_runs"] == 0
    assert not (memagent_home / "traces.db").exists()  # inspect makes no store
    ran = run_memagent("ask", doc, "What flooded?", "-m", CODEWORD, *budgets, "--answer-tokens", "8", "--json")
    assert ran.returncode == 0, ran.stderr
    after = run_memagent("inspect", doc, "-m", CODEWORD, "--question", "What flooded?", *budgets, "--json")
    est = json.loads(after.stdout)["estimate"]
    assert est["calibrated_by_runs"] == 1 and "this machine's last 1 run" in est["assumes"]
    with TraceStore() as store:
        (run,) = [store.get_run(r["id"]) for r in store.list_runs()]
    assert run["steps"] and all(s["seconds"] > 0 for s in run["steps"])
