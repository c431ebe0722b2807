"""`memagent eval`: data sets in, scored results out, reruns skip what is done."""

from __future__ import annotations

import json

import pytest
from helpers import CODEWORD_MODEL, run_memagent, whole_fact, words

from testkit.codeword import QUESTION

BUDGETS = ["--chunk-tokens", "128", "--memory-tokens", "6", "--answer-tokens", "6", "--temperature", "0", "--threads", "1"]


def test_make_niah_then_eval_with_out_file_and_rerun(models, tmp_path):
    items = tmp_path / "niah.jsonl"
    made = run_memagent(
        "eval", "make-niah", "--tokens", "300", "--needles", "2", "--n", "3", "--seed", "4", "-o", items, "-m", models["random"]
    )
    assert made.returncode == 0, made.stderr
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    assert len(rows) == 3 and all(r["answers"][0] in r["context"] for r in rows)
    assert all(r["needle"] in r["context"] and r["answers"][0] in r["needle"] for r in rows)  # for quote_hit

    out = tmp_path / "results.jsonl"
    first = run_memagent("eval", items, "-m", models["random"], *BUDGETS, "--out", out, "--limit", "2", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["n"] == 2
    done = [json.loads(line) for line in out.read_text().splitlines()]
    # rows are written as items finish: a batching engine (on a GPU, by default) ends them in any order
    assert sorted(d["id"] for d in done) == sorted(r["id"] for r in rows[:2])
    by_id = {r["id"]: r for r in rows}
    for d, r in ((d, by_id[d["id"]]) for d in done):
        assert d["answers"] == r["answers"] and d["steps"] >= 2 and set(d) >= {"sub_em", "em", "f1", "prediction"}

    again = run_memagent("eval", items, "-m", models["random"], *BUDGETS, "--out", out, "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["n"] == 3 and summary["failed"] == 0
    lines = out.read_text().splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert ids[:2] == [d["id"] for d in done] and ids[2] == rows[2]["id"]  # only the third was run
    assert again.stderr.count(": wrong") + again.stderr.count(": right") == 1
    # each row says what made it, as ask --json does; a rerun made another way keeps none of them
    last = json.loads(lines[-1])
    assert last["model"]["path"] == str(models["random"]) and last["settings"]["chunk_tokens"] == 128
    kept = out.read_bytes()
    other = run_memagent("eval", items, "-m", models["random"], *BUDGETS, "--chunk-tokens", "64", "--out", out)
    assert other.returncode == 2 and "results.jsonl holds results made with --chunk-tokens 128; this run has 64" in other.stderr
    assert out.read_bytes() == kept


def test_an_item_runs_as_ask_runs_its_question(models, tmp_path):
    """eval and `ask` share one run pipeline: an item's run and row are what `ask` gives for the
    same context and question."""
    from memagent_cli import AgentConfig, EmbeddedOptions, ask
    from memagent_cli.core.events import RunFinished
    from memagent_cli.evals.evaluation import ItemScored, evaluate_events

    context, question = words(400, seed=7), "Where did the fox run?"
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "x", "context": context, "input": question, "answers": ["mills"]}) + "\n")
    doc = tmp_path / "context.txt"
    doc.write_text(context)
    config = AgentConfig(chunk_tokens=128, memory_tokens=6, answer_tokens=6, temperature=0, final="answer-is")
    engine = EmbeddedOptions(threads=1)
    events = [
        e for _, e in evaluate_events(data, model=str(models["random"]), config=config, engine=engine, parallel=1, skip=set())
    ]
    (result,) = [e.result for e in events if isinstance(e, RunFinished)]
    (row,) = [e.row for e in events if isinstance(e, ItemScored)]
    alone = ask(question, [str(doc)], model=models["random"], config=config, engine=engine)
    assert [s.memory for s in result.steps] == [s.memory for s in alone.steps] and len(alone.steps) >= 3
    assert (result.answer, result.raw_answer, result.document_tokens) == (alone.answer, alone.raw_answer, alone.document_tokens)
    assert set(row) == {"id", "question", "answers", "prediction", "found", "raw", "sub_em", "em", "f1", "steps"} | {
        "document_tokens",
        "seconds",
        "model",
        "settings",
    }
    assert row["raw"] == alone.raw_answer and row["steps"] == len(alone.steps)
    assert (row["model"], row["settings"]) == (alone.to_dict()["model"], alone.to_dict()["settings"])  # one shape
    assert row["document_tokens"] == alone.document_tokens
    assert row["prediction"] == (alone.answer if row["found"] else "")


def test_eval_scores_like_the_reference(models, tmp_path):
    """A model that writes garbage scores 0; gold answers that are substrings of everything
    (an empty-normalizing answer) must not score either."""
    data = tmp_path / "items.json"
    data.write_text(
        json.dumps(
            [
                {"id": "a", "context": "The sky is blue. " * 40, "input": "What colour?", "answers": ["blue"]},
                {"context": "Nothing here. " * 30, "input": "What?", "answers": ["The."]},
            ]
        )
    )
    done = run_memagent("eval", data, "-m", models["random"], *BUDGETS, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"schema": 1, "n": 2, "sub_em": 0.0, "em": 0.0, "f1": 0.0, "failed": 0, "out": None}


def test_bad_data_is_one_line(models, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"context": "x", "input": "q", "answers": ["a"]}\n{"context": "x"}\n')
    done = run_memagent("eval", data, "-m", models["random"], *BUDGETS)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f'error: {data} line 2 needs "context", the question ("input" or "question") and the answer ("answers", a list, '
        'or "answer", a text); "id", "instructions", "random_string_to_prepend", "needle", "schema" (or "schema_multi")'
        ' and "data" (the expected data, which may stand for the answer) are optional.'
    )
    nothing = run_memagent("eval", tmp_path / "none.jsonl", "-m", models["random"])
    assert nothing.returncode == 2 and "is not a file" in nothing.stderr
    small = run_memagent("eval", "make-niah", "--tokens", "5", "--needles", "3", "-o", tmp_path / "x.jsonl")
    assert small.returncode == 2 and "Traceback" not in small.stderr


def test_eval_takes_the_engine_flags_ask_takes_through_the_same_settings(models, tmp_path):
    """--gpu-layers (and the configured threads) reach eval's engine by the function ask uses: a
    bad value is refused by both in the same words, and a good one runs."""
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"context": "The sky is blue. " * 20, "input": "What colour?", "answers": ["blue"]}) + "\n")
    doc = tmp_path / "doc.txt"
    doc.write_text("The sky is blue. " * 20)
    bad_eval = run_memagent("eval", data, "-m", models["random"], *BUDGETS, "--gpu-layers", "lots")
    bad_ask = run_memagent("ask", doc, "What colour?", "-m", models["random"], *BUDGETS, "--gpu-layers", "lots")
    assert bad_eval.returncode == bad_ask.returncode == 2  # a usage error
    assert bad_eval.stderr.splitlines()[-1] == bad_ask.stderr.splitlines()[-1] and "gpu" in bad_eval.stderr.lower()
    good = run_memagent("eval", data, "-m", models["random"], *BUDGETS, "--gpu-layers", "0", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["n"] == 1


# --- items converted from QwenLong-L1.5's sets (MRCR, CorpusQA) -----------------------------------


def test_items_in_the_mrcr_and_corpusqa_layouts_are_read(tmp_path):
    from memagent_cli.evals.evaluation import Item, read_items

    objects = [
        # MRCR's own fields, with its extra ones (n_needles) ignored
        {"id": "m1", "context": "c1", "question": "q1", "answer": "XYpoem", "random_string_to_prepend": "XY", "n_needles": 2},
        # CorpusQA-style: a core question, and how the answer is written
        {"context": "c2", "question": "q2", "answer": "42", "instructions": "Answer with a number only."},
        # the RULER-HotpotQA names win over the aliases
        {"context": "c3", "input": "q3", "question": "not this", "answers": ["a", "b"], "answer": "not this"},
        {"context": "c4", "input": "q4", "answers": "one", "instructions": None, "random_string_to_prepend": None},
    ]
    expected = [
        Item("m1", "c1", "q1", ["XYpoem"], None, "XY"),
        Item("2", "c2", "q2", ["42"], "Answer with a number only.", None),
        Item("3", "c3", "q3", ["a", "b"]),
        Item("4", "c4", "q4", ["one"]),
    ]
    jsonl, array = tmp_path / "items.jsonl", tmp_path / "items.json"
    jsonl.write_text("".join(json.dumps(o) + "\n" for o in objects))
    array.write_text(json.dumps(objects))
    assert list(read_items(jsonl)) == list(read_items(array)) == expected


def test_a_bad_item_in_the_new_layout_is_one_line_and_jsonl_is_read_as_it_goes(tmp_path):
    from memagent_cli.errors import MemagentError
    from memagent_cli.evals.evaluation import read_items

    good = json.dumps({"context": "c", "question": "q", "answer": "a"})
    for bad, says in [
        (
            {"context": "c", "question": "q", "answer": "a", "instructions": ["Be brief."]},
            'line 2: "instructions" is not a text.',
        ),
        ({"context": "c", "question": "q", "answer": "a", "random_string_to_prepend": 7}, '"random_string_to_prepend" is not'),
        ({"context": "c", "question": "q", "answer": []}, 'line 2 needs "context", the question ("input" or "question")'),
        ({"context": "c", "answer": "a"}, 'line 2 needs "context", the question ("input" or "question")'),
    ]:
        data = tmp_path / "items.jsonl"
        data.write_text(good + "\n" + json.dumps(bad) + "\n" + "not json\n")
        items = read_items(data)
        assert next(items).question == "q"  # the first item comes before the second is read
        with pytest.raises(MemagentError) as caught:
            next(items)
        message = str(caught.value)
        assert says in message and "\n" not in message and "random_string_to_prepend" in message, message


CODEWORD_BUDGETS = ["--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "24", "--final", "boxed"]


def codeword_items(doc, *extra: dict) -> list[dict]:
    """MRCR-layout items over one code-word document: one whose prefix is empty (any answer
    starts with it), one whose answer must start with "Zq7" (the model never writes it)."""
    return [
        {"id": "open", "context": doc.text, "question": QUESTION, "answer": doc.value, "random_string_to_prepend": ""},
        {"id": "zq7", "context": doc.text, "question": QUESTION, "answer": "Zq7" + doc.value, "random_string_to_prepend": "Zq7"},
        *extra,
    ]


def test_an_items_instructions_reach_its_final_prompt_only_and_mrcr_grades_the_answer(tmp_path):
    """Three items over one document on the trained code-word model: the one with instructions
    starts its run with them in its config, reads the document with the same memory prompts as
    the others, and gets a final prompt that holds them; MRCR grades the answers."""
    from memagent_cli import AgentConfig, EmbeddedOptions
    from memagent_cli.core.events import AnswerFinished, RunFinished, RunStarted
    from memagent_cli.core.protocols import get
    from memagent_cli.evals.evaluation import ItemScored, evaluate_events, summary
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    doc = whole_fact(200, 3, where=0.5)
    told = "Write the code word in capitals."
    items = codeword_items(
        doc, {"id": "told", "context": doc.text, "input": QUESTION, "answers": [doc.value], "instructions": told}
    )
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items))
    config = AgentConfig(chunk_tokens=64, memory_tokens=32, answer_tokens=24, temperature=0, final="boxed")
    started, answered, finished, rows = {}, {}, {}, {}
    for item, event in evaluate_events(
        data, model=str(CODEWORD_MODEL), config=config, engine=EmbeddedOptions(threads=1), parallel=1, skip=set()
    ):
        if isinstance(event, RunStarted):
            started[item.id] = event
        elif isinstance(event, AnswerFinished):
            answered[item.id] = event
        elif isinstance(event, RunFinished):
            finished[item.id] = event.result
        elif isinstance(event, ItemScored):
            rows[item.id] = event.row

    assert {k: e.config.instructions for k, e in started.items()} == {"open": "", "zq7": "", "told": told}
    assert started["told"].question == QUESTION  # the question stays the core question
    steps = {k: [(s.prompt_tokens, s.memory) for s in r.steps] for k, r in finished.items()}
    assert steps["told"] == steps["open"] and len(steps["open"]) >= 3  # the memory updates never see them
    info = read_gguf(CODEWORD_MODEL)
    chat, tokenizer, protocol = ChatFormat.from_gguf(info), load_tokenizer(info), get("memagent")
    memory = finished["told"].steps[-1].memory
    with_them = len(chat.encode(tokenizer, protocol.final_prompt(QUESTION, memory, "boxed", told)))
    without = len(chat.encode(tokenizer, protocol.final_prompt(QUESTION, memory, "boxed")))
    assert answered["told"].prompt_tokens == with_them > without == answered["open"].prompt_tokens

    assert rows["open"]["prediction"] == doc.value and rows["open"]["mrcr"] == 1.0
    assert rows["zq7"]["prediction"] == doc.value and rows["zq7"]["mrcr"] == 0.0  # no "Zq7" first
    assert "mrcr" not in rows["told"]  # no random_string_to_prepend: not graded by MRCR
    assert summary(list(rows.values()))["mrcr"] == 50.0


def test_eval_reports_the_mrcr_average_in_json_and_in_the_table(tmp_path):
    doc = whole_fact(200, 3, where=0.5)
    data = tmp_path / "mrcr.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in codeword_items(doc)))
    out = tmp_path / "results.jsonl"
    run = ["eval", data, "-m", CODEWORD_MODEL, *CODEWORD_BUDGETS, "--temperature", "0", "--threads", "1"]
    done = run_memagent(*run, "--out", out, "--json")
    assert done.returncode == 0, done.stderr
    # "amber falcon" against "Zq7amber falcon": sub_em right, em wrong, f1 1/2 ("falcon"); MRCR 0.
    assert json.loads(done.stdout) == {
        "schema": 1,
        "n": 2,
        "sub_em": 100.0,
        "em": 50.0,
        "f1": 75.0,
        "mrcr": 50.0,
        "failed": 0,
        "out": str(out),
    }
    assert sorted(json.loads(line)["mrcr"] for line in out.read_text().splitlines()) == [0.0, 1.0]
    assert "open: mrcr 1.00" in done.stderr and "zq7: mrcr 0.00" in done.stderr

    table = run_memagent(*run, "--out", out)  # everything done: the table from the results file
    assert table.returncode == 0, table.stderr
    rows = [line.strip("┃│ ").replace("┃", "│").split("│") for line in table.stdout.splitlines() if line.startswith(("┃", "│"))]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["n", "mrcr", "sub_em", "em", "f1"],
        ["2", "50.00", "100.00", "50.00", "75.00"],
    ]

    plain = run_memagent(*run, "--metric", "sub_em", "--out", tmp_path / "plain.jsonl", "--json")
    assert plain.returncode == 0, plain.stderr
    assert "mrcr" not in json.loads(plain.stdout)


def test_quote_hit_is_the_share_of_items_whose_quotes_hold_their_needle(tmp_path):
    """Items with a "needle" (make-niah writes the asked one) are scored on whether the run's quotes
    hold it; items without one are not counted."""
    from testkit.codeword import fact_sentence

    doc = whole_fact(200, 3, where=0.5)
    items = [
        {"id": "hit", "context": doc.text, "input": QUESTION, "answers": [doc.value], "needle": fact_sentence(doc.value)},
        {"id": "miss", "context": doc.text, "input": QUESTION, "answers": [doc.value], "needle": "A sentence not in it."},
        {"id": "none", "context": doc.text, "input": QUESTION, "answers": [doc.value]},
    ]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items))
    out = tmp_path / "results.jsonl"
    run = ["eval", data, "-m", CODEWORD_MODEL, *CODEWORD_BUDGETS, "--temperature", "0", "--threads", "1", "--out", out]
    done = run_memagent(*run, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["sub_em"] == 100.0 and summary["quote_hit"] == 50.0
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["hit"]["quote_hit"] == 1.0 and rows["miss"]["quote_hit"] == 0.0 and "quote_hit" not in rows["none"]


def test_the_cli_offers_the_metrics_scoring_knows():
    from memagent_cli.cli.evals import MetricChoice
    from memagent_cli.evals.scoring import METRICS

    assert tuple(m.value for m in MetricChoice) == METRICS
