"""Diversity of the generations (RL4LMs' diversity metrics): distinct-n, unique-n, vocabulary, length."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean


def ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def distinct(texts: Sequence[Sequence[str]], n: int) -> float:
    """Distinct n-grams over all n-grams (Li et al. 2016).  Range [0, 1]; NaN with no n-grams."""
    grams = [g for words in texts for g in ngrams(words, n)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def unique(texts: Sequence[Sequence[str]], n: int) -> int:
    """Number of n-grams that occur exactly once in the whole set."""
    counts = Counter(g for words in texts for g in ngrams(words, n))
    return sum(1 for c in counts.values() if c == 1)


@METRICS.register("diversity", "distinct-1/2, unique-1/2, vocabulary size, mean length, repetition")
class Diversity(Metric):
    category = "diversity"
    scores = ("length", "repetition")

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            words = [g.split() for g in generations]
            lengths = [float(len(w)) for w in words]
            repetition = [1.0 - distinct([w], 1) if w else 0.0 for w in words]
            corpus = {
                cls.key("distinct_1"): distinct(words, 1),
                cls.key("distinct_2"): distinct(words, 2),
                cls.key("unique_1"): float(unique(words, 1)),
                cls.key("unique_2"): float(unique(words, 2)),
                cls.key("vocab_size"): float(len({w for ws in words for w in ws})),
                cls.key("length"): mean(lengths),
                cls.key("repetition"): mean(repetition),
            }
            return MetricResult({cls.key("length"): lengths, cls.key("repetition"): repetition}, corpus)

        return compute
