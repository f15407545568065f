"""Causal and seq2seq policies: saved/loaded via from_pretrained; one forward pass scores what generate sampled."""

import pytest
import torch

from grueflow.config import GenerationConfig
from grueflow.hub import HubUnreachableError
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy, completion_mask, logprobs_from_logits

PROMPTS = ["i watched this movie with my sister last week .", "this film is about two brothers who starts a band ."]


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_forward_logprobs_equal_generation_logprobs(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    assert next(model.parameters()).dtype == torch.float32
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode(PROMPTS if kind == "causal" else ["generate a sentence with: dog kick ball", "cat"])
    torch.manual_seed(0)
    out = model.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask, do_sample=True,
                         top_k=0, max_new_tokens=6, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
    start = prompts.input_ids.shape[1] if kind == "causal" else 1
    completions = out.sequences[:, start:]
    mask = completion_mask(completions, tokenizer.eos_token_id)
    expected = torch.stack([torch.log_softmax(s, -1) for s in out.scores], 1)
    expected = torch.gather(expected, 2, completions.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        got = logprobs_from_logits(policy.score(prompts, completions).logits, completions)
    assert torch.allclose(got * mask, expected * mask, atol=1e-4)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_generate_pads_after_eos_and_decodes(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    torch.manual_seed(1)
    completions = policy.generate(policy.encode(PROMPTS), GenerationConfig(max_new_tokens=10))
    mask = completion_mask(completions, tokenizer.eos_token_id)
    assert completions.shape[0] == 2 and completions.shape[1] <= 10
    assert (completions[mask == 0] == tokenizer.pad_token_id).all()
    texts = policy.decode(completions)
    assert all(isinstance(t, str) and t == t.strip() for t in texts)


def test_supervised_loss_decreases_on_one_pair(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["seq2seq"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode(["generate a sentence with: dog kick ball"])
    targets = policy.encode_targets(["the dog kicks the ball ."], max_length=16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = policy.supervised_loss(prompts, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_a_long_target_keeps_its_start(tiny_models, kind):
    """Prompts of a causal policy are cut from the left (their end leads into the completion); a target continues
    the prompt, so it is cut from the right, for either kind."""
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    target = "the dog kicks the ball . the cat sees the dog . the bird eats the seed ."
    whole = tokenizer((" " if kind == "causal" else "") + target, add_special_tokens=False)["input_ids"]
    assert len(whole) > 8
    encoded = policy.encode_targets([target, "the dog ."], max_length=8)
    assert encoded.shape == (2, 8)
    assert encoded[0].tolist() == whole[:7] + [tokenizer.eos_token_id]
    assert policy.decode(encoded[:1])[0] == tokenizer.decode(whole[:7], skip_special_tokens=True).strip()


def test_hub_id_without_network_fails_with_a_clear_error():
    with pytest.raises(HubUnreachableError, match=r"cannot load 'gpt2'.*hub is unreachable.*name_or_path"):
        load_pretrained("gpt2")


class _Tokenizer:
    """What :class:`Policy` reads of a tokenizer when it is handed token ids."""

    pad_token_id = eos_token_id = 0
    pad_token = eos_token = "<pad>"


def _tied_llama() -> torch.nn.Module:  # one LM head maps the last hidden state to the logits (SmolLM2's shape)
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))


def _softcapped_gemma2() -> torch.nn.Module:  # tanh-capped logits after the head: the head alone is not the map
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return Gemma2ForCausalLM(Gemma2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                          final_logit_softcapping=0.5))


@pytest.mark.parametrize("build, one_head", [(_tied_llama, True), (_softcapped_gemma2, False)])
def test_scores_and_their_gradients_equal_one_plain_forward_pass(build, one_head):
    """The policy's pass (each group's prompt once, then the completion on its KV cache, the LM head once over
    every completion position where the head alone makes the logits) gives a plain full-sequence forward
    pass's logits and weight gradients."""
    from grueflow.models.policy import Prompts, output_head

    torch.manual_seed(0)
    model = build().eval()
    policy = Policy(model, _Tokenizer(), max_prompt_length=8)
    ids = torch.randint(1, 97, (2, 5)).repeat_interleave(2, 0)  # 2 groups of 2 identical prompts
    prompts, completions = Prompts(ids, torch.ones_like(ids)), torch.randint(1, 97, (4, 6))
    hidden = model(input_ids=ids, output_hidden_states=True)
    assert (output_head(model, hidden.hidden_states[-1], hidden.logits) is not None) == one_head
    weights = torch.randn(4, 6, 97)
    (policy.score(prompts, completions, group_size=2).logits * weights).sum().backward()
    got = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    full = model(input_ids=torch.cat([ids, completions[:, :-1]], 1)).logits[:, ids.shape[1] - 1:]
    (full * weights).sum().backward()
    with torch.no_grad():
        scores = policy.score(prompts, completions, group_size=2).logits
    assert torch.allclose(scores, full, atol=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(got[name], p.grad, atol=1e-4), name
