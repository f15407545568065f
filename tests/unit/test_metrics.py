"""Metrics: literal expectations from hand computation and from the reference packages."""

import math

import pytest

from grueflow.config import ConfigError, RewardConfig
from grueflow.io import DataError
from grueflow.metrics import METRICS, MetricContext
from grueflow.metrics.reward import Reward
from grueflow.metrics.task import coverage, finite_number, increasing_numbers, lexicon_polarity
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


def test_lexicon_words_keep_no_punctuation():
    assert lexicon_polarity("The film was great.") == 1.0
    assert lexicon_polarity("Great, great!") == 1.0
    assert lexicon_polarity("(awful)") == -1.0
    assert lexicon_polarity("it was 'great'... but dull;") == 0.0  # one positive, one negative
    assert lexicon_polarity("boring: boring? fine!") == pytest.approx(-1 / 3)
    assert lexicon_polarity("the plot was greatly overrated") == 0.0  # a word is matched whole, not its prefix
    result = compute("lexicon_sentiment", ["The film was great.", "great"], [[], []])
    assert result.per_sample["task/sentiment"] == [1.0, 1.0]


def test_concept_coverage_words_keep_no_punctuation():
    assert coverage("A dog, a cat and a ball.", ["dog", "cat", "ball"]) == 1.0
    assert coverage("Dogs! Cats? Balls; then kicking: done", ["dog", "cat", "ball", "kick"]) == 1.0
    assert coverage("the dog-walker (washed) the cart", ["dog", "wash", "car"]) == pytest.approx(2 / 3)
    result = compute("concept_coverage", ["A dog, a cat and a ball."], [[]], [{"concepts": ["dog", "cat", "ball"]}])
    assert result.per_sample["task/coverage"] == [1.0]


def test_concept_coverage_names_the_missing_meta_key():
    with pytest.raises(DataError, match=r"^metric 'concept_coverage' needs meta\['concepts'\], a non-empty list of "
                                        r"concept words, in every sample; 1 of 2 samples lack it, the first "
                                        r"\(sample 0\) has no 'concepts' among its meta keys \['id', 'label'\]; "
                                        r"use a datapool"):
        compute("concept_coverage", ["a dog", "a cat"], [[], []], [{"label": 1, "id": "x"}, {"concepts": ["cat"]}])
    with pytest.raises(ValueError, match=r"2 of 2 samples lack it, the first \(sample 0\) has concepts=\[\]"):
        compute("concept_coverage", ["a dog", "a cat"], [[], []], [{"concepts": []}, {"concepts": "cat"}])


def rl4lms_increasing_numbers(text, min_tokens):
    """RL4LMs' RewardIncreasingNumbers.reward_increasing_numbers_in_text, its numbers read with float()."""

    def is_number(token):
        try:
            float(token)
            return True
        except ValueError:
            return False

    tokens = text.split()
    numbers = [float(t) for t in tokens if is_number(t)]
    if not numbers:
        return 0
    count, previous = 1, numbers[0]
    for number in numbers[1:]:
        if number > previous:
            count, previous = count + 1, number
        else:
            break
    return count / max(len(tokens), min_tokens / 2)


@pytest.mark.parametrize("text", ["1 2 3", "5 3 8", "-1 .5 2e0 +3 x 3.0", "a 1 b 2.5 c 2.5 9", "7", "",
                                  " ".join(str(n) for n in range(30))])
def test_increasing_numbers_agrees_with_rl4lms_on_decimal_numbers(text):
    assert increasing_numbers(text, 20) == pytest.approx(rl4lms_increasing_numbers(text, 20))


@pytest.mark.parametrize("text,score", [
    ("nan NaN nan nan nan nan nan nan nan nan", 0.0),  # no number at all (RL4LMs: 1 / 10, each nan ends the run)
    ("1 2 nan 3", 3 / 10),  # nan is a word: it neither ends nor extends the run
    ("1 inf 2 Infinity 3 -inf", 3 / 10),
    ("1_0 2 3", 2 / 10),  # digit groups are Python's, not a number
    ("1e999 5", 1 / 10),  # too large for a float
    ("٣ 4", 1 / 10),  # non-ASCII digits
])
def test_increasing_numbers_counts_only_finite_decimal_numbers(text, score):
    assert increasing_numbers(text, 20) == pytest.approx(score)
    assert compute("increasing_numbers", [text], [[]], min_tokens=20).corpus["synthetic/increasing_numbers"] == \
        pytest.approx(score)


def test_finite_number_reads_decimals_only():
    assert [finite_number(t) for t in ["7", "-2.5", "+3", ".5", "5.", "1e3", "1E-2"]] == [7.0, -2.5, 3.0, 0.5, 5.0,
                                                                                          1000.0, 0.01]
    assert [finite_number(t) for t in ["nan", "inf", "-Infinity", "1_0", "1e999", "٣", "0x1", "1.2.3", "e5", "."]] == \
        [None] * 10


def test_rouge_corpus_is_the_mean_over_samples_with_references():
    generations = ["the cat sat", "a dog", "the dog sat"]
    references = [["the cat sat"], [], ["the cat sat"]]
    rouge = compute("rouge", generations, references)
    # sample 3 shares the unigrams (and the LCS) "the", "sat": P = R = 2/3; no bigram
    assert rouge.per_sample["lexical/rouge1"][0::2] == pytest.approx([1.0, 2 / 3])
    assert math.isnan(rouge.per_sample["lexical/rouge1"][1])
    assert rouge.corpus == pytest.approx({"lexical/rouge1": 5 / 6, "lexical/rouge2": 1 / 2, "lexical/rougeL": 5 / 6,
                                          "lexical/rougeLsum": 5 / 6})
    rouge_l_max = compute("rouge_l_max", generations, references)
    assert rouge_l_max.corpus["lexical/rouge_l_max"] == pytest.approx(5 / 6)
    assert math.isnan(rouge_l_max.per_sample["lexical/rouge_l_max"][1])


@pytest.mark.parametrize("metric_id,args", [("rouge", {}), ("rouge_l_max", {}),
                                            ("rouge_l_max", {"package": "py_rouge"})])
def test_rouge_scores_text_without_latin_tokens_nan_and_warns_once(metric_id, args, caplog):
    generations = ["猫坐在垫子上", "the cat sat", "", "the cat", "the cat"]
    references = [["猫坐在垫子上"], ["the cat sat"], ["a cat"], ["猫", "the cat"], ["猫"]]
    with caplog.at_level("WARNING", logger="grueflow.metrics.lexical"):
        result = compute(metric_id, generations, references, **args)
    primary = METRICS.get(metric_id).key("rougeL" if metric_id == "rouge" else None)
    scores = result.per_sample[primary]
    # an empty generation scores 0; a reference without tokens is passed over when another one has tokens
    assert [math.isnan(s) for s in scores] == [True, False, False, False, True]
    assert scores[1:4] == pytest.approx([1.0, 0.0, 1.0])
    assert result.corpus[primary] == pytest.approx(2 / 3)
    warnings = [r.getMessage() for r in caplog.records if r.name == "grueflow.metrics.lexical"]
    assert len(warnings) == 1 and f"metric {metric_id!r}: 2 of 5 samples" in warnings[0] and "[a-z0-9]" in warnings[0]


def test_cider_of_fewer_than_two_samples_is_nan():
    from pycocoevalcap.cider.cider import Cider

    assert Cider().compute_score({0: ["a dog runs"]}, {0: ["a dog runs"]})[0] == 0.0  # IDF log(1/1) = 0
    alone = compute("cider", ["a dog runs"], [["a dog runs"]])
    assert math.isnan(alone.corpus["lexical/cider"]) and math.isnan(alone.per_sample["lexical/cider"][0])
    one_with_references = compute("cider", ["a dog runs", "a cat"], [["a dog runs"], []])
    assert all(math.isnan(s) for s in one_with_references.per_sample["lexical/cider"])
    pair = compute("cider", ["a dog runs", "a cat sits"], [["a dog runs"], ["a cat sits"]], tokenize="simple")
    corpus, each = Cider().compute_score({0: ["a dog runs"], 1: ["a cat sits"]}, {0: ["a dog runs"], 1: ["a cat sits"]})
    assert pair.per_sample["lexical/cider"] == pytest.approx(list(each)) and corpus > 0
    assert pair.corpus["lexical/cider"] == pytest.approx(corpus)


@pytest.mark.parametrize("metric_id", ["bleu", "sentence_bleu", "self_bleu", "sacrebleu"])
def test_bleu_tokenize_is_checked_at_parse_time(metric_id):
    with pytest.raises(ConfigError, match=r"args\.tokenize: 'spacy' is not allowed; choose one of 'none', '13a', "
                                          r"'intl', 'char', 'zh', 'ja-mecab', 'ko-mecab', 'flores101', 'flores200'$"):
        parse(METRICS.get(metric_id).Args, {"tokenize": "spacy"}, "args")
    assert parse(METRICS.get(metric_id).Args, {"tokenize": "intl"}, "args").tokenize == "intl"

