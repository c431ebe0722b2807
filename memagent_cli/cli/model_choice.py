"""The model a command runs: found, offered for download where a catalog model is missing (on a
terminal, online), installed with a progress bar per stage, or refused with the one message that
says what getting it costs. `setup` (every command that runs a model), `inspect` and `models pull`
share it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..install import registry
from .textout import visible

if TYPE_CHECKING:
    from rich.progress import Task, TaskID

    from ..install.pulling import Plan


def offline_requested(flag: bool) -> bool:
    from ..install.hub import offline_env

    return flag or offline_env()


def run_plan(plan: Plan, *, offline: bool, err: Console) -> tuple[str, registry.Record]:
    """Carries out a pull or conversion plan with a progress bar per stage (speed, ETA) on stderr;
    piped, a line per stage and every tenth of it."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn

    from ..install import pulling
    from ..model.memory import format_bytes

    class Amount(ProgressColumn):
        def render(self, task: Task) -> Text:
            if task.fields.get("unit") == "tensors":  # llama.cpp's quantizer reports tensors, not bytes
                speed = f"  {task.speed:.1f} tensors/s" if task.speed else ""
                return Text(f"{int(task.completed)}/{int(task.total or 0)} tensors{speed}")
            speed = f"  {format_bytes(task.speed)}/s" if task.speed else ""
            return Text(f"{format_bytes(task.completed)}/{format_bytes(task.total)}{speed}")

    tasks: dict[str, TaskID] = {}
    tenths: dict[str, int] = {}
    with Progress(
        TextColumn("[bold]{task.description:<9}"),
        BarColumn(),
        Amount(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:

        def progress(stage: str, done: int, total: int | None) -> None:
            if stage not in tasks:
                unit = "tensors" if stage == "quantize" else "bytes"
                tasks[stage] = bar.add_task(stage, total=total, unit=unit)
                if not err.is_terminal:
                    err.print(f"{stage}…", markup=False, highlight=False)
            bar.update(tasks[stage], completed=done, total=total)
            if not err.is_terminal and total:
                tenth = done * 10 // total
                if tenth > tenths.get(stage, 0):
                    tenths[stage] = tenth
                    err.print(f"{stage} {tenth * 10}%", markup=False, highlight=False)

        try:
            name, record = pulling.execute(plan, progress=progress, offline=offline)
        except KeyboardInterrupt:
            bar.stop()
            stage = next(reversed(tasks), "start")
            err.print(
                f"interrupted during {stage}: nothing is installed yet. Run the same command again: it resumes where it stopped.",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
    err.print(
        f"installed {visible(name)} ({size_text(record['size'])}) at {visible(record['path'])}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return name, record


def model_for_run(model: str | None, err: Console, offline: bool) -> str:
    """The model file; a catalog model not yet installed is offered for download on a terminal
    (online), and otherwise refused with `missing_model`'s one message."""
    from ..install.registry import NotInstalled, resolve_model

    try:
        return str(resolve_model(model))
    except NotInstalled as missing:
        from ..install import pulling

        interactive = sys.stdin.isatty() and err.is_terminal
        if offline_requested(offline) or not interactive:
            raise missing_model(missing.name) from None
        # The same plan `models pull` makes: the user sees what it costs before anything is downloaded.
        try:
            plan = pulling.plan_pull(missing.name)
        except MemagentError:  # the Hub cannot be reached (or refuses): the same message as offline
            raise missing_model(missing.name) from None
        answer = err.input(f"{missing.name} is not installed. Getting it {plan.describe()}. Start now? [Y/n] ")
        if answer.strip().lower() not in ("", "y", "yes"):
            raise missing_model(missing.name) from None
        name, record = run_plan(plan, offline=False, err=err)
        return record["path"]


def installed_model(model: str | None) -> str:
    """The model file for a command that only reads its vocabulary (`inspect`): --model,
    MEMAGENT_MODEL, the configured default, else the catalog's; nothing is offered for download (a
    15 GB checkpoint to count tokens), and a catalog model not yet pulled gets `missing_model`'s message."""
    from ..install.registry import NotInstalled, resolve_model

    try:
        return str(resolve_model(model))
    except NotInstalled as missing:
        raise missing_model(missing.name) from None


def missing_model(name: str) -> MemagentError:
    """The one message for a catalog model that is not installed, wherever it is met (piped, on a
    terminal, offline, over MCP): what getting it costs, the command, and --model for a GGUF at hand."""
    from ..install.pulling import catalog_plan

    plan = catalog_plan(name)
    cost = f" ({plan.describe()}, at most)" if plan is not None else ""
    return MemagentError(
        f"The model {name} is not installed",
        f"Get it with: memagent models pull {name}{cost}. Or use a GGUF file you have: --model FILE.gguf",
        exit_code=EXIT_USAGE,
    )


def size_text(n: int | None) -> str:
    """A size in bytes as people read it, "?" where unknown."""
    from ..model.memory import format_bytes

    return format_bytes(n) if n else "?"
