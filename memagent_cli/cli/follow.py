"""The flags of a follow-up (`ask -c`, `ask --cid ID`, `chat --cid`, `inspect -c`) and the run setup
of a conversation's next turn from them: the conversation's first run's model and settings
(runs/follow_ups.py), a flag given for the turn over each; --standalone asks without the
earlier turns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Collection, Mapping, Optional

from rich.console import Console

from ..errors import EXIT_USAGE, MemagentError
from ..runs.setup import RunSetup
from .options import option
from .run_flags import RunFlags, setup

ContinueOpt = Annotated[
    bool,
    option(
        "A follow-up in the latest conversation: its sources, model and settings (a flag given here is this"
        " turn's), the earlier questions and answers read with this one. The question is the only argument.",
        "--continue",
        "-c",
        panel="Conversations",
    ),
]
CidOpt = Annotated[
    Optional[str],
    option(
        "Go on with this conversation (any unique prefix of its id, or last; `traces list` shows each run's):"
        " its sources, model and settings, the earlier turns read with the question.",
        "--cid",
        "--conversation",
        metavar="ID",
        panel="Conversations",
    ),
]
StandaloneOpt = Annotated[
    bool, option("With -c or --cid: ask the question alone, without the earlier turns.", "--standalone", panel="Conversations")
]


@dataclass(frozen=True)
class FollowFlags:
    """The flags of a follow-up (`ask`, `inspect`), as given; a command takes them as one parameter
    (options.flag_groups). A field's name is its parameter's."""

    continue_: ContinueOpt = False
    cid: CidOpt = None
    standalone: StandaloneOpt = False

    @property
    def following(self) -> bool:
        return self.continue_ or self.cid is not None

    @property
    def ref(self) -> str:
        """The conversation asked in: --cid's, else the latest."""
        return self.cid or "last"

    def check(self) -> None:
        if self.standalone and not self.following:
            raise MemagentError(
                "--standalone goes with -c or --cid.", "Add -c to ask in the latest conversation.", exit_code=EXIT_USAGE
            )


# The flags that name the model or how it is reached: given for a turn, the turn runs that model.
MODEL_FLAGS = frozenset({"model", "engine", "base_url", "served_model", "tokenizer", "template_file"})


def turn_setup(
    flags: RunFlags, given: Collection[str], err: Console, first: Mapping[str, Any]
) -> tuple[RunSetup, dict[str, Any]]:
    """The run setup of a conversation's next turn: its first run's model, engine and settings, each
    flag `given` (by parameter name) over them for this turn; and what the turn changed, {option: value}."""
    from ..runs.follow_ups import turn_settings

    if set(given) & MODEL_FLAGS:
        run = setup(flags, err)  # the model this turn names, its engine from the flags
    else:
        run = setup(flags, err, stored=first)
    overrides = {name: value for name, value in flags.given_settings(given).items() if value is not None}
    config, changed = turn_settings(first, overrides, run.model)
    return dataclasses.replace(run, config=config), changed
