"""Human-evaluation batches: Likert items (one per sample and method) and blinded pairwise items.

A batch folder holds:

* ``batch.json`` — the manifest: kind (``likert`` | ``pairwise``), the task whose predictions it rates (``null``
  where the export could not tell), criteria set, criteria, scale, seed; a pairwise batch's also counts the shared
  samples left out because both systems gave the same completion (``identical_pairs_left_out``);
* ``items.jsonl`` — the items as plain text (what the local annotation page serves);
* ``items.csv`` — the upload for a crowdsourcing platform, in RL4LMs' column layout
  (Likert: ``prompt, machine_completion, algorithm``; pairwise: ``concept``/``prompt, choice_A, choice_B,
  choice_A_id, choice_B_id``) plus ``item_id``; every value is HTML-escaped, because platforms such as
  MTurk put a CSV value into the ``${column}`` placeholder as it is (RL4LMs' dialogue CSV relies on that to
  colour the turns with ``<font>`` tags), and model text is untrusted;
* ``template.html`` — the platform template (see :mod:`grueflow.human.templates`).

Every batch has a tag (:func:`batch_tag`, eight hex digits over its content) that each of its item ids carries
(``P<tag>-00001``...): the batch's identity, recorded in its folder by ``items.jsonl``.

Pairwise batches hide the systems: each choice carries an opaque id, ``<tag>-<16 random hex digits>``, and the
key (opaque id → system) is written to a separate file that annotators never see (:func:`write_batch`'s
``key_path``). The key file is ``{"batch_tag": <tag>, "ids": {opaque id: system}}``: it names the batch it
was written with, and an import refuses a key of another batch (:func:`read_key`).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import html
import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from grueflow import io
from grueflow.keep import batch_copies_text, cached_link, copies_of, copy_root, keep_batch, keep_key
from grueflow.registry import UnknownNameError
from grueflow.human.criteria import CRITERIA, SCALE_MAX, SCALE_MIN, CriteriaSet, Criterion

Kind = Literal["likert", "pairwise"]
KINDS = ("likert", "pairwise")
MANIFEST = "batch.json"
ITEMS = "items.jsonl"
UPLOAD = "items.csv"
TEMPLATE = "template.html"
LIKERT_COLUMNS = ("prompt", "machine_completion", "algorithm")
LABEL_COLUMNS = ("algorithm",)  # upload columns that label an item for the analysis (no template shows them):
# an import takes them from the batch (by item id), so a requester may blind or clear them before upload
PAIRWISE_COLUMNS = ("choice_A", "choice_B", "choice_A_id", "choice_B_id")
PROMPT_COLUMNS = ("prompt", "concept")  # RL4LMs' CommonGen pairwise CSV calls the prompt "concept"
KEY_TAG = "batch_tag"  # the key file's fields: the tag of the batch it was written with, and opaque id -> system
KEY_IDS = "ids"
ITEM_ID = re.compile(r"[LP](?P<tag>[0-9a-f]{8})-\d{5,}")  # L<tag>-00001 (Likert), P<tag>-00001 (pairwise)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prediction:
    """One system's output on one sample: the rows of ``predictions.jsonl`` reduced to what people see."""

    id: str
    prompt: str
    generation: str


@dataclass(frozen=True)
class Batch:
    """A human-evaluation batch. ``items`` are dicts with ``item_id``, ``sample_id`` and the CSV columns;
    ``folder`` is where :func:`read_batch` read it from (None for a batch made in memory);
    ``identical_pairs_left_out`` counts a pairwise batch's shared samples that have no item because both systems
    gave the same completion (0 for a Likert batch); ``task`` is the task whose predictions the batch rates
    (:func:`task_of_paths`), None where nothing tells."""

    kind: Kind
    criteria_set: str
    seed: int
    items: tuple[dict[str, str], ...]
    prompt_column: str = "prompt"
    folder: Path | None = field(default=None, compare=False, repr=False)
    identical_pairs_left_out: int = 0
    task: str | None = None
    _by_id: dict[str, dict[str, str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {item["item_id"]: item for item in self.items})

    @property
    def spec(self) -> CriteriaSet:
        return CRITERIA.get(self.criteria_set)

    @property
    def criteria(self) -> tuple[Criterion, ...]:
        return self.spec.criteria

    @property
    def columns(self) -> tuple[str, ...]:
        if self.kind == "likert":
            return ("item_id", *LIKERT_COLUMNS)
        return ("item_id", self.prompt_column, *PAIRWISE_COLUMNS)

    @property
    def tag(self) -> str | None:
        """The batch's identity: the :func:`batch_tag` that every item id carries (``P<tag>-00001``); None for a
        batch exported before item ids carried one (``P00001``)."""
        return tag_of(self.items[0]["item_id"]) if self.items else None

    def item(self, item_id: str) -> dict[str, str] | None:
        return self._by_id.get(item_id)

    def opaque_ids(self) -> set[str]:
        """The opaque ids of a pairwise batch's choices (what its key must map)."""
        return {item[f"choice_{side}_id"] for item in self.items for side in "AB"}

    def head(self, n: int) -> "Batch":
        """The first ``n`` items (after the seeded shuffle): a smaller batch for a smaller budget."""
        return Batch(self.kind, self.criteria_set, self.seed, self.items[:n], self.prompt_column,
                     identical_pairs_left_out=self.identical_pairs_left_out, task=self.task)


def task_of_paths(paths: Sequence[str | Path]) -> set[str]:
    """The tasks that evaluate outputs' paths name: ``<task>`` of each ``results/eval/<task>/<method>/seed<k>``
    (the pipeline's layout, ``grueflow.pipeline.EVAL``) in a path, the folder or its ``predictions.jsonl``, anywhere
    in it (an absolute path too); a path in another layout names none. Several tasks mean predictions of
    several tasks."""
    tasks = set()
    for path in paths:
        parts = Path(path).parts
        for i in range(len(parts) - 4):
            if parts[i:i + 2] == ("results", "eval") and re.fullmatch(r"seed\d+", parts[i + 4]):
                tasks.add(parts[i + 2])
    return tasks


def read_predictions(path: str | Path) -> list[Prediction]:
    """The ``id``, ``prompt`` and ``generation`` of each row of an evaluate stage's ``predictions.jsonl``; a file in
    a stage folder that no longer matches its ``stage.json`` (cut or edited) is a MissingDataError. A folder holding
    another run's output (copied or linked there: :func:`grueflow.io.copy_note`) is read, with a warning naming
    both, no stale check having run first; the export stage refuses one whose record names a relative path before
    it gets here (:func:`grueflow.stage.check_inputs`)."""
    io.refuse_special_file(path, "give an evaluate output's predictions.jsonl (or its folder)")
    if not Path(path).is_file():
        raise io.MissingDataError(f"{path} does not exist; give an evaluate output's predictions.jsonl (or its folder)")
    _warn_if_copied(path)
    io.check_stage_output(path)  # as its evaluate stage's stage.json recorded it: a cut or edited file is refused
    rows = io.read_jsonl(path)
    out = []
    for number, row in enumerate(rows, start=1):
        missing = [k for k in ("id", "prompt", "generation") if not isinstance(row.get(k), str)]
        if missing:
            raise io.DataError(f"{path}: row {number} lacks the text field(s) {missing}; predictions.jsonl rows "
                               f"(written by stages/evaluate.py) have id, prompt and generation")
        out.append(Prediction(row["id"], row["prompt"], row["generation"]))
    return out


def _warn_if_copied(path: str | Path) -> None:
    """Log a warning where ``path`` lies in another run's stage folder copied or linked to where it is
    (:func:`grueflow.io.copy_note`): its content is that run's, whatever its path names."""
    note = io.copy_note(path)
    if note:
        log.warning("%s", note)


def _check_ids(method: str, predictions: Sequence[Prediction]) -> None:
    seen: set[str] = set()
    for p in predictions:
        if p.id in seen:
            raise io.DataError(f"method {method!r}: sample id {p.id!r} appears twice; each sample is one item")
        seen.add(p.id)


def likert_batch(predictions: Mapping[str, Sequence[Prediction]], criteria_set: str, seed: int) -> Batch:
    """One Likert item per (method, sample), shuffled with ``seed`` so that methods interleave.

    ``predictions`` maps a method name (the ``algorithm`` column) to its predictions.
    """
    CRITERIA.get(criteria_set)
    if not predictions:
        raise ValueError("likert_batch needs the predictions of at least one method")
    items = []
    for method, rows in predictions.items():
        _check_ids(method, rows)
        items += [{"sample_id": p.id, "prompt": p.prompt, "machine_completion": p.generation, "algorithm": method}
                  for p in rows]
    random.Random(seed).shuffle(items)
    tag = batch_tag("likert", criteria_set, seed, items)
    numbered = tuple({"item_id": f"L{tag}-{i:05d}", **item} for i, item in enumerate(items, start=1))
    return Batch("likert", criteria_set, seed, numbered)


def tag_of(item_id: str) -> str | None:
    """The batch tag an item id carries (``P<tag>-00001`` -> ``<tag>``), or None."""
    match = ITEM_ID.fullmatch(item_id)
    return match["tag"] if match else None


def batch_tag(*content: Any) -> str:
    """Eight hex digits of sha256 over a batch's content: every item id of a batch carries it, so that the results
    of another batch (whose ids would otherwise repeat ``L00001``...) match no item of this one; a pairwise
    batch's opaque ids and key carry it too."""
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:8]


def pairwise_batch(first: tuple[str, Sequence[Prediction]], second: tuple[str, Sequence[Prediction]],
                   criteria_set: str, seed: int, prompt_column: str = "prompt") -> tuple[Batch, dict[str, str]]:
    """Blinded A/B items on the samples both methods answered; returns the batch and its key (opaque id → method).

    A sample whose two completions are the same text (after whitespace normalisation) gets no item: an annotator
    could only tie it, and an answer would count as a win between identical texts. The batch counts those
    samples (``identical_pairs_left_out``, written to ``batch.json``) and one log line says how many. When that
    is every shared sample (systems that both produce nothing, say), the batch keeps them all, with a warning:
    an empty batch has nothing to annotate or import, and the import counts those items in no win rate.

    The batch's tag is :func:`batch_tag` over everything the batch and key are made of (kind, criteria set,
    seed, prompt column, both method names, and each shared sample's id, prompt and two generations, in the
    order given). The order of the items, which method is A, and the opaque ids come from a generator seeded
    with the seed and the tag: the same seed and predictions give the same batch. An opaque id is
    ``<tag>-<16 random hex digits>``, fresh for every choice of every item, so it carries no system name, no
    id repeats a system across items, and two batches with different content never share an id.
    """
    CRITERIA.get(criteria_set)
    if prompt_column not in PROMPT_COLUMNS:
        raise ValueError(f"prompt_column {prompt_column!r} is not one of {PROMPT_COLUMNS}")
    (name_a, rows_a), (name_b, rows_b) = first, second
    if name_a == name_b:
        raise ValueError(f"a pairwise batch compares two different methods; both are {name_a!r}")
    _check_ids(name_a, rows_a)
    _check_ids(name_b, rows_b)
    by_id_b = {p.id: p for p in rows_b}
    shared = [p for p in rows_a if p.id in by_id_b]
    if not shared:
        raise io.DataError(f"{name_a!r} and {name_b!r} share no sample id; pairwise items compare the same prompts")
    for p in shared:
        if by_id_b[p.id].prompt != p.prompt:
            raise io.DataError(f"sample {p.id!r} has different prompts in {name_a!r} and {name_b!r}; "
                               f"compare predictions made on the same datapool")
    distinct = [p for p in shared if _normalised(p.generation) != _normalised(by_id_b[p.id].generation)]
    identical = len(shared) - len(distinct)
    if not distinct:  # nothing to leave in: a degenerate batch that annotators can only tie, said so
        log.warning("%r and %r give the same completion on all %d samples they share: every item of this batch "
                    "pairs two identical texts (the import counts them in no preference row and no win rate)",
                    name_a, name_b, len(shared))
        distinct, identical = shared, 0
    elif identical:
        log.info("left out %d of the %d samples %r and %r share: both gave the same completion (after whitespace "
                 "normalisation)", identical, len(shared), name_a, name_b)
    shared = distinct
    content = [[p.id, p.prompt, p.generation, by_id_b[p.id].generation] for p in shared]
    tag = batch_tag("pairwise", criteria_set, seed, prompt_column, [name_a, name_b], content)
    rng = random.Random(f"{seed}:{tag}")  # a str seed is hashed with sha512: the same on every run and platform
    rng.shuffle(shared)
    items, key = [], {}
    for p in shared:
        pair = [(name_a, p.generation), (name_b, by_id_b[p.id].generation)]
        if rng.random() < 0.5:
            pair.reverse()
        ids = [f"{tag}-{rng.getrandbits(64):016x}" for _ in pair]
        key.update({ids[0]: pair[0][0], ids[1]: pair[1][0]})
        items.append({"sample_id": p.id, prompt_column: p.prompt,
                      "choice_A": pair[0][1], "choice_B": pair[1][1], "choice_A_id": ids[0], "choice_B_id": ids[1]})
    numbered = tuple({"item_id": f"P{tag}-{i:05d}", **item} for i, item in enumerate(items, start=1))
    return Batch("pairwise", criteria_set, seed, numbered, prompt_column, identical_pairs_left_out=identical), key


def _normalised(text: str) -> str:
    """``text`` with every run of whitespace made one space and none at either end."""
    return " ".join(text.split())


def prompt_of(batch: Batch, item: Mapping[str, str]) -> str:
    return item["prompt"] if batch.kind == "likert" else item[batch.prompt_column]


def write_batch(batch: Batch, out_dir: str | Path, key: Mapping[str, str] | None = None,
                key_path: str | Path | None = None, finish: Callable[[Path], None] | None = None) -> list[str]:
    """Write the batch folder ``out_dir`` (replaced whole) and a pairwise batch's key file ``key_path``; returns one
    line per copy kept of what it replaces (see below), for the stage to print.

    ``finish``, if given, is called with the temporary folder once the batch files are in it (a stage adds its
    record there). Nothing half-written looks finished, and no failure leaves a new key beside an old batch: the
    key is written to a temporary name and the batch to a temporary folder; the folder is swapped in first and the
    key renamed onto ``key_path`` last (a failure between the two leaves the old key, which names its own batch).
    The key's digest goes to its :func:`~grueflow.io.files_record` beside it (private, as the key is), renamed
    just before the key, so that the stale check (:mod:`grueflow.stale`) tells a key emptied or cut since.
    An existing ``key_path`` that holds anything but this very key is refused before anything is written
    (:func:`check_key_path`), but the key of the batch ``out_dir`` holds where that batch has other items: a
    re-export (an upstream change altered the predictions, another ``--max-items``) copies that batch whole, and its
    key, to ``.grueflow/replaced/`` first (:func:`grueflow.keep.keep_batch`, under :func:`grueflow.keep.copy_root`),
    since annotators may be answering it, and the key is the only map from their item ids to the systems. (DVC
    leaves them in place for the stage, ``persist``; Snakemake deletes them before the job, having copied them in
    its ``onstart``: :func:`grueflow.stale.keep_reexported`.) A key that is not the key of the batch ``out_dir``
    holds (:func:`stray_key`: the folder put back without its key, as ``dvc checkout`` of an older commit restores
    the folder from DVC's cache but not the key, which DVC does not cache) is copied to ``.grueflow/replaced/`` with
    its digest record (:func:`grueflow.keep.keep_key`), with a line whether or not that copy was made before, and
    replaced by the key of ``batch``: the export is seeded, so that is the key it wrote with that batch before.
    """
    from grueflow.human.templates import platform_template

    if batch.kind == "pairwise" and (key is None or key_path is None):
        raise ValueError("a pairwise batch needs its key and a key_path outside the batch folder")
    if batch.kind == "likert" and (key is not None or key_path is not None):
        raise ValueError("a Likert batch has no key (its items name their method); give no key or key_path")
    if batch.kind == "pairwise" and batch.tag is None:
        raise ValueError("a pairwise batch's item ids carry its tag (P<tag>-00001); make it with pairwise_batch")
    document, stray = None, None
    replaced = replaced_tag(out_dir, batch)
    if key is not None and key_path is not None:
        document = key_document(batch, key)
        stray = stray_key(key_path, document, out_dir)
        if stray is None:
            check_key_path(key_path, document, replaced)
    lines = []
    root = copy_root(Path(out_dir))  # relative where it is the working folder, as kept_batch names copies
    root = Path(".") if root == Path.cwd() else root
    if replaced is not None:
        own_key = Path(key_path) if key_path is not None and stray is None and _tag_of_key(Path(key_path)) == replaced \
            else None
        copies, new = keep_batch(Path(out_dir), own_key, root)
        if new:
            lines.append(f"grueflow: {out_dir} holds batch {replaced}, which this export replaces by batch "
                         f"{batch.tag}; {batch_copies_text(copies)} (annotators may be answering it)")
    if stray is not None:  # a key is replaced: said whether or not this content was kept before
        copy, _ = keep_key(Path(key_path), root)
        lines.append(f"grueflow: {key_path} holds {stray}, but {out_dir} holds batch "
                     f"{_tag_of_copy(Path(out_dir) / ITEMS)} (a batch folder put back without its key: `dvc checkout` "
                     f"restores a batch folder, but not its key, which DVC does not cache); a copy of that key, with "
                     f"its digest record, is kept in {copy}; this export writes the key of batch {batch.tag} there")
    with contextlib.ExitStack() as stack:
        # the key unblinds the batch: readable by its owner alone, as the annotators may share the machine; so is
        # its digest record, which would let one try the 2^n assignments of a small batch
        key_tmp = stack.enter_context(io.atomic_path(key_path, mode=0o600)) if document is not None else None
        if key_tmp is not None:
            io.write_json(key_tmp, document)
            record_tmp = stack.enter_context(io.atomic_path(io.files_record(key_path), mode=0o600))
            io.write_json(record_tmp, {str(key_path): io.sha256_bytes(key_tmp)})  # renamed before the key
        with io.atomic_dir(out_dir) as tmp:
            io.write_json(tmp / MANIFEST, manifest(batch))
            io.write_jsonl(tmp / ITEMS, batch.items)
            write_upload_csv(batch, tmp / UPLOAD)
            io.write_text(tmp / TEMPLATE, platform_template(batch))
            if finish is not None:
                finish(tmp)
    return lines


def key_document(batch: Batch, key: Mapping[str, str]) -> dict[str, Any]:
    """What a key file holds: ``{"batch_tag": <the batch's tag>, "ids": {opaque id: system}}``."""
    return {KEY_TAG: batch.tag, KEY_IDS: dict(sorted(key.items()))}


def stray_key(key_path: str | Path, document: Mapping[str, Any], out_dir: str | Path) -> str | None:
    """What the key at ``key_path`` is where it is not the key of the pairwise batch the folder ``out_dir`` holds
    (another batch's tag, or the same tag with other opaque ids: a batch folder put back without its key, as
    ``dvc checkout`` restores the folder from DVC's cache but never the key, an out DVC does not cache), nor
    ``document`` (the key being written): ``the key of batch <tag>``, or ``a key of batch <tag> with other items``.
    None where there is no such key: no file there, no key file, a key that names no batch, the folder's own key, or
    a folder that holds no pairwise batch with a tag (a key may then belong to a folder elsewhere:
    :func:`check_key_path` judges it). :func:`write_batch` keeps such a key with its digest record
    (:func:`grueflow.keep.keep_key`) and writes its own over it: the key of the batch it writes, which its seeded
    export writes byte for byte as before."""
    key_path = Path(key_path)
    if not key_path.is_file() or key_path.is_symlink():
        return None
    try:
        tag, ids = _read_key_file(key_path)
    except io.DataError:
        return None
    held = _held_batch(Path(out_dir))
    if tag is None or held is None or (tag, set(ids)) == held \
            or (tag == document[KEY_TAG] and ids == document[KEY_IDS]):
        return None
    return f"a key of batch {tag} with other items" if tag == held[0] else f"the key of batch {tag}"


def _held_batch(folder: Path) -> tuple[str, set[str]] | None:
    """(tag, opaque ids) of the pairwise batch the folder ``folder`` holds, by its ``items.jsonl`` (a file, or a link
    into DVC's cache: :func:`grueflow.keep.cached_link`); None where it holds none (no readable items, items of no
    tag, a Likert batch's)."""
    items = folder / ITEMS
    if not items.is_file() or (items.is_symlink() and not cached_link(items)):  # DVC's symlinked cache: its bytes
        return None
    try:
        with open(items, encoding="utf-8") as handle:
            found = [json.loads(line) for line in handle if line.strip()]
        tags = {tag_of(item["item_id"]) for item in found}
        ids = {item[f"choice_{side}_id"] for item in found for side in "AB"}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    tag = tags.pop() if len(tags) == 1 else None
    return (tag, ids) if tag is not None and ids and all(isinstance(i, str) for i in ids) else None


def check_key_path(key_path: str | Path, document: Mapping[str, Any], replaced: str | None = None) -> None:
    """Refuse to replace an existing file at ``key_path`` unless it already holds ``document`` (a re-export of
    the same batch), or it is the key of batch ``replaced`` (the one the export replaces, which :func:`write_batch`
    copies with its key first): any other key is the only record of which opaque id is which system in its batch,
    so the refusal says to move it (and its digest record) aside, naming both, never to delete it. (A key of another
    batch than the one the export's folder holds is kept and replaced instead: :func:`stray_key`.)"""
    key_path = Path(key_path)
    if not key_path.exists():
        return
    record = io.files_record(key_path)
    aside = (f"move it aside, with its digest record if there is one (mv {key_path} {record} <a folder of your "
             f"own>/), and run again")
    try:
        tag, ids = _read_key_file(key_path)
    except io.DataError:
        raise io.DataError(f"{key_path} exists and is not a key file; choose another --key path, or {aside}") from None
    if (tag == document[KEY_TAG] and ids == document[KEY_IDS]) or (tag is not None and tag == replaced):
        return
    if tag is None:
        raise io.DataError(f"{key_path}: the key exists for a batch exported before keys named their batch; "
                           f"it may be the only map from that batch's item ids to the systems: choose another --key "
                           f"path, or {aside}")
    if tag == document[KEY_TAG]:
        raise io.DataError(f"{key_path}: the key exists for batch {tag} with other items (another --max-items?); "
                           f"it may be the only map from that export's item ids to the systems: choose "
                           f"another --key path, or {aside}")
    raise io.DataError(f"{key_path}: the key exists for batch {tag}; it may be the only map from that batch's "
                       f"item ids to the systems: choose another --key path, or {aside}")


def replaced_tag(out_dir: str | Path, batch: Batch) -> str | None:
    """The tag of the batch the folder ``out_dir`` holds where writing ``batch`` there would replace it with other
    items (:func:`write_batch` keeps a copy first); None where it holds no batch's items (nothing there, a folder of
    another kind, whose files the stage keeps as any it replaces) or the very items of ``batch``. Its
    ``items.jsonl`` may be a link into DVC's cache (:func:`grueflow.keep.cached_link`: ``cache.type: symlink``)."""
    items = Path(out_dir) / ITEMS
    if not items.is_file() or (items.is_symlink() and not cached_link(items)):  # DVC's symlinked cache: its bytes
        return None
    try:
        with open(items, encoding="utf-8") as handle:
            found = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        return None
    if found == [dict(item) for item in batch.items]:
        return None
    first = found[0].get("item_id") if found and isinstance(found[0], dict) else None
    return (tag_of(first) if isinstance(first, str) else None) or "of no tag"


def kept_batch(batch: Batch, tag: str) -> list[Path]:
    """The copies kept of a batch before it was replaced (:func:`grueflow.stale.keep_answered`,
    :func:`grueflow.stale.keep_reexported`, :func:`write_batch`) that hold batch ``tag``, exported before to
    ``batch``'s folder: the folder's, then a pairwise batch's key's where
    the pipeline's layout puts it (``results/human/<task>/keys/<batch>.json``); paths relative to the working folder
    (the project, where the copies go). Empty where none is kept, or the folder lies outside the working folder."""
    if batch.folder is None or not Path(os.path.abspath(batch.folder)).is_relative_to(Path.cwd()):
        return []
    folder = Path(os.path.relpath(os.path.abspath(batch.folder)))
    found = [copy for copy in copies_of(folder, Path(".")) if _tag_of_copy(copy / ITEMS) == tag][-1:]
    if found and batch.kind == "pairwise" and folder.parent.name == "batches":
        key = folder.parent.parent / "keys" / f"{folder.name}.json"
        found += [copy for copy in copies_of(key, Path(".")) if _tag_of_key(copy / key.name) == tag][-1:]
    return found


def _tag_of_copy(items: Path) -> str | None:
    """The batch tag of the first item id in ``items`` (a batch's ``items.jsonl``), or None where it is unreadable."""
    try:
        with open(items, encoding="utf-8") as handle:
            first = json.loads(handle.readline())
        return tag_of(first["item_id"]) if isinstance(first, dict) and isinstance(first.get("item_id"), str) else None
    except (OSError, ValueError):
        return None


def _tag_of_key(path: Path) -> str | None:
    """The batch tag a key file names, or None where it is unreadable or names none."""
    try:
        return _read_key_file(path)[0]
    except io.DataError:
        return None


def manifest(batch: Batch) -> dict[str, Any]:
    """What ``batch.json`` holds (see the module docstring)."""
    left_out = {"identical_pairs_left_out": batch.identical_pairs_left_out} if batch.kind == "pairwise" else {}
    return {"kind": batch.kind, "task": batch.task, "criteria_set": batch.criteria_set, "seed": batch.seed,
            "prompt_column": batch.prompt_column, "scale": [SCALE_MIN, SCALE_MAX], "n_items": len(batch.items),
            "criteria": [c.id for c in batch.criteria] if batch.kind == "likert" else [],
            "columns": list(batch.columns), **left_out}


def write_upload_csv(batch: Batch, path: str | Path) -> None:
    """The platform upload: the batch's columns, every value HTML-escaped (see the module docstring)."""
    with io.atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(batch.columns)
        for item in batch.items:
            writer.writerow([html.escape(item[c], quote=True) for c in batch.columns])


def read_batch(batch_dir: str | Path) -> Batch:
    """A batch folder written by :func:`write_batch`; a missing or inconsistent file is a DataError. Another batch's
    folder copied or linked to ``batch_dir`` is read, with a warning naming both (:func:`grueflow.io.copy_note`):
    the annotation page and an import by hand run no stale check first."""
    batch_dir = Path(batch_dir)
    manifest_path = batch_dir / MANIFEST
    if not manifest_path.is_file():
        raise io.MissingDataError(f"{batch_dir} is not a human-evaluation batch: {MANIFEST} is missing; "
                                  f"make one with stages/export_human_eval.py")
    _warn_if_copied(batch_dir)
    io.check_stage_output(batch_dir)  # every file as the export's stage.json recorded it
    try:
        meta = io.read_json(manifest_path)
    except ValueError as err:
        raise io.DataError(f"{manifest_path}: not readable JSON ({err}); export the batch again") from None
    if not isinstance(meta, dict) or meta.get("kind") not in KINDS:
        kind = meta.get("kind") if isinstance(meta, dict) else None
        raise io.DataError(f"{manifest_path}: kind {kind!r} is not one of {KINDS}")
    missing = [k for k in ("criteria_set", "seed") if k not in meta]
    if missing:
        raise io.DataError(f"{manifest_path}: missing {missing}; export the batch again")
    if not (batch_dir / ITEMS).is_file():
        raise io.MissingDataError(f"{batch_dir / ITEMS} is missing; export the batch again")
    items = tuple(io.read_jsonl(batch_dir / ITEMS))
    if not items:
        raise io.DataError(f"{batch_dir / ITEMS} holds no items; export the batch again")
    # without stage.json nothing else sees a file cut at a line end; a batch exported before n_items has none
    if "n_items" in meta and meta["n_items"] != len(items):
        raise io.DataError(f"{batch_dir / ITEMS} holds {len(items)} items where {MANIFEST} says n_items "
                           f"{meta['n_items']!r}: the batch is cut or was edited; export the batch again")
    task = meta["task"] if "task" in meta else _task_of_record(batch_dir)  # absent before batches named it
    if task is not None and (not isinstance(task, str) or not task):
        raise io.DataError(f"{manifest_path}: task {task!r} is not a task name; export the batch again")
    try:
        CRITERIA.get(meta["criteria_set"])
        batch = Batch(meta["kind"], meta["criteria_set"], int(meta["seed"]), items, meta.get("prompt_column", "prompt"),
                      batch_dir, int(meta.get("identical_pairs_left_out", 0)),  # absent before it was counted
                      task)
    except (UnknownNameError, ValueError, TypeError, KeyError) as err:
        raise io.DataError(f"{manifest_path}: {err}; export the batch again") from None
    for number, item in enumerate(items, start=1):
        missing = [c for c in (*batch.columns, "sample_id") if not isinstance(item.get(c), str)]
        if missing:
            raise io.DataError(f"{batch_dir / ITEMS}: line {number} lacks {missing}")
    if len(batch._by_id) != len(items):
        raise io.DataError(f"{batch_dir / ITEMS}: item ids repeat")
    tags = sorted({tag_of(item["item_id"]) or "none" for item in items})
    if len(tags) > 1:
        raise io.DataError(f"{batch_dir / ITEMS}: its item ids carry {len(tags)} batch tags ({', '.join(tags[:3])}), "
                           f"where one batch's share one; export the batch again")
    return batch


def _task_of_record(batch_dir: Path) -> str | None:
    """The task of a batch exported before ``batch.json`` named it: the one task its predictions' paths, as its
    ``stage.json`` recorded the export's inputs, name (:func:`task_of_paths`); None where they name none or
    several, or no record is there."""
    record_path = batch_dir / io.STAGE_RECORD
    if not record_path.is_file():
        return None
    try:
        inputs = io.read_json(record_path).get("inputs", {})
        tasks = task_of_paths([entry["path"] for entry in inputs.values()])
    except (ValueError, AttributeError, KeyError, TypeError):  # a record not of this shape tells nothing
        return None
    return tasks.pop() if len(tasks) == 1 else None


def import_task(batch: Batch, where: str | Path, task: str | None) -> str:
    """The task an import of ``batch`` (read from ``where``) reports its rows under: ``task`` (``--task``), else the
    task the batch rates, else its criteria set's name.

    A ``task`` other than the one the batch records is a DataError. A batch that records none (its predictions' paths
    named none: copies outside ``results/eval/<task>/``) takes ``task`` on trust with one warning, which also names
    both criteria sets where the batch's is not the one the pipeline exports ``task``'s batches with
    (``--criteria <task>``); a criteria set of one's own is no error."""
    if task is None:
        return batch.task or batch.criteria_set
    if batch.task is not None and task != batch.task:
        raise io.DataError(f"--task {task}, but the batch {where} rates task {batch.task}'s predictions; import it "
                           f"with --task {batch.task}, or give a batch exported from task {task}")
    if batch.task is None:
        own = CRITERIA.get(task) if task in CRITERIA else None
        other = (f"; its criteria set {batch.criteria_set} ({_criteria_ids(batch.spec)}) is not the one task {task}'s "
                 f"batches are exported with, {task} ({_criteria_ids(own)})" if own is not None and own != batch.spec
                 else "")
        log.warning("the batch %s records no task (its predictions' paths name none, as copies outside "
                    "results/eval/<task>/ do), so it is imported as task %s's, as --task says, unchecked%s; export it "
                    "with --task to record its task", where, task, other)
    return task


def _criteria_ids(spec: CriteriaSet) -> str:
    """A criteria set's Likert criteria, ``coherence, sentiment``."""
    return ", ".join(c.id for c in spec.criteria)


def read_key(path: str | Path, batch: Batch | None = None, legacy_ok: bool = False) -> dict[str, str]:
    """A pairwise key file's opaque id -> system map.

    With ``batch`` (what an import passes), the key must be the one written with that batch: its ``batch_tag`` is
    the batch's tag and it maps every opaque id of the batch, else a DataError names both files (and, for another
    batch's key, a copy kept of this batch's and ``dvc repro``: :func:`_own_key_remedy`); and its bytes are
    the ones its export recorded beside it (:func:`_check_key_digest`: one item's two systems swapped is refused).
    A key written before keys named their batch (a bare id -> system object) cannot be checked; it is refused unless
    ``legacy_ok``, and then read with a warning. Without ``batch`` the map is returned unchecked.
    """
    tag, ids = _read_key_file(path)
    if batch is None:
        return ids
    where, mine = batch.folder or "this batch", batch.tag or "no tag"
    if tag is None and not legacy_ok:
        raise io.DataError(f"{path} names no batch (a key written before keys named their batch), so nothing shows "
                           f"it belongs to {where} ({mine}); if it was written with that batch, rerun with "
                           f"--legacy-key to import it unchecked")
    if tag is None:
        log.warning("%s names no batch (written before keys named their batch): importing %s with it unchecked",
                    path, where)
    elif tag != batch.tag:
        raise io.DataError(f"{path} belongs to batch {tag}, not to {where} ({mine}); give the key written with "
                           f"this batch{_own_key_remedy(path, batch)}")
    missing = sorted(batch.opaque_ids() - set(ids))
    if missing:
        raise io.DataError(f"{path} lacks {len(missing)} of the opaque ids of {where} (e.g. {missing[0]}); give the "
                           f"key written with this batch; {_key_remedy(path)}")
    _check_key_digest(path, batch)
    return ids


def _own_key_remedy(path: str | Path, batch: Batch) -> str:
    """Where to find the key of ``batch`` where ``path`` holds another batch's: ``: a copy of it is kept in <copy>
    (--key <copy>/<name>)`` for the last copy kept in ``.grueflow/replaced/`` (:func:`grueflow.keep.keep_key`) that
    names ``batch``'s tag and maps each of its opaque ids; and, for a key in the pipeline's layout
    (``results/human/<task>/keys/``), ``dvc repro``: ``dvc checkout`` of another commit puts the batch folder back
    from DVC's cache but not its key (an output DVC does not cache), and the seeded export, rerun, keeps the key it
    finds (:func:`stray_key`) and writes this batch's key again. ``""`` where neither applies."""
    name = Path(path).name
    kept = [copy / name for copy in copies_of(Path(path), Path(".")) if _names_batch(copy / name, batch)][-1:]
    text = f": a copy of it is kept in {kept[0].parent} (--key {kept[0]})" if kept else ""
    if Path(path).parent.name == "keys":
        text += (f"{'; or' if kept else ';'} where the batch folder was put back without its key (`dvc checkout` "
                 f"restores the folder from DVC's cache, not the key, which DVC does not cache), run `dvc repro`: "
                 f"the export is seeded, and keeps the key found here in .grueflow/replaced/ and writes this "
                 f"batch's key again")
    return text


def _names_batch(key: Path, batch: Batch) -> bool:
    """Whether the key file ``key`` names ``batch``'s tag and maps each of its opaque ids."""
    try:
        tag, ids = _read_key_file(key)
    except io.DataError:
        return False
    return tag == batch.tag and batch.opaque_ids() <= set(ids)


def _check_key_digest(path: str | Path, batch: Batch) -> None:
    """Refuse the key ``path`` of ``batch`` where its bytes are not those its export wrote: the digest
    :func:`write_batch` recorded beside it (:func:`~grueflow.io.files_record`) is another. A key with one item's two
    systems swapped (a hand edit, a merge) still names its batch and maps every opaque id, and would count each
    judgement of that item for the other system. The refusal names a copy kept in ``.grueflow/replaced/``
    (:func:`grueflow.keep.keep_batch`) that holds the recorded bytes, if any. A key without that record (copied
    without its hidden record, written before keys had one) is read with a warning: nothing vouches for it."""
    record = io.files_record(path)
    try:
        recorded = io.written_digests(io.read_json(record))
    except FileNotFoundError:
        log.warning("%s has no record of the digest its export wrote beside it (%s: a key copied without it, or "
                    "exported before keys had one), so nothing shows it is unedited; importing it unchecked", path,
                    record)
        return
    except (OSError, ValueError):
        recorded = None
    digests = set((recorded or {}).values())
    if len(digests) != 1:
        raise io.DataError(f"{record}, the record of the digest of the key {path} that its export wrote, is damaged; "
                           f"{_key_remedy(path)}")
    if io.sha256_bytes(path) not in digests:
        name = Path(path).name
        copy = [c / name for c in copies_of(Path(path), Path(".")) if (c / name).is_file()
                and io.sha256_bytes(c / name) in digests][-1:]
        kept = f"a copy of the key as exported is kept in {copy[0]}: put it back; or " if copy else ""
        raise io.DataError(f"{path} is not the key its export wrote: its bytes differ from the digest recorded beside "
                           f"it in {record} (edited by hand, or merged?), and a key with two systems swapped counts "
                           f"judgements for the wrong system; {kept}{_key_remedy(path, 'to write it again')}")


def _read_key_file(path: str | Path) -> tuple[str | None, dict[str, str]]:
    """(batch tag, opaque id -> system) of a key file; the tag is None in a key written before keys named their
    batch, which is the bare id -> system object."""
    io.refuse_special_file(path, f"give the key the export wrote beside the batch; {_key_remedy(path)}", "key file")
    if not Path(path).is_file():
        raise io.MissingDataError(f"key file {path} does not exist; give the key the export wrote beside the batch; "
                                  f"{_key_remedy(path)}")
    try:
        document = io.read_json(path)
    except ValueError as err:
        raise io.DataError(f"{path}: not readable JSON ({err}); give the key the export wrote; "
                           f"{_key_remedy(path)}") from None
    if isinstance(document, dict) and KEY_IDS in document:
        tag, ids = document.get(KEY_TAG), document[KEY_IDS]
        if set(document) != {KEY_TAG, KEY_IDS} or not isinstance(tag, str):
            raise io.DataError(f"{path}: a key file holds {KEY_TAG!r} (a batch tag) and {KEY_IDS!r} (opaque id -> "
                               f"system) and nothing else; it has {sorted(document)}: give the key the export wrote; "
                               f"{_key_remedy(path)}")
    else:
        tag, ids = None, document
    if not isinstance(ids, dict) or not ids or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in ids.items()):
        raise io.DataError(f"{path}: a pairwise key maps opaque ids to system names; give the key the export wrote; "
                           f"{_key_remedy(path)}")
    return tag, ids


def _key_remedy(path: str | Path, when: str = "if it is damaged or lost") -> str:
    """How to get a lost or damaged key at ``path`` back, after ``when``: the export is seeded
    (:func:`pairwise_batch`), so the same predictions and seed write the same batch and key again. A key in the
    pipeline's layout (``results/human/<task>/keys/<batch>.json``) names its batch folder, ``../batches/<batch>``, to
    move aside with it (never to delete: a key edited by hand may be all someone has), so that the rerun exports
    both."""
    path = Path(path)
    if path.parent.name == "keys":
        batch = path.parent.parent / "batches" / path.stem
        return (f"{when}, move it and the batch folder {batch} out of results/ and rerun the pipeline, which exports "
                f"the same batch and key again (the export is seeded)")
    return f"{when}, export the batch again from the same predictions with the same seed, which writes the same key"


def read_rl4lms_likert(path: str | Path) -> dict[str, list[Prediction]]:
    """An RL4LMs-style Likert CSV (``prompt, machine_completion, algorithm``) as predictions per algorithm.

    Rows get ids ``row<k>`` (1-based CSV row) since the layout has no sample id.
    """
    _, rows = _read_csv(path, LIKERT_COLUMNS)
    out: dict[str, list[Prediction]] = {}
    for number, row in enumerate(rows, start=1):
        out.setdefault(row["algorithm"], []).append(Prediction(f"row{number}", row["prompt"], row["machine_completion"]))
    return out


def read_rl4lms_pairwise(path: str | Path) -> tuple[str, dict[str, list[Prediction]]]:
    """An RL4LMs-style pairwise CSV whose choice ids are system names, as (prompt column, predictions per system).

    Each row is one prompt; its id is ``row<k>`` in both systems' predictions.
    """
    header, rows = _read_csv(path, ())
    prompt_column = next((c for c in PROMPT_COLUMNS if c in header), None)
    if prompt_column is None:
        raise io.DataError(f"{path}: a pairwise CSV needs one of the columns {PROMPT_COLUMNS}; it has {header}")
    _check_columns(path, header, PAIRWISE_COLUMNS)
    out: dict[str, list[Prediction]] = {}
    for number, row in enumerate(rows, start=1):
        for side in ("A", "B"):
            out.setdefault(row[f"choice_{side}_id"], []).append(
                Prediction(f"row{number}", row[prompt_column], row[f"choice_{side}"]))
    if len(out) != 2:
        raise io.DataError(f"{path}: a pairwise CSV compares two systems; its choice ids name {sorted(out)}")
    return prompt_column, out


def _read_csv(path: str | Path, required: Sequence[str]) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of the CSV ``path``, as ``csv.DictReader`` reads them (blank lines passed over), a
    DataError where it lacks a ``required`` column or a row repeats the header (two files joined,
    :func:`grueflow.io.check_header_repeat`). A first line that is Excel's separator hint (``sep=,``,
    :func:`grueflow.io.separator_hint`) is passed over, and its delimiter used."""
    io.read_text(path)  # a non-UTF-8 file fails here with the file, line and column
    with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: a BOM (Excel) is not part of a column name
        hint = io.separator_hint(handle)
        if hint is not None:
            log.info("%s: line 1 is Excel's separator hint %r; the header is line 2", path, "sep=" + hint)
        reader = csv.DictReader(handle, delimiter=hint or ",")
        header = list(reader.fieldnames or [])
        _check_columns(path, header, required)
        rows = []
        for row in reader:
            if None not in row and None not in row.values():  # neither longer nor shorter than the header
                # a header row holds no line break: its last line, line_num, is its line
                io.check_header_repeat(path, reader.line_num + (hint is not None), list(row.values()), header)
            rows.append(row)
        return header, rows


def _check_columns(path: str | Path, header: Sequence[str], required: Sequence[str]) -> None:
    """A DataError naming the columns of ``required`` that ``header`` (the CSV ``path``'s) lacks."""
    missing = [c for c in required if c not in header]
    if missing:
        raise io.DataError(f"{path}: missing column(s) {missing}; it has {list(header)}")
