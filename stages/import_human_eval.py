"""Import one batch's answers (the annotation page's JSONL and/or platform results CSVs): agreement,
the batch's human-evaluation table rows and, for pairwise batches, preferences.jsonl. A batch whose predictions
changed since it was exported (its items are no longer the methods' texts) is refused, naming the command that
exports it again; a copy of an earlier batch (kept in .grueflow/replaced/) imports the answers to it."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.human import batch as hb
from grueflow.human import results
from grueflow.human.layout import ANSWERS_GIVEN, answer_files
from grueflow.io import atomic_dir, digest_inputs, write_json, write_jsonl


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--batch", type=Path, required=True, help="the batch folder")
    p.add_argument("--key", type=Path, help="the pairwise batch's key file (the one the export wrote with --batch)")
    p.add_argument("--legacy-key", action="store_true",
                   help="accept a key written before keys named their batch; nothing then checks that it is --batch's")
    p.add_argument("--answers", type=Path, nargs="+", required=True, help="answers .jsonl / results .csv files or folders")
    p.add_argument("--task", help="the task name in the table (default: the task the batch rates, else its "
                                  "criteria set); a batch that names its task refuses another")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    # a batch is what its tag says, wherever it lies: a copy kept in .grueflow/replaced/ imports the answers to it
    started = stage.setup(args, copies=("batch",))
    files = answer_files(args.answers)
    # digests taken before any read: an answer the page appends meanwhile leaves the record stale, never "imported"
    inputs = digest_inputs({"batch": args.batch, **({"key": args.key} if args.key else {}),
                            **{f"answers{i}": f for i, f in enumerate(files)}})
    batch = hb.read_batch(args.batch)
    task = hb.import_task(batch, args.batch, args.task)
    if batch.kind == "pairwise" and args.key is None:
        p.error("a pairwise batch needs --key (the key file written by the export)")
    if batch.kind == "likert" and args.key is not None:
        p.error(f"--batch {args.batch} is a Likert batch, which has no key (its items name their method); "
                f"leave --key {args.key} out")
    key = hb.read_key(args.key, batch, args.legacy_key) if batch.kind == "pairwise" else None
    results.check_current_batch(args.batch, args.key, "--batch", "build the human-evaluation table again")
    answers = results.latest_answers(a for f in files for a in results.read_answer_file(f, batch))
    agreement = results.agreement(batch, answers, key)
    with atomic_dir(args.out) as tmp:
        write_jsonl(tmp / "answers.jsonl", [{"annotator": a.annotator, "item_id": a.item_id, "answer": dict(a.values),
                                             **({"at": a.at.isoformat()} if a.at is not None else {})}
                                            for a in answers])
        write_json(tmp / "agreement.json", agreement)
        if batch.kind == "likert":
            rows = results.likert_rows(batch, answers, task)
        else:
            rows = results.pairwise_rows(batch, key, answers, task)
            write_jsonl(tmp / "preferences.jsonl", results.preferences(batch, key, answers))
        write_json(tmp / "table_rows.json", rows)
        unchecked = {"legacy_key": True} if args.legacy_key and key is not None else {}
        given = {ANSWERS_GIVEN: [str(path) for path in args.answers]}  # a file put in a folder since: the table sees
        stage.finish(tmp, "import_human_eval", {"task": task}, inputs, started, n_answers=len(answers), **given,
                     **unchecked)


if __name__ == "__main__":
    stage.main_guard(main)
