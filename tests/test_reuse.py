"""Answers that stay current (core/keys.py, traces/found.py, runs/planning.py), with the trained code-word
model (tests/data/codeword.gguf) through the real CLI and a real trace store: an answer is given again
when nothing that decides it changed (the question, the text by content, the model, the settings),
and read again when anything did; `ask --each` reruns read only new and changed documents; a
document that grew is continued from the last chunk it shares with the earlier run; `batch`, MCP and
`eval --reuse` find the same answers."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import shutil
import sqlite3

import anyio
from helpers import CODEWORD_ASK, CODEWORD_MODEL, codeword_tokenizer, mcp_stdio, run_memagent, whole_fact

from memagent_cli.core.config import AgentConfig
from memagent_cli.core.keys import answer_key, deciding, differences
from memagent_cli.ingest.sources import Source, collect_sources
from memagent_cli.model.llama import EmbeddedOptions
from memagent_cli.model.served.backend import ServedOptions
from testkit.codeword import QUESTION, Document, cut_by_boundary, fact_sentence, make_document

RUN = [*CODEWORD_ASK, "--temperature", "0", "--threads", "1"]
NOTE = re.compile(r"answered before \(run ([0-9a-f]{8}), \d{4}-\d\d-\d\d \d\d:\d\d\) from the same text; --fresh reads it again")


def stored_steps(home) -> int:
    """Steps the trace store holds, counted in its SQLite file."""
    with sqlite3.connect(home / "traces.db") as db:
        return int(db.execute("SELECT count(*) FROM steps").fetchone()[0])


def ask_json(*args, cwd, env=None):
    done = run_memagent("ask", *RUN, *args, "--json", cwd=cwd, env=env)  # RUN first: a flag given again wins
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def without(record, *names):
    return {k: v for k, v in record.items() if k not in names}


# --- the keys -------------------------------------------------------------------------------


def test_deciding_settings_and_their_differences():
    base = AgentConfig().to_dict()
    assert deciding(base)["early_stop"] is None  # memagent has no planner: --early-stop decides nothing
    assert deciding({**base, "protocol": "infmem"})["early_stop"] == 3
    assert deciding(base)["answer_schema_multi"] is None
    old = {k: v for k, v in base.items() if k != "question_tokens"}  # a store older than the setting
    assert differences(old, base) == []
    (differs,) = differences(base, {**base, "chunk_tokens": 64})
    assert (differs.option, differs.stored, differs.wanted) == ("--chunk-tokens", 5000, 64)
    assert differences(base, {**base, "instructions": "One word."}, ignore=("instructions",)) == []
    assert [d.option for d in differences(base, {**base, "answer_schema": "{}"})][0] == "--schema"


def test_a_key_knows_the_text_by_content(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("The code word is amber falcon.", encoding="utf-8")
    config = AgentConfig(chunk_tokens=64)

    def key(*paths, question=QUESTION, config=config, engine=EmbeddedOptions(), model=CODEWORD_MODEL):
        found = collect_sources([str(p) for p in paths], warn=lambda _: None)
        return answer_key(question, config, model=model, engine=engine, sources=found)

    first = key(doc)
    os.utime(doc, (1_000_000_000, 1_000_000_000))  # touched: the same text
    assert key(doc) == first
    assert key(doc, question=f"  {QUESTION}\n") == first  # the question as sent: stripped
    renamed = tmp_path / "other.txt"
    shutil.copy(doc, renamed)
    assert key(renamed).answer == first.answer  # one document is its text alone: its name is not read
    assert key(renamed).lineage != first.lineage  # but it is another file to continue
    doc.write_text("The code word is amber falcoN.", encoding="utf-8")  # one byte
    assert key(doc).answer != first.answer and key(doc).lineage == first.lineage
    two = key(doc, renamed)
    assert two.answer != key(renamed, doc).answer  # several: their order and their titles are read
    assert key(doc, config=AgentConfig(chunk_tokens=48)).answer != key(doc).answer
    assert key(doc, engine=EmbeddedOptions(threads=1, gpu_layers=0, batch=True)) == key(doc)  # how it runs decides nothing
    assert key(doc, engine=EmbeddedOptions(chat_template="{{ messages }}")).answer != key(doc).answer
    served = ServedOptions(servers=("http://127.0.0.1:9/v1",), served_model="m")
    moved = ServedOptions(servers=("http://127.0.0.1:10/v1",), served_model="m")
    assert key(doc, engine=served, model=None) == key(doc, engine=moved, model=None)  # the model by its name
    stdin = answer_key(
        QUESTION, config, model=CODEWORD_MODEL, engine=EmbeddedOptions(), sources=[Source("-", "stdin", "stdin", None)]
    )
    assert stdin.answer is None  # not known before it is read: never given again
    inline = answer_key(QUESTION, config, model=None, engine=served, sources=[Source("x", "x", "text", None)], text="abc")
    assert (
        inline.answer
        != answer_key(QUESTION, config, model=None, engine=served, sources=[Source("x", "x", "text", None)], text="abd").answer
    )


# --- ask ------------------------------------------------------------------------------------


def test_the_same_question_is_answered_from_the_store_at_once(tmp_path, memagent_home):
    doc = whole_fact(400, 7)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    first, _ = ask_json("doc.txt", QUESTION, cwd=tmp_path)
    assert first["answer"] == doc.value and first["reused_from"] is None and first["continued_from"] is None
    steps = stored_steps(memagent_home)
    again, said = ask_json("doc.txt", QUESTION, cwd=tmp_path)
    # the stored run's record, whole: its quotes read again from the document; asked anew, it begins a
    # conversation of its own (so that `ask -c` goes on from this answer)
    assert without(again, "reused_from", "conversation") == without(first, "reused_from", "conversation")
    assert first["conversation"] == {"id": first["trace"], "turn": 1}
    assert again["conversation"]["turn"] == 1 and again["conversation"]["id"] != first["trace"]
    assert again["reused_from"]["run"] == first["trace"] and again["reused_from"]["at"].endswith("+00:00")
    assert NOTE.fullmatch(said.strip()).group(1) == first["trace"][:8]
    assert stored_steps(memagent_home) == steps  # nothing was read, nothing added

    cited = run_memagent("ask", "doc.txt", QUESTION, *RUN, "--cite", cwd=tmp_path)
    place = f"doc.txt chars {first['quotes'][0]['start']:,}–{first['quotes'][0]['end']:,}"
    assert cited.stdout == f'{doc.value}\n[1] {place}: "{fact_sentence(doc.value)}"\n'
    quiet = run_memagent("ask", "doc.txt", QUESTION, *RUN, "--quiet", cwd=tmp_path)
    assert quiet.stdout == f"{doc.value}\n" and quiet.stderr == ""

    for fresh in (["--fresh"], []):
        env = {} if fresh else {"MEMAGENT_FRESH": "1"}
        read, said = ask_json("doc.txt", QUESTION, *fresh, cwd=tmp_path, env=env)
        assert read["reused_from"] is None and read["trace"] != first["trace"] and "answered before" not in said
    latest = read["trace"]
    after, _ = ask_json("doc.txt", QUESTION, cwd=tmp_path)
    assert after["reused_from"]["run"] == latest  # the run that read again is the one found next

    listed = json.loads(run_memagent("traces", "list", "--reused", "--json", cwd=tmp_path).stdout)["runs"]
    assert [(r["id"], r["reuses"]) for r in listed] == [(latest, 1), (first["trace"], 3)]
    shown = run_memagent("traces", "show", first["trace"], cwd=tmp_path)
    assert "answer given again 3 times, last " in shown.stdout


def test_what_decides_the_answer_reads_again_and_what_does_not_reuses(tmp_path):
    doc = whole_fact(300, 11)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    other_model = tmp_path / "copy.gguf"
    shutil.copy(CODEWORD_MODEL, other_model)
    base, _ = ask_json("doc.txt", QUESTION, cwd=tmp_path)
    for same in (["--threads", "2"], ["--parallel", "2"], ["--no-speculate"], ["--ctx", "2048"], ["--svg", "x.svg"]):
        record, said = ask_json("doc.txt", QUESTION, *same, cwd=tmp_path)
        assert record["reused_from"]["run"] == base["trace"], same
    assert "x.svg is not saved: nothing was read" in said and not (tmp_path / "x.svg").exists()
    for differs in (["--chunk-tokens", "48"], ["--seed", "5"], ["--instructions", "One word."], ["-m", other_model]):
        record, _ = ask_json("doc.txt", QUESTION, *differs, cwd=tmp_path)
        assert record["reused_from"] is None, differs
    # the model taught to answer in JSON (tests/test_schema.py), with room for its answer
    as_data = ["-m", CODEWORD_MODEL.with_name("schema.gguf"), "--answer-tokens", "48"]
    plain, _ = ask_json("doc.txt", QUESTION, *as_data, cwd=tmp_path)
    schema, _ = ask_json("doc.txt", QUESTION, *as_data, "--schema", "code_word, found bool", cwd=tmp_path)
    assert plain["reused_from"] is None and schema["reused_from"] is None
    again, _ = ask_json("doc.txt", QUESTION, *as_data, "--schema", "code_word, found bool", cwd=tmp_path)
    assert again["reused_from"]["run"] == schema["trace"] and again["data"] == schema["data"] == {
        "code_word": doc.value,
        "found": True,
    }
    assert without(again, "reused_from", "conversation") == without(schema, "reused_from", "conversation")


def test_several_questions_are_each_found_on_their_own(tmp_path):
    doc = whole_fact(300, 21)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    first = run_memagent("ask", "doc.txt", "-q", QUESTION, "-q", "Which code word?", *RUN, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    asked = json.loads(first.stdout)["results"]
    again = run_memagent("ask", "doc.txt", "-q", QUESTION, "-q", "Name the code word.", *RUN, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    found, read = json.loads(again.stdout)["results"]
    assert found["reused_from"]["run"] == asked[0]["trace"] and without(found, "reused_from") == without(asked[0], "reused_from")
    assert read["reused_from"] is None and read["question"] == "Name the code word."
    assert f"Q1: answered before (run {asked[0]['trace'][:8]}" in again.stderr
    text = run_memagent("ask", "doc.txt", "-q", QUESTION, "-q", "Name the code word.", *RUN, cwd=tmp_path)
    assert text.stdout.startswith(f"Q1: {QUESTION}\n{doc.value}\n\nQ2: Name the code word.\n")
    assert text.stderr.count("answered before") == 2  # both stored now: no model was loaded


def test_a_renamed_document_is_answered_under_its_new_name(tmp_path):
    doc = whole_fact(300, 31)
    (tmp_path / "old.txt").write_text(doc.text, encoding="utf-8")
    first, _ = ask_json("old.txt", QUESTION, cwd=tmp_path)
    (tmp_path / "old.txt").rename(tmp_path / "new.txt")
    again, _ = ask_json("new.txt", QUESTION, cwd=tmp_path)
    assert again["reused_from"]["run"] == first["trace"] and again["answer"] == doc.value
    assert [s["path"] for s in again["sources"]] == ["new.txt"]
    (quote,) = again["quotes"]
    assert (
        quote["source"] == "new.txt"
        and quote["location"].startswith("new.txt chars ")
        and quote["text"] == fact_sentence(doc.value)
    )
    assert all(span["path"] == "new.txt" for step in again["steps"] for span in step["spans"])


# --- ask --each -------------------------------------------------------------------------------


def test_each_rerun_reads_only_the_new_and_changed_documents(tmp_path, memagent_home):
    root = tmp_path / "docs"
    root.mkdir()
    docs = {name: whole_fact(300, seed) for name, seed in (("a.txt", 1), ("b.txt", 40), ("c.txt", 80), ("d.txt", 120))}
    for name, doc in docs.items():
        (root / name).write_text(doc.text, encoding="utf-8")
    args = ["docs", "--each", "-q", QUESTION, "--csv", "out.csv", "--jsonl", "out.jsonl"]

    def each(*extra):
        done = run_memagent("ask", *args, *extra, *RUN, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        rows = {r["document"]: r for r in json.loads(done.stdout)["results"]}
        table = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8-sig"))))
        lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
        assert sorted(r["document"] for r in table) == sorted(rows) == sorted(line["document"] for line in lines)
        return rows, done.stderr

    first, _ = each()
    assert {d: r["answer"] for d, r in first.items()} == {f"docs/{n}": doc.value for n, doc in docs.items()}
    steps = stored_steps(memagent_home)
    again, said = each()
    assert all(r["reused_from"]["run"] == first[d]["trace"] for d, r in again.items())
    assert all(without(r, "reused_from") == without(first[d], "reused_from") for d, r in again.items())
    assert stored_steps(memagent_home) == steps and said.count("from the same text") == 4

    changed = whole_fact(300, 200)
    (root / "b.txt").write_text(changed.text, encoding="utf-8")  # another code word
    added = whole_fact(300, 240)
    (root / "e.txt").write_text(added.text, encoding="utf-8")
    (root / "c.txt").unlink()
    os.utime(root / "d.txt", (1_000_000_000, 1_000_000_000))  # touched: the same text
    third, said = each()
    assert sorted(third) == ["docs/a.txt", "docs/b.txt", "docs/d.txt", "docs/e.txt"]  # c.txt is gone: no row
    assert {d for d, r in third.items() if r["reused_from"]} == {"docs/a.txt", "docs/d.txt"}
    assert third["docs/b.txt"]["answer"] == changed.value and third["docs/e.txt"]["answer"] == added.value
    read = [r for r in third.values() if not r["reused_from"]]
    assert stored_steps(memagent_home) == steps + sum(len(r["steps"]) for r in read)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8-sig"))))
    assert [r["document"] for r in rows][:2] == ["docs/a.txt", "docs/d.txt"]  # what the store answers comes first
    assert {r["document"]: r["answer"] for r in rows} == {d: r["answer"] for d, r in third.items()}

    fresh, said = each("--fresh")
    assert all(r["reused_from"] is None for r in fresh.values()) and "answered before" not in said


# --- a document that grew -------------------------------------------------------------------


def _whole_when_appended(text: str, seed: int):
    """A code-word document whose fact no 64-token chunk cuts once it is appended to `text` (after a
    newline): the trained model then finds it in the grown text."""
    encode, decode = codeword_tokenizer()
    for s in range(seed, seed + 200):
        doc = whole_fact(200, s)
        grown = Document(text + "\n" + doc.text, doc.value, None)
        if not cut_by_boundary(grown, encode, decode, 64):
            return doc
    raise AssertionError("no seed gave a whole fact")  # pragma: no cover


def _change_a_word(path, start: int, end: int) -> None:
    """Puts another word for one between `start` and `end` of path's text, where that keeps the
    text's token count: the chunks after it stay the same (the fact stays whole)."""
    encode, _ = codeword_tokenizer()
    text = path.read_text(encoding="utf-8")
    count = len(encode(text.strip()))
    for match in re.finditer(r"\b[a-z]{4,}\b", text[start:end]):
        at, word = start + match.start(), match.group()
        for other in ("river", "market", "garden", "harbour", "square", "valley", "station", "morning", "window"):
            edited = text[:at] + other + text[at + len(word) :]
            if other != word and len(encode(edited.strip())) == count:
                path.write_text(edited, encoding="utf-8")
                return
    raise AssertionError("no word to change there")  # pragma: no cover


def test_a_grown_log_is_continued_from_its_last_unchanged_chunk(tmp_path):
    rng = random.Random(3)
    log = tmp_path / "build.log"
    log.write_text(make_document(rng, 1250, fact=False).text, encoding="utf-8")  # about 20 chunks, no fact
    first, _ = ask_json("build.log", QUESTION, cwd=tmp_path)
    assert first["answer"] == "unknown" and len(first["steps"]) >= 18
    full = sum(1 for s in first["steps"] if s["tokens"] == 64)
    appended = _whole_when_appended(log.read_text(encoding="utf-8"), 9)
    with open(log, "a", encoding="utf-8") as f:
        f.write("\n" + appended.text)
    grown, said = ask_json("build.log", QUESTION, cwd=tmp_path)
    assert grown["continued_from"] == {"run": first["trace"], "step": full}
    assert grown["answer"] == appended.value and grown["reused_from"] is None  # from what was appended
    taken = "step 1" if full == 1 else f"steps 1–{full}"
    assert f"Continued run {first['trace'][:8]}: {taken} read the same text then" in said
    assert not re.search(rf"^step {full}/", said, re.M) and re.search(
        rf"^step {full + 1}/", said, re.M
    )  # read: the new chunks alone
    shown = json.loads(run_memagent("traces", "show", grown["trace"], "--json", cwd=tmp_path).stdout)
    assert [s.get("copied_from") for s in shown["steps"]] == [first["trace"]] * full + [None] * (len(shown["steps"]) - full)
    assert [s["memory"] for s in shown["steps"][:full]] == [s["memory"] for s in first["steps"][:full]]
    assert shown["continued_from"] == grown["continued_from"] and shown["quotes"][0]["text"] == fact_sentence(appended.value)

    # an edit in the middle: read from the chunk that holds it on
    middle = grown["steps"][9]["spans"][0]
    _change_a_word(log, (middle["start"] + middle["end"]) // 2, middle["end"] - 8)
    edited, _ = ask_json("build.log", QUESTION, cwd=tmp_path)
    assert edited["continued_from"] == {"run": grown["trace"], "step": 9} and edited["answer"] == appended.value

    # the first chunk changed: read from the start
    _change_a_word(log, 0, grown["steps"][0]["spans"][0]["end"] - 8)
    whole, _ = ask_json("build.log", QUESTION, cwd=tmp_path)
    assert whole["continued_from"] is None and whole["answer"] == appended.value

    with open(log, "a", encoding="utf-8") as f:
        f.write("\nThe build ended.")
    fresh, _ = ask_json("build.log", QUESTION, "--fresh", cwd=tmp_path)
    assert fresh["continued_from"] is None  # --fresh reads from the start


def test_infmem_reads_a_grown_document_anew(tmp_path):
    """InfMem's search covers the whole text, so a step of an earlier run is no step of this one."""
    infmem = CODEWORD_MODEL.parent / "infmem.gguf"
    log = tmp_path / "notes.txt"
    log.write_text(make_document(random.Random(4), 400, fact=False).text, encoding="utf-8")
    args = ["notes.txt", QUESTION, "-m", infmem, "--protocol", "infmem", "--chunk-tokens", "500", "--temperature", "0"]
    first = run_memagent("ask", *args, "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with open(log, "a", encoding="utf-8") as f:
        f.write("\n" + make_document(random.Random(5), 400, fact=False).text)
    grown = run_memagent("ask", *args, "--json", cwd=tmp_path)
    assert grown.returncode == 0, grown.stderr
    assert json.loads(grown.stdout)["continued_from"] is None and "Continued run" not in grown.stderr


# --- batch, MCP, eval -------------------------------------------------------------------------


def test_batch_finds_answers_across_results_files(tmp_path, memagent_home):
    a, b = whole_fact(300, 51), whole_fact(300, 52)
    (tmp_path / "a.txt").write_text(a.text, encoding="utf-8")
    lines = [
        {"custom_id": "file", "sources": ["a.txt"], "question": QUESTION},
        {"custom_id": "inline", "context": b.text, "questions": [QUESTION, "Which code word?"]},
    ]
    (tmp_path / "job.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    def batch(out, *extra):
        done = run_memagent("batch", "job.jsonl", "-o", out, *extra, *RUN, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        rows = {r["custom_id"]: r for r in map(json.loads, (tmp_path / out).read_text(encoding="utf-8").splitlines())}
        return json.loads(done.stdout), rows, done.stderr

    summary, first, _ = batch("one.jsonl")
    assert summary["reused"] == 0 and first["file"]["answer"] == a.value and first["inline"]["results"][0]["answer"] == b.value
    steps = stored_steps(memagent_home)
    summary, again, said = batch("two.jsonl")
    assert summary == {**summary, "done": 2, "reused": 3} and stored_steps(memagent_home) == steps
    assert without(again["file"], "reused_from") == without(first["file"], "reused_from")
    for mine, theirs in zip(again["inline"]["results"], first["inline"]["results"]):
        assert mine["reused_from"]["run"] == theirs["trace"] and without(mine, "reused_from") == without(theirs, "reused_from")
    assert again["inline"]["results"][0]["quotes"][0]["text"] == fact_sentence(b.value)  # read again from the line's context
    assert "answered before" in said
    summary, _, _ = batch("three.jsonl", "--fresh")
    assert summary["reused"] == 0 and stored_steps(memagent_home) > steps


def test_mcp_ask_gives_a_stored_answer_unless_fresh(tmp_path, memagent_home):
    from mcp import Client

    doc = whole_fact(300, 61)
    (tmp_path / "a.txt").write_text(doc.text, encoding="utf-8")
    first, _ = ask_json("a.txt", QUESTION, cwd=tmp_path)  # asked on the command line first
    params = mcp_stdio(memagent_home, tmp_path, *RUN)

    async def main():
        async with Client(params) as client:
            found = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION})
            fresh = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION, "fresh": True})
            again = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION})
            return found.structured_content, fresh.structured_content, again.structured_content

    found, fresh, again = anyio.run(main)
    assert found["reused_from"]["run"] == first["trace"] and found["trace"] == first["trace"]
    assert found["answer"] == doc.value and found["evidence"][0]["excerpt"] == fact_sentence(doc.value)
    assert found["steps"] == len(first["steps"]) and found["quotes"][0]["text"] == first["quotes"][0]["text"]
    assert fresh["reused_from"] is None and fresh["trace"] != first["trace"] and fresh["answer"] == doc.value
    assert again["reused_from"]["run"] == fresh["trace"]


def test_eval_reads_every_item_unless_reuse(tmp_path):
    made = run_memagent(
        "eval", "make-niah", "--tokens", "250", "--n", "3", "-o", "items.jsonl", "-m", CODEWORD_MODEL, cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    args = ["eval", "items.jsonl", *RUN, "--json"]

    def scored(out, *extra):
        done = run_memagent(*args, "--out", out, *extra, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), [json.loads(line) for line in (tmp_path / out).read_text().splitlines()]

    plain, rows = scored("plain.jsonl")
    assert not any("reused_from" in r for r in rows)
    _, rows = scored("plain2.jsonl")
    assert not any("reused_from" in r for r in rows)  # eval measures: without --reuse it reads, and records nothing
    recorded, first = scored("one.jsonl", "--reuse")
    assert not any("reused_from" in r for r in first)
    again, second = scored("two.jsonl", "--reuse")
    assert all("reused_from" in r for r in second)
    scores = ("n", "sub_em", "em", "f1", "quote_hit")
    assert [without(s, "out") for s in (plain, recorded, again)] == [without(plain, "out")] * 3 and set(scores) <= set(plain)
    assert [without(r, "reused_from", "seconds") for r in second] == [without(r, "seconds") for r in first]


def test_a_log_piped_in_again_is_continued_never_reused(tmp_path):
    """Standard input is known only once read: never answered from the store, but its chunks are
    compared as they come, so a grown log piped in again reads only what was added."""
    text = make_document(random.Random(6), 600, fact=False).text
    appended = _whole_when_appended(text, 30)
    first = run_memagent("ask", QUESTION, *RUN, "--json", input=text, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    full = sum(1 for s in json.loads(first.stdout)["steps"] if s["tokens"] == 64)
    grown = run_memagent("ask", QUESTION, *RUN, "--json", input=text + "\n" + appended.text, cwd=tmp_path)
    assert grown.returncode == 0, grown.stderr
    record = json.loads(grown.stdout)
    assert record["continued_from"] == {"run": json.loads(first.stdout)["trace"], "step": full}
    assert record["answer"] == appended.value and record["reused_from"] is None
    same = run_memagent("ask", QUESTION, *RUN, "--json", input=text + "\n" + appended.text, cwd=tmp_path)
    again = json.loads(same.stdout)
    assert again["reused_from"] is None and again["continued_from"]["step"] == len(again["steps"])  # every step taken
    assert "only the answer is written" in same.stderr and again["answer"] == appended.value
