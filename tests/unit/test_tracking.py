"""RunTracker: curve rows through DVCLive (deterministic summary) and TensorBoard; the PNG charts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from grueflow import plots
from grueflow.config import ConfigError
from grueflow.tracking import RunTracker, metric_name, tensorboard_dir

ROWS = [{"iteration": 1, "reward/task": 0.5, "reward/task/sentiment": 0.25, "losses/value": math.nan,
         "charts/iteration_s": 1.25},
        {"iteration": 2, "reward/task": 0.75, "reward/task/sentiment": 0.5, "losses/value": 0.125,
         "charts/iteration_s": 0.5}]


def test_metric_names_keep_a_value_and_its_components_apart():
    assert metric_name("reward/task") == "reward/task"
    assert metric_name("reward/task/sentiment") == "reward/task.sentiment"
    assert metric_name("train_loss") == "train_loss"


def test_rows_go_to_dvclive_and_tensorboard_and_wall_clock_only_to_tensorboard(tmp_path):
    with RunTracker(tmp_path / "dvclive", "iteration", ("charts/iteration_s",), tmp_path / "tb") as tracker:
        tracker.replay(ROWS)
    summary = (tmp_path / "dvclive" / "metrics.json").read_text()
    assert json.loads(summary) == {"reward": {"task": 0.75, "task.sentiment": 0.5}, "losses": {"value": 0.125},
                                   "step": 2}
    metrics = tmp_path / "dvclive" / "plots" / "metrics"
    assert (metrics / "reward" / "task.tsv").read_text() == "step\ttask\n1\t0.5\n2\t0.75\n"
    assert (metrics / "losses" / "value.tsv").read_text() == "step\tvalue\n2\t0.125\n"  # NaN skipped
    assert not (metrics / "charts").exists()  # wall clock: TensorBoard only, never a file DVC hashes
    assert not (tmp_path / "dvclive" / "dvc.yaml").exists()  # the pipeline's dvc.yaml declares the files

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/task")] == [(1, 0.5), (2, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("charts/iteration_s")] == [(1, 1.25), (2, 0.5)]

    with RunTracker(tmp_path / "again", "iteration", ("charts/iteration_s",)) as tracker:
        tracker.replay(ROWS)
    assert (tmp_path / "again" / "metrics.json").read_text() == summary  # byte-identical


def test_tensorboard_folder_from_the_flag_or_the_environment(monkeypatch):
    out = Path("results/sentiment/ppo/seed0")
    monkeypatch.delenv("GRUEFLOW_TENSORBOARD", raising=False)
    assert tensorboard_dir(out, None) is None
    assert tensorboard_dir(out, Path("tb")) == Path("tb")
    monkeypatch.setenv("GRUEFLOW_TENSORBOARD", "runs")
    assert tensorboard_dir(out, None) == Path("runs/sentiment/ppo/seed0")


def test_a_tensorboard_folder_never_overlaps_what_the_stage_replaces(monkeypatch, tmp_path):
    """An --out of fewer than three names (/tmp/x) made $GRUEFLOW_TENSORBOARD/<the absolute path> the output folder
    itself, and the final write replaced it with the event files in it."""
    monkeypatch.setenv("GRUEFLOW_TENSORBOARD", str(tmp_path / "tb"))
    assert tensorboard_dir(Path("/x"), None) == tmp_path / "tb" / "x"
    assert tensorboard_dir(Path("/tmp/x"), None) == tmp_path / "tb" / "tmp" / "x"
    out, resume = tmp_path / "out", tmp_path / "out.resume"
    for flag, named in ((out / "tb", "--out"), (tmp_path, "--out"), (resume / "tb", "the resume folder")):
        with pytest.raises(ConfigError, match=rf"the TensorBoard folder {flag} \(--tensorboard {flag}\) overlaps "
                                              rf"{named} .*; give a TensorBoard folder apart from both"):
            tensorboard_dir(out, flag, resume)
    monkeypatch.setenv("GRUEFLOW_TENSORBOARD", str(out.parents[2]))  # root/<the last three names> is --out itself
    with pytest.raises(ConfigError, match=r"\(\$GRUEFLOW_TENSORBOARD/.*/out\) overlaps --out"):
        tensorboard_dir(out, None, resume)


def test_grue_chart_is_a_png_with_one_panel_per_task_and_metric(tmp_path):
    table = pd.DataFrame([
        {"task": "sentiment", "method": "zero_shot", "reward": 0.1, "reward_std": 0.02, "lexical/bleu": 1.0},
        {"task": "sentiment", "method": "ppo", "reward": 0.4, "reward_std": 0.05, "lexical/bleu": math.nan},
        {"task": "concepts", "method": "ppo", "reward": 0.3, "reward_std": math.nan, "lexical/bleu": 2.0}])
    plots.grue_chart(table, {"sentiment": ["lexical/bleu"], "concepts": []}, tmp_path / "chart.png")
    with Image.open(tmp_path / "chart.png") as image:
        assert image.format == "PNG" and image.size == (1350, 320)  # 3 panels of 4.5 x 3.2 inches at 100 dpi
    first = (tmp_path / "chart.png").read_bytes()
    plots.grue_chart(table, {"sentiment": ["lexical/bleu"], "concepts": []}, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes() == first  # no timestamp in the file
    # its Title tells an earlier run's chart (which aggregate may replace) from any other picture (which it may not)
    plots.learning_curves([{"iteration": 1, "reward/task": 0.5}], "iteration", ["reward/task"], tmp_path / "other.png",
                          "curves")
    assert plots.is_grue_chart(tmp_path / "chart.png") and not plots.is_grue_chart(tmp_path / "other.png")
    from grueflow.grue import lower_keys

    lower = lower_keys([])
    assert plots.panel_title("cnn", "lexical/ter", lower) == "cnn: lexical/ter (lower is better)"
    assert plots.panel_title("cnn", "lexical/bleu", lower) == "cnn: lexical/bleu"


def test_a_git_repository_without_a_commit_is_tracked_as_a_folder_without_git(tmp_path, monkeypatch):
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    with RunTracker(tmp_path / "live", "iteration") as tracker:
        tracker.log({"iteration": 1, "reward/task": 0.5})
        tracker.log({"iteration": 2, "reward/task": 0.75})
    assert json.loads((tmp_path / "live" / "metrics.json").read_text())["reward"]["task"] == 0.75
    rows = pd.read_csv(tmp_path / "live" / "plots" / "metrics" / "reward" / "task.tsv", sep="\t")
    assert rows["task"].tolist() == [0.5, 0.75]
