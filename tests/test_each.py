"""`ask --each`: every document times every question, each its own run, on the trained code-word
model (tests/data/codeword.gguf) in the embedded engine: answers right and attributed to their own
file, the same as a single `ask` of that file, and the job's files (--json, --jsonl, --csv)."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import zipfile

import pytest
from helpers import CODEWORD_ASK, run_memagent, whole_fact

from testkit.codeword import QUESTION, make_document

RUN = [*CODEWORD_ASK, "--temperature", "0", "--threads", "1"]


@pytest.fixture
def folder(tmp_path):
    """Three documents, each with its own code word: two files and one inside a zip archive."""
    root = tmp_path / "docs"
    root.mkdir()
    values = {}
    for name, seed in (("a.txt", 1), ("b.txt", 40)):
        doc = whole_fact(300, seed)
        (root / name).write_text(doc.text, encoding="utf-8")
        values[f"docs/{name}"] = doc.value
    doc = whole_fact(300, 80)
    with zipfile.ZipFile(root / "more.zip", "w") as z:
        z.writestr("inner/c.txt", doc.text)
    values["docs/more.zip/inner/c.txt"] = doc.value
    assert len(set(values.values())) == 3  # each file its own word: an answer names its file
    return tmp_path, values


def test_each_answers_every_document_from_its_own_text(folder):
    cwd, values = folder
    done = run_memagent("ask", "docs", "--each", "-q", QUESTION, *RUN, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["document"] for r in results] == list(values)
    for r in results:
        assert r["answer"] == values[r["document"]]
        assert [s["title"] for s in r["sources"]] == [r["document"]]  # its own run read its own file alone
        assert r["evidence"] and all(span["path"] == r["document"] for e in r["evidence"] for span in e["spans"])
        assert r["trace"]
    traces = {r["trace"] for r in results}
    assert len(traces) == 3  # a trace each
    listed = json.loads(run_memagent("traces", "list", "--json", cwd=cwd).stdout)["runs"]
    assert {run["id"] for run in listed} == traces and all(run["status"] == "complete" for run in listed)


def test_each_equals_single_ask_runs(folder):
    cwd, values = folder
    each = run_memagent("ask", "docs/a.txt", "docs/b.txt", "--each", "-q", QUESTION, *RUN, "--json", "--no-trace", cwd=cwd)
    assert each.returncode == 0, each.stderr
    for record in json.loads(each.stdout)["results"]:
        single = run_memagent("ask", record["document"], QUESTION, *RUN, "--json", "--no-trace", cwd=cwd)
        alone = json.loads(single.stdout)
        assert record["answer"] == alone["answer"] and record["raw_answer"] == alone["raw_answer"]
        assert [s["memory"] for s in record["steps"]] == [s["memory"] for s in alone["steps"]]
        assert record["evidence"] == alone["evidence"]


def test_each_files_csv_reads_back_and_jsonl_has_a_line_per_run(folder):
    cwd, values = folder
    done = run_memagent(
        "ask",
        "docs",
        "--each",
        "-q",
        QUESTION,
        "-q",
        "Which code word is it?",
        *RUN,
        "--csv",
        "out.csv",
        "--jsonl",
        "out.jsonl",
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    # stdout: each document's answers, in order; stderr: a line per finished run, then the totals
    for document, value in values.items():
        assert f"{document} · Q1: {QUESTION}\n{value}\n" in done.stdout
    assert done.stderr.count("answered in") == 6 and "runs 6/6" in done.stderr
    # utf-8-sig: the byte-order mark makes spreadsheets read UTF-8; csv reads it back field for field
    # the files get each run as it ends: in input order one run at a time, in any order where runs
    # go together (on a GPU); stdout and --json keep the input order
    rows = list(csv.DictReader(io.StringIO((cwd / "out.csv").read_text(encoding="utf-8-sig"))))
    asked = [(d, q) for d in values for q in (QUESTION, "Which code word is it?")]
    assert sorted([(r["document"], r["question"]) for r in rows], key=asked.index) == asked
    # the model was trained on one question: the other's answers are its own business
    assert {r["document"]: r["answer"] for r in rows if r["question"] == QUESTION} == values
    assert all(r["evidence"].startswith(r["document"] + " chars ") and len(r["trace"]) == 12 and r["error"] == "" for r in rows)
    lines = [json.loads(line) for line in (cwd / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(x["document"], x["question"], x["answer"]) for x in lines] == [
        (r["document"], r["question"], r["answer"]) for r in rows
    ]


def test_a_rerun_does_not_read_its_own_files_kept_in_the_folder_it_asks(folder):
    """--csv and --jsonl inside the folder being asked: the second run skips the files it writes (with
    a note) instead of asking them as two more documents; a file it does not write is still read."""
    cwd, values = folder
    args = ["ask", "docs", "--each", "-q", QUESTION, *RUN, "--csv", "docs/out.csv", "--jsonl", "docs/out.jsonl"]
    first = run_memagent(*args, cwd=cwd)
    assert first.returncode == 0 and "runs 3/3" in first.stderr, first.stderr
    again = run_memagent(*args, cwd=cwd)
    assert again.returncode == 0 and "runs 3/3" in again.stderr, again.stderr
    for name in ("out.csv", "out.jsonl"):
        assert f"skipped {os.path.join('docs', name)} (written by this command)" in again.stderr
    rows = list(csv.DictReader(io.StringIO((cwd / "docs" / "out.csv").read_text(encoding="utf-8-sig"))))
    assert {r["document"]: r["answer"] for r in rows} == values
    kept = run_memagent("ask", "docs", "--each", "-q", QUESTION, *RUN, "--csv", "docs/other.csv", cwd=cwd)
    assert kept.returncode == 0 and "runs 5/5" in kept.stderr, kept.stderr  # out.csv and out.jsonl are documents now


def test_each_csv_opens_in_a_spreadsheet_library(folder):
    """Read back as spreadsheets read CSV (RFC 4180, the csv module's excel dialect), a file name with
    a comma and quotes stays in its cell, and the byte-order mark tells them the text is UTF-8."""
    cwd, values = folder
    odd = cwd / "docs" / 'we, "quoted".txt'
    odd.write_text(whole_fact(200, 7).text, encoding="utf-8")
    done = run_memagent("ask", str(odd), "--each", "-q", QUESTION, *RUN, "--csv", "out.csv", cwd=cwd)
    assert done.returncode == 0, done.stderr
    raw = (cwd / "out.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    (row,) = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))
    assert row["document"] == 'docs/we, "quoted".txt' and row["question"] == QUESTION and row["answer"]


def test_each_goes_on_past_a_document_that_fails(folder):
    cwd, values = folder
    (cwd / "docs" / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf")
    done = run_memagent("ask", "docs", "--each", "-q", QUESTION, *RUN, "--json", cwd=cwd)
    assert done.returncode == 1
    results = json.loads(done.stdout)["results"]
    failed = [r for r in results if "error" in r]
    assert [r["document"] for r in failed] == ["docs/broken.pdf"] and "broken.pdf" in failed[0]["error"]
    assert {r["document"]: r["answer"] for r in results if "error" not in r} == values
    assert "error: docs/broken.pdf:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["docs", "q", "--jsonl", "x.jsonl"], "--jsonl, --csv and --html go with --each"),
        (["--each", "-q", "q"], "--each needs the sources to ask"),
        (["--each", "--resume", "last"], "--each does not take --resume"),
    ],
)
def test_each_usage_errors(folder, args, message):
    cwd, _ = folder
    done = run_memagent("ask", *args, *RUN, cwd=cwd)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") <= 2


def test_each_refuses_stdin_for_several_questions(folder):
    cwd, _ = folder
    done = run_memagent("ask", "-", "--each", "-q", "a?", "-q", "b?", *RUN, input="some text", cwd=cwd)
    assert done.returncode == 2 and "Standard input can be read once" in done.stderr


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batched"])
def test_each_interrupted_keeps_what_finished_and_each_stopped_run_resumes(tmp_path, memagent_home, spawned, batched):
    """Batched (a GPU's default, forced here on the CPU), both runs read together, and the Ctrl-C
    comes as the short one is said "answered": its answer and JSONL line must land all the same."""
    import sqlite3

    from helpers import read_line, spawn_memagent, wait_until

    # the first ends in about 50 steps, the second would take hundreds
    docs = [make_document(random.Random(k + 20), n, where=0.9) for k, n in enumerate((3000, 30000))]
    for k, doc in enumerate(docs):
        (tmp_path / f"big{k}.txt").write_text(doc.text, encoding="utf-8")
    batch = ["--batch", "--parallel", "2"] if batched else ["--no-batch"]
    proc = spawn_memagent("ask", "big0.txt", "big1.txt", "--each", QUESTION, *RUN, *batch, "--jsonl", "out.jsonl", cwd=tmp_path)
    spawned.append(proc)
    assert read_line(proc).startswith("[1/2] big0.txt: answered")
    db = sqlite3.connect(memagent_home / "traces.db")
    steps = "SELECT count(*) FROM steps JOIN runs ON runs.id = run_id WHERE runs.status = 'running'"
    wait_until(lambda: db.execute(steps).fetchone()[0] >= 5, proc, what="5 steps of the second run")
    proc.send_signal(2)  # SIGINT
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "1 run(s) stopped, each resumable:" in err and "Traceback" not in err
    assert out == f"big0.txt\n{docs[0].value}\n\n"  # piped: the finished answer was printed as it landed
    (line,) = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert line["document"] == "big0.txt" and line["answer"] == docs[0].value
    run_id = err.split("memagent ask --resume ")[1].split()[0]
    resumed = run_memagent("ask", "--resume", run_id, "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["answer"] == docs[1].value


def test_each_on_a_terminal_draws_the_table_then_prints_the_answers(folder):
    """stderr and stdout on one terminal: the table (rows with answers and evidence, the totals
    line) while it runs, the answers under it once it closes, and text from documents made visible."""
    import os
    import pty
    import subprocess
    import sys

    from helpers import drain_terminal

    cwd, values = folder
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "140", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("MEMAGENT_MODEL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", "ask", "docs", "--each", "-q", QUESTION, *map(str, RUN)],
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
    )
    os.close(follower)
    drawn = drain_terminal(leader).decode("utf-8", "replace")
    assert proc.wait(timeout=120) == 0
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)  # the styles and cursor moves, dropped
    assert "runs 3/3" in shown and "tokens read" in shown
    final = shown[shown.rindex("runs 3/3") :]  # the table's last drawing, then what was printed after it
    for document, value in values.items():
        row = re.search(re.escape(f"{value}  ({document} chars "), final)  # its row: the answer, the evidence's place
        printed = final.find(f"{document}\r\n{value}\r\n")  # printed once the table has closed
        assert row is not None and printed > row.start(), final
