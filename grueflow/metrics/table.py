"""Table-to-text: PARENT (Dhingra et al. 2019, "Handling Divergent Reference Texts when Evaluating
Table-to-Text Generation"), the word-overlap variant used for ToTTo and WikiBio.

The table is ``meta['table']``: a list of ``[attribute, value]`` pairs. Texts are lower-cased and
split into words and punctuation marks (:func:`grueflow.metrics.captioning.tokenize`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean, nanmean
from grueflow.metrics.captioning import tokenize
from grueflow.metrics.diversity import ngrams


def lcs_length(x: Sequence[str], y: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (O(len(x) * len(y)))."""
    row = [0] * (len(y) + 1)
    for a in x:
        previous_diagonal = 0
        for j, b in enumerate(y, start=1):
            previous_diagonal, row[j] = row[j], previous_diagonal + 1 if a == b else max(row[j], row[j - 1])
    return row[-1]


def entailed(gram: tuple[str, ...], table_words: set[str], smoothing: float) -> float:
    """Probability that an n-gram is entailed by the table: its share of words among the table's values."""
    return (sum(w in table_words for w in gram) + smoothing) / (len(gram) + smoothing)


def geometric_mean(values: list[float]) -> float:
    return 0.0 if min(values) <= 0.0 else math.exp(math.fsum(math.log(v) for v in values) / len(values))


def parent_scores(prediction: list[str], reference: list[str], table: list[tuple[list[str], list[str]]],
                  lambda_weight: float, smoothing: float, max_order: int) -> tuple[float, float, float]:
    """PARENT ``(precision, recall, F)`` of one prediction against one reference and its table, each in [0, 1].

    Precision of order n counts a predicted n-gram as correct when it is in the reference or, failing
    that, by its table entailment; recall mixes the entailment-weighted reference recall with the
    table recall (mean LCS share of each value) as ``ref^(1 - lambda) * table^lambda``. Zero
    precisions/recalls of orders >= 2 are replaced by ``smoothing``, as the authors' script does.
    """
    table_words = {w for _, value in table for w in value}
    precisions, recalls = [], []
    for n in range(1, max_order + 1):
        pred, ref = Counter(ngrams(prediction, n)), Counter(ngrams(reference, n))
        in_ref = {g: min(1.0, ref[g] / c) for g, c in pred.items()}
        hits = sum(c * (in_ref[g] + (1 - in_ref[g]) * entailed(g, table_words, smoothing)) for g, c in pred.items())
        precisions.append(hits / sum(pred.values()) if pred else 0.0)
        weights = {g: c * entailed(g, table_words, smoothing) for g, c in ref.items()}
        found = sum(w * min(1.0, pred[g] / ref[g]) for g, w in weights.items())
        recalls.append(found / sum(weights.values()) if sum(weights.values()) > 0 else 1.0)
    precisions = precisions[:1] + [p or smoothing for p in precisions[1:]]
    recalls = recalls[:1] + [r or smoothing for r in recalls[1:]]
    precision = geometric_mean(precisions)
    reference_recall = geometric_mean(recalls) or smoothing
    table_recall = mean([(lcs_length(value, prediction) + smoothing) / (len(value) + smoothing) for _, value in table])
    recall = math.exp((1 - lambda_weight) * math.log(reference_recall) + lambda_weight * math.log(table_recall or smoothing))
    return precision, recall, 2 * precision * recall / (precision + recall + 1e-8)


@METRICS.register("parent", "PARENT precision/recall/F (ToTTo, WikiBio) against references and meta['table'], in [0, 1]")
class Parent(Metric):
    category = "task"
    scores = ("parent_f", "parent_precision", "parent_recall")

    @dataclass(frozen=True)
    class Args:
        lambda_weight: float = 0.5
        smoothing: float = 1e-5
        max_order: int = 4

        def __post_init__(self) -> None:
            if not 0.0 <= self.lambda_weight <= 1.0 or self.smoothing <= 0.0 or self.max_order < 1:
                raise ValueError(f"parent needs 0 <= lambda_weight <= 1, smoothing > 0 and max_order >= 1; got "
                                 f"lambda_weight={self.lambda_weight}, smoothing={self.smoothing}, max_order={self.max_order}")

    @classmethod
    def build(cls, args: "Parent.Args", context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample: dict[str, list[float]] = {cls.key(s): [] for s in cls.scores}
            for generation, refs, m in zip(generations, references, meta):
                table = [(tokenize(str(a)), tokenize(str(v))) for a, v in m.get("table") or ()]
                table = [(a, v) for a, v in table if v]
                if not table:
                    raise ValueError("parent needs meta['table'] to be a non-empty list of [attribute, value] pairs")
                best = max((parent_scores(tokenize(generation), tokenize(r), table, args.lambda_weight, args.smoothing,
                                          args.max_order) for r in refs), key=lambda s: s[2], default=(math.nan,) * 3)
                for s, value in zip(cls.scores, (best[2], best[0], best[1])):
                    per_sample[cls.key(s)].append(value)
            return MetricResult(per_sample, {k: nanmean(vs) for k, vs in per_sample.items()})

        return compute
