"""What Snakemake does not see: a stage folder deleted or damaged after the stages that read it were built.

Snakemake judges a job by modification times, and it skips a job whose output is missing when every job that
reads it already has its own outputs (by design since Snakemake 7.8, snakemake/snakemake#1978): delete
``results/eval/<task>/<method>/seed<k>`` and ``snakemake`` says "Nothing to be done" while the GRUE table keeps
the deleted run's row. Before each Snakemake run the Snakefile calls :func:`mark_stale`, which finds

- a stage folder that fails its manifest's size check (``grueflow.io.check_stage_output``, a file deleted,
  truncated or grown, or a link put in place of a file or folder its stage wrote), or one of whose files modified
  after its record has the listed size and another digest (:func:`grueflow.keep.edited_outputs`: a number edited in
  place, another run's weights of the same size copied in), which every reader refuses: the folder itself is stale;
  so is one whose files, read whole, do not match its record (:func:`_damage`), where they changed since that was
  last seen (a same-size replacement that kept an older time, ``cp -p`` from a backup): a reader's input folder
  whose digest changed (:func:`_changed_inputs`), or an evaluation, which the GRUE table and the human-evaluation
  exports read and whose files no reader's record holds (:func:`_unverified`);
- a stage folder whose ``stage.json`` records another output path than the folder's own (``out``): another stage
  folder copied over it (``cp -a`` of another run's), which passes its own checks: the folder itself is stale;
- a suite stage folder, or a table, whose record (its ``stage.json``, the table's digests of its files) is not the
  one noted when a Snakemake job last wrote that path (:func:`grueflow.io.note_written`): an older copy put back by
  hand after a params change (a backup, another branch's results), the stage run by hand with other settings, or
  ``dvc repro`` run with other params, each whole and at its own path, where Snakemake's record of the params,
  kept per path and written by its last job, says "Nothing to be done": it is stale itself;
- a suite stage folder of whose params Snakemake keeps no record ("missing provenance/metadata": no job of this
  checkout wrote it, as ``dvc repro`` built it or ``.snakemake`` was removed; or its record was dropped, by
  ``--drop-metadata`` or ``--cleanup-metadata``), whose ``stage.json`` records digests of the params its stage read
  that differ from those of the params files its rule reads now (:func:`params_changed`): a param edited since is
  seen, as ``dvc repro`` sees it; so is one (or a table) whose provenance record (the table's files record) holds
  fingerprints of other code than its stage runs now (:func:`code_changed`): a module edited under an older time
  (``cp -p``, ``tar x``), which Snakemake judges by time, where it holds no record of the code's digest;
- a stage folder whose ``stage.json`` records an input that no longer exists, or one whose content is not the
  one recorded: an input from outside ``results/`` (a datapool's local data, the human answers), or another
  stage's folder replaced by another valid one whose record names no output path (an earlier version's), which
  passes its own checks: that reader is stale (digests read through a cache, :func:`input_digest`); but a suite
  folder's input from outside ``results/`` that is gone and that its task file still names (a data disk not mounted,
  a folder renamed) is refused, naming it, before anything is marked: its job could not read it, and the rebuild
  would start by deleting the folder;
- a stage folder the suite's rules write (``folders``), a ``stage.json`` records as an input, or the table
  aggregates, that holds no ``stage.json`` of its own (emptied, or its record deleted; every stage writes one
  last), or a file where such a folder belongs: that folder is stale;
- the GRUE table, when an evaluation it was built from (an ``expected`` folder its record names, or whose row it
  holds: :func:`_gone_evaluations`) no longer exists, when its rows are not the suite's grid (:func:`_rows_unlike`:
  a task, method or seed added or dropped since it was built), or when the evaluation folders its stage recorded
  reading are not the suite's, or one was rebuilt since (:func:`_built_unlike`: seeds 0 and 1 where the suite names
  2 and 3, all on disk, which the rows' count cannot tell);
- a table (the GRUE table, the human-evaluation table) one of whose files written with it (its Markdown, JSON,
  chart: ``siblings``) is missing, or one of whose files differs from what its stage wrote (the digests it
  recorded, :func:`grueflow.io.atomic_files`: a table edited in a spreadsheet, cut), or whose record of those
  digests is missing (nothing then tells an edited table from its stage's): rule all asks for the CSV alone;
- a pairwise batch's blinding key that differs from the digest its export recorded beside it (emptied, cut), or
  whose record is missing: it is in no manifest, being outside the batch folder, and its export is seeded, so the
  rerun writes it again,

and marks each as stale in the two ways Snakemake reads staleness: its timestamp set to 1970 (the
``.snakemake_timestamp`` Snakemake keeps in a folder output, else the folder or file itself), and a new token in
:data:`TOKENS`, which every rule takes as a param (:func:`stale_token`). The timestamp alone is not enough: an
input newer than the output whose checksum is the one Snakemake recorded (a small file such as a stage's code)
does not rerun a job, so a job whose inputs are only such files (prepare_datapool), or whose one folder input
is gone (what read a deleted datapool), would never rerun; a param that differs from the recorded one always
does. Its job reruns and rebuilds what it reads. The stale outputs are stale whatever is run next (a dry run marks
them too; a folder repaired by hand after that still reruns once). Nothing is deleted here but what lies where a
table's file belongs and is no file (:func:`move_aside_tables`: a folder, copied out first), which Snakemake takes
for the table, present, and neither it nor the table's stage would replace; and what a suite stage
folder stale for its own sake holds that no stage record vouches for (a datapool written there by hand, a record
deleted, a file added), or a file in a stage folder's place, is copied out of ``results/`` before Snakemake's
rebuild deletes it, and so is what any other stage folder holds that no record vouches for
(:func:`keep_user_files`: a rerun for a changed param replaces a folder whole). DVC needs no stale marks: it
compares content hashes, and a stage folder is an output as DVC defines it (``dvc status`` lists one a file was
added to as modified, and ``dvc repro`` restores it from DVC's cache). A human-evaluation batch that has answers on
record, and its key, are copied whole the same way (:func:`keep_answered`): an upstream change re-exports the
batch, and the answers then answer one that no longer exists; so is any exported batch a run is about to export
again, answered yet or not (:func:`keep_reexported`, from the Snakefile's ``onstart``, once the DAG is known: the
batch is with annotators as soon as it is exported). DVC's first stage (``grueflow.suite_check``), which
runs before any other under ``dvc repro``, makes the same copies over DVC's outputs, a table's edited files
included (:func:`keep_edited_tables`).

The same blind spot holds for the files a job reads from outside ``results/`` (a datapool's local data, a
plugin's code, a reward's lexicon) and for the code its stage runs (``stages/<stage>.py`` and its import closure,
:mod:`grueflow.codedeps`): one replaced by a file with an older time (``mv`` from a download folder, ``cp -p``,
``rsync -a``, a restored archive, outputs written while the clock was ahead) is older than the output and never
read. Each rule therefore also takes :func:`content_digest` of those files as a param, so that a job reruns when
their content changes, as under DVC.

The stage folders checked are every one under ``results`` that holds a record, and every suite folder (``folders``,
``expected``) that holds one, at the path its rule writes, whatever links it is or lies under (``results/eval`` on
another disk, a method's folder linked to another's): each is checked as one reached without links, its record's
``out`` compared with that path, links kept (:func:`grueflow.io.written_for`). A link there that leads to nothing
(a disk not mounted) is refused, naming it, before anything is marked (:func:`refuse_dangling`): nothing behind it
can be checked or rebuilt. A link through which a rebuild would write into another run's folder is refused, naming
it (:func:`refuse_shared`, :func:`refuse_through_link`); DVC's first stage runs the same refusals over the outputs
DVC writes (:func:`refuse_links`).
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from grueflow import codedeps
from grueflow.config import ConfigError, read_yaml
from grueflow.human.layout import lost_answers
from grueflow.io import (BUILT_FROM, CODE_RAN, MODEL_DIR, NAMED_RAN, PARAMS_READ, PROVENANCE_RECORD, RECORD_DIGEST,
                         SNAKEMAKE_METADATA, SNAKEMAKE_TIMESTAMP, STAGE_RECORD, UNHASHED, DataError, MissingDataError,
                         as_written, atomic_path, check_stage_output, files_record, fingerprint, last_written,
                         read_json, record_digest, sealed, sha256_bytes, snakemake_metadata, written_digests,
                         written_for)
from grueflow.keep import (as_deleted, batch_copies_text, dated_apart, edited_outputs, files_under, keep_batch,
                           keep_copy, kept_copy, links_left, listed, persons_files, read_cache, stat_signature,
                           unvouched, write_cache)
from grueflow.pipeline import (PARAMS_DIGEST, PLUGIN_CODE, STAGES, SUITE_FILE, VALIDATE_SUITE, ParamsSource,
                               named_digests, params_digest, path_digest, plugin_digests, script_parts, task_paths)
from grueflow.plugins import is_module_key, module_key

STALE_TIME = 1  # seconds after the epoch: older than any input (Snakemake reads a time of 0 as "none")
TOKENS = Path(".snakemake") / "grueflow-stale.json"  # {output path: when it was last found stale, ns}, beside
# Snakemake's own records (relative to the project root, the working folder of a Snakemake run)


def check_records_writable(records: Path = TOKENS.parent) -> None:
    """Raise :class:`DataError` where a file cannot be written in the folder ``records`` (``.snakemake``, made
    where missing): Snakemake keeps its lock and its records of jobs there, and the stale check its tokens, stamps and
    digests, on every run, a dry run's and ``--summary``'s too; on a read-only or full file system Snakemake stops
    in a traceback. Called before the stale check, so that nothing is judged or written first."""
    try:
        records.mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=records, prefix=".grueflow-writable.", suffix=".tmp"):
            pass
    except OSError as err:
        cause, remedy = _cause_and_remedy(err)
        raise DataError(f"{records}/ cannot be written ({cause}): Snakemake keeps its lock and records of jobs there, "
                        f"and grueflow its stale check's stamps, on every run, a dry run too; {remedy}, and rerun"
                        ) from None


def unusable_line(err: OSError) -> str:
    """One line for a file the stale check could not read or write (``err``, from :func:`keep_answered` or
    :func:`mark_stale`, before any job): the path, the cause and what to do."""
    cause, remedy = _cause_and_remedy(err)
    return f"the stale check could not use {err.filename or 'a file'} ({cause}); {remedy}, and rerun (no job ran)"


def _cause_and_remedy(err: OSError) -> tuple[str, str]:
    """The cause of ``err`` in words, and what to do about it."""
    if err.errno == errno.EROFS:
        return ("a read-only file system", "run from a writable copy of the project (cp -a PROJECT COPY), or remount "
                                           "it read-write")
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "the disk is full" if err.errno == errno.ENOSPC else err.strerror, "free space"
    if err.errno in (errno.EACCES, errno.EPERM):
        return ("permission denied", "run as the user who owns the project, or give this one read and write "
                                     "permission (ls -ld)")
    return err.strerror or type(err).__name__, "fix that"


STAMPED = Path(".snakemake") / "grueflow-stamped.json"  # {stage folder: its time in ns before a stamp for an input}
RETOKENED = Path(".snakemake") / "grueflow-retokened.json"  # {stage folder of a Snakemake job, given a token for its
# params or its data from outside results/: [its token before, or null; the sha256 of its stage record then]}
DIGESTS = Path(".snakemake") / "grueflow-digests.json"  # {path: [stat signature, sha256]}: files read once
VERIFIED_DEPS = Path(".dvc") / "tmp" / "grueflow-verified-deps.json"  # {dep file of dvc.lock: [its stat signature,
# the md5 dvc.lock records that it matched]} when it was read and found as recorded (dvc_unseen_edits), so that one
# is read again only once it changed; in DVC's own scratch folder, which git ignores
CHANGED_INPUT = "changed since it was built"  # why a stage whose input's content is not the recorded one is stale
GONE_INPUT = "no longer exists"  # ... and one whose input from outside results/ is gone
FILE_IN_PLACE = "a file where the stage's folder belongs"  # ... and a file Snakemake would take for the folder
PARAMS_CHANGED = "its params changed since it was built"  # ... and a folder whose params files changed since
CODE_CHANGED = "its code changed since it was built"  # ... and one whose stage's code changed, Snakemake holding no
# record of its job (code_changed)
UNMATCHED = "its stage recorded"  # how the reason ends for a stage folder's file not matching its digest (_unmatched)
VERIFIED = "as recorded"  # the cache's value for an evaluation folder read whole and found as its stage wrote it
NOT_BY_SNAKEMAKE = "and no Snakemake job of this checkout wrote it (built by dvc repro, or .snakemake removed)"
NO_SNAKEMAKE_RECORD = "and Snakemake holds no record of the job that wrote it (--drop-metadata, --cleanup-metadata)"
PUT_BACK = "is not the one its Snakemake job last wrote there (an older copy put back, a stage run by hand or by " \
    "dvc repro)"  # ... and an output whose record is not the one noted by its last job (grueflow.io.note_written)
HUMAN_ANSWERS = "data/human"  # where a batch's answers lie: <task>/<batch>/ (grueflow.human.layout)
PAIRWISE_BATCH = "{method_a}_vs_{method_b}_seed{seed}"  # a pairwise batch's name in the export stage's outputs
IMPORT_STAGE = STAGES["import_human_eval"].name  # the stage an import's stage.json names
LIKERT_BATCH = re.compile(r"likert_seed[0-9]+")  # a Likert batch's name: it has no key
TABLES: dict[Path, list[Path]] = {
    Path(STAGES[name].outputs["csv"]): [Path(path) for key, path in STAGES[name].outputs.items() if key != "csv"]
    for name in ("aggregate", "human_eval_table")}  # each table's CSV and the files written with it
AS_BUILT = ("its input ", PARAMS_CHANGED, CODE_CHANGED)  # stale reasons that leave the folder as built:
# CHANGED_INPUT, GONE_INPUT, PARAMS_CHANGED and CODE_CHANGED are stamped (a folder of a Snakemake job's given a token
# too, for its params or its data from outside results/), and the stamp (and token) taken back once the input,
# params or code are as recorded again
_KNOWN: dict[str, list] = {}  # the cache as this process read it and added to it


def content_digest(paths: Iterable[str | os.PathLike], cache: Path = DIGESTS) -> str:
    """One sha256 over the files ``paths`` (each by its path and content, in path order; a missing one as
    missing), "" when there are none: a rerun trigger that sees a change of content whatever its modification
    time. A file's own digest is kept in ``cache`` against its stat signature and read again only when that
    changed, so a dry run hashes only what changed since the last run."""
    files = sorted({str(path) for path in paths})
    if not files:
        return ""
    _load(cache)
    digest, added = hashlib.sha256(), False
    for name in files:
        try:
            signature = stat_signature(os.stat(name))
        except OSError:
            digest.update(f"{name}\0missing\0".encode())
            continue
        found, new = _cached_fingerprint(name, signature)
        added |= new
        digest.update(f"{name}\0{found}\0".encode())
    if added:
        _save(cache)
    return digest.hexdigest()


def restamp_set_back(paths: Iterable[str | os.PathLike], cache: Path = DIGESTS) -> list[str]:
    """Set to now the modification time of each file of ``paths`` (code: a stage's modules, a plugin's source)
    whose bytes differ from those ``cache`` (the digest cache of :func:`content_digest`) last recorded of it while
    its size and its modification time, to the second, are those recorded with them: a rewrite in place that kept
    or put back its time (``cp -p``, ``rsync -a --inplace``, ``os.utime`` over a same-size file). The code's digest
    reruns the stages that run such a file, but Python takes a module's bytecode in ``__pycache__``, and numba a
    kernel's compiled code, as current while the source's modification time (in seconds) and size are those they
    were compiled from, so those stages would run the earlier code; a newer time makes both compile it again. A file
    of another size or time than recorded (a plain edit, an earlier version put back with its own time) is left as
    it is: no compiled copy of the recorded bytes matches it, and a time of now would rerun, by Snakemake's
    modification times, stages built from the very bytes it holds. Only files ``cache`` holds an entry for, whose
    stat signature changed since, are read (a file never recorded is left as it is). The cache then records each
    file as it is, so that :func:`content_digest` reads none of them again. Returns the files set, in path order. A
    time that cannot be set is a :class:`DataError` naming the file."""
    _load(cache)
    restamped, added = [], False
    for name in sorted({str(path) for path in paths}):
        entry = _KNOWN.get(name)
        try:
            signature = stat_signature(os.stat(name))
        except OSError:  # gone: the code's digest sees that itself
            continue
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and len(entry[0]) == 5) \
                or entry[0] == signature or signature[2] != entry[0][2] \
                or signature[3] // 10**9 != entry[0][3] // 10**9:  # as compiled code sees it: size, whole seconds
            continue
        found, _ = _cached_fingerprint(name, signature)
        added = True
        if found == entry[1]:
            continue
        try:
            os.utime(name)
            _KNOWN[name] = [stat_signature(os.stat(name)), found]
        except OSError as err:
            raise DataError(f"{name} was rewritten with its size and modification time kept, so Python's "
                            f"bytecode cache (__pycache__) would run its earlier code; its time cannot be set to "
                            f"now ({err.strerror}): `touch {name}` as its owner, then rerun") from None
        restamped.append(name)
    if added:
        _save(cache)
    return restamped


def restamped_line(restamped: list[str]) -> str:
    """The line that says :func:`restamp_set_back` set the time of the files ``restamped``; "" where it set none."""
    if not restamped:
        return ""
    it, its = ("it", "its") if len(restamped) == 1 else ("them", "their")
    return (f"grueflow: {_some(restamped)} changed with {its} size and modification time kept, which Python's "
            f"bytecode cache (__pycache__) takes as unchanged: {its} time is set to now so that the stages that run "
            f"{it} compile {it} again")


def _load(cache: Path) -> None:
    """Read ``cache`` into :data:`_KNOWN` once a process."""
    if not _KNOWN:
        try:
            known = json.loads(cache.read_text())
            _KNOWN.update(known if isinstance(known, dict) else {})
        except (OSError, ValueError):
            pass


def _save(cache: Path) -> None:
    try:
        with atomic_path(cache) as tmp:
            tmp.write_text(json.dumps(_KNOWN, sort_keys=True) + "\n")
    except OSError:  # a cache only: a read-only checkout hashes again next time
        pass


def _cached_fingerprint(name: str, signature: list[int] | str, leave_out: Iterable[Path] = (),
                        markers: bool = False) -> tuple[str, bool]:
    """:func:`grueflow.io.fingerprint` of ``name`` (less the files ``leave_out``; with Snakemake's markers where
    ``markers``), from :data:`_KNOWN` while its stat ``signature`` (taken over the same files) is the one recorded
    there; and whether it was computed now."""
    key = f"{name}\0with markers" if markers else name
    entry = _KNOWN.get(key)
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == signature:
        return entry[1], False
    _KNOWN[key] = [signature, fingerprint(name, leave_out, markers)]
    return _KNOWN[key][1], True


def _tree_signature(folder: Path, leave_out: Iterable[Path] = ()) -> str:
    """The stat signatures of every file under ``folder`` (those :func:`grueflow.io.fingerprint` hashes, less
    ``leave_out``; Snakemake's markers too, which a stale mark re-stamps), as one digest: it changes when any file is
    rewritten, replaced, added or removed."""
    digest = hashlib.sha256()
    skipped = set(leave_out)
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (*UNHASHED, SNAKEMAKE_TIMESTAMP)
                       and p not in skipped):
        digest.update(f"{path.relative_to(folder)}\0{stat_signature(path.stat())}\0".encode())
    return digest.hexdigest()


def input_digest(path: Path, leave_out: Iterable[Path] = (), markers: bool = False) -> tuple[str, bool]:
    """:func:`grueflow.io.fingerprint` of the file or folder ``path`` (a stage's recorded input), from the cache of
    :func:`content_digest` while the stat signatures of its files are those recorded there (a folder: every file's,
    :func:`_tree_signature`); and whether it was computed now. So an input is read once per content: a folder copied
    over with ``cp -a`` (new inodes) is read once, an unchanged one never again. Load the cache first (:func:`_load`).
    The files ``leave_out`` (under a folder) are left out of both."""
    signature = _tree_signature(path, leave_out) if path.is_dir() else stat_signature(path.stat())
    return _cached_fingerprint(str(path), signature, leave_out, markers)


def stale_token(outputs: Iterable[str | os.PathLike], tokens: Path = TOKENS) -> str:
    """The tokens of those of a job's ``outputs`` ever marked stale, as one string (``<path>=<token> ...``; empty
    when none was), a params rerun trigger: a new token differs from the one Snakemake recorded when the job last
    ran, and reruns it; an unchanged one does not."""
    known = _read_mapping(tokens)
    return " ".join(f"{path}={known[str(path)]}" for path in outputs if str(path) in known)


def stale_outputs(results: Path, table: Path, expected: Iterable[Path],
                  siblings: Optional[dict[Path, list[Path]]] = None, folders: Iterable[Path] = (),
                  cache: Optional[Path] = None, params: Optional[Mapping[Path, ParamsSource]] = None,
                  load: Optional[Callable[[str], object]] = None) -> dict[Path, str]:
    """Each stale stage folder (or ``table``) under ``results``, with why: see the module docstring. ``folders``:
    every stage folder the suite's rules write, stale when one exists without its record; ``cache``: where the
    digests of the recorded inputs are kept between runs (:func:`input_digest`; None: this process's only);
    ``params``: where the job of each suite stage folder reads its params now, as its rule runs it
    (:func:`params_changed`, with ``load`` reading a params file). A :class:`DataError` where two suite folders are
    one through a link above one of them (:func:`refuse_shared`), where a link at ``results``, above a suite
    folder, or at one that a suite folder's record names as an input (or the table aggregates) leads to nothing
    (:func:`refuse_dangling`), and where a suite folder of ``params`` was built from data outside ``results/`` that
    no longer exists and its task file still names (:func:`_missing_data`): its job could not read it."""
    params = params or {}
    stale: dict[Path, str] = {}
    expected, folders = list(expected), list(folders)
    suite = set(expected) | set(folders)
    refuse_shared(suite)
    root = results.parent  # stage.json records input paths relative to the project root
    refuse_dangling({link for path in (results, *(folder.parent for folder in suite))  # results/, or above a suite
                     if (link := _dangling_link(results, path)) is not None})  # folder: no job can write there
    dangling = {link for folder in expected if (link := _dangling_link(results, folder)) is not None} \
        if table.is_file() else set()  # a suite folder that is a link to nothing, which the table aggregates
    readers: dict[Path, dict] = {}  # each stage folder in order: its recorded inputs, compared once all are seen
    missing: list[str] = []  # data a suite folder was built from, gone, that its task file still names
    for folder in sorted(set(recorded_folders(results)) | set(_recorded_suite_folders(suite))):
        try:
            check_stage_output(folder, deep=False)
        except MissingDataError as err:  # "<folder> is damaged: <file> is missing; delete ..."
            stale[folder] = str(err).split(";")[0].replace(f"{os.path.abspath(folder)} is ", "")
            continue
        edited = edited_outputs(folder)
        if edited:  # the same size, other bytes: what reads it refuses it, so it is rebuilt, then its readers
            stale[folder] = _unmatched(folder, edited)
            continue
        try:
            record = read_json(folder / STAGE_RECORD)
        except (OSError, ValueError):
            stale[folder] = f"{folder / STAGE_RECORD} is not readable JSON"
            continue
        written = written_for(root, folder, record.get("out"))
        if written is not None and (not folders or folder in suite):  # a copy outside the suite's folders: no job
            refuse_through_link(folder, results, written)
            how = "a link to" if os.path.realpath(folder) == os.path.realpath(root / written) else "a copy of"
            stale[folder] = f"damaged: its {STAGE_RECORD} records {written} as its output: {how} that folder"
            continue
        if (not folders or folder in suite) and _put_back(root, folder, folder / STAGE_RECORD):
            stale[folder] = f"its {STAGE_RECORD} {PUT_BACK}"
            continue
        if folder in params and (changed := params_changed(record, params[folder], load)):
            unknown = "" if snakemake_knows(root, folder) else \
                f", {NOT_BY_SNAKEMAKE if last_written(root, folder) is None else NO_SNAKEMAKE_RECORD}"
            stale[folder] = f"{PARAMS_CHANGED} ({', '.join(changed)}){unknown}"
            continue
        if (not folders or folder in suite) and not snakemake_knows(root, folder):
            changed, gone = code_changed(folder, record, cache, root, params.get(folder))
            if gone:  # a file its task names, gone for this run: its job could not read it
                missing.append(_named_files_gone(folder, gone, params.get(folder)))
                continue
            if changed:
                unknown = NOT_BY_SNAKEMAKE if last_written(root, folder) is None else NO_SNAKEMAKE_RECORD
                stale[folder] = f"{CODE_CHANGED} ({_some(changed)}), {unknown}"
                continue
        elif (not folders or folder in suite) and (gone := named_gone(folder, record, cache, root, params.get(folder))):
            missing.append(_named_files_gone(folder, gone, params.get(folder)))  # Snakemake would rerun it without
            continue
        inputs = record.get("inputs") or {}
        if not isinstance(inputs, dict):  # check_stage_output read the record as an object with a manifest
            stale[folder] = f"{folder / STAGE_RECORD} is damaged (its inputs are not a mapping)"
            continue
        if (not folders or folder in suite) and _seal_broken(record):  # whether or not Snakemake wrote it
            stale[folder] = f"damaged: its {STAGE_RECORD} is not what its stage wrote (edited since: its " \
                            f"{RECORD_DIGEST} no longer matches the rest)"
            continue
        paths = [Path(meta["path"]) for meta in inputs.values() if isinstance(meta, dict) and meta.get("path")]
        gone = [str(path) for path in paths if not (root / path).exists()]
        behind = {path: link for path in gone if (link := _dangling_link(results, root / path)) is not None}
        if not folders or folder in suite:  # refused below; a reader no rule of this run writes is let be: no job of
            dangling.update(behind.values())  # this run reads what lies behind the link, and none of it can be seen
        gone = [path for path in gone if path not in behind]
        if any(not _outside(root / path, results) for path in map(Path, gone)):
            stale[folder] = f"it was built from {', '.join(gone)}, {_no_longer_exist(gone)}"
        elif gone:  # data of the user's moved away: stamped only, so that putting it back reruns nothing
            stale[folder] = f"its input {', '.join(gone)} {GONE_INPUT}"
            if (not folders or folder in suite) and folder in params:  # its job would rerun, and could not read it
                missing += _missing_data(root, folder, gone, params[folder], load)
        if folder not in stale:
            readers[folder] = inputs
        for path in paths:  # an input stage folder emptied, or its record deleted: not found by its stage.json
            unrecorded = _unrecorded(root, path, results)
            if unrecorded is not None and (not folders or unrecorded in suite):  # a folder no rule writes: no job
                stale.setdefault(unrecorded, f"damaged: {STAGE_RECORD} is missing")
    if table.is_file():
        beyond, lacking = _rows_unlike(table, expected)
        gone = _gone_evaluations(root, table, expected)
        if gone:
            stale[table] = f"it was built from {', '.join(gone[:3])}{' and more' if len(gone) > 3 else ''}, " \
                           f"{_no_longer_exist(gone)}"
        elif beyond or lacking:
            stale[table] = "it " + ", and ".join(
                f"{what}: {', '.join(rows[:3])}{' and more' if len(rows) > 3 else ''}"
                for what, rows in (("holds rows the suite no longer names", beyond),
                                   ("lacks rows the suite names", lacking)) if rows)
    if missing:  # before anything is marked: the folder is kept as built
        raise DataError("; ".join(missing))
    refuse_dangling(dangling)  # a suite folder that is a link to nothing, something on record was built from
    for folder in [*expected, *folders]:  # emptied, or its record deleted before anything read it
        if folder.is_dir() and not (folder / STAGE_RECORD).is_file():
            stale.setdefault(folder, f"damaged: {STAGE_RECORD} is missing")
        elif folder.exists() and not folder.is_dir():  # Snakemake takes it as the output, and removes it to rerun
            stale.setdefault(folder, FILE_IN_PLACE)
    stale.update(_unverified(expected, stale, cache))  # before the readers: a damaged one is not read as an input
    stale.update(_changed_inputs(root, readers, stale, cache))
    for written, others in (siblings or {}).items():
        missing = [str(p) for p in others if not p.is_file()]
        if written.is_file() and written not in stale and missing:
            stale[written] = f"{', '.join(missing)}, written with it, {'is' if len(missing) == 1 else 'are'} missing"
        changed = _changed_since_written(written) if written.is_file() and written not in stale else None
        if changed:
            stale[written] = changed
        elif written.is_file() and written not in stale and _put_back(root, written, files_record(written)):
            stale[written] = f"{files_record(written)}, the digests of what its stage wrote, {PUT_BACK}"
        elif written.is_file() and written not in stale and not snakemake_knows(root, written) \
                and (code := table_code_changed(written, cache, root)):
            unknown = NOT_BY_SNAKEMAKE if last_written(root, written) is None else NO_SNAKEMAKE_RECORD
            stale[written] = f"{CODE_CHANGED} ({_some(code)}), {unknown}"
    if table.is_file() and table not in stale and (unlike := _built_unlike(root, table, expected)) is not None:
        stale[table] = unlike  # after the checks of its own files: what its record says is then what was built
    return stale


def _missing_data(root: Path, folder: Path, gone: list[str], source: ParamsSource,
                  load: Optional[Callable[[str], object]] = None) -> list[str]:
    """A line naming those of ``gone`` (inputs from outside ``results/`` the stage folder ``folder`` was built from,
    which no longer exist; relative to the project's ``root``) that the task file its job reads (``source``, read
    with ``load``) still names, at a key of :func:`grueflow.pipeline.task_paths` (the path, or a folder above it): a
    disk not mounted, a folder renamed. Its job would rerun and fail for want of them, and Snakemake deletes the
    folder as the job starts; the person decides: put them back, or change the keys (a task file naming other data
    changes the job's params, which rebuilds it). ``[]`` where the task file names none of them, or cannot be read
    (the suite's validation says why)."""
    if source.task_file is None:
        return []
    try:
        task = load(str(source.task_file)) if load is not None else read_yaml(source.task_file)
    except (ConfigError, OSError):
        return []
    here = Path(os.path.abspath(root))  # where the stages read relative paths from
    named = [(key, Path(os.path.abspath(root / os.path.expanduser(text)))) for key, text, _ in task_paths(task)
             if text.strip()]
    named = [(key, path) for key, path in named if not here.is_relative_to(path)]  # ".", "..": no data's own name
    found: dict[str, str] = {}  # gone path -> the key naming it
    for path in gone:
        absolute = Path(os.path.abspath(root / path))
        found.update({path: key for key, text in reversed(named) if absolute.is_relative_to(text)})
    if not found:
        return []
    keys = list(dict.fromkeys(found.values()))
    return [f"{folder} was built from {', '.join(found)}, {_no_longer_exist(list(found))} (a disk not mounted, a "
            f"folder moved or renamed?), and {source.task_file} still names {'it' if len(found) == 1 else 'them'} "
            f"({', '.join(keys)}): put the data back, or change {'that key' if len(keys) == 1 else 'those keys'} to "
            f"name other data (its job then rebuilds {folder}); nothing was run, and {folder} is kept"]


def _unmatched(folder: Path, files: list[Path]) -> str:
    """Why the stage folder ``folder`` is stale when ``files`` of it have their listed size and another digest:
    ``"damaged: metrics.json does not match the digest its stage recorded"`` (ending with :data:`UNMATCHED`)."""
    one = len(files) == 1
    return f"damaged: {listed(folder, files)} {'does' if one else 'do'} not match the digest{'' if one else 's'} " \
           f"{UNMATCHED}"


def _no_longer_exist(gone: list[str]) -> str:
    """``which no longer exists`` for one path of ``gone``, ``which no longer exist`` for more."""
    return "which no longer exists" if len(gone) == 1 else "which no longer exist"


def _damage(folder: Path) -> Optional[str]:
    """Why the stage folder ``folder`` (which holds a ``stage.json``) does not match its stage record, every file
    its manifest lists read (:func:`grueflow.io.check_stage_output` for the manifest, sizes and links, then
    :func:`_unlike_manifest`): ``"damaged: <file> does not match the digest its stage recorded"``, naming each such
    file (:func:`_unmatched`), or as :func:`stale_outputs` names the other damage; None where it matches."""
    try:
        check_stage_output(folder, deep=False)
    except MissingDataError as err:  # "<folder> is damaged: <file> is missing; delete ..."
        return str(err).split(";")[0].replace(f"{os.path.abspath(folder)} is ", "")
    replaced = _unlike_manifest(folder, cached=True)
    return _unmatched(folder, replaced) if replaced else None


def _unlike_manifest(folder: Path, *, other_size: bool = False, record: bool = False,
                     locked: Optional[Mapping[str, object]] = None, cached: bool = False) -> list[Path]:
    """The files of the stage folder ``folder`` that its ``stage.json`` manifest does not vouch for, whatever their
    times (``dvc checkout`` sets them anew), sorted; ``[]`` where the folder holds no readable manifest (nothing to go
    by). Only regular files (or links to one) are looked at.

    - A file the manifest lists at the size it has and whose digest is not the one listed counts: what
      :func:`grueflow.keep.edited_outputs` finds among the files newer than the record, and also a same-size
      replacement that kept an older time (``cp -p``, ``rsync -a`` from a backup, ``touch -d``), which
      :func:`grueflow.keep.unvouched` vouches for by its size.
    - ``other_size``: so does one it lists at another size, or with no size (by default left to the size check,
      :func:`grueflow.io.check_stage_output`).
    - ``record``: so does the ``stage.json`` itself where its bytes are not the ones a stage writes
      (:func:`grueflow.io.as_written`).
    - ``locked``: only the files whose paths it holds are looked at (``dvc.lock``'s file outs, by path,
      :func:`locked_stages`); None: every one.
    - ``cached``: each digest is read through the cache of :func:`content_digest` (:data:`_KNOWN`, by the file's
      stat signature), so the copy made before a rebuild (:func:`mark_stale`), and a later run while the folder is
      as damaged, read none again; else each file is read now."""
    try:
        listed_files = read_json(folder / STAGE_RECORD)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not isinstance(listed_files, dict):
        return []
    unlike = []
    for name in sorted({STAGE_RECORD, *listed_files} if record else listed_files):
        file, meta = folder / name, listed_files.get(name)
        if locked is not None and file.as_posix() not in locked:
            continue
        try:
            info = file.stat()
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        if record and name == STAGE_RECORD:
            vouched = as_written(file)
        elif isinstance(meta, dict) and info.st_size == meta.get("bytes"):
            digest = _cached_fingerprint(str(file), stat_signature(info))[0] if cached else fingerprint(file)
            vouched = digest == meta.get("sha256")
        else:  # listed at another size, or with none: counted with other_size alone
            vouched = not other_size
        if not vouched:
            unlike.append(file)
    return unlike


def _gone_evaluations(root: Path, table: Path, expected: list[Path]) -> list[str]:
    """The suite's evaluation folders ``expected`` that no longer exist and that the GRUE table ``table`` was built
    from: those its stage recorded reading (:func:`_built_from`), or, where its record names none (written before
    tables recorded them, or one that does not vouch for the table), each missing folder whose ``(task, method)``
    row the table holds with as many seeds as the suite names for it (all of them where the table does not read as
    a CSV with ``task`` and ``method`` columns). A folder the suite names that the table was never built from (a
    seed, task or method added since) is none of these: the table lacks its row (:func:`_rows_unlike`), or its
    record names other folders (:func:`_built_unlike`)."""
    missing = [folder for folder in expected if not folder.is_dir()]
    if not missing:
        return []
    built = _built_from(root, table)
    if built is not None:
        return [str(folder) for folder in missing if _absolute(folder) in built]
    rows = _table_rows(table)
    if rows is None:
        return [str(folder) for folder in missing]
    counts = _seed_counts(expected)
    held = {(task, method): n_seeds for task, method, n_seeds in rows}
    return [str(folder) for folder in missing if (key := _pair(folder)) in held
            and not (held[key].isdigit() and int(held[key]) < counts[key])]


def _pair(folder: Path) -> Optional[tuple[str, str]]:
    """``(task, method)`` of an evaluation folder ``results/eval/<task>/<method>/seed<k>``; None for a shorter path."""
    return (folder.parts[-3], folder.parts[-2]) if len(folder.parts) >= 3 else None


def _seed_counts(expected: Iterable[Path]) -> dict[tuple[str, str], int]:
    """How many of the evaluation folders ``expected`` each ``(task, method)`` has (:func:`_pair`)."""
    counts: dict[tuple[str, str], int] = {}
    for folder in expected:
        if (key := _pair(folder)) is not None:
            counts[key] = counts.get(key, 0) + 1
    return counts


def _table_rows(table: Path) -> Optional[list[tuple[str, str, str]]]:
    """``(task, method, n_seeds)`` of each row of the GRUE table's CSV ``table`` (``n_seeds`` "" where it has none);
    None where it does not read as a CSV with ``task`` and ``method`` columns, or a row lacks either."""
    try:
        with open(table, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns, rows = reader.fieldnames or (), list(reader)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not {"task", "method"} <= set(columns):  # an empty file too: no header to read
        return None
    found = []
    for row in rows:
        task, method = row.get("task"), row.get("method")
        if task is None or method is None:
            return None
        found.append((task, method, row.get("n_seeds") or ""))
    return found


def _seal_broken(record: object) -> bool:
    """Whether the stage record ``record`` (read as JSON) holds a :data:`grueflow.io.RECORD_DIGEST` that is not the
    digest of the rest of it (:func:`grueflow.io.sealed`): edited by hand after its stage wrote it (a param changed,
    a note added), so it no longer describes the folder. False for a record written before records held one."""
    if not isinstance(record, dict) or not isinstance(record.get(RECORD_DIGEST), str):
        return False
    rest = {key: value for key, value in record.items() if key != RECORD_DIGEST}
    try:
        return sealed(rest)[RECORD_DIGEST] != record[RECORD_DIGEST]
    except (TypeError, ValueError):  # a value JSON cannot write again as written (NaN): not the stage's
        return True


def _rows_unlike(table: Path, expected: Iterable[Path]) -> tuple[list[str], list[str]]:
    """How the rows of the GRUE table's CSV ``table`` differ from the suite's evaluations ``expected``
    (``results/eval/<task>/<method>/seed<k>``), of which aggregate writes one row per ``(task, method)`` with their
    count as ``n_seeds``: the rows the suite no longer stands for (a task or method it dropped, or more seeds than it
    names now), and the rows it names that the table lacks (a task or method missing, or fewer seeds), each as
    ``<task>/<method>``, with ``(<n> seeds)`` or ``(<n> of <m> seeds)`` where only the count differs. Snakemake sees
    a changed grid only by its record of the aggregate job's params; without that record (``.snakemake`` removed, a
    project ``dvc repro`` built) the table kept the rows of the grid it was built for (a run of one task,
    ``--config tasks=[...]``). ``([], [])`` where ``expected`` is empty (no suite given) or the table does not read as
    a CSV with ``task`` and ``method`` columns."""
    seeds = _seed_counts(expected)
    rows = _table_rows(table) if seeds else None
    if rows is None:
        return [], []
    beyond, lacking, seen = [], [], set()
    for task, method, n_seeds in rows:
        key = (task, method)
        seen.add(key)
        if key not in seeds:
            beyond.append(f"{key[0]}/{key[1]}")
        elif n_seeds.isdigit() and int(n_seeds) > seeds[key]:
            beyond.append(f"{key[0]}/{key[1]} ({n_seeds} seeds)")
        elif n_seeds.isdigit() and int(n_seeds) < seeds[key]:
            lacking.append(f"{key[0]}/{key[1]} ({n_seeds} of {seeds[key]} seeds)")
    lacking += [f"{task}/{method}" for task, method in seeds if (task, method) not in seen]
    return beyond, lacking


def _built_unlike(root: Path, table: Path, expected: list[Path]) -> Optional[str]:
    """Why the GRUE table ``table`` is not built from the suite's evaluations ``expected`` by the stage folders its
    stage recorded reading (:data:`grueflow.io.BUILT_FROM` in its :func:`grueflow.io.files_record`, paths relative
    to the project ``root``), or None where it is. Other folders than the suite's (seeds 0 and 1 where the suite
    names 2 and 3, all on disk: the rows' count is the same) make it ``"it was built from seed0, seed1 of
    results/eval/sentiment/ppo (the suite names seed2, seed3)"``; a folder rebuilt since, its ``stage.json`` not the
    one the stage read (:func:`grueflow.io.record_digest`), ``"its input <folder> changed since it was built"`` (as a
    stage folder's changed input: stamped alone, :data:`AS_BUILT`). Nothing is judged (None) where ``expected`` is
    empty (no suite given), or where the record names no folders (written before tables recorded them, or by a stage
    that records none: :func:`_rows_unlike` judges those) or does not vouch for the table's bytes (another table put
    in its place: the check of its digests says so)."""
    recorded = _built_from(root, table) if expected else None
    if recorded is None:
        return None
    named = {_absolute(folder): folder for folder in expected}
    if set(recorded) != set(named):
        return "it was built from " + _folders_unlike(root, recorded, named)
    changed = [str(named[path]) for path in named if recorded[path] != record_digest(path)]
    return f"its input {', '.join(changed[:3])}{' and more' if len(changed) > 3 else ''} {CHANGED_INPUT}" \
        if changed else None


def _built_from(root: Path, table: Path) -> Optional[dict[str, Optional[str]]]:
    """The stage folders the GRUE table ``table`` was built from, by its :func:`grueflow.io.files_record`
    (:data:`grueflow.io.BUILT_FROM`, paths relative to the project ``root``): ``{folder as an :func:`_absolute`
    path: the digest of its stage.json then}``; None where the record names no folders (written before tables
    recorded them, or by a stage that records none), cannot be read, or does not vouch for the table's bytes
    (another table put in its place: the check of its digests says so)."""
    try:
        record = read_json(files_record(table))
    except (OSError, ValueError):
        return None
    built = record.get(BUILT_FROM) if isinstance(record, dict) else None
    if not isinstance(built, dict) or not _vouches(root, record, table):
        return None
    return {_absolute(root / name): digest for name, digest in built.items()}


def _vouches(root: Path, record: Mapping, table: Path) -> bool:
    """Whether the files record ``record`` holds the sha256 of ``table``'s bytes now, under the table's path
    (relative to the project ``root``, as its stage gave it)."""
    digests = written_digests(record) or {}
    return any(_absolute(root / path) == _absolute(table) and sha256_bytes(table) == digest
               for path, digest in digests.items())


def _absolute(path: Path) -> str:
    """``path`` absolute and normalised, links kept: a folder as a record names it, comparable with another name."""
    return os.path.normpath(os.path.abspath(path))


def _folders_unlike(root: Path, recorded: Iterable[str], named: Iterable[str]) -> str:
    """The folders a table was built from (``recorded``) against those the suite names (``named``), both as
    :func:`_absolute` paths, for each parent folder (``results/eval/<task>/<method>``) where they differ, in the
    suite's order: ``"seed0, seed1 of results/eval/sentiment/ppo (the suite names seed2, seed3)"``, three at most,
    then ``" and more"``; a parent with none on one side says ``none``, and a parent is named relative to ``root``
    where it lies in it."""
    parents: dict[str, tuple[dict[str, None], dict[str, None]]] = {}  # {parent: (names built, names named)}, ordered
    for side, paths in ((1, named), (0, recorded)):
        for path in paths:
            parent, name = os.path.split(path)
            parents.setdefault(parent, ({}, {}))[side][name] = None
    base = Path(_absolute(root))
    unlike = [f"{', '.join(built) or 'none'} of {_shown(Path(parent), base)} (the suite names "
              f"{', '.join(names) or 'none'})"
              for parent, (built, names) in parents.items() if set(built) != set(names)]
    return "; ".join(unlike[:3]) + (" and more" if len(unlike) > 3 else "")


def _shown(path: Path, base: Path) -> str:
    """The absolute ``path`` relative to ``base`` where it lies in it, else as it is."""
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


def _unverified(expected: Iterable[Path], stale: dict[Path, str], cache: Optional[Path]) -> dict[Path, str]:
    """Each of the suite's evaluation folders ``expected`` (not ``stale`` already, holding a ``stage.json``) whose
    files do not match its stage record, read whole (:func:`_damage`), with why; only those whose files changed
    since one was last found as written are read (their :func:`_tree_signature`, kept in ``cache`` with
    :data:`VERIFIED` where it matched; None: this process's only). Readers that record their inputs' digests have
    a changed input folder read by :func:`_changed_inputs`; the GRUE table and the human-evaluation exports record
    none of an evaluation's files, so a same-size replacement that kept an older time (``cp -p``, ``rsync -a`` from
    a backup, ``touch -d``), which the size and time look of :func:`stale_outputs` cannot tell, would otherwise be
    found only by the reader's own check, which refuses it on every run. Its change time moves, so its signature
    does: the folder is stale itself, rebuilt before what reads it. A folder found damaged is read again on each
    run until it is rebuilt (its signature is kept only once it matches; its files' digests are kept too, so an
    unchanged damaged folder is not read again)."""
    if cache is not None:
        _load(cache)
    damaged, added = {}, False
    for folder in expected:
        if folder in stale or not (folder / STAGE_RECORD).is_file():
            continue
        key, signature = f"{folder}\0{VERIFIED}", _tree_signature(folder)
        if _KNOWN.get(key) == [signature, VERIFIED]:
            continue
        why, added = _damage(folder), True
        if why is not None:
            damaged[folder] = why
        else:
            _KNOWN[key] = [signature, VERIFIED]
    if added and cache is not None:
        _save(cache)
    return damaged


def _changed_inputs(root: Path, readers: dict[Path, dict], stale: dict[Path, str],
                    cache: Optional[Path]) -> dict[Path, str]:
    """Each of ``readers`` ({stage folder: its recorded inputs}) one of whose inputs (a path relative to ``root``)
    exists with another digest than recorded, with why (:func:`changed_inputs`)."""
    changed, damaged = changed_inputs(root, readers, stale, cache)
    return {**damaged, **{folder: f"its input {', '.join(paths)} {CHANGED_INPUT}" for folder, paths in changed.items()}}


def changed_inputs(root: Path, readers: Mapping[Path, Mapping], stale: Optional[Mapping[Path, str]] = None,
                   cache: Optional[Path] = None) -> tuple[dict[Path, list[str]], dict[Path, str]]:
    """``({reader: its changed inputs}, {damaged input folder: why})``: each of ``readers`` ({stage folder: its
    recorded inputs}) with the inputs (paths as recorded, relative to ``root``) that exist with another digest than
    recorded, and each input stage folder that does not match its own record. An input that no longer exists is
    neither. An input whose stage folder is ``stale`` (damaged, no record) is not read: it is rebuilt, and its
    readers rerun after it as Snakemake reruns what reads a newer folder. Each input is looked at once however many
    stages read it (a datapool), and read only where :func:`input_digest` cannot answer from ``cache`` (None: this
    process's only). A file a person put in an input stage folder is left out, as the reader left it out of the
    digest it recorded (:func:`grueflow.keep.persons_files`): no stage reads it, and a run copies it out. An input
    stage folder whose digest changed is checked against its own record, its files read (:func:`_damage`): one that
    fails it is damaged itself (a file replaced by another of its size that kept an older time, ``cp -p`` from the
    wrong backup, which the cheap look of :func:`stale_outputs` at its own files cannot tell), and is stale with
    why, to be rebuilt before its readers (its readers are not listed for it)."""
    stale = stale or {}
    if cache is not None:
        _load(cache)
    digests: dict[Path, str] = {}
    computed, changed_readers, damaged = False, {}, {}
    for folder, inputs in readers.items():
        changed = []
        for meta in inputs.values():
            if not isinstance(meta, dict) or not meta.get("path") or not isinstance(meta.get("sha256"), str):
                continue
            path = root / meta["path"]
            owner = path.parent if path.name == MODEL_DIR else path  # the stage folder, for one under results/
            if not path.exists() or owner in stale or owner in damaged:
                continue
            if path not in digests:
                digests[path], new = input_digest(path, persons_files(path))  # as the reader recorded it
                computed |= new
            if digests[path] != meta["sha256"] and path.is_dir() and any(path.rglob(SNAKEMAKE_TIMESTAMP)):
                older, new = input_digest(path, persons_files(path), markers=True)  # a record from before the
                computed |= new  # markers were left out of digests: the same content, digested with them
                if older == meta["sha256"]:
                    continue
            if digests[path] != meta["sha256"]:
                why = None
                if (owner / STAGE_RECORD).is_file():  # its files' digests are kept: not read again while it is so
                    why, computed = _damage(owner), True
                if why is not None:  # "damaged: <file> does not match the digest its stage recorded"
                    damaged[owner] = why
                    continue
                changed.append(meta["path"])
        if changed:
            changed_readers[folder] = changed
    if computed and cache is not None:
        _save(cache)
    return changed_readers, damaged


def rebuilt_upstream(root: Path, table: Path) -> list[str]:
    """What changed upstream of the table ``table`` (a table's first file, :data:`TABLES`, under the project ``root``)
    after the stages that read it ran, each as a path relative to ``root`` as the records name it, in the order
    found: an evaluation the table's files record names (:func:`_built_from`) whose ``stage.json`` is not the one the
    table read (rebuilt since); and, up from those through every stage folder's recorded inputs, an input whose
    content is not the digest its reader recorded (:func:`changed_inputs`: a model rebuilt, a stage run by hand, a
    datapool's data replaced) or an input stage folder that fails its own record. Empty where the table's record
    names no folders or does not vouch for its bytes. Read-only, and cheap where nothing changed: an input is read
    only where something under it changed (its change time, which no copy or edit keeps) after its reader's
    ``stage.json`` was written, and no digest cache is written."""
    built = _built_from(root, table)
    if built is None:
        return []
    base = Path(_absolute(root))
    found = [_shown(Path(path), base) for path, digest in built.items()
             if os.path.isdir(path) and record_digest(path) != digest]
    queue = [Path(path) for path in built if (Path(path) / STAGE_RECORD).is_file()]
    seen = set(queue)
    while queue:
        folder = queue.pop(0)
        try:
            record = read_json(folder / STAGE_RECORD)
            since = (folder / STAGE_RECORD).stat().st_ctime_ns
        except (OSError, ValueError):
            continue
        recorded = record.get("inputs") if isinstance(record, dict) else None
        inputs = {name: meta for name, meta in (recorded.items() if isinstance(recorded, dict) else ())
                  if isinstance(meta, dict) and isinstance(meta.get("path"), str)}
        recent = {name: meta for name, meta in inputs.items() if _changed_after(root / meta["path"], since)}
        changed, damaged = changed_inputs(root, {folder: recent})
        found += changed.get(folder, []) + [_shown(Path(_absolute(path)), base) for path in damaged]
        for meta in inputs.values():
            path = root / meta["path"]
            owner = path.parent if path.name == MODEL_DIR else path
            if owner not in seen and (owner / STAGE_RECORD).is_file():
                seen.add(owner)
                queue.append(owner)
    return list(dict.fromkeys(found))


def _changed_after(path: Path, since: int) -> bool:
    """Whether the file or folder ``path``, or any file under it, changed (its ``st_ctime_ns``) after ``since``, or
    at that time (a clock's tick may hold both); False where it is not there."""
    try:
        files = [path, *path.rglob("*")] if path.is_dir() else [path]
        return any(file.stat().st_ctime_ns >= since for file in files)
    except OSError:
        return False


def edited_files(first: Path, others: Iterable[Path], root: Path = Path(".")) -> list[Path]:
    """The files written with the table ``first`` (``first`` and ``others``, paths relative to the project ``root``;
    the working folder where none is given) whose bytes are not what their stage wrote: those that differ from the
    digests it recorded (:func:`grueflow.io.files_record`), or every one there where that record is missing or
    unreadable (nothing then tells which were edited). As paths relative to ``root``."""
    try:
        recorded = written_digests(read_json(root / files_record(first)))
    except (OSError, ValueError):
        recorded = None
    if recorded is None:
        return [path for path in (first, *others) if (root / path).is_file()]
    return [Path(path) for path, digest in recorded.items()
            if (root / path).is_file() and sha256_bytes(root / path) != digest]


def keep_edited_tables(root: Path, tables: Mapping[Path, Iterable[Path]]) -> list[str]:
    """Copy each file written with a table (``tables``: {the table's first file: the files written with it}, paths
    under the project ``root``) whose bytes are not what its stage wrote (:func:`edited_files`: a note added by hand)
    to ``.grueflow/replaced/``, once per content; one line per table a copy was made of now, as the Snakefile's stale
    check words it (:func:`mark_stale`). For an engine that restores a table's files with no check of its own
    (DVC's checkout of a cached stage's outs), run before it touches any. DVC restores a table with its own record
    (:data:`grueflow.pipeline.TABLE_RECORD`, an out of the table stage), so a file unlike its record is an edit,
    whatever ``dvc.lock`` says of it; only where ``dvc.lock`` under ``root`` holds no entry for the record (written
    by a ``dvc.yaml`` of before, whose table stage reruns once on the new one) is a file whose bytes it records taken
    as DVC's own (an earlier table restored from its run cache, which the record of the last run does not describe).
    A copy that fails is a :class:`DataError`: nothing may run."""
    lines, locked = [], None
    for first, others in tables.items():
        edited = edited_files(first, others) if first.is_file() else []
        if edited:
            locked = locked_outputs(root / "dvc.lock") if locked is None else locked
            if files_record(first).as_posix() not in locked:  # a record DVC does not restore with the table
                edited = [file for file in edited if not locked_as_is(root / file, locked.get(file.as_posix()))]
        if edited and any(kept_copy(file, root, [file]) is None for file in edited):
            why = _changed_since_written(first) or "it is not what its stage wrote (edited or replaced since)"
            lines.append(f"grueflow: {first} is stale ({why}); its job reruns{_copies_of(edited, root)}")
    return lines


def dvc_kept_edits(root: Path, tables: Mapping[Path, Iterable[Path]],
                   folders: Iterable[Path]) -> list[tuple[Path, Path, str]]:
    """What DVC would keep as a pipeline result though its stage did not write it: each file out (``dvc.lock`` under
    the project ``root``, :func:`locked_stages`) whose bytes differ from what its own grueflow record vouches for,
    while ``dvc.lock`` records both the file and that record with their bytes as they are (``dvc commit`` took a
    hand edit as the stage's output: ``dvc status`` is then clean, and ``dvc repro`` neither reruns nor restores the
    stage). The files: those written with a table (``tables``, as :func:`keep_edited_tables`; its record
    :func:`grueflow.io.files_record`) unlike their digests (:func:`edited_files`), and those of the stage folders
    ``folders`` (DVC's outputs, :func:`output_folders`) that their ``stage.json`` does not vouch for
    (:func:`_unlike_manifest`: a metrics.json edited; the record itself edited). One entry per file, (the file, its
    record, the name of its DVC stage in ``dvc.lock``), in ``dvc.lock``'s order; a file inside a folder out
    (``model/``, a datapool) is not looked at (DVC records the folder's listing alone)."""
    locked = locked_stages(root / "dvc.lock")
    found: list[tuple[Path, Path]] = []
    for first, others in tables.items():
        if first.is_file() and (root / files_record(first)).is_file():
            found += [(file, files_record(first)) for file in edited_files(first, others)]
    for folder in folders:
        found += [(file, folder / STAGE_RECORD)
                  for file in _unlike_manifest(folder, other_size=True, record=True, locked=locked)]
    kept = [(file, record) for file, record in found
            if all(path.as_posix() in locked and locked_as_is(root / path, locked[path.as_posix()][1])
                   for path in (file, record))]
    order = list(locked)
    return [(file, record, locked[file.as_posix()][0])
            for file, record in sorted(kept, key=lambda pair: order.index(pair[0].as_posix()))]


def locked_stages(lock: Path) -> dict[str, tuple[str, dict]]:
    """The outputs the DVC lock file ``lock`` records, by path (as written there: relative to the project root), each
    as (the name of its stage there, its entry: ``md5``, and ``hash: md5`` from DVC 3 on), in the lock file's order;
    empty where there is no lock file or it does not read."""
    return {out["path"]: (name, out) for name, stage in _lock_stages(lock).items()
            for out in ((stage.get("outs") or []) if isinstance(stage, dict) else ())
            if isinstance(out, dict) and isinstance(out.get("path"), str) and isinstance(out.get("md5"), str)}


_LOCK_STAGES: dict[str, tuple[list[int], dict]] = {}  # dvc.lock as read: its stat signature, and its stages


def _lock_stages(lock: Path) -> dict:
    """The ``stages`` mapping of the DVC lock file ``lock``, read once per process while its stat signature holds;
    empty where there is no lock file or it does not read as one."""
    import yaml

    from grueflow.config import load_yaml12

    try:
        signature = stat_signature(os.stat(lock))
    except OSError:
        return {}
    key = os.path.abspath(lock)
    if key not in _LOCK_STAGES or _LOCK_STAGES[key][0] != signature:
        try:
            stages = load_yaml12(lock.read_text(encoding="utf-8")).get("stages") or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, AttributeError):
            stages = {}
        _LOCK_STAGES[key] = (signature, stages if isinstance(stages, dict) else {})
    return _LOCK_STAGES[key][1]


def dvc_unseen_edits(root: Path) -> list[str]:
    """The files that ``root/dvc.lock`` records as deps of its stages (the first, :data:`grueflow.pipeline.
    VALIDATE_SUITE`, left out: it runs on every ``dvc repro`` and digests the plugin and data files it lists from
    their content) outside ``results/``, that are files now whose bytes match none of the md5s it records of them
    (:func:`_as_locked`), and whose modification time is not the time of their last change
    (:func:`grueflow.keep.dated_apart`: a same-size rewrite in place whose time was kept or put back, whatever that
    time is, before or after dvc.lock's, or in the future). DVC's own hash cache takes a file's md5 from its inode,
    size and modification time, so it may have seen such a file as recorded at that time and miss the change; a file
    whose modification time is that of its last change (a plain edit, a ``touch``, a branch switch) holds the bytes
    DVC saw at that time, and DVC hashes it again itself where it did not. Each such file is read only while its
    stat signature (:func:`grueflow.keep.stat_signature`) is not the one kept, with the md5 it matched, in
    ``root/``:data:`VERIFIED_DEPS` when it was last read and found as recorded: its change time moves with any
    change and cannot be set back, so one rewritten since is read again. As written in ``dvc.lock`` (relative to
    ``root``), in its order; a folder dep (an md5 ending ``.dir``) is left out; empty where there is no lock file."""
    recorded: dict[str, list[dict]] = {}
    for name, entry in _lock_stages(root / "dvc.lock").items():
        deps = (entry.get("deps") or []) if isinstance(entry, dict) and name != VALIDATE_SUITE else []
        for dep in deps if isinstance(deps, list) else []:
            if isinstance(dep, dict) and isinstance(dep.get("path"), str) and isinstance(dep.get("md5"), str) \
                    and not dep["md5"].endswith(".dir") and Path(dep["path"]).parts[:1] != ("results",):
                recorded.setdefault(dep["path"], []).append(dep)
    known = read_cache(root / VERIFIED_DEPS)
    verified: dict[str, list] = {}
    unseen = []
    for path, deps in recorded.items():
        try:
            found = os.stat(root / path)
        except OSError:  # gone: DVC sees that itself
            continue
        if not stat.S_ISREG(found.st_mode) or not dated_apart(found):
            continue
        signature = stat_signature(found)
        kept = known.get(path)
        if isinstance(kept, list) and len(kept) == 2 and kept[0] == signature \
                and any(dep["md5"] == kept[1] for dep in deps):
            verified[path] = kept
            continue
        matched = next((dep["md5"] for dep in deps if _as_locked(root / path, dep)), None)
        if matched is None:
            unseen.append(path)
        else:
            verified[path] = [signature, matched]
    if verified != known:
        write_cache(root / VERIFIED_DEPS, verified)
    return unseen


def locked_outputs(lock: Path) -> dict[str, dict]:
    """The outputs the DVC lock file ``lock`` records, by path, each as its entry (:func:`locked_stages`)."""
    return {path: entry for path, (_, entry) in locked_stages(lock).items()}


def locked_as_is(path: Path, entry: Optional[Mapping]) -> bool:
    """Whether ``entry``, an output's record in dvc.lock (:func:`locked_outputs`; None: none), holds the md5 of the
    file ``path``'s bytes now as DVC computes it (of the text with CRLF as LF for an entry of DVC 2, which names no
    ``hash``): the bytes DVC itself restored or saved there."""
    if not entry or not path.is_file():
        return False
    content = path.read_bytes()
    text = content if entry.get("hash") == "md5" else content.replace(b"\r\n", b"\n")
    return hashlib.md5(text).hexdigest() == entry["md5"]


def _copies_of(edited: Iterable[Path], root: Path) -> str:
    """Copy each of the ``edited`` files of a table (:func:`edited_files`) to ``.grueflow/replaced/`` under ``root``
    (:func:`grueflow.keep.keep_copy`), and say where: ``"; a copy of <file> is kept in <place>, ..."``."""
    return "; a copy of " + ", ".join(f"{file} is kept in {keep_copy(file, root, [file])}" for file in edited)


def _changed_since_written(first: Path) -> Optional[str]:
    """Why the files written with ``first`` are not as their stage wrote them: the first whose bytes differ from the
    digest its stage recorded (:func:`grueflow.io.files_record`), or the record itself missing or unreadable (deleted,
    or lost with a copy of the visible files: nothing then vouches for the table); None when all are as written."""
    record = files_record(first)
    try:
        recorded = written_digests(read_json(record))
    except FileNotFoundError:
        return f"{record}, the digests of what its stage wrote, is missing"
    except (OSError, ValueError):
        recorded = None
    if recorded is None:
        return f"{record}, the digests of what its stage wrote, is damaged"
    changed = next((path for path, digest in recorded.items() if Path(path).is_file()
                    and sha256_bytes(path) != digest), None)
    if changed is None:
        return None
    return ("it is" if Path(changed) == first else f"{changed}, written with it, is") + \
        " not what its stage wrote (edited or replaced since)"


def recorded_folders(results: Path) -> list[Path]:
    """Every folder under ``results`` that holds a stage record, sorted; a training stage's ``*.resume`` checkpoints
    (its own, under their own records) left out."""
    return sorted(p.parent for p in results.rglob(STAGE_RECORD) if not any(
        part.endswith(".resume") for part in p.relative_to(results).parts))


def refuse_shared(suite: Iterable[Path]) -> None:
    """Raise :class:`DataError` where two of the suite's stage folders ``suite`` (as given) are one folder on disk,
    and one of them is reached through a link above it (``results/sentiment/ppo`` a link to
    ``results/sentiment/supervised+ppo``, ``results/sentiment`` to ``results/concepts``): each rule deletes and
    writes the one folder, so a rebuild of either destroys the other's run, and the two rows of the table would
    show one run. Nothing rebuilds it right while the link stays; it names the link to remove. A suite folder that
    is a link itself, under no link, is left to the stale check: Snakemake deletes the link, not what it names,
    before its job writes a folder in its place."""
    found: dict[str, Path] = {}
    for folder in sorted(set(suite)):
        if not folder.exists():
            continue
        real = os.path.realpath(folder)
        other = found.setdefault(real, folder)
        if other == folder:
            continue
        common = set(folder.parents) & set(other.parents)  # a link there (results/ on another disk) joins neither
        link = next((p for p in (*folder.parents, *other.parents) if p not in common and p.is_symlink()), None)
        if link is not None:
            raise DataError(f"{other} and {folder}, two stage folders of the suite, are one folder ({real}), as {link} "
                            f"is a link to {os.readlink(link)}: a rerun of either deletes the other's run; remove the "
                            f"link (rm {link}) and run again, which rebuilds what it stood for")


def refuse_dangling(links: Iterable[Path]) -> None:
    """Raise :class:`DataError` naming each of ``links`` (links under, or at, ``results/`` that lead to nothing: a
    disk not mounted, a folder moved away), where there are any. What lies behind such a link is not there to check,
    and no job can rebuild it: Snakemake takes what a record names there for gone and plans nothing (what reads it
    has its outputs), or fails to make a folder through it; and were it rebuilt, the run would be written beside the
    one that comes back with the disk. The person decides: mount it, or remove the link to rebuild what it held."""
    lines = [f"{link} is a link to {os.readlink(link)}, which does not exist (a disk not mounted?): mount it, or "
             f"remove the link (rm {link}) to rebuild what it held here" for link in sorted(set(links))]
    if lines:
        raise DataError("; ".join(lines))


def _dangling_link(results: Path, path: Path) -> Optional[Path]:
    """The first link on the way from ``results`` (itself included) down to ``path`` (itself included, a path under
    ``results`` as given) that leads to nothing; None where there is none, or ``path`` is not under ``results``."""
    if path != results and not path.is_relative_to(results):
        return None
    parts = path.relative_to(results).parts
    way = [results, *(results.joinpath(*parts[:depth]) for depth in range(1, len(parts) + 1))]
    return next((step for step in way if step.is_symlink() and not step.exists()), None)


def refuse_through_link(folder: Path, results: Path, written: str, itself: bool = False) -> None:
    """Raise :class:`DataError` where the stage folder ``folder``, whose record names another output path
    (``written``: it holds another run's folder, or a copy of one), is reached through a link inside ``results``
    above it (``results/sentiment`` a link to ``results/concepts``, to another checkout's, or to a backup kept
    elsewhere): Snakemake's rebuild of ``folder`` would delete and write what the link leads to, whatever the suite
    holds (:func:`refuse_shared` catches two suite folders made one). A folder moved elsewhere and linked back records
    its own path and never comes here; a folder that is a link itself is not refused (Snakemake deletes the link, not
    what it names), unless ``itself``: DVC checks out and writes a model stage's outs (``<folder>/model``) through
    a link at ``folder``. The message names the link to remove, the one fix that is safe whatever the link leads to
    (what it leads to may be another checkout's or a backup's finished run: never to be moved or deleted from
    here)."""
    if folder.is_symlink() and not itself:
        return
    inside = [p for p in ([folder] if itself else []) + list(folder.parents) if p != results and results in p.parents]
    link = next((p for p in inside if p.is_symlink()), None)
    if link is not None:
        raise DataError(f"{folder} holds the stage folder written at {written} (its {STAGE_RECORD} records that "
                        f"path), reached through {link}, a link to {os.readlink(link)}: {os.path.realpath(folder)} is "
                        f"that other run's folder, and a rebuild of {folder} would delete that run; remove the link "
                        f"(rm {link}) and run again, which rebuilds {link} here")


def refuse_links(results: Path, outputs: Iterable[Path]) -> None:
    """Raise :class:`DataError` where writing the suite's ``outputs`` (the paths its stages write, under
    ``results``) would reach another run's folder through a link: two of its stage folders one on disk
    (:func:`refuse_shared`), or one whose record names another output path under a link inside ``results``
    (:func:`refuse_through_link`); and where a link at or above one of ``outputs`` leads to nothing
    (:func:`refuse_dangling`). Its stage folders: :func:`output_folders`. Run where an engine writes or checks out
    outputs with no check of its own (DVC's first stage), before it touches any."""
    root = results.parent
    outputs = [Path(path) for path in outputs]
    refuse_dangling({link for path in outputs if (link := _dangling_link(results, path)) is not None})
    folders = output_folders(outputs)
    refuse_shared(folders)
    for folder in folders:
        try:
            record = read_json(folder / STAGE_RECORD)
        except (OSError, ValueError):
            continue
        written = written_for(root, folder, record.get("out") if isinstance(record, dict) else None)
        if written is not None:
            refuse_through_link(folder, results, written, itself=True)


def output_folders(outputs: Iterable[Path]) -> list[Path]:
    """The stage folders among an engine's ``outputs``, sorted: the folder of each ``stage.json`` among them (DVC's
    outs of a model stage: ``<folder>/model``, ``<folder>/stage.json``), and each of them that is a folder holding
    one (a datapool)."""
    return sorted({path.parent if path.name == STAGE_RECORD else path for path in map(Path, outputs)
                   if path.name == STAGE_RECORD or (path / STAGE_RECORD).is_file()})


def _recorded_suite_folders(suite: Iterable[Path]) -> list[Path]:
    """Those of the suite's stage folders ``suite`` (as given, links kept) that hold a stage record, sorted: the
    ones :func:`recorded_folders` cannot find, as its walk enters no linked folder (a suite folder that is a link, or
    lies under one: ``results/eval`` on another disk, a method's folder linked to another's), are checked as any
    other, at the path their rule writes (:func:`grueflow.io.written_for` compares it with the path their record
    names, links kept)."""
    return sorted(folder for folder in suite if (folder / STAGE_RECORD).is_file())


def keep_user_files(results: Path, folders: Iterable[Path], done: Iterable[Path] = ()) -> list[str]:
    """Copy what each stage folder holds that no stage record vouches for (:func:`unvouched`, :func:`keep_copy`),
    before any job runs; one line per folder that holds any. The folders: ``folders`` (every stage folder the
    suite's stages write: a file in one's place is copied too) and every folder under ``results`` with a stage
    record (:func:`recorded_folders`), but those in ``done`` (copied already, with their stale line).

    A stage that reruns replaces its folder whole, whatever the reason (a changed param or input, the folder
    damaged): Snakemake deletes a job's outputs before the job. So a file a person put in a stage folder is
    copied out of ``results/`` while it is still there, once per content, whether or not anything reruns this
    time. A copy that fails is a :class:`DataError`: nothing may run."""
    lines, done = [], set(done)
    for folder in sorted(set(folders) | set(recorded_folders(results))):
        files = [] if folder in done else as_deleted(folder, unvouched(folder))
        if not files:
            continue
        place = keep_copy(folder, results.parent, files)
        what = "is a file where a stage folder belongs" if files == [folder] else \
            f"holds what no stage record vouches for ({listed(folder, files)})"
        lines.append(f"grueflow: {folder} {what}; a copy is kept in {place} (a rerun of its stage replaces it whole)"
                     f"{links_left(folder, files)}")
    return lines


def keep_answered(root: Path, answered: Iterable[tuple[Path, Optional[Path], Path]]) -> list[str]:
    """Copy each human-evaluation batch that has answers on record, and its key, whole to ``.grueflow/replaced/``
    under ``root`` (:func:`grueflow.keep.keep_batch`, by content: the same batch exported again is not copied
    again), before any job runs; one line per batch a copy was made of now. ``answered``: (a batch folder, a pairwise
    batch's key file or None, the folder of its answers: ``data/human/<task>/<batch>/``, which holds some).

    An upstream change that alters the predictions re-exports the batch, and Snakemake deletes the batch folder and
    its key before the export runs, so the export cannot refuse to replace another batch's key: the batch the
    answers belong to, and its key, the only map from their item ids to the systems, would be lost (a generation on
    a GPU is not bit for bit the same again). Nothing tells whether the next run re-exports it, so a dry run copies
    too (a batch with no answers yet is copied when a run re-exports it: :func:`keep_reexported`). The import names
    the copy where answers are of an earlier batch (:func:`grueflow.human.batch.kept_batch`). A copy that fails is a
    :class:`DataError`: nothing may run."""
    lines = []
    for folder, key, answers in answered:
        copies, new = keep_batch(folder, key, root)
        if new:
            lines.append(f"grueflow: {folder} has answers in {answers}; {batch_copies_text(copies)} (an upstream "
                         f"change that alters its predictions exports it again, replacing it)")
    return lines


def keep_reexported(root: Path, batches: Iterable[tuple[Path, Optional[Path]]]) -> list[str]:
    """Copy each human-evaluation batch that a run is about to export again, and its key, whole to
    ``.grueflow/replaced/`` under ``root`` (:func:`grueflow.keep.keep_batch`, by content); one line per batch a copy
    was made of now. ``batches``: (a batch folder, a pairwise batch's key file or None) of each export job the run
    will run (the Snakefile's ``onstart``, under Snakemake's lock, once the DAG is known and before Snakemake deletes
    a job's outputs); a batch not yet exported is no copy and no line.

    A batch goes out to annotators as soon as it is exported, before any answer is on record
    (:func:`keep_answered` copies those): its re-export after an upstream change would delete the items they are
    answering and the key, the only map from their item ids to the systems. A copy that fails is a
    :class:`DataError`: nothing may run."""
    lines = []
    for folder, key in batches:
        copies, new = keep_batch(folder, key, root)
        if new:
            lines.append(f"grueflow: {folder} is exported again, replacing it; {batch_copies_text(copies)} (the "
                         f"batch annotators may be answering, and the map from their item ids to the systems)")
    return lines


def answered_paths(batches: Iterable[tuple[str, str]]) -> list[tuple[Path, Optional[Path], Path]]:
    """(batch folder, its key file or None, its answers folder) of each ``(task, batch)`` of ``batches`` (those with
    answers: :attr:`grueflow.human.layout.AnswersTree.batches`), at the paths the export stages write them
    (:data:`grueflow.pipeline.STAGES`; a Likert batch has no key): what :func:`keep_answered` takes."""
    pairwise = STAGES["export_human_pairwise"].outputs
    found = []
    for task, batch in batches:
        folder, key = (pairwise[name].replace(PAIRWISE_BATCH, batch).format(task=task) for name in ("batch", "key"))
        found.append((Path(folder), None if LIKERT_BATCH.fullmatch(batch) else Path(key),
                      Path(HUMAN_ANSWERS) / task / batch))
    return found


def _put_back(root: Path, path: Path, record: Path) -> bool:
    """Whether ``record`` (the stage record of the output ``path`` under ``root``: a stage folder's ``stage.json``, a
    table's files record) exists and is not the one that the Snakemake job last writing ``path`` noted
    (:func:`grueflow.io.last_written`): the output was written since by other means (an older copy put back, the
    stage run by hand, ``dvc repro``), whole and consistent with itself, and Snakemake's params record, that job's,
    does not describe it. False where no note is kept (nothing is known)."""
    last = last_written(root, path)
    return last is not None and record.is_file() and sha256_bytes(record) != last


def params_changed(record: Mapping, source: ParamsSource, load: Optional[Callable[[str], object]] = None,
                   leave_out: Iterable[str] = ()) -> list[str]:
    """The params files (or suite keys) whose content differs from what the stage folder of the stage record
    ``record`` was built with, by the digests its stage recorded (:func:`grueflow.pipeline.params_digest`) against
    those of ``source`` now (read with ``load``); ``[]`` where they agree, where the record holds no digests (written
    before stages recorded them: judged by the other checks alone, so that no project rebuilds on upgrade) or its
    task digest is that of the task file's ``method_overrides`` whole, still equal (written before digests held only
    the job's own entries, for the same reason), or where a params file cannot be read (the suite's validation says
    why).

    Whoever built the folder: Snakemake's own record of a job's params describes the folder only while no
    ``snakemake --touch`` rewrote it (a touch records the params of now without running the job), and a folder
    ``dvc repro`` built, or one whose Snakemake records went with ``.snakemake``, has no such record at all.
    ``leave_out``: parts not compared (``suite``, where the suite's values are not known)."""
    recorded = record.get(PARAMS_DIGEST)
    if not isinstance(recorded, dict) or not recorded:
        return []
    try:
        now = params_digest(source, load)
        if now.get("task") != recorded.get("task") and source.overrides is not None:
            whole = params_digest(dataclasses.replace(source, overrides=None), load)["task"]
            now["task"] = whole if whole == recorded.get("task") else now["task"]
    except (ConfigError, OSError):
        return []
    return [source.where(part) for part in sorted((set(now) | set(recorded)) - set(leave_out))
            if now.get(part) != recorded.get(part)]


def out_of_date(folder: Path, record: Mapping, root: Path) -> list[str]:
    """Why the finished stage folder ``folder`` (its ``stage.json`` ``record``; ``root``: the project's root) is no
    longer what a pipeline run would build, as far as a person reading it by hand can be told outside a run, without
    writing anything: what :func:`_rebuilt_for` finds for the folder itself, else for the first stage folder found so
    on each line of the stage folders it was built from (its recorded inputs under ``results/``, a model's folder for
    its ``model/``, and theirs in turn), whose rebuild reruns it: ``"<that folder>, which it was built from, is stale
    (<why>)"``. The reasons read as :func:`stale_outputs` gives them; none where nothing holds. Digests are read
    through the stale check's cache (:data:`DIGESTS` under ``root``, never written here), so what the last pipeline
    run saw unchanged is not read again, and an input stage folder not rebuilt since its reader was is not read at
    all (:func:`_written_before`)."""
    root = Path(os.path.relpath(root))  # as the Snakefile names recorded paths: the keys of the digest cache
    _load(root / DIGESTS)
    reasons = _rebuilt_for(folder, record, root)
    if reasons:
        return reasons
    upstream: dict[Path, list[str]] = {}
    _stale_upstream(record, root, upstream, {Path(os.path.normpath(folder))})
    return [f"{path}, which it was built from, is stale ({'; '.join(why)})" for path, why in upstream.items()]


def _rebuilt_for(folder: Path, record: Mapping, root: Path) -> list[str]:
    """Why a pipeline run would rebuild the stage folder ``folder`` (its ``stage.json`` ``record``) for its own sake:
    its params files changed since it was built (:func:`params_changed` of
    :func:`grueflow.pipeline.folder_params_source`; the suite's values, a run's command line's, are not compared), an
    input it was built from no longer exists or exists with another content (:func:`changed_inputs`: a datapool's
    local data edited, a model rebuilt since; an input stage folder unlike its own record is named with why; one
    whose record is older than the folder's is not read, :func:`_written_before`), or the
    code its stage runs, or a file its task names, is not what it was built with (:func:`code_changed`: the files of
    ``root``, which its stages run, whichever grueflow this process imported and from whichever working folder)."""
    reasons = []
    source = _read_from(folder, record, root)
    if source is not None and (changed := params_changed(record, source, leave_out=("suite",))):
        reasons.append(f"{PARAMS_CHANGED} ({', '.join(changed)})")
    suite = _suite_reads(record, root)
    if suite is not None and source is not None and _files(suite) != _files(source) and \
            (changed := params_changed(record, suite, leave_out=("suite",))):
        reasons.append(f"{PARAMS_CHANGED} as the active suite reads them ({', '.join(changed)}, in the params_dir "
                       f"{root / SUITE_FILE} names; it was built from {', '.join(_files(source))})")
    inputs = record.get("inputs")
    inputs = inputs if isinstance(inputs, dict) else {}
    paths = [meta["path"] for meta in inputs.values() if isinstance(meta, dict) and isinstance(meta.get("path"), str)
             and meta["path"]]
    gone = [path for path in paths if not (root / path).exists()]
    if gone:
        reasons.append(f"it was built from {', '.join(gone)}, {_no_longer_exist(gone)}")
    try:
        built = (folder / STAGE_RECORD).stat().st_mtime_ns
    except OSError:
        built = None
    read = {name: meta for name, meta in inputs.items() if built is None or not _written_before(root, meta, built)}
    changed_readers, damaged = changed_inputs(root, {folder: read})
    if changed_readers:
        reasons.append(f"its input {', '.join(changed_readers[folder])} {CHANGED_INPUT}")
    reasons += [f"{path}, which it was built from, is stale ({why})" for path, why in damaged.items()]
    code, named = code_changed(folder, record, None, root, source, closure=False)
    if code:
        reasons.append(f"{CODE_CHANGED} ({_some(code)})")
    if named:
        reasons.append(f"it was built from {', '.join(named)}, {_no_longer_exist(named)}")
    return reasons


def _read_from(folder: Path, record: Mapping, root: Path) -> Optional[ParamsSource]:
    """Where the job that built the stage folder ``folder`` (its ``stage.json`` ``record``, under the project
    ``root``) read its params: :func:`grueflow.pipeline.folder_params_source` of its recorded output path, with the
    task and method files its provenance record names (:data:`grueflow.io.PARAMS_READ`: a suite's own
    ``params_dir``, such as ``params/grue-local``), where that record is the one written with ``record``; else those
    of the active suite's ``params_dir`` (``params/suite.yaml``, as DVC and ``grueflow run`` read it), else of
    ``params/``. None where the folder is none of the table's."""
    from grueflow.pipeline import folder_params_source

    out = record.get("out")
    if not isinstance(out, str):
        return None
    try:
        provenance = read_json(folder / PROVENANCE_RECORD)
    except (OSError, ValueError):
        provenance = None
    read = provenance.get(PARAMS_READ) if isinstance(provenance, dict) and \
        provenance.get(RECORD_DIGEST) == record.get(RECORD_DIGEST) else None
    if isinstance(read, dict) and all(isinstance(path, str) for path in read.values()):
        source = folder_params_source(str(record.get("stage")), out, str(root / "params"))
        return dataclasses.replace(source, **{f"{part}_file": str(root / path) for part, path in read.items()
                                              if part in ("task", "method")}) if source is not None else None
    return _suite_reads(record, root)


def _files(source: ParamsSource) -> list[str]:
    """The params files ``source`` names, normalised: the same files however their paths are spelled."""
    return [os.path.normpath(path) for path in (source.task_file, source.method_file) if path is not None]


def _suite_reads(record: Mapping, root: Path) -> Optional[ParamsSource]:
    """Where a job of the active suite (:data:`SUITE_FILE` under the project ``root``, as the Snakefile, DVC and
    ``grueflow run`` read it by default) reads the params of the stage folder whose ``stage.json`` is ``record``:
    :func:`grueflow.pipeline.folder_params_source` of its recorded output path in the suite's ``params_dir`` (else
    ``params/``), the files the Snakefile's stale check compares (``stage_params``, workflow/rules/common.smk). None
    where the folder is none of the table's."""
    from grueflow.pipeline import folder_params_source

    out = record.get("out")
    if not isinstance(out, str):
        return None
    try:
        suite = read_yaml(root / SUITE_FILE)
    except (ConfigError, OSError):
        suite = None
    params_dir = suite.get("params_dir") if isinstance(suite, dict) else None
    return folder_params_source(str(record.get("stage")), out,
                                str(root / (params_dir if isinstance(params_dir, str) and params_dir else "params")))


def _written_before(root: Path, meta: object, built: int) -> bool:
    """Whether the recorded input ``meta`` (``{"path", "sha256"}``, its path relative to ``root``) is a stage folder
    under ``results/`` (or the ``model/`` in one) whose ``stage.json`` was written before ``built`` (a time in ns):
    not rebuilt since its reader read it, as Snakemake judges a folder input, so that a look by hand need not read a
    model's weights again (the stale check reads them, through its digest cache)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("path"), str) or not meta["path"]:
        return False
    path = root / meta["path"]
    owner = path.parent if path.name == MODEL_DIR else path
    try:
        return not _outside(owner, root / "results") and (owner / STAGE_RECORD).stat().st_mtime_ns < built
    except OSError:
        return False


def _stale_upstream(record: Mapping, root: Path, found: dict[Path, list[str]], seen: set[Path]) -> None:
    """Add to ``found`` each stage folder the stage record ``record`` names as an input (under ``root``'s
    ``results/``; a model's folder for its ``model/``) that a pipeline run would rebuild (damaged by the size look
    of :func:`grueflow.io.check_stage_output`, or :func:`_rebuilt_for`), with why; of the others, those they were
    built from in turn. ``seen``: the folders looked at already (each is looked at once). A folder that holds no
    readable record is left to the stale check."""
    results = root / "results"
    inputs = record.get("inputs")
    for meta in inputs.values() if isinstance(inputs, dict) else ():
        if not isinstance(meta, dict) or not isinstance(meta.get("path"), str) or not meta["path"]:
            continue
        path = root / meta["path"]
        owner = Path(os.path.normpath(path.parent if path.name == MODEL_DIR else path))
        if owner in seen or _outside(owner, results) or not (owner / STAGE_RECORD).is_file():
            continue
        seen.add(owner)
        try:
            check_stage_output(owner, deep=False)
            upstream = read_json(owner / STAGE_RECORD)
        except MissingDataError as err:  # "<folder> is damaged: <file> is missing; delete ..."
            found[owner] = [str(err).split(";")[0].replace(f"{os.path.abspath(owner)} is ", "")]
            continue
        except (OSError, ValueError, DataError):
            continue
        if not isinstance(upstream, dict):
            continue
        why = _rebuilt_for(owner, upstream, root)
        if why:
            found[owner] = why
        else:
            _stale_upstream(upstream, root, found, seen)


def code_changed(folder: Path, record: Mapping, cache: Optional[Path] = None, root: Path = Path("."),
                 source: Optional[ParamsSource] = None, closure: bool = True) -> tuple[list[str], list[str]]:
    """(changed, gone): the files of the code the stage folder ``folder`` (under the project ``root``) was built with
    whose content differs now, with those added to or dropped from the files its stage runs
    (:func:`grueflow.codedeps.script_code` of ``stages/<its stage>.py``), by path in ``root``: the project's own
    ``stages/`` and ``grueflow/``, which its stages import (not :data:`grueflow.codedeps.ROOT`, the tree this process
    imported, another clone's where one environment serves several project copies), judged by

    - the DVC lock file, where it records the folder's ``stage.json`` as it is (:func:`locked_as_is`: the folder is
      what DVC built or restored there, from its cache or its run cache): the md5 of each code file among its
      stage's deps, and the plugins and local files its task names (their digests' file, ``results/plugin_code``,
      :func:`_plugins_unlike`), as ``dvc status`` compares them;
    - else the fingerprints the folder's provenance record holds (:data:`grueflow.io.CODE_RAN`,
      :func:`grueflow.stage.code_record`; one modified while the stage ran, recorded as None, counts as changed),
      and the digests of the files its task named (:data:`grueflow.io.NAMED_RAN`, :func:`grueflow.stage.named_record`,
      against those the task file of ``source`` names now: :func:`_named_unlike`), where that record is the one
      written with ``record``, its stage record (its :data:`grueflow.io.RECORD_DIGEST`: DVC tracks no provenance
      record, and ``dvc checkout`` of another build leaves the one there).

    ``([], [])`` where neither holds it (a provenance record written before records held the code, deleted or
    damaged), or where ``root`` holds no ``stages/<its stage>.py`` (:func:`code_unjudged`). ``gone``: the files the
    task names (a plugin's source, a file its args name) that either record holds and that no longer exist (a disk
    not mounted, a file moved away), which :func:`stale_outputs` refuses rather than rerun the stage without them.
    Files are read through the digest cache (``cache``: as :func:`stale_outputs` takes it), so a dry run reads only
    what changed since the last. Without ``closure``, only the code files the record holds are compared, no source
    parsed: a file added to or dropped from what the stage runs is so through an import in one of them, which
    changed too (a look for a person: it may name fewer files)."""
    script = f"stages/{record.get('stage')}.py"
    if code_unjudged(script, root) is not None:
        return [], []
    deps = _locked_deps(root, folder / STAGE_RECORD)
    if deps is not None:
        return _lock_unlike(deps, script, root, cache, closure)
    try:
        provenance = read_json(folder / PROVENANCE_RECORD)
    except (OSError, ValueError):
        return [], []
    if not isinstance(provenance, dict) or provenance.get(RECORD_DIGEST) != record.get(RECORD_DIGEST):
        return [], []
    named, gone = _named_unlike(provenance.get(NAMED_RAN), script, source, root, cache)
    return sorted(_code_unlike(provenance.get(CODE_RAN), script, root, cache, closure) + named), gone


def named_gone(folder: Path, record: Mapping, cache: Optional[Path] = None, root: Path = Path("."),
               source: Optional[ParamsSource] = None) -> list[str]:
    """The ``gone`` of :func:`code_changed` by the provenance record alone, for a folder whose code Snakemake judges
    (:func:`snakemake_knows`): the files its task named when it was built that no longer exist and that the task
    file of ``source`` still names. Snakemake takes a named file as an input only where it exists, so it would rerun
    the stage without it. Only the record is read until a file it names is missing."""
    try:
        provenance = read_json(folder / PROVENANCE_RECORD)
    except (OSError, ValueError):
        return []
    if not isinstance(provenance, dict) or provenance.get(RECORD_DIGEST) != record.get(RECORD_DIGEST):
        return []
    ran = provenance.get(NAMED_RAN)
    if not isinstance(ran, dict) or all(_still_there(root, name) for name in ran):
        return []
    return _named_unlike(ran, f"stages/{record.get('stage')}.py", source, root, cache)[1]


def _named_unlike(ran: object, script: str, source: Optional[ParamsSource], root: Path,
                  cache: Optional[Path]) -> tuple[list[str], list[str]]:
    """(changed, gone) of the files ``ran`` records (:func:`grueflow.stage.named_record`: {path in the project ``root``:
    its :func:`grueflow.pipeline.path_digest`}, and the modules outside the project by their
    :func:`grueflow.plugins.module_key`) against those the task file of ``source`` names now for the stage CLI
    ``script`` (:func:`grueflow.pipeline.named_digests`, read through the cache): one whose digest differs, or named
    now and not then (or the reverse), is changed; a file recorded that no longer exists is gone (a module Python no
    longer finds is changed: the suite's validation names it when it imports the task's plugins). ``([], [])``
    where ``ran`` is no such record, or the task file cannot be read (the suite's validation says why)."""
    if not isinstance(ran, dict) or not ran or source is None or source.task_file is None:
        return [], []
    if cache is not None:
        _load(cache)
    added: list[bool] = []

    def digest(path: Path) -> str:
        found, new = _cached_path_digest(path)
        added.append(new)
        return found

    try:
        task = read_yaml(source.task_file)
        now = named_digests(task, root, script_parts(script), with_data=False, digest=digest)
    except (ConfigError, OSError):
        return [], []
    if cache is not None and any(added):
        _save(cache)
    gone = sorted(name for name in ran if name not in now and not _still_there(root, name))
    return sorted(name for name in {*ran, *now} if name not in gone and ran.get(name) != now.get(name)), gone


def _still_there(root: Path, name: str) -> bool:
    """Whether a name a record of named files holds is not gone: a file or folder in the project ``root`` that
    exists, or a module outside it (:func:`grueflow.plugins.is_module_key`), which is no path."""
    return is_module_key(name) or os.path.lexists(root / name)


def _named_files_gone(folder: Path, gone: list[str], source: Optional[ParamsSource]) -> str:
    """The line refusing a run where the stage folder ``folder`` was built with files its task names that are
    ``gone`` (:func:`code_changed`), its job reading its task file from ``source``."""
    task = source.task_file if source is not None and source.task_file is not None else "its task file"
    them = "it" if len(gone) == 1 else "them"
    return (f"{folder} was built with {', '.join(gone)}, {_no_longer_exist(gone)} (a disk not mounted, a file moved "
            f"or renamed?), and {task} still names {them}: put {them} back, or change {task} to name other files "
            f"(its job then rebuilds {folder}); nothing was run, and {folder} is kept")


_LOCKS: dict[str, tuple[list[int], dict[str, tuple[dict, list]]]] = {}  # dvc.lock's stat signature, and {each
# stage.json among its outs: (that out's entry, its stage's deps)}, from :func:`_lock_stages`


def _locked_deps(root: Path, stage_record: Path) -> Optional[list]:
    """The deps ``root/dvc.lock`` records for the stage whose out is the stage record ``stage_record`` (a path
    under ``root``), where that out's entry holds the record's md5 now (:func:`locked_as_is`); None where it does not
    (no lock file, no such out, or a record DVC did not write or restore there). The lock file is read once while its
    stat signature holds."""
    lock = root / "dvc.lock"
    try:
        signature = stat_signature(os.stat(lock))
    except OSError:
        return None
    key = os.path.abspath(lock)
    if key not in _LOCKS or _LOCKS[key][0] != signature:
        outs = {}
        for stage in _lock_stages(lock).values():  # the one parse of dvc.lock this process keeps
            deps = (stage.get("deps") or []) if isinstance(stage, dict) else []
            for out in ((stage.get("outs") or []) if isinstance(stage, dict) else ()):
                if isinstance(out, dict) and isinstance(out.get("path"), str) and isinstance(out.get("md5"), str) \
                        and out["path"].endswith("/" + STAGE_RECORD) and isinstance(deps, list):
                    outs[out["path"]] = (out, deps)
        _LOCKS[key] = (signature, outs)
    found = _LOCKS[key][1].get(Path(os.path.relpath(stage_record, root)).as_posix())
    return found[1] if found is not None and locked_as_is(stage_record, found[0]) else None


def _lock_unlike(deps: list, script: str, root: Path, cache: Optional[Path],
                 closure: bool = True) -> tuple[list[str], list[str]]:
    """(changed, gone): the code files whose md5 differs from the one ``deps`` (a stage's deps in dvc.lock) records,
    or that are among the files the stage CLI ``script`` runs now and not among the deps (or the reverse; without
    ``closure``, the deps alone are compared: see :func:`code_changed`), then what :func:`_plugins_unlike` finds for
    its plugins' digests file, if it has one."""
    locked = {dep["path"]: dep for dep in deps
              if isinstance(dep, dict) and isinstance(dep.get("path"), str) and isinstance(dep.get("md5"), str)}
    code_locked = {path for path in locked if path.endswith(".py") and path.startswith(("grueflow/", "stages/"))}
    try:
        code = set(codedeps.script_code(script, root)) if closure else code_locked
    except (FileNotFoundError, SyntaxError):  # the stage's CLI is gone or broken: the engine says so itself
        return [], []
    changed = sorted(path for path in code | code_locked
                     if path not in locked or path not in code or not _as_locked(root / path, locked[path]))
    gone: list[str] = []
    for path in sorted(path for path in locked if path.startswith(PLUGIN_CODE + "/")):
        found, lost = _plugins_unlike(root, path, locked[path], cache)
        changed, gone = changed + found, gone + lost
    return changed, gone


@functools.lru_cache(maxsize=None)
def _md5(path: Path, crlf_as_lf: bool, signature: tuple[int, ...]) -> Optional[str]:
    """The md5 of ``path``'s bytes (with CRLF as LF: DVC 2's), once per process while its stat ``signature`` holds;
    None where it cannot be read."""
    try:
        content = path.read_bytes()
    except OSError:
        return None
    return hashlib.md5(content.replace(b"\r\n", b"\n") if crlf_as_lf else content).hexdigest()


def _as_locked(path: Path, entry: Mapping) -> bool:
    """:func:`locked_as_is` for a code file, each file read once per process while it is not rewritten."""
    try:
        signature = tuple(stat_signature(os.stat(path)))
    except OSError:
        return False
    return _md5(path, entry.get("hash") != "md5", signature) == entry["md5"]


def _plugins_unlike(root: Path, path: str, entry: Mapping, cache: Optional[Path]) -> tuple[list[str], list[str]]:
    """(changed, gone): the project files (a plugin's source, the local data or files a task's datapool, rewards and
    metrics name) whose digests in the plugins' digests file ``path`` (``results/plugin_code/<task>/<stage>.json``,
    written by DVC's first stage and a dep of the stage; ``entry``, its dep entry in dvc.lock) differ from their
    digests now (:func:`grueflow.pipeline.plugin_digests` of the task file now, read through the cache), with the
    modules outside the project whose code differs (by :func:`grueflow.plugins.module_key`), and those it
    records that no longer exist (the digests now leave out a name that names no file); where that file is not the
    one the entry records, the file itself (``path``) if the digests now are not the ones it recorded. ``([], [])``
    where the task file does not read (the suite's validation says why)."""
    task, stage = Path(path).parent.name, Path(path).stem
    added: list[bool] = []

    def digest(file: Path) -> str:
        found, new = _cached_path_digest(file)
        added.append(new)
        return found

    try:
        data = read_yaml(root / "params" / "tasks" / f"{task}.yaml")
        if cache is not None:
            _load(cache)
        now = plugin_digests({task: data}, root, digest=digest)[task].get(stage)
    except (ConfigError, OSError):
        return [], []
    if cache is not None and any(added):
        _save(cache)
    if now is None:
        return [], []
    recorded = None
    if locked_as_is(root / path, entry):
        try:
            recorded = read_json(root / path)
        except (OSError, ValueError):
            recorded = None
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), dict):
        text = (json.dumps(now, indent=1, sort_keys=True) + "\n").encode()
        text = text if entry.get("hash") == "md5" else text.replace(b"\r\n", b"\n")
        return ([] if hashlib.md5(text).hexdigest() == entry["md5"] else [path]), []
    before, after = recorded["sha256"], now["sha256"]
    gone = sorted(name for name in before if name not in after and not os.path.lexists(root / name))
    changed = [name for name in {*before, *after} if before.get(name) != after.get(name) and name not in gone]
    modules = [recorded.get("modules"), now.get("modules")]
    before, after = [value if isinstance(value, dict) else {} for value in modules]
    changed += [module_key(name) for name in {*before, *after} if before.get(name) != after.get(name)]
    return sorted(changed), gone


def _cached_path_digest(path: Path) -> tuple[str, bool]:
    """:func:`grueflow.pipeline.path_digest` of a file or folder, from :data:`_KNOWN` while the stat signatures of
    its files are the ones recorded there (load the cache first); and whether it was computed now."""
    signature = _tree_signature(path) if path.is_dir() else stat_signature(os.stat(path))
    key = f"{path}\0path digest"
    entry = _KNOWN.get(key)
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == signature:
        return entry[1], False
    _KNOWN[key] = [signature, path_digest(path)]
    return _KNOWN[key][1], True


def table_code_changed(table: Path, cache: Optional[Path] = None, root: Path = Path(".")) -> list[str]:
    """:func:`code_changed` for a table file (the GRUE table, the human-evaluation table), by the fingerprints its
    files record holds (:func:`grueflow.io.atomic_files`) against the files run now by the stage whose output it is
    (the stage table's), read in the project ``root``; ``[]`` where the record holds none, no stage writes
    ``table``, or ``root`` holds no CLI of that stage (:func:`code_unjudged`)."""
    scripts = [stage.script for stage in STAGES.values() if any(Path(out) == table for out in stage.outputs.values())]
    try:
        record = read_json(files_record(table))
    except (OSError, ValueError):
        return []
    if not scripts or code_unjudged(scripts[0], root) is not None or not isinstance(record, dict):
        return []
    return _code_unlike(record.get(CODE_RAN), scripts[0], root, cache)


def _code_unlike(ran: object, script: str, root: Path, cache: Optional[Path], closure: bool = True) -> list[str]:
    """The files of ``ran`` (a record of :func:`grueflow.stage.code_record`) and of the code the stage CLI ``script``
    of the project ``root`` runs now (without ``closure``: of ``ran`` alone), read in ``root``, whose fingerprints
    differ (see :func:`code_changed`); ``[]`` where ``ran`` is no such record."""
    if not isinstance(ran, dict) or not ran:
        return []
    try:
        files = codedeps.script_code(script, root) if closure else sorted(ran)
    except (FileNotFoundError, SyntaxError):  # the stage's CLI is gone or broken: the engine says so itself
        return []
    if cache is not None:
        _load(cache)
    now, added, base = {}, False, root.resolve()  # resolved as :data:`grueflow.codedeps.ROOT`: the cache's keys
    for name in files:
        path = base / name
        try:
            now[name], new = _cached_fingerprint(str(path), stat_signature(os.stat(path)))
        except OSError:
            continue
        added |= new
    if added and cache is not None:
        _save(cache)
    return sorted(name for name in {*ran, *now} if now.get(name) is None or ran.get(name) != now.get(name))


def code_unjudged(script: str, root: Path) -> Optional[str]:
    """Why the code a folder of the stage CLI ``script`` (``stages/<stage>.py``) was built with is not compared in
    the project ``root`` (:func:`code_changed`): ``"<root> holds no <script>"`` where that CLI is not there (a folder
    looked at outside any project, whose root is then the working folder: its code is nowhere to be read); None
    where it is."""
    return None if (root / script).is_file() else f"{os.path.abspath(root)} holds no {script}"


def code_not_compared(folder: Path, record: Mapping, root: Path) -> Optional[str]:
    """:func:`code_unjudged` for the stage folder ``folder`` (its ``stage.json`` ``record``) where its provenance
    record, the one written with ``record``, holds the code its stage ran (:data:`grueflow.io.CODE_RAN`), which
    :func:`code_changed` would have compared; None where it holds none (nothing to compare) or ``root`` holds the
    stage's CLI."""
    why = code_unjudged(f"stages/{record.get('stage')}.py", root)
    if why is None:
        return None
    try:
        provenance = read_json(folder / PROVENANCE_RECORD)
    except (OSError, ValueError):
        return None
    return why if isinstance(provenance, dict) and provenance.get(RECORD_DIGEST) == record.get(RECORD_DIGEST) \
        and isinstance(provenance.get(CODE_RAN), dict) and provenance[CODE_RAN] else None


def _some(names: list[str], most: int = 3) -> str:
    """``names`` joined, the first ``most`` of them and how many more."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def snakemake_knows(root: Path, folder: Path) -> bool:
    """Whether a Snakemake job of this checkout last wrote the stage folder ``folder`` (under the project ``root``:
    :func:`grueflow.io.last_written`) and Snakemake still holds its record of that job
    (:func:`grueflow.io.snakemake_metadata`; ``--drop-metadata`` and ``--cleanup-metadata`` remove it): Snakemake
    then compares the job's params with its rule's and reruns it for a param edited since (unless ``--touch``
    rewrote that record)."""
    return last_written(root, folder) is not None and snakemake_metadata(root, folder).is_file()


def refuse_touch(touched: Iterable[Path], params: Mapping[Path, ParamsSource],
                 load: Optional[Callable[[str], object]] = None, results: Path = Path("results"),
                 cache: Optional[Path] = DIGESTS) -> None:
    """Raise DataError where a stage folder of ``touched`` (the outputs a ``snakemake --touch`` run is about to mark
    up to date) was built with other params than its rule reads now (:func:`params_changed` of its stage record;
    ``params`` and ``load`` as :func:`stale_outputs` takes them), or from inputs outside ``results`` that changed or
    are gone since (:func:`outside_unlike`: a datapool's local data, a classifier's data, a batch's answers; digests
    read through ``cache``), naming each folder and file: the touch would rewrite Snakemake's record of the job's
    params (and its inputs' checksums) without running it, and the folder's numbers would pass for the new params'
    or data's. A folder only code changed for is let be (what ``--touch`` is for), and so is one without a readable
    record (the stale check judges it)."""
    changed, data = {}, {}
    root = results.parent  # stage records name their inputs relative to the project root
    for folder in touched:
        try:
            record = read_json(folder / STAGE_RECORD) if (folder / STAGE_RECORD).is_file() else None
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        if folder in params and (found := params_changed(record, params[folder], load)):
            changed[folder] = found
        edited, gone = outside_unlike(root, results, record.get("inputs"), cache)
        if edited or gone:
            data[folder] = [f"{path} {CHANGED_INPUT}" for path in edited] + [f"{path} {GONE_INPUT}" for path in gone]
    refused = []
    if changed:
        refused.append(_touch_refusal(changed, "with other params than now", "the new params'",
                                      "put the params back as they were"))
    if data:
        refused.append(_touch_refusal(data, "from other data than now", "the new data's",
                                      "put the data back as it was"))
    if refused:
        raise DataError(" ".join(refused))


def _touch_refusal(found: Mapping[Path, list[str]], built: str, whose: str, undo: str) -> str:
    """Why ``--touch`` is refused over the stage folders ``found`` (each with what differs from its build: a params
    file, an input and how it changed), ``built`` saying how they were built, ``whose`` whose results they would pass
    for, and ``undo`` the other way out."""
    named = [f"{folder} ({', '.join(why)})" for folder, why in sorted(found.items())]
    shown = "; ".join(named[:5]) + (f"; and {len(named) - 5} more" if len(named) > 5 else "")
    return (f"--touch would mark {len(named)} stage folder{'s' if len(named) > 1 else ''} built {built} as up to "
            f"date: {shown}; their results, and what reads them, would pass for {whose}. Run without --touch to "
            f"rebuild them (--touch is for code edits that change no result), or {undo}")


def outside_unlike(root: Path, results: Path, inputs: object,
                   cache: Optional[Path] = None) -> tuple[list[str], list[str]]:
    """Those of a stage record's ``inputs`` (``{name: {"path", "sha256"}}``, paths relative to the project ``root``)
    that lie outside ``results`` (a datapool's local data, a classifier's data, a batch's answers: no stage writes
    them, no manifest covers them) and are not as recorded: (those that exist with another digest, those that no
    longer exist), each as recorded. Digests are read through ``cache`` (:func:`input_digest`; None: this process's
    only), so an unchanged input is read once. ``([], [])`` for inputs that are no mapping."""
    if cache is not None:
        _load(cache)
    changed, gone, computed = [], [], False
    for meta in inputs.values() if isinstance(inputs, dict) else ():
        if not isinstance(meta, dict) or not meta.get("path") or not isinstance(meta.get("sha256"), str):
            continue
        path = root / meta["path"]
        if not _outside(path, results):
            continue
        if not path.exists():
            gone.append(meta["path"])
            continue
        digest, new = input_digest(path, persons_files(path))
        computed |= new
        if digest != meta["sha256"]:
            changed.append(meta["path"])
    if computed and cache is not None:
        _save(cache)
    return changed, gone


def _data_changed(root: Path, results: Path, folder: Path, cache: Optional[Path]) -> bool:
    """Whether an input from outside ``results`` that the stage folder ``folder`` records exists with another
    content than recorded (:func:`outside_unlike`); False where its record cannot be read."""
    try:
        record = read_json(folder / STAGE_RECORD)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and bool(outside_unlike(root, results, record.get("inputs"), cache)[0])


def _outside(path: Path, results: Path) -> bool:
    """Whether ``path`` lies outside ``results``: a stage's input of the user's (data, answers), which no stage
    writes and no manifest covers; a stage output is checked by its own record instead."""
    return not path.resolve().is_relative_to(results.resolve())


def _unrecorded(root: Path, path: Path, results: Path) -> Optional[Path]:
    """The stage folder of a recorded input ``path`` (the folder, or the one holding it as its ``model/``) when it is
    under ``results``, exists and holds no stage record (every stage writes one last): None otherwise (an input from
    outside the pipeline, a file, a folder in order)."""
    folder = root / path
    if folder.name == MODEL_DIR:
        folder = folder.parent
    inside = folder.resolve().is_relative_to(results.resolve()) and folder.resolve() != results.resolve()
    if not inside or not folder.is_dir() or (folder / STAGE_RECORD).is_file():
        return None
    return folder


def mark_stale(results: Path, table: Path, expected: Iterable[Path],
               siblings: Optional[dict[Path, list[Path]]] = None, tokens: Path = TOKENS,
               folders: Iterable[Path] = (), params: Optional[Mapping[Path, ParamsSource]] = None,
               load: Optional[Callable[[str], object]] = None,
               built_by: Callable[[Path], Optional[str]] = lambda path: None,
               read: Optional[Mapping[Path, str]] = None) -> list[str]:
    """Set each :func:`stale_outputs` entry's Snakemake timestamp to :data:`STALE_TIME` and give it a new token in
    ``tokens`` (the digests of inputs are cached beside it); one line per entry, saying why, and that its job reruns:
    for an entry the default target does not build, ``built_by`` gives the target whose build reruns it (None for
    one the default target builds; the entry itself where only asking for it does), which the line names.

    A suite stage folder stale for its own sake (damaged, or without its record), or a file where a stage folder
    belongs, has a copy kept of what no stage record vouches for (:func:`unvouched`, :func:`keep_copy`; a dry run
    too: the rebuild deletes it, and nothing tells whether a person put it there). A stage stale because an input
    changed, or one from outside results/ is gone, gets the stamp: the content digest its rule takes as a param
    reruns it where Snakemake recorded one, the stamp where it did not (a folder ``dvc repro`` built, or
    ``.snakemake`` removed), and the stamp reruns the reader of a changed stage folder (a folder input newer than its
    output). One a Snakemake job wrote whose input from outside results/ changed (:func:`outside_unlike`) gets a
    token too, as for its params below: where ``snakemake --touch`` ran over the edit, Snakemake's record holds the
    content digest of now and the input's checksum, and neither the param nor the stamp would rerun it. Its time
    before the stamp is kept in :data:`STAMPED`, and put back once the input is as recorded again (after a dry run
    saw it edited), its token too (:func:`_retoken`): then nothing reruns, whatever the input's size. So does a suite
    stage folder whose params changed since it was built (:func:`params_changed`), until its params are as recorded
    again; one a Snakemake job wrote gets a token too, put back as it was once its params are as recorded again
    (:func:`_retoken`); what it holds that no stage record vouches for is copied first, as its rebuild deletes it;
    for a folder whose files do not match their digests (a reason ending with :data:`UNMATCHED`), each file that does
    not is copied too, whatever its time (:func:`_unlike_manifest`), so a same-size replacement that kept an older time
    is kept. A table (or key) stale because a file written with it was edited (a note added by hand) has a copy kept of
    each such file (:func:`edited_files`). Last, every other stage folder has a copy kept of what no stage record
    vouches for, with a line (:func:`keep_user_files`). A time is set in this checkout alone (:func:`_set_time`): a
    stamp that is a hard link of another checkout's is replaced by a copy of its own first; so is each of Snakemake's
    records of its jobs (:data:`grueflow.io.SNAKEMAKE_METADATA`), which Snakemake rewrites in place: a run here must not
    change the params another checkout's Snakemake compares with. ``params`` and ``load``: as :func:`stale_outputs`
    takes them. First, what lies where ``table`` or a file of ``siblings`` belongs and is no file is moved aside
    (:func:`move_aside_tables`): the table is then missing, and its job reruns.

    An entry no job can rebuild (:func:`unbuildable`: a stage folder no rule of the suite writes, a stage run by hand,
    or an import whose answers are gone) never gets "its job reruns": its line says so and how to rebuild it, and
    where the suite's jobs read it (``read``: such a folder, by what names it, as a task's reward names a reward
    model), a :class:`DataError` refuses before anything is marked, with that fix: its readers would be built from it
    as it is, as though it were current."""
    lines = []
    expected, folders = list(expected), list(folders)
    suite = set(expected) | set(folders)
    for record in files_under(results.parent / SNAKEMAKE_METADATA):  # Snakemake rewrites its records in place
        _own_file(record)
    lines += move_aside_tables(results.parent, {table: [], **(siblings or {})})  # then missing: their jobs rerun
    stale = stale_outputs(results, table, expected, siblings, folders, tokens.parent / DIGESTS.name, params, load)
    jobless = {path: found for path in stale if (found := unbuildable(results.parent, path, not folders or path in suite
                                                                      or path == table or path in (siblings or {})))}
    refused = [_read_refusal(path, stale[path], *jobless[path], (read or {})[path])
               for path in jobless if path in (read or {})]
    if refused:  # before anything is marked
        raise DataError("; ".join(refused))
    stamped_file = tokens.parent / STAMPED.name
    stamped = _read_mapping(stamped_file)
    kept, copied, read_all = dict(stamped), set(), False
    for path, why in stale.items():
        stamp = _stamp_of(path)
        line = _stale_line(path, why, jobless.get(path), built_by(path))
        rebuilt = path in suite and not why.startswith(("its input ", "it was built from "))  # else: as built
        files = unvouched(path) if rebuilt else []
        if rebuilt and why.startswith("damaged: ") and why.endswith(UNMATCHED):  # found by digests: read them all
            files, read_all = sorted({*files, *_unlike_manifest(path, cached=True)}), True
        if files:
            files = as_deleted(path, files)
            line += f"; a copy of what no stage record vouches for ({listed(path, files)}) is kept in " \
                    f"{keep_copy(path, results.parent, files)}{links_left(path, files)}"
        if rebuilt:
            copied.add(path)
        edited = edited_files(path, siblings[path]) if siblings and path in siblings else []
        if edited:  # a table's file edited by hand (a note added): the rerun writes it again
            line += _copies_of(edited, results.parent)
        if why.startswith(AS_BUILT):  # the time to put back, unless already stamped
            before = stamp.lstat().st_mtime_ns
            if before != STALE_TIME * 10 ** 9:
                kept[str(path)] = before
        else:
            kept.pop(str(path), None)  # rebuilt whatever the input says
        _set_time(stamp, STALE_TIME * 10 ** 9)
        lines.append(line)
    for name, before in stamped.items():  # inputs as recorded again: the stamp taken back, unless rebuilt since
        path = Path(name)
        if path in stale:
            continue
        kept.pop(name, None)
        stamp = _stamp_of(path)
        if isinstance(before, int) and stamp.exists() and stamp.lstat().st_mtime_ns == STALE_TIME * 10 ** 9:
            _set_time(stamp, before)
    if read_all:  # the digests of a damaged folder's files: not read again while it is so
        _save(tokens.parent / DIGESTS.name)
    if kept != stamped:
        with atomic_path(stamped_file) as tmp:
            tmp.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    retokened = {path for path, why in stale.items()
                 if snakemake_knows(results.parent, path) and (why.startswith(PARAMS_CHANGED) or (
                     why.startswith("its input ") and why.endswith(CHANGED_INPUT)
                     and _data_changed(results.parent, results, path, tokens.parent / DIGESTS.name)))}
    tokened = [path for path, why in stale.items() if not why.startswith(AS_BUILT)] + sorted(retokened)
    known = _read_mapping(tokens)
    now = str(time.time_ns())
    updated = {**_retoken(tokens.parent / RETOKENED.name, retokened, known), **{str(path): now for path in tokened}}
    if updated != known:
        with atomic_path(tokens) as tmp:
            tmp.write_text(json.dumps(updated, indent=1, sort_keys=True) + "\n")
    return lines + keep_user_files(results, suite, done=copied)


def unbuildable(root: Path, path: Path, has_job: bool) -> Optional[tuple[str, str, str]]:
    """Why no job rebuilds the stale ``path`` (relative to the project's ``root``), what rebuilds it and how to stop
    using it, or None where its job can: ``has_job``, a rule of the suite writes it, unless it is an import whose
    answers no longer exist (:func:`grueflow.human.layout.lost_answers`: its job could not read them). A folder no
    rule writes (a stage run by hand, a folder of another suite) is rebuilt by its stage's command as its records
    say it was built (:func:`_command_of`)."""
    record = _record_of(path / STAGE_RECORD) if path.is_dir() else {}
    lost = lost_answers(record, root) if record.get("stage") == IMPORT_STAGE else []
    if lost:
        shown = ", ".join(map(str, lost))
        return (f"no job can import it again: its answers at {shown} no longer exist", f"put the answers back at "
                f"{shown}", f"delete the import (rm -r {shlex.quote(str(path))})")
    if has_job:
        return None
    command = _command_of(path, record)
    return ("no job of this suite writes it (a stage run by hand, or a folder of another suite)",
            f"rebuild it from its inputs now ({command}, as its records say it was built)" if command else
            "rebuild it by hand", f"delete it (rm -r {shlex.quote(str(path))})")


def _command_of(folder: Path, record: Mapping) -> Optional[str]:
    """The command that builds the stage folder ``folder`` as its records say it was built: its stage's script,
    the params files it read (its provenance's :data:`grueflow.io.PARAMS_READ`), each input it recorded (a stage
    names an input after its flag) and ``--out``; None where its record names no stage of :data:`STAGES`, or an
    import."""
    stage = STAGES.get(record.get("stage")) if isinstance(record.get("stage"), str) else None
    if stage is None or stage.name == IMPORT_STAGE:  # an import names its answers files, not its --answers
        return None
    files = _record_of(folder / PROVENANCE_RECORD).get(PARAMS_READ)
    inputs = record.get("inputs") if isinstance(record.get("inputs"), dict) else {}
    words = [f"--{kind}-file {shlex.quote(file)}" for kind, file in (files if isinstance(files, dict) else {}).items()
             if kind in ("task", "method") and isinstance(file, str)]
    words += [f"--{name.replace('_', '-')} {shlex.quote(meta['path'])}" for name, meta in sorted(inputs.items())
              if isinstance(meta, dict) and isinstance(meta.get("path"), str)]
    return " ".join([f"python {stage.script}", *words, f"--out {shlex.quote(str(folder))}"])


def _stale_line(path: Path, why: str, jobless: Optional[tuple[str, str, str]], target: Optional[str]) -> str:
    """The line of the stale ``path``: that its job reruns (once ``target`` is built, where rule all does not build
    it: :func:`mark_stale`'s ``built_by``), or, where no job can rebuild it (``jobless``, :func:`unbuildable`), that
    nothing reruns it and what to do."""
    if jobless is not None:
        nobody, rebuild, stop = jobless
        return f"grueflow: {path} is stale ({why}); {nobody}, so nothing reruns it: {rebuild}, or {stop}"
    return f"grueflow: {path} is stale ({why}); its job reruns" + (
        "" if not target else " once it is asked for (rule all does not build it)" if Path(target) == path
        else f" once {target} is built (rule all does not build it)")


def _record_of(path: Path) -> dict:
    """The JSON object of the stage folder's record ``path``; empty where it is missing, unreadable, no object, or no
    regular file (a FIFO put in its place, whose reading would wait for a writer: :func:`grueflow.io.read_json`)."""
    try:
        record = read_json(path)
    except (OSError, ValueError, DataError):
        return {}
    return record if isinstance(record, dict) else {}


def _read_refusal(path: Path, why: str, jobless: str, rebuild: str, stop: str, reader: str) -> str:
    """The refusal of a stale ``path`` that no job rebuilds (:func:`unbuildable`: ``jobless``, ``rebuild``,
    ``stop``) while ``reader`` of the suite names it as an input of its jobs."""
    return (f"{path} is stale ({why}) and {jobless}, yet {reader} names it, so the stages that read it would be built "
            f"from it as it is: {rebuild}, then run again; or name it no longer in {reader} and {stop}")


def move_aside_tables(root: Path, tables: Mapping[Path, Iterable[Path]]) -> list[str]:
    """Move out of the way whatever lies where a table's file belongs (each of ``tables``, and the files written
    with it) and is no file, so that its job reruns and writes it: a folder (``mkdir results/grue_table.csv``),
    which Snakemake takes for the table, present and up to date, and would not delete (it removes an empty folder
    alone), and over which the table's stage refuses to write; a link to a folder; a FIFO, socket or device. A
    folder's files are copied to ``.grueflow/replaced/`` under ``root`` first (:func:`keep_copy`), then it is
    deleted; a link is deleted, never what it names: one to a folder, one to no file, and one to nothing (its
    target gone), on which Snakemake stops every run before any job, as it cannot read its time; anything else holds
    no data, and is deleted. A file and a link to one are left to the stage, which writes over them. One line per
    path moved aside; a :class:`DataError` where one cannot be (nothing may run: the stage would fail on it)."""
    lines = []
    for path in sorted({file for table, others in tables.items() for file in (table, *others)}):
        if not os.path.lexists(path) or path.is_file():
            continue
        try:
            if path.is_symlink():
                what, target = "a link to a folder" if path.is_dir() else "a link to no file", os.readlink(path)
                done = f"the link is deleted ({target}, what it names, is left as it is)"
                if not path.exists():
                    what, done = "a link to nothing", f"the link is deleted (it names {target}, which does not exist)"
                path.unlink()
            elif path.is_dir():
                what, files = "a folder", files_under(path)
                done = f"moved aside to {keep_copy(path, root, files)}" if files else "it is empty, and deleted"
                shutil.rmtree(path)
            else:
                what = "a FIFO, a socket or a device"
                path.unlink()
                done = "it holds no data, and is deleted"
        except OSError as err:
            raise DataError(f"{path} is no file but where a table's file belongs, and could not be moved aside "
                            f"({err.strerror or err}): move it out of results/ yourself, and run again") from None
        lines.append(f"grueflow: {path} is {what} where a table's file belongs; {done}; its job reruns")
    return lines


_FS_IOC_GETFLAGS = 0x80086601  # Linux: read an inode's attributes (lsattr)
_FLAGS = {0x10: ("immutable", "'chattr -i {}' as root"),  # lsattr's i and a (FS_IMMUTABLE_FL, FS_APPEND_FL): what
          0x20: ("append-only", "'chattr -a {}' as root")}  # keeps a path from being deleted, and what clears it


def refuse_undeletable(outputs: Iterable[Path]) -> None:
    """A :class:`DataError` naming the first of ``outputs`` (those of the jobs a Snakemake run is about to run, which
    it deletes as it starts each) that cannot be deleted, what stands in the way and how to clear it: a folder it
    lies in, or one in it, that cannot be written (a read-only folder; immutable, ``chattr +i``), or a file in it
    that is immutable or append-only (``chattr +i``, ``chattr +a``); else Snakemake stops in the middle of the run
    with its own traceback, some jobs run and the rest not. Only what is there is looked at: the outputs (and log
    files, which Snakemake deletes too) of the jobs that rerun, each walked once (a rerun deletes them anyway), links
    never followed. The attributes of each file and folder are read, whoever runs: to root (as in a container) an
    append-only one is writable, and only the attribute tells that it cannot be deleted."""
    for output in sorted(set(outputs)):
        if not os.path.lexists(output):
            continue
        blocked = _blocked_folder(output.parent)
        if blocked is None and output.is_dir() and not output.is_symlink():
            for top, _, names in os.walk(output):
                blocked = _blocked_folder(Path(top)) or next(
                    (found for name in names if (found := _blocked_file(Path(top) / name)) is not None), None)
                if blocked is not None:
                    break
        elif blocked is None and not output.is_symlink():
            blocked = _blocked_file(output)
        if blocked is not None:
            path, why, fix = blocked
            raise DataError(f"{output} is to be rebuilt, which deletes it first, but {why.format(path)}; run "
                            f"{fix.format(path)}, and run again")


def _blocked_folder(folder: Path) -> Optional[tuple[Path, str, str]]:
    """(``folder``, why nothing in it can be deleted and the command that clears it, each with ``{}`` for it) where
    that is so: a folder that is immutable or append-only (:data:`_FLAGS`), or not writable by this process
    (read-only); else None."""
    flag = _flag(folder)
    if flag is None and os.access(folder, os.W_OK | os.X_OK):
        return None
    flag = flag or ("read-only", "'chmod u+wx {}' as its owner")
    return folder, f"nothing can be deleted from the {flag[0]} folder {{}}", flag[1]


def _blocked_file(file: Path) -> Optional[tuple[Path, str, str]]:
    """(``file``, why it cannot be deleted and the command that clears it, each with ``{}`` for it) where it is a
    regular file that is immutable or append-only (:data:`_FLAGS`); else None (a read-only file can be deleted from a
    writable folder; a link, FIFO, socket or device is never opened, and holds no such attribute)."""
    try:
        if not stat.S_ISREG(os.lstat(file).st_mode):
            return None
    except OSError:  # gone since the folder was listed: nothing to delete
        return None
    flag = _flag(file)
    return None if flag is None else (file, f"the {flag[0]} file {{}} cannot be deleted", flag[1])


def _flag(path: Path) -> Optional[tuple[str, str]]:
    """The first of :data:`_FLAGS` set on ``path`` (as ``lsattr`` reads it), or None: none set, or none to read
    (another system, a file system without attributes, a file this process cannot open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)
    except OSError:
        return None
    finally:
        os.close(fd)
    return next((shown for bit, shown in _FLAGS.items() if flags & bit), None)


def _retoken(retokened_file: Path, retokened: set[Path], known: dict[str, str]) -> dict[str, str]:
    """The tokens ``known`` (:data:`TOKENS`) with the token of each stage folder given one for its params (or its
    data from outside results/) in an earlier run (:data:`RETOKENED`), and not stale now nor rebuilt since (its
    stage record the one it was marked with: the params or data put back, after a dry run saw them edited), put
    back as it was, so that Snakemake, whose params trigger reads the token, reruns nothing; ``retokened``: the
    folders of Snakemake's jobs stale for their params or such data now, whose token before, and stage record, are
    noted (once per record: a folder rebuilt since is noted anew).

    A token is needed there as well as the stamp: Snakemake's record of such a job holds the params of now (the
    content digest of its data included) where ``snakemake --touch`` rewrote it, and the checksums of its inputs,
    so the stamp alone reruns no job whose inputs are all small files (a datapool)."""
    marks = _read_mapping(retokened_file)
    noted = dict(marks)
    restored = dict(known)
    for path in sorted(retokened):
        sha = sha256_bytes(path / STAGE_RECORD)
        mark = marks.get(str(path))
        if not (isinstance(mark, list) and len(mark) == 2 and mark[1] == sha):
            noted[str(path)] = [known.get(str(path)), sha]
    for name, mark in marks.items():
        if Path(name) in retokened:
            continue
        noted.pop(name)
        record = Path(name) / STAGE_RECORD
        if isinstance(mark, list) and len(mark) == 2 and record.is_file() and sha256_bytes(record) == mark[1]:
            if isinstance(mark[0], str):
                restored[name] = mark[0]
            else:
                restored.pop(name, None)
    if noted != marks:
        with atomic_path(retokened_file) as tmp:
            tmp.write_text(json.dumps(noted, indent=1, sort_keys=True) + "\n")
    return restored


def _stamp_of(path: Path) -> Path:
    """What holds the modification time Snakemake reads for the output ``path``: the ``.snakemake_timestamp`` it
    keeps in a folder output, else the path itself; a link itself where ``path`` is one, never what it points to
    (a folder or file of the user's)."""
    return path / SNAKEMAKE_TIMESTAMP if not path.is_symlink() and (path / SNAKEMAKE_TIMESTAMP).is_file() else path


def _set_time(stamp: Path, ns: int) -> None:
    """Set the modification (and access) time of ``stamp`` (:func:`_stamp_of`) to ``ns`` nanoseconds after the epoch,
    in this checkout alone: a link's own time, never its target's, and a file that is a hard link (a second checkout
    made with ``cp -al``, whose files are the first one's) made this checkout's own first (:func:`_own_file`), so
    that neither a stale mark nor its undoing (a dry run's too) changes what another checkout reads."""
    _own_file(stamp)
    os.utime(stamp, ns=(ns, ns), follow_symlinks=False)


def _own_file(path: Path) -> None:
    """Replace the regular file ``path`` by a copy of it (bytes, mode and times) where it has more than one hard link,
    renamed over it in one step, so that a change of its metadata reaches no other path; anything else (a file of
    one link, a link, a folder) is left as it is. A :class:`DataError` where the copy cannot be made."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
        return
    try:
        with atomic_path(path, mode=stat.S_IMODE(info.st_mode)) as tmp:
            shutil.copy2(path, tmp)
    except OSError as err:
        raise DataError(f"{path} is one file with {info.st_nlink - 1} other path(s) (a hard link: a checkout copied "
                        f"with cp -al?), and no copy of its own could be made beside it ({err}): marking it stale "
                        f"would change the other checkout's; give write access to {path.parent}, or make this "
                        f"checkout a copy of its own (cp -a), and run again") from None


def _read_mapping(path: Path) -> dict:
    """The JSON object in ``path``; empty when it is missing, unreadable or no object (a record of this module's,
    rebuilt as it is used)."""
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}
