"""The CPU backend's kernels (:class:`grueflow.models.backend.CpuKernels`, float32 on the CPU only): oneDNN
linear layers and a lean single-token decode attention (:func:`lean_decode_attention`); a numba decode
attention over a reserved KV cache for the lean GPT-2 step (:func:`decode_attention`); the fused tanh GELU
(:func:`fused_activations`); and the allocator settings the bench runs with (``MALLOC_ENV``). What each
saves is measured in ``bench/RESULTS.md``.

PyTorch's CPU wheel sends a float32 ``nn.Linear`` (and GPT-2's ``Conv1D``) to MKL's sgemm; oneDNN's matmul
with its weight reordered once into oneDNN's blocked layout runs a transformer's shapes faster on AVX-512
CPUs. This module swaps the forward of every float32 CPU linear layer of at least ``MIN_FEATURES`` inputs
and outputs for oneDNN's (``torch.ops.mkldnn._linear_pointwise``, the op TorchInductor emits for frozen CPU
linears), in place:

- the reordered weight is kept per weight tensor and made again when the weight changes (an optimiser
  step, ``load_state_dict``: the tensor's version counter moves; an optimiser whose kernel writes weights
  without moving it must move it, as :class:`grueflow.rl.trainer.AdamW` does), so generation, the reference
  pass and the update's forward reuse one reorder per optimiser step;
- with gradients, a custom autograd function runs the same forward, and its backward computes the
  input's gradient with oneDNN and the weight's with ``mm``; under ``create_graph`` (TRPO's
  Fisher-vector products) the backward is plain differentiable ops, so second derivatives stay exact.

The numbers are float32 products in another summation order: equal to MKL's to float rounding
(~1e-6 relative). Layers on another device or dtype, and builds without oneDNN, keep their own forward.
"""

from __future__ import annotations

import types
from typing import Any, Optional

import numba
import numpy as np
import torch
from numba import njit, prange
from torch.utils.weak import WeakIdKeyDictionary

_REORDER_ROWS = 64  # the row count oneDNN picks the blocked layout for; any row count may use it
_reordered: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> ((version, data_ptr), reordered (N, K))


def available() -> bool:
    """Whether this PyTorch build has oneDNN's linear op on CPU."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(x: torch.Tensor, weight_nk: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x @ weight_nk^T + bias`` by oneDNN; ``weight_nk`` (out, in), plain or from :func:`reordered`."""
    return torch.ops.mkldnn._linear_pointwise(x, weight_nk, bias, "none", [], "")


def reordered(weight: torch.Tensor, transposed: bool) -> torch.Tensor:
    """``weight`` as an (out, in) matrix in oneDNN's layout, made once per version of ``weight``.

    ``transposed``: ``weight`` is stored (in, out), as GPT-2's ``Conv1D`` stores it.
    """
    key = (weight._version, weight.data_ptr())
    held = _reordered.get(weight)
    if held is None or held[0] != key:
        with torch.no_grad():
            matrix = weight.detach().t() if transposed else weight.detach()
            held = (key, torch.ops.mkldnn._reorder_linear_weight(matrix.contiguous(), _REORDER_ROWS))
        _reordered[weight] = held
    return held[1]


class _Linear(torch.autograd.Function):
    """``x @ W^T + b`` with oneDNN, ``W`` (out, in) or, ``transposed``, stored (in, out)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                transposed: bool) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.transposed, ctx.has_bias = transposed, bias is not None
        return onednn_linear(x, reordered(weight, transposed), bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        x, weight = ctx.saved_tensors
        weight_nk = weight.t() if ctx.transposed else weight  # (out, in)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            if torch.is_grad_enabled():  # create_graph: differentiable ops only
                grad_x = grad @ weight_nk
            else:  # oneDNN with the (in, out) matrix as its weight
                grad_x = onednn_linear(grad, weight_nk.t(), None)
        rows = grad.reshape(-1, grad.shape[-1])  # (M, out)
        if ctx.needs_input_grad[1]:
            inputs = x.reshape(-1, x.shape[-1])  # (M, in)
            grad_w = inputs.t() @ rows if ctx.transposed else rows.t() @ inputs
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = rows.sum(0)
        return grad_x, grad_w, grad_b, None


def _onednn_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A linear layer's forward through oneDNN: bound to each layer, so ``copy.deepcopy`` rebinds it."""
    weight, bias = self.weight, self.bias
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or x.dtype != torch.float32:
        return type(self).forward(self, x)
    transposed = type(self) is not torch.nn.Linear  # GPT-2's Conv1D stores (in, out)
    if torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _Linear.apply(x, weight, bias, transposed)
    return onednn_linear(x, reordered(weight, transposed), bias)


MIN_FEATURES = 128  # below this many inputs or outputs a layer keeps MKL: oneDNN's per-call and per-shape
# set-up costs more than it saves (a 2 x 64 test GPT-2 trained twice as slowly with it)


def onednn_linears(model: Any, min_features: int = MIN_FEATURES) -> Any:
    """``model`` with every ``nn.Linear`` and GPT-2 ``Conv1D`` of at least ``min_features`` inputs and outputs
    computed by oneDNN on CPU (in place).

    The modules, their parameters and the state dict are unchanged; only each layer's ``forward`` is
    swapped, and a layer that is not float32 on CPU at call time runs its own.
    """
    if not available():
        return model
    from transformers.pytorch_utils import Conv1D

    for module in model.modules():
        if (type(module) in (torch.nn.Linear, Conv1D) and "forward" not in vars(module)
                and min(module.weight.shape) >= min_features):
            module.forward = types.MethodType(_onednn_forward, module)
    return model


# -- attention for one new token -----------------------------------------------------------------

ATTENTION = "grueflow_sdpa"  # transformers' SDPA attention, with a lean path for single-token decode steps


def _attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
               is_causal: Optional[bool] = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except for a decode step on CPU (one query per row, no dropout).

    PyTorch's CPU SDPA kernel costs about a millisecond per call for a single query against a short cache
    (64 rows x 8 heads x 45 keys), a sixth of a 6 x 512 GPT-2's sampling time; two batched products and
    a softmax do the same in a tenth of that. Grouped-query heads are packed, as transformers packs them.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (query.shape[2] != 1 or query.device.type != "cpu" or dropout or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    batch, heads, _, width = query.shape
    kv_heads = key.shape[1]
    q = query.reshape(batch, kv_heads, heads // kv_heads, width)  # each key head's queries together
    scores = torch.matmul(q, key.transpose(-1, -2)) * (width ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:  # (B, 1, 1, L): bool (keep) from sdpa_mask, or additive
        scores = (scores.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool
                  else scores + attention_mask)
    out = torch.matmul(scores.softmax(dim=-1), value)  # (B, kv_heads, groups, D)
    return out.reshape(batch, 1, heads, value.shape[-1]), None


@njit(parallel=True, fastmath={"reassoc", "contract"}, nogil=True, cache=True)
def _attend(query: np.ndarray, keys: np.ndarray, values: np.ndarray, filled: int, bias: np.ndarray, scaling: float,
            out: np.ndarray) -> None:
    batch, heads, width = query.shape
    scratch = np.empty((batch * heads, filled), np.float32)
    for pair in prange(batch * heads):
        row, head = pair // heads, pair % heads
        q, scores = query[row, head], scratch[pair]
        top = np.float32(-np.inf)
        for position in range(filled):
            key = keys[row, head, position]
            dot = np.float32(0.0)
            for d in range(width):
                dot += q[d] * key[d]
            score = dot * scaling + bias[row, position]
            scores[position] = score
            top = max(top, score)
        total = np.float32(0.0)
        for position in range(filled):
            scores[position] = np.exp(scores[position] - top)
            total += scores[position]
        mixed = out[row, head]
        mixed[:] = 0.0
        for position in range(filled):
            weight, value = scores[position] / total, values[row, head, position]
            for d in range(width):
                mixed[d] += weight * value[d]


def run_parallel(kernel: Any, *args: Any) -> Any:
    """A numba ``parallel`` kernel on as many threads as PyTorch uses, PyTorch's thread count left as it was.

    numba's OpenMP threading layer shares PyTorch's OpenMP runtime (the same warm threads). Its first launch
    sets OpenMP's thread count to numba's, which would change PyTorch's, and with it the summation order of
    PyTorch's reductions: results depend on the thread count, so it is restored.
    """
    threads = torch.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        return kernel(*args)
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def decode_attention(query: torch.Tensor, key_store: torch.Tensor, value_store: torch.Tensor, filled: int,
                     bias: torch.Tensor, scaling: float) -> torch.Tensor:
    """One query per row and head against the first ``filled`` positions of a KV cache: ``softmax(q k^T x
    scaling + bias) v``.  (B, H, D) queries, (B, H, >= filled, D) contiguous float32 stores on CPU, (B, filled)
    additive bias -> (B, H, D)

    A decode step's attention is a batched matrix-vector product per row and head, which MKL's batched
    product runs well below the memory bandwidth once the step's weights have pushed the cache out of the
    CPU caches. This kernel streams each row's keys and values once, with the softmax between. Equal to the
    products to float rounding (the dot products are summed in another order).
    """
    batch, heads, width = query.shape
    out = torch.empty(batch, heads, width, dtype=torch.float32, device=query.device)
    run_parallel(_attend, query.contiguous().numpy(), key_store.numpy(), value_store.numpy(), filled, bias.numpy(),
                 np.float32(scaling), out.numpy())
    return out


def lean_decode_attention(model: Any) -> Any:
    """``model`` with :func:`_attention` as its attention, if it uses transformers' SDPA (in place)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(ATTENTION)
    return model


# -- the allocator ---------------------------------------------------------------------------------

# glibc's allocator told to reuse freed memory for tensors of up to 32 MB instead of returning it. By default
# each allocation above its adaptive mmap threshold gets fresh pages from the kernel, unmapped again on free,
# so every activation, logits or gradient tensor of a training step pays its page faults again. The bench
# runs every method (TRL's too) with these set; stages do not (on small models they cost more than they
# save: bench/RESULTS.md).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
              "MALLOC_TOP_PAD_": str(256 << 20)}


def fused_activations(model: Any) -> Any:
    """``model`` with every ``gelu_new`` activation (GPT-2, T5 v1.1: eight element-wise ops, each a pass over
    the activations, forward and backward) swapped for PyTorch's fused ``gelu(approximate="tanh")``, in place.

    The same function (Hendrycks and Gimpel 2016, tanh form), equal to float rounding (~1e-7); transformers
    ships it as ``gelu_pytorch_tanh``. The saved config is untouched, so a saved model reloads as it was.
    """
    from transformers.activations import GELUTanh, NewGELUActivation

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is NewGELUActivation:
                setattr(parent, name, GELUTanh())
    return model


def cpu_kernels(model: Any) -> Any:
    """``model`` with oneDNN linear layers and the lean decode attention (in place); every loader applies it."""
    return lean_decode_attention(onednn_linears(model))
