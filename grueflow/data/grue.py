"""GRUE task datapools (RL4LMs, ``rl4lms/data_pools/custom_text_generation_pools.py``), plus ``custom``.

Each loader reads a hub id with ``datasets.load_dataset`` or local files (``data_files``; DailyDialog
also its original text files under ``data_root``), then the same code turns rows into Samples.
Splitting, bad rows and the shared arguments are described in :mod:`grueflow.data.sources`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grueflow.data import DATAPOOLS
from grueflow.data.sample import Datapool
from grueflow.data.sources import BadRowError, Row, SourceArgs, Unit, assign_splits, build_datapool, group_units, load_units

# ---------------------------------------------------------------------------------------------
# CommonGen
# ---------------------------------------------------------------------------------------------

COMMONGEN_SCHEMAS = {"v1.1, the hub's": ("concepts", "target"), "v1.0, the original files'": ("concept_set", "scene")}
POS_SUFFIX = re.compile(r"_[A-Z]+$")


@DATAPOOLS.register("common_gen", "CommonGen: concepts -> a sentence using them (hub v1.1 or v1.0 files)")
class CommonGen:
    """Concepts -> a sentence using them; every target of a concept set is a reference.

    Reads the hub's v1.1 schema (``concepts``, ``target``: one row per target) and the original
    v1.0 files (``concept_set: "field_N#look_V#stand_V"``, ``scene``: every target on one line),
    where the POS suffixes are stripped into bare lemmas for the prompt. Rows are grouped by concept
    set before any split, so a set is never in two splits. The hub's test split has no targets
    (the leaderboard keeps them): evaluate on validation with ``source_splits: {test: validation}``.

    meta: ``concepts`` (the lemmas, in prompt order), ``concept_set`` (v1.0: as in the file;
    v1.1: the lemmas joined by ``#``).
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "common_gen"
        prefix: str = "generate a sentence with: "

    @staticmethod
    def build(args: "CommonGen.Args") -> Datapool:
        sources = load_units(args, COMMONGEN_SCHEMAS, "common_gen")
        grouped = {name: group_units(units, lambda u: concept_set(u.row), merge_scenes)
                   for name, units in sources.items()}
        return build_datapool(assign_splits(grouped, args), lambda unit: [concepts_row(unit, args.prefix)], args,
                              unlabelled=lambda train: [r for s in train for r in s.references])


def concept_set(row: dict[str, Any]) -> str:
    """The raw concept set of a v1.0 row, or a v1.1 row's lemmas joined by ``#``."""
    return row["concept_set"] if "concept_set" in row else "#".join(row["concepts"])


def lemmas(raw_set: str) -> list[str]:
    """``"field_N#look_V#stand_V"`` -> ``["field", "look", "stand"]``."""
    return [POS_SUFFIX.sub("", concept) for concept in raw_set.split("#") if concept]


def merge_scenes(units: list[Unit]) -> dict[str, Any]:
    """One concept set's rows as ``{concept_set, concepts, targets}``."""
    first = units[0].row
    if "concept_set" in first:
        targets = [t for u in units for t in u.row["scene"]]
        return {"concept_set": first["concept_set"], "concepts": lemmas(first["concept_set"]), "targets": targets}
    return {"concept_set": concept_set(first), "concepts": list(first["concepts"]),
            "targets": [u.row["target"] for u in units]}


def concepts_row(unit: Unit, prefix: str) -> Row:
    concepts = unit.row["concepts"]
    if not concepts:
        raise BadRowError(f"{unit.origin}: empty concept set")
    return Row(prefix + " ".join(concepts), tuple(unit.row["targets"]),
               {"concepts": concepts, "concept_set": unit.row["concept_set"]}, unit.origin)
