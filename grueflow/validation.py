"""Evaluation during RL training, as RL4LMs' ``train_evaluation``: val curves, kept policies, the best one.

:class:`Validation` is called by the trainer before the first iteration and after each one
(:meth:`grueflow.rl.trainer.RLTrainer.train`). At iteration 0, every ``eval_every``-th and the last, the
policy generates on the val split with the task's evaluation settings and is scored with the task's reward
and metrics, exactly as ``evaluate`` scores the test split (:mod:`grueflow.evaluation`; NLPO with its
current mask model, when it is evaluated with masks). Each evaluation runs under its own seed
(:func:`grueflow.seeding.isolated_rng`), so training draws the same random numbers with or without it.

Everything lives in ``<resume folder>/validation/`` while training, so a killed run resumes it: the curve
(``val_curves.json``), each evaluation's predictions (``predictions/iteration<k>.jsonl``) and the policies
kept as plain model folders (``kept/iteration<k>/``: every ``save_every``-th, and under ``select: best``
every evaluated one), under the run key (params and inputs, the evaluation's own included). A resumed run
drops what lies past the iteration it resumes from and redoes it, identically; a run with another key drops
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
from grueflow.grue import LOWER_IS_BETTER
from grueflow.io import atomic_dir, read_json, write_csv, write_json, write_jsonl
from grueflow.metrics import MetricContext
from grueflow.models.lora import merged
from grueflow.seeding import isolated_rng
from grueflow.tracking import RunTracker
from grueflow.training import VALIDATION_DIR as FOLDER

CURVE, PREDICTIONS, KEPT, KEY = "val_curves.json", "predictions", "kept", "run_key"
EVAL_SEED_OFFSET = 7_919  # each evaluation's seed: the run's seed + this + the iteration


class Validation:
    """Evaluation during training for one RL run (see the module docstring).

    ``processor(trainer)``, when given, makes the logits processor maker of an evaluation (NLPO's masks).
    """

    def __init__(self, root: Path, samples: list[Sample], generation: GenerationConfig, reward: RewardConfig,
                 metrics: tuple[MetricSpec, ...], context: MetricContext, cfg: Any, seed: int,
                 processor: Optional[Callable[[Any], Any]] = None, key: str = "") -> None:
        self.root, self.generation, self.reward, self.metrics, self.context = root / FOLDER, generation, reward, \
            metrics, context
        self.samples = samples[:cfg.eval_samples] if cfg.eval_samples else samples
        self.cfg, self.seed, self.processor, self.key = cfg, seed, processor, key
        self.rows: list[dict[str, Any]] = []
        self.synced = False

    @property
    def enabled(self) -> bool:
        return self.cfg.eval_every > 0 or self.cfg.save_every > 0

    def due(self, iteration: int) -> bool:
        every = self.cfg.eval_every
        return every > 0 and (iteration % every == 0 or iteration == self.cfg.iterations)

    def kept_due(self, iteration: int) -> bool:
        save = self.cfg.save_every > 0 and iteration > 0 and iteration % self.cfg.save_every == 0
        return save or (self.cfg.select == "best" and self.due(iteration))

    def __call__(self, trainer: Any) -> None:
        """Evaluate and keep the policy of ``trainer``'s current iteration, where due and not done yet."""
        iteration = trainer.state.iteration
        if not self.synced:
            self._resume(iteration)
        if self.due(iteration) and not any(row["iteration"] == iteration for row in self.rows):
            self._evaluate(trainer, iteration)
        if self.kept_due(iteration) and not (self.root / KEPT / f"iteration{iteration}").is_dir():
            with atomic_dir(self.root / KEPT / f"iteration{iteration}") as tmp:
                merged(trainer.policy.model).save_pretrained(tmp)
                trainer.policy.tokenizer.save_pretrained(tmp)

    def _resume(self, iteration: int) -> None:
        """Keep what a previous run of this resume folder (the same run ``key``) did up to ``iteration``; drop the
        rest, and everything another run left."""
        self.synced = True
        if (self.root / KEY).is_file() and (self.root / KEY).read_text() != self.key:
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / KEY).write_text(self.key)
        curve = self.root / CURVE
        self.rows = [row for row in (read_json(curve) if curve.is_file() else []) if row["iteration"] <= iteration]
        for folder, pattern in ((self.root / PREDICTIONS, "iteration*.jsonl"), (self.root / KEPT, "iteration*")):
            for path in folder.glob(pattern) if folder.is_dir() else []:
                if int(path.name.removeprefix("iteration").removesuffix(".jsonl")) > iteration:
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        write_json(curve, self.rows)

    def _evaluate(self, trainer: Any, iteration: int) -> None:
        model = trainer.policy.model
        was_training = model.training
        model.eval()
        with isolated_rng(self.seed + EVAL_SEED_OFFSET + iteration):
            make = self.processor(trainer) if self.processor is not None else None
            tokens: list[list[str]] = []
            generations = evaluation.generate(trainer.policy, self.samples, self.generation, processor=make,
                                              tokens=tokens)
            rows, corpus, _ = evaluation.score(self.samples, generations, self.reward, self.metrics, self.context,
                                               tokens=tokens)
        model.train(was_training)
        write_jsonl(self.root / PREDICTIONS / f"iteration{iteration}.jsonl", rows)
        self.rows.append({"iteration": iteration, **corpus})
        write_json(self.root / CURVE, self.rows)

    def selected(self) -> Optional[dict[str, Any]]:
        """Under ``select: best``: the evaluated iteration with the best val ``select_metric`` (the earliest on a
        tie), its value and why; None under ``select: last``."""
        if self.cfg.select != "best":
            return None
        key = self.cfg.select_metric
        scored = [row for row in self.rows if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])]
        if not scored:
            raise ValueError(f"select_metric {key!r} has no finite val value at any evaluation; choose a key the "
                             f"evaluation writes: {sorted(k for k in self.rows[0] if k != 'iteration')}")
        lower = any(m in key for m in LOWER_IS_BETTER)
        best = (min if lower else max)(scored, key=lambda row: row[key])
        return {"select": "best", "iteration": best["iteration"], "select_metric": key, "value": best[key],
                "why": f"the {'lowest' if lower else 'highest'} val {key} of {len(scored)} evaluations "
                       f"(iterations {', '.join(str(r['iteration']) for r in scored)})"}

    def selected_model(self) -> Optional[Path]:
        """The kept model folder :meth:`selected` chose, or None (the stage writes its final policy)."""
        chosen = self.selected()
        return self.root / KEPT / f"iteration{chosen['iteration']}" if chosen else None

    def write(self, folder: Path, title: str) -> None:
        """The curve (``val_curves.csv``, ``val_curves.png``, ``dvclive_val/``), the predictions
        (``val_predictions/``) and the ``save_every`` policies (``checkpoints/iteration<k>/``) into ``folder``."""
        if self.rows:  # columns: iteration, then the metric keys sorted (as a resumed run reads them back)
            rows = [{"iteration": r["iteration"], **{k: r[k] for k in sorted(r) if k != "iteration"}}
                    for r in self.rows]
            write_csv(folder / "val_curves.csv", rows)
            panels = [k for k in rows[0] if k != "iteration"]
            plots.learning_curves(rows, "iteration", panels, folder / "val_curves.png", title)
            with RunTracker(folder / "dvclive_val", "iteration") as tracker:
                for row in rows:
                    tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))})
            shutil.copytree(self.root / PREDICTIONS, folder / "val_predictions")
        every = self.cfg.save_every
        for kept in sorted((self.root / KEPT).glob("iteration*")) if (self.root / KEPT).is_dir() else []:
            if every > 0 and int(kept.name.removeprefix("iteration")) % every == 0:
                shutil.copytree(kept, folder / "checkpoints" / kept.name)
