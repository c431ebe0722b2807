"""Follow-up questions (`ask -c`, `ask --cid ID`, `chat`): a conversation found in the trace store,
and the run setup of its next turn.

A conversation is about its sources, and its first run holds them with the model and settings: a
follow-up reads those sources again (as they are now: a document changed since is said in a line),
with that model and those settings, a flag given for the turn over each. Its problem holds the
earlier turns (core.protocols.follow_up), unless --standalone.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Callable, Collection, Mapping, Optional

from rich.console import Console

from ..errors import EXIT_USAGE, MemagentError
from .common import noter
from .options import option
from .setup import RunFlags, RunSetup, setup

if TYPE_CHECKING:
    from ..ingest.sources import Source
    from ..traces.store import TraceStore

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


@dataclass(frozen=True)
class Conversation:
    """A conversation to go on with: its id, its first run (sources, model, settings), the paths
    that run named, and its turns so far as (question, answer), those answered."""

    id: str
    first: Mapping[str, Any]
    paths: list[str]
    history: list[tuple[str, str]]
    turns: int

    @property
    def cwd(self) -> str | None:
        return (self.first.get("settings") or {}).get("cwd")

    @property
    def ocr(self) -> str:
        return str((self.first.get("settings") or {}).get("ocr", "auto"))

    def say_turn(self, err: Console) -> None:
        """The line that says which turn a follow-up is, and that it reads the sources again."""
        turn = f"turn {self.turns + 1} of conversation {self.id[:8]}"
        noter(err)(f"{turn}: reads the sources again for this question")


def find_conversation(store: TraceStore, ref: str) -> Conversation:
    """The conversation `ref` names ("last": the one asked in last; else a unique prefix of its id)."""
    from ..traces.conversations import answered_turns
    from ..traces.recorder import refuse_streams, resumed_paths

    found = store.conversation(ref)
    try:
        first = store.get_run(found["first_run"], with_steps=False)
    except MemagentError:
        raise MemagentError(
            f"Conversation {found['id'][:8]} has lost its first run (removed?), which holds its sources and model.",
            "Ask anew: memagent ask SOURCES QUESTION",
        ) from None
    refuse_streams(
        first,
        f"conversation {found['id'][:8]} cannot read it again for a follow-up",
        "Save the text to a file and ask anew, naming the file: memagent ask FILE QUESTION",
    )
    return Conversation(found["id"], first, list(resumed_paths(first)), answered_turns(found), len(found["turns"]))


def turn_setup(
    flags: RunFlags, given: Collection[str], err: Console, first: Mapping[str, Any]
) -> tuple[RunSetup, dict[str, Any]]:
    """The run setup of a conversation's next turn: its first run's model, engine and settings, each
    flag `given` (by parameter name) over them for this turn; and what the turn changed, {option: value}."""
    from ..core.reuse import differences
    from ..traces.recorder import resumed_config

    if set(given) & MODEL_FLAGS:
        run = setup(flags, err)  # the model this turn names, its engine from the flags
    else:
        run = setup(flags, err, stored=first)
    overrides = {name: value for name, value in flags.given_settings(given).items() if value is not None}
    try:
        config = dataclasses.replace(resumed_config(first.get("settings") or {}), **overrides)
    except ValueError as exc:
        raise MemagentError(f"Invalid option: {exc}.", exit_code=EXIT_USAGE) from None
    run = dataclasses.replace(run, config=config)
    changed: dict[str, Any] = {d.option: d.wanted for d in differences(first.get("settings") or {}, config.to_dict())}
    if run.model != (first.get("model") or {}).get("path"):
        changed["--model"] = run.model
    return run, changed


def changed_since(first: Mapping[str, Any], documents: list[Source], warn: Callable[[str], None]) -> None:
    """A line for each document whose content is not what the conversation's first run read."""
    from ..ingest.sources import file_sha256

    then = {str(s.get("abspath") or s.get("path")): s.get("sha256") for s in first.get("sources") or []}
    for document in documents:
        before = then.get(os.path.abspath(document.path))
        if before is None or document.stream:
            continue
        try:
            now = file_sha256(document.path)
        except OSError:
            continue
        if now != before:
            warn(f"{document.title} has changed since the conversation began; it is read as it is now.")
