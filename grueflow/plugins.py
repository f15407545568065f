"""User code named in params by import path, ``package.module:name``, as RL4LMs' registries take user classes.

A module is imported from the installed packages or from the project folder (the working directory every
stage, Snakemake and DVC run in). Every failure is a ``ValueError`` naming the path and what to do, raised
at parse time by :mod:`grueflow.params`, like an unknown registry id.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def is_import_path(name: str) -> bool:
    """True for ``package.module:name`` (a registry id never holds a colon)."""
    return ":" in name


def load(path: str, what: str) -> Any:
    """The object at import path ``path`` (``package.module:name``); ``what`` names the param in errors."""
    if not IMPORT_PATH.match(path):
        raise ValueError(f"{what} {path!r} is not an import path; write it as package.module:name")
    module_name, attribute = path.split(":")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{what} {path!r}: cannot import {module_name!r} ({error}); install its package or put "
                         f"the module in the project folder") from None
    except Exception as error:  # the module itself fails: a syntax error, a name it lacks
        raise ValueError(f"{what} {path!r}: importing {module_name!r} failed: {type(error).__name__}: "
                         f"{error}") from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{what} {path!r}: module {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    return target


TASK_PARTS = ("datapool", "reward", "metrics", "rollout_generation", "eval_generation")


def override_scopes(task: Any) -> list[dict]:
    """A task file's data and each of its ``method_overrides`` entries: where a reward or generation section
    may stand (an entry lays its sections over the task's, grueflow.params.TASK_SECTIONS)."""
    if not isinstance(task, dict):
        return []
    entries = task.get("method_overrides")
    return [task] + [e for e in (entries.values() if isinstance(entries, dict) else ()) if isinstance(e, dict)]


def reward_components(task: Any) -> list[dict]:
    """Every reward component of a task file's data: its reward's and those its method_overrides entries lay
    over it."""
    rewards = [scope["reward"] for scope in override_scopes(task) if isinstance(scope.get("reward"), dict)]
    return [c for reward in rewards if isinstance(reward.get("components"), list)
            for c in reward["components"] if isinstance(c, dict)]


def named_in_task(task: Any, parts: tuple[str, ...] = TASK_PARTS) -> list[str]:
    """Every import path the ``parts`` of a task file's data name: its datapool, reward components, metrics,
    and generation settings' post-processing (the task's own, and those of its ``method_overrides`` entries)."""
    if not isinstance(task, dict):
        return []

    def mapping(value: Any) -> dict:
        return value if isinstance(value, dict) else {}

    def items(value: Any) -> list:
        return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []

    names = {"datapool": [mapping(task.get("datapool")).get("id")],
             "reward": [c.get("metric") for c in reward_components(task)],
             "metrics": [m.get("id") for m in items(task.get("metrics"))],
             **{key: [mapping(scope.get(key)).get("post_processing") for scope in override_scopes(task)]
                for key in ("rollout_generation", "eval_generation")}}
    return sorted({n for part in parts for n in names[part] if isinstance(n, str) and is_import_path(n)})


def source_files(task: Any, root: str | Path = ".", parts: tuple[str, ...] = TASK_PARTS) -> list[str]:
    """The project's own source files behind the import paths the ``parts`` of a task file name
    (:func:`named_in_task`), and every project module those files import, transitively (a helper module of a
    reward), relative to ``root``: code dependencies of the stages that run them, so that editing one reruns
    them. A module outside the project (an installed package) and grueflow's own (the stages' code
    dependencies already) are not listed."""
    from grueflow.codedeps import module_file

    root = Path(root).resolve()
    todo = [module for module in (module_file(path.split(":")[0], root) for path in named_in_task(task, parts))
            if module is not None]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen or path.relative_to(root).parts[0] == "grueflow":
            continue
        seen.add(path)
        todo.extend(_project_imports(path, root))
    return sorted(str(path.relative_to(root)) for path in seen)


def strings_in(value: object) -> list[str]:
    """Every string in a params value, at any depth of its lists and mappings (a mapping's values)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in strings_in(item)]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings_in(item)]
    return []


def run_inputs(task: Any, reward: dict | None, metrics: Sequence[dict] | None,
               root: str | Path = ".") -> dict[str, str]:
    """What a training run computes with besides its settings, by content: ``{path: sha256}``
    (:func:`grueflow.io.fingerprint`), relative to ``root``, of each project source file behind the import paths
    (:func:`source_files`; ``task`` is the task file's data) and of each file or folder the args name (a reward
    model, a classifier, a lexicon) of what feeds its checkpoints:

    - ``reward`` (the run's resolved reward, as data), for a run trained against one: the task file's reward
      plugins and rollout post-processing, and the files its components' args name; None for a run without one;
    - ``metrics`` (the metric specs, as data), for a run that validates while it trains (``eval_every``): the
      task file's metric plugins and evaluation post-processing, and the files the metrics' args name; None for a
      run that does not validate (then they compute nothing it keeps).

    A training run keys its checkpoints and its validation rows with these, so that one run against an edited
    plugin or a retrained classifier is never resumed as if it were the same run."""
    from grueflow.io import fingerprint

    root = Path(root)
    parts = (("reward", "rollout_generation") if reward is not None else ()) + \
        (("metrics", "eval_generation") if metrics is not None else ())
    files = source_files(task, root, parts)
    components = reward.get("components") if isinstance(reward, dict) else None
    specs = [s for s in [*(components or []), *(metrics or [])] if isinstance(s, dict)]
    named = [text for spec in specs for text in strings_in(spec.get("args"))]
    paths = sorted({text for text in named if _names_input(text, root)} - set(files))
    return {path: fingerprint(root / path) for path in [*files, *paths]}


def _names_input(text: str, root: Path) -> bool:
    """Whether ``text`` names an existing file or folder (relative to ``root``, or absolute) other than one that
    holds the project (``.``, ``..``: its fingerprint would cover every output)."""
    if not text.strip() or "\n" in text:
        return False
    try:
        path = (root / text).resolve()
        return path.exists() and not root.resolve().is_relative_to(path)
    except (OSError, ValueError):  # a name too long for the file system, a NUL: not a path
        return False


def _project_imports(path: Path, root: Path) -> list[Path]:
    """The project files (under ``root``) that the module at ``path`` imports, at any depth of its code; a file
    that does not parse imports nothing here (importing it names the error)."""
    import ast

    from grueflow.codedeps import module_file

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    package = path.relative_to(root).parent.parts
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the module's package
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            names += [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
    found = []
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a module's packages run first
            module = module_file(".".join(parts[:i]), root) if name else None
            if module is not None:
                found.append(module)
    return found
