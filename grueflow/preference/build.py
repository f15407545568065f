"""Preferences from a metric: sample several completions per prompt, prefer the higher-scoring one.

For each chosen training prompt the policy samples ``samples_per_prompt`` completions (exactly the
configured distribution, :meth:`Policy.sample`, on the device and in the precision of the policy's
backend); the reward scores them (its metrics on the device of their
:class:`~grueflow.metrics.MetricContext`), and the best and the worst make one pair when their scores
differ by more than ``min_margin``. The prompt order comes from
``random.Random(seed)`` and sampling from torch's global RNG, which the stage seeds once, so the same
params, policy and seed give the same file.

Scores that are not finite. A metric scores NaN a completion it cannot score (the contract of
:class:`~grueflow.metrics.reward.Reward`); such completions are left out of their prompt's choice before the best
and the worst are taken, counted per component in the log and the counts, and a prompt left with fewer than two
scored completions is counted apart from the margin skips. An infinite score is never such a signal: it is a bug
in the metric (or a weighted sum that overflowed), and no pair can be ranked by it, so it stops the build at the
batch that holds it, before anything is written (:class:`NonFiniteScoreError`), as RL stops on it.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Any, Callable, Optional, Sequence

import torch

from grueflow import postprocess
from grueflow.data import Sample
from grueflow.io import rounded
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


class NonFiniteScoreError(RuntimeError):
    """An infinite score (or a weighted total that overflowed): a bug in the reward, not a completion it cannot
    score; the build stops before anything is written."""


def best_and_worst(scores: Sequence[float]) -> Optional[tuple[int, int]]:
    """Indices of the highest and the lowest of the scored (not NaN) scores, the first of equal ones, e.g.
    [0.1, 0.5, 0.1] -> (1, 0) and [nan, 0.5, 0.1] -> (1, 2); None when fewer than two are scored."""
    scored = [i for i, v in enumerate(scores) if not math.isnan(v)]
    if len(scored) < 2:
        return None
    best = max(scored, key=lambda i: (scores[i], -i))
    worst = min(scored, key=lambda i: (scores[i], i))
    return best, worst


def check_scores(total: Sequence[float], parts: dict[str, list[float]], names: dict[str, str],
                 rows: Sequence[Sample], k: int) -> dict[str, int]:
    """The number of completions each component scored NaN (components without any left out); raises
    :class:`NonFiniteScoreError` naming the component, its metric and the sample when a score is infinite, or when
    a total of finite scores is not finite. ``rows`` holds each completion's sample (``k`` a prompt)."""
    for key, values in parts.items():
        bad = next((i for i, v in enumerate(values) if math.isinf(v)), None)
        if bad is not None:
            raise NonFiniteScoreError(
                f"reward component {key} (metric {names.get(key, key)!r}) scored {values[bad]} for completion "
                f"{bad % k + 1} of {k} of sample {rows[bad].id!r}: an infinite score ranks nothing and is a bug in "
                f"the metric (a completion it cannot score is NaN); nothing was written")
    bad = next((i for i, v in enumerate(total) if math.isinf(v) or (math.isnan(v) and not any(
        math.isnan(values[i]) for values in parts.values()))), None)
    if bad is not None:
        raise NonFiniteScoreError(
            f"the reward of completion {bad % k + 1} of {k} of sample {rows[bad].id!r} is {total[bad]}, a weighted "
            f"sum of finite scores ({', '.join(f'{key} {values[bad]:g}' for key, values in parts.items())}) that "
            f"overflowed: lower the weights; nothing was written")
    counts = {key: sum(math.isnan(v) for v in values) for key, values in parts.items()}
    return {key: n for key, n in counts.items() if n}


def describe_counts(counts: dict[str, Any], min_margin: float) -> str:
    """The log line of :func:`build_preferences`' counts, e.g. ``11 pairs from 16 prompts (3 skipped: margin <= 0;
    2 skipped: fewer than 2 completions scored); 5 completions scored NaN by custom/odd; left out``."""
    skips = [f"{counts['skipped']} skipped: margin <= {min_margin:g}"]
    if counts["unscored_prompts"]:
        skips.append(f"{counts['unscored_prompts']} skipped: fewer than 2 completions scored")
    line = f"{counts['pairs']} pairs from {counts['prompts']} prompts ({'; '.join(skips)})"
    nan = ", ".join(f"{n} completion{'s' if n != 1 else ''} scored NaN by {key}"
                    for key, n in counts["nan_scored"].items())
    return f"{line}; {nan}; left out" if nan else line


@torch.no_grad()
def build_preferences(policy: Policy, samples: list[Sample], reward: Reward, cfg: PreferencesConfig, source: str,
                      progress: Optional[Callable[[int], None]] = None) -> tuple[list[Preference], dict[str, Any]]:
    """Pairs from ``cfg.samples_per_prompt`` completions of each chosen prompt; returns them and counts.

    ``source`` names the scoring (kept in each row's ``source``). Rows carry ``chosen_score`` and
    ``rejected_score`` (the reward's totals, :func:`~grueflow.io.rounded`). The counts: ``prompts``, ``pairs``,
    ``skipped`` (margin too small), ``unscored_prompts`` (fewer than two completions scored) and ``nan_scored``
    (component key -> completions it scored NaN, left out). An infinite score raises :class:`NonFiniteScoreError`.
    """
    k = cfg.samples_per_prompt
    prompts = choose_prompts(samples, cfg.n_prompts, cfg.seed)
    policy.model.eval()
    prefs: list[Preference] = []
    skipped = unscored = 0
    nan_scored: dict[str, int] = {}
    for start in range(0, len(prompts), cfg.batch_size):
        chunk = prompts[start:start + cfg.batch_size]
        rows = [s for s in chunk for _ in range(k)]
        completions = policy.sample(policy.encode([s.prompt for s in rows]), cfg.generation, group_size=k)
        texts = policy.decode(completions)
        scored = postprocess.apply(cfg.generation.post_processing, texts)  # pairs keep the sampled texts
        total, parts = reward([s.prompt for s in rows], scored, [s.references for s in rows], [s.meta for s in rows])
        for key, n in check_scores(total, parts, reward.names, rows, k).items():
            nan_scored[key] = nan_scored.get(key, 0) + n
        for j, sample in enumerate(chunk):
            scores, group = total[j * k:(j + 1) * k], texts[j * k:(j + 1) * k]
            chosen = best_and_worst(scores)
            if chosen is None:
                unscored += 1
                continue
            best, worst = chosen
            if scores[best] - scores[worst] <= cfg.min_margin or group[best] == group[worst]:
                skipped += 1
                continue
            prefs.append(Preference(sample.id, sample.prompt, group[best], group[worst],
                                    {"chosen_score": rounded(float(scores[best])),
                                     "rejected_score": rounded(float(scores[worst])), "source": source}))
        if progress:
            progress(len(chunk))
    counts = {"prompts": len(prompts), "pairs": len(prefs), "skipped": skipped, "unscored_prompts": unscored,
              "nan_scored": nan_scored}
    (log.warning if nan_scored else log.info)("%s", describe_counts(counts, cfg.min_margin))
    return prefs, counts
