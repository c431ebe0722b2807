"""Several replies at once in one llama.cpp context: questions (or eval items) batched.

N questions over the same document are N independent MemAgent loops. Here they share one
llama.cpp context with `n_seq_max = N` and a KV cache per sequence (`kv_unified = False`, so
no sequence attends to another's cells). One thread, the driver, owns the context: each of its
rounds is a single `llama_decode` holding the next token of every sequence that is generating
and, in the room left, the next piece of any prompt being read, so one question's prompt is
processed while the others generate. Callers (one thread per question) hand in a request and
read their reply's pieces from a queue, so the agent loop sees the same `Engine.complete`.

Each sequence samples with its own sampler chain, in order, exactly as a lone reply would: the
output changes only where llama.cpp computes different logits for another batch shape. With
drafts on, a generating sequence puts its prompt-lookup drafts (speculate.py) beside its next
token in the same decode, and keeps them while they equal what its chain samples, as the
lone engine does.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..errors import MemagentError
from .runtime import log_reason
from .speculate import DraftPolicy, PromptLookup, take_drafts
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
    drafter: PromptLookup | None = None  # None: no drafts for this reply
    drafted: int = 0
    accepted: int = 0


@dataclass(frozen=True)
class Reply:
    """What the driver hands back when a reply ends (the engine builds CompletionDone from it)."""

    ids: list[int]
    finish_reason: str
    cached_tokens: int
    prompt_seconds: float
    generate_seconds: float
    drafted_tokens: int = 0
    accepted_tokens: int = 0


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
        speculate: bool = False,
        n_batch: int = 512,
    ):
        import llama_cpp

        self.n_batch = n_batch
        self.n_ctx = n_ctx
        self.speculate = speculate
        self._policy = DraftPolicy()  # shared by the sequences: the cost of a round is theirs together
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
        return context_cells(self._ctx)

    def complete(self, prompt: list[int], max_tokens: int, chain: Any, expected: Sequence[int] = ()) -> Iterator[str | Reply]:
        """Text pieces as they come, then the Reply; closing the iterator early cancels it.
        `expected`: ids the reply may repeat from its start, drafted first (PromptLookup)."""
        if self._broken is not None:
            _free_chain(chain)
            raise self._broken
        request = _Request(prompt, max_tokens, chain, started=time.perf_counter())
        if self.speculate:
            request.drafter = PromptLookup(prompt, self._policy, expected)
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
        """One llama_decode: a token (and its drafts) for each generating sequence, then prompt
        pieces in the room left."""
        import llama_cpp

        # (request, token, is it a sampling point); a generating request's drafts follow its token
        items: list[tuple[_Request, int, bool]] = []
        drafts: dict[int, list[int]] = {}  # id(request) -> the drafts decoded after its token
        room = self.n_batch
        generating = [r for r in self._active if r.token is not None and not r.cancelled]
        # The policy weighs each sequence's drafts against the whole round: its width so far, and
        # the tokens expected from it (one per generating sequence, more for drafts taken).
        width, expected = len(generating), float(len(generating))
        for j, request in enumerate(generating):
            assert request.token is not None  # what `generating` holds
            draft: list[int] = []
            if request.drafter is not None:
                past = len(self._history[request.seq]) + 1
                # every generating sequence after this one still needs a place for its token
                limit = min(request.max_tokens - len(request.ids), self.n_ctx - past - 1, room - (len(generating) - j))
                draft = request.drafter.draft(limit, width, expected)
                width += len(draft)
                expected += request.drafter.expected(len(draft)) - 1
            drafts[id(request)] = draft
            items.extend((request, t, True) for t in [request.token, *draft])
            request.drafted += len(draft)
            room -= 1 + len(draft)
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
            started = time.perf_counter()
            decode(self._ctx, self._batch, placed)
            if self.speculate and all(r.token is not None for r, _, _ in items):
                # Rounds of generating sequences alone are the ones whose width drafts change.
                llama_cpp.llama_synchronize(self._ctx)
                self._policy.observe(len(placed), time.perf_counter() - started)
        i = 0
        while i < len(items):
            request, _token, logits = items[i]
            if request.token is None:  # a prompt token
                request.fed += 1
                if logits and not request.cancelled:
                    self._sample(request, i, [])
                i += 1
                continue
            draft = drafts[id(request)]
            if not request.cancelled:
                self._sample(request, i, draft)
            i += 1 + len(draft)
        for request in [r for r in self._active if r.cancelled]:
            self._release(request)

    def _sample(self, request: _Request, index: int, draft: list[int]) -> None:
        """Reads the request's logits from batch position `index` by the rule of take_drafts;
        removes the refused drafts' cells. Ends the reply at an end of turn or its budget."""
        import llama_cpp

        got = take_drafts(
            lambda i: llama_cpp.llama_sampler_sample(request.chain, self._ctx, index + i),
            draft,
            request.max_tokens - len(request.ids),
            lambda token: bool(llama_cpp.llama_vocab_is_eog(self._vocab, token)),
        )
        now = time.perf_counter()
        if request.token is None:
            request.first_token_at = now
        for token in got.tokens:
            request.ids.append(token)
            request.out.put(token)
            if request.drafter is not None:
                request.drafter.add(token)
        if got.tokens:
            request.token = got.tokens[-1]
        if draft:
            assert request.drafter is not None
            request.drafter.checked(len(draft), got.taken)
            request.accepted += got.taken
            history = self._history[request.seq]
            del history[len(history) - (len(draft) - got.cached) :]
            llama_cpp.llama_memory_seq_rm(self._mem, request.seq, len(history), -1)
        if got.ended:
            self._finish(request, "stop", now)
        elif len(request.ids) >= request.max_tokens:
            self._finish(request, "length", now)

    def _finish(self, request: _Request, reason: str, now: float) -> None:
        request.out.put(
            Reply(
                ids=request.ids,
                finish_reason=reason,
                cached_tokens=request.cached,
                prompt_seconds=request.first_token_at - request.started,
                generate_seconds=now - request.first_token_at,
                drafted_tokens=request.drafted,
                accepted_tokens=request.accepted,
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


def context_cells(ctx: Any) -> tuple[int, int]:
    """A llama.cpp context's cells in all, and the cells each sequence may use."""
    import llama_cpp

    return int(llama_cpp.llama_n_ctx(ctx)), int(llama_cpp.llama_n_ctx_seq(ctx))


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens `a` and `b` share, at most `limit`."""
    n = min(len(a), len(b), limit)
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k
