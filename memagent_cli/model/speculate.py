"""Drafts for speculative memory rewrites: prompt-lookup n-grams, and how many of them to check.

A MemAgent memory update is told to "retain all relevant details from the previous memory", so
long runs of the new memory repeat the previous memory, or the chunk, token for token. The
drafter finds the latest earlier place where the text's last few tokens occurred (in the prompt,
which holds both, or in the reply so far) and proposes what followed there. The engine checks the
drafts against the model in one `llama_decode`; this module only guesses, so a bad guess costs
time, never a different distribution (greedy outputs agree up to llama.cpp's batch-shape numerics:
a check's logits are those of a wider decode, docs/PERFORMANCE.md B6). Told what the reply may repeat from its start (the previous
memory), the drafter proposes that, then the end of the turn, while the reply follows it: n-grams
need two tokens of the reply first, and the prompt's copy of the memory ends in a token merged
with the newline after it. `take_drafts` is the one rule by which a check is read.

Whether a check pays depends on the machine: on a GPU a decode of 17 tokens costs about two of
one (B4), on two CPU cores a 1.5B model's costs about ten (B8), since there one token's decode is
already bound by arithmetic. So the engine times its decodes and the policy fits their cost to
the width, counts how often the model takes a drafted token, and drafts the number of tokens
that gives the most tokens per second, none where no number does. While it drafts none it still
scores what it would have drafted against what the model writes, so it notices when the model
starts copying.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# The longest and shortest n-gram looked up. One token matches too often by chance (common
# words); two is where prompt-lookup decoding usually starts.
NGRAM_MAX = 4
NGRAM_MIN = 2
DRAFT_MAX = 16  # the most tokens drafted at once (B4: 16 cost about two single-token decodes on a GPU)
# Until the engine has timed decodes of two widths, a drafted token is assumed to cost this share
# of a one-token decode: cheap enough that drafts get tried, and so timed.
PRIOR_EXTRA = 0.05
DECAY = 0.97  # weight of the past in the policy's counts and fit, per new observation


class DraftPolicy:
    """How many drafted tokens to check at once: the cost of a decode by its width, fitted to
    the engine's own timings (t = a + b * width), and the share of drafted tokens the model takes."""

    def __init__(self, draft_max: int = DRAFT_MAX):
        self.draft_max = draft_max
        self._taken = 0.0  # drafted tokens the model took (decayed count)
        self._refused = 0.0  # drafts it refused a token of
        self._sums = [0.0] * 5  # decayed n, sum w, sum t, sum w*w, sum w*t of timed decodes

    def outcome(self, drafted: int, accepted: int) -> None:
        """A draft of `drafted` tokens was checked (or scored in the shadow): `accepted` were taken."""
        if drafted < 1:
            return
        self._taken = self._taken * DECAY + accepted
        self._refused = self._refused * DECAY + (accepted < drafted)

    @property
    def acceptance(self) -> float:
        """The chance the model takes the next drafted token, given it took the ones before:
        the maximum-likelihood estimate for runs that end at the first refusal, with one taken
        and one refused token as the prior."""
        return (self._taken + 1) / (self._taken + self._refused + 2)

    def observe(self, width: int, seconds: float) -> None:
        """One timed llama_decode of `width` tokens."""
        s = self._sums
        for i, v in enumerate((1.0, width, seconds, width * width, width * seconds)):
            s[i] = s[i] * DECAY + v

    def cost(self) -> tuple[float, float] | None:
        """(a, b): a decode of w tokens takes about a + b * w seconds; None before any timing."""
        n, sw, st, sww, swt = self._sums
        if n <= 0:
            return None
        var = sww / n - (sw / n) ** 2
        if var < 0.25:  # (nearly) one width timed so far: the prior slope
            per = st / sw  # seconds per token at that width
            return per * (1 - PRIOR_EXTRA), per * PRIOR_EXTRA
        b = max(0.0, (swt / n - (sw / n) * (st / n)) / var)
        a = max(st / n - b * sw / n, 1e-9)
        return a, b

    def choose(self, available: int, width: int = 1, tokens: float = 1.0, acceptance: float | None = None) -> int:
        """How many of `available` drafted tokens to decode after a sequence's next token.
        `width` counts the tokens the decode holds already, this sequence's next one included;
        `tokens` what they are expected to yield; `acceptance` replaces the estimate (benchmarks
        ask what a given rate would choose). The most expected tokens per second wins."""
        available = min(available, self.draft_max)
        if available < 1:
            return 0
        fitted = self.cost()
        a, b = fitted if fitted is not None else (1 - PRIOR_EXTRA, PRIOR_EXTRA)
        p = self.acceptance if acceptance is None else acceptance
        best, best_rate, expected = 0, tokens / (a + b * width), 0.0
        for k in range(1, available + 1):
            expected += p**k  # a drafted token counts only if every one before it was taken
            rate = (tokens + expected) / (a + b * (width + k))
            if rate > best_rate:
                best, best_rate = k, rate
        return best


class PromptLookup:
    """Proposes the tokens that followed the latest earlier occurrence of the text's last n-gram."""

    def __init__(self, history: Sequence[int], policy: DraftPolicy | None = None, expected: Sequence[int] = ()):
        self._tokens: list[int] = []
        # _follow[n][n-gram] = the position right after that n-gram's latest occurrence whose
        # next token is known (so the text's own last n-gram never finds itself).
        self._follow: list[dict[tuple[int, ...], int]] = [{} for _ in range(NGRAM_MAX + 1)]
        self.policy = policy or DraftPolicy()
        self._shadow: list[int] = []  # a proposal not decoded, scored against the tokens that come
        self._shadow_taken = 0
        # What the reply may repeat from its start (a memory update's previous memory, then the
        # end of the turn): proposed whole while the reply follows it, before any n-gram has
        # formed; the first n-grams would also lead out of it at the prompt's merged last token.
        self._expected = list(expected)
        self._reply = 0  # tokens added since the prompt
        self._following = bool(self._expected)
        # The prompt's index in one pass per n at C speed (a per-token loop cost 0.85 ms of a
        # 2.5 ms step with the code-word model): where an n-gram recurs, dict() keeps the last
        # position, as _extend does.
        tokens = self._tokens = list(history)
        size = len(tokens)
        for n in range(NGRAM_MIN, NGRAM_MAX + 1):
            if size > n:
                grams = zip(*(tokens[i : size - n + i] for i in range(n)))
                self._follow[n] = dict(zip(grams, range(n, size)))

    def add(self, token: int) -> None:
        """The model wrote `token`."""
        if self._shadow:
            if self._shadow[self._shadow_taken] == token:
                self._shadow_taken += 1
                if self._shadow_taken == len(self._shadow):
                    self._end_shadow()
            else:
                self._end_shadow()
        if self._following:
            self._following = self._reply < len(self._expected) and self._expected[self._reply] == token
        self._reply += 1
        self._extend(token)

    def _extend(self, token: int) -> None:
        tokens = self._tokens
        j = len(tokens)
        for n in range(NGRAM_MIN, NGRAM_MAX + 1):
            if j >= n:
                self._follow[n][tuple(tokens[j - n : j])] = j
        tokens.append(token)

    def _end_shadow(self) -> None:
        self.policy.outcome(len(self._shadow), self._shadow_taken)
        self._shadow, self._shadow_taken = [], 0

    def propose(self, room: int) -> list[int]:
        """Up to `room` tokens (and DRAFT_MAX) that may come next; [] for none."""
        k = min(room, self.policy.draft_max)
        if k < 1:
            return []
        if self._following and self._reply < len(self._expected):
            return self._expected[self._reply : self._reply + k]
        tokens = self._tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(tokens) < n:
                continue
            j = self._follow[n].get(tuple(tokens[-n:]))
            if j is not None:
                return tokens[j : j + k]
        return []

    def draft(self, room: int, width: int = 1, tokens: float = 1.0) -> list[int]:
        """What to decode after the next token: the proposal, cut to the length the policy
        chooses (`width` and `tokens` as in DraftPolicy.choose). A proposal cut to nothing is
        scored in the shadow."""
        proposal = self.propose(room)
        k = self.policy.choose(len(proposal), width, tokens) if proposal else 0
        if k == 0 and proposal and not self._shadow:
            self._shadow = proposal
        return proposal[:k]

    def checked(self, drafted: int, accepted: int) -> None:
        """What the model made of the last draft decoded."""
        self.policy.outcome(drafted, accepted)

    def expected(self, drafted: int) -> float:
        """Tokens a decode of the next token and `drafted` drafts is expected to yield."""
        p = self.policy.acceptance
        return sum(p**i for i in range(drafted + 1))


@dataclass
class Checked:
    """What one decode gave: the reply's new tokens (an end of turn not among them), the drafted
    tokens the model took, how many of them keep their cells (the reply's own), and whether the
    turn ended."""

    tokens: list[int]
    taken: int
    cached: int
    ended: bool


def take_drafts(sample: Callable[[int], int], draft: Sequence[int], room: int, is_end: Callable[[int], bool]) -> Checked:
    """The one rule for reading a decode of a token and `draft` behind it, the lone engine's and
    the batcher's: sample the logits after the token (index 0), then after each drafted token
    while the model chose that drafted token; each sample uses the run's own chain, in order, so
    every token is drawn as plain decoding draws it (from the logits of a wider decode). Stops
    after `room` tokens or at an end of turn (a drafted end of turn the model chose counts as
    taken)."""
    tokens: list[int] = []
    taken = 0
    while True:
        token = sample(taken)
        if is_end(token):
            if taken < len(draft) and draft[taken] == token:
                taken += 1
            return Checked(tokens, taken, min(taken, len(tokens)), True)
        tokens.append(token)
        if len(tokens) >= room:  # this last token, drafted or not, is not counted as taken
            return Checked(tokens, taken, taken, False)
        if taken < len(draft) and draft[taken] == token:
            taken += 1
            continue
        return Checked(tokens, taken, taken, False)
