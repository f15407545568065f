"""NLPO (Ramamurthy et al. 2023, RL4LMs): PPO with invalid-action masking from a lagged policy copy.

During generation a logits processor steps the mask model incrementally with its own KV cache (one
token per generated token, never a full pass per token) and keeps, for every sequence, the mask
model's top-p nucleus (optionally capped at top-k), at least ``min_tokens_to_keep`` tokens and every
special token; the policy samples only among them. The PPO ratio uses the masked log-probs, the KL
penalty the unmasked ones. The mask model is refreshed from the policy every
``target_update_iterations`` rollouts and is part of the checkpoint (RL4LMs loses it on resume).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

import torch
from transformers import LogitsProcessor

from grueflow.models.backend import Backend, Decoding
from grueflow.models.policy import Prompts, shared_groups
from grueflow.rl.algorithm import PolicyHandle
from grueflow.rl.configs import NLPOConfig
from grueflow.rl.ppo import PPO


class MaskProcessor(LogitsProcessor):
    """A logits processor (for :meth:`Policy.sample` and ``generate``) that masks the policy's logits with
    the mask model's nucleus.

    The mask model decodes alongside the policy with the policy's own incremental machinery (the policy's
    speed backend, :meth:`~grueflow.models.backend.Backend.start`): each group of ``group_size`` identical
    prompts encoded once, and ``reserve`` positions of KV cache set aside so a step writes in place.
    """

    def __init__(self, mask_model: Any, kind: str, prompts: Prompts, cfg: NLPOConfig, always_keep: list[int],
                 group_size: int = 1, reserve: int = 0, backend: Optional[Backend] = None) -> None:
        self.mask_model, self.kind, self.prompts, self.cfg, self.always_keep = mask_model, kind, prompts, cfg, always_keep
        self.group_size, self.reserve = shared_groups(prompts, group_size), reserve
        self.backend = backend if backend is not None else Backend()
        self.decoding: Optional[Decoding] = None
        self.keeps: list[torch.Tensor] = []

    @torch.no_grad()
    def _next_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.decoding is None:
            self.decoding = self.backend.start(self.mask_model, self.kind, self.prompts, self.group_size, self.reserve)
            return self.decoding.first
        return self.decoding.step(input_ids[:, -1], len(self.keeps) - 1)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        keep, masked = self.backend.top_p_mask(self._next_logits(input_ids), scores, self.cfg.top_p, self.cfg.top_k,
                                               self.cfg.min_tokens_to_keep, self.always_keep)
        self.keeps.append(keep)
        return masked

    def action_mask(self) -> torch.Tensor:
        """The allowed tokens at every generated position.  (B, T, V) bool"""
        return torch.stack(self.keeps, dim=1)


class NLPO(PPO):
    """PPO whose rollouts and ratios use the mask model's action masks."""

    masks_actions = True
    cfg: NLPOConfig
    policy: PolicyHandle  # set by setup()
    mask_model: torch.nn.Module  # a frozen copy of the policy, refreshed on schedule

    def __init__(self, cfg: NLPOConfig) -> None:
        super().__init__(cfg)
        self.refreshes = 0

    def setup(self, policy: PolicyHandle) -> None:
        """The mask model starts as a frozen copy of the policy (with its LoRA adapter, if any)."""
        self.policy = policy
        self.mask_model = copy.deepcopy(policy.model).eval()
        for p in self.mask_model.parameters():
            p.requires_grad_(False)

    def before_rollout(self, iteration: int) -> None:
        """Refresh the mask model from the policy every ``target_update_iterations`` rollouts."""
        if iteration > 0 and iteration % self.cfg.target_update_iterations == 0:
            self.mask_model.load_state_dict(self.policy.model.state_dict())
            self.refreshes += 1

    def generation_processor(self, prompts: Prompts, group_size: int, max_new_tokens: int) -> MaskProcessor:
        return MaskProcessor(self.mask_model, self.policy.kind, prompts, self.cfg, list(self.policy.special_ids),
                             group_size, max_new_tokens, self.policy.backend)

    def state_dict(self) -> dict[str, Any]:
        return {"mask_model": self.mask_model.state_dict(), "refreshes": self.refreshes}

    def load_state_dict(self, state: Optional[dict[str, Any]]) -> None:
        self.mask_model.load_state_dict(state["mask_model"])
        self.refreshes = state["refreshes"]
