"""TRPO (Schulman et al. 2015) on whole sequences, with sb3-contrib's conjugate-gradient helpers.

The policy's update is a natural-gradient step: maximise the surrogate ``mean(ratio * A)`` subject
to ``mean_t KL(pi_old(.|s_t) || pi(.|s_t)) <= max_kl`` (exact KL over the vocabulary at every
completion token). The critic (a value head on the policy's detached hidden states) is fitted
separately with Adam, in minibatches. The KL penalty to the reference is in the rewards behind the
advantages, never in the surrogate (:class:`~grueflow.rl.configs.TRPOConfig` refuses ``kl_in_loss``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from sb3_contrib.common.utils import conjugate_gradient_solver, flat_grad
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from grueflow.models.policy import selective_logprobs
from grueflow.rl.advantages import gae, masked_mean, masked_whiten
from grueflow.rl.algorithm import Algorithm, UpdateContext
from grueflow.rl.configs import TRPOConfig
from grueflow.rl.rollout import Rollout


class TRPO(Algorithm):
    """A natural-gradient policy step under a KL bound, then ``n_critic_updates`` steps of the critic."""

    uses_critic = True
    needs_double_backward = True  # Fisher-vector products differentiate through attention twice
    own_update = True
    cfg: TRPOConfig

    def optimized_parameters(self, policy_params: list[torch.nn.Parameter], value_params: list[torch.nn.Parameter]
                             ) -> list[torch.nn.Parameter]:
        """The trainer's optimiser fits only the critic; the policy moves by :meth:`update`."""
        return value_params

    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, returns = gae(rewards, values, mask, self.cfg.gamma, self.cfg.gae_lambda)
        return (masked_whiten(advantages, mask) if self.cfg.whiten_advantages else advantages), returns

    def update(self, context: UpdateContext, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor
               ) -> dict[str, float]:
        """The natural-gradient policy step (conjugate gradient, then a line search), then the critic's steps."""
        stats = self._policy_step(context, rollout, advantages)
        stats.update(self._critic_steps(context, rollout, returns))
        return stats

    def _policy_step(self, context: UpdateContext, rollout: Rollout, advantages: torch.Tensor) -> dict[str, float]:
        cfg, mask, params = self.cfg, rollout.mask, context.policy_parameters
        with torch.no_grad():
            old_logp = F.log_softmax(context.policy_logits(rollout.prompts, rollout.completions), -1)  # (B, T, V)

        def surrogate_and_kl() -> tuple[torch.Tensor, torch.Tensor]:
            logits = context.policy_logits(rollout.prompts, rollout.completions)
            ratio = (selective_logprobs(logits, rollout.completions, rollout.action_mask)[0] - rollout.logprobs).exp()
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

    def _critic_steps(self, context: UpdateContext, rollout: Rollout, returns: torch.Tensor) -> dict[str, float]:
        """Fit the value head to ``returns`` on the critic's detached hidden states (the optimiser holds only it):
        ``n_critic_updates`` passes over the rollout in shuffled minibatches of ``minibatch_size`` completions,
        as sb3-contrib's TRPO fits its critic in minibatches of ``batch_size``."""
        with torch.no_grad():
            hidden = context.critic_hidden(rollout.prompts, rollout.completions)
        n, size = rollout.mask.shape[0], self.cfg.minibatch_size
        losses = []
        for _ in range(self.cfg.n_critic_updates):
            order = torch.randperm(n, device="cpu").to(rollout.mask.device)
            for start in range(0, n, size):
                idx = order[start:start + size]
                value_loss = 0.5 * masked_mean((context.value_head(hidden[idx]) - returns[idx]) ** 2, rollout.mask[idx])
                context.optimizer_step(value_loss)
                losses.append(value_loss.item())
        return {"losses/value": losses[-1]}
