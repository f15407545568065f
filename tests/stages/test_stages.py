"""Each stage CLI on the micro suite: outputs, stage records and kill-and-resume (determinism: tests/workflow)."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from grueflow.rl.trainer import WALL_CLOCK_KEYS
from tests.conftest import MICRO, ROOT, run

PY = sys.executable
TASK = MICRO / "tasks" / "sentiment.yaml"


def stage(name: str, *args: str | Path) -> list[str]:
    return [PY, str(ROOT / "stages" / f"{name}.py"), *map(str, args), "--log-level", "WARNING"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Datapool + base model + warm start of the micro sentiment task."""
    out = tmp_path_factory.mktemp("stages")
    run(stage("prepare_datapool", "--task-file", TASK, "--out", out / "datapool"), ROOT)
    run(stage("base_model", "--task-file", TASK, "--datapool", out / "datapool", "--out", out / "base_model"), ROOT)
    run(warm_start(out, out / "supervised"), ROOT)
    return out


def warm_start(base: Path, out: Path, method_file: Path = MICRO / "methods" / "supervised.yaml") -> list[str]:
    return stage("warm_start", "--task-file", TASK, "--method-file", method_file, "--datapool", base / "datapool",
                 "--base-model", base / "base_model" / "model", "--seed", "0",
                 "--resume-dir", f"{out}.resume", "--out", out)


def rl(base: Path, out: Path, method_file: Path = MICRO / "methods" / "ppo.yaml") -> list[str]:
    return stage("rl_finetune", "--task-file", TASK, "--algorithm", "ppo", "--method-file", method_file,
                 "--datapool", base / "datapool", "--init-model", base / "base_model" / "model",
                 "--base-model", base / "base_model" / "model", "--seed", "0",
                 "--resume-dir", f"{out}.resume", "--out", out)


def evaluate(base: Path, model: Path, out: Path) -> list[str]:
    return stage("evaluate", "--task-file", TASK, "--task", "sentiment", "--start", "zero_shot", "--algorithm", "ppo",
                 "--datapool", base / "datapool", "--model", model, "--base-model", base / "base_model" / "model",
                 "--seed", "0", "--out", out)


def test_datapool_base_model_and_warm_start_outputs(base):
    stats = json.loads((base / "datapool" / "stage.json").read_text())["stats"]
    assert stats["train"]["samples"] == 64 and stats["test"]["samples"] == 8
    for folder in ("base_model", "supervised"):
        assert (base / folder / "model" / "model.safetensors").is_file()
        assert (base / folder / "model" / "tokenizer.json").is_file()
        record = json.loads((base / folder / "stage.json").read_text())
        assert record["versions"]["torch"].startswith("2.13.0")
        files = [p for p in (base / folder).rglob("*") if p.is_file() and p.name not in ("stage.json", "provenance.json")]
        assert record["output_bytes"] == sum(p.stat().st_size for p in files) > 10_000
        assert set(record["files"]) == {str(p.relative_to(base / folder)) for p in files}  # the manifest
    losses = list(csv.DictReader(open(base / "supervised" / "loss_curve.csv")))
    assert [row["epoch"] for row in losses] == ["1"]
    live = base / "supervised" / "dvclive"  # DVCLive: one tsv per scalar, metrics.json with the last values
    summary = json.loads((live / "metrics.json").read_text())
    assert summary == {"step": 1, "train_loss": float(losses[0]["train_loss"]), "val_loss": float(losses[0]["val_loss"]),
                       "learning_rate": float(losses[0]["learning_rate"])}
    assert (live / "plots" / "metrics" / "val_loss.tsv").read_text() == f"step\tval_loss\n1\t{losses[0]['val_loss']}\n"
    assert_png(base / "supervised" / "loss_curve.png")
    assert not Path(f"{base / 'supervised'}.resume").exists()  # removed once the stage finished


def test_the_base_model_adapts_on_the_unlabelled_text_and_reports_its_held_out_loss(base, tmp_path):
    import yaml

    task = yaml.safe_load(TASK.read_text())
    task["model"]["adapt"] = {"steps": 15, "batch_size": 16, "learning_rate": 0.003, "max_length": 40, "heldout": 40}
    task_file = tmp_path / "sentiment.yaml"
    task_file.write_text(yaml.safe_dump(task))
    run(stage("base_model", "--task-file", task_file, "--datapool", base / "datapool", "--out", tmp_path / "adapted"), ROOT)
    record = json.loads((tmp_path / "adapted" / "stage.json").read_text())
    held = record["adapt_heldout_loss"]
    assert held["texts"] == 40 and held["after"] < held["before"]  # continued pre-training lowered held-out loss
    curve = list(csv.DictReader(open(tmp_path / "adapted" / "adapt_curve.csv")))
    assert [row["step"] for row in curve] == ["0", "10", "14"]
    plain = json.loads((base / "base_model" / "stage.json").read_text())
    assert "adapt_heldout_loss" not in plain and not (base / "base_model" / "adapt_curve.csv").exists()
    task["model"]["adapt"]["heldout"] = 300  # all of the datapool's unlabelled lines: nothing left to train on
    task_file.write_text(yaml.safe_dump(task))
    refused = run(stage("base_model", "--task-file", task_file, "--datapool", base / "datapool", "--out",
                        tmp_path / "refused"), ROOT, check=False)
    assert refused.returncode == 2 and "lower heldout or set steps: 0" in refused.stderr
    assert not (tmp_path / "refused").exists()


def rl_and_evaluate(base: Path, out: Path, fast: str) -> None:
    """The micro PPO run from the base model and its evaluation, into ``out/rl`` and ``out/eval``, with
    ``$GRUEFLOW_FAST`` set to ``fast``."""
    env = {**os.environ, "GRUEFLOW_FAST": fast}
    for command in (rl(base, out / "rl"), evaluate(base, out / "rl" / "model", out / "eval")):
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def fast_run(base, tmp_path_factory) -> Path:
    """rl_and_evaluate with the fast paths on (the default): checked by one test, compared by another."""
    out = tmp_path_factory.mktemp("fast1")
    rl_and_evaluate(base, out, "1")
    return out


def test_rl_and_evaluate_outputs(fast_run):
    metrics = json.loads((fast_run / "eval" / "metrics.json").read_text())
    assert metrics["method"] == "ppo" and metrics["task"] == "sentiment"
    assert {"reward", "task/sentiment", "lexical/rougeL", "lexical/bleu", "diversity/distinct_2",
            "fluency/perplexity"} <= set(metrics["metrics"])
    final = json.loads((fast_run / "rl" / "train_metrics.json").read_text())
    assert metrics["metrics"]["train/kl"] == final["kl/sequence"]  # the run's last-iteration KL, beside the test's
    assert len((fast_run / "eval" / "predictions.jsonl").read_text().splitlines()) == 8
    curve = list(csv.DictReader(open(fast_run / "rl" / "curves.csv")))
    assert [row["iteration"] for row in curve] == ["1", "2"]
    assert {"reward/task", "reward/task/sentiment", "kl/sequence", "kl/coef", "losses/value", "losses/entropy",
            "losses/explained_variance", "losses/approx_kl", "losses/clip_fraction",
            "charts/mean_length"} <= set(curve[0])
    assert not set(WALL_CLOCK_KEYS) & set(curve[0])  # curves.csv is a plot DVC hashes: no wall time in it
    timings = list(csv.DictReader(open(fast_run / "rl" / "timings.csv")))
    assert [row["iteration"] for row in timings] == ["1", "2"] and set(timings[0]) == {"iteration", *WALL_CLOCK_KEYS}
    for row, timed in zip(curve, timings):  # the micro sentiment reward: lexicon sentiment x 1.0 + length x -0.05
        sentiment, length = float(row["reward/task/sentiment"]), float(row["reward/diversity/length"])
        assert float(row["reward_weighted/task/sentiment"]) == pytest.approx(sentiment, abs=1e-5)
        assert float(row["reward_weighted/diversity/length"]) == pytest.approx(-0.05 * length, abs=1e-5)
        assert float(row["reward/task"]) == pytest.approx(sentiment - 0.05 * length, abs=1e-5)
        assert 0 < float(timed["charts/reward_share"]) < 1
    assert not Path(f"{fast_run / 'rl'}.resume").exists()  # removed once the stage finished

    live = fast_run / "rl" / "dvclive"  # every curve column through DVCLive; wall-clock ones never
    summary = json.loads((live / "metrics.json").read_text())
    assert summary["step"] == 2 and summary["kl"]["coef"] == float(curve[-1]["kl/coef"])
    assert summary["reward"] == {"task": float(curve[-1]["reward/task"]),
                                 "task.sentiment": float(curve[-1]["reward/task/sentiment"]),
                                 "diversity.length": float(curve[-1]["reward/diversity/length"])}
    assert {"policy", "value", "entropy", "approx_kl"} <= set(summary["losses"])
    assert set(summary["charts"]) == {"mean_length", "learning_rate", "update_skipped"}
    metrics_dir = live / "plots" / "metrics"
    tsv = (metrics_dir / "kl" / "sequence.tsv").read_text().splitlines()
    assert tsv == ["step\tsequence"] + [f"{row['iteration']}\t{row['kl/sequence']}" for row in curve]
    assert not (metrics_dir / "charts" / "generated_tokens_per_s.tsv").exists()
    assert (metrics_dir / "reward" / "task.sentiment.tsv").is_file()
    assert_png(fast_run / "rl" / "curves.png")


def test_a_methods_own_generation_and_reward_reach_its_training_and_evaluation(base, tmp_path):
    """method_overrides.ppo's rollout_generation and reward train PPO; its eval_generation evaluates it; the
    evaluation's reward column stays the task's (both components), and the zero-shot evaluation reads no
    override."""
    data = yaml.safe_load(TASK.read_text())
    data["method_overrides"] = {"ppo": {
        "rollout_generation": {"max_new_tokens": 5},
        "eval_generation": {"max_new_tokens": 3, "do_sample": False, "top_k": 0},
        "reward": {"components": [{"metric": "lexicon_sentiment", "weight": 1.0}]}}}
    task = tmp_path / "sentiment.yaml"
    task.write_text(yaml.safe_dump(data, sort_keys=False))
    command = [str(task) if str(a) == str(TASK) else a for a in rl(base, tmp_path / "rl")]
    run(command, ROOT)
    record = json.loads((tmp_path / "rl" / "stage.json").read_text())["params"]
    assert record["rollout_generation"]["max_new_tokens"] == 5
    assert [c["metric"] for c in record["reward"]["components"]] == ["lexicon_sentiment"]
    curve = list(csv.DictReader(open(tmp_path / "rl" / "curves.csv")))
    assert "reward/task/sentiment" in curve[0] and "reward/diversity/length" not in curve[0]
    assert all(float(row["charts/mean_length"]) <= 5 for row in curve)
    run([str(task) if str(a) == str(TASK) else a for a in evaluate(base, tmp_path / "rl" / "model", tmp_path / "eval")],
        ROOT)
    evaluated = json.loads((tmp_path / "eval" / "stage.json").read_text())["params"]
    assert evaluated["eval_generation"]["max_new_tokens"] == 3 and evaluated["eval_generation"]["do_sample"] is False
    assert [c["metric"] for c in evaluated["reward"]["components"]] == ["lexicon_sentiment", "diversity"]
    base_model = base / "base_model" / "model"
    run(stage("evaluate", "--task-file", task, "--task", "sentiment", "--start", "zero_shot", "--datapool",
              base / "datapool", "--model", base_model, "--base-model", base_model, "--seed", "0",
              "--out", tmp_path / "zero"), ROOT)
    zero = json.loads((tmp_path / "zero" / "stage.json").read_text())["params"]
    assert zero["eval_generation"]["max_new_tokens"] == 8


def assert_png(path: Path) -> None:
    """A complete PNG image of a plausible size (a grid of panels)."""
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= 400 and image.height >= 250, image.size


def complete_checkpoints(resume_dir: Path) -> list[Path]:
    """The checkpoints renamed into place in ``resume_dir``: folders holding checkpoint.json, not the hidden
    temporary folder a save is still writing (pathlib's ``*`` matches hidden names too)."""
    return [p.parent for p in resume_dir.glob("*/checkpoint.json") if not p.parent.name.startswith(".")]


def kill_at_first_checkpoint(proc: subprocess.Popen, resume_dir: Path, timeout: float = 300) -> None:
    """SIGKILL ``proc``'s process group once ``resume_dir`` holds a complete checkpoint (or it ended, or
    ``timeout`` passed); a checkpoint is complete when its folder holds checkpoint.json."""
    deadline = time.time() + timeout
    while not complete_checkpoints(resume_dir) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):  # it ended already: the caller's asserts say so
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_killed_rl_resumes_from_its_checkpoint_and_matches(base, tmp_path):
    method = tmp_path / "ppo.yaml"
    method.write_text((MICRO / "methods" / "ppo.yaml").read_text().replace("iterations: 2", "iterations: 6"))
    run(rl(base, tmp_path / "straight", method), ROOT)

    out = tmp_path / "killed"
    proc = subprocess.Popen(rl(base, out, method), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    kill_at_first_checkpoint(proc, Path(f"{out}.resume"))
    assert not (out / "stage.json").exists(), "the killed stage must not look finished"
    resumed = run(rl(base, out, method)[:-2] + ["--log-level", "INFO"], ROOT)
    assert "resumed from" in resumed.stderr

    def stable(path: Path) -> list[dict]:
        rows = list(csv.DictReader(open(path)))
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in rows]

    assert stable(out / "curves.csv") == stable(tmp_path / "straight" / "curves.csv")
    assert (out / "curves.csv").read_bytes() == (tmp_path / "straight" / "curves.csv").read_bytes()  # no wall time
    # the resumed run's DVCLive log replays the checkpoint's rows: the summary is byte-identical
    assert (out / "dvclive" / "metrics.json").read_bytes() == \
        (tmp_path / "straight" / "dvclive" / "metrics.json").read_bytes()
    assert (out / "dvclive" / "plots" / "metrics" / "reward" / "task.tsv").read_bytes() == \
        (tmp_path / "straight" / "dvclive" / "plots" / "metrics" / "reward" / "task.tsv").read_bytes()
    assert (out / "model" / "model.safetensors").read_bytes() == \
        (tmp_path / "straight" / "model" / "model.safetensors").read_bytes()
    # the folders evaluate reads, whole: their trainer state once held each run's wall-clock columns, so DVC
    # re-evaluated after any re-execution of the stage
    from grueflow.io import fingerprint

    for folder in ("model", "decoding", "dvclive"):
        assert fingerprint(out / folder) == fingerprint(tmp_path / "straight" / folder), folder


def test_killed_warm_start_resumes_from_its_last_epoch_and_matches(base, tmp_path):
    method = tmp_path / "supervised.yaml"  # batch 2: 32 steps an epoch, so the kill lands before the end
    method.write_text("epochs: 3\nbatch_size: 2\nlearning_rate: 0.001\n")
    run(warm_start(base, tmp_path / "straight", method), ROOT)

    out = tmp_path / "killed"
    proc = subprocess.Popen(warm_start(base, out, method), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    kill_at_first_checkpoint(proc, Path(f"{out}.resume"))
    assert not (out / "stage.json").exists(), "the killed stage must not look finished"
    resumed = run(warm_start(base, out, method)[:-2] + ["--log-level", "INFO"], ROOT)
    assert "resumed from" in resumed.stderr
    assert (out / "model" / "model.safetensors").read_bytes() == \
        (tmp_path / "straight" / "model" / "model.safetensors").read_bytes()
    assert (out / "loss_curve.csv").read_text() == (tmp_path / "straight" / "loss_curve.csv").read_text()
    assert (out / "dvclive" / "metrics.json").read_bytes() == \
        (tmp_path / "straight" / "dvclive" / "metrics.json").read_bytes()
    assert (out / "dvclive" / "plots" / "metrics" / "train_loss.tsv").read_text().count("\n") == 4  # header + 3 epochs
    assert len((out / "loss_curve.csv").read_text().splitlines()) == 4  # header + 3 epochs
    assert not Path(f"{out}.resume").exists()


def test_a_killed_run_never_resumes_under_another_precision(base, tmp_path):
    """The precision changes results, so it is part of the resume key: a warm start killed in fp32 and rerun in
    bf16 starts over rather than finish an fp32 run labelled bf16."""
    method = tmp_path / "supervised.yaml"
    method.write_text("epochs: 2\nbatch_size: 2\nlearning_rate: 0.001\n")
    out = tmp_path / "killed"
    proc = subprocess.Popen(warm_start(base, out, method) + ["--precision", "fp32"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    kill_at_first_checkpoint(proc, Path(f"{out}.resume"))
    assert not (out / "stage.json").exists(), "the killed stage must not look finished"
    rerun = run(warm_start(base, out, method)[:-2] + ["--precision", "bf16", "--log-level", "INFO"], ROOT)
    assert "resumed from" not in rerun.stderr
    assert json.loads((out / "provenance.json").read_text())["execution"]["precision"] == "bf16"


def test_lora_warm_start_and_lora_rl_hand_on_plain_merged_models(base, tmp_path):
    from safetensors.torch import load_file

    lora = "lora: {r: 4, alpha: 8, target_modules: [c_attn]}\n"
    (tmp_path / "supervised.yaml").write_text((MICRO / "methods" / "supervised.yaml").read_text() + lora)
    (tmp_path / "ppo.yaml").write_text((MICRO / "methods" / "ppo.yaml").read_text() + lora)
    run(warm_start(base, tmp_path / "sft", tmp_path / "supervised.yaml"), ROOT)
    run(stage("rl_finetune", "--task-file", TASK, "--algorithm", "ppo", "--method-file", tmp_path / "ppo.yaml",
              "--datapool", base / "datapool", "--init-model", tmp_path / "sft" / "model",
              "--base-model", base / "base_model" / "model", "--seed", "0",
              "--resume-dir", tmp_path / "rl.resume", "--out", tmp_path / "rl"), ROOT)
    start = load_file(base / "base_model" / "model" / "model.safetensors")
    for folder in (tmp_path / "sft" / "model", tmp_path / "rl" / "model"):
        assert not (folder / "adapter_config.json").exists()  # merged: evaluate needs no peft
        weights = load_file(folder / "model.safetensors")
        assert set(weights) == set(start)
        moved = {k for k in start if not torch.equal(start[k], weights[k])}
        assert moved and all(k.endswith("attn.c_attn.weight") for k in moved), moved  # only adapted layers
    run(evaluate(base, tmp_path / "rl" / "model", tmp_path / "eval"), ROOT)
    assert len((tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()) == 8


def test_bad_params_fail_before_work_with_exit_code_2(tmp_path):
    bad = tmp_path / "task.yaml"
    bad.write_text(TASK.read_text().replace("metric: lexicon_sentiment", "metric: rogue"))
    result = run(stage("rl_finetune", "--task-file", bad, "--algorithm", "ppo", "--method-file",
                       MICRO / "methods" / "ppo.yaml", "--datapool", tmp_path, "--init-model", tmp_path,
                       "--base-model", tmp_path, "--seed", "0", "--resume-dir", tmp_path / "r", "--out", tmp_path / "o"),
                 ROOT, check=False)
    assert result.returncode == 2
    assert "unknown metric 'rogue'" in result.stderr and "valid metric ids:" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_stage_asked_for_cuda_without_one_stops_before_loading_anything(base, tmp_path, how):
    command = rl(base, tmp_path / "rl") + (["--device", "cuda:0"] if how == "flag" else [])
    env = {**os.environ, **({"GRUEFLOW_DEVICE": "cuda:0"} if how == "environment" else {})}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    source = "--device" if how == "flag" else "GRUEFLOW_DEVICE"
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"error: {source} = 'cuda:0' asks for a GPU, but CUDA is not available" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "rl").exists()
    assert not Path(f"{tmp_path / 'rl'}.resume").exists()


def test_fast_paths_off_give_the_same_metrics(base, fast_run, tmp_path):
    """GRUEFLOW_FAST=0 (plain transformers: no lean GPT-2 step, fused GELU or lean attention) against the
    default CPU backend, through rl_finetune and evaluate: the same metrics to float rounding."""
    rl_and_evaluate(base, tmp_path / "fast0", "0")
    metrics = {}
    for fast, out in (("1", fast_run), ("0", tmp_path / "fast0")):
        record = json.loads((out / "eval" / "provenance.json").read_text())
        assert record["execution"] == {"device": "cpu", "precision": "fp32", "fast_paths": fast == "1", "threads": 1}
        metrics[fast] = json.loads((out / "eval" / "metrics.json").read_text())["metrics"]
    assert metrics["1"].keys() == metrics["0"].keys()
    for key, value in metrics["1"].items():
        other = metrics["0"][key]
        assert (value is None and other is None) or value == pytest.approx(other, rel=1e-4, abs=1e-5), key
