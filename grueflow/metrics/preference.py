"""A learned reward: the scalar of a Bradley–Terry reward model trained by the train_reward_model stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean


@METRICS.register("reward_model", "scalar of a Bradley–Terry reward model (args.path: its model/ folder), unbounded")
class RewardModelScore(Metric):
    """Scores each (prompt, generation) with a reward model saved by ``train_reward_model``; the model is
    loaded once in ``build``, frozen on the stage's device in its frozen dtype (bf16 under bf16), and a
    missing or unfinished folder fails there with the stage to run."""

    category = "learned"
    scores = ("reward_model",)

    @dataclass(frozen=True)
    class Args:
        path: str = ""
        batch_size: int = 32
        max_length: Optional[int] = None

        def __post_init__(self) -> None:
            if not self.path:
                raise ValueError("metric 'reward_model' needs args.path: the model/ folder of a train_reward_model "
                                 "output, e.g. results/<task>/reward_model/model")

    @classmethod
    def build(cls, args: "RewardModelScore.Args", context: MetricContext) -> MetricFn:
        from grueflow.preference.reward_model import RewardModel

        score = RewardModel(args.path, args.batch_size, args.max_length, context.execution)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            values = score(prompts, generations)
            return MetricResult({cls.key(): values}, {cls.key(): mean(values)})

        return compute
