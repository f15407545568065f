"""The CPU kernels every loaded model gets (issue 6): the same numbers as transformers' own layers, to
float rounding, through forward, backward, second derivatives, optimiser steps, copies and decoding."""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from grueflow.models.kernels import (ATTENTION, MIN_FEATURES, available, cpu_kernels, decode_attention,
                                     lean_decode_attention, onednn_linears)

pytestmark = pytest.mark.skipif(not available(), reason="this PyTorch build has no oneDNN linear op")


def gpt2() -> torch.nn.Module:  # Conv1D layers, stored (in, out)
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=97, n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()


def llama() -> torch.nn.Module:  # nn.Linear layers without bias, grouped-query attention
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
                            ).eval()


def pair(build) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(transformers' model, the same weights with grueflow's kernels on every layer, however small)."""
    plain = build()
    return plain, lean_decode_attention(onednn_linears(copy.deepcopy(plain), min_features=1))


def test_small_layers_keep_their_own_forward():
    """Layers under MIN_FEATURES inputs or outputs stay on MKL (oneDNN's set-up would cost more)."""
    model = cpu_kernels(gpt2())  # 32 wide
    assert not any("forward" in vars(m) for m in model.modules())
    assert model.config._attn_implementation == ATTENTION
    big = cpu_kernels(GPT2LMHeadModel(GPT2Config(vocab_size=300, n_layer=1, n_embd=MIN_FEATURES, n_head=2)))
    assert "forward" in vars(big.transformer.h[0].mlp.c_fc) and "forward" in vars(big.lm_head)


def loss_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits
    return torch.log_softmax(logits, -1).gather(2, ids[..., None]).mean()


@pytest.mark.parametrize("build", [gpt2, llama])
def test_forward_and_gradients_equal_transformers_layers(build):
    plain, fast = pair(build)
    assert all("forward" in vars(m) for m in fast.modules() if isinstance(m, torch.nn.Linear))
    ids = torch.randint(0, 97, (3, 11))
    with torch.no_grad():
        torch.testing.assert_close(fast(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
    loss_of(plain, ids).backward()
    loss_of(fast, ids).backward()
    for (name, p), q in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("build", [gpt2, llama])
def test_second_derivatives_equal_transformers_layers(build):
    """TRPO's Fisher-vector products differentiate a gradient: the backward must itself be differentiable."""
    plain, fast = pair(build)
    for model in (plain, fast):  # PyTorch's CPU flash attention has no second derivative; eager attention does
        model.set_attn_implementation("eager")
    ids = torch.randint(0, 97, (2, 7))
    products = []
    for model in (plain, fast):
        params = [p for p in model.parameters()]
        grads = torch.autograd.grad(loss_of(model, ids), params, create_graph=True)
        torch.manual_seed(1)
        vector = [torch.randn_like(p) for p in params]
        dot = sum((g * v).sum() for g, v in zip(grads, vector))
        products.append(torch.autograd.grad(dot, params))
    for got, expected in zip(products[1], products[0]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_an_optimiser_step_is_seen_by_the_next_forward():
    """The reordered weights are cached per weight version: an in-place update must not serve stale ones."""
    plain, fast = pair(gpt2)
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        fast(input_ids=ids)  # caches the reordered weights
    for model in (plain, fast):
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
        loss_of(model, ids).backward()
        optimiser.step()
    with torch.no_grad():
        torch.testing.assert_close(fast(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=1e-4, atol=1e-4)
        state = gpt2().state_dict()
        fast.load_state_dict(state)
        plain.load_state_dict(state)
        torch.testing.assert_close(fast(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_a_deep_copy_computes_with_its_own_weights():
    """NLPO's mask model and a separate critic are deep copies: their layers must use the copy's weights."""
    _, fast = pair(gpt2)
    twin = copy.deepcopy(fast)
    layer = twin.transformer.h[0].attn.c_attn
    assert layer.forward.__self__ is layer
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        before = fast(input_ids=ids).logits
        for p in twin.parameters():
            p.mul_(0.5)
        torch.testing.assert_close(fast(input_ids=ids).logits, before)
        assert not torch.allclose(twin(input_ids=ids).logits, before)


def test_a_model_off_float32_runs_its_own_layers():
    plain, fast = pair(gpt2)
    ids = torch.randint(0, 97, (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(fast.double()(input_ids=ids).logits, plain.double()(input_ids=ids).logits)


@pytest.mark.parametrize("build", [gpt2, llama])
def test_decode_steps_with_left_padding_equal_sdpa(build):
    """Token-by-token decoding with the KV cache, left-padded rows included, gives SDPA's logits."""
    plain, fast = build(), lean_decode_attention(build())
    assert fast.config._attn_implementation == ATTENTION and plain.config._attn_implementation == "sdpa"
    ids = torch.randint(3, 97, (4, 6))
    attention = torch.ones_like(ids)
    attention[:2, :3] = 0
    with torch.no_grad():
        for model in (plain, fast):
            model.steps = []
            out = model(input_ids=ids, attention_mask=attention, use_cache=True)
            cache, mask, token = out.past_key_values, attention, out.logits[:, -1].argmax(-1)
            for _ in range(5):
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
                out = model(input_ids=token[:, None], attention_mask=mask, cache=cache, use_cache=True)
                model.steps.append(out.logits[:, -1])
                cache, token = out.past_key_values, out.logits[:, -1].argmax(-1)
    for got, expected in zip(fast.steps, plain.steps):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_decode_attention_equals_softmax_of_two_products_over_the_filled_cache():
    """One query per row and head against a reserved store filled to 9 of 12 positions, two rows' first
    keys masked as left padding."""
    torch.manual_seed(0)
    query, store_k, store_v = torch.randn(3, 4, 16), torch.randn(3, 4, 12, 16), torch.randn(3, 4, 12, 16)
    store_k[:, :, 9:], store_v[:, :, 9:] = float("nan"), float("nan")  # past the filled part: never read
    bias = torch.zeros(3, 9)
    bias[0, :2], bias[2, :1] = float("-inf"), float("-inf")
    scores = (query[:, :, None] * 0.25) @ store_k[:, :, :9].transpose(-1, -2) + bias[:, None, None]
    expected = (scores.softmax(dim=-1) @ store_v[:, :, :9])[:, :, 0]
    got = decode_attention(query, store_k, store_v, 9, bias, 0.25)
    assert torch.allclose(got, expected, atol=1e-6)


def test_numba_kernels_leave_pytorchs_thread_count_as_it_was():
    """numba's OpenMP layer shares PyTorch's runtime; its first launch would set PyTorch's thread count too."""
    from grueflow.models.nucleus import top_p_keep

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        decode_attention(torch.randn(2, 2, 4), torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4), 3, torch.zeros(2, 3), 0.5)
        top_p_keep(torch.randn(2, 10), 0.5)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_the_trainers_fused_adamw_step_reaches_the_onednn_forward():
    """PyTorch's fused AdamW writes weights without bumping their version counters; the trainer's AdamW bumps
    them, so the reordered oneDNN weights follow every step (a stale copy would keep the initial policy)."""
    from grueflow.rl.trainer import AdamW

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=300, n_layer=1, n_embd=MIN_FEATURES, n_head=2)
    model, plain = cpu_kernels(GPT2LMHeadModel(config).eval()), GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 300, (2, 8))
    optimizer = AdamW(model.parameters(), lr=1e-2, fused=True)
    for _ in range(2):
        model(ids).logits.sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        plain.load_state_dict(model.state_dict())
        assert torch.allclose(model(ids).logits, plain(ids).logits, atol=1e-4)
