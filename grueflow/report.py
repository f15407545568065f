"""HTML pieces of the suite report (``snakemake --report``): the GRUE table and sample generations.

Snakemake's report shows images and HTML files inline (a CSV only as a download), so the aggregate
stage writes the table and a few generations per method as small self-contained HTML pages.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import pandas as pd

from grueflow.grue import LeftOut, grue_scores, grue_tasks, partial_metrics, reward_notes, seeds_note
from grueflow.io import check_stage_output, iter_jsonl

_STYLE = ("<style>body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse;margin:.5em 0}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
          "td.text{text-align:left;max-width:40em}h2{margin-top:1.2em}</style>")


def _page(title: str, body: list[str]) -> str:
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>{_STYLE}</head>"
            f"<body><h1>{html.escape(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return html.escape(str(value))


def table_html(table: pd.DataFrame, headline: dict[str, list[str]], missing: dict[str, dict[str, str]],
               left_out: LeftOut | None = None) -> str:
    """The GRUE table as an HTML page: per task, its methods with reward, fluency and the task's headline
    metrics (mean, and ± std over seeds where there is one); "—" marks a metric that could not be computed, and
    "(k of n seeds)" one that only some of the row's seeds have (the table's ``<metric>_n`` column). Then, as
    :func:`grueflow.grue.to_markdown`, each method's GRUE score and the notes on what its scores leave out."""
    body = []
    for task in dict.fromkeys(table["task"]):
        rows = table[table["task"] == task]
        metrics = [m for m in ("reward", "fluency_ppl", *headline.get(task, []), "normalised_score") if m in rows]
        header = "".join(f"<th>{html.escape(m)}</th>" for m in ["method", "n_seeds", *metrics])
        lines = [f"<h2>{html.escape(task)}</h2>", f"<table><tr>{header}</tr>"]
        for row in rows.to_dict("records"):
            cells = [f"<td class=\"text\">{html.escape(row['method'])}</td>", f"<td>{_cell(row.get('n_seeds'))}</td>"]
            for metric in metrics:
                std = row.get(f"{metric}_std", math.nan)
                spread = "" if not isinstance(std, float) or math.isnan(std) else f" ± {std:.2g}"
                cells.append(f"<td>{_cell(row[metric])}{spread}{html.escape(seeds_note(row, metric))}</td>")
            lines.append("<tr>" + "".join(cells) + "</tr>")
        lines.append("</table>")
        lines += [f"<p>missing <code>{html.escape(m)}</code>: {html.escape(r)}</p>" for m, r in missing.get(task, {}).items()]
        lines += [f"<p><code>{html.escape(m)}</code> is left out of the normalised score: {html.escape(why)}</p>"
                  for m, why in partial_metrics(rows).items()]
        lines += [f"<p>{html.escape(note)}</p>" for note in reward_notes(task, (left_out or {}).get(task, {}))]
        body += lines
    body += ["<h2>GRUE score (mean normalised score over tasks)</h2>",
             "<table><tr><th>method</th><th>grue_score</th></tr>"]
    body += [f"<tr><td class=\"text\">{html.escape(m)}</td><td>{_cell(v)}</td></tr>"
             for m, v in grue_scores(table).items()]
    body.append("</table>")
    scored, left_out = grue_tasks(table)
    if left_out:
        body.append(f"<p>the GRUE score is the mean over {html.escape(', '.join(scored) or 'no task')}</p>")
        body += [f"<p><code>{html.escape(t)}</code> is left out of the GRUE score: {html.escape(why)}</p>"
                 for t, why in left_out.items()]
    return _page("GRUE table", body)


def read_samples(predictions: Path, n: int) -> list[dict[str, Any]]:
    """The first ``n`` rows of a run's ``predictions.jsonl``, once the file matches the manifest of its stage
    folder's ``stage.json`` (:func:`grueflow.io.check_stage_output`: a file edited by hand is a DataError)."""
    check_stage_output(predictions)
    rows = []
    for row in iter_jsonl(predictions):
        if len(rows) == n:
            break
        rows.append(row)
    return rows


def samples_html(samples: dict[tuple[str, str], list[dict[str, Any]]], seed: int) -> str:
    """Sample generations per task and method (``samples[(task, method)]``, the rows of seed ``seed``):
    prompt, generation, references and the task reward, side by side for the methods of a task."""
    body = [f"<p>The first test samples of each method (seed {seed}).</p>"]
    for task in dict.fromkeys(t for t, _ in samples):
        body.append(f"<h2>{html.escape(task)}</h2>")
        body.append("<table><tr><th>method</th><th>prompt</th><th>generation</th><th>references</th><th>reward</th></tr>")
        for (t, method), rows in samples.items():
            if t != task:
                continue
            for row in rows:
                reward = row.get("scores", {}).get("reward")
                body.append("<tr>" + "".join((
                    f"<td class=\"text\">{html.escape(method)}</td>",
                    f"<td class=\"text\">{html.escape(row['prompt'])}</td>",
                    f"<td class=\"text\"><b>{html.escape(row['generation'])}</b></td>",
                    f"<td class=\"text\">{'<br>'.join(html.escape(r) for r in row.get('references', []))}</td>",
                    f"<td>{_cell(float('nan') if reward is None else float(reward))}</td>")) + "</tr>")
        body.append("</table>")
    return _page("Sample generations", body)
