# Shared helpers: the validated suite, params slices and the library code each stage runs.
# Shell commands quote every placeholder with :q ({params.task_file:q}; a list param is quoted word by
# word), except {threads} and {wildcards.seed}, which can only be integers (seed=r"\d+" below);
# tests/unit/test_safety.py holds every rule to this.
import os
import re
from pathlib import Path

from grueflow.config import ConfigError, method_name, read_yaml
from grueflow.params import load_suite

try:
    SUITE = load_suite(config, "suite")  # every task and method file, strictly, before any job
except ConfigError as err:
    raise WorkflowError(f"invalid params: {err}") from None

PARAMS = Path(SUITE.config.params_dir)
TASKS = list(SUITE.config.tasks)
ALGORITHMS = list(SUITE.config.algorithms)
SEEDS = list(SUITE.config.seeds)
THREADS = SUITE.config.threads
METHODS = SUITE.config.methods
PREFERENCE_METHODS = list(SUITE.config.preference_methods)  # issue 7: dpo, learnt from a preference set
RL_METHODS = [m for m in METHODS[2:] if m.removeprefix("supervised+") not in PREFERENCE_METHODS]
DPO_METHODS = [m for m in METHODS[2:] if m.removeprefix("supervised+") in PREFERENCE_METHODS]
RESOURCES = SUITE.config.resources  # per-rule threads, mem_mb, runtime, gpu: the suite's resources: over the defaults
PRECISION = SUITE.config.precision  # a param (rerun trigger) of every stage that runs a model


def job_threads(rule, default=THREADS):
    return RESOURCES.threads(rule, default)


def stage_device(rule):
    """The ``--device`` of a rule's stage, as the string resource ``device``: ``cuda`` when the rule's resources ask
    for a GPU, else ``$GRUEFLOW_DEVICE`` or ``auto`` (CUDA when the machine has it). A resource, not a param: the
    device is an execution setting and never a rerun trigger (``--set-resources rl_finetune:device=cuda:1``)."""
    return "cuda" if RESOURCES.of(rule).get("gpu") else os.environ.get("GRUEFLOW_DEVICE") or "auto"


def _choice(names):
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


wildcard_constraints:
    task=_choice(TASKS),
    seed=r"\d+",
    rl_method=_choice(RL_METHODS),
    dpo_method=_choice(DPO_METHODS),
    method=_choice(METHODS),


def task_file(w):
    return str(PARAMS / "tasks" / f"{w.task}.yaml")


def task_slice(*keys):
    """The params slice a rule depends on: exactly these keys of the task's file (rerun trigger)."""
    return lambda w: {k: read_yaml(task_file(w)).get(k) for k in keys}


def method_overrides(method):
    """The task file's overrides of one method's params (rerun trigger for that method's stages only)."""
    return lambda w: (read_yaml(task_file(w)).get("method_overrides") or {}).get(method(w) if callable(method) else method)


def method_file(name):
    return str(PARAMS / "methods" / f"{name}.yaml")


def code(*parts):
    """Library files a stage runs (inputs, so that a code change reruns it)."""
    core = ["grueflow/__init__.py", "grueflow/config.py", "grueflow/io.py", "grueflow/registry.py",
            "grueflow/stage.py", "grueflow/device.py", "grueflow/seeding.py"]
    files = []
    for part in parts:
        path = Path(part)
        files += sorted(str(p) for p in path.rglob("*.py")) if path.is_dir() else [part]
    return core + files


def reward_models(w):
    """Reward-model folders a task's reward names (metric reward_model, issue 7): inputs of the stages that
    score with it, so Snakemake trains the model first; ``.../reward_model/model`` maps to the stage folder."""
    components = (read_yaml(task_file(w)).get("reward") or {}).get("components") or []
    paths = [str((c.get("args") or {}).get("path", "")) for c in components if c.get("metric") == "reward_model"]
    return [p.removesuffix("/").removesuffix("/model") if p.rstrip("/").endswith("/model") else p for p in paths if p]
