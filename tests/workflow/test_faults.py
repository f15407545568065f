"""Faults at the workflow level: Snakemake runs killed mid-warm-start and mid-RL (issue 9).

The killed run leaves Snakemake's lock, which the next run refuses with Snakemake's own message;
nothing the killed job wrote counts as finished; after ``--unlock`` the same target resumes from
the stage's last checkpoint and ends exactly where an uninterrupted run of the stage ends.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from grueflow.rl.trainer import WALL_CLOCK_KEYS
from tests.conftest import copy_project, run
from tests.stages.test_stages import complete_checkpoints, kill_at_first_checkpoint

pytestmark = pytest.mark.slow
WARM = "results/sentiment/supervised/seed0"
RL = "results/sentiment/ppo/seed0"


def stable(path):
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in csv.DictReader(open(path))]


def kill_snakemake_at_first_checkpoint(repo, target):
    proc = subprocess.Popen(["snakemake", "--cores", "1", target], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    kill_at_first_checkpoint(proc, repo / f"{target}.resume", timeout=600)
    assert not (repo / target).exists(), f"the killed job must not leave {target} looking finished"
    assert complete_checkpoints(repo / f"{target}.resume")


def straight_run(repo, target, out):
    """The target's stage command as Snakemake would run it, writing to ``out`` instead."""
    printed = run(["snakemake", "-n", "-p", "--forcerun", "warm_start", "rl_finetune", "--cores", "1", target], repo).stdout
    stage = "warm_start" if "supervised" in target else "rl_finetune"
    command = next(line[line.index(f"python stages/{stage}.py"):] for line in printed.splitlines()
                   if f"python stages/{stage}.py" in line)
    command = command.replace(f"--resume-dir {target}.resume", f"--resume-dir {out}.resume")
    run(["bash", "-c", command.replace(f"--out {target}", f"--out {out}").split(" 2>")[0]], repo)


def test_killed_snakemake_runs_are_refused_while_locked_then_resume_the_same_targets(tmp_path):
    repo = copy_project(tmp_path / "repo")
    for name, old, new in (("ppo", "iterations: 2", "iterations: 6"), ("supervised", "epochs: 1", "epochs: 4")):
        method = repo / "params" / "methods" / f"{name}.yaml"
        method.write_text(method.read_text().replace(old, new))
    for target, log in ((WARM, "supervised/seed0.log"), (RL, "ppo/seed0.log")):
        kill_snakemake_at_first_checkpoint(repo, target)
        locked = run(["snakemake", "--cores", "1", target], repo, check=False)
        assert locked.returncode != 0 and "Directory cannot be locked" in locked.stdout + locked.stderr
        run(["snakemake", "--unlock"], repo)
        run(["snakemake", "--cores", "1", target], repo)
        assert "resumed from" in (repo / "results" / "logs" / "sentiment" / log).read_text()
        assert not (repo / f"{target}.resume").exists()

    straight_run(repo, WARM, tmp_path / "warm")
    assert (repo / WARM / "loss_curve.csv").read_text() == (tmp_path / "warm" / "loss_curve.csv").read_text()
    straight_run(repo, RL, tmp_path / "rl")
    assert stable(repo / RL / "curves.csv") == stable(tmp_path / "rl" / "curves.csv")
    for target, out in ((WARM, "warm"), (RL, "rl")):
        assert (repo / target / "model" / "model.safetensors").read_bytes() == \
            (tmp_path / out / "model" / "model.safetensors").read_bytes()


# snakemake, with the copy of one file interrupted as a Ctrl-C would interrupt it, halfway through
INTERRUPTED_COPY = """
import shutil, sys
from pathlib import Path
from snakemake.cli import main
copy = shutil.copy2
def interrupted(source, target, **kwargs):
    if Path(source).name != "my_samples.bin":
        return copy(source, target, **kwargs)
    Path(target).write_bytes(b"part")
    raise KeyboardInterrupt
shutil.copy2 = interrupted
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


def test_ctrl_c_while_the_dry_run_keeps_a_copy_of_a_users_file_is_one_line(tmp_path):
    """Ctrl-C while the Snakefile's checks copied a user's big file out of a stage folder, before any job, ended in a
    40-line traceback through grueflow/stale.py and keep.py: one line now, naming the file, exit 130, no partial
    copy left and the file where it was."""
    repo = copy_project(tmp_path / "copy")
    folder = repo / "results" / "sentiment" / "datapool"  # no record: a rebuild would delete what it holds
    folder.mkdir(parents=True)
    (folder / "my_samples.bin").write_bytes(b"mine" * 1000)
    (tmp_path / "snakemake_interrupted.py").write_text(INTERRUPTED_COPY)
    result = run([sys.executable, str(tmp_path / "snakemake_interrupted.py"), "-n", "--cores", "1"], repo, check=False)
    assert result.returncode == 130, result.stderr[-3000:]
    assert (result.stdout + result.stderr).strip() == (
        "interrupted while keeping a copy of results/sentiment/datapool/my_samples.bin: nothing was deleted; rerun "
        "the same command"), result.stderr[-3000:]
    assert [p for p in (repo / ".grueflow").rglob("*") if p.is_file()] == []
    assert (folder / "my_samples.bin").read_bytes() == b"mine" * 1000
