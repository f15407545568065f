"""TRPO (Schulman et al. 2015) on whole sequences, with sb3-contrib's conjugate-gradient helpers.

The policy's update is a natural-gradient step: maximise the surrogate ``mean(ratio * A)`` subject
to ``mean_t KL(pi_old(.|s_t) || pi(.|s_t)) <= max_kl`` (exact KL over the vocabulary at every
completion token). The critic (a value head on the policy's detached hidden states) is fitted
separately with Adam.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from sb3_contrib.common.utils import conjugate_gradient_solver, flat_grad
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from grueflow.models.policy import logprobs_from_logits
from grueflow.rl.advantages import gae, masked_mean, masked_whiten
from grueflow.rl.configs import TRPOConfig


class TRPO:
    uses_critic = True
    needs_double_backward = True  # Fisher-vector products differentiate through attention twice

    def __init__(self, cfg: TRPOConfig) -> None:
        self.cfg = cfg

    def optimized_parameters(self, policy_params: list, value_params: list) -> list:
        """The trainer's optimiser fits only the critic; the policy moves by :meth:`step`."""
        return value_params

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, returns = gae(rewards, values, mask, self.cfg.gamma, self.cfg.gae_lambda)
        return (masked_whiten(advantages, mask) if self.cfg.whiten_advantages else advantages), returns

    def step(self, trainer: Any, rollout: Any, advantages: torch.Tensor, returns: torch.Tensor) -> dict[str, float]:
        stats = self._policy_step(trainer, rollout, advantages)
        stats.update(self._critic_steps(trainer, rollout, returns))
        return stats

    def _policy_step(self, trainer: Any, rollout: Any, advantages: torch.Tensor) -> dict[str, float]:
        cfg, policy, mask = self.cfg, trainer.policy, rollout.mask
        params = [p for p in policy.model.parameters() if p.requires_grad]
        with torch.no_grad():
            old_logp = F.log_softmax(policy.score(rollout.prompts, rollout.completions).logits, -1)  # (B, T, V)

        def surrogate_and_kl() -> tuple[torch.Tensor, torch.Tensor]:
            logits = policy.score(rollout.prompts, rollout.completions).logits
            ratio = (logprobs_from_logits(logits, rollout.completions) - rollout.logprobs).exp()
            kl = (old_logp.exp() * (old_logp - F.log_softmax(logits, -1))).sum(-1)
            return masked_mean(ratio * advantages, mask), masked_mean(kl, mask)

        surrogate, kl = surrogate_and_kl()
        g = flat_grad(surrogate, params, retain_graph=True)
        grad_kl = flat_grad(kl, params, create_graph=True, retain_graph=True)

        def fisher_vector(v: torch.Tensor) -> torch.Tensor:
            return flat_grad(grad_kl @ v, params, retain_graph=True) + cfg.cg_damping * v

        direction = conjugate_gradient_solver(fisher_vector, g, max_iter=cfg.cg_max_steps)
        curvature = (direction @ fisher_vector(direction)).item()
        full_step = math.sqrt(2 * cfg.max_kl / max(curvature, 1e-12)) * direction.detach()
        old_params = parameters_to_vector(params).detach()
        old_surrogate = surrogate.item()
        accepted, step_kl, new_surrogate, fraction = False, 0.0, old_surrogate, 1.0
        with torch.no_grad():
            for _ in range(cfg.line_search_max_iter):
                vector_to_parameters(old_params + fraction * full_step, params)
                new, step_kl_t = surrogate_and_kl()
                new_surrogate, step_kl = new.item(), step_kl_t.item()
                if step_kl <= cfg.max_kl and new_surrogate > old_surrogate:
                    accepted = True
                    break
                fraction *= cfg.line_search_shrinking_factor
            if not accepted:
                vector_to_parameters(old_params, params)
                step_kl, new_surrogate = 0.0, old_surrogate
        return {"trpo/accepted": float(accepted), "trpo/step_kl": step_kl, "trpo/step_fraction": fraction if accepted else 0.0,
                "losses/policy": -new_surrogate, "losses/approx_kl": step_kl}

    def _critic_steps(self, trainer: Any, rollout: Any, returns: torch.Tensor) -> dict[str, float]:
        with torch.no_grad():
            hidden = trainer.critic_hidden(rollout.prompts, rollout.completions)
        losses = []
        for _ in range(self.cfg.n_critic_updates):
            value_loss = 0.5 * masked_mean((trainer.value_head(hidden) - returns) ** 2, rollout.mask)
            trainer.optimizer.zero_grad(set_to_none=True)
            value_loss.backward()
            trainer.optimizer.step()
            losses.append(value_loss.item())
        return {"losses/value": losses[-1]}
