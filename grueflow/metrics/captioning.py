"""Reference-based metrics from captioning and MT: METEOR (NLTK + WordNet), CIDEr-D and SPICE (pycocoevalcap)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

from grueflow.config import check
from grueflow.metrics import (METRICS, Metric, MetricContext, MetricFn, MetricResult, MetricUnavailableError, nanmean,
                              require)

TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lower-cased words and punctuation marks; needs no NLTK data (punkt is not assumed)."""
    return TOKEN.findall(text.lower())


def require_wordnet() -> None:
    """Raise a LookupError naming the resource and its install command when WordNet is not on NLTK's path."""
    import nltk

    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        raise LookupError("METEOR needs the NLTK resource 'wordnet' (corpora/wordnet) on NLTK's data path "
                          f"({', '.join(nltk.data.path)}); install it with `python -m nltk.downloader wordnet` "
                          "or point NLTK_DATA at a folder holding corpora/wordnet") from None


def nltk_words() -> Callable[[str], list[str]]:
    """NLTK's ``word_tokenize``: punkt's sentences, each split by NLTK's Treebank word tokenizer (contractions
    apart, punctuation marks as tokens, case kept). Where punkt's data is not on NLTK's path (``tokenizers/
    punkt_tab``, a download), pysbd splits the sentences instead; the two agree on a text of one sentence."""
    import nltk
    from nltk.tokenize import NLTKWordTokenizer

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return nltk.word_tokenize
    except LookupError:
        pass
    segmenter = require("pysbd", "metric 'meteor' with tokenize: nltk", "pysbd").Segmenter(language="en", clean=False)
    words = NLTKWordTokenizer().tokenize
    return lambda text: [word for sentence in segmenter.segment(text) for word in words(sentence.strip())]


@METRICS.register("meteor", "METEOR (nltk.translate.meteor_score, WordNet synonyms), best-aligned over references, in [0, 1]")
class Meteor(Metric):
    """``tokenize``: ``simple`` (:func:`tokenize`: lower-cased words and punctuation marks, the default) or
    ``nltk`` (:func:`nltk_words`, NLTK's ``word_tokenize``), which is how RL4LMs' METEOR tokenises: Hugging Face's
    ``meteor`` metric (``evaluate``), ``meteor_score`` over ``word_tokenize``-d references and generation, its
    corpus score the mean over samples. ``meteor_score`` lower-cases either way."""

    category = "lexical"
    needs_references = True
    scores = ("meteor",)

    @dataclass(frozen=True)
    class Args:
        """NLTK's (Lavie and Agarwal 2007) parameters: ``alpha`` weighs precision against recall,
        Fmean = P·R / (alpha·P + (1 − alpha)·R), in [0, 1]; the fragmentation penalty is gamma · frag^beta, with
        ``beta`` >= 0 and ``gamma`` in [0, 1], so that the score stays in [0, 1]."""

        alpha: float = 0.9
        beta: float = 3.0
        gamma: float = 0.5
        tokenize: Literal["simple", "nltk"] = "simple"

        def __post_init__(self) -> None:
            check(0 <= self.alpha <= 1, f"meteor alpha weighs precision against recall, in [0, 1]; got {self.alpha}")
            check(self.beta >= 0, f"meteor beta, the exponent of the fragmentation penalty, must be >= 0; got "
                                  f"{self.beta}")
            check(0 <= self.gamma <= 1, f"meteor gamma, the weight of the fragmentation penalty, must be in [0, 1] "
                                        f"(above 1 the score goes below 0); got {self.gamma}")

    @classmethod
    def build(cls, args: "Meteor.Args", context: MetricContext) -> MetricFn:
        require_wordnet()
        from nltk.translate.meteor_score import meteor_score

        words = tokenize if args.tokenize == "simple" else nltk_words()

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [float(meteor_score([words(r) for r in refs], words(g), alpha=args.alpha, beta=args.beta,
                                         gamma=args.gamma)) if refs else float("nan")
                      for g, refs in zip(generations, references)]
            return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

        return compute


Tokenizer = Callable[[list[str]], list[str]]  # texts -> the same texts as space-joined tokens


def simple_tokens(texts: list[str]) -> list[str]:
    """:func:`tokenize` (lower case, punctuation marks as tokens), space-joined."""
    return [" ".join(tokenize(text)) for text in texts]


def spacy_tokens() -> Tokenizer:
    """RL4LMs' CIDEr tokenisation (``caption_metrics/cider.py``): spaCy's English tokenizer, case and punctuation
    kept, each token's text followed by a space, the end stripped. ``spacy.blank("en")`` has the rule-based
    tokenizer of RL4LMs' ``en_core_web_sm`` without its download."""
    nlp = require("spacy", "metric 'cider' with tokenize: rl4lms", "spacy").blank("en")
    return lambda texts: ["".join(token.text + " " for token in nlp(text)).rstrip() for text in texts]


def ptb_unavailable(java: str) -> Optional[str]:
    """Why the COCO toolkit's PTB tokenizer cannot run here (``java`` is not on PATH), or None."""
    if shutil.which(java) is not None:
        return None
    return (f"metric 'cider' with tokenize: coco_ptb runs pycocoevalcap's PTBTokenizer with Java, and {java!r} is not "
            f"on PATH; install a JRE (apt-get install default-jre) or choose tokenize: rl4lms or simple")


def ptb_tokens(java: str) -> Tokenizer:
    """The COCO caption toolkit's tokenisation: pycocoevalcap's PTBTokenizer (Stanford CoreNLP's PTB tokenizer,
    run with Java), lower case, punctuation dropped."""
    module = require("pycocoevalcap.tokenizer.ptbtokenizer", "metric 'cider' with tokenize: coco_ptb", "pycocoevalcap")
    why = ptb_unavailable(java)
    if why is not None:
        raise MetricUnavailableError(why)

    def run(texts: list[str]) -> list[str]:
        if not texts:
            return []
        tokens = module.PTBTokenizer().tokenize({i: [{"caption": text}] for i, text in enumerate(texts)})
        return [tokens[i][0] for i in range(len(texts))]

    return run


def coco_inputs(generations: Sequence[str], references: Sequence[Sequence[str]],
                tokens: Tokenizer = simple_tokens) -> tuple[dict, dict, list[int]]:
    """pycocoevalcap's ``(gts, res)`` dicts over the samples that have references, as ``tokens`` gives them."""
    kept = [i for i, refs in enumerate(references) if refs]
    flat = [r for i in kept for r in references[i]]
    texts = tokens(flat + [generations[i] for i in kept])
    gts, at = {}, 0
    for i in kept:
        gts[i], at = texts[at:at + len(references[i])], at + len(references[i])
    res = {i: [texts[len(flat) + k]] for k, i in enumerate(kept)}
    return gts, res, kept


def coco_result(key: str, scorer: Any, value: Callable[[Any], float], generations: Sequence[str],
                references: Sequence[Sequence[str]], tokens: Tokenizer = simple_tokens,
                min_scored: int = 1) -> MetricResult:
    """Score the samples that have references with a pycocoevalcap scorer (``value`` reads a sample's number
    from its per-sample output) on the texts as ``tokens`` splits them; samples without references are NaN, and
    so are every sample and the corpus when fewer than ``min_scored`` samples (at least one) have references."""
    gts, res, kept = coco_inputs(generations, references, tokens)
    scores = [float("nan")] * len(generations)
    corpus = float("nan")
    if kept and len(kept) >= min_scored:
        corpus, each = scorer.compute_score(gts, res)
        for i, s in zip(kept, each):
            scores[i] = float(value(s))
    return MetricResult({key: scores}, {key: float(corpus)})


CIDER_TOKENIZERS = ("rl4lms", "coco_ptb", "simple")
CIDER_MIN_SAMPLES = 2  # the IDF over one sample's references is log(1 / 1) = 0 for every n-gram


@METRICS.register("cider", "CIDEr-D (pycocoevalcap Cider, sigma 6, clipped), IDF over the batch's references, in [0, 10]")
class Cider(Metric):
    """CIDEr-D as the COCO toolkit's scorer computes it (RL4LMs' copy of that scorer is the same code), on tokens
    from ``tokenize``: ``rl4lms`` (the default: RL4LMs' own, spaCy's English tokenizer with case and punctuation
    kept), ``coco_ptb`` (the COCO toolkit's PTB tokenizer: lower case, no punctuation; needs Java) or ``simple``
    (lower case, punctuation as tokens, a regex).

    An n-gram's IDF is ``log(N / df)`` over the N samples scored together (Vedantam et al., CVPR 2015; pycocoevalcap
    counts df at least 1), so CIDEr needs at least two: with one, every IDF is log(1 / 1) = 0 and any text, even the
    reference itself, scores 0. Fewer than :data:`CIDER_MIN_SAMPLES` samples with references score NaN, per sample
    and corpus."""

    category = "lexical"
    needs_references = True
    scores = ("cider",)

    @dataclass(frozen=True)
    class Args:
        tokenize: str = "rl4lms"
        java: str = "java"  # for coco_ptb

        def __post_init__(self) -> None:
            if self.tokenize not in CIDER_TOKENIZERS:
                raise ValueError(f"tokenize must be one of {', '.join(CIDER_TOKENIZERS)}, got {self.tokenize!r}")
            if self.java != "java" and self.tokenize != "coco_ptb":
                raise ValueError(f"java {self.java!r} is read only with tokenize: coco_ptb (Java runs the COCO "
                                 f"toolkit's PTB tokenizer), and tokenize is {self.tokenize}; leave java out, or set "
                                 f"tokenize: coco_ptb")

    @classmethod
    def unavailable(cls, args: "Cider.Args") -> Optional[str]:
        return ptb_unavailable(args.java) if args.tokenize == "coco_ptb" else None

    @classmethod
    def build(cls, args: "Cider.Args", context: MetricContext) -> MetricFn:
        CocoCider = require("pycocoevalcap.cider.cider", "metric 'cider'", "pycocoevalcap").Cider
        tokens = {"rl4lms": spacy_tokens, "coco_ptb": lambda: ptb_tokens(args.java),
                  "simple": lambda: simple_tokens}[args.tokenize]()

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            return coco_result(cls.key(), CocoCider(), lambda each: each, generations, references, tokens,
                               min_scored=CIDER_MIN_SAMPLES)

        return compute


@METRICS.register("spice", "SPICE scene-graph F1 (pycocoevalcap; needs Java and the Stanford CoreNLP jars), in [0, 1]")
class Spice(Metric):
    category = "lexical"
    needs_references = True
    scores = ("spice",)

    @dataclass(frozen=True)
    class Args:
        java: str = "java"
        corenlp_dir: Optional[str] = None

    @classmethod
    def unavailable(cls, args: "Spice.Args") -> Optional[str]:
        """What SPICE lacks here: pycocoevalcap, Java (``args.java``) or the two CoreNLP 3.6.0 jars (in
        ``args.corenlp_dir``, else pycocoevalcap's ``spice/lib``); None where all are there."""
        found = importlib.util.find_spec("pycocoevalcap")
        if found is None or not found.submodule_search_locations:
            return "metric 'spice' needs pycocoevalcap: pip install pycocoevalcap"
        lib = (Path(args.corenlp_dir) if args.corenlp_dir
               else Path(next(iter(found.submodule_search_locations))) / "spice" / "lib")
        jars = sorted(lib.glob("stanford-corenlp-*.jar"))
        if shutil.which(args.java) is not None and len(jars) >= 2:
            return None
        return (f"metric 'spice' needs Java (given java={args.java!r}, found: {shutil.which(args.java)}) and the "
                f"Stanford CoreNLP 3.6.0 jars stanford-corenlp-3.6.0.jar and stanford-corenlp-3.6.0-models.jar in "
                f"{lib} (found: {[j.name for j in jars]}); install a JRE (apt-get install default-jre) and copy the "
                "jars from https://nlp.stanford.edu/software/stanford-corenlp-full-2015-12-09.zip into that folder, "
                "or set args.corenlp_dir to the folder holding them")

    @classmethod
    def build(cls, args: "Spice.Args", context: MetricContext) -> MetricFn:
        why = cls.unavailable(args)
        if why is not None:
            raise MetricUnavailableError(why)
        coco_spice = require("pycocoevalcap.spice.spice", "metric 'spice'", "pycocoevalcap")

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            return coco_result(cls.key(), coco_spice.Spice(), lambda each: each["All"]["f"], generations, references)

        return compute
