"""Memory-agent protocols as a choice: what each model family was trained to read and write.

A protocol owns its prompts and initial memory, its default budgets, how a reply becomes the next
memory, what of the memory the final prompt gets, and how the answer is read. The loop (agent.py),
chunking, traces, evidence, the views and eval are the same for every protocol.

Three are known: `memagent` (the RL-MemoryAgent models, memagent.py), `qwenlong` (QwenLong-L1.5,
qwenlong.py) and `infmem` (InfMem, infmem.py: its own loop, infmem_loop.py, with a planner, a search
and early stopping). Which one a run uses: the `--protocol` option; else the model's (its catalog
entry, or "qwenlong" or "infmem" in its GGUF's name or file name, or the served model's name); else
`memagent`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import MemagentError
from . import infmem as infmem_strings
from . import memagent as memagent_strings
from . import qwenlong as qwenlong_strings

NAMES = ("memagent", "qwenlong", "infmem")
DEFAULT = "memagent"


@dataclass(frozen=True)
class Protocol:
    """One protocol; `memagent` itself (this class's methods are MemAgent's rules)."""

    name: str = "memagent"
    initial_memory: str = memagent_strings.INITIAL_MEMORY
    chunk_tokens: int = 5000  # the reference's budgets: see AgentConfig
    memory_tokens: int = 1024
    answer_tokens: int = 1024
    temperature: float = 0.7  # the reference evaluation's sampling
    top_p: float = 0.95
    has_plan: bool = False  # whether a memory carries a plan beside it (shown apart)
    extra_step_tokens: int = 0  # context a step needs beyond prompt, chunk and memory (InfMem's)
    # InfMem's shape of a run: the whole input read and indexed first, a planner call before each
    # step (two calls a step), a run that may end early (its loop is infmem_loop.run_infmem)
    planner: bool = False
    extra_final_tokens: int = 0
    # settings a run keeps that this protocol does not use (early_stop is InfMem's; final, the
    # final prompt's variant, MemAgent's): a run's pages leave them out (config.shown_settings)
    unused_settings: tuple[str, ...] = ("early_stop",)

    def memory_prompt(self, question: str, memory: str, chunk: str) -> str:
        return memagent_strings.memory_prompt(question, memory, chunk)

    def final_prompt(self, question: str, memory: str, variant: str = "boxed", instructions: str = "") -> str:
        """The answer's prompt; `instructions` (how to format the answer) follow the question
        on a new line, here only: the memory updates never see them."""
        problem = question.strip() + ("\n" + instructions.strip() if instructions.strip() else "")
        return memagent_strings.final_prompt(problem, memory, variant)

    def next_memory(self, reply: str) -> str:
        return memagent_strings.next_memory(reply)

    def parts(self, memory: str) -> tuple[str, str]:
        """(memory, plan): what the views show apart. MemAgent's memory has no plan."""
        return memory, ""

    def reasoning(self, reply: str) -> tuple[str, str]:
        """(reasoning, the rest) of a reply, whole or streamed so far: what the views show apart.
        MemAgent's models write no reasoning."""
        return "", reply

    def extract_answer(self, reply: str, variant: str = "boxed") -> tuple[str, bool]:
        return memagent_strings.extract_answer(memagent_strings.next_memory(reply), variant)


@dataclass(frozen=True)
class QwenLong(Protocol):
    """QwenLong-L1.5's: memory and plan, 32K chunks, reasoning before every reply."""

    name: str = "qwenlong"
    initial_memory: str = qwenlong_strings.INITIAL_MEMORY
    chunk_tokens: int = qwenlong_strings.CHUNK_TOKENS
    memory_tokens: int = qwenlong_strings.MEMORY_TOKENS
    answer_tokens: int = qwenlong_strings.ANSWER_TOKENS
    has_plan: bool = True
    unused_settings: tuple[str, ...] = ("early_stop", "final")

    def memory_prompt(self, question: str, memory: str, chunk: str) -> str:
        return memagent_strings.fill(qwenlong_strings.MEMORY_PROMPT, question=question.strip(), memory=memory, chunk=chunk)

    def final_prompt(self, question: str, memory: str, variant: str = "boxed", instructions: str = "") -> str:
        # `variant` is MemAgent's final-instruction choice; this prompt has none.
        problem = qwenlong_strings.question_text(question.strip(), instructions.strip())
        return memagent_strings.fill(qwenlong_strings.FINAL_PROMPT, question=problem, memory=self.parts(memory)[0])

    def next_memory(self, reply: str) -> str:
        return qwenlong_strings.next_memory(reply)

    def parts(self, memory: str) -> tuple[str, str]:
        return qwenlong_strings.parts(memory)

    def reasoning(self, reply: str) -> tuple[str, str]:
        return qwenlong_strings.reasoning(reply)

    def extract_answer(self, reply: str, variant: str = "boxed") -> tuple[str, bool]:
        return qwenlong_strings.extract_answer(reply)


@dataclass(frozen=True)
class InfMem(Protocol):
    """InfMem's: a planner and a search before each chunk, thinking before every reply (two stages
    under a budget), and a run that ends at the planner's third STOP in a row. The loop is its own
    (infmem_loop.py); these methods are what the rest of memagent asks of every protocol."""

    name: str = "infmem"
    initial_memory: str = infmem_strings.INITIAL_MEMORY
    chunk_tokens: int = 5000
    memory_tokens: int = 1024  # stage two's budget; stage one (the thinking) has its own 1024
    answer_tokens: int = 1024
    temperature: float = 0.0  # greedy, as every benchmark script of the reference sets it
    unused_settings: tuple[str, ...] = ("final",)
    top_p: float = 1.0
    # what a memory write holds beyond MemAgent's: the 4 retrieved units and stage one's thinking
    extra_step_tokens: int = infmem_strings.RESULTS * infmem_strings.UNIT_TOKENS + infmem_strings.THINKING_TOKENS
    extra_final_tokens: int = infmem_strings.THINKING_TOKENS
    planner: bool = True

    def memory_prompt(self, question: str, memory: str, chunk: str) -> str:
        return infmem_strings.MEMORY_PROMPT.format(prompt=question.strip(), retrieve="", chunk=chunk, memory=memory)

    def final_prompt(self, question: str, memory: str, variant: str = "boxed", instructions: str = "") -> str:
        # `variant` is MemAgent's final-instruction choice; this prompt has its own ("the answer is").
        problem = question.strip() + ("\n" + instructions.strip() if instructions.strip() else "")
        return infmem_strings.FINAL_PROMPT.format(prompt=problem, memory=memory)

    def next_memory(self, reply: str) -> str:
        return infmem_strings.solution(reply)

    def reasoning(self, reply: str) -> tuple[str, str]:
        return qwenlong_strings.reasoning(reply)

    def extract_answer(self, reply: str, variant: str = "boxed") -> tuple[str, bool]:
        """The text after the last "the answer is" of the reply's answer (as the reference scores
        it); the whole answer, not found, when the phrase is missing."""
        text = infmem_strings.solution(reply)
        found = memagent_strings.extract_answer_is(text)
        return (found, True) if found is not None else (text.strip(), False)


PROTOCOLS: dict[str, Protocol] = {"memagent": Protocol(), "qwenlong": QwenLong(), "infmem": InfMem()}

# A follow-up question (`ask -c`, `chat`). The published agents were trained with the question in
# {problem} at every step, so a follow-up is a new reading whose problem says what it follows: the
# earlier turns (question and answer, oldest first: the most recent that fit the question budget),
# then the new question. Every protocol's prompts take it where they take a question; nothing else
# in them changes. The turns' texts are as asked and as answered.
FOLLOW_UP = "Earlier questions about these documents, and their answers:\n{turns}\n\nThe question now: {question}"
FOLLOW_UP_TURN = "Question: {question}\nAnswer: {answer}"


def follow_up(question: str, turns: Sequence[tuple[str, str]], fits: Callable[[str], bool] = lambda _: True) -> str:
    """The problem of a follow-up: `question` after the most recent of `turns` (question, answer)
    whose problem `fits` (the question budget), oldest first; the question alone where no turn fits."""
    for start in range(len(turns)):
        kept = turns[start:]
        told = "\n\n".join(memagent_strings.fill(FOLLOW_UP_TURN, question=q.strip(), answer=a.strip()) for q, a in kept)
        problem = memagent_strings.fill(FOLLOW_UP, turns=told, question=question)
        if fits(problem):
            return problem
    return question


def get(name: str) -> Protocol:
    """The protocol of that name ("" is the default); ValueError for an unknown one."""
    try:
        return PROTOCOLS[name or DEFAULT]
    except KeyError:
        raise ValueError(f"protocol must be one of {', '.join(NAMES)}") from None


def guess(*names: str | Path | None) -> str:
    """The protocol a model's names make clear (its GGUF name, file name, served name); '' if none."""
    for name in names:
        plain = re.sub(r"[^a-z0-9]", "", Path(str(name)).name.lower()) if name else ""
        for known in ("qwenlong", "infmem"):
            if known in plain:
                return known
    return ""


def of_model(path: str | None, *names: str | None) -> str:
    """The protocol a model was trained on: its catalog entry's when it was pulled under an alias,
    else what its names make clear (the GGUF's general.name, its file name, a served model's
    name), else the default. `path`: the GGUF, when there is one."""
    if path:
        from ..install.registry import catalog_entry
        from ..model.gguf import read_gguf

        entry = catalog_entry(path)
        if entry is not None:
            return entry.protocol
        try:
            gguf_name = str(read_gguf(Path(path)).get("general.name") or "")
        except MemagentError:  # an unreadable file is reported when it is loaded, not here
            gguf_name = ""
        names = (gguf_name, path, *names)
    return guess(*names) or DEFAULT
