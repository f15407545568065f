"""What a person put in a stage folder: found, and copied out of ``results/`` before the folder is replaced.

A stage replaces its output folder whole, and Snakemake deletes a job's outputs before the job runs; a file that
no stage record vouches for (:func:`unvouched`: one its manifest does not list, lists at another size, or lists with
another digest where it changed after its stage wrote the record; the record itself where its bytes are not the ones
a stage writes, a note added to it by hand) may be a person's notes as well as a stage's output damaged, and nothing
tells which. :func:`keep_copy` copies such files
to :data:`REPLACED`, outside ``results/``, once per content, before anything deletes them: the Snakefile's checks
(:mod:`grueflow.stale`) before any job, and a stage (:func:`grueflow.stage.keep_unvouched`) before it replaces or
refuses its ``--out``. The same checks copy a human-evaluation batch that has answers on record, and its key, whole
(:func:`grueflow.stale.keep_answered`): a re-export replaces them, and they are the only map from the answers' item
ids to the systems; :func:`copies_of` finds such copies again.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import secrets
import shutil
import signal
from pathlib import Path
from typing import Any, Optional

from grueflow.interrupt import Interrupted
from grueflow.io import (MODEL_DIR, PROVENANCE_RECORD, REPLACED, SNAKEMAKE_TIMESTAMP, STAGE_RECORD, UNHASHED,
                         DataError, as_written, atomic_path, files_record, fingerprint, in_dvc_cache, in_stage_folder,
                         read_json, sha256_bytes)


class CopyInterrupted(Interrupted):
    """A Ctrl-C (or a SIGTERM or SIGHUP that :mod:`grueflow.interrupt` raises in a stage: ``signum``) that landed
    while :func:`keep_copy` copied ``file`` out of a stage folder: its partial copy is removed and nothing was
    deleted. ``str()`` is the one line to end on (:func:`interrupted_line`)."""

    def __init__(self, signum: int, file: Path) -> None:
        super().__init__(signum)
        self.file = file
        by = "" if signum == signal.SIGINT else f" by {signal.Signals(signum).name}"
        self.args = (f"interrupted{by} while keeping a copy of {file}: nothing was deleted; rerun the same command",)


def interrupted_line(err: KeyboardInterrupt) -> str:
    """The one line a run's checks before any job (the Snakefile's, which copy out what a rebuild would delete) end
    on when ``err`` interrupted them: :class:`CopyInterrupted`'s, naming the file; else one saying where."""
    if isinstance(err, CopyInterrupted):
        return str(err)
    return "interrupted while checking the stage folders, before any job ran: rerun the same command"


def stat_signature(stat: os.stat_result) -> list[int]:
    """What changes when a file is rewritten or replaced: the device, the inode, the size and both times (a
    file's change time moves with any write or rename into place, and no tool can set it back)."""
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def dated_apart(stat: os.stat_result) -> bool:
    """Whether a file's modification time is not the time of its last change (its ctime): set since it was written
    (a time kept or put back over a rewrite in place, ``cp -p``, ``rsync -a``, ``touch -d``, a time in the future),
    or the file renamed, linked or its mode changed since. A write or a ``touch`` sets both times to the same instant,
    so where this is False the file has held its bytes ever since its modification time was what it is: a hash cache
    kept by inode, size and modification time (DVC's) that saw it at this time saw these bytes."""
    return stat.st_mtime_ns != stat.st_ctime_ns


def read_cache(path: Path) -> dict:
    """The JSON object in the cache file ``path``; empty where it is missing, unreadable or no object (what it would
    have held is computed again)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def write_cache(path: Path, entries: dict) -> None:
    """Write ``entries`` as JSON to the cache file ``path``, whole or not at all (:func:`grueflow.io.atomic_path`),
    making its folder but not the one above it (``.dvc/tmp``, never ``.dvc``: no DVC project, no cache). Left
    unwritten where it cannot be: a cache only, a read-only checkout computes it again next time."""
    try:
        path.parent.mkdir(exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


def unvouched(path: Path) -> list[Path]:
    """What a rebuild of the stage folder ``path`` would delete that no stage record vouches for, as paths under it
    (symbolic links as links; Snakemake's timestamp, FIFOs, sockets and devices, which hold no data, left out):
    every file where its ``stage.json`` is missing, unreadable or holds no manifest; else the files its manifest
    does not list, those it lists with another size, and those modified after the ``stage.json`` (which a stage
    writes last, and whose times ``cp -a`` and :func:`grueflow.io.atomic_dir` keep) whose digest is not the one it
    lists (a hand edit that kept the size: a number changed in a JSON file), and the ``stage.json`` itself where
    its bytes are not the ones a stage writes (:func:`grueflow.io.as_written`: a note added to it by hand); never
    the unhashed records a stage writes (the provenance record and the timings, which no manifest lists:
    :func:`_stage_record`). Only the record and the files modified after it are read, so that a look at a folder
    whose files are as written reads none of its weights. ``[path]`` for a file where the folder belongs. Nothing
    tells whose they are: a stage's output damaged (its record deleted, a copy ``dvc checkout`` restored, which
    lacks the provenance record), files put there by a person, or both."""
    if not path.is_dir():
        return [path] if path.is_file() or path.is_symlink() else []
    found = files_under(path)
    try:
        listed_files = read_json(path / STAGE_RECORD)["files"]
        manifest = {name: meta for name, meta in listed_files.items() if isinstance(meta, dict)}
        written_ns = (path / STAGE_RECORD).stat().st_mtime_ns
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no record to go by: all of it but the
        manifest, written_ns = None, 0  # unhashed records
    return sorted(file for file in found
                  if not _vouched(file, file.relative_to(path).as_posix(), manifest, written_ns))


def edited_outputs(path: Path) -> list[Path]:
    """The files of the stage folder ``path`` that its manifest lists at the size they have, that were modified
    after its ``stage.json`` (which a stage writes last) and whose digest is not the one listed, sorted: a hand edit
    that kept the size (a number changed in a ``metrics.json``), another run's file of the same size copied in
    (weights restored from the wrong backup). The stage's own files no longer as it wrote them, which no reader
    accepts (:func:`grueflow.io.check_stage_output` reads digests): the folder is damaged. ``[]`` where there is no
    readable manifest (the stale check names that), and for a file missing or of another size
    (:func:`grueflow.io.check_stage_output` names those). Only files newer than the record are read, each
    once a process while its stat signature holds (:func:`_digest`), so a folder as written costs a stat per file;
    a same-size replacement that kept an older time (``cp -p``) is judged by its size alone, as
    :func:`unvouched` judges it."""
    try:
        listed_files = read_json(path / STAGE_RECORD)["files"]
        written_ns = (path / STAGE_RECORD).stat().st_mtime_ns
        manifest = {name: meta for name, meta in listed_files.items() if isinstance(meta, dict)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    edited = []
    for name, meta in sorted(manifest.items()):
        file = path / name
        try:
            info = file.stat()
        except OSError:
            continue
        if info.st_size == meta.get("bytes") and info.st_mtime_ns > written_ns and file.is_file() \
                and _digest(file, info) != meta.get("sha256"):
            edited.append(file)
    return edited


def files_under(path: Path) -> list[Path]:
    """Every file under the folder ``path``, symbolic links as links (to folders too, never followed), sorted;
    Snakemake's timestamp (a file, or a link DVC's symlinked cache made of it), FIFOs, sockets and devices, which
    hold no data, left out."""
    found = []
    for top, folders, names in os.walk(path):
        for name in [*names, *(f for f in folders if os.path.islink(os.path.join(top, f)))]:
            file = Path(top) / name
            if file != path / SNAKEMAKE_TIMESTAMP and (file.is_symlink() or file.is_file()):
                found.append(file)
    return sorted(found)


def persons_files(path: Path) -> list[Path]:
    """What the digest of ``path``, a stage's input, leaves out: where ``path`` is a stage folder whose record holds
    a manifest, the files in it no stage record vouches for (:func:`unvouched`), which a person put there, no stage
    reads (its readers open the files it wrote by name), and a run copies out (:func:`keep_copy`): a note in a
    datapool's folder would otherwise change the digest its readers recorded, and rerun every training. Its
    ``stage.json`` is never left out, even edited by hand: it is what the folder's stage wrote about it, and the
    digest covers it whatever it holds. None for a model folder (``model/``), whose loaders read what it holds (a
    ``special_tokens_map.json`` put there changes the tokenizer), and for anything else."""
    if not path.is_dir() or path.is_symlink() or path.name == MODEL_DIR:
        return []
    try:
        listed_files = read_json(path / STAGE_RECORD)["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [file for file in unvouched(path) if file != path / STAGE_RECORD] if isinstance(listed_files, dict) else []


def _vouched(file: Path, name: str, manifest: Optional[dict[str, dict[str, Any]]], written_ns: int) -> bool:
    """Whether the stage wrote ``file`` (``name`` under its folder, whose ``manifest`` lists ``{bytes, sha256}``
    per file and whose record was modified at ``written_ns``; None where there is no manifest to go by): an
    unhashed record (:data:`~grueflow.io.UNHASHED`) that reads as the one a stage writes (:func:`_stage_record`);
    the stage record beside a manifest, where its bytes are the ones a stage writes (:func:`_record_as_written`); a
    file the manifest lists, at its size and, where it was modified after the record, with its digest
    (:func:`_digest`). A symbolic link is judged as the file it names, unless it leads
    into a stage folder (another run's file, put in place of the stage's own: never vouched for); DVC's cache with
    ``cache.type: symlink`` makes every file of an output such a link. A link to a folder elsewhere (``model/``
    moved to another disk and linked back) is vouched for where every file under it is."""
    if file.is_symlink() and (not file.exists() or in_stage_folder(Path(os.path.realpath(file)))):
        return False
    if file.is_symlink() and file.is_dir():  # a folder of the stage's moved elsewhere and linked back: by its files
        return manifest is not None and all(_vouched(inner, f"{name}/{inner.relative_to(file).as_posix()}", manifest,
                                                     written_ns) for inner in files_under(file))
    if name in UNHASHED:
        return _stage_record(file)
    if manifest is None:
        return False
    if name == STAGE_RECORD:
        return _record_as_written(file)
    meta = manifest.get(name)
    info = file.stat()
    if meta is None or info.st_size != meta.get("bytes"):
        return False
    return info.st_mtime_ns <= written_ns or _digest(file, info) == meta.get("sha256")


_DIGESTS: dict[str, tuple[list[int], str]] = {}  # file -> (its stat signature, its digest) as this process read it
_RECORDS: dict[str, tuple[list[int], bool]] = {}  # stage record -> (its stat signature, whether a stage wrote it)


def _record_as_written(file: Path) -> bool:
    """:func:`grueflow.io.as_written` of the stage record ``file``, read again only where its stat signature changed
    since this process last read it (a dry run looks at a stage folder more than once)."""
    signature = stat_signature(file.stat())
    known = _RECORDS.get(str(file))
    if known is None or known[0] != signature:
        known = _RECORDS[str(file)] = (signature, as_written(file))
    return known[1]


def _digest(file: Path, info: os.stat_result) -> str:
    """The digest a manifest lists for ``file`` (:func:`grueflow.io.fingerprint`; ``info`` its stat), read again
    only where its stat signature changed since this process last read it (a dry run looks at a stage folder as a
    reader's input and again as a folder that may hold a person's files)."""
    signature = stat_signature(info)
    known = _DIGESTS.get(str(file))
    if known is None or known[0] != signature:
        known = _DIGESTS[str(file)] = (signature, fingerprint(file))
    return known[1]


def _stage_record(file: Path) -> bool:
    """Whether ``file``, named as an unhashed record, is what a stage writes under that name (no manifest covers
    it, since it changes from run to run): a provenance record is a JSON object holding ``git_commit`` and
    ``wall_time_s``; the timings are a CSV whose header starts with ``iteration`` (or an empty file, which holds
    nothing). A person's own file of that name reads otherwise, and is kept as any other."""
    try:
        if file.name == PROVENANCE_RECORD:
            record = read_json(file)
            return isinstance(record, dict) and "git_commit" in record and "wall_time_s" in record
        with open(file, encoding="utf-8", newline="") as handle:
            header = handle.readline(4096)
        return header == "" or header.rstrip("\r\n").split(",")[0] == "iteration"
    except (OSError, ValueError):  # unreadable, not UTF-8, not JSON (a DataError is one): no stage wrote it
        return False


def keep_copy(path: Path, root: Path, files: list[Path], by_content: bool = False) -> Path:
    """Copy ``files`` (:func:`unvouched`: under the stage folder ``path``; ``path`` itself, and files beside it, where
    it is a file) to
    ``<root>/.grueflow/replaced/<path>@<key>``, as they lie under ``path``, and return that place; ``key`` (12 hex
    digits) is a digest of their names and stat signatures (a file's content where ``path`` is one, which the stale
    check stamps; their contents, the unhashed records at the top of ``path`` left out, where ``by_content``: a
    folder a stage may write again as it was, such as a seeded export), so that the same content, seen by one dry
    run after another, is copied once (:func:`kept_copy` finds it). Snakemake deletes
    an output before its job rebuilds it, and nothing a person put there may go with it. The copy is written under
    a temporary name of its own and renamed, so a place that exists is complete, whatever runs beside it; one found
    emptied or cut since (or a file in its place) is left as it is, and the copy made beside it (``@<key>.1``, ...).
    It is readable by the group, as every output folder is (a file keeps its own mode: a private key stays so). It
    lies outside ``results/``: no stage or table reads it, and neither engine tracks it. A copy that fails (a full
    disk, ``.grueflow`` a file) is a :class:`DataError`: nothing may run; one interrupted (Ctrl-C) is a
    :class:`CopyInterrupted` naming the file it was copying, its partial copy removed. A file reached through a link
    to a folder under ``path`` is kept as that link (:func:`as_deleted`): a rebuild deletes the link alone, and a
    copy through it would write into what it names. A link to a file is kept as the link, but for a link into DVC's
    cache (:func:`cached_link`: every file of an output checked out with ``cache.type: symlink``), the bytes it names
    are kept: ``dvc gc`` removes that object once no kept commit names it."""
    place, tmp = root / REPLACED / os.path.relpath(os.path.abspath(path), os.path.abspath(root)), None
    files = as_deleted(path, files)
    copying = path  # what a Ctrl-C interrupts: the folder while its files are looked at, then each file
    try:
        found, place = _places(path, root, files, by_content)
        if found is not None:
            return found
        place.parent.mkdir(parents=True, exist_ok=True)
        tmp = place.parent / f".{place.name}.{os.getpid()}.{secrets.token_hex(4)}"  # a run's own
        tmp.mkdir()  # the mode a new folder gets (mkdtemp's is 0700): readable by the group, as every output is
        for file in files:
            copying = file
            target = tmp / (file.relative_to(path) if path.is_dir() else file.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            if file.is_symlink() and not cached_link(file):  # as the link (shutil refuses one that names a FIFO)
                os.symlink(os.readlink(file), target)
            else:  # a link into DVC's cache as the bytes it names
                shutil.copy2(file, target)
        try:
            os.rename(tmp, place)
            tmp = None
        except OSError:
            if not place.is_dir():  # another run's copy of the same content, renamed first, is as good
                raise
    except OSError as err:
        raise DataError(f"keeping a copy of what {path} holds, which a rerun of its stage deletes, in {place} failed "
                        f"({err.strerror or err}{f': {err.filename}' if err.filename else ''}): copy or move it out "
                        f"of results/ yourself, or delete it, and run again") from None
    except KeyboardInterrupt as err:  # a Ctrl-C, or a stage's SIGTERM or SIGHUP (grueflow.interrupt.Interrupted)
        raise CopyInterrupted(err.signum if isinstance(err, Interrupted) else signal.SIGINT, copying) from None
    finally:
        if tmp is not None:  # a copy that failed, or lost to another run's: nothing of it stays
            shutil.rmtree(tmp, ignore_errors=True)
    return place


def kept_copy(path: Path, root: Path, files: list[Path], by_content: bool = False) -> Optional[Path]:
    """The complete copy :func:`keep_copy` made of ``files`` under ``path`` as they are now (the same arguments),
    or None where it has made none (or only one emptied or cut since)."""
    return _places(path, root, as_deleted(path, files), by_content)[0]


def as_deleted(path: Path, files: list[Path]) -> list[Path]:
    """``files`` (under the stage folder ``path``) as a rebuild of it deletes them, sorted: one reached through a
    symbolic link to a folder under ``path`` (``model/`` moved to another disk and linked back) as that link, the
    topmost, since deleting the folder deletes the link and never what it names. A file ``path`` is as given."""
    if not path.is_dir() or path.is_symlink():
        return files
    found = set()
    for file in files:
        parts = file.relative_to(path).parts
        found.add(next((link for end in range(1, len(parts)) if (link := path.joinpath(*parts[:end])).is_symlink()),
                       file))
    return sorted(found)


def links_left(path: Path, files: list[Path]) -> str:
    """``"; model is a link to /disk2/model: ..."`` for each link to a folder among ``files`` as a rebuild of the
    stage folder ``path`` deletes them (:func:`as_deleted`): what it names is neither copied nor deleted, and the
    line says where it is; ``""`` where there is none."""
    links = [file for file in as_deleted(path, files) if file != path and file.is_symlink() and file.is_dir()]
    return "".join(f"; {file.relative_to(path)} is a link to {os.readlink(file)}, which a rerun leaves as it is (it "
                   f"deletes the link alone; the copy holds the link)" for file in links)


def keep_batch(folder: Path, key: Optional[Path], root: Path) -> tuple[list[Path], bool]:
    """Copy the human-evaluation batch ``folder`` whole, and its key file ``key`` (a pairwise batch's; None, or no
    file, for none), to ``.grueflow/replaced/`` under ``root`` (:func:`keep_copy`, by content: the same batch
    exported again is copied once); returns the copies (the folder's, then the key's) and whether one was made now.
    ``([], False)`` where there is nothing to keep: no folder, an empty one, or a link (which a rebuild deletes,
    never what it names). The batch went to annotators, and its key is the only map from the item ids of their
    answers to the systems: both are kept before anything replaces them, answered yet or not. The key is kept with
    the record of its digest beside it (:func:`keep_key`)."""
    if folder.is_symlink() or not folder.is_dir():
        return [], False
    files = files_under(folder)
    if not files:
        return [], False
    new = kept_copy(folder, root, files, by_content=True) is None
    copies = [keep_copy(folder, root, files, by_content=True)]
    if key is not None and key.is_file() and not key.is_symlink():
        copy, new_key = keep_key(key, root)
        copies.append(copy)
        new |= new_key
    return copies, new


def keep_key(key: Path, root: Path) -> tuple[Path, bool]:
    """Copy the pairwise key file ``key`` to ``.grueflow/replaced/`` under ``root`` (:func:`keep_copy`, by content),
    with the record of its digest that its export wrote beside it (``.<key>.record.json``,
    :func:`grueflow.io.files_record`) where there is one, so that an import from the copy checks the key against it as
    it checks the key in place (an edited or swapped key is refused there too); returns the copy and whether it was
    made now."""
    record = files_record(key)
    files = [key, *([record] if record.is_file() and not record.is_symlink() else [])]
    new = kept_copy(key, root, files, by_content=True) is None
    return keep_copy(key, root, files, by_content=True), new


def batch_copies_text(copies: list[Path]) -> str:
    """``a copy of it is kept in <folder's copy>, its key in <key's copy>`` for :func:`keep_batch`'s copies; where the
    key is another batch's (:func:`_other_batchs_key`: a batch folder put back without its key),
    ``..., the key found beside it, of batch <tag> (not its own), in <key's copy>``."""
    if len(copies) < 2:
        return f"a copy of it is kept in {copies[0]}"
    other = _other_batchs_key(copies[0], copies[1])
    key = f"the key found beside it, of batch {other} (not its own)," if other else "its key"
    return f"a copy of it is kept in {copies[0]}, {key} in {copies[1]}"


def _other_batchs_key(folder: Path, key_copy: Path) -> Optional[str]:
    """The batch tag the key kept in ``key_copy`` (a :func:`keep_key` copy) names where the first item id of the batch
    kept in ``folder`` (``P<tag>-00001``) carries another; None where they agree or either is unreadable."""
    try:
        key = read_json(key_copy / key_copy.name.rsplit("@", 1)[0])
        with open(folder / "items.jsonl", encoding="utf-8") as handle:
            item_id = json.loads(handle.readline())["item_id"]
        tag = key["batch_tag"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(tag, str) or not isinstance(item_id, str) or item_id[1:].startswith(f"{tag}-"):
        return None
    return tag


def copy_root(path: Path) -> Path:
    """Where a stage's copies of what lies at ``path`` go (under ``<root>/.grueflow/replaced/``): the working folder
    where ``path`` lies in it (the project, as both engines run stages; links not followed, as ``results/`` may be
    one), else the folder holding ``path``."""
    return Path.cwd() if Path(os.path.abspath(path)).is_relative_to(Path.cwd()) else Path(os.path.realpath(path)).parent


def copies_of(path: Path, root: Path) -> list[Path]:
    """Every copy :func:`keep_copy` made of ``path`` (a folder or file under ``root``), whatever its content:
    ``<root>/.grueflow/replaced/<path>@<key>`` (and ``@<key>.<n>``), sorted; the temporary folders of a copy under
    way left out."""
    place = root / REPLACED / os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if not place.parent.is_dir():
        return []
    return sorted(p for p in place.parent.glob(f"{glob.escape(place.name)}@*") if p.is_dir() and not p.is_symlink())


def _places(path: Path, root: Path, files: list[Path], by_content: bool) -> tuple[Optional[Path], Path]:
    """(the complete copy of ``files`` made before, or None; the place a new one goes): see :func:`keep_copy`."""
    place = root / REPLACED / os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if path.is_dir():
        digest = hashlib.sha256()
        for file in _keyed(path, files, by_content):
            what = (os.readlink(file) if file.is_symlink() and not cached_link(file) else sha256_bytes(file)) \
                if by_content else stat_signature(file.lstat())
            digest.update(os.fsencode(file.relative_to(path)) + f"\0{what}\0".encode())
        key = digest.hexdigest()[:12]
    elif path.is_symlink():  # copied as the link: what it names may be no file (a FIFO, a socket, a device)
        key = hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()[:12]
    else:  # by content: the stale check stamps the file itself, which changes its times
        key = sha256_bytes(path)[:12]
    base = place = place.with_name(f"{place.name}@{key}")
    n = 0
    while os.path.lexists(place):  # a copy emptied or cut since, or a file in its place: kept, and one beside it
        if place.is_dir() and not place.is_symlink() and _holds(place, path, _keyed(path, files, by_content)):
            return place, place
        n += 1
        place = base.with_name(f"{base.name}.{n}")
    return None, place


def _keyed(path: Path, files: list[Path], by_content: bool) -> list[Path]:
    """Those of ``files`` (under the folder ``path``) whose content the copy's key covers: all of them, but the
    unhashed records at the top of ``path`` (how a run went, which differs from run to run) where ``by_content``."""
    return [f for f in files if not (by_content and f.parent == path and f.name in UNHASHED)]


def _holds(place: Path, path: Path, files: list[Path]) -> bool:
    """Whether the copy ``place`` still holds each of ``files`` (under ``path``) as :func:`keep_copy` wrote it: a
    link as a link, a file (or a link into DVC's cache, :func:`cached_link`) as a file at its size."""
    for file in files:
        target = place / (file.relative_to(path) if path.is_dir() else file.name)
        as_link = file.is_symlink() and not cached_link(file)
        if as_link and not target.is_symlink():
            return False
        if not as_link and (target.is_symlink() or not target.is_file()
                            or target.stat().st_size != file.stat().st_size):
            return False
    return True


def cached_link(file: Path) -> bool:
    """Whether ``file`` is a symbolic link to a file in a DVC cache (:func:`grueflow.io.in_dvc_cache`), as DVC checks
    out every file of an output with ``cache.type: symlink``: what it names is content-addressed, read-only and
    removed by ``dvc gc`` once no kept commit names it, so a copy keeps its bytes, never the link."""
    return file.is_symlink() and file.is_file() and in_dvc_cache(file)


def listed(path: Path, files: list[Path]) -> str:
    """``files`` (:func:`unvouched`) named for a line: the first three under ``path``, and how many more."""
    names = [str(p.relative_to(path)) if p != path else p.name for p in files]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
