"""The InfMem protocol's strings and rules (core/infmem.py) against the reference
(tests/data/shared/reference/infmem-protocol.md): every prompt byte for byte and by the SHA-256 the
reference gives, the retrieval history, how a planner reply is read, the STOP streak, the retrieved
block and the two-stage thinking."""

from __future__ import annotations

import hashlib
import re

import pytest
from helpers import shared_path

from memagent_cli.core import infmem


@pytest.fixture(scope="module")
def reference() -> str:
    return shared_path("reference", "infmem-protocol.md").read_text(encoding="utf-8")


def blocks(text: str) -> list[str]:
    """The reference's ```text blocks: the bytes from the line after the fence through the newline
    before the closing fence (its own convention)."""
    return re.findall(r"```text\n(.*?)```", text, flags=re.S)


def block_with(text: str, start: str) -> str:
    (found,) = [b for b in blocks(text) if b.startswith(start)]
    return found


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_every_prompt_is_the_references_byte_for_byte(reference):
    planner = block_with(reference, "\nYou are a Retrieval Planner.")
    wrapper = block_with(reference, "<|im_start|>system\n# Tools")
    write = block_with(reference, "You are presented with a problem, a section")
    final = block_with(reference, "You are presented with a problem and a previous memory.")
    assert infmem.PLANNER_PROMPT == planner
    assert infmem.chat(infmem.TOOL_SYSTEM, "{PLANNER_PROMPT}") == wrapper
    assert infmem.MEMORY_PROMPT == write and infmem.FINAL_PROMPT == final
    # the digests the reference states, so a reference edited by mistake is caught too
    for text in (infmem.PLANNER_PROMPT, wrapper, infmem.MEMORY_PROMPT, infmem.FINAL_PROMPT, infmem.FORCED_CLOSE):
        assert sha(text) in reference, text[:40]
    assert sha(infmem.PLANNER_PROMPT) == "628c8d23d18351cedc45c72b5df0cdabc653e7545fe94b47324808d86c874e22"
    assert sha(infmem.FORCED_CLOSE) == "bdf194d9bee6f795983878b6793a3b73c24a39656d7c68cb9276340e3102dfbc"
    # the trained typos stay
    assert "reetrieved" in infmem.MEMORY_PROMPT and "exlore" in infmem.PLANNER_PROMPT
    assert infmem.CALL.pattern + "\n" == block_with(reference, "\u273fFUNCTION\u273f:")


def test_the_prompts_filled_and_wrapped(reference):
    planner = infmem.planner_text("Who won?", infmem.history_text(1, 12, []), infmem.INITIAL_MEMORY)
    assert planner.startswith("<|im_start|>system\n# Tools\n") and planner.endswith(
        "CURRENT MEMORY:\nNo previous memory\n\n<|im_end|>\n<|im_start|>assistant\n"
    )
    # no history: the header line and its newline, so a blank line comes before the closing tag
    assert (
        "<retrieval_history>\nCurrent retrieval step: 1  Maximum allowed retrieval steps: 12\n\n</retrieval_history>" in planner
    )
    write = infmem.memory_text("Who won?", "", "chunk text", "memo")
    assert write.startswith("<|im_start|>user\nYou are presented") and "<problem>\nWho won?\n</problem>" in write
    assert "<retrieved_chunk>\n\n</retrieved_chunk>" in write and write.endswith(
        "Updated memory:\n<|im_end|>\n<|im_start|>assistant\n"
    )
    final = infmem.final_text("Who won?", "memo")
    assert "<problem> \nWho won?\n</problem>" in final  # the final prompt's <problem> has its space, the write's not
    braces = infmem.memory_text("{q}", "{r}", "a {chunk} b", "{memory}")  # values go in verbatim
    assert "<problem>\n{q}\n</problem>" in braces and "a {chunk} b" in braces


def test_the_retrieval_history_is_the_references_example(reference):
    history = [("Ethan Hawke birthplace", 5), ("O'Neill film director", 8)]
    assert infmem.history_text(3, 12, history) + "\n" == block_with(reference, "Current retrieval step: 3")


@pytest.mark.parametrize(
    "reply, stop, calls, searches",
    [
        ("<think>I could STOP here.</think>\n\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {}", True, 0, []),
        (
            '\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "code word", "top_k": 5}',
            False,
            1,
            [("code word", 5)],
        ),
        # arguments end at the first of the markers; text after the last "}" is cut
        (
            '\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "a"} trailing\n\u273fRESULT\u273f: x',
            False,
            1,
            [("a", 8)],
        ),
        # unreadable arguments, a fenced block, a query that is not text: the question, top_k 8
        ("\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {not json}", False, 1, [("Q?", 8)]),
        ('\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: ```json\n{"query": "a"}\n```', False, 1, [("Q?", 8)]),
        ('\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": 42, "top_k": "many"}', False, 1, [("Q?", "many")]),
        # another tool's call counts as a call and searches nothing; two calls are both logged
        ("\u273fFUNCTION\u273f: websearch\n\u273fARGS\u273f: {}", False, 1, []),
        (
            '\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "a"}\n'
            '\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "b", "top_k": 3}',
            False,
            2,
            [("a", 8), ("b", 3)],
        ),
        ("I will think about it.", False, 0, []),
    ],
)
def test_a_planner_reply_is_read_as_the_reference_reads_it(reply, stop, calls, searches):
    plan = infmem.read_plan(reply, "Q?")
    assert (plan.stop, plan.calls, plan.searches) == (stop, calls, searches)


def test_three_stops_in_a_row_end_the_reading_and_a_call_less_reply_only_opens_a_streak():
    stop, search, idle = infmem.Plan(stop=True), infmem.Plan(stop=False, calls=1), infmem.Plan(stop=False)
    streak, seen = 0, []
    for plan in (stop, stop, search, idle, idle, stop, stop):
        streak = infmem.stop_streak(streak, plan)
        seen.append(streak)
    assert seen == [1, 2, 0, 1, 1, 2, 3]
    assert seen.index(infmem.EARLY_STOP) == 6


def test_the_retrieved_block_and_the_two_stage_thinking():
    assert infmem.retrieved_block([" first unit", "second"]) == "[Retrieved #1]  first unit\n\n[Retrieved #2] second"
    assert infmem.retrieved_block([]) == ""
    cut = "<think>long thoughts   "
    assert infmem.closed_thinking(cut) == "<think>long thoughts" + infmem.FORCED_CLOSE
    assert infmem.closed_thinking("<think>a</think>done") == "<think>a</think>done"
    assert infmem.reply_of("<think>a</think>\n\nThe", " end ") == "<think>a</think>\n\nTheend"  # glued, as the reference does
    assert infmem.solution("<think>a</think> x </think>\n memory \n") == "memory"
    assert infmem.solution("no thinking") == "no thinking"


def test_the_search_is_rank_bm25s_over_500_token_units_and_ties_keep_the_units_order():
    from rank_bm25 import BM25Okapi

    ids = list(range(1234))
    units = infmem.units_of(ids, lambda part: f"unit {part[0]}-{part[-1]}")
    assert units == ["unit 0-499", "unit 500-999", "unit 1000-1233"]  # cut every 500 tokens, the last shorter

    texts = [
        " The Code word is amber falcon.",
        "the river ran past the mill",
        "code word? none here",
        "AMBER lamps in the hall",
        "nothing at all",
        "nothing at all",
    ]
    search = infmem.Search(texts)
    reference = BM25Okapi([t.lower().split() for t in texts]).get_scores("code word amber".split())
    best = search.top("Code WORD amber")  # the query is lower-cased and split as the units are
    assert best[0] == 0 and len(best) == infmem.RESULTS
    assert [round(float(reference[i]), 9) for i in best] == sorted((round(float(s), 9) for s in reference), reverse=True)[:4]
    # units that score alike (here nothing) come in the document's order
    assert infmem.Search(texts).top("zebra", n=6) == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        infmem.Search([])
