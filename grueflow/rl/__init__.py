"""Reinforcement learning on whole sequences: the trainer, KL control, advantages, algorithms.

The registry holds light specs (the config class and where the implementation lives), so that
validating params never imports torch; :meth:`AlgorithmSpec.load` imports the implementation.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from grueflow.config import PPOConfig
from grueflow.registry import Registry


@dataclass(frozen=True)
class AlgorithmSpec:
    """A registered algorithm: its typed config and ``module:Class`` of its implementation."""

    Config: type
    implementation: str

    def load(self) -> Any:
        module, name = self.implementation.split(":")
        return getattr(importlib.import_module(module), name)


ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm")
ALGORITHMS.register("ppo", "PPO with a critic, GAE, clipped surrogate and an adaptive KL penalty in the reward")(
    AlgorithmSpec(PPOConfig, "grueflow.rl.ppo:PPO"))

__all__ = ["ALGORITHMS", "AlgorithmSpec"]
