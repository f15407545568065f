"""Resumable checkpoints of a long stage in its resume folder (``<output>.resume``), newest resumed.

Layout: one subfolder per checkpoint, named by its unit and step (``iteration12/``, ``epoch2/``).
Each is written whole to a temporary folder and renamed into place (:func:`grueflow.io.atomic_dir`),
with ``checkpoint.json`` (``{"key": ..., "step": ...}``) written last inside it, so a folder that
a kill interrupted is never taken for a checkpoint. The key identifies the run (its resolved params,
input fingerprints and seed, see :func:`run_key`): a checkpoint of another run is never resumed,
and is deleted when this run writes its first one. The newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any, Callable, NamedTuple

from grueflow.io import atomic_dir, read_json, write_json

log = logging.getLogger(__name__)
MARKER = "checkpoint.json"


class Checkpoint(NamedTuple):
    step: int
    path: Path
    key: str


def run_key(*parts: Any) -> str:
    """sha256 of JSON-serialisable ``parts`` (resolved params as plain data, fingerprints, seed)."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True).encode()).hexdigest()


def complete(root: str | Path, unit: str) -> list[Checkpoint]:
    """The complete checkpoints under ``root`` (``<unit><step>/`` holding ``checkpoint.json``), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    pattern = re.compile(rf"{re.escape(unit)}(\d+)")
    found = []
    for folder in root.iterdir():
        match = pattern.fullmatch(folder.name)
        if match and (folder / MARKER).is_file():
            found.append(Checkpoint(int(match.group(1)), folder, read_json(folder / MARKER)["key"]))
    return sorted(found)


def latest(root: str | Path, unit: str, key: str) -> Path | None:
    """The newest complete checkpoint of the run ``key`` under ``root``, or None."""
    mine = [c for c in complete(root, unit) if c.key == key]
    return mine[-1].path if mine else None


def save(root: str | Path, unit: str, step: int, key: str, write: Callable[[Path], None], keep: int) -> Path:
    """Write checkpoint ``<root>/<unit><step>/`` with ``write(folder)``, atomically; then keep only this
    run's newest ``keep`` checkpoints (another run's, and folders a killed save left, are deleted)."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    path = Path(root) / f"{unit}{step}"
    with atomic_dir(path) as tmp:
        write(tmp)
        write_json(tmp / MARKER, {"key": key, "step": step})
    prune(root, unit, key, keep)
    return path


def prune(root: str | Path, unit: str, key: str, keep: int) -> None:
    """Delete all but run ``key``'s newest ``keep`` checkpoints, and unfinished ``.<unit>*.tmp`` folders."""
    mine = [c for c in complete(root, unit) if c.key == key]
    stale = [c.path for c in complete(root, unit) if c.key != key] + [c.path for c in mine[:-keep]]
    stale += [p for p in Path(root).glob(f".{unit}*.tmp") if p.is_dir()]
    for path in stale:
        log.debug("removing checkpoint %s", path)
        shutil.rmtree(path, ignore_errors=True)
