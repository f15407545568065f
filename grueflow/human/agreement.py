"""Inter-annotator agreement: Krippendorff's alpha, Cohen's kappa and Fleiss' kappa.

Each returns ``None`` where the statistic is undefined (no pairable unit, or no variation at all, so
the expected disagreement is 0) — a statistic that cannot be computed is missing, never 0.
"""

from __future__ import annotations

from collections import Counter
from itertools import permutations
from typing import Hashable, Literal, Sequence

Level = Literal["nominal", "ordinal", "interval"]
LEVELS = ("nominal", "ordinal", "interval")


def krippendorff_alpha(units: Sequence[Sequence[float]], level: Level = "interval") -> float | None:
    """Krippendorff's alpha over units (items), each the values its annotators gave (any number, missing = absent).

    Built on the coincidence matrix (Krippendorff 2011, "Computing Krippendorff's alpha-reliability"):
    ``o[c][k] = sum over units u of (ordered pairs of values (c, k) in u) / (m_u - 1)``, with ``m_u`` the
    number of values in ``u``; units with one value are not pairable and drop out. With ``n_c = sum_k o[c][k]``
    and ``n = sum_c n_c``: ``alpha = 1 - (n - 1) * sum o[c][k] d2(c, k) / sum n_c n_k d2(c, k)``.
    ``d2`` is ``(c - k)^2`` (interval), ``(sum_{g=c..k} n_g - (n_c + n_k) / 2)^2`` over the sorted observed
    values (ordinal), or ``[c != k]`` (nominal).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; valid levels: {', '.join(LEVELS)}")
    coincidence: Counter[tuple[float, float]] = Counter()
    for values in units:
        if len(values) < 2:
            continue
        weight = 1.0 / (len(values) - 1)
        for c, k in permutations(values, 2):
            coincidence[(c, k)] += weight
    if not coincidence:
        return None
    marginals: Counter[float] = Counter()
    for (c, _), count in coincidence.items():
        marginals[c] += count
    n = sum(marginals.values())
    delta = _distance(level, marginals)
    observed = sum(count * delta(c, k) for (c, k), count in coincidence.items())
    expected = sum(marginals[c] * marginals[k] * delta(c, k) for c in marginals for k in marginals)
    if expected == 0:
        return None
    return 1.0 - (n - 1) * observed / expected


def _distance(level: Level, marginals: Counter[float]):
    if level == "interval":
        return lambda c, k: (c - k) ** 2
    if level == "nominal":
        return lambda c, k: float(c != k)
    ordered = sorted(marginals)
    cumulative = {}
    running = 0.0
    for value in ordered:
        running += marginals[value]
        cumulative[value] = running  # n_1 + ... + n_value

    def ordinal(c: float, k: float) -> float:
        low, high = min(c, k), max(c, k)
        between = cumulative[high] - cumulative[low] + marginals[low]  # sum of n_g for low <= g <= high
        return (between - (marginals[c] + marginals[k]) / 2) ** 2

    return ordinal


def cohen_kappa(first: Sequence[Hashable], second: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two annotators' labels on the same items (``first[i]`` and ``second[i]`` label item i).

    ``kappa = (p_o - p_e) / (1 - p_e)``: ``p_o`` the share of items they agree on, ``p_e = sum_c p1(c) p2(c)``
    from each annotator's own label frequencies (Cohen 1960).
    """
    if len(first) != len(second):
        raise ValueError(f"cohen_kappa needs the same items from both annotators: {len(first)} vs {len(second)} labels")
    if not first:
        return None
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second)) / n
    freq_a, freq_b = Counter(first), Counter(second)
    expected = sum(freq_a[c] * freq_b[c] for c in freq_a) / (n * n)
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def fleiss_kappa(items: Sequence[Sequence[Hashable]]) -> float | None:
    """Fleiss' kappa over items, each the labels its annotators gave (items with one label drop out).

    Per item, ``P_i = (sum_j n_ij^2 - n_i) / (n_i (n_i - 1))`` (share of agreeing annotator pairs);
    ``P_bar`` is their mean; ``p_j`` the share of all labels in category j and ``P_e = sum_j p_j^2``;
    ``kappa = (P_bar - P_e) / (1 - P_e)`` (Fleiss 1971). With the same number of annotators on every item
    this is Fleiss' statistic exactly; with varying numbers ``P_i`` uses each item's own ``n_i``.
    """
    rated = [list(labels) for labels in items if len(labels) >= 2]
    if not rated:
        return None
    agreement = []
    totals: Counter[Hashable] = Counter()
    for labels in rated:
        counts = Counter(labels)
        n_i = len(labels)
        agreement.append((sum(v * v for v in counts.values()) - n_i) / (n_i * (n_i - 1)))
        totals.update(counts)
    p_bar = sum(agreement) / len(agreement)
    all_labels = sum(totals.values())
    p_e = sum((v / all_labels) ** 2 for v in totals.values())
    if p_e == 1:
        return None
    return (p_bar - p_e) / (1 - p_e)
