"""The MemAgent protocol: prompt texts, the memory rule and answer extraction.

The published RL-MemoryAgent checkpoints were trained on exactly these strings
(arXiv 2507.02259, the authors' code). They are an interface, not prose: a changed byte is
a different input distribution for the model. Tests compare them byte for byte with the
reference in shared/reference/memagent-protocol.md.
"""

from __future__ import annotations

import re

INITIAL_MEMORY = "No previous memory"

# Note the single space after "<problem>" and the newline after "Updated memory:".
MEMORY_PROMPT = """You are presented with a problem, a section of an article that may contain the answer to the problem, and a previous memory. Please read the provided section carefully and update the memory with the new information that helps to answer the problem. Be sure to retain all relevant details from the previous memory while adding any new, useful information.

<problem> 
{problem}
</problem>

<memory>
{memory}
</memory>

<section>
{chunk}
</section>

Updated memory:
"""

_FINAL_PROMPT = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory {instruction}

<problem> 
{problem}
</problem>

<memory>
{memory}
</memory>

Your answer:
"""

# The two final-answer instructions: "boxed" is the one the models were trained with,
# "answer-is" the one the authors' benchmark runner (and the paper's table) used.
FINAL_INSTRUCTIONS = {
    "boxed": "and put the answer in \\boxed{}.",
    "answer-is": 'and format your response as follows "Therefore, the answer is (insert answer here)".',
}

# Multi-document inputs were laid out like this in the training data (i counts from 1).
DOCUMENT_HEADER = "Document {index}:\n{title}\n"
DOCUMENT_SEPARATOR = "\n\n"

THINK_END = "</think>"


def fill(template: str, **fields: str) -> str:
    # str.format would choke on braces inside documents; replace each field exactly once,
    # in a single pass so text inserted for one field is never scanned for another.
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in fields))
    return pattern.sub(lambda m: fields[m.group(0)[1:-1]], template)


def memory_prompt(problem: str, memory: str, chunk: str) -> str:
    return fill(MEMORY_PROMPT, problem=problem.strip(), memory=memory, chunk=chunk)


def final_prompt(problem: str, memory: str, variant: str = "boxed") -> str:
    if variant not in FINAL_INSTRUCTIONS:
        raise ValueError(f"unknown final prompt variant {variant!r}")
    return fill(_FINAL_PROMPT, instruction=FINAL_INSTRUCTIONS[variant], problem=problem.strip(), memory=memory)


def next_memory(reply: str) -> str:
    """The whole reply becomes the memory, minus any reasoning before the last </think>."""
    if THINK_END in reply:
        return reply.rsplit(THINK_END, 1)[1]
    return reply


def extract_boxed(text: str) -> str | None:
    """The inside of the last \\boxed{...} (nested braces matched), or of \\fbox{...};
    also the reference's `\\boxed ANSWER$` form. None when there is no box."""
    starts = [(text.rfind("\\boxed{"), len("\\boxed{")), (text.rfind("\\fbox{"), len("\\fbox{"))]
    start, skip = max(starts)
    if start >= 0:
        depth, i = 1, start + skip
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start + skip : i]
            i += 1
        return None  # an unclosed box is not an answer
    start = text.rfind("\\boxed ")
    if start >= 0:
        return text[start + len("\\boxed ") :].split("$")[0]
    return None


def extract_answer_is(text: str) -> str | None:
    """The text after the last 'the answer is', without '*', white space or trailing periods."""
    text = text.replace("*", "")
    marker = "the answer is"
    pos = text.rfind(marker)
    if pos < 0:
        return None
    return text[pos + len(marker) :].strip().rstrip(".").strip()


def extract_answer(reply: str, variant: str = "boxed") -> tuple[str, bool]:
    """(answer, found): the extracted answer, or the whole reply (stripped) when the
    expected form is absent, so the user always gets the model's words."""
    found = extract_boxed(reply) if variant == "boxed" else extract_answer_is(reply)
    if found is None:
        return reply.strip(), False
    return found.strip(), True
