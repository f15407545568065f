"""A task's reward: a weighted sum of registered metrics' per-sample scores, and of dense ones' per-token scores."""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Sequence

from grueflow.config import RewardConfig, typed_args
from grueflow.io import DataError
from grueflow.metrics import (METRICS, TOKENS_KEY, MetaChecked, MetricContext, call_metric, check_meta, check_per_token,
                              check_result)


class RewardScores(NamedTuple):
    """One batch's reward: ``total`` per sample (every component, a dense one by its per-sample sum), each
    component's unweighted per-sample scores, and, when a component is dense, ``sequence`` (the total of the
    sequence-level components alone, paid at each sequence's last token) and ``per_token`` (the weighted sum
    of the dense components' per-token scores, one list per sample; paid token by token)."""

    total: list[float]
    parts: dict[str, list[float]]
    sequence: Optional[list[float]] = None
    per_token: Optional[list[list[float]]] = None


class Reward:
    """Builds each component's metric once; ``__call__`` scores a batch of generations.

    Returns the total per sample, ``sum_i weight_i * score_i``, and each component's per-sample
    scores under ``<category>/<score>`` so that they can be logged on their own. :meth:`score` also gives a
    dense component's per-token scores (:attr:`dense`: whether there is one; its inputs are each completion's
    tokens, ``meta[i][TOKENS_KEY]``).

    A sample that a component cannot score (NaN: its metric leaves it out, e.g. without references) has a NaN
    total: a sum over the other components alone would be on another scale. Evaluation leaves such samples out
    of the corpus reward and counts them (:func:`grueflow.evaluation.score`); RL stops on them, naming the
    components (:func:`describe_nonfinite`).

    A component whose metric raises stops the batch with a :class:`~grueflow.metrics.MetricFailedError` naming the
    component (its exception is the ``__cause__``); one that returns scores of the wrong shape or kind, with a
    :class:`~grueflow.metrics.MetricResultError` (:func:`~grueflow.metrics.check_result`).
    """

    def __init__(self, cfg: RewardConfig, context: MetricContext) -> None:
        self.components = []
        self.names = {c.key: c.metric for c in cfg.components}  # each component's metric id, for errors
        for c in cfg.components:
            metric = METRICS.get(c.metric)
            self.components.append((c.key, c.weight, metric.dense, metric.build(typed_args(c), context)))

    @property
    def weights(self) -> dict[str, float]:
        """Each component's weight under its ``<category>/<score>`` key."""
        return {key: weight for key, weight, _, _ in self.components}

    @property
    def dense(self) -> bool:
        return any(dense for _, _, dense, _ in self.components)

    def check(self, meta: Sequence[dict[str, Any]],
              references: Optional[Sequence[Sequence[str]]] = None) -> None:
        """Refuse, with a DataError, samples whose ``meta`` a component can never score (:func:`check_meta`), before
        anything is generated for them; given their ``references`` (RL's train split, every sample of which a
        rollout may draw), also those whose references a component can never score
        (:attr:`~grueflow.metrics.MetaChecked.unscored`), naming the first, the component and how many."""
        for key, _, _, compute in self.components:
            check_meta(compute, meta)
            if references is None or not isinstance(compute, MetaChecked) or compute.unscored is None:
                continue
            reasons = [compute.unscored(refs) for refs in references]
            bad = [i for i, reason in enumerate(reasons) if reason is not None]
            if bad:
                raise DataError(f"train sample {bad[0]}: reward component {self.names[key]!r} ({key}) scores it NaN "
                                f"whatever the generation ({reasons[bad[0]]}: {list(references[bad[0]])[:3]!r}), "
                                f"so RL would stop when a rollout draws it; {len(bad)} of {len(references)} train "
                                f"samples are so (the first: {', '.join(map(str, bad[:10]))}); leave them out of the "
                                f"data, or use a reward that reads them")

    def __call__(self, prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                 meta: Sequence[dict[str, Any]]) -> tuple[list[float], dict[str, list[float]]]:
        scores = self.score(prompts, generations, references, meta)
        return scores.total, scores.parts

    def score(self, prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
              meta: Sequence[dict[str, Any]]) -> RewardScores:
        total = [0.0] * len(generations)
        sequence = [0.0] * len(generations)
        per_token: Optional[list[list[float]]] = None
        parts: dict[str, list[float]] = {}
        for key, weight, dense, compute in self.components:
            caller = f"reward component {self.names[key]!r} ({key})"
            result = check_result(self.names[key], call_metric(caller, compute, prompts, generations, references, meta),
                                  len(generations), [key])
            parts[key] = result.per_sample[key]
            total = [t + weight * s for t, s in zip(total, parts[key])]
            if not dense:
                sequence = [t + weight * s for t, s in zip(sequence, parts[key])]
                continue
            tokens = check_per_token(self.names[key], result, key, [m.get(TOKENS_KEY) for m in meta])
            if per_token is None:
                per_token = [[0.0] * len(row) for row in tokens]
            per_token = [[a + weight * b for a, b in zip(acc, row)] for acc, row in zip(per_token, tokens)]
        if per_token is None:
            return RewardScores(total, parts)
        return RewardScores(total, parts, sequence, per_token)


def describe_nonfinite(parts: dict[str, list[float]], names: Optional[dict[str, str]] = None) -> str:
    """The components of ``parts`` (per-sample scores under each component's key) with non-finite scores, each with
    its number of samples and, given ``names`` (key -> metric id), its metric, e.g. ``lexical/rougeL of metric
    'rouge': 2 of 4 samples``; empty when every score is finite."""
    described = []
    for key, values in parts.items():
        bad = sum(not math.isfinite(v) for v in values)
        if bad:
            metric = f" of metric {names[key]!r}" if names and key in names else ""
            described.append(f"{key}{metric}: {bad} of {len(values)} samples")
    return "; ".join(described)
