"""The algorithm interface: the trainer calls the hooks of ``Algorithm`` and probes nothing; every registered
algorithm subclasses it and overrides only hooks it declares; a new algorithm is one class plus one registration;
TRPO's update and NLPO's setup get narrow views, never the trainer."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest
import torch

import grueflow.rl.trainer as trainer_module
from grueflow.config import GenerationConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.registry import Registry
from grueflow.rl import ALGORITHMS, AlgorithmSpec
from grueflow.rl.advantages import masked_mean
from grueflow.rl.algorithm import Algorithm, PolicyHandle, UpdateContext
from grueflow.rl.configs import RLConfig
from grueflow.rl.objectives import MiniBatch, Outputs
from grueflow.rl.trainer import RLTrainer
from grueflow.rl.trpo import TRPO
from grueflow.seeding import seed_everything

RL_DIR = Path(__file__).resolve().parents[2] / "grueflow" / "rl"
HOOKS = {"uses_critic", "needs_double_backward", "own_update", "masks_actions", "setup", "optimized_parameters",
         "before_rollout", "generation_processor", "advantages", "loss", "update", "state_dict", "load_state_dict"}
OVERRIDES = {  # what each registered algorithm changes of the defaults
    "a2c": {"uses_critic", "advantages", "loss"},
    "grpo": {"advantages"},
    "nlpo": {"uses_critic", "advantages", "loss", "masks_actions", "setup", "before_rollout", "generation_processor",
             "state_dict", "load_state_dict"},
    "ppo": {"uses_critic", "advantages", "loss"},
    "reinforce_pp": {"advantages"},
    "rloo": {"advantages"},
    "trpo": {"uses_critic", "needs_double_backward", "own_update", "optimized_parameters", "advantages", "update"},
}


def test_the_base_class_names_every_hook():
    public = {name for name in vars(Algorithm) if not name.startswith("_")}
    assert public == HOOKS


def test_nothing_in_grueflow_rl_probes_an_algorithm_with_hasattr_or_getattr():
    probes = []
    for path in sorted(RL_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
                probes.append((path.name, ast.unparse(node)))
    hook_probes = [(file, call) for file, call in probes
                   if "algorithm" in call or any(f"'{hook}'" in call for hook in HOOKS)]
    assert hook_probes == []
    assert probes == [("__init__.py", "getattr(importlib.import_module(module), name)")]  # AlgorithmSpec.load


@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_each_algorithm_subclasses_the_base_and_overrides_only_declared_hooks(name):
    cls = ALGORITHMS.get(name).load()
    assert issubclass(cls, Algorithm)
    own = {attr for klass in cls.__mro__[:cls.__mro__.index(Algorithm)] for attr in vars(klass)
           if not attr.startswith("_")}
    assert own == OVERRIDES[name]
    for hook in own:
        if callable(vars(Algorithm)[hook]):  # an override keeps the hook's parameters
            assert (list(inspect.signature(getattr(cls, hook)).parameters)
                    == list(inspect.signature(vars(Algorithm)[hook]).parameters)), hook
    assert cls.own_update == ("update" in own) and cls.masks_actions == ("generation_processor" in own)


def test_an_undeclared_override_fails_when_the_class_is_defined():
    with pytest.raises(TypeError, match=r"Sneaky sets own_update = False but overrides update\(\); "
                                        r"set own_update = True, or drop update\(\)"):
        class Sneaky(Algorithm):
            def advantages(self, rewards, values, mask, scores):
                return rewards, rewards

            def update(self, context, rollout, advantages, returns):
                return {}


def test_a_registered_class_that_is_not_an_algorithm_is_refused():
    with pytest.raises(TypeError, match="grueflow.rl.kl:KLController is registered as an algorithm but is not"):
        AlgorithmSpec(RLConfig, "grueflow.rl.kl:KLController").load()


class ConstantBaselineReinforce(Algorithm):
    """REINFORCE with a constant baseline: every token's advantage is its sequence's reward minus 0.5."""

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        advantages = (rewards.sum(1, keepdim=True) - 0.5) * mask
        return advantages, advantages

    def loss(self, new: Outputs, batch: MiniBatch, kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
        loss = -masked_mean(batch.advantages * new.logprobs, batch.mask)
        return loss, {"losses/policy": loss.item(), "losses/approx_kl": 0.0}


def make_trainer(path: Path, algorithm: str, settings: dict) -> RLTrainer:
    loader = DATAPOOLS.get("synthetic_sentiment")
    samples = loader.build(loader.Args(n_train=16, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    seed_everything(0)
    model, tokenizer = load_pretrained(path)
    cfg = parse(trainer_module.ALGORITHMS.get(algorithm).Config, settings, algorithm)
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "diversity", "score": "length", "weight": -0.1}]},
                          "reward"), MetricContext())
    return RLTrainer(algorithm, cfg, Policy(model, tokenizer, 24), load_pretrained(path)[0], reward, samples,
                     GenerationConfig(max_new_tokens=6), seed=0)


SETTINGS = {"iterations": 2, "rollouts_per_iteration": 8, "minibatch_size": 4, "epochs": 1, "learning_rate": 1e-2}


def test_a_new_algorithm_is_one_class_and_one_registration(tiny_models, monkeypatch):
    registry: Registry[AlgorithmSpec] = Registry("algorithm")
    registry.register("constant_baseline", "REINFORCE with a constant baseline")(
        AlgorithmSpec(RLConfig, f"{__name__}:ConstantBaselineReinforce"))
    monkeypatch.setattr(trainer_module, "ALGORITHMS", registry)
    trainer = make_trainer(tiny_models["causal"], "constant_baseline", SETTINGS)
    assert type(trainer.algorithm) is ConstantBaselineReinforce and trainer.value_head is None
    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    curve = trainer.train().curve
    assert [row["iteration"] for row in curve] == [1, 2]
    assert all(torch.isfinite(torch.tensor(row["losses/policy"])) for row in curve)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.model.parameters()))


def test_trpo_updates_through_the_narrow_context_and_nlpo_sets_up_from_a_policy_handle(tiny_models, monkeypatch):
    assert UpdateContext._fields == ("policy_parameters", "policy_logits", "critic_hidden", "value_head",
                                     "optimizer_step")
    assert PolicyHandle._fields == ("model", "kind", "special_ids", "backend")
    assert typing.get_type_hints(TRPO.update)["context"] is UpdateContext
    contexts = []
    update = TRPO.update
    monkeypatch.setattr(TRPO, "update", lambda self, context, *rest: contexts.append(context) or update(
        self, context, *rest))
    settings = {k: v for k, v in SETTINGS.items() if k != "epochs"}  # TRPO takes one step per rollout
    trainer = make_trainer(tiny_models["causal"], "trpo", {**settings, "iterations": 1, "minibatch_size": 8,
                                                           "n_critic_updates": 1})
    trainer.train()
    assert [type(c) for c in contexts] == [UpdateContext]
    assert not hasattr(contexts[0], "optimizer") and not hasattr(contexts[0], "trainer")
    nlpo = make_trainer(tiny_models["causal"], "nlpo", SETTINGS)
    assert isinstance(nlpo.algorithm.policy, PolicyHandle) and nlpo.algorithm.policy.model is nlpo.policy.model
    for algorithm in (trainer.algorithm, nlpo.algorithm):  # no algorithm holds the trainer
        assert not any(isinstance(value, RLTrainer) for value in vars(algorithm).values())
