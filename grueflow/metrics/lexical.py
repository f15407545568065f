"""Lexical overlap with the references: ROUGE (rouge-score); BLEU, chrF, chrF++ and TER (sacrebleu)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean, nanmean


@METRICS.register("rouge", "ROUGE-1/2/L/Lsum F1 (rouge-score, Porter stemming), best over references")
class Rouge(Metric):
    category = "lexical"
    scores = ("rouge1", "rouge2", "rougeL", "rougeLsum")

    @dataclass(frozen=True)
    class Args:
        """``split_sentences``: for ROUGE-Lsum, put each sentence on its own line first (pysbd), as the Hugging
        Face summarization scripts do with NLTK punkt; rouge-score itself splits only at newlines."""

        use_stemmer: bool = True
        split_sentences: bool = True

    @classmethod
    def build(cls, args: "Rouge.Args", context: MetricContext) -> MetricFn:
        from rouge_score import rouge_scorer

        from grueflow.metrics.sentences import split_sentences

        scorer = rouge_scorer.RougeScorer(list(cls.scores), use_stemmer=args.use_stemmer)

        def lines(text: str) -> str:
            return "\n".join(split_sentences(text)) if args.split_sentences else text

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample: dict[str, list[float]] = {cls.key(s): [] for s in cls.scores}
            for generation, refs in zip(generations, references):
                result = scorer.score_multi([lines(r) for r in refs], lines(generation)) if refs else {}
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


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[Any]]:
    """sacrebleu's reference layout: one stream per reference position, ``None`` where a sample has fewer."""
    width = max((len(r) for r in references), default=0)
    return [[r[i] if i < len(r) else None for r in references] for i in range(width)]


def sacrebleu_compute(cls: type[Metric], scorer: Any) -> MetricFn:
    """Sentence scores per sample (NaN without references) and the corpus score over samples with references."""

    def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                meta: Sequence[dict[str, Any]]) -> MetricResult:
        per_sample = [float(scorer.sentence_score(g, list(r)).score) if r else float("nan")
                      for g, r in zip(generations, references)]
        kept = [(g, r) for g, r in zip(generations, references) if r]
        corpus = (float(scorer.corpus_score([g for g, _ in kept], reference_streams([r for _, r in kept])).score)
                  if kept else float("nan"))
        return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

    return compute


@METRICS.register("sacrebleu", "SacreBLEU (sacrebleu.BLEU) with a chosen tokenizer and casing, in [0, 100]")
class SacreBleu(Metric):
    category = "lexical"
    scores = ("sacrebleu",)

    @dataclass(frozen=True)
    class Args:
        tokenize: Literal["none", "13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200"] = "13a"
        lowercase: bool = False

    @classmethod
    def build(cls, args: "SacreBleu.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import BLEU

        return sacrebleu_compute(cls, BLEU(tokenize=args.tokenize, lowercase=args.lowercase, effective_order=True))


@METRICS.register("sentence_bleu", "sentence BLEU (sacrebleu, effective order) per sample; corpus = their mean")
class SentenceBleu(Metric):
    category = "lexical"
    scores = ("sentence_bleu",)

    @dataclass(frozen=True)
    class Args:
        tokenize: str = "13a"

    @classmethod
    def build(cls, args: "SentenceBleu.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import BLEU

        inner = sacrebleu_compute(cls, BLEU(tokenize=args.tokenize, effective_order=True))

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample = inner(prompts, generations, references, meta).per_sample
            return MetricResult(per_sample, {cls.key(): nanmean(per_sample[cls.key()])})

        return compute


@METRICS.register("chrf", "chrF (sacrebleu, character 6-grams, beta 2), in [0, 100]")
class Chrf(Metric):
    category = "lexical"
    scores = ("chrf",)
    word_order: ClassVar[int] = 0

    @dataclass(frozen=True)
    class Args:
        lowercase: bool = False

    @classmethod
    def build(cls, args: "Chrf.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import CHRF

        return sacrebleu_compute(cls, CHRF(word_order=cls.word_order, lowercase=args.lowercase))


@METRICS.register("chrf_plus_plus", "chrF++ (sacrebleu, character 6-grams + word 2-grams), in [0, 100]")
class ChrfPlusPlus(Chrf):
    scores = ("chrf_plus_plus",)
    word_order = 2


@METRICS.register("ter", "translation edit rate (sacrebleu TER), in [0, inf), lower is better")
class Ter(Metric):
    category = "lexical"
    scores = ("ter",)

    @dataclass(frozen=True)
    class Args:
        case_sensitive: bool = False

    @classmethod
    def build(cls, args: "Ter.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import TER

        return sacrebleu_compute(cls, TER(case_sensitive=args.case_sensitive))


@METRICS.register("rouge_l_max", "ROUGE-L F1 (rouge-score) against each reference, the maximum, in [0, 1]")
class RougeLMax(Metric):
    category = "lexical"
    scores = ("rouge_l_max",)

    @dataclass(frozen=True)
    class Args:
        use_stemmer: bool = True

    @classmethod
    def build(cls, args: "RougeLMax.Args", context: MetricContext) -> MetricFn:
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=args.use_stemmer)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [float(max(scorer.score(r, g)["rougeL"].fmeasure for r in refs)) if refs else float("nan")
                      for g, refs in zip(generations, references)]
            return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

        return compute
