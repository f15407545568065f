"""Preferences from a metric: sample several completions per prompt, prefer the higher-scoring one.

For each chosen training prompt the policy samples ``samples_per_prompt`` completions (exactly the
configured distribution, :meth:`Policy.sample`, on the device and in the precision of the policy's
backend); the reward scores them (its metrics on the device of their
:class:`~grueflow.metrics.MetricContext`), and the best and the worst make one pair when their scores
differ by more than ``min_margin``. The prompt order comes from
``random.Random(seed)`` and sampling from torch's global RNG, which the stage seeds once, so the same
params, policy and seed give the same file.
"""

from __future__ import annotations

import logging
import random
from typing import Callable, Optional

import torch

from grueflow import postprocess
from grueflow.data import Sample
from grueflow.metrics.reward import Reward
from grueflow.models.policy import Policy
from grueflow.preference.config import PreferencesConfig
from grueflow.preference.data import Preference

log = logging.getLogger(__name__)


def choose_prompts(samples: list[Sample], n_prompts: int, seed: int) -> list[Sample]:
    """``n_prompts`` samples (all when 0 or more than there are) in an order drawn from ``seed``."""
    order = list(range(len(samples)))
    random.Random(f"preferences/{seed}").shuffle(order)
    keep = order if n_prompts == 0 else order[:n_prompts]
    return [samples[i] for i in keep]


def best_and_worst(scores: list[float]) -> tuple[int, int]:
    """Indices of the highest and the lowest score (the first of equal ones), e.g. [0.1, 0.5, 0.1] -> (1, 0)."""
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    worst = min(range(len(scores)), key=lambda i: (scores[i], i))
    return best, worst


@torch.no_grad()
def build_preferences(policy: Policy, samples: list[Sample], reward: Reward, cfg: PreferencesConfig, source: str,
                      progress: Optional[Callable[[int], None]] = None) -> tuple[list[Preference], dict[str, float]]:
    """Pairs from ``cfg.samples_per_prompt`` completions of each chosen prompt; returns them and counts.

    ``source`` names the scoring (kept in each row's ``source``). Rows carry ``chosen_score`` and
    ``rejected_score`` (the reward's totals). The counts: prompts, pairs, skipped (margin too small).
    """
    k = cfg.samples_per_prompt
    prompts = choose_prompts(samples, cfg.n_prompts, cfg.seed)
    policy.model.eval()
    prefs: list[Preference] = []
    skipped = 0
    for start in range(0, len(prompts), cfg.batch_size):
        chunk = prompts[start:start + cfg.batch_size]
        rows = [s for s in chunk for _ in range(k)]
        completions = policy.sample(policy.encode([s.prompt for s in rows]), cfg.generation, group_size=k)
        texts = policy.decode(completions)
        scored = postprocess.apply(cfg.generation.post_processing, texts)  # pairs keep the sampled texts
        total, _ = reward([s.prompt for s in rows], scored, [s.references for s in rows], [s.meta for s in rows])
        for j, sample in enumerate(chunk):
            scores, group = total[j * k:(j + 1) * k], texts[j * k:(j + 1) * k]
            best, worst = best_and_worst(scores)
            if scores[best] - scores[worst] <= cfg.min_margin or group[best] == group[worst]:
                skipped += 1
                continue
            prefs.append(Preference(sample.id, sample.prompt, group[best], group[worst],
                                    {"chosen_score": round(float(scores[best]), 6),
                                     "rejected_score": round(float(scores[worst]), 6), "source": source}))
        if progress:
            progress(len(chunk))
    log.info("%d pairs from %d prompts (%d skipped: margin <= %g)", len(prefs), len(prompts), skipped, cfg.min_margin)
    return prefs, {"prompts": len(prompts), "pairs": len(prefs), "skipped": skipped}
