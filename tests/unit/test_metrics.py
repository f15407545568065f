"""Metrics: literal expectations from hand computation and from the reference packages."""

import math

import pytest

from grueflow.config import RewardConfig
from grueflow.metrics import METRICS, MetricContext
from grueflow.metrics.reward import Reward
from grueflow.metrics.task import coverage, lexicon_polarity
from grueflow.params import parse

CTX = MetricContext()


def compute(metric_id, generations, references, meta=None, **args):
    metric = METRICS.get(metric_id)
    fn = metric.build(parse(metric.Args, args, "args"), CTX)
    return fn(["p"] * len(generations), generations, references, meta or [{}] * len(generations))


def test_lexicon_polarity_by_hand():
    assert lexicon_polarity("the acting was great and the plot was dull .") == 0.0
    assert lexicon_polarity("i loved the wonderful music") == 1.0
    assert lexicon_polarity("boring boring but fine") == pytest.approx(-1 / 3)
    assert lexicon_polarity("") == 0.0


def test_concept_coverage_accepts_inflections():
    assert coverage("the girl kicked the small car .", ["kick", "girl", "car"]) == 1.0
    assert coverage("a dog is washing the fence .", ["wash", "cat", "fence"]) == pytest.approx(2 / 3)
    assert coverage("", ["dog"]) == 0.0
    with pytest.raises(ValueError, match="concepts"):
        coverage("x", [])


def test_rouge_and_bleu_match_their_reference_packages():
    import sacrebleu
    from rouge_score import rouge_scorer

    generations = ["the cat sat on the mat .", "a dog runs in the park ."]
    references = [["the cat is on the mat .", "there is a cat on the mat ."], ["the dog runs in the park ."]]
    result = compute("rouge", generations, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    expected = [scorer.score_multi(r, g)["rougeL"].fmeasure for g, r in zip(generations, references)]
    assert result.per_sample["lexical/rougeL"] == pytest.approx(expected)
    assert result.per_sample["lexical/rougeL"][1] == pytest.approx(5 / 6)  # LCS "dog runs in the park", 6 tokens each
    bleu = compute("bleu", generations, references)
    expected_corpus = sacrebleu.corpus_bleu(generations, [["the cat is on the mat .", "the dog runs in the park ."],
                                                          ["there is a cat on the mat .", None]]).score
    assert bleu.corpus["lexical/bleu"] == pytest.approx(expected_corpus)
    assert bleu.per_sample["lexical/bleu"][1] == pytest.approx(sacrebleu.sentence_bleu(generations[1], references[1]).score)


def test_diversity_by_hand():
    result = compute("diversity", ["a b a", "a c"], [["x"], ["y"]])
    assert result.corpus["diversity/distinct_1"] == pytest.approx(3 / 5)
    assert result.corpus["diversity/distinct_2"] == pytest.approx(3 / 3)
    assert result.corpus["diversity/unique_1"] == 2.0  # b and c occur once
    assert result.corpus["diversity/vocab_size"] == 3.0
    assert result.per_sample["diversity/length"] == [3.0, 2.0]
    assert result.per_sample["diversity/repetition"] == pytest.approx([1 / 3, 0.0])
    empty = compute("diversity", [""], [["x"]])
    assert math.isnan(empty.corpus["diversity/distinct_1"])


def test_weighted_reward_logs_each_component():
    cfg = parse(RewardConfig, {"components": [{"metric": "lexicon_sentiment", "weight": 2.0},
                                              {"metric": "diversity", "score": "length", "weight": -0.1}]}, "reward")
    total, parts = Reward(cfg, CTX)(["p", "p"], ["great film", "dull dull film ok"], [["r"], ["r"]], [{}, {}])
    assert parts == {"task/sentiment": [1.0, -1.0], "diversity/length": [2.0, 4.0]}
    assert total == pytest.approx([2.0 - 0.2, -2.0 - 0.4])


def test_perplexity_under_a_tiny_model(tiny_models):
    metric = METRICS.get("perplexity")
    fn = metric.build(metric.Args(), MetricContext(base_model=tiny_models["causal"]))
    result = fn(["i saw this film ."], ["the acting was great ."], [["x"]], [{}])
    ppl = result.per_sample["fluency/perplexity"][0]
    assert 1.0 < ppl < 300.0
    assert result.corpus["fluency/perplexity"] == pytest.approx(ppl)


def test_an_optional_dependency_that_is_missing_is_named_with_its_pip_package():
    from grueflow.metrics import require

    assert require("math", "metric 'm'", "math").sqrt(4.0) == 2.0
    with pytest.raises(ImportError, match=r"^metric 'cider' needs no-such-pkg: pip install no-such-pkg$"):
        require("no_such_module_for_grueflow", "metric 'cider'", "no-such-pkg")
