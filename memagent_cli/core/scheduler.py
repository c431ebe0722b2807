"""Running several MemAgent loops at once over one engine: many questions, or eval items.

Each run is an event generator (see agent.run_loop) driven in its own worker thread; its
events reach the caller's thread tagged with the run's index, so the views and the trace
store stay single-threaded. Engine calls pass a `FairGate`: at most `parallel` are in flight,
granted in arrival order, so with the embedded engine (parallel 1) the questions advance step
by step in turn instead of one racing ahead. Questions over the same sources share one
reading of them through `ChunkTee`.
"""

from __future__ import annotations

import collections
import enum
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Iterator, Literal, TypeVar, Union

from ..model.engine import Chained, Completion, Engine, RawPrompt, Sampling

T = TypeVar("T")
E = TypeVar("E")


class Stopped(Exception):
    """Raised in a worker when the run was stopped from outside (Ctrl-C in the main thread)."""


class FairGate:
    """A counting semaphore that admits waiters first come, first served."""

    def __init__(self, slots: int):
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self._cond = threading.Condition()
        self._free = slots
        self._waiting: collections.deque[object] = collections.deque()

    def acquire(self, stop: threading.Event) -> None:
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            try:
                while self._waiting[0] is not ticket or self._free == 0:
                    if stop.is_set():
                        raise Stopped
                    self._cond.wait(0.1)
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.popleft()
            self._free -= 1
            self._cond.notify_all()  # the next in line may also fit

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class GatedEngine:
    """An Engine whose calls wait their turn at a FairGate and end early when stopped."""

    def __init__(self, engine: Engine, gate: FairGate, stop: threading.Event):
        self.engine, self.gate, self.stop = engine, gate, stop
        self.description = engine.description
        self.concurrent = engine.concurrent  # the gate decides how many calls overlap

    def complete(self, user_message: str, max_tokens: int, sampling: Sampling, expect: str = "") -> Iterator[Completion]:
        return self._gated(lambda: self.engine.complete(user_message, max_tokens, sampling, expect))

    def complete_raw(self, prompt: RawPrompt, max_tokens: int, sampling: Sampling) -> Iterator[Completion]:
        return self._gated(lambda: self.engine.complete_raw(prompt, max_tokens, sampling))

    def _gated(self, start: Callable[[], Iterator[Completion]]) -> Iterator[Completion]:
        self.gate.acquire(self.stop)
        try:
            stream = start()
            try:
                for item in stream:
                    if self.stop.is_set():  # checked per token, so Ctrl-C never waits for a reply
                        raise Stopped
                    yield item
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        finally:
            self.gate.release()

    def for_chain(self, key: str) -> GatedEngine:
        """This engine for one run's calls, tagged with `key` where the engine takes one; same gate."""
        inner = self.engine.for_chain(key) if isinstance(self.engine, Chained) else self.engine
        return GatedEngine(inner, self.gate, self.stop)

    def close(self) -> None:
        self.engine.close()


class _End(enum.Enum):
    END = enum.auto()


_END = _End.END


class ChunkTee(Generic[T]):
    """One iterator of chunks read by several consumers, each seeing every chunk in order.

    A chunk is dropped once every consumer has taken it; a consumer more than `max_lead`
    chunks ahead of the slowest waits, so memory stays bounded whatever the document's size."""

    def __init__(self, chunks: Iterable[T], consumers: int, stop: threading.Event, max_lead: int = 8):
        self._source = iter(chunks)
        self._cond = threading.Condition()
        self._buffer: collections.deque[T] = collections.deque()  # chunks from index _base on
        self._base = 0
        self._taken = [0] * consumers  # chunks each consumer has taken
        self._done = False
        self._error: BaseException | None = None
        self._reading = False
        self._stop = stop
        self._max_lead = max_lead

    def reader(self, k: int) -> Iterator[T]:
        try:
            while True:
                item = self._next(k)
                if item is _END:
                    return
                yield item
        finally:  # a consumer that stops early must not hold the others back
            with self._cond:
                self._taken[k] = _NEVER
                self._trim()

    def _next(self, k: int) -> T | Literal[_End.END]:
        with self._cond:
            while True:
                if self._stop.is_set():
                    raise Stopped
                want = self._taken[k]
                if want < self._base + len(self._buffer):
                    item = self._buffer[want - self._base]
                    self._taken[k] += 1
                    self._trim()
                    return item
                if self._error is not None:
                    raise self._error
                if self._done:
                    return _END
                if not self._reading and want - min(self._taken) < self._max_lead:
                    self._reading = True
                    break
                self._cond.wait(0.1)
        got: tuple[T] | None = None  # the chunk read, if one was
        error: BaseException | None = None
        try:  # read outside the lock: the others may take what is buffered meanwhile
            got = (next(self._source),)
        except StopIteration:
            pass
        except BaseException as exc:  # delivered to every consumer, in order
            error = exc
        with self._cond:
            self._reading = False
            if got is not None:
                self._buffer.append(got[0])
            elif error is not None:
                self._error = error
            else:
                self._done = True
            self._cond.notify_all()
        return self._next(k)

    def _trim(self) -> None:
        low = min(self._taken)
        if low == _NEVER:
            self._buffer.clear()
            return
        while self._base < low and self._buffer:
            self._buffer.popleft()
            self._base += 1
        self._cond.notify_all()


_NEVER = 1 << 62  # the count of a consumer that has left


@dataclass(frozen=True)
class RunError:
    """A run ended with an exception (its other events were delivered before this)."""

    error: BaseException


class _Finished(enum.Enum):
    FINISHED = enum.auto()


_FINISHED = _Finished.FINISHED  # sent by a worker that is done
# What workers hand the caller's thread: (job index, event), the error of `jobs` itself, or _FINISHED.
_Delivery = Union[tuple[int, Union[E, RunError]], BaseException, _Finished]


def run_all(
    jobs: Iterable[Callable[[], Iterable[E]]],
    *,
    workers: int,
    stop: threading.Event,
) -> Iterator[tuple[int, E | RunError]]:
    """Runs each job (a function returning an event iterator) in a worker thread, at most
    `workers` at a time, in order (one worker: in this thread); yields (job index, event) as they come, and (index,
    RunError) for a job that raised. An error from `jobs` itself is raised here. Ctrl-C in
    the caller sets `stop` and ends the workers."""
    if workers <= 1:
        yield from _run_inline(jobs, stop)
        return
    events: queue.Queue[_Delivery[E]] = queue.Queue(maxsize=256)  # bounded: a slow view slows the runs, not memory
    pending = iter(enumerate(jobs))
    lock = threading.Lock()

    def worker() -> None:
        try:
            while not stop.is_set():
                with lock:
                    try:
                        taken = next(pending, None)
                    except Stopped:
                        raise
                    except BaseException as exc:  # the list of jobs itself failed (a bad data file): fatal
                        _put(events, exc, stop)
                        break
                if taken is None:
                    break
                index, job = taken
                try:
                    for event in job():
                        _put(events, (index, event), stop)
                except Stopped:
                    raise
                except BaseException as exc:  # reported in the caller's thread, which decides
                    _put(events, (index, RunError(exc)), stop)
        except Stopped:
            pass
        finally:
            _put(events, _FINISHED, stop, force=True)

    threads = [threading.Thread(target=worker, name=f"memagent-run-{i}", daemon=True) for i in range(max(1, workers))]
    for t in threads:
        t.start()
    alive = len(threads)
    try:
        while alive:
            try:
                got = events.get(timeout=0.1)  # a timeout keeps Ctrl-C prompt
            except queue.Empty:
                continue
            if got is _FINISHED:
                alive -= 1
                continue
            if isinstance(got, BaseException):
                raise got
            yield got
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)


def _run_inline(jobs: Iterable[Callable[[], Iterable[E]]], stop: threading.Event) -> Iterator[tuple[int, E | RunError]]:
    """One job at a time, in the caller's thread: no hand-over per token (B1 measured ~100 us a
    token for it), and Ctrl-C lands where the model is working, as in a plain loop."""
    try:
        for index, job in enumerate(jobs):
            try:
                for event in job():
                    yield index, event
            except Exception as exc:  # KeyboardInterrupt is not caught: it stops everything
                yield index, RunError(exc)
    finally:
        stop.set()


def _put(q: queue.Queue[T], item: T, stop: threading.Event, force: bool = False) -> None:
    while True:
        if stop.is_set() and not force:
            raise Stopped
        try:
            q.put(item, timeout=0.1)
            return
        except queue.Full:
            if force and stop.is_set():
                return
