"""The arguments and flags of `ask`, which `inspect` takes too, so that an ask line becomes an
inspect line by its verb alone: `QuestionArgs`, and `AskFlags`, one parameter of each command
through options.flag_groups (the run's own flags are run_flags.RunFlags, beside it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from .follow import FollowFlags
from .options import (
    FreshOpt,
    NoTraceOpt,
    OutputFlags,
    ParallelOpt,
    QuestionFlags,
    ShowFlags,
    SourceFlags,
    option,
)

QuestionArgs = Annotated[
    Optional[list[str]],
    typer.Argument(
        metavar="[SOURCE]... QUESTION",
        show_default=False,
        help="PDFs, text files, folders or - for stdin, then the question. With no source, piped stdin is read.",
    ),
]
ResumeOpt = Annotated[
    Optional[str],
    option(
        "Continue an interrupted run from its last completed step, with its sources, question and settings.",
        metavar="ID|last",
        panel="Traces",
    ),
]
EachOpt = Annotated[
    bool,
    option(
        "Ask every document on its own: each file (in folders and archives too) x each question is its "
        "own run, with its own memory and trace, on one loaded model.",
        "--each",
        panel="Questions",
    ),
]
SvgOpt = Annotated[Optional[Path], option("Save a picture of the live view (SVG) when the run ends.")]


@dataclass(frozen=True)
class AskFlags:
    """What to read and how (the sources', follow-up's, questions', outputs' flags), and how the run
    is kept; in the order --help lists them. A field's name is its parameter's."""

    source_flags: SourceFlags = SourceFlags()
    resume: ResumeOpt = None
    no_trace: NoTraceOpt = False
    fresh: FreshOpt = False
    follow: FollowFlags = FollowFlags()
    asked: QuestionFlags = QuestionFlags()
    each: EachOpt = False
    outputs: OutputFlags = OutputFlags()
    parallel: ParallelOpt = 4
    shown: ShowFlags = ShowFlags()
    svg: SvgOpt = None
