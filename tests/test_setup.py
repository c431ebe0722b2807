"""One run setup for every command that runs a model: each rule checked through `ask`, `batch`,
`eval` and `mcp` (the MCP SDK's own client) alike, against a real HTTP server on 127.0.0.1 that has
no tokenize endpoint (tests/fakeserver.py): `-m` as a served run's vocabulary, --offline, the
missing-model message; server URLs in their normal form; the JSON of a served run; the note that
a remote server's tokenizer costs round trips (against one that has the endpoints)."""

from __future__ import annotations

import json
import socket
import sys

import anyio
import pytest
from fakeserver import FakeServer
from helpers import CODEWORD_MODEL, run_memagent, words

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

BUDGETS = ["--chunk-tokens", "64", "--memory-tokens", "16", "--answer-tokens", "16", "--temperature", "0"]
COMMANDS = ["ask", "batch", "eval", "mcp"]
MISSING = "memagent-7b"  # a catalog model: never installed in a test's MEMAGENT_HOME


@pytest.fixture(scope="module")
def server():
    with FakeServer(latency=0.0) as fake:
        yield fake


@pytest.fixture
def files(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text(words(150, seed=3), encoding="utf-8")
    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"custom_id": "a", "sources": [str(doc)], "question": "Who?"}) + "\n", encoding="utf-8")
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "1", "context": doc.read_text(), "input": "Who?", "answers": ["42"]}) + "\n")
    return {"doc": doc, "job": job, "data": data, "out": tmp_path / "out.jsonl"}


def command(name: str, files, *flags: str) -> list[str]:
    """The command line of `name` over the test's document (mcp: the server's own options)."""
    if name == "ask":
        return ["ask", str(files["doc"]), "Who?", *flags, "--json"]
    if name == "batch":
        return ["batch", str(files["job"]), "-o", str(files["out"]), *flags]
    if name == "eval":
        return ["eval", str(files["data"]), "-o", str(files["out"]), *flags, "--json"]
    return ["mcp", "--allow", str(files["doc"].parent), *flags]


def mcp_ask(files, home, *flags: str):
    """One `ask` call through the SDK's client to `memagent mcp FLAGS` over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memagent_cli", *command("mcp", files, *flags)],
        env={"MEMAGENT_HOME": str(home), "NO_COLOR": "1"},
        cwd=str(files["doc"].parent),
    )

    async def main():
        async with Client(params) as client:
            return await client.call_tool("ask", {"sources": [str(files["doc"])], "question": "Who?"})

    return anyio.run(main)


def answered(name: str, files, done) -> bool:
    """Whether a finished command line ran its one run to an answer."""
    assert done.returncode == 0, done.stderr
    if name == "ask":
        return json.loads(done.stdout)["answer"] == "42"
    row = json.loads(files["out"].read_text().splitlines()[0])
    return row.get("answer") == "42" or row.get("prediction", "").endswith("42") or row.get("sub_em") == 1


@pytest.mark.parametrize("name", COMMANDS)
def test_m_is_the_vocabulary_of_a_served_run_in_every_command(name, files, server, memagent_home):
    served = ["--engine", "openai", "--base-url", server.url, *BUDGETS]
    if name == "mcp":
        result = mcp_ask(files, memagent_home, *served, "-m", str(CODEWORD_MODEL))
        assert not result.is_error, result.content[0].text
        assert result.structured_content["answer"] == "42"
        alone = mcp_ask(files, memagent_home, *served)  # no vocabulary, and the server has no tokenize endpoint
        assert alone.is_error
        return
    done = run_memagent(*command(name, files, *served, "-m", CODEWORD_MODEL))
    assert answered(name, files, done)
    files["out"].unlink(missing_ok=True)
    alone = run_memagent(*command(name, files, *served))
    assert alone.returncode == 1 and "tokeniz" in alone.stderr.lower(), alone.stderr


@pytest.mark.parametrize(
    "engine", [[], ["--engine", "openai", "--base-url", "http://127.0.0.1:9/v1"]], ids=["embedded", "served"]
)
@pytest.mark.parametrize("offline", [["--offline"], []], ids=["offline", "piped"])
@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_model_is_said_alike_in_every_command(name, offline, engine, files):
    """Not installed: the same one line, with the command that gets it, before any server is asked
    (port 9 listens to nothing) and before anything loads; piped there is no download prompt."""
    done = run_memagent(*command(name, files, *engine, "-m", MISSING, *offline), input="")
    assert done.returncode == 2, done.stderr
    assert "memagent-7b:q4_k_m is not installed" in done.stderr
    assert "memagent models pull memagent-7b:q4_k_m" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_one_server_spelled_twice_is_one_server_with_a_note(files, server):
    root = server.url.removesuffix("/v1")
    done = run_memagent(
        "ask",
        files["doc"],
        "Who?",
        *["--engine", "openai", "-m", CODEWORD_MODEL, *BUDGETS, "--json"],
        *["--base-url", root, "--base-url", server.url + "/", "--base-url", server.url],
    )
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "names a server already given" in line]
    assert len(notes) == 2 and notes[0].startswith("note: ")
    record = json.loads(done.stdout)
    assert record["answer"] == "42"
    assert record["model"]["servers"] == [server.url]  # one server: no pool


def test_the_json_of_a_served_run(files, server):
    url2 = None
    with FakeServer(latency=0.0) as other:
        url2 = other.url
        done = run_memagent(
            "ask",
            files["doc"],
            "Who?",
            *["--engine", "openai", "-m", CODEWORD_MODEL, *BUDGETS, "--json"],
            *["--base-url", server.url, "--base-url", url2],
        )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["model"]["path"] is None and record["model"]["size"] is None
    assert record["model"]["servers"] == [server.url, url2]
    assert record["device"].startswith("served")
    shown = run_memagent("traces", "show", "last", "--json")
    assert shown.returncode == 0, shown.stderr
    trace = json.loads(shown.stdout)
    assert trace["model"]["servers"] == [server.url, url2] and trace["model"]["path"] is None
    assert trace["settings"]["engine"] == {
        "kind": "openai",
        "servers": [server.url, url2],
        "served_model": None,
        "tokenizer": str(CODEWORD_MODEL),
    }


def _resolves_here(host: str) -> bool:
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET)} == {"127.0.0.1"}
    except OSError:
        return False


HOST = socket.gethostname()  # a name for this host that is not "localhost": a remote server to the hint


@pytest.fixture(scope="module")
def tokenizing_server():
    """A fake vLLM with its tokenize endpoints, the code-word model's vocabulary."""
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    with FakeServer(latency=0.0, tokenizer=load_tokenizer(read_gguf(CODEWORD_MODEL)), dialect="vllm") as fake:
        yield fake


@pytest.mark.skipif(HOST == "localhost" or not _resolves_here(HOST), reason="this host's name does not lead to 127.0.0.1")
def test_a_remote_server_that_tokenizes_gets_one_hint(files, tokenizing_server):
    """The server's tokenizer over the network costs a round trip per chunk: the header says once
    that a local vocabulary saves it. Not with one (-m, --tokenizer), nor for a server on this host."""
    port = tokenizing_server.url.split(":")[2].split("/")[0]
    remote = f"http://{HOST}:{port}/v1"
    hint = f"note: the server at {remote} tokenizes the document, a round trip per chunk; --tokenizer MODEL_OR_GGUF (or -m)"
    runs = [(remote, [], True), (remote, ["-m", str(CODEWORD_MODEL)], False), (tokenizing_server.url, [], False)]
    for base, vocabulary, hinted in runs:
        served = ["--engine", "openai", "--base-url", base, *vocabulary, *BUDGETS]
        done = run_memagent("ask", files["doc"], "Who?", *served, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["answer"] == "42"
        assert sum(line.startswith(hint) for line in done.stderr.splitlines()) == hinted, done.stderr
        assert hinted or "tokenizes" not in done.stderr


@pytest.mark.parametrize(
    "url, local",
    [
        ("http://127.0.0.1:8000/v1", True),
        ("localhost:8000", True),
        ("http://[::1]:8000", True),
        ("http://127.0.1.1:8080/v1", True),
        ("http://0.0.0.0:8000", True),
        ("http://gpu1:8000/v1", False),
        ("http://10.0.0.2:8000/v1", False),
        ("https://api.example.com/v1", False),
    ],
)
def test_which_servers_are_local(url, local):
    from memagent_cli.model.served.backend import ServedOptions, is_local

    assert is_local(url) is local
    assert (ServedOptions(servers=(url,)).tokenizer_note() is None) is local
    assert ServedOptions(servers=(url,), tokenizer="model.gguf").tokenizer_note() is None
    # The first server is the one whose tokenizer a run uses.
    assert (ServedOptions(servers=(url, "http://127.0.0.1:9/v1")).tokenizer_note() is None) is local


def test_a_trace_from_before_servers_resumes_on_its_servers(server):
    """A trace written before `servers` keeps `base_url` (and `base_urls` for a pool)."""
    from rich.console import Console

    from memagent_cli.cli.run_flags import RunFlags, engine_options

    root = server.url.removesuffix("/v1")
    for stored in ({"kind": "openai", "base_url": root}, {"kind": "openai", "base_url": root, "base_urls": [root, server.url]}):
        options = engine_options(RunFlags(), Console(stderr=True), resumed=stored)
        assert options.servers == (server.url,)


@pytest.mark.parametrize("model", [[], ["-m", str(CODEWORD_MODEL)]], ids=["no model", "a model"])
def test_a_missing_file_is_said_before_the_model(model, tmp_path):
    """The first run of a new user: the file named is checked before the model, so nobody fetches
    gigabytes for a typo."""
    done = run_memagent("ask", tmp_path / "report.pdf", "Who signed it?", *model, input="")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and "report.pdf: no such file or folder" in done.stderr
    assert "not installed" not in done.stderr


def test_the_missing_model_message_says_what_getting_it_costs(files):
    """Piped or offline, the same one line: the download, disk and time from the catalog's numbers,
    the pull command, and --model for a GGUF at hand."""
    for offline in ([], ["--offline"]):
        done = run_memagent("ask", files["doc"], "Who?", *offline, input="")
        assert done.returncode == 2
        line = done.stderr.strip()
        assert "\n" not in line and line.startswith("error: The model memagent-7b:q4_k_m is not installed.")
        assert "memagent models pull memagent-7b:q4_k_m (downloads 14.2 GiB" in line
        assert "of free disk at its peak" in line and "takes about" in line
        assert line.endswith("Or use a GGUF file you have: --model FILE.gguf")


def test_inspect_finds_its_model_as_a_run_does(files, tmp_path, memagent_home):
    """`inspect` without -m counts in MEMAGENT_MODEL's vocabulary, else the configured default's; a
    catalog model not installed gets the same one line as a run (no download offered to count tokens),
    and a missing file is said before it."""

    def counted(done) -> tuple[str, int]:
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        return report["model"]["path"], report["document_tokens"]

    given = counted(run_memagent("inspect", files["doc"], "-m", CODEWORD_MODEL, "--json"))
    assert given[0] == str(CODEWORD_MODEL) and given[1] > 0
    by_env = run_memagent("inspect", files["doc"], "--json", env={"MEMAGENT_MODEL": str(CODEWORD_MODEL)})
    assert counted(by_env) == given
    assert run_memagent("config", "set", "default_model", CODEWORD_MODEL).returncode == 0
    assert counted(run_memagent("inspect", files["doc"], "--json")) == given
    assert run_memagent("config", "set", "default_model", MISSING).returncode == 0
    missing = run_memagent("inspect", files["doc"], input="")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("error: The model memagent-7b:q4_k_m is not installed.")
    assert "memagent models pull memagent-7b:q4_k_m (downloads" in missing.stderr and "Traceback" not in missing.stderr
    typo = run_memagent("inspect", tmp_path / "report.pdf", input="")
    assert typo.returncode == 1 and "report.pdf: no such file or folder" in typo.stderr
    assert "not installed" not in typo.stderr
