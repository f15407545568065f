"""Every suite under params/suites/ and every params folder's task and method files parse as the stages parse them.

Nothing is downloaded or built: a hub id in a task file is only a string until a stage runs. The
hub-backed suites (params/suites/grue.yaml, hub.yaml) are checked here and run only on GPU machines.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from grueflow.config import (DatapoolConfig, GenerationConfig, LengthsConfig, MetricSpec, ModelConfig, RewardConfig,
                             SupervisedConfig, read_yaml)
from grueflow.data import DATAPOOLS
from grueflow.params import load_method, load_section, load_suite, load_task, parse, produced_keys, with_fluency
from grueflow.preference.config import PREFERENCE_METHODS, preference_method_files
from grueflow.rl import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "suite.schema.yaml"

SUITES = sorted((ROOT / "params" / "suites").glob("*.yaml")) + [ROOT / "params" / "suite.yaml"]


def params_dir(suite: Path) -> Path:
    return ROOT / (read_yaml(suite) or {}).get("params_dir", "params")


# every params folder a suite names, plus any folder under params/ with tasks/ (a suite may not exist yet)
PARAMS_DIRS = sorted({params_dir(s) for s in SUITES if s.is_file()}
                     | {p.parent for p in (ROOT / "params").glob("**/tasks") if p.is_dir()})
TASK_FILES = sorted(f for d in PARAMS_DIRS for f in (d / "tasks").glob("*.yaml"))
PREFERENCE_FILES = preference_method_files(PREFERENCE_METHODS)
METHOD_FILES = sorted(f for d in PARAMS_DIRS for f in (d / "methods").glob("*.yaml"))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("suite", [s for s in SUITES if s.is_file()], ids=rel)
def test_suite_matches_the_schema_and_names_files_that_parse(suite: Path, monkeypatch: pytest.MonkeyPatch):
    data = read_yaml(suite)
    jsonschema.validate(data, yaml.safe_load(SCHEMA.read_text()))
    monkeypatch.chdir(ROOT)  # params_dir is relative to the repository root, as under snakemake
    loaded = load_suite(data, rel(suite))
    assert set(loaded.tasks) == set(data["tasks"])
    assert set(loaded.methods) == set(data["algorithms"])


@pytest.mark.parametrize("task_file", TASK_FILES, ids=rel)
def test_task_file_parses_section_by_section_as_each_stage_reads_it(task_file: Path):
    where = rel(task_file)
    load_task(task_file)  # the whole file, strictly (load_suite, before any job)
    # prepare_datapool: the datapool, then its loader's own args
    datapool = load_section(DatapoolConfig, task_file, "datapool")
    loader = DATAPOOLS.get(datapool.id)
    parse(loader.Args, dict(datapool.args), f"{where}: datapool.args")
    # base_model
    load_section(ModelConfig, task_file, "model")
    # warm_start, rl_finetune, evaluate
    load_section(LengthsConfig, task_file, "lengths")
    load_section(GenerationConfig, task_file, "rollout_generation")
    load_section(GenerationConfig, task_file, "eval_generation")
    load_section(RewardConfig, task_file, "reward")


@pytest.mark.parametrize("task_file", TASK_FILES, ids=rel)
def test_every_headline_metric_is_produced_by_the_reward_or_metrics(task_file: Path):
    where = rel(task_file)
    raw = read_yaml(task_file)
    reward = load_section(RewardConfig, task_file, "reward")
    metrics = parse(tuple[MetricSpec, ...], raw.get("metrics"), f"{where}: metrics")
    headline = parse(tuple[str, ...], raw.get("headline_metrics"), f"{where}: headline_metrics")
    produced = produced_keys(reward, with_fluency(metrics))  # stages/evaluate.py adds perplexity if absent
    assert headline, f"{where}: no headline metrics"
    assert set(headline) <= produced, f"{where}: {sorted(set(headline) - produced)} not in {sorted(produced)}"


@pytest.mark.parametrize("method_file", METHOD_FILES, ids=rel)
def test_method_file_parses_with_its_algorithm_config(method_file: Path):
    if method_file.stem == "supervised":
        load_section(SupervisedConfig, method_file)  # warm_start
    elif method_file.stem in PREFERENCE_FILES:  # build_preferences, train_reward_model, dpo (issue 7)
        load_section(PREFERENCE_FILES[method_file.stem], method_file)
    else:
        config = load_method(method_file.stem, method_file)  # rl_finetune; an unknown algorithm fails naming the valid ids
        assert isinstance(config, ALGORITHMS.get(method_file.stem).Config)


GRUE_MODELS = {"imdb": ("gpt2", "causal"), "common_gen": ("t5-base", "seq2seq"),
               "cnn_dailymail": ("t5-base", "seq2seq"), "totto": ("t5-base", "seq2seq"),
               "narrative_qa": ("t5-base", "seq2seq"), "iwslt2017": ("t5-base", "seq2seq"),
               "daily_dialog": ("gpt2", "causal")}


def test_grue_suite_is_the_seven_rl4lms_tasks_with_ppo_and_nlpo(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    suite = load_suite(read_yaml(ROOT / "params" / "suites" / "grue.yaml"), "params/suites/grue.yaml")
    assert suite.config.params_dir == "params/grue"
    assert suite.config.algorithms == ("ppo", "nlpo")
    assert suite.config.seeds == (0, 1, 2)
    models = {name: (t.model.name_or_path, t.model.kind) for name, t in suite.tasks.items()}
    assert models == GRUE_MODELS
    assert {name: t.datapool.id for name, t in suite.tasks.items()} == {name: name for name in GRUE_MODELS}


RL4LMS = ROOT.parent / "shared" / "reference" / "rl4lms" / "task_configs"  # read where they lie, never copied
RL4LMS_TASKS = {"imdb": "imdb_text_continuation/gpt2", "common_gen": "common_gen/t5",
                "cnn_dailymail": "summarization/t5", "totto": "totto/t5", "iwslt2017": "iwslt2017/t5",
                "narrative_qa": "narrative_qa/t5", "daily_dialog": "dialog/gpt2"}


@pytest.mark.skipif(not RL4LMS.is_dir(), reason="RL4LMs' task configs are not in ../shared/reference")
@pytest.mark.parametrize("task", sorted(RL4LMS_TASKS))
@pytest.mark.parametrize("algorithm", ["ppo", "nlpo"])
def test_each_grue_tasks_rl_values_are_rl4lms_own(task, algorithm):
    """The per-task values grueflow carries (method_overrides: learning rate, KL coefficient) against RL4LMs'
    zero-shot-start config of that task and algorithm, read from the reference files themselves."""
    reference = yaml.safe_load((RL4LMS / f"{RL4LMS_TASKS[task]}_{algorithm}.yml").read_text())["alg"]
    cfg = load_method(algorithm, ROOT / "params" / "grue" / "methods" / f"{algorithm}.yaml",
                      ROOT / "params" / "grue" / "tasks" / f"{task}.yaml")
    assert cfg.learning_rate == pytest.approx(reference["args"]["learning_rate"])
    assert cfg.kl.coef == pytest.approx(reference["kl_div"]["coeff"])


@pytest.mark.skipif(not RL4LMS.is_dir(), reason="RL4LMs' task configs are not in ../shared/reference")
def test_the_method_files_tables_quote_rl4lms():
    """The per-task tables in params/grue/methods/{ppo,nlpo}.yaml: learning rate, KL coefficient, per-token KL
    target and n_iters as RL4LMs' files give them."""
    for algorithm in ("ppo", "nlpo"):
        text = (ROOT / "params" / "grue" / "methods" / f"{algorithm}.yaml").read_text()
        for task, stem in RL4LMS_TASKS.items():
            reference = yaml.safe_load((RL4LMS / f"{stem}_{algorithm}.yml").read_text())
            row = next(line.split()[2:] for line in text.splitlines() if line.startswith(f"#   {task} "))
            lr, coef, target, n_iters = float(row[0]), float(row[1]), float(row[2]), int(row[6])
            assert (lr, coef, target, n_iters) == (reference["alg"]["args"]["learning_rate"],
                                                   reference["alg"]["kl_div"]["coeff"],
                                                   reference["alg"]["kl_div"]["target_kl"],
                                                   reference["train_evaluation"]["n_iters"]), (algorithm, task)
