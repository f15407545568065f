"""Table-to-text: PARENT (Dhingra et al. 2019, "Handling Divergent Reference Texts when Evaluating
Table-to-Text Generation"), the word-overlap variant used for ToTTo and WikiBio.

Two recipes say which tables and words PARENT sees:

- ``words`` (default): one table, ``meta['table']`` (a list of ``[attribute, value]`` pairs), for both
  the entailment of n-grams and the table recall; texts are lower-cased and split into words and
  punctuation marks (:func:`grueflow.metrics.captioning.tokenize`); the entailment and mention
  probabilities are Laplace-smoothed by ``smoothing``.
- ``totto``: the official ToTTo evaluation (google-research/language ``language/totto``, run by RL4LMs'
  ``parent_totto`` through ``totto_parent_eval.sh``): n-grams are entailed by the whole table
  (``table_to_text_utils.get_table_parent_format``: every non-empty cell of ``meta['raw_table']``, the
  page title, the section title and, when the datapool gives it, ``meta['section_text']``), the table
  recall reads ``meta['table']`` (``get_subtable_parent_format``: the highlighted cells and the two
  titles); ``|`` in a value becomes ``-`` (the script's field separator is ``|||``); a generation is
  stripped and an empty one becomes ``<null>``; the first three references are used, padded to three
  with ``<null>`` (``prepare_references_for_eval.py``); every text is lower-cased and split by sacrebleu's
  13a tokenizer (``totto_parent_eval._normalize_text``); entailment and mention are not smoothed
  (``totto_parent_eval.parent`` calls them without it). The script's ``--lambda_weight`` is unset in
  ``totto_parent_eval.sh``: give ``lambda_weight: null`` for its numbers.

  One step is left out: the official scripts first run Moses' ``detokenizer.perl -l en`` over every file
  (generations, references, tables). The 13a tokenizer splits again most of what it joins; the scores
  differ only where a join survives 13a: a word that starts with an apostrophe is joined to the word
  before it (``swanzey 's`` -> ``swanzey's``, and in natural text ``the 'big apple'`` -> ``the'big
  apple'``), a lone ``'`` to a word ending in s, a currency sign other than ``$`` to its number, ``@-@``
  to a hyphen, spaced CJK words to each other. Texts without these score as the scripts score them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Literal, NamedTuple, Optional, Sequence

from grueflow.io import DataError
from grueflow.metrics import METRICS, MetaChecked, Metric, MetricContext, MetricFn, MetricResult, mean, nanmean
from grueflow.metrics.captioning import tokenize
from grueflow.metrics.diversity import ngrams

TOTTO_REFERENCES = 3  # the official evaluation reads three reference files, "<null>" where a sample has fewer
TOTTO_NULL = "<null>"  # what the official scripts write for an empty generation or a missing reference


def lcs_length(x: Sequence[str], y: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (O(len(x) * len(y)))."""
    row = [0] * (len(y) + 1)
    for a in x:
        previous_diagonal = 0
        for j, b in enumerate(y, start=1):
            previous_diagonal, row[j] = row[j], previous_diagonal + 1 if a == b else max(row[j], row[j - 1])
    return row[-1]


def entailed(gram: tuple[str, ...], table_words: set[str], smoothing: float) -> float:
    """Probability that an n-gram is entailed by the table: its share of words among the table's values."""
    return (sum(w in table_words for w in gram) + smoothing) / (len(gram) + smoothing)


def mentioned(value: list[str], text: list[str], smoothing: float) -> float:
    """Probability that a table value is mentioned in a text: the share of the value in their LCS."""
    return (lcs_length(value, text) + smoothing) / (len(value) + smoothing)


def geometric_mean(values: list[float]) -> float:
    return 0.0 if min(values) <= 0.0 else math.exp(math.fsum(math.log(v) for v in values) / len(values))


class ParentTable(NamedTuple):
    """A sample's table as PARENT reads it: the words whose n-grams it entails (precision, and the weights
    of the reference recall) and the tokenised values whose mention in the generation is the table recall."""

    entailment_words: frozenset[str]
    recall_values: list[list[str]]


def parent_scores(prediction: list[str], reference: list[str], table: ParentTable, lambda_weight: Optional[float],
                  smoothing: float, max_order: int, table_smoothing: float) -> tuple[float, float, float]:
    """PARENT ``(precision, recall, F)`` of one prediction against one reference and its table, each in [0, 1].

    Precision of order n counts a predicted n-gram as correct when it is in the reference or, failing
    that, by its table entailment; recall mixes the entailment-weighted reference recall with the
    table recall (mean LCS share of each value) as ``ref^(1 - lambda) * table^lambda``; a ``lambda_weight``
    of None is ``1 -`` the reference's own table recall (Dhingra et al. 2019, section 3). Zero
    precisions/recalls of orders >= 2 are replaced by ``smoothing``, as the authors' script does;
    ``table_smoothing`` is the Laplace smoothing of the entailment and mention probabilities.
    """
    precisions, recalls = [], []
    for n in range(1, max_order + 1):
        pred, ref = Counter(ngrams(prediction, n)), Counter(ngrams(reference, n))
        entailment = {g: entailed(g, table.entailment_words, table_smoothing) for g in pred.keys() | ref.keys()}
        in_ref = {g: min(1.0, ref[g] / c) for g, c in pred.items()}
        hits = sum(c * (in_ref[g] + (1 - in_ref[g]) * entailment[g]) for g, c in pred.items())
        precisions.append(hits / sum(pred.values()) if pred else 0.0)
        weights = {g: c * entailment[g] for g, c in ref.items()}
        found = sum(w * min(1.0, pred[g] / ref[g]) for g, w in weights.items())
        recalls.append(found / sum(weights.values()) if sum(weights.values()) > 0 else 1.0)
    precisions = precisions[:1] + [p or smoothing for p in precisions[1:]]
    recalls = recalls[:1] + [r or smoothing for r in recalls[1:]]
    precision = geometric_mean(precisions)
    reference_recall = geometric_mean(recalls) or smoothing

    def table_recall(text: list[str]) -> float:
        return mean([mentioned(value, text, table_smoothing) for value in table.recall_values])

    if lambda_weight is None:
        lambda_weight = 1.0 - table_recall(reference)
    recall = math.exp((1 - lambda_weight) * math.log(reference_recall)
                      + lambda_weight * math.log(table_recall(prediction) or smoothing))
    return precision, recall, 2 * precision * recall / (precision + recall + 1e-8)


def table_problem(recipe: str, m: dict[str, Any]) -> str:
    """Why PARENT with ``recipe`` cannot read a sample's ``meta`` ``m`` ("" when it can): both need ``meta['table']``,
    a non-empty list of ``[attribute, value]`` pairs (``words``: with a value that holds a word); ``totto`` also
    needs ``meta['raw_table']``, the rows of cells."""
    table = m.get("table")
    pairs = bool(table) and isinstance(table, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2
                                                                     for p in table)
    if not pairs or (recipe == "words" and not any(tokenize(str(v)) for _, v in table)):
        found = f"table={table!r:.80}" if "table" in m else f"no 'table' among its meta keys {sorted(m)}"
        return f"meta['table'] is not a non-empty list of [attribute, value] pairs ({found})"
    if recipe == "totto" and "raw_table" not in m:
        return f"recipe: totto needs meta['raw_table'] too (the rows of cells); its meta keys are {sorted(m)}"
    return ""


def check_tables(recipe: str, meta: Sequence[dict[str, Any]]) -> None:
    """A :class:`~grueflow.io.DataError` naming the first sample whose meta PARENT with ``recipe`` cannot read
    (:func:`table_problem`), how many are so, and the datapool that writes the tables."""
    problems = [(i, problem) for i, m in enumerate(meta) for problem in [table_problem(recipe, m)] if problem]
    if problems:
        first, why = problems[0]
        raise DataError(f"metric 'parent' (recipe: {recipe}) scores a generation against the sample's table; "
                        f"{len(problems)} of {len(meta)} samples have none it can read, the first (sample {first}): "
                        f"{why}; use a datapool that writes tables (totto), or a metric that needs none")


def words_table(m: dict[str, Any]) -> ParentTable:
    """Recipe ``words``: ``meta['table']``'s values, tokenised, for both entailment and recall."""
    check_tables("words", [m])
    values = [value for value in (tokenize(str(v)) for _, v in m["table"]) if value]
    return ParentTable(frozenset(w for value in values for w in value), values)


def totto_table(m: dict[str, Any], tokens: Callable[[str], list[str]]) -> ParentTable:
    """Recipe ``totto``: the official evaluation's precision table (the whole table, titles, section text) and
    recall table (``meta['table']``: the highlighted cells and titles), tokenised with ``tokens``."""
    check_tables("totto", [m])
    cells = [str(cell["value"]) for row in m["raw_table"] for cell in row if str(cell["value"]).strip()]
    texts = cells + [str(m[k]) for k in ("page_title", "section_title", "section_text") if m.get(k)]
    entailment = [tokens(text.replace("|", "-")) for text in texts]
    values = [value for value in (tokens(str(v).replace("|", "-")) for _, v in m["table"]) if value]
    return ParentTable(frozenset(w for value in entailment for w in value), values)


@METRICS.register("parent", "PARENT precision/recall/F (ToTTo, WikiBio) against references and meta['table'], "
                  "in [0, 1]")
class Parent(Metric):
    category = "task"
    needs_references = True
    scores = ("parent_f", "parent_precision", "parent_recall")

    @dataclass(frozen=True)
    class Args:
        """``recipe``: ``words`` or ``totto`` (the official ToTTo evaluation; see the module docstring).
        ``lambda_weight``: the weight of the table recall in [0, 1]; null for the reference's own weight (1 - its
        table recall), which the official ToTTo evaluation uses. ``smoothing``: what a zero precision or recall
        of an order >= 2 becomes. ``max_order``: the longest n-gram."""

        recipe: Literal["words", "totto"] = "words"
        lambda_weight: Optional[float] = 0.5
        smoothing: float = 1e-5
        max_order: int = 4

        def __post_init__(self) -> None:
            lambda_ok = self.lambda_weight is None or 0.0 <= self.lambda_weight <= 1.0
            if not lambda_ok or self.smoothing <= 0.0 or self.max_order < 1:
                raise ValueError(f"parent needs lambda_weight null or in [0, 1], smoothing > 0 and max_order >= 1; "
                                 f"got lambda_weight={self.lambda_weight}, smoothing={self.smoothing}, "
                                 f"max_order={self.max_order}")

    @classmethod
    def meta_keys(cls, args: "Parent.Args") -> tuple[str, ...]:
        return ("table", "raw_table") if args.recipe == "totto" else ("table",)

    @classmethod
    def check_samples(cls, args: "Parent.Args", meta: Sequence[dict[str, Any]]) -> None:
        check_tables(args.recipe, meta)

    @classmethod
    def build(cls, args: "Parent.Args", context: MetricContext) -> MetricFn:
        if args.recipe == "totto":
            from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

            tokenizer_13a = Tokenizer13a()

            def tokens(text: str) -> list[str]:
                return tokenizer_13a(text.strip().lower()).split()

            def texts(generation: str, refs: Sequence[str]) -> tuple[list[str], list[list[str]]]:
                refs = list(refs[:TOTTO_REFERENCES]) + [TOTTO_NULL] * (TOTTO_REFERENCES - len(refs))
                return tokens(generation.strip() or TOTTO_NULL), [tokens(r) for r in refs]

            def table(m: dict[str, Any]) -> ParentTable:
                return totto_table(m, tokens)
            table_smoothing = 0.0
        else:
            def texts(generation: str, refs: Sequence[str]) -> tuple[list[str], list[list[str]]]:
                return tokenize(generation), [tokenize(r) for r in refs]

            table, table_smoothing = words_table, args.smoothing

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample: dict[str, list[float]] = {cls.key(s): [] for s in cls.scores}
            for generation, refs, m in zip(generations, references, meta):
                sample_table = table(m)
                prediction, tokenised_refs = texts(generation, refs) if refs else ([], [])
                scored = (parent_scores(prediction, r, sample_table, args.lambda_weight, args.smoothing, args.max_order,
                                        table_smoothing) for r in tokenised_refs)
                best = max(scored, key=lambda s: s[2], default=(math.nan,) * 3)
                for s, value in zip(cls.scores, (best[2], best[0], best[1])):
                    per_sample[cls.key(s)].append(value)
            return MetricResult(per_sample, {k: nanmean(vs) for k, vs in per_sample.items()})

        return MetaChecked(compute, lambda meta: check_tables(args.recipe, meta))
