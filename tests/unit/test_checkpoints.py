"""Resume folders (issue 9): atomic ``<unit><k>/`` checkpoints keyed by run, the newest K kept; the warm
start and RL resume bit for bit (in-process here; killed and rerun as stages in tests/stages/test_stages.py)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from grueflow import checkpoints
from grueflow.config import ConfigError, GenerationConfig, RewardConfig, SupervisedConfig
from grueflow.data import DATAPOOLS
from grueflow.io import DataError
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.lora import trainable_state, with_lora
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.rl.configs import PPOConfig
from grueflow.rl.trainer import WALL_CLOCK_KEYS, RLTrainer
from grueflow.seeding import seed_everything
from grueflow.checkpoints import epoch_order
from grueflow.supervised import SupervisedTrainer


def write_marker_only(folder: Path) -> None:
    (folder / "weights.bin").write_bytes(b"w")


def test_the_newest_k_complete_checkpoints_of_this_run_are_kept(tmp_path, caplog):
    root = tmp_path / "out.resume"
    for step in range(1, 5):
        checkpoints.save(root, "iteration", step, "run-a", write_marker_only, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["iteration3", "iteration4"]
    assert checkpoints.latest(root, "iteration", "run-a") == root / "iteration4"
    assert checkpoints.latest(root, "iteration", "run-b") is None  # another run's checkpoints are never resumed

    (root / "iteration5").mkdir()  # a folder without checkpoint.json is damage (a save renames it in marker and all)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="grueflow.checkpoints"):
        assert checkpoints.latest(root, "iteration", "run-a") == root / "iteration4"
    assert caplog.messages == [f"checkpoint {root / 'iteration5'} is damaged (checkpoint.json is missing or "
                               f"damaged); removing it and falling back to {root / 'iteration4'}"]
    assert not (root / "iteration5").exists()
    checkpoints.save(root, "iteration", 1, "run-b", write_marker_only, keep=2)  # params changed: a new run
    assert sorted(p.name for p in root.iterdir()) == ["iteration1"]
    assert checkpoints.latest(root, "iteration", "run-b") == root / "iteration1"
    assert (root / "iteration1" / "weights.bin").read_bytes() == b"w"


def test_a_resume_folder_is_one_runs_own(tmp_path):
    """It is deleted when its run finishes: a folder holding anything a run did not write is refused, and so
    is a second process training into it."""
    root = tmp_path / "out.resume"
    first = checkpoints.claim(root, "iteration", own=("dvclive",))
    with pytest.raises(DataError, match=r"another process is training into the resume folder .*out.resume; wait for "
                                        r"it to finish \(or stop it\)"):
        checkpoints.claim(root, "iteration")  # a second open file description: as another process's
    first.close()
    checkpoints.save(root, "iteration", 1, "k", write_marker_only, keep=2)
    (root / "dvclive").mkdir()
    (root / "nonfinite_iteration2.json").write_text("{}")
    checkpoints.claim(root, "iteration", own=("dvclive",)).close()  # all of it a run's own

    shared = tmp_path / "projects"
    (shared / "thesis").mkdir(parents=True)
    (shared / "notes.txt").write_text("keep me")
    with pytest.raises(DataError) as caught:  # the advice holds under Snakemake too, where the folder is the rule's
        checkpoints.claim(shared, "iteration")
    assert str(caught.value) == (f"--resume-dir {shared} holds notes.txt, thesis, which no training run wrote, and a "
                                 f"resume folder is deleted when its run finishes; move them out of {shared}, and "
                                 f"rerun")
    with pytest.raises(DataError) as caught:
        checkpoints.claim(shared / "notes.txt", "iteration")
    assert str(caught.value) == (f"--resume-dir {shared / 'notes.txt'} is a file, where the run keeps its checkpoints "
                                 f"in a folder (deleted when the run finishes); move the file {shared / 'notes.txt'} "
                                 f"elsewhere (or delete it), and rerun")
    assert (shared / "notes.txt").read_text() == "keep me"
    for name in ("a", "b", "c\nd"):
        (shared / name).write_text("")
    with pytest.raises(DataError, match=r"holds a, b, 'c\\nd' and 2 more, which no training run wrote, and a resume "
                                        r"folder is deleted when its run finishes; move them out of "):
        checkpoints.claim(shared, "iteration")


def test_a_save_that_fails_leaves_the_previous_checkpoint(tmp_path):
    root = tmp_path / "out.resume"
    checkpoints.save(root, "epoch", 1, "k", write_marker_only, keep=1)

    def crash(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"h")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        checkpoints.save(root, "epoch", 2, "k", crash, keep=1)
    assert [p.name for p in root.iterdir()] == ["epoch1"]
    with pytest.raises(ValueError, match="keep must be >= 1, got 0"):
        checkpoints.save(root, "epoch", 3, "k", write_marker_only, keep=0)


def test_a_checkpoint_keeps_the_meta_it_was_given_apart_from_its_files(tmp_path):
    """How the run went (the thread count of each part: grueflow.training.PARTS) is read back on resume; it is no
    file of the checkpoint, so a checkpoint without it (written before) resumes alike, with none."""
    root = tmp_path / "out.resume"
    parts = {"parts": [{"from": "epoch0", "threads": 1}]}
    with_meta = checkpoints.save(root, "epoch", 1, "k", write_marker_only, keep=2, meta=parts)
    without = checkpoints.save(root, "epoch", 2, "k", write_marker_only, keep=2)
    assert checkpoints.meta(with_meta) == parts and checkpoints.meta(without) == {}
    assert checkpoints.damage(with_meta) is None and checkpoints.meta(root / "epoch3") == {}


def test_run_keys_differ_by_any_part():
    key = checkpoints.run_key({"epochs": 3}, "sha-model", 0)
    assert key == checkpoints.run_key({"epochs": 3}, "sha-model", 0)
    assert len({key, checkpoints.run_key({"epochs": 4}, "sha-model", 0), checkpoints.run_key({"epochs": 3}, "x", 0),
                checkpoints.run_key({"epochs": 3}, "sha-model", 1)}) == 4


def test_a_stage_run_key_changes_with_its_code_and_package_versions(tmp_path, monkeypatch):
    """A training run killed, then rerun after a pulled fix, resumed the old code's checkpoints: its weights and
    curve matched neither version of the code, and stage.json named the new one."""
    (tmp_path / "stages").mkdir()
    (tmp_path / "grueflow").mkdir()
    script = tmp_path / "stages" / "train.py"
    script.write_text("from grueflow import schedule\n")
    (tmp_path / "grueflow" / "__init__.py").write_text("")
    (tmp_path / "grueflow" / "schedule.py").write_text("RATE = 1.0\n")
    (tmp_path / "grueflow" / "unused.py").write_text("")
    identity = checkpoints.code_identity(script)
    assert sorted(identity["code"]) == ["grueflow/__init__.py", "grueflow/schedule.py", "stages/train.py"]
    key = checkpoints.run_key({"epochs": 3}, 0, script=script)
    assert key == checkpoints.run_key({"epochs": 3}, 0, script=script) != checkpoints.run_key({"epochs": 3}, 0)
    (tmp_path / "grueflow" / "unused.py").write_text("X = 1\n")  # a file the stage does not import
    assert checkpoints.run_key({"epochs": 3}, 0, script=script) == key
    (tmp_path / "grueflow" / "schedule.py").write_text("RATE = 0.5\n")  # a file it imports
    changed = checkpoints.run_key({"epochs": 3}, 0, script=script)
    assert changed != key
    monkeypatch.setattr(checkpoints, "package_versions", lambda: {"torch": "0.0.0"})  # an upgraded torch
    assert checkpoints.run_key({"epochs": 3}, 0, script=script) != changed


def test_each_epochs_order_depends_on_seed_and_epoch_only():
    assert epoch_order(6, "supervised", seed=0, epoch=1) == epoch_order(6, "supervised", seed=0, epoch=1)
    assert sorted(epoch_order(6, "supervised", seed=0, epoch=1)) == list(range(6))
    assert len({tuple(epoch_order(50, "supervised", s, e)) for s in (0, 1) for e in (0, 1)}) == 4


def lora_warm_start(path: Path, epochs: int) -> SupervisedTrainer:
    loader = DATAPOOLS.get("synthetic_concepts")
    pool = loader.build(loader.Args(n_train=8, n_val=2, n_test=2, n_unlabelled=2))
    seed_everything(0)
    cfg = parse(SupervisedConfig, {"epochs": epochs, "batch_size": 4, "learning_rate": 1e-2,
                                   "lora": {"r": 4, "dropout": 0.1, "target_modules": ["q", "v"]}}, "sft")
    model, tokenizer = load_pretrained(path)
    policy = Policy(with_lora(model, cfg.lora), tokenizer, 16)
    return SupervisedTrainer(policy, pool.splits["train"], pool.splits["val"], cfg, 16, seed=0)


def test_a_lora_warm_start_resumed_from_its_adapter_checkpoint_matches_a_straight_run(tiny_models, tmp_path):
    straight = lora_warm_start(tiny_models["seq2seq"], epochs=3)
    curve = straight.train()

    first = lora_warm_start(tiny_models["seq2seq"], epochs=3)
    first.run_epoch()
    first.save_checkpoint(tmp_path / "sft.resume", "k")
    saved = tmp_path / "sft.resume" / "epoch1"
    assert sorted(p.name for p in saved.iterdir()) == ["adapter_model.safetensors", "checkpoint.json",
                                                       "trainer_state.pt"]
    resumed = lora_warm_start(tiny_models["seq2seq"], epochs=3)  # reseeds: the RNGs must come from the checkpoint
    assert resumed.resume(tmp_path / "sft.resume", "other run") is None
    assert resumed.resume(tmp_path / "sft.resume", "k") == saved and resumed.state.epoch == 1
    assert resumed.train() == curve
    expected = trainable_state(straight.policy.model)
    assert all(torch.equal(tensor, expected[name]) for name, tensor in trainable_state(resumed.policy.model).items())


def ppo_trainer(path: Path, **overrides) -> RLTrainer:
    loader = DATAPOOLS.get("synthetic_sentiment")
    samples = loader.build(loader.Args(n_train=16, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    seed_everything(0)
    model, tokenizer = load_pretrained(path)
    ref_model, _ = load_pretrained(path)
    cfg = parse(PPOConfig, {"iterations": 3, "rollouts_per_iteration": 8, "minibatch_size": 8, "epochs": 1,
                            "checkpoint_every": 1, **overrides}, "ppo")
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "diversity", "score": "length", "weight": -0.1}]},
                          "reward"), MetricContext())
    return RLTrainer("ppo", cfg, Policy(model, tokenizer, 24), ref_model, reward, samples,
                     GenerationConfig(max_new_tokens=6), seed=0)


def stable(curve: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS} for row in curve]


def test_rl_keeps_its_newest_k_checkpoints_and_resumes_from_the_newest_complete_one(tiny_models, tmp_path):
    resume = tmp_path / "ppo.resume"
    straight = ppo_trainer(tiny_models["causal"], keep_checkpoints=2)
    straight.train(checkpoint=lambda t: t.save_checkpoint(resume, "k"))
    assert sorted(p.name for p in resume.iterdir()) == ["iteration2", "iteration3"]
    assert {p.name for p in (resume / "iteration3").iterdir()} >= {"model.safetensors", "value_head.safetensors",
                                                                   "trainer_state.pt", "checkpoint.json"}

    (resume / "iteration3" / "checkpoint.json").unlink()  # as if the kill came mid-save: not complete
    resumed = ppo_trainer(tiny_models["causal"], keep_checkpoints=2)
    assert resumed.resume(resume, "k") == resume / "iteration2" and resumed.state.iteration == 2
    resumed.train()
    assert stable(resumed.state.curve) == stable(straight.state.curve)
    weights = dict(straight.policy.model.named_parameters())
    assert all(torch.equal(p, weights[n]) for n, p in resumed.policy.model.named_parameters())


def test_keep_checkpoints_must_keep_one():
    assert parse(PPOConfig, {}, "ppo").keep_checkpoints == 1
    with pytest.raises(ConfigError, match="keep_checkpoints must be >= 1, got 0"):
        parse(PPOConfig, {"keep_checkpoints": 0}, "ppo")


def _save_three(root: Path, keep: int) -> list[Path]:
    from grueflow.checkpoints import save

    return [save(root, "iteration", step, "run", lambda f, step=step: (f / "model.safetensors").write_bytes(
        bytes([step]) * 64), keep=keep) for step in (1, 2, 3)]


@pytest.mark.parametrize("damage, why", [
    (lambda p: (p / "model.safetensors").write_bytes(b"\x01" * 63 + b"\x00"), "does not match its digest"),
    (lambda p: (p / "model.safetensors").write_bytes(b"\x03" * 10), "does not match its digest"),
    (lambda p: (p / "model.safetensors").unlink(), "model.safetensors is missing"),
    (lambda p: (p / "checkpoint.json").write_text('{"key": "run", "st'), "checkpoint.json is missing or damaged"),
    (lambda p: (p / "checkpoint.json").write_text('{"key": "run", "step": 3, "files": ["model.safetensors"]}'),
     "checkpoint.json's digests are not a mapping of file to digest"),
    (lambda p: (shutil.rmtree(p), shutil.copytree(p.parent / "iteration2", p)),
     "checkpoint.json is step 2's, not iteration3's (a folder copied or renamed)"),
    (lambda p: (p / "checkpoint.json").write_text(json.dumps({**json.loads((p / "checkpoint.json").read_text()),
                                                              "step": "3"})),
     """checkpoint.json's step is "3" (a JSON string), not an integer"""),
], ids=["bit-flip", "truncated-weights", "missing-weights", "truncated-marker", "digests-a-list", "copied-folder",
        "step-a-string"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before_saying_so(tmp_path, caplog, damage, why):
    from grueflow.checkpoints import latest

    paths = _save_three(tmp_path, keep=2)
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["iteration2", "iteration3"]
    damage(paths[2])
    with caplog.at_level("WARNING", logger="grueflow.checkpoints"):
        assert latest(tmp_path, "iteration", "run") == paths[1]
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"checkpoint {paths[2]} is damaged" in line and why in line and f"falling back to {paths[1]}" in line
    assert not paths[2].exists()


def test_a_damaged_only_checkpoint_starts_afresh_and_is_removed(tmp_path, caplog):
    from grueflow.checkpoints import latest, save

    paths = _save_three(tmp_path, keep=1)
    (paths[2] / "model.safetensors").write_bytes(b"")
    with caplog.at_level("WARNING", logger="grueflow.checkpoints"):
        assert latest(tmp_path, "iteration", "run") is None
    assert "starting afresh" in caplog.records[0].getMessage()
    assert list(tmp_path.iterdir()) == []  # a fresh run's first checkpoint is then not pruned by a stale newer one
    save(tmp_path, "iteration", 1, "run", lambda f: (f / "model.safetensors").write_bytes(b"x"), keep=1)
    assert latest(tmp_path, "iteration", "run") == tmp_path / "iteration1"


def test_checkpoints_of_another_configuration_are_named_before_a_fresh_start(tmp_path, caplog):
    root = tmp_path / "out.resume"
    for step in (1, 2):
        checkpoints.save(root, "iteration", step, "run-a", write_marker_only, keep=2)
    with caplog.at_level("WARNING", logger="grueflow.checkpoints"):
        assert checkpoints.latest(root, "iteration", "run-b") is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"the checkpoints in {root} (iteration1, iteration2) are of another configuration of "
                           f"this run: a setting, an input (data, a model, a plugin's code or a file its args name), "
                           f"the seed, the stage's code or a package version changed since they were written, so it "
                           f"starts afresh, and they are deleted when it writes its first checkpoint")
    caplog.clear()
    with caplog.at_level("WARNING", logger="grueflow.checkpoints"):
        assert checkpoints.latest(root, "iteration", "run-a") == root / "iteration2"
    assert not caplog.records  # its own checkpoints: resumed without a word


def test_how_often_a_run_checkpoints_and_how_many_it_keeps_are_not_in_its_key():
    settings = {"learning_rate": 1e-5, "iterations": 6, "checkpoint_every": 1, "keep_checkpoints": 1}
    changed = {**settings, "checkpoint_every": 3, "keep_checkpoints": 4}
    assert checkpoints.run_key(checkpoints.keyed_settings(settings)) == \
        checkpoints.run_key(checkpoints.keyed_settings(changed))
    assert checkpoints.run_key(checkpoints.keyed_settings(settings)) != \
        checkpoints.run_key(checkpoints.keyed_settings({**settings, "iterations": 7}))


def test_a_runs_reward_inputs_are_its_plugin_sources_and_the_folders_its_args_name_by_content(tmp_path):
    from grueflow.plugins import run_inputs

    (tmp_path / "my_rewards.py").write_text("import my_helper\nclass Odd:\n    pass\n")
    (tmp_path / "my_helper.py").write_text("SIGN = 1.0\n")
    (tmp_path / "rm" / "model").mkdir(parents=True)
    (tmp_path / "rm" / "model" / "weights.bin").write_bytes(b"a")
    reward = {"components": [{"metric": "my_rewards:Odd", "weight": 1.0},
                             {"metric": "reward_model", "weight": 1.0, "args": {"path": "rm/model", "note": "x"}}]}
    task = {"reward": reward}
    before = run_inputs(task, reward, None, tmp_path)
    assert sorted(before) == ["my_helper.py", "my_rewards.py", "rm/model"]
    (tmp_path / "my_helper.py").write_text("SIGN = -1.0\n")  # an edit in a module the plugin imports
    edited = run_inputs(task, reward, None, tmp_path)
    assert edited["my_helper.py"] != before["my_helper.py"] and edited["rm/model"] == before["rm/model"]
    (tmp_path / "rm" / "model" / "weights.bin").write_bytes(b"b")  # the reward model retrained
    assert run_inputs(task, reward, None, tmp_path)["rm/model"] != before["rm/model"]
    assert run_inputs({}, {"components": [{"metric": "x", "args": {"path": "."}}]}, None, tmp_path) == {}  # the project


VALIDATED_TASK = {
    "reward": {"components": [{"metric": "lexicon_sentiment", "weight": 1.0}]},
    "rollout_generation": {"max_new_tokens": 8},
    "eval_generation": {"max_new_tokens": 8, "post_processing": "my_post:strip"},
    "metrics": [{"id": "my_metric:Mine"}, {"id": "learned_classifier", "args": {"model": "judge"}}, {"id": "rouge"}]}


def _validated_project(root: Path) -> None:
    """A project whose validation runs a metric plugin (importing a helper), a post-processing function and a
    metric reading a local classifier folder."""
    (root / "my_metric.py").write_text("import metric_helper\nclass Mine:\n    pass\n")
    (root / "metric_helper.py").write_text("SCALE = 1.0\n")
    (root / "my_post.py").write_text("def strip(text):\n    return text.strip()\n")
    (root / "judge").mkdir()
    (root / "judge" / "weights.bin").write_bytes(b"a")


def _rl_key(root: Path, eval_every: int = 1) -> str:
    """rl_finetune's run key for ``VALIDATED_TASK`` in project ``root`` (validating when ``eval_every``), its other
    parts held fixed, as the stage builds it."""
    from grueflow.plugins import run_inputs

    task = VALIDATED_TASK
    evaluated = (task["eval_generation"], task["metrics"], "sha-val") if eval_every else ()
    return checkpoints.run_key("ppo", {"eval_every": eval_every}, task["reward"],
                               run_inputs(task, task["reward"], task["metrics"] if evaluated else None, root),
                               "sha-model", 0, *evaluated)


def _warm_start_key(root: Path) -> str:
    """warm_start's run key for ``VALIDATED_TASK`` in project ``root`` (validating), its other parts held fixed."""
    from grueflow.plugins import run_inputs

    task = VALIDATED_TASK
    return checkpoints.run_key({"eval_every": 1}, "sha-model", 0, task["eval_generation"], task["metrics"],
                               run_inputs(task, None, task["metrics"], root))


@pytest.mark.parametrize("key", [_rl_key, _warm_start_key], ids=["rl_finetune", "warm_start"])
@pytest.mark.parametrize("path, content", [
    ("my_metric.py", "import metric_helper\nclass Mine:\n    FIXED = True\n"),  # the metric plugin fixed
    ("metric_helper.py", "SCALE = 0.5\n"),  # a module the metric plugin imports
    ("my_post.py", "def strip(text):\n    return text.strip().lower()\n"),  # the evaluation's post-processing
    ("judge/weights.bin", "b"),  # the classifier a metric's args name, retrained
])
def test_a_validating_runs_key_changes_with_the_code_and_files_its_validation_runs(tmp_path, key, path, content):
    _validated_project(tmp_path)
    before = key(tmp_path)
    assert key(tmp_path) == before  # nothing changed: the same run, resumed
    (tmp_path / "unrelated.py").write_text("X = 1\n")  # a project file no part of the run names
    assert key(tmp_path) == before
    (tmp_path / path).write_text(content)
    assert key(tmp_path) != before


def test_a_run_that_does_not_validate_keeps_its_key_when_the_validation_code_changes(tmp_path):
    from grueflow.plugins import run_inputs

    _validated_project(tmp_path)
    assert sorted(run_inputs(VALIDATED_TASK, None, VALIDATED_TASK["metrics"], tmp_path)) == \
        ["judge", "metric_helper.py", "my_metric.py", "my_post.py"]  # what validation runs and reads
    assert run_inputs(VALIDATED_TASK, None, None, tmp_path) == {}
    before = _rl_key(tmp_path, eval_every=0)
    (tmp_path / "my_metric.py").write_text("class Mine:\n    FIXED = True\n")
    (tmp_path / "my_post.py").write_text("def strip(text):\n    return text\n")
    (tmp_path / "judge" / "weights.bin").write_bytes(b"b")
    assert _rl_key(tmp_path, eval_every=0) == before  # its weights do not depend on them: it resumes
