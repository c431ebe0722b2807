"""Offline generator of RULER-style needle-in-a-haystack items (`memagent eval make-niah`).

This module owns making NIAH items and writing them as JSONL; the CLI wiring lives elsewhere.
An item is in the layout of the authors' RULER-HotpotQA files, plus its length:
`{"id", "context", "input" (the question), "answers": [value], "length": tokens of context}`.

It follows RULER's NIAH generator (hsiehjackson/RULER, `scripts/data/synthetic/niah.py`) with
its "noise" haystack (called "repeat" in early versions):

- the haystack is RULER's noise text, one copy per line, lines joined by "\\n";
- each needle is RULER's template, "One of the special magic numbers for {key} is: {value}.",
  on a line of its own between haystack lines; the key is an adjective-noun pair like RULER's
  wonderwords keys (from the small lists below, so no download), the value a 7-digit number;
- the question is RULER's single-answer query, "What is the special magic number for {key}
  mentioned in the provided text?", asking for one needle; the others are distractors with
  other keys and values.

Where we differ: RULER draws needle places uniformly and sizes the whole prompt in steps of 25
haystack lines. We place one needle in each of K equal stretches of the document (so
distractors surround the asked needle at every depth) and size the context alone, to the
sentence: the last haystack line may stop after any of its five sentences.
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypedDict

from .. import paths
from ..errors import EXIT_USAGE, MemagentError

# RULER's noise haystack, verbatim; a document is this line repeated.
HAYSTACK = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
_SENTENCES = ("The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.")
# _PARTIALS[k]: the first k sentences of a haystack line, for sizing below one whole line.
_PARTIALS = tuple(" ".join(_SENTENCES[:k]) for k in range(len(_SENTENCES)))
NEEDLE = "One of the special magic numbers for {key} is: {value}."
QUESTION = "What is the special magic number for {key} mentioned in the provided text?"

# Token costs under Qwen2's byte-level BPE (measured with ../shared/fixtures/ggml-vocab-qwen2.gguf),
# used when no tokenizer is given. A haystack line is 24 tokens and the "\n" joining lines costs
# nothing: the pre-tokenizer takes ".\n" as one piece, which is one token. Costs add up line by
# line, so for Qwen2 the estimate is exact for the haystack and off by at most 2 tokens a needle.
LINE_TOKENS = 24
# Cost of the first k sentences of a line, k = 0..4 (5, 5, 5, 4, 5 tokens per sentence).
PARTIAL_TOKENS = (0, 5, 10, 15, 19)
# A needle costs 20 to 23 tokens depending on how its key splits (mean 21.3 over all keys),
# a question 15 to 18; the estimate takes the rounded mean.
NEEDLE_TOKENS = 21
QUESTION_TOKENS = 16

# Keys are "adjective-noun". No adjective ends another and no noun starts another, so no key
# is a substring of another: the asked key then occurs in the context exactly once.
ADJECTIVES = (
    "amber",
    "bitter",
    "brave",
    "calm",
    "clever",
    "crimson",
    "dusty",
    "eager",
    "faded",
    "fierce",
    "gentle",
    "golden",
    "hollow",
    "humble",
    "icy",
    "jolly",
    "lively",
    "lucky",
    "misty",
    "nimble",
    "olive",
    "proud",
    "quiet",
    "rapid",
    "rusty",
    "silent",
    "silver",
    "sturdy",
    "tidy",
    "velvet",
    "wild",
    "windy",
)
NOUNS = (
    "anchor",
    "badger",
    "beacon",
    "canyon",
    "cedar",
    "comet",
    "compass",
    "falcon",
    "fern",
    "garden",
    "glacier",
    "harbor",
    "harvest",
    "island",
    "lantern",
    "maple",
    "meadow",
    "meteor",
    "orchard",
    "otter",
    "pebble",
    "quarry",
    "raven",
    "ridge",
    "river",
    "saddle",
    "summit",
    "thistle",
    "tunnel",
    "valley",
    "walnut",
    "willow",
)
_KEYS = tuple(f"{adjective}-{noun}" for adjective in ADJECTIVES for noun in NOUNS)


class NiahItem(TypedDict):
    """An item as make_items writes it: the eval's input format, plus the context's token length."""

    id: str
    context: str
    input: str  # the question
    answers: list[str]
    needle: str  # the asked needle's sentence
    length: int


def make_items(tokens: int, needles: int, n: int, seed: int, count_tokens: Callable[[str], int] | None = None) -> list[NiahItem]:
    """n NIAH items whose context is as long as fits in `tokens` tokens, each with K=`needles` needles.

    With `count_tokens` the length is counted (and the context never exceeds `tokens`);
    without it, it is estimated from Qwen2 token costs. The same arguments give the same items.
    """
    if needles < 1:
        raise MemagentError(
            f"--needles must be at least 1 (got {needles})",
            "Use --needles 1 for a single fact, more to add distractors.",
            exit_code=EXIT_USAGE,
        )
    if needles > len(_KEYS):
        raise MemagentError(
            f"--needles {needles} is more than the {len(_KEYS)} distinct keys there are",
            f"Use --needles {len(_KEYS)} or fewer.",
            exit_code=EXIT_USAGE,
        )
    if n < 1:
        raise MemagentError(f"--n must be at least 1 (got {n})", "Use --n 1 or more.", exit_code=EXIT_USAGE)
    # Checked with the estimate before any work; a real tokenizer's costs are checked per item.
    _check_room(tokens, needles, needles * NEEDLE_TOKENS + QUESTION_TOKENS)

    # Our own generator: the global one is shared with the rest of the process, and a seed
    # must give the same file whatever else ran before.
    rng = random.Random(seed)
    sizer = _CountedSizer(count_tokens) if count_tokens is not None else None
    items: list[NiahItem] = []
    asked_before: set[tuple[str, str]] = set()
    while len(items) < n:
        # Every random draw comes before sizing, so a seed plants the same needles at the same
        # depths with or without a tokenizer; only the amount of filler differs.
        keys = rng.sample(_KEYS, needles)
        values = [str(v) for v in rng.sample(range(10**6, 10**7), needles)]
        asked = rng.randrange(needles)
        # One needle per stretch, in random order: the asked needle's depth is uniform over the
        # document, and distractors are spread around it instead of bunched by chance.
        stretches = list(range(needles))
        rng.shuffle(stretches)
        depths = [(s + rng.random()) / needles for s in stretches]
        if (keys[asked], values[asked]) in asked_before:
            continue  # items must differ; a repeat is astronomically rare but costs nothing to rule out
        asked_before.add((keys[asked], values[asked]))

        planted = [NEEDLE.format(key=key, value=value) for key, value in zip(keys, values)]
        question = QUESTION.format(key=keys[asked])
        if sizer is None:
            sentences = _estimate_sentences(tokens, needles)
            context = _build(sentences, planted, depths)
            length = needles * NEEDLE_TOKENS + _filler_estimate(sentences)
        else:
            context, length = sizer.fit(tokens, planted, depths, question)
        items.append(
            {
                "id": f"niah-{tokens}-{needles}-{seed}-{len(items)}",
                "context": context,
                "input": question,
                "answers": [values[asked]],
                "needle": planted[asked],  # the sentence an answer rests on: eval's quote_hit looks for it
                "length": length,
            }
        )
    return items


def write_items(items: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Writes items as JSONL (UTF-8, one object per line), replacing `path` only once all is written."""
    path = Path(path)
    # Written whole or not at all: an interrupted run leaves the old file (or none), never half a
    # file that a later eval would read as a short benchmark.
    opened = False
    try:
        with paths.atomic_write(path, encoding="utf-8", newline="\n") as f:
            opened = True
            for item in items:
                f.write(json.dumps(item, ensure_ascii=False) + "\n")
    except OSError as e:
        hint = "Check the disk and the permissions." if opened else "Check that its folder exists and is writable."
        raise MemagentError(f"cannot write {path}: {e.strerror}", hint) from e


def _check_room(tokens: int, needles: int, need: int) -> None:
    if tokens < need:
        plural = "s" if needles > 1 else ""
        raise MemagentError(
            f"--tokens {tokens} is too small to hold {needles} needle{plural} and the question (about {need} tokens)",
            f"Use --tokens {need} or more.",
            exit_code=EXIT_USAGE,
        )


def _filler_estimate(sentences: int) -> int:
    lines, rest = divmod(sentences, len(_SENTENCES))
    return lines * LINE_TOKENS + PARTIAL_TOKENS[rest]


def _estimate_sentences(tokens: int, needles: int) -> int:
    """The most haystack sentences whose estimated cost, with the needles', stays within `tokens`."""
    budget = tokens - needles * NEEDLE_TOKENS
    lines, rest = divmod(budget, LINE_TOKENS)
    return lines * len(_SENTENCES) + max(k for k, cost in enumerate(PARTIAL_TOKENS) if cost <= rest)


def _build(sentences: int, planted: list[str], depths: list[float]) -> str:
    """The context: `sentences` haystack sentences in lines, each needle on its own line at its depth."""
    whole, rest = divmod(sentences, len(_SENTENCES))
    lines = [HAYSTACK] * whole + ([_PARTIALS[rest]] if rest else [])
    # A needle goes at a line boundary (0 = before the first line, len = after the last), as in
    # RULER; inserting from the deepest up keeps the shallower boundaries' indexes valid.
    places = [min(len(lines), int(depth * (len(lines) + 1))) for depth in depths]
    for place, needle in sorted(zip(places, planted), reverse=True):
        lines.insert(place, needle)
    return "\n".join(lines)


class _CountedSizer:
    """Sizes contexts with a real token counter, counting each full context about once.

    Each piece's cost is measured once, as what it adds after a haystack line; summing those
    predicts a context's count (exactly for byte-level BPE, where pieces split at the line
    starts). The prediction is then checked by one count of the whole context and corrected
    in whole sentences if the counter is not additive, so a 1M-token item costs one or two
    counts, not one per step.
    """

    def __init__(self, count_tokens: Callable[[str], int]):
        self.count = count_tokens
        alone = count_tokens(HAYSTACK)
        self.line = count_tokens(HAYSTACK + "\n" + HAYSTACK) - alone
        if self.line < 1:
            raise ValueError("count_tokens gives a haystack line no tokens")
        self.partials = [0] + [count_tokens(HAYSTACK + "\n" + p) - alone for p in _PARTIALS[1:]]
        # What a text costs beyond its pieces (a BOS token some counters add): paid once.
        self.fixed = alone - self.line
        self._alone = alone

    def _piece(self, text: str) -> int:
        return self.count(HAYSTACK + "\n" + text) - self._alone

    def _filler(self, sentences: int) -> int:
        lines, rest = divmod(sentences, len(_SENTENCES))
        return lines * self.line + self.partials[rest]

    def fit(self, tokens: int, planted: list[str], depths: list[float], question: str) -> tuple[str, int]:
        needle_cost = sum(self._piece(p) for p in planted)
        _check_room(tokens, len(planted), self.fixed + needle_cost + self.count(question))
        budget = tokens - self.fixed - needle_cost
        lines, rest = divmod(budget, self.line)
        guess = lines * len(_SENTENCES) + max(k for k, cost in enumerate(self.partials) if cost <= rest)

        best: tuple[int, str, int] | None = None  # (sentences, context, count): the longest seen that fits
        too_many = math.inf  # the fewest sentences seen that do not fit
        sentences = guess
        for _ in range(32):  # a non-additive counter converges in a few rounds; the cap only guards a broken one
            context = _build(sentences, planted, depths)
            count = self.count(context)
            if count <= tokens:
                if best is None or sentences > best[0]:
                    best = (sentences, context, count)
                if sentences == guess and count == self.fixed + needle_cost + self._filler(sentences):
                    break  # the prediction held, and the guess is the most it allows
                # The room left, in sentences of average cost; one more to try when less than that is left.
                step = (tokens - count) * len(_SENTENCES) // self.line or (1 if count < tokens else 0)
                following = sentences + step
            else:
                too_many = min(too_many, sentences)
                following = sentences - max(1, math.ceil((count - tokens) * len(_SENTENCES) / self.line))
            low = best[0] + 1 if best is not None else 0
            if low > too_many - 1 or following == sentences:
                break  # every count in between is known: nothing left to try
            sentences = int(min(max(following, low), too_many - 1))
        if best is None:
            # Even no filler at all is over: the needles cost more under this counter than the
            # room check before could see.
            _check_room(tokens, len(planted), self.count(_build(0, planted, depths)) + self.count(question))
            raise ValueError(f"count_tokens gives no context of needles within {tokens} tokens")
        return best[1], best[2]
