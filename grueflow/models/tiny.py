"""Tiny models built from a config, with a tokenizer trained here on the task's text.

The result is saved with ``save_pretrained`` and loaded back through ``AutoModel*.from_pretrained``,
the same code path a hub id takes. A brief pre-training on the task's unlabelled text makes the
tiny model fluent but unsteered, as gpt2 is for IMDB in the RL4LMs paper: causal models learn the
next token; seq2seq models learn to reconstruct a sentence from a corrupted copy (BART-style text
infilling and prefix completion).
"""

from __future__ import annotations

import logging
import math
import random
from typing import Any, Optional

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration)
from transformers.activations import ACT2FN

from grueflow.config import ConfigError, ModelConfig, PretrainConfig
from grueflow.io import DataError
from grueflow.models import (TINY_DEFAULTS, TINY_FIXED, check_tiny_config, check_tiny_fixed, config_kinds,
                             model_kind, nullable_keys)

log = logging.getLogger(__name__)

SPECIAL_TOKENS = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>",
                  "bos_token": "<s>"}
DEFAULTS = TINY_DEFAULTS  # per architecture: a few layers of width 64, overridden by the task's model.config
DIVERGED_FACTOR = 10.0  # a loss this many times its first one (or 1 nat) is a divergence (check_finite)
END_LOSSES = 3  # the last logged losses whose mean is a curve's end (check_improved)


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on ``texts``."""
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)


def build_model(architecture: str, config: dict[str, Any], tokenizer: PreTrainedTokenizerFast, seed: int
                ) -> PreTrainedModel:
    """A freshly initialised GPT-2 or Llama (causal), T5 or BART (seq2seq) sized by ``config``, with the keys of
    :data:`~grueflow.models.TINY_FIXED` set from ``tokenizer`` (:func:`fixed_config`)."""
    torch.manual_seed(seed)
    if architecture not in DEFAULTS:
        raise ValueError(f"no tiny architecture {architecture!r}; valid: {', '.join(sorted(DEFAULTS))}")
    config_class, model_class = {"gpt2": (GPT2Config, GPT2LMHeadModel), "llama": (LlamaConfig, LlamaForCausalLM),
                                 "t5": (T5Config, T5ForConditionalGeneration),
                                 "bart": (BartConfig, BartForConditionalGeneration)}[architecture]
    try:
        check_tiny_fixed(architecture, config)
        values = check_tiny_config(architecture, config,
                                   config_kinds(config_class().to_dict(), nullable_keys(config_class)), ACT2FN)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    sizes = {**DEFAULTS[architecture], **values}
    return model_class(config_class(**sizes, **fixed_config(architecture, tokenizer)))


def fixed_config(architecture: str, tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """The config values :func:`build_model` sets itself for ``architecture``
    (:data:`~grueflow.models.TINY_FIXED`): the tokenizer's size and special-token ids, and Llama's tied embeddings.
    T5 starts decoding from <pad>; BART from </s> (its decoder_start_token_id is eos), as facebook/bart-base does."""
    values = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
              "eos_token_id": tokenizer.eos_token_id, "bos_token_id": tokenizer.bos_token_id,
              "decoder_start_token_id": tokenizer.pad_token_id if architecture == "t5" else tokenizer.eos_token_id,
              "forced_eos_token_id": tokenizer.eos_token_id, "tie_word_embeddings": True}
    return {key: values[key] for key in TINY_FIXED[architecture]}


def _corrupt(words: list[str], rng: random.Random, mask: str) -> str:
    """BART-style noise: half the time a prefix (the rest masked), else one span -> one mask."""
    words = list(words)
    if len(words) < 3:
        return mask
    if rng.random() < 0.5:
        return " ".join(words[:rng.randint(1, len(words) - 1)] + [mask])
    start = rng.randrange(len(words))
    words[start:start + rng.randint(1, 3)] = [mask]
    return " ".join(words)


def _batch(kind: str, lines: list[str], tokenizer: PreTrainedTokenizerFast, max_length: int,
           rng: random.Random) -> dict[str, torch.Tensor]:
    eos = tokenizer.eos_token
    if kind == "causal":
        enc = tokenizer([line + eos for line in lines], truncation=True, max_length=max_length,
                        padding=True, return_tensors="pt")
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}
    sources = [_corrupt(line.split(), rng, tokenizer.mask_token) for line in lines]
    enc = tokenizer(sources, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    target = tokenizer([line + eos for line in lines], truncation=True, max_length=max_length,
                       padding=True, return_tensors="pt")
    labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}


def pretrain(model: PreTrainedModel, kind: str, tokenizer: PreTrainedTokenizerFast, texts: list[str],
             cfg: PretrainConfig, seed: int) -> list[dict[str, float]]:
    """Pre-train on unlabelled ``texts`` for ``cfg.steps`` steps (cosine LR) on the model's device; returns the
    loss curve."""
    device = next(model.parameters()).device
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / max(1, cfg.steps))))
    model.train()
    curve = []
    for step in range(cfg.steps):
        batch = _batch(kind, rng.sample(texts, min(cfg.batch_size, len(texts))), tokenizer, cfg.max_length, rng)
        batch = {k: v.to(device) for k, v in batch.items()}
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 10 == 0 or step == cfg.steps - 1:
            curve.append({"step": step, "loss": round(loss.item(), 6)})
            log.info("pretrain step %d/%d loss %.4f", step + 1, cfg.steps, loss.item())
    model.eval()
    return curve


@torch.no_grad()
def mean_loss(model: PreTrainedModel, kind: str, tokenizer: PreTrainedTokenizerFast, texts: list[str],
              max_length: int, batch_size: int) -> float:
    """Token-weighted mean language-model loss (nats per target token) of ``texts``, each cut to ``max_length``
    tokens as :func:`pretrain` cuts them (a seq2seq model: its span-corruption loss, seeded)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    rng = random.Random(0)
    for start in range(0, len(texts), batch_size):
        batch = {k: v.to(device) for k, v in _batch(kind, texts[start:start + batch_size], tokenizer, max_length,
                                                     rng).items()}
        n = int((batch["labels"][:, 1:] != -100).sum()) if kind == "causal" else int((batch["labels"] != -100).sum())
        total += model(**batch).loss.item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def build_tiny(model_cfg: ModelConfig, architecture: str, texts: list[str], seed: int,
               device: Optional[torch.device] = None) -> tuple[PreTrainedModel, PreTrainedTokenizerFast,
                                                               list[dict[str, float]]]:
    """Tokenizer + tiny model (initialised on the CPU, so every device starts from the same weights) + brief
    pre-training on ``device`` (default: the CPU), ready for ``save_pretrained``. No ``texts`` is a DataError."""
    if not texts:
        raise DataError(f"model {model_cfg.id} has no unlabelled text to train its tokenizer and pre-train on; give "
                        f"the datapool unlabelled text, or choose a pretrained model")
    tokenizer = train_tokenizer(texts, model_cfg.tokenizer.vocab_size)
    model = build_model(architecture, dict(model_cfg.config), tokenizer, seed)
    if device is not None:
        model.to(device)
    curve = pretrain(model, model_kind(model.config), tokenizer, texts, model_cfg.pretrain, seed)
    check_finite(model, curve, "model.pretrain", model_cfg.pretrain.learning_rate)
    check_improved(curve, "model.pretrain", model_cfg.pretrain.learning_rate, refuse=True)
    return model, tokenizer, curve


def check_finite(model: PreTrainedModel, curve: list[dict[str, float]], section: str, learning_rate: float) -> None:
    """Raise :class:`ConfigError` naming ``section`` (``model.pretrain``, ``model.adapt``) and its learning rate when
    the loss ``curve`` of :func:`pretrain` holds a non-finite loss, a loss above :data:`DIVERGED_FACTOR` times its
    first one (at least 1 nat: a language model's loss only grows that far when the updates diverge, finite or
    not), or ``model``'s weights are not all finite: such a model must not be saved as the base model every later
    stage starts from."""
    start = curve[0]["loss"] if curve and math.isfinite(curve[0]["loss"]) else None
    bound = DIVERGED_FACTOR * max(start, 1.0) if start is not None else math.inf
    diverged = next((row for row in curve if not math.isfinite(row["loss"])), None)
    grown = next((row for row in curve if math.isfinite(row["loss"]) and row["loss"] > bound), None)
    if diverged is None and grown is not None:
        raise ConfigError(f"{section} diverged (its loss grew from {start} at step {curve[0]['step']} to "
                          f"{grown['loss']} at step {grown['step']}, over {DIVERGED_FACTOR:g} times its start) with "
                          f"learning_rate {learning_rate}; lower {section}.learning_rate")
    if diverged is not None or not all(torch.isfinite(p).all() for p in model.parameters()):
        at = f"its loss is {diverged['loss']} at step {diverged['step']}" if diverged else "its weights are not finite"
        raise ConfigError(f"{section} diverged ({at}) with learning_rate {learning_rate}; "
                          f"lower {section}.learning_rate")


def check_improved(curve: list[dict[str, float]], section: str, learning_rate: float, refuse: bool) -> None:
    """Where the loss ``curve`` of :func:`pretrain` ends above its first loss (the mean of its last
    :data:`END_LOSSES` logged losses after the first, which smooths one batch's noise), the training made the model
    worse than it started: raise :class:`ConfigError` naming ``section`` and its learning rate if ``refuse``, else
    log the same as a warning. A model pre-trained from scratch starts near ln(vocabulary size), the uniform
    model's loss, and any training that works ends well below it: ``model.pretrain`` is refused. ``model.adapt``
    starts from a pretrained model, whose first loss is one batch's, and a few steps of a small learning rate may
    move it less than that batch's noise: it is warned of (its held-out loss before and after is recorded)."""
    if len(curve) < 2 or not math.isfinite(start := curve[0]["loss"]):
        return
    end = curve[1:][-END_LOSSES:]
    mean = sum(row["loss"] for row in end) / len(end)
    if mean <= start:
        return
    steps = ", ".join(str(row["step"]) for row in end)
    message = (f"{section} made the model worse (its loss went from {start} at step {curve[0]['step']} to a mean of "
               f"{mean:.6f} at steps {steps}, above its start) with learning_rate {learning_rate}; lower "
               f"{section}.learning_rate")
    if refuse:
        raise ConfigError(message)
    log.warning("%s", message)
