"""`memagent eval`: run a data set of (context, question, answers) items and score them.

Items are the authors' RULER-HotpotQA layout, JSONL or a JSON array of objects with
`context`, `input` (the question), `answers` and optionally `id`. Each item is its own
MemAgent run over its own context, chunked as the reference does (the stripped text,
tokenized once, sliced); each runs through the same pipeline as a question of `ask -q`
(core.pipeline.run_question), scheduled by core.jobs as `ask --each` and `batch` are: the runs share
one engine, several in flight where it takes several calls at once.
Scores are the reference's (evals/scoring.py). Results go to a JSONL file as each item finishes, so
a rerun skips what is done; JSONL items are read one at a time, so a data set of
multi-million-token contexts never sits in memory whole.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..core.config import AgentConfig
from ..core.events import AnswerFinished, Event, RunFailed, RunFinished, RunResult
from ..core.jobs import Job, run_jobs
from ..core.pipeline import EngineOptions
from ..errors import EXIT_USAGE, MemagentError
from .scoring import score


@dataclass(frozen=True)
class Item:
    id: str
    context: str
    question: str
    answers: list[str]


def read_items(path: Path) -> Iterator[Item]:
    """The data set's items, checked one by one; a bad item stops the run with its line number."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise MemagentError(f"Cannot read {path}: {exc.strerror}.", exit_code=EXIT_USAGE) from None
    with f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
        if head == "[":  # a JSON array has to be read whole
            f.seek(0)
            try:
                data = json.load(f)
            except json.JSONDecodeError as exc:
                raise MemagentError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}).", exit_code=EXIT_USAGE) from None
            for n, obj in enumerate(data, 1):
                yield _item(obj, n, f"{path} item {n}")
            return
        f.seek(0)
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MemagentError(
                    f"{path} line {n} is not valid JSON: {exc.msg}.",
                    "Give JSONL (one object per line) or a JSON array.",
                    exit_code=EXIT_USAGE,
                ) from None
            yield _item(obj, n, f"{path} line {n}")


def _item(obj: object, n: int, where: str) -> Item:
    if not isinstance(obj, dict):
        raise MemagentError(f"{where} is not an object.", exit_code=EXIT_USAGE)
    context, question, answers = obj.get("context"), obj.get("input"), obj.get("answers")
    if isinstance(answers, str):
        answers = [answers]
    if (
        not isinstance(context, str)
        or not isinstance(question, str)
        or not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, str) for a in answers)
    ):
        raise MemagentError(f'{where} needs "context" and "input" texts and a non-empty "answers" list.', exit_code=EXIT_USAGE)
    return Item(str(obj.get("id", n)), context, question, answers)


def done_ids(out: Path | None) -> dict[str, dict[str, Any]]:
    """Results already in --out, by item id (a cut-off last line is ignored: it is redone)."""
    if out is None or not out.exists():
        return {}
    found: dict[str, dict[str, Any]] = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "id" in row:
            found[str(row["id"])] = row
    return found


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Percentages over the scored items, as the paper's table reports them."""
    n = len(rows)

    def pct(key: str) -> float:
        return round(100.0 * sum(r[key] for r in rows) / n, 2) if n else 0.0

    return {"n": n, "sub_em": pct("sub_em"), "em": pct("em"), "f1": pct("f1")}


@dataclass(frozen=True)
class ItemScored:
    """An item's run is over and scored: `row` is what `--out` stores (id, question, answers,
    prediction, found, raw, sub_em, em, f1, steps, document_tokens, seconds)."""

    row: dict[str, Any]


def _row(item: Item, result: RunResult, found: bool, seconds: float) -> dict[str, Any]:
    """An item's line in --out, from the RunResult of its run: an answer not in the expected form
    (`found` False) predicts nothing."""
    prediction = result.answer if found else ""
    return {
        "id": item.id,
        "question": item.question,
        "answers": item.answers,
        "prediction": prediction,
        "found": found,
        "raw": result.raw_answer,
        **score(prediction, item.answers),
        "steps": len(result.steps),
        "document_tokens": result.document_tokens,
        "seconds": round(seconds, 3),
    }


def evaluate_events(
    data: Path,
    *,
    model: str | None,
    config: AgentConfig,
    engine: EngineOptions,
    parallel: int,
    skip: set[str],
    limit: int | None = None,
) -> Iterator[tuple[Item, Event | ItemScored]]:
    """Runs every item not in `skip`; yields (item, event) while it runs (ending with RunFinished)
    and (item, ItemScored) when it is scored. A failed item yields RunFailed and is left for the
    next run. Items are read as they are started: only those in flight are held. The runs go
    through core.jobs, the scheduler `ask --each` and `batch` use."""
    # Only the items in flight, by their job (ids in a data set may repeat): a context may be megabytes.
    running: dict[int, tuple[Item, float]] = {}
    found: dict[int, bool] = {}

    def wanted() -> Iterator[Job]:
        count = 0
        for item in read_items(data):
            if item.id in skip:
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            job = Job(key=item.id, question=item.question, context=item.context, title=f"item {item.id}")
            running[id(job)] = (item, time.perf_counter())
            yield job

    # The embedded engine batches up to `parallel` items (no more than --limit asks for).
    for job, event in run_jobs(wanted(), model=model, config=config, engine=engine, parallel=parallel, count=limit):
        item, started = running[id(job)]
        if isinstance(event, AnswerFinished):
            found[id(job)] = event.found
        elif isinstance(event, RunFailed):
            del running[id(job)]
            found.pop(id(job), None)
        yield item, event
        if isinstance(event, RunFinished):
            del running[id(job)]
            row = _row(item, event.result, found.pop(id(job), False), time.perf_counter() - started)
            yield item, ItemScored(row)
