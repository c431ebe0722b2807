"""Turning one user message into the exact prompt text and ids the model receives.

The reference server applied the model's own chat template (from its tokenizer config; in
a GGUF, `tokenizer.chat_template`) to a single user message, with the generation prompt and
no system message. We render that template the way Hugging Face does (sandboxed Jinja,
trim_blocks and lstrip_blocks). A GGUF without a template gets the Qwen2.5 rendering the
MemAgent models were trained with, unless the user gives one (`--chat-template FILE`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..errors import EXIT_USAGE, MemagentError
from .gguf import GGUFInfo
from .tokenizer import Tokenizer, encode_template

if TYPE_CHECKING:
    from jinja2 import Template

# What Qwen2.5's template renders for one user message: used when a GGUF has no template.
DEFAULT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message.role != 'system' %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Architectures whose instruct models use Qwen's ChatML, so the default template is theirs too.
QWEN_ARCHITECTURES = frozenset({"qwen2", "qwen2moe", "qwen3", "qwen3moe"})

# Stands in for the user message when rendering, to find which text the template added.
_SENTINEL = "\x00memagent-user-message\x00"


@lru_cache(maxsize=8)
def _compile(source: str) -> Template:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> NoReturn:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise MemagentError(f"The model's chat template does not parse: {exc}") from None


@dataclass
class ChatFormat:
    """A model's way of wrapping one user message as a prompt."""

    template: str
    bos_token: str = ""
    eos_token: str = ""
    add_bos_id: int | None = None  # prepend this id when the model wants a BOS and the template omits it
    is_default: bool = False  # True when neither the GGUF nor the user gave a template
    given: bool = False  # True when the user gave the template (--chat-template), over the GGUF's

    @classmethod
    def from_gguf(cls, info: GGUFInfo, template: str | None = None) -> "ChatFormat":
        """The GGUF's chat format; `template` (the user's, see read_template) replaces its template."""
        tokens = info.get("tokenizer.ggml.tokens") or []

        def text_of(key: str) -> str:
            i = info.get(key)
            return tokens[i].decode("utf-8", errors="replace") if isinstance(i, int) and 0 <= i < len(tokens) else ""

        add_bos = bool(info.get("tokenizer.ggml.add_bos_token", False))
        bos_id = info.get("tokenizer.ggml.bos_token_id")
        chosen = template if template is not None else info.chat_template
        return cls(
            template=chosen or DEFAULT_TEMPLATE,
            bos_token=text_of("tokenizer.ggml.bos_token_id"),
            eos_token=text_of("tokenizer.ggml.eos_token_id"),
            add_bos_id=bos_id if add_bos and isinstance(bos_id, int) else None,
            is_default=chosen is None,
            given=template is not None,
        )

    @property
    def stops(self) -> tuple[str, ...]:
        """The end markers of the template memagent falls back to, as text: a model that does not know
        them as tokens writes them out, and its reply ends there (engine.stopped_at)."""
        return ("<|im_end|>", "<|im_start|>") if self.is_default else ()

    def default_note(self, info: GGUFInfo) -> tuple[str, str] | None:
        """(level, message) for the user when the default template stands in for a missing one:
        "info" for a Qwen architecture (the template it was trained with), "warning" for any other,
        which may not follow ChatML at all."""
        if not self.is_default:
            return None
        if info.architecture in QWEN_ARCHITECTURES:
            return "info", "The model has no chat template; using Qwen2.5's, which the MemAgent models were trained with."
        return (
            "warning",
            f"The model ({info.architecture}) has no chat template; using Qwen2.5's ChatML, which it may not follow. "
            "Pass its own with --chat-template FILE (Jinja, or a tokenizer_config.json).",
        )

    def render(self, user_message: str) -> str:
        """The prompt text exactly as the model sees it."""
        from jinja2.exceptions import TemplateError

        try:
            return _compile(self.template).render(
                messages=[{"role": "user", "content": user_message}],
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise MemagentError(f"The model's chat template failed: {exc}") from None

    def encode(self, tokenizer: Tokenizer, user_message: str) -> list[int]:
        """Prompt ids, with control tokens honoured only in the template's own text."""
        full = self.render(user_message)
        around = self.render(_SENTINEL).split(_SENTINEL)
        if len(around) == 2 and around[0] + user_message + around[1] == full:
            pieces = [(around[0], True), (user_message, False), (around[1], True)]
        else:
            # A template that transforms the message (e.g. trims it): we cannot tell its
            # text from the user's, so the user message's control-token text is honoured.
            pieces = [(full, True)]
        ids = encode_template(tokenizer, pieces)
        if self.add_bos_id is not None and (not ids or ids[0] != self.add_bos_id):
            ids.insert(0, self.add_bos_id)
        return ids


def read_template(path: str | Path) -> str:
    """A chat template from a file: Jinja text, or JSON holding one under "chat_template" (a Hugging
    Face tokenizer_config.json or chat_template.json). Checked now: it must parse and render one user
    message, so a bad file is one line before any model loads."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise MemagentError(f"Cannot read --chat-template {path}: {reason}", exit_code=EXIT_USAGE) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None  # Jinja, as a .jinja file is (a template that happens to be a JSON string is odd)
    if isinstance(data, dict) or path.suffix.lower() == ".json":
        found = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(found, list):  # several named templates: the default one, as transformers picks
            found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
        if not isinstance(found, str):
            raise MemagentError(
                f'{path} holds no "chat_template" text',
                "Give a Jinja template file, or a tokenizer_config.json that has one",
                exit_code=EXIT_USAGE,
            )
        text = found
    probe = ChatFormat(text)
    try:
        rendered = probe.render(_SENTINEL)
    except MemagentError as exc:
        raise MemagentError(f"--chat-template {path}: {exc}", exit_code=EXIT_USAGE) from None
    if _SENTINEL not in rendered:
        raise MemagentError(
            f"--chat-template {path} does not show the user's message",
            "A chat template renders messages[0].content; check it is the model's template",
            exit_code=EXIT_USAGE,
        )
    return text
