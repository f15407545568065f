"""Direct Preference Optimisation (Rafailov et al. 2023) and IPO (Azar et al. 2023) on causal and seq2seq policies.

A completion's log-probability is the sum of its token log-probs up to and including EOS
(:meth:`Policy.score`, :func:`logprobs_from_logits`, :func:`completion_mask`); completions are
tokenised as the warm start tokenises targets (:meth:`Policy.encode_targets`: at most ``max_target``
tokens, EOS appended). Each batch scores
the chosen and the rejected completions of ``batch_size`` pairs in one forward pass of the policy
and one of the frozen reference.

Everything runs on the policy's device and under its backend's precision: the reference may be frozen in
bf16 and the forward passes run in autocast, but :meth:`Policy.score` returns float32 logits, so
log-probs, the loss and its statistics are float32.

Training can be killed and resumed: a checkpoint (``<resume dir>/step<k>/``) after every epoch's last
step, and every ``checkpoint_every`` steps when that is > 0, holds the weights (the adapter only, under
LoRA), the optimiser, the global RNGs, the step count and the curve. Each epoch's order is drawn from
``(seed, epoch)`` alone and the step count says where in it a run stopped, so a resumed run takes the
batches an uninterrupted one takes and ends with the same weights, bit for bit.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F

from grueflow import checkpoints
from grueflow.io import DataError, rounded
from grueflow.models.lora import reference_view, trainable_parameters
from grueflow.models.policy import Policy, completion_mask, logprobs_from_logits
from grueflow.preference.config import DPOConfig
from grueflow.preference.data import Preference
from grueflow.seeding import rng_state, set_rng_state

log = logging.getLogger(__name__)
CHECKPOINT_UNIT = "step"  # checkpoints are <resume dir>/step<k>/


class NonFiniteLossError(RuntimeError):
    """A NaN or infinite DPO / IPO loss or gradient norm: training stops before that optimiser step, so no NaN
    weights are checkpointed or handed on (as the warm start's :class:`grueflow.supervised.NonFiniteLossError`).
    ``step`` is the 1-based optimiser step that did not happen."""

    def __init__(self, what: str, step: int, total: int, epoch: int, learning_rate: float) -> None:
        super().__init__(f"non-finite DPO {what} at step {step} of {total} (epoch {epoch}): the weights were not "
                         f"updated with it; training diverged: lower learning_rate (it is {learning_rate:g})")
        self.what, self.step = what, step


class PairLogprobs(NamedTuple):
    """Summed completion log-probs of each pair's chosen and rejected completion, and their token counts (EOS
    included; None where not counted).  Each (B,)"""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: Optional[torch.Tensor] = None
    rejected_tokens: Optional[torch.Tensor] = None


def dpo_loss(policy: PairLogprobs, reference: PairLogprobs, beta: float, loss_type: str,
             ipo_margin: str = "token_mean") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The mean preference loss and per-pair statistics.

    ``h = (log π(y_c) - log π_ref(y_c)) - (log π(y_r) - log π_ref(y_r))`` per pair;
    ``sigmoid`` (DPO, Rafailov et al. 2023, eq. 7): ``-log σ(β h)``; ``ipo`` (Azar et al. 2023, eq. 17):
    ``(h - 1/(2β))²``, where under ``ipo_margin: token_mean`` (TRL's IPO, as the paper's authors confirmed to it)
    each completion's log-ratio is its mean over its tokens (``policy``'s token counts), and under ``sum`` the
    whole completion's. The implicit rewards are ``β`` times the log-ratios the loss reads; their difference is the
    margin, and accuracy is the share of pairs with a positive margin.
    """
    chosen_ratio = policy.chosen - reference.chosen  # (B,)
    rejected_ratio = policy.rejected - reference.rejected  # (B,)
    if loss_type == "ipo" and ipo_margin == "token_mean":
        if policy.chosen_tokens is None or policy.rejected_tokens is None:
            raise ValueError("ipo_margin: token_mean needs the completions' token counts (pair_logprobs gives them)")
        chosen_ratio = chosen_ratio / policy.chosen_tokens.clamp(min=1)
        rejected_ratio = rejected_ratio / policy.rejected_tokens.clamp(min=1)
    h = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * h)
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}; choose one of 'sigmoid', 'ipo'")
    chosen_reward, rejected_reward = beta * chosen_ratio.detach(), beta * rejected_ratio.detach()
    stats = {"rewards/chosen": chosen_reward, "rewards/rejected": rejected_reward,
             "rewards/margin": chosen_reward - rejected_reward,
             "rewards/accuracy": (chosen_reward > rejected_reward).float()}
    return losses.mean(), stats


def pair_logprobs(policy: Policy, pairs: list[Preference], max_target: int, model: Any = None) -> PairLogprobs:
    """Summed completion log-probs under ``model`` (default: the policy's) of each pair's two completions."""
    prompts = policy.encode([p.prompt for p in pairs] * 2)
    targets = policy.encode_targets([p.chosen for p in pairs] + [p.rejected for p in pairs], max_target)
    logits = policy.score(prompts, targets, model=model).logits  # (2B, T, V)
    mask = completion_mask(targets, policy.eos_token_id)
    summed = (logprobs_from_logits(logits, targets) * mask).sum(1)  # (2B,)
    counts = mask.sum(1).to(summed.dtype)  # (2B,)
    return PairLogprobs(summed[:len(pairs)], summed[len(pairs):], counts[:len(pairs)], counts[len(pairs):])


def _check_pairs_differ(policy: Policy, pairs: list[Preference], max_target: int) -> None:
    """Raise a DataError when every pair's chosen and rejected texts tokenise alike within ``max_target`` tokens
    (the DPO loss of such a pair is log 2 whatever the weights: no gradient), and warn with the count when some do
    (they only dilute each batch's mean)."""
    chosen = policy.encode_targets([p.chosen for p in pairs], max_target)
    rejected = policy.encode_targets([p.rejected for p in pairs], max_target)
    width = max(chosen.shape[1], rejected.shape[1])
    pad = policy.tokenizer.pad_token_id
    chosen, rejected = (F.pad(t, (0, width - t.shape[1]), value=pad) for t in (chosen, rejected))
    same = (chosen == rejected).all(dim=1).tolist()
    alike = sum(same)
    first = next((p.id for p, alike_pair in zip(pairs, same) if alike_pair), None)
    if alike == len(pairs):
        raise DataError(f"every one of the {len(pairs)} preference pairs has its chosen and rejected texts alike in "
                        f"their first {max_target - 1} tokens (lengths.target {max_target}, EOS included; e.g. pair "
                        f"{first!r}): DPO learns nothing from them; raise lengths.target past where they differ")
    if alike:
        log.warning("%d of %d preference pairs have their chosen and rejected texts alike in their first %d tokens "
                    "(lengths.target %d; e.g. pair %r): they add nothing to the DPO loss", alike, len(pairs),
                    max_target - 1, max_target, first)


def checkpoint_due(step: int, steps_per_epoch: int, checkpoint_every: int) -> bool:
    """Whether a checkpoint follows optimiser step ``step`` (1-based): after each epoch's last step, and every
    ``checkpoint_every`` steps when that is > 0."""
    return step % steps_per_epoch == 0 or (checkpoint_every > 0 and step % checkpoint_every == 0)


@dataclass
class DPOState:
    """Progress besides the weights: optimiser steps done and the curve (one row per step)."""

    step: int = 0
    curve: list[dict[str, float]] = field(default_factory=list)


class DPOTrainer(checkpoints.Checkpointed):
    """Fine-tunes ``policy.model`` in place with DPO or IPO against ``ref_model`` (None under LoRA: the
    policy with its adapter disabled is the reference).

    ``checkpoint_every`` (steps, >= 0): besides the checkpoint after each epoch, one every that many steps
    (0: after each epoch only). It says when checkpoints are written, never what is computed.
    """

    unit = CHECKPOINT_UNIT

    def __init__(self, policy: Policy, ref_model: Optional[Any], prefs: list[Preference], cfg: DPOConfig,
                 max_target: int, seed: int, checkpoint_every: int = 0) -> None:
        if not prefs:
            raise ValueError("DPO needs at least one preference pair; the preference set is empty")
        if checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0 steps (0: after each epoch only), got {checkpoint_every}")
        _check_pairs_differ(policy, prefs, max_target)
        self.policy, self.ref_model, self.prefs, self.cfg = policy, ref_model, prefs, cfg
        self.max_target, self.seed, self.checkpoint_every = max_target, seed, checkpoint_every
        self.steps_per_epoch = -(-len(prefs) // cfg.batch_size)
        self.total_steps = cfg.epochs * self.steps_per_epoch
        self.params = trainable_parameters(policy.model)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate)
        self.state = DPOState()
        if ref_model is not None:
            ref_model.eval()
            for p in ref_model.parameters():
                p.requires_grad_(False)

    @torch.no_grad()
    def reference_logprobs(self, pairs: list[Preference]) -> PairLogprobs:
        if self.ref_model is not None:
            return pair_logprobs(self.policy, pairs, self.max_target, self.ref_model)
        with reference_view(self.policy.model) as base:
            return pair_logprobs(self.policy, pairs, self.max_target, base)

    def batch_loss(self, pairs: list[Preference]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return dpo_loss(pair_logprobs(self.policy, pairs, self.max_target), self.reference_logprobs(pairs),
                        self.cfg.beta, self.cfg.loss_type, self.cfg.ipo_margin or "token_mean")

    @torch.no_grad()
    def evaluate(self, pairs: list[Preference]) -> dict[str, float]:
        """Mean loss and statistics over ``pairs`` without updating (dropout off)."""
        self.policy.model.eval()
        sums: dict[str, float] = {}
        for start in range(0, len(pairs), self.cfg.batch_size):
            chunk = pairs[start:start + self.cfg.batch_size]
            loss, stats = self.batch_loss(chunk)
            for key, value in {"loss": loss * len(chunk), **{k: v.sum() for k, v in stats.items()}}.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        return {k: v / len(pairs) for k, v in sums.items()}

    def update(self, pairs: list[Preference], epoch: int) -> dict[str, float]:
        """One optimiser step on ``pairs`` (0-based ``epoch``); appends the curve row (:func:`~grueflow.io.rounded`)
        and returns it. A non-finite loss or gradient norm raises :class:`NonFiniteLossError` before the step."""
        loss, stats = self.batch_loss(pairs)
        self._guard("loss", loss.item(), epoch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self._guard("gradient norm", float(norm), epoch)
        self.optimizer.step()
        self.state.step += 1
        row = {"step": self.state.step, "epoch": epoch + 1, "loss": loss.item(),
               **{k: v.mean().item() for k, v in stats.items()}, "grad_norm": float(norm)}
        self.state.curve.append({k: rounded(v) if isinstance(v, float) else v for k, v in row.items()})
        return row

    def _guard(self, what: str, value: float, epoch: int) -> None:
        """Raise a :class:`NonFiniteLossError` for the step under way (0-based ``epoch``) when ``value`` is not
        finite, before the optimiser steps."""
        if not math.isfinite(value):
            raise NonFiniteLossError(what, self.state.step + 1, self.total_steps, epoch + 1, self.cfg.learning_rate)

    def train(self, checkpoint: Optional[Callable[["DPOTrainer"], None]] = None,
              progress: Optional[Callable[[dict[str, float]], None]] = None) -> list[dict[str, float]]:
        """The remaining steps of ``epochs`` passes over the pairs, each in its :func:`~grueflow.checkpoints.epoch_order`, calling
        ``checkpoint`` when one is due (:func:`checkpoint_due`); returns the curve (one row per step)."""
        self.policy.model.eval()  # no dropout, as TRL's disable_dropout: at step 0 policy and reference agree exactly
        size = self.cfg.batch_size
        while self.state.step < self.total_steps:
            epoch, first = divmod(self.state.step, self.steps_per_epoch)  # a resumed run starts mid-epoch
            order = checkpoints.epoch_order(len(self.prefs), "dpo", self.seed, epoch)
            for start in range(first * size, len(order), size):
                row = self.update([self.prefs[i] for i in order[start:start + size]], epoch)
                if checkpoint and checkpoint_due(self.state.step, self.steps_per_epoch, self.checkpoint_every):
                    checkpoint(self)
                if progress:
                    progress(row)
        return self.state.curve

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_step(self) -> int:
        return self.state.step

    def save_to(self, folder: Path, key: str) -> None:
        """Write the weights (the adapter under LoRA) and the optimiser, RNG and progress state into ``folder``."""
        checkpoints.save_weights(self.policy.model, folder)
        checkpoints.save_state(folder, {"key": key, "step": self.state.step, "curve": self.state.curve,
                                        "optimizer": self.optimizer.state_dict(), "rng": rng_state()})

    def load(self, folder: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save_to`."""
        checkpoints.load_weights(self.policy.model, folder)
        saved = checkpoints.load_state(folder)
        self.state = DPOState(saved["step"], saved["curve"])
        self.optimizer.load_state_dict(saved["optimizer"])
        set_rng_state(saved["rng"])
