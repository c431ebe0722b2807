"""`memagent chat SOURCES...`: questions about the same documents, one after another, each a turn of
one conversation (as `ask -c` asks them), interactively.

On a terminal: a prompt with history and line editing (prompt_toolkit), the live view while each
reading goes, then the answer and its quotes. Ctrl-C stops the reading in flight (kept in the trace
store, resumable) and comes back to the prompt; Ctrl-D or /quit ends. Without a terminal: a question
a line from stdin, an answer a line on stdout (`--json`: a record a line), so that scripts can
`printf 'Q1\\nQ2\\n' | memagent chat report.pdf`.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_USAGE, MemagentError
from ..paths import default_home
from ..runs.follow_ups import Conversation, changed_since, find_conversation
from .answers import record_text, say_reused
from .common import check_paths, fail, noter, open_store, stderr_console, warner
from .follow import CidOpt, turn_setup
from .options import FreshOpt, LineShowFlags, SourceFlags, flag_groups
from .run_flags import RunFlags, setup
from .single import Output, given_flags, show_one
from .textout import SCHEMA, json_text, visible

if TYPE_CHECKING:
    from ..core.pipeline import SourceOptions
    from ..runs.planning import Runs
    from ..runs.setup import RunSetup
    from ..traces.store import TraceStore

PROMPT = "? "
COMMANDS = {
    "/sources": "the documents this conversation reads",
    "/history": "the questions and answers so far",
    "/fresh": "the next question reads again, whatever the trace store has",
    "/standalone": "the next question is asked alone, without the earlier turns",
    "/resume": "go on with the reading Ctrl-C stopped, from its last finished step",
    "/cid": "this conversation's id, to go on later (chat --cid ID, or ask --cid ID)",
    "/quit": "end (Ctrl-D too)",
}

SourcesArg = Annotated[
    Optional[list[str]],
    typer.Argument(metavar="[SOURCE]...", show_default=False, help="Documents and folders the conversation is about."),
]


@flag_groups
def chat(
    ctx: typer.Context,
    sources: SourcesArg = None,
    cid: CidOpt = None,
    source_flags: SourceFlags = SourceFlags(),
    fresh: FreshOpt = False,
    shown: LineShowFlags = LineShowFlags(),
    flags: RunFlags = RunFlags(),
) -> None:
    """Ask questions about documents one after another, each a follow-up of the ones before.

    Each question is a new reading of the sources whose problem holds the earlier questions and
    answers (see [b]ask -c[/]); an answer known to the trace store is given at once. Ctrl-C stops a
    reading and keeps it: asking the same question again (or /resume) goes on from its last step.
    Commands: /sources, /history, /fresh, /standalone, /resume, /cid, /quit.

    [dim]Examples:[/]
      memagent chat contract.pdf
      memagent chat --cid last
      printf 'Who signed it?\\nWhen does it end?\\n' | memagent chat contract.pdf --json
    """
    err = stderr_console()
    try:
        session = _session(ctx, sources, cid, source_flags, fresh, flags, err)
    except MemagentError as exc:
        fail(err, exc)
    session.output = Output(**asdict(shown), lines=True)
    terminal = sys.stdin.isatty() and err.is_terminal
    questions = _typed(session) if terminal else _piped()
    for line in questions:
        if line.startswith("/"):
            session.command(line)
            if session.done:
                break
            continue
        try:
            session.ask(line)
        except MemagentError as exc:
            if not terminal:
                fail(err, exc)  # a script's run stops at the first failure, as `ask` would
            err.print(Text.assemble(("error: ", "bold red"), visible(str(exc))), soft_wrap=True)


def _session(
    ctx: typer.Context,
    sources: list[str] | None,
    cid: str | None,
    source_flags: SourceFlags,
    fresh: bool,
    flags: RunFlags,
    err: Console,
) -> Session:
    """The conversation to go on with (--cid) or the sources of a new one, checked, and the run setup."""
    import dataclasses
    import os

    store = open_store(err, required=True)
    assert store is not None
    conversation = None
    if cid is not None:
        if sources:
            raise MemagentError(
                "--cid goes on with a conversation's own sources: name none.", "memagent chat --cid ID", exit_code=EXIT_USAGE
            )
        conversation = find_conversation(store, cid)
        paths = conversation.paths
        if conversation.cwd and os.path.isdir(conversation.cwd):
            os.chdir(conversation.cwd)  # relative source paths are as of its start
        source_flags = dataclasses.replace(source_flags, ocr=type(source_flags.ocr)(conversation.ocr))
    else:
        paths = list(sources or [])
        if not paths:
            raise MemagentError("Name the documents to talk about.", "e.g. memagent chat report.pdf", exit_code=EXIT_USAGE)
        if "-" in paths:
            raise MemagentError(
                "chat reads its questions from standard input: it cannot be a source too.",
                "Save the text to a file and name it.",
                exit_code=EXIT_USAGE,
            )
    check_paths(paths)
    refuse_pipes(paths)
    if conversation is not None:
        run, changed = turn_setup(flags, given_flags(ctx), err, conversation.first)
    else:
        run, changed = setup(flags, err), {}
    from ..runs.planning import Runs

    options = source_flags.settings(None)
    return Session(store, run, options, paths, Runs(store, run, options, fresh, warner(err)), err, conversation, changed)


@dataclass
class Session:
    """One chat: its conversation (None until the first answer begins one), its setup, and what
    the next question asks for (/fresh, /standalone)."""

    store: TraceStore
    run: RunSetup
    sources: SourceOptions
    paths: list[str]
    runs: Runs
    err: Console
    conversation: Conversation | None = None
    changed: dict[str, Any] = field(default_factory=dict)
    output: Output = Output()
    fresh_next: bool = False
    standalone_next: bool = False
    done: bool = False
    stopped: tuple[str, str] | None = None  # (question, run id) of the reading Ctrl-C stopped last

    def ask(self, question: str) -> None:
        """One turn: an answer from the store, or a reading (Ctrl-C stops it, and the chat goes on); the
        question of a turn Ctrl-C stopped, asked again, goes on with its reading."""
        from ..core.pipeline import ask_events, found_sources

        if not question.strip():
            return
        stopped, self.stopped = self.stopped, None
        found = found_sources(self.paths, self.sources)
        following = self.conversation.id if self.conversation is not None else None
        history = self.conversation.history if self.conversation is not None and not self.standalone_next else []
        if self.conversation is not None:
            changed_since(self.conversation.first, list(found.sources), self.runs.warn)
        resumed = self._resumable(stopped, question) if stopped is not None else None
        # /fresh: this question's alone
        plan = self.runs.plan(question, found.sources, history=history, fresh=True if self.fresh_next else None)
        self.fresh_next = self.standalone_next = False
        if plan.reused is not None and resumed is None:
            self.runs.turn_of_reused(plan.reused, following, question, self.changed)
            if not self.output.quiet:
                say_reused(self.err, plan.reused.note())
            self._answered(plan.reused.record)
            return
        if resumed is not None:
            recorder = self.runs.recorder(resume=resumed, turn=True)
            if not self.output.quiet:
                turn = recorder.store.own_turn(resumed["id"]) if recorder is not None else None
                where = f"turn {turn[1]} of conversation {turn[0][:8]}" if turn else f"run {resumed['id'][:8]}"
                noter(self.err)(f"{where}: goes on from step {len(resumed['steps']) + 1}, where Ctrl-C stopped it")
        else:
            recorder = plan.recorder(turn=True, conversation=following, asked=question, changed=self.changed)
            if self.conversation is not None and not self.output.quiet:
                noter(self.err)(self.conversation.next_turn())
        assert recorder is not None  # chat keeps its conversation in the store
        events = ask_events(
            question,
            self.paths,
            **self.run.args(),
            sources=self.sources,
            found=found,
            done_steps=resumed["steps"] if resumed is not None else (),
            continued=plan.continued() if resumed is None else None,
            history=history,
        )
        try:
            show_one(events, self.err, recorder, self.output, served=self.run.engine.served)
        except KeyboardInterrupt:
            recorder.stopped("interrupted")
            if recorder.run_id and recorder.steps:
                self.stopped = (question, recorder.run_id)
                said = ": the reading stopped; ask it again, or /resume, to go on from there."
            else:
                said = ": the reading stopped."
            self.err.print(Text.assemble(("interrupted", "yellow"), said), soft_wrap=True)
        except MemagentError as exc:
            recorder.stopped("failed", str(exc))
            raise
        finally:
            self._follow(recorder.turn[0] if recorder.turn is not None else following)

    def resume(self) -> None:
        """/resume: the reading Ctrl-C stopped last, gone on with."""
        if self.stopped is None:
            self.err.print("No reading to resume: Ctrl-C keeps one stopped in this chat.", style="dim")
            return
        self.ask(self.stopped[0])

    def _resumable(self, stopped: tuple[str, str], question: str) -> dict[str, Any] | None:
        """The stopped run, to go on with, where `question` is its question asked again with the same
        earlier turns (its problem is then the same text); None otherwise, or where it cannot be."""
        from ..traces.recorder import resume_plan

        asked, run_id = stopped
        if " ".join(question.split()) != " ".join(asked.split()):
            return None
        try:
            run = resume_plan(self.store, run_id)
        except MemagentError as exc:
            self.runs.warn(f"The stopped reading cannot go on ({exc.message}); it is read anew.")
            return None
        # No turn was answered since it stopped (any question asked in between forgets it), so its
        # problem holds the same earlier turns: the question it ends with is the one asked again.
        if not " ".join(str(run.get("question") or "").split()).endswith(" ".join(question.split())):
            return None
        return run

    def _answered(self, record: dict[str, Any]) -> None:
        if self.output.json_out:
            print(json_text({"schema": SCHEMA, **record}, indent=None), flush=True)
        else:
            print(record_text(record, raw=self.output.raw, cite=self.output.cite, tty=sys.stdout.isatty()), flush=True)
        conversation = record.get("conversation") or {}
        self._follow(conversation.get("id"))

    def _follow(self, conversation: str | None) -> None:
        """The conversation as it stands after a turn (its history, for the next question)."""
        if conversation is not None:
            self.conversation = find_conversation(self.store, conversation)

    def command(self, line: str) -> None:
        name = line.split()[0].lower()
        say = self.err.print
        if name in ("/quit", "/exit"):
            self.done = True
        elif name == "/sources":
            for path in self.paths:
                say(visible(path), markup=False, highlight=False)
        elif name == "/history":
            # every turn by its own number, as "turn N of conversation …" says it, a stopped one too
            turns = self.store.conversation(self.conversation.id)["turns"] if self.conversation else []
            for turn in turns:
                say(f"{turn['turn']}. {visible(turn['question'])}", markup=False, highlight=False, soft_wrap=True)
                if turn["answer"] is not None:
                    say(f"   {visible(turn['answer'])}", style="green", markup=False, highlight=False, soft_wrap=True)
                else:
                    say(f"   ({turn['status']})", style="yellow", markup=False, highlight=False, soft_wrap=True)
        elif name == "/resume":
            self.resume()
        elif name == "/fresh":
            self.fresh_next = True
            say("The next question reads again.", style="dim")
        elif name == "/standalone":
            self.standalone_next = True
            say("The next question is asked alone.", style="dim")
        elif name == "/cid":
            if self.conversation is None:
                say("No conversation yet: it begins with the first answer.", style="dim")
            else:
                cid = self.conversation.id
                say(
                    f"{cid}  (go on later: memagent chat --cid {cid[:8]}, or memagent ask --cid {cid[:8]} QUESTION)", markup=False
                )
        else:
            if name != "/help":
                say(Text.assemble(("unknown command ", "yellow"), visible(name)))
            for known, meaning in COMMANDS.items():
                say(f"  {known:<12} {meaning}", style="dim", markup=False)


def _typed(session: Session) -> Iterator[str]:
    """Questions typed at a prompt with line editing and a history kept between chats; Ctrl-C at the
    prompt clears the line, Ctrl-D ends."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory

    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    prompt: PromptSession[str] = PromptSession(history=FileHistory(str(home / "chat-history")))
    session.err.print("Ask about the documents; /quit or Ctrl-D ends, /help lists the commands.", style="dim")
    while True:
        try:
            yield prompt.prompt(PROMPT)
        except KeyboardInterrupt:
            continue
        except EOFError:
            return


def _piped() -> Iterator[str]:
    """A question a line from standard input; blank lines are skipped."""
    for line in sys.stdin:
        if line.strip():
            yield line.rstrip("\n")


def refuse_pipes(paths: list[str]) -> None:
    """chat reads its sources again for every question: a pipe or FIFO gives its text only once."""
    from ..ingest.base import printable
    from ..ingest.sources import is_pipe

    for path in paths:
        if is_pipe(path):
            raise MemagentError(
                f"{printable(path)} is a pipe: chat reads its sources again for every question, and a pipe gives its text once.",
                "Save the text to a file and name the file: memagent chat FILE",
                exit_code=EXIT_USAGE,
            )
