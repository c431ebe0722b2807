"""`memagent serve` over HTTP (a real server process on 127.0.0.1, a real trace store, the trained
code-word model): each route's pages, and each route's bad input refused with a page that says why
and its status, never a traceback: unknown ids, paths outside the roots, `..`, links out, a foreign
Host or Origin, a missing or wrong token or page secret. The browser tests are test_serve_browser.py."""

from __future__ import annotations

import os
import re

import httpx2
import pytest
from helpers import run_memagent

from testkit.pages import answered_pdf, free_port, serving


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A store with one run over docs/report.pdf, and `memagent serve docs/` over it."""
    base = tmp_path_factory.mktemp("serve")
    home, docs, outside = base / "home", base / "docs", base / "outside"
    for folder in (home, docs, outside):
        folder.mkdir()
    record = answered_pdf(docs, home)
    (outside / "secret.txt").write_text("The code word is never read.", encoding="utf-8")
    os.symlink(outside, docs / "link-out")
    os.symlink(outside / "secret.txt", docs / "secret-link.txt")
    with serving(home, docs) as url:
        yield {"url": url, "home": home, "docs": docs, "outside": outside, "record": record}


def get(served, path, **kw):
    return httpx2.get(served["url"] + path, follow_redirects=False, timeout=60, **kw)


def secret_of(served) -> str:
    found = re.search(r'name="secret" value="([^"]+)"', get(served, "/ask").text)
    assert found is not None
    return found.group(1)


def said(response) -> str:
    """What a page says in words, its markup dropped."""
    assert "Traceback" not in response.text
    return " ".join(re.sub(r"<[^>]+>", " ", response.text).split())


def test_the_list_the_run_its_quote_and_its_page_are_served(served):
    run = served["record"]["trace"]
    listed = get(served, "/")
    assert listed.status_code == 200 and f"/runs/{run}" in listed.text
    assert "default-src 'none'" in listed.headers["content-security-policy"]
    page = get(served, f"/runs/{run}")
    assert page.status_code == 200
    assert f'<div class="answer">{served["record"]["answer"]}</div>' in page.text
    assert 'id="step-1"' in page.text and f"/runs/{run}/quotes/1" in page.text
    quote = get(served, f"/runs/{run}/quotes/1")
    assert quote.status_code == 200 and '<rect class="mark"' in quote.text
    image = get(served, f"/runs/{run}/sources/0/pages/2.png")
    assert image.status_code == 200 and image.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert get(served, f"/runs/{run[:6]}").headers["location"] == f"/runs/{run}"  # a prefix: the whole id
    filtered = get(served, "/", params={"q": "no such question anywhere"})
    assert f"/runs/{run}" not in filtered.text and "No runs match" in said(filtered)
    steps = get(served, f"/runs/{run}/steps", params={"start": 3, "count": 2, "fragment": 1})
    assert re.findall(r'id="step-(\d+)"', steps.text) == ["3", "4"]


@pytest.mark.parametrize(
    "path",
    ["/runs/ffffffffffff", "/runs/ffffffffffff/quotes/1", "/conversations/ffffffffffff", "/readings/99", "/nowhere"],
)
def test_an_unknown_id_is_a_404_page(served, path):
    response = get(served, path)
    assert response.status_code == 404 and "Not found" in said(response)


def test_a_quote_that_is_not_there_is_a_404(served):
    run = served["record"]["trace"]
    assert get(served, f"/runs/{run}/quotes/9").status_code == 404


@pytest.mark.parametrize(
    "page, says",
    [
        ("sources/5/pages/1.png", "Run {run8} has no source 6."),  # the run has one source
        ("sources/0/pages/99.png", "report.pdf has no page 99."),
    ],
)
def test_a_source_or_page_that_is_not_there_is_a_404_that_says_which(served, page, says):
    run = served["record"]["trace"]
    response = get(served, f"/runs/{run}/{page}")
    assert response.status_code == 404 and says.format(run8=run[:8]) in said(response), said(response)


@pytest.mark.parametrize("folder", ["..", "../outside", "link-out"])
def test_folders_outside_the_roots_are_never_listed(served, folder):
    response = get(served, "/ask", params={"dir": folder})
    assert response.status_code == 403 and "outside the folders this page serves" in said(response)


def test_an_absolute_folder_is_taken_under_the_root(served):
    response = get(served, "/ask", params={"dir": "/etc"})  # docs/etc: there is none
    assert response.status_code == 404 and "No such folder under the roots" in said(response)


def test_a_link_that_leads_out_is_not_offered(served):
    listed = get(served, "/ask").text
    assert "report.pdf" in listed and "secret-link.txt" not in listed and "link-out" not in listed


@pytest.mark.parametrize("path", ["{outside}/secret.txt", "{docs}/secret-link.txt", "{docs}/../outside/secret.txt"])
def test_asking_about_a_file_outside_the_roots_is_refused_before_it_is_read(served, path):
    named = path.format(**{k: str(v) for k, v in served.items() if k in ("docs", "outside")})
    form = {"secret": secret_of(served), "path": named, "question": "What is the code word?"}
    started = httpx2.post(served["url"] + "/ask", data=form, timeout=60)
    assert started.status_code == 303
    reading = started.headers["location"]
    for _ in range(600):
        state = get(served, reading + "?json=1").json()
        if state["error"] or state["run"]:
            break
    assert state["run"] is None and "outside the allowed roots" in state["error"]
    assert get(served, reading).status_code == 200 and "outside the allowed roots" in said(get(served, reading))


@pytest.mark.parametrize("secret", [None, "wrong"])
def test_a_request_that_asks_for_something_needs_the_pages_secret(served, secret):
    run = served["record"]["trace"]
    form = {"path": str(served["docs"] / "report.pdf"), "question": "q", **({"secret": secret} if secret else {})}
    for path in ("/ask", f"/runs/{run}/stop", f"/runs/{run}/resume", f"/conversations/{run}/ask"):
        response = httpx2.post(served["url"] + path, data=form, timeout=60)
        assert response.status_code == 403 and "did not come from this page" in said(response), path


def test_a_foreign_host_or_origin_is_refused(served):
    assert get(served, "/", headers={"Host": "evil.example:80"}).status_code == 403
    assert get(served, "/", headers={"Host": "localhost"}).status_code == 200
    assert get(served, "/", headers={"Origin": "http://evil.example"}).status_code == 403
    form = {"secret": secret_of(served), "path": str(served["docs"] / "report.pdf"), "question": "q"}
    posted = httpx2.post(served["url"] + "/ask", data=form, headers={"Origin": "http://evil.example"}, timeout=60)
    assert posted.status_code == 403 and "Invalid Origin" in posted.text


def test_stopping_a_run_the_page_did_not_start_says_where_to_stop_it(served):
    run = served["record"]["trace"]
    response = httpx2.post(served["url"] + f"/runs/{run}/stop", data={"secret": secret_of(served)}, timeout=60)
    assert response.status_code == 409 and "not a reading this page started" in said(response)


def test_a_token_guards_every_request(tmp_path):
    home, docs = tmp_path / "home", tmp_path / "docs"
    home.mkdir()
    docs.mkdir()
    with serving(home, docs, extra=("--token", "s3cret")) as url:
        assert httpx2.get(url + "/", timeout=60).status_code == 401
        assert httpx2.get(url + "/?token=wrong", timeout=60).status_code == 401
        assert httpx2.get(url + "/", headers={"Authorization": "Bearer s3cret"}, timeout=60).status_code == 200
        given = httpx2.get(url + "/conversations?token=s3cret", timeout=60, follow_redirects=False)
        assert given.status_code == 303 and given.headers["location"] == "/conversations"
        cookie = given.headers["set-cookie"]
        assert "memagent_token=s3cret" in cookie and "HttpOnly" in cookie
        assert httpx2.get(url + "/", cookies={"memagent_token": "s3cret"}, timeout=60).status_code == 200


def test_another_address_without_a_token_is_refused_in_one_line(tmp_path):
    done = run_memagent("serve", tmp_path, "--host", "0.0.0.0", "--port", free_port(), env={"MEMAGENT_HOME": str(tmp_path)})
    assert done.returncode == 2 and "--host 0.0.0.0 is reachable from other machines, so it needs --token" in done.stderr
    assert done.stderr.count("\n") == 1


def test_a_root_that_is_not_a_folder_is_refused(tmp_path):
    done = run_memagent("serve", tmp_path / "nope", env={"MEMAGENT_HOME": str(tmp_path)})
    assert done.returncode == 2 and "nope: no such folder" in done.stderr and "Traceback" not in done.stderr


def test_a_steps_planner_decision_plan_and_earlier_run_are_shown_in_line(served):
    """InfMem's search before a step, the plan a QwenLong memory ends with, and a step taken from an
    earlier run, each on its step of the timeline."""
    from memagent_cli.traces.store import TraceStore

    with TraceStore(served["home"] / "traces.db") as store:
        source = [{"path": "a.txt", "title": "a.txt", "kind": "text", "size": 10, "sha256": None}]
        infmem = store.create_run(question="q", sources=source, model={"name": "m"}, settings={"protocol": "infmem"})
        found = {
            "query": "code word",
            "top_k": 1,
            "units": [{"unit": 0, "start_token": 0, "end_token": 20, "location": "a.txt chars 9–80"}],
        }
        decision = {"action": "search", "searches": [found], "stop_streak": 0, "reply": "<search>code word</search>"}
        store.add_step(infmem, {"index": 1, "memory": "kept", "decision": decision})
        qwenlong = store.create_run(question="q", sources=source, model={"name": "m"}, settings={"protocol": "qwenlong"})
        memory = "<memory>\nThe fox ran.\n</memory>\n<plan>\nLook for the dog next.\n</plan>"
        store.add_step(qwenlong, {"index": 1, "memory": memory, "copied_from": infmem})
    shown = get(served, f"/runs/{infmem}")
    assert "plan: search &#39;code word&#39; found a.txt chars 9–80" in shown.text
    page = get(served, f"/runs/{qwenlong}").text
    assert "plan: Look for the dog next." in page
    assert f'from run <a href="/runs/{infmem}#step-1">{infmem[:8]}</a>' in page


def test_a_long_list_links_its_newer_and_older_pages():
    """The runs list a page at a time: the links keep the list's filter and step by the page's size."""
    from memagent_cli.webapp.asgi import templates

    row = {"id": "abc", "started": "today", "status": "complete", "question": "q", "turn": 1}
    row |= {"answer": "a", "sources": "s", "model": "m", "steps": 2}
    page = templates().get_template("_runs.html")
    middle = page.render(rows=[row], offset=50, limit=50, more=True, query="q=x%26y", filtered=True)
    assert re.findall(r'href="([^"]+)" rel="(prev|next)"', middle) == [
        ("/?q=x%26y&amp;offset=0", "prev"),
        ("/?q=x%26y&amp;offset=100", "next"),
    ]
    first = page.render(rows=[row], offset=0, limit=50, more=False, query="", filtered=False)
    assert 'rel="prev"' not in first and 'rel="next"' not in first
