"""Fluency: perplexity of the generations under a reference LM (by default the task's base model).

The LM is loaded frozen on the device of the stage's execution, in its frozen dtype (bf16 under bf16), and
scores under its autocast; log-probs and perplexities are float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult


@METRICS.register("perplexity", "perplexity of the generation given the prompt under the base model (lower = more fluent)")
class Perplexity(Metric):
    category = "fluency"
    scores = ("perplexity",)

    @dataclass(frozen=True)
    class Args:
        model: Optional[str] = None
        batch_size: int = 32

    @classmethod
    def build(cls, args: "Perplexity.Args", context: MetricContext) -> MetricFn:
        import torch

        from grueflow.models import load_pretrained
        from grueflow.models.backend import select
        from grueflow.models.policy import Policy, completion_mask, logprobs_from_logits

        source = args.model or context.base_model
        if source is None:
            raise ValueError("metric 'perplexity' needs a model: set args.model or pass the stage a base model")
        backend = select(context.resolved_execution())
        model, tokenizer = load_pretrained(Path(source) if Path(str(source)).exists() else str(source), backend=backend,
                                           frozen=True)
        policy = Policy(model, tokenizer, max_prompt_length=context.max_prompt_length, backend=backend)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            with torch.no_grad():
                return _perplexity(prompts, generations)

        def _perplexity(prompts: Sequence[str], generations: Sequence[str]) -> MetricResult:
            nll_sums, counts = [], []
            for start in range(0, len(prompts), args.batch_size):
                batch_prompts = policy.encode(list(prompts[start:start + args.batch_size]))
                targets = policy.encode_targets(list(generations[start:start + args.batch_size]), max_length=256)
                mask = completion_mask(targets, policy.eos_token_id)
                nll = -logprobs_from_logits(policy.score(batch_prompts, targets).logits, targets) * mask
                nll_sums.extend(nll.sum(1).tolist())
                counts.extend(mask.sum(1).tolist())
            per_sample = [math.exp(s / c) for s, c in zip(nll_sums, counts)]
            corpus = math.exp(sum(nll_sums) / sum(counts))
            return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

        return compute
