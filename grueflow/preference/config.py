"""Typed, frozen configs of the preference stages (parsed strictly by :func:`grueflow.params.parse`).

``params/methods/preferences.yaml`` → :class:`PreferencesConfig` (build_preferences),
``params/methods/reward_model.yaml`` → :class:`RewardModelConfig` (train_reward_model),
``params/methods/dpo.yaml`` → :class:`DPOConfig` (dpo).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from grueflow.config import (MAX_BATCH, MAX_COUNT, MAX_SEED, MAX_TOKENS, GenerationConfig, LoraConfig, RewardConfig,
                             check, check_size)

PREFERENCE_METHODS = ("dpo",)  # methods a suite may list under preference_methods
IPO_MIN_BETA = 1e-4  # IPO's target margin 1/(2 beta) at most 5000 nats (see DPOConfig)
SIGMOID_MAX_BETA = 1e3  # DPO's -log sigmoid(beta h) saturates past |h| = 0.01 nats (see DPOConfig)


@dataclass(frozen=True)
class PreferencesConfig:
    """Preferences from a metric, so the loop runs without people.

    ``samples_per_prompt`` completions of each of ``n_prompts`` training prompts (drawn in a seeded
    order; 0 = every prompt) are sampled from the policy with ``generation`` and scored with ``reward``
    (None: the task's own reward; any weighted sum of registered metrics otherwise). The best and the
    worst completion of a prompt make one pair, kept only when their scores differ by more than
    ``min_margin`` (ties never make a pair).
    """

    n_prompts: int = 64
    samples_per_prompt: int = 4
    min_margin: float = 0.0
    seed: int = 0
    batch_size: int = 16
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    reward: Optional[RewardConfig] = None

    def __post_init__(self) -> None:
        check(self.n_prompts >= 0, f"n_prompts must be >= 0 (0 = every training prompt), got {self.n_prompts}")
        check_size("n_prompts", self.n_prompts, MAX_COUNT)
        check(self.samples_per_prompt >= 2, f"samples_per_prompt must be >= 2 to make a pair, got {self.samples_per_prompt}")
        check_size("samples_per_prompt", self.samples_per_prompt, MAX_BATCH)
        check(self.min_margin >= 0, f"min_margin must be >= 0, got {self.min_margin}")
        check(0 <= self.seed <= MAX_SEED, f"seed must be in [0, {MAX_SEED:,}], got {self.seed}")
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check_size("batch_size", self.batch_size, MAX_BATCH)
        try:
            self.generation.check_rollout()
        except ValueError as error:
            raise ValueError(f"generation: {error}; pairs are made of sampled completions") from None


@dataclass(frozen=True)
class RewardModelConfig:
    """A Bradley–Terry reward model: a sequence classifier with one scalar output.

    Trained on about ``1 - val_fraction`` of the pairs (a seeded split that keeps the pairs of one sample, or
    without ``sample_id`` of one prompt, on one side, holding out whole groups that fit within ``val_fraction``)
    for ``epochs`` with AdamW; the rest is held out for the pairwise accuracy. Texts are
    ``prompt + " " + completion``, cut to the last ``max_length`` tokens (the completion is kept whole where it
    fits).
    """

    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    val_fraction: float = 0.2
    max_length: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check_size("epochs", self.epochs, MAX_COUNT)
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check_size("batch_size", self.batch_size, MAX_BATCH)
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm} (0 would clip every "
                                      f"gradient to nothing, a negative one turn descent into ascent)")
        check(0 <= self.val_fraction < 1, f"val_fraction must be in [0, 1), got {self.val_fraction}")
        check(self.max_length > 1, f"max_length must be > 1, got {self.max_length}")
        check_size("max_length", self.max_length, MAX_TOKENS)
        check(0 <= self.seed <= MAX_SEED, f"seed must be in [0, {MAX_SEED:,}], got {self.seed}")


@dataclass(frozen=True)
class DPOConfig:
    """Direct Preference Optimisation (Rafailov et al. 2023) against a frozen reference.

    With ``h = log π(y_c|x)/π_ref(y_c|x) - log π(y_r|x)/π_ref(y_r|x)`` (sums over completion tokens):
    ``loss_type: sigmoid`` minimises ``-log σ(β h)`` (DPO); ``ipo`` minimises ``(h - 1/(2β))²``
    (IPO, Azar et al. 2023), with each completion's log-ratio averaged over its tokens (``ipo_margin: token_mean``,
    the default: TRL's IPO, which its authors confirmed, so a TRL ``beta`` means the same here) or summed over
    them (``sum``: the paper's eq. 17 over sequence log-probs, whose target ``1/(2β)`` is then for the whole
    completion); ``ipo_margin`` is read with ``ipo`` only. ``epochs`` passes over the pairs in batches of
    ``batch_size`` pairs, AdamW at ``learning_rate``. With ``lora`` only adapters train and the reference is the
    start model with its adapter disabled (no second copy).

    ``beta`` is bounded by the loss it enters, both bounds far outside the published ranges (DPO 0.01-0.5,
    Rafailov et al. 2023; IPO's τ 0.01-1, Azar et al. 2023; TRL's default 0.1):

    - ``ipo``: ``beta >= IPO_MIN_BETA`` (1e-4), a target margin ``1/(2β)`` of at most 5000 nats. The loss
      ``(h - 1/(2β))²`` is float32: its square overflows once the target passes ~1.8e19 (β ~ 3e-20), and long
      before that the target swamps ``h``: float32 keeps 24 bits, so at a target of 5000 a change of ``h`` below
      5000 · 2⁻²⁴ ≈ 3e-4 nats is lost, and every tenfold smaller β loses another decimal of ``h``.
    - ``sigmoid``: ``beta <= SIGMOID_MAX_BETA`` (1e3). ``-log σ(β h)`` then saturates once ``|h|`` passes 0.01
      nats (``β |h| > 10``): the loss becomes ``β · max(0, -h)``, a hinge on the sign of ``h`` whose value grows
      with β (1e30 logs losses of 1e25) and no longer the Bradley–Terry likelihood DPO derives.
    """

    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    beta: float = 0.1
    ipo_margin: Optional[Literal["token_mean", "sum"]] = None  # None: token_mean under ipo
    learning_rate: float = 5e-4
    epochs: int = 1
    batch_size: int = 16
    max_grad_norm: float = 1.0
    lora: Optional[LoraConfig] = None

    def __post_init__(self) -> None:
        check(self.beta > 0, f"beta must be > 0, got {self.beta}")
        check(self.ipo_margin is None or self.loss_type == "ipo",
              f"ipo_margin is read with loss_type: ipo only, and loss_type is {self.loss_type!r}: drop ipo_margin, or "
              f"set loss_type: ipo")
        if self.loss_type == "ipo":
            check(self.beta >= IPO_MIN_BETA,
                  f"beta must be >= {IPO_MIN_BETA:g} with loss_type: ipo, got {self.beta:g}: IPO regresses the "
                  f"log-ratio margin onto 1/(2 beta) = {1 / (2 * self.beta):.3g} nats, which float32 cannot resolve "
                  f"(above 5000 nats) or hold; IPO's beta is usually 0.01-1")
        else:
            check(self.beta <= SIGMOID_MAX_BETA,
                  f"beta must be <= {SIGMOID_MAX_BETA:g} with loss_type: sigmoid, got {self.beta:g}: -log sigmoid(beta "
                  f"h) then saturates for log-ratio margins h past {10 / self.beta:.3g} nats, a hinge whose value "
                  f"grows with beta, no longer DPO's loss; DPO's beta is usually 0.01-0.5")
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check_size("epochs", self.epochs, MAX_COUNT)
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check_size("batch_size", self.batch_size, MAX_BATCH)
        check(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm}")


def preference_method_files(methods: tuple[str, ...]) -> dict[str, type]:
    """The params/methods/ files (stem -> config class) the preference stages of a suite read."""
    files: dict[str, type] = {"preferences": PreferencesConfig, "reward_model": RewardModelConfig}
    files.update({m: DPOConfig for m in methods})
    return files
