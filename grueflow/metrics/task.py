"""Task-specific metrics: lexicon and VADER sentiment, concept coverage, exact match and token F1."""

from __future__ import annotations

import functools
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from grueflow.io import DataError
from grueflow.metrics import (METRICS, MetaChecked, Metric, MetricContext, MetricFn, MetricResult, mean, nanmean,
                              require)

POSITIVE_WORDS = frozenset(
    "great wonderful brilliant superb excellent lovely beautiful charming delightful fantastic good "
    "amazing enjoyable moving perfect loved enjoyed liked admired best fine nice".split())
NEGATIVE_WORDS = frozenset(
    "awful terrible boring dull poor weak painful bad horrible clumsy worst hated disliked regretted "
    "endured dreadful mediocre annoying stupid waste".split())


WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # letters and digits, apostrophes inside a word kept: "don't"


def split_words(text: str) -> list[str]:
    """The lower-cased words of ``text``: runs of letters and digits joined by inner apostrophes, so punctuation next
    to a word ("great.", "dog,", "(cat)") or between words ("well-made") is not part of one. The sentiment lexicons
    and the concepts are such words (lower-case, no punctuation)."""
    return WORD.findall(text.lower())


def lexicon_polarity(text: str) -> float:
    """(positive - negative) / (positive + negative) counts of the lexicon's words among :func:`split_words`; 0 when
    neither occurs.  Range [-1, 1]."""
    words = split_words(text)
    pos = sum(w in POSITIVE_WORDS for w in words)
    neg = sum(w in NEGATIVE_WORDS for w in words)
    return (pos - neg) / (pos + neg) if pos + neg else 0.0


def per_generation(cls: type[Metric], score: Callable[[str, dict[str, Any]], float]) -> MetricFn:
    """A metric scoring each generation on its own (with its sample's meta); corpus = the mean."""

    def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                meta: Sequence[dict[str, Any]]) -> MetricResult:
        scores = [score(g, m) for g, m in zip(generations, meta)]
        return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

    return compute


@METRICS.register("lexicon_sentiment", "word-lexicon sentiment polarity of the generation, in [-1, 1]")
class LexiconSentiment(Metric):
    category = "task"
    scores = ("sentiment",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        return per_generation(cls, lambda generation, meta: lexicon_polarity(generation))


@functools.lru_cache(maxsize=65536)
def inflections(lemma: str) -> frozenset[str]:
    """The lemma and its inflected forms, regular and irregular, as nouns, verbs and adjectives: lemminflect's
    English lexicon (sit: sits, sat, sitting; carry: carried; foot: feet), or, for a lemma it does not list, its
    rules for an unknown noun and verb (frisbee: frisbees). CommonGen's own coverage (Lin et al. 2020, its
    PivotScore script) lemmatizes the generation with spaCy and lemminflect, and meets the same forms. The match is
    context-free, where spaCy's tagger reads the sentence: a homograph of an inflection counts ("the ground" covers
    grind, "a saw" covers see)."""
    from lemminflect import getAllInflections, getAllInflectionsOOV

    known = getAllInflections(lemma)
    if not known:
        known = {**getAllInflectionsOOV(lemma, "NOUN"), **getAllInflectionsOOV(lemma, "VERB")}
    return frozenset({lemma, *(form.lower() for forms in known.values() for form in forms)})


def coverage(generation: str, concepts: Sequence[str]) -> float:
    """Fraction of ``concepts`` that are among ``generation``'s :func:`split_words` in some inflected form; a
    concept of several words ("ice cream", "t-shirt") counts when its words follow one another in the generation,
    the last one in some inflected form. Range [0, 1]."""
    if not concepts:
        raise ValueError("concept coverage needs meta['concepts'] to be a non-empty list")
    words = split_words(generation)

    def used(concept: str) -> bool:
        *head, last = split_words(concept) or [concept.lower()]
        forms = inflections(last)
        return any(words[i:i + len(head)] == head and words[i + len(head)] in forms
                   for i in range(len(words) - len(head)))

    return sum(used(c) for c in concepts) / len(concepts)


def sample_concepts(meta: Sequence[dict[str, Any]]) -> list[Sequence[str]]:
    """Each sample's ``meta['concepts']``; a :class:`~grueflow.io.DataError` naming the metric, the key and the meta
    keys the samples have when a sample lacks it or holds no concept."""

    def usable(concepts: Any) -> bool:
        return isinstance(concepts, Sequence) and not isinstance(concepts, str) and len(concepts) > 0

    bad = [i for i, m in enumerate(meta) if not usable(m.get("concepts"))]
    if bad:
        first = meta[bad[0]]
        found = (f"concepts={first['concepts']!r}" if "concepts" in first else
                 f"no 'concepts' among its meta keys {sorted(first)}")
        raise DataError(f"metric 'concept_coverage' needs meta['concepts'], a non-empty list of concept words, in "
                        f"every sample; {len(bad)} of {len(meta)} samples lack it, the first (sample {bad[0]}) has "
                        f"{found}; use a datapool that writes concepts (common_gen, synthetic_concepts)")
    return [m["concepts"] for m in meta]


@METRICS.register("concept_coverage", "fraction of the prompt's concepts used in the generation (CommonGen)")
class ConceptCoverage(Metric):
    category = "task"
    scores = ("coverage",)

    @classmethod
    def meta_keys(cls, args: Any) -> tuple[str, ...]:
        return ("concepts",)

    @classmethod
    def check_samples(cls, args: Any, meta: Sequence[dict[str, Any]]) -> None:
        sample_concepts(meta)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [coverage(g, concepts) for g, concepts in zip(generations, sample_concepts(meta))]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return MetaChecked(compute, sample_concepts)


@METRICS.register("vader_sentiment", "VADER compound sentiment (vaderSentiment package) of the generation, in [-1, 1]")
class VaderSentiment(Metric):
    category = "task"
    scores = ("vader_sentiment",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        analyzer = require("vaderSentiment.vaderSentiment", "metric 'vader_sentiment'", "vaderSentiment"
                           ).SentimentIntensityAnalyzer()
        return per_generation(cls, lambda generation, meta: float(analyzer.polarity_scores(generation)["compound"]))


def normalize_answer(text: str) -> list[str]:
    """SQuAD / NarrativeQA normalisation: lower case, drop punctuation and the articles a/an/the, split on spaces."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def token_f1(generation: str, reference: str) -> float:
    """Harmonic mean of token precision and recall after :func:`normalize_answer`.  Range [0, 1]."""
    pred, gold = normalize_answer(generation), normalize_answer(reference)
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match(generation: str, reference: str) -> float:
    """1.0 when the normalised token sequences are equal, else 0.0."""
    return float(normalize_answer(generation) == normalize_answer(reference))


def answerable(references: Sequence[str]) -> list[str]:
    """The references SQuAD v2's official script scores against: those with text left after
    :func:`normalize_answer` ("The", "...", "" have none), or ``[""]`` when none has (an unanswerable question,
    which only an empty answer matches); [] without references."""
    if not references:
        return []
    return [r for r in references if normalize_answer(r)] or [""]


def best_over_references(cls: type[Metric], score: Any) -> MetricFn:
    """Per sample, the maximum of ``score(generation, reference)`` over its :func:`answerable` references (NaN
    with none): a reference that normalises to nothing would give an empty generation full marks beside a real
    answer."""

    def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                meta: Sequence[dict[str, Any]]) -> MetricResult:
        scores = [max(score(g, r) for r in answerable(refs)) if refs else float("nan")
                  for g, refs in zip(generations, references)]
        return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

    return compute


@METRICS.register("exact_match", "normalised exact match (SQuAD/NarrativeQA style), best over references, in {0, 1}")
class ExactMatch(Metric):
    category = "task"
    needs_references = True
    scores = ("exact_match",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        return best_over_references(cls, exact_match)


@METRICS.register("token_f1", "normalised token F1 (SQuAD/NarrativeQA style), best over references, in [0, 1]")
class TokenF1(Metric):
    category = "task"
    needs_references = True
    scores = ("token_f1",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        return best_over_references(cls, token_f1)


# -- RL4LMs' synthetic sanity tasks (with the dummy_pool datapool) ------------------------------------------


DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def finite_number(token: str) -> Optional[float]:
    """The value of a token written as a decimal number (ASCII digits, an optional sign, point and exponent: ``7``,
    ``-2.5``, ``.5``, ``1e3``), or None. RL4LMs' ``is_number`` is ``float()``, which also takes ``nan``, ``inf``,
    ``infinity``, digit groups (``1_0``) and non-ASCII digits (``٣``); here those are words, as is a number too large
    for a float (``1e999``)."""
    if DECIMAL.fullmatch(token) is None:
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def increasing_numbers(generation: str, min_tokens: int) -> float:
    """RL4LMs' ``increasing_numbers`` reward (``RewardIncreasingNumbers.reward_increasing_numbers_in_text``): of the
    whitespace tokens that are numbers (:func:`finite_number`), the length of the strictly increasing run that starts
    at the first one, over ``max(tokens, min_tokens / 2)``; 0 without a number. In [0, 1]. The run ends at the first
    number not greater than the one before, RL4LMs' ``if token > previous_token`` ... ``else: break``."""
    tokens = generation.split()
    numbers = [value for value in map(finite_number, tokens) if value is not None]
    if not numbers:
        return 0.0
    run, previous = 1, numbers[0]
    for number in numbers[1:]:
        if not number > previous:
            break
        run, previous = run + 1, number
    return run / max(len(tokens), min_tokens / 2)


@METRICS.register("increasing_numbers", "RL4LMs' synthetic reward: the increasing run of numbers over the length")
class IncreasingNumbers(Metric):
    category = "synthetic"
    scores = ("increasing_numbers",)

    @dataclass(frozen=True)
    class Args:
        min_tokens: int = 20  # the denominator is at least min_tokens / 2, so a short run scores low

        def __post_init__(self) -> None:
            if not 1 <= self.min_tokens <= 1_000_000:
                raise ValueError(f"min_tokens must be in [1, 1000000], got {self.min_tokens}")

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        return per_generation(cls, lambda generation, meta: increasing_numbers(generation, args.min_tokens))


DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@METRICS.register("sentences_with_dates", "RL4LMs' synthetic reward: 1 if the text holds a YYYY-MM-DD date, else 0")
class SentencesWithDates(Metric):
    category = "synthetic"
    scores = ("has_date",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        return per_generation(cls, lambda generation, meta: float(DATE.search(generation) is not None))
