"""Drafts for speculative memory rewrites: prompt-lookup n-grams.

A MemAgent memory update is told to "retain all relevant details from the previous memory", so
long runs of the new memory repeat the previous memory, or the chunk, token for token. The
drafter finds the latest earlier place where the text's last few tokens occurred (in the prompt,
which holds both, or in the reply so far) and proposes what followed there. The engine checks the
drafts against the model in one `llama_decode`; this module only guesses, so a bad guess costs
time, never a different output.

How many tokens it drafts adapts to how well it has been guessing in this reply: a model that
copies gets long drafts, one that does not gets few, and none where no n-gram matches.
"""

from __future__ import annotations

from collections.abc import Sequence

# The longest and shortest n-gram looked up. One token matches too often by chance (common
# words); two is where prompt-lookup decoding usually starts.
NGRAM_MAX = 4
NGRAM_MIN = 2
DRAFT_MAX = 16  # the most tokens drafted at once (B4: 16 cost about two single-token decodes on a GPU)
DRAFT_START = 8


class PromptLookup:
    """Proposes the tokens that followed the latest earlier occurrence of the text's last n-gram."""

    def __init__(self, history: Sequence[int], *, draft_max: int = DRAFT_MAX):
        self._tokens: list[int] = []
        # _follow[n][n-gram] = the position right after that n-gram's latest occurrence whose
        # next token is known (so the text's own last n-gram never finds itself).
        self._follow: list[dict[tuple[int, ...], int]] = [{} for _ in range(NGRAM_MAX + 1)]
        self.draft_max = draft_max
        self._limit = min(DRAFT_START, draft_max)
        for token in history:
            self.add(token)

    def add(self, token: int) -> None:
        tokens = self._tokens
        j = len(tokens)
        for n in range(NGRAM_MIN, NGRAM_MAX + 1):
            if j >= n:
                self._follow[n][tuple(tokens[j - n : j])] = j
        tokens.append(token)

    def draft(self, room: int) -> list[int]:
        """Up to `room` tokens (and the current adaptive limit) that may come next; [] for none."""
        k = min(room, self._limit)
        if k < 1:
            return []
        tokens = self._tokens
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(tokens) < n:
                continue
            j = self._follow[n].get(tuple(tokens[-n:]))
            if j is not None:
                return tokens[j : j + k]
        return []

    def checked(self, drafted: int, accepted: int) -> None:
        """What the model made of the last draft: a fully taken draft doubles the next one's
        length, a fully refused one halves it (down to one)."""
        if drafted == 0:
            return
        if accepted == drafted:
            self._limit = min(self.draft_max, self._limit * 2)
        elif accepted == 0:
            self._limit = max(1, self._limit // 2)
