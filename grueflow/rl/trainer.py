"""The sequence-level RL trainer (DESIGN.md, "The RL core"): collect -> advantages -> update.

Per iteration:
1. batched sampling with the KV cache (:meth:`Policy.sample`), each group's prompt encoded once;
2. one forward pass over prompt + completion for the frozen reference's log-probs, and one for the
   policy's log-probs and values: per batch, never per token, the prompt again once per group;
3. rewards: the task reward at each sequence's last token, the KL penalty ``-coef * kl_t`` per token;
4. the algorithm's advantages, then epochs x minibatches of its loss.

With one epoch of one minibatch (:attr:`RLTrainer.single_update`: ``epochs: 1`` and ``minibatch_size``
equal to ``rollouts_per_iteration``, as TRL's GRPO runs by default) the policy's pass in 2. is the
update's own forward pass, with gradients, so it runs once instead of twice.

The trainer calls an algorithm only through the hooks of :class:`~grueflow.rl.algorithm.Algorithm`: PPO, GRPO,
RLOO and REINFORCE++ differ only in their advantage estimator and loss, NLPO adds action masks, TRPO its own
update step; a value head on the policy trunk exists only for those that use a critic. With ``lora`` in the
method config the policy (and a separate critic) train LoRA adapters only and the reference is the
policy with its adapter disabled, so no reference copy is loaded.

Devices: every tensor is made on the policy's device (:mod:`grueflow.device`); under bf16 the forward passes
run in autocast and log-probs, KL, advantages and losses stay float32. The speed backend (the policy's) may
keep the sampling pass differentiable (:attr:`RLTrainer.keeps_sampling`).

Data-parallel (``processes`` > 1 under ``accelerate launch``, a GPU or a CPU share each): every process draws
the same prompts and keeps its shard of whole groups, generates, scores and computes advantages on that shard,
and averages its gradients with the others' after each backward pass, so the replicas take identical
steps; the rollout KL (for the KL controller) and the curve are averaged over the processes. Advantage
whitening (PPO, REINFORCE++) uses each shard's own statistics. TRPO's own update rule is not data-parallel.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from stable_baselines3.common.utils import explained_variance

from grueflow import checkpoints, postprocess
from grueflow.config import GenerationConfig
from grueflow.data import Sample
from grueflow.distributed import DataParallel
from grueflow.io import atomic_dir, rounded
from grueflow.metrics import TOKENS_KEY
from grueflow.metrics.reward import Reward, describe_nonfinite
from grueflow.models import load_pretrained
from grueflow.models.backend import SampledLogits, sparse_tied_embeddings
from grueflow.models.lora import (is_lora, load_adapter, load_trainable_state, merged, reference_view,
                                  trainable_parameters, trainable_state, with_lora)
from grueflow.models.policy import Policy, Prompts, Scores, completion_mask, selective_logprobs
from grueflow.rl import ALGORITHMS
from grueflow.rl.algorithm import Algorithm, PolicyHandle, UpdateContext
from grueflow.rl.configs import RLConfig
from grueflow.rl.kl import KL_ESTIMATORS, KLController, kl_k1
from grueflow.rl.objectives import MiniBatch, Outputs
from grueflow.rl.rollout import Rollout, Sampled
from grueflow.seeding import rng_state, set_rng_state

log = logging.getLogger(__name__)
STATE_FILE = "trainer_state.pt"
NEGATIVE_KL = -1.0  # nats per completion: below it the k1 estimate is no sampling noise (TRL warns there too)
CHECKPOINT_UNIT = "iteration"  # checkpoints are <resume dir>/iteration<k>/
VALUE_FILE = "value_head.safetensors"


class AdamW(torch.optim.AdamW):
    """PyTorch's AdamW whose fused kernel (one pass per parameter) also bumps each updated weight's version
    counter, as every other in-place update does. The fused kernel writes the weights without bumping it, and
    what is keyed on versions would silently keep the old weights: the CPU backend's reordered oneDNN weights,
    a kept sampling pass's stale-weights guard."""

    def step(self, closure: Any = None) -> Any:
        loss = super().step(closure)
        if self.defaults.get("fused"):
            torch.autograd.graph.increment_version([p for g in self.param_groups for p in g["params"]
                                                    if p.grad is not None])
        return loss


class ValueHead(torch.nn.Module):
    """A scalar value per token from the policy's last hidden state (the policy trunk is shared)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.normal_(self.linear.weight, std=1 / (hidden_size + 1))
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, T)
        return self.linear(hidden).squeeze(-1)


# curve columns that measure wall time: the only ones that differ between two runs with the same params and seed
WALL_CLOCK_KEYS = ("charts/generated_tokens_per_s", "charts/iteration_s", "charts/generation_s", "charts/reward_s",
                   "charts/reward_share", "charts/scoring_s", "charts/update_s")


class NonFiniteError(RuntimeError):
    """A NaN or infinite reward, advantage, loss or gradient: training stops at that iteration, before the
    optimiser step, and ``batch`` holds the rollout that produced it (prompts, generations, rewards)."""

    def __init__(self, what: str, iteration: int, batch: dict[str, Any], cause: str = "") -> None:
        super().__init__(f"non-finite {what} at iteration {iteration}{f' ({cause})' if cause else ''}: the weights "
                         f"were not updated with it")
        self.what, self.iteration, self.batch = what, iteration, batch


FLOAT32_MAX = float(np.finfo(np.float32).max)  # the rollout's rewards are float32 tensors: past this, inf


def reward_cause(parts: dict[str, list[float]], names: dict[str, str], total: Sequence[float] = ()) -> str:
    """Why a rollout's reward is not finite: its components with non-finite scores (key, metric, samples), and
    that a metric scores NaN the samples it cannot score; else its components with scores past float32's range
    (:data:`FLOAT32_MAX`: finite as Python floats, infinite in the float32 reward tensor); else, where a sample's
    ``total`` (the weighted sum) is past that range, that, naming each component's largest score. Empty when every
    score and total is finite in float32."""
    described = describe_nonfinite(parts, names)
    if described:
        return (f"{described}; a metric scores NaN a sample it cannot score, e.g. one without references, or ROUGE "
                f"against references with no [a-z0-9] token (see the metric's warning)")
    huge = {key: [v for v in values if abs(v) > FLOAT32_MAX] for key, values in parts.items()}
    beyond = [f"{key} of metric {names.get(key, key)!r}: {len(found)} of {len(parts[key])} samples (e.g. {found[0]:g})"
              for key, found in huge.items() if found]
    if beyond:
        return (f"{'; '.join(beyond)}: past float32's range (±{FLOAT32_MAX:.3g}), in which RL keeps its rewards; "
                f"scale the metric's scores down")
    if not any(abs(t) > FLOAT32_MAX for t in total):
        return ""
    largest = [f"{key} of metric {names.get(key, key)!r} up to {max(map(abs, values)):g}"
               for key, values in parts.items() if values]
    return (f"the weighted sum of the components is past float32's range (±{FLOAT32_MAX:.3g}), in which RL keeps its "
            f"rewards ({'; '.join(largest)}); scale the components' scores or weights down")


def _json_numbers(values: list[float]) -> list[Optional[float]]:
    """Scores as JSON can hold them: NaN and infinities become null."""
    return [float(v) if np.isfinite(v) else None for v in values]


class KLCeilingError(RuntimeError):
    """The policy ran away from the reference: a rollout's KL exceeded ``kl_ceiling`` (action ``stop``)."""

    def __init__(self, kl: float, ceiling: float, iteration: int) -> None:
        super().__init__(f"KL to the reference {kl:.4g} exceeds kl_ceiling {ceiling} at iteration {iteration}; "
                         "lower the learning rate, raise kl.coef, or set kl_ceiling_action: skip")
        self.kl, self.ceiling, self.iteration = kl, ceiling, iteration


@dataclass
class TrainerState:
    """Everything besides the weights that a resumed run needs to continue bit-for-bit."""

    iteration: int = 0
    curve: list[dict[str, float]] = field(default_factory=list)


class PromptSampler:
    """Cycles through the training Samples in seeded random order, ``n`` at a time."""

    def __init__(self, samples: list[Sample], seed: int) -> None:
        self.samples = samples
        self.rng = random.Random(seed)
        self.order: list[int] = []

    def next(self, n: int) -> list[Sample]:
        batch = []
        while len(batch) < n:
            if not self.order:
                self.order = list(range(len(self.samples)))
                self.rng.shuffle(self.order)
            batch.append(self.samples[self.order.pop()])
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "order": list(self.order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.order = list(state["order"])


class RLTrainer:
    """Trains ``policy`` against ``reward`` with a registered algorithm.

    The reference is ``ref_model``, a frozen copy of the start model; under ``cfg.lora`` it must be
    None: the reference is then the policy with its LoRA adapter disabled.
    """

    def __init__(self, algorithm: str, cfg: RLConfig, policy: Policy, ref_model: Optional[Any], reward: Reward,
                 samples: list[Sample], generation: GenerationConfig, seed: int,
                 parallel: DataParallel = DataParallel()) -> None:
        if (cfg.lora is None) == (ref_model is None):
            raise ValueError("pass a reference model for full fine-tuning, and none with lora (the reference is "
                             f"then the base with the adapter disabled); got lora={cfg.lora} and "
                             f"ref_model={'None' if ref_model is None else 'a model'}")
        self.cfg, self.policy, self.ref_model, self.reward, self.generation = cfg, policy, ref_model, reward, generation
        self.algorithm: Algorithm = ALGORITHMS.get(algorithm).load()(cfg)
        self.parallel = parallel
        if parallel.enabled and self.algorithm.own_update:
            raise ValueError(f"{algorithm} has its own update rule, which does not run data-parallel; "
                             f"set processes: 1 (got {parallel.world_size} processes)")
        if self.algorithm.needs_double_backward:
            policy.model.set_attn_implementation("eager")  # fused CPU attention has no double backward
            sparse_tied_embeddings(policy.model, sparse=False)  # nor a sparse embedding gradient
        self.critic_model = self._build_models(cfg, policy)
        self.algorithm.setup(PolicyHandle(policy.model, policy.kind, tuple(policy.tokenizer.all_special_ids),
                                          policy.backend))
        self.device = policy.device
        self.value_head = (ValueHead(policy.model.config.get_text_config().hidden_size).to(self.device)
                           if self.algorithm.uses_critic else None)
        value_params = list(self.value_head.parameters()) if self.value_head else []
        if self.critic_model is not None:
            value_params += trainable_parameters(self.critic_model)
        policy_params = trainable_parameters(policy.model)
        params = self.algorithm.optimized_parameters(policy_params, value_params)
        fused = all(p.device.type in ("cpu", "cuda") for p in params)  # AdamW's kernel: one pass per parameter
        self.optimizer = (torch.optim.RMSprop(params, lr=cfg.learning_rate, alpha=0.99, eps=1e-5)
                          if cfg.optimizer == "rmsprop"
                          else AdamW(params, lr=cfg.learning_rate, eps=1e-5, fused=fused or None))
        total_updates = cfg.iterations
        schedule = (lambda i: 1.0) if cfg.lr_schedule == "constant" else (lambda i: 1.0 - i / total_updates)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.kl = KLController.from_config(cfg.kl)
        self.sampler = PromptSampler(samples, seed)
        self.state = TrainerState()
        self.last_batch: dict[str, Any] = {}  # the newest rollout's text, for NonFiniteError
        self._warned_negative_kl = False
        self.shuffle = torch.Generator().manual_seed(seed)
        if ref_model is not None:
            for p in ref_model.parameters():
                p.requires_grad_(False)
            ref_model.eval()
        policy.model.eval()  # no dropout: rollout and update log-probs must agree
        parallel.broadcast_parameters([m for m in (policy.model, self.value_head, self.critic_model) if m is not None])

    def _build_models(self, cfg: RLConfig, policy: Policy) -> Optional[Any]:
        """Add LoRA adapters to the policy when asked; returns the separate critic's model, if any.

        A separate critic starts as a copy of the start model (with its own adapter under LoRA).
        """
        separate = self.algorithm.uses_critic and cfg.critic == "separate"
        # the critic trains through its hidden states only: its tied embedding gets no dense LM-head gradient
        critic = sparse_tied_embeddings(copy.deepcopy(policy.model), sparse=False) if separate else None
        if cfg.lora is not None:
            policy.model = with_lora(policy.model, cfg.lora)
            critic = with_lora(critic, cfg.lora) if critic is not None else None
        return critic

    # -- collect ---------------------------------------------------------------------------

    @property
    def single_update(self) -> bool:
        """One optimiser step per rollout (one epoch, one minibatch of the whole rollout, the shared update).

        The update's own forward pass is then the behaviour policy's, so :meth:`step` takes the rollout's
        log-probs and values from it instead of a separate pass (TRL does the same when generation and
        optimisation steps line up).
        """
        return (not self.algorithm.own_update and self.cfg.epochs == 1
                and self.cfg.minibatch_size == self.cfg.rollouts_per_iteration)

    @property
    def keeps_sampling(self) -> bool:
        """Whether the single update differentiates the sampling pass (where the policy's speed backend can
        keep it) instead of running the policy over the rollout again: one optimiser step per rollout, no
        critic (nothing reads the policy's hidden states) and no logits processor (NLPO)."""
        return (self.single_update and self.value_head is None
                and not self.algorithm.masks_actions
                and self.policy.backend.keeps_sampling(self.policy.model))

    def _outputs(self, prompts: Prompts, completions: torch.Tensor, action_mask: Optional[torch.Tensor] = None,
                 group_size: int = 1, kept: Optional[SampledLogits] = None) -> Outputs:
        """The policy's outputs over a rollout, its log-probs under ``action_mask`` (:meth:`sampling_mask`: the
        distribution the rollout sampled from): from a forward pass over the rollout, or from ``kept`` (its sampling
        pass) when given. Float32 throughout.

        The entropy carries gradients only when the loss uses it (``ent_coef`` != 0).
        """
        shared = self.value_head is not None and self.critic_model is None
        scores = (Scores(kept.logits(), None) if kept is not None
                  else self.policy.score(prompts, completions, with_hidden=shared, group_size=group_size))
        values = self.value_head(scores.hidden if shared else self.critic_hidden(prompts, completions, group_size)) \
            if self.value_head is not None else None
        logprobs, entropy = selective_logprobs(scores.logits, completions, action_mask, entropy=True)
        return Outputs(logprobs, values, entropy if self.cfg.ent_coef else entropy.detach())

    def critic_hidden(self, prompts: Prompts, completions: torch.Tensor, group_size: int = 1) -> torch.Tensor:
        """The hidden states the value head reads: the separate critic's, or the policy trunk's.  (B, T, H)"""
        model = self.critic_model if self.critic_model is not None else self.policy.model
        return self.policy.score(prompts, completions, with_hidden=True, model=model, group_size=group_size).hidden

    def reference_logits(self, prompts: Prompts, completions: torch.Tensor, group_size: int = 1) -> torch.Tensor:
        """The frozen reference's logits per completion token: the reference copy, or the adapter-free base.  (B, T, V)"""
        if self.ref_model is not None:
            return self.policy.score(prompts, completions, model=self.ref_model, group_size=group_size).logits
        with reference_view(self.policy.model) as base:
            return self.policy.score(prompts, completions, model=base, group_size=group_size).logits

    @torch.no_grad()
    def sample_rollout(self, keep: bool = False) -> Sampled:
        """Generation, reward and the reference pass, before the behaviour policy's (:meth:`with_behaviour`);
        with ``keep``, the sampling pass kept differentiable where the policy's backend can keep it."""
        group = self.cfg.group_size
        samples = [s for s in self.sampler.next(self.cfg.rollouts_per_iteration // group) for _ in range(group)]
        samples = self.parallel.shard(samples, group)  # this process's whole groups (all of them in one process)
        prompts = self.policy.encode([s.prompt for s in samples])
        self.algorithm.before_rollout(self.state.iteration)
        processor = self.algorithm.generation_processor(prompts, group, self.generation.max_new_tokens)
        started = time.perf_counter()
        if keep:
            completions, kept = self.policy.sample_kept(prompts, self.generation, group)
        else:
            completions, kept = self.policy.sample(prompts, self.generation, group, processor), None
        generation_s = time.perf_counter() - started
        action_mask = processor.action_mask() if processor is not None else None
        mask = completion_mask(completions, self.policy.eos_token_id)
        texts = postprocess.apply(self.generation.post_processing, self.policy.decode(completions))
        meta = [s.meta for s in samples]
        if self.reward.dense:  # a dense component scores each completion token, given as text
            meta = [{**m, TOKENS_KEY: tokens} for m, tokens in zip(meta, self.policy.token_texts(completions, mask))]
        started = time.perf_counter()
        scored = self.reward.score([s.prompt for s in samples], texts, [s.references for s in samples], meta)
        total, parts = scored.total, scored.parts
        reward_s = time.perf_counter() - started
        self.last_batch = {"iteration": self.state.iteration + 1, "prompts": [s.prompt for s in samples],
                           "generations": texts, "references": [list(s.references) for s in samples],
                           "reward": _json_numbers(total), "components": {k: _json_numbers(v) for k, v in parts.items()}}
        scores = torch.tensor(total, dtype=torch.float32, device=self.device)
        self._guard("reward", scores, reward_cause(parts, self.reward.names, total))
        started = time.perf_counter()
        # under the rollout's action masks, as the policy's: KL(policy || reference), both restricted to the
        # tokens the masks allow (the distribution the rollout samples from), is >= 0 and 0 at the start
        ref_logits = self.reference_logits(prompts, completions, group)
        action_mask = self.sampling_mask(action_mask, ref_logits.shape)
        ref_logprobs, _ = selective_logprobs(ref_logits, completions, action_mask)
        del ref_logits
        scoring_s = time.perf_counter() - started
        components = {k: float(np.mean(v)) for k, v in parts.items()}
        sequence = dense = None
        if scored.per_token is not None:
            sequence = torch.tensor(scored.sequence, dtype=torch.float32, device=self.device)
            dense = torch.zeros_like(mask, dtype=torch.float32)
            for row, values in enumerate(scored.per_token):
                dense[row, :len(values)] = torch.tensor(values, dtype=torch.float32)
            self._guard("dense reward", dense)
        return Sampled(prompts, completions, mask, ref_logprobs * mask, scores, components, generation_s, reward_s,
                       scoring_s, action_mask, kept, sequence, dense)

    def sampling_mask(self, action_mask: Optional[torch.Tensor], shape: torch.Size) -> Optional[torch.Tensor]:
        """The tokens a rollout could draw at each position, for its log-probs: ``action_mask`` (NLPO's masks, or
        None: all) with EOS also banned where ``rollout_generation`` forbade it (a minimum length: the first
        ``min_new`` tokens), so that the policy's and the reference's log-probs, the PPO ratio and the k1 KL are
        those of the distribution sampled from. Without the ban, a policy could raise P(EOS) where EOS is never
        drawn and so lower the log-probability of every sampled token: a k1 KL far below 0, which the penalty
        rewards. The first token's ban (an empty completion is never drawn) is left out when no minimum length is
        set: it moves only the first token's log-probability, by log(1 - P(EOS)).  ``shape``: the logits' (B, T, V)
        """
        banned = min(self.generation.min_new(self.policy.kind), shape[1])
        if banned <= 1:
            return action_mask
        allowed = action_mask.clone() if action_mask is not None else torch.ones(shape, dtype=torch.bool,
                                                                                  device=self.device)
        allowed[:, :banned, self.policy.eos_token_id] = False
        return allowed

    def with_behaviour(self, sampled: Sampled, outputs: Outputs, behaviour_s: float = 0.0
                       ) -> Rollout:
        """The rollout: ``sampled`` with the behaviour policy's log-probs and values (detached from ``outputs``),
        the per-token KL to the reference and the rewards: the task reward at each sequence's last token (its
        sequence-level components alone when a component is dense, whose weighted per-token scores are added
        token by token), minus ``coef x KL`` per token unless the KL is in the loss. ``behaviour_s``: the
        behaviour pass's seconds, counted as scoring."""
        mask, ref_logprobs = sampled.mask, sampled.ref_logprobs
        logprobs = outputs.logprobs.detach()
        values = outputs.values.detach() if outputs.values is not None else torch.zeros_like(logprobs)
        rewards = torch.zeros_like(logprobs)
        if not self.cfg.kl_in_loss:
            rewards -= self.kl.coef * KL_ESTIMATORS[self.cfg.kl_estimator](logprobs, ref_logprobs) * mask
        last = (mask.sum(1).long() - 1).clamp(min=0)
        sequence = sampled.scores if sampled.dense is None else sampled.sequence
        rewards[torch.arange(len(rewards), device=rewards.device), last] += sequence
        if sampled.dense is not None:
            rewards += sampled.dense * mask
        return Rollout(sampled.prompts, sampled.completions, mask, logprobs * mask, ref_logprobs,
                       kl_k1(logprobs, ref_logprobs) * mask, values * mask, rewards, sampled.scores, sampled.components,
                       sampled.generation_s, sampled.reward_s, sampled.scoring_s + behaviour_s, sampled.action_mask)

    def collect(self) -> Rollout:
        """A complete rollout: :meth:`sample_rollout`, then the behaviour policy's pass over it (no gradients)."""
        sampled = self.sample_rollout()
        started = time.perf_counter()
        with torch.no_grad():
            outputs = self._outputs(sampled.prompts, sampled.completions, sampled.action_mask, self.cfg.group_size)
        return self.with_behaviour(sampled, outputs, time.perf_counter() - started)

    def _warn_negative_kl(self, seq_kl: float) -> None:
        """Warn once per run when the rollout's mean k1 KL per completion falls below ``NEGATIVE_KL``.

        On completions sampled from the policy itself, ``E[log p - log q] = KL(p || q) >= 0``. A clearly negative
        mean says the rollouts come from another distribution (top-k, top-p or a temperature in
        ``rollout_generation``; NLPO's masks and a minimum length's EOS ban apply to both sides of the KL,
        :meth:`sampling_mask`), and a k1 penalty then pays the policy for lowering the probability of what it
        samples (TRL's training FAQ, "negative KL"). k3 is never negative.
        """
        if not seq_kl < NEGATIVE_KL or self._warned_negative_kl:  # a NaN KL is the non-finite guard's to report
            return
        self._warned_negative_kl = True
        g = self.generation
        given = {"top_k": (g.top_k, 0), "top_p": (g.top_p, 1.0), "temperature": (g.temperature, 1.0),
                 "repetition_penalty": (g.repetition_penalty, 1.0), "no_repeat_ngram_size": (g.no_repeat_ngram_size, 0)}
        warped = [f"{key}: {value}" for key, (value, neutral) in given.items() if value != neutral]
        log.warning("iteration %d: the rollout's mean KL to the reference is %.3g nats per completion, below %g: "
                    "the rollouts are not sampled from the policy itself (%s), and the %s KL penalty now pays the "
                    "policy for moving away from the reference. Sample without these, or set kl_estimator: k3 "
                    "(never negative).", self.state.iteration + 1, seq_kl, NEGATIVE_KL,
                    ", ".join(warped) or "rollout_generation warps nothing", self.cfg.kl_estimator)

    def _guard(self, what: str, values: torch.Tensor, cause: str = "") -> None:
        """Raise a :class:`NonFiniteError` when ``values`` (on any process) are not all finite; ``cause`` says
        where they came from, for its message."""
        bad = not torch.isfinite(values).all()
        if self.parallel.enabled:  # every process stops together, rather than the others waiting on it forever
            bad = self.parallel.sum([float(bad)])[0] > 0
        if bad:
            raise NonFiniteError(what, self.state.iteration + 1, self.last_batch, cause)

    # -- update ----------------------------------------------------------------------------

    def update(self, rollout: Rollout, first: Optional[Outputs] = None) -> dict[str, float]:
        """The algorithm's advantages, then its own update (:attr:`Algorithm.own_update`) or the shared one
        (:meth:`shared_update`), then the learning-rate schedule's step; returns the curve's diagnostics.

        ``first`` is the policy's outputs over the whole rollout, with gradients, when :meth:`step` already
        computed them (:attr:`single_update`).
        """
        advantages, returns = self.algorithm.advantages(rollout.rewards, rollout.values, rollout.mask, rollout.scores)
        self._guard("advantage", advantages)
        diagnostics = {}
        if self.value_head is not None:  # how much of the returns the critic explained before this update
            valid = rollout.mask.bool()
            diagnostics["losses/explained_variance"] = float(
                explained_variance(rollout.values[valid].cpu().numpy(), returns[valid].cpu().numpy()))
        if self.algorithm.own_update:
            stats = self.algorithm.update(self.update_context(), rollout, advantages, returns)
        else:
            stats = self.shared_update(rollout, advantages, returns, first)
        self.scheduler.step()
        return {**stats, **diagnostics}

    def update_context(self) -> UpdateContext:
        """What an algorithm's own update may use: the policy's trainable weights, its logits, the critic and
        one step of the optimiser."""
        return UpdateContext(trainable_parameters(self.policy.model),
                             lambda prompts, completions: self.policy.score(prompts, completions).logits,
                             self.critic_hidden, self.value_head, self._optimizer_step)

    def _optimizer_step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def shared_update(self, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor,
                      first: Optional[Outputs] = None) -> dict[str, float]:
        """Epochs x minibatches of the algorithm's loss, each step's gradient clipped to ``max_grad_norm``; stops
        early when an epoch's mean approx KL exceeds 1.5 x ``target_kl``. Returns each diagnostic's mean.

        Minibatches hold whole groups of ``group_size`` completions when ``minibatch_size`` allows, so each
        group's prompt is encoded once.
        """
        n, size = rollout.mask.shape[0], self.cfg.minibatch_size // self.parallel.world_size
        group = self.cfg.group_size if size % self.cfg.group_size == 0 else 1
        totals: dict[str, list[float]] = {}
        for _ in range(self.cfg.epochs):
            if first is not None:  # the one minibatch is the rollout, in its own order
                order = torch.arange(n, device=self.device)
            else:  # whole groups in random order, drawn on the CPU so every device draws the same
                groups = torch.randperm(n // group, generator=self.shuffle, device="cpu")
                order = (groups[:, None] * group + torch.arange(group, device="cpu")).view(-1).to(self.device)
            epoch_kl = []
            for start in range(0, n, size):
                idx = order[start:start + size]
                if first is not None:
                    new, first = first, None
                else:
                    prompts = Prompts(rollout.prompts.input_ids[idx], rollout.prompts.attention_mask[idx])
                    action_mask = rollout.action_mask[idx] if rollout.action_mask is not None else None
                    new = self._outputs(prompts, rollout.completions[idx], action_mask, group)
                batch = MiniBatch(rollout.mask[idx], rollout.logprobs[idx], rollout.ref_logprobs[idx],
                                  rollout.values[idx], advantages[idx], returns[idx])
                stats = self._minibatch_step(new, batch)
                for key, value in stats.items():
                    totals.setdefault(key, []).append(value)
                epoch_kl.append(stats["losses/approx_kl"])
            epoch_kl = self.parallel.mean([float(np.mean(epoch_kl))]) if self.parallel.enabled else epoch_kl
            if self.cfg.target_kl is not None and float(np.mean(epoch_kl)) > 1.5 * self.cfg.target_kl:
                log.info("early stop: approx KL %.4f > 1.5 x target_kl %.4f", np.mean(epoch_kl), self.cfg.target_kl)
                break
        return {k: float(np.mean(v)) for k, v in totals.items()}

    def _minibatch_step(self, new: Outputs, batch: MiniBatch) -> dict[str, float]:
        """One optimiser step on the algorithm's loss of a minibatch, its gradient averaged over the processes."""
        loss, stats = self.algorithm.loss(new, batch, self.kl.coef)
        self._guard("loss", loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.parallel.average_gradients(params)
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        self._guard("gradient norm", norm)
        self.optimizer.step()
        return stats

    # -- the loop --------------------------------------------------------------------------

    def step(self) -> dict[str, float]:
        """One iteration: collect, update, adapt the KL coefficient; returns the curve row."""
        started = time.perf_counter()
        first = None
        if self.single_update:  # the update's forward pass gives the behaviour policy's log-probs and values
            sampled = self.sample_rollout(keep=self.keeps_sampling)
            update_started = time.perf_counter()
            first = self._outputs(sampled.prompts, sampled.completions, sampled.action_mask, self.cfg.group_size,
                                  sampled.kept)
            rollout = self.with_behaviour(sampled, first)
            del sampled  # the kept sampling pass lives on only in ``first``'s graph
        else:
            rollout = self.collect()
            update_started = time.perf_counter()
        seq_kl, kl_sum, n_tokens = rollout.kl.sum(1).mean().item(), rollout.kl.sum().item(), rollout.mask.sum().item()
        if self.parallel.enabled:  # one KL for every process: the same coefficient and ceiling decision
            seq_kl, kl_sum, n_tokens = self.parallel.mean([seq_kl, kl_sum, n_tokens])
        token_kl = kl_sum / max(n_tokens, 1.0)  # over every completion token of the rollout (all processes)
        self._warn_negative_kl(seq_kl)
        kl_coef = self.kl.coef
        runaway = self.cfg.kl_ceiling is not None and seq_kl > self.cfg.kl_ceiling
        if runaway and self.cfg.kl_ceiling_action == "stop":
            raise KLCeilingError(seq_kl, self.cfg.kl_ceiling, self.state.iteration + 1)
        if runaway:
            log.warning("iteration %d: KL %.4g above kl_ceiling %s, update skipped", self.state.iteration + 1,
                        seq_kl, self.cfg.kl_ceiling)
        stats = {} if runaway else self.update(rollout, first)
        update_s = time.perf_counter() - update_started
        self.kl.step(seq_kl, token_kl)
        tokens = rollout.mask.sum().item()
        self.state.iteration += 1
        iteration_s = time.perf_counter() - started
        weights = self.reward.weights
        row = {
            "iteration": self.state.iteration,
            "reward/task": rollout.scores.mean().item(),
            **{f"reward/{k}": v for k, v in rollout.components.items()},
            **{f"reward_weighted/{k}": weights[k] * v for k, v in rollout.components.items()},
            "kl/sequence": seq_kl,
            "kl/token": token_kl,
            "kl/coef": kl_coef,
            **stats,
            "charts/mean_length": rollout.mask.sum(1).mean().item(),
            "charts/learning_rate": self.scheduler.get_last_lr()[0],
            "charts/generated_tokens_per_s": tokens / max(rollout.generation_s, 1e-9),
            "charts/iteration_s": iteration_s,
            "charts/update_skipped": float(runaway),
            "charts/generation_s": rollout.generation_s,
            "charts/reward_s": rollout.reward_s,
            "charts/reward_share": rollout.reward_s / iteration_s,
            "charts/scoring_s": rollout.scoring_s,
            "charts/update_s": update_s,
        }
        if self.parallel.enabled:  # the curve of the whole rollout: each value averaged over the processes
            row = {**dict(zip(row, self.parallel.mean(row.values()))), "iteration": self.state.iteration}
        self.state.curve.append({k: rounded(v) for k, v in row.items()})
        return row

    def train(self, checkpoint: Callable[["RLTrainer"], None] | None = None,
              progress: Callable[[dict[str, float]], None] | None = None,
              validate: Callable[["RLTrainer"], None] | None = None) -> TrainerState:
        """Train to ``cfg.iterations``; after each iteration ``progress(row)``, then ``validate(self)`` (also once
        before the first; :class:`grueflow.validation.Validation`), then, every ``checkpoint_every``,
        ``checkpoint(self)``."""
        if validate:
            validate(self)
        while self.state.iteration < self.cfg.iterations:
            row = self.step()
            if progress:
                progress(row)
            if validate:
                validate(self)
            if checkpoint and self.state.iteration % self.cfg.checkpoint_every == 0:
                checkpoint(self)
        return self.state

    # -- checkpoints -----------------------------------------------------------------------

    def save(self, out_dir: str | Path, key: str) -> None:
        """Write a resumable checkpoint into folder ``out_dir``, atomically (a previous one stays until it is
        complete); a stage's resume folder of several checkpoints is :meth:`save_checkpoint`'s."""
        with atomic_dir(out_dir) as tmp:
            self.save_to(tmp, key)

    def save_to(self, folder: Path, key: str, final: bool = False) -> None:
        """Write the policy, the value head and the trainer state into ``folder``.

        The policy is written as resumable weights (under LoRA: the adapter only), or, when ``final``,
        as a plain Hugging Face model (LoRA merged) that ``evaluate`` loads without peft, without the trainer state:
        that folder is a content-hashed output (DVC's, and the digest of what reads it), which two runs with the
        same params and seed must write byte for byte, and a ``torch.save`` archive never is (it holds a random
        serialization id, and the curve's wall-clock columns). The curve is the stage's ``curves.csv``.
        """
        (merged(self.policy.model) if final else self.policy.model).save_pretrained(folder)
        self.policy.tokenizer.save_pretrained(folder)
        if self.value_head is not None:
            save_file(self.value_head.state_dict(), str(folder / VALUE_FILE))
        if final:
            return
        torch.save({
            "key": key,
            "state": {"iteration": self.state.iteration, "curve": self.state.curve},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "kl": self.kl.state_dict(),
            "sampler": self.sampler.state_dict(),
            "shuffle": self.shuffle.get_state(),
            "algorithm": self.algorithm.state_dict(),
            "critic": trainable_state(self.critic_model) if self.critic_model is not None else None,
            "rng": rng_state(),
        }, folder / STATE_FILE)

    def load(self, ckpt_dir: str | Path) -> None:
        """Continue from a checkpoint written by :meth:`save` (weights, optimiser, KL, RNG, iteration)."""
        ckpt_dir = Path(ckpt_dir)
        if is_lora(self.policy.model):
            load_adapter(self.policy.model, ckpt_dir)
        else:
            model, _ = load_pretrained(ckpt_dir, self.policy.kind)
            self.policy.model.load_state_dict(model.state_dict())
        if self.value_head is not None:
            self.value_head.load_state_dict(load_file(str(ckpt_dir / VALUE_FILE)))
        saved = torch.load(ckpt_dir / STATE_FILE, weights_only=True)  # tensors and plain values only
        self.state = TrainerState(saved["state"]["iteration"], saved["state"]["curve"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.kl.load_state_dict(saved["kl"])
        self.sampler.load_state_dict(saved["sampler"])
        self.shuffle.set_state(saved["shuffle"])
        self.algorithm.load_state_dict(saved["algorithm"])
        if self.critic_model is not None:
            load_trainable_state(self.critic_model, saved["critic"])
        set_rng_state(saved["rng"])

    def save_checkpoint(self, resume_dir: str | Path, key: str, carried: checkpoints.Carried | None = None,
                        meta: Mapping[str, Any] | None = None) -> Path:
        """Add ``iteration<k>/`` to ``resume_dir`` (atomically, with the digests of what ``carried`` says a resume
        takes over, and ``meta`` in its marker), keeping the newest ``cfg.keep_checkpoints``."""
        return checkpoints.save(resume_dir, CHECKPOINT_UNIT, self.state.iteration, key,
                                lambda folder: self.save_to(folder, key), keep=self.cfg.keep_checkpoints,
                                carried=carried, meta=meta)

    def resume(self, resume_dir: str | Path, key: str, carried: checkpoints.Carried | None = None) -> Path | None:
        """Load run ``key``'s newest intact checkpoint in ``resume_dir`` (its ``carried`` files included); returns
        it, or None if there is none."""
        path = checkpoints.latest(resume_dir, CHECKPOINT_UNIT, key, carried)
        if path is not None:
            self.load(path)
        return path
