"""The "code word" task: the synthetic task the trained test model performs.

A document is filler prose with at most one planted fact, "The code word is amber falcon.";
the question asks for the code word. Done right, a memory update returns the fact sentence
when its section holds the sentence whole and the previous memory unchanged otherwise, and
the final answer is `\\boxed{amber falcon}` (`\\boxed{unknown}` when the memory has no fact).

Both the training script (`tests/data/train_codeword.py`) and the tests that check answers
draw documents from here, so a test document is made the way training data was.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

QUESTION = "What is the code word?"
NO_ANSWER = "unknown"

VALUE_ADJECTIVES = (
    "amber crimson silver golden violet scarlet azure ivory copper jade coral indigo olive russet cobalt ebony"
).split()
VALUE_NOUNS = "falcon otter heron lynx badger raven marten osprey bison gecko walrus condor ferret jackal mantis puffin".split()

_SUBJECTS = (
    "the river|the old mill|the council|a traveller|the lighthouse|the market|a young clerk|the village|"
    "the north road|the quiet garden|the library|the harbour|a tired porter|the school|the baker|the night guard|"
    "the mayor|a small boat|the station|the weaver|the orchard|the choir|the tower clock|a stranger"
).split("|")
_VERBS = (
    "runs past|looks over|waits near|stands beside|opens onto|turns toward|leans against|sits under|"
    "reaches|follows|passes|watches|crosses|guards|faces|circles"
).split("|")
_OBJECTS = (
    "the stone bridge|a green field|the east wall|an empty cart|the morning train|the old well|"
    "the square|a row of houses|the chapel|the salt marsh|the hill path|the fishing fleet|"
    "the long table|the front gate|a pile of letters|the open window|the wheat store|the ferry"
).split("|")
_TAILS = (
    "|| in the spring| after the rain| every evening| before noon| at first light| in the cold months|"
    "| without a word| once a week| for many years| as usual"
).split("|")
_COUNTS = (
    "There were {n} {things} in the {place}.|The report lists {n} {things} near the {place}.|"
    "By the end of the year the {place} held {n} {things}."
).split("|")
_THINGS = "lamps|boats|sheep|letters|chairs|barrels|windows|trees|carts|bells".split("|")
_PLACES = "square|harbour|yard|hall|valley|market|cellar|garden".split("|")


def fact_sentence(value: str) -> str:
    return f"The code word is {value}."


_FOLDERS = ("notes", "docs", "archive/2019", "reports", "letters")
_NAMES = ("minutes", "draft", "summary", "log", "memo", "chapter", "appendix", "report")
_EXTENSIONS = (".txt", ".md", ".pdf", ".log")


def random_title(rng: random.Random) -> str:
    """A file's title as memagent's layout shows it, e.g. "notes/minutes-3.txt"."""
    return f"{rng.choice(_FOLDERS)}/{rng.choice(_NAMES)}-{rng.randint(1, 40)}{rng.choice(_EXTENSIONS)}"


def random_value(rng: random.Random) -> str:
    return f"{rng.choice(VALUE_ADJECTIVES)} {rng.choice(VALUE_NOUNS)}"


def filler_sentence(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(_COUNTS).format(n=rng.randint(2, 990), things=rng.choice(_THINGS), place=rng.choice(_PLACES))
    subject = rng.choice(_SUBJECTS)
    return f"{subject[0].upper()}{subject[1:]} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}{rng.choice(_TAILS)}."


# Tokens a sentence in the trained model's vocabulary (mean over 3000 sentences).
TOKENS_PER_SENTENCE = 18.7


@dataclass
class Document:
    text: str
    value: str | None  # the planted fact's value, None if there is none
    fact_at: int | None  # character offset of the fact sentence in text

    @property
    def answer(self) -> str:
        return self.value if self.value is not None else NO_ANSWER


def make_document(rng: random.Random, n_tokens: int, *, where: float | None = None, fact: bool = True) -> Document:
    """About `n_tokens` tokens of prose; with `fact`, the fact sentence at fraction `where`
    (0 = first sentence, 1 = last; random when None)."""
    n = max(1, round(n_tokens / TOKENS_PER_SENTENCE))
    sentences = [filler_sentence(rng) for _ in range(n)]
    if not fact:
        return Document(_join(rng, sentences), None, None)
    value = random_value(rng)
    k = rng.randint(0, n) if where is None else round(where * n)
    sentences.insert(k, fact_sentence(value))
    text = _join(rng, sentences)
    return Document(text, value, text.index(fact_sentence(value)))


def cut_by_boundary(doc: Document, encode, decode, chunk_tokens: int) -> bool:
    """Whether no chunk of `chunk_tokens` ids holds the fact sentence whole (memagent reads a
    single text file as its stripped text, tokenized once and sliced)."""
    if doc.value is None:
        return False
    ids = encode(doc.text.strip())
    fact = fact_sentence(doc.value)
    return not any(fact in decode(ids[k : k + chunk_tokens]) for k in range(0, len(ids), chunk_tokens))


def _join(rng: random.Random, sentences: list[str]) -> str:
    out = []
    for i, s in enumerate(sentences):
        if i:
            r = rng.random()
            out.append("\n\n" if r < 0.06 else "\n" if r < 0.14 else " ")
        out.append(s)
    return "".join(out)


def vocabulary_corpus() -> str:
    """Text the trained model's BPE vocabulary is learned from: the words of the task."""
    words = [*_SUBJECTS, *_VERBS, *_OBJECTS, *_TAILS, *_COUNTS, *_THINGS, *_PLACES]
    values = [f"The code word is {a} {n}." for a in VALUE_ADJECTIVES for n in VALUE_NOUNS[:4]]
    values += [f"\\boxed{{{a} {n}}}" for n in VALUE_NOUNS for a in VALUE_ADJECTIVES[:4]]
    titles = [f"Document {i}:\n{f}/{n}-{i}{e}" for i, (f, n, e) in enumerate(zip(_FOLDERS * 2, _NAMES, _EXTENSIONS * 2))]
    return "\n".join(words * 3 + values + titles * 2 + [QUESTION, NO_ANSWER, "Document", "0123456789"] * 2)
