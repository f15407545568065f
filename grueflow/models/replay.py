"""The update's forward pass taken from generation, inside the CPU backend (:class:`grueflow.models.backend.CpuKernels`):
a GPT-2's sampled rollout replayed for the gradient without running the model over it again.

With one epoch and one minibatch (GRPO's and RLOO's usual single update), the policy that sampled the
rollout is the policy the update differentiates, with the same weights. Its decode steps already computed
every matrix product of the update's forward pass: :class:`Recorder` keeps, per block, for each group's prompt
positions (:func:`~grueflow.models.decode.gpt2_prefill`) and each fed token (:func:`~grueflow.models.decode.gpt2_step`),
the five activations the backward pass needs (the block's input, the query, the residual after attention, and
the MLP before and after its activation); the KV cache keeps the keys and values. :meth:`Replay.logits` returns
the rollout's logits as a tensor whose backward computes the weights' gradients from them, one block at a time
over all rows at once (so each weight gradient is one large product, as in an ordinary backward pass).

Only the cheap parts are computed again inside the backward: layer norms and the attention scores (autograd
differentiates them locally). The update then costs a backward pass instead of a forward and a backward pass
(``bench/RESULTS.md``). :meth:`Replay.logits` refuses once a trained weight has changed since sampling.

The gradients are those of :meth:`grueflow.models.policy.Policy.score`'s forward pass, to float rounding. A
completion position after its row's EOS differs (the decode step attended the padding fed after EOS,
``score`` masks it out), but such positions are masked out of every loss, so their logits carry no gradient.
It applies to a plain ``GPT2LMHeadModel`` where :func:`~grueflow.models.decode.supports_lean_step` (no LoRA
wrapper: its adapters' gradients are not computed here), with no logits processor (NLPO's masks).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from grueflow.models.decode import padding_bias, prompt_bias, supports_lean_step
from grueflow.models.kernels import available, onednn_linear


def supports_replay(model: Any) -> bool:
    """Whether :class:`Replay` can differentiate ``model``'s sampled rollouts."""
    from transformers import GPT2LMHeadModel

    return type(model) is GPT2LMHeadModel and supports_lean_step(model)


class Recorder:
    """What a GPT-2's prefill and decode steps computed, per block, as rows: first each group's prompt
    positions ((g, p) order, ``prompt_rows`` of them), then the fed tokens step by step ((t, b) order, ``batch``
    rows per step). Row buffers are made once, so a step costs one copy of what it computed."""

    def __init__(self, model: Any, groups: int, prompt: int, batch: int, max_steps: int) -> None:
        blocks = model.transformer.h
        width, inner = model.config.n_embd, blocks[0].mlp.c_fc.weight.shape[1]
        prompt_rows = groups * prompt
        weight = model.transformer.wte.weight
        rows, dtype, device = prompt_rows + batch * max_steps, weight.dtype, weight.device
        self.prompt_rows, self.groups, self.batch = prompt_rows, groups, batch
        make = lambda n: [torch.empty(rows, n, dtype=dtype, device=device) for _ in blocks]  # noqa: E731
        # per block: its input, the query, the residual after attention, the MLP before and after its activation
        self.inputs, self.queries, self.middles = make(width), make(width), make(width)
        self.preacts, self.activated = make(inner), make(inner)
        self.outputs = torch.empty(groups + batch * max_steps, width, dtype=dtype, device=device)  # before ln_f
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
        self.versions = [p._version for p in self.params]  # what the recorded activations were computed with

    def logits(self) -> torch.Tensor:
        """The rollout's raw next-token logits (B, T + 1, V), differentiable with respect to the model's weights.

        Refuses (RuntimeError) once any trained weight has changed since sampling: the recorded activations
        would then belong to other weights, and the gradients would be silently wrong.
        """
        if [p._version for p in self.params] != self.versions:
            raise RuntimeError("the sampling pass was recorded with other weights than the model now holds (an "
                               "optimiser step or load_state_dict came between); sample again, or score the rollout "
                               "with a forward pass")
        return _Replayed.apply(self, self.logits_value, *self.params)


class _Replayed(torch.autograd.Function):
    """The recorded logits as a function of the weights: forward returns them, backward is :class:`_Backward`."""

    @staticmethod
    def forward(ctx: Any, replay: Replay, logits: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.replay = replay
        return logits.view_as(logits)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        grads = _Grads()
        with torch.enable_grad():
            _Backward(ctx.replay, grads).run(grad)
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
    """The gradient before the MLP's activation from the one after it, both (rows, 4C): PyTorch's tanh-GELU
    kernel for GPT-2's (as :func:`grueflow.models.kernels.fused_activations` sets it), autograd for any other."""
    from transformers.activations import GELUTanh

    if type(act) is GELUTanh:
        return torch.ops.aten.gelu_backward(grad.view_as(preact), preact, approximate="tanh")
    return _Local(act, [preact], []).backward(grad, grads)[0]


def _completion_bias(prompt_mask: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, P + T) for the fed tokens: -inf at the prompt's padding and at later tokens, else 0."""
    batch, prompt = prompt_mask.shape
    padding = padding_bias(prompt_mask, dtype)
    causal = torch.full((steps, steps), float("-inf"), dtype=dtype, device=prompt_mask.device).triu_(1)
    return torch.cat([padding.expand(batch, 1, steps, prompt), causal.expand(batch, 1, steps, steps)], dim=-1)


class _Backward:
    """The backward pass of a replayed GPT-2 over every recorded row at once: each group's prompt positions,
    then the fed tokens (:class:`Recorder`'s order). Weight gradients go into ``grads``."""

    def __init__(self, replay: Replay, grads: _Grads) -> None:
        self.replay, self.rec, self.grads, self.group = replay, replay.recorder, grads, replay.group_size
        model = replay.model
        self.model, self.transformer, cfg = model, model.transformer, model.config
        self.heads, self.width = cfg.n_head, cfg.n_embd
        self.head_dim = self.width // self.heads
        self.scaling = self.head_dim ** -0.5 if cfg.scale_attn_weights else 1.0
        (self.batch, self.steps), self.prompt = replay.tokens.shape, replay.prompts.input_ids.shape[1]
        self.groups, self.prompt_rows = self.rec.groups, self.rec.prompt_rows
        self.rows = self.prompt_rows + self.batch * self.steps
        mask, dtype = replay.prompts.attention_mask, replay.logits_value.dtype
        self.prompt_bias = prompt_bias(mask[::self.group], dtype)  # (G, 1, P, P)
        self.token_bias = _completion_bias(mask, self.steps, dtype)  # (B, 1, T, P + T)
        self.qkv_grad = torch.empty(self.rows, 3 * self.width, dtype=dtype, device=mask.device)  # c_attn's, per block

    def run(self, grad: torch.Tensor) -> None:
        """From the logits' gradient (B, T + 1, V) down to the embeddings."""
        hidden = self.head(grad)
        for i in reversed(range(len(self.transformer.h))):
            hidden = self.block(i, hidden)
        self.embeddings(hidden)

    def head(self, grad: torch.Tensor) -> torch.Tensor:
        """The LM head over ln_f, at each prompt's last position (the first logits, summed over the group) and
        at every fed token: the gradient of the last block's output rows (rows, C)."""
        transformer, groups, tokens = self.transformer, self.groups, self.batch * self.steps
        vocab = grad.shape[-1]
        logits_grad = torch.cat([grad[:, 0].reshape(groups, self.group, vocab).sum(1),
                                 grad[:, 1:].transpose(0, 1).reshape(tokens, vocab)])  # (G + T B, V)
        top = _Local(transformer.ln_f, [self.rec.outputs[:groups + tokens]],
                     [transformer.ln_f.weight, transformer.ln_f.bias])
        self.grads.add(self.model.lm_head.weight, logits_grad.t() @ top.output)
        (top_grad,) = top.backward(logits_grad @ self.model.lm_head.weight, self.grads)
        hidden = grad.new_zeros(self.rows, self.width)
        hidden[:self.prompt_rows].view(groups, self.prompt, self.width)[:, -1] = top_grad[:groups]
        hidden[self.prompt_rows:] = top_grad[groups:]
        return hidden

    def block(self, i: int, hidden: torch.Tensor) -> torch.Tensor:
        """Block ``i``: out = middle + c_proj(act(c_fc(ln_2(middle)))), middle = inputs + c_proj(attend(
        c_attn(ln_1(inputs)))); the gradient of its output rows -> of its input rows."""
        rec, grads, rows, width, prompt_rows = self.rec, self.grads, self.rows, self.width, self.prompt_rows
        block = self.transformer.h[i]
        attention, mlp = block.attn, block.mlp
        up = _linear_backward(mlp.c_proj, rec.activated[i][:rows], hidden, grads)
        up = _activation_backward(mlp.act, rec.preacts[i][:rows], up, grads)
        norm = _Local(block.ln_2, [rec.middles[i][:rows]], [block.ln_2.weight, block.ln_2.bias])
        (from_mlp,) = norm.backward(_linear_backward(mlp.c_fc, norm.output, up, grads), grads)
        middle = hidden + from_mlp
        keys, values, queries, prompt = self.replay.keys[i], self.replay.values[i], rec.queries[i], self.prompt
        mixing = _Local(self.attend, [queries[:prompt_rows], queries[prompt_rows:rows], keys[::self.group, :, :prompt],
                                      values[::self.group, :, :prompt], keys[:, :, prompt:], values[:, :, prompt:]], [])
        found = mixing.backward(_linear_backward(attention.c_proj, mixing.output, middle, grads), grads)
        prompt_query, query, prompt_key, prompt_value, key, value = found
        qkv = self.qkv_grad
        qkv[:prompt_rows, :width], qkv[prompt_rows:, :width] = prompt_query, query
        for n, (prompt_grad, token_grad) in enumerate(((prompt_key, key), (prompt_value, value)), start=1):
            part = qkv[:, n * width:(n + 1) * width]
            part[:prompt_rows].view(self.groups, prompt, self.heads, self.head_dim).transpose(1, 2).copy_(prompt_grad)
            part[prompt_rows:].view(self.steps, self.batch, self.heads, self.head_dim).permute(1, 2, 0, 3).copy_(
                token_grad)
        norm = _Local(block.ln_1, [rec.inputs[i][:rows]], [block.ln_1.weight, block.ln_1.bias])
        (from_attention,) = norm.backward(_linear_backward(attention.c_attn, norm.output, qkv, grads), grads)
        return middle + from_attention

    def attend(self, prompt_queries: torch.Tensor, queries: torch.Tensor, prompt_keys: torch.Tensor,
               prompt_values: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Attention outputs as rows (the prompts', then the fed tokens'), from queries as rows and keys and
        values (G or B, H, P or T, D): each prompt over itself, each fed token over its prompt and the tokens
        before it."""
        groups, steps, batch, heads, width = self.groups, self.steps, self.batch, self.heads, self.width
        q = prompt_queries.view(groups, self.prompt, heads, self.head_dim).transpose(1, 2)  # (G, H, P, D)
        scores = torch.matmul(q * self.scaling, prompt_keys.transpose(-1, -2)) + self.prompt_bias
        mixed_prompt = torch.matmul(scores.softmax(dim=-1), prompt_values).transpose(1, 2).reshape(-1, width)
        q = queries.view(steps, batch, heads, self.head_dim).permute(1, 2, 0, 3)  # (B, H, T, D)
        all_keys = torch.cat([prompt_keys.repeat_interleave(self.group, 0), keys], dim=2)  # (B, H, P + T, D)
        all_values = torch.cat([prompt_values.repeat_interleave(self.group, 0), values], dim=2)
        scores = torch.matmul(q * self.scaling, all_keys.transpose(-1, -2)) + self.token_bias
        mixed = torch.matmul(scores.softmax(dim=-1), all_values).permute(2, 0, 1, 3).reshape(steps * batch, width)
        return torch.cat([mixed_prompt, mixed])

    def embeddings(self, hidden: torch.Tensor) -> None:
        """inputs = wte(token) + wpe(position), at the prompts' positions and the fed tokens'."""
        prompts, tokens, group = self.replay.prompts, self.replay.tokens, self.group
        group_mask = prompts.attention_mask[::group]
        ids = torch.cat([prompts.input_ids[::group].reshape(-1), tokens.t().reshape(-1)])
        token_positions = prompts.attention_mask.sum(1, keepdim=True) + torch.arange(
            self.steps, device=group_mask.device)  # (B, T)
        prompt_positions = (group_mask.cumsum(dim=1) - 1).clamp(min=0)  # (G, P)
        positions = torch.cat([prompt_positions.reshape(-1), token_positions.t().reshape(-1)])
        for table, index in ((self.transformer.wte.weight, ids), (self.transformer.wpe.weight, positions)):
            if table.requires_grad:
                self.grads.add(table, torch.zeros_like(table).index_add_(0, index, hidden))
