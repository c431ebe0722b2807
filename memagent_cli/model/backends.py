"""Engines as types: `EngineOptions`, the settings of one backend decided once (the embedded
llama.cpp engine's, a served engine's), and the registry that finds a backend by its name.

A backend is one module that implements the `Engine` protocol (engine.py) and a frozen dataclass
subclass of `EngineOptions` decorated with `@register`; its module's name goes in `BACKEND_MODULES`.
Everything above the model layer holds an `EngineOptions` and asks it, never a kind's name:
`open` makes the engine, `served` says whether a server runs the model (it then sizes its own
context and applies its own chat template), `own_tokenizer` is the engine's vocabulary when no GGUF
is at hand, `record` is what a trace keeps to find the engine again.

Importing this module loads no model library and no HTTP client.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..errors import EXIT_USAGE, MemagentError

if TYPE_CHECKING:
    from .chat_template import ChatFormat
    from .engine import Engine
    from .gguf import GGUFInfo
    from .tokenizer import Tokenizer

# The module that defines each backend, imported when it is looked up by name (`backend`): a run on
# the embedded engine never imports the served one (http.client, ssl, email: 35 ms of a start-up).
BACKEND_MODULES = {"llama": "memagent_cli.model.llama", "openai": "memagent_cli.model.served.backend"}


@dataclass(frozen=True)
class EngineOptions:
    """The settings of one backend. Subclasses are frozen dataclasses that set `kind`."""

    kind: ClassVar[str] = ""  # the backend's name: --engine, and what a trace says
    served: ClassVar[bool] = False  # a server runs the model: it sizes its context, applies its chat template

    @property
    def chat_template(self) -> str | None:
        """A chat template to use over the GGUF's own (chat.read_template); None: the GGUF's."""
        return None

    @property
    def n_ctx(self) -> int | None:
        """The context asked for; None: just large enough for the budgets (or the server's own)."""
        return None

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers that run the model, normalized (served engines); () when it runs here."""
        return ()

    def describe(self, info: GGUFInfo | None) -> str:
        """The model's name for headers and records: the GGUF's, or the one a server serves."""
        return info.name if info is not None else ""

    def open(self, info: GGUFInfo | None, tokenizer: Tokenizer, chat: ChatFormat | None, n_ctx: int, sequences: int) -> Engine:
        """The engine, ready for calls: `n_ctx` is the context to make (0: the server's own),
        `sequences` the replies it may batch."""
        raise NotImplementedError

    def own_tokenizer(self) -> Tokenizer:
        """The engine's own vocabulary, for a run given no GGUF (a server's tokenize endpoint)."""
        raise MemagentError(f"The {self.kind} engine needs a GGUF model.", "Pass one with --model.")

    def record(self) -> dict[str, Any] | None:
        """What a trace keeps to find this engine again on --resume (never a key); None: nothing
        beyond the model file."""
        return None

    def decides(self) -> dict[str, Any]:
        """What of this engine decides an answer, beside the model file and the agent's settings
        (core/keys.py): the backend, and what it sends the model that the settings do not say.
        How it runs (threads, GPU layers, batching, a server's address where the model is named)
        is left out: it changes the time an answer takes, not the answer."""
        return {"kind": self.kind}


_Options = TypeVar("_Options", bound=type[EngineOptions])
_REGISTRY: dict[str, type[EngineOptions]] = {}


def register(cls: _Options) -> _Options:
    """Class decorator: makes a backend's options findable by its `kind`."""
    if not cls.kind:
        raise TypeError(f"{cls.__name__} sets no kind")
    _REGISTRY[cls.kind] = cls
    return cls


def backends() -> dict[str, type[EngineOptions]]:
    """Every backend, by name, in the order of BACKEND_MODULES."""
    for module in BACKEND_MODULES.values():
        importlib.import_module(module)
    return {kind: _REGISTRY[kind] for kind in BACKEND_MODULES}


def backend(kind: str) -> type[EngineOptions]:
    """The options type of the backend named `kind` (its module alone imported); a usage error
    names the known ones."""
    if kind not in BACKEND_MODULES:
        names = " or ".join(f"--engine {name}" + (" (the default)" if name == "llama" else "") for name in BACKEND_MODULES)
        raise MemagentError(f"Unknown engine {kind!r}.", f"Use {names}.", exit_code=EXIT_USAGE)
    importlib.import_module(BACKEND_MODULES[kind])
    return _REGISTRY[kind]
