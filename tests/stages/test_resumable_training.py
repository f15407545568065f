"""DPO and the reward model through the resumable-training skeleton: a killed stage resumes from its last
checkpoint and ends with the bytes an uninterrupted run writes (warm start and RL: tests/stages/test_stages.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import MICRO, ROOT, run
from tests.stages.test_stages import TASK, complete_checkpoints, kill_at_first_checkpoint, stage


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Datapool, base model and metric preferences (14 pairs) of the micro sentiment task."""
    out = tmp_path_factory.mktemp("preference_inputs")
    run(stage("prepare_datapool", "--task-file", TASK, "--out", out / "datapool"), ROOT)
    run(stage("base_model", "--task-file", TASK, "--datapool", out / "datapool", "--out", out / "base_model"), ROOT)
    run(stage("build_preferences", "--task-file", TASK, "--method-file", MICRO / "methods" / "preferences.yaml",
              "--datapool", out / "datapool", "--policy", out / "base_model" / "model",
              "--base-model", out / "base_model" / "model", "--out", out / "preferences"), ROOT)
    return out


def dpo(inputs: Path, method: Path, out: Path, *extra: str | Path) -> list[str]:
    return stage("dpo", "--task-file", TASK, "--method-file", method,
                 "--preferences", inputs / "preferences" / "preferences.jsonl",
                 "--init-model", inputs / "base_model" / "model", "--seed", "0", "--out", out, *extra)


def reward_model(inputs: Path, method: Path, out: Path, *extra: str | Path) -> list[str]:
    return stage("train_reward_model", "--method-file", method,
                 "--preferences", inputs / "preferences" / "preferences.jsonl",
                 "--backbone", inputs / "base_model" / "model", "--out", out, *extra)


def kill_and_resume(command: list[str], resume_dir: Path, out: Path) -> str:
    """Run ``command``, SIGKILL it once ``resume_dir`` holds a checkpoint, run it again; the second run's log."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    kill_at_first_checkpoint(proc, resume_dir)
    assert proc.returncode != 0 and not (out / "stage.json").exists(), "the killed stage must not look finished"
    assert complete_checkpoints(resume_dir)
    return run(command[:-2] + ["--log-level", "INFO"], ROOT).stderr


def assert_same_files(out: Path, straight: Path, names: tuple[str, ...]) -> None:
    for name in names:
        assert (out / name).read_bytes() == (straight / name).read_bytes(), name


def test_a_killed_dpo_run_resumes_mid_epoch_and_matches_an_uninterrupted_one(inputs, tmp_path):
    method = tmp_path / "dpo.yaml"  # 14 pairs in batches of 2: 7 steps an epoch, 21 in all
    method.write_text("loss_type: sigmoid\nbeta: 0.1\nlearning_rate: 0.001\nepochs: 3\nbatch_size: 2\n")
    run(dpo(inputs, method, tmp_path / "straight"), ROOT)  # checkpoints after each epoch only (the default)

    out = tmp_path / "killed"  # a checkpoint every step, into the default resume folder <out>.resume
    log = kill_and_resume(dpo(inputs, method, out, "--checkpoint-every", "1"), Path(f"{out}.resume"), out)
    assert re.search(r"resumed from \S+/step(\d+) at step \1 \(\1 curve rows done\)", log), log  # a row a step
    assert_same_files(out, tmp_path / "straight", ("model/model.safetensors", "curves.csv", "train_metrics.json"))
    pairs = len((inputs / "preferences" / "preferences.jsonl").read_text().splitlines())
    assert len((out / "curves.csv").read_text().splitlines()) == 1 + 3 * -(-pairs // 2)  # header + every step
    assert not Path(f"{out}.resume").exists()  # removed once the stage finished


def test_a_killed_reward_model_resumes_from_its_last_epoch_and_matches_an_uninterrupted_one(inputs, tmp_path):
    method = tmp_path / "reward_model.yaml"  # the training pairs in batches of 2, with dropout
    method.write_text("epochs: 4\nbatch_size: 2\nmax_length: 32\nlearning_rate: 0.001\n")
    run(reward_model(inputs, method, tmp_path / "straight"), ROOT)

    out, resume_dir = tmp_path / "killed", tmp_path / "elsewhere.resume"  # --resume-dir given
    log = kill_and_resume(reward_model(inputs, method, out, "--resume-dir", resume_dir), resume_dir, out)
    assert "resumed from" in log and "at epoch" in log
    assert_same_files(out, tmp_path / "straight", ("model/model.safetensors", "curves.csv", "metrics.json"))
    assert [line.split(",")[0] for line in (out / "curves.csv").read_text().splitlines()] == \
        ["epoch", "1", "2", "3", "4"]
    assert not resume_dir.exists()
