"""Word-level diffs between memory texts, and which steps' additions reach the final memory.

This module owns the diff that exports (and anything else that shows how a memory changed) use,
so that every view of a trace agrees on what a step added and dropped. Stdlib only.

Texts are split into tokens that are runs of white space or runs of anything else
(``re.findall(r"\\s+|\\S+")``); only the non-white-space tokens count as words. Words are matched
(patience diff on words unique to both sides, ``difflib.SequenceMatcher(autojunk=False)`` for the
gaps between them; see _word_blocks), and the white space around and between matched words is
kept as "equal" where it is the same on both sides, so the "equal" and "insert" texts of a diff
join back into the new memory exactly and the "equal" and "delete" texts into the old one.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from difflib import SequenceMatcher
from typing import Any, Mapping, Sequence, Union

from .memagent import INITIAL_MEMORY

_TOKEN = re.compile(r"\s+|\S+")

EQUAL, INSERT, DELETE = "equal", "insert", "delete"

# Work items of _word_blocks: (i, j, n) a matching block, (alo, ahi, blo, bhi) a pair of ranges to diff.
_Piece = Union[tuple[int, int, int], tuple[int, int, int, int]]


def _split(text: str) -> tuple[list[str], range]:
    """The tokens of `text`, and the token positions of its words."""
    tokens = _TOKEN.findall(text)
    # Both kinds of run are maximal, so they alternate: the words are every other token.
    first = 1 if tokens and tokens[0].isspace() else 0
    return tokens, range(first, len(tokens), 2)


def _word_blocks(a: list[str], b: list[str]) -> list[tuple[int, int, int]]:
    """Matching blocks ``(i, j, n)``: words a[i:i+n] equal b[j:j+n]; increasing, none empty.

    Patience diff: after the common head and tail are peeled off, the words that occur exactly
    once in both ranges are candidate anchors, the longest chain of them in the same order on both
    sides is kept, and the gaps between anchors are diffed the same way; a gap with no such word
    goes to SequenceMatcher(autojunk=False). Why not SequenceMatcher on everything: its cost grows
    with the square of how often a word repeats, and memories repeat "the" and "of" (and every
    single space, had white space been matched too). 700 diffs of ~750-word memories took 16-33 s
    on all tokens, 0.6-2.2 s on words, and 0.2-0.7 s this way. Anchoring on rare words also reads
    better: a rewritten memory is not stitched to the old one through scattered common words.
    """
    blocks: list[tuple[int, int, int]] = []
    # An explicit stack rather than recursion (no depth limit); each range is replaced by its
    # pieces in order, pushed in reverse so that blocks come out left to right.
    work: list[_Piece] = [(0, len(a), 0, len(b))]  # 4-tuple: a range to diff; 3-tuple: a block
    while work:
        item = work.pop()
        if len(item) == 3:
            i, j, n = item
            if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
                blocks[-1] = (blocks[-1][0], blocks[-1][1], blocks[-1][2] + n)
            else:
                blocks.append(item)
            continue
        alo, ahi, blo, bhi = item
        # A memory update mostly edits a few places: peel the common ends off first.
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
            tail += 1
        ahi, bhi = ahi - tail, bhi - tail
        pieces: list[_Piece] = [(alo - head, blo - head, head)] if head else []
        if alo < ahi and blo < bhi:
            pieces += _split_range(a, alo, ahi, b, blo, bhi)
        if tail:
            pieces.append((ahi, bhi, tail))
        work.extend(reversed(pieces))
    return blocks


def _split_range(a: list[str], alo: int, ahi: int, b: list[str], blo: int, bhi: int) -> list[_Piece]:
    """One level of the diff of two non-empty ranges: blocks (i, j, n) and sub-ranges, in order."""
    if ahi - alo == 1 or bhi - blo == 1:
        # One word against a run (most gaps between anchors are this small): it matches the
        # first copy on the other side, or nothing. Cheaper than building a matcher.
        try:
            if ahi - alo == 1:
                return [(alo, b.index(a[alo], blo, bhi), 1)]
            return [(a.index(b[blo], alo, ahi), blo, 1)]
        except ValueError:
            return []
    anchors = _anchors(a, alo, ahi, b, blo, bhi)
    if not anchors:
        matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
        return [(i + alo, j + blo, n) for i, j, n in matcher.get_matching_blocks() if n]
    pieces: list[_Piece] = []
    for i, j in anchors:
        pieces += [(alo, i, blo, j), (i, j, 1)]
        alo, blo = i + 1, j + 1
    pieces.append((alo, ahi, blo, bhi))
    return pieces


def _anchors(a: list[str], alo: int, ahi: int, b: list[str], blo: int, bhi: int) -> list[tuple[int, int]]:
    """The longest chain of words unique to both ranges that is in the same order on both sides."""
    sa, sb = a[alo:ahi], b[blo:bhi]
    unique_a = {w for w, c in Counter(sa).items() if c == 1}
    common = {w for w, c in Counter(sb).items() if c == 1} & unique_a
    if not common:
        return []
    where_a = {w: i for i, w in enumerate(sa, alo) if w in common}
    # In b's order; the chain must increase in a as well.
    pairs = [(where_a[w], j) for j, w in enumerate(sb, blo) if w in common]
    # Longest increasing subsequence of the a positions (patience sorting with back links).
    tops: list[int] = []  # tops[k]: the smallest a position that ends a chain of length k+1
    ends: list[int] = []  # the index in pairs of that chain's last pair
    back = [-1] * len(pairs)
    for n, (i, _) in enumerate(pairs):
        k = bisect_left(tops, i)
        if k == len(tops):
            tops.append(i)
            ends.append(n)
        else:
            tops[k] = i
            ends[k] = n
        back[n] = ends[k - 1] if k else -1
    chain = []
    n = ends[-1]
    while n >= 0:
        chain.append(pairs[n])
        n = back[n]
    chain.reverse()
    return chain


def word_diff(before: str, after: str) -> list[tuple[str, str]]:
    """Ops ``(kind, text)`` in order, kind one of "equal", "insert", "delete".

    A replaced run becomes a delete followed by an insert. Adjacent ops of the same kind are
    merged, and no op has empty text.
    """
    a, a_words = _split(before)
    b, b_words = _split(after)

    # Token runs (ta, tb, n) kept "equal", increasing on both sides: the matched words, and the
    # white space around and between them where it is identical on both sides.
    kept: list[tuple[int, int, int]] = []

    def keep(ta: int, tb: int, n: int) -> None:
        if kept:
            pa, pb, pn = kept[-1]
            if ta < pa + pn or tb < pb + pn:
                return  # white space already kept as the end of the previous block
            if ta == pa + pn and tb == pb + pn:
                kept[-1] = (pa, pb, pn + n)
                return
        kept.append((ta, tb, n))

    for i, j, n in _word_blocks(a[a_words.start :: 2], b[b_words.start :: 2]):
        ta, tb = a_words[i], b_words[j]
        # The token before a word, if any, is white space (words are maximal runs).
        if ta > 0 and tb > 0 and a[ta - 1] == b[tb - 1]:
            keep(ta - 1, tb - 1, 1)
        ea, eb = a_words[i + n - 1] + 1, b_words[j + n - 1] + 1
        if a[ta:ea] == b[tb:eb]:  # the usual case: the white space inside the block matches too
            keep(ta, tb, ea - ta)
        else:
            for k in range(n):
                ta, tb = a_words[i + k], b_words[j + k]
                if k and a[ta - 1] == b[tb - 1]:
                    keep(ta - 1, tb - 1, 1)
                keep(ta, tb, 1)
        if ea < len(a) and eb < len(b) and a[ea] == b[eb]:
            keep(ea, eb, 1)

    ops: list[tuple[str, str]] = []

    def put(kind: str, text: str) -> None:
        if ops and ops[-1][0] == kind:  # a guard: kept runs are merged, so equal runs never touch
            ops[-1] = (kind, ops[-1][1] + text)
        else:
            ops.append((kind, text))

    ia = ib = 0
    for ta, tb, n in kept + [(len(a), len(b), 0)]:
        if ta > ia:
            put(DELETE, "".join(a[ia:ta]))
        if tb > ib:
            put(INSERT, "".join(b[ib:tb]))
        if n:
            put(EQUAL, "".join(a[ta : ta + n]))
        ia, ib = ta + n, tb + n
    return ops


def changes(before: str, after: str) -> tuple[list[str], list[str]]:
    """(added runs, dropped runs): the inserted and deleted texts, stripped, empty ones left out."""
    return split_changes(word_diff(before, after))


def split_changes(ops: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """changes() from ops word_diff already made, for callers that show both."""
    added: list[str] = []
    dropped: list[str] = []
    for kind, text in ops:
        text = text.strip()
        if not text:
            continue  # a change of white space only adds or drops nothing
        if kind == INSERT:
            added.append(text)
        elif kind == DELETE:
            dropped.append(text)
    return added, dropped


def surviving_additions(memories: list[str]) -> list[int]:
    """Steps (1-based) whose update added words that are still in the final memory, ascending.

    ``memories[0]`` is the initial memory, ``memories[k]`` the memory after step k. A word inserted
    by step k survives a later step when that step's diff keeps it "equal"; step k counts when one
    of its words reaches the last memory.

    Following every inserted word forward through every later diff would be quadratic in the
    number of steps, so this walks backwards once instead: word i of memory j reaches the end when
    diff j -> j+1 maps it, inside an "equal" block, onto a word of memory j+1 that reaches the end.
    That is one diff per step plus linear bookkeeping, and the same answer.
    """
    if len(memories) < 2:
        return []
    words = [m.split() for m in memories]  # the same words _split finds, without the white space
    alive = [True] * len(words[-1])  # alive[p]: word p of memory j reaches the final memory
    evidence: list[int] = []
    for j in range(len(words) - 1, 0, -1):  # step j turned memory j-1 into memory j
        before, after = words[j - 1], words[j]
        alive_before = [False] * len(before)
        kept = [False] * len(after)  # words of memory j that step j carried over from memory j-1
        for i, k, n in _word_blocks(before, after):
            alive_before[i : i + n] = alive[k : k + n]
            kept[k : k + n] = [True] * n
        if any(live and not old for live, old in zip(alive, kept)):
            evidence.append(j)
        alive = alive_before
    evidence.reverse()
    return evidence


def evidence_steps(steps: Sequence[Mapping[str, Any]]) -> list[int]:
    """The evidence of a run: the indices of the steps (step dicts, as `StepRecord.to_dict` and the
    trace store give them) whose additions are still in the final memory, ascending. The answer is
    written from that memory alone, so these are the steps whose reading it can rest on. The one
    definition behind `ask --json`, `traces show`, the live view and the exports."""
    memories = [INITIAL_MEMORY] + [step.get("memory") or "" for step in steps]
    return [steps[k - 1].get("index", k) for k in surviving_additions(memories)]


def evidence_record(step: Mapping[str, Any]) -> dict[str, Any]:
    """An evidence step as JSON gives it (docs/JSON.md, "evidence"): the step and where it read."""
    return {"step": step["index"], "spans": list(step.get("spans") or [])}
