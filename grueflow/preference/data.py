"""The preference-set format: one JSON object a line, ``{id, prompt, chosen, rejected}``.

Extra keys (``chosen_system``, ``rejected_system``, ``annotator``, scores …) are allowed and kept. ``sample_id``,
where a row has one, is the sample the pair judges, shared by the rows of several annotators' judgements of one
item (whose ids differ); the reward model's held-out split keeps a sample's rows together, and without
``sample_id`` a prompt's rows.
The human-evaluation import writes exactly this as ``preferences.jsonl``; :mod:`grueflow.preference.build`
writes it from a metric. Reading is strict: a bad row is a :class:`~grueflow.io.DataError` naming the
file, the line and the key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from grueflow import io

log = logging.getLogger(__name__)

REQUIRED = ("id", "prompt", "chosen", "rejected")
PREFERENCES_FILE = "preferences.jsonl"


@dataclass(frozen=True)
class Preference:
    """One pairwise judgement: ``chosen`` is preferred over ``rejected`` as a completion of ``prompt``."""

    id: str
    prompt: str
    chosen: str
    rejected: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sample_id(self) -> str:
        """The sample this pair judges: the row's ``sample_id`` where it has one, else its ``id``."""
        return self.extra.get("sample_id", self.id)

    def to_json(self) -> dict[str, Any]:
        return {**self.extra, "id": self.id, "prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}


def parse_row(row: Any, where: str) -> Preference:
    """A :class:`Preference` from one decoded JSONL line; ``where`` is ``<file>: line <n>``."""
    if not isinstance(row, dict):
        raise io.DataError(f"{where}: expected a JSON object with keys {', '.join(REQUIRED)}, got {type(row).__name__}")
    for key in REQUIRED:
        if key not in row:
            raise io.DataError(f"{where}: missing key {key!r}; a preference row needs {', '.join(REQUIRED)}")
        if not isinstance(row[key], str):
            raise io.DataError(f"{where}: key {key!r} must be a string, got {row[key]!r}")
    if "sample_id" in row and not (isinstance(row["sample_id"], str) and row["sample_id"].strip()):
        raise io.DataError(f"{where}: key 'sample_id' must be a non-empty string (the sample the pair judges), "
                           f"got {row['sample_id']!r}")
    for key in ("id", "prompt"):
        if not row[key].strip():
            raise io.DataError(f"{where}: key {key!r} is empty")
    if row["chosen"] == row["rejected"]:
        raise io.DataError(f"{where}: key 'rejected' equals 'chosen' ({row['chosen']!r}); a pair needs two "
                           "different completions")
    return Preference(row["id"], row["prompt"], row["chosen"], row["rejected"],
                      {k: v for k, v in row.items() if k not in REQUIRED})


def read_preferences(path: str | Path) -> list[Preference]:
    """Every row of a preference file, validated; raises DataError on the first bad row or repeated id (saying what
    joined files a repeat suggests, :func:`_joined_hint`)."""
    path = Path(path)
    if path.is_dir():
        raise io.DataError(f"preference file {path} is a folder; give the preferences.jsonl in it (build_preferences "
                           f"and import_human_eval write one)")
    io.refuse_special_file(path, "give the preferences.jsonl that build_preferences or import_human_eval wrote",
                           "preference file")
    if not path.is_file():
        raise io.MissingDataError(f"preference file {path} does not exist; build one with build_preferences "
                                  "or import human judgements (stages/import_human_eval.py, or snakemake "
                                  "results/human_eval_table.csv)")
    rows, seen = [], {}
    for number, line in io.iter_lines(path):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            value = io.loads_unique(line)
        except ValueError as err:
            raise io.DataError(f"{where}: not a JSON object ({err}); each line is one preference") from None
        pref = parse_row(value, where)
        if pref.id in seen:
            first = rows[seen[pref.id][1]]
            raise io.DataError(f"{where}: key 'id' repeats {pref.id!r} (first on line {seen[pref.id][0]}); ids must be "
                               f"unique{_joined_hint(first, pref)}")
        seen[pref.id] = (number, len(rows))
        rows.append(pref)
    if not rows:
        raise io.DataError(f"{path}: no preference rows; a preference set needs at least one pair")
    return rows


def _joined_hint(first: Preference, again: Preference) -> str:
    """What a repeated id means where the two rows are different judgements: preference files joined whose ids
    repeat, as those of two batches' human-evaluation imports did before ids named their batch
    (``<sample id>/<annotator>``), or, for a row repeated whole, a file joined to a copy of itself."""
    if first.to_json() == again.to_json():
        return ": the two rows are the same judgement (one file joined to itself, or to a copy?); keep one of them"
    return (": the two rows are different judgements, as in preference files joined whose ids repeat (two batches' "
            "human-evaluation imports wrote <sample id>/<annotator> before ids named their batch); import those "
            "batches again, which writes ids <batch tag>/<sample id>/<annotator>, and join the new files, or make "
            "each file's ids unique (prefix them with the batch name)")


def warn_test_pairs(prefs: list[Preference], path: str | Path, stage: str) -> int:
    """How many of ``prefs`` judge a test-split sample (a ``sample_id`` of the datapool's ``test-<k>`` form: the
    human batches are exported from evaluate's test predictions), with a WARNING when any do: a model trained on
    them has seen test prompts that its GRUE table row scores again."""
    tested = sum(p.sample_id.startswith("test-") for p in prefs)
    if tested:
        log.warning("%s: %d of %d preference pairs in %s judge test-split samples (sample_id test-<k>, as human "
                    "batches exported from evaluate are): the model trained on them has seen those test prompts, "
                    "and its GRUE table rows score them again", stage, tested, len(prefs), path)
    return tested


def write_preferences(path: str | Path, prefs: Iterable[Preference]) -> None:
    """Write ``prefs`` as JSONL, atomically."""
    io.write_jsonl(path, (p.to_json() for p in prefs))
