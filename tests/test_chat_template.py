"""Chat templates: a GGUF without one, and --chat-template FILE (docs/RELIABILITY.md)."""

from __future__ import annotations

import json

import pytest
from helpers import run_memagent, shared_path, words

from memagent_cli.errors import EXIT_USAGE, MemagentError
from memagent_cli.model.chat_template import read_template
from testkit.tinymodel import QWEN25_CHAT_TEMPLATE, write_tiny_qwen2

SMALL = ["--chunk-tokens", "200", "--memory-tokens", "16", "--answer-tokens", "8", "--temperature", "0"]
# A template of the user's own, with markers to find in the rendered prompt.
MARKED = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}<</{{ m.role }}>>{% endfor %}<<assistant>>"


@pytest.fixture(scope="module")
def llama_bare(tmp_path_factory):
    """A model that is not Qwen (llama's architecture) and has no chat template."""
    return write_tiny_qwen2(tmp_path_factory.mktemp("llama") / "llama.gguf", seed=3, arch="llama", chat_template=None)


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(600), encoding="utf-8")
    return path


def test_a_template_is_read_from_jinja_or_a_tokenizer_config(tmp_path):
    jinja = tmp_path / "t.jinja"
    jinja.write_text(MARKED, encoding="utf-8")
    assert read_template(jinja) == MARKED
    config = shared_path("fixtures", "hf", "qwen2.5", "tokenizer_config.json")
    assert read_template(config) == json.loads(config.read_text(encoding="utf-8"))["chat_template"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{% for m in messages %}{{ m.content }", "does not parse"),
        ("<|im_start|>user\nhello<|im_end|>", "does not show the user's message"),
        ('{"eos_token": "</s>"}', 'holds no "chat_template" text'),
    ],
    ids=["bad jinja", "no message", "json without one"],
)
def test_a_bad_template_file_is_one_usage_error(tmp_path, text, message):
    path = tmp_path / ("t.json" if text.startswith('{"') else "t.jinja")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MemagentError, match=message) as caught:
        read_template(path)
    assert caught.value.exit_code == EXIT_USAGE and "\n" not in str(caught.value)
    with pytest.raises(MemagentError, match="Cannot read --chat-template"):
        read_template(tmp_path / "missing.jinja")


def test_a_model_that_is_not_qwen_and_has_no_template_gets_a_warning_saying_what_to_do(llama_bare, models, doc):
    proc = run_memagent("ask", doc, "Where?", "-m", llama_bare, "--no-trace", *SMALL)
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "chat template" in line]
    assert warned == [
        "warning: The model (llama) has no chat template; using Qwen2.5's ChatML, which it may not follow. "
        "Pass its own with --chat-template FILE (Jinja, or a tokenizer_config.json)."
    ]
    qwen = run_memagent("ask", doc, "Where?", "-m", models["bare"], "--no-trace", *SMALL)
    assert qwen.returncode == 0 and "warning: The model" not in qwen.stderr  # Qwen's own template stands in
    inspected = run_memagent("inspect", doc, "-m", llama_bare)
    assert inspected.returncode == 0 and "--chat-template FILE" in inspected.stderr


def test_chat_template_renders_every_prompt_and_is_kept_for_resume(llama_bare, doc, tmp_path):
    template = tmp_path / "mine.jinja"
    template.write_text(MARKED, encoding="utf-8")
    shown = run_memagent(
        "inspect", doc, "-m", llama_bare, "--question", "Where?", "--show-prompt", "1", "--chat-template", template
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("<<user>>") and shown.stdout.endswith("<</user>><<assistant>>")
    asked = run_memagent("ask", doc, "Where?", "-m", llama_bare, "--chat-template", template, "--json", *SMALL)
    assert asked.returncode == 0 and "chat template" not in asked.stderr, asked.stderr
    trace = json.loads(run_memagent("traces", "show", "last", "--json").stdout)
    assert trace["settings"]["chat_template"]["path"] == str(template.resolve())
    # The default template gives other prompts, so other memories: the user's template was used.
    default = run_memagent("ask", doc, "Where?", "-m", llama_bare, "--json", "--no-trace", *SMALL)
    assert json.loads(default.stdout)["steps"][0]["memory"] != json.loads(asked.stdout)["steps"][0]["memory"]


def test_chat_template_is_refused_for_a_served_engine(doc, tmp_path):
    template = tmp_path / "mine.jinja"
    template.write_text(QWEN25_CHAT_TEMPLATE, encoding="utf-8")
    proc = run_memagent("ask", doc, "q", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--chat-template", template)
    assert proc.returncode == 2 and "--chat-template is for the embedded engine" in proc.stderr
    assert "Traceback" not in proc.stderr


# The end markers of the template memagent falls back to ----------------------------------------


def _stream(*pieces: str, finish: str = "length"):
    """An engine's stream as a reply of `pieces` gives it, ending in its CompletionDone."""
    from memagent_cli.model.engine import CompletionDone, PromptRead, TextDelta

    yield PromptRead(10, 10)
    for piece in pieces:
        yield TextDelta(piece)
    yield CompletionDone("".join(pieces), finish, 10, len(pieces), 50, 0, 0.1, 0.2)


def test_a_reply_ends_at_the_fallback_templates_marker_written_as_text():
    from memagent_cli.model.engine import CompletionDone, TextDelta, stopped_at

    closed = []

    def engine():
        try:
            yield from _stream("The fox", " ran.<|im", "_end|>", "<|im_end|>", " more")
        finally:
            closed.append(True)  # the stream was closed: nothing after the marker is generated

    items = list(stopped_at(engine(), ("<|im_end|>", "<|im_start|>"), lambda text: len(text.split()), 10, 50))
    shown = "".join(i.text for i in items if isinstance(i, TextDelta))
    done = items[-1]
    assert isinstance(done, CompletionDone) and done.text == "The fox ran." and done.finish_reason == "stop"
    assert shown == "The fox ran."  # the marker's first half was held back, never shown
    assert (done.prompt_tokens, done.completion_tokens, done.max_tokens) == (10, 3, 50) and closed == [True]


def test_a_reply_without_a_marker_is_as_the_engine_gave_it():
    from memagent_cli.model.engine import TextDelta, stopped_at

    items = list(stopped_at(_stream("a <|i", "m fine"), ("<|im_end|>",), len, 10, 50))
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "a <|im fine"  # held back, then given
    assert items[-1].text == "a <|im fine" and items[-1].finish_reason == "length"
    assert list(stopped_at(_stream("x"), (), len, 1, 1)) == list(_stream("x"))  # no markers: untouched


def test_a_reply_of_markers_alone_is_an_error_not_an_answer():
    from memagent_cli.model.engine import stopped_at

    with pytest.raises(MemagentError, match="wrote only its chat template's end marker") as raised:
        list(stopped_at(_stream("  <|im_end|><|im_end|>"), ("<|im_end|>",), len, 10, 50))
    assert "--chat-template" in raised.value.hint


def test_only_the_fallback_template_brings_markers(llama_bare, tmp_path):
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf

    info = read_gguf(llama_bare)
    assert ChatFormat.from_gguf(info).stops == ("<|im_end|>", "<|im_start|>")
    assert ChatFormat.from_gguf(info, MARKED).stops == ()


def test_the_embedded_engine_ends_a_reply_at_a_marker(llama_bare, monkeypatch):
    """The real engine on a model without a template: its greedy reply, then the same reply ended
    where a marker (a piece of that reply, standing in for one) begins."""
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.engine import CompletionDone, Sampling
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(llama_bare)
    engine = LlamaEngine(info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=512, options=EmbeddedOptions(threads=1))
    try:
        whole = [i for i in engine.complete("Say something.", 24, Sampling(temperature=0)) if isinstance(i, CompletionDone)][0]
        marker = whole.text[len(whole.text) // 2 :][:3]
        assert marker.strip() and whole.text.index(marker) > 0
        monkeypatch.setattr(ChatFormat, "stops", property(lambda self: (marker,)))
        cut = [i for i in engine.complete("Say something.", 24, Sampling(temperature=0)) if isinstance(i, CompletionDone)][0]
    finally:
        engine.close()
    assert cut.text == whole.text[: whole.text.index(marker)] and cut.finish_reason == "stop"
    assert cut.completion_tokens < whole.completion_tokens
