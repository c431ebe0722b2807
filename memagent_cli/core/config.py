"""The settings of one memory-agent run, with the MemAgent reference's values as defaults.

The budgets' defaults are the memagent protocol's; `with_protocol` gives a protocol's own
(qwenlong reads 32K-token chunks; infmem samples greedily) to the budgets and sampling a user did
not set."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from .protocols import get as get_protocol
from .schema import AnswerSchema

FINAL_VARIANTS = ("boxed", "answer-is")
BUDGETS = ("chunk_tokens", "memory_tokens", "answer_tokens")
SAMPLING = ("temperature", "top_p")  # like the budgets, the protocol's when not given


@dataclass(frozen=True)
class AgentConfig:
    chunk_tokens: int = 5000  # document tokens read per memory update (the reference's 5000)
    memory_tokens: int = 1024  # max new tokens of a memory update; also the memory's only bound
    answer_tokens: int = 1024  # max new tokens of the final answer
    question_tokens: int = 1024  # longest question accepted: the budget the models were trained with
    temperature: float = 0.7  # the reference's evaluation sampling; 0 means greedy
    top_p: float = 0.95  # nucleus sampling, applied after temperature as in the reference
    seed: int | None = None  # fixes sampling; step k uses seed + k so a resumed run repeats itself
    final: str = "boxed"  # memagent's final prompt: "boxed" (trained with) or "answer-is" (the paper's table)
    protocol: str = "memagent"  # the prompts and memory rule the model was trained on: protocols.NAMES
    instructions: str = ""  # how to format the answer (q_inst): added to the final prompt only
    # --schema: the JSON Schema of the answer object, as AnswerSchema.to_config() writes it; "" for a
    # text answer. The final answer is generated under it and read into data (core/schema.py).
    answer_schema: str = ""
    answer_schema_multi: bool = False  # --schema-multi: the answer is a list of such objects
    early_stop: int = 3  # infmem: the planner's STOP replies in a row that end the reading (--early-stop)

    def __post_init__(self) -> None:
        for name in ("chunk_tokens", "memory_tokens", "answer_tokens", "question_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.early_stop < 1:
            raise ValueError("early_stop must be at least 1")
        if self.temperature < 0:
            raise ValueError("temperature must be 0 or more")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.final not in FINAL_VARIANTS:
            raise ValueError(f"final must be one of {', '.join(FINAL_VARIANTS)}")
        get_protocol(self.protocol)  # raises for an unknown one

    @classmethod
    def with_protocol(cls, protocol: str, **settings: Any) -> "AgentConfig":
        """A config for `protocol` whose budgets and sampling not in `settings` (or None there) are
        the protocol's."""
        chosen = get_protocol(protocol)
        for name in BUDGETS + SAMPLING:
            if settings.get(name) is None:
                settings[name] = getattr(chosen, name)
        return cls(protocol=chosen.name, **settings)

    def schema(self) -> AnswerSchema | None:
        return AnswerSchema.from_config(self.answer_schema, self.answer_schema_multi) if self.answer_schema else None

    def question_asked(self, given: str) -> str:
        """The question a run asks: `given`, stripped; none given under a schema (--schema without a
        question), the one its fields make."""
        question = given.strip()
        schema = self.schema()
        return schema.question() if not question and schema is not None else question

    def final_instructions(self) -> str:
        """What the final prompt adds to the question: --instructions, then the schema's."""
        schema = self.schema()
        return "\n".join(part for part in (self.instructions.strip(), schema.instructions() if schema else "") if part)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Settings at a value that does nothing: a page shows them only when they were set.
_UNSET = {"instructions": "", "answer_schema": ""}


def shown_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run's pages show (traces show, its HTML and Markdown): those its protocol and
    options use. Left out: what its protocol does not read (early_stop outside InfMem, the final
    variant outside MemAgent), options at a value that does nothing, and schema_multi without a
    schema. Its JSON record keeps them all."""
    try:
        unused = get_protocol(str(settings.get("protocol") or "memagent")).unused_settings
    except ValueError:  # a protocol this version does not know: show everything
        unused = ()
    out = {k: v for k, v in settings.items() if k not in unused and not (k in _UNSET and v == _UNSET[k])}
    if not (out.get("answer_schema") and out.get("answer_schema_multi")):
        out.pop("answer_schema_multi", None)
    return out
