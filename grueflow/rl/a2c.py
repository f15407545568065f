"""A2C (Mnih et al. 2016) on whole sequences: n-step returns, a critic, plain policy gradient."""

from __future__ import annotations

import torch

from grueflow.rl.advantages import masked_mean, masked_whiten
from grueflow.rl.algorithm import Algorithm
from grueflow.rl.configs import A2CConfig
from grueflow.rl.objectives import MiniBatch, Outputs


def n_step_returns(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, n: int
                   ) -> torch.Tensor:
    """``R_t = sum_{k<m} gamma^k r_{t+k} + gamma^m V_{t+m}`` with ``m = min(n, steps left)``; V after the end is 0.

    (B, T) each -> (B, T), zero where ``mask`` is 0.
    """
    rewards, values = rewards * mask, values * mask
    steps = rewards.shape[1]
    returns = torch.zeros_like(rewards)
    for t in range(steps):
        horizon = min(t + n, steps)
        discounts = gamma ** torch.arange(horizon - t, dtype=rewards.dtype, device=rewards.device)
        bootstrap = values[:, horizon] if horizon < steps else torch.zeros_like(rewards[:, 0])
        returns[:, t] = (rewards[:, t:horizon] * discounts).sum(1) + gamma ** (horizon - t) * bootstrap
    return returns * mask


class A2C(Algorithm):
    """Advantage actor-critic: ``A_t = R_t - V_t``; loss ``-A logp + vf_coef (R - V)^2 - ent_coef H``."""

    uses_critic = True
    cfg: A2CConfig

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        returns = n_step_returns(rewards, values, mask, self.cfg.gamma, self.cfg.n_steps)
        advantages = (returns - values) * mask
        return (masked_whiten(advantages, mask) if self.cfg.normalize_advantage else advantages), returns

    def loss(self, new: Outputs, batch: MiniBatch, kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
        """``-A logp + vf_coef (R - V)^2 - ent_coef H`` over the masked tokens. No KL term, so ``kl_coef`` is
        unused: the KL penalty is in the rewards behind ``batch.advantages`` (:class:`~grueflow.rl.configs.A2CConfig`
        refuses ``kl_in_loss``)."""
        mask = batch.mask
        policy_loss = -masked_mean(batch.advantages * new.logprobs, mask)
        value_loss = masked_mean((batch.returns - new.values) ** 2, mask)
        entropy = masked_mean(new.entropy, mask)
        loss = policy_loss + self.cfg.vf_coef * value_loss - self.cfg.ent_coef * entropy
        with torch.no_grad():
            log_ratio = (new.logprobs - batch.logprobs) * mask
            approx_kl = masked_mean(log_ratio.exp() - 1 - log_ratio, mask)
        return loss, {"losses/policy": policy_loss.item(), "losses/value": value_loss.item(),
                      "losses/entropy": entropy.item(), "losses/approx_kl": approx_kl.item()}
