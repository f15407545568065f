"""DVC's first stage: the suite validated, and the digests of the user code each task's stages run.

``python -m grueflow.suite_check SUITE --out FILE --plugin-code DIR`` validates the suite and every params
file it names as :func:`grueflow.params.validate` does under DVC (exit 2 with one line on the first problem),
then writes :data:`grueflow.params.VALID` to ``FILE`` and ``DIR/<task>/<stage>.json`` for every task and every
stage that runs plugins (:func:`grueflow.pipeline.plugin_digests`): the import paths the stage's parts of the
task file name and the sha256 of each of their project source files. Each such stage depends on its file, so
editing a plugin reruns this stage, whose rewritten digests make exactly the stages that run the plugin stale.

A plugin source that ``dvc.yaml``'s first stage does not list as a dependency (a task file names a new one) is
refused, asking to regenerate ``dvc.yaml``: DVC would not rerun this stage when that file changes. This module
is kept out of the stages' import closures, so editing the stage table reruns only this check.

It also refuses (exit 2, one line naming the link to remove) a link under ``results/`` through which DVC would
write another run's folder: a stage folder of the suite's outputs (``dvc.yaml``'s outs over the suite's grid)
that holds a record naming another output path, at or under a link inside ``results/``
(:func:`grueflow.stale.refuse_links`; ``results/sentiment`` a link to ``results/concepts``). DVC restores a cached
stage's outputs by checking them out, which runs no grueflow code, and removes a rerun stage's outputs before its
command: this stage, always changed and upstream of every other, is the one place that runs first. For the same
reason it copies to ``.grueflow/replaced/``, with a line, what DVC's restore or rerun of a stage's outs would
delete and no stage wrote, as the Snakefile does before Snakemake's jobs (:func:`keep_persons_files`): a
human-evaluation batch with answers on record and its blinding key (a re-export replaces them), a table file
edited since its stage wrote it (a note added to ``results/grue_table.md``), and what a stage folder holds that no
stage record vouches for (a file put there, a hand edit). The copies come before the validation, over the outputs
the suite file's grid names as it lies (:func:`suite_outputs`): a refusal fails this stage, and
``dvc repro --ignore-errors`` goes on to delete the outs of every stage below it.

Once its files are written, it fails (exit 2, one line) where ``dvc.lock`` records, as they lie, outputs whose
files are unlike their own grueflow record (:func:`kept_edits_problem`: a hand edit recorded with ``dvc commit``,
which DVC would otherwise keep as a pipeline result, neither rerunning nor restoring its stage), naming each file,
its record and its DVC stage, and the ``dvc repro -f -s`` that rebuilds them (its files in place, so that those
stages can run alone).

DVC's own hash cache takes a file's md5 from its inode, size and modification time, so a code file rewritten in place
with its size and time kept would rerun nothing: before it writes, this stage sets to now the time of each file a
later stage's entry in ``dvc.lock`` records with other bytes and whose modification time is not the time of its last
change (:func:`rehash_unseen_edits`, one line naming them), whatever that time is (a clock set back or ahead too).
DVC looks at a later stage's deps only once this one has run, so the same ``dvc repro`` hashes them again and reruns
the stages that read them. So, first of all (the copies then keep them), it sets to now the time of each file of a
stage folder among ``dvc.lock``'s outputs that its ``stage.json`` lists at its size but whose bytes it does not vouch
for, and whose modification time is not that of its last change (:func:`rehash_damaged_outputs`; a folder its stage
or ``dvc checkout`` wrote alike): DVC then restores or reruns that stage. Both read a file only when its stat
signature changed since it was last found as recorded (kept in ``.dvc/tmp``).

DVC expands the stages' grids from the files ``dvc.yaml``'s ``vars`` names, while this stage validates, and the
table stage (``aggregate --suite``) reads, the suite file given here: a ``vars`` naming any other file (a second
suite put there by hand) would train one suite's grid and tabulate another's, so it is refused (exit 2, one line
naming the file and README's way to switch suites: copy it over ``params/suite.yaml``) before any other stage runs
(:func:`vars_problem`). The copies cover the outputs of both grids.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import sys
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import yaml

from grueflow import pipeline
from grueflow.config import ConfigError, read_yaml
from grueflow.human.layout import answers_tree
from grueflow.io import STAGE_RECORD, DataError, atomic_dir, atomic_path, fingerprint, read_json
from grueflow.keep import dated_apart, read_cache, stat_signature, write_cache
from grueflow.params import VALID, valid_out_problem, validate
from grueflow.stale import (HUMAN_ANSWERS, TABLES, answered_paths, dvc_kept_edits, dvc_unseen_edits, keep_answered,
                            keep_edited_tables, keep_user_files, locked_stages, output_folders, refuse_links)

RESULTS = "results"  # where every DVC stage writes (dvc.yaml's outs, relative to the project root)
VERIFIED_OUTPUTS = Path(".dvc") / "tmp" / "grueflow-verified-outputs.json"  # {output file: [its stat signature,
# the digest its stage.json lists]} when it was read and found as listed (damaged_outputs), so that one is read again
# only once it changed; in DVC's own scratch folder, which git ignores


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grueflow.suite_check", description=__doc__.split("\n\n")[0])
    p.add_argument("suite", type=Path, help="the suite file, params/suite.yaml")
    p.add_argument("--out", type=Path, required=True, help="write 'valid' here when the suite is valid")
    p.add_argument("--plugin-code", type=Path, required=True,
                   help="write <task>/<stage>.json here: the digests of the user code each stage runs")
    args = p.parse_args(argv)
    try:  # first, whatever the suite holds: a refusal below makes `dvc repro --ignore-errors` delete the outs
        document = _mapping(Path(pipeline.DVC_YAML))
        outputs = suite_outputs(args.suite, document)
        unset: Optional[DataError] = None
        try:  # before the copies, which then keep the damaged files it names
            rehashed = rehash_damaged_outputs(Path("."))
            if rehashed:
                print(rehashed, file=sys.stderr)
        except DataError as err:  # a time that could not be set: refused once the copies are made
            unset = err
        for line in keep_persons_files(outputs):
            print(line, file=sys.stderr)
        if unset is not None:
            raise unset
    except DataError as err:  # a copy could not be made, or a damaged output's time set: nothing may run
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        mismatch = vars_problem(args.suite, document)
        if mismatch:
            raise ConfigError(mismatch)
        suite = validate(args.suite, "dvc")
        params = Path(suite.config.params_dir)
        digests = pipeline.plugin_digests({name: read_yaml(params / "tasks" / f"{name}.yaml")
                                           for name in suite.config.tasks}, Path.cwd())
        unlisted = pipeline.unlisted_plugin_sources(digests, document)
        if unlisted:
            raise ConfigError(f"the task files name user code or data that {pipeline.DVC_YAML} does not list as a "
                              f"dependency: {', '.join(unlisted)}; regenerate it with `{pipeline.COMMAND}`")
        out_problem = valid_out_problem(args.out)
        if out_problem:
            raise ConfigError(f"--out {args.out} {out_problem}")
        code_problem = plugin_code_problem(args.plugin_code)
        if code_problem:
            raise ConfigError(code_problem)
        outside = results_outside(Path(RESULTS), Path.cwd())
        if outside:
            raise ConfigError(outside)
        refuse_links(Path(RESULTS), outputs)
        rehashed = rehash_unseen_edits(Path("."))
        if rehashed:
            print(rehashed, file=sys.stderr)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    with atomic_dir(args.plugin_code) as tmp:
        for task, stages in digests.items():
            (tmp / task).mkdir()
            for stage, entry in stages.items():
                (tmp / task / f"{stage}.json").write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    with atomic_path(args.out) as tmp:
        tmp.write_text(VALID)
    kept = kept_edits_problem(outputs)  # after the writes: the stages it names can then be run alone (dvc repro -s)
    if kept:
        print(f"error: {kept}", file=sys.stderr)
        return 2
    return 0


def results_outside(results: Path, root: Path) -> str:
    """Why DVC cannot write ``results`` of the repository at ``root``: it is a link that leads out of the repository
    (DVC refuses every output there, "is outside of git repository", this stage's first); "" when it can."""
    if not results.is_symlink() or Path(os.path.realpath(results)).is_relative_to(os.path.realpath(root)):
        return ""
    return (f"{results} is a link to {os.readlink(results)}, outside this repository: DVC writes no output outside "
            f"its repository; move it back (rm {results} && mv {os.path.realpath(results)} {results}), and put DVC's "
            f"cache on the other disk instead (dvc cache dir <folder there>)")


def suite_outputs(suite: Path, document: Mapping) -> list[Path]:
    """Every output path the stages of ``document`` (``dvc.yaml`` as data) write over the grid of the suite file
    ``suite``, read as it lies, before any validation (:func:`grueflow.pipeline.dvc_outputs`), and over the grid
    DVC expands from ``document``'s ``vars`` (:func:`vars_grid`; the same grid unless ``vars`` names another file,
    which :func:`vars_problem` refuses after the copies): a suite with a typo in a params file, or one invalid
    itself, still names the outputs DVC would restore or delete; a path the file system cannot name (a task name over
    its 255-byte limit) is left out. Never raises: a suite file that does not read as a
    mapping gives no grid (the stages outside it only), and a ``dvc.yaml`` missing or out of shape no outputs."""
    try:
        paths = [*pipeline.dvc_outputs(document, _mapping(suite)),
                 *pipeline.dvc_outputs(document, vars_grid(document))]
    except (AttributeError, TypeError, ValueError):  # a dvc.yaml edited by hand: its stages not as this writes them
        return []
    return [Path(path) for path in dict.fromkeys(paths) if _nameable(path)]


def _nameable(path: str) -> bool:
    """Whether the file system can name ``path``: False where a part of it (a task name) is over the 255-byte name
    limit or the whole over the path limit (ENAMETOOLONG), so nothing can lie there to copy; the suite's validation
    then refuses the name in one line."""
    try:
        os.lstat(path)
    except OSError as err:
        return err.errno != errno.ENAMETOOLONG
    return True


def vars_grid(document: Mapping) -> dict:
    """The values DVC interpolates into the stages of ``document`` (``dvc.yaml`` as data): its ``vars`` entries
    merged in order, a file path read as a YAML mapping (``FILE:key1,key2`` only those keys), a mapping as given;
    a key an earlier entry set is kept (DVC refuses to redefine one). Empty where ``vars`` is missing or no list;
    an entry that does not read as a mapping adds nothing."""
    entries = document.get("vars") if isinstance(document, Mapping) else None
    grid: dict = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, str):
            path, _, keys = entry.partition(":")
            values = _mapping(Path(path))
            if keys:
                values = {key: values[key] for key in keys.split(",") if key in values}
        else:
            values = entry if isinstance(entry, dict) else {}
        for key, value in values.items():
            grid.setdefault(key, value)
    return grid


def vars_problem(suite: Path, document: Mapping) -> str:
    """Why the values DVC expands the stages of ``document`` (``dvc.yaml`` as data) with may not come from the suite
    file ``suite`` alone, which this stage validates and the table stage reads (``aggregate --suite``): every ``vars``
    entry must name ``suite`` itself (relative to the project root, the cwd), as :func:`grueflow.pipeline.dvc_document`
    writes it (``FILE:keys`` of it too); another file, or values given in ``dvc.yaml``, would set a grid that is
    trained but neither checked nor tabulated. "" when they all do, or where no ``dvc.yaml`` is there (``document``
    empty)."""
    if not document:
        return ""
    given = document.get("vars")
    entries = given if isinstance(given, list) else []
    others = [entry for entry in entries if not isinstance(entry, str)
              or os.path.realpath(entry.partition(":")[0]) != os.path.realpath(suite)]
    if entries and not others:
        return ""
    named = (f"'s vars name {', '.join(e if isinstance(e, str) else repr(e) for e in others)}" if others
             else f" names no suite file in vars (vars: {given!r})")
    other = next((entry.partition(":")[0] for entry in others if isinstance(entry, str)), "<suite file>")
    return (f"{pipeline.DVC_YAML}{named}, but its stages validate and tabulate {suite} alone (validate_suite, "
            f"aggregate --suite): a grid DVC takes from elsewhere would be trained, but neither checked nor in the "
            f"table; to run another suite under DVC, copy it over {suite} (cp {other} {suite}), then put vars back "
            f"with `{pipeline.COMMAND}`")


def set_to_now(root: Path, paths: Iterable[str], why: str) -> None:
    """Set the modification time of each of ``paths`` (relative to ``root``) to now, so that DVC's own hash cache
    (kept by inode, size and time) hashes it again; one that cannot be set is a :class:`DataError` naming it and
    ``why`` DVC may otherwise take it as unchanged."""
    for path in paths:
        try:
            os.utime(root / path)
        except OSError as err:
            raise DataError(f"{path} {why}, so DVC may take it as unchanged; its time cannot be set to now "
                            f"({err.strerror}): `touch {path}` as its owner, then rerun dvc repro") from None


def rehash_unseen_edits(root: Path) -> str:
    """Set to now the modification time of each file of the project at ``root`` whose change DVC may miss
    (:func:`grueflow.stale.dvc_unseen_edits`: a dep dvc.lock records with other bytes, whose modification time is not
    the time of its last change, which DVC's own hash cache, kept by inode, size and time, may take as unchanged), so
    that DVC hashes it again when it looks at the later stages' deps, after this stage, and reruns the stages that
    read it; the line that says so, "" where there is none. A time that cannot be set is a :class:`DataError` naming
    the file."""
    unseen = dvc_unseen_edits(root)
    set_to_now(root, unseen, f"changed since dvc.lock recorded it, {_apart(1)}")
    if not unseen:
        return ""
    it, its = ("it", "its") if len(unseen) == 1 else ("them", "their")
    return (f"grueflow: {', '.join(unseen)} changed since dvc.lock recorded {it}, {_apart(len(unseen))}, which DVC's "
            f"own hash cache (kept by inode, size and modification time) may take as unchanged: {its} "
            f"{'time is' if len(unseen) == 1 else 'times are'} set to now so that DVC hashes {it} again")


def rehash_damaged_outputs(root: Path) -> str:
    """Set to now the modification time of each file of the stage folders among the outputs ``root/dvc.lock``
    records (:func:`grueflow.stale.output_folders`) that DVC may take as unchanged though it no longer matches its
    ``stage.json`` manifest (:func:`damaged_outputs`), so that DVC hashes it again when it looks at the stage's outs,
    after this stage, and restores them from its cache or reruns the stage (and, where the bytes then differ, the
    stages that read them); the line that says so, naming the files and their stages, "" where there is none. A time
    that cannot be set is a :class:`DataError` naming the file."""
    damaged = damaged_outputs(root)
    set_to_now(root, damaged, f"no longer matches the digest its stage recorded at the size it has, {_apart(1)}")
    if not damaged:
        return ""
    one = len(damaged) == 1
    it, its = ("it", "its") if one else ("them", "their")
    stages = ", ".join(dict.fromkeys(damaged.values()))
    names = list(damaged)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"grueflow: {shown} {'does' if one else 'do'} not match the digest{'' if one else 's'} {its} stage "
            f"recorded in {STAGE_RECORD} at the size{'' if one else 's'} {it} {'has' if one else 'have'}, "
            f"{_apart(len(damaged))}, which DVC's own hash cache (kept by inode, size and modification time) may take "
            f"as unchanged: {its} {'time is' if one else 'times are'} set to now so that DVC hashes {it} again and "
            f"restores or reruns {stages}")


def _apart(count: int) -> str:
    """Why DVC may take ``count`` files changed in place as unchanged: their modification times are not those of their
    last changes (:func:`grueflow.keep.dated_apart`)."""
    if count == 1:
        return "and its modification time is not that of its last change (kept or set over a rewrite)"
    return "and their modification times are not those of their last changes (kept or set over a rewrite)"


def damaged_outputs(root: Path) -> dict[str, str]:
    """The files under an output ``root/dvc.lock`` records, in a stage folder (:func:`grueflow.stale.output_folders`),
    that its ``stage.json`` manifest lists at the size they have, whose modification time is not the time of their
    last change (:func:`grueflow.keep.dated_apart`), and whose digest is not the one listed
    (:func:`grueflow.io.fingerprint`): a same-size rewrite in place whose time was kept or put back, whatever that time
    is (before or after the record's, or in the future), and whatever wrote the folder (its stage, or ``dvc
    checkout``, which writes a folder's files in no fixed order). DVC's own hash cache takes a file's md5 from its
    inode, size and modification time, so it may have seen such a file as recorded at that time, and ``dvc repro``
    would keep it. Each as a path relative to ``root``, with the name of its stage in ``dvc.lock``, in path order. A
    file of another size, or whose modification time is that of its last change (a plain edit: its bytes are the ones
    DVC saw at that time, if it looked), is left to DVC, which hashes it itself where it changed (and the readers
    refuse it, :func:`grueflow.io.check_stage_output`); a file no out of ``dvc.lock`` holds is left to the stages that
    read it (DVC would not rerun its stage). A file is read only while its stat signature
    (:func:`grueflow.keep.stat_signature`) is not the one kept, with the digest listed, in
    ``root/``:data:`VERIFIED_OUTPUTS` when it was last read and found as listed: its change time moves with any
    change and cannot be set back. So a folder as its stage or ``dvc checkout`` wrote it is not read, and one whose
    times were set since (a project copied with ``cp -a`` or ``rsync -a``) is read whole once."""
    locked = locked_stages(root / "dvc.lock")
    known = read_cache(root / VERIFIED_OUTPUTS)
    verified: dict[str, list] = {}
    damaged: dict[str, str] = {}
    for folder in output_folders(root / path for path in locked):
        try:
            listed_files = read_json(folder / STAGE_RECORD)["files"]
        except (OSError, ValueError, KeyError, TypeError):  # the stale checks and the readers name a damaged record
            continue
        for name, meta in sorted(listed_files.items() if isinstance(listed_files, dict) else ()):
            file = folder / name
            path = file.relative_to(root).as_posix()
            stage = _locked_stage(locked, path)
            try:
                found = file.stat()
            except OSError:
                continue
            if stage is None or not stat.S_ISREG(found.st_mode) or not isinstance(meta, dict) \
                    or not isinstance(meta.get("sha256"), str) or found.st_size != meta.get("bytes") \
                    or not dated_apart(found):
                continue
            entry = [stat_signature(found), meta["sha256"]]
            if known.get(path) == entry or fingerprint(file) == meta["sha256"]:
                verified[path] = entry
            else:
                damaged[path] = stage
    if verified != known:
        write_cache(root / VERIFIED_OUTPUTS, verified)
    return damaged


def _locked_stage(locked: Mapping[str, tuple[str, dict]], path: str) -> Optional[str]:
    """The name of the stage whose output in ``locked`` (:func:`grueflow.stale.locked_stages`) is the file ``path``
    or a folder above it; None where none is (DVC does not track it)."""
    parts = path.split("/")
    return next((locked["/".join(parts[:end])][0] for end in range(len(parts), 0, -1)
                 if "/".join(parts[:end]) in locked), None)


def kept_edits_problem(outputs: Sequence[Path]) -> str:
    """Why ``dvc repro`` may not go on: outputs whose files are not what their stage wrote, which ``dvc.lock`` records
    as they are (:func:`grueflow.stale.dvc_kept_edits`: a hand edit taken by ``dvc commit``), so that DVC would keep
    them as pipeline results, neither rerunning nor restoring their stages; naming each, its record and the command
    that rebuilds them. "" where there is none."""
    kept = dvc_kept_edits(Path("."), TABLES, output_folders(outputs))
    if not kept:
        return ""
    files = "; ".join(f"{file} (unlike what {record} records of it; stage {stage})" for file, record, stage in kept)
    stages = " ".join(dict.fromkeys(stage for _, _, stage in kept))
    return (f"dvc.lock records outputs their stages did not write, as they are (dvc commit took a hand edit as a "
            f"stage's output), so dvc repro would keep them as pipeline results: {files}; their bytes stay in DVC's "
            f"cache under this dvc.lock; rebuild them with `dvc repro -f -s {stages}`, then `dvc repro`")


def keep_persons_files(outputs: Sequence[Path]) -> list[str]:
    """Copy to ``.grueflow/replaced/`` what DVC's restore or rerun of the suite's ``outputs`` (:func:`suite_outputs`)
    would delete and no stage wrote, as the Snakefile does before Snakemake's jobs; one line per copy made now: each
    human-evaluation batch among them with answers on record under ``data/human/``, with its key
    (:func:`grueflow.stale.keep_answered`), each table file edited since its stage wrote it
    (:func:`grueflow.stale.keep_edited_tables`), and what a stage folder holds that no stage record vouches for
    (:func:`grueflow.stale.keep_user_files`). Reads only what lies there (never the suite's validation), and makes
    no change under ``results/``. A copy that fails is a :class:`DataError`."""
    batches = [path.parts[2:] for path in outputs
               if len(path.parts) == 5 and path.parts[:2] == (RESULTS, "human") and path.parts[3] == "batches"]
    tree = answers_tree(Path(HUMAN_ANSWERS), sorted({task for task, _, _ in batches}),
                        {batch for _, _, batch in batches})
    lines = keep_answered(Path("."), answered_paths(tree.batches))
    lines += keep_edited_tables(Path("."), TABLES)
    return lines + keep_user_files(Path(RESULTS), output_folders(outputs))


def _mapping(path: Path) -> dict:
    """The YAML mapping in ``path``; empty where it is missing, unreadable or no mapping."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return document if isinstance(document, dict) else {}


def plugin_code_problem(folder: Path) -> str:
    """Why ``folder`` cannot be replaced by the digests (``<task>/<stage>.json``): a file, or a folder that holds
    anything else (the params, the data, the results); "" when it can."""
    if not folder.exists():
        return ""
    if not folder.is_dir():
        return f"--plugin-code {folder} is a file; give the folder of the digests"
    other = next((path for path in folder.rglob("*") if not path.is_dir() and not _a_digest(path, folder)), None)
    if other is not None:
        return (f"--plugin-code {folder} holds {other.relative_to(folder)}, which this check never writes (only "
                f"<task>/<stage>.json digests): it would replace the whole folder; give the digests' own folder")
    return ""


def _a_digest(path: Path, folder: Path) -> bool:
    """Whether ``path`` is a ``<task>/<stage>.json`` this check wrote: ``{"import_paths": ..., "sha256": ...}``."""
    if path.suffix != ".json" or len(path.relative_to(folder).parts) != 2:
        return False
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(entry, dict) and set(entry) == {"import_paths", "sha256"}


if __name__ == "__main__":
    raise SystemExit(main())
