"""Real sentences read from ../shared/data at test time (never copied into the repository)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

DATA = Path(os.environ.get("GRUEFLOW_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def _lines(relative: str, n: int) -> list[str]:
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"shared data file {path} is absent (set GRUEFLOW_SHARED_DATA to the shared/data folder)")
    with path.open(encoding="utf-8") as f:
        return [next(f) for _ in range(n)]


def commongen(n: int = 3) -> tuple[list[str], list[list[str]]]:
    """Generation = a row's first scene sentence; references = its other scene sentences."""
    rows = [json.loads(line) for line in _lines("commongen/commongen.dev.jsonl", n)]
    return [r["scene"][0] for r in rows], [list(r["scene"][1:]) for r in rows]


def commongen_scenes(n: int = 993) -> list[tuple[list[str], str]]:
    """(concepts without their POS suffix, one human scene) for every scene of the first ``n`` concept sets."""
    rows = [json.loads(line) for line in _lines("commongen/commongen.dev.jsonl", n)]
    return [([c.rsplit("_", 1)[0] for c in r["concept_set"].split("#")], scene) for r in rows for scene in r["scene"]]


def iwslt(n: int = 3) -> tuple[list[str], list[list[str]]]:
    """Reference = a German talk sentence; generation = it without its first and last words (a partial 'translation')."""
    rows = [json.loads(line)["translation"]["de"] for line in _lines("iwslt2017/tst2016.en-de.jsonl", n)]
    return [" ".join(de.split()[1:-1]) for de in rows], [[de] for de in rows]


def cnn_dailymail(n: int = 2) -> tuple[list[str], list[list[str]]]:
    """Generation = the article's first sentence (a lead baseline); reference = the highlights."""
    rows = [json.loads(line) for line in _lines("cnn_dailymail/summeval_cnndm_test100.jsonl", n)]
    return [r["article"].split(" . ")[0] + " ." for r in rows], [[r["highlights"]] for r in rows]


def dailydialog(n: int = 4) -> list[str]:
    """The first ``n`` utterances of the first validation dialogue."""
    first = _lines("dailydialog/validation/dialogues.txt", 1)[0]
    return [u.strip() for u in first.split("__eou__") if u.strip()][:n]


def dailydialog_acts(n: int = 4) -> list[str]:
    """The dialogue-act ids (1 inform, 2 question, 3 directive, 4 commissive) of those utterances."""
    return _lines("dailydialog/validation/dialogues_act.txt", 1)[0].split()[:n]


def totto(n: int = 2) -> tuple[list[str], list[list[str]], list[list[list[str]]]]:
    """Generation = the first annotator's sentence after deletion; references = the final sentences;
    table = the highlighted cells as ``[column header, value]`` pairs."""
    rows = [json.loads(line) for line in _lines("totto/dev_sample.jsonl", n)]
    tables = []
    for row in rows:
        header = [cell["value"] for cell in row["table"][0]]
        tables.append([[header[c] if c < len(header) else "", row["table"][r][c]["value"]]
                       for r, c in row["highlighted_cells"] if c < len(row["table"][r])])
    return ([r["sentence_annotations"][0]["sentence_after_deletion"] for r in rows],
            [[a["final_sentence"] for a in r["sentence_annotations"]] for r in rows], tables)
