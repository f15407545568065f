"""RL4LMs' synthetic sanity tasks: the dummy_pool datapool, the increasing_numbers and sentences_with_dates
rewards, and the known-answer RL check: PPO teaches a tiny GPT-2 that saw numbers only in random order to
write them increasing."""

import pytest

from grueflow.config import GenerationConfig, ModelConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import METRICS, MetricContext
from grueflow.metrics.reward import Reward
from grueflow.metrics.task import increasing_numbers
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything


@pytest.mark.parametrize("text,score", [
    ("1 2 3", 3 / 10),  # over max(3 tokens, min_tokens / 2 = 10)
    (" ".join(str(n) for n in range(1, 13)), 1.0),  # 12 increasing numbers, 12 tokens
    ("5 3 8", 1 / 10),  # the run stops at the first number not above the one before
    ("a 1 b 2.5 c 2.5 9", 2 / 10),  # words do not break the run; an equal number does
    ("1 2 3 4 5 6 7 8 9 10 11 x y z w v u t s r q", 11 / 21),
    ("no numbers here", 0.0),
    ("", 0.0),
])
def test_increasing_numbers_is_rl4lms_reward(text, score):
    assert increasing_numbers(text, min_tokens=20) == pytest.approx(score)


def test_the_metrics_score_each_generation():
    numbers = METRICS.get("increasing_numbers")
    result = numbers.build(numbers.Args(min_tokens=4), MetricContext())([""] * 2, ["1 2", "2 1"], [(), ()], [{}, {}])
    assert result.per_sample["synthetic/increasing_numbers"] == [1.0, 0.5]
    dates = METRICS.get("sentences_with_dates")
    result = dates.build(None, MetricContext())([""] * 3, ["on 2021-03-04 .", "on 2021-3-4 .", "1999-12-31"],
                                                [()] * 3, [{}] * 3)
    assert result.per_sample["synthetic/has_date"] == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="min_tokens must be in"):
        numbers.Args(min_tokens=0)


def test_the_dummy_pool_is_one_prompt_and_numbers_to_learn_from():
    loader = DATAPOOLS.get("dummy_pool")
    pool = loader.build(loader.Args(n_samples=3, prompt="<s>", n_unlabelled=5))
    assert {split: [(s.prompt, s.references) for s in samples] for split, samples in pool.splits.items()} == \
        {split: [("<s>", ())] * 3 for split in ("train", "val", "test")}
    assert len(pool.unlabelled) == 5 and all(token.isdigit() for line in pool.unlabelled for token in line.split())
    assert loader.build(loader.Args(n_unlabelled=5)).unlabelled == pool.unlabelled  # seeded
    with pytest.raises(ValueError, match="prompt must hold a visible character"):
        loader.Args(prompt=" ")


def test_ppo_teaches_a_tiny_gpt2_to_count_up(tmp_path):
    """RL4LMs' synthetic_generate_increasing_numbers/gpt2_ppo at toy size (a 1-layer GPT-2 pre-trained on numbers
    in random order, whose samples score about 0.15): 40 iterations must raise the reward by 0.1."""
    from grueflow.models.tiny import build_tiny

    loader = DATAPOOLS.get("dummy_pool")
    pool = loader.build(loader.Args(n_samples=64, prompt="</s>", n_unlabelled=800))  # EOS, as RL4LMs
    cfg = parse(ModelConfig, {"id": "tiny_gpt2", "config": {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64},
                              "tokenizer": {"vocab_size": 300}, "pretrain": {"steps": 150, "batch_size": 16}}, "model")
    model, tokenizer, _ = build_tiny(cfg, "gpt2", pool.unlabelled, seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    seed_everything(0)
    policy, ref_model = load_pretrained(tmp_path), load_pretrained(tmp_path)[0]
    method = parse(ALGORITHMS.get("ppo").Config, {
        "iterations": 40, "rollouts_per_iteration": 64, "minibatch_size": 16, "epochs": 4, "learning_rate": 3e-3,
        "kl": {"coef": 0.001, "adaptive": False, "target": None}}, "ppo")
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "increasing_numbers", "args": {"min_tokens": 20}}]},
                          "reward"), MetricContext())
    trainer = RLTrainer("ppo", method, Policy(policy[0], policy[1], 4), ref_model, reward, pool.splits["train"],
                        GenerationConfig(max_new_tokens=20, top_k=50), seed=0)
    curve = [row["reward/task"] for row in trainer.train().curve]
    assert sum(curve[-3:]) / 3 > sum(curve[:3]) / 3 + 0.1, curve
