"""The GRUE table: one row per task x method, mean and std over seeds, plus a normalised score.

Columns: ``task, method, n_seeds, reward, reward_std, fluency_ppl, fluency_ppl_std``, then each of
the task's headline metrics as ``<metric>`` and ``<metric>_std``, then ``normalised_score``.

``reward`` is the task's RL reward (for the default tasks, the lexicon sentiment and the concept
coverage), so task files list as headline metrics the others they report.

``normalised_score`` (per task and method): the reward, the fluency perplexity and each headline
metric are min-max normalised over the task's methods (1 = best method, 0 = worst; perplexity-like
metrics are inverted), then averaged.
The ``grue_score`` of a method is the mean of its normalised scores over tasks. This is the relative
normalisation of the RL4LMs paper's summary figures; it ranks methods within one table and is not
comparable across tables.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from grueflow import io
from grueflow.config import TRAIN_KL_KEY

REWARD = "reward"
FLUENCY = "fluency/perplexity"
# the scores where lower is better, by whole key (a plugin's key is higher-is-better): the table's fluency column,
# perplexities, TER, repetition and self-BLEU (lower is more diverse)
LOWER_IS_BETTER = frozenset({"fluency_ppl", "fluency/perplexity", "fluency/reference_perplexity", "lexical/ter",
                             "diversity/repetition", "diversity/self_bleu"})


def lower_is_better(key: str) -> bool:
    """True for a score (a metrics key or a table column) where lower is better: :data:`LOWER_IS_BETTER`."""
    return key in LOWER_IS_BETTER
METHOD_ORDER = ("zero_shot", "supervised")


def _std(values: pd.Series) -> float:
    return float(values.std(ddof=1)) if values.notna().sum() > 1 else math.nan


def _method_rank(method: str) -> tuple[int, str]:
    return (METHOD_ORDER.index(method), "") if method in METHOD_ORDER else (len(METHOD_ORDER) + method.count("+"), method)


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """The evaluate outputs ``<eval dir>/<task>/<method>/seed<k>/metrics.json``, each checked against its stage
    folder's manifest and against its place: a run copied to another method's folder, or a file edited by
    hand, truncated or of the wrong shape, is a :class:`~grueflow.io.DataError` naming it, never a table row."""
    runs = [_load_run(p) for p in paths]
    if not runs:
        raise ValueError("no metrics.json files to aggregate; run the evaluate stage first")
    return runs


def _load_run(path: Path) -> dict[str, Any]:
    io.check_stage_output(path)
    try:
        run = io.read_json(path)
    except ValueError as err:
        raise io.DataError(f"{path} is not readable JSON ({err}); delete its folder and rerun the pipeline") from None
    place = {"task": path.parent.parent.parent.name, "method": path.parent.parent.name,
             "seed": path.parent.name.removeprefix("seed")}
    if not isinstance(run, dict) or not isinstance(run.get("metrics"), dict) or not isinstance(run.get("headline"),
                                                                                                   list):
        raise io.DataError(f"{path} is not an evaluate output (task, method, seed, headline, metrics); delete its "
                           f"folder and rerun the pipeline")
    found = {"task": run.get("task"), "method": run.get("method"), "seed": str(run.get("seed"))}
    if found != place:
        raise io.DataError(f"{path} holds the run {found}, not the run its folder names {place}; was a folder copied "
                           f"or moved? Delete it and rerun the pipeline")
    return run


def build_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """Aggregate evaluate outputs (``{task, method, seed, headline, metrics}``) into the GRUE table."""
    rows = []
    tasks = sorted({r["task"] for r in runs})
    for task in tasks:
        task_runs = [r for r in runs if r["task"] == task]
        headline = list(task_runs[0]["headline"])
        for method in sorted({r["method"] for r in task_runs}, key=_method_rank):
            method_runs = [r for r in task_runs if r["method"] == method]
            frame = pd.DataFrame([r["metrics"] for r in method_runs], dtype=float)
            row: dict[str, Any] = {"task": task, "method": method, "n_seeds": len(frame)}
            masks = {r["nlpo_masks"] for r in method_runs if "nlpo_masks" in r}
            if masks:  # an NLPO row: evaluated with its action masks (RL4LMs), or not (eval_with_masks: false)
                row["nlpo_masks"] = ("with masks" if masks == {True} else "without masks" if masks == {False}
                                     else "mixed")
            for column, key in [("reward", REWARD), ("fluency_ppl", FLUENCY)] + [(h, h) for h in headline]:
                values = frame[key] if key in frame else pd.Series([math.nan] * len(frame))
                row[column] = float(values.mean()) if values.notna().any() else math.nan
                row[f"{column}_std"] = _std(values)
            rows.append(row)
    table = pd.DataFrame(rows)
    table["normalised_score"] = _normalised(table, runs)
    return table


def _normalised(table: pd.DataFrame, runs: list[dict[str, Any]]) -> pd.Series:
    scores = pd.Series(math.nan, index=table.index)
    for task, group in table.groupby("task"):
        headline = next(r["headline"] for r in runs if r["task"] == task)
        parts = []
        for metric in ["reward", "fluency_ppl", *(h for h in headline if h != TRAIN_KL_KEY)]:  # KL: a diagnostic
            values = group[metric]
            low, high = values.min(), values.max()
            if values.isna().all() or high == low:
                continue
            norm = (values - low) / (high - low)
            parts.append(1 - norm if lower_is_better(metric) else norm)
        if parts:  # a method missing a value the others have gets no score: ranking it on fewer is unfair
            scores[group.index] = pd.concat(parts, axis=1).mean(axis=1, skipna=False)
    return scores


def grue_scores(table: pd.DataFrame) -> dict[str, float]:
    means = table.groupby("method")["normalised_score"].mean()
    return {m: float(means[m]) for m in sorted(means.index, key=_method_rank)}


def to_nested(table: pd.DataFrame) -> dict[str, Any]:
    """``{task: {method: {metric: value}}}`` (for ``dvc metrics diff``) plus ``grue_score``; NaN dropped."""
    nested: dict[str, Any] = {}
    for row in table.to_dict("records"):
        values = {k: round(v, 6) for k, v in row.items()
                  if k not in ("task", "method") and isinstance(v, (int, float)) and not math.isnan(v)}
        nested.setdefault(row["task"], {})[row["method"]] = values
    nested["grue_score"] = {m: round(v, 6) for m, v in grue_scores(table).items() if not math.isnan(v)}
    return nested


def missing_metrics(runs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``{task: {metric id: reason}}`` for the metrics evaluate could not run on this machine."""
    missing: dict[str, dict[str, str]] = {}
    for run in runs:
        missing.setdefault(run["task"], {}).update(run.get("missing", {}))
    return {task: reasons for task, reasons in missing.items() if reasons}


def headlines(runs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each task's headline metrics, as its evaluate runs name them."""
    return {run["task"]: list(run["headline"]) for run in runs}


def to_markdown(table: pd.DataFrame, headline: dict[str, list[str]] | None = None,
                missing: dict[str, dict[str, str]] | None = None) -> str:
    """One section per task, with the common columns and that task's headline metrics (all of the table's
    when ``headline`` is not given). A metric with no value shows as "—" (missing, never 0); a std column
    with no value at all (one seed) is left out, as is ``nlpo_masks`` for a task without NLPO rows; the metrics
    that could not run are listed with the reason."""
    lines = ["# GRUE table", ""]
    all_headline = {c for cs in (headline or {}).values() for c in cs}
    for task, group in table.groupby("task", sort=True):
        own = set((headline or {}).get(task, all_headline))
        columns = [c for c in group.columns if not ((c.endswith("_std") or c == "nlpo_masks") and group[c].isna().all())
                   and (c.removesuffix("_std") not in all_headline or c.removesuffix("_std") in own)]
        lines += [f"## {task}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in group[columns].to_dict("records"):
            lines.append("| " + " | ".join(_cell(row[c]) for c in columns) + " |")
        lines += [""] + [f"- missing `{metric}`: {reason}" for metric, reason in (missing or {}).get(task, {}).items()]
        lines += [""] if (missing or {}).get(task) else []
    lines += ["## GRUE score (mean normalised score over tasks)", "", "| method | grue_score |", "|---|---|"]
    lines += [f"| {m} | {_cell(v)} |" for m, v in grue_scores(table).items()]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def write_table(table: pd.DataFrame, csv_path: Path, md_path: Path, json_path: Path,
                headline: dict[str, list[str]] | None = None, missing: dict[str, dict[str, str]] | None = None) -> None:
    with io.atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")
    io.write_text(md_path, to_markdown(table, headline, missing))
    io.write_json(json_path, to_nested(table))
