"""`memagent inspect`: what a run would read and cost, from the vocabulary alone.

Counting uses the same chunking path as a real run, so the step count and the prompt
shown by --show-prompt are exactly what `ask` would produce.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from ..errors import EXIT_USAGE, MemagentError
from ..model.llama import EmbeddedOptions
from ..model.tokenizer import normalizer
from .agent import plan_context, with_history
from .chunking import IngestStats
from .config import AgentConfig
from .events import model_record
from .pipeline import Prepared, SourceOptions, chunk_stream, prepare
from .protocols import PROTOCOLS, of_model
from .protocols import get as get_protocol

if TYPE_CHECKING:
    from ..model.chat_template import ChatFormat
    from ..model.gguf import GGUFInfo


@dataclass(frozen=True)
class Speeds:
    """What a token costs a device, as rates in bytes a second: each token's pass reads the
    model's weights once, and its attention reads the K and V of every token before it. Prompt
    tokens go through in batches and generated ones one at a time, so each has its own two rates;
    `per_token` is what each generated token costs outside llama.cpp's arithmetic (sampling,
    detokenizing, memagent's loop). Measured with `threads` CPU threads (0 for a GPU)."""

    prompt_weights: float
    prompt_kv: float
    generation_weights: float
    generation_kv: float
    per_token: float
    threads: int = 0

    def prompt_seconds(self, tokens: int, weights: float, kv: float) -> float:
        """A prompt of `tokens` from an empty cache: token i attends over the i before it."""
        return tokens * weights / self.prompt_weights + kv * tokens * tokens / 2 / self.prompt_kv

    def generation_seconds(self, tokens: int, context: int, weights: float, kv: float) -> float:
        """`tokens` generated after `context` tokens in the cache."""
        attended = tokens * context + tokens * tokens / 2
        return tokens * (weights / self.generation_weights + self.per_token) + kv * attended / self.generation_kv

    def on(self, threads: int) -> Speeds:
        """These speeds on `threads` CPU threads: prompt work grows with every thread; generation,
        memory-bound, is taken to gain nothing past the threads it was measured with (B12)."""
        if not self.threads:
            return self
        prompt = threads / self.threads
        generation = min(threads, self.threads) / self.threads
        return Speeds(
            self.prompt_weights * prompt,
            self.prompt_kv * prompt,
            self.generation_weights * generation,
            self.generation_kv * generation,
            self.per_token / generation,
            threads,
        )


# Measured on this project's 2-core machine (AMD EPYC, 2 threads; B12 in docs/PERFORMANCE.md,
# `python -m benchmarks run B12 --calibrate`): llama.cpp reading prompts of 512 to 6,144 tokens
# of SmolLM2-135M-Instruct Q4_1 and generating after each, the fastest of 6 tries of each (other
# work only slows one down); the fixed cost per generated token is B1's. A model far larger than
# SmolLM2 reads its weights faster than this (fewer, larger matrices), so its estimate errs long
# until the trace store holds a run of it. The estimate adds CALIBRATION_MARGIN to the time these give.
CPU_SPEEDS = Speeds(
    prompt_weights=22.0e9,
    prompt_kv=19.8e9,
    generation_weights=7.9e9,
    generation_kv=6.4e9,
    per_token=1e-4,
    threads=2,
)
# llama.cpp's reference figures for a 7B Q4_K_M (4.7 GB) on an H100 (shared/reference/engine-notes.md):
# 6,400 prompt and 140 generated tokens a second; attention read at the same rates (flash attention).
GPU_SPEEDS = Speeds(6400.0 * 4.7e9, 6400.0 * 4.7e9, 140.0 * 4.7e9, 140.0 * 4.7e9, 5e-5)
LOAD_BYTES_PER_SECOND = 1e9  # reading the weights at load: a warm page cache does far better, a cold disk worse
START_SECONDS = 1.5  # imports, reading the vocabulary, making the context (B1 measured 0.13 to 0.17 s of it)
# run-to-run spread on an idle machine (B12: one job, nothing else running, took 145 s then 189 s), and
# what the model cannot see
CALIBRATION_MARGIN = 0.4
HISTORY_LINE_TOKENS = 25  # an InfMem planner prompt grows by one retrieval-history line a step (the reference: ~25 tokens)
CALIBRATION_RUNS = 10  # the latest runs of the model on this device that calibrate the estimate
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
    chunk_sizes: list[int] = field(default_factory=list)  # each step's document tokens, where counted

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
            "calls": (2 if get_protocol(self.protocol).planner else 1) * self.steps + 1,
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
    recorded: RecordedRuns | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> Report:
    """`chat_template`: the user's template text (chat.read_template), over the GGUF's own;
    `sequences`: questions batched in one context, which the context is sized for; `protocol`:
    None for the model's; budgets left None are the protocol's; `history`: the earlier turns of the
    conversation the question follows, which its problem holds (protocols.follow_up)."""
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
    if asked is not None:
        asked = with_history(asked, history, prep.tokenizer, AgentConfig().question_tokens)
    if asked is not None and normalize is not None:
        asked = normalize(asked)
    report = Report(prep, stats, chunk_tokens, memory_tokens, asked, chosen.name)
    for chunk in chunks:
        report.chunk_sizes.append(chunk.tokens)
        if chunk.index == keep_chunk:
            report.kept_chunk, report.kept_index = chunk.text, chunk.index
    info = report.info
    runs = recorded(str(info.path.resolve()), info.file_size) if recorded is not None and info.has_weights else None
    report.estimate = estimate(report, runs)
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


def step_shapes(report: Report, stop_after: int | None = None) -> list[tuple[int, int]]:
    """The model calls a run makes, as (prompt tokens, tokens generated at most): every memory
    update writes its full budget, and the answer its own. InfMem's: a planner and a write per
    step, each thinking its whole budget; `stop_after`: the planner ends the reading at that step."""
    question = report.question or ""
    config = AgentConfig.with_protocol(report.protocol, chunk_tokens=report.chunk_tokens, memory_tokens=report.memory_tokens)
    protocol = get_protocol(report.protocol)
    asked = 0 if report.question else 30  # no question given: one of 30 tokens
    tokens = report.prep.tokenizer
    if protocol.planner:
        return _infmem_shapes(report, config, asked, stop_after)
    step_fixed = len(report.chat.encode(tokens, protocol.memory_prompt(question, "", ""))) + asked
    first_fixed = len(report.chat.encode(tokens, protocol.memory_prompt(question, protocol.initial_memory, ""))) + asked
    final_fixed = len(report.chat.encode(tokens, protocol.final_prompt(question, "", config.final, ""))) + asked
    chunks = report.chunk_sizes or _even_chunks(report.stats.document_tokens, report.chunk_tokens)
    # the first step reads the initial memory; every later one a memory of the full budget
    prompts = [(first_fixed if i == 0 else step_fixed + report.memory_tokens) + chunk for i, chunk in enumerate(chunks)]
    calls = [(prompt, report.memory_tokens) for prompt in prompts]
    if calls:
        calls.append((final_fixed + report.memory_tokens, config.answer_tokens))
    return calls


def _infmem_shapes(report: Report, config: AgentConfig, asked: int, stop_after: int | None) -> list[tuple[int, int]]:
    """InfMem's calls (its prompts are rendered whole, no chat template): before step s a planner
    reading the question, the search history (a line a step) and the memory; a write reading the
    four units found, the chunk and the memory; both stages of thinking as one call."""
    from . import infmem

    encode = report.prep.tokenizer.encode
    question = report.question or ""
    memory = report.memory_tokens
    think = infmem.THINKING_TOKENS
    planner = len(encode(infmem.planner_text(question, infmem.history_text(1, 1, []), ""))) + asked
    write = len(encode(infmem.memory_text(question, "", "", ""))) + asked + infmem.RESULTS * infmem.UNIT_TOKENS
    final = len(encode(infmem.final_text(question, ""))) + asked
    chunks = report.chunk_sizes or _even_chunks(report.stats.document_tokens, report.chunk_tokens)
    calls: list[tuple[int, int]] = []
    for s, chunk in enumerate(chunks, 1):
        calls.append((planner + HISTORY_LINE_TOKENS * (s - 1) + memory, think + memory))
        if stop_after is not None and s >= stop_after:
            break
        calls.append((write + chunk + memory, think + memory))
    if calls:
        calls.append((final + memory, think + config.answer_tokens))
    return calls


def _even_chunks(tokens: int, chunk: int) -> list[int]:
    full, rest = divmod(tokens, chunk)
    return [chunk] * full + ([rest] if rest else [])


def model_shape(info: GGUFInfo) -> tuple[float, float, str | None]:
    """What one token's pass reads of the model (bytes), its K and V per token of context, and a
    note for a mixture of experts; the default 7B's for a vocabulary-only GGUF."""
    from ..model.memory import model_memory, read_per_token

    if not info.has_weights:
        return DEFAULT_MODEL_BYTES, DEFAULT_KV_BYTES_PER_TOKEN, None
    read, moe = read_per_token(info)
    kv = model_memory(info).kv_bytes_per_token
    return float(read), float(kv or DEFAULT_KV_BYTES_PER_TOKEN), moe


def run_seconds(speeds: Speeds, calls: Sequence[tuple[int, int]], weights: float, kv: float) -> tuple[float, float]:
    """Prompt and generation seconds of `calls` ((prompt tokens, generated tokens) each)."""
    prompt = sum(speeds.prompt_seconds(p, weights, kv) for p, _ in calls)
    generation = sum(speeds.generation_seconds(g, p, weights, kv) for p, g in calls)
    return prompt, generation


def measured_factor(
    info: GGUFInfo, gpu: bool, speeds: Speeds, cores: int, runs: Sequence[Mapping[str, Any]] | None = None
) -> tuple[float, int] | None:
    """How this machine's runs of this model compared with `speeds`: the median over the latest
    CALIBRATION_RUNS recorded runs of (seconds the steps took) / (seconds `speeds` gives the same
    steps, on the threads the run had), and how many runs that is; None before the first. `runs`:
    the trace store's runs of the model with their steps (none: no calibration)."""
    path = str(info.path.resolve())
    runs = runs or []
    weights, kv, _ = model_shape(info)
    ratios: list[float] = []
    for run in runs:
        model, settings = run.get("model") or {}, run.get("settings") or {}
        device = str(settings.get("device") or "")
        if model.get("path") != path or model.get("size") != info.file_size or "engine" in settings:
            continue
        recorded = PROTOCOLS.get(str(settings.get("protocol") or ""))
        if recorded is not None and recorded.planner:  # a step's seconds there are two calls' (planner and write)
            continue
        if device.startswith("GPU") != gpu or not device:
            continue
        found = re.match(r"CPU \((\d+) thread", device)
        on = speeds.on(int(found.group(1)) if found else cores)
        steps = [s for s in run.get("steps") or [] if (s.get("seconds") or 0) > 0 and s.get("prompt_tokens")]
        predicted = sum(
            sum(run_seconds(on, [(int(s["prompt_tokens"]), int(s.get("generated_tokens") or 0))], weights, kv)) for s in steps
        )
        if predicted > 0:
            ratios.append(sum(float(s["seconds"]) for s in steps) / predicted)
        if len(ratios) == CALIBRATION_RUNS:
            break
    if not ratios:
        return None
    return statistics.median(ratios), len(ratios)


# What inspect is given to find this machine's recorded runs of a model, by its resolved path and
# size (traces.calibration.recorded_runs): the layers above the core read the trace store, not the core.
RecordedRuns = Callable[[str, int], Sequence[Mapping[str, Any]]]


def estimate(report: Report, runs: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """An upper bound on run time on an idle machine: every memory update writes its full budget,
    at speeds measured on this machine's latest runs of the model where there are any (`runs`, with
    their steps: the trace store's, given by the caller), else at the reference machine's
    (CPU_SPEEDS) scaled to this one."""
    from ..model.runtime import available_cores, gpu_offload_supported

    info = report.info
    model_bytes = info.file_size if info.has_weights else DEFAULT_MODEL_BYTES
    weights, kv, moe = model_shape(info)
    gpu = gpu_offload_supported()
    cores = available_cores()
    base = GPU_SPEEDS if gpu else CPU_SPEEDS
    speeds = base.on(cores)
    calls = step_shapes(report)
    prompt_s, generation_s = run_seconds(speeds, calls, weights, kv)
    factor = measured_factor(info, gpu, base, cores, runs) if info.has_weights else None
    scale = (1.0 if factor is None else factor[0]) * (1 + CALIBRATION_MARGIN)
    work = (prompt_s + generation_s) * scale
    seconds = work + START_SECONDS + model_bytes / LOAD_BYTES_PER_SECOND if calls else 0.0
    step_prompt, step_generated = calls[0] if calls else (report.chunk_tokens + report.memory_tokens, report.memory_tokens)
    one = run_seconds(speeds, [(step_prompt, step_generated)], weights, kv)
    if factor is None:
        source = "speeds measured on memagent's reference machine (2 cores), scaled by model size and cores"
    else:
        source = f"speeds measured in this machine's last {factor[1]} run{'s' if factor[1] > 1 else ''} of this model"
    early: dict[str, Any] = {}
    if get_protocol(report.protocol).planner and report.steps >= 3:
        from .infmem import EARLY_STOP

        fewest = run_seconds(speeds, step_shapes(report, stop_after=EARLY_STOP), weights, kv)
        seconds_early = sum(fewest) * scale + START_SECONDS + model_bytes / LOAD_BYTES_PER_SECOND
        # the planner may end the reading at its third STOP in a row: at step 3 at the earliest
        early = {"seconds_at_earliest_stop": round(min(seconds, seconds_early), 1)}
        source += "; infmem: a planner call and a write per step, each thinking its whole budget"
    return {
        "seconds": round(seconds, 1),
        **early,
        "device": "GPU" if gpu else f"CPU ({cores} cores)",
        "prompt_tokens_per_second": round(step_prompt / (one[0] * scale), 1),
        "generation_tokens_per_second": round(step_generated / (one[1] * scale), 2),
        "model_bytes": int(model_bytes),
        "calibrated_by_runs": 0 if factor is None else factor[1],
        "assumes": f"an idle machine; each memory update writes its full budget; {source}"
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


def final_prompt(report: Report, config: AgentConfig) -> tuple[str, str | None]:
    """The exact text sent for the final answer (the memory shown as {memory}), and a note; `config`
    gives what the final prompt adds to the question (--instructions, --schema)."""
    protocol = get_protocol(report.protocol)
    text = report.chat.render(protocol.final_prompt(report.question or "", "{memory}", config.final, config.final_instructions()))
    return text, "The memory is what the model writes at the last step; it is shown as {memory}."
