"""B15: what InfMem's search index costs before its first step, at 1M and 10M tokens: reading and
chunking (what every protocol does) against the units and BM25 index on top, one search, and RSS
after each; each size in a process of its own, on Zipf-distributed words.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from benchmarks.harness.engines import tokenizer as load
from benchmarks.harness.fixtures import VOCAB
from benchmarks.harness.registry import Row
from benchmarks.harness.results import cores, today
from benchmarks.harness.runner import proc_kb, run

TITLE = "InfMem's search index"
QUICK = ["--sizes", "200000"]


def words(rng: random.Random, n: int) -> list[str]:
    vocabulary = [f"{rng.choice('bcdfghjklmnprstvw')}{rng.choice('aeiou')}{k}" for k in range(20000)]
    weights = [1 / (k + 1) for k in range(len(vocabulary))]
    return rng.choices(vocabulary, weights, k=n)


def child(tokens: int) -> dict:
    from memagent_cli.core import infmem
    from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
    from memagent_cli.core.infmem_loop import RetrievalUnits
    from memagent_cli.ingest.base import Place
    from memagent_cli.ingest.sources import Segment, Source

    tokenizer = load(VOCAB)
    rng = random.Random(1)
    # ~1.9 tokens a word with these words: written in 100K-word pages until the size is reached
    pages: list[str] = []
    while sum(len(p) for p in pages) < tokens * 3.3:
        pages.append(" ".join(words(rng, 100_000)) + "\n")
    source = Source(path="bench.txt", title="bench.txt", kind="text", size=None)

    def read(_: Source):
        offset = 0
        for text in pages:
            yield Segment(source=0, text=text, offset=offset, place=Place())
            offset += len(text)

    started = time.perf_counter()
    stats = IngestStats()
    chunks = []
    for chunk in iter_chunks(layout([source], read), tokenizer, 5000, [source], stats):
        chunks.append(chunk)
        if stats.document_tokens >= tokens and len(chunks) * 5000 >= tokens:
            break
    read_s = time.perf_counter() - started
    rss_read = proc_kb()["VmRSS"] / 1024
    started = time.perf_counter()
    units = RetrievalUnits(chunks, tokenizer)
    search = infmem.Search(units.texts)
    index_s = time.perf_counter() - started
    rss_index = proc_kb()["VmRSS"] / 1024
    queries = [" ".join(words(rng, rng.randint(3, 6))) for _ in range(20)]
    times = []
    for query in queries:
        started = time.perf_counter()
        search.top(query)
        times.append(time.perf_counter() - started)
    return {
        "tokens": sum(c.tokens for c in chunks),
        "units": len(units.texts),
        "read_s": round(read_s, 2),
        "index_s": round(index_s, 2),
        "index_over_read": round(index_s / read_s, 2),
        "query_ms": round(statistics.median(times) * 1000, 1),
        "rss_read_mb": round(rss_read),
        "rss_index_mb": round(rss_index),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000], help="input sizes in tokens")


def measure(args: argparse.Namespace) -> dict:
    rows = [json.loads(run([sys.executable, "-m", "benchmarks.infmem_index", str(size)]).stdout) for size in args.sizes]
    return {"when": today(), "conditions": f"this {cores()}-core CPU, each size in a process of its own", "rows": rows}


def rows(m: dict, results: object) -> list[Row]:
    big = max(m["rows"], key=lambda r: r["tokens"])
    return [
        Row(
            f"InfMem's index before its first step / reading the input, {big['tokens'] / 1e6:g}M tokens",
            f"{big['index_over_read']}×",
        ),
        Row(f"one search over {big['units']:,} units (ms)", f"{big['query_ms']}"),
    ]


def section(m: dict, results: object) -> str:
    table = "\n".join(
        f"| {r['tokens'] / 1e6:g}M tokens | {r['units']:,} | {r['read_s']} s | {r['index_s']} s | {r['index_over_read']}× |"
        f" {r['query_ms']} ms | {r['rss_read_mb']} → {r['rss_index_mb']} MB |"
        for r in m["rows"]
    )
    big = max(m["rows"], key=lambda r: r["tokens"])
    grown = big["rss_index_mb"] - big["rss_read_mb"]
    return f"""`python -m benchmarks run B15` ({m["when"]}, {m["conditions"]}): InfMem reads, tokenizes and indexes the whole input before its first step
(the reference does the same). Zipf-distributed words over a 20,000-word vocabulary, Qwen2.5's
tokenizer; reading is what every protocol does, indexing what InfMem adds (the chunks' ids cut into
500-token units, each decoded, rank_bm25's BM25Okapi over them); RSS with every chunk held, as an
InfMem run holds them.

| input | units | reading | indexing | index / reading | one search | RSS read → indexed |
|---|---|---|---|---|---|---|
{table}

Against the model calls these are nothing: one InfMem step is two calls that each think up to 1,024
tokens (minutes on this CPU at a 4B model's shapes), and a search costs milliseconds. What grows is
memory: BM25Okapi keeps a term-frequency dict per unit, about {grown * 1000 / big["units"]:.0f} KB each here ({grown} MB at {big["tokens"] / 1e6:g}M tokens,
on top of the ids, 4 bytes a token, and the chunks' text). A chunk's ids are kept as 4-byte array
entries for this reason (as Python ints, 10M tokens took ~9 times as much)."""


if __name__ == "__main__":  # one size's own process
    print(json.dumps(child(int(sys.argv[1]))))
