"""Chat templates: a GGUF without one, and --chat-template FILE (docs/RELIABILITY.md)."""

from __future__ import annotations

import json

import pytest
from helpers import run_memagent, shared_path, words

from memagent_cli.errors import EXIT_USAGE, MemagentError
from memagent_cli.model.chat import read_template
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
