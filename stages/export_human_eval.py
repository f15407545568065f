"""Export a human-evaluation batch (Likert or blinded pairwise) from evaluate outputs' predictions.jsonl."""

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.human import batch as hb
from grueflow.human.criteria import CRITERIA
from grueflow.io import digest_inputs


def method_path(text: str) -> tuple[str, Path]:
    """argparse type of ``--predictions``: ``METHOD=PATH``, PATH a predictions.jsonl or the evaluate folder holding it."""
    method, sep, path = text.partition("=")
    if not sep or not method or not path:
        raise argparse.ArgumentTypeError(f"{text!r} is not METHOD=PATH (e.g. ppo=results/eval/imdb/ppo/seed0)")
    path = Path(path)
    return method, path / "predictions.jsonl" if path.is_dir() else path


def batch_task(p: argparse.ArgumentParser, given: str | None, paths: list[Path]) -> str | None:
    """The task the batch records: ``--task``, else the one its predictions' paths name (:func:`hb.task_of_paths`),
    else None (the import then takes its ``--task`` on trust). Predictions of several tasks, or a ``--task`` their
    paths contradict, are refused: the batch's rows would be reported under one task's name."""
    named = hb.task_of_paths([path.absolute() for path in paths])
    if len(named) > 1:
        p.error(f"--predictions come from the tasks {', '.join(sorted(named))} (results/eval/<task>/...); a batch "
                f"rates one task's predictions: give those of one task")
    found = next(iter(named), None)
    if given is not None and found is not None and given != found:
        p.error(f"--task {given}, but the --predictions are task {found}'s (results/eval/{found}/...): give --task "
                f"{found}, or the predictions of task {given}")
    return given or found


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--kind", required=True, choices=hb.KINDS)
    p.add_argument("--criteria", required=True, help=f"the criteria set (valid: {', '.join(CRITERIA.names())})")
    p.add_argument("--predictions", type=method_path, nargs="+", default=[],
                   help="METHOD=PATH per method (Likert: one or more; pairwise: exactly two)")
    p.add_argument("--rl4lms-csv", type=Path, help="instead of --predictions: an RL4LMs-layout example CSV")
    p.add_argument("--task", help="the task whose predictions these are, recorded in batch.json for the import to "
                                  "check (default: the task their paths name, results/eval/<task>/...)")
    p.add_argument("--seed", type=stage.seed, required=True, help="item order, A/B order and opaque ids")
    p.add_argument("--max-items", type=stage.positive, default=None, help="keep the first N items after shuffling (N >= 1)")
    p.add_argument("--out", type=Path, required=True, help="the batch folder")
    p.add_argument("--key", type=Path, help="pairwise: where the opaque id -> system key goes (outside --out); an "
                                            "existing key of another batch is refused, but that of the batch in "
                                            "--out, which is copied to .grueflow/replaced/ with it first")
    args = p.parse_args()
    started = stage.setup(args)
    if args.criteria not in CRITERIA:
        p.error(CRITERIA.unknown_message(args.criteria))
    if bool(args.predictions) == bool(args.rl4lms_csv):
        p.error("give either --predictions METHOD=PATH ... or --rl4lms-csv")
    methods = [method for method, _ in args.predictions]
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        p.error(f"--predictions names {', '.join(map(repr, repeated))} more than once; give each method once")
    resolved = [(path / "predictions.jsonl" if path.is_dir() else path).resolve() for _, path in args.predictions]
    twice = sorted({str(path) for path in resolved if resolved.count(path) > 1})
    if twice:
        p.error(f"--predictions gives {twice[0]} for more than one method; give each method's own predictions")
    if args.kind == "pairwise" and (args.key is None or args.key.resolve().is_relative_to(args.out.resolve())):
        p.error("a pairwise batch needs --key outside the --out folder (annotators must never see it)")
    if args.kind == "likert" and args.key is not None:
        p.error(f"--key {args.key} is for pairwise batches; a Likert batch has no key (its items name their method): "
                f"leave --key out")
    if args.key is not None:  # never inside a stage's output: another batch's folder goes to annotators
        if args.key.is_dir():
            p.error(f"--key {args.key} is a folder; give the path of the key file to write")
        stage.inside_output("--key", args.key)
    task = batch_task(p, args.task, [path for _, path in args.predictions])
    prompt_column = "prompt"
    inputs = digest_inputs({"rl4lms_csv": args.rl4lms_csv} if args.rl4lms_csv else dict(args.predictions))
    if args.rl4lms_csv and args.kind == "pairwise":
        prompt_column, sources = hb.read_rl4lms_pairwise(args.rl4lms_csv)
    elif args.rl4lms_csv:
        sources = hb.read_rl4lms_likert(args.rl4lms_csv)
    else:
        sources = {method: hb.read_predictions(path) for method, path in args.predictions}
    key = None
    if args.kind == "likert":
        batch = hb.likert_batch(sources, args.criteria, args.seed)
    else:
        if len(sources) != 2:
            p.error(f"a pairwise batch compares exactly two methods; got {sorted(sources)}")
        batch, key = hb.pairwise_batch(*sources.items(), args.criteria, args.seed, prompt_column)
    batch = dataclasses.replace(batch, task=task)
    if args.max_items is not None:
        batch = batch.head(args.max_items)
        if key is not None:
            kept = batch.opaque_ids()
            key = {opaque: system for opaque, system in key.items() if opaque in kept}
    params = {"kind": args.kind, "criteria": args.criteria, "seed": args.seed, "max_items": args.max_items}
    for line in hb.write_batch(batch, args.out, key, args.key,
                               finish=lambda tmp: stage.finish(tmp, "export_human_eval", params, inputs, started)):
        print(line, file=sys.stderr)


if __name__ == "__main__":
    stage.main_guard(main)
