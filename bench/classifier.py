"""Settings of the train_classifier stage on IMDB: held-out accuracy, wall time and peak memory (issue 22).

Each try runs the real stage CLI (``stages/train_classifier.py``) on a task file that holds only a
``classifier:`` section: ``../shared/data/imdb/imdb_train_5k.jsonl`` (5,000 aclImdb train reviews, 2,500 per
label), with ``--set key=value`` laid over the defaults below. Settings are chosen on the validation slice
of the training file (``val_fraction``); a try scores the test file (``imdb_test_subset.jsonl``, 2,000
reviews) only with ``--test``, which is meant for the final setting, once. Each try adds a line to ``--log``
(JSON lines; bench/CLASSIFIER.md tables them): its settings, val and test accuracy, wall time and the stage's
peak RSS.

    .venv/bin/python bench/classifier.py --name L128-n2800 --set max_length=128 --set n_train=2800 [--test]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BASE = {"train_file": "../shared/data/imdb/imdb_train_5k.jsonl", "labels": ["NEGATIVE", "POSITIVE"],
        "text_column": "text", "label_column": "label"}
TEST_FILE = "../shared/data/imdb/imdb_test_subset.jsonl"


def value(text: str) -> object:
    """A ``--set`` value as YAML reads it, with ``1e-4`` a number (YAML 1.1 reads it as a string)."""
    parsed = yaml.safe_load(text)
    if isinstance(parsed, str):
        try:
            return float(parsed)
        except ValueError:
            return parsed
    return parsed


def run_try(settings: dict, threads: int, out: Path) -> tuple[dict, float, int]:
    """Run the stage once; returns its metrics.json, wall seconds and peak RSS (MiB) of the stage process."""
    with tempfile.TemporaryDirectory() as tmp:
        task = Path(tmp) / "task.yaml"
        task.write_text(yaml.safe_dump({"classifier": settings}, sort_keys=False))
        command = [sys.executable, "stages/train_classifier.py", "--task-file", str(task), "--threads", str(threads),
                   "--device", "cpu", "--out", str(out), "--log-level", "WARNING"]
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the stage failed (exit {os.waitstatus_to_exitcode(status)}): {' '.join(command)}")
    return json.loads((out / "metrics.json").read_text()), wall, usage.ru_maxrss // 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a classifier param over BASE")
    p.add_argument("--test", action="store_true", help="also score the test file (the final setting, once)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("/tmp/grueflow-bench-classifier"))
    p.add_argument("--log", type=Path, default=Path("/tmp/grueflow-bench-classifier/tries.jsonl"))
    args = p.parse_args()
    settings = dict(BASE)
    for item in args.set:
        key, _, text = item.partition("=")
        settings[key] = value(text)
    if args.test:
        settings["test_file"] = TEST_FILE
    metrics, wall, rss = run_try(settings, args.threads, args.out / args.name)
    curve = (args.out / args.name / "curves.csv").read_text()
    result = {"name": args.name, "settings": {k: v for k, v in settings.items() if k not in BASE}, "threads": args.threads,
              "load_average_1m": round(os.getloadavg()[0], 2), "wall_s": round(wall, 1), "peak_rss_mib": rss, **metrics}
    with open(args.log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(result) + "\n")
    print(json.dumps(result, indent=2))
    print(curve)


if __name__ == "__main__":
    main()
