"""The command line as a user runs it: a real process, stdout and stderr checked apart."""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO, read_line, run_memagent, spawn_memagent, words
from typer.testing import CliRunner

from memagent_cli.cli.app import app
from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt

FAST = ["--chunk-tokens", "300", "--memory-tokens", "8", "--answer-tokens", "6", "--temperature", "0"]


memagent = run_memagent  # a real `memagent` process, as a user runs it


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(500), encoding="utf-8")
    return path


def test_json_output_as_documented(doc, models):
    proc = memagent("ask", doc, "Where did the fox run?", "-m", models["random"], "--json", *FAST)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in (
        "question",
        "answer",
        "raw_answer",
        "memory",
        "model",
        "sources",
        "document_tokens",
        "chunk_tokens",
        "steps",
        "timings",
    ):
        assert key in out
    assert out["question"] == "Where did the fox run?" and out["chunk_tokens"] == 300
    assert out["schema"] == 1
    size = doc.stat().st_size
    assert out["sources"] == [
        {
            "path": str(doc),
            "title": str(doc),
            "kind": "text",
            "size": size,
            "pages": None,
            "unit": None,
            "units": None,
            "tokens": out["document_tokens"],
        }
    ]
    assert len(out["steps"]) == -(-out["document_tokens"] // 300)
    step = out["steps"][0]
    for key in ("index", "tokens", "spans", "memory", "memory_tokens", "prompt_tokens", "seconds"):
        assert key in step
    assert out["timings"]["total_seconds"] > 0
    assert out["gpu"]["layers"] == 0 and "CPU only" in out["gpu"]["reason"]  # the auto choice, with its reason
    assert "Traceback" not in proc.stderr
    # not a terminal: plain progress lines, no live view escape codes
    assert "step 1/" in proc.stderr and "\x1b[" not in proc.stderr


def test_answer_alone_on_stdout_and_quiet_stderr(doc, models):
    proc = memagent("ask", doc, "q", "-m", models["long"], "--quiet", *FAST)
    assert proc.returncode == 0
    assert proc.stdout == "=" * 40 * 6 + "\n"  # the final reply has no box: the whole reply is the answer
    assert proc.stderr == ""


def test_piped_stdin_and_dash(models):
    text = words(200)
    piped = memagent("ask", "Why?", "-m", models["random"], "--json", *FAST, input=text)
    assert piped.returncode == 0, piped.stderr
    out = json.loads(piped.stdout)
    assert out["sources"][0]["kind"] == "stdin" and out["document_tokens"] > 0
    dash = memagent("ask", "-", "Why?", "-m", models["random"], "--json", *FAST, input=text)
    assert json.loads(dash.stdout)["document_tokens"] == out["document_tokens"]


def test_directory_and_pdf_sources(tmp_path, models):
    from fpdf import FPDF

    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("alpha notes " * 50, encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("beta notes " * 50, encoding="utf-8")
    (folder / ".hidden").write_text("secret", encoding="utf-8")
    pdf = FPDF()
    for page in range(3):
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 8, f"Page {page + 1} of the report. " + "words " * 80)
    pdf.output(str(tmp_path / "report.pdf"))
    proc = memagent("ask", "notes", "report.pdf", "What?", "-m", models["random"], "--json", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(s["path"], s["kind"], s["pages"]) for s in out["sources"]] == [
        (os.path.join("notes", "a.md"), "text", None),
        (os.path.join("notes", "sub", "b.txt"), "text", None),
        ("report.pdf", "pdf", 3),
    ]
    assert ".hidden" in proc.stderr  # skipped, with a note
    pages = [span["pages"] for step in out["steps"] for span in step["spans"] if span["path"] == "report.pdf"]
    assert pages[0][0] == 1 and pages[-1][1] == 3


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["ask", "doc.txt", "q"], 2, "is not installed. Get it with: memagent models pull memagent-7b:q4_k_m"),
        (["ask", "missing.txt", "q", "-m", "MODEL"], 1, "missing.txt"),
        (["ask", "doc.txt", "q", "-m", "doc.txt"], 1, "not a GGUF model file"),
        (["ask", "doc.txt", "q", "-m", "doc.txt"], 1, "make one from a Hugging Face checkpoint folder with: memagent models"),
        (["ask", "doc.txt", "q", "-m", "."], 2, "is a directory, not a model file. Pass a .gguf file to --model; a Hugging Face"),
        (["ask", "doc.txt", "q", "-m", "MODEL", "--ctx", "500"], 2, "--ctx 500 is too small"),
        (["ask", "doc.txt", "q", "-m", "MODEL", "--final", "maybe"], 2, "final must be one of"),
        (["ask", "doc.txt", "q", "-m", "MODEL", "--gpu-layers", "-2"], 2, "gpu_layers must be auto, -1 (all), 0 (none)"),
        # A source where the question goes, or a blank question: said before the model is looked for.
        (["ask", "doc.txt"], 2, 'doc.txt, names a source. Put the question last: memagent ask doc.txt "QUESTION"'),
        (["ask", "a b.txt", "doc.txt"], 2, "memagent ask 'a b.txt' doc.txt \"QUESTION\" (or give it with -q)"),
        (["ask", "-"], 2, "No question given: the last argument, -, names a source."),
        (["ask", "doc.txt", "  "], 2, "The question is empty."),
    ],
)
def test_errors_are_one_line_with_exit_codes(doc, models, args, code, message):
    args = [str(models["random"]) if a == "MODEL" else a for a in args]
    proc = memagent(*args, cwd=doc.parent)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and proc.stderr.startswith("error: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_an_output_file_that_is_an_input_or_dash_is_refused_before_anything_runs(tmp_path):
    """A results file named as the job or data file, a source, a link to one, or another output, or
    `-`: one usage line before any model is looked for, the input untouched and no file called "-"."""
    doc = tmp_path / "doc.txt"
    doc.write_text("The code word is kite.", encoding="utf-8")
    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"custom_id": "a", "sources": ["doc.txt"], "question": "q"}) + "\n", encoding="utf-8")
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "1", "context": "c", "input": "q", "answers": ["a"]}) + "\n", encoding="utf-8")
    os.link(job, tmp_path / "hard.jsonl")
    (tmp_path / "soft.jsonl").symlink_to(job)
    before = {p.name: p.read_bytes() for p in (doc, job, data)}
    cases = [
        (["batch", "job.jsonl", "-o", "job.jsonl"], "--out job.jsonl names a file this command reads (job.jsonl)"),
        (["batch", "job.jsonl", "-o", "hard.jsonl"], "--out hard.jsonl names a file this command reads (job.jsonl)"),
        (["batch", "job.jsonl", "-o", "soft.jsonl"], "--out soft.jsonl names a file this command reads (job.jsonl)"),
        (["batch", "job.jsonl", "-o", "-"], "--out takes a file name: - is not standard output here."),
        (["batch", "job.jsonl", "-o", "r.jsonl", "--csv", "./r.jsonl"], "--out and --csv name the same file, r.jsonl."),
        (["eval", "data.jsonl", "-o", "data.jsonl"], "--out data.jsonl names a file this command reads (data.jsonl)"),
        (["ask", "doc.txt", "--each", "-q", "q", "--csv", "doc.txt"], "--csv doc.txt names a file this command reads"),
        (["ask", ".", "--each", "-q", "q", "--jsonl", "-"], "--jsonl takes a file name"),
        (["ask", "doc.txt", "q", "--svg", "-"], "--svg takes a file name"),
        (["eval", "make-niah", "--tokens", "300", "-o", "-"], "--out takes a file name"),
    ]
    for args, message in cases:
        done = memagent(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("error: ") and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert "not installed" not in done.stderr and done.stdout == ""
    assert {p.name: p.read_bytes() for p in (doc, job, data)} == before
    assert not (tmp_path / "-").exists() and not (tmp_path / "r.jsonl").exists()


def test_model_from_environment(doc, models):
    proc = memagent("ask", doc, "q", "--quiet", *FAST, env={"MEMAGENT_MODEL": str(models["stop"])})
    assert proc.returncode == 0 and proc.stdout == "\n"


def test_help_teaches():
    runner = CliRunner()
    result = runner.invoke(app, ["ask", "--help"], env={"NO_COLOR": "1", "COLUMNS": "120"})
    assert result.exit_code == 0
    for text in ("QUESTION", "--chunk-tokens", "--json", "cat build.log | memagent ask", "--memory-tokens"):
        assert text in result.output
    assert CliRunner().invoke(app, ["--version"]).output.startswith("memagent ")


def test_inspect_counts_with_a_vocabulary_only_gguf(doc, qwen2_vocab):
    runner = CliRunner()
    result = runner.invoke(app, ["inspect", str(doc), "-m", str(qwen2_vocab), "--json", "--chunk-tokens", "100"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    n = len(load_tokenizer(read_gguf(qwen2_vocab)).encode(doc.read_text().strip()))
    assert out["document_tokens"] == n and out["steps_total"] == -(-n // 100)
    assert out["estimate"]["seconds"] > 0 and out["has_weights"] is False
    # A vocabulary's hyper-parameters are placeholders: the cache is the default 7B's, and says so.
    context = out["context"]
    assert context["sequences"] == 1 and context["tokens"] == context["tokens_per_sequence"] > 100
    assert context["kv_cache_bytes"] == 57_344 * context["tokens"] and "default 7B" in context["kv_cache_assumes"]
    text = runner.invoke(app, ["inspect", str(doc), "-m", str(qwen2_vocab)], env={"NO_COLOR": "1", "COLUMNS": "120"})
    assert f"{n:,} tokens → 1 step of 5,000 tokens" in text.stdout  # the default chunk holds it all


def test_inspect_show_prompt_is_exactly_what_the_model_sees(doc, models):
    proc = memagent(
        "inspect", doc, "-m", models["random"], "--question", " Where? ", "--show-prompt", "1", "--chunk-tokens", "50"
    )
    assert proc.returncode == 0, proc.stderr
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import decode, load_tokenizer

    tok = load_tokenizer(read_gguf(models["random"]))
    first = decode(tok, tok.encode(doc.read_text().strip())[:50])
    expected = (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n" + memory_prompt("Where?", INITIAL_MEMORY, first) + "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert proc.stdout == expected
    later = memagent("inspect", doc, "-m", models["random"], "--question", "Where?", "--show-prompt", "2", "--chunk-tokens", "50")
    assert "<memory>\n{memory}\n</memory>" in later.stdout and "step 2" in later.stderr
    beyond = memagent("inspect", doc, "-m", models["random"], "--question", "Where?", "--show-prompt", "999")
    assert beyond.returncode == 2 and "There is no step 999" in beyond.stderr


def test_a_300_page_pdf_end_to_end(tmp_path, models):
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for page in range(1, 301):
        pdf.add_page()
        pdf.multi_cell(0, 5, f"Page {page}. " + words(120, seed=page))
    pdf.output(str(tmp_path / "big.pdf"))
    proc = memagent(
        "ask",
        tmp_path / "big.pdf",
        "What happened?",
        "-m",
        models["random"],
        "--json",
        "--memory-tokens",
        "8",
        "--answer-tokens",
        "4",
        "--temperature",
        "0",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["sources"][0]["pages"] == 300
    assert len(out["steps"]) == -(-out["document_tokens"] // 5000) >= 5
    spans = [span for step in out["steps"] for span in step["spans"]]
    assert spans[0]["pages"][0] == 1 and spans[-1]["pages"][1] == 300
    # consecutive steps pick up where the previous one stopped
    assert all(a["end"] == b["start"] for a, b in zip(spans, spans[1:]))


def test_svg_picture_without_a_terminal(doc, models, tmp_path):
    picture = tmp_path / "run.svg"
    proc = memagent("ask", doc, "q", "-m", models["random"], "--quiet", "--svg", picture, *FAST)
    assert proc.returncode == 0 and proc.stderr == ""
    svg = picture.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "step&#160;1" in svg
    bad = memagent("ask", doc, "q", "-m", models["random"], "--quiet", "--fresh", "--svg", tmp_path / "no" / "x.svg", *FAST)
    assert bad.returncode == 0 and bad.stdout.strip() and "could not save" in bad.stderr


def test_a_model_cut_inside_its_weights_is_reported_with_the_cause(doc, models, tmp_path):
    data = models["random"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 9 // 10])
    proc = memagent("ask", doc, "q", "-m", cut, *FAST)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: llama.cpp could not load cut.gguf: tensor")
    assert "not within the file bounds" in proc.stderr and proc.stderr.count("\n") == 1


def test_ctrl_c_mid_run_exits_130_without_a_traceback(tmp_path, models, spawned):
    import signal
    import time

    doc = tmp_path / "long.txt"
    doc.write_text(words(60000), encoding="utf-8")
    proc = spawn_memagent("ask", doc, "q", "-m", models["random"], "--chunk-tokens", "200", "--memory-tokens", "64")
    spawned.append(proc)
    first = read_line(proc)  # the first step is done: we are mid-run
    assert first.startswith("step 1/")
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err and out == ""


def test_unreadable_or_empty_input_is_reported_before_the_model_loads(tmp_path, models):
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 10, "secret")
    pdf.set_encryption(owner_password="o", user_password="u")
    pdf.output(str(tmp_path / "locked.pdf"))
    (tmp_path / "blank.txt").write_text("  \n\n ", encoding="utf-8")
    # a model file that would fail to load: if loading came first, its error would show
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(models["random"].read_bytes()[:500_000])
    locked = memagent("ask", tmp_path / "locked.pdf", "q", "-m", broken)
    assert locked.returncode == 1 and "locked.pdf is encrypted. Pass --password PASSWORD" in locked.stderr
    blank = memagent("ask", tmp_path / "blank.txt", "q", "-m", broken)
    assert blank.returncode == 1 and "There is no text to read" in blank.stderr
    # stdin alone and empty (a script's stdin left empty): said of stdin, not of a file
    for empty in ([], ["-"]):
        nothing = memagent("ask", *empty, "q", "-m", broken, input="")
        assert nothing.returncode == 1 and "error: Nothing came in on standard input." in nothing.stderr
        assert 'Pipe text in (cat build.log | memagent ask "QUESTION")' in nothing.stderr and "Traceback" not in nothing.stderr


def test_llama_cpp_log_only_with_verbose(doc, models):
    plain = memagent("ask", doc, "q", "-m", models["random"], *FAST)
    assert plain.returncode == 0
    assert not any(marker in plain.stderr for marker in ("llama_model_loader", "llama_context", "ggml_", "load_tensors"))
    verbose = memagent("ask", doc, "q", "-m", models["random"], "--verbose", "--fresh", *FAST)
    assert verbose.returncode == 0 and "llama_model_loader" in verbose.stderr


def test_usage_errors_are_one_line_like_every_error():
    """click's own errors (an unknown option, a bad value) read as memagent's: `error:`, one line,
    where the help is, exit 2; never a box."""
    for args, said in (
        (["ask", "--nope", "a", "b"], "error: No such option: --nope"),
        (["ask", "--chunk-tokens", "x", "a", "b"], "error: Invalid value for '--chunk-tokens'"),
    ):
        done = run_memagent(*args)
        assert done.returncode == 2
        assert done.stderr.startswith(said), done.stderr
        assert "Try 'python -m memagent_cli ask -h' for help." in done.stderr and "╭" not in done.stderr


def test_a_closed_pipe_is_a_quiet_success(tmp_path):
    """`memagent inspect big --text | head -1`: the reader has what it wanted; exit 0, nothing said."""
    doc = tmp_path / "big.txt"
    doc.write_text("a line of the document\n" * 200_000, encoding="utf-8")
    reader = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    done = subprocess.run(
        [sys.executable, "-m", "memagent_cli", "inspect", str(doc), "--text"],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    reader.stdin.close()
    reader.wait(timeout=60)
    assert done.returncode == 0 and done.stderr == ""


def test_help_paragraphs_are_left_to_the_terminal_to_wrap():
    """A docstring's line breaks are the source's width, not the terminal's: no sentence is cut
    where the source wrapped it (examples keep their lines)."""
    wide = run_memagent("doctor", "-h", env={"COLUMNS": "200"})
    assert "paths, installed models and whether they fit in GPU memory" in wide.stdout
    listing = run_memagent("--help", env={"COLUMNS": "200"})
    assert "installed models and whether they fit in GPU memory; with the exact reinstall command" in listing.stdout
    ask = run_memagent("ask", "-h", env={"COLUMNS": "200"})
    assert '\n   memagent ask report.pdf "Who signed the 2019 amendment?"' in ask.stdout.replace("│", "")


def test_an_ask_line_becomes_an_inspect_line_by_its_verb(tmp_path, models):
    """inspect reads `ask`'s arguments (sources, then the question) and takes its flags; those that
    change how a run goes, not what it reads or sends, are said once and ignored."""
    doc = tmp_path / "doc.txt"
    doc.write_text(words(300), encoding="utf-8")
    line = [doc, "Where did the fox run?", "-m", models["random"], "--chunk-tokens", "100", "--answer-tokens", "8"]
    extra = ["--fresh", "--parallel", "2", "--temperature", "0", "--cite"]
    shown = run_memagent("inspect", *line, *extra, "--show-prompt", "final")
    assert shown.returncode == 0, shown.stderr
    assert "Where did the fox run?" in shown.stdout
    assert shown.stderr.count("inspect ignores --fresh, --parallel, --cite, --temperature, --answer-tokens") == 1
    counted = run_memagent("inspect", *line, "--json")
    plain = run_memagent("inspect", doc, "-q", "Where did the fox run?", *line[2:6], "--json")
    assert counted.returncode == 0 and plain.returncode == 0, counted.stderr + plain.stderr
    assert json.loads(counted.stdout) == json.loads(plain.stdout)  # the question as the last argument, as -q
    assert "ignores" not in plain.stderr
