"""Stage 6: aggregate every run's metrics.json into the GRUE table (.csv, .md, .json)."""

from pathlib import Path

from grueflow import grue, stage
from grueflow.config import method_name, read_yaml

STARTS = ("zero_shot", "supervised")
SUITE_KEYS = ("tasks", "algorithms", "seeds")


def expected_runs(eval_dir: Path, tasks: list[str], algorithms: list[str], seeds: list[int]) -> list[Path]:
    """The suite's grid of evaluate outputs: results/eval/<task>/<method>/seed<k>/metrics.json."""
    methods = list(STARTS) + [method_name(s, a) for a in algorithms for s in STARTS]
    return [eval_dir / t / m / f"seed{k}" / "metrics.json" for t in tasks for m in methods for k in seeds]


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--eval-dir", type=Path, required=True, help="results/eval")
    p.add_argument("--suite", type=Path, help="a suite file to read the grid from (keys: tasks, algorithms, seeds)")
    p.add_argument("--tasks", nargs="+", help="the grid, when no --suite is given")
    p.add_argument("--algorithms", nargs="*", default=[])
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--out-csv", type=Path, required=True)
    p.add_argument("--out-md", type=Path, required=True)
    p.add_argument("--out-json", type=Path, required=True)
    args = p.parse_args()
    stage.setup(args)
    if args.suite:
        grid = read_yaml(args.suite)
        args.tasks, args.algorithms, args.seeds = grid["tasks"], grid["algorithms"], grid["seeds"]
    if not args.tasks or not args.seeds:
        p.error("give --suite, or --tasks and --seeds")
    paths = expected_runs(args.eval_dir, args.tasks, args.algorithms, args.seeds)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"error: {len(missing)} evaluate outputs are missing, e.g. {missing[0]}; run the pipeline first")
    runs = grue.load_runs(paths)
    table, headline, missing = grue.build_table(runs), grue.headlines(runs), grue.missing_metrics(runs)
    grue.write_table(table, args.out_csv, args.out_md, args.out_json, headline, missing)
    print(grue.to_markdown(table, headline, missing))


if __name__ == "__main__":
    stage.main_guard(main)
