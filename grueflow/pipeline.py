"""The pipeline's one declaration: every stage's CLI, wildcards, params, inputs, outputs, metrics, plots and
default resources, stated once here and read by both engines.

- Snakemake: ``workflow/rules/*.smk`` take each rule's output paths, code inputs (the CLI and its import
  closure), params slice and method file from :data:`STAGES`; rule names, log paths and shell commands stay in
  the rules. Their resources come from ``grueflow.config`` (``RESOURCES.of``): a suite's ``resources:`` over
  the defaults declared here (:data:`DEFAULT_RESOURCES`, for the stages in :data:`RESOURCE_STAGES`).
- DVC: ``dvc.yaml`` is generated from :data:`STAGES`, one DVC stage per :class:`DvcStage` of a stage.

A stage's code dependencies are never listed: they are the import closure of its CLI inside ``grueflow/``
(:mod:`grueflow.codedeps`). So after editing this table, or the imports of any module a stage reaches,
regenerate ``dvc.yaml`` (a test fails until the committed file equals the generated one)::

    python -m grueflow.pipeline dvc --write     # rewrite dvc.yaml in place, atomically
    python -m grueflow.pipeline dvc --check     # exit 1, saying so, when dvc.yaml is stale
    python -m grueflow.pipeline dvc             # print the generated file
    python -m grueflow.pipeline code rl_finetune   # print a stage's code dependencies

Paths are templates in Snakemake's wildcard syntax (``results/{task}/{rl_method}/seed{seed}``), relative to
the repository root. A DVC stage renders them by binding each wildcard to its grid axes (``rl_method`` ->
``supervised+${item.algorithm}``). This module imports only the standard library, PyYAML and
:mod:`grueflow.codedeps`, so the engines, ``grueflow.config`` and tests can read it without the stack.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import hashlib
import itertools
import json
import os
import re
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

import yaml

from grueflow import codedeps, plugins

ROOT = codedeps.ROOT
DVC_YAML = "dvc.yaml"
COMMAND = "python -m grueflow.pipeline dvc --write"
DIFF_LINES = 12  # of the unified diff --check prints when dvc.yaml is not the generated file

# a DVC grid axis -> the params/suite.yaml list it iterates over
AXES = {"task": "tasks", "algorithm": "algorithms", "seed": "seeds", "method": "preference_methods"}
SUITE_FILE = "params/suite.yaml"
TASK_FILE = "params/tasks/{task}.yaml"
METHOD_FILE = "params/methods/{method_name}.yaml"
SUITE_VALUES = {"threads": "${threads}", "precision": "${precision}"}  # suite values a DVC command passes
# every params/suite.yaml key dvc.yaml interpolates (its grids and its commands' values): DVC stops on a missing one,
# where Snakemake takes the suite's default (grueflow.params.check_dvc_vars refuses it first)
SUITE_VARS = (*AXES.values(), *SUITE_VALUES)

# outputs that later stages read
DATAPOOL = "results/{task}/datapool"
BASE_MODEL = "results/{task}/base_model"
WARM_START = "results/{task}/supervised/seed{seed}"
PREFERENCES = "results/{task}/preferences"
EVAL = "results/eval/{task}/{method}/seed{seed}"
CLASSIFIER = "results/{task}/classifier"  # train_classifier's folder; a learned_classifier's model: .../model
SUITE_CHECK = "results/suite_valid.txt"  # DVC's first stage writes it once the suite and its params files are valid
PLUGIN_CODE = "results/plugin_code"  # DVC's first stage writes <task>/<stage>.json: digests of the plugins it runs
# The GRUE table's record of the digests of what its stage wrote (grueflow.io.files_record of its CSV): an out, so
# that DVC restores a table (run cache, checkout, pull) with the record of that table, never with another run's
TABLE_RECORD = "results/.grue_table.csv.record.json"
BASE_MODEL_HF = BASE_MODEL + "/model"  # the Hugging Face folder inside a model stage's output (grueflow.io.MODEL_DIR)
WARM_START_HF = WARM_START + "/model"
MODEL_OUTS = ("{out}/model", "{out}/stage.json")  # what DVC caches of a model-producing stage
# A training output's evaluation during training (eval_every: curves.csv, curves.png, dvclive/, predictions/) and its
# save_every policies (<unit><k>/ each): folders every run makes, empty without those settings, since a DVC out must
# exist after its stage, and DVC restores (run cache, checkout, pull) exactly the outs it declares, no other file
VALIDATION_OUT = "validation"  # written by grueflow.validation.Validation.write
SAVED_POLICIES = "checkpoints"  # a model folder each, which evaluate takes (grueflow.rl.nlpo.masks_for)
TRAINING_OUTS = (*MODEL_OUTS, "{out}/" + VALIDATION_OUT, "{out}/" + SAVED_POLICIES)
DECODING_DIR = "decoding"  # an RL output's record of how evaluate decodes its model/ (grueflow.rl.nlpo.DECODING_DIR)
PLACEHOLDER = re.compile(r"(?<!\$)\{(\w+)\}")  # {name} in a template; DVC's ${...} is not one
START_PREFIX = "supervised+"  # a method run from the warm start (supervised+ppo), and its method_overrides entry
OVERRIDES_KEY = "method_overrides"  # the task-file key of the per-method overrides (grueflow.params)


@dataclass(frozen=True)
class Plot:
    """One DVC plot: a file or folder (``{out}/curves.csv``) and its axes (None: DVC's default)."""

    path: str
    x: Optional[str] = None
    y: Optional[str] = None


@dataclass(frozen=True)
class DefaultResources:
    """A stage's default scheduler request: ``mem_mb`` in megabytes, ``runtime`` in minutes (wall time),
    ``gpu`` a GPU count (0 asks for none). A suite's ``resources:`` overrides them per stage."""

    mem_mb: int
    runtime: int
    gpu: int = 0


@dataclass(frozen=True)
class DvcStage:
    """One DVC stage of a table stage: ``name``, the grid ``axes`` it iterates over (none: one stage; only
    ``task``: ``foreach: ${tasks}``; more: a ``matrix``), and ``bind``, the value of each Snakemake wildcard or
    input that the axes do not give directly (``rl_method: supervised+{algorithm}``; placeholders name axes).
    ``comment`` goes above the stage in ``dvc.yaml``; ``after``: files of DVC-only stages it must follow;
    ``reads``: inputs of this DVC stage alone, beyond the table stage's (placeholders as in ``bind``)."""

    name: str
    axes: tuple[str, ...] = ()
    bind: Mapping[str, str] = field(default_factory=dict)
    comment: str = ""
    after: tuple[str, ...] = ()  # DVC-only deps that order the stage after another (:data:`SUITE_CHECK`)
    reads: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline.

    ``script``: its CLI (``stages/<name>.py``); its code dependencies are the script and its import closure.
    ``outputs``: the paths its CLI writes, by name (``out`` for the stage folder); their placeholders are the
    Snakemake rule's wildcards. ``inputs``: the upstream paths its CLI reads, by name (DVC's deps; the
    Snakemake rules choose a start's input with wildcard functions). ``task_keys``: the keys of
    ``params/tasks/<task>.yaml`` the CLI reads (its params slice); ``method``: the name of the
    ``params/methods/<name>.yaml`` file it reads whole (``{algorithm}``: named by a grid axis), or None;
    ``suite_keys``: the keys of the suite it depends on. ``args``: the CLI's arguments in DVC's command, with
    placeholders for the names above, the wildcards and ``threads``/``precision``. ``outs``, ``metrics`` and
    ``plots``: what ``dvc.yaml`` caches, reads as metrics and plots (``{out}`` is an output's path). ``persist``:
    DVC leaves the outs in place while the stage runs (where the stage itself keeps a copy of what it replaces;
    DVC keeps no run cache of such a stage, so it runs again rather than restoring an earlier output).
    ``resources``: the default scheduler request, for a stage that is a scheduled job. ``dvc``: its DVC
    stages (none: Snakemake only). ``plugin_parts``: the task-file parts whose user code (import paths,
    :mod:`grueflow.plugins`) the stage runs, so that editing that code reruns it. ``overrides``: for a stage whose
    ``task_keys`` hold :data:`OVERRIDES_KEY`, the method whose entries of it the stage reads, as the results folders
    name it (``supervised``, ``{rl_method}``: a wildcard; :func:`method_layers`); the other entries are no params of
    its jobs.
    """

    name: str
    script: str
    outputs: Mapping[str, str]
    inputs: Mapping[str, str] = field(default_factory=dict)
    task_keys: tuple[str, ...] = ()
    method: Optional[str] = None
    suite_keys: tuple[str, ...] = ()
    args: str = ""
    outs: tuple[str, ...] = ()
    private_outs: tuple[str, ...] = ()  # DVC outs kept out of its cache (``cache: false``): never pushed, mode kept
    persist: bool = False  # DVC leaves the outs in place while the stage runs (``persist: true``; no run cache)
    metrics: tuple[str, ...] = ()
    plots: tuple[Plot, ...] = ()
    resources: Optional[DefaultResources] = None
    dvc: tuple[DvcStage, ...] = ()
    plugin_parts: tuple[str, ...] = ()
    overrides: Optional[str] = None

    @property
    def wildcards(self) -> tuple[str, ...]:
        """The Snakemake wildcards of the stage's rule: the placeholders of its outputs, in order."""
        names = [name for template in self.outputs.values() for name in placeholders(template)]
        return tuple(dict.fromkeys(names))

    @property
    def code(self) -> list[str]:
        """The files the stage runs: its CLI, then the sorted import closure of it inside ``grueflow/``."""
        return codedeps.script_code(self.script)


def placeholders(template: str) -> list[str]:
    """The ``{name}`` placeholders of a path template, in order (DVC's ``${...}`` left out)."""
    return PLACEHOLDER.findall(template)


# -- the table --------------------------------------------------------------------------------------

_TABLE = (
    Stage(
        "prepare_datapool", script="stages/prepare_datapool.py",
        outputs={"out": DATAPOOL},
        task_keys=("datapool",),
        args="--task-file {task_file} --out {out}",
        outs=("{out}",),
        resources=DefaultResources(mem_mb=1000, runtime=10),
        plugin_parts=('datapool',),
        dvc=(DvcStage("prepare_datapool", axes=("task",), after=(SUITE_CHECK,)),),  # every stage's upstream
    ),
    Stage(
        "base_model", script="stages/base_model.py",
        outputs={"out": BASE_MODEL},
        inputs={"datapool": DATAPOOL},
        task_keys=("model",),
        args="--task-file {task_file} --datapool {datapool} --threads {threads} --out {out}",
        outs=MODEL_OUTS,
        plots=(Plot("{out}/pretrain_curve.csv", x="step", y="loss"),),
        resources=DefaultResources(mem_mb=2000, runtime=30),
        dvc=(DvcStage("base_model", axes=("task",)),),
    ),
    Stage(
        "warm_start", script="stages/warm_start.py",
        outputs={"out": WARM_START},
        inputs={"datapool": DATAPOOL, "base_model": BASE_MODEL_HF},
        task_keys=("lengths", "eval_generation", "metrics", "method_overrides"),
        method="supervised",
        suite_keys=("precision",),
        args="--task-file {task_file} --method-file {method_file} --datapool {datapool} --base-model {base_model}"
             " --seed {seed} --threads {threads} --resume-dir {out}.resume --out {out} --precision {precision}",
        outs=TRAINING_OUTS,
        metrics=("{out}/dvclive/metrics.json",),
        plots=(Plot("{out}/loss_curve.csv", x="epoch", y="val_loss"), Plot("{out}/dvclive/plots/metrics", x="step"),
               Plot("{out}/loss_curve.png")),
        resources=DefaultResources(mem_mb=2000, runtime=60),
        plugin_parts=('metrics', 'eval_generation'),
        overrides="supervised",
        dvc=(DvcStage("warm_start", axes=("task", "seed")),),
    ),
    Stage(
        "rl_finetune", script="stages/rl_finetune.py",
        outputs={"out": "results/{task}/{rl_method}/seed{seed}"},
        inputs={"datapool": DATAPOOL, "base_model": BASE_MODEL_HF, "init": "{init}"},
        task_keys=("lengths", "rollout_generation", "eval_generation", "reward", "metrics", "method_overrides"),
        method="{algorithm}",
        suite_keys=("precision",),
        args="--task-file {task_file} --algorithm {algorithm} --method-file {method_file} --datapool {datapool}"
             " --start {start} --init-model {init} --base-model {base_model} --seed {seed} --threads {threads}"
             " --resume-dir {out}.resume --out {out} --precision {precision}",
        outs=(*TRAINING_OUTS, "{out}/" + DECODING_DIR),  # how evaluate decodes model/ (NLPO: its mask model)
        metrics=("{out}/train_metrics.json", "{out}/dvclive/metrics.json"),
        plots=(Plot("{out}/curves.csv", x="iteration", y="reward/task"), Plot("{out}/dvclive/plots/metrics", x="step"),
               Plot("{out}/curves.png")),
        resources=DefaultResources(mem_mb=3000, runtime=120),
        plugin_parts=('reward', 'rollout_generation', 'metrics', 'eval_generation'),
        overrides="{rl_method}",
        dvc=(DvcStage("rl_finetune", axes=("task", "algorithm", "seed"),
                      bind={"rl_method": "{algorithm}", "start": "zero_shot", "init": BASE_MODEL_HF}),
             DvcStage("rl_finetune_supervised", axes=("task", "algorithm", "seed"),
                      bind={"rl_method": "supervised+{algorithm}", "start": "supervised", "init": WARM_START_HF})),
    ),
    Stage(
        "evaluate", script="stages/evaluate.py",
        outputs={"out": EVAL},
        inputs={"datapool": DATAPOOL, "base_model": BASE_MODEL_HF, "model": "{model}"},
        task_keys=("lengths", "eval_generation", "reward", "metrics", "headline_metrics", "method_overrides"),
        suite_keys=("precision",),
        args="--task-file {task_file} --task {task} {identity} --datapool {datapool} --model {model}"
             " --base-model {base_model} --seed {seed} --threads {threads} --out {out} --precision {precision}",
        outs=("{out}/predictions.jsonl", "{out}/stage.json"),
        metrics=("{out}/metrics.json",),
        resources=DefaultResources(mem_mb=2000, runtime=60),
        plugin_parts=('reward', 'metrics', 'eval_generation'),
        overrides="{method}",
        dvc=(DvcStage("evaluate_zero_shot", axes=("task", "seed"),
                      bind={"method": "zero_shot", "identity": "--start zero_shot", "model": BASE_MODEL_HF}),
             DvcStage("evaluate_supervised", axes=("task", "seed"),
                      bind={"method": "supervised", "identity": "--start supervised", "model": WARM_START_HF}),
             DvcStage("evaluate_rl", axes=("task", "algorithm", "seed"),
                      bind={"method": "{algorithm}", "identity": "--start zero_shot --algorithm {algorithm}",
                            "model": "results/{task}/{algorithm}/seed{seed}/model"},
                      reads=("results/{task}/{algorithm}/seed{seed}/" + DECODING_DIR,)),
             DvcStage("evaluate_rl_supervised", axes=("task", "algorithm", "seed"),
                      bind={"method": "supervised+{algorithm}",
                            "identity": "--start supervised --algorithm {algorithm}",
                            "model": "results/{task}/supervised+{algorithm}/seed{seed}/model"},
                      reads=("results/{task}/supervised+{algorithm}/seed{seed}/" + DECODING_DIR,)),
             DvcStage("evaluate_dpo", axes=("task", "method", "seed"),
                      bind={"method": "{method}", "identity": "--start zero_shot --algorithm {method}",
                            "model": "results/{task}/{method}/seed{seed}/model"}),
             DvcStage("evaluate_dpo_supervised", axes=("task", "method", "seed"),
                      bind={"method": "supervised+{method}", "identity": "--start supervised --algorithm {method}",
                            "model": "results/{task}/supervised+{method}/seed{seed}/model"})),
    ),
    Stage(
        "build_preferences", script="stages/build_preferences.py",
        outputs={"out": PREFERENCES},
        inputs={"datapool": DATAPOOL, "base_model": BASE_MODEL_HF},
        task_keys=("lengths", "reward"),
        method="preferences",
        suite_keys=("precision",),
        args="--task-file {task_file} --method-file {method_file} --datapool {datapool} --policy {base_model}"
             " --base-model {base_model} --threads {threads} --out {out} --precision {precision}",
        outs=("{out}/preferences.jsonl", "{out}/stage.json"),
        metrics=("{out}/summary.json",),
        resources=DefaultResources(mem_mb=2000, runtime=60),
        plugin_parts=('reward',),
        dvc=(DvcStage("build_preferences", axes=("task", "method"), comment=(
            "Learning from preferences. Every stage below is a matrix over the suite's preference_methods\n"
            "(dpo), so a suite without them (preference_methods: []) has none of these stages.")),),
    ),
    Stage(
        "train_reward_model", script="stages/train_reward_model.py",
        outputs={"out": "results/{task}/reward_model"},
        inputs={"preferences": PREFERENCES + "/preferences.jsonl", "base_model": BASE_MODEL_HF},
        method="reward_model",
        suite_keys=("precision",),
        args="--method-file {method_file} --preferences {preferences} --backbone {base_model}"
             " --threads {threads} --out {out} --precision {precision}",
        outs=MODEL_OUTS,
        metrics=("{out}/metrics.json",),
        plots=(Plot("{out}/curves.csv", x="epoch", y="val_accuracy"),),
        resources=DefaultResources(mem_mb=2000, runtime=60),
        dvc=(DvcStage("train_reward_model", axes=("task", "method")),),
    ),
    Stage(
        "dpo", script="stages/dpo.py",
        outputs={"out": "results/{task}/{dpo_method}/seed{seed}"},
        inputs={"preferences": PREFERENCES + "/preferences.jsonl", "init": "{init}"},
        task_keys=("lengths",),
        method="{method}",
        suite_keys=("precision",),
        args="--task-file {task_file} --method-file {method_file} --preferences {preferences} --init-model {init}"
             " --seed {seed} --threads {threads} --out {out} --precision {precision}",
        outs=MODEL_OUTS,
        metrics=("{out}/train_metrics.json",),
        plots=(Plot("{out}/curves.csv", x="step", y="rewards/margin"),),
        resources=DefaultResources(mem_mb=3000, runtime=120),
        dvc=(DvcStage("dpo", axes=("task", "method", "seed"), bind={"dpo_method": "{method}", "init": BASE_MODEL_HF}),
             DvcStage("dpo_supervised", axes=("task", "method", "seed"),
                      bind={"dpo_method": "supervised+{method}", "init": WARM_START_HF})),
    ),
    Stage(
        "aggregate", script="stages/aggregate.py",
        outputs={"csv": "results/grue_table.csv", "md": "results/grue_table.md", "json": "results/grue_table.json",
                 "html": "results/grue_table.html", "chart": "results/grue_chart.png",
                 "samples": "results/samples.html"},
        inputs={"eval": "results/eval"},
        suite_keys=("tasks", "algorithms", "seeds", "preference_methods"),
        args=f"--eval-dir {{eval}} --suite {SUITE_FILE} --out-csv {{csv}} --out-md {{md}} --out-json {{json}}"
             " --out-chart {chart} --out-html {html} --out-samples {samples}",
        outs=("{csv}", "{md}", "{html}", "{samples}", TABLE_RECORD),
        metrics=("{json}",),
        plots=(Plot("{chart}"),),
        resources=DefaultResources(mem_mb=1000, runtime=10),
        dvc=(DvcStage("aggregate"),),
    ),
    # A task's learned reward or metric model, trained here when its task file has a `classifier:` key and a
    # learned_classifier names results/<task>/classifier/model (Snakemake builds it before the stages that score
    # with it). Snakemake only: its data files are named inside the task file, which DVC cannot template deps
    # from, and a `foreach: ${tasks}` stage would fail for the tasks without one.
    Stage(
        "train_classifier", script="stages/train_classifier.py",
        outputs={"out": CLASSIFIER},
        task_keys=("classifier",),
        suite_keys=("precision",),
        args="--task-file {task_file} --threads {threads} --resume-dir {out}.resume --out {out} --precision {precision}",
        outs=MODEL_OUTS,
        metrics=("{out}/metrics.json",),
        plots=(Plot("{out}/curves.csv", x="step", y="val_accuracy"),),
        resources=DefaultResources(mem_mb=4000, runtime=30),  # peak memory and time: bench/CLASSIFIER.md
    ),
    Stage(
        "export_human_likert", script="stages/export_human_eval.py",
        outputs={"out": "results/human/{task}/batches/likert_seed{seed}"},
        inputs={"predictions": EVAL + "/predictions.jsonl"},  # one per method of the suite
    ),
    Stage(
        "export_human_pairwise", script="stages/export_human_eval.py",
        outputs={"batch": "results/human/{task}/batches/{method_a}_vs_{method_b}_seed{seed}",
                 "key": "results/human/{task}/keys/{method_a}_vs_{method_b}_seed{seed}.json"},
        inputs={"first": "results/eval/{task}/{method_a}/seed{seed}/predictions.jsonl",
                "second": "results/eval/{task}/{method_b}/seed{seed}/predictions.jsonl"},
        args="--kind pairwise --criteria {task} --seed {seed} --predictions {method_a}={first} {method_b}={second}"
             " --out {batch} --key {key}",
        outs=("{batch}",),
        private_outs=("{key}",),  # the blinding key: written 0600, for the researcher's eyes only
        persist=True,  # the export copies the batch it replaces, and its key (write_batch): DVC must not delete them
        dvc=(DvcStage("export_human_pairwise", axes=("task", "algorithm", "seed"),
                      bind={"method_a": "supervised+{algorithm}", "method_b": "supervised"}, comment=(
                          "Human evaluation: a blinded pairwise batch (supervised+RL against supervised) from the\n"
                          "two evaluate outputs. Annotating it is a human step outside the DAG (README, "
                          "\"Human evaluation\").")),),
    ),
    Stage(
        "import_human_eval", script="stages/import_human_eval.py",
        outputs={"out": "results/human/{task}/imported/{batch}"},
        inputs={"batch": "results/human/{task}/batches/{batch}", "answers": "data/human/{task}/{batch}",
                "key": "results/human/{task}/keys/{batch}.json"},  # a pairwise batch's key only
    ),
    Stage(
        "human_eval_table", script="stages/human_eval_table.py",
        outputs={"csv": "results/human_eval_table.csv", "md": "results/human_eval_table.md"},
        inputs={"imports": "results/human/{task}/imported/{batch}"},  # every imported batch
    ),
)

STAGES: dict[str, Stage] = {s.name: s for s in _TABLE}
"""Every stage of the pipeline by name, in the pipeline's order."""

RESOURCE_STAGES: tuple[str, ...] = tuple(s.name for s in _TABLE if s.resources is not None)
"""The stages that are scheduled jobs with default resources (the keys of a suite's ``resources:``)."""

DEFAULT_RESOURCES: dict[str, dict[str, int]] = {name: asdict(STAGES[name].resources) for name in RESOURCE_STAGES}
"""``{stage: {"mem_mb", "runtime", "gpu"}}``: each scheduled stage's default request (:class:`DefaultResources`)."""


def stage(name: str) -> Stage:
    """The table's stage ``name``; an unknown name raises KeyError listing the valid ones."""
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}; valid stages: {', '.join(STAGES)}")
    return STAGES[name]


def default_resources(name: str) -> dict[str, int]:
    """A copy of stage ``name``'s default ``{"mem_mb", "runtime", "gpu"}``; KeyError, listing the scheduled
    stages, for a stage that has none."""
    if name not in DEFAULT_RESOURCES:
        raise KeyError(f"stage {name!r} has no default resources; "
                       f"stages with resources: {', '.join(RESOURCE_STAGES)}")
    return dict(DEFAULT_RESOURCES[name])


# -- the params a stage folder was built with -------------------------------------------------------

PARAMS_DIGEST = "params_digest"  # the stage record's key of :func:`params_digest`'s digests


def override_layers(method: Optional[str], start: str = "zero_shot") -> list[str]:
    """The :data:`OVERRIDES_KEY` entries a method's stages read, in order: ``<method>``, then (RL from the warm
    start) ``supervised+<method>``; none without a method (the zero-shot evaluation)."""
    if method is None:
        return []
    return [method] + ([START_PREFIX + method] if start == "supervised" and method != "supervised" else [])


def method_layers(method: str) -> list[str]:
    """The :data:`OVERRIDES_KEY` entries the stages of ``method`` read, the method named as the results folders name
    it: ``zero_shot`` (none), ``supervised``, ``<algorithm>`` or ``supervised+<algorithm>`` (:func:`override_layers`
    of ``<algorithm>`` from the warm start: ``[<algorithm>, supervised+<algorithm>]``)."""
    if method == "zero_shot":
        return []
    if method.startswith(START_PREFIX):
        return override_layers(method.removeprefix(START_PREFIX), "supervised")
    return override_layers(method)


@dataclass(frozen=True)
class ParamsSource:
    """Where one job of a stage reads its params: ``task_file`` (``params/tasks/<task>.yaml``, of which it reads the
    stage's ``task_keys``), ``method_file`` (``params/methods/<name>.yaml``, read whole) and ``suite``, the values of
    the stage's ``suite_keys`` it is given (``{"precision": "fp32"}``: the command line's, whichever engine ran it).
    ``overrides``: the entries of the task file's :data:`OVERRIDES_KEY` the job reads (:func:`method_layers` of its
    method), for a stage whose ``task_keys`` hold that key; it reads no other entry (None: every entry, the key
    whole). A file the stage does not read may be None."""

    stage: str
    task_file: Optional[str] = None
    method_file: Optional[str] = None
    suite: Mapping[str, object] = field(default_factory=dict)
    overrides: Optional[tuple[str, ...]] = ()

    def where(self, part: str) -> str:
        """A part of :func:`params_digest` as a person finds it: its file, or the suite's keys."""
        if part == "task":
            return str(self.task_file)
        if part == "method":
            return str(self.method_file)
        return "the suite's " + ", ".join(STAGES[self.stage].suite_keys)


def folder_params_source(name: str, folder: str, params_dir: str = "params") -> Optional[ParamsSource]:
    """Where the job that wrote the stage folder ``folder`` of the table's stage ``name`` reads its params, as far as
    the folder's path tells outside a pipeline run: ``folder`` is its output path as its ``stage.json`` records it
    (``out``, relative to the project), and ``params_dir`` the project's params folder (as the working folder reaches
    it). The task file its ``{task}`` names, the method file its stage's ``method`` names (a grid axis, ``{algorithm}``
    or ``{method}``, read from the folder's method less the warm start's prefix) and the ``method_overrides`` entries
    of its method (:func:`method_layers`). ``suite`` is left empty: a run's suite values are its command line's,
    which no folder tells, so a caller compares the other parts only. None where ``folder`` is none of the stage's
    folders or the stage is not in the table."""
    entry = STAGES.get(name)
    template = entry.outputs.get("out") if entry is not None else None
    if template is None:
        return None
    pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)"
                      for i, part in enumerate(PLACEHOLDER.split(template)))
    match = re.fullmatch(pattern, folder)
    if match is None:
        return None
    wildcards = match.groupdict()
    method = next((wildcards[axis] for axis in ("rl_method", "dpo_method", "method") if axis in wildcards), None)
    axes = {"algorithm": method.removeprefix(START_PREFIX), "method": method.removeprefix(START_PREFIX)} \
        if method is not None else {}
    try:
        method_name = entry.method.format(**axes) if entry.method is not None else None
        overrides = tuple(method_layers(entry.overrides.format(**wildcards))) if entry.overrides is not None else ()
    except KeyError:  # a placeholder the folder's path does not give
        return None
    task = f"{params_dir}/tasks/{wildcards['task']}.yaml" if "task" in wildcards else None
    return ParamsSource(name, task, f"{params_dir}/methods/{method_name}.yaml" if method_name else None, {}, overrides)


def params_read(source: ParamsSource, load: Optional[Callable[[str], object]] = None) -> dict[str, object]:
    """The params ``source``'s stage reads, as data, by part: ``task`` (its ``task_keys`` of the task file, a key the
    file lacks as None; of :data:`OVERRIDES_KEY`, the entries of ``source.overrides`` the file holds),
    ``method`` (the method file's whole content) and ``suite`` (its ``suite_keys``' values); a part the stage does
    not read is left out (none: ``{}``). ``load`` reads a params file (default: :func:`grueflow.config.read_yaml`,
    which raises ConfigError for a file it cannot read)."""
    if load is None:
        from grueflow.config import read_yaml as load  # grueflow.config reads this module's table

    entry = STAGES[source.stage]
    parts: dict[str, object] = {}
    if entry.task_keys:
        task = load(str(source.task_file))
        parts["task"] = {key: task.get(key) if isinstance(task, dict) else None for key in entry.task_keys}
        overrides = parts["task"].get(OVERRIDES_KEY)
        if isinstance(overrides, dict) and source.overrides is not None:  # another method's entry is not a param
            parts["task"][OVERRIDES_KEY] = {name: value for name, value in overrides.items()
                                            if name in source.overrides}
    if entry.method is not None:
        parts["method"] = load(str(source.method_file))
    if entry.suite_keys:
        parts["suite"] = {key: source.suite.get(key) for key in entry.suite_keys}
    return parts


def params_digest(source: ParamsSource, load: Optional[Callable[[str], object]] = None) -> dict[str, str]:
    """The sha256 of each part of :func:`params_read` (its canonical JSON: keys sorted where they can be, which the
    engines' YAML parsers agree on): what a stage records in its ``stage.json`` (:data:`PARAMS_DIGEST`), and what
    the Snakefile's stale check compares with the params files as they are now, for a folder no Snakemake job of the
    checkout wrote (``dvc repro`` built it, or ``.snakemake`` was removed), of whose params Snakemake keeps no
    record. Equal params give equal digests, whatever path or engine read them."""
    return {part: hashlib.sha256(_canonical(value).encode()).hexdigest()
            for part, value in params_read(source, load).items()}


def _canonical(value: object) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    except TypeError:  # keys of mixed types cannot be sorted: the file's order
        return json.dumps(value, default=str, separators=(",", ":"))


# -- dvc.yaml ---------------------------------------------------------------------------------------

def render(template: str, names: Mapping[str, str]) -> str:
    """``template`` with each ``{name}`` replaced by ``names[name]`` (DVC's ``${...}`` kept); a placeholder with
    no value raises KeyError naming it and the template."""
    def value(match: re.Match) -> str:
        if match.group(1) not in names:
            raise KeyError(f"no value for {{{match.group(1)}}} in {template!r}; known: {', '.join(sorted(names))}")
        return names[match.group(1)]

    return PLACEHOLDER.sub(value, template)


def _names(stage: Stage, variant: DvcStage) -> dict[str, str]:
    """The DVC text of every placeholder a stage's templates may use, for one of its DVC stages."""
    item = {variant.axes[0]: "${item}"} if len(variant.axes) == 1 else {a: f"${{item.{a}}}" for a in variant.axes}
    names = {**SUITE_VALUES, **item}
    names.update({k: render(v, item) for k, v in variant.bind.items()})
    for name, template in {**stage.outputs, **stage.inputs}.items():
        if name not in names:  # a bound input (a start's model) keeps its binding
            names[name] = render(template, names)
    names["task_file"] = render(TASK_FILE, names) if "task" in names else ""
    if stage.method is not None:
        names["method_file"] = render(METHOD_FILE, {"method_name": render(stage.method, names)})
    return names


def _params(stage: Stage, names: Mapping[str, str]) -> list:
    params: list = []
    if stage.suite_keys:
        params.append({SUITE_FILE: list(stage.suite_keys)})
    # OVERRIDES_KEY whole, not the entries a stage reads (method_overrides.ppo): DVC fails a stage, once its command
    # ran, whose params key the file lacks, and a task file need hold no entry for a method
    if stage.task_keys:
        params.append({names["task_file"]: list(stage.task_keys)})
    if stage.method is not None:
        params.append({names["method_file"]: None})
    return params


def _plot(plot: Plot, names: Mapping[str, str]) -> object:
    axes = {k: v for k, v in (("x", plot.x), ("y", plot.y)) if v is not None}
    return {render(plot.path, names): axes} if axes else render(plot.path, names)


def dvc_stage(stage: Stage, variant: DvcStage) -> dict:
    """The ``dvc.yaml`` entry of one DVC stage of ``stage``: its grid, cmd, deps, params, outs, metrics, plots."""
    names = _names(stage, variant)
    body: dict = {"cmd": render(f"python {stage.script} {stage.args}", names)}
    plugin_code = [render(plugin_code_file(stage.name), names)] if stage.plugin_parts else []
    body["deps"] = list(dict.fromkeys([*variant.after, *(render(p, names) for p in stage.inputs.values()),
                                       *(render(p, names) for p in variant.reads), *plugin_code, *stage.code]))
    kept = {"persist": True} if stage.persist else {}
    outs = [{render(p, names): kept} if kept else render(p, names) for p in stage.outs] + \
        [{render(p, names): {"cache": False, **kept}} for p in stage.private_outs]
    for key, values in (("params", _params(stage, names)), ("outs", outs),
                        ("metrics", [render(p, names) for p in stage.metrics]),
                        ("plots", [_plot(p, names) for p in stage.plots])):
        if values:
            body[key] = values
    if not variant.axes:
        return body
    if len(variant.axes) == 1:
        return {"foreach": f"${{{AXES[variant.axes[0]]}}}", "do": body}
    return {"matrix": {a: f"${{{AXES[a]}}}" for a in variant.axes}, **body}


VALIDATE_SUITE = "validate_suite"
VALIDATE_COMMENT = ("The suite and every params file it names, validated before any other stage runs (Snakemake\n"
                    "does the same when it reads the Snakefile): prepare_datapool, upstream of every other stage,\n"
                    "depends on its output, a constant file, so a valid edit reruns only this check and an invalid\n"
                    "one stops here. It also writes the digests of the user code each task's stages run\n"
                    "(results/plugin_code/<task>/<stage>.json, deps of those stages), so editing a plugin reruns\n"
                    "exactly them; a task file naming a plugin this file does not list is refused: regenerate.\n"
                    "It runs on every dvc repro (always_changed; dvc status lists it as \"always changed\"): it also\n"
                    "refuses a link under results/ through which DVC would check out or write a stage's outputs\n"
                    "into another run's folder (results/sentiment a link to results/concepts), before DVC touches\n"
                    "any. dvc checkout and dvc repro --single-item of a later stage run no check.")


SUITE_CHECK_CLI = "grueflow/suite_check.py"


def validate_suite_stage() -> dict:
    """DVC's first stage: :mod:`grueflow.suite_check` on the suite (its validation, with DVC's own refusals, and
    the links under ``results/`` DVC would write through), over every file under ``params/`` (a suite's
    ``params_dir`` lies there) and the plugin sources the task files name (:func:`plugin_sources`), writing
    :data:`SUITE_CHECK` and :data:`PLUGIN_CODE`. Always changed: a link is no dependency DVC can hash, so the check
    runs on every ``dvc repro``; its outputs are the same bytes each time, so nothing downstream reruns for it."""
    return {"always_changed": True,
            "cmd": f"python -m grueflow.suite_check {SUITE_FILE} --out {SUITE_CHECK} --plugin-code {PLUGIN_CODE}",
            "deps": ["params", *plugin_sources(), SUITE_CHECK_CLI, *codedeps.import_closure(SUITE_CHECK_CLI)],
            "outs": [SUITE_CHECK, PLUGIN_CODE]}


# -- user code under DVC ---------------------------------------------------------------------------
# A DVC stage's deps are fixed when dvc.yaml is written, but a task file may name user code by import path,
# and its datapool local data files. So the first stage depends on every plugin source and data file the task
# files under params/tasks name, and writes one digest file per task and stage (PLUGIN_CODE/<task>/<stage>.json)
# that the stage depends on: editing a plugin or a data file reruns the first stage, whose rewritten digests
# make exactly the stages that read it stale. A task file that names a plugin or data file dvc.yaml does not
# list is refused by the first stage, asking to regenerate.


def plugin_code_file(stage: str) -> str:
    """The template of a stage's digest file of its task's plugin sources."""
    return f"{PLUGIN_CODE}/{{task}}/{stage}.json"


DATAPOOL_DATA_KEYS = ("data_files", "data_root", "path", "train_path")  # the datapool args that can name local data


def named_strings(name: str, value: object) -> list[tuple[str, str]]:
    """Every string in a params ``value``, at any depth of its lists and mappings (a mapping's values), with its key
    under ``name``: ``("data_files.train[1]", "data/a.jsonl")``, in the order written."""
    if isinstance(value, str):
        return [(name, value)]
    if isinstance(value, (list, tuple)):
        return [found for i, item in enumerate(value) for found in named_strings(f"{name}[{i}]", item)]
    if isinstance(value, Mapping):
        return [found for key, item in value.items() for found in named_strings(f"{name}.{key}", item)]
    return []


def datapool_paths(args: Mapping) -> list[tuple[str, str]]:
    """Every string a datapool's ``args`` give under :data:`DATAPOOL_DATA_KEYS`, at any depth of lists and
    mappings, with its name: ``("data_files.train[1]", "data/a.jsonl")``, in the order written."""
    return [found for key in DATAPOOL_DATA_KEYS for found in named_strings(key, args.get(key))]


def datapool_files(task: object, root: Path = ROOT) -> list[str]:
    """The local data a task file's datapool reads, as the file writes the paths (relative to ``root``):
    ``args.data_files`` (a path, a list or a ``{split: path(s)}`` mapping), ``args.data_root``, and ``args.path``
    and ``args.train_path`` where they name a file or folder that exists (else a hub id or a builder such as
    ``json``), normalised by :func:`local_input`. Paths that do not exist are left out: the datapool's loader
    names them."""
    datapool = task.get("datapool") if isinstance(task, dict) else None
    args = datapool.get("args") if isinstance(datapool, dict) else None
    if not isinstance(args, dict):
        return []
    named = [text for _, text in datapool_paths(args)]
    return sorted({path for path in (local_input(p, root) for p in named) if path is not None})


def data_in_outputs(args: Mapping, root: Path = ROOT) -> Optional[str]:
    """Why a datapool's ``args`` cannot be used, or None: a path among :func:`datapool_paths` that resolves, as
    :func:`local_input` resolves it (``~`` expanded, relative to ``root``, links followed), into ``root/results``.
    The stages write there, so :func:`local_input` leaves such a path out as a stage output: no engine would track
    it as the datapool's data (nor order the datapool after a stage that writes it), and an edit to it would rebuild
    nothing. The message names the path as written, and where it resolves to when links or ``..`` take it there."""
    outputs = (root / "results").resolve()
    for name, text in datapool_paths(args):
        path = resolve_input(text, root)
        if path is None or not path.is_relative_to(outputs):
            continue
        as_written = os.path.normpath(os.path.join(root.resolve(), os.path.expanduser(text)))
        via = f", which resolves to {str(path)!r}," if str(path) != as_written else ""
        return (f"args.{name} {text!r}{via} lies under results/, where the stages write their outputs: neither "
                f"engine tracks data there, so an edit to it would rebuild nothing; keep the data outside results/, "
                f"e.g. in data/")
    return None


GLOB_MAGIC = re.compile(r"[*?[]")  # what glob() and ``datasets``' data_files read as a pattern


def data_pattern(args: Mapping, root: Path = ROOT) -> Optional[str]:
    """Why a datapool's ``args`` cannot be used, or None: a path among :func:`datapool_paths` that holds a glob
    pattern (``data/*.jsonl``, ``data/part-?.csv``) and names no file or folder as written. The loaders read each
    split from one file, named as it is, and the engines track the files named, so a pattern would pass planning
    and fail in the job (or, matched by a later file, be read without being tracked). The message names the files
    it matches now, relative to ``root``."""
    for name, text in datapool_paths(args):
        path = resolve_input(text, root)
        if not GLOB_MAGIC.search(text) or path is None or path.exists():
            continue
        written = os.path.expanduser(text)
        try:
            matched = sorted(glob.glob(os.path.join(str(root), written), recursive=True))
        except (OSError, ValueError):
            matched = []
        names = [repr(m if os.path.isabs(written) else os.path.relpath(m, root)) for m in matched]
        listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        now = f"it matches {len(names)} now: {listed}" if names else "it matches nothing now"
        return (f"args.{name} {text!r} is a pattern ({now}); grueflow reads each split from one file, named as it "
                f"is, and neither engine could track the files a pattern matches: name one file per split (join "
                f"several into one, e.g. with cat for JSON lines)")
    return None


def scorer_files(task: object, root: Path = ROOT, parts: tuple[str, ...] = ("reward", "metrics")) -> list[str]:
    """The local files and folders the args of a task file's reward components (part ``reward``) and metrics
    (part ``metrics``) name, at any depth (a classifier or BLEURT checkpoint folder, a lexicon file), as the file
    writes them: a string that names an existing path relative to ``root`` (or an absolute one). Paths under
    ``results/`` are left out: they are stage outputs, which the stage that writes them tracks."""
    if not isinstance(task, dict):
        return []
    specs = {"reward": plugins.reward_components(task),  # a method's overridden reward too
             "metrics": task.get("metrics") if isinstance(task.get("metrics"), list) else []}
    named = [text for part in parts if part in specs
             for spec in specs[part] if isinstance(spec, dict) for text in plugins.strings_in(spec.get("args"))]
    return sorted({path for path in (local_input(text, root) for text in named) if path is not None})


def task_paths(task: object) -> list[tuple[str, str, bool]]:
    """Every string of a task file's data (``task``) that a stage may read as a local file or folder, with its key
    and whether the Snakemake rules take it as an input whether or not it exists: the datapool's data keys
    (``datapool.args.data_files.train``, :func:`datapool_paths`), each string in the args of the reward components
    (the task's and those of its ``method_overrides`` entries) and of the metrics, at any depth (a lexicon, a
    checkpoint folder: taken where it exists, :func:`scorer_files`; a ``reward_model`` component's ``path`` and a
    ``learned_classifier``'s ``model`` always, as the folders of the stages that train them), and the classifier's
    ``train_file`` and ``test_file`` (always) and ``backbone`` (where it exists). A plugin's import path is not one:
    its module files (:func:`grueflow.plugins.source_files`) are found from dotted module names, which hold no
    brace."""
    if not isinstance(task, dict):
        return []

    def mapping(value: object) -> dict:
        return value if isinstance(value, dict) else {}

    def dicts(value: object) -> list[tuple[int, dict]]:
        return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] if isinstance(value, list) else []

    always = {("reward_model", "path"), ("learned_classifier", "model")}  # (metric, arg) a rule takes as an input
    found = [(f"datapool.args.{key}", text, False) for key, text in datapool_paths(mapping(mapping(
        task.get("datapool")).get("args")))]
    overrides = mapping(task.get("method_overrides"))
    scopes = [("", task)] + [(f"method_overrides.{name}.", entry) for name, entry in overrides.items()
                             if isinstance(entry, dict)]
    specs = [(f"{prefix}reward.components[{i}]", c.get("metric"), c) for prefix, scope in scopes
             for i, c in dicts(mapping(scope.get("reward")).get("components"))]
    specs += [(f"metrics[{i}]", m.get("id"), m) for i, m in dicts(task.get("metrics"))]
    for where, metric, spec in specs:
        args = mapping(spec.get("args"))
        found += [(key, text, (metric, arg) in always) for arg, value in args.items()
                  for key, text in named_strings(f"{where}.args.{arg}", value)]
    classifier = mapping(task.get("classifier"))
    found += [(f"classifier.{key}", classifier[key], key != "backbone")
              for key in ("train_file", "test_file", "backbone") if isinstance(classifier.get(key), str)]
    return found


WILDCARD_BRACES = re.compile(r"[{}]")  # what Snakemake reads in an input path as a wildcard, whatever the escaping


def wildcard_problem(task: object, root: Path = ROOT) -> Optional[str]:
    """Why a task file's data (``task``) cannot be planned by Snakemake, or None: a local path it names
    (:func:`task_paths`, as the rules take it: an existing file or folder, normalised as :func:`local_input` does,
    and the files under a folder, :func:`files_in`), holds a brace, which Snakemake reads in an input as a wildcard
    (``data/set {v2}/train.jsonl``, with ``{{v2}}`` too): no job could read it, and a stage folder built before is
    taken as up to date. Refused under DVC too, so that one task file runs under both engines."""
    for key, text, always in task_paths(task):
        local = local_input(text, root)
        taken = [local, *files_in([local], root)] if local is not None else [text] if always and text.strip() else []
        braced = next((path for path in taken if WILDCARD_BRACES.search(path)), None)
        if braced is None:
            continue
        held = "" if braced in (text, local) else f" holds {braced!r}"
        return f"{key} {text!r}{held}: {wildcard_advice(braced)}"
    return None


def wildcard_advice(path: str) -> str:
    """What to do about a local path holding a brace (:data:`WILDCARD_BRACES`), as the end of a message."""
    part = next(part for part in Path(path).parts if WILDCARD_BRACES.search(part))
    renamed = WILDCARD_BRACES.sub("", part).strip() or "data"
    return (f"Snakemake reads '{{...}}' in an input path as a wildcard, so it could not plan the stage that reads it; "
            f"rename {part!r} without braces (e.g. {renamed!r}) and give the new path")


def files_in(paths: Iterable[str], root: Path = Path(".")) -> list[str]:
    """``paths`` (relative to ``root``, or absolute) with each folder replaced by every file under it, sorted, written
    as ``paths`` write them: the local inputs a rule takes (Snakemake compares an input folder's own modification
    time only, which a file rewritten two folders down leaves alone)."""
    return [str(f) for p in paths
            for f in (sorted(Path(p) / q.relative_to(root / p) for q in (root / p).rglob("*") if q.is_file())
                      if (root / p).is_dir() else [Path(p)])]


def resolve_input(text: str, root: Path = ROOT) -> Optional[Path]:
    """The path ``text`` names as the loaders read it: ``~`` expanded (the home folder's), relative to ``root``
    (or absolute), links followed; None where it cannot be a path (a NUL, a name too long for the file system)."""
    try:
        return (root / os.path.expanduser(text)).resolve()
    except (OSError, ValueError):
        return None


def local_input(text: str, root: Path = ROOT) -> Optional[str]:
    """``text`` as a local input to track, normalised (``./a/`` -> ``a``, ``~/a`` -> the home folder's), when it
    names an existing file or folder (relative to ``root``, or absolute; :func:`resolve_input`); None when it names
    nothing, or a stage output under ``results/`` (its stage tracks it), or a folder holding the project or its
    outputs (``.``, ``..``, ``/``: hashing it would track every output, and nothing would ever be up to date)."""
    if not text.strip() or "\n" in text:
        return None
    path = resolve_input(text, root)
    try:
        exists = path is not None and path.exists()
    except (OSError, ValueError):  # a name too long for the file system: not a path
        return None
    outputs, project = (root / "results").resolve(), root.resolve()
    if not exists or path.is_relative_to(outputs) or project.is_relative_to(path):
        return None
    return os.path.normpath(os.path.expanduser(text))


def path_digest(path: Path) -> str:
    """sha256 of a file's bytes, or of a folder's files (their relative names and bytes, in name order)."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(item.relative_to(path).as_posix().encode() + b"\0" + hashlib.sha256(item.read_bytes()).digest())
    return digest.hexdigest()


def _task_files(root: Path) -> list[object]:
    """Every task file's data under ``root/params/tasks``; a file that does not parse is left to the suite's
    validation."""
    from grueflow.config import ConfigError, read_yaml  # grueflow.config reads this module's table

    found = []
    for path in sorted((root / "params" / "tasks").glob("*.yaml")):
        try:
            found.append(read_yaml(path))
        except ConfigError:
            continue
    return found


def plugin_sources(root: Path = ROOT) -> list[str]:
    """The project's source files behind the import paths of every task file under ``root/params/tasks``
    (:func:`grueflow.plugins.source_files`), then the local data their datapools read
    (:func:`datapool_files`) and the local files their rewards and metrics name (:func:`scorer_files`), each
    list sorted."""
    code = sorted({f for data in _task_files(root) for f in plugins.source_files(data, root)})
    data = sorted({f for task in _task_files(root) for f in datapool_files(task, root) + scorer_files(task, root)})
    return code + [f for f in data if f not in code]


def named_files(task: object, root: Path, parts: tuple[str, ...], with_data: bool = True) -> list[str]:
    """The project files a task file's ``parts`` name (:data:`Stage.plugin_parts`): the source files of their
    plugins, the local files their rewards' and metrics' args name, and with ``with_data``, where ``parts`` holds
    the datapool, the local data it reads; sorted, relative to ``root``."""
    files = set(plugins.source_files(task, root, parts)) | set(scorer_files(task, root, parts))
    return sorted(files | (set(datapool_files(task, root)) if with_data and "datapool" in parts else set()))


def script_parts(script: str) -> tuple[str, ...]:
    """The task-file parts (:data:`Stage.plugin_parts`) of every stage whose CLI is ``script``, in table order."""
    return tuple(dict.fromkeys(part for stage in _TABLE if stage.script == script for part in stage.plugin_parts))


def plugin_digests(tasks: Mapping[str, object], root: Path = ROOT,
                   digest: Callable[[Path], str] = path_digest) -> dict[str, dict[str, dict]]:
    """For each task (name -> its task file's data) and each stage that runs plugins, the import paths the
    stage's parts name and the sha256 of each of their project source files, and for the datapool's stage of
    each local data file or folder it reads, and for the stages that score of each local file or folder their
    rewards' and metrics' args name: ``{task: {stage: {...}}}``; and where those import paths name modules outside
    the project (a folder on ``PYTHONPATH``, an installed package), what identifies their code
    (:func:`grueflow.plugins.outside_code`: a digest, or an installed distribution's version) under ``modules``,
    so that this file, which the stage depends on, changes with it. ``digest``: :func:`path_digest`, or one that
    gives the same value from a cache."""
    digests: dict[str, dict[str, dict]] = {}
    for task, data in tasks.items():
        digests[task] = {}
        for stage in _TABLE:
            if stage.plugin_parts:
                files = named_files(data, root, stage.plugin_parts)
                modules = plugins.outside_code(data, root, stage.plugin_parts, digest)
                digests[task][stage.name] = {
                    "import_paths": plugins.named_in_task(data, stage.plugin_parts),
                    "sha256": {f: digest(root / f) for f in files}, **({"modules": modules} if modules else {})}
    return digests


def named_digests(task: object, root: Path, parts: tuple[str, ...], with_data: bool = True,
                  digest: Callable[[Path], str] = path_digest) -> dict[str, str]:
    """The ``digest`` of each of :func:`named_files` by its path relative to ``root``, and what identifies the code
    of each module outside the project behind the import paths ``parts`` name
    (:func:`grueflow.plugins.outside_code`) by its :func:`grueflow.plugins.module_key`: what a stage that runs
    ``parts`` of the task file ``task`` computes with besides grueflow's code and its params."""
    modules = plugins.outside_code(task, root, parts, digest)
    return {**{f: digest(root / f) for f in named_files(task, root, parts, with_data)},
            **{plugins.module_key(name): value for name, value in modules.items()}}


def outside_code_digest(task: object, parts: tuple[str, ...], root: Path = ROOT) -> str:
    """One sha256 over what identifies the code of the modules outside the project behind the import paths
    ``parts`` of the task file ``task`` name (:func:`grueflow.plugins.outside_code`), "" where they name none: a
    Snakemake rule's rerun trigger (its ``stale`` param) for code that is no input of the job."""
    modules = plugins.outside_code(task, root, parts)
    return hashlib.sha256(json.dumps(modules, sort_keys=True).encode()).hexdigest() if modules else ""


def unlisted_plugin_sources(digests: Mapping[str, Mapping[str, dict]], document: Mapping) -> list[str]:
    """The plugin source files in ``digests`` that the first stage of ``document`` (``dvc.yaml`` as data; empty
    where it is missing) does not list as deps (then ``dvc.yaml`` is stale: regenerate it)."""
    stage = ((document or {}).get("stages") or {}).get(VALIDATE_SUITE) or {}
    listed = set(stage.get("deps") or [])
    used = {f for stages in digests.values() for entry in stages.values() for f in entry["sha256"]}
    return sorted(used - listed)


def dvc_outputs(document: Mapping, grid: Mapping[str, object]) -> list[str]:
    """Every output path (outs, metrics, plots) the stages of the ``dvc.yaml`` ``document`` write, over the suite's
    ``grid`` (its ``vars``: ``tasks``, ``seeds``, ... as the suite file gives them), as DVC expands them: a
    ``foreach`` over one list (``${item}``), a ``matrix`` over several (``${item.<axis>}``). The first stage's own
    outputs are left out. A grid name the document iterates over that ``grid`` lacks (or not as a list) yields no
    path for that stage."""
    paths: list[str] = []
    for name, body in ((document or {}).get("stages") or {}).items():
        if name == VALIDATE_SUITE or not isinstance(body, dict):
            continue
        if "foreach" in body:
            items = grid.get(_grid_name(body["foreach"]))
            names = [{"${item}": value} for value in items] if isinstance(items, list) else []
            body = body.get("do") or {}
        elif "matrix" in body:
            axes = {axis: grid.get(_grid_name(ref)) for axis, ref in body["matrix"].items()}
            lists = [values if isinstance(values, list) else [] for values in axes.values()]
            names = [{f"${{item.{axis}}}": value for axis, value in zip(axes, values)}
                     for values in itertools.product(*lists)]
        else:
            names = [{}]
        for out in [entry for key in ("outs", "metrics", "plots") for entry in body.get(key) or []]:
            template = next(iter(out)) if isinstance(out, dict) else str(out)
            for values in names:
                path = template
                for placeholder, value in values.items():
                    path = path.replace(placeholder, str(value))
                paths.append(path)
    return paths


def _grid_name(reference: object) -> str:
    """The suite variable a ``foreach`` or ``matrix`` entry names: ``tasks`` for ``${tasks}``."""
    return str(reference).removeprefix("${").removesuffix("}")


def dvc_document() -> dict:
    """``dvc.yaml`` as data: the suite file as ``vars``, the suite's validation, then every DVC stage of the
    table, in table order."""
    return {"vars": [SUITE_FILE],
            "stages": {VALIDATE_SUITE: validate_suite_stage(),
                       **{v.name: dvc_stage(s, v) for s in _TABLE for v in s.dvc}}}


HEADER = f"""\
# GENERATED from the stage table in grueflow/pipeline.py by `{COMMAND}`; do not edit.
# Each stage's code deps are the import closure of its CLI inside grueflow/ (grueflow/codedeps.py).
# grueflow under DVC: the same stage CLIs as the Snakefile, over the grid in params/suite.yaml.
#   dvc repro                      run what is stale
#   dvc metrics diff HEAD~1        compare the GRUE table (and every run's metrics) across commits
#   dvc plots diff HEAD~1          compare the training curves (DVCLive's per-iteration scalars, curves.png)
#   dvc exp run -S params/methods/ppo.yaml:learning_rate=1e-4 && dvc exp show    compare experiments
# Each stage lists exactly the params keys and the library code its CLI reads.
"""


def dvc_yaml() -> str:
    """The text of ``dvc.yaml``: :data:`HEADER`, then :func:`dvc_document` in block style; checked to load
    back as that document (ValueError otherwise)."""
    document = dvc_document()
    lines = HEADER.splitlines() + ["vars:", *_block(document["vars"], 2), "", "stages:"]
    comments = {VALIDATE_SUITE: VALIDATE_COMMENT, **{v.name: v.comment for s in _TABLE for v in s.dvc if v.comment}}
    for name, body in document["stages"].items():
        lines += [f"  # {line}" for line in comments.get(name, "").splitlines()]
        lines += [f"  {name}:", *_block(body, 4), ""]
    text = "\n".join(lines[:-1]) + "\n"
    if yaml.safe_load(text) != document:
        raise ValueError("the generated dvc.yaml does not load back as the stage table's document")
    return text


_INDICATORS = tuple("-?:,[]{}#&*!|>'\"%@`")


def _scalar(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    plain = (text and not text.startswith(_INDICATORS) and ": " not in text and " #" not in text
             and not text.endswith(":") and text == text.strip() and yaml.safe_load(text) == text)
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _entry(head: str, value: object, indent: int) -> list[str]:
    """``head`` (``key:`` or ``-``) followed by ``value``: inline, folded (a long string) or as a block."""
    if isinstance(value, (dict, list)):
        return [head, *_block(value, indent + 2)]
    text = _scalar(value)
    if len(head) + len(text) <= 118 or text.startswith('"'):
        return [f"{head} {text}".rstrip()]
    wrapped = textwrap.wrap(text, width=110 - indent, break_long_words=False, break_on_hyphens=False)
    return [f"{head} >-", *(" " * (indent + 2) + line for line in wrapped)]


def _block(value: object, indent: int) -> list[str]:
    """Block-style YAML lines of a dict or list at ``indent`` spaces."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            lines += _entry(f"{pad}{_scalar(key)}:", item, indent)
        return lines
    for item in value:
        if isinstance(item, dict):  # "- key: ..." with the mapping's further lines aligned under its first key
            inner = _block(item, indent + 2)
            lines += [f"{pad}- {inner[0].lstrip()}", *inner[1:]]
        else:
            lines += _entry(f"{pad}-", item, indent)
    return lines


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it onto ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def not_a_file(dvc_file: Path) -> Optional[str]:
    """Why ``dvc_file`` cannot be read or replaced as dvc.yaml where something other than a file (or a link to one)
    is there: a folder, a FIFO, a socket or a device; None where it is a file or missing."""
    if not dvc_file.exists() or dvc_file.is_file():
        return None
    kind = "a folder" if dvc_file.is_dir() else "not a regular file (a FIFO, a socket or a device)"
    return (f"{dvc_file} is {kind}, not the file {DVC_YAML} DVC reads: move it aside or delete it, then rerun "
            f"{COMMAND}; it is left as it was")


def foreign_entries(dvc_file: Path) -> list[str]:
    """What ``dvc_file`` holds that :func:`dvc_document` does not generate, and rewriting it would drop: a stage a
    user added (``dvc stage add``) as ``stage NAME``, another top-level section (``plots``, ``artifacts``, ...) as
    ``section NAME``. Nothing where the file is missing or is no YAML mapping; a file that cannot be read as YAML,
    or something else than a file there (:func:`not_a_file`), raises ValueError saying why (it may hold a stage of
    the user's that rewriting it would drop; a folder cannot be replaced by a file)."""
    if (problem := not_a_file(dvc_file)) is not None:
        raise ValueError(problem)
    try:
        found = yaml.safe_load(dvc_file.read_text(encoding="utf-8")) if dvc_file.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        why = getattr(err, "problem", None) or err
        raise ValueError(f"{dvc_file} cannot be read as YAML{where}: {why}; it may hold a stage of yours, which "
                         f"{COMMAND} would delete: fix it, or move such stages to a dvc.yaml in a subfolder and "
                         f"delete it, then rerun it; {DVC_YAML} is left as it was") from None
    if not isinstance(found, dict):
        return []
    generated = dvc_document()
    stages = found.get("stages") if isinstance(found.get("stages"), dict) else {}
    return ([f"stage {name}" for name in stages if name not in generated["stages"]]
            + [f"section {key}" for key in found if key not in generated])


def main(argv: Optional[list[str]] = None) -> int:
    """``dvc [--write | --check]``: print, write or check ``dvc.yaml``; ``code STAGE...``: print code deps."""
    parser = argparse.ArgumentParser(prog="python -m grueflow.pipeline", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dvc = commands.add_parser("dvc", help="the generated dvc.yaml (stdout unless --write or --check)")
    mode = dvc.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {DVC_YAML} at the repository root")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {DVC_YAML} differs from the generated file")
    code = commands.add_parser("code", help="a stage's code dependencies, one path a line")
    code.add_argument("stages", nargs="+", choices=list(STAGES), metavar="STAGE")
    args = parser.parse_args(argv)
    if args.command == "code":
        print("\n".join(dict.fromkeys(path for name in args.stages for path in STAGES[name].code)))
        return 0
    text, path = dvc_yaml(), ROOT / DVC_YAML
    if args.write:
        try:
            foreign = foreign_entries(path)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if foreign:
            print(f"error: {path} holds {', '.join(foreign)}, which grueflow does not generate; {COMMAND} would "
                  f"delete {'them' if len(foreign) > 1 else 'it'}: move {'them' if len(foreign) > 1 else 'it'} to a "
                  f"dvc.yaml in a subfolder (DVC reads one in any folder of the repository), or delete "
                  f"{'them' if len(foreign) > 1 else 'it'}, then rerun it; {DVC_YAML} is left as it was",
                  file=sys.stderr)
            return 2
        write_atomically(path, text)
    elif args.check:
        if (problem := not_a_file(path)) is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        found = path.read_text(encoding="utf-8") if path.is_file() else ""
        if found != text:
            print(f"{path} is not the generated file; regenerate it with `{COMMAND}`", file=sys.stderr)
            if found:  # what generating it would change (a dep from a task file, a stage's params keys)
                diff = list(difflib.unified_diff(found.splitlines(), text.splitlines(), "dvc.yaml", "generated",
                                                 n=0, lineterm=""))
                shown = diff[:DIFF_LINES] + ([f"... and {len(diff) - DIFF_LINES} more lines"]
                                            if len(diff) > DIFF_LINES else [])
                print("\n".join(shown), file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
