"""Reading ahead: the chunk iterator run in a thread of its own, so that reading and tokenizing the
next part of the input overlaps the model's work on the current chunk (pipeline and jobs use it)."""

from __future__ import annotations

import enum
import queue
import threading
from typing import Iterator, Literal, Union

from .chunking import Chunk


class _Mark(enum.Enum):
    """ReadAhead's markers: the end of the chunks, and no peeked item."""

    END = enum.auto()
    UNSET = enum.auto()


# What the reading thread hands over: a chunk, the error that stopped it, or the end.
_Item = Union[Chunk, BaseException, Literal[_Mark.END]]


class ReadAhead:
    """Runs the chunk iterator in a thread so reading and tokenizing the next part of the
    input overlaps the model's work on the current chunk. Errors surface in the consumer."""

    def __init__(self, chunks: Iterator[Chunk]):
        self._queue: queue.Queue[_Item] = queue.Queue()
        self._stop = threading.Event()
        self._first: _Item | Literal[_Mark.UNSET] = _Mark.UNSET  # a peeked item, handed out first
        self._thread = threading.Thread(target=self._run, args=(chunks,), daemon=True, name="memagent-ingest")
        self._thread.start()

    def _run(self, chunks: Iterator[Chunk]) -> None:
        try:
            for chunk in chunks:
                if self._stop.is_set():
                    return
                self._queue.put(chunk)
        except BaseException as exc:  # handed to the consumer, which raises it
            self._queue.put(exc)
        self._queue.put(_Mark.END)

    def wait(self, timeout: float) -> bool:
        """Whether the first item (a chunk, an error or the end) has come, waiting up to `timeout`
        seconds for it; once it has, peek() returns at once."""
        if self._first is _Mark.UNSET:
            try:
                self._first = self._queue.get(timeout=timeout)
            except queue.Empty:
                return False
        return True

    def peek(self) -> Chunk | None:
        """Waits for the first chunk and keeps it for iteration; None if there is none.
        Raises what the reader raised before producing anything."""
        if self._first is _Mark.UNSET:
            self._first = self._queue.get()
        if isinstance(self._first, BaseException):
            raise self._first
        return None if self._first is _Mark.END else self._first

    def _take(self) -> _Item:
        if self._first is not _Mark.UNSET:
            item, self._first = self._first, _Mark.UNSET
            return item
        return self._queue.get()

    def __iter__(self) -> Iterator[Chunk]:
        while True:
            item = self._take()
            if item is _Mark.END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stops reading at the next chunk (the run ended or was abandoned)."""
        self._stop.set()
