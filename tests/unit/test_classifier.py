"""The classifier trainer (grueflow/classifier.py): data and labels, head+tail truncation, the schedule, seeded
and resumable training on a tiny model built from config, and the learned_classifier metric's
include_prompt_for_eval."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from grueflow.classifier import (ClassifierTrainer, Encoded, TextCut, encode, encode_examples, label_index,
                                 load_backbone, load_examples, lr_factor, needs_eos, position_limit, read_examples,
                                 read_format, row_steps, save_classifier, special_tokens, truncate)
from grueflow.config import ClassifierConfig, ConfigError
from grueflow.io import DataError, MissingDataError
from grueflow.metrics import METRICS, MetricContext
from grueflow.metrics.semantic import shipped_minilm
from grueflow.params import parse
from grueflow.seeding import seed_everything

LABELS = ["NEGATIVE", "POSITIVE"]


def config(**fields) -> ClassifierConfig:
    return parse(ClassifierConfig, {"train_file": "train.jsonl", "labels": LABELS, **fields}, "classifier")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(shipped_minilm())


# -- truncation and encoding ------------------------------------------------------------------------

def test_head_tail_keeps_the_first_quarter_and_the_last_tokens():
    ids = list(range(10))
    assert truncate(ids, 6, "head_tail", 0.25) == [0, 1, 6, 7, 8, 9]  # round(1.5) = 2 head + 4 tail
    assert truncate(ids, 6, "head", 0.25) == [0, 1, 2, 3, 4, 5]
    assert truncate(ids, 8, "head_tail", 0.5) == [0, 1, 2, 3, 6, 7, 8, 9]
    assert truncate(ids, 10, "head_tail", 0.25) == ids and truncate(ids[:3], 6, "head", 0.25) == [0, 1, 2]
    assert truncate(list(range(600)), 510, "head_tail", 0.25) == list(range(128)) + list(range(218, 600))  # Sun et al.


def test_encoding_cuts_the_text_and_keeps_the_special_tokens(minilm_tokenizer):
    assert special_tokens(minilm_tokenizer) == ([101], [102])  # [CLS], [SEP]
    text = "one two three four five six seven eight nine ten"  # one token a word
    head_tail, head = (encode(minilm_tokenizer, [text], config(max_length=8, truncation=t))[0] for t in ("head_tail", "head"))
    assert minilm_tokenizer.decode(head_tail) == "[CLS] one two seven eight nine ten [SEP]"
    assert minilm_tokenizer.decode(head) == "[CLS] one two three four five six [SEP]"
    assert encode(minilm_tokenizer, ["short one"], config(max_length=8))[0] == [101, 2460, 2028, 102]
    assert encode(minilm_tokenizer, [], config()) == []


# -- data and labels ------------------------------------------------------------------------------------

def test_a_label_is_a_declared_name_or_its_index():
    assert [label_index(v, LABELS, "f row 1") for v in ("NEGATIVE", "POSITIVE", 0, 1, "1", " 0")] == [0, 1, 0, 1, 1, 0]
    for bad in ("positive", 2, -1, True, None, 1.0, "neutral"):
        with pytest.raises(DataError, match=rf"f row 1: label {bad!r} is not a declared label; classifier.labels is "
                                            r"\['NEGATIVE', 'POSITIVE'\] \(a row's label is one of these names or its "
                                            r"index 0..1\)"):
            label_index(bad, LABELS, "f row 1")


def test_jsonl_and_csv_rows_become_examples_with_their_origin(tmp_path):
    jsonl = write_jsonl(tmp_path / "a.jsonl", [{"review": "fine", "y": "POSITIVE"}, {"review": "bad", "y": 0}])
    cfg = config(text_column="review", label_column="y")
    assert [(e.text, e.label, e.origin) for e in read_examples(jsonl, cfg)] == [
        ("fine", 1, f"{jsonl} row 1"), ("bad", 0, f"{jsonl} row 2")]
    csv = tmp_path / "a.csv"
    csv.write_text("\ufeffreview,y\n\"fine, really\",1\nbad,NEGATIVE\n", encoding="utf-8")  # Excel's BOM
    assert [(e.text, e.label) for e in read_examples(csv, cfg)] == [("fine, really", 1), ("bad", 0)]


def test_bad_data_is_refused_with_the_row_and_the_fix(tmp_path):
    cfg = config()
    with pytest.raises(MissingDataError, match="classifier data file '.*nope.jsonl' does not exist"):
        read_examples(tmp_path / "nope.jsonl", cfg)
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(DataError, match=r"cannot read a .txt file as classifier data; give a .jsonl or .csv file"):
        read_examples(tmp_path / "a.txt", cfg)
    rows = write_jsonl(tmp_path / "b.jsonl", [{"text": "ok", "label": 1}, {"review": "ok", "label": 1}])
    with pytest.raises(DataError, match=r"b.jsonl row 2 has no column 'text'; its columns: review, label. "
                                        r"Set classifier.text_column / label_column"):
        read_examples(rows, cfg)
    write_jsonl(rows, [{"text": "", "label": 1}])
    with pytest.raises(DataError, match=r"b.jsonl row 1: column 'text' is '', not a non-empty text"):
        read_examples(rows, cfg)
    write_jsonl(rows, [{"text": "ok", "label": 3}])
    with pytest.raises(DataError, match=r"b.jsonl row 1: label 3 is not a declared label"):
        read_examples(rows, cfg)
    rows.write_text("")
    with pytest.raises(DataError, match="the file has no rows"):
        read_examples(rows, cfg)


def test_digit_labels_read_alike_from_jsonl_and_csv_and_an_ambiguous_integer_is_refused(tmp_path):
    stars = ["1", "2", "3"]
    assert [label_index(v, stars, "f row 1") for v in ("1", "3", " 2", 3, "0")] == [0, 2, 1, 2, 0]
    assert [label_index(v, ["0", "1"], "f row 1") for v in (0, 1, "1")] == [0, 1, 1]  # name and index agree
    assert [label_index(v, ["a", "b", "c"], "f row 1") for v in (1, "1")] == [1, 1]  # no such name: an index
    with pytest.raises(DataError, match=r"f row 1: label '²' is not a declared label"):  # a digit, not an ASCII one
        label_index("²", ["a", "b", "c"], "f row 1")
    for value in (1, 2):
        with pytest.raises(DataError, match=rf"f row 1: label {value} is ambiguous: the name of label '{value}' "
                                            rf"\(class {value - 1}\) and the index of label '{value + 1}' "
                                            rf"\(class {value}\) of classifier.labels \['1', '2', '3'\]; write the "
                                            rf'label as a JSON text, "{value}" for label \'{value}\' or '
                                            rf'"{value + 1}" for label'):
            label_index(value, stars, "f row 1")
    cfg = config(labels=stars)
    csv = tmp_path / "stars.csv"
    csv.write_text("text,label\nawful,1\ngreat,3\n")
    texts = write_jsonl(tmp_path / "texts.jsonl", [{"text": "awful", "label": "1"}, {"text": "great", "label": "3"}])
    assert [e.label for e in read_examples(csv, cfg)] == [e.label for e in read_examples(texts, cfg)] == [0, 2]
    ints = write_jsonl(tmp_path / "ints.jsonl", [{"text": "great", "label": 3}, {"text": "awful", "label": 1}])
    with pytest.raises(DataError, match=r"ints.jsonl row 2: label 1 is ambiguous"):
        read_examples(ints, cfg)


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path):
    csv = tmp_path / "dup.csv"
    csv.write_text("text,label,label\nawful,0,1\ngreat,1,0\n")
    with pytest.raises(DataError, match=r"dup.csv: line 1: the header names column\(s\) \['label'\] more than once; "
                                        r"name each once"):
        read_examples(csv, config())
    csv.write_text("text,label\nawful,0,1\n")  # a row longer than its header
    with pytest.raises(DataError, match=r"dup.csv: line 2: 3 fields where the header has 2"):
        read_examples(csv, config())


def test_a_test_file_that_is_the_train_file_is_refused(tmp_path, monkeypatch):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": f"review {i}", "label": i % 2} for i in range(8)])
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.jsonl").symlink_to(rows)
    monkeypatch.chdir(tmp_path)
    for test in ("rows.jsonl", "./sub/../rows.jsonl", str(rows), "link.jsonl"):
        with pytest.raises(ConfigError, match=rf"classifier.test_file '{test}' is classifier.train_file 'rows.jsonl' "
                                              r"\(one file\): test accuracy would be scored on training rows; give "
                                              r"test_file a separate file"):
            load_examples(config(train_file="rows.jsonl", test_file=test))
    other = write_jsonl(tmp_path / "other.jsonl", [{"text": "test", "label": 0}])
    assert len(load_examples(config(train_file="rows.jsonl", test_file=str(other))).test) == 1


def test_a_seeded_sample_a_validation_slice_and_at_least_two_classes(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": f"review {i}", "label": i % 2} for i in range(40)])
    test = write_jsonl(tmp_path / "test.jsonl", [{"text": f"test {i}", "label": i % 2} for i in range(10)])
    cfg = config(train_file=str(train), test_file=str(test), n_train=20, n_test=4, val_fraction=0.1)
    split = load_examples(cfg)
    assert (len(split.train), len(split.val), len(split.test)) == (18, 2, 4)
    assert split == load_examples(cfg) and split != load_examples(dataclasses.replace(cfg, seed=1))
    assert not {e.text for e in split.train} & {e.text for e in split.val}
    assert len(load_examples(config(train_file=str(train), val_fraction=0.01)).val) == 1  # at least one held out
    with pytest.raises(DataError, match=r"classifier.n_train = 41 but .*train.jsonl has 40 rows; lower it"):
        load_examples(config(train_file=str(train), n_train=41))
    write_jsonl(train, [{"text": f"review {i}", "label": "POSITIVE"} for i in range(10)])
    with pytest.raises(DataError, match=r"the training rows hold 1 class \(POSITIVE\) of \['NEGATIVE', 'POSITIVE'\]; "
                                        r"a classifier needs at least 2"):
        load_examples(config(train_file=str(train)))


def test_the_config_refuses_fewer_than_two_labels_and_bad_values():
    with pytest.raises(ConfigError, match=r"labels must name at least 2 classes, got \['POSITIVE'\]"):
        config(labels=["POSITIVE"])
    with pytest.raises(ConfigError, match="repeat a label"):
        config(labels=["a", "a"])
    with pytest.raises(ConfigError, match="'head_tail', 'head'"):
        config(truncation="tail")
    with pytest.raises(ConfigError, match=r"unknown key 'lr'; valid keys: train_file, labels, test_file"):
        config(lr=1e-4)
    with pytest.raises(ConfigError, match=r"missing required key 'labels'"):
        parse(ClassifierConfig, {"train_file": "x.jsonl"}, "classifier")


# -- the schedule -----------------------------------------------------------------------------------------

def test_linear_warm_up_then_linear_decay():
    assert [lr_factor(s, 10, 2) for s in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]
    assert [lr_factor(s, 4, 0) for s in range(4)] == [1.0, 0.75, 0.5, 0.25]


def test_curve_rows_every_n_steps_or_at_each_epoch_end():
    assert row_steps(5, 2, 0) == [5, 10]
    assert row_steps(5, 2, 3) == [3, 6, 9, 10]
    assert row_steps(5, 1, 10) == [5]


# -- training on a tiny model --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory, minilm_tokenizer):
    """A 1-layer BERT encoder (no head) built from config with MiniLM's tokenizer, saved as a backbone folder."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(minilm_tokenizer), hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32, max_position_embeddings=64))
    path = tmp_path_factory.mktemp("tiny_bert")
    model.save_pretrained(path)
    minilm_tokenizer.save_pretrained(path)
    return path


def tiny_run(backbone, out, stop_after_rows=None, resume_from=None, **fields):
    """Seed, build, train (optionally stopping after some curve rows, or resuming) and save; the trainer."""
    rows = [{"text": f"{w} film , {w} acting and a {w} plot", "label": int(w in ("great", "fine", "superb"))}
            for w in ("great", "awful", "fine", "dull", "superb", "poor") * 4]
    data = write_jsonl(out.parent / f"{out.name}.jsonl", rows)
    cfg = config(train_file=str(data), backbone=str(backbone), max_length=16, batch_size=4, learning_rate=1e-3,
                 val_fraction=0.25, eval_every=2, **fields)
    seed_everything(cfg.seed)
    model, tokenizer = load_backbone(cfg.backbone, cfg.labels)
    split = load_examples(cfg)
    trainer = ClassifierTrainer(model, tokenizer, encode_examples(tokenizer, split.train, cfg),
                                encode_examples(tokenizer, split.val, cfg), cfg)
    if resume_from is not None:
        trainer.load(resume_from)

    def checkpoint(t):
        t.save_checkpoint(out.parent / f"{out.name}.resume", "key")
        if stop_after_rows is not None and len(t.state.curve) == stop_after_rows:
            raise KeyboardInterrupt

    try:
        trainer.train(checkpoint=checkpoint)
    except KeyboardInterrupt:
        return trainer
    save_classifier(model, tokenizer, cfg, out)
    return trainer


def test_same_params_and_seed_give_the_same_weights_bit_for_bit(tiny_backbone, tmp_path):
    first = tiny_run(tiny_backbone, tmp_path / "a")
    assert first.total_steps == 5 and [r["step"] for r in first.state.curve] == [2, 4, 5]  # 18 rows, batches of 4
    assert set(first.state.curve[-1]) == {"step", "epoch", "learning_rate", "train_loss", "val_loss", "val_accuracy"}
    tiny_run(tiny_backbone, tmp_path / "b")
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    tiny_run(tiny_backbone, tmp_path / "c", seed=1)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() != (tmp_path / "c" / "model.safetensors").read_bytes()
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["id2label"] == {"0": "NEGATIVE", "1": "POSITIVE"} and saved["label2id"] == {"NEGATIVE": 0, "POSITIVE": 1}
    assert json.loads((tmp_path / "a" / "classifier.json").read_text()) == {
        "labels": LABELS, "max_length": 16, "truncation": "head_tail", "head_fraction": 0.25}


def test_a_stopped_run_resumes_from_its_checkpoint_and_ends_with_the_same_weights(tiny_backbone, tmp_path):
    straight = tiny_run(tiny_backbone, tmp_path / "straight")
    stopped = tiny_run(tiny_backbone, tmp_path / "run", stop_after_rows=1)
    assert stopped.state.step == 2
    resumed = tiny_run(tiny_backbone, tmp_path / "run", resume_from=tmp_path / "run.resume" / "step2")
    assert resumed.state.curve == straight.state.curve
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == (tmp_path / "straight" / "model.safetensors").read_bytes()


def test_final_metrics_score_the_test_rows_once(tiny_backbone, tmp_path):
    trainer = tiny_run(tiny_backbone, tmp_path / "a")
    test = Encoded([[101, 2307, 102], [101, 9643, 102]], [1, 0])
    final = trainer.final_metrics(test)
    assert set(final) == {"train/loss", "val/accuracy", "val/loss", "test/accuracy", "test/loss", "n_train", "n_val", "n_test"}
    assert (final["n_train"], final["n_val"], final["n_test"]) == (18, 6, 2)
    assert final["val/accuracy"] == trainer.state.curve[-1]["val_accuracy"] and final["test/accuracy"] in (0.0, 0.5, 1.0)
    assert "test/accuracy" not in trainer.final_metrics(Encoded([], []))


# -- the learned_classifier metric: include_prompt_for_eval --------------------------------------------------

def score(model, prompts, generations, **args):
    metric = METRICS.get("learned_classifier")
    fn = metric.build(parse(metric.Args, {"model": str(model), "label": "POSITIVE", **args}, "args"), MetricContext())
    return fn(prompts, generations, [[]] * len(generations), [{}] * len(generations)).per_sample["learned/classifier"]


def test_include_prompt_for_eval_scores_prompt_then_generation_and_the_default_the_generation(tiny_models, tmp_path):
    from test_metrics_library import tiny_classifier

    probs = tiny_classifier(tiny_models["causal"], tmp_path, LABELS)
    prompts, generations = ["the plot was dull and slow", "a fine cast"], ["but the acting was great .", "dull film"]
    alone = score(tmp_path, prompts, generations)
    joined = score(tmp_path, prompts, generations, include_prompt_for_eval=True)
    assert alone == pytest.approx([probs(g)[1] for g in generations], abs=1e-6)
    assert joined == pytest.approx([probs("the plot was dull and slow but the acting was great .")[1],
                                    probs("a fine cast dull film")[1]], abs=1e-6)
    assert all(abs(a - j) > 1e-4 for a, j in zip(alone, joined))
    assert score(tmp_path, prompts, generations, include_prompt_for_eval=False) == alone


def test_a_long_prompt_is_cut_from_the_left_so_the_generation_is_scored_whole(tiny_models, tmp_path):
    from test_metrics_library import tiny_classifier
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tiny_classifier(tiny_models["causal"], tmp_path, LABELS)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    prompt, generation = " ".join(["the plot was dull and slow"] * 20), "but the acting was great ."
    ids = tokenizer(f"{prompt} {generation}")["input_ids"]
    assert ids == tokenizer(f"{prompt} {generation}", add_special_tokens=False)["input_ids"]  # no special tokens
    keep = len(tokenizer(f" {generation}")["input_ids"]) + 4  # the generation and a little of the prompt
    assert len(ids) > 3 * keep and tokenizer.decode(ids[-keep:]).endswith(f" {generation}")
    with torch.no_grad():
        tail = model(input_ids=torch.tensor([ids[-keep:]])).logits.softmax(-1)[0, 1].item()
    assert score(tmp_path, [prompt], [generation], include_prompt_for_eval=True, max_length=keep) == \
        pytest.approx([tail], abs=1e-6)


# -- max_length against the model's positions; seq2seq backbones ---------------------------------------------

def test_max_length_above_the_backbones_positions_is_refused_before_training(tiny_backbone):
    from transformers import GPT2Config, RobertaConfig, T5Config

    assert position_limit(GPT2Config(n_positions=64)) == (64, "n_positions")
    roberta = RobertaConfig(max_position_embeddings=514, pad_token_id=1)
    assert position_limit(roberta) == (512, "max_position_embeddings")
    assert position_limit(T5Config()) is None  # relative positions
    with pytest.raises(ConfigError, match=rf"classifier.max_length = 65 is above the 64 positions of backbone "
                                          rf"'{tiny_backbone}' \(its max_position_embeddings\); lower "
                                          r"classifier.max_length to at most 64"):
        load_backbone(str(tiny_backbone), LABELS, max_length=65)
    model, _ = load_backbone(str(tiny_backbone), LABELS, max_length=64)
    assert not needs_eos(model)


def test_a_seq2seq_backbone_trains_on_rows_that_end_with_eos(tiny_models, tmp_path):
    """T5's classifier pools its input's last EOS; the tiny T5's tokenizer adds none, so each row gets one."""
    rows = [{"text": f"{w} film , {w} acting and a {w} plot " * 3, "label": int(w in ("great", "fine"))}
            for w in ("great", "awful", "fine", "dull") * 3]
    cfg = config(train_file=str(write_jsonl(tmp_path / "t.jsonl", rows)), backbone=str(tiny_models["seq2seq"]),
                 max_length=12, batch_size=4, val_fraction=0.25)
    seed_everything(0)
    model, tokenizer = load_backbone(cfg.backbone, cfg.labels, max_length=cfg.max_length)
    assert needs_eos(model) and special_tokens(tokenizer) == ([], [])
    split = load_examples(cfg)
    train = encode_examples(tokenizer, split.train, cfg, needs_eos(model))
    assert all(len(ids) == 12 and ids[-1] == tokenizer.eos_token_id for ids in train.ids)
    trainer = ClassifierTrainer(model, tokenizer, train, encode_examples(tokenizer, split.val, cfg, True), cfg)
    curve = trainer.train()
    assert math.isfinite(curve[-1]["train_loss"]) and 0 <= curve[-1]["val_accuracy"] <= 1
    save_classifier(model, tokenizer, cfg, tmp_path / "model")
    scores = score(tmp_path / "model", ["", ""], ["a great film , great acting", "a dull plot"])
    assert all(0 < p < 1 for p in scores)


# -- the learned_classifier metric: classifier.json, limits, labels, paths ------------------------------------

def test_the_metric_cuts_texts_as_the_classifier_was_trained_unless_its_args_say_otherwise(tiny_models, tmp_path,
                                                                                            caplog):
    from test_metrics_library import tiny_classifier
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tiny_classifier(tiny_models["causal"], tmp_path / "a", LABELS)
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "a").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "a")
    save_classifier(model, tokenizer, config(max_length=16), tmp_path / "a")  # as train_classifier saves it
    assert read_format(tmp_path / "a") == TextCut(16, "head_tail", 0.25) and read_format(tmp_path) is None
    texts = ["great film , great acting " * 4 + "awful plot , dull ending " * 4, "fine"]

    def probs(**fields):
        with torch.no_grad():
            return [model(input_ids=torch.tensor([ids])).logits.softmax(-1)[0, 1].item()
                    for ids in encode(tokenizer, texts, config(**fields))]

    trained, head = probs(max_length=16), probs(max_length=16, truncation="head")
    assert abs(trained[0] - head[0]) > 1e-6
    with caplog.at_level("WARNING", logger="grueflow.metrics.semantic"):
        assert score(tmp_path / "a", ["", ""], texts) == pytest.approx(trained, abs=1e-6)
        assert score(tmp_path / "a", ["", ""], texts, max_length=16, truncation="head_tail") == pytest.approx(trained,
                                                                                                          abs=1e-6)
        assert not caplog.records
        assert score(tmp_path / "a", ["", ""], texts, truncation="head") == pytest.approx(head, abs=1e-6)
        assert score(tmp_path / "a", ["", ""], texts, max_length=12) == pytest.approx(probs(max_length=12), abs=1e-6)
    assert [r.getMessage() for r in caplog.records] == [
        f"learned_classifier {tmp_path / 'a'} was trained with truncation 'head_tail'; scoring with truncation "
        f"'head' as its args say (leave them out to score as trained)",
        f"learned_classifier {tmp_path / 'a'} was trained with max_length 16; scoring with max_length 12 as its args "
        f"say (leave them out to score as trained)"]
    (tmp_path / "a" / "classifier.json").write_text('{"max_length": 16}')
    with pytest.raises(DataError, match=r"classifier.json: expected max_length \(an integer >= 1\), truncation"):
        score(tmp_path / "a", [""], ["fine"])


def test_the_metric_refuses_a_max_length_too_small_or_above_the_models_positions_and_a_batch_of_zero(tiny_backbone,
                                                                                                    tmp_path):
    from grueflow.metrics.semantic import scoring_cut

    metric = METRICS.get("learned_classifier")
    for value in (0, 1, 2, 7):
        with pytest.raises(ConfigError, match=rf"args: max_length must be >= 8 tokens \(the special tokens and some "
                                              rf"text\), or left out for the trained one, got {value}"):
            parse(metric.Args, {"max_length": value}, "args")
    with pytest.raises(ConfigError, match=r"args: batch_size must be > 0, got 0"):
        parse(metric.Args, {"batch_size": 0}, "args")
    with pytest.raises(ConfigError, match=r"args.truncation: 'middle' is not allowed; choose one of 'head', 'tail', "
                                          r"'head_tail'"):
        parse(metric.Args, {"truncation": "middle"}, "args")
    no_json = parse(metric.Args, {"model": "x"}, "args")
    assert scoring_cut(no_json, None, (64, "n_positions")) == TextCut(64, None, 0.25)  # the default, lowered
    assert scoring_cut(no_json, None, None) == TextCut(512, None, 0.25)
    tiny_run(tiny_backbone, tmp_path / "a")  # 64 positions
    with pytest.raises(ConfigError, match=rf"learned_classifier: max_length 65 \(args.max_length\) is above the 64 "
                                          rf"positions of {tmp_path / 'a'} \(its max_position_embeddings\); set "
                                          r"args.max_length to at most 64"):
        score(tmp_path / "a", [""], ["fine"], max_length=65)
    saved = json.loads((tmp_path / "a" / "classifier.json").read_text())
    (tmp_path / "a" / "classifier.json").write_text(json.dumps({**saved, "max_length": 100}))
    with pytest.raises(ConfigError, match=r"max_length 100 \(the max_length of its classifier.json\) is above the 64"):
        score(tmp_path / "a", [""], ["fine"])


def test_a_label_the_model_lacks_or_a_local_path_that_does_not_exist_stops_the_stage(tiny_models, tmp_path,
                                                                                     monkeypatch):
    """Both fail in one line (main_guard's ConfigError and DataError), and a missing path is not reported as a metric
    missing for an offline hub."""
    from test_metrics_library import tiny_classifier

    from grueflow.config import MetricSpec
    from grueflow.evaluation import Scorer

    tiny_classifier(tiny_models["causal"], tmp_path / "m", LABELS)
    with pytest.raises(ConfigError, match=rf"learned_classifier: label 'positive' is not a label of {tmp_path / 'm'}; "
                                          r"its labels: NEGATIVE, POSITIVE; set args.label to one of them"):
        METRICS.get("learned_classifier").build(parse(METRICS.get("learned_classifier").Args,
                                                      {"model": str(tmp_path / "m"), "label": "positive"}, "args"),
                                                MetricContext())
    monkeypatch.chdir(tmp_path)
    for path in (str(tmp_path / "nope"), "./nope", "../nope", "results/x/classifier/model"):
        specs = parse(tuple[MetricSpec, ...], [{"id": "learned_classifier", "args": {"model": path}}], "metrics")
        with pytest.raises(MissingDataError, match=rf"learned_classifier: model '{path}' does not exist \(relative "
                                                   rf"paths are read from {tmp_path}\) and is a path, not a hub id"):
            Scorer(None, specs, MetricContext())([], [])
