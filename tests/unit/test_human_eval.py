"""Human evaluation (issue 7): export -> import round trips on RL4LMs' example CSVs, blinding, seeded
order, agreement statistics against hand-computed values, and confidence intervals."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import html
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import DATA

from grueflow import io
from grueflow.human import batch as hb
from grueflow.human import results
from grueflow.human.agreement import cohen_kappa, fleiss_kappa, krippendorff_alpha
from grueflow.human.answers import Answer
from grueflow.registry import UnknownNameError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = DATA / "human_eval_examples"
LIKERT_DIALOGUE = EXAMPLES / "likert" / "daily_dialogue_example_input.csv"
PAIRWISE = EXAMPLES / "pairwise" / "commongen_pairwise_example_input.csv"
LIKERT_FILES = {"imdb": "IMDB_sentiment_completion_example_input.csv", "commongen": "commongen_example_input.csv",
                "dialogue": "daily_dialogue_example_input.csv", "summarization": "summarization_example_input.csv",
                "totto": "totto_example_input.csv"}


def _example(path: Path) -> Path:
    """``path`` of an example CSV in ../shared/data, or skip the test where the shared data is absent."""
    if not path.exists():
        pytest.skip(f"shared data file {path} is absent (set GRUEFLOW_SHARED_DATA)")
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with open(_example(path), newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _results_csv(path: Path, batch_dir: Path, answers: dict[str, dict[str, dict[str, str]]]) -> None:
    """An MTurk-style results CSV: the uploaded items.csv's values as Input.<column>, answers as Answer.<field>.

    ``answers`` maps worker -> item id -> {field: value}.
    """
    with open(batch_dir / hb.UPLOAD, newline="", encoding="utf-8") as handle:
        uploaded = list(csv.DictReader(handle))
    fields = sorted({f for per_item in answers.values() for values in per_item.values() for f in values})
    header = ["HITId", "WorkerId", "AssignmentStatus", *(f"Input.{c}" for c in uploaded[0]), *(f"Answer.{f}" for f in fields)]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for worker, per_item in answers.items():
            for row in uploaded:
                if row["item_id"] in per_item:
                    writer.writerow([f"HIT{row['item_id']}", worker, "Approved", *row.values(),
                                     *(per_item[row["item_id"]][f] for f in fields)])


@pytest.mark.parametrize("criteria", sorted(LIKERT_FILES))
def test_likert_export_import_round_trip_on_the_rl4lms_examples(tmp_path: Path, criteria: str) -> None:
    examples = _rows(EXAMPLES / "likert" / LIKERT_FILES[criteria])
    batch = hb.likert_batch(hb.read_rl4lms_likert(EXAMPLES / "likert" / LIKERT_FILES[criteria]), criteria, seed=3)
    hb.write_batch(batch, tmp_path / "batch")
    back = hb.read_batch(tmp_path / "batch")
    assert back == batch
    as_rows = sorted((i["prompt"], i["machine_completion"], i["algorithm"]) for i in back.items)
    assert as_rows == sorted((r["prompt"], r["machine_completion"], r["algorithm"]) for r in examples)
    # the upload CSV has RL4LMs' columns (plus item_id), HTML-escaped for the platform's ${column} substitution
    uploaded = _rows(tmp_path / "batch" / hb.UPLOAD)
    assert list(uploaded[0]) == ["item_id", "prompt", "machine_completion", "algorithm"]
    assert [{k: html.unescape(v) for k, v in r.items()} for r in uploaded] == [
        {k: i[k] for k in ("item_id", "prompt", "machine_completion", "algorithm")} for i in back.items]
    assert all("<" not in v for r in uploaded for v in r.values())
    template = (tmp_path / "batch" / hb.TEMPLATE).read_text(encoding="utf-8")
    assert "${prompt}" in template and "${machine_completion}" in template and "<script" not in template
    second = batch.criteria[1].id
    assert f'name="{second}"' in template and 'name="coherence"' in template

    # two workers answer through the platform: coherence = 1 + (example row % 5), the second criterion 5 - that
    order = {(r["prompt"], r["machine_completion"]): n for n, r in enumerate(examples)}
    answers = {}
    for worker, shift in (("W1", 0), ("W2", 1)):
        answers[worker] = {}
        for item in back.items:
            n = order[(item["prompt"], item["machine_completion"])]
            answers[worker][item["item_id"]] = {"coherence": str(1 + (n + shift) % 5), second: str(5 - (n + shift) % 5)}
    _results_csv(tmp_path / "results.csv", tmp_path / "batch", answers)
    imported = results.read_answers(tmp_path / "results.csv", back)
    assert len(imported) == 2 * len(examples)
    for answer in imported:
        n = order[(back.item(answer.item_id)["prompt"], back.item(answer.item_id)["machine_completion"])]
        shift = 0 if answer.annotator == "W1" else 1
        assert dict(answer.values) == {"coherence": 1 + (n + shift) % 5, second: 5 - (n + shift) % 5}


def test_likert_table_means_and_t_intervals(tmp_path: Path) -> None:
    batch = hb.likert_batch(hb.read_rl4lms_likert(_example(LIKERT_DIALOGUE)), "dialogue", seed=0)
    by_method: dict[str, list[str]] = {}
    for item in batch.items:
        by_method.setdefault(item["algorithm"], []).append(item["item_id"])
    method = max(by_method, key=lambda m: len(by_method[m]))
    ids = by_method[method][:3]
    # one annotator scores the method's first three items coherence 3, 4, 5 (quality 2 each); a second gives
    # item 1 coherence 5, so item 1's mean is (3 + 5) / 2 = 4 and the item means are 4, 4, 5
    answers = [Answer("ann", i, {"coherence": s, "quality": 2}) for i, s in zip(ids, (3, 4, 5))]
    answers.append(Answer("bob", ids[0], {"coherence": 5, "quality": 2}))
    rows = {r["measure"]: r for r in results.likert_rows(batch, answers, "daily_dialog")}
    # mean 13/3 = 4.3333; sd = sqrt(((4-13/3)^2 * 2 + (5-13/3)^2) / 2) = sqrt((2/9 + 4/9) / 2) = sqrt(1/3) = 0.57735
    # t_{0.975, 2} = 4.302653 -> half width 4.302653 * 0.57735 / sqrt(3) = 1.434218
    assert rows["coherence"]["n"] == 3 and rows["coherence"]["n_judgments"] == 4
    assert rows["coherence"]["value"] == pytest.approx(4.3333, abs=1e-4)
    assert rows["coherence"]["ci_low"] == pytest.approx(4.3333 - 1.4342, abs=1e-4)
    assert rows["coherence"]["ci_high"] == pytest.approx(4.3333 + 1.4342, abs=1e-4)
    assert rows["quality"]["value"] == 2.0 and rows["quality"]["ci_low"] == 2.0


def _pairwise(seed: int) -> tuple[hb.Batch, dict[str, str]]:
    column, sources = hb.read_rl4lms_pairwise(_example(PAIRWISE))
    return hb.pairwise_batch(*sources.items(), "commongen", seed, column)


@pytest.mark.parametrize("hint, delimiter", [("sep=,", ","), ("sep=;", ";")])
def test_rl4lms_csvs_after_excels_separator_hint_read_as_without_it(tmp_path: Path, hint: str, delimiter: str
                                                                     ) -> None:
    """Excel's ``sep=,`` line before an RL4LMs pairwise CSV was read as its header: "a pairwise CSV needs one of the
    columns ('prompt', 'concept'); it has ['sep=', '']". The hint is passed over and its delimiter used."""
    plain = _example(PAIRWISE).read_text(encoding="utf-8-sig")
    rows = list(csv.reader(plain.splitlines()))
    hinted = tmp_path / "pairwise.csv"
    with open(hinted, "w", newline="", encoding="utf-8-sig") as handle:
        handle.write(hint + "\r\n")
        csv.writer(handle, delimiter=delimiter).writerows(rows)
    assert hb.read_rl4lms_pairwise(hinted) == hb.read_rl4lms_pairwise(_example(PAIRWISE))
    likert = tmp_path / "likert.csv"
    likert.write_text(f"{hint}\nprompt{delimiter}machine_completion{delimiter}algorithm\np{delimiter}c{delimiter}ppo\n")
    assert hb.read_rl4lms_likert(likert) == {"ppo": [hb.Prediction("row1", "p", "c")]}


def test_rl4lms_csvs_joined_with_their_headers_are_refused_naming_the_line(tmp_path: Path) -> None:
    """Two RL4LMs Likert CSVs joined with cat: the second header was read as a row, a third system ``algorithm``
    whose prompt was "prompt"; two pairwise CSVs so joined gave "its choice ids name [..., 'choice_A_id', ...]"."""
    likert = tmp_path / "likert.csv"
    likert.write_text("sep=,\nprompt,machine_completion,algorithm\np,c,ppo\n\nprompt,machine_completion,algorithm\n"
                      "p2,c2,ppo\n")
    with pytest.raises(io.DataError, match=re.escape(f"{likert}: line 5 repeats the header: were two files joined? "
                                                     f"Delete the line")):
        hb.read_rl4lms_likert(likert)
    pairwise = tmp_path / "pairwise.csv"
    text = _example(PAIRWISE).read_text(encoding="utf-8-sig")
    pairwise.write_text(text + text.splitlines()[0] + "\n")
    with pytest.raises(io.DataError, match=re.escape(f"{pairwise}: line {len(text.splitlines()) + 1} repeats the "
                                                     f"header: were two files joined? Delete the line")):
        hb.read_rl4lms_pairwise(pairwise)


def test_pairwise_batch_is_blinded(tmp_path: Path) -> None:
    examples = _rows(PAIRWISE)
    systems = sorted({r["choice_A_id"] for r in examples})
    assert systems == ["pref_model", "supervised"]
    batch, key = _pairwise(seed=0)
    hb.write_batch(batch, tmp_path / "batch", key, tmp_path / "key.json")
    for file in (tmp_path / "batch").iterdir():
        text = file.read_text(encoding="utf-8")
        assert not any(s in text for s in systems), f"{file.name} names a system"
    ids = [i[f"choice_{side}_id"] for i in batch.items for side in "AB"]
    assert len(set(ids)) == len(ids) == 18  # fresh opaque ids per choice: no id recurs across items
    assert all(re.fullmatch(rf"{batch.tag}-[0-9a-f]{{16}}", i) for i in ids)  # the batch's tag, 16 random hex digits
    assert hb.read_key(tmp_path / "key.json", hb.read_batch(tmp_path / "batch")) == key
    assert sorted(set(key.values())) == systems
    assert json.loads((tmp_path / "key.json").read_text()) == {"batch_tag": batch.tag, "ids": key}
    assert (tmp_path / "key.json").stat().st_mode & 0o777 == 0o600  # private: it unblinds the batch
    # unblinding through the key gives back each system's own sentence for each concept
    original = {(r["concept"], side_id): r[f"choice_{side}"] for r in examples for side, side_id in
                (("A", r["choice_A_id"]), ("B", r["choice_B_id"]))}
    for item in batch.items:
        for side in "AB":
            assert original[(item["concept"], key[item[f"choice_{side}_id"]])] == item[f"choice_{side}"]


def test_pairwise_order_follows_the_seed() -> None:
    def layout(batch: hb.Batch, key: dict[str, str]) -> list[tuple[str, str]]:
        return [(i["sample_id"], key[i["choice_A_id"]]) for i in batch.items]

    first, again, other = _pairwise(0), _pairwise(0), _pairwise(1)
    assert first == again
    assert layout(*first) != layout(*other)
    assert sorted(layout(*first)) != sorted(layout(*other))  # A/B sides differ, not only the item order


def test_pairwise_round_trip_preferences_and_win_rates(tmp_path: Path) -> None:
    batch, key = _pairwise(seed=0)
    hb.write_batch(batch, tmp_path / "batch", key, tmp_path / "key.json")
    back = hb.read_batch(tmp_path / "batch")
    pref_side = {i["item_id"]: ("A" if key[i["choice_A_id"]] == "pref_model" else "B") for i in back.items}
    first = back.items[0]["item_id"]
    answers = {"W1": {i: {"choice": side} for i, side in pref_side.items()},
               "W2": {i: {"choice": "tie" if i == first else side} for i, side in pref_side.items()}}
    _results_csv(tmp_path / "results.csv", tmp_path / "batch", answers)
    imported = results.read_answers(tmp_path / "results.csv", back)
    prefs = results.preferences(back, hb.read_key(tmp_path / "key.json", back), imported)
    assert len(prefs) == 9 + 8  # W2's tie gives no row
    examples = {r["concept"]: r for r in _rows(PAIRWISE)}
    for row in prefs:
        source = examples[row["prompt"]]
        side = "A" if source["choice_A_id"] == "pref_model" else "B"
        assert (row["chosen_system"], row["rejected_system"]) == ("pref_model", "supervised")
        assert row["chosen"] == source[f"choice_{side}"] and row["rejected"] == source[f"choice_{'B' if side == 'A' else 'A'}"]
        assert set(row) == {"id", "sample_id", "prompt", "chosen", "rejected", "chosen_system", "rejected_system",
                            "annotator"}
        assert row["id"] == f"{back.tag}/{row['sample_id']}/{row['annotator']}"
    assert [r["id"] for r in prefs[:2]] == [f"{back.tag}/{back.items[0]['sample_id']}/W1",
                                            f"{back.tag}/{back.items[1]['sample_id']}/W1"]
    assert len({r["id"] for r in prefs}) == 17 and len({r["sample_id"] for r in prefs}) == 9
    rows = {r["method"]: r for r in results.pairwise_rows(back, key, imported, "common_gen")}
    # pref_model wins 17 of 17 decided judgments (1 tie). Wilson with p = 1: low = n / (n + z^2) = 17 / 20.841459
    assert rows["pref_model"]["value"] == 1.0 and rows["pref_model"]["ties"] == 1
    assert rows["pref_model"]["ci_low"] == pytest.approx(0.8157, abs=1e-4) and rows["pref_model"]["ci_high"] == 1.0
    assert rows["supervised"]["value"] == 0.0 and rows["supervised"]["ci_high"] == pytest.approx(0.1843, abs=1e-4)
    stats = results.agreement(back, imported)["choice"]
    # 9 items x 2 labels: 8 items agree (A/B as given), item 1 is (side, tie). Cohen: p_o = 8/9;
    # W1 labels: the 9 sides; W2: the same but one tie -> p_e = sum_c f1(c) f2(c) / 81
    sides = list(pref_side.values())
    n_a = sides.count("A")
    n_a2 = n_a - (pref_side[first] == "A")
    n_b2 = (9 - n_a) - (pref_side[first] == "B")
    p_e = (n_a * n_a2 + (9 - n_a) * n_b2) / 81
    assert stats["cohen_kappa"] == pytest.approx((8 / 9 - p_e) / (1 - p_e), abs=1e-6)


def test_platform_csv_of_another_batch_is_refused(tmp_path: Path) -> None:
    batch, key = _pairwise(seed=0)
    other, other_key = _pairwise(seed=1)
    hb.write_batch(batch, tmp_path / "a", key, tmp_path / "a.json")
    hb.write_batch(other, tmp_path / "b", other_key, tmp_path / "b.json")
    _results_csv(tmp_path / "results.csv", tmp_path / "b", {"W1": {i["item_id"]: {"choice": "A"} for i in other.items}})
    with pytest.raises(io.DataError) as err:  # its item ids carry the other batch's tag
        results.read_answers(tmp_path / "results.csv", batch)
    assert (f"results.csv holds answers to batch {other.tag} (row 2: item 'P{other.tag}-00001'), and the batch now "
            f"is {batch.tag}: it was exported again since (its predictions changed), or the file answers another "
            f"batch; to import these answers, undo the change that altered the predictions and run again, which "
            f"exports the earlier batch again (the export is seeded; no copy of it is kept in .grueflow/replaced/), or "
            f"answer the new one") in str(err.value)


def test_platform_csv_saved_by_excel_with_a_bom_imports_and_a_header_only_one_is_refused(tmp_path: Path) -> None:
    batch, key = _pairwise(seed=0)
    hb.write_batch(batch, tmp_path / "a", key, tmp_path / "a.json")
    _results_csv(tmp_path / "results.csv", tmp_path / "a", {"W1": {i["item_id"]: {"choice": "A"} for i in batch.items}})
    text = (tmp_path / "results.csv").read_bytes()
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + text)  # what Excel's "CSV UTF-8" writes
    assert len(results.read_answers(tmp_path / "bom.csv", batch)) == len(batch.items)
    rows = list(csv.reader(text.decode().splitlines()))  # a column named twice: DictReader kept the last
    with open(tmp_path / "twice.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([rows[0] + ["WorkerId"], *(row + ["W2"] for row in rows[1:])])
    with pytest.raises(io.DataError, match=r"twice\.csv: the column\(s\) \['WorkerId'\] appear more than once in the "
                                           r"header, and only one value a row could be read; remove or rename"):
        results.read_answers(tmp_path / "twice.csv", batch)
    (tmp_path / "header.csv").write_bytes(text.split(b"\n")[0] + b"\n")
    with pytest.raises(io.DataError, match=r"header\.csv: has a header but no answer rows"):
        results.read_answers(tmp_path / "header.csv", batch)


def test_results_of_another_batch_without_input_text_columns_match_no_item(tmp_path: Path) -> None:
    """Item ids carry their batch's tag, so a results file of another batch is refused by its ids alone."""
    import csv

    batch, key = _pairwise(seed=0)
    other, other_key = _pairwise(seed=1)
    assert {i["item_id"] for i in batch.items}.isdisjoint({i["item_id"] for i in other.items})
    assert batch.items[0]["item_id"] == _pairwise(seed=0)[0].items[0]["item_id"]  # the same batch, the same ids
    hb.write_batch(other, tmp_path / "b", other_key, tmp_path / "b.json")
    _results_csv(tmp_path / "results.csv", tmp_path / "b", {"W1": {i["item_id"]: {"choice": "A"} for i in other.items}})
    with open(tmp_path / "results.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    keep = ["WorkerId", "Input.item_id", "Answer.choice"]
    with open(tmp_path / "ids_only.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, keep)
        writer.writeheader()
        writer.writerows({k: r[k] for k in keep} for r in rows)
    with pytest.raises(io.DataError, match=rf"ids_only\.csv holds answers to batch {other.tag} \(row 2: item "
                                           rf"'P{other.tag}-00001'\), and the batch now is {batch.tag}: "):
        results.read_answers(tmp_path / "ids_only.csv", batch)
    rows[0]["Input.item_id"] = f"P{batch.tag}-99999"  # this batch's tag, an item it lacks: no other batch's answers
    with open(tmp_path / "ids_only.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, keep)
        writer.writeheader()
        writer.writerow({k: rows[0][k] for k in keep})
    with pytest.raises(io.DataError, match=rf"ids_only\.csv: row 2: Input\.item_id 'P{batch.tag}-99999' is not in "
                                           rf"this batch$"):
        results.read_answers(tmp_path / "ids_only.csv", batch)


def test_unknown_criteria_set_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown criteria set 'poetry'.*commongen.*dialogue.*imdb.*totto"):
        hb.likert_batch({"m": [hb.Prediction("1", "p", "g")]}, "poetry", seed=0)


def test_krippendorff_alpha_by_hand() -> None:
    # units [1,2] [2,5] [1,1] [5,5] and [3] (one value: not pairable, drops out).
    # coincidences: o12 = o21 = 1, o25 = o52 = 1, o11 = 2, o55 = 2 -> n1 = 3, n2 = 2, n5 = 3, n = 8
    units = [[1, 2], [2, 5], [1, 1], [5, 5], [3]]
    # interval: d2 = (c-k)^2. observed = 2*1 + 2*9 = 20; expected = 2*(3*2*1 + 2*3*9 + 3*3*16) = 408
    # alpha = 1 - (n-1) * 20 / 408 = 1 - 140/408
    assert krippendorff_alpha(units, "interval") == pytest.approx(1 - 140 / 408)
    # ordinal: d2(1,2) = (n1+n2 - (n1+n2)/2)^2 = 2.5^2 = 6.25; d2(2,5) = 2.5^2 = 6.25; d2(1,5) = (8 - 3)^2 = 25
    # observed = 2*6.25 + 2*6.25 = 25; expected = 2*(3*2*6.25 + 2*3*6.25 + 3*3*25) = 600; alpha = 1 - 7*25/600
    assert krippendorff_alpha(units, "ordinal") == pytest.approx(1 - 175 / 600)
    # nominal: observed = 4 off-diagonal; expected = 2*(3*2 + 2*3 + 3*3) = 42; alpha = 1 - 7*4/42 = 1/3
    assert krippendorff_alpha(units, "nominal") == pytest.approx(1 / 3)
    # [1,1] [2,2] [1,2]: n1 = n2 = 3, n = 6; interval observed 2, expected 18 -> 1 - 5*2/18 = 4/9
    assert krippendorff_alpha([[1, 1], [2, 2], [1, 2]], "interval") == pytest.approx(4 / 9)
    assert krippendorff_alpha([[4, 4], [4, 4]], "interval") is None  # no variation: undefined, not 0
    assert krippendorff_alpha([[4]], "ordinal") is None


def test_cohen_and_fleiss_kappa_by_hand() -> None:
    # agree on items 1, 3, 4, 5 -> p_o = 4/6; first: A3 B2 tie1, second: A3 B3 -> p_e = (9 + 6 + 0)/36 = 15/36
    # kappa = (24/36 - 15/36) / (21/36) = 9/21
    first = ["A", "A", "B", "B", "A", "tie"]
    second = ["A", "B", "B", "B", "A", "A"]
    assert cohen_kappa(first, second) == pytest.approx(9 / 21)
    assert cohen_kappa(["A", "A"], ["A", "A"]) is None
    # P_i: AAA -> 1, AAB -> (4+1-3)/6 = 1/3, BBB -> 1, ABB -> 1/3; P_bar = 2/3; A and B each 6 of 12 labels
    # -> P_e = 0.5; kappa = (2/3 - 1/2) / (1/2) = 1/3. The one-label item drops out.
    items = [["A", "A", "A"], ["A", "A", "B"], ["B", "B", "B"], ["A", "B", "B"], ["A"]]
    assert fleiss_kappa(items) == pytest.approx(1 / 3)


def test_wilson_and_t_intervals_by_hand() -> None:
    # p = 7/10, z = 1.959964: centre = (0.7 + z^2/20) / (1 + z^2/10) = 0.892073 / 1.384146 = 0.644494;
    # half = z * sqrt(0.021 + z^2/400) / 1.384146 = 1.959964 * sqrt(0.030604) / 1.384146 = 0.342874 / 1.384146
    # = 0.247716 -> [0.396777, 0.892209]
    low, high = results.wilson_interval(7, 10)
    assert (low, high) == (pytest.approx(0.396777, abs=1e-5), pytest.approx(0.892209, abs=1e-5))
    mean, low, high = results.t_interval([3, 4, 5])  # sd 1, t_{0.975,2} = 4.302653: half = 4.302653 / sqrt(3)
    assert (mean, low, high) == (4, pytest.approx(4 - 2.484138, abs=1e-5), pytest.approx(4 + 2.484138, abs=1e-5))
    assert results.t_interval([2.0]) == (2.0, None, None)
    assert math.isclose(results.Z_95 ** 2, 3.841459, abs_tol=1e-6)


def test_answers_files_that_hold_nothing_to_import_are_refused(tmp_path: Path) -> None:
    batch, key = _pairwise(seed=0)
    hb.write_batch(batch, tmp_path / "a", key, tmp_path / "a.json")
    with pytest.raises(io.MissingDataError, match=r"answers file .*typo\.jsonl does not exist"):
        results.read_answers(tmp_path / "typo.jsonl", batch)  # a mistyped path: not "no answers yet"
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    with pytest.raises(io.DataError, match=r"blank\.jsonl: has no answers"):
        results.read_answers(tmp_path / "blank.jsonl", batch)
    _results_csv(tmp_path / "results.csv", tmp_path / "a", {"W1": {i["item_id"]: {"choice": "A"} for i in batch.items}})
    text = (tmp_path / "results.csv").read_text()
    (tmp_path / "rejected.csv").write_text(text.replace(",Approved,", ",Rejected,"))
    with pytest.raises(io.DataError, match=rf"rejected\.csv: every one of its {len(batch.items)} rows is rejected "
                                           rf"\(first: row 2: AssignmentStatus 'Rejected'\); no answer is left"):
        results.read_answers(tmp_path / "rejected.csv", batch)
    lines = text.splitlines(keepends=True)
    (tmp_path / "short.csv").write_text(lines[0] + lines[1].rsplit(",", 1)[0] + "\n")  # the answer cell cut off
    with pytest.raises(io.DataError, match=rf"short\.csv: line 2: {lines[0].count(',')} fields where the header has "
                                           rf"{lines[0].count(',') + 1}"):
        results.read_answers(tmp_path / "short.csv", batch)


def test_a_results_csv_row_is_named_by_its_spreadsheet_row_and_the_line_it_starts_on(tmp_path: Path) -> None:
    """A results CSV whose completions hold line breaks named its fifth answer row "row 16": the line the row ends on,
    neither its spreadsheet row (6) nor the line an editor shows it starting on (14)."""
    batch = hb.likert_batch({"ppo": [hb.Prediction(f"test-{i}", f"p{i}", "line one\nline two\nline three")
                                     for i in range(6)]}, "imdb", seed=0)
    rows = [("W1" if k < 4 else "W 1", item["item_id"], None, 4) for k, item in enumerate(batch.items)]
    results_csv = _mturk_csv(tmp_path / "results.csv", batch, rows)
    starts = [n for n, text in enumerate(results_csv.read_text().splitlines(), start=1) if text.startswith("W 1,")]
    assert starts == [14, 17]
    with pytest.raises(io.DataError, match=r"results\.csv: row 6 \(line 14\): annotator 'W 1' is not a valid name"):
        results.read_answers(results_csv, batch)
    rows = [("W1", item["item_id"], None, 4) for item in batch.items]
    rows.insert(1, ("W1", batch.items[0]["item_id"], None, 2))  # a second answer that no time orders
    with pytest.raises(io.DataError, match=r"results\.csv row 2, no time\) and \(?.*results\.csv row 3 \(line 5\), "
                                           r"no time"):
        results.read_answers(_mturk_csv(results_csv, batch, rows), batch)


def test_a_results_csv_round_tripped_through_a_spreadsheet_still_imports(tmp_path: Path) -> None:
    """Upper-case .CSV, and trailing blanks or NBSPs added to the Input texts, change no answer."""
    batch, key = _pairwise(seed=0)
    hb.write_batch(batch, tmp_path / "a", key, tmp_path / "a.json")
    _results_csv(tmp_path / "results.csv", tmp_path / "a", {"W1": {i["item_id"]: {"choice": "B"} for i in batch.items}})
    with open(tmp_path / "results.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    column = next(c for c in rows[0] if c.startswith("Input.") and c != "Input.item_id")
    for row in rows:
        row[column] = row[column].replace(" ", "\u00a0", 1) + "  "
    with open(tmp_path / "Batch_1_results.CSV", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    answers = results.read_answers(tmp_path / "Batch_1_results.CSV", batch)
    assert len(answers) == len(batch.items) and {a.values["choice"] for a in answers} == {"B"}


def test_a_damaged_batch_folder_is_named(tmp_path: Path) -> None:
    batch, key = _pairwise(seed=0)
    folder = tmp_path / "a"
    hb.write_batch(batch, folder, key, tmp_path / "a.json")
    io.write_stage_record(folder, stage="export_human_eval", params={}, inputs={}, wall_time_s=0.0)
    items = (folder / hb.ITEMS).read_text()
    (folder / hb.ITEMS).write_text(items.replace("a", "e", 1))  # an item's text edited by hand
    with pytest.raises(io.MissingDataError, match=r"is damaged: items\.jsonl does not match the digest"):
        hb.read_batch(folder)
    (folder / "stage.json").unlink()
    (folder / hb.ITEMS).unlink()
    with pytest.raises(io.MissingDataError, match=r"items\.jsonl is missing; export the batch again"):
        hb.read_batch(folder)
    (folder / hb.MANIFEST).write_text('{"kind": "pairwise", "criteria_set": "nonsense", "seed": 0}')
    (folder / hb.ITEMS).write_text(items)
    with pytest.raises(io.DataError, match=r"unknown criteria set 'nonsense'.*; export the batch again"):
        hb.read_batch(folder)
    (folder / hb.MANIFEST).write_text("{")
    with pytest.raises(io.DataError, match=r"not readable JSON .*; export the batch again"):
        hb.read_batch(folder)


def test_a_batch_cut_at_a_line_end_without_its_stage_record_is_refused(tmp_path: Path) -> None:
    """A batch folder copied without stage.json, its items.jsonl cut after line 2, was imported as a smaller batch."""
    batch, key = _pairwise(seed=0)
    folder = tmp_path / "a"
    hb.write_batch(batch, folder, key, tmp_path / "a.json")
    n = len(batch.items)
    assert n > 2 and len(hb.read_batch(folder).items) == n
    lines = (folder / hb.ITEMS).read_text().splitlines(keepends=True)
    (folder / hb.ITEMS).write_text("".join(lines[:2]))
    with pytest.raises(io.DataError) as refused:
        hb.read_batch(folder)
    assert str(refused.value) == (f"{folder / hb.ITEMS} holds 2 items where batch.json says n_items {n}: the batch is "
                                  f"cut or was edited; export the batch again")
    with pytest.raises(io.MissingDataError, match=r"key file .*nokey\.json does not exist"):
        hb.read_key(tmp_path / "nokey.json")


def _finished_import(tmp_path: Path) -> Path:
    """An import folder as the import stage leaves it: one Likert row, an empty agreement, its stage record."""
    folder = tmp_path / "import"
    folder.mkdir()
    io.write_json(folder / "table_rows.json", [{"kind": "likert", "task": "t", "method": "ppo", "measure": "fluency",
                                                "n": 3, "value": 3.0, "ci_low": 2.0, "ci_high": 4.0}])
    io.write_json(folder / "agreement.json", {})
    io.write_stage_record(folder, stage="import_human_eval", params={}, inputs={}, wall_time_s=0.0)
    return folder


def test_the_human_table_refuses_an_import_edited_or_cut_after_it_finished(tmp_path: Path) -> None:
    import subprocess
    import sys

    folder = _finished_import(tmp_path)
    (folder / "table_rows.json").write_text((folder / "table_rows.json").read_text().replace("3.0", "4.9"))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "stages/human_eval_table.py", "--imports", str(folder), "--out-csv",
                           str(tmp_path / "t.csv"), "--out-md", str(tmp_path / "t.md")], cwd=root, capture_output=True,
                          text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is damaged: table_rows.json does not match the digest its stage recorded" in done.stderr
    assert not (tmp_path / "t.csv").exists()


def test_the_human_table_names_each_rows_batch_and_refuses_an_import_twice(tmp_path: Path) -> None:
    """Two batches may rate one task x method x criterion: each row says which import it comes from."""
    import subprocess
    import sys

    for name, value in (("likert_seed0", 3.0), ("likert_seed1", 4.0)):
        folder = tmp_path / name
        folder.mkdir()
        io.write_json(folder / "table_rows.json", [{"kind": "likert", "task": "t", "method": "ppo", "measure": "fluency",
                                                    "n": 3, "value": value, "ci_low": 2.0, "ci_high": 4.5}])
        io.write_json(folder / "agreement.json", {})
        io.write_stage_record(folder, stage="import_human_eval", params={}, inputs={}, wall_time_s=0.0)
    root = Path(__file__).resolve().parents[2]

    def table(*imports: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "stages/human_eval_table.py", "--imports",
                               *(str(tmp_path / i) for i in imports), "--out-csv", str(tmp_path / "t.csv"),
                               "--out-md", str(tmp_path / "t.md")], cwd=root, capture_output=True, text=True)

    assert table("likert_seed0", "likert_seed1").returncode == 0
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert [(r["batch"], r["value"]) for r in rows] == [("likert_seed0", "3.0"), ("likert_seed1", "4.0")]
    assert "| t | ppo | fluency | 3 | 4.00 [2.00, 4.50] | likert_seed1 |" in (tmp_path / "t.md").read_text()
    twice = table("likert_seed0", "likert_seed0")
    assert twice.returncode == 2 and "more than once; each row would count twice" in twice.stderr


def _predictions(method: str, n: int = 4) -> list[hb.Prediction]:
    """``n`` predictions of one method: sample ``test-<i>``, prompt ``p<i>``, generation ``<method> g<i>``."""
    return [hb.Prediction(f"test-{i}", f"p{i}", f"{method} g{i}") for i in range(n)]


def _write_predictions(folder: Path, *methods: str) -> dict[str, Path]:
    paths = {}
    for method in methods:
        paths[method] = folder / f"{method}.jsonl"
        io.write_jsonl(paths[method], [{"id": p.id, "prompt": p.prompt, "generation": p.generation}
                                       for p in _predictions(method)])
    return paths


def _stage(script: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"stages/{script}.py", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True)


def test_an_export_refuses_predictions_cut_or_edited_after_their_evaluate_run(tmp_path: Path) -> None:
    """A predictions.jsonl cut to 3 of its rows was exported as a 3-item batch without checking its run's stage.json."""
    path = _write_predictions(tmp_path / "run", "ppo")["ppo"]
    io.write_stage_record(tmp_path / "run", stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]))
    with pytest.raises(io.MissingDataError) as refused:
        hb.read_predictions(path)
    assert str(refused.value) == (f"{tmp_path / 'run'} is damaged: ppo.jsonl has {sum(map(len, lines[:3]))} bytes "
                                  f"where its stage wrote {sum(map(len, lines))}; delete the folder and rerun the "
                                  f"pipeline (snakemake or dvc repro) to rebuild it")
    path.write_text("".join(lines).replace("ppo g1", "XYZ g1"))
    with pytest.raises(io.MissingDataError, match=r"is damaged: ppo\.jsonl does not match the digest its stage"):
        hb.read_predictions(path)


def test_an_export_or_annotation_of_another_runs_folder_copied_in_warns_whose_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An export by hand of ppo=results/eval/imdb/ppo/seed0 holding a copy of supervised+ppo's folder rated
    supervised+ppo's generations as ppo's, and the annotation page served a copy of another batch as this one,
    without a word: neither runs the stale check that rebuilds such a copy."""
    monkeypatch.chdir(tmp_path)
    written = Path("results") / "eval" / "imdb" / "supervised+ppo" / "seed0"
    with io.atomic_dir(written) as tmp:
        _write_predictions(tmp, "predictions")
        io.write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    copy = written.parent.parent / "ppo" / "seed0"
    shutil.copytree(written, copy, symlinks=True)  # cp -a
    with caplog.at_level(logging.WARNING, logger="grueflow.human.batch"):
        assert len(hb.read_predictions(written / "predictions.jsonl")) == 4
        assert caplog.text == ""
        predictions = hb.read_predictions(copy / "predictions.jsonl")
    assert [p.generation for p in predictions] == [f"predictions g{i}" for i in range(4)]
    assert caplog.messages == [
        f"{copy} is a copy of the stage folder written at {written} (its stage.json records that path as its output): "
        f"what it holds is that run's; a pipeline run whose suite writes {copy} rebuilds it"]
    caplog.clear()
    batches = Path("results") / "human" / "imdb" / "batches"
    batch = hb.likert_batch({"ppo": predictions}, "imdb", seed=0)
    hb.write_batch(batch, batches / "likert_seed0", finish=lambda tmp: io.write_stage_record(
        tmp, stage="export_human_eval", params={}, inputs={}, wall_time_s=0.0))
    (batches / "likert_seed1").symlink_to("likert_seed0")
    with caplog.at_level(logging.WARNING, logger="grueflow.human.batch"):
        assert hb.read_batch(batches / "likert_seed1") == dataclasses.replace(batch, folder=batches / "likert_seed1")
    assert caplog.messages == [
        f"{batches / 'likert_seed1'} is a link to the stage folder written at {batches / 'likert_seed0'} (its "
        f"stage.json records that path as its output): what it holds is that run's; a pipeline run whose suite writes "
        f"{batches / 'likert_seed1'} rebuilds it"]


def test_two_pairwise_batches_of_one_seed_share_no_opaque_id() -> None:
    """Opaque ids carry the batch's tag, drawn with the seed and the tag: the same seed and size no longer give
    two batches the same ids (which let one batch's key unblind another)."""
    first, first_key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    other, other_key = hb.pairwise_batch(("a2c", _predictions("a2c")), ("sup", _predictions("sup")), "imdb", seed=0)
    assert first.tag != other.tag
    assert set(first_key).isdisjoint(other_key) and first.opaque_ids() == set(first_key)
    assert all(i.startswith(f"{first.tag}-") for i in first_key)
    assert all(i.startswith(f"{other.tag}-") for i in other_key)
    again = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    assert again == (first, first_key)
    # the method names are part of the identity: the same texts under other names are another batch
    renamed, _ = hb.pairwise_batch(("nlpo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    assert renamed.tag != first.tag


def test_an_import_refuses_the_key_of_another_batch_and_an_export_never_replaces_one(tmp_path: Path) -> None:
    paths = _write_predictions(tmp_path, "ppo", "sup", "a2c")

    def export(first: str, out: str, key: str) -> subprocess.CompletedProcess:
        return _stage("export_human_eval", "--kind", "pairwise", "--criteria", "imdb", "--seed", 0, "--predictions",
                      f"{first}={paths[first]}", f"sup={paths['sup']}", "--out", tmp_path / out,
                      "--key", tmp_path / key)

    assert export("ppo", "batchA", "keyA.json").returncode == 0
    key_a = (tmp_path / "keyA.json").read_bytes()
    batch_a = hb.read_batch(tmp_path / "batchA")
    clash = export("a2c", "batchB", "keyA.json")  # another batch to the same key: refused, nothing written
    assert clash.returncode == 2 and "Traceback" not in clash.stderr
    assert (f"keyA.json: the key exists for batch {batch_a.tag}; it may be the only map from that batch's item ids "
            f"to the systems: choose another --key path, or move it aside, with its digest record if there is one "
            f"(mv {tmp_path / 'keyA.json'} {tmp_path / '.keyA.json.record.json'} <a folder of your own>/), and run "
            f"again") in clash.stderr and "delete" not in clash.stderr
    assert (tmp_path / "keyA.json").read_bytes() == key_a and not (tmp_path / "batchB").exists()
    assert export("ppo", "batchA", "keyA.json").returncode == 0  # the same batch again: the same key, allowed
    assert (tmp_path / "keyA.json").read_bytes() == key_a
    hidden = export("a2c", "batchB", "batchA/keyB.json")  # inside the batch handed to annotators: unblinded
    assert hidden.returncode == 2 and (f"--key {tmp_path / 'batchA' / 'keyB.json'} lies inside {tmp_path / 'batchA'}, "
                                       f"the output folder of stage export_human_eval") in hidden.stderr
    assert not (tmp_path / "batchA" / "keyB.json").exists() and not (tmp_path / "batchB").exists()
    assert export("a2c", "batchB", "keyB.json").returncode == 0
    batch_b = hb.read_batch(tmp_path / "batchB")

    key = json.loads(key_a)["ids"]
    answers = tmp_path / "answers.jsonl"
    io.write_jsonl(answers, [{"annotator": "alice", "item_id": item["item_id"], "at": "2024-01-01T00:00:00Z",
                              "answer": {"choice": "A" if key[item["choice_A_id"]] == "ppo" else "B"}}
                             for item in batch_a.items])
    wrong = _stage("import_human_eval", "--batch", tmp_path / "batchA", "--key", tmp_path / "keyB.json", "--answers",
                   answers, "--out", tmp_path / "imported")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert (f"keyB.json belongs to batch {batch_b.tag}, not to {tmp_path / 'batchA'} ({batch_a.tag}); give the key "
            f"written with this batch") in wrong.stderr
    assert not (tmp_path / "imported").exists()
    right = _stage("import_human_eval", "--batch", tmp_path / "batchA", "--key", tmp_path / "keyA.json", "--answers",
                   answers, "--out", tmp_path / "imported")
    assert right.returncode == 0, right.stderr
    rows = {r["method"]: r["value"] for r in io.read_json(tmp_path / "imported" / "table_rows.json")}
    assert rows == {"ppo": 1.0, "sup": 0.0}


def test_an_answered_batch_is_kept_before_a_re_export_and_its_answers_name_the_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Snakemake deletes a batch and its key before their export reruns (the predictions changed), so the export's
    refusal to replace another batch's key never fires: the check before any job keeps the answered batch, once per
    content, and answers of it, imported against the new batch, say so and name the copy."""
    from grueflow.stale import keep_answered

    monkeypatch.chdir(tmp_path)
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file, answered = Path("results/human/t/keys/ppo_vs_sup_seed0.json"), Path("data/human/t/ppo_vs_sup_seed0")

    def export(first: str, wall_time: float) -> hb.Batch:
        batch, key = hb.pairwise_batch((first, _predictions(first)), ("sup", _predictions("sup")), "imdb", 0)
        hb.write_batch(batch, folder, key, key_file, finish=lambda tmp: io.write_json(
            tmp / io.PROVENANCE_RECORD, {"git_commit": "x", "wall_time_s": wall_time}))
        return batch

    before = export("ppo", 1.0)
    io.write_jsonl(answered / "answers.jsonl", [{"annotator": "alice", "item_id": i["item_id"],
                                                 "answer": {"choice": "A"}} for i in before.items])
    entries = [(folder, key_file, answered)]
    lines = keep_answered(Path("."), entries)
    kept, kept_key = hb.kept_batch(hb.read_batch(folder), before.tag)
    assert kept.name.startswith("ppo_vs_sup_seed0@") and kept_key.name.startswith("ppo_vs_sup_seed0.json@")
    assert lines == [f"grueflow: {folder} has answers in {answered}; a copy of it is kept in {kept}, its key in "
                     f"{kept_key} (an upstream change that alters its predictions exports it again, replacing it)"]
    assert str(kept).startswith(".grueflow/replaced/results/human/t/batches/") and (kept_key / key_file.name
                                                                                   ).stat().st_mode & 0o777 == 0o600
    assert hb.read_key(kept_key / key_file.name, hb.read_batch(kept))  # the map from the answers' ids to systems
    os.utime(key_file, (1, 1))  # the stale check stamps a key: its content is kept already
    assert keep_answered(Path("."), entries) == []
    key_file.unlink()  # as Snakemake deletes the outputs; the seeded export writes the same batch again
    assert export("ppo", 2.0).tag == before.tag and keep_answered(Path("."), entries) == []
    assert len(list(kept.parent.iterdir())) == 1  # once per content, however the run went

    shutil.rmtree(folder)
    key_file.unlink()
    after = export("a2c", 3.0)  # the predictions changed: another batch
    with pytest.raises(io.DataError) as err:
        results.read_answers(answered / "answers.jsonl", hb.read_batch(folder))
    assert str(err.value) == (
        f"{answered / 'answers.jsonl'} holds answers to batch {before.tag} (line 1: item 'P{before.tag}-00001'), and "
        f"the batch now is {after.tag} ({folder}): it was exported again since (its predictions changed), or the file "
        f"answers another batch; to import these answers, undo the change that altered the predictions and run "
        f"again, which exports the earlier batch again (the export is seeded; a copy of it is kept in {kept}, its key "
        f"in {kept_key}), or import them by hand from that copy (python stages/import_human_eval.py --batch {kept} "
        f"--key {kept_key / key_file.name} --answers {answered / 'answers.jsonl'} --out <a new folder>), or answer "
        f"the new one")
    _results_csv(answered / "results.csv", kept, {"W1": {i["item_id"]: {"choice": "B"} for i in before.items}})
    with pytest.raises(io.DataError, match=re.escape(f"results.csv holds answers to batch {before.tag} (row 2: item "
                                                     f"'P{before.tag}-00001'), and the batch now is {after.tag}")
                       + r".*" + re.escape(f"(the export is seeded; a copy of it is kept in {kept}, its key in "
                                           f"{kept_key}), or import them by hand from that copy (python "
                                           f"stages/import_human_eval.py --batch {kept} --key "
                                           f"{kept_key / key_file.name} --answers {answered / 'results.csv'} "
                                           f"--out <a new folder>), or answer the new one")):
        results.read_answers(answered / "results.csv", hb.read_batch(folder))
    assert [line.split(";")[0] for line in keep_answered(Path("."), entries)] == [
        f"grueflow: {folder} has answers in {answered}"]  # the new batch, answered in time, is kept too
    assert len(list(kept.parent.iterdir())) == 2


def test_answers_to_a_re_exported_batch_import_by_hand_from_the_copy_kept_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README says to import the answers to an answered batch, re-exported since, "by hand" from the copy kept in
    .grueflow/replaced/; the import refused that copy (its stage.json records the batch's own path) and said to
    delete it and rerun, which lost the only copy of the batch and made its key useless. A batch is what its tag
    says: the import takes a copy, there or anywhere, whose stage.json is as its export wrote it."""
    from grueflow.stale import keep_answered

    monkeypatch.chdir(tmp_path)
    (tmp_path / io.PROJECT_MARKER).write_text("")
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file, answered = Path("results/human/t/keys/ppo_vs_sup_seed0.json"), Path("data/human/t/ppo_vs_sup_seed0")

    def export(first: str) -> tuple[hb.Batch, dict[str, str]]:
        batch, key = hb.pairwise_batch((first, _predictions(first)), ("sup", _predictions("sup")), "imdb", 0)
        hb.write_batch(batch, folder, key, key_file, finish=lambda tmp: io.write_stage_record(
            tmp, stage="export_human_eval", params={}, inputs={}, wall_time_s=0.0))
        return batch, key

    before, key = export("ppo")
    io.write_jsonl(answered / "answers.jsonl", [
        {"annotator": "alice", "item_id": i["item_id"], "answer": {"choice": "A" if key[i["choice_A_id"]] == "ppo"
                                                                   else "B"}} for i in before.items])
    keep_answered(Path("."), [(folder, key_file, answered)])
    kept, kept_key = hb.kept_batch(hb.read_batch(folder), before.tag)
    shutil.rmtree(folder)
    key_file.unlink()
    after, _ = export("a2c")  # the predictions changed: another batch
    with pytest.raises(io.DataError) as err:
        results.read_answers(answered / "answers.jsonl", hb.read_batch(folder))
    by_hand = (f"python stages/import_human_eval.py --batch {kept} --key {kept_key / key_file.name} --answers "
               f"{answered / 'answers.jsonl'} --out <a new folder>")
    assert str(err.value).endswith(f"(the export is seeded; a copy of it is kept in {kept}, its key in {kept_key}), or "
                                   f"import them by hand from that copy ({by_hand}), or answer the new one")

    def import_by_hand(batch: Path, out: str) -> subprocess.CompletedProcess:
        command = by_hand.replace(f"--batch {kept}", f"--batch {batch}").replace("<a new folder>", out).split()
        return subprocess.run([sys.executable, str(ROOT / command[1]), *command[2:]], capture_output=True, text=True)

    moved = tmp_path / "old" / "batch"
    shutil.copytree(kept, moved, symlinks=True)  # cp -a of the copy, elsewhere
    for batch, out in ((kept, "imported"), (moved, "imported_moved")):
        done = import_by_hand(batch, out)
        assert done.returncode == 0, done.stderr
        assert (f"{batch} is a copy of the stage folder written at {folder} (its stage.json records that path as its "
                f"output): what it holds is that run's") in done.stderr
        rows = {r["method"]: r["value"] for r in io.read_json(Path(out) / "table_rows.json")}
        assert rows == {"ppo": 1.0, "sup": 0.0}
        assert len(io.read_jsonl(Path(out) / "preferences.jsonl")) == len(before.items)
    record = io.read_json(moved / io.STAGE_RECORD)
    io.write_json(moved / io.STAGE_RECORD, {**record, "note": "mine"})  # a record edited by hand vouches for nothing
    edited = import_by_hand(moved, "imported_edited")
    assert edited.returncode == 2 and "Traceback" not in edited.stderr
    assert (f"error: --batch {moved}: {moved} is a copy of the stage folder written at {folder} (its stage.json "
            f"records that path as its output), and that stage.json is not as its stage wrote it (edited by hand), "
            f"so nothing vouches for what the folder holds; give a copy whose stage.json is as written, or the "
            f"folder at {folder}\n") in edited.stderr
    assert not Path("imported_edited").exists()
    # another stage given a copy grueflow kept is refused, with advice that keeps the copy
    with pytest.raises(io.DataError) as refused:
        io.check_written_here(kept / "items.jsonl", "--predictions")
    assert str(refused.value) == (
        f"--predictions {kept / 'items.jsonl'}: {kept} is a copy of the stage folder written at {folder} (its "
        f"stage.json records that path as its output): what it holds is that run's, not the run its path names; it "
        f"is the copy grueflow kept of {folder} before a rerun replaced that folder, and may be all that is left of "
        f"that run's output: keep it; to use it as that run's, move the folder at {folder} aside and copy this one "
        f"back there (cp -a {kept} {folder}), then give {folder}")


def test_a_batch_whose_predictions_changed_since_its_export_is_refused_by_the_import_and_the_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the predictions a batch was exported from change (evaluations rebuilt after a params change), the stale
    check exports the batch again before Snakemake imports answers to it, and the import then refuses the answers to
    the earlier batch. By hand and under DVC, which builds no Likert batch, nothing exports it again: the table
    reported the earlier texts' ratings as the methods', exit 0. The table and the import refuse the batch in one
    line naming the changed predictions and the export to run; the answers to it still import from the copy that
    export keeps, which is the earlier batch by choice."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / io.PROJECT_MARKER).write_text("")
    runs = {method: Path(f"results/eval/t/{method}/seed0/predictions.jsonl") for method in ("ppo", "sup")}

    def evaluate(method: str, build: str) -> None:
        runs[method].parent.mkdir(parents=True, exist_ok=True)
        io.write_jsonl(runs[method], [{"id": p.id, "prompt": p.prompt, "generation": f"{build} {p.generation}"}
                                      for p in _predictions(method)])

    def run(script: str, *args: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True)

    for method in runs:
        evaluate(method, "first")
    folder, answered = Path("results/human/t/batches/likert_seed0"), Path("data/human/t/likert_seed0")
    export = (f"python stages/export_human_eval.py --kind likert --criteria imdb --seed 0 --predictions "
              f"ppo={runs['ppo']} sup={runs['sup']} --out {folder}")
    assert run(*export.split()[1:]).returncode == 0
    before = hb.read_batch(folder)
    io.write_jsonl(answered / "answers.jsonl", [{"annotator": "alice", "item_id": item["item_id"],
                                                 "answer": {"coherence": 4, "sentiment": 2}} for item in before.items])

    def import_answers(batch: Path, out: str) -> subprocess.CompletedProcess:
        return run("stages/import_human_eval.py", "--batch", batch, "--answers", answered, "--out", out)

    def table(imported: str) -> subprocess.CompletedProcess:
        return run("stages/human_eval_table.py", "--imports", imported, "--out-csv", "t.csv", "--out-md", "t.md")

    assert import_answers(folder, "imported").returncode == 0 and table("imported").returncode == 0
    evaluate("ppo", "second")  # ppo's evaluation rebuilt: other texts
    rows = Path("t.csv").read_bytes()
    refusal = (f"{folder}, which was exported from files that changed since: {runs['ppo']} (evaluations rebuilt "
               f"after a params or code change); its items are not the texts those methods produce now, and their "
               f"ratings would be reported as theirs: export the batch again (snakemake --cores 1 {folder} under "
               f"Snakemake; under DVC or by hand: {export}), have it answered and import the answers, then ")
    remedy = (" (the export keeps a copy of this batch in .grueflow/replaced/, from which the answers to it still "
              "import by hand, as ratings of the earlier texts); or undo the change and rebuild those evaluations\n")
    refused = table("imported")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.endswith(f"error: imported holds the answers to {refusal}build the table again{remedy}")
    assert Path("t.csv").read_bytes() == rows
    by_hand = import_answers(folder, "imported_again")
    assert by_hand.returncode == 2 and not Path("imported_again").exists()
    assert by_hand.stderr.endswith(f"error: --batch {refusal}build the human-evaluation table again{remedy}")
    assert run(*export.split()[1:]).returncode == 0  # the export the refusal names: the earlier batch is kept
    kept = hb.kept_batch(hb.read_batch(folder), before.tag)[0]
    earlier = import_answers(kept, "imported_earlier")  # its answers, as ratings of the earlier texts by choice
    assert earlier.returncode == 0, earlier.stderr
    assert table("imported_earlier").returncode == 0
    assert "was imported from files that are not those there now" in table("imported").stderr


def test_an_export_over_a_batch_with_no_answers_yet_keeps_it_and_its_key_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch exported and sent to annotators (no answers back yet) was replaced by a re-export after an upstream
    change with no line and no copy: its key, the only map from the annotators' item ids to the systems, was lost.
    The export (DVC leaves the outs in place for it) copies the batch and its key first, with one line; the same
    batch exported again is no copy and no line; answers to the old batch then name the copies."""
    monkeypatch.chdir(tmp_path)
    paths = _write_predictions(tmp_path / "eval", "ppo", "sup", "a2c")
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file = Path("results/human/t/keys/ppo_vs_sup_seed0.json")

    def export(first: str, *extra: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, ROOT / "stages" / "export_human_eval.py", "--kind", "pairwise",
                               "--criteria", "imdb", "--seed", "0", "--predictions", f"{first}={paths[first]}",
                               f"sup={paths['sup']}", "--out", folder, "--key", key_file, *map(str, extra)],
                              capture_output=True, text=True)

    fresh = export("ppo")
    assert fresh.returncode == 0 and "grueflow:" not in fresh.stderr, fresh.stderr
    before, old_key = hb.read_batch(folder), key_file.read_bytes()
    again = export("ppo")  # the seeded export of the same predictions: nothing replaced
    assert again.returncode == 0 and "grueflow:" not in again.stderr and not Path(".grueflow").exists()
    changed = export("a2c")  # the predictions changed upstream: another batch
    assert changed.returncode == 0, changed.stderr
    after = hb.read_batch(folder)
    kept, kept_key = hb.kept_batch(after, before.tag)
    assert (f"grueflow: {folder} holds batch {before.tag}, which this export replaces by batch {after.tag}; a copy "
            f"of it is kept in {kept}, its key in {kept_key} (annotators may be answering it)") in changed.stderr
    assert str(kept).startswith(f".grueflow/replaced/{folder}@") and (kept_key / key_file.name).read_bytes() == old_key
    assert hb.read_key(kept_key / key_file.name, hb.read_batch(kept))
    assert hb.read_key(key_file, after) and after.tag != before.tag
    io.write_jsonl(Path("answers.jsonl"), [{"annotator": "alice", "item_id": i["item_id"], "answer": {"choice": "A"}}
                                           for i in before.items])
    with pytest.raises(io.DataError, match=re.escape(f"(the export is seeded; a copy of it is kept in {kept}, its "
                                                     f"key in {kept_key}), or import them by hand from that copy")):
        results.read_answers(Path("answers.jsonl"), after)
    cut = export("a2c", "--max-items", 2)  # fewer items of the same batch: its items and key are kept too
    assert cut.returncode == 0 and f"grueflow: {folder} holds batch {after.tag}, which this export replaces by " \
        f"batch {after.tag}; a copy of it is kept in " in cut.stderr
    assert len(list(kept.parent.iterdir())) == 2 and len(list(kept_key.parent.iterdir())) == 2


def test_a_run_that_exports_a_batch_again_keeps_it_and_its_key_first(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Snakemake deletes a batch and its key before their export reruns: what ``onstart`` keeps of the export jobs a
    run will run, answered or not, once per content; a batch not exported yet is no copy and no line."""
    from grueflow.stale import keep_reexported

    monkeypatch.chdir(tmp_path)
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file = Path("results/human/t/keys/ppo_vs_sup_seed0.json")
    likert = Path("results/human/t/batches/likert_seed0")
    assert keep_reexported(Path("."), [(folder, key_file), (likert, None)]) == []  # a fresh export
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", 0)
    hb.write_batch(batch, folder, key, key_file)
    hb.write_batch(hb.likert_batch({"ppo": _predictions("ppo")}, "imdb", 0), likert)
    lines = keep_reexported(Path("."), [(folder, key_file), (likert, None)])
    kept, kept_key = hb.kept_batch(hb.read_batch(folder), batch.tag)
    kept_likert, = hb.kept_batch(hb.read_batch(likert), hb.read_batch(likert).tag)
    assert lines == [
        f"grueflow: {folder} is exported again, replacing it; a copy of it is kept in {kept}, its key in {kept_key} "
        f"(the batch annotators may be answering, and the map from their item ids to the systems)",
        f"grueflow: {likert} is exported again, replacing it; a copy of it is kept in {kept_likert} (the batch "
        f"annotators may be answering, and the map from their item ids to the systems)"]
    assert (kept_key / key_file.name).stat().st_mode & 0o777 == 0o600
    assert keep_reexported(Path("."), [(folder, key_file), (likert, None)]) == []  # once per content


def test_a_batch_folder_put_back_without_its_key_gets_its_key_again_and_the_other_key_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`git checkout` of an older commit and `dvc checkout` put back the batch folder (DVC caches it) but not its key
    (`cache: false`): the export then refused with "the key exists for batch ...; choose another --key path or delete
    it if that batch is abandoned", though that key may be the only record of the newer batch's blinding. The export
    keeps that key with its digest record, says so, and writes the key of the batch the folder holds."""
    monkeypatch.chdir(tmp_path)
    paths = _write_predictions(tmp_path / "eval", "ppo", "sup", "a2c")
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file = Path("results/human/t/keys/ppo_vs_sup_seed0.json")

    def export(first: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, ROOT / "stages" / "export_human_eval.py", "--kind", "pairwise",
                               "--criteria", "imdb", "--seed", "0", "--predictions", f"{first}={paths[first]}",
                               f"sup={paths['sup']}", "--out", folder, "--key", key_file],
                              capture_output=True, text=True)

    assert export("ppo").returncode == 0
    older, older_key = hb.read_batch(folder), key_file.read_bytes()
    assert export("a2c").returncode == 0  # the predictions changed: the older batch and its key are kept
    newer, newer_key = hb.read_batch(folder), key_file.read_bytes()
    kept, _ = hb.kept_batch(newer, older.tag)
    shutil.rmtree(folder)
    shutil.copytree(kept, folder)  # as dvc checkout puts the older batch back; the newer key stays
    again = export("ppo")
    assert again.returncode == 0, again.stderr
    copy, = (p for p in Path(f".grueflow/replaced/{key_file.parent}").iterdir()
             if (p / key_file.name).read_bytes() == newer_key)
    assert (f"grueflow: {key_file} holds the key of batch {newer.tag}, but {folder} holds batch {older.tag} (a batch "
            f"folder put back without its key: `dvc checkout` restores a batch folder, but not its key, which DVC "
            f"does not cache); a copy of that key, with its digest record, is kept in {copy}; this export writes the "
            f"key of batch {older.tag} there") in again.stderr
    assert key_file.read_bytes() == older_key and hb.read_key(key_file, hb.read_batch(folder))
    assert hb.read_key(copy / key_file.name, newer) == json.loads(newer_key)["ids"]  # checked by its record


def _older_batch_put_back() -> tuple:
    """A pairwise batch exported, then exported again with other predictions (the first batch and its key kept in
    .grueflow/replaced/), then the first batch's folder put back (a `cp -a` of the kept copy, a `dvc checkout`) with
    the second batch's key beside it, in the working folder: (folder, key file, the first batch, its key's map, the
    second batch, its key's map, the kept batch copy, the kept key copy)."""
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file = Path("results/human/t/keys/ppo_vs_sup_seed0.json")
    older, older_key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", 0)
    hb.write_batch(older, folder, older_key, key_file)
    newer, newer_key = hb.pairwise_batch(("ppo", _predictions("a2c")), ("sup", _predictions("sup")), "imdb", 0)
    hb.write_batch(newer, folder, newer_key, key_file)
    kept, kept_key = hb.kept_batch(hb.read_batch(folder), older.tag)
    shutil.rmtree(folder)
    shutil.copytree(kept, folder)
    return folder, key_file, older, older_key, newer, newer_key, kept, kept_key


def test_a_run_that_exports_again_a_batch_put_back_without_its_key_keeps_the_key_found_as_another_batchs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under Snakemake a batch folder put back by hand (cp -a of a kept copy) is stale and exported again, and
    ``onstart`` keeps what the export job replaces: the key beside it, another batch's, was said to be "its key"
    and kept without its digest record."""
    from grueflow.stale import keep_reexported

    monkeypatch.chdir(tmp_path)
    folder, key_file, older, _, newer, newer_key, kept, _ = _older_batch_put_back()
    line, = keep_reexported(Path("."), [(folder, key_file)])
    copy, = (p for p in Path(f".grueflow/replaced/{key_file.parent}").iterdir()
             if hb.read_key(p / key_file.name) == newer_key)
    assert line == (f"grueflow: {folder} is exported again, replacing it; a copy of it is kept in {kept}, the key "
                    f"found beside it, of batch {newer.tag} (not its own), in {copy} (the batch annotators may be "
                    f"answering, and the map from their item ids to the systems)")
    assert (copy / f".{key_file.name}.record.json").is_file()


def test_another_batchs_key_beside_a_batch_put_back_names_the_kept_key_and_dvc_repro(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After `git checkout master && dvc checkout` the batch folder is master's again, but the key (not cached by DVC)
    is the branch's: the import refused it as another batch's with "give the key written with this batch", naming
    neither the copy of this batch's key kept in .grueflow/replaced/ nor `dvc repro`, which writes it again."""
    monkeypatch.chdir(tmp_path)
    folder, key_file, older, older_key, newer, _, _, kept_key = _older_batch_put_back()
    batch = hb.read_batch(folder)
    repro = ("where the batch folder was put back without its key (`dvc checkout` restores the folder from DVC's "
             "cache, not the key, which DVC does not cache), run `dvc repro`: the export is seeded, and keeps the key "
             "found here in .grueflow/replaced/ and writes this batch's key again")
    with pytest.raises(io.DataError) as refused:
        hb.read_key(key_file, batch)
    assert str(refused.value) == (f"{key_file} belongs to batch {newer.tag}, not to {folder} ({older.tag}); give the "
                                  f"key written with this batch: a copy of it is kept in {kept_key} (--key "
                                  f"{kept_key / key_file.name}); or {repro}")
    assert hb.read_key(kept_key / key_file.name, batch) == older_key  # the copy named, checked by its record
    shutil.rmtree(".grueflow")  # no copy kept: dvc repro alone
    with pytest.raises(io.DataError) as refused:
        hb.read_key(key_file, batch)
    assert str(refused.value) == (f"{key_file} belongs to batch {newer.tag}, not to {folder} ({older.tag}); give the "
                                  f"key written with this batch; {repro}")


def _link_into_dvc_cache(folder: Path) -> None:
    """Check ``folder`` out as DVC does with ``cache.type: symlink``: each file moved to ``.dvc/cache`` (named by its
    md5, read-only) and linked back by its absolute path."""
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.md5(file.read_bytes()).hexdigest()
        cached = Path(".dvc/cache/files/md5") / digest[:2] / digest[2:]
        cached.parent.mkdir(parents=True, exist_ok=True)
        if cached.exists():
            file.unlink()
        else:
            file.rename(cached)
            cached.chmod(0o444)
        file.symlink_to(cached.resolve())


def test_a_batch_checked_out_as_links_into_dvcs_cache_is_kept_as_its_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With DVC's cache.type symlink every file of a batch folder is a link into .dvc/cache: the copy kept of an
    answered batch held only those links, though its line said "a copy of it is kept", and `dvc gc` left it dangling;
    and the export, which read no batch through a link, replaced such a batch with no copy kept."""
    from grueflow.stale import keep_answered

    monkeypatch.chdir(tmp_path)
    Path(".dvc").mkdir()
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file = Path("results/human/t/keys/ppo_vs_sup_seed0.json")
    answers = Path("data/human/t/ppo_vs_sup_seed0")
    older, older_key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", 0)
    hb.write_batch(older, folder, older_key, key_file)
    _link_into_dvc_cache(folder)
    newer, newer_key = hb.pairwise_batch(("ppo", _predictions("a2c")), ("sup", _predictions("sup")), "imdb", 0)
    lines = hb.write_batch(newer, folder, newer_key, key_file)
    kept, kept_key = hb.kept_batch(hb.read_batch(folder), older.tag)
    assert lines == [f"grueflow: {folder} holds batch {older.tag}, which this export replaces by batch {newer.tag}; "
                     f"a copy of it is kept in {kept}, its key in {kept_key} (annotators may be answering it)"]
    _link_into_dvc_cache(folder)
    line, = keep_answered(Path("."), [(folder, key_file, answers)])
    kept_newer, kept_newer_key = hb.kept_batch(hb.read_batch(folder), newer.tag)
    assert line == (f"grueflow: {folder} has answers in {answers}; a copy of it is kept in {kept_newer}, its key in "
                    f"{kept_newer_key} (an upstream change that alters its predictions exports it again, replacing it)")
    assert keep_answered(Path("."), [(folder, key_file, answers)]) == []  # the same content: copied once
    shutil.rmtree(".dvc/cache")  # as `dvc gc` removes the objects no kept commit names
    for copy, key_copy, batch, key in ((kept, kept_key, older, older_key), (kept_newer, kept_newer_key, newer,
                                                                          newer_key)):
        assert not any(p.is_symlink() for p in copy.rglob("*"))
        assert hb.read_batch(copy).items == batch.items
        assert hb.read_key(key_copy / key_file.name, hb.read_batch(copy)) == key


def test_a_kept_key_keeps_its_digest_record_so_an_import_from_it_is_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The copy of a replaced batch's key in .grueflow/replaced/ lacked the digest record its export wrote beside it:
    the import grueflow advises from that copy warned "importing it unchecked", and a kept key with one item's two
    systems swapped imported with the win rates flipped."""
    monkeypatch.chdir(tmp_path)
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_file = Path("results/human/t/keys/ppo_vs_sup_seed0.json")
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", 0)
    hb.write_batch(batch, folder, key, key_file)
    other, other_key = hb.pairwise_batch(("ppo", _predictions("a2c")), ("sup", _predictions("sup")), "imdb", 0)
    assert hb.write_batch(other, folder, other_key, key_file)  # a re-export: the batch and its key kept
    kept, kept_key = hb.kept_batch(hb.read_batch(folder), batch.tag)
    copy = kept_key / key_file.name
    assert (kept_key / f".{key_file.name}.record.json").stat().st_mode & 0o777 == 0o600
    with caplog.at_level(logging.WARNING, logger="grueflow.human.batch"):
        assert hb.read_key(copy, hb.read_batch(kept)) == key
    assert "unchecked" not in caplog.text
    a, b = batch.items[0]["choice_A_id"], batch.items[0]["choice_B_id"]
    io.write_json(copy, hb.key_document(batch, {**key, a: key[b], b: key[a]}))
    with pytest.raises(io.DataError, match=re.escape(
            f"{copy} is not the key its export wrote: its bytes differ from the digest recorded beside it in "
            f"{kept_key / ('.' + key_file.name + '.record.json')} (edited by hand, or merged?)")):
        hb.read_key(copy, hb.read_batch(kept))


def test_a_key_that_names_no_batch_is_refused_unless_accepted_as_legacy(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    hb.write_batch(batch, tmp_path / "batch", key, tmp_path / "key.json")
    back = hb.read_batch(tmp_path / "batch")
    io.write_json(tmp_path / "old.json", key)  # the bare id -> system object keys were before they named their batch
    with pytest.raises(io.DataError, match=re.escape(
            f"old.json names no batch (a key written before keys named their batch), so nothing shows it belongs to "
            f"{tmp_path / 'batch'} ({batch.tag}); if it was written with that batch, rerun with --legacy-key to "
            f"import it unchecked")):
        hb.read_key(tmp_path / "old.json", back)
    with caplog.at_level(logging.WARNING, logger="grueflow.human.batch"):
        assert hb.read_key(tmp_path / "old.json", back, legacy_ok=True) == key
    assert "old.json names no batch (written before keys named their batch): importing" in caplog.text
    # a key of this batch's first two items only (the same tag: --max-items) does not cover the whole batch
    short = {i: s for i, s in key.items() if i in batch.head(2).opaque_ids()}
    io.write_json(tmp_path / "short.json", hb.key_document(batch, short))
    with pytest.raises(io.DataError, match=r"short\.json lacks 4 of the opaque ids of .*batch \(e\.g\. "):
        hb.read_key(tmp_path / "short.json", back)
    # a batch exported before item ids carried a tag (P00001...) still reads, and imports with its legacy key
    items = (tmp_path / "batch" / hb.ITEMS).read_text().replace(f'"P{batch.tag}-', '"P')
    (tmp_path / "batch" / hb.ITEMS).write_text(items)
    untagged = hb.read_batch(tmp_path / "batch")
    assert untagged.tag is None and untagged.items[0]["item_id"] == "P00001"
    assert hb.read_key(tmp_path / "old.json", untagged, legacy_ok=True) == key
    with pytest.raises(io.DataError, match=r"old\.json names no batch .* belongs to .*batch \(no tag\)"):
        hb.read_key(tmp_path / "old.json", untagged)


def test_a_damaged_key_says_how_to_get_it_back(tmp_path: Path) -> None:
    """A pipeline's key emptied or cut failed every run with "give the key the export wrote", though moving it aside
    and rerunning exports the same key again."""
    keys = tmp_path / "results" / "human" / "sentiment" / "keys"
    keys.mkdir(parents=True)
    batches = tmp_path / "results" / "human" / "sentiment" / "batches"
    rerun = (f"; if it is damaged or lost, move it and the batch folder {batches / 'ppo_vs_sup_seed0'} out of "
             f"results/ and rerun the pipeline, which exports the same batch and key again (the export is seeded)")
    (keys / "ppo_vs_sup_seed0.json").write_text("{}\n")
    with pytest.raises(io.DataError) as emptied:
        hb.read_key(keys / "ppo_vs_sup_seed0.json")
    assert str(emptied.value) == (f"{keys / 'ppo_vs_sup_seed0.json'}: a pairwise key maps opaque ids to system "
                                  f"names; give the key the export wrote{rerun}")
    (keys / "ppo_vs_sup_seed0.json").write_text('{"batch_tag": "3f2a", "ids": {"A')
    with pytest.raises(io.DataError, match=r"ppo_vs_sup_seed0\.json: not readable JSON \(.*\); give the key the "
                                           rf"export wrote{re.escape(rerun)}$"):
        hb.read_key(keys / "ppo_vs_sup_seed0.json")
    (tmp_path / "key.json").write_text("{}\n")  # a key of one's own export, outside the pipeline's layout
    with pytest.raises(io.DataError, match=r"key\.json: a pairwise key maps opaque ids to system names; give the key "
                                           r"the export wrote; if it is damaged or lost, export the batch again from "
                                           r"the same predictions with the same seed, which writes the same key$"):
        hb.read_key(tmp_path / "key.json")


def test_a_key_emptied_or_cut_after_its_export_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline's key emptied or cut before the import was never re-exported: it is in no manifest, and every run
    failed on it. Its export records its digest beside it, privately, as the tables' stages do."""
    from grueflow.stale import stale_outputs

    monkeypatch.chdir(tmp_path)  # the export records the key's path as given: relative to the project
    batch, key = _pairwise(seed=0)
    key_path = Path("results/human/sentiment/keys/ppo_vs_sup_seed0.json")
    hb.write_batch(batch, "results/human/sentiment/batches/ppo_vs_sup_seed0", key, key_path)
    record = io.files_record(key_path)
    assert record.stat().st_mode & 0o777 == 0o600 and key_path.stat().st_mode & 0o777 == 0o600
    assert stale_outputs(Path("results"), Path("results/grue_table.csv"), [], {key_path: []}) == {}
    whole = key_path.read_bytes()
    for damaged in (b"{}\n", whole[:40]):
        key_path.write_bytes(damaged)
        assert stale_outputs(Path("results"), Path("results/grue_table.csv"), [], {key_path: []}) == {
            key_path: "it is not what its stage wrote (edited or replaced since)"}
    key_path.unlink()  # deleted, as Snakemake does before it reruns the export: the same key again
    hb.write_batch(batch, "results/human/sentiment/batches/ppo_vs_sup_seed0", key, key_path)
    assert key_path.read_bytes() == whole
    assert stale_outputs(Path("results"), Path("results/grue_table.csv"), [], {key_path: []}) == {}


def test_write_batch_replaces_only_its_own_key_and_a_failure_writes_neither(tmp_path: Path) -> None:
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    other, other_key = hb.pairwise_batch(("a2c", _predictions("a2c")), ("sup", _predictions("sup")), "imdb", seed=0)
    hb.write_batch(batch, tmp_path / "a", key, tmp_path / "key.json")
    written = (tmp_path / "key.json").read_bytes()
    with pytest.raises(io.DataError, match=re.escape(f"key.json: the key exists for batch {batch.tag}; it may be the "
                                                     f"only map from that batch's item ids to the systems: choose "
                                                     f"another --key path, or move it aside")):
        hb.write_batch(other, tmp_path / "b", other_key, tmp_path / "key.json")
    assert (tmp_path / "key.json").read_bytes() == written and not (tmp_path / "b").exists()
    head = batch.head(2)
    with pytest.raises(io.DataError, match=rf"key\.json: the key exists for batch {batch.tag} with other items"):
        hb.write_batch(head, tmp_path / "b", {i: s for i, s in key.items() if i in head.opaque_ids()},
                       tmp_path / "key.json")  # the key of the batch in "a", not of one "b" holds
    assert not (tmp_path / "b").exists()
    assert hb.write_batch(batch, tmp_path / "a", key, tmp_path / "key.json") == []  # the same batch and key again
    assert (tmp_path / "key.json").read_bytes() == written and not (tmp_path / ".grueflow").exists()
    io.write_json(tmp_path / "old.json", key)
    with pytest.raises(io.DataError, match=r"old\.json: the key exists for a batch exported before keys named their "
                                           r"batch; it may be the only map from that batch's item ids to the systems: "
                                           r"choose another --key path, or move it aside"):
        hb.write_batch(batch, tmp_path / "a", key, tmp_path / "old.json")

    def fail(folder: Path) -> None:
        raise RuntimeError("the stage record could not be written")

    with pytest.raises(RuntimeError):
        hb.write_batch(other, tmp_path / "b", other_key, tmp_path / "b.json", finish=fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".key.json.record.json", "a", "key.json", "old.json"]
    # no key, key record, folder or temp file of the failed batch
    with pytest.raises(ValueError, match="a Likert batch has no key"):
        hb.write_batch(hb.likert_batch({"ppo": _predictions("ppo")}, "imdb", 0), tmp_path / "l", key,
                       tmp_path / "l.json")


def test_a_batch_whose_item_ids_carry_two_tags_is_refused(tmp_path: Path) -> None:
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    other, _ = hb.pairwise_batch(("a2c", _predictions("a2c")), ("sup", _predictions("sup")), "imdb", seed=0)
    mixed = hb.Batch("pairwise", "imdb", 0, (*batch.items[:2], *other.items[2:]))
    hb.write_batch(mixed, tmp_path / "mixed", key, tmp_path / "key.json")
    with pytest.raises(io.DataError, match=rf"items\.jsonl: its item ids carry 2 batch tags \(.*{other.tag}.*\), where "
                                           rf"one batch's share one; export the batch again"):
        hb.read_batch(tmp_path / "mixed")


def test_the_human_table_refuses_outputs_that_clash_before_any_work(tmp_path: Path) -> None:
    folder = _finished_import(tmp_path)
    rows = (folder / "table_rows.json").read_bytes()

    def table(csv_path: Path, md_path: Path) -> subprocess.CompletedProcess:
        return _stage("human_eval_table", "--imports", folder, "--out-csv", csv_path, "--out-md", md_path)

    same = table(tmp_path / "t.out", tmp_path / "t.out")
    assert same.returncode == 2 and "Traceback" not in same.stderr
    assert (f"--out-csv and --out-md are both {tmp_path / 't.out'}; the Markdown would replace the CSV: give two "
            f"different paths") in same.stderr
    inside = table(folder / "table_rows.json", tmp_path / "t.md")
    assert inside.returncode == 2
    assert (f"--out-csv {folder / 'table_rows.json'} lies inside the --imports folder {folder}, whose files the table "
            f"reads: write it outside every import folder") in inside.stderr
    assert table(tmp_path / "t.csv", folder).returncode == 2  # an output that is the import folder itself
    assert (folder / "table_rows.json").read_bytes() == rows and not (tmp_path / "t.md").exists()
    assert not (tmp_path / "t.out").exists()
    suite = tmp_path / "suite.yaml"  # a slip onto the active suite, or onto a batch's key, replaced it, exit 0
    suite.write_text("tasks: [sentiment]\n")
    key = tmp_path / "key.json"
    io.write_json(key, {hb.KEY_TAG: "b1", hb.KEY_IDS: {"b1-x": "ppo", "b1-y": "sup"}})
    for csv_path, md_path, flag, suffix in ((tmp_path / "t.csv", suite, "--out-md", ".md"),
                                            (key, tmp_path / "t.md", "--out-csv", ".csv")):
        slip = table(csv_path, md_path)
        named = md_path if flag == "--out-md" else csv_path
        assert slip.returncode == 2 and (f"{flag} {named}: this output is written to a {suffix} file; give a path "
                                         f"ending in {suffix}") in slip.stderr
    assert suite.read_text() == "tasks: [sentiment]\n" and io.read_json(key)[hb.KEY_TAG] == "b1"
    notes = tmp_path / "notes.md"  # a file of the right kind that no earlier run wrote
    notes.write_text("# My notes\n")
    refused = table(tmp_path / "t.csv", notes)
    assert refused.returncode == 2 and (f"--out-md {notes} exists and is not what this output writes (an earlier "
                                        f"run's table); give a new path") in refused.stderr
    assert notes.read_text() == "# My notes\n"
    assert table(tmp_path / "t.csv", tmp_path / "t.md").returncode == 0
    assert table(tmp_path / "t.csv", tmp_path / "t.md").returncode == 0  # its own earlier table is replaced


def test_a_pairwise_batch_leaves_out_samples_whose_two_completions_are_the_same_text(tmp_path: Path,
                                                                                      caplog: pytest.LogCaptureFixture
                                                                                      ) -> None:
    ppo, sup = _predictions("ppo", 6), _predictions("sup", 6)
    ppo[1] = hb.Prediction("test-1", "p1", "the same  text ")  # equal after whitespace normalisation
    sup[1] = hb.Prediction("test-1", "p1", "the same text")
    ppo[4] = sup[4]
    with caplog.at_level(logging.INFO, logger="grueflow.human.batch"):
        batch, key = hb.pairwise_batch(("ppo", ppo), ("sup", sup), "imdb", seed=0)
    assert sorted(i["sample_id"] for i in batch.items) == ["test-0", "test-2", "test-3", "test-5"]
    assert batch.identical_pairs_left_out == 2 and len(key) == 8
    assert [r.getMessage() for r in caplog.records] == [
        "left out 2 of the 6 samples 'ppo' and 'sup' share: both gave the same completion (after whitespace "
        "normalisation)"]
    hb.write_batch(batch.head(3), tmp_path / "batch", {k: v for k, v in key.items() if k in batch.head(3).opaque_ids()},
                   tmp_path / "key.json")
    manifest = io.read_json(tmp_path / "batch" / hb.MANIFEST)
    assert (manifest["identical_pairs_left_out"], manifest["n_items"]) == (2, 3)
    assert hb.read_batch(tmp_path / "batch").identical_pairs_left_out == 2
    likert = hb.likert_batch({"ppo": ppo}, "imdb", 0)
    hb.write_batch(likert, tmp_path / "likert")
    assert "identical_pairs_left_out" not in io.read_json(tmp_path / "likert" / hb.MANIFEST)


def test_a_pairwise_export_of_one_source_twice_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "eval"
    folder.mkdir()
    path = _write_predictions(folder, "ppo")["ppo"].rename(folder / "predictions.jsonl")
    for first, second in ((path, path), (folder, path)):
        result = _stage("export_human_eval", "--kind", "pairwise", "--criteria", "imdb", "--seed", 0, "--predictions",
                        f"a={first}", f"b={second}", "--out", tmp_path / "batch", "--key", tmp_path / "key.json")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"--predictions gives {path.resolve()} for more than one method" in result.stderr
        assert not (tmp_path / "batch").exists() and not (tmp_path / "key.json").exists()
    ppo = _predictions("ppo")  # two systems that coincide everywhere: a degenerate batch, kept whole and said so
    with caplog.at_level(logging.WARNING, logger="grueflow.human.batch"):
        batch, _ = hb.pairwise_batch(("a", ppo), ("b", list(ppo)), "imdb", seed=0)
    assert len(batch.items) == 4 and batch.identical_pairs_left_out == 0
    assert "'a' and 'b' give the same completion on all 4 samples they share" in caplog.text


def test_the_preferences_of_two_annotators_load_as_a_preference_set_split_by_sample(tmp_path: Path) -> None:
    from grueflow.preference.data import read_preferences
    from grueflow.preference.reward_model import split_pairs

    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo", 10)), ("sup", _predictions("sup", 10)), "imdb", 0)
    side = {i["item_id"]: "A" if key[i["choice_A_id"]] == "ppo" else "B" for i in batch.items}
    answers = [Answer(who, item, {"choice": choice}) for who in ("alice", "bob") for item, choice in side.items()]
    io.write_jsonl(tmp_path / "preferences.jsonl", results.preferences(batch, key, answers))
    prefs = read_preferences(tmp_path / "preferences.jsonl")  # ids are unique: <batch tag>/<sample id>/<annotator>
    assert len(prefs) == 20 and {p.id for p in prefs} == {f"{batch.tag}/test-{i}/{who}" for i in range(10)
                                                          for who in ("alice", "bob")}
    train, val = split_pairs(prefs, 0.2, seed=0)
    assert len(val) == 4 and len(train) == 16
    assert {p.sample_id for p in train}.isdisjoint(p.sample_id for p in val)  # both judgements on one side


def test_the_preference_files_of_two_batches_of_one_task_join_into_one_preference_set(tmp_path: Path) -> None:
    """Two batches judging the same samples by the same annotators wrote the same ids <sample id>/<annotator>, so
    their files joined were refused with "ids must be unique", and nothing said why or what to do."""
    from grueflow.preference.data import read_preferences

    joined = []
    for method in ("ppo", "a2c"):
        batch, key = hb.pairwise_batch((method, _predictions(method)), ("sup", _predictions("sup")), "imdb", 0)
        side = {i["item_id"]: "A" if key[i["choice_A_id"]] == method else "B" for i in batch.items}
        joined += results.preferences(batch, key, [Answer("alice", item, {"choice": c}) for item, c in side.items()])
    io.write_jsonl(tmp_path / "all.jsonl", joined)
    prefs = read_preferences(tmp_path / "all.jsonl")
    assert len(prefs) == 8 and len({p.id for p in prefs}) == 8 and len({p.sample_id for p in prefs}) == 4
    assert {p.extra["chosen_system"] for p in prefs} == {"ppo", "a2c"}


def test_an_item_whose_two_choices_are_the_same_text_makes_no_preference_row(caplog: pytest.LogCaptureFixture
                                                                              ) -> None:
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo", 3)), ("sup", _predictions("sup", 3)), "imdb", 0)
    first = dict(batch.items[0], choice_B=batch.items[0]["choice_A"] + " ")  # as a batch exported before the check
    legacy = hb.Batch("pairwise", "imdb", 0, (first, *batch.items[1:]))
    answers = [Answer("alice", item["item_id"], {"choice": "A"}) for item in legacy.items]
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        rows = results.preferences(legacy, key, answers)
    assert [r["sample_id"] for r in rows] == [i["sample_id"] for i in batch.items[1:]]
    assert [r.getMessage() for r in caplog.records] == [
        "left 1 judgement(s) out of the preferences: their item's two choices are the same text"]


def test_judgements_between_identical_texts_count_in_no_win_rate_and_the_table_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    """Two systems that gave the same completion everywhere (a batch kept whole) had every press of `a` counted as
    a win: the table showed a 75/25 split that was only the A/B draw."""
    same = _predictions("ppo", 8)
    batch, key = hb.pairwise_batch(("ppo", same), ("sup", list(same)), "imdb", seed=2)
    answers = [Answer("alice", item["item_id"], {"choice": "A"}) for item in batch.items]
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        rows = results.pairwise_rows(batch, key, answers, "imdb")
        stats = results.agreement(batch, answers, key)
    assert [(r["method"], r["n"], r["n_judgments"], r["ties"], r["value"], r["ci_low"]) for r in rows] == [
        ("ppo", 0, 0, 0, None, None), ("sup", 0, 0, 0, None, None)]
    assert [r.getMessage() for r in caplog.records if r.name == "grueflow.human.results"] == [
        "left 8 judgement(s) out of the win rates: their item's two choices are the same text"]
    assert stats["judgements_identical_choices_left_out"] == 8
    markdown = results.to_markdown([{**r, "batch": "pair"} for r in rows], {"imports/pair": stats})
    assert ("| imdb | ppo | sup | 0 | 0 |  | pair |\n| imdb | sup | ppo | 0 | 0 |  | pair |\n\n"
            "Note: batch pair: 8 judgement(s) of items whose two choices are the same text are left out of the win "
            "rates (a choice between identical texts prefers neither method).\n") in markdown
    # a batch exported before such items were left out: only its items of two different texts count
    distinct, dkey = hb.pairwise_batch(("ppo", _predictions("ppo", 3)), ("sup", _predictions("sup", 3)), "imdb", 0)
    first = dict(distinct.items[0], choice_B=distinct.items[0]["choice_A"])
    legacy = hb.Batch("pairwise", "imdb", 0, (first, *distinct.items[1:]))
    answers = [Answer(who, item["item_id"], {"choice": "A"}) for who in ("alice", "bob") for item in legacy.items]
    wins = {item["item_id"]: dkey[item["choice_A_id"]] for item in legacy.items[1:]}
    rows = {r["method"]: r for r in results.pairwise_rows(legacy, dkey, answers, "imdb")}
    assert rows["ppo"]["n"] == rows["sup"]["n"] == 4 and rows["ppo"]["ties"] == 0
    assert rows["ppo"]["value"] == round(2 * list(wins.values()).count("ppo") / 4, 4)
    assert results.agreement(legacy, answers, dkey)["judgements_identical_choices_left_out"] == 2
    assert "judgements_identical_choices_left_out" not in results.agreement(distinct, [], dkey)


# Repeated answers: the latest by time wins; two different answers nothing orders are refused


def _likert(n: int = 4) -> hb.Batch:
    """A Likert batch of ``n`` ppo and ``n`` zero_shot items (criteria coherence, sentiment), prompts with a quote."""
    return hb.likert_batch({m: [hb.Prediction(f"test-{i}", f"p{i}: it's {m}", f"{m} g{i}") for i in range(n)]
                            for m in ("ppo", "zero_shot")}, "imdb", seed=0)


def _answers_file(path: Path, batch: hb.Batch, score: int, at: str | None, who: str = "x") -> Path:
    """One answer of ``who`` to every item of ``batch`` (``score`` on both criteria), ``at`` each unless None."""
    io.write_jsonl(path, [{"annotator": who, "item_id": i["item_id"], **({"at": at} if at else {}),
                           "answer": {"coherence": score, "sentiment": score}} for i in batch.items])
    return path


def _mturk_csv(path: Path, batch: hb.Batch, rows: list[tuple[str, str, str | None, int]]) -> Path:
    """A results CSV of ``rows`` (worker, item id, SubmitTime or None for no column value, score on both criteria)."""
    columns = list(batch.columns)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["WorkerId", "AssignmentStatus", "SubmitTime", *(f"Input.{c}" for c in columns),
                         "Answer.coherence", "Answer.sentiment"])
        for worker, item_id, submitted, score in rows:
            item = batch.item(item_id)
            writer.writerow([worker, "Approved", submitted or "", *(html.escape(item[c]) for c in columns),
                             score, score])
    return path


def test_a_results_row_whose_cells_were_cleared_is_an_empty_row(tmp_path: Path) -> None:
    """Excel keeps a row's commas when its cells are cleared: the row was refused as an answer to item '', where a
    blank line is skipped as the empty spreadsheet row both are."""
    batch = _likert()
    first = batch.items[0]["item_id"]
    path = _mturk_csv(tmp_path / "results.csv", batch, [("W1", first, "Sat Dec 05 10:00:00 PST 2026", 4)])
    with open(path, "a", newline="", encoding="utf-8") as handle:
        handle.write("," * (len(batch.columns) + 4) + "\r\n")
    assert [(a.annotator, a.item_id) for a in results.read_answers(path, batch)] == [("W1", first)]


def _edit_csv(path: Path, edit) -> Path:
    """``path``, a results CSV, rewritten with ``edit(header, rows)``'s header and rows (lists of cells)."""
    with open(path, newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    header, rows = edit(header, rows)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    return path


def _two_workers(path: Path, batch: hb.Batch) -> Path:
    """A results CSV in which W1 scores every item 2 and W2 every item 5."""
    return _mturk_csv(path, batch, [(w, i["item_id"], None, score) for w, score in (("W1", 2), ("W2", 5))
                                    for i in batch.items])


@pytest.mark.parametrize("status", ["REJECTED", "rejected", " Rejected "])
def test_a_rejected_row_is_left_out_whatever_the_case_of_its_status(tmp_path: Path, status: str, caplog) -> None:
    """Only the exact spelling ``Rejected`` was left out: a rejected worker's rows with ``REJECTED`` (a hand edit,
    another platform) were counted in the table without a word."""
    batch = _likert(2)
    path = _edit_csv(_two_workers(tmp_path / "results.csv", batch), lambda header, rows: (header, [
        [status if (c == "AssignmentStatus" and row[0] == "W2") else v for c, v in zip(header, row)] for row in rows]))
    with caplog.at_level(logging.INFO, logger="grueflow.human.results"):
        kept = results.read_answers(path, batch)
    assert {a.annotator for a in kept} == {"W1"} and len(kept) == len(batch.items)
    assert (f"results.csv: left out {len(batch.items)} rejected row(s) (first: row {len(batch.items) + 2}: "
            f"AssignmentStatus {status.strip()!r})") in caplog.text


def test_a_row_marked_in_mturks_reject_column_is_left_out(tmp_path: Path, caplog) -> None:
    """MTurk's results file has ``Approve`` and ``Reject`` columns, where the requester marks each assignment (a
    mark in ``Reject``, the reason shown to the worker, rejects it) before uploading the decisions; the status stays
    ``Submitted`` until MTurk processes them. Rows marked for rejection were imported and counted."""
    batch = _likert(2)
    path = _edit_csv(_two_workers(tmp_path / "results.csv", batch), lambda header, rows: (
        [*header, "Approve", "Reject"], [[*row, "x" if row[0] == "W1" else "", "" if row[0] == "W1" else "spammer"]
                                         for row in rows]))
    with caplog.at_level(logging.INFO, logger="grueflow.human.results"):
        kept = results.read_answers(path, batch)
    assert {a.annotator for a in kept} == {"W1"} and {a.values["coherence"] for a in kept} == {2}
    assert (f"left out {len(batch.items)} rejected row(s) (first: row {len(batch.items) + 2}: Reject 'spammer')"
            in caplog.text)
    _edit_csv(path, lambda header, rows: (header, [[*row[:-1], " "] for row in rows]))  # a blank is no mark
    assert {a.annotator for a in results.read_answers(path, batch)} == {"W1", "W2"}


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_two_results_files_joined_with_cat_name_the_repeated_header_row(tmp_path: Path, bom: str) -> None:
    """``cat a.csv b.csv``, the usual way to join two partial downloads, leaves b's header row in the middle: it was
    refused as an answer to item 'Input.item_id'."""
    batch = _likert(2)
    text = bom + _mturk_csv(tmp_path / "part.csv", batch, [("W1", i["item_id"], None, 3)
                                                           for i in batch.items]).read_text(encoding="utf-8")
    (tmp_path / "joined.csv").write_text(text + text, encoding="utf-8")
    with pytest.raises(io.DataError, match=rf"joined\.csv: row {len(batch.items) + 2} repeats the header row: were "
                                           r"two results files joined \(cat a\.csv b\.csv\)\? Delete that line, or "
                                           r"keep the two files apart in the answers folder, whose files the import "
                                           r"reads together$"):
        results.read_answers(tmp_path / "joined.csv", batch)


def test_a_joined_results_file_whose_second_header_orders_its_columns_otherwise_is_not_to_be_cut(tmp_path: Path):
    """Two downloads joined with ``cat`` whose Answer columns come in other orders: deleting the second header row,
    as the repeated-header refusal advised, imported the second file's rows with their scores swapped between
    criteria, exit 0. A header row that is not row 1's is refused as such, with the advice to split the file."""
    batch = _likert(2)
    first = _mturk_csv(tmp_path / "a.csv", batch, [("W1", i["item_id"], None, 3) for i in batch.items])
    second = _mturk_csv(tmp_path / "b.csv", batch, [("W2", i["item_id"], None, 4) for i in batch.items])
    _edit_csv(second, lambda header, rows: (header[::-1], [row[::-1] for row in rows]))
    (tmp_path / "joined.csv").write_text(first.read_text(encoding="utf-8") + second.read_text(encoding="utf-8"),
                                         encoding="utf-8")
    with pytest.raises(io.DataError, match=rf"joined\.csv: row {len(batch.items) + 2} is a header row with the "
                                           r"columns in another order than row 1's: .* deleting it would swap their "
                                           r"answers: split the file there into two files in the answers folder"):
        results.read_answers(tmp_path / "joined.csv", batch)


def test_a_spreadsheets_empty_columns_right_of_the_data_are_passed_over(tmp_path: Path, caplog) -> None:
    """Excel writes ``,,`` at the end of every line where cells right of the data were once touched: the file was
    refused as naming the column '' twice."""
    batch = _likert(2)
    plain = _two_workers(tmp_path / "plain.csv", batch)
    lines = plain.read_text(encoding="utf-8").splitlines()
    (tmp_path / "excel.csv").write_bytes(("\r\n".join(line + ",," for line in lines) + "\r\n").encode("utf-8"))
    expected = [(a.annotator, a.item_id, a.values) for a in results.read_answers(plain, batch)]
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        assert [(a.annotator, a.item_id, a.values) for a in results.read_answers(tmp_path / "excel.csv", batch)] == \
            expected
    assert "without a name" not in caplog.text
    lines[1] += ",note,"  # a value in an unnamed column: passed over too, with one warning naming it
    (tmp_path / "note.csv").write_text("\n".join(line if k == 1 else line + ",," for k, line in enumerate(lines)))
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        assert [(a.annotator, a.item_id, a.values) for a in results.read_answers(tmp_path / "note.csv", batch)] == \
            expected
    width = len(lines[0].split(","))
    assert (f"note.csv: 1 value(s) lie in columns without a name in the header (first: row 2, column {width + 1}: "
            f"'note'); the import reads only named columns and passed over them") in caplog.text
    (tmp_path / "named_twice.csv").write_text("\n".join(f"{line},WorkerId" if k == 0 else f"{line},W9"
                                                        for k, line in enumerate(lines[:1] + lines[2:])))
    with pytest.raises(io.DataError, match=r"the column\(s\) \['WorkerId'\] appear more than once"):
        results.read_answers(tmp_path / "named_twice.csv", batch)


@pytest.mark.parametrize("label", ["hidden", ""])
def test_a_likert_upload_whose_method_column_was_blinded_imports_by_item_id(tmp_path: Path, label: str,
                                                                            caplog) -> None:
    """A requester who overwrites or clears the ``algorithm`` column before upload (so that a platform showing every
    column does not show the system's name) had the results refused as "the results file of another batch?"; the
    batch knows each item's method by its id."""
    batch = _likert(2)
    plain = _two_workers(tmp_path / "plain.csv", batch)
    expected = [(a.annotator, a.item_id, a.values) for a in results.read_answers(plain, batch)]
    shutil.copy(plain, tmp_path / "blind.csv")
    _edit_csv(tmp_path / "blind.csv", lambda header, rows: (header, [
        [label if c == "Input.algorithm" else v for c, v in zip(header, row)] for row in rows]))
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        answers = results.read_answers(tmp_path / "blind.csv", batch)
    assert [(a.annotator, a.item_id, a.values) for a in answers] == expected
    first = batch.items[0]["algorithm"]
    assert (f"blind.csv: {2 * len(batch.items)} row(s) give a label that differs from the batch's (first: row 2: "
            f"Input.algorithm {label!r} where the batch has {first!r}; blinded before upload?); the import takes each "
            f"item's label from the batch, by Input.item_id") in caplog.text
    assert {r["method"] for r in results.likert_rows(batch, answers, "imdb")} == {"ppo", "zero_shot"}
    _edit_csv(tmp_path / "blind.csv", lambda header, rows: (header, [  # text shown to annotators is still compared
        ["changed" if c == "Input.machine_completion" else v for c, v in zip(header, row)] for row in rows]))
    with pytest.raises(io.DataError, match=r"blind\.csv: row 2: Input\.machine_completion differs from item"):
        results.read_answers(tmp_path / "blind.csv", batch)


def test_an_answers_file_that_is_a_fifo_or_a_device_is_refused_not_skipped(tmp_path: Path) -> None:
    """A FIFO (or a link to /dev/zero) named answers.jsonl in an answers folder was passed over, its answers left
    out without a word; given as --answers it was said not to exist."""
    import os

    from grueflow.human.layout import answer_files

    batch = _likert()
    folder = tmp_path / "answers"
    folder.mkdir()
    os.mkfifo(folder / "page.jsonl")
    (folder / "zero.csv").symlink_to("/dev/zero")
    found = answer_files([folder])
    assert [p.name for p in found] == ["page.jsonl", "zero.csv"]
    for path in found:
        with pytest.raises(io.DataError, match=rf"answers file {re.escape(str(path))} is not a regular file \(a FIFO, "
                                               r"a socket or a device\)"):
            results.read_answer_file(path, batch)


def test_the_answers_files_of_a_folder_are_listed_whatever_else_lies_there(tmp_path: Path) -> None:
    """What the human-evaluation table compares with an import's record: the files the import reads, also where it
    refuses the folder for another entry (a file it does not read, a folder inside, a link to nothing)."""
    from grueflow.human.layout import answer_files, answers_in

    folder = tmp_path / "answers"
    (folder / "sub.jsonl").mkdir(parents=True)
    for name in ("b.jsonl", "a.CSV", "notes.txt", "b.jsonl.cut", ".hidden.jsonl", "~$a.CSV"):
        (folder / name).write_text("x\n")
    (folder / "gone.jsonl").symlink_to(tmp_path / "nowhere")
    assert [p.name for p in answers_in(folder)] == ["a.CSV", "b.jsonl", "gone.jsonl"]
    with pytest.raises(io.DataError, match="symbolic link to nothing"):
        answer_files([folder])


def _all_files(batch: hb.Batch, *paths: Path) -> list[Answer]:
    """What the import stage reads: every file's answers, then the latest of each (annotator, item)."""
    return results.latest_answers(a for p in paths for a in results.read_answer_file(p, batch))


def test_an_older_copy_of_an_answers_file_never_replaces_the_newer_answers(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    batch = _likert()
    new = _answers_file(tmp_path / "answers.jsonl", batch, 5, "2026-12-05T12:00:00+00:00")
    old = _answers_file(tmp_path / "answers_old.jsonl", batch, 1, "2026-12-01T12:00:00+00:00")
    for order in ((new, old), (old, new)):  # the file names' order says nothing about which is newer
        with caplog.at_level(logging.INFO, logger="grueflow.human.results"):
            caplog.clear()
            kept = _all_files(batch, *order)
        assert {(a.values["coherence"], a.values["sentiment"]) for a in kept} == {(5, 5)} and len(kept) == 8
        assert caplog.messages == ["answers given more than once by one annotator to one item: 0 identical repeat(s) "
                                   "counted once, 8 older answer(s) from another file or row replaced by a later one "
                                   "(by time)"]
        assert caplog.records[0].levelname == "WARNING"
    naive = _answers_file(tmp_path / "naive.jsonl", batch, 2, "2026-12-03T12:00:00")  # no zone: UTC, as the page
    assert {a.values["coherence"] for a in _all_files(batch, new, naive, old)} == {5}


def test_a_results_csv_keeps_a_workers_latest_submit_time_whatever_the_row_order(tmp_path: Path) -> None:
    batch = _likert()
    first = batch.items[0]["item_id"]
    for name, rows in (("newer_first.csv", [("W1", first, "Sat Dec 05 10:00:00 PST 2026", 5),
                                            ("W1", first, "Mon Dec 01 10:00:00 PST 2026", 1)]),
                       ("older_first.csv", [("W1", first, "Mon Dec 01 10:00:00 PST 2026", 1),
                                            ("W1", first, "Fri Dec 05 10:00:00 PST 2026", 5)])):  # a wrong weekday
        kept = results.read_answers(_mturk_csv(tmp_path / name, batch, rows), batch)
        assert [(a.annotator, a.item_id, dict(a.values)) for a in kept] == [("W1", first, {"coherence": 5,
                                                                                          "sentiment": 5})]
        assert kept[0].at.isoformat() == "2026-12-05T18:00:00+00:00"
    # a page answer at 17:59 UTC is older than the 10:00 PST (18:00 UTC) submission; at 18:01 it is newer
    page = tmp_path / "page.jsonl"
    for at, expect in (("2026-12-05T17:59:00+00:00", 5), ("2026-12-05T18:01:00Z", 3)):
        io.write_jsonl(page, [{"annotator": "W1", "item_id": first, "answer": {"coherence": 3, "sentiment": 3},
                               "at": at}])
        assert [a.values["coherence"] for a in _all_files(batch, page, tmp_path / "older_first.csv")] == [expect]


@pytest.mark.parametrize("text, expect", [
    ("Sat Dec 05 10:00:00 PST 2026", "2026-12-05T18:00:00+00:00"),
    ("Fri Dec 05 10:00:00 PST 2026", "2026-12-05T18:00:00+00:00"),  # the weekday is not checked
    ("Sun Jul 05 10:00:00 PDT 2026", "2026-07-05T17:00:00+00:00"),
    ("Sat Dec 5 09:03:07 UTC 2026", "2026-12-05T09:03:07+00:00"),
    ("Sat Dec 05 10:00:00 +01:00 2026", "2026-12-05T09:00:00+00:00"),
    ("2026-12-05T10:00:00-08:00", "2026-12-05T18:00:00+00:00"),
    ("2026-12-05 10:00:00", "2026-12-05T10:00:00+00:00"),
    ("", None), ("  ", None), ("Sat Dec 05 10:00:00 XYZT 2026", None), ("Sat Foo 05 10:00:00 PST 2026", None),
    ("Sat Feb 30 10:00:00 PST 2026", None), ("yesterday", None),
])
def test_submit_time_reads_mturks_format_and_iso(text: str, expect: str | None) -> None:
    at = results.submit_time(text)
    assert (at.isoformat() if at is not None else None) == expect


def test_two_different_answers_that_no_time_orders_are_refused_naming_both(tmp_path: Path) -> None:
    batch = _likert()
    first = batch.items[0]["item_id"]
    a = _answers_file(tmp_path / "a.jsonl", batch, 5, None)
    b = _answers_file(tmp_path / "b.jsonl", batch, 1, None)
    with pytest.raises(io.DataError) as err:
        _all_files(batch, a, b)
    assert str(err.value) == (
        f"annotator 'x' gave item {first} two different answers that no time orders: "
        f"{{'coherence': 5, 'sentiment': 5}} ({a} line 1, no time) and {{'coherence': 1, 'sentiment': 1}} "
        f"({b} line 1, no time); remove the one "
        f"that is not their answer (an old copy of an answers file, or a row edited by hand?) and import again")
    same = _answers_file(tmp_path / "same.jsonl", batch, 1, "2026-12-05T12:00:00+00:00")
    timed = _answers_file(tmp_path / "timed.jsonl", batch, 5, "2026-12-05T12:00:00+00:00")
    with pytest.raises(io.DataError, match=r"two different answers that no time orders: .*\(.*same\.jsonl line 1, "
                                           r"at 2026-12-05T12:00:00\+00:00\) and .*timed\.jsonl line 1, at 2026"):
        _all_files(batch, same, timed)
    with pytest.raises(io.DataError, match=r"\(.*b\.jsonl line 1, no time\) and .*timed\.jsonl line 1, at 2026"):
        _all_files(batch, b, timed)  # one time missing: nothing orders them either
    rows = [("W1", first, None, 5), ("W1", first, None, 2)]
    with pytest.raises(io.DataError, match=rf"annotator 'W1' gave item {first} two different answers that no "
                                           r"time orders: .*untimed\.csv row 2, no time\) and .*untimed\.csv row 3, "
                                           r"no time"):
        results.read_answers(_mturk_csv(tmp_path / "untimed.csv", batch, rows), batch)
    rows = [("W1", first, "Sat Dec 05 10:00:00 PST 2026", 5), ("W1", first, "Sat Dec 05 12:00:00 CST 2026", 2)]
    with pytest.raises(io.DataError, match=r"row 2, at 2026-12-05T18:00:00\+00:00\) and .*row 3, at 2026-12-05T18"):
        results.read_answers(_mturk_csv(tmp_path / "same_time.csv", batch, rows), batch)  # 10 PST is 12 CST


def test_one_name_in_two_spellings_on_the_page_is_refused_naming_both_and_their_lines(tmp_path: Path) -> None:
    """A person who typed 'alice', then 'Alice' on the page counted as two annotators, who agreed with each other."""
    batch = _likert()
    at = "2026-12-05T12:00:00+00:00"
    one = _answers_file(tmp_path / "one.jsonl", batch, 3, at, who="alice")
    lines = one.read_text().splitlines()
    again = [line.replace('"alice"', '"Alice"') for line in lines[:3]] + [lines[3].replace('"alice"', '"ALICE"')]
    one.write_text("\n".join(lines + again) + "\n")
    saved = one.read_bytes()
    with pytest.raises(io.DataError) as err:
        results.read_answers(one, batch)
    assert str(err.value) == (
        f"{one}: annotator names 'alice' (lines 1-8), 'Alice' (lines 9-11) and 'ALICE' (line 12) differ only in letter "
        f"case or spacing: one person under 3 spellings on the page, whom the import would count as 3 annotators; "
        f"make them one name in the answers file (e.g. change every 'Alice' and 'ALICE' to 'alice') and import again, "
        f"or, if they are different people, give them names that differ in more than letter case")
    assert one.read_bytes() == saved  # the person's file is theirs to change
    other = _answers_file(tmp_path / "other.jsonl", batch, 3, at, who="Alice")
    with pytest.raises(io.DataError) as err:
        _all_files(batch, _answers_file(tmp_path / "a.jsonl", batch, 3, at, who="alice"), other)
    assert str(err.value).startswith(f"annotator names 'alice' ({tmp_path / 'a.jsonl'} lines 1-8) and 'Alice' "
                                     f"({other} lines 1-8) differ only in letter case or spacing")
    assert "make them one name in the answers files (e.g. change every 'Alice' to 'alice')" in str(err.value)


def test_worker_ids_that_differ_only_in_letter_case_stay_apart_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A platform's worker ids are case-sensitive: the import keeps them exact, and says where two differ in case."""
    batch = _likert()
    first, second = batch.items[0]["item_id"], batch.items[1]["item_id"]
    rows = [("A1B2", first, None, 5), ("a1b2", first, None, 1), ("a1b2", second, None, 1), ("W9", first, None, 3)]
    results_csv = _mturk_csv(tmp_path / "results.csv", batch, rows)
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        kept = results.read_answers(results_csv, batch)
    assert sorted({a.annotator for a in kept}) == ["A1B2", "W9", "a1b2"]
    assert caplog.messages == [
        f"{results_csv}: annotator names 'A1B2' (row 2) and 'a1b2' (row 3 and 1 more row(s)) differ only in letter "
        f"case; a platform's worker ids are case-sensitive, so the import counts them as 2 annotators: if they are "
        f"one person, give their answers one name and import again"]
    page = _answers_file(tmp_path / "page.jsonl", batch, 2, "2026-12-05T12:00:00+00:00", who="w9")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        kept = _all_files(batch, page, results_csv)  # a page name and a worker id: warned of, not refused
    assert {a.annotator for a in kept} == {"A1B2", "a1b2", "W9", "w9"}
    assert any(m.startswith(f"annotator names 'w9' ({page} lines 1-8) and 'W9' ({results_csv} row 5) differ only")
               for m in caplog.messages)


def test_a_page_file_whose_times_run_against_its_lines_is_refused_and_time_decides_across_files(
        tmp_path: Path) -> None:
    """A page answers file sorted by hand (or written while the clock stepped back) kept the answer on its last
    line, which there was alice's older one, without a word."""
    from grueflow.human.answers import AnswerStore

    batch = _likert()
    first, second = batch.items[0]["item_id"], batch.items[1]["item_id"]

    def line(item: str, score: int, at: str) -> dict:
        return {"annotator": "alice", "item_id": item, "answer": {"coherence": score, "sentiment": score},
                "at": f"2026-12-05T10:00:{at}+00:00"}

    page = tmp_path / "answers.jsonl"
    io.write_jsonl(page, [line(first, 1, "05"), line(second, 3, "09"), line(first, 5, "01")])
    with pytest.raises(io.DataError) as err:
        results.read_answers(page, batch)
    assert str(err.value) == (
        f"{page}: lines 1 and 3: annotator 'alice' gave item {first} two different answers whose times run against "
        f"the line order ({{'coherence': 1, 'sentiment': 1}} at 2026-12-05T10:00:05+00:00 on line 1, "
        f"{{'coherence': 5, 'sentiment': 5}} at 2026-12-05T10:00:01+00:00 on line 3): the file was reordered "
        f"(sorted?) or the clock stepped back, and nothing tells which is the correction; keep the line with the "
        f"answer they mean, delete the other line, and import again")
    io.write_jsonl(page, [line(first, 5, "05"), line(second, 3, "09"), line(first, 5, "01")])  # the same answer
    assert {a.item_id: a.values["coherence"] for a in results.read_answers(page, batch)} == {first: 5, second: 3}
    io.write_jsonl(page, [line(first, 1, "01"), line(second, 3, "09"), line(first, 5, "05")])  # times in line order
    kept = {a.item_id: a.values["coherence"] for a in results.read_answers(page, batch)}
    assert kept == {first: 5, second: 3}
    assert {item: answer["coherence"] for item, answer in AnswerStore(page, batch).latest("alice").items()} == kept
    io.write_jsonl(tmp_path / "laptop.jsonl", [line(first, 2, "03")])  # another file: its time against the page's
    kept = {a.item_id: a.values["coherence"] for a in _all_files(batch, page, tmp_path / "laptop.jsonl")}
    assert kept == {first: 5, second: 3}  # 10:00:03 is before the page's last answer to it, at 10:00:05
    io.write_jsonl(tmp_path / "laptop.jsonl", [line(first, 2, "07")])
    kept = {a.item_id: a.values["coherence"] for a in _all_files(batch, page, tmp_path / "laptop.jsonl")}
    assert kept == {first: 2, second: 3}


def test_a_page_file_sorted_after_a_correction_within_one_second_keeps_the_correction_or_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page wrote whole seconds: an answer 5 corrected to 3 within the second gave two lines of one time, and the
    file sorted (README's example of a reordered page file) imported the overridden 5 without a word. The page now
    writes microseconds, each line of a server later than the one before, so a sorted file's times run against its
    lines and it is refused; two different answers of one time in a page file are refused, as across files."""
    import datetime as dt

    from grueflow.human import answers as page_answers

    batch = _likert()
    item = batch.items[0]["item_id"]
    frozen = dt.datetime(2026, 12, 7, 7, 57, 21, 250000, tzinfo=dt.timezone.utc)

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:
            return frozen  # a clock that reads the same for every answer

    monkeypatch.setattr(page_answers.dt, "datetime", Frozen)
    store = page_answers.AnswerStore(tmp_path / "answers.jsonl", batch)
    for score in (5, 3):
        store.append("carol", item, {"coherence": score, "sentiment": score})
    monkeypatch.undo()
    lines = store.path.read_text().splitlines(keepends=True)
    assert [json.loads(line)["at"] for line in lines] == ["2026-12-07T07:57:21.250000+00:00",
                                                         "2026-12-07T07:57:21.250001+00:00"]
    assert [dict(a.values) for a in results.read_answers(store.path, batch)] == [{"coherence": 3, "sentiment": 3}]
    sorted_page = tmp_path / "sorted.jsonl"
    sorted_page.write_text("".join(sorted(lines)))  # sort: 5's line after 3's; its times tell
    with pytest.raises(io.DataError) as err:
        results.read_answers(sorted_page, batch)
    assert str(err.value) == (
        f"{sorted_page}: lines 1 and 2: annotator 'carol' gave item {item} two different answers whose times run "
        f"against the line order ({{'coherence': 3, 'sentiment': 3}} at 2026-12-07T07:57:21.250001+00:00 on line 1, "
        f"{{'coherence': 5, 'sentiment': 5}} at 2026-12-07T07:57:21.250000+00:00 on line 2): the file was reordered "
        f"(sorted?) or the clock stepped back, and nothing tells which is the correction; keep the line with the "
        f"answer they mean, delete the other line, and import again")

    def line(score: int) -> dict:
        return {"annotator": "carol", "item_id": item, "answer": {"coherence": score, "sentiment": score},
                "at": "2026-12-07T07:57:21+00:00"}

    for name, scores in (("whole_seconds.jsonl", (5, 3)), ("whole_seconds_sorted.jsonl", (3, 5))):
        io.write_jsonl(tmp_path / name, [line(score) for score in scores])
        with pytest.raises(io.DataError) as err:
            results.read_answers(tmp_path / name, batch)
        assert str(err.value) == (
            f"{tmp_path / name}: lines 1 and 2: annotator 'carol' gave item {item} two different answers at the same "
            f"time ({{'coherence': {scores[0]}, 'sentiment': {scores[0]}}} on line 1, {{'coherence': {scores[1]}, "
            f"'sentiment': {scores[1]}}} on line 2, both at 2026-12-07T07:57:21+00:00), and nothing orders them: a "
            f"time in whole seconds holds a correction made within the second, and a file reordered since (sorted?) "
            f"looks the same; keep the line with the answer they mean, delete the other line, and import again")
    io.write_jsonl(tmp_path / "repeat.jsonl", [line(3), line(3)])  # the same answer twice: nothing to order
    assert [a.values["coherence"] for a in results.read_answers(tmp_path / "repeat.jsonl", batch)] == [3]
    io.write_jsonl(tmp_path / "later.jsonl", [{**line(5), "at": "2026-12-07T07:58:00+00:00"}])  # another file's
    assert [a.values["coherence"] for a in _all_files(batch, tmp_path / "whole_seconds_sorted.jsonl",
                                                      tmp_path / "later.jsonl")] == [5]  # later answer decides


def test_times_against_the_line_order_that_change_no_kept_answer_import(tmp_path: Path) -> None:
    """A page file whose clock stepped back once before the annotator answered again (last line also the latest), and
    a sorted page file whose answers another file's later answer replaces, were refused although every reading of
    them keeps the same answer."""
    batch = _likert()
    first = batch.items[0]["item_id"]

    def line(score: int, hour: str) -> dict:
        return {"annotator": "alice", "item_id": first, "answer": {"coherence": score, "sentiment": score},
                "at": f"2026-12-01T{hour}:00+00:00"}

    page = tmp_path / "answers.jsonl"
    io.write_jsonl(page, [line(5, "11:00"), line(2, "10:30"), line(2, "12:00")])
    assert [a.values["coherence"] for a in results.read_answers(page, batch)] == [2]
    io.write_jsonl(page, [line(5, "11:00"), line(2, "10:30"), line(2, "09:00")])  # the last line is not the latest
    with pytest.raises(io.DataError, match=rf"{re.escape(str(page))}: lines 1 and 3: annotator 'alice' gave item "
                                           rf"{first} two different answers whose times run against the line order"):
        results.read_answers(page, batch)
    io.write_jsonl(tmp_path / "a.jsonl", [line(1, "11:00"), line(5, "10:00")])  # sorted
    io.write_jsonl(tmp_path / "b.jsonl", [line(3, "13:00")])
    for files in ((tmp_path / "a.jsonl", tmp_path / "b.jsonl"), (tmp_path / "b.jsonl", tmp_path / "a.jsonl")):
        assert [a.values["coherence"] for a in _all_files(batch, *files)] == [3]
    io.write_jsonl(tmp_path / "b.jsonl", [line(3, "10:30")])  # later than a.jsonl's last line only: it still matters
    with pytest.raises(io.DataError, match=r"a\.jsonl: lines 1 and 2: annotator 'alice'"):
        _all_files(batch, tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    # a page file's answer stands at the latest time any of its lines gives it: 2 at 12:00 here, after b's 3 at 11:00
    # (the last line's older time kept 3)
    for times in (("12:00", "09:00"), ("12:00", "11:00")):
        io.write_jsonl(tmp_path / "a.jsonl", [line(2, times[0]), line(5, "10:00"), line(2, times[1])])
        io.write_jsonl(tmp_path / "b.jsonl", [line(3, "11:00")])
        assert [a.values["coherence"] for a in _all_files(batch, tmp_path / "a.jsonl", tmp_path / "b.jsonl")] == [2]
    io.write_jsonl(page, [line(5, "11:00"), line(2, "10:00"), {**line(5, "11:00"), "at": None}])  # untimed last line
    assert [a.values["coherence"] for a in results.read_answers(page, batch)] == [5]
    io.write_jsonl(page, [line(2, "09:00"), line(5, "10:00"), {**line(2, "09:00"), "at": None}])  # times in order
    assert [a.values["coherence"] for a in results.read_answers(page, batch)] == [2]
    # an untimed last line may come after any time: against another file's answer nothing orders it
    io.write_jsonl(tmp_path / "a.jsonl", [line(2, "10:00"), {**line(2, "10:00"), "at": None}])
    io.write_jsonl(tmp_path / "b.jsonl", [line(3, "11:00")])
    with pytest.raises(io.DataError, match=r"two different answers that no time orders"):
        _all_files(batch, tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    io.write_jsonl(page, [line(2, "10:00"), {**line(3, "10:00"), "at": "9999-12-31T23:59:59-01:00"}])  # past 9999 UTC
    assert [a.values["coherence"] for a in results.read_answers(page, batch)] == [3]  # read as a time unknown
    io.write_jsonl(tmp_path / "a.jsonl", [line(5, "10:00"), line(2, "11:00")])  # the page's file, and a sorted copy:
    io.write_jsonl(tmp_path / "b.jsonl", [line(2, "11:00"), line(5, "10:00")])  # the copy's latest line is the page's
    assert [a.values["coherence"] for a in _all_files(batch, tmp_path / "a.jsonl", tmp_path / "b.jsonl")] == [2]


def test_identical_repeats_import_once_and_the_pages_later_line_wins_within_a_second(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from grueflow.human.answers import AnswerStore

    batch = _likert()
    a = _answers_file(tmp_path / "a.jsonl", batch, 4, None)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    with caplog.at_level(logging.INFO, logger="grueflow.human.results"):
        kept = _all_files(batch, a, copy)
    assert len(kept) == 8 and {a.values["coherence"] for a in kept} == {4}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "answers given more than once by one annotator to one item: 8 identical repeat(s) counted once, "
                 "0 older answer(s) from another file or row replaced by a later one (by time)")]
    # the page appends answers in the order they are given: within one file a later line is a later answer, and
    # its times run in line order; lines that carry no time keep the line order
    store = AnswerStore(tmp_path / "page.jsonl", batch)
    item = batch.items[0]["item_id"]
    for score in (2, 3, 2, 5):
        store.append("alice", item, {"coherence": score, "sentiment": score})
    assert [dict(a.values) for a in results.read_answers(store.path, batch)] == [{"coherence": 5, "sentiment": 5}]
    lines = store.path.read_text().splitlines()
    (tmp_path / "untimed_page.jsonl").write_text("\n".join(re.sub(r', "at": "[^"]*"', "", l) for l in lines) + "\n")
    assert [a.values["coherence"] for a in results.read_answers(tmp_path / "untimed_page.jsonl", batch)] == [5]


# Batches answered in part: counted, warned, noted under the table; blank agreement cells say why


def test_a_batch_answered_in_part_warns_and_the_table_notes_it(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    batch = _likert()
    ppo = [i["item_id"] for i in batch.items if i["algorithm"] == "ppo"]
    answers = [Answer(who, i, {"coherence": 3, "sentiment": 4}) for who in ("x", "y") for i in ppo]
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        stats = results.agreement(batch, answers)
    assert caplog.messages == ["4 of 8 items answered; methods with no answers: zero_shot; the table covers only the "
                               "answered items"]
    assert (stats["n_items"], stats["n_items_answered"], stats["methods_without_answers"]) == (8, 4, ["zero_shot"])
    assert stats["coherence"] == {"krippendorff_alpha_interval": None, "krippendorff_alpha_ordinal": None,
                                  "cohen_kappa": None}
    assert stats["blank_reasons"]["sentiment"] == dict.fromkeys(
        ("krippendorff_alpha_interval", "krippendorff_alpha_ordinal", "cohen_kappa"),
        "no variance: every answer identical")
    rows = [{**r, "batch": "imp"} for r in results.likert_rows(batch, answers, "imdb")]
    markdown = results.to_markdown(rows, {str(tmp_path / "imp"): stats})
    assert ("| imdb | ppo | sentiment | 4 | 4.00 [4.00, 4.00] | imp |\n\n"
            "Note: batch imp: 4 of 8 items answered; methods with no answers: zero_shot; the rows cover only the "
            "answered items.\n") in markdown
    assert f"| {tmp_path / 'imp'} | coherence | cohen_kappa | (no variance: every answer identical) |" in markdown
    whole = results.agreement(batch, [Answer("x", i["item_id"], {"coherence": 3, "sentiment": 4}) for i in batch.items]
                              + [Answer("y", ppo[0], {"coherence": 3, "sentiment": 4})])
    assert (whole["n_items"], whole["n_items_answered"], whole["methods_without_answers"]) == (8, 8, [])
    assert results.coverage_note(whole) is None and results.coverage_note({"n_items_answered": 3}) is None
    assert whole["blank_reasons"]["coherence"]["cohen_kappa"] == "no variance: every answer identical"
    zero_shot = next(i["item_id"] for i in batch.items if i["algorithm"] == "zero_shot")
    apart = results.agreement(batch, [Answer("x", ppo[0], {"coherence": 3, "sentiment": 4}),
                                      Answer("y", zero_shot, {"coherence": 1, "sentiment": 2})])
    assert apart["blank_reasons"]["coherence"] == {
        "krippendorff_alpha_interval": "fewer than 2 annotators on every item",
        "krippendorff_alpha_ordinal": "fewer than 2 annotators on every item",
        "cohen_kappa": "no item answered by both annotators"}
    assert results.coverage_note(apart) == "2 of 8 items answered"


def test_a_pairwise_batch_answered_in_part_names_its_unanswered_methods_through_the_key() -> None:
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo", 3)), ("sup", _predictions("sup", 3)), "imdb", 0)
    answers = [Answer("alice", batch.items[0]["item_id"], {"choice": "A"})]
    stats = results.agreement(batch, answers, key)
    assert (stats["n_items"], stats["n_items_answered"], stats["methods_without_answers"]) == (3, 1, [])
    assert stats["blank_reasons"] == {"choice": {"fleiss_kappa": "fewer than 2 annotators on every item"}}
    assert "methods_without_answers" not in results.agreement(batch, answers)  # without the key: unnamed


# A results CSV whose Input text was changed: the refusal shows where, with lookalikes' code points


def test_a_results_csv_with_smart_quotes_says_where_its_text_differs(tmp_path: Path) -> None:
    batch = _likert()
    item = batch.items[0]
    path = _mturk_csv(tmp_path / "results.csv", batch, [("W1", item["item_id"], None, 5)])
    text = path.read_text(encoding="utf-8")
    (tmp_path / "curly.csv").write_text(text.replace("&#x27;", "\u2019"), encoding="utf-8")
    with pytest.raises(io.DataError) as err:
        results.read_answers(tmp_path / "curly.csv", batch)
    prompt = item["prompt"]
    assert str(err.value) == (
        f"{tmp_path / 'curly.csv'}: row 2: Input.prompt differs from item {item['item_id']}'s text at character "
        f"{prompt.index(chr(39)) + 1}: the file has {prompt.replace(chr(39), chr(0x2019))!r} where the batch has "
        f"{prompt!r} (U+2019 RIGHT SINGLE QUOTATION MARK where the batch has U+0027 APOSTROPHE); a spreadsheet or "
        f"editor replaced a character by a lookalike (smart quotes, dashes): import the file the platform wrote, "
        f"unedited")
    other = prompt.replace("p0", "q0")
    (tmp_path / "other.csv").write_text(text.replace(html.escape(prompt), html.escape(other)), encoding="utf-8")
    with pytest.raises(io.DataError, match=r"Input\.prompt differs from item \S+'s text at character 1: the file has "
                                           r"\"q0: it's .*\" where the batch has \"p0: it's .*\"; the text must match "
                                           r"the batch's: is this the results file of another batch\?$"):
        results.read_answers(tmp_path / "other.csv", batch)


@pytest.mark.parametrize("given, expected, where, lookalike", [
    ("a \u201cb\u201d c", 'a "b" c', "at character 3: the file has 'a “b” c' where the batch has 'a \"b\" c' "
                                     "(U+201C LEFT DOUBLE QUOTATION MARK where the batch has U+0022 QUOTATION MARK)",
     True),
    ("x" * 30 + "\u2014y", "x" * 30 + "-y", f"at character 31: the file has '{'x' * 20}\u2014y' where the batch has "
                                           f"'{'x' * 20}-y' (U+2014 EM DASH where the batch has U+002D HYPHEN-MINUS)",
     True),
    ("abc", "abd", "at character 3: the file has 'abc' where the batch has 'abd'", False),
    ("ab", "ab c", "at character 3: the file has 'ab' where the batch has 'ab c'", False),
    ("caf\u00e9", "cafe", "at character 4: the file has 'café' where the batch has 'cafe' (U+00E9 LATIN SMALL LETTER "
                          "E WITH ACUTE where the batch has U+0065 LATIN SMALL LETTER E)", False),
])
def test_first_difference_shows_both_excerpts_and_lookalikes_code_points(given: str, expected: str, where: str,
                                                                         lookalike: bool) -> None:
    assert results.first_difference(given, expected) == (where, lookalike)


def test_an_answer_time_that_is_not_a_time_is_unknown_and_counted_in_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    batch = _likert()
    page = _answers_file(tmp_path / "page.jsonl", batch, 3, "yesterday")
    first = batch.items[0]["item_id"]
    mturk = _mturk_csv(tmp_path / "mturk.csv", batch, [("W1", first, "Sat Dec 05 10:00:00 XYZT 2026", 2),
                                                        ("W2", first, "Sat Dec 05 10:00:00 PST 2026", 2)])
    with caplog.at_level(logging.WARNING, logger="grueflow.human.results"):
        answers = results.read_answer_file(page, batch) + results.read_answer_file(mturk, batch)
    assert [a.at for a in answers][:9] == [None] * 9 and answers[9].at.isoformat() == "2026-12-05T18:00:00+00:00"
    assert caplog.messages == [
        f"{page}: 8 answer(s) have an 'at' that is not an ISO 8601 time (first: line 1: at 'yesterday'); their time "
        f"is unknown, so a different answer to the same item in another file is refused",
        f"{mturk}: 1 row(s) have a SubmitTime that is not a time (first: row 2: SubmitTime 'Sat Dec 05 10:00:00 XYZT "
        f"2026'; expected MTurk's 'Sat Dec 05 10:00:00 PST 2026' or ISO 8601); their time is unknown, so a different "
        f"answer to the same item is refused"]


def test_the_human_table_escapes_a_pipe_in_its_cells() -> None:
    """A criterion, batch or blank reason holding `|` split its Markdown cell, shifting the row's values."""
    rows = [{"kind": "likert", "task": "imdb", "method": "ppo", "measure": "fluent|ness", "n": 4, "value": 3.5,
             "ci_low": None, "ci_high": None, "batch": "b|1"}]
    stats = {"coherence": {"cohen_kappa": None}, "blank_reasons": {"coherence": {"cohen_kappa": "a | b"}}}
    markdown = results.to_markdown(rows, {"imports/b|1": stats})
    assert r"| imdb | ppo | fluent\|ness | 4 | 3.50 | b\|1 |" in markdown
    assert r"| imports/b\|1 | coherence | cohen_kappa | (a \| b) |" in markdown


def test_a_note_under_the_human_table_stays_on_one_line() -> None:
    """A method with no answers named over two lines (a key file edited by hand) wrote its second line into
    human_eval_table.md as a heading of its own."""
    stats = {"n_items": 8, "n_items_answered": 4, "methods_without_answers": ["zero\n## shot"]}
    markdown = results.to_markdown([], {"imports/b\n1": stats})
    assert ("Note: batch b 1: 4 of 8 items answered; methods with no answers: zero ## shot; the rows cover only the "
            "answered items.\n") in markdown
    assert [line for line in markdown.splitlines() if line.startswith("#")] == ["# Human evaluation", "## Agreement"]


# grueflow's template submits the item and choice ids as hidden fields: a row whose echo is not its own item's
# answers another item (the Answer.* block sorted apart from the Input.* block)


def _echo_csv(path: Path, batch: hb.Batch, choices: list[str]) -> Path:
    """A results CSV of worker W1's answer to each item of the pairwise ``batch``, with the template's hidden
    fields echoed as MTurk writes them (``Answer.item_id``, ``Answer.choice_A_id``, ``Answer.choice_B_id``)."""
    echoed = ("item_id", "choice_A_id", "choice_B_id")
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["WorkerId", *(f"Input.{c}" for c in batch.columns), "Answer.choice",
                         *(f"Answer.{c}" for c in echoed)])
        for item, choice in zip(batch.items, choices):
            writer.writerow(["W1", *(html.escape(item[c]) for c in batch.columns), choice, *(item[c] for c in echoed)])
    return path


def _sort_answer_block(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """A spreadsheet's sort of a selection: the Answer.* cells of the rows rotated by one, the Input.* left."""
    first = next(i for i, name in enumerate(header) if name.startswith("Answer."))
    answers = [row[first:] for row in rows]
    return header, [row[:first] + answers[(k + 1) % len(rows)] for k, row in enumerate(rows)]


def test_a_results_row_whose_answer_echo_names_another_item_is_refused(tmp_path: Path) -> None:
    """The Answer.* block sorted apart from the Input.* block imported with each choice counted for another item's
    A/B order (win rates 0.5 became 0.17 / 0.83), though the template's echo of the ids showed it."""
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", 0)
    path = _echo_csv(tmp_path / "results.csv", batch, ["A", "B", "A", "B"])
    assert [a.values["choice"] for a in results.read_answers(path, batch)] == ["A", "B", "A", "B"]
    _edit_csv(path, _sort_answer_block)
    first, second = batch.items[0]["item_id"], batch.items[1]["item_id"]
    with pytest.raises(io.DataError) as err:
        results.read_answers(path, batch)
    assert (f"results.csv: row 2: Answer.item_id {second!r} is not the row's own item_id (Input.item_id {first!r}): "
            f"the Answer.* columns were sorted or pasted apart from the Input.* columns") in str(err.value)
    assert "import the results file as the platform wrote it, or sort whole rows only" in str(err.value)


def test_a_results_row_whose_choice_id_echo_differs_is_refused_and_an_empty_echo_says_nothing(tmp_path: Path) -> None:
    batch, _ = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", 0)
    path = _echo_csv(tmp_path / "results.csv", batch, ["A", "B", "A", "B"])

    def swap_ids(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
        a, b = header.index("Answer.choice_A_id"), header.index("Answer.choice_B_id")
        rows[2][a], rows[2][b] = rows[2][b], rows[2][a]
        rows[0][header.index("Answer.item_id")] = ""
        return header, rows

    _edit_csv(path, swap_ids)
    with pytest.raises(io.DataError, match=r"row 4: Answer\.choice_A_id '[0-9a-f]{8}-[0-9a-f]{16}' is not the row's "
                                           r"own choice_A_id \(Input\.choice_A_id "):
        results.read_answers(path, batch)


def test_a_likert_results_row_whose_item_id_echo_differs_is_refused(tmp_path: Path) -> None:
    batch = _likert()
    path = _two_workers(tmp_path / "results.csv", batch)

    def echo(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
        column = header.index("Input.item_id")
        header, rows = header + ["Answer.item_id"], [row + [row[column]] for row in rows]
        return _sort_answer_block(header, rows)

    _edit_csv(path, echo)
    with pytest.raises(io.DataError, match=rf"row 2: Answer\.item_id '{batch.items[1]['item_id']}' is not the row's "
                                           rf"own item_id \(Input\.item_id '{batch.items[0]['item_id']}'\)"):
        results.read_answers(path, batch)


def test_a_key_with_one_items_systems_swapped_is_refused_naming_its_record_and_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A key with one item's two systems swapped (a hand edit, a merge) still names its batch and covers every id:
    it imported with the win rates flipped, though its export recorded its digest beside it."""
    from grueflow.keep import keep_batch

    monkeypatch.chdir(tmp_path)
    batch, key = hb.pairwise_batch(("ppo", _predictions("ppo")), ("sup", _predictions("sup")), "imdb", seed=0)
    folder = Path("results/human/t/batches/ppo_vs_sup_seed0")
    key_path = Path("results/human/t/keys/ppo_vs_sup_seed0.json")
    hb.write_batch(batch, folder, key, key_path)
    back = hb.read_batch(folder)
    assert hb.read_key(key_path, back) == key
    a, b = batch.items[0]["choice_A_id"], batch.items[0]["choice_B_id"]
    swapped = {**key, a: key[b], b: key[a]}
    io.write_json(key_path, hb.key_document(batch, swapped))
    rerun = (f"to write it again, move it and the batch folder {folder} out of results/ and rerun the pipeline, "
             f"which exports the same batch and key again (the export is seeded)")
    with pytest.raises(io.DataError) as err:
        hb.read_key(key_path, back)
    assert str(err.value) == (f"{key_path} is not the key its export wrote: its bytes differ from the digest recorded "
                              f"beside it in {io.files_record(key_path)} (edited by hand, or merged?), and a key with "
                              f"two systems swapped counts judgements for the wrong system; {rerun}")
    # a copy kept in .grueflow/replaced/ with the exported bytes is named; one with the edited bytes is not
    edited_copy = keep_batch(folder, key_path, Path("."))[0][1]
    io.write_json(key_path, hb.key_document(batch, key))
    good_copy = keep_batch(folder, key_path, Path("."))[0][1]
    io.write_json(key_path, hb.key_document(batch, swapped))
    with pytest.raises(io.DataError) as err:
        hb.read_key(key_path, back)
    assert f"kept in {good_copy / key_path.name}: put it back; or {rerun}" in str(err.value)
    assert str(edited_copy) not in str(err.value)
    # a key copied elsewhere without its hidden record: nothing vouches for it, said so
    shutil.copy(good_copy / key_path.name, "mine.json")
    with caplog.at_level(logging.WARNING, logger="grueflow.human.batch"):
        assert hb.read_key("mine.json", back) == key
    assert ("mine.json has no record of the digest its export wrote beside it (.mine.json.record.json: a key copied "
            "without it, or exported before keys had one), so nothing shows it is unedited") in caplog.text
