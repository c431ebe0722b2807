"""Traces end to end: real `memagent` processes, a real SQLite store in MEMAGENT_HOME."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from helpers import REPO, read_line, run_memagent, spawn_memagent, wait_for_steps, words

GREEDY = ["--temperature", "0"]
SMALL = ["--chunk-tokens", "200", "--memory-tokens", "24", "--answer-tokens", "8", *GREEDY]


def memagent(*args, input=None, cwd=None, check=True):
    proc = run_memagent(*args, input=input, cwd=cwd)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def as_json(*args, **kwargs):
    return json.loads(memagent(*args, "--json", **kwargs).stdout)


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(4000), encoding="utf-8")
    return path


def start_and_stop(args, sig, after_steps=2, cwd=None):
    """Starts `memagent ask`, waits for `after_steps` step lines, sends `sig`."""
    proc = spawn_memagent("ask", *args, cwd=cwd)
    try:
        for _ in range(after_steps):
            assert read_line(proc).startswith("step ")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:  # a failed assertion must not leave the run going
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode, out, err


def test_every_run_is_recorded_with_its_steps(doc, models):
    out = as_json("ask", doc, "Where?", "-m", models["random"], *SMALL)
    runs = as_json("traces", "list")["runs"]
    assert [r["id"] for r in runs] == [out["trace"]]
    assert runs[0]["status"] == "complete" and runs[0]["step_count"] == len(out["steps"])
    shown = as_json("traces", "show", out["trace"][:4])
    assert [s["memory"] for s in shown["steps"]] == [s["memory"] for s in out["steps"]]
    assert shown["question"] == "Where?" and shown["answer"] == out["answer"]
    source = shown["sources"][0]
    assert source["sha256"] and source["size"] == doc.stat().st_size and source["tokens"] == out["document_tokens"]
    assert shown["steps"][0]["spans"][0]["path"] == str(doc)
    assert shown["settings"]["chunk_tokens"] == 200 and shown["settings"]["n_ctx"] > 0
    assert "evidence" in out and all(isinstance(e["step"], int) for e in out["evidence"])


def test_no_trace_records_nothing(doc, models, memagent_home):
    out = as_json("ask", doc, "q", "-m", models["random"], "--no-trace", *SMALL)
    assert "trace" not in out
    assert as_json("traces", "list")["runs"] == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_resumes_to_the_same_result(doc, models, sig):
    whole = as_json("ask", doc, "Where?", "-m", models["random"], "--no-trace", *SMALL)
    code, out, err = start_and_stop([doc, "Where?", "-m", models["random"], *SMALL], sig)
    assert code == 130 and out == ""
    assert "Traceback" not in err and "Resume with: memagent ask --resume " in err
    (run,) = as_json("traces", "list")["runs"]
    assert run["status"] == "interrupted" and 2 <= run["step_count"] < len(whole["steps"])

    resumed = as_json("ask", "--resume", "last")
    assert len(resumed["steps"]) == len(whole["steps"])
    assert [s["memory"] for s in resumed["steps"]] == [s["memory"] for s in whole["steps"]]
    assert resumed["memory"] == whole["memory"] and resumed["answer"] == whole["answer"]
    assert resumed["document_tokens"] == whole["document_tokens"]
    assert set(resumed) == set(whole) | {"trace"}
    (run,) = as_json("traces", "list")["runs"]
    assert run["status"] == "complete" and run["step_count"] == len(whole["steps"])


def test_resume_of_a_folder_skips_its_unreadable_file_again(models, tmp_path):
    """A run of a folder holding an unreadable file, interrupted and resumed: the trace says which
    documents were found in the folder, so the resumed run skips the bad one with the same note (named
    alone it would be an error) instead of failing on it."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text(words(4000), encoding="utf-8")
    (tmp_path / "docs" / "z.docx").write_bytes(b"PK\x03\x04 not really a zip")
    note = "warning: skipped docs/z.docx (it is damaged, truncated or not a Word file (File is not a zip file))"
    proc = spawn_memagent("ask", "docs", "Where?", "-m", models["random"], *SMALL, cwd=tmp_path)
    try:
        wait_for_steps(proc, 2)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130
    (run,) = as_json("traces", "list", cwd=tmp_path)["runs"]
    shown = as_json("traces", "show", run["id"], cwd=tmp_path)
    assert [(s["title"], s.get("found")) for s in shown["sources"]] == [("docs/a.txt", True), ("docs/z.docx", True)]

    resumed = run_memagent("ask", "--resume", run["id"], "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert note in resumed.stderr.splitlines()
    assert json.loads(resumed.stdout)["trace"] == run["id"]
    assert as_json("traces", "show", run["id"], cwd=tmp_path)["status"] == "complete"


def test_resume_refuses_changed_sources_and_finished_runs(doc, models, tmp_path):
    code, _, _ = start_and_stop([doc, "q", "-m", models["random"], *SMALL], signal.SIGINT)
    assert code == 130
    doc.write_text(doc.read_text() + " changed", encoding="utf-8")
    changed = memagent("ask", "--resume", "last", check=False)
    assert changed.returncode == 1 and "has changed since run" in changed.stderr
    done = as_json("ask", doc, "q", "-m", models["random"], *SMALL)
    again = memagent("ask", "--resume", done["trace"], check=False)
    assert again.returncode == 2 and "already complete" in again.stderr
    unknown = memagent("ask", "--resume", "zzzz", check=False)
    assert unknown.returncode == 1 and "zzzz" in unknown.stderr


def test_resume_works_from_another_directory(doc, models, tmp_path):
    code, _, _ = start_and_stop(["doc.txt", "q", "-m", models["random"], *SMALL], signal.SIGINT, cwd=doc.parent)
    assert code == 130
    resumed = as_json("ask", "--resume", "last", cwd=tmp_path.parent)
    assert resumed["sources"][0]["path"] == "doc.txt" and len(resumed["steps"]) > 2


def test_stdin_runs_resume_with_the_same_text_piped_again(models, tmp_path, spawned):
    text = words(4000)
    piped = tmp_path / "in.txt"
    piped.write_text(text, encoding="utf-8")
    with open(piped, "rb") as stdin:
        proc = spawn_memagent("ask", "q", "-m", models["random"], *SMALL, stdin=stdin)
        spawned.append(proc)
        for _ in range(2):
            assert read_line(proc).startswith("step ")
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    other = memagent("ask", "--resume", "last", "--json", input=words(4000, seed=9), check=False)
    assert other.returncode == 1 and ("differs" in other.stderr)
    resumed = as_json("ask", "--resume", "last", input=text)
    whole = as_json("ask", "q", "-m", models["random"], "--no-trace", *SMALL, input=text)
    assert [s["memory"] for s in resumed["steps"]] == [s["memory"] for s in whole["steps"]]


def test_two_runs_at_once_are_both_recorded(doc, models):
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    args = [sys.executable, "-m", "memagent_cli", "ask", str(doc), "q", "-m", str(models["random"]), "--json", *SMALL]
    procs = [
        subprocess.Popen(args + ["--seed", str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        for n in (1, 2)
    ]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    runs = {r["id"]: r for r in as_json("traces", "list")["runs"]}
    assert set(runs) == {o["trace"] for o in outs}
    for out in outs:
        assert runs[out["trace"]]["status"] == "complete" and runs[out["trace"]]["step_count"] == len(out["steps"])
        shown = as_json("traces", "show", out["trace"])
        assert [s["memory"] for s in shown["steps"]] == [s["memory"] for s in out["steps"]]


# The traces commands, each on its own test, over two runs recorded once per module (each test
# reads a copy of that store, so that rm in one is not seen by another): `first` asked of the model
# whose memory is one token repeated (each step's change is plain), `second` a question that is markup.


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, models):
    base = tmp_path_factory.mktemp("traces")
    doc = base / "doc.txt"
    doc.write_text(words(4000), encoding="utf-8")
    home = base / "home"
    runs = {}
    for name, question, model in (("first", "Where did the fox run?", "long"), ("second", "<script>alert(1)</script>", "random")):
        done = run_memagent("ask", doc, question, "-m", models[model], *SMALL, "--json", env={"MEMAGENT_HOME": str(home)})
        assert done.returncode == 0, done.stderr
        runs[name] = json.loads(done.stdout)
    return home, runs


@pytest.fixture
def two_runs(recorded, memagent_home):
    """This test's store: a copy of the two runs'. The runs' records, by name."""
    home, runs = recorded
    shutil.copytree(home, memagent_home)
    return runs


def test_traces_list_names_each_run_and_its_status(two_runs):
    listed = memagent("traces", "list").stdout
    assert two_runs["first"]["trace"][:8] in listed and two_runs["second"]["trace"][:8] in listed and "complete" in listed


@pytest.mark.parametrize(
    "flags, names",
    [
        (["--limit", "1"], ["second"]),
        (["--status", "interrupted"], []),
        (["--source", "doc.txt"], ["second", "first"]),  # newest first
    ],
)
def test_traces_list_filters(two_runs, flags, names):
    assert [r["id"] for r in as_json("traces", "list", *flags)["runs"]] == [two_runs[name]["trace"] for name in names]


def test_traces_show_one_step(two_runs):
    one = as_json("traces", "show", two_runs["first"]["trace"], "--step", "2")
    assert [s["index"] for s in one["steps"]] == [2]


def test_traces_show_marks_what_each_step_added_and_dropped(two_runs):
    text = memagent("traces", "show", two_runs["first"]["trace"]).stdout
    assert "step 1" in text and "Where did the fox run?" in text and "=" * 40 in text
    # piped, so no color: what each step added and dropped is marked in the text itself
    assert "[-No previous" in text and "memory-]{+===" in text and "protocol" not in text  # memagent's: not named


def test_traces_diff_as_text(two_runs):
    diff = memagent("traces", "diff", two_runs["first"]["trace"], "0", "1").stdout
    assert diff.startswith("step 0 → step 1\n[-No previous") and "memory-]{+===" in diff and diff.rstrip().endswith("+}")


def test_traces_diff_as_json(two_runs):
    diff = as_json("traces", "diff", two_runs["first"]["trace"], "0", "1")
    assert {"op": "delete", "text": "No previous memory"} in diff["ops"]
    assert any(o["op"] == "insert" and "=" * 40 in o["text"] for o in diff["ops"])


def test_traces_diff_of_a_step_the_run_lacks_is_a_usage_error(two_runs):
    assert memagent("traces", "diff", two_runs["first"]["trace"], "1", "999", check=False).returncode == 2


def test_traces_search_finds_the_question(two_runs):
    hits = as_json("traces", "search", "fox")["hits"]
    assert [h["run_id"] for h in hits] == [two_runs["first"]["trace"]] and hits[0]["field"] == "question"


def test_traces_search_takes_quotes_and_operators_as_text(two_runs):
    assert memagent("traces", "search", 'fox" OR *', check=False).returncode == 0


def test_traces_export_html_escapes_the_question(two_runs, tmp_path):
    page = tmp_path / "trace.html"
    memagent("traces", "export", two_runs["second"]["trace"], "--format", "html", "-o", page)
    html = page.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html


def test_traces_export_jsonl_is_the_run_then_a_line_per_step(two_runs):
    first = two_runs["first"]
    lines = memagent("traces", "export", first["trace"], "--format", "jsonl").stdout.splitlines()
    assert json.loads(lines[0])["type"] == "run" and len(lines) == 1 + len(first["steps"])


def test_traces_export_markdown(two_runs):
    assert "## Step 1" in memagent("traces", "export", two_runs["first"]["trace"], "--format", "markdown").stdout


def test_traces_export_short_names_and_dash_for_standard_output(two_runs, tmp_path):
    """-f md and -o -: where a text export goes anyway, never a file called -."""
    trace = two_runs["first"]["trace"]
    short = memagent("traces", "export", trace, "-f", "md", "-o", "-", cwd=tmp_path)
    assert short.stdout == memagent("traces", "export", trace, "--format", "markdown").stdout
    assert not (tmp_path / "-").exists()


def test_traces_export_of_a_pdf_to_dash_is_refused(two_runs, tmp_path):
    dash = memagent("traces", "export", two_runs["first"]["trace"], "-f", "pdf", "-o", "-", cwd=tmp_path, check=False)
    assert dash.returncode == 2 and "--output takes a file name" in dash.stderr and not (tmp_path / "-").exists()


def test_traces_export_refuses_an_unknown_format(two_runs):
    assert memagent("traces", "export", two_runs["first"]["trace"], "--format", "docx", check=False).returncode == 2


def test_traces_export_pdf_of_a_text_source_says_why_not(two_runs):
    """A text source: no PDF to highlight, said in one line."""
    pdf = memagent("traces", "export", two_runs["first"]["trace"], "--format", "pdf", check=False)
    assert pdf.returncode == 1 and "has no quote in a PDF source to highlight" in pdf.stderr


def test_traces_rm_removes_the_run_a_prefix_names(two_runs):
    first, second = two_runs["first"]["trace"], two_runs["second"]["trace"]
    memagent("traces", "rm", first[:6])
    assert [r["id"] for r in as_json("traces", "list")["runs"]] == [second]
    assert memagent("traces", "show", first, check=False).returncode == 1


def test_traces_rm_older_than_keeps_the_recent_runs(two_runs):
    assert "removed 0 runs" in memagent("traces", "rm", "--older-than", "30d").stderr
    assert len(as_json("traces", "list")["runs"]) == 2


def test_traces_rm_of_nothing_named_is_a_usage_error(two_runs):
    assert memagent("traces", "rm", check=False).returncode == 2


def test_a_failed_run_is_recorded_with_its_error(doc, models, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(models["random"].read_bytes()[:500_000])
    proc = memagent("ask", doc, "q", "-m", broken, *SMALL, check=False)
    assert proc.returncode == 1
    (run,) = as_json("traces", "list")["runs"]
    assert run["status"] == "failed" and "could not load" in run["error"] and run["ended_at"]
    assert "failed" in memagent("traces", "list").stdout


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_an_inherited_ignored_sigint_stays_ignored_and_sigterm_still_stops_resumably(doc, models, spawned):
    # `memagent ask … &` in a script, nohup, a service manager: SIGINT arrives ignored and stays
    # so, as for any Unix tool; SIGTERM is how such a run is stopped, and it keeps the run.
    whole = as_json("ask", doc, "Where?", "-m", models["random"], "--no-trace", *SMALL)
    proc = spawn_memagent("ask", doc, "Where?", "-m", models["random"], *SMALL, preexec_fn=_sigint_ignored)
    spawned.append(proc)
    assert read_line(proc).startswith("step 1/")
    proc.send_signal(signal.SIGINT)
    assert read_line(proc).startswith("step 2/")  # it went on
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and out == "" and "Traceback" not in err and "Resume with:" in err
    (run,) = as_json("traces", "list")["runs"]
    assert run["status"] == "interrupted" and 2 <= run["step_count"] < len(whole["steps"])
    resumed = as_json("ask", "--resume", "last")
    assert [s["memory"] for s in resumed["steps"]] == [s["memory"] for s in whole["steps"]]


def test_the_interrupt_tests_pass_when_pytest_runs_with_sigint_ignored(tmp_path):
    # `pytest -q &` or a CI service starts pytest with SIGINT ignored, and children inherit that;
    # tests that send Ctrl-C restore it in the child they start (helpers.sigint_default).
    tests = [
        "tests/test_cli.py::test_ctrl_c_mid_run_exits_130_without_a_traceback",
        "tests/test_traces.py::test_interrupted_run_resumes_to_the_same_result",
        "tests/test_reliability.py::test_sigint_during_the_final_answer_then_resume",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner"), *tests],
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=_sigint_ignored,
        timeout=600,
    )
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout[-3000:]


def test_resume_refuses_a_protocol_option_that_differs_and_names_both_values(doc, models):
    code, _, _ = start_and_stop([doc, "Where?", "-m", models["random"], *SMALL], signal.SIGINT)
    assert code == 130
    for extra, said in (
        (["--chunk-tokens", "300"], "--chunk-tokens 300 differs from its 200"),
        (["--temperature", "0.5"], "--temperature 0.5 differs from its 0.0"),
        (["--final", "answer-is"], "--final answer-is differs from its boxed"),
        (["-m", models["long"]], f"--model {models['long']} differs from its {models['random']}"),
        (["-q", "Another?"], "--resume takes no sources or questions"),
    ):
        proc = memagent("ask", "--resume", "last", *extra, check=False)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, (extra, proc.stderr)
    (run,) = as_json("traces", "list")["runs"]
    assert run["status"] == "interrupted"  # none of them touched it
    # The same values, and options that do not change the result, may be given.
    resumed = as_json("ask", "--resume", "last", "--chunk-tokens", "200", "--threads", "1", "-m", models["random"])
    whole = as_json("ask", doc, "Where?", "-m", models["random"], "--no-trace", *SMALL)
    assert [s["memory"] for s in resumed["steps"]] == [s["memory"] for s in whole["steps"]]


def test_resume_uses_the_runs_chat_template_and_refuses_it_changed(doc, models, tmp_path):
    from testkit.tinymodel import QWEN25_CHAT_TEMPLATE

    template = tmp_path / "template.jinja"
    template.write_text(QWEN25_CHAT_TEMPLATE.replace("You are Qwen", "You are a reader"), encoding="utf-8")
    args = [doc, "Where?", "-m", models["random"], "--chat-template", template, *SMALL]
    whole = as_json("ask", *args[: -len(SMALL)], "--no-trace", *SMALL)
    code, _, _ = start_and_stop(args, signal.SIGINT)
    assert code == 130
    original = template.read_text(encoding="utf-8")
    template.write_text(original + " ", encoding="utf-8")
    changed = memagent("ask", "--resume", "last", check=False)
    assert changed.returncode == 2 and f"The chat template {template.resolve()} has changed since the run began" in changed.stderr
    template.write_text(original, encoding="utf-8")
    resumed = as_json("ask", "--resume", "last")
    assert [s["memory"] for s in resumed["steps"]] == [s["memory"] for s in whole["steps"]]


def test_traces_list_piped_keeps_a_run_on_one_line(tmp_path, models):
    """Piped, the list is as wide as its rows (not 80 columns, its questions wrapped a word a line);
    --width lays it out in the columns given."""
    doc = tmp_path / "doc.txt"
    doc.write_text(words(200), encoding="utf-8")
    question = "Which of the river banks flooded first in the spring and why did it happen?"
    done = run_memagent("ask", doc, question, "-m", models["random"], *SMALL, "--quiet")
    assert done.returncode == 0, done.stderr
    listed = run_memagent("traces", "list")
    rows = [line for line in listed.stdout.splitlines() if "complete" in line]
    assert len(rows) == 1 and "Which of the river banks flooded" in rows[0] and "doc.txt" in rows[0]
    narrow = run_memagent("traces", "list", "--width", "60")
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60
