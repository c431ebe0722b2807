"""The embedded engine: a GGUF model run in-process by llama.cpp, as an `Engine` (`LlamaEngine`),
its settings as a backend (`EmbeddedOptions`), and the defaults it picks by device (`default_batch`,
`default_speculate`). llama_cpp is imported only when a model is loaded.

Why we drive llama.cpp ourselves rather than through `Llama.generate`:
- llama-cpp-python's sampler chain applies top-p before temperature; the reference (vLLM)
  applies temperature first. We build the chain temp -> top-p -> dist, nothing else.
- its text path drops tokens longer than 32 bytes; we decode ids with our own tables.
- we need prompt and generation timed apart, and an exact stop/length finish reason.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import MemagentError
from .backends import EngineOptions, register
from .batched import Reply, SequenceBatcher, common_prefix, context_cells, decode
from .chat_template import ChatFormat
from .engine import Completion, CompletionDone, PromptRead, RawPrompt, Sampling, TextDelta, stopped_at
from .gguf import GGUFInfo
from .memory import available_memory, check_context_fits, model_memory
from .runtime import available_cores, busy_cores, cpu_times, default_threads, log_reason, quiet_llama_logs, threads_for
from .speculate import DRAFT_MAX, DraftPolicy, PromptLookup, take_drafts
from .tokenizer import StreamDecoder, Tokenizer, encode_template

if TYPE_CHECKING:
    import llama_cpp


def _load_hint(reason: str, info: GGUFInfo, n_ctx: int) -> str:
    """What to do about a failed load, by its cause in llama.cpp's log."""
    lowered = reason.lower()
    if "alloc" in lowered or "memory" in lowered:
        return (
            f"Not enough memory: lower --ctx (now {n_ctx:,}) or --gpu-layers, or use a smaller quantization "
            "(e.g. q4_k_m); memagent doctor shows what fits."
        )
    if "unknown model architecture" in lowered:
        return (
            f"This llama-cpp-python cannot run {info.architecture!r} models: upgrade it "
            "(pip install -U llama-cpp-python) or use a GGUF of a supported architecture."
        )
    return "Check that the file is complete (a download may have been cut); --verbose shows llama.cpp's log."


def _sequences_that_fit(info: GGUFInfo, n_ctx: int, sequences: int, gpu_layers: int, gpu_free: int | None) -> int:
    """How many of `sequences` (each with n_ctx tokens of KV cache) fit the machine's free memory and
    `gpu_free` with `gpu_layers` offloaded, halving down to one; MemagentError when one does not fit.
    Checked before llama.cpp allocates: asked for a KV cache larger than the free memory, it fills the
    machine before it fails."""
    mem = model_memory(info)
    host_free = available_memory()
    while True:
        try:
            check_context_fits(mem, n_ctx * sequences, gpu_layers=gpu_layers, host_free=host_free, gpu_free=gpu_free)
            return sequences
        except MemagentError:
            if sequences <= 1:
                raise
            sequences = max(1, sequences // 2)


def default_batch(gpu: bool) -> bool:
    """Whether several questions share one context by default: where layers run on a GPU. There a
    decode is bound by reading the weights: on an H100 four sequences generated 2.15x the tokens
    per second of one, and `ask -q` x4 took 0.44x the time of four single runs (B4). On two CPU
    cores a decode is bound by arithmetic: four sequences gave 1.11x with a 1.5B-shaped model,
    and `ask -q` x4 ran 1.04x slower batched than one question after another with drafts (B8)."""
    return gpu


def default_speculate(on_gpu: bool) -> bool:
    """Whether memory rewrites are drafted by default. On a CPU benchmarks/speculate.py measured
    them faster (B6). On a GPU checking 16 drafted tokens cost two single-token decodes, and on real
    prose generation with drafts took 0.575x the time without (B4). Where checks cost more (a
    larger model on a few CPU cores), DraftPolicy learns it from the engine's own timings and
    drafts fewer or none."""
    return True


@register
@dataclass(frozen=True)
class EmbeddedOptions(EngineOptions):
    """The embedded engine's settings: the GGUF runs in this process. None is auto throughout."""

    kind = "llama"
    n_ctx: int | None = None  # None: just large enough for the budgets
    gpu_layers: int | None = None  # None: as many layers as fit in free GPU memory, 0 where the build cannot offload
    threads: int | None = None  # None: the cores not already busy
    flash_attn: bool | None = None  # None: on where layers run on a GPU, off on a CPU
    speculate: bool | None = None  # draft memory rewrites from the prompt; None: the device's default
    batch: bool | None = None  # several runs in one context; None: the device's default
    verbose: bool = False  # show llama.cpp's own log
    chat_template: str | None = None  # a template (chat.read_template) over the GGUF's own

    def open(
        self, info: GGUFInfo | None, tokenizer: Tokenizer, chat: ChatFormat | None, n_ctx: int, sequences: int
    ) -> LlamaEngine:
        if info is None or chat is None:
            raise MemagentError("The embedded engine needs a GGUF model.", "Pass one with --model.")
        return LlamaEngine(info, tokenizer, chat, n_ctx=n_ctx, sequences=sequences, options=self)

    def decides(self) -> dict[str, Any]:
        import hashlib

        template = self.chat_template
        return {"kind": self.kind, "chat_template": hashlib.sha256(template.encode()).hexdigest() if template else None}


PROMPT_PART = 512  # prompt tokens read between two PromptRead: llama.cpp's physical batch (n_ubatch)


class LlamaEngine:
    """A GGUF model run in-process by llama.cpp."""

    concurrent = False  # one llama_context: calls run one at a time

    def __init__(
        self,
        info: GGUFInfo,
        tokenizer: Tokenizer,
        chat: ChatFormat,
        *,
        n_ctx: int,
        sequences: int = 1,
        options: EmbeddedOptions | None = None,
    ):
        import llama_cpp

        # The settings stay one value, as the user gave them (None is auto throughout); n_ctx is the
        # context decided from them (options.n_ctx is only the request), sequences how many runs may share it.
        options = options or EmbeddedOptions()
        gpu_layers, threads = options.gpu_layers, options.threads
        if not info.has_weights:
            raise MemagentError(
                f"{info.path} holds only a vocabulary, no weights.",
                "It can count tokens (memagent inspect) but not answer; pass a full model to --model.",
            )
        quiet_llama_logs(options.verbose)
        self.info = info
        self.tokenizer = tokenizer
        self.chat = chat
        self.n_ctx = n_ctx
        offload = llama_cpp.llama_supports_gpu_offload()
        if not (default_batch(bool(offload) and gpu_layers != 0) if options.batch is None else options.batch):
            sequences = 1
        n_layer = info.arch_get("block_count", 0)
        sequences, gpu_free = self._plan_layers(gpu_layers, sequences, bool(offload))
        sequences = _sequences_that_fit(info, n_ctx, sequences, self.gpu_layers, gpu_free)
        self.threads = threads or default_threads()
        self.on_gpu = bool(offload) and self.gpu_layers != 0
        # Threads chosen here (not given) follow the cores other work leaves free, step by step:
        # the CPU clocks when the last reply began (see _follow_free_cores).
        self._clock = cpu_times() if threads is None and not self.on_gpu and sequences == 1 else None
        # Prompts are read on every core, except where threads follow the free cores: there, beside
        # a busy neighbour, a second thread read slower than one (B7: 45.1 against 51.9 tok/s), and
        # two memagent runs each reading on both cores spun against each other.
        self.threads_batch = self.threads if self._clock is not None else max(self.threads, available_cores())
        # Flash attention: measured slower on CPU (25 vs 36 tok/s at a 5,500-token context, 2 cores),
        # so only where layers run on a GPU unless asked.
        self.flash_attn = self.on_gpu if options.flash_attn is None else options.flash_attn
        fa = ", flash attention" if self.flash_attn else ""
        if self.on_gpu:
            layers = n_layer if self.gpu_layers < 0 else min(self.gpu_layers, n_layer)
            self.description = f"GPU ({layers}/{n_layer} layers offloaded{fa})"
        else:
            self.description = f"CPU ({self.threads} thread{'s' if self.threads > 1 else ''}{fa})"
        self._llm: llama_cpp.Llama | None = None  # None once closed
        self._llm = self._load(n_ctx if sequences == 1 else 64)
        self._vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        self.speculate = default_speculate(self.on_gpu) if options.speculate is None else options.speculate
        self.draft_policy = DraftPolicy()  # what checking drafts costs on this machine, learnt as it runs
        self._batch = llama_cpp.llama_batch_init(DRAFT_MAX + 1, 0, 1)
        self.sequences = sequences
        self.concurrent = sequences > 1  # several complete() calls at once, batched
        self._batcher: SequenceBatcher | None = None
        if sequences > 1:
            self._batcher = SequenceBatcher(
                self._llm.model,
                self._vocab,
                tokenizer,
                sequences=sequences,
                n_ctx=n_ctx,
                threads=self.threads,
                threads_batch=self.threads_batch,
                flash_attn=self.flash_attn,
                speculate=self.speculate,
            )
            self.description += f", {sequences} sequences batched"

    def _plan_layers(self, gpu_layers: int | None, sequences: int, offload: bool) -> tuple[int, int | None]:
        """Sets the layers to offload and why; returns the sequences that fit and the GPU's free
        bytes (None: not known, or no GPU in play)."""
        if gpu_layers is None:  # auto: as many layers as fit in free GPU memory, then as many sequences
            from .gpu import fit_sequences

            sequences, plan = fit_sequences(self.info, self.n_ctx, sequences, offload_supported=offload)
            self.gpu_layers, self.gpu_reason = plan.layers, plan.reason
            return sequences, plan.free_bytes
        self.gpu_layers = gpu_layers if offload else 0
        self.gpu_reason = f"--gpu-layers {gpu_layers}" if offload else "CPU only: this build cannot offload to a GPU"
        if self.gpu_layers == 0:
            return sequences, None
        from .gpu import gpu_devices

        known = [d.free for d in gpu_devices() if d.free is not None]
        return sequences, sum(known) if known else None

    def _load(self, own_ctx: int) -> llama_cpp.Llama:
        """llama-cpp-python's model and context. With several sequences the replies run in a context
        of their own (batched.py); llama-cpp-python's is then only a small one it insists on making."""
        import llama_cpp

        # verbose=True keeps llama-cpp-python from redirecting file descriptors 1 and 2 to
        # /dev/null during the load (which would swallow our live view); its Python-side
        # chatter goes to a buffer, and llama.cpp's own log goes through our callback.
        chatter = io.StringIO()
        try:
            with contextlib.redirect_stderr(chatter), contextlib.redirect_stdout(chatter):
                return llama_cpp.Llama(
                    model_path=str(self.info.path),
                    n_ctx=own_ctx,
                    n_batch=min(2048, own_ctx),
                    n_ubatch=PROMPT_PART,
                    n_gpu_layers=self.gpu_layers,
                    n_threads=self.threads,
                    n_threads_batch=self.threads_batch,
                    flash_attn=self.flash_attn,
                    verbose=True,
                )
        except ValueError as exc:
            reason = log_reason()
            raise MemagentError(
                f"llama.cpp could not load {self.info.path.name}" + (f": {reason}" if reason else f" ({exc})"),
                _load_hint(reason, self.info, self.n_ctx),
            ) from None

    def close(self) -> None:
        import llama_cpp

        llm, self._llm = getattr(self, "_llm", None), None
        batcher, self._batcher = getattr(self, "_batcher", None), None
        if batcher is not None:
            batcher.close()
        batch, self._batch = getattr(self, "_batch", None), None
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        if llm is not None:
            llm.close()

    def cells(self) -> tuple[int, int]:
        """The context llama.cpp made for the replies: cells in all, and cells per sequence."""
        return self._batcher.cells() if self._batcher is not None else context_cells(self._model().ctx)

    def _model(self) -> llama_cpp.Llama:
        llm = self._llm
        assert llm is not None, "the engine is used after close()"
        return llm

    def _sampler(self, sampling: Sampling) -> llama_cpp.llama_sampler_p:
        import llama_cpp

        chain: llama_cpp.llama_sampler_p = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if sampling.json_schema is not None:
            # First in the chain: temperature and top-p then choose among the tokens the grammar allows.
            llama_cpp.llama_sampler_chain_add(chain, self._grammar(sampling.json_schema))
        if sampling.temperature <= 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            seed = llama_cpp.LLAMA_DEFAULT_SEED if sampling.seed is None else sampling.seed & 0xFFFFFFFF
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(sampling.temperature))
            if sampling.top_p < 1.0:
                llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    def _follow_free_cores(self, llm: llama_cpp.Llama) -> None:
        """Threads for this reply (generation and the prompt): the cores other work left free since the last one
        began (the CPU clocks over that time, this process's own use left out). A long run chose
        its threads once, from 0.1 s at its start; a neighbour that started later then met two
        threads spinning against it, which B7 measured at 0.58x of one (and in the suite, a run of
        a 100K-token document beside another test took 60 s instead of 16). Only where the threads
        were not given; the reply's text does not depend on them."""
        if self._clock is None:
            return
        import llama_cpp

        now = cpu_times()
        busy = None if now is None else busy_cores(self._clock, now)
        if now is None or busy is None:
            return
        self._clock = now
        wanted = threads_for(now.cores, busy)
        if wanted != self.threads:
            llama_cpp.llama_set_n_threads(llm.ctx, wanted, wanted)
            self.threads = self.threads_batch = wanted

    def _grammar(self, json_schema: str) -> llama_cpp.llama_sampler_p:
        """A sampler that allows only JSON matching `json_schema` (llama-cpp-python's conversion of
        it to a GBNF grammar, the one its own `response_format` uses), then the end of the turn."""
        import llama_cpp
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        try:
            grammar = json_schema_to_gbnf(json_schema)
        except (AssertionError, ValueError, KeyError, RecursionError) as exc:
            raise MemagentError(f"llama.cpp cannot turn the schema into a grammar: {exc}", "Simplify the schema.") from None
        sampler: llama_cpp.llama_sampler_p = llama_cpp.llama_sampler_init_grammar(self._vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise MemagentError(f"llama.cpp refused the grammar made from the schema: {log_reason()}", "Simplify the schema.")
        return sampler

    def complete(self, user_message: str, max_tokens: int, sampling: Sampling, expect: str = "") -> Iterator[Completion]:
        prompt = self.chat.encode(self.tokenizer, user_message)
        budget = min(max_tokens, self.n_ctx - len(prompt))
        replies = self._generate(prompt, max_tokens, sampling, expect)
        return stopped_at(replies, self.chat.stops, self._count, len(prompt), budget)

    def _count(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def complete_raw(self, prompt: RawPrompt, max_tokens: int, sampling: Sampling) -> Iterator[Completion]:
        # A second stage re-tokenizes the first stage's text after the prompt, as the reference's
        # server does; the prompt's ids are the cache's common prefix, so they are not read again.
        return self._generate(encode_template(self.tokenizer, prompt.pieces), max_tokens, sampling, "")

    def _generate(self, prompt: list[int], max_tokens: int, sampling: Sampling, expect: str) -> Iterator[Completion]:
        import llama_cpp

        llm = self._model()
        # An unusually long prompt shortens this reply rather than losing the run so far.
        max_tokens = min(max_tokens, self.n_ctx - len(prompt))
        if max_tokens < 1:
            raise MemagentError(
                f"A prompt of {len(prompt)} tokens leaves no room to generate in a context of {self.n_ctx}.",
                "Raise --ctx, or lower --chunk-tokens or --memory-tokens.",
            )
        expected = self._expected(expect) if self.speculate else []
        if self._batcher is not None:
            yield from self._complete_batched(prompt, max_tokens, sampling, expected)
            return
        self._follow_free_cores(llm)
        start = time.perf_counter()
        cached = self._reuse_prefix(prompt)
        # In parts of a physical batch (what llama.cpp decodes at once anyway), each told: the
        # view moves while a CPU reads a chunk's thousands of tokens.
        for at in range(cached, len(prompt), PROMPT_PART):
            llm.eval(prompt[at : at + PROMPT_PART])
            yield PromptRead(min(at + PROMPT_PART, len(prompt)), len(prompt))
        prompt_done = time.perf_counter()
        chain = self._sampler(sampling)
        decoder = StreamDecoder(self.tokenizer)
        drafter = PromptLookup(prompt, self.draft_policy, expected) if self.speculate else None
        ids: list[int] = []
        finish = "length"
        n_past = len(prompt)  # the KV cache holds positions [0, n_past): the prompt, then the reply
        drafted = accepted = 0
        ctx = llm.ctx

        def is_end(token: int) -> bool:
            return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

        try:
            # the first token from the prompt's last logits; then, each round, one decode of the
            # newest token (and its drafts) and what take_drafts reads from it
            got = take_drafts(lambda i: llama_cpp.llama_sampler_sample(chain, ctx, -1), (), max_tokens, is_end)
            while True:
                for token in got.tokens:
                    ids.append(token)
                    piece = decoder.feed(token)
                    if piece:
                        yield TextDelta(piece)
                    if drafter is not None:
                        drafter.add(token)
                if got.ended:
                    finish = "stop"
                    break
                if len(ids) >= max_tokens:
                    break
                draft: list[int] = []
                if drafter is not None:
                    draft = drafter.draft(min(max_tokens - len(ids), self.n_ctx - n_past - 1))
                started = time.perf_counter()
                self._decode([ids[-1], *draft], n_past)
                if drafter is not None:
                    llama_cpp.llama_synchronize(ctx)  # a GPU decode runs on until its logits are read
                    self.draft_policy.observe(1 + len(draft), time.perf_counter() - started)
                got = take_drafts(lambda i: llama_cpp.llama_sampler_sample(chain, ctx, i), draft, max_tokens - len(ids), is_end)
                n_past += 1 + got.cached
                if draft:
                    assert drafter is not None
                    drafter.checked(len(draft), got.taken)
                    drafted += len(draft)
                    accepted += got.taken
                    if got.cached < len(draft):  # the refused drafts: drop them from the cache
                        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, n_past, -1)
        finally:
            llama_cpp.llama_sampler_free(chain)
            # llama-cpp-python's own bookkeeping, which the next call's prefix reuse reads. A reply
            # closed mid-check (a cancelled run) has drafts in the cache that are not in `ids`:
            # they are dropped, so the cache and the bookkeeping agree on what the context holds.
            reply = min(n_past - len(prompt), len(ids))
            llm.input_ids[len(prompt) : len(prompt) + reply] = ids[:reply]
            llm.n_tokens = len(prompt) + reply
            if llm.n_tokens < n_past:
                llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, llm.n_tokens, -1)
        tail = decoder.flush()
        if tail:
            yield TextDelta(tail)
        end = time.perf_counter()
        yield CompletionDone(
            text=self.tokenizer.decode_bytes(ids).decode("utf-8", errors="replace"),
            finish_reason=finish,
            prompt_tokens=len(prompt),
            completion_tokens=len(ids),
            max_tokens=max_tokens,
            cached_tokens=cached,
            prompt_seconds=prompt_done - start,
            generate_seconds=end - prompt_done,
            drafted_tokens=drafted,
            accepted_tokens=accepted,
        )

    def _expected(self, text: str) -> list[int]:
        """The reply's ids if it repeats `text` and ends: the text as the tokenizer writes it, then
        the end-of-turn token. The prompt holds that text too, but followed by a newline its last
        token merges differently, and nothing there shows where the reply ends."""
        import llama_cpp

        if not text:
            return []
        end = llama_cpp.llama_vocab_eot(self._vocab)
        if end < 0:
            end = llama_cpp.llama_vocab_eos(self._vocab)
        return [*self.tokenizer.encode(text), *([end] if end >= 0 else [])]

    def _complete_batched(
        self, prompt: list[int], max_tokens: int, sampling: Sampling, expected: list[int]
    ) -> Iterator[Completion]:
        assert self._batcher is not None
        # The driver thread samples with the chain and frees it when the reply ends or is dropped.
        for item in self._batcher.complete(prompt, max_tokens, self._sampler(sampling), expected):
            if isinstance(item, Reply):
                yield CompletionDone(
                    text=self.tokenizer.decode_bytes(item.ids).decode("utf-8", errors="replace"),
                    finish_reason=item.finish_reason,
                    prompt_tokens=len(prompt),
                    completion_tokens=len(item.ids),
                    max_tokens=max_tokens,
                    cached_tokens=item.cached_tokens,
                    prompt_seconds=item.prompt_seconds,
                    generate_seconds=item.generate_seconds,
                    drafted_tokens=item.drafted_tokens,
                    accepted_tokens=item.accepted_tokens,
                )
            else:
                yield TextDelta(item)

    def _decode(self, tokens: list[int], first_pos: int) -> None:
        """One llama_decode of `tokens` at positions from `first_pos`, with logits for each."""
        decode(self._model().ctx, self._batch, [(token, first_pos + i, 0, True) for i, token in enumerate(tokens)])

    def _reuse_prefix(self, prompt: list[int]) -> int:
        """Keeps the KV cache of the longest common prefix with the last call (the
        instruction and question repeat at every step); `eval` drops the rest."""
        llm = self._model()
        # at least one token must be evaluated for fresh logits
        keep = common_prefix(llm.input_ids[: llm.n_tokens].tolist(), prompt, len(prompt) - 1)
        llm.n_tokens = keep
        return keep
