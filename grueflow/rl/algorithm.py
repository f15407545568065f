"""The interface between the RL trainer and an algorithm: :class:`Algorithm`, and the narrow views it gets.

The trainer (:class:`grueflow.rl.trainer.RLTrainer`) runs every algorithm through the same loop and calls
each hook below directly, in this order:

1. once, when it is built: the class flags (``uses_critic``, ``needs_double_backward``, ``own_update``,
   ``masks_actions``), :meth:`Algorithm.setup` with a :class:`PolicyHandle`, then
   :meth:`Algorithm.optimized_parameters`;
2. per iteration: :meth:`Algorithm.before_rollout`, :meth:`Algorithm.generation_processor` (sampling),
   :meth:`Algorithm.advantages`, then either epochs x minibatches of :meth:`Algorithm.loss` (the trainer's
   shared update) or, with ``own_update``, one call of :meth:`Algorithm.update` with an :class:`UpdateContext`;
3. with every checkpoint: :meth:`Algorithm.state_dict` and, on resume, :meth:`Algorithm.load_state_dict`.

Every hook but :meth:`Algorithm.advantages` has a default, so an algorithm overrides only what it changes.
No algorithm sees the trainer: what it may touch comes in a :class:`PolicyHandle` or an :class:`UpdateContext`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, NamedTuple, Optional, Protocol

import torch

from grueflow.models.backend import Backend
from grueflow.models.policy import Prompts
from grueflow.rl.configs import RLConfig
from grueflow.rl.objectives import MiniBatch, Outputs, policy_objective
from grueflow.rl.rollout import Rollout


class PolicyHandle(NamedTuple):
    """What :meth:`Algorithm.setup` may read of the policy it trains."""

    model: torch.nn.Module  # the trained model (with its LoRA adapter, if any); the trainer updates it in place
    kind: str  # "causal" or "seq2seq"
    special_ids: tuple[int, ...]  # the tokenizer's special token ids
    backend: Backend  # the policy's speed backend: incremental decoding, top-p masks


class UpdateContext(NamedTuple):
    """What an algorithm's own update (:meth:`Algorithm.update`) may use, and nothing else of the trainer."""

    policy_parameters: list[torch.nn.Parameter]  # the policy's trainable weights, in a fixed order; move them in place
    policy_logits: Callable[[Prompts, torch.Tensor], torch.Tensor]  # (prompts, completions (B, T)) -> (B, T, V)
    critic_hidden: Callable[[Prompts, torch.Tensor], torch.Tensor]  # what the value head reads: -> (B, T, H)
    value_head: Optional[torch.nn.Module]  # (B, T, H) -> values (B, T); None without a critic
    optimizer_step: Callable[[torch.Tensor], None]  # zero the grads, backward a scalar loss, step the trainer's
    # optimiser (over the parameters :meth:`Algorithm.optimized_parameters` chose)


class ActionMasks(Protocol):
    """A logits processor for generation that also records which tokens it allowed."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """The next token's logits (B, V) with the disallowed tokens at -inf."""

    def action_mask(self) -> torch.Tensor:
        """The allowed tokens at every generated position.  (B, T, V) bool"""


class Algorithm(ABC):
    """Base class of every RL algorithm: its advantage estimator, its loss or own update, its optional hooks.

    ``cfg`` is the algorithm's frozen config (a subclass of :class:`RLConfig` registered beside it in
    :mod:`grueflow.rl`). The class flags say which machinery the trainer builds for it; an override of
    :meth:`update` or :meth:`generation_processor` must be declared with ``own_update`` or ``masks_actions``
    (checked when the class is defined). Shapes: B sequences, T completion tokens, V the vocabulary.
    """

    uses_critic: ClassVar[bool] = False  # a value head (on the policy trunk or a separate copy): ``values`` are its
    needs_double_backward: ClassVar[bool] = False  # the update differentiates twice: the policy runs eager attention
    own_update: ClassVar[bool] = False  # :meth:`update` replaces the trainer's shared clipped update
    masks_actions: ClassVar[bool] = False  # :meth:`generation_processor` returns masks: sampling is never kept

    def __init__(self, cfg: RLConfig) -> None:
        self.cfg = cfg

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_declared(cls, "own_update", cls.own_update, "update", cls.update is not Algorithm.update)
        _check_declared(cls, "masks_actions", cls.masks_actions, "generation_processor",
                        cls.generation_processor is not Algorithm.generation_processor)

    # -- once, when the trainer is built ----------------------------------------------------

    def setup(self, policy: PolicyHandle) -> None:
        """Called once, after the policy's LoRA adapter (if any) is in place and before the value head and the
        optimiser are built. Default: nothing. NLPO copies its mask model from ``policy.model`` here."""

    def optimized_parameters(self, policy_params: list[torch.nn.Parameter], value_params: list[torch.nn.Parameter]
                             ) -> list[torch.nn.Parameter]:
        """The parameters the trainer's optimiser updates. Default: the policy's trainable ones, then the
        critic's (value head, then a separate critic's). TRPO keeps only the critic's: its policy moves by
        :meth:`update`."""
        return policy_params + value_params

    # -- collect ----------------------------------------------------------------------------

    def before_rollout(self, iteration: int) -> None:
        """Called before each rollout is sampled; ``iteration`` counts the completed ones (0 first). Default:
        nothing. NLPO refreshes its mask model from the policy on schedule."""

    def generation_processor(self, prompts: Prompts, group_size: int, max_new_tokens: int) -> Optional[ActionMasks]:
        """The logits processor for this rollout's sampling, whose action masks then also mask the update's
        log-probs; ``prompts`` hold groups of ``group_size`` identical prompts, at most ``max_new_tokens`` are
        generated. Default: None, every token allowed. Overriding it needs ``masks_actions = True``."""
        return None

    # -- advantages ---------------------------------------------------------------------------

    @abstractmethod
    def advantages(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, returns)``, both (B, T) and zero where ``mask`` is 0, from the rollout's per-token
        ``rewards`` (B, T: task reward at the last token, KL penalty per token), the critic's ``values``
        (B, T; zeros without a critic), ``mask`` (B, T) and the task ``scores`` (B,). ``returns`` are the
        critic's targets. Required."""

    # -- update -------------------------------------------------------------------------------

    def loss(self, new: Outputs, batch: MiniBatch, kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
        """The scalar loss of one minibatch for the trainer's shared update, and its diagnostics, which must
        hold ``losses/approx_kl`` (the early stop at ``target_kl`` reads it). ``new`` is the current policy's
        outputs (b, T) with gradients, ``batch`` the rollout's slice, ``kl_coef`` the KL controller's
        coefficient. Default: the clipped surrogate of :func:`grueflow.rl.objectives.policy_objective`
        (Schulman et al. 2017), with the KL term when ``cfg.kl_in_loss``."""
        return policy_objective(self.cfg, new, batch, kl_coef)

    def update(self, context: UpdateContext, rollout: Rollout, advantages: torch.Tensor, returns: torch.Tensor
               ) -> dict[str, float]:
        """An own update rule, run once per rollout instead of the shared clipped update (with
        ``own_update = True``); ``advantages`` and ``returns`` (B, T) are :meth:`advantages`'. Returns the
        curve's diagnostics. It does not run data-parallel. Default: none (the trainer's shared update)."""
        raise NotImplementedError(f"{type(self).__name__} has no own update; the trainer runs its shared update")

    # -- checkpoints --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs besides the weights and the trainer's state (tensors and plain values,
        loaded with ``weights_only``). Default: nothing."""
        return {}

    def load_state_dict(self, state: Optional[dict[str, Any]]) -> None:
        """Restore :meth:`state_dict`'s ``state`` (None from a checkpoint written before algorithms had state).
        Default: nothing to restore."""


def _check_declared(cls: type, flag: str, declared: bool, hook: str, overridden: bool) -> None:
    """An algorithm overrides ``hook`` exactly when it sets ``flag``: the trainer reads the flag, not the method."""
    if declared != overridden:
        raise TypeError(f"{cls.__name__} sets {flag} = {declared} but {'overrides' if overridden else 'does not override'} "
                        f"{hook}(); set {flag} = {overridden}, or {'drop' if overridden else 'implement'} {hook}()")
