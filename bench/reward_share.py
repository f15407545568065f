"""How much of an RL step goes to reward computation (issue 4).

Part 1 reads the RL timings of a finished suite run (``make run`` or ``snakemake``): every iteration logs
``charts/iteration_s``, ``charts/generation_s`` and ``charts/reward_s`` to the stage's ``timings.csv``; the
table gives their medians per task and method, and the reward's share of the step.

Part 2 prices every registered metric as a reward: each is built once (models loaded once, as in a
stage) and then timed on one rollout batch of real generations from the run's ``predictions.jsonl``
(repeated to ``--batch`` samples), against the median step time of part 1. Metrics that need a model
or meta the task lacks are skipped with the reason.

    .venv/bin/python bench/reward_share.py [--results results] [--batch 64] [--out bench/REWARD_SHARE.md]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

from grueflow.metrics import METRICS, MetricContext, describe
from grueflow.params import parse


def curve_rows(results: Path) -> list[dict[str, Any]]:
    """Median step, generation and reward seconds per task and RL method, over seeds and iterations."""
    rows = []
    for curves in sorted(results.glob("*/*/seed*/timings.csv")):
        task, method = curves.parts[-4], curves.parts[-3]
        rows.append((task, method, list(csv.DictReader(open(curves)))))
    merged: dict[tuple[str, str], list[dict[str, str]]] = {}
    for task, method, curve in rows:
        merged.setdefault((task, method), []).extend(curve)
    table = []
    for (task, method), curve in sorted(merged.items()):
        if "charts/reward_s" not in curve[0]:
            raise SystemExit(f"{task}/{method}: timings.csv has no charts/reward_s; rerun the suite with this version")
        step, generation, reward = (statistics.median(float(r[k]) for r in curve)
                                    for k in ("charts/iteration_s", "charts/generation_s", "charts/reward_s"))
        table.append({"task": task, "method": method, "iterations": len(curve), "step_s": step,
                      "generation_s": generation, "reward_s": reward, "reward_share": reward / step})
    return table


def metric_costs(results: Path, task: str, batch: int, step_s: float) -> list[dict[str, Any]]:
    """Seconds to build each metric and to score one rollout batch with it, for one task's generations."""
    predictions = sorted(results.glob(f"eval/{task}/*/seed0/predictions.jsonl"))[0]
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    rows = (rows * (batch // len(rows) + 1))[:batch]
    samples = {s["id"]: s for s in map(json.loads, (results / task / "datapool" / "test.jsonl").read_text().splitlines())}
    prompts, generations = [r["prompt"] for r in rows], [r["generation"] for r in rows]
    references, meta = [r["references"] for r in rows], [samples[r["id"]]["meta"] for r in rows]
    context = MetricContext(base_model=results / task / "base_model" / "model")
    costs = []
    for metric_id in sorted(describe()):
        metric = METRICS.get(metric_id)
        try:
            started = time.perf_counter()
            compute = metric.build(parse(metric.Args, {}, "args"), context)
            build_s = time.perf_counter() - started
            compute(prompts, generations, references, meta)  # warm-up: lazy imports and caches
            started = time.perf_counter()
            compute(prompts, generations, references, meta)
            batch_s = time.perf_counter() - started
        except Exception as error:  # a metric this task cannot feed (a hub model offline, missing meta, Java)
            costs.append({"metric": metric_id, "skipped": f"{type(error).__name__}: {str(error)[:90]}"})
            continue
        costs.append({"metric": metric_id, "build_s": build_s, "batch_s": batch_s, "share": batch_s / (step_s + batch_s)})
    return costs


def markdown(table: list[dict[str, Any]], costs: dict[str, list[dict[str, Any]]], batch: int) -> str:
    lines = ["# Reward share of an RL step", "",
             "Part 1: medians over every iteration and seed of the suite's RL runs.", "",
             "| task | method | iterations | step s | generation s | reward s | reward share |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['method']} | {r['iterations']} | {r['step_s']:.3f} | {r['generation_s']:.3f} | "
              f"{r['reward_s']:.4f} | {100 * r['reward_share']:.1f} % |" for r in table]
    for task, rows in costs.items():
        lines += ["", f"Part 2 ({task}): each metric as the reward, one batch of {batch} generations; share = batch / "
                      "(median step without it + batch).", "",
                  "| metric | build s (once) | batch s | share of a step |", "|---|---|---|---|"]
        lines += [f"| {c['metric']} | {c['build_s']:.2f} | {c['batch_s']:.4f} | {100 * c['share']:.1f} % |"
                  if "skipped" not in c else f"| {c['metric']} | skipped: {c['skipped']} | | |" for c in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("bench/REWARD_SHARE.md"))
    args = parser.parse_args()
    table = curve_rows(args.results)
    if not table:
        raise SystemExit(f"no RL timings under {args.results}/*/*/seed*/timings.csv; run `make run` first")
    costs = {}
    for task in sorted({r["task"] for r in table}):
        steps = [r["step_s"] - r["reward_s"] for r in table if r["task"] == task]
        costs[task] = metric_costs(args.results, task, args.batch, statistics.median(steps))
    text = markdown(table, costs, args.batch)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(text)


if __name__ == "__main__":
    main()
