"""User code named in params by import path, ``package.module:name``, as RL4LMs' registries take user classes.

A module is imported from the installed packages or from the project folder (the working directory every
stage, Snakemake and DVC run in). Every failure is a ``ValueError`` naming the path and what to do, raised
at parse time by :mod:`grueflow.params`, like an unknown registry id.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import os
import re
import site
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

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
    them. A module outside the project (an installed package, a folder on ``PYTHONPATH``: :func:`outside_code`
    identifies its code) and grueflow's own (the stages' code dependencies already) are not listed."""
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


MODULE_KEY = "module "  # the prefix of a module outside the project in a record of named files (module_key)


def module_key(module: str) -> str:
    """How a record of the files a task names (a stage's plugin digests, its provenance, a run's inputs) keys the
    code of ``module``, a module outside the project (:func:`outside_code`): ``module my_rewards``, by its dotted
    name, not its path, so that moving the project or the module's folder changes nothing."""
    return MODULE_KEY + module


def is_module_key(name: str) -> bool:
    """Whether a record's ``name`` is a :func:`module_key` rather than a path in the project."""
    return name.startswith(MODULE_KEY) and IMPORT_PATH.match(name.removeprefix(MODULE_KEY) + ":x") is not None


def outside_code(task: Any, root: str | Path = ".", parts: tuple[str, ...] = TASK_PARTS,
                 digest: Optional[Callable[[Path], str]] = None) -> dict[str, str]:
    """What identifies the code of each module outside the project (``root``) behind the import paths the ``parts``
    of a task file name (:func:`named_in_task`), as Python finds it now (``sys.path``, ``PYTHONPATH``, a
    ``pip install -e`` package): ``{dotted name: value}``, sorted, where the value is

    - for a module of an installed distribution (under the standard library's or a site-packages folder, not an
      editable install): ``<distribution> <version>`` of the distributions that provide its top-level package;
    - else (a folder on ``PYTHONPATH``, an editable install's source, or a module no distribution claims): the
      ``digest`` (default: the sha256 of its bytes) of its file, and so of its packages' ``__init__`` files and
      of every module under the same folder of ``sys.path`` that it imports, transitively, each under its own
      name (an installed module no distribution claims: its file alone).

    grueflow's own modules (the stages' code dependencies already) and the project's (:func:`source_files`) are
    left out, and so is a name Python cannot find (importing it names the error at parse time). Nothing is
    imported: a package's ``__init__`` is found, not run."""
    digest = digest or (lambda path: hashlib.sha256(path.read_bytes()).hexdigest())
    project = Path(root).resolve()
    found: dict[str, str] = {}
    todo = [path.split(":")[0] for path in named_in_task(task, parts)]
    while todo:
        module = todo.pop()
        if module in found or module.split(".")[0] == "grueflow" or _project_module(module, project):
            continue
        located = _outside_file(module)
        if located is None:
            continue
        path, folder = located
        parents = module.split(".")
        todo += [".".join(parents[:i]) for i in range(1, len(parents))]  # importing it runs its packages first
        if _installed(path):
            found[module] = _installed_versions(parents[0]) or digest(path)
            continue
        found[module] = digest(path)
        if path.suffix == ".py":
            todo += [_module_name(file, folder) for file in _project_imports(path, folder)]
    return dict(sorted(found.items()))


def _project_module(module: str, root: Path) -> bool:
    """Whether ``module`` or a package enclosing it is a file of the project ``root``."""
    from grueflow.codedeps import module_file

    parts = module.split(".")
    return any(module_file(".".join(parts[:i]), root) is not None for i in range(1, len(parts) + 1))


def _outside_file(module: str) -> Optional[tuple[Path, Path]]:
    """(the file of dotted ``module``, the folder of ``sys.path`` its top-level package lies in) as Python would
    import it now, without importing anything; None for a module with no file of its own (built in, a namespace
    package) or none found."""
    from grueflow.codedeps import module_file

    top, *rest = module.split(".")
    spec = None
    for finder in sys.meta_path:  # as an import finds a top-level name, not run, whatever a module imported holds
        try:
            spec = finder.find_spec(top, None) if hasattr(finder, "find_spec") else None
        except (ImportError, ValueError, OSError):
            spec = None
        if spec is not None:
            break
    if spec is None:
        return None
    origin = Path(spec.origin) if spec.origin and os.path.isfile(spec.origin) else None
    if not rest:
        return (origin, origin.parent.parent if spec.submodule_search_locations else origin.parent) \
            if origin is not None else None
    for location in spec.submodule_search_locations or ():
        path = module_file(".".join(rest), Path(location))
        if path is not None:
            return path, Path(location).parent
    return None


def _module_name(path: Path, folder: Path) -> str:
    """The dotted name of the module file ``path`` under the ``sys.path`` folder ``folder``."""
    parts = path.relative_to(folder).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def _install_folders() -> tuple[Path, ...]:
    """The standard library's and the site-packages folders: where a module is an installed distribution's."""
    paths = sysconfig.get_paths()
    folders = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += [*getattr(site, "getsitepackages", lambda: [])(), site.getusersitepackages()]
    return tuple(dict.fromkeys(Path(f).resolve() for f in folders if f))


def _installed(path: Path) -> bool:
    """Whether the module file ``path`` lies in an installed distribution's folder (:func:`_install_folders`)."""
    return any(path.resolve().is_relative_to(folder) for folder in _install_folders())


@functools.lru_cache(maxsize=None)
def _distributions() -> dict[str, list[str]]:
    """The installed distributions of each top-level package, read once a process."""
    return importlib.metadata.packages_distributions()


def _installed_versions(top: str) -> str:
    """``<distribution> <version>`` of each installed distribution providing the top-level package ``top``; ""
    for none."""
    names = sorted(set(_distributions().get(top, ())))
    versions = []
    for name in names:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(versions)


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
    model, a classifier, a lexicon), and what identifies the code of each module outside the project behind them
    (:func:`outside_code`, under its :func:`module_key`), of what feeds its checkpoints:

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
    outside = {module_key(name): value for name, value in outside_code(task, root, parts).items()}
    return {**{path: fingerprint(root / path) for path in [*files, *paths]}, **outside}


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
