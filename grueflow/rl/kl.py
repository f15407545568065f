"""KL penalty against the reference model: per-token estimators and the coefficient controllers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from grueflow.rl.configs import KLConfig


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k1 estimator ``log p - log q`` of KL(p || q) for tokens sampled from p.  (B, T)"""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 ``(log p - log q)^2 / 2``: biased, low variance (Schulman 2020, "Approximating KL").  (B, T)"""
    return 0.5 * (logprobs - ref_logprobs) ** 2


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 ``q/p - 1 - log(q/p)``: unbiased and never negative (GRPO's KL term).  (B, T)"""
    log_ratio = ref_logprobs - logprobs
    return log_ratio.exp() - 1 - log_ratio


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


@dataclass
class KLController:
    """Fixed or adaptive KL coefficient (Ziegler et al. 2019, as RL4LMs' ``KLController``).

    Adaptive update once per rollout with the rollout's KL ``kl``, per sequence or per token as ``target_per``
    says (:class:`grueflow.rl.configs.KLConfig`): ``error = clip((kl - target) / target, -0.2, 0.2)``,
    ``coef <- coef * (1 + kl_lr * error)``. The step is multiplicative: a coefficient of 0 would stay 0, so
    :class:`~grueflow.rl.configs.KLConfig` refuses ``adaptive`` with ``coef`` 0.
    """

    coef: float
    adaptive: bool
    target: float | None
    kl_lr: float
    target_per: str = "sequence"

    @classmethod
    def from_config(cls, cfg: KLConfig) -> "KLController":
        return cls(cfg.coef, cfg.adaptive, cfg.target, cfg.kl_lr, cfg.target_per)

    def step(self, sequence_kl: float, token_kl: float) -> None:
        """Adapt to a rollout whose mean summed KL per completion is ``sequence_kl`` and whose mean KL per
        completion token is ``token_kl``."""
        self.update(token_kl if self.target_per == "token" else sequence_kl)

    def update(self, kl: float) -> None:
        if not self.adaptive:
            return
        error = min(max((kl - self.target) / self.target, -0.2), 0.2)
        self.coef *= 1 + self.kl_lr * error

    def state_dict(self) -> dict[str, Any]:
        return {"coef": self.coef}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.coef = state["coef"]
