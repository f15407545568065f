"""Model-running metrics and the preference trainers on a stage's execution, without a GPU: fp32 on the CPU
equals no execution, bf16 on the CPU loads frozen models in bf16 and stays close to fp32, and no tensor is
made off its device (PyTorch's default device set to ``meta`` while the models stay on the CPU)."""

from __future__ import annotations

import contextlib
import math
from typing import Optional

import pytest
import torch
from test_devices import meta_default
from test_metrics_library import tiny_classifier

from grueflow.device import Execution
from grueflow.metrics import METRICS, MetricContext, MetricResult
from grueflow.models import load_pretrained
from grueflow.models.backend import select
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.preference.config import DPOConfig, RewardModelConfig
from grueflow.preference.data import Preference
from grueflow.preference.dpo import DPOTrainer
from grueflow.preference.reward_model import RewardModel, load_backbone, save_reward_model, train_reward_model
from grueflow.seeding import seed_everything

CPU = torch.device("cpu")
FP32, BF16 = Execution(CPU, "fp32"), Execution(CPU, "bf16")
PROMPTS = ["the review:", "a film that", "it was"]
GENERATIONS = ["the acting was great .", "dull and slow", "a fine film ."]
REFERENCES = [["the acting was good ."], ["slow and dull"], ["a good film ."]]


@pytest.fixture(scope="module")
def metric_args(tiny_models, tmp_path_factory) -> dict[str, dict]:
    """Each model-running metric's args: tiny models built from config (seeded) and saved locally."""
    root = tmp_path_factory.mktemp("device_metrics")
    tiny_classifier(tiny_models["causal"], root / "sentiment", ["NEGATIVE", "POSITIVE"])
    tiny_classifier(tiny_models["causal"], root / "nli", ["entailment", "neutral", "contradiction"])
    torch.manual_seed(0)  # the reward model's fresh scalar head
    save_reward_model(*load_backbone(tiny_models["causal"]), RewardModelConfig(max_length=24), root / "reward_model")
    return {"bert_score": {}, "learned_classifier": {"model": str(root / "sentiment")},
            "summac_zs": {"model": str(root / "nli")}, "perplexity": {"model": str(tiny_models["causal"])},
            "reward_model": {"path": str(root / "reward_model")}}


def build(metric_id: str, args: dict, execution: Optional[Execution]):
    metric = METRICS.get(metric_id)
    return metric.build(parse(metric.Args, args, "args"), MetricContext(execution=execution))


def scores(result: MetricResult) -> list[float]:
    return [v for values in result.per_sample.values() for v in values]


@pytest.mark.parametrize("metric_id", ["bert_score", "learned_classifier", "summac_zs", "perplexity", "reward_model"])
def test_fp32_on_the_cpu_equals_no_execution_and_bf16_stays_close(metric_args, metric_id):
    default = scores(build(metric_id, metric_args[metric_id], None)(PROMPTS, GENERATIONS, REFERENCES, [{}] * 3))
    fp32 = scores(build(metric_id, metric_args[metric_id], FP32)(PROMPTS, GENERATIONS, REFERENCES, [{}] * 3))
    bf16 = scores(build(metric_id, metric_args[metric_id], BF16)(PROMPTS, GENERATIONS, REFERENCES, [{}] * 3))
    assert fp32 == pytest.approx(default, abs=1e-5)
    assert all(math.isfinite(v) for v in bf16)
    if metric_id == "perplexity":  # exp of a mean NLL: bf16 rounding of the log-probs, relative
        assert bf16 == pytest.approx(fp32, rel=0.05)
    else:  # probabilities, P(entail) - P(contradict), cosines, an untrained scalar head
        assert bf16 == pytest.approx(fp32, abs=0.05)


def test_frozen_metric_models_load_in_the_executions_frozen_dtype(metric_args):
    from grueflow.metrics.semantic import load_classifier

    for execution, dtype in ((None, torch.float32), (FP32, torch.float32), (BF16, torch.bfloat16)):
        classifier = load_classifier(metric_args["learned_classifier"]["model"], 32, 4, execution)
        assert {p.dtype for p in classifier.model.parameters()} == {dtype}
        assert not any(p.requires_grad for p in classifier.model.parameters())
        assert classifier.logit_tensor(GENERATIONS).dtype == torch.float32  # upcast before the softmax
        reward_model = RewardModel(metric_args["reward_model"]["path"], execution=execution)
        assert {p.dtype for p in reward_model.model.parameters()} == {dtype}
    assert RewardModel(metric_args["reward_model"]["path"]).max_length == 24


@pytest.mark.parametrize("metric_id", ["learned_classifier", "summac_zs", "perplexity", "reward_model"])
def test_no_metric_tensor_is_made_off_its_device(metric_args, metric_id):
    """bert_score is left out: bert-score pads its batches in tensors made without a device and then moves
    them (``bert_score.utils.padding``), so it cannot run under a ``meta`` default device whatever grueflow
    passes it."""
    compute = build(metric_id, metric_args[metric_id], FP32)
    expected = compute(PROMPTS, GENERATIONS, REFERENCES, [{}] * 3)
    with meta_default():
        result = compute(PROMPTS, GENERATIONS, REFERENCES, [{}] * 3)
    assert scores(result) == pytest.approx(scores(expected), abs=1e-6)


def pairs(n: int) -> list[Preference]:
    good, bad = ["great", "fine", "good", "lovely"], ["dull", "slow", "bad", "awful"]
    return [Preference(f"p{i}", "the film was", f"{good[i % 4]} .", f"{bad[i % 4]} .", {"sample_id": f"p{i}"})
            for i in range(n)]  # one prompt, each pair a sample of its own: some can be held out


@pytest.mark.parametrize("execution", [FP32, BF16], ids=["fp32", "bf16"])
def test_the_reward_model_trains_float32_weights_with_a_float32_loss(tiny_models, execution):
    seed_everything(0)
    model, tokenizer = load_backbone(tiny_models["causal"], execution)
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # master weights, under bf16 too
    cfg = RewardModelConfig(epochs=1, batch_size=4, val_fraction=0.25, max_length=16, seed=0)
    with meta_default() if execution is FP32 else contextlib.nullcontext():
        curve, final = train_reward_model(model, tokenizer, pairs(8), cfg, execution=execution)
    assert final["n_train"] == 6 and final["n_val"] == 2
    assert all(math.isfinite(v) for row in curve for v in row.values())
    assert {p.dtype for p in model.parameters()} == {torch.float32}


@pytest.mark.parametrize("execution", [FP32, BF16], ids=["fp32", "bf16"])
def test_dpo_against_a_frozen_reference_on_the_execution(tiny_models, execution):
    seed_everything(0)
    backend = select(execution)
    model, tokenizer = load_pretrained(tiny_models["causal"], backend=backend)
    reference = load_pretrained(tiny_models["causal"], backend=backend, frozen=True)[0]
    assert {p.dtype for p in reference.parameters()} == {execution.frozen_dtype}
    trainer = DPOTrainer(Policy(model, tokenizer, 16, backend), reference, pairs(8),
                         DPOConfig(beta=0.5, learning_rate=1e-3, epochs=1, batch_size=4), max_target=8, seed=0)
    with meta_default() if execution is FP32 else contextlib.nullcontext():
        curve = trainer.train()
        final = trainer.evaluate(pairs(8))
    assert len(curve) == 2 and all(math.isfinite(v) for row in curve for v in row.values())
    assert all(math.isfinite(v) for v in final.values())
    assert {p.dtype for p in model.parameters()} == {torch.float32}
