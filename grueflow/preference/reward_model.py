"""Bradley–Terry reward models: a sequence classifier with one scalar output, trained on pairs.

The model is any ``AutoModelForSequenceClassification`` with ``num_labels=1`` loaded with
``from_pretrained`` from a backbone folder (a causal LM such as the ``base_model`` stage's output, or
an encoder / encoder-decoder). Causal backbones pool the last non-pad token (transformers'
``*ForSequenceClassification`` does this from ``config.pad_token_id``, set here when missing);
encoder-decoder ones pool the final EOS, which :func:`encode_texts` appends.

Under Bradley–Terry, ``P(chosen ≻ rejected) = σ(r(x, y_c) - r(x, y_r))``, so training minimises
``-log σ(r_c - r_r)`` (Bradley & Terry 1952; Ouyang et al. 2022, eq. 1). The saved folder holds the
classifier, its tokenizer and ``reward_model.json`` (the text format), so :class:`RewardModel` can
score ``(prompt, completion)`` pairs as a reward.

Models live on the device of an :class:`~grueflow.device.Execution` (default: the CPU in float32). A model
that trains keeps float32 weights and, under bf16, runs its forward passes in bf16 autocast; a frozen one
(:class:`RewardModel`) is loaded in the execution's frozen dtype. Rewards and losses are float32.

Training can be killed and resumed (:class:`RewardModelTrainer`): a checkpoint after every epoch
(``<resume dir>/epoch<k>/``) holds the classifier's weights, the optimiser, the global RNGs (dropout draws
from torch's), the epochs done and the curve; each epoch's order is drawn from ``(seed, epoch)`` alone, so a
resumed run ends with the same weights, bit for bit, as an uninterrupted one.
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from grueflow import checkpoints, io
from grueflow.data.sample import prompt_key
from grueflow.device import Execution, or_cpu
from grueflow.models import model_kind
from grueflow.preference.config import RewardModelConfig
from grueflow.preference.data import Preference
from grueflow.seeding import rng_state, set_rng_state
from grueflow.checkpoints import NonFiniteLossError

log = logging.getLogger(__name__)
FORMAT_FILE = "reward_model.json"  # {"max_length": ...}: how texts were built for training
CHECKPOINT_UNIT = "epoch"  # checkpoints are <resume dir>/epoch<k>/


def join(prompt: str, completion: str) -> str:
    """The text a reward model scores: the prompt, a space, the completion."""
    return f"{prompt} {completion}"


def load_backbone(path: str | Path, execution: Optional[Execution] = None, frozen: bool = False) -> tuple[Any, Any]:
    """(classifier, tokenizer): ``path`` loaded as a one-output sequence classifier, pad token set, on the
    execution's device (default: the CPU in float32).

    The weights are float32 (they train), or, when ``frozen``, in the execution's frozen dtype (bf16 under
    bf16) without gradients, in eval mode. A language-model folder gets a fresh scalar head (its other
    weights are kept). A folder without a usable tokenizer, or whose tokenizer has ids past its embedding rows, is
    refused by name (:func:`grueflow.models.load_tokenizer`, :func:`grueflow.models.check_vocabulary`). The tokenizer
    pads on the right whatever the folder's ``padding_side`` says: a sequence classifier pools the last non-pad
    token, and right padding keeps every token's position (left padding shifts a GPT-2's absolute positions).
    """
    from transformers import AutoModelForSequenceClassification

    from grueflow.models import check_finite, check_vocabulary, load_tokenizer, set_pad_token

    execution = or_cpu(execution)
    path = Path(path)
    if not (path / "config.json").is_file():
        raise io.MissingDataError(f"reward-model backbone {path} is not a Hugging Face model folder (no config.json); "
                                  "give a model folder such as results/<task>/base_model/model")
    tokenizer = load_tokenizer(str(path), local_files_only=True)
    dtype = execution.frozen_dtype if frozen else execution.train_dtype
    model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1, dtype=dtype,
                                                               local_files_only=True).to(execution.device)
    set_pad_token(tokenizer, model.config, str(path), "reward model")
    tokenizer.padding_side = "right"  # positions as when alone; the model pools the last non-pad token
    model.config.pad_token_id = tokenizer.pad_token_id
    check_vocabulary(tokenizer, model.config, str(path))
    if frozen:
        model.eval().requires_grad_(False)
        check_finite(model, str(path))  # a trained reward model: NaN rewards would blame the samples
    return model, tokenizer


def encode_texts(tokenizer: Any, texts: Sequence[str], max_length: int, append_eos: bool, device: torch.device
                 ) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` (B, L) on ``device``, each text cut to its last
    ``max_length`` tokens.

    Keeping the end keeps the completion, which is what the reward judges. ``append_eos`` (encoder-decoder
    classifiers, which pool the final EOS) ends every row with EOS.
    """
    rows = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        if append_eos and (not ids or ids[-1] != tokenizer.eos_token_id):
            ids = ids + [tokenizer.eos_token_id]
        ids = ids[-max_length:]
        if append_eos:
            ids[-1] = tokenizer.eos_token_id
        rows.append(ids)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    return {"input_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device),
            "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)}


def rewards(model: Any, tokenizer: Any, texts: Sequence[str], max_length: int) -> torch.Tensor:
    """The scalar reward of each text, float32 on the model's device.  (B,)"""
    batch = encode_texts(tokenizer, texts, max_length, model_kind(model.config) == "seq2seq", model.device)
    return model(**batch).logits[:, 0].float()


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Mean ``-log σ(r_c - r_r)``.  (B,), (B,) -> ()"""
    return -F.logsigmoid(chosen - rejected).mean()


def judged(pref: Preference) -> str:
    """What a pair judges, which :func:`split_pairs` keeps on one side: the row's ``sample_id`` where it names one
    (several annotators' judgements of one human-evaluation item), else its prompt, compared as
    :func:`~grueflow.data.sample.prompt_key` compares prompts for leakage between splits (case, runs of whitespace
    and zero-width characters aside). Without a ``sample_id`` the row's own ``id`` tells nothing: a ranking of k
    completions of one prompt gives k(k-1)/2 pairs, each with an id of its own, and a held-out pair whose prompt
    (and often whose chosen completion) is trained on would score the reward model on what it has seen."""
    sample = pref.extra.get("sample_id")
    return f"sample {sample!r}" if sample is not None else f"prompt {prompt_key(pref.prompt)!r}"


def split_pairs(prefs: list[Preference], val_fraction: float, seed: int) -> tuple[list[Preference], list[Preference]]:
    """A seeded train / held-out split by what the pairs judge (:func:`judged`: a sample, or without ``sample_id``
    a prompt): all pairs of one fall on the same side, so no held-out judgement has a twin in training.

    The target is ``round(val_fraction * n)`` of the ``n`` pairs (at least one when ``val_fraction`` > 0). The
    distinct groups are shuffled with ``seed`` and taken in that order, each held out whole when it fits (the
    pairs held out so far plus its own stay within the target) and passed over when it would overshoot, so one
    prompt that carries most of the pairs cannot take them all to the held-out side. When no group fits (each is
    larger than the target), the smallest is held out. A warning says when the pairs held out are fewer than half
    or more than twice the target (one group carries most of the pairs). One
    group is always left to train on (a warning says when one group leaves nothing to hold out). With one pair
    per group (a built preference set of distinct prompts) this is the seeded split of the pairs themselves.
    Both sides keep the file's order within a group."""
    groups: dict[str, list[int]] = {}
    for i, pref in enumerate(prefs):
        groups.setdefault(judged(pref), []).append(i)
    order = list(groups.values())
    random.Random(f"reward_model/{seed}").shuffle(order)
    if val_fraction > 0 and len(order) == 1:
        log.warning("val_fraction %g holds out nothing: all %d preference pairs judge one %s, held out whole or not "
                    "at all, and training needs it; no held-out accuracy is reported%s",
                    val_fraction, len(prefs), _named(prefs[0]),
                    "; pairs without a sample_id are kept together by prompt: give each row the sample_id of what it "
                    "judges to hold some out" if _by_prompt(prefs[0]) else "")
    target = max(1, round(val_fraction * len(prefs))) if val_fraction > 0 else 0
    held = _held_groups(order, target)
    held_pairs = sum(len(order[k]) for k in held)
    if held and not target / 2 <= held_pairs <= 2 * target:  # groups too large to come near the target
        largest = max(order, key=len)
        log.warning("val_fraction %g holds out %d of %d preference pairs where %d were asked for: pairs are held out "
                    "whole by what they judge, and %s alone has %d of them%s",
                    val_fraction, held_pairs, len(prefs), target, _named(prefs[largest[0]]), len(largest),
                    "; pairs without a sample_id are kept together by prompt: give each row the sample_id of what it "
                    "judges to split them finer" if _by_prompt(prefs[largest[0]]) else "")
    return ([prefs[i] for k, group in enumerate(order) if k not in held for i in group],
            [prefs[i] for k, group in enumerate(order) if k in held for i in group])


def _held_groups(order: list[list[int]], target: int) -> set[int]:
    """The positions in ``order`` (shuffled groups of pair indices) that :func:`split_pairs` holds out for a
    ``target`` number of pairs: each group in turn that fits within it, else the first of the smallest groups;
    never every group, and none for a target of 0."""
    if target == 0 or len(order) < 2:
        return set()
    held: set[int] = set()
    held_pairs = 0
    for k, group in enumerate(order):
        if held_pairs + len(group) <= target and len(held) < len(order) - 1:
            held.add(k)
            held_pairs += len(group)
    return held or {min(range(len(order)), key=lambda k: len(order[k]))}


def _by_prompt(pref: Preference) -> bool:
    """Whether ``pref`` is grouped by its prompt (it names no ``sample_id``)."""
    return "sample_id" not in pref.extra


def _named(pref: Preference) -> str:
    """The group of ``pref`` as a message names it: its sample, or its prompt as the file gives it."""
    return f"prompt {pref.prompt!r}" if _by_prompt(pref) else f"sample {pref.extra['sample_id']!r}"


@torch.no_grad()
def pairwise_metrics(model: Any, tokenizer: Any, prefs: list[Preference], cfg: RewardModelConfig,
                     execution: Optional[Execution] = None) -> dict[str, float]:
    """Held-out (or any) pairs: mean Bradley–Terry loss and pairwise accuracy (share with r_c > r_r).

    The forward passes run under the execution's autocast (default: the CPU in float32)."""
    model.eval()
    losses, correct = [], 0
    for start in range(0, len(prefs), cfg.batch_size):
        chunk = prefs[start:start + cfg.batch_size]
        chosen, rejected = _pair_rewards(model, tokenizer, chunk, cfg.max_length, or_cpu(execution))
        losses.append(bradley_terry_loss(chosen, rejected).item() * len(chunk))
        correct += int((chosen > rejected).sum())
    return {"loss": sum(losses) / len(prefs), "accuracy": correct / len(prefs)}


def _pair_rewards(model: Any, tokenizer: Any, chunk: list[Preference], max_length: int, execution: Execution
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards (float32) of the chosen and the rejected completions, in one forward pass under the execution's
    autocast.  (B,), (B,)"""
    texts = [join(p.prompt, p.chosen) for p in chunk] + [join(p.prompt, p.rejected) for p in chunk]
    with execution.autocast():
        scores = rewards(model, tokenizer, texts, max_length)
    return scores[:len(chunk)], scores[len(chunk):]


class RewardModelTrainer(checkpoints.Checkpointed):
    """Trains ``model`` (float32, on the execution's device) in place on the training pairs, epoch by epoch,
    with AdamW; a checkpoint after every epoch (the newest kept).

    Forward passes run under the execution's autocast (bf16 under bf16; default: the CPU in float32) and the
    Bradley–Terry loss is computed in float32. The pairs are split by :func:`split_pairs` (``cfg.seed``).
    """

    unit = CHECKPOINT_UNIT

    def __init__(self, model: Any, tokenizer: Any, prefs: list[Preference], cfg: RewardModelConfig,
                 execution: Optional[Execution] = None) -> None:
        self.model, self.tokenizer, self.cfg, self.execution = model, tokenizer, cfg, or_cpu(execution)
        self.train_pairs, self.val_pairs = split_pairs(prefs, cfg.val_fraction, cfg.seed)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.state = checkpoints.EpochState()

    def run_epoch(self) -> dict[str, float]:
        """One pass over the training pairs in this epoch's order; returns the curve row (with the held-out
        loss and accuracy when pairs are held out)."""
        cfg, model = self.cfg, self.model
        model.train()
        data = [self.train_pairs[i] for i in checkpoints.epoch_order(len(self.train_pairs), "reward_model", cfg.seed, self.state.epoch)]
        losses = []
        steps = math.ceil(len(data) / cfg.batch_size)
        for step, start in enumerate(range(0, len(data), cfg.batch_size), 1):
            chunk = data[start:start + cfg.batch_size]
            loss = bradley_terry_loss(*_pair_rewards(model, self.tokenizer, chunk, cfg.max_length, self.execution))
            self._guard("reward-model loss", loss.item(), f", step {step} of {steps}")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
            self._guard("gradient norm", float(norm), f", step {step} of {steps}")
            self.optimizer.step()
            losses.append(loss.item())
        self.state.epoch += 1
        row = {"epoch": self.state.epoch, "train_loss": io.rounded(sum(losses) / len(losses))}
        if self.val_pairs:
            held_out = pairwise_metrics(model, self.tokenizer, self.val_pairs, cfg, self.execution)
            row.update({f"val_{k}": io.rounded(v) for k, v in held_out.items()})
        self.state.curve.append(row)
        log.info("reward model epoch %d: %s", row["epoch"], row)
        return row

    def _guard(self, what: str, value: float, where: str) -> None:
        """Stop before the optimiser step on a NaN or infinite loss or gradient norm, as the warm start does
        (:class:`grueflow.checkpoints.NonFiniteLossError`): a reward model with NaN weights is never saved."""
        if not math.isfinite(value):
            raise NonFiniteLossError(what, self.state.epoch + 1, where, self.cfg.learning_rate)

    def train(self, checkpoint: Optional[Callable[["RewardModelTrainer"], None]] = None,
              progress: Optional[Callable[[dict[str, float]], None]] = None) -> list[dict[str, float]]:
        """Run the remaining epochs, calling ``checkpoint`` after each; returns the curve (one row per epoch)."""
        while self.state.epoch < self.cfg.epochs:
            row = self.run_epoch()
            if checkpoint:
                checkpoint(self)
            if progress:
                progress(row)
        self.model.eval()
        return self.state.curve

    def final_metrics(self) -> dict[str, float]:
        """``train/accuracy``, ``train/loss``, and ``val/accuracy``, ``val/loss`` on the held-out pairs when there
        are any (:func:`~grueflow.io.rounded`), with ``n_train`` and ``n_val``."""
        final = {f"train/{k}": io.rounded(v) for k, v in
                 pairwise_metrics(self.model, self.tokenizer, self.train_pairs, self.cfg, self.execution).items()}
        if self.val_pairs:
            held_out = pairwise_metrics(self.model, self.tokenizer, self.val_pairs, self.cfg, self.execution)
            final.update({f"val/{k}": io.rounded(v) for k, v in held_out.items()})
        final.update({"n_train": len(self.train_pairs), "n_val": len(self.val_pairs)})
        return final

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_step(self) -> int:
        return self.state.epoch

    def save_to(self, folder: Path, key: str) -> None:
        """Write the classifier's weights and the optimiser, RNG and progress state into ``folder``."""
        checkpoints.save_weights(self.model, folder)
        checkpoints.save_state(folder, {"key": key, "epoch": self.state.epoch, "curve": self.state.curve,
                                        "optimizer": self.optimizer.state_dict(), "rng": rng_state()})

    def load(self, folder: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save_to`."""
        checkpoints.load_weights(self.model, folder)
        saved = checkpoints.load_state(folder)
        self.state = checkpoints.EpochState(saved["epoch"], saved["curve"])
        self.optimizer.load_state_dict(saved["optimizer"])
        set_rng_state(saved["rng"])


def train_reward_model(model: Any, tokenizer: Any, prefs: list[Preference], cfg: RewardModelConfig,
                       progress: Optional[Callable[[dict[str, float]], None]] = None,
                       execution: Optional[Execution] = None) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Train ``model`` in place without checkpoints (:class:`RewardModelTrainer`); returns the per-epoch curve
    and the final metrics (:meth:`RewardModelTrainer.final_metrics`)."""
    trainer = RewardModelTrainer(model, tokenizer, prefs, cfg, execution)
    curve = trainer.train(progress=progress)
    return curve, trainer.final_metrics()


def save_reward_model(model: Any, tokenizer: Any, cfg: RewardModelConfig, folder: Path) -> None:
    """The classifier (save_pretrained), its tokenizer and the text format, into ``folder``."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    io.write_json(folder / FORMAT_FILE, {"max_length": cfg.max_length, "text": "prompt + ' ' + completion"})


class RewardModel:
    """A saved Bradley–Terry reward model, loaded once, frozen on the execution's device in its frozen dtype
    (default: the CPU in float32): ``__call__(prompts, completions)`` -> rewards (float32 Python floats)."""

    def __init__(self, path: str | Path, batch_size: int = 32, max_length: Optional[int] = None,
                 execution: Optional[Execution] = None) -> None:
        path = Path(path)
        if not (path / FORMAT_FILE).is_file() and (path / io.MODEL_DIR / FORMAT_FILE).is_file():
            raise io.MissingDataError(
                f"reward model {path} is the train_reward_model stage's folder, not the reward model: did you mean "
                f"{path / io.MODEL_DIR}? point args.path at its {io.MODEL_DIR}/ folder")
        if not (path / FORMAT_FILE).is_file():
            raise io.MissingDataError(
                f"reward model {path} does not exist or is unfinished (no {FORMAT_FILE}); train it first with the "
                "train_reward_model stage (snakemake results/<task>/reward_model) and point args.path at its model/ folder")
        self.model, self.tokenizer = load_backbone(path, execution, frozen=True)
        self.max_length = max_length or int(io.read_json(path / FORMAT_FILE)["max_length"])
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(completions), self.batch_size):
            texts = [join(p, c) for p, c in zip(prompts[start:start + self.batch_size],
                                                completions[start:start + self.batch_size])]
            out.extend(rewards(self.model, self.tokenizer, texts, self.max_length).tolist())
        return out
