"""ToTTo's BLEU and PARENT as the official ToTTo evaluation computes them, on the dev sample in ../shared/data.

The official numbers below were computed once, outside grueflow, with the files RL4LMs runs for its ``bleu_totto``
and ``parent_totto`` metrics (allenai/RL4LMs 97df0bd, ``rl4lms/data_pools/task_utils/totto/eval_utils``:
``totto_bleu_eval.sh``, ``totto_parent_eval.sh``, ``prepare_references_for_eval.py``,
``prepare_predictions_for_eval.py``, ``table_to_text_utils.py``, ``totto_parent_eval.py`` and Moses'
``detokenizer.perl``, copies of google-research/language ``language/totto``), called as RL4LMs'
``compute_bleu``/``compute_parent`` call them: the sample's five rows written as ``samples.jsonl``, the
predictions joined by newlines, ``bash totto_bleu_eval.sh -p predictions.txt -t samples.jsonl --output_dir DIR``
(and the same for PARENT). Versions: sacrebleu 2.2.0 (RL4LMs' pin), absl-py 2.5.1, six 1.17.0, numpy 2.4.6,
Python 3.11.7, perl 5.36.0. BLEU is the overall score: ``bleu_overall.json``'s score, which the script's sacrebleu
prints to one decimal, and the same ``sacrebleu`` command on the same detokenised files with ``-w 6``. PARENT is
``parent_overall.json``: precision, recall, F and each sample's F, printed in full.

grueflow computes them with the metric args of params/grue/tasks/totto.yaml (``bleu`` and ``parent`` with
``recipe: totto``) on the ``totto`` datapool's samples: their references and meta.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest
import yaml
from shared_data import DATA

from grueflow.data import DATAPOOLS
from grueflow.metrics import METRICS, MetricContext
from grueflow.params import parse

TOTTO_TASK = Path(__file__).resolve().parents[2] / "params" / "grue" / "tasks" / "totto.yaml"
SAMPLE = "totto/dev_sample.jsonl"


class Official(NamedTuple):
    bleu_printed: float  # bleu_overall.json, one decimal
    bleu: float  # the same sacrebleu command with -w 6
    precision: float
    recall: float
    f: float
    per_sample_f: list[float]


def spaced_upper(text: str) -> str:
    """Upper-cased, with brackets and sentence commas and full stops written apart, as Moses' tokenizer writes them:
    the official scripts lower-case and detokenize it back."""
    text = re.sub(r"([,.])(?=\s|$)", r" \1", text)
    return " ".join(re.sub(r"([()])", r" \1 ", text).split()).upper()


def highlighted_values(row: dict[str, Any]) -> str:
    return " ".join(row["table"][r][c]["value"] for r, c in row["highlighted_cells"])


# each prediction set: row, index -> the prediction for that row
PREDICTIONS: dict[str, Callable[[dict[str, Any], int], str]] = {
    "first_reference": lambda row, i: row["sentence_annotations"][0]["final_sentence"],
    "highlighted_values": lambda row, i: highlighted_values(row),
    "page_title": lambda row, i: row["table_page_title"],
    # the second prediction empty: the scripts score "<null>" in its place
    "last_reference_spaced_upper": lambda row, i: "" if i == 1 else spaced_upper(
        row["sentence_annotations"][-1]["final_sentence"]),
}

OFFICIAL = {
    "first_reference": Official(
        100.0, 100.0, 0.9826198122751618, 0.7648151527363776, 0.8425966285911841,
        [0.9848077009200742, 0.8775542922274239, 0.9640552284889994, 0.4983872639459597, 0.8881786573734631]),
    "highlighted_values": Official(
        6.9, 6.894436, 0.6006680211202344, 0.15074716549755102, 0.21837903010312276,
        [0.00900155435748962, 0.0003442890800959392, 0.003849529184359474, 0.5570694292961264, 0.5216303485975423]),
    "page_title": Official(
        12.7, 12.720891, 0.6118792820358406, 0.15630032450628317, 0.22806704633841196,
        [0.002773917058906507, 0.151779220329882, 0.41778300716563804, 0.07298342570559599, 0.49501566143203724]),
    "last_reference_spaced_upper": Official(
        87.9, 87.936753, 0.8, 0.7044330266329792, 0.7460197632984237,
        [0.9848077009200742, 0.0, 0.9640552284889994, 0.8171806585940453, 0.9640552284889994]),
}


def sample_path() -> Path:
    path = DATA / SAMPLE
    if not path.exists():
        pytest.skip(f"shared data {path} is absent (set GRUEFLOW_SHARED_DATA to the shared/data folder)")
    return path


def task_metric(metric_id: str):
    """The metric as params/grue/tasks/totto.yaml configures it."""
    entries = [m for m in yaml.safe_load(TOTTO_TASK.read_text(encoding="utf-8"))["metrics"] if m["id"] == metric_id]
    assert len(entries) == 1, f"{TOTTO_TASK} lists metric {metric_id!r} {len(entries)} times"
    metric = METRICS.get(metric_id)
    return metric.build(parse(metric.Args, entries[0].get("args") or {}, "args"), MetricContext())


@pytest.fixture(scope="module")
def totto(tmp_path_factory):
    """The dev sample's rows as stored, and the datapool's samples of them (in order, all in test; train reads a
    copy, since train and test may not read one file)."""
    path = sample_path()
    loader = DATAPOOLS.get("totto")
    copy = tmp_path_factory.mktemp("totto") / f"train_{path.name}"
    shutil.copyfile(path, copy)
    splits = {"train": "train", "val": "validation", "test": "validation"}
    args = {"data_files": {"train": str(copy), "validation": str(path)}, "source_splits": splits}
    samples = loader.build(parse(loader.Args, args, "args")).splits["test"]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(samples) == len(rows) == 5
    return rows, samples


def metas(rows, samples) -> list[dict[str, Any]]:
    """The samples' meta as the datapool writes it, which carries the section text the official PARENT reads."""
    assert [sample.meta["section_text"] for sample in samples] == [row["table_section_text"] for row in rows]
    return [sample.meta for sample in samples]


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_totto_task_bleu_and_parent_are_the_official_numbers(totto, name):
    rows, samples = totto
    predictions = [PREDICTIONS[name](row, i) for i, row in enumerate(rows)]
    references = [sample.references for sample in samples]
    prompts = [sample.prompt for sample in samples]
    official = OFFICIAL[name]

    bleu = task_metric("bleu")(prompts, predictions, references, metas(rows, samples)).corpus["lexical/bleu"]
    assert bleu == pytest.approx(official.bleu, abs=1e-6)
    assert round(bleu, 1) == official.bleu_printed

    parent = task_metric("parent")(prompts, predictions, references, metas(rows, samples))
    assert parent.corpus["task/parent_precision"] == pytest.approx(official.precision, rel=1e-9)
    assert parent.corpus["task/parent_recall"] == pytest.approx(official.recall, rel=1e-9)
    assert parent.corpus["task/parent_f"] == pytest.approx(official.f, rel=1e-9)
    assert parent.per_sample["task/parent_f"] == pytest.approx(official.per_sample_f, rel=1e-9, abs=1e-12)


def test_totto_recipes_say_what_they_need():
    parent, bleu = METRICS.get("parent"), METRICS.get("bleu")
    score = parent.build(parse(parent.Args, {"recipe": "totto"}, "args"), MetricContext())
    with pytest.raises(ValueError, match=r"meta\['raw_table'\]"):
        score(["p"], ["x"], [["x"]], [{"table": [["cell", "x"]]}])
    with pytest.raises(ValueError, match="tokenize='intl'"):
        parse(bleu.Args, {"recipe": "totto", "tokenize": "intl"}, "args")
    with pytest.raises(ValueError, match="lambda_weight"):
        parse(parent.Args, {"lambda_weight": 1.5}, "args")
