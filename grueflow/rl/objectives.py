"""What every algorithm's update shares: typed minibatches, the clipped surrogate, the KL term."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from grueflow.rl.advantages import masked_mean
from grueflow.rl.configs import RLConfig
from grueflow.rl.kl import KL_ESTIMATORS


class MiniBatch(NamedTuple):
    """A slice of a rollout, all (b, T) over completion tokens."""

    mask: torch.Tensor
    logprobs: torch.Tensor  # behaviour policy's log-probs at rollout time
    ref_logprobs: torch.Tensor  # frozen reference's log-probs
    values: torch.Tensor  # critic's values at rollout time (zeros without a critic)
    advantages: torch.Tensor
    returns: torch.Tensor


class Outputs(NamedTuple):
    """The current policy's outputs for a minibatch, (b, T) each; ``values`` is None without a critic."""

    logprobs: torch.Tensor
    values: Optional[torch.Tensor]
    entropy: torch.Tensor


def policy_objective(cfg: RLConfig, new: Outputs, batch: MiniBatch, kl_coef: float
                     ) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate - entropy bonus (+ ``kl_coef`` x KL estimate when ``cfg.kl_in_loss``).

    ``ratio = exp(logp_new - logp_old)``; loss per token ``max(-A ratio, -A clip(ratio, 1 +- eps))``,
    averaged over the masked tokens of the minibatch.
    """
    mask = batch.mask
    log_ratio = (new.logprobs - batch.logprobs) * mask
    ratio = log_ratio.exp()
    pg_losses = -batch.advantages * ratio
    pg_losses_clipped = -batch.advantages * ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range)
    policy_loss = masked_mean(torch.max(pg_losses, pg_losses_clipped), mask)
    entropy = masked_mean(new.entropy, mask)
    loss = policy_loss - cfg.ent_coef * entropy
    stats = {}
    if cfg.kl_in_loss:
        kl = masked_mean(KL_ESTIMATORS[cfg.kl_estimator](new.logprobs, batch.ref_logprobs), mask)
        loss = loss + kl_coef * kl
        stats["losses/kl"] = kl.item()
    with torch.no_grad():
        stats.update({
            "losses/policy": policy_loss.item(),
            "losses/entropy": entropy.item(),
            "losses/approx_kl": masked_mean((ratio - 1) - log_ratio, mask).item(),
            "losses/clip_fraction": masked_mean(((ratio - 1).abs() > cfg.clip_range).float(), mask).item(),
        })
    return loss, stats
