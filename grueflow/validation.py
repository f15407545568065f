"""Evaluation during training, as RL4LMs' ``train_evaluation``: val curves, kept policies, the best one.

:class:`Validation` is called by the trainer before the first step and after each one: an RL iteration
(:meth:`grueflow.rl.trainer.RLTrainer.train`) or a warm-start epoch
(:meth:`grueflow.supervised.SupervisedTrainer.train`). At step 0, every ``eval_every``-th and the last, the
policy generates on the val split with the task's evaluation settings and is scored with the task's reward
(RL) and metrics, exactly as ``evaluate`` scores the test split (:mod:`grueflow.evaluation`; NLPO with its
current mask model, when it is evaluated with masks). Each evaluation runs under its own seed
(:func:`grueflow.seeding.isolated_rng`), so training draws the same random numbers with or without it.

Everything lives in ``<resume folder>/validation/`` while training, so a killed run resumes it: the curve
(``val_curves.json``), each evaluation's predictions (``predictions/<unit><k>.jsonl``) and the policies
kept as plain model folders (``kept/<unit><k>/``: every ``save_every``-th, and under ``select: best``
every evaluated one), under the run key (params and inputs, the evaluation's own included). A resumed run
drops what lies past the step it resumes from and redoes it, identically; a run with another key drops
it all. :meth:`write` puts the curve (CSV, PNG, DVCLive), the predictions and the ``save_every``
policies into the stage's output, and :meth:`selected` says which policy the stage hands on, and why.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

from grueflow import evaluation, plots
from grueflow.config import GenerationConfig, MetricSpec, RewardConfig
from grueflow.data import Sample
from grueflow.grue import lower_is_better
from grueflow.io import atomic_dir, read_json, write_csv, write_json, write_jsonl
from grueflow.metrics import MetricContext
from grueflow.models.lora import merged
from grueflow.seeding import isolated_rng
from grueflow.tracking import RunTracker
from grueflow.training import VALIDATION_DIR as FOLDER

CURVE, PREDICTIONS, KEPT, KEY = "val_curves.json", "predictions", "kept", "run_key"
EVAL_SEED_OFFSET = 7_919  # each evaluation's seed: the run's seed + this + the iteration


class Validation:
    """Evaluation during training for one run (see the module docstring), in steps of ``unit`` (``iteration``
    for RL, ``epoch`` for the warm start) up to ``total``; ``step(trainer)`` is how many are done.

    ``processor(trainer)``, when given, makes the logits processor maker of an evaluation (NLPO's masks).
    ``reward`` None scores the metrics alone (the warm start).
    """

    def __init__(self, root: Path, samples: list[Sample], generation: GenerationConfig, reward: Optional[RewardConfig],
                 metrics: tuple[MetricSpec, ...], context: MetricContext, cfg: Any, seed: int,
                 processor: Optional[Callable[[Any], Any]] = None, key: str = "", unit: str = "iteration",
                 total: Optional[int] = None, step: Optional[Callable[[Any], int]] = None) -> None:
        self.root, self.generation = root / FOLDER, generation
        self.samples = samples[:cfg.eval_samples] if cfg.eval_samples else samples
        self.cfg, self.seed, self.processor, self.key = cfg, seed, processor, key
        self.unit = unit
        self.total = total if total is not None else cfg.iterations
        self.step = step if step is not None else (lambda trainer: trainer.state.iteration)
        self.rows: list[dict[str, Any]] = []
        self.synced = False
        self.scorer = evaluation.Scorer(reward, metrics, context)  # its metrics built once, for every evaluation

    @property
    def enabled(self) -> bool:
        return self.cfg.eval_every > 0 or self.cfg.save_every > 0

    def due(self, step: int) -> bool:
        every = self.cfg.eval_every
        return every > 0 and (step % every == 0 or step == self.total)

    def kept_due(self, step: int) -> bool:
        save = self.cfg.save_every > 0 and step > 0 and step % self.cfg.save_every == 0
        return save or (self.cfg.select == "best" and self.due(step))

    def __call__(self, trainer: Any) -> None:
        """Evaluate and keep the policy of ``trainer``'s current step, where due and not done yet."""
        step = self.step(trainer)
        if not self.synced:
            self._resume(step)
        if self.due(step) and not any(row[self.unit] == step for row in self.rows):
            self._evaluate(trainer, step)
        if self.kept_due(step) and not (self.root / KEPT / f"{self.unit}{step}").is_dir():
            with atomic_dir(self.root / KEPT / f"{self.unit}{step}") as tmp:
                merged(trainer.policy.model).save_pretrained(tmp)
                trainer.policy.tokenizer.save_pretrained(tmp)

    def _number(self, path: Path) -> int:
        return int(path.name.removeprefix(self.unit).removesuffix(".jsonl"))

    def _resume(self, step: int) -> None:
        """Keep what a previous run of this resume folder (the same run ``key``) did up to ``step``; drop the
        rest, and everything another run left."""
        self.synced = True
        if (self.root / KEY).is_file() and (self.root / KEY).read_text() != self.key:
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / KEY).write_text(self.key)
        curve = self.root / CURVE
        self.rows = [row for row in (read_json(curve) if curve.is_file() else []) if row[self.unit] <= step]
        for folder in (self.root / PREDICTIONS, self.root / KEPT):
            for path in folder.glob(f"{self.unit}*") if folder.is_dir() else []:
                if self._number(path) > step:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        write_json(curve, self.rows)

    def _evaluate(self, trainer: Any, step: int) -> None:
        model = trainer.policy.model
        was_training = model.training
        model.eval()
        with isolated_rng(self.seed + EVAL_SEED_OFFSET + step):
            make = self.processor(trainer) if self.processor is not None else None
            tokens: list[list[str]] = []
            generations = evaluation.generate(trainer.policy, self.samples, self.generation, processor=make,
                                              tokens=tokens)
            rows, corpus, _ = self.scorer(self.samples, generations, tokens=tokens)
        model.train(was_training)
        write_jsonl(self.root / PREDICTIONS / f"{self.unit}{step}.jsonl", rows)
        self.rows.append({self.unit: step, **corpus})
        write_json(self.root / CURVE, self.rows)

    def selected(self) -> Optional[dict[str, Any]]:
        """Under ``select: best``: the evaluated step with the best val ``select_metric`` (the earliest on a tie),
        its value and why; None under ``select: last``."""
        if self.cfg.select != "best":
            return None
        key = self.cfg.select_metric
        scored = [row for row in self.rows if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])]
        if not scored:
            raise ValueError(f"select_metric {key!r} has no finite val value at any evaluation; choose a key the "
                             f"evaluation writes: {sorted(k for k in self.rows[0] if k != self.unit)}")
        lower = lower_is_better(key)
        best = (min if lower else max)(scored, key=lambda row: row[key])
        return {"select": "best", self.unit: best[self.unit], "select_metric": key, "value": best[key],
                "why": f"the {'lowest' if lower else 'highest'} val {key} of {len(scored)} evaluations "
                       f"({self.unit}s {', '.join(str(r[self.unit]) for r in scored)})"}

    def selected_model(self) -> Optional[Path]:
        """The kept model folder :meth:`selected` chose, or None (the stage writes its final policy)."""
        chosen = self.selected()
        return self.root / KEPT / f"{self.unit}{chosen[self.unit]}" if chosen else None

    def write(self, folder: Path, title: str) -> None:
        """The curve (``val_curves.csv``, ``val_curves.png``, ``dvclive_val/``), the predictions
        (``val_predictions/``) and the ``save_every`` policies (``checkpoints/<unit><k>/``) into ``folder``."""
        if self.rows:  # columns: the step, then the metric keys sorted (as a resumed run reads them back)
            rows = [{self.unit: r[self.unit], **{k: r[k] for k in sorted(r) if k != self.unit}} for r in self.rows]
            write_csv(folder / "val_curves.csv", rows)
            panels = [k for k in rows[0] if k != self.unit]
            plots.learning_curves(rows, self.unit, panels, folder / "val_curves.png", title)
            with RunTracker(folder / "dvclive_val", self.unit) as tracker:
                for row in rows:
                    tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))})
            shutil.copytree(self.root / PREDICTIONS, folder / "val_predictions")
        every = self.cfg.save_every
        for kept in sorted((self.root / KEPT).glob(f"{self.unit}*")) if (self.root / KEPT).is_dir() else []:
            if every > 0 and self._number(kept) > 0 and self._number(kept) % every == 0:  # 0: the start model
                shutil.copytree(kept, folder / "checkpoints" / kept.name)
