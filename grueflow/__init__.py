"""grueflow: RL fine-tuning of language models as a reproducible pipeline of cached stages."""

__version__ = "0.1.0"

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
