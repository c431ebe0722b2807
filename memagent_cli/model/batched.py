"""Several replies at once in one llama.cpp context: questions (or eval items) batched.

N questions over the same document are N independent MemAgent loops. Here they share one
llama.cpp context with `n_seq_max = N` and a KV cache per sequence (`kv_unified = False`, so
no sequence attends to another's cells). One thread, the driver, owns the context: each of its
rounds is a single `llama_decode` holding the next token of every sequence that is generating
and, in the room left, the next piece of any prompt being read, so one question's prompt is
processed while the others generate. Callers (one thread per question) hand in a request and
read their reply's pieces from a queue, so the agent loop sees the same `Engine.complete`.

Each sequence samples with its own sampler chain, in order, exactly as a lone reply would: the
output changes only where llama.cpp computes different logits for another batch shape.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..errors import MemagentError
from .runtime import log_reason
from .tokenizer import StreamDecoder, Tokenizer

if TYPE_CHECKING:
    import llama_cpp


@dataclass
class _Request:
    prompt: list[int]
    max_tokens: int
    chain: Any  # llama_sampler_p, owned (and freed) by the driver from submission on
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    cancelled: bool = False
    seq: int = -1
    fed: int = 0  # prompt tokens in the sequence's cache
    cached: int = 0  # of those, reused from the sequence's previous reply
    token: int | None = None  # sampled, not yet decoded
    ids: list[int] = field(default_factory=list)
    started: float = 0.0
    first_token_at: float = 0.0


@dataclass(frozen=True)
class Reply:
    """What the driver hands back when a reply ends (the engine builds CompletionDone from it)."""

    ids: list[int]
    finish_reason: str
    cached_tokens: int
    prompt_seconds: float
    generate_seconds: float


class SequenceBatcher:
    """The driver thread and its context; `complete` may be called from any thread."""

    def __init__(
        self,
        model: llama_cpp.llama_model_p,
        vocab: llama_cpp.llama_vocab_p,
        tokenizer: Tokenizer,
        *,
        sequences: int,
        n_ctx: int,
        threads: int,
        threads_batch: int,
        flash_attn: bool,
        n_batch: int = 512,
    ):
        import llama_cpp

        self.n_batch = n_batch
        self._vocab, self._tokenizer = vocab, tokenizer
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx * sequences  # each sequence gets exactly n_ctx cells
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = sequences
        params.kv_unified = False
        params.n_threads = threads
        params.n_threads_batch = threads_batch
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            raise MemagentError(
                f"llama.cpp could not make a context for {sequences} sequences of {n_ctx:,} tokens"
                + (f": {log_reason()}" if log_reason() else ""),
                "Ask fewer questions at once, or lower --ctx.",
            )
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._history: list[list[int]] = [[] for _ in range(sequences)]  # tokens in each sequence's cache
        self._free = list(range(sequences))
        self._incoming: queue.Queue[_Request] = queue.Queue()
        self._waiting: list[_Request] = []
        self._active: list[_Request] = []
        self._closing = threading.Event()
        self._broken: BaseException | None = None
        self._thread = threading.Thread(target=self._drive, name="memagent-batch", daemon=True)
        self._thread.start()

    # --- the callers' side ---------------------------------------------------------------------

    def cells(self) -> tuple[int, int]:
        """The context llama.cpp made: cells in all, and cells each sequence may use."""
        import llama_cpp

        return int(llama_cpp.llama_n_ctx(self._ctx)), int(llama_cpp.llama_n_ctx_seq(self._ctx))

    def complete(self, prompt: list[int], max_tokens: int, chain: Any) -> Iterator[str | Reply]:
        """Text pieces as they come, then the Reply; closing the iterator early cancels it."""
        if self._broken is not None:
            _free_chain(chain)
            raise self._broken
        request = _Request(prompt, max_tokens, chain, started=time.perf_counter())
        self._incoming.put(request)
        decoder = StreamDecoder(self._tokenizer)
        try:
            while True:
                try:
                    item = request.out.get(timeout=0.5)
                except queue.Empty:
                    if self._broken is not None:
                        raise self._broken from None
                    continue
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Reply):
                    tail = decoder.flush()
                    if tail:
                        yield tail
                    yield item
                    return
                piece = decoder.feed(item)
                if piece:
                    yield piece
        finally:
            request.cancelled = True

    def close(self) -> None:
        import llama_cpp

        if self._thread.is_alive():
            self._closing.set()
            self._thread.join()
        # Replies still waiting (their runs were stopped, or another thread closes the engine) end
        # with an error instead of waiting for a driver that is gone; later calls fail at once.
        closed = MemagentError("The model was closed while replies were still running.")
        if self._broken is None:
            self._broken = closed
        self._take_incoming()
        for request in self._active + self._waiting:
            request.out.put(closed)
            _free_chain(request.chain)
        self._active, self._waiting = [], []
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    # --- the driver ----------------------------------------------------------------------------

    def _drive(self) -> None:
        try:
            while not self._closing.is_set():
                self._admit()
                if not self._active:
                    try:
                        self._waiting.append(self._incoming.get(timeout=0.05))
                    except queue.Empty:
                        pass
                    continue
                self._round()
        except BaseException as exc:  # delivered to every reply in flight; the engine is unusable after
            error = exc if isinstance(exc, MemagentError) else MemagentError(f"llama.cpp failed while batching: {exc}")
            self._broken = error
            for request in self._active + self._waiting:
                request.out.put(error)
                _free_chain(request.chain)
            self._active, self._waiting = [], []

    def _admit(self) -> None:
        """Gives waiting requests a free sequence, the one whose cache shares most of the prompt."""
        import llama_cpp

        self._take_incoming()
        while self._waiting and self._free:
            request = self._waiting.pop(0)
            if request.cancelled:
                _free_chain(request.chain)
                continue
            best, keep = self._free[0], -1
            for seq in self._free:
                shared = common_prefix(self._history[seq], request.prompt, len(request.prompt) - 1)
                if shared > keep:
                    best, keep = seq, shared
            self._free.remove(best)
            llama_cpp.llama_memory_seq_rm(self._mem, best, keep, -1)
            del self._history[best][keep:]
            request.seq, request.fed, request.cached = best, keep, keep
            self._active.append(request)

    def _take_incoming(self) -> None:
        while True:
            try:
                self._waiting.append(self._incoming.get_nowait())
            except queue.Empty:
                return

    def _round(self) -> None:
        """One llama_decode: a token for each generating sequence, then prompt pieces in the room left."""
        import llama_cpp

        items: list[tuple[_Request, int, bool]] = []  # (request, token, is this request's sampling point)
        for request in self._active:
            if request.token is not None and not request.cancelled:
                items.append((request, request.token, True))
        room = self.n_batch - len(items)
        for request in self._active:
            if request.token is None and not request.cancelled and room > 0:
                take = min(room, len(request.prompt) - request.fed)
                for k in range(take):
                    last = request.fed + k == len(request.prompt) - 1
                    items.append((request, request.prompt[request.fed + k], last))
                room -= take
        placed = []
        for request, token, logits in items:
            placed.append((token, len(self._history[request.seq]), request.seq, logits))
            self._history[request.seq].append(token)
        if placed:
            decode(self._ctx, self._batch, placed)
        for i, (request, _token, logits) in enumerate(items):
            if request.token is None:
                request.fed += 1
            if not logits or request.cancelled:
                continue
            token = llama_cpp.llama_sampler_sample(request.chain, self._ctx, i)
            now = time.perf_counter()
            if request.token is None:
                request.first_token_at = now
            if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                self._finish(request, "stop", now)
                continue
            request.ids.append(token)
            request.out.put(token)
            if len(request.ids) >= request.max_tokens:
                self._finish(request, "length", now)
                continue
            request.token = token
        for request in [r for r in self._active if r.cancelled]:
            self._release(request)

    def _finish(self, request: _Request, reason: str, now: float) -> None:
        request.out.put(
            Reply(
                ids=request.ids,
                finish_reason=reason,
                cached_tokens=request.cached,
                prompt_seconds=request.first_token_at - request.started,
                generate_seconds=now - request.first_token_at,
            )
        )
        self._release(request)

    def _release(self, request: _Request) -> None:
        self._active.remove(request)
        self._free.append(request.seq)
        _free_chain(request.chain)


def _free_chain(chain: Any) -> None:
    import llama_cpp

    llama_cpp.llama_sampler_free(chain)


def decode(ctx: Any, batch: Any, items: list[tuple[int, int, int, bool]]) -> None:
    """One llama_decode of `items`: (token, position, sequence, wants logits) each."""
    import llama_cpp

    for i, (token, pos, seq, logits) in enumerate(items):
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits
    batch.n_tokens = len(items)
    rc = llama_cpp.llama_decode(ctx, batch)
    if rc != 0:
        raise MemagentError(f"llama.cpp could not decode ({rc}): {log_reason() or 'no reason logged'}")


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens `a` and `b` share, at most `limit`."""
    n = min(len(a), len(b), limit)
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k
