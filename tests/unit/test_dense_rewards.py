"""Dense rewards: a reward component that pays per completion token (RL4LMs' RewardFunction, called at every
step), added to the per-token rewards before advantages; the sequence reward stays at the last token."""

import pytest
import torch

from grueflow.config import GenerationConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import TOKENS_KEY, MetricContext
from grueflow.metrics.diversity import tokens
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.advantages import gae
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything

REWARD = {"components": [{"metric": "token_cost", "weight": 0.5},
                         {"metric": "diversity", "score": "length", "weight": 1.0}]}


def test_a_dense_components_per_token_scores_are_weighted_and_kept_apart_from_the_sequence_reward():
    reward = Reward(parse(RewardConfig, REWARD, "reward"), MetricContext())
    assert reward.dense
    scored = reward.score(["p", "p"], ["a b c", "d"], [["r"], ["r"]],
                          [{TOKENS_KEY: ["a", " b", " c", "<eos>"]}, {TOKENS_KEY: ["d"]}])
    assert scored.per_token == [[-0.5, -0.5, -0.5, -0.5], [-0.5]]
    assert scored.sequence == [3.0, 1.0]  # the words of each generation: the sequence component alone
    assert scored.total == [3.0 - 2.0, 1.0 - 0.5] and scored.parts["shaping/token_cost"] == [-4.0, -1.0]


HOW = ("a dense metric returns per_token={'custom/dense': one list per generation, with a score for each of its "
       "completion tokens (meta[i]['completion_tokens']), summing to its per-sample score}")


@pytest.mark.parametrize("per_token, per_sample, expect", [
    ([[-1.0, -1.0], [-1.0]], [-3.0, -1.0], "returned 2 scores as the per-token scores of sample 0 under "
                                           "'custom/dense', whose completion has 3 tokens; "),
    ([[-1.0] * 3, [-1.0]], [5.0, -1.0], "returned the per-sample score 5 for sample 0 under 'custom/dense', and "
                                        "per-token scores that sum to -3; "),
    (None, [-3.0, -1.0], "returned None as its per-token scores under 'custom/dense' for 2 generations; "),
    ([-3.0, -1.0], [-3.0, -1.0], "returned -3.0 as the per-token scores of sample 0 under 'custom/dense', whose "
                                 "completion has 3 tokens; "),
    ([[-1.0, None, -1.0], [-1.0]], [-3.0, -1.0], "returned None among the per-token scores of sample 0 under "
                                                 "'custom/dense'; scores are numbers"),
], ids=["row-one-short", "sum-differs", "none", "flat-list", "none-in-a-row"])
def test_per_token_scores_that_do_not_fit_the_tokens_or_the_sum_are_refused(per_token, per_sample, expect):
    """A row one token short trained on shifted scores (exit 0); per-sample 5.0 beside per-token scores summing to
    -3 logged 5.0 while RL trained on -3; None or a flat list ended in a TypeError traceback in reward.py."""
    from grueflow.metrics import MetricResult, MetricResultError, check_per_token

    result = MetricResult({"custom/dense": per_sample}, {"custom/dense": 0.0}, {"custom/dense": per_token})
    with pytest.raises(MetricResultError) as err:
        check_per_token("my_rewards:Dense", result, "custom/dense", [["a", " b", " c"], ["d"]])
    assert str(err.value).startswith("metric 'my_rewards:Dense' ") and expect in str(err.value)
    if "scores are numbers" not in expect:
        assert str(err.value).endswith(HOW)
    fine = MetricResult({"custom/dense": [-3.0, float("nan")]}, {}, {"custom/dense": [(-1.0,) * 3, [-1.0]]})
    assert check_per_token("d", fine, "custom/dense", [["a", " b", " c"], ["d"]]) == [[-1.0] * 3, [-1.0]]


def test_dense_rewards_reach_gae_exactly(tiny_models):
    """Literal: every completion token gets -0.5 (weight x -1), the last one also the sequence reward, and with
    the KL penalty off the rollout's rewards are exactly these; PPO's advantages are GAE of them."""
    seed_everything(0)
    loader = DATAPOOLS.get("synthetic_sentiment")
    samples = loader.build(loader.Args(n_train=8, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    model, tokenizer = load_pretrained(tiny_models["causal"])
    cfg = parse(ALGORITHMS.get("ppo").Config, {"iterations": 1, "rollouts_per_iteration": 8, "minibatch_size": 8,
                                               "epochs": 1, "whiten_advantages": False,
                                               "kl": {"coef": 0.0, "adaptive": False, "target": None}}, "ppo")
    reward = Reward(parse(RewardConfig, REWARD, "reward"), MetricContext())
    trainer = RLTrainer("ppo", cfg, Policy(model, tokenizer, 24), load_pretrained(tiny_models["causal"])[0], reward,
                        samples, GenerationConfig(max_new_tokens=6, min_new_tokens=2), seed=0)
    rollout = trainer.collect()
    mask, lengths = rollout.mask, rollout.mask.sum(1).long()
    words = [len(w) for w in tokens(trainer.last_batch["generations"])]  # the diversity metric's words
    expected = torch.zeros_like(rollout.rewards)
    for row, (n, w) in enumerate(zip(lengths.tolist(), words)):
        expected[row, :n] = -0.5
        expected[row, n - 1] += w
    assert torch.equal(rollout.rewards, expected)
    assert rollout.scores.tolist() == pytest.approx([w - 0.5 * n for w, n in zip(words, lengths.tolist())])
    advantages, returns = trainer.algorithm.advantages(rollout.rewards, rollout.values, mask, rollout.scores)
    literal = gae(expected, rollout.values, mask, cfg.gamma, cfg.gae_lambda)
    assert torch.equal(advantages, literal[0]) and torch.equal(returns, literal[1])
