"""Ctrl-C in a stage script, from its first line to its last, ends in one sentence and exit code 130.

A stage imports torch and transformers (seconds) before :func:`grueflow.stage.main_guard` is in place, and a
Ctrl-C there was a KeyboardInterrupt traceback from inside them. A stage script calls :func:`until_main` first:
until main_guard starts, SIGINT prints :func:`sentence` and exits 130 (nothing is written yet); main_guard then
gives SIGINT back to Python's handler, so the stage's own clean-up runs on the KeyboardInterrupt and main_guard
prints the same sentence. Only the standard library is imported here, so importing this first costs nothing.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Optional

# the stages that keep checkpoints in a resume folder while they train (grueflow.training.TrainingRun)
CHECKPOINTING_STAGES = ("warm_start", "rl_finetune", "dpo", "train_reward_model", "train_classifier")


def running_stage() -> Optional[str]:
    """The name of the stage this process runs: its script's (``stages/<stage>.py``), the name its
    :func:`grueflow.stage.finish` records in ``stage.json``; None when the process runs no stage script (a stage's
    ``main`` called in-process)."""
    script = Path(sys.argv[0])
    return script.stem if script.parent.name == "stages" and script.suffix == ".py" else None


def sentence() -> str:
    """The one line a Ctrl-C in a stage ends with: what is kept and how to go on."""
    kept = ("; completed checkpoints stay in the resume folder (<out>.resume, or --resume-dir), so rerunning the "
            "same command resumes from the newest" if running_stage() in CHECKPOINTING_STAGES else
            ": rerun the same command")
    return f"interrupted: the output folder was not written{kept}"


def _before_main(signum: int, frame: Optional[FrameType]) -> None:
    print(sentence(), file=sys.stderr)
    raise SystemExit(130)


def until_main() -> None:
    """End a Ctrl-C in one line, exit 130, until :func:`release`, in a process that runs a stage script. A stage
    module imported into another program (a test) leaves its handler alone, and a SIGINT the parent set to be
    ignored (a background job) stays ignored: only Python's own handler is replaced."""
    if running_stage() is not None and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _before_main)


def release() -> None:
    """Give SIGINT back to Python's handler (a KeyboardInterrupt where the stage runs), where :func:`until_main`
    took it."""
    if signal.getsignal(signal.SIGINT) is _before_main:
        signal.signal(signal.SIGINT, signal.default_int_handler)
