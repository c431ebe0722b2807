"""Follow-up questions (`ask -c`, `--cid`, `memagent chat`, MCP's `conversation`) with the trained
code-word model (tests/data/codeword.gguf) through the real CLI and a real trace store: each
question a turn of a conversation; a follow-up reads the conversation's sources again with its
model and settings, its problem holding the earlier turns (core.protocols.follow_up) while the rest
of every prompt stays the protocol's; conversations listed, shown and exported; `chat` at a real
pseudo-terminal and with questions piped in; the store migration keeps every older run readable."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import signal
import sqlite3
import subprocess
import sys

import anyio
import pytest
from helpers import CODEWORD_ASK, mcp_stdio, read_terminal_until, run_memagent, whole_fact

from memagent_cli.core.protocols import FOLLOW_UP, FOLLOW_UP_TURN, follow_up
from testkit.codeword import QUESTION

RUN = [*CODEWORD_ASK, "--temperature", "0", "--threads", "1"]
AGAIN = "Which code word is it?"


def ask(*args, cwd, input=None):
    done = run_memagent("ask", *RUN, *args, "--json", cwd=cwd, input=input)  # RUN first: a flag given again wins
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_the_follow_up_problem_is_the_documented_form():
    turns = [("Who signed it?", "Jane Doe"), ("When?", "In 2019")]
    assert follow_up("And where?", turns) == (
        "Earlier questions about these documents, and their answers:\n"
        "Question: Who signed it?\nAnswer: Jane Doe\n\nQuestion: When?\nAnswer: In 2019\n\n"
        "The question now: And where?"
    )
    assert FOLLOW_UP.startswith("Earlier questions") and "{turns}" in FOLLOW_UP and FOLLOW_UP_TURN.count("{") == 2
    # only the most recent turns that fit; none fits: the question alone
    assert "Who signed it?" not in follow_up("And where?", turns, lambda problem: len(problem) < 140)
    assert "When?" in follow_up("And where?", turns, lambda problem: len(problem) < 140)
    assert follow_up("And where?", turns, lambda problem: False) == "And where?"


# One conversation asked once per module, as a person would, then checked a behaviour a test: a
# question (turn 1), a follow-up with -c (turn 2), inspect of the next follow-up, one asked
# --standalone (turn 3), one with flags given again (turn 4), another conversation begun, and the
# first gone on with by --cid (turn 5). The tests that run memagent over it read a copy of its store.


@pytest.fixture(scope="module")
def conversation(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("conversation")
    home = cwd / "home"
    env = {"MEMAGENT_HOME": str(home)}
    doc = whole_fact(300, 5)
    (cwd / "doc.txt").write_text(doc.text, encoding="utf-8")

    def asked(*args):
        done = run_memagent("ask", *RUN, *args, "--json", cwd=cwd, env=env)  # RUN first: a flag given again wins
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout), done.stderr

    got = {"cwd": cwd, "home": home, "doc": doc}
    got["first"], _ = asked("doc.txt", QUESTION)
    cid = got["first"]["conversation"]["id"]
    got["second"], got["second said"] = asked("-c", AGAIN)
    # what inspect shows is what was sent: the earlier turns in the problem, the rest the protocol's own
    show_prompt = ["--question", AGAIN, "--show-prompt", "1"]
    got["inspect -c"] = run_memagent("inspect", "-c", *show_prompt, cwd=cwd, env=env)
    plain = ["doc.txt", "-m", CODEWORD_ASK[1], "--chunk-tokens", "64"]
    got["inspect"] = run_memagent("inspect", *plain, *show_prompt, cwd=cwd, env=env)
    got["standalone"], _ = asked("-c", AGAIN, "--standalone")
    got["warmer"], _ = asked("-c", AGAIN, "--temperature", "0.5", "--seed", "3")  # a flag given again is this turn's
    got["other"], _ = asked("doc.txt", "Name the code word.")  # a new conversation
    got["older"], _ = asked("--cid", cid[:6], AGAIN)
    return got


@pytest.fixture
def in_conversation(conversation, memagent_home):
    """The module's conversation, its store copied to this test's MEMAGENT_HOME."""
    shutil.copytree(conversation["home"], memagent_home)
    return conversation


def test_a_question_begins_a_conversation_of_its_own(conversation):
    first = conversation["first"]
    assert first["conversation"] == {"id": first["trace"], "turn": 1}


def test_ask_c_goes_on_in_the_latest_conversation(conversation):
    first, second, said = conversation["first"], conversation["second"], conversation["second said"]
    assert second["conversation"] == {"id": first["conversation"]["id"], "turn": 2} and "turn 2 of conversation" in said
    assert "reads the sources again for this question" in said
    assert [s["path"] for s in second["sources"]] == ["doc.txt"] and second["settings"]["chunk_tokens"] == 64


def test_a_follow_up_reads_the_earlier_turns_in_its_problem(conversation):
    second, doc = conversation["second"], conversation["doc"]
    assert second["question"] == follow_up(AGAIN, [(QUESTION, doc.value)])  # the problem the model read


def test_inspect_c_shows_the_prompt_a_follow_up_sends(conversation):
    shown, plain = conversation["inspect -c"], conversation["inspect"]
    assert shown.returncode == 0 and plain.returncode == 0, shown.stderr + plain.stderr
    problem = follow_up(AGAIN, [(QUESTION, conversation["doc"].value), (AGAIN, conversation["second"]["answer"])])
    assert shown.stdout == plain.stdout.replace(f"<problem> \n{AGAIN}\n", f"<problem> \n{problem}\n")
    assert "turn 3 of conversation" in shown.stderr


def test_a_standalone_follow_up_reads_the_question_alone(conversation):
    alone, cid = conversation["standalone"], conversation["first"]["conversation"]["id"]
    assert alone["question"] == AGAIN and alone["conversation"] == {"id": cid, "turn": 3}


def test_flags_given_again_are_the_turns_own(conversation):
    warmer = conversation["warmer"]
    assert warmer["conversation"]["changed"] == {"--temperature": 0.5, "--seed": 3} and warmer["settings"]["temperature"] == 0.5


def test_a_question_with_sources_begins_another_conversation(conversation):
    assert conversation["other"]["conversation"]["id"] != conversation["first"]["conversation"]["id"]


def test_cid_goes_on_in_the_conversation_it_names(conversation):
    cid = conversation["first"]["conversation"]["id"]
    assert conversation["older"]["conversation"] == {"id": cid, "turn": 5}


@pytest.mark.parametrize(
    "flags, said",
    [
        (["-c", "doc.txt", AGAIN], "A follow-up takes no sources"),
        (["-c", "--each", "-q", AGAIN], "do not take --each"),
        (["--standalone", "doc.txt", AGAIN], "goes with -c"),
    ],
)
def test_a_follow_up_refuses_what_does_not_go_with_it(in_conversation, flags, said):
    done = run_memagent("ask", *flags, *RUN, cwd=in_conversation["cwd"])
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_traces_list_shows_a_conversations_turns(in_conversation):
    cid = in_conversation["first"]["conversation"]["id"]
    listed = json.loads(run_memagent("traces", "list", "--conversation", cid[:8], "--json", cwd=in_conversation["cwd"]).stdout)
    assert listed["conversation"] == cid
    assert [(r["turn"], r["asked"], r["reused"]) for r in listed["runs"]] == [
        (1, QUESTION, False),
        (2, AGAIN, False),
        (3, AGAIN, False),
        (4, AGAIN, False),
        (5, AGAIN, False),
    ]


def test_traces_show_names_a_runs_conversation_and_turn(in_conversation):
    cid = in_conversation["first"]["conversation"]["id"]
    show = run_memagent("traces", "show", in_conversation["second"]["trace"], cwd=in_conversation["cwd"])
    assert f"\nconversation {cid[:8]}, turn 2\n" in show.stdout


def test_a_conversation_exported_as_html(in_conversation):
    cid = in_conversation["first"]["conversation"]["id"]
    page = run_memagent("traces", "export", "--conversation", cid, "--format", "html", cwd=in_conversation["cwd"]).stdout
    assert page.count('<section class="turn"') == 5 and f"Turn 2: {AGAIN}" in page and "<script" not in page


def test_a_conversation_exported_as_markdown(in_conversation):
    cid = in_conversation["first"]["conversation"]["id"]
    markdown = run_memagent("traces", "export", "--conversation", cid, "--format", "md", cwd=in_conversation["cwd"]).stdout
    assert markdown.startswith(f"# Conversation {cid}") and f"## Turn 1: {QUESTION}" in markdown
    assert "\n### Answer\n" in markdown and "\n## Answer\n" not in markdown  # each run's headings a level down


def test_a_follow_up_asked_again_is_answered_at_once_and_is_a_turn(tmp_path):
    doc = whole_fact(300, 7)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    first, _ = ask("doc.txt", QUESTION, cwd=tmp_path)
    follow, _ = ask("-c", AGAIN, cwd=tmp_path)
    # the same question about the same text, then the same follow-up: nothing is read
    again, _ = ask("doc.txt", QUESTION, cwd=tmp_path)
    assert again["reused_from"]["run"] == first["trace"] and again["conversation"]["turn"] == 1
    repeat, said = ask("-c", AGAIN, cwd=tmp_path)
    assert repeat["reused_from"]["run"] == follow["trace"] and "answered before" in said
    assert repeat["conversation"] == {"id": again["conversation"]["id"], "turn": 2}
    listed = json.loads(run_memagent("traces", "list", "--conversation", "last", "--json", cwd=tmp_path).stdout)["runs"]
    assert [(r["turn"], r["id"], r["reused"]) for r in listed] == [(1, first["trace"], True), (2, follow["trace"], True)]


def test_a_source_changed_since_the_conversation_began_is_read_as_it_is(tmp_path):
    (tmp_path / "doc.txt").write_text(whole_fact(300, 9).text, encoding="utf-8")
    ask("doc.txt", QUESTION, cwd=tmp_path)
    changed = whole_fact(300, 60)
    (tmp_path / "doc.txt").write_text(changed.text, encoding="utf-8")
    record, said = ask("-c", AGAIN, "--standalone", cwd=tmp_path)
    assert "doc.txt has changed since the conversation began; it is read as it is now." in said
    assert changed.value in record["memory"]


def test_chat_with_questions_piped_in_and_going_on_from_an_ask(tmp_path):
    doc = whole_fact(300, 11)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    first, _ = ask("doc.txt", QUESTION, cwd=tmp_path)
    done = run_memagent(
        "chat", "--cid", first["conversation"]["id"], *RUN, "--json", input=f"{AGAIN}\n/cid\n\n{AGAIN}\n", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["conversation"] for r in records] == [{"id": first["trace"], "turn": 2}, {"id": first["trace"], "turn": 3}]
    assert first["trace"] in done.stderr  # /cid
    text = run_memagent("chat", "doc.txt", *RUN, input=f"{QUESTION}\n", cwd=tmp_path)
    assert text.returncode == 0 and text.stdout == f"{doc.value}\n", text.stderr
    nothing = run_memagent("chat", *RUN, input="", cwd=tmp_path)
    assert nothing.returncode == 2 and "Name the documents" in nothing.stderr


def test_chat_fresh_reads_the_next_question_again(tmp_path):
    """/fresh is the next question's: it reads, where the store had the answer; the chat's lookup stays."""
    doc = whole_fact(300, 11)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    first, _ = ask("doc.txt", QUESTION, cwd=tmp_path)
    done = run_memagent("chat", "doc.txt", *RUN, "--json", input=f"/fresh\n{QUESTION}\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (fresh,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert fresh["answer"] == doc.value and fresh.get("reused_from") is None and fresh["trace"] != first["trace"]
    again = run_memagent("chat", "doc.txt", *RUN, "--json", input=f"{QUESTION}\n", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    (reused,) = [json.loads(line) for line in again.stdout.splitlines()]
    assert reused["reused_from"]["run"] == fresh["trace"]  # recorded with its keys, /fresh's run is the newest found


def test_chat_at_a_terminal(tmp_path):
    """Two questions; Ctrl-C during a reading (kept) back to the prompt; the same question again goes
    on from where it stopped; /history numbers turns as the turn lines do; a third; Ctrl-D. The
    follow-up's header shows the question as asked, and nothing is wider than the terminal."""
    doc = whole_fact(12_000, 13)  # ~190 steps: long enough to interrupt
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    home = tmp_path / "home"
    leader, follower = pty.openpty()
    env = {
        **{k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"},
        "MEMAGENT_HOME": str(home),
        "TERM": "xterm-256color",
        "PROMPT_TOOLKIT_NO_CPR": "1",  # nothing answers a cursor-position request here
        "COLUMNS": "100",
        "LINES": "30",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "memagent_cli", "chat", "doc.txt", *map(str, RUN)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    shown = bytearray()

    def until(text: bytes, count: int = 1) -> None:
        read_terminal_until(leader, text, 120, count=count, seen=shown)

    prompt = b"\x1b[?2004h"  # prompt_toolkit turns bracketed paste on for each prompt it shows
    try:
        until(b"/quit or Ctrl-D ends")
        until(prompt)
        os.write(leader, QUESTION.encode() + b"\r")
        until(prompt, count=2)
        assert doc.value.encode() in shown
        os.write(leader, AGAIN.encode() + b"\r")
        until(b"turn 2 of conversation")
        at = len(shown)
        # a few steps of turn 2 kept (the progress line says "Step 3/…" while step 3 is read): Ctrl-C stops it there
        while not any(int(n) >= 3 for n in re.findall(rb"Step (\d+)/", bytes(shown[at:]))):
            until(b"Step ", count=shown.count(b"Step ") + 1)
        proc.send_signal(signal.SIGINT)
        until(b"ask it again, or /resume, to go on from there")
        until(prompt, count=3)
        os.write(leader, b"/history\r")
        until(b"2. " + AGAIN.encode())  # turn 2, as its line said, though it has no answer yet
        assert b"1. " + QUESTION.encode() in shown
        until(prompt, count=4)
        os.write(leader, AGAIN.encode() + b"\r")
        until(b"turn 2 of conversation")
        until(b"goes on from step")
        until(prompt, count=5)
        os.write(leader, b"Name the code word.\r")
        until(b"turn 3 of conversation")
        until(prompt, count=6)
        os.write(leader, b"\x04")  # Ctrl-D
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    with sqlite3.connect(home / "traces.db") as db:
        statuses = [r[0] for r in db.execute("SELECT runs.status FROM turns JOIN runs ON runs.id = turns.run_id ORDER BY turn")]
    assert statuses == ["complete", "complete", "complete"]  # turn 2 stopped, then gone on with
    plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]", b"", bytes(shown)).decode(errors="replace")
    assert f"Q: {AGAIN}" in plain and "Earlier questions" not in plain  # the follow-up as asked, not its problem
    widest = max(len(line) for line in re.split(r"[\r\n]", plain))
    assert widest <= 100, widest


def test_mcp_ask_holds_a_conversation(tmp_path, memagent_home):
    from mcp import Client

    doc = whole_fact(300, 15)
    (tmp_path / "a.txt").write_text(doc.text, encoding="utf-8")
    params = mcp_stdio(memagent_home, tmp_path, *RUN)

    async def main():
        async with Client(params) as client:
            first = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION})
            cid = first.structured_content["conversation"]["id"]
            second = await client.call_tool("ask", {"conversation": cid, "question": AGAIN})
            both = await client.call_tool("ask", {"conversation": cid, "question": AGAIN, "sources": ["a.txt"]})
            return first.structured_content, second.structured_content, both

    first, second, both = anyio.run(main)
    assert first["answer"] == doc.value and first["conversation"]["turn"] == 1
    assert second["conversation"] == {"id": first["conversation"]["id"], "turn": 2} and second["steps"] == first["steps"]
    assert both.is_error and "one question, about the conversation's own documents" in both.content[0].text
    shown = run_memagent("traces", "show", second["trace"], "--json", cwd=tmp_path)
    assert json.loads(shown.stdout)["question"] == follow_up(AGAIN, [(QUESTION, doc.value)])


def test_upgrade_from_migration_7_makes_each_run_its_own_conversation(tmp_path):
    from test_store import database_at

    from memagent_cli.traces.migrations import MIGRATIONS
    from memagent_cli.traces.store import TraceStore

    path = tmp_path / "traces.db"
    conn = database_at(path, 7)
    conn.executescript(
        "INSERT INTO runs (id, started_at, ended_at, status, question, sources, model, settings, answer) VALUES"
        " ('0123456789ab', '2024-01-02T00:00:00.000000+00:00', '2024-01-02T00:01:00.000000+00:00', 'complete',"
        " 'Where did the otter swim?', '[]', '{}', '{}', 'Downstream'),"
        " ('ba9876543210', '2024-01-03T00:00:00.000000+00:00', NULL, 'interrupted', 'Where is the heron?',"
        " '[]', '{}', '{}', NULL);"
    )
    conn.close()
    with TraceStore(path) as store:
        assert [r[0] for r in sqlite3.connect(path).execute("SELECT version FROM schema_migrations")] == list(
            range(1, len(MIGRATIONS) + 1)
        )
        runs = {r["id"]: r for r in store.list_runs()}
        assert {(r["conversation"], r["turn"]) for r in runs.values()} == {("0123456789ab", 1), ("ba9876543210", 1)}
        assert store.conversation("0123")["turns"][0]["answer"] == "Downstream"
        assert store.resolve_conversation("last") == "ba9876543210"
        new = store.create_run(question="q", sources=[], model={}, settings={}, conversation="0123456789ab", asked="And then?")
        assert store.own_turn(new) == ("0123456789ab", 2)
        store.delete("0123456789ab")  # its first run gone, the conversation goes with it
        assert [r[0] for r in sqlite3.connect(path).execute("SELECT id FROM conversations")] == ["ba9876543210"]


def test_an_infmem_follow_up_stops_as_early(tmp_path):
    """InfMem's planner reads the follow-up's problem like any question's: with the earlier answer in
    it, the trained stand-in (tests/data/infmem.gguf) stops its reading early, as the first did."""
    from testkit.infmem_task import CHUNK_TOKENS, MODEL
    from testkit.infmem_task import whole_fact as infmem_fact

    doc = infmem_fact(1800, 0, where=0.85)  # the fact late in 9 chunks
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    args = ["-m", MODEL, "--chunk-tokens", str(CHUNK_TOKENS), "--memory-tokens", "64", "--answer-tokens", "32", "--threads", "1"]
    first = run_memagent("ask", "doc.txt", QUESTION, *args, "--json", cwd=tmp_path)
    follow = run_memagent("ask", "-c", AGAIN, *args, "--json", cwd=tmp_path)
    assert first.returncode == 0 and follow.returncode == 0, first.stderr + follow.stderr
    chunks = -(-json.loads(first.stdout)["document_tokens"] // CHUNK_TOKENS)
    read = [len(json.loads(done.stdout)["steps"]) for done in (first, follow)]
    assert chunks == 9 and read[0] == 3 and read[1] <= 3, read  # stopped early both times
    assert doc.value in json.loads(follow.stdout)["answer"] and "stopped early" in follow.stderr


def test_runs_of_jobs_begin_no_conversation_and_ask_c_goes_on_with_the_question_asked(tmp_path):
    """`--each`, `batch`, `watch` and `eval` runs are no questions a person asked in a conversation:
    after `ask` then `ask --each` over other documents, `ask -c` goes on with the `ask`."""
    doc = whole_fact(300, 5)
    (tmp_path / "doc.txt").write_text(doc.text, encoding="utf-8")
    folder = tmp_path / "others"
    folder.mkdir()
    for n in range(2):
        (folder / f"o{n}.txt").write_text(whole_fact(200, 10 + n).text, encoding="utf-8")
    first, _ = ask("doc.txt", QUESTION, cwd=tmp_path)
    each = run_memagent("ask", *RUN, "others", "--each", "-q", QUESTION, "--json", cwd=tmp_path)
    assert each.returncode == 0, each.stderr
    records = json.loads(each.stdout)["results"]
    assert [r["conversation"] for r in records] == [None, None]
    with sqlite3.connect(os.path.join(os.environ["MEMAGENT_HOME"], "traces.db")) as db:
        assert [row[0] for row in db.execute("SELECT id FROM conversations")] == [first["conversation"]["id"]]
    second, _ = ask("-c", AGAIN, cwd=tmp_path)
    assert second["conversation"] == {"id": first["conversation"]["id"], "turn": 2}
    assert [s["path"] for s in second["sources"]] == ["doc.txt"]
