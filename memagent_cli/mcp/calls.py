"""A call's runs on the server's one engine, as the host sees them: queued in order, each driven
in a worker thread, its progress and memory told to the host, stopped when the host cancels.

The concurrency rule: runs take the engine's slots first come, first served. The embedded
engine on a CPU has one slot, so a second call's runs wait until the first's are done (they
are told they are queued, and may be cancelled while they wait); where the engine takes
several calls at once (the embedded engine batching on a GPU, a served engine with --parallel)
that many runs go together and their model calls are batched. A call with several runs (`each`,
`questions`) queues them all, in order.

A cancelled call stops each of its runs at the next token (runs/shared.py, SharedModel.run_one), recorded as
interrupted: the next `ask` of the same question on the same documents, or `resume`, goes on
from there.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Protocol, Sequence

import anyio
import anyio.to_thread

from ..errors import MemagentError
from ..model.memory import format_duration
from ..runs.shared import RunRequest, SharedModel, Told
from .results import outcome_record

TELL_POLL_SECONDS = 0.02  # how often a run's news is looked for: its worker thread only queues it


class Host(Protocol):
    """Where a call's progress and log lines go: the MCP request's context."""

    async def progress(self, done: float, total: float | None, message: str) -> None: ...

    async def log(self, level: str, text: str) -> None: ...


class Queue:
    """The runs of every call, in order, on the engine's slots."""

    def __init__(self, engine: SharedModel):
        self.engine = engine
        self._slots: anyio.Semaphore | None = None
        self._waiting = 0
        self._running = 0

    async def load(self) -> None:
        """Loads the model (once; a cancelled call leaves the loading to finish for the next)."""
        if self.engine.loaded is None:
            await anyio.to_thread.run_sync(self.engine.runner, abandon_on_cancel=True)
        if self._slots is None:
            self._slots = anyio.Semaphore(self.engine.slots)

    async def run(self, planned: Sequence[RunRequest], host: Host, *, several: bool) -> list[dict[str, Any]]:
        """Every planned run's record, in order. With `several`, a run that fails gives a record
        with its "error" and the others go on; else its MemagentError is raised."""
        await self.load()
        progress = _Progress(host, [p.label for p in planned], several)
        records: list[dict[str, Any]] = [{} for _ in planned]
        if not several:  # one run, its error raised as it is (a task group would wrap it in a group)
            await self._one(0, planned[0], progress, records, several)
            return records
        async with anyio.create_task_group() as group:
            for index, plan in enumerate(planned):
                group.start_soon(self._one, index, plan, progress, records, several)
        return records

    async def _one(self, index: int, plan: RunRequest, progress: _Progress, records: list[dict[str, Any]], several: bool) -> None:
        assert self._slots is not None
        ahead = self._running + self._waiting
        self._waiting += 1
        try:
            if ahead >= self.engine.slots:
                await progress.queued(index, ahead)
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        self._running += 1
        try:
            found = await self._drive(index, plan, progress)
        except MemagentError as exc:
            if not several:
                raise
            found = {"error": str(exc)}
        finally:
            self._running -= 1
            self._slots.release()
        await progress.finished(index)
        records[index] = found or {}

    async def _drive(self, index: int, plan: RunRequest, progress: _Progress) -> dict[str, Any] | None:
        """One run in a worker thread; what it tells is passed to the host as it comes."""
        cancel, ended = threading.Event(), threading.Event()
        told: queue.SimpleQueue[Told] = queue.SimpleQueue()  # the worker never waits for the host

        def work() -> dict[str, Any] | None:
            try:
                outcome = self.engine.run_one(plan, index=index, cancel=cancel, tell=told.put)
                return outcome_record(outcome, plan.job, self.engine.runner()) if outcome is not None else None
            finally:
                ended.set()

        async def pump() -> None:
            try:
                while True:
                    finished = ended.is_set()  # read first: what the run told before it ended is queued by now
                    passed = 0
                    while not told.empty():
                        await progress.told(told.get_nowait())
                        passed += 1
                    if finished:
                        return
                    if not passed:
                        await anyio.sleep(TELL_POLL_SECONDS)
            except BaseException:  # cancelled by the host (or its connection failed): stop the run
                cancel.set()
                raise

        failed: MemagentError | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                # Not abandoned when cancelled: the run stops within a token, and is recorded so.
                found = await anyio.to_thread.run_sync(work)
            except MemagentError as exc:  # the run's own failure: raised below, not in an exception group
                failed, found = exc, None
            except BaseException:
                cancel.set()
                raise
        if failed is not None:
            raise failed
        return found


class _Progress:
    """A call's progress, counted in model calls: a run of N steps is N + 1 of them (the answer is
    the last), and a call of several runs adds theirs up. The total is given once every run's
    input has been read; the value only grows (steps only go forward)."""

    def __init__(self, host: Host, labels: list[str], several: bool):
        self.host, self.labels, self.several = host, labels, several
        self.done = [0.0] * len(labels)
        self.totals: list[int | None] = [None] * len(labels)
        self.sent = -1.0

    def _label(self, index: int) -> str:
        return f"[{self.labels[index]}] " if self.several and self.labels[index] else ""

    async def _send(self, message: str, *, or_log: bool = False) -> None:
        done = sum(self.done)
        totals = self.totals
        total = float(sum(t for t in totals if t is not None)) if all(t is not None for t in totals) else None
        if done > self.sent:
            self.sent = done
            await self.host.progress(done, total, message)
        elif or_log:  # the value has not grown, so it cannot be a progress notification
            await self.host.log("info", message)

    async def queued(self, index: int, ahead: int) -> None:
        await self._send(f"{self._label(index)}queued: waiting for the engine, {ahead} run(s) ahead", or_log=True)

    async def finished(self, index: int) -> None:
        total = self.totals[index]
        self.done[index] = float(total) if total is not None else self.done[index] + 1
        if self.totals[index] is None:
            self.totals[index] = int(self.done[index])
        if self.several:
            runs = sum(1 for d, t in zip(self.done, self.totals) if t is not None and d >= t)
            await self._send(f"{self._label(index)}done ({runs} of {len(self.labels)} runs)", or_log=True)

    async def told(self, told: Told) -> None:
        label = self._label(told.run)
        of = f"/{told.total}" if told.total else ""
        if told.kind == "traced":  # the host learns the trace id from the result
            return
        if told.kind == "memory":
            await self.host.log("debug", f"{label}memory after step {told.step}{of}: {told.text}")
            return
        if told.kind == "note":
            await self.host.log(told.level, f"{label}{told.text}")
            return
        if told.total:
            self.totals[told.run] = told.total + 1
        if told.kind == "answer":
            self.done[told.run] = max(self.done[told.run], told.step + 0.5)
            await self._send(f"{label}writing the answer ({told.tokens:,} tokens read)")
            return
        if told.kind == "prompt" and told.read is not None:  # within step `step`: half of it is reading its prompt
            read, prompt = told.read
            self.done[told.run] = max(self.done[told.run], told.step - 1 + 0.5 * read / prompt)
            steps = f"step {told.step} of {told.total}" if told.total else f"step {told.step}"
            await self._send(f"{label}{steps}: reading its prompt, {read:,} of {prompt:,} tokens")
            return
        self.done[told.run] = max(self.done[told.run], float(told.step))
        left = f", about {format_duration(told.eta)} left" if told.eta is not None else ""
        steps = f"step {told.step} of {told.total}" if told.total else f"step {told.step}"
        await self._send(f"{label}{steps}, {told.tokens:,} tokens read{left}")
