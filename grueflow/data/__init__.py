"""Samples and the datapool registry.

A datapool loader is a class with a frozen ``Args`` dataclass (its params, validated at parse
time) and ``build(args) -> Datapool``; a task file may name one of its own (:mod:`grueflow.registry`).
"""

import dataclasses
from typing import Any

from grueflow.data.sample import Datapool, Sample, read_split, write_datapool
from grueflow.registry import Registry


def check_datapool(component: Any) -> None:
    """Raise ``ValueError`` unless ``component`` is a datapool loader: a frozen dataclass ``Args`` and
    ``build(args) -> Datapool`` (a plugin named by import path or entry point)."""
    args, build = getattr(component, "Args", None), getattr(component, "build", None)
    if not dataclasses.is_dataclass(args) or not callable(build):
        raise ValueError(f"{component!r} is not a datapool loader: it needs a dataclass Args and build(args) -> "
                         f"Datapool")


DATAPOOLS: Registry = Registry("datapool", group="grueflow.datapools", check=check_datapool)

from grueflow.data import grue, hub, synthetic  # noqa: E402,F401  (registers the datapools)

__all__ = ["DATAPOOLS", "Datapool", "Sample", "read_split", "write_datapool"]
