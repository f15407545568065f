"""A2C, GRPO, RLOO and REINFORCE++ advantages and the KL estimators, against hand-computed values."""

import pytest
import torch

from grueflow.config import ConfigError
from grueflow.params import parse
from grueflow.rl.configs import GroupConfig
from grueflow.rl.critic_free import discounted_returns, group_normalised, leave_one_out
from grueflow.rl.kl import kl_k1, kl_k2, kl_k3


def test_group_normalised_advantages():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 1.0])
    expected = [-1.161895, -0.387298, 0.387298, 1.161895, -0.5, -0.5, -0.5, 1.5]  # std with Bessel's correction
    assert group_normalised(scores, 4).tolist() == pytest.approx(expected, abs=1e-4)


def test_leave_one_out_advantages():
    assert leave_one_out(torch.tensor([1.0, 2.0, 3.0, 4.0]), 4).tolist() == pytest.approx([-2.0, -2 / 3, 2 / 3, 2.0])
    assert leave_one_out(torch.tensor([5.0, 1.0]), 2).tolist() == pytest.approx([4.0, -4.0])


def test_reinforce_pp_returns():
    rewards = torch.tensor([[0.1, -0.2, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert discounted_returns(rewards, mask, 1.0).tolist() == [pytest.approx([0.9, 0.8, 1.0, 0.0])]
    assert discounted_returns(rewards, mask, 0.5).tolist() == [pytest.approx([0.1 - 0.1 + 0.25, -0.2 + 0.5, 1.0, 0.0])]


def test_kl_estimators_against_the_closed_form():
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    closed_form = (p * (p / q).log()).sum().item()
    expect = lambda k: (p * k(p.log(), q.log())).sum().item()  # exact expectation under p  # noqa: E731
    assert expect(kl_k1) == pytest.approx(closed_form)
    assert expect(kl_k3) == pytest.approx(closed_form)  # unbiased too
    assert expect(kl_k2) == pytest.approx(0.5 * (p * (p / q).log() ** 2).sum().item())
    assert (kl_k3(p.log(), q.log()) >= 0).all()
    assert kl_k3(torch.tensor([-1.0]), torch.tensor([-2.0])).item() == pytest.approx(float(torch.exp(torch.tensor(-1.0))) - 1 + 1)


def test_group_algorithms_need_groups():
    with pytest.raises(ConfigError, match=r"group_size >= 2, got 1"):
        parse(GroupConfig, {"group_size": 1, "rollouts_per_iteration": 16}, "grpo.yaml:")
    with pytest.raises(ConfigError, match=r"rollouts_per_iteration=18 is not a multiple of minibatch_size=16"):
        parse(GroupConfig, {"rollouts_per_iteration": 18}, "grpo.yaml:")


def test_a2c_n_step_returns_against_a_naive_loop():
    from grueflow.rl.a2c import n_step_returns

    rewards = torch.tensor([[1.0, 0.0, 2.0, 0.5, 9.0]])
    values = torch.tensor([[0.3, 0.2, 0.1, 0.4, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    gamma, n = 0.9, 2
    r, v = [1.0, 0.0, 2.0, 0.5], [0.3, 0.2, 0.1, 0.4, 0.0]
    expected = [sum(gamma ** k * r[t + k] for k in range(min(n, 4 - t))) + gamma ** min(n, 4 - t) * v[min(t + n, 4)]
                for t in range(4)] + [0.0]
    assert n_step_returns(rewards, values, mask, gamma, n)[0].tolist() == pytest.approx(expected)
    assert expected[0] == pytest.approx(1.0 + 0.9 * 0.0 + 0.81 * 0.1)
