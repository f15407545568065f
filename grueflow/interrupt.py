"""Ctrl-C, SIGTERM or SIGHUP in a stage script, from its first line to its last, ends in one sentence and exit code
128 + the signal's number (130, 143, 129).

SIGINT is Ctrl-C; SIGTERM is what a scheduler sends at a time limit or a preemption (Slurm), ``kill`` and a
container stop send, and what Snakemake and DVC send to stop a job; SIGHUP is a closed terminal. Each ends a stage
alike: the output folder is not written, completed checkpoints stay in the resume folder.

A stage imports torch and transformers (seconds) before :func:`grueflow.stage.main_guard` is in place, and a
Ctrl-C there was a KeyboardInterrupt traceback from inside them. A stage script calls :func:`until_main` first:
until main_guard starts, one of these signals prints :func:`sentence` and exits (nothing is written yet);
main_guard then calls :func:`release`, after which the signal raises :class:`Interrupted` (a KeyboardInterrupt)
where the stage runs, so the stage's own clean-up runs as for a Ctrl-C, and main_guard prints the same sentence.
From the first such signal on, these signals are ignored: a second Ctrl-C (an impatient user) or a second SIGTERM
can cut neither the clean-up nor the interpreter's exit (atexit callbacks) short. SIGKILL still ends the process.
Only the standard library is imported here, so importing this first costs nothing.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Optional

# the stages that keep checkpoints in a resume folder while they train (grueflow.training.TrainingRun)
CHECKPOINTING_STAGES = ("warm_start", "rl_finetune", "dpo", "train_reward_model", "train_classifier")
# the signals that end a stage in one sentence, and the handler Python starts with for each (a signal set to
# anything else, e.g. ignored by nohup or by the shell that started a background job, is left as it is)
SIGNALS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}


class Interrupted(KeyboardInterrupt):
    """The signal ``signum`` (one of :data:`SIGNALS`) arrived while a stage ran: a KeyboardInterrupt, so that the
    stage's clean-up runs for a SIGTERM exactly as for a Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def running_stage() -> Optional[str]:
    """The name of the stage this process runs: its script's (``stages/<stage>.py``), the name its
    :func:`grueflow.stage.finish` records in ``stage.json``; None when the process runs no stage script (a stage's
    ``main`` called in-process)."""
    script = Path(sys.argv[0])
    return script.stem if script.parent.name == "stages" and script.suffix == ".py" else None


def sentence(signum: int = signal.SIGINT) -> str:
    """The one line a stage ended by the signal ``signum`` ends with: what is kept and how to go on. A Ctrl-C
    (SIGINT) is not named; any other signal is (``interrupted by SIGTERM: ...``)."""
    kept = ("; completed checkpoints stay in the resume folder (<out>.resume, or --resume-dir), so rerunning the "
            "same command resumes from the newest" if running_stage() in CHECKPOINTING_STAGES else
            ": rerun the same command")
    by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
    return f"interrupted{by}: the output folder was not written{kept}"


def exit_code(signum: int) -> int:
    """The exit code of a stage ended by ``signum``: 128 + its number, as a shell reports a process the signal
    killed (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + signum


def say(line: str) -> None:
    """Print ``line`` to stderr; a stderr that cannot be written (the terminal a SIGHUP closed) loses it."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # EIO or EPIPE on a closed terminal or pipe; ValueError: stderr closed
        pass


def _ignore_further() -> None:
    """Ignore every signal of :data:`SIGNALS` this module handles, for the rest of the process."""
    for signum in SIGNALS:
        if signal.getsignal(signum) in (_before_main, _while_running):
            signal.signal(signum, signal.SIG_IGN)


def _before_main(signum: int, frame: Optional[FrameType]) -> None:
    _ignore_further()
    say(sentence(signum))
    raise SystemExit(exit_code(signum))


def _while_running(signum: int, frame: Optional[FrameType]) -> None:
    _ignore_further()
    raise Interrupted(signum)


def until_main() -> None:
    """End SIGINT, SIGTERM and SIGHUP in one line and exit 128 + the signal's number, until :func:`release`, in a
    process that runs a stage script. A stage module imported into another program (a test) leaves its handlers
    alone, and a signal the parent set to be ignored (a background job's SIGINT, nohup's SIGHUP) stays ignored: only
    Python's own handlers are replaced."""
    if running_stage() is None:
        return
    for signum, default in SIGNALS.items():
        if signal.getsignal(signum) is default:
            signal.signal(signum, _before_main)


def release() -> None:
    """From here on, each signal :func:`until_main` took raises :class:`Interrupted` where the stage runs (its
    clean-up then runs, as for a KeyboardInterrupt), and every later one of them is ignored."""
    for signum in SIGNALS:
        if signal.getsignal(signum) is _before_main:
            signal.signal(signum, _while_running)


def restore() -> None:
    """Give back to Python's own handler each signal :func:`release` took and none of which has arrived (the stage
    ran to its end, or ended on an error): a stage run in-process by another program (a test) leaves its handlers as
    they were. After such a signal they stay ignored, so the stage's exit cannot be cut short."""
    for signum, default in SIGNALS.items():
        if signal.getsignal(signum) is _while_running:
            signal.signal(signum, default)
