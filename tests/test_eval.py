"""`memagent eval`: data sets in, scored results out, reruns skip what is done."""

from __future__ import annotations

import json

from helpers import run_memagent, words

BUDGETS = ["--chunk-tokens", "128", "--memory-tokens", "6", "--answer-tokens", "6", "--temperature", "0", "--threads", "1"]


def test_make_niah_then_eval_with_out_file_and_rerun(models, tmp_path):
    items = tmp_path / "niah.jsonl"
    made = run_memagent(
        "eval", "make-niah", "--tokens", "300", "--needles", "2", "--n", "3", "--seed", "4", "-o", items, "-m", models["random"]
    )
    assert made.returncode == 0, made.stderr
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    assert len(rows) == 3 and all(r["answers"][0] in r["context"] for r in rows)

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


def test_an_item_runs_as_ask_runs_its_question(models, tmp_path):
    """eval and `ask` share one run pipeline: an item's run and row are what `ask` gives for the
    same context and question."""
    from memagent_cli import AgentConfig, EngineOptions, ask
    from memagent_cli.core.events import RunFinished
    from memagent_cli.evals.evaluation import ItemScored, evaluate_events

    context, question = words(400, seed=7), "Where did the fox run?"
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "x", "context": context, "input": question, "answers": ["mills"]}) + "\n")
    doc = tmp_path / "context.txt"
    doc.write_text(context)
    config = AgentConfig(chunk_tokens=128, memory_tokens=6, answer_tokens=6, temperature=0, final="answer-is")
    engine = EngineOptions(threads=1)
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
    }
    assert row["raw"] == alone.raw_answer and row["steps"] == len(alone.steps)
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
        f'error: {data} line 2 needs "context" and "input" texts and a non-empty "answers" list.'
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
    assert bad_eval.returncode == bad_ask.returncode != 0
    assert bad_eval.stderr.splitlines()[-1] == bad_ask.stderr.splitlines()[-1] and "gpu" in bad_eval.stderr.lower()
    good = run_memagent("eval", data, "-m", models["random"], *BUDGETS, "--gpu-layers", "0", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["n"] == 1
