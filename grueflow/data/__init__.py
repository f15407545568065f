"""Samples and the datapool registry.

A datapool loader is a class with a frozen ``Args`` dataclass (its params, validated at parse
time) and ``build(args) -> Datapool``; a task file may name one of its own (:mod:`grueflow.registry`).
"""

import dataclasses
from typing import Any

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


DATAPOOLS: Registry = Registry("datapool", group="grueflow.datapools", check=check_datapool)


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

__all__ = ["DATAPOOLS", "Datapool", "Sample", "build_datapool", "read_split", "write_datapool"]
