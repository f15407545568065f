"""Diversity of the generations (RL4LMs' diversity metrics): distinct-n, unique-n, vocabulary, length,
MSTTR, n-gram entropy and self-BLEU.

Words are GEM-metrics' ``list_tokenized_lower``, which RL4LMs' ``DiversityMetrics`` (GEM's ``NGramStats`` and
``MSTTR``) counts: NLTK's ``word_tokenize``, lower-cased, punctuation marks as tokens (:func:`tokens`), so "Dog",
"dog" and "dog." hold one word type. Self-BLEU scores the texts as sacrebleu tokenizes them (its ``tokenize``).

RL4LMs (GEM) scores diversity over the whole batch alone; grueflow's corpus scores are those, over the words of all
the generations, so a generation with no words (or fewer than n for n-grams) adds nothing to them, and a corpus score
is NaN only where the batch as a whole has nothing to count (:attr:`Metric.undefined_when`). The per-sample scores,
which a reward reads, are defined for every generation: one with nothing to count has no diversity and scores the
metric's minimum, 0 (as ``repetition`` scores an empty one 0), never NaN, which would leave that sample out of an
evaluation's corpus reward (a method answering the hard prompts with nothing would then be scored on the easy ones
alone) and stop RL.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from grueflow.config import MAX_TOKENS, check_size
from grueflow.metrics import METRICS, Metric, MetricContext, MetricFn, MetricResult, SacrebleuTokenizer, mean, nanmean


def tokens(texts: Sequence[str]) -> list[list[str]]:
    """Each text's words as GEM-metrics (and so RL4LMs) counts them: NLTK's ``word_tokenize``, lower-cased
    (:func:`grueflow.metrics.captioning.nltk_words`)."""
    split = _word_tokenize()
    return [[word.lower() for word in split(text)] if text.strip() else [] for text in texts]


@functools.lru_cache(maxsize=1)
def _word_tokenize() -> Callable[[str], list[str]]:
    from grueflow.metrics.captioning import nltk_words

    return nltk_words()


def ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def distinct(texts: Sequence[Sequence[str]], n: int) -> float:
    """Distinct n-grams over all n-grams (Li et al. 2016).  Range [0, 1]; NaN with no n-grams."""
    grams = [g for words in texts for g in ngrams(words, n)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def unique(texts: Sequence[Sequence[str]], n: int) -> int:
    """Number of n-grams that occur exactly once in the whole set."""
    counts = Counter(g for words in texts for g in ngrams(words, n))
    return sum(1 for c in counts.values() if c == 1)


@METRICS.register("diversity", "distinct-1/2, unique-1/2, vocabulary size, mean length, repetition")
class Diversity(Metric):
    category = "diversity"
    scores = ("length", "repetition")
    lower_is_better = ("repetition",)
    corpus_scores = ("distinct_1", "distinct_2", "unique_1", "unique_2", "vocab_size")
    undefined_when = {"distinct_1": "distinct-1 is undefined: every generation is empty (0 words to count)",
                      "distinct_2": "distinct-2 is undefined: no generation has two or more words (0 bigrams to "
                                    "count)"}

    @classmethod
    def build(cls, args: Any, context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            words = tokens(generations)
            lengths = [float(len(w)) for w in words]
            # an empty generation repeats nothing (0): its emptiness shows in length, not here
            repetition = [1.0 - distinct([w], 1) if w else 0.0 for w in words]
            corpus = {
                cls.key("distinct_1"): distinct(words, 1),
                cls.key("distinct_2"): distinct(words, 2),
                cls.key("unique_1"): float(unique(words, 1)),
                cls.key("unique_2"): float(unique(words, 2)),
                cls.key("vocab_size"): float(len({w for ws in words for w in ws})),
                cls.key("length"): mean(lengths),
                cls.key("repetition"): mean(repetition),
            }
            return MetricResult({cls.key("length"): lengths, cls.key("repetition"): repetition}, corpus)

        return compute


@METRICS.register("msttr", "mean segmental type-token ratio over the batch's words (segments of `window` words), in [0, 1]")
class Msttr(Metric):
    """Mean segmental type-token ratio (Johnson 1944; GEM's ``MSTTR``, which RL4LMs reports): the words of all the
    generations in one sequence, cut into segments of ``window`` words (a last shorter one dropped), and the mean
    of their type-token ratios; NaN when the batch holds fewer words than one window. Per sample, the type-token
    ratio of the generation's own words (no segments), in [0, 1]; 0 for a generation with no words (no diversity,
    never NaN: see the module docstring)."""

    category = "diversity"
    scores = ("msttr",)
    undefined_when = {"msttr": "msttr is undefined: the generations hold fewer words, all together, than one window "
                               "(args.window, 100 by default); lower the window, or score more or longer generations"}

    @dataclass(frozen=True)
    class Args:
        window: int = 100

        def __post_init__(self) -> None:
            if self.window < 1:
                raise ValueError(f"msttr window must be >= 1 word; got {self.window}")
            check_size("msttr window", self.window, MAX_TOKENS)

    @classmethod
    def build(cls, args: "Msttr.Args", context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            texts = tokens(generations)
            words = [w for text in texts for w in text]
            segments = [words[i:i + args.window] for i in range(0, len(words) - args.window + 1, args.window)]
            corpus = mean([len(set(s)) / len(s) for s in segments])
            per_sample = [len(set(text)) / len(text) if text else 0.0 for text in texts]
            return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

        return compute


def entropy(grams: Sequence[tuple[str, ...]]) -> float:
    """Shannon entropy in bits of the n-gram frequency distribution; NaN with no n-grams."""
    counts = Counter(grams)
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values()) if total else float("nan")


@METRICS.register("ngram_entropy", "Shannon entropy (bits) of the n-gram distribution, per sample and over the batch")
class NgramEntropy(Metric):
    """Shannon entropy in bits of the ``n``-gram distribution (GEM's ``NGramStats`` entropy, which RL4LMs reports):
    over the n-grams of all the generations (NaN when none has ``n`` words), and per sample over the generation's
    own n-grams, >= 0; 0 for a generation with fewer than ``n`` words (no n-gram: no diversity, never NaN; as one
    with a single distinct n-gram scores)."""

    category = "diversity"
    scores = ("entropy",)

    @dataclass(frozen=True)
    class Args:
        n: int = 1

        def __post_init__(self) -> None:
            if self.n < 1:
                raise ValueError(f"ngram_entropy n must be >= 1; got {self.n}")
            check_size("ngram_entropy n", self.n, MAX_TOKENS)

    @classmethod
    def build(cls, args: "NgramEntropy.Args", context: MetricContext) -> MetricFn:
        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            words = tokens(generations)
            per_sample = [entropy(grams) if (grams := ngrams(w, args.n)) else 0.0 for w in words]
            corpus = entropy([g for w in words for g in ngrams(w, args.n)])
            return MetricResult({cls.key(): per_sample}, {cls.key(): corpus})

        return compute


@METRICS.register("self_bleu", "self-BLEU (Zhu et al. 2018): BLEU of each generation against the others, in [0, 100]; "
                               "lower is more diverse")
class SelfBleu(Metric):
    """Each generation's sacrebleu sentence BLEU (its ``tokenize``, case kept, effective order, exponential
    smoothing) against all the others as references; the corpus score is their mean. Texygen's self-BLEU (Zhu et al.
    2018) is NLTK's 4-gram sentence BLEU with smoothing method 1 instead, and comes out lower (9.9 against 15.7 on
    100 CommonGen scenes): compare self-BLEU across runs of one recipe. The cost grows as the square of the
    samples."""

    category = "diversity"
    scores = ("self_bleu",)
    lower_is_better = ("self_bleu",)  # lower is more diverse

    @dataclass(frozen=True)
    class Args:
        tokenize: SacrebleuTokenizer = "13a"

    @classmethod
    def build(cls, args: "SelfBleu.Args", context: MetricContext) -> MetricFn:
        from sacrebleu.metrics import BLEU

        bleu = BLEU(tokenize=args.tokenize, effective_order=True)

        def compute(prompts: Sequence[str], generations: Sequence[str], references: Sequence[Sequence[str]],
                    meta: Sequence[dict[str, Any]]) -> MetricResult:
            others = [list(generations[:i]) + list(generations[i + 1:]) for i in range(len(generations))]
            scores = [float(bleu.sentence_score(g, o).score) if o else float("nan") for g, o in zip(generations, others)]
            return MetricResult({cls.key(): scores}, {cls.key(): nanmean(scores)})

        return compute
