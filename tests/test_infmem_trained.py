"""Answers through InfMem's protocol: the trained stand-in (tests/data/infmem.gguf) through the real
`memagent` process and real llama.cpp, greedy.

The model performs the code-word task in InfMem's format (testkit/infmem_task.py): before each chunk
its planner searches the whole document for "code word" until its memory holds the fact, then says
STOP; a memory write copies the fact sentence from a passage the search found (or the chunk), or
keeps the memory; the answer ends "Therefore, the answer is ...". Every reply opens and closes its
reasoning itself, "<think>" and "</think>" single added tokens as in Qwen3's vocabulary. Its name
says "InfMem", so memagent picks the protocol without being told. It learnt the exact InfMem prompts
written out from the reference: a planner prompt built wrong, passages missing from the write, a
memory not carried, a history or STOP streak lost on resume, each make these fail. It was trained on
128-token chunks and documents of up to three 500-token units, so every run here uses
--chunk-tokens 128 on documents of ~1,150 tokens (9 chunks), chosen (by seed) with the fact whole in
a unit and a chunk.
"""

from __future__ import annotations

import json
import random
import re
import signal

import pytest
from helpers import run_memagent, shared_path, spawn_memagent, wait_for_steps

from testkit.codeword import QUESTION, fact_sentence, make_document
from testkit.infmem_task import (
    CHUNK_TOKENS,
    END_THINK,
    MODEL,
    NOT_YET,
    QUERY,
    THINK,
    TOP_K,
    UNIT_TOKENS,
    fact_unit,
    final_reply,
    pieces,
    planner_reply,
    tokenizer,
    whole_fact,
    write_reply,
)

DOC_TOKENS = 1800  # as codeword.make_document counts: ~1,150 of this model's tokens, 3 units, 9 chunks
BUDGETS = ["--chunk-tokens", str(CHUNK_TOKENS), "--memory-tokens", "64", "--answer-tokens", "32"]
RUN = ["-m", MODEL, *BUDGETS, "--threads", "1"]


def ask(*args, env=None) -> tuple[dict, str]:
    done = run_memagent("ask", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def chunks_of(text: str) -> list[str]:
    encode, decode = tokenizer()
    return pieces(text, CHUNK_TOKENS, encode, decode)


@pytest.fixture(scope="module")
def late(tmp_path_factory):
    """One run over a document whose fact lies in a late chunk (its own trace store: the per-test one
    is not made yet for a module's fixture)."""
    doc = whole_fact(DOC_TOKENS, 0, where=0.85)
    folder = tmp_path_factory.mktemp("late")
    path = folder / "doc.txt"
    path.write_text(doc.text)
    out, err = ask(path, QUESTION, *RUN, env={"MEMAGENT_HOME": str(folder / "home")})
    return doc, path, out, err


def test_a_late_fact_is_found_by_the_first_search_and_three_stops_end_the_reading(late):
    """No --protocol: the GGUF's name says InfMem. Step 1 reads the first chunk, but its search finds
    the fact's unit far ahead, best of the three; the write copies the sentence from that passage;
    steps 2 and 3 say STOP and keep it; step 4's STOP, the third in a row, ends the reading: three of
    nine chunks read, and the answer right."""
    doc, path, out, err = late
    encode, decode = tokenizer()
    fact = fact_sentence(doc.value)
    chunks = chunks_of(doc.text)
    total, at, unit = len(chunks), next(k for k, c in enumerate(chunks) if fact in c), fact_unit(doc, encode, decode)
    assert total >= 8 and at >= total - 3 and unit is not None and unit >= 1  # the fact in a late chunk
    assert fact not in chunks[0]
    settings = out["settings"]
    assert (settings["protocol"], settings["early_stop"], settings["temperature"]) == ("infmem", 3, 0.0)
    assert -(-out["document_tokens"] // CHUNK_TOKENS) == total

    steps = out["steps"]
    decisions = [s["decision"] for s in steps]
    assert [d["action"] for d in decisions] == ["search", "stop", "stop"]  # fewer steps than chunks
    assert [d["stop_streak"] for d in decisions] == [0, 1, 2]
    assert [d["reply"] for d in decisions] == [planner_reply("No previous memory"), planner_reply(fact), planner_reply(fact)]
    (search,) = decisions[0]["searches"]
    assert (search["query"], search["top_k"]) == (QUERY, TOP_K)
    units = len(pieces(doc.text, UNIT_TOKENS, encode, decode))
    found = [u["unit"] for u in search["units"]]
    assert units == 3 and found[0] == unit and sorted(found) == [0, 1, 2]  # BM25 put the fact's unit first
    assert search["units"][0]["start_token"] >= steps[0]["tokens"]  # ahead of what step 1 read in order
    assert [s["memory"] for s in steps] == [fact] * 3  # written at step 1, from the passage alone
    assert out["memory"] == fact and out["answer"] == doc.value
    assert out["raw_answer"] == final_reply(doc.value)  # reasoning, "</think>", then "the answer is"
    assert f"plan 1: search '{QUERY}' found {path} chars " in err and "plan 2: STOP 1/3" in err
    assert f"stopped early after 3 of {total} chunks (STOP 3 times in a row)" in err
    # each passage found is named by its whole span, first character to last: the three tile the text
    # exactly, as the units' tokens tile the input (they gave one character: 'chars 2,123–2,124')
    spans = sorted(
        tuple(
            int(x.replace(",", ""))
            for x in re.fullmatch(rf"{re.escape(str(path))} chars ([\d,]+)–([\d,]+)", u["location"]).groups()
        )
        for u in search["units"]
    )
    text = doc.text.strip()
    assert spans[0][0] == 0 and all(b[0] == a[1] for a, b in zip(spans, spans[1:])) and spans[-1][1] == len(text)
    assert [text[a:b] for a, b in spans] == pieces(text, UNIT_TOKENS, encode, decode)  # each span is its unit's text
    assert f"found {' | '.join(u['location'] for u in search['units'])}" in err  # the passages told apart


def _squashed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _unit_ranges(laid_out: str) -> list[tuple[int, int]]:
    """Each retrieval unit of a document laid out as `inspect --text` prints it, as a range of
    that text with its white space taken out."""
    encode, decode = tokenizer()
    ranges, at = [], 0
    for unit in pieces(laid_out, UNIT_TOKENS, encode, decode):
        ranges.append((at, at + len(_squashed(unit))))
        at += len(_squashed(unit))
    return ranges


def test_a_pdf_passage_is_named_by_the_pages_it_spans(tmp_path):
    """A passage the search found in a PDF is named by the pages of its first and its last character
    ("doc.pdf pp. 2–3"), through the real CLI."""
    from bisect import bisect_right

    from fpdf import FPDF

    doc = whole_fact(DOC_TOKENS, 0, where=0.85)
    lines = doc.text.split("\n")
    pages = ["\n".join(lines[k * len(lines) // 6 : (k + 1) * len(lines) // 6]) for k in range(6)]
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for page in pages:  # six pages, about half a retrieval unit each
        pdf.add_page()
        pdf.multi_cell(0, 5, page)
    path = tmp_path / "doc.pdf"
    pdf.output(str(path))
    out, err = ask(path, QUESTION, *RUN, env={"MEMAGENT_HOME": str(tmp_path / "home")})
    (search,) = out["steps"][0]["decision"]["searches"]

    # where each page begins and each unit begins and ends, counted without white space (the PDF's
    # line breaks are its own): the pages of a unit's first and last characters
    shown = run_memagent("inspect", path, "--text")
    assert shown.returncode == 0, shown.stderr
    assert _squashed(shown.stdout) == "".join(_squashed(p) for p in pages)
    page_starts = [sum(len(_squashed(p)) for p in pages[:k]) for k in range(6)]
    units = _unit_ranges(shown.stdout)
    expected = {}
    for k, (a, b) in enumerate(units):
        first, last = bisect_right(page_starts, a), bisect_right(page_starts, b - 1)
        expected[k] = f"{path} p. {first}" if first == last else f"{path} pp. {first}–{last}"
    assert len(units) == 3 and any(" pp. " in place for place in expected.values())  # a passage spans pages
    assert {u["unit"]: u["location"] for u in search["units"]} == expected
    assert f"plan 1: search '{QUERY}' found {' | '.join(expected[u['unit']] for u in search['units'])}" in err


def test_a_passage_over_several_files_names_each_files_part(tmp_path):
    """Of a folder of short files, a passage runs over several: it is named by each file's characters
    it holds ("b.txt chars 210–880; c.txt chars 0–640"), its headers in none, and the passages are
    told apart in the plan line by " | "."""
    doc = whole_fact(DOC_TOKENS, 0, where=0.85)
    lines = doc.text.split("\n")
    names = [f"part{k}.txt" for k in range(5)]
    bodies = ["\n".join(lines[k * len(lines) // 5 : (k + 1) * len(lines) // 5]).strip() for k in range(5)]
    for name, body in zip(names, bodies):
        (tmp_path / name).write_text(body)
    done = run_memagent("ask", ".", QUESTION, *RUN, "--json", cwd=tmp_path, env={"MEMAGENT_HOME": str(tmp_path / "home")})
    assert done.returncode == 0, done.stderr
    (search,) = json.loads(done.stdout)["steps"][0]["decision"]["searches"]

    shown = run_memagent("inspect", ".", "--text", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    laid_out = shown.stdout.strip()
    encode, decode = tokenizer()
    units = pieces(laid_out, UNIT_TOKENS, encode, decode)
    assert "".join(units) == laid_out
    # each file's text in the laid-out text, after its "Document k:" header; each unit's range in it
    starts = [
        laid_out.index(f"Document {k + 1}:\n{name}\n{body}") + len(f"Document {k + 1}:\n{name}\n")
        for k, (name, body) in enumerate(zip(names, bodies))
    ]
    expected, at = {}, 0
    for k, unit in enumerate(units):
        a, b = at, at + len(unit)
        at = b
        places = []
        for name, body, start in zip(names, bodies, starts):
            lo, hi = max(a, start) - start, min(b, start + len(body)) - start
            if hi > lo:
                places.append(f"{name} chars {lo:,}–{hi:,}")
        expected[k] = "; ".join(places)
    assert any(";" in place for place in expected.values())  # a passage over files
    assert {u["unit"]: u["location"] for u in search["units"]} == expected
    assert f"plan 1: search '{QUERY}' found {' | '.join(expected[u['unit']] for u in search['units'])}" in done.stderr


def test_the_evidence_is_the_sentence_the_search_found_ahead(late):
    """The answer rests on step 1, and its quote is the fact sentence where the file holds it: in the
    passage the search found, past everything step 1 (or any step) read in order."""
    doc, path, out, _ = late
    assert [e["step"] for e in out["evidence"]] == [1]
    quote = out["quotes"][0]
    fact = fact_sentence(doc.value)
    assert quote["text"] == fact and quote["step"] == 1 and quote["source"] == str(path)
    assert doc.text[quote["start"] : quote["end"]] == fact
    read_in_order = sum(len(c) for c in chunks_of(doc.text)[: len(out["steps"])])
    assert quote["start"] >= read_in_order


def test_an_interrupted_run_resumes_with_its_search_history_and_stop_streak(tmp_path, spawned):
    """Ctrl-C after step 2 (a search, then the first STOP): --resume replays both from the trace, the
    STOP streak and the search history with them, so the next STOP is the second and step 4's the
    third: the same steps, replies, memories and answer as a run never interrupted."""
    doc = whole_fact(DOC_TOKENS, 20, where=0.7)
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    whole, _ = ask(path, QUESTION, *RUN, "--no-trace")
    assert [s["decision"]["action"] for s in whole["steps"]] == ["search", "stop", "stop"]
    proc = spawn_memagent("ask", path, QUESTION, *RUN, env={"NO_COLOR": "1"})
    spawned.append(proc)
    wait_for_steps(proc, 2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    shown = json.loads(run_memagent("traces", "show", "last", "--json").stdout)
    assert shown["status"] == "interrupted" and shown["settings"]["protocol"] == "infmem"
    assert 2 <= shown["step_count"] < 3 + 1  # the signal came during step 3 or 4: steps 1 and 2 kept, or 3 too
    assert shown["steps"][0]["memory"] == fact_sentence(doc.value)
    again, err = ask("--resume", "last")
    assert [s["decision"] for s in again["steps"]] == [s["decision"] for s in whole["steps"]]
    assert [s["memory"] for s in again["steps"]] == [s["memory"] for s in whole["steps"]]
    assert again["answer"] == whole["answer"] == doc.value and again["raw_answer"] == whole["raw_answer"]
    assert f"stopped early after 3 of {len(chunks_of(doc.text))} chunks" in err


def test_without_a_code_word_every_chunk_is_searched_and_read(tmp_path):
    """No fact: the memory never holds one, so every planner call searches (the history growing a
    line a step) and no STOP comes; every chunk is read, and the answer is "unknown"."""
    doc = make_document(random.Random(3), DOC_TOKENS, fact=False)
    path = tmp_path / "doc.txt"
    path.write_text(doc.text)
    out, err = ask(path, QUESTION, *RUN)
    total = len(chunks_of(doc.text))
    steps = out["steps"]
    assert total >= 8 and len(steps) == total
    assert [s["decision"]["action"] for s in steps] == ["search"] * total
    assert [s["decision"]["stop_streak"] for s in steps] == [0] * total
    assert {s["decision"]["reply"] for s in steps} == {planner_reply(NOT_YET)}
    assert [s["memory"] for s in steps] == [NOT_YET] * total
    assert out["answer"] == "unknown" and out["raw_answer"] == final_reply(None)
    assert "stopped early" not in err and f"plan {total}: search '{QUERY}'" in err


def test_early_stop_one_ends_at_the_first_stop(tmp_path):
    """--early-stop 1 over three documents (--each: one process, one model load): the fact found by
    step 1's search wherever it lies, step 2's STOP ends the reading at once."""
    docs = {
        f"{name}.txt": whole_fact(DOC_TOKENS, seed, where=where)
        for name, seed, where in (("start", 40, 0.0), ("middle", 60, 0.5), ("end", 80, 1.0))
    }
    for name, doc in docs.items():
        (tmp_path / name).write_text(doc.text)
    done = run_memagent("ask", *docs, "--each", "-q", QUESTION, *RUN, "--early-stop", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["document"] for r in results] == list(docs)
    for r in results:
        doc = docs[r["document"]]
        assert r["answer"] == doc.value and r["settings"]["early_stop"] == 1
        assert [(s["decision"]["action"], s["memory"]) for s in r["steps"]] == [("search", fact_sentence(doc.value))]


def _qwen3_vocabulary(path):
    """Qwen3's vocabulary as a vocabulary-only GGUF: Qwen2.5's (the fixture llama.cpp's converter
    wrote) with Qwen3's four added tokens in place of its first four padding rows, user-defined as
    the converter writes an added token that is not special (`<think>` and `</think>` are `special:
    false` in Qwen3's tokenizer.json). Patched in the file's bytes (gguf's writer takes ~40 s over
    152,064 tokens and 151,387 merges): a string is its uint64 length and its bytes, a type an int32."""
    import struct

    data = bytearray(shared_path("fixtures", "qwen2.5-vocab-llamacpp.gguf").read_bytes())

    def strings(texts: list[str]) -> bytes:
        return b"".join(struct.pack("<Q", len(t.encode())) + t.encode() for t in texts)

    padding = strings([f"[PAD{i}]" for i in range(151665, 151669)])
    assert data.count(padding) == 1
    at = data.index(padding)
    data[at : at + len(padding)] = strings(["<tool_response>", "</tool_response>", THINK, END_THINK])
    key = b"tokenizer.ggml.token_type"
    head = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 5, 152064)  # an array of 152,064 int32
    assert data.count(head) == 1
    at = data.index(head) + len(head) + 4 * 151665
    assert data[at : at + 16] == struct.pack("<4i", 5, 5, 5, 5)  # unused
    data[at : at + 16] = struct.pack("<4i", 4, 4, 4, 4)  # user-defined
    path.write_bytes(bytes(data))
    return path


def test_the_stand_in_reads_its_reasoning_as_qwen3_does(tmp_path):
    """The stand-in's `<think>` and `</think>` are what Qwen3's are: added tokens of the user-defined
    type (Qwen3's ids 151667 and 151668 have no place in a vocabulary of 1,473), which memagent's
    tokenizer and llama.cpp's split out of any text, a message's or a first stage re-read by the
    second. Each reply the model writes is read alike by it and by Qwen3's vocabulary: one of each
    reasoning token, the same text around them."""
    from memagent_cli.core.infmem_loop import raw_chat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import LlamaTokenizer, decode, encode_template, load_tokenizer

    fact = fact_sentence("amber falcon")
    replies = [planner_reply(NOT_YET), planner_reply(fact), write_reply(NOT_YET, fact, "", "amber falcon")[0], final_reply(None)]
    read: dict[str, list[list[str]]] = {}
    for name, path in (("stand-in", MODEL), ("qwen3", _qwen3_vocabulary(tmp_path / "qwen3-vocab.gguf"))):
        info = read_gguf(path)
        tokens, types = info.get("tokenizer.ggml.tokens"), info.get("tokenizer.ggml.token_type")
        think, end = tokens.index(THINK.encode()), tokens.index(END_THINK.encode())
        assert types[think] == types[end] == 4  # user-defined, as llama.cpp's converter writes Qwen3's
        if name == "qwen3":
            assert (think, end) == (151667, 151668) and len(tokens) == 152064
        tok, llama = load_tokenizer(info), LlamaTokenizer(info)
        for text in replies:
            ids = tok.encode(text)
            assert ids == llama.encode(text) and ids.count(think) == ids.count(end) == 1 and decode(tok, ids) == text
            prompt = raw_chat(None, "A question.")
            assert encode_template(tok, prompt.then(text).pieces) == encode_template(tok, prompt.pieces) + ids  # a second stage
            at, to = ids.index(think), ids.index(end)
            read.setdefault(name, []).append([decode(tok, part) for part in (ids[:at], ids[at + 1 : to], ids[to + 1 :])])
    assert read["stand-in"] == read["qwen3"]


def test_an_mcp_host_is_told_each_plan(tmp_path):
    """Over MCP (`memagent mcp`, stdio, the SDK's own client) the host's log gets each step's decision
    as the live view says it: the search that found the fact, then the STOPs."""
    import os
    import sys

    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    doc = whole_fact(DOC_TOKENS, 0, where=0.85)
    (tmp_path / "doc.txt").write_text(doc.text)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memagent_cli", "mcp", *map(str, RUN)],
        env={"MEMAGENT_HOME": str(tmp_path / "home"), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}},
        cwd=str(tmp_path),
    )
    logs = []

    async def on_log(params):
        logs.append(params)

    async def main():
        async with Client(params, logging_callback=on_log, log_level="info") as client:
            return await client.call_tool("ask", {"sources": ["doc.txt"], "question": QUESTION})

    done = anyio.run(main)
    assert not done.is_error, done.content
    assert done.structured_content["answer"] == doc.value
    plans = [entry.data for entry in logs if str(entry.data).startswith("plan ")]
    assert plans[0].startswith(f"plan 1: search '{QUERY}' found doc.txt chars ")
    assert plans[1:] == ["plan 2: STOP 1/3", "plan 3: STOP 2/3", "plan 4: STOP 3/3"]
