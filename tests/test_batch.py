"""`memagent batch JOB.jsonl -o RESULTS.jsonl` on the trained code-word model: every line's result
keyed by its custom_id, failed lines redone by a rerun, an interrupted job resumed through the trace
store with nothing finished done again; and the scheduler's batched path (`--batch on`) giving the
answers one-at-a-time runs give."""

from __future__ import annotations

import json
import os
import random
import sqlite3

import pytest
from helpers import CODEWORD_ASK, read_line, run_memagent, spawn_memagent, wait_until, whole_fact

from testkit.codeword import QUESTION, make_document

RUN = [*CODEWORD_ASK, "--temperature", "0", "--threads", "1"]


def write_job(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def results(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_batch_lines_of_every_kind_and_a_rerun_redoes_only_the_failed(tmp_path):
    a, b = whole_fact(300, 1), whole_fact(300, 40)
    (tmp_path / "a.txt").write_text(a.text, encoding="utf-8")
    job = write_job(
        tmp_path / "job.jsonl",
        [
            {"custom_id": "from-file", "sources": ["a.txt"], "question": QUESTION},
            {"custom_id": "inline", "context": b.text, "question": QUESTION},
            {"custom_id": "two", "sources": ["a.txt"], "questions": [QUESTION, QUESTION]},
            {"custom_id": "later", "sources": ["b.txt"], "question": QUESTION},
        ],
    )
    first = run_memagent("batch", job, "-o", "out.jsonl", *RUN, cwd=tmp_path)
    assert first.returncode == 1 and "1 line(s) failed (first: later: b.txt: no such file" in first.stderr
    got = {r["custom_id"]: r for r in results(tmp_path / "out.jsonl")}
    assert got["from-file"]["answer"] == a.value and got["from-file"]["trace"]
    assert got["inline"]["answer"] == b.value
    assert [r["answer"] for r in got["two"]["results"]] == [a.value, a.value] and "error" not in got["two"]
    assert "no such file" in got["later"]["error"]

    (tmp_path / "b.txt").write_text(b.text, encoding="utf-8")
    again = run_memagent("batch", job, "-o", "out.jsonl", *RUN, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"schema": 1, "done": 1, "failed": 0, "skipped": 3, "reused": 0, "out": "out.jsonl"}
    rows = results(tmp_path / "out.jsonl")
    assert [r["custom_id"] for r in rows] == ["from-file", "inline", "two", "later"]  # one line per id: the error went
    assert rows[:3] == list(got.values())[:3] and rows[3]["answer"] == b.value
    listed = json.loads(run_memagent("traces", "list", "--json", "--limit", "100", cwd=tmp_path).stdout)["runs"]
    assert len(listed) == 5  # from-file, inline, two questions, and later once it could be read: none twice

    third = run_memagent("batch", job, "-o", "out.jsonl", *RUN, cwd=tmp_path)
    assert third.returncode == 0 and "Nothing to do: all 4 lines" in third.stderr


def test_a_rerun_with_another_model_or_budget_refuses_the_results_it_did_not_make(tmp_path):
    """Finished lines are kept by a rerun only where it would make them the same way: another
    --chunk-tokens or another model is one usage line and the file untouched, where it said "Nothing
    to do" and kept the first setup's answers as the second's."""
    doc = tmp_path / "a.txt"
    doc.write_text(whole_fact(300, 1).text, encoding="utf-8")
    job = write_job(tmp_path / "job.jsonl", [{"custom_id": "a", "sources": [str(doc)], "question": QUESTION}])
    out = tmp_path / "out.jsonl"
    assert run_memagent("batch", job, "-o", out, *RUN).returncode == 0
    kept = out.read_bytes()
    other = run_memagent("batch", job, "-o", out, *RUN, "--chunk-tokens", "128")
    assert other.returncode == 2 and "out.jsonl holds results made with --chunk-tokens 64; this run has 128." in other.stderr
    schema_model = CODEWORD_ASK[1].with_name("schema.gguf")
    moved = run_memagent("batch", job, "-o", out, *RUN, "-m", schema_model)
    assert moved.returncode == 2 and "holds results made with --model" in moved.stderr and "schema.gguf" in moved.stderr
    assert out.read_bytes() == kept
    same = run_memagent("batch", job, "-o", out, *RUN, "--parallel", "2")  # how it runs is not what it makes
    assert same.returncode == 0 and "Nothing to do" in same.stderr and out.read_bytes() == kept


def test_results_kept_in_a_folder_a_line_asks_are_not_read_by_the_next_line(tmp_path):
    """-o inside the folder the job asks: the second line's walk (after the first line's result is
    in the file) skips it with a note, so both lines read the same two documents."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, seed in (("a.txt", 1), ("b.txt", 40)):
        (docs / name).write_text(whole_fact(300, seed).text, encoding="utf-8")
    job = write_job(tmp_path / "job.jsonl", [{"custom_id": n, "sources": ["docs"], "question": QUESTION} for n in ("one", "two")])
    done = run_memagent("batch", job, "-o", "docs/results.jsonl", *RUN, "--parallel", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "skipped docs/results.jsonl (written by this command)" in done.stderr
    got = results(docs / "results.jsonl")
    assert [r["custom_id"] for r in got] == ["one", "two"]
    assert got[0]["document_tokens"] == got[1]["document_tokens"]
    assert [s["path"] for s in got[1]["sources"]] == [os.path.join("docs", "a.txt"), os.path.join("docs", "b.txt")]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"custom_id": "a", "context": "x", "question": "q"}', "{not json"], "job.jsonl line 2 is not valid JSON"),
        (['{"custom_id": "a", "context": "x", "question": "q"}'] * 2, "custom_id 'a' is used twice"),
        (['{"custom_id": "a", "context": "x", "sources": ["y"], "question": "q"}'], 'exactly one of "sources"'),
        (['{"custom_id": "a", "context": "x"}'], 'give one of "question" and "questions" (or a "schema"'),
        (['{"custom_id": "a", "context": "x", "question": "q", "questions": ["r"]}'], 'exactly one of "question"'),
        (['{"context": "x", "question": "q"}'], '"custom_id" must be a non-empty string'),
        (['{"custom_id": "a", "sources": [], "question": "q"}'], '"sources" must be a non-empty list'),
    ],
)
def test_batch_checks_the_whole_file_before_loading(tmp_path, lines, message):
    (tmp_path / "job.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run_memagent("batch", "job.jsonl", "-o", "out.jsonl", "-m", tmp_path / "no-such-model.gguf", cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_batch_interrupted_then_resumed_repeats_nothing(tmp_path, memagent_home, spawned):
    docs = []
    for k in range(2):  # thousands of steps: the signal lands mid-run
        doc = make_document(random.Random(k + 20), 30000, where=0.9)
        (tmp_path / f"big{k}.txt").write_text(doc.text, encoding="utf-8")
        docs.append(doc)
    job = write_job(
        tmp_path / "job.jsonl", [{"custom_id": f"big{k}", "sources": [f"big{k}.txt"], "question": QUESTION} for k in range(2)]
    )
    proc = spawn_memagent("batch", job, "-o", "out.jsonl", *RUN, cwd=tmp_path)
    spawned.append(proc)
    assert read_line(proc).startswith("[1/2] big0: answered")  # the first is done; the second has begun
    db = sqlite3.connect(memagent_home / "traces.db")
    steps = "SELECT count(*) FROM steps JOIN runs ON runs.id = run_id WHERE question = ? AND runs.status = 'running'"
    wait_until(lambda: db.execute(steps, (QUESTION,)).fetchone()[0] >= 5, proc, what="5 steps of the second run")
    proc.send_signal(2)  # SIGINT, Ctrl-C
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Run the same command again to go on" in err and "Traceback" not in err
    (first,) = results(tmp_path / "out.jsonl")
    assert first["custom_id"] == "big0" and first["answer"] == docs[0].value
    stopped = [
        r
        for r in json.loads(run_memagent("traces", "list", "--json", cwd=tmp_path).stdout)["runs"]
        if r["status"] == "interrupted"
    ]
    assert len(stopped) == 1 and stopped[0]["step_count"] >= 5

    again = run_memagent("batch", job, "-o", "out.jsonl", *RUN, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "1 line(s) already done in out.jsonl: skipped, resuming 1 interrupted run(s)" in again.stderr
    rows = results(tmp_path / "out.jsonl")
    assert [r["custom_id"] for r in rows] == ["big0", "big1"] and rows[0] == first
    assert rows[1]["answer"] == docs[1].value and rows[1]["trace"] == stopped[0]["id"]  # the same run, gone on
    runs = json.loads(run_memagent("traces", "list", "--json", cwd=tmp_path).stdout)["runs"]
    assert len(runs) == 2 and all(r["status"] == "complete" for r in runs)  # big0 was not run again


def test_batched_each_gives_the_answers_of_runs_one_at_a_time(tmp_path):
    """--batch on: several runs share one llama.cpp context, as on a GPU (here on the CPU, to test
    the path): the same answers as the runs one after another."""
    docs = [whole_fact(300, s) for s in (1, 40, 80)]
    for k, doc in enumerate(docs):
        (tmp_path / f"d{k}.txt").write_text(doc.text, encoding="utf-8")
    names = [f"d{k}.txt" for k in range(3)]
    one = run_memagent("ask", *names, "--each", "-q", QUESTION, *RUN, "--no-batch", "--json", "--no-trace", cwd=tmp_path)
    many = run_memagent(
        "ask", *names, "--each", "-q", QUESTION, *RUN, "--batch", "--parallel", "3", "--json", "--no-trace", cwd=tmp_path
    )
    assert one.returncode == 0 and many.returncode == 0, many.stderr
    alone, batched = json.loads(one.stdout)["results"], json.loads(many.stdout)["results"]
    assert [r["answer"] for r in alone] == [d.value for d in docs]
    assert [r["answer"] for r in batched] == [d.value for d in docs]
    assert batched[0]["device"].endswith("3 sequences batched") and "batched" not in alone[0]["device"]
