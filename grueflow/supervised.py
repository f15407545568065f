"""Warm start: supervised fine-tuning on (prompt, reference) pairs.

Causal models learn the reference continuation after the prompt (prompt tokens are not in the
loss); seq2seq models learn prompt -> reference. Every reference of a sample is a training pair.
Under LoRA (the caller wraps ``policy.model``) only the adapter's parameters are optimised.

Training can be killed and resumed: a checkpoint after every epoch holds the weights
(the adapter only, under LoRA), the optimiser, the schedule, the global RNGs and the loss curve,
and each epoch's order is drawn from ``(seed, epoch)`` alone, so a resumed run ends with the same
weights, bit for bit, as an uninterrupted one.

Data-parallel (``processes`` > 1 under ``accelerate launch``): every process walks the same
batches and takes its shard of each; its loss is its tokens' summed cross-entropy over the whole batch's
token count (times the number of processes), so the averaged gradient is the full batch's, as in one process.

A NaN or infinite train loss or gradient norm stops training before that optimiser step, and a non-finite val
loss before that epoch is checkpointed (:class:`NonFiniteLossError`), as RL's
:class:`grueflow.rl.trainer.NonFiniteError` does: weights that produce NaN are never handed on.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

from grueflow import checkpoints
from grueflow.checkpoints import NonFiniteLossError
from grueflow.config import SupervisedConfig
from grueflow.data import Sample
from grueflow.distributed import DataParallel
from grueflow.io import DataError, rounded
from grueflow.models.lora import trainable_parameters
from grueflow.models.policy import Policy, completion_mask
from grueflow.seeding import rng_state, set_rng_state

log = logging.getLogger(__name__)
CHECKPOINT_UNIT = "epoch"  # checkpoints are <resume dir>/epoch<k>/


def warmup_steps(ratio: float, total: int) -> int:
    """Warm-up steps for ``warmup_ratio`` of ``total`` optimiser steps, rounded up as transformers'
    ``TrainingArguments.get_warmup_steps`` (RL4LMs' supervised trainer) does: a ratio > 0 warms up at least one step."""
    return math.ceil(ratio * total)


def lr_factor(schedule: str, warmup: int, total: int, step: int) -> float:
    """The learning rate's factor at optimiser ``step`` (0-based) of ``total``, after ``warmup`` warm-up steps,
    for :class:`~grueflow.config.SupervisedConfig`'s ``lr_schedule`` (transformers' schedules of those names)."""
    if schedule == "constant":
        return 1.0
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant_with_warmup":
        return 1.0
    if schedule == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))
    return max(0.0, (total - step) / max(1, total - warmup))  # linear


def pairs(samples: list[Sample], split: str) -> list[tuple[str, str]]:
    """Every (prompt, reference) pair of the ``split`` split's ``samples``; a DataError naming ``split`` when
    there is none (the warm start learns from the train split's pairs and measures its loss on the val split's)."""
    out = [(s.prompt, r) for s in samples for r in s.references]
    if not out:
        raise DataError(f"the {split} split has no (prompt, reference) pairs: none of its {len(samples)} samples "
                        f"(after train_where) has a reference; the warm start needs references in both the train and "
                        f"the val split: give a datapool whose {split} samples have references")
    return out


def same_value(value: Any, wanted: Any) -> bool:
    """True when ``value`` equals ``wanted`` and has its type: ``'1'`` is not ``1``, ``True`` is not ``1`` and
    ``0.0`` is not ``0``, as :func:`select_samples`' message tells (it names values by type)."""
    return type(value) is type(wanted) and value == wanted


def select_samples(samples: list[Sample], where: dict[str, Any], split: str) -> list[Sample]:
    """The samples whose ``meta`` holds every ``where`` value with its type (:func:`same_value`; all of them when
    ``where`` is empty); a DataError when none is left, naming the filter, the metadata keys present and, per key
    of the filter, the values found with their types (``'1'`` read from a CSV is not ``1``; YAML reads
    ``yes``/``no`` as booleans)."""
    if not where:
        return samples
    kept = [s for s in samples if all(k in s.meta and same_value(s.meta[k], v) for k, v in where.items())]
    if samples and not kept:
        keys = sorted({k for s in samples for k in s.meta})
        found = {key: [s.meta[key] for s in samples if key in s.meta] for key in where}
        seen = "; ".join(f"{key} is {typed_values(values)} there, not {typed_values([where[key]])}" if values
                         else f"no sample has {key}" for key, values in found.items())
        retyped = any(values and type(where[key]) not in set(map(type, values)) for key, values in found.items())
        fix = ("write train_where's values with the data's types (in YAML 1 is an integer, '1' a string, true and "
               "false booleans; yes and no are text)" if retyped else "give values the data holds")
        raise DataError(f"supervised train_where {where}: no {split} sample matches it (of {len(samples)}); "
                        f"the datapool's metadata keys are {keys}; {seen}: {fix}")
    return kept


def select_splits(train: list[Sample], val: list[Sample], where: dict[str, Any]) -> tuple[list[Sample], list[Sample]]:
    """The train and val samples ``train_where`` keeps (:func:`select_samples`), logging how many of each when it
    filters, so a filter that keeps few samples is visible."""
    kept = select_samples(train, where, "train"), select_samples(val, where, "val")
    if where:
        log.info("train_where %s kept %d of %d train samples, %d of %d val", where, len(kept[0]), len(train),
                 len(kept[1]), len(val))
    return kept


TYPE_NOUNS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "NoneType": "null"}


def typed_values(values: list[Any], limit: int = 10) -> str:
    """The distinct ``values`` (the first ``limit``, sorted within each type) grouped by type, e.g. ``'0', '1'
    (strings)``; ``none`` for no value."""
    groups: dict[str, dict[str, Any]] = {}
    for value in values:
        groups.setdefault(type(value).__name__, {}).setdefault(repr(value), value)
    parts, shown = [], 0
    for kind, distinct in groups.items():
        try:
            ordered = sorted(distinct.values())
        except TypeError:  # values of one type that do not sort (lists, mappings): first-seen order
            ordered = list(distinct.values())
        taken = ordered[:max(0, limit - shown)]
        shown += len(taken)
        if taken:
            noun = TYPE_NOUNS.get(kind, kind)
            parts.append(f"{', '.join(map(repr, taken))} ({noun}{'s' if len(taken) > 1 else ''})")
    hidden = sum(map(len, groups.values())) - shown
    return (", ".join(parts) or "none") + (f" and {hidden} more" if hidden else "")


@torch.no_grad()
def validation_loss(policy: Policy, data: list[tuple[str, str]], batch_size: int, max_target: int,
                    parallel: DataParallel = DataParallel()) -> float:
    """Mean over the pairs of each batch's token-mean cross-entropy (each process scores its shard of a batch)."""
    policy.model.eval()
    total, count = 0.0, 0
    for start in range(0, len(data), batch_size):
        chunk = data[start:start + batch_size]
        local = parallel.shard(chunk)
        if local:
            loss = policy.supervised_loss(policy.encode([p for p, _ in local]),
                                          policy.encode_targets([t for _, t in local], max_target))
            total += loss.item() * len(local)
            count += len(local)
    total, count = parallel.sum([total, count])
    return total / count


def log_cut_references(policy: Policy, data: list[tuple[str, str]], max_target: int, split: str) -> int:
    """Log how many of the ``split`` split's references are longer than the ``max_target - 1`` tokens a target
    keeps before its EOS (:meth:`~grueflow.models.policy.Policy.encode_targets` cuts them there, so the model
    learns to stop mid-reference), once per split; returns that count. Cutting some references is usual (RL4LMs
    cuts them the same way), so the line is INFO; when more than half are cut it is a WARNING: the model then
    mostly learns to stop where ``lengths.target`` ends, not where references do."""
    lengths = policy.target_lengths([t for _, t in data])
    cut = [n for n in lengths if n > max_target - 1]
    if cut:
        level = logging.WARNING if 2 * len(cut) > len(lengths) else logging.INFO
        log.log(level, "lengths.target = %d cuts %d of %d %s references to %d tokens and EOS (the longest has %d "
                "tokens); raise lengths.target to keep them whole", max_target, len(cut), len(lengths), split,
                max_target - 1, max(cut))
    return len(cut)


class SupervisedTrainer(checkpoints.Checkpointed):
    """Fine-tunes ``policy.model`` in place with AdamW and a linear warmup/decay schedule, epoch by epoch;
    a checkpoint after every epoch (the newest kept)."""

    unit = CHECKPOINT_UNIT

    def __init__(self, policy: Policy, train_samples: list[Sample], val_samples: list[Sample], cfg: SupervisedConfig,
                 max_target: int, seed: int, parallel: DataParallel = DataParallel()) -> None:
        self.policy, self.cfg, self.max_target, self.seed, self.parallel = policy, cfg, max_target, seed, parallel
        self.data, self.val = pairs(train_samples, "train"), pairs(val_samples, "val")
        total = math.ceil(len(self.data) / cfg.batch_size) * cfg.epochs
        warmup = warmup_steps(cfg.warmup_ratio, total)
        self.params = trainable_parameters(policy.model)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, partial(lr_factor, cfg.lr_schedule,
                                                                                  warmup, total))
        self.state = checkpoints.EpochState()
        parallel.broadcast_parameters([policy.model])
        if parallel.is_main:
            for data, split in ((self.data, "train"), (self.val, "val")):
                log_cut_references(policy, data, max_target, split)

    def batch_loss(self, chunk: list[tuple[str, str]]) -> tuple[torch.Tensor, float]:
        """The loss to differentiate for one batch, and the batch's token-mean cross-entropy (for the curve).

        One process: ``policy.supervised_loss``. Data-parallel: this process's shard, its summed token
        cross-entropy scaled by ``processes / tokens in the batch`` (0 for an empty shard), so the
        gradients averaged over the processes are the whole batch's.
        """
        policy = self.policy
        if not self.parallel.enabled:
            loss = policy.supervised_loss(policy.encode([p for p, _ in chunk]),
                                          policy.encode_targets([t for _, t in chunk], self.max_target))
            return loss, loss.item()
        local = self.parallel.shard(chunk)
        if local:
            targets = policy.encode_targets([t for _, t in local], self.max_target)
            tokens = float(completion_mask(targets, policy.eos_token_id).sum())
            nll_sum = policy.supervised_loss(policy.encode([p for p, _ in local]), targets) * tokens
        else:
            tokens, nll_sum = 0.0, torch.zeros(())
        total_nll, total_tokens = self.parallel.sum([nll_sum.item(), tokens])
        return nll_sum * (self.parallel.world_size / total_tokens), total_nll / total_tokens

    def run_epoch(self) -> dict[str, float]:
        """One pass over the training pairs in this epoch's order; returns the curve row."""
        cfg, policy = self.cfg, self.policy
        policy.model.train()
        data = [self.data[i] for i in checkpoints.epoch_order(len(self.data), "supervised", self.seed, self.state.epoch)]
        losses = []
        steps = math.ceil(len(data) / cfg.batch_size)
        for step, start in enumerate(range(0, len(data), cfg.batch_size), 1):
            loss, value = self.batch_loss(data[start:start + cfg.batch_size])
            self._guard("train loss", value, f", step {step} of {steps}")
            self.optimizer.zero_grad(set_to_none=True)
            if loss.requires_grad:
                loss.backward()
            self.parallel.average_gradients(self.params)
            norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self._guard("gradient norm", float(norm), f", step {step} of {steps}")
            self.optimizer.step()
            self.schedule.step()
            losses.append(value)
        val_loss = validation_loss(policy, self.val, cfg.batch_size, self.max_target, self.parallel)
        self._guard("val loss", val_loss, f" (after its {steps} steps)")
        self.state.epoch += 1
        row = {"epoch": self.state.epoch, "train_loss": rounded(sum(losses) / len(losses)),
               "val_loss": rounded(val_loss), "learning_rate": round(self.schedule.get_last_lr()[0], 10)}
        self.state.curve.append(row)
        log.info("warm start epoch %d: train loss %.4f, val loss %.4f", row["epoch"], row["train_loss"], row["val_loss"])
        return row

    def _guard(self, what: str, value: float, where: str) -> None:
        """Raise a :class:`NonFiniteLossError` for the epoch under way when ``value`` is not finite. Each value
        guarded is the same on every data-parallel process (the batch's loss and the val loss are summed over the
        processes, the gradient norm is taken after averaging), so all of them stop together."""
        if not math.isfinite(value):
            raise NonFiniteLossError(what, self.state.epoch + 1, where, self.cfg.learning_rate)

    def train(self, checkpoint: Callable[["SupervisedTrainer"], None] | None = None,
              progress: Callable[[dict[str, float]], None] | None = None,
              validate: Callable[["SupervisedTrainer"], None] | None = None) -> list[dict[str, float]]:
        """Run the remaining epochs, calling ``validate`` (also once before the first;
        :class:`grueflow.validation.Validation`) and then ``checkpoint`` after each; returns the loss curve."""
        if validate:
            validate(self)
        while self.state.epoch < self.cfg.epochs:
            row = self.run_epoch()
            if validate:
                validate(self)
            if checkpoint:
                checkpoint(self)
            if progress:
                progress(row)
        self.policy.model.eval()
        return self.state.curve

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_step(self) -> int:
        return self.state.epoch

    def save_to(self, folder: Path, key: str) -> None:
        """Write the weights (safetensors) and the optimiser, schedule, RNG and progress state into ``folder``."""
        checkpoints.save_weights(self.policy.model, folder)
        checkpoints.save_state(folder, {"key": key, "epoch": self.state.epoch, "curve": self.state.curve,
                                        "optimizer": self.optimizer.state_dict(),
                                        "scheduler": self.schedule.state_dict(), "rng": rng_state()})

    def load(self, folder: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save_to`."""
        checkpoints.load_weights(self.policy.model, folder)
        saved = checkpoints.load_state(folder)
        self.state = checkpoints.EpochState(saved["epoch"], saved["curve"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.schedule.load_state_dict(saved["scheduler"])
        set_rng_state(saved["rng"])


def train(policy: Policy, train_samples: list[Sample], val_samples: list[Sample], cfg: SupervisedConfig,
          max_target: int, seed: int, progress: Callable[[dict[str, float]], None] | None = None
          ) -> list[dict[str, float]]:
    """Fine-tune ``policy.model`` in place, without checkpoints; returns the loss curve (one row per epoch)."""
    return SupervisedTrainer(policy, train_samples, val_samples, cfg, max_target, seed).train(progress=progress)
