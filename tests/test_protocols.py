"""Protocols as a choice: the qwenlong strings byte for byte, its memory-and-plan rule, how a run's
protocol is chosen (option, catalog, names), budgets per protocol, and the CLI that carries them."""

import io
import json
import re
import shutil

import pytest
from helpers import REPO, run_memagent, shared_path, words
from rich.console import Console

from memagent_cli.core import memagent as memagent_strings
from memagent_cli.core import qwenlong
from memagent_cli.core.config import AgentConfig
from memagent_cli.core.protocols import get, guess, of_model

QUESTION = "Who signed the 2019 amendment?"
MEMORY = "The 2019 amendment was signed by Ada Lovelace."
PLAN = "Look for later amendments that change the signatory."
STORED = f"<memory>\n{MEMORY}\n</memory>\n<plan>\n{PLAN}\n</plan>"


@pytest.fixture(scope="module")
def reference() -> str:
    return shared_path("reference", "qwenlong-protocol.md").read_text(encoding="utf-8")


def block_after(text: str, heading: str) -> str:
    return re.search(re.escape(heading) + r"\n```\n(.*?)\n```", text, flags=re.S).group(1)


def test_qwenlong_prompts_match_the_papers_text_byte_for_byte(reference):
    update = block_after(reference, "### Memory update")
    final = block_after(reference, "### Final answer")
    # the reference's blocks are the paper's lines with soft wraps joined; a trailing newline is ours
    assert qwenlong.MEMORY_PROMPT == update + "\n"
    assert qwenlong.FINAL_PROMPT == final + "\n"
    assert "self-contained \u2013 meaning" in qwenlong.MEMORY_PROMPT and "may contain inaccuracies" in qwenlong.MEMORY_PROMPT
    assert qwenlong.MEMORY_PROMPT.count("\n\u2022 ") == 6 and "\n\n" not in qwenlong.MEMORY_PROMPT


def test_qwenlong_prompts_render_as_the_stored_rendering():
    q = get("qwenlong")
    rendered = (
        "=== memory update, step 1 ===\n"
        + q.memory_prompt(QUESTION, q.initial_memory, "Document 1:\nreport.pdf\nThe 2019 amendment was signed by Ada Lovelace.")
        + "=== memory update, step 2 ===\n"
        + q.memory_prompt(QUESTION, STORED, "Nothing of note happened in 2020.")
        + "=== final answer ===\n"
        + q.final_prompt(QUESTION, STORED, instructions="Answer with the name only.")
    )
    stored = (REPO / "tests" / "data" / "qwenlong-prompts.txt").read_bytes().decode("utf-8")
    assert rendered == stored


def test_a_reply_keeps_memory_and_plan_after_the_reasoning():
    q = get("qwenlong")
    reply = "<think>\nThe section names the signer.\n</think>\n\nUpdated memory:\n" + STORED + "\n"
    kept = q.next_memory(reply)
    assert kept == STORED  # the model's own bytes, "Updated memory:" and the reasoning dropped
    assert q.parts(kept) == (MEMORY, PLAN)
    # the next step sees memory and plan; the final prompt the memory alone
    assert "<previous_memory>\n" + STORED + "\n</previous_memory>" in q.memory_prompt(QUESTION, kept, "x")
    final = q.final_prompt(QUESTION, kept)
    assert "<memory>\nThe 2019 amendment was signed by Ada Lovelace.\n</memory>" in final and "<plan>" not in final
    # a reply without tags is kept whole (as MemAgent keeps any reply); a cut-off one from <memory> on
    assert q.next_memory("<think>x</think>just words") == "just words"
    assert q.parts("just words") == ("just words", "")
    cut = q.next_memory("</think>\n<memory>\nhalf a mem")
    assert cut == "<memory>\nhalf a mem" and q.parts(cut) == ("half a mem", "")


def test_answers_per_protocol():
    assert get("qwenlong").extract_answer("<think>Ada, from the memory.</think>\n\nAda Lovelace\n") == ("Ada Lovelace", True)
    assert get("qwenlong").extract_answer("<think>never closed") == ("<think>never closed", True)
    assert get("memagent").extract_answer("<think>x</think>It is \\boxed{Ada}.") == ("Ada", True)
    assert get("memagent").extract_answer("no box here") == ("no box here", False)


def test_instructions_reach_the_final_prompt_only_in_both_protocols():
    for name in ("memagent", "qwenlong"):
        p = get(name)
        assert "Answer in one word." not in p.memory_prompt(QUESTION, p.initial_memory, "chunk")
        final = p.final_prompt(QUESTION, "m", "boxed", "Answer in one word.")
        assert QUESTION + "\nAnswer in one word.\n</problem>" in final
        assert p.final_prompt(QUESTION, "m", "boxed", "") == p.final_prompt(QUESTION, "m", "boxed")
    # memagent without instructions stays byte-exact as before
    assert get("memagent").final_prompt(QUESTION, "m") == memagent_strings.final_prompt(QUESTION, "m")
    assert get("memagent").memory_prompt(QUESTION, "m", "c") == memagent_strings.memory_prompt(QUESTION, "m", "c")


def test_budgets_are_the_protocols_unless_set():
    ql = AgentConfig.with_protocol("qwenlong")
    assert (ql.protocol, ql.chunk_tokens, ql.memory_tokens, ql.answer_tokens) == ("qwenlong", 32768, 15360, 8192)
    mixed = AgentConfig.with_protocol("qwenlong", chunk_tokens=4000, memory_tokens=None)
    assert (mixed.chunk_tokens, mixed.memory_tokens) == (4000, 15360)
    assert AgentConfig.with_protocol("memagent") == AgentConfig()
    with pytest.raises(ValueError, match="protocol must be one of memagent, qwenlong"):
        AgentConfig(protocol="memgpt")


def test_the_protocol_comes_from_the_model(tmp_path, models, memagent_home):
    from memagent_cli.install import registry

    assert guess("Tongyi-Zhiwen/QwenLong-L1.5-30B-A3B") == "qwenlong"
    assert guess("QwenLong L1.5 30B A3B", None) == "qwenlong"  # a converted GGUF's general.name
    assert guess("RL-MemoryAgent-7B", "qwen3moe") == ""  # the architecture alone says nothing
    assert of_model(None, "qwenlong-l1.5-30b-a3b") == "qwenlong"  # a served model's name
    assert of_model(None, None) == "memagent"
    assert of_model(str(models["random"])) == "memagent"
    named = tmp_path / "QwenLong-L1.5-30B-A3B.Q4_K_M.gguf"
    shutil.copyfile(models["random"], named)
    assert of_model(str(named)) == "qwenlong"
    pulled = tmp_path / "model.gguf"  # a pulled file's name says nothing; its catalog entry does
    shutil.copyfile(models["random"], pulled)
    assert of_model(str(pulled)) == "memagent"
    registry.add(pulled, "qwenlong-l1.5-30b-a3b:q4_k_m", source="hub")
    assert of_model(str(pulled)) == "qwenlong"


def test_inspect_follows_the_protocol(tmp_path, models):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(300), encoding="utf-8")
    out = run_memagent("inspect", str(doc), "-m", str(models["random"]), "--protocol", "qwenlong", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["protocol"], report["chunk_tokens"], report["memory_tokens"]) == ("qwenlong", 32768, 15360)
    plain = json.loads(run_memagent("inspect", str(doc), "-m", str(models["random"]), "--json").stdout)
    assert (plain["protocol"], plain["chunk_tokens"]) == ("memagent", 5000)
    shown = run_memagent(
        "inspect", str(doc), "-m", str(models["random"]), "--protocol", "qwenlong", "--question", QUESTION, "--show-prompt", "1"
    )
    assert shown.returncode == 0, shown.stderr
    assert "<previous_memory>\nNo previous memory\n</previous_memory>" in shown.stdout
    assert "[Important Notes]" in shown.stdout and "Updated memory:\n<|im_end|>" in shown.stdout


def test_ask_records_the_protocol_and_the_instructions(tmp_path, models):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(300), encoding="utf-8")
    out = run_memagent(
        "ask", str(doc), "Where?", "-m", str(models["random"]), "--protocol", "qwenlong",
        "--chunk-tokens", "200", "--memory-tokens", "8", "--answer-tokens", "4", "--temperature", "0",
        "--instructions", "One word.", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    settings = record["settings"]
    assert (settings["protocol"], settings["instructions"], settings["chunk_tokens"]) == ("qwenlong", "One word.", 200)
    assert settings["answer_tokens"] == 4 and settings["memory_tokens"] == 8
    shown = run_memagent("traces", "show", "last", "--json")
    assert json.loads(shown.stdout)["settings"]["protocol"] == "qwenlong"


def test_the_live_view_shows_the_plan_apart(tmp_path):
    from memagent_cli.cli.views.live import LiveView
    from memagent_cli.core.events import RunStarted

    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=120)
    view = LiveView(console, fps=1000, draw_share=None)
    view.handle(RunStarted(QUESTION, "m", "m.gguf", (), AgentConfig.with_protocol("qwenlong"), "tok", "auto"))
    view.memory = STORED
    console.print(view.snapshot())
    text = console.export_text()
    assert "Plan" in text and "Look for later amendments" in text
    assert "<memory>" not in text and "<plan>" not in text


def test_the_live_view_shows_reasoning_as_thinking_then_the_reply_without_it():
    from memagent_cli.cli.views.live import LiveView
    from memagent_cli.core.events import RunStarted

    def shown(view: LiveView) -> str:
        console = Console(file=io.StringIO(), record=True, force_terminal=True, width=120)
        console.print(view.memory_panel())
        return console.export_text()

    for protocol in ("qwenlong", "memagent"):
        view = LiveView(Console(file=io.StringIO()), fps=1000, draw_share=None)
        view.handle(RunStarted(QUESTION, "m", "m.gguf", (), AgentConfig.with_protocol(protocol), "tok", "auto"))
        view.writing, view.streaming = ["The section names ", "the signatory."], True
        before = shown(view)
        view.writing.append("\n</think>\n\n<memory>\nSigned by R. Lee.\n</memory>")
        after = shown(view)
        view.phase, view.streaming, view.writing = "done", False, ["Found it.\n</think>\n\nR. Lee"]
        answered = shown(view)
        if protocol == "qwenlong":
            assert "Memory · thinking" in before and "the signatory." in before
            assert "Memory · being rewritten" in after and "Signed by R. Lee." in after and "signatory" not in after
            assert "Answer" in answered and "R. Lee" in answered and "Found it" not in answered
        else:  # MemAgent's models write no reasoning: every reply shown as written
            assert "thinking" not in before and "Memory · being rewritten" in before and "signatory" in after
            assert "Found it" in answered
