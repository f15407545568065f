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

from grueflow.models.decode import prompt_bias, supports_lean_step
from grueflow.models.kernels import available, onednn_linear


def supports_replay(model: Any) -> bool:
    """Whether :class:`Replay` can differentiate ``model``'s sampled rollouts."""
    from transformers import GPT2LMHeadModel

    return type(model) is GPT2LMHeadModel and supports_lean_step(model)


class Recorder:
    """What a GPT-2's prefill and decode steps computed, per block, as rows: first each group's prompt
    positions ((g, p) order, ``prompt_rows`` of them), then the fed tokens step by step ((t, b) order, ``batch``
    rows per step). Row buffers are made once, so a step costs one copy of what it computed."""

    def __init__(self, model: Any, prompt_rows: int, groups: int, batch: int, max_steps: int) -> None:
        blocks = model.transformer.h
        width, inner = model.config.n_embd, blocks[0].mlp.c_fc.weight.shape[1]
        rows, dtype = prompt_rows + batch * max_steps, model.transformer.wte.weight.dtype
        self.prompt_rows, self.groups, self.batch = prompt_rows, groups, batch
        make = lambda n: [torch.empty(rows, n, dtype=dtype) for _ in blocks]  # noqa: E731
        self.inputs, self.queries, self.middles = make(width), make(width), make(width)  # block input, query,
        self.preacts, self.activated = make(inner), make(inner)  # residual after attention; MLP before/after act
        self.outputs = torch.empty(groups + batch * max_steps, width, dtype=dtype)  # last block's, before ln_f
        self.logits: list[torch.Tensor] = []  # (B, V) raw next-token logits, the prefill's first

    def _write(self, index: int, start: int, tensors: tuple[torch.Tensor, ...]) -> None:
        for buffers, x in zip((self.inputs, self.queries, self.middles, self.preacts, self.activated), tensors):
            rows = x.reshape(-1, x.shape[-1])
            buffers[index][start:start + rows.shape[0]] = rows

    def prompt(self, index: int, *tensors: torch.Tensor) -> None:
        """Block ``index``'s input, query, middle, preact and activated over the prompts (G, P, X)."""
        self._write(index, 0, tensors)

    def prompt_output(self, last: torch.Tensor) -> None:
        self.outputs[:self.groups] = last

    def step(self, t: int, index: int, *tensors: torch.Tensor) -> None:
        """The same for decode step ``t``'s fed tokens (B, 1, X)."""
        self._write(index, self.prompt_rows + t * self.batch, tensors)

    def step_output(self, t: int, hidden: torch.Tensor) -> None:
        start = self.groups + t * self.batch
        self.outputs[start:start + self.batch] = hidden[:, -1]


class Replay:
    """A sampled rollout of a GPT-2, ready to be differentiated without another forward pass.

    ``prompts``: the left-padded prompts (B, P) in groups of ``group_size`` identical rows; ``tokens``: the fed
    completion tokens (B, T) (all but the last sampled one); ``cache``: the KV cache after generation.
    """

    def __init__(self, model: Any, prompts: Any, group_size: int, tokens: torch.Tensor, cache: Any,
                 recorder: Recorder) -> None:
        self.model, self.prompts, self.group_size, self.tokens = model, prompts, group_size, tokens
        self.recorder = recorder
        self.logits_value = torch.stack(recorder.logits, dim=1)  # (B, T + 1, V)
        width = prompts.input_ids.shape[1] + tokens.shape[1]  # keys: the prompt's, then one per fed token
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
        grads = _Grads()
        with torch.enable_grad():
            _backward(ctx.replay, grad, grads)
        return (None, None, *[grads.get(p) for p in ctx.replay.params])


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


def _activation_backward(act: Any, preact: torch.Tensor, grad: torch.Tensor, grads: _Grads) -> torch.Tensor:
    """The gradient before the MLP's activation (B, T, 4C) from the one after it (M, 4C): PyTorch's tanh-GELU
    kernel for GPT-2's (as :func:`grueflow.models.fused_activations` sets it), autograd for any other."""
    from transformers.activations import GELUTanh

    if type(act) is GELUTanh:
        return torch.ops.aten.gelu_backward(grad.view_as(preact), preact, approximate="tanh")
    return _Local(act, [preact], []).backward(grad, grads)[0]


def _completion_bias(prompt_mask: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, P + T) for the fed tokens: -inf at the prompt's padding and at later tokens, else 0."""
    batch, prompt = prompt_mask.shape
    padding = torch.zeros(batch, 1, 1, prompt, dtype=dtype).masked_fill_(prompt_mask[:, None, None] == 0, float("-inf"))
    causal = torch.full((steps, steps), float("-inf"), dtype=dtype).triu_(1)
    return torch.cat([padding.expand(batch, 1, steps, prompt), causal.expand(batch, 1, steps, steps)], dim=-1)


def _backward(replay: Replay, grad: torch.Tensor, grads: _Grads) -> None:
    """The weights' gradients (into ``grads``) from the rollout logits' (B, T + 1, V): the first logits come
    from each group's prompt, the others from the fed tokens; every row of the recorder at once."""
    model, rec, group = replay.model, replay.recorder, replay.group_size
    transformer, cfg = model.transformer, model.config
    heads, width = cfg.n_head, cfg.n_embd
    scaling = (width // heads) ** -0.5 if cfg.scale_attn_weights else 1.0
    (batch, steps), (groups, prompt) = replay.tokens.shape, (rec.groups, replay.prompts.input_ids.shape[1])
    prompt_rows, rows = rec.prompt_rows, rec.prompt_rows + batch * steps
    prompt_mask = replay.prompts.attention_mask
    dtype = grad.dtype
    prompt_bias_ = prompt_bias(prompt_mask[::group], dtype)  # (G, 1, P, P)
    completion_bias = _completion_bias(prompt_mask, steps, dtype)  # (B, 1, T, P + T)
    # the LM head over ln_f, at each prompt's last position and at every fed token
    vocab = grad.shape[-1]
    logits_grad = torch.cat([grad[:, 0].reshape(groups, group, vocab).sum(1),
                             grad[:, 1:].transpose(0, 1).reshape(steps * batch, vocab)])  # (G + T B, V)
    top = _Local(transformer.ln_f, [rec.outputs[:groups + steps * batch]],
                 [transformer.ln_f.weight, transformer.ln_f.bias])
    grads.add(model.lm_head.weight, logits_grad.t() @ top.output)
    (top_grad,) = top.backward(logits_grad @ model.lm_head.weight, grads)
    hidden = torch.zeros(rows, width, dtype=dtype)  # the gradient of each row's block output
    hidden[:prompt_rows].view(groups, prompt, width)[:, -1] = top_grad[:groups]
    hidden[prompt_rows:] = top_grad[groups:]

    def attend(prompt_queries: torch.Tensor, queries: torch.Tensor, prompt_keys: torch.Tensor,
               prompt_values: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Attention outputs as rows (the prompts', then the fed tokens'); queries as rows, keys and values
        (G or B, H, P or T, D)."""
        q = prompt_queries.view(groups, prompt, heads, width // heads).transpose(1, 2)  # (G, H, P, D)
        scores = torch.matmul(q * scaling, prompt_keys.transpose(-1, -2)) + prompt_bias_
        mixed_prompt = torch.matmul(scores.softmax(dim=-1), prompt_values).transpose(1, 2).reshape(prompt_rows, width)
        q = queries.view(steps, batch, heads, width // heads).permute(1, 2, 0, 3)  # (B, H, T, D)
        all_keys = torch.cat([prompt_keys.repeat_interleave(group, 0), keys], dim=2)  # (B, H, P + T, D)
        all_values = torch.cat([prompt_values.repeat_interleave(group, 0), values], dim=2)
        scores = torch.matmul(q * scaling, all_keys.transpose(-1, -2)) + completion_bias
        mixed = torch.matmul(scores.softmax(dim=-1), all_values).permute(2, 0, 1, 3).reshape(steps * batch, width)
        return torch.cat([mixed_prompt, mixed])

    as_prompt_rows = lambda x: x.transpose(1, 2).reshape(prompt_rows, width)  # noqa: E731  (G, H, P, D)
    as_rows = lambda x: x.permute(2, 0, 1, 3).reshape(steps * batch, width)  # noqa: E731  (B, H, T, D)
    for i in reversed(range(len(transformer.h))):
        block, attention, mlp = transformer.h[i], transformer.h[i].attn, transformer.h[i].mlp
        # MLP: out = middle + c_proj(act(preact)), preact = c_fc(ln_2(middle))
        up = _linear_backward(mlp.c_proj, rec.activated[i][:rows], hidden, grads)
        up = _activation_backward(mlp.act, rec.preacts[i][:rows], up, grads)
        norm = _Local(block.ln_2, [rec.middles[i][:rows]], [block.ln_2.weight, block.ln_2.bias])
        (from_mlp,) = norm.backward(_linear_backward(mlp.c_fc, norm.output, up, grads), grads)
        middle_grad = hidden + from_mlp
        # attention: middle = inputs + c_proj(attend(...)), (query, key, value) = c_attn(ln_1(inputs))
        keys, values = replay.keys[i], replay.values[i]
        queries = rec.queries[i]
        mixing = _Local(attend, [queries[:prompt_rows], queries[prompt_rows:rows], keys[::group, :, :prompt],
                                 values[::group, :, :prompt], keys[:, :, prompt:], values[:, :, prompt:]], [])
        found = mixing.backward(_linear_backward(attention.c_proj, mixing.output, middle_grad, grads), grads)
        prompt_query, query, prompt_key, prompt_value, key, value = found
        qkv_grad = torch.cat([torch.cat([prompt_query, as_prompt_rows(prompt_key), as_prompt_rows(prompt_value)], 1),
                              torch.cat([query, as_rows(key), as_rows(value)], 1)])  # (rows, 3C)
        norm = _Local(block.ln_1, [rec.inputs[i][:rows]], [block.ln_1.weight, block.ln_1.bias])
        (from_attention,) = norm.backward(_linear_backward(attention.c_attn, norm.output, qkv_grad, grads), grads)
        hidden = middle_grad + from_attention
    # embeddings: inputs = wte(token) + wpe(position)
    group_mask = prompt_mask[::group]
    ids = torch.cat([replay.prompts.input_ids[::group].reshape(-1), replay.tokens.t().reshape(-1)])
    positions = torch.cat([(group_mask.cumsum(dim=1) - 1).clamp(min=0).reshape(-1),
                           (prompt_mask.sum(1, keepdim=True) + torch.arange(steps)).t().reshape(-1)])
    for table, index in ((transformer.wte.weight, ids), (transformer.wpe.weight, positions)):
        if table.requires_grad:
            grads.add(table, torch.zeros_like(table).index_add_(0, index, hidden))
