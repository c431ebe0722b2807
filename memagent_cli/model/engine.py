"""The `Engine` protocol: one chat request (or a prompt a protocol rendered itself) in, streamed
text out; and the records every engine shares (`Sampling`, `RawPrompt` in; `PromptRead`,
`TextDelta`, `Retrying`, `CompletionDone` out).

The agent loop sees only this protocol (a user message, a token budget, sampling settings), so a
served model (vLLM, llama-server: `served/`) can stand in for the embedded llama.cpp engine
(`llama`). Importing this module loads no model library.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence, Union, runtime_checkable

from ..errors import MemagentError


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7  # 0 = greedy
    top_p: float = 0.95
    seed: int | None = None  # None = a fresh random seed
    # The reply is JSON matching this JSON Schema (text): a grammar on llama.cpp, `response_format`
    # on a server. Only a run's final answer under --schema has one (core/schema.py).
    json_schema: str | None = None


@dataclass(frozen=True)
class RawPrompt:
    """A prompt a protocol renders itself rather than through the model's chat template (InfMem's:
    Qwen3's turns under its own system message, and a reply continued from its first stage), as
    pieces of text. In a `control` piece, control-token text such as `<|im_start|>` is that token;
    in the others it is text, so a document's `<|im_end|>` never ends a turn. A served engine sends
    the whole text to the server's raw completions endpoint."""

    pieces: tuple[tuple[str, bool], ...]  # (text, control)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.pieces)

    def then(self, text: str) -> "RawPrompt":
        """This prompt followed by `text` (a reply's first stage, which the second continues)."""
        return RawPrompt((*self.pieces, (text, False)))


@dataclass(frozen=True)
class TextDelta:
    """The next piece of the reply, as the engine writes it."""

    text: str


@dataclass(frozen=True)
class PromptRead:
    """The engine has read `done` of the prompt's `total` tokens (a CPU takes tens of seconds over
    a chunk's thousands before the first token comes): told between parts of the prompt."""

    done: int
    total: int


@dataclass(frozen=True)
class Retrying:
    """A served engine lost a reply (refused, cut, timed out) and will ask again: the text
    streamed so far for this reply is void."""

    reason: str  # one line: what went wrong
    attempt: int  # the attempt about to start, from 2
    attempts: int  # the most there will be
    delay: float  # seconds it waits first


@dataclass(frozen=True)
class CompletionDone:
    """The reply is complete: its whole text, why it ended and what it cost."""

    text: str
    finish_reason: str  # "stop": the model ended its turn; "length": the token budget ran out
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int  # the generation budget used: less than asked when the prompt left less room
    cached_tokens: int  # prompt tokens reused from the previous call's cache
    prompt_seconds: float
    generate_seconds: float
    drafted_tokens: int = 0  # speculative rewrites: tokens drafted from the prompt and the reply so far
    accepted_tokens: int = 0  # of those, the tokens the model chose itself (each saved one decode)


Completion = Union[TextDelta, PromptRead, Retrying, CompletionDone]


class Engine(Protocol):
    """What the agent loop needs from a model."""

    description: str  # one line for headers: where the model runs
    concurrent: bool  # whether calls may overlap (a server batches them; llama.LlamaEngine only when it batches sequences)

    def complete(self, user_message: str, max_tokens: int, sampling: Sampling, expect: str = "") -> Iterator[Completion]:
        """Stream the reply to a single user message; the last item is CompletionDone. `expect` is
        text the reply may repeat from its start (a memory update's previous memory): an engine may
        draft it, and its output never depends on it."""

    def complete_raw(self, prompt: RawPrompt, max_tokens: int, sampling: Sampling) -> Iterator[Completion]:
        """Stream the continuation of `prompt`, rendered as it is (no chat template); the last item
        is CompletionDone. Generation ends at the model's end of turn or at `max_tokens`."""

    def close(self) -> None: ...


@runtime_checkable
class Chained(Protocol):
    """An engine that can tag a run's requests with a key (a served one: served/http_engine.py says
    which header carries it and why), so a router keeps a run's calls on one replica."""

    def for_chain(self, key: str) -> Engine:
        """The same engine, sending `key` with every request; it shares everything else."""


class StopText:
    """A reply streamed until one of `stops` (text, not a token: the end markers of a chat template
    the model does not know as tokens) appears: `feed` gives what may be shown now, holding back a
    tail that may be the start of a marker; `at` is where the first marker begins, once one has."""

    def __init__(self, stops: Sequence[str]):
        self.stops = tuple(s for s in stops if s)
        self.text = ""
        self.shown = 0
        self.at: int | None = None

    def feed(self, piece: str) -> str:
        self.text += piece
        longest = max(map(len, self.stops), default=0)
        window = max(0, self.shown - longest)
        found = [i for s in self.stops if (i := self.text.find(s, window)) >= 0]
        if found:
            self.at = min(found)
            end = self.at
        else:
            held = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
            end = len(self.text) - held
        out, self.shown = self.text[self.shown : max(end, self.shown)], max(end, self.shown)
        return out


def stopped_at(
    items: Iterator[Completion], stops: Sequence[str], count: Callable[[str], int], prompt_tokens: int, max_tokens: int
) -> Iterator[Completion]:
    """`items` (an engine's stream of a reply to a prompt of `prompt_tokens`, within `max_tokens`),
    ended where one of `stops` appears in the reply: the rest is not generated (the stream is closed,
    which frees its slot), and the reply's text ends before the marker, finish_reason "stop". A reply
    that is nothing but such markers is an error, never an answer or a memory: the model does not
    follow the chat template it was given. `count` gives a text's tokens (the reply's, as the stream
    was cut before its own count)."""
    if not stops:
        yield from items
        return
    text = StopText(stops)
    started = time.perf_counter()
    for item in items:
        if isinstance(item, Retrying):
            text = StopText(stops)
        elif isinstance(item, TextDelta):
            shown = text.feed(item.text)
            if shown:
                yield TextDelta(shown)
            if text.at is not None:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                reply = text.text[: text.at]
                if not reply.strip():
                    raise MemagentError(
                        f"The model wrote only its chat template's end marker ({text.text[text.at :][:20]!r}), no reply:"
                        " it does not follow the template memagent gave it.",
                        "Give the model's own template with --chat-template FILE (Jinja, or its tokenizer_config.json).",
                    )
                done = time.perf_counter()
                yield CompletionDone(reply, "stop", prompt_tokens, count(reply), max_tokens, 0, 0.0, done - started)
                return
            continue
        elif isinstance(item, CompletionDone):
            rest = text.text[text.shown :]
            if rest:
                yield TextDelta(rest)
            yield item
            return
        yield item
