"""The IMDB suite on SmolLM2-135M (params/suites/imdb.yaml), run once and reported: bench/IMDB.md's numbers.

``--run`` times one ``snakemake --cores all results/grue_table.csv --configfile params/suites/imdb.yaml`` in
this checkout (meant for a clean clone) and writes the wall time to ``results/imdb_wall.json``; the report
then reads what the run wrote under ``results/`` and prints a Markdown section (``--out`` writes it, with
the curves as PNG beside it):

- the table: every method's mean and standard deviation over seeds of the learned sentiment, the fluency
  perplexity under the (adapted) base model, distinct-1/2, VADER and the last iteration's KL to the reference;
- the orderings the paper's GPT-2 table shows, each checked on the numbers with its margin;
- per RL run, the reward, the KL and the KL coefficient per iteration (one PNG);
- five continuations per method (seed 0, the same five test prompts for every method);
- the classifier's held-out accuracy, the adapted base's held-out loss before and after, each stage's wall time.

    .venv/bin/python bench/imdb.py --run --out /tmp/imdb/IMDB_RESULTS.md   (bench/IMDB.md quotes it)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SUITE = "params/suites/imdb.yaml"
TASK = "imdb_smollm2"
RL_METHODS = ("ppo", "nlpo", "supervised+ppo", "supervised+nlpo")
METHODS = ("zero_shot", "supervised") + RL_METHODS
COLUMNS = [("learned/classifier", "sentiment ↑"), ("fluency_ppl", "fluency ppl ↓"), ("diversity/distinct_1", "distinct-1"),
           ("diversity/distinct_2", "distinct-2"), ("task/vader_sentiment", "VADER"), ("train/kl", "KL (end)")]
PAPER = {"zero_shot": (0.489, 32.2), "supervised": (0.539, 35.5), "ppo": (0.602, 33.8), "nlpo": (0.611, 33.8),
         "supervised+ppo": (0.626, 35.0), "supervised+nlpo": (0.620, 34.8)}  # RL4LMs' GPT-2 IMDB table


def run_suite(root: Path) -> float:
    """Wall seconds of one Snakemake run of the suite to the GRUE table (all cores)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DVC_NO_ANALYTICS": "1"}
    start = time.perf_counter()
    subprocess.run(["snakemake", "--cores", "all", "results/grue_table.csv", "--configfile", SUITE], cwd=root,
                   env=env, check=True)
    wall = time.perf_counter() - start
    (root / "results" / "imdb_wall.json").write_text(json.dumps({"wall_s": round(wall, 1)}) + "\n")
    return wall


def cell(row: pd.Series, column: str) -> str:
    mean, std = row.get(column, math.nan), row.get(f"{column}_std", math.nan)
    if pd.isna(mean):
        return "—"
    digits = 1 if column == "fluency_ppl" else 3
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if not pd.isna(std) else "")


def table_markdown(table: pd.DataFrame) -> str:
    lines = ["| method | seeds | " + " | ".join(name for _, name in COLUMNS) + " | paper (GPT-2) sentiment / ppl |",
             "|---" * (len(COLUMNS) + 3) + "|"]
    for _, row in table.iterrows():
        paper = PAPER.get(row.method)
        cells = " | ".join(cell(row, c) for c, _ in COLUMNS)
        lines.append(f"| {row.method} | {int(row.n_seeds)} | {cells} | "
                     + (f"{paper[0]} / {paper[1]} |" if paper else "— |"))
    return "\n".join(lines)


def orderings(table: pd.DataFrame) -> list[tuple[str, bool, str]]:
    """The issue's orderings on the learned sentiment and the fluency: (claim, holds, the numbers)."""
    by = table.set_index("method")
    s = by["learned/classifier"]
    spread = by["learned/classifier_std"].fillna(0)

    def above(hi: str, lo: str) -> tuple[str, bool, str]:
        margin = s[hi] - s[lo]
        needed = max(spread[hi], spread[lo])
        return (f"{lo} < {hi} (margin > the larger seed std)", bool(margin > needed),
                f"{s[lo]:.3f} → {s[hi]:.3f}: margin {margin:+.3f}, larger std {needed:.3f}")

    checks = [above("supervised", "zero_shot"), above("ppo", "supervised"), above("nlpo", "supervised")]
    for algo in ("ppo", "nlpo"):
        m = f"supervised+{algo}"
        checks.append((f"{m} ≥ supervised", bool(s[m] >= s["supervised"]), f"{s[m]:.3f} vs {s['supervised']:.3f}"))
    ppl0 = by.loc["zero_shot", "fluency_ppl"]
    for m in RL_METHODS:
        ppl = by.loc[m, "fluency_ppl"]
        checks.append((f"{m} fluency ppl ≤ 1.25 × zero-shot's", bool(ppl <= 1.25 * ppl0),
                       f"{ppl:.1f} vs {1.25 * ppl0:.1f} (zero-shot {ppl0:.1f})"))
    checks.append(("ppo ≥ zero-shot + 0.1", bool(s["ppo"] >= s["zero_shot"] + 0.1),
                   f"{s['ppo']:.3f} vs {s['zero_shot']:.3f} + 0.1"))
    checks.append(("nlpo > ppo (the paper's order; its readers did not always find it)", bool(s["nlpo"] > s["ppo"]),
                   f"{s['nlpo']:.3f} vs {s['ppo']:.3f}"))
    return checks


def plot_curves(results: Path, seeds: list[int], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("reward/task", "reward (P(positive))"), ("kl/sequence", "KL to the reference (per sequence)"),
              ("kl/coef", "KL coefficient")]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    for method in RL_METHODS:
        for seed in seeds:
            path = results / TASK / method / f"seed{seed}" / "curves.csv"
            if not path.is_file():
                continue
            curve = pd.read_csv(path)
            for ax, (key, _) in zip(axes, panels):
                ax.plot(curve["iteration"], curve[key], label=f"{method} s{seed}",
                        linestyle="-" if seed == seeds[0] else "--")
    for ax, (_, title) in zip(axes, panels):
        ax.set_title(title)
        ax.set_xlabel("iteration")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def samples(results: Path, n: int = 5) -> str:
    out = []
    first = [json.loads(line) for line in (results / "eval" / TASK / "zero_shot" / "seed0" / "predictions.jsonl")
             .read_text().splitlines()[:n]]
    for row in first:
        out.append(f"**{row['id']}** — prompt: “{row['prompt'][-200:]}”\n")
        for method in METHODS:
            rows = {json.loads(line)["id"]: json.loads(line) for line in
                    (results / "eval" / TASK / method / "seed0" / "predictions.jsonl").read_text().splitlines()}
            got = rows[row["id"]]
            score = got["scores"].get("learned/classifier")
            out.append(f"- *{method}* ({score:.2f}): {got['generation'].strip()}" if score is not None else
                       f"- *{method}*: {got['generation'].strip()}")
        out.append("")
    return "\n".join(out)


def stage_times(results: Path) -> str:
    rows = []
    for provenance in sorted(results.glob(f"**/{TASK}/**/provenance.json")):
        seconds = json.loads(provenance.read_text()).get("wall_time_s")
        stage = json.loads((provenance.parent / "stage.json").read_text()).get("stage", "")
        if seconds is not None:
            rows.append(f"| {provenance.parent.relative_to(results)} | {stage} | {seconds:.0f} |")
    return "| output | stage | wall s |\n|---|---|---|\n" + "\n".join(rows)


def report(root: Path, png: Path) -> str:
    results = root / "results"
    table = pd.read_csv(results / "grue_table.csv")
    table = table[table.task == TASK].reset_index(drop=True)
    seeds = sorted({int(p.name.removeprefix("seed")) for p in (results / "eval" / TASK / "zero_shot").glob("seed*")})
    plot_curves(results, seeds, png)
    wall = results / "imdb_wall.json"
    classifier = json.loads((results / TASK / "classifier" / "metrics.json").read_text())
    base = json.loads((results / TASK / "base_model" / "stage.json").read_text())
    held, steps = base["adapt_heldout_loss"], base["params"]["model"]["adapt"]["steps"]
    parts = [f"Wall time of the whole run: **{json.loads(wall.read_text())['wall_s'] / 60:.1f} min**"
             if wall.is_file() else "Wall time: not recorded (no --run)",
             f"Classifier (train_classifier): held-out test accuracy **{classifier['test/accuracy']:.4f}** on "
             f"{classifier['n_test']} reviews (val {classifier.get('val/accuracy', math.nan):.3f}).",
             f"Adapted base: causal-LM loss of {held['texts']} held-out aclImdb unsup reviews {held['before']:.3f} → "
             f"{held['after']:.3f} nats per token (perplexity {math.exp(held['before']):.1f} → "
             f"{math.exp(held['after']):.1f}) after {steps} steps.",
             "", table_markdown(table), "", "Orderings:", ""]
    for claim, holds, numbers in orderings(table):
        parts.append(f"- {'✔' if holds else '✘'} {claim}: {numbers}")
    parts += ["", f"![learning curves]({png.name})", "", "Stage wall times:", "", stage_times(results), "",
              "Five continuations per method (seed 0; learned sentiment in brackets):", "", samples(results)]
    return "\n".join(parts) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose results/ to run in and read")
    p.add_argument("--run", action="store_true", help="run the suite first (timed)")
    p.add_argument("--out", type=Path, default=None, help="write the report here (and the curves PNG beside it)")
    args = p.parse_args()
    if args.run:
        print(f"suite wall time: {run_suite(args.root):.0f} s", file=sys.stderr)
    png = (args.out.parent if args.out else args.root / "results") / "imdb_curves.png"
    text = report(args.root, png)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
