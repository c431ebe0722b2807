"""Recording a run as a trace while it happens, and what resuming one needs.

The Recorder consumes the agent's events like any view and writes them to the TraceStore:
each step is committed as it ends, so an interrupted two-hour run keeps every step it paid
for. Sources are fingerprinted (size, sha256) so a resumed run can prove it reads the same
text; document text itself is never stored.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from dataclasses import fields
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping, Sequence

from ..core.config import AgentConfig
from ..core.events import (
    AnswerFinished,
    DocumentRead,
    Event,
    ModelLoaded,
    RunFinished,
    RunResult,
    RunStarted,
    StepFinished,
    model_record,
)
from ..core.keys import AnswerKey
from ..errors import EXIT_USAGE, MemagentError
from ..ingest.base import printable
from ..ingest.sources import STDIN_PATH, Source, file_sha256
from .store import TraceStore


class HashingReader:
    """A binary stream that hashes what passes through it (stdin cannot be read twice)."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self._sha = hashlib.sha256()
        self.size = 0

    def _seen(self, data: bytes) -> bytes:
        self._sha.update(data)
        self.size += len(data)
        return data

    def read(self, n: int = -1) -> bytes:
        return self._seen(self._raw.read(n))

    def read1(self, n: int = -1) -> bytes:
        read1 = getattr(self._raw, "read1", None) or self._raw.read
        return self._seen(read1(n))

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def fingerprint(source: Source) -> dict[str, Any]:
    record: dict[str, Any] = {
        "path": source.path,
        "title": source.title,
        "kind": source.kind,
        "size": source.size,
        "sha256": None,
        "pages": None,
        "unit": None,
        "units": None,
        "tokens": None,
    }
    if source.member:  # a document inside an archive: the archive is what is hashed
        record["member"] = list(source.member)
    if source.found:  # found in a folder or archive: --resume skips it again if it cannot be read
        record["found"] = True
    if source.pipe:  # a pipe or FIFO: gone once read, never opened again
        record["stream"] = True
    if source.path != STDIN_PATH and source.size is not None:  # a regular file, hashed now
        record["sha256"] = file_sha256(source.path)
        record["abspath"] = os.path.abspath(source.path)
    return record


class Recorder:
    """Writes one run to the store as its events arrive.

    A store that fails mid-run (disk full, database locked) costs the trace, not the answer:
    recording stops with one warning and the run goes on."""

    def __init__(
        self,
        store: TraceStore,
        *,
        warn: Callable[[str], None],
        resume: Mapping[str, Any] | None = None,
        stdin: HashingReader | None = None,
        engine: Mapping[str, Any] | None = None,
        chat_template: Mapping[str, str] | None = None,
        job: Mapping[str, str] | None = None,
        key: AnswerKey | None = None,
        turn: bool = True,
        conversation: str | None = None,
        asked: str | None = None,
        changed: Mapping[str, Any] | None = None,
    ):
        self.store = store
        self.warn = warn
        self.resume = resume
        self.stdin = stdin
        self.run_id: str | None = resume["id"] if resume else None
        self.sources: list[dict[str, Any]] = list(resume["sources"]) if resume else []
        self.settings: dict[str, Any] = dict(resume["settings"]) if resume else {}
        self.steps = len(resume["steps"]) if resume else 0
        self.failed_write: str | None = None
        self.engine = engine  # a served engine's settings (never its key), so --resume finds the server again
        self.chat_template = chat_template  # a --chat-template's path and sha256, so --resume uses it again
        self.job = job  # a run of a job (`batch`): its results file and key, so a rerun finds the run again
        self.key = key  # what finds the run's answer again, and the run to continue (core/keys.py)
        # a turn (a question a person asks) begins a conversation, or is the next turn of `conversation`
        # (a follow-up), asked as `asked` (the run reads it after the earlier turns), with the settings
        # it gave over the conversation's first run's; a run of a job (--each, batch, watch) is none
        self.is_turn = turn
        self.conversation, self.asked, self.changed = conversation, asked, changed
        self.turn: tuple[str, int] | None = None  # (conversation, turn) once the run is recorded

    def _write(self, action: Callable[[], object]) -> None:
        if self.failed_write is not None:
            return
        try:
            action()
        except (sqlite3.Error, OSError, MemagentError) as exc:
            self.failed_write = str(exc)
            self.warn(f"The trace could not be written ({exc}); the run goes on without it.")

    def _write_run(self, action: Callable[[str], object]) -> None:
        """`_write` of an action on the run's record, which it is given the id of."""
        if self.failed_write is not None:
            return
        # RunStarted, the first event, set the id (a new run's, or the resumed one's); had creating
        # the run failed, failed_write would be set.
        assert self.run_id is not None
        run_id = self.run_id
        self._write(lambda: action(run_id))

    def handle(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._started(event)
        elif isinstance(event, ModelLoaded):
            self.settings.update(n_ctx=event.n_ctx, device=event.device)
            self._write_run(lambda run_id: self.store.update_run(run_id, settings=self.settings))
        elif isinstance(event, DocumentRead):
            self._document_read(event)
        elif isinstance(event, StepFinished) and (not event.replayed or event.copied_from is not None):
            # a step taken from an earlier run is this run's too: its trace holds every step it has
            self.steps = event.step.index
            step: dict[str, Any] = {**event.step.to_dict(), "digest": event.step.chunk.digest}
            if event.copied_from is not None:
                step["copied_from"] = event.copied_from
            self._write_run(lambda run_id: self.store.add_step(run_id, step))
        elif isinstance(event, AnswerFinished) and not event.found:
            # A reply the answer did not come out of (under --schema, the run then fails on it): kept
            # now, so the trace has what the model wrote whatever follows.
            self._write_run(lambda run_id: self.store.update_run(run_id, raw_answer=event.raw))
        elif isinstance(event, RunFinished):
            result = event.result
            kept = stored_result(result)
            self._write_run(
                lambda run_id: self.store.finish_run(
                    run_id,
                    "complete",
                    answer=result.answer,
                    raw_answer=result.raw_answer,
                    quotes=kept["quotes"],
                    result=kept,
                    continued_from=result.continued_from,
                )
            )

    def _started(self, e: RunStarted) -> None:
        if self.resume:

            def resumed(run_id: str) -> None:
                self.store.update_run(run_id, status="running", ended_at=None, error=None)
                self.turn = self.store.own_turn(run_id)

            self._write_run(resumed)
            return
        self.sources = [fingerprint(s) for s in e.sources]
        self.settings = {
            **e.config.to_dict(),
            "cwd": os.getcwd(),
            **({"ocr": e.ocr} if e.ocr != "auto" else {}),
            **({"engine": self.engine} if self.engine else {}),
            **({"chat_template": self.chat_template} if self.chat_template else {}),
            **({"job": self.job} if self.job else {}),
        }
        model = model_record(e.model, e.model_path, e.servers)

        keys = self.key.to_dict() if self.key is not None else None

        def create() -> None:
            self.run_id = self.store.create_run(
                question=e.question,
                sources=self.sources,
                model=model,
                settings=self.settings,
                keys=keys,
                turn=self.is_turn,
                conversation=self.conversation,
                asked=self.asked,
                changed=self.changed,
            )
            self.turn = self.store.own_turn(self.run_id)

        self._write(create)

    def _document_read(self, e: DocumentRead) -> None:
        units = e.source_units or (None,) * len(e.source_tokens)
        for record, tokens, pages, unit in zip(self.sources, e.source_tokens, e.source_pages, units):
            record["tokens"], record["unit"], record["units"] = tokens, unit, pages or None
            record["pages"] = (pages or None) if unit == "page" else None
            if record["kind"] == "stdin" and self.stdin is not None:
                digest = self.stdin.hexdigest()
                if self.resume and record.get("sha256") and record["sha256"] != digest:
                    raise MemagentError(
                        "Standard input differs from the interrupted run's.", "Pipe the same text again to resume it."
                    )
                record["sha256"], record["size"] = digest, self.stdin.size
        self._write_run(
            lambda run_id: self.store.update_run(
                run_id, sources=self.sources, document_tokens=e.document_tokens, steps_total=e.steps
            )
        )

    def conversation_record(self) -> dict[str, Any] | None:
        """The run's conversation and turn as records give them (docs/JSON.md): {"id", "turn"},
        with "changed" where a follow-up gave settings over the conversation's; None unrecorded."""
        if self.turn is None or self.failed_write is not None:
            return None
        return {"id": self.turn[0], "turn": self.turn[1], **({"changed": dict(self.changed)} if self.changed else {})}

    def stopped(self, status: str, error: str | None = None) -> None:
        """The run ended early: `interrupted` (Ctrl-C, SIGTERM) or `failed`."""
        run_id = self.run_id
        if run_id is not None:
            self._write(lambda: self.store.finish_run(run_id, status, error=error))


def stored_result(result: RunResult) -> dict[str, Any]:
    """What the store keeps of a finished run's `ask --json` record beside its columns and steps
    (migration 7): the record less its steps, and its quotes as places, never their text."""
    record = result.to_dict()
    del record["steps"]
    record["quotes"] = [q.place() for q in result.quotes]
    if "evidence_by_field" in record:
        record["evidence_by_field"] = {name: [q.place() for q in found] for name, found in result.evidence_by_field.items()}
    return record


def resume_plan(store: TraceStore, ref: str) -> dict[str, Any]:
    """The stored run to resume, after checking it can be: not complete, sources unchanged."""
    run = store.get_run(ref)  # a "running" run whose process has died comes back interrupted
    if run["status"] == "running":
        raise MemagentError(
            f"Run {run['id'][:8]} is still running in another memagent.",
            "Wait for it to finish, or stop it (Ctrl-C in its terminal) and resume it then; if it ran on a host"
            f" or in a container that is gone, `memagent traces release {run['id'][:8]}` first.",
            exit_code=EXIT_USAGE,
        )
    if run["status"] == "complete":
        raise MemagentError(
            f"Run {run['id'][:8]} is already complete.",
            f"See it with: memagent traces show {run['id'][:8]}",
            exit_code=EXIT_USAGE,
        )
    refuse_streams(run, f"run {run['id'][:8]} cannot be resumed", "Start a new run; pipe the text again.")
    for source in run["sources"]:
        if source["kind"] == "stdin" or not source.get("sha256"):
            continue
        path = source.get("abspath") or source["path"]
        if not Path(path).is_file():
            raise MemagentError(
                f"{source['path']} is gone, so run {run['id'][:8]} cannot be resumed.",
                "Put it back where it was, or start a new run.",
            )
        if file_sha256(path) != source["sha256"]:
            raise MemagentError(
                f"{source['path']} has changed since run {run['id'][:8]} read it.",
                "Resuming would mix two versions of the document; start a new run.",
            )
    return run


def read_once(source: Mapping[str, Any]) -> bool:
    """Whether a recorded source was a pipe or FIFO (`<(cmd)`, `mkfifo`): its text was given once
    and is gone."""
    return bool(source.get("stream")) and source["kind"] != "stdin"


def refuse_streams(run: Mapping[str, Any], what: str, hint: str) -> None:
    """A one-line error where `run` read a pipe or FIFO: opening it again would read nothing, or wait
    for good on a FIFO nobody writes to."""
    for source in run["sources"]:
        if read_once(source):
            raise MemagentError(f"{printable(source['path'])} was a pipe, read once as it came, so {what}.", hint)


def resumed_config(settings: Mapping[str, Any]) -> AgentConfig:
    names = {f.name for f in fields(AgentConfig)}
    return AgentConfig(**{k: v for k, v in settings.items() if k in names})


def was_found(source: Mapping[str, Any]) -> bool:
    """Whether a recorded source was found in a folder or archive rather than named: one that
    cannot be read is then skipped with a note, on resume as the first time. Traces from before
    `found` was recorded say so only of documents inside archives, which are always found."""
    return bool(source.get("found", bool(source.get("member"))))


def resumed_found(run: Mapping[str, Any]) -> frozenset[str]:
    """The paths `resumed_paths` names that the run found in a folder (SourceOptions.found)."""
    return frozenset(s["path"] for s in run["sources"] if s["kind"] != "stdin" and not s.get("member") and was_found(s))


def resumed_paths(run: Mapping[str, Any]) -> Sequence[str]:
    """The sources as first named: relative paths resolve from the run's own directory."""
    # The documents of one archive share its path: it is named once, and expands to them again.
    paths = [STDIN_PATH if s["kind"] == "stdin" else s["path"] for s in run["sources"]]
    return list(dict.fromkeys(paths))
