"""PPO (Schulman et al. 2017) on whole sequences: GAE advantages and the clipped surrogate loss."""

from __future__ import annotations

from typing import NamedTuple

import torch

from grueflow.config import PPOConfig
from grueflow.rl.advantages import gae, masked_mean, masked_whiten


class MiniBatch(NamedTuple):
    """A slice of a rollout, all (b, T) over completion tokens."""

    mask: torch.Tensor
    logprobs: torch.Tensor  # behaviour policy's log-probs at rollout time
    values: torch.Tensor  # critic's values at rollout time
    advantages: torch.Tensor
    returns: torch.Tensor


class Outputs(NamedTuple):
    """The current policy's outputs for a minibatch, (b, T) each."""

    logprobs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor


class PPO:
    """The PPO-specific parts of the trainer: GAE advantages and the clipped losses."""

    uses_critic = True

    def __init__(self, cfg: PPOConfig) -> None:
        self.cfg = cfg

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over per-token rewards; advantages whitened over the batch if configured.  (B, T) each."""
        advantages, returns = gae(rewards, values, mask, self.cfg.gamma, self.cfg.gae_lambda)
        if self.cfg.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        return advantages, returns

    def loss(self, new: Outputs, batch: MiniBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Clipped surrogate + (clipped) value loss - entropy bonus; returns the loss and diagnostics."""
        cfg, mask = self.cfg, batch.mask
        log_ratio = (new.logprobs - batch.logprobs) * mask
        ratio = log_ratio.exp()
        pg_losses = -batch.advantages * ratio
        pg_losses_clipped = -batch.advantages * ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range)
        policy_loss = masked_mean(torch.max(pg_losses, pg_losses_clipped), mask)
        value_losses = (new.values - batch.returns) ** 2
        if cfg.clip_range_vf is not None:
            clipped = batch.values + (new.values - batch.values).clamp(-cfg.clip_range_vf, cfg.clip_range_vf)
            value_losses = torch.max(value_losses, (clipped - batch.returns) ** 2)
        value_loss = 0.5 * masked_mean(value_losses, mask)
        entropy = masked_mean(new.entropy, mask)
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        with torch.no_grad():
            stats = {
                "losses/policy": policy_loss.item(),
                "losses/value": value_loss.item(),
                "losses/entropy": entropy.item(),
                "losses/approx_kl": masked_mean((ratio - 1) - log_ratio, mask).item(),
                "losses/clip_fraction": masked_mean(((ratio - 1).abs() > cfg.clip_range).float(), mask).item(),
            }
        return loss, stats
