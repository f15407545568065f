"""Typed, strict, frozen configs for everything under params/.

Every params file is parsed into frozen dataclasses by :func:`parse`. An unknown key, a wrong
type, an out-of-range value or an unknown registry name fails here, at parse time, with a
:class:`ConfigError` that names the file, the key path, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from grueflow.io import DataError, read_text
from grueflow.registry import UnknownNameError


class ConfigError(ValueError):
    """A params file that does not validate; the message says where and how to fix it."""


# ---------------------------------------------------------------------------------------------
# Generic strict parsing of nested dataclasses
# ---------------------------------------------------------------------------------------------


def parse(cls: type, data: Any, where: str) -> Any:
    """Build dataclass ``cls`` from plain YAML data, strictly.

    ``where`` names the place for error messages, e.g. ``params/tasks/x.yaml: reward``.
    """
    return _convert(cls, data, where)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return {"str": "a string", "int": "an integer", "float": "a number", "bool": "true/false"}.get(
            tp.__name__, tp.__name__
        )
    return str(tp).replace("typing.", "")


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not allowed; choose one of {', '.join(map(repr, args))}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_type = args[0] if args else Any
        return tuple(_convert(item_type, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        val_type = args[1] if args else Any
        return types.MappingProxyType({k: _convert(val_type, v, f"{where}.{k}") for k, v in value.items()})
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {where}")


def _convert_dataclass(cls: type, value: Any, where: str) -> Any:
    at = where if where.endswith(":") else f"{where}:"  # a whole file's where ends in ':' already
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{at} expected a mapping with keys {_keys(cls)}, got {value!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - names)
    if unknown:
        raise ConfigError(f"{at} unknown key {unknown[0]!r}; valid keys: {_keys(cls)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in value:
            kwargs[f.name] = _convert(hints[f.name], value[f.name], _join(where, f.name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{at} missing required key {f.name!r}")
    try:
        return cls(**kwargs)
    except (ValueError, UnknownNameError) as err:  # ConfigError included
        raise ConfigError(f"{at} {err}") from None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if not where.endswith(":") else f"{where} {key}"


def _keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls) if f.init)


def to_dict(obj: Any) -> Any:
    """Plain-data view of a config (for stage.json and fingerprints)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, (dict, types.MappingProxyType)):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# ---------------------------------------------------------------------------------------------
# Task files: params/tasks/<task>.yaml
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatapoolConfig:
    """Which datapool loader builds the Samples, and its arguments (validated by the loader)."""

    id: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from grueflow.data import DATAPOOLS

        loader = DATAPOOLS.get(self.id)
        parse(loader.Args, dict(self.args), "args")


@dataclass(frozen=True)
class TokenizerConfig:
    """A tokenizer trained here with the `tokenizers` library on the task's training text."""

    vocab_size: int = 512

    def __post_init__(self) -> None:
        _check(self.vocab_size >= 64, f"vocab_size must be >= 64, got {self.vocab_size}")


@dataclass(frozen=True)
class PretrainConfig:
    """Brief language-model pre-training of a tiny model on the task's unlabelled text."""

    steps: int = 300
    seed: int = 0
    batch_size: int = 32
    learning_rate: float = 3e-3
    max_length: int = 48

    def __post_init__(self) -> None:
        _check(self.steps >= 0, f"steps must be >= 0, got {self.steps}")
        _check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        _check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        _check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")


@dataclass(frozen=True)
class ModelConfig:
    """The base model: a tiny model built here from ``config``, or a pretrained hub id / local dir.

    ``id`` is a model-registry name (``tiny_gpt2``, ``tiny_t5``, ``pretrained``).
    ``trust_remote_code`` (``pretrained`` only) lets transformers import and run the Python code that
    a hub repository or model folder ships for its architecture; leave it false unless you have read
    that code: it runs with the pipeline's permissions.
    """

    id: str
    name_or_path: Optional[str] = None
    kind: Optional[Literal["causal", "seq2seq"]] = None
    config: dict[str, Any] = field(default_factory=dict)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        from grueflow.models import MODELS

        source = MODELS.get(self.id)
        source.validate(self)


@dataclass(frozen=True)
class LengthsConfig:
    """Token budgets: prompts are truncated to ``prompt``, targets (supervised) to ``target``."""

    prompt: int = 32
    target: int = 32

    def __post_init__(self) -> None:
        _check(self.prompt > 0 and self.target > 0, f"lengths must be > 0, got prompt={self.prompt} target={self.target}")


@dataclass(frozen=True)
class GenerationConfig:
    """Arguments for ``model.generate``; rollout and evaluation settings are kept apart."""

    max_new_tokens: int = 16
    min_new_tokens: int = 1
    do_sample: bool = True
    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        _check(self.max_new_tokens > 0, f"max_new_tokens must be > 0, got {self.max_new_tokens}")
        _check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        _check(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        _check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")

    def generate_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "min_new_tokens": self.min_new_tokens,
                                  "do_sample": self.do_sample}
        if self.do_sample:
            kwargs.update(top_k=self.top_k, top_p=self.top_p, temperature=self.temperature)
        return kwargs


@dataclass(frozen=True)
class MetricSpec:
    """A registered metric and its arguments."""

    id: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from grueflow.metrics import METRICS

        metric = METRICS.get(self.id)
        parse(metric.Args, dict(self.args), "args")


@dataclass(frozen=True)
class RewardComponent:
    """One weighted term of a task's reward: a metric's per-sample score ``score`` (default: its primary)."""

    metric: str
    weight: float = 1.0
    score: Optional[str] = None
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from grueflow.metrics import METRICS

        metric = METRICS.get(self.metric)
        parse(metric.Args, dict(self.args), "args")
        if self.score is not None and self.score not in metric.scores:
            raise ValueError(f"metric {self.metric!r} has no score {self.score!r}; valid: {', '.join(metric.scores)}")

    @property
    def key(self) -> str:
        from grueflow.metrics import METRICS

        return METRICS.get(self.metric).key(self.score)


@dataclass(frozen=True)
class RewardConfig:
    """The task reward: a weighted sum of metric scores, each component logged on its own."""

    components: tuple[RewardComponent, ...]

    def __post_init__(self) -> None:
        _check(len(self.components) > 0, "a reward needs at least one component")
        _check(any(c.weight != 0 for c in self.components), "every reward weight is 0; give one component a non-zero weight")
        keys = [c.key for c in self.components]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        _check(not repeated, f"reward components {repeated} appear twice; merge them into one component with the summed weight")


@dataclass(frozen=True)
class TaskConfig:
    """One GRUE-shaped task: data, model, generation, reward and metrics."""

    datapool: DatapoolConfig
    model: ModelConfig
    lengths: LengthsConfig
    rollout_generation: GenerationConfig
    eval_generation: GenerationConfig
    reward: RewardConfig
    metrics: tuple[MetricSpec, ...]
    headline_metrics: tuple[str, ...]
    method_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from grueflow.rl import ALGORITHMS

        check_headlines(self.headline_metrics, self.reward, self.metrics)
        valid = ALGORITHMS.names() + ["supervised"]
        unknown = sorted(set(self.method_overrides) - set(valid))
        _check(not unknown, f"method_overrides: unknown method {unknown[0] if unknown else ''!r}; valid: {', '.join(valid)}")


REWARD_KEY = "reward"  # the task reward's corpus key in metrics.json
FLUENCY_METRIC = "perplexity"  # evaluate always scores it: the GRUE table's fluency_ppl


def with_fluency(metrics: tuple[MetricSpec, ...]) -> tuple[MetricSpec, ...]:
    """The metrics evaluate scores: the task's, plus perplexity when the task does not list it."""
    return metrics if any(m.id == FLUENCY_METRIC for m in metrics) else metrics + (MetricSpec(FLUENCY_METRIC),)


def produced_keys(reward: RewardConfig, metrics: tuple[MetricSpec, ...]) -> set[str]:
    """Every corpus key evaluate can write for this reward and these metrics (checked before any work)."""
    from grueflow.metrics import METRICS

    keys = {REWARD_KEY, *(c.key for c in reward.components)}
    for spec in metrics:
        keys.update(METRICS.get(spec.id).keys())
    return keys


def check_headlines(headline: tuple[str, ...], reward: RewardConfig, metrics: tuple[MetricSpec, ...]) -> None:
    """Raise ValueError unless every headline metric is a key evaluate writes (the fluency metric included)."""
    produced = produced_keys(reward, with_fluency(metrics))
    unknown = sorted(set(headline) - produced)
    if unknown:
        raise ValueError(f"headline_metrics {unknown} are not produced by the task's reward or metrics; "
                         f"produced: {', '.join(sorted(produced))}")


# ---------------------------------------------------------------------------------------------
# Method files: params/methods/<method>.yaml
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters (Hu et al. 2021, through peft) instead of full fine-tuning: only the adapters train.

    Each targeted linear layer ``W`` becomes ``W + (alpha / r) * B A`` with rank-``r`` factors, ``B``
    starting at zero (so training starts exactly at the base model); ``dropout`` applies to the
    adapter's input. ``target_modules`` are module-name suffixes (``c_attn`` for GPT-2, ``q``/``v``
    for T5, ``q_proj``/``v_proj`` for Llama/SmolLM2); None takes peft's default for the architecture.
    The base weights stay frozen, so the KL reference is the base with the adapter disabled.
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        _check(self.r > 0, f"r must be > 0, got {self.r}")
        _check(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        _check(0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout}")
        _check(self.target_modules is None or len(self.target_modules) > 0,
               "target_modules must name at least one module, or be null for peft's default")


@dataclass(frozen=True)
class SupervisedConfig:
    """Warm start: supervised fine-tuning on (prompt, reference) pairs; ``lora`` None = all weights train."""

    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    lora: Optional[LoraConfig] = None
    processes: int = 1  # data-parallel processes (accelerate launch); each takes its shard of every batch

    def __post_init__(self) -> None:
        _check(self.processes >= 1, f"processes must be >= 1, got {self.processes}")
        _check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        _check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        _check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        _check(0 <= self.warmup_ratio < 1, f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")


@dataclass(frozen=True)
class KLConfig:
    """KL penalty against the frozen reference model (Ziegler et al. 2019; RL4LMs' defaults).

    Adaptive: ``error = clip((KL - target) / target, -0.2, 0.2)`` and
    ``coef <- coef * (1 + error * kl_lr)``, once per rollout.
    """

    coef: float = 0.05
    adaptive: bool = True
    target: Optional[float] = 1.0
    kl_lr: float = 0.1

    def __post_init__(self) -> None:
        _check(self.coef >= 0, f"coef must be >= 0, got {self.coef}")
        if self.adaptive:
            _check(self.target is not None and self.target > 0, f"adaptive KL needs target > 0, got {self.target}")


@dataclass(frozen=True)
class RLConfig:
    """What every RL algorithm shares: the loop, the optimiser, the clipped surrogate, KL control.

    Each iteration samples ``rollouts_per_iteration / group_size`` prompts and ``group_size``
    completions of each. The KL to the reference is estimated per token with ``kl_estimator``
    (k1 ``log r``, k2 ``(log r)^2 / 2``, k3 ``r - 1 - log r`` with ``r = p/q``; Schulman 2020) and
    either subtracted from the reward (PPO style) or added to the loss (``kl_in_loss``, GRPO style).
    Algorithms with a critic put a value head on the policy's own trunk (``critic: shared``, one
    model copy fewer) or on a separate copy of the start model (``critic: separate``, as RL4LMs).
    With ``lora`` the policy (and a separate critic, with its own adapter) train LoRA adapters
    only, and the reference is the policy with its adapter disabled: no reference copy is held.
    Every ``checkpoint_every`` iterations a resumable checkpoint goes to ``<output>.resume/iteration<k>/``;
    the newest ``keep_checkpoints`` are kept and a rerun resumes from the newest complete one.
    ``kl_ceiling`` (optional) bounds the rollout's mean per-sequence KL to the reference: above it the
    policy has run away, and the stage stops (``kl_ceiling_action: stop``) or skips that update (``skip``).
    """

    iterations: int = 30
    rollouts_per_iteration: int = 64
    group_size: int = 1
    epochs: int = 4
    minibatch_size: int = 16
    learning_rate: float = 1e-4
    lr_schedule: Literal["constant", "linear"] = "constant"
    optimizer: Literal["adamw", "rmsprop"] = "adamw"
    clip_range: float = 0.2
    ent_coef: float = 0.0
    max_grad_norm: float = 1.0
    target_kl: Optional[float] = None
    kl: KLConfig = field(default_factory=KLConfig)
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    kl_in_loss: bool = False
    critic: Literal["shared", "separate"] = "shared"
    checkpoint_every: int = 10
    keep_checkpoints: int = 1
    lora: Optional[LoraConfig] = None
    kl_ceiling: Optional[float] = None
    kl_ceiling_action: Literal["stop", "skip"] = "stop"
    processes: int = 1  # data-parallel processes (accelerate launch); each samples and learns from its shard

    def __post_init__(self) -> None:
        _check(self.iterations > 0, f"iterations must be > 0, got {self.iterations}")
        _check(self.processes >= 1, f"processes must be >= 1, got {self.processes}")
        _check(self.processes == 1 or (self.rollouts_per_iteration // self.group_size) % self.processes == 0,
               f"processes={self.processes} must divide the {self.rollouts_per_iteration // self.group_size} prompt "
               f"groups of a rollout (rollouts_per_iteration / group_size), so each process gets whole groups")
        _check(self.processes == 1 or (self.minibatch_size % self.processes == 0
                                       and (self.minibatch_size // self.processes) % self.group_size == 0),
               f"processes={self.processes} must split minibatch_size={self.minibatch_size} into whole groups of "
               f"group_size={self.group_size}; make minibatch_size a multiple of processes x group_size")
        _check(self.kl_ceiling is None or self.kl_ceiling > 0, f"kl_ceiling must be > 0 (or null), got {self.kl_ceiling}")
        _check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        _check(self.rollouts_per_iteration > 0 and self.minibatch_size > 0,
               f"rollouts_per_iteration and minibatch_size must be > 0, got {self.rollouts_per_iteration} "
               f"and {self.minibatch_size}")
        _check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        _check(self.clip_range > 0, f"clip_range must be > 0, got {self.clip_range}")
        _check(self.group_size > 0, f"group_size must be > 0, got {self.group_size}")
        _check(self.rollouts_per_iteration % self.minibatch_size == 0,
               f"rollouts_per_iteration={self.rollouts_per_iteration} is not a multiple of "
               f"minibatch_size={self.minibatch_size}; make it one")
        _check(self.rollouts_per_iteration % self.group_size == 0,
               f"rollouts_per_iteration={self.rollouts_per_iteration} is not a multiple of "
               f"group_size={self.group_size}; make it one")
        _check(self.checkpoint_every > 0, f"checkpoint_every must be > 0, got {self.checkpoint_every}")
        _check(self.keep_checkpoints >= 1, f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}; "
               f"the newest checkpoint is what a killed run resumes from")


@dataclass(frozen=True)
class PPOConfig(RLConfig):
    """PPO on whole sequences (Schulman et al. 2017; RL4LMs' defaults for gamma and lambda)."""

    clip_range_vf: Optional[float] = 0.2
    vf_coef: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    whiten_advantages: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1,
               f"gamma and gae_lambda must be in [0, 1], got {self.gamma} and {self.gae_lambda}")


@dataclass(frozen=True)
class NLPOConfig(PPOConfig):
    """NLPO (Ramamurthy et al. 2023, RL4LMs): PPO whose actions are masked by a lagged copy of the policy.

    At each generated token the mask model keeps its top-p nucleus (and at most ``top_k`` tokens if
    ``top_k`` > 0), never fewer than ``min_tokens_to_keep`` and never masking special tokens; it is
    refreshed from the policy every ``target_update_iterations`` rollouts.
    """

    top_p: float = 0.9
    top_k: int = 0
    min_tokens_to_keep: int = 1
    target_update_iterations: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        _check(self.min_tokens_to_keep >= 1, f"min_tokens_to_keep must be >= 1, got {self.min_tokens_to_keep}")
        _check(self.target_update_iterations >= 1,
               f"target_update_iterations must be >= 1, got {self.target_update_iterations}")


@dataclass(frozen=True)
class A2CConfig(RLConfig):
    """A2C (Mnih et al. 2016) with stable-baselines3's defaults: RMSprop, n-step returns, one step per rollout."""

    epochs: int = 1
    learning_rate: float = 7e-4
    optimizer: Literal["adamw", "rmsprop"] = "rmsprop"
    n_steps: int = 5
    gamma: float = 0.99
    vf_coef: float = 0.5
    normalize_advantage: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.n_steps > 0, f"n_steps must be > 0, got {self.n_steps}")
        _check(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")


@dataclass(frozen=True)
class TRPOConfig(RLConfig):
    """TRPO (Schulman et al. 2015) with sb3-contrib's defaults: natural-gradient policy step under a KL bound.

    The policy step solves ``H s = g`` by conjugate gradient (``cg_max_steps``, ``cg_damping``) and
    backtracks (``line_search_shrinking_factor``, ``line_search_max_iter``) until the mean token
    KL(old || new) is at most ``max_kl`` and the surrogate improved; ``learning_rate`` is the
    critic's (Adam, ``n_critic_updates`` steps per rollout).
    """

    learning_rate: float = 1e-3
    max_kl: float = 0.01
    cg_max_steps: int = 15
    cg_damping: float = 0.1
    line_search_shrinking_factor: float = 0.8
    line_search_max_iter: int = 10
    n_critic_updates: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    whiten_advantages: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.max_kl > 0, f"max_kl must be > 0, got {self.max_kl}")
        _check(self.processes == 1, f"processes must be 1 for TRPO, got {self.processes}: its natural-gradient "
               "step (conjugate gradient and line search) does not run data-parallel")
        _check(0 < self.line_search_shrinking_factor < 1,
               f"line_search_shrinking_factor must be in (0, 1), got {self.line_search_shrinking_factor}")


@dataclass(frozen=True)
class GroupConfig(RLConfig):
    """GRPO (Shao et al. 2024) and RLOO (Ahmadian et al. 2024): ``group_size`` samples per prompt, no critic."""

    group_size: int = 4
    epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.group_size >= 2, f"group-relative advantages need group_size >= 2, got {self.group_size}")


@dataclass(frozen=True)
class ReinforcePPConfig(RLConfig):
    """REINFORCE++ (Hu 2025): per-token KL-penalised returns, normalised over the whole batch, no critic."""

    gamma: float = 1.0
    epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")


# ---------------------------------------------------------------------------------------------
# Suite files: params/suite.yaml (the active grid) and params/suites/*.yaml
# ---------------------------------------------------------------------------------------------

RLStart = Literal["zero_shot", "supervised"]


# Cluster resources (issue 8): what each rule's jobs ask a scheduler for -------------------------------

@dataclass(frozen=True)
class JobResources:
    """One rule's request to the scheduler (Snakemake ``threads`` and ``resources``); None = the rule's default.

    ``mem_mb`` in megabytes, ``runtime`` in minutes (wall time; Slurm's ``--time``), ``gpu`` a GPU count
    (Slurm's ``--gpus``, Kubernetes' ``nvidia.com/gpu`` with ``gpu_manufacturer``; 0 asks for none),
    ``threads`` CPU cores (default: the suite's ``threads``).
    """

    threads: Optional[int] = None
    mem_mb: Optional[int] = None
    runtime: Optional[int] = None
    gpu: Optional[int] = None
    gpu_manufacturer: Optional[Literal["nvidia", "amd"]] = None

    def __post_init__(self) -> None:
        for name in ("threads", "mem_mb", "runtime"):
            value = getattr(self, name)
            _check(value is None or value >= 1, f"{name} must be >= 1, got {value}")
        _check(self.gpu is None or self.gpu >= 0, f"gpu must be >= 0, got {self.gpu}")


# the defaults fit the embedded suite on a laptop; suites at GRUE scale raise them (params/suites/grue.yaml)
JOB_RESOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "prepare_datapool": {"mem_mb": 1000, "runtime": 10, "gpu": 0},
    "base_model": {"mem_mb": 2000, "runtime": 30, "gpu": 0},
    "warm_start": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
    "rl_finetune": {"mem_mb": 3000, "runtime": 120, "gpu": 0},
    "evaluate": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
    "aggregate": {"mem_mb": 1000, "runtime": 10, "gpu": 0},
    "build_preferences": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
    "train_reward_model": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
    "dpo": {"mem_mb": 3000, "runtime": 120, "gpu": 0},
}


@dataclass(frozen=True)
class Resources:
    """Per-rule scheduler requests (a suite's ``resources:``); each key a rule, each unset value its default."""

    prepare_datapool: JobResources = field(default_factory=JobResources)
    base_model: JobResources = field(default_factory=JobResources)
    warm_start: JobResources = field(default_factory=JobResources)
    rl_finetune: JobResources = field(default_factory=JobResources)
    evaluate: JobResources = field(default_factory=JobResources)
    aggregate: JobResources = field(default_factory=JobResources)
    build_preferences: JobResources = field(default_factory=JobResources)
    train_reward_model: JobResources = field(default_factory=JobResources)
    dpo: JobResources = field(default_factory=JobResources)

    def threads(self, rule: str, default: int) -> int:
        """The cores rule ``rule`` asks for: its ``threads``, else ``default`` (the suite's)."""
        value = getattr(self, rule).threads
        return default if value is None else value

    def of(self, rule: str) -> dict[str, Any]:
        """Snakemake ``resources`` of rule ``rule``: ``mem_mb`` and ``runtime``, plus ``gpu`` (and the
        manufacturer) only when it asks for GPUs, since executors treat a ``gpu`` key as a GPU request."""
        own = {k: v for k, v in to_dict(getattr(self, rule)).items() if v is not None and k != "threads"}
        merged = {**JOB_RESOURCE_DEFAULTS[rule], **own}
        if not merged["gpu"]:
            merged.pop("gpu")
            merged.pop("gpu_manufacturer", None)
        return merged


@dataclass(frozen=True)
class SuiteConfig:
    """The grid: tasks x methods x seeds.

    The methods are ``zero_shot`` (the base model), ``supervised`` (the warm start), and, for each
    algorithm, RL from the base model (``<algorithm>``) and from the warm start (``supervised+<algorithm>``);
    ``rl_starts`` may keep only one of those two starts. ``preference_methods`` (issue 7: ``dpo``) learn
    from a preference set built per task from a metric, or read from ``preference_files[<task>]`` (a
    ``preferences.jsonl``, e.g. the human-evaluation import's); each is a method row from each RL start.
    ``resources`` sizes each rule's jobs for a scheduler (:class:`Resources`). ``precision`` is the numeric
    precision of every stage that runs a model (a param, since it changes results): ``fp32``, ``bf16`` (autocast
    with float32 master weights; frozen models in bf16), or ``auto``, bf16 on CUDA and fp32 on the CPU
    (:mod:`grueflow.device`). The device itself is an execution setting, not a suite key.
    """

    tasks: tuple[str, ...]
    algorithms: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    threads: int = 1
    params_dir: str = "params"
    rl_starts: tuple[RLStart, ...] = ("zero_shot", "supervised")
    resources: Resources = field(default_factory=Resources)
    preference_methods: tuple[str, ...] = ()
    preference_files: dict[str, str] = field(default_factory=dict)
    precision: Literal["auto", "fp32", "bf16"] = "auto"

    @property
    def methods(self) -> list[str]:
        """The table's methods in grid order: zero_shot, supervised, then each algorithm and each preference
        method from each RL start."""
        return ["zero_shot", "supervised"] + [method_name(s, a) for a in self.algorithms + self.preference_methods
                                              for s in self.rl_starts]

    def __post_init__(self) -> None:
        from grueflow.rl import ALGORITHMS

        _check(len(self.tasks) > 0, "a suite needs at least one task")
        for name in self.tasks:  # a task name becomes file and folder names, and words of DVC's shell commands
            _check(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) is not None,
                   f"tasks: {name!r} is not a usable task name; use letters, digits, '_', '.' and '-' only "
                   f"(rename its file params/tasks/<name>.yaml to match)")
        _check(len(self.seeds) > 0, "a suite needs at least one seed")
        _check(min(self.seeds) >= 0, f"seeds must be >= 0, got {list(self.seeds)}")
        _check(len(set(self.seeds)) == len(self.seeds), f"seeds {list(self.seeds)} repeat a seed; list each once")
        _check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")
        _check(len(self.rl_starts) > 0 and len(set(self.rl_starts)) == len(self.rl_starts),
               f"rl_starts must list zero_shot and/or supervised once each, got {list(self.rl_starts)}")
        for algorithm in self.algorithms:
            if algorithm not in ALGORITHMS:
                raise ValueError(f"algorithms: {ALGORITHMS.unknown_message(algorithm)}")
        from grueflow.preference.config import PREFERENCE_METHODS

        for name in self.preference_methods:
            _check(name in PREFERENCE_METHODS, f"preference_methods: unknown preference method {name!r}; "
                                               f"valid: {', '.join(PREFERENCE_METHODS)}")
        _check(len(set(self.preference_methods)) == len(self.preference_methods),
               f"preference_methods {list(self.preference_methods)} repeat a method; list each once")
        unknown = sorted(set(self.preference_files) - set(self.tasks))
        _check(not unknown, f"preference_files: {unknown[0] if unknown else ''!r} is not a task of this suite; "
                            f"valid: {', '.join(self.tasks)}")


def method_name(start: RLStart, algorithm: Optional[str]) -> str:
    """The GRUE-table name of a method: zero_shot, supervised, <algorithm>, supervised+<algorithm>."""
    if algorithm is None:
        return start
    return algorithm if start == "zero_shot" else f"supervised+{algorithm}"


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"params file {str(path)!r} does not exist")
    try:
        return yaml.safe_load(read_text(path))
    except DataError as err:  # not UTF-8: the message names the line
        raise ConfigError(str(err)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(f"{path}: {at}not valid YAML: {getattr(err, 'problem', None) or err}") from None


def load_section(cls: type, path: str | Path, key: Optional[str] = None) -> Any:
    """Parse one params file (or only its ``key`` section, the DVC/Snakemake params slice)."""
    data = read_yaml(path)
    if key is None:
        return parse(cls, data, f"{path}:")
    if not isinstance(data, dict) or key not in data:
        raise ConfigError(f"{path}: missing required key {key!r}")
    return parse(cls, data[key], f"{path}: {key}")


def load_task(path: str | Path) -> TaskConfig:
    return load_section(TaskConfig, path)


def merge_overrides(base: Any, overrides: Any) -> Any:
    """``base`` with ``overrides`` laid over it, mapping by mapping; any other value replaces."""
    if isinstance(base, dict) and isinstance(overrides, dict):
        return {**base, **{k: merge_overrides(base.get(k), v) for k, v in overrides.items()}}
    return overrides


def load_method(method: str, path: str | Path, task_file: str | Path | None = None) -> Any:
    """A method file (an RL algorithm's or ``supervised``), with the task file's ``method_overrides.<method>``
    laid over it when ``task_file`` is given: RL4LMs tunes methods per task (e.g. IMDB's KL coefficient)."""
    from grueflow.rl import ALGORITHMS

    try:
        cls = SupervisedConfig if method == "supervised" else ALGORITHMS.get(method).Config
    except UnknownNameError as err:
        raise ConfigError(f"{path}: {err}") from None
    data = read_yaml(path)
    overrides = (read_yaml(task_file) or {}).get("method_overrides") if task_file is not None else None
    if not overrides or not isinstance(overrides, dict) or not overrides.get(method):
        return parse(cls, data, f"{path}:")
    return parse(cls, merge_overrides(data, overrides[method]), f"{path} with {task_file}: method_overrides.{method}:")


@dataclass(frozen=True)
class Suite:
    """A validated suite with every task and method file it names, parsed."""

    config: SuiteConfig
    tasks: dict[str, TaskConfig]
    methods: dict[str, Any]
    supervised: SupervisedConfig


def load_suite(data: dict[str, Any], where: str = "suite") -> Suite:
    """Validate a suite and every params file it names; raises :class:`ConfigError` on the first problem."""
    suite = parse(SuiteConfig, data, f"{where}:")
    params = Path(suite.params_dir)
    tasks = {}
    for name in suite.tasks:
        path = params / "tasks" / f"{name}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in (params / "tasks").glob("*.yaml"))
            raise ConfigError(f"{where}: task {name!r} has no task file {path}; valid tasks: {', '.join(known)}")
        tasks[name] = load_task(path)
    methods = {a: load_method(a, params / "methods" / f"{a}.yaml") for a in suite.algorithms}
    supervised = load_method("supervised", params / "methods" / "supervised.yaml")
    for name in suite.tasks:  # each task's overrides must give valid methods too
        for method in [*suite.algorithms, "supervised"]:
            load_method(method, params / "methods" / f"{method}.yaml", params / "tasks" / f"{name}.yaml")
    if suite.preference_methods:  # issue 7: the preference stages' params files
        from grueflow.preference.config import preference_method_files

        for stem, cls in preference_method_files(suite.preference_methods).items():
            load_section(cls, params / "methods" / f"{stem}.yaml")
    return Suite(suite, tasks, methods, supervised)
