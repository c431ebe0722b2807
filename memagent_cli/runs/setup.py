"""What a run is made with, decided once by a front end (the CLI's flags, the MCP server's options,
the page's): the model file, the agent's settings, the engine and a chat template the user gave."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..model.backends import EngineOptions


class RunArgs(TypedDict):
    """What core's runs take of a RunSetup (ask_events, run_jobs, evaluate_events, the MCP server)."""

    model: str | None
    config: AgentConfig
    engine: EngineOptions


@dataclass(frozen=True)
class RunSetup:
    """What a command runs with, decided once."""

    model: str | None  # the GGUF: the embedded engine's model, or the vocabulary of a served run; None: the server's
    config: AgentConfig
    engine: EngineOptions
    template: ChatTemplate | None = None  # a --chat-template, checked

    def args(self) -> RunArgs:
        return {"model": self.model, "config": self.config, "engine": self.engine}

    @property
    def engine_record(self) -> dict[str, Any] | None:
        """What a trace keeps of the engine (never a key)."""
        return self.engine.record()

    @property
    def template_record(self) -> dict[str, str] | None:
        return self.template.record if self.template is not None else None


class ChatTemplate:
    """A --chat-template the user gave: its text, and what a trace keeps to resume with it."""

    def __init__(self, text: str, record: dict[str, str]):
        self.text, self.record = text, record
