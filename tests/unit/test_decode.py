"""The lean GPT-2 prefill and decode step (issue 6): transformers' logits, step after step, on left-padded
grouped prompts, with and without a reserved cache and a LoRA adapter; every other model keeps transformers' own."""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from grueflow.models import load_pretrained
from grueflow.models.backend import prefix_forward as _prefix_forward, reserve_cache
from grueflow.models.decode import gpt2_prefill, gpt2_step, supports_lean_step
from grueflow.models.policy import Policy, Prompts

PROMPTS = ["a b c d e f", "x y", "the movie was"]


def transformers_steps(model, prompts: Prompts, tokens: torch.Tensor) -> torch.Tensor:
    """Logits (B, T, V) of ``model(...)`` fed ``tokens`` one at a time after the prompts: the reference."""
    lengths = prompts.attention_mask.sum(1, keepdim=True)
    _, cache = _prefix_forward(model, prompts, 1)
    attention, rows = prompts.attention_mask, []
    for t in range(tokens.shape[1]):
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        out = model(input_ids=tokens[:, t:t + 1], attention_mask=attention, position_ids=lengths + t, cache=cache,
                    use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[:, -1])
    return torch.stack(rows, 1)


def lean_steps(model, prompts: Prompts, tokens: torch.Tensor, group: int, reserve) -> torch.Tensor:
    """The same logits from :func:`gpt2_step`, the prompts encoded once per group of ``group`` rows."""
    _, cache = _prefix_forward(model, Prompts(prompts.input_ids, prompts.attention_mask), group)
    cache = reserve_cache(cache, reserve) if reserve is not None else cache
    step = gpt2_step(model, prompts.attention_mask, prompts.attention_mask.sum(1, keepdim=True))
    rows = []
    for t in range(tokens.shape[1]):
        logits, cache = step(tokens[:, t], cache, t)
        rows.append(logits)
    return torch.stack(rows, 1)


@pytest.mark.parametrize("reserve", [None, 3, 16])  # 3: the last steps outgrow the reserved room
def test_the_lean_step_gives_transformers_logits(tiny_models, reserve):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    assert type(model) is GPT2LMHeadModel and supports_lean_step(model)
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode([p for p in PROMPTS for _ in range(2)])
    assert (prompts.attention_mask == 0).any()  # left padding is exercised
    tokens = torch.randint(3, tokenizer.vocab_size, (6, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = transformers_steps(model, prompts, tokens)
        got = lean_steps(model, prompts, tokens, 2, reserve)
    assert got.shape == expected.shape == (6, 8, tokenizer.vocab_size)
    assert torch.allclose(got, expected, atol=1e-5)


def test_the_lean_prefill_gives_transformers_logits_and_cache(tiny_models):
    """At every real (unpadded) prompt position; a padding position's keys are never attended."""
    model, tokenizer = load_pretrained(tiny_models["causal"])
    prompts = Policy(model, tokenizer, max_prompt_length=24).encode(PROMPTS)
    assert (prompts.attention_mask == 0).any()
    with torch.no_grad():
        expected, expected_cache = _prefix_forward(model, prompts, 1, logits_to_keep=1)
        logits, cache = gpt2_prefill(model, prompts.input_ids, prompts.attention_mask)
    assert logits.shape == (3, tokenizer.vocab_size)
    assert torch.allclose(logits, expected.logits[:, -1], atol=1e-5)
    real = prompts.attention_mask.bool()[:, None, :, None]  # (B, 1, P, 1)
    for got, want in zip(cache.layers, expected_cache.layers):
        assert got.keys.shape == want.keys.shape
        for ours, theirs in ((got.keys, want.keys), (got.values, want.values)):
            assert torch.allclose(ours * real, theirs * real, atol=1e-5) and torch.isfinite(ours).all()


def test_the_lean_step_runs_lora_adapters_and_their_disabled_reference(tiny_models):
    from grueflow.config import LoraConfig
    from grueflow.models.lora import reference_view, with_lora
    from grueflow.params import parse

    base, tokenizer = load_pretrained(tiny_models["causal"])
    model = with_lora(copy.deepcopy(base), parse(LoraConfig, {"r": 4}, "lora"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # peft starts B at zero; a non-zero adapter must change the logits
    assert supports_lean_step(model)
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode(PROMPTS)
    tokens = torch.randint(3, tokenizer.vocab_size, (3, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        adapted = lean_steps(model, prompts, tokens, 1, 8)
        assert torch.allclose(adapted, transformers_steps(model, prompts, tokens), atol=1e-5)
        with reference_view(model) as reference:
            plain = lean_steps(reference, prompts, tokens, 1, 8)
        assert torch.allclose(plain, transformers_steps(base, prompts, tokens), atol=1e-5)
    assert not torch.allclose(adapted, plain, atol=1e-3)


def test_models_the_lean_step_does_not_cover_keep_transformers_step():
    torch.manual_seed(0)
    config = dict(vocab_size=50, n_layer=1, n_embd=16, n_head=2, n_positions=32)
    assert supports_lean_step(GPT2LMHeadModel(GPT2Config(**config)).eval())
    assert not supports_lean_step(GPT2LMHeadModel(GPT2Config(**config)).train())  # dropout 0.1 would apply
    assert supports_lean_step(GPT2LMHeadModel(GPT2Config(**config, resid_pdrop=0.0, embd_pdrop=0.0,
                                                         attn_pdrop=0.0)).train())
    assert not supports_lean_step(GPT2LMHeadModel(GPT2Config(**config, scale_attn_by_inverse_layer_idx=True)).eval())
    assert not supports_lean_step(GPT2LMHeadModel(GPT2Config(**config, reorder_and_upcast_attn=True)).eval())
    assert not supports_lean_step(LlamaForCausalLM(LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)).eval())
