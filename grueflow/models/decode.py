"""A lean GPT-2 prefill and single-token decode step, the CPU backend's (:class:`grueflow.models.backend.CpuKernels`):
what :meth:`grueflow.models.backend.Backend.start` computes for a ``GPT2LMHeadModel``, in about twenty tensor
operations per block instead of a call through transformers' model, and (with a
:class:`grueflow.models.replay.Recorder`) keeping the activations that the update's backward pass needs.

A decode step of ``model(input_ids=..., cache=...)`` runs some 120 tensor operations per GPT-2 block
(shape bookkeeping, the causal mask built again from the whole attention mask, output dataclasses)
around nine real ones; on a CPU that overhead is a large part of a small model's step (``bench/RESULTS.md``).
This step calls the model's own modules (so oneDNN layers, LoRA adapters and a fused activation apply as
they are) and does the rest directly:

- token and position embeddings, at positions ``lengths + t`` (left-padded prompts);
- per block: ``ln_1``, ``c_attn``, the new key and value written into the (reserved) KV cache, one
  query against the cache (:func:`grueflow.models.kernels.decode_attention` on a reserved float32 CPU
  cache, else two batched products and a softmax; padding masked with an additive ``-inf`` bias made
  once per rollout), ``c_proj`` and the residual; ``ln_2``, the MLP and the residual;
- ``ln_f`` and the LM head.

The prefill does the same over each group's whole prompt, with a causal and padding bias.

It applies only where it computes what transformers computes: a ``GPT2LMHeadModel``, LoRA-wrapped or
not (peft's layers are called as modules, so a disabled adapter stays disabled), without cross
attention or per-layer or upcast attention scaling, whose dropout is off or has probability 0.
Anything else gets transformers' forward pass and step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import torch
from transformers import DynamicCache

from grueflow.models.kernels import decode_attention

if TYPE_CHECKING:
    from grueflow.models.replay import Recorder

StepFn = Callable[[torch.Tensor, Any, int], tuple[torch.Tensor, Any]]


def _unwrapped(model: Any) -> Any:
    """The transformers model inside a peft wrapper, else ``model``."""
    from grueflow.models.lora import is_lora

    return model.get_base_model() if is_lora(model) else model


def supports_lean_step(model: Any) -> bool:
    """Whether :func:`gpt2_step` computes exactly what ``model``'s own decode step does."""
    from transformers import GPT2LMHeadModel

    model = _unwrapped(model)
    if type(model) is not GPT2LMHeadModel:
        return False
    cfg = model.config
    dropout = model.training and max(cfg.attn_pdrop, cfg.resid_pdrop, cfg.embd_pdrop) > 0
    return not (dropout or cfg.add_cross_attention or cfg.scale_attn_by_inverse_layer_idx
                or cfg.reorder_and_upcast_attn)


def gpt2_step(model: Any, attention_mask: torch.Tensor, lengths: torch.Tensor,
              record: Optional["Recorder"] = None) -> StepFn:
    """``step(token, cache, t)`` -> (next-token logits (B, V), cache) for a GPT-2 whose cache holds the
    prompts (B, P) of ``attention_mask``; ``lengths`` (B, 1) their unpadded lengths, ``t`` counting from 0.
    ``record`` keeps each block's activations for :class:`grueflow.models.replay.Replay`.

    Exactly (to float rounding) the logits of ``model(input_ids=token[:, None], attention_mask=<the prompt's
    mask, then ones>, position_ids=lengths + t, cache=cache)``; the cache is updated in place.
    """
    model = _unwrapped(model)
    transformer, cfg = model.transformer, model.config
    batch, prompt = attention_mask.shape
    heads, width = cfg.n_head, cfg.n_embd
    scaling = (width // heads) ** -0.5 if cfg.scale_attn_weights else 1.0
    dtype = transformer.wte.weight.dtype
    bias = padding_bias(attention_mask, dtype)  # generated positions, appended below, are 0
    positions = lengths.view(batch)

    def step(token: torch.Tensor, cache: Any, t: int) -> tuple[torch.Tensor, Any]:
        nonlocal bias
        seen = prompt + t + 1  # keys in the cache once this step's is written
        if bias.shape[-1] < seen:
            bias = torch.cat([bias, bias.new_zeros(batch, 1, 1, max(seen, 2 * bias.shape[-1]) - bias.shape[-1])], -1)
        step_bias = bias[..., :seen]
        hidden = (transformer.wte(token) + transformer.wpe(positions + t))[:, None]  # (B, 1, C)
        for index, (block, layer) in enumerate(zip(transformer.h, cache.layers)):
            attention, inputs = block.attn, hidden
            query, key, value = attention.c_attn(block.ln_1(hidden)).split(width, dim=2)
            keys, values = layer.update(key.view(batch, 1, heads, -1).transpose(1, 2),
                                        value.view(batch, 1, heads, -1).transpose(1, 2))  # (B, H, L, D)
            if _in_store(layer, keys):
                mixed = decode_attention(query.view(batch, heads, -1), layer.key_store, layer.value_store, seen,
                                         step_bias.view(batch, seen), scaling)
            else:
                scores = torch.matmul(query.view(batch, heads, 1, -1) * scaling, keys.transpose(-1, -2)) + step_bias
                mixed = torch.matmul(scores.softmax(dim=-1), values)  # (B, H, 1, D)
            hidden = hidden + attention.c_proj(mixed.view(batch, 1, width))
            mlp = block.mlp
            preact = mlp.c_fc(block.ln_2(hidden))
            activated = mlp.act(preact)
            if record is not None:
                record.step(t, index, inputs, query, hidden, preact, activated)
            hidden = hidden + mlp.c_proj(activated)
        if record is not None:
            record.step_output(t, hidden)
        return model.lm_head(transformer.ln_f(hidden))[:, -1], cache

    return step


def _in_store(layer: Any, keys: torch.Tensor) -> bool:
    """Whether ``keys`` are the filled part of ``layer``'s reserved float32 CPU store
    (:class:`grueflow.models.policy.ReservedLayer`), which :func:`decode_attention` reads, without gradients."""
    store = getattr(layer, "key_store", None)
    return (store is not None and keys.data_ptr() == store.data_ptr() and store.dtype == torch.float32
            and store.device.type == "cpu" and not torch.is_grad_enabled())


def padding_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, 1, P) additive attention bias over left-padded prompts' keys: 0 where attended, -inf at padding."""
    bias = torch.zeros(attention_mask.shape[0], 1, 1, attention_mask.shape[1], dtype=dtype,
                       device=attention_mask.device)
    return bias.masked_fill_(attention_mask[:, None, None] == 0, float("-inf"))


def prompt_bias(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(R, 1, P, P) additive attention bias over left-padded prompts (R, P): 0 where query ``i`` sees key
    ``j`` (``j <= i`` and ``j`` not padding), -inf elsewhere. A padding query sees itself only, so it stays
    finite; no real query sees it, so its value never matters."""
    prompt = attention_mask.shape[1]
    keep = torch.ones(prompt, prompt, dtype=torch.bool, device=attention_mask.device).tril()
    keep = (keep & attention_mask[:, None, None, :].bool()) | torch.eye(prompt, dtype=torch.bool,
                                                                      device=attention_mask.device)
    return torch.zeros(keep.shape, dtype=dtype, device=attention_mask.device).masked_fill_(~keep, float("-inf"))


def gpt2_prefill(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 record: Optional["Recorder"] = None) -> tuple[torch.Tensor, DynamicCache]:
    """A GPT-2 over left-padded prompts (R, P), as :func:`gpt2_step` steps it: the next-token logits at the
    last position (R, V) and the KV cache. Exactly (to float rounding) what ``model(input_ids, attention_mask,
    position_ids=<counted over the mask>, use_cache=True)`` gives at the prompts' real positions. ``record``
    keeps each block's activations for :class:`grueflow.models.replay.Replay`."""
    model = _unwrapped(model)
    transformer, cfg = model.transformer, model.config
    rows, prompt = input_ids.shape
    heads, width = cfg.n_head, cfg.n_embd
    scaling = (width // heads) ** -0.5 if cfg.scale_attn_weights else 1.0
    bias = prompt_bias(attention_mask, transformer.wte.weight.dtype)
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    hidden = transformer.wte(input_ids) + transformer.wpe(positions)  # (R, P, C)
    split = lambda x: x.view(rows, prompt, heads, -1).transpose(1, 2)  # noqa: E731  (R, P, C) -> (R, H, P, D)
    cache = DynamicCache()
    for index, block in enumerate(transformer.h):
        attention, inputs = block.attn, hidden
        query, key, value = attention.c_attn(block.ln_1(hidden)).split(width, dim=2)
        keys, values = split(key), split(value)
        cache.update(keys, values, index)
        scores = torch.matmul(split(query) * scaling, keys.transpose(-1, -2)) + bias
        mixed = torch.matmul(scores.softmax(dim=-1), values).transpose(1, 2).reshape(rows, prompt, width)
        hidden = hidden + attention.c_proj(mixed)
        mlp = block.mlp
        preact = mlp.c_fc(block.ln_2(hidden))
        activated = mlp.act(preact)
        if record is not None:
            record.prompt(index, inputs, query, hidden, preact, activated)
        hidden = hidden + mlp.c_proj(activated)
    last = hidden[:, -1]  # (R, C): left padding puts every prompt's last token here
    if record is not None:
        record.prompt_output(last)
    return model.lm_head(transformer.ln_f(last)), cache
