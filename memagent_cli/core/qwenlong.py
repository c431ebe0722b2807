"""The QwenLong-L1.5 memory-agent protocol: its two prompts, its memory-and-plan rule, its answer.

QwenLong-L1.5 (Tongyi Lab, 2025) was trained with reinforcement learning on MemAgent's loop with
one addition: after each chunk the model writes its memory and a short plan for the next chunk,
and both come back as the previous memory. Its authors publish no code for this loop; the two
prompts below are the paper's Appendix D (see ../shared/reference/qwenlong-protocol.md). The PDF
fixes the words and the line order; what it cannot show was chosen here, each choice with its
reason, and tests keep the strings byte for byte against a rendering stored in tests/data.

Choices on the points the paper leaves open:
- Soft wraps: a printed line that breaks mid-sentence is joined with a space to the next; every
  numbered item, bullet, tag and heading keeps its own line, as printed. "may con-tain" (hyphenated
  across a line break) is "may contain".
- Blank lines: none. A blank line between blocks would be a visible gap in the PDF and there is
  none, whereas MemAgent's template (which has "\\n\\n" between blocks) prints its gaps.
- A trailing newline after the last line ("Updated memory:", "Your answer:"): kept, as in
  MemAgent's template. A PDF cannot show a trailing newline; the paper builds on MemAgent's code.
- Characters as printed: the bullets are "•" (U+2022) followed by a space; item 2's dash is an en
  dash (U+2013).
- The initial memory: MemAgent's "No previous memory", the paradigm the paper builds on.
- What the next step receives (the paper: "both <memory> and <plan>"): the reply after its last
  "</think>", from its first "<memory>" to the end of its last "</plan>", as the model wrote it
  (its own bytes, nothing re-wrapped). A reply without a <memory> block is kept whole, as
  MemAgent keeps any reply.
- The final answer's {memory}: the text inside the last <memory> block, without the plan. The final
  prompt wraps {memory} in <memory> tags itself, so the whole block would nest them, and the plan
  says what to look for next, which is no help once the reading is done.
- {question} in the final prompt: q_core, a newline, then q_inst when there is one (a single
  newline, as every line of these prompts is joined). The memory updates see q_core only.
- The answer: the final reply after its last "</think>", stripped. The prompt asks for no box;
  formatting instructions (q_inst) say what the answer looks like.
"""

from __future__ import annotations

import re

INITIAL_MEMORY = "No previous memory"

MEMORY_PROMPT = (
    "<problem>\n"
    "{question}\n"
    "</problem>\n"
    "<previous_memory>\n"
    "{memory}\n"
    "</previous_memory>\n"
    "<section>\n"
    "{chunk}\n"
    "</section>\n"
    "You are an assistant equipped with information memory capabilities. Based on the provided <problem>,"
    " <previous_memory> (both <memory> and <plan>), and a <section> of a long article, you will traverse the"
    " sections of the article in the original order. Carefully read each section and update the memory with new"
    " information that helps answer the problem, while retaining all relevant details from the previous memory."
    " After outputting the updated memory, do some simple planning to record the plan you need to answer the"
    " question, in addition to the existing memory.\n"
    "[Important Notes]\n"
    "1. You cannot see the full article; only focus on information memorization. You do not need to answer the"
    " <problem> directly at this stage.\n"
    "2. Ensure the memory is self-contained \u2013 meaning the final memory alone, without additional context,"
    " should contain sufficient information to fully answer the <problem>.\n"
    "3. Recognize that both the <previous_memory>.<memory> and <previous_memory>.<plan> may contain inaccuracies"
    " or be suboptimal for the current task. Therefore,\n"
    "\u2022 Pay close attention to the <problem>, critically evaluate the existing memory and plan, and make"
    " appropriate updates and adjustments to the memory based on the information found in the current"
    " <section>.\n"
    "\u2022 Your primary directive is to serve the <problem>, even if it means correcting prior memory or plans.\n"
    "4. This is a strictly one-way reading process. You cannot go back to re-read previous sections. Therefore,\n"
    "\u2022 when you identify information to be extracted for the memory, you must directly and completely"
    " integrate the target content into the <memory> section.\n"
    "\u2022 Do not simply mark or reference key information; ensure the full, relevant segment is incorporated.\n"
    "5. Carefully evaluate whether the extracted memory information truly serves the target requirement of the"
    " <problem>.\n"
    "\u2022 Avoid being misled by content that contains similar entities or semantic information but does not"
    " directly contribute to answering the <problem>.\n"
    "\u2022 Prioritize factual relevance and contribution to the overall solution.\n"
    "[Output Format Example]\n"
    "Updated memory:\n"
    "<memory>\n"
    "(Your updated and consolidated memory here. Ensure it is self-contained and comprehensive for answering"
    " the <problem>.)\n"
    "</memory>\n"
    "<plan>\n"
    "(Your brief plan for the next stage of memory extraction, indicating what type of information you will"
    " look for in subsequent sections related to the <problem>.)\n"
    "</plan>\n"
    "[End Example]\n"
    "Updated memory:\n"
)

FINAL_PROMPT = (
    "You are presented with a problem and a previous memory. Please answer the problem based on the previous"
    " memory.\n"
    "<problem>\n"
    "{question}\n"
    "</problem>\n"
    "<memory>\n"
    "{memory}\n"
    "</memory>\n"
    "Your answer:\n"
)

QUESTION_JOIN = "\n"  # between q_core and q_inst in the final prompt

# The paper's memory-RL budgets: 32K-token chunks, a memory of up to 15K tokens. A reply is the
# model's reasoning and then its memory, so the reply's bound is the memory's. The answer is
# reasoned too: 8K leaves it room to think.
CHUNK_TOKENS = 32 * 1024
MEMORY_TOKENS = 15 * 1024
ANSWER_TOKENS = 8 * 1024

THINK_END = "</think>"
_MEMORY = re.compile(r"<memory>\n?(.*?)\n?(?:</memory>|\Z)", re.S)
_PLAN = re.compile(r"<plan>\n?(.*?)\n?(?:</plan>|\Z)", re.S)


def _after_thinking(reply: str) -> str:
    return reply.rpartition(THINK_END)[2]  # the whole reply when it has no `</think>`


def reasoning(reply: str) -> tuple[str, str]:
    """(reasoning, the rest) of a reply, whole or streamed so far: everything before `</think>` is
    reasoning (the chat template opened it), the rest what the reply is for."""
    before, end, after = reply.rpartition(THINK_END)
    return (before, after) if end else (reply, "")


def next_memory(reply: str) -> str:
    """The memory and plan blocks of a reply, as written; the whole reply when it has no <memory>."""
    text = _after_thinking(reply)
    start = text.find("<memory>")
    if start < 0:
        return text
    end = text.rfind("</plan>")
    return text[start : end + len("</plan>")] if end > start else text[start:]


def parts(memory: str) -> tuple[str, str]:
    """(memory, plan) of a stored memory: the inside of its last <memory> and <plan> blocks; the
    whole text and no plan when it has no <memory> block (the first step's, or a reply without one)."""
    found = _MEMORY.findall(memory)
    if not found:
        return memory, ""
    plans = _PLAN.findall(memory)
    return found[-1], plans[-1] if plans else ""


def question_text(core: str, instructions: str) -> str:
    return core + QUESTION_JOIN + instructions if instructions else core


def extract_answer(reply: str) -> tuple[str, bool]:
    """The final reply after its reasoning, stripped; found when anything is left."""
    answer = _after_thinking(reply).strip()
    return (answer, True) if answer else (reply.strip(), False)
