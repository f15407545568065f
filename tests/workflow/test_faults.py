"""Faults at the workflow level: a Snakemake run killed mid-RL (issue 9).

The killed run leaves Snakemake's lock, which the next run refuses with Snakemake's own message;
nothing the killed job wrote counts as finished; after ``--unlock`` the same target resumes from
the stage's last checkpoint and ends exactly where an uninterrupted run of the stage ends.
"""

from __future__ import annotations

import csv
import subprocess

import pytest

from grueflow.rl.trainer import WALL_CLOCK_KEYS
from tests.conftest import copy_project, run
from tests.stages.test_stages import kill_at_first_checkpoint

pytestmark = pytest.mark.slow
TARGET = "results/sentiment/ppo/seed0"


def stable(path):
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in csv.DictReader(open(path))]


def test_a_killed_snakemake_run_is_refused_while_locked_then_resumes_the_same_target(tmp_path):
    repo = copy_project(tmp_path / "repo")
    method = repo / "params" / "methods" / "ppo.yaml"
    method.write_text(method.read_text().replace("iterations: 2", "iterations: 6"))
    proc = subprocess.Popen(["snakemake", "--cores", "1", TARGET], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    kill_at_first_checkpoint(proc, repo / f"{TARGET}.resume", timeout=600)
    assert not (repo / TARGET).exists(), "the killed rl_finetune must not leave an output that looks finished"
    assert any((repo / f"{TARGET}.resume").glob("iteration*/checkpoint.json"))

    locked = run(["snakemake", "--cores", "1", TARGET], repo, check=False)
    assert locked.returncode != 0 and "Directory cannot be locked" in locked.stdout + locked.stderr

    run(["snakemake", "--unlock"], repo)
    run(["snakemake", "--cores", "1", TARGET], repo)
    log = (repo / "results" / "logs" / "sentiment" / "ppo" / "seed0.log").read_text()
    assert "resumed from" in log
    assert not (repo / f"{TARGET}.resume").exists()

    straight = tmp_path / "straight"  # the same stage, uninterrupted, on the same inputs
    printed = run(["snakemake", "-n", "-p", "--forcerun", "rl_finetune", "--cores", "1", TARGET], repo).stdout
    command = next(line[line.index("python stages/rl_finetune.py"):] for line in printed.splitlines()
                   if "python stages/rl_finetune.py" in line)
    command = command.replace(f"--resume-dir {TARGET}.resume", f"--resume-dir {straight}.resume")
    command = command.replace(f"--out {TARGET}", f"--out {straight}").split(" 2>")[0]
    run(["bash", "-c", command], repo)
    assert stable(repo / TARGET / "curves.csv") == stable(straight / "curves.csv")
    assert (repo / TARGET / "model" / "model.safetensors").read_bytes() == \
        (straight / "model" / "model.safetensors").read_bytes()
