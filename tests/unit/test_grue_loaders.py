"""The GRUE datapool loaders on the real slices in ../shared/data (read where they lie) and, for the
hub schemas, on small fixtures written here; literal counts, prompts and references."""

import json

import pytest
from shared_data import DATA

from grueflow.config import parse
from grueflow.data import DATAPOOLS
from grueflow.data.sources import BadRowError

SPLITS = ("train", "val", "test")


def build(name, **kwargs):
    loader = DATAPOOLS.get(name)
    return loader.build(parse(loader.Args, kwargs, "args"))


def shared(relative):
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"shared data {path} is absent (set GRUEFLOW_SHARED_DATA to the shared/data folder)")
    return str(path)


def every_split(source):
    """source_splits that feed train, val and test from the one source split (to see a whole slice, in order)."""
    return {split: source for split in SPLITS}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def sizes(pool):
    return [len(pool.splits[s]) for s in SPLITS]


# ---------------------------------------------------------------------------------------------
# CommonGen
# ---------------------------------------------------------------------------------------------


def test_commongen_v10_dev_slice_one_sample_per_concept_set():
    pool = build("common_gen", data_files={"validation": shared("commongen/commongen.dev.jsonl")},
                 source_splits=every_split("validation"))
    test = pool.splits["test"]
    assert len(test) == 993 and sum(len(s.references) for s in test) == 4018  # the README says 4017; the file has 4018
    first = test[0]
    assert first.id == "test-0"
    assert first.prompt == "generate a sentence with: field look stand"
    assert first.references == ("The player stood in the field looking at the batter.",
                                "The coach stands along the field, looking at the goalkeeper.",
                                "I stood and looked across the field, peacefully.",
                                "Someone stands, looking around the empty field.")
    assert first.meta == {"concepts": ["field", "look", "stand"], "concept_set": "field_N#look_V#stand_V"}
    assert all("_" not in c for s in test for c in s.meta["concepts"])
    assert pool.unlabelled[:2] == list(first.references[:2])  # unlabelled text: the training scenes


def test_commongen_seeded_resplit_cuts_by_concept_set():
    files = {"validation": shared("commongen/commongen.dev.jsonl")}
    pool = build("common_gen", data_files=files, split_fractions={"train": 0.8, "val": 0.1, "test": 0.1})
    assert sizes(pool) == [794, 100, 99]
    assert pool.splits["test"][0].prompt == "generate a sentence with: bath bathtub dog give"
    sets = [{s.meta["concept_set"] for s in pool.splits[split]} for split in SPLITS]
    assert sum(map(len, sets)) == 993 and not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    counted = build("common_gen", data_files=files, split_counts={"train": 893, "val": 50, "test": 50}, seed=1)
    assert sizes(counted) == [893, 50, 50]
    assert counted.splits["test"][0].prompt == "generate a sentence with: bird cup eat food hold"
    again = build("common_gen", data_files=files, split_counts={"train": 893, "val": 50, "test": 50}, seed=1)
    assert again == counted


def test_commongen_hub_v11_rows_are_grouped_into_concept_sets(tmp_path):
    rows = [{"concept_set_idx": 0, "concepts": ["ski", "mountain", "skier"], "target": "Skier skis down the mountain"},
            {"concept_set_idx": 0, "concepts": ["ski", "mountain", "skier"],
             "target": "A skier is skiing down a mountain."},
            {"concept_set_idx": 1, "concepts": ["dog", "frisbee", "catch"], "target": "A dog catches a frisbee."}]
    hidden = [{"concept_set_idx": 2, "concepts": ["cat", "sleep", "sofa"], "target": ""}]
    files = {"train": write_jsonl(tmp_path / "train.jsonl", rows),
             "validation": write_jsonl(tmp_path / "val.jsonl", rows),
             "test": write_jsonl(tmp_path / "test.jsonl", hidden)}
    with pytest.raises(BadRowError, match=r"test\.jsonl row 1: no references.*skip_bad_rows"):
        build("common_gen", data_files=files)
    pool = build("common_gen", data_files=files, source_splits={"test": "validation"})
    assert sizes(pool) == [2, 2, 2]
    first = pool.splits["train"][0]
    assert first.prompt == "generate a sentence with: ski mountain skier"
    assert first.references == ("Skier skis down the mountain", "A skier is skiing down a mountain.")
    assert first.meta == {"concepts": ["ski", "mountain", "skier"], "concept_set": "ski#mountain#skier"}
    assert pool.unlabelled == [r["target"] for r in rows]
