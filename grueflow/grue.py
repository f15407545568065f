"""The GRUE table: one row per task x method, mean and std over seeds, plus a normalised score.

Columns: ``task, method, n_seeds, reward, reward_std, fluency_ppl, fluency_ppl_std``, then each of
the task's headline metrics as ``<metric>`` and ``<metric>_std``, then ``normalised_score``. The mean and
std of a metric are over the seeds that have a value for it; where some row has it on only some of its seeds
(neither all nor none), a ``<metric>_n`` column after ``<metric>_std`` counts them (the markdown says
"(1 of 2 seeds)" in the cell instead). A metric no seed has is empty.

A seed's reward is the mean over the test samples its reward could score: where a component scored some NaN, evaluate
left them out and counted them (``reward_left_out`` of ``reward_samples``, :func:`grueflow.evaluation.score`), so
that row's reward is over fewer samples than another's may be; the ``.md`` notes it under the task's table ("reward
over 7 of 8 test samples") and the ``.json`` holds the counts per seed (:func:`reward_left_out`).

``reward`` is the task's RL reward (for the default tasks, the lexicon sentiment and the concept
coverage), so task files list as headline metrics the others they report.

``normalised_score`` (per task and method): the reward, the fluency perplexity and each headline
metric are min-max normalised over the task's methods (1 = best method, 0 = worst; the fluency perplexity and
each score its metric declares lower-is-better, :attr:`grueflow.metrics.Metric.lower_is_better`, are inverted),
then averaged; a metric equal for every method (or missing for all) tells nothing
and is left out, as is one that some row has on only some of its seeds (the ``.md`` says so), and a method
missing a value the other methods have gets no score (even where those methods tie on it). Every run of a task
must have been scored with the same reward and metrics, and every seed of a method with the same settings
(:func:`load_runs` refuses others).
The ``grue_score`` of a method (in the ``.md`` and ``.json``) is the mean of its normalised scores over the
tasks on which every method of the table has a normalised score, so every method is scored over the same
tasks; the ``.md`` lists the tasks left out and why. This is the relative normalisation of the RL4LMs paper's
summary figures; it ranks methods within one table and is not comparable across tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Collection, Iterable, Optional

import numpy as np
import pandas as pd

from grueflow import io
from grueflow.config import GRUE_SCORE, REWARD_LEFT_OUT_KEY, REWARD_SAMPLES_KEY, TRAIN_KL_KEY
from grueflow.metrics import lower_is_better_keys
from grueflow.registry import UnknownNameError

REWARD = "reward"
# {task: {method: {seed: (samples the reward left out, samples scored or None)}}} (:func:`reward_left_out`)
LeftOut = dict[str, dict[str, dict[str, tuple[int, Optional[int]]]]]
FLUENCY = "fluency/perplexity"
FLUENCY_COLUMN = "fluency_ppl"  # the table's column of FLUENCY: lower is better


def lower_is_better(key: str, ids: Iterable[str] = ()) -> bool:
    """True for a score (a metrics key or a table column) where lower is better, by whole key: the fluency column, or
    a key its metric declares so (:attr:`grueflow.metrics.Metric.lower_is_better`), the metric being a built-in one
    or one of ``ids`` (the metrics a run was scored with, as its task file names them)."""
    return key == FLUENCY_COLUMN or key in lower_is_better_keys(ids)


def lower_keys(runs: list[dict[str, Any]]) -> frozenset[str]:
    """The keys and columns of ``runs``' table where lower is better (:func:`lower_is_better`), by the metrics each run
    was scored with (its ``metric_ids``, which :func:`load_runs` reads from its evaluate record; a run without them
    counts the built-in metrics' directions alone). A DataError names a metric that no longer loads."""
    ids = sorted({i for run in runs for i in run.get("metric_ids", ())})
    try:
        return frozenset({FLUENCY_COLUMN, *lower_is_better_keys(ids)})
    except (UnknownNameError, ValueError) as err:
        raise io.DataError(f"the evaluate runs were scored with a metric that does not load here ({err}), so the "
                           f"table cannot tell whether lower is better for its scores: install it, or rerun evaluate "
                           f"with the task file's current metrics") from None


def lower_keys_by_task(runs: list[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """:func:`lower_keys` of each task's own runs: two tasks' metrics of their own may write one key in opposite
    directions."""
    return {task: lower_keys([r for r in runs if r["task"] == task]) for task in dict.fromkeys(r["task"] for r in runs)}


METHOD_ORDER = ("zero_shot", "supervised")


def _std(values: pd.Series) -> float:
    return float(values.std(ddof=1)) if values.notna().sum() > 1 else math.nan


def _mean_std(values: pd.Series) -> tuple[float, float]:
    """The mean and sample std (ddof 1) of one metric's values over a row's seeds (NaN: a seed without a value); the
    mean NaN where no seed has one, the std where fewer than two do. The squares a std sums overflow a float from
    |value| ~1e154 on, and a sum of values from ~9e307, long before the mean and std themselves do: there both are
    computed on the values divided by the largest magnitude and scaled back (the plain sums elsewhere, so ordinary
    values give the same bits as ever). A std still beyond a float (values of both signs past ~1.3e308) is inf."""
    if not values.notna().any():
        return math.nan, math.nan
    with np.errstate(over="ignore"):
        mean, std = float(values.mean()), _std(values)
        if math.isinf(mean) or math.isinf(std):
            scale = float(values.abs().max())
            mean, std = scale * float((values / scale).mean()), scale * _std(values / scale)
    return mean, std


def _method_rank(method: str) -> tuple[int, str]:
    return (METHOD_ORDER.index(method), "") if method in METHOD_ORDER else (len(METHOD_ORDER) + method.count("+"), method)


def load_runs(paths: list[Path]) -> list[dict[str, Any]]:
    """The evaluate outputs ``<eval dir>/<task>/<method>/seed<k>/metrics.json``, each checked against the manifest of
    the ``stage.json`` the evaluate stage wrote beside it and against its place: a run without that record, a run
    copied to another method's folder, or a file edited by hand, truncated or of the wrong shape, is a
    :class:`~grueflow.io.DataError` naming it, never a table row. Each run gets ``metric_ids``: the ids of the
    metrics and reward components its record says it was scored with (:func:`lower_keys` reads their directions)."""
    loaded = [_load_run(p) for p in paths]
    if not loaded:
        raise ValueError("no metrics.json files to aggregate; run the evaluate stage first")
    runs = [{**run, "metric_ids": _metric_ids(params)} for run, params in loaded]
    _check_scored_alike(runs, paths, [params for _, params in loaded])
    return runs


def _metric_ids(params: dict[str, Any]) -> list[str]:
    """The metric ids an evaluate record's params name: its ``metrics``, then its reward's components."""
    metrics = params.get("metrics") or []
    components = (params.get("reward") or {}).get("components") or []
    return [*(m["id"] for m in metrics if isinstance(m, dict) and "id" in m),
            *(c["metric"] for c in components if isinstance(c, dict) and "metric" in c)]


# the evaluate params that must be equal for every run of a task (the task's own reward and metrics), and for
# every seed of a method (also the lengths and decoding its method_overrides may change)
TASK_WIDE, METHOD_WIDE = ("reward", "metrics"), ("reward", "metrics", "lengths", "eval_generation", "precision")
# beside a run's evaluate params: {"evaluated": ..., "trained": ...}, the precisions its evaluation and the training of
# the model it scored ran in, each where its provenance record says (None where not)
USED_PRECISION = "used_precision"


def _check_scored_alike(runs: list[dict[str, Any]], paths: list[Path], records: list[dict[str, Any]]) -> None:
    """Raise a DataError when two runs of one task were scored with different reward or metrics settings, or two
    seeds of one method also with different lengths, decoding or precision (``records``: each run's evaluate
    params), or in different precisions (precision ``auto`` is bf16 on CUDA and fp32 on the CPU; each run's
    :data:`USED_PRECISION`, where its provenance record says): their numbers would share a row or be normalised
    against each other while measuring different things."""
    first: dict[tuple[str, ...], tuple[Path, dict[str, Any]]] = {}
    used: dict[tuple[str, ...], tuple[Path, str]] = {}  # per method and step, the first seed that says its precision
    for run, path, params in zip(runs, paths, records):
        for scope, keys in (((run["task"],), TASK_WIDE), ((run["task"], run["method"]), METHOD_WIDE)):
            mine = {k: params.get(k) for k in keys}
            seen, theirs = first.setdefault(scope, (path, mine))
            differ = [k for k in keys if theirs[k] != mine[k]]
            if differ:
                raise io.DataError(f"{seen.parent} and {path.parent} were evaluated with different "
                                   f"{' and '.join(differ)} settings (their {io.STAGE_RECORD} params): one is stale; "
                                   f"rerun evaluate for it (delete its folder and rerun the pipeline)")
        for step, precision in (params.get(USED_PRECISION) or {}).items():
            if precision is None:
                continue
            seen, theirs = used.setdefault((run["task"], run["method"], step), (path, precision))
            if theirs != precision:
                raise io.DataError(f"{seen.parent} and {path.parent} were {step} in different precisions ({theirs} "
                                   f"and {precision}: precision {params.get('precision')!r} resolved on different "
                                   f"devices); give the suite one precision (fp32 or bf16), or rerun one of them on "
                                   f"the other's device")


def _check_evaluate_record(path: Path) -> dict[str, Any]:
    """Raise a DataError unless ``path``'s folder holds the evaluate stage's ``stage.json``, listing ``path`` in its
    manifest, and ``path`` matches it (without a record, :func:`io.check_stage_output` would check nothing);
    returns the record's params."""
    folder, record_file = path.parent, path.parent / io.STAGE_RECORD
    if not record_file.is_file():
        raise io.DataError(f"{folder} has no {io.STAGE_RECORD}: it was not written by the evaluate stage (or was "
                           f"damaged); rerun evaluate for it (delete the folder and rerun the pipeline)")
    io.check_stage_output(path)  # a damaged record, or a file that does not match it
    record = io.read_json(record_file)
    if record.get("stage") != "evaluate" or path.name not in record["files"]:
        raise io.DataError(f"{record_file} is not the evaluate stage's record of {path.name} (stage "
                           f"{record.get('stage')!r}, files {sorted(record['files'])}); rerun evaluate for it "
                           f"(delete the folder and rerun the pipeline)")
    inputs = record.get("inputs") if isinstance(record.get("inputs"), dict) else {}
    model = (inputs.get("model") or {}).get("path") if isinstance(inputs.get("model"), dict) else None
    trained = Path(model).parent if model and Path(model).name == io.MODEL_DIR else None  # a stage folder's model/
    return {**(record.get("params") or {}),
            USED_PRECISION: {"evaluated": _used_precision(folder),
                             "trained": _used_precision(trained) if trained is not None else None}}


def _used_precision(folder: Path) -> str | None:
    """The precision ``auto`` resolved to in the run of ``folder`` (its provenance record, which no content hash
    covers and a DVC checkout may lack: None then; None for a folder no training stage wrote)."""
    try:
        execution = io.read_json(folder / io.PROVENANCE_RECORD).get("execution")
    except (OSError, ValueError, AttributeError):
        return None
    used = execution.get("precision") if isinstance(execution, dict) else None
    return used if isinstance(used, str) else None


def _load_run(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run ``path`` holds, checked, and its evaluate params."""
    params = _check_evaluate_record(path)
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
    named = next((name for name in run["headline"] if not isinstance(name, str)), None)
    missing = run.get("missing", {})
    if named is not None or not isinstance(missing, dict) or not all(
            isinstance(key, str) and isinstance(why, str) for key, why in missing.items()):
        shown = f"headline holds {json.dumps(named)[:40]}, which names no metric" if named is not None else \
            f"missing is {json.dumps(missing)[:40]}, not a mapping of metric names to reasons"
        raise io.DataError(f"{path}: {shown} (evaluate writes metric names there): rerun evaluate for it (delete "
                           f"its folder and rerun the pipeline)")
    # evaluate writes each headline metric's value (null where not computed) and records a reason for each one it
    # could not run; the end-of-training KL is written for RL runs alone
    unknown = [name for name in run["headline"] if name not in run["metrics"] and name not in missing
               and name != TRAIN_KL_KEY]
    if unknown:
        raise io.DataError(f"{path}: headline names {', '.join(unknown)}, which metrics and missing do not hold, so "
                           f"its cells would be empty with no reason: rerun evaluate for it (delete its folder and "
                           f"rerun the pipeline)")
    for key, value in run["metrics"].items():
        shown = _not_a_metric_value(value)
        if shown:
            raise io.DataError(f"{path}: metric {key!r} is {shown}; a metric value is a finite number or null (not "
                               f"computed), as evaluate writes it: rerun evaluate for it (delete its folder and rerun "
                               f"the pipeline)")
    _check_left_out(path, run["metrics"])
    return run, params


def _check_left_out(path: Path, metrics: dict[str, Any]) -> None:
    """Raise a DataError unless ``metrics`` (a run's, each value already a finite number or null) holds no count of
    samples its reward left out, or whole numbers with 1 <= ``reward_left_out`` <= ``reward_samples`` (the samples
    scored; an evaluate output written before it was recorded may lack it), as evaluate writes them."""
    left, total = metrics.get(REWARD_LEFT_OUT_KEY), metrics.get(REWARD_SAMPLES_KEY)
    if left is None and total is None:
        return
    counts = left is not None and float(left).is_integer() and left >= 1 and (
        total is None or float(total).is_integer() and total >= left)
    if not counts:
        raise io.DataError(f"{path}: {REWARD_LEFT_OUT_KEY} is {json.dumps(left)} and {REWARD_SAMPLES_KEY} "
                           f"{json.dumps(total)}; evaluate writes the samples its reward left out and the samples it "
                           f"scored as whole numbers, 1 <= {REWARD_LEFT_OUT_KEY} <= {REWARD_SAMPLES_KEY}, or neither: "
                           f"rerun evaluate for it (delete its folder and rerun the pipeline)")


def reward_left_out(runs: list[dict[str, Any]]) -> LeftOut:
    """``{task: {method: {seed: (left out, samples)}}}`` for each run whose reward left out test samples (a
    component scored them NaN; their counts in its metrics, :func:`grueflow.evaluation.score`), seeds in the runs'
    order; ``samples`` is None where the run does not record it."""
    counts: LeftOut = {}
    for run in runs:
        left, total = run["metrics"].get(REWARD_LEFT_OUT_KEY), run["metrics"].get(REWARD_SAMPLES_KEY)
        if left:
            counts.setdefault(run["task"], {}).setdefault(run["method"], {})[str(run["seed"])] = (
                int(left), None if total is None else int(total))
    return counts


def reward_notes(task: str, left_out: dict[str, dict[str, tuple[int, Optional[int]]]]) -> list[str]:
    """One note per seed of ``task`` whose reward left out samples (``left_out``: the task's part of
    :func:`reward_left_out`), e.g. "sentiment / zero_shot, seed 0: reward over 7 of 8 test samples (1 left out: a
    reward component could not score it)", methods in the table's order."""
    notes = []
    for method in sorted(left_out, key=_method_rank):
        for seed, (left, total) in left_out[method].items():
            over = f"{total - left} of {total}" if total is not None else f"all but {left} of the"
            notes.append(f"{task} / {method}, seed {seed}: reward over {over} test samples ({left} left out: a reward "
                         f"component could not score {'it' if left == 1 else 'them'})")
    return notes


def _not_a_metric_value(value: Any) -> str:
    """How ``value`` (read from a metrics.json) is shown when it is no metric value, e.g. ``'0.5' (a string)``,
    ``true (a boolean)``, ``Infinity``; "" for a finite number or null. pandas would average a numeric string or a
    boolean as a number, and an infinity would end the table's JSON writer in a traceback."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return f"{json.dumps(value)} (a boolean)"
    if isinstance(value, (int, float)):
        try:
            return "" if math.isfinite(value) else json.dumps(value)
        except OverflowError:  # an int past 1.8e308
            return f"{str(value)[:20]}... (an integer too large for a float)"
    kind = {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
    return f"{json.dumps(value)[:40]} ({kind})"


def build_table(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """Aggregate evaluate outputs (``{task, method, seed, headline, metrics}``, and ``metric_ids`` as
    :func:`load_runs` gives them) into the GRUE table."""
    rows, counts = [], []
    headline = headlines(runs)
    for task in sorted(headline):
        task_runs = [r for r in runs if r["task"] == task]
        for method in sorted({r["method"] for r in task_runs}, key=_method_rank):
            method_runs = [r for r in task_runs if r["method"] == method]
            frame = pd.DataFrame([r["metrics"] for r in method_runs], dtype=float)
            row: dict[str, Any] = {"task": task, "method": method, "n_seeds": len(frame)}
            masks = {r["nlpo_masks"] for r in method_runs if "nlpo_masks" in r}
            if masks:  # an NLPO row: evaluated with its action masks (RL4LMs), or not (eval_with_masks: false)
                row["nlpo_masks"] = ("with masks" if masks == {True} else "without masks" if masks == {False}
                                     else "mixed")
            count: dict[str, int] = {}
            for column, key in [("reward", REWARD), ("fluency_ppl", FLUENCY)] + [(h, h) for h in headline[task]]:
                values = frame[key] if key in frame else pd.Series([math.nan] * len(frame))
                row[column], row[f"{column}_std"] = _mean_std(values)
                if math.isinf(row[f"{column}_std"]):
                    raise io.DataError(f"the {key} values of {task}/{method}'s seeds "
                                       f"({', '.join(f'{v:.4g}' for v in values.dropna())}) spread wider than a "
                                       f"float holds (1.8e308), so their std cannot be written: check their "
                                       f"metrics.json, or rerun evaluate for them (delete their folders and rerun "
                                       f"the pipeline)")
                count[column] = int(values.notna().sum())
            rows.append(row)
            counts.append(count)
    table = pd.DataFrame(rows)
    _insert_seed_counts(table, counts)
    table["normalised_score"] = _normalised(table, headline, lower_keys_by_task(runs))
    return table


def _insert_seed_counts(table: pd.DataFrame, counts: list[dict[str, int]]) -> None:
    """Add ``<metric>_n`` (seeds with a value) after ``<metric>_std`` for each metric some row has on only some of
    its seeds; a metric every row has on all or none of its seeds gets no column (its cells say so already)."""
    partial = {column for count, n_seeds in zip(counts, table["n_seeds"]) for column, n in count.items()
               if 0 < n < n_seeds}
    for column in [c for c in table.columns if c in partial]:
        seeds = [count.get(column, math.nan) for count in counts]
        table.insert(table.columns.get_loc(f"{column}_std") + 1, f"{column}_n", pd.array(seeds, dtype="Int64"))


def _scored_metrics(group: pd.DataFrame, candidates: Iterable[str]) -> list[str]:
    """The ``candidates`` (reward, fluency and headline columns) that one task's normalised score compares: all but
    the end-of-training KL (a diagnostic) where the methods' values differ or some method lacks a value others have
    (one equal for all, or missing for all, tells nothing), and none that some row has on only some of its seeds
    (:func:`partial_metrics`). A metric the methods that have it tie on is kept when some method lacks it: it adds
    nothing to their scores (:func:`_normalised`), but the method without it must get none."""
    partial = partial_metrics(group)
    return [c for c in candidates if c != TRAIN_KL_KEY and c in group and c not in partial
            and (group[c].nunique(dropna=True) > 1 or group[c].notna().any() and group[c].isna().any())]


def _separating(group: pd.DataFrame, metrics: Iterable[str]) -> list[str]:
    """Those of ``metrics`` whose values differ between the methods that have them (the ones a min-max
    normalisation can rank on)."""
    return [c for c in metrics if group[c].nunique(dropna=True) > 1]


def partial_metrics(group: pd.DataFrame) -> dict[str, str]:
    """``{metric: why}`` for each metric of one task's rows that some row has on only some of its seeds: a mean of
    1 of 2 seeds set against means of 2 would rank seeds, not methods, so the normalised score leaves it out."""
    partial = {}
    for column in [c for c in group.columns if f"{c}_n" in group.columns]:
        rows = [f"{r['method']} ({r[f'{column}_n']} of {r['n_seeds']} seeds)" for r in group.to_dict("records")
                if not pd.isna(r[f"{column}_n"]) and 0 < r[f"{column}_n"] < r["n_seeds"]]
        if rows:
            partial[column] = f"only some seeds have it: {', '.join(rows)}"
    return partial


def _normalised(table: pd.DataFrame, headline: dict[str, list[str]],
                lower: Collection[str] | dict[str, Collection[str]]) -> pd.Series:
    """Each row's normalised score (see the module docstring); the columns in ``lower`` are inverted (a mapping:
    each task's own, since two tasks' metrics of their own may write one key in opposite directions)."""
    scores = pd.Series(math.nan, index=table.index)
    for task, group in table.groupby("task"):
        parts, inverted = [], lower.get(task, ()) if isinstance(lower, dict) else lower
        compared = _scored_metrics(group, ["reward", FLUENCY_COLUMN, *headline[task]])
        for metric in _separating(group, compared):
            values = group[metric]
            with np.errstate(over="ignore"):
                if math.isinf(values.max() - values.min()):  # means of both signs past ~9e307: the same ranks, scaled
                    values = values / values.abs().max()
            norm = (values - values.min()) / (values.max() - values.min())
            parts.append(1 - norm if metric in inverted else norm)
        if parts:  # a method missing a value the others have gets no score: ranking it on fewer is unfair
            lacking = group[compared].isna().any(axis=1)
            scores[group.index] = pd.concat(parts, axis=1).mean(axis=1, skipna=False).mask(lacking)
    return scores


def grue_tasks(table: pd.DataFrame) -> tuple[list[str], dict[str, str]]:
    """The tasks the GRUE score averages over (those on which every method of the table has a normalised score),
    and ``{task: why}`` for each task left out."""
    methods = sorted(set(table["method"]), key=_method_rank)
    scored, left_out = [], {}
    for task, group in table.groupby("task", sort=True):
        rows = group.set_index("method")
        unscored = [m for m in methods if m not in rows.index or pd.isna(rows.loc[m, "normalised_score"])]
        if not unscored:
            scored.append(task)
            continue
        compared = _scored_metrics(group, [c for c in group.columns if f"{c}_std" in group.columns])
        if not _separating(group, compared):
            left_out[task] = ("no method has a normalised score on it: no metric tells its methods apart (each is "
                              "equal for every method, or missing); every method lacks it, so the scores stay "
                              "comparable")
            continue
        why = [f"{m} (not evaluated on it)" if m not in rows.index else
               f"{m} (no {', '.join(c for c in compared if pd.isna(rows.loc[m, c]))})" for m in unscored]
        every = "every method lacks it, so the scores stay comparable" if len(unscored) == len(methods) else \
            "left out for every method so that all are scored over the same tasks"
        left_out[task] = f"no normalised score for {', '.join(why)}; {every}"
    return scored, left_out


def grue_scores(table: pd.DataFrame) -> dict[str, float]:
    """Each method's mean normalised score over :func:`grue_tasks` (NaN when no task has a score for every method)."""
    scored, _ = grue_tasks(table)
    means = table[table["task"].isin(scored)].groupby("method")["normalised_score"].mean()
    return {m: float(means.get(m, math.nan)) for m in sorted(set(table["method"]), key=_method_rank)}


def to_nested(table: pd.DataFrame, left_out: LeftOut | None = None) -> dict[str, Any]:
    """``{task: {method: {metric: value}}}`` (for ``dvc metrics diff``) plus ``grue_score``; NaN dropped. A method
    whose reward left out test samples on some seed (``left_out``, as :func:`reward_left_out` gives it) also holds
    ``reward_left_out/seed<k>`` and ``reward_samples/seed<k>`` (the latter where the run records it)."""
    nested: dict[str, Any] = {}
    for row in table.to_dict("records"):
        values = {k: io.rounded(v) for k, v in row.items()
                  if k not in ("task", "method") and isinstance(v, (int, float)) and not math.isnan(v)}
        for seed, (left, total) in (left_out or {}).get(row["task"], {}).get(row["method"], {}).items():
            values[f"{REWARD_LEFT_OUT_KEY}/seed{seed}"] = left
            if total is not None:
                values[f"{REWARD_SAMPLES_KEY}/seed{seed}"] = total
        nested.setdefault(row["task"], {})[row["method"]] = values
    nested[GRUE_SCORE] = {m: io.rounded(v) for m, v in grue_scores(table).items() if not math.isnan(v)}
    return nested


def grue_table_problem(table: Any, grue: bool = True) -> Optional[str]:
    """What keeps ``table`` (a metrics JSON: what ``grueflow diff`` compares, what aggregate would replace) from
    being one, or None: it must be an object, and a GRUE table (``grue``) ``{task: {method: {metric: number or
    null}}}`` beside ``grue_score: {method: number or null}``, each number finite (what aggregate writes)."""
    if not isinstance(table, dict):
        return f"a JSON {type(table).__name__}, not an object of metrics"
    if not grue:
        return None
    for task, methods in table.items():
        depth = 1 if task == GRUE_SCORE else 2
        leaves: list[tuple[str, Any]] = [(task, methods)]
        for _ in range(depth):
            if any(not isinstance(node, dict) for _, node in leaves):
                where, node = next((w, n) for w, n in leaves if not isinstance(n, dict))
                return f"{where} is {json.dumps(node)[:40]}, where a GRUE table holds an object"
            leaves = [(f"{where}.{name}", value) for where, node in leaves for name, value in node.items()]
        for where, value in leaves:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            shown = _not_a_metric_value(value) if number else "" if value is None else json.dumps(value)[:40]
            if shown:  # NaN reads as unknown, an infinity as a change, an int past a float's range fails in DVC
                return f"{where} is {shown}, where a GRUE table holds a finite number or null"
    return None


def missing_metrics(runs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``{task: {metric id: reason}}`` for the metrics evaluate could not run on this machine."""
    missing: dict[str, dict[str, str]] = {}
    for run in runs:
        missing.setdefault(run["task"], {}).update(run.get("missing", {}))
    return {task: reasons for task, reasons in missing.items() if reasons}


def headlines(runs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each task's headline metrics, as its evaluate runs name them; runs of one task that name different headline
    metrics (evaluated with different task files) are a :class:`~grueflow.io.DataError` naming them."""
    named: dict[str, dict[tuple[str, ...], list[str]]] = {}
    for run in runs:
        runs_of = named.setdefault(run["task"], {}).setdefault(tuple(run["headline"]), [])
        runs_of.append(f"{run['task']}/{run['method']}/seed{run['seed']}")
    for task, by_headline in named.items():
        if len(by_headline) > 1:
            listed = "; ".join(f"{', '.join(names)}: [{', '.join(h)}]" for h, names in by_headline.items())
            raise io.DataError(f"the evaluate runs of task {task!r} name different headline_metrics ({listed}); "
                               f"rerun evaluate for the runs whose headline_metrics differ from the task file's")
    return {task: list(next(iter(by_headline))) for task, by_headline in named.items()}


def to_markdown(table: pd.DataFrame, headline: dict[str, list[str]] | None = None,
                missing: dict[str, dict[str, str]] | None = None,
                left_out: LeftOut | None = None) -> str:
    """One section per task, with the common columns and that task's headline metrics (all of the table's
    when ``headline`` is not given). A metric with no value shows as "—" (missing, never 0), and one that only some
    of a row's seeds have as "<mean> (<k> of <n> seeds)"; a std column with no value at all (one seed) is left out,
    as is ``nlpo_masks`` for a task without NLPO rows; the metrics that could not run are listed with the reason,
    each seed whose reward left out test samples with their count (``left_out``, :func:`reward_notes`), and the
    tasks left out of the GRUE score, each note on one line (:func:`grueflow.io.markdown_line`)."""
    lines = ["# GRUE table", ""]
    all_headline = {c for cs in (headline or {}).values() for c in cs}
    counts = {f"{c}_n" for c in table.columns if f"{c}_n" in table.columns and f"{c}_std" in table.columns}
    for task, group in table.groupby("task", sort=True):
        own = set((headline or {}).get(task, all_headline))
        columns = [c for c in group.columns if not ((c.endswith("_std") or c == "nlpo_masks") and group[c].isna().all())
                   and (c.removesuffix("_std") not in all_headline or c.removesuffix("_std") in own)
                   and c not in counts]
        lines += [io.markdown_line(f"## {task}"), "", io.markdown_row(columns), "|" + "---|" * len(columns)]
        for row in group.to_dict("records"):
            lines.append(io.markdown_row(_cell(row[c]) + seeds_note(row, c) for c in columns))
        notes = [f"- missing `{metric}`: {reason}" for metric, reason in (missing or {}).get(task, {}).items()]
        notes += [f"- `{metric}` is left out of the normalised score: {why}"
                  for metric, why in partial_metrics(group).items()]
        notes += [f"- {note}" for note in reward_notes(task, (left_out or {}).get(task, {}))]
        lines += [""] + [io.markdown_line(note) for note in notes] + ([""] if notes else [])
    lines += ["## GRUE score (mean normalised score over tasks)", "", "| method | grue_score |", "|---|---|"]
    lines += [io.markdown_row((m, _cell(v))) for m, v in grue_scores(table).items()]
    scored, left_out = grue_tasks(table)
    if left_out:
        lines += ["", io.markdown_line(f"- the GRUE score is the mean over "
                                       f"{', '.join(f'`{t}`' for t in scored) or 'no task'}")]
        lines += [io.markdown_line(f"- `{task}` is left out of the GRUE score: {why}")
                  for task, why in left_out.items()]
    return "\n".join(lines) + "\n"


def seeds_note(row: dict[str, Any], metric: str) -> str:
    """" (k of n seeds)" when only k of the row's n seeds have a value for ``metric`` (its ``<metric>_n`` column),
    else ""."""
    seeds = row.get(f"{metric}_n")
    if seeds is None or pd.isna(seeds) or not 0 < seeds < row["n_seeds"]:
        return ""
    return f" ({seeds} of {row['n_seeds']} seeds)"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def write_table(table: pd.DataFrame, csv_path: Path, md_path: Path, json_path: Path,
                headline: dict[str, list[str]] | None = None, missing: dict[str, dict[str, str]] | None = None,
                left_out: LeftOut | None = None) -> None:
    with io.atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")
    io.write_text(md_path, to_markdown(table, headline, missing, left_out))
    io.write_json(json_path, to_nested(table, left_out))
