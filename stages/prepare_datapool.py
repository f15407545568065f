"""Stage 1: build a task's datapool (train/val/test Samples, unlabelled text, stats)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.config import DatapoolConfig, to_dict
from grueflow.data import build_datapool, write_datapool
from grueflow.io import atomic_dir, digest_inputs
from grueflow.params import load_section
from grueflow.pipeline import datapool_files

TASK_KEYS = ("datapool",)


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True, help="params/tasks/<task>.yaml (reads: datapool)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    args = p.parse_args()
    started = stage.setup(args)
    read = stage.params_digest("prepare_datapool", args)  # before the params are read
    cfg: DatapoolConfig = load_section(DatapoolConfig, args.task_file, "datapool")
    # the local data it reads, by content as it is before the build reads it: a file replaced since (even while
    # the build runs) is found by the stale check, whatever its time
    data = digest_inputs({path: Path(path) for path in datapool_files({"datapool": to_dict(cfg)}, Path.cwd())})
    pool = build_datapool(cfg)
    with atomic_dir(args.out) as tmp:
        stats = write_datapool(pool, tmp, cfg.id)
        stage.finish(tmp, "prepare_datapool", {"datapool": to_dict(cfg)}, data, started, read, stats=stats)


if __name__ == "__main__":
    stage.main_guard(main)
