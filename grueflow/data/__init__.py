"""Samples and the datapool registry.

A datapool loader is a class with a frozen ``Args`` dataclass (its params, validated at parse
time) and ``build(args) -> Datapool``.
"""

from grueflow.data.sample import Datapool, Sample, read_split, write_datapool
from grueflow.registry import Registry

DATAPOOLS: Registry = Registry("datapool")

from grueflow.data import grue, hub, synthetic  # noqa: E402,F401  (registers the datapools)

__all__ = ["DATAPOOLS", "Datapool", "Sample", "read_split", "write_datapool"]
