"""Answers as data (`--schema`): the schema read three ways and checked, the final answer generated
under it (a llama.cpp grammar; `response_format` on a served engine) and read into `data`, through
every entry point: `ask` (with `--each --csv`), `batch`, `eval`, MCP, and a real llama-cpp-python
server. The model is tests/data/schema.gguf, the code-word model taught to answer in JSON when the
final prompt asks for it (tests/data/train_schema.py), so the values are checked, not only their shape."""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

import pytest
from helpers import llama_server, run_memagent, whole_fact

from memagent_cli.core.schema import AnswerSchema, concise_schema, parse_schema
from testkit.codeword import NO_ANSWER, QUESTION, fact_sentence, make_document

MODEL = Path(__file__).parent / "data" / "schema.gguf"
BUDGETS = ["--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "48", "--temperature", "0"]
RUN = ["-m", MODEL, *BUDGETS]
FOUND = "code_word, found bool"
# The JSON Schema the concise form FOUND stands for, written as a user would write it.
FOUND_SCHEMA = {
    "type": "object",
    "properties": {"code_word": {"type": "string"}, "found": {"type": "boolean"}},
    "required": ["code_word", "found"],
}


def document(tmp_path: Path, name: str = "doc.txt", seed: int = 3, fact: bool = True) -> tuple[Path, str | None]:
    path = tmp_path / name
    if fact:
        doc = whole_fact(500, seed)
        path.write_text(doc.text, encoding="utf-8")
        return path, doc.value
    path.write_text(make_document(random.Random(seed), 500, fact=False).text, encoding="utf-8")
    return path, None


def test_the_concise_form_is_the_json_schema_it_stands_for():
    assert concise_schema(FOUND) == FOUND_SCHEMA
    assert parse_schema(FOUND) == parse_schema(json.dumps(FOUND_SCHEMA)) == AnswerSchema(FOUND_SCHEMA)
    described = parse_schema("total float: the amount due, in euros\npaid bool")  # newlines: commas may be in a description
    assert described.item["properties"]["total"] == {"type": "number", "description": "the amount due, in euros"}
    assert described.question() == "What are the total (the amount due, in euros) and the paid?"
    assert parse_schema("code_word").question() == QUESTION  # the question the memory updates were trained on
    assert parse_schema("code_word", multi=True).question() == "List every item with the code word."


def test_a_reply_is_read_into_data_or_said_why_not():
    schema = parse_schema(FOUND)
    assert schema.read('{"code_word": "amber falcon", "found": true}') == ({"code_word": "amber falcon", "found": True}, None)
    data, why = schema.read('{"code_word": "amber falcon", "found": "yes"}')
    assert data is None and why == "the answer does not match the schema at found: 'yes' is not of type 'boolean'"
    data, why = schema.read('{"code_word": "amber')
    assert data is None and why is not None and why.startswith("the answer is not JSON")
    multi = parse_schema("code_word", multi=True)
    assert multi.read('{"items": [{"code_word": "a b"}]}') == ([{"code_word": "a b"}], None)


def test_ask_answers_with_data_from_the_concise_form_and_the_json_schema_alike(tmp_path):
    path, value = document(tmp_path)
    concise = run_memagent("ask", path, QUESTION, "--schema", FOUND, *RUN, "--json")
    schema_file = tmp_path / "found.schema.json"
    schema_file.write_text(json.dumps(FOUND_SCHEMA, indent=2), encoding="utf-8")
    from_file = run_memagent("ask", path, "-q", QUESTION, "--schema", schema_file, *RUN, "--json")
    inline = run_memagent("ask", path, QUESTION, "--schema", json.dumps(FOUND_SCHEMA), *RUN, "--json")
    records = []
    for done in (concise, from_file, inline):
        assert done.returncode == 0, done.stderr
        records.append(json.loads(done.stdout))
    for record in records:
        assert record["data"] == {"code_word": value, "found": True}
        assert json.loads(record["answer"]) == record["data"]
        # each field's value with the sentence it rests on; a boolean is no text a document has
        assert list(record["evidence_by_field"]) == ["code_word"]
        assert fact_sentence(value) in record["evidence_by_field"]["code_word"][0]["text"]
        assert record["quotes"][0]["text"] == record["evidence_by_field"]["code_word"][0]["text"]
    memories = [[step["memory"] for step in record["steps"]] for record in records]
    assert memories[0] == memories[1] == memories[2]  # the schema never reaches the memory updates
    # no question: the field's name makes it, here the one the model was trained with; stdout is the JSON
    plain = run_memagent("ask", path, "--schema", "code_word", *RUN, "--quiet")
    assert json.loads(plain.stdout) == {"code_word": value}
    alone = run_memagent("ask", path, "--schema", "code_word", *RUN, "--json")
    assert json.loads(alone.stdout)["question"] == QUESTION


def test_a_document_without_the_fact_gives_its_typed_no(tmp_path):
    path, _ = document(tmp_path, fact=False)
    done = run_memagent("ask", path, QUESTION, "--schema", FOUND, *RUN, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["data"] == {"code_word": NO_ANSWER, "found": False}


def test_schema_multi_gives_a_list(tmp_path):
    path, value = document(tmp_path)
    empty, _ = document(tmp_path, "empty.txt", fact=False)
    found = run_memagent("ask", path, QUESTION, "--schema-multi", "code_word", *RUN, "--json")
    none = run_memagent("ask", empty, QUESTION, "--schema-multi", "code_word", *RUN, "--json")
    assert found.returncode == 0 and none.returncode == 0, found.stderr + none.stderr
    assert json.loads(found.stdout)["data"] == [{"code_word": value}]
    assert json.loads(none.stdout)["data"] == []


@pytest.mark.parametrize(
    "schema, said",
    [
        ('{"type": "objectx", "properties": {"a": {}}}', "--schema is not a valid JSON Schema at type:"),
        ('{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}', "--schema uses 'minimum' at properties/n"),
        ("name date", "Unknown type 'date' for the field name in --schema"),
        ("name int float", "Cannot read the field 'name int float' in --schema"),
        ("missing.schema.json", "The schema file missing.schema.json does not exist"),
        ('{"type": "object"}', "--schema has no properties"),
        (
            '{"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}',
            "--schema refers to 'https://example.com/a.json': memagent reads no schema",
        ),
        ("{not json", "--schema is not valid JSON"),
    ],
)
def test_a_schema_that_cannot_be_used_is_one_line_and_runs_nothing(tmp_path, schema, said):
    path, _ = document(tmp_path)
    done = run_memagent("ask", path, "--schema", schema, *RUN, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: " + said) and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args, said",
    [
        (["--schema", "code_word", "--schema-multi", "code_word"], "error: --schema or --schema-multi, not both."),
        (["--schema-multi"], "error: Option '--schema-multi' requires an argument."),
    ],
)
def test_schema_multi_takes_the_schema_as_llm_does(tmp_path, args, said):
    """`--schema-multi SCHEMA`, as llm takes it: beside --schema, or where the switch stood before
    another option or at the end, it is one line and reads nothing."""
    path, _ = document(tmp_path)
    done = run_memagent("ask", path, QUESTION, *RUN, *args)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith(said), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_answer_that_never_matches_fails_the_run_and_its_trace_keeps_the_reply(tmp_path):
    """A reply cut at its budget is not JSON: asked once more, then the run fails in one line; the
    reply is in its trace."""
    path, _ = document(tmp_path)
    done = run_memagent("ask", path, QUESTION, "--schema", FOUND, "-m", MODEL, *BUDGETS[:6], "--answer-tokens", "4")
    assert done.returncode == 1 and done.stdout == ""
    assert "asking once more" in done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and said[0].startswith("error: The answer does not match --schema twice (cut at its budget")
    shown = run_memagent("traces", "show", "last", "--json")
    run = json.loads(shown.stdout)
    assert run["status"] == "failed" and run["raw_answer"].startswith("{")


def test_each_csv_has_a_column_per_field(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    values = {}
    for k, name in enumerate(("a.txt", "b.txt", "c.txt")):
        path, value = document(folder, name, seed=10 * k + 1, fact=name != "c.txt")
        values[f"docs/{name}"] = value
    each = ["ask", "docs", "--each", "-q", QUESTION, "--schema", FOUND]
    done = run_memagent(*each, *RUN, "--csv", "out.csv", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8-sig"))))
    assert list(rows[0])[:4] == ["document", "question", "code_word", "found"]
    got = {r["document"]: (r["code_word"], r["found"]) for r in rows}
    assert got == {d: (v or NO_ANSWER, "true" if v else "false") for d, v in values.items()}
    records = json.loads(done.stdout)["results"]
    assert [r["data"]["code_word"] for r in records] == [v or NO_ANSWER for v in values.values()]


def test_batch_lines_carry_their_own_schema(tmp_path):
    path, value = document(tmp_path)
    lines = [
        {"custom_id": "typed", "sources": [str(path)], "question": QUESTION, "schema": FOUND_SCHEMA},
        {"custom_id": "list", "sources": [str(path)], "question": QUESTION, "schema_multi": "code_word"},
        {"custom_id": "asked", "sources": [str(path)], "schema": "code_word"},  # no question: the field's
        {"custom_id": "text", "sources": [str(path)], "question": QUESTION},
    ]
    job = tmp_path / "job.jsonl"
    job.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = run_memagent("batch", job, "-o", tmp_path / "out.jsonl", *RUN, "--quiet")
    assert done.returncode == 0, done.stderr
    out = {r["custom_id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines())}
    assert out["typed"]["data"] == {"code_word": value, "found": True}
    assert out["list"]["data"] == [{"code_word": value}]
    assert out["asked"]["data"] == {"code_word": value} and out["asked"]["question"] == QUESTION
    assert out["text"]["answer"] == value and out["text"]["data"] is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"custom_id": "x", "context": "text", "schema": "a b c"}) + "\n", encoding="utf-8")
    refused = run_memagent("batch", bad, "-o", tmp_path / "bad-out.jsonl", *RUN)
    assert refused.returncode == 2 and refused.stderr.startswith("error: ") and "line 1" in refused.stderr
    assert "Cannot read the field 'a b c'" in refused.stderr


def test_batch_csv_has_a_column_per_field(tmp_path):
    """`batch --schema … --csv`: the results file as a spreadsheet, written when the command ends, a
    row per run and a column per field; a rerun with nothing left to do writes it again, whole."""
    values = {}
    lines = []
    for k in range(2):
        path, value = document(tmp_path, f"d{k}.txt", seed=10 * k + 1)
        values[f"line{k}"] = value
        lines.append({"custom_id": f"line{k}", "sources": [str(path)]})
    job = tmp_path / "job.jsonl"
    job.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    command = ["batch", job, "-o", "out.jsonl", "--schema", "code_word", *RUN, "--quiet", "--csv", "out.csv"]
    for _ in range(2):  # the second finds every line done
        done = run_memagent(*command, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8-sig"))))
        assert list(rows[0])[:3] == ["custom_id", "question", "code_word"]
        assert {r["custom_id"]: r["code_word"] for r in rows} == values and all(r["question"] == QUESTION for r in rows)


def test_eval_items_with_a_schema_score_their_fields(tmp_path):
    items = []
    for k in range(3):
        doc = whole_fact(400, 20 + 7 * k)
        expected = {"code_word": doc.value, "found": True}
        items.append({"id": f"i{k}", "context": doc.text, "question": QUESTION, "schema": FOUND, "data": expected})
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    done = run_memagent("eval", data, *RUN, "--json", "--out", tmp_path / "rows.jsonl")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fields"] == 100.0
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["data"] for r in rows] == [i["data"] for i in items] and all(r["fields"] == 1.0 for r in rows)


def test_a_llama_cpp_python_server_answers_under_its_own_response_format(tmp_path):
    """llama-cpp-python's server answers OpenAI's json_schema form with HTTP 500: memagent moves to the
    form it takes ({"type": "json_object", "schema": …}) at once, without spending a retry, and the
    served run's data equals the embedded one's."""
    path, value = document(tmp_path)
    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"custom_id": "a", "sources": [str(path)], "question": QUESTION, "schema": FOUND}) + "\n")
    items = tmp_path / "items.jsonl"
    item = {"context": path.read_text(encoding="utf-8"), "question": QUESTION, "schema": FOUND}
    items.write_text(json.dumps({**item, "data": {"code_word": value, "found": True}}) + "\n")
    with llama_server(MODEL, tmp_path) as base:
        engine = ["--engine", "openai", "--base-url", base, "--tokenizer", MODEL, *BUDGETS]
        served = run_memagent("ask", path, QUESTION, "--schema", FOUND, *engine, "--verbose", "--json")
        batch = run_memagent("batch", job, "-o", tmp_path / "out.jsonl", *engine, "--quiet")
        scored = run_memagent("eval", items, *engine, "--json")
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["data"] == {"code_word": value, "found": True}
    assert served.stderr.count("refused response_format json_schema; asking in its json_object form") == 1
    assert "trying again" not in served.stderr
    assert batch.returncode == 0 and scored.returncode == 0, batch.stderr + scored.stderr
    assert json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8"))["data"] == {"code_word": value, "found": True}
    assert json.loads(scored.stdout)["fields"] == 100.0


@pytest.mark.parametrize("served", [False, True], ids=["embedded", "served"])
def test_mcp_ask_takes_a_schema_and_returns_data(tmp_path, memagent_home, served):
    """The MCP SDK's own client over stdio: `ask` with `schema` (a JSON Schema object) answers with
    `data` in its structured content, on the embedded engine and on a llama-cpp-python server; a
    schema that cannot be used is the tool's error, in one line."""
    import contextlib
    import os
    import sys

    import anyio

    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    path, value = document(tmp_path)

    async def main(engine: list[str]):
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memagent_cli", "mcp", *map(str, engine), "--threads", "1"],
            env={"MEMAGENT_HOME": str(memagent_home), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}},
            cwd=str(tmp_path),
        )
        async with Client(params) as client:
            typed = await client.call_tool("ask", {"sources": [path.name], "question": QUESTION, "schema": FOUND_SCHEMA})
            bad = await client.call_tool("ask", {"sources": [path.name], "schema": "name date"})
            return typed, bad

    with llama_server(MODEL, tmp_path) if served else contextlib.nullcontext() as base:
        engine = ["--engine", "openai", "--base-url", base, "--tokenizer", MODEL, *BUDGETS] if served else RUN
        typed, bad = anyio.run(main, engine)
    assert not typed.is_error, typed.content
    assert typed.structured_content["data"] == {"code_word": value, "found": True}
    assert bad.is_error and "Unknown type 'date' for the field name in --schema" in bad.content[0].text


def test_inspect_shows_the_final_prompt_with_the_schema(tmp_path):
    """`inspect --show-prompt final`: the question its field makes, then the schema's instructions;
    the memory steps' prompt keeps the question alone."""
    path, _ = document(tmp_path)
    final = run_memagent("inspect", path, "-m", MODEL, "--schema", "code_word", "--show-prompt", "final")
    step = run_memagent("inspect", path, "-m", MODEL, "--schema", "code_word", "--show-prompt", "1", "--chunk-tokens", "64")
    assert final.returncode == 0 and step.returncode == 0, final.stderr + step.stderr
    schema = parse_schema("code_word")
    assert f"<problem> \n{QUESTION}\n{schema.instructions()}\n</problem>" in final.stdout
    assert f"<problem> \n{QUESTION}\n</problem>" in step.stdout and "JSON" not in step.stdout


# --- answers cut at their budget: the random tiny model under a grammar, sampled with a fixed seed --------

CUT = ["--memory-tokens", "16", "--chunk-tokens", "200", "--temperature", "1.5", "--no-trace"]


def _items_doc(tmp_path: Path) -> Path:
    path = tmp_path / "items.txt"
    path.write_text("Some text about items.\n", encoding="utf-8")
    return path


def test_a_list_cut_at_its_budget_keeps_its_complete_items(tmp_path, models):
    """A --schema-multi list the budget cuts mid-item: `data` holds the items written whole, the
    record says data_truncated, stderr says how many were kept and which budget to raise, exit 0.
    The same run with room for the whole list starts with the same items."""
    path, model = _items_doc(tmp_path), models["random"]
    ask = ["ask", path, "List the numbers", "-m", model, "--schema-multi", "n int", *CUT, "--seed", "4", "--json"]
    cut = run_memagent(*ask, "--answer-tokens", "22")
    assert cut.returncode == 0, cut.stderr
    record = json.loads(cut.stdout)
    assert record["data_truncated"] is True and record["data"] and all(set(i) == {"n"} for i in record["data"])
    with pytest.raises(json.JSONDecodeError):
        json.loads(record["raw_answer"])  # cut: the reply itself is not JSON
    kept = len(record["data"])
    assert f"kept its {kept} complete item" in cut.stderr and "raise --answer-tokens" in cut.stderr
    assert cut.stderr.count("The list was cut") == 1 and "did not match" not in cut.stderr

    whole = run_memagent(*ask, "--answer-tokens", "200")
    assert whole.returncode == 0, whole.stderr
    full = json.loads(whole.stdout)
    assert "data_truncated" not in full and full["data"][:kept] == record["data"] and len(full["data"]) > kept


def test_an_object_cut_at_its_budget_is_asked_again_with_twice_the_budget(tmp_path, models):
    """An object cut inside its value: the one retry gets twice --answer-tokens; cut again, the run
    fails in one line and its trace keeps the longer reply."""
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    path, model = _items_doc(tmp_path), models["random"]
    home = {"MEMAGENT_HOME": str(tmp_path / "home")}
    cut = ["--memory-tokens", "16", "--chunk-tokens", "200", "--temperature", "1.5", "--seed", "6"]
    done = run_memagent(
        "ask", path, "What is the number?", "-m", model, "--schema", "n int", *cut, "--answer-tokens", "8", env=home
    )
    assert done.returncode == 1, done.stderr
    assert "asking once more with twice the answer budget (16 tokens)" in done.stderr
    assert "does not match --schema twice (cut at its budget: raise --answer-tokens)" in done.stderr
    trace = json.loads(run_memagent("traces", "show", "last", "--json", env=home).stdout)
    tokens = len(load_tokenizer(read_gguf(model)).encode(trace["raw_answer"]))
    assert 8 < tokens <= 16, trace["raw_answer"]


def test_a_mismatch_is_said_once_per_document(tmp_path, models):
    """`--each --schema` where each document's first answer is cut: one line for each document's
    retry, not a second "warning: the answer is not JSON" for the same mismatch."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for k in range(2):
        (docs / f"d{k}.txt").write_text(f"Some text about items, part {k}.\n", encoding="utf-8")
    args = ["--schema", "n int", *CUT, "--seed", "6", "--answer-tokens", "8", "--parallel", "1"]
    done = run_memagent("ask", docs, "--each", "-q", "What is the number?", "-m", models["random"], *args)
    said = done.stderr.splitlines()
    assert 1 <= sum("did not match the schema" in line for line in said) <= 2, done.stderr
    assert not [line for line in said if line.startswith("warning: the answer is not JSON")], done.stderr


@pytest.mark.parametrize(
    "single, multi, where, said",
    [
        ("code_word", True, "job.jsonl line 3", 'job.jsonl line 3: "schema_multi" takes the schema itself'),
        ("code_word", "code_word", "ask", 'ask: "schema" or "schema_multi", not both'),
        (None, 7, "item 2", 'item 2: "schema_multi" is a JSON Schema object or a string of fields'),
        (None, "name date", "item 2", "item 2: Unknown type 'date' for the field name"),
    ],
)
def test_a_lines_or_a_calls_schema_multi_takes_the_schema(single, multi, where, said):
    """Job lines, eval items and MCP calls give "schema_multi" the schema, as the flag now takes it."""
    from memagent_cli.core.schema import chosen_schema
    from memagent_cli.errors import MemagentError

    with pytest.raises(MemagentError) as caught:
        chosen_schema(single, multi, where)
    assert caught.value.message.startswith(said) and caught.value.exit_code == 2


def test_schema_multi_in_a_line_or_a_call_is_a_list_schema():
    from memagent_cli.core.schema import chosen_schema

    listed = chosen_schema(None, {"type": "object", "properties": {"name": {"type": "string"}}}, "ask")
    assert listed is not None and listed.multi and listed.fields == ["name"]
    assert chosen_schema("name", False, "ask") == chosen_schema("name", None, "ask") and not chosen_schema("name", None).multi
    assert chosen_schema(None, None, "ask") is None
