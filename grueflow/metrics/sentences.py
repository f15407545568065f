"""Sentence splitting that needs no downloaded data: pysbd's rule-based segmenter (its rules ship in the wheel).

NLTK's punkt would need ``nltk.download("punkt_tab")`` at run time, which offline machines cannot do.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from grueflow.metrics import require


@lru_cache(maxsize=1)
def _segmenter() -> Any:
    return require("pysbd", "sentence splitting", "pysbd").Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, empty ones dropped; "" gives []."""
    if not text.strip():
        return []
    return [s.strip() for s in _segmenter().segment(text) if s.strip()]
