"""The human-evaluation table (beside the GRUE table) from imported batches: .csv and .md. An import whose batch,
key or answers files hold other content now than it was built from, or whose answers folder holds a file it did not
read, is refused, naming the import to rerun; so is one of a batch whose predictions changed since it was exported,
naming the command that exports it again."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.config import ConfigError
from grueflow.human import results
from grueflow.io import DataError, atomic_files, check_stage_output, read_json, write_csv, write_text


def check_outputs(out_csv: Path, out_md: Path, imports: list[Path]) -> None:
    """The two outputs must be two files, neither of them an import folder nor inside one (the table would
    overwrite what it reads) nor inside another stage's output (:func:`grueflow.stage.check_file_out`): a
    :class:`ConfigError` naming the path otherwise, before any work."""
    if out_csv.resolve() == out_md.resolve():
        raise ConfigError(f"--out-csv and --out-md are both {out_csv}; the Markdown would replace the CSV: give two "
                          f"different paths")
    for flag, out in (("--out-csv", out_csv), ("--out-md", out_md)):
        inside = next((folder for folder in imports if out.resolve().is_relative_to(folder.resolve())), None)
        if inside is not None:
            raise ConfigError(f"{flag} {out} lies inside the --imports folder {inside}, whose files the table reads: "
                              f"write it outside every import folder")
        stage.check_file_out(flag, out, ".csv" if flag == "--out-csv" else ".md",
                             stage.starts_with(b"kind,task,method,measure" if flag == "--out-csv" else
                                               b"# Human evaluation"))


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--imports", type=Path, nargs="+", required=True, help="import_human_eval output folders")
    p.add_argument("--out-csv", type=Path, required=True)
    p.add_argument("--out-md", type=Path, required=True)
    args = p.parse_args()
    stage.setup(args)
    check_outputs(args.out_csv, args.out_md, args.imports)
    rows, agreements = [], {}
    named = [folder.resolve() for folder in args.imports]
    repeated = sorted({str(f) for f in named if named.count(f) > 1})
    if repeated:
        raise DataError(f"--imports names {', '.join(repeated)} more than once; each row would count twice")
    for folder in args.imports:
        if not (folder / "stage.json").is_file():
            raise DataError(f"{folder} is not a finished import (no stage.json): delete it and rerun the pipeline "
                            f"(or stages/import_human_eval.py for its batch)")
        check_stage_output(folder)  # every file as the import's stage.json recorded it
        results.check_current_import(folder)
        table_rows = read_json(folder / "table_rows.json")
        if not isinstance(table_rows, list) or not all(isinstance(row, dict) for row in table_rows):
            raise DataError(f"{folder / 'table_rows.json'} is not a list of table rows; rerun the import")
        rows += [{**{c: row.get(c) for c in results.TABLE_COLUMNS}, "batch": folder.name} for row in table_rows]
        agreements[str(folder)] = read_json(folder / "agreement.json")
    markdown = results.to_markdown(rows, agreements)
    code = stage.code_record("human_eval_table")
    with atomic_files([args.out_csv, args.out_md], code=code) as (csv_tmp, md_tmp):  # both new, or neither, recorded
        write_csv(csv_tmp, rows)
        write_text(md_tmp, markdown)


if __name__ == "__main__":
    stage.main_guard(main)
