"""What each tool of the MCP server does, apart from the protocol: the checks of its arguments,
the runs it plans, and what it returns (the structured record and its short text). server.py
binds these to the SDK; every function here takes the call's `Roots` (guard.py) and raises
MemagentError (a Refused one for what the rules forbid) for the host to read.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Mapping, Sequence

import anyio.to_thread

from ..core.config import AgentConfig
from ..core.jobs import Job
from ..core.memdiff import evidence_record, evidence_steps
from ..core.pipeline import Prepared, SourceOptions, chunk_stream, prepare_model
from ..core.quotes import describe_quotes
from ..errors import EXIT_USAGE, MemagentError
from ..ingest.sources import Source
from ..model.llama import EmbeddedOptions
from ..runs.guard import Refused, Roots, run_visible
from ..runs.requests import answer_settings, conversation_turn, find_documents, resumption, within_budgets
from ..runs.shared import RunRequest
from .calls import Host, Queue
from .server_settings import MAX_QUESTIONS, MAX_RUNS, ServerSettings

TRACE_URI = "memagent://traces/{id}"


class Tools:
    """The tools of one server: its settings, its engine's queue."""

    def __init__(self, settings: ServerSettings, queue: Queue):
        self.settings, self.queue = settings, queue

    # ask ------------------------------------------------------------------------------

    async def ask(
        self,
        roots: Roots,
        host: Host,
        sources: Sequence[str],
        questions: Sequence[str],
        *,
        each: bool = False,
        budgets: Mapping[str, Any] | None = None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        model: str | None = None,
        schema: Mapping[str, Any] | str | None = None,
        schema_multi: Mapping[str, Any] | str | None = None,
        fresh: bool = False,
        conversation: str | None = None,
    ) -> tuple[dict[str, Any], str]:
        """The answer (or answers) with evidence, and its text; see server.ASK. With `schema`, the
        answer is data too, and the question may be left out (its fields make one). An answer the
        traces have (the same question, documents, model and settings) is given at once, unless `fresh`.
        A call of one question is a turn of a conversation: of `conversation` (its documents, the
        earlier turns read with the question), else the first of a new one."""
        questions = [q.strip() for q in questions if q and q.strip()]
        budgets = {**(budgets or {}), **answer_settings(schema, schema_multi, "ask")}
        if not questions and budgets.get("answer_schema"):
            questions = [""]
        if not questions:
            raise MemagentError("No question given.", "Give `question` (or `questions`, or a `schema`).", exit_code=EXIT_USAGE)
        if len(questions) > MAX_QUESTIONS:
            raise Refused(
                f"Refused, nothing was read: {len(questions)} questions (rule: at most {MAX_QUESTIONS} per call).",
                "Split them over several calls.",
                exit_code=EXIT_USAGE,
            )
        self._check_model(model)
        config = self.config(budgets)
        several = each or len(questions) > 1
        if conversation is not None:
            if several or sources:
                raise MemagentError(
                    "A conversation's turn is one question, about the conversation's own documents.",
                    "Give `conversation` and `question` alone.",
                    exit_code=EXIT_USAGE,
                )
            cid, documents, history = await anyio.to_thread.run_sync(lambda: conversation_turn(conversation, roots))
            job = Job(key=questions[0], question=questions[0], sources=tuple(documents), title=questions[0], history=history)
            planned = [RunRequest(job, config, "Q1", fresh=fresh, turn=True, conversation=cid)]
        else:
            if not sources:
                raise MemagentError(
                    "No documents named.", "Give `sources` (or a `conversation` to go on with).", exit_code=EXIT_USAGE
                )
            options = SourceOptions(include=tuple(include), exclude=tuple(exclude), ocr=self.settings.ocr)
            notes: list[str] = []
            documents = await anyio.to_thread.run_sync(lambda: find_documents(sources, roots, self.settings.cwd, options, notes))
            for note in notes:
                await host.log("warning", note)
            planned = [
                dataclasses.replace(plan, fresh=fresh, turn=not several)
                for plan in self._plan(documents, questions, config, each)
            ]
        records = await self.queue.run(planned, host, several=several)
        if not several:
            return records[0], render(records[0])
        results = []
        for plan, found in zip(planned, records):
            document = plan.job.title if each else None
            results.append({**({"document": document} if document else {}), "question": plan.job.question, **found})
        return {"results": results}, "\n\n".join(render(r, head=True) for r in results)

    def _check_model(self, model: str | None) -> None:
        if not model:
            return
        known = {self.settings.model or ""}
        if self.settings.model:
            known.add(self.settings.model.rsplit("/", 1)[-1])
        runner = self.queue.engine.loaded
        if runner is not None:
            known.add(runner.prep.model_name)
        if model not in known:
            raise MemagentError(
                f"This server runs {self.settings.model or 'its served model'}; it does not load another model for a call.",
                "Leave `model` out, or start another memagent mcp with --model for that one.",
                exit_code=EXIT_USAGE,
            )

    def config(self, budgets: Mapping[str, Any]) -> AgentConfig:
        """The server's settings with a call's budgets and temperature (runs/requests.within_budgets)."""
        return within_budgets(self.settings.config, budgets)

    def _plan(self, documents: list[Source], questions: list[str], config: AgentConfig, each: bool) -> list[RunRequest]:
        if each:
            pairs = [(d, q) for d in documents for q in questions]
            if len(pairs) > MAX_RUNS:
                raise Refused(
                    f"Refused, nothing was read: {len(documents)} documents x {len(questions)} questions make "
                    f"{len(pairs)} runs (rule: at most {MAX_RUNS} per call).",
                    "Name fewer documents or ask fewer questions per call.",
                    exit_code=EXIT_USAGE,
                )
            several = len(questions) > 1
            return [
                RunRequest(
                    Job.each(d, q),
                    config,
                    f"{d.title} · Q{questions.index(q) + 1}" if several else d.title,
                )
                for d, q in pairs
            ]
        return [
            RunRequest(Job(key=q, question=q, sources=tuple(documents), title=q), config, f"Q{k + 1}")
            for k, q in enumerate(questions)
        ]

    # resume ---------------------------------------------------------------------------

    async def resume(self, roots: Roots, host: Host, run_ref: str) -> tuple[dict[str, Any], str]:
        """Continues an interrupted (or failed) run from its last step; see server.RESUME."""
        await self.queue.load()

        def plan() -> RunRequest:
            return resumption(run_ref, roots, self.queue.engine)

        planned = await anyio.to_thread.run_sync(plan)
        records = await self.queue.run([planned], host, several=False)
        return records[0], render(records[0])

    # inspect --------------------------------------------------------------------------

    async def inspect(
        self,
        roots: Roots,
        host: Host,
        sources: Sequence[str],
        question: str | None,
        chunk_tokens: int | None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> tuple[dict[str, Any], str]:
        """What a run would read and cost, without the model's weights; see server.INSPECT."""
        from ..core.inspection import Report, context_plan, estimate
        from ..traces.calibration import recorded_runs

        config = self.config({"chunk_tokens": chunk_tokens})
        options = SourceOptions(include=tuple(include), exclude=tuple(exclude), ocr=self.settings.ocr)
        notes: list[str] = []
        stop = threading.Event()

        def count() -> dict[str, Any]:
            documents = find_documents(sources, roots, self.settings.cwd, options, notes)
            runner = self.queue.engine.loaded
            prep: Prepared | None = None
            if runner is not None:
                prep = dataclasses.replace(runner.prep, sources=[], notices=[])
            elif self.settings.model is not None:
                prep = prepare_model(self.settings.model, EmbeddedOptions(chat_template=self.settings.engine.chat_template))
            if prep is None or prep.info is None or prep.chat is None:
                raise MemagentError(
                    "inspect counts with the model's vocabulary, and this server has none: its engine tokenizes.",
                    "Start the server with --tokenizer (a GGUF of the served model) to use inspect.",
                )
            prep.sources = documents
            chunks, stats = chunk_stream(prep, config.chunk_tokens, options, notes.append)
            for _ in chunks:
                if stop.is_set():
                    raise anyio.get_cancelled_exc_class()()
            report = Report(
                prep, stats, config.chunk_tokens, config.memory_tokens, question.strip() if question else None, config.protocol
            )
            info = report.info
            runs = recorded_runs(str(info.path.resolve()), info.file_size) if info.has_weights else None
            report.estimate = estimate(report, runs)
            report.context = context_plan(report, 1)
            return report.to_dict()

        try:
            found = await anyio.to_thread.run_sync(count, abandon_on_cancel=True)
        finally:
            stop.set()
        for note in notes:
            await host.log("warning", note)
        minutes = found["estimate"]["seconds"] / 60
        text = (
            f"{len(found['sources'])} document(s), {found['document_tokens']:,} tokens: {found['steps_total']} steps of "
            f"{found['chunk_tokens']:,} tokens; at most about {minutes:.1f} min on {found['estimate']['device']}."
        )
        return found, text

    # traces ---------------------------------------------------------------------------

    def traces_list(self, roots: Roots, status: str | None, source: str | None, limit: int) -> tuple[dict[str, Any], str]:
        """Recorded runs this server may show, newest first; see server.TRACES_LIST."""
        from ..traces.store import TraceStore

        with TraceStore() as store:
            runs = [r for r in store.list_runs(status=status, source=source, limit=None) if run_visible(r, roots)][:limit]
        listed = [
            {
                "id": r["id"],
                "started_at": r["started_at"],
                "status": r["status"],
                "question": r["question"],
                "answer": r.get("answer"),
                "steps": r["step_count"],
                "steps_total": r.get("steps_total"),
                "sources": [s.get("title") or s.get("path") for s in r["sources"]],
                "uri": TRACE_URI.format(id=r["id"]),
            }
            for r in runs
        ]
        text = "\n".join(
            f"{r['id']}  {r['status']:<11} {r['steps']}{'/' + str(r['steps_total']) if r['steps_total'] else ''} steps  "
            f"{r['question']}" + (f"  → {r['answer']}" if r["answer"] else "")
            for r in listed
        )
        return {"runs": listed}, text or "No recorded runs over the allowed roots."

    def trace_show(self, roots: Roots, run_ref: str, step: int | None, memories: bool) -> tuple[dict[str, Any], str]:
        """One recorded run: question, sources, settings, steps, evidence, answer; see server.TRACE_SHOW."""
        from ..traces.store import TraceStore

        with TraceStore() as store:
            run = store.get_run(run_ref)
        if not run_visible(run, roots):
            raise Refused(
                f"Refused: run {run['id'][:8]} read documents outside the allowed roots, or standard input "
                "(rule: the server shows only runs over what it may read).",
                exit_code=EXIT_USAGE,
            )
        steps = run["steps"]
        if step is not None and not any(s["index"] == step for s in steps):
            raise MemagentError(f"Run {run['id'][:8]} has no step {step}; it has {len(steps)}.", exit_code=EXIT_USAGE)
        chosen = set(evidence_steps(steps))
        shown = [
            s if memories or step is not None else {k: v for k, v in s.items() if k != "memory"}
            for s in steps
            if step is None or s["index"] == step
        ]
        out = {
            **{k: v for k, v in run.items() if k != "steps"},
            "memory": steps[-1]["memory"] if steps else None,
            "steps": shown,
            "evidence": [evidence_record(s) for s in steps if s["index"] in chosen],
            "uri": TRACE_URI.format(id=run["id"]),
        }
        total = f"/{run['steps_total']}" if run.get("steps_total") else ""
        text = (
            f"Run {run['id']} ({run['status']}, {len(steps)}{total} steps): {run['question']}\n"
            f"Answer: {run.get('answer') if run.get('answer') is not None else '(none yet)'}\n"
            f"Final memory: {out['memory'] or '(none)'}"
        )
        return out, text


def render(record: Mapping[str, Any], head: bool = False) -> str:
    """A run's record as a few lines for a host to read."""
    lines: list[str] = []
    if head:
        lines.append(" · ".join(str(record[k]) for k in ("document", "question") if record.get(k)))
    if record.get("error"):
        return "\n".join(lines + [f"error: {record['error']}"])
    lines.append(str(record.get("answer", "")))
    if record.get("quotes"):
        lines.extend(f"quote: {line}" for line in describe_quotes(record["quotes"]))
    else:
        for item in record.get("evidence") or []:
            lines.append(f"evidence: {item['location']} (step {item['step']}): {item['excerpt']}")
    if record.get("trace"):
        lines.append(f"trace: {record['trace']} ({record.get('steps')} steps; {TRACE_URI.format(id=record['trace'])})")
    return "\n".join(lines)
