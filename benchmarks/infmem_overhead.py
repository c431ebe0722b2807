"""B16: what memagent's InfMem loop adds to the engine's own work: two InfMem steps and the answer
at full budgets on a tiny model, by llama-cpp-python's generate loop and by memagent's loop over
its engine, in one process, interleaved (target 1.05x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness.engines import bare_think, memagent_engine
from benchmarks.harness.fixtures import shared_code
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.results import cores, today
from benchmarks.harness.timing import interleave

TITLE = "what the InfMem loop adds to the engine"
QUICK = ["--steps", "1", "--repeat", "1", "--memory-tokens", "64"]
RATIO = Target("≤ 1.05")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=2, help="InfMem steps before the answer")
    parser.add_argument("--memory-tokens", type=int, default=256, help="stage two's budget")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, interleaved")


def measure(args: argparse.Namespace) -> dict:

    import llama_cpp

    words = shared_code("texts").words
    tinymodel = shared_code("tinymodel")
    LONG_TOKEN, build_vocab, write_tiny_qwen2 = tinymodel.LONG_TOKEN, tinymodel.build_vocab, tinymodel.write_tiny_qwen2

    from memagent_cli.core import infmem
    from memagent_cli.core.agent import LoopInput
    from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
    from memagent_cli.core.config import AgentConfig
    from memagent_cli.core.events import AnswerFinished
    from memagent_cli.core.infmem_loop import raw_chat, run_infmem
    from memagent_cli.ingest.base import Place
    from memagent_cli.ingest.sources import Segment, Source
    from memagent_cli.model.runtime import quiet_llama_logs

    quiet_llama_logs()
    folder = Path(tempfile.mkdtemp())
    vocab = build_vocab()
    model = write_tiny_qwen2(folder / "long.gguf", constant=True, bias={vocab.token_id(LONG_TOKEN.encode()): 30.0})
    # no drafts: the bare loop has none, and this model's one repeated token makes them nearly free
    engine = memagent_engine(model, 16384, threads=1, speculate=False)
    tokenizer = engine.tokenizer
    chunk_tokens, memory_tokens = 1000, args.memory_tokens
    question = "Where is the answer?"
    source = Source(path="doc.txt", title="doc.txt", kind="text", size=None)
    text = words(args.steps * 900, seed=5)

    def chunks():
        def read(_):
            yield Segment(source=0, text=text, offset=0, place=Place())

        stats = IngestStats()
        return list(iter_chunks(layout([source], read), tokenizer, chunk_tokens, [source], stats)), stats

    config = AgentConfig.with_protocol("infmem", chunk_tokens=chunk_tokens, memory_tokens=memory_tokens, answer_tokens=8)
    # the engine's own thread counts: it reads prompts on every core where asked for one thread to generate
    llm = llama_cpp.Llama(
        model_path=str(model), n_ctx=engine.n_ctx, n_threads=engine.threads, n_threads_batch=engine.threads_batch, verbose=False
    )

    def think(prompt, budget: int) -> str:
        first, second = bare_think(llm, tokenizer, prompt, budget)
        return infmem.reply_of(infmem.closed_thinking(first), second)

    def bare() -> float:
        read, _ = chunks()
        started = time.perf_counter()
        memory = infmem.INITIAL_MEMORY
        for chunk in read:
            history = infmem.history_text(chunk.index, len(read), [])
            think(
                raw_chat(
                    infmem.TOOL_SYSTEM, infmem.PLANNER_PROMPT.format(prompt=question, retrieval_history=history, memory=memory)
                ),
                memory_tokens,
            )
            write = raw_chat(None, infmem.MEMORY_PROMPT.format(prompt=question, retrieve="", chunk=chunk.text, memory=memory))
            memory = infmem.solution(think(write, memory_tokens))
        think(raw_chat(None, infmem.FINAL_PROMPT.format(prompt=question, memory=memory)), 8)
        return time.perf_counter() - started

    def ours() -> float:
        read, stats = chunks()
        started = time.perf_counter()
        events = list(run_infmem(LoopInput(question, read, stats, engine, tokenizer, config)))
        assert isinstance(events[-1], AnswerFinished)
        return time.perf_counter() - started

    sides = interleave({"bare": bare, "memagent": ours}, args.repeat)  # each side times itself, set-up outside the clock
    row: dict = {k: round(statistics.median(v), 3) for k, v in sides.items()}
    row["ratio"] = round(row["memagent"] / row["bare"], 3)
    row.update(steps=args.steps, memory_tokens=memory_tokens, repeat=args.repeat)
    engine.close()
    threads = f"{engine.threads} thread{'s' if engine.threads > 1 else ''} to generate and {engine.threads_batch} to read prompts, both sides"
    return {"when": today(), "conditions": f"this {cores()}-core CPU, {threads}, load average {os.getloadavg()[0]:.1f}", **row}


def rows(m: dict, results: object) -> list[Row]:
    return [
        RATIO.row(
            f"memagent's InfMem loop / llama-cpp-python's generate loop, {m['steps']} steps and the answer (tiny model)",
            m["ratio"],
        )
    ]


def section(m: dict, results: object) -> str:
    return f"""`python -m benchmarks run B16` ({m["when"]}, {m["conditions"]}): two InfMem steps and
the answer, each call in its two stages at full budgets (a tiny model that never ends its turn:
stage one 1,024 tokens, stage two {m["memory_tokens"]}), done by llama-cpp-python's own `Llama.generate` on the same
rendered prompts (stage two re-tokenized after stage one, the cached prefix kept) and by memagent's
loop over its engine (the index, the planner's reading, the events), interleaved, median of {m["repeat"]}; drafts
off in memagent (the bare loop has none).

| bare llama-cpp-python | memagent | memagent / bare |
|---|---|---|
| {m["bare"]:.2f} s | {m["memagent"]:.2f} s | {m["ratio"]:.2f}× |

memagent's engine samples in llama.cpp's own sampler chain and copies no logits to Python; with the
index, the planner's reading and the events, its loop costs {m["ratio"]:.2f}× the plain library's generate loop it
replaces (target ≤ 1.05×). At real shapes: B17."""
