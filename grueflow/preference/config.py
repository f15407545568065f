"""Typed, frozen configs of the preference stages (parsed strictly by :func:`grueflow.params.parse`).

``params/methods/preferences.yaml`` → :class:`PreferencesConfig` (build_preferences),
``params/methods/reward_model.yaml`` → :class:`RewardModelConfig` (train_reward_model),
``params/methods/dpo.yaml`` → :class:`DPOConfig` (dpo).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from grueflow.config import GenerationConfig, LoraConfig, RewardConfig, check

PREFERENCE_METHODS = ("dpo",)  # methods a suite may list under preference_methods


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
        check(self.samples_per_prompt >= 2, f"samples_per_prompt must be >= 2 to make a pair, got {self.samples_per_prompt}")
        check(self.min_margin >= 0, f"min_margin must be >= 0, got {self.min_margin}")
        check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        try:
            self.generation.check_rollout()
        except ValueError as error:
            raise ValueError(f"generation: {error}; pairs are made of sampled completions") from None


@dataclass(frozen=True)
class RewardModelConfig:
    """A Bradley–Terry reward model: a sequence classifier with one scalar output.

    Trained on ``1 - val_fraction`` of the pairs (a seeded split) for ``epochs`` with AdamW; the rest
    is held out for the pairwise accuracy. Texts are ``prompt + " " + completion``, cut to the last
    ``max_length`` tokens (the completion is kept whole where it fits).
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
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(0 <= self.val_fraction < 1, f"val_fraction must be in [0, 1), got {self.val_fraction}")
        check(self.max_length > 1, f"max_length must be > 1, got {self.max_length}")
        check(self.seed >= 0, f"seed must be >= 0, got {self.seed}")


@dataclass(frozen=True)
class DPOConfig:
    """Direct Preference Optimisation (Rafailov et al. 2023) against a frozen reference.

    With ``h = log π(y_c|x)/π_ref(y_c|x) - log π(y_r|x)/π_ref(y_r|x)`` (sums over completion tokens):
    ``loss_type: sigmoid`` minimises ``-log σ(β h)`` (DPO); ``ipo`` minimises ``(h - 1/(2β))²``
    (IPO, Azar et al. 2023). ``epochs`` passes over the pairs in batches of ``batch_size`` pairs,
    AdamW at ``learning_rate``. With ``lora`` only adapters train and the reference is the start
    model with its adapter disabled (no second copy).
    """

    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    beta: float = 0.1
    learning_rate: float = 5e-4
    epochs: int = 1
    batch_size: int = 16
    max_grad_norm: float = 1.0
    lora: Optional[LoraConfig] = None

    def __post_init__(self) -> None:
        check(self.beta > 0, f"beta must be > 0, got {self.beta}")
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check(self.batch_size > 0, f"batch_size must be > 0, got {self.batch_size}")
        check(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm}")


def preference_method_files(methods: tuple[str, ...]) -> dict[str, type]:
    """The params/methods/ files (stem -> config class) the preference stages of a suite read."""
    files: dict[str, type] = {"preferences": PreferencesConfig, "reward_model": RewardModelConfig}
    files.update({m: DPOConfig for m in methods})
    return files
