"""Answer scoring: the MemAgent authors' sub_em, em and token F1, and OpenAI MRCR's grade.

This module owns the comparison of one predicted answer with the gold answers of one
question, and which metrics an item gets (`score`). sub_em, em and f1 match the authors'
evaluation code, read in BytedTsinghua-SIA/MemAgent `taskutils/memory_eval/ruler_hqa.py` (which calls
`utils.update_answer`) and the `taskutils/memory_eval/utils/__init__.py` those scripts
import (read in forks that keep it at that path: syr-cn/ReMemR1, JetAstra/PI-Mem):

- `normalize` is SQuAD's / HotpotQA's `normalize_answer` (hotpotqa/hotpot
  `hotpot_evaluate_v1.py`): lower-case, drop ASCII punctuation (`string.punctuation`), drop
  the whole words a/an/the, collapse white space, in that order.
- `em`: the normalized strings are equal.
- `sub_em` (the paper's headline metric): the normalized gold is a substring of the
  normalized prediction, or the prediction of the gold. Substring of characters, not of
  words, exactly as there: gold "12" is found in "2012".
- `f1`: HotpotQA's token F1 over the normalized, white-space split tokens, including its
  special case: when either side normalizes to "yes", "no" or "noanswer" and the two
  differ, F1 is 0.

Where we differ from the reference, on purpose:

- Empty answers never score. The authors skip scoring when the extracted answer is None or
  "" (`... if item["pred"] else 0`), so an empty answer already scores 0 there; but an
  answer that is not empty and normalizes to "" ("The.", "...") passes that check, and then
  `"" in gold` makes it sub_em-correct. We score every side that normalizes to "" as no
  match, on both sides (a gold that normalizes to "" would otherwise be "contained" in
  every prediction).
- Several gold answers: `best` takes the maximum over them, as the protocol says. The
  authors' RULER-HotpotQA script scores against `answers[0]` only; their items carry one
  answer, where the two agree.
- The authors round each item's score to two decimals before averaging (`calc_metrics`
  on one item); we return exact values, which moves an average by at most 0.005.

`mrcr` is the grade of OpenAI's MRCR (multi-round co-reference), as its data set card defines it
(Hugging Face, openai/mrcr, README.md, the `grade` function; read here in copies that quote it
verbatim): the response must start with the item's `random_string_to_prepend`, else it scores 0;
otherwise that prefix is removed once from the response and from the answer, and the grade is
`difflib.SequenceMatcher(None, response, answer).ratio()`. Nothing is normalized: case, spaces
and punctuation all count. QwenLong-L1.5's Table 9 reports MRCR as a percentage; that it used
this grade is assumed, not checked (no evaluation code of theirs was read). The only difference
from the card: 0.0 (a float) where it returns the int 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from difflib import SequenceMatcher
from typing import Callable

# What `score` grades with: "auto" adds MRCR's grade to the items that carry a
# random_string_to_prepend; "mrcr" grades every item with it (a missing prefix is "");
# "sub_em" never does. sub_em, em and f1 are always there.
METRICS = ("auto", "sub_em", "mrcr")

# The reference removes exactly these (ASCII) characters; curly quotes, dashes and other
# Unicode punctuation are kept, so "“Paris”" is not em-equal to "Paris". Matched, not fixed.
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# HotpotQA's F1 treats these answers as classes, not text: "no" must not earn partial
# credit against "no way" for sharing a token.
_F1_CLASSES = ("yes", "no", "noanswer")


def normalize(text: str) -> str:
    """SQuAD/HotpotQA normalize_answer: lower-case, drop punctuation, drop a/an/the, collapse spaces."""
    text = text.lower()
    # Punctuation goes before articles, as in the reference: "A-team" becomes "ateam" and
    # keeps its "a"; swapping the steps would change scores.
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def em(prediction: str | None, gold: str) -> float:
    """1.0 when both normalize to the same non-empty text, else 0.0."""
    pred, ref = normalize(prediction or ""), normalize(gold)
    # An empty prediction is no answer: it must not "equal" a gold that normalizes to "".
    return float(bool(pred) and pred == ref)


def sub_em(prediction: str | None, gold: str) -> float:
    """1.0 when the normalized gold is in the normalized prediction or the prediction in the gold."""
    pred, ref = normalize(prediction or ""), normalize(gold)
    # "" is a substring of everything, so the reference counts "The." as a correct answer to
    # any question. memagent prints nothing when the model gave no answer; a scorer that
    # rewards emptiness would turn silence into accuracy. An empty side matches nothing.
    if not pred or not ref:
        return 0.0
    return float(ref in pred or pred in ref)


def f1(prediction: str | None, gold: str) -> float:
    """HotpotQA token F1 over normalized tokens, 0 when a yes/no/noanswer side differs."""
    pred, ref = normalize(prediction or ""), normalize(gold)
    if (pred in _F1_CLASSES or ref in _F1_CLASSES) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    # Counter intersection: a token repeated in the prediction is credited only as often as
    # the gold has it, so "paris paris" does not beat "paris".
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def best(metric: Callable[[str | None, str], float], prediction: str | None, golds: list[str]) -> float:
    """The metric against the closest gold answer (SQuAD's metric_max_over_ground_truths)."""
    if not golds:
        # The reference would fail on answers[0]; a question without an answer cannot be
        # scored, and scoring it 0 would hide a broken data file inside the accuracy.
        raise ValueError("no gold answers to score against")
    return max(metric(prediction, gold) for gold in golds)


def mrcr(response: str | None, answer: str, random_string_to_prepend: str) -> float:
    """OpenAI MRCR's grade (see the module docstring): 0 unless the response starts with the
    prefix; else the SequenceMatcher ratio of the two texts with the prefix removed once."""
    response = response or ""
    if not response.startswith(random_string_to_prepend):
        return 0.0
    response = response.removeprefix(random_string_to_prepend)
    answer = answer.removeprefix(random_string_to_prepend)
    # SequenceMatcher's default autojunk stays on, as in the card's call: on answers of 200+
    # characters it ignores very common characters when matching, which lowers some ratios;
    # turning it off would change scores. Matched, not fixed.
    return float(SequenceMatcher(None, response, answer).ratio())


def score(
    prediction: str | None, golds: list[str], *, random_string_to_prepend: str | None = None, metric: str = "auto"
) -> dict[str, float]:
    """sub_em, em and f1 (each 0..1) of one prediction against a question's gold answers, and
    `mrcr` (0..1, best over the golds) when `metric` asks for it (see METRICS)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}")
    scores = {
        "sub_em": best(sub_em, prediction, golds),
        "em": best(em, prediction, golds),
        "f1": best(f1, prediction, golds),
    }
    if metric == "mrcr" or (metric == "auto" and random_string_to_prepend is not None):
        prefix = random_string_to_prepend or ""
        scores["mrcr"] = best(lambda response, gold: mrcr(response, gold, prefix), prediction, golds)
    return scores
