"""A reading for the page (`memagent serve`) to show, made with the trained code-word model: a PDF
whose middle page says the code word, read by a real `memagent ask` into a trace store; and a free
port and a running `memagent serve` over it. The tests, docs/make_serve_shot.py and the page's
benchmark share them."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from testkit.codeword import QUESTION, make_document
from testkit.processes import free_port, until_ready
from testkit.texts import CODEWORD_ASK, REPO

PAGES = 3
FACT_PAGE = 2


def write_pdf(path: Path, seed: int, pages: int = PAGES) -> str:
    """A PDF of `pages` pages of filler, the code word's sentence in the middle of page FACT_PAGE;
    the code word."""
    from fpdf import FPDF

    rng = random.Random(seed)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    value = ""
    for page in range(1, pages + 1):
        pdf.add_page()
        document = make_document(rng, 300, where=0.5, fact=page == FACT_PAGE)
        if page == FACT_PAGE:
            assert document.value is not None
            value = document.value
        pdf.multi_cell(0, 5, " ".join(document.text.split()))
    pdf.output(str(path))
    return value


def memagent(*args: str, home: Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    env.update(MEMAGENT_HOME=str(home), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "memagent_cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def answered_pdf(folder: Path, home: Path, name: str = "report.pdf") -> dict:
    """`folder/name`, a PDF whose reading by the code-word model answers right and quotes the code
    word's sentence (the first seed that does: a chunk boundary through the sentence hides it), read
    into the store at `home`; its `ask --json` record."""
    for seed in range(40):
        value = write_pdf(folder / name, seed)
        done = memagent(
            "ask", name, QUESTION, *map(str, CODEWORD_ASK), "--temperature", "0", "--json", "--fresh", home=home, cwd=folder
        )
        assert done.returncode == 0, done.stderr
        record = json.loads(done.stdout)
        if record["answer"] == value and record["quotes"]:
            return record
    raise AssertionError("no seed of 40 gave a right answer with a quote")


@contextlib.contextmanager
def serving(
    home: Path, *roots: Path, extra: tuple[str, ...] = (), port: int | None = None, procs: list | None = None
) -> Iterator[str]:
    """`memagent serve ROOTS` with the code-word model on a free port of 127.0.0.1 over the store at
    `home`, until the block ends; its base URL (and its process, appended to `procs`). The server's
    log is at home/serve.log."""
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if k != "MEMAGENT_MODEL"}
    env.update(MEMAGENT_HOME=str(home), NO_COLOR="1")
    argv = [sys.executable, "-m", "memagent_cli", "serve", *map(str, roots), "--port", str(port), *map(str, CODEWORD_ASK)]
    with open(home / "serve.log", "wb") as log:
        proc = subprocess.Popen([*argv, "--temperature", "0", *extra], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if procs is not None:
        procs.append(proc)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(url + "/static/page.css", timeout=5).close()
        except urllib.error.HTTPError:  # it answers (a token is wanted)
            pass
        return True

    with until_ready(proc, home / "serve.log", "memagent serve", answers, within=120):
        yield url
