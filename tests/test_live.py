"""The live view: rendered to a recording console, and the real process on a terminal."""

import io
import os
import pty
import subprocess
import sys

from helpers import REPO, drain_terminal, words
from rich.console import Console

from memagent_cli import AgentConfig, ask_events
from memagent_cli.cli.views.live import LiveView, PlainProgress
from memagent_cli.core.events import RunFinished


def recording_console() -> Console:
    return Console(file=io.StringIO(), record=True, force_terminal=True, width=120, color_system="truecolor")


def test_live_view_renders_steps_memory_and_answer(tmp_path, models):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(400), encoding="utf-8")
    console = recording_console()
    view = LiveView(console, fps=1000, draw_share=None)
    with view:
        for event in ask_events(
            "Where?",
            [str(doc)],
            model=models["long"],
            config=AgentConfig(chunk_tokens=200, memory_tokens=3, answer_tokens=2, temperature=0),
        ):
            view.handle(event)
            if isinstance(event, RunFinished):
                steps = len(event.result.steps)
    text = console.export_text()
    assert steps >= 2
    assert "memagent long.gguf" in text and "Q: Where?" in text  # the model by its file and ("CPU (" in text or "GPU (" in text)
    assert f"✓ step 1/{steps}" in text and f"✓ step {steps}/{steps}" in text
    assert f"Step {steps}/{steps}" in text and "tokens" in text and "ETA" in text
    # step 1 replaced "No previous memory" (3 words) with one run of long tokens (1 word)
    assert "doc.txt" in text and "+1 −3 words" in text and "− No previous memory" in text
    assert "=" * 40 in text  # the memory itself was drawn
    assert "Answer" in text and "done in" in text
    svg = Console(record=True, file=io.StringIO(), width=100, force_terminal=True)
    svg.print(view.snapshot())
    assert svg.export_svg(title="memagent ask").startswith("<svg")


def test_plain_progress_for_logs(tmp_path, models):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(300), encoding="utf-8")
    out = io.StringIO()
    view = PlainProgress(Console(file=out, force_terminal=False, width=200))
    for event in ask_events("q", [str(doc)], model=models["stop"], config=AgentConfig(chunk_tokens=200, temperature=0)):
        view.handle(event)
    lines = out.getvalue().splitlines()
    n = len(lines)
    assert n >= 2 and lines[0].startswith(f"step 1/{n} ") and lines[-1].startswith(f"step {n}/{n} ")
    assert "\x1b[" not in out.getvalue()


def test_real_process_on_a_terminal_draws_the_live_view_and_saves_svg(tmp_path, models, spawned):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(400), encoding="utf-8")
    picture = tmp_path / "live.svg"
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memagent_cli",
            "ask",
            str(doc),
            "Where?",
            "-m",
            str(models["random"]),
            "--chunk-tokens",
            "200",
            "--memory-tokens",
            "8",
            "--answer-tokens",
            "4",
            "--temperature",
            "0",
            "--svg",
            str(picture),
        ],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=REPO,
        env=env,
    )
    spawned.append(proc)
    os.close(follower)
    drawn = drain_terminal(leader)
    answer = proc.stdout.read()
    proc.wait(timeout=60)
    assert proc.returncode == 0
    screen = drawn.decode("utf-8", errors="replace")
    assert "\x1b[" in screen and "Memory" in screen and "step 1/" in screen
    assert answer.decode().strip() != ""  # the answer, on stdout, apart from the view
    svg = picture.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "memagent" in svg


def test_control_characters_are_shown_not_obeyed():
    import xml.etree.ElementTree as ET

    from memagent_cli.cli.textout import visible

    hostile = "ok\x1b]52;c;ZXZpbA==\x07 \x1b[2J\x17 tab\tnew\nline\x7f\x9b"
    assert visible(hostile) == "ok␛]52;c;ZXZpbA==␇ ␛[2J␗ tab\tnew\nline␡\ufffd"
    console = recording_console()
    view = LiveView(console)
    view.memory = hostile
    console.print(view.snapshot())
    text = console.export_text(styles=False)
    assert "\x1b]52" not in text and "\x07" not in text and "␛]52" in text
    ET.fromstring(console.export_svg())  # well-formed XML: browsers render it


def test_answer_is_made_visible_on_a_terminal_and_kept_as_data_in_a_pipe(tmp_path):
    from testkit.tinymodel import build_vocab, write_tiny_qwen2

    esc = write_tiny_qwen2(tmp_path / "esc.gguf", constant=True, bias={build_vocab().token_id(b"\x1b"): 30.0})
    doc = tmp_path / "d.txt"
    doc.write_text(words(50), encoding="utf-8")
    args = [
        sys.executable,
        "-m",
        "memagent_cli",
        "ask",
        str(doc),
        "q",
        "-m",
        str(esc),
        "--quiet",
        "--memory-tokens",
        "2",
        "--answer-tokens",
        "3",
        "--temperature",
        "0",
    ]
    piped = subprocess.run(args, capture_output=True, cwd=REPO, timeout=120)
    assert piped.stdout == b"\x1b\x1b\x1b\n"
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdout=follower, stderr=subprocess.DEVNULL, cwd=REPO)
    os.close(follower)
    shown = drain_terminal(leader)
    assert proc.wait(timeout=120) == 0
    assert shown.decode().strip() == "␛␛␛" and b"\x1b" not in shown


def test_the_live_generation_rate_counts_from_the_first_token(monkeypatch):
    """At a 5,000-token chunk the prompt takes most of a step; the rate shown while the memory
    streams is the generation's own, not the tokens over the whole step."""
    from memagent_cli.cli.views import live
    from memagent_cli.core.chunking import Chunk
    from memagent_cli.core.events import ReplyRestarted, StepStarted, TokenText

    now = [100.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    view = LiveView(recording_console(), fps=1000, draw_share=None)
    view.handle(StepStarted(1, Chunk(1, "text", 5000, (), 5000), 3, 5000))
    now[0] += 10.0  # reading the prompt
    view.handle(TokenText(1, "a"))
    assert view._live_rate() is None  # one token: no rate yet (the last step's, if any, is shown)
    for _ in range(20):
        now[0] += 0.05
        view.handle(TokenText(1, "b"))
    assert abs(view._live_rate() - 20.0) < 1e-9  # 20 tokens in 1 s after the first, not 21 in 11 s
    view.handle(ReplyRestarted(1, "the server lost the reply"))
    assert view._live_rate() is None  # counted again from the new reply's first token


def test_ocr_progress_is_a_line_of_the_live_view_while_pages_are_recognised():
    from memagent_cli.core.events import OcrProgressed

    console = recording_console()
    view = LiveView(console, fps=1000, draw_share=None)
    view.handle(OcrProgressed("scan\x1b[2J.pdf", 2, 6, 4.0))
    console.print(view.render())
    shown = console.export_text()
    assert "OCR scan␛[2J.pdf: page 2 of 6 · 0.50 pages/s" in shown  # its name shown, not obeyed
    view.handle(OcrProgressed("scan.pdf", 6, 6, 12.0))  # the last page: the line goes
    console.print(view.render())
    assert "page 6 of 6" not in console.export_text()
    plain = io.StringIO()
    PlainProgress(Console(file=plain, force_terminal=False, width=200)).handle(OcrProgressed("scan.pdf", 1, 6, 0.0))
    assert plain.getvalue() == "OCR scan.pdf: page 1 of 6\n"


def test_a_long_prompt_is_told_as_it_is_read_and_shown(tmp_path, models):
    """A chunk's prompt is read in parts of llama.cpp's physical batch, each told (PromptProgressed)
    before the first token is written, and the live view shows how much of it is read; an ETA is
    never 0:00 while a step is still going."""
    from memagent_cli.core.events import PromptProgressed, StepStarted, TokenText

    doc = tmp_path / "doc.txt"
    doc.write_text(words(1500), encoding="utf-8")
    events = list(
        ask_events(
            "Where?",
            [str(doc)],
            model=models["long"],
            config=AgentConfig(chunk_tokens=1200, memory_tokens=3, answer_tokens=2, temperature=0),
        )
    )
    first_step = events[next(i for i, e in enumerate(events) if isinstance(e, StepStarted)) :]
    before_text = first_step[: next(i for i, e in enumerate(first_step) if isinstance(e, TokenText))]
    read = [e for e in before_text if isinstance(e, PromptProgressed) and e.step == 1]
    assert len(read) >= 3  # a prompt of over 1,200 tokens, told every 512
    assert [e.done for e in read] == sorted(e.done for e in read) and read[-1].done == read[-1].total
    assert all(b.done - a.done == 512 for a, b in zip(read, read[1:-1]))

    console = recording_console()
    view = LiveView(console, fps=1000, draw_share=None)
    for event in first_step:
        view.handle(event)
        if event is read[0]:
            progress = Console(file=io.StringIO(), record=True, width=160)
            progress.print(view.progress())
            assert f"prompt {read[0].done:,}/{read[0].total:,} read" in progress.export_text()
    view.step_seconds, view.total_steps, view.streaming = [10.0], 2, True
    view.step_started -= 60  # the step has gone on past the average: the estimate has run out
    assert view._eta() is None


def test_a_slow_redraw_is_made_less_often(monkeypatch):
    """A redraw takes at most DRAW_SHARE of the time between redraws: after one that took 10 ms the
    next waits 0.5 s, not the 1/8 s of FPS (the clock pinned, so a busy machine changes nothing)."""
    from memagent_cli.cli.views import live

    now = [100.0]
    monkeypatch.setattr(live.time, "perf_counter", lambda: now[0])
    view = LiveView(recording_console())
    drawn: list[float] = []
    view.live = type("Live", (), {"console": view.console, "refresh": lambda self: drawn.append(now[0])})()
    view.draw_seconds = 0.01
    view.last_draw = 100.0
    for t in (100.2, 100.4, 100.49):
        now[0] = t
        view._draw()
    assert drawn == []  # 10 ms / DRAW_SHARE = 0.5 s
    now[0] = 100.51
    view._draw()
    assert drawn == [100.51]
    view.draw_seconds = 0.0  # a quick redraw: back to FPS
    now[0] = 100.51 + 1 / live.FPS
    view._draw()
    assert len(drawn) == 2


def test_the_answer_is_said_once_where_it_is_printed_below_the_view(tmp_path, models):
    """On a terminal whose stdout is the same terminal, the view's last frame shows the final memory,
    and the answer is left to stdout; with stdout elsewhere the last frame shows the answer."""
    doc = tmp_path / "doc.txt"
    doc.write_text(words(400), encoding="utf-8")
    config = AgentConfig(chunk_tokens=200, memory_tokens=3, answer_tokens=2, temperature=0)
    frames = {}
    for below in (False, True):
        view = LiveView(recording_console(), fps=1000, draw_share=None, answer_below=below)
        for event in ask_events("Where?", [str(doc)], model=models["long"], config=config):
            view.handle(event)
        last = recording_console()
        last.print(view.memory_panel())
        frames[below] = last.export_text()
    assert "Answer" in frames[False] and "Memory" not in frames[False]
    assert "Memory" in frames[True] and "Answer" not in frames[True]


def test_the_progress_line_keeps_within_the_terminal():
    """A narrow terminal: the rates go, the bar narrows; no word wraps onto a line of its own."""
    for width in (60, 80, 120):
        console = Console(file=io.StringIO(), record=True, force_terminal=True, width=width)
        view = LiveView(console, fps=1000, draw_share=None)
        view.step, view.total_steps, view.tokens_read, view.document_tokens = 12, 400, 60_000, 2_000_000
        view.prompt_rate, view.gen_rate = 1234.0, 56.0
        console.print(view.progress())
        lines = console.export_text().splitlines()
        assert len(lines) == 1 and len(lines[0]) <= width, (width, lines)
