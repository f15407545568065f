"""The train_classifier stage CLI on a slice of the real IMDB reviews in ../shared/data: its outputs, a seeded
rerun's identical weights, the learned_classifier metric scoring with the result, and bad inputs (exit 2)."""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run

IMDB = ROOT.parent / "shared" / "data" / "imdb"
TRAIN, TEST = "../shared/data/imdb/imdb_train_5k.jsonl", "../shared/data/imdb/imdb_test_subset.jsonl"
SMALL = {"train_file": TRAIN, "test_file": TEST, "labels": ["NEGATIVE", "POSITIVE"], "n_train": 64, "n_test": 32,
         "max_length": 32, "batch_size": 16, "learning_rate": 1e-4, "val_fraction": 0.25, "eval_every": 2}

pytestmark = pytest.mark.skipif(not IMDB.is_dir(), reason=f"the IMDB slices in {IMDB} are absent")


def task_file(folder: Path, **fields) -> Path:
    path = folder / "task.yaml"
    path.write_text(yaml.safe_dump({"classifier": {**SMALL, **fields}}))
    return path


def train(task: Path, out: Path, check: bool = True):
    command = [sys.executable, str(ROOT / "stages" / "train_classifier.py"), "--task-file", str(task), "--out", str(out),
               "--device", "cpu", "--log-level", "WARNING"]
    return run(command, ROOT, check=check, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """64 reviews (48 to train on, 16 held out) of 32 tokens, 3 steps, on the shipped all-MiniLM-L6-v2."""
    out = tmp_path_factory.mktemp("classifier") / "out"
    train(task_file(out.parent), out)
    return out


def test_the_stage_writes_a_hugging_face_classifier_its_curve_and_its_accuracy(trained):
    assert {"curves.csv", "metrics.json", "model", "stage.json"} <= {p.name for p in trained.iterdir()}
    config = json.loads((trained / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "NEGATIVE", "1": "POSITIVE"} and config["model_type"] == "bert"
    metrics = json.loads((trained / "metrics.json").read_text())
    assert (metrics["n_train"], metrics["n_val"], metrics["n_test"]) == (48, 16, 32)
    assert 0 <= metrics["test/accuracy"] <= 1 and 0 <= metrics["val/accuracy"] <= 1 and metrics["test/loss"] > 0
    with open(trained / "curves.csv", newline="") as handle:
        curve = list(csv.DictReader(handle))
    assert [(r["step"], r["epoch"]) for r in curve] == [("2", "0.6667"), ("3", "1.0")]
    assert list(curve[0]) == ["step", "epoch", "learning_rate", "train_loss", "val_loss", "val_accuracy"]
    record = json.loads((trained / "stage.json").read_text())
    assert record["stage"] == "train_classifier" and record["params"]["classifier"]["n_train"] == 64
    assert set(record["inputs"]) == {"train_file", "test_file", "backbone"}
    assert not Path(f"{trained}.resume").exists()


def test_the_learned_classifier_metric_scores_with_the_trained_model(trained):
    from grueflow.metrics import METRICS, MetricContext
    from grueflow.params import parse

    metric = METRICS.get("learned_classifier")
    args = parse(metric.Args, {"model": str(trained / "model"), "include_prompt_for_eval": True}, "args")
    result = metric.build(args, MetricContext())(["An awful film.", "A great film."], ["I hated it.", "I loved it."],
                                                 [[], []], [{}, {}])
    assert all(0 < p < 1 for p in result.per_sample["learned/classifier"])


def test_a_seq2seq_backbone_trains_and_its_model_scores(tiny_models, tmp_path):
    """T5's classifier pools its input's last EOS: the stage ends every row with one (the tiny T5's tokenizer adds
    none), and so does the learned_classifier metric, which reads the trained cut from classifier.json."""
    from grueflow.metrics import METRICS, MetricContext
    from grueflow.params import parse

    train(task_file(tmp_path, backbone=str(tiny_models["seq2seq"]), n_train=16, n_test=8, eval_every=0),
          tmp_path / "out")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["n_test"] == 8 and 0 <= metrics["test/accuracy"] <= 1
    assert json.loads((tmp_path / "out" / "model" / "config.json").read_text())["model_type"] == "t5"
    metric = METRICS.get("learned_classifier")
    args = parse(metric.Args, {"model": str(tmp_path / "out" / "model")}, "args")
    result = metric.build(args, MetricContext())(["", ""], ["An awful film.", "A great film."], [[], []], [{}, {}])
    assert all(0 < p < 1 for p in result.per_sample["learned/classifier"])


def test_a_rerun_with_the_same_params_and_seed_writes_the_same_weights(trained, tmp_path):
    train(task_file(tmp_path), tmp_path / "again")
    for name in ("model/model.safetensors", "metrics.json", "curves.csv"):
        digest = [hashlib.sha256((folder / name).read_bytes()).hexdigest() for folder in (trained, tmp_path / "again")]
        assert digest[0] == digest[1], name


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("case", ["missing file", "missing column", "undeclared label", "one class", "one label",
                                  "repeated column", "test is train", "ambiguous label", "too long for the backbone"])
def test_bad_inputs_stop_the_stage_with_one_line_and_exit_2(case, tmp_path):
    rows = [{"text": f"review {i}", "label": i % 2} for i in range(8)]
    (tmp_path / "dup.csv").write_text("text,label,label\n" + "".join(f"review {i},{i % 2},0\n" for i in range(8)))
    fields, expected = {
        "repeated column": ({"train_file": str(tmp_path / "dup.csv"), "n_train": None},
                            "dup.csv: line 1: the header names column(s) ['label'] more than once"),
        "test is train": ({"test_file": f"./{TRAIN}"}, f"classifier.test_file './{TRAIN}' is classifier.train_file "
                                                       f"'{TRAIN}' (one file): test accuracy would be scored on "
                                                       f"training rows"),
        "ambiguous label": ({"train_file": write_jsonl(tmp_path / "c.jsonl", rows), "labels": ["1", "2"],
                             "n_train": None},
                            "c.jsonl row 2: label 1 is ambiguous: the name of label '1' (class 0) and the index of "
                            "label '2' (class 1)"),
        "too long for the backbone": ({"max_length": 600}, "classifier.max_length = 600 is above the 512 positions of "
                                                           "backbone"),
        "missing file": ({"train_file": "../shared/data/imdb/nope.jsonl"},
                         "classifier data file '../shared/data/imdb/nope.jsonl' does not exist"),
        "missing column": ({"label_column": "sentiment"}, "imdb_train_5k.jsonl row 1 has no column 'sentiment'; "
                                                          "its columns: text, label, file"),
        "undeclared label": ({"train_file": write_jsonl(tmp_path / "a.jsonl", rows + [{"text": "meh", "label": "MIXED"}])},
                             "a.jsonl row 9: label 'MIXED' is not a declared label"),
        "one class": ({"train_file": write_jsonl(tmp_path / "b.jsonl", [{**r, "label": 1} for r in rows]), "n_train": None},
                      "the training rows hold 1 class (POSITIVE)"),
        "one label": ({"labels": ["POSITIVE"]}, "labels must name at least 2 classes"),
    }[case]
    result = train(task_file(tmp_path, **fields), tmp_path / "out", check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "out").exists()
