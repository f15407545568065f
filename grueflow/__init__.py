"""grueflow: RL fine-tuning of language models as a reproducible pipeline of cached stages."""

__version__ = "0.1.0"

import hashlib
import importlib.machinery
import os
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _grueflow_command() -> bool:
    """Whether this process is a grueflow command: the ``grueflow`` script, ``python -m grueflow...`` or a stage
    script beside the package (``stages/<stage>.py``)."""
    if not sys.argv or sys.argv[0] in ("", "-c", "-m"):
        return False
    script = Path(sys.argv[0]).resolve()
    return script.name == "grueflow" or _PACKAGE in script.parents or script.parent == _PACKAGE.parent / "stages"


def _interrupted(kind, value, traceback, previous=sys.excepthook):
    """A Ctrl-C outside a command's own handler (while torch and transformers import, before it is in place) ends
    in one line, as it does inside: every output is written to a temporary name first, so none is half-written."""
    if issubclass(kind, KeyboardInterrupt) and _grueflow_command():
        print("interrupted: no output was left half-written; rerun the same command", file=sys.stderr)
        return
    previous(kind, value, traceback)


sys.excepthook = _interrupted


class _ContentCheckedLoader(importlib.machinery.SourceFileLoader):
    """A source module's loader whose bytecode in ``__pycache__`` is current only for the source bytes it was
    compiled from. Python takes a ``.pyc`` as current while the source's modification time (whole seconds) and size
    are those it recorded, so a module rewritten in place with its size and time kept (``cp -p``, ``rsync -a
    --inplace``, a time put back) would run its earlier code, while the stages rerun for its new bytes (their code
    digest) and record them. Here the "time" Python compares is the first 32 bits of the source's SHA-256, the width
    a ``.pyc`` header holds: a ``.pyc`` written with it matches only those bytes, and one written by another loader
    (the source's real time) is compiled again."""

    def path_stats(self, path: str) -> dict:
        data = self.get_data(path)
        return {"mtime": int.from_bytes(hashlib.sha256(data).digest()[:4], "little"), "size": len(data)}


class _ContentCheckedFinder:
    """Finds a plain source module that lies outside the interpreter's own folders (its prefix: the standard library
    and site-packages), grueflow's modules and a project's plugins, as :class:`importlib.machinery.PathFinder` does,
    with :class:`_ContentCheckedLoader`; None for any other module, which the finders after it find as usual."""

    _INSTALLED = tuple(dict.fromkeys(os.path.join(os.path.realpath(prefix), "") for prefix in
                                     (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)))
    _installed: dict = {}  # {folder or file: whether it lies in _INSTALLED}

    @classmethod
    def installed(cls, path: str) -> bool:
        found = cls._installed.get(path)
        if found is None:
            found = cls._installed[path] = os.path.realpath(path).startswith(cls._INSTALLED)
        return found

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is None and name in sys.stdlib_module_names \
                or path is not None and all(cls.installed(str(entry)) for entry in path):
            return None  # the standard library, a submodule of an installed package (torch): not looked up twice
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader \
                or cls.installed(os.path.dirname(spec.origin)):
            return None
        spec.loader = _ContentCheckedLoader(spec.loader.name, spec.loader.path)
        return spec


if not any(getattr(finder, "__name__", "") == _ContentCheckedFinder.__name__ for finder in sys.meta_path):
    # before PathFinder, after the finders put in front of it (pytest's assertion rewriting of test modules)
    sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder)
                         if importlib.machinery.PathFinder in sys.meta_path else len(sys.meta_path),
                         _ContentCheckedFinder)
