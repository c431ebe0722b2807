"""The two sides of every "against the bare engine" ratio: memagent's engine as `ask` builds it
(memagent_engine, and run_loop driving a protocol's memory updates through it), and a model with
one context driven by llama_decode alone (Bare)."""

from __future__ import annotations

import os
from pathlib import Path


def memagent_engine(model: Path, speculate: bool, n_ctx: int, gpu_layers: int = 0):
    """memagent's LlamaEngine over `model` as `ask` builds it, and its tokenizer."""
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok = load_tokenizer(info)
    return LlamaEngine(
        info, tok, ChatFormat.from_gguf(info), n_ctx=n_ctx, options=EmbeddedOptions(gpu_layers=gpu_layers, speculate=speculate)
    ), tok


def run_loop(eng, question: str, chunks: list[str], memory_tokens: int, protocol: str = "memagent", told: str = "memory") -> dict:
    """A protocol's memory updates; per step its generation and whole seconds, and the texts. The
    drafts are told `told`: "memory" (the previous memory, as memagent's loop tells it, the
    engine drafting it first) or "reply" (the previous step's whole reply)."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.engine import CompletionDone, Sampling

    chosen = get(protocol)
    memory, reply, rows = chosen.initial_memory, "", []
    for chunk in chunks:
        done = None
        prompt = chosen.memory_prompt(question, memory, chunk)
        for item in eng.complete(prompt, memory_tokens, Sampling(temperature=0.0), memory if told == "memory" else reply):
            if isinstance(item, CompletionDone):
                done = item
        assert done is not None
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


class Bare:
    """A model and one context, driven by llama_decode alone."""

    def __init__(
        self,
        model: Path,
        n_ctx: int,
        n_seq: int,
        flash_attn: bool,
        gpu_layers: int = -1,
        threads: int | None = None,
        n_batch: int = 2048,
    ):
        import llama_cpp

        from memagent_cli.model.runtime import quiet_llama_logs

        quiet_llama_logs()
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = gpu_layers
        self.model = llama_cpp.llama_model_load_from_file(os.fsencode(model), mparams)
        assert self.model, f"could not load {model}"
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
        cparams.n_threads_batch = threads or os.cpu_count() or 1
        cparams.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cparams.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        assert self.ctx, "could not make the context"
        self.batch = llama_cpp.llama_batch_init(2048, 0, 1)
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

    def sync(self) -> None:
        import llama_cpp

        llama_cpp.llama_synchronize(self.ctx)

    def clear(self) -> None:
        import llama_cpp

        llama_cpp.llama_memory_clear(self.mem, True)

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_free(self.greedy)
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)
