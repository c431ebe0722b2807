"""What the page's templates are given: a run, its steps and its quotes as the page shows them, made
from the trace store's records with the same views the exports use (traces/export.step_view), so a
step has one shape wherever it is shown."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..core.config import shown_settings
from ..core.memagent import INITIAL_MEMORY
from ..core.memdiff import evidence_steps
from ..core.protocols import get as get_protocol
from ..display import clip
from ..traces.export import CUT_NOTE, EVIDENCE_MARK, EVIDENCE_MEANING, status_note, step_view
from ..traces.sharing import model_name, shared_time

STEPS_PAGE = 50  # steps drawn at once: the first page with the run, the rest as they are scrolled to
CLIP = 240  # characters of a question or answer in a list


def run_row(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run as the list shows it."""
    sources = [str(s.get("title") or s.get("path") or "?") for s in run.get("sources") or []]
    return {
        "id": run["id"],
        "short": str(run["id"])[:8],
        "started": shared_time(run.get("started_at")),
        "status": run.get("status") or "?",
        "question": clip(run.get("asked") or run.get("question") or "(no question)", CLIP),
        "answer": clip(run.get("answer"), CLIP) if run.get("answer") is not None else "",
        "sources": clip(", ".join(sources), 120),
        "model": model_name(run.get("model") or {}),
        "steps": progress(run),
        "conversation": run.get("conversation"),
        "turn": run.get("turn"),
    }


def progress(run: Mapping[str, Any]) -> str:
    done, total = run.get("step_count") or 0, run.get("steps_total")
    return f"{done:,} of {total:,}" if total is not None else f"{done:,}"


def run_view(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run's page, less its steps and quotes (each its own view)."""
    settings = run.get("settings") or {}
    return {
        **run_row(run),
        "question_full": run.get("asked") or run.get("question") or "(no question)",
        "answer_full": run.get("answer"),
        "raw_answer": run.get("raw_answer") if run.get("raw_answer") not in (None, run.get("answer")) else None,
        "note": status_note(run),
        "error": run.get("error"),
        "step_count": run.get("step_count") or 0,
        "steps_total": run.get("steps_total"),
        "document_tokens": run.get("document_tokens"),
        "settings": shown_settings(settings),
        "source_list": [
            {"title": s.get("title") or s.get("path"), "kind": s.get("kind"), "tokens": s.get("tokens")}
            for s in run.get("sources") or []
        ],
        "continued_from": run.get("continued_from"),
        "early_stop": int(settings.get("early_stop") or 3),
        "protocol": settings.get("protocol") or "memagent",
        "cwd": settings.get("cwd"),
    }


def step_views(
    steps: Sequence[Mapping[str, Any]], before: str, evidence: set[int], run: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Steps of `run` (a run_view) as the timeline draws them, each diffed against the memory before it
    (`before`: the memory before the first of them)."""
    out = []
    for step in steps:
        index = int(step.get("index") or 0)
        out.append(step_view(step, before, index in evidence, run["early_stop"], run["protocol"]))
        before = str(step.get("memory") or "")
    return out


def memory_before(store: Any, run: Mapping[str, Any], start: int) -> str:
    """The memory before step `start`: the protocol's first memory, or step `start - 1`'s."""
    if start <= 1:
        return get_protocol(str((run.get("settings") or {}).get("protocol") or "memagent")).initial_memory or INITIAL_MEMORY
    previous = store.steps(run["id"], start=start - 1, limit=1)
    return str(previous[0].get("memory") or "") if previous else ""


def evidence_of(store: Any, run: Mapping[str, Any]) -> set[int]:
    """The run's evidence steps (memdiff.evidence_steps): those whose additions survive to the end;
    none while it is still read."""
    if run.get("status") == "running":
        return set()
    return set(evidence_steps(store.steps(run["id"])))


LEGEND = {"mark": EVIDENCE_MARK, "meaning": EVIDENCE_MEANING, "cut": CUT_NOTE}
