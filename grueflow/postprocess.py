"""Post-processing of generated texts before they are scored, as RL4LMs' ``post_processing_fn``.

A generation config's ``post_processing`` names a registered function or a user function by import path
(:mod:`grueflow.plugins`): ``str -> str``, applied to every decoded generation before the reward (rollouts)
or the metrics (evaluation) see it; evaluation's predictions hold the processed texts, which are what was
scored.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from grueflow import plugins
from grueflow.config import ConfigError, PluginFailedError
from grueflow.io import DataError
from grueflow.metrics.sentences import split_sentences
from grueflow.registry import Registry

PostProcessor = Callable[[str], str]
POST_PROCESSORS: Registry[PostProcessor] = Registry("post-processor")


@POST_PROCESSORS.register("strip", "surrounding whitespace removed")
def strip(text: str) -> str:
    return text.strip()


@POST_PROCESSORS.register("first_line", "the first non-blank line, stripped (\"\" when there is none)")
def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@POST_PROCESSORS.register("three_sentence_summary", "the first three sentences, one per line (RL4LMs, CNN/DailyMail)")
def three_sentence_summary(text: str) -> str:
    """RL4LMs' ``three_sentence_summary``, with pysbd's sentence splitter for NLTK's punkt (no download)."""
    return "\n".join(split_sentences(text)[:3])


def resolve(name: str) -> PostProcessor:
    """The function ``name`` names: a registered id or an import path; ``ValueError`` (or
    :class:`~grueflow.registry.UnknownNameError`) naming the choices otherwise."""
    if plugins.is_import_path(name):
        function = plugins.load(name, "post_processing")
        if not callable(function):
            raise ValueError(f"post_processing {name!r} is not callable; it must be a function str -> str")
        return function
    return POST_PROCESSORS.get(name)


def apply(name: Optional[str], texts: Sequence[str]) -> list[str]:
    """``texts`` post-processed by ``name`` (None: unchanged). A function that returns anything but a str is a
    :class:`~grueflow.io.DataError` naming it; one that raises, a :class:`~grueflow.config.PluginFailedError`
    naming it and the text (1-based, in ``texts``' order), with its exception as the cause (grueflow's own one-line
    errors pass unchanged)."""
    if name is None:
        return list(texts)
    function = resolve(name)
    processed = []
    for number, text in enumerate(texts, 1):
        try:
            processed.append(function(text))
        except (ConfigError, DataError):
            raise
        except Exception as err:
            raise PluginFailedError(f"post_processing {name!r} failed on text {number}: {type(err).__name__}: "
                                    f"{err}") from err
    bad = [p for p in processed if not isinstance(p, str)]  # a list, not a None sentinel: None is a wrong result too
    if bad:
        raise DataError(f"post_processing {name!r} returned {type(bad[0]).__name__} {bad[0]!r}; it must return a str")
    return processed
