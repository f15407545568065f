"""The update's forward pass taken from generation (issue 6): a GPT-2's sampled rollout replayed for the
gradient without running the model over it again.

With one epoch and one minibatch (GRPO's and RLOO's usual single update), the policy that sampled the
rollout is the policy the update differentiates, with the same weights. Its decode steps already computed
every matrix product of the update's forward pass: ``_Recorder`` keeps, per block and generated token, the
four activations the backward pass needs (the block's input, the query, the residual after attention and the
MLP's pre-activation), and the KV cache keeps the keys and values. :meth:`Replay.logits` returns the rollout's
logits as a tensor whose backward computes the weights' gradients from them, one block at a time over all
tokens at once (so each weight gradient is one large product, as in an ordinary backward pass).

Only the cheap parts are computed again inside the backward: layer norms, the activation function and
the attention scores (autograd differentiates them locally). Each group's prompt is run once more with
gradients (it is a tenth of the tokens), and the gradients of its keys, values and first logits flow through it.
The update then costs a backward pass instead of a forward and a backward pass: about a third less.

The gradients are those of :meth:`grueflow.models.policy.Policy.score`'s forward pass, to float rounding. A
completion position after its row's EOS differs (the decode step attended the padding fed after EOS,
``score`` masks it out), but such positions are masked out of every loss, so their logits carry no gradient.
It applies to a plain ``GPT2LMHeadModel`` where :func:`~grueflow.models.decode.supports_lean_step` (no LoRA
wrapper: its adapters' gradients are not computed here), with no logits processor (NLPO's masks).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from grueflow.models.decode import supports_lean_step
from grueflow.models.kernels import available, onednn_linear


def supports_replay(model: Any) -> bool:
    """Whether :class:`Replay` can differentiate ``model``'s sampled rollouts."""
    from transformers import GPT2LMHeadModel

    return type(model) is GPT2LMHeadModel and supports_lean_step(model)


class Recorder:
    """What a GPT-2's decode steps computed, per block: lists of (B, 1, C) or (B, 1, 4C) tensors, one per step."""

    def __init__(self, layers: int) -> None:
        self.inputs: list[list[torch.Tensor]] = [[] for _ in range(layers)]  # each block's input
        self.queries: list[list[torch.Tensor]] = [[] for _ in range(layers)]
        self.middles: list[list[torch.Tensor]] = [[] for _ in range(layers)]  # the residual after attention
        self.preacts: list[list[torch.Tensor]] = [[] for _ in range(layers)]  # the MLP before its activation
        self.outputs: list[torch.Tensor] = []  # the last block's output (before ln_f)
        self.logits: list[torch.Tensor] = []  # (B, V) raw next-token logits, the prefill's first

    def block(self, index: int, inputs: torch.Tensor, query: torch.Tensor, middle: torch.Tensor,
              preact: torch.Tensor) -> None:
        self.inputs[index].append(inputs)
        self.queries[index].append(query)
        self.middles[index].append(middle)
        self.preacts[index].append(preact)


class Replay:
    """A sampled rollout of a GPT-2, ready to be differentiated without another forward pass.

    ``prompts``: the left-padded prompts (B, P) in groups of ``group_size`` identical rows; ``tokens``: the fed
    completion tokens (B, T) (all but the last sampled one); ``cache``: the KV cache after generation.
    """

    def __init__(self, model: Any, prompts: Any, group_size: int, tokens: torch.Tensor, cache: Any,
                 recorder: Recorder) -> None:
        cat = lambda parts: torch.cat(parts, dim=1)  # noqa: E731  (B, 1, X) per step -> (B, T, X)
        steps = tokens.shape[1]
        self.model, self.prompts, self.group_size, self.tokens = model, prompts, group_size, tokens
        self.logits_value = torch.stack(recorder.logits, dim=1)  # (B, T + 1, V)
        self.inputs = [cat(x) for x in recorder.inputs] if steps else []
        self.queries = [cat(x) for x in recorder.queries] if steps else []
        self.middles = [cat(x) for x in recorder.middles] if steps else []
        self.preacts = [cat(x) for x in recorder.preacts] if steps else []
        self.output = cat(recorder.outputs) if steps else None
        width = prompts.input_ids.shape[1] + steps  # keys: the prompt's, then one per fed token
        self.keys = [layer.keys[:, :, :width] for layer in cache.layers]  # (B, H, P + T, D)
        self.values = [layer.values[:, :, :width] for layer in cache.layers]
        self.params = [p for p in model.parameters() if p.requires_grad]

    def logits(self) -> torch.Tensor:
        """The rollout's raw next-token logits (B, T + 1, V), differentiable with respect to the model's weights."""
        return _Replayed.apply(self, self.logits_value, *self.params)


class _Replayed(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, replay: Replay, logits: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.replay = replay
        return logits.view_as(logits)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        replay = ctx.replay
        grads = _Grads()
        with torch.enable_grad():
            key_grads, value_grads = _completion_backward(replay, grad[:, 1:], grads)
            _prompt_backward(replay, grad[:, 0], key_grads, value_grads, grads)
        return (None, None, *[grads.get(p) for p in replay.params])


class _Grads:
    """Gradients summed per parameter."""

    def __init__(self) -> None:
        self.held: dict[int, torch.Tensor] = {}

    def add(self, param: torch.Tensor, grad: Optional[torch.Tensor]) -> None:
        if grad is None or not param.requires_grad:
            return
        key = id(param)
        self.held[key] = grad if key not in self.held else self.held[key] + grad

    def get(self, param: torch.Tensor) -> Optional[torch.Tensor]:
        return self.held.get(id(param))


def _input_grad(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The input's gradient of a Conv1D ``x @ weight`` (weight (in, out)) given the output's.  (M, out) -> (M, in)"""
    return onednn_linear(grad, weight, None) if available() else grad @ weight.t()


def _linear_backward(layer: Any, inputs: torch.Tensor, grad: torch.Tensor, grads: _Grads) -> torch.Tensor:
    """A GPT-2 ``Conv1D``'s weight and bias gradients (into ``grads``) and its input's.  (M, in), (M, out)"""
    grads.add(layer.weight, inputs.t() @ grad)
    grads.add(layer.bias, grad.sum(0))
    return _input_grad(grad, layer.weight)


class _Local:
    """``fn(*inputs)`` under autograd, for a cheap part (a layer norm, the activation, attention): its output
    (detached, the next product's input) now, the inputs' gradients later; the parameters' go into ``grads``."""

    def __init__(self, fn: Any, inputs: list[torch.Tensor], params: list[torch.Tensor]) -> None:
        self.leaves = [x.detach().requires_grad_() for x in inputs]
        self.params = [p for p in params if p.requires_grad]
        self.result = fn(*self.leaves)
        self.output = self.result.detach()

    def backward(self, grad: torch.Tensor, grads: _Grads) -> list[torch.Tensor]:
        found = torch.autograd.grad(self.result, self.leaves + self.params, grad.view_as(self.result))
        for param, g in zip(self.params, found[len(self.leaves):]):
            grads.add(param, g)
        return list(found[:len(self.leaves)])


def _attention_bias(replay: Replay, steps: int) -> torch.Tensor:
    """(B, 1, T, P + T): -inf at the prompt's padding and at later completion positions, else 0."""
    mask = replay.prompts.attention_mask
    batch, prompt = mask.shape
    dtype = replay.logits_value.dtype
    padding = torch.zeros(batch, 1, 1, prompt, dtype=dtype).masked_fill_(mask[:, None, None] == 0, float("-inf"))
    causal = torch.full((steps, steps), float("-inf"), dtype=dtype).triu_(1)
    return torch.cat([padding.expand(batch, 1, steps, prompt), causal.expand(batch, 1, steps, steps)], dim=-1)


def _completion_backward(replay: Replay, grad: torch.Tensor, grads: _Grads
                         ) -> tuple[list[Optional[torch.Tensor]], list[Optional[torch.Tensor]]]:
    """Gradients from the fed completion tokens' logits (B, T, V) through every block, into ``grads``;
    returns each block's key and value gradients (B, H, P + T, D) (None without fed tokens)."""
    model = replay.model
    transformer, cfg = model.transformer, model.config
    layers = len(transformer.h)
    batch, steps = replay.tokens.shape
    if steps == 0:
        return [None] * layers, [None] * layers
    heads, width = cfg.n_head, cfg.n_embd
    scaling = (width // heads) ** -0.5 if cfg.scale_attn_weights else 1.0
    rows = batch * steps
    flat = lambda x: x.reshape(rows, x.shape[-1])  # noqa: E731
    prompt = replay.prompts.input_ids.shape[1]
    bias = _attention_bias(replay, steps)
    # the LM head over ln_f
    top = _Local(transformer.ln_f, [replay.output], [transformer.ln_f.weight, transformer.ln_f.bias])
    grad = flat(grad)  # (M, V)
    grads.add(model.lm_head.weight, grad.t() @ flat(top.output))
    (hidden,) = top.backward(grad @ model.lm_head.weight, grads)  # (B, T, C)
    key_grads: list[Optional[torch.Tensor]] = [None] * layers
    value_grads: list[Optional[torch.Tensor]] = [None] * layers
    for i in reversed(range(layers)):
        block, attention, mlp = transformer.h[i], transformer.h[i].attn, transformer.h[i].mlp
        # MLP: out = middle + c_proj(act(preact)), preact = c_fc(ln_2(middle))
        act = _Local(mlp.act, [replay.preacts[i]], [])
        up = _linear_backward(mlp.c_proj, flat(act.output), flat(hidden), grads)
        (up,) = act.backward(up, grads)
        norm = _Local(block.ln_2, [replay.middles[i]], [block.ln_2.weight, block.ln_2.bias])
        normed = _linear_backward(mlp.c_fc, flat(norm.output), flat(up), grads)
        (from_mlp,) = norm.backward(normed, grads)
        middle_grad = hidden + from_mlp

        # attention: middle = inputs + c_proj(attend(query, keys, values)), (query, key, value) = c_attn(ln_1(inputs))
        def attend(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            q = query.view(batch, steps, heads, -1).transpose(1, 2)  # (B, H, T, D)
            scores = torch.matmul(q * scaling, keys.transpose(-1, -2)) + bias
            return torch.matmul(scores.softmax(dim=-1), values).transpose(1, 2).reshape(batch, steps, width)

        mixing = _Local(attend, [replay.queries[i], replay.keys[i], replay.values[i]], [])
        mixed_grad = _linear_backward(attention.c_proj, flat(mixing.output), flat(middle_grad), grads)
        query_grad, key_grads[i], value_grads[i] = mixing.backward(mixed_grad, grads)
        own = lambda g: g[:, :, prompt:].transpose(1, 2).reshape(rows, width)  # noqa: E731  the fed tokens' (M, C)
        qkv_grad = torch.cat([flat(query_grad), own(key_grads[i]), own(value_grads[i])], dim=1)  # (M, 3C)
        norm = _Local(block.ln_1, [replay.inputs[i]], [block.ln_1.weight, block.ln_1.bias])
        normed = _linear_backward(attention.c_attn, flat(norm.output), qkv_grad, grads)
        (from_attention,) = norm.backward(normed, grads)
        hidden = middle_grad + from_attention
    # embeddings: inputs = wte(token) + wpe(position)
    positions = (replay.prompts.attention_mask.sum(1, keepdim=True) + torch.arange(steps)).reshape(-1)
    embedded = flat(hidden)
    for table, index in ((transformer.wte.weight, replay.tokens.reshape(-1)), (transformer.wpe.weight, positions)):
        if table.requires_grad:
            grads.add(table, torch.zeros_like(table).index_add_(0, index, embedded))
    return key_grads, value_grads


def _prompt_backward(replay: Replay, first_grad: torch.Tensor, key_grads: list[Optional[torch.Tensor]],
                     value_grads: list[Optional[torch.Tensor]], grads: _Grads) -> None:
    """Gradients through each group's prompt (run once more, with gradients): from the first logits (B, V)
    and from the prompt positions' keys and values, into ``grads``."""
    from grueflow.models.policy import _prefix_forward

    out, cache = _prefix_forward(replay.model, replay.prompts, replay.group_size, logits_to_keep=1)
    prompt = replay.prompts.input_ids.shape[1]
    outputs = [out.logits[:, -1].repeat_interleave(replay.group_size, 0)]
    grad_outputs = [first_grad]
    for layer, key_grad, value_grad in zip(cache.layers, key_grads, value_grads):
        if key_grad is not None:
            outputs += [layer.keys, layer.values]
            grad_outputs += [key_grad[:, :, :prompt], value_grad[:, :, :prompt]]
    found = torch.autograd.grad(outputs, replay.params, grad_outputs, allow_unused=True)
    for param, grad in zip(replay.params, found):
        grads.add(param, grad)
