"""`memagent mcp` with real clients: the MCP SDK's own Client starts the server as a subprocess
over stdio, or connects to one serving streamable HTTP on 127.0.0.1, and runs whole `ask` calls
with the trained code-word model (tests/data/codeword.gguf): the answer, its evidence (location
and an excerpt holding the fact), progress and memory notifications, a cancellation mid-run and
its continuation, the queue, and every path the server must refuse; over HTTP, the Origin check
and the bearer token too."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import zipfile
from pathlib import Path

import anyio
import httpx2
import pytest
from helpers import CODEWORD_ASK, free_port, run_memagent, spawn_memagent, whole_fact

from testkit.codeword import QUESTION, fact_sentence
from testkit.processes import until_ready

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

SERVER = ["mcp", *map(str, CODEWORD_ASK), "--temperature", "0", "--threads", "1"]
TRANSPORTS = ["stdio", "http"]


@pytest.fixture
def tree(tmp_path):
    """root/ (the allowed folder: a.txt, sub/b.txt, docs/ with a link that leads out, links to a
    file and an archive outside) and outside/ (a secret file and a zip), with their code words."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "docs").mkdir()
    outside.mkdir()
    a, b, secret = whole_fact(300, 1), whole_fact(300, 40), whole_fact(300, 80)
    (root / "a.txt").write_text(a.text, encoding="utf-8")
    (root / "sub" / "b.txt").write_text(b.text, encoding="utf-8")
    (root / "docs" / "fine.txt").write_text(b.text, encoding="utf-8")
    (outside / "secret.txt").write_text(secret.text, encoding="utf-8")
    with zipfile.ZipFile(outside / "pack.zip", "w") as z:
        z.writestr("inner/c.txt", secret.text)
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "docs" / "escape.txt").symlink_to(outside / "secret.txt")
    (root / "pack.zip").symlink_to(outside / "pack.zip")
    return {"root": root, "outside": outside, "a": a, "b": b, "secret": secret}


def interrupted_run_over(path: Path) -> str:
    """A run over `path` recorded as interrupted in this test's trace store, as `memagent ask` leaves one."""
    from memagent_cli.core.config import AgentConfig
    from memagent_cli.ingest.sources import Source
    from memagent_cli.traces.recorder import fingerprint
    from memagent_cli.traces.store import TraceStore

    source = fingerprint(Source(str(path), path.name, "text", path.stat().st_size))
    settings = {
        **AgentConfig(chunk_tokens=64, memory_tokens=32, answer_tokens=24, temperature=0).to_dict(),
        "cwd": str(path.parent),
    }
    with TraceStore() as store:
        run_id = store.create_run(
            question=QUESTION,
            sources=[source],
            model={"name": "codeword", "path": str(CODEWORD_ASK[1]), "size": None},
            settings=settings,
        )
        store.add_step(run_id, {"index": 1, "memory": "No previous memory", "tokens": 64, "spans": []})
        store.finish_run(run_id, "interrupted")
    return run_id


class Server:
    """`memagent mcp` for one test: `connect()` opens an SDK Client to it (stdio: a new server
    process per client; http: the one started for the test). Over stdio the client speaks the
    2026-07-28 protocol; over HTTP the initialize handshake of 2025-11-25, as Claude Code, VS Code
    and Cursor do (test_http_checks_origin_and_token speaks 2026-07-28 over HTTP)."""

    def __init__(self, transport: str, cwd: Path, home: Path, url: str | None = None):
        self.transport, self.cwd, self.home, self.url = transport, cwd, home, url

    def connect(self, **kwargs):
        if self.transport == "stdio":
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "memagent_cli", *SERVER],
                # The SDK passes a few variables on, not PYTHONPATH: the server imports the code under test too.
                env={"MEMAGENT_HOME": str(self.home), **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}},
                cwd=str(self.cwd),
            )
            return Client(params, **kwargs)
        return Client(self.url, **{"mode": "legacy", **kwargs})


@contextlib.contextmanager
def http_server(cwd: Path, home: Path, spawned, *extra: str, host: str = "127.0.0.1:"):
    """`memagent mcp --http HOST:PORT` on a free port (`host` "" gives the port alone)."""
    port = free_port()
    log = home.parent / f"server-{port}.log"
    with open(log, "wb") as err:
        proc = spawn_memagent(
            *SERVER, "--http", f"{host}{port}", *extra, cwd=cwd, env={"MEMAGENT_HOME": str(home)}, stdout=err, stderr=err
        )
    spawned.append(proc)

    def listens() -> bool:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True

    with until_ready(proc, log, "memagent mcp", listens):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(params=TRANSPORTS)
def server(request, tree, memagent_home, spawned):
    if request.param == "stdio":
        yield Server("stdio", tree["root"], memagent_home)
        return
    with http_server(tree["root"], memagent_home, spawned) as url:
        yield Server("http", tree["root"], memagent_home, url)


def test_ask_answers_with_evidence_progress_and_memory_log(server, tree):
    progress, logs = [], []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    async def on_log(params):
        logs.append(params)

    async def main():
        async with server.connect(logging_callback=on_log, log_level="debug") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {"ask", "inspect", "resume", "traces_list", "trace_show"}
            assert "1,000 documents" in tools["ask"].description and "queue" in tools["ask"].description
            assert tools["ask"].input_schema["properties"]["chunk_tokens"]["anyOf"][0]["maximum"] == 64
            done = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION}, progress_callback=on_progress)
            assert not done.is_error, done.content
            shown = await client.call_tool("trace_show", {"id": done.structured_content["trace"]})
            resource = await client.read_resource(f"memagent://traces/{done.structured_content['trace']}")
            return done, shown, resource

    done, shown, resource = anyio.run(main)
    record = done.structured_content
    assert record["answer"] == tree["a"].value
    assert tree["a"].value in done.content[0].text  # the text rendering says it too
    evidence = record["evidence"]
    assert evidence and evidence[0]["source"] == "a.txt" and evidence[0]["location"].startswith("a.txt chars ")
    assert fact_sentence(tree["a"].value) in evidence[0]["excerpt"] and len(evidence[0]["excerpt"]) <= 302
    steps = record["steps"]
    assert steps > 2 and len(progress) >= steps  # after every step (and while the answer is written)
    values = [p[0] for p in progress]
    assert values == sorted(set(values))  # always growing
    assert any(f"step {steps}" in message for _, _, message in progress)
    memories = [entry.data for entry in logs if entry.level == "debug"]
    assert len(memories) == steps and fact_sentence(tree["a"].value) in memories[-1]
    assert shown.structured_content["status"] == "complete" and shown.structured_content["answer"] == record["answer"]
    assert f'"answer": "{record["answer"]}"' in resource.contents[0].text


def test_cancel_stops_the_run_resumably_and_queued_calls_wait(server, tree):
    # ~500 steps over stdio; over HTTP, which runs the same server code, ~200 keep the file's time modest
    tokens = 30_000 if server.transport == "stdio" else 12_000
    long = whole_fact(tokens, 3)
    (tree["root"] / "long.txt").write_text(long.text, encoding="utf-8")
    seen: list[float] = []
    first_stop = anyio.Event()
    queued_told, short_record = anyio.Event(), {}

    async def on_long(done, total, message):
        seen.append(done)
        if done >= 5:
            first_stop.set()

    async def on_short(done, total, message):
        if "queued" in message:
            queued_told.set()

    async def trace_of(client, status):
        for _ in range(600):  # the server records the stop as the run ends: until then it is running
            runs = (await client.call_tool("traces_list", {"source": "long.txt"})).structured_content["runs"]
            if runs and runs[0]["status"] == status:
                return runs[0]
            await anyio.sleep(0.05)
        raise AssertionError(f"no {status} run of long.txt: {runs}")

    async def main():
        async with server.connect() as client:
            ask_long = {"sources": ["long.txt"], "question": QUESTION}
            async with anyio.create_task_group() as group:
                long_call = anyio.CancelScope()

                async def run_long():
                    with long_call:
                        await client.call_tool("ask", ask_long, progress_callback=on_long)
                    assert long_call.cancelled_caught  # never finished on its own

                async def run_short():
                    done = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION}, progress_callback=on_short)
                    short_record.update(done.structured_content)

                group.start_soon(run_long)
                await first_stop.wait()
                group.start_soon(run_short)
                await queued_told.wait()  # one engine: the short call waits behind the long run
                long_call.cancel()
            stopped = await trace_of(client, "interrupted")
            assert stopped["steps"] >= 5  # its steps are kept

            # asked again, the same run goes on from where it stopped; cancelled again, then resumed by id
            seen.clear()
            again = anyio.Event()

            async def on_again(done, total, message):
                seen.append(done)
                if done >= stopped["steps"] + 5:
                    again.set()

            async with anyio.create_task_group() as group:
                group.start_soon(lambda: client.call_tool("ask", ask_long, progress_callback=on_again))
                await again.wait()
                group.cancel_scope.cancel()
            second = await trace_of(client, "interrupted")
            resumed = await client.call_tool("resume", {"id": second["id"]})
            return stopped, second, resumed

    stopped, second, resumed = anyio.run(main)
    assert short_record["answer"] == tree["a"].value  # ran once the long run let the engine go
    assert second["id"] == stopped["id"] and second["steps"] > stopped["steps"]
    assert not resumed.is_error, resumed.content
    record = resumed.structured_content
    assert record["trace"] == stopped["id"] and record["resumed_steps"] == second["steps"]
    assert record["answer"] == long.value and record["steps"] > tokens // 64 * 0.8
    assert stopped["steps"] < record["steps"] - 50  # the cancel stopped it early
    assert fact_sentence(long.value) in record["evidence"][0]["excerpt"]


def test_refuses_paths_outside_the_roots_before_reading(server, tree):
    outside = tree["outside"]
    refused = {
        "outside the root": [str(outside / "secret.txt")],
        "a symbolic link out": ["link.txt"],
        "..": ["../outside/secret.txt"],
        "a folder holding a link out": ["docs"],
        "an archive linked from outside": ["pack.zip"],
        "the outside folder": [str(outside)],
        "a URL": ["https://example.com/report.pdf"],
        "standard input": ["-"],
        "one bad path among good ones": ["a.txt", "sub", "link.txt"],
    }
    rules = {
        "a URL": "rule: the server reads local files only",
        "standard input": "rule: files and folders only",
    }
    roots_of_client: list = []
    forged = interrupted_run_over(outside / "secret.txt")  # made elsewhere, over a file this server may not read

    async def list_roots(context):
        import mcp_types

        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=(tree["root"] / "sub").as_uri())])

    async def main():
        answers = {}
        async with server.connect() as client:
            for case, sources in refused.items():
                answers[case] = await client.call_tool("ask", {"sources": sources, "question": QUESTION})
            answers["too many questions"] = await client.call_tool(
                "ask", {"sources": ["a.txt"], "question": QUESTION, "questions": [f"{QUESTION} {k}" for k in range(50)]}
            )
            answers["resuming a run over an outside file"] = await client.call_tool("resume", {"id": forged})
            shown = await client.call_tool("trace_show", {"id": forged})
            runs = (await client.call_tool("traces_list", {})).structured_content["runs"]
        # a client narrowing to root/sub, in either protocol era
        async with server.connect(
            list_roots_callback=list_roots, mode="auto" if server.transport == "http" else "legacy"
        ) as client:
            roots_of_client.append(await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION}))
            roots_of_client.append(await client.call_tool("ask", {"sources": ["sub/b.txt"], "question": QUESTION}))
        return answers, shown, runs

    answers, shown, runs = anyio.run(main)
    for case, result in answers.items():
        text = result.content[0].text
        assert result.is_error, case
        assert "nothing was read" in text, (case, text)
        assert rules.get(case, "rule: ") in text, (case, text)
        assert tree["secret"].value not in text
    for case in ("outside the root", "a symbolic link out", "..", "a folder holding a link out", "the outside folder"):
        assert "outside the allowed roots" in answers[case].content[0].text, case
    assert "docs/escape.txt (it leads to" in answers["a folder holding a link out"].content[0].text
    # a relative path is shown with the path it was taken to be
    assert f"../outside/secret.txt (resolved as {outside / 'secret.txt'})" in answers[".."].content[0].text
    assert "at most 50" in answers["too many questions"].content[0].text
    assert "outside the allowed roots" in answers["resuming a run over an outside file"].content[0].text
    assert shown.is_error and "outside the allowed roots" in shown.content[0].text
    assert runs == []  # no refused call started a run, and the outside run is not listed
    narrowed, allowed = roots_of_client
    assert narrowed.is_error and "outside the roots the client declared" in narrowed.content[0].text
    assert f"a.txt (resolved as {tree['root'] / 'a.txt'}) is outside" in narrowed.content[0].text
    assert not allowed.is_error and allowed.structured_content["answer"] == tree["b"].value


def test_inspect_counts_and_a_failed_run_is_an_error_result(tree, memagent_home):
    (tree["root"] / "empty.txt").write_text("   \n", encoding="utf-8")
    server = Server("stdio", tree["root"], memagent_home)

    async def main():
        async with server.connect() as client:
            counted = await client.call_tool("inspect", {"sources": ["a.txt", "sub"]})
            empty = await client.call_tool("ask", {"sources": ["empty.txt"], "question": QUESTION})
            other_model = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION, "model": "other.gguf"})
            too_big = await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION, "chunk_tokens": 5000})
            return counted, empty, other_model, too_big

    counted, empty, other_model, too_big = anyio.run(main)
    report = counted.structured_content
    assert [s["title"] for s in report["sources"]] == ["a.txt", "sub/b.txt"]
    assert report["steps_total"] == -(-report["document_tokens"] // 64) and report["estimate"]["seconds"] > 0
    assert empty.is_error and "no text" in empty.content[0].text
    assert other_model.is_error and "does not load another model" in other_model.content[0].text
    assert too_big.is_error and "chunk_tokens" in too_big.content[0].text  # over the server's own budget


def interrupted_run_of_folder(cwd: Path, folder: str) -> str:
    """A run over `folder` (named from `cwd`) recorded as interrupted after its first step, its
    sources collected and fingerprinted as `memagent ask` and the server's `ask` record them."""
    import os

    from memagent_cli.core.config import AgentConfig
    from memagent_cli.ingest.sources import collect_sources
    from memagent_cli.traces.recorder import fingerprint
    from memagent_cli.traces.store import TraceStore

    here = os.getcwd()
    os.chdir(cwd)
    try:
        sources = [fingerprint(s) for s in collect_sources([folder], warn=lambda note: None)]
    finally:
        os.chdir(here)
    settings = {**AgentConfig(chunk_tokens=64, memory_tokens=32, answer_tokens=24, temperature=0).to_dict(), "cwd": str(cwd)}
    with TraceStore() as store:
        run_id = store.create_run(
            question=QUESTION,
            sources=sources,
            model={"name": "codeword", "path": str(CODEWORD_ASK[1]), "size": None},
            settings=settings,
        )
        step = {"index": 1, "memory": "No previous memory", "tokens": 64, "spans": [], "memory_tokens": 3}
        step.update(prompt_tokens=200, generated_tokens=4, drafted_tokens=0, accepted_tokens=0, finish_reason="stop", seconds=0.1)
        store.add_step(run_id, step)
        store.finish_run(run_id, "interrupted")
    return run_id


def test_resume_skips_an_unreadable_file_the_run_found_in_a_folder(tree, memagent_home):
    """Resumed over MCP, a run of a folder treats its documents as found in the folder, as
    `memagent ask --resume` does: the unreadable one is skipped with a note (named alone it would be
    an error) and the run goes on to its answer from the readable one."""
    mixed = tree["root"] / "mixed"
    mixed.mkdir()
    (mixed / "a.txt").write_text(tree["a"].text, encoding="utf-8")
    (mixed / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    run_id = interrupted_run_of_folder(tree["root"], "mixed")
    from memagent_cli.traces.store import TraceStore

    with TraceStore() as store:
        recorded = store.get_run(run_id)["sources"]
    assert [(s["title"], s.get("found")) for s in recorded] == [("mixed/a.txt", True), ("mixed/broken.docx", True)]
    server = Server("stdio", tree["root"], memagent_home)
    logs = []

    async def on_log(params):
        logs.append(params)

    async def main():
        async with server.connect(logging_callback=on_log, log_level="info") as client:
            return await client.call_tool("resume", {"id": run_id})

    resumed = anyio.run(main)
    assert not resumed.is_error, resumed.content
    record = resumed.structured_content
    assert record["trace"].endswith(run_id) and record["resumed_steps"] == 1
    assert record["answer"] == tree["a"].value
    warnings = [entry.data for entry in logs if entry.level == "warning"]
    assert warnings == ["skipped mixed/broken.docx (it is damaged, truncated or not a Word file (File is not a zip file))"]


def test_each_answers_every_document_on_its_own(tree, memagent_home):
    server = Server("stdio", tree["root"], memagent_home)

    async def main():
        async with server.connect() as client:
            done = await client.call_tool("ask", {"sources": ["a.txt", "sub"], "question": QUESTION, "each": True})
            # the code-word model was not trained with instructions: only where they went is checked
            told = {"sources": ["a.txt"], "question": QUESTION, "instructions": "Answer in lower case."}
            return done, await client.call_tool("ask", told)

    done, told = anyio.run(main)
    assert not done.is_error, done.content
    results = done.structured_content["results"]
    assert [(r["document"], r["answer"]) for r in results] == [("a.txt", tree["a"].value), ("sub/b.txt", tree["b"].value)]
    assert all(r["evidence"] and r["trace"] for r in results) and results[0]["trace"] != results[1]["trace"]
    from memagent_cli.traces.store import TraceStore

    assert not told.is_error, told.content
    with TraceStore() as store:  # a call's instructions reach its run (the final prompt only), and only its
        runs = [r["trace"] for r in results] + [told.structured_content["trace"]]
        settings = [store.get_run(t.rsplit("/", 1)[-1], with_steps=False)["settings"] for t in runs]
    assert [s["instructions"] for s in settings] == ["", "", "Answer in lower case."]
    assert {s["protocol"] for s in settings} == {"memagent"}


def test_http_checks_origin_and_token(tree, memagent_home, spawned):
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def post(url, **extra):
        return httpx2.post(url, json=initialize, headers={**headers, **extra}, timeout=30).status_code

    with http_server(tree["root"], memagent_home, spawned) as url:
        assert post(url, Origin="http://evil.example") == 403  # a web page's request: DNS rebinding
        assert post(url, Origin="http://127.0.0.1:1234") == 200
        assert post(url) == 200
    with http_server(tree["root"], memagent_home, spawned, "--token", "s3cret", host="") as url:  # 127.0.0.1 by default
        assert post(url) == 401
        assert post(url, Authorization="Bearer wrong") == 401
        assert post(url, Authorization="Bearer s3cret", Origin="http://evil.example") == 403
        assert post(url, Authorization="Bearer s3cret") == 200

        async def main():
            # the SDK's own client waits up to 300 s for a reply; httpx2's default (5 s) is too short for a run
            timeout = httpx2.Timeout(30, read=300)
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}, timeout=timeout) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    return await client.call_tool("ask", {"sources": ["a.txt"], "question": QUESTION})

        done = anyio.run(main)
        assert done.structured_content["answer"] == tree["a"].value
    # bound to every address: the token is required, and a browser's Origin still refused
    with http_server(tree["root"], memagent_home, spawned, "--token", "s3cret", host="0.0.0.0:") as url:
        assert post(url, Authorization="Bearer s3cret") == 200
        assert post(url) == 401
        assert post(url, Authorization="Bearer s3cret", Origin="http://evil.example") == 403
    # reachable from other machines, the server needs a token before it starts
    refused = run_memagent(*SERVER, "--http", f"0.0.0.0:{free_port()}", cwd=tree["root"], timeout=60)
    assert refused.returncode == 2 and "needs --token" in refused.stderr
    missing = run_memagent("mcp", "--model", tree["root"] / "missing.gguf", cwd=tree["root"], timeout=60)
    assert missing.returncode == 2 and "Model file not found" in missing.stderr  # before it serves anything
