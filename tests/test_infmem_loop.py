"""InfMem's loop (core/infmem_loop.py) against the reference's loop: a transcription of the
reference's rule 1 and 2 (tests/data/shared/reference/infmem-protocol.md) written here from its
text blocks, run on the same scripted replies, must send the same prompts, byte for byte, in the
same order with the same budgets. The scripted replies cover a search (with an invented tool result
after the call), a STOP that is not yet the third, a stage one cut before `</think>`, a reply with
neither STOP nor a call, two calls in one reply, arguments that are not JSON, the early stop, and a
run that reads to the last chunk. Then the embedded engine's raw completions on a real model."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers import shared_path
from rank_bm25 import BM25Okapi

from memagent_cli.core.agent import LoopInput
from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
from memagent_cli.core.config import AgentConfig
from memagent_cli.core.events import AnswerFinished, ReadingStopped, StepFinished, StepPlanned
from memagent_cli.core.infmem_loop import raw_chat, run_infmem
from memagent_cli.ingest.base import Place
from memagent_cli.ingest.sources import Segment, Source
from memagent_cli.model.engine import CompletionDone, RawPrompt, Sampling, TextDelta
from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.tokenizer import load_tokenizer

FORCED = "\n\nConsidering the limited time, I must stop thinking now.\n</think>\n\n"  # the reference's literal
QUESTION = "What is the launch code of the PLUM project?"


@pytest.fixture(scope="module")
def reference() -> str:
    return shared_path("reference", "infmem-protocol.md").read_text(encoding="utf-8")


def block_with(text: str, start: str) -> str:
    (found,) = [b for b in re.findall(r"```text\n(.*?)```", text, flags=re.S) if b.startswith(start)]
    return found


@pytest.fixture(scope="module")
def tok(qwen2_vocab):
    return load_tokenizer(read_gguf(qwen2_vocab))


@dataclass
class Script:
    """A model that answers each completion with the next scripted text, recording what it was asked."""

    replies: list[str]
    asked: list[tuple[str, int]] = field(default_factory=list)

    def generate(self, prompt: str, max_tokens: int) -> str:
        self.asked.append((prompt, max_tokens))
        return self.replies[len(self.asked) - 1]


class ScriptedEngine:
    description = "scripted"
    concurrent = False

    def __init__(self, script: Script):
        self.script = script
        self.samplings: list[Sampling] = []

    def complete(self, user_message, max_tokens, sampling, expect=""):
        raise AssertionError("InfMem renders its own prompts: only raw completions")

    def complete_raw(self, prompt: RawPrompt, max_tokens: int, sampling: Sampling):
        self.samplings.append(sampling)
        text = self.script.generate(prompt.text, max_tokens)
        yield TextDelta(text)
        yield CompletionDone(text, "stop", len(prompt.text), len(text), max_tokens, 0, 0.0, 0.0)

    def close(self):
        pass


def reference_run(reference: str, document: str, tok, script: Script, early_stop: int = 3) -> str:
    """The reference's evaluation loop, from its text: rule 1 with rule 2's two stages."""
    planner_block = block_with(reference, "\nYou are a Retrieval Planner.")
    wrapper = block_with(reference, "<|im_start|>system\n# Tools")
    write_block = block_with(reference, "You are presented with a problem, a section")
    final_block = block_with(reference, "You are presented with a problem and a previous memory.")
    user_turn = block_with(reference, "<|im_start|>user\n{PROMPT}")
    call = re.compile(block_with(reference, "\u273fFUNCTION\u273f:").rstrip("\n"), re.DOTALL)

    def generate(prompt: str) -> str:
        t1 = script.generate(prompt, 1024)
        if "</think>" not in t1:
            t1 = t1.rstrip() + FORCED
        t2 = script.generate(prompt + t1, 1024)
        return (t1 + t2.strip()).strip()

    def extract_solution(reply: str) -> str:
        return reply.split("</think>")[-1].strip() if "</think>" in reply else reply

    ids = tok.encode(document)
    decode = lambda part: tok.decode_bytes(part).decode("utf-8", errors="replace")  # noqa: E731
    chunks = [decode(ids[i : i + 5000]) for i in range(0, len(ids), 5000)]
    units = [decode(ids[i : i + 500]) for i in range(0, len(ids), 500)]
    bm25 = BM25Okapi([u.lower().split() for u in units])
    memory, history, stop_count = "No previous memory", [], 0
    for s, chunk in enumerate(chunks, 1):
        lines = [f"Step {i}: query={q!r}, top_k={k}" for i, (q, k) in enumerate(history, 1)]
        retrieval_history = f"Current retrieval step: {s}  Maximum allowed retrieval steps: {len(chunks)}\n" + "\n".join(lines)
        planner = planner_block.format(prompt=QUESTION, retrieval_history=retrieval_history, memory=memory)
        reply = generate(wrapper.replace("{PLANNER_PROMPT}", planner))
        is_stop = "STOP" in reply
        calls = [] if is_stop else call.findall(reply)
        block = ""
        for name, args in calls:
            if name.strip() != "retrievesearch":
                continue
            args = args.strip()
            if args.startswith("{"):
                args = args[: args.rfind("}") + 1]
            try:
                parsed = __import__("json").loads(args)
                query, top_k = parsed.get("query", QUESTION), parsed.get("top_k", 8)
            except ValueError:
                query, top_k = QUESTION, 8
            history.append((query, top_k))
            scores = bm25.get_scores(query.lower().split())
            top = np.argsort(-scores, kind="stable")[:4]
            block = "\n\n".join(f"[Retrieved #{r}] {units[i]}" for r, i in enumerate(top, 1))
        if not is_stop:
            stop_count = 0
        if is_stop or not calls:
            stop_count += 1
            if stop_count >= early_stop:
                break
        write = write_block.format(prompt=QUESTION, retrieve=block, chunk=chunk, memory=memory)
        memory = extract_solution(generate(user_turn.replace("{PROMPT}", write)))
    final = final_block.format(prompt=QUESTION, memory=memory)
    return extract_solution(generate(user_turn.replace("{PROMPT}", final)))


def document(pages: int) -> list[str]:
    """Pages of filler, the PLUM launch code on page 9, an O'Neill note on page 3."""
    out = []
    for page in range(1, pages + 1):
        words = " ".join(f"filler{(page * 131 + k) % 977} word{k % 13}" for k in range(150))
        if page == 9:
            words += " The launch code of the PLUM project is 7-ALPHA-9."
        if page == 3:
            words += " Mr O'Neill wrote the plum memo."
        out.append(f"Page {page}. {words}\n")
    return out


def chunks_of(tok, pages: list[str]):
    src = Source(path="report.pdf", title="report.pdf", kind="pdf", size=None)

    def read(_):
        offset = 0
        for n, text in enumerate(pages, 1):
            yield Segment(source=0, text=text, offset=offset, place=Place("page", n))
            offset += len(text)

    stats = IngestStats()
    chunks = list(iter_chunks(layout([src], read), tok, 5000, [src], stats))
    return chunks, stats


SEARCH = (
    "<think>\nThe memory is empty.\n</think>\n\n\u273fFUNCTION\u273f: retrievesearch\n"
    '\u273fARGS\u273f: {"query": "launch code PLUM", "top_k": 5}\n\u273fRESULT\u273f: made up'
)


def write(n: int) -> list[str]:
    return [f"<think>\nReading {n}.\n</think>\n\nThe launch code is", f" 7-ALPHA-9 (step {n}).\n"]


SCRIPT = [
    # step 1: a search, the model inventing a tool result after its call
    SEARCH,
    "",
    *write(1),
    # step 2: stage one cut before </think> (closed by force), then a STOP: not yet the third
    "<think>\nI keep thinking about the plum   ",
    "STOP",
    *write(2),
    # step 3: two calls, the second's arguments not JSON: both searched and logged, the last written
    '\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "O\'Neill plum"}\n'
    "\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: not json at all",
    "",
    *write(3),
    # step 4: neither STOP nor a call: opens a streak
    "<think>\nHmm.\n</think>\n\nI am not sure.",
    "",
    *write(4),
    # steps 5 and 6: STOP, STOP: the third in a row ends the reading before chunk 6 is written
    "STOP",
    "",
    *write(5),
    "<think>\nDone.\n</think>\n\nSTOP",
    "",
    # the answer
    "<think>\nFrom memory.\n</think>\n\nTherefore, the answer is 7-ALPHA-9.",
    "",
]


def test_a_run_sends_the_references_prompts_and_stops_at_the_third_stop_in_a_row(reference, tok):
    pages = document(40)
    chunks, stats = chunks_of(tok, pages)
    assert len(chunks) >= 7
    text = "".join(c.text for c in chunks)
    oracle = Script(SCRIPT)
    expected_answer = reference_run(reference, text, tok, oracle)
    assert len(oracle.asked) == len(SCRIPT)  # the script is used up: every case above was reached

    engine = ScriptedEngine(Script(SCRIPT))
    config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0, seed=7)
    events = list(run_infmem(LoopInput(QUESTION, chunks, stats, engine, tok, config)))
    assert [p for p, _ in engine.script.asked] == [p for p, _ in oracle.asked]  # every prompt, byte for byte
    assert [m for _, m in engine.script.asked] == [m for _, m in oracle.asked]  # and every budget
    assert all(s.temperature == 0.0 and s.top_p == 1.0 for s in engine.samplings)

    (answer,) = [e for e in events if isinstance(e, AnswerFinished)]
    assert expected_answer == "Therefore, the answer is 7-ALPHA-9."
    assert answer.answer == "7-ALPHA-9" and answer.found
    plans = {e.index: e.decision for e in events if isinstance(e, StepPlanned)}
    assert [plans[s].action for s in range(1, 7)] == ["search", "stop", "search", "none", "stop", "stop"]
    assert [plans[s].stop_streak for s in range(1, 7)] == [0, 1, 0, 1, 2, 3]
    first = plans[1].searches[0]
    assert first.query == "launch code PLUM" and first.top_k == 5
    # the unit holding the code comes first, named by the pages its 500 tokens span
    best = first.found[0]
    assert "launch code of the PLUM project" in tok.decode_bytes(
        [i for c in chunks for i in c.ids][best.start_token : best.end_token]
    ).decode("utf-8", "replace")
    assert re.fullmatch(r"report\.pdf (p\. \d+|pp\. \d+–\d+)", best.location) and len(first.found) == 4
    assert [s.query for s in plans[3].searches] == ["O'Neill plum", QUESTION]
    assert plans[3].searches[1].top_k == 8
    written = [e.step for e in events if isinstance(e, StepFinished)]
    assert [s.index for s in written] == [1, 2, 3, 4, 5]
    assert written[0].memory == "The launch code is7-ALPHA-9 (step 1)."  # the reference's strip glues them
    assert written[0].to_dict()["decision"]["searches"][0]["units"][0]["location"] == best.location
    (stopped,) = [e for e in events if isinstance(e, ReadingStopped)]
    assert (stopped.read, stopped.total, stopped.streak) == (5, len(chunks), 3)


@pytest.mark.parametrize("done", [1, 3, 5])
def test_a_resumed_run_goes_on_from_its_stored_steps_as_the_whole_run_did(tok, done):
    """Steps stored as a trace keeps them (JSON) replace their calls: the memory, the search history
    and the STOP streak go on from them, and every later prompt and the answer are the whole run's."""
    import json

    chunks, stats = chunks_of(tok, document(40))
    config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0)
    whole = ScriptedEngine(Script(SCRIPT))
    events = list(run_infmem(LoopInput(QUESTION, chunks, stats, whole, tok, config)))
    stored = json.loads(json.dumps([e.step.to_dict() for e in events if isinstance(e, StepFinished)]))
    calls = 4 * done  # each step: the planner's two stages, the write's two
    resumed = ScriptedEngine(Script(SCRIPT[calls:]))
    again = list(run_infmem(LoopInput(QUESTION, chunks_of(tok, document(40))[0], stats, resumed, tok, config, stored[:done])))
    assert [p for p, _ in resumed.script.asked] == [p for p, _ in whole.script.asked[calls:]]
    replayed = [e for e in again if isinstance(e, StepFinished) and e.replayed]
    assert [e.step.index for e in replayed] == list(range(1, done + 1))
    steps_now = [e.step.to_dict()["decision"] for e in again if isinstance(e, StepFinished)]
    assert steps_now == [s["decision"] for s in stored]
    answer = [e for e in again if isinstance(e, AnswerFinished)][0]
    assert answer.answer == "7-ALPHA-9"
    (stopped,) = [e for e in again if isinstance(e, ReadingStopped)]
    assert stopped.read == 5


def test_a_run_reads_every_chunk_when_the_planner_never_stops(reference, tok):
    chunks, stats = chunks_of(tok, document(8))
    assert len(chunks) == 2
    script = [SEARCH, "", *write(1), SEARCH, "", *write(2), "<think>\nok\n</think>\n\nThe answer is lower case.", "x"]
    oracle = Script(list(script))
    reference_run(reference, "".join(c.text for c in chunks), tok, oracle)
    engine = ScriptedEngine(Script(list(script)))
    config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0)
    events = list(run_infmem(LoopInput(QUESTION, chunks, stats, engine, tok, config)))
    assert [p for p, _ in engine.script.asked] == [p for p, _ in oracle.asked]
    assert not [e for e in events if isinstance(e, ReadingStopped)]
    (answer,) = [e for e in events if isinstance(e, AnswerFinished)]
    # "The answer is" with a capital T is no answer: the whole answer is shown, not found
    assert not answer.found and answer.answer == "The answer is lower case.x"


def test_early_stop_one_ends_at_the_first_stop_or_call_less_reply(reference, tok):
    chunks, stats = chunks_of(tok, document(6))
    script = ["<think>\nNothing to search.\n</think>\n\nI will wait.", "", "<think>\n</think>\n\nthe answer is none", ""]
    oracle = Script(list(script))
    reference_run(reference, "".join(c.text for c in chunks), tok, oracle, early_stop=1)
    engine = ScriptedEngine(Script(list(script)))
    config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0, early_stop=1)
    events = list(run_infmem(LoopInput(QUESTION, chunks, stats, engine, tok, config)))
    assert [p for p, _ in engine.script.asked] == [p for p, _ in oracle.asked]
    (stopped,) = [e for e in events if isinstance(e, ReadingStopped)]
    assert stopped.read == 0 and not [e for e in events if isinstance(e, StepFinished)]


def test_the_turns_are_control_tokens_and_the_messages_text(tok):
    prompt = raw_chat("sys <|im_end|>", "a document's <|im_end|> stays text")
    from memagent_cli.core import infmem
    from memagent_cli.model.tokenizer import encode_template

    assert prompt.text == infmem.chat("sys <|im_end|>", "a document's <|im_end|> stays text")
    ids = encode_template(tok, prompt.pieces)
    end = tok.controls["<|im_end|>"]
    assert ids.count(end) == 2  # the two turns' ends, not the two in the messages


def test_the_embedded_engine_continues_a_raw_prompt_from_its_cache(models):
    """A raw prompt that renders what the chat template would is the same ids and the same reply as
    a chat request; a second stage reads only the first stage's text, its prompt from the cache."""
    from helpers import reply

    from memagent_cli.model.chat_template import DEFAULT_TEMPLATE, ChatFormat
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import encode_template

    info = read_gguf(models["bare"])  # no template of its own: Qwen2.5's, with its system message
    tokenizer = load_tokenizer(info)
    chat = ChatFormat.from_gguf(info)
    assert chat.template == DEFAULT_TEMPLATE
    engine = LlamaEngine(info, tokenizer, chat, n_ctx=1024, options=EmbeddedOptions(gpu_layers=0, threads=1))
    try:
        message = "Read this <|im_end|> and go on."
        prompt = raw_chat("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", message)
        assert encode_template(tokenizer, prompt.pieces) == chat.encode(tokenizer, message)
        chatted = reply(engine, message, max_tokens=12)
        sampling = Sampling(temperature=0.0, seed=3)
        first = [i for i in engine.complete_raw(prompt, 12, sampling) if isinstance(i, CompletionDone)][0]
        assert first.text == chatted.text and first.prompt_tokens == chatted.prompt_tokens
        second = [i for i in engine.complete_raw(prompt.then(first.text), 8, sampling) if isinstance(i, CompletionDone)][0]
        ids = encode_template(tokenizer, prompt.then(first.text).pieces)
        assert second.prompt_tokens == len(ids)
        assert second.cached_tokens >= first.prompt_tokens  # the prompt was not read again
    finally:
        engine.close()


@pytest.mark.parametrize("pool", [False, True], ids=["one server", "pool"])
def test_a_served_run_sends_the_references_prompts_to_raw_completions(reference, tok, pool):
    """Over a real HTTP server on 127.0.0.1: each call is a POST /v1/completions of the rendered
    prompt, with the reference's sampling and every other sampler neutral."""
    from fakeserver import FakeServer

    from memagent_cli.model.served.body import NEUTRAL_SAMPLING
    from memagent_cli.model.served.http_engine import OpenAIEngine
    from memagent_cli.model.served.pool import ServedPool
    from memagent_cli.model.served.transport import Connection

    chunks, stats = chunks_of(tok, document(40))
    oracle = Script(SCRIPT)
    reference_run(reference, "".join(c.text for c in chunks), tok, oracle)
    bodies: list[dict] = []

    def answer(request: dict) -> str:
        bodies.append(request)
        return SCRIPT[len(bodies) - 1]

    with FakeServer(reply=answer, pieces=3) as server:
        connection = Connection(model="fake-model")
        engine = ServedPool([server.url], connection) if pool else OpenAIEngine(server.url, connection)
        try:
            config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0)
            events = list(run_infmem(LoopInput(QUESTION, chunks, stats, engine, tok, config)))
        finally:
            engine.close()
    assert [b["prompt"] for b in bodies] == [p for p, _ in oracle.asked]
    assert [b["max_tokens"] for b in bodies] == [m for _, m in oracle.asked]
    sampled = {k: bodies[0][k] for k in ("model", "temperature", "top_p")}
    assert sampled == {"model": "fake-model", "temperature": 0.0, "top_p": 1.0}
    assert all(bodies[0][k] == v for k, v in NEUTRAL_SAMPLING.items()) and "messages" not in bodies[0]
    (answer_event,) = [e for e in events if isinstance(e, AnswerFinished)]
    assert answer_event.answer == "7-ALPHA-9"


@pytest.mark.parametrize("pool", [False, True], ids=["one server", "pool"])
def test_a_server_without_raw_completions_is_one_line(tok, pool):
    from fakeserver import FakeServer

    from memagent_cli.errors import MemagentError
    from memagent_cli.model.served.http_engine import OpenAIEngine
    from memagent_cli.model.served.pool import ServedPool
    from memagent_cli.model.served.transport import Connection

    chunks, stats = chunks_of(tok, document(8))
    with FakeServer(completions=False) as server:
        connection = Connection(model="fake-model", retries=2, backoff=0.01)
        engine = ServedPool([server.url], connection) if pool else OpenAIEngine(server.url, connection)
        try:
            config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0)
            with pytest.raises(MemagentError) as caught:
                list(run_infmem(LoopInput(QUESTION, chunks, stats, engine, tok, config)))
        finally:
            engine.close()
        assert server.stats.not_found == 1  # refused at once, no retry
    message = str(caught.value)
    assert "/v1/completions" in message and "HTTP 404" in message and "\n" not in message


def test_ask_with_the_infmem_protocol_end_to_end(models, tmp_path):
    """`memagent ask --protocol infmem` on a real (random) model: greedy by default, every step with
    its planner's decision, the plain progress lines saying them; --early-stop 0 is a usage error."""
    import json

    from helpers import run_memagent

    doc = tmp_path / "doc.txt"
    doc.write_text(" ".join(f"word{k % 37} plum{k % 11}." for k in range(250)), encoding="utf-8")
    common = [doc, "What is the plum?", "-m", models["random"], "--chunk-tokens", "1000", "--memory-tokens", "8"]
    result = run_memagent("ask", *common, "--answer-tokens", "8", "--protocol", "infmem", "--json", "--no-trace")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    settings = record["settings"]
    assert (settings["protocol"], settings["early_stop"], settings["temperature"], settings["top_p"]) == ("infmem", 3, 0.0, 1.0)
    steps = record["steps"]
    assert len(steps) == -(-record["document_tokens"] // 1000) >= 2
    # a random model writes neither STOP nor a call: every reply is call-less, opening a streak of 1
    decisions = [{k: v for k, v in s["decision"].items() if k != "reply"} for s in steps]
    assert decisions == [{"action": "none", "searches": [], "stop_streak": 1}] * len(steps)
    assert all(s["decision"]["reply"] for s in steps)  # the planner's whole reply, thinking included
    assert "plan 1: no search (streak 1/3)" in result.stderr
    refused = run_memagent("ask", *common, "--protocol", "infmem", "--early-stop", "0")
    assert refused.returncode == 2 and "--early-stop" in refused.stderr


def test_an_interrupted_infmem_run_resumes_to_the_uninterrupted_result(models, tmp_path, spawned):
    """Ctrl-C after two steps, then --resume: the index rebuilt from the re-read sources, the history
    and streak restored from the trace, and the run ends as the uninterrupted one did."""
    import json
    import signal

    from helpers import run_memagent, spawn_memagent, wait_for_steps

    doc = tmp_path / "doc.txt"
    doc.write_text(" ".join(f"word{k % 37} plum{k % 11}." for k in range(500)), encoding="utf-8")
    args = [doc, "What is the plum?", "-m", models["random"], "--protocol", "infmem"]
    args += ["--chunk-tokens", "1000", "--memory-tokens", "8", "--answer-tokens", "8"]
    whole = run_memagent("ask", *args, "--json", "--no-trace")
    assert whole.returncode == 0, whole.stderr
    proc = spawn_memagent("ask", *args)
    spawned.append(proc)
    wait_for_steps(proc, 2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    resumed = run_memagent("ask", "--resume", "last", "--json")
    assert resumed.returncode == 0, resumed.stderr
    first, again = json.loads(whole.stdout), json.loads(resumed.stdout)
    assert len(again["steps"]) == len(first["steps"]) > 2
    assert [s["decision"] for s in again["steps"]] == [s["decision"] for s in first["steps"]]
    assert [s["memory"] for s in again["steps"]] == [s["memory"] for s in first["steps"]]
    assert again["answer"] == first["answer"]


def test_inspect_gives_infmem_a_range(models, tmp_path):
    """inspect counts a planner call and a write per step, and gives the time if the planner stops
    at step 3 (the earliest) beside the time of reading every chunk."""
    import json

    from helpers import run_memagent

    doc = tmp_path / "doc.txt"
    doc.write_text(" ".join(f"word{k % 37} plum{k % 11}." for k in range(1500)), encoding="utf-8")
    args = ["inspect", doc, "-m", models["random"], "--protocol", "infmem", "--chunk-tokens", "1000"]
    result = run_memagent(*args, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["steps_total"] >= 6 and report["calls"] == 2 * report["steps_total"] + 1
    estimate = report["estimate"]
    assert 0 < estimate["seconds_at_earliest_stop"] < estimate["seconds"] / 2
    shown = run_memagent(*args, env={"COLUMNS": "300"})
    assert "if the planner stops at step 3, up to ~" in shown.stdout + shown.stderr
    assert "(a planner call and a memory write each)" in shown.stdout + shown.stderr


def test_the_live_view_and_the_progress_lines_say_each_decision_and_the_early_stop(tok):
    import io

    from rich.console import Console

    from memagent_cli.cli.views.live import LiveView, PlainProgress

    chunks, stats = chunks_of(tok, document(40))
    config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0)
    events = list(run_infmem(LoopInput(QUESTION, chunks, stats, ScriptedEngine(Script(SCRIPT)), tok, config)))
    first = [e for e in events if isinstance(e, StepPlanned)][0].decision.searches[0]
    where = " | ".join(dict.fromkeys(r.location for r in first.found))  # the passages told apart
    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=400)
    view = LiveView(console, fps=1000, draw_share=None)
    with view:
        for event in events:
            view.handle(event)
    shown = console.export_text()
    assert f"plan step 1  search 'launch code PLUM' found {where}" in shown
    assert "plan step 2  STOP 1/3" in shown and "plan step 4  no search (streak 1/3)" in shown
    assert f"stopped early after 5 of {len(chunks)} chunks (STOP 3 times in a row)" in shown
    out = io.StringIO()
    plain = PlainProgress(Console(file=out, force_terminal=False, width=400))
    for event in events:
        plain.handle(event)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"plan 1: search 'launch code PLUM' found {where}" and lines[1].startswith("step 1/")
    assert lines[-1] == f"stopped early after 5 of {len(chunks)} chunks (STOP 3 times in a row)"


def _served_infmem(request: dict) -> str:
    """A served InfMem that behaves as the trained one should: it searches until its memory holds the
    launch code, then says STOP; a write keeps the code where the chunk or the passages show it."""
    prompt = request["prompt"]
    head, _, reply = prompt.rpartition("<|im_start|>assistant\n")
    if reply:  # stage two: the first stage closed its thinking and ended
        return ""
    if "You are a Retrieval Planner." in head:
        memory = head.rpartition("CURRENT MEMORY:\n")[2]
        if "7-ALPHA-9" in memory:
            return "<think>\nThe memory has the code.\n</think>\n\nSTOP"
        return '<think>\nSearch.\n</think>\n\n\u273fFUNCTION\u273f: retrievesearch\n\u273fARGS\u273f: {"query": "launch code"}'
    if "<recurrent_chunk>" in head:
        seen = head.partition("<retrieved_chunk>")[2].partition("<memory>")[0]
        memory = head.rpartition("<memory>\n")[2].partition("\n</memory>")[0]
        if "7-ALPHA-9" in seen:
            memory = "The launch code of the PLUM project is 7-ALPHA-9."
        return f"<think>\nUpdating.\n</think>\n\n{memory}"
    return "<think>\nFrom memory.\n</think>\n\nTherefore, the answer is 7-ALPHA-9."


@pytest.mark.parametrize("chunk", [5000, 128])
def test_a_served_run_stops_early_and_quotes_the_passage_its_search_found(tmp_path, chunk):
    """Over a served model (a real HTTP server on 127.0.0.1): the search finds the code on page 35 at
    step 1, three STOPs end the reading after 3 chunks of many, and the quote is the code's sentence,
    read only in the retrieved passage, located in the file's own text. With 128-token chunks each
    500-token unit runs over four or five of them, and its passage is still the whole unit."""
    import json

    from fakeserver import FakeServer
    from helpers import run_memagent

    pages = document(40)
    pages[34] = pages[34].rstrip("\n") + " The launch code of the PLUM project is 7-ALPHA-9.\n"
    pages[8] = pages[8].replace(" The launch code of the PLUM project is 7-ALPHA-9.", "")
    doc = tmp_path / "report.txt"
    doc.write_text("".join(pages), encoding="utf-8")
    vocab = shared_path("fixtures", "ggml-vocab-qwen2.gguf")
    with FakeServer(reply=_served_infmem) as server:
        args = ["--engine", "openai", "--base-url", server.url, "--tokenizer", vocab, "--protocol", "infmem"]
        args += ["--chunk-tokens", str(chunk)]
        result = run_memagent("ask", doc, QUESTION, *args, "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    total = -(-record["document_tokens"] // chunk)
    assert record["answer"] == "7-ALPHA-9" and total >= 7
    assert [s["decision"]["action"] for s in record["steps"]] == ["search", "stop", "stop"]
    assert f"stopped early after 3 of {total} chunks (STOP 3 times in a row)" in result.stderr
    (quote, *_) = record["quotes"]
    text = doc.read_text(encoding="utf-8")
    assert "7-ALPHA-9" in quote["text"] and text[quote["start"] : quote["end"]] == quote["text"]
    assert quote["start"] > sum(len(p) for p in pages[:34]) and quote["step"] == 1


def test_the_planner_thinks_aloud_apart_from_the_memory(tok):
    """The planner's two stages stream as planning text (minutes on a CPU, where the view sat on
    "reading" with nothing moving): the live view's panel is the planner's while it thinks and the
    phase says so; the decision clears it for the memory's write. A --each row says "planning" and
    keeps the planner's text out of the memory it shows."""
    import io

    from rich.console import Console

    from memagent_cli.cli.views.live import LiveView
    from memagent_cli.cli.views.rows import Row
    from memagent_cli.core.events import TokenText

    chunks, stats = chunks_of(tok, document(40))
    config = AgentConfig.with_protocol("infmem", temperature=0.0, top_p=1.0)
    events = list(run_infmem(LoopInput(QUESTION, chunks, stats, ScriptedEngine(Script(SCRIPT)), tok, config)))
    planned_at = [k for k, e in enumerate(events) if isinstance(e, StepPlanned)]
    texts = [e for e in events if isinstance(e, TokenText)]
    step1 = [e for e in events[: planned_at[0]] if isinstance(e, TokenText)]
    assert step1 and all(e.planning and e.step == 1 for e in step1)
    assert "".join(e.text for e in step1) == SEARCH  # stage one's text, then stage two's (empty)
    step2 = [e.text for e in events[planned_at[0] : planned_at[1]] if isinstance(e, TokenText) and e.planning]
    assert "".join(step2).startswith("<think>\nI keep thinking about the plum") and FORCED in "".join(step2)
    assert [e.text for e in texts if not e.planning][:2] == write(1)  # the write streams as before

    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=200)
    view = LiveView(console, fps=1000, draw_share=None)
    row = Row()
    with view:
        for event in events[: planned_at[0]]:
            view.handle(event)
            row.follow(event)
        thinking = Console(file=io.StringIO(), record=True, width=200)
        thinking.print(view.memory_panel())
        panel = thinking.export_text()
        assert "Planner" in panel and "step 1: planning (search the whole input, or stop)" in panel
        assert row.where().endswith("· planning") and row.latest() == ""
        view.handle(events[planned_at[0]])
        row.follow(events[planned_at[0]])
        after = Console(file=io.StringIO(), record=True, width=200)
        after.print(view.memory_panel())
        panel = after.export_text()
        assert "Planner" not in panel and "writing the memory from the chunk and what the search found" in panel
        assert not row.where().endswith("planning")
