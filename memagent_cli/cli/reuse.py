"""What the commands that run a model share of answers found again (`ask`, `ask --each`, `batch`,
`watch`): each run's keys (core/reuse.py), the stored answer given again where nothing that decides
it changed, the earlier run over an earlier version of the same documents to continue, and how a
reused answer is printed.

`--fresh` (or MEMAGENT_FRESH=1) looks nothing up; its runs are recorded with their keys all the
same, so they are the ones found next time. Without the trace store (--no-trace) nothing is found
or kept.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rich.console import Console

from .textout import cited, print_json, visible

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..core.jobs import Job
    from ..core.pipeline import SourceOptions
    from ..core.reuse import AnswerKey, Continued
    from ..ingest.sources import Source
    from ..traces.reuse import Reused
    from ..traces.store import TraceStore
    from .setup import RunSetup


@dataclass
class Lookup:
    """Finds answers and earlier runs for one command's runs, made with `setup`, their documents
    read as `sources` says."""

    store: TraceStore | None
    setup: RunSetup
    sources: SourceOptions
    fresh: bool
    warn: Callable[[str], None]

    def key(
        self,
        question: str,
        documents: Sequence[Source],
        config: AgentConfig | None = None,
        text: str | None = None,
        history: Sequence[tuple[str, str]] = (),
    ) -> AnswerKey | None:
        """The run's keys (`config`: the run's own, where it is not the command's; `text`: the
        document given inline; `history`: the earlier turns a follow-up's problem holds); None
        without a store, or when a document cannot be read to hash it (the run then says why, as it
        would have)."""
        from ..core.reuse import answer_key

        if self.store is None:
            return None
        try:
            return answer_key(
                question,
                config or self.setup.config,
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

    def job_key(self, job: Job, documents: Sequence[Source]) -> AnswerKey | None:
        """A job's keys, with its own settings (core.jobs.job_config), over `documents` (its
        stand-in where its text is given inline)."""
        from ..core.jobs import job_config

        return self.key(job.question, documents, job_config(job, self.setup.config), text=job.context)

    def reused(self, key: AnswerKey | None, documents: Sequence[Source], text: str | None = None) -> Reused | None:
        """The stored answer of a run with this key over `documents` (or `text`, given inline), or
        None (--fresh, no store, none stored)."""
        from ..traces.reuse import reused_answer

        if self.fresh or key is None or self.store is None:
            return None
        return reused_answer(self.store, key, documents, self.warn, text)

    def continued(self, key: AnswerKey | None, config: AgentConfig | None = None) -> Continued | None:
        """The earlier run over an earlier version of the documents, to go on from; None with
        --fresh, without one, and for InfMem, whose search covers the whole text: each of its steps
        may have read any part of it, so a step of an earlier run is not one of this run's."""
        from ..core.protocols import get as get_protocol
        from ..traces.reuse import continuation
        from ..traces.store import TraceStore

        protocol = get_protocol((config or self.setup.config).protocol)
        if self.fresh or key is None or self.store is None or protocol.planner:
            return None
        # A connection of its own: a job's runs are planned in whichever thread the scheduler starts them.
        with TraceStore(self.store.path) as store:
            return continuation(store, key)


def record_text(record: Mapping[str, Any], *, raw: bool, cite: bool, tty: bool) -> str:
    """A run's answer as stdout has it, from its record: the answer (or the whole reply), and with
    --cite its quotes; on a terminal, what the model wrote is displayed, not obeyed."""
    answer = str((record.get("raw_answer") if raw else record.get("answer")) or "")
    if cite:
        answer += "\n" + cited(record.get("quotes") or [])
    return visible(answer) if tty else answer


def show_reused(reused: Reused, err: Console, *, quiet: bool, json_out: bool, raw: bool, cite: bool) -> None:
    """One answer given again: the line that says so on stderr, the answer (or its record) on stdout."""
    if not quiet:
        say_reused(err, reused.note())
    if json_out:
        print_json(reused.record)
    else:
        print(record_text(reused.record, raw=raw, cite=cite, tty=sys.stdout.isatty()))


def say_reused(err: Console, line: str) -> None:
    err.print(line, style="cyan", markup=False, highlight=False, soft_wrap=True)
