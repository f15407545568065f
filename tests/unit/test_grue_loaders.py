"""The GRUE datapool loaders on the real slices in ../shared/data (read where they lie) and, for the
hub schemas, on small fixtures written here; literal counts, prompts and references."""

import csv
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from shared_data import DATA

from grueflow.config import ConfigError, DatapoolConfig
from grueflow.data import DATAPOOLS, read_split, write_datapool
from grueflow.data.grue import ToTTo, table_row, wmt16_pair
from grueflow.data.sources import BadRowError, Unit
from grueflow.data.totto import TableError, column_spans, highlighted_subtable, linearise, linearise_full_table
from grueflow.io import DataError, MissingDataError, read_json
from grueflow.metrics import METRICS, MetricContext
from grueflow.params import parse

SPLITS = ("train", "val", "test")


def build(name, **kwargs):
    """The datapool ``name`` builds from ``kwargs``, whose samples' meta keys are checked against those its loader
    declares (``meta_keys``, which the task check reads): each one written is declared, and each one declared is
    written (``source_id`` only where the data has ids)."""
    loader = DATAPOOLS.get(name)
    args = parse(loader.Args, kwargs, "args")
    pool = loader.build(args)
    declared = set(loader.meta_keys(args))
    written = [set(sample.meta) for samples in pool.splits.values() for sample in samples]
    assert set().union(*written) <= declared, (name, set().union(*written) - declared)
    assert not written or declared - set().union(*written) <= {"source_id"}, (name, declared, written[0])
    return pool


def shared(relative):
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"shared data {path} is absent (set GRUEFLOW_SHARED_DATA to the shared/data folder)")
    return str(path)


def whole_slice(tmp_path, files, source):
    """data_files and source_splits that put the whole slice ``files[source]``, in order, in val and test, and a
    copy of it in train (train and test never read one file; the copy is another, its prompts all counted in
    stats.json's train_test_prompt_overlap)."""
    copy = tmp_path / f"train_copy{Path(files[source]).suffix}"
    shutil.copyfile(files[source], copy)
    return {"data_files": {**files, "train": str(copy)}, "source_splits": {"val": source, "test": source}}


def dialogue_root(tmp_path):
    """A DailyDialog data_root whose validation folder is a link to the shared validation slice and whose train
    folder is a copy of it, to see the whole slice, in order, in val and test."""
    root = tmp_path / "dailydialog"
    root.mkdir()
    os.symlink(shared("dailydialog/validation"), root / "validation")
    shutil.copytree(root / "validation", root / "train")
    return str(root)


def raw_rows(relative):
    """The rows of a JSONL slice in ../shared/data, read directly: expected values come from the data itself."""
    with open(shared(relative), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def digest(value):
    """A short sha256 of a value: pins what a seeded split picked without copying the data's text here."""
    text = value if isinstance(value, str) else json.dumps(value)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def sizes(pool):
    return [len(pool.splits[s]) for s in SPLITS]


# ---------------------------------------------------------------------------------------------
# CommonGen
# ---------------------------------------------------------------------------------------------


def test_commongen_v10_dev_slice_one_sample_per_concept_set(tmp_path):
    pool = build("common_gen", **whole_slice(tmp_path, {"validation": shared("commongen/commongen.dev.jsonl")},
                                             "validation"))
    test = pool.splits["test"]
    assert len(test) == 993 and sum(len(s.references) for s in test) == 4018  # the README says 4017; the file has 4018
    first, raw = test[0], raw_rows("commongen/commongen.dev.jsonl")[0]
    lemmas = [concept.rsplit("_", 1)[0] for concept in raw["concept_set"].split("#")]  # "x_N#y_V" -> [x, y]
    assert first.id == "test-0" and len(lemmas) == 3 and all(c.endswith(("_N", "_V")) for c in raw["concept_set"].split("#"))
    assert first.prompt == "generate a sentence with: " + " ".join(lemmas)
    assert first.references == tuple(raw["scene"]) and len(first.references) == 4
    assert first.meta == {"concepts": lemmas, "concept_set": raw["concept_set"]}
    assert all("_" not in c for s in test for c in s.meta["concepts"])
    assert pool.unlabelled[:2] == list(first.references[:2])  # unlabelled text: the training scenes


def test_commongen_seeded_resplit_cuts_by_concept_set():
    """993 concept sets, two of which (cut_V#hair_N#style_V and ..._N) give one prompt: 992 units, that pair kept in
    one split."""
    files = {"validation": shared("commongen/commongen.dev.jsonl")}
    pool = build("common_gen", data_files=files, split_fractions={"train": 0.8, "val": 0.1, "test": 0.1})
    assert sizes(pool) == [795, 99, 99]
    assert digest(pool.splits["test"][0].prompt) == "6e6547077d4c29fd"
    sets = [{s.meta["concept_set"] for s in pool.splits[split]} for split in SPLITS]
    assert sum(map(len, sets)) == 993 and not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    assert {"cut_V#hair_N#style_V", "cut_V#hair_N#style_N"} <= sets[0]
    prompts = [{s.prompt for s in pool.splits[split]} for split in SPLITS]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    counted = build("common_gen", data_files=files, split_counts={"train": 892, "val": 50, "test": 50}, seed=1)
    assert sizes(counted) == [892, 51, 50]
    assert digest(counted.splits["test"][0].prompt) == "b5f53414c8ba8cbc"
    again = build("common_gen", data_files=files, split_counts={"train": 892, "val": 50, "test": 50}, seed=1)
    assert again == counted
    with pytest.raises(DataError, match=r"ask for 993 units; the data has 992 \(993 before the rows that share a "
                                        r"prompt or a source_id were joined, to keep each in one split\)$"):
        build("common_gen", data_files=files, split_counts={"train": 893, "val": 50, "test": 50}, seed=1)


def test_commongen_hub_v11_rows_are_grouped_into_concept_sets(tmp_path):
    rows = [{"concept_set_idx": 0, "concepts": ["ski", "mountain", "skier"], "target": "Skier skis down the mountain"},
            {"concept_set_idx": 0, "concepts": ["ski", "mountain", "skier"],
             "target": "A skier is skiing down a mountain."},
            {"concept_set_idx": 1, "concepts": ["dog", "frisbee", "catch"], "target": "A dog catches a frisbee."}]
    hidden = [{"concept_set_idx": 2, "concepts": ["cat", "sleep", "sofa"], "target": ""}]
    files = {"train": write_jsonl(tmp_path / "train.jsonl", rows),
             "validation": write_jsonl(tmp_path / "val.jsonl", rows),
             "test": write_jsonl(tmp_path / "test.jsonl", hidden)}
    with pytest.raises(BadRowError, match=r"test\.jsonl line 1: no references.*skip_bad_rows"):
        build("common_gen", data_files=files)
    pool = build("common_gen", data_files=files, source_splits={"test": "validation"})
    assert sizes(pool) == [2, 2, 2]
    first = pool.splits["train"][0]
    assert first.prompt == "generate a sentence with: ski mountain skier"
    assert first.references == ("Skier skis down the mountain", "A skier is skiing down a mountain.")
    assert first.meta == {"concepts": ["ski", "mountain", "skier"], "concept_set": "ski#mountain#skier"}
    assert pool.unlabelled == [r["target"] for r in rows]


def test_commongen_v11_rows_of_one_set_in_another_order_are_one_set(tmp_path):
    """A v1.1 set written in another order was a second set: its targets two samples' references, and the set could
    land in train and test. It is one sample in the first row's order, in one split of a re-split."""
    rows = [{"concepts": ["dog", "frisbee", "catch"], "target": "A dog catches a frisbee."},
            {"concepts": ["catch", "dog", "frisbee"], "target": "The dog leaps to catch the frisbee."},
            {"concepts": ["ski", "mountain"], "target": "People ski down the mountain."}]
    files = {split: write_jsonl(tmp_path / f"{split}.jsonl", rows) for split in ("train", "validation", "test")}
    pool = build("common_gen", data_files=files)
    assert sizes(pool) == [2, 2, 2]
    first = pool.splits["test"][0]
    assert first.prompt == "generate a sentence with: dog frisbee catch"
    assert first.references == ("A dog catches a frisbee.", "The dog leaps to catch the frisbee.")
    assert first.meta == {"concepts": ["dog", "frisbee", "catch"], "concept_set": "dog#frisbee#catch"}
    many = [{"concepts": [f"c{i}", "dog", "run"][::1 - 2 * (j % 2)], "target": f"t{i}.{j}"}
            for i in range(10) for j in range(2)]
    cut = build("common_gen", data_files={"train": write_jsonl(tmp_path / "many.jsonl", many)},
                split_counts={"train": 6, "val": 2, "test": 2}, seed=0)
    assert sizes(cut) == [6, 2, 2] and all(len(s.references) == 2 for split in SPLITS for s in cut.splits[split])

def test_commongen_v10_rows_of_one_set_in_another_order_are_one_set(tmp_path):
    """A v1.0 ``concept_set`` written in another order was a second set: two samples with two prompts, and after a
    re-split the set could land in train and test. It is one sample with the first row's string and order."""
    rows = [{"concept_set": "catch_V#dog_N#frisbee_N", "scene": ["A dog catches a frisbee."]},
            {"concept_set": "dog_N#frisbee_N#catch_V", "scene": ["The dog caught the frisbee."]},
            {"concept_set": "mountain_N#ski_V", "scene": ["People ski down the mountain."]}]
    files = {split: write_jsonl(tmp_path / f"{split}.jsonl", rows) for split in ("train", "validation", "test")}
    pool = build("common_gen", data_files=files)
    assert sizes(pool) == [2, 2, 2]
    first = pool.splits["test"][0]
    assert first.prompt == "generate a sentence with: catch dog frisbee"
    assert first.references == ("A dog catches a frisbee.", "The dog caught the frisbee.")
    assert first.meta == {"concepts": ["catch", "dog", "frisbee"], "concept_set": "catch_V#dog_N#frisbee_N"}
    many = [{"concept_set": "#".join([f"c{i}_N", "dog_N", "run_V"][::1 - 2 * (j % 2)]), "scene": [f"t{i}.{j}"]}
            for i in range(10) for j in range(2)]
    cut = build("common_gen", data_files={"train": write_jsonl(tmp_path / "many.jsonl", many)},
                split_counts={"train": 6, "val": 2, "test": 2}, seed=0)
    assert sizes(cut) == [6, 2, 2] and all(len(s.references) == 2 for split in SPLITS for s in cut.splits[split])


def test_commongen_rl4lms_prompt_and_one_sample_per_target(tmp_path):
    """RL4LMs' GRUE config: prefix + concepts joined by concept_separator_token + concept_end_token ('.'), one
    sample per target with that target as its only reference; the split is still cut by concept set."""
    files = {"validation": shared("commongen/commongen.dev.jsonl")}
    args = {"data_files": files, "concept_end_token": ".", "sample_per": "target"}
    pool = build("common_gen", **{**args, **whole_slice(tmp_path, files, "validation")})
    test, raw = pool.splits["test"], raw_rows("commongen/commongen.dev.jsonl")
    assert len(test) == 4018 and all(len(s.references) == 1 for s in test)
    lemmas = [concept.rsplit("_", 1)[0] for concept in raw[0]["concept_set"].split("#")]
    assert [s.prompt for s in test[:5]] == ["generate a sentence with: " + " ".join(lemmas) + "."] * 4 + [
        "generate a sentence with: " + " ".join(c.rsplit("_", 1)[0] for c in raw[1]["concept_set"].split("#")) + "."]
    assert [s.references[0] for s in test[:4]] == raw[0]["scene"] and test[4].id == "test-4"
    dashed = build("common_gen", **whole_slice(tmp_path, files, "validation"), concept_separator_token=" - ")
    assert dashed.splits["test"][0].prompt == "generate a sentence with: " + " - ".join(lemmas)
    cut = build("common_gen", split_fractions={"train": 0.8, "val": 0.1, "test": 0.1}, **args)
    sets = [{s.meta["concept_set"] for s in cut.splits[split]} for split in SPLITS]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]) and sum(map(len, sets)) == 993
    with pytest.raises(ConfigError, match="concept_separator_token must not be empty"):
        build("common_gen", data_files=files, concept_separator_token="")
    with pytest.raises(ConfigError, match="sample_per.*'concept_set', 'target'|sample_per.*concept_set.*target"):
        build("common_gen", data_files=files, sample_per="row")


# ---------------------------------------------------------------------------------------------
# CNN/DailyMail
# ---------------------------------------------------------------------------------------------


def test_cnn_dailymail_summeval_slice_with_truncation_and_extra_references(tmp_path):
    files = {"test": shared("cnn_dailymail/summeval_cnndm_test100.jsonl")}
    pool = build("cnn_dailymail", **whole_slice(tmp_path, files, "test"), max_article_words=10)
    first, raw = pool.splits["test"][0], raw_rows("cnn_dailymail/summeval_cnndm_test100.jsonl")[0]
    assert len(pool.splits["test"]) == 100
    assert first.prompt == "Summarize: " + " ".join(raw["article"].split()[:10])
    assert first.references == (raw["highlights"],)
    assert first.meta == {"source_id": raw["id"]} and raw["id"].startswith("dm-test-")
    extra = build("cnn_dailymail", **whole_slice(tmp_path, files, "test"), extra_references=True)
    # SummEval lists 11 references, the first being the highlights: each is kept once
    assert [len(s.references) for s in extra.splits["test"]] == [11] * 100
    assert extra.splits["test"][0].references[0] == first.references[0]
    assert extra.splits["test"][0].prompt.startswith("Summarize: " + " ".join(raw["article"].split()[:9]))
    cut = build("cnn_dailymail", data_files=files, split_counts={"train": 80, "val": 10, "test": 10},
                max_article_chars=60, prefix="", suffix=" TL;DR:")
    assert sizes(cut) == [80, 10, 10]
    assert cut.splits["train"][0].prompt.endswith(" TL;DR:") and len(cut.splits["train"][0].prompt) == 60 + 7
    assert digest(cut.splits["train"][0].prompt) == "d4fc8de130578327"


def test_cnn_dailymail_hub_schema_and_bad_rows(tmp_path):
    rows = [{"article": "The cat sat on the mat all day .", "highlights": "Cat sits.\nMat holds.", "id": "a1"},
            {"article": "  ", "highlights": "Nothing.", "id": "a2"},
            {"article": "Rain fell on the town .", "highlights": "", "id": "a3"}]
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows) for name in ("train", "validation", "test")}
    with pytest.raises(BadRowError, match=r"train\.jsonl line 2: empty article; fix the data, or set skip_bad_rows"):
        build("cnn_dailymail", data_files=files)
    pool = build("cnn_dailymail", data_files=files, skip_bad_rows=True)
    assert sizes(pool) == [1, 1, 1]
    assert pool.splits["val"][0].prompt == "Summarize: The cat sat on the mat all day ."
    assert pool.splits["val"][0].references == ("Cat sits.\nMat holds.",)
    assert pool.stats == {"skipped_rows": {"train": 2, "val": 2, "test": 2}}
    stats = write_datapool(pool, tmp_path / "pool")
    assert stats["skipped_rows"] == {"train": 2, "val": 2, "test": 2}
    assert read_json(tmp_path / "pool" / "stats.json")["skipped_rows"]["test"] == 2
    assert read_split(tmp_path / "pool", "test") == pool.splits["test"]


# ---------------------------------------------------------------------------------------------
# ToTTo
# ---------------------------------------------------------------------------------------------


def test_totto_dev_sample_linearised_with_and_without_titles(tmp_path):
    files = {"validation": shared("totto/dev_sample.jsonl")}
    prompts = {}
    for titles in ("with", "without", "both"):
        pool = build("totto", **whole_slice(tmp_path, files, "validation"), titles=titles)
        assert len(pool.splits["test"]) == 5
        prompts[titles] = pool.splits["test"][0].prompt
    raw = raw_rows("totto/dev_sample.jsonl")[0]  # its highlighted cells sit under the table's first row of headers
    cells = [(raw["table"][r][c]["value"], raw["table"][0][c]["value"]) for r, c in raw["highlighted_cells"]]
    subtable = "<table> " + " ".join(f"<cell> {v} <col_header> {h} </col_header> </cell>" for v, h in cells) + " </table>"
    titles = (f"<page_title> {raw['table_page_title']} </page_title> "
              f"<section_title> {raw['table_section_title']} </section_title> ")
    assert prompts == {"with": titles + subtable, "without": subtable, "both": subtable + " " + titles + subtable}
    first = pool.splits["test"][0]
    assert first.references == tuple(a["final_sentence"] for a in raw["sentence_annotations"])
    assert len(first.references) == 3 and len(cells) == 4
    assert first.meta["table"] == [[h, v] for v, h in cells] + [["page_title", raw["table_page_title"]],
                                                               ["section_title", raw["table_section_title"]]]
    assert first.meta["highlighted_cells"] == raw["highlighted_cells"]
    assert first.meta["raw_table"] == raw["table"] and len(raw["table"]) == 17
    assert (first.meta["page_title"], first.meta["section_title"]) == (raw["table_page_title"], raw["table_section_title"])
    assert digest(pool.splits["test"][4].meta["table"][:2]) == "45f7d4343a065dcb"  # a two-row header, joined
    parent = METRICS.get("parent")
    score = parent.build(parse(parent.Args, {}, "args"), MetricContext())
    result = score([first.prompt], [first.references[0]], [first.references], [first.meta])
    assert result.per_sample["task/parent_f"][0] > 0.9


def test_totto_headers_follow_column_spans_and_row_headers():
    def cell(value, header=False, span=1):
        return {"value": value, "is_header": header, "column_span": span, "row_span": 1}

    table = [[cell("Team", True), cell("Stats", True, span=2)],
             [cell("Name", True), cell("Wins", True), cell("Losses", True)],
             [cell("Leeds", True), cell("10"), cell("3")]]
    subtable = highlighted_subtable(table, [[2, 2], [2, 0]])
    assert [tuple(c) for c in subtable] == [("3", ["Stats", "Losses"], ["Leeds"]), ("Leeds", ["Team", "Name"], [])]
    assert linearise(subtable[:1], "", None) == (
        "<table> <cell> 3 <col_header> Stats </col_header> <col_header> Losses </col_header> "
        "<row_header> Leeds </row_header> </cell> </table>")
    assert linearise_full_table(table, [[2, 2]], "Clubs", None) == (
        "<page_title> Clubs </page_title> <table> "
        "<row> <cell> Team </cell> <cell> Stats <row_header> Team </row_header> </cell> </row> "
        "<row> <cell> Name <col_header> Team </col_header> </cell> "
        "<cell> Wins <col_header> Stats </col_header> <row_header> Name </row_header> </cell> "
        "<cell> Losses <col_header> Stats </col_header> <row_header> Name </row_header> "
        "<row_header> Wins </row_header> </cell> </row> "
        "<row> <cell> Leeds <col_header> Team </col_header> <col_header> Name </col_header> </cell> "
        "<cell> 10 <col_header> Stats </col_header> <col_header> Wins </col_header> <row_header> Leeds </row_header> "
        "</cell> <highlighted_cell> 3 <col_header> Stats </col_header> <col_header> Losses </col_header> "
        "<row_header> Leeds </row_header> </highlighted_cell> </row> </table>")


def test_totto_full_table_representation_on_the_dev_sample(tmp_path):
    """RL4LMs' representation: fulltable: every row and cell, the highlighted ones marked; PARENT's table and
    the references are the subtable representation's."""
    common = whole_slice(tmp_path, {"validation": shared("totto/dev_sample.jsonl")}, "validation")
    full = build("totto", representation="fulltable", titles="without", **common).splits["test"]
    sub = build("totto", titles="without", **common).splits["test"]
    for raw, sample, subtable_sample in zip(raw_rows("totto/dev_sample.jsonl"), full, sub):
        prompt = sample.prompt
        assert prompt.count("<highlighted_cell>") == len(raw["highlighted_cells"])
        assert prompt.count("<row>") == len(raw["table"])
        assert prompt.count("<cell>") + prompt.count("<highlighted_cell>") == sum(map(len, raw["table"]))
        assert prompt == linearise_full_table(raw["table"], raw["highlighted_cells"], None, None)
        assert (sample.references, sample.meta) == (subtable_sample.references, subtable_sample.meta)
    both = build("totto", representation="fulltable", **common).splits["test"][0].prompt
    raw = raw_rows("totto/dev_sample.jsonl")[0]
    assert both == full[0].prompt + " " + linearise_full_table(raw["table"], raw["highlighted_cells"],
                                                               raw["table_page_title"], raw["table_section_title"])
    with pytest.raises(ConfigError, match="representation"):
        build("totto", representation="table", **common)


def totto_cell(value, header=False, **spans):
    return {"value": value, "is_header": header, "column_span": 1, "row_span": 1, **spans}


def totto_row(**changes):
    """A two-row ToTTo example in the official schema, with ``changes`` set (``cell_01`` replaces table[0][1]'s
    fields)."""
    table = [[totto_cell("Year", True), totto_cell("Show", True)], [totto_cell("2001"), totto_cell("Rent")]]
    for key in [k for k in changes if k.startswith("cell_")]:
        r, c = int(key[5]), int(key[6])
        table[r][c] = {**table[r][c], **changes.pop(key)}
    return {"table": table, "highlighted_cells": [[1, 0], [1, 1]], "table_page_title": "Ann Lee",
            "table_section_title": "Stage", "table_section_text": "", "example_id": "7",
            "sentence_annotations": [{"final_sentence": "In 2001 Ann Lee was in Rent."}], **changes}


def totto_rows(row):
    return table_row(Unit(row, "dev.jsonl row 4", "validation-3"), parse(ToTTo.Args, {"path": "json",
                     "data_files": {"validation": "dev.jsonl"}}, "args"))


@pytest.mark.parametrize("changes, expect", [
    ({"highlighted_cells": [[-1, -1]]}, "highlighted_cells[0] is [-1, -1] (list), not a [row, column] pair of integers "
                                        ">= 0"),
    ({"highlighted_cells": [[1, 0], [1, -1]]}, "highlighted_cells[1] is [1, -1] (list), not a [row, column] pair"),
    ({"highlighted_cells": [["0", "1"]]}, "highlighted_cells[0] is ['0', '1'] (list), not a [row, column] pair"),
    ({"highlighted_cells": [[0.0, 1.0]]}, "highlighted_cells[0] is [0.0, 1.0] (list), not a [row, column] pair"),
    ({"highlighted_cells": [[True, 0]]}, "highlighted_cells[0] is [True, 0] (list), not a [row, column] pair"),
    ({"highlighted_cells": [[1]]}, "highlighted_cells[0] is [1] (list), not a [row, column] pair"),
    ({"highlighted_cells": [1, 0]}, "highlighted_cells[0] is 1 (int), not a [row, column] pair"),
    ({"highlighted_cells": "1,0"}, "highlighted_cells is '1,0' (str), not a list of [row, column] pairs"),
    ({"highlighted_cells": [[2, 0]]}, "highlighted_cells[0] [2, 0] is outside the table: the table has 2 rows "
                                      "(indices count from 0)"),
    ({"highlighted_cells": [[1, 2]]}, "highlighted_cells[0] [1, 2] is outside the table: row 1 has 2 cells"),
    ({"cell_01": {"column_span": None}}, "table[0][1].column_span is None (NoneType), not an integer >= 1"),
    ({"cell_01": {"column_span": -3}}, "table[0][1].column_span is -3 (int), not an integer >= 1"),
    ({"cell_00": {"column_span": 0}}, "table[0][0].column_span is 0 (int), not an integer >= 1"),
    ({"cell_00": {"column_span": True}}, "table[0][0].column_span is True (bool), not an integer >= 1"),
    ({"cell_10": {"row_span": 0}}, "table[1][0].row_span is 0 (int), not an integer >= 1"),
    ({"cell_11": {"value": None}}, "table[1][1].value is None (NoneType), not text"),
    ({"cell_00": {"value": 2001}}, "table[0][0].value is 2001 (int), not text"),
    ({"cell_00": {"is_header": "yes"}}, "table[0][0].is_header is 'yes' (str), not true or false"),
    ({"table": [[totto_cell("Year")], "Rent"]}, "table[1] is 'Rent' (str), not a list of cells"),
    ({"table": None}, "table is None (NoneType), not a list of rows"),
    ({"sentence_annotations": [{"final_sentence": 7}]}, "sentence_annotations[0].final_sentence is 7 (int), not text"),
    ({"sentence_annotations": ["In 2001 Ann Lee was in Rent."]}, "sentence_annotations[0] is 'In 2001 Ann Lee was in "
                                                                 "Rent.' (str), not an annotation {final_sentence, "),
    ({"sentence_annotations": {"final_sentence": ["ok", 7.5]}}, "sentence_annotations.final_sentence[1] is 7.5 "
                                                                 "(float), not text"),
    ({"sentence_annotations": "In 2001 Ann Lee was in Rent."}, "sentence_annotations is 'In 2001 Ann Lee was in "
                                                               "Rent.' (str), not a list of annotations"),
    ({"table_section_title": 5}, "table_section_title is 5 (int), not text"),
    ({"table_page_title": ["Ann", "Lee"]}, "table_page_title is ['Ann', 'Lee'] (list), not text"),
    ({"table_section_text": 5}, "table_section_text is 5 (int), not text"),
])
def test_totto_fields_of_the_wrong_shape_are_bad_rows_naming_the_row_and_field(changes, expect):
    """Python's negative indices would pick the last row and cell; a string or float index, a null span or value,
    a sentence that is a number were TypeErrors and AttributeErrors."""
    with pytest.raises(BadRowError) as err:
        totto_rows(totto_row(**changes))
    assert str(err.value).startswith(f"dev.jsonl row 4: {expect}")


def test_totto_helpers_refuse_cells_python_would_index_from_the_end():
    table = totto_row()["table"]
    for cells in ([[-1, -1]], [[1, -2]]):
        with pytest.raises(TableError, match=r"^highlighted_cells\[0\] is \[-?\d, -\d\] \(list\), not a \[row, "
                                             r"column\] pair"):
            highlighted_subtable(table, cells)
        with pytest.raises(TableError, match="not a \\[row, column\\] pair of integers >= 0"):
            linearise_full_table(table, cells, None, None)
    with pytest.raises(TableError, match=r"^table\[0\]\[1\]\.column_span is -3 \(int\), not an integer >= 1$"):
        column_spans([[totto_cell("Year"), totto_cell("Show", column_span=-3)]])
    assert column_spans([[{"value": "Year", "is_header": True}, totto_cell("Show", column_span=2)]]) == [[(0, 1),
                                                                                                          (1, 3)]]


def test_totto_a_cell_highlighted_twice_is_written_once_where_first_named():
    """Highlighted cells are a set of cells: the subtable writes each once, as the full table marks each once."""
    row = totto_row(highlighted_cells=[[1, 1], [1, 0], [1, 1], [1, 0]])
    sample = totto_rows(row)
    once = totto_rows(totto_row(highlighted_cells=[[1, 1], [1, 0]]))
    assert sample == once
    assert sample.meta["highlighted_cells"] == [[1, 1], [1, 0]]
    assert sample.prompt.count("<cell> Rent") == 2  # once without titles, once with them (titles: both)
    assert sample.meta["table"] == [["Show", "Rent"], ["Year", "2001"], ["page_title", "Ann Lee"],
                                    ["section_title", "Stage"]]
    assert [c.value for c in highlighted_subtable(row["table"], row["highlighted_cells"])] == ["Rent", "2001"]
    full = linearise_full_table(row["table"], row["highlighted_cells"], None, None)
    assert full.count("<highlighted_cell>") == 2


def test_totto_bad_rows_are_skipped_and_counted_through_the_loader(tmp_path):
    """The official jsonl read through datasets: a row with negative indices fails naming file, row and field, or
    is dropped and counted under skip_bad_rows."""
    good = [totto_row(example_id=str(i), table_page_title=f"Ann Lee {i}") for i in range(4)]
    bad = totto_row(highlighted_cells=[[-1, -1]])
    path = write_jsonl(tmp_path / "dev.jsonl", good[:2] + [bad] + good[2:])
    counts = {"split_counts": {"train": 3, "val": 1, "test": 1}}
    with pytest.raises(BadRowError, match=r"dev\.jsonl line 3: highlighted_cells\[0\] is \[-1, -1\] \(list\), not a "
                                          r"\[row, column\] pair of integers >= 0; fix the data, or set skip_bad_rows"):
        build("totto", data_files={"validation": path}, **counts)
    pool = build("totto", data_files={"validation": path}, skip_bad_rows=True, **counts)
    assert sum(sizes(pool)) == 4 and sum(pool.stats["skipped_rows"].values()) == 1
    assert {s.meta["page_title"] for split in SPLITS for s in pool.splits[split]} == {f"Ann Lee {i}" for i in range(4)}


# ---------------------------------------------------------------------------------------------
# NarrativeQA
# ---------------------------------------------------------------------------------------------


def story(doc_id, summary, question, answers):
    return {"document": {"id": doc_id, "kind": "gutenberg", "summary": {"text": summary, "title": doc_id}},
            "question": {"text": question}, "answers": [{"text": a} for a in answers]}


NARRATIVE_ROWS = [story("d1", "Anna lives in Paris. She paints.", "Where does Anna live?", ["In Paris", " Paris "]),
                  story("d1", "Anna lives in Paris. She paints.", "What does Anna do?", ["She paints", "paints"]),
                  story("d2", "Bob sails to Oslo.", "Where does Bob sail?", ["to Oslo", "Oslo"]),
                  story("d3", "Cleo bakes bread.", "Who bakes?", ["Cleo", "Cleo"])]


def test_narrative_qa_hub_schema_fixture(tmp_path):
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", NARRATIVE_ROWS) for name in ("train", "validation", "test")}
    pool = build("narrative_qa", data_files=files)
    assert sizes(pool) == [4, 4, 4]
    first = pool.splits["test"][0]
    assert first.prompt == "where does anna live? \\n anna lives in paris. she paints."
    assert first.references == ("in paris", "paris")
    assert first.meta == {"document_id": "d1"}
    cased = build("narrative_qa", data_files=files, lowercase=False, template="question: {question} context: {context}")
    assert cased.splits["val"][1].prompt == "question: What does Anna do? context: Anna lives in Paris. She paints."
    assert cased.splits["val"][1].references == ("She paints", "paints")


def test_narrative_qa_resplit_keeps_each_story_in_one_split(tmp_path):
    files = {"validation": write_jsonl(tmp_path / "dev.jsonl", NARRATIVE_ROWS)}
    pool = build("narrative_qa", data_files=files, split_counts={"train": 1, "val": 1, "test": 1}, seed=3)
    stories = [{s.meta["document_id"] for s in pool.splits[split]} for split in SPLITS]
    assert all(len(ids) == 1 for ids in stories) and set.union(*stories) == {"d1", "d2", "d3"}
    assert sum(sizes(pool)) == 4
    with pytest.raises(ConfigError, match=r"placeholders are \{question\} and \{context\}"):
        build("narrative_qa", data_files=files, template="{query} {context}")


# ---------------------------------------------------------------------------------------------
# IWSLT 2017
# ---------------------------------------------------------------------------------------------


def test_iwslt2017_tst2016_both_directions(tmp_path):
    files = {"test": shared("iwslt2017/tst2016.en-de.jsonl")}
    pool = build("iwslt2017", **whole_slice(tmp_path, files, "test"))
    assert sizes(pool) == [1133] * 3
    first, raw = pool.splits["test"][0], raw_rows("iwslt2017/tst2016.en-de.jsonl")[0]["translation"]
    assert (first.prompt, first.references, first.meta) == (f"translate English to German: {raw['en']}", (raw["de"],), {})
    back = build("iwslt2017", **whole_slice(tmp_path, files, "test"), source_language="de", target_language="en")
    assert (back.splits["test"][0].prompt, back.splits["test"][0].references) == (
        f"translate German to English: {raw['de']}", (raw["en"],))
    # 1133 segments, 1120 units: a sentence said in several talks ("Thank you.") is one unit, in one split
    bare = build("iwslt2017", data_files=files, split_counts={"train": 987, "val": 100, "test": 33}, prefix="")
    assert sizes(bare) == [990, 110, 33] and not bare.splits["test"][0].prompt.startswith("translate")
    prompts = [{s.prompt for s in bare.splits[split]} for split in SPLITS]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    with pytest.raises(ValueError, match=r"the translation has the languages \['de', 'en'\]; source_language 'fr'"):
        build("iwslt2017", **whole_slice(tmp_path, files, "test"), source_language="fr")


def test_the_wmt_pools_read_the_translation_schema_with_rl4lms_prompts(tmp_path):
    """wmt16, wmt14_processed_en_de and wmt16newsonly are the translation loader with RL4LMs' sources: the real
    tst2016 rows stand in for their hub splits (the hub is not reachable here)."""
    rows = raw_rows("iwslt2017/tst2016.en-de.jsonl")
    files = {"test": shared("iwslt2017/tst2016.en-de.jsonl")}
    for pool_id in ("wmt16", "wmt14_processed_en_de"):
        pool = build(pool_id, **whole_slice(tmp_path, files, "test"), prefix="", suffix=" =>")
        assert pool.splits["test"][0].prompt == rows[0]["translation"]["en"] + " =>"
        assert pool.splits["test"][0].references == (rows[0]["translation"]["de"],)
    wmt16 = DATAPOOLS.get("wmt16")
    assert parse(wmt16.Args, {}, "args").path == "wmt16"
    pairs = {(src, tgt): wmt16_pair(parse(wmt16.Args, {"source_language": src, "target_language": tgt}, "args"))
             for src, tgt in (("en", "de"), ("de", "en"), ("ro", "en"))}
    assert pairs == {("en", "de"): "de-en", ("de", "en"): "de-en", ("ro", "en"): "ro-en"}
    with pytest.raises(ConfigError, match=r"wmt16 has no fr-de pair in either order; its pairs: cs-en, de-en"):
        parse(wmt16.Args, {"source_language": "fr"}, "args")
    assert parse(wmt16.Args, {"source_language": "fr", "path": str(tmp_path)}, "args").name is None  # local: no hub pair
    assert parse(DATAPOOLS.get("wmt14_processed_en_de").Args, {}, "args").path == "stas/wmt14-en-de-pre-processed"
    # wmt16newsonly: train from one source (news_commentary), val and test from another (wmt16)
    news, wmt = tmp_path / "news", tmp_path / "wmt"
    news.mkdir(), wmt.mkdir()
    write_jsonl(news / "train.jsonl", rows[:30])
    write_jsonl(news / "test.jsonl", rows[30:40])  # never read: only news' train split is
    for split, part in (("train", rows[100:200]), ("validation", rows[40:50]), ("test", rows[50:70])):
        write_jsonl(wmt / f"{split}.jsonl", part)
    only = build("wmt16newsonly", train_path=str(news), path=str(wmt))
    assert sizes(only) == [30, 10, 20]
    assert [s.references[0] for s in only.splits["train"]] == [r["translation"]["de"] for r in rows[:30]]
    assert only.splits["test"][0].prompt == "translate English to German: " + rows[50]["translation"]["en"]
    (wmt / "train.jsonl").rename(wmt / "other.jsonl")
    with pytest.raises(DataError, match=r"train_path '.*wmt' has no train split, which wmt16newsonly trains on"):
        build("wmt16newsonly", train_path=str(wmt), path=str(wmt))



@pytest.mark.parametrize("train_path", ["json", ""])
def test_a_wmt16newsonly_train_path_that_names_no_dataset_is_refused_at_parse(train_path):
    """train_path: json (a builder) without data_files passed the suite check, then failed the stage with a
    ValueError traceback that named path, not train_path."""
    with pytest.raises(ConfigError, match=re.escape(f"train_path {train_path!r} names no dataset to train on: give a "
                                                    f"hub dataset id (default 'news_commentary') or a local folder, "
                                                    f"or data_files for every split")):
        parse(DATAPOOLS.get("wmt16newsonly").Args, {"path": "data/wmt", "train_path": train_path}, "args")

# ---------------------------------------------------------------------------------------------
# CRD3
# ---------------------------------------------------------------------------------------------


def write_crd3(root, episodes, splits):
    """The CRD3 repository's layout under root: episode lists per split and one JSON file per episode."""
    (root / "data" / "aligned data").mkdir(parents=True)
    (root / "data" / "cleaned data").mkdir(parents=True)
    for name, turns in episodes.items():
        (root / "data" / "cleaned data" / f"{name}.json").write_text(json.dumps({"TURNS": turns}), encoding="utf-8")
    for split, names in splits.items():
        (root / "data" / "aligned data" / f"{split}_files").write_text("\n".join(names) + "\n", encoding="utf-8")
    return str(root)


def turn(names, *utterances):
    return {"NAMES": names, "UTTERANCES": list(utterances), "NUMBER": 0}


def test_crd3_turns_with_rl4lms_context_and_speaker_prompt(tmp_path):
    episode = [turn(["MATT"], "Welcome back.", "Let's go."), turn(["LAURA"], "Hi!"),
               turn(["SAM", "TRAVIS"], "We roll.", "Initiative?"), turn(["MATT"], "Yes."), turn(["LIAM"], "Ha.")]
    other = [turn(["A"], "one"), turn(["B"], "two"), turn(["C"], "three")]
    root = write_crd3(tmp_path / "CRD3-master", {"C1E001": episode, "C1E002": other, "C1E003": other},
                      {"train": ["C1E001"], "val": ["C1E002"], "test": ["C1E003"]})
    pool = build("crd3", data_root=root, max_context_size=2)
    assert sizes(pool) == [3, 1, 1]
    first, last = pool.splits["train"][0], pool.splits["train"][2]
    # from the third turn on; the last max_context_size turns, then the speaker (the first of NAMES)
    assert first.prompt == "MATT: Welcome back. Let's go.\nLAURA: Hi!\nSAM: "
    assert first.references == ("We roll. Initiative?",)
    assert first.meta == {"episode": "C1E001", "turn": 2, "speaker": "SAM"}
    assert last.prompt == "SAM: We roll. Initiative?\nMATT: Yes.\nLIAM: " and last.references == ("Ha.",)
    assert pool.splits["test"][0].prompt == "A: one\nB: two\nC: "
    assert build("crd3", data_root=root).splits["train"][2].prompt.startswith("MATT: Welcome back.")  # default 5
    with pytest.raises(ConfigError, match="give data_root, the CRD3-master folder"):
        parse(DatapoolConfig, {"id": "crd3", "args": {}}, "datapool")
    with pytest.raises(ConfigError, match="max_context_size must be >= 1, got 0"):
        parse(DatapoolConfig, {"id": "crd3", "args": {"data_root": root, "max_context_size": 0}}, "datapool")
    broken = write_crd3(tmp_path / "broken", {"E": [turn([], "x")] * 3}, {"train": ["E"], "val": ["E"], "test": ["E"]})
    with pytest.raises(BadRowError, match=r"E\.json turn 1: a turn needs NAMES"):
        build("crd3", data_root=broken)
    # skip_bad_rows drops the bad turn alone (counted); the episode's other turns stay samples
    one_bad = [*episode[:3], turn([], "lost"), *episode[3:]]
    mixed = write_crd3(tmp_path / "mixed", {"E": one_bad, "F": other}, {"train": ["E"], "val": ["F"], "test": ["F"]})
    kept = build("crd3", data_root=mixed, max_context_size=2, skip_bad_rows=True)
    assert sizes(kept) == [3, 1, 1] and kept.stats["skipped_rows"] == {"train": 1, "val": 0, "test": 0}
    assert [s.prompt for s in kept.splits["train"]] == [s.prompt for s in pool.splits["train"]]
    (tmp_path / "mixed" / "data" / "cleaned data" / "F.json").write_text('{"TURNS": {"a": 1}}')
    with pytest.raises(DataError, match=r"F\.json: TURNS is \{'a': 1\} \(dict\); a CRD3 episode's TURNS is a list"):
        build("crd3", data_root=mixed, skip_bad_rows=True)
    (tmp_path / "mixed" / "data" / "aligned data" / "val_files").unlink()
    # train and test lists are there: a re-split would pool them, so it is not offered
    with pytest.raises(MissingDataError, match=r"data/aligned data has no val_files; give each split's episode list, "
                                               r"or feed a split from another with source_splits \(e\.g\. "
                                               r"\{val: train\}\)$"):
        build("crd3", data_root=mixed, skip_bad_rows=True)
    (tmp_path / "missing" / "data" / "aligned data").mkdir(parents=True)
    (tmp_path / "missing" / "data" / "aligned data" / "train_files").write_text("C9\n")
    with pytest.raises(MissingDataError, match=r"train_files names episode C9, but .*C9\.json does not exist"):
        build("crd3", data_root=str(tmp_path / "missing"))


# ---------------------------------------------------------------------------------------------
# DailyDialog
# ---------------------------------------------------------------------------------------------


def test_daily_dialog_original_files_acts_align_with_turns(tmp_path):
    root = dialogue_root(tmp_path)
    acts = [[int(a) for a in line.split()] for line in open(f"{root}/validation/dialogues_act.txt", encoding="utf-8")]
    in_test = {"source_splits": {"val": "validation", "test": "validation"}}
    pool = build("daily_dialog", data_root=root, **in_test, min_context_turns=1)
    test = pool.splits["test"]
    assert len(acts) == 1000 and sum(map(len, acts)) == 8069
    assert len(test) == 8069 - 1000  # every turn but each dialogue's first
    assert len({s.meta["dialogue_id"] for s in test}) == 1000
    assert all(s.meta["intent"] == acts[int(s.meta["dialogue_id"].split("-")[1])][s.meta["turn"]] - 1 for s in test)
    with open(f"{root}/validation/dialogues.txt", encoding="utf-8") as handle:
        turns = [t.strip() for t in handle.readline().split("__eou__") if t.strip()]  # the first dialogue
    assert test[0].prompt == f"{turns[0]} <EOU>"
    assert test[0].references == (turns[1],)
    assert test[0].meta == {"intent": 0, "intent_label": "inform", "emotion": 0, "emotion_label": "no emotion",
                            "dialogue_id": "validation-0", "turn": 1}
    rl4lms = build("daily_dialog", data_root=root, **in_test)
    assert len(rl4lms.splits["test"]) == 3388  # turns with 5 turns before them, as RL4LMs
    assert rl4lms.splits["test"][0].prompt == "".join(f"{turn} <EOU> " for turn in turns[:5]).rstrip()
    assert rl4lms.splits["test"][0].references == (turns[5],)
    assert rl4lms.splits["test"][0].meta["intent_label"] == "question"


def test_daily_dialog_resplit_cuts_by_dialogue():
    """With one or two turns of context, dialogues share prompts ("Hello . <EOU>"): those are one unit (962 of
    1000 dialogues), so no prompt is in two splits."""
    pool = build("daily_dialog", data_root=shared("dailydialog/validation"), context_turns=2, min_context_turns=1,
                 split_counts={"train": 762, "val": 100, "test": 100})
    assert sizes(pool) == [5532, 708, 829]
    dialogues = [{s.meta["dialogue_id"] for s in pool.splits[split]} for split in SPLITS]
    assert list(map(len, dialogues)) == [796, 102, 102] and len(set.union(*dialogues)) == 1000
    prompts = [{s.prompt for s in pool.splits[split]} for split in SPLITS]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    assert pool.splits["val"][0].prompt.endswith(" <EOU>")
    assert digest(pool.splits["val"][0].prompt) == "076b3620a4fd739a"


def test_daily_dialog_hub_schema_and_misaligned_rows(tmp_path):
    rows = [{"dialog": ["Hi . ", "Hello , how are you ? ", "Fine , thanks . "], "act": [1, 2, 1], "emotion": [0, 0, 4]},
            {"dialog": ["Only one turn", "and a second"], "act": [1], "emotion": [0, 0]}]
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows) for name in ("train", "validation", "test")}
    with pytest.raises(BadRowError, match=r"train\.jsonl line 2: 2 turns but 1 acts and 2 emotions"):
        build("daily_dialog", data_files=files, min_context_turns=1)
    pool = build("daily_dialog", data_files=files, min_context_turns=1, context_turns=1, skip_bad_rows=True)
    assert sizes(pool) == [2, 2, 2] and pool.stats["skipped_rows"] == {"train": 1, "val": 1, "test": 1}
    second = pool.splits["test"][1]
    assert (second.prompt, second.references) == ("Hello , how are you ? <EOU>", ("Fine , thanks .",))
    assert second.meta == {"intent": 0, "intent_label": "inform", "emotion": 4, "emotion_label": "happiness",
                           "dialogue_id": "test-0", "turn": 2}
    with pytest.raises(FileNotFoundError, match=r"has no DailyDialog files: expected <split>/dialogues_<split>\.txt"):
        build("daily_dialog", data_root=str(tmp_path))


def test_daily_dialog_label_that_is_not_an_integer_names_its_file_and_line(tmp_path):
    """An act label ``x`` in the original files was a ValueError traceback (invalid literal for int())."""
    for split in ("train", "validation", "test"):
        (tmp_path / split).mkdir()
        (tmp_path / split / f"dialogues_{split}.txt").write_text("hi there __eou__ hello __eou__ how are you __eou__\n")
        (tmp_path / split / f"dialogues_act_{split}.txt").write_text("\n1 2 x\n" if split == "train" else "1 2 3\n")
        (tmp_path / split / f"dialogues_emotion_{split}.txt").write_text("0 0 0\n" if split == "train" else "0 0 1.5\n")
    with pytest.raises(DataError) as err:
        build("daily_dialog", data_root=str(tmp_path), context_turns=1)
    assert str(err.value) == (f"{tmp_path / 'train' / 'dialogues_act_train.txt'} line 2: act 'x' is not an integer; "
                              f"each line of a DailyDialog act file holds one integer label a turn, separated by "
                              f"spaces")
    (tmp_path / "train" / "dialogues_act_train.txt").write_text("1 2 3\n")
    with pytest.raises(DataError, match=r"dialogues_emotion_validation\.txt line 1: emotion '1\.5' is not an integer"):
        build("daily_dialog", data_root=str(tmp_path), context_turns=1)


# ---------------------------------------------------------------------------------------------
# custom files, argument checks
# ---------------------------------------------------------------------------------------------


def test_custom_jsonl_and_csv_with_a_field_mapping(tmp_path):
    rows = [{"question": "2 + 2 ?", "answers": ["4", "four"], "id": 7},
            {"question": "Capital of France ?", "answers": "Paris", "id": 8}]
    path = write_jsonl(tmp_path / "qa.jsonl", rows)
    fields = {"prompt": "question", "references": "answers", "meta": ["id"]}
    pool = build("custom", **whole_slice(tmp_path, {"test": path}, "test"), fields=fields, prefix="Q: ")
    assert [(s.prompt, s.references, s.meta) for s in pool.splits["val"]] == [
        ("Q: 2 + 2 ?", ("4", "four"), {"id": 7}), ("Q: Capital of France ?", ("Paris",), {"id": 8})]
    with open(tmp_path / "qa.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["question", "answer"], ["Who wrote Hamlet ?", "Shakespeare"], ["1 + 1 ?", "2"]])
    table = build("custom", **whole_slice(tmp_path, {"test": str(tmp_path / "qa.csv")}, "test"),
                  fields={"prompt": "question", "references": "answer"})
    assert [(s.prompt, s.references) for s in table.splits["train"]] == [
        ("Who wrote Hamlet ?", ("Shakespeare",)), ("1 + 1 ?", ("2",))]
    with pytest.raises(ValueError, match=r"qa\.jsonl has the columns \['answers', 'id', 'question'\]; the custom "
                                         r"datapool needs query, answers, id"):
        build("custom", data_files={"test": path}, fields={"prompt": "query", "references": "answers", "meta": ["id"]})


def test_a_custom_resplit_keeps_the_rows_of_one_prompt_in_one_split(tmp_path):
    """One reference per row, prompts repeated (as many preference or QA dumps are): a re-split cuts by prompt,
    so no test prompt is trained on; every row stays its own sample. Unique prompts split as they did when the
    cut was by row (the same seeded shuffle: question 9 and 6 in test)."""
    rows = [{"q": f"question {i % 7}", "a": f"answer {i}"} for i in range(42)]  # 7 prompts, 6 rows each
    path = write_jsonl(tmp_path / "dump.jsonl", rows)
    fields = {"prompt": "q", "references": "a"}
    pool = build("custom", data_files={"train": path}, fields=fields, split_counts={"train": 5, "val": 1, "test": 1})
    prompts = [{s.prompt for s in pool.splits[split]} for split in SPLITS]
    assert sizes(pool) == [30, 6, 6] and [len(p) for p in prompts] == [5, 1, 1]
    assert not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
    assert sorted(r for s in pool.splits["test"] for r in s.references) == sorted(
        r["a"] for r in rows if r["q"] in prompts[2])
    unique = write_jsonl(tmp_path / "unique.jsonl", [{"q": f"question {i}", "a": f"answer {i}"} for i in range(10)])
    cut = build("custom", data_files={"train": unique}, fields=fields, split_counts={"train": 6, "val": 2, "test": 2})
    assert sizes(cut) == [6, 2, 2] and [s.prompt for s in cut.splits["test"]] == ["question 9", "question 6"]


def article(i):
    return {"id": f"cnn-{i}", "article": f"Story {i} : the council met on day {i} .", "highlights": f"Met on {i}."}


@pytest.mark.parametrize("loader, row", [
    ("cnn_dailymail", article),
    ("iwslt2017", lambda i: {"translation": {"en": f"Hello {i} .", "de": f"Hallo {i} ."}}),
    ("totto", lambda i: totto_row(table_page_title=f"Ann Lee {i}", example_id=str(i))),
    ("narrative_qa", lambda i: nqa_row(i, ["Alice"])),
])
def test_every_loader_resplit_keeps_rows_that_share_a_prompt_in_one_split(tmp_path, caplog, loader, row):
    """Every row written twice (a file appended to itself): each pair is one unit, so no test prompt is trained
    on, as the custom loader's re-split does; both rows stay samples."""
    path = write_jsonl(tmp_path / "rows.jsonl", [row(i) for i in range(12)] * 2)
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        pool = build(loader, data_files={"validation": path}, split_counts={"train": 8, "val": 2, "test": 2})
    prompts = [[s.prompt for s in pool.splits[split]] for split in SPLITS]
    assert sizes(pool) == [16, 4, 4] and all(p.count(q) == 2 for p in prompts for q in p)
    assert not (set(prompts[0]) & set(prompts[1]) or set(prompts[0]) & set(prompts[2]) or
                set(prompts[1]) & set(prompts[2]))
    assert write_datapool(pool, tmp_path / "pool")["train_test_prompt_overlap"] == 0
    joined = [m for m in caplog.messages if m.startswith("the re-split joined 24 source units into 12 groups, so "
                                                         "that rows that share a prompt or a source_id stay in one "
                                                         "split; the largest holds 2 units (prompt ")]
    assert len(joined) == (loader != "narrative_qa")  # its units are stories, by document id already
    assert all(m.endswith("the split sizes count groups, so the splits hold train 16 (8), val 4 (2), test 4 (2) "
                          "units (groups)") for m in joined)
    with pytest.raises(DataError, match=r"^split_counts \{'train': 12, 'val': 6, 'test': 6\} ask for 24 units; the "
                                        r"data has 12"):
        build(loader, data_files={"validation": path}, split_counts={"train": 12, "val": 6, "test": 6})


def test_rows_that_share_a_source_id_stay_in_one_split_and_are_counted_once_in_a_warning(tmp_path, caplog):
    """Two versions of one article (one id, the text edited): kept, each a sample, in one split; one warning."""
    rows = [article(i) for i in range(10)] + [{**article(3), "article": "Story 3 : the council met again ."}]
    path = write_jsonl(tmp_path / "cnn.jsonl", rows)
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        pool = build("cnn_dailymail", data_files={"validation": path}, split_counts={"train": 6, "val": 2, "test": 2})
    where = [split for split in SPLITS for s in pool.splits[split] if s.meta["source_id"] == "cnn-3"]
    assert sizes(pool) == [7, 2, 2] or sizes(pool) == [6, 3, 2] or sizes(pool) == [6, 2, 3]
    assert len(where) == 2 and len(set(where)) == 1
    groups = {split: len({s.meta["source_id"] for s in pool.splits[split]}) for split in SPLITS}
    held = ", ".join(f"{split} {len(pool.splits[split])} ({groups[split]})" for split in SPLITS)
    assert caplog.messages == [
        "the re-split joined 11 source units into 10 groups, so that rows that share a prompt or a source_id stay "
        "in one split; the largest holds 2 units (prompt 'Summarize: Story 3 : the council met on day 3 .'); the "
        f"split sizes count groups, so the splits hold {held} units (groups)",
        f"2 samples share their source_id with another sample of their split ({where[0]} 2; 1 ids, e.g. 'cnn-3'); "
        "each is kept as its own sample"]
    caplog.clear()
    train, test = (write_jsonl(tmp_path / f"{name}.jsonl", [article(i) for i in range(3)]) for name in ("tr", "te"))
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        build("cnn_dailymail", data_files={"train": train, "validation": test, "test": test})
    assert caplog.messages == []  # ids shared across splits: stats.json's train_test_prompt_overlap counts those


def test_an_n_above_what_a_split_holds_keeps_it_all_and_says_so(tmp_path, caplog):
    """RL4LMs configs set a large n to mean all: kept, with one line per split that holds fewer."""
    path = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS)
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        pool = build("custom", data_files={"train": path}, split_counts={"train": 4, "val": 1, "test": 1},
                     n_train=5000, n_val=1, n_test=1000)
    assert sizes(pool) == [4, 1, 1]
    assert caplog.messages == ["n_train = 5000 asks for more samples than the train split holds: kept all 4",
                               "n_test = 1000 asks for more samples than the test split holds: kept all 1"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        assert sizes(build("custom", data_files={"train": path}, split_counts={"train": 4, "val": 1, "test": 1},
                           n_train=2)) == [2, 1, 1]
    assert caplog.messages == []


def test_a_custom_resplit_names_a_blank_prompt_before_it_counts_units(tmp_path):
    """Blank prompts all strip to "": counted as one unit, they gave "ask for 8 units; the data has 1"."""
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"prompt": "   ", "references": [f"r{i}"]} for i in range(8)])
    counts = {"split_counts": {"train": 4, "val": 2, "test": 2}}
    with pytest.raises(BadRowError, match=r"^.*blank\.jsonl line 1: empty prompt \(prompt\); fix the data, or set "
                                          r"skip_bad_rows: true"):
        build("custom", data_files={"train": blank}, prefix="Q: ", **counts)
    with pytest.raises(DataError, match=r"the train split is empty: its 4 source rows give no sample \(4 bad rows "
                                        r"skipped\)"):
        build("custom", data_files={"train": blank}, skip_bad_rows=True, **counts)
    some = write_jsonl(tmp_path / "some.jsonl", QA_ROWS + [{"prompt": "\t", "references": ["x"]}])
    with pytest.raises(BadRowError, match=r"some\.jsonl line 7: empty prompt \(prompt\)"):  # not the unit count
        build("custom", data_files={"train": some}, split_counts={"train": 5, "val": 1, "test": 1})
    pool = build("custom", data_files={"train": some}, split_counts={"train": 3, "val": 2, "test": 2},
                 skip_bad_rows=True)
    assert sum(sizes(pool)) == 6 and sum(pool.stats["skipped_rows"].values()) == 1


def test_prompts_that_differ_in_case_or_spacing_alone_stay_in_one_split_and_count_as_overlap(tmp_path):
    from dataclasses import replace

    from grueflow.data.sample import write_datapool

    variants = ("review number {i} was fine", "review number {i}  was fine", "REVIEW NUMBER {i} WAS FINE")
    rows = [{"prompt": v.format(i=i), "references": [f"r{i}"]} for i in range(12) for v in variants]
    pool = build("custom", data_files={"train": write_jsonl(tmp_path / "dup.jsonl", rows)},
                 split_counts={"train": 6, "val": 2, "test": 4}, seed=0)
    keys = {split: {" ".join(s.prompt.casefold().split()) for s in pool.splits[split]} for split in pool.splits}
    assert not keys["train"] & keys["test"] and not keys["train"] & keys["val"] and not keys["val"] & keys["test"]
    assert [len(pool.splits[s]) for s in ("train", "val", "test")] == [18, 6, 12]  # each prompt's 3 rows together
    first = pool.splits["train"][0]
    leaked = {**pool.splits, "test": [*pool.splits["test"], replace(first, prompt=f"  {first.prompt.upper()} ")]}
    stats = write_datapool(replace(pool, splits=leaked), tmp_path / "out")
    assert stats["train_test_prompt_overlap"] == 1


def test_prompts_that_differ_in_unicode_form_or_invisible_characters_alone_stay_in_one_split(tmp_path):
    """"Zürich" precomposed (NFC) and decomposed (NFD, as macOS writes it) print alike; they were split between train
    and test while the overlap count said 0. A zero-width space inside a prompt did the same."""
    from dataclasses import replace

    from grueflow.data.sample import prompt_key, write_datapool

    variants = ("describe z\u00fcrich {i} in one line", "describe zu\u0308rich {i} in one line",
                "describe z\u00fc\u200brich {i} in one line")
    assert len({prompt_key(v.format(i=0)) for v in variants}) == 1
    rows = [{"prompt": v.format(i=i), "references": [f"r{i}"]} for i in range(12) for v in variants]
    pool = build("custom", data_files={"train": write_jsonl(tmp_path / "forms.jsonl", rows)},
                 split_counts={"train": 6, "val": 2, "test": 4}, seed=0)
    keys = {split: {prompt_key(s.prompt) for s in pool.splits[split]} for split in pool.splits}
    assert not keys["train"] & keys["test"] and [len(pool.splits[s]) for s in SPLITS] == [18, 6, 12]
    first = pool.splits["train"][0]
    nfd = first.prompt.replace("\u00fc", "u\u0308")
    leaked = {**pool.splits, "test": [*pool.splits["test"], replace(first, prompt=nfd)]}
    assert write_datapool(replace(pool, splits=leaked), tmp_path / "out")["train_test_prompt_overlap"] == 1


def test_missing_files_splits_and_bad_args_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\['/nowhere/tst\.jsonl'\] do not exist"):
        build("iwslt2017", data_files={"test": "/nowhere/tst.jsonl"})
    path = write_jsonl(tmp_path / "tst.jsonl", [{"translation": {"en": "Hello .", "de": "Hallo ."}}])
    with pytest.raises(ValueError, match=r"no train split for 'train': the data has the splits \['test'\]\. Name one "
                                         r"with source_splits"):
        build("iwslt2017", data_files={"test": path})
    with pytest.raises(ValueError, match=r"split_counts .* ask for 3 units; the data has 1"):
        build("iwslt2017", data_files={"test": path}, split_counts={"train": 1, "val": 1, "test": 1})
    with pytest.raises(ConfigError, match=r"split_fractions has keys \['dev', 'train'\]; allowed: train, val, test"):
        parse(DatapoolConfig, {"id": "iwslt2017", "args": {"split_fractions": {"train": 0.9, "dev": 0.1}}}, "datapool")
    with pytest.raises(ConfigError, match=r"'sometimes' is not allowed; choose one of 'with', 'without', 'both'"):
        parse(DatapoolConfig, {"id": "totto", "args": {"titles": "sometimes"}}, "datapool")
    with pytest.raises(ConfigError, match=r"unknown key 'field'; valid keys: path, .*, fields, prefix, suffix"):
        parse(DatapoolConfig, {"id": "custom", "args": {"field": {}}}, "datapool")
    with pytest.raises(ConfigError, match=r"path 'json' needs local files: give data_files"):
        parse(DatapoolConfig, {"id": "custom", "args": {"path": "json"}}, "datapool")


# ---------------------------------------------------------------------------------------------
# train and test kept apart; answers as strings; the builder named in path picks the file check
# ---------------------------------------------------------------------------------------------


QA_ROWS = [{"prompt": f"{i} + 1 =", "references": [str(i + 1)]} for i in range(6)]


def test_train_and_test_from_one_file_or_one_source_split_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS)
    with pytest.raises(DataError, match=rf"^train and test read one file: data_files train: {re.escape(path)} and "
                                        rf"test: {re.escape(path)}; "
                                        r"every test score would be on training data: give test a separate file, or "
                                        r"name the file once and cut train, val and test apart from one file's "
                                        r"rows with split_fractions \(or split_counts\) and seed$"):
        build("custom", data_files={"train": path, "validation": path, "test": path})
    with pytest.raises(DataError, match=r"^train and test both read the source split 'train' \(source_splits "
                                        r"\{'val': 'train', 'test': 'train'\}\): every test score would be on training "
                                        r"data; feed test from another split \(source_splits test: <split>, or "
                                        r"data_files test: <file>\), or cut train, val and test apart"):
        build("custom", data_files={"train": path}, source_splits={"val": "train", "test": "train"})


def test_one_file_written_two_ways_or_linked_is_one_file_and_val_may_read_train(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", QA_ROWS)
    test = write_jsonl(tmp_path / "test.jsonl", QA_ROWS[:2])
    (tmp_path / "link.jsonl").symlink_to(path)
    for other in (f"{tmp_path}/../{tmp_path.name}/qa.jsonl", str(tmp_path / "link.jsonl")):
        with pytest.raises(DataError, match=rf"train and test read one file: data_files train: {re.escape(path)} and "
                                            rf"test: {re.escape(other)}; every test score"):
            build("custom", data_files={"train": path, "validation": test, "test": other})
    with pytest.raises(DataError, match=r"train and test both read the source split 'validation' \(source_splits "
                                        r"\{'train': 'validation', 'test': 'validation'\}\): every test score"):
        build("custom", data_files={"validation": path, "test": test}, source_splits={"train": "validation",
                                                                                      "test": "validation"})
    # val may read train (a quick look where the data has no validation split), and val and test one split
    pool = build("custom", data_files={"train": path, "test": test}, source_splits={"val": "train"})
    assert sizes(pool) == [6, 6, 2]
    assert sizes(build("custom", data_files={"train": path, "test": test}, source_splits={"val": "test"})) == [6, 2, 2]
    # a re-split takes one source split: one file named twice is refused as any two files are
    with pytest.raises(ConfigError, match=rf"split_counts with data_files \{{train: {re.escape(path)}, test: "
                                          rf"{re.escape(path)}\}} would pool the source splits train and test"):
        build("custom", data_files={"train": path, "test": path}, split_counts={"train": 4, "val": 1, "test": 1})


def test_stats_count_the_prompts_shared_by_train_and_test(tmp_path):
    """Two files with some rows in common: allowed, and the overlap is in stats.json."""
    train = write_jsonl(tmp_path / "train.jsonl", QA_ROWS)
    test = write_jsonl(tmp_path / "test.jsonl", QA_ROWS[4:] + [{"prompt": "9 + 1 =", "references": ["10"]}])
    pool = build("custom", data_files={"train": train, "validation": test, "test": test})
    stats = write_datapool(pool, tmp_path / "pool")
    assert stats["train_test_prompt_overlap"] == 2
    assert read_json(tmp_path / "pool" / "stats.json")["train_test_prompt_overlap"] == 2
    apart = build("custom", data_files={"train": train}, split_counts={"train": 4, "val": 1, "test": 1})
    assert write_datapool(apart, tmp_path / "apart")["train_test_prompt_overlap"] == 0


def nqa_row(i, answers):
    return {"document": {"id": f"d{i}", "summary": {"text": f"Alice met Bob {i} times."}},
            "question": {"text": "Who?"}, "answers": answers}


def test_narrative_qa_answers_as_strings_or_text_items(tmp_path):
    path = write_jsonl(tmp_path / "nqa.jsonl", [nqa_row(i, ["Alice", " Bob  Smith "]) for i in range(4)])
    pool = build("narrative_qa", data_files={"train": path}, split_counts={"train": 2, "val": 1, "test": 1})
    assert sizes(pool) == [2, 1, 1]
    assert {s.references for split in SPLITS for s in pool.splits[split]} == {("alice", "bob smith")}
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [nqa_row(0, [{"text": "Alice"}, "Bob"]), nqa_row(1, "Alice"),
                                                   nqa_row(2, []), nqa_row(3, ["Carol"])])
    kept = build("narrative_qa", data_files={"train": mixed}, split_counts={"train": 2, "val": 1, "test": 1},
                 skip_bad_rows=True)
    assert sorted(s.references for split in SPLITS for s in kept.splits[split]) == [("alice",), ("alice", "bob"),
                                                                                   ("carol",)]
    assert sum(kept.stats["skipped_rows"].values()) == 1  # the row without answers


def test_narrative_qa_answers_of_another_shape_name_the_row(tmp_path):
    path = write_jsonl(tmp_path / "nqa.jsonl", [nqa_row(0, ["Alice"]), nqa_row(1, [{"answer": "Bob"}]),
                                                nqa_row(2, ["Carol"])])
    with pytest.raises(BadRowError, match=r"nqa\.jsonl line 2: a reference \{'answer': 'Bob'\} \(dict\) is not text; "
                                          r"answers are a string, a list of strings, \{\"text\": \[strings\]\} "
                                          r"\(SQuAD's answers\) or a list of \{\"text\": string\}; fix the data, or "
                                          r"set skip_bad_rows: true"):
        build("narrative_qa", data_files={"train": path}, split_counts={"train": 1, "val": 1, "test": 1})
    nested = write_jsonl(tmp_path / "nested.jsonl", [nqa_row(i, [[["deep"]]]) for i in range(3)])
    with pytest.raises(BadRowError, match=r"nested\.jsonl line \d: a reference \[\['deep'\]\] \(list\) is not text"):
        build("narrative_qa", data_files={"train": nested}, split_counts={"train": 1, "val": 1, "test": 1})


def test_path_csv_reads_and_checks_a_txt_file_as_csv(tmp_path):
    table = tmp_path / "qa.txt"
    with open(table, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["prompt", "references"], *[[f"{i} + 1 =", str(i + 1)] for i in range(4)]])
    pool = build("custom", path="csv", data_files={"train": str(table)}, split_counts={"train": 2, "val": 1, "test": 1})
    assert sizes(pool) == [2, 1, 1] and all(s.references[0].isdigit() for s in pool.splits["train"])
    broken = tmp_path / "broken.txt"
    broken.write_text("prompt,references\n1 + 1 =,2\n2 + 1 =,3,4\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.txt: line 3: 3 fields where the header has 2; is a comma stray"):
        build("custom", path="csv", data_files={"train": str(broken)}, split_counts={"train": 1, "val": 1, "test": 1})


def test_path_json_checks_a_txt_file_as_json_lines_and_no_builder_needs_a_known_suffix(tmp_path):
    lines = tmp_path / "qa.txt"
    lines.write_text("".join(json.dumps(row) + "\n" for row in QA_ROWS[:3]), encoding="utf-8")
    one_each = {"split_counts": {"train": 1, "val": 1, "test": 1}}
    pool = build("custom", path="json", data_files={"train": str(lines)}, **one_each)
    assert sizes(pool) == [1, 1, 1]
    lines.write_text("prompt,references\n1 + 1 =,2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"qa\.txt: line 1, column 1: not a JSON object"):
        build("custom", path="json", data_files={"train": str(lines)}, **one_each)
    with pytest.raises(DataError, match=r"cannot tell how to read data_files .*qa\.txt'\]: give them one extension"):
        build("custom", data_files={"train": str(lines)}, **one_each)
