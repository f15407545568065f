"""Reinforcement learning on whole sequences: the trainer, KL control, advantages, algorithms."""

from grueflow.registry import Registry

ALGORITHMS: Registry = Registry("algorithm")

from grueflow.rl import ppo  # noqa: E402,F401  (registers ppo)

__all__ = ["ALGORITHMS"]
