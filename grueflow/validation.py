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
drops what lies past the step it resumes from and redoes it, identically; a run with another key, or one that
starts afresh (no checkpoint resumed), drops it all. What a resume takes over is vouched for by the checkpoint it
resumes: each records the digests of the run key, the curve's rows and the predictions' and kept policies' files up
to its step (:meth:`Validation.carried_digests`), and one whose files no longer match (a bit flip, a truncated or
deleted file, one added by hand) is not resumed: the run falls back to the checkpoint before it, or starts afresh,
with one line saying which and why (:func:`grueflow.checkpoints.latest`).
:meth:`write` puts the curve (CSV, PNG, DVCLive), the predictions and the ``save_every``
policies into the stage's output (``validation/`` and ``checkpoints/``), and :meth:`selected` says which
policy the stage hands on, and why.

Under ``select: best`` a ``select_metric`` that cannot be computed on this machine (its metric is missing, e.g.
SPICE without Java) is refused at the first evaluation, before any training (a ConfigError). One that is computed
but never finite (NaN at every evaluation) falls back to ``select: last`` with a WARNING (see :meth:`selected`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

from grueflow import evaluation, plots
from grueflow.config import ConfigError, GenerationConfig, MetricSpec, RewardConfig
from grueflow.data import Sample
from grueflow.grue import lower_is_better
from grueflow.io import DataError, atomic_dir, fingerprint, read_json, write_csv, write_json, write_jsonl
from grueflow.metrics import METRICS, MetricContext
from grueflow.models.lora import merged
from grueflow.pipeline import SAVED_POLICIES, VALIDATION_OUT
from grueflow.seeding import isolated_rng
from grueflow.tracking import RunTracker
from grueflow.training import VALIDATION_DIR as FOLDER

CURVE, PREDICTIONS, KEPT, KEY = "val_curves.json", "predictions", "kept", "run_key"
UNREADABLE = "unreadable"  # the digest of a curve file that is not a JSON list of rows
EVAL_SEED_OFFSET = 7_919  # each evaluation's seed: the run's seed + this + the iteration

log = logging.getLogger(__name__)


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
        if cfg.eval_samples and samples and cfg.eval_samples > len(samples):
            log.warning("eval_samples %d is more than the %d val samples there are: all %d are evaluated",
                        cfg.eval_samples, len(samples), len(samples))
        self.cfg, self.seed, self.processor, self.key = cfg, seed, processor, key
        self.unit = unit
        self.total = total if total is not None else cfg.iterations
        self.step = step if step is not None else (lambda trainer: trainer.state.iteration)
        self.rows: list[dict[str, Any]] = []
        self.digests: dict[Path, tuple[tuple[int, ...], str]] = {}  # file: (its stat signature, its sha256)
        self.synced = False
        self.announced = False  # whether selected() has logged its warnings
        self.scorer = evaluation.Scorer(reward, metrics, context)  # its metrics built once, for every evaluation
        # the metrics that write the val keys, whose directions select: best follows (a plugin's own included)
        self.metric_ids = [spec.id for spec in metrics] + [c.metric for c in (reward.components if reward else ())]

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

    def _steps(self) -> list[tuple[int, Path]]:
        """The predictions files and kept policy folders there are, with their step."""
        pattern = re.compile(rf"{re.escape(self.unit)}(\d+)(\.jsonl)?")
        found = []
        for folder in (self.root / PREDICTIONS, self.root / KEPT):
            for path in sorted(folder.iterdir()) if folder.is_dir() else []:
                match = pattern.fullmatch(path.name)
                if match and (match.group(2) is not None) == (folder.name == PREDICTIONS):
                    found.append((int(match.group(1)), path))
        return found

    def _curve_rows(self, step: int) -> Optional[list[dict[str, Any]]]:
        """The curve's rows up to ``step`` as the file holds them ([] without the file), or None when it is not a
        JSON list of rows (truncated, corrupted)."""
        curve = self.root / CURVE
        if not curve.is_file():
            return []
        try:
            rows = read_json(curve)
        except (OSError, ValueError):  # truncated, corrupted or not UTF-8
            return None
        if not isinstance(rows, list) or not all(isinstance(row, dict) and isinstance(row.get(self.unit), int)
                                                 for row in rows):
            return None
        return [row for row in rows if row[self.unit] <= step]

    def carried_digests(self, step: int) -> dict[str, str]:
        """sha256 of what a run resumed at ``step`` takes over from this folder, by path relative to the resume
        folder: the run key, the curve's rows up to ``step`` (their JSON, keys sorted; :data:`UNREADABLE` for a curve
        file that is no JSON list of rows), and the files of the predictions and kept policies up to ``step``.
        A checkpoint records them when it is written and is resumed only while they match
        (:class:`grueflow.checkpoints.Carried`)."""
        found: dict[str, str] = {}
        base = self.root.parent
        if (self.root / KEY).is_file():
            found[(self.root / KEY).relative_to(base).as_posix()] = fingerprint(self.root / KEY)
        if (self.root / CURVE).is_file():
            rows = self._curve_rows(step)
            found[(self.root / CURVE).relative_to(base).as_posix()] = UNREADABLE if rows is None else \
                hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
        for number, path in self._steps():
            if number <= step:
                for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
                    found[file.relative_to(base).as_posix()] = self._digest(file)
        return found

    def _digest(self, file: Path) -> str:
        """``file``'s sha256, read once while its stat signature (inode, size, times) stays the one read: every
        checkpoint records the digests of all kept policies so far, which are written once and never change."""
        info = file.stat()
        signature = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        known = self.digests.get(file)
        if known is None or known[0] != signature:
            known = self.digests[file] = (signature, fingerprint(file))
        return known[1]

    def _resume(self, step: int) -> None:
        """Keep what a previous run of this resume folder (the same run ``key``) did up to ``step``, the step of the
        checkpoint resumed (which vouched for it, see :meth:`carried_digests`); drop the rest, everything another run
        left, and everything when no checkpoint was resumed (``step`` 0: nothing vouches for it)."""
        self.synced = True
        if self.root.exists() and (step == 0 or not (self.root / KEY).is_file()
                                   or (self.root / KEY).read_text() != self.key):
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / KEY).write_text(self.key)
        rows = self._curve_rows(step)
        if rows is None:
            raise DataError(f"{self.root / CURVE} is not a JSON list of val rows, and the checkpoint of {self.unit} "
                            f"{step} recorded no digest of it; delete the resume folder {self.root.parent} to start "
                            f"afresh")
        self.rows = rows
        for number, path in self._steps():
            if number > step:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        write_json(self.root / CURVE, self.rows)

    def _evaluate(self, trainer: Any, step: int) -> None:
        model = trainer.policy.model
        was_training = model.training
        model.eval()
        with isolated_rng(self.seed + EVAL_SEED_OFFSET + step):
            make = self.processor(trainer) if self.processor is not None else None
            tokens: list[list[str]] = []
            generations = evaluation.generate(trainer.policy, self.samples, self.generation, processor=make,
                                              tokens=tokens)
            rows, corpus, missing = self.scorer(self.samples, generations, tokens=tokens)
        model.train(was_training)
        self._check_select_metric(missing, step)
        write_jsonl(self.root / PREDICTIONS / f"{self.unit}{step}.jsonl", rows)
        self.rows.append({self.unit: step, **corpus})
        write_json(self.root / CURVE, self.rows)

    def _check_select_metric(self, missing: dict[str, str], step: int) -> None:
        """Under ``select: best``, raise a ConfigError when ``select_metric`` belongs to a metric the scorer found
        ``missing`` (metric id -> why): it would have no value at any evaluation, so the run stops at its first
        evaluation (step 0, before training) rather than after all of it."""
        if self.cfg.select != "best":
            return
        key = self.cfg.select_metric
        for metric, why in missing.items():
            if key in METRICS.get(metric).keys():
                before = ", before any training" if step == 0 else ""
                raise ConfigError(f"select: best: select_metric {key!r} cannot be computed on this machine (metric "
                                  f"{metric} is missing: {' '.join(str(why).split())}); stopped at the evaluation of "
                                  f"{self.unit} {step}{before}: make {metric} available, or choose another "
                                  f"select_metric")

    def selected(self) -> Optional[dict[str, Any]]:
        """Under ``select: best``: the evaluated step with the best val ``select_metric`` (the earliest on a tie),
        its value and why; None under ``select: last``.

        When ``select_metric`` has no finite value at any evaluation (NaN at each, e.g. distinct-2 of one-word
        generations), nothing ranks the steps, and the run falls back to ``select: last``: the final policy, with
        ``"select": "last"`` and the reason in the returned record (``stage.json``'s ``selected``) and a WARNING
        naming each evaluation's value. Falling back rather than failing keeps the training done (a fixed
        ``select_metric`` is a new run key, so a failure would throw the run away), and hands on what
        ``select: last``, the default of RL4LMs and TRL, would. A metric that cannot be computed at all is refused
        at the first evaluation instead, before training. When the chosen step is 0 (the start model, untrained),
        a WARNING says the method's results are then the start model's. Warnings are logged once."""
        if self.cfg.select != "best":
            return None
        key = self.cfg.select_metric
        scored = [row for row in self.rows if _finite_number(row.get(key))]
        if not scored:
            chosen = self._fallback(key)
        else:
            lower = lower_is_better(key, self.metric_ids)
            best = (min if lower else max)(scored, key=lambda row: row[key])
            chosen = {"select": "best", self.unit: best[self.unit], "select_metric": key, "value": best[key],
                      "why": f"the {'lowest' if lower else 'highest'} val {key} of {len(scored)} evaluations "
                             f"({self.unit}s {', '.join(str(r[self.unit]) for r in scored)})"}
            if chosen[self.unit] == 0 and not self.announced:
                log.warning("select: best chose %s 0, the start model before any training (%s): it is handed on "
                            "untrained, so this method's results are the start model's; if that is not meant, "
                            "choose another select_metric or use select: last", self.unit, chosen["why"])
        self.announced = True
        return chosen

    def _fallback(self, key: str) -> dict[str, Any]:
        """The ``select: last`` record for a ``select_metric`` with no finite value, with its one WARNING."""
        values = ", ".join(f"{self.unit} {row[self.unit]}: {_shown(row, key)}" for row in self.rows)
        others = sorted(k for k in (self.rows[0] if self.rows else {}) if k not in (self.unit, key)
                        and all(_finite_number(row.get(k)) for row in self.rows))
        why = (f"select_metric {key!r} has no finite val value at any of the {len(self.rows)} evaluations "
               f"({values}), so select: best fell back to select: last, the final policy")
        if not self.announced:
            log.warning("%s; keys with a finite value at every evaluation: %s", why, ", ".join(others) or "none")
        return {"select": "last", self.unit: self.total, "select_metric": key, "value": None, "why": why}

    def selected_model(self) -> Optional[Path]:
        """The kept model folder :meth:`selected` chose, or None (the stage writes its final policy)."""
        chosen = self.selected()
        return self.root / KEPT / f"{self.unit}{chosen[self.unit]}" if chosen else None

    def write(self, folder: Path, title: str) -> None:
        """Into stage output ``folder``: ``validation/``, the val curve (``curves.csv``, ``curves.png``,
        ``dvclive/``) and each evaluation's predictions (``predictions/<unit><k>.jsonl``), and ``checkpoints/``,
        the ``save_every`` policies (``<unit><k>/``). Both folders are made on every run, empty without
        ``eval_every`` (``save_every``): they are DVC outs of the training stages
        (:data:`grueflow.pipeline.TRAINING_OUTS`), so DVC restores a run's set of these files with its model."""
        out, saved = folder / VALIDATION_OUT, folder / SAVED_POLICIES
        out.mkdir()
        saved.mkdir()
        if self.rows:  # columns: the step, then the metric keys sorted (as a resumed run reads them back)
            rows = [{self.unit: r[self.unit], **{k: r[k] for k in sorted(r) if k != self.unit}} for r in self.rows]
            write_csv(out / "curves.csv", rows)
            panels = [k for k in rows[0] if k != self.unit]
            plots.learning_curves(rows, self.unit, panels, out / "curves.png", title)
            with RunTracker(out / "dvclive", self.unit) as tracker:
                for row in rows:
                    tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))})
            shutil.copytree(self.root / PREDICTIONS, out / PREDICTIONS)
        every = self.cfg.save_every
        for kept in sorted((self.root / KEPT).glob(f"{self.unit}*")) if (self.root / KEPT).is_dir() else []:
            if every > 0 and self._number(kept) > 0 and self._number(kept) % every == 0:  # 0: the start model
                shutil.copytree(kept, saved / kept.name)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(row: dict[str, Any], key: str) -> str:
    """A val row's ``key`` as the fallback warning shows it: a value, NaN (non-finite values are stored as null) or
    absent."""
    if key not in row:
        return "absent"
    return "NaN" if row[key] is None else repr(row[key])
