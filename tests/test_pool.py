"""ServedPool against real HTTP servers on 127.0.0.1 (tests/fakeserver.py): where requests go,
what happens when servers die and come back, what a chain's requests carry, and which errors end
a run at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from fakeserver import FakeServer, Refuse, default_reply

from memagent_cli.core.memagent import final_prompt, memory_prompt
from memagent_cli.errors import MemagentError
from memagent_cli.model.engine import CompletionDone, Retrying, Sampling, TextDelta
from memagent_cli.model.served.body import NEUTRAL_SAMPLING
from memagent_cli.model.served.http_engine import CHAIN_KEY_HEADERS, OpenAIEngine, wire_key
from memagent_cli.model.served.pool import ServedPool
from memagent_cli.model.served.transport import Connection

GREEDY = Sampling(temperature=0.0, seed=7)
MESSAGE = memory_prompt("Who wrote it?", "No previous memory", "The report was written by Ada.")


@pytest.fixture
def servers(request):
    """`count` FakeServers (default 3) with `latency` and `slots`, closed after the test."""
    made: list[FakeServer] = []

    def make(count: int = 3, latency: float = 0.0, slots: int = 8, **options) -> list[FakeServer]:
        new = [FakeServer(latency, slots, **options) for _ in range(count)]
        made.extend(new)
        return new

    yield make
    for server in made:
        server.close()


@pytest.fixture
def pools():
    made: list[ServedPool] = []

    def make(servers: list[FakeServer], **options) -> ServedPool:
        pool = ServedPool([s.url for s in servers], Connection(**{"backoff": 0.05, **options}))
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.close()


def ask(engine, message: str = MESSAGE) -> list:
    return list(engine.complete(message, 64, GREEDY))


def in_threads(count: int, job) -> list:
    """job(i) for i in range(count), all at once; their results in order (an error is raised here)."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(job, range(count)))


def test_requests_spread_over_the_servers_by_their_load(servers, pools):
    fleet = servers(3, latency=0.02, slots=8) + servers(1, latency=0.2, slots=8)
    pool = pools(fleet)
    assert pool.description == "served: fake-model on 4 servers"

    def chain(i: int) -> list:
        view = pool.for_chain(f"doc-{i}")
        return [ask(view)[-1] for _ in range(4)]

    replies = [done for dones in in_threads(32, chain) for done in dones]
    assert all(isinstance(d, CompletionDone) and d.text.startswith("Noted: ") for d in replies)
    counts = [s.stats.requests for s in fleet]
    assert sum(counts) == 128
    # The slow server holds its requests ten times longer, so it is given fewer (turns would give 32 each).
    assert counts[3] < min(counts[:3]) / 2, counts
    assert max(counts[:3]) - min(counts[:3]) <= 12, counts


def test_a_chain_stays_on_its_server_when_the_servers_are_equally_busy(servers, pools):
    fleet = servers(3)
    pool = pools(fleet)
    chains = [pool.for_chain(name) for name in ("a", "b")]
    for _ in range(3):
        for view in chains:
            ask(view)
    for name in ("a", "b"):
        holders = [s for s in fleet if s.stats.keys[wire_key(name)]]
        assert len(holders) == 1 and holders[0].stats.keys[wire_key(name)] == 3
    for _ in range(6):  # no chain: the servers take turns
        ask(pool)
    assert [s.stats.keys[""] for s in fleet] == [2, 2, 2]


def test_a_chain_key_reaches_the_server_and_leaves_the_body_alone(servers, pools):
    bodies: list[dict] = []

    def record(body: dict) -> str:
        bodies.append(body)
        return default_reply(body)

    fleet = servers(2, reply=record)
    pool = pools(fleet)
    engine = OpenAIEngine(fleet[0].url)
    try:
        ask(pool.for_chain("docs/report.pdf"))
        ask(pool.for_chain("docs/report.pdf"))
        ask(pool.for_chain("docs/other.pdf"))
        ask(engine.for_chain("docs/report.pdf"))
        ask(engine)
    finally:
        engine.close()
    keys = sum((s.stats.keys for s in fleet), Counter())
    first, second = wire_key("docs/report.pdf"), wire_key("docs/other.pdf")
    assert first != second and first.isascii() and "/" not in first
    assert keys == {first: 3, second: 1, "": 1}
    assert all(body == bodies[0] for body in bodies)  # the key changes no byte of what the model reads
    assert CHAIN_KEY_HEADERS[0] == "X-Session-ID"


def test_the_pool_sends_the_same_body_as_one_engine(servers, pools):
    bodies: list[dict] = []

    def record(body: dict) -> str:
        bodies.append(body)
        return "fine"

    (server,) = servers(1, reply=record)
    engine = OpenAIEngine(server.url)
    try:
        for sampling in (GREEDY, Sampling(temperature=0.7, top_p=0.9)):
            list(pools([server]).complete(MESSAGE, 64, sampling))
            list(engine.complete(MESSAGE, 64, sampling))
    finally:
        engine.close()
    assert bodies[0] == bodies[1] and bodies[2] == bodies[3] and bodies[0] != bodies[2]
    assert bodies[0]["seed"] == 7 and bodies[0]["temperature"] == 0.0 and bodies[0]["stream"] is True
    assert NEUTRAL_SAMPLING.items() <= bodies[0].items()


def test_a_server_killed_mid_run_loses_no_reply(servers, pools):
    fleet = servers(3, latency=0.2, slots=8)
    pool = pools(fleet, backoff=0.2)
    started = threading.Event()

    def chain(i: int) -> list:
        view = pool.for_chain(f"doc-{i}")
        items = []
        for step in range(3):
            items += ask(view, final_prompt(f"question {i}", "memory") if step == 2 else MESSAGE)
            started.set()
        return items

    with ThreadPoolExecutor(max_workers=24) as threads:
        runs = [threads.submit(chain, i) for i in range(24)]
        assert started.wait(30)
        victim = fleet[1]
        victim.kill()  # its replies of the second step are in flight
        results = [run.result() for run in runs]
    for items in results:
        kept: list = []
        for item in items:  # as the agent loop reads them: a Retrying voids the reply's text so far
            kept = [] if isinstance(item, Retrying) else kept + [item]
        assert isinstance(kept[-1], CompletionDone) and kept[-1].text == "The answer is \\boxed{42}."
    retries = [item for items in results for item in items if isinstance(item, Retrying)]
    assert retries and all(victim.url in r.reason for r in retries)
    assert {r.reason.rpartition("; ")[2] for r in retries} <= {"another server takes the reply", "every server is resting"}
    assert any(isinstance(i, TextDelta) for i in results[0])
    assert sum(s.stats.requests for s in fleet) >= 72 and victim.stats.requests < victim.stats.received
    # Its replies cut together count as one failure, not one each: it rests, it is not dropped.
    served = victim.stats.requests
    victim.start()
    deadline = time.monotonic() + 30  # a guard: it rests 1.6 s at most
    while victim.stats.requests == served and time.monotonic() < deadline:
        time.sleep(0.05)  # a request every 0.05 s while it rests, not as many as the pool can send
        ask(pool)
    assert victim.stats.requests == served + 1


def test_a_server_back_after_its_rest_takes_requests_again(servers, pools):
    fleet = servers(2)
    pool = pools(fleet, backoff=0.2)
    back = fleet[1]
    back.kill()
    items = ask(pool) + ask(pool)  # the second request is the dead server's turn
    assert [type(i).__name__ for i in items].count("Retrying") == 1
    assert back.stats.requests == 0
    back.start()
    deadline = time.monotonic() + 30  # a guard: the server rests 0.2 s
    while back.stats.requests == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # a request every 0.05 s while it rests, not as many as the pool can send
        assert isinstance(ask(pool)[-1], CompletionDone)
    assert back.stats.requests == 1


def test_every_server_dead_ends_in_one_line(servers, pools):
    fleet = servers(2)
    for server in fleet:
        server.kill()
    pool = pools(fleet, model="fake-model", retries=1, backoff=0.01)
    items = []
    with pytest.raises(MemagentError) as caught:
        for item in pool.complete(MESSAGE, 64, GREEDY):
            items.append(item)
    message = str(caught.value.message)
    assert message.startswith("All 2 servers failed; the last error: The server at http://127.0.0.1:")
    assert message.endswith("refused the connection") and "\n" not in message and caught.value.hint
    assert items and all(isinstance(i, Retrying) for i in items)
    with pytest.raises(MemagentError, match="^All 2 servers failed"):
        ask(pool)  # dropped for good: at once


def test_one_dead_server_fails_as_one_engine_does(servers, pools):
    (server,) = servers(1)
    server.kill()
    pool = pools([server], model="fake-model", retries=2, backoff=0.01)
    with pytest.raises(MemagentError) as caught:
        ask(pool)
    assert caught.value.message == f"The server at {server.url} refused the connection (3 attempts)"


def test_a_request_the_server_rejects_ends_at_once(servers, pools):
    def refuse(body: dict) -> str:
        raise Refuse(400, "max_tokens is too large")

    fleet = servers(2, reply=refuse)
    pool = pools(fleet)
    items = []
    with pytest.raises(MemagentError, match="answered HTTP 400: max_tokens is too large") as caught:
        for item in pool.complete(MESSAGE, 64, GREEDY):
            items.append(item)
    assert "\n" not in caught.value.message
    assert items == [] and sum(s.stats.received for s in fleet) == 1


def test_every_server_must_serve_the_model(servers, pools):
    first, other = servers(1) + servers(1, model="other-model")
    pool = pools([first, other])
    assert pool.model == "fake-model"
    with pytest.raises(MemagentError, match=f"The server at {other.url} serves other-model, not fake-model"):
        for _ in range(2):  # the second request is the other server's turn
            ask(pool)
    named = pools([other, first], model="fake-model")
    with pytest.raises(MemagentError, match="serves other-model, not fake-model"):
        ask(named)
    assert other.stats.received == 0


def test_the_same_server_twice_is_refused(servers):
    (server,) = servers(1)
    with pytest.raises(MemagentError, match="is given twice"):
        ServedPool([server.url, server.url.removesuffix("/v1")])


def test_connections_are_kept_and_cookies_are_not(servers):
    (server,) = servers(1, set_cookie=True)
    engine = OpenAIEngine(server.url)
    try:
        for _ in range(10):
            ask(engine)
    finally:
        engine.close()
    assert server.stats.requests == 10
    assert server.stats.connections == 1  # every reply read to its end after [DONE]: the connection is reused
    assert server.stats.cookies == 0  # a sticky cookie would pin every chain to one replica
