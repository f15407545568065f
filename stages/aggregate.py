"""Stage 6: aggregate every run's metrics.json into the GRUE table (.csv, .md, .json), its chart and report pages."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import grue, plots, report, stage
from grueflow.config import ConfigError, SuiteConfig, read_yaml
from grueflow.io import atomic_files, record_digest, write_text
from grueflow.params import parse

SUITE_KEYS = ("tasks", "algorithms", "seeds", "rl_starts", "preference_methods")  # also the grid flags' names
OUT_SUFFIXES = {"--out-csv": ".csv", "--out-md": ".md", "--out-json": ".json", "--out-chart": ".png",
                "--out-html": ".html", "--out-samples": ".html"}


def grid_flag(key: str) -> str:
    """The flag of the suite key ``key`` (one of :data:`SUITE_KEYS`): ``rl_starts`` -> ``--rl-starts``."""
    return "--" + key.replace("_", "-")


def earlier_table(path: Path) -> bool:
    """Whether ``path`` holds a GRUE table's JSON (an earlier run's ``--out-json``)."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        return isinstance(table, dict) and "grue_score" in table and grue.grue_table_problem(table) is None
    except (ValueError, UnicodeDecodeError):
        return False


# what each output begins with, so that an existing file is replaced only when an earlier run wrote it
EARLIER = {"--out-csv": stage.starts_with(b"task,method,"), "--out-md": stage.starts_with(b"# GRUE table"),
           "--out-json": earlier_table, "--out-chart": plots.is_grue_chart,
           "--out-html": stage.starts_with(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>GRUE table<"),
           "--out-samples": stage.starts_with(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Sample "
                                              b"generations<")}


def expected_runs(eval_dir: Path, suite: SuiteConfig) -> list[Path]:
    """The suite's grid of evaluate outputs: results/eval/<task>/<method>/seed<k>/metrics.json."""
    return [eval_dir / t / m / f"seed{k}" / "metrics.json" for t in suite.tasks for m in suite.methods for k in suite.seeds]


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--eval-dir", type=Path, required=True, help="results/eval")
    p.add_argument("--suite", type=Path, help=f"a suite file to read the grid from (keys: {', '.join(SUITE_KEYS)})")
    p.add_argument("--tasks", nargs="+", help="the grid, when no --suite is given")
    p.add_argument("--algorithms", nargs="*", help="(default: none)")
    p.add_argument("--seeds", nargs="+", type=int)
    p.add_argument("--rl-starts", nargs="+", help="(default: zero_shot supervised, as in a suite file)")
    p.add_argument("--preference-methods", nargs="*", help="methods learnt from preferences (dpo; default: none)")
    p.add_argument("--out-csv", type=Path, required=True)
    p.add_argument("--out-md", type=Path, required=True)
    p.add_argument("--out-json", type=Path, required=True)
    p.add_argument("--out-chart", type=Path, help="the GRUE chart (PNG): headline metrics by method, seed spread")
    p.add_argument("--out-html", type=Path, help="the GRUE table as an HTML page (for the Snakemake report)")
    p.add_argument("--out-samples", type=Path, help="an HTML page of sample generations per task and method")
    p.add_argument("--samples", type=int, default=3, help="samples per method in --out-samples (default: 3)")
    args = p.parse_args()
    if args.samples < 1:
        p.error(f"--samples must be >= 1 (samples per method on the --out-samples page), got {args.samples}")
    outs = [(flag, path) for flag, path in (("--out-csv", args.out_csv), ("--out-md", args.out_md),
                                            ("--out-json", args.out_json), ("--out-chart", args.out_chart),
                                            ("--out-html", args.out_html), ("--out-samples", args.out_samples))
            if path is not None]
    for i, (flag, path) in enumerate(outs):
        for other, other_path in outs[:i]:
            if path.resolve() == other_path.resolve():
                p.error(f"{other} and {flag} are one file, {path}: each output needs its own path")
    stage.setup(args)
    grid = {key: getattr(args, key) for key in SUITE_KEYS if getattr(args, key) is not None}  # the flags given
    if args.suite and grid:
        p.error(f"--suite and {', '.join(map(grid_flag, grid))} were given: "
                f"{', '.join(map(grid_flag, SUITE_KEYS))} are the grid when no --suite is given, and --suite reads "
                f"the grid from its file; give one or the other (for a narrower table, the grid flags alone)")
    if args.suite:
        suite = parse(SuiteConfig, read_yaml(args.suite), f"{args.suite}:")
    elif args.tasks and args.seeds:  # a flag not given: the suite file's default
        suite = parse(SuiteConfig, {"algorithms": [], **grid}, "aggregate arguments:")
    else:
        p.error("give --suite, or --tasks and --seeds")
    # the suite's own params: its task and method files, which a slip of an --out-* would replace with the table
    params = [Path(suite.params_dir) / kind for kind in ("tasks", "methods")] if args.suite else []
    for flag, path in outs:
        stage.check_file_out(flag, path, OUT_SUFFIXES[flag], EARLIER[flag])
        read = [(name, given) for name, given in (("the input --suite", args.suite), ("the input --eval-dir",
                                                                                       args.eval_dir),
                                                   *(("the suite's params folder", folder) for folder in params))
                if given is not None and (path.resolve() == given.resolve() or path.resolve().is_relative_to(
                    given.resolve()))]
        if read:
            raise ConfigError(f"{flag} {path} is, or lies inside, {read[0][0]} {read[0][1]}, which the table "
                              f"reads or the pipeline runs: give a path apart from the inputs")
    paths = expected_runs(args.eval_dir, suite)
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"error: {len(missing)} evaluate outputs are missing, e.g. {missing[0]}; run the pipeline first")
    built_from = {path.parent: record_digest(path.parent) for path in paths}  # what is read, before it is read
    runs = grue.load_runs(paths)
    table, headline, missing = grue.build_table(runs), grue.headlines(runs), grue.missing_metrics(runs)
    left_out = grue.reward_left_out(runs)
    seed = suite.seeds[0]
    samples = {(t, m): report.read_samples(args.eval_dir / t / m / f"seed{seed}" / "predictions.jsonl", args.samples)
               for t in suite.tasks for m in suite.methods} if args.out_samples else {}  # read (and checked) first
    code = stage.code_record("aggregate")
    with atomic_files((path for _, path in outs), built_from, code) as tmps:  # all new, or none; digests recorded
        tmp = dict(zip((flag for flag, _ in outs), tmps))
        grue.write_table(table, tmp["--out-csv"], tmp["--out-md"], tmp["--out-json"], headline, missing, left_out)
        if args.out_chart:
            plots.grue_chart(table, headline, tmp["--out-chart"], grue.lower_keys_by_task(runs))
        if args.out_html:
            write_text(tmp["--out-html"], report.table_html(table, headline, missing, left_out))
        if args.out_samples:
            write_text(tmp["--out-samples"], report.samples_html(samples, seed))
    print(grue.to_markdown(table, headline, missing, left_out))


if __name__ == "__main__":
    stage.main_guard(main)
