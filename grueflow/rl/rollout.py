"""One iteration's experience, in the two steps the trainer makes it: :class:`Sampled`, then :class:`Rollout`.

Sampling (generation, reward, the reference pass) gives a :class:`Sampled`; the behaviour policy's pass over
it (its log-probs and values, and the rewards they imply) turns it into a :class:`Rollout`, which is what the
algorithms read. Each is complete when it is made: no field is filled in later. Token tensors are (B, T)
over completion tokens, float32, zero where ``mask`` is 0.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from grueflow.models.backend import SampledLogits
from grueflow.models.policy import Prompts


class Sampled(NamedTuple):
    """Generations with their task reward and the frozen reference's log-probs, before the behaviour pass."""

    prompts: Prompts
    completions: torch.Tensor  # (B, T) token ids
    mask: torch.Tensor  # (B, T) 1 up to and including each sequence's EOS
    ref_logprobs: torch.Tensor  # (B, T) the frozen reference's log-probs of the sampled tokens (under ``action_mask``)
    scores: torch.Tensor  # (B,) task reward
    components: dict[str, float]  # each reward component's mean score, unweighted
    generation_s: float
    reward_s: float
    scoring_s: float  # the reference pass
    action_mask: Optional[torch.Tensor]  # (B, T, V) bool, the tokens it could draw (NLPO's masks, a minimum
    # length's EOS ban: RLTrainer.sampling_mask); None: every token
    kept: Optional[SampledLogits]  # the sampling pass kept differentiable (RLTrainer.keeps_sampling), else None
    sequence: Optional[torch.Tensor] = None  # (B,) the sequence-level reward alone, when a component is dense
    dense: Optional[torch.Tensor] = None  # (B, T) the dense components' weighted per-token rewards, or None


class Rollout(NamedTuple):
    """A complete rollout: :class:`Sampled` plus the behaviour policy's outputs and the per-token rewards."""

    prompts: Prompts
    completions: torch.Tensor  # (B, T) token ids
    mask: torch.Tensor  # (B, T)
    logprobs: torch.Tensor  # (B, T) the behaviour policy's, under ``action_mask``
    ref_logprobs: torch.Tensor  # (B, T) the reference's, masked as ``logprobs`` is
    kl: torch.Tensor  # (B, T) per-token k1 of the behaviour policy against the reference, both under ``action_mask``
    values: torch.Tensor  # (B, T) the critic's at rollout time; zeros without a critic
    rewards: torch.Tensor  # (B, T) the sequence reward at each sequence's last token, dense rewards and the KL
    # penalty per token
    scores: torch.Tensor  # (B,) task reward
    components: dict[str, float]
    generation_s: float
    reward_s: float
    scoring_s: float  # the reference pass and the behaviour policy's pass
    action_mask: Optional[torch.Tensor]  # (B, T, V) bool (RLTrainer.sampling_mask); None: every token
