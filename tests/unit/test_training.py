"""The resumable-training skeleton (grueflow/training.py) and the DPO and reward-model checkpoints it resumes
(in-process here; killed and rerun as stages in tests/stages/test_resumable_training.py)."""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from grueflow import checkpoints
from grueflow.config import LoraConfig
from grueflow.models import load_pretrained
from grueflow.models.lora import trainable_state, with_lora
from grueflow.models.policy import Policy
from grueflow.preference.config import DPOConfig, RewardModelConfig
from grueflow.preference.data import Preference
from grueflow.preference.dpo import DPOTrainer, checkpoint_due
from grueflow.preference.reward_model import RewardModelTrainer, load_backbone
from grueflow.seeding import seed_everything
from grueflow.training import Tracking, TrainingRun


class Killed(Exception):
    """Stands in for a SIGKILL right after a checkpoint."""


def kill_after_first_checkpoint(resume_dir: Path, key: str):
    def checkpoint(trainer) -> None:
        trainer.save_checkpoint(resume_dir, key)
        raise Killed
    return checkpoint


def pairs(n: int) -> list[Preference]:
    rng = random.Random(0)
    good, bad = ["great", "fine", "good", "lovely"], ["dull", "slow", "bad", "awful"]
    return [Preference(f"p{i}", "the film was", f"{rng.choice(good)} {rng.choice(good)} .",
                       f"{rng.choice(bad)} .") for i in range(n)]


# -- DPO ---------------------------------------------------------------------------------------------


def lora_dpo(path: Path, checkpoint_every: int = 0) -> DPOTrainer:
    seed_everything(0)
    model, tokenizer = load_pretrained(path)
    policy = Policy(with_lora(model, LoraConfig(r=4, alpha=8.0, target_modules=("c_attn",))), tokenizer, 16)
    cfg = DPOConfig(beta=0.5, learning_rate=1e-2, epochs=2, batch_size=4, lora=LoraConfig(r=4, alpha=8.0))
    return DPOTrainer(policy, None, pairs(10), cfg, max_target=8, seed=0, checkpoint_every=checkpoint_every)


def test_dpo_checkpoints_after_each_epoch_and_every_n_steps():
    assert [checkpoint_due(step, 3, 0) for step in range(1, 7)] == [False, False, True, False, False, True]
    assert [checkpoint_due(step, 3, 2) for step in range(1, 7)] == [False, True, True, True, False, True]


def test_a_lora_dpo_run_resumed_mid_epoch_from_its_adapter_checkpoint_matches_a_straight_run(tiny_models, tmp_path):
    straight = lora_dpo(tiny_models["causal"])
    curve = straight.train()
    assert [row["step"] for row in curve] == [1, 2, 3, 4, 5, 6] and [row["epoch"] for row in curve] == [1, 1, 1, 2, 2, 2]

    killed = lora_dpo(tiny_models["causal"], checkpoint_every=2)
    with pytest.raises(Killed):
        killed.train(checkpoint=kill_after_first_checkpoint(tmp_path / "dpo.resume", "k"))
    saved = tmp_path / "dpo.resume" / "step2"  # mid-epoch: the epoch's order and the step say what comes next
    assert sorted(p.name for p in saved.iterdir()) == ["adapter_model.safetensors", "checkpoint.json",
                                                       "trainer_state.pt"]
    resumed = lora_dpo(tiny_models["causal"])  # reseeds, and checkpoints on another schedule: same result
    assert resumed.resume(tmp_path / "dpo.resume", "other run") is None
    assert resumed.resume(tmp_path / "dpo.resume", "k") == saved and resumed.state.step == 2
    assert resumed.train() == curve
    expected = trainable_state(straight.policy.model)
    assert all(torch.equal(tensor, expected[name]) for name, tensor in trainable_state(resumed.policy.model).items())


# -- the reward model ---------------------------------------------------------------------------------


def reward_trainer(path: Path) -> RewardModelTrainer:
    seed_everything(0)
    model, tokenizer = load_backbone(path)
    cfg = RewardModelConfig(epochs=3, batch_size=4, learning_rate=3e-3, val_fraction=0.2, max_length=16, seed=0)
    return RewardModelTrainer(model, tokenizer, pairs(10), cfg)


def test_a_reward_model_resumed_from_an_epoch_checkpoint_matches_a_straight_run(tiny_models, tmp_path):
    straight = reward_trainer(tiny_models["causal"])
    assert straight.model.config.resid_pdrop > 0  # dropout draws from torch's RNG: the checkpoint must carry it
    curve = straight.train()

    killed = reward_trainer(tiny_models["causal"])
    with pytest.raises(Killed):
        killed.train(checkpoint=kill_after_first_checkpoint(tmp_path / "rm.resume", "k"))
    saved = tmp_path / "rm.resume" / "epoch1"
    assert sorted(p.name for p in saved.iterdir()) == ["checkpoint.json", "model.safetensors", "trainer_state.pt"]
    resumed = reward_trainer(tiny_models["causal"])
    assert resumed.resume(tmp_path / "rm.resume", "k") == saved and resumed.state.epoch == 1
    assert resumed.train() == curve
    assert resumed.final_metrics() == straight.final_metrics()
    weights = dict(straight.model.named_parameters())
    assert all(torch.equal(p, weights[n]) for n, p in resumed.model.named_parameters())


# -- the skeleton, on a trainer without a model -------------------------------------------------------


@dataclass
class CountState:
    step: int = 0
    curve: list[dict[str, float]] = field(default_factory=list)


class Counter(checkpoints.Checkpointed):
    """Adds a draw from Python's global RNG to a running total, ``total`` times; a checkpoint every step."""

    unit = "step"

    def __init__(self, total: int, kill_at: int = 0) -> None:
        self.total, self.kill_at, self.state, self.sum = total, kill_at, CountState(), 0.0

    def train(self, checkpoint=None, progress=None) -> list[dict[str, float]]:
        while self.state.step < self.total:
            self.sum += random.random()
            self.state.step += 1
            row = {"step": self.state.step, "sum": round(self.sum, 6)}
            self.state.curve.append(row)
            if checkpoint:
                checkpoint(self)
            if progress:
                progress(row)
            if self.state.step == self.kill_at:
                raise Killed
        return self.state.curve

    def checkpoint_step(self) -> int:
        return self.state.step

    def save_to(self, folder: Path, key: str) -> None:
        checkpoints.save_state(folder, {"step": self.state.step, "curve": self.state.curve, "sum": self.sum,
                                        "rng": random.getstate()})

    def load(self, folder: Path) -> None:
        saved = checkpoints.load_state(folder)
        self.state, self.sum = CountState(saved["step"], saved["curve"]), saved["sum"]
        random.setstate(saved["rng"])


def counter_run(out: Path, trainer: Counter, threads: int = 1) -> list[dict[str, float]]:
    args = argparse.Namespace(out=out, resume_dir=None, threads=threads, device="cpu", precision="fp32")
    run = TrainingRun.start("counter", args, 0.0, seed=3)
    curve = run.train(trainer, "k", trainer.total, "step", "counting", Tracking())
    run.finish(lambda folder: (folder / "curve.json").write_text(json.dumps(curve)), {"total": trainer.total}, {})
    return curve


def test_the_skeleton_resumes_replays_the_tracking_log_writes_atomically_and_cleans_up(tmp_path):
    straight = counter_run(tmp_path / "straight", Counter(5))
    out = tmp_path / "killed"
    with pytest.raises(Killed):
        counter_run(out, Counter(5, kill_at=2))
    assert not out.exists() and (tmp_path / "killed.resume" / "step2" / "checkpoint.json").is_file()
    assert counter_run(out, Counter(5)) == straight  # the RNG came from the checkpoint, not the reseed
    assert not (tmp_path / "killed.resume").exists()
    assert sorted(p.name for p in out.iterdir()) == ["curve.json", "dvclive", "provenance.json", "stage.json"]
    for name in ("dvclive/metrics.json", "dvclive/plots/metrics/sum.tsv"):
        assert (out / name).read_bytes() == (tmp_path / "straight" / name).read_bytes()
    assert json.loads((out / "stage.json").read_text())["params"] == {"total": 5}


def test_a_run_resumed_on_another_thread_count_says_so_and_provenance_records_each_part(tmp_path, caplog):
    """A run resumed with another --threads ends in numbers neither thread count gives uninterrupted, and its
    provenance.json said only the new count and the resumed part's wall time. Each checkpoint now records the parts
    that led to it, a resumed run's provenance.json lists them, and a changed count is said in one line; the
    checkpoint is resumed all the same, and stage.json (what identifies the content) does not change."""
    import logging

    def parts(folder: Path) -> list[dict]:
        found = json.loads((folder / "provenance.json").read_text())["parts"]
        assert isinstance(found[0].pop("wall_time_s"), float) and found[1].pop("wall_time_s") is None
        return found

    cpu = {"device": "cpu", "precision": "fp32"}
    threads = torch.get_num_threads()
    try:
        straight = counter_run(tmp_path / "straight", Counter(5))
        out = tmp_path / "killed"
        with pytest.raises(Killed):
            counter_run(out, Counter(5, kill_at=2))
        meta = checkpoints.meta(tmp_path / "killed.resume" / "step2")
        assert meta["parts"][0]["wall_time_s"] > 0
        assert [{k: v for k, v in part.items() if k != "wall_time_s"} for part in meta["parts"]] == [
            {"from": "step0", **cpu, "threads": 1}]
        with caplog.at_level(logging.INFO, logger="grueflow.training"):
            assert counter_run(out, Counter(5), threads=2) == straight
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
            "resumed a run started with 1 thread on 2 threads: its numbers will differ in the last digits from an "
            "uninterrupted run of either"]
        assert parts(out) == [{"from": "step0", **cpu, "threads": 1}, {"from": "step2", **cpu, "threads": 2}]
        provenance = json.loads((out / "provenance.json").read_text())
        assert provenance["execution"]["threads"] == 2
        record = json.loads((out / "stage.json").read_text())
        assert "parts" not in record and record["params"] == {"total": 5}

        caplog.clear()  # the same count: resumed without a word, and recorded alike
        with pytest.raises(Killed):
            counter_run(out, Counter(5, kill_at=3), threads=2)
        with caplog.at_level(logging.WARNING, logger="grueflow.training"):
            counter_run(out, Counter(5), threads=2)
        assert not caplog.records
        assert parts(out) == [{"from": "step0", **cpu, "threads": 2}, {"from": "step3", **cpu, "threads": 2}]
        assert "parts" not in json.loads((tmp_path / "straight" / "provenance.json").read_text())
    finally:
        torch.set_num_threads(threads)


def test_the_warm_start_keeps_the_samples_its_train_where_names():
    from grueflow.data import Sample
    from grueflow.io import DataError
    from grueflow.supervised import select_samples

    samples = [Sample(f"train-{i}", "p", ("r",), {"label": i % 2}) for i in range(6)]
    assert [s.id for s in select_samples(samples, {"label": 1}, "train")] == ["train-1", "train-3", "train-5"]
    assert select_samples(samples, {}, "train") == samples
    with pytest.raises(DataError, match=r"train_where \{'label': 2\}: no val sample matches it \(of 6\); .*\['label'\]"):
        select_samples(samples, {"label": 2}, "val")


def test_a_warm_start_names_the_split_whose_samples_have_no_reference():
    from grueflow.data import Sample
    from grueflow.io import DataError
    from grueflow.supervised import SupervisedTrainer, pairs

    train = [Sample(f"train-{i}", f"p{i}", ("r",), {}) for i in range(3)]
    val = [Sample(f"val-{i}", f"p{i}", (), {}) for i in range(2)]
    assert pairs(train, "train") == [("p0", "r"), ("p1", "r"), ("p2", "r")]
    with pytest.raises(DataError) as refused:
        SupervisedTrainer(None, train, val, None, max_target=8, seed=0)  # refused before the policy is touched
    assert str(refused.value) == ("the val split has no (prompt, reference) pairs: none of its 2 samples (after "
                                  "train_where) has a reference; the warm start needs references in both the train "
                                  "and the val split: give a datapool whose val samples have references")
    with pytest.raises(DataError, match=r"^the train split has no \(prompt, reference\) pairs: none of its 2 "):
        pairs(val, "train")


@pytest.mark.parametrize("resume, expect", [
    ("seed0", "--resume-dir {resume} is --out {out}: "),
    (".", "--out {out} lies inside --resume-dir {resume}: "),
    ("seed0/ckpt", "--resume-dir {resume} lies inside --out {out}: "),  # --out's swap and then its deletion
    ("seed0/dvclive", "--resume-dir {resume} lies inside --out {out}: "),  # would delete the new output's log
], ids=["the-output", "holding-the-output", "inside-the-output", "an-output-subfolder"])
def test_a_resume_folder_that_is_holds_or_lies_inside_the_output_is_refused_before_any_work(tmp_path, resume, expect):
    """finish() replaces --out whole and then deletes the resume folder: with one in the other, a run exited 0 and
    its finished output was gone. Refused when the run starts, naming both; the output stays as it was."""
    from grueflow.config import ConfigError

    out = tmp_path / "seed0"
    counter_run(out, Counter(2))
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    resume_dir = tmp_path / resume
    args = argparse.Namespace(out=out, resume_dir=resume_dir, threads=1, device="cpu", precision="fp32")
    with pytest.raises(ConfigError) as refused:
        TrainingRun.start("counter", args, 0.0, seed=3)
    assert str(refused.value) == expect.format(resume=resume_dir, out=out) + (
        "the resume folder is deleted when the run finishes and --out is replaced whole, so one would delete the "
        "other; give a --resume-dir apart from --out (default: <out>.resume)")
    assert sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file()) == before
    link = tmp_path / "link"  # the same folder under another name is the same folder
    link.symlink_to(out)
    with pytest.raises(ConfigError, match=r"is --out .*: the resume folder is deleted"):
        TrainingRun.start("counter", argparse.Namespace(out=link, resume_dir=out, threads=1, device="cpu",
                                                        precision="fp32"), 0.0, seed=3)
    beside = argparse.Namespace(out=out, resume_dir=tmp_path / "seed0-ckpt", threads=1, device="cpu", precision="fp32")
    assert TrainingRun.start("counter", beside, 0.0, seed=3).resume_dir == tmp_path / "seed0-ckpt"  # a name prefix


def test_an_rl_run_never_resumes_a_checkpoint_of_other_task_lengths(tiny_models, tmp_path, monkeypatch):
    """lengths.prompt truncates every prompt the policy sees, so it is part of rl_finetune's resume key: with it
    changed from 24 to 8, a run resumed the 24-token checkpoint silently. So is the base model (a fluency reward
    scores with it). Each run's key, as the stage builds it, is caught where training would begin."""
    import shutil

    import importlib.util
    import sys

    import yaml

    from grueflow.stage import main_guard
    from tests.conftest import MICRO, ROOT

    def call(name: str, *args) -> None:
        path = ROOT / "stages" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"stages_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setattr(sys, "argv", [str(path), *map(str, args), "--log-level", "WARNING"])
        main_guard(module.main)

    class Caught(Exception):
        """Stops the stage where it would resume, holding the run key."""

    def caught(run, trainer, key, *args, **kwargs):
        raise Caught(key)

    call("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", tmp_path / "pool")
    monkeypatch.setattr(TrainingRun, "train", caught)
    keys = []
    other_base = tmp_path / "other_base"
    shutil.copytree(tiny_models["causal"], other_base)
    (other_base / "generation_config.json").write_text('{"do_sample": true}')  # another base model's files
    for prompt, base in ((24, tiny_models["causal"]), (24, tiny_models["causal"]), (8, tiny_models["causal"]),
                         (24, other_base)):
        task = yaml.safe_load((MICRO / "tasks" / "sentiment.yaml").read_text())
        task["lengths"]["prompt"] = prompt
        (tmp_path / "sentiment.yaml").write_text(yaml.safe_dump(task))
        with pytest.raises(Caught) as stopped:
            call("rl_finetune", "--task-file", tmp_path / "sentiment.yaml", "--algorithm", "ppo", "--method-file",
                 MICRO / "methods" / "ppo.yaml", "--datapool", tmp_path / "pool", "--init-model", tiny_models["causal"],
                 "--base-model", base, "--seed", "0", "--out", tmp_path / "rl")
        keys.append(stopped.value.args[0])
    assert keys[0] == keys[1] and keys[2] != keys[0] and keys[3] not in (keys[0], keys[2])
    root = tmp_path / "rl.resume"  # so the 24-token run's checkpoint is not the 8-token run's to resume
    checkpoints.save(root, "iteration", 1, keys[0], lambda folder: (folder / "x").write_text("x"), keep=1)
    assert checkpoints.latest(root, "iteration", keys[2]) is None


# -- the warm start: non-finite losses, train_where, cut references ----------------------------------------------


def warm_start_trainer(path: Path, **settings):
    from grueflow.config import SupervisedConfig
    from grueflow.data import Sample
    from grueflow.params import parse
    from grueflow.supervised import SupervisedTrainer

    seed_everything(0)
    train = [Sample(f"train-{i}", f"the film {i} was", ("good and fine .",), {}) for i in range(6)]
    val = [Sample(f"val-{i}", f"the play {i} was", ("dull .",), {}) for i in range(2)]
    cfg = parse(SupervisedConfig, {"epochs": 2, "batch_size": 4, **settings}, "supervised.yaml:")
    model, tokenizer = load_pretrained(path)
    return SupervisedTrainer(Policy(model, tokenizer, 16), train, val, cfg, max_target=8, seed=0)


def weights(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}


def test_a_warm_start_stops_on_a_non_finite_train_loss_before_the_optimiser_step(tiny_models, monkeypatch):
    from grueflow.supervised import NonFiniteLossError

    trainer = warm_start_trainer(tiny_models["causal"])
    before = weights(trainer)
    monkeypatch.setattr(trainer, "batch_loss", lambda chunk: (torch.tensor(float("nan"), requires_grad=True),
                                                              float("nan")))
    saved = []
    with pytest.raises(NonFiniteLossError) as err:
        trainer.train(checkpoint=saved.append)
    assert str(err.value) == ("non-finite train loss at epoch 1, step 1 of 2: the weights were not updated with it; "
                              "training diverged: lower learning_rate (it is 0.001)")
    assert err.value.epoch == 1 and saved == [] and trainer.state.curve == []
    assert all(torch.equal(p, before[n]) for n, p in weights(trainer).items())


def test_a_warm_start_stops_on_a_non_finite_gradient_before_the_optimiser_step(tiny_models):
    from grueflow.supervised import NonFiniteLossError

    trainer = warm_start_trainer(tiny_models["causal"], learning_rate=0.01)
    before = weights(trainer)
    next(trainer.policy.model.parameters()).register_hook(lambda grad: grad * float("inf"))
    with pytest.raises(NonFiniteLossError, match=r"^non-finite gradient norm at epoch 1, step 1 of 2: the weights "
                                                 r"were not updated with it; training diverged: lower learning_rate "
                                                 r"\(it is 0.01\)$"):
        trainer.train()
    assert all(torch.equal(p, before[n]) for n, p in weights(trainer).items())


def test_a_warm_start_stops_on_a_non_finite_val_loss_before_that_epoch_is_checkpointed(tiny_models, monkeypatch):
    from grueflow import supervised

    trainer = warm_start_trainer(tiny_models["causal"], learning_rate=1e30)  # the first step already diverges
    with pytest.raises(supervised.NonFiniteLossError) as err:
        trainer.train()
    assert str(err.value).startswith("non-finite train loss at epoch 1, step 2 of 2: ")
    assert str(err.value).endswith("lower learning_rate (it is 1e+30)")

    trainer = warm_start_trainer(tiny_models["causal"])
    monkeypatch.setattr(supervised, "validation_loss", lambda *args: float("inf"))
    saved = []
    with pytest.raises(supervised.NonFiniteLossError) as err:
        trainer.train(checkpoint=saved.append)
    assert str(err.value) == ("non-finite val loss at epoch 1 (after its 2 steps): this epoch's weights were not "
                              "checkpointed; training diverged: lower learning_rate (it is 0.001)")
    assert saved == [] and trainer.state.curve == [] and trainer.state.epoch == 0


@pytest.mark.parametrize("where, kept", [
    ({"label": 1}, ["train-1", "train-3"]),
    ({"label": True}, []),  # a boolean is not the integer 1
    ({"label": 1.0}, []),  # nor is a number with a fraction part written
    ({"label": "1"}, []),
    ({"flag": True}, ["train-0"]),
    ({"flag": 1}, []),
])
def test_train_where_matches_a_value_only_with_its_type(where, kept):
    from grueflow.data import Sample
    from grueflow.io import DataError
    from grueflow.supervised import select_samples

    samples = [Sample(f"train-{i}", "p", ("r",), {"label": i % 2, "flag": i == 0}) for i in range(4)]
    if kept:
        assert [s.id for s in select_samples(samples, where, "train")] == kept
        return
    value = next(iter(where.values()))
    with pytest.raises(DataError, match=f"not {value!r} \\((boolean|number|string|integer)\\): write train_where's "
                                        f"values with the data's types"):
        select_samples(samples, where, "train")


def test_train_where_logs_how_many_train_and_val_samples_it_kept(caplog):
    from grueflow.data import Sample
    from grueflow.supervised import select_splits

    train = [Sample(f"train-{i}", "p", ("r",), {"label": i % 2}) for i in range(6)]
    val = [Sample(f"val-{i}", "p", ("r",), {"label": i % 2}) for i in range(3)]
    with caplog.at_level("INFO", logger="grueflow.supervised"):
        kept = select_splits(train, val, {"label": 0})
    assert [len(split) for split in kept] == [3, 2]
    assert "train_where {'label': 0} kept 3 of 6 train samples, 2 of 3 val" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="grueflow.supervised"):
        assert select_splits(train, val, {}) == (train, val)
    assert "train_where" not in caplog.text


def test_the_warm_start_counts_the_references_lengths_target_cuts_once_per_split(tiny_models, caplog):
    from grueflow.supervised import log_cut_references

    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, 16)
    long = "good " * 20
    data = [("p", "good ."), ("p", long), ("p", long + "fine")]
    lengths = policy.target_lengths([t for _, t in data])
    assert lengths[1] > 7 and lengths[0] <= 7
    assert policy.encode_targets([long], 8).shape == (1, 8)  # the cut the count describes: 7 tokens and EOS
    with caplog.at_level("INFO", logger="grueflow.supervised"):
        assert log_cut_references(policy, data, 8, "train") == 2
        assert log_cut_references(policy, data[:1], 8, "val") == 0
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # more than half cut; none cut: no line
    assert caplog.records[0].getMessage() == (f"lengths.target = 8 cuts 2 of 3 train references to 7 tokens and EOS "
                                              f"(the longest has {lengths[2]} tokens); raise lengths.target to keep "
                                              f"them whole")
    caplog.clear()
    with caplog.at_level("INFO", logger="grueflow.supervised"):
        assert log_cut_references(policy, data + [("p", "good .")] * 2, 8, "val") == 2
    assert [r.levelname for r in caplog.records] == ["INFO"]


def test_a_policy_whose_last_update_diverged_is_never_handed_on(tiny_models):
    """rl_finetune saved a model whose logits were all NaN, exit 0, when its last update diverged after the checks
    on its loss and gradients; evaluate then ended in a traceback."""
    import torch

    from grueflow.models import load_pretrained
    from grueflow.models.policy import Policy
    from grueflow.training import check_trained_policy

    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=16)
    check_trained_policy(policy, ["a film", "the plot was"], "rl_finetune", 1e-4)  # finite: nothing happens
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(SystemExit, match=r"^error: rl_finetune: the trained model's logits are not finite: the last "
                                         r"update diverged; lower learning_rate \(it is 0.0001\) and rerun; the "
                                         r"output was not written \(earlier checkpoints stay in the resume folder\)$"):
        check_trained_policy(policy, ["a film", "the plot was"], "rl_finetune", 1e-4)
