"""The speed backend: how a stage prepares its models, decodes, and finds top-p nuclei, chosen once per stage.

:class:`Backend` is plain transformers (SDPA attention, ``model(...)`` calls, ``torch.sort`` for top-p) on any
device and precision: the reference every fast path must equal. :class:`CpuKernels` adds the CPU fast paths
where they apply (float32 on the CPU, fast paths on):

- at load, every ``gelu_new`` swapped for PyTorch's fused tanh GELU, oneDNN linear layers and a lean
  single-token decode attention (:mod:`grueflow.models.kernels`), and a tied input embedding's gradient made
  sparse (:func:`sparse_tied_embeddings`);
- a lean GPT-2 prefill and decode step (:mod:`grueflow.models.decode`), with a numba attention over the
  reserved KV cache;
- the top-p nucleus by a numba histogram instead of a sort (:mod:`grueflow.models.nucleus`);
- for a plain GPT-2, the sampling pass kept differentiable (:mod:`grueflow.models.replay`), so that a
  single-update RL step (one epoch of one minibatch, no critic, no logits processor) needs no second
  forward pass over the rollout.

``select`` picks one from an :class:`~grueflow.device.Execution`; ``$GRUEFLOW_FAST=0`` gives :class:`Backend`
everywhere. :class:`grueflow.models.policy.Policy` and the RL trainer call only this interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence

import torch
from transformers.cache_utils import DynamicLayer
from transformers.modeling_outputs import BaseModelOutput

from grueflow.device import Execution, or_cpu

if TYPE_CHECKING:
    from grueflow.models.policy import Prompts


class SampledLogits(Protocol):
    """A rollout's sampling pass kept for the update: its raw next-token logits (B, T, V) as a tensor
    differentiable with respect to the weights that sampled it, without another forward pass."""

    def logits(self) -> torch.Tensor: ...


class ReservedLayer(DynamicLayer):
    """A KV-cache layer with room for ``extra`` more positions, written in place.

    transformers' ``DynamicLayer`` concatenates every new position onto the whole cache, copying it once
    per generated token; this one copies each new key and value once. ``keys``/``values`` are views of the
    filled part, so the model sees exactly what ``DynamicLayer`` would give it. Past the reserved room it
    falls back to concatenation.
    """

    def __init__(self, layer: DynamicLayer, extra: int) -> None:
        super().__init__()
        batch, heads, filled, width = layer.keys.shape
        self.device, self.is_initialized, self.filled = layer.keys.device, True, filled
        self.key_store = layer.keys.new_empty(batch, heads, filled + extra, width)
        self.value_store = layer.values.new_empty(batch, heads, filled + extra, layer.values.shape[-1])
        self.key_store[:, :, :filled] = layer.keys
        self.value_store[:, :, :filled] = layer.values
        self.keys, self.values = self.key_store[:, :, :filled], self.value_store[:, :, :filled]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.filled + key_states.shape[-2]
        if end > self.key_store.shape[2]:
            return super().update(key_states, value_states)
        self.key_store[:, :, self.filled:end] = key_states
        self.value_store[:, :, self.filled:end] = value_states
        self.filled = end
        self.keys, self.values = self.key_store[:, :, :end], self.value_store[:, :, :end]
        return self.keys, self.values


def reserve_cache(cache: Any, extra: int) -> Any:
    """``cache`` with every filled self-attention layer given room for ``extra`` more positions (in place)."""
    target = getattr(cache, "self_attention_cache", cache)  # an encoder-decoder cache: its decoder side
    target.layers = [ReservedLayer(layer, extra) if type(layer) is DynamicLayer and layer.is_initialized else layer
                     for layer in target.layers]
    return cache


def prefix_forward(model: Any, prompts: "Prompts", group_size: int, **kwargs: Any) -> tuple[Any, Any]:
    """A causal model over each group's prompt once (rows ``::group_size``): its outputs (per group) and
    its KV cache, repeated to the whole batch."""
    ids, attention = prompts.input_ids[::group_size], prompts.attention_mask[::group_size]
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, **kwargs)
    cache = out.cache
    if group_size > 1:
        cache.batch_repeat_interleave(group_size)
    return out, cache


def shared_encoder(model: Any, prompts: "Prompts", group_size: int) -> BaseModelOutput:
    """A seq2seq model's encoder over each group's prompt once, repeated to the whole batch."""
    hidden = model.get_encoder()(input_ids=prompts.input_ids[::group_size],
                                 attention_mask=prompts.attention_mask[::group_size]).last_hidden_state
    return BaseModelOutput(last_hidden_state=hidden.repeat_interleave(group_size, 0))


def sparse_tied_embeddings(model: Any, sparse: bool = True) -> Any:
    """``model`` whose input embedding, where it shares its weight with the LM head (GPT-2, SmolLM2), hands
    autograd a sparse gradient: the rows of the tokens fed (in place; ``sparse=False`` undoes it).

    A dense embedding backward zero-fills a (V, H) tensor per call (each group's prompt and the completion are
    two calls) and adds it to the LM head's (V, H) gradient: over a 49,152 x 576 table, three passes of 113 MB
    each, most of them page faults. Autograd adds a sparse gradient into the LM head's dense one in place, so
    the weight's ``.grad`` is dense and the same to float rounding. The LM head must then be in every loss that
    trains the weight (every grueflow objective on a causal LM's logits is); a model trained through its hidden
    states only (a separate critic) or differentiated twice (TRPO) takes ``sparse=False``.
    """
    get_in, get_out = getattr(model, "get_input_embeddings", None), getattr(model, "get_output_embeddings", None)
    embedding, head = (get_in() if get_in else None), (get_out() if get_out else None)
    if isinstance(embedding, torch.nn.Embedding) and head is not None and embedding.weight is head.weight:
        embedding.sparse = sparse
    return model


class Decoding:
    """Incremental decoding of one batch: ``first`` next-token logits (B, V), then ``step(token, t)`` for the
    logits after each fed token (``t`` counting from 0). Logits are float32 whatever the model's precision."""

    def __init__(self, first: torch.Tensor, step: Any, cache: Any, autocast: Any) -> None:
        self.first, self._step, self.cache, self._autocast = first.float(), step, cache, autocast

    def step(self, token: torch.Tensor, t: int) -> torch.Tensor:
        with self._autocast():
            logits, self.cache = self._step(token, self.cache, t)
        return logits.float()

    def kept(self, fed: torch.Tensor) -> Optional[SampledLogits]:
        """The sampling pass, differentiable, given the fed completion tokens (B, T - 1); None where this
        backend keeps none."""
        return None


class Backend:
    """Plain transformers on any device and precision: the reference path, and the one with fast paths off."""

    name = "transformers"
    numba_nucleus = False  # top-p by the numba histogram (CPU float32) instead of a sort

    def __init__(self, execution: Optional[Execution] = None) -> None:
        self.execution = or_cpu(execution)

    def prepare(self, model: Any) -> Any:
        """``model`` made ready to run on this backend (in place)."""
        return model

    def keeps_sampling(self, model: Any) -> bool:
        """Whether :meth:`start` can keep ``model``'s sampling pass differentiable."""
        return False

    def start(self, model: Any, kind: str, prompts: "Prompts", group_size: int = 1, reserve: int = 0,
              keep: bool = False) -> Decoding:
        """Start decoding ``prompts`` (B, P), each group of ``group_size`` identical rows encoded once, with
        ``reserve`` positions of KV cache set aside; ``keep``: keep the pass for :meth:`Decoding.kept` where
        :meth:`keeps_sampling`."""
        autocast = self.execution.autocast
        with autocast():
            first, cache, step = self._prefill(model, kind, prompts, group_size)
        return Decoding(first, step, reserve_cache(cache, reserve), autocast)

    def _prefill(self, model: Any, kind: str, prompts: "Prompts", group_size: int) -> tuple[torch.Tensor, Any, Any]:
        batch = prompts.input_ids.shape[0]
        if kind == "causal":
            lengths = prompts.attention_mask.sum(1, keepdim=True)  # (B, 1)
            out, cache = prefix_forward(model, prompts, group_size, logits_to_keep=1)
            attention = prompts.attention_mask

            def causal_step(token: torch.Tensor, cache: Any, t: int) -> tuple[torch.Tensor, Any]:
                nonlocal attention
                attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
                step_out = model(input_ids=token[:, None], attention_mask=attention, position_ids=lengths + t,
                                 cache=cache, use_cache=True)
                return step_out.logits[:, -1], step_out.cache

            return out.logits[:, -1].repeat_interleave(group_size, 0), cache, causal_step
        encoder = shared_encoder(model, prompts, group_size)
        start = torch.full((batch, 1), model.config.decoder_start_token_id, dtype=torch.long,
                           device=prompts.input_ids.device)
        out = model(encoder_outputs=encoder, attention_mask=prompts.attention_mask, decoder_input_ids=start,
                    use_cache=True)

        def seq2seq_step(token: torch.Tensor, cache: Any, t: int) -> tuple[torch.Tensor, Any]:
            step_out = model(encoder_outputs=encoder, attention_mask=prompts.attention_mask,
                             decoder_input_ids=token[:, None], cache=cache, use_cache=True)
            return step_out.logits[:, -1], step_out.cache

        return out.logits[:, -1], out.cache, seq2seq_step

    def top_p_keep(self, logits: torch.Tensor, top_p: float, top_k: int = 0, min_tokens_to_keep: int = 1,
                   always_keep: Sequence[int] = ()) -> torch.Tensor:
        """The top-p nucleus of each row (see :func:`grueflow.models.nucleus.top_p_keep`).  (B, V) -> (B, V) bool"""
        from grueflow.models.nucleus import top_p_keep

        return top_p_keep(logits, top_p, top_k, min_tokens_to_keep, always_keep, fast=self.numba_nucleus)

    def top_p_mask(self, logits: torch.Tensor, scores: torch.Tensor, top_p: float, top_k: int = 0,
                   min_tokens_to_keep: int = 1, always_keep: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`top_p_keep` of ``logits`` and ``scores`` masked to it (NLPO).  (B, V), (B, V) -> bool, scores"""
        from grueflow.models.nucleus import top_p_mask

        return top_p_mask(logits, scores, top_p, top_k, min_tokens_to_keep, always_keep, fast=self.numba_nucleus)


class _KeptDecoding(Decoding):
    """A lean GPT-2 decoding whose activations a recorder keeps, for :class:`grueflow.models.replay.Replay`."""

    def __init__(self, first: torch.Tensor, step: Any, cache: Any, autocast: Any, model: Any, prompts: "Prompts",
                 group_size: int, recorder: Any) -> None:
        super().__init__(first, step, cache, autocast)
        self.model, self.prompts, self.group_size, self.recorder = model, prompts, group_size, recorder
        recorder.logits.append(self.first)

    def step(self, token: torch.Tensor, t: int) -> torch.Tensor:
        logits = super().step(token, t)
        self.recorder.logits.append(logits)
        return logits

    def kept(self, fed: torch.Tensor) -> Optional[SampledLogits]:
        from grueflow.models.replay import Replay

        self.recorder.logits = self.recorder.logits[:fed.shape[1] + 1]
        return Replay(self.model, self.prompts, self.group_size, fed, self.cache, self.recorder)


class CpuKernels(Backend):
    """The CPU fast paths (float32 on the CPU): oneDNN linears, the lean GPT-2 step, numba kernels, the replay."""

    name = "cpu_kernels"
    numba_nucleus = True

    def prepare(self, model: Any) -> Any:
        from grueflow.models.kernels import cpu_kernels, fused_activations

        return sparse_tied_embeddings(cpu_kernels(fused_activations(model)))

    def keeps_sampling(self, model: Any) -> bool:
        from grueflow.models.replay import supports_replay

        return supports_replay(model)

    def start(self, model: Any, kind: str, prompts: "Prompts", group_size: int = 1, reserve: int = 0,
              keep: bool = False) -> Decoding:
        from grueflow.models.decode import gpt2_prefill, gpt2_step, supports_lean_step
        from grueflow.models.replay import Recorder

        if kind != "causal" or not supports_lean_step(model):
            return super().start(model, kind, prompts, group_size, reserve, keep)
        autocast = self.execution.autocast
        batch, prompt = prompts.input_ids.shape
        recorder = (Recorder(model, batch // group_size, prompt, batch, max(reserve - 1, 0))
                    if keep and self.keeps_sampling(model) else None)
        first, cache = gpt2_prefill(model, prompts.input_ids[::group_size], prompts.attention_mask[::group_size],
                                    recorder)
        if group_size > 1:
            cache.batch_repeat_interleave(group_size)
        step = gpt2_step(model, prompts.attention_mask, prompts.attention_mask.sum(1, keepdim=True), recorder)
        first, cache = first.repeat_interleave(group_size, 0), reserve_cache(cache, reserve)
        if recorder is None:
            return Decoding(first, step, cache, autocast)
        return _KeptDecoding(first, step, cache, autocast, model, prompts, group_size, recorder)


def select(execution: Optional[Execution] = None) -> Backend:
    """The backend for ``execution`` (default: the CPU in float32): :class:`CpuKernels` for float32 on the CPU
    with fast paths on, else :class:`Backend`."""
    execution = or_cpu(execution)
    if execution.fast_paths_run:
        return CpuKernels(execution)
    return Backend(execution)
