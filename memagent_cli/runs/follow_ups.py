"""A conversation found in the trace store, for every front end that follows one up (`ask -c`,
`ask --cid`, `chat`, the page): its first run (sources, model, settings), the paths that run named,
and its turns so far; and what of its documents changed since it began.

A conversation is about its sources, and its first run holds them with the model and settings: a
follow-up reads those sources again (as they are now: a document changed since is said in a line).
Its problem holds the earlier turns (core.protocols.follow_up), unless asked alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import EXIT_USAGE, MemagentError

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..ingest.sources import Source
    from ..traces.store import TraceStore


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

    def next_turn(self) -> str:
        """The line that says which turn a follow-up is, and that it reads the sources again."""
        return f"turn {self.turns + 1} of conversation {self.id[:8]}: reads the sources again for this question"


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


def turn_settings(
    first: Mapping[str, Any], overrides: Mapping[str, Any], model: str | None
) -> tuple[AgentConfig, dict[str, Any]]:
    """The settings of a conversation's next turn: its first run's, `overrides` (AgentConfig fields)
    over them; and what the turn changed, {option: value}, `--model` where `model` is not the first run's."""
    import dataclasses

    from ..core.keys import differences
    from ..traces.recorder import resumed_config

    try:
        config = dataclasses.replace(resumed_config(first.get("settings") or {}), **overrides)
    except ValueError as exc:
        raise MemagentError(f"Invalid option: {exc}.", exit_code=EXIT_USAGE) from None
    changed: dict[str, Any] = {d.option: d.wanted for d in differences(first.get("settings") or {}, config.to_dict())}
    if model != (first.get("model") or {}).get("path"):
        changed["--model"] = model
    return config, changed


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
