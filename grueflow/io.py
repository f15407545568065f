"""Atomic file output, JSONL, fingerprints and the ``stage.json`` record of every stage folder.

Nothing half-written ever looks finished: files go to a temporary name in the same folder and are
renamed into place; a stage folder counts as finished only once its ``stage.json`` exists, and that
file is written last.

Reading is strict: a text file that is not UTF-8, a JSONL line that is not JSON or a missing input
raises :class:`DataError` naming the file and line, which a stage reports in one line (exit code 2).
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import csv
import ctypes
import errno
import glob
import hashlib
import json
import logging
import math
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

STAGE_RECORD = "stage.json"
PROVENANCE_RECORD = "provenance.json"  # how the run went (commit, wall time, device, code): in no content hash
TIMINGS_FILE = "timings.csv"  # a training stage's wall-clock columns per step: in no content hash either
UNHASHED = (PROVENANCE_RECORD, TIMINGS_FILE)  # what .dvcignore, the manifest and the input digests leave out
SNAKEMAKE_TIMESTAMP = ".snakemake_timestamp"  # Snakemake's modification time of a directory() output, which it adds
# after the job: in no input digest (:func:`fingerprint`), so that a folder has one digest whichever engine wrote it
MODEL_DIR = "model"  # the Hugging Face model folder inside a model-producing stage's output
REPLACED = Path(".grueflow") / "replaced"  # copies of what stage folders held that no stage record vouches for
WRITTEN = Path(".snakemake") / "grueflow-written"  # per output path: the digest of the record a Snakemake job
# last wrote there, beside Snakemake's own records of its jobs (removed with them)
ENGINE = "GRUEFLOW_ENGINE"  # the environment variable the Snakefile sets to "snakemake" for its jobs
RECORD_DIGEST = "record_sha256"  # the key of a stage record's digest of the rest of itself (:func:`sealed`)
CODE_RAN = "code"  # {file relative to the repository: its fingerprint, or null}: the code a stage ran, in its
# provenance record or a table's files record (grueflow.stage.code_record)
NAMED_RAN = "named_files"  # {file the task names (a plugin's source, a file its args name): its path digest}: what a
# stage read besides grueflow's code, in its provenance record (grueflow.stage.named_record)
PARAMS_READ = "params_files"  # {"task", "method": the params file a stage read, as its command line named it}, in its
# provenance record: where a look by hand (grueflow show) compares its params, whichever suite's params_dir it ran
PLANNED = Path(".snakemake") / "grueflow-planned.json"  # the params digests of the stage folders of the Snakemake
# run going on, as it planned them (:func:`write_planned`)
PLAN = "GRUEFLOW_PLAN"  # the environment variable naming, for a Snakemake run's jobs, the run that wrote PLANNED
_PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "grueflow")


@contextlib.contextmanager
def atomic_path(path: str | Path, mode: Optional[int] = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds, with ``mode``
    (default: the mode a new file gets, 0666 less the umask; 0600 keeps a file private). The temporary name holds
    the writer's host and process id, so that one a killed writer left is deleted by the next writer of ``path``
    (:func:`remove_leftovers`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{_WRITER}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask() if mode is None else mode)  # mkstemp's is 0600
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_paths(paths: Iterable[str | Path]) -> Iterator[list[Path]]:
    """Yield a temporary path beside each of ``paths``; rename them all onto theirs only if the block succeeds, so
    that outputs written together (a table's CSV, Markdown and JSON) are never new beside old. A folder at one of
    ``paths`` (where no file can be renamed) is an IsADirectoryError before anything is written."""
    paths = [Path(path) for path in paths]
    folders = [path for path in paths if path.is_dir()]
    if folders:
        raise IsADirectoryError(errno.EISDIR, "a folder is where a file is to be written", str(folders[0]))
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(atomic_path(path)) for path in paths]


def files_record(first: str | Path) -> Path:
    """Where a stage that writes files rather than a folder of its own (a table and the files written with it)
    records their digests: ``.<name>.record.json`` beside the first of them (``results/.grue_table.csv.record.json``),
    hidden; in no Snakemake rule's outputs, and an out of DVC's table stage (:data:`grueflow.pipeline.TABLE_RECORD`),
    which DVC restores with the table it describes."""
    first = Path(first)
    return first.with_name(f".{first.name}.record.json")


BUILT_FROM = "built_from"  # the key, in a files record, of the stage folders the files were built from


@contextlib.contextmanager
def atomic_files(paths: Iterable[str | Path], built_from: Optional[Mapping[str | Path, Optional[str]]] = None,
                 code: Optional[Mapping[str, Optional[str]]] = None) -> Iterator[list[Path]]:
    """:func:`atomic_paths` of ``paths`` and of their :func:`files_record`, ``{path as given: sha256 of its bytes}``,
    written from the temporary files once the block succeeds, so that a file edited after its stage wrote it can be
    told apart from what the stage wrote (grueflow.stale). The record is renamed into place first: one left beside
    older files says they differ, never that they match. ``built_from`` ({stage folder read: :func:`record_digest`
    of it, taken before it was read}), where given, is recorded too, under :data:`BUILT_FROM`, each folder relative to
    the working folder (the project, where both engines run stages) where it lies in it, else absolute: what the
    files were built from, which the stale check compares with what the suite names now. ``code``, where given (the
    code the stage runs, :func:`grueflow.stage.code_record`), is recorded under :data:`CODE_RAN`: where Snakemake
    holds no record of the job, the stale check compares it with the code now. A reader of the file digests takes the
    entries whose value is a string (:func:`written_digests`)."""
    paths = [Path(path) for path in paths]
    with atomic_paths([*paths, files_record(paths[0])]) as tmps:
        yield tmps[:-1]
        record: dict[str, Any] = {str(path): sha256_bytes(tmp) for path, tmp in zip(paths, tmps)}
        if built_from is not None:
            record[BUILT_FROM] = {_relative_to_cwd(Path(os.path.abspath(folder))): digest
                                  for folder, digest in built_from.items()}
        if code:
            record[CODE_RAN] = dict(code)
        write_json(tmps[-1], record)
        note_written(_relative_to_cwd(Path(os.path.abspath(paths[0]))), tmps[-1])


def written_digests(record: object) -> Optional[dict[str, str]]:
    """The file digests of a files record read as JSON (:func:`files_record`): ``{path as given: sha256}``, the
    entries whose value is a string (:data:`BUILT_FROM` left out); None where ``record`` is no JSON object (a record
    damaged by hand)."""
    if not isinstance(record, dict):
        return None
    return {path: digest for path, digest in record.items() if isinstance(digest, str)}


def record_digest(folder: str | Path) -> Optional[str]:
    """The sha256 of the stage record (``stage.json``) of the stage folder ``folder``, None where it has none: what a
    table records of each folder it read (:func:`atomic_files`), which changes when the folder is rebuilt with other
    content, params or inputs, and not on a forced rerun that writes it byte for byte again."""
    record = Path(folder) / STAGE_RECORD
    return sha256_bytes(record) if record.is_file() else None


def note_written(out: str, record: str | Path) -> None:
    """Note, in the project's :data:`WRITTEN` (under the working folder, where Snakemake runs its jobs), that the
    Snakemake job writing the output ``out`` (a path relative to the project, :func:`output_path`) wrote the record
    ``record`` for it (a stage folder's ``stage.json``, a table's :func:`files_record`), by the record's sha256.
    Written before the output is renamed into place, so that an output in place never has an older note than its
    own. Only a stage run as a Snakemake job (:data:`ENGINE` set to ``snakemake`` by the Snakefile) notes what it
    wrote; an output outside the project (an absolute ``out``) is noted nowhere: no stale check looks at it.

    What it is for: Snakemake keeps its record of a job's params per output path, and never compares it with the
    output. An output written there since by other means (an older copy put back by hand after a params change, the
    stage run by hand with other settings, ``dvc repro`` with other params) is then "Nothing to be done" to
    Snakemake, while its record is not the one the last job wrote (:func:`last_written`, grueflow.stale)."""
    if os.path.isabs(out) or os.environ.get(ENGINE) != "snakemake":
        return
    write_json(_written_note(Path("."), out), {"out": os.path.normpath(out), "sha256": sha256_bytes(record)})


def write_planned(digests: Mapping[str | Path, Mapping[str, str]]) -> str:
    """Write :data:`PLANNED` (under the working folder, where Snakemake runs its jobs) in one step: ``digests``, the
    :func:`grueflow.pipeline.params_digest` of each stage folder (a path relative to the project) as a Snakemake run
    planned it, under a new run id, which is returned for the run's jobs (:data:`PLAN` in their environment). The
    Snakefile writes it once a real run holds Snakemake's lock, before its first job; a dry run writes nothing."""
    run = uuid.uuid4().hex
    write_json(PLANNED, {"run": run, "digests": {os.path.normpath(out): dict(d) for out, d in digests.items()}})
    return run


def planned_params(out: str | Path) -> Optional[dict[str, str]]:
    """The params digest the Snakemake run going on planned for the stage folder ``out`` (as its command line gives
    it), from :data:`PLANNED`; None where there is nothing to compare with: a stage not run as a Snakemake job
    (:data:`ENGINE` unset: by hand, by DVC), a job of a run that wrote no plan (:data:`PLAN` unset, or naming
    another run than the file's: a plan an earlier run left never judges a later job), no such file, or no entry
    for ``out`` (an absolute path, a folder outside the suite's). A :class:`DataError` where the file is not as the
    run wrote it (unreadable, or its digests not mappings)."""
    run = os.environ.get(PLAN)
    if os.environ.get(ENGINE) != "snakemake" or not run:
        return None
    try:
        plan = json.loads(PLANNED.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {PLANNED}, the params this Snakemake run planned ({err}); it is written at "
                        f"each run's start: run snakemake again") from None
    if not isinstance(plan, dict) or plan.get("run") != run:
        return None
    digests = plan.get("digests")
    planned = digests.get(os.path.normpath(out)) if isinstance(digests, dict) else None
    if not isinstance(digests, dict) or (planned is not None and not isinstance(planned, dict)):
        raise DataError(f"{PLANNED}, the params this Snakemake run planned, holds no digests for {out} as it writes "
                        f"them (edited or damaged?); it is written at each run's start: run snakemake again")
    return planned


def last_written(root: Path, path: Path) -> Optional[str]:
    """The sha256 of the record that the Snakemake job last writing ``path`` (a stage folder or a table, under the
    project ``root``) wrote for it (:func:`note_written`); None where none is noted (an output that no Snakemake job
    of this project wrote, one built before notes were kept, or whose note went with ``.snakemake/``) or the note is
    unreadable: nothing is then known."""
    out = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    try:
        note = read_json(_written_note(root, out))
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or note.get("out") != os.path.normpath(out):
        return None
    return note["sha256"] if isinstance(note.get("sha256"), str) else None


SNAKEMAKE_METADATA = Path(".snakemake") / "metadata"  # Snakemake's record of each output's job: its params, code


def snakemake_metadata(root: Path, path: Path) -> Path:
    """The file of Snakemake's own record of the job that wrote the output ``path`` (under the project ``root``),
    where Snakemake keeps it: ``.snakemake/metadata/`` and the URL-safe base64 of the path relative to the project,
    cut into folder names of at most 254 characters (each but the last starting with ``@``), as Snakemake's
    persistence names it. Whether it exists says whether Snakemake can compare the job's params with its rule's:
    ``--drop-metadata`` and ``--cleanup-metadata`` remove it while grueflow's note stays."""
    out = os.path.normpath(os.path.relpath(os.path.abspath(path), os.path.abspath(root)))
    name = base64.urlsafe_b64encode(out.encode()).decode()
    parts = [name[i:i + 254] for i in range(0, len(name), 254)]
    return root.joinpath(SNAKEMAKE_METADATA, *["@" + part for part in parts[:-1]], parts[-1])


def _written_note(root: Path, out: str) -> Path:
    """The file of :data:`WRITTEN` under ``root`` that notes the output ``out``: one per path, so that stages running
    at once never write the same file."""
    return root / WRITTEN / f"{hashlib.sha256(os.path.normpath(out).encode()).hexdigest()[:32]}.json"


def sha256_bytes(path: str | Path) -> str:
    """sha256 of a file's bytes alone (:func:`fingerprint` hashes its name too)."""
    return _hash_file(hashlib.sha256(), path).hexdigest()


def _hash_file(digest: Any, path: str | Path) -> Any:
    """``digest`` updated with the bytes of the file ``path``, read a MiB at a time."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest


class DataError(ValueError):
    """An input file or row that cannot be used as it is; the message names the file, the line or row, and the fix."""


class MissingDataError(DataError, FileNotFoundError):
    """An input file or folder that does not exist (still a FileNotFoundError for callers that expect one)."""


RESULT_DECIMALS = 6  # the least a written result keeps: decimals, or significant digits for |value| < 0.1


def rounded(value: float) -> float:
    """``value`` as result files write it: to :data:`RESULT_DECIMALS` decimals, or to as many significant digits
    when that keeps more (|value| < 0.1), so that a small value (a KL of 3e-7, a learning rate) is never written as
    0 while larger ones keep their 6 decimals."""
    if value == 0 or not math.isfinite(value):
        return value
    decimals = max(RESULT_DECIMALS, RESULT_DECIMALS - 1 - math.floor(math.log10(abs(value))))
    return round(value, decimals)


# byte-order marks of the encodings a data file is saved in besides UTF-8 (UTF-32's before UTF-16's: a prefix)
UNICODE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32le"), (b"\x00\x00\xfe\xff", "utf-32be"), (b"\xff\xfe", "utf-16le"),
                (b"\xfe\xff", "utf-16be"))


# the magic bytes that open a compressed file, and the command that decompresses it
COMPRESSIONS = ((b"\x1f\x8b", "gzip", "gunzip -k"), (b"BZh", "bzip2", "bunzip2 -k"), (b"\xfd7zXZ\x00", "xz", "unxz -k"),
                (b"(\xb5/\xfd", "zstd", "unzstd"), (b"PK\x03\x04", "zip", "unzip"))


# what a checkout holds in place of a file it has not fetched (the pointer's first bytes), and the command that
# fetches it: a Git LFS pointer, an unlocked git-annex file (a locked one is a link to nothing)
POINTERS = ((b"version https://git-lfs.github.com/spec/", "a Git LFS pointer", "git lfs pull --include"),
            (b"/annex/objects/", "a git-annex pointer", "git annex get"))


# UTF-32's before UTF-16's: a UTF-32 text of Latin script has a NUL at every other byte too
UNMARKED_ENCODINGS = ("utf-32le", "utf-32be", "utf-16le", "utf-16be")
SNIFFED_BYTES = 4096  # how much of a file's start :func:`unmarked_encoding` looks at


def unmarked_encoding(head: bytes) -> Optional[str]:
    """The UTF-16 or UTF-32 encoding (``utf-16le``, ...) of a text that starts with the bytes ``head`` and has no
    byte-order mark, else None. Such a text decodes to no NUL character in it, while at least a quarter of its
    characters are below U+0100 (Latin script, digits, spaces and line ends), whose high bytes are NUL: a NUL byte at
    every other position in UTF-16, three in four in UTF-32. UTF-8 text holds no NUL byte; a head that starts with a
    byte-order mark (:data:`UNICODE_BOMS`) or a compression's magic bytes (:data:`COMPRESSIONS`) is left to the
    reader's own message for those."""
    if b"\x00" not in head or head.startswith(tuple(bom for bom, _ in UNICODE_BOMS)) or \
            head.startswith(tuple(magic for magic, _, _ in COMPRESSIONS)):
        return None
    for encoding in UNMARKED_ENCODINGS:
        try:  # not final: the head may end inside a character
            text = codecs.getincrementaldecoder(encoding)().decode(head, final=False)
        except UnicodeDecodeError:
            continue
        if text and "\x00" not in text and 4 * sum(ord(char) < 0x100 for char in text) >= len(text):
            return encoding
    return None


def iter_lines(path: str | Path, carriage_returns: bool = False) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file, line endings kept, a UTF-8 byte-order mark at its start (what
    Notepad and Excel write) left out; a non-UTF-8 byte is a DataError naming the file, the line and the column (or
    the compression, for a compressed file), never a bare UnicodeDecodeError, and so is a file this checkout has
    not fetched (:data:`POINTERS`), which would read as one bad line, and a UTF-16 or UTF-32 file saved without a
    byte-order mark (:func:`unmarked_encoding`), whose NUL bytes are valid UTF-8. Lines end at ``\n``; with
    ``carriage_returns`` also at a lone ``\r`` (classic Mac OS line ends, as most editors show them)."""
    with open(path, "rb") as handle:
        encoding = unmarked_encoding(handle.read(SNIFFED_BYTES))
        if encoding is not None:
            nuls = "a NUL byte at every other position" if "16" in encoding else "three NUL bytes in every four"
            raise DataError(f"{path} is not UTF-8: it reads as {encoding} without a byte-order mark ({nuls}); re-save "
                            f"the file as UTF-8 (e.g. iconv -f {encoding} -t utf-8)")
        handle.seek(0)
        raws = handle.read().splitlines(keepends=True) if carriage_returns else handle  # \n, \r\n and \r only
        for number, raw in enumerate(raws, start=1):
            pointer = next(((kind, tool) for head, kind, tool in POINTERS if number == 1 and raw.startswith(head)),
                           None)
            if pointer:
                raise DataError(f"{path} is {pointer[0]}, not the file: this checkout has not fetched its content; "
                                f"run {pointer[1]} {path}")
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                packed = next(((kind, tool) for magic, kind, tool in COMPRESSIONS
                               if number == 1 and raw.startswith(magic)), None)
                if packed:
                    raise DataError(f"{path}: a {packed[0]}-compressed file, not text; decompress it ({packed[1]} "
                                    f"{path}) and give the file it writes") from None
                source = next((name for bom, name in UNICODE_BOMS if number == 1 and raw.startswith(bom)), "latin1")
                said = f" (it starts with the {source} byte-order mark)" if source != "latin1" else ""
                raise DataError(f"{path}: line {number}: byte {raw[err.start]:#04x} at column {err.start + 1} is not "
                                f"UTF-8{said}; re-save the file as UTF-8 (e.g. iconv -f {source} -t utf-8)") from None


def check_header_repeat(path: str | Path, line: int, record: list[str], header: list[str]) -> None:
    """Raise a DataError where ``record``, the data row of the CSV file ``path`` that starts on ``line``, is its
    ``header``'s column names again (each cell and name without its spaces, the first cell without a byte-order mark,
    in any letter case: ``Prompt,References`` under ``prompt,references``): the second header of two files joined
    into one (``cat a.csv b.csv``), which a reader would take for a row of data. The names in another order are
    refused with their own advice: the rows below follow that order, so deleting the line alone would put their
    cells under other columns."""
    cells = [cell.strip() for cell in record]
    if cells:
        cells[0] = cells[0].lstrip("\ufeff").strip()
    names = [name.strip() for name in header]
    folded, folded_names = [cell.casefold() for cell in cells], [name.casefold() for name in names]
    if len(cells) != len(names) or sorted(folded) != sorted(folded_names):
        return
    if folded == folded_names:
        raise DataError(f"{path}: line {line} repeats the header: were two files joined? Delete the line")
    raise DataError(f"{path}: line {line} repeats the header with the columns in another order ({','.join(cells)} "
                    f"where the header has {','.join(names)}): were two files joined? The rows below it follow its "
                    f"order, so deleting the line alone would put their cells under other columns: write them in "
                    f"the header's order (or keep the two files apart), then delete the line")


def csv_records(reader: Any, lines_before: int = 0) -> Iterator[tuple[int, list[str]]]:
    """The records a ``csv.reader`` has still to read, each with the line it starts on (1-based, what an editor and
    ``grep -n`` show; ``lines_before``: the lines of the file read before the reader began, such as Excel's
    separator hint, :func:`separator_hint`): a record with quoted line breaks spans several lines, and
    ``reader.line_num`` is its last. A blank line is an empty record."""
    end = reader.line_num
    for record in reader:
        start, end = end + 1, reader.line_num
        yield start + lines_before, record


# Excel's first line naming a CSV file's delimiter (sep=, or sep=;), in any case, quoted as a CSV writer quotes a
# cell holding the delimiter ("sep=,"), and padded to the header's width by a sheet app that saved it as a row of
# empty cells (sep=,,,,): the delimiter is the one character after "sep=", whatever follows
SEPARATOR_HINT = re.compile(r'(?P<quote>"?)sep=(?P<delimiter>[^"\r\n])(?P=quote)[,;\t]*', re.IGNORECASE)


def separator_hint(handle: Any) -> Optional[str]:
    """The delimiter Excel's separator hint names, where the first line of the text file ``handle`` (opened with
    ``newline=""``, at its start) is one (:data:`SEPARATOR_HINT`: ``sep=,``, a line Excel reads and hides, which tools
    that prepare a CSV for Excel write; also ``SEP=,``, ``"sep=,"`` and ``sep=,,,,`` or ``sep=;;;;``, padded to the
    header's width, whose delimiter is the first character after ``sep=``), with ``handle`` left after that line;
    else None, with ``handle`` back at its start."""
    match = SEPARATOR_HINT.fullmatch(handle.readline().rstrip("\r\n"))
    if match is None:
        handle.seek(0)
        return None
    return match["delimiter"]


def loads_unique(text: str) -> Any:
    """``json.loads(text)``, but an object that names one key twice is a ValueError naming the key: JSON keeps the
    last value without a word."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        row = dict(pairs)
        if len(row) < len(pairs):  # the first key written twice
            keys = [key for key, _ in pairs]
            twice = next(key for i, key in enumerate(keys) if key in keys[:i])
            raise ValueError(f"the key {twice!r} is written twice in one object")
        return row

    return json.loads(text, object_pairs_hook=unique)


def read_text(path: str | Path) -> str:
    """A UTF-8 text file's contents (see :func:`iter_lines` for the error on other encodings)."""
    return "".join(line for _, line in iter_lines(path))


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json_text(data))


def json_text(data: Any) -> str:
    """The text :func:`write_json` writes for ``data``: indented by two, keys sorted, a newline at the end; a
    ValueError for NaN or an infinity, which JSON cannot hold."""
    return json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"


def refuse_special_file(path: str | Path, remedy: str, name: str = "") -> None:
    """Raise a :class:`DataError`, ``"<name> <path> is not a regular file (a FIFO, a socket or a device); <remedy>"``,
    when ``path`` (or what it links to) exists and is neither a regular file nor a folder. Reading a FIFO waits for a
    writer and reading a device such as /dev/zero never ends, while ``Path.is_file()`` is False for both: a reader
    that tests only that calls them missing. A missing path, a dangling link and a folder pass: the caller's own
    message for each says more."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing, a dangling link, or unreadable: the caller's open or its own test says which
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise DataError(f"{f'{name} ' if name else ''}{path} is not a regular file (a FIFO, a socket or a device); "
                        f"{remedy}")


def read_json(path: str | Path) -> Any:
    """The JSON document in the file ``path``. One that is no regular file (a FIFO, a socket, a device, or a link to
    one: a record replaced by hand), whose reading could wait for a writer or never end, is a :class:`DataError`."""
    refuse_special_file(path, "put back the file it should be, or delete it")
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    """Each of ``rows`` (a JSON object, or any JSON value) as one line of UTF-8 JSON, keys sorted."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n")


def write_csv(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Rows of scalars as CSV (the format ``dvc plots`` reads), columns in first-seen order."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


SHOWN_CHARS = 80  # the most characters of a value a one-line message shows (:func:`shown`)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a one-line message, cut to ``limit`` characters where longer, with ``...`` and the
    value's size (``'xxxx...' (2,000,000 characters)``, ``[...]... (5,000 items)``): a value pasted whole (a file's
    text in a key, a list of thousands) would push the key, the choices and the fix out of any terminal's line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        size = f"{len(value):,} characters"
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        size = f"{len(value):,} item{'s' if len(value) != 1 else ''}"
    else:
        size = f"{len(text):,} characters as written"
    return f"{text[:limit - 3]}... ({size})"


def markdown_line(text: Any) -> str:
    """``text`` on one Markdown line: each line break (CommonMark's: CR LF, CR, LF) made a space. Free text written
    into a Markdown file (a metric's reason for being missing, a name, a note under a table) would otherwise end its
    line there, and its next lines could read as table rows, headings or list items of their own."""
    return re.sub(r"\r\n|\r|\n", " ", str(text))


def markdown_row(cells: Iterable[Any]) -> str:
    """One row of a Markdown (GitHub) table, ``| a | b |``, each cell as text with ``|`` escaped as ``\\|`` and line
    breaks made spaces (:func:`markdown_line`): a name holding either (a metric of one's own, a criterion, a reason)
    would otherwise split its cell or end the row, and a viewer would show the values under the wrong headings."""
    return "| " + " | ".join(markdown_line(cell).replace("|", "\\|") for cell in cells) + " |"


def iter_jsonl(path: str | Path) -> Iterator[Any]:
    """The JSON value of each non-blank line; a DataError names the file and line of one that is not JSON."""
    for number, line in iter_lines(path):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}: line {number}, column {err.colno}: not a JSON object ({err.msg}); "
                                f"each line of a .jsonl file is one JSON object") from None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


_BEFORE_REPLACING: dict[Path, Callable[[Path], Any]] = {}  # resolved folder -> called before atomic_dir replaces it
_REPLACES: dict[Path, Path] = {}  # atomic_dir's temporary folder -> the path it replaces, absolute, links kept


def before_replacing(path: str | Path, call: Callable[[Path], Any]) -> None:
    """Have :func:`atomic_dir` of ``path`` call ``call(path)`` (the resolved path) right before it replaces a folder
    found there, in this process: a stage keeps a copy of what a person put in its ``--out`` folder while it ran."""
    _BEFORE_REPLACING[Path(os.path.realpath(path))] = call


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; it replaces ``path`` only if the block succeeds.

    The temporary folder's name holds the writer's host and process id: a writer killed before the swap
    leaves it behind, and the next :func:`atomic_dir` of ``path`` on that host deletes it once that process is
    gone (:func:`remove_leftovers`). Before the swap every file and folder in it is flushed to disk (``fsync``),
    so a power loss cannot leave a renamed folder of empty files, and it gets the mode a plain ``mkdir`` would
    (readable by the group under the usual umask), as do the weights files in it (:func:`_share_weights`). The
    swap never deletes in place: a folder already at ``path`` is exchanged with the new one in one step where the
    system can (:func:`_exchange`), else renamed aside first, and deleted after, so a concurrent writer or reader
    of the same ``path`` (Snakemake and ``dvc repro`` at once) cannot make it fail; the last writer's folder
    stays, each one complete. A symlink at ``path`` is written through: the folder it points to (followed to the
    end, created when missing) is replaced and the link stays as it is. A folder found at ``path`` is first handed
    to the call registered for it (:func:`before_replacing`), if any.
    """
    given = Path(os.path.abspath(path))
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{_WRITER}.", suffix=".tmp", dir=path.parent))
    _REPLACES[tmp] = given  # for the record of a stage writing tmp (output_path)
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        _share_weights(tmp)
        _fsync_tree(tmp)
        if path in _BEFORE_REPLACING and path.is_dir():
            _BEFORE_REPLACING[path](path)
        _swap_in(tmp, path)
        _fsync_folder(path.parent)
    finally:
        _REPLACES.pop(tmp, None)
        if tmp.exists():
            shutil.rmtree(tmp)


def output_path(out_dir: str | Path) -> str:
    """Where the stage folder being written in ``out_dir`` lies, as its ``stage.json`` records it (``out``): the path
    the :func:`atomic_dir` that yielded ``out_dir`` replaces (``out_dir`` itself where no :func:`atomic_dir` did), as
    given (a symlink in it kept), relative to the working folder when it lies in it, as the stage's input paths are
    (the project, where both engines run stages), else absolute. The same on every run of a stage at the same path,
    so that a forced or no-op rerun writes ``stage.json`` byte for byte again; the stale check compares it with the
    folder the record is found in (:func:`grueflow.stale.stale_outputs`: a stage folder copied over another), and a
    reader by hand notes the same (:func:`copy_note`)."""
    folder = Path(os.path.abspath(out_dir))
    return _relative_to_cwd(_REPLACES.get(folder, folder))


def _relative_to_cwd(path: Path) -> str:
    """The absolute ``path`` relative to the working folder when it lies in it, else as it is."""
    cwd = Path(os.getcwd())
    return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)


def working_folder() -> Path:
    """The working folder as the shell reached it: ``$PWD`` where that names the very folder :func:`os.getcwd` gives
    (a folder reached through a link) and a project lies above it but none above :func:`os.getcwd` (``cd results``
    where ``results`` links to another disk); else :func:`os.getcwd`, which has every link resolved: a folder linked
    into another project, or from outside any (a link in ``/tmp`` to a project's ``results/eval``), lies in the
    project that holds it, whose records name its paths."""
    cwd = os.getcwd()
    pwd = os.environ.get("PWD")
    if pwd and os.path.isabs(pwd) and pwd != cwd and not _in_project(Path(cwd)) and _in_project(Path(pwd)):
        try:
            if os.path.samefile(pwd, cwd):
                return Path(os.path.normpath(pwd))
        except OSError:
            pass
    return Path(cwd)


def _in_project(folder: Path) -> bool:
    """Whether a project's root (a folder holding a :data:`PROJECT_MARKER`) is ``folder`` or lies above it."""
    return any((above / PROJECT_MARKER).is_file() for above in (folder, *folder.parents))


def absolute(path: str | Path) -> Path:
    """``path`` made absolute from the :func:`working_folder` (links kept), normalised as :func:`os.path.abspath`
    normalises it."""
    return Path(os.path.normpath(os.path.join(working_folder(), path)))


def written_for(root: str | Path, folder: str | Path, out: object) -> Optional[str]:
    """The output path ``out`` a stage record found in ``folder`` names (:func:`output_path`, relative to ``root``,
    the project's root) where it is another folder than ``folder``: the record and its files were written there and
    copied here (``cp -a`` of another run's folder), or ``folder`` is a link to that one, and they pass their own
    checks. Compared as paths, links not followed (the record keeps them as given; a link to another run's folder is
    not that run), a relative one taken from the working folder as the shell reached it (:func:`absolute`) or as
    :func:`os.getcwd` names it (as :func:`output_path` wrote it). None where they agree, or the record names no path
    (one written before records named their output)."""
    if not isinstance(out, str) or not out:
        return None
    same = absolute(Path(root) / out) == absolute(folder) or \
        os.path.normpath(os.path.abspath(Path(root) / out)) == os.path.normpath(os.path.abspath(folder))
    return None if same else out


PROJECT_MARKER = "Snakefile"  # what the project's root holds: the folder both engines run stages in


def project_root(path: str | Path) -> Path:
    """The root of the project ``path`` lies in, which stage records name their paths relative to: the nearest folder
    above ``path`` (as given, links kept; a relative one taken from the :func:`working_folder` as the shell reached
    it, so ``cd results`` through a link to another disk still finds the project above it) that holds a
    :data:`PROJECT_MARKER`; else the working folder, which :func:`output_path` takes paths relative to."""
    return next((folder for folder in absolute(path).parents if (folder / PROJECT_MARKER).is_file()), working_folder())


def copy_note(path: str | Path) -> Optional[str]:
    """One sentence for a person reading ``path`` (a stage folder, or a file or folder in one; links kept) by hand
    where its stage folder's ``stage.json`` records another output path than that folder (:func:`written_for`,
    relative to :func:`project_root`): the folder is a copy of, or a link to, another run's, and what it holds is
    that run's. It says whether a pipeline run rebuilds the folder (the stale check rebuilds a suite folder under
    the project's ``results/``; a copy elsewhere is left as it is). Where no project is found and the recorded path
    is not found from the working folder (a run's own folder reached by a path that no project lies above), it says
    that neither is known, never that the folder is a copy. None where the record names the folder itself,
    names no path, cannot be read (:func:`check_stage_output` reports that), or ``path`` is in no stage folder."""
    found = _recorded_out(path)
    if found is None:
        return None
    folder, root, out = found
    if not (root / PROJECT_MARKER).is_file() and not os.path.lexists(root / out):  # no project: nothing to compare
        return (f"{folder}'s {STAGE_RECORD} records the output path {out}, which is not found from {root}, and no "
                f"project (a folder holding a {PROJECT_MARKER}) lies above {folder} or in the working folder: whether "
                f"it is that run's own folder or a copy of it, and whether a pipeline run rebuilds it, is not known "
                f"here; run grueflow show in its project's root to judge it")
    other = absolute(root / out)
    cwd = working_folder()
    shown = other.relative_to(cwd) if other.is_relative_to(cwd) else other
    how = "a link to" if linked_path(path) is not None else "a copy of"
    results = absolute(root / "results")
    rebuilt = f"a pipeline run whose suite writes {folder} rebuilds it" \
        if absolute(folder).is_relative_to(results) else \
        f"no pipeline run rebuilds it, as it lies outside {results}"
    return (f"{folder} is {how} the stage folder written at {shown} (its {STAGE_RECORD} records that path as its "
            f"output): what it holds is that run's; {rebuilt}")


def _recorded_out(path: str | Path) -> Optional[tuple[Path, Path, str]]:
    """``(folder, root, out)`` where ``path`` (links kept) lies in the stage folder ``folder`` (``path`` as given, or
    a folder above it) whose ``stage.json`` records another output path ``out`` than ``folder``
    (:func:`written_for`, relative to ``root``, the :func:`project_root`); None where it records ``folder`` itself,
    no path, cannot be read, or ``path`` is in no stage folder."""
    given = Path(path)
    folder = next((p for p in (given, *given.parents) if (p / STAGE_RECORD).is_file()), None)
    if folder is None:
        return None
    try:
        record = read_json(folder / STAGE_RECORD)
    except (OSError, ValueError):
        return None
    recorded = record.get("out") if isinstance(record, dict) else None
    root = project_root(folder)
    out = written_for(root, folder, recorded)
    real = os.path.realpath(folder)
    if out is not None and os.path.realpath(root / out) != real:  # a link from outside its project: /tmp/latest
        real_root = project_root(real)
        if isinstance(recorded, str) and os.path.realpath(real_root / recorded) == real:
            root, out = real_root, written_for(real_root, folder, recorded)
    return None if out is None else (folder, root, out)


def linked_path(path: str | Path) -> Optional[Path]:
    """``path`` (a stage folder, or a file or folder in one) as it lies in the stage folder its ``stage.json``
    records, where it is reached through a link to that folder: the stage folder found above ``path`` as given
    (links kept) records another output path than its own, and is that folder with its links followed (a link to
    it, not a copy of it). Written relative to the working folder where it lies in it, else absolute. None for a
    path in no stage folder, in the folder its record names, or in a copy."""
    found = _recorded_out(path)
    if found is None:
        return None
    folder, root, out = found
    other = absolute(root / out)
    if os.path.realpath(folder) != os.path.realpath(other):
        return None
    given = other / absolute(path).relative_to(absolute(folder))
    cwd = working_folder()
    return given.relative_to(cwd) if given.is_relative_to(cwd) else given


def file_link_target(path: str | Path) -> Path:
    """The file the link ``path`` leads to, its own links followed one at a time, each as it names its target (a
    relative one from the link's folder), so that the folders on the way keep the links they are reached through
    (``preds.jsonl`` -> ``results/eval/<run>/predictions.jsonl`` with ``results`` a link to another disk: the run's
    file in its project); written relative to the :func:`working_folder` where it lies in it, else absolute.
    ``path`` itself where it is no link, or its links go round in a loop."""
    given, seen = absolute(path), set()
    while given.is_symlink():
        if given in seen:
            return Path(path)
        seen.add(given)
        given = absolute(given.parent / os.readlink(given))
    if not seen:
        return Path(path)
    cwd = working_folder()
    return given.relative_to(cwd) if given.is_relative_to(cwd) else given


def check_written_here(path: str | Path, flag: str, copy_ok: bool = False) -> None:
    """Raise a :class:`DataError` where the input ``path`` a stage was given as ``flag`` (a stage folder, or a folder
    or file in one; links kept) lies in a stage folder whose ``stage.json`` records another output path than that
    folder's (:func:`written_for`): another run's folder copied there (``cp -a``) or reached through a link, which
    passes its own manifest check, and whose content a stage would take for the run its path names (another run's
    model scored under this run's row). Compared only where the recorded path is relative, as a stage run in a
    project writes it (:func:`output_path`): an absolute one (a folder written outside the project, then moved
    there) tells nothing of where it belongs. Nothing is raised for a path in no stage folder or a record that
    cannot be read (:func:`check_stage_output` reports that).

    With ``copy_ok`` (an input whose content says what it is, whatever its path: a human-evaluation batch, named
    by its tag, which its answers and its key name too) such a folder is taken as the output of the path its record
    names, provided that record holds the bytes its stage wrote (:func:`as_written`; its reader checks the files
    against it, :func:`check_stage_output`): one edited by hand vouches for nothing, and is refused.

    A folder reached through a link of the user's to the folder its record names, where the path as given lies
    outside the project's ``results/`` and in no other stage folder (``data/imports`` linked to
    ``results/human/<task>/imported``), is that folder and names no run: it is taken, as a link to one of its files
    is, and its reader checks it at the folder its record names (:func:`linked_path`). A link under ``results/``,
    where the pipeline writes stage folders, names the run of its path, and is refused.

    The advice of a refusal never deletes a copy grueflow kept under :data:`REPLACED` (:func:`kept_by_grueflow`),
    which may be all that is left of that run's output: it says to put it back where its record says it was
    written, the folder found there moved aside first."""
    found = _recorded_out(path)
    if found is None or os.path.isabs(found[2]):
        return
    folder, root, out = found
    if linked_path(path) is not None and not _names_a_run(folder, root):
        return  # a link of the user's outside results/ (data/imports): its path names no run, and it is that one
    how = "a link to" if os.path.realpath(folder) == os.path.realpath(root / out) else "a copy of"
    what = (f"{flag} {path}: {folder} is {how} the stage folder written at {out} (its {STAGE_RECORD} records that "
            f"path as its output)")
    if copy_ok:
        if not as_written(folder / STAGE_RECORD):
            raise DataError(f"{what}, and that {STAGE_RECORD} is not as its stage wrote it (edited by hand), so "
                            f"nothing vouches for what the folder holds; give a copy whose {STAGE_RECORD} is as "
                            f"written, or the folder at {out}")
        return
    if kept_by_grueflow(folder):
        raise DataError(f"{what}: what it holds is that run's, not the run its path names; it is the copy grueflow "
                        f"kept of {out} before a rerun replaced that folder, and may be all that is left of that "
                        f"run's output: keep it; to use it as that run's, move the folder at {out} aside and copy "
                        f"this one back there (cp -a {folder} {out}), then give {out}")
    raise DataError(f"{what}: what it holds is that run's, not the run its path names; delete {folder} and rerun "
                    f"the pipeline (snakemake or dvc repro) to rebuild it")


def _names_a_run(folder: Path, root: Path) -> bool:
    """Whether the stage folder ``folder`` (as given, links kept) lies where a pipeline run writes stage folders,
    so that its path names a run: under the project's ``results/`` (``root``'s), or inside another stage folder."""
    absolute = Path(os.path.abspath(folder))
    return absolute.is_relative_to(os.path.abspath(root / "results")) or in_stage_folder(absolute.parent)


def kept_by_grueflow(path: str | Path) -> bool:
    """Whether ``path`` (as given, links kept) lies in a copy grueflow kept of a folder before replacing it: under a
    project's :data:`REPLACED` (:func:`grueflow.keep.keep_copy`)."""
    parts = Path(os.path.abspath(path)).parts
    return any(parts[i:i + len(REPLACED.parts)] == REPLACED.parts for i in range(len(parts)))


_WRITER = f"{socket.gethostname().replace('.', '_')}-{os.getpid()}"  # who writes a temporary folder: host-pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_leftovers(path: str | Path) -> list[Path]:
    """Delete the temporary folders and files that writers of ``path`` killed on this host left beside it (an
    unfinished ``.tmp``, an old output renamed ``.old`` before its deletion); returns them. A live writer's,
    and another host's, are kept. A symlink renamed aside (an output that was a link) is unlinked: what it points
    to is never touched."""
    path = Path(path)
    host = _WRITER.rsplit("-", 1)[0]
    pattern = re.compile(rf"\.{re.escape(path.name)}\.{re.escape(host)}-(\d+)\..+\.(tmp|old)")
    removed = []
    for candidate in path.parent.glob(f".{glob.escape(path.name)}.*"):
        match = pattern.fullmatch(candidate.name)
        if match and not _alive(int(match.group(1))):
            _remove(candidate)
            removed.append(candidate)
    return removed


def _remove(path: Path) -> None:
    """Delete ``path``: a symlink (dangling or not) or a file is unlinked, a folder deleted with what it holds;
    what is gone already, or cannot be deleted, is left (a later :func:`remove_leftovers` tries again)."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink()
            return
    except OSError:
        return
    shutil.rmtree(path, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _share_weights(root: Path) -> None:
    """Give every ``.safetensors`` file under ``root`` that only its owner may read (the safetensors library writes
    mode 0600) the mode a new file gets, 0666 less the umask, as the folder holding it has: the group can read the
    weights it can list. Other private files (a pairwise key, written 0600 on purpose) keep their mode."""
    for file in root.rglob("*.safetensors"):
        if file.is_file() and not file.is_symlink() and file.stat().st_mode & 0o777 == 0o600:
            os.chmod(file, 0o666 & ~_umask())


def _fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every folder (deepest first), then ``root``."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_folder(Path(folder))


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


def _exchange(tmp: Path, path: Path) -> bool:
    """Swap ``tmp`` and ``path`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so that ``path`` is never
    missing, not even for a moment, to a concurrent reader; False where the C library or the file system has no
    such call, or ``path`` is gone (a plain rename then follows)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOENT, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(path))


def _swap_in(tmp: Path, path: Path, attempts: int = 20) -> None:
    """Put ``tmp`` at ``path``: swapped with what is there in one step (:func:`_exchange`), which is then deleted
    from ``tmp``; where that cannot be, whatever is at ``path`` is renamed aside (then deleted) and ``tmp`` renamed
    onto ``path``."""
    if os.path.lexists(path) and _exchange(tmp, path):
        _remove(tmp)  # the folder that was at path
        return
    for _ in range(attempts):
        aside = path.parent / f".{path.name}.{_WRITER}.{uuid.uuid4().hex[:12]}.old"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            aside = None
        try:
            os.rename(tmp, path)  # fails on a non-empty folder: another writer's, renamed in meanwhile
            return
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        finally:
            if aside is not None:
                _remove(aside)
    raise OSError(f"{path}: could not replace it after {attempts} tries; another process keeps writing it")


def fingerprint(path: str | Path, leave_out: Iterable[Path] = (), markers: bool = False) -> str:
    """sha256 over a file, or over a folder's relative paths and file contents (sorted), its
    :data:`UNHASHED` files (the provenance record, the timings) left out as ``.dvcignore`` leaves them out of
    DVC's hashes: a forced or no-op rerun of the stage that wrote the folder gives the same digest. Snakemake's
    :data:`SNAKEMAKE_TIMESTAMP` is left out too (unless ``markers``: how records written before were digested), so
    that a folder ``dvc repro`` wrote and the same one a Snakemake job wrote have one digest. The files
    ``leave_out`` (under the folder) are left out too."""
    path = Path(path)
    digest = hashlib.sha256()
    skipped = set(leave_out)
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and p.name not in UNHASHED and p not in skipped
        and (markers or p.name != SNAKEMAKE_TIMESTAMP))
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        _hash_file(digest, file)
    return digest.hexdigest()


@dataclass(frozen=True)
class InputDigest:
    """An input's :func:`fingerprint` as :func:`digest_inputs` took it, before its stage read it, and a file's
    ``(size, modification time in ns)`` then (None for a folder)."""

    path: Path
    sha256: str
    stamp: Optional[tuple[int, int]]


def digest_inputs(inputs: Mapping[str, str | Path]) -> dict[str, InputDigest]:
    """The digests a stage records (:func:`write_stage_record`) for inputs from outside results/ that may change
    while it runs (an answers file the annotation page appends to, data edited by hand), taken before the stage
    reads them. A change after this leaves the recorded digest different from the input, so the stale check reruns
    the stage; a digest taken when the stage finishes would vouch for bytes it never read (an answer appended
    meanwhile, recorded as imported). Call it before the first read."""
    out = {}
    for name, path in inputs.items():
        path = Path(path)
        stamp = (path.stat().st_size, path.stat().st_mtime_ns) if path.is_file() else None
        out[name] = InputDigest(path, fingerprint(path), stamp)
    return out


def _recorded_input(name: str, value: str | Path | InputDigest) -> dict[str, str]:
    """``{"path", "sha256"}`` of one input in ``stage.json``: an :class:`InputDigest`'s digest from before the stage
    read it (with a warning where the file changed since), or a path's digest now, less the files a person put in
    an input stage folder (:func:`grueflow.keep.persons_files`), which no stage reads."""
    if not isinstance(value, InputDigest):
        from grueflow.keep import persons_files  # grueflow.keep reads this module's records

        return {"path": str(value), "sha256": fingerprint(value, persons_files(Path(value)))}
    path = value.path
    now = (path.stat().st_size, path.stat().st_mtime_ns) if path.is_file() else None
    if value.stamp is not None and now != value.stamp:
        logging.getLogger(__name__).warning(
            "%s (%s) changed while the stage ran, after its digest was taken; the record keeps that digest, so the "
            "stage counts as stale: run it again to use the new content (snakemake does on its next run)", path, name)
    return {"path": str(path), "sha256": value.sha256}


def _git_commit() -> str | None:
    """The checkout's commit, or None: no git, not a repository, or one without a commit yet (where ``git rev-parse
    HEAD`` prints ``HEAD`` and fails)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, text=True,
                             check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit) else None


def package_versions() -> dict[str, str]:
    """The installed versions of the packages that compute a stage's results (those of them installed)."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def output_bytes(out_dir: str | Path) -> int:
    """Total size in bytes of the files under ``out_dir`` (recursively), its records and :data:`UNHASHED` files
    excluded."""
    out_dir = Path(out_dir)
    records = {out_dir / STAGE_RECORD, *(out_dir / name for name in UNHASHED)}
    return sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file() and p not in records)


# extra fields that say how a run went, not what it computed: provenance.json's (the execution settings, the parts a
# resumed run was trained in: grueflow.training.PARTS, and the code it ran: CODE_RAN)
VOLATILE = ("execution", "parts", CODE_RAN, NAMED_RAN, PARAMS_READ)


def write_stage_record(out_dir: str | Path, *, stage: str, params: Any,
                       inputs: Mapping[str, str | Path | InputDigest], wall_time_s: float,
                       extra: dict[str, Any] | None = None) -> None:
    """Write the two records of a finished stage folder, ``stage.json`` last.

    ``stage.json`` holds only what identifies the content: resolved params, input fingerprints (taken now, or before
    the stage read the input: :func:`digest_inputs`), package versions,
    ``output_bytes`` (the size of everything else in ``out_dir``, what a cache or a remote must hold), where the
    folder is written (``out``, :func:`output_path`) and the stage's own ``extra`` facts; a forced or no-op
    re-execution writes it byte for byte again, so content hashes (DVC's) do not change. ``provenance.json`` holds
    how this run went: the git commit, this process's wall time and the :data:`VOLATILE` extras (the device and
    fast paths; a resumed run's parts; the code it ran), and the :data:`RECORD_DIGEST` of the ``stage.json`` written
    with it, which tells it from another build's (DVC tracks no provenance record: ``dvc checkout`` leaves the one
    there); ``.dvcignore`` keeps it out of every hash. It also names the ``stage``, because it outlives
    ``stage.json`` when DVC removes a stage's outs before a rerun, and :func:`grueflow.stage.check_out` reads it to
    refuse another stage's folder.
    """
    extra = dict(extra or {})
    provenance = {"stage": stage, "git_commit": _git_commit(), "wall_time_s": round(wall_time_s, 3),
                  **{key: extra.pop(key) for key in VOLATILE if key in extra}}
    record = {
        "stage": stage,
        "params": params,
        "inputs": {name: _recorded_input(name, p) for name, p in inputs.items()},
        "versions": package_versions(),
        "output_bytes": output_bytes(out_dir),
        "files": manifest(out_dir),
        "out": output_path(out_dir),
        **extra,
    }
    record = sealed(record)
    write_json(Path(out_dir) / PROVENANCE_RECORD, {**provenance, RECORD_DIGEST: record[RECORD_DIGEST]})
    write_json(Path(out_dir) / STAGE_RECORD, record)
    note_written(record["out"], Path(out_dir) / STAGE_RECORD)


def sealed(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` (a stage record, without :data:`RECORD_DIGEST`) with its :data:`RECORD_DIGEST`: the sha256 of its
    text as :func:`write_json` writes it. A hand edit of the record that keeps its layout (a note added in key
    order, a number changed) then no longer matches that digest (:func:`as_written`)."""
    return {**record, RECORD_DIGEST: hashlib.sha256(json_text(record).encode("utf-8")).hexdigest()}


def as_written(path: str | Path) -> bool:
    """Whether the stage record ``path`` holds the bytes a stage writes (:func:`write_stage_record`): a JSON object
    whose text is the one :func:`write_json` writes for it, and whose :data:`RECORD_DIGEST` is the digest of the
    rest (:func:`sealed`; a record written before records held one is judged by its text alone). False for a
    record edited by hand (a note added, a number changed, reformatted), and for one unreadable, not JSON or no
    regular file (never read: :func:`refuse_special_file`): the bytes are a person's, and a rerun of the stage
    replaces them."""
    try:
        refuse_special_file(path, "")
        data = Path(path).read_bytes()
        record = json.loads(data)
        if not isinstance(record, dict) or json_text(record).encode("utf-8") != data:
            return False
        digest = record.pop(RECORD_DIGEST, None)
        return digest is None or digest == sealed(record)[RECORD_DIGEST]
    except (OSError, ValueError, RecursionError):  # a FIFO (a DataError), unreadable, not UTF-8 or not JSON, NaN,
        return False  # nested past the limit


def manifest(out_dir: str | Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file in a stage folder but its records and
    :data:`UNHASHED` files."""
    out_dir = Path(out_dir)
    records = {out_dir / STAGE_RECORD, *(out_dir / name for name in UNHASHED)}
    return {str(f.relative_to(out_dir)): {"bytes": f.stat().st_size, "sha256": fingerprint(f)}
            for f in sorted(out_dir.rglob("*")) if f.is_file() and f not in records}


_CHECKED: dict[tuple[str, str, bool], Any] = {}  # what a check found intact: its files' (size, mtime) signature


def check_stage_output(path: str | Path, deep: bool = True) -> None:
    """Raise :class:`MissingDataError` when ``path`` (a stage folder, or a folder or file inside one) no longer
    matches the manifest its stage folder's ``stage.json`` recorded: a file deleted, truncated, grown or (with
    ``deep``) changed, or reached through a symbolic link (:func:`_linked_entry`: a link put in place of a file or
    folder the stage wrote, to another run's, whose sizes may all match). The stage folder is the nearest one
    holding a ``stage.json`` above ``path`` as given, links kept (a link above the folder, such as ``results/eval``
    on another disk, is followed as usual); where none is, the nearest above ``path`` with every link followed (a
    link of the user's to a model folder inside a stage folder). A path in no stage folder is not checked. A check
    that found the files intact is not repeated in the process while their sizes and modification times stay (the
    links are looked at each time). A ``stage.json`` that is not a JSON object with a manifest of ``{bytes,
    sha256}`` entries (every stage writes one) is damaged."""
    path = Path(os.path.abspath(path))
    folder = next((p for p in (path, *path.parents) if (p / STAGE_RECORD).is_file()), None)
    if folder is None:
        path = path.resolve()
        folder = next((p for p in (path, *path.parents) if (p / STAGE_RECORD).is_file()), None)
    if folder is None:
        return
    record_file = folder / STAGE_RECORD
    part = "" if path == folder else str(path.relative_to(folder))
    try:
        record = read_json(record_file)
    except (OSError, ValueError):
        raise MissingDataError(f"{record_file} is damaged (not readable JSON); delete {folder} and rerun the "
                               f"pipeline to rebuild it") from None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not all(isinstance(meta, dict) and isinstance(meta.get("bytes"), int)
                                              and isinstance(meta.get("sha256"), str) for meta in files.values()):
        raise MissingDataError(f"{record_file} is damaged (no manifest of its files); delete {folder} and rerun "
                               f"the pipeline to rebuild it")
    mine = {name: meta for name, meta in files.items() if not part or name == part or name.startswith(part + "/")}
    linked = _linked_entry(folder, mine)
    if linked is not None:
        raise MissingDataError(f"{folder} is damaged: {linked} is a link to {os.readlink(folder / linked)}, not what "
                               f"its stage wrote; delete the folder and rerun the pipeline (snakemake or dvc repro) "
                               f"to rebuild it")
    signature = tuple((name, _stamp(folder / name)) for name in mine)
    if _CHECKED.get((str(folder), part, deep)) == signature:
        return
    for name, meta in mine.items():
        problem = _file_problem(folder / name, meta, deep)
        if problem:
            raise MissingDataError(f"{folder} is damaged: {name} {problem}; delete the folder and rerun the pipeline "
                                   f"(snakemake or dvc repro) to rebuild it")
    _CHECKED[(str(folder), part, deep)] = signature


def _linked_entry(folder: Path, names: Iterable[str]) -> Optional[str]:
    """The first of the manifest entries ``names`` under the stage folder ``folder`` (sorted) reached through a
    symbolic link into a stage folder (:func:`in_stage_folder`), as the part of it that is the link (``model`` for
    ``model/config.json`` where ``model`` is one); None where none is. No stage writes a link in its folder
    (:func:`atomic_dir` writes files and folders), so such a link was put in place of what the stage wrote: another
    run's file or folder, which passes a size check. A link elsewhere (DVC's cache with ``cache.type: symlink``
    links every file of an output into it) is checked by its content as any file."""
    seen: dict[str, bool] = {}
    for name in sorted(names):
        parts = name.split("/")
        for end in range(1, len(parts) + 1):
            part = "/".join(parts[:end])
            if part not in seen:
                seen[part] = (folder / part).is_symlink() and in_stage_folder(Path(os.path.realpath(folder / part)))
            if seen[part]:
                return part
    return None


def in_stage_folder(path: Path) -> bool:
    """Whether ``path`` (links followed) is a stage folder or lies in one: it or a folder above it holds a
    ``stage.json``."""
    return any((p / STAGE_RECORD).is_file() for p in (path, *path.parents))


def dvc_caches(path: str | Path) -> list[Path]:
    """The DVC caches of the DVC repository that holds ``path`` (the nearest folder at or above it, links not
    followed, that holds a ``.dvc`` folder), links resolved: ``.dvc/cache`` and the ``dir`` of the ``[cache]``
    section of ``.dvc/config`` and ``.dvc/config.local`` (``dvc cache dir``; a relative one is relative to
    ``.dvc/``). ``[]`` where no folder above ``path`` holds a ``.dvc`` folder."""
    start = Path(os.path.abspath(path))
    repo = next((p for p in (start, *start.parents) if (p / ".dvc").is_dir()), None)
    if repo is None:
        return []
    caches = [repo / ".dvc" / "cache"]
    for config in (repo / ".dvc" / "config", repo / ".dvc" / "config.local"):
        section = ""
        try:
            lines = config.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            header = re.match(r"\s*\[\s*(.+?)\s*\]\s*$", line)
            value = re.match(r"\s*dir\s*=\s*(.+?)\s*$", line)
            if header:
                section = header.group(1)
            elif section == "cache" and value:
                caches.append(repo / ".dvc" / Path(value.group(1).strip("'\"")).expanduser())
    return [Path(os.path.realpath(cache)) for cache in caches]


def in_dvc_cache(path: str | Path) -> bool:
    """Whether ``path``, links followed, lies in a DVC cache: one of :func:`dvc_caches` of the repository ``path``
    lies in, or any folder ``.dvc/cache``. DVC's cache holds each tracked version of a file once, named by the md5
    of its bytes; with ``cache.type`` ``symlink`` or ``hardlink`` a checkout's files are links to those objects, and
    ``dvc gc`` removes the objects no kept commit names."""
    real = Path(os.path.realpath(path))
    if any(real.parts[i:i + 2] == (".dvc", "cache") for i in range(len(real.parts) - 1)):
        return True
    return any(real.is_relative_to(cache) for cache in dvc_caches(path))


def _stamp(path: Path) -> tuple[int, int] | None:
    """(size, modification time in ns) of a file, or None when it is missing."""
    if not path.is_file():
        return None
    info = path.stat()
    return info.st_size, info.st_mtime_ns


def _file_problem(path: Path, meta: dict[str, Any], deep: bool) -> str:
    if not path.is_file():
        return "is missing"
    size = path.stat().st_size
    if size != meta["bytes"]:
        return f"has {size:,} bytes where its stage wrote {meta['bytes']:,}"
    if deep and fingerprint(path) != meta["sha256"]:
        return "does not match the digest its stage recorded"
    return ""
