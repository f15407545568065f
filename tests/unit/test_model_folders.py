"""Model folders that are not the language model a stage asks for: refused by name before their weights are used.

A sequence classifier or a model of the other kind is refused from its ``config.json`` (at parse time for a
task's ``pretrained`` model, before generating for evaluate's base model); a ``config.json`` that asks for
tensors its weights lack is refused when loaded, instead of starting them from random values.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grueflow.config import ConfigError, ModelConfig
from grueflow.io import MissingDataError
from grueflow.models import TINY_DEFAULTS, check_same_kind, lm_problem, load_pretrained
from grueflow.params import parse


@pytest.fixture(scope="module")
def classifier(tiny_models, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT sequence classifier saved with the tiny GPT-2's tokenizer: a model folder with no LM head."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["causal"])
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=2)
    folder = tmp_path_factory.mktemp("classifier")
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def pretrained(folder: Path, kind: str) -> ModelConfig:
    return parse(ModelConfig, {"id": "pretrained", "name_or_path": str(folder), "kind": kind}, "task.yaml: model")


@pytest.mark.parametrize("which, kind, expect", [
    ("classifier", "causal", "is a BertForSequenceClassification (bert), not a causal or seq2seq language model"),
    ("causal", "seq2seq", "is a causal model (GPT2LMHeadModel); kind='seq2seq' contradicts it"),
    ("seq2seq", "causal", "is a seq2seq model (T5ForConditionalGeneration); kind='causal' contradicts it"),
])
def test_a_pretrained_folder_that_is_not_an_lm_of_its_kind_is_refused_at_parse_time(tiny_models, classifier, which,
                                                                                     kind, expect):
    folder = classifier if which == "classifier" else tiny_models[which]
    with pytest.raises(ConfigError) as err:
        pretrained(folder, kind)
    assert f"task.yaml: model: name_or_path '{folder}' {expect}" in str(err.value)


def test_a_pretrained_folder_of_its_own_kind_parses(tiny_models):
    assert pretrained(tiny_models["causal"], "causal").kind == "causal"
    assert pretrained(tiny_models["seq2seq"], "seq2seq").kind == "seq2seq"


def test_loading_a_classifier_as_a_language_model_fails_before_its_weights_load(classifier):
    with pytest.raises(ConfigError) as err:
        load_pretrained(classifier)
    assert f"cannot load {classifier} as a language model: it is a BertForSequenceClassification" in str(err.value)


def test_a_config_without_architectures_is_judged_by_its_kind():
    assert lm_problem({"model_type": "t5", "is_encoder_decoder": True}, "seq2seq") == ""
    assert lm_problem({"model_type": "t5", "is_encoder_decoder": True}, "causal") == \
        "is a seq2seq model (t5); kind='causal' contradicts it"
    assert lm_problem({"model_type": "gpt2"}) == ""


def test_a_config_asking_for_layers_the_weights_lack_is_refused_not_started_at_random(tiny_models, tmp_path: Path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_models["causal"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["n_layer"] += 1
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(MissingDataError) as err:
        load_pretrained(folder)
    message = str(err.value)
    assert f"cannot load the model in {folder}: its weights lack " in message
    assert f"transformer.h.{config['n_layer'] - 1}." in message and "the config and the weights disagree" in message


@pytest.mark.parametrize("base, expect", [
    ("classifier", "is a BertForSequenceClassification (bert), not a causal or seq2seq language model"),
    ("seq2seq", "is a seq2seq model and {model} a causal one: the base model cannot score its generations"),
])
def test_evaluates_base_model_must_be_a_language_model_of_the_evaluated_models_kind(tiny_models, classifier, base,
                                                                                    expect):
    folder = classifier if base == "classifier" else tiny_models[base]
    with pytest.raises(ConfigError) as err:
        check_same_kind(tiny_models["causal"], folder)
    message = str(err.value)
    assert f"base model {folder} {expect.format(model=tiny_models['causal'])}" in message
    assert "give the task's base model (results/<task>/base_model/model)" in message
    check_same_kind(tiny_models["causal"], tiny_models["causal"])
    check_same_kind(tiny_models["seq2seq"], tiny_models["seq2seq"])


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_model_whose_weights_hold_nan_or_inf_is_refused_at_load_naming_the_folder_and_a_tensor(tiny_models,
                                                                                                tmp_path: Path, value):
    import torch
    from transformers import AutoModelForCausalLM

    from grueflow.io import DataError

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["causal"], folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.transformer.h[0].ln_1.weight[0] = value
    model.save_pretrained(folder)
    with pytest.raises(DataError) as err:
        load_pretrained(folder)
    assert not isinstance(err.value, MissingDataError)  # nothing is missing: the values are bad
    assert str(err.value) == (f"cannot load the model in {folder}: 1 of its tensors hold NaN or infinite values "
                              f"(transformer.h.0.ln_1.weight), so it cannot generate or score; a training that "
                              f"diverged writes such weights: rerun the stage that wrote it with a lower "
                              f"learning_rate, or give another model")
    load_pretrained(tiny_models["causal"])  # finite weights load


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_a_model_with_finite_weights_whose_logits_overflow_is_refused_at_load(tiny_models, tmp_path: Path, kind):
    """A diverged training can leave finite weights so large that every logit is NaN: greedy evaluation then wrote
    empty generations and all-zero metrics, exit 0, and other stages blamed the learning rate or the margins."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from grueflow.io import DataError

    folder = tmp_path / "model"
    shutil.copytree(tiny_models[kind], folder)
    model = (AutoModelForCausalLM if kind == "causal" else AutoModelForSeq2SeqLM).from_pretrained(folder)
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(1e10)  # finite (float32 holds 3.4e38); the activations overflow
    model.save_pretrained(folder)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    with pytest.raises(DataError, match=f"cannot load the model in {folder}: its weights are finite but its logits "
                                        r"are not \(NaN or infinite on a four-token probe"):
        load_pretrained(folder)
    load_pretrained(tiny_models[kind])  # a model that scores loads


def test_a_classifier_or_reward_model_with_nan_weights_is_refused_at_load(tiny_models, tmp_path: Path):
    """The learned reward and a trained reward model with NaN weights gave null rewards, with a warning (or an RL
    stop) blaming the samples."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from grueflow.io import DataError
    from grueflow.metrics.semantic import load_classifier
    from grueflow.preference.reward_model import load_backbone

    folder = tmp_path / "classifier"
    model = AutoModelForSequenceClassification.from_pretrained(tiny_models["causal"], num_labels=1)
    model.config.pad_token_id = 0
    with torch.no_grad():
        model.score.weight[0, 0] = float("nan")
    model.save_pretrained(folder)
    shutil.copy(Path(tiny_models["causal"]) / "tokenizer.json", folder)
    shutil.copy(Path(tiny_models["causal"]) / "tokenizer_config.json", folder)
    with pytest.raises(DataError, match=f"cannot load the model in {folder}: 1 of its tensors hold NaN .*score.weight"):
        load_classifier(str(folder), max_length=16, batch_size=2)
    with pytest.raises(DataError, match=f"cannot load the model in {folder}: 1 of its tensors hold NaN"):
        load_backbone(folder, frozen=True)
    load_backbone(tiny_models["causal"], frozen=True)  # a finite one loads


def test_a_t5_relative_position_table_counts_towards_the_size_limit():
    """T5's buckets x heads bias table was outside the estimate: 10^6 buckets of 20,000 heads of width 1 passed the
    parse and allocated 2 x 2e10 floats in the stage."""
    from grueflow.models import MAX_TINY_PARAMETERS, check_tiny_sizes, tiny_parameters

    huge = {"relative_attention_num_buckets": 1_000_000, "num_heads": 20_000, "d_kv": 1, "d_model": 64}
    with pytest.raises(ValueError, match=r"about 4e\+10 parameters .*relative_attention_num_buckets 1,000,000\), "
                                         r"above the limit of 1e\+10"):
        check_tiny_sizes("t5", huge, max_length=64)
    check_tiny_sizes("t5", {"relative_attention_num_buckets": 64}, max_length=64)  # a real size still builds
    assert tiny_parameters("t5", {**TINY_DEFAULTS["t5"], "relative_attention_num_buckets": 64}) < MAX_TINY_PARAMETERS


def test_a_causal_classifier_saved_to_pad_left_scores_a_text_the_same_in_any_batch(tiny_models, tmp_path: Path):
    """A GPT-2 classifier whose tokenizer was saved with ``padding_side: left`` (as causal policy folders are) gave
    a padded text other scores than alone: left padding shifted its absolute positions."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grueflow.classifier import load_backbone as classifier_backbone
    from grueflow.metrics.semantic import load_classifier
    from grueflow.preference.reward_model import load_backbone as reward_backbone

    folder = tmp_path / "classifier"
    model = AutoModelForSequenceClassification.from_pretrained(tiny_models["causal"], num_labels=2)
    model.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["causal"])
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(folder)
    assert json.loads((folder / "tokenizer_config.json").read_text())["padding_side"] == "left"
    classify = load_classifier(str(folder), max_length=16, batch_size=4)
    texts = ["the film was good and long and then it ended", "bad", "fine"]
    alone = [logit for text in texts for logit in classify.logits([text])[0]]
    assert [logit for row in classify.logits(texts) for logit in row] == pytest.approx(alone, abs=1e-5)
    assert classify.tokenizer.padding_side == "right"
    backbone = tmp_path / "backbone"  # a language model saved to pad left, as a causal policy's folder
    shutil.copytree(tiny_models["causal"], backbone)
    tokenizer.save_pretrained(backbone)
    assert reward_backbone(backbone)[1].padding_side == "right"
    assert classifier_backbone(str(backbone), ["neg", "pos"])[1].padding_side == "right"
