"""Questions batched in one llama.cpp context (model/batched.py).

Several complete() calls from several threads share one context, one llama_decode per round.
Each sequence samples with its own chain, in order, so on the trained code-word model (whose
logits do not depend on the batch shape) every reply equals the same call made alone.
"""

from __future__ import annotations

import json
import random
import threading

import pytest
from helpers import CODEWORD_ASK, codeword_document, codeword_engine, codeword_prompts, codeword_steps, reply, run_memagent
from helpers import CODEWORD_MODEL as MODEL

from testkit.codeword import QUESTION, make_document


@pytest.fixture(scope="module", params=[False, True], ids=["no-drafts", "drafts"])
def engines(request):
    alone = codeword_engine(speculate=False)
    batched = codeword_engine(sequences=4, batch=True, speculate=request.param)
    yield alone, batched
    batched.close()
    alone.close()


@pytest.fixture
def pair(engines, steady_timings):
    """The lone engine without drafts, and a batching one with or without them. The draft
    policy's decode costs are pinned (conftest.py) in every test that uses them: with the live
    fit a busy CPU can make the driver decide drafts do not pay, and the drafts variant would
    then check no drafts, or fail where it asserts some were taken."""
    return engines


def test_the_batched_engine_takes_concurrent_calls_in_one_context(pair):
    _, batched = pair
    assert batched.concurrent and batched.sequences == 4
    assert batched.description.endswith("4 sequences batched")


def test_drafts_inside_a_batch_are_checked_and_counted(pair):
    """The code-word model copies its memory, so drafts from the prompt are taken: a reply made
    with them says how many were drafted and accepted, and without them says none."""
    _, batched = pair
    done = [reply(batched, m, temperature=0.0) for m in codeword_prompts(6)]
    drafted, accepted = sum(d.drafted_tokens for d in done), sum(d.accepted_tokens for d in done)
    if batched.speculate:
        assert 0 < accepted <= drafted
        assert accepted <= sum(d.completion_tokens for d in done)
    else:
        assert drafted == accepted == 0


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_batched_replies_equal_replies_made_alone(pair, temperature):
    """The batched calls are told the memory (drafted first, when drafting); the lone ones are not."""
    alone, batched = pair
    steps = codeword_steps(12)
    texts = [prompt for prompt, _ in steps]
    expected = [reply(alone, m, temperature=temperature).text for m in texts]
    got: dict[int, str] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(k, len(texts), 4):  # four threads, so rounds hold 1 to 4 sequences
                got[i] = reply(batched, texts[i], temperature=temperature, expect=steps[i][1]).text
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert [got.get(i) for i in range(len(texts))] == expected


def test_a_reply_dropped_midway_frees_its_sequence(pair):
    """Ctrl-C closes a reply's stream: its sequence goes back to the pool, and the others and
    later calls are unaffected."""
    from memagent_cli.model.engine import Sampling

    alone, batched = pair
    message = codeword_prompts(2)[1]
    for _ in range(6):  # more than the 4 sequences: each dropped one must come back
        stream = batched.complete(message, 32, Sampling(temperature=0.0))
        next(stream)
        stream.close()
    assert reply(batched, message, temperature=0.0).text == reply(alone, message, temperature=0.0).text


def test_budgets_and_finish_reasons_match(pair):
    alone, batched = pair
    for budget in (1, 2, 3, 5, 7, 8):  # the copied fact is 7 tokens, then the drafted end of turn
        for message, memory in codeword_steps(3):
            a, b = (
                reply(alone, message, max_tokens=budget, temperature=0.0),
                reply(batched, message, max_tokens=budget, temperature=0.0, expect=memory),
            )
            assert (b.text, b.finish_reason, b.completion_tokens) == (a.text, a.finish_reason, a.completion_tokens)


def test_batching_is_off_by_default_where_layers_run_on_the_cpu():
    """B8: on a CPU four sequences per decode measured no faster end to end (on a GPU, B4: 2.15x)."""
    eng = codeword_engine(sequences=4)  # no batch= given; gpu_layers=0
    try:
        assert eng.sequences == 1 and not eng.concurrent and "batched" not in eng.description
    finally:
        eng.close()


def test_no_batching_when_turned_off():
    eng = codeword_engine(sequences=4, batch=False)
    try:
        assert eng.sequences == 1 and not eng.concurrent
    finally:
        eng.close()


def test_ask_with_several_questions_batches_and_answers_the_same(tmp_path):
    doc = codeword_document(tmp_path / "doc.txt", 2)
    common = ["ask", doc, "-q", QUESTION, "-q", "What is the code word here?", "-q", "Which code word is given?"]
    common += CODEWORD_ASK
    common += ["--temperature", "0", "--threads", "1", "--json", "--no-trace"]
    out = {}
    for flag in ("--batch", "--no-batch"):
        done = run_memagent(*common, flag)
        assert done.returncode == 0, done.stderr
        out[flag] = json.loads(done.stdout)["results"]
    batched, alone = out["--batch"], out["--no-batch"]
    assert [r["answer"] for r in batched] == [r["answer"] for r in alone]
    assert [[s["memory"] for s in r["steps"]] for r in batched] == [[s["memory"] for s in r["steps"]] for r in alone]
    assert all(r["device"].endswith("3 sequences batched") for r in batched)
    assert not any("batched" in r["device"] for r in alone)


def test_eval_items_batched_score_as_items_run_alone(tmp_path, monkeypatch, steady_timings):
    """eval on the embedded engine batches up to --parallel items: every row's prediction is
    the one the item gets run alone. Both engines draft (the CPU default), the policy's costs
    pinned: the rounds decoded are those of the prior, whatever the machine's load."""
    from memagent_cli import AgentConfig, EmbeddedOptions
    from memagent_cli.evals.evaluation import ItemScored, evaluate_events
    from memagent_cli.model import llama as llama_module

    made: list[int] = []  # the sequences of each batching context made (the real one, counted)
    real = llama_module.SequenceBatcher

    def counted(*args, **kw):
        made.append(kw["sequences"])
        return real(*args, **kw)

    monkeypatch.setattr(llama_module, "SequenceBatcher", counted)

    rng = random.Random(9)
    data = tmp_path / "items.jsonl"
    with data.open("w", encoding="utf-8") as f:
        for k in range(6):
            doc = make_document(rng, 200, fact=k % 2 == 0)
            f.write(json.dumps({"id": str(k), "context": doc.text, "input": QUESTION, "answers": [doc.answer]}) + "\n")
    config = AgentConfig(chunk_tokens=64, memory_tokens=32, answer_tokens=24, temperature=0, final="boxed")
    rows = {}
    for batch in (True, False):
        engine = EmbeddedOptions(threads=1, batch=batch)
        events = list(evaluate_events(data, model=str(MODEL), config=config, engine=engine, parallel=4, skip=set()))
        rows[batch] = {e.row["id"]: (e.row["prediction"], e.row["found"]) for _, e in events if isinstance(e, ItemScored)}
        assert made == [4]  # the batched run made one 4-sequence context; the other made none
    assert len(rows[True]) == 6 and rows[True] == rows[False]
    assert sum(found for _, found in rows[True].values()) >= 2


def test_closing_the_engine_ends_replies_still_running():
    """A reply waiting when the engine closes (its run stopped from elsewhere) ends with an error
    instead of waiting forever for a driver that is gone; a later call fails at once."""
    from memagent_cli.errors import MemagentError
    from memagent_cli.model.engine import Sampling

    eng = codeword_engine(sequences=2, batch=True)
    batcher = eng._batcher
    batcher._closing.set()  # the driver is gone before the reply is taken up
    batcher._thread.join(10)
    submitted = threading.Event()  # the reply is handed to the (gone) driver: the reader waits
    hand_in = batcher._incoming.put

    def put(request, *args, **kw):
        hand_in(request, *args, **kw)
        submitted.set()

    batcher._incoming.put = put
    stream = eng.complete(codeword_prompts(2)[1], 32, Sampling(temperature=0.0))
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            for _ in stream:
                pass
        except MemagentError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)  # daemon: a regression fails, never hangs
    reader.start()
    assert submitted.wait(60)  # a guard only: set as soon as the reader's request is queued
    eng.close()
    reader.join(10)
    assert not reader.is_alive() and outcome and "closed" in str(outcome[0])
    with pytest.raises(MemagentError, match="closed"):
        next(batcher.complete([1, 2, 3], 4, eng._sampler(Sampling(temperature=0.0))))


def test_inspect_sizes_the_context_llama_cpp_makes_for_n_sequences(tmp_path):
    """`inspect --sequences 3` names the context `ask -q` x3 makes: llama.cpp's own count of
    cells per sequence and in all, and the KV buffer size it logs, are the oracle."""
    import re

    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.runtime import llama_log_listener
    from memagent_cli.model.tokenizer import load_tokenizer

    doc = tmp_path / "doc.txt"
    doc.write_text(make_document(random.Random(3), 64, where=0.5).text, encoding="utf-8")
    args = ["inspect", doc, "-m", MODEL, "--question", QUESTION, "--chunk-tokens", "64", "--memory-tokens", "32"]
    done = run_memagent(*args, "--sequences", "3", "--json")
    assert done.returncode == 0, done.stderr
    context = json.loads(done.stdout)["context"]
    per = context["tokens_per_sequence"]
    assert context["sequences"] == 3 and context["tokens"] == 3 * per and per % 256 == 0

    info = read_gguf(MODEL)
    lines: list[str] = []
    with llama_log_listener(lines.append):
        eng = LlamaEngine(
            info,
            load_tokenizer(info),
            ChatFormat.from_gguf(info),
            n_ctx=per,
            sequences=3,
            options=EmbeddedOptions(gpu_layers=0, threads=1, batch=True),
        )
    try:
        assert eng.cells() == (context["tokens"], per)
    finally:
        eng.close()
    logged = [float(m.group(1)) for line in lines if (m := re.search(r"KV buffer size =\s*([\d.]+) MiB", line))]
    assert logged and round(context["kv_cache_bytes"] / 2**20, 2) == logged[-1]

    text = run_memagent(*args, "--sequences", "3", env={"COLUMNS": "120"})
    assert f"{3 * per:,} tokens: 3 sequences of {per:,}" in text.stdout, text.stdout
