"""One ``seed_everything`` per stage; the only place global RNGs are touched."""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import torch


def seed_everything(seed: int, threads: int = 1) -> None:
    """Seed Python, NumPy and torch, and fix torch's thread count (results depend on it)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)


def rng_state() -> dict[str, Any]:
    """The global RNGs' states (Python, NumPy, torch) as plain values and tensors only, so that a
    checkpoint holding them loads with ``torch.load(..., weights_only=True)``."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # sampling on a GPU draws from its generators
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the global RNGs from :func:`rng_state`."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


@contextmanager
def isolated_rng(seed: int) -> Iterator[None]:
    """Run a block with every global RNG seeded with ``seed``, then put them back as they were: a side
    computation (evaluation during training) that neither draws from the run's streams nor depends on them."""
    saved = rng_state()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        set_rng_state(saved)
