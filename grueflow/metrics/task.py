"""Task-specific metrics of the embedded default: lexicon sentiment and concept coverage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean

POSITIVE_WORDS = frozenset(
    "great wonderful brilliant superb excellent lovely beautiful charming delightful fantastic good "
    "amazing enjoyable moving perfect loved enjoyed liked admired best fine nice".split())
NEGATIVE_WORDS = frozenset(
    "awful terrible boring dull poor weak painful bad horrible clumsy worst hated disliked regretted "
    "endured dreadful mediocre annoying stupid waste".split())


def lexicon_polarity(text: str) -> float:
    """(positive - negative) / (positive + negative) word counts; 0 when neither occurs.  Range [-1, 1]."""
    words = text.lower().split()
    pos = sum(w in POSITIVE_WORDS for w in words)
    neg = sum(w in NEGATIVE_WORDS for w in words)
    return (pos - neg) / (pos + neg) if pos + neg else 0.0


@METRICS.register("lexicon_sentiment", "word-lexicon sentiment polarity of the generation, in [-1, 1]")
class LexiconSentiment(Metric):
    category = "task"
    scores = ("sentiment",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [lexicon_polarity(g) for g in generations]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


def inflections(lemma: str) -> set[str]:
    """The regular inflected forms of an English lemma (walks, walked, walking, ...)."""
    forms = {lemma, lemma + "s", lemma + "es", lemma + "ed", lemma + "ing", lemma + "d"}
    if lemma.endswith("e"):
        forms.add(lemma[:-1] + "ing")
    return forms


def coverage(generation: str, concepts: Sequence[str]) -> float:
    """Fraction of ``concepts`` that appear in ``generation`` in some inflected form.  Range [0, 1]."""
    if not concepts:
        raise ValueError("concept coverage needs meta['concepts'] to be a non-empty list")
    words = set(generation.lower().replace(".", " ").split())
    return sum(bool(words & inflections(c.lower())) for c in concepts) / len(concepts)


@METRICS.register("concept_coverage", "fraction of the prompt's concepts used in the generation (CommonGen)")
class ConceptCoverage(Metric):
    category = "task"
    scores = ("coverage",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [coverage(g, m.get("concepts", ())) for g, m in zip(generations, meta)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute
