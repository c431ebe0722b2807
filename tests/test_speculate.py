"""Speculative memory rewrites: drafts from the prompt, checked by the model in one decode.

Exactness is the contract: with speculation the engine samples every position with the run's own
sampler chain, in order, and keeps a drafted token only when it equals that sample, so greedy and
seeded runs give the same text. Tested on the trained code-word model, whose memory updates copy
the previous memory or the fact sentence out of the prompt (so drafts are taken), and whose
llama.cpp logits do not depend on the batch shape at this size.
"""

from __future__ import annotations

import json
import random

import pytest
from codeword import QUESTION, make_document
from conftest import CODEWORD_FACT as FACT
from conftest import CODEWORD_MODEL as MODEL
from conftest import codeword_engine, codeword_prompts, reply, run_memagent

from memagent_cli.core.protocol import memory_prompt
from memagent_cli.model.speculate import NGRAM_MIN, PromptLookup

# --- the drafter ---------------------------------------------------------------------------------


def test_drafts_what_followed_the_latest_earlier_occurrence():
    d = PromptLookup([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    d.add(2)
    d.add(3)  # the text now ends "2 3": last seen followed by 7 8
    assert d.draft(8) == [7, 8, 2, 3]
    assert d.draft(1) == [7]


def test_the_longest_matching_ngram_wins():
    d = PromptLookup([5, 1, 2, 3, 40, 41, 9, 2, 3, 50, 51])
    for t in (1, 2, 3):
        d.add(t)  # "1 2 3" occurred once, followed by 40; "2 3" last by 50
    assert d.draft(2) == [40, 41]


def test_no_match_no_draft_and_the_text_never_matches_itself():
    d = PromptLookup([1, 2, 3])
    assert d.draft(4) == []  # "2 3" ends the text: nothing followed it yet
    d.add(4)
    assert d.draft(4) == []
    assert PromptLookup([7] * (NGRAM_MIN - 1)).draft(4) == []


def test_the_draft_length_adapts_to_what_the_model_takes():
    d = PromptLookup(list(range(100)) + list(range(50)), draft_max=16)
    start = len(d.draft(100))
    d.checked(start, start)
    assert len(d.draft(100)) == min(16, start * 2)
    d.checked(16, 0)
    d.checked(8, 0)
    assert len(d.draft(100)) == 4
    for _ in range(5):
        d.checked(4, 0)
    assert len(d.draft(100)) == 1  # never below one while n-grams match
    d.checked(1, 1)
    assert len(d.draft(100)) == 2
    assert d.draft(0) == []


# --- the engine ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines():
    made = {s: codeword_engine(speculate=s) for s in (False, True)}
    yield made
    for e in made.values():
        e.close()


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_speculation_changes_nothing_in_the_output(engines, temperature):
    taken = 0
    for message in codeword_prompts(12):
        plain = reply(engines[False], message, temperature=temperature)
        fast = reply(engines[True], message, temperature=temperature)
        assert (fast.text, fast.finish_reason, fast.completion_tokens) == (
            plain.text,
            plain.finish_reason,
            plain.completion_tokens,
        )
        assert plain.drafted_tokens == plain.accepted_tokens == 0
        assert 0 <= fast.accepted_tokens <= fast.drafted_tokens
        taken += fast.accepted_tokens
    assert taken > 0  # the model copies: some drafts were taken, or this test proves nothing


def test_a_copied_memory_takes_fewer_decodes(engines):
    """No fact in the chunk and the fact in the memory: the model copies the memory, and most of
    its tokens come from the draft."""
    message = memory_prompt(QUESTION, FACT, make_document(random.Random(1), 64, fact=False).text)
    done = reply(engines[True], message)
    assert done.text == FACT and done.finish_reason == "stop"
    assert done.accepted_tokens >= done.completion_tokens // 2


@pytest.mark.parametrize("budget", [1, 2, 3, 5])
def test_the_token_budget_holds_with_drafts(engines, budget):
    message = memory_prompt(QUESTION, FACT, make_document(random.Random(1), 64, fact=False).text)
    plain = reply(engines[False], message, max_tokens=budget)
    fast = reply(engines[True], message, max_tokens=budget)
    assert fast.completion_tokens == plain.completion_tokens <= budget
    assert (fast.text, fast.finish_reason) == (plain.text, plain.finish_reason)


def test_refused_drafts_leave_nothing_in_the_cache(engines):
    """A call reuses the previous call's cache for the common prefix: drafted positions the model
    refused must be gone, or the next reply would read them. The same sequence of calls on an
    engine without drafts gives the same replies."""
    sequence = codeword_prompts(8)
    for message in sequence:
        fast = reply(engines[True], message, temperature=0.7, seed=11)
        plain = reply(engines[False], message, temperature=0.7, seed=11)
        assert fast.text == plain.text
        assert fast.cached_tokens == plain.cached_tokens > 0


# --- through memagent ----------------------------------------------------------------------------


def test_ask_reports_drafts_per_step_and_answers_the_same(tmp_path):
    doc = tmp_path / "doc.txt"
    rng = random.Random(5)
    doc.write_text(
        "\n".join([make_document(rng, 64, where=0.5).text] + [make_document(rng, 64, fact=False).text for _ in range(3)]),
        encoding="utf-8",
    )
    home = {"MEMAGENT_HOME": str(tmp_path / "home")}
    common = ["ask", doc, QUESTION, "-m", MODEL, "--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "24"]
    common += ["--temperature", "0", "--threads", "1", "--json"]
    runs = {}
    for flag in ("--speculate", "--no-speculate"):
        done = run_memagent(*common, flag, env=home)
        assert done.returncode == 0, done.stderr
        runs[flag] = json.loads(done.stdout)
    fast, plain = runs["--speculate"], runs["--no-speculate"]
    assert fast["answer"] == plain["answer"] and fast["memory"] == plain["memory"]
    assert [s["memory"] for s in fast["steps"]] == [s["memory"] for s in plain["steps"]]
    assert all(s["drafted_tokens"] == s["accepted_tokens"] == 0 for s in plain["steps"])
    assert sum(s["accepted_tokens"] for s in fast["steps"]) > 0
    # the trace keeps the same counts
    shown = run_memagent("traces", "show", fast["trace"], "--json", env=home)
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)["steps"]
    assert [(s["drafted_tokens"], s["accepted_tokens"]) for s in stored] == [
        (s["drafted_tokens"], s["accepted_tokens"]) for s in fast["steps"]
    ]
