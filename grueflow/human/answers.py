"""The answers file of a batch: one JSON object a line, appended atomically as each answer is given.

A line is ``{"annotator", "item_id", "answer", "at"}``: ``answer`` is ``{criterion: score}`` (Likert,
integers in [1, 5]) or ``{"choice": "A" | "B" | "tie"}`` (pairwise); ``at`` is the UTC time it was saved, in
microseconds (ISO 8601, ``2026-12-07T07:57:21.123456+00:00``), each line a server appends later than the one before
it, so that the times order the lines however the file is reordered (``sort``); times in whole seconds read as
well. Several annotators share one file; the last line of an (annotator, item) pair
is their answer (lines are appended in the order answers are given, so within one file a later line is a later
answer).

Appending holds a lock (a thread lock within one server, ``flock`` across processes, so two
annotators' servers may share a file), writes the whole line with one ``write`` and ``fsync``\\ s before
the answer is acknowledged; a write that fails (a full disk) is cut off again. A file that is not one of its own (a
link, or a hard link, into DVC's cache where it was added with ``dvc add`` and a link cache type) is never written
(:func:`shared_file`): an append in place would change DVC's copy of a committed version. Only a crash of the machine
mid-write can leave an unacknowledged partial last line. The page skips it and its next append moves it to
``<file>.cut``, so a saved answer is never lost and no half line stays. The import cannot tell such a line
from an answer edited by hand and refused it (:func:`read_numbered_answer_lines`): a person decides. A last
line without its newline that is a whole JSON object (a file edited or concatenated by hand) is an answer:
readers keep it and the next append ends it with a newline. A line ends at ``\n``, ``\r\n`` or a lone ``\r``
(JSON text holds no raw carriage return, so splitting there changes no answer).

One person has one name in a file: names that differ only in letter case, spacing or Unicode form (``alice`` and
``Alice``, :func:`annotator_key`) are one annotator, spelled in one way. The page refuses a second spelling of a name
the file holds (:meth:`AnswerStore.check_spelling`), since the page resumes and the import counts annotators by the
exact name; the import refuses a page file that holds two spellings of one name
(:func:`grueflow.human.results.one_name_per_person`).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from grueflow import io
from grueflow.human.batch import Batch
from grueflow.human.criteria import SCALE_MAX, SCALE_MIN
from grueflow.human.layout import LEFTOVER_SUFFIX
from grueflow.human.templates import CHOICE_FIELD, CHOICES

log = logging.getLogger(__name__)

ANNOTATOR_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


class AnswerError(ValueError):
    """An answer that cannot be saved; ``status`` is the HTTP status the page returns for it."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Source:
    """Where an answer was read: ``file`` and ``place`` in it (``line 3``, ``row 5``). ``order`` is the answer's
    line number in an append-only answers file (the page's), where a later line is a later answer; ``None`` where the
    file's order says nothing about time (a platform's results CSV)."""

    file: str
    place: str
    order: int | None = None

    def __str__(self) -> str:
        return f"{self.file} {self.place}"


@dataclass(frozen=True)
class Answer:
    """One annotator's answer to one item (values as in the module docstring). ``at`` (UTC, timezone-aware) and
    ``source`` say when and where it was given, where known; they order repeated answers and take no part in
    equality."""

    annotator: str
    item_id: str
    values: Mapping[str, Any]
    at: dt.datetime | None = field(default=None, compare=False)
    source: Source | None = field(default=None, compare=False)


def parse_at(value: Any) -> dt.datetime | None:
    """An answer's ``at`` (ISO 8601; a time without a zone is UTC, as the page writes UTC) as an aware UTC time;
    ``None`` where it is absent or not such a time."""
    if not isinstance(value, str):
        return None
    try:
        at = dt.datetime.fromisoformat(value.strip())
        return at.replace(tzinfo=dt.timezone.utc) if at.tzinfo is None else at.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: past year 9999 in UTC (9999-12-31T23:59:59-01:00)
        return None


def check_annotator(name: Any) -> str:
    """``name`` where it is a valid annotator name (:data:`ANNOTATOR_PATTERN`); else an AnswerError saying what is
    allowed."""
    if not isinstance(name, str) or not ANNOTATOR_PATTERN.match(name):
        raise AnswerError(f"annotator {name!r} is not a valid name: use 1-64 letters, digits or _.@- "
                          f"(starting with a letter or digit)")
    return name


def annotator_key(name: str) -> str:
    """What makes two annotator names one person's: the name in Unicode NFKC form, case-folded, its whitespace
    runs made one space and its ends stripped (``"Alice"``, ``"ALICE"``, ``" alice"`` and the full-width
    ``"\uff41lice"`` all give ``"alice"``)."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return " ".join(folded.split())


def check_answer(batch: Batch, item_id: Any, values: Any) -> dict[str, Any]:
    """The answer's values, validated against the batch; an AnswerError says what is wrong and what is allowed."""
    if not isinstance(item_id, str) or batch.item(item_id) is None:
        raise AnswerError(f"unknown item id {item_id!r}; this batch's ids run {batch.items[0]['item_id']} .. "
                          f"{batch.items[-1]['item_id']}", status=404)
    if not isinstance(values, dict):
        raise AnswerError(f"answer must be a JSON object, got {type(values).__name__}")
    if batch.kind == "pairwise":
        if set(values) != {CHOICE_FIELD} or values[CHOICE_FIELD] not in CHOICES:
            raise AnswerError(f"a pairwise answer is {{\"{CHOICE_FIELD}\": one of {list(CHOICES)}}}, got {values!r}",
                              status=422)
        return {CHOICE_FIELD: values[CHOICE_FIELD]}
    expected = [c.id for c in batch.criteria]
    if sorted(values) != sorted(expected):
        raise AnswerError(f"a Likert answer scores exactly the criteria {expected}, got keys {sorted(values)}", status=422)
    for criterion in expected:
        score = values[criterion]
        if isinstance(score, bool) or not isinstance(score, int) or not SCALE_MIN <= score <= SCALE_MAX:
            raise AnswerError(f"score {score!r} for {criterion!r} is out of range: give an integer "
                              f"{SCALE_MIN}..{SCALE_MAX}", status=422)
    return {c: values[c] for c in expected}


def shared_file(path: str | Path) -> str | None:
    """Why appending to the answers file ``path`` in place would change bytes that another path holds too, or None
    (no file there, or a plain file of its own): a symbolic link (an append writes into what it names: DVC's cache
    where the file was added with ``dvc add`` and ``cache.type: symlink``, a git-annex object), a file of more than
    one hard link (the other paths are the same file: DVC's cache with ``cache.type: hardlink``, a ``cp -al`` copy),
    or a file that lies in a DVC cache (:func:`grueflow.io.in_dvc_cache`). DVC's cached object is the committed
    version's only copy, named by the md5 of its bytes: written in place, it holds other bytes under that name, and a
    checkout or a push of that commit gives the newer answers, with no word. The text names the file, what it
    shares, and how to make it a file of its own first: ``dvc unprotect <file>`` (then ``dvc add`` again when the
    answers are in), or a plain copy renamed over it."""
    path = Path(path)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    dvc = io.in_dvc_cache(path)
    if path.is_symlink():
        target = os.path.realpath(path)
        what = (f"a link into DVC's cache ({target}: `dvc add` with cache.type symlink)" if dvc else
                f"a link to {os.readlink(path)}")
        changes = "DVC's cached copy of the committed version, kept under the md5 of its bytes" if dvc else \
            "the file it names"
    elif dvc:
        what, changes = "a file in DVC's cache", "DVC's cached copy of a committed version, kept under its md5"
    elif info.st_nlink > 1:
        what = (f"one file with {info.st_nlink - 1} other path(s) (a hard link: DVC's cache with cache.type hardlink, "
                f"where it was `dvc add`ed, or a copy made with cp -al)")
        changes = "the other path(s) (DVC's cached copy of the committed version, kept under the md5 of its bytes)"
    else:
        return None
    copy = path.with_name(f".{path.name}.copy")
    return (f"{path} is {what}: the page appends each answer to the file in place, so it would also change {changes}; "
            f"make it a file of its own first: run `dvc unprotect {path}` (and `dvc add` it again when the answers "
            f"are in), or copy it to a plain file in its place (cp {path} {copy} && chmod u+w {copy} && mv {copy} "
            f"{path}); no answer was saved")


def _refuse_shared(path: Path) -> None:
    """An AnswerError (409) where the answers file ``path``, or the ``.cut`` file beside it that an append may write
    (:func:`_cut_partial_tail`), is not a file of its own (:func:`shared_file`)."""
    for file in (path, path.with_name(path.name + LEFTOVER_SUFFIX)):
        problem = shared_file(file)
        if problem is not None:
            raise AnswerError(problem, status=409)


class AnswerStore:
    """Appends answers to one JSONL file and reads them back (see the module docstring)."""

    def __init__(self, path: str | Path, batch: Batch) -> None:
        self.path = Path(path)
        self.batch = batch
        self._lock = threading.Lock()
        self._last_at: dt.datetime | None = None  # the time of the last line this store appended

    def append(self, annotator: str, item_id: str, values: Any) -> Answer:
        """Validate (the name too: :meth:`check_spelling`), then append one line durably; returns the saved answer.
        Raises AnswerError, saving nothing; so where the file (or its ``.cut`` file) is not a file of its own, a link
        or a hard link into DVC's cache that the append would write into (:func:`shared_file`, 409).

        The line's ``at`` is now, or a microsecond after the last line this store appended where the clock reads no
        later (two answers within one microsecond, a clock stepped back): the times of its lines run in line order."""
        annotator = check_annotator(annotator)
        clean = check_answer(self.batch, item_id, values)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            at = dt.datetime.now(dt.timezone.utc)
            if self._last_at is not None and at <= self._last_at:
                at = self._last_at + dt.timedelta(microseconds=1)
            record = {"annotator": annotator, "item_id": item_id, "answer": clean,
                      "at": at.isoformat(timespec="microseconds")}
            line = (json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
            _refuse_shared(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                _refuse_shared(self.path)  # under the lock: a `dvc add` or checkout may have linked it meanwhile
                _cut_partial_tail(fd, self.path)
                self.check_spelling(annotator)  # under the lock: another page may have just written a spelling
                size = os.fstat(fd).st_size
                try:
                    written = os.write(fd, line)
                    if written != len(line):
                        raise OSError(f"{self.path}: wrote {written} of {len(line)} bytes")
                    os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, size)  # an answer not acknowledged leaves no part of its line
                    raise
            finally:
                os.close(fd)  # closing releases the flock
            self._last_at = at
        return Answer(annotator, item_id, clean)

    def records(self) -> list[dict[str, Any]]:
        """Every complete line, in file order (an unfinished last line is skipped: the next append moves it to
        ``<file>.cut``)."""
        return read_answer_lines(self.path, unfinished="skip")

    def check_spelling(self, annotator: str) -> None:
        """Refuse ``annotator`` where the file holds the name in another spelling (:func:`annotator_key`): an
        AnswerError (409) that names the spelling the file knows and its first line. Only valid names in the file
        count (the import refuses the others)."""
        for number, record in read_numbered_answer_lines(self.path, unfinished="skip"):
            known = record["annotator"]
            if (isinstance(known, str) and known != annotator and ANNOTATOR_PATTERN.match(known)
                    and annotator_key(known) == annotator_key(annotator)):
                raise AnswerError(f"annotator {annotator!r}: this answers file knows this annotator as {known!r}; "
                                  f"use that name, as one person's answers go under one name ({self.path} line "
                                  f"{number} has it), or, if you are someone else, a name the file does not hold",
                                  status=409)

    def latest(self, annotator: str) -> dict[str, dict[str, Any]]:
        """item id → this annotator's last answer."""
        return {r["item_id"]: r["answer"] for r in self.records() if r.get("annotator") == annotator}


def _complete_record(line: str) -> bool:
    """Whether a line (its newline missing) is a whole JSON object, i.e. an answer and not a crash's fragment (a key
    written twice still makes it whole: reading it then names the key)."""
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _cut_partial_tail(fd: int, path: Path) -> None:
    """Before an append: end a whole last record that lacks its newline, or move an unfinished fragment to
    ``<path>.cut`` (appended, flushed to disk, then cut here): a crash's leftover, or text edited in by hand,
    is never lost."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) in (b"\n", b"\r"):
        return
    start = max(0, size - (1 << 20))
    tail = os.pread(fd, size - start, start)
    keep = start + max(tail.rfind(b"\n"), tail.rfind(b"\r")) + 1  # after the last line end, or ``start``
    if _complete_record(tail[keep - start:].decode("utf-8-sig", errors="replace")):  # a BOM opens a 1-line file
        os.write(fd, b"\n")  # O_APPEND: the newline goes at the end
        return
    cut = path.with_name(path.name + LEFTOVER_SUFFIX)
    with open(cut, "ab") as handle:
        handle.write(tail[keep - start:] + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    log.warning("%s: moved an unfinished last line (%d bytes: an interrupted write, or text added by hand) to %s",
                path, size - keep, cut)
    os.ftruncate(fd, keep)


Unfinished = Literal["refuse", "skip"]  # what a reader does with an unfinished last line (see the module docstring)


def read_answer_lines(path: str | Path, unfinished: Unfinished = "refuse") -> list[dict[str, Any]]:
    """The page's answers file as dicts; a missing file has no answers; a bad complete line is a DataError, and so
    is an unfinished last line unless ``unfinished="skip"`` (the page's own reads)."""
    return [record for _, record in read_numbered_answer_lines(path, unfinished)]


def _run_together(err: json.JSONDecodeError) -> str | None:
    """Where ``err`` is a line that holds a whole JSON object followed by another, what to say: two answers run
    together, as ``cat`` writes where the first file lacked its final line end, and where to break the line; None
    for any other error."""
    if err.msg != "Extra data" or not err.doc[err.pos:].lstrip().startswith("{"):
        return None
    return (f"holds two answers run together, the second starting at column {err.colno} (files joined where the first "
            f"lacked its final line end, as cat a.jsonl b.jsonl does then?); put a line break before column "
            f"{err.colno} and import again")


def read_numbered_answer_lines(path: str | Path, unfinished: Unfinished = "refuse") -> list[tuple[int, dict[str, Any]]]:
    """:func:`read_answer_lines` with each record's 1-based line number in the file (blank lines and a skipped
    unfinished last line count as lines but make no record), so that a message can point at the line an editor
    shows.

    An unfinished last line (no line end, and not a whole JSON object) is an interrupted write or an answer edited
    by hand, and nothing in the file tells which: skipping it could drop a correction, so only the page, whose next
    append moves it to ``<file>.cut``, skips it."""
    path = Path(path)
    io.refuse_special_file(path, "give the page's .jsonl", "answers file")
    if not path.exists():
        return []
    out = []
    lines = list(io.iter_lines(path, carriage_returns=True))
    for number, line in lines:
        if not line.endswith(("\n", "\r")) and not _complete_record(line):
            if unfinished == "skip":
                log.warning("%s: line %d is unfinished (an interrupted write, or an edit); skipping it", path, number)
                continue
            raise io.DataError(f"{path}: line {number}, the last, is unfinished (no line end, and not a whole JSON "
                               f"object): an interrupted write (delete the line) or an answer edited by hand (fix "
                               f"it); the import reads no part of an answer")
        if not line.strip():
            continue
        try:
            record = io.loads_unique(line)
        except json.JSONDecodeError as err:
            together = _run_together(err)
            raise io.DataError(f"{path}: line {number} {together}" if together else
                               f"{path}: line {number}: not JSON ({err.msg})") from None
        except ValueError as err:  # a key written twice: JSON would keep the last answer without a word
            raise io.DataError(f"{path}: line {number}: {err}; an answer line names each key once: remove the "
                               f"other one") from None
        if not isinstance(record, dict) or not {"annotator", "item_id", "answer"} <= set(record):
            raise io.DataError(f"{path}: line {number}: an answer line has annotator, item_id and answer")
        out.append((number, record))
    return out
