"""Import answers (the local page's JSONL or a platform's results CSV), agreement, the human-evaluation
table and the preference pairs that the reward-model and DPO stages learn from.

Confidence intervals:

* Likert means: each item's score is the mean over its annotators; the table gives the mean over
  items with a **t-based** 95% interval, ``mean +- t_{0.975, n-1} * sd / sqrt(n)`` (n items; empty for n < 2).
* Pairwise win rates: every (item, annotator) judgment counts once; ties are reported but left out of
  the rate, ``wins / (wins + losses)``, with the **Wilson score** 95% interval (Wilson 1927). Judgments
  of one item by several annotators are not independent, so with many annotators per item the
  interval is somewhat too narrow.
"""

from __future__ import annotations

import csv
import html
import logging
import math
from collections import defaultdict
from itertools import permutations
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from grueflow import io
from grueflow.human.agreement import cohen_kappa, fleiss_kappa, krippendorff_alpha
from grueflow.human.answers import Answer, AnswerError, check_annotator, check_answer, read_answer_lines
from grueflow.human.batch import Batch, prompt_of
from grueflow.human.templates import CHOICE_FIELD

log = logging.getLogger(__name__)
Z_95 = 1.959963984540054  # the standard normal's 0.975 quantile
TABLE_COLUMNS = ("kind", "task", "method", "measure", "n", "n_judgments", "ties", "value", "ci_low", "ci_high",
                 "interval", "batch")  # human_eval_table.csv; measure: a criterion, or win_rate_vs:<other method>;
# batch: the import folder's name (two batches may rate one task x method x measure)


def read_answers(path: str | Path, batch: Batch) -> list[Answer]:
    """Answers from the page's ``.jsonl`` or a platform's results ``.csv``; the last answer of each
    (annotator, item) wins. Every answer is checked against the batch as the page checks it."""
    path = Path(path)
    if not path.is_file():
        raise io.MissingDataError(f"answers file {path} does not exist; give the page's .jsonl or a results .csv")
    if path.suffix.lower() == ".csv":
        return latest_answers(read_platform_csv(path, batch))
    records = read_answer_lines(path)
    if not records:
        raise io.DataError(f"{path}: has no answers; give the file the annotation page wrote after annotators "
                           f"worked, or leave it out")
    answers = []
    for number, record in enumerate(records, start=1):
        try:
            answers.append(Answer(check_annotator(record["annotator"]), record["item_id"],
                                  check_answer(batch, record["item_id"], record["answer"])))
        except AnswerError as err:
            raise io.DataError(f"{path}: answer {number}: {err}") from None
    return latest_answers(answers)


def latest_answers(answers: Iterable[Answer]) -> list[Answer]:
    latest = {(a.annotator, a.item_id): a for a in answers}
    return list(latest.values())


def read_platform_csv(path: str | Path, batch: Batch) -> list[Answer]:
    """A platform's results CSV (MTurk: ``WorkerId``, ``Input.<column>``, ``Answer.<field>``).

    Rows are matched to items by ``Input.item_id``, and every ``Input.<column>`` the batch has must equal
    the item's text (the CSV values were HTML-escaped for upload; they are unescaped here), so a results
    file from another batch is refused. Rows with ``AssignmentStatus`` ``Rejected`` are left out.
    """
    io.read_text(path)
    csv.field_size_limit(2**31 - 1)  # a long generation is one field
    with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: Excel's UTF-8 starts with a BOM
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        fields = [c.id for c in batch.criteria] if batch.kind == "likert" else [CHOICE_FIELD]
        needed = ["WorkerId", "Input.item_id", *(f"Answer.{f}" for f in fields)]
        missing = [c for c in needed if c not in header]
        if missing:
            raise io.DataError(f"{path}: missing column(s) {missing}; a results CSV has WorkerId, Input.<column> "
                               f"and Answer.<field> columns (this batch's fields: {fields})")
        answers, rows = [], 0
        try:
            for row in reader:
                number = reader.line_num
                rows += 1
                if None in row or any(v is None for v in row.values()):  # extra fields, or too few
                    fields_found = len(header) + len(row.get(None) or []) - sum(v is None for v in row.values())
                    raise io.DataError(f"{path}: line {number}: {fields_found} fields where the header has "
                                       f"{len(header)}; was the file cut or edited by hand? Download it again")
                if row.get("AssignmentStatus") == "Rejected":
                    continue
                answers.append(_platform_row(path, number, row, batch, fields))
        except csv.Error as err:
            raise io.DataError(f"{path}: line {reader.line_num}: not valid CSV ({err})") from None
    if rows == 0:
        raise io.DataError(f"{path}: has a header but no answer rows; download the results after the annotators "
                           f"have worked, or remove the file")
    if not answers:
        raise io.DataError(f"{path}: every one of its {rows} rows is Rejected; no answer is left to import")
    return answers


def _platform_row(path: str | Path, number: int, row: Mapping[str, str], batch: Batch, fields: Sequence[str]) -> Answer:
    item = batch.item(html.unescape(row["Input.item_id"]))
    if item is None:
        raise io.DataError(f"{path}: row {number}: Input.item_id {row['Input.item_id']!r} is not in this batch")
    for column in batch.columns:
        given = row.get(f"Input.{column}")
        if given is not None and _words(html.unescape(given)) != _words(item[column]):
            raise io.DataError(f"{path}: row {number}: Input.{column} differs from item {item['item_id']}'s text; "
                               f"is this the results file of another batch?")
    raw = {f: row[f"Answer.{f}"].strip() for f in fields}
    values: dict[str, Any] = raw
    if batch.kind == "likert":
        try:
            values = {f: int(v) for f, v in raw.items()}
        except ValueError:
            raise io.DataError(f"{path}: row {number}: Likert answers are integers, got {raw}") from None
    elif raw[CHOICE_FIELD].lower() == "tie":
        values = {CHOICE_FIELD: "tie"}
    try:
        return Answer(check_annotator(row["WorkerId"]), item["item_id"], check_answer(batch, item["item_id"], values))
    except AnswerError as err:
        raise io.DataError(f"{path}: row {number}: {err}") from None


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


def preferences(batch: Batch, key: Mapping[str, str], answers: Sequence[Answer]) -> list[dict[str, str]]:
    """One row per (item, annotator) that is not a tie, in batch order then annotator order:
    ``{id, sample_id, prompt, chosen, rejected, chosen_system, rejected_system, annotator}``.

    ``id`` is ``<sample id>/<annotator>``, unique in the file (a preference set's ids must be; annotator names hold
    no ``/``), and ``sample_id`` the item's sample, which several annotators' rows share. An item whose two
    choices are the same text (after whitespace normalisation; only a batch exported before such items were left
    out has one) makes no row, as a pair needs two different completions; one log line counts them."""
    order = {item["item_id"]: i for i, item in enumerate(batch.items)}
    rows, identical = [], 0
    for answer in sorted(answers, key=lambda a: (order[a.item_id], a.annotator)):
        choice = answer.values[CHOICE_FIELD]
        if choice == "tie":
            continue
        item = batch.item(answer.item_id)
        other = "B" if choice == "A" else "A"
        if _words(item[f"choice_{choice}"]) == _words(item[f"choice_{other}"]):
            identical += 1
            continue
        rows.append({"id": f"{item['sample_id']}/{answer.annotator}", "sample_id": item["sample_id"],
                     "prompt": prompt_of(batch, item),
                     "chosen": item[f"choice_{choice}"], "rejected": item[f"choice_{other}"],
                     "chosen_system": _system(key, item[f"choice_{choice}_id"]),
                     "rejected_system": _system(key, item[f"choice_{other}_id"]), "annotator": answer.annotator})
    if identical:
        log.warning("left %d judgement(s) out of the preferences: their item's two choices are the same text",
                    identical)
    return rows


def agreement(batch: Batch, answers: Sequence[Answer]) -> dict[str, Any]:
    """Agreement per Likert criterion (Krippendorff interval and ordinal; Cohen's kappa on the scores when
    exactly two annotators) or on the pairwise choice (Fleiss' kappa; Cohen's kappa with two annotators)."""
    annotators = sorted({a.annotator for a in answers})
    by_item: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for a in answers:
        by_item[a.item_id][a.annotator] = a.values
    shared = [i for i, votes in by_item.items() if len(votes) >= 2]
    out: dict[str, Any] = {"annotators": annotators, "n_items_answered": len(by_item),
                           "n_items_multiply_answered": len(shared)}
    fields = [c.id for c in batch.criteria] if batch.kind == "likert" else [CHOICE_FIELD]
    for field in fields:
        stats: dict[str, Any] = {}
        labels = [[v[field] for v in by_item[i].values()] for i in shared]
        if batch.kind == "likert":
            stats["krippendorff_alpha_interval"] = _round(krippendorff_alpha(labels, "interval"))
            stats["krippendorff_alpha_ordinal"] = _round(krippendorff_alpha(labels, "ordinal"))
        else:
            stats["fleiss_kappa"] = _round(fleiss_kappa(labels))
        if len(annotators) == 2:
            first, second = annotators
            both = [i for i in shared if first in by_item[i] and second in by_item[i]]
            stats["cohen_kappa"] = _round(cohen_kappa([by_item[i][first][field] for i in both],
                                                      [by_item[i][second][field] for i in both]))
        out[field] = stats
    return out


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
    """Table rows: each system's win rate against the other (ties left out) with Wilson 95% intervals."""
    systems = sorted(set(key.values()))
    wins = {s: 0 for s in systems}
    ties = 0
    for a in answers:
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
    """The human-evaluation table as Markdown: Likert means, pairwise win rates, then agreement."""
    def cell(row: Mapping[str, Any]) -> str:
        if row["value"] is None:
            return ""
        if row["ci_low"] is None:
            return f"{row['value']:.2f}"
        return f"{row['value']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"

    lines = ["# Human evaluation", ""]
    likert = [r for r in rows if r["kind"] == "likert"]
    if likert:
        lines += ["## Likert (1-5): mean over items [t-based 95% CI]", "",
                  "| task | method | criterion | items | mean [95% CI] | batch |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['method']} | {r['measure']} | {r['n']} | {cell(r)} | {r.get('batch') or ''} |"
                  for r in likert]
        lines.append("")
    pairwise = [r for r in rows if r["kind"] == "pairwise"]
    if pairwise:
        lines += ["## Pairwise: win rate, ties left out [Wilson 95% CI]", "",
                  "| task | method | against | decided | ties | win rate [95% CI] | batch |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['method']} | {r['measure'].split(':', 1)[1]} | {r['n']} | {r['ties']} | {cell(r)} "
                  f"| {r.get('batch') or ''} |" for r in pairwise]
        lines.append("")
    if agreements:
        lines += ["## Agreement", "", "| batch | field | statistic | value |", "|---|---|---|---|"]
        for name, stats in agreements.items():
            for field, values in stats.items():
                if isinstance(values, dict):
                    lines += [f"| {name} | {field} | {stat} | {'' if v is None else f'{v:.3f}'} |"
                              for stat, v in values.items()]
        lines.append("")
    return "\n".join(lines)
