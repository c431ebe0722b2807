"""Answers through QwenLong-L1.5's protocol: the trained stand-in (tests/data/qwenlong.gguf) through
the real `memagent` process and real llama.cpp, greedy.

The model performs the code-word task in the qwenlong format (testkit/qwenlong_task.py): each reply
reasons, closes "</think>", then writes its memory and plan (or the answer), in a Qwen3-Thinking
chat template its GGUF carries; its name says "QwenLong", so memagent picks the protocol without
being told. It learnt the exact qwenlong prompts written out from the paper: a prompt memagent
built wrong, a plan dropped from the memory carried to the next step, the plan passed to the final
prompt, instructions shown to the memory updates, or an answer read before "</think>" each make
these fail. It was trained on 128-token sections, so every run here uses --chunk-tokens 128;
documents are chosen (by seed) with the fact whole in one chunk.
"""

from __future__ import annotations

import json
import random
import re
import signal

from helpers import llama_server, run_memagent, spawn_memagent

from testkit.codeword import QUESTION, make_document
from testkit.qwenlong_task import CAPITALS, CHUNK_TOKENS, MODEL, answer, final_reply, memory_after, whole_fact

BUDGETS = ["--chunk-tokens", str(CHUNK_TOKENS), "--memory-tokens", "64", "--answer-tokens", "32", "--temperature", "0"]
RUN = ["-m", MODEL, *BUDGETS, "--threads", "1"]


def ask_json(*args, **kwargs) -> dict:
    done = run_memagent("ask", *args, "--json", **kwargs)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_read_as_trained(out: dict, value: str | None) -> None:
    """Every step's memory is the memory and plan the model writes: "not yet" until the step that
    read the fact, the fact from there to the end; that step is the last evidence step."""
    memories = [step["memory"] for step in out["steps"]]
    found = memories.index(memory_after(value)) if value else len(memories)
    assert memories == [memory_after(None)] * found + [memory_after(value)] * (len(memories) - found)
    assert out["memory"] == memories[-1]
    if value:
        assert [e["step"] for e in out["evidence"]][-1] == found + 1


def test_fact_at_start_middle_and_end(tmp_path):
    """Three documents of four chunks or so, a run each (--each: one process, one model load)."""
    docs = {
        f"{name}.txt": whole_fact(700, seed, where=where)
        for name, seed, where in (("start", 0, 0.0), ("middle", 50, 0.5), ("end", 100, 1.0))
    }
    for name, doc in docs.items():
        (tmp_path / name).write_text(doc.text)
    done = run_memagent("ask", *docs, "--each", "-q", QUESTION, *RUN, "--protocol", "qwenlong", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["document"] for r in results] == list(docs)
    for r in results:
        value = docs[r["document"]].value
        assert len(r["steps"]) >= 3
        assert r["answer"] == value
        assert r["raw_answer"] == final_reply(value)  # reasoning, "</think>", then the answer
        assert_read_as_trained(r, value)
    found = [[s["memory"] for s in r["steps"]].index(memory_after(docs[r["document"]].value)) for r in results]
    assert found[0] == 0 and 0 < found[1] < len(results[1]["steps"]) - 1 and found[2] == len(results[2]["steps"]) - 1


def test_protocol_from_the_model_and_instructions_for_the_answer_alone(tmp_path):
    """No --protocol: the GGUF's name says QwenLong. The instruction line changes the answer (it
    reached the final prompt) and no memory (the updates never saw it: a memory prompt whose
    question the model was not trained on would not be read as trained)."""
    doc = whole_fact(700, 30, where=0.3)
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    out = ask_json(path, QUESTION, *RUN, "--instructions", CAPITALS)
    assert out["answer"] == answer(doc.value, CAPITALS) == doc.value.upper()
    assert out["settings"]["protocol"] == "qwenlong" and out["settings"]["instructions"] == CAPITALS
    assert_read_as_trained(out, doc.value)
    stored = json.loads(run_memagent("traces", "show", "last", "--json").stdout)
    assert stored["settings"]["protocol"] == "qwenlong" and stored["answer"] == doc.value.upper()
    assert stored["steps"][-1]["memory"] == memory_after(doc.value)  # memory and plan, kept whole
    shown = run_memagent("traces", "show", "last", env={"COLUMNS": "200"}).stdout  # piped: changes marked in the text
    assert "protocol qwenlong" in shown and "[-Nothing found yet.-]{+" + f"The code word is {doc.value}.+}}" in shown


def test_interrupted_then_resumed_with_its_protocol(tmp_path, spawned):
    doc = whole_fact(2000, 60, where=0.1)  # ~11 steps; the fact in the second
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    proc = spawn_memagent("ask", path, QUESTION, *RUN, env={"NO_COLOR": "1"})
    spawned.append(proc)
    seen = 0
    for line in proc.stderr:
        if line.startswith("step "):
            seen += 1
            if seen == 5:
                proc.send_signal(signal.SIGINT)
                break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    shown = json.loads(run_memagent("traces", "show", "last", "--json").stdout)
    assert shown["status"] == "interrupted" and 5 <= shown["step_count"] < 10
    assert shown["settings"]["protocol"] == "qwenlong"
    assert shown["steps"][-1]["memory"] == memory_after(doc.value)  # found before the interruption
    refused = run_memagent("ask", "--resume", "last", "--protocol", "memagent", "--json")
    assert refused.returncode == 2 and "--protocol memagent" in refused.stderr and refused.stdout == ""
    resumed = ask_json("--resume", "last")
    assert resumed["answer"] == doc.value and resumed["settings"]["protocol"] == "qwenlong"
    assert_read_as_trained(resumed, doc.value)


def test_eval_with_instructions_per_item(tmp_path):
    items = [
        {"id": "start", "doc": whole_fact(700, 3, where=0.0), "instructions": None},
        {"id": "end", "doc": whole_fact(700, 4, where=1.0), "instructions": CAPITALS},
        {"id": "none", "doc": make_document(random.Random(5), 500, fact=False), "instructions": CAPITALS},
    ]
    expected = {item["id"]: answer(item["doc"].value, item["instructions"] or "") for item in items}
    data = tmp_path / "items.jsonl"
    with data.open("w") as f:
        for item in items:
            row = {"id": item["id"], "context": item["doc"].text, "input": QUESTION, "answers": [expected[item["id"]]]}
            f.write(json.dumps(row | ({"instructions": item["instructions"]} if item["instructions"] else {})) + "\n")
    done = run_memagent("eval", data, *RUN, "--out", tmp_path / "results.jsonl", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["n"] == 3 and summary["em"] == 100.0
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["id"]: r["prediction"] for r in results} == expected  # the capitals as written, not just scored


def test_served_model_answers_alike_and_instructions_reach_the_final_request_only(tmp_path):
    """llama-cpp-python's own server, applying the GGUF's chat template itself; memagent takes the
    protocol from the served model's name (the server's own: the GGUF's path). The requests'
    lengths (--verbose) show where the instruction line went: into the last request, none other."""
    doc = whole_fact(700, 80, where=0.6)
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    with llama_server(MODEL, tmp_path) as base:
        served = ["--engine", "openai", "--base-url", base, "--served-model", MODEL, *BUDGETS, "--verbose"]
        plain = run_memagent("ask", path, QUESTION, *served, "--json")
        told = run_memagent("ask", path, QUESTION, *served, "--instructions", CAPITALS, "--json")
    for done in (plain, told):
        assert done.returncode == 0, done.stderr
    out, instructed = json.loads(plain.stdout), json.loads(told.stdout)
    assert out["settings"]["protocol"] == "qwenlong" and out["device"].startswith("served: ")
    assert out["answer"] == doc.value and out["raw_answer"] == final_reply(doc.value)
    assert_read_as_trained(out, doc.value)
    assert instructed["answer"] == doc.value.upper()
    assert [s["memory"] for s in instructed["steps"]] == [s["memory"] for s in out["steps"]]
    sizes = [[int(n) for n in re.findall(r"<1 user message, (\d+) chars>", d.stderr)] for d in (plain, told)]
    assert len(sizes[0]) == len(out["steps"]) + 1
    assert sizes[1][:-1] == sizes[0][:-1] and sizes[1][-1] == sizes[0][-1] + len("\n" + CAPITALS)
