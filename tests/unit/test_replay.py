"""The update's forward taken from generation (issue 6): a replayed rollout's gradients equal those of a
forward pass over it (``Policy.score``), on left-padded grouped prompts with rows that stop early."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from grueflow.config import GenerationConfig
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy, completion_mask, logprobs_from_logits
from grueflow.models.replay import supports_replay

PROMPTS = ["a b c d e f", "x y", "the movie was"]


def loss_of(logits: torch.Tensor, completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A loss that touches every part of the logits: the sampled tokens' log-probs (weighted per token) and
    the entropy, over the completion mask."""
    weights = torch.linspace(-1.0, 2.0, completions.numel()).view_as(completions)
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return ((logprobs_from_logits(logits, completions) * weights + 0.1 * entropy) * mask).sum() / mask.sum()


def grads(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("activation", ["gelu_new", "relu"])  # PyTorch's tanh-GELU backward; autograd's for others
@pytest.mark.parametrize("new_tokens", [1, 2, 9])  # 1: no token is fed, only the prompt's logits
def test_replayed_gradients_equal_a_forward_pass(tiny_models, new_tokens, activation):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    if activation != "gelu_new":
        torch.manual_seed(0)
        config = GPT2Config.from_pretrained(tiny_models["causal"], activation_function=activation)
        model = GPT2LMHeadModel(config).eval()
    assert supports_replay(model) and model.transformer.wte.weight is model.lm_head.weight  # tied head
    assert type(model.transformer.h[0].mlp.act).__name__ == ("GELUTanh" if activation == "gelu_new" else "ReLU")
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode([p for p in PROMPTS for _ in range(3)])
    assert (prompts.attention_mask == 0).any()  # left padding
    torch.manual_seed(3)
    gen = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=1)
    completions, replay = policy.sample_kept(prompts, gen, group_size=3)
    mask = completion_mask(completions, policy.eos_token_id)
    assert completions.shape == (9, new_tokens) and replay is not None

    loss_of(replay.logits(), completions, mask).backward()
    replayed = grads(model)
    model.zero_grad(set_to_none=True)
    expected_logits = policy.score(prompts, completions, group_size=3).logits
    loss_of(expected_logits, completions, mask).backward()
    expected = grads(model)

    assert torch.allclose(replay.logits_value[mask.bool()], expected_logits.detach()[mask.bool()], atol=1e-5)
    assert replayed.keys() == expected.keys() and len(expected) == len(list(model.parameters()))  # every weight
    for name, grad in expected.items():
        assert grad.abs().max() > 0, name
        assert torch.allclose(replayed[name], grad, rtol=1e-4, atol=1e-6), (name, (replayed[name] - grad).abs().max())


def test_rows_that_stop_early_get_the_masked_gradients(tiny_models):
    """With EOS likely (its logit raised by about 5), rows stop at different lengths; the positions after EOS,
    which the decode step attended but ``score`` masks, carry no gradient either way."""
    model, tokenizer = load_pretrained(tiny_models["causal"])
    with torch.no_grad():  # ln_f's output gets +1 in feature 0, which EOS's row (and no other) weighs by 5
        model.transformer.ln_f.bias[0] += 1.0
        model.lm_head.weight[tokenizer.eos_token_id, 0] += 5.0
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode([p for p in PROMPTS for _ in range(4)])
    torch.manual_seed(0)
    completions, replay = policy.sample_kept(prompts, GenerationConfig(max_new_tokens=8), group_size=4)
    mask = completion_mask(completions, policy.eos_token_id)
    lengths = mask.sum(1)
    assert lengths.min() < lengths.max() and lengths.min() < 8  # early stops, of different lengths
    loss_of(replay.logits(), completions, mask).backward()
    replayed = grads(model)
    model.zero_grad(set_to_none=True)
    loss_of(policy.score(prompts, completions, group_size=4).logits, completions, mask).backward()
    for name, grad in grads(model).items():
        assert torch.allclose(replayed[name], grad, rtol=1e-4, atol=1e-6), name


def test_models_the_replay_cannot_differentiate_sample_without_it(tiny_models):
    from grueflow.config import LoraConfig
    from grueflow.models.lora import with_lora
    from grueflow.params import parse

    model, tokenizer = load_pretrained(tiny_models["causal"])
    lora = with_lora(model, parse(LoraConfig, {"r": 4}, "lora"))
    assert not supports_replay(lora)
    policy = Policy(lora, tokenizer, max_prompt_length=24)
    completions, replay = policy.sample_kept(policy.encode(PROMPTS), GenerationConfig(max_new_tokens=3))
    assert replay is None and completions.shape == (3, 3)
    seq2seq, tokenizer = load_pretrained(tiny_models["seq2seq"])
    assert not supports_replay(seq2seq)


def test_a_replay_refuses_weights_changed_since_sampling(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    completions, replay = policy.sample_kept(policy.encode(PROMPTS), GenerationConfig(max_new_tokens=3))
    assert replay is not None
    replay.logits()  # the weights it sampled with: fine
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight.add_(1e-3)  # what an optimiser step does
    with pytest.raises(RuntimeError, match="recorded with other weights"):
        replay.logits()


def test_the_plain_backend_keeps_no_sampling_pass(tiny_models):
    from grueflow.device import Execution
    from grueflow.models.backend import Backend

    model, tokenizer = load_pretrained(tiny_models["causal"], backend=Backend(Execution(torch.device("cpu"))))
    assert type(model.transformer.h[0].mlp.act).__name__ == "NewGELUActivation"  # no fast-path swaps either
    policy = Policy(model, tokenizer, max_prompt_length=24, backend=Backend(Execution(torch.device("cpu"))))
    completions, replay = policy.sample_kept(policy.encode(PROMPTS), GenerationConfig(max_new_tokens=3))
    assert replay is None and completions.shape == (3, 3)
