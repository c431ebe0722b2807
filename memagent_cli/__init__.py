"""memagent: answer questions about documents of any length with MemAgent's bounded memory.

The library API: `ask_events` yields a run's typed events (memagent_cli.core.events); `ask`
returns the final RunResult. The command line (memagent_cli.cli) is one consumer of it;
the README's Development section maps the subpackages.
Importing this package loads no model code: llama_cpp is imported when a model loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ hands out, for type checkers
    from .core.config import AgentConfig
    from .core.pipeline import SourceOptions, ask, ask_events
    from .errors import MemagentError
    from .model.backends import EngineOptions
    from .model.llama import EmbeddedOptions
    from .model.served.backend import ServedOptions

from .version import __version__

__all__ = [
    "ask",
    "ask_events",
    "AgentConfig",
    "EngineOptions",
    "EmbeddedOptions",
    "ServedOptions",
    "SourceOptions",
    "MemagentError",
    "__version__",
]

# The engines' settings, by the module that defines each (loaded only when asked for).
_ENGINES = {
    "EngineOptions": "memagent_cli.model.backends",
    "EmbeddedOptions": "memagent_cli.model.llama",
    "ServedOptions": "memagent_cli.model.served.backend",
}


def __getattr__(name: str) -> object:
    # Lazy, so `import memagent_cli` stays cheap for the CLI's --help and for embedders.
    if name in ("ask", "ask_events", "SourceOptions"):
        from .core import pipeline as api

        return getattr(api, name)
    if name in _ENGINES:
        import importlib

        return getattr(importlib.import_module(_ENGINES[name]), name)
    if name == "AgentConfig":
        from .core.config import AgentConfig

        return AgentConfig
    if name == "MemagentError":
        from .errors import MemagentError

        return MemagentError
    raise AttributeError(name)
