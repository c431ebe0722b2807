"""What a server's front end (the MCP server's tools, the page) is asked to run, as `RunRequest` runs on
its `SharedModel`, every path checked against its roots (guard.py) before anything is read: the
documents a request names, a conversation's next turn, and the resumption of a stored run.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..core.jobs import Job
from ..errors import EXIT_USAGE, MemagentError
from .guard import Roots, check_named, check_sources, stored_sources
from .shared import RunRequest

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..core.pipeline import SourceOptions
    from ..ingest.sources import Source
    from .shared import SharedModel

BUDGETS = ("chunk_tokens", "memory_tokens", "answer_tokens")  # what the loaded context is sized for


def find_documents(paths: Sequence[str], roots: Roots, cwd: str, options: SourceOptions, notes: list[str]) -> list[Source]:
    """The documents the paths name (relative ones from `cwd`), every one checked before anything is
    read; notes about them (what was skipped) to `notes`."""
    from ..core.pipeline import find_sources

    real = check_named(paths, roots, cwd)
    documents = find_sources(real, options, notes.append)
    check_sources(documents, roots)
    return documents


def conversation_turn(ref: str, roots: Roots) -> tuple[str, list[Source], tuple[tuple[str, str], ...]]:
    """A conversation to go on with: its id, its first run's documents (checked as a new request's
    are), and its turns so far (question, answer)."""
    from ..traces.conversations import answered_turns
    from ..traces.store import TraceStore

    with TraceStore() as store:
        found = store.conversation(ref)
        first = store.get_run(found["first_run"], with_steps=False)
    return found["id"], stored_sources(first, roots), tuple(answered_turns(found))


def within_budgets(base: AgentConfig, given: Mapping[str, Any]) -> AgentConfig:
    """The server's settings `base` with a request's own (budgets, temperature, a schema), which may not
    exceed the budgets the server was started with (the loaded context is sized for those)."""
    given = {k: v for k, v in given.items() if v is not None}
    for name in BUDGETS:
        if name in given and given[name] > getattr(base, name):
            raise MemagentError(
                f"{name} {given[name]} is over this server's {getattr(base, name)}.",
                f"Ask for at most {getattr(base, name)}, or start the server with --{name.replace('_', '-')} {given[name]}.",
                exit_code=EXIT_USAGE,
            )
    try:
        return dataclasses.replace(base, **given)
    except (TypeError, ValueError) as exc:
        raise MemagentError(f"Invalid setting: {exc}.", exit_code=EXIT_USAGE) from None


def answer_settings(single: Mapping[str, Any] | str | None, multi: Mapping[str, Any] | str | None, where: str) -> dict[str, Any]:
    """A request's `schema` or `schema_multi` (a JSON Schema, as an object or its text, or the concise
    form such as "name, total float"), checked, as the settings it makes; {} without one. Never the
    name of a file: a request may not have the server read what it names outside its roots."""
    import json

    from ..core.schema import chosen_schema, concise_schema

    def inline(spec: Mapping[str, Any] | str | None) -> Mapping[str, Any] | None:
        if not isinstance(spec, str):
            return spec or None
        text = spec.strip()
        if not text:
            return None
        if text.startswith("{"):
            try:
                loaded = json.loads(text)
            except ValueError as exc:
                raise MemagentError(f"{where}: the schema is not JSON ({exc}).", exit_code=EXIT_USAGE) from None
            if not isinstance(loaded, dict):
                raise MemagentError(f"{where}: the schema is not a JSON object.", exit_code=EXIT_USAGE)
            return loaded
        return concise_schema(text)

    parsed = chosen_schema(inline(single), inline(multi), where)
    return {"answer_schema": parsed.to_config(), "answer_schema_multi": parsed.multi} if parsed else {}


def resumption(run_ref: str, roots: Roots, shared: SharedModel) -> RunRequest:
    """The run that continues the stored run `run_ref` from its last step, on `shared`'s model (loaded
    now, so blocking: call from a thread), its documents checked and unchanged; refused where this
    server's model, engine or budgets could not continue it."""
    from ..traces.recorder import resume_plan, resumed_config
    from ..traces.store import TraceStore

    runner = shared.runner()
    with TraceStore() as store:
        stored = store.get_run(run_ref)
        sources = stored_sources(stored, roots)  # before resume_plan hashes them
        run = resume_plan(store, stored["id"])
    if not shared.same_setup(run, None, runner):
        raise MemagentError(
            f"Run {run['id'][:8]} was made with {run['model']['path']} (or another engine or OCR setting); "
            "this server cannot continue it.",
            f"Continue it with: memagent ask --resume {run['id'][:8]}",
            exit_code=EXIT_USAGE,
        )
    config = resumed_config(run["settings"])
    base = shared.setup.config
    if any(getattr(config, n) > getattr(base, n) for n in BUDGETS):
        raise MemagentError(
            f"Run {run['id'][:8]} has larger budgets than this server's context holds.",
            f"Continue it with: memagent ask --resume {run['id'][:8]}",
            exit_code=EXIT_USAGE,
        )
    return RunRequest(stored_job(run, sources), config, resume=run)


def stored_job(run: Mapping[str, Any], sources: list[Source]) -> Job:
    """The job that continues a stored run from its last step."""
    return Job(
        key=str(run["id"]),
        question=str(run["question"]),
        sources=tuple(sources),
        title=sources[0].title if len(sources) == 1 else str(run["id"])[:8],
        done_steps=tuple(run["steps"]),
    )
