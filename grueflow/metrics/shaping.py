"""Shaping terms for rewards: a length penalty, CommonGen's repeat penalties and a dense token cost (all <= 0)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from grueflow.metrics import METRICS, TOKENS_KEY, Metric, MetricContext, MetricFn, MetricResult, mean

STOPWORDS = frozenset(
    "a an the and or but of to in on at by for with from into onto over under up down out off is are was were be "
    "been being am do does did has have had it its this that these those he she they we you i his her their our "
    "your my him them us me as so than then there here not no".split())


@METRICS.register("length_penalty", "-per_word * |words - target_length|: a shaping term, in (-inf, 0]")
class LengthPenalty(Metric):
    category = "shaping"
    scores = ("length_penalty",)

    @dataclass(frozen=True)
    class Args:
        target_length: int = 20
        per_word: float = 0.05

        def __post_init__(self) -> None:
            if self.target_length < 0 or self.per_word < 0:
                raise ValueError(f"length_penalty needs target_length >= 0 and per_word >= 0; got "
                                 f"target_length={self.target_length}, per_word={self.per_word}")

    @classmethod
    def build(cls, args: "LengthPenalty.Args", context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [0.0 - args.per_word * abs(len(g.split()) - args.target_length) for g in generations]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


def repeated_content_words(text: str) -> int:
    """Occurrences of content words (not in :data:`STOPWORDS`) beyond their first, case-insensitive; words are
    :func:`grueflow.metrics.task.split_words`' (letters of any script, so "naïve" and "собака" are one word each)."""
    from grueflow.metrics.task import split_words

    counts = Counter(w for w in split_words(text) if w not in STOPWORDS)
    return sum(c - 1 for c in counts.values())


@METRICS.register("repeat_penalty", "-per_repeat * repeated content words (CommonGen shaping), in (-inf, 0]")
class RepeatPenalty(Metric):
    category = "shaping"
    scores = ("repeat_penalty",)

    @dataclass(frozen=True)
    class Args:
        per_repeat: float = 1.0

        def __post_init__(self) -> None:
            if self.per_repeat < 0:
                raise ValueError(f"repeat_penalty needs per_repeat >= 0; got {self.per_repeat}")

    @classmethod
    def build(cls, args: "RepeatPenalty.Args", context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [0.0 - args.per_repeat * repeated_content_words(g) for g in generations]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


def common_gen_penalty(prompt: str, generation: str, prefix: str, end_token: str) -> float:
    """RL4LMs' ``common_gen_repeat_penalty`` (``CommonGenPenaltyShapingFunction``): -1 when the generation, lower
    cased, holds the prompt's concept list (the text after ``prefix``, without a final ``end_token``), the
    prefix, "generate" or "sentence"; else 0. A prompt without the prefix counts whole as the concept list."""
    concepts = prompt.split(prefix, 1)[1] if prefix in prompt else prompt
    if end_token and concepts.endswith(end_token):
        concepts = concepts[:-len(end_token)]
    text = generation.lower()
    copied = concepts.lower() in text or prefix in text or "generate" in text or "sentence" in text
    return -1.0 if copied else 0.0


@METRICS.register("common_gen_repeat_penalty",
                  "RL4LMs' CommonGen shaping: -1 if the generation copies the concepts or the instruction, else 0")
class CommonGenRepeatPenalty(Metric):
    """RL4LMs' ``shaping_fn: common_gen_repeat_penalty`` of its METEOR reward (which adds it to METEOR: weight
    1 here). RL4LMs' prompt ends in its ``concept_end_token`` ".", which it cuts before matching; ``end_token``
    is cut only where the prompt ends in it (the common_gen datapool writes none unless ``concept_end_token``
    is set)."""

    category = "shaping"
    scores = ("common_gen_penalty",)

    @dataclass(frozen=True)
    class Args:
        prefix: str = "generate a sentence with: "
        end_token: str = "."

        def __post_init__(self) -> None:
            if not self.prefix.strip():
                raise ValueError(f"common_gen_repeat_penalty needs a prefix with a visible character; got "
                                 f"{self.prefix!r}")

    @classmethod
    def build(cls, args: "CommonGenRepeatPenalty.Args", context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [common_gen_penalty(p, g, args.prefix, args.end_token) for p, g in zip(prompts, generations)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


@METRICS.register("token_cost", "dense: -1 for every completion token (EOS included); a per-token length cost")
class TokenCost(Metric):
    """A dense reward (paid token by token in RL): -1 for each completion token, so its weight is the cost of
    one token; its per-sample score is minus the completion's length in tokens. Without the tokens (a metric
    outside RL or evaluation), the generation's whitespace words stand in for them."""

    category = "shaping"
    scores = ("token_cost",)
    dense = True

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            tokens = [m.get(TOKENS_KEY, g.split()) for m, g in zip(meta, generations)]
            per_token = [[-1.0] * len(t) for t in tokens]
            scores = [sum(row) for row in per_token]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)}, {cls.key(): per_token})

        return compute
