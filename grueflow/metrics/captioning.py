"""Reference-based metrics from captioning and MT: METEOR (NLTK + WordNet), CIDEr-D and SPICE (pycocoevalcap)."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

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


@METRICS.register("meteor", "METEOR (nltk.translate.meteor_score, WordNet synonyms), best-aligned over references, in [0, 1]")
class Meteor(Metric):
    category = "lexical"
    scores = ("meteor",)

    @dataclass(frozen=True)
    class Args:
        alpha: float = 0.9
        beta: float = 3.0
        gamma: float = 0.5

    @classmethod
    def build(cls, args: "Meteor.Args", context: MetricContext) -> MetricFn:
        require_wordnet()
        from nltk.translate.meteor_score import meteor_score

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            scores = [float(meteor_score([tokenize(r) for r in refs], tokenize(g), alpha=args.alpha, beta=args.beta,
                                         gamma=args.gamma)) if refs else float("nan")
                      for g, refs in zip(generations, references)]
            return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

        return compute


def coco_inputs(generations: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[dict, dict, list[int]]:
    """pycocoevalcap's ``(gts, res)`` dicts over the samples that have references, space-joined tokens."""
    kept = [i for i, refs in enumerate(references) if refs]
    gts = {i: [" ".join(tokenize(r)) for r in references[i]] for i in kept}
    res = {i: [" ".join(tokenize(generations[i]))] for i in kept}
    return gts, res, kept


def coco_result(key: str, scorer: Any, value: Callable[[Any], float], generations: Sequence[str],
                references: Sequence[Sequence[str]]) -> MetricResult:
    """Score the samples that have references with a pycocoevalcap scorer (``value`` reads a sample's number
    from its per-sample output); samples without references, and the corpus when none has any, are NaN."""
    gts, res, kept = coco_inputs(generations, references)
    scores = [float("nan")] * len(generations)
    corpus = float("nan")
    if kept:
        corpus, each = scorer.compute_score(gts, res)
        for i, s in zip(kept, each):
            scores[i] = float(value(s))
    return MetricResult({key: scores}, {key: float(corpus)})


@METRICS.register("cider", "CIDEr-D (pycocoevalcap Cider, sigma 6, clipped), IDF over the batch's references, in [0, 10]")
class Cider(Metric):
    category = "lexical"
    scores = ("cider",)

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        CocoCider = require("pycocoevalcap.cider.cider", "metric 'cider'", "pycocoevalcap").Cider

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            return coco_result(cls.key(), CocoCider(), lambda each: each, generations, references)

        return compute


@METRICS.register("spice", "SPICE scene-graph F1 (pycocoevalcap; needs Java and the Stanford CoreNLP jars), in [0, 1]")
class Spice(Metric):
    category = "lexical"
    scores = ("spice",)

    @dataclass(frozen=True)
    class Args:
        java: str = "java"
        corenlp_dir: Optional[str] = None

    @classmethod
    def build(cls, args: "Spice.Args", context: MetricContext) -> MetricFn:
        coco_spice = require("pycocoevalcap.spice.spice", "metric 'spice'", "pycocoevalcap")
        lib = Path(args.corenlp_dir) if args.corenlp_dir else Path(coco_spice.__file__).parent / "lib"
        jars = sorted(lib.glob("stanford-corenlp-*.jar"))
        if shutil.which(args.java) is None or len(jars) < 2:
            raise MetricUnavailableError(
                f"metric 'spice' needs Java (given java={args.java!r}, found: {shutil.which(args.java)}) and the Stanford "
                f"CoreNLP 3.6.0 jars stanford-corenlp-3.6.0.jar and stanford-corenlp-3.6.0-models.jar in {lib} "
                f"(found: {[j.name for j in jars]}); install a JRE (apt-get install default-jre) and copy the jars from "
                "https://nlp.stanford.edu/software/stanford-corenlp-full-2015-12-09.zip into that folder, "
                "or set args.corenlp_dir to the folder holding them")

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            return coco_result(cls.key(), coco_spice.Spice(), lambda each: each["All"]["f"], generations, references)

        return compute
