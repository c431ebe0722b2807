"""Turning one user message into the exact prompt text and ids the model receives.

The reference server applied the model's own chat template (from its tokenizer config; in
a GGUF, `tokenizer.chat_template`) to a single user message, with the generation prompt and
no system message. We render that template the way Hugging Face does (sandboxed Jinja,
trim_blocks and lstrip_blocks). A GGUF without a template gets the Qwen2.5 rendering the
MemAgent models were trained with.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, NoReturn

from ..errors import MemagentError
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
    is_default: bool = False  # True when the GGUF had no template of its own

    @classmethod
    def from_gguf(cls, info: GGUFInfo) -> "ChatFormat":
        tokens = info.get("tokenizer.ggml.tokens") or []

        def text_of(key: str) -> str:
            i = info.get(key)
            return tokens[i].decode("utf-8", errors="replace") if isinstance(i, int) and 0 <= i < len(tokens) else ""

        add_bos = bool(info.get("tokenizer.ggml.add_bos_token", False))
        bos_id = info.get("tokenizer.ggml.bos_token_id")
        template = info.chat_template
        return cls(
            template=template or DEFAULT_TEMPLATE,
            bos_token=text_of("tokenizer.ggml.bos_token_id"),
            eos_token=text_of("tokenizer.ggml.eos_token_id"),
            add_bos_id=bos_id if add_bos and isinstance(bos_id, int) else None,
            is_default=template is None,
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
