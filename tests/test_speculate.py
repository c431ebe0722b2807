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
from helpers import CODEWORD_ASK, codeword_document, codeword_engine, codeword_prompts, codeword_steps, reply, run_memagent
from helpers import CODEWORD_FACT as FACT
from typer.testing import CliRunner

from memagent_cli.cli.app import app
from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt
from memagent_cli.model.speculate import NGRAM_MIN, PRIOR_EXTRA, Checked, DraftPolicy, PromptLookup, take_drafts
from testkit.codeword import QUESTION, make_document

# --- the drafter ---------------------------------------------------------------------------------


def test_drafts_what_followed_the_latest_earlier_occurrence():
    d = PromptLookup([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    d.add(2)
    d.add(3)  # the text now ends "2 3": last seen followed by 7 8
    assert d.propose(8) == [7, 8, 2, 3]
    assert d.propose(1) == [7]


def test_the_longest_matching_ngram_wins():
    d = PromptLookup([5, 1, 2, 3, 40, 41, 9, 2, 3, 50, 51])
    for t in (1, 2, 3):
        d.add(t)  # "1 2 3" occurred once, followed by 40; "2 3" last by 50
    assert d.propose(2) == [40, 41]


def test_no_match_no_draft_and_the_text_never_matches_itself():
    d = PromptLookup([1, 2, 3])
    assert d.propose(4) == [] and d.draft(4) == []  # "2 3" ends the text: nothing followed it yet
    d.add(4)
    assert d.propose(4) == []
    assert PromptLookup([7] * (NGRAM_MIN - 1)).propose(4) == []


def test_an_expected_reply_is_proposed_while_the_reply_follows_it():
    d = PromptLookup([9, 9, 1, 2, 3, 8], expected=[1, 2, 3, 4, 0])
    assert d.propose(8) == [1, 2, 3, 4, 0]  # before the reply's first token: all of it
    d.add(1)
    assert d.propose(8) == [2, 3, 4, 0] and d.propose(2) == [2, 3]
    d.add(2)
    d.add(3)
    assert d.propose(8) == [4, 0]  # the prompt's "2 3" was followed by 8: the expectation wins
    d.add(7)  # the reply leaves it: n-grams from here on
    assert d.propose(8) == []
    d.add(2)
    d.add(3)
    assert d.propose(8) == [7, 2, 3]  # the latest "2 3", in the reply itself


def test_a_reply_that_starts_elsewhere_never_follows_the_expected_one():
    d = PromptLookup([5, 6, 7, 8], expected=[1, 2, 3])
    d.add(5)
    d.add(6)
    assert d.propose(8) == [7, 8, 5, 6]  # n-grams, as without an expectation
    d.add(1)
    assert d.propose(8) == []


@pytest.mark.parametrize("seed", range(20))
def test_the_prompt_indexed_at_once_drafts_as_one_built_token_by_token(seed):
    """The prompt's n-gram index is built in one pass; it must propose what adding its tokens one
    at a time would, over texts full of repeats (a 4-letter alphabet) and the reply after them."""
    rng = random.Random(seed)
    prompt = [rng.randrange(4) for _ in range(rng.randrange(0, 60))]
    at_once, one_by_one = PromptLookup(prompt), PromptLookup([])
    for token in prompt:
        one_by_one.add(token)
    assert at_once.propose(8) == one_by_one.propose(8)
    for _ in range(20):
        token = rng.randrange(4)
        at_once.add(token)
        one_by_one.add(token)
        assert at_once.propose(8) == one_by_one.propose(8)


END = 0  # the end of turn in the take_drafts tests


@pytest.mark.parametrize(
    ("model_writes", "draft", "room", "expected"),
    [
        ([6, 7, 8], [6, 7], 10, Checked([6, 7, 8], taken=2, cached=2, ended=False)),  # all taken, one more
        ([6, 9], [6, 7, 8], 10, Checked([6, 9], taken=1, cached=1, ended=False)),  # refused at 7
        ([5], [], 10, Checked([5], taken=0, cached=0, ended=False)),  # no draft: one token
        ([6, END], [6, END], 10, Checked([6], taken=2, cached=1, ended=True)),  # the drafted end taken
        ([6, END], [6, 7], 10, Checked([6], taken=1, cached=1, ended=True)),  # an end nobody drafted
        ([END], [6], 10, Checked([], taken=0, cached=0, ended=True)),
        ([6, 7, 8], [6, 7, 8], 2, Checked([6, 7], taken=1, cached=1, ended=False)),  # the budget, mid-draft
    ],
)
def test_take_drafts_reads_while_the_model_agrees(model_writes, draft, room, expected):
    """The rule both the lone engine and the batcher read a check by: `model_writes[i]` is what the
    chain samples from the logits after the i-th token of the check (the decoded token, then each
    draft), read only while the model chose every draft before it."""
    read: list[int] = []

    def sample(i: int) -> int:
        read.append(i)
        return model_writes[i]

    got = take_drafts(sample, draft, room, lambda token: token == END)
    assert got == expected
    assert read == list(range(len(read)))  # positions in order, none twice


def _rate(p: float, k: int, a: float, b: float) -> float:
    """Expected tokens per second of one decode holding the next token and k drafts."""
    return sum(p**i for i in range(k + 1)) / (a + b * (1 + k))


def test_the_policy_fits_the_decode_cost_to_the_width():
    policy = DraftPolicy()
    assert policy.cost() is None
    for w in (1, 5, 9, 17, 1, 3):
        policy.observe(w, 0.1 + 0.02 * w)
    a, b = policy.cost()
    assert a == pytest.approx(0.1) and b == pytest.approx(0.02)
    one = DraftPolicy()
    one.observe(1, 0.2)  # a single width says nothing of the slope: the prior share is assumed
    a, b = one.cost()
    assert a + b == pytest.approx(0.2) and b == pytest.approx(0.2 * PRIOR_EXTRA)


def test_the_policy_estimates_how_often_a_drafted_token_is_taken():
    policy = DraftPolicy()
    assert policy.acceptance == 0.5  # the prior: one taken, one refused
    for _ in range(200):
        policy.outcome(4, 3)  # three taken, then a refusal
    assert policy.acceptance == pytest.approx(0.75, abs=0.01)
    policy.outcome(0, 0)  # nothing drafted: nothing learnt
    assert policy.acceptance == pytest.approx(0.75, abs=0.01)


@pytest.mark.parametrize(
    ("a", "b", "taken", "expected"),
    [
        (0.1, 0.001, 9, 16),  # a GPU: checking is nearly free, and the model copies: draft all
        (0.01, 0.09, 3, 0),  # two busy CPU cores: a drafted token costs 90% of a decode; 3 in 4 taken
        (0.01, 0.09, 99, None),  # ... the same machine, a model that copies nearly always
    ],
)
def test_the_policy_drafts_what_gives_the_most_tokens_per_second(a, b, taken, expected):
    policy = DraftPolicy()
    for w in (1, 2, 5, 9, 17):
        policy.observe(w, a + b * w)
    for _ in range(300):
        policy.outcome(taken + 1, taken)
    p = policy.acceptance
    k = policy.choose(16)
    best = max(range(17), key=lambda j: _rate(p, j, a, b))
    assert k == best
    if expected is not None:
        assert k == expected
    else:
        assert 0 < k < 16
    assert policy.choose(0) == 0 and policy.choose(3) <= 3


def test_in_a_batch_the_policy_weighs_drafts_against_the_whole_round():
    """A decode's fixed cost is shared by the sequences in the round, so a drafted token's own
    cost weighs more against what it may save: drafts that pay alone need not in a round of four."""
    policy = DraftPolicy()
    for w in (1, 4, 8, 16):
        policy.observe(w, 0.1 + 0.05 * w)
    for _ in range(300):
        policy.outcome(2, 1)  # one in two taken
    p = policy.acceptance
    assert 0.05 / 0.15 < p < 4 * 0.05 / (0.1 + 4 * 0.05)  # pays alone, not beside three others
    assert policy.choose(16) > 0
    assert policy.choose(16, width=4, tokens=4.0) == 0


def test_a_proposal_not_drafted_is_scored_against_what_the_model_writes():
    policy = DraftPolicy()
    for w in (1, 2, 5, 9):
        policy.observe(w, 0.01 + 0.5 * w)  # drafts never pay here
    d = PromptLookup([1, 2, 3, 4, 5, 6, 1, 2], policy)
    before = policy.acceptance
    assert d.draft(8) == []  # proposed 3 4 5 6 1 2, decoded nothing
    for t in (3, 4, 5, 6, 1, 2):  # the model writes exactly the proposal
        d.add(t)
    assert policy.acceptance > before
    d.draft(8)  # "1 2" again: 3 4 5 ...
    lower = policy.acceptance
    d.add(9)  # refused at once
    assert policy.acceptance < lower


# --- the engine ----------------------------------------------------------------------------------


# `steady_timings` (conftest.py) pins the policy's decode costs where a test asserts drafts were
# checked; the test of costly checks below keeps the real fit.


@pytest.fixture(scope="module")
def engines():
    made = {s: codeword_engine(speculate=s) for s in (False, True)}
    yield made
    for e in made.values():
        e.close()


@pytest.mark.parametrize("told", [False, True], ids=["n-grams", "memory-expected"])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_speculation_changes_nothing_in_the_output(steady_timings, engines, temperature, told):
    taken = 0
    for message, memory in codeword_steps(12):
        plain = reply(engines[False], message, temperature=temperature)
        fast = reply(engines[True], message, temperature=temperature, expect=memory if told else "")
        assert (fast.text, fast.finish_reason, fast.completion_tokens) == (
            plain.text,
            plain.finish_reason,
            plain.completion_tokens,
        )
        assert plain.drafted_tokens == plain.accepted_tokens == 0
        assert 0 <= fast.accepted_tokens <= fast.drafted_tokens
        taken += fast.accepted_tokens
    assert taken > 0  # the model copies: some drafts were taken, or this test proves nothing


def test_a_copied_memory_takes_fewer_decodes(steady_timings, engines):
    """No fact in the chunk and the fact in the memory: the model copies the memory, and most of
    its tokens come from the draft."""
    message = memory_prompt(QUESTION, FACT, make_document(random.Random(1), 64, fact=False).text)
    done = reply(engines[True], message)
    assert done.text == FACT and done.finish_reason == "stop"
    assert done.accepted_tokens >= done.completion_tokens // 2


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 7, 8])  # the fact is 7 tokens, then the end of turn
def test_the_token_budget_holds_with_drafts(engines, budget):
    message = memory_prompt(QUESTION, FACT, make_document(random.Random(1), 64, fact=False).text)
    plain = reply(engines[False], message, max_tokens=budget)
    for expect in ("", FACT):
        fast = reply(engines[True], message, max_tokens=budget, expect=expect)
        assert fast.completion_tokens == plain.completion_tokens <= budget
        assert (fast.text, fast.finish_reason) == (plain.text, plain.finish_reason)


def test_a_memory_told_to_the_engine_is_drafted_from_the_first_token_through_the_end_of_turn(steady_timings):
    """Told the previous memory, the engine drafts it, and then the end of the turn, as soon as
    the reply's first token matches; n-grams alone need two tokens of the reply first, and the
    prompt's copy of the memory ends in a token merged with the newline after it."""
    eng = codeword_engine(speculate=True)
    try:
        message = memory_prompt(QUESTION, FACT, make_document(random.Random(1), 64, fact=False).text)
        for _ in range(4):  # the policy drafts the whole expectation once it has seen it taken
            told = reply(eng, message, expect=FACT)
        untold = reply(eng, message)
        assert told.text == untold.text == FACT and told.finish_reason == "stop"
        # every token after the first, and the end of turn, came out of one check
        assert told.drafted_tokens == told.accepted_tokens == told.completion_tokens
        assert untold.accepted_tokens < told.accepted_tokens
    finally:
        eng.close()


def test_refused_drafts_leave_nothing_in_the_cache(engines):
    """A call reuses the previous call's cache for the common prefix: drafted positions the model
    refused must be gone, or the next reply would read them. The same sequence of calls on an
    engine without drafts gives the same replies."""
    sequence = codeword_prompts(8)
    for k, message in enumerate(sequence):
        fast = reply(engines[True], message, temperature=0.7, seed=11)
        plain = reply(engines[False], message, temperature=0.7, seed=11)
        assert fast.text == plain.text
        # the first call may meet engines fresh from the fixture (this test alone, or first on its worker)
        assert fast.cached_tokens == plain.cached_tokens and (k == 0 or plain.cached_tokens > 0)


def test_where_checks_cost_too_much_the_engine_drafts_nothing_and_keeps_scoring(engines, monkeypatch):
    """An engine whose timings say a drafted token costs as much as a decode (two busy CPU cores
    with a larger model) decodes no drafts, gives the same replies, and still learns from the
    proposals it did not decode that this model copies."""
    eng = codeword_engine(speculate=True)
    try:
        for _ in range(300):  # timings and refusals that outweigh what a few replies add
            for w in (1, 2, 5, 9):
                eng.draft_policy.observe(w, 0.01 * w)
            eng.draft_policy.outcome(4, 1)
        # Pinned: the reply's own decodes, timed on a busy machine, must not tip the fit.
        monkeypatch.setattr(eng.draft_policy, "observe", lambda width, seconds: None)
        before = eng.draft_policy.acceptance
        message = memory_prompt(QUESTION, FACT, make_document(random.Random(1), 64, fact=False).text)
        done = reply(eng, message)
        assert done.drafted_tokens == 0
        assert (done.text, done.completion_tokens) == (reply(engines[False], message).text, done.completion_tokens)
        assert eng.draft_policy.acceptance > before  # the copied memory matched the proposals
    finally:
        eng.close()


# --- through memagent ----------------------------------------------------------------------------


def test_ask_reports_drafts_per_step_and_answers_the_same(tmp_path, steady_timings):
    """In this process (the timings pinned), the command as a user runs it."""
    doc = codeword_document(tmp_path / "doc.txt", 3)
    home = {"MEMAGENT_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
    common = ["ask", str(doc), QUESTION, *map(str, CODEWORD_ASK)]
    common += ["--temperature", "0", "--threads", "1", "--json", "--fresh"]  # both read: drafting decides no answer
    runs = {}
    for flag in ("--speculate", "--no-speculate"):
        done = CliRunner().invoke(app, [*common, flag], env=home)
        assert done.exit_code == 0, done.stderr
        runs[flag] = json.loads(done.stdout)
    fast, plain = runs["--speculate"], runs["--no-speculate"]
    assert fast["answer"] == plain["answer"] and fast["memory"] == plain["memory"]
    assert [s["memory"] for s in fast["steps"]] == [s["memory"] for s in plain["steps"]]
    assert all(s["drafted_tokens"] == s["accepted_tokens"] == 0 for s in plain["steps"])
    assert sum(s["accepted_tokens"] for s in fast["steps"]) > 0
    # a step that keeps the memory copies it: told the memory, the engine drafted all of it but
    # the first token (without it, n-grams start drafting from the third)
    copies = [s for prev, s in zip(fast["steps"], fast["steps"][1:]) if s["memory"] == prev["memory"] != INITIAL_MEMORY]
    assert copies and all(s["accepted_tokens"] >= s["generated_tokens"] - 1 for s in copies), fast["steps"]
    # the trace keeps the same counts
    shown = run_memagent("traces", "show", fast["trace"], "--json", env=home)
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)["steps"]
    assert [(s["drafted_tokens"], s["accepted_tokens"]) for s in stored] == [
        (s["drafted_tokens"], s["accepted_tokens"]) for s in fast["steps"]
    ]


def test_a_reply_closed_mid_draft_leaves_the_engine_as_a_fresh_one():
    """A cancelled run closes its reply at any token, drafts in the cache included (`memagent mcp`,
    Ctrl-C): no error, and the next replies are the ones a fresh engine gives."""
    from memagent_cli.model.engine import Sampling

    prompts = codeword_prompts(6)
    fresh = codeword_engine(speculate=True)
    try:
        expected = [reply(fresh, p, expect=FACT).text for p in prompts]
    finally:
        fresh.close()
    engine = codeword_engine(speculate=True)
    try:
        for cut in range(1, 5):
            for prompt in prompts:
                stream = engine.complete(prompt, 32, Sampling(temperature=0.0, seed=3), FACT)
                for _ in range(cut):
                    if next(stream, None) is None:
                        break
                stream.close()  # mid-reply, mid-draft where a check was under way
        assert [reply(engine, p, expect=FACT).text for p in prompts] == expected
    finally:
        engine.close()
