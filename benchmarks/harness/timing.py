"""Paired timing: the sides of a ratio measured in the same run, interleaved, the order swapped
each round, so that load on this shared machine falls on every side alike; medians."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def interleave(sides: dict[str, Callable[[], T]], rounds: int, warmup: bool = False) -> dict[str, list[T]]:
    """Each side's results over `rounds` rounds, the sides' order reversed every other round
    (after one untimed call of each when `warmup`)."""
    if warmup:
        for fn in sides.values():
            fn()
    out: dict[str, list[T]] = {name: [] for name in sides}
    order = list(sides.items())
    for r in range(rounds):
        for name, fn in order if r % 2 == 0 else order[::-1]:
            out[name].append(fn())
    return out


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """`fn` as a side that returns its wall time in seconds."""

    def side() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    return side


def race(sides: dict[str, Callable[[], object]], rounds: int, warmup: bool = False) -> dict[str, list[float]]:
    """Seconds of each side, interleaved (interleave() over timed())."""
    return interleave({name: timed(fn) for name, fn in sides.items()}, rounds, warmup)


def median(values: list[float], digits: int = 3) -> float:
    return round(statistics.median(values), digits)


def ratio(numerator: list[float], denominator: list[float], digits: int = 3) -> float:
    """The ratio of two sides' medians."""
    return round(statistics.median(numerator) / statistics.median(denominator), digits)
