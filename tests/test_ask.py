"""The agent loop end to end on real llama.cpp with tiny generated models."""

import math

import pytest
from helpers import shared_path, words

from memagent_cli import AgentConfig, EmbeddedOptions, MemagentError, ask, ask_events
from memagent_cli.core.events import (
    AnswerFinished,
    DocumentRead,
    ModelLoaded,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    TokenText,
)
from memagent_cli.core.memagent import INITIAL_MEMORY, final_prompt, memory_prompt
from memagent_cli.model.chat_template import ChatFormat
from memagent_cli.model.engine import Sampling
from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.llama import LlamaEngine
from memagent_cli.model.tokenizer import load_tokenizer
from testkit.tinymodel import LONG_TOKEN

GREEDY = dict(temperature=0.0)


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(900), encoding="utf-8")
    return path


def run_events(question, paths, model, **config):
    return list(ask_events(question, [str(p) for p in paths], model=model, config=AgentConfig(**config)))


def test_events_steps_and_budgets(doc, models):
    config = dict(chunk_tokens=300, memory_tokens=24, answer_tokens=16, **GREEDY)
    events = run_events("Where did the fox run?", [doc], models["random"], **config)
    info = read_gguf(models["random"])
    tok = load_tokenizer(info)
    chat = ChatFormat.from_gguf(info)
    n_tokens = len(tok.encode(doc.read_text().strip()))

    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert any(isinstance(e, ModelLoaded) for e in events)
    result = events[-1].result
    steps = [e.step for e in events if isinstance(e, StepFinished)]
    assert len(steps) == math.ceil(n_tokens / 300) == result.document_tokens // 300 + 1
    assert [e for e in events if isinstance(e, DocumentRead)][0].steps == len(steps)
    assert sum(s.chunk.tokens for s in steps) == n_tokens == result.document_tokens

    memory = INITIAL_MEMORY
    for step in steps:
        # each prompt carries the memory the previous step wrote: its exact size proves it
        assert step.previous_memory == memory
        expected = chat.encode(tok, memory_prompt("Where did the fox run?", memory, step.chunk.text))
        assert step.prompt_tokens == len(expected)
        assert 0 < step.generated_tokens <= 24
        assert step.finish_reason == "length"  # a random model never ends its turn
        memory = step.memory
    assert result.memory == memory
    answer = [e for e in events if isinstance(e, AnswerFinished)][0]
    assert answer.generated_tokens == 16 and answer.raw == result.raw_answer
    streamed = "".join(e.text for e in events if isinstance(e, TokenText) and e.step == len(steps))
    assert streamed == steps[-1].memory
    assert result.to_dict()["steps"][0]["spans"][0]["path"] == str(doc)


def test_prompt_ids_sent_to_llama_cpp_are_the_reference_rendering(models):
    info = read_gguf(models["random"])
    tok = load_tokenizer(info)
    chat = ChatFormat.from_gguf(info)
    reference = shared_path("reference", "memagent-protocol.md").read_text(encoding="utf-8")
    rendering = reference.split("For the Qwen2.5 template this yields exactly:\n\n```\n")[1].split("\n```")[0]
    rendering = rendering.replace("\\n", "\n")
    user = memory_prompt("Q?", INITIAL_MEMORY, "a section with <|im_end|> inside")
    expected_text = rendering.replace("{PROMPT}", user)
    assert chat.render(user) == expected_text
    engine = LlamaEngine(info, tok, chat, n_ctx=1024)
    try:
        list(engine.complete(user, 4, Sampling(temperature=0)))
        sent = engine._llm.input_ids[: len(chat.encode(tok, user))].tolist()
    finally:
        engine.close()
    assert sent == chat.encode(tok, user)
    # the template's markers are control tokens; the document's marker text is not
    assert sent.count(tok.controls["<|im_end|>"]) == 2 and sent.count(tok.controls["<|im_start|>"]) == 3
    # control tokens decode to nothing: what remains is the reference text without the
    # template's five markers, and with the document's marker text intact
    plain = rendering.replace("<|im_start|>", "").replace("<|im_end|>", "").replace("{PROMPT}", user)
    assert tok.decode_bytes(sent).decode() == plain


def test_greedy_runs_repeat_and_seeds_decide_sampling(doc, models):
    config = dict(chunk_tokens=400, memory_tokens=12, answer_tokens=8)
    a = ask("q", [str(doc)], model=models["random"], config=AgentConfig(**config, **GREEDY))
    b = ask("q", [str(doc)], model=models["random"], config=AgentConfig(**config, **GREEDY))
    assert [s.memory for s in a.steps] == [s.memory for s in b.steps]
    s1 = ask("q", [str(doc)], model=models["random"], config=AgentConfig(**config, temperature=1.5, top_p=1.0, seed=7))
    s2 = ask("q", [str(doc)], model=models["random"], config=AgentConfig(**config, temperature=1.5, top_p=1.0, seed=7))
    s3 = ask("q", [str(doc)], model=models["random"], config=AgentConfig(**config, temperature=1.5, top_p=1.0, seed=8))
    assert [s.memory for s in s1.steps] == [s.memory for s in s2.steps]
    assert [s.memory for s in s1.steps] != [s.memory for s in s3.steps]


def test_tokens_longer_than_32_bytes_reach_the_memory(doc, models):
    result = ask(
        "q", [str(doc)], model=models["long"], config=AgentConfig(chunk_tokens=2000, memory_tokens=5, answer_tokens=3, **GREEDY)
    )
    assert result.memory == LONG_TOKEN * 5  # llama-cpp-python's own detokenize would give ""
    step = result.steps[0]
    assert step.generated_tokens == 5 and step.finish_reason == "length"
    assert step.memory_tokens == len(load_tokenizer(read_gguf(models["long"])).encode(result.memory))
    assert result.raw_answer == LONG_TOKEN * 3


def test_a_model_that_stops_at_once_gives_an_empty_memory_and_reply(doc, models):
    result = ask("q", [str(doc)], model=models["stop"], config=AgentConfig(chunk_tokens=2000, **GREEDY))
    assert all(s.memory == "" and s.finish_reason == "stop" and s.generated_tokens == 0 for s in result.steps)
    assert result.answer == "" and result.raw_answer == ""


def test_no_chat_template_falls_back_to_qwen25_with_a_notice(doc, models):
    events = run_events("q", [doc], models["bare"], chunk_tokens=5000, memory_tokens=4, answer_tokens=2, **GREEDY)
    notes = [e.message for e in events if type(e).__name__ == "Notice"]
    assert any("no chat template" in n for n in notes)
    info = read_gguf(models["bare"])
    assert ChatFormat.from_gguf(info).render("X").startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")


def test_context_too_small_is_refused_before_loading(doc, models):
    with pytest.raises(MemagentError, match=r"--ctx 1000 is too small: a memory step needs \d+ tokens"):
        list(ask_events("q", [str(doc)], model=models["random"], engine=EmbeddedOptions(n_ctx=1000)))


def test_auto_context_fits_the_budgets(doc, models):
    events = run_events("q", [doc], models["random"], chunk_tokens=700, memory_tokens=100, answer_tokens=300, **GREEDY)
    loaded = [e for e in events if isinstance(e, ModelLoaded)][0]
    info = read_gguf(models["random"])
    fixed = len(ChatFormat.from_gguf(info).encode(load_tokenizer(info), memory_prompt("q", "", "")))
    assert fixed + 700 + 2 * 100 + 100 <= loaded.n_ctx <= fixed + 700 + 2 * 100 + 100 + 64 + 256
    assert max(s.prompt_tokens + s.generated_tokens for s in events[-1].result.steps) <= loaded.n_ctx


def test_question_budget_and_empty_question(doc, models):
    with pytest.raises(MemagentError, match="question is empty"):
        list(ask_events("  ", [str(doc)], model=models["random"]))
    with pytest.raises(MemagentError, match=r"question is \d+ tokens long; the limit is 1024"):
        list(ask_events("word " * 1100, [str(doc)], model=models["random"]))


def test_vocabulary_only_gguf_cannot_answer(doc, qwen2_vocab):
    with pytest.raises(MemagentError, match="only a vocabulary"):
        list(ask_events("q", [str(doc)], model=qwen2_vocab))


def test_final_prompt_variant_and_think_rule(models):
    assert "Therefore, the answer is" in final_prompt("q", "m", "answer-is")
    assert AgentConfig(final="answer-is").final == "answer-is"
    with pytest.raises(ValueError):
        AgentConfig(final="nope")


def test_step_started_reports_progress(doc, models):
    events = run_events("q", [doc], models["random"], chunk_tokens=500, memory_tokens=4, answer_tokens=2, **GREEDY)
    started = [e for e in events if isinstance(e, StepStarted)]
    assert [e.index for e in started] == list(range(1, len(started) + 1))
    assert started[-1].tokens_read == events[-1].result.document_tokens
    assert started[-1].total_steps == len(started)


def test_first_step_starts_before_the_input_is_read_whole(models):
    """A pipe that holds back the rest of the text until the first step has begun."""
    import os
    import threading

    from memagent_cli import SourceOptions

    read_fd, write_fd = os.pipe()
    first_step = threading.Event()
    text = words(8000)  # its first half is more than one tokenizer block (MIN_BLOCK_CHARS)
    waited = []

    def writer():
        with os.fdopen(write_fd, "w", encoding="utf-8") as pipe:
            pipe.write(text[: len(text) // 2] + "\n")
            pipe.flush()
            waited.append(first_step.wait(timeout=60))  # True only if the run did not wait for the rest
            pipe.write(text[len(text) // 2 :])

    thread = threading.Thread(target=writer)
    thread.start()
    with os.fdopen(read_fd, "rb", buffering=0) as stdin:
        steps = 0
        for event in ask_events(
            "q",
            [],
            model=models["stop"],
            config=AgentConfig(chunk_tokens=500, temperature=0),
            sources=SourceOptions(stdin=stdin, stdin_is_piped=True),
        ):
            if isinstance(event, StepStarted):
                first_step.set()
            if isinstance(event, StepFinished):
                steps += 1
    thread.join()
    assert waited == [True]
    assert steps >= 10 and event.result.document_tokens > 5000


def test_ask_runs_through_the_llama_cpp_tokenizer_fallback(doc, gpt2_pre_model):
    result = ask(
        "q", [str(doc)], model=gpt2_pre_model, config=AgentConfig(chunk_tokens=800, memory_tokens=6, answer_tokens=4, **GREEDY)
    )
    tok = load_tokenizer(read_gguf(gpt2_pre_model))
    assert result.document_tokens == len(tok.encode(doc.read_text().strip()))
    assert len(result.steps) == math.ceil(result.document_tokens / 800)
    assert all(s.generated_tokens == 6 for s in result.steps)


def test_a_memory_that_re_tokenizes_longer_still_fits_the_next_prompt(models, tmp_path):
    """A random model writes token runs that are not canonical BPE: the memory's text comes
    back into the next prompt as more tokens than were generated. The planned context must
    hold it at default-like proportions, and a tighter --ctx shortens a step, not the run."""
    doc = tmp_path / "doc.txt"
    doc.write_text(words(3000), encoding="utf-8")
    config = AgentConfig(chunk_tokens=1000, memory_tokens=200, answer_tokens=50, **GREEDY)
    events = list(ask_events("q", [str(doc)], model=models["random"], config=config))
    steps = events[-1].result.steps
    assert len(steps) >= 3
    assert max(s.memory_tokens for s in steps) > 200  # inflation really happens
    assert all(s.generated_tokens == 200 for s in steps)  # and no step was shortened


def test_a_prompt_that_leaves_little_room_shortens_the_step_not_the_run(models):
    from memagent_cli.core.agent import LoopInput, run_loop
    from memagent_cli.core.chunking import Chunk, IngestStats

    info = read_gguf(models["random"])
    chat, tok = ChatFormat.from_gguf(info), load_tokenizer(info)
    text = words(400)
    chunk = Chunk(index=1, text=text, tokens=len(tok.encode(text)), spans=(), end_token=len(tok.encode(text)))
    prompt = len(chat.encode(tok, memory_prompt("q", INITIAL_MEMORY, text)))
    engine = LlamaEngine(info, tok, chat, n_ctx=prompt + 30)  # room for 30 tokens, not 200
    try:
        events = list(
            run_loop(
                LoopInput(
                    "q",
                    [chunk],
                    IngestStats(document_tokens=chunk.tokens, done=True),
                    engine,
                    tok,
                    AgentConfig(memory_tokens=200, answer_tokens=5, **GREEDY),
                )
            )
        )
    finally:
        engine.close()
    notes = [e.message for e in events if type(e).__name__ == "Notice"]
    assert notes == [f"Step 1: the prompt ({prompt} tokens) left room for only 30 memory tokens; raise --ctx to avoid this."]
    (step,) = [e.step for e in events if isinstance(e, StepFinished)]
    assert step.generated_tokens == 30 and step.finish_reason == "length"
    assert isinstance(events[-1], AnswerFinished)
