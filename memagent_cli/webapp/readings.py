"""The readings the page starts (a question, a follow-up, a resumption), on the server's one model
(runs/shared.py): each planned and run in a worker thread, as many at once as the engine takes and
the others in order; each known by a number until its trace exists, then by its run id, and stopped
by setting its cancel event (the run is recorded as interrupted, and resumable).

What a reading shows while it goes comes from the trace store (updates.py), as for a run any other
process records: the page does not need this process to have started it.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..errors import MemagentError
from ..runs.shared import SharedModel

if TYPE_CHECKING:
    from ..runs.shared import RunRequest, Told
    from .page_settings import PageSettings

KEPT = 200  # readings remembered once ended (what /readings/N says of them)


@dataclass
class Reading:
    """One reading the page asked for: its run's trace id once recorded (or the stored run that answered
    it, `reused`), the error that ended it, the notes it told, and whether it has ended."""

    number: int
    cancel: threading.Event = field(default_factory=threading.Event)
    run: str | None = None
    reused: bool = False
    error: str | None = None
    ended: bool = False
    waiting: str = "waiting for its turn"
    notes: list[str] = field(default_factory=list)


class Readings:
    """The page's readings on one SharedModel."""

    def __init__(self, settings: PageSettings):
        self.model = SharedModel(settings.run, ocr=settings.ocr, parallel=settings.parallel)
        self._numbers = itertools.count(1)
        self._by_number: dict[int, Reading] = {}
        self._lock = threading.Lock()
        self._turns = threading.Condition(self._lock)
        self._running = 0

    def start(self, plan: Callable[[], RunRequest]) -> Reading:
        """Starts a reading: `plan` (run in the worker: it may read the store and load the model) gives
        the run, which then waits for a free slot of the engine. Returns at once."""
        with self._lock:
            reading = Reading(next(self._numbers))
            self._by_number[reading.number] = reading
            for old in sorted(self._by_number)[:-KEPT]:
                if self._by_number[old].ended:
                    del self._by_number[old]
        threading.Thread(target=self._work, args=(reading, plan), name=f"reading-{reading.number}", daemon=True).start()
        return reading

    def get(self, number: int) -> Reading | None:
        with self._lock:
            return self._by_number.get(number)

    def stop(self, run_id: str) -> bool:
        """Stops the reading of run `run_id` if this page started it (it ends at its next token); False
        where it is not one of the page's, or has ended."""
        with self._lock:
            for reading in self._by_number.values():
                if reading.run == run_id and not reading.ended:
                    reading.cancel.set()
                    return True
        return False

    def close(self) -> None:
        with self._lock:
            for reading in self._by_number.values():
                reading.cancel.set()
        self.model.close()

    def _work(self, reading: Reading, plan: Callable[[], RunRequest]) -> None:
        try:
            planned = plan()
            reading.waiting = "loading the model"
            self.model.runner()
            reading.waiting = "waiting for its turn"
            with self._turns:
                while self._running >= self.model.slots and not reading.cancel.is_set():
                    self._turns.wait(0.5)
                self._running += 1
            try:
                if reading.cancel.is_set():
                    return
                reading.waiting = "starting"
                outcome = self.model.run_one(planned, index=reading.number, cancel=reading.cancel, tell=self._teller(reading))
            finally:
                with self._turns:
                    self._running -= 1
                    self._turns.notify_all()
            if outcome is not None and outcome.reused is not None:
                reading.run, reading.reused = outcome.reused.run, True
        except MemagentError as exc:
            reading.error = str(exc)
        except Exception as exc:  # a bug: said on the page, never as a traceback; the run is kept as failed
            reading.error = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            reading.ended = True

    @staticmethod
    def _teller(reading: Reading) -> Callable[[Told], None]:
        def tell(told: Told) -> None:
            if told.kind == "traced":
                reading.run = told.text
            elif told.kind == "note":
                reading.notes.append(told.text)

        return tell
