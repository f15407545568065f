"""One ``seed_everything`` per stage; the only place global RNGs are touched."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int, threads: int = 1) -> None:
    """Seed Python, NumPy and torch, and fix torch's thread count (results depend on it)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
