"""The metric library: literal values from each reference package on real sentences, and edge cases.

Every literal was computed once by calling the reference implementation directly (sacrebleu 2.6,
rouge-score 0.1.2, nltk 3.10 METEOR, pycocoevalcap 1.2 Cider, bert-score 0.3.13, vaderSentiment 3.3.2)
on the same inputs; the sentences are read from ../shared/data at test time.
"""

import json
import math

import pytest
import shared_data

from grueflow.config import ConfigError, MetricSpec
from grueflow.metrics import METRICS, MetricContext, MetricUnavailableError, describe
from grueflow.params import parse

CTX = MetricContext()


def compute(metric_id, generations, references, meta=None, **args):
    metric = METRICS.get(metric_id)
    fn = metric.build(parse(metric.Args, args, "args"), CTX)
    return fn(["p"] * len(generations), generations, references, meta or [{}] * len(generations))


def test_at_least_25_metric_ids_each_described():
    described = describe()
    assert len(described) >= 25
    assert all(text for text in described.values())


@pytest.mark.parametrize("metric_id, key, sentences, corpus", [
    ("sacrebleu", "lexical/sacrebleu", [82.90291181804007, 80.71177470053898, 87.2525292869424], 84.1072914439683),
    ("chrf", "lexical/chrf", [85.43564694647523, 83.85156263056733, 93.49491498725027], 88.51376363998547),
    ("chrf_plus_plus", "lexical/chrf_plus_plus", [85.72284309057035, 84.11197565168442, 92.61539975247581],
     88.26414793067957),
    ("ter", "lexical/ter", [11.76470588235294, 12.5, 8.695652173913043], 10.714285714285714),
])
def test_sacrebleu_family_on_iwslt_german(metric_id, key, sentences, corpus):
    generations, references = shared_data.iwslt(3)
    result = compute(metric_id, generations, references)
    assert result.per_sample[key] == pytest.approx(sentences, rel=1e-9)
    assert result.corpus[key] == pytest.approx(corpus, rel=1e-9)


def test_sacrebleu_tokenizer_option_and_multi_reference_commongen():
    generations, references = shared_data.iwslt(3)
    intl = compute("sacrebleu", generations, references, tokenize="intl")
    assert intl.per_sample["lexical/sacrebleu"][2] == pytest.approx(88.24969025845958)
    assert intl.corpus["lexical/sacrebleu"] == pytest.approx(84.64817248906144)
    generations, references = shared_data.commongen(3)
    result = compute("sacrebleu", generations, references)
    assert result.per_sample["lexical/sacrebleu"] == pytest.approx([19.72940627795883, 9.548450962056531, 22.957488466614326])
    assert result.corpus["lexical/sacrebleu"] == pytest.approx(13.530361247598107)
    sentence = compute("sentence_bleu", generations, references)
    assert sentence.corpus["lexical/sentence_bleu"] == pytest.approx((19.72940627795883 + 9.548450962056531 + 22.957488466614326) / 3)
    ter = compute("ter", generations, references)
    assert ter.per_sample["lexical/ter"] == pytest.approx([60.0, 72.0, 32.14285714285714])
    with pytest.raises(ConfigError, match="'intl'"):
        compute("sacrebleu", generations, references, tokenize="moses")


def test_sacrebleu_corpus_score_is_sacrebleus_without_effective_order():
    """Short answers (no 4-gram in the corpus) scored 70.06 where sacrebleu's corpus BLEU, Hugging Face evaluate's
    (RL4LMs' SacreBLEUMetric) and grueflow's bleu give 0: effective order belongs to sentence scores."""
    import sacrebleu

    references = [["in paris"], ["his mother"], ["a dog"], ["the king"], ["at night"], ["london"]]
    generations = ["in paris", "his mother", "a cat", "the queen", "at night", "london"]
    result = compute("sacrebleu", generations, references)
    assert result.corpus["lexical/sacrebleu"] == sacrebleu.corpus_bleu(generations, [[r[0] for r in references]]).score
    assert result.corpus["lexical/sacrebleu"] == 0.0 == compute("bleu", generations, references).corpus["lexical/bleu"]
    assert result.per_sample["lexical/sacrebleu"][0] == pytest.approx(100.0)  # itself, with effective order


def test_chrf_plus_plus_on_commongen_and_unicode():
    generations, references = shared_data.commongen(3)
    result = compute("chrf_plus_plus", generations, references)
    assert result.per_sample["lexical/chrf_plus_plus"] == pytest.approx([41.09507818495565, 29.52006929660797, 54.12683411392316])
    assert result.corpus["lexical/chrf_plus_plus"] == pytest.approx(42.120050503705826)
    unicode = compute("chrf", ["東京は日本の首都です"], [["東京は日本の首都である"]])
    assert unicode.corpus["lexical/chrf"] == pytest.approx(77.3312769486561)


@pytest.mark.parametrize("metric_id", ["sacrebleu", "sentence_bleu", "chrf", "chrf_plus_plus", "ter", "rouge_l_max",
                                       "meteor", "cider", "exact_match", "token_f1", "bert_score"])
def test_reference_metrics_are_nan_without_references_and_defined_for_empty_generation(metric_id):
    empty_refs = compute(metric_id, ["a dog runs ."], [[]])
    assert all(math.isnan(v[0]) for v in empty_refs.per_sample.values())
    assert all(math.isnan(v) for v in empty_refs.corpus.values())
    mixed = compute(metric_id, ["", "a dog runs in the park ."], [["a cat ."], ["the dog runs in the park ."]])
    primary = METRICS.get(metric_id).key()
    assert not math.isnan(mixed.per_sample[primary][1])
    assert mixed.per_sample[primary][0] == (100.0 if metric_id == "ter" else 0.0)  # bert-score also sets 0


def test_rouge_l_max_on_cnn_dailymail_and_commongen():
    generations, references = shared_data.cnn_dailymail(2)
    result = compute("rouge_l_max", generations, references)
    assert result.per_sample["lexical/rouge_l_max"] == pytest.approx([0.22857142857142856, 0.2608695652173913])
    generations, references = shared_data.commongen(3)
    result = compute("rouge_l_max", generations, references)
    assert result.per_sample["lexical/rouge_l_max"] == pytest.approx([0.6, 0.5, 2 / 3])
    long_text = " ".join(["the cat sat on the mat ."] * 200)
    assert compute("rouge_l_max", [long_text], [[long_text, "x"]]).corpus["lexical/rouge_l_max"] == pytest.approx(1.0)


def test_meteor_on_commongen_with_wordnet():
    generations, references = shared_data.commongen(3)
    result = compute("meteor", generations, references)
    assert result.per_sample["lexical/meteor"] == pytest.approx([0.5902048319327732, 0.6233062330623306, 0.6724489795918367])


def test_meteor_tokenized_as_rl4lms_does():
    """tokenize: nltk is RL4LMs' METEOR, Hugging Face evaluate's ``meteor`` (word_tokenize, then nltk's
    meteor_score, the mean over samples): its documented example scores 0.6944. Contractions and punctuation are
    where the two tokenisations part (``didn't`` -> ``did n't``)."""
    example = (["It is a guide to action which ensures that the military always obeys the commands of the party"],
               [["It is a guide to action that ensures that the military will forever heed Party commands"]])
    assert round(compute("meteor", *example, tokenize="nltk").corpus["lexical/meteor"], 4) == 0.6944
    generations, references = ["He didn't go. She stayed."], [["He did not go, she stayed."]]
    nltk_words = compute("meteor", generations, references, tokenize="nltk").per_sample["lexical/meteor"][0]
    simple = compute("meteor", generations, references).per_sample["lexical/meteor"][0]
    # word_tokenize's tokens: [He, did, n't, go, ., She, stayed, .] against [He, did, not, go, ",", she, stayed, .]
    assert nltk_words == pytest.approx(0.703125) and simple == pytest.approx(0.5506172839506173)
    with pytest.raises(ConfigError, match="tokenize"):
        parse(METRICS.get("meteor").Args, {"tokenize": "punkt"}, "args")


def test_meteor_without_wordnet_names_the_resource_and_the_fix(monkeypatch, tmp_path):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(LookupError, match=r"'wordnet'.*nltk\.downloader wordnet"):
        compute("meteor", ["a"], [["a"]])


def test_cider_d_on_commongen():
    generations, references = shared_data.commongen(3)
    result = compute("cider", generations, references, tokenize="simple")  # the default is rl4lms (below)
    assert result.per_sample["lexical/cider"] == pytest.approx([1.198010527448764, 0.9303833926564166, 1.6749970206305762])
    assert result.corpus["lexical/cider"] == pytest.approx(1.2677969802452522)


def test_spice_without_corenlp_jars_says_what_to_install(tmp_path):
    with pytest.raises(RuntimeError, match=r"Java.*stanford-corenlp-3\.6\.0\.jar.*corenlp_dir"):
        compute("spice", ["a"], [["a"]], corenlp_dir=str(tmp_path))


def test_bert_score_with_the_shipped_minilm_on_commongen():
    generations, references = shared_data.commongen(2)
    result = compute("bert_score", generations, references)
    assert result.per_sample["semantic/bert_score"] == pytest.approx([0.599810004234314, 0.7425967454910278], abs=1e-5)
    assert result.per_sample["semantic/bert_score_precision"] == pytest.approx([0.5824877023696899, 0.6855392456054688], abs=1e-5)
    assert result.per_sample["semantic/bert_score_recall"] == pytest.approx([0.6181941032409668, 0.8100144267082214], abs=1e-5)


def test_bert_score_idf_weighs_tokens_by_the_batchs_references_as_bert_score_does():
    """idf: true parsed and built, then failed at its first batch: bert-score's IDF weights were never computed."""
    from bert_score import score

    from grueflow.metrics.semantic import SHIPPED_MINILM_LAYERS, shipped_minilm

    generations, references = shared_data.commongen(3)
    result = compute("bert_score", generations, references, idf=True)
    precision, recall, f1 = score(generations, references, model_type=shipped_minilm(),
                                  num_layers=SHIPPED_MINILM_LAYERS, idf=True)
    assert result.per_sample["semantic/bert_score"] == pytest.approx(f1.tolist(), abs=1e-5)
    assert result.per_sample["semantic/bert_score_recall"] == pytest.approx(recall.tolist(), abs=1e-5)
    assert result.per_sample["semantic/bert_score"] != pytest.approx(
        compute("bert_score", generations, references).per_sample["semantic/bert_score"], abs=1e-4)
    # the IDF counts every sample's references, an empty generation's too, as bert_score.score does
    emptied = compute("bert_score", ["", *generations[1:]], references, idf=True)
    assert emptied.per_sample["semantic/bert_score"][1:] == pytest.approx(f1.tolist()[1:], abs=1e-5)


def test_vader_on_dailydialog_and_unicode():
    utterances = shared_data.dailydialog(4)
    result = compute("vader_sentiment", utterances, [[]] * 4)
    assert result.per_sample["task/vader_sentiment"] == pytest.approx([0.4404, -0.2263, 0.2732, 0.4404])
    assert compute("vader_sentiment", ["Schön 😊 great!", ""], [[], []]).per_sample["task/vader_sentiment"] == [0.8858, 0.0]


def test_exact_match_and_token_f1_by_hand():
    generations = ["The Eiffel Tower!", "a red car", "blue"]
    references = [["eiffel tower"], ["the red bus", "car"], ["Bleu"]]
    assert compute("exact_match", generations, references).per_sample["task/exact_match"] == [1.0, 0.0, 0.0]
    f1 = compute("token_f1", generations, references).per_sample["task/token_f1"]
    assert f1 == pytest.approx([1.0, 2 * (1 / 2) * (1 / 1) / (1 / 2 + 1), 0.0])  # "red car" vs "car": P 1/2, R 1
    assert compute("token_f1", ["the"], [["a"]]).per_sample["task/token_f1"] == [1.0]  # both empty after normalising
    # SQuAD v2: a reference with nothing left after normalising is dropped beside a real answer (an empty
    # generation scored 1.0 against ["Paris", "The"], a reward for saying nothing)
    for metric in ("exact_match", "token_f1"):
        scored = compute(metric, ["", "", "paris", ""], [["Paris", "The"], ["Paris", "..."], ["Paris", ""], ["", "A"]])
        assert scored.per_sample[f"task/{metric}"] == [0.0, 0.0, 1.0, 1.0]  # the last: no answer, nothing said


def test_msttr_entropy_and_self_bleu():
    result = compute("msttr", ["a a b", "c d d"], [[], []], window=2)
    assert result.corpus["diversity/msttr"] == pytest.approx((0.5 + 1.0 + 0.5) / 3)  # [a a] [b c] [d d]
    assert result.per_sample["diversity/msttr"] == pytest.approx([2 / 3, 2 / 3])
    assert math.isnan(compute("msttr", ["a b"], [[]]).corpus["diversity/msttr"])  # fewer words than one window
    with pytest.raises(ConfigError, match="window"):
        compute("msttr", ["a"], [[]], window=0)
    entropy = compute("ngram_entropy", ["a b a b", ""], [[], []])
    assert entropy.per_sample["diversity/entropy"] == [pytest.approx(1.0), 0.0]  # the empty one: no diversity
    assert compute("ngram_entropy", ["a b c d"], [[]], n=2).corpus["diversity/entropy"] == pytest.approx(math.log2(3))
    utterances = shared_data.dailydialog(4)
    self_bleu = compute("self_bleu", utterances, [[]] * 4)
    assert self_bleu.per_sample["diversity/self_bleu"] == pytest.approx(
        [7.410494411527525, 7.603985612048923, 4.016138436407654, 4.368583925857938])
    assert math.isnan(compute("self_bleu", ["alone"], [[]]).corpus["diversity/self_bleu"])


def test_diversity_scores_a_generation_with_nothing_to_count_as_no_diversity():
    """msttr of an empty generation and ngram_entropy (n >= 2) of a one-word one were NaN per sample, so evaluation
    left such samples out of a method's corpus reward: a method answering the hard prompts with nothing scored
    higher than one answering all. Per sample they score the minimum, 0; the corpus scores count the words there
    are, as GEM (RL4LMs) does, and stay NaN only where the whole batch has nothing to count."""
    msttr = compute("msttr", ["a a b", "", "  "], [[]] * 3, window=2)
    assert msttr.per_sample["diversity/msttr"] == [pytest.approx(2 / 3), 0.0, 0.0]
    assert msttr.corpus["diversity/msttr"] == 0.5  # [a a], and [b] (shorter than a window) dropped
    assert msttr.corpus["diversity/msttr"] == compute("msttr", ["a a b"], [[]], window=2).corpus["diversity/msttr"]
    empty = compute("msttr", ["", ""], [[]] * 2, window=2)
    assert empty.per_sample["diversity/msttr"] == [0.0, 0.0] and math.isnan(empty.corpus["diversity/msttr"])
    bigrams = compute("ngram_entropy", ["a b c", "terrible", ""], [[]] * 3, n=2)
    assert bigrams.per_sample["diversity/entropy"] == [pytest.approx(1.0), 0.0, 0.0]
    assert bigrams.corpus["diversity/entropy"] == pytest.approx(1.0)  # (a b) (b c): the others add no bigram
    words = compute("ngram_entropy", ["terrible", "awful"], [[]] * 2, n=2)
    assert words.per_sample["diversity/entropy"] == [0.0, 0.0] and math.isnan(words.corpus["diversity/entropy"])
    assert compute("ngram_entropy", ["terrible"], [[]]).per_sample["diversity/entropy"] == [0.0]  # one unigram: 0


def test_shaping_terms_by_hand():
    lengths = compute("length_penalty", ["a b c", "", "a b c d e f g"], [[]] * 3, target_length=5, per_word=0.5)
    assert lengths.per_sample["shaping/length_penalty"] == [-1.0, -2.5, -1.0]
    repeats = compute("repeat_penalty", ["The dog and the dog ran to the dog park", "a cat sat"], [[], []])
    assert repeats.per_sample["shaping/repeat_penalty"] == [-2.0, 0.0]  # "dog" thrice; "the" is a stopword
    others = compute("repeat_penalty", ["naïve naïve", "собака собака собака"], [[], []])
    assert others.per_sample["shaping/repeat_penalty"] == [-1.0, -2.0]  # ASCII letters only gave -2 and 0
    with pytest.raises(ConfigError, match="per_word"):
        compute("length_penalty", ["a"], [[]], per_word=-1.0)


def tiny_classifier(tokenizer_dir, out, labels):
    """A 1-layer BERT classifier built from config (seeded) and saved with the tiny models' tokenizer.

    Returns a function giving its label probabilities of a text, or of a ``(text, text_pair)``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)})
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)

    def probs(text, text_pair=None):
        with torch.no_grad():
            return model(**tokenizer(text, text_pair, return_tensors="pt")).logits.softmax(-1)[0].tolist()

    return probs


def test_learned_classifier_scores_a_label_of_a_local_model(tiny_models, tmp_path):
    probs = tiny_classifier(tiny_models["causal"], tmp_path, ["NEGATIVE", "POSITIVE"])
    texts = ["the acting was great .", "dull film"]
    pos = compute("learned_classifier", texts, [[], []], model=str(tmp_path), label="POSITIVE").per_sample["learned/classifier"]
    neg = compute("learned_classifier", texts, [[], []], model=str(tmp_path), label="NEGATIVE").per_sample["learned/classifier"]
    assert pos == pytest.approx([probs(t)[1] for t in texts], abs=1e-5)
    assert [p + n for p, n in zip(pos, neg)] == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="NEGATIVE, POSITIVE"):
        compute("learned_classifier", texts, [[], []], model=str(tmp_path), label="positive")


def test_a_classifier_under_the_home_folder_is_found_as_written(tiny_models, tmp_path, monkeypatch):
    """model: ~/cls was reported missing though it existed (the ~ was never expanded)."""
    tiny_classifier(tiny_models["causal"], tmp_path / "cls", ["NEGATIVE", "POSITIVE"])
    monkeypatch.setenv("HOME", str(tmp_path))
    texts = ["the acting was great .", "dull film"]
    home = compute("learned_classifier", texts, [[], []], model="~/cls", label="POSITIVE").per_sample
    assert home == compute("learned_classifier", texts, [[], []], model=str(tmp_path / "cls"), label="POSITIVE").per_sample


def test_intent_accuracy_on_dailydialog_acts(tiny_models, tmp_path):
    acts = ["inform", "question", "directive", "commissive"]  # DailyDialog's act ids 1..4
    probs = tiny_classifier(tiny_models["causal"], tmp_path, acts)
    utterances = shared_data.dailydialog(4)
    targets = [int(a) - 1 for a in shared_data.dailydialog_acts(4)]
    metric = METRICS.get("intent_accuracy")
    fn = metric.build(parse(metric.Args, {"model": str(tmp_path)}, "args"), CTX)
    prompts, generations = utterances[:3], utterances[1:]
    result = fn(prompts, generations, [[]] * 3, [{"intent": t} for t in targets[1:]])
    # the default context is RL4LMs' last turn (here the whole prompt: no <EOU> in it) joined to the generation
    predicted = [max(range(4), key=probs(p + g).__getitem__) for p, g in zip(prompts, generations)]
    assert result.per_sample["task/intent_accuracy"] == [float(p == t) for p, t in zip(predicted, targets[1:])]
    by_name = fn(prompts, generations, [[]] * 3, [{"intent": acts[t]} for t in targets[1:]])
    assert by_name.per_sample == result.per_sample
    with pytest.raises(ValueError, match=r"meta\['intent'\]"):
        fn(prompts, generations, [[]] * 3, [{}] * 3)


def test_intent_accuracy_cuts_a_long_context_never_the_generation(tiny_models, tmp_path):
    """Cut from the right, a dialogue longer than max_length lost its generation: the score was the prompt's alone,
    the same for every generation."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tiny_classifier(tiny_models["causal"], tmp_path, ["inform", "question", "directive", "commissive"])
    model = BertForSequenceClassification.from_pretrained(tmp_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path, truncation_side="left")
    metric = METRICS.get("intent_accuracy")
    fn = metric.build(parse(metric.Args, {"model": str(tmp_path), "context": "prompt", "max_length": 12}, "args"), CTX)
    prompt = " ".join(["so what did you do at the weekend ?"] * 20)
    generations = ["we went hiking .", "could you pass me the salt ?", "i will call you tomorrow", "stop it now !",
                   "the weather is nice", "do you like tea ?", "please sit down", "i promise to come"]

    def label(generation):  # the last 12 tokens of the prompt, a space, the generation: the generation whole
        encoded = tokenizer(f"{prompt} {generation}", truncation=True, max_length=12, return_tensors="pt")
        assert encoded.input_ids[0, -3:].tolist() == tokenizer(f" {generation}").input_ids[-3:]
        with torch.no_grad():
            return int(model(**encoded).logits[0].argmax())

    wanted = [label(g) for g in generations]
    assert len(set(wanted)) > 1  # the generation moves the prediction: a cut that dropped it could not
    result = fn([prompt] * len(generations), generations, [[]] * len(generations), [{"intent": t} for t in wanted])
    assert result.per_sample["task/intent_accuracy"] == [1.0] * len(generations)
    default = metric.build(parse(metric.Args, {"model": str(tmp_path)}, "args"), CTX)
    assert default.compute is not None  # no max_length: the model's 512 positions, RL4LMs' limit


def test_missing_optional_dependency_names_the_package(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vaderSentiment.vaderSentiment", None)
    with pytest.raises(ImportError, match="pip install vaderSentiment"):
        compute("vader_sentiment", ["x"], [[]])
    monkeypatch.setitem(sys.modules, "pycocoevalcap.cider.cider", None)
    with pytest.raises(ImportError, match="pip install pycocoevalcap"):
        compute("cider", ["x"], [["x"]])

S = 1e-5  # PARENT's default smoothing
TABLE = [["name", "Michael Dahlquist"], ["occupation", "drummer"]]


def test_parent_by_hand_unigrams():
    result = compute("parent", ["michael dahlquist was a drummer", "michael was born"],
                     [["michael dahlquist was a musician"], ["michael dahlquist was a drummer"]],
                     [{"table": TABLE}] * 2, max_order=1)
    w = S / (1 + S)  # entailment of a word that is not among the table's values
    # 1: every predicted word is in the reference or the table; "was", "a", "musician" weigh w in recall
    ref_recall = (2 + 2 * w) / (2 + 3 * w)
    p, r = 1.0, math.sqrt(ref_recall * 1.0)
    # 2: "born" is in neither; the reference's "dahlquist", "a", "drummer" are missed; LCS 1 of 2 with the name
    p2 = (2 + w) / 3
    ref_recall2 = (1 + w) / (3 + 2 * w)
    table_recall2 = ((1 + S) / (2 + S) + S / (1 + S)) / 2
    r2 = math.sqrt(ref_recall2 * table_recall2)
    assert result.per_sample["task/parent_precision"] == pytest.approx([p, p2])
    assert result.per_sample["task/parent_recall"] == pytest.approx([r, r2])
    assert result.per_sample["task/parent_f"] == pytest.approx([2 * p * r / (p + r + 1e-8), 2 * p2 * r2 / (p2 + r2 + 1e-8)])


def test_parent_smooths_missing_orders_and_takes_the_best_reference():
    result = compute("parent", ["michael dahlquist"], [["someone else", "michael dahlquist"]], [{"table": TABLE[:1]}])
    p = math.sqrt(S)  # orders 1, 2 exact; orders 3, 4 have no n-grams: precision smoothed, recall 1
    assert result.per_sample["task/parent_precision"] == pytest.approx([p])
    assert result.per_sample["task/parent_recall"] == pytest.approx([1.0])
    assert result.per_sample["task/parent_f"] == pytest.approx([2 * p / (p + 1 + 1e-8)])
    assert math.isnan(compute("parent", ["x"], [[]], [{"table": TABLE}]).corpus["task/parent_f"])
    with pytest.raises(ValueError, match=r"meta\['table'\]"):
        compute("parent", ["x"], [["x"]], [{}])


def test_new_metrics_compose_into_a_weighted_reward():
    from grueflow.config import RewardConfig
    from grueflow.metrics.reward import Reward

    cfg = parse(RewardConfig, {"components": [
        {"metric": "token_f1", "weight": 1.0},
        {"metric": "length_penalty", "weight": 2.0, "args": {"target_length": 2, "per_word": 0.25}},
        {"metric": "bert_score", "score": "bert_score_recall", "weight": 0.0}]}, "reward")
    total, parts = Reward(cfg, CTX)(["q", "q"], ["red car", "a big blue bus"], [["car"], ["blue bus"]], [{}, {}])
    assert list(parts) == ["task/token_f1", "shaping/length_penalty", "semantic/bert_score_recall"]
    assert parts["task/token_f1"] == pytest.approx([2 / 3, 0.8])
    assert parts["shaping/length_penalty"] == [0.0, -0.5]
    assert total == pytest.approx([2 / 3, 0.8 - 1.0])


def test_parent_on_totto_matches_the_authors_algorithm():
    # literals from the algorithm of google-research/language table_text_eval.py (defaults: lambda 0.5,
    # smoothing 1e-5, order 4), run on the same tokens
    generations, references, tables = shared_data.totto(2)
    result = compute("parent", generations, references, [{"table": t} for t in tables])
    assert result.per_sample["task/parent_f"] == pytest.approx([0.8943071551105031, 0.8643829617059006], rel=1e-9)
    assert result.per_sample["task/parent_precision"] == pytest.approx([0.8251897645200484, 0.7611615042090416], rel=1e-9)
    assert result.per_sample["task/parent_recall"] == pytest.approx([0.9760614791964647, 0.9999923963837609], rel=1e-9)


def test_every_metric_through_the_evaluate_api_offline(monkeypatch, tmp_path):
    import evaluate

    from grueflow.metrics import hf_evaluate
    from grueflow.registry import UnknownNameError

    generations, references = shared_data.iwslt(3)
    chrf = hf_evaluate.GrueflowMetric("chrf", keep_in_memory=True)
    assert chrf.compute(predictions=generations, references=references) == {"lexical/chrf": pytest.approx(88.51376363998547)}
    monkeypatch.setattr(evaluate.config, "HF_MODULES_CACHE", tmp_path / "modules")
    ter = evaluate.load(hf_evaluate.__file__, "ter", keep_in_memory=True)
    assert ter.compute(predictions=generations, references=references) == {"lexical/ter": pytest.approx(10.714285714285714)}
    lowered = hf_evaluate.GrueflowMetric("chrf", keep_in_memory=True)
    assert lowered.compute(predictions=["A Cat ."], references=[["a cat ."]], args={"lowercase": True}) == {"lexical/chrf": 100.0}
    with pytest.raises(UnknownNameError, match="valid metric ids: bert_score"):
        hf_evaluate.GrueflowMetric("rogue")


def test_sentences_are_split_without_nltk_data():
    from grueflow.metrics.sentences import split_sentences

    _, references = shared_data.cnn_dailymail(1)
    highlights = references[0][0]  # PTB-tokenised: every sentence ends with " ."
    expected = [part if part.endswith(" .") else f"{part} ." for part in highlights.split(" . ")]
    assert len(expected) == 3 and split_sentences(highlights) == expected
    assert split_sentences("Mr. Smith arrived at 5 p.m. on Jan. 3! Did he?") == [
        "Mr. Smith arrived at 5 p.m. on Jan. 3!", "Did he?"]
    assert split_sentences("  ") == []


def test_rouge_lsum_scores_sentence_by_sentence_on_cnn_dailymail():
    from rouge_score import rouge_scorer

    _, references = shared_data.cnn_dailymail(1)
    first, _, last = references[0][0].split(" . ")  # the three highlight sentences
    pieces = [" ".join(last.split()[:6]), first + " ."]  # part of the last, then the first: order matters for L only
    generation = " . ".join(pieces)
    split = compute("rouge", [generation], references).per_sample
    joined = compute("rouge", [generation], references, split_sentences=False).per_sample
    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    by_lines = scorer.score("\n".join(references[0][0].split(" . ")), "\n".join(pieces))
    assert split["lexical/rougeLsum"] == pytest.approx([by_lines["rougeLsum"].fmeasure])
    assert split["lexical/rougeLsum"] == pytest.approx([0.6428571428571429])
    assert joined["lexical/rougeLsum"] == joined["lexical/rougeL"] == split["lexical/rougeL"]
    assert split["lexical/rougeLsum"][0] > split["lexical/rougeL"][0]


def test_bleurt_scores_reference_candidate_pairs_with_a_local_checkpoint(tiny_models, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tiny_classifier(tiny_models["causal"], tmp_path, ["score"])
    model, tokenizer = AutoModelForSequenceClassification.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tmp_path)

    def bleurt(reference, candidate):
        with torch.no_grad():
            return model(**tokenizer(reference, candidate, return_tensors="pt")).logits[0, 0].item()

    generations = ["the film was great .", "a dull film"]
    references = [["the movie was great .", "great film"], []]
    result = compute("bleurt", generations, references, checkpoint=str(tmp_path)).per_sample["semantic/bleurt"]
    assert result[0] == pytest.approx(max(bleurt(r, generations[0]) for r in references[0]), abs=1e-5)
    assert math.isnan(result[1])
    with pytest.raises(ConfigError, match="needs args.checkpoint"):
        compute("bleurt", generations, references)
    tiny_classifier(tiny_models["causal"], tmp_path / "three", ["a", "b", "c"])
    with pytest.raises(ValueError, match="3 labels"):
        compute("bleurt", generations, references, checkpoint=str(tmp_path / "three"))


def test_summac_zs_takes_the_best_source_sentence_for_each_summary_sentence(tiny_models, tmp_path):
    from grueflow.metrics.sentences import split_sentences

    probs = tiny_classifier(tiny_models["causal"], tmp_path, ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"])
    articles, references = shared_data.cnn_dailymail(2)
    summaries = [references[0][0], "", references[1][0]]
    documents = [articles[0] + " " + references[0][0], "The source .", articles[1]]
    metric = METRICS.get("summac_zs")
    fn = metric.build(parse(metric.Args, {"model": str(tmp_path)}, "args"), CTX)
    scores = fn(documents, summaries, [[]] * 3, [{}] * 3).per_sample["semantic/summac_zs"]

    def by_hand(document, summary):
        best = [max(p[0] - p[2] for p in (probs(d, s) for d in split_sentences(document)))
                for s in split_sentences(summary)]
        return sum(best) / len(best)

    assert scores[0] == pytest.approx(by_hand(documents[0], summaries[0]), abs=1e-5)
    assert scores[1] == 0.0  # an empty summary, as in SummaC
    assert scores[2] == pytest.approx(by_hand(documents[2], summaries[2]), abs=1e-5)
    from_meta = metric.build(parse(metric.Args, {"model": str(tmp_path), "document_key": "article"}, "args"), CTX)
    assert from_meta(["p"] * 3, summaries, [[]] * 3, [{"article": d} for d in documents]).per_sample == {
        "semantic/summac_zs": scores}
    tiny_classifier(tiny_models["causal"], tmp_path / "sentiment", ["NEGATIVE", "POSITIVE"])
    with pytest.raises(ValueError, match="NEGATIVE, POSITIVE"):
        metric.build(parse(metric.Args, {"model": str(tmp_path / "sentiment")}, "args"), CTX)


@pytest.fixture(scope="module")
def model_args(tiny_models, tmp_path_factory):
    """Args for the metrics that need a model: tiny models built from config and saved locally."""
    root = tmp_path_factory.mktemp("metric_models")
    tiny_classifier(tiny_models["causal"], root / "sentiment", ["NEGATIVE", "POSITIVE"])
    tiny_classifier(tiny_models["causal"], root / "acts", ["inform", "question", "directive", "commissive"])
    tiny_classifier(tiny_models["causal"], root / "bleurt", ["score"])
    tiny_classifier(tiny_models["causal"], root / "nli", ["entailment", "neutral", "contradiction"])
    from grueflow.preference.config import RewardModelConfig
    from grueflow.preference.reward_model import load_backbone, save_reward_model
    from test_summac_conv import random_checkpoint

    save_reward_model(*load_backbone(tiny_models["causal"]), RewardModelConfig(), root / "reward_model")  # untrained head
    summac_conv = {"model": str(root / "nli"), "checkpoint": random_checkpoint(root / "summac_conv.bin", 23)}
    return {"learned_classifier": {"model": str(root / "sentiment")}, "intent_accuracy": {"model": str(root / "acts")},
            "bleurt": {"checkpoint": str(root / "bleurt")}, "summac_zs": {"model": str(root / "nli")},
            "summac_conv": summac_conv,
            "perplexity": {"model": str(tiny_models["causal"])}, "reward_model": {"path": str(root / "reward_model")}}


@pytest.mark.parametrize("metric_id", sorted(m for m in describe() if METRICS.get(m).rewardable))
def test_every_metric_id_is_a_weighted_reward(metric_id, model_args):
    """The acceptance of issue 4: any registered id that scores the generations can be named as a reward, alone
    or weighted (``reference_perplexity`` scores the evaluated model: tests/unit/test_reference_perplexity.py)."""
    from grueflow.config import RewardConfig
    from grueflow.metrics.reward import Reward

    generations, references = shared_data.commongen(2)
    meta = [{"concepts": ["dog", "park"], "intent": 1, "table": TABLE}] * 2
    components = {"components": [
        {"metric": metric_id, "weight": 0.5, "args": model_args.get(metric_id, {})},
        {"metric": "length_penalty" if metric_id != "length_penalty" else "repeat_penalty", "weight": 1.0}]}
    try:
        cfg = parse(RewardConfig, components, "reward")
    except ConfigError as error:  # only SPICE may miss a system dependency (Java, CoreNLP jars): refused when parsed
        assert metric_id == "spice" and "reward component 'spice' cannot run on this machine" in str(error)
        return
    reward = Reward(cfg, CTX)
    total, parts = reward(["p", "p"], generations, references, meta)
    primary, shaping = list(parts)
    assert primary == METRICS.get(metric_id).key() and reward.weights == {primary: 0.5, shaping: 1.0}
    assert all(math.isfinite(v) for v in parts[primary])
    assert total == pytest.approx([0.5 * a + b for a, b in zip(parts[primary], parts[shaping])])
    metric = METRICS.get(metric_id)  # it writes exactly the keys it declares (evaluate checks headlines by them)
    result = metric.build(parse(metric.Args, model_args.get(metric_id, {}), "args"), CTX)(
        ["p", "p"], generations, references, meta)
    assert set(result.corpus) == set(metric.keys()) and set(result.per_sample) == {metric.key(s) for s in metric.scores}



@pytest.mark.parametrize("prompt,generation,score", [
    ("generate a sentence with: dog frisbee catch throw.", "The dog catches the frisbee.", 0.0),
    # RL4LMs cuts the concept_end_token "." and looks for the concept list as written, case-insensitively
    ("generate a sentence with: dog frisbee catch throw.", "Dog Frisbee Catch Throw", -1.0),
    ("generate a sentence with: dog frisbee catch throw.", "a sentence about a dog", -1.0),
    ("generate a sentence with: dog frisbee catch throw.", "I generate dogs", -1.0),
    ("generate a sentence with: dog frisbee catch throw.", "generate a sentence with: a dog", -1.0),
    # grueflow's common_gen prompt has no end token: nothing is cut
    ("generate a sentence with: dog frisbee catch throw", "dog frisbee catch throw", -1.0),
    ("generate a sentence with: dog frisbee catch throw", "dog frisbee catch", 0.0),
])
def test_common_gen_repeat_penalty_is_rl4lms_shaping(prompt, generation, score):
    metric = METRICS.get("common_gen_repeat_penalty")
    result = metric.build(metric.Args(), MetricContext())([prompt], [generation], [()], [{}])
    assert result.per_sample["shaping/common_gen_penalty"] == [score]


def _reference_cider(generations, references, tokenize):
    """CIDEr as the reference code computes it: ``tokenize`` over the (gts, res) dicts with string keys, then
    pycocoevalcap's Cider (the scorer RL4LMs' caption_metrics/cider.py copies)."""
    from pycocoevalcap.cider.cider import Cider

    gts = tokenize({str(i): list(refs) for i, refs in enumerate(references)})
    res = tokenize({str(i): [g] for i, g in enumerate(generations)})
    corpus, each = Cider().compute_score(gts, res)
    return corpus, list(each)


def _rl4lms_tokenize(texts):  # RL4LMs' Cider.tokenize, with spacy.blank("en")'s tokenizer for en_core_web_sm's
    import spacy

    nlp = spacy.blank("en")
    out = {}
    for key, sentences in texts.items():
        out[key] = []
        for sentence in sentences:
            a = ""
            for token in nlp(str(sentence)):
                a += token.text
                a += " "
            out[key].append(a.rstrip())
    return out


def _coco_tokenize(texts):  # the COCO caption evaluation's own step
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    return PTBTokenizer().tokenize({key: [{"caption": s} for s in sentences] for key, sentences in texts.items()})


@pytest.mark.parametrize("data", ["commongen", "iwslt"])
@pytest.mark.parametrize("tokenize,reference", [("rl4lms", _rl4lms_tokenize), ("coco_ptb", _coco_tokenize)])
def test_cider_tokenizes_as_rl4lms_or_the_coco_toolkit(data, tokenize, reference):
    generations, references = getattr(shared_data, data)(12)
    result = compute("cider", generations, references, tokenize=tokenize)
    corpus, each = _reference_cider(generations, references, reference)
    assert result.per_sample["lexical/cider"] == pytest.approx(each, rel=1e-12)
    assert result.corpus["lexical/cider"] == pytest.approx(corpus, rel=1e-12)


def test_cider_tokenizers_differ_where_the_paper_says():
    rl4lms = METRICS.get("cider")
    from grueflow.metrics.captioning import ptb_tokens, simple_tokens, spacy_tokens

    text = ["The dog's ball, isn't it?"]
    assert spacy_tokens()(text) == ["The dog 's ball , is n't it ?"]  # case and punctuation kept
    assert ptb_tokens("java")(text) == ["the dog 's ball is n't it"]  # lower case, punctuation dropped
    assert simple_tokens(text) == ["the dog ' s ball , isn ' t it ?"]
    assert rl4lms.Args().tokenize == "rl4lms"
    with pytest.raises(ConfigError, match="tokenize must be one of rl4lms, coco_ptb, simple, got 'ptb'"):
        compute("cider", ["a"], [["a"]], tokenize="ptb")
    with pytest.raises(MetricUnavailableError, match="Java, and 'no-such-java' is not on PATH"):
        compute("cider", ["a"], [["a"]], tokenize="coco_ptb", java="no-such-java")


REFERENCE_METRICS = [("bleu", {}), ("bleu", {"recipe": "totto"}), ("sacrebleu", {}), ("sentence_bleu", {}),
                     ("chrf", {}), ("chrf_plus_plus", {}), ("ter", {}), ("one_minus_ter", {}), ("rouge", {}),
                     ("rouge_l_max", {}), ("rouge_l_max", {"package": "py_rouge"}), ("meteor", {}),
                     ("meteor", {"tokenize": "nltk"}), ("cider", {}), ("exact_match", {}), ("token_f1", {}),
                     ("bert_score", {}), ("parent", {}), ("parent", {"recipe": "totto"})]


@pytest.mark.parametrize("metric_id,args", REFERENCE_METRICS)
def test_a_sample_without_references_is_nan_and_left_out_of_the_corpus(metric_id, args):
    """Every reference metric: NaN for the sample with no reference, and the corpus score of the other samples
    scored alone; NaN throughout when no sample has a reference."""
    generations, references = shared_data.commongen(3)
    meta = [{"table": TABLE, "raw_table": [[{"value": v} for _, v in TABLE]], "page_title": "Dahlquist"}] * 4
    mixed = compute(metric_id, generations[:2] + ["an unreferenced sample"] + generations[2:],
                    references[:2] + [[]] + references[2:], meta, **args)
    alone = compute(metric_id, generations, references, meta[:3], **args)
    for key, scores in mixed.per_sample.items():
        assert math.isnan(scores[2]) and scores[:2] + scores[3:] == pytest.approx(alone.per_sample[key], rel=1e-9)
    assert mixed.corpus == pytest.approx(alone.corpus, rel=1e-9)
    none = compute(metric_id, generations[:2], [[], []], meta[:2], **args)
    assert all(math.isnan(v) for scores in none.per_sample.values() for v in scores)
    assert all(math.isnan(v) for v in none.corpus.values())


def test_bleu_without_references_matches_sacrebleu_on_the_rest():
    import sacrebleu

    generations, references = shared_data.iwslt(3)
    result = compute("bleu", [generations[0], "x", generations[1], generations[2]],
                     [references[0], [], references[1], references[2]])
    expected = [sacrebleu.sentence_bleu(g, r).score for g, r in zip(generations, references)]
    scores = result.per_sample["lexical/bleu"]
    assert math.isnan(scores[1]) and scores[:1] + scores[2:] == pytest.approx(expected, rel=1e-12)
    corpus = sacrebleu.corpus_bleu(generations, [[r[0] for r in references]]).score
    assert result.corpus["lexical/bleu"] == pytest.approx(corpus, rel=1e-12) and 0 < corpus < 100


INTENT_LABELS = "0 (inform), 1 (question), 2 (directive), 3 (commissive)"


@pytest.mark.parametrize("meta, found", [
    ({"intent": 4}, "sample 1 has meta['intent'] = 4 (int)"),
    ({"intent": 7}, "sample 1 has meta['intent'] = 7 (int)"),
    ({"intent": -1}, "sample 1 has meta['intent'] = -1 (int)"),
    ({"intent": True}, "sample 1 has meta['intent'] = True (bool)"),
    ({"intent": 2.7}, "sample 1 has meta['intent'] = 2.7 (float)"),
    ({"intent": float("nan")}, "sample 1 has meta['intent'] = nan (float)"),
    ({"intent": None}, "sample 1 has meta['intent'] = None (NoneType)"),
    ({"intent": "5"}, "sample 1 has meta['intent'] = '5' (str)"),
    ({"intent": [1]}, "sample 1 has meta['intent'] = [1] (list)"),
    ({"act": 1}, "sample 1 has no 'intent' among its meta keys ['act']"),
], ids=["4", "7", "minus-1", "true", "2.7", "nan", "none", "str-5", "list", "missing"])
def test_intent_accuracy_refuses_a_target_the_classifier_cannot_predict_before_generating(tiny_models, tmp_path, meta,
                                                                                          found):
    from grueflow.data import Sample
    from grueflow.evaluation import Scorer
    from grueflow.io import DataError

    tiny_classifier(tiny_models["causal"], tmp_path, ["inform", "question", "directive", "commissive"])
    spec = parse(MetricSpec, {"id": "intent_accuracy", "args": {"model": str(tmp_path)}}, "metrics[0]")
    samples = [Sample("a", "hi <EOU>", (), {"intent": 1}), Sample("b", "hello <EOU>", (), meta)]
    expect = (f"metric 'intent_accuracy' needs meta['intent'] in every sample, a label of {tmp_path} by name or id: "
              f"{INTENT_LABELS}; {found}; fix the datapool's meta, or set args.model to a classifier with its labels")
    scorer = Scorer(None, (spec,), CTX)
    with pytest.raises(DataError) as before:  # from the samples alone: no generation is needed
        scorer.check(samples)
    assert str(before.value) == expect
    with pytest.raises(DataError) as scoring:  # and scoring checks the same
        scorer(samples, ["fine", "fine"])
    assert str(scoring.value) == expect


def test_intent_accuracy_takes_label_names_ids_and_integral_floats(tiny_models, tmp_path):
    from grueflow.data import Sample
    from grueflow.evaluation import Scorer

    tiny_classifier(tiny_models["causal"], tmp_path, ["inform", "question", "directive", "commissive"])
    spec = parse(MetricSpec, {"id": "intent_accuracy", "args": {"model": str(tmp_path)}}, "metrics[0]")
    scorer = Scorer(None, (spec,), CTX)
    by = {"id": [0, 1, 2, 3], "name": ["inform", "question", "directive", "commissive"], "float": [0.0, 1.0, 2.0, 3.0]}
    scores = {}
    for kind, intents in by.items():
        samples = [Sample(str(i), "hi <EOU>", (), {"intent": t}) for i, t in enumerate(intents)]
        _, corpus, _ = scorer.check(samples)(samples, ["fine"] * 4)
        scores[kind] = corpus["task/intent_accuracy"]
    assert scores["id"] == scores["name"] == scores["float"] == 0.25  # one label is predicted, for the same text


def test_intent_accuracy_max_length_above_the_classifiers_positions_is_refused_when_built(tiny_models, tmp_path):
    tiny_classifier(tiny_models["causal"], tmp_path, ["inform", "question"])
    positions = json.loads((tmp_path / "config.json").read_text())["max_position_embeddings"]
    metric = METRICS.get("intent_accuracy")
    with pytest.raises(ConfigError, match=rf"^intent_accuracy: max_length {positions + 1} is above the {positions} "
                                          rf"positions of {tmp_path} \(its max_position_embeddings\); set "
                                          rf"args.max_length to at most {positions}$"):
        metric.build(parse(metric.Args, {"model": str(tmp_path), "max_length": positions + 1}, "args"), CTX)


def test_concept_coverage_refuses_samples_without_concepts_before_generating():
    from grueflow.data import Sample
    from grueflow.evaluation import Scorer
    from grueflow.io import DataError

    spec = parse(MetricSpec, {"id": "concept_coverage"}, "metrics[0]")
    samples = [Sample("a", "dog run", ("a dog runs",), {"concepts": ["dog", "run"]}), Sample("b", "x", ("x",), {})]
    with pytest.raises(DataError, match=r"1 of 2 samples lack it, the first \(sample 1\) has no 'concepts' among"):
        Scorer(None, (spec,), CTX).check(samples)
    Scorer(None, (spec,), CTX).check(samples[:1])


def test_bert_score_num_layers_above_the_encoders_layers_is_refused_when_built():
    from grueflow.metrics.semantic import shipped_minilm

    metric = METRICS.get("bert_score")
    encoder = shipped_minilm()
    with pytest.raises(ConfigError, match=rf"^bert_score: num_layers 7 is above the 6 layers of encoder "
                                          rf"{encoder}; set args.num_layers to at most 6$"):
        metric.build(parse(metric.Args, {"model": encoder, "num_layers": 7}, "args"), CTX)
    assert compute("bert_score", ["a dog runs"], [["a dog runs"]], model=encoder, num_layers=1).per_sample[
        "semantic/bert_score"][0] == pytest.approx(1.0, abs=1e-5)
