"""The RL maths, pinned with literal values: GAE, whitening, KL control, completion masks; and the config checks
that refuse settings the maths would ignore (a KL term a loss lacks, a critic never built, an adaptive 0)."""

import pytest
import torch

from grueflow.models.policy import completion_mask
from grueflow.rl import ALGORITHMS
from grueflow.rl.advantages import gae, masked_mean, masked_whiten
from grueflow.rl.configs import KL_IN_LOSS_ALGORITHMS, KLConfig, TRPOConfig
from grueflow.rl.kl import KLController, kl_k1
from grueflow.rl.objectives import MiniBatch, Outputs


def naive_gae(rewards, values, gamma, lam):
    """Textbook GAE for one episode (lists), value 0 after the end."""
    advantages = []
    for t in range(len(rewards)):
        a = 0.0
        for k in range(t, len(rewards)):
            next_value = values[k + 1] if k + 1 < len(values) else 0.0
            delta = rewards[k] + gamma * next_value - values[k]
            a += (gamma * lam) ** (k - t) * delta
        advantages.append(a)
    return advantages


def test_gae_matches_a_naive_loop_and_respects_the_mask():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 5.0], [0.5, -0.5, 2.0, 0.0]])
    values = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.4, 0.0, -0.2, 0.7]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    expected_0 = naive_gae([0.0, 0.0, 1.0], [0.1, 0.2, 0.3], 0.9, 0.8) + [0.0]
    expected_1 = naive_gae([0.5, -0.5, 2.0, 0.0], [0.4, 0.0, -0.2, 0.7], 0.9, 0.8)
    assert advantages[0].tolist() == pytest.approx(expected_0, abs=1e-6)
    assert advantages[1].tolist() == pytest.approx(expected_1, abs=1e-6)
    # one literal: last real step of row 0 is r - V = 1.0 - 0.3
    assert advantages[0, 2].item() == pytest.approx(0.7)
    assert returns[0].tolist() == pytest.approx([a + v for a, v in zip(expected_0[:3], [0.1, 0.2, 0.3])] + [0.0], abs=1e-6)


def test_masked_whiten_and_mean():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert masked_mean(values, mask).item() == pytest.approx(2.0)
    whitened = masked_whiten(values, mask)
    assert whitened[0].tolist() == pytest.approx([-1.2247449, 0.0, 1.2247449, 0.0], abs=1e-5)


def test_adaptive_kl_controller_update_rule():
    ctl = KLController.from_config(KLConfig(coef=0.1, adaptive=True, target=2.0, kl_lr=0.1))
    ctl.update(3.0)  # error = clip(0.5, -0.2, 0.2) = 0.2 -> coef * 1.02
    assert ctl.coef == pytest.approx(0.102)
    ctl.update(1.8)  # error = -0.1 -> coef * 0.99
    assert ctl.coef == pytest.approx(0.102 * 0.99)
    fixed = KLController.from_config(KLConfig(coef=0.1, adaptive=False, target=None))
    fixed.update(50.0)
    assert fixed.coef == 0.1


@pytest.mark.parametrize("per,coef", [("sequence", 0.102), ("token", 0.1 * (1 + 0.1 * -0.1))])
def test_the_adaptive_kl_target_is_per_sequence_or_per_token(per, coef):
    ctl = KLController.from_config(KLConfig(coef=0.1, adaptive=True, target=2.0, kl_lr=0.1, target_per=per))
    ctl.step(sequence_kl=36.0, token_kl=1.8)  # 20 tokens of 1.8: error 0.2 (clipped) per sequence, -0.1 per token
    assert ctl.coef == pytest.approx(coef)


def test_an_adaptive_kl_coefficient_of_0_is_refused_as_it_would_stay_0():
    stuck = KLController.from_config(KLConfig(coef=0.0, adaptive=False, target=2.0))
    stuck.adaptive = True  # the multiplicative rule on a coefficient of 0, as if the config had let it through
    stuck.update(50.0)
    assert stuck.coef == 0.0
    for settings in ({"coef": 0.0, "adaptive": True}, {"coef": 0.0}):  # adaptive is true by default
        with pytest.raises(ValueError, match=r"coef is 0.0 with adaptive: true \(the default\); an adaptive "
                                             r"coefficient scales itself and stays at 0"):
            KLConfig(**settings)
    assert KLConfig(coef=0.0, adaptive=False, target=None).coef == 0.0


@pytest.mark.parametrize("field, bad, least", [("cg_max_steps", 0, 1), ("line_search_max_iter", 0, 1),
                                               ("n_critic_updates", 0, 1), ("cg_damping", -5.0, 0.0)])
def test_trpo_refuses_settings_that_take_no_step(field, bad, least):
    with pytest.raises(ValueError, match=rf"^{field} must be >= {least:g} "):
        TRPOConfig(**{field: bad})
    assert getattr(TRPOConfig(**{field: least}), field) == least


def _minibatch_and_outputs(uses_critic: bool) -> tuple[MiniBatch, Outputs]:
    """A (2, 3) minibatch whose reference log-probs differ from the policy's, so any KL term is non-zero."""
    generator = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(2, 3, generator=generator) - 0.1
    batch = MiniBatch(mask=torch.ones(2, 3), logprobs=logprobs, ref_logprobs=logprobs - 0.5,
                      values=torch.zeros(2, 3), advantages=torch.randn(2, 3, generator=generator),
                      returns=torch.randn(2, 3, generator=generator))
    new_logprobs = logprobs + 0.01 * torch.randn(2, 3, generator=generator)
    values = torch.randn(2, 3, generator=generator) if uses_critic else None
    new = Outputs(new_logprobs, values, torch.rand(2, 3, generator=generator))
    return batch, new


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_kl_in_loss_is_accepted_exactly_by_the_algorithms_whose_loss_adds_the_kl(name):
    spec = ALGORITHMS.get(name)
    config, algorithm = spec.Config, spec.load()
    try:
        config(kl_in_loss=True)
        accepted = True
    except ValueError as err:
        accepted = False
        assert str(err).startswith(f"kl_in_loss must be false for {name}, got true")
    forced = config()
    object.__setattr__(forced, "kl_in_loss", True)  # what the loss would do had the config let it through
    batch, new = _minibatch_and_outputs(algorithm.uses_critic)
    adds_kl = not algorithm.own_update and (algorithm(forced).loss(new, batch, 0.0)[0].item()
                                            != algorithm(forced).loss(new, batch, 1.0)[0].item())
    assert accepted == adds_kl
    assert (name in KL_IN_LOSS_ALGORITHMS) == adds_kl  # the list the refusal names


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_a_critic_setting_is_refused_exactly_by_the_algorithms_without_a_critic(name):
    spec = ALGORITHMS.get(name)
    if spec.load().uses_critic:
        assert spec.Config(critic="separate").critic == "separate"
    else:
        with pytest.raises(ValueError, match="^critic: 'separate' has no effect here: this algorithm has no critic"):
            spec.Config(critic="separate")


def test_k1_estimates_kl_of_two_categoricals():
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    closed_form = (p * (p / q).log()).sum().item()
    # expectation of k1 under p, computed exactly over the support
    expected_k1 = (p * kl_k1(p.log(), q.log())).sum().item()
    assert expected_k1 == pytest.approx(closed_form)
    assert closed_form == pytest.approx(0.1838, abs=1e-4)


def test_completion_mask_keeps_tokens_up_to_the_first_eos():
    completions = torch.tensor([[5, 6, 2, 7, 2], [2, 9, 9, 9, 9], [4, 4, 4, 4, 4]])
    assert completion_mask(completions, eos_token_id=2).tolist() == [
        [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_entropy_from_logprobs_with_and_without_gradients_and_masked_actions():
    import torch.nn.functional as F

    from grueflow.models.policy import entropy_from_logprobs

    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, float("-inf"), float("-inf")]]])  # (1, 2, 4)
    p = torch.tensor(2.0).exp() / (torch.tensor(1.0).exp() + torch.tensor(2.0).exp())
    expected = torch.tensor([[4 * 0.25 * torch.log(torch.tensor(4.0)), -(p * p.log() + (1 - p) * (1 - p).log())]])
    logp = F.log_softmax(logits, dim=-1)
    assert torch.allclose(entropy_from_logprobs(logp), expected, atol=1e-6)  # no gradients: the clamped form
    trainable = logits.clone().requires_grad_()
    entropy = entropy_from_logprobs(F.log_softmax(trainable, dim=-1))
    assert torch.allclose(entropy.detach(), expected, atol=1e-6)
    (1e6 * entropy.sum()).backward()  # a large upstream gradient: the masked actions' stays 0, never NaN
    assert torch.isfinite(trainable.grad).all() and (trainable.grad[0, 1, 2:] == 0).all()


@pytest.mark.parametrize("vocab, masked", [(5, False), (49152, False), (300, True)])
def test_selective_logprobs_equal_the_full_log_softmax_values_and_gradients(vocab, masked):
    """Chunked log-probs and entropies (a real vocabulary's 49,152 spans several chunks) against the full
    (B, T, V) ``log_softmax``: values and gradients through each output alone and both, NLPO's masks included."""
    import torch.nn.functional as F

    from grueflow.models.policy import entropy_from_logprobs, selective_logprobs, token_logprobs

    torch.manual_seed(0)
    logits = (3 * torch.randn(3, 7, vocab)).requires_grad_()
    tokens = torch.randint(0, vocab, (3, 7))
    mask = None
    if masked:
        mask = (torch.rand(3, 7, vocab) > 0.5).scatter_(2, tokens[..., None], True)  # the taken action is allowed

    def full() -> tuple[torch.Tensor, torch.Tensor]:
        logp = F.log_softmax(logits if mask is None else logits.masked_fill(~mask, float("-inf")), -1)
        return token_logprobs(logp, tokens), entropy_from_logprobs(logp)

    def gradient(outputs: tuple[torch.Tensor, torch.Tensor], weights: tuple[float, float]) -> torch.Tensor:
        (weights[0] * outputs[0].sum() + weights[1] * (outputs[1] * torch.arange(7.0)).sum()).backward()
        grad, logits.grad = logits.grad, None
        return grad

    for weights in ((1.0, 0.0), (0.0, 1.0), (1.0, 0.5)):
        got, expected = selective_logprobs(logits, tokens, mask, entropy=True), full()
        assert torch.allclose(got[0], expected[0], atol=1e-5) and torch.allclose(got[1], expected[1], atol=1e-4)
        got_grad, expected_grad = gradient(got, weights), gradient(expected, weights)
        assert torch.allclose(got_grad, expected_grad, atol=1e-6)
        if mask is not None:
            assert (got_grad[~mask] == 0).all()
    logprobs, entropy = selective_logprobs(logits, tokens, mask)
    assert entropy is None and torch.allclose(logprobs, full()[0], atol=1e-5)
