"""LoRA adapters (peft) on causal and seq2seq models: wrap, reference view, checkpoint state, merge.

With LoRA the base weights never change, so the KL reference is the same model with its adapter
disabled (``reference_view``) rather than a second copy. Checkpoints hold only the adapter weights;
the model handed to ``evaluate`` is merged into a plain Hugging Face model, so nothing downstream
needs peft.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from grueflow.config import ConfigError, LoraConfig
from grueflow.models import model_kind

ADAPTER_FILE = "adapter_model.safetensors"  # what peft's save_pretrained writes

log = logging.getLogger(__name__)


def _peft() -> Any:
    try:
        import peft
    except ImportError as err:
        raise ImportError("LoRA (lora: in the method params) needs peft: pip install peft") from err
    return peft


def is_lora(model: Any) -> bool:
    """True for a peft-wrapped model (False wherever peft is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def with_lora(model: Any, cfg: LoraConfig) -> Any:
    """``model`` wrapped with a fresh LoRA adapter; only the adapter's parameters require grad.

    peft injects the adapter layers into ``model`` in place: keep no other reference to it. The
    adapter's ``A`` is drawn from torch's global RNG, so seed before calling. Every ``target_modules`` entry must
    name modules of ``model`` as peft matches them (a module's full name, or a dotted suffix of it), and peft must
    be able to adapt them: a :class:`ConfigError` naming the model's linear layers otherwise, before ``model``
    is touched or as peft refuses.
    """
    peft = _peft()
    task_type = "SEQ_2_SEQ_LM" if model_kind(model.config) == "seq2seq" else "CAUSAL_LM"
    target = list(cfg.target_modules) if cfg.target_modules is not None else None
    tied = _tied_modules(model)
    layers = ", ".join(_linear_layer_names(model, tied))
    if target is not None:
        names = [name for name, _ in model.named_modules()]
        missing = [key for key in target if not any(name == key or name.endswith(f".{key}") for name in names)]
        if missing:
            raise ConfigError(f"lora.target_modules {missing} name no module of {model.config.model_type}; its linear "
                              f"layers are named: {layers}: give some of those, or null for peft's default")
        shared = {name: tied[name] for key in target for name in names
                  if (name == key or name.endswith(f".{key}")) and name in tied}
        if shared:
            name, others = next(iter(shared.items()))
            raise ConfigError(f"lora.target_modules names {name}, whose weight is tied to {', '.join(others)} "
                              f"({model.config.model_type} shares its input and output embeddings): merging the "
                              f"adapter into that one matrix would change both, so the model handed on would not be "
                              f"the one trained; its linear layers that can take an adapter: {layers}")
    peft_cfg = peft.LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=target,
                               task_type=task_type, fan_in_fan_out=model.config.model_type == "gpt2")
    try:
        wrapped = peft.get_peft_model(model, peft_cfg)
    except ValueError as err:  # e.g. a target module of a kind peft cannot adapt, or no default for the architecture
        reason = " ".join(str(err).split()).rstrip(".")
        raise ConfigError(f"cannot add LoRA adapters to {model.config.model_type}: {reason}; its linear layers are "
                          f"named: {layers}: give some of those as lora.target_modules") from None
    _warn_rank_above_width(wrapped, cfg)
    _warn_scale_too_small(cfg)
    return wrapped


# The smallest adapter scale alpha / r taken as meant. peft's default is 1 (r 8, alpha 8), grueflow's 2, and the
# RL4LMs, TRL and peft examples use 0.5 to 2. Under Adam each factor moves about learning_rate per step whatever the
# scale, so the weight change (alpha / r) B A shrinks in proportion to the scale: at 1e-3, 500 times below the
# smallest of those, a run of the usual length leaves the model as it was.
MIN_LORA_SCALE = 1e-3


def _warn_scale_too_small(cfg: LoraConfig) -> None:
    """Warn when the adapter's scale ``alpha / r`` is below :data:`MIN_LORA_SCALE`: training then cannot move the
    model in practice."""
    scale = cfg.alpha / cfg.r
    if scale < MIN_LORA_SCALE:
        log.warning("lora alpha / r = %g / %d = %.3g is below %g: the adapter's update is scaled down so far that "
                    "training leaves the model as it was (peft's default scale is 1, and 0.5 to 2 is usual); raise "
                    "lora.alpha (e.g. to %d, a scale of 1)", cfg.alpha, cfg.r, scale, MIN_LORA_SCALE, cfg.r)


def _warn_rank_above_width(model: Any, cfg: LoraConfig) -> None:
    """Warn when ``lora.r`` exceeds the rank an adapted layer can have (``min(in, out)``): the update ``B A`` then
    has that layer's rank at most, while the scale ``alpha / r`` still divides by ``r``, so the adapter moves the
    model less than its settings suggest (a large ``r`` with a small ``alpha`` can make training a no-op)."""
    from peft.tuners.lora import LoraLayer

    widths = {name.split(".")[-1]: min(m.in_features, m.out_features)
              for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    narrow = {name: width for name, width in widths.items() if width < cfg.r}
    if narrow:
        shown = ", ".join(f"{name} {width}" for name, width in sorted(narrow.items()))
        log.warning("lora.r = %d exceeds the rank of adapted layers (min(in, out): %s): their update has at most "
                    "that rank, and the scale alpha / r = %.3g shrinks it; lower r to at most %d", cfg.r, shown,
                    cfg.alpha / cfg.r, min(narrow.values()))


def _tied_modules(model: Any) -> dict[str, list[str]]:
    """``{module name: the other modules holding the same weight Parameter}`` for ``model``'s modules whose weight
    is shared (tied input and output embeddings, ``tie_word_embeddings``)."""
    owners: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        weight = module._parameters.get("weight")
        if weight is not None:
            owners.setdefault(id(weight), []).append(name)
    return {name: [other for other in names if other != name]
            for names in owners.values() if len(names) > 1 for name in names}


def _linear_layer_names(model: Any, tied: Mapping[str, Any]) -> list[str]:
    """The distinct last name parts of ``model``'s linear layers (``torch.nn.Linear`` and transformers' GPT-2
    ``Conv1D``) whose weight is not ``tied`` to another module's: what ``lora.target_modules`` can name."""
    return sorted({name.split(".")[-1] for name, module in model.named_modules()
                   if (isinstance(module, torch.nn.Linear) or module.__class__.__name__ == "Conv1D")
                   and name not in tied})


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    """The parameters an optimiser should update: all of them, or only the adapters under LoRA."""
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def reference_view(model: Any) -> Iterator[Any]:
    """The frozen base of a LoRA model (adapter disabled) for the duration of the block."""
    with model.disable_adapter():
        yield model


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """What a checkpoint must hold to restore ``model``: the adapter under LoRA, else every weight."""
    if is_lora(model):
        return _peft().get_peft_model_state_dict(model)
    return model.state_dict()


def load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Inverse of :func:`trainable_state`; fails loudly on a missing or unexpected adapter key."""
    if not is_lora(model):
        model.load_state_dict(state)
        return
    result = _peft().set_peft_model_state_dict(model, state)
    unexpected = getattr(result, "unexpected_keys", [])
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if unexpected or missing:
        raise ValueError(f"adapter state does not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")


def load_adapter(model: Any, folder: str | Path) -> None:
    """Load adapter weights saved by peft's ``save_pretrained`` into a LoRA ``model``."""
    from safetensors.torch import load_file

    load_trainable_state(model, load_file(str(Path(folder) / ADAPTER_FILE)))


def merged(model: Any) -> Any:
    """A plain Hugging Face model with the adapter folded into the base weights; ``model`` is left as is.

    Under LoRA this copies the model (one copy, briefly: the reference is no copy), then
    ``merge_and_unload``; a plain model is returned unchanged.
    """
    if not is_lora(model):
        return model
    return copy.deepcopy(model).merge_and_unload()
