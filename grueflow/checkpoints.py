"""Resumable checkpoints of a long stage in its resume folder (``<output>.resume``), newest resumed.

Layout: one subfolder per checkpoint, named by its unit and step (``iteration12/``, ``epoch2/``).
Each is written whole to a temporary folder and renamed into place (:func:`grueflow.io.atomic_dir`),
with ``checkpoint.json`` (``{"key": ..., "step": ..., "files": {name: sha256}}``, and ``"meta"``: facts about how
the run went that are no part of its state, read back with :func:`meta`) written last inside it, so a
folder that a kill interrupted is never taken for a checkpoint, and one whose files changed since (bit flips,
truncation) is found out before it is resumed: the run falls back to the checkpoint before it, or starts
afresh, and says so in one line. The same holds for what a resume takes over from the resume folder besides
the checkpoint folders (:class:`Carried`: evaluation during training's curve, predictions and kept policies):
their digests are recorded in the marker too (``"carried"``), and a checkpoint whose carried files are missing,
changed or joined by others is damaged alike. The key identifies the run (its resolved params, input
fingerprints and seed, the stage's code and the package versions, see :func:`run_key`): a checkpoint of another
run, or of other code, is never resumed, and is deleted when this run writes its first one. The newest ``keep``
checkpoints are kept.

What a checkpoint holds is the trainer's business; :class:`Checkpointed` writes ``save_checkpoint`` and
``resume`` once over a trainer's ``save_to`` / ``load``, and :func:`save_weights` / :func:`save_state` are
the two files most of them write: the trained weights (safetensors; the adapter alone under LoRA) and the
rest of the state (optimiser, schedule, global RNGs, progress) as tensors and plain values, so it loads with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import random
import re
import shutil
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Mapping, NamedTuple, Optional, Protocol, Sequence

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from grueflow.codedeps import import_closure
from grueflow.io import DataError, atomic_dir, fingerprint, package_versions, read_json, write_json
from grueflow.models.lora import ADAPTER_FILE, is_lora, load_trainable_state, trainable_state

log = logging.getLogger(__name__)
MARKER = "checkpoint.json"
STATE_FILE = "trainer_state.pt"  # everything besides the weights: tensors and plain values only
WEIGHTS_FILE = "model.safetensors"  # every weight; under LoRA the adapter's ADAPTER_FILE instead


def epoch_order(n: int, stream: str, seed: int, epoch: int) -> list[int]:
    """The order of ``n`` training examples in ``epoch`` (0-based): a permutation drawn from ``(stream, seed,
    epoch)`` alone, so that a run resumed at any epoch (or mid-epoch) draws the orders an uninterrupted run draws.
    ``stream`` names the trainer (``supervised``, ``dpo``, ``reward_model``) so that they draw apart."""
    order = list(range(n))
    random.Random(f"{stream}/{seed}/{epoch}").shuffle(order)
    return order


@dataclass
class EpochState:
    """Progress besides the weights of a trainer checkpointed by epoch: epochs done and the curve (a row each)."""

    epoch: int = 0
    curve: list[dict[str, float]] = field(default_factory=list)


class Checkpoint(NamedTuple):
    step: int
    path: Path
    key: str


class Carried(Protocol):
    """Files besides its checkpoint folders that a run resumed from ``<unit><k>/`` takes over from the resume folder
    (evaluation during training's curve, predictions and kept policies: :class:`grueflow.validation.Validation`)."""

    def carried_digests(self, step: int) -> dict[str, str]:
        """sha256 of each file a run resumed at ``step`` takes over, by path relative to the resume folder (POSIX
        separators); a file that is there counts, whether or not it should be."""


class NonFiniteLossError(RuntimeError):
    """A NaN or infinite train loss, gradient norm or val loss of an epoch-checkpointed trainer (the warm start,
    the reward model): training stops before that optimiser step (or, for a val loss, before that epoch is
    checkpointed), so no NaN weights are saved or handed on. ``epoch`` is the 1-based epoch under way."""

    def __init__(self, what: str, epoch: int, where: str, learning_rate: float) -> None:
        kept = ("the weights were not updated with it" if what != "val loss"
                else "this epoch's weights were not checkpointed")
        super().__init__(f"non-finite {what} at epoch {epoch}{where}: {kept}; training diverged: lower learning_rate "
                         f"(it is {learning_rate:g})")
        self.what, self.epoch = what, epoch

    def stop_line(self, resume_dir: str | Path) -> str:
        """The stage's last line for this stop (exit code 1, as RL's non-finite stop): the error, then which
        checkpoint stays in ``resume_dir`` (a trainer checkpoints after every epoch)."""
        kept = f"the checkpoint of epoch {self.epoch - 1} stays in" if self.epoch > 1 else "nothing was checkpointed in"
        return f"error: {self}; {kept} {resume_dir}"


CADENCE_KEYS = ("checkpoint_every", "keep_checkpoints")  # how often a run checkpoints, how many it keeps


def keyed_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A method config as data (``to_dict``), for :func:`run_key`, without :data:`CADENCE_KEYS`: how often a run
    checkpoints and how many checkpoints it keeps change no weight, so a rerun that changes them resumes."""
    return {k: v for k, v in settings.items() if k not in CADENCE_KEYS}


def code_identity(script: str | Path) -> dict[str, Any]:
    """What computes a stage's run besides its params and inputs: the sha256 of its CLI file ``script``
    (``<checkout>/stages/<stage>.py``) and of every grueflow file it imports, the code both engines track as the
    stage's dependencies, by path relative to the checkout; and :func:`grueflow.io.package_versions`."""
    script = Path(script).resolve()
    root = script.parents[1]
    files = [script, *(root / name for name in import_closure(script, root))]
    return {"code": {f.relative_to(root).as_posix(): fingerprint(f) for f in files}, "packages": package_versions()}


def run_key(*parts: Any, script: str | Path | None = None) -> str:
    """sha256 of JSON-serialisable ``parts`` (resolved params as plain data, fingerprints, seed) and, for a stage's
    run, of :func:`code_identity` of its CLI file ``script``: a run killed and rerun after a code change (a pulled
    fix, a torch upgrade) must start afresh, since checkpoints of the old code and epochs of the new one would
    make weights that neither version computes."""
    identity = [code_identity(script)] if script is not None else []
    return hashlib.sha256(json.dumps(list(parts) + identity, sort_keys=True).encode()).hexdigest()


def _marker(folder: Path) -> dict[str, Any] | None:
    """A checkpoint's ``checkpoint.json``, or None when it is missing or not a whole JSON object with a key."""
    try:
        marker = read_json(folder / MARKER)
    except (OSError, ValueError):  # missing, truncated or not UTF-8
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("key"), str) else None


def _step(folder: Path) -> int | None:
    """The step a checkpoint folder's name ``<unit><step>`` holds."""
    digits = re.search(r"(\d+)$", folder.name)
    return int(digits.group(1)) if digits else None


def complete(root: str | Path, unit: str) -> list[Checkpoint]:
    """The complete checkpoints under ``root`` (``<unit><step>/`` holding a readable ``checkpoint.json``), oldest
    first. A folder without a readable marker is damaged (a save renames its folder into place marker included):
    :func:`latest` reports and removes it."""
    root = Path(root)
    if not root.is_dir():
        return []
    pattern = re.compile(rf"{re.escape(unit)}(\d+)")
    found = []
    for folder in root.iterdir():
        match = pattern.fullmatch(folder.name)
        marker = _marker(folder) if match else None
        if marker is not None:
            found.append(Checkpoint(int(match.group(1)), folder, marker["key"]))
    return sorted(found)


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` but the marker, by path relative to it."""
    return {str(f.relative_to(folder)): fingerprint(f) for f in sorted(folder.rglob("*"))
            if f.is_file() and f.name != MARKER}


JSON_TYPES = {str: "string", float: "number", bool: "boolean", list: "array", dict: "object"}  # as JSON names them


def damage(folder: Path, carried: Optional[Carried] = None) -> str | None:
    """Why checkpoint ``folder`` cannot be trusted (a damaged marker, a missing, extra or changed file), or None.
    A checkpoint written without digests is trusted as it is. With ``carried``, the files a resume from it takes
    over from the resume folder are checked against the digests its marker holds of them (none recorded: damage,
    since nothing then vouches for them)."""
    marker = _marker(folder)
    if marker is None:
        return f"{MARKER} is missing or damaged"
    step = marker.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        kind = JSON_TYPES.get(type(step), type(step).__name__)
        return f"{MARKER}'s step is {json.dumps(step)} (a JSON {kind}), not an integer"
    if step is not None and step != _step(folder):
        return f"{MARKER} is step {marker['step']}'s, not {folder.name}'s (a folder copied or renamed)"
    expected = marker.get("files")
    if expected is None:
        return None
    if not isinstance(expected, dict):
        return f"{MARKER}'s digests are not a mapping of file to digest"
    problem = _compare(expected, digests(folder), "", "was not written by the checkpoint")
    if problem is not None or carried is None:
        return problem
    recorded = marker.get("carried")
    if not isinstance(recorded, dict):
        return f"{MARKER} holds no digests of the files a resume from it takes over from the resume folder"
    return _compare(recorded, carried.carried_digests(_step(folder) or 0), f" in {folder.parent}, which a resume "
                    f"from {folder.name} takes over,", f"was not there when {folder.name} was written")


def _compare(expected: dict[str, Any], found: dict[str, str], where: str, extra: str) -> str | None:
    """The first file (by name) of ``expected`` (name -> digest) and ``found`` that is missing, extra or changed,
    and how, or None; ``where`` follows the file's name, ``extra`` says what an extra file is."""
    for name in sorted(set(expected) | set(found)):
        if name not in found:
            return f"{name}{where} is missing"
        if name not in expected:
            return f"{name}{where} {extra}"
        if found[name] != expected[name]:
            return f"{name}{where} does not match its digest (truncated or corrupted)"
    return None


def latest(root: str | Path, unit: str, key: str, carried: Optional[Carried] = None) -> Path | None:
    """The newest intact checkpoint of the run ``key`` under ``root``, or None (start afresh).

    A damaged checkpoint (its files, and with ``carried`` the files a resume from it takes over from ``root``,
    checked against the digests its marker holds, see :func:`save` and :func:`damage`) is removed, with one
    warning line naming it, what is wrong and what the run falls back to: the checkpoint
    before it, or a fresh start. Checkpoints of another key only (another configuration of the run) are named in
    one warning line: the run starts afresh, and :func:`save` deletes them at its first checkpoint.
    """
    root = Path(root)
    damaged = [p for p in root.glob(f"{unit}*") if re.fullmatch(rf"{re.escape(unit)}\d+", p.name)
               and p.is_dir() and _marker(p) is None]  # a save renames its folder in marker included: none is damage
    found = complete(root, unit)
    mine = [c.path for c in found if c.key == key]
    others = [c.path.name for c in found if c.key != key]
    if others and not mine:
        log.warning("the checkpoints in %s (%s) are of another configuration of this run: a setting, an input (data, "
                    "a model, a plugin's code or a file its args name), the seed, the stage's code or a package "
                    "version changed since they were written, so it starts afresh, and they are deleted when it "
                    "writes its first checkpoint; to resume them, restore what changed", root, ", ".join(others))
    candidates = sorted(mine + damaged, key=lambda p: int(p.name[len(unit):]), reverse=True)
    for i, path in enumerate(candidates):
        problem = damage(path, carried)
        if problem is None:
            return path
        rest = [p for p in candidates[i + 1:] if p not in damaged]
        log.warning("checkpoint %s is damaged (%s); removing it and %s", path, problem,
                    f"falling back to {rest[0]}" if rest else "starting afresh")
        shutil.rmtree(path, ignore_errors=True)
    return None


LOCK = ".lock"  # held (flock) by the one process that trains into a resume folder


def claim(root: str | Path, unit: str, own: Sequence[str] = ()) -> IO[str]:
    """Make ``root`` this process's resume folder for ``unit`` checkpoints; returns the open lock file, held
    until it is closed (or the process ends).

    A resume folder is deleted when its run finishes, so it may hold only what runs write there: checkpoints
    ``<unit><k>``, their temporary folders, the lock, the names in ``own`` and ``nonfinite_*.json`` dumps.
    Anything else, a file at ``root``, or another live process training into it, is a :class:`DataError`
    naming it: two writers would delete each other's checkpoints, and a shared folder would be deleted. Its advice
    is to move what is in the way, never to give another folder: under Snakemake the folder is the rule's
    (``<output>.resume``), not one the user gave.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise DataError(f"--resume-dir {root} is a file, where the run keeps its checkpoints in a folder (deleted "
                        f"when the run finishes); move the file {root} elsewhere (or delete it), and rerun")
    root.mkdir(parents=True, exist_ok=True)
    unit_ = re.escape(unit)
    names = [rf"{unit_}\d+", rf"\.{unit_}\d+\..+\.(tmp|old)", r"nonfinite_\w+\.json", re.escape(LOCK),
             *map(re.escape, own)]
    ours = re.compile("|".join(f"(?:{name})" for name in names))
    foreign = sorted(p.name for p in root.iterdir() if not ours.fullmatch(p.name))
    if foreign:
        named = ", ".join(name if name.isprintable() else repr(name) for name in foreign[:3]) + \
            (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise DataError(f"--resume-dir {root} holds {named}, which no training run wrote, and a resume folder is "
                        f"deleted when its run finishes; move {'it' if len(foreign) == 1 else 'them'} out of {root}, "
                        f"and rerun")
    handle = open(root / LOCK, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DataError(f"another process is training into the resume folder {root}; wait for it to finish (or "
                        f"stop it) before running the same stage again") from None
    return handle


def save(root: str | Path, unit: str, step: int, key: str, write: Callable[[Path], None], keep: int,
         carried: Optional[Carried] = None, meta: Optional[Mapping[str, Any]] = None) -> Path:
    """Write checkpoint ``<root>/<unit><step>/`` with ``write(folder)``, atomically, its marker holding the digests
    of its files and of the files ``carried`` says a resume at ``step`` takes over from ``root``, and ``meta`` (plain
    JSON data, see :func:`meta`) where given; then keep only this run's newest ``keep`` checkpoints (another run's,
    and folders a killed save left, are deleted)."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    path = Path(root) / f"{unit}{step}"
    with atomic_dir(path) as tmp:
        write(tmp)
        marker = {"key": key, "step": step, "files": digests(tmp)}
        if carried is not None:
            marker["carried"] = carried.carried_digests(step)
        if meta:
            marker["meta"] = dict(meta)
        write_json(tmp / MARKER, marker)
    prune(root, unit, key, keep)
    return path


def meta(folder: str | Path) -> dict[str, Any]:
    """The ``meta`` checkpoint ``folder``'s marker holds (:func:`save`): how the run that wrote it went (e.g. the
    thread count of each of its parts, :class:`grueflow.training.TrainingRun`); empty where it holds none (a
    checkpoint written without it) or its marker is unreadable."""
    marker = _marker(Path(folder))
    found = marker.get("meta") if marker is not None else None
    return dict(found) if isinstance(found, dict) else {}


def prune(root: str | Path, unit: str, key: str, keep: int) -> None:
    """Delete all but run ``key``'s newest ``keep`` checkpoints (unfinished ones are
    :func:`~grueflow.io.atomic_dir`'s to clean)."""
    mine = [c for c in complete(root, unit) if c.key == key]
    stale = [c.path for c in complete(root, unit) if c.key != key] + [c.path for c in mine[:-keep]]
    for path in stale:
        log.debug("removing checkpoint %s", path)
        shutil.rmtree(path, ignore_errors=True)


def save_weights(model: Any, folder: str | Path) -> None:
    """The weights a resumed run needs into ``folder``: the adapter under LoRA, else every weight (tied ones once)."""
    folder = Path(folder)
    if is_lora(model):
        save_file(trainable_state(model), str(folder / ADAPTER_FILE))
    else:
        save_model(model, str(folder / WEIGHTS_FILE))


def load_weights(model: Any, folder: str | Path) -> None:
    """Inverse of :func:`save_weights`; strict: a missing or unexpected weight raises."""
    folder = Path(folder)
    if is_lora(model):
        load_trainable_state(model, load_file(str(folder / ADAPTER_FILE)))
    else:
        load_model(model, str(folder / WEIGHTS_FILE))


def save_state(folder: str | Path, state: dict[str, Any]) -> None:
    """``state`` (tensors and plain values: optimiser and RNG states, progress, the curve) into ``folder``."""
    torch.save(state, Path(folder) / STATE_FILE)


def load_state(folder: str | Path) -> dict[str, Any]:
    """Inverse of :func:`save_state` (``weights_only``: nothing in the file is executed)."""
    return torch.load(Path(folder) / STATE_FILE, weights_only=True)


class Checkpointed(ABC):
    """``save_checkpoint`` and ``resume`` of a trainer whose checkpoints are ``<resume dir>/<unit><step>/``.

    A subclass names its ``unit`` (``epoch``, ``step``) and says how many are done (:meth:`checkpoint_step`),
    what a checkpoint holds (:meth:`save_to`) and how to continue from one (:meth:`load`); ``keep`` is how
    many of the newest checkpoints stay.
    """

    unit: str
    keep: int = 1

    @abstractmethod
    def checkpoint_step(self) -> int:
        """The units done so far: the number in the checkpoint's folder name."""

    @abstractmethod
    def save_to(self, folder: Path, key: str) -> None:
        """Write everything a resumed run needs into the (new, empty) ``folder``."""

    @abstractmethod
    def load(self, folder: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save_to`."""

    def save_checkpoint(self, resume_dir: str | Path, key: str, carried: Optional[Carried] = None,
                        meta: Optional[Mapping[str, Any]] = None) -> Path:
        """Add ``<unit><step>/`` to ``resume_dir`` (atomically, with the digests of what ``carried`` says a resume
        takes over, and ``meta`` in its marker), keeping the newest ``keep``."""
        return save(resume_dir, self.unit, self.checkpoint_step(), key, lambda folder: self.save_to(folder, key),
                    keep=self.keep, carried=carried, meta=meta)

    def resume(self, resume_dir: str | Path, key: str, carried: Optional[Carried] = None) -> Path | None:
        """Load run ``key``'s newest intact checkpoint in ``resume_dir`` (its ``carried`` files included); returns
        it, or None if there is none."""
        path = latest(resume_dir, self.unit, key, carried)
        if path is not None:
            self.load(path)
        return path
