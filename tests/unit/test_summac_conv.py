"""SummaC-Conv (``summac_conv``): literal scores from an NLI model whose probabilities are fixed, a by-hand
computation (numpy histograms) on a seeded tiny NLI model, the summac package's own ``SummaCConv`` on the same
model and weights when it is importable (``pip install --no-deps summac==0.0.4``; skipped otherwise), and the
errors of a missing or mismatched checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_devices import meta_default
from test_metrics_library import tiny_classifier

from grueflow.config import ConfigError
from grueflow.device import Execution
from grueflow.io import MissingDataError
from grueflow.metrics import METRICS, MetricContext, MetricUnavailableError
from grueflow.metrics.sentences import split_sentences
from grueflow.params import parse

PERCENTILE = [0.0, 0.01, 0.02, 0.03, 0.04, 0.07, 0.13, 0.37, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.955, 0.96, 0.965,
              0.97, 0.975, 0.98, 0.985, 0.99, 0.995, 1.0]  # summac's bins="percentile", 23 bins
SOURCE = "The storm hit the coast on Monday. Thousands of homes lost power overnight. Schools stayed closed all week."
SHORT_FIRST = "Yes. It rained all day in the city. The match was called off early."  # "Yes." has 4 characters
SUMMARY = "A storm hit the coast. Many homes lost power."
LONG_SUMMARY = " ".join(f"The team played game number {k} on Sunday." for k in range(12))  # 12 sentences


def write_checkpoint(path, mlp_weight, mlp_bias, final_weight, final_bias) -> str:
    """A state dict in summac's SummaCConv format: mlp (1, F), (1,) and layer_final (2, 3), (2,)."""
    torch.save({"mlp.weight": torch.tensor([mlp_weight], dtype=torch.float32),
                "mlp.bias": torch.tensor([mlp_bias], dtype=torch.float32),
                "layer_final.weight": torch.tensor(final_weight, dtype=torch.float32),
                "layer_final.bias": torch.tensor(final_bias, dtype=torch.float32)}, path)
    return str(path)


def random_checkpoint(path, n_features: int, seed: int = 0) -> str:
    generator = torch.Generator().manual_seed(seed)
    mlp_weight, final_weight = torch.randn(n_features, generator=generator), torch.randn(2, 3, generator=generator)
    return write_checkpoint(path, (mlp_weight / 10).tolist(), 0.1, final_weight.tolist(), [0.2, -0.3])


def constant_nli(tokenizer_dir, out, labels, probs) -> None:
    """A tiny NLI model whose probabilities are ``probs`` for every pair: a zero classifier weight and a bias of
    their logs."""
    from transformers import BertForSequenceClassification

    tiny_classifier(tokenizer_dir, out, labels)
    model = BertForSequenceClassification.from_pretrained(out)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor(probs).log())
    model.save_pretrained(out)


def build(args: dict, execution=None):
    metric = METRICS.get("summac_conv")
    return metric.build(parse(metric.Args, args, "args"), MetricContext(execution=execution))


def score(fn, documents, summaries) -> list[float]:
    return fn(documents, summaries, [[]] * len(summaries), [{}] * len(summaries)).per_sample["semantic/summac_conv"]


@pytest.fixture(scope="module")
def fixed_nli(tiny_models, tmp_path_factory):
    """P(entailment) 0.5 (percentile bin 7, [0.37, 0.90)), P(neutral) 0.3 and P(contradiction) 0.2 (both bin 6,
    [0.13, 0.37)) for every pair."""
    out = tmp_path_factory.mktemp("fixed_nli")
    constant_nli(tiny_models["causal"], out, ["entailment", "neutral", "contradiction"], [0.5, 0.3, 0.2])
    return str(out)


def test_literal_scores_from_fixed_nli_probabilities(fixed_nli, tmp_path):
    """mlp weight k/10 on feature k, bias 0.1; layer_final logits (0.5 m + 0.2, m - 1), so the score is
    sigmoid(0.5 m - 1.2) with m the mean sentence score. With nli_labels e each summary sentence scores
    0.7 n + 0.1 (n source sentences, all in bin 7): n = 3 -> m = 2.2 -> sigmoid(-0.1); the 4-character "Yes." is
    dropped, n = 2 -> sigmoid(-0.45), kept with min_sentence_chars 0 -> sigmoid(-0.1); an empty summary is one
    zero (bin 0, weight 0) -> m = 0.1 -> sigmoid(-1.15); 12 identical rows, 10 read, same mean -> sigmoid(-0.1)."""
    final = ([[0.5, 0.0, 0.0], [0.0, 0.0, 1.0]], [0.2, -1.0])
    e_only = write_checkpoint(tmp_path / "e.bin", [k / 10 for k in range(23)], 0.1, *final)
    fn = build({"model": fixed_nli, "checkpoint": e_only})
    documents, summaries = [SOURCE, SHORT_FIRST, SOURCE, SOURCE], [SUMMARY, SUMMARY, "", LONG_SUMMARY]
    assert score(fn, documents, summaries) == pytest.approx(
        [0.47502081252106, 0.389360766050778, 0.24048908305088898, 0.47502081252106], abs=1e-6)
    keep_all = build({"model": fixed_nli, "checkpoint": e_only, "min_sentence_chars": 0})
    assert score(keep_all, [SHORT_FIRST], [SUMMARY]) == pytest.approx([0.47502081252106], abs=1e-6)
    assert score(build({"model": fixed_nli, "checkpoint": e_only, "max_doc_sents": 2}), [SOURCE], [SUMMARY]) == \
        pytest.approx([0.389360766050778], abs=1e-6)
    # nli_labels ec: 46 features, entailment's bin 7 (0.7) then contradiction's bin 23 + 6 (2.9): 3.6 n + 0.1, so
    # n = 2 -> m = 7.3 -> sigmoid(2.45); the empty summary's zero lands in bins 0 and 23 -> m = 2.4 -> 0.5
    ec = write_checkpoint(tmp_path / "ec.bin", [k / 10 for k in range(46)], 0.1, *final)
    fn = build({"model": fixed_nli, "checkpoint": ec, "nli_labels": "ec"})
    assert score(fn, [SHORT_FIRST, SOURCE], [SUMMARY, ""]) == pytest.approx([0.9205614508160216, 0.5], abs=1e-6)


def by_hand(probs, labels, checkpoint, edges, document, summary) -> float:
    """SummaC-Conv written out: numpy histograms of each summary sentence's probabilities over the source
    sentences (sentences of 10 characters or fewer dropped, 100 source and 10 summary sentences kept), the mlp
    on each, their mean m, layer_final on (m, m, m), the second softmax entry."""
    state = {k: v.double().numpy() for k, v in torch.load(checkpoint, weights_only=True).items()}
    source = [s for s in split_sentences(document) if len(s) > 10][:100]
    sentences = [s for s in split_sentences(summary) if len(s) > 10][:10]
    if source and sentences:
        images = [[probs(d, s) for d in source] for s in sentences]  # per summary sentence, per source sentence
        rows = [np.concatenate([np.histogram([p[i] for p in image], bins=edges)[0] for i in labels])
                for image in images]
    else:
        rows = [np.concatenate([np.histogram([0.0], bins=edges)[0] for _ in labels])]
    m = np.mean([row @ state["mlp.weight"][0] + state["mlp.bias"][0] for row in rows])
    logits = state["layer_final.weight"] @ np.array([m, m, m]) + state["layer_final.bias"]
    return float(math.exp(logits[1]) / (math.exp(logits[0]) + math.exp(logits[1])))


@pytest.fixture(scope="module")
def tiny_nli(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_nli")
    return str(out), tiny_classifier(tiny_models["causal"], out, ["entailment", "neutral", "contradiction"])


def test_scores_match_a_by_hand_computation_on_a_tiny_nli_model(tiny_nli, tmp_path):
    model, probs = tiny_nli
    documents = [SOURCE + " " + SUMMARY, SHORT_FIRST, SOURCE, LONG_SUMMARY]
    summaries = [SUMMARY, "It rained in the city all day.", LONG_SUMMARY, ""]
    for nli_labels, labels in (("e", [0]), ("ecn", [0, 2, 1])):  # the model's order: entailment, neutral, contradiction
        checkpoint = random_checkpoint(tmp_path / f"{nli_labels}.bin", 23 * len(labels))
        fn = build({"model": model, "checkpoint": checkpoint, "nli_labels": nli_labels})
        scores = score(fn, documents, summaries)
        expected = [by_hand(probs, labels, checkpoint, PERCENTILE, d, s) for d, s in zip(documents, summaries)]
        assert scores == pytest.approx(expected, abs=1e-5)
        assert all(0.0 < s < 1.0 for s in scores)
    from_meta = build({"model": model, "checkpoint": checkpoint, "nli_labels": "ecn", "document_key": "article"})
    assert from_meta(["p"] * 4, summaries, [[]] * 4, [{"article": d} for d in documents]).per_sample == {
        "semantic/summac_conv": scores}


class PairTokenizer:
    """summac calls ``tokenizer.batch_encode_plus(pairs, ..., truncation_strategy=...)``, which transformers 5
    no longer has: the same encoding through ``__call__``."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def batch_encode_plus(self, pairs, truncation_strategy=None, **kwargs):
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], **kwargs)


@pytest.mark.parametrize("bins, nli_labels, n_features", [("percentile", "e", 23), ("even10", "ecn", 30)])
def test_scores_match_the_summac_package(tiny_models, tmp_path, bins, nli_labels, n_features):
    """summac's SummaCConv with model "vitc" (entailment 0, contradiction 1, neutral 2: VitaminC's SUPPORTS,
    REFUTES, NOT ENOUGH INFO) on the same tiny model and weights. Its NLTK punkt splitter needs data that offline
    machines lack, so its imager splits as grueflow does (pysbd, then its own > 10 characters filter); its
    tokenizer call goes through :class:`PairTokenizer`."""
    summac = pytest.importorskip("summac.model_summac", reason="the summac package (pip install --no-deps summac)")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = tmp_path / "vitc"
    tiny_classifier(tiny_models["causal"], model, ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"])
    checkpoint = random_checkpoint(tmp_path / "conv.bin", n_features, seed=1)
    reference = summac.SummaCConv(models=["vitc"], bins=bins, granularity="sentence", nli_labels=nli_labels,
                                  device="cpu", start_file=checkpoint, imager_load_cache=False, agg="mean")
    imager = reference.imagers[0]
    imager.model = AutoModelForSequenceClassification.from_pretrained(model).eval()
    imager.tokenizer = PairTokenizer(AutoTokenizer.from_pretrained(model))
    imager.split_sentences = lambda text: [s for s in split_sentences(text) if len(s) > 10]
    documents = [SOURCE + " " + SUMMARY, SHORT_FIRST, SOURCE, LONG_SUMMARY, ""]
    summaries = [SUMMARY, "It rained in the city all day.", LONG_SUMMARY, "", SUMMARY]
    expected = reference.score(documents, summaries)["scores"]
    fn = build({"model": str(model), "checkpoint": checkpoint, "bins": bins, "nli_labels": nli_labels})
    assert score(fn, documents, summaries) == pytest.approx(expected, abs=1e-5)


def test_a_missing_or_mismatched_checkpoint_says_where_to_get_it(fixed_nli, tmp_path):
    with pytest.raises(ConfigError, match="needs args.checkpoint.*summac_conv_vitc_sent_perc_e.bin"):
        build({"model": fixed_nli})
    with pytest.raises(MetricUnavailableError, match="no checkpoint at .*github.com/tingofurro/summac"):
        build({"model": fixed_nli, "checkpoint": str(tmp_path / "absent.bin")})
    checkpoint = random_checkpoint(tmp_path / "e.bin", 23)
    with pytest.raises(ConfigError, match=r"nli_labels 'ec' x bins 'percentile' = 46 features.*\(1, 23\)"):
        build({"model": fixed_nli, "checkpoint": checkpoint, "nli_labels": "ec"})
    (tmp_path / "notes.bin").write_text("{not a torch file}")  # an UnpicklingError traceback named no argument
    with pytest.raises(ConfigError, match=r"args.checkpoint='.*notes.bin' is not a torch state dict \(.*\); give "
                                          r"summac's summac_conv_vitc_sent_perc_e.bin"):
        build({"model": fixed_nli, "checkpoint": str(tmp_path / "notes.bin")})
    # a mistyped local model path said "the hub is unreachable", and evaluate went on with the metric missing
    with pytest.raises(MissingDataError, match=r"summac_conv: model '/nowhere/nli' does not exist"):
        build({"model": "/nowhere/nli", "checkpoint": checkpoint})
    with pytest.raises(ConfigError, match="'percentile' or 'even<N>'"):
        build({"model": fixed_nli, "checkpoint": checkpoint, "bins": "odd5"})


def test_a_checkpoint_under_the_home_folder_written_with_a_tilde_is_found(fixed_nli, tmp_path, monkeypatch):
    """``checkpoint: ~/file.bin`` that exists was refused as missing, sending the user to download it again."""
    monkeypatch.setenv("HOME", str(tmp_path))
    random_checkpoint(tmp_path / "e.bin", 23)
    metric = METRICS.get("summac_conv")
    assert metric.unavailable(parse(metric.Args, {"checkpoint": "~/e.bin"}, "args")) is None
    assert len(score(build({"model": fixed_nli, "checkpoint": "~/e.bin"}), [SOURCE], [SUMMARY])) == 1
    assert "no checkpoint at args.checkpoint='~/absent.bin'" in metric.unavailable(
        parse(metric.Args, {"checkpoint": "~/absent.bin"}, "args"))


def test_an_nli_model_needs_the_labels_it_reads(tiny_models, tmp_path):
    checkpoint = random_checkpoint(tmp_path / "e.bin", 23)
    tiny_classifier(tiny_models["causal"], tmp_path / "sentiment", ["NEGATIVE", "POSITIVE"])
    with pytest.raises(ConfigError, match="one entailment label .*NEGATIVE, POSITIVE"):
        build({"model": str(tmp_path / "sentiment"), "checkpoint": checkpoint})


def test_no_tensor_is_made_off_its_device_and_bf16_stays_close(tiny_nli, tmp_path):
    model, _ = tiny_nli
    args = {"model": model, "checkpoint": random_checkpoint(tmp_path / "ecn.bin", 69), "nli_labels": "ecn"}
    documents, summaries = [SOURCE, SHORT_FIRST, SOURCE], [SUMMARY, "It rained in the city all day.", ""]
    fp32 = build(args, Execution(torch.device("cpu"), "fp32"))
    expected = score(fp32, documents, summaries)
    with meta_default():
        assert score(fp32, documents, summaries) == pytest.approx(expected, abs=1e-6)
    bf16 = score(build(args, Execution(torch.device("cpu"), "bf16")), documents, summaries)
    assert bf16 == pytest.approx(expected, abs=0.05)
