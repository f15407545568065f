"""Evaluation: generate on the test split with the eval settings, then score with the task's metrics."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from grueflow import postprocess
from grueflow.config import (REWARD_KEY, REWARD_LEFT_OUT_KEY, REWARD_SAMPLES_KEY, GenerationConfig, MetricSpec,
                             RewardConfig, typed_args)
from grueflow.data import Sample, read_split
from grueflow.hub import HubUnreachableError
from grueflow.io import rounded
from grueflow.metrics import (METRICS, TOKENS_KEY, MetricContext, MetricUnavailableError, call_metric, check_meta,
                              check_result, check_split, nanmean)
from grueflow.metrics.reward import Reward, describe_nonfinite
from grueflow.models.policy import Policy, Prompts, completion_mask

log = logging.getLogger(__name__)


def generate(policy: Policy, samples: list[Sample], gen: GenerationConfig, batch_size: int = 32,
             progress: Callable[[int], None] | None = None, processor: Callable[[Prompts], Any] | None = None,
             tokens: list[list[str]] | None = None) -> list[str]:
    """One generation per sample, in batches, post-processed by ``gen.post_processing``; ``progress`` is called
    with each batch's number of samples; ``processor(prompts)``, when given, makes each batch's logits
    processor (NLPO's masks): one whose ``incremental`` is true follows one sampled sequence per row and decodes
    with :meth:`Policy.sample`, any other with ``generate``; ``tokens``, when given, is extended with each
    completion's tokens as text (a dense reward's inputs, :meth:`Policy.token_texts`)."""
    texts: list[str] = []
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        prompts = policy.encode([s.prompt for s in chunk])
        made = processor(prompts) if processor else None
        completions = (policy.sample(prompts, gen, 1, made) if made is not None and made.incremental
                       else policy.generate(prompts, gen, made))
        texts.extend(policy.decode(completions))
        if tokens is not None:
            tokens.extend(policy.token_texts(completions, completion_mask(completions, policy.eos_token_id)))
        if progress:
            progress(len(chunk))
    return postprocess.apply(gen.post_processing, texts)


def score(samples: list[Sample], generations: list[str], reward_cfg: RewardConfig | None,
          metrics: tuple[MetricSpec, ...], context: MetricContext, progress: Callable[[int], None] | None = None,
          tokens: list[list[str]] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, str]]:
    """Per-sample rows (prompt, generation, references, scores), corpus metrics, and the missing metrics.

    The task reward is scored exactly as in RL (``reward``, plus each component); every metric's
    corpus scores are added under their namespaced keys. Non-finite corpus values become ``None``
    (a metric that cannot be computed is missing, never 0). A metric that cannot run on this machine
    (a hub model offline, SPICE without Java) is missing too: its keys are ``None`` and the third
    value maps its id to the reason. The reward itself must always run (``reward_cfg`` None: no reward, the
    metrics alone). ``progress`` is called with 1 after the reward and after each metric.

    A sample that a reward component cannot score (NaN: e.g. no references, or ROUGE on references in a script
    its tokenizer does not read) has no reward: its per-sample ``reward`` is ``None``. The corpus ``reward`` and
    each component are then the mean over the samples that have one, as every metric's corpus score leaves out
    its NaN samples (:func:`grueflow.metrics.nanmean`), so the reward is never empty while its components have
    values; ``reward_left_out`` counts the samples left out and ``reward_samples`` all the samples (both present only
    when some were left out: the GRUE table notes them under the task), and a warning names the components.
    ``reward`` is ``None`` only when no sample has one. A NaN that the generation itself causes (a metric of one's
    own may give one) scores methods over different samples: the table's note makes that visible.
    """
    return Scorer(reward_cfg, metrics, context)(samples, generations, progress, tokens)


class Scorer:
    """:func:`score` with its reward and metrics built once, each at its first use, and reused for every later
    batch: evaluation during training scores the val split many times, and a metric may load a model."""

    def __init__(self, reward_cfg: RewardConfig | None, metrics: tuple[MetricSpec, ...], context: MetricContext
                 ) -> None:
        self.reward_cfg, self.metrics, self.context = reward_cfg, metrics, context
        self.reward: Reward | None = None
        self.built: dict[int, tuple[Callable[..., Any] | None, str | None]] = {}  # metric index -> (fn, why missing)

    def build(self) -> "Scorer":
        """Build the reward and every metric now (they are otherwise built at first use), so that a bad argument
        or model fails before the generations they would score are made; returns ``self``."""
        if self.reward_cfg is not None and self.reward is None:
            self.reward = Reward(self.reward_cfg, self.context)
        for index in range(len(self.metrics)):
            self._metric(index)
        return self

    def check(self, samples: list[Sample]) -> "Scorer":
        """Build the reward and metrics (:meth:`build`), then refuse with a DataError samples whose meta the reward
        or a metric can never score (:class:`grueflow.metrics.MetaChecked`: a missing ``meta['concepts']``, an
        intent outside the classifier's labels), so that the refusal comes before generating; returns ``self``."""
        self.build()
        meta = [s.meta for s in samples]
        if self.reward is not None:
            self.reward.check(meta)
        for compute, _ in self.built.values():
            if compute is not None:
                check_meta(compute, meta)
        return self

    def _metric(self, index: int) -> tuple[Callable[..., Any] | None, str | None]:
        if index not in self.built:
            spec = self.metrics[index]
            try:
                self.built[index] = (METRICS.get(spec.id).build(typed_args(spec), self.context), None)
            except (MetricUnavailableError, HubUnreachableError) as error:
                log.warning("metric %s is missing: %s", spec.id, error)
                self.built[index] = (None, str(error))
        return self.built[index]

    def __call__(self, samples: list[Sample], generations: list[str], progress: Callable[[int], None] | None = None,
                 tokens: list[list[str]] | None = None
                 ) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, str]]:
        prompts = [s.prompt for s in samples]
        references = [list(s.references) for s in samples]
        meta = ([s.meta for s in samples] if tokens is None
                else [{**s.meta, TOKENS_KEY: t} for s, t in zip(samples, tokens)])
        per_sample: dict[str, list[float]] = {}
        corpus: dict[str, Any] = {}
        if self.reward_cfg is not None:  # None: the metrics alone (a warm start's val scores)
            if self.reward is None:
                self.reward = Reward(self.reward_cfg, self.context)
            total, parts = self.reward(prompts, generations, references, meta)
            per_sample = {REWARD_KEY: total, **parts}
            corpus = {REWARD_KEY: nanmean(total), **{k: nanmean(v) for k, v in parts.items()}}
            left_out = sum(math.isnan(t) for t in total)
            if left_out:
                corpus[REWARD_LEFT_OUT_KEY], corpus[REWARD_SAMPLES_KEY] = left_out, len(total)
                log.warning("the reward is left out for %d of %d samples, which its components could not score (%s); "
                            "the corpus reward is the mean over the other %d", left_out, len(total),
                            describe_nonfinite(parts), len(total) - left_out)
        missing: dict[str, str] = {}
        if progress:
            progress(1)
        for index, spec in enumerate(self.metrics):
            compute, why = self._metric(index)
            if compute is None:
                missing[spec.id] = why
                corpus.update({key: None for key in METRICS.get(spec.id).keys()})
            else:
                metric = METRICS.get(spec.id)
                result = check_result(spec.id, call_metric(f"metric {spec.id!r}", compute, prompts, generations,
                                                           references, meta), len(generations),
                                      [metric.key(score) for score in metric.scores], metric.keys())
                per_sample.update(result.per_sample)
                corpus.update(result.corpus)
            if progress:
                progress(1)
        rows = [{"id": s.id, "prompt": s.prompt, "generation": g, "references": list(s.references),
                 "scores": {k: _finite(v[i]) for k, v in per_sample.items()}}
                for i, (s, g) in enumerate(zip(samples, generations))]
        return rows, {k: _finite(v) for k, v in corpus.items()}, missing


def check_scored_splits(datapool: Path, metrics: tuple[MetricSpec, ...], validated: bool,
                        reward: RewardConfig | None = None, train: Sequence[Sample] = ()) -> None:
    """Before a training stage trains: refuse, with a DataError naming the split, the reward component or metric
    and the first sample (:func:`grueflow.metrics.check_split`), samples whose meta the task's reward or metrics can
    never score, in each split that the run or a later stage scores: ``train`` (RL's rollouts, scored by
    ``reward``), the val split where ``validated`` (eval_every: the reward, where given, and the metrics) and the
    test split, where the datapool has one (evaluate scores the reward and the metrics on it). Without it a datapool
    that lacks ``meta['concepts']`` or ``meta['table']`` trains the warm start and RL first, and evaluate refuses it
    at the end."""
    if train:
        check_split("train", [s.meta for s in train], "drawn by RL's rollouts", reward)
    if validated:
        check_split("val", [s.meta for s in read_split(datapool, "val")], "scored during training: eval_every",
                    reward, metrics)
    if (Path(datapool) / "test.jsonl").is_file():
        check_split("test", [s.meta for s in read_split(datapool, "test")], "scored by evaluate after training",
                    reward, metrics)


NO_REFERENCES = "no test sample has references"


def missing_references(samples: list[Sample], metrics: tuple[MetricSpec, ...], corpus: dict[str, Any],
                       missing: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``corpus`` and ``missing`` (as :func:`score` gives them for the test split) with each metric that
    :attr:`~grueflow.metrics.Metric.needs_references` recorded as missing, its keys ``None``, when no sample has
    references (``dummy_pool``; a test set published without them): it has nothing to score against, so its empty
    cell in the GRUE table gets a reason, as a metric that cannot run does, and never shows a number made of
    nothing. Unchanged when some sample has references."""
    if any(s.references for s in samples):
        return corpus, missing
    lacking = [spec.id for spec in metrics if METRICS.get(spec.id).needs_references and spec.id not in missing]
    for metric in lacking:
        log.warning("metric %s is missing: %s", metric, NO_REFERENCES)
    return ({**corpus, **{key: None for metric in lacking for key in METRICS.get(metric).keys()}},
            {**missing, **dict.fromkeys(lacking, NO_REFERENCES)})


def undefined_scores(metrics: tuple[MetricSpec, ...], corpus: dict[str, Any], missing: dict[str, str]
                     ) -> dict[str, str]:
    """``missing`` (as :func:`missing_references` gives it) with each corpus score that a metric which ran left
    without a value (NaN, written ``None``) added under its key, e.g. ``diversity/distinct_2``, with the reason
    its metric's :attr:`~grueflow.metrics.Metric.undefined_when` gives (every generation empty), so that its empty
    cell in the GRUE table is explained as a metric that cannot run is. A warning names each."""
    added = {}
    for spec in metrics:
        metric = METRICS.get(spec.id)
        if spec.id in missing:  # it did not run: its keys are None for the reason already recorded
            continue
        general = (f"metric {spec.id!r} gave no value (NaN) on these generations: it is undefined for them (no words "
                   f"to count, or no sample it could score)")
        for score in (*metric.scores, *metric.corpus_scores):
            key = metric.key(score)
            if key in corpus and corpus[key] is None and key not in missing:
                added[key] = metric.undefined_when.get(score, general)
                log.warning("%s is missing: %s", key, added[key])
    return {**missing, **added}


def _finite(value: float) -> float | None:
    return rounded(float(value)) if value is not None and math.isfinite(value) else None
