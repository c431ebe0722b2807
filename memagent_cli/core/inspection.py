"""`memagent inspect`: what a run would read and cost, from the vocabulary alone.

Counting uses the same chunking path as a real run, so the step count and the prompt
shown by --show-prompt are exactly what `ask` would produce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import EXIT_USAGE, MemagentError
from ..model.llama import EmbeddedOptions
from ..model.tokenizer import normalizer
from .agent import plan_context
from .chunking import IngestStats
from .config import AgentConfig
from .events import model_record
from .pipeline import Prepared, SourceOptions, chunk_stream, prepare
from .protocols import get as get_protocol
from .protocols import of_model

if TYPE_CHECKING:
    from ..model.chat import ChatFormat
    from ..model.gguf import GGUFInfo

# Reference speeds of llama.cpp (shared/reference/engine-notes.md) that estimates scale from:
# (model bytes, prompt tok/s, generation tok/s). Generation is memory-bound, so it scales
# with model size; CPU prompt speed also scales with threads.
CPU_ANCHOR = (1.9e9, 14.0, 7.7)  # 3B Q4_K_M on 2 CPU threads
GPU_ANCHOR = (4.7e9, 6400.0, 140.0)  # 7B Q4_K_M on an H100
DEFAULT_MODEL_BYTES = 4.68e9  # the default model, 7B at Q4_K_M, when only a vocabulary is given
DEFAULT_KV_BYTES_PER_TOKEN = 57_344  # the default 7B's K and V at f16: 28 layers x 4 heads x 128 x 2 x 2 bytes


@dataclass
class Report:
    prep: Prepared
    stats: IngestStats
    chunk_tokens: int
    memory_tokens: int
    question: str | None
    protocol: str = "memagent"
    kept_chunk: str | None = None  # text of the chunk --show-prompt asked for
    kept_index: int | None = None
    estimate: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def info(self) -> GGUFInfo:
        # inspect_sources prepares for the embedded engine, which always reads the GGUF.
        assert self.prep.info is not None
        return self.prep.info

    @property
    def chat(self) -> ChatFormat:
        assert self.prep.chat is not None  # read from the GGUF with `info`
        return self.prep.chat

    @property
    def steps(self) -> int:
        return math.ceil(self.stats.document_tokens / self.chunk_tokens)

    def to_dict(self) -> dict[str, Any]:
        info = self.info
        return {
            "model": model_record(info.name, str(info.path)),
            "has_weights": info.has_weights,
            "tokenizer": self.prep.tokenizer.name,
            "sources": self.stats.source_records(self.prep.sources),
            "document_tokens": self.stats.document_tokens,
            "protocol": self.protocol,
            "chunk_tokens": self.chunk_tokens,
            "memory_tokens": self.memory_tokens,
            "steps_total": self.steps,
            "calls": self.steps + 1,
            "context": self.context,
            "estimate": self.estimate,
        }


def inspect_sources(
    paths: Sequence[str],
    *,
    model: str | None,
    question: str | None,
    chunk_tokens: int | None,
    memory_tokens: int | None,
    sources: SourceOptions,
    warn: Callable[[str], None],
    keep_chunk: int | None = None,
    chat_template: str | None = None,
    sequences: int = 1,
    protocol: str | None = None,
) -> Report:
    """`chat_template`: the user's template text (chat.read_template), over the GGUF's own;
    `sequences`: questions batched in one context, which the context is sized for; `protocol`:
    None for the model's; budgets left None are the protocol's."""
    prep = prepare(model, paths, sources, EmbeddedOptions(chat_template=chat_template))
    chosen = get_protocol(protocol or of_model(prep.model_path))
    chunk_tokens = chunk_tokens or chosen.chunk_tokens
    memory_tokens = memory_tokens or chosen.memory_tokens
    for note in prep.notices:
        warn(note)
    default = prep.chat.default_note(prep.info) if prep.chat is not None and prep.info is not None else None
    if default is not None and default[0] == "warning":
        warn(default[1])
    chunks, stats = chunk_stream(prep, chunk_tokens, sources, warn)
    normalize = normalizer(prep.tokenizer)  # the question reaches the prompt as the tokenizer normalizes it
    asked = question.strip() if question else None
    if asked is not None and normalize is not None:
        asked = normalize(asked)
    report = Report(prep, stats, chunk_tokens, memory_tokens, asked, chosen.name)
    for chunk in chunks:
        if chunk.index == keep_chunk:
            report.kept_chunk, report.kept_index = chunk.text, chunk.index
    report.estimate = estimate(report)
    report.context = context_plan(report, sequences)
    return report


def context_plan(report: Report, sequences: int) -> dict[str, Any]:
    """The llama.cpp context `ask` would make: each question's sequence gets exactly the
    tokens its budgets need, and N questions batched get N times that in one context."""
    from ..model.memory import kv_cache_bytes, model_memory

    config = AgentConfig.with_protocol(report.protocol, chunk_tokens=report.chunk_tokens, memory_tokens=report.memory_tokens)
    per_sequence = plan_context(report.chat, report.prep.tokenizer, report.question or "", config)
    tokens = per_sequence * sequences
    mem = model_memory(report.info)
    # A vocabulary-only GGUF's hyper-parameters are placeholders (llama.cpp's vocab files say 32
    # layers of 32 heads for every model), so it gets the default model's cache, as the estimate does.
    known = report.info.has_weights and mem.kv_bytes_per_token > 0
    return {
        "tokens_per_sequence": per_sequence,
        "sequences": sequences,
        "tokens": tokens,
        "kv_cache_bytes": kv_cache_bytes(mem, tokens) if known else DEFAULT_KV_BYTES_PER_TOKEN * tokens,
        "kv_cache_assumes": None if known else "the default 7B model's cache (only a vocabulary was given)",
    }


def estimate(report: Report) -> dict[str, Any]:
    """An upper bound on run time: every memory update writes its full budget."""
    from ..model.memory import read_per_token
    from ..model.runtime import available_cores, gpu_offload_supported

    info = report.info
    model_bytes = info.file_size if info.has_weights else DEFAULT_MODEL_BYTES
    read, moe = read_per_token(info) if info.has_weights else (model_bytes, None)
    size = float(read)
    gpu = gpu_offload_supported()
    cores = available_cores()
    anchor_bytes, prompt_rate, gen_rate = GPU_ANCHOR if gpu else CPU_ANCHOR
    gen = gen_rate * anchor_bytes / size
    prompt = prompt_rate * anchor_bytes / size * (1 if gpu else cores / 2)
    fixed = 250 + (len(report.prep.tokenizer.encode(report.question)) if report.question else 30)
    per_step = (fixed + report.chunk_tokens + report.memory_tokens) / prompt + report.memory_tokens / gen
    final = (fixed + report.memory_tokens) / prompt + report.memory_tokens / gen
    seconds = report.steps * per_step + final if report.steps else 0.0
    return {
        "seconds": round(seconds, 1),
        "device": "GPU" if gpu else f"CPU ({cores} cores)",
        "prompt_tokens_per_second": round(prompt, 1),
        "generation_tokens_per_second": round(gen, 2),
        "model_bytes": int(model_bytes),
        "assumes": "each memory update writes its full budget; speeds scaled from llama.cpp reference figures"
        + ("" if info.has_weights else "; model size of the default 7B Q4_K_M (only a vocabulary was given)")
        + (f"; {moe}" if moe else ""),
    }


def step_prompt(report: Report, k: int) -> tuple[str, str | None]:
    """The exact text sent for memory step k, and a note for the user (or None)."""
    if report.steps == 0:
        raise MemagentError("There is no text to read in the input.", exit_code=EXIT_USAGE)
    if report.kept_chunk is None or report.kept_index != k:
        raise MemagentError(f"There is no step {k}: the input makes {report.steps} steps.", exit_code=EXIT_USAGE)
    note = None
    protocol = get_protocol(report.protocol)
    memory = protocol.initial_memory
    if k > 1:
        memory = "{memory}"
        note = f"The memory at step {k} is what the model writes at step {k - 1}; it is shown as {{memory}}."
    return report.chat.render(protocol.memory_prompt(report.question or "", memory, report.kept_chunk)), note
