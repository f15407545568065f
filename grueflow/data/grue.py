"""GRUE task datapools (RL4LMs, ``rl4lms/data_pools/custom_text_generation_pools.py``), plus ``custom``.

Each loader reads a hub id with ``datasets.load_dataset`` or local files (``data_files``; DailyDialog
also its original text files under ``data_root``), then the same code turns rows into Samples.
Splitting, bad rows and the shared arguments are described in :mod:`grueflow.data.sources`.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Optional

from grueflow.data import DATAPOOLS
from grueflow.data.sample import SPLITS, Datapool
from grueflow.data.sources import (BadRowError, Row, SourceArgs, Unit, blank, build_datapool, group_units,
                                   load_units, optional_text, require_text, require_texts)
from grueflow.data.totto import (TableError, final_sentences, highlighted_indices, highlighted_subtable, linearise,
                                 linearise_full_table, parent_table)
from grueflow.io import DataError, MissingDataError, read_text, shown

# ---------------------------------------------------------------------------------------------
# CommonGen
# ---------------------------------------------------------------------------------------------

COMMONGEN_SCHEMAS = {"v1.1, the hub's": ("concepts", "target"), "v1.0, the original files'": ("concept_set", "scene")}
POS_SUFFIX = re.compile(r"_[A-Z]+$")


@DATAPOOLS.register("common_gen", "CommonGen: concepts -> a sentence using them (hub v1.1 or v1.0 files)")
class CommonGen:
    """Concepts -> a sentence using them.

    Reads the hub's v1.1 schema (``concepts``, ``target``: one row per target) and the original
    v1.0 files (``concept_set: "dog_N#run_V"``, ``scene``: every target on one line),
    where the POS suffixes are stripped into bare lemmas for the prompt. Rows are grouped by concept
    set before any split, so a set is never in two splits. The hub's test split has no targets
    (the leaderboard keeps them): evaluate on validation with ``source_splits: {test: validation}``.

    The prompt is RL4LMs' ``prefix + concept_separator_token.join(concepts) + concept_end_token``.
    ``sample_per``: ``concept_set`` (the default) makes one sample per concept set with every target as a
    reference; ``target`` makes one sample per target with that target as its only reference, as RL4LMs'
    ``CommonGen`` pool does (in every split, so its metrics see one reference each; ``n_<split>`` then
    counts those samples).

    meta: ``concepts`` (the lemmas, in prompt order), ``concept_set`` (v1.0: the first row's, as in the file;
    v1.1: the lemmas joined by ``#``). Rows of either version are grouped by their set in any order (the first row's
    order is the prompt's), and a blank v1.1 concept, which no sentence could cover, is refused naming the row.
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "common_gen"
        prefix: str = "generate a sentence with: "
        concept_separator_token: str = " "
        concept_end_token: str = ""
        sample_per: Literal["concept_set", "target"] = "concept_set"

        def __post_init__(self) -> None:
            super().__post_init__()
            if not self.concept_separator_token:
                raise ValueError("concept_separator_token must not be empty: the concepts would run together")

    @staticmethod
    def meta_keys(args: "CommonGen.Args") -> tuple[str, ...]:
        return ("concepts", "concept_set")

    @staticmethod
    def build(args: "CommonGen.Args") -> Datapool:
        sources = load_units(args, COMMONGEN_SCHEMAS, "common_gen")
        grouped = {name: group_units(units, concept_set, merge_scenes)
                   for name, units in sources.items()}
        return build_datapool(grouped, lambda unit: concepts_rows(unit, args), args,
                              unlabelled=lambda train: [r for s in train for r in s.references])


def concept_set(unit: Unit) -> str:
    """A row's concepts sorted and joined by ``#``: a v1.0 row's ``concept_set`` concepts as written (with their POS
    suffixes, so ``style_V`` and ``style_N`` stay two sets), a v1.1 row's ``concepts``. Rows that write one set in
    another order are one set (one sample, never in two splits)."""
    if "concept_set" in unit.row:
        raw_set = require_text(unit.row["concept_set"], "concept_set", unit.origin)
        return "#".join(sorted(concept for concept in raw_set.split("#") if concept))
    return "#".join(sorted(row_concepts(unit)))


def row_concepts(unit: Unit) -> list[str]:
    """A v1.1 row's concepts in the row's order; a BadRowError naming the row when they are not a list of texts or
    one is blank (no sentence could cover it)."""
    concepts = require_texts(unit.row["concepts"], "concepts", unit.origin)
    for concept in concepts:
        if blank(concept):
            raise BadRowError(f"{unit.origin}: concepts holds {shown(concept)} (blank), not a concept; remove it or "
                              f"write the concept")
    return concepts


def lemmas(raw_set: str) -> list[str]:
    """``"dog_N#run_V"`` -> ``["dog", "run"]``."""
    return [POS_SUFFIX.sub("", concept) for concept in raw_set.split("#") if concept]


def merge_scenes(units: list[Unit]) -> dict[str, Any]:
    """One concept set's rows as ``{concept_set, concepts, targets}``: the first row's set and concepts, in its
    order."""
    first = units[0].row
    if "concept_set" in first:
        targets = [t for u in units for t in require_texts(u.row["scene"], "scene", u.origin)]
        return {"concept_set": first["concept_set"], "concepts": lemmas(first["concept_set"]), "targets": targets}
    concepts = row_concepts(units[0])
    return {"concept_set": "#".join(concepts), "concepts": concepts,
            "targets": [optional_text(u.row["target"], "target", u.origin) for u in units]}


def concepts_rows(unit: Unit, args: CommonGen.Args) -> list[Row]:
    """A concept set's row (every target a reference), or one row per target under ``sample_per: target``."""
    concepts = unit.row["concepts"]
    if not concepts:
        raise BadRowError(f"{unit.origin}: empty concept set")
    prompt = args.prefix + args.concept_separator_token.join(concepts) + args.concept_end_token
    meta = {"concepts": concepts, "concept_set": unit.row["concept_set"]}
    targets = tuple(unit.row["targets"])
    if args.sample_per == "concept_set":
        return [Row(prompt, targets, meta, unit.origin)]
    return [Row(prompt, (target,), meta, f"{unit.origin} target {i}") for i, target in enumerate(targets)]


# ---------------------------------------------------------------------------------------------
# CNN/DailyMail
# ---------------------------------------------------------------------------------------------


@DATAPOOLS.register("cnn_dailymail", "CNN/DailyMail summarisation: article -> highlights (hub or local files)")
class CNNDailyMail:
    """Article -> highlights, as RL4LMs (``prefix`` "Summarize: " for T5; ``suffix`` "TL;DR:" for GPT-2).

    ``max_article_words`` keeps the article's first words (split on whitespace, where RL4LMs used
    NLTK's tokenizer) and ``max_article_chars`` its first characters, before the prefix and suffix
    are added. ``extra_references`` adds the rows' ``extra_references`` (SummEval's ten crowd
    summaries in the shared slice) after the highlights, each reference once.

    meta: ``source_id`` (the row's ``id``, when the data has one).
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "cnn_dailymail"
        name: Optional[str] = "3.0.0"
        prefix: str = "Summarize: "
        suffix: str = ""
        max_article_words: Optional[int] = None
        max_article_chars: Optional[int] = None
        extra_references: bool = False

        def __post_init__(self) -> None:
            super().__post_init__()
            for key in ("max_article_words", "max_article_chars"):
                if getattr(self, key) is not None and getattr(self, key) < 1:
                    raise ValueError(f"{key} must be >= 1 (or left out for the whole article), "
                                     f"got {getattr(self, key)}")

    @staticmethod
    def meta_keys(args: "CNNDailyMail.Args") -> tuple[str, ...]:
        return ("source_id",)

    @staticmethod
    def build(args: "CNNDailyMail.Args") -> Datapool:
        columns = ("article", "highlights") + (("extra_references",) if args.extra_references else ())
        sources = load_units(args, {"article and summary": columns}, "cnn_dailymail")
        return build_datapool(sources, lambda unit: [summary_row(unit, args)], args)


def truncate(text: str, max_words: Optional[int], max_chars: Optional[int]) -> str:
    """``text`` cut to its first ``max_words`` whitespace-separated words, then ``max_chars`` characters."""
    if max_words is not None:
        text = " ".join(text.split()[:max_words])
    if max_chars is not None:
        text = text[:max_chars].rstrip()
    return text


def summary_row(unit: Unit, args: CNNDailyMail.Args) -> Row:
    article = require_text(unit.row["article"], "article", unit.origin)
    article = truncate(article, args.max_article_words, args.max_article_chars)
    extra = (tuple(require_texts(unit.row["extra_references"] or [], "extra_references", unit.origin))
             if args.extra_references else ())
    highlights = optional_text(unit.row["highlights"], "highlights", unit.origin)
    references = tuple(dict.fromkeys((highlights,) + extra))  # SummEval's list repeats the highlights
    meta = {"source_id": unit.row["id"]} if "id" in unit.row else {}
    return Row(args.prefix + article + args.suffix, references, meta, unit.origin)


# ---------------------------------------------------------------------------------------------
# ToTTo
# ---------------------------------------------------------------------------------------------

TOTTO_COLUMNS = ("table", "highlighted_cells", "table_page_title", "table_section_title", "sentence_annotations")


@DATAPOOLS.register("totto", "ToTTo table-to-text: linearised highlighted subtable -> sentence (hub or official jsonl)")
class ToTTo:
    """The highlighted subtable, linearised with its heuristic headers (:mod:`grueflow.data.totto`) -> a sentence.

    ``titles``: ``with`` writes ``<page_title>`` and ``<section_title>`` before the table,
    ``without`` leaves them out, ``both`` writes the table without titles, a space, then with them
    (RL4LMs' prompt, which joined the two with no space). ``representation``: ``subtable`` writes the
    highlighted cells only; ``fulltable`` (RL4LMs' other choice) the whole table row by row, the
    highlighted cells marked (:func:`grueflow.data.totto.linearise_full_table`). References are the
    annotators' final sentences; the official test split has none (the leaderboard keeps them).

    meta: ``table`` (``[attribute, value]`` pairs for PARENT: the highlighted cells, then the
    titles), ``highlighted_cells``, ``raw_table`` (the rows of cells as in the data),
    ``page_title``, ``section_title``, ``section_text`` (``table_section_text``, which the official PARENT
    matches words against too; ``""`` when absent), ``source_id`` (``example_id``, when present).

    Each row's fields are checked (:mod:`grueflow.data.totto`): a highlighted cell that is not a ``[row, column]``
    pair of integers >= 0 inside the table, a span that is not an integer >= 1, a cell value or sentence that is not
    text, an ``is_header`` that is not a boolean is a bad row, named with its field (``skip_bad_rows`` drops it). A
    cell highlighted twice is written once, where it is first named.
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "totto"
        titles: Literal["with", "without", "both"] = "both"
        representation: Literal["subtable", "fulltable"] = "subtable"

    @staticmethod
    def meta_keys(args: "ToTTo.Args") -> tuple[str, ...]:
        return ("table", "highlighted_cells", "raw_table", "page_title", "section_title", "section_text", "source_id")

    @staticmethod
    def build(args: "ToTTo.Args") -> Datapool:
        sources = load_units(args, {"ToTTo": TOTTO_COLUMNS}, "totto")
        return build_datapool(sources, lambda unit: [table_row(unit, args)], args)


def table_row(unit: Unit, args: ToTTo.Args) -> Row:
    """The row's prompt, final sentences and PARENT table; a field of the wrong shape (:class:`TableError`: a cell,
    a highlighted index, a title, a sentence) is a BadRowError naming the row and the field."""
    row = unit.row
    if not row["highlighted_cells"]:
        raise BadRowError(f"{unit.origin}: no highlighted cells")
    try:
        return _table_row(row, unit.origin, args)
    except TableError as err:
        raise BadRowError(f"{unit.origin}: {err}") from None


def _table_row(row: dict[str, Any], origin: str, args: ToTTo.Args) -> Row:
    table, page, section = row["table"], row["table_page_title"], row["table_section_title"]
    subtable = highlighted_subtable(table, row["highlighted_cells"])  # checks the table and the cells first
    cells = highlighted_indices(table, row["highlighted_cells"])
    if args.representation == "fulltable":
        prompts = {"with": linearise_full_table(table, cells, page, section),
                   "without": linearise_full_table(table, cells, None, None)}
    else:
        prompts = {"with": linearise(subtable, page, section), "without": linearise(subtable, None, None)}
    prompt = prompts["without"] + " " + prompts["with"] if args.titles == "both" else prompts[args.titles]
    section_text = optional_text(row.get("table_section_text"), "table_section_text", origin)
    meta = {"table": parent_table(subtable, page, section), "highlighted_cells": cells, "raw_table": table,
            "page_title": page, "section_title": section, "section_text": section_text}
    if "example_id" in row:
        meta["source_id"] = row["example_id"]
    return Row(prompt, tuple(final_sentences(row["sentence_annotations"])), meta, origin)


# ---------------------------------------------------------------------------------------------
# NarrativeQA
# ---------------------------------------------------------------------------------------------


@DATAPOOLS.register("narrative_qa", "NarrativeQA (hub schema): question + story summary -> the answers")
class NarrativeQA:
    """Question and story summary -> answer, in the hub schema (``document.summary.text``,
    ``question.text``, ``answers[].text``); ``answers`` may also be a list of strings (or any shape of
    :func:`as_references`).

    The prompt is ``template`` filled with ``question`` and ``context`` (the summary); the default
    is UnifiedQA's ``question \\n context`` with a literal backslash-n, which RL4LMs read, and
    ``lowercase`` lower-cases prompts and answers as UnifiedQA did. A re-split cuts by story
    (``document.id``), so no story has questions in two splits.

    meta: ``document_id``.
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "narrativeqa"
        template: str = "{question} \\n {context}"
        lowercase: bool = True

        def __post_init__(self) -> None:
            super().__post_init__()
            try:
                filled = self.template.format(question="\0q", context="\0c")
            except (KeyError, IndexError, ValueError) as err:
                raise ValueError(f"template {self.template!r} does not format ({err}); its placeholders are "
                                 f"{{question}} and {{context}}") from None
            if "\0q" not in filled:
                raise ValueError(f"template {self.template!r} has no {{question}}")

    @staticmethod
    def meta_keys(args: "NarrativeQA.Args") -> tuple[str, ...]:
        return ("document_id",)

    @staticmethod
    def build(args: "NarrativeQA.Args") -> Datapool:
        sources = load_units(args, {"hub": ("document", "question", "answers")}, "narrative_qa")
        stories = {name: group_units(units, story_id, lambda us: {"questions": us}) for name, units in sources.items()}
        return build_datapool(stories, lambda unit: question_rows(unit, args), args)


def story_id(unit: Unit) -> str:
    document = unit.row["document"] or {}
    return str(document.get("id") or (document.get("summary") or {}).get("text") or unit.key)


def question_rows(story: Unit, args: NarrativeQA.Args) -> list[Row]:
    rows = []
    for unit in story.row["questions"]:
        document = unit.row["document"] or {}
        context = require_text((document.get("summary") or {}).get("text"), "document.summary.text", unit.origin)
        question = require_text((unit.row["question"] or {}).get("text"), "question.text", unit.origin)
        prompt = args.template.format(question=question, context=context)
        answers = as_references(unit.row["answers"], unit.origin, "answers", unit.builder)
        answers = tuple(" ".join(a.split()) for a in answers)
        if args.lowercase:
            prompt, answers = prompt.lower(), tuple(a.lower() for a in answers)
        rows.append(Row(prompt, answers, {"document_id": story_id(unit)}, unit.origin))
    return rows


# ---------------------------------------------------------------------------------------------
# Translation: IWSLT 2017 and the WMT pools
# ---------------------------------------------------------------------------------------------

LANGUAGES = {"en": "English", "de": "German", "fr": "French", "it": "Italian", "nl": "Dutch", "ro": "Romanian",
             "ar": "Arabic", "ja": "Japanese", "ko": "Korean", "zh": "Chinese", "cs": "Czech", "fi": "Finnish",
             "ru": "Russian", "tr": "Turkish"}
WMT16_PAIRS = ("cs-en", "de-en", "fi-en", "ro-en", "ru-en", "tr-en")  # the hub's wmt16 configurations


@dataclass(frozen=True)
class TranslationArgs(SourceArgs):
    """``translation[source_language]`` -> ``translation[target_language]`` (the hub schema), the prompt
    ``prefix + source + suffix`` (RL4LMs' ``prompt_prefix`` / ``prompt_suffix``).

    ``prefix`` None writes T5's ``translate English to German: `` for the two languages; give ``""`` for none.
    """

    source_language: str = "en"
    target_language: str = "de"
    prefix: Optional[str] = None
    suffix: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source_language == self.target_language:
            raise ValueError(f"source_language and target_language are both {self.source_language!r}")
        unnamed = [code for code in (self.source_language, self.target_language) if code not in LANGUAGES]
        if self.prefix is None and unnamed:
            raise ValueError(f"no name for language {unnamed[0]!r} to write the prefix (known: "
                             f"{', '.join(LANGUAGES)}); give prefix")

    @property
    def prompt_prefix(self) -> str:
        if self.prefix is not None:
            return self.prefix
        return f"translate {LANGUAGES[self.source_language]} to {LANGUAGES[self.target_language]}: "


def build_translation(args: TranslationArgs, loader: str, sources: Optional[dict[str, list[Unit]]] = None) -> Datapool:
    """The ``loader`` datapool from ``args``' source splits (or the ``sources`` given)."""
    if sources is None:
        sources = load_units(args, {"hub": ("translation",)}, loader)
    return build_datapool(sources, lambda unit: [translation_row(unit, args)], args)


@DATAPOOLS.register("iwslt2017", "IWSLT 2017 translation (en -> de by default): source sentence -> its translation")
class IWSLT2017:
    """IWSLT 2017 (:class:`TranslationArgs`). The hub's ``iwslt2017`` needs the configuration ``name`` of the
    pair (``iwslt2017-en-de``).

    meta: none.
    """

    @dataclass(frozen=True)
    class Args(TranslationArgs):
        path: str = "iwslt2017"
        name: Optional[str] = "iwslt2017-en-de"

    @staticmethod
    def meta_keys(args: "IWSLT2017.Args") -> tuple[str, ...]:
        return ()

    @staticmethod
    def build(args: "IWSLT2017.Args") -> Datapool:
        return build_translation(args, "iwslt2017")


@DATAPOOLS.register("wmt16", "WMT16 news translation (en -> de by default; RL4LMs' wmt16 pool)")
class WMT16:
    """WMT16 (:class:`TranslationArgs`), RL4LMs' ``WMT`` pool with ``wmt_id: wmt16``. ``name`` None takes the
    hub configuration of the two languages, in whichever order the hub names it (``de-en`` for en -> de), as
    RL4LMs tries ``<source>-<target>`` and then the reverse.

    meta: none.
    """

    @dataclass(frozen=True)
    class Args(TranslationArgs):
        path: str = "wmt16"

        def __post_init__(self) -> None:
            super().__post_init__()
            local = bool(self.data_files) or Path(self.path).is_dir()  # no hub configuration to name
            if self.name is None and not local and wmt16_pair(self) is None:
                raise ValueError(f"wmt16 has no {self.source_language}-{self.target_language} pair in either order; "
                                 f"its pairs: {', '.join(WMT16_PAIRS)} (or give name)")

    @staticmethod
    def meta_keys(args: "WMT16.Args") -> tuple[str, ...]:
        return ()

    @staticmethod
    def build(args: "WMT16.Args") -> Datapool:
        return build_translation(replace(args, name=args.name or wmt16_pair(args)), "wmt16")


def wmt16_pair(args: TranslationArgs) -> Optional[str]:
    """The hub's wmt16 configuration of the two languages, either order, or None."""
    pairs = (f"{args.source_language}-{args.target_language}", f"{args.target_language}-{args.source_language}")
    return next((pair for pair in pairs if pair in WMT16_PAIRS), None)


@DATAPOOLS.register("wmt14_processed_en_de", "WMT14 en -> de as pre-processed by stas (RL4LMs' wmt14_processed_en_de)")
class WMT14PreprocessedEnDe:
    """RL4LMs' ``wmt14_processed_en_de``: the hub's ``stas/wmt14-en-de-pre-processed``, en -> de
    (:class:`TranslationArgs`).

    meta: none.
    """

    @dataclass(frozen=True)
    class Args(TranslationArgs):
        path: str = "stas/wmt14-en-de-pre-processed"

    @staticmethod
    def meta_keys(args: "WMT14PreprocessedEnDe.Args") -> tuple[str, ...]:
        return ()

    @staticmethod
    def build(args: "WMT14PreprocessedEnDe.Args") -> Datapool:
        return build_translation(args, "wmt14_processed_en_de")


@DATAPOOLS.register("wmt16newsonly", "news-commentary train, WMT16 val/test, en -> de (RL4LMs' wmt16newsonly)")
class WMT16NewsOnly:
    """RL4LMs' ``wmt16newsonly``: train on ``train_path`` (the hub's ``news_commentary``, ``train_name``
    ``de-en``), validate and test on ``path`` (``wmt16``, ``de-en``), en -> de (:class:`TranslationArgs`).
    With ``data_files`` every split comes from those files.

    meta: none.
    """

    @dataclass(frozen=True)
    class Args(TranslationArgs):
        path: str = "wmt16"
        name: Optional[str] = "de-en"
        train_path: str = "news_commentary"
        train_name: Optional[str] = "de-en"

        def __post_init__(self) -> None:
            super().__post_init__()
            if not self.data_files and self.train_path.strip() in ("", "json", "csv", "parquet"):  # needs files
                raise ValueError(f"train_path {self.train_path!r} names no dataset to train on: give a hub dataset id "
                                 f"(default 'news_commentary') or a local folder, or data_files for every split")

    @staticmethod
    def meta_keys(args: "WMT16NewsOnly.Args") -> tuple[str, ...]:
        return ()

    @staticmethod
    def build(args: "WMT16NewsOnly.Args") -> Datapool:
        if args.data_files:
            return build_translation(args, "wmt16newsonly")
        schema = {"hub": ("translation",)}
        train = load_units(replace(args, path=args.train_path, name=args.train_name), schema, "wmt16newsonly",
                           only=("train",))
        rest = load_units(args, schema, "wmt16newsonly", only=("validation", "val", "dev", "test"))
        if "train" not in train:
            raise DataError(f"train_path {args.train_path!r} has no train split, which wmt16newsonly trains on")
        return build_translation(args, "wmt16newsonly", {"train": train["train"], **rest})


def translation_row(unit: Unit, args: TranslationArgs) -> Row:
    pair = unit.row["translation"] or {}
    if not isinstance(pair, dict):
        raise BadRowError(f"{unit.origin}: translation is {pair!r:.60} ({type(pair).__name__}), not a mapping of "
                          f"language code to text")
    for key in ("source_language", "target_language"):
        if getattr(args, key) not in pair:
            raise DataError(f"{unit.origin}: the translation has the languages {sorted(pair)}; "
                            f"{key} {getattr(args, key)!r} is not one of them")
    source = require_text(pair[args.source_language], f"{args.source_language} text", unit.origin)
    target = optional_text(pair[args.target_language], f"{args.target_language} text", unit.origin)
    return Row(args.prompt_prefix + source + args.suffix, (target,), {}, unit.origin)


# ---------------------------------------------------------------------------------------------
# CRD3
# ---------------------------------------------------------------------------------------------

CRD3_SPLIT_FILES = {"train": "train_files", "val": "val_files", "test": "test_files"}


@DATAPOOLS.register("crd3", "CRD3 (Critical Role) dialogue: the last turns -> the next speaker's turn (RL4LMs' crd3)")
class CRD3:
    """RL4LMs' ``CRD3DialogueGeneration``: every turn after the second of a Critical Role episode becomes a
    sample, its prompt the last ``max_context_size`` turns (``NAME: utterances``) joined by newlines, then a
    newline and the turn's speaker (``\\nNAME: ``), its reference the turn's utterances joined by spaces.

    ``data_root`` is the CRD3 repository (github.com/RevanthRameshkumar/CRD3, the folder ``CRD3-master``
    of its zip): ``data/aligned data/{train,val,test}_files`` list the episodes of each split and
    ``data/cleaned data/<episode>.json`` hold their ``TURNS`` (``NAMES``, ``UTTERANCES``); a turn's speaker
    is its first name, as RL4LMs. A re-split cuts by episode.

    meta: ``episode``, ``turn`` (0-based index of the target turn), ``speaker``.
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "crd3"
        data_root: Optional[str] = None
        max_context_size: int = 5

        def __post_init__(self) -> None:
            if self.data_root is None:
                raise ValueError("crd3 reads the CRD3 repository's files: give data_root, the CRD3-master folder "
                                 "of github.com/RevanthRameshkumar/CRD3 (its data/aligned data and data/cleaned "
                                 "data folders)")
            super().__post_init__()
            if self.data_files is not None:
                raise ValueError("crd3 reads data_root (the CRD3 repository), not data_files")
            if self.max_context_size < 1:
                raise ValueError(f"max_context_size must be >= 1, got {self.max_context_size}")

    @staticmethod
    def meta_keys(args: "CRD3.Args") -> tuple[str, ...]:
        return ("episode", "turn", "speaker")

    @staticmethod
    def build(args: "CRD3.Args") -> Datapool:
        sources = read_crd3(Path(args.data_root))
        if args.split_fractions is None and args.split_counts is None:
            wanted = {split: (args.source_splits or {}).get(split, split) for split in SPLITS}
            missing = sorted({CRD3_SPLIT_FILES.get(name, name) for name in wanted.values() if name not in sources})
            if missing:
                resplit = (", or cut the episodes there are with split_fractions (or split_counts) and seed"
                           if len(sources) == 1 else "")  # a re-split takes one source split's episodes
                raise MissingDataError(
                    f"data_root {args.data_root}: data/aligned data has no {', '.join(missing)}; give each split's "
                    f"episode list, or feed a split from another with source_splits (e.g. {{val: train}}){resplit}")
        return build_datapool(sources, lambda unit: episode_rows(unit, args.max_context_size), args)


def read_crd3(root: Path) -> dict[str, list[Unit]]:
    """The CRD3 splits under ``root``: one Unit per episode, ``{episode, turns: [(name, text), ...]}``."""
    if not root.is_dir():
        raise MissingDataError(f"data_root {root} is not a folder")
    lists, cleaned = root / "data" / "aligned data", root / "data" / "cleaned data"
    found = {split: lists / name for split, name in CRD3_SPLIT_FILES.items() if (lists / name).is_file()}
    if not found:
        raise MissingDataError(f"data_root {root} has no CRD3 episode lists: expected {lists}/"
                               f"{{{','.join(CRD3_SPLIT_FILES.values())}}} (the CRD3 repository's layout)")
    sources = {}
    for split, listing in found.items():
        units = []
        for i, episode in enumerate(line.strip() for line in read_text(listing).splitlines() if line.strip()):
            path = cleaned / f"{episode}.json"
            if not path.is_file():
                raise MissingDataError(f"{listing} names episode {episode}, but {path} does not exist")
            try:
                turns = json.loads(read_text(path))["TURNS"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise DataError(f"{path}: not a CRD3 episode (a JSON object with TURNS): {err}") from None
            units.append(Unit({"episode": episode, "turns": turns}, str(path), f"{split}-{i}"))
        sources[split] = units
    return sources


def episode_rows(unit: Unit, max_context_size: int) -> list[Row]:
    """One Row per turn with at least two turns before it (RL4LMs' ``len(contexts) > 1``). A malformed turn is a
    Row with its problem (refused, or dropped alone under ``skip_bad_rows``) and stays out of later contexts."""
    turns = unit.row["turns"]
    if not isinstance(turns, list):
        raise DataError(f"{unit.origin}: TURNS is {turns!r:.60} ({type(turns).__name__}); a CRD3 episode's TURNS is a "
                        f"list of turns, each with NAMES and UTTERANCES")
    rows, contexts = [], []
    for t, turn in enumerate(turns):
        origin = f"{unit.origin} turn {t + 1}"
        names, utterances = (turn.get("NAMES"), turn.get("UTTERANCES")) if isinstance(turn, dict) else (None, None)
        try:
            if not isinstance(names, list) or not names or not isinstance(utterances, list):
                raise BadRowError(f"a turn needs NAMES (a non-empty list) and UTTERANCES (a list); got {turn!r:.80}")
            name = require_text(names[0], "NAMES[0]", origin)
            text = " ".join(require_texts(utterances, "UTTERANCES", origin))
        except BadRowError as err:
            rows.append(Row("", (), {}, origin, problem=str(err).removeprefix(f"{origin}: ")))
            continue
        if len(contexts) > 1:
            prompt = "\n".join(contexts[-max_context_size:]) + "\n" + name + ": "
            rows.append(Row(prompt, (text,), {"episode": unit.row["episode"], "turn": t, "speaker": name}, origin))
        contexts.append(f"{name}: {text}")
    return rows


# ---------------------------------------------------------------------------------------------
# DailyDialog
# ---------------------------------------------------------------------------------------------

ACTS = {1: "inform", 2: "question", 3: "directive", 4: "commissive"}
EMOTIONS = ("no emotion", "anger", "disgust", "fear", "happiness", "sadness", "surprise")
DIALOGUE_SPLITS = ("train", "validation", "test")


@DATAPOOLS.register("daily_dialog", "DailyDialog: the last turns -> the next turn, with its act and emotion")
class DailyDialog:
    """The last ``context_turns`` turns joined by `` <EOU> `` and ended by it -> the next turn.

    Reads the hub schema (``dialog``, ``act``, ``emotion``: one list entry per turn) or, with
    ``data_root``, the original files: per split, ``dialogues_<split>.txt`` (turns split by
    ``__eou__``) with ``dialogues_act_<split>.txt`` and ``dialogues_emotion_<split>.txt``, in
    ``data_root/<split>/`` or ``data_root/``; a split folder may name them without the suffix
    (``validation/dialogues.txt``). A turn becomes a sample once it has ``min_context_turns``
    turns before it; the default (None) is ``context_turns``, as RL4LMs. References are the bare
    turn (RL4LMs appended ``<EOU>``). A re-split cuts by dialogue.

    meta: ``intent`` (the classifier label index the ``intent_accuracy`` metric reads: the
    DailyDialog act id minus 1, 0 inform .. 3 commissive, as RL4LMs), ``intent_label``,
    ``emotion`` (0 no emotion .. 6 surprise), ``emotion_label``, ``dialogue_id``
    (``<source split>-<index>``), ``turn`` (0-based index of the target turn).
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = "daily_dialog"
        data_root: Optional[str] = None
        context_turns: int = 5
        min_context_turns: Optional[int] = None
        eou: str = "<EOU>"

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.data_root is not None and self.data_files is not None:
                raise ValueError("give data_root (the original text files) or data_files (hub-schema files), not both")
            if self.context_turns < 1 or (self.min_context_turns is not None and self.min_context_turns < 1):
                raise ValueError(f"context_turns and min_context_turns must be >= 1, got {self.context_turns} and "
                                 f"{self.min_context_turns}")

        def rows_give_samples_when(self) -> str:
            first = self.context_turns if self.min_context_turns is None else self.min_context_turns
            setting = ("min_context_turns" if self.min_context_turns is not None else
                       "context_turns, the default of min_context_turns")
            return (f"a dialogue gives a sample for each turn after its first {first} ({setting} = {first}): lower "
                    f"it, or give longer dialogues")

    @staticmethod
    def meta_keys(args: "DailyDialog.Args") -> tuple[str, ...]:
        return ("intent", "intent_label", "emotion", "emotion_label", "dialogue_id", "turn")

    @staticmethod
    def build(args: "DailyDialog.Args") -> Datapool:
        if args.data_root is not None:
            sources = read_dialogue_folder(Path(args.data_root))
        else:
            sources = load_units(args, {"hub": ("dialog", "act", "emotion")}, "daily_dialog")
        return build_datapool(sources, lambda unit: dialogue_rows(unit, args), args)


def _labels(value: Any, what: str, origin: str) -> list[int]:
    """A dialogue's per-turn labels: a list of integers, or a BadRowError naming the row."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise BadRowError(f"{origin}: {what} is {value!r:.60}, not a list of integers (one per turn)")
    return list(value)


def dialogue_rows(unit: Unit, args: DailyDialog.Args) -> list[Row]:
    """One Row per turn that has enough turns before it."""
    turns = [" ".join(t.split()) for t in require_texts(unit.row["dialog"], "dialog", unit.origin)]
    acts, emotions = (list(_labels(unit.row[key], key, unit.origin)) for key in ("act", "emotion"))
    if not len(turns) == len(acts) == len(emotions):
        raise BadRowError(f"{unit.origin}: {len(turns)} turns but {len(acts)} acts and {len(emotions)} emotions")
    rows = []
    first = args.context_turns if args.min_context_turns is None else args.min_context_turns
    for t in range(first, len(turns)):
        origin = f"{unit.origin} turn {t + 1}"
        if acts[t] not in ACTS or not 0 <= emotions[t] < len(EMOTIONS):
            raise BadRowError(f"{origin}: act {acts[t]} / emotion {emotions[t]} outside 1-4 / 0-6")
        prompt = f" {args.eou} ".join(turns[max(0, t - args.context_turns):t]) + f" {args.eou}"
        meta = {"intent": acts[t] - 1, "intent_label": ACTS[acts[t]], "emotion": emotions[t],
                "emotion_label": EMOTIONS[emotions[t]], "dialogue_id": unit.key, "turn": t}
        rows.append(Row(prompt, (turns[t],), meta, origin))
    return rows


def read_dialogue_folder(root: Path) -> dict[str, list[Unit]]:
    """The DailyDialog splits found under ``root`` (original text files), as hub-schema Units."""
    if not root.is_dir():
        raise MissingDataError(f"data_root {root} is not a folder")
    found = {split: files for split in DIALOGUE_SPLITS if (files := dialogue_files(root, split))}
    if not found and (root / "dialogues.txt").is_file():
        found = {root.name: dialogue_files(root, root.name)}
    if not found:
        raise MissingDataError(
            f"data_root {root} has no DailyDialog files: expected <split>/dialogues_<split>.txt (the original "
            f"layout, split one of {', '.join(DIALOGUE_SPLITS)}), <split>/dialogues.txt, dialogues_<split>.txt, or "
            f"dialogues.txt, each with its dialogues_act and dialogues_emotion files beside it")
    return {split: read_dialogues(*files, split) for split, files in found.items()}


def dialogue_files(root: Path, split: str) -> Optional[tuple[Path, Path, Path]]:
    """``(dialogues, acts, emotions)`` of ``split`` under ``root``, or None when its dialogues file is absent."""
    candidates = [(root / split, f"_{split}"), (root / split, ""), (root, f"_{split}")]
    if root.name == split:
        candidates.append((root, ""))
    for folder, suffix in candidates:
        text = folder / f"dialogues{suffix}.txt"
        if text.is_file():
            labels = (folder / f"dialogues_act{suffix}.txt", folder / f"dialogues_emotion{suffix}.txt")
            missing = [str(p) for p in labels if not p.is_file()]
            if missing:
                raise MissingDataError(f"{text} has no {' and '.join(missing)} beside it; DailyDialog needs the "
                                       f"act and emotion files aligned with the dialogues")
            return text, labels[0], labels[1]
    return None


def read_dialogues(text: Path, acts: Path, emotions: Path, split: str) -> list[Unit]:
    """One Unit a dialogue: ``{dialog, act, emotion}`` from three line-aligned files."""
    files = [text, acts, emotions]
    lines = [[(n, line) for n, line in enumerate(read_text(p).splitlines(), 1) if line.strip()] for p in files]
    if len({len(ls) for ls in lines}) != 1:
        raise DataError(f"{', '.join(f'{p} has {len(ls)} lines' for p, ls in zip(files, lines))}; they must align")
    units = []
    for i, ((_, dialogue), act, emotion) in enumerate(zip(*lines)):
        turns = [t.strip() for t in dialogue.split("__eou__")]
        row = {"dialog": turns[:-1] if turns and not turns[-1] else turns,
               "act": _line_labels(act, acts, "act"), "emotion": _line_labels(emotion, emotions, "emotion")}
        units.append(Unit(row, f"{text} line {i + 1}", f"{split}-{i}"))
    return units


def _line_labels(numbered: tuple[int, str], path: Path, what: str) -> list[int]:
    """The integer labels of one line (``(line number, text)``) of a DailyDialog act or emotion file; a DataError
    naming the file, line and value for one that is not an integer."""
    number, line = numbered
    labels = []
    for label in line.split():
        try:
            labels.append(int(label))
        except ValueError:
            raise DataError(f"{path} line {number}: {what} {label!r} is not an integer; each line of a DailyDialog "
                            f"{what} file holds one integer label a turn, separated by spaces") from None
    return labels


# ---------------------------------------------------------------------------------------------
# Custom files
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fields:
    """Which columns hold the prompt, the references (a string or a list of strings) and the meta values."""

    prompt: str = "prompt"
    references: str = "references"
    meta: tuple[str, ...] = ()


@DATAPOOLS.register("custom", "any JSONL/CSV (or hub dataset) with a field mapping to prompt, references and meta")
class Custom:
    """``prefix + row[fields.prompt] + suffix`` -> ``row[fields.references]`` (a string or a list).

    ``path`` empty reads ``data_files`` by their extension (``.jsonl``/``.json``, ``.csv``,
    ``.parquet``). meta: the columns listed in ``fields.meta``, under their own names (:func:`meta_value`). A re-split
    (``split_fractions`` / ``split_counts``) cuts by prompt, as every loader's does
    (:func:`grueflow.data.sources.prompt_groups`): rows that share a prompt (one reference per row) stay in one split,
    each its own sample, so a test prompt is never trained on.
    """

    @dataclass(frozen=True)
    class Args(SourceArgs):
        path: str = ""
        fields: Fields = field(default_factory=Fields)
        prefix: str = ""
        suffix: str = ""

    @staticmethod
    def meta_keys(args: "Custom.Args") -> tuple[str, ...]:
        return args.fields.meta

    @staticmethod
    def build(args: "Custom.Args") -> Datapool:
        columns = (args.fields.prompt, args.fields.references, *args.fields.meta)
        sources = load_units(args, {"the fields mapping": columns}, "custom")
        return build_datapool(sources, lambda unit: [custom_row(unit, args)], args)


REFERENCE_SHAPES = ('a string, a list of strings, {"text": [strings]} (SQuAD\'s answers) or a list of '
                    '{"text": string}')


def _spelled_shape(text: str) -> Optional[str]:
    """The shape a text value spells when it is what a list, set or mapping column becomes as text (pandas' CSV
    writer, ``df.astype(str)``, a CSV-to-Parquet conversion), else None.

    Only a cell that parses (as a Python literal or JSON) to a list, tuple, set or non-empty mapping counts: prose in
    brackets or braces (``[citation needed]``, ``{name} is here``) and ``{}`` stay text, and so does a list, tuple or
    set of numbers alone (``[0, 1]``, ``(2, 3)``, ``{1, 2}``: an interval, a pair, a set of numbers as one answer), one
    holding an ellipsis (``[...]``, ``{...}``: an elision, which no data column holds), and an empty one written
    otherwise than ``[]`` or ``()`` as ``str()`` and JSON write it (``( )``, ``[ ]``: an emoticon, a checkbox).
    ``'a {"text": ...} mapping'``: a mapping with a ``text`` key (SQuAD's ``{'text': ['4'], 'answer_start': [0]}``);
    ``"a mapping"``: any other non-empty mapping (TriviaQA's ``{'aliases': [...], 'value': '4'}``);
    ``'a list of {"text": ...} mappings'``: a non-empty list or tuple of ``{"text": ...}`` mappings; ``"a set"``,
    ``"a list"``: any other set, list or tuple (``['a', 'b']``, ``[]``, ``['four', 4]``, ``[None]``,
    ``[{'label': 1}]``). JSON lines read none of these shapes as one text either (a list as its items, the rest
    refused), so the formats of one dataset agree."""
    text = text.strip()
    if (text[:1], text[-1:]) not in (("[", "]"), ("(", ")"), ("{", "}")):
        return None
    value = _literal(text)
    if _holds_ellipsis(value) or (isinstance(value, (list, tuple)) and not value and text not in ("[]", "()")):
        return None
    if isinstance(value, dict):
        return ('a {"text": ...} mapping' if "text" in value else "a mapping") if value else None
    if not isinstance(value, (list, tuple, set)):
        return None
    if value and not isinstance(value, set) and all(isinstance(item, dict) and "text" in item for item in value):
        return 'a list of {"text": ...} mappings'
    leaves = [leaf for item in value for leaf in (item if isinstance(item, (list, tuple)) else (item,))]
    if leaves and all(isinstance(leaf, (int, float)) and not isinstance(leaf, bool) for leaf in leaves):
        return None
    return "a set" if isinstance(value, set) else "a list"


def _holds_ellipsis(value: Any) -> bool:
    """Whether a parsed literal holds ``...`` at any depth of its lists, tuples, sets and mappings (keys and values);
    walked without recursion, as JSON nests deeper than Python's stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is Ellipsis:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    return False


def _literal(text: str) -> Any:
    """``text`` read as a Python literal, else as JSON, else None."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def as_references(value: Any, origin: str = "", column: str = "references", builder: str = "") -> tuple[str, ...]:
    """A reference column's value as strings, from the shapes Hugging Face datasets use: a string is one
    reference; a list holds several (strings, ``{"text": ...}`` items, or lists of strings, one level deep);
    a mapping's ``text`` (SQuAD's ``answers: {"text": [...], "answer_start": [...]}``) holds them; None is
    none; a number is its text (a JSON column the loader typed as numbers). Anything else (NaN, a mapping without
    ``text``, deeper nesting, a boolean) is a BadRowError naming the row, the ``column`` and the shapes, and so is a
    string that spells a list, a set or a mapping (``"['4', 'four']"``, ``'["4", "four"]'``,
    ``"{'text': ['4'], 'answer_start': [0]}"``: :func:`_spelled_shape`), which would otherwise be scored as one
    reference. Such a string is what a list column becomes in a CSV cell, and in a Parquet or JSON string column
    after ``df.astype(str)`` or a conversion from CSV; ``builder`` (``datasets``' ``csv``, ``json``, ``parquet``,
    ... as :class:`~grueflow.data.sources.Unit` gives it) picks the fix the error gives. Prose in brackets or braces
    stays text. Where such a string is itself the reference (a code or JSON target), JSON and Parquet hold it as a
    list of one text: the items of a list are texts as they are. Values are shown cut (:func:`grueflow.io.shown`)
    in the errors."""
    if value is None:
        return ()
    if isinstance(value, str):
        shape = _spelled_shape(value)
        if shape:
            raise BadRowError(spelled_message(value, shape, origin, column, builder))
        return (value,)
    if isinstance(value, float) and not math.isfinite(value):
        raise BadRowError(f"{origin}: a reference is {shown(value)}, not text; write the reference as a string")
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # a JSON column typed as numbers
        return (str(value),)
    if isinstance(value, dict) and "text" in value:
        return as_references(value["text"], origin, column, builder)
    if isinstance(value, (list, tuple)):
        out: list[str] = []
        for item in value:
            if item is None:
                continue
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, float) and not math.isfinite(item):
                raise BadRowError(f"{origin}: a reference is {shown(item)}, not text; write the reference as a string")
            elif isinstance(item, (int, float)) and not isinstance(item, bool):
                out.append(str(item))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                out.append(item["text"])
            elif isinstance(item, (list, tuple)) and all(isinstance(v, str) for v in item):
                out.extend(item)
            else:
                raise BadRowError(f"{origin}: a reference {shown(item)} ({type(item).__name__}) is not text; {column} "
                                  f"are {REFERENCE_SHAPES}")
        return tuple(out)
    raise BadRowError(f"{origin}: {column} {shown(value)} ({type(value).__name__}) are not text; {column} are "
                      f"{REFERENCE_SHAPES}")


def spelled_message(value: str, shape: str, origin: str, column: str, builder: str) -> str:
    """The error for a ``column`` text that spells ``shape`` (:func:`_spelled_shape`), with the fix for the file
    type ``builder`` read: one reference per cell for a CSV file; a list of texts for JSON, Parquet and the rest,
    or a list of one text where the spelling is itself the reference."""
    kind = "mapping" if shape.endswith(" mapping") else "set" if shape == "a set" else "list"
    if builder == "csv":
        return (f"{origin}: {column} {shown(value)} is {shape} written as one text (pandas writes a {kind} column so "
                f"to CSV), which would be scored as one reference; write the rows as JSON lines with a list of texts "
                f"(or Parquet), or one reference per cell")
    if builder == "json":
        store = f'write {column} as a JSON list of texts ("{column}": ["a", "b"]), not as one string'
    else:
        store = (f"store {column} as a list-of-strings column (pyarrow list<string>; from pandas, a column of Python "
                 f"lists, not .astype(str))")
    return (f"{origin}: {column} {shown(value)} is {shape} written as one text (what str() or a CSV conversion makes "
            f"of a {kind} column), which would be scored as one reference; {store}; where this text is itself the one "
            f"reference (a code or JSON target), give it as a list of one text")


def meta_value(value: Any, column: str, origin: str) -> Any:
    """A ``fields.meta`` column's ``value`` as the datapool file will hold it: NaN (what pandas writes for a missing
    value, and which JSON has no word for) is None, as a missing value is; a value JSON cannot hold (a date, a
    decimal, bytes, infinity, a lone surrogate) is a DataError naming the row (``origin``), the ``column``, the
    value's type and the fix. The same column type fails on every row: a DataError, not a bad row to skip."""
    if isinstance(value, float) and math.isnan(value):
        return None
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        iso = f", e.g. {value.isoformat()!r}" if callable(getattr(value, "isoformat", None)) else ""
        raise DataError(f"{origin}: the meta column {shown(column)} holds {shown(value)} ({type(value).__name__}), "
                        f"which a JSON datapool file cannot hold; store the column as text or numbers (a date as ISO "
                        f"text{iso}), or leave it out of fields.meta") from None
    return value


def custom_row(unit: Unit, args: Custom.Args) -> Row:
    text = require_text(unit.row[args.fields.prompt], f"prompt ({args.fields.prompt})", unit.origin)
    meta = {key: meta_value(unit.row[key], key, unit.origin) for key in args.fields.meta}
    references = as_references(unit.row[args.fields.references], unit.origin, args.fields.references, unit.builder)
    return Row(args.prefix + text + args.suffix, references, meta, unit.origin)
