"""What every GRUE datapool loader shares: where its rows come from, how they become train/val/test
Samples, and how a bad row is reported.

Rows come from ``datasets.load_dataset`` (a hub id, or local files through ``data_files``) or from a
loader's own reader (DailyDialog's original text files). Each source row, or group of rows, is a
:class:`Unit` that remembers its origin (``<file> line 12`` for a CSV or JSON-lines file, ``row 12`` otherwise:
:func:`~grueflow.data.hub.row_places`), so every error names the row.

Splits. By default our splits are the source's: train <- ``train``, val <- ``validation`` (or
``val``, ``dev``), test <- ``test``; ``source_splits`` names others (``{test: validation}`` where
the public test set has no references). Where only one split exists locally (a dev or test slice),
``split_fractions`` or ``split_counts`` shuffle the units of that one source split with ``seed`` and cut train,
val and test in that order, so a suite can run on one file. A re-split of several source splits is refused (in
the config when ``data_files`` names several, at the build when the source holds several): it would pool them, so
a held-out test file's rows would be trained on and the test split be mostly train rows. The cut is by
unit, so a CommonGen concept set, a DailyDialog dialogue or a NarrativeQA story never lands in two
splits, and units whose Samples share a prompt (case and whitespace aside) or a ``source_id`` (a row written
twice) are one unit, each row still its own Sample, so a test prompt is never trained on; ``split_counts`` count
those units. A split that cannot be found is an error, never a silently empty split. Train and test never
read one source split or one file (``data_files`` compared as files, links resolved): every test
score would be on training data. Val may read train's source (``source_splits: {val: train}``, where
the data has no validation split).

``n_<split>`` above what the split holds keeps the whole split (RL4LMs configs set a large n to mean all) and logs a
warning naming the split, the n asked and the Samples kept. Samples of one split that share a ``source_id`` are kept,
each its own Sample, with one warning that counts them. So are rows of one split that repeat another's prompt and
references exactly (a file concatenated or exported twice): kept, as a user may mean them, with a warning per split
naming the first, and counted in the datapool's ``stats`` (``repeated_rows`` per split, only where there are some).

Bad rows. A row with an empty input or no non-empty reference fails the build with a message that
names it (a re-split checks every row before it counts units); ``skip_bad_rows: true`` drops such rows instead and
counts them in the datapool's ``stats`` (``skipped_rows`` per split, written to ``stats.json``). Empty strings among
a row's references are dropped; the row is bad only when none is left.
"""

from __future__ import annotations

import logging
import os
import random
from collections import Counter
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from grueflow.config import MAX_COUNT, check_size
from grueflow.data.hub import load_splits, one_file, row_places
from grueflow.data.sample import INVISIBLE, SPLITS, Datapool, Sample, prompt_key
from grueflow.io import DataError, shown

log = logging.getLogger(__name__)

SOURCE_NAMES: dict[str, tuple[str, ...]] = {"train": ("train",), "val": ("validation", "val", "dev"), "test": ("test",)}
SKIP_HINT = "fix the data, or set skip_bad_rows: true to drop such rows (they are counted in stats.json)"


class BadRowError(DataError):
    """A source row that cannot become a Sample: an empty input, no references, misaligned labels."""


@dataclass(frozen=True)
class Unit:
    """One source row, or a group of rows (a CommonGen concept set), with where it came from.

    ``origin`` names it in error messages (``<file> line 12``, ``<file> row 12``); ``key`` is a stable id
    (``<source split>-<index>``) that loaders may keep in ``meta``; ``builder`` is what read it (``datasets``'
    ``csv``, ``json``, ``parquet``; ``json`` for grueflow's own JSON reader; empty for the files a loader reads
    itself, such as DailyDialog's text files): errors give the fix that fits its file type.
    """

    row: dict[str, Any]
    origin: str
    key: str
    builder: str = ""


@dataclass(frozen=True)
class Row:
    """A Sample before its checks and its id (``<split>-<index>``, given once bad rows are out). ``problem``
    says why a row of a unit that yields several cannot be a Sample (a malformed turn of a dialogue), so that
    ``skip_bad_rows`` drops that row alone and the unit's others stay."""

    prompt: str
    references: tuple[str, ...]
    meta: dict[str, Any]
    origin: str
    problem: str = ""


@dataclass(frozen=True)
class SourceArgs:
    """Arguments every GRUE loader shares (each loader sets its own ``path`` default).

    path: a hub dataset id, a ``datasets`` builder (``json``, ``csv``, ``parquet``) or a local
        folder; with ``data_files`` and no builder, the builder is taken from the files' extension.
    name: the hub dataset's configuration (e.g. ``3.0.0``); ignored for local files and folders.
    data_files: ``{source split: file}``, e.g. ``{validation: ../shared/data/x.jsonl}``.
    source_splits: ``{train|val|test: source split}`` where the defaults (train; validation, val
        or dev; test) do not fit; one source split may feed several of ours, but never both train and test.
    split_fractions / split_counts: shuffle the units of the one source split with ``seed`` and cut
        ``{train, val, test}`` by these fractions of the units or these numbers of units; refused where the
        source has several splits (``data_files`` naming several, a hub dataset's train and test).
    n_train / n_val / n_test: keep only the first n Samples of that split (all, with a warning, when it holds
        fewer).
    skip_bad_rows: drop rows with an empty input or no references (counted) instead of failing.
    """

    path: str = ""
    name: Optional[str] = None
    data_files: Optional[dict[str, str]] = None
    source_splits: Optional[dict[str, str]] = None
    split_fractions: Optional[dict[str, float]] = None
    split_counts: Optional[dict[str, int]] = None
    seed: int = 0
    n_train: Optional[int] = None
    n_val: Optional[int] = None
    n_test: Optional[int] = None
    skip_bad_rows: bool = False

    def __post_init__(self) -> None:
        for key in ("path", "data_root"):  # a home folder, as a shell reads it: ~/data is never a hub id
            if isinstance(getattr(self, key, None), str) and getattr(self, key).startswith("~"):
                object.__setattr__(self, key, os.path.expanduser(getattr(self, key)))
        if self.data_files:
            object.__setattr__(self, "data_files", {split: os.path.expanduser(file) if isinstance(file, str) else file
                                                    for split, file in self.data_files.items()})
        check_split_args(self)

    def rows_give_samples_when(self) -> str:
        """When a source row gives a sample, in the loader's own args ("a dialogue gives one per turn after its first
        min_context_turns = 50"), for the error of a split whose rows give none; "" where every good row gives one."""
        return ""


def check_split_args(args: SourceArgs) -> None:
    """Reject split arguments that cannot work, before any data is read."""
    if args.seed < 0:
        raise ValueError(f"seed must be >= 0, got {args.seed}")
    for key in ("source_splits", "split_fractions", "split_counts"):
        mapping = getattr(args, key)
        if mapping is not None and set(mapping) - set(SPLITS):
            raise ValueError(f"{key} has keys {sorted(mapping)}; allowed: {', '.join(SPLITS)}")
    if args.split_fractions is not None and args.split_counts is not None:
        raise ValueError("give split_fractions or split_counts, not both")
    for key, minimum in (("split_fractions", 0.0), ("split_counts", 1)):
        mapping = getattr(args, key)
        if mapping is not None and (set(mapping) != set(SPLITS) or min(mapping.values()) < minimum):
            raise ValueError(f"{key} needs train, val and test, each >= {minimum}; got {dict(mapping)}")
    if args.split_fractions is not None and sum(args.split_fractions.values()) > 1.0 + 1e-9:
        raise ValueError(f"split_fractions add up to more than 1: {dict(args.split_fractions)}")
    if resplit_key(args) and args.data_files and len(args.data_files) > 1:
        files = ", ".join(f"{split}: {file}" for split, file in args.data_files.items())
        raise ValueError(pooled_splits_message(f"data_files {{{files}}}", list(args.data_files), args))
    for split in SPLITS:
        limit = getattr(args, f"n_{split}")
        if limit is not None and limit < 1:
            raise ValueError(f"n_{split} must be >= 1 (or left out for all), got {limit}")
        if limit is not None:
            check_size(f"n_{split}", limit, MAX_COUNT)
    if (not args.path or args.path in ("json", "csv", "parquet")) and not args.data_files:
        raise ValueError(f"path {args.path!r} needs local files: give data_files, e.g. {{validation: data/dev.jsonl}}")


def load_units(args: SourceArgs, schemas: dict[str, tuple[str, ...]], loader: str,
               only: Optional[Iterable[str]] = None) -> dict[str, list[Unit]]:
    """Every source split's rows (or those of the splits named in ``only``) as Units, once each split is checked
    to have one schema's columns.

    ``schemas`` maps a schema's name (for the error) to the columns it needs.
    """
    local = bool(args.data_files) or Path(args.path).is_dir()
    dataset, lines = load_splits(args.path, args.data_files, None if local else args.name)
    sources = {}
    for split, rows in dataset.items():
        if only is not None and split not in only:
            continue
        where = args.data_files[split] if args.data_files else f"{args.path} ({split} split)"
        check_columns(where, rows.column_names, schemas, loader)
        builder = rows.info.builder_name if hasattr(rows, "info") else "json"  # grueflow's own JSON reader: Rows
        places = row_places(where, len(rows), lines.get(split))
        sources[split] = [Unit(row, place, f"{split}-{i}", builder) for i, (place, row) in enumerate(zip(places, rows))]
    return sources


def check_columns(where: str, columns: Iterable[str], schemas: dict[str, tuple[str, ...]], loader: str) -> None:
    """Raise unless ``columns`` hold every column of at least one schema."""
    columns = sorted(columns)
    if any(set(needed) <= set(columns) for needed in schemas.values()):
        return
    wanted = "; or ".join(f"{', '.join(map(_column, needed))} ({name})" for name, needed in schemas.items())
    raise DataError(f"{where} has the columns {shown(columns, 400)}; the {loader} datapool needs {wanted}")


def _column(name: str) -> str:
    """A column's name for a message: as it is, or cut by :func:`grueflow.io.shown` where long (a name the
    ``fields`` mapping gives)."""
    return name if shown(name) == repr(name) else shown(name)


def group_units(units: list[Unit], key: Callable[[Unit], Any],
                merge: Callable[[list[Unit]], dict[str, Any]]) -> list[Unit]:
    """Units that share ``key`` merged into one (first-seen order; the first one's origin and key)."""
    groups: dict[Any, list[Unit]] = {}
    for unit in units:
        groups.setdefault(key(unit), []).append(unit)
    return [Unit(merge(group), group[0].origin, group[0].key, group[0].builder) for group in groups.values()]


def assign_splits(sources: dict[str, list[Unit]], to_rows: Callable[[Unit], list[Row]],
                  args: SourceArgs) -> tuple[dict[str, list[Unit]], Callable[[Unit], list[Row]]]:
    """Our train/val/test units, and the function that turns one into Rows: the source's splits by name with
    ``to_rows``, or a seeded cut of the one source split's units, grouped by prompt first (:func:`prompt_groups`). A
    DataError when train and test would read one source split or one file (:func:`check_train_test_apart`), or a
    re-split would pool several source splits (:func:`check_one_source_split`)."""
    if args.split_fractions is None and args.split_counts is None:
        names = {split: source_name(split, sources, args) for split in SPLITS}
        check_train_test_apart(names["train"], names["test"], args)
        return {split: sources[names[split]] for split in SPLITS}, to_rows
    check_one_source_split(sources, args)
    pooled = [unit for name in sources for unit in sources[name]]
    groups = prompt_groups(pooled, to_rows, args.skip_bad_rows)
    random.Random(args.seed).shuffle(groups)
    sizes = split_sizes(len(groups), args, len(pooled))
    starts = [0, *accumulate(sizes[s] for s in SPLITS)]
    splits = {split: groups[starts[i]:starts[i + 1]] for i, split in enumerate(SPLITS)}
    if len(groups) < len(pooled):
        largest = max(groups, key=lambda group: len(group.row["units"]))
        prompt = largest.row["rows"][0].prompt if largest.row.get("rows") else largest.origin
        held = ", ".join(f"{split} {sum(len(g.row['units']) for g in splits[split])} ({len(splits[split])})"
                         for split in SPLITS)
        log.warning("the re-split joined %d source units into %d groups, so that rows that share a prompt or a "
                    "source_id stay in one split; the largest holds %d units (prompt %r); the split sizes count "
                    "groups, so the splits hold %s units (groups)", len(pooled), len(groups),
                    len(largest.row["units"]), prompt[:80], held)
    return splits, group_rows


def prompt_groups(units: list[Unit], to_rows: Callable[[Unit], list[Row]], skip_bad_rows: bool) -> list[Unit]:
    """``units`` joined where their Rows share a prompt or a ``meta['source_id']`` (transitively), in first-seen
    order, each group a Unit ``{"units", "rows"}`` (its first member's origin and key) whose Rows are computed here
    once (:func:`group_rows` gives them back).

    Every Row is checked here, before a re-split counts units: a bad one fails the build naming its row, or, with
    ``skip_bad_rows``, a unit that gives no Rows at all is a group of its own, ``{"units", "error"}``, that
    :func:`make_samples` counts as skipped. Rows with a problem share no key (an empty prompt joins nothing).
    """
    parent = list(range(len(units)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    results: list[list[Row] | BadRowError] = []
    first_with: dict[tuple[str, Any], int] = {}
    for i, unit in enumerate(units):
        try:
            rows = to_rows(unit)
        except BadRowError as err:
            skip_or_raise(str(err), skip_bad_rows)
            results.append(err)
            continue
        results.append(rows)
        for row in rows:
            problem = row_problem(row)
            if problem:
                skip_or_raise(f"{row.origin}: {problem}", skip_bad_rows)
                continue
            for key in row_keys(row):
                j = first_with.setdefault(key, i)
                low, high = sorted((root(i), root(j)))
                parent[high] = low  # the earlier unit stays the group's root: groups keep first-seen order
    members: dict[int, list[int]] = {}
    for i in range(len(units)):
        members.setdefault(root(i), []).append(i)
    groups = []
    for group in members.values():
        first = units[group[0]]
        found = [results[i] for i in group]
        if isinstance(found[0], BadRowError):
            row: dict[str, Any] = {"units": [first], "error": str(found[0])}
        else:
            row = {"units": [units[i] for i in group], "rows": [r for rows in found for r in rows]}
        groups.append(Unit(row, first.origin, first.key, first.builder))
    return groups


def row_keys(row: Row) -> list[tuple[str, Any]]:
    """What ties a Row to the others of its group: its prompt (:func:`~grueflow.data.sample.prompt_key`: case and
    whitespace aside), and its ``meta['source_id']`` when that is a string or an integer."""
    source_id = row.meta.get("source_id")
    if isinstance(source_id, (str, int)) and not isinstance(source_id, bool):
        return [("prompt", prompt_key(row.prompt)), ("source_id", source_id)]
    return [("prompt", prompt_key(row.prompt))]


def group_rows(group: Unit) -> list[Row]:
    """The Rows of a :func:`prompt_groups` group, or its member's BadRowError again."""
    if "error" in group.row:
        raise BadRowError(group.row["error"])
    return group.row["rows"]


def source_name(split: str, sources: dict[str, Any], args: SourceArgs) -> str:
    """The source split that feeds ``split``: the one named in ``source_splits``, else the first default present."""
    named = (args.source_splits or {}).get(split)
    candidates = (named,) if named else SOURCE_NAMES[split]
    for candidate in candidates:
        if candidate in sources:
            return candidate
    raise DataError(
        f"no {' or '.join(candidates)} split for {split!r}: the data has the splits {sorted(sources)}. Name one "
        f"with source_splits: {{{split}: ...}}, add a data_files entry {candidates[0]}: <file>, or give one file "
        f"and cut train, val and test from its rows with split_fractions (or split_counts) and seed")


RESPLIT_HINT = "cut train, val and test apart from one file's rows with split_fractions (or split_counts) and seed"


def check_train_test_apart(train: str, test: str, args: SourceArgs) -> None:
    """Refuse train and test fed by one source split (``train`` and ``test`` name the source splits that feed
    them) or by two ``data_files`` entries that are one file: every test score would be on training data."""
    if train == test:
        raise DataError(f"train and test both read the source split {train!r} (source_splits "
                        f"{dict(args.source_splits or {})}): every test score would be on training data; feed test "
                        f"from another split (source_splits test: <split>, or data_files test: <file>), or "
                        f"{RESPLIT_HINT}")
    files = args.data_files or {}
    if one_file(files, train, test):
        raise DataError(f"train and test read one file: data_files {train}: {files[train]} and {test}: "
                        f"{files[test]}; every test score would be on training data: give test a separate file, or "
                        f"name the file once and {RESPLIT_HINT}")


def resplit_key(args: SourceArgs) -> str:
    """``split_fractions`` or ``split_counts``, whichever is given; empty when neither (the source's splits kept)."""
    if args.split_fractions is not None:
        return "split_fractions"
    return "split_counts" if args.split_counts is not None else ""


def check_one_source_split(sources: dict[str, list[Unit]], args: SourceArgs) -> None:
    """Refuse a re-split of a source that holds rows in more than one split (a hub dataset's train and test, a
    folder of several files, a ``data_root`` with several splits): it would pool them, so rows held out for test
    would be trained on. ``data_files`` naming several splits is refused earlier, by :func:`check_split_args`."""
    held = [name for name, units in sources.items() if units]
    if len(held) > 1:
        root = getattr(args, "data_root", None)
        where = f"data_root {root}" if root else f"path {args.path}"
        raise DataError(pooled_splits_message(where, held, args))


def pooled_splits_message(given: str, splits: list[str], args: SourceArgs) -> str:
    """The one-line refusal of a re-split that would pool ``splits``, which ``given`` names as the user gave them."""
    key = resplit_key(args)
    mapping = keep_splits(splits)
    named = {ours: theirs for ours, theirs in mapping.items() if theirs not in SOURCE_NAMES[ours]}
    added = (" and add source_splits: {" + ", ".join(f"{ours}: {theirs}" for ours, theirs in named.items()) + "}"
             if named else "")
    note = " (val then reads train's rows)" if mapping and mapping["val"] == mapping["train"] else ""
    pooled = f"{', '.join(splits[:-1])} and {splits[-1]}"
    return (f"{key} with {given} would pool the source splits {pooled} and cut train, val and test from them anew, "
            f"so rows held out in one split would be trained on and scored as test: to re-split one file, give "
            f"data_files that file alone (e.g. {{{splits[0]}: <file>}}); to keep the given splits, drop "
            f"{key}{added}{note}")


def keep_splits(splits: list[str]) -> dict[str, str]:
    """Which of ``splits`` (source split names) ours would read with no re-split: train its train (else the
    validation split), val its validation split (else train's), test its test (else the validation split, when train
    does not read it); empty when train and test cannot both be fed."""
    validation = next((name for name in SOURCE_NAMES["val"] if name in splits), None)
    train = "train" if "train" in splits else validation
    test = "test" if "test" in splits else (validation if validation != train else None)
    if train is None or test is None:
        return {}
    return {"train": train, "val": validation or train, "test": test}


def split_sizes(n_units: int, args: SourceArgs, n_source_units: Optional[int] = None) -> dict[str, int]:
    """How many units go to train, val and test; every split gets at least one. ``n_source_units``, when more
    than ``n_units``, is how many there were before rows sharing a prompt were joined (said in the error)."""
    if args.split_counts is not None:
        sizes = {split: args.split_counts[split] for split in SPLITS}
        if sum(sizes.values()) > n_units:
            joined = (f" ({n_source_units} before the rows that share a prompt or a source_id were joined, to keep "
                      f"each in one split)" if n_source_units is not None and n_source_units > n_units else "")
            raise DataError(f"split_counts {sizes} ask for {sum(sizes.values())} units; the data has {n_units}"
                            f"{joined}")
        return sizes
    ends = [round(n_units * edge) for edge in accumulate(args.split_fractions[s] for s in SPLITS)]
    sizes = dict(zip(SPLITS, (end - start for start, end in zip([0, *ends], ends))))
    empty = [split for split, size in sizes.items() if size == 0]
    if empty:
        raise DataError(f"split_fractions {dict(args.split_fractions)} of {n_units} units leave {', '.join(empty)} "
                        f"empty; raise those fractions or give split_counts")
    return sizes


def build_datapool(sources: dict[str, list[Unit]], to_rows: Callable[[Unit], list[Row]], args: SourceArgs,
                   unlabelled: Optional[Callable[[list[Sample]], list[str]]] = None) -> Datapool:
    """Split the source units (:func:`assign_splits`), normalise each split's units to Samples with ``to_rows``,
    cap them (``n_<split>``) and collect the unlabelled text.

    ``unlabelled`` defaults to the training prompts followed by the training references.
    """
    splits, to_rows = assign_splits(sources, to_rows, args)
    samples: dict[str, list[Sample]] = {}
    skipped: dict[str, int] = {}
    repeated: dict[str, int] = {}
    for split in SPLITS:
        samples[split], skipped[split], origins = make_samples(split, splits[split], to_rows, args.skip_bad_rows)
        limit = getattr(args, f"n_{split}")
        if limit is not None and len(samples[split]) < limit:
            log.warning("n_%s = %d asks for more samples than the %s split holds: kept all %d", split, limit, split,
                        len(samples[split]))
        samples[split] = samples[split][:limit]
        if not samples[split]:
            raise DataError(empty_split_message(split, len(splits[split]), skipped[split], args))
        repeated[split] = count_repeated_rows(split, samples[split], origins)
    warn_repeated_source_ids(samples)
    text = (unlabelled or training_text)(samples["train"])
    return Datapool(samples, text, {"skipped_rows": skipped, **({"repeated_rows": repeated} if any(repeated.values())
                                                                 else {})})


def count_repeated_rows(split: str, samples: list[Sample], origins: list[str]) -> int:
    """How many of ``split``'s Samples repeat the prompt and references (as written) of an earlier one, whatever their
    ``meta``: a file concatenated or exported twice, which would weigh those samples double in every mean. They are
    kept (a user may mean them), with one warning naming the first repeat by its place in the source (``origins``,
    aligned with ``samples``) and the row it repeats."""
    first: dict[tuple[str, tuple[str, ...]], str] = {}
    repeats: list[tuple[str, str]] = []
    for sample, origin in zip(samples, origins):
        key = (sample.prompt, sample.references)
        if key in first:
            repeats.append((origin, first[key]))
        else:
            first[key] = origin
    if repeats:
        log.warning("%s split: %d of %d samples repeat the prompt and references of an earlier sample (first: %s "
                    "repeats %s); each is kept and scored as its own sample (stats.json: repeated_rows)", split,
                    len(repeats), len(samples), *repeats[0])
    return len(repeats)


def warn_repeated_source_ids(samples: dict[str, list[Sample]]) -> None:
    """One warning counting, split by split, the Samples whose ``meta['source_id']`` another Sample of that split has
    too (a row written twice, or two versions of one source row). They are kept, each its own Sample, as rows that
    share a prompt are; a re-split has kept each id's rows in one split. Splits that read one source (val and test
    from one file) are not compared: train and test sharing prompts is counted in stats.json."""
    repeated: dict[str, dict[Any, int]] = {}
    for split in SPLITS:
        counts = Counter(s.meta["source_id"] for s in samples[split] if isinstance(s.meta.get("source_id"), (str, int))
                         and not isinstance(s.meta["source_id"], bool))
        repeated[split] = {source_id: n for source_id, n in counts.items() if n > 1}
    if not any(repeated.values()):
        return
    example = next(iter(next(ids for ids in repeated.values() if ids)))
    per_split = ", ".join(f"{split} {sum(ids.values())}" for split, ids in repeated.items() if ids)
    log.warning("%d samples share their source_id with another sample of their split (%s; %d ids, e.g. %r); each is "
                "kept as its own sample", sum(sum(ids.values()) for ids in repeated.values()), per_split,
                sum(len(ids) for ids in repeated.values()), example)


def make_samples(split: str, units: list[Unit], to_rows: Callable[[Unit], list[Row]],
                 skip_bad_rows: bool) -> tuple[list[Sample], int, list[str]]:
    """The split's Samples, ids ``<split>-<index>``, how many bad rows were skipped, and each Sample's origin."""
    rows: list[Row] = []
    skipped = 0
    for unit in units:
        try:
            candidates = to_rows(unit)
        except BadRowError as err:
            skipped += skip_or_raise(str(err), skip_bad_rows)
            continue
        for row in candidates:
            problem = row_problem(row)
            if problem:
                skipped += skip_or_raise(f"{row.origin}: {problem}", skip_bad_rows)
            else:
                rows.append(row)
    samples = [Sample(f"{split}-{i}", row.prompt, tuple(r for r in row.references if not blank(r)), row.meta)
               for i, row in enumerate(rows)]
    return samples, skipped, [row.origin for row in rows]


def empty_split_message(split: str, n_units: int, skipped: int, args: SourceArgs) -> str:
    """Why ``split`` ended up with no Samples, naming its source, and how to fix it."""
    if args.split_fractions is None and args.split_counts is None:
        named = (args.source_splits or {}).get(split)
        files = args.data_files or {}
        name = named or next((n for n in SOURCE_NAMES[split] if n in files), split)
        source = files.get(name) or f"{args.path} ({name} split)"
    else:
        source = f"the re-split of {args.path or ', '.join((args.data_files or {}).values())}"
    if not n_units:
        found = "the source has no rows"
    else:
        found = f"its {n_units} source rows give no sample" + (f" ({skipped} bad rows skipped)" if skipped else "")
        when = args.rows_give_samples_when()
        if when and not skipped:
            found += f" ({when})"
    return (f"{source}: the {split} split is empty: {found}; a split needs at least one sample: fix the data, "
            f"or feed {split} from another source split with source_splits")


def blank(text: str) -> bool:
    """Whether ``text`` has nothing to read: whitespace and zero-width characters alone (a prompt or reference)."""
    return not text.translate(INVISIBLE).strip()


def row_problem(row: Row) -> str:
    """Why a row cannot be a Sample, or ``""``."""
    if row.problem:
        return row.problem
    if blank(row.prompt):
        return "empty prompt"
    if all(blank(r) for r in row.references):
        return "no references (every reference is empty or missing)"
    return ""


def skip_or_raise(message: str, skip_bad_rows: bool) -> int:
    """1 (one row skipped) when skipping bad rows, else a BadRowError with the fix."""
    if not skip_bad_rows:
        raise BadRowError(f"{message}; {SKIP_HINT}")
    return 1


def optional_text(value: Any, what: str, origin: str) -> str:
    """``value`` as a string, ``""`` when missing (a reference :func:`row_problem` then judges); a
    BadRowError naming the row when it is something else (a number, a list: a field mapped by mistake)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRowError(f"{origin}: {what} is {shown(value)} ({type(value).__name__}), not text")
    return value


def require_texts(value: Any, what: str, origin: str) -> list[str]:
    """``value`` as a list of strings; a BadRowError naming the row when it is not a list (a string would be
    taken letter by letter) or holds anything but text."""
    if not isinstance(value, (list, tuple)):
        raise BadRowError(f"{origin}: {what} is {shown(value)} ({type(value).__name__}), not a list of texts")
    for item in value:
        if not isinstance(item, str):
            raise BadRowError(f"{origin}: {what} holds {shown(item)} ({type(item).__name__}), not text")
    return list(value)


def require_text(value: Any, what: str, origin: str) -> str:
    """``value`` as a stripped string; a BadRowError naming the row when it is missing, not text (a number, a
    list, a mapping: a column mapped by mistake) or blank (zero-width characters alone count as blank)."""
    if value is not None and not isinstance(value, str):
        raise BadRowError(f"{origin}: {what} is {shown(value)} ({type(value).__name__}), not text; map a text column")
    text = "" if value is None else value.strip()
    if blank(text):
        raise BadRowError(f"{origin}: empty {what}")
    return text


def training_text(train: list[Sample]) -> list[str]:
    """Unlabelled text for tokenizer training and LM pre-training: the training prompts, then references."""
    return [s.prompt for s in train] + [r for s in train for r in s.references]
