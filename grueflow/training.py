"""The skeleton every long training stage shares (warm_start, rl_finetune, dpo, train_reward_model).

A stage parses its flags, loads its params, builds its model and trainer and writes its own files; the
rest is written here once, in the order it runs:

1. :meth:`TrainingRun.start`, before any model loads: relaunch as ``processes`` data-parallel copies
   (:func:`grueflow.stage.relaunch_data_parallel`), resolve the device and precision, join the process
   group, and seed everything (:func:`grueflow.seeding.seed_everything`, once per stage);
2. :meth:`TrainingRun.train`: resume the trainer from the newest checkpoint of this run in the resume
   folder (``--resume-dir``, default ``<out>.resume``; never ``--out``, inside it or holding it), then train
   with a progress bar, checkpoints into the resume folder (main process only) and, for a tracked stage,
   DVCLive (and TensorBoard) logs of the curve kept in the resume folder, into which a resumed run first
   replays its checkpoint's rows;
3. :meth:`TrainingRun.finish`: compare the data-parallel replicas, write the output folder atomically
   (the stage's files, the tracking log, ``stage.json`` last; main process only) and remove the resume
   folder.

A resumed run is trained in parts, one per process that trained it: each checkpoint's marker records the parts
that led to it (:data:`PARTS`: where each started, its device, precision and thread count, its wall time), and a
resumed run's ``provenance.json`` lists them. A run resumed with another thread count than the part before it
says so in one line: torch's reductions add in another order, so its numbers differ in the last digits from an
uninterrupted run of either count (a resumed run is byte for byte the uninterrupted one only with the same
execution settings).

A trainer is :class:`Resumable`: it resumes from and checkpoints into a resume folder, trains with a
checkpoint and a progress callback, and its ``state.curve`` holds one row per unit done (iteration, epoch
or step), so the curve's length is how far a resumed run already is.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Optional, Protocol, Sequence

from grueflow import checkpoints, stage
from grueflow.device import Execution
from grueflow.distributed import DataParallel, check_replicas
from grueflow.io import InputDigest, atomic_dir
from grueflow.seeding import seed_everything
from grueflow.tracking import TENSORBOARD_ENV, RunTracker, tensorboard_dir

log = logging.getLogger(__name__)
TRACKING_DIR = "dvclive"  # the DVCLive folder, in the resume folder while training and in the output at the end
VALIDATION_DIR = "validation"  # evaluation during training (grueflow.validation), in the resume folder
Row = dict[str, float]
# provenance.json's list (and each checkpoint marker's meta) of the parts a resumed run was trained in, oldest first:
# {"from": "<unit><k>" (where it started: <unit>0 for the first), "device", "precision", "threads", "wall_time_s"
# (the part's seconds until the checkpoint the next part resumed from; null for the last part, whose wall time is
# provenance.json's own)}; null where a checkpoint written without this record hides them
PARTS = "parts"


class TrainingState(Protocol):
    """What the skeleton reads of a trainer's progress: the curve, one row per unit done."""

    curve: list[Row]


class Resumable(Protocol):
    """A trainer :meth:`TrainingRun.train` can run, kill and resume.

    ``resume`` loads run ``key``'s newest intact checkpoint in ``resume_dir`` (returns it, or None when
    there is none); ``save_checkpoint`` adds one, ``meta`` in its marker (:func:`grueflow.checkpoints.save`, read
    back with :func:`grueflow.checkpoints.meta`); both with the files ``carried`` says a resume takes over from the
    resume folder (their digests recorded in the checkpoint, and checked before it is resumed); ``train`` runs the
    remaining units, calling ``checkpoint``
    (with the trainer) whenever a checkpoint is due and ``progress`` (with the unit's curve row) after every
    unit, and returns the trainer's result.
    """

    state: TrainingState

    def resume(self, resume_dir: Path, key: str, carried: Optional[checkpoints.Carried] = None) -> Optional[Path]: ...

    def save_checkpoint(self, resume_dir: Path, key: str, carried: Optional[checkpoints.Carried] = None,
                        meta: Optional[Mapping[str, Any]] = None) -> Path: ...

    def train(self, checkpoint: Optional[Callable[[Any], None]] = None,
              progress: Optional[Callable[[Row], None]] = None) -> Any: ...


class Validator(checkpoints.Carried, Protocol):
    """Evaluation during training (:class:`grueflow.validation.Validation`): called with the trainer before the first
    unit and after each; what it keeps in the resume folder is carried over by a resume, so every checkpoint records
    its digests (:class:`grueflow.checkpoints.Carried`)."""

    def __call__(self, trainer: Any) -> None: ...


@dataclass(frozen=True)
class Tracking:
    """DVCLive (and TensorBoard) logging of a stage's curve rows.

    ``tensorboard``: the stage's ``--tensorboard`` (None: ``$GRUEFLOW_TENSORBOARD/<task>/<method>/seed<k>``
    when that is set, else no TensorBoard; see :func:`grueflow.tracking.tensorboard_dir`). ``wall_clock``:
    keys that differ between identical runs (plotted, kept out of ``metrics.json``).
    """

    tensorboard: Optional[Path] = None
    wall_clock: tuple[str, ...] = ()


def add_arguments(p: argparse.ArgumentParser, out: str, tracking: bool = False) -> None:
    """The flags every training stage has: ``--threads``, ``--device``, ``--precision``, ``--resume-dir``,
    ``--out`` (``out`` is its help text) and, for a tracked stage, ``--tensorboard``."""
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--resume-dir", type=Path, default=None,
                   help="checkpoints while training (default: <out>.resume); resumed from if present, removed at the end")
    p.add_argument("--out", type=Path, required=True, help=out)
    if tracking:
        p.add_argument("--tensorboard", type=Path, default=None,
                       help="also write TensorBoard event files here (default: $GRUEFLOW_TENSORBOARD/<task>/<method>/"
                            "seed<k>, the last three parts of --out, if set)")


def check_final(values: dict[str, Any], stage_name: str, learning_rate: float) -> None:
    """Stop the stage in one line, writing no output, when a final metric of the trained model is NaN or infinite:
    the last update diverged after the checks on its loss and gradients (the weights it left give NaN)."""
    bad = sorted(key for key, value in values.items() if isinstance(value, float) and not math.isfinite(value))
    if bad:
        verb = "is" if len(bad) == 1 else "are"
        raise SystemExit(f"error: {stage_name}: the trained model's {', '.join(bad)} {verb} not finite: the last "
                         f"update diverged; lower learning_rate (it is {learning_rate:g}) and rerun; the output was "
                         f"not written (earlier checkpoints stay in the resume folder)")


def check_trained_policy(policy: Any, prompts: Sequence[str], stage_name: str, learning_rate: float) -> None:
    """Stop the stage in one line, writing no output, when the trained policy's next-token logits after a few of
    ``prompts`` are NaN or infinite: the last update diverged after the checks on its loss and gradients, and the
    model handed on would make every later stage fail or score NaN."""
    import torch

    prompts = list(prompts[:4])
    if not prompts:
        return
    encoded = policy.encode(prompts)
    ends = torch.full((len(prompts), 1), policy.eos_token_id, dtype=torch.long, device=encoded.input_ids.device)
    with torch.no_grad():
        finite = bool(torch.isfinite(policy.score(encoded, ends).logits).all())
    if not finite:
        raise SystemExit(f"error: {stage_name}: the trained model's logits are not finite: the last update "
                         f"diverged; lower learning_rate (it is {learning_rate:g}) and rerun; the output was not "
                         f"written (earlier checkpoints stay in the resume folder)")


class TrainingRun:
    """One run of a training stage: its output and resume folders, execution, data-parallel place and clock.

    Made by :meth:`start`; then :meth:`train` and :meth:`finish`.
    """

    def __init__(self, name: str, out: Path, resume_dir: Path, execution: Execution, parallel: DataParallel,
                 started: float, params_digest: Optional[dict[str, str]] = None) -> None:
        self.name, self.out, self.resume_dir = name, out, resume_dir
        self.execution, self.parallel, self.started = execution, parallel, started
        self.params_digest = params_digest or {}  # the params it reads, for its stage.json (grueflow.pipeline)
        self.tracked = False
        self.parts: list[dict[str, Any]] = []  # the parts of this run so far, this process's last (PARTS)
        self._lock: Optional[IO[str]] = None

    @classmethod
    def start(cls, name: str, args: argparse.Namespace, started: float, seed: int,
              processes: Optional[int] = None) -> "TrainingRun":
        """Relaunch, resolve the execution, join the process group and seed; call before any model loads.

        ``processes``: the stage's data-parallel param (> 1: this command re-runs as that many processes under
        ``accelerate launch`` and does not return here; each process then computes on its own device and gets
        its share of ``--threads``); None for a stage without a data-parallel mode (one process). A resume folder
        that is, holds or lies inside ``--out`` is a :class:`~grueflow.config.ConfigError`, raised first
        (:func:`grueflow.stage.check_resume_dir`): :meth:`finish` replaces the one and deletes the other; so is a
        TensorBoard folder overlapping either (:func:`grueflow.tracking.tensorboard_dir`).
        """
        digest = stage.params_digest(name, args)
        resume_dir = args.resume_dir if args.resume_dir is not None else Path(f"{args.out}.resume")
        stage.check_resume_dir(args.out, resume_dir)
        board = tensorboard_dir(args.out, vars(args).get("tensorboard"), resume_dir)  # a folder apart from both
        if board is not None:
            stage.check_writable("--tensorboard" if vars(args).get("tensorboard") else f"${TENSORBOARD_ENV}", board)
        if processes is not None:
            stage.relaunch_data_parallel(processes, args.threads)
        ex = stage.execution(args)
        parallel = DataParallel.from_env(ex.device) if processes is not None else DataParallel(device=ex.device)
        seed_everything(seed, parallel.threads(args.threads))
        return cls(name, args.out, resume_dir, ex, parallel, started, digest)

    def train(self, trainer: Resumable, key: str, total: int, unit: str, desc: str,
              tracking: Optional[Tracking] = None, report: Optional[Callable[[Row], None]] = None,
              validate: Optional[Validator] = None) -> Any:
        """Resume ``trainer`` (run ``key``) and train it for the rest of its ``total`` ``unit``\\ s; returns what
        ``trainer.train`` returns.

        ``desc`` names the progress bar; ``tracking`` logs every curve row (as the curve holds it) to DVCLive
        in the resume folder; ``report`` sees every row the trainer reports (e.g. a log line); ``validate`` goes to
        the trainer's ``train`` (evaluation during training, :class:`grueflow.validation.Validation`), and what it
        keeps in the resume folder is checked with each checkpoint resumed and recorded with each one written.
        Only the main process writes checkpoints and logs, and it holds the resume folder
        (:func:`grueflow.checkpoints.claim`: a folder holding anything else, or another process training into it, is
        refused before any step). An exception unlocks the resume folder and leaves it as it is, for the next run.
        """
        if self.parallel.is_main:  # kept open (so locked) until the run finishes, fails or the process ends
            self._lock = checkpoints.claim(self.resume_dir, unit, own=(TRACKING_DIR, VALIDATION_DIR))
        try:
            return self._train(trainer, key, total, unit, desc, tracking, report, validate)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Unlock the resume folder (a no-op when this process holds no lock)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _train(self, trainer: Resumable, key: str, total: int, unit: str, desc: str, tracking: Optional[Tracking],
               report: Optional[Callable[[Row], None]], validate: Optional[Validator]) -> Any:
        resumed = trainer.resume(self.resume_dir, key, carried=validate)
        done = len(trainer.state.curve)
        self.parts = self._parts(resumed, unit)
        if resumed is not None:  # <unit><k>: the checkpoint's own count (a curve row may come every few steps)
            log.info("resumed from %s at %s %s (%d curve rows done)", resumed, unit, resumed.name.removeprefix(unit),
                     done)
            if self.parallel.is_main:
                _say_threads_changed(self.parts)
        bar = stage.progress(total, desc, initial=done)
        tracker = None
        if tracking is not None and self.parallel.is_main:  # the others' rows are the main process's
            tracker = RunTracker(self.resume_dir / TRACKING_DIR, unit, tracking.wall_clock,
                                 tensorboard_dir(self.out, tracking.tensorboard, self.resume_dir))
            tracker.replay(trainer.state.curve)
        self.tracked = tracking is not None

        def progress(row: Row) -> None:
            bar.update()
            if tracker is not None:
                tracker.log(trainer.state.curve[-1])  # the row as the curve holds it (rounded)
            if report is not None:
                report(row)

        checkpoint = (lambda t: t.save_checkpoint(self.resume_dir, key, carried=validate,
                                                  meta={PARTS: self._parts_until_now()})) if self.parallel.is_main \
            else None
        result = trainer.train(checkpoint=checkpoint, progress=progress, **({"validate": validate} if validate else {}))
        bar.close()
        if tracker is not None:
            tracker.close()
        return result

    def _parts(self, resumed: Optional[Path], unit: str) -> list[dict[str, Any]]:
        """The parts of this run (:data:`PARTS`): those checkpoint ``resumed`` records (one of unknown settings
        where it records none), then this process's, from ``resumed`` (None: from the start)."""
        execution = self.execution.record()
        here = {"from": resumed.name if resumed is not None else f"{unit}0",
                **{name: execution[name] for name in ("device", "precision", "threads")}, "wall_time_s": None}
        if resumed is None:
            return [here]
        earlier = checkpoints.meta(resumed).get(PARTS)
        if not isinstance(earlier, list) or not earlier or not all(isinstance(part, dict) for part in earlier):
            earlier = [{"from": f"{unit}0", "device": None, "precision": None, "threads": None, "wall_time_s": None}]
        return [*earlier, here]

    def _parts_until_now(self) -> list[dict[str, Any]]:
        """:attr:`parts` as a checkpoint written now records them: this process's wall time so far in its own."""
        return [*self.parts[:-1], {**self.parts[-1], "wall_time_s": round(time.perf_counter() - self.started, 3)}]

    def finish(self, write: Callable[[Path], None], params: Any, inputs: Mapping[str, Path | InputDigest],
               replicas: Callable[[], Sequence[Any]] = tuple, extra: Optional[dict[str, Any]] = None) -> None:
        """Write the output folder: ``write(folder)`` puts the stage's own files in, then the tracking log and
        ``stage.json`` (``params``, ``inputs``' fingerprints, the execution); it replaces ``--out`` only when
        complete, and the resume folder is removed after.

        ``extra`` holds more facts for ``stage.json`` (e.g. which policy was handed on, and why). A resumed run's
        ``provenance.json`` lists its parts (:data:`PARTS`); ``stage.json`` is the same as an uninterrupted run's.
        Data-parallel,
        every process hashes the trained modules ``replicas()`` returns and compares them (identical, or an
        error), and only the main process writes; the others return here.
        """
        extra = dict(extra or {})
        if len(self.parts) > 1:
            extra[PARTS] = self.parts
        if self.parallel.enabled:
            extra["data_parallel"] = {"processes": self.parallel.world_size,
                                      "weights_sha256": check_replicas(self.parallel, list(replicas()))}
            if not self.parallel.is_main:
                return
        with atomic_dir(self.out) as tmp:
            write(tmp)
            if self.tracked:
                shutil.copytree(self.resume_dir / TRACKING_DIR, tmp / TRACKING_DIR)
            stage.finish(tmp, self.name, params, inputs, self.started, self.params_digest,
                         execution=self.execution.record(), **extra)
        shutil.rmtree(self.resume_dir, ignore_errors=True)
        self.release()


def _say_threads_changed(parts: Sequence[Mapping[str, Any]]) -> None:
    """One warning line where the last of ``parts`` (:data:`PARTS`), the resumed one, runs on another thread count
    than the parts before it: its numbers will differ in the last digits from an uninterrupted run of either."""
    now = parts[-1]["threads"]
    before = list(dict.fromkeys(part.get("threads") for part in parts[:-1] if part.get("threads") is not None))
    if not before or before == [now]:
        return
    counts = " and ".join(map(str, before))
    log.warning("resumed a run started with %s thread%s on %d thread%s: its numbers will differ in the last digits "
                "from an uninterrupted run of %s", counts, "" if before == [1] else "s", now, "" if now == 1 else "s",
                "either" if len(before) == 1 else "any of these counts")
