"""B15: what InfMem's search index costs before its first step, at 1M and 10M tokens.

InfMem searches the whole input from step 1, so a run reads, tokenizes and indexes everything first
(core/infmem_loop.py: the chunks' ids joined, cut into 500-token units, each decoded, and rank_bm25's
BM25Okapi built over them). Each size runs in a process of its own, which reports:

- `read_s`: reading and chunking the text, as every protocol does (the baseline);
- `index_s`: the units and the index on top of that, and `index_over_read` the ratio of the two,
  measured in the same process (this machine is shared: ratios, not absolute times, are the figure);
- `query_ms`: one search (the median of 20 queries of 3 to 6 words), as a planner's call asks it;
- `rss_read_mb`, `rss_index_mb`: the process's resident memory after reading (every chunk held, as
  an InfMem run holds them) and after indexing.

The text is Zipf-distributed words over a 20,000-word vocabulary, tokenized by Qwen2.5's vocabulary
(tests/data/shared/fixtures/ggml-vocab-qwen2.gguf), so units hold a few hundred distinct terms as
prose does.

    python benchmarks/infmem_index.py [--sizes 1000000 10000000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VOCAB = REPO / "tests" / "data" / "shared" / "fixtures" / "ggml-vocab-qwen2.gguf"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(read_gguf(VOCAB))
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
    rss_read = rss_mb()
    started = time.perf_counter()
    units = RetrievalUnits(chunks, tokenizer)
    search = infmem.Search(units.texts)
    index_s = time.perf_counter() - started
    rss_index = rss_mb()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "infmem-index-results.json")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    rows = []
    for size in args.sizes:
        done = subprocess.run([sys.executable, __file__, "--child", str(size)], capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        row = json.loads(done.stdout)
        rows.append(row)
        print(
            f"{row['tokens']:>11,} tokens, {row['units']:,} units: read {row['read_s']}s, index {row['index_s']}s "
            f"({row['index_over_read']}x the reading), a search {row['query_ms']} ms, "
            f"RSS {row['rss_read_mb']} MB read -> {row['rss_index_mb']} MB indexed"
        )
    args.json.write_text(json.dumps({"benchmark": "B15 infmem index", "rows": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
