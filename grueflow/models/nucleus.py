"""Top-p (nucleus) selection: ``generate``'s top-p rule for sampling, and NLPO's action mask at every
generated token.

The nucleus is the smallest set of most likely tokens whose probability reaches ``top_p``: sorted
descending, token ``i`` is in it while the mass before it is below ``top_p``. A sort per row and per
generated token is a large share of a small model's CPU sampling step (``bench/RESULTS.md``), and NLPO's
mask model needs a nucleus at every step.

On the CPU only the boundary is ordered. A non-negative float32 orders as its bit pattern, so a
histogram of probability mass over the top 12 bits (exponent and 4 mantissa bits), ranked high to
low, locates the bin where the mass crosses ``top_p``: every token in a higher bin is in, every token
in a lower bin out. Only the tokens of that bin are sorted; a bin of more than ``_SORTED_BIN`` tokens
(a nearly flat distribution) is narrowed by the next 11 bits, then the last 8, the same way. A row
takes a few passes over its vocabulary, and rows run in parallel (numba). Other devices, and ``fast=False``
(the plain backend), sort (:func:`_sorted_keep`).

Both give the same nucleus, ties at its edge filled in vocabulary order. The histogram sums masses
in float64 and in another order than a cumulative sum, so a row whose mass reaches ``top_p`` within
float rounding may keep one token more or fewer.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from numba import njit, prange

from grueflow.models.kernels import run_parallel

_DIGITS = (19, 8, 0)  # a float32's 31 value bits as three digits: bits 30..19, 18..8 and 7..0
_BINS = 1 << 12  # the widest digit
_SORTED_BIN = 256  # a boundary bin of at most this many tokens is sorted rather than narrowed


@njit(cache=True, nogil=True)
def _boundary(probs: np.ndarray, bits: np.ndarray, top_p: float, mass: np.ndarray, count: np.ndarray,
              values: np.ndarray) -> tuple[int, np.float32]:
    """One row's nucleus size and the smallest probability in it.  (V,) float32, its bits as uint32."""
    vocab = probs.shape[0]
    above, before = 0.0, 0  # mass and number of the tokens ranked above the bin being narrowed
    prefix, high = 0, 31  # the bin: tokens whose bits >> high == prefix
    for low in _DIGITS:
        width = high - low
        last = (1 << width) - 1
        mass[:last + 1] = 0.0
        count[:last + 1] = 0
        for j in range(vocab):
            if (bits[j] >> high) == prefix:
                digit = (bits[j] >> low) & last
                mass[digit] += probs[j]
                count[digit] += 1
        floor = 0  # the lowest non-empty digit: where the walk stops if the mass never reaches top_p
        while floor < last and count[floor] == 0:
            floor += 1
        digit = last
        while digit > floor and (count[digit] == 0 or above + mass[digit] < top_p):
            above += mass[digit]
            before += count[digit]
            digit -= 1
        if count[digit] == 0:  # nothing counted: NaN probabilities
            return vocab, probs.min()
        prefix, high = (prefix << width) | digit, low
        if count[digit] <= _SORTED_BIN:
            break
    size = 0
    for j in range(vocab):
        if (bits[j] >> high) == prefix:
            values[size] = probs[j]
            size += 1
    ordered = np.sort(values[:size])  # ascending: the bin's most likely token last
    i = size - 1
    while i >= 0 and above < top_p:
        above += ordered[i]
        i -= 1
    return before + size - 1 - i, ordered[i + 1]


@njit(cache=True, nogil=True)
def _keep_row(probs: np.ndarray, bits: np.ndarray, top_p: float, top_k: int, min_keep: int,
              always: np.ndarray, keep: np.ndarray) -> None:
    vocab = probs.shape[0]
    if top_p < 1.0:  # the row's scratch is allocated here: small enough to come from the heap, not mmap
        size, threshold = _boundary(probs, bits, top_p, np.empty(_BINS), np.empty(_BINS, np.int32),
                                    np.empty(vocab, np.float32))
    else:
        size, threshold = vocab, probs.min()
    target = min(max(min(size, top_k) if top_k > 0 else size, min_keep), vocab)
    if target != size:
        threshold = np.sort(probs)[vocab - target]
    strictly = 0
    for j in range(vocab):
        keep[j] = probs[j] > threshold
        strictly += probs[j] > threshold
    tied = target - strictly  # tokens at the threshold still to keep, in vocabulary order
    j = 0
    while tied > 0 and j < vocab:
        if probs[j] == threshold:
            keep[j] = True
            tied -= 1
        j += 1
    for token in always:
        keep[token] = True


@njit(cache=True, nogil=True, parallel=True)
def _keep(probs: np.ndarray, top_p: float, top_k: int, min_keep: int, always: np.ndarray) -> np.ndarray:
    rows, vocab = probs.shape
    bits = probs.view(np.uint32)
    keep = np.empty((rows, vocab), np.bool_)
    for row in prange(rows):
        _keep_row(probs[row], bits[row], top_p, top_k, min_keep, always, keep[row])
    return keep


@njit(cache=True, nogil=True, parallel=True)
def _keep_and_mask(probs: np.ndarray, scores: np.ndarray, top_p: float, top_k: int, min_keep: int,
                   always: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows, vocab = probs.shape
    bits = probs.view(np.uint32)
    keep = np.empty((rows, vocab), np.bool_)
    masked = np.empty((rows, vocab), scores.dtype)
    for row in prange(rows):
        _keep_row(probs[row], bits[row], top_p, top_k, min_keep, always, keep[row])
        for j in range(vocab):
            masked[row, j] = scores[row, j] if keep[row, j] else -np.inf
    return keep, masked


def top_p_keep(logits: torch.Tensor, top_p: float, top_k: int = 0, min_tokens_to_keep: int = 1,
               always_keep: Sequence[int] = (), fast: bool = True) -> torch.Tensor:
    """The nucleus of each row of ``logits``: the smallest set of most likely tokens whose probability
    reaches ``top_p`` (every token at ``top_p`` >= 1), capped at ``top_k`` tokens when ``top_k`` > 0 and
    never fewer than ``min_tokens_to_keep``; the ``always_keep`` ids are allowed besides. The numba
    histogram runs on CPU float32 logits when ``fast``; anything else sorts.
    (B, V) logits -> (B, V) bool
    """
    _check(top_p, min_tokens_to_keep)
    if logits.device.type != "cpu" or not fast:
        keep = _sorted_keep(logits.detach(), top_p, top_k, min_tokens_to_keep)
        keep[:, list(always_keep)] = True
        return keep
    probs = logits.detach().float().softmax(dim=-1).contiguous().numpy()
    return torch.from_numpy(run_parallel(_keep, probs, float(top_p), int(top_k), int(min_tokens_to_keep),
                                         np.asarray(always_keep, dtype=np.int64)))


def top_p_mask(logits: torch.Tensor, scores: torch.Tensor, top_p: float, top_k: int = 0, min_tokens_to_keep: int = 1,
               always_keep: Sequence[int] = (), fast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`top_p_keep` of ``logits``, and ``scores`` with every token outside it at -inf (a new tensor):
    NLPO's mask model choosing which of the policy's tokens may be drawn.  (B, V), (B, V) -> (B, V) bool, (B, V)
    """
    _check(top_p, min_tokens_to_keep)
    if logits.device.type != "cpu" or scores.dtype != torch.float32 or not fast:
        keep = top_p_keep(logits, top_p, top_k, min_tokens_to_keep, always_keep, fast)
        return keep, scores.masked_fill(~keep, float("-inf"))
    probs = logits.detach().float().softmax(dim=-1).contiguous().numpy()
    keep, masked = run_parallel(_keep_and_mask, probs, scores.detach().contiguous().numpy(), float(top_p), int(top_k),
                                int(min_tokens_to_keep), np.asarray(always_keep, dtype=np.int64))
    return torch.from_numpy(keep), torch.from_numpy(masked)


def _check(top_p: float, min_tokens_to_keep: int) -> None:
    if not 0 < top_p or min_tokens_to_keep < 1:
        raise ValueError(f"a nucleus needs top_p > 0 and min_tokens_to_keep >= 1, got top_p={top_p}, "
                         f"min_tokens_to_keep={min_tokens_to_keep}")


def _sorted_keep(logits: torch.Tensor, top_p: float, top_k: int, min_tokens_to_keep: int) -> torch.Tensor:
    """:func:`top_p_keep` by sorting (off the CPU), without ``always_keep``.  (B, V) -> (B, V) bool

    Only the sorted probabilities are needed, not the permutation: they give the nucleus's size and its
    smallest probability, and the tokens above that probability are in it. Tokens tied at that
    probability fill the remaining places in vocabulary order, so the nucleus has exactly its size
    (``generate``'s unstable sort keeps an arbitrary subset of the tie).
    """
    probs = logits.softmax(dim=-1)
    vocab = probs.shape[-1]
    ordered = probs.sort(dim=-1, descending=True).values
    size = ((ordered.cumsum(dim=-1) - ordered) < top_p).sum(dim=-1, keepdim=True) if top_p < 1.0 else \
        torch.full_like(ordered[:, :1], vocab, dtype=torch.long)
    if top_k > 0:
        size = size.clamp(max=top_k)
    size = size.clamp(min=min_tokens_to_keep, max=vocab)  # (B, 1)
    threshold = ordered.gather(1, size - 1)
    above = probs > threshold
    tied = probs == threshold
    return above | (tied & (tied.cumsum(dim=-1) <= size - above.sum(dim=-1, keepdim=True)))
