"""Experiment tracking for the training stages: per-iteration scalars through DVCLive, optionally TensorBoard.

A stage hands every curve row it receives (one per RL iteration or warm-start epoch) to
:meth:`RunTracker.log`. DVCLive writes ``<folder>/plots/metrics/<key>.tsv`` (one row per step, no timestamp
column; see :func:`metric_name`) and ``<folder>/metrics.json`` (the latest value of each key), which ``dvc
plots``, ``dvc metrics`` and ``dvc exp show`` read. Wall-clock keys (``charts/iteration_s``, tokens/s, ...) go
to TensorBoard only (the stage writes them to its unhashed ``timings.csv``), so that every DVCLive file is
byte-identical for the same params and seed. DVCLive is told to write no ``dvc.yaml``, no report and no
experiment of its own: the pipeline's ``dvc.yaml`` declares the files, and ``dvc exp run`` records the
experiments.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable

from grueflow.config import ConfigError

TENSORBOARD_ENV = "GRUEFLOW_TENSORBOARD"  # a folder: every training stage adds its event files under it


def tensorboard_dir(out: Path, flag: Path | None, resume_dir: Path | None = None) -> Path | None:
    """Where a stage writing ``out`` puts TensorBoard event files: ``--tensorboard`` if given, else
    ``$GRUEFLOW_TENSORBOARD/<task>/<method>/seed<k>`` (the last three names of ``out``'s absolute path, fewer where
    it has fewer), else nowhere. A folder that is, holds or lies inside ``out`` or ``resume_dir`` (the training
    stage replaces the one and deletes the other when it finishes, event files with them) is a ConfigError.

    TensorBoard is an observer, not a param: switching it on reruns nothing in Snakemake or DVC.
    """
    root = os.environ.get(TENSORBOARD_ENV)
    names = Path(os.path.abspath(out)).parts[1:][-3:]  # the anchor ("/") left out: it would replace the root
    folder = flag if flag is not None else Path(root, *names) if root else None
    if folder is None:
        return None
    where = Path(os.path.realpath(folder))
    for name, path in (("--out", out), ("the resume folder", resume_dir)):
        if path is None:
            continue
        kept = Path(os.path.realpath(path))
        if where == kept or where.is_relative_to(kept) or kept.is_relative_to(where):
            given = f"--tensorboard {flag}" if flag is not None else f"${TENSORBOARD_ENV}/{'/'.join(names)}"
            raise ConfigError(f"the TensorBoard folder {folder} ({given}) overlaps {name} {path}, which the stage "
                              f"replaces or deletes when it finishes, event files with it; give a TensorBoard folder "
                              f"apart from both")
    return folder


def metric_name(key: str) -> str:
    """The DVCLive name of a curve key: its namespace, then the rest with ``/`` turned into ``.``
    (``reward/task/sentiment`` -> ``reward/task.sentiment``), because DVCLive nests on ``/`` and
    ``reward/task`` is both a value and the parent of its components."""
    namespace, _, rest = key.partition("/")
    return f"{namespace}/{rest.replace('/', '.')}" if rest else namespace


def _live() -> type:
    """DVCLive's ``Live``, working in a git repository without a commit as it does outside git.

    DVCLive asks git for the current commit, to name an experiment, before it checks that there is one, and
    fails in a fresh ``git init``; grueflow saves no DVCLive experiment, so there it takes DVCLive's own path
    for a folder without git (no experiment rev, the default ``dvc.yaml`` name, which it never writes).
    """
    from dvclive import Live
    from dvclive.dvc import get_exp_name
    from scmrepo.exceptions import SCMError

    class _Live(Live):  # type: ignore[misc]
        def _init_dvc(self) -> None:
            try:
                super()._init_dvc()
            except SCMError:
                self._dvc_repo = None
                self._exp_name = get_exp_name(self._exp_name, None, self._baseline_rev)
                self._dvc_file = self._init_dvc_file()

    return _Live


class RunTracker:
    """Logs curve rows of one training run to DVCLive in ``folder`` (and TensorBoard in ``tensorboard``).

    ``step_key`` names the row's step column (``iteration``, ``epoch``); ``wall_clock`` lists keys that
    differ between identical runs: they go to TensorBoard only, never into DVCLive's files, which DVC hashes
    (the stage writes them to its unhashed :data:`grueflow.io.TIMINGS_FILE`). Non-finite values are skipped (DVC
    reads JSON, which has no NaN). Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, folder: Path, step_key: str, wall_clock: Iterable[str] = (),
                 tensorboard: Path | None = None) -> None:
        self.folder, self.step_key, self.wall_clock = Path(folder), step_key, tuple(wall_clock)
        self.live = _live()(dir=str(self.folder), resume=False, report=None, save_dvc_exp=False, dvcyaml=None)
        self.writer = None
        if tensorboard is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ImportError("TensorBoard output needs the tensorboard package: "
                                  "pip install 'grueflow[tensorboard]' (or unset GRUEFLOW_TENSORBOARD)") from None
            self.writer = SummaryWriter(log_dir=str(tensorboard))

    def log(self, row: dict[str, float]) -> None:
        """One step's scalars; the step is ``row[step_key]`` (1-based iteration or epoch)."""
        step = int(row[self.step_key])
        self.live.step = step
        for key, value in row.items():
            if key == self.step_key or value is None or not math.isfinite(value):
                continue
            if key not in self.wall_clock:
                self.live.log_metric(metric_name(key), float(value))
            if self.writer is not None:
                self.writer.add_scalar(key, float(value), step)
        self.live.next_step()

    def replay(self, rows: Iterable[dict[str, float]]) -> None:
        """Log the rows a resumed run already has (its checkpoint's curve), so the log matches the checkpoint."""
        for row in rows:
            self.log(row)

    def close(self) -> None:
        self.live.end()
        if self.writer is not None:
            self.writer.close()

    def __enter__(self) -> "RunTracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
