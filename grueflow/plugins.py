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
from typing import Any

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
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{what} {path!r}: module {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    return target


def named_in_task(task: Any) -> list[str]:
    """Every import path a task file's data names: its datapool, reward components, metrics, post-processing."""
    if not isinstance(task, dict):
        return []
    names = [(task.get("datapool") or {}).get("id")]
    names += [c.get("metric") for c in (task.get("reward") or {}).get("components") or [] if isinstance(c, dict)]
    names += [m.get("id") for m in task.get("metrics") or [] if isinstance(m, dict)]
    names += [(task.get(key) or {}).get("post_processing") for key in ("rollout_generation", "eval_generation")]
    return sorted({n for n in names if isinstance(n, str) and is_import_path(n)})


def source_files(task: Any, root: str | Path = ".") -> list[str]:
    """The project's own source files behind a task file's import paths (:func:`named_in_task`), relative to
    ``root``: code dependencies of the stages that read the task file, so that editing one reruns them. A
    module outside the project (an installed package) is not listed."""
    from grueflow.codedeps import module_file

    root = Path(root).resolve()
    files = []
    for path in named_in_task(task):
        module = module_file(path.split(":")[0], root)
        if module is not None:
            files.append(str(module.relative_to(root)))
    return sorted(set(files))
