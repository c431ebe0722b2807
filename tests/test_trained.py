"""Answers, not just plumbing: the trained code-word model (tests/data/codeword.gguf) through the
real `memagent` process, greedy. A chunk dropped at a boundary, a memory not carried into the
next prompt, a wrong final prompt or a broken answer extraction each make these fail.

The model answers "What is the code word?" over filler prose holding at most one "The code word
is amber falcon." (tests/codeword.py). It was trained on 64-token sections, so every run here
uses --chunk-tokens 64. A fact that a chunk boundary cuts in two is in no section whole and is
rightly not found: documents here are chosen (by seed) with the fact whole in one chunk.
"""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, codeword_tokenizer, run_memagent, spawn_memagent, whole_fact

from testkit.codeword import QUESTION, Document, cut_by_boundary, fact_sentence, make_document

MODEL = REPO / "tests" / "data" / "codeword.gguf"
LOGITS = REPO / "tests" / "data" / "codeword-logits.npz"
RUN = [
    "-m",
    MODEL,
    "--chunk-tokens",
    "64",
    "--memory-tokens",
    "32",
    "--answer-tokens",
    "24",
    "--temperature",
    "0",
    "--threads",
    "1",
]


@pytest.fixture(scope="module")
def tokenizer():
    return codeword_tokenizer()


def ask_json(*args, **kwargs) -> dict:
    done = run_memagent("ask", *args, *RUN, "--json", **kwargs)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_llama_cpp_computes_what_torch_trained():
    """The GGUF's logits in llama.cpp equal PyTorch's for the trained weights (recorded at
    training time, so this test needs no torch): tensor layout, rotary form, GQA and norms."""
    import llama_cpp

    ref = np.load(LOGITS)
    llm = llama_cpp.Llama(str(MODEL), n_ctx=512, logits_all=True, verbose=False, n_threads=1)
    for k in range(int(ref["count"])):
        ids, expected = ref[f"ids{k}"].tolist(), ref[f"logits{k}"]
        llm.reset()
        llm.eval(ids)
        got = np.array(llm.scores[: len(ids)])[-len(expected) :]
        assert np.abs(got - expected).max() < 0.05
        assert (got.argmax(-1) == expected.argmax(-1)).all()
        assert expected.std() > 1.0  # trained logits are far from uniform: agreement means something


@pytest.mark.parametrize("where", [0.0, 0.5, 1.0])
def test_fact_at_start_middle_and_end(tokenizer, tmp_path, where):
    doc = whole_fact(900, int(where * 100), where=where)
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    out = ask_json(path, QUESTION)
    assert out["answer"] == doc.value
    assert out["memory"] == fact_sentence(doc.value)
    # The memory holds the fact from the step that read it to the end, and only then.
    found = [s["index"] for s in out["steps"] if s["memory"] == fact_sentence(doc.value)]
    assert found == list(range(found[0], len(out["steps"]) + 1))
    assert [e["step"] for e in out["evidence"]] == [found[0]]


def test_no_fact_no_answer(tmp_path):
    doc = make_document(random.Random(3), 700, fact=False)
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    out = ask_json(path, QUESTION)
    assert out["answer"] == "unknown" and out["memory"] == "No previous memory"


@pytest.mark.slow
def test_a_100k_token_document(tokenizer, tmp_path):
    doc = whole_fact(100_000, 7, where=0.37)
    path = tmp_path / "big.txt"
    path.write_text(doc.text)
    out = ask_json(path, QUESTION, "--quiet", timeout=1200)  # 1,563 steps: minutes on a busy machine
    assert out["document_tokens"] >= 100_000 and len(out["steps"]) >= 1563
    assert out["answer"] == doc.value


def test_inside_a_pdf_page(tokenizer, tmp_path):
    from fpdf import FPDF
    from pypdf import PdfReader

    encode, decode = tokenizer
    rng = random.Random(21)
    pages = [make_document(rng, 250, fact=False).text for _ in range(3)]
    value = "coral heron"
    for k in range(1, 12):  # the k-th sentence break of page 2 where no chunk boundary cuts the fact
        text = pages[1].replace(". ", "\x00", k - 1).replace(". ", f". {fact_sentence(value)} ", 1).replace("\x00", ". ")
        pdf = FPDF()
        for page in (pages[0], text, pages[2]):
            pdf.add_page()
            pdf.set_font("Helvetica", size=11)
            pdf.multi_cell(0, 6, page)
        pdf.output(str(tmp_path / "report.pdf"))
        # What a reader of the PDF gets: its pages' text, a blank line between pages.
        extracted = "\n\n".join(p.extract_text() for p in PdfReader(tmp_path / "report.pdf").pages)
        doc = Document(extracted.strip(), value, extracted.find(fact_sentence(value)))
        if doc.fact_at >= 0 and not cut_by_boundary(doc, encode, decode, 64):
            break
    else:
        raise AssertionError("every place tried is cut by a chunk boundary")
    out = ask_json("report.pdf", QUESTION, cwd=tmp_path)
    assert out["answer"] == value
    (step,) = out["evidence"]
    (span,) = step["spans"]  # one source: the PDF, over the pages this chunk covers
    assert span["path"] == "report.pdf" and span["pages"][0] <= 2 <= span["pages"][1]


def test_in_one_file_of_a_folder(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    rng = random.Random(5)
    for name in ("a.txt", "b.txt", "c.txt"):
        (folder / name).write_text(make_document(rng, 200, fact=False).text)
    holder = make_document(random.Random(9), 200, where=0.5)
    (folder / "b.txt").write_text(holder.text)
    out = ask_json("notes", QUESTION, cwd=tmp_path)
    assert out["answer"] == holder.value
    assert [span["path"] for span in out["evidence"][0]["spans"]] == [str(Path("notes") / "b.txt")]


def test_piped_through_stdin(tokenizer):
    doc = whole_fact(1500, 40, where=0.8)
    out = ask_json(QUESTION, input=doc.text)
    assert out["answer"] == doc.value and out["sources"][0]["kind"] == "stdin"


def test_interrupted_after_the_fact_then_resumed(tokenizer, tmp_path):
    doc = whole_fact(8000, 60, where=0.05)  # ~125 steps: far from done when stopped
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    proc = spawn_memagent("ask", path, QUESTION, *RUN, env={"NO_COLOR": "1"})
    try:
        seen = 0
        for line in proc.stderr:
            if line.startswith("step "):
                seen += 1
                if seen == 12:  # the fact sits in the first 5% (step 7 or so): found by now
                    proc.send_signal(signal.SIGINT)
                    break
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    listed = json.loads(run_memagent("traces", "list", "--json").stdout)["runs"]
    assert listed[0]["status"] == "interrupted" and 12 <= listed[0]["step_count"] < 100
    shown = json.loads(run_memagent("traces", "show", "last", "--json").stdout)
    assert shown["steps"][-1]["memory"] == fact_sentence(doc.value)  # found before the interruption
    resumed = run_memagent("ask", "--resume", "last", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["answer"] == doc.value


@pytest.mark.slow
def test_accuracy_over_twenty_documents(tokenizer, tmp_path):
    """≥95% over a fixed set of 20 documents (a few hundred to a few thousand tokens), through
    `memagent eval` with the final prompt the model was trained with."""
    encode, decode = tokenizer
    rng = random.Random(2026)
    items = []
    while len(items) < 20:
        doc = make_document(rng, rng.randint(300, 3000))
        if not cut_by_boundary(doc, encode, decode, 64):
            items.append({"id": f"d{len(items)}", "context": doc.text, "input": QUESTION, "answers": [doc.value]})
    data = tmp_path / "codeword.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items))
    done = run_memagent("eval", data, *RUN, "--final", "boxed", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["n"] == 20 and summary["sub_em"] >= 95.0 and summary["em"] >= 95.0
