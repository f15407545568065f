"""Each architecture family, as a tiny model built from config, through warm start, RL and evaluate.

GPT-2 and Llama (causal: left-padded prompts), T5 and BART (seq2seq: each with its own decoder start
token). Every model is saved and loaded back through ``from_pretrained``, as a hub model would be.
"""

import math

import pytest
import torch

from grueflow import evaluation, supervised
from grueflow.config import GenerationConfig, MetricSpec, ModelConfig, RewardConfig, SupervisedConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import MODELS, load_pretrained
from grueflow.models.policy import Policy
from grueflow.models.tiny import build_tiny
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything

SIZES = {"tiny_gpt2": {"n_layer": 1, "n_embd": 32, "n_head": 2},
         "tiny_llama": {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 64},
         "tiny_t5": {"num_layers": 1, "num_decoder_layers": 1, "d_model": 32, "d_ff": 64, "d_kv": 16},
         "tiny_bart": {"encoder_layers": 1, "decoder_layers": 1, "d_model": 32, "encoder_ffn_dim": 64,
                       "decoder_ffn_dim": 64}}


@pytest.mark.parametrize("model_id", sorted(SIZES))
def test_tiny_family_warm_starts_trains_with_rl_and_evaluates(model_id, tmp_path):
    source = MODELS.get(model_id)
    loader = DATAPOOLS.get("synthetic_concepts")
    pool = loader.build(loader.Args(n_train=32, n_val=4, n_test=8, n_unlabelled=300))
    cfg = parse(ModelConfig, {"id": model_id, "config": SIZES[model_id], "tokenizer": {"vocab_size": 300},
                              "pretrain": {"steps": 20, "batch_size": 16, "max_length": 24}}, "model")
    model, tokenizer, _ = build_tiny(cfg, source.architecture, pool.unlabelled, seed=0)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")

    seed_everything(0)
    model, tokenizer = load_pretrained(tmp_path / "base")
    assert model.config.is_encoder_decoder == (source.kind == "seq2seq")
    policy = Policy(model, tokenizer, max_prompt_length=16)
    if source.kind == "causal":  # prompts end where generation starts
        assert policy.encode(["a", "a b c d"]).attention_mask[0, 0] == 0
    losses = supervised.train(policy, pool.splits["train"], pool.splits["val"],
                              parse(SupervisedConfig, {"epochs": 2, "batch_size": 16}, "supervised"), 16, seed=0)
    assert losses[-1]["train_loss"] < losses[0]["train_loss"]

    ref_model, _ = load_pretrained(tmp_path / "base")
    reward_cfg = parse(RewardConfig, {"components": [{"metric": "concept_coverage"}]}, "reward")
    reward = Reward(reward_cfg, MetricContext())
    rl_cfg = parse(ALGORITHMS.get("ppo").Config, {"iterations": 2, "rollouts_per_iteration": 8, "minibatch_size": 8,
                                                 "epochs": 1}, "ppo")
    curve = RLTrainer("ppo", rl_cfg, policy, ref_model, reward, pool.splits["train"],
                      GenerationConfig(max_new_tokens=6), seed=0).train().curve
    assert all(math.isfinite(v) for row in curve for v in row.values())

    test = pool.splits["test"]
    generations = evaluation.generate(policy, test, GenerationConfig(max_new_tokens=6, do_sample=False))
    rows, corpus, missing = evaluation.score(test, generations, reward_cfg, (parse(MetricSpec, {"id": "bleu"}, "metrics"),), MetricContext())
    assert len(rows) == 8 and corpus["task/coverage"] is not None and not missing
    assert torch.isfinite(torch.tensor([r["scores"]["reward"] for r in rows])).all()
