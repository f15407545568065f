"""Critic-free algorithms on the same trainer: GRPO, RLOO and REINFORCE++.

They differ only in the advantage estimator; the update is :class:`~grueflow.rl.algorithm.Algorithm`'s default
loss, the clipped surrogate of :func:`grueflow.rl.objectives.policy_objective`, with the KL in the reward or in
the loss.
"""

from __future__ import annotations

import torch

from grueflow.rl.advantages import masked_whiten
from grueflow.rl.algorithm import Algorithm
from grueflow.rl.configs import GroupConfig, ReinforcePPConfig


def group_normalised(scores: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: ``(r_i - mean(group)) / (std(group) + eps)``, std with Bessel's correction.  (B,) -> (B,)"""
    groups = scores.view(-1, group_size)
    normalised = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + eps)
    return normalised.view(-1)


def leave_one_out(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO: ``r_i - mean_{j != i} r_j`` within each prompt's group.  (B,) -> (B,)"""
    groups = scores.view(-1, group_size)
    baseline = (groups.sum(1, keepdim=True) - groups) / (group_size - 1)
    return (groups - baseline).view(-1)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma G_{t+1}`` over each sequence's masked tokens.  (B, T) -> (B, T)"""
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = (rewards[:, t] + gamma * running) * mask[:, t]
        returns[:, t] = running
    return returns


class _SequenceLevel(Algorithm):
    """Every token of a completion gets one advantage: its sequence reward against its group's.

    The sequence reward is the task score, minus the summed KL penalty when the KL is in the reward.
    """

    cfg: GroupConfig

    def _baseline_adjusted(self, sequence_rewards: torch.Tensor) -> torch.Tensor:
        """Each sequence's reward against its group's baseline.  (B,) -> (B,)"""
        raise NotImplementedError

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        advantages = self._baseline_adjusted(rewards.sum(1)).unsqueeze(1) * mask
        return advantages, advantages


class GRPO(_SequenceLevel):
    """Group-normalised: ``(r - mean(group)) / std(group)``."""

    def _baseline_adjusted(self, sequence_rewards: torch.Tensor) -> torch.Tensor:
        return group_normalised(sequence_rewards, self.cfg.group_size)


class RLOO(_SequenceLevel):
    """Leave-one-out: ``r - mean(the group's others)``."""

    def _baseline_adjusted(self, sequence_rewards: torch.Tensor) -> torch.Tensor:
        return leave_one_out(sequence_rewards, self.cfg.group_size)


class ReinforcePP(Algorithm):
    """Token returns of the KL-penalised rewards, whitened over the whole batch (not per group)."""

    cfg: ReinforcePPConfig

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        returns = discounted_returns(rewards, mask, self.cfg.gamma)
        return masked_whiten(returns, mask), returns
