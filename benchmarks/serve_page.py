"""B19: the page (`memagent serve`): time to the first byte and to a painted page in Chromium for a run
of 10, 1,000 and 10,000 steps; the delay from a step's record to its appearance on an open page; the
server's memory with 10,000 runs in the store. The runs are written into a real trace store with
the store's own API (memories of about 120 words, as a 7B model writes them); the server is a real
`memagent serve` process; the browser is Debian's chromium driven by Selenium (the test extra).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness.registry import Row, Target
from benchmarks.harness.runner import log, proc_kb

TITLE = "the page (`memagent serve`)"
QUICK = ["--sizes", "10,1000", "--rounds", "2", "--runs", "1000", "--live", "4"]
PAINT = Target("≤ 0.5")  # seconds to a painted run page, at 10,000 steps
LIVE = Target("≤ 1.0")  # seconds from a step's record to its appearance on an open page, at most
WORDS = "the river city banks flooded in spring while a quick brown fox ran over lazy dogs near old mills".split()


def memory(rng: random.Random, n: int = 120) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_run(store, steps: int, rng: random.Random, *, finish: bool = True) -> str:
    """A run of `steps` steps over one document, each memory a small edit of the one before."""
    run = store.create_run(
        question="What does the report say about the flood?",
        sources=[{"path": "report.txt", "title": "report.txt", "kind": "text", "size": steps * 20_000, "sha256": None}],
        model={"name": "bench", "path": "bench.gguf"},
        settings={"chunk_tokens": 5000, "memory_tokens": 1024, "protocol": "memagent"},
        turn=False,
    )
    store.update_run(run, steps_total=steps if finish else None)
    text = memory(rng)
    for index in range(1, steps + 1):
        words = text.split()
        words[rng.randrange(len(words))] = rng.choice(WORDS)
        text = " ".join(words)
        spans = [{"source": 0, "start": (index - 1) * 20_000, "end": index * 20_000}]
        store.add_step(
            run,
            {
                "index": index,
                "spans": spans,
                "tokens": 5000,
                "memory": text,
                "memory_tokens": 160,
                "prompt_tokens": 6500,
                "generated_tokens": 160,
                "seconds": 1.0,
            },
        )
    if finish:
        store.finish_run(run, "complete", answer="It rose in spring.")
    return run


def chrome(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1400", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def first_byte(url: str) -> float:
    import httpx2

    started = time.perf_counter()
    with httpx2.stream("GET", url, timeout=120) as response:
        next(response.iter_bytes())
        return time.perf_counter() - started


def painted(browser, url: str) -> float:
    """Seconds from the navigation's start to the first contentful paint."""
    browser.get(url)
    for _ in range(200):
        found = browser.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0]; return p ? p.startTime : null"
        )
        if found is not None:
            return float(found) / 1000
        time.sleep(0.05)
    raise RuntimeError("no paint")


def live_delays(browser, url: str, store, run: str, count: int, rng: random.Random) -> list[float]:
    """Seconds from each of `count` steps' record to its element on the open page."""
    browser.get(f"{url}/runs/{run}")
    browser.execute_script(
        "window.seen = {}; new MutationObserver(() => { for (const li of document.querySelectorAll('li.step'))"
        " if (!(li.id in window.seen)) window.seen[li.id] = Date.now(); })"
        ".observe(document.getElementById('steps'), {childList: true});"
    )
    time.sleep(1.0)  # the page's event stream opened
    delays = []
    last = store.steps(run)[-1]["index"]
    for index in range(last + 1, last + 1 + count):
        time.sleep(rng.uniform(0.2, 0.8))
        at = time.time()
        store.add_step(run, {"index": index, "spans": [], "tokens": 5000, "memory": memory(rng), "memory_tokens": 160})
        for _ in range(400):
            seen = browser.execute_script(f"return window.seen['step-{index}'] || null")
            if seen is not None:
                delays.append(round(max(0.0, seen / 1000 - at), 3))
                break
            time.sleep(0.02)
        else:
            delays.append(float("inf"))
    return delays


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="10,1000,10000", help="steps of the runs whose page is timed")
    parser.add_argument("--rounds", type=int, default=5, help="loads of each page (medians)")
    parser.add_argument("--runs", type=int, default=10_000, help="runs in the store whose server's memory is measured")
    parser.add_argument("--live", type=int, default=10, help="steps recorded on an open page")


def measure(args: argparse.Namespace) -> dict:
    from memagent_cli.traces.store import TraceStore
    from testkit.pages import serving

    rng = random.Random(0)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict = {"pages": {}, "machine_cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        home, docs = Path(tmp) / "home", Path(tmp) / "docs"
        home.mkdir()
        docs.mkdir()
        os.environ["MEMAGENT_HOME"] = str(home)
        with TraceStore(home / "traces.db") as store:
            runs = {}
            for size in sizes:
                log(f"B19: writing a run of {size:,} steps")
                runs[size] = write_run(store, size, rng)
            going = write_run(store, 3, rng, finish=False)  # running: this process is alive
            procs: list = []
            with serving(home, docs, procs=procs) as url, tempfile.TemporaryDirectory() as profile:
                browser = chrome(profile)
                try:
                    for size in sizes:
                        page = f"{url}/runs/{runs[size]}"
                        ttfb = [first_byte(page) for _ in range(args.rounds)]
                        paint = [painted(browser, page) for _ in range(args.rounds)]
                        results["pages"][str(size)] = {
                            "first_byte_s": round(statistics.median(ttfb), 4),
                            "painted_s": round(statistics.median(paint), 4),
                            "painted_max_s": round(max(paint), 4),
                        }
                        log(f"B19: {size:,} steps: {results['pages'][str(size)]}")
                    delays = live_delays(browser, url, store, going, args.live, rng)
                    results["live"] = {"delays_s": delays, "median_s": statistics.median(delays), "max_s": max(delays)}
                    log(f"B19: live {results['live']}")
                finally:
                    browser.quit()
            log(f"B19: writing {args.runs:,} runs")
            for _ in range(args.runs - len(sizes) - 1):
                write_run(store, 2, rng)
            procs.clear()
            with serving(home, docs, procs=procs) as url:
                idle = proc_kb(f"/proc/{procs[0].pid}/status")
                for path in ("/", "/?offset=5000", f"/runs/{runs[sizes[0]]}", "/conversations", "/?q=flood"):
                    first_byte(url + path)
                used = proc_kb(f"/proc/{procs[0].pid}/status")
                results["memory"] = {
                    "runs": args.runs,
                    "rss_started_mb": round(idle.get("VmRSS", 0) / 1024, 1),
                    "rss_after_pages_mb": round(used.get("VmRSS", 0) / 1024, 1),
                    "peak_mb": round(used.get("VmHWM", 0) / 1024, 1),
                    "list_first_byte_s": round(first_byte(url + "/"), 4),
                }
                log(f"B19: memory {results['memory']}")
    return results


def rows(m: dict, found: object) -> list[Row]:
    largest = max(m["pages"], key=int)
    page = m["pages"][largest]
    out = [
        PAINT.row(f"a run's page painted in Chromium, {int(largest):,} steps (s, median)", page["painted_s"]),
        LIVE.row("a step's record to its appearance on an open page (s, the slowest)", m["live"]["max_s"]),
    ]
    if "memory" in m:
        out.append(
            Row(f"the server's memory with {m['memory']['runs']:,} runs in the store", f"{m['memory']['rss_after_pages_mb']} MB")
        )
    return out


def section(m: dict, found: object) -> str:
    lines = [
        "`python -m benchmarks run B19`: a real `memagent serve` over a trace store written with the store's",
        "own API, Chromium (Debian's) driven by Selenium. First byte: the run page's request to its first",
        "byte (httpx); painted: navigation start to the first contentful paint (`performance`). A run's page",
        "draws its first 50 steps and loads the rest as they are scrolled to, so its cost does not grow",
        "with the run.",
        "",
        "| run | first byte (median) | painted (median / slowest) |",
        "|---|---|---|",
    ]
    for size, page in sorted(m["pages"].items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {int(size):,} steps | {page['first_byte_s']} s | {page['painted_s']} s / {page['painted_max_s']} s |")
    live = m["live"]
    lines += [
        "",
        f"Live: {len(live['delays_s'])} steps recorded into a running run while its page was open, each",
        f"0.2–0.8 s after the last: from the record to the step's element on the page, median {live['median_s']} s,",
        f"slowest {live['max_s']} s (the page looks at the store every 0.25 s).",
    ]
    if "memory" in m:
        mem = m["memory"]
        lines += [
            "",
            f"Memory: with {mem['runs']:,} runs in the store, the server holds {mem['rss_started_mb']} MB when",
            f"started and {mem['rss_after_pages_mb']} MB after the list (first and a later page, filtered), a run",
            f"and the conversations (peak {mem['peak_mb']} MB); the list's first byte takes {mem['list_first_byte_s']} s.",
            "The model is not loaded: it loads on the first question asked on the page.",
        ]
    return "\n".join(lines)
