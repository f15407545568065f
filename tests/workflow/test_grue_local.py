"""The local GRUE suite on the real data slices in ../shared/data, to the GRUE table (issue 5).

Skipped, with the reason, where ../shared/data is absent. The slices are read where they lie: the
copy of the project gets a ``shared`` link beside it, so its ``../shared/data`` paths resolve.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import copy_with_shared_data, run

pytestmark = pytest.mark.slow
SUITE = "params/suites/grue-local.yaml"


@pytest.fixture(scope="module")
def grue_local(tmp_path_factory):
    repo = copy_with_shared_data(tmp_path_factory.mktemp("grue_local"), "the local GRUE suite")
    run(["snakemake", "--cores", "2", "results/grue_table.csv", "--configfile", SUITE], repo, timeout=1800)
    return repo


def test_every_local_task_reaches_the_grue_table(grue_local):
    table = pd.read_csv(grue_local / "results" / "grue_table.csv")
    tasks = ["cnn_dailymail", "commongen", "dailydialog", "imdb", "iwslt2017", "totto"]
    assert sorted(set(table.task)) == tasks
    assert sorted(zip(table.task, table.method)) == sorted(
        (t, m) for t in tasks for m in ("zero_shot", "supervised", "supervised+ppo"))  # rl_starts: [supervised]
    assert table.reward.notna().all() and (table.fluency_ppl > 1).all()
    headline = {"commongen": ["lexical/cider", "lexical/meteor", "lexical/bleu", "task/coverage"],
                "cnn_dailymail": ["lexical/rouge1", "lexical/rougeLsum", "lexical/meteor", "semantic/bert_score"],
                "totto": ["lexical/bleu", "task/parent_f"], "iwslt2017": ["lexical/sacrebleu", "lexical/chrf", "lexical/ter"],
                "dailydialog": ["lexical/meteor"],
                "imdb": ["task/vader_sentiment", "diversity/distinct_2", "fluency/reference_perplexity"]}
    for task, columns in headline.items():
        assert table.loc[table.task == task, columns].notna().all().all(), task


def test_imdb_runs_on_smollm2_through_lora(grue_local):
    base = json.loads((grue_local / "results" / "imdb" / "base_model" / "stage.json").read_text())
    assert base["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and base["parameters"] > 100_000_000
    rl = json.loads((grue_local / "results" / "imdb" / "supervised+ppo" / "seed0" / "stage.json").read_text())
    assert rl["params"]["method"]["lora"]["r"] == 8  # the task's method_overrides reached the stage


def test_metrics_that_cannot_run_offline_show_as_missing_not_zero(grue_local):
    metrics = json.loads((grue_local / "results" / "eval" / "dailydialog" / "supervised+ppo" / "seed0" / "metrics.json").read_text())
    assert metrics["metrics"]["task/intent_accuracy"] is None
    assert "hub is unreachable" in metrics["missing"]["intent_accuracy"]
    markdown = (grue_local / "results" / "grue_table.md").read_text()
    assert "- missing `intent_accuracy`" in markdown
    dailydialog = markdown.split("## dailydialog")[1].split("## ")[0]
    assert "| — |" in dailydialog  # the intent accuracy column, shown as missing


def test_commongen_evaluates_with_rl4lms_beam_search(grue_local):
    record = json.loads((grue_local / "results" / "eval" / "commongen" / "supervised+ppo" / "seed0" / "stage.json")
                        .read_text())
    generation = json.dumps(record["params"])
    assert '"num_beams": 5' in generation and '"min_length": 5' in generation


def test_commongen_scores_val_during_training_and_hands_on_the_best(grue_local):
    run = grue_local / "results" / "commongen" / "supervised+ppo" / "seed0"
    curve = pd.read_csv(run / "val_curves.csv")
    assert list(curve.iteration) == [0, 2, 4, 6] and curve["lexical/meteor"].notna().all()
    selected = json.loads((run / "stage.json").read_text())["selected"]
    assert selected["select_metric"] == "lexical/meteor"
    assert selected["value"] == pytest.approx(curve["lexical/meteor"].max(), abs=1e-6)
    assert (run / "checkpoints" / "iteration6" / "config.json").is_file()
