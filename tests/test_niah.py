"""NIAH item generation: determinism, needles, lengths (counted with Qwen2 and estimated), JSONL, errors."""

from __future__ import annotations

import json
import re

import pytest

from memagent_cli.errors import EXIT_USAGE, MemagentError
from memagent_cli.evals.niah import ADJECTIVES, HAYSTACK, NOUNS, make_items, write_items

NEEDLE_RE = re.compile(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.")
QUESTION_RE = re.compile(r"What is the special magic number for ([a-z]+-[a-z]+) mentioned in the provided text\?")


@pytest.fixture(scope="module")
def count_qwen2(qwen2_vocab):
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    tok = load_tokenizer(read_gguf(qwen2_vocab))
    return lambda text: len(tok.encode(text))


def test_same_seed_same_items_other_seed_other_items():
    first = make_items(3000, 3, 5, seed=11)
    assert make_items(3000, 3, 5, seed=11) == first
    other = make_items(3000, 3, 5, seed=12)
    assert [item["answers"] for item in other] != [item["answers"] for item in first]
    # Items of one file differ from each other: other question, answer and needle places.
    assert len({item["input"] for item in first}) == 5
    assert len({item["answers"][0] for item in first}) == 5
    assert len({item["context"] for item in first}) == 5
    assert len({item["id"] for item in first}) == 5


def test_generator_leaves_global_random_alone():
    import random

    random.seed(5)
    expected = random.random()
    random.seed(5)
    make_items(2000, 2, 2, seed=1)
    assert random.random() == expected


@pytest.mark.parametrize("needles", [1, 4])
def test_needles_and_answer(needles):
    for item in make_items(5000, needles, 6, seed=3):
        context = item["context"]
        planted = NEEDLE_RE.findall(context)
        assert len(planted) == needles
        keys = [key for key, _ in planted]
        values = [value for _, value in planted]
        assert len(set(keys)) == needles and len(set(values)) == needles  # distractors differ from the asked needle
        (asked,) = QUESTION_RE.fullmatch(item["input"]).groups()
        (answer,) = item["answers"]
        assert context.count(f"One of the special magic numbers for {asked} is: {answer}.") == 1
        assert context.count(asked) == 1
        assert context.count(answer) == 1
        # Every line is the haystack (or its start, at the very end) or a needle.
        for line in context.split("\n"):
            assert line == HAYSTACK or NEEDLE_RE.fullmatch(line) or HAYSTACK.startswith(line)


def test_needles_spread_over_the_document():
    # One needle per quarter: the i-th needle from the top starts within the i-th quarter of the text.
    for item in make_items(20000, 4, 5, seed=8):
        context = item["context"]
        starts = sorted(m.start() / len(context) for m in NEEDLE_RE.finditer(context))
        for i, start in enumerate(starts):
            assert i / 4 - 0.01 <= start <= (i + 1) / 4 + 0.01
    # The asked needle's depth is not fixed: over 30 single-needle items it reaches both ends.
    depths = [item["context"].index("One of") / len(item["context"]) for item in make_items(4000, 1, 30, seed=2)]
    assert min(depths) < 0.15 and max(depths) > 0.85


def test_keys_never_contain_one_another():
    keys = [f"{a}-{n}" for a in ADJECTIVES for n in NOUNS]
    assert len(set(keys)) == len(ADJECTIVES) * len(NOUNS)
    assert not [(a, b) for a in ADJECTIVES for b in ADJECTIVES if a != b and b.endswith(a)]
    assert not [(a, b) for a in NOUNS for b in NOUNS if a != b and b.startswith(a)]


@pytest.mark.parametrize("tokens", [500, 7000, 128_000])
def test_estimated_lengths(tokens):
    for item in make_items(tokens, 3, 2, seed=4):
        assert 0.95 * tokens <= item["length"] <= tokens
        # 24 tokens a line: a 128K context has thousands of lines, a 500-token one about 18.
        assert item["context"].count(HAYSTACK) >= (tokens - 3 * 23) // 24 - 1


@pytest.mark.parametrize("tokens, needles", [(300, 1), (8000, 3), (100_000, 5), (1_000_000, 2)])
def test_counted_lengths_with_qwen2(count_qwen2, tokens, needles):
    for item in make_items(tokens, needles, 1 if tokens > 100_000 else 3, seed=9, count_tokens=count_qwen2):
        counted = count_qwen2(item["context"])
        assert item["length"] == counted
        assert 0.95 * tokens <= counted <= tokens
        # As close as possible: one more sentence (4 or 5 tokens) would not have fit.
        assert counted > tokens - 5


@pytest.mark.parametrize("tokens", [2000, 56_000])
def test_estimate_is_right_for_qwen2(count_qwen2, tokens):
    estimated = make_items(tokens, 4, 3, seed=6)
    for item in estimated:
        assert abs(count_qwen2(item["context"]) - item["length"]) <= 4 * 2  # a needle is 20 to 23 tokens, estimated 21
        assert abs(count_qwen2(item["context"]) - tokens) <= 0.05 * tokens
    # A tokenizer changes the amount of filler only: the same seed plants the same needles.
    counted = make_items(tokens, 4, 3, seed=6, count_tokens=count_qwen2)
    assert [item["answers"] for item in counted] == [item["answers"] for item in estimated]
    assert [NEEDLE_RE.findall(item["context"]) for item in counted] == [NEEDLE_RE.findall(item["context"]) for item in estimated]


def test_counted_lengths_with_a_counter_that_does_not_add_up():
    # A counter with a fixed cost per call (like a BOS token) and word-based costs: the sizing
    # must still land just under the target, whatever the tokenizer.
    def count(text):
        return len(text.split()) + 1

    for tokens in (400, 9000, 250_000):
        for item in make_items(tokens, 3, 2, seed=1, count_tokens=count):
            assert item["length"] == count(item["context"])
            assert tokens - 5 <= item["length"] <= tokens


def test_jsonl_round_trip(tmp_path):
    items = make_items(1500, 2, 3, seed=21)
    items.append({"id": "unicode", "context": "Ärger über Café — 東京", "input": "¿Qué?", "answers": ["ö"], "length": 9})
    path = tmp_path / "niah.jsonl"
    path.write_text("old content\n", encoding="utf-8")
    write_items(items, path)
    raw = path.read_bytes()
    assert "Café — 東京".encode() in raw  # written as UTF-8, not \u escapes
    lines = raw.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(items) + 1
    assert [json.loads(line) for line in lines[:-1]] == items
    assert [p.name for p in tmp_path.iterdir()] == ["niah.jsonl"]  # no temporary file left


def test_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "niah.jsonl"
    path.write_text("old content\n", encoding="utf-8")
    items = make_items(1000, 1, 2, seed=1) + [{"id": object()}]  # not JSON: fails after the first lines
    with pytest.raises(TypeError):
        write_items(items, path)
    assert path.read_text(encoding="utf-8") == "old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["niah.jsonl"]


def test_write_into_missing_folder(tmp_path):
    with pytest.raises(MemagentError) as caught:
        write_items(make_items(1000, 1, 1, seed=1), tmp_path / "nowhere" / "niah.jsonl")
    assert "nowhere" in str(caught.value)


@pytest.mark.parametrize(
    "tokens, needles, n, words",
    [
        (1000, 0, 5, "--needles"),
        (1000, -2, 5, "--needles"),
        (1000, 2, 0, "--n "),
        (30, 2, 5, "--tokens 30"),  # two needles (about 42 tokens) and a question do not fit
        (0, 1, 1, "--tokens 0"),
        (10**7, 2000, 1, "--needles 2000"),
    ],
)
def test_bad_arguments(tokens, needles, n, words):
    with pytest.raises(MemagentError) as caught:
        make_items(tokens, needles, n, seed=0)
    error = caught.value
    assert error.exit_code == EXIT_USAGE
    assert words in str(error) and error.hint
    assert "\n" not in str(error)


def test_too_small_for_the_counted_needles(count_qwen2):
    # Seed 1's needles and question cost 61 Qwen2 tokens, more than the estimate's 2 x 21 + 16 = 58:
    # 60 passes the estimate, but not the count.
    assert make_items(60, 2, 1, seed=1)[0]["length"] <= 60
    with pytest.raises(MemagentError) as caught:
        make_items(60, 2, 1, seed=1, count_tokens=count_qwen2)
    assert caught.value.exit_code == EXIT_USAGE
    assert str(caught.value) == (
        "--tokens 60 is too small to hold 2 needles and the question (about 61 tokens). Use --tokens 61 or more."
    )
    (item,) = make_items(61, 2, 1, seed=1, count_tokens=count_qwen2)
    assert len(NEEDLE_RE.findall(item["context"])) == 2 and item["length"] == count_qwen2(item["context"]) <= 61
