"""The Sample schema ``{id, prompt, references, meta}`` and datapool folders on disk."""

from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grueflow import io

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
UNLABELLED = "unlabelled.jsonl"  # one JSON string per line: a text keeps its line breaks
UNLABELLED_LINES = "unlabelled.txt"  # a datapool written by hand may give one text per line instead


@dataclass(frozen=True)
class Sample:
    """One task input with its reference outputs; ``meta`` carries task-specific fields."""

    id: str
    prompt: str
    references: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.prompt:  # a DataError (a ValueError): a stage, a datapool plugin's included, ends in one line
            raise io.DataError(f"sample {self.id!r} has an empty prompt ({self.prompt!r}); a Sample's prompt is a "
                               f"non-empty text")

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "references": list(self.references), "meta": self.meta}

    @classmethod
    def from_json(cls, row: dict[str, Any], where: str) -> "Sample":
        """A Sample from a datapool file's row, checked (a file edited by hand, or one whose ``stage.json`` is
        gone, is read here unchecked otherwise): a DataError at ``where`` for a missing key or a value of the
        wrong type, e.g. references ``"four"`` (a string would be taken letter by letter)."""
        if not isinstance(row, dict):
            raise io.DataError(f"{where}: a Sample is a JSON object, not {type(row).__name__}")
        missing = {"id", "prompt", "references"} - set(row)
        if missing:
            raise io.DataError(f"{where}: a Sample needs keys id, prompt, references (and meta); "
                               f"missing {sorted(missing)}")
        problems = [f"{key} must be {kind}, got {row[key]!r:.60}" for key, kind, ok in (
            ("id", "a string", isinstance(row["id"], str)),
            ("prompt", "a non-empty string", isinstance(row["prompt"], str) and row["prompt"].strip()),
            ("references", "a list of strings", isinstance(row["references"], list)
             and all(isinstance(r, str) for r in row["references"])),
            ("meta", "an object", isinstance(row.get("meta", {}), dict))) if not ok]
        if problems:
            raise io.DataError(f"{where}: {problems[0]}; rebuild the datapool with prepare_datapool")
        return cls(row["id"], row["prompt"], tuple(row["references"]), row.get("meta", {}))


@dataclass(frozen=True)
class Datapool:
    """Train/val/test Samples plus unlabelled text (for tokenizer training and LM pre-training).

    ``stats`` holds the loader's own counts (e.g. ``skipped_rows`` per split); they go into stats.json.
    """

    splits: dict[str, list[Sample]]
    unlabelled: list[str]
    stats: dict[str, Any] = field(default_factory=dict)


INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))  # zero-width and soft-hyphen


def prompt_key(prompt: str) -> str:
    """What makes two prompts one for leakage between splits: their text in Unicode's NFKC form (an accent
    precomposed or combined, as macOS writes file names, prints alike), without zero-width characters, with case
    folded and runs of whitespace made one space, so that ``"Review 3  was fine"`` and ``"REVIEW 3 was fine"``, or
    ``"Zürich"`` in its two forms, are never one in train and the other in test. NFKC also folds superscripts,
    subscripts and fractions ("H₂O" and "H2O", but also "3²" and "32", are one prompt): for a guard against leakage,
    joining two prompts errs on the safe side (they share a split, and the overlap count may name them)."""
    return " ".join(unicodedata.normalize("NFKC", prompt.translate(INVISIBLE)).casefold().split())


def _not_text(value: Any) -> str:
    """Why ``value`` is not text a datapool file can hold ("" when it is): not a string, or a string with a lone
    surrogate (a JSON ``\\ud800`` escape without its pair), which no UTF-8 file can hold."""
    if not isinstance(value, str):
        return f"is {value!r:.60} ({type(value).__name__}), not text"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"holds a lone surrogate {value[err.start]!r} at character {err.start + 1}, which is not Unicode "
                f"text (a JSON \\ud800 escape without its pair?)")
    return ""


def _sample_problem(sample: Any) -> str:
    """Why a loader's ``sample`` cannot be written as a datapool row ("" when it can)."""
    if not isinstance(sample, Sample):
        return f"is a {type(sample).__name__}, not a grueflow.data.sample.Sample"
    if not isinstance(sample.id, str) or not sample.id:
        return f"id {sample.id!r} is not a non-empty string"
    if isinstance(sample.references, str):
        return (f"references is the string {sample.references!r:.60}, which would be read letter by letter; give a "
                f"tuple of strings, e.g. ({sample.references!r:.40},)")
    if not isinstance(sample.references, (list, tuple)):
        return f"references is a {type(sample.references).__name__}, not a tuple of strings"
    texts = [("prompt", sample.prompt)] + [(f"reference {k + 1}", r) for k, r in enumerate(sample.references)]
    problem = next((f"{name} {why}" for name, text in texts for why in [_not_text(text)] if why), "")
    if problem:
        return problem
    if not isinstance(sample.meta, dict):
        return f"meta is a {type(sample.meta).__name__}, not a mapping"
    try:
        json.dumps(sample.meta, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as err:
        return f"meta {sample.meta!r:.80} cannot be written as JSON ({err})"
    return ""


def check_pool(pool: Any, source: str) -> None:
    """A DataError naming the loader (``source``, the datapool id), the split and the sample where a built datapool
    cannot be written as it is (a plugin's own loader included): not a :class:`Datapool`; splits other than train,
    val and test, or one of them not a list (a generator) or empty; a sample that is not a :class:`Sample` of text
    (references as one string, a number where text belongs, a lone surrogate, meta that is not JSON); an id twice in
    a split. Without it the rows would be written letter by letter, or fail mid-write, or be refused only by the next
    stage."""
    if not isinstance(pool, Datapool):
        raise io.DataError(f"datapool {source!r} built a {type(pool).__name__}, not a grueflow.data.sample.Datapool")
    if not isinstance(pool.splits, dict) or sorted(pool.splits) != sorted(SPLITS):
        given = sorted(pool.splits) if isinstance(pool.splits, dict) else type(pool.splits).__name__
        raise io.DataError(f"datapool {source!r} built the splits {given}; a datapool has the splits "
                           f"{', '.join(SPLITS)}, no more and no fewer")
    for split in SPLITS:
        if not isinstance(pool.splits[split], (list, tuple)):  # a generator: consumed by this check, then written empty
            raise io.DataError(f"datapool {source!r} built its {split} split as a {type(pool.splits[split]).__name__}, "
                               f"not a list of Samples; give a list, e.g. list(...) of what it yields")
        if not pool.splits[split]:
            raise io.DataError(f"datapool {source!r} built no {split} samples; every split needs at least one")
        seen: set[str] = set()
        for i, sample in enumerate(pool.splits[split]):
            problem = _sample_problem(sample)
            if not problem and sample.id in seen:
                problem = f"id {sample.id!r} is given to two samples of the split; give each its own"
            if problem:
                raise io.DataError(f"datapool {source!r}, {split} sample {i + 1}: {problem}")
            seen.add(sample.id)
    if not isinstance(pool.unlabelled, (list, tuple)):
        shown = f"the string {pool.unlabelled!r:.40}, which would be written letter by letter" \
            if isinstance(pool.unlabelled, str) else f"a {type(pool.unlabelled).__name__}"
        raise io.DataError(f"datapool {source!r}: unlabelled is {shown}; give a list of texts")
    bad = next((f"line {k + 1} {why}" for k, line in enumerate(pool.unlabelled) for why in [_not_text(line)] if why),
               "")
    if bad:
        raise io.DataError(f"datapool {source!r}: unlabelled text {bad}")


def write_datapool(pool: Datapool, out_dir: str | Path, source: str = "") -> dict[str, Any]:
    """Write ``<split>.jsonl`` and ``unlabelled.jsonl``, once :func:`check_pool` passes (``source``: the datapool
    id, for its messages); return the stats (written to ``stats.json`` too).

    Each unlabelled text is one JSON string, so that a text holding line breaks (CNN/DailyMail's highlights) is
    read back as the one text it is, and ``unlabelled_lines`` counts what :func:`read_unlabelled` returns. Texts
    that are empty or only whitespace carry nothing to pre-train on: they are left out, with a warning, and
    counted as ``unlabelled_empty``.

    ``train_test_prompt_overlap`` counts the distinct prompts found in both train and test (compared by
    :func:`prompt_key`): a test sample whose prompt was trained on scores what the model memorised.
    """
    check_pool(pool, source or "(unnamed)")
    out_dir = Path(out_dir)
    for split in SPLITS:
        io.write_jsonl(out_dir / f"{split}.jsonl", (s.to_json() for s in pool.splits[split]))
    texts = [text for text in pool.unlabelled if text.strip()]
    io.write_jsonl(out_dir / UNLABELLED, texts)
    empty = len(pool.unlabelled) - len(texts)
    if empty:
        log.warning("%d of %d unlabelled texts are empty or only whitespace: left out (stats.json: unlabelled_empty)",
                    empty, len(pool.unlabelled))
    overlap = {prompt_key(s.prompt) for s in pool.splits["train"]} & {prompt_key(s.prompt) for s in pool.splits["test"]}
    leaked = [s.prompt for s in pool.splits["test"] if prompt_key(s.prompt) in overlap]
    if leaked:
        log.warning("%d of %d test samples have a prompt that is also a train prompt (%d distinct, e.g. %r): their "
                    "scores may reflect what the model memorised (stats.json: train_test_prompt_overlap)",
                    len(leaked), len(pool.splits["test"]), len(overlap), leaked[0][:80])
    stats: dict[str, Any] = {"unlabelled_lines": len(texts), "train_test_prompt_overlap": len(overlap),
                             **({"unlabelled_empty": empty} if empty else {}), **pool.stats}
    for split in SPLITS:
        samples = pool.splits[split]
        stats[split] = {
            "samples": len(samples),
            "references_per_sample": _mean([len(s.references) for s in samples]),
            "prompt_words": _mean([len(s.prompt.split()) for s in samples]),
            "reference_words": _mean([len(r.split()) for s in samples for r in s.references]),
        }
    io.write_json(out_dir / "stats.json", stats)
    return stats


def _leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of a nested mapping's leaves."""
    if not isinstance(tree, dict) or not tree:
        return {prefix[:-1]: tree} if prefix else {}
    return {key: value for name, child in tree.items() for key, value in _leaves(child, f"{prefix}{name}.").items()}


PATH_ARGS = ("args.path", "args.data_root", "args.data_files.")  # the datapool args that name a file or folder


def _real(key: str, value: Any) -> Any:
    """A datapool arg (``key``, dotted) that names a file or folder (:data:`PATH_ARGS`) and exists, as its resolved
    path (``~`` expanded); any other value as it is (a prompt suffix "." is no folder)."""
    if not (key.startswith(PATH_ARGS) and isinstance(value, str) and value):
        return value
    path = os.path.expanduser(value)
    return os.path.realpath(path) if os.path.exists(path) else value


def check_datapool(datapool: Path, task_file: Path) -> None:
    """Before a stage reads ``datapool`` for the task of ``task_file``: a datapool that ``prepare_datapool`` built
    from another ``datapool`` section (another task's, or this task's before an edit) is a :class:`ConfigError`
    naming what differs, so that a run by hand cannot score one task's samples under another's name. A datapool
    without a stage record (written by hand, or its record deleted) is read as it is, with a warning that nothing
    checks its files or its task; a missing folder or a damaged record is named when the splits are read."""
    from grueflow.config import ConfigError, DatapoolConfig, to_dict, typed_args
    from grueflow.params import load_section, parse

    def resolved(cfg: DatapoolConfig) -> dict[str, Any]:  # a default spelled out or left out reads the same
        return {"id": cfg.id, "args": to_dict(typed_args(cfg))}

    folder = Path(datapool)
    if not folder.is_dir():
        return
    if not (folder / io.STAGE_RECORD).is_file():
        log.warning(
            "--datapool %s has no %s: prepare_datapool did not write it (or its record was deleted), so its splits "
            "are read as they are, with no check of their files or of the task they were built for", folder,
            io.STAGE_RECORD)
        return
    try:
        record = io.read_json(folder / io.STAGE_RECORD)
    except (OSError, ValueError):
        return
    params = record.get("params") if isinstance(record, dict) else None
    built = params.get("datapool") if isinstance(params, dict) else None
    if not isinstance(built, dict):
        return
    section = load_section(DatapoolConfig, task_file, "datapool")
    wanted = resolved(section)
    try:
        built = resolved(parse(DatapoolConfig, built, "datapool"))
    except ConfigError:  # a record an earlier version wrote, whose args this one no longer takes: compared as written
        wanted = to_dict(section)
    # a file named ./x, ../shared/x or by its absolute path is the same file (relative to this working folder)
    had, has = ({key: _real(key, value) for key, value in _leaves(side).items()} for side in (built, wanted))
    differ = [key for key in sorted(set(had) | set(has)) if had.get(key) != has.get(key)]
    if not differ:
        return
    if had.get("id") != has.get("id"):  # another loader: its args differ too, and say nothing more
        differ = ["id"]
    shown = "; ".join(f"{key} {had.get(key, '(absent)')!r} where the task file has {has.get(key, '(absent)')!r}"
                      for key in differ[:3])
    raise ConfigError(f"--datapool {folder} was built from another datapool section than {task_file}'s ({shown}"
                      f"{'; and more' if len(differ) > 3 else ''}): it holds another task's samples, or this task's "
                      f"before an edit; give this task's datapool, or rebuild it with prepare_datapool")


def read_split(datapool_dir: str | Path, split: str) -> list[Sample]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    path = Path(datapool_dir) / f"{split}.jsonl"
    io.refuse_special_file(path, "rebuild the datapool with prepare_datapool", "datapool split")
    if not path.is_file():
        raise io.MissingDataError(f"datapool split {path} does not exist; run prepare_datapool first")
    io.check_stage_output(datapool_dir)  # every file as prepare_datapool's stage.json recorded it
    samples = [Sample.from_json(row, f"{path}:{i + 1}") for i, row in enumerate(io.read_jsonl(path))]
    if not samples:
        raise io.DataError(f"datapool split {path} is empty; rebuild it with prepare_datapool")
    seen: set[str] = set()
    for i, sample in enumerate(samples):
        if sample.id in seen:
            raise io.DataError(f"{path}:{i + 1}: id {sample.id!r} appears twice; rebuild the datapool with "
                               f"prepare_datapool")
        seen.add(sample.id)
    return samples


def read_unlabelled(datapool_dir: str | Path) -> list[str]:
    """The datapool's unlabelled texts, in order, without empty ones: from ``unlabelled.jsonl`` (one JSON string
    per line, as :func:`write_datapool` writes it), else from a hand-written ``unlabelled.txt`` (one text per line;
    a text cannot hold a line break there). A DataError names a line that is not a JSON string, and a folder with
    neither file."""
    folder = Path(datapool_dir)
    path = folder / UNLABELLED
    for file in (path, folder / UNLABELLED_LINES):
        io.refuse_special_file(file, "rebuild the datapool with prepare_datapool")
    if not path.is_file() and (folder / UNLABELLED_LINES).is_file():
        # at line ends only (\n, \r\n, or \r as old Mac files end lines): a text may hold U+2028 or a form feed
        return [line for line in re.split(r"\r\n|\r|\n", io.read_text(folder / UNLABELLED_LINES)) if line.strip()]
    if not path.is_file():
        raise io.MissingDataError(f"{path} is missing: the datapool has no unlabelled text; rebuild it with "
                                  f"prepare_datapool (or, by hand, write one JSON string per line there)")
    texts = []
    for number, line in io.iter_lines(path):
        if not line.strip():
            continue
        try:
            text = json.loads(line)
        except json.JSONDecodeError as err:
            raise io.DataError(f"{path}: line {number}, column {err.colno}: not JSON ({err.msg}); each line of "
                               f"{UNLABELLED} is one JSON string, e.g. \"a text\"") from None
        if not isinstance(text, str):
            raise io.DataError(f"{path}: line {number} is {text!r:.60} ({type(text).__name__}), not a JSON string; "
                               f"each line of {UNLABELLED} is one text, e.g. \"a text\"")
        if text.strip():
            texts.append(text)
    return texts


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0
