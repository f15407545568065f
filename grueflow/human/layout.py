"""Where answers lie: ``data/human/<task>/<batch>/`` holds a batch's answers files (the annotation page's
``.jsonl``, a platform's results ``.csv``). :func:`answers_tree` finds the batches the human-evaluation table
imports, and names what lies there and would be left out without a word; :func:`answer_files` lists one answers
folder's files for the import.

A folder or file may be a symbolic link (answers kept on a shared drive) and is read through it. Hidden files
(:func:`hidden`: ``.gitkeep``, an editor's lock link, DVC's ``.gitignore``, LibreOffice's ``.~lock.<name>#`` and
Excel's ``~$<name>`` owner files) are passed over everywhere. What a checkout has not fetched is an error naming
what to run: a ``*.dvc`` pointer beside a folder or file it lacks (``dvc pull``), a link to nothing.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from grueflow.io import DataError

log = logging.getLogger(__name__)
PAGE_SUFFIX = ".jsonl"  # the annotation page's answers file: JSON lines
ANSWER_SUFFIXES = (PAGE_SUFFIX, ".csv")
LEFTOVER_SUFFIX = ".cut"  # an unfinished line the page's answers file moved aside (grueflow.human.answers)
DVC_SUFFIX = ".dvc"  # what `dvc add answers.jsonl` (or `dvc add <batch folder>`) leaves beside what it tracks
SEED = r"(?:0|[1-9][0-9]*)"  # as a suite writes a seed
BATCH_SHAPE = re.compile(rf"likert_seed{SEED}|.+_vs_.+_seed{SEED}")  # a batch of some suite
ANSWERS_GIVEN = "answers_given"  # the key of an import's stage.json that lists its --answers as given: files and
# folders, whose files now the human-evaluation table compares with those the import read
OWNER_PREFIX = "~$"  # Microsoft Office's owner file beside a document it has open (or had, before a crash): binary,
# the user's name, no answers; Windows hides it, a share or `git add` shows it


def lost_answers(record: object, root: Path) -> list[Path]:
    """The answers an import's stage ``record`` was read from that no longer exist at all, relative to the project's
    ``root``: each ``--answers`` it lists as given (:data:`ANSWERS_GIVEN`; else the folder of each answers file it
    read), gone (moved out of ``data/human``, consent withdrawn). No import can be made again from them: the answers
    must be put back there, or the import no longer used. Empty for a record of no import, or whose answers are all
    there (an answers file deleted from a folder that still holds others is not lost: the import reruns on the rest).
    """
    if not isinstance(record, dict) or not isinstance(record.get("inputs"), dict):
        return []
    given = record.get(ANSWERS_GIVEN)
    if isinstance(given, list) and given and all(isinstance(path, str) for path in given):
        named = [Path(path) for path in given]
    else:
        named = sorted({Path(meta["path"]).parent for name, meta in record["inputs"].items()
                        if name.startswith("answers") and isinstance(meta, dict) and isinstance(meta.get("path"), str)})
    return [path for path in named if not os.path.lexists(root / path)]


def hidden(name: str) -> bool:
    """Whether an entry named ``name`` is one the answers' readers pass over: a dot file (``.gitkeep``,
    LibreOffice's ``.~lock.<name>#``) or an Office owner file (``~$<name>``), which hold no answers."""
    return name.startswith((".", OWNER_PREFIX))


def _visible(folder: Path) -> list[Path]:
    """``folder``'s entries but hidden ones (:func:`hidden`), sorted."""
    return sorted(p for p in folder.iterdir() if not hidden(p.name))


def unfetched(folder: Path, entries: Iterable[Path]) -> list[str]:
    """What among ``entries`` (of ``folder``) this checkout has not fetched, each as a sentence naming the fix: a
    symbolic link to nothing (an unfetched git-annex file, an unmounted drive), a ``*.dvc`` pointer beside no file
    or folder of its name (DVC tracks it, ``dvc pull`` has not fetched it)."""
    problems = []
    for path in entries:
        if path.is_symlink() and not path.exists():
            problems.append(f"{path} is a symbolic link to nothing ({os.readlink(path)}); fetch or mount what it "
                            f"points to, or remove the link")
        elif path.suffix.lower() == DVC_SUFFIX and not os.path.lexists(folder / path.stem):
            problems.append(f"{path} tracks {folder / path.stem}, which this checkout lacks: run dvc pull (or dvc "
                            f"checkout) first")
    return problems


def answer_files(paths: Sequence[Path], warn: bool = True) -> list[Path]:
    """The answers files given, a folder standing for its ``*.jsonl`` and ``*.csv`` files (sorted). Hidden files
    (:func:`hidden`: an Excel owner file ``~$results.csv`` too) and DVC's ``*.dvc`` pointers in a folder are passed
    over, and so are the page's ``*.cut`` leftovers, each named in a warning (:func:`warn_leftover`); what the
    checkout has not fetched (:func:`unfetched`), any other file there (a ``results.xlsx``) or a folder in it (whose
    files are not read) is a DataError: their answers would be left out of the table without a word. ``warn``:
    False lists the files without the warnings (a reader that only compares the listing with an import's)."""
    files = []
    for path in paths:
        if not path.is_dir():
            if warn:
                warn_leftover(path.with_name(path.name + LEFTOVER_SUFFIX))
            files.append(path)
            continue
        entries = _visible(path)
        problems = unfetched(path, entries)
        if problems:
            raise DataError(problems[0])
        other = [p.name + ("/" if p.is_dir() else "") for p in entries
                 if p.is_dir() or p.suffix.lower() not in (*ANSWER_SUFFIXES, LEFTOVER_SUFFIX, DVC_SUFFIX)]
        if other:
            it = "it" if len(other) == 1 else "them"
            raise DataError(f"{path} holds {', '.join(other)}: neither the page's .jsonl nor a results .csv (the "
                            f"files of a folder inside are not read), so the import would leave {it} out; save a "
                            f"spreadsheet as CSV UTF-8 (Comma delimited), move answers files up into {path}, or move "
                            f"{it} out of the folder")
        for leftover in (p for p in entries if warn and p.suffix.lower() == LEFTOVER_SUFFIX):
            warn_leftover(leftover)
        files += _read(entries)
    if not files:
        raise DataError(f"no answers files in {[str(p) for p in paths]}; give the page's .jsonl or a results .csv")
    return files


def answers_in(folder: Path) -> list[Path]:
    """The files of ``folder`` that the import reads (:func:`answer_files`), sorted, whatever else lies there: where
    :func:`answer_files` refuses the folder, these are still the files it would read once the rest is moved out."""
    return _read(_visible(folder))


def _read(entries: Iterable[Path]) -> list[Path]:
    """The answers files among a folder's visible ``entries``: each ``*.jsonl`` and ``*.csv`` that is no folder (a
    FIFO so named is listed, and refused as it is read)."""
    return [p for p in entries if p.suffix.lower() in ANSWER_SUFFIXES and not p.is_dir()]


def warn_leftover(cut: Path) -> None:
    """A warning naming the page's leftover file ``cut`` (``<answers file>.cut``), if it holds anything: the lines
    the page moved aside from its answers file as unfinished (an interrupted write, or text added by hand), which
    the import does not read. Only a person can tell whether one was an answer."""
    if not cut.is_file() or cut.stat().st_size == 0:
        return
    n = cut.read_bytes().count(b"\n") or 1
    answers = cut.with_name(cut.name[:-len(LEFTOVER_SUFFIX)])
    log.warning("%s holds %d unfinished line(s) the annotation page moved aside from %s (an interrupted write, or "
                "text added by hand); they are not imported: if one is an answer, fix it, add it to %s and delete "
                "%s", cut, n, answers.name, answers.name, cut.name)


@dataclass
class AnswersTree:
    """What :func:`answers_tree` found. ``batches``: ``(task, batch)`` of every batch folder with answers (a visible
    entry), sorted; ``warnings``: what lies there and is not imported, on purpose or not (another suite's task or
    batch, a file outside a batch folder); ``errors``: what the table would leave out without a word (a folder
    named as no batch, a file named as a task or a batch, what the checkout has not fetched)."""

    batches: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def answers_tree(root: Path, tasks: Sequence[str], batches: Iterable[str]) -> AnswersTree:
    """The batches with answers under ``root`` (``data/human``) for the suite's ``tasks``, whose batch folders are
    named as in ``batches`` (``likert_seed<k>``, ``<method_a>_vs_<method_b>_seed<k>`` for the suite's methods and
    seeds). Never raises: the caller decides when an error stops it (the table's job only)."""
    tree = AnswersTree()
    suite_batches = set(batches)
    if root.exists() and not root.is_dir():
        tree.errors.append(f"{root} is a file; it is the folder of the answers, {root}/<task>/<batch>/<files>")
        return tree
    if not root.is_dir():  # a link to an unmounted drive, `dvc add data/human` and no pull yet; else no answers
        pointer = root.with_name(root.name + DVC_SUFFIX)
        tree.errors += unfetched(root.parent, [path for path in (root, pointer) if os.path.lexists(path)])
        return tree
    entries = _visible(root)
    tree.errors += unfetched(root, [p for p in entries if (p.stem if p.suffix == DVC_SUFFIX else p.name) in tasks])
    tree.errors += [f"{p} is a file named as a task; a task's answers go in a folder of that name, one folder per "
                    f"batch: {p}/<batch>/answers.jsonl (the page's) or {p}/<batch>/<results>.csv" for p in entries
                    if p.is_file() and p.name in tasks]
    stray = [p for p in entries if _loose(p) and p.name not in tasks]
    for task_dir in entries:
        if not task_dir.is_dir():
            continue
        if task_dir.name not in tasks:
            if _has_answers(task_dir):
                tree.warnings.append(f"{task_dir}/ is not imported: {task_dir.name} is no task of this suite "
                                     f"({', '.join(tasks)})")
            continue
        task_entries = _visible(task_dir)
        tree.errors += unfetched(task_dir, task_entries)
        tree.errors += [f"{p} is a file named as a batch; a batch's answers go in a folder of that name: "
                        f"{p}/answers.jsonl (the page's) or {p}/<results>.csv" for p in task_entries
                        if p.is_file() and (p.name in suite_batches or BATCH_SHAPE.fullmatch(p.name))]
        stray += [p for p in task_entries if _loose(p) and p.name not in suite_batches
                  and not BATCH_SHAPE.fullmatch(p.name)]
        for batch_dir in task_entries:
            if not batch_dir.is_dir() or not _visible(batch_dir):  # a placeholder (.gitkeep): no answers yet
                continue
            if batch_dir.name in suite_batches:
                tree.batches.append((task_dir.name, batch_dir.name))
            elif BATCH_SHAPE.fullmatch(batch_dir.name):
                tree.warnings.append(f"{batch_dir}/ is not imported: it is no batch of this suite (its methods "
                                     f"and seeds)")
            else:
                tree.errors.append(f"{batch_dir}/ is named as no batch: a batch folder is named likert_seed<k> or "
                                   f"<method_a>_vs_<method_b>_seed<k>, as results/human/{task_dir.name}/batches/ "
                                   f"names it; rename it, or move it out of {root}")
    tree.warnings += [f"{p} is not imported: answers files go in {root}/<task>/<batch>/ (the batch they answer); "
                      f"move it there" for p in stray]
    return tree


def _loose(path: Path) -> bool:
    """Whether ``path``, a visible entry above the batch folders, is a file the table does not read and that may
    hold answers (any file but a ``*.dvc`` pointer and a README): answers saved one level too high, or under a
    name without ``.jsonl``."""
    return path.is_file() and path.suffix.lower() != DVC_SUFFIX and not path.name.lower().startswith("readme")


def _has_answers(folder: Path) -> bool:
    """Whether ``folder`` holds a file at any depth that is not hidden nor inside a hidden folder (:func:`hidden`: a
    placeholder such as ``.gitkeep`` is no answer)."""
    return any(path.is_file() and not any(hidden(part) for part in path.relative_to(folder).parts)
               for path in folder.rglob("*"))
