"""The prompts byte for byte against the reference, the memory rule, answer extraction."""

import re

import pytest
from helpers import shared_path

from memagent_cli.core import memagent
from memagent_cli.core.memagent import (
    extract_answer,
    extract_boxed,
    final_prompt,
    memory_prompt,
    next_memory,
)


@pytest.fixture(scope="module")
def reference() -> str:
    return shared_path("reference", "memagent-protocol.md").read_text(encoding="utf-8")


def code_blocks(text: str) -> list[str]:
    # A block's text ends before the newline that precedes the closing fence.
    return re.findall(r"```\n(.*?)\n```", text, flags=re.S)


def test_memory_prompt_matches_reference_byte_for_byte(reference):
    block = code_blocks(reference)[0]
    assert block.startswith("You are presented with a problem, a section")
    # the reference says the text ends with a newline after "Updated memory:"
    assert memagent.MEMORY_PROMPT == block + "\n"
    assert "<problem> \n" in memagent.MEMORY_PROMPT


def test_final_prompts_match_reference(reference):
    block = code_blocks(reference)[1]
    assert memagent._FINAL_PROMPT.replace("{instruction}", memagent.FINAL_INSTRUCTIONS["boxed"]) == block + "\n"
    variant = re.search(r"reads\n`(.*?)`\nin place of", reference).group(1)
    assert memagent.FINAL_INSTRUCTIONS["answer-is"] == variant


def test_initial_memory_matches_reference(reference):
    assert f"the literal text `{memagent.INITIAL_MEMORY}`" in reference


def test_fields_are_filled_once_and_braces_in_documents_survive():
    chunk = "a {problem} and {memory} in the text, and \\boxed{x}"
    prompt = memory_prompt("  Q?  \n", "M {chunk}", chunk)
    assert "<problem> \nQ?\n</problem>" in prompt  # the question is stripped
    assert "<memory>\nM {chunk}\n</memory>" in prompt  # text from one field is not re-scanned
    assert f"<section>\n{chunk}\n</section>" in prompt
    assert final_prompt("Q", "M").endswith("<memory>\nM\n</memory>\n\nYour answer:\n")


@pytest.mark.parametrize(
    "reply, memory",
    [
        ("plain memory", "plain memory"),
        ("<think>reasoning</think>kept", "kept"),
        ("a</think>b</think> last", " last"),
        ("", ""),
    ],
)
def test_think_rule(reply, memory):
    assert next_memory(reply) == memory


@pytest.mark.parametrize(
    "reply, answer, found",
    [
        ("The answer is \\boxed{42}.", "42", True),
        ("\\boxed{1} then \\boxed{\\frac{a}{b}}", "\\frac{a}{b}", True),  # last box, nested braces
        ("\\boxed{{a}{b{c}}} tail", "{a}{b{c}}", True),
        ("no box here", "no box here", False),  # falls back to the whole reply
        ("\\boxed{unclosed", "\\boxed{unclosed", False),
        ("\\fbox{7}", "7", True),
        ("$\\boxed 12$", "12", True),
    ],
)
def test_boxed_extraction(reply, answer, found):
    assert extract_answer(reply, "boxed") == (answer, found)


@pytest.mark.parametrize(
    "reply, answer, found",
    [
        ("Therefore, the answer is **Paris**.", "Paris", True),
        ("the answer is a. Therefore, the answer is b...", "b", True),
        ("I do not know", "I do not know", False),
    ],
)
def test_answer_is_extraction(reply, answer, found):
    assert extract_answer(reply, "answer-is") == (answer, found)


def test_unknown_final_variant_is_refused():
    with pytest.raises(ValueError):
        final_prompt("q", "m", "other")
    assert extract_boxed("") is None
