"""The metric registry: every metric is an evaluation metric and a reward, with one signature.

A metric class has a frozen ``Args`` dataclass (validated at parse time), a ``category`` and the
names of its per-sample ``scores`` (the first is the primary). ``build(args, context)`` returns a
callable ``(prompts, generations, references, meta) -> MetricResult`` whose keys are namespaced
``<category>/<score>``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import numbers
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Literal, Mapping, Optional, Sequence

import numpy as np

from grueflow.config import ConfigError, MetricFailedError, MetricUnavailableError, check_args_types, typed_args
from grueflow.io import DataError
from grueflow.registry import Registry

if TYPE_CHECKING:
    from grueflow.device import Execution

METRICS: Registry = Registry("metric", group="grueflow.metrics", check=lambda component: check_metric(component))


TOKENS_KEY = "completion_tokens"  # meta key of a dense metric's input: each completion's tokens, as text

# sacrebleu's BLEU tokenizers (sacrebleu.metrics.bleu._TOKENIZERS) that a BLEU-based metric's ``tokenize`` may name;
# 'spm' (an alias of flores101) and 'spBLEU-1K' are left out. flores101 and flores200 download a SentencePiece model.
SacrebleuTokenizer = Literal["none", "13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200"]


@dataclass(frozen=True)
class MetricResult:
    """Per-sample scores (one list per key, aligned with the inputs) and corpus scores; a dense metric also
    gives ``per_token`` scores (per key, one list per sample aligned with ``meta[i][TOKENS_KEY]``), whose sum
    is its per-sample score."""

    per_sample: dict[str, list[float]]
    corpus: dict[str, float]
    per_token: dict[str, list[list[float]]] = field(default_factory=dict)


class MetricResultError(ConfigError):
    """A metric returned scores of the wrong shape or kind (a metric of one's own, named by import path in the
    task file, may). A ConfigError, so that a stage ends in one line naming the metric and the key: the fix is in
    the metric's code, which the task file names."""


def call_metric(caller: str, compute: Callable[..., Any], prompts: Sequence[str], generations: Sequence[str],
                references: Sequence[Sequence[str]], meta: Sequence[dict[str, Any]]) -> Any:
    """``compute(prompts, generations, references, meta)``, with any exception it raises wrapped in a
    :class:`MetricFailedError` that starts with ``caller`` (e.g. ``reward component 'my_rewards:Odd'
    (custom/odd)``). grueflow's own one-line errors pass unchanged: a ConfigError or DataError already names what
    to fix, a :class:`MetricUnavailableError` says what this machine lacks, and an OSError is a path or disk problem
    the stage reports in one line.

    Each call gets its own copies of the lists (and of each meta mapping, one level deep), so that a metric that
    edits its inputs in place (``generations[i] = g.lower()``) cannot change what the next metric scores and what
    the predictions file saves."""
    try:
        return compute(list(prompts), list(generations), [r if isinstance(r, tuple) else list(r) for r in references],
                       [dict(m) for m in meta])
    except (ConfigError, DataError, MetricUnavailableError, OSError):
        raise
    except Exception as err:
        raise MetricFailedError(f"{caller} failed: {type(err).__name__}: {err}") from err


def check_result(name: str, result: Any, n: int, keys: Sequence[str], corpus_keys: Sequence[str] = ()
                 ) -> MetricResult:
    """``result`` of metric ``name`` on ``n`` generations, checked: a :class:`MetricResult` with one number per
    generation under each of ``keys`` (its per-sample keys), a corpus score under each of ``corpus_keys`` (every key
    evaluation writes for it) and a number for each corpus score; a :class:`MetricResultError` naming the metric,
    the key and the first offending sample otherwise (a metric of one's own may get it wrong: a shorter list would
    silently pair scores with the wrong samples, a string or None would fail deep inside the reward sum, and a
    corpus score left out would leave its column of the GRUE table empty with no reason). A reward component needs
    its per-sample scores alone: its corpus score is their mean.

    A number is an int or float (a numpy scalar included; NaN: a sample the metric leaves out), never a bool (a
    bool is not a score) nor an infinity (a diverged computation, which the result files could only show as not
    computed). A 1-D numpy array or torch tensor of ``n`` values stands for its list (``.tolist()``);
    the returned result holds lists wherever it held arrays."""
    if not isinstance(result, MetricResult):
        raise MetricResultError(f"metric {name!r} returned {type(result).__name__}, not a MetricResult")
    per_sample, listed = dict(result.per_sample), False
    for key in keys:
        if key not in per_sample:  # another key: a typo, or another metric's category
            given = ", ".join(map(repr, per_sample)) or "none"
            raise MetricResultError(f"metric {name!r} returned no scores under {key!r}, only under {given}; a metric "
                                    f"gives one score per generation under each key of its scores "
                                    f"({', '.join(map(repr, keys))}: <category>/<score> of its class)")
        scores = _listed(per_sample.get(key))
        listed = listed or scores is not per_sample.get(key)
        if not isinstance(scores, (list, tuple)) or len(scores) != n:
            raise MetricResultError(f"metric {name!r} returned {_count(scores)} under {key!r} for {n} generations; a "
                                    f"metric gives one score per generation under each key of its scores")
        for index, value in enumerate(scores):
            if not _is_score(value):
                raise MetricResultError(f"metric {name!r} returned {_kind(value)} at sample {index} under {key!r}; "
                                        f"scores are numbers{_BOOL_HINT if _is_bool(value) else ''}")
            if _infinite(value):
                raise MetricResultError(f"metric {name!r} returned {_infinite(value)} at sample {index} under {key!r}; "
                                        f"{_FINITE}")
        per_sample[key] = scores
    lacking = [key for key in corpus_keys if key not in result.corpus]
    if lacking:  # HF evaluate's compute gives each score's corpus value; an RL4LMs metric a (per-sample, corpus) pair
        raise MetricResultError(f"metric {name!r} returned no corpus score under {', '.join(map(repr, lacking))}; a "
                                f"metric returns MetricResult(per_sample={{key: one score per generation}}, corpus="
                                f"{{key: one number}}) with a corpus score under each key of its scores and "
                                f"corpus_scores (NaN where it is undefined)")
    for key, value in result.corpus.items():
        if not _is_score(value):
            raise MetricResultError(f"metric {name!r} returned {_kind(value)} as its corpus score {key!r}; scores are "
                                    f"numbers{_BOOL_HINT if _is_bool(value) else ''}")
        if _infinite(value):
            raise MetricResultError(f"metric {name!r} returned {_infinite(value)} as its corpus score {key!r}; "
                                    f"{_FINITE}")
    return replace(result, per_sample=per_sample) if listed else result


def check_per_token(name: str, result: MetricResult, key: str, tokens: Sequence[Optional[Sequence[str]]]
                    ) -> list[list[float]]:
    """The per-token scores under ``key`` of dense metric ``name``'s ``result`` (checked by :func:`check_result`
    first) on completions of ``tokens`` (each completion's tokens, ``meta[i][TOKENS_KEY]``; None where a caller
    outside RL and evaluation gave none: that row's length is not checked), as lists: one list per completion with
    a number per token, whose sum is the completion's per-sample score (within 1e-6, relative or
    absolute; a NaN per-sample score is not compared). A :class:`MetricResultError` naming the metric, the key and
    the first offending sample otherwise: RL pays the per-token scores and reports the per-sample ones, so a row one
    token short would train on shifted scores, and a sum that differs would train on other rewards than the ones
    logged."""
    how = (f"a dense metric returns per_token={{{key!r}: one list per generation, with a score for each of its "
           f"completion tokens (meta[i][{TOKENS_KEY!r}]), summing to its per-sample score}}")
    rows = _listed(result.per_token.get(key)) if isinstance(result.per_token, Mapping) else result.per_token
    if not isinstance(rows, (list, tuple)) or len(rows) != len(tokens):
        raise MetricResultError(f"metric {name!r} returned {_count(rows)} as its per-token scores under {key!r} for "
                                f"{len(tokens)} generations; {how}")
    checked = []
    for index, (row, completion) in enumerate(zip(rows, tokens)):
        row = _listed(row)
        if not isinstance(row, (list, tuple)) or (completion is not None and len(row) != len(completion)):
            has = f", whose completion has {len(completion)} tokens" if completion is not None else ""
            raise MetricResultError(f"metric {name!r} returned {_count(row)} as the per-token scores of sample "
                                    f"{index} under {key!r}{has}; {how}")
        bad = [value for value in row if not _is_score(value)]
        if bad:
            raise MetricResultError(f"metric {name!r} returned {_kind(bad[0])} among the per-token scores of sample "
                                    f"{index} under {key!r}; scores are numbers")
        total, score = math.fsum(row), result.per_sample[key][index]
        if not math.isnan(score) and not math.isclose(total, score, rel_tol=1e-6, abs_tol=1e-6):
            raise MetricResultError(f"metric {name!r} returned the per-sample score {score:g} for sample {index} "
                                    f"under {key!r}, and per-token scores that sum to {total:g}; {how}")
        checked.append(list(row))
    return checked


_BOOL_HINT = " (a bool is not a score: return float(x) where 1.0 and 0.0 are meant)"
_FINITE = "scores are finite numbers (NaN for a sample the metric cannot score, which is then left out)"


def _infinite(value: Any) -> str:
    """How a score that no float can hold finitely is named ("inf", "-inf", "an integer too large for a float"); ""
    for any other number."""
    try:
        number = float(value)
    except OverflowError:  # an int past 1.8e308
        return "an integer too large for a float"
    return str(number) if math.isinf(number) else ""


def _listed(scores: Any) -> Any:
    """A 1-D numpy array or torch tensor as its list of Python numbers; anything else as it is."""
    if isinstance(scores, np.ndarray) and scores.ndim == 1:
        return scores.tolist()
    if _is_tensor(scores) and scores.ndim == 1:
        return scores.detach().cpu().tolist()
    return scores


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # a tensor can only exist once torch is imported; never import it for this
    return torch is not None and isinstance(value, torch.Tensor)


def _count(scores: Any) -> str:
    """What a metric returned under a key instead of ``n`` scores, for an error: a count, an array's shape, a value."""
    if isinstance(scores, (list, tuple)):
        return f"{len(scores)} scores"
    if isinstance(scores, np.ndarray) or _is_tensor(scores):
        return f"a {type(scores).__module__.split('.')[0]} {type(scores).__name__} of shape {tuple(scores.shape)}"
    return repr(scores)


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_score(value: Any) -> bool:
    """An int or float, a numpy one included (numpy registers its numbers as numbers.Real); not a bool."""
    return isinstance(value, numbers.Real) and not _is_bool(value)


def _kind(value: Any) -> str:
    """A value's type as an error names it: ``None``, ``a str``, ``a list``."""
    return "None" if value is None else f"a {type(value).__name__}"


@dataclass(frozen=True)
class MetricContext:
    """What a metric may need from its stage: the task's base model and prompt budget (for fluency), the
    stage's execution, on whose device and in whose frozen dtype model-running metrics load their models
    (None: the CPU in float32), and in evaluation the policy being evaluated."""

    base_model: Optional[Path] = None
    max_prompt_length: int = 64
    execution: Optional["Execution"] = None
    evaluated: Optional[Any] = None  # the Policy under evaluation (evaluate only), for metrics of the model itself

    def resolved_execution(self) -> "Execution":
        """The stage's execution, or the CPU in float32 when none was given."""
        from grueflow.device import or_cpu

        return or_cpu(self.execution)


MetricFn = Callable[[Sequence[str], Sequence[str], Sequence[Sequence[str]], Sequence[dict[str, Any]]], MetricResult]


@dataclass(frozen=True)
class MetaChecked:
    """A built metric (a :data:`MetricFn`, which it calls) that can also refuse a datapool's samples before any
    generation is made: ``check(meta)`` raises a :class:`~grueflow.io.DataError` naming the first sample whose
    ``meta`` the metric can never score (a missing key, a target outside its labels). ``compute`` checks the
    same itself; ``check`` only moves the refusal ahead of the work (:meth:`grueflow.evaluation.Scorer.check`).

    ``unscored(references)``: why the metric scores NaN a sample with these references whatever the generation
    (no references; none its tokenizer can read), or None. Evaluation leaves such samples out and counts them;
    RL, whose reward must score every sample it draws, refuses them before training
    (:meth:`grueflow.metrics.reward.Reward.check`)."""

    compute: MetricFn
    check: Optional[Callable[[Sequence[dict[str, Any]]], Any]] = None
    unscored: Optional[Callable[[Sequence[str]], Optional[str]]] = None

    def __call__(self, prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                 meta: Sequence[dict[str, Any]]) -> MetricResult:
        return self.compute(prompts, generations, references, meta)


def check_meta(fn: MetricFn, meta: Sequence[dict[str, Any]]) -> None:
    """Run the meta check of a built metric that has one (:class:`MetaChecked`); nothing for any other."""
    if isinstance(fn, MetaChecked) and fn.check is not None:
        fn.check(meta)


def check_split(split: str, meta: Sequence[dict[str, Any]], scored_by: str, reward: Any = None,
                metrics: Sequence[Any] = ()) -> None:
    """Refuse, with a DataError, a datapool split whose samples' ``meta`` a component of ``reward`` (a
    :class:`~grueflow.config.RewardConfig`, or None) or one of ``metrics`` (parsed
    :class:`~grueflow.config.MetricSpec` entries) can never score, as its :meth:`Metric.check_samples` finds from its
    args alone (nothing is built): the message names the split, ``scored_by`` (who scores it, e.g. "scored by
    evaluate after training"), the component or metric and the first sample. A training stage calls it before it
    trains, for each split that it or a later stage scores, so that a datapool without the meta a metric reads stops
    the run before training, never at the evaluation after it."""
    checks = [("reward component", c.metric, typed_args(c)) for c in (reward.components if reward else ())]
    checks += [("metric", spec.id, typed_args(spec)) for spec in metrics]
    for role, name, args in checks:
        try:
            METRICS.get(name).check_samples(args, meta)
        except DataError as err:
            raise DataError(f"the datapool's {split} split ({scored_by}) cannot be scored by {role} {name!r}: "
                            f"{err}") from None


class Metric:
    """Base class: subclasses set ``category``, ``scores`` and implement ``build``.

    ``lower_is_better`` names the scores (of ``scores`` and ``corpus_scores``) where lower is better, an error
    rate or a perplexity: the GRUE table's normalised score inverts them, and ``select: best`` keeps the policy with
    their lowest val value. Every other score counts as higher-is-better."""

    category: ClassVar[str]
    scores: ClassVar[tuple[str, ...]]  # per-sample (and corpus) scores; the first is a reward's default
    corpus_scores: ClassVar[tuple[str, ...]] = ()  # scores of the whole batch only (distinct-n, ...)
    lower_is_better: ClassVar[tuple[str, ...]] = ()  # the scores where lower is better; () for none
    rewardable: ClassVar[bool] = True  # False: it does not score the generations, so it cannot be a reward
    dense: ClassVar[bool] = False  # True: it pays per completion token (MetricResult.per_token), from meta's tokens
    # True: it scores a generation against the sample's references (or the references themselves), so a split with
    # no references has no value for it: evaluate records it as missing, with the reason
    needs_references: ClassVar[bool] = False
    # score -> when its corpus value is undefined (NaN), e.g. distinct-2 with no generation of two words: the reason
    # evaluate records for the value it then lacks; a score not named here gets a general reason
    undefined_when: ClassVar[Mapping[str, str]] = {}

    @dataclass(frozen=True)
    class Args:
        pass

    @classmethod
    def key(cls, score: Optional[str] = None) -> str:
        return f"{cls.category}/{score or cls.scores[0]}"

    @classmethod
    def keys(cls) -> list[str]:
        """Every key the metric writes: its per-sample scores, then its corpus-only scores."""
        return [cls.key(s) for s in cls.scores + cls.corpus_scores]

    @classmethod
    def lower_keys(cls) -> list[str]:
        """The keys of its scores where lower is better (:attr:`lower_is_better`)."""
        return [cls.key(s) for s in cls.lower_is_better]

    @classmethod
    def meta_keys(cls, args: Any) -> tuple[str, ...]:
        """The keys of a sample's ``meta`` that the metric reads with ``args`` in every sample (``concepts``,
        ``table``: keys only some datapools write), known from ``args`` alone; () for a metric that reads none (the
        default). :func:`grueflow.params.check_meta_keys` refuses, when the task file is parsed, a task whose
        datapool never gives one (:func:`grueflow.data.datapool_meta_keys`)."""
        return ()

    @classmethod
    def check_samples(cls, args: Any, meta: Sequence[dict[str, Any]]) -> None:
        """Raise a :class:`~grueflow.io.DataError` naming the metric, the meta key and the first sample where
        samples' ``meta`` lacks what the metric reads with ``args`` (a key only some datapools write:
        ``meta['concepts']``, ``meta['table']``), known from ``args`` alone; nothing for a metric that reads no meta
        (the default). :func:`check_split` runs it before training; a check that needs the built metric (a
        classifier's labels) is its :class:`MetaChecked` ``check`` instead."""

    @classmethod
    def unavailable(cls, args: Any) -> Optional[str]:
        """Why the metric cannot run on this machine with ``args`` (a program, a jar or a file it needs is absent),
        as the :class:`MetricUnavailableError` its ``build`` then raises says it; None where nothing it needs is
        known to be absent. Cheap (nothing loads, nothing heavy is imported), so that a reward component that
        cannot run here is refused when the task file is parsed (:mod:`grueflow.params`), before any stage trains."""
        return None

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        raise NotImplementedError


def check_metric(component: Any) -> None:
    """Raise ``ValueError`` unless ``component`` is a metric class: a :class:`Metric` subclass with a
    ``category`` and at least one per-sample score (a plugin named by import path or entry point)."""
    if not (isinstance(component, type) and issubclass(component, Metric)):
        raise ValueError(f"{component!r} is not a subclass of grueflow.metrics.Metric")
    if not isinstance(getattr(component, "category", None), str) or not getattr(component, "scores", ()):
        raise ValueError(f"{component.__name__} needs a category (a string) and scores (at least one name)")
    for attribute in ("scores", "corpus_scores"):
        names = getattr(component, attribute)
        if not (isinstance(names, tuple) and all(isinstance(name, str) and name for name in names)):
            example = f"({names!r},)" if isinstance(names, str) else "('score',)"
            raise ValueError(f"{component.__name__}.{attribute} is {names!r}; give a tuple of score names, e.g. "
                             f"{example} (a string in parentheses is not a tuple: write the comma)")
    if not dataclasses.is_dataclass(component.Args):
        raise ValueError(f"{component.__name__}.Args is not a dataclass; decorate it with "
                         f"@dataclass(frozen=True) (its fields are the metric's args)")
    check_args_types(component.Args, component.__name__)
    try:
        inspect.signature(component.build).bind(None, None)
    except TypeError:
        raise ValueError(f"{component.__name__}.build{inspect.signature(component.build)} does not take (args, "
                         f"context); write it as @classmethod def build(cls, args, context) -> a function "
                         f"(prompts, generations, references, meta) -> MetricResult") from None
    lower, own = component.lower_is_better, (*component.scores, *component.corpus_scores)
    if not (isinstance(lower, tuple) and all(isinstance(name, str) and name in own for name in lower)):
        raise ValueError(f"{component.__name__}.lower_is_better is {lower!r}; give a tuple of the names of its scores "
                         f"where lower is better, e.g. ({own[0]!r},), or () for none (its scores: {', '.join(own)})")
    undefined = component.undefined_when
    if not (isinstance(undefined, Mapping) and all(name in own and isinstance(why, str)
                                                   for name, why in undefined.items())):
        raise ValueError(f"{component.__name__}.undefined_when is {undefined!r}; give a dict from names of its scores "
                         f"to why each is undefined (NaN) when it is, or {{}} (its scores: {', '.join(own)})")


def lower_is_better_keys(ids: Iterable[str] = ()) -> frozenset[str]:
    """The keys where lower is better (:attr:`Metric.lower_is_better`) of the built-in metrics and of the metrics
    ``ids`` (as a task file names them: one of your own by import path or entry point). Where one of ``ids`` writes
    a built-in metric's key, its own direction counts: it is the metric that wrote the value."""
    lower: dict[str, bool] = {}
    for name in (*(name for name in METRICS.names() if name in METRICS), *ids):
        metric = METRICS.get(name)
        lower.update({key: key in metric.lower_keys() for key in metric.keys()})
    return frozenset(key for key, is_lower in lower.items() if is_lower)


def describe() -> dict[str, str]:
    """Every registered metric id with its one-line description, sorted by id."""
    return METRICS.describe()


def require(module: str, needed_by: str, package: str) -> ModuleType:
    """Import ``module`` (an optional dependency), or raise ImportError naming who needs it and the pip package."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{needed_by} needs {package}: pip install {package}") from None


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def nanmean(values: Sequence[float]) -> float:
    """The mean of the values that are not NaN (samples a metric could not score); NaN when none is left."""
    return mean([v for v in values if not math.isnan(v)])


# registration: importing each module registers its metrics
from grueflow.metrics import captioning, diversity, fluency, lexical, semantic, shaping, table, task  # noqa: E402,F401
from grueflow.metrics import preference  # noqa: E402,F401  (reward_model)

__all__ = ["METRICS", "TOKENS_KEY", "MetaChecked", "Metric", "MetricContext", "MetricFailedError", "MetricResult",
           "MetricResultError", "MetricUnavailableError", "SacrebleuTokenizer", "call_metric", "check_meta",
           "check_per_token", "check_result", "check_split", "describe", "lower_is_better_keys", "mean", "nanmean",
           "require"]
