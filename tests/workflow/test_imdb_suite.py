"""The IMDB suite (params/suites/imdb.yaml) wired end to end, at smoke size: SmolLM2-135M adapted on aclImdb
unsup reviews, a MiniLM sentiment classifier trained here as the reward, a positive-review warm start, PPO and
NLPO from both starts, evaluation and the GRUE table.

The suite's own task file is shrunk in the copy (one iteration, a handful of samples, one seed): what runs
is the suite's wiring, not its budget (the full run is bench/IMDB.md's). Skipped where ../shared/data is absent.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from tests.conftest import copy_with_shared_data, run

pytestmark = pytest.mark.slow
SUITE = "params/suites/imdb.yaml"
TASK = "imdb_smollm2"
TASK_FILE = f"params/imdb/tasks/{TASK}.yaml"
RL = {"iterations": 1, "rollouts_per_iteration": 4, "minibatch_size": 4, "epochs": 1, "checkpoint_every": 1}
METHODS = ["zero_shot", "supervised", "ppo", "nlpo", "supervised+ppo", "supervised+nlpo"]


def shrink(task: dict, methods: dict[str, dict]) -> dict:
    """The suite's task file at smoke size, its method files' sizes laid over through ``method_overrides``;
    every key changed here exists in the real files (asserted), so the smoke follows them."""
    args = task["datapool"]["args"]
    for key, value in {"n_train": 8, "n_val": 4, "n_test": 6}.items():
        assert key in args, key
        args[key] = value
    assert {"steps", "batch_size", "max_length", "heldout"} <= set(task["model"]["adapt"])
    task["model"]["adapt"].update(steps=1, batch_size=2, max_length=32, heldout=2)
    for key in ("rollout_generation", "eval_generation"):
        task[key].update(max_new_tokens=8, min_new_tokens=8)
    smoke = {"ppo": RL, "nlpo": RL, "supervised": {"epochs": 1, "batch_size": 4}}
    for method, values in smoke.items():
        assert set(values) <= set(methods[method]), method
    task["method_overrides"] = smoke
    assert {"n_train", "n_test", "max_length", "batch_size"} <= set(task["classifier"])
    task["classifier"].update(n_train=40, n_test=16, max_length=32, batch_size=8)
    return task


@pytest.fixture(scope="module")
def imdb_suite(tmp_path_factory):
    repo = copy_with_shared_data(tmp_path_factory.mktemp("imdb_suite"), "the IMDB suite")
    task_file = repo / TASK_FILE
    methods = {m: yaml.safe_load((repo / "params" / "imdb" / "methods" / f"{m}.yaml").read_text())
               for m in ("ppo", "nlpo", "supervised")}
    task_file.write_text(yaml.safe_dump(shrink(yaml.safe_load(task_file.read_text()), methods), sort_keys=False))
    suite = repo / SUITE
    text = suite.read_text()
    assert "\nseeds: [0, 1]\n" in text
    suite.write_text(text.replace("\nseeds: [0, 1]\n", "\nseeds: [0]\n"))  # one seed: the wiring, in CI time
    run(["snakemake", "--cores", "2", "results/grue_table.csv", "--configfile", SUITE], repo, timeout=1800)
    return repo


def test_every_method_of_the_suite_reaches_the_table_with_its_columns(imdb_suite):
    table = pd.read_csv(imdb_suite / "results" / "grue_table.csv")
    assert list(table.method[:2]) == METHODS[:2] and sorted(table.method) == sorted(METHODS) and set(table.task) == {TASK}
    columns = ["learned/classifier", "diversity/distinct_1", "diversity/distinct_2", "task/vader_sentiment"]
    assert table[columns + ["fluency_ppl"]].notna().all().all()
    assert table["learned/classifier"].between(0, 1).all()
    rl = table.method.isin(["ppo", "nlpo", "supervised+ppo", "supervised+nlpo"])
    assert table.loc[rl, "train/kl"].notna().all() and table.loc[~rl, "train/kl"].isna().all()  # RL rows only
    markdown = (imdb_suite / "results" / "grue_table.md").read_text()
    assert "train/kl" in markdown
    masks = dict(zip(table.method, table.nlpo_masks))  # NLPO is evaluated with its masks, as RL4LMs
    assert masks["nlpo"] == masks["supervised+nlpo"] == "with masks" and pd.isna(masks["ppo"])
    decoding = imdb_suite / "results" / TASK / "nlpo" / "seed0" / "decoding"
    assert (decoding / "mask_model" / "config.json").is_file()
    assert json.loads((decoding / "decoding.json").read_text())["masks"]["eval_with_masks"] is True
    assert json.loads((imdb_suite / "results" / TASK / "ppo" / "seed0" / "decoding" / "decoding.json").read_text()
                      )["masks"] is None


def test_the_base_is_adapted_and_the_reward_is_the_classifier_trained_here(imdb_suite):
    results = imdb_suite / "results" / TASK
    base = json.loads((results / "base_model" / "stage.json").read_text())
    assert base["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and base["params"]["model"]["adapt"]["steps"] == 1
    assert len(pd.read_csv(results / "base_model" / "adapt_curve.csv")) == 1 and base["adapt_heldout_loss"]["texts"] == 2
    datapool = json.loads((results / "datapool" / "stats.json").read_text())
    assert datapool["unlabelled_lines"] == 2000  # the unsupervised split, not the train reviews
    warm = json.loads((results / "supervised" / "seed0" / "stage.json").read_text())
    assert warm["params"]["supervised"]["train_where"] == {"label": 1}  # positive reviews only
    classifier = json.loads((results / "classifier" / "metrics.json").read_text())
    assert 0 <= classifier["test/accuracy"] <= 1 and classifier["n_test"] == 16
    rl = json.loads((results / "nlpo" / "seed0" / "stage.json").read_text())
    assert rl["params"]["method"]["lora"]["r"] == 16 and rl["params"]["method"]["iterations"] == 1
    reward = rl["params"]["reward"]["components"][0]
    assert reward["metric"] == "learned_classifier" and reward["args"]["model"] == f"results/{TASK}/classifier/model"
