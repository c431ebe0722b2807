"""What the MCP `ask` and `resume` tools return of a run (runs/shared.py drives it): the answer, its
evidence with the passage each step read, and the trace to show or continue it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

from ..core import events as ev
from ..core.jobs import Job
from .excerpt import cite

if TYPE_CHECKING:
    from ..core.jobs import JobRunner
    from ..runs.shared import Outcome
    from ..traces.found import Reused


def outcome_record(outcome: Outcome, job: Job, runner: JobRunner) -> dict[str, Any]:
    """A run's outcome as the `ask` tool returns it: `record` of a run read now, `reused_record` of
    an answer given again."""
    if outcome.reused is not None:
        return reused_record(outcome.reused, job, runner)
    assert outcome.result is not None
    return {**record(outcome.result, outcome.trace, outcome.resumed), "conversation": outcome.conversation}


def record(result: ev.RunResult, trace: str | None, resumed: int = 0) -> dict[str, Any]:
    """A run as the `ask` tool returns it: the answer, its evidence with the passage each step
    read, and the trace to show or continue it."""
    quotes = [q.to_dict() for q in result.quotes]
    titles = [str(s.get("title") or s.get("path")) for s in result.sources]
    # Where the answer's sentences were found, the evidence is those sentences, exactly as the
    # document has them; else the passage around what each evidence step added to the memory.
    evidence = (
        [{"step": q.step, "source": titles[q.source], "location": q.location, "excerpt": q.text} for q in result.quotes]
        if quotes
        else [cite(step) for step in result.evidence]
    )
    return {
        "question": result.question,
        "answer": result.answer,
        **({"data": result.data} if result.config.answer_schema else {}),
        "evidence": evidence,
        "quotes": quotes,
        "steps": len(result.steps),
        "trace": trace,
        "document_tokens": result.document_tokens,
        "seconds": result.timings.get("total_seconds"),
        "resumed_steps": resumed,
        "reused_from": None,
        "continued_from": result.continued_from,
    }


def reused_record(found: Reused, job: Job, runner: JobRunner) -> dict[str, Any]:
    """An answer the traces had, as the `ask` tool returns a run (`record`), with `reused_from`."""
    stored = found.record
    titles = {s["path"]: str(s.get("title") or s["path"]) for s in stored.get("sources") or []}
    quotes = stored.get("quotes") or []
    evidence = (
        [
            {"step": q["step"], "source": titles.get(q["source"], q["source"]), "location": q["location"], "excerpt": q["text"]}
            for q in quotes
        ]
        if quotes
        else _cited_again(stored, job, runner)
    )
    return {
        "question": stored["question"],
        "answer": stored["answer"],
        **({"data": stored.get("data")} if (stored.get("settings") or {}).get("answer_schema") else {}),
        "evidence": evidence,
        "quotes": quotes,
        "steps": len(stored.get("steps") or []),
        "trace": found.run,
        "document_tokens": stored.get("document_tokens"),
        "seconds": (stored.get("timings") or {}).get("total_seconds"),
        "resumed_steps": 0,
        "reused_from": stored["reused_from"],
        "continued_from": stored.get("continued_from"),
        "conversation": stored.get("conversation"),
    }


def _cited_again(stored: Mapping[str, Any], job: Job, runner: JobRunner) -> list[dict[str, Any]]:
    """A reused answer's evidence excerpts (excerpt.cite), where it has no quotes: the documents
    are cut into the same chunks again (their text is the stored run's) up to the last evidence
    step; nothing is sent to the model."""
    from ..core.pipeline import chunk_stream
    from ..core.protocols import get as get_protocol

    wanted = {int(e["step"]) for e in stored.get("evidence") or []}
    if not wanted:
        return []
    memories = {int(s["index"]): str(s["memory"]) for s in stored.get("steps") or []}
    initial = get_protocol(str((stored.get("settings") or {}).get("protocol") or "memagent")).initial_memory
    prep = dataclasses.replace(runner.prep, sources=list(job.sources))
    chunks, _ = chunk_stream(prep, int(stored["chunk_tokens"]), runner.sources, lambda _: None)
    cited = []
    try:
        for chunk in chunks:
            if chunk.index in wanted:
                memory, before = memories[chunk.index], memories.get(chunk.index - 1, initial)
                step = ev.StepRecord(chunk.index, chunk, memory, before, 0, 0, 0, 0, "", 0.0, 0.0)
                cited.append(cite(step))
            if chunk.index >= max(wanted):
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return cited
