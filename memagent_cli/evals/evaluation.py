"""`memagent eval`: run a data set of (context, question, answers) items and score them.

Items are the authors' RULER-HotpotQA layout, JSONL or a JSON array of objects with
`context`, `input` (the question), `answers` and optionally `id`. Each item is its own
MemAgent run over its own context, chunked as the reference does (the stripped text,
tokenized once, sliced); each runs through the same pipeline as a question of `ask -q`
(core.pipeline.run_question), and the runs share one engine, several in flight on a served one.
Scores are the reference's (memagent_cli.scoring). Results go to a JSONL file as each item finishes, so
a rerun skips what is done; JSONL items are read one at a time, so a data set of
multi-million-token contexts never sits in memory whole.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..core.agent import check_question, plan_context
from ..core.chunking import Chunk, IngestStats, iter_chunks, layout
from ..core.config import AgentConfig
from ..core.events import AnswerFinished, Event, RunFailed, RunFinished, RunResult
from ..core.pipeline import EngineOptions, Prepared, SharedEngine, open_shared_engine, prepare_model, run_question
from ..core.scheduler import RunError, run_all
from ..errors import EXIT_USAGE, MemagentError
from ..ingest.sources import Segment, Source
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


def _item_input(prep: Prepared, item: Item, chunk_tokens: int) -> tuple[Prepared, Iterator[Chunk], IngestStats]:
    """The item as its own source: the model's side of `prep` with that source, its chunks, their stats."""
    source = Source(path=f"item {item.id}", title=f"item {item.id}", kind="text", size=None)
    stats = IngestStats()

    def read(_source: Source) -> Iterator[Segment]:
        yield Segment(0, item.context, 0)

    chunks = iter_chunks(layout([source], read), prep.tokenizer, chunk_tokens, [source], stats)
    return dataclasses.replace(prep, sources=[source], notices=[]), chunks, stats


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
    next run. Items are read as they are started: only those in flight are held."""
    prep = prepare_model(model, engine)
    stop = threading.Event()
    shared: SharedEngine | None = None
    running: dict[int, Item] = {}  # only the items in flight: a context may be megabytes

    def wanted() -> Iterator[Item]:
        count = 0
        for item in read_items(data):
            if item.id in skip:
                continue
            if limit is not None and count >= limit:
                return
            count += 1
            yield item

    try:
        if engine.kind == "openai":
            n_ctx = 0  # the server sizes its own context
        else:  # the embedded engine: sized for the largest step these budgets make
            chat = prep.chat
            assert chat is not None  # prepare_model reads it from the GGUF for every engine but a served one
            # Questions differ per item: room for the longest one allowed (question_tokens).
            n_ctx = plan_context(chat, prep.tokenizer, "?", config, None) + config.question_tokens
            if engine.n_ctx is not None:
                n_ctx = plan_context(chat, prep.tokenizer, "?", config, engine.n_ctx)
        # The embedded engine batches up to `parallel` items (no more than --limit asks for).
        shared = open_shared_engine(prep, n_ctx, engine, parallel, stop, jobs=limit)

        def job(item: Item) -> Callable[[], Iterator[Event | ItemScored]]:
            def run() -> Iterator[Event | ItemScored]:
                started = time.perf_counter()
                question = check_question(item.question, prep.tokenizer, config)
                item_prep, chunks, stats = _item_input(prep, item, config.chunk_tokens)
                found, result = False, None
                for event in run_question(question, chunks, stats, item_prep, shared, config, started=started):
                    if isinstance(event, AnswerFinished):
                        found = event.found
                    elif isinstance(event, RunFinished):
                        result = event.result
                    yield event
                assert result is not None  # run_question ends with RunFinished, or raises
                yield ItemScored(_row(item, result, found, time.perf_counter() - started))

            return run

        def jobs() -> Iterator[Callable[[], Iterator[Event | ItemScored]]]:
            for k, item in enumerate(wanted()):
                running[k] = item
                yield job(item)

        for index, event in run_all(jobs(), workers=shared.slots, stop=stop):
            item = running[index]
            if isinstance(event, RunError):
                del running[index]
                yield item, RunFailed(event.error)
            elif isinstance(event, ItemScored):
                del running[index]
                yield item, event
            else:
                yield item, event
    finally:
        stop.set()
        if shared is not None:
            shared.close()
