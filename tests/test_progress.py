"""Progress that moves while a CPU reads a long prompt, in every view of several runs: the --each
table's row and its ETA, and the MCP host's progress notifications. Fed the events a run makes, with
the clock pinned where the estimate depends on it."""

from __future__ import annotations

import io
import time

import anyio
from rich.console import Console

from memagent_cli.cli.views.jobview import JobView
from memagent_cli.cli.views.rows import Row
from memagent_cli.core.events import AnswerStarted, DocumentRead, PromptProgressed, RunStarted, StepStarted
from memagent_cli.core.jobs import Job


def test_a_row_shows_its_prompt_read_and_never_counts_a_running_step_done():
    row = Row(question="Who?")
    row.follow(DocumentRead(document_tokens=15000, steps=3))
    row.follow(StepStarted(index=3, chunk=None, total_steps=3, tokens_read=15000))  # type: ignore[arg-type]
    assert row.share_done() == 2 / 4  # two steps done of three, and the answer
    row.follow(PromptProgressed(step=3, done=2048, total=4096))
    assert row.where() == "step 3/3 · prompt 2,048/4,096"
    assert row.share_done() == (2 + 0.25) / 4
    row.follow(AnswerStarted(100))
    assert row.share_done() == 3 / 4 < 1 and row.where() == "answering"


def test_the_job_table_never_says_eta_0_00_with_a_run_still_going(monkeypatch):
    """One run of one, on its last step: the ETA is what is left of it, or not said; never 0:00."""
    view = JobView(Console(file=io.StringIO()), 1, live=False, several=False)
    job = Job(key="a", question="Who?", title="a.txt")
    view.handle(job, RunStarted("Who?", "m", "", (), None, "t"))  # type: ignore[arg-type]
    view.handle(job, DocumentRead(document_tokens=10000, steps=2))
    view.handle(job, StepStarted(index=2, chunk=None, total_steps=2, tokens_read=10000))  # type: ignore[arg-type]
    monkeypatch.setattr(time, "perf_counter", lambda: view.started + 30.0)  # 30 s in, one step of two done
    assert "ETA 1:00" in view.summary()  # 1 of 3 model calls (2 steps, the answer) in 30 s: 2 left
    view.handle(job, AnswerStarted(100))
    summary = view.summary()
    assert "ETA 0:15" in summary and "ETA 0:00" not in summary


def test_mcp_progress_moves_while_a_prompt_is_read():
    from memagent_cli.mcp.calls import _Progress
    from memagent_cli.runs.shared import Told

    sent: list[tuple[float, float | None, str]] = []

    class Host:
        async def progress(self, done, total, message):
            sent.append((done, total, message))

        async def log(self, level, line):
            pass

    progress = _Progress(Host(), [""], several=False)

    async def main():
        await progress.told(Told(0, "step", 1, 3, 5000, 60.0))
        await progress.told(Told(0, "prompt", 2, 3, 5000, read=(1024, 4096)))
        await progress.told(Told(0, "prompt", 2, 3, 5000, read=(3072, 4096)))

    anyio.run(main)
    values = [done for done, _, _ in sent]
    assert values == sorted(values) and len(values) == 3 and values[-1] < 2
    assert sent[-1][2] == "step 2 of 3: reading its prompt, 3,072 of 4,096 tokens"
