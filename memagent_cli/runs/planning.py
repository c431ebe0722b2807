"""Planning a run against the trace store, for every front end: the one place an answer key is made
(core/keys.py), the one place a Recorder is built, and the question each front end asks once per
run (`Runs.plan`): is the answer stored (reused), is there an earlier run over an earlier version of
the same documents to go on from (continued), or is it read?

`fresh` (`--fresh`, MEMAGENT_FRESH=1, the page's and MCP's own) looks nothing up; its runs are
recorded with their keys all the same, so they are the ones found next time. Without a store
(--no-trace) nothing is found or kept.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..core.jobs import Job
    from ..core.keys import AnswerKey, Continued
    from ..core.pipeline import SourceOptions
    from ..ingest.sources import Source
    from ..traces.found import Reused
    from ..traces.recorder import HashingReader, Recorder
    from ..traces.store import TraceStore
    from .setup import RunSetup


@dataclass
class Runs:
    """Plans and records the runs of one front end's command, call or page request: made with
    `setup`, their documents read as `sources` says, over `store` (None: nothing kept or found).
    `stdin`, where standard input is read and runs are traced, hashes it as it passes."""

    store: TraceStore | None
    setup: RunSetup
    sources: SourceOptions
    fresh: bool
    warn: Callable[[str], None]
    stdin: HashingReader | None = None

    def plan(
        self,
        question: str,
        documents: Sequence[Source],
        *,
        config: AgentConfig | None = None,
        text: str | None = None,
        history: Sequence[tuple[str, str]] = (),
        fresh: bool | None = None,
    ) -> Plan:
        """One run of `question` over `documents` (or `text`, given inline, which they stand in for):
        its keys and the stored answer, if any; its earlier run is looked for when it starts
        (`Plan.continued`). `config`: the run's own settings where not the setup's; `history`: the
        earlier turns a follow-up's problem holds; `fresh`: this run's own, over the command's."""
        config = config or self.setup.config
        fresh = self.fresh if fresh is None else fresh
        key = self._key(question, documents, config, text, history)
        reused = None
        if not fresh and key is not None and self.store is not None:
            from ..traces.found import reused_answer

            reused = reused_answer(self.store, key, documents, self.warn, text)
        return Plan(self, key, reused, config, fresh)

    def plan_job(self, job: Job, documents: Sequence[Source] | None = None, *, fresh: bool | None = None) -> Plan:
        """`plan` of a job (`--each`, `batch`, `watch`, `eval`), with its own settings
        (core.jobs.job_config), over `documents` (default: its sources; its stand-in where its text is
        given inline)."""
        from ..core.jobs import job_config

        if documents is None:
            documents = (job.stand_in,) if job.context is not None else job.sources
        return self.plan(
            job.question, documents, config=job_config(job, self.setup.config), text=job.context, history=job.history, fresh=fresh
        )

    def _key(
        self,
        question: str,
        documents: Sequence[Source],
        config: AgentConfig,
        text: str | None,
        history: Sequence[tuple[str, str]],
    ) -> AnswerKey | None:
        """The run's keys; None without a store, or when a document cannot be read to hash it (the
        run then says why, as it would have)."""
        from ..core.keys import answer_key

        if self.store is None:
            return None
        try:
            return answer_key(
                question,
                config,
                model=self.setup.model,
                engine=self.setup.engine,
                sources=documents,
                ocr=self.sources.ocr,
                password=self.sources.password is not None,
                text=text,
                history=history,
            )
        except OSError:
            return None

    def recorder(
        self,
        *,
        key: AnswerKey | None = None,
        resume: Mapping[str, Any] | None = None,
        turn: bool = False,
        conversation: str | None = None,
        asked: str | None = None,
        changed: Mapping[str, Any] | None = None,
        job: Mapping[str, str] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> Recorder | None:
        """The recorder of one run (None without a store). `turn`: the run is a turn of a conversation
        (a question a person asks: `ask`, `chat`, the page, an MCP call of one question), the next of
        `conversation`, else the first of a new one, asked as `asked`, with the settings it `changed`
        over the conversation's; other runs (`--each`, `batch`, `watch`, `eval`) begin none. `job`: a
        `batch` run's results file and key."""
        from ..traces.recorder import Recorder

        if self.store is None:
            return None
        return Recorder(
            self.store,
            warn=warn or self.warn,
            resume=resume,
            stdin=self.stdin,
            engine=self.setup.engine_record,
            chat_template=self.setup.template_record,
            job=job,
            key=key,
            turn=turn,
            conversation=conversation if turn else None,
            asked=asked if turn and conversation is not None else None,
            changed=(changed or None) if turn else None,
        )

    def turn_of_reused(
        self, reused: Reused, conversation: str | None, question: str, changed: Mapping[str, Any] | None = None
    ) -> None:
        """An answer given again is a turn all the same: of the conversation it follows, else the first
        of a new one (so that `ask -c` goes on from it). Its record says which."""
        import sqlite3

        from ..errors import MemagentError

        if self.store is None:
            return
        try:
            cid, turn = self.store.add_turn(conversation, reused.run, question, changed=changed or None)
        except (MemagentError, sqlite3.Error):  # a read-only or busy store: the answer is given all the same
            return
        reused.record["conversation"] = {"id": cid, "turn": turn, **({"changed": dict(changed)} if changed else {})}


@dataclass
class Plan:
    """What `Runs.plan` decided for one run: its keys, the stored answer given again (`reused`, None:
    it is read), and, asked for when the run starts, the earlier run it goes on from."""

    runs: Runs
    key: AnswerKey | None
    reused: Reused | None
    config: AgentConfig
    fresh: bool

    def continued(self) -> Continued | None:
        """The earlier run over an earlier version of the documents, to go on from; None when fresh,
        without one, and for InfMem, whose search covers the whole text: each of its steps may have
        read any part of it, so a step of an earlier run is not one of this run's."""
        from ..core.protocols import get as get_protocol
        from ..traces.found import continuation
        from ..traces.store import TraceStore

        store = self.runs.store
        if self.fresh or self.key is None or store is None or get_protocol(self.config.protocol).planner:
            return None
        # A connection of its own: a job's runs are planned in whichever thread the scheduler starts them.
        with TraceStore(store.path) as own:
            return continuation(own, self.key)

    def job(self, job: Job) -> Job:
        """`job`, going on from its earlier run where there is one."""
        return dataclasses.replace(job, continued=self.continued())

    def recorder(self, **given: Any) -> Recorder | None:
        """`Runs.recorder` for this run, with its keys."""
        return self.runs.recorder(key=self.key, **given)

    def so_far(self) -> Plan:
        """This plan for a reading of a document still growing: its run is recorded with its lineage
        alone (an answer so far is no answer to the text there, so never given again; it is gone on
        from once the document has grown)."""
        from ..core.keys import AnswerKey

        key = AnswerKey(None, self.key.lineage) if self.key is not None else None
        return dataclasses.replace(self, key=key)
