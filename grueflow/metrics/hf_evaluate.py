"""Every grueflow metric through the Hugging Face ``evaluate`` API, offline.

Either instantiate :class:`GrueflowMetric` with the metric id as ``config_name``, or load this file
as a local ``evaluate`` module (nothing is downloaded)::

    import evaluate
    chrf = evaluate.load("path/to/grueflow/metrics/hf_evaluate.py", "chrf")
    chrf.compute(predictions=["a cat ."], references=[["the cat ."]], args={"lowercase": True})

``compute`` returns the metric's corpus scores under their ``<category>/<score>`` keys.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import datasets
import evaluate

from grueflow.config import parse
from grueflow.metrics import METRICS, MetricContext


class GrueflowMetric(evaluate.Metric):
    """An ``evaluate.Metric`` over the grueflow registry; ``config_name`` is the metric id (e.g. ``"chrf"``)."""

    def _info(self) -> evaluate.MetricInfo:
        METRICS.get(self.config_name)  # an unknown id fails here, listing the valid ids
        return evaluate.MetricInfo(
            description=METRICS.describe()[self.config_name],
            citation="",
            inputs_description="predictions: list of strings; references: list of lists of strings; optional "
                               "prompts (list of strings), meta (list of dicts) and args (the metric's Args as a dict)",
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions: Sequence[str], references: Sequence[Sequence[str]],
                 prompts: Optional[Sequence[str]] = None, meta: Optional[Sequence[dict[str, Any]]] = None,
                 args: Optional[dict[str, Any]] = None) -> dict[str, float]:
        metric = METRICS.get(self.config_name)
        fn = metric.build(parse(metric.Args, dict(args or {}), f"{self.config_name} args"), MetricContext())
        n = len(predictions)
        result = fn(list(prompts or [""] * n), list(predictions), [list(r) for r in references], list(meta or [{}] * n))
        return dict(result.corpus)
