"""B16: what memagent's InfMem loop adds to the engine's own work, side by side in one process.

The same InfMem steps two ways, on the same model, prompts and budgets (a tiny model that never ends
its turn, so every call writes its whole budget: stage one's 1,024 thinking tokens, stage two's
`--memory-tokens`):

  bare      llama-cpp-python alone: for each step the planner's and the write's prompts (InfMem's
            strings, rendered as memagent renders them), each generated in two stages with
            Llama.generate (stage two's prompt the first's text re-tokenized after it, the cache's
            common prefix kept), the memory taken after "</think>"
  memagent  core.infmem_loop.run_infmem over LlamaEngine: the index, the planner's reading, the
            decisions, the events, the memory's token count

Interleaved, `--repeat` times each, the median kept. Target: memagent / bare <= 1.05.

    python benchmarks/infmem_overhead.py [--steps 2] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--memory-tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "infmem-overhead-results.json")
    args = parser.parse_args()

    import llama_cpp
    from helpers import words
    from tinymodel import LONG_TOKEN, build_vocab, write_tiny_qwen2

    from memagent_cli.core import infmem
    from memagent_cli.core.agent import LoopInput
    from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
    from memagent_cli.core.config import AgentConfig
    from memagent_cli.core.events import AnswerFinished
    from memagent_cli.core.infmem_loop import raw_chat, run_infmem
    from memagent_cli.ingest.base import Place
    from memagent_cli.ingest.sources import Segment, Source
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.runtime import quiet_llama_logs
    from memagent_cli.model.tokenizer import encode_template, load_tokenizer

    quiet_llama_logs()
    folder = Path(tempfile.mkdtemp())
    vocab = build_vocab()
    model = write_tiny_qwen2(folder / "long.gguf", constant=True, bias={vocab.token_id(LONG_TOKEN.encode()): 30.0})
    info = read_gguf(model)
    tokenizer = load_tokenizer(info)
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
    n_ctx = 16384
    # no drafts: the bare loop has none, and this model's one repeated token makes them nearly free
    engine = LlamaEngine(
        info,
        tokenizer,
        ChatFormat.from_gguf(info),
        n_ctx=n_ctx,
        options=EmbeddedOptions(gpu_layers=0, threads=1, speculate=False),
    )
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=n_ctx, n_threads=1, n_threads_batch=1, verbose=False)

    def generate(prompt_ids: list[int], budget: int) -> str:
        out = []
        for token in llm.generate(prompt_ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            if llm.token_eos() == token or len(out) >= budget:
                break
            out.append(token)
        return tokenizer.decode_bytes(out).decode("utf-8", errors="replace")

    def think(prompt, budget: int) -> str:
        first = generate(encode_template(tokenizer, prompt.pieces), infmem.THINKING_TOKENS)
        stage_one = infmem.closed_thinking(first)
        second = generate(encode_template(tokenizer, prompt.then(stage_one).pieces), budget)
        return infmem.reply_of(stage_one, second)

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

    times: dict[str, list[float]] = {"bare": [], "memagent": []}
    for _ in range(args.repeat):
        times["bare"].append(bare())
        times["memagent"].append(ours())
    row = {k: round(statistics.median(v), 3) for k, v in times.items()}
    row["ratio"] = round(row["memagent"] / row["bare"], 3)
    row.update(steps=args.steps, memory_tokens=memory_tokens, repeat=args.repeat)
    print(f"{args.steps} InfMem steps + answer: bare {row['bare']} s, memagent {row['memagent']} s, ratio {row['ratio']}")
    args.json.write_text(json.dumps({"benchmark": "B16 infmem overhead", **row}, indent=2) + "\n", encoding="utf-8")
    engine.close()


if __name__ == "__main__":
    main()
