"""Answer scoring: the MemAgent authors' sub_em / em / F1, checked on the reference's edge cases,
and OpenAI MRCR's grade.

Every expected value is worked out by hand from the reference's rules (see memagent_cli/evals/scoring.py).
"""

from __future__ import annotations

import pytest

from memagent_cli.evals.scoring import best, em, f1, mrcr, normalize, score, sub_em


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("an apple a day", "apple day"),
        ("A-team", "ateam"),  # punctuation goes first, so this "a" is no article
        ("theatre and anthem", "theatre and anthem"),  # articles only as whole words
        ("U.S.A.!", "usa"),
        ("  New\tYork\n City  ", "new york city"),
        ("Paris\u00a0France", "paris france"),  # str.split() treats NBSP as white space
        ("THE END", "end"),
        ("the", ""),
        ("...", ""),
        ("", ""),
        ("1,000,000", "1000000"),
        ("3.5 km", "35 km"),
        ("Café Müller", "café müller"),
        ("“Paris”", "“paris”"),  # only ASCII punctuation is removed
        ("東京 the タワー", "東京 タワー"),
        ("rock_and_roll", "rockandroll"),  # "_" is in string.punctuation
    ],
)
def test_normalize(text, expected):
    assert normalize(text) == expected


def test_em_ignores_case_articles_punctuation_and_spacing():
    assert em("The  Eiffel tower.", "eiffel Tower") == 1.0
    assert em("Eiffel", "Eiffel Tower") == 0.0
    assert em("3.5", "35") == 1.0  # the reference's normalization makes these equal
    assert em("1,000", "1000") == 1.0
    assert em("“Paris”", "Paris") == 0.0  # curly quotes survive normalization


def test_sub_em_contains_both_ways():
    assert sub_em("It is the city of Paris, France.", "Paris") == 1.0  # gold in prediction
    assert sub_em("Paris", "Paris, France") == 1.0  # prediction in gold
    assert sub_em("London", "Paris") == 0.0
    assert sub_em("“Paris”", "Paris") == 1.0
    # Characters, not words: the reference finds "12" in "2012" and "par" in "paris".
    assert sub_em("in 2012", "12") == 1.0
    assert sub_em("par", "Paris") == 1.0
    # Articles vanish before the comparison, so "a paris" is contained in "paris".
    assert sub_em("a Paris", "the paris") == 1.0


def test_empty_prediction_never_scores():
    golds = ["Paris"]
    for nothing in ("", None, "   ", "The.", "...", "a an the"):
        assert score(nothing, golds) == {"sub_em": 0.0, "em": 0.0, "f1": 0.0}, nothing
    # A gold that normalizes to "" is not found in every answer either.
    assert sub_em("Paris", "The") == 0.0
    assert em("", "") == 0.0


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        ("Eiffel Tower", "the Eiffel Tower", 1.0),
        ("the Eiffel Tower in Paris", "Eiffel Tower", 2 / 3),  # P 2/4, R 2/2
        ("Eiffel", "Eiffel Tower", 2 / 3),  # P 1/1, R 1/2
        ("paris paris", "paris", 2 / 3),  # repeated token counted once: P 1/2, R 1
        ("new york city", "york new", 0.8),  # order free: P 2/3, R 1 -> 0.8
        ("London", "Paris", 0.0),
        ("", "Paris", 0.0),
        ("1990 to 2000", "2000", 0.5),  # P 1/3, R 1 -> 0.5
    ],
)
def test_f1(prediction, gold, expected):
    assert f1(prediction, gold) == pytest.approx(expected)


def test_f1_yes_no_special_case():
    assert f1("yes", "yes") == 1.0
    assert f1("Yes.", "yes") == 1.0  # equal once normalized
    assert f1("no", "no way") == 0.0  # would be 2/3 by tokens; a "no" answer differs
    assert f1("no way", "no") == 0.0  # the gold side triggers it too
    assert f1("yes it is", "yes") == 0.0
    assert f1("noanswer", "noanswer") == 1.0
    assert f1("no answer", "no") == 0.0
    # "no answer" normalizes to two tokens, not "noanswer", so plain token F1 applies: P 1/2, R 1/1.
    assert f1("no answer", "answer") == pytest.approx(2 / 3)
    assert sub_em("no", "no way") == 1.0  # the special case is F1's alone


def test_best_takes_the_closest_gold():
    golds = ["Barack Obama", "Obama", "the 44th president"]
    assert best(em, "obama", golds) == 1.0
    assert best(f1, "president Obama", golds) == pytest.approx(2 / 3)  # vs "Obama": P 1/2, R 1; the others give 1/2
    assert best(f1, "44th president", golds) == 1.0
    assert best(sub_em, "Michelle", golds) == 0.0
    with pytest.raises(ValueError):
        best(em, "Obama", [])


def test_score_keys_and_values():
    assert score("The Eiffel Tower in Paris", ["Eiffel Tower", "La tour Eiffel"]) == pytest.approx(
        {"sub_em": 1.0, "em": 0.0, "f1": 2 / 3}
    )
    assert score("Eiffel Tower", ["eiffel tower"]) == {"sub_em": 1.0, "em": 1.0, "f1": 1.0}


def test_unicode():
    assert em("Müller", "MÜLLER") == 1.0  # str.lower() handles non-ASCII letters
    assert sub_em("東京タワーです", "東京タワー") == 1.0
    assert f1("東京 タワー", "東京") == pytest.approx(2 / 3)
    assert em("Ｐaris", "Paris") == 0.0  # full-width letters are not folded


def test_numbers():
    assert score("The answer is 1,234,567.", ["1234567"]) == pytest.approx({"sub_em": 1.0, "em": 0.0, "f1": 0.5})
    assert score("7654321", ["1234567"]) == {"sub_em": 0.0, "em": 0.0, "f1": 0.0}


def test_mrcr_without_the_prefix_scores_zero():
    assert mrcr("hello", "XYhello", "XY") == 0.0
    assert mrcr("xyhello", "XYhello", "XY") == 0.0  # case counts
    assert mrcr(" XYhello", "XYhello", "XY") == 0.0  # so does a leading space
    assert mrcr("hello XY", "XYhello", "XY") == 0.0  # the prefix must come first
    assert mrcr(None, "XYhello", "XY") == 0.0
    assert mrcr("", "XYhello", "XY") == 0.0


def test_mrcr_exact_answer_scores_one():
    assert mrcr("XYhello world", "XYhello world", "XY") == 1.0
    assert mrcr("hello", "hello", "") == 1.0  # every response starts with an empty prefix


@pytest.mark.parametrize(
    "response, answer, expected",
    [
        ("XYabcd", "XYbcde", 0.75),  # "bcd" matches: 2*3 / (4+4)
        ("XYhello", "XYhello world", 0.625),  # 2*5 / (5+11): the prefix earns nothing
        ("XYHello.", "XYhello", 8 / 11),  # nothing normalized: "ello" matches, 2*4 / (6+5)
        ("XYXYab", "XYab", 2 / 3),  # the prefix is removed once: "XYab" vs "ab", 2*2 / (4+2)
        ("XYab", "ab", 1.0),  # an answer without the prefix is compared as it is
        # SequenceMatcher's autojunk, on as in the card: in an answer of 200+ characters, "a"
        # (250 of 251) is too common to start a match, so only "x" matches: 2*1 / (251+251).
        # With autojunk off the 250 a's would match and this would be 500/502.
        ("XYx" + "a" * 250, "XY" + "a" * 250 + "x", 2 / 502),
    ],
)
def test_mrcr_is_the_sequence_matcher_ratio_after_the_prefix(response, answer, expected):
    assert mrcr(response, answer, "XY") == pytest.approx(expected)


def test_score_adds_mrcr_where_the_item_or_the_metric_asks():
    golds = ["XYhello"]
    assert "mrcr" not in score("XYhello", golds)  # auto, no prefix: the RULER-HotpotQA metrics only
    assert score("XYhello", golds, random_string_to_prepend="XY")["mrcr"] == 1.0
    # "hello" is in "xyhello" once normalized: sub_em's right, MRCR's wrong (no prefix).
    assert score("hello", golds, random_string_to_prepend="XY") == {"sub_em": 1.0, "em": 0.0, "f1": 0.0, "mrcr": 0.0}
    assert "mrcr" not in score("XYhello", golds, random_string_to_prepend="XY", metric="sub_em")
    # --metric mrcr on an item without a prefix: the prefix is "", the grade the bare ratio.
    assert score("hello", golds, metric="mrcr")["mrcr"] == pytest.approx(10 / 12)  # 2*5 / (5+7)
    assert score("XYab", ["XYzz", "XYab"], random_string_to_prepend="XY")["mrcr"] == 1.0  # best gold
    assert score("XYab", ["XYzz", "XYab"], random_string_to_prepend="")["mrcr"] == 1.0  # "" is a prefix too
    with pytest.raises(ValueError):
        score("a", ["a"], metric="rouge")
