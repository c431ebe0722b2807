"""Which benchmarks there are, and the contract each one's module keeps.

A benchmark is a module of this package, named in BENCHMARKS beside its number. The module has:

- a docstring whose first line says what it measures;
- `TITLE`: its section's heading in docs/PERFORMANCE.md;
- `add_arguments(parser)`: its own options, each with the full run's default;
- `QUICK`: the options `--quick` stands for (fewer rounds, smaller inputs);
- `measure(args) -> dict`: runs it and returns its metrics (plain JSON);
- `rows(metrics, results) -> list[Row]`: its rows of the summary table, each target checked;
- `section(metrics, results) -> str`: its section's body (under the heading doc.py writes).

`results` gives the other benchmarks' metrics where a section compares with them. A module keeps
heavy imports (llama_cpp, memagent's engine) inside the functions that need them, so that `list`
and `doc` load every module in a moment.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from types import ModuleType

# Every benchmark, by number: the one list `list`, `run` and `doc` read.
BENCHMARKS: dict[str, str] = {
    "B1": "overhead",
    "B2": "tokenizer",
    "B3": "scale",
    "B4": "gpu_step",
    "B5": "convert",
    "B6": "speculate",
    "B7": "threads",
    "B8": "batch",
    "B9": "ingest",
    "B10": "jobs",
    "B11": "qwenlong",
    "B12": "estimate",
    "B13": "quotes",
    "B14": "schema",
    "B15": "infmem_index",
    "B16": "infmem_overhead",
    "B17": "infmem_step",
    "B18": "reuse",
    "B19": "serve_page",
}


def module(name: str) -> ModuleType:
    """The module of benchmark `name` ("B6", or "b6")."""
    key = name.upper()
    if key not in BENCHMARKS:
        raise KeyError(f"no benchmark {name!r}: `python -m benchmarks list` lists them")
    return importlib.import_module(f"benchmarks.{BENCHMARKS[key]}")


@dataclass(frozen=True)
class Row:
    """One row of the summary table: what is measured, the result as shown, and the target it is
    held to ("—" where it is reported, not held)."""

    what: str
    result: str
    target: str = "—"
    met: bool | None = None


def mark(ok: bool) -> str:
    """A result's mark in the page: ✓ where its target is met, ✗ where not."""
    return "✓" if ok else "✗"


_BOUND = re.compile(r"^(≤|≥)\s*([0-9.]+)$")


@dataclass(frozen=True)
class Target:
    """A target as the table shows it: "≤ 1.05", "≥ 0.95", or "yes" (the value must be true)."""

    text: str

    def met(self, value: object) -> bool:
        if self.text == "yes":
            return value is True
        found = _BOUND.match(self.text)
        if not found or not isinstance(value, (int, float)):
            raise ValueError(f"cannot hold {value!r} to {self.text!r}")
        bound = float(found.group(2))
        return value <= bound if found.group(1) == "≤" else value >= bound

    def row(self, what: str, value: object, note: str = "") -> Row:
        """The row for `value` measured against this target, ✓ or ✗ after it, `note` in brackets."""
        ok = self.met(value)
        shown = f"{value} {mark(ok)}" + (f" ({note})" if note else "")
        return Row(what, shown, self.text, ok)
