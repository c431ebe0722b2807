"""The settings of one MemAgent run, with the reference's values as defaults."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

FINAL_VARIANTS = ("boxed", "answer-is")


@dataclass(frozen=True)
class AgentConfig:
    chunk_tokens: int = 5000  # document tokens read per memory update (the reference's 5000)
    memory_tokens: int = 1024  # max new tokens of a memory update; also the memory's only bound
    answer_tokens: int = 1024  # max new tokens of the final answer
    question_tokens: int = 1024  # longest question accepted: the budget the models were trained with
    temperature: float = 0.7  # the reference's evaluation sampling; 0 means greedy
    top_p: float = 0.95  # nucleus sampling, applied after temperature as in the reference
    seed: int | None = None  # fixes sampling; step k uses seed + k so a resumed run repeats itself
    final: str = "boxed"  # final prompt: "boxed" (trained with) or "answer-is" (the paper's table)

    def __post_init__(self) -> None:
        for name in ("chunk_tokens", "memory_tokens", "answer_tokens", "question_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.temperature < 0:
            raise ValueError("temperature must be 0 or more")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.final not in FINAL_VARIANTS:
            raise ValueError(f"final must be one of {', '.join(FINAL_VARIANTS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
