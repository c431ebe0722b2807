"""The two sides of every "against the bare engine" ratio: memagent's engine as `ask` builds it
(memagent_engine, and run_loop driving a protocol's memory updates through it), and a model with
one context driven by llama_decode alone (Bare)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness.timing import interleave


def tokenizer(model: Path):
    """`model`'s tokenizer, as memagent loads it."""
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    return load_tokenizer(read_gguf(model))


def tokenizer_and_chat(model: Path):
    """`model`'s tokenizer and chat format, as memagent loads them."""
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    return load_tokenizer(info), ChatFormat.from_gguf(info)


def memagent_engine(model: Path, n_ctx: int, sequences: int = 1, **options):
    """memagent's LlamaEngine over `model` as `ask` builds it; `options` are EmbeddedOptions' (threads,
    speculate, batch, flash_attn, gpu_layers: 0, this CPU, unless given)."""
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    settings = EmbeddedOptions(**{"gpu_layers": 0, **options})
    return LlamaEngine(info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=n_ctx, sequences=sequences, options=settings)


def finished(stream):
    """The CompletionDone that ends a stream of memagent's engine (complete, complete_raw)."""
    from memagent_cli.model.engine import CompletionDone

    done = None
    for item in stream:
        if isinstance(item, CompletionDone):
            done = item
    assert done is not None, "the stream ended without its CompletionDone"
    return done


def llama_generate(llm, ids: list[int], budget: int) -> list[int]:
    """llama-cpp-python's own greedy generate loop (its prefix reuse kept): up to `budget` tokens
    after `ids`, to the end of turn."""
    out: list[int] = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        if llm.token_eos() == token:
            break
        out.append(token)
        if len(out) >= budget:  # now: asked for one more, the loop would first decode this one
            break
    return out


def bare_think(llm, tok, prompt, budget: int) -> tuple[str, str]:
    """An InfMem call's two stages by llama-cpp-python alone, as memagent's engine makes them: up to
    THINKING_TOKENS of thinking, then (re-tokenized after the forced close) up to `budget` more."""
    from memagent_cli.core import infmem
    from memagent_cli.model.tokenizer import encode_template

    def generate(p, tokens: int) -> str:
        return tok.decode_bytes(llama_generate(llm, encode_template(tok, p.pieces), tokens)).decode("utf-8", errors="replace")

    first = generate(prompt, infmem.THINKING_TOKENS)
    return first, generate(prompt.then(infmem.closed_thinking(first)), budget)


def run_loop(eng, question: str, chunks: list[str], memory_tokens: int, protocol: str = "memagent", told: str = "memory") -> dict:
    """A protocol's memory updates; per step its generation and whole seconds, and the texts. The
    drafts are told `told`: "memory" (the previous memory, as memagent's loop tells it, the
    engine drafting it first) or "reply" (the previous step's whole reply)."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.engine import Sampling

    chosen = get(protocol)
    memory, reply, rows = chosen.initial_memory, "", []
    for chunk in chunks:
        prompt = chosen.memory_prompt(question, memory, chunk)
        done = finished(eng.complete(prompt, memory_tokens, Sampling(temperature=0.0), memory if told == "memory" else reply))
        rows.append(done)
        reply, memory = done.text, chosen.next_memory(done.text)
    return {
        "generate_seconds": sum(d.generate_seconds for d in rows),
        "step_seconds": sum(d.prompt_seconds + d.generate_seconds for d in rows),
        "generated": sum(d.completion_tokens for d in rows),
        "drafted": sum(d.drafted_tokens for d in rows),
        "accepted": sum(d.accepted_tokens for d in rows),
        "texts": [d.text for d in rows],
        "memory": memory,
    }


def cold_runs(engines: dict, question: str, chunks: list[str], memory_tokens: int, repeat: int, **loop) -> dict:
    """run_loop through each of `engines` `repeat` times, cold (no prefix reuse from the run before),
    interleaved, the order rotated each round; `loop`: run_loop's protocol, and `told` (by engine)."""
    names = list(engines)
    told = loop.pop("told", {})
    runs: dict = {name: [] for name in names}
    for r in range(repeat):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            engines[name]._model().n_tokens = 0  # llama-cpp-python's bookkeeping: eval() then clears the cache
            runs[name].append(run_loop(engines[name], question, chunks, memory_tokens, told=told.get(name, "memory"), **loop))
    return runs


class Bare:
    """A model and one context, driven by llama_decode alone. `loaded`: a model another context has
    loaded already (memagent's), shared instead of loading `model`, and not freed by close()."""

    def __init__(
        self,
        model: Path | None,
        n_ctx: int,
        n_seq: int,
        flash_attn: bool,
        gpu_layers: int = -1,
        threads: int | None = None,
        n_batch: int = 2048,
        threads_batch: int | None = None,
        loaded=None,
    ):
        import llama_cpp

        from memagent_cli.model.runtime import quiet_llama_logs

        self.owns_model = loaded is None
        if loaded is None:
            quiet_llama_logs()
            llama_cpp.llama_backend_init()
            mparams = llama_cpp.llama_model_default_params()
            mparams.n_gpu_layers = gpu_layers
            loaded = llama_cpp.llama_model_load_from_file(os.fsencode(str(model)), mparams)
            assert loaded, f"could not load {model}"
        self.model = loaded
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx * n_seq
        self.n_batch = n_batch
        cparams.n_batch = n_batch
        cparams.n_ubatch = min(512, n_batch)
        cparams.n_seq_max = n_seq
        cparams.kv_unified = False
        # llama.cpp runs a one-token decode on n_threads and any wider one on n_threads_batch, so
        # a CPU comparison of one sequence against several must give both the same count.
        cparams.n_threads = threads or max(1, (os.cpu_count() or 2) // 2)
        cparams.n_threads_batch = threads_batch or threads or os.cpu_count() or 1
        cparams.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cparams.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        assert self.ctx, "could not make the context"
        self.batch = llama_cpp.llama_batch_init(max(2048, n_batch), 0, 1)
        self.greedy = llama_cpp.llama_sampler_init_greedy()
        self.mem = llama_cpp.llama_get_memory(self.ctx)

    def decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """items: (token, position, sequence, wants logits): memagent's own batch filling, which
        is a plain llama_decode (it raises where llama.cpp fails)."""
        from memagent_cli.model.batched import decode

        decode(self.ctx, self.batch, items)

    def prompt(self, ids: list[int], seq: int = 0) -> None:
        for start in range(0, len(ids), self.n_batch):
            part = ids[start : start + self.n_batch]
            last = start + len(part) == len(ids)
            self.decode([(t, start + i, seq, last and i == len(part) - 1) for i, t in enumerate(part)])

    def sample(self, index: int) -> int:
        import llama_cpp

        return int(llama_cpp.llama_sampler_sample(self.greedy, self.ctx, index))

    def generate(self, pos: int, count: int) -> list[int]:
        """`count` greedy tokens of sequence 0, each sampled from the last decode's logits and
        decoded at `pos` on (the last one sampled only): its end of turn does not stop it."""
        ids = [self.sample(-1)]
        for _ in range(count - 1):
            self.decode([(ids[-1], pos + len(ids) - 1, 0, True)])
            ids.append(self.sample(-1))
        return ids

    def sync(self) -> None:
        import llama_cpp

        llama_cpp.llama_synchronize(self.ctx)

    def timed_decode(self, n: int, tokens: list[int], every: bool = True) -> float:
        """Seconds of one llama_decode of `tokens` after the first `n` of sequence 0 (the cache cut
        back to those first), logits for each of them (a check of drafts) or, not `every`, the last."""
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self.mem, 0, n, -1)
        t0 = time.perf_counter()
        self.decode([(t, n + i, 0, every or i == len(tokens) - 1) for i, t in enumerate(tokens)])
        self.sync()
        return time.perf_counter() - t0

    def clear(self) -> None:
        import llama_cpp

        llama_cpp.llama_memory_clear(self.mem, True)

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_free(self.greedy)
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        if self.owns_model:
            llama_cpp.llama_model_free(self.model)


def engine_vs_bare(model: Path, messages: list[str], gen: int, counts: list[int], repeat: int, gpu_layers: int = 0) -> dict:
    """memagent's engine against a bare llama_decode loop at the same shape. For each N in
    `counts`, N sequences (the first N `messages`, each a user message) generate `gen` tokens
    each after their prompt: greedy, no drafts (the bare loop drafts nothing), one token per
    sequence per llama_decode, on every core, flash attention on where layers run on a GPU (as
    memagent picks it); `repeat` rounds, 3 at least.

    memagent is `LlamaEngine` as `ask` builds it: its own loop for one sequence; for several,
    model/batched.py's driver with one caller thread per sequence, as `ask -q` runs questions.
    The bare side is `Bare` with the same context: cells per sequence, n_batch, a KV cache per
    sequence, flash attention, threads. Both read every prompt once, untimed; each timed run then
    keeps all of a prompt but its last token in the cache (memagent by its own prefix reuse),
    decodes that token for every sequence and generates. Interleaved, the order swapped each
    round; medians. A sequence ends at an end of turn on both sides, so each side's tokens per
    second are its own count over its own time."""
    import llama_cpp

    from memagent_cli.model.runtime import available_cores

    threads = available_cores()
    flash_attn = gpu_layers != 0
    repeat = max(3, repeat)
    tok, chat = tokenizer_and_chat(model)
    messages = messages[: max(counts)]
    prompts = [chat.encode(tok, m) for m in messages]
    n_ctx = max(len(p) for p in prompts) + gen + 16
    out: dict = {
        "context_tokens": round(statistics.mean(len(p) for p in prompts)),
        "generated_per_sequence": gen,
        "threads": threads,
        "gpu_layers": gpu_layers,
        "flash_attn": flash_attn,
        "repeat": repeat,
    }
    for n in counts:
        options = {"gpu_layers": gpu_layers, "threads": threads, "flash_attn": flash_attn}
        engine = memagent_engine(model, n_ctx, n, **options, speculate=False, batch=n > 1)
        assert engine.sequences == n, engine.description
        # memagent's own n_batch: llama-cpp-python's context for one sequence, batched.py's for several
        n_batch = min(2048, n_ctx) if n == 1 else 512
        bare = Bare(model, n_ctx, n, flash_attn, gpu_layers=gpu_layers, threads=threads, n_batch=n_batch)
        vocab = llama_cpp.llama_model_get_vocab(bare.model)
        for s in range(n):
            bare.prompt(prompts[s][:-1], s)
        _memagent_generate(engine, messages[:n], gen)  # reads the prompts into its cache
        sides = {
            "bare": lambda: _bare_generate(bare, prompts[:n], gen, vocab),
            "memagent": lambda: _memagent_generate(engine, messages[:n], gen),
        }
        runs = interleave(sides, repeat)
        engine.close()
        bare.close()
        tok_s = {side: statistics.median(made / seconds for seconds, made in v) for side, v in runs.items()}
        out[str(n)] = {
            "memagent_tok_s": round(tok_s["memagent"], 2),
            "bare_tok_s": round(tok_s["bare"], 2),
            "tok_s_ratio": round(tok_s["memagent"] / tok_s["bare"], 3),  # memagent / bare: at least 0.95 (B8)
            "time_ratio": round(tok_s["bare"] / tok_s["memagent"], 3),  # memagent / bare: at most 1.05 (B4)
            "memagent_generated": runs["memagent"][0][1],
            "bare_generated": runs["bare"][0][1],
            "memagent_seconds": [round(s, 3) for s, _ in runs["memagent"]],
            "bare_seconds": [round(s, 3) for s, _ in runs["bare"]],
        }
        print("engine", n, out[str(n)], file=sys.stderr, flush=True)
    return out


def _memagent_generate(engine, messages: list[str], gen: int) -> tuple[float, int]:
    """Seconds and tokens for `messages` through memagent's engine, one caller thread each when
    there are several (they start together)."""
    import threading

    from memagent_cli.model.engine import Sampling

    done: list = [None] * len(messages)
    failed: list[BaseException] = []

    def one(i: int) -> None:
        try:
            done[i] = finished(engine.complete(messages[i], gen, Sampling(temperature=0.0)))
        except BaseException as exc:  # re-raised in the caller
            failed.append(exc)

    if len(messages) == 1:
        t0 = time.perf_counter()
        one(0)
    else:
        start = threading.Barrier(len(messages) + 1)

        def worker(i: int) -> None:
            start.wait()
            one(i)

        workers = [threading.Thread(target=worker, args=(i,)) for i in range(len(messages))]
        for w in workers:
            w.start()
        start.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
    seconds = time.perf_counter() - t0
    if failed:
        raise failed[0]
    return seconds, sum(d.completion_tokens for d in done)


def _bare_generate(bare: Bare, prompts: list[list[int]], gen: int, vocab) -> tuple[float, int]:
    """Seconds and tokens for the same through the bare loop: every prompt's last token in one
    llama_decode, then one token for each live sequence per llama_decode."""
    import llama_cpp

    for s, p in enumerate(prompts):
        llama_cpp.llama_memory_seq_rm(bare.mem, s, len(p) - 1, -1)
    t0 = time.perf_counter()
    bare.decode([(p[-1], len(p) - 1, s, True) for s, p in enumerate(prompts)])
    last = [bare.sample(i) for i in range(len(prompts))]
    pos = [len(p) for p in prompts]
    live = [s for s in range(len(prompts)) if not llama_cpp.llama_vocab_is_eog(vocab, last[s])]
    made = len(live)
    count = dict.fromkeys(live, 1)
    while True:
        live = [s for s in live if count[s] < gen]
        if not live:
            break
        bare.decode([(last[s], pos[s], s, True) for s in live])
        for i, s in enumerate(list(live)):
            pos[s] += 1
            last[s] = bare.sample(i)
            if llama_cpp.llama_vocab_is_eog(vocab, last[s]):
                live.remove(s)
            else:
                count[s] += 1
                made += 1
    bare.sync()
    return time.perf_counter() - t0, made
