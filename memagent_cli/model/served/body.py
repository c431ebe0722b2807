"""The body of a request to an OpenAI-compatible server: a chat request of one user message, or a raw
completion of a prompt memagent rendered (InfMem's); every sampler but temperature and top_p off (as
the references sampled), and under --schema a `response_format` in the form the server takes; and
the --verbose line that shows a request."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from ..engine import Sampling

# Every sampling parameter the servers know besides temperature and top_p, set to "off". A field a
# server does not know is ignored by it (vLLM logs a warning; SGLang, llama-server and
# llama-cpp-python drop it silently), so one body suits them all. Sent on every request because each
# server has defaults that are not off, and the reference sampled with nothing but temperature and
# top_p (reference/memagent-protocol.md, "Chunking and budgets").
NEUTRAL_SAMPLING: dict[str, Any] = {
    # Top-k off. No smaller value is "off" everywhere: llama-cpp-python rejects -1 (its schema has
    # ge=0), vLLM before 0.8 and SGLang reject 0 ("top_k must be -1 (disable), or at least 1"). A k
    # above any vocabulary is off on all of them: it is SGLang's own "whole vocabulary" value
    # (TOP_K_ALL = 1 << 30), vLLM treats k >= vocab size as no top-k, and llama.cpp clamps k to the
    # vocabulary. It replaces: llama-cpp-python 40, llama-server 40 (or --top-k, or the GGUF's
    # general.sampling.top_k), vLLM >= 0.8 and SGLang the model's generation_config (Qwen2.5: 20).
    "top_k": 1 << 30,
    # Min-p off: llama-cpp-python and llama-server default to 0.05; vLLM and SGLang take
    # generation_config's value when there is one.
    "min_p": 0.0,
    # The llama.cpp name of the repetition penalty: llama-cpp-python's server defaults to 1.1 (and,
    # unlike llama.cpp's own sampler, applies it at temperature 0 too); llama-server to 1.0, or
    # --repeat-penalty, or the GGUF's general.sampling.penalty_repeat.
    "repeat_penalty": 1.0,
    # The Hugging Face name of the same thing, for vLLM >= 0.8 and SGLang, which otherwise take it
    # from generation_config (Qwen2.5-Instruct's has 1.05).
    "repetition_penalty": 1.0,
    # OpenAI's own penalties, 0 by default everywhere, but llama-server's --presence-penalty and
    # --frequency-penalty change that default.
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    # llama-server only: samplers that are off by default but can be switched on for every request
    # by its command line (--typical, --mirostat, --dry-multiplier, --xtc-probability) or, for
    # mirostat and XTC, by the GGUF's general.sampling.* metadata.
    "typical_p": 1.0,
    "mirostat": 0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    # llama-cpp-python's name for mirostat (default 0, kept off in case a build changes that).
    "mirostat_mode": 0,
}


# How a request asks for JSON matching a schema (`response_format`). vLLM, SGLang and llama-server
# take OpenAI's form; llama-cpp-python's server (0.3.36) takes only its own, and answers OpenAI's with
# HTTP 500. An engine starts with OpenAI's and moves to the other for good when the server refuses it.
SCHEMA_FORMS = ("json_schema", "json_object")


def response_format(json_schema: str, form: str) -> dict[str, Any]:
    schema = json.loads(json_schema)
    if form == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    return {"type": "json_object", "schema": schema}


@dataclass(frozen=True)
class Request:
    """What one call asks a server: a chat reply to one user message (`raw` False, at
    /chat/completions) or the continuation of a rendered prompt (`raw`, at /completions)."""

    text: str  # the user message, or the whole prompt: also what is counted when a server sends no usage
    max_tokens: int
    sampling: Sampling
    raw: bool = False

    @property
    def path(self) -> str:
        return "completions" if self.raw else "chat/completions"

    def body(self, model: str, schema_form: str = SCHEMA_FORMS[0]) -> dict[str, Any]:
        if not self.raw:
            return chat_body(model, self.text, self.max_tokens, self.sampling, schema_form)
        return _sampled({"model": model, "prompt": self.text}, self.max_tokens, self.sampling)


def chat_body(
    model: str, user_message: str, max_tokens: int, sampling: Sampling, schema_form: str = SCHEMA_FORMS[0]
) -> dict[str, Any]:
    """The POST /chat/completions body: one user message, every sampling knob pinned."""
    body = _sampled({"model": model, "messages": [{"role": "user", "content": user_message}]}, max_tokens, sampling)
    if sampling.json_schema is not None:
        body["response_format"] = response_format(sampling.json_schema, schema_form)
    return body


def _sampled(body: dict[str, Any], max_tokens: int, sampling: Sampling) -> dict[str, Any]:
    body = {
        **body,
        "stream": True,
        "stream_options": {"include_usage": True},  # vLLM and SGLang send usage only when asked
        "max_tokens": max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        **NEUTRAL_SAMPLING,
    }
    if sampling.seed is not None:
        # llama.cpp seeds are 32-bit; the embedded engine masks the same way.
        body["seed"] = sampling.seed & 0xFFFFFFFF
    return body


def log_request(log: Callable[[str], None], url: str, body: dict[str, Any]) -> None:
    """The --verbose line for a request: its body, the message or prompt shown by its length only."""
    if "prompt" in body:
        shown = dict(body, prompt=f"<a prompt of {len(body['prompt'])} chars>")
    else:
        shown = dict(body, messages=f"<1 user message, {len(body['messages'][0]['content'])} chars>")
    log(f"POST {url} {json.dumps(shown)}")
