"""GRUE datapools read with ``datasets.load_dataset``: a hub id, or local files through ``data_files``.

Only the loading differs between the two; the same code normalises rows to Samples. Without a
network, a hub id fails at once with an error that says how to point at local copies.
"""

from __future__ import annotations

import csv
import io as stdio
import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from grueflow.data import DATAPOOLS
from grueflow.data.sample import Datapool, Sample
from grueflow.hub import HubUnreachableError, hub_reachable, offline_state
from grueflow.io import (DataError, MissingDataError, check_header_repeat, csv_records, iter_lines, loads_unique,
                         read_text, separator_hint)


BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
# local files are read afresh each time: datasets' cache knows a file by its path and modification time, and hands
# back the rows of an earlier file replaced by one of the same time (two releases unzipped in turn: a zip entry
# keeps its fixed time)
# (the split sizes an earlier read recorded are not checked: they are that file's)
LOCAL_READ = {"download_mode": "force_redownload", "verification_mode": "no_checks"}


def load_splits(path: str, data_files: Optional[dict[str, str]],
                name: Optional[str] = None) -> tuple[Any, dict[str, list[int]]]:
    """``datasets.load_dataset(path, name, data_files=...)``, with a clear error for an unreachable hub; and, for each
    split read from a CSV or JSON-lines file, the line each of its rows starts on (:func:`row_places`).

    With ``data_files`` and a ``path`` that is neither a builder nor a local folder (a hub id, or
    empty), the builder is taken from the files' extension: local files never go to the hub. Local
    text files are checked first (:func:`check_text_file`, Parquet files by :func:`check_parquet_files`):
    ``datasets``' errors name no file or line. Each Parquet file is read on its own, with its own types. Local data
    is read afresh, never from ``datasets``' cache (:data:`LOCAL_READ`). A path
    that begins with ``~`` is in the home folder, as a shell reads it.
    """
    import datasets

    path = os.path.expanduser(path) if path and path.startswith("~") else path  # a home folder, as a shell reads it
    files = {split: os.path.expanduser(file) for split, file in data_files.items()} if data_files else None
    lines: dict[str, list[int]] = {}
    if files:
        missing = [f for f in files.values() if not Path(f).exists()]
        if missing:
            raise MissingDataError(f"data_files {missing} do not exist (relative paths are read from {os.getcwd()})")
        folders = [f for f in files.values() if Path(f).is_dir()]
        if folders:
            raise DataError(f"data_files {folders} are folders; name the data files in them")
        if not path or (path not in BUILDERS.values() and not Path(path).is_dir()):
            path = builder_for(files)
        builder = path if path in BUILDERS.values() else None
        if path == "json":  # read as written (and checked): datasets decodes the strings of a mixed column as JSON
            rows = {split: read_json_rows(file) for split, file in files.items()}
            return rows, {split: split_rows.lines for split, split_rows in rows.items() if split_rows.lines is not None}
        headers = {}
        for split, file in files.items():
            if (builder or BUILDERS.get(Path(file).suffix.lower())) == "csv":
                headers[file], lines[split] = _check_csv(file)
            else:
                headers[file] = check_text_file(file, builder)
        options = csv_options(headers) if path == "csv" else {}
        batch_sizes = check_parquet_files(files) if path == "parquet" else {}
    if not files and Path(path).is_dir() and saved_with_save_to_disk(Path(path)):
        return load_saved(path), lines
    if files or Path(path).exists():
        try:
            if files and path == "parquet":  # each file on its own: a column's type is its file's, as in .jsonl
                dataset = datasets.DatasetDict({split: datasets.load_dataset(path, data_files={split: file},
                                                                             batch_size=batch_sizes[file],
                                                                             **LOCAL_READ)[split]
                                                for split, file in files.items()})
            else:
                dataset = datasets.load_dataset(path, name, data_files=files, **LOCAL_READ,
                                                **(options if files else {}))
        except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as err:  # pyarrow's are ValueErrors
            raise DataError(read_error(sorted(files.values()) if files else path, innermost(err))) from None
        check_plain_columns(dataset, sorted(files.values()) if files else path)
        return dataset, lines
    if path.startswith(("/", "./", "../", "~")) or path in (".", ".."):  # a local path, never a hub id
        raise MissingDataError(f"dataset folder {path!r} does not exist (relative paths are read from "
                               f"{os.getcwd()}); give the folder that holds the data files, or a hub id")
    if not hub_reachable():
        raise HubUnreachableError(
            f"cannot load dataset {path!r}: the Hugging Face hub is unreachable ({offline_state()}) and no local "
            f"copy was given. Point the datapool at local files: path: json (or csv) and data_files: "
            f"{{train: ..., test: ...}}")
    return datasets.load_dataset(path, name), {}


EMPTY_BATCH = "BatchSize must be greater than 0"  # datasets' Parquet reader on an empty first row group


def read_error(where: Any, cause: str) -> str:
    """The message for data files (or a folder) ``where`` that ``datasets`` could not read, ``cause`` its innermost
    error: a Parquet file whose first row group is empty (data files are read past it, :func:`check_parquet_files`;
    a folder's are not) is named with the rewrite that reads; any other cause asks whether the files share their
    columns or one is damaged."""
    if EMPTY_BATCH in cause:
        return (f"cannot read {where}: {cause}: a Parquet file there has an empty first row group (a streaming "
                f"writer's first empty batch), which datasets cannot read; rewrite it without empty row groups "
                f"(pyarrow.parquet.write_table(pyarrow.parquet.read_table(path), path)), or name the files in "
                f"data_files, which are read past it")
    return (f"cannot read {where}: {cause}; do the files share their columns, and is none truncated or damaged? Fix "
            f"or re-create them and rerun")


SAVED_DICT, SAVED_STATE = "dataset_dict.json", "state.json"  # what datasets' save_to_disk writes in its folder


def saved_with_save_to_disk(folder: Path) -> bool:
    """Whether ``folder`` is one that ``datasets``' ``save_to_disk`` wrote: a DatasetDict's (``dataset_dict.json``
    and a folder per split) or a Dataset's (``state.json`` beside its Arrow files). ``load_dataset`` refuses the
    second ("Please use `load_from_disk` instead") and reads the first by its folder names, dropping a split not
    named train, validation or test."""
    return (folder / SAVED_DICT).is_file() or (folder / SAVED_STATE).is_file()


def load_saved(folder: str) -> Any:
    """The dataset ``save_to_disk`` wrote in ``folder``, read with ``datasets.load_from_disk``: a DatasetDict with
    the splits it was saved with, or a Dataset as the one split ``train``, the name ``load_dataset`` gives the rows
    of files given without split names (``split_counts`` and the datapool's split args then divide it). A folder it
    cannot read is a DataError naming it."""
    import datasets

    try:
        dataset = datasets.load_from_disk(folder)
    except (ValueError, OSError) as err:  # pyarrow's errors are ValueErrors
        raise DataError(f"cannot read {folder}, a folder datasets' save_to_disk wrote: {innermost(err)}; save it "
                        f"again with save_to_disk, or give its data as data_files") from None
    if isinstance(dataset, datasets.Dataset):
        dataset = datasets.DatasetDict({"train": dataset})
    check_plain_columns(dataset, folder)
    return dataset


def row_places(where: str, n_rows: int, lines: Optional[list[int]]) -> list[str]:
    """How errors name each of the ``n_rows`` rows of a split read from ``where`` (its file, or the dataset and
    split): ``<file> line N``, the line its record starts on, where ``lines`` gives it (a CSV or JSON-lines file:
    what an editor and ``grep -n`` show, and how the files' own checks name a line; a CSV record with quoted line
    breaks spans several lines), else ``<where> row N`` counting rows from 1 (a Parquet file, a JSON document, a hub
    dataset). ``lines`` that do not count the split's rows (a reader that skipped a row the check counted) are not
    used: a wrong line would send the user to another row."""
    if lines is not None and len(lines) == n_rows:
        return [f"{where} line {line}" for line in lines]
    return [f"{where} row {i + 1}" for i in range(n_rows)]


def innermost(err: BaseException) -> str:
    """The innermost exception ``err`` was raised from (datasets wraps the cause in "An error occurred while
    generating the dataset"), as one line: its first line and, when it has more, its last (pyarrow's "Couldn't
    cast" ends "because column names don't match" after a schema); its type's name when it says nothing."""
    while (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1][:200]}"


class Rows(list):
    """A split's rows (dicts) as read from a JSON data file, with ``column_names`` as ``datasets`` gives them: every
    key of every row, in first-seen order; a row without a key holds None for it, as in ``datasets``. ``lines``: the
    line of each row in a JSON-lines file (None for a JSON document)."""

    def __init__(self, rows: list[dict[str, Any]], lines: Optional[list[int]] = None) -> None:
        self.column_names = list(dict.fromkeys(key for row in rows for key in row))
        self.lines = lines
        super().__init__({column: row.get(column) for column in self.column_names} for row in rows)


def read_json_rows(path: str) -> Rows:
    """The rows of a ``.jsonl`` file (one object a line) or a ``.json`` file (a list of objects, an object of
    equally long columns, or JSON lines, see :func:`json_lines`), each value as the file writes it. A file that is
    not UTF-8, a line or document that is not JSON or not rows, a row that names one key twice (JSON keeps the last
    silently) and a file without rows are DataErrors naming the file, the line and the fix."""
    if Path(path).suffix.lower() == ".json" and not json_lines(path):
        return Rows(_json_document_rows(path))
    rows, lines = [], []
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            value = loads_unique(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}: line {number}, column {err.colno}: not a JSON object ({err.msg}); each "
                            f"line of a .jsonl file is one JSON object") from None
        except ValueError as err:  # a key written twice
            raise DataError(f"{path}: line {number}: {err}; JSON keeps the last value without a word: keep "
                            f"one") from None
        if not isinstance(value, dict):
            raise DataError(f"{path}: line {number}: a JSON {type(value).__name__}, not an object; each line of "
                            f"a .jsonl file is one row, a JSON object of column: value")
        rows.append(value)
        lines.append(number)
    if not rows:
        raise DataError(f"{path}: the file has no rows; a data file needs at least one")
    return Rows(rows, lines)


def check_plain_columns(dataset: Any, where: Any) -> None:
    """Refuse a column that ``datasets`` typed ``Json`` (its rows mix types: text in some, lists or numbers in
    others): it hands back such a column's strings decoded as JSON ("1.50" as 1.5, "007" as 7, "null" as None)."""
    import datasets

    for split, rows in dataset.items():
        mixed = [column for column, feature in rows.features.items() if isinstance(feature, datasets.Json)]
        if mixed:
            raise DataError(f"{where} ({split} split): column {mixed[0]!r} mixes types from row to row (text in some "
                            f"rows, lists or numbers in others), and datasets reads its texts as JSON (\"1.50\" as "
                            f"1.5, \"007\" as 7); give the files as data_files (.jsonl is read as written), or write "
                            f"the column with one type")


def builder_for(files: dict[str, str]) -> str:
    """The ``datasets`` builder that reads these files, from their extension (one kind for all)."""
    kinds = {BUILDERS.get(Path(f).suffix.lower()) for f in files.values()}
    if len(kinds) != 1 or None in kinds:
        raise DataError(f"cannot tell how to read data_files {sorted(files.values())}: give them one extension of "
                        f"{', '.join(BUILDERS)}, or set path to a datasets builder (json, csv, parquet)")
    return kinds.pop()


def one_file(files: Optional[dict[str, str]], first: str, second: str) -> bool:
    """Whether ``data_files``' entries ``first`` and ``second`` (source split names) are one file: one entry, one
    path written two ways, or a link to the other. Both exist (:func:`load_splits` checked them)."""
    if not files or first not in files or second not in files:
        return False
    return first == second or os.path.samefile(files[first], files[second])


def check_text_file(path: str, builder: Optional[str] = None) -> Optional[list[str]]:
    """Raise a DataError naming the file and line where a text data file is not UTF-8, not a table of rows
    (a ``.jsonl`` line that is not a JSON object, a ``.json`` file that is not a list of objects, a ``.csv``
    row with more or fewer fields than its header or that repeats it, a header naming a column twice) or has no
    rows. Returns a CSV file's header (None for the others); a parquet file is checked by
    :func:`check_parquet_files`.

    The check is the one of ``builder``, the ``datasets`` builder that will read the file (``csv``, ``json``,
    ``parquet``: a ``.txt`` file read with ``path: csv`` is checked as CSV); without one, of the file's suffix. A
    JSON file is checked as one document when it ends in ``.json`` (unless it holds JSON lines, see
    :func:`json_lines`), else line by line (JSON lines).

    ``datasets`` reads non-UTF-8 bytes without complaint and fails later, on some row, with a bare
    UnicodeDecodeError; an empty file ends in a bare StopIteration; pandas takes a CSV whose rows all have one
    field more than the header as indexed by its first column, shifting every column by one.
    """
    suffix = Path(path).suffix.lower()
    kind = builder or BUILDERS.get(suffix)
    if kind == "parquet":
        return None
    if kind == "csv":
        return _check_csv(path)[0]
    read_json_rows(path)
    return None


def json_lines(path: str) -> bool:
    """Whether a ``.json`` file holds JSON lines (what ``Dataset.to_json("x.json")`` writes, and ``datasets``
    reads): its first non-blank line is a whole JSON object and another line follows. A JSON document's first
    line is ``[`` or ``{`` (or the whole document, on one line)."""
    lines = (line for _, line in iter_lines(path) if line.strip())
    first = next(lines, None)
    try:
        whole = isinstance(json.loads(first), dict) if first is not None else False
    except json.JSONDecodeError:
        return False
    return whole and next(lines, None) is not None


def _json_document_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a ``.json`` data file that is one JSON document: a list of objects, or an object of equally long
    columns."""
    try:
        data = loads_unique(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: line {err.lineno}, column {err.colno}: not JSON ({err.msg})") from None
    except ValueError as err:  # a key written twice
        raise DataError(f"{path}: a row: {err}; JSON keeps the last value without a word: keep one") from None
    if isinstance(data, list) and all(isinstance(row, dict) for row in data):
        rows = data
    elif isinstance(data, dict) and data and all(isinstance(column, list) for column in data.values()) and \
            len({len(column) for column in data.values()}) == 1:
        rows = [dict(zip(data, values)) for values in zip(*data.values())]
    else:
        raise DataError(f"{path}: a .json data file holds a list of row objects (or an object of equally long column "
                        f"lists); this one holds {type(data).__name__} {str(data)[:60]!r}")
    if not rows:
        raise DataError(f"{path}: the file has no rows; a data file needs at least one")
    return rows


def _check_csv(path: str) -> tuple[list[str], list[int]]:
    """A CSV file's header and the line each data row starts on (blank lines are no row, as ``datasets`` reads the
    file), after checking every row has its number of fields (see :func:`check_text_file`) and none repeats the
    header (:func:`grueflow.io.check_header_repeat`: two files joined into one). A first line that is
    Excel's separator hint (``sep=,``, :func:`grueflow.io.separator_hint`) is a DataError asking to delete it:
    ``datasets`` would read it as the header."""
    csv.field_size_limit(2**31 - 1)  # a long article is one field
    handle = stdio.StringIO(read_text(path).removeprefix("\ufeff"), newline="")
    hint = separator_hint(handle)
    if hint is not None:
        raise DataError(f"{path}: line 1, {'sep=' + hint!r}, is Excel's separator hint (a line Excel reads and hides), "
                        f"which datasets' CSV reader would take for the header; delete that line, or save the file "
                        f"again as CSV UTF-8 (Comma delimited), which writes none")
    reader = csv.reader(handle, strict=True)
    try:
        header = next(reader, None)
        if header is None or not any(field.strip() for field in header):
            raise DataError(f"{path}: the file has no header; a CSV data file starts with one naming its columns")
        repeated = sorted({c for c in header if header.count(c) > 1})
        if repeated:
            raise DataError(f"{path}: line 1: the header names column(s) {repeated} more than once; name each once")
        starts = []
        for start, row in csv_records(reader):
            if not row:
                continue
            if len(row) != len(header):
                raise DataError(f"{path}: line {reader.line_num}: {len(row)} fields where the header has "
                                f"{len(header)}; is a comma stray or missing, or a text with a comma not quoted?")
            check_header_repeat(path, start, row, header)
            starts.append(start)
    except csv.Error as err:
        raise DataError(f"{path}: line {reader.line_num}: not valid CSV ({err})") from None
    if not starts:
        raise DataError(f"{path}: the file has no rows; a data file needs at least one")
    return header, starts


def csv_options(headers: dict[str, Optional[list[str]]]) -> dict[str, Any]:
    """``load_dataset("csv", ...)`` options that read every cell as the text it is: no type guessing (``007``
    stays ``007``, not 7), no missing-value words (``NA``, ``None`` and ``null`` are texts). The files must
    share one set of columns, in any order (:func:`check_same_columns`): ``datasets`` reads a CSV file's columns
    by name."""
    from datasets import Features, Value

    named = {file: header for file, header in headers.items() if header is not None}
    check_same_columns(named, "CSV")
    columns = next(iter(named.values()))
    return {"features": Features({c: Value("string") for c in columns}), "keep_default_na": False,
            "na_filter": False}


def check_same_columns(columns: dict[str, list[str]], kind: str) -> None:
    """Raise a DataError unless every file of ``columns`` ({file: its column names}) has the first file's set of
    columns, in any order; the error names, for each file that differs, the columns it lacks and those it adds."""
    first, expected = next(iter(columns.items()))
    differ = []
    for file, names in columns.items():
        lacks, adds = [c for c in expected if c not in names], [c for c in names if c not in expected]
        if lacks or adds:
            differ.append(f"{file}" + (f" lacks {lacks}" if lacks else "") + (" and" if lacks and adds else "")
                          + (f" adds {adds}" if adds else ""))
    if differ:
        raise DataError(f"data_files have different {kind} columns: {first} has {expected}; {'; '.join(differ)}; "
                        f"give every file the same columns (their order may differ)")


PANDAS_INDEX = re.compile(r"__index_level_\d+__")  # the column pandas' to_parquet writes for an index it keeps


def check_parquet_files(files: dict[str, str]) -> dict[str, int]:
    """The batch size to read each Parquet data file with: the rows of its first row group that holds any. A
    DataError names a file pyarrow cannot open (truncated, damaged or not Parquet: ``datasets``' error names every
    file), a file without rows (``datasets`` fails on it with pyarrow's "BatchSize must be greater than 0"), or files
    with different sets of columns (:func:`check_same_columns`; the index column pandas may write is no data column).

    ``datasets`` reads a file in batches of its first row group's rows, and fails ("BatchSize must be greater than
    0") where that group is empty, as a streaming writer's first empty batch leaves it; the size given here reads
    such a file whole, and is ``datasets``' own choice for any other. Each file is then read on its own
    (:func:`load_splits`), so a column may have another type in another file (``references`` a string in one, a list
    of strings in another), as ``.jsonl`` files are read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns, sizes = {}, {}
    for file in dict.fromkeys(files.values()):
        try:
            metadata = pq.read_metadata(file)
        except (OSError, pa.ArrowException) as err:  # not Parquet, truncated
            raise DataError(f"{file}: not a readable Parquet file ({innermost(err).rstrip('.')}): is it truncated or "
                            f"damaged? Re-create it and rerun") from None
        if metadata.num_rows == 0:
            raise DataError(f"{file}: the file has no rows; a data file needs at least one")
        groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        sizes[file] = next(n for n in groups if n > 0)
        columns[file] = [c for c in metadata.schema.to_arrow_schema().names if not PANDAS_INDEX.fullmatch(c)]
    if columns:
        check_same_columns(columns, "Parquet")
    return sizes


@DATAPOOLS.register("imdb", "IMDB sentiment continuation (RL4LMs): prompt = a review's first words, hub id or local files")
class IMDB:
    """A review's first words -> the words after them; meta ``label`` (0 negative, 1 positive).

    ``prompt_fraction`` 0.5 cuts each review in half as RL4LMs' ``imdb`` and ``imdb_seq2seq`` pools do (else
    ``prompt_words`` / ``reference_words``). ``positive_only_train`` keeps positive train reviews only (RL4LMs'
    pools); ``positive_ratio`` then keeps the first ``int(n x positive_ratio)`` of them, as ``imdb_seq2seq``'s
    ``positive_ratio``. Val is the first ``n_val`` shuffled train reviews (both labels); test reads its own data,
    never train's file.

    A review that cannot give a prompt (no text, or one word cut by ``prompt_fraction``) is a bad row: an error
    naming its file and row, or with ``skip_bad_rows`` dropped, counted in ``stats`` (``skipped_rows`` per split)
    and replaced by the next review; ``n_val``, ``n_train`` and ``n_test`` count samples. A review of at most
    ``prompt_words`` words is all prompt, a sample with no reference, as in RL4LMs' pools: the task's reward and
    the reference-free metrics score it, reference metrics leave it out (NaN); ``stats`` counts such samples per
    split (``without_references``).
    """

    @dataclass(frozen=True)
    class Args:
        path: str = "imdb"
        data_files: Optional[dict[str, str]] = None
        seed: int = 0
        prompt_words: int = 40
        reference_words: int = 40
        prompt_fraction: Optional[float] = None
        positive_only_train: bool = True
        positive_ratio: float = 1.0
        n_train: Optional[int] = None
        n_val: int = 100
        n_test: Optional[int] = None
        skip_bad_rows: bool = False

        def __post_init__(self) -> None:
            if self.prompt_words < 1 or self.reference_words < 1:
                raise ValueError(f"prompt_words and reference_words must be >= 1, got {self.prompt_words} and "
                                 f"{self.reference_words}")
            if self.prompt_fraction is not None and not 0 < self.prompt_fraction < 1:
                raise ValueError(f"prompt_fraction must be in (0, 1), got {self.prompt_fraction}")
            if not 0 < self.positive_ratio <= 1:
                raise ValueError(f"positive_ratio must be in (0, 1], got {self.positive_ratio}")
            if self.positive_ratio != 1 and not self.positive_only_train:
                raise ValueError(f"positive_ratio {self.positive_ratio} keeps a share of the positive train reviews; "
                                 f"it needs positive_only_train: true")
            for split in ("train", "val", "test"):  # an empty split is refused by every later stage
                count = getattr(self, f"n_{split}")
                if count is not None and count < 1:
                    raise ValueError(f"n_{split} must be >= 1 (or left out: all of train or test, 100 val samples), "
                                     f"got {count}")

    @staticmethod
    def meta_keys(args: "IMDB.Args") -> tuple[str, ...]:
        return ("label",)

    @staticmethod
    def build(args: "IMDB.Args") -> Datapool:
        splits, lines = load_splits(args.path, args.data_files)
        _check_imdb_schema(splits, args)
        if one_file(args.data_files, "train", "test"):
            raise DataError(f"imdb datapool: data_files train: {args.data_files['train']} and test: "
                            f"{args.data_files['test']} are one file; every test score would be on training data (val "
                            f"is cut from train): give test a separate file of reviews")
        rng = random.Random(args.seed)
        train_rows = _placed_rows(splits, lines, "train", args)  # (where the row is, row)
        rng.shuffle(train_rows)
        val, read, skipped_val = _imdb_samples(train_rows, "val", args.n_val, args)
        train_rows = train_rows[read:]
        # unlabelled text (the base model's pre-training or adaptation): the hub dataset's ``unsupervised``
        # split (aclImdb's 50k unlabelled reviews) when the source has one, else the train reviews left after val
        # is cut (both labels), so that val scores never text the base model was trained on
        source = splits["unsupervised"] if "unsupervised" in splits else [r for _, r in train_rows]
        unlabelled = [text for text in (_clean(r["text"]) for r in source if isinstance(r["text"], str)) if text]
        if args.positive_only_train:  # RL4LMs' IMDB datapool trains on positive reviews
            train_rows = [(place, r) for place, r in train_rows if imdb_label(r["label"], place) == 1]
            train_rows = train_rows[:int(len(train_rows) * args.positive_ratio)]
        test_rows = _placed_rows(splits, lines, "test", args)
        random.Random(args.seed + 1).shuffle(test_rows)  # the split is sorted by label: n_test must mix both
        train, _, skipped_train = _imdb_samples(train_rows, "train", args.n_train, args)
        test, _, skipped_test = _imdb_samples(test_rows, "test", args.n_test, args)
        pool = {"train": train, "val": val, "test": test}
        skipped = {"train": skipped_train, "val": skipped_val, "test": skipped_test}
        without = {split: sum(not s.references for s in samples) for split, samples in pool.items()}
        empty = [split for split, samples in pool.items() if not samples]
        if empty:
            bad = f", {sum(skipped.values())} bad reviews skipped" if any(skipped.values()) else ""
            raise DataError(f"imdb datapool: the {', '.join(empty)} split is empty: {len(splits['train'])} train and "
                            f"{len(splits['test'])} test reviews, n_val {args.n_val}, positive_only_train "
                            f"{args.positive_only_train}, positive_ratio {args.positive_ratio}{bad}; a split needs a "
                            f"review: raise positive_ratio (or n_val), or give more data")
        return Datapool(pool, unlabelled, {"skipped_rows": skipped, "without_references": without})


def _check_imdb_schema(splits: Any, args: "IMDB.Args") -> None:
    """The imdb loader reads splits train and test with a ``text`` string and a 0/1 ``label`` (aclImdb's
    schema); anything else is a DataError naming what is there and the datapool that maps other columns."""
    where = sorted(args.data_files.values()) if args.data_files else args.path
    missing = [s for s in ("train", "test") if s not in splits]
    if missing:
        raise DataError(f"imdb datapool ({where}): no {' or '.join(missing)} split; it has {sorted(splits)}: give "
                        f"data_files {{train: ..., test: ...}}")
    for split in ("train", "test"):
        columns = splits[split].column_names
        if not {"text", "label"} <= set(columns):
            raise DataError(f"imdb datapool ({where}): split {split} has columns {columns}; it needs text and label "
                            f"(0 negative, 1 positive). For other columns use the custom datapool, which maps them")
    if "unsupervised" in splits and "text" not in splits["unsupervised"].column_names:
        raise DataError(f"imdb datapool ({where}): split unsupervised has columns "
                        f"{splits['unsupervised'].column_names}; it needs text (the unlabelled reviews)")


def imdb_label(value: Any, where: str) -> int:
    """An IMDB row's label as 0 (negative) or 1 (positive): an integer, or its text (a CSV cell). Anything else
    (``"pos"``, ``2``, a float such as ``1.0``: a JSON integer or its digits, as for a classifier's labels) is a
    DataError naming ``where`` (the file and row), the value and the remedy."""
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return value
    raise DataError(f"imdb datapool: {where}: label {value!r:.60} ({type(value).__name__}) is not 0 (negative) or 1 "
                    f"(positive); map the labels to the integers 0 and 1 (a float column's 1.0 too), or use the "
                    f"custom datapool, which maps your columns and keeps any label (fields.meta: [label])")


def _imdb_where(args: "IMDB.Args", source: str) -> str:
    """How errors name the ``source`` split: its file, or the dataset and split."""
    return args.data_files[source] if args.data_files else f"{args.path} ({source} split)"


def _placed_rows(splits: Any, lines: dict[str, list[int]], source: str,
                 args: "IMDB.Args") -> list[tuple[str, dict[str, Any]]]:
    """The ``source`` split's rows as ``(where the row is, row)`` (:func:`row_places`), in file order."""
    rows = splits[source]
    return list(zip(row_places(_imdb_where(args, source), len(rows), lines.get(source)), rows))


def _clean(text: str) -> str:
    return " ".join(text.replace("<br />", " ").split())


def _imdb_samples(rows: list[tuple[str, dict[str, Any]]], split: str, limit: Optional[int],
                  args: IMDB.Args) -> tuple[list[Sample], int, int]:
    """The first ``limit`` Samples (all when None) of ``rows`` (``(where the row is, row)``), ids
    ``<split>-<index>``; with how many rows were read and how many bad ones (:func:`_imdb_cut`) were skipped. A bad
    row is a BadRowError naming its file and line (or row) unless ``args.skip_bad_rows``."""
    from grueflow.data.sources import skip_or_raise  # sources imports this module (load_splits)

    samples: list[Sample] = []
    read = skipped = 0
    for place, row in rows:
        if limit is not None and len(samples) >= limit:
            break
        read += 1
        prompt, reference, problem = _imdb_cut(row["text"], args)
        if problem:
            skipped += skip_or_raise(f"{place}: {problem}", args.skip_bad_rows)
            continue
        samples.append(Sample(f"{split}-{len(samples)}", prompt, (reference,) if reference else (),
                              {"label": imdb_label(row["label"], place)}))
    return samples, read, skipped


def _imdb_cut(text: Any, args: IMDB.Args) -> tuple[str, str, str]:
    """A review's prompt and reference (``""`` when the prompt takes every word), and ``""``; or ``("", "", why)``
    when it cannot give a prompt."""
    if not isinstance(text, str):
        return "", "", f"text is {text!r:.60} ({type(text).__name__}), not a review"
    words = _clean(text).split()
    if not words:
        return "", "", "empty review (its text has no words)"
    if args.prompt_fraction is not None:
        cut, end = int(len(words) * args.prompt_fraction), len(words)
        if cut == 0:
            return "", "", (f"the review has {len(words)} word, too few for prompt_fraction {args.prompt_fraction} "
                            f"to leave a word in the prompt")
    else:
        cut, end = args.prompt_words, args.prompt_words + args.reference_words
    return " ".join(words[:cut]), " ".join(words[cut:end]), ""
