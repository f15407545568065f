"""Pictures: a run's learning curves and the suite's GRUE chart, as PNG files (matplotlib, Agg backend).

The PNGs carry no timestamp or version metadata, so the same numbers give the same bytes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Collection, Mapping, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no display: runs on CI and cluster nodes

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from grueflow.io import atomic_path  # noqa: E402

# The RL panels, in reading order: what was optimised, how far from the reference, how training went.
RL_PANELS = ("reward/task", "kl/sequence", "kl/coef", "losses/policy", "losses/value", "losses/entropy",
             "charts/mean_length", "charts/learning_rate")  # no wall-clock panel: the PNG is a hashed plot
WARM_START_PANELS = (("train_loss", "val_loss"), "learning_rate")
_METADATA = {"Software": None}  # no matplotlib version in the file
GRUE_CHART_TITLE = "GRUE chart"  # the chart's PNG Title: what tells an earlier run's chart from another picture


def _save(fig: plt.Figure, path: Path, title: Optional[str] = None) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, metadata={**_METADATA, **({"Title": title} if title else {})})
    plt.close(fig)


def is_grue_chart(path: Path) -> bool:
    """Whether ``path`` is a PNG that :func:`grue_chart` wrote (its Title text chunk, before the image data)."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    return head.startswith(b"\x89PNG") and b"Title\x00" + GRUE_CHART_TITLE.encode() in head


def _grid(n: int, width: float = 4.0, height: float = 2.8) -> tuple[plt.Figure, np.ndarray]:
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat


def learning_curves(rows: Sequence[dict[str, float]], x: str, panels: Sequence[str | tuple[str, ...]], path: Path,
                    title: str) -> None:
    """One panel per entry of ``panels`` (a key, or a tuple of keys drawn together), ``x`` on the
    horizontal axis; panels whose keys the rows lack are left out, reward components are added."""
    frame = pd.DataFrame(list(rows))
    components = tuple(k for k in frame.columns if k.startswith("reward/") and k != "reward/task")
    wanted = [p if isinstance(p, tuple) else (p,) for p in panels]
    if components:
        wanted.insert(1, components)
    present = [tuple(k for k in keys if k in frame) for keys in wanted]
    present = [keys for keys in present if keys]
    fig, axes = _grid(len(present))
    for ax, keys in zip(axes, present):
        for key in keys:
            ax.plot(frame[x], frame[key], marker="o", markersize=3, label=key)
        ax.set_xlabel(x)
        if len(frame) <= 10:  # iterations and epochs are whole numbers
            ax.set_xticks(list(frame[x]))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(keys[0] if len(keys) == 1 else ", ".join(k.split("/")[-1] for k in keys), fontsize=10)
        if len(keys) > 1:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def panel_title(task: str, metric: str, lower: Collection[str]) -> str:
    """A GRUE chart panel's title: the task and metric, marked when lower is better (a metric in ``lower``)."""
    return f"{task}: {metric}" + (" (lower is better)" if metric in lower else "")


def grue_chart(table: pd.DataFrame, headline: dict[str, list[str]], path: Path,
               lower: Collection[str] | Mapping[str, Collection[str]] = ()) -> None:
    """Each task's reward and headline metrics by method: bars at the mean over seeds, error bars one
    standard deviation (the ``<metric>_std`` column; none with one seed). One panel per task x metric, its title
    marked where lower is better (``lower``: the keys, or each task's, :func:`grueflow.grue.lower_keys_by_task`)."""
    panels = [(task, metric) for task in dict.fromkeys(table["task"])
              for metric in ("reward", *headline.get(task, [])) if metric in table]
    fig, axes = _grid(len(panels), width=4.5, height=3.2)
    for ax, (task, metric) in zip(axes, panels):
        rows = table[table["task"] == task]
        means = pd.to_numeric(rows[metric], errors="coerce")
        stds = pd.to_numeric(rows.get(f"{metric}_std", pd.Series(np.nan, index=rows.index)), errors="coerce")
        positions = np.arange(len(rows))
        spread = stds.fillna(0) if stds.notna().any() else None  # one seed: no spread, no error bars
        ax.bar(positions, means.fillna(0), yerr=spread, capsize=4,
               color=[f"C{i}" for i in range(len(rows))])
        for pos, value in zip(positions, means):
            if pd.isna(value):  # a metric that could not be computed: say so instead of drawing 0
                ax.annotate("n/a", (pos, 0), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(positions, list(rows["method"]), rotation=30, ha="right", fontsize=8)
        ax.set_title(panel_title(task, metric, lower.get(task, ()) if isinstance(lower, Mapping) else lower),
                     fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("GRUE table: mean over seeds, error bars one std")
    fig.tight_layout()
    _save(fig, path, GRUE_CHART_TITLE)

