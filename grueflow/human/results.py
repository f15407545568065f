"""Import answers (the local page's JSONL or a platform's results CSV), agreement, the human-evaluation
table and the preference pairs that the reward-model and DPO stages learn from.

Confidence intervals:

* Likert means: each item's score is the mean over its annotators; the table gives the mean over
  items with a **t-based** 95% interval, ``mean +- t_{0.975, n-1} * sd / sqrt(n)`` (n items; empty for n < 2).
* Pairwise win rates: every (item, annotator) judgment counts once; ties are reported but left out of
  the rate, ``wins / (wins + losses)``, with the **Wilson score** 95% interval (Wilson 1927). Judgments
  of one item by several annotators are not independent, so with many annotators per item the
  interval is somewhat too narrow. Judgments of an item whose two choices are the same text count
  nowhere (:func:`identical_choices`), as in the preferences.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import logging
import math
import os
import re
import shlex
import unicodedata
from collections import defaultdict
from itertools import permutations
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from grueflow import io
from grueflow.human.agreement import cohen_kappa, fleiss_kappa, krippendorff_alpha
from grueflow.human.answers import (Answer, AnswerError, Source, annotator_key, check_annotator, check_answer,
                                    parse_at, read_numbered_answer_lines)
from grueflow.human.batch import LABEL_COLUMNS, Batch, kept_batch, prompt_of, tag_of
from grueflow.human.layout import ANSWERS_GIVEN, answer_files, answers_in, lost_answers
from grueflow.human.templates import CHOICE_FIELD
from grueflow.stale import changed_inputs

log = logging.getLogger(__name__)
Z_95 = 1.959963984540054  # the standard normal's 0.975 quantile
TABLE_COLUMNS = ("kind", "task", "method", "measure", "n", "n_judgments", "ties", "value", "ci_low", "ci_high",
                 "interval", "batch")  # human_eval_table.csv; measure: a criterion, or win_rate_vs:<other method>;
# batch: the import folder's name (two batches may rate one task x method x measure)


def read_answers(path: str | Path, batch: Batch) -> list[Answer]:
    """Answers from the page's ``.jsonl`` or a platform's results ``.csv``, one per (annotator, item): the latest
    (see :func:`latest_answers`). Every answer is checked against the batch as the page checks it."""
    return latest_answers(read_answer_file(path, batch))


def read_answer_file(path: str | Path, batch: Batch) -> list[Answer]:
    """Every answer in the page's ``.jsonl`` or a platform's results ``.csv``, in file order, each with its time
    (``at``; MTurk's ``SubmitTime``) where the file gives one and its :class:`Source`."""
    path = Path(path)
    io.refuse_special_file(path, "give the page's .jsonl or a results .csv", "answers file")
    if not path.exists():
        raise io.MissingDataError(f"answers file {path} does not exist; give the page's .jsonl or a results .csv")
    if path.is_dir():
        raise io.DataError(f"answers file {path} is a folder; give the page's .jsonl or a results .csv in it")
    if path.suffix.lower() == ".csv":
        return read_platform_csv(path, batch)
    records = read_numbered_answer_lines(path)
    if not records:
        raise io.DataError(f"{path}: has no answers; give the file the annotation page wrote after annotators "
                           f"worked, or leave it out")
    answers, untimed = [], []
    for number, record in records:  # number: the line in the file, as an editor or grep -n shows it
        earlier = other_batch(path, f"line {number}", record.get("item_id"), batch)
        if earlier is not None:
            raise earlier
        try:
            answer = Answer(check_annotator(record["annotator"]), record["item_id"],
                            check_answer(batch, record["item_id"], record["answer"]), parse_at(record.get("at")),
                            Source(str(path), f"line {number}", order=number))
        except AnswerError as err:
            raise io.DataError(f"{path}: line {number}: {err}") from None
        if answer.at is None and record.get("at") is not None:
            untimed.append(f"line {number}: at {record['at']!r}")
        answers.append(answer)
    if untimed:
        log.warning("%s: %d answer(s) have an 'at' that is not an ISO 8601 time (first: %s); their time is unknown, "
                    "so a different answer to the same item in another file is refused", path, len(untimed), untimed[0])
    return answers


def other_batch(path: str | Path, place: str, item_id: Any, batch: Batch) -> Optional[io.DataError]:
    """The error for an answer (in ``path`` at ``place``) to ``item_id`` of another batch than ``batch``: its id
    carries another batch tag (:func:`~grueflow.human.batch.tag_of`). The usual cause is an upstream change that
    re-exported the batch after people answered it; the error says to undo that change (a batch put back by hand is
    stale to the pipeline, which exports it again from the changed predictions) and names the copy of the earlier
    batch that the check before any Snakemake job kept (:func:`~grueflow.human.batch.kept_batch`), if any, with the
    command that imports the answers from that copy by hand (the import takes a batch copy as the batch it holds).
    None for an id of this batch's tag, or of no tag."""
    tag = tag_of(item_id) if isinstance(item_id, str) else None
    if tag is None or batch.tag is None or tag == batch.tag:
        return None
    kept = kept_batch(batch, tag)
    if kept:
        where = f"a copy of it is kept in {kept[0]}" + (f", its key in {kept[1]}" if len(kept) > 1 else "")
        key = "" if batch.kind != "pairwise" else \
            f" --key {kept[1] / kept[1].name.rsplit('@', 1)[0]}" if len(kept) > 1 else " --key <its key>"
        by_hand = (f", or import them by hand from that copy (python stages/import_human_eval.py --batch {kept[0]}"
                   f"{key} --answers {path} --out <a new folder>)")
    else:
        where, by_hand = "no copy of it is kept in .grueflow/replaced/", ""
    return io.DataError(f"{path} holds answers to batch {tag} ({place}: item {item_id!r}), and the batch now is "
                        f"{batch.tag}{f' ({batch.folder})' if batch.folder else ''}: it was exported again since (its "
                        f"predictions changed), or the file answers another batch; to import these answers, undo the "
                        f"change that altered the predictions and run again, which exports the earlier batch again "
                        f"(the export is seeded; {where}){by_hand}, or answer the new one")


def latest_answers(answers: Iterable[Answer]) -> list[Answer]:
    """One answer per (annotator, item), in the order pairs first appear: within one page answers file the last
    line, which the page appends as answers are given (so it is the answer the page shows); across files, and
    between a platform's CSV rows, the latest by time (``at``, MTurk's ``SubmitTime``).

    Repeats with the same values are harmless and counted in one log line. Two different answers that nothing
    orders (a time missing or equal, and not two lines of one page file) are a DataError naming both, since
    keeping either one could silently revert the annotator's answer (an old copy of an answers file, or a row
    edited by hand). So is a page file whose line order and times keep different answers, or whose lines give
    different answers at one time (:func:`_line_times_problem`): a file sorted or otherwise reordered by hand looks
    just like one written while the clock stepped back, or within one second, and only the annotator knows which line
    is the correction. One person's name in two spellings is refused or warned of first (:func:`one_name_per_person`).
    """
    answers = list(answers)
    one_name_per_person(answers)
    groups: dict[tuple[str, str], list[Answer]] = {}
    for answer in answers:
        groups.setdefault((answer.annotator, answer.item_id), []).append(answer)
    kept, copies, replaced = [], 0, 0
    for group in groups.values():
        winner = _latest(group)
        kept.append(winner)
        copies += sum(a is not winner and a.values == winner.values for a in group)
        replaced += sum(a.values != winner.values and not _same_log(a, winner) for a in group)
    if copies or replaced:
        log.log(logging.WARNING if replaced else logging.INFO,
                "answers given more than once by one annotator to one item: %d identical repeat(s) counted once, "
                "%d older answer(s) from another file or row replaced by a later one (by time)", copies, replaced)
    return kept


def one_name_per_person(answers: Sequence[Answer]) -> None:
    """Refuse annotator names typed on the page (a page answers file's) that are one name in several spellings,
    equal under :func:`~grueflow.human.answers.annotator_key` (``alice`` and ``Alice``): the page takes them for one
    person, whom agreement and means would count as several annotators. The DataError names each spelling and its
    lines, and says to make them one name in the file (the import never rewrites a person's file). A platform's worker
    ids (a results CSV: MTurk's ``WorkerId``) are case-sensitive and stay exact: ids that differ only in letter case
    there, or from a name on the page, are counted apart with a warning."""
    spellings: dict[str, dict[str, list[Optional[Source]]]] = defaultdict(lambda: defaultdict(list))
    for answer in answers:
        spellings[annotator_key(answer.annotator)][answer.annotator].append(answer.source)
    for names in spellings.values():
        if len(names) < 2:
            continue
        files = {s.file for sources in names.values() for s in sources if s is not None}
        one_file = next(iter(files)) if len(files) == 1 else None  # then named once, before the names
        listed = _and([f"{name!r} ({_places(sources, named=one_file is None)})" for name, sources in names.items()])
        listed = f"{one_file}: annotator names {listed}" if one_file else f"annotator names {listed}"
        typed = [name for name, sources in names.items() if any(s is not None and s.order is not None for s in sources)]
        if len(typed) > 1:
            raise io.DataError(f"{listed} differ only in letter case or spacing: one person under {len(typed)} "
                               f"spellings on the page, whom the import would count as {len(typed)} annotators; make "
                               f"them one name in the answers file{'' if one_file else 's'} (e.g. change every "
                               f"{_and([repr(name) for name in typed[1:]])} to {typed[0]!r}) and import again, or, if "
                               f"they are different people, give them names that differ in more than letter case")
        log.warning("%s differ only in letter case; a platform's worker ids are case-sensitive, so the import counts "
                    "them as %d annotators: if they are one person, give their answers one name and import again",
                    listed, len(names))


def _and(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _places(sources: Sequence[Optional[Source]], named: bool = True, shown: int = 4) -> str:
    """Where answers were read, file by file: a page file's line numbers as runs (``a.jsonl lines 1-32, 40``), a
    results CSV's first row and how many more; at most ``shown`` runs a file. ``named=False`` leaves out the file
    names (where the text names the one file)."""
    by_file: dict[str, list[Source]] = defaultdict(list)
    for source in sources:
        if source is not None:
            by_file[source.file].append(source)
    parts = []
    for file, found in by_file.items():
        numbers = sorted({s.order for s in found if s.order is not None})
        if numbers:
            runs: list[list[int]] = []
            for n in numbers:
                if runs and n == runs[-1][-1] + 1:
                    runs[-1].append(n)
                else:
                    runs.append([n])
            text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs[:shown])
            more = f" and {len(runs) - shown} more" if len(runs) > shown else ""
            where = f"line{'s' if len(numbers) > 1 else ''} {text}{more}"
        else:
            where = found[0].place + (f" and {len(found) - 1} more row(s)" if len(found) > 1 else "")
        parts.append(f"{file} {where}" if named else where)
    return "; ".join(parts) if parts else "place unknown"


def _latest(group: Sequence[Answer]) -> Answer:
    """The answer of one (annotator, item) that every different answer is known to precede (see latest_answers).

    Each page answers file stands for one answer: its last line (the page appends answers as they are given), at the
    latest time any of its lines gives that answer (a line repeating it with an older time does not make it older);
    at no time where the last line has none (an untimed line, written by hand, may come after any time). A results
    CSV row stands for itself, at its time. A page file is refused (:func:`_line_times_problem`) where one of its
    timed lines gives another answer later than that or at that time, unless another file's or row's answer is later
    still (or as late, and the same as that line's), which wins whichever line stood for the file. Among what is
    left, the answer later than every different one is kept; two different answers that nothing orders are a
    DataError naming both."""
    stands: list[tuple[Answer, Optional[dt.datetime], list[Answer]]] = []  # (answer, its time, the lines behind it)
    files: dict[str, list[Answer]] = {}
    for answer in group:
        if answer.source is not None and answer.source.order is not None:
            files.setdefault(answer.source.file, []).append(answer)
        else:
            stands.append((answer, answer.at, [answer]))
    for lines in files.values():
        last = max(lines, key=lambda a: a.source.order)
        times = [a.at for a in lines if a.values == last.values and a.at is not None]
        stands.append((last, max(times) if times and last.at is not None else None, lines))
    kept = []
    for answer, at, lines in stands:
        problem = _line_times_problem(answer, at, lines)
        if problem is None:
            kept.append((answer, at))
            continue
        top = max(lines, key=lambda a: (a.at is not None, a.at or _NO_TIME, a.source.order))
        if not any(other_at is not None and (other_at > top.at or (other_at == top.at and other.values == top.values))
                   for other, other_at, other_lines in stands if other_lines is not lines):
            raise problem
    winners = [(w, t) for w, t in kept if all(a.values == w.values or (s is not None and t is not None and s < t)
                                             for a, s in kept)]
    if winners:
        return max(reversed(winners), key=lambda pair: (pair[1] is not None, pair[1] or _NO_TIME))[0]
    last, last_at = max(reversed(kept), key=lambda pair: (pair[1] is not None, pair[1] or _NO_TIME))
    other = next(a for a, s in kept if a.values != last.values and not (s is not None and last_at is not None
                                                                          and s < last_at))
    raise io.DataError(f"annotator {last.annotator!r} gave item {last.item_id} two different answers that no "
                       f"time orders: {dict(other.values)} ({_where(other)}) and {dict(last.values)} "
                       f"({_where(last)}); remove the one that is not their answer (an old copy of an answers file, "
                       f"or a row edited by hand?) and import again")


def _line_times_problem(last: Answer, at: Optional[dt.datetime], lines: Sequence[Answer]) -> Optional[io.DataError]:
    """Why a page answers file's ``lines`` for one (annotator, item) cannot stand for ``last``, its last line's
    answer, given at ``at`` (:func:`_latest`), or None: one of its timed lines gives another answer later than
    that (the latest such one is named, with the last line), or at that very time.

    The page appends in the order answers are given, so its last line is the answer, but ``sort`` (or a hand edit)
    reorders lines too, and then an older answer is on the last line; nothing in the file tells a reordered file from
    a clock that stepped back, nor, where two different answers carry the same time (whole seconds, and a correction
    within the second), which came first. The page writes each line of a file later than the one before
    (:class:`~grueflow.human.answers.AnswerStore`), so its own lines never tie. Lines without a time, and equal
    answers, say nothing against the line order; nor does an earlier line later than another earlier one (5 at
    11:00, 2 at 10:30, 2 at 12:00 keeps 2 either way)."""
    later = [a for a in lines if a.values != last.values and a.at is not None and at is not None and a.at >= at]
    if not later:
        return None
    latest = max(later, key=lambda a: (a.at, a.source.order))
    if latest.at == at:
        tied = max((a for a in lines if a.values == last.values and a.at == at), key=lambda a: a.source.order)
        first, second = sorted((latest, tied), key=lambda a: a.source.order)
        return io.DataError(
            f"{last.source.file}: lines {first.source.order} and {second.source.order}: annotator {last.annotator!r} "
            f"gave item {last.item_id} two different answers at the same time ({dict(first.values)} on line "
            f"{first.source.order}, {dict(second.values)} on line {second.source.order}, both at {at.isoformat()}), "
            f"and nothing orders them: a time in whole seconds holds a correction made within the second, and a file "
            f"reordered since (sorted?) looks the same; keep the line with the answer they mean, delete the other "
            f"line, and import again")
    stamp = last.at.isoformat() if last.at is not None else "no time"
    return io.DataError(
        f"{last.source.file}: lines {latest.source.order} and {last.source.order}: annotator {last.annotator!r} gave "
        f"item {last.item_id} two different answers whose times run against the line order ({dict(latest.values)} at "
        f"{latest.at.isoformat()} on line {latest.source.order}, {dict(last.values)} at {stamp} on line "
        f"{last.source.order}): the file was reordered (sorted?) or the clock stepped back, and nothing tells which is "
        f"the correction; keep the line with the answer they mean, delete the other line, and import again")


def _same_log(a: Answer, b: Answer) -> bool:
    return (a.source is not None and b.source is not None and a.source.file == b.source.file
            and a.source.order is not None and b.source.order is not None)


def _time_key(answer: Answer) -> tuple[bool, dt.datetime]:
    return answer.at is not None, answer.at or _NO_TIME


def _where(answer: Answer) -> str:
    where = str(answer.source) if answer.source is not None else "source unknown"
    return f"{where}, {'at ' + answer.at.isoformat() if answer.at is not None else 'no time'}"


def read_platform_csv(path: str | Path, batch: Batch) -> list[Answer]:
    """A platform's results CSV (MTurk: ``WorkerId``, ``Input.<column>``, ``Answer.<field>``, ``SubmitTime``).

    Rows are matched to items by ``Input.item_id``, and every ``Input.<column>`` the batch shows annotators must
    equal the item's text (the CSV values were HTML-escaped for upload; they are unescaped here), so a results file
    from another batch is refused, and so is a row whose ``Answer.<column>`` echo of one of them (the template's
    hidden item and choice ids) is not its item's (:func:`_answer_echo_problem`); a label column
    (:data:`~grueflow.human.batch.LABEL_COLUMNS`, the Likert ``algorithm``) is taken from the batch, and a file
    whose label differs (blinded before upload) gets one warning. Rejected rows are left out, counted in one log
    line (:func:`rejection`). Columns with no name (a spreadsheet's leftovers right of the data) are passed over;
    one warning counts any values in them. A row that repeats the header (two files joined with ``cat``) is a
    DataError naming it. Each answer carries the row's ``SubmitTime`` (see :func:`submit_time`) where the file has
    one. Errors name a row as a spreadsheet shows it, ``row N`` (the header is row 1), and add ``(line M)``, the
    line it starts on in an editor, where a completion's line breaks above it make the two differ.
    """
    io.read_text(path)
    csv.field_size_limit(2**31 - 1)  # a long generation is one field
    with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: Excel's UTF-8 starts with a BOM
        hinted = _separator_hint(path, handle)
        reader = csv.reader(handle)
        try:
            header = next(reader, None) or []
            named = [c for c in header if c.strip()]
            twice = sorted({c for c in named if named.count(c) > 1})
            if twice:  # a row's dict keeps the last of two columns of one name without a word
                raise io.DataError(f"{path}: the column(s) {twice} appear more than once in the header, and only "
                                   f"one value a row could be read; remove or rename the copies")
            fields = [c.id for c in batch.criteria] if batch.kind == "likert" else [CHOICE_FIELD]
            needed = ["WorkerId", "Input.item_id", *(f"Answer.{f}" for f in fields)]
            missing = [c for c in needed if c not in header]
            if missing:
                delimiter = _other_delimiter(header)
                remedy = (f"the file seems to be delimited by {delimiter}, where a results CSV is comma-separated: "
                          f"save it again as CSV UTF-8 (Comma delimited)" if delimiter else
                          f"a results CSV has WorkerId, Input.<column> and Answer.<field> columns (this batch's "
                          f"fields: {fields})")
                raise io.DataError(f"{path}: missing column(s) {missing}; it has the columns {header}; {remedy}")
            unnamed = [i for i, c in enumerate(header) if not c.strip()]
            answers, rows, untimed, rejected, relabelled, filled = [], 0, [], [], [], []
            for number, (start, record) in enumerate(io.csv_records(reader, hinted), start=2):  # the header: row 1
                if not any(cell.strip() for cell in record):  # a blank line, or a row whose cells were cleared
                    continue  # (Excel keeps its commas): an empty row in a spreadsheet, no answer
                place = f"row {number}" if number == start else f"row {number} (line {start})"
                if _repeats_header(record, header):
                    if [cell.strip().lstrip("\ufeff") for cell in record] != [cell.strip() for cell in header]:
                        raise io.DataError(f"{path}: {place} is a header row with the columns in another order "
                                           f"than row 1's: were two results files joined (cat a.csv b.csv)? The rows "
                                           f"below it follow its order, so deleting it would swap their answers: "
                                           f"split the file there into two files in the answers folder, whose files "
                                           f"the import reads together")
                    raise io.DataError(f"{path}: {place} repeats the header row: were two results files joined "
                                       f"(cat a.csv b.csv)? Delete that line, or keep the two files apart in the "
                                       f"answers folder, whose files the import reads together")
                rows += 1
                if len(record) != len(header):
                    raise io.DataError(f"{path}: line {start}: {len(record)} fields where the header has "
                                       f"{len(header)}; was the file cut or edited by hand? Download it again")
                filled += [f"{place}, column {i + 1}: {record[i]!r}" for i in unnamed if record[i].strip()]
                row = {name: cell for name, cell in zip(header, record) if name.strip()}
                why = rejection(row)
                if why is not None:
                    rejected.append(f"{place}: {why}")
                    continue
                answer = _platform_row(path, place, row, batch, fields)
                if answer.at is None and (row.get("SubmitTime") or "").strip():
                    untimed.append(f"{place}: SubmitTime {row['SubmitTime']!r}")
                relabelled += _label_changes(place, row, batch.item(answer.item_id), batch)
                answers.append(answer)
        except csv.Error as err:
            raise io.DataError(f"{path}: line {reader.line_num + hinted}: not valid CSV ({err})") from None
    if rows == 0:
        raise io.DataError(f"{path}: has a header but no answer rows; download the results after the annotators "
                           f"have worked, or remove the file")
    if not answers:
        raise io.DataError(f"{path}: every one of its {rows} rows is rejected (first: {rejected[0]}); no answer is "
                           f"left to import")
    if rejected:
        log.info("%s: left out %d rejected row(s) (first: %s)", path, len(rejected), rejected[0])
    if filled:
        log.warning("%s: %d value(s) lie in columns without a name in the header (first: %s); the import reads "
                    "only named columns and passed over them", path, len(filled), filled[0])
    if relabelled:
        log.warning("%s: %d row(s) give a label that differs from the batch's (first: %s; blinded before upload?); "
                    "the import takes each item's label from the batch, by Input.item_id", path, len(relabelled),
                    relabelled[0])
    if untimed:
        log.warning("%s: %d row(s) have a SubmitTime that is not a time (first: %s; expected MTurk's "
                    "'Sat Dec 05 10:00:00 PST 2026' or ISO 8601); their time is unknown, so a different answer "
                    "to the same item is refused", path, len(untimed), untimed[0])
    return answers


REJECTED_STATUS = "rejected"  # MTurk's AssignmentStatus of a rejected assignment (compared case-insensitively)
REJECT_COLUMN = "reject"  # MTurk's results file: the requester marks an assignment to reject there (any mark)


def rejection(row: Mapping[str, str]) -> Optional[str]:
    """Why a results CSV ``row`` (column name -> cell) is a rejected assignment, or None where it is not.

    MTurk rejects an assignment whose ``AssignmentStatus`` is ``Rejected``, and one that the requester marked for
    rejection in the results file's ``Reject`` column (any mark, usually the reason shown to the worker), which
    the file keeps after the decisions are uploaded; ``Approve`` marks the others. Status and column name are
    compared case-insensitively and stripped, as hand edits and other platforms write them."""
    status = (row.get("AssignmentStatus") or "").strip()
    if status.lower() == REJECTED_STATUS:
        return f"AssignmentStatus {status!r}"
    marks = [(name, cell) for name, cell in row.items() if name.strip().lower() == REJECT_COLUMN and cell.strip()]
    if marks:
        return f"{marks[0][0]} {marks[0][1]!r}"
    return None


def _repeats_header(record: Sequence[str], header: Sequence[str]) -> bool:
    """Whether ``record`` is a row of column names: it holds ``WorkerId`` and ``Input.item_id`` as cells (after a
    byte-order mark that a second file joined on brings along), as a repeated header row does and no answer row
    can (no item id is ``Input.item_id``)."""
    cells = {cell.strip().lstrip("\ufeff") for cell in record}
    return {"WorkerId", "Input.item_id"} <= cells and {"WorkerId", "Input.item_id"} <= set(header)


def _label_changes(place: str, row: Mapping[str, str], item: Mapping[str, str], batch: Batch) -> list[str]:
    """Where ``row`` gives a label column (:data:`~grueflow.human.batch.LABEL_COLUMNS`) of ``item`` another value
    than the batch's, one text per column: ``row N: Input.algorithm 'hidden' where the batch has 'ppo'``."""
    changed = []
    for column in LABEL_COLUMNS:
        given = row.get(f"Input.{column}")
        if column in batch.columns and given is not None and html.unescape(given).strip() != item[column]:
            changed.append(f"{place}: Input.{column} {given!r} where the batch has {item[column]!r}")
    return changed


def _separator_hint(path: str | Path, handle: Any) -> int:
    """The lines of the results CSV ``path`` (open as ``handle``, at its start) before its header: 1 where its first
    line is Excel's separator hint ``sep=,`` (:func:`grueflow.io.separator_hint`; Excel hides that line, so the
    header is still row 1), with ``handle`` left after it, else 0. A hint naming another delimiter is a DataError:
    a results CSV is comma-separated."""
    hint = io.separator_hint(handle)
    if hint is None:
        return 0
    if hint != ",":
        named = {";": "';'", "\t": "tabs"}.get(hint, repr(hint))
        raise io.DataError(f"{path}: line 1, {'sep=' + hint!r}, is Excel's separator hint: the file is delimited by "
                           f"{named}, where a results CSV is comma-separated: save it again as CSV UTF-8 (Comma "
                           f"delimited), which writes no such line")
    log.info("%s: line 1 is Excel's separator hint 'sep=,'; the header is line 2", path)
    return 1


def _other_delimiter(header: Sequence[str]) -> str:
    """The delimiter a one-column header holds (``';'``, a European Excel's, or ``tabs``), else ""."""
    found = [name for char, name in ((";", "';'"), ("\t", "tabs")) if len(header) == 1 and char in header[0]]
    return found[0] if found else ""


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
# MTurk writes US Pacific time; the other US zones and UTC are read for files exported or edited elsewhere
ZONE_HOURS = {"UTC": 0, "UT": 0, "GMT": 0, "Z": 0, "EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6,
              "PST": -8, "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10}
_MTURK_TIME = re.compile(r"(?:[A-Za-z]{3},?\s+)?(?P<month>[A-Za-z]{3})\s+(?P<day>\d{1,2})\s+"
                         r"(?P<hour>\d{1,2}):(?P<minute>\d{2}):(?P<second>\d{2})\s+"
                         r"(?P<zone>[A-Za-z]{1,5}|[+-]\d{2}:?\d{2})\s+(?P<year>\d{4})")
_NO_TIME = dt.datetime.min.replace(tzinfo=dt.timezone.utc)


def submit_time(text: str | None) -> dt.datetime | None:
    """A results CSV's ``SubmitTime`` as an aware UTC time, or ``None`` where it is empty or not a time.

    MTurk writes ``Sat Dec 05 10:00:00 PST 2026`` (Java's ``Date.toString``): English month names, so this
    reads it by hand rather than through the locale-dependent ``strptime``; the weekday is not checked (it is
    redundant, and edited files get it wrong), the zone is a US abbreviation (``ZONE_HOURS``) or ``+hh:mm``.
    ISO 8601 (other platforms' exports) is read too."""
    text = (text or "").strip()
    if not text:
        return None
    match = _MTURK_TIME.fullmatch(text)
    if match is None:
        return parse_at(text)
    zone = match["zone"].upper()
    if zone in ZONE_HOURS:
        offset = dt.timedelta(hours=ZONE_HOURS[zone])
    elif zone[0] in "+-":
        digits = zone[1:].replace(":", "")
        offset = (1 if zone[0] == "+" else -1) * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    else:
        return None
    month = match["month"].lower()
    if month not in MONTHS:
        return None
    try:
        local = dt.datetime(int(match["year"]), MONTHS.index(month) + 1, int(match["day"]), int(match["hour"]),
                            int(match["minute"]), int(match["second"]), tzinfo=dt.timezone(offset))
        return local.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: past year 9999 in UTC
        return None


def _platform_row(path: str | Path, place: str, row: Mapping[str, str], batch: Batch, fields: Sequence[str]) -> Answer:
    """The answer of one results CSV row, at ``place`` (``row N``, the spreadsheet's row, header row 1; with
    ``(line M)``, the line it starts on, where quoted line breaks above it make the two differ)."""
    item = batch.item(html.unescape(row["Input.item_id"]))
    earlier = other_batch(path, place, html.unescape(row["Input.item_id"]), batch) if item is None else None
    if earlier is not None:
        raise earlier
    if item is None:
        raise io.DataError(f"{path}: {place}: Input.item_id {row['Input.item_id']!r} is not in this batch")
    for column in (c for c in batch.columns if c not in LABEL_COLUMNS):  # labels: the batch's (_label_changes)
        given = row.get(f"Input.{column}")
        if given is not None and _words(html.unescape(given)) != _words(item[column]):
            where, lookalike = first_difference(html.unescape(given), item[column])
            cause = ("a spreadsheet or editor replaced a character by a lookalike (smart quotes, dashes): import the "
                     "file the platform wrote, unedited" if lookalike else
                     f"the file was opened and saved in Excel, which changes such cells ({EXCEL_CHANGES}): download "
                     f"the results again and do not save them from Excel (to view them there, import the Input. "
                     f"columns as Text)" if excel_conversion(html.unescape(given), item[column]) else
                     "the text must match the batch's: is this the results file of another batch?")
            raise io.DataError(f"{path}: {place}: Input.{column} differs from item {item['item_id']}'s text "
                               f"{where}; {cause}")
    moved = _answer_echo_problem(row, item, batch)
    if moved is not None:
        raise io.DataError(f"{path}: {place}: {moved}")
    raw = {f: row[f"Answer.{f}"].strip() for f in fields}
    values: dict[str, Any] = raw
    if batch.kind == "likert":
        try:
            values = {f: int(v) for f, v in raw.items()}
        except ValueError:
            raise io.DataError(f"{path}: {place}: Likert answers are integers, got {raw}") from None
    elif raw[CHOICE_FIELD].lower() == "tie":
        values = {CHOICE_FIELD: "tie"}
    try:
        return Answer(check_annotator(row["WorkerId"]), item["item_id"], check_answer(batch, item["item_id"], values),
                      submit_time(row.get("SubmitTime")), Source(str(path), place))
    except AnswerError as err:
        raise io.DataError(f"{path}: {place}: {err}") from None


def _answer_echo_problem(row: Mapping[str, str], item: Mapping[str, str], batch: Batch) -> Optional[str]:
    """Why a results CSV ``row``'s answers are not those of its ``item`` (the one its ``Input.item_id`` names), or
    None: an ``Answer.<column>`` that echoes one of the batch's columns (grueflow's template submits the item id and
    a pairwise item's choice ids as hidden fields, so MTurk's file has ``Answer.item_id``, ``Answer.choice_A_id``,
    ``Answer.choice_B_id``) holds another value than the item's. The ``Answer.*`` block was then sorted or pasted
    apart from the ``Input.*`` block (a spreadsheet's sort of a selection), and the row's answers belong to the item
    the echo names: read by ``Input.item_id`` they would count for the wrong item, or the wrong system. An empty echo
    cell says nothing."""
    for column in (c for c in batch.columns if c not in LABEL_COLUMNS):
        echo = html.unescape(row.get(f"Answer.{column}") or "").strip()
        if echo and echo != item[column]:
            given = html.unescape(row.get(f"Input.{column}") or item[column]).strip()
            return (f"Answer.{column} {echo!r} is not the row's own {column} (Input.{column} {given!r}): the "
                    f"Answer.* columns were sorted or pasted apart from the Input.* columns (a spreadsheet's sort of "
                    f"a selection?), so the row's answers belong to another item; import the results file as the "
                    f"platform wrote it, or sort whole rows only, and import again")
    return None


def check_current_import(folder: Path, then: str = "build the table again") -> None:
    """Refuse the finished import ``folder`` (a :class:`~grueflow.io.DataError`) where the files it was built from
    are not those there now: one of the inputs its ``stage.json`` records (its batch folder, key and answers files,
    by path and sha256) lies at that path with other content (``git checkout`` and ``dvc checkout`` of another
    branch put another batch there; a re-export; answers appended or edited), or a folder among its ``--answers``
    holds an answers file it did not read (one saved there since, whatever else lies there: :func:`answers_in`). Its
    rows are then not those of the files there now. The error names each such input and the import to run again under
    either engine, and ends saying to ``then`` (what the caller does with the import). An answers folder that the
    import would refuse now (a ``notes.txt`` beside the answers, a folder inside) is refused with the import's message
    (:func:`answer_files`), before those inputs. An answers file no longer there is refused too (an annotator's
    answers dropped: the rows would still count them); a batch or key no longer there is not checked (an import of a
    kept copy whose copy was deleted still reports what it imported). The recorded paths are relative to the project's
    root (:func:`~grueflow.io.project_root` of ``folder``), where stages run and the import recorded them, whatever
    the working folder now; they are shown joined to it where the working folder is another."""
    record = io.read_json(folder / io.STAGE_RECORD)
    recorded = record.get("inputs") if isinstance(record.get("inputs"), dict) else {}
    inputs = {name: meta for name, meta in recorded.items()
              if isinstance(meta, dict) and isinstance(meta.get("path"), str)}
    root = io.project_root(folder)
    root = Path(".") if root == Path.cwd() else root
    changed, damaged = changed_inputs(root, {folder: inputs})
    why = [f"its {_role(name)} {root / meta['path']} has changed since" for name, meta in inputs.items()
           if meta["path"] in changed.get(folder, [])]
    why += [f"its {_role(name)} {root / meta['path']} is {damaged[root / meta['path']]}"
            for name, meta in inputs.items() if root / meta["path"] in damaged]
    why += [f"its answers file {root / meta['path']} no longer exists (deleted since)" for name, meta in inputs.items()
            if name.startswith("answers") and not os.path.lexists(root / meta["path"])]  # an annotator dropped
    given = _answers_given(record)
    read = {os.path.abspath(root / meta["path"]) for name, meta in inputs.items() if name.startswith("answers")}
    folders = [root / path for path in given if (root / path).is_dir()]
    why += [f"{path} is an answers file it did not import (saved there since)" for answers in folders
            for path in answers_in(answers) if os.path.abspath(path) not in read]
    refused = _refusal(folders)
    where, out = ("", folder) if root == Path(".") else (f" from {root}", _from_root(folder, root))
    lost = lost_answers(record, root)
    if lost:  # importing again cannot work: nothing to import
        shown, verb = ", ".join(str(root / path) for path in lost), "exists" if len(lost) == 1 else "exist"
        raise io.DataError(f"{folder} was imported from answers at {shown}, which no longer {verb} (moved or deleted "
                           f"since): its rows would count answers that are not there; put the answers back at {shown} "
                           f"and import it again{where} ({_reimport(out, inputs, record, given)}), then {then}; or "
                           f"stop using this import: delete it (rm -r {shlex.quote(str(folder))}) and name it nowhere "
                           f"(a suite's preference_files, a --preferences, a table's --imports)")
    stale = (f"{folder} was imported from files that are not those there now: {'; '.join(why)} (a branch switch with "
             f"git checkout and dvc checkout, a re-export, answers added or edited); its rows would report other "
             f"judgements than those files hold: import it again{where} ({_reimport(out, inputs, record, given)}), "
             f"then {then}") if why else None
    if refused is not None:
        raise io.DataError(f"{folder}: {refused}" + (f"; and {stale}" if stale else f"; then {then}"))
    if stale is not None:
        raise io.DataError(stale)
    if "batch" in inputs:  # imported from the batch there now: that batch must still be of the texts rated
        key = root / inputs["key"]["path"] if "key" in inputs else None
        check_current_batch(root / inputs["batch"]["path"], key, f"{folder} holds the answers to", then)


IMPORT_STAGE = "import_human_eval"  # the stage name an import's stage.json records


def check_imported_input(path: Path, then: str) -> None:
    """Refuse ``path``, a file a stage reads (a ``--preferences`` set), before any work, where it lies in a stage
    folder (the nearest folder above it holding a ``stage.json``) whose files are not as its stage wrote them
    (:func:`~grueflow.io.check_stage_output`), or in an import folder (one of :data:`IMPORT_STAGE`) built from other
    files than those there now (:func:`check_current_import`, ``then``: what to do after importing again), as the
    human-evaluation table refuses that import. The folder is found above ``path`` as given, else above it with
    every link followed (a link of the user's to an import's file). A file in no stage folder (a set of one's own)
    is not checked. A path reached through a link of the user's to a stage folder (``data/imports`` linked to
    ``results/human/<task>/imported``) is checked at the folder it links to (:func:`~grueflow.io.linked_path`)."""
    path = io.linked_path(path) or path
    folder = None
    for absolute in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        folder = next((p for p in absolute.parents if (p / io.STAGE_RECORD).is_file()), None)
        if folder is not None:
            break
    if folder is None:
        return
    io.check_stage_output(path)  # a damaged record, or a file edited since the import wrote it
    record = io.read_json(folder / io.STAGE_RECORD)
    if isinstance(record, dict) and record.get("stage") == IMPORT_STAGE:
        check_current_import(Path(os.path.relpath(folder)) if folder.is_relative_to(Path.cwd()) else folder, then)


def _from_root(path: Path, root: Path) -> Path:
    """``path`` (relative to the working folder) as a command run from the folder ``root`` names it: relative to
    ``root`` where it lies in it, else absolute."""
    absolute = Path(os.path.abspath(path))
    return absolute.relative_to(root) if absolute.is_relative_to(root) else absolute


def _role(name: str) -> str:
    """What the input ``name`` of an import's record is: ``batch``, ``key`` or (``answers<i>``) ``answers file``."""
    return name if name in ("batch", "key") else "answers file"


def _answers_given(record: dict) -> list[Path]:
    """The ``--answers`` an import's ``record`` lists as given (:data:`ANSWERS_GIVEN`); none in a record written
    before imports listed them."""
    given = record.get(ANSWERS_GIVEN)
    return [Path(path) for path in given if isinstance(path, str)] if isinstance(given, list) else []


def _refusal(folders: list[Path]) -> Optional[str]:
    """Why the import would refuse the answers ``folders`` now (:func:`answer_files`: a file it does not read, a
    folder inside, what the checkout has not fetched, no answers file), as it says it; None where it would read them.
    """
    try:
        answer_files(folders, warn=False) if folders else None
    except io.DataError as err:
        return str(err)
    return None


def _reimport(folder: Path, inputs: dict, record: dict, given: list[Path]) -> str:
    """The commands that import ``folder`` (as named from the project's root) again: Snakemake's target, and the
    import by hand (DVC has no import stage) from the inputs its record names: the ``--answers`` given where the
    record lists them, else the answers files read, as their folder where they share one."""
    def path(name: str) -> str:
        return shlex.quote(str(inputs[name]["path"]))

    answers = [name for name in sorted(inputs) if name.startswith("answers")]
    folders = {str(Path(inputs[name]["path"]).parent) for name in answers}
    shown = (" ".join(shlex.quote(str(p)) for p in given) if given else
             shlex.quote(folders.pop()) if len(folders) == 1 else " ".join(map(path, answers)))
    key = f" --key {path('key')}" if "key" in inputs else ""
    task = record["params"].get("task") if isinstance(record.get("params"), dict) else None
    batch = path("batch") if "batch" in inputs else "<batch folder>"
    return (f"snakemake --cores 1 results/human_eval_table.csv under Snakemake; under DVC or by hand: python "
            f"stages/import_human_eval.py --batch {batch}{key} --answers {shown}"
            f"{f' --task {shlex.quote(task)}' if isinstance(task, str) else ''} --out {shlex.quote(str(folder))}")


def check_current_batch(batch: Path, key: Optional[Path], subject: str, then: str) -> None:
    """Refuse the batch folder ``batch`` (a :class:`~grueflow.io.DataError` beginning ``<subject> <batch>``, ending
    with what to do after importing the answers to a new one, ``then``) where it lies where its export wrote it and
    a file it was exported from holds other content now (:func:`rebuilt_inputs`): its items are texts the methods'
    evaluations no longer hold, so rows rating them would be reported for those methods as they are now. This is
    the state in which the stale check exports the batch again before a Snakemake run imports its answers (which
    then name the earlier batch, and are refused); by hand and under DVC, which builds no Likert batch, nothing
    exports it again, so the import and the table refuse it here. ``key``: a pairwise batch's key file (as named
    from the working folder), for the command that exports the batch again. A copy of a batch (one kept in
    ``.grueflow/replaced/`` when it was replaced) is the earlier batch by choice, and is not refused: that is how
    the answers to it are still imported."""
    root = io.project_root(batch)
    root = Path(".") if root == Path.cwd() else root
    rebuilt = rebuilt_inputs(batch, root)
    if not rebuilt:
        return
    where = "" if root == Path(".") else f" from {root}"
    raise io.DataError(f"{subject} {batch}, which was exported from files that changed since: "
                       f"{', '.join(str(root / path) for path in rebuilt)} (evaluations rebuilt after a params or "
                       f"code change); its items are not the texts those methods produce now, and their ratings "
                       f"would be reported as theirs: export the batch again{where} ({_reexport(batch, root, key)}), "
                       f"have it answered and import the answers, then {then} (the export keeps a copy of this batch "
                       f"in .grueflow/replaced/, from which the answers to it still import by hand, as ratings of the "
                       f"earlier texts); or undo the change and rebuild those evaluations")


def rebuilt_inputs(batch: Path, root: Path) -> list[str]:
    """The files the batch folder ``batch`` was exported from (each method's ``predictions.jsonl``, or an RL4LMs
    CSV: the inputs its ``stage.json`` records, by path relative to the project's ``root`` and sha256) that hold
    other content now, as the stale check compares a stage's inputs (:func:`grueflow.stale.changed_inputs`; an input
    stage folder unlike its own record counts too), by their recorded paths. Empty where none does, where ``batch``
    holds no readable record, and for a copy of a batch (its record names another folder as its output:
    :func:`grueflow.io.written_for`), which holds the batch its tag names whatever was rebuilt since. An input no
    longer there is not compared."""
    try:
        record = io.read_json(batch / io.STAGE_RECORD)
    except (OSError, ValueError):
        return []
    inputs = record.get("inputs") if isinstance(record, dict) else None
    if not isinstance(inputs, dict) or io.written_for(root, batch, record.get("out")) is not None:
        return []
    changed, damaged = changed_inputs(root, {batch: inputs})
    paths = [meta["path"] for meta in inputs.values() if isinstance(meta, dict) and isinstance(meta.get("path"), str)]
    return [*changed.get(batch, []), *(path for path in paths if root / path in damaged)]


def _reexport(batch: Path, root: Path, key: Optional[Path]) -> str:
    """The commands that export the batch folder ``batch`` (lying where its ``stage.json`` says it was written) again,
    run from the project's ``root``: Snakemake's target, and the export by hand from what that record holds (its
    kind, criteria, seed, item count and inputs; ``key``: a pairwise batch's key file)."""
    record = io.read_json(batch / io.STAGE_RECORD)
    params = record.get("params") if isinstance(record.get("params"), dict) else {}
    inputs = {name: meta["path"] for name, meta in record["inputs"].items() if isinstance(meta, dict)}
    sources = (f"--rl4lms-csv {shlex.quote(inputs['rl4lms_csv'])}" if "rl4lms_csv" in inputs else
               "--predictions " + " ".join(shlex.quote(f"{method}={path}") for method, path in inputs.items()))
    options = "".join(f" --{name.replace('_', '-')} {shlex.quote(str(params[name]))}"
                      for name in ("kind", "criteria", "seed", "max_items") if params.get(name) is not None)
    out = shlex.quote(str(record["out"]))  # the path from the root (the batch lies there: :func:`rebuilt_inputs`)
    key_option = "" if key is None else \
        f" --key {shlex.quote(str(key if root == Path('.') else _from_root(key, root)))}"
    return (f"snakemake --cores 1 {out} under Snakemake; under DVC or by hand: python stages/export_human_eval.py"
            f"{options} {sources} --out {out}{key_option}")


EXCEL_ERROR = re.compile(r"#(?:NAME\?|VALUE!|REF!|DIV/0!|N/A|NUM!|NULL!|SPILL!|CALC!|FIELD!)")
EXCEL_DATE = re.compile(r"\d{1,2}[-/ ](?:[A-Za-z]{3,9}|\d{1,2})(?:[-/ ]\d{2,4})?|[A-Za-z]{3,9}[-/ ]\d{1,4}"
                        r"|\d{4}-\d{1,2}-\d{1,2}")
EXCEL_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?(?:E[-+]?\d+)?", re.IGNORECASE)
EXCEL_CHANGES = ("a text starting with =, +, - or @ read as a formula, 3/4 as a date, long digits as 1.23457E+18, "
                 "007 as 7")  # what Excel does to a text cell it reads as something else, for the error message


def excel_conversion(given: str, expected: str) -> bool:
    """Whether ``given``, a whole results CSV cell, is what Excel writes back for the batch's text ``expected`` after
    reading it as something other than text: a formula's error value (``#NAME?`` for ``- one star`` or ``=)``), a
    date (``04-Mar`` for ``3/4``), a number in E notation (``1.23457E+18`` for ``1234567890123456789``), one that
    lost its leading zeros (``7`` for ``007``) or its digits past the 15th (Excel's precision). Excel converts a
    cell only where the whole cell reads so."""
    given, expected = given.strip(), expected.strip()
    if EXCEL_ERROR.fullmatch(given):
        return expected.startswith(("=", "+", "-", "@"))
    if EXCEL_DATE.fullmatch(given) and not EXCEL_NUMBER.fullmatch(given):
        return bool(EXCEL_DATE.fullmatch(expected) or re.fullmatch(r"\d{1,2}[-/.]\d{1,2}", expected))
    if EXCEL_NUMBER.fullmatch(given) and re.fullmatch(r"[-+]?\d+", expected):
        digits = expected.lstrip("+-")
        return "e" in given.lower() or given.isdigit() and (digits.startswith("0") or  # 007 -> 7
                                                            len(digits) > 15 and given[:15] == digits[:15])
    return False


LOOKALIKES = {"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u201c": '"',
              "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u2010": "-", "\u2011": "-",
              "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-", "\u2026": "..."}
# characters a spreadsheet or word processor puts in place of ASCII ones (smart quotes, dashes, ellipsis)


def first_difference(given: str, expected: str, context: int = 20) -> tuple[str, bool]:
    """Where ``given`` first differs from ``expected`` once spacing is collapsed (as the match compares them), and
    whether the two characters there are lookalikes (``’`` for ``'``: ``LOOKALIKES``).

    The description reads ``at character N: the file has '...' where the batch has '...'``, with excerpts of
    ``context`` characters either side and, where either character is not ASCII, both code points."""
    a, b = " ".join(_words(given)), " ".join(_words(expected))
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, i - context)
    text = (f"at character {i + 1}: the file has {a[start:i + context]!r} where the batch has "
            f"{b[start:i + context]!r}")
    x, y = a[i:i + 1], b[i:i + 1]
    lookalike = bool(x and y) and LOOKALIKES.get(x, x)[:1] == LOOKALIKES.get(y, y)[:1]
    if not (x.isascii() and y.isascii()):
        text += f" ({_codepoint(x)} where the batch has {_codepoint(y)})"
    return text, lookalike


def _codepoint(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, '?')}" if char else "the end of the text"


def _words(text: str) -> list[str]:
    """A text's words: spacing a spreadsheet round trip adds or changes (trailing blanks, NBSP) is no change."""
    return text.split()


def chosen_system(batch: Batch, key: Mapping[str, str], answer: Answer) -> str | None:
    """The system the annotator preferred (None for a tie), through the batch's key."""
    choice = answer.values[CHOICE_FIELD]
    if choice == "tie":
        return None
    return _system(key, batch.item(answer.item_id)[f"choice_{choice}_id"])


def _system(key: Mapping[str, str], opaque_id: str) -> str:
    if opaque_id not in key:
        raise io.DataError(f"opaque id {opaque_id} is not in the key; give the key file written with this batch")
    return key[opaque_id]


def identical_choices(item: Mapping[str, str]) -> bool:
    """Whether a pairwise item's two choices are the same text (after whitespace normalisation, as the export
    compares them): a choice between them prefers neither system, whichever side the annotator pressed. Only a
    batch whose systems coincide on every sample (kept whole, with a warning), or one exported before such items
    were left out, has one."""
    return _words(item["choice_A"]) == _words(item["choice_B"])


def identical_judgements(batch: Batch, answers: Sequence[Answer]) -> int:
    """How many of a pairwise batch's ``answers`` judge an item whose choices are the same text (0 for Likert)."""
    return 0 if batch.kind != "pairwise" else sum(identical_choices(batch.item(a.item_id)) for a in answers)


def preferences(batch: Batch, key: Mapping[str, str], answers: Sequence[Answer]) -> list[dict[str, str]]:
    """One row per (item, annotator) that is not a tie, in batch order then annotator order:
    ``{id, sample_id, prompt, chosen, rejected, chosen_system, rejected_system, annotator}``.

    ``id`` is ``<batch tag>/<sample id>/<annotator>`` (``<sample id>/<annotator>`` for a batch exported before item
    ids carried a tag), unique in the file and across the batches of a task, so that their files can be joined into
    one preference set (a preference set's ids must be unique; annotator names hold no ``/``); ``sample_id`` is the
    item's sample, which several annotators' rows, and several batches', share. An item whose two
    choices are the same text (:func:`identical_choices`) makes no row, as a pair needs two different
    completions; one log line counts them."""
    order = {item["item_id"]: i for i, item in enumerate(batch.items)}
    prefix = f"{batch.tag}/" if batch.tag is not None else ""
    rows, identical = [], 0
    for answer in sorted(answers, key=lambda a: (order[a.item_id], a.annotator)):
        choice = answer.values[CHOICE_FIELD]
        if choice == "tie":
            continue
        item = batch.item(answer.item_id)
        other = "B" if choice == "A" else "A"
        if identical_choices(item):
            identical += 1
            continue
        rows.append({"id": f"{prefix}{item['sample_id']}/{answer.annotator}", "sample_id": item["sample_id"],
                     "prompt": prompt_of(batch, item),
                     "chosen": item[f"choice_{choice}"], "rejected": item[f"choice_{other}"],
                     "chosen_system": _system(key, item[f"choice_{choice}_id"]),
                     "rejected_system": _system(key, item[f"choice_{other}_id"]), "annotator": answer.annotator})
    if identical:
        log.warning("left %d judgement(s) out of the preferences: their item's two choices are the same text",
                    identical)
    return rows


def coverage(batch: Batch, answers: Sequence[Answer], key: Mapping[str, str] | None = None) -> dict[str, Any]:
    """How much of the batch was answered: ``n_items``, ``n_items_answered`` and ``methods_without_answers``
    (sorted; a Likert item's ``algorithm``, a pairwise item's two systems through ``key``; left out for a
    pairwise batch without its key). Logs one warning when items or methods have no answers."""
    answered = {a.item_id for a in answers}
    out: dict[str, Any] = {"n_items": len(batch.items), "n_items_answered": len(answered)}
    if batch.kind == "likert" or key is not None:
        def methods(item: Mapping[str, Any]) -> list[str]:
            if batch.kind == "likert":
                return [item["algorithm"]]
            return [_system(key, item[f"choice_{side}_id"]) for side in "AB"]

        every = {m for item in batch.items for m in methods(item)}
        got = {m for item in batch.items if item["item_id"] in answered for m in methods(item)}
        out["methods_without_answers"] = sorted(every - got)
    note = coverage_note(out)
    if note:
        log.warning("%s; the table covers only the answered items", note)
    return out


def coverage_note(stats: Mapping[str, Any]) -> str | None:
    """``k of n items answered; methods with no answers: a, b`` where a batch was not answered whole (from
    :func:`coverage`'s keys, as agreement.json holds them); ``None`` where it was, or the counts are absent."""
    n, k = stats.get("n_items"), stats.get("n_items_answered")
    if n is None or k is None or k >= n:
        return None
    methods = stats.get("methods_without_answers")
    return f"{k} of {n} items answered" + (f"; methods with no answers: {', '.join(methods)}" if methods else "")


BLANK_REASONS = "blank_reasons"  # agreement.json: {field: {statistic: why it is blank}}
IDENTICAL_LEFT_OUT = "judgements_identical_choices_left_out"  # agreement.json: judgements out of the win rates


def identical_note(stats: Mapping[str, Any]) -> str | None:
    """Why a pairwise batch's win rates count fewer judgements than it has (from :func:`agreement`'s
    ``judgements_identical_choices_left_out``); ``None`` where none were left out."""
    n = stats.get(IDENTICAL_LEFT_OUT)
    if not n:
        return None
    return (f"{n} judgement(s) of items whose two choices are the same text are left out of the win rates (a choice "
            f"between identical texts prefers neither method)")


def agreement(batch: Batch, answers: Sequence[Answer], key: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Agreement per Likert criterion (Krippendorff interval and ordinal; Cohen's kappa on the scores when
    exactly two annotators) or on the pairwise choice (Fleiss' kappa; Cohen's kappa with two annotators), beside
    the batch's :func:`coverage` (``key`` names a pairwise batch's methods). A statistic that is undefined is
    ``None``, and ``blank_reasons[field][statistic]`` says why. A pairwise batch with judgements of items whose
    choices are the same text counts them in ``judgements_identical_choices_left_out`` (absent where none)."""
    annotators = sorted({a.annotator for a in answers})
    by_item: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for a in answers:
        by_item[a.item_id][a.annotator] = a.values
    shared = [i for i, votes in by_item.items() if len(votes) >= 2]
    out: dict[str, Any] = {"annotators": annotators, **coverage(batch, answers, key),
                           "n_items_multiply_answered": len(shared)}
    identical = identical_judgements(batch, answers)
    if identical:  # left out of the win rates: the table says so under its rows (identical_note)
        out[IDENTICAL_LEFT_OUT] = identical
    fields = [c.id for c in batch.criteria] if batch.kind == "likert" else [CHOICE_FIELD]
    blanks: dict[str, dict[str, str]] = {}
    for field in fields:
        stats: dict[str, Any] = {}
        labels = [[v[field] for v in by_item[i].values()] for i in shared]
        if batch.kind == "likert":
            stats["krippendorff_alpha_interval"] = _round(krippendorff_alpha(labels, "interval"))
            stats["krippendorff_alpha_ordinal"] = _round(krippendorff_alpha(labels, "ordinal"))
        else:
            stats["fleiss_kappa"] = _round(fleiss_kappa(labels))
        why = {stat: _why_blank(labels) for stat, value in stats.items() if value is None}
        if len(annotators) == 2:
            first, second = annotators
            both = [i for i in shared if first in by_item[i] and second in by_item[i]]
            stats["cohen_kappa"] = _round(cohen_kappa([by_item[i][first][field] for i in both],
                                                      [by_item[i][second][field] for i in both]))
            if stats["cohen_kappa"] is None:
                why["cohen_kappa"] = (_why_blank([[by_item[i][a][field] for a in annotators] for i in both]) if both
                                      else "no item answered by both annotators")
        out[field] = stats
        if why:
            blanks[field] = why
    if blanks:
        out[BLANK_REASONS] = blanks
    return out


def _why_blank(units: Sequence[Sequence[Any]]) -> str:
    """Why an agreement statistic over ``units`` (each item's labels) is undefined."""
    if not any(len(labels) >= 2 for labels in units):
        return "fewer than 2 annotators on every item"
    if len({label for labels in units for label in labels}) == 1:
        return "no variance: every answer identical"
    return "undefined for these answers"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def t_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """Mean and the t-based 95% interval (``None`` bounds for fewer than two values)."""
    from scipy.stats import t

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``successes / n`` (n > 0)."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def likert_rows(batch: Batch, answers: Sequence[Answer], task: str) -> list[dict[str, Any]]:
    """Table rows: mean Likert score per method and criterion, over items (each the mean of its annotators)."""
    per_item: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for a in answers:
        method = batch.item(a.item_id)["algorithm"]
        for criterion, score in a.values.items():
            per_item[(method, criterion, a.item_id)].append(score)
    rows = []
    methods = sorted({m for m, _, _ in per_item})
    for method in methods:
        for criterion in (c.id for c in batch.criteria):
            scores = [s for (m, c, _), s in per_item.items() if m == method and c == criterion]
            if not scores:
                continue
            mean, low, high = t_interval([sum(s) / len(s) for s in scores])
            rows.append({"kind": "likert", "task": task, "method": method, "measure": criterion,
                         "n": len(scores), "n_judgments": sum(len(s) for s in scores), "ties": None,
                         "value": round(mean, 4), "ci_low": _opt(low), "ci_high": _opt(high), "interval": "t 95%"})
    return rows


def pairwise_rows(batch: Batch, key: Mapping[str, str], answers: Sequence[Answer], task: str) -> list[dict[str, Any]]:
    """Table rows: each system's win rate against the other (ties left out) with Wilson 95% intervals.

    Judgements of an item whose two choices are the same text (:func:`identical_choices`) count neither as decided
    nor as ties, as they make no preference row: a batch of only such items has ``n`` 0 and no win rate, where
    counting them would report the A/B draw as a preference. One log line counts them."""
    systems = sorted(set(key.values()))
    wins = {s: 0 for s in systems}
    ties = 0
    identical = identical_judgements(batch, answers)
    if identical:
        log.warning("left %d judgement(s) out of the win rates: their item's two choices are the same text",
                    identical)
    for a in answers:
        if identical_choices(batch.item(a.item_id)):
            continue
        winner = chosen_system(batch, key, a)
        if winner is None:
            ties += 1
        else:
            wins[winner] += 1
    decided = sum(wins.values())
    rows = []
    for system, other in permutations(systems, 2):
        low, high = wilson_interval(wins[system], decided) if decided else (None, None)
        rows.append({"kind": "pairwise", "task": task, "method": system, "measure": f"win_rate_vs:{other}",
                     "n": decided, "n_judgments": decided + ties, "ties": ties,
                     "value": round(wins[system] / decided, 4) if decided else None,
                     "ci_low": _opt(low), "ci_high": _opt(high), "interval": "Wilson 95%"})
    return rows


def _opt(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def to_markdown(rows: Sequence[Mapping[str, Any]], agreements: Mapping[str, Mapping[str, Any]]) -> str:
    """The human-evaluation table as Markdown: Likert means, pairwise win rates, then agreement. Under a table, a
    note for each batch not answered whole (:func:`coverage_note` of its agreement) and for each pairwise batch
    whose win rates leave judgements of identical texts out (:func:`identical_note`); a blank agreement cell gives
    the reason the import recorded."""
    def cell(row: Mapping[str, Any]) -> str:
        if row["value"] is None:
            return ""
        if row["ci_low"] is None:
            return f"{row['value']:.2f}"
        return f"{row['value']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"

    notes: dict[str, list[str]] = {}
    for name, stats in agreements.items():
        coverage_text, identical_text = coverage_note(stats), identical_note(stats)
        found = ([f"{coverage_text}; the rows cover only the answered items"] if coverage_text else []) + \
            ([identical_text] if identical_text else [])
        if found:
            notes[Path(name).name] = found
    lines = ["# Human evaluation", ""]
    likert = [r for r in rows if r["kind"] == "likert"]
    if likert:
        lines += ["## Likert (1-5): mean over items [t-based 95% CI]", "",
                  "| task | method | criterion | items | mean [95% CI] | batch |", "|---|---|---|---|---|---|"]
        lines += [io.markdown_row((r["task"], r["method"], r["measure"], r["n"], cell(r), r.get("batch") or ""))
                  for r in likert]
        lines += ["", *_notes(notes, likert)]
    pairwise = [r for r in rows if r["kind"] == "pairwise"]
    if pairwise:
        lines += ["## Pairwise: win rate, ties left out [Wilson 95% CI]", "",
                  "| task | method | against | decided | ties | win rate [95% CI] | batch |",
                  "|---|---|---|---|---|---|---|"]
        lines += [io.markdown_row((r["task"], r["method"], r["measure"].split(":", 1)[1], r["n"], r["ties"], cell(r),
                                   r.get("batch") or "")) for r in pairwise]
        lines += ["", *_notes(notes, pairwise)]
    lines += _notes(notes, None)  # batches with no row in either table
    if agreements:
        lines += ["## Agreement", "", "| batch | field | statistic | value |", "|---|---|---|---|"]
        for name, stats in agreements.items():
            reasons = stats.get(BLANK_REASONS, {})
            for field, values in stats.items():
                if isinstance(values, dict) and field != BLANK_REASONS:
                    lines += [io.markdown_row((name, field, stat, _agreement_cell(v, reasons.get(field, {}).get(stat))))
                              for stat, v in values.items()]
        lines.append("")
    return "\n".join(lines)


def _agreement_cell(value: float | None, reason: str | None) -> str:
    """A statistic to 3 decimals; a blank one as its reason in parentheses (empty where the import recorded none)."""
    if value is not None:
        return f"{value:.3f}"
    return f"({reason})" if reason else ""


def _notes(notes: dict[str, list[str]], rows: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The notes of the batches in ``rows`` (``None``: of every batch left), each taken once, as Markdown lines
    ending in a blank line."""
    batches = list(notes) if rows is None else [b for b in notes if any(r.get("batch") == b for r in rows)]
    lines = [io.markdown_line(f"Note: batch {b}: {note}.") for b in batches for note in notes.pop(b)]
    return [*lines, ""] if lines else []
