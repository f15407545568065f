"""A stage script ended by Ctrl-C, SIGTERM or SIGHUP (grueflow/interrupt.py and grueflow.stage.main_guard): one
sentence, exit 128 + the signal's number, the stage's clean-up done, and further signals ignored until it exits.

Each case runs a small stage script of its own (``stages/rl_finetune.py`` in a temporary folder, so it is taken for
a training stage) that writes into its output folder with :func:`grueflow.io.atomic_dir` beside a completed
checkpoint, and says through marker files where it is, so that a signal is sent at a known point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from grueflow import interrupt

ROOT = Path(__file__).resolve().parents[2]
KEPT = ("; completed checkpoints stay in the resume folder (<out>.resume, or --resume-dir), so rerunning the same "
        "command resumes from the newest\n")

# the stage: a checkpoint completed, an output folder half-written; it waits for the test at each marker
STAGE = f"""
import atexit, sys, time
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from grueflow import interrupt
interrupt.until_main()
from grueflow import stage
from grueflow.io import atomic_dir

out = Path(sys.argv[sys.argv.index("--out") + 1])
marks = out.parent / "marks"


def wait_for(name):
    for _ in range(1200):
        if (marks / name).exists():
            return
        time.sleep(0.05)


def at_exit():
    (marks / "exiting").touch()
    wait_for("exit")
    (marks / "exited").touch()


def main():
    (Path(f"{{out}}.resume") / "iteration1").mkdir(parents=True)
    atexit.register(at_exit)
    with atomic_dir(out) as tmp:
        (tmp / "half.txt").write_text("half")
        try:
            (marks / "training").touch()
            wait_for("never")
        finally:
            (marks / "cleaning").touch()
            wait_for("clean")
            (marks / "cleaned").touch()


stage.main_guard(main)
"""


def until(path: Path, process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait for the marker ``path``, or for ``process`` to end without it."""
    deadline = time.monotonic() + timeout
    while not path.exists() and process.poll() is None:
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.05)


@pytest.fixture
def stage_script(tmp_path: Path) -> Path:
    script = tmp_path / "stages" / "rl_finetune.py"
    script.parent.mkdir()
    script.write_text(STAGE)
    (tmp_path / "marks").mkdir()
    return script


def start(script: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), "--out", str(script.parents[1] / "seed0")],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("signum, code, by", [
    (signal.SIGINT, 130, ""),
    (signal.SIGTERM, 143, " by SIGTERM"),  # Slurm's time limit or preemption, kill, docker stop, Snakemake, DVC
    (signal.SIGHUP, 129, " by SIGHUP"),  # the terminal closed
], ids=["ctrl-c", "sigterm", "sighup"])
def test_a_signal_ends_a_training_stage_in_one_sentence_and_keeps_its_checkpoints(stage_script: Path, signum: int,
                                                                                  code: int, by: str):
    """A SIGTERM ended a stage with no word (killed, exit 143 from the shell, nothing from grueflow under DVC) where
    Ctrl-C said what was kept and how to go on; now each is named, and the clean-up is the same for each."""
    marks = stage_script.parents[1] / "marks"
    process = start(stage_script)
    until(marks / "training", process)
    process.send_signal(signum)
    until(marks / "cleaning", process)
    (marks / "clean").touch()
    until(marks / "exiting", process)
    (marks / "exit").touch()
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (code, f"interrupted{by}: the output folder was not written{KEPT}")
    assert sorted(p.name for p in stage_script.parents[1].iterdir()) == ["marks", "seed0.resume", "stages"]
    assert [p.name for p in (stage_script.parents[1] / "seed0.resume").iterdir()] == ["iteration1"]


@pytest.mark.parametrize("again", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c-twice", "then-sigterm"])
def test_signals_after_the_first_cut_neither_the_clean_up_nor_the_exit_short(stage_script: Path, again: int):
    """A second Ctrl-C while the stage cleaned up stopped the clean-up, and one while the interpreter ran its atexit
    callbacks (torch's dump_compile_times) printed their traceback under the sentence; now both are ignored, as is
    a SIGTERM after the Ctrl-C."""
    marks = stage_script.parents[1] / "marks"
    process = start(stage_script)
    until(marks / "training", process)
    process.send_signal(signal.SIGINT)
    until(marks / "cleaning", process)
    process.send_signal(again)
    (marks / "clean").touch()
    until(marks / "exiting", process)
    process.send_signal(again)
    (marks / "exit").touch()
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (130, f"interrupted: the output folder was not written{KEPT}")
    assert {"cleaned", "exited"} <= {p.name for p in marks.iterdir()}
    assert sorted(p.name for p in stage_script.parents[1].iterdir()) == ["marks", "seed0.resume", "stages"]


# a sitecustomize that sends the process SIGTERM as it first imports a third-party package (a stage imports torch
# and transformers for seconds before main_guard is in place)
TERM_ON_IMPORT = """
import importlib.abc, os, signal, sys, time

class Term(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {"torch", "transformers", "numpy", "yaml", "safetensors", "tqdm"}:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        return None

sys.meta_path.insert(0, Term())
"""


def test_sigterm_while_a_stage_imports_is_one_sentence_and_exit_143(tmp_path: Path):
    (tmp_path / "sitecustomize.py").write_text(TERM_ON_IMPORT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, str(ROOT / "stages" / "dpo.py"), "--help"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert (result.returncode, result.stderr) == (143, f"interrupted by SIGTERM: the output folder was not "
                                                       f"written{KEPT}")


@pytest.fixture
def handlers() -> Iterator[None]:
    """This process's handlers of the three signals, put back after the test."""
    saved = {signum: signal.getsignal(signum) for signum in interrupt.SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_signal_the_parent_ignores_stays_ignored(monkeypatch, handlers):
    """nohup ignores SIGHUP, a shell ignores SIGINT in its background jobs: a stage keeps ignoring them."""
    monkeypatch.setattr(sys, "argv", [str(ROOT / "stages" / "dpo.py"), "--out", "x"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    interrupt.until_main()
    interrupt.release()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
