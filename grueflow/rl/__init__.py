"""Reinforcement learning on whole sequences: the trainer, KL control, advantages, algorithms.

The registry holds light specs (the config class and where the implementation lives), so that
validating params never imports torch; :meth:`AlgorithmSpec.load` imports the implementation.

Adding an algorithm is one implementation file plus one registration:

1. ``grueflow/rl/<name>.py``: a subclass of :class:`grueflow.rl.algorithm.Algorithm` that implements
   ``advantages`` and overrides only the hooks it changes (its ``loss``, or ``update`` with
   ``own_update = True``; see that module for every hook, its default and its tensor shapes);
2. one ``ALGORITHMS.register("<name>", "<one line>")(AlgorithmSpec(<Config>, "grueflow.rl.<name>:<Class>"))``
   below. Its hyperparameters, if it adds any, are a frozen ``<Name>Config(RLConfig)`` in
   :mod:`grueflow.rl.configs` (torch-free); otherwise it registers :class:`~grueflow.rl.configs.RLConfig`.

The trainer (:class:`grueflow.rl.trainer.RLTrainer`) then runs it by name, from params as from tests.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from grueflow.registry import Registry
from grueflow.rl.configs import A2CConfig, GroupConfig, NLPOConfig, PPOConfig, ReinforcePPConfig, TRPOConfig


@dataclass(frozen=True)
class AlgorithmSpec:
    """A registered algorithm: its typed config and ``module:Class`` of its implementation."""

    Config: type
    implementation: str

    def load(self) -> type:
        """The implementation class (imports its module, and so torch)."""
        from grueflow.rl.algorithm import Algorithm

        module, name = self.implementation.split(":")
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise TypeError(f"{self.implementation} is registered as an algorithm but is not a subclass of "
                            "grueflow.rl.algorithm.Algorithm; subclass it")
        return cls


ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm")
ALGORITHMS.register("ppo", "PPO with a critic, GAE, clipped surrogate and an adaptive KL penalty in the reward")(
    AlgorithmSpec(PPOConfig, "grueflow.rl.ppo:PPO"))
ALGORITHMS.register("nlpo", "NLPO: PPO with top-p action masks from a lagged copy of the policy (RL4LMs)")(
    AlgorithmSpec(NLPOConfig, "grueflow.rl.nlpo:NLPO"))
ALGORITHMS.register("a2c", "A2C: n-step returns, a critic, one RMSprop step per rollout (no ratio clipping)")(
    AlgorithmSpec(A2CConfig, "grueflow.rl.a2c:A2C"))
ALGORITHMS.register("trpo", "TRPO: conjugate-gradient natural step with backtracking under a KL bound, a critic")(
    AlgorithmSpec(TRPOConfig, "grueflow.rl.trpo:TRPO"))
ALGORITHMS.register("grpo", "GRPO: group-normalised sequence advantages, no critic, KL (k3) in the loss")(
    AlgorithmSpec(GroupConfig, "grueflow.rl.critic_free:GRPO"))
ALGORITHMS.register("rloo", "RLOO: leave-one-out baseline over each prompt's group, no critic")(
    AlgorithmSpec(GroupConfig, "grueflow.rl.critic_free:RLOO"))
ALGORITHMS.register("reinforce_pp", "REINFORCE++: KL-penalised returns normalised over the batch, no critic")(
    AlgorithmSpec(ReinforcePPConfig, "grueflow.rl.critic_free:ReinforcePP"))

__all__ = ["ALGORITHMS", "AlgorithmSpec"]
