"""Evaluation during RL training (RL4LMs' eval_every), kept policies (save_every) and the best one on val (select:
best), through the rl_finetune CLI on the micro sentiment task: the curve, the choice, training left as it is, and
a killed run that resumes to the same bytes."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from grueflow.config import ConfigError
from grueflow.params import parse
from grueflow.rl.configs import NLPOConfig, PPOConfig
from grueflow.validation import Validation
from tests.conftest import MICRO, ROOT, run
from tests.stages.test_stages import kill_at_first_checkpoint, rl
from tests.unit.test_pipeline_table import dvc_paths, undeclared

PPO = (MICRO / "methods" / "ppo.yaml").read_text().replace("iterations: 2", "iterations: 4")
EVALUATED = PPO + "eval_every: 2\nsave_every: 2\nselect: best\nselect_metric: reward\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    from tests.stages.test_stages import TASK, stage

    out = tmp_path_factory.mktemp("validation")
    run(stage("prepare_datapool", "--task-file", TASK, "--out", out / "datapool"), ROOT)
    run(stage("base_model", "--task-file", TASK, "--datapool", out / "datapool", "--out", out / "base_model"), ROOT)
    return out


@pytest.fixture(scope="module")
def straight(base, tmp_path_factory) -> tuple[Path, Path]:
    """The same run with evaluation during training and without."""
    folder = tmp_path_factory.mktemp("runs")
    (folder / "evaluated.yaml").write_text(EVALUATED)
    (folder / "plain.yaml").write_text(PPO)
    run(rl(base, folder / "evaluated", folder / "evaluated.yaml"), ROOT)
    run(rl(base, folder / "plain", folder / "plain.yaml"), ROOT)
    return folder / "evaluated", folder / "plain"


def val_rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(out / "validation" / "curves.csv")))


def test_the_val_curve_the_kept_policies_and_the_best_one(straight):
    out, _ = straight
    rows = val_rows(out)
    assert [int(r["iteration"]) for r in rows] == [0, 2, 4]  # before training, every 2, and the last
    assert {"reward", "lexical/rougeL", "fluency/perplexity"} <= set(rows[0])
    assert sorted(p.name for p in (out / "validation" / "predictions").iterdir()) == [
        "iteration0.jsonl", "iteration2.jsonl", "iteration4.jsonl"]
    assert len((out / "validation" / "predictions" / "iteration2.jsonl").read_text().splitlines()) == 8  # val split
    assert (out / "validation" / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "validation" / "dvclive" / "metrics.json").read_text())["step"] == 4
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["iteration2", "iteration4"]

    rewards = {int(r["iteration"]): float(r["reward"]) for r in rows}
    best = max(rewards, key=lambda k: (rewards[k], -k))  # the highest val reward, the earliest on a tie
    selected = json.loads((out / "stage.json").read_text())["selected"]
    assert selected["select"] == "best" and selected["iteration"] == best and selected["select_metric"] == "reward"
    assert selected["value"] == pytest.approx(rewards[best], abs=1e-6)
    assert "highest val reward of 3 evaluations" in selected["why"]
    kept = out.parent / "evaluated.resume"  # removed at the end: the kept policy is checked through its bytes
    assert not kept.exists()
    if best > 0:
        assert (out / "model" / "model.safetensors").read_bytes() == \
            (out / "checkpoints" / f"iteration{best}" / "model.safetensors").read_bytes()
    # the training numbers handed on with the model are the selected iteration's (evaluate tables its KL)
    row = next(r for r in csv.DictReader(open(out / "curves.csv")) if int(r["iteration"]) == max(1, best))
    trained = json.loads((out / "train_metrics.json").read_text())
    assert trained["iteration"] == max(1, best)
    assert trained["kl/sequence"] == pytest.approx(float(row["kl/sequence"]), rel=1e-6)


def test_evaluating_during_training_leaves_training_as_it_is(straight):
    evaluated, plain = straight
    assert _stable(evaluated) == _stable(plain)  # every training number, wall-clock times aside
    assert (evaluated / "checkpoints" / "iteration4" / "model.safetensors").read_bytes() == \
        (plain / "model" / "model.safetensors").read_bytes()
    assert json.loads((plain / "stage.json").read_text())["selected"]["select"] == "last"
    assert not (plain / "validation" / "curves.csv").exists()


def test_every_file_of_a_training_output_is_a_dvc_out_and_every_out_exists(straight):
    """val_curves.csv, val_predictions/, dvclive_val/ and checkpoints/ were in no DVC out: a run-cache restore, dvc
    checkout or dvc pull brought back a run's model and left another run's val files and kept policies beside it."""
    evaluated, plain = straight
    for out in (evaluated, plain):
        assert undeclared("rl_finetune", out) == [], out.name
        assert [str(p) for p in dvc_paths("rl_finetune", out) if not p.exists()] == [], out.name
    assert sorted(p.name for p in (plain / "validation").iterdir()) == []  # eval_every 0: an empty out
    assert sorted(p.name for p in (plain / "checkpoints").iterdir()) == []  # save_every 0 likewise
    assert sorted(p.name for p in (evaluated / "validation").iterdir()) == [
        "curves.csv", "curves.png", "dvclive", "predictions"]


def _stable(out: Path) -> list[dict[str, str]]:
    from grueflow.rl.trainer import WALL_CLOCK_KEYS

    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in csv.DictReader(open(out / "curves.csv"))]


def test_a_killed_run_resumes_its_evaluations_to_the_same_bytes(base, straight, tmp_path):
    method = tmp_path / "evaluated.yaml"
    method.write_text(EVALUATED)
    out = tmp_path / "killed"
    proc = subprocess.Popen(rl(base, out, method), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    kill_at_first_checkpoint(proc, Path(f"{out}.resume"))
    assert not (out / "stage.json").exists()
    run(rl(base, out, method), ROOT)
    reference, _ = straight
    assert (out / "validation" / "curves.csv").read_bytes() == (reference / "validation" / "curves.csv").read_bytes()
    assert (out / "model" / "model.safetensors").read_bytes() == \
        (reference / "model" / "model.safetensors").read_bytes()
    for name in ("iteration0.jsonl", "iteration2.jsonl", "iteration4.jsonl"):
        predictions = Path("validation", "predictions", name)
        assert (out / predictions).read_bytes() == (reference / predictions).read_bytes()


METRIC_PLUGIN = """from dataclasses import dataclass

from grueflow.metrics import Metric, MetricResult

CALLS = [0]


class Mine(Metric):
    category, scores = "custom", ("m",)

    @dataclass(frozen=True)
    class Args:
        pass

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            CALLS[0] += 1
            if CALLS[0] == 3 and FIXED is False:
                raise ValueError("bug in my metric")
            return MetricResult({cls.key(): [VALUE] * len(generations)}, {cls.key(): VALUE})
        return compute
"""


def test_a_run_resumed_after_its_metric_plugin_is_fixed_scores_every_evaluation_with_the_fixed_code(base, tmp_path):
    """A validation metric of one's own fails at the third evaluation (after the first checkpoint); fixed, the
    rerun must not resume the rows the old code scored: a run with other plugin code is another run."""
    from tests.stages.test_stages import TASK

    (tmp_path / "my_metric.py").write_text(METRIC_PLUGIN + "FIXED, VALUE = False, 0.0\n")
    task = tmp_path / "sentiment.yaml"
    task.write_text(TASK.read_text().replace("  - {id: perplexity}\n",
                                             '  - {id: perplexity}\n  - {id: "my_metric:Mine"}\n'))
    method = tmp_path / "ppo.yaml"  # 2 iterations, a checkpoint and an evaluation after each
    method.write_text((MICRO / "methods" / "ppo.yaml").read_text() + "eval_every: 1\nselect: best\n"
                      "select_metric: custom/m\n")
    out = tmp_path / "run"
    command = [str(task) if arg == str(TASK) else arg for arg in rl(base, out, method)]
    failed = run(command, tmp_path, check=False)  # the project folder: where the plugin imports from
    assert failed.returncode != 0 and "bug in my metric" in failed.stderr
    assert (tmp_path / "run.resume" / "iteration1").is_dir() and not out.exists()
    (tmp_path / "my_metric.py").write_text(METRIC_PLUGIN + "FIXED, VALUE = True, 0.5\n")
    rerun = run(command, tmp_path)
    assert f"the checkpoints in {tmp_path / 'run.resume'} (iteration1) are of another configuration" in rerun.stderr
    assert [(int(r["iteration"]), float(r["custom/m"])) for r in val_rows(out)] == \
        [(0, 0.5), (1, 0.5), (2, 0.5)]
    assert json.loads((out / "stage.json").read_text())["selected"]["iteration"] == 0  # the earliest of a tie


@pytest.mark.parametrize("rows, metric, expected", [
    ([{"iteration": 0, "reward": 0.1}, {"iteration": 2, "reward": 0.5}, {"iteration": 4, "reward": 0.5}],
     "reward", 2),  # the earliest of a tie
    ([{"iteration": 0, "fluency/perplexity": 30.0}, {"iteration": 2, "fluency/perplexity": 20.0},
      {"iteration": 4, "fluency/perplexity": 25.0}], "fluency/perplexity", 2),  # perplexity: best lowest
    ([{"iteration": 0, "lexical/bleu": None}, {"iteration": 2, "lexical/bleu": 3.0}], "lexical/bleu", 2),
])
def test_best_selection_on_a_known_val_curve(tmp_path, rows, metric, expected):
    cfg = PPOConfig(iterations=4, eval_every=2, select="best", select_metric=metric)
    validation = Validation(tmp_path, [], None, None, (), None, cfg, 0)
    validation.rows = rows
    assert validation.selected()["iteration"] == expected


def test_best_selection_follows_a_metric_of_your_own_where_lower_is_better(tmp_path):
    """An error rate counted as higher-is-better: select: best handed on the policy with the most errors."""
    from grueflow.config import MetricSpec

    plugin = "tests.unit.test_plugins:ErrorRate"
    cfg = PPOConfig(iterations=4, eval_every=2, select="best", select_metric="custom/error_rate")
    validation = Validation(tmp_path, [], None, None, (parse(MetricSpec, {"id": plugin}, "metrics[0]"),), None, cfg, 0)
    validation.rows = [{"iteration": 0, "custom/error_rate": 0.5}, {"iteration": 2, "custom/error_rate": 0.1},
                       {"iteration": 4, "custom/error_rate": 0.9}]
    assert validation.selected()["iteration"] == 2
    assert validation.selected()["why"].startswith("the lowest val custom/error_rate of 3 evaluations")


@pytest.mark.parametrize("settings, message", [
    ({"select": "best"}, "select: best needs eval_every > 0 and a select_metric"),
    ({"eval_every": 2, "select": "best"}, "select: best needs eval_every > 0 and a select_metric"),
    ({"select_metric": "reward"}, "select_metric 'reward' is used only with select: best"),
    ({"eval_every": 9}, "eval_every must be in [0, iterations = 4] (0: no evaluation), got 9"),
    ({"save_every": -1}, "save_every must be in [0, iterations = 4] (0: none kept), got -1"),
    ({"eval_samples": 0}, "eval_samples must be > 0 (or null: the whole val split), got 0"),
    ({"save_every": 2, "processes": 2, "rollouts_per_iteration": 64},
     "eval_every and save_every need processes: 1 (evaluation during training runs in one process), got processes=2"),
])
def test_bad_evaluation_settings_fail_at_parse_time(settings, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse(PPOConfig, {"iterations": 4, **settings}, "ppo.yaml:")
    with pytest.raises(ConfigError, match="select: best hands on an earlier policy, but eval_with_masks"):
        parse(NLPOConfig, {"iterations": 4, "eval_every": 2, "select": "best", "select_metric": "reward"}, "nlpo.yaml:")


def test_a_resume_folder_left_by_another_run_keeps_none_of_its_evaluations(tmp_path):
    """Rows and kept policies of a run with other params (another run key) are dropped, never reused."""
    from grueflow.validation import CURVE, KEY
    from grueflow.training import VALIDATION_DIR

    cfg = PPOConfig(iterations=4, eval_every=2)
    folder = tmp_path / VALIDATION_DIR
    folder.mkdir()
    (folder / KEY).write_text("old-run")
    (folder / CURVE).write_text('[{"iteration": 0, "reward": 9.0}]')
    validation = Validation(tmp_path, [], None, None, (), None, cfg, 0, key="new-run")
    validation._resume(0)
    assert validation.rows == [] and (folder / KEY).read_text() == "new-run"
    same = Validation(tmp_path, [], None, None, (), None, cfg, 0, key="new-run")
    (folder / CURVE).write_text('[{"iteration": 0, "reward": 1.0}, {"iteration": 2, "reward": 2.0}]')
    same._resume(2)  # the same run, resumed from iteration 2: what it did up to there is kept
    assert same.rows == [{"iteration": 0, "reward": 1.0}, {"iteration": 2, "reward": 2.0}]
    afresh = Validation(tmp_path, [], None, None, (), None, cfg, 0, key="new-run")
    afresh._resume(0)  # no checkpoint resumed: no checkpoint vouches for any of it, so none of it is kept
    assert afresh.rows == [] and sorted(p.name for p in folder.iterdir()) == sorted([CURVE, KEY])


def _trained_to_epoch_3(resume: Path) -> Validation:
    """A warm start's resume folder as a run killed after its epoch-3 checkpoint leaves it (``eval_every: 1``,
    ``save_every: 2``, two checkpoints kept): the val rows, predictions and kept policy of epochs 0-3, written in
    the layout :class:`Validation` writes, and checkpoints epoch2 and epoch3 recording their digests."""
    from grueflow import checkpoints
    from grueflow.config import SupervisedConfig
    from grueflow.validation import CURVE, KEPT, PREDICTIONS

    validation = Validation(resume, [], None, None, (), None, SupervisedConfig(epochs=6, eval_every=1, save_every=2),
                            0, key="run", unit="epoch", total=6, step=lambda t: t)
    validation._resume(0)
    for epoch in range(4):
        (validation.root / PREDICTIONS).mkdir(exist_ok=True)
        (validation.root / PREDICTIONS / f"epoch{epoch}.jsonl").write_text(
            "".join(f'{{"id": {i}, "prediction": "p{epoch}"}}\n' for i in range(8)))
        validation.rows.append({"epoch": epoch, "lexical/rougeL": 0.1 * epoch})
        (validation.root / CURVE).write_text(json.dumps(validation.rows))
        if validation.kept_due(epoch):
            (validation.root / KEPT / f"epoch{epoch}").mkdir(parents=True)
            (validation.root / KEPT / f"epoch{epoch}" / "model.safetensors").write_bytes(bytes([epoch]) * 4096)
        if epoch > 0:
            checkpoints.save(resume, "epoch", epoch, "run", lambda f, e=epoch: (f / "model.safetensors").write_bytes(
                bytes([e]) * 64), keep=2, carried=validation)
    return validation


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100:200] = bytes(b ^ 0xFF for b in data[100:200])
    path.write_bytes(bytes(data))


def _cut(path: Path) -> None:
    path.write_text("".join(path.read_text().splitlines(True)[:3]))


@pytest.mark.parametrize("damage, first, resumed", [
    (lambda v: _flip(v.root / "kept" / "epoch2" / "model.safetensors"),
     "validation/kept/epoch2/model.safetensors in {resume}, which a resume from epoch3 takes over, does not match "
     "its digest (truncated or corrupted)", None),
    (lambda v: shutil.rmtree(v.root / "kept" / "epoch2"),
     "validation/kept/epoch2/model.safetensors in {resume}, which a resume from epoch3 takes over, is missing", None),
    (lambda v: _cut(v.root / "predictions" / "epoch1.jsonl"),
     "validation/predictions/epoch1.jsonl in {resume}, which a resume from epoch3 takes over, does not match its "
     "digest (truncated or corrupted)", None),
    (lambda v: (v.root / "predictions" / "epoch1.jsonl").unlink(),
     "validation/predictions/epoch1.jsonl in {resume}, which a resume from epoch3 takes over, is missing", None),
    (lambda v: _cut(v.root / "predictions" / "epoch3.jsonl"),
     "validation/predictions/epoch3.jsonl in {resume}, which a resume from epoch3 takes over, does not match its "
     "digest (truncated or corrupted)", 2),
    (lambda v: (v.root / "val_curves.json").write_text((v.root / "val_curves.json").read_text()[:40]),
     "validation/val_curves.json in {resume}, which a resume from epoch3 takes over, does not match its digest "
     "(truncated or corrupted)", None),
    (lambda v: (v.root / "val_curves.json").write_text(
        json.dumps([{**row, "lexical/rougeL": 0.9} if row["epoch"] == 3 else row for row in v.rows])),
     "validation/val_curves.json in {resume}, which a resume from epoch3 takes over, does not match its digest "
     "(truncated or corrupted)", 2),
    (lambda v: ((v.root / "kept" / "epoch1").mkdir(), (v.root / "kept" / "epoch1" / "model.safetensors").write_bytes(
        b"x")), "validation/kept/epoch1/model.safetensors in {resume}, which a resume from epoch3 takes over, was not "
                "there when epoch3 was written", None),
    (lambda v: (v.root / "run_key").write_text("another run"),
     "validation/run_key in {resume}, which a resume from epoch3 takes over, does not match its digest", None),
], ids=["kept-bit-flip", "kept-missing", "predictions-cut", "predictions-missing", "newest-predictions-cut",
        "curve-truncated", "curve-newest-row-edited", "kept-added", "run-key-changed"])
def test_a_resume_takes_over_no_damaged_or_missing_validation_file(tmp_path, caplog, damage, first, resumed):
    """The val rows, predictions and kept policies a resume takes over from its resume folder are checked against the
    digests its checkpoint recorded of them: on a mismatch, a missing or an added file, the run falls back to the
    checkpoint before it (whose files are intact) or starts afresh, one line per checkpoint saying why, and what it
    then keeps is intact."""
    from grueflow import checkpoints
    from grueflow.config import SupervisedConfig

    resume = tmp_path / "out.resume"
    damage(_trained_to_epoch_3(resume))
    validation = Validation(resume, [], None, None, (), None, SupervisedConfig(epochs=6, eval_every=1, save_every=2),
                            0, key="run", unit="epoch", total=6, step=lambda t: t)
    with caplog.at_level("WARNING", logger="grueflow.checkpoints"):
        found = checkpoints.latest(resume, "epoch", "run", carried=validation)
    assert found == (resume / f"epoch{resumed}" if resumed else None)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith(f"checkpoint {resume / 'epoch3'} is damaged ({first.format(resume=resume)}")
    assert lines[0].endswith(f"removing it and falling back to {resume / 'epoch2'}")
    assert len(lines) == (1 if resumed else 2)
    if not resumed:
        assert lines[1].startswith(f"checkpoint {resume / 'epoch2'} is damaged (validation/")
        assert lines[1].endswith("removing it and starting afresh")
    validation._resume(resumed or 0)  # at the trainer's first call: what the checkpoint resumed vouched for is kept
    assert [row["epoch"] for row in validation.rows] == ([0, 1, 2] if resumed else [])
    kept = sorted(p.relative_to(validation.root).as_posix() for p in validation.root.rglob("*") if p.is_file())
    if resumed:
        assert kept == ["kept/epoch2/model.safetensors", "predictions/epoch0.jsonl", "predictions/epoch1.jsonl",
                        "predictions/epoch2.jsonl", "run_key", "val_curves.json"]
        assert validation.carried_digests(2) == json.loads((resume / "epoch2" / "checkpoint.json").read_text())[
            "carried"]
    else:
        assert kept == ["run_key", "val_curves.json"] and validation.rows == []


def test_the_warm_start_scores_val_each_epoch_and_hands_on_the_best(base, tmp_path):
    from tests.stages.test_stages import warm_start

    method = tmp_path / "supervised.yaml"
    method.write_text("epochs: 3\nbatch_size: 16\nlearning_rate: 0.001\neval_every: 1\nsave_every: 3\n"
                      "select: best\nselect_metric: lexical/rougeL\n")
    out = tmp_path / "supervised"
    run(warm_start(base, out, method), ROOT)
    rows = val_rows(out)
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3] and "reward" not in rows[0]  # metrics only
    rouge = {int(r["epoch"]): float(r["lexical/rougeL"]) for r in rows}
    best = max(rouge, key=lambda k: (rouge[k], -k))
    selected = json.loads((out / "stage.json").read_text())["selected"]
    assert selected["epoch"] == best and selected["select_metric"] == "lexical/rougeL"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch3"]
    assert undeclared("warm_start", out) == [] and all(p.exists() for p in dvc_paths("warm_start", out))
    kept = out / "checkpoints" / "epoch3" / "model.safetensors"
    assert ((out / "model" / "model.safetensors").read_bytes() == kept.read_bytes()) == (best == 3)
    with pytest.raises(ConfigError, match="select: best needs eval_every > 0"):
        parse(__import__("grueflow.config", fromlist=["SupervisedConfig"]).SupervisedConfig,
              {"epochs": 2, "select": "best"}, "supervised.yaml:")


def test_a_select_metric_never_finite_falls_back_to_the_last_policy_with_one_warning(tmp_path, caplog):
    cfg = PPOConfig(iterations=4, eval_every=2, select="best", select_metric="diversity/distinct_2")
    validation = Validation(tmp_path, [], None, None, (), None, cfg, 0)
    validation.rows = [{"iteration": step, "diversity/distinct_2": None, "reward": 0.5, "lexical/bleu": None}
                       for step in (0, 2, 4)]
    why = ("select_metric 'diversity/distinct_2' has no finite val value at any of the 3 evaluations (iteration 0: "
           "NaN, iteration 2: NaN, iteration 4: NaN), so select: best fell back to select: last, the final policy")
    with caplog.at_level("WARNING", logger="grueflow.validation"):
        assert validation.selected() == {"select": "last", "iteration": 4, "select_metric": "diversity/distinct_2",
                                         "value": None, "why": why}
        assert validation.selected_model() == tmp_path / "validation" / "kept" / "iteration4"  # the final policy
    assert [r.getMessage() for r in caplog.records] == [f"{why}; keys with a finite value at every evaluation: reward"]


def test_select_best_choosing_the_untrained_start_warns_that_it_is_handed_on(tmp_path, caplog):
    from grueflow.config import SupervisedConfig

    cfg = SupervisedConfig(epochs=2, eval_every=1, select="best", select_metric="diversity/length")
    validation = Validation(tmp_path, [], None, None, (), None, cfg, 0, unit="epoch", total=2)
    validation.rows = [{"epoch": 0, "diversity/length": 8.0}, {"epoch": 1, "diversity/length": 3.0},
                       {"epoch": 2, "diversity/length": 8.0}]
    with caplog.at_level("WARNING", logger="grueflow.validation"):
        assert validation.selected()["epoch"] == 0
        assert validation.selected_model().name == "epoch0"
    assert [r.getMessage() for r in caplog.records] == [
        "select: best chose epoch 0, the start model before any training (the highest val diversity/length of 3 "
        "evaluations (epochs 0, 1, 2)): it is handed on untrained, so this method's results are the start model's; "
        "if that is not meant, choose another select_metric or use select: last"]
    caplog.clear()
    validation.rows[1]["diversity/length"] = 9.0
    validation.announced = False
    with caplog.at_level("WARNING", logger="grueflow.validation"):
        assert validation.selected()["epoch"] == 1
    assert caplog.records == []


def test_a_select_metric_of_a_metric_missing_on_this_machine_is_refused_at_its_first_evaluation(tmp_path):
    cfg = PPOConfig(iterations=4, eval_every=2, select="best", select_metric="lexical/spice")
    validation = Validation(tmp_path, [], None, None, (), None, cfg, 0)
    validation._check_select_metric({"rouge": "unused"}, 0)  # another metric missing: nothing to refuse
    with pytest.raises(ConfigError) as err:
        validation._check_select_metric({"spice": "metric 'spice' needs Java\n and the jars"}, 0)
    assert str(err.value) == ("select: best: select_metric 'lexical/spice' cannot be computed on this machine (metric "
                              "spice is missing: metric 'spice' needs Java and the jars); stopped at the evaluation "
                              "of iteration 0, before any training: make spice available, or choose another "
                              "select_metric")
    Validation(tmp_path, [], None, None, (), None, PPOConfig(iterations=4), 0)._check_select_metric({"spice": "x"}, 0)


def test_eval_samples_above_the_val_split_warns_that_all_are_used(tmp_path, caplog):
    from grueflow.data import Sample

    samples = [Sample(f"val-{i}", "p", ("r",), {}) for i in range(8)]
    with caplog.at_level("WARNING", logger="grueflow.validation"):
        assert len(Validation(tmp_path, samples, None, None, (), None, PPOConfig(iterations=4, eval_every=2,
                                                                                 eval_samples=1000), 0).samples) == 8
        assert len(Validation(tmp_path, samples, None, None, (), None, PPOConfig(iterations=4, eval_every=2,
                                                                                 eval_samples=5), 0).samples) == 5
    assert [r.getMessage() for r in caplog.records] == [
        "eval_samples 1000 is more than the 8 val samples there are: all 8 are evaluated"]
