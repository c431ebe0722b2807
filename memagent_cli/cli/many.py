"""`memagent ask -q Q -q Q...`: several questions over one reading of the sources, each its own
run and trace, shown in one table; the answers printed in question order."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, MemagentError
from .answers import record_text, say_reused
from .common import fail, sigterm_as_interrupt
from .textout import print_json

if TYPE_CHECKING:
    from ..core.events import Event
    from ..traces.found import Reused
    from ..traces.recorder import Recorder


def run_many(
    events: Iterable[tuple[int | None, Event]],
    questions: list[str],
    err: Console,
    recorders: list[Recorder | None],
    *,
    quiet: bool,
    json_out: bool,
    raw: bool,
    cite: bool = False,
    asked: Sequence[int] | None = None,
    reused: Mapping[int, Reused] | None = None,
) -> None:
    """Several questions at once: every event to its question's recorder and to the view;
    answers printed in question order. A failed question fails the command (exit 1) after
    the others have finished; each unfinished one can be resumed on its own.

    `reused`: the questions (by number in `questions`) answered from the trace store, which read
    nothing; `asked`, the others in the order the events number them, each with its recorder."""
    from ..core.events import RunFailed, RunFinished
    from .textout import visible
    from .views.multiview import MultiView

    asked = list(range(len(questions))) if asked is None else list(asked)
    reused = reused or {}
    records: list[dict[str, Any] | None] = [None] * len(questions)
    errors: list[BaseException | None] = [None] * len(questions)
    for i, found in sorted(reused.items()):
        records[i] = found.record
        if not quiet:
            say_reused(err, f"Q{i + 1}: {found.note()}")
    view = MultiView(err, len(questions), live=err.is_terminal) if not quiet and asked else None
    if view is not None:
        for i, found in reused.items():
            view.answered(i, questions[i], found.answer)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(sigterm_as_interrupt())
            if view is not None:
                stack.enter_context(view)
            for index, event in events:
                question = asked[index] if index is not None else None
                if index is not None and question is not None:  # else a notice about the whole input, for the view alone
                    rec = recorders[index]
                    if rec is not None:
                        if isinstance(event, RunFailed):
                            rec.stopped("failed", str(event.error))
                        else:
                            rec.handle(event)
                    if isinstance(event, RunFinished):
                        record = event.result.to_dict()
                        if rec is not None and rec.failed_write is None and rec.run_id is not None:
                            record["trace"] = rec.run_id
                        record["conversation"] = rec.conversation_record() if rec is not None else None
                        records[question] = record
                    elif isinstance(event, RunFailed):
                        errors[question] = event.error
                if view is not None:
                    view.handle(question, event)
    except MemagentError as exc:
        for rec in recorders:
            if rec is not None and rec.run_id is not None:
                rec.stopped("failed", str(exc))
        fail(err, exc)
    except KeyboardInterrupt:
        hints = []
        for index, rec in enumerate(recorders):
            if rec is not None and records[asked[index]] is None:
                rec.stopped("interrupted")
                if resume_hint(rec) and rec.run_id is not None:
                    hints.append(f"Q{asked[index] + 1}: memagent ask --resume {rec.run_id[:8]}")
        err.print(
            Text.assemble(("interrupted", "yellow"), ("\nResume each question with:\n" + "\n".join(hints)) if hints else ""),
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    if json_out:
        failed = [{"question": question, "error": str(error)} for question, error in zip(questions, errors)]
        print_json({"results": [done if done is not None else failed[i] for i, done in enumerate(records)]})
    else:
        tty = sys.stdout.isatty()
        for i, answered in enumerate(records):
            if answered is None:
                continue
            asked_text = str(answered.get("question") or "")
            answer = record_text(answered, raw=raw, cite=cite, tty=tty)
            print(f"Q{i + 1}: {visible(asked_text) if tty else asked_text}\n{answer}\n")
    exit_codes = []
    recorder_of = {question: recorders[index] for index, question in enumerate(asked)}
    for i, error in enumerate(errors):
        if error is None:
            continue
        if not isinstance(error, MemagentError):  # a bug: main() reports it with the traceback on request
            raise error
        hint = resume_hint(recorder_of.get(i)) or ""
        err.print(Text.assemble(("error: ", "bold red"), f"Q{i + 1}: {visible(str(error))}", hint), soft_wrap=True)
        exit_codes.append(error.exit_code)
    if exit_codes:
        raise typer.Exit(max(exit_codes))


def resume_hint(recorder: Recorder | None) -> str | None:
    """What the end of a stopped run's error says: after which step, and the command that resumes it."""
    if recorder is None or recorder.run_id is None or recorder.failed_write is not None or recorder.steps == 0:
        return None
    return f" after step {recorder.steps}. Resume with: memagent ask --resume {recorder.run_id[:8]}"
