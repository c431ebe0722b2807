"""The --json contract: every output carries "schema": 1, a record has one shape wherever it is
printed or stored, and docs/JSON.md names every field the commands print."""

import json
import re

import pytest
from helpers import REPO, run_memagent, words

SMALL = ["--chunk-tokens", "200", "--memory-tokens", "24", "--answer-tokens", "8", "--temperature", "0"]
DOC = REPO / "docs" / "JSON.md"


HOME: dict[str, str] = {}  # MEMAGENT_HOME for the module's commands, which share one store


def memagent(*args):
    return run_memagent(*args, env=HOME)


def as_json(*args) -> dict:
    proc = memagent(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert isinstance(out, dict) and next(iter(out)) == "schema" and out["schema"] == 1, proc.stdout[:200]
    return out


def keys(value, skip=()) -> set[str]:
    """Every object key at any depth, except below the keys in `skip` (maps of free names)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            found.add(k)
            if k not in skip:
                found |= keys(v, skip)
    elif isinstance(value, list):
        for v in value:
            found |= keys(v, skip)
    return found


@pytest.fixture(scope="module")
def outputs(models, tmp_path_factory):
    """One run of every command with --json over one small document, in one MEMAGENT_HOME."""
    tmp = tmp_path_factory.mktemp("json")
    HOME["MEMAGENT_HOME"] = str(tmp / "home")  # the autouse fixture's home is per test; this is per module
    doc = tmp / "doc.txt"
    doc.write_text(words(1500), encoding="utf-8")
    data = tmp / "items.jsonl"
    data.write_text(json.dumps({"context": words(600, seed=3), "input": "Who?", "answers": ["x"]}) + "\n")
    model = str(models["random"])
    out = {"ask": as_json("ask", doc, "Where?", "-m", model, *SMALL)}
    out["many"] = as_json("ask", doc, "-q", "Who?", "-q", "When?", "-m", model, *SMALL)
    out["each"] = as_json("ask", doc, doc, "--each", "-q", "Who?", "-m", model, *SMALL)
    job = tmp / "job.jsonl"
    job.write_text(
        json.dumps({"custom_id": "one", "context": words(300, seed=4), "question": "Who?"})
        + "\n"
        + json.dumps({"custom_id": "two", "context": words(300, seed=5), "questions": ["Who?", "When?"]})
        + "\n"
    )
    out["batch"] = as_json("batch", job, "-o", tmp / "results.jsonl", "-m", model, *SMALL)
    out["batch_lines"] = [json.loads(line) for line in (tmp / "results.jsonl").read_text().splitlines()]
    out["batch_run"] = as_json("traces", "show", out["batch_lines"][0]["trace"])
    out["inspect"] = as_json("inspect", doc, "-m", model)
    run = out["ask"]["trace"]
    out["show"] = as_json("traces", "show", run)
    out["list"] = as_json("traces", "list")
    out["search"] = as_json("traces", "search", "Where")
    out["diff"] = as_json("traces", "diff", run, "1")
    exported = memagent("traces", "export", run, "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    out["export"] = [json.loads(line) for line in exported.stdout.splitlines()]
    out["eval"] = as_json("eval", data, "-m", model, *SMALL)
    out["add"] = as_json("models", "add", model, "--name", "tiny")
    out["info"] = as_json("models", "info", "tiny")
    out["list_models"] = as_json("models", "list")
    out["config"] = as_json("config", "list")
    out["doctor"] = as_json("doctor")
    return out


def test_a_step_and_its_evidence_have_one_shape_in_ask_traces_and_export(outputs):
    asked, shown = outputs["ask"], outputs["show"]
    run_line, *step_lines = outputs["export"]
    assert run_line["type"] == "run" and run_line["schema"] == 1 and run_line["id"] == asked["trace"]
    assert shown["steps"] == asked["steps"] == [{k: v for k, v in s.items() if k != "type"} for s in step_lines]
    assert shown["evidence"] == asked["evidence"] and asked["evidence"]
    by_index = {s["index"]: s for s in asked["steps"]}
    for e in asked["evidence"]:
        assert set(e) == {"step", "spans"} and e["spans"] == by_index[e["step"]]["spans"]
    assert shown["model"] == asked["model"] and set(asked["model"]) == {"name", "path", "size"}
    (stored,) = shown["sources"]
    (given,) = asked["sources"]
    assert set(stored) - set(given) == {"sha256", "abspath"}
    assert {k: stored[k] for k in given} == given
    assert outputs["inspect"]["sources"] == asked["sources"] and outputs["inspect"]["model"] == asked["model"]
    listed = {r["id"]: r for r in outputs["list"]["runs"]}[asked["trace"]]
    assert {k: v for k, v in shown.items() if k not in ("schema", "steps", "evidence")} == listed


def test_several_questions_give_one_result_each(outputs):
    results = outputs["many"]["results"]
    assert [r["question"] for r in results] == ["Who?", "When?"]
    assert all(set(r) == set(outputs["ask"]) - {"schema"} for r in results)


def test_each_and_batch_records_are_asks_with_their_names(outputs):
    (each,) = outputs["each"]["results"]  # one document, named twice: read once
    ask = set(outputs["ask"]) - {"schema"}
    assert list(each)[0] == "document" and set(each) == ask | {"document"}
    one, two = outputs["batch_lines"]
    assert list(one)[0] == "custom_id" and set(one) == ask | {"custom_id"}
    assert set(two) == {"custom_id", "results"} and [set(r) for r in two["results"]] == [ask, ask]
    summary = {"schema": 1, "done": 2, "failed": 0, "skipped": 0, "reused": 0, "out": outputs["batch"]["out"]}
    assert outputs["batch"] == summary
    job = outputs["batch_run"]["settings"]["job"]
    assert job["key"] == "one" and job["file"].endswith("results.jsonl")


def test_docs_name_every_field_the_commands_print(outputs):
    text = DOC.read_text(encoding="utf-8")
    documented = set()
    for span in re.findall(r"`([^`]+)`", text):
        documented |= set(re.findall(r"[a-z_][a-z0-9_]*", span))
    printed = set()
    for name, value in outputs.items():
        # Setting names are the user's own (config list); settings under a run are listed in the doc.
        printed |= keys(value, skip=("settings",) if name == "config" else ())
    missing = sorted(printed - documented)
    assert not missing, f"docs/JSON.md does not name: {missing}"
