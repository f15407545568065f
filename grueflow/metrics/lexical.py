"""Lexical overlap with the references: ROUGE (rouge-score; py-rouge for RL4LMs' ROUGE-L max); BLEU, chrF, chrF++ and
TER (sacrebleu)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, Sequence

from grueflow.metrics import (METRICS, MetaChecked, Metric, MetricContext, MetricFn, MetricResult, SacrebleuTokenizer,
                              nanmean, require)
from grueflow.metrics.table import TOTTO_NULL, TOTTO_REFERENCES

log = logging.getLogger(__name__)

ROUGE_TOKEN_CHAR = re.compile(r"[a-z0-9]")


def rouge_blind(references: Sequence[str]) -> bool:
    """Whether ROUGE cannot score a sample against ``references``: some are text (not blank) and none has a token
    for ROUGE's tokenizer. rouge-score (``tokenize.tokenize``, after Lin's original ROUGE) and py-rouge
    (``REMOVE_CHAR_PATTERN``) lower-case the text and keep only ``[a-z0-9]``, so Chinese, Japanese or Greek
    references have no token and any generation, even the reference itself, would score 0. The tokenizer is kept,
    for RL4LMs' and Hugging Face ``evaluate``'s numbers; such a sample is scored NaN instead. A reference without
    tokens can only add a 0 to the maximum over references, so the references are blind only when none of them
    has a token. The generation's side is never blind: a generation without tokens (punctuation, emoji, another
    script) against references with tokens matches none of them, and scores 0, as rouge-score gives an empty
    prediction."""

    def no_tokens(text: str) -> bool:
        return ROUGE_TOKEN_CHAR.search(text.lower()) is None

    return any(r.strip() for r in references) and all(no_tokens(r) for r in references)


def rouge_unscored(references: Sequence[str]) -> Optional[str]:
    """Why ROUGE scores NaN a sample with ``references`` whatever the generation, or None
    (:attr:`grueflow.metrics.MetaChecked.unscored`)."""
    if not references:
        return "it has no references"
    if rouge_blind(references):
        return "its references have no [a-z0-9] token, the only characters ROUGE's tokenizer keeps"
    return None


def warn_blind(metric_id: str, blind: int, n: int) -> None:
    """One warning line when ``blind`` of the ``n`` samples had references without a ROUGE token
    (:func:`rouge_blind`)."""
    if blind:
        log.warning("metric %r: %d of %d samples have references with no [a-z0-9] token, the only characters "
                    "ROUGE's tokenizer keeps (text in another script); they score NaN and are left out of the corpus "
                    "score", metric_id, blind, n)


@METRICS.register("rouge", "ROUGE-1/2/L/Lsum F1 (rouge-score, Porter stemming), best over references")
class Rouge(Metric):
    """Per sample, each score's best F1 over the references; the corpus score is the mean over the samples scored. A
    sample without references, or one whose references ROUGE's tokenizer cannot read (:func:`rouge_blind`), is NaN;
    a generation without tokens against references with tokens scores 0."""

    category = "lexical"
    needs_references = True
    scores = ("rouge1", "rouge2", "rougeL", "rougeLsum")

    @dataclass(frozen=True)
    class Args:
        """``split_sentences``: for ROUGE-Lsum, put each sentence on its own line first (pysbd), as the Hugging
        Face summarization scripts do with NLTK punkt; rouge-score itself splits only at newlines."""

        use_stemmer: bool = True
        split_sentences: bool = True

    @classmethod
    def build(cls, args: "Rouge.Args", context: MetricContext) -> MetricFn:
        from rouge_score import rouge_scorer

        from grueflow.metrics.sentences import split_sentences

        scorer = rouge_scorer.RougeScorer(list(cls.scores), use_stemmer=args.use_stemmer)

        def lines(text: str) -> str:
            return "\n".join(split_sentences(text)) if args.split_sentences else text

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample: dict[str, list[float]] = {cls.key(s): [] for s in cls.scores}
            blind = [rouge_blind(refs) for refs in references]
            for generation, refs, unread in zip(generations, references, blind):
                scored = bool(refs) and not unread
                result = scorer.score_multi([lines(r) for r in refs], lines(generation)) if scored else {}
                for s in cls.scores:
                    per_sample[cls.key(s)].append(float(result[s].fmeasure) if scored else float("nan"))
            warn_blind("rouge", sum(blind), len(generations))
            return MetricResult(per_sample, {k: nanmean(v) for k, v in per_sample.items()})

        return MetaChecked(compute, unscored=rouge_unscored)


def totto_bleu_texts(generations: Sequence[str],
                     references: Sequence[Sequence[str]]) -> tuple[list[str], list[list[str]]]:
    """The texts the official ToTTo BLEU scores: each generation stripped and lower-cased, ``<null>`` when empty; each
    sample's first three references lower-cased, padded to three with ``<null>``."""
    padded = [list(r[:TOTTO_REFERENCES]) + [TOTTO_NULL] * (TOTTO_REFERENCES - len(r)) for r in references]
    return [(g.strip() or TOTTO_NULL).lower() for g in generations], [[r.lower() for r in refs] for refs in padded]


@METRICS.register("bleu", "BLEU-4 (sacrebleu): corpus score, and sentence BLEU per sample, in [0, 100]")
class Bleu(Metric):
    """A sample without references scores NaN and is left out of the corpus score (NaN when no sample has one), in
    either recipe: ``totto``'s ``<null>`` pads a sample's references to three, it does not stand for all of them."""

    category = "lexical"
    needs_references = True
    scores = ("bleu",)

    @dataclass(frozen=True)
    class Args:
        """``recipe: sacrebleu`` (default): the texts as given, sacrebleu's ``tokenize``, a sample's missing references
        left out. ``recipe: totto``: the official ToTTo BLEU (google-research/language ``totto_bleu_eval.sh``, RL4LMs'
        ``bleu_totto``): generations stripped, an empty one written ``<null>``; the first three references, padded
        to three with ``<null>`` (``prepare_references_for_eval.py``); generations and references lower-cased; then
        the sacrebleu command line's defaults (13a, exponential smoothing). The script's Moses detokenization of
        every file first is left out, as :mod:`grueflow.metrics.table` says for PARENT. RL4LMs' ``bleu_totto``
        divides the score by 100."""

        tokenize: SacrebleuTokenizer = "13a"
        recipe: Literal["sacrebleu", "totto"] = "sacrebleu"

        def __post_init__(self) -> None:
            if self.recipe == "totto" and self.tokenize != "13a":
                raise ValueError(f"bleu with recipe: totto tokenizes with 13a, as the official ToTTo script; got "
                                 f"tokenize={self.tokenize!r}: drop it or use recipe: sacrebleu")

    @classmethod
    def build(cls, args: "Bleu.Args", context: MetricContext) -> MetricFn:
        import sacrebleu

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            kept = [i for i, refs in enumerate(references) if refs]
            texts, refs = [generations[i] for i in kept], [references[i] for i in kept]
            if args.recipe == "totto":
                texts, refs = totto_bleu_texts(texts, refs)
            per_sample = [float("nan")] * len(generations)
            for i, text, sample_refs in zip(kept, texts, refs):
                per_sample[i] = float(sacrebleu.sentence_bleu(text, list(sample_refs), tokenize=args.tokenize).score)
            corpus = (float(sacrebleu.corpus_bleu(texts, reference_streams(refs), tokenize=args.tokenize).score)
                      if kept else float("nan"))
            return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

        return compute


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[Any]]:
    """sacrebleu's reference layout: one stream per reference position, ``None`` where a sample has fewer."""
    width = max((len(r) for r in references), default=0)
    return [[r[i] if i < len(r) else None for r in references] for i in range(width)]


def sacrebleu_compute(cls: type[Metric], scorer: Any, corpus_scorer: Any = None) -> MetricFn:
    """Sentence scores per sample (NaN without references) and the corpus score over samples with references, by
    ``corpus_scorer`` where given (BLEU's effective order is for sentences), else by ``scorer``."""
    corpus_scorer = scorer if corpus_scorer is None else corpus_scorer

    def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                meta: Sequence[dict[str, Any]]) -> MetricResult:
        per_sample = [float(scorer.sentence_score(g, list(r)).score) if r else float("nan")
                      for g, r in zip(generations, references)]
        kept = [(g, r) for g, r in zip(generations, references) if r]
        corpus = (float(corpus_scorer.corpus_score([g for g, _ in kept], reference_streams([r for _, r in kept])).score)
                  if kept else float("nan"))
        return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

    return compute


@METRICS.register("sacrebleu", "SacreBLEU (sacrebleu.BLEU) with a chosen tokenizer and casing, in [0, 100]")
class SacreBleu(Metric):
    """The corpus score is sacrebleu's corpus BLEU as its command line and Hugging Face ``evaluate`` (RL4LMs'
    SacreBLEUMetric) give it: without effective order, so a corpus with no 4-gram scores 0. Each sample's score is
    sentence BLEU with effective order, as sacrebleu advises for single sentences."""

    category = "lexical"
    needs_references = True
    scores = ("sacrebleu",)

    @dataclass(frozen=True)
    class Args:
        tokenize: SacrebleuTokenizer = "13a"
        lowercase: bool = False

    @classmethod
    def build(cls, args: "SacreBleu.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import BLEU

        return sacrebleu_compute(cls, BLEU(tokenize=args.tokenize, lowercase=args.lowercase, effective_order=True),
                                 BLEU(tokenize=args.tokenize, lowercase=args.lowercase))


@METRICS.register("sentence_bleu", "sentence BLEU (sacrebleu, effective order) per sample; corpus = their mean")
class SentenceBleu(Metric):
    category = "lexical"
    needs_references = True
    scores = ("sentence_bleu",)

    @dataclass(frozen=True)
    class Args:
        tokenize: SacrebleuTokenizer = "13a"

    @classmethod
    def build(cls, args: "SentenceBleu.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import BLEU

        inner = sacrebleu_compute(cls, BLEU(tokenize=args.tokenize, effective_order=True))

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            per_sample = inner(prompts, generations, references, meta).per_sample
            return MetricResult(per_sample, {cls.key(): nanmean(per_sample[cls.key()])})

        return compute


@METRICS.register("chrf", "chrF (sacrebleu, character 6-grams, beta 2), in [0, 100]")
class Chrf(Metric):
    category = "lexical"
    needs_references = True
    scores = ("chrf",)
    word_order: ClassVar[int] = 0

    @dataclass(frozen=True)
    class Args:
        lowercase: bool = False

    @classmethod
    def build(cls, args: "Chrf.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import CHRF

        return sacrebleu_compute(cls, CHRF(word_order=cls.word_order, lowercase=args.lowercase))


@METRICS.register("chrf_plus_plus", "chrF++ (sacrebleu, character 6-grams + word 2-grams), in [0, 100]")
class ChrfPlusPlus(Chrf):
    scores = ("chrf_plus_plus",)
    word_order = 2


@METRICS.register("ter", "translation edit rate (sacrebleu TER), in [0, inf), lower is better")
class Ter(Metric):
    category = "lexical"
    needs_references = True
    scores = ("ter",)
    lower_is_better = ("ter",)

    @dataclass(frozen=True)
    class Args:
        case_sensitive: bool = False

    @classmethod
    def build(cls, args: "Ter.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import TER

        return sacrebleu_compute(cls, TER(case_sensitive=args.case_sensitive))


@METRICS.register("one_minus_ter", "1 - TER/100 (sacrebleu TER as a fraction): RL4LMs' TER reward, at most 1, "
                  "higher is better")
class OneMinusTer(Ter):
    """RL4LMs' ``ter`` reward (``reward.py``, class TER): one minus the TER of the episode's generation against its
    references, TER as a fraction (Hugging Face's ``ter`` metric is sacrebleu TER, case-insensitive, divided by
    100 there). Per sample ``1 - ter/100`` of :class:`Ter`'s sentence TER; the corpus score is
    ``1 - corpus TER/100``."""

    scores = ("one_minus_ter",)
    lower_is_better = ()

    @classmethod
    def build(cls, args: "Ter.Args", context: MetricContext) -> MetricFn:
        ter = Ter.build(args, context)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            result = ter(prompts, generations, references, meta)
            per_sample = [1.0 - score / 100.0 for score in result.per_sample[Ter.key()]]
            return MetricResult({cls.key(): per_sample}, {cls.key(): 1.0 - result.corpus[Ter.key()] / 100.0})

        return compute


def py_rouge_l(**kwargs: Any) -> Any:
    """``rouge.Rouge(metrics=["rouge-l"], **kwargs)`` of py-rouge 1.1, the package behind RL4LMs' RougeLMax, with two
    adaptations that leave its scores unchanged:

    - its tokenizer is ``nltk.word_tokenize`` with ``preserve_line=True``. py-rouge tokenizes only text it has
      lower-cased and reduced to ``[a-z0-9_ ]``, in which punkt's sentence split (the step ``preserve_line`` skips)
      finds no sentence end and returns the text whole; skipping it means no punkt data is needed.
    - py-rouge imports ``pkg_resources`` (gone from setuptools 82 on) only to find its two WordNet files with
      ``resource_filename``. Where ``pkg_resources`` is missing, py-rouge's import is given a stand-in with that one
      function, and ``sys.modules`` is restored right after, so no other import sees it.
    """
    import importlib.util
    import sys
    import types

    import nltk

    stand_in = None
    if "rouge.rouge" not in sys.modules and importlib.util.find_spec("pkg_resources") is None:
        stand_in = types.ModuleType("pkg_resources")
        stand_in.resource_filename = lambda module, name: str(Path(sys.modules[module].__file__).parent / name)
        sys.modules["pkg_resources"] = stand_in
    try:
        module = require("rouge.rouge", "metric 'rouge_l_max' with package: py_rouge", "py-rouge")
    finally:
        if stand_in is not None:
            del sys.modules["pkg_resources"]
    if not hasattr(module.Rouge, "AVAILABLE_LENGTH_LIMIT_TYPES"):  # the package 'rouge' has the same import name
        raise ImportError(f"metric 'rouge_l_max' with package: py_rouge needs py-rouge, but 'rouge' is another "
                          f"package ({module.__file__}): pip uninstall rouge && pip install py-rouge")

    class Rouge(module.Rouge):
        @staticmethod
        def tokenize_text(text: str, language: str = "english") -> list[str]:
            return nltk.word_tokenize(text, language, preserve_line=True)

    scorer = Rouge(metrics=["rouge-l"], **kwargs)
    scorer.load_stemmer(scorer.ensure_compatibility)  # a class attribute: set it as RL4LMs does before scoring
    return scorer


@METRICS.register("rouge_l_max", "ROUGE-L F1 against each reference, the maximum, in [0, 1]: rouge-score, or py-rouge "
                  "as RL4LMs computes it")
class RougeLMax(Metric):
    """A sample without references, or one whose references ROUGE's tokenizer cannot read (:func:`rouge_blind`), is
    NaN and left out of the corpus mean; a generation without tokens against references with tokens scores 0."""

    category = "lexical"
    needs_references = True
    scores = ("rouge_l_max",)

    @dataclass(frozen=True)
    class Args:
        """``package: rouge_score`` (default): rouge-score's ROUGE-L F1, with Porter stemming unless ``use_stemmer`` is
        false. ``package: py_rouge``: RL4LMs' RougeLMax, py-rouge's summary-level ROUGE-L F of each reference alone
        (``rouge.Rouge(metrics=["rouge-l"], **args)``, sentences split at newlines), with py-rouge's arguments; one
        left None takes py-rouge's default:

        - ``limit_length``, ``length_limit``, ``length_limit_type``: truncate generation and reference to their first
          ``length_limit`` words or bytes (py-rouge: on, 665 bytes);
        - ``stemming`` (on): WordNet's base form, else Porter's original algorithm, of each word over 3 characters;
        - ``alpha`` (0.5): F = P·R / ((1 − alpha)·P + alpha·R);
        - ``weight_factor`` (1.0): P and R are raised to the power 1/weight_factor before F. py-rouge does this for
          ROUGE-L too, not only for the weighted LCS of ROUGE-W (Lin 2004) the factor belongs to;
        - ``max_n``, ``apply_avg``, ``apply_best``: passed on, with no effect on one reference's score (max_n counts
          ROUGE-N; with one reference, average and best agree); one of apply_avg and apply_best must stay on.
        """

        package: Literal["rouge_score", "py_rouge"] = "rouge_score"
        use_stemmer: Optional[bool] = None
        limit_length: Optional[bool] = None
        length_limit: Optional[int] = None
        length_limit_type: Optional[Literal["words", "bytes"]] = None
        stemming: Optional[bool] = None
        alpha: Optional[float] = None
        weight_factor: Optional[float] = None
        max_n: Optional[int] = None
        apply_avg: Optional[bool] = None
        apply_best: Optional[bool] = None

        def py_rouge_args(self) -> dict[str, Any]:
            """The py-rouge arguments given (not None)."""
            return {f.name: getattr(self, f.name) for f in fields(self)
                    if f.name not in ("package", "use_stemmer") and getattr(self, f.name) is not None}

        def __post_init__(self) -> None:
            given = self.py_rouge_args()
            if self.package == "rouge_score" and given:
                raise ValueError(f"metric 'rouge_l_max': {', '.join(given)} are py-rouge's arguments; set package: "
                                 "py_rouge to use them, or drop them for rouge-score's ROUGE-L")
            if self.package == "py_rouge" and self.use_stemmer is not None:
                raise ValueError("metric 'rouge_l_max': use_stemmer is rouge-score's; with package: py_rouge say "
                                 f"stemming: {str(self.use_stemmer).lower()}")
            if self.weight_factor is not None and self.weight_factor <= 0:
                raise ValueError(f"metric 'rouge_l_max': weight_factor must be > 0, got {self.weight_factor}")
            if self.alpha is not None and not 0 <= self.alpha <= 1:
                raise ValueError(f"metric 'rouge_l_max': alpha weighs precision against recall, in [0, 1]; got "
                                 f"{self.alpha}")
            for name in ("length_limit", "max_n"):
                if getattr(self, name) is not None and getattr(self, name) < 1:
                    raise ValueError(f"metric 'rouge_l_max': {name} must be >= 1, got {getattr(self, name)}")
            if self.apply_avg is False and not self.apply_best:
                raise ValueError("metric 'rouge_l_max': apply_avg: false needs apply_best: true (py-rouge gives one "
                                 "score per reference only with one of them on)")

    @classmethod
    def build(cls, args: "RougeLMax.Args", context: MetricContext) -> MetricFn:
        if args.package == "py_rouge":
            scorer = py_rouge_l(**args.py_rouge_args())

            def score(reference: str, generation: str) -> float:
                return float(scorer.get_scores(generation, [reference])["rouge-l"]["f"])
        else:
            from rouge_score import rouge_scorer

            stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=args.use_stemmer is not False)

            def score(reference: str, generation: str) -> float:
                return float(stemmed.score(reference, generation)["rougeL"].fmeasure)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            blind = [rouge_blind(refs) for refs in references]
            scores = [max(score(r, g) for r in refs) if refs and not unread else float("nan")
                      for g, refs, unread in zip(generations, references, blind)]
            warn_blind("rouge_l_max", sum(blind), len(generations))
            return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

        return MetaChecked(compute, unscored=rouge_unscored)
