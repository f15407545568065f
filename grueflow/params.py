"""Validated params: the schema of :mod:`grueflow.config` checked against the registries.

The layer above both :mod:`grueflow.config` (the schema, which imports no implementation package) and
the registries (datapools, models, metrics, RL algorithms, preference methods). :func:`parse` builds a
config with :func:`grueflow.config.parse` and runs :func:`resolve` on every dataclass it builds: an
unknown id, bad ``args`` for a registered component, a reward score a metric does not have or a
headline metric no one writes fails there, at parse time, with the file and key path. Each nested
``args`` mapping is parsed once into its component's typed ``Args`` and kept (``typed_args``).

Every stage, Snakemake and the tests load params through this module. Importing it imports the
registries, never torch, transformers or numba: a registry holds light specs and the implementations
are imported when a stage runs them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from grueflow import config
from grueflow.config import (FLUENCY_METRIC, REWARD_KEY, TRAIN_KL_KEY, ConfigError, DatapoolConfig, GenerationConfig,
                             LengthsConfig, MetricSpec, ModelConfig, RewardComponent, RewardConfig, SuiteConfig,
                             SupervisedConfig, TaskConfig, check, merge_overrides, read_yaml, set_resolved, typed_args)
from grueflow.io import STAGE_RECORD, atomic_path, shown
from grueflow.data import DATAPOOLS, datapool_meta_keys
from grueflow.metrics import METRICS
from grueflow.models import MODELS
from grueflow.pipeline import (RESOURCE_STAGES, START_PREFIX, STAGES, SUITE_VARS, WILDCARD_BRACES, override_layers,
                               placeholders, wildcard_advice, wildcard_problem)
from grueflow.postprocess import resolve as resolve_post_processing
from grueflow.preference.config import PREFERENCE_METHODS, preference_method_files
from grueflow.registry import UnknownNameError
from grueflow.rl import ALGORITHMS


def parse(cls: type, data: Any, where: str) -> Any:
    """:func:`grueflow.config.parse` with every registry check (:func:`resolve`); raises :class:`ConfigError`."""
    return config.parse(cls, data, where, resolve)


def resolve(obj: Any) -> Any:
    """Check one freshly built config against the registries and fill its resolved fields; returns it.

    Raises ``ValueError`` (or :class:`UnknownNameError`); :func:`grueflow.config.parse` puts the place in front.
    """
    check_fn = _CHECKS.get(type(obj))
    if check_fn is not None:
        check_fn(obj)
    return obj


def _datapool(cfg: DatapoolConfig) -> None:
    set_resolved(cfg, "typed_args", config.parse(DATAPOOLS.get(cfg.id).Args, dict(cfg.args), "args"))


def _model(cfg: ModelConfig) -> None:
    MODELS.get(cfg.id).validate(cfg)


def _metric(spec: MetricSpec) -> None:
    set_resolved(spec, "typed_args", config.parse(METRICS.get(spec.id).Args, dict(spec.args), "args"))


def _component(c: RewardComponent) -> None:
    metric = METRICS.get(c.metric)
    if not metric.rewardable:
        raise ValueError(f"metric {c.metric!r} does not score the generations, so it cannot be a reward component; "
                         f"list it under metrics")
    set_resolved(c, "typed_args", config.parse(metric.Args, dict(c.args), "args"))
    why = metric.unavailable(c.typed_args)
    if why is not None:  # a metric under metrics is evaluated as missing; a reward must score every rollout
        raise ValueError(f"reward component {c.metric!r} cannot run on this machine, and a reward must score every "
                         f"sample: {why}; or leave it out of the reward (under metrics, evaluate records it as "
                         f"missing)")
    if c.score is not None and c.score not in metric.scores:
        raise ValueError(f"metric {c.metric!r} has no score {c.score!r}; valid: {', '.join(metric.scores)}")
    set_resolved(c, "key", metric.key(c.score))


def _reward(cfg: RewardConfig) -> None:
    """Each component's key once: two components of one key with the same args (as parsed: defaults written or not)
    are one component with the summed weight; with different args no one component is both, and the reward's scores
    keep one value a key, so each needs a metric of its own (the advice :func:`metric_writers` gives)."""
    keys = [c.key for c in cfg.components]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    typed = {k: [c.typed_args for c in cfg.components if c.key == k] for k in repeated}
    differing = [k for k in repeated if any(args != typed[k][0] for args in typed[k][1:])]
    written = "; ".join(f"{k}: {[dict(c.args) for c in cfg.components if c.key == k]}" for k in differing)
    check(not differing, f"reward components {differing} appear twice with different args ({written}); list each "
                         f"metric once (for two settings of one metric, write a metric of your own)")
    check(not repeated, f"reward components {repeated} appear twice; merge them into one component with the summed weight")


def _task(cfg: TaskConfig) -> None:
    check_metric_keys(cfg.reward, cfg.metrics)
    check_meta_keys(cfg.datapool, cfg.reward, cfg.metrics)
    check_headlines(cfg.headline_metrics, cfg.reward, cfg.metrics)
    valid = ALGORITHMS.names() + ["supervised"] + [f"{START_PREFIX}{a}" for a in ALGORITHMS.names()]
    unknown = sorted(set(cfg.method_overrides) - set(valid))
    check(not unknown, f"method_overrides: unknown method {unknown[0] if unknown else ''!r}; valid: {', '.join(valid)}")
    for name, entry in cfg.method_overrides.items():
        for key in TASK_SECTIONS if isinstance(entry, Mapping) else ():  # frozen: mapping proxies
            if key not in entry:
                continue
            check(isinstance(entry[key], Mapping), f"method_overrides.{name}.{key} is {entry[key]!r}; give a mapping "
                                                   f"of the {key} keys to change (the rest stay the task's)")
            check(name != "supervised" or key not in ("reward", "rollout_generation"),
                  f"method_overrides.supervised.{key}: the warm start trains on the references and never samples "
                  f"rollouts or pays a reward; give it to an RL method (<algorithm> or supervised+<algorithm>)")


def _suite(cfg: SuiteConfig) -> None:
    for algorithm in cfg.algorithms:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithms: {ALGORITHMS.unknown_message(algorithm)}")
    for name in cfg.preference_methods:
        check(name in PREFERENCE_METHODS, f"preference_methods: unknown preference method {name!r}; "
                                          f"valid: {', '.join(PREFERENCE_METHODS)}")


def _generation(cfg: GenerationConfig) -> None:
    if cfg.post_processing is not None:
        resolve_post_processing(cfg.post_processing)


_CHECKS = {DatapoolConfig: _datapool, GenerationConfig: _generation, ModelConfig: _model, MetricSpec: _metric,
           RewardComponent: _component, RewardConfig: _reward, TaskConfig: _task, SuiteConfig: _suite}


def load_metrics(task_file: str | Path) -> tuple[MetricSpec, ...]:
    """A task file's ``metrics``, validated (two that write one key are a ConfigError: :func:`metric_writers`),
    with the fluency perplexity :func:`with_fluency` adds: what its evaluation scores."""
    metrics = parse(tuple[MetricSpec, ...], read_yaml(task_file).get("metrics"), f"{task_file}: metrics")
    try:
        metric_writers(metrics)
    except ValueError as err:
        raise ConfigError(f"{task_file}: {err}") from None
    return with_fluency(metrics)


def with_fluency(metrics: tuple[MetricSpec, ...]) -> tuple[MetricSpec, ...]:
    """The metrics evaluate scores: the task's, plus perplexity when the task does not list it."""
    if any(m.id == FLUENCY_METRIC for m in metrics):
        return metrics
    return metrics + (parse(MetricSpec, {"id": FLUENCY_METRIC}, "metrics"),)


def produced_keys(reward: RewardConfig, metrics: tuple[MetricSpec, ...]) -> set[str]:
    """Every corpus key evaluate can write for this reward and these metrics (checked before any work)."""
    keys = {REWARD_KEY, TRAIN_KL_KEY, *(c.key for c in reward.components)}
    for spec in metrics:
        keys.update(METRICS.get(spec.id).keys())
    return keys


def check_select_metric(cfg: Any, where: str, reward: Optional[RewardConfig], metrics: tuple[MetricSpec, ...]) -> None:
    """Raise ConfigError unless a method's ``select_metric`` (``select: best``) is a key its val evaluation writes:
    the reward's and the metrics' keys for RL, the metrics' alone for the warm start (``reward`` None)."""
    if getattr(cfg, "select_metric", None) is None:
        return
    written = {key for spec in metrics for key in METRICS.get(spec.id).keys()}
    if reward is not None:
        written |= produced_keys(reward, metrics) - {TRAIN_KL_KEY}
    if cfg.select_metric not in written:
        raise ConfigError(f"{where}: select_metric {cfg.select_metric!r} is not a key the val evaluation writes"
                          f"{'' if reward is not None else ' (its metrics, no reward)'}; choose one of "
                          f"{', '.join(sorted(written))}")


def metric_writers(metrics: tuple[MetricSpec, ...]) -> dict[str, int]:
    """``{key: the index of the metric that writes it}``; a ValueError when two ``metrics`` write the same key:
    evaluation keeps one value a key, so the other would be lost without a word."""
    writer: dict[str, int] = {}
    for i, spec in enumerate(metrics):
        for key in METRICS.get(spec.id).keys():
            check(key not in writer, f"metrics[{writer.get(key)}] and metrics[{i}] both write {key!r}; list each "
                                     f"metric once (for two settings of one metric, write a metric of your own)")
            writer[key] = i
    return writer


def check_metric_keys(reward: RewardConfig, metrics: tuple[MetricSpec, ...]) -> None:
    """Raise ValueError when two ``metrics`` write the same key (:func:`metric_writers`), or a metric writes a reward
    component's key with other args: evaluation keeps one value a key, so the other would be lost without a word."""
    writer = metric_writers(metrics)
    for component in reward.components:
        i = writer.get(component.key)
        check(i is None or dict(metrics[i].args) == dict(component.args),
              f"metrics[{i}] ({metrics[i].id if i is not None else ''}) writes {component.key!r}, the reward component "
              f"{component.metric!r}'s key, with other args ({dict(metrics[i].args) if i is not None else {}} vs "
              f"{dict(component.args)}); give both the same args, or drop the metric: the reward's components are "
              f"scored and tabled already")


def check_meta_keys(datapool: DatapoolConfig, reward: RewardConfig, metrics: tuple[MetricSpec, ...]) -> None:
    """Raise ValueError where a reward component or one of ``metrics`` reads a key of every sample's ``meta``
    (:meth:`grueflow.metrics.Metric.meta_keys`) that ``datapool``'s samples never hold
    (:func:`grueflow.data.datapool_meta_keys`; for ``custom``, its ``fields.meta``): the reward or evaluate would
    refuse every sample, after the datapool, the base model and training were built. Nothing is checked for a
    datapool whose keys are not known (a plugin loader without ``meta_keys``)."""
    given = datapool_meta_keys(datapool)
    if given is None:
        return
    needs = [("reward component", "reward.components", c.metric, typed_args(c)) for c in reward.components]
    needs += [("metric", "metrics", spec.id, typed_args(spec)) for spec in metrics]
    for role, section, name, args in needs:
        keys = METRICS.get(name).meta_keys(args)
        check(isinstance(keys, tuple) and all(isinstance(key, str) for key in keys),
              f"{role} {name!r}: meta_keys returned {keys!r}; give a tuple of meta key names, e.g. ('concepts',), "
              f"or () for none")
        missing = [key for key in keys if key not in given]
        if not missing:
            continue
        key = missing[0]
        fix = (f"add {key!r} to datapool.args.fields.meta (the column of your data that holds it)"
               if datapool.id == "custom" else
               "use a datapool that writes it (custom: name its column under fields.meta)")
        raise ValueError(f"{role} {name!r} reads meta[{key!r}] of every sample, which datapool {datapool.id!r} never "
                         f"writes (its samples' meta keys: {', '.join(sorted(given)) or 'none'}); {fix}, or drop "
                         f"{name!r} from {section}")


def check_headlines(headline: tuple[str, ...], reward: RewardConfig, metrics: tuple[MetricSpec, ...]) -> None:
    """Raise ValueError unless every headline metric is a key evaluate writes (the fluency metric included), once,
    and neither the reward nor the fluency perplexity, which the normalised score counts already."""
    repeated = sorted({h for h in headline if headline.count(h) > 1})
    check(not repeated, f"headline_metrics lists {shown(repeated)} more than once; list each once (each counts once in "
                        f"the normalised score)")
    counted = sorted({REWARD_KEY, METRICS.get(FLUENCY_METRIC).key()} & set(headline))
    check(not counted, f"headline_metrics lists {counted}, which the normalised score counts already (the reward "
                       f"and fluency_ppl columns); remove it")
    produced = produced_keys(reward, with_fluency(metrics))
    unknown = sorted(set(headline) - produced)
    if unknown:
        raise ValueError(f"headline_metrics {shown(unknown)} are not produced by the task's reward or metrics; "
                         f"produced: {', '.join(sorted(produced))}")


def load_section(cls: type, path: str | Path, key: Optional[str] = None,
                 method: str | Sequence[str] | None = None) -> Any:
    """Parse one params file (or only its ``key`` section, the DVC/Snakemake params slice). ``method``: for a method
    file, the method (or methods) whose file the caller reads; one named for another stage's method is refused
    (:func:`check_method_file`)."""
    if method is not None:
        check_method_file(path, method)
    data = read_yaml(path)
    if key is None:
        return parse(cls, data, f"{path}:")
    if not isinstance(data, dict) or key not in data:
        raise ConfigError(f"{path}: missing required key {key!r}")
    return parse(cls, data[key], f"{path}: {key}")


def load_task(path: str | Path) -> TaskConfig:
    return load_section(TaskConfig, path)


def method_file_readers() -> dict[str, str]:
    """``{method: the stage that reads params/methods/<method>.yaml}``, by the stage table (:data:`STAGES`): each
    stage's own method file (``supervised``: ``warm_start``), each registered RL algorithm's (``rl_finetune
    --algorithm <name>``, the stage whose method the ``{algorithm}`` axis names) and each preference method's
    (``dpo``, the ``{method}`` axis)."""
    readers: dict[str, str] = {}
    for stage in STAGES.values():
        if stage.method is None:
            continue
        axis = placeholders(stage.method)
        names = ALGORITHMS.names() if axis == ["algorithm"] else PREFERENCE_METHODS if axis == ["method"] else \
            [stage.method]
        for name in names:
            readers[name] = f"{stage.name} --algorithm {name}" if axis == ["algorithm"] else stage.name
    return readers


def check_method_file(path: str | Path, method: str | Sequence[str]) -> None:
    """Raise ConfigError where the method file ``path``, given to read the params of ``method`` (or of one of
    ``method``, such as the preference methods a DPO run may be), is named (``<name>.yaml``) for a method another
    stage reads (:func:`method_file_readers`): the pipeline gives every stage ``params/methods/<method>.yaml``, and a
    file whose keys happen to be the caller's too (the warm start's ``learning_rate``, ``batch_size``) would run
    with another stage's values without a word. A file named for no method (a copy of one's own) is read as given."""
    methods = (method,) if isinstance(method, str) else tuple(method)
    readers = method_file_readers()
    name = Path(path).stem
    if name not in readers or name in methods:
        return
    reader = readers.get(methods[0], f"rl_finetune --algorithm {methods[0]}")
    raise ConfigError(f"--method-file {path} is named as the method file of {readers[name]} (the pipeline gives it "
                      f"params/methods/{name}.yaml), not of {reader}: give "
                      f"{Path(path).with_name(methods[0] + '.yaml')} (or a file of your own, named for no other "
                      f"stage's method)")


def method_config(method: str) -> type:
    """The config class of a method file: ``supervised`` or a registered RL algorithm's."""
    return SupervisedConfig if method == "supervised" else ALGORITHMS.get(method).Config


STARTS = ("zero_shot", "supervised")
# task-file sections a method_overrides entry may also hold: laid over the task's own for that method's stages only
# (RL4LMs' NLPO and on-supervised configs change the rollout generation, prompt length or reward of their task)
TASK_SECTIONS = {"lengths": LengthsConfig, "rollout_generation": GenerationConfig, "eval_generation": GenerationConfig,
                 "reward": RewardConfig}


def _overrides(data: Any) -> dict[str, Any]:
    """A task file's data's ``method_overrides``, or ``{}``."""
    overrides = data.get("method_overrides") if isinstance(data, dict) else None
    return overrides if isinstance(overrides, dict) else {}


def task_key_name(task_file: str | Path, key: str, field: str, method: Optional[str] = None,
                  start: str = "zero_shot") -> str:
    """Where ``key.field`` of a task file comes from as ``method``'s stages read it (see :func:`load_task_section`),
    for a message: ``method_overrides.<layer>.<key>.<field>`` when the last override layer that sets it does,
    else ``<key>.<field>``."""
    overrides = _overrides(read_yaml(task_file))
    setting = [name for name in override_layers(method, start)
               if isinstance(overrides.get(name), dict) and isinstance(overrides[name].get(key), dict)
               and field in overrides[name][key]]
    return f"method_overrides.{setting[-1]}.{key}.{field}" if setting else f"{key}.{field}"


def load_task_section(cls: type, task_file: str | Path, key: str, method: Optional[str] = None,
                      start: str = "zero_shot") -> Any:
    """A task file's section ``key`` (one of :data:`TASK_SECTIONS`) as ``method``'s stages read it: with the
    ``key`` of each of its ``method_overrides`` entries (:func:`override_layers`) laid over it, mapping by
    mapping (a list, such as the reward's components, is replaced whole)."""
    data = read_yaml(task_file)
    if not isinstance(data, dict) or key not in data:
        raise ConfigError(f"{task_file}: missing required key {key!r}")
    overrides = _overrides(data)
    layers = [name for name in override_layers(method, start)
              if isinstance(overrides.get(name), dict) and key in overrides[name]]
    section = data[key]
    for name in layers:
        if not isinstance(overrides[name][key], dict):
            raise ConfigError(f"{task_file}: method_overrides.{name}.{key} is {overrides[name][key]!r}; give a mapping "
                              f"of the {key} keys to change (the rest stay the task's)")
        section = merge_overrides(section, overrides[name][key])
    where = f"{task_file}: {key}"
    if layers:
        where += f" with {', '.join(f'method_overrides.{name}.{key}' for name in layers)}:"
    parsed = parse(cls, section, where)
    if key == "rollout_generation":  # checked as TaskConfig checks the task's own
        try:
            parsed.check_rollout()
        except ValueError as error:
            raise ConfigError(f"{where.rstrip(':')}: {error}") from None
    return parsed


def load_method(method: str, path: str | Path, task_file: str | Path | None = None, start: str = "zero_shot") -> Any:
    """A method file (an RL algorithm's or ``supervised``), with the task file's ``method_overrides.<method>``
    laid over it when ``task_file`` is given: RL4LMs tunes methods per task (e.g. IMDB's KL coefficient).

    RL from the warm start (``start="supervised"``) then lays ``method_overrides.supervised+<method>`` over
    that, as RL4LMs tunes its ``*_on_supervised`` configs apart from the zero-shot ones. A file that holds no
    mapping (empty, only comments, a list) is refused as it is, overrides or not: ``{}`` means every default."""
    try:
        cls = method_config(method)
    except UnknownNameError as err:
        raise ConfigError(f"{path}: {err}") from None
    check_method_file(path, method)
    if start not in STARTS:
        raise ConfigError(f"{path}: unknown start {start!r}; valid: {', '.join(STARTS)}")
    data = read_yaml(path)
    overrides = _overrides(read_yaml(task_file) if task_file is not None else None)
    layers = [name for name in override_layers(method, start) if overrides.get(name) and isinstance(data, dict)]
    for name in layers:  # the task-file sections an entry may hold are the task's (load_task_section)
        layer = overrides[name]
        data = merge_overrides(data, {k: v for k, v in layer.items() if k not in TASK_SECTIONS}
                               if isinstance(layer, dict) else layer)
    layered = ", ".join(f"method_overrides.{name}" for name in layers)
    where = f"{path} with {task_file}: {layered}:" if layers else f"{path}:"
    return parse(cls, data, where)


@dataclass(frozen=True)
class Suite:
    """A validated suite with every task and method file it names, parsed."""

    config: SuiteConfig
    tasks: dict[str, TaskConfig]
    methods: dict[str, Any]
    supervised: SupervisedConfig


def load_suite(data: dict[str, Any], where: str = "suite") -> Suite:
    """Validate a suite and every params file it names; raises :class:`ConfigError` on the first problem. A local
    path a task file names that Snakemake would read as a wildcard (:func:`grueflow.pipeline.wildcard_problem`) is
    refused here, under either engine: both run this before any stage."""
    suite = parse(SuiteConfig, data, f"{where}:")
    params = Path(suite.params_dir)
    if not (params / "tasks").is_dir():
        raise ConfigError(f"{where}: params_dir {suite.params_dir!r} has no tasks/ folder "
                          f"({(params / 'tasks').resolve()}); give the folder that holds tasks/ and methods/")
    tasks = {}
    for name in suite.tasks:
        path = params / "tasks" / f"{name}.yaml"
        try:
            found = path.is_file()
        except OSError:  # a name the file system cannot hold (ENAMETOOLONG: over its 255-byte limit)
            found = False
        if not found:
            known = sorted(p.stem for p in (params / "tasks").glob("*.yaml"))
            file = path if shown(name) == repr(name) else f"{params / 'tasks'}/<that name>.yaml"
            raise ConfigError(f"{where}: task {shown(name)} has no task file {file}; valid tasks: {', '.join(known)}")
        tasks[name] = load_task(path)
        problem = wildcard_problem(read_yaml(path), Path.cwd())
        if problem is not None:  # Snakemake could not plan the stage that reads it: both engines refuse it
            raise ConfigError(f"{path}: {problem}")
    methods = {a: load_method(a, params / "methods" / f"{a}.yaml") for a in suite.algorithms}
    supervised = load_method("supervised", params / "methods" / "supervised.yaml")
    parsed = dict(tasks)  # the suite's tasks, and those a learned_classifier names (check_classifiers_trained)
    for name in suite.tasks:  # each task's overrides must give valid methods too, and select what is evaluated
        task_path, task = params / "tasks" / f"{name}.yaml", tasks[name]
        for method, start in [*((a, s) for a in suite.algorithms for s in ("zero_shot", "supervised")),
                              ("supervised", "zero_shot")]:
            cfg = load_method(method, params / "methods" / f"{method}.yaml", task_path, start)
            sections = method_task_sections(task_path, method, start)
            check_select_metric(cfg, f"{params / 'methods' / f'{method}.yaml'} with {task_path}",
                                None if method == "supervised" else sections["reward"], task.metrics)
        check_classifiers_trained(task_path, task, parsed)
    if suite.preference_methods:  # the preference stages' params files
        for stem, cls in preference_method_files(suite.preference_methods).items():
            load_section(cls, params / "methods" / f"{stem}.yaml")
    for task, path in suite.preference_files.items():
        check_preference_file(path, f"{where}: preference_files.{task}", task)
        check_preference_cycle(path, f"{where}: preference_files.{task}", task, tasks[task], suite)
    return Suite(suite, tasks, methods, supervised)


def check_preference_cycle(path: str, where: str, task: str, task_cfg: TaskConfig, suite: config.SuiteConfig) -> None:
    """Raise ConfigError where ``path``, the preference set ``preference_files`` gives ``task``, lies in the import of
    a human-evaluation batch of ``task`` (as :func:`project_relative` writes it: a link to the import's file is that
    file) that compares a method trained on that file: a preference method (``dpo``,
    ``supervised+dpo``) trains on it, and where the task's reward names its own ``train_reward_model`` folder every
    method's training or evaluation reads the reward model trained on it. The import needs that method's evaluation
    and the evaluation needs the import: Snakemake reports a bare cycle, drops one of its edges and plans on. The
    batch is ``<a>_vs_<b>_seed<n>`` (methods a and b) or ``likert_seed<n>`` (every method of the suite)."""
    pattern = re.escape(STAGES["import_human_eval"].outputs["out"]).replace(r"\{task\}", re.escape(task))
    relative = project_relative(path)
    found = re.fullmatch(pattern.replace(r"\{batch\}", "(?P<batch>[^/]+)") + "/[^/]+", relative)
    if found is None:
        return
    batch, methods = found["batch"], suite.methods
    compared = methods if re.fullmatch(r"likert_seed[0-9]+", batch) else next(
        ([a, b] for a in methods for b in methods if re.fullmatch(rf"{re.escape(a)}_vs_{re.escape(b)}_seed[0-9]+",
                                                                 batch)), [])
    own_model = STAGES["train_reward_model"].outputs["out"].format(task=task)
    named = {project_relative(str(c.args.get("path"))).removesuffix("/model") for c in task_cfg.reward.components
             if c.metric == "reward_model" and c.args.get("path")}
    trained = next((m for m in compared if m.removeprefix("supervised+") in suite.preference_methods), None)
    if trained is None and own_model in named and compared:
        trained = compared[0]
    if trained is None:
        return
    how = "trains on that file" if trained.removeprefix("supervised+") in suite.preference_methods else \
        f"is scored with {own_model}, trained on that file"
    given = repr(path) if relative == written_relative(path) else f"{path!r} (a link to {relative})"
    raise ConfigError(f"{where}: {given} is the import of batch {batch}, which compares {trained}, and {trained} "
                      f"{how}: a cycle (the import needs {trained}'s evaluation, which needs the import); copy the "
                      f"preferences.jsonl outside results/ (e.g. data/preferences/{task}.jsonl) and give that copy, "
                      f"for the next round")


def check_preference_file(path: str, where: str, task: str) -> None:
    """Raise ConfigError where ``path``, the preference set ``preference_files`` gives ``task`` (a file the preference
    stages read, relative to the project's root), does not exist or is a folder: Snakemake would only stop on it
    once it plans the stages, with a MissingInputException below their long input lists. A path under ``results/``
    not there yet is left to Snakemake: a rule may write it first (a human-evaluation import's
    ``results/human/<task>/imported/<batch>/preferences.jsonl``, in the same run). Another task's human judgements
    are refused too (:func:`preference_file_task`): a file under ``results/human/<other task>/``, or in an import
    folder whose ``stage.json`` records another task; so is a path holding a brace, which Snakemake reads in an input
    as a wildcard (:func:`grueflow.pipeline.wildcard_advice`)."""
    if not path.strip():  # Path("") is the working folder
        raise ConfigError(f"{where}: the path is empty; give a preferences.jsonl, or remove the entry to build "
                          f"{task}'s preferences with build_preferences")
    if WILDCARD_BRACES.search(path):  # the preference stages' input
        raise ConfigError(f"{where}: {path!r}: {wildcard_advice(path)}")
    if Path(path).is_dir():
        raise ConfigError(f"{where}: {path!r} is a folder; give the preferences.jsonl in it")
    other = preference_file_task(path)
    if other is not None and other != task:
        raise ConfigError(f"{where}: {path!r} holds the human judgements of task {other}, not of task {task}; give "
                          f"task {task}'s (a human-evaluation import writes results/human/{task}/imported/<batch>/"
                          f"preferences.jsonl), or remove the entry to build {task}'s preferences with build_preferences")
    if not Path(path).exists() and Path(project_relative(path)).parts[:1] != ("results",):
        raise ConfigError(f"{where}: {path!r} does not exist (relative paths are read from {Path.cwd()}); give a "
                          f"preferences.jsonl (a human-evaluation import writes results/human/{task}/imported/"
                          f"<batch>/preferences.jsonl), or remove the entry to build {task}'s preferences with "
                          f"build_preferences")


def preference_file_task(path: str) -> Optional[str]:
    """The task whose human judgements the preference file ``path`` holds, where something tells: the task its
    human-evaluation import recorded (``params.task`` in the ``stage.json`` of the ``import_human_eval`` folder it
    lies in, as given or with its links followed), else ``<task>`` of a path under ``results/human/<task>/`` as
    :func:`project_relative` writes it (relative to the project's root, an absolute path into it, or a link into
    it); None for any other file."""
    real = followed(path)
    for folder in dict.fromkeys((Path(path).parent, Path(real or path).parent)):  # a link's target's too
        record = folder / STAGE_RECORD
        try:
            found = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
        except (OSError, ValueError):  # a damaged record is the import's readers' to refuse
            found = None
        if isinstance(found, dict) and found.get("stage") == "import_human_eval" and isinstance(found.get("params"),
                                                                                                dict):
            recorded = found["params"].get("task")
            if isinstance(recorded, str) and recorded:
                return recorded
    parts = Path(project_relative(path)).parts
    return parts[2] if len(parts) > 3 and parts[:2] == ("results", "human") else None


TRAINED_CLASSIFIER = re.compile(r"results/([^/]+)/classifier/model/?")  # the train_classifier stage's model folder


FOLDER_OUTPUTS = ("out", "batch")  # the stage table's names of a stage's folder output (a pairwise batch's: batch)
FOLDER_TEMPLATES = [stage.outputs[name] for stage in STAGES.values() for name in FOLDER_OUTPUTS
                    if name in stage.outputs]
STAGE_FOLDERS = [re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template))) for template in FOLDER_TEMPLATES]
STAGE_ROOTS = sorted({Path(template).parts[0] for template in FOLDER_TEMPLATES})  # the folders they lie in: results


def stage_folder_of(relative: str, itself: bool = False) -> Optional[str]:
    """The innermost stage folder (a folder output of the stage table, any wildcard values) that the path
    ``relative``, normalised and relative to the project's root, lies in (``itself``: or is); None for a path in no
    stage folder."""
    parts = Path(relative).parts
    for end in range(len(parts) if itself else len(parts) - 1, 0, -1):
        folder = "/".join(parts[:end])
        if any(pattern.fullmatch(folder) for pattern in STAGE_FOLDERS):
            return folder
    return None


def stage_folder_holding(path: str) -> Optional[str]:
    """The stage folder a rule writes that ``path`` lies in (:func:`stage_folder_of`), written as
    :func:`project_relative` writes ``path`` (so a link of the user's into one is that folder too); None for a path
    in no stage folder. A file inside a rule's ``directory()`` output is no output of that rule to Snakemake,
    which plans no job for it: a rule that reads such a file takes the folder as its input, so the job that writes
    the folder runs first, and reruns what reads it when it is rebuilt."""
    return stage_folder_of(project_relative(path))


def project_relative(path: str) -> str:
    """``path`` in the form a rule matches a stage's output by, normalised: relative to the working folder (the
    project root, where the engines and the stages run) when it is an absolute or ``~`` path inside it, so that
    ``/abs/project/results/t/classifier/model`` is the train_classifier output ``results/t/classifier/model``; and
    where it is or lies in no stage folder (:func:`stage_folder_of`) as written but does with its links followed
    (``data/prefs.jsonl``, a link of the user's to an import's ``preferences.jsonl``; ``models/rm``, one to a
    reward-model folder), that stage folder's path: what a stage wrote is read through the link, so the job that
    writes it is planned and its checks apply as for the path itself. The path as written wins where it is or lies
    in a stage folder (``results/`` itself may be a link, to a scratch disk). Any other path is returned
    normalised, as given."""
    written = written_relative(path)
    if stage_folder_of(written, itself=True) is not None:
        return written
    real = followed(path)
    relative = inside_project(real) if real is not None else None
    return relative if relative is not None and stage_folder_of(relative, itself=True) is not None else written


def followed(path: str) -> Optional[str]:
    """``path`` (``~`` expanded) absolute with every link followed; None where it cannot be a path (a NUL)."""
    try:
        return os.path.realpath(os.path.expanduser(path))
    except ValueError:
        return None


def written_relative(path: str) -> str:
    """``path`` normalised, relative to the working folder when it is an absolute or ``~`` path inside it (as
    named, else with its links followed); else as given: :func:`project_relative` with no link inside the project
    followed."""
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        for candidate in dict.fromkeys((os.path.normpath(expanded), followed(path))):
            relative = inside_project(candidate) if candidate is not None else None
            if relative is not None:
                return relative
    return os.path.normpath(path)


def inside_project(absolute: str) -> Optional[str]:
    """The absolute path ``absolute`` relative to the working folder (the project root), normalised, where it lies
    inside it: under the working folder as named or with its links followed, or under one of
    :data:`STAGE_ROOTS` with its links followed (``results/``, a link to a scratch disk); None for a path
    outside."""
    roots = {os.getcwd(): ".", os.path.realpath(os.getcwd()): "."}
    roots |= {os.path.realpath(root): root for root in STAGE_ROOTS}
    for root, written in roots.items():
        relative = os.path.relpath(absolute, root)
        if relative != ".." and not relative.startswith("../"):
            return os.path.normpath(os.path.join(written, relative))
    return None


def check_classifiers_trained(task_file: Path, task: TaskConfig, tasks: dict[str, TaskConfig]) -> None:
    """Raise ConfigError when a ``learned_classifier`` of ``task`` (a reward component or a metric) names the model
    the ``train_classifier`` stage writes, ``results/<name>/classifier/model``, and task ``<name>`` (its file beside
    ``task_file``; ``tasks`` holds those already parsed) has no ``classifier:`` section to train it from: the stage
    would fail only once it runs."""
    named = [c.args.get("model") for c in task.reward.components if c.metric == "learned_classifier"]
    named += [m.args.get("model") for m in task.metrics if m.id == "learned_classifier"]
    for model in named:
        match = TRAINED_CLASSIFIER.fullmatch(project_relative(str(model)) + "/") if model else None
        if match is None:
            continue
        name, owner_file = match.group(1), task_file.parent / f"{match.group(1)}.yaml"
        if name not in tasks and owner_file.is_file():
            tasks[name] = load_task(owner_file)
        if name in tasks and tasks[name].classifier is not None:
            continue
        why = f"{owner_file} has no classifier: section" if name in tasks else f"there is no task file {owner_file}"
        raise ConfigError(f"{task_file}: learned_classifier model {model!r} is the train_classifier stage's output, "
                          f"trained from task {name!r}'s classifier: section, but {why}; add one (keys: train_file, "
                          f"labels, ...), or name a trained model folder")


def method_task_sections(task_file: str | Path, method: Optional[str], start: str = "zero_shot") -> dict[str, Any]:
    """Every :data:`TASK_SECTIONS` section as ``method``'s stages read it (:func:`load_task_section`), checked
    as the task file's own are: a rollout must sample, the reward's keys must not clash with the metrics', and its
    components must read no meta key the datapool never writes (:func:`check_meta_keys`)."""
    sections = {key: load_task_section(cls, task_file, key, method, start) for key, cls in TASK_SECTIONS.items()}
    metrics, datapool = load_metrics(task_file), load_section(DatapoolConfig, task_file, "datapool")
    try:
        check_metric_keys(sections["reward"], metrics)
        check_meta_keys(datapool, sections["reward"], ())
    except ValueError as error:
        raise ConfigError(f"{task_file}: reward for {method} ({start}): {error}") from None
    return sections


def check_for_dvc(suite: SuiteConfig, where: str) -> None:
    """The suite keys ``dvc.yaml`` cannot honour: its grid runs RL (and DPO) from both starts, so a suite that
    keeps one (``rl_starts``) is refused under DVC rather than run differently from Snakemake, as are
    ``preference_files`` (its ``build_preferences`` stages write every task's preferences); its stages read
    ``params/``, so another ``params_dir`` is refused too; and every DVC stage that takes ``--threads`` is given the
    suite's ``threads``, so a ``resources.<rule>.threads`` of another count (:func:`dvc_threads_problem`) is refused
    as well."""
    if set(suite.rl_starts) != {"zero_shot", "supervised"}:
        raise ConfigError(f"{where}: rl_starts {list(suite.rl_starts)}: dvc.yaml runs RL from both starts; remove "
                          f"rl_starts (or list both), or run this suite with snakemake, which honours it")
    if suite.preference_files:
        raise ConfigError(f"{where}: preference_files {dict(suite.preference_files)}: dvc.yaml builds every task's "
                          f"preferences with build_preferences, and dvc repro restores that output over a file put "
                          f"there; remove preference_files and train on the file with the CLIs "
                          f"(stages/train_reward_model.py, stages/dpo.py --preferences PATH), or run this suite with "
                          f"snakemake, which honours preference_files")
    if Path(suite.params_dir) != Path("params"):
        raise ConfigError(f"{where}: params_dir {suite.params_dir!r}: dvc.yaml's stages read params/tasks/ and "
                          f"params/methods/; copy that folder's tasks/ and methods/ there (and the suite to "
                          f"params/suite.yaml), or run this suite with snakemake, which honours params_dir")
    threads = dvc_threads_problem(suite)
    if threads:
        raise ConfigError(f"{where}: {threads}")


def dvc_threads_problem(suite: SuiteConfig) -> str:
    """Why ``dvc.yaml`` cannot run ``suite`` with the threads its ``resources:`` gives a rule, or "": each rule of the
    table that has DVC stages and passes ``--threads`` (its command takes ``${threads}``, the suite's) whose
    ``resources.<rule>.threads`` is another count. Snakemake gives that rule's jobs its own count, and the last bits
    of a result may differ with the thread count, so the two engines would build different results from one suite.
    A rule whose command takes no thread count (``prepare_datapool``, ``aggregate``) only reserves cores, which
    changes no result."""
    differ = [(rule, getattr(suite.resources, rule).threads) for rule in RESOURCE_STAGES
              if STAGES[rule].dvc and "{threads}" in STAGES[rule].args
              and getattr(suite.resources, rule).threads not in (None, suite.threads)]
    if not differ:
        return ""
    given = ", ".join(f"resources.{rule}.threads {threads}" for rule, threads in differ)
    return (f"{given}: dvc.yaml runs every stage with the suite's threads ({suite.threads}); per-rule threads are "
            f"Snakemake's; remove {'it' if len(differ) == 1 else 'them'} (or set the suite's threads instead), or run "
            f"this suite with snakemake, which honours per-rule threads")


VALID = "valid\n"  # the validation stage's output: constant, so it never makes a later stage stale


def check_dvc_vars(data: Mapping[str, Any], where: str) -> None:
    """Raise ConfigError naming each key of :data:`grueflow.pipeline.SUITE_VARS` that the suite file's ``data``
    leaves out: dvc.yaml reads the suite as ``vars`` and interpolates those keys, so ``dvc repro`` would stop on
    DVC's "Could not find" before any stage, where Snakemake takes the default (each example is that default)."""
    missing = [key for key in SUITE_VARS if key not in data]
    if missing:
        defaults = {f.name: f.default for f in dataclasses.fields(SuiteConfig)}
        examples = ", ".join(f"{key}: {_yaml_value(defaults[key])}" for key in missing)
        listed = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        raise ConfigError(f"{where}: leaves out {listed}, which dvc.yaml's stages read from the suite file (dvc "
                          f"repro would stop on \"Could not find '{missing[0]}'\"); name "
                          f"{'it' if len(missing) == 1 else 'them'}, e.g. {examples}")


def _yaml_value(value: Any) -> str:
    """A default as a suite file writes it: ``[0]``, ``1``, ``auto``."""
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    return str(value)


def validate(path: Path, engine: str = "snakemake") -> Suite:
    """The suite at ``path`` and every params file it names, validated (with ``engine="dvc"``, also refusing what
    DVC cannot honour or read); raises :class:`ConfigError` on the first problem."""
    data = read_yaml(path)
    if engine == "dvc":  # first: what DVC cannot honour is refused before the files it names are checked
        check_for_dvc(parse(SuiteConfig, data, f"{path}:"), str(path))
    suite = load_suite(data, str(path))
    if engine == "dvc":
        check_dvc_vars(data, str(path))
        check_stage_models_for_dvc(suite)
    return suite


def check_stage_models_for_dvc(suite: Suite) -> None:
    """Raise ConfigError where a task's reward component or metric names, as a string arg (``reward_model``'s
    ``path``, ``learned_classifier``'s ``model``), a path inside ``results/`` (as :func:`project_relative` writes it:
    a link into a stage folder there too): a model one of grueflow's stages
    trains there (``train_reward_model``, ``train_classifier``). ``dvc.yaml`` tracks a local file a task names as a
    dependency of the stages that read it, but nothing inside ``results/``, and it has no edge from those stages to
    the ones that score with the model: ``dvc repro`` would run RL before the model exists, and never rerun RL when
    the model is trained again. Snakemake plans both from the same names."""
    for name, task in suite.tasks.items():
        named = [(f"reward component {c.metric!r}", c.args) for c in task.reward.components]
        named += [(f"metric {m.id!r}", m.args) for m in task.metrics]
        for what, args in named:
            for key, value in args.items():
                relative = project_relative(value) if isinstance(value, str) else ""
                if Path(relative).parts[:1] == ("results",):
                    given = repr(value) if relative == written_relative(value) else f"{value!r} (a link to {relative})"
                    raise ConfigError(
                        f"{Path(suite.config.params_dir) / 'tasks' / (name + '.yaml')}: {what} args.{key} {given} "
                        f"is a model a grueflow stage trains in results/; dvc.yaml has no edge from that stage to the "
                        f"ones that score with it (dvc repro would run RL before it exists, and never again once it "
                        f"is retrained); run this suite with snakemake, which plans it, or copy the trained folder "
                        f"out of results/ (e.g. to models/) and name the copy, which DVC tracks as a dependency")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m grueflow.params SUITE [--engine dvc] [--out FILE]``: validate a suite and every params file it
    names before any stage runs (Snakemake validates when it parses the Snakefile; DVC's first stage runs
    :mod:`grueflow.suite_check`, which also does this). Exit 2 with one line on the first problem; with
    ``--out``, write :data:`VALID` there when all is valid."""
    p = argparse.ArgumentParser(prog="python -m grueflow.params", description=main.__doc__)
    p.add_argument("suite", type=Path, help="a suite file, e.g. params/suite.yaml")
    p.add_argument("--engine", choices=("snakemake", "dvc"), default="snakemake",
                   help="also refuse what this engine cannot honour (dvc: rl_starts)")
    p.add_argument("--out", type=Path, default=None, help="write 'valid' here when the suite is valid")
    args = p.parse_args(argv)
    try:
        validate(args.suite, args.engine)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.out is not None:
        problem = valid_out_problem(args.out)
        if problem:
            print(f"error: --out {args.out} {problem}", file=sys.stderr)
            return 2
        with atomic_path(args.out) as tmp:
            tmp.write_text(VALID)
    return 0


def valid_out_problem(path: Path) -> Optional[str]:
    """Why ``path`` cannot take the :data:`VALID` mark (a folder, or a file that holds anything else: a README, the
    suite itself), or None."""
    if path.is_dir():
        return "is a folder; give the path of the file that says the suite is valid"
    inside = next((folder for folder in Path(os.path.realpath(path)).parents if (folder / STAGE_RECORD).is_file()),
                  None)
    if inside is not None:
        return f"lies inside {inside}, a stage's output folder; give a path outside every stage's output"
    if path.is_file() and path.read_bytes() not in (b"", VALID.encode()):
        return (f"exists and holds something else than {VALID.strip()!r}: this would replace it; give the path "
                f"of the file that says the suite is valid")
    return None


if __name__ == "__main__":
    raise SystemExit(main())
