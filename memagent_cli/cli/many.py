"""`memagent ask -q Q -q Q...`: several questions over one reading of the sources, each its own
run and trace, shown in one table; the answers printed in question order."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Iterable

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, MemagentError
from .common import fail, sigterm_as_interrupt
from .textout import cited, print_json

if TYPE_CHECKING:
    from ..core.events import Event, RunResult
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
) -> None:
    """Several questions at once: every event to its question's recorder and to the view;
    answers printed in question order. A failed question fails the command (exit 1) after
    the others have finished; each unfinished one can be resumed on its own."""
    from ..core.events import RunFailed, RunFinished
    from .textout import visible
    from .views.multiview import MultiView

    results: list[RunResult | None] = [None] * len(questions)
    errors: list[BaseException | None] = [None] * len(questions)
    view = MultiView(err, len(questions), live=err.is_terminal) if not quiet else None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(sigterm_as_interrupt())
            if view is not None:
                stack.enter_context(view)
            for index, event in events:
                if index is not None:  # else a notice about the whole input, for the view alone
                    rec = recorders[index]
                    if rec is not None:
                        if isinstance(event, RunFailed):
                            rec.stopped("failed", str(event.error))
                        else:
                            rec.handle(event)
                    if isinstance(event, RunFinished):
                        results[index] = event.result
                    elif isinstance(event, RunFailed):
                        errors[index] = event.error
                if view is not None:
                    view.handle(index, event)
    except MemagentError as exc:
        for rec in recorders:
            if rec is not None and rec.run_id is not None:
                rec.stopped("failed", str(exc))
        fail(err, exc)
    except KeyboardInterrupt:
        hints = []
        for i, rec in enumerate(recorders):
            if rec is not None and results[i] is None:
                rec.stopped("interrupted")
                if resume_hint(rec) and rec.run_id is not None:
                    hints.append(f"Q{i + 1}: memagent ask --resume {rec.run_id[:8]}")
        err.print(
            Text.assemble(("interrupted", "yellow"), ("\nResume each question with:\n" + "\n".join(hints)) if hints else ""),
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    if json_out:
        out: list[dict[str, Any]] = []
        for i, result in enumerate(results):
            item = result.to_dict() if result is not None else {"question": questions[i], "error": str(errors[i])}
            rec = recorders[i]
            if rec is not None and rec.failed_write is None and rec.run_id is not None:
                item["trace"] = rec.run_id
            out.append(item)
        print_json({"results": out})
    else:
        tty = sys.stdout.isatty()
        for i, result in enumerate(results):
            if result is None:
                continue
            answer = result.raw_answer if raw else result.answer
            if cite:
                answer += "\n" + cited(result)
            question = visible(result.question) if tty else result.question
            print(f"Q{i + 1}: {question}\n{visible(answer) if tty else answer}\n")
    exit_codes = []
    for i, error in enumerate(errors):
        if error is None:
            continue
        if not isinstance(error, MemagentError):  # a bug: main() reports it with the traceback on request
            raise error
        hint = resume_hint(recorders[i]) or ""
        err.print(Text.assemble(("error: ", "bold red"), f"Q{i + 1}: {visible(str(error))}", hint), soft_wrap=True)
        exit_codes.append(error.exit_code)
    if exit_codes:
        raise typer.Exit(max(exit_codes))


def resume_hint(recorder: Recorder | None) -> str | None:
    """What the end of a stopped run's error says: after which step, and the command that resumes it."""
    if recorder is None or recorder.run_id is None or recorder.failed_write is not None or recorder.steps == 0:
        return None
    return f" after step {recorder.steps}. Resume with: memagent ask --resume {recorder.run_id[:8]}"
