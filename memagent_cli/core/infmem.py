"""The InfMem protocol's strings and its control rules (arXiv 2602.02704; the authors' evaluation
loop, `taskutils/memory_eval/utils/infmem.py` at 4f4de32), as ../shared/reference/infmem-protocol.md
states them: the planner prompt under Qwen-Agent's tool system message, the retrieval history, how a
planner reply is read (STOP, function calls and their defaults), the STOP streak that ends a run
early, the retrieved block, the memory-write and final prompts, the thinking budget's forced close,
and how a memory and an answer are taken out of a reply.

These strings are an interface: the model was trained on them, so they are kept byte for byte, typos
included ("reetrieved", "exlore", "the given section have two parts"); tests/test_infmem.py checks
each against the reference and its SHA-256. Pure text and rules: no engine, no index (the search is
BM25 over 500-token units, the reference's rank_bm25 at its defaults).

Choices where the reference is open (its rule 4), argued here and tested:
- a `query` that is not a string (the reference crashes on `.lower()`): the question is searched;
- the STOP test reads the whole reply, thinking included, as the reference does (a stricter test
  would change the control loop the model was trained in);
- several calls in one reply: every one is searched and logged; the last one's passages are written.

The scored answer is read as MemAgent's "answer is" variant reads it (memagent.extract_answer_is).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .memagent import THINK_END

EARLY_STOP = 3  # STOP replies in a row that end the reading (the paper's evaluation)
UNIT_TOKENS = 500  # retrieval units: the input's ids cut every 500 tokens
RESULTS = 4  # units a search writes into the memory update (`top_k` is shown, not used)
DEFAULT_TOP_K = 8
THINKING_TOKENS = 1024  # stage one's budget; stage two (always) has RECURRENT_MAX_NEW as well
ANSWER_TOKENS = 1024
INITIAL_MEMORY = "No previous memory"
TOOL = "retrievesearch"
# Stage one without "</think>": its text, right-stripped, then this (not MemAgent's Qwen3 sentence).
FORCED_CLOSE = "\n\nConsidering the limited time, I must stop thinking now.\n</think>\n\n"

# The tool as Qwen-Agent registers it; its parameters are shown as json.dumps(..., ensure_ascii=False)
# writes them (separators ", " and ": ", keys in this order).
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Concise search query focusing on key entities / concepts."},
        "top_k": {
            "type": "integer",
            "description": "Number of chunks to retrieve (3-20).",
            "minimum": 3,
            "maximum": 20,
            "default": 8,
        },
    },
    "required": ["query"],
}
# Qwen-Agent's function-call system message (lang en, parallel calls, function_choice auto), ending in
# "![](url)" with no newline: the chat template closes it with <|im_end|> directly.
TOOL_SYSTEM = (
    "# Tools\n\n## You have access to the following tools:\n\n"
    f"### {TOOL}\n\n"
    f"{TOOL}: Search over pre-indexed context chunks using BM25. Parameters: "
    f"{json.dumps(TOOL_PARAMETERS, ensure_ascii=False)} Format the arguments as a JSON object.\n\n"
    "## Insert the following command in your reply when you need to call N tools in parallel:\n\n"
    f"\u273fFUNCTION\u273f: The name of tool 1, should be one of [{TOOL}]\n"
    "\u273fARGS\u273f: The input of tool 1\n"
    "\u273fFUNCTION\u273f: The name of tool 2\n"
    "\u273fARGS\u273f: The input of tool 2\n"
    "...\n"
    "\u273fFUNCTION\u273f: The name of tool N\n"
    "\u273fARGS\u273f: The input of tool N\n"
    "\u273fRESULT\u273f: The result of tool 1\n"
    "\u273fRESULT\u273f: The result of tool 2\n"
    "...\n"
    "\u273fRESULT\u273f: The result of tool N\n"
    "\u273fRETURN\u273f: Reply based on tool results. Images need to be rendered as ![](url)"
)
# How the reference finds calls (re.DOTALL, every match), inside the thinking too.
CALL = re.compile(
    "\u273fFUNCTION\u273f:\\s*([^\\n]+)\\s*\u273fARGS\u273f:\\s*([^\u273f]+?)"
    "(?=\u273fRESULT\u273f|\u273fRETURN\u273f|\u273fFUNCTION\u273f|$)",
    re.DOTALL,
)

PLANNER_PROMPT = (
    "\n"
    "You are a Retrieval Planner.  \n"
    "\n"
    "Your ONLY task is to decide whether to perform another retrieval using `retrievesearch`, or STOP "
    "retrieving.\n"
    "\n"
    "You MUST NOT answer the QUESTION.  \n"
    "Another model will use MEMORY to answer later.\n"
    "\n"
    "Guidelines:\n"
    "- Retrieval is cheap. Unless MEMORY clearly contains all essential information, you are encouraged "
    "to retrieve.\n"
    "- You may retrieve multiple times. At each step, refine your search direction.\n"
    "- Avoid repeating any previous queries in RETRIEVAL_HISTORY (unless meaningfully refined).\n"
    "\n"
    "When deciding whether to retrieve again:\n"
    "1. Break the QUESTION into specific sub-questions or information needs.\n"
    "2. Compare these needs with what MEMORY already contains.\n"
    "3. Identify which facts are still missing, uncertain, or incomplete.\n"
    "4. If something important is missing, design a NEW search query focused only on that missing "
    "information.\n"
    "   - You may explore related clues hinted in MEMORY.\n"
    "   - Queries should be concise, specific, and actionable.\n"
    "5. If MEMORY already contains all necessary information, choose to STOP.\n"
    "\n"
    "If you choose retrieval, you MUST output a function call to `retrievesearch` with:\n"
    "- a new `query` (different from RETRIEVAL_HISTORY unless refined),\n"
    "- and a `top_k` suited to your confidence (small: focused; large: broad exploration).\n"
    "- In early retrieval steps, you may exlore more documents.\n"
    "- In later steps, focus on refining MEMORY.\n"
    "\n"
    "\n"
    "ORIGINAL QUESTION:\n"
    "{prompt}\n"
    "\n"
    "<retrieval_history>\n"
    "{retrieval_history}\n"
    "</retrieval_history>\n"
    "\n"
    "\n"
    "\n"
    "CURRENT MEMORY:\n"
    "{memory}\n"
    "\n"
)

MEMORY_PROMPT = (
    "You are presented with a problem, a section of an article that may contain the answer to the "
    "problem, and a previous memory. Please read the provided section carefully and update the memory "
    "with the new information that helps to answer the problem.\n"
    "\n"
    "the given section have two parts. One is reetrieved chunk, which are retrieved by given question. "
    "another is the recurrent chunk which are given recurrently. Both chunks might contain useful "
    "information, the retrieved chunk might have higher chance.\n"
    "\n"
    "\n"
    "\n"
    "<problem>\n"
    "{prompt}\n"
    "</problem>\n"
    "\n"
    "<retrieved_chunk>\n"
    "{retrieve}\n"
    "</retrieved_chunk>\n"
    "\n"
    "<recurrent_chunk>\n"
    "{chunk}\n"
    "</recurrent_chunk>\n"
    "\n"
    "<memory>\n"
    "{memory}\n"
    "</memory>\n"
    "\n"
    "\n"
    "Updated memory:\n"
)

FINAL_PROMPT = (
    "You are presented with a problem and a previous memory. Please answer the problem based on the "
    'previous memory and format your response as follows "Therefore, the answer is (insert answer '
    'here)".\n'
    "\n"
    "<problem> \n"
    "{prompt}\n"
    "</problem>\n"
    "\n"
    "<memory>\n"
    "{memory}\n"
    "</memory>\n"
    "\n"
    "Your answer:\n"
)


def chat(system: str | None, user: str) -> str:
    """Qwen3's template, thinking on, no tools passed: nothing after the assistant header."""
    turns = f"<|im_start|>system\n{system}<|im_end|>\n" if system is not None else ""
    return f"{turns}<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def history_text(step: int, steps: int, history: list[tuple[str, object]]) -> str:
    """The retrieval history the planner sees at `step` of `steps`: the header line and its
    newline, then one line a search, the query as Python's repr() writes it."""
    lines = [f"Step {i}: query={query!r}, top_k={top_k}" for i, (query, top_k) in enumerate(history, 1)]
    return f"Current retrieval step: {step}  Maximum allowed retrieval steps: {steps}\n" + "\n".join(lines)


def planner_text(question: str, history: str, memory: str) -> str:
    """The planner's whole prompt, as text for a raw completion."""
    return chat(TOOL_SYSTEM, PLANNER_PROMPT.format(prompt=question, retrieval_history=history, memory=memory))


@dataclass
class Plan:
    """What a planner reply said: STOP, or the searches its calls ask for (query, top_k as given)."""

    stop: bool
    calls: int = 0  # every call, whatever its name
    searches: list[tuple[str, object]] = field(default_factory=list)


def read_plan(reply: str, question: str) -> Plan:
    """A planner reply read as the reference reads it: "STOP" anywhere (thinking included) is a STOP
    with no calls; else every call, a `retrievesearch` call's JSON arguments giving the query (the
    question when absent, unreadable or not text) and top_k (8 when absent)."""
    if "STOP" in reply:
        return Plan(stop=True)
    plan = Plan(stop=False)
    for name, raw in CALL.findall(reply):
        plan.calls += 1
        if name.strip() != TOOL:
            continue
        arguments = raw.strip()
        if arguments.startswith("{"):
            arguments = arguments[: arguments.rfind("}") + 1]
        elif arguments.startswith("```"):
            end = arguments.rfind("\n```")
            arguments = arguments[: end + 4] if end >= 0 else arguments
        query: object = question
        top_k: object = DEFAULT_TOP_K
        try:
            args = json.loads(arguments)
        except ValueError:
            args = None
        if isinstance(args, dict):
            query, top_k = args.get("query", question), args.get("top_k", DEFAULT_TOP_K)
        plan.searches.append((query if isinstance(query, str) else question, top_k))
    return plan


def stop_streak(streak: int, plan: Plan) -> int:
    """The STOP counter after a reply: a reply that is not a STOP resets it; a STOP, or a reply
    with no call at all, adds one (so a call-less reply can open a streak, never extend one)."""
    if not plan.stop:
        streak = 0
    if plan.stop or plan.calls == 0:
        streak += 1
    return streak


def retrieved_block(units: list[str]) -> str:
    """The passages a search found, best first, as the memory update shows them (raw unit text)."""
    return "\n\n".join(f"[Retrieved #{rank}] {text}" for rank, text in enumerate(units, 1))


def memory_text(question: str, retrieved: str, chunk: str, memory: str) -> str:
    return chat(None, MEMORY_PROMPT.format(prompt=question, retrieve=retrieved, chunk=chunk, memory=memory))


def final_text(question: str, memory: str) -> str:
    return chat(None, FINAL_PROMPT.format(prompt=question, memory=memory))


def closed_thinking(stage_one: str) -> str:
    """Stage one's text as stage two continues it: closed by force when its budget ran out first."""
    return stage_one if THINK_END in stage_one else stage_one.rstrip() + FORCED_CLOSE


def reply_of(stage_one: str, stage_two: str) -> str:
    """The whole reply of a two-stage generation (the strip can glue two words: reproduced)."""
    return (stage_one + stage_two.strip()).strip()


def solution(reply: str) -> str:
    """A memory or an answer: the text after the last "</think>", stripped; else the reply as it is."""
    return reply.rsplit(THINK_END, 1)[1].strip() if THINK_END in reply else reply


def units_of(ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> list[str]:
    """The retrieval units: the whole input's ids cut every UNIT_TOKENS tokens, each decoded alone.
    Rule 1.2 says both "inside each chunk" and "the whole id list cut every 500 tokens": at the
    protocol's 5,000-token chunks they are the same (10 units a chunk). Where --chunk-tokens is not
    a multiple of 500 they part, and memagent keeps every unit 500 tokens (so one may run over two
    chunks): the planner was trained to read four passages of that size beside a chunk, where cutting
    inside 128-token chunks would give it 128-token fragments, and a 2,048-token chunk a 48-token one."""
    return [decode(ids[at : at + UNIT_TOKENS]) for at in range(0, len(ids), UNIT_TOKENS)]


class Search:
    """BM25 over the units, as the reference builds it for each question: rank_bm25's BM25Okapi at
    its defaults (k1 1.5, b 0.75, epsilon 0.25), each unit and each query as `text.lower().split()`."""

    def __init__(self, units: Sequence[str]):
        from rank_bm25 import BM25Okapi

        if not units:
            raise ValueError("no units to search")  # BM25Okapi divides by the corpus size
        self.units = list(units)
        self._bm25 = BM25Okapi([unit.lower().split() for unit in self.units])

    def top(self, query: str, n: int = RESULTS) -> list[int]:
        """The indexes of the `n` best units for `query`, best first. Ties go to the earlier unit:
        the reference's numpy argsort is unstable (its order of equal scores depends on the machine),
        so this is the one place memagent cannot match it, and it is stable instead."""
        import numpy as np

        scores = self._bm25.get_scores(query.lower().split())
        return [int(i) for i in np.argsort(-scores, kind="stable")[:n]]
