"""Lexical overlap with the references: ROUGE (rouge-score) and BLEU (sacrebleu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean


@METRICS.register("rouge", "ROUGE-1/2/L/Lsum F1 (rouge-score, Porter stemming), best over references")
class Rouge(Metric):
    category = "lexical"
    scores = ("rouge1", "rouge2", "rougeL", "rougeLsum")

    @dataclass(frozen=True)
    class Args:
        use_stemmer: bool = True

    @classmethod
    def build(cls, args: "Rouge.Args", context: MetricContext) -> MetricFn:
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(list(cls.scores), use_stemmer=args.use_stemmer)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample: dict[str, list[float]] = {cls.key(s): [] for s in cls.scores}
            for generation, refs in zip(generations, references):
                result = scorer.score_multi(list(refs), generation) if refs else {}
                for s in cls.scores:
                    per_sample[cls.key(s)].append(result[s].fmeasure if refs else float("nan"))
            return MetricResult(per_sample, {k: mean(v) for k, v in per_sample.items()})

        return compute


@METRICS.register("bleu", "BLEU-4 (sacrebleu): corpus score, and sentence BLEU per sample, in [0, 100]")
class Bleu(Metric):
    category = "lexical"
    scores = ("bleu",)

    @dataclass(frozen=True)
    class Args:
        tokenize: str = "13a"

    @classmethod
    def build(cls, args: "Bleu.Args", context: MetricContext) -> MetricFn:
        import sacrebleu

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample = [sacrebleu.sentence_bleu(g, list(r), tokenize=args.tokenize).score
                          for g, r in zip(generations, references)]
            width = max(len(r) for r in references)
            streams = [[r[i] if i < len(r) else None for r in references] for i in range(width)]
            corpus = sacrebleu.corpus_bleu(list(generations), streams, tokenize=args.tokenize).score
            return MetricResult({cls.key(): per_sample}, {cls.key(): float(corpus)})

        return compute
