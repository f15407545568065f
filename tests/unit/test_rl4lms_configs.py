"""RL4LMs' 44 task configs as data, and every GRUE config grueflow ports from them, field by field.

``tests/fixtures/rl4lms/configs.csv`` holds one row per RL4LMs config (``scripts/training/task_configs/``,
read where they lie in ``../shared/reference/rl4lms/task_configs``; the CSV is checked against them). A
ported row's grueflow config is ``params/grue``: the task file, the algorithm's method file, then the task
file's ``method_overrides.<algorithm>`` and, from the warm start, ``method_overrides.supervised+<algorithm>``.
Every field a row compares must equal its conversion of RL4LMs' value (:func:`expected`), or be listed with
its reason in ``tests/fixtures/rl4lms/differences.csv``; a listed difference that no longer differs fails too.

Conversions (RL4LMs counts tokens, grueflow counts completions):
- rollouts_per_iteration: the buffer holds ``n_envs x n_steps`` transitions (tokens), which is
  ``E = n_envs x n_steps / max_episode_length`` completions of full length; minibatch_size is RL4LMs'
  ``batch_size`` tokens in completions, ``m = max(1, round(batch_size / max_episode_length))``; rollouts are
  ``m x ceil(E / m)`` (a whole number of minibatches; ``m`` at most ``ceil(E)``; a batch_size left out is
  stable-baselines3's, 64 for PPO, 128 for TRPO). A2C has no minibatches: one update on ``ceil(E)``.
- kl: ``target_per: token`` takes ``target_kl`` as is (RL4LMs' controller steps on the mean per-token KL).
- generation: a key RL4LMs leaves out takes transformers' default (top_k 50 when sampling, num_beams 1,
  min_length 0, length_penalty 1, temperature 1, max_length 20 taken as 20 new tokens); ``min_length`` keeps
  RL4LMs' meaning. A config without ``train_evaluation.generation_kwargs`` evaluates with its policy's
  ``generation_kwargs``.
- supervised: ``num_train_epochs``, ``per_device_train_batch_size``, ``learning_rate``, ``weight_decay``
  (transformers' default 0) and ``lr_scheduler_type`` as ``epochs``, ``batch_size``, ``learning_rate``,
  ``weight_decay`` and ``lr_schedule``.
- a key RL4LMs' algorithm leaves out takes stable-baselines3's (sb3-contrib's) default: PPO and NLPO ent_coef 0,
  gae_lambda 0.95, vf_coef 0.5, clip_range 0.2; A2C ent_coef 0, vf_coef 0.5; TRPO gae_lambda 0.95, target_kl
  0.01 (``max_kl``).
- the synthetic tasks' task files are ``<task>_<model>.yaml`` (``dummy_pool``'s prompt is compared too).
- datapool args with a grueflow equivalent (:data:`DATAPOOL_ARGS`): CommonGen's prefix and concept tokens, ToTTo's
  representation, DailyDialog's context size, the CNN/DM and IWSLT prompt prefixes.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from grueflow.config import DatapoolConfig, GenerationConfig, LengthsConfig, ModelConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.params import load_method, load_section, load_task_section, parse

ROOT = Path(__file__).resolve().parents[2]
RL4LMS = ROOT.parent / "shared" / "reference" / "rl4lms" / "task_configs"  # read where they lie, never copied
DATA = ROOT / "tests" / "fixtures" / "rl4lms"
GRUE = ROOT / "params" / "grue"

COLUMNS = ("config", "algorithm", "start", "model", "n_envs", "n_steps", "batch_size", "n_epochs", "learning_rate",
           "ent_coef", "gae_lambda", "vf_coef", "clip_range", "kl_coeff", "target_kl", "n_iters", "top_mask",
           "mask_type", "min_tokens_to_keep", "target_update_iterations", "max_prompt_length", "max_episode_length",
           "rollout_generation", "eval_generation", "reward", "datapool", "sup_epochs", "sup_batch_size",
           "sup_learning_rate", "sup_weight_decay", "sup_lr_scheduler")

# RL4LMs' task folder -> grueflow's GRUE task file
GRUE_TASKS = {"imdb_text_continuation": "imdb", "common_gen": "common_gen", "summarization": "cnn_dailymail",
              "totto": "totto", "iwslt2017": "iwslt2017", "narrative_qa": "narrative_qa", "dialog": "daily_dialog"}
# RL4LMs' synthetic task folders -> grueflow's task file, by the config's model (its file name's first part)
SYNTHETIC_TASKS = {"synthetic_generate_increasing_numbers": "increasing_numbers", "synthetic_generate_dates":
                   "sentences_with_dates"}
MODELS = {"gpt2": "gpt2", "t5": "t5", "bart": "bart", "blendorbot": "blenderbot"}  # RL4LMs' spelling -> ours
SB3_BATCH = {"ppo": 64, "nlpo": 64, "trpo": 128}  # the batch_size a config leaves out (A2C has none)
HF_GENERATION = {"do_sample": False, "top_k": 50, "top_p": 1.0, "temperature": 1.0, "num_beams": 1, "min_length": 0,
                 "length_penalty": 1.0, "max_new_tokens": 20}  # transformers' defaults for a key left out
RL4LMS_MIN_TOKENS_TO_KEEP = 100  # its maskable policies' default
# RL4LMs' datapool args -> the grueflow datapool's (an attribute of its parsed Args), compared as ``datapool.<ours>``
DATAPOOL_ARGS = {"commongen": {"prefix": "prefix", "concept_separator_token": "concept_separator_token",
                               "concept_end_token": "concept_end_token"},
                 "totto": {"representation": "representation"}, "daily_dialog": {"context_size": "context_turns"},
                 "cnn_daily_mail": {"prompt_prefix": "prefix"}, "iwslt2017en_de": {"prompt_prefix": "prompt_prefix"}}
SB3 = {"ppo": {"ent_coef": 0.0, "gae_lambda": 0.95, "vf_coef": 0.5, "clip_range": 0.2},
       "a2c": {"ent_coef": 0.0, "vf_coef": 0.5}, "trpo": {"gae_lambda": 0.95}}
SB3["nlpo"] = SB3["ppo"]


def _value(data: object, path: str) -> str:
    """The value at a dotted ``path`` as the CSV writes it: blank when absent, JSON for a mapping or list."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return ""
        data = data[key]
    return json.dumps(data, sort_keys=True) if isinstance(data, (dict, list)) else str(data)


def reference_row(path: Path) -> dict[str, str]:
    """One RL4LMs config file as a CSV row (every value as text)."""
    data = yaml.safe_load(path.read_text())
    alg = data["alg"]
    policy = "alg.policy.args."
    return {
        "config": f"{path.parent.name}/{path.stem}", "algorithm": alg["id"],
        "start": "" if alg["id"] == "supervised" else "supervised" if path.stem.endswith("_on_supervised")
        else "zero_shot",
        "model": _value(data, policy + "model_name") or _value(data, "alg.model_name"),
        "n_envs": _value(data, "env.n_envs"),
        **{key: _value(data, f"alg.args.{key}") for key in ("n_steps", "batch_size", "n_epochs", "learning_rate",
                                                           "ent_coef", "gae_lambda", "vf_coef", "clip_range")},
        "kl_coeff": _value(data, "alg.kl_div.coeff"), "target_kl": _value(data, "alg.kl_div.target_kl"),
        "n_iters": _value(data, "train_evaluation.n_iters"),
        **{key: _value(data, policy + key) for key in ("top_mask", "mask_type", "min_tokens_to_keep",
                                                       "target_update_iterations")},
        "max_prompt_length": _value(data, "env.args.max_prompt_length"),
        "max_episode_length": _value(data, "env.args.max_episode_length"),
        "rollout_generation": _value(data, policy + "generation_kwargs"),
        "eval_generation": _value(data, "train_evaluation.generation_kwargs") or _value(data, "alg.generation_kwargs"),
        "reward": _value(data, "reward_fn"), "datapool": _value(data, "datapool"),
        "sup_epochs": _value(data, "alg.training_args.num_train_epochs"),
        "sup_batch_size": _value(data, "alg.training_args.per_device_train_batch_size"),
        "sup_learning_rate": _value(data, "alg.training_args.learning_rate"),
        "sup_weight_decay": _value(data, "alg.training_args.weight_decay"),
        "sup_lr_scheduler": _value(data, "alg.training_args.lr_scheduler_type"),
    }


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def task_file(config: str) -> Path:
    """The grueflow task file of an RL4LMs config (``<folder>/<model>_<algorithm>...``)."""
    folder, stem = config.split("/")
    name = GRUE_TASKS.get(folder) or f"{SYNTHETIC_TASKS[folder]}_{MODELS[stem.split('_')[0]]}"
    return GRUE / "tasks" / f"{name}.yaml"


ROWS = read_csv(DATA / "configs.csv")
DIFFERENCES = {(d["config"], d["field"]): d["why"] for d in read_csv(DATA / "differences.csv")}


@pytest.mark.skipif(not RL4LMS.is_dir(), reason="RL4LMs' task configs are not in ../shared/reference")
def test_the_csv_holds_every_rl4lms_config_as_written():
    files = sorted(RL4LMS.glob("*/*.yml"))
    assert len(files) == 44
    assert ROWS == [reference_row(path) for path in files]


def test_the_csv_has_its_columns_and_44_rows():
    assert len(ROWS) == 44 and all(tuple(row) == COLUMNS for row in ROWS)


def _number(text: str, default: float | None = None) -> float | None:
    return float(text) if text != "" else default


def _generation(text: str) -> dict[str, object]:
    given = json.loads(text) if text else {}
    return {key: given.get(key, default) for key, default in HF_GENERATION.items()}


def _reward(text: str) -> str:
    """RL4LMs' reward_fn as grueflow's components would write it: ``metric*weight`` joined by ``+``."""
    reward = json.loads(text)
    args = reward.get("args") or {}
    if reward["id"] == "intent_accuracy":  # RL4LMs: intent_coeff x intent accuracy + auto_coeff x METEOR
        return f"intent_accuracy*{float(args['intent_coeff'])}+meteor*{float(args['auto_coeff'])}"
    shaping = f"+{args['shaping_fn']}*1.0" if args.get("shaping_fn") else ""
    # RL4LMs' reward ids whose computation grueflow registers under another id: its ter reward pays 1 - TER/100
    ported = {"learned_reward": "learned_classifier", "ter": "one_minus_ter"}
    return ported.get(reward["id"], reward["id"]) + "*1.0" + shaping


def expected(row: dict[str, str]) -> dict[str, object]:
    """The grueflow values a ported RL4LMs row converts to (the module docstring's rules)."""
    if row["algorithm"] == "supervised":
        return {"epochs": int(row["sup_epochs"]), "batch_size": int(row["sup_batch_size"]),
                "learning_rate": float(row["sup_learning_rate"]), "weight_decay": _number(row["sup_weight_decay"], 0.0),
                "lr_schedule": row["sup_lr_scheduler"]}
    algorithm, episode = row["algorithm"], int(row["max_episode_length"])
    completions = math.ceil(int(row["n_envs"]) * int(row["n_steps"]) / episode)
    if algorithm == "a2c":  # one update on the whole rollout
        per_minibatch = completions
    else:
        per_minibatch = min(completions, max(1, round(int(row["batch_size"] or SB3_BATCH[algorithm]) / episode)))
    values: dict[str, object] = {
        "iterations": int(row["n_iters"]),
        "rollouts_per_iteration": per_minibatch * math.ceil(completions / per_minibatch),
        "minibatch_size": per_minibatch, "learning_rate": float(row["learning_rate"]),
        **{key: _number(row[key], default) for key, default in SB3[algorithm].items()},
        "kl.coef": float(row["kl_coeff"]), "kl.target": float(row["target_kl"]), "kl.target_per": "token",
        "kl.adaptive": True, "prompt_length": int(row["max_prompt_length"]),
        **{f"rollout.{k}": v for k, v in _generation(row["rollout_generation"]).items()},
        # without train_evaluation.generation_kwargs RL4LMs evaluates with the policy's own generation_kwargs
        **{f"eval.{k}": v for k, v in _generation(row["eval_generation"] or row["rollout_generation"]).items()},
        "reward": _reward(row["reward"]),
    }
    if algorithm in ("ppo", "nlpo"):
        values["epochs"] = int(row["n_epochs"])
    if algorithm == "a2c":
        values.update({"epochs": 1, "n_steps": int(row["n_steps"])})
    if algorithm == "trpo":
        values["max_kl"] = 0.01  # sb3-contrib's target_kl, which RL4LMs' config leaves as is
    datapool = json.loads(row["datapool"])
    if datapool["id"] == "dummy_pool":
        values["prompt"] = datapool["args"]["prompt"]
    for theirs, ours in DATAPOOL_ARGS.get(datapool["id"], {}).items():
        values[f"datapool.{ours}"] = datapool["args"][theirs]
    if row["algorithm"] == "nlpo":
        values.update({"top_p": float(row["top_mask"]), "mask_type": row["mask_type"],
                       "target_update_iterations": int(row["target_update_iterations"])})
        values["min_tokens_to_keep"] = int(row["min_tokens_to_keep"] or RL4LMS_MIN_TOKENS_TO_KEEP)
    return values


def rl4lms_min_length(cfg: GenerationConfig, kind: str) -> int:
    """The ``min_length`` RL4LMs would give for what ``cfg`` decodes: the tokens before EOS may be drawn that
    grueflow applies (its default included), for a seq2seq model counting the decoder's start token as
    transformers' ``min_length`` does (0 and 1 mean the same there; 0 is RL4LMs' default)."""
    if cfg.min_length is not None:
        return cfg.min_length
    tokens = cfg.min_new(kind)
    return tokens + 1 if kind == "seq2seq" and tokens else tokens


def grueflow_values(row: dict[str, str]) -> dict[str, object]:
    """The same fields of grueflow's config of that row: ``params/grue``'s task file, method file and overrides."""
    path = task_file(row["config"])
    algorithm = row["algorithm"]
    method = load_method(algorithm, GRUE / "methods" / f"{algorithm}.yaml", path, row["start"] or "zero_shot")
    if algorithm == "supervised":
        return {"epochs": method.epochs, "batch_size": method.batch_size, "learning_rate": method.learning_rate,
                "weight_decay": method.weight_decay, "lr_schedule": method.lr_schedule}
    start = row["start"] or "zero_shot"
    rollout = load_task_section(GenerationConfig, path, "rollout_generation", algorithm, start)
    datapool = load_section(DatapoolConfig, path, "datapool")
    pool_args = parse(DATAPOOLS.get(datapool.id).Args, dict(datapool.args), "args")
    evaluation = load_task_section(GenerationConfig, path, "eval_generation", algorithm, start)
    reward = load_task_section(RewardConfig, path, "reward", algorithm, start)

    kind = load_section(ModelConfig, path, "model").kind

    def generation(cfg: GenerationConfig) -> dict[str, object]:
        return {"do_sample": cfg.do_sample, "top_k": cfg.top_k if cfg.do_sample else HF_GENERATION["top_k"],
                "top_p": cfg.top_p, "temperature": cfg.temperature, "num_beams": cfg.num_beams,
                "min_length": rl4lms_min_length(cfg, kind), "length_penalty": cfg.length_penalty,
                "max_new_tokens": cfg.max_new_tokens}

    values: dict[str, object] = {
        **{key: getattr(method, key) for key in ("iterations", "epochs", "rollouts_per_iteration", "minibatch_size",
                                                 "learning_rate", "ent_coef", "gae_lambda", "vf_coef", "clip_range",
                                                 "n_steps", "max_kl") if hasattr(method, key)},
        "kl.coef": method.kl.coef, "kl.target": method.kl.target, "kl.target_per": method.kl.target_per,
        "kl.adaptive": method.kl.adaptive,
        "prompt_length": load_task_section(LengthsConfig, path, "lengths", algorithm, start).prompt,
        "prompt": datapool.args.get("prompt"),
        **{f"datapool.{name}": getattr(pool_args, name) for names in DATAPOOL_ARGS.values() for name in names.values()
           if hasattr(pool_args, name)},
        **{f"rollout.{k}": v for k, v in generation(rollout).items()},
        **{f"eval.{k}": v for k, v in generation(evaluation).items()},
        "reward": "+".join(f"{c.metric}{'/' + c.score if c.score else ''}*{float(c.weight)}" for c in reward.components),
    }
    if algorithm == "nlpo":
        values.update({"top_p": method.top_p, "mask_type": "learned_top_p" if method.top_k == 0 else "learned_top_k",
                       "target_update_iterations": method.target_update_iterations,
                       "min_tokens_to_keep": method.min_tokens_to_keep})
    return values


def differing(row: dict[str, str]) -> set[str]:
    ours = grueflow_values(row)
    return {field for field, value in expected(row).items()
            if not (ours[field] == pytest.approx(value) if isinstance(value, float) else ours[field] == value)}


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row["config"])
def test_the_grueflow_config_is_rl4lms_own_or_says_why_not(row):
    config = row["config"]
    found = differing(row)
    unlisted = sorted(field for field in found if (config, field) not in DIFFERENCES)
    stale = sorted(field for c, field in DIFFERENCES if c == config and field not in found)
    assert not unlisted, f"{config}: {[(f, expected(row)[f], grueflow_values(row)[f]) for f in unlisted]} differ"
    assert not stale, f"{config}: differences.csv lists {stale}, which no longer differ"


def test_every_listed_difference_is_a_ported_config_with_a_reason():
    configs = {row["config"] for row in ROWS}
    assert all(config in configs and why.strip() for (config, _), why in DIFFERENCES.items())


