"""memdiff: exact reconstruction, added/dropped runs, and which steps' additions survive."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from memagent_cli.core.memagent import INITIAL_MEMORY
from memagent_cli.core.memdiff import changes, surviving_additions, word_diff

# Pieces that make hard cases: repeated words, every kind of white space (Unicode ones too,
# which \s and str.split() both count), punctuation glued to words, non-ASCII letters.
PIECES = [
    "the",
    "the",
    "of",
    "cat",
    "sat",
    "mat",
    "Alice",
    "ünï",
    "x.",
    "(3)",
    "`",
    "```",
    " ",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    " \n ",
    "\u00a0",
    "\u2028",
    "\r\n",
]


def _random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


def _mutate(rng: random.Random, text: str) -> str:
    """A plausible edit of `text`: some pieces inserted, dropped or replaced."""
    parts = [p for p in text.split(" ")]
    for _ in range(rng.randint(0, 6)):
        pos = rng.randrange(len(parts) + 1)
        what = rng.random()
        if what < 0.4:
            parts.insert(pos, _random_text(rng, rng.randint(1, 5)))
        elif what < 0.8 and parts:
            del parts[min(pos, len(parts) - 1)]
        elif parts:
            parts[min(pos, len(parts) - 1)] = _random_text(rng, 2)
    return " ".join(parts)


def _check_ops(before: str, after: str, ops: list[tuple[str, str]]) -> None:
    assert "".join(text for kind, text in ops if kind != "delete") == after
    assert "".join(text for kind, text in ops if kind != "insert") == before
    assert all(kind in ("equal", "insert", "delete") and text for kind, text in ops)
    assert all(a[0] != b[0] for a, b in zip(ops, ops[1:])), "adjacent ops of one kind are merged"


@pytest.mark.parametrize("seed", range(6))
def test_word_diff_reconstructs_both_sides_of_random_texts(seed):
    rng = random.Random(seed)
    for _ in range(400):
        before = _random_text(rng, rng.randint(0, 40))
        after = _random_text(rng, rng.randint(0, 40)) if rng.random() < 0.3 else _mutate(rng, before)
        _check_ops(before, after, word_diff(before, after))


@pytest.mark.parametrize("seed", range(3))
def test_word_diff_reconstructs_long_related_memories(seed):
    # Long texts take the anchored (patience) path; short random ones mostly do not.
    rng = random.Random(100 + seed)
    vocab = [f"w{i}" for i in range(400)] + ["the", "of", "and"] * 40
    before = " ".join(rng.choice(vocab) for _ in range(800))
    after = before
    for _ in range(20):
        after = _mutate(rng, after)
    _check_ops(before, after, word_diff(before, after))


def test_word_diff_keeps_words_and_white_space_as_written():
    ops = word_diff("the cat sat on the mat", "the cat slept on the red mat")
    assert ops == [
        ("equal", "the cat "),
        ("delete", "sat"),
        ("insert", "slept"),
        ("equal", " on the "),
        ("insert", "red "),
        ("equal", "mat"),
    ]


def test_word_diff_edge_cases():
    assert word_diff("", "") == []
    assert word_diff("same\ntext ", "same\ntext ") == [("equal", "same\ntext ")]
    assert word_diff("", "new words") == [("insert", "new words")]
    assert word_diff("old words", "") == [("delete", "old words")]
    # Only the white space changed: the words stay equal, the white space is replaced.
    assert word_diff("a b", "a\n\nb") == [("equal", "a"), ("delete", " "), ("insert", "\n\n"), ("equal", "b")]
    # ...and white space that did not change between matched words stays equal with them.
    assert word_diff("a b  c d", "a b\nc d") == [("equal", "a b"), ("delete", "  "), ("insert", "\n"), ("equal", "c d")]


def test_word_diff_is_word_level_not_character_level():
    ops = word_diff("cost 1200 dollars", "cost 1300 dollars")
    assert ("delete", "1200") in ops and ("insert", "1300") in ops


def test_changes_examples():
    assert changes("the cat sat on the mat", "the cat slept on the red mat") == (["slept", "red"], ["sat"])
    assert changes("a b c", "a b c") == ([], [])
    assert changes("a b", "a\n b") == ([], []), "a white-space-only change adds and drops nothing"
    assert changes(INITIAL_MEMORY, "Alice owns the boat.") == (["Alice owns the boat."], [INITIAL_MEMORY])
    assert changes("x y z", "x z") == ([], ["y"])
    assert changes("Bob, 1990.\nCarol, 1991.", "Bob, 1990.\nDan, 1992.\nCarol, 1991.") == (["Dan, 1992."], [])


# --- surviving_additions ------------------------------------------------------------------------


def test_fact_added_and_kept_to_the_end_is_evidence():
    memories = [
        INITIAL_MEMORY,
        "Nothing relevant yet.",
        "Nothing relevant yet. Alice bought the boat in 1990.",
        "Nothing relevant yet. Alice bought the boat in 1990. Harbour is in Kiel.",
        "Alice bought the boat in 1990. Harbour is in Kiel.",
    ]
    # Step 1's words are all dropped at step 4; steps 2 and 3 added what the final memory says.
    assert surviving_additions(memories) == [2, 3]


def test_fact_added_then_dropped_is_not_evidence():
    memories = [INITIAL_MEMORY, "Zebra stripes: 42.", "Zebra stripes: 42. Lions roar.", "Lions roar."]
    assert surviving_additions(memories) == [2]


def test_a_step_that_only_deletes_is_not_evidence():
    memories = [INITIAL_MEMORY, "alpha beta gamma delta", "alpha gamma delta", "alpha delta"]
    assert surviving_additions(memories) == [1]


def test_a_step_that_only_changes_white_space_is_not_evidence():
    memories = [INITIAL_MEMORY, "alpha beta", "alpha\n\nbeta"]
    assert surviving_additions(memories) == [1]


def test_a_re_added_word_counts_for_the_later_step():
    memories = [
        INITIAL_MEMORY,
        "base zebra",  # step 1 adds "zebra" (and "base")
        "base",  # step 2 drops it
        "base zebra",
    ]  # step 3 writes it again: the final "zebra" is step 3's
    assert surviving_additions(memories) == [1, 3]  # 1 for "base", not for its dropped "zebra"
    memories[1] = "zebra"  # now step 1's only word is the dropped one
    memories[2] = "base"
    assert surviving_additions(memories) == [2, 3]


def test_the_last_step_counts_when_it_adds():
    assert surviving_additions([INITIAL_MEMORY, "a", "a b"]) == [1, 2]


def test_no_steps_means_no_evidence():
    assert surviving_additions([]) == []
    assert surviving_additions([INITIAL_MEMORY]) == []


def test_unchanged_memories_credit_only_the_step_that_wrote_them():
    memories = [INITIAL_MEMORY] + ["The answer is 7."] * 5
    assert surviving_additions(memories) == [1]


def _forward_reference(memories: list[str]) -> list[int]:
    """The definition, followed literally: trace every word a step inserted forward through each
    later diff (using only word_diff's output) and see whether it reaches the final memory."""

    def word_map(before: str, after: str) -> tuple[dict[int, int], set[int]]:
        mapping, inserted = {}, set()
        i = j = 0
        for kind, text in word_diff(before, after):
            n = len(text.split())
            if kind == "equal":
                mapping.update((i + k, j + k) for k in range(n))
                i, j = i + n, j + n
            elif kind == "delete":
                i += n
            else:
                inserted.update(range(j, j + n))
                j += n
        return mapping, inserted

    maps = [word_map(a, b) for a, b in zip(memories, memories[1:])]
    result = []
    for k in range(1, len(memories)):
        positions = set(maps[k - 1][1])
        for mapping, _ in maps[k:]:
            positions = {mapping[p] for p in positions if p in mapping}
        if positions:
            result.append(k)
    return result


@pytest.mark.parametrize("seed", range(8))
def test_surviving_additions_matches_the_forward_definition(seed):
    rng = random.Random(seed)
    memory = _random_text(rng, 20)
    memories = [INITIAL_MEMORY, memory]
    for _ in range(30):
        memory = _mutate(rng, memory) if rng.random() < 0.85 else _random_text(rng, rng.randint(0, 20))
        memories.append(memory)
    expected = _forward_reference(memories)
    assert surviving_additions(memories) == expected
    assert expected, "the sequence should have some evidence for the comparison to mean something"


def _synthetic_trace(rng: random.Random, steps: int, words: int, rewrite: float) -> list[str]:
    """Memories shaped like a long run's: ~`words` words (about 1,024 model tokens) with
    Zipf-distributed vocabulary, edited in a few places each step, sometimes rewritten."""
    vocab = [f"word{i}" for i in range(5000)]
    weights = list(itertools.accumulate(1 / (r + 1) for r in range(5000)))

    def text(n: int) -> list[str]:
        return rng.choices(vocab, cum_weights=weights, k=n)

    memory = text(words)
    out = [INITIAL_MEMORY]
    for _ in range(steps):
        if rng.random() < rewrite:
            sentences = [memory[i : i + 15] for i in range(0, len(memory), 15)]
            rng.shuffle(sentences)
            memory = [w for s in sentences[: len(sentences) // 2] for w in s] + text(words // 2)
        for _ in range(rng.randint(1, 20)):
            pos = rng.randrange(len(memory))
            what = rng.random()
            if what < 0.4:
                memory[pos:pos] = text(rng.randint(1, 12))
            elif what < 0.8:
                del memory[pos : pos + rng.randint(1, 12)]
            else:
                memory[pos] = text(1)[0]
        del memory[words:]
        out.append(" ".join(memory))
    return out


@pytest.mark.parametrize("rewrite", [0.0, 0.3])
def test_surviving_additions_over_700_steps_is_fast(rewrite):
    memories = _synthetic_trace(random.Random(7), steps=700, words=750, rewrite=rewrite)
    assert max(len(m) for m in memories) > 4000  # ~1024 tokens' worth of text
    start = time.perf_counter()
    evidence = surviving_additions(memories)
    elapsed = time.perf_counter() - start
    print(f"surviving_additions over 700 steps (rewrite {rewrite}): {elapsed:.3f} s")
    # Target: well under 1 s (about 0.2-0.4 s here); the bound is loose for a shared machine.
    assert elapsed < 5.0, f"700 steps took {elapsed:.2f} s"
    assert evidence == _forward_reference(memories)
    assert 0 < len(evidence) < 700
