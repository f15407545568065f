"""Warm start: supervised fine-tuning on (prompt, reference) pairs.

Causal models learn the reference continuation after the prompt (prompt tokens are not in the
loss); seq2seq models learn prompt -> reference. Every reference of a sample is a training pair.
Under LoRA (the caller wraps ``policy.model``) only the adapter's parameters are optimised.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Callable

import torch

from grueflow.config import SupervisedConfig
from grueflow.data import Sample
from grueflow.models.lora import trainable_parameters
from grueflow.models.policy import Policy

log = logging.getLogger(__name__)


def pairs(samples: list[Sample]) -> list[tuple[str, str]]:
    out = [(s.prompt, r) for s in samples for r in s.references]
    if not out:
        raise ValueError("the training split has no (prompt, reference) pairs; every sample lacks references")
    return out


@torch.no_grad()
def validation_loss(policy: Policy, data: list[tuple[str, str]], batch_size: int, max_target: int) -> float:
    policy.model.eval()
    total, count = 0.0, 0
    for start in range(0, len(data), batch_size):
        chunk = data[start:start + batch_size]
        loss = policy.supervised_loss(policy.encode([p for p, _ in chunk]),
                                      policy.encode_targets([t for _, t in chunk], max_target))
        total += loss.item() * len(chunk)
        count += len(chunk)
    return total / count


def train(policy: Policy, train_samples: list[Sample], val_samples: list[Sample], cfg: SupervisedConfig,
          max_target: int, seed: int, progress: Callable[[dict[str, float]], None] | None = None
          ) -> list[dict[str, float]]:
    """Fine-tune ``policy.model`` in place; returns the loss curve (one row per epoch)."""
    rng = random.Random(seed)
    data, val = pairs(train_samples), pairs(val_samples)
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = int(cfg.warmup_ratio * total)
    params = trainable_parameters(policy.model)
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / (warmup + 1) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    curve = []
    for epoch in range(cfg.epochs):
        policy.model.train()
        rng.shuffle(data)
        losses = []
        for start in range(0, len(data), cfg.batch_size):
            chunk = data[start:start + cfg.batch_size]
            loss = policy.supervised_loss(policy.encode([p for p, _ in chunk]),
                                          policy.encode_targets([t for _, t in chunk], max_target))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        row = {"epoch": epoch + 1, "train_loss": round(sum(losses) / len(losses), 6),
               "val_loss": round(validation_loss(policy, val, cfg.batch_size, max_target), 6)}
        curve.append(row)
        log.info("warm start epoch %d: train loss %.4f, val loss %.4f", epoch + 1, row["train_loss"], row["val_loss"])
        if progress:
            progress(row)
    policy.model.eval()
    return curve
