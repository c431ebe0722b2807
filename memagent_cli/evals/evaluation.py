"""`memagent eval`: run a data set of (context, question, answers) items and score them.

Items are JSONL or a JSON array of objects. The authors' RULER-HotpotQA layout has `context`,
`input` (the question), `answers` and optionally `id`; items converted from QwenLong-L1.5's sets
(MRCR, CorpusQA) may say `question` instead of `input` and `answer` (one text) instead of
`answers`, and carry `instructions` (how the answer is written, QwenLong's q_inst: the final
prompt gets them, the memory updates do not) and MRCR's `random_string_to_prepend`. Each item is
its own MemAgent run over its own context, chunked as the reference does (the stripped text,
tokenized once, sliced); each runs through the same pipeline as a question of `ask -q`
(core.pipeline.run_question), scheduled by core.jobs as `ask --each` and `batch` are: the runs share
one engine, several in flight where it takes several calls at once.
Scores are evals/scoring.py's: sub_em, em and f1 always, MRCR's grade where the item or --metric
asks for it. Results go to a JSONL file as each item finishes, so a rerun skips what is done;
JSONL items are read one at a time, so a data set of multi-million-token contexts never sits in
memory whole.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..core.config import AgentConfig
from ..core.events import AnswerFinished, Event, RunFailed, RunFinished
from ..core.jobs import Job, run_jobs
from ..core.records import json_records, written_records
from ..core.schema import AnswerSchema, chosen_schema
from ..errors import EXIT_USAGE, MemagentError
from ..model.backends import EngineOptions
from .scoring import METRICS, normalize, score


@dataclass(frozen=True)
class Item:
    id: str
    context: str
    question: str
    answers: list[str]
    instructions: str | None = None  # how the answer is written: the final prompt's alone
    random_string_to_prepend: str | None = None  # MRCR's: the answer must start with it
    needle: str | None = None  # the sentence the answer rests on (make-niah writes it): scored as quote_hit
    schema: AnswerSchema | None = None  # the answer as data (--schema), over the command's
    data: Any = None  # the expected data: scored as `fields`, the share of its fields the answer's data has right


# Said by every error about an item's fields: what a reader accepts.
_FIELDS = (
    'needs "context", the question ("input" or "question") and the answer ("answers", a list, or "answer", a text);'
    ' "id", "instructions", "random_string_to_prepend", "needle", "schema" (or "schema_multi") and "data"'
    " (the expected data, which may stand for the answer) are optional."
)


def read_items(path: Path) -> Iterator[Item]:
    """The data set's items, checked one by one; a bad item stops the run with its line number."""
    for n, where, obj in json_records(path, what="data set", arrays=True):
        yield _item(obj, n, where)


def _item(obj: object, n: int, where: str) -> Item:
    if not isinstance(obj, dict):
        raise MemagentError(f"{where} is not an object.", exit_code=EXIT_USAGE)
    # The RULER-HotpotQA names win where an item has both: they are what the paper's files use.
    question = obj["input"] if "input" in obj else obj.get("question")
    if question is None and obj.get("schema") is not None:  # its fields make one
        question = ""
    answers = obj["answers"] if "answers" in obj else obj.get("answer")
    if answers is None and obj.get("data") is not None:  # scored on the data; the text scores against its JSON
        answers = [json.dumps(obj["data"], ensure_ascii=False)]
    if isinstance(answers, str):
        answers = [answers]
    context = obj.get("context")
    if (
        not isinstance(context, str)
        or not isinstance(question, str)
        or not isinstance(answers, list)
        or not answers
        or not all(isinstance(a, str) for a in answers)
    ):
        raise MemagentError(f"{where} {_FIELDS}", exit_code=EXIT_USAGE)
    optional = {name: obj.get(name) for name in ("instructions", "random_string_to_prepend", "needle")}
    for name, value in optional.items():
        if value is not None and not isinstance(value, str):
            raise MemagentError(f'{where}: "{name}" is not a text. An item {_FIELDS}', exit_code=EXIT_USAGE)
    return Item(
        str(obj.get("id", n)),
        context,
        question,
        answers,
        optional["instructions"],
        optional["random_string_to_prepend"],
        optional["needle"],
        chosen_schema(obj.get("schema"), obj.get("schema_multi"), where),
        obj.get("data"),
    )


def done_ids(out: Path | None) -> dict[str, dict[str, Any]]:
    """Results already in --out, by item id (a cut-off last line is ignored: it is redone)."""
    return {str(row["id"]): row for _, row in written_records(out) if row is not None and "id" in row}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Percentages over the scored items, as the papers' tables report them: n, sub_em, em, f1,
    mrcr (over the items MRCR's grade was given to) when any was, and quote_hit (over the items with
    a needle: the share whose quotes hold it) when any had one."""

    def pct(values: list[float]) -> float:
        return round(100.0 * sum(values) / len(values), 2) if values else 0.0

    result: dict[str, Any] = {"n": len(rows), **{key: pct([r[key] for r in rows]) for key in ("sub_em", "em", "f1")}}
    graded = [r["mrcr"] for r in rows if "mrcr" in r]
    if graded:
        result["mrcr"] = pct(graded)
    hits = [r["quote_hit"] for r in rows if "quote_hit" in r]
    if hits:
        result["quote_hit"] = pct(hits)
    fields = [r["fields"] for r in rows if "fields" in r]
    if fields:
        result["fields"] = pct(fields)
    return result


@dataclass(frozen=True)
class ItemScored:
    """An item's run is over and scored: `row` is what `--out` stores (id, question, answers,
    prediction, found, raw, sub_em, em, f1, mrcr where graded, steps, document_tokens, seconds,
    quote_hit where the item has a needle)."""

    row: dict[str, Any]


def _row(item: Item, record: Mapping[str, Any], found: bool, seconds: float, metric: str) -> dict[str, Any]:
    """An item's line in --out, from its run's record (`ask --json`'s: RunResult.to_dict(), or a
    stored answer's): an answer not in the expected form (`found` False) predicts nothing. MRCR
    grades the answer as the protocol reads it (qwenlong: the whole reply after its reasoning,
    stripped; memagent: the boxed or "answer is" text)."""
    prediction = str(record["answer"]) if found else ""
    settings = record["settings"]
    return {
        "id": item.id,
        "question": item.question,
        "answers": item.answers,
        "prediction": prediction,
        "found": found,
        "raw": record["raw_answer"],
        **score(prediction, item.answers, random_string_to_prepend=item.random_string_to_prepend, metric=metric),
        "steps": len(record["steps"]),
        "document_tokens": record["document_tokens"],
        "seconds": round(seconds, 3),
        # what made it, as `ask --json` says it: a rerun keeps the row only where it would make it again
        "model": record["model"],
        "settings": settings,
        **({"quote_hit": float(quote_hit(item.needle, record["quotes"]))} if item.needle else {}),
        **({"data": record.get("data")} if settings.get("answer_schema") else {}),
        **({"fields": fields_right(item.data, record.get("data"))} if item.data is not None else {}),
        **({"reused_from": record["reused_from"]} if record.get("reused_from") else {}),
    }


def fields_right(expected: Any, got: Any) -> float:
    """The share of the expected data's fields that the answer's data has right: texts equal as em
    compares them (case, articles and punctuation aside), other values exactly. A list (--schema-multi)
    counts whole: 1.0 when it equals item for item, else 0.0."""

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, str) and isinstance(b, str):
            return normalize(a) == normalize(b)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return bool(type(a) is type(b) and a == b)

    if isinstance(expected, dict) and expected:
        have = got if isinstance(got, dict) else {}
        return sum(same(value, have.get(name)) for name, value in expected.items()) / len(expected)
    return float(same(expected, got))


def quote_hit(needle: str, quotes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether one of the run's quotes (records, with their text) holds the needle sentence (white space aside)."""
    wanted = " ".join(needle.split())
    return any(wanted in " ".join(str(q["text"]).split()) for q in quotes)


def evaluate_events(
    data: Path,
    *,
    model: str | None,
    config: AgentConfig,
    engine: EngineOptions,
    parallel: int,
    skip: set[str],
    limit: int | None = None,
    metric: str = "auto",
    answered: Callable[[Job], Mapping[str, Any] | None] | None = None,
    observe: Callable[[Job, Event], None] | None = None,
) -> Iterator[tuple[Item, Event | ItemScored]]:
    """Runs every item not in `skip`; yields (item, event) while it runs (ending with RunFinished)
    and (item, ItemScored) when it is scored. A failed item yields RunFailed and is left for the
    next run. Items are read as they are started: only those in flight are held. The runs go
    through core.jobs, the scheduler `ask --each` and `batch` use; an item's instructions reach
    its run's final prompt (Job.instructions). `metric`: scoring.METRICS.

    `answered` (`eval --reuse`) gives an item's stored answer (a record, as `ask --json`'s, with
    `reused_from`), or None: those items are scored first, from it, and read nothing; the model
    is loaded only for the rest. `observe` is shown every event of the runs, with its job (to
    record them)."""
    if metric not in METRICS:
        raise MemagentError(f"Unknown metric {metric!r}.", f"Use one of {', '.join(METRICS)}.", exit_code=EXIT_USAGE)
    # Only the items in flight, by their job (ids in a data set may repeat): a context may be megabytes.
    running: dict[int, tuple[Item, float]] = {}
    found: dict[int, bool] = {}
    skip = set(skip)
    if answered is not None:
        for item in _chosen(data, skip, limit):
            stored = answered(_job(item))
            if stored is not None:
                skip.add(item.id)
                limit = None if limit is None else limit - 1
                yield item, ItemScored(_stored_row(item, stored, metric))

    def wanted() -> Iterator[Job]:
        for item in _chosen(data, skip, limit):
            job = _job(item)
            running[id(job)] = (item, time.perf_counter())
            yield job

    if limit is not None and limit <= 0:
        return
    # The embedded engine batches up to `parallel` items (no more than --limit asks for).
    for job, event in run_jobs(wanted(), model=model, config=config, engine=engine, parallel=parallel, count=limit):
        item, started = running[id(job)]
        if observe is not None:
            observe(job, event)
        if isinstance(event, AnswerFinished):
            found[id(job)] = event.found
        elif isinstance(event, RunFailed):
            del running[id(job)]
            found.pop(id(job), None)
        yield item, event
        if isinstance(event, RunFinished):
            del running[id(job)]
            row = _row(item, event.result.to_dict(), found.pop(id(job), False), time.perf_counter() - started, metric)
            yield item, ItemScored(row)


def _chosen(data: Path, skip: set[str], limit: int | None) -> Iterator[Item]:
    """The data set's items not in `skip`, at most `limit` of them."""
    count = 0
    for item in read_items(data):
        if item.id in skip:
            continue
        if limit is not None and count >= limit:
            return
        count += 1
        yield item


def _job(item: Item) -> Job:
    """An item's run: its question over its context."""
    return Job(
        key=item.id,
        question=item.question,
        context=item.context,
        title=f"item {item.id}",
        instructions=item.instructions,
        schema=item.schema,
    )


def _stored_row(item: Item, stored: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """An item's row from its stored answer: whether the reply had the expected form is read from
    it again, as the run read it (a schema's answer is always in its form)."""
    from ..core.protocols import get as get_protocol

    settings = stored["settings"]
    if settings.get("answer_schema"):
        found = True
    else:
        _, found = get_protocol(settings.get("protocol", "memagent")).extract_answer(str(stored["raw_answer"]), settings["final"])
    seconds = float((stored.get("timings") or {}).get("total_seconds") or 0.0)
    return _row(item, stored, found, seconds, metric)
