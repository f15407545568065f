"""NLPO (Ramamurthy et al. 2023, RL4LMs): PPO with invalid-action masking from a lagged policy copy.

During generation a logits processor steps the mask model incrementally with its own KV cache (one
token per generated token, never a full pass per token) and keeps, for every sequence, the mask
model's top-p nucleus (optionally capped at top-k), at least ``min_tokens_to_keep`` tokens and every
special token; the policy samples only among them. The PPO ratio and the KL penalty both use log-probs under
the masks, the policy's and the reference's alike: the KL is then KL(policy || reference) between the two
distributions restricted to the allowed tokens, which the rollout samples from, so its k1 estimate has a mean
>= 0 and starts at 0. (RL4LMs compares the masked policy with the unmasked reference, whose k1 is -log of the
mass the mask keeps, > 0 at the start; the unmasked policy against the unmasked reference, on tokens drawn from
the mask, has a mean that can fall below 0 and then pays the policy to move mass off what it samples.) Evaluation
with masks samples with the same incremental processor (``generate``'s full pass per step only for beam search
and greedy decoding). The mask model is refreshed from the policy every
``target_update_iterations`` rollouts and is part of the checkpoint (RL4LMs loses it on resume).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from transformers import LogitsProcessor

from grueflow.config import ConfigError, GenerationConfig
from grueflow.io import MODEL_DIR, fingerprint, read_json, write_json
from grueflow.models.backend import Backend, Decoding
from grueflow.models.lora import merged
from grueflow.models.policy import Policy, Prompts, shared_groups
from grueflow.pipeline import SAVED_POLICIES, VALIDATION_OUT
from grueflow.rl.algorithm import PolicyHandle
from grueflow.rl.configs import NLPOConfig
from grueflow.rl.ppo import PPO

log = logging.getLogger(__name__)


class MaskProcessor(LogitsProcessor):
    """A logits processor (for :meth:`Policy.sample` and ``generate``) that masks the policy's logits with
    the mask model's nucleus, one generated token a call (:attr:`incremental`: it follows one sequence per row,
    never beams).

    The mask model decodes alongside the policy with the policy's own incremental machinery (the policy's
    speed backend, :meth:`~grueflow.models.backend.Backend.start`): each group of ``group_size`` identical
    prompts encoded once, and ``reserve`` positions of KV cache set aside so a step writes in place.
    """

    def __init__(self, mask_model: Any, kind: str, prompts: Prompts, cfg: NLPOConfig, always_keep: list[int],
                 group_size: int = 1, reserve: int = 0, backend: Optional[Backend] = None) -> None:
        self.mask_model, self.kind, self.prompts, self.cfg, self.always_keep = mask_model, kind, prompts, cfg, always_keep
        self.group_size, self.reserve = shared_groups(prompts, group_size), reserve
        self.backend = backend if backend is not None else Backend()
        self.decoding: Optional[Decoding] = None
        self.keeps: list[torch.Tensor] = []

    incremental = True

    @torch.no_grad()
    def _next_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.decoding is None:
            self.decoding = self.backend.start(self.mask_model, self.kind, self.prompts, self.group_size, self.reserve)
            return self.decoding.first
        return self.decoding.step(input_ids[:, -1], len(self.keeps) - 1)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        keep, masked = self.backend.top_p_mask(self._next_logits(input_ids), scores, self.cfg.top_p, self.cfg.top_k,
                                               self.cfg.min_tokens_to_keep, self.always_keep)
        self.keeps.append(keep)
        return masked

    def action_mask(self) -> torch.Tensor:
        """The allowed tokens at every generated position.  (B, T, V) bool"""
        return torch.stack(self.keeps, dim=1)


class FullPassMaskProcessor(LogitsProcessor):
    """NLPO's masks for ``model.generate`` in evaluation, beam search included, as RL4LMs' mask processors:
    each step runs the mask model over the whole sequence so far (no cache to follow the beams' reordering)
    and keeps its top-p nucleus, as :class:`MaskProcessor` does incrementally in rollouts.

    ``generate`` hands it ``k`` rows per prompt (``k`` beams; 1 when sampling or greedy), prompt row ``r // k``;
    a causal model's left padding is masked and its positions counted as ``generate`` counts them.
    """

    def __init__(self, mask_model: Any, kind: str, prompts: Prompts, top_p: float, top_k: int,
                 min_tokens_to_keep: int, always_keep: Sequence[int], backend: Backend) -> None:
        self.mask_model, self.kind, self.prompts, self.backend = mask_model, kind, prompts, backend
        self.top_p, self.top_k, self.min_keep, self.always_keep = top_p, top_k, min_tokens_to_keep, list(always_keep)
        self.encoded: Optional[torch.Tensor] = None

    incremental = False

    @torch.no_grad()
    def _next_logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows = input_ids.shape[0] // self.prompts.input_ids.shape[0]
        prompt_mask = self.prompts.attention_mask.repeat_interleave(rows, 0)
        with self.backend.execution.autocast():
            if self.kind == "causal":
                generated = input_ids.shape[1] - prompt_mask.shape[1]
                attention = torch.cat([prompt_mask, prompt_mask.new_ones(input_ids.shape[0], generated)], dim=1)
                positions = (attention.cumsum(-1) - 1).clamp(min=0)
                out = self.mask_model(input_ids=input_ids, attention_mask=attention, position_ids=positions)
            else:
                if self.encoded is None:
                    self.encoded = self.mask_model.get_encoder()(
                        input_ids=self.prompts.input_ids, attention_mask=self.prompts.attention_mask).last_hidden_state
                hidden = self.encoded.repeat_interleave(rows, 0)
                out = self.mask_model(encoder_outputs=(hidden,), attention_mask=prompt_mask,
                                      decoder_input_ids=input_ids)
        return out.logits[:, -1].float()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        _, masked = self.backend.top_p_mask(self._next_logits(input_ids), scores, self.top_p, self.top_k,
                                            self.min_keep, self.always_keep)
        return masked


DECODING_DIR = "decoding"  # every RL output's record of how evaluate decodes its model/, beside model/
DECODING_RECORD = "decoding.json"  # in it: the algorithm, model/'s fingerprint, and NLPO's mask settings or null
MASK_DIR = "mask_model"  # in it, for NLPO under eval_with_masks: the final mask model (a Hugging Face folder)


def save_decoding(folder: Path, algorithm: str, nlpo: Optional["NLPO"], tokenizer: Any) -> None:
    """Write RL output ``folder``'s :data:`DECODING_DIR`, once ``folder / MODEL_DIR`` holds the policy handed on:
    :data:`DECODING_RECORD`, ``{"algorithm", "policy": the fingerprint of model/, "masks"}``, where ``masks`` is
    null but for NLPO (``nlpo``), whose ``top_p``, ``top_k``, ``min_tokens_to_keep`` and ``eval_with_masks`` it
    holds, with the final mask model (LoRA merged) in :data:`MASK_DIR` under ``eval_with_masks``.

    Every RL output writes it, so that one fixed output path of the RL stage carries NLPO's masks under DVC, whose
    stage grid cannot give one algorithm outputs of its own; the fingerprint lets ``evaluate`` refuse a ``model/``
    switched under the masks (a checkout of one path alone) rather than mask it with another run's model."""
    out = folder / DECODING_DIR
    out.mkdir()
    masks = None
    if nlpo is not None:
        cfg = nlpo.cfg
        masks = {"top_p": cfg.top_p, "top_k": cfg.top_k, "min_tokens_to_keep": cfg.min_tokens_to_keep,
                 "eval_with_masks": cfg.eval_with_masks}
        if cfg.eval_with_masks:
            merged(nlpo.mask_model).save_pretrained(out / MASK_DIR)
            tokenizer.save_pretrained(out / MASK_DIR)
    write_json(out / DECODING_RECORD, {"algorithm": algorithm, "policy": fingerprint(folder / MODEL_DIR),
                                       "masks": masks})


def decoding_record(folder: Path) -> Optional[dict[str, Any]]:
    """The :data:`DECODING_RECORD` of stage folder ``folder`` (an RL output), or None (any other folder)."""
    record = folder / DECODING_DIR / DECODING_RECORD
    return read_json(record) if record.is_file() else None


def masks_for(model: Path, nlpo: bool) -> Optional[dict[str, Any]]:
    """NLPO's mask settings that ``evaluate`` applies to model folder ``model`` (``top_p``, ``top_k``,
    ``min_tokens_to_keep``, ``eval_with_masks``), or None (the policy alone).

    The ``model/`` of an NLPO output gets its run's settings (:data:`DECODING_RECORD` beside it). Given ``nlpo``
    (``--algorithm nlpo``) they are required, since evaluating without them silently scores another method: a
    ConfigError names what is missing and how to get it, as for a record of another algorithm. So it does,
    whatever ``nlpo``, when the masks are asked for and :data:`MASK_DIR` is absent, or when ``model`` is not the
    policy the record was written for (its ``policy`` fingerprint).

    A ``save_every`` policy (``checkpoints/iteration<k>/``) has no mask model of its own: the one that masked its
    iteration was the policy of the last refresh, which is not kept, and the output's mask model is the final
    one, possibly refreshed since, so pointing at it could mask an earlier policy with a later mask model. Keeping
    a mask model beside each saved iteration would double its size (the mask model is a full copy of the policy).
    So such a folder is evaluated without masks when its run says ``eval_with_masks: false`` and refused under
    ``--algorithm nlpo`` otherwise, pointing at the val curve, which scored it with its own masks."""
    if model.parent.name == SAVED_POLICIES:
        run_folder = model.parent.parent
        run = decoding_record(run_folder)
        masks = run["masks"] if run is not None else None
        if masks is not None and not masks["eval_with_masks"]:
            return masks
        if masks is not None and nlpo:
            raise ConfigError(f"--algorithm nlpo: {model} is a policy kept with save_every, and its run evaluates "
                              f"with masks (eval_with_masks in {run_folder / DECODING_DIR / DECODING_RECORD}), but "
                              f"the mask model of that iteration is not kept ({run_folder / DECODING_DIR / MASK_DIR}/ "
                              f"is the final one, which may have been refreshed since); its row of "
                              f"{run_folder / VALIDATION_OUT / 'curves.csv'}, if eval_every reached it, scored it with "
                              f"its own masks; evaluate the output's {MODEL_DIR}/, or leave --algorithm out to score "
                              f"this policy alone")
        if masks is None and nlpo:
            _refuse_unmasked(model, run_folder, run)
        return None
    record = decoding_record(model.parent)
    masks = record["masks"] if record is not None else None
    if masks is None:
        if nlpo:
            _refuse_unmasked(model, model.parent, record)
        return None
    where = model.parent / DECODING_DIR
    if record["policy"] != fingerprint(model):
        raise ConfigError(f"{where / DECODING_RECORD} was written for another policy than {model} (its fingerprint "
                          f"differs: {MODEL_DIR}/ was replaced while {DECODING_DIR}/ stayed, as a checkout of one "
                          f"path does); {_RESTORE}")
    if masks["eval_with_masks"] and not (where / MASK_DIR).is_dir():
        raise ConfigError(f"{where / DECODING_RECORD} says eval_with_masks, but {where / MASK_DIR}/ is missing "
                          f"beside it; the RL stage writes both; {_RESTORE}")
    return masks


_RESTORE = ("both are outputs of the rl stage: restore its whole output (dvc checkout <its stage>), or rerun it "
            "(dvc repro -f -s <its stage>)")


def _refuse_unmasked(model: Path, folder: Path, record: Optional[dict[str, Any]]) -> None:
    """``--algorithm nlpo`` on ``model`` of stage folder ``folder``, whose record has no masks: a ConfigError."""
    if record is not None:
        raise ConfigError(f"--algorithm nlpo: {model} was trained by {record['algorithm']} "
                          f"({folder / DECODING_DIR / DECODING_RECORD}), which has no action masks; give the "
                          f"{MODEL_DIR}/ of an NLPO output, or --algorithm {record['algorithm']}")
    raise ConfigError(f"--algorithm nlpo: no {DECODING_DIR}/{DECODING_RECORD} beside {model} (expected "
                      f"{folder / DECODING_DIR / DECODING_RECORD}, with {MASK_DIR}/ beside it under "
                      f"eval_with_masks), so NLPO's action masks cannot be applied; give the {MODEL_DIR}/ of the "
                      f"RL stage's whole output folder; {_RESTORE}")


def evaluation_processor(folder: Path, policy: Policy, gen: GenerationConfig
                         ) -> Callable[[Prompts], LogitsProcessor]:
    """For the policy of NLPO output ``folder`` decoding with ``gen``: a maker of each batch's mask processor
    (:func:`mask_processors`), with the final mask model (loaded frozen on the policy's backend) and the mask
    settings of its :data:`DECODING_RECORD`."""
    from grueflow.models import load_pretrained

    masks = read_json(folder / DECODING_DIR / DECODING_RECORD)["masks"]
    mask_model, _ = load_pretrained(folder / DECODING_DIR / MASK_DIR, backend=policy.backend, frozen=True)
    return mask_processors(mask_model, policy, masks["top_p"], masks["top_k"], masks["min_tokens_to_keep"], gen)


def mask_processors(mask_model: Any, policy: Policy, top_p: float, top_k: int, min_tokens_to_keep: int,
                    gen: GenerationConfig) -> Callable[[Prompts], LogitsProcessor]:
    """A maker of each batch's mask processor for ``policy`` decoding with ``gen``: ``mask_model``'s nucleus, the
    policy's special tokens always kept, on the policy's backend. Sampling one sequence per prompt gets the
    incremental :class:`MaskProcessor` (for :meth:`Policy.sample`: one mask-model token a step, as in rollouts);
    beam search and greedy decoding the :class:`FullPassMaskProcessor` (for ``generate``)."""
    special = list(policy.tokenizer.all_special_ids)
    if gen.do_sample and gen.num_beams == 1:
        settings = NLPOConfig(top_p=top_p, top_k=top_k, min_tokens_to_keep=min_tokens_to_keep)
        return lambda prompts: MaskProcessor(mask_model, policy.kind, prompts, settings, special, 1,
                                             gen.max_new_tokens, policy.backend)
    return lambda prompts: FullPassMaskProcessor(mask_model, policy.kind, prompts, top_p, top_k, min_tokens_to_keep,
                                                 special, policy.backend)


class NLPO(PPO):
    """PPO whose rollouts and ratios use the mask model's action masks."""

    masks_actions = True
    cfg: NLPOConfig
    policy: PolicyHandle  # set by setup()
    mask_model: torch.nn.Module  # a frozen copy of the policy, refreshed on schedule

    def __init__(self, cfg: NLPOConfig) -> None:
        super().__init__(cfg)
        self.refreshes = 0

    def setup(self, policy: PolicyHandle) -> None:
        """The mask model starts as a frozen copy of the policy (with its LoRA adapter, if any); settings that leave
        NLPO without effect on this vocabulary are logged as WARNINGs (:meth:`NLPOConfig.idle_settings`)."""
        self.policy = policy
        self.mask_model = copy.deepcopy(policy.model).eval()
        for p in self.mask_model.parameters():
            p.requires_grad_(False)
        vocab = self.mask_model.get_output_embeddings().weight.shape[0]  # the logits' width, V
        for idle in self.cfg.idle_settings(vocab):
            log.warning("nlpo: %s", idle)

    def before_rollout(self, iteration: int) -> None:
        """Refresh the mask model from the policy every ``target_update_iterations`` rollouts."""
        if iteration > 0 and iteration % self.cfg.target_update_iterations == 0:
            self.mask_model.load_state_dict(self.policy.model.state_dict())
            self.refreshes += 1

    def generation_processor(self, prompts: Prompts, group_size: int, max_new_tokens: int) -> MaskProcessor:
        return MaskProcessor(self.mask_model, self.policy.kind, prompts, self.cfg, list(self.policy.special_ids),
                             group_size, max_new_tokens, self.policy.backend)

    def state_dict(self) -> dict[str, Any]:
        return {"mask_model": self.mask_model.state_dict(), "refreshes": self.refreshes}

    def load_state_dict(self, state: Optional[dict[str, Any]]) -> None:
        self.mask_model.load_state_dict(state["mask_model"])
        self.refreshes = state["refreshes"]
