"""PPO (Schulman et al. 2017) on whole sequences: GAE advantages, clipped surrogate and value losses."""

from __future__ import annotations

import torch

from grueflow.rl.advantages import gae, masked_mean, masked_whiten
from grueflow.rl.algorithm import Algorithm
from grueflow.rl.configs import PPOConfig
from grueflow.rl.objectives import MiniBatch, Outputs, policy_objective


class PPO(Algorithm):
    """The PPO-specific parts of the trainer: GAE advantages and the clipped losses."""

    uses_critic = True
    cfg: PPOConfig

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over per-token rewards; advantages whitened over the batch if configured.  (B, T) each."""
        advantages, returns = gae(rewards, values, mask, self.cfg.gamma, self.cfg.gae_lambda)
        if self.cfg.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        return advantages, returns

    def loss(self, new: Outputs, batch: MiniBatch, kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
        """Clipped surrogate + vf_coef x (clipped) value loss - entropy bonus; the loss and diagnostics."""
        cfg, mask = self.cfg, batch.mask
        loss, stats = policy_objective(cfg, new, batch, kl_coef)
        value_losses = (new.values - batch.returns) ** 2
        if cfg.clip_range_vf is not None:
            clipped = batch.values + (new.values - batch.values).clamp(-cfg.clip_range_vf, cfg.clip_range_vf)
            value_losses = torch.max(value_losses, (clipped - batch.returns) ** 2)
        value_loss = 0.5 * masked_mean(value_losses, mask)
        stats["losses/value"] = value_loss.item()
        return loss + cfg.vf_coef * value_loss, stats
