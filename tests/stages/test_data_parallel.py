"""Data-parallel warm start and RL (issue 8): `processes: 2` relaunches a stage as two gloo processes on the CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from grueflow.distributed import DataParallel, state_hash
from tests.conftest import MICRO, ROOT, run
from tests.stages.test_stages import TASK, rl, stage, warm_start


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Datapool and base model of the micro sentiment task, the base model without dropout, so that one
    process and two processes compute the same gradients."""
    out = tmp_path_factory.mktemp("data_parallel")
    run(stage("prepare_datapool", "--task-file", TASK, "--out", out / "datapool"), ROOT)
    run(stage("base_model", "--task-file", TASK, "--datapool", out / "datapool", "--out", out / "base_model"), ROOT)
    config_file = out / "base_model" / "model" / "config.json"
    config = json.loads(config_file.read_text())
    config.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config_file.write_text(json.dumps(config))
    (out / "base_model" / "stage.json").unlink()  # edited by hand: no longer the stage's output, so not checked as one
    return out


def method_file(folder: Path, name: str, **changes) -> Path:
    path = folder / f"{name}-{'-'.join(f'{k}{v}' for k, v in changes.items())}.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load((MICRO / "methods" / f"{name}.yaml").read_text()), **changes}))
    return path


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(model_dir).state_dict()


def test_two_process_warm_start_matches_one_process_and_replicas_agree(base, tmp_path):
    run(warm_start(base, tmp_path / "one", method_file(tmp_path, "supervised", processes=1)), ROOT)
    run(warm_start(base, tmp_path / "two", method_file(tmp_path, "supervised", processes=2)), ROOT)

    record = json.loads((tmp_path / "two" / "stage.json").read_text())
    hashes = record["data_parallel"]["weights_sha256"]
    assert record["data_parallel"]["processes"] == 2 and len(hashes) == 2 and hashes[0] == hashes[1]
    assert "data_parallel" not in json.loads((tmp_path / "one" / "stage.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "two" / "model")
    assert state_hash([model]) == hashes[0]  # the saved model is the replicas' weights

    start, one, two = weights(base / "base_model" / "model"), weights(tmp_path / "one" / "model"), model.state_dict()
    moved = max((two[k] - start[k]).abs().max().item() for k in start)
    gap = max((two[k] - one[k]).abs().max().item() for k in start)
    assert moved > 1e-3, moved  # it trained (4 AdamW steps of lr 1e-3: about 2.5e-3)
    assert gap < 1e-5, gap  # the shards' averaged gradients are the whole batch's
    curve_one = list(csv.DictReader(open(tmp_path / "one" / "loss_curve.csv")))
    curve_two = list(csv.DictReader(open(tmp_path / "two" / "loss_curve.csv")))
    assert float(curve_two[0]["train_loss"]) == pytest.approx(float(curve_one[0]["train_loss"]), abs=1e-4)
    assert float(curve_two[0]["val_loss"]) == pytest.approx(float(curve_one[0]["val_loss"]), abs=1e-4)


def test_two_process_rl_keeps_identical_replicas_and_trains(base, tmp_path):
    run(rl(base, tmp_path / "rl", method_file(tmp_path, "ppo", processes=2)), ROOT)
    record = json.loads((tmp_path / "rl" / "stage.json").read_text())
    hashes = record["data_parallel"]["weights_sha256"]
    assert record["data_parallel"]["processes"] == 2 and hashes[0] == hashes[1]
    start, trained = weights(base / "base_model" / "model"), weights(tmp_path / "rl" / "model")
    assert max((trained[k] - start[k]).abs().max().item() for k in start) > 1e-4
    curve = list(csv.DictReader(open(tmp_path / "rl" / "curves.csv")))
    assert [row["iteration"] for row in curve] == ["1", "2"]


def test_shards_deal_whole_groups_round_robin():
    items = list(range(12))
    assert DataParallel(0, 2).shard(items, group=2) == [0, 1, 4, 5, 8, 9]
    assert DataParallel(1, 2).shard(items, group=2) == [2, 3, 6, 7, 10, 11]
    assert DataParallel(2, 3).shard(items[:5]) == [2]
    assert DataParallel().shard(items, group=4) == items
