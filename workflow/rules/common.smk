# Shared helpers: the validated suite, params slices and the library code each stage runs.
# Shell commands quote every placeholder with :q ({params.task_file:q}; a list param is quoted word by
# word), except {threads} and {wildcards.seed}, which can only be integers (seed=r"\d+" below);
# tests/unit/test_safety.py holds every rule to this.
import re
from pathlib import Path

from grueflow.config import ConfigError, load_suite, method_name, read_yaml

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
RL_METHODS = METHODS[2:]
RESOURCES = SUITE.config.resources  # per-rule threads, mem_mb, runtime, gpu: the suite's resources: over the defaults


def job_threads(rule, default=THREADS):
    return RESOURCES.threads(rule, default)


def _choice(names):
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


wildcard_constraints:
    task=_choice(TASKS),
    seed=r"\d+",
    rl_method=_choice(RL_METHODS),
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
            "grueflow/stage.py", "grueflow/seeding.py"]
    files = []
    for part in parts:
        path = Path(part)
        files += sorted(str(p) for p in path.rglob("*.py")) if path.is_dir() else [part]
    return core + files
