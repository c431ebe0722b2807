"""Several questions over the same sources: each its own memory stream, trace and result."""

from __future__ import annotations

import json

from helpers import run_memagent, words

BUDGETS = ["--chunk-tokens", "96", "--memory-tokens", "6", "--answer-tokens", "6", "--temperature", "0", "--threads", "1"]


def _doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(500, seed=3))
    return path


def test_each_question_is_its_own_stream(models, tmp_path):
    doc = _doc(tmp_path)
    many = run_memagent("ask", "-m", models["random"], doc, "-q", "Who?", "-q", "Where exactly?", *BUDGETS, "--json")
    assert many.returncode == 0, many.stderr
    results = json.loads(many.stdout)["results"]
    assert [r["question"] for r in results] == ["Who?", "Where exactly?"]
    assert len({r["trace"] for r in results}) == 2
    for r in results:
        alone = run_memagent("ask", "-m", models["random"], doc, r["question"], *BUDGETS, "--json")
        single = json.loads(alone.stdout)
        # Interleaved with another question (and sharing the engine's cache), each question
        # writes exactly the memories it writes alone.
        assert [s["memory"] for s in r["steps"]] == [s["memory"] for s in single["steps"]]
        assert r["answer"] == single["answer"]
        assert len(r["steps"]) == single["document_tokens"] // 96 + (single["document_tokens"] % 96 > 0)
    assert [s["memory"] for s in results[0]["steps"]] != [s["memory"] for s in results[1]["steps"]]


def test_questions_file_lines_and_jsonl(models, tmp_path):
    doc = _doc(tmp_path)
    qfile = tmp_path / "q.txt"
    qfile.write_text('What happened?\n\n{"question": "Who was there?"}\n{"input": "When?"}\n')
    done = run_memagent("ask", "-m", models["random"], doc, "--questions", qfile, *BUDGETS)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("Q")] == [
        "Q1: What happened?",
        "Q2: Who was there?",
        "Q3: When?",
    ]
    # Not a terminal: one progress line per question and step, numbered.
    assert "Q3 step 1/" in done.stderr and "Q1 answered:" in done.stderr
    listed = run_memagent("traces", "list", "--json")
    assert sorted(r["question"] for r in json.loads(listed.stdout)["runs"]) == ["What happened?", "When?", "Who was there?"]


def test_piped_stdin_is_read_once_for_all_questions(models, tmp_path):
    text = words(300, seed=5)
    done = run_memagent("ask", "-m", models["random"], "-q", "One?", "-q", "Two?", *BUDGETS, "--json", input=text)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["document_tokens"] for r in results] == [results[0]["document_tokens"]] * 2 and results[0]["document_tokens"] > 96


def test_bad_questions_file(models, tmp_path):
    doc = _doc(tmp_path)
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": 3}\n')
    done = run_memagent("ask", "-m", models["random"], doc, "--questions", bad)
    assert done.returncode == 2
    assert done.stderr.strip() == f'error: {bad} line 1 has no "question" or "input" text.'
    missing = run_memagent("ask", "-m", models["random"], doc, "--questions", tmp_path / "nope.txt")
    assert missing.returncode == 2 and "Cannot read --questions" in missing.stderr and "Traceback" not in missing.stderr
