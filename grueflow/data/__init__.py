"""Samples and the datapool registry.

A datapool loader is a class with a frozen ``Args`` dataclass (its params, validated at parse
time) and ``build(args) -> Datapool``; a task file may name one of its own (:mod:`grueflow.registry`).
A loader may also give ``meta_keys(args)``: every key its samples' ``meta`` can hold with ``args``
(:func:`datapool_meta_keys`), so that a task whose metric reads a key it never writes is refused when the
task file is parsed. Every built-in loader gives it; one that does not (a plugin's) is trusted to write
what the task's metrics read, which they check when they run.
"""

import dataclasses
from typing import Any, Optional

from grueflow.config import ConfigError, DatapoolConfig, PluginFailedError, check_args_types, typed_args
from grueflow.data.sample import Datapool, Sample, read_split, write_datapool
from grueflow.io import DataError
from grueflow.registry import Registry


def check_datapool(component: Any) -> None:
    """Raise ``ValueError`` unless ``component`` is a datapool loader: a frozen dataclass ``Args`` and
    ``build(args) -> Datapool`` (a plugin named by import path or entry point)."""
    args, build = getattr(component, "Args", None), getattr(component, "build", None)
    if not dataclasses.is_dataclass(args) or not callable(build):
        raise ValueError(f"{component!r} is not a datapool loader: it needs a dataclass Args and build(args) -> "
                         f"Datapool")
    check_args_types(args, getattr(component, "__name__", repr(component)))
    meta_keys = getattr(component, "meta_keys", None)
    if meta_keys is not None and not callable(meta_keys):
        raise ValueError(f"{component!r}.meta_keys is {meta_keys!r}; give a function meta_keys(args) -> the meta keys "
                         f"its samples can hold, or leave it out")


DATAPOOLS: Registry = Registry("datapool", group="grueflow.datapools", check=check_datapool)


def datapool_meta_keys(cfg: DatapoolConfig) -> Optional[frozenset[str]]:
    """Every key the ``meta`` of the samples of a parsed ``datapool`` section can hold (its loader's
    ``meta_keys(typed args)``; for ``custom``, its ``fields.meta``); None where the loader does not say (a plugin
    without ``meta_keys``): any key may then be there."""
    meta_keys = getattr(DATAPOOLS.get(cfg.id), "meta_keys", None)
    if meta_keys is None:
        return None
    keys = meta_keys(typed_args(cfg))
    if not (isinstance(keys, (tuple, list)) and all(isinstance(key, str) for key in keys)):
        raise ValueError(f"datapool {cfg.id!r}: meta_keys returned {keys!r}; give a tuple of meta key names, e.g. "
                         f"('label',), or () for none")
    return frozenset(keys)


def build_datapool(cfg: DatapoolConfig) -> Datapool:
    """The datapool of a parsed ``datapool`` section: its loader's ``build(typed args)``, unchecked
    (:func:`~grueflow.data.sample.write_datapool` checks it). grueflow's one-line errors (a ConfigError, a
    DataError), an OSError (a file, the disk, the hub) and a MemoryError pass unchanged; any other exception the
    loader raises (a plugin's own bug, a KeyError on a column) becomes a :class:`~grueflow.config.PluginFailedError`
    naming the datapool, with the exception as its cause: the stage prints the loader's traceback, then that line."""
    try:
        return DATAPOOLS.get(cfg.id).build(typed_args(cfg))
    except (ConfigError, DataError, OSError, MemoryError):
        raise
    except Exception as err:
        raise PluginFailedError(f"datapool {cfg.id!r} failed while building its samples: {type(err).__name__}: "
                                f"{err}") from err

from grueflow.data import grue, hub, synthetic  # noqa: E402,F401  (registers the datapools)

__all__ = ["DATAPOOLS", "Datapool", "Sample", "build_datapool", "datapool_meta_keys", "read_split", "write_datapool"]
