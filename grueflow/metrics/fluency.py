"""Fluency: perplexity of the generations under a reference LM (by default the task's base model), and RL4LMs'
perplexity of the references under the evaluated model.

The LM is loaded frozen on the device of the stage's execution, in its frozen dtype (bf16 under bf16), and
scores under its autocast; log-probs and perplexities are float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from grueflow.config import check
from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, MetricUnavailableError


PERPLEXITY_TARGET_TOKENS = 256  # the most generation tokens perplexity scores (the EOS it appends included)


@METRICS.register("perplexity", "perplexity of the generation given the prompt under the base model (lower = more fluent)")
class Perplexity(Metric):
    """exp of the mean NLL per token of each generation, re-tokenized by the scoring model and followed by its EOS,
    given the prompt (cut as the policy's, to ``max_prompt_length``, and for a causal model to one token fewer than
    its positions); the corpus score is exp of the NLL summed over every sample over their tokens summed.

    The EOS is scored too, so an empty generation has tokens to score: the EOS alone, how likely the model ends the
    text right after the prompt. A generation is cut to its first :data:`PERPLEXITY_TARGET_TOKENS` tokens, and to
    the positions the scoring model has left after its own prompt (:func:`grueflow.models.position_limit`; never
    after a longer prompt of its batch), its EOS kept. Each sample thus has at least the EOS to
    score; one with no scored token would be NaN and left out of the corpus score, which is NaN without samples."""

    category = "fluency"
    scores = ("perplexity",)
    lower_is_better = ("perplexity",)

    @dataclass(frozen=True)
    class Args:
        model: Optional[str] = None
        batch_size: int = 32

        def __post_init__(self) -> None:
            check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")

    @classmethod
    def build(cls, args: "Perplexity.Args", context: MetricContext) -> MetricFn:
        import torch

        from grueflow.models import load_pretrained, model_kind, position_limit
        from grueflow.models.backend import select
        from grueflow.models.policy import Policy, completion_mask, logprobs_from_logits

        source = args.model or context.base_model
        if source is None:
            raise ValueError("metric 'perplexity' needs a model: set args.model or pass the stage a base model")
        backend = select(context.resolved_execution())
        model, tokenizer = load_pretrained(Path(source) if Path(str(source)).exists() else str(source), backend=backend,
                                           frozen=True)
        limit = position_limit(model.config)
        prompt_tokens = context.max_prompt_length
        if limit is not None and model_kind(model.config) == "causal":
            prompt_tokens = min(prompt_tokens, limit[0] - 1)  # a causal model's prompt leaves room for the EOS
        policy = Policy(model, tokenizer, max_prompt_length=prompt_tokens, backend=backend)

        def target_tokens(prompt_width: int) -> int:
            """The most target tokens (EOS included) that fit after a prompt of ``prompt_width`` tokens."""
            if limit is None:
                return PERPLEXITY_TARGET_TOKENS
            room = limit[0] - prompt_width if policy.kind == "causal" else limit[0]
            return min(PERPLEXITY_TARGET_TOKENS, room)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            with torch.no_grad():
                return _perplexity(prompts, generations)

        def _perplexity(prompts: Sequence[str], generations: Sequence[str]) -> MetricResult:
            nll_sums, counts = [], []
            for start in range(0, len(prompts), args.batch_size):
                batch_prompts = policy.encode(list(prompts[start:start + args.batch_size]))
                # each row's room after its own prompt (its positions start after it), never the batch's widest
                rooms = [target_tokens(width) for width in batch_prompts.attention_mask.sum(1).tolist()]
                targets = policy.encode_targets(list(generations[start:start + args.batch_size]), max_length=rooms)
                mask = completion_mask(targets, policy.eos_token_id)
                nll = -logprobs_from_logits(policy.score(batch_prompts, targets).logits, targets) * mask
                nll_sums.extend(nll.sum(1).tolist())
                counts.extend(mask.sum(1).tolist())
            per_sample = [math.exp(s / c) if c > 0 else float("nan") for s, c in zip(nll_sums, counts)]
            corpus = math.exp(sum(nll_sums) / sum(counts)) if sum(counts) > 0 else float("nan")
            return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

        return compute


RL4LMS_WINDOW = 1024  # GPT-2's n_positions: the window of RL4LMs' causal_perplexity on its IMDB runs


@METRICS.register("reference_perplexity", "RL4LMs' causal_perplexity: the references' perplexity under the evaluated "
                                          "model, strided (lower = closer to the data)")
class ReferencePerplexity(Metric):
    """RL4LMs' ``causal_perplexity`` (``rl4lms/envs/text_generation/metric.py``), the paper's IMDB perplexity:
    every sample's references, joined by ``separator`` into one text, tokenized by the evaluated model's
    tokenizer and scored by that model in windows of ``max_length`` tokens moved by ``stride``, each window
    scoring only its last ``stride`` tokens (Hugging Face's "perplexity of fixed-length models").

    The corpus score is RL4LMs' number exactly, its two approximations included: a window's mean NLL is
    multiplied by its ``trg_len`` scored tokens although the first window predicts one token fewer, and the
    sum is divided by the whole text's length. ``max_length`` is capped at the model's context; the default
    is RL4LMs' GPT-2 window. The per-sample score is the perplexity of one sample's references (joined the
    same way, cut to ``max_length`` tokens). It scores the model, not the generations: evaluation only, never
    a reward, and causal models only, as RL4LMs (a seq2seq model leaves it missing).
    """

    category = "fluency"
    needs_references = True
    scores = ("reference_perplexity",)
    lower_is_better = ("reference_perplexity",)
    rewardable = False

    @dataclass(frozen=True)
    class Args:
        stride: int = 512
        max_length: int = RL4LMS_WINDOW
        separator: str = "\n\n"

        def __post_init__(self) -> None:
            check(self.stride > 0, f"stride must be > 0, got {self.stride}")
            check(self.max_length >= self.stride,
                  f"max_length must be >= stride = {self.stride}, got {self.max_length}: each window scores its last "
                  f"stride tokens")

    @classmethod
    def build(cls, args: "ReferencePerplexity.Args", context: MetricContext) -> MetricFn:
        import torch

        policy = context.evaluated
        if policy is None:
            raise MetricUnavailableError("reference_perplexity scores the evaluated model, which only evaluate has")
        if policy.kind != "causal":
            raise MetricUnavailableError("reference_perplexity is defined for causal models (RL4LMs' "
                                         "causal_perplexity); this model is seq2seq")
        config = policy.model.config
        context_size = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
        window = min(args.max_length, context_size) if context_size else args.max_length
        stride = min(args.stride, window)

        def nll(ids: list[int], scored: int) -> float:
            """Summed NLL of the last ``scored`` tokens of ``ids`` (at most len(ids) - 1 have a prediction)."""
            inputs = torch.tensor([ids], dtype=torch.long, device=policy.device)
            with policy.backend.execution.autocast():
                logits = policy.model(input_ids=inputs).logits[0, :-1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, inputs[0, 1:, None])[:, 0]
            return float(-logp[-min(scored, len(ids) - 1):].sum()) if len(ids) > 1 else float("nan")

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample = []
            with torch.no_grad():
                for refs in references:
                    ids = policy.tokenizer(args.separator.join(refs)).input_ids[:window]
                    per_sample.append(math.exp(nll(ids, len(ids)) / (len(ids) - 1)) if len(ids) > 1 else float("nan"))
                text = policy.tokenizer(args.separator.join(r for refs in references for r in refs)).input_ids
                total, end = 0.0, 0
                for i in range(0, len(text), stride):
                    begin, end = max(i + stride - window, 0), min(i + stride, len(text))
                    target = end - i
                    ids = text[begin:end]
                    predicted = min(target, len(ids) - 1)
                    if predicted > 0:  # a window's mean NLL times its target length, as RL4LMs
                        total += nll(ids, target) / predicted * target
            corpus = math.exp(total / end) if end else float("nan")
            return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

        return compute
