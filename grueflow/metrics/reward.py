"""A task's reward: a weighted sum of registered metrics' per-sample scores."""

from __future__ import annotations

from typing import Any, Sequence

from grueflow.config import RewardConfig, typed_args
from grueflow.metrics import METRICS, MetricContext


class Reward:
    """Builds each component's metric once; ``__call__`` scores a batch of generations.

    Returns the total per sample, ``sum_i weight_i * score_i``, and each component's per-sample
    scores under ``<category>/<score>`` so that they can be logged on their own.
    """

    def __init__(self, cfg: RewardConfig, context: MetricContext) -> None:
        self.components = []
        for c in cfg.components:
            metric = METRICS.get(c.metric)
            self.components.append((c.key, c.weight, c.score, metric.build(typed_args(c), context)))

    @property
    def weights(self) -> dict[str, float]:
        """Each component's weight under its ``<category>/<score>`` key."""
        return {key: weight for key, weight, _, _ in self.components}

    def __call__(self, prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                 meta: Sequence[dict[str, Any]]) -> tuple[list[float], dict[str, list[float]]]:
        total = [0.0] * len(generations)
        parts: dict[str, list[float]] = {}
        for key, weight, _, compute in self.components:
            scores = compute(prompts, generations, references, meta).per_sample[key]
            parts[key] = scores
            total = [t + weight * s for t, s in zip(total, scores)]
        return total, parts
