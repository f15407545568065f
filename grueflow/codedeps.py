"""A stage's code dependencies: the files of ``grueflow/`` that its CLI can run, found statically.

The closure of a script is every ``grueflow/**/*.py`` file reachable from it through imports, read with
:mod:`ast` (nothing is imported or executed):

- ``import grueflow.a.b`` and ``from grueflow.a import b`` (``b`` a submodule or a name), relative imports,
  and imports anywhere in a file: inside functions (lazy imports) and under ``if TYPE_CHECKING:`` alike;
- a string literal that names a module of the package, ``"grueflow.rl.ppo"`` or ``"grueflow.rl.ppo:PPO"``
  (the ``module:attribute`` specs that registries load with :func:`importlib.import_module`);
- importing a module runs its package's ``__init__.py`` and every parent package's, so those are included.

Both engines use the result: the Snakemake rules list it as inputs (an edited file is newer than the outputs)
and take the digest of its content as a param (an edit that kept an older time, ``cp -p`` or ``tar x``, changes
it), and the generated ``dvc.yaml`` lists it as deps (its hash changes), so editing a file reruns exactly the
stages whose CLI reaches it. Only the standard library is used, and each file is parsed once per process.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Iterator

PACKAGE = "grueflow"
ROOT = Path(__file__).resolve().parents[1]  # the repository: grueflow/ and stages/ live here
_MODULE_SPEC = re.compile(rf"{PACKAGE}(?:\.\w+)*(?::[\w.]+)?")
_SPEC_HINT = re.compile(rf"[\"']{PACKAGE}[.:\"']")  # a file that may hold a module spec in a string literal


@functools.lru_cache(maxsize=None)
def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The file that defines dotted ``module`` under ``root`` (``a/b.py`` or ``a/b/__init__.py``), else None."""
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _module_name(path: Path, root: Path) -> str:
    """Dotted name of a file under ``root``: ``grueflow/rl/__init__.py`` -> ``grueflow.rl``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve_relative(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of a ``from .x import y`` found in ``module`` (a package when ``is_package``)."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body`` at any depth (function bodies, branches, handlers), expressions skipped."""
    for node in body:
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, name, None) or [])


def imported_names(path: Path, root: Path = ROOT) -> set[str]:
    """Every dotted module name that file ``path`` may import: import statements (any depth), the submodule
    form of each ``from m import n`` (kept only if it exists), and ``"grueflow.…[:attr]"`` string literals."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    inside = path.resolve().is_relative_to(root.resolve())
    module = _module_name(path.resolve(), root.resolve()) if inside else ""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(node, module, is_package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    if _SPEC_HINT.search(source):  # a module spec in a string: read the string literals of the whole tree
        names.update(node.value.split(":")[0] for node in ast.walk(tree) if isinstance(node, ast.Constant)
                     and isinstance(node.value, str) and _MODULE_SPEC.fullmatch(node.value))
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


def _with_parents(module: str) -> list[str]:
    """``a.b.c`` -> ``[a, a.b, a.b.c]``: importing a module runs each enclosing package first."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@functools.lru_cache(maxsize=None)
def _file_imports(path: Path, root: Path) -> frozenset[Path]:
    """The package files that ``path`` imports directly (parents' ``__init__.py`` included); one parse per file."""
    found = set()
    for name in imported_names(path, root):
        for module in _with_parents(name):
            target = module_file(module, root)
            if target is not None:
                found.add(target)
    return frozenset(found)


def script_code(script: str, root: Path = ROOT) -> list[str]:
    """The files a stage CLI runs: ``script`` (``root``-relative, ``stages/<name>.py``), then its sorted import
    closure (:func:`import_closure`); FileNotFoundError naming a missing script."""
    return [script, *import_closure(script, root)]


def import_closure(script: str | Path, root: Path = ROOT) -> list[str]:
    """The sorted ``root``-relative paths (``grueflow/...py``) of every package file that ``script`` reaches.

    ``script`` is a path relative to ``root`` (``stages/rl_finetune.py``) or absolute; the script itself is not
    in the result. A missing script raises FileNotFoundError naming it. Results are cached per process.
    """
    return list(_closure(Path(script), Path(root).resolve()))


@functools.lru_cache(maxsize=None)
def _closure(script: Path, root: Path) -> tuple[str, ...]:
    start = script if script.is_absolute() else root / script
    if not start.is_file():
        raise FileNotFoundError(f"no stage script {start}; code dependencies are computed from a stage's CLI file")
    seen: set[Path] = set()
    todo = list(_file_imports(start, root))
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(_file_imports(path, root) - seen)
    return tuple(sorted(p.relative_to(root).as_posix() for p in seen))

