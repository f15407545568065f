"""A lean single-token decode step for GPT-2 (issue 6): what :func:`grueflow.models.policy.prefill`'s
step does for a ``GPT2LMHeadModel``, in about twenty tensor operations per block instead of a call
through transformers' model.

A decode step of ``model(input_ids=..., cache=...)`` runs some 120 tensor operations per GPT-2 block
(shape bookkeeping, the causal mask built again from the whole attention mask, output dataclasses)
around nine real ones. On CPU that overhead is a large part of a small model's step: at 64 rows this
step takes 2.8 ms where transformers' takes 3.9 for a 2 x 128 GPT-2, and about 27 ms against 30 at
6 x 512 (measured on this project's 2-core machine). It calls the model's own modules (so grueflow's
oneDNN layers, LoRA adapters and a fused activation apply as they are) and does the rest directly:

- token and position embeddings, at positions ``lengths + t`` (left-padded prompts);
- per block: ``ln_1``, ``c_attn``, the new key and value written into the (reserved) KV cache, one
  query against the cache (two batched products and a softmax, padding masked with an additive
  ``-inf`` bias made once per rollout), ``c_proj`` and the residual; ``ln_2``, the MLP and the residual;
- ``ln_f`` and the LM head.

It applies only where it computes what transformers computes: a ``GPT2LMHeadModel``, LoRA-wrapped or
not (peft's layers are called as modules, so a disabled adapter stays disabled), without cross
attention or per-layer or upcast attention scaling, whose dropout is off or has probability 0.
Anything else gets transformers' step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

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
    # (B, 1, 1, L): 0 where a position is attended, -inf at the prompt's padding; generated positions are 0
    bias = torch.zeros(batch, 1, 1, prompt, dtype=dtype, device=attention_mask.device)
    bias.masked_fill_(attention_mask[:, None, None] == 0, float("-inf"))
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
            scores = torch.matmul(query.view(batch, heads, 1, -1) * scaling, keys.transpose(-1, -2)) + step_bias
            mixed = torch.matmul(scores.softmax(dim=-1), values)  # (B, H, 1, D)
            hidden = hidden + attention.c_proj(mixed.view(batch, 1, width))
            mlp = block.mlp
            preact = mlp.c_fc(block.ln_2(hidden))
            if record is not None:
                record.block(index, inputs, query, hidden, preact)
            hidden = hidden + mlp.c_proj(mlp.act(preact))
        if record is not None:
            record.outputs.append(hidden)
        return model.lm_head(transformer.ln_f(hidden))[:, -1], cache

    return step


def lean_step(model: Any, attention_mask: torch.Tensor, lengths: torch.Tensor,
              record: Optional["Recorder"] = None) -> Optional[StepFn]:
    """:func:`gpt2_step` where :func:`supports_lean_step`, else None (the caller steps the model itself)."""
    return gpt2_step(model, attention_mask, lengths, record) if supports_lean_step(model) else None
