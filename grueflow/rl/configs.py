"""The RL algorithms' configs: what every algorithm shares (:class:`RLConfig`, :class:`KLConfig`) and each
algorithm's own hyperparameters, beside the algorithms in :mod:`grueflow.rl`.

Plain frozen dataclasses with their own range checks, importable without torch, so that validating
params (:mod:`grueflow.params`) never loads an implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, Mapping, Optional

from grueflow.config import MAX_BATCH, MAX_COUNT, MAX_VOCAB, LoraConfig, check, check_evaluation, check_size


@dataclass(frozen=True)
class KLConfig:
    """KL penalty against the frozen reference model (Ziegler et al. 2019; RL4LMs' defaults).

    Adaptive: ``error = clip((KL - target) / target, -0.2, 0.2)`` and
    ``coef <- coef * (1 + error * kl_lr)``, once per rollout. ``target_per`` says which KL ``target`` is
    compared with: ``sequence``, the rollout's mean summed KL of a completion; ``token``, its mean KL per
    completion token (all tokens of the rollout weighted alike), as RL4LMs' ``KLController`` steps on the
    mean ``kl_div`` of every transition of the rollout buffer, so RL4LMs' ``target_kl`` carries over as is.
    The adaptive step is multiplicative, so an adaptive ``coef`` must start above 0 (``adaptive`` defaults to true).
    The controller steps on the k1 estimate of the KL (the log-ratio of the sampled tokens, RL4LMs' ``kl_div``)
    whatever the method's ``kl_estimator``, which sets only the penalty's estimate.
    """

    coef: float = 0.05
    adaptive: bool = True
    target: Optional[float] = 1.0
    kl_lr: float = 0.1
    target_per: Literal["sequence", "token"] = "sequence"

    @staticmethod
    def unread_keys(given: Mapping[str, Any]) -> dict[str, str]:
        """The keys of ``given`` (a params mapping) that a fixed coefficient never reads (:func:`grueflow.config.parse`
        refuses them); ``target: null`` says "no target" and is allowed."""
        if given.get("adaptive", True) is not False:
            return {}
        why = "with adaptive: false the coefficient stays at coef, and no controller steps it"
        return {key: why for key in ("target", "kl_lr", "target_per")
                if key in given and not (key == "target" and given[key] is None)}

    def __post_init__(self) -> None:
        check(self.coef >= 0, f"coef must be >= 0, got {self.coef}")
        check(self.kl_lr > 0, f"kl_lr must be > 0 (the coefficient's step toward the target), got {self.kl_lr}")
        if self.adaptive:
            check(self.target is not None and self.target > 0, f"adaptive KL needs target > 0, got {self.target}")
            check(self.coef > 0, f"coef is {self.coef} with adaptive: true (the default); an adaptive coefficient "
                                 "scales itself and stays at 0: give coef > 0, or adaptive: false")


@dataclass(frozen=True)
class RLConfig:
    """What every RL algorithm shares: the loop, the optimiser, the clipped surrogate, KL control.

    Each iteration samples ``rollouts_per_iteration / group_size`` prompts and ``group_size``
    completions of each. The KL to the reference is estimated per sampled token with ``kl_estimator``,
    with ``r = q/p`` the reference's probability of the token over the policy's (Schulman 2020): k1
    ``-log r``, k2 ``(log r)^2 / 2``, k3 ``r - 1 - log r`` (:mod:`grueflow.rl.kl`). The estimate is
    either subtracted from the reward (PPO style) or added to the loss (``kl_in_loss``, GRPO style; only
    for the algorithms of :data:`KL_IN_LOSS_ALGORITHMS`). Algorithms with a critic put a value head on
    the policy's own trunk (``critic: shared``, one model copy fewer) or on a separate copy of the start
    model (``critic: separate``, as RL4LMs); the critic-free ones (GRPO, RLOO, REINFORCE++) refuse ``critic``.
    With ``lora`` the policy (and a separate critic, with its own adapter) train LoRA adapters
    only, and the reference is the policy with its adapter disabled: no reference copy is held.
    Every ``checkpoint_every`` iterations a resumable checkpoint goes to ``<output>.resume/iteration<k>/``;
    the newest ``keep_checkpoints`` are kept and a rerun resumes from the newest complete one.
    ``kl_ceiling`` (optional) bounds the rollout's mean per-sequence KL to the reference: above it the
    policy has run away, and the stage stops (``kl_ceiling_action: stop``) or skips that update (``skip``).

    Evaluation during training, as RL4LMs' ``train_evaluation``: every ``eval_every`` iterations (and before
    the first and after the last) the policy generates on the val split (its first ``eval_samples``) with the
    task's ``eval_generation`` and is scored with the task's reward and metrics (:mod:`grueflow.validation`).
    Every ``save_every`` iterations the policy is kept as a stage output, ``checkpoints/iteration<k>/``, a
    model folder ``evaluate`` takes. ``select: best`` hands on the evaluated policy with the best val
    ``select_metric`` (a key the evaluation writes, e.g. ``reward`` or ``lexical/meteor``; perplexity-like
    keys are best lowest) instead of the last; never chosen on test.
    """

    iterations: int = 30
    rollouts_per_iteration: int = 64
    group_size: int = 1
    epochs: int = 4
    minibatch_size: int = 16
    learning_rate: float = 1e-4
    lr_schedule: Literal["constant", "linear"] = "constant"
    optimizer: Literal["adamw", "rmsprop"] = "adamw"
    clip_range: float = 0.2
    ent_coef: float = 0.0
    max_grad_norm: float = 1.0
    target_kl: Optional[float] = None
    kl: KLConfig = field(default_factory=KLConfig)
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    kl_in_loss: bool = False
    critic: Literal["shared", "separate"] = "shared"
    checkpoint_every: int = 10
    keep_checkpoints: int = 1
    lora: Optional[LoraConfig] = None
    kl_ceiling: Optional[float] = None
    kl_ceiling_action: Literal["stop", "skip"] = "stop"
    processes: int = 1  # data-parallel processes (accelerate launch); each samples and learns from its shard
    eval_every: int = 0  # iterations between evaluations on the val split; 0: none
    eval_samples: Optional[int] = None  # the val split's first n samples; null: all of them
    save_every: int = 0  # iterations between policies kept as outputs (checkpoints/iteration<k>/); 0: none
    select: Literal["last", "best"] = "last"
    select_metric: Optional[str] = None
    # an algorithm's settings it never reads, each with the reason: refused when given (:meth:`unread_keys`)
    UNREAD: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def unread_keys(cls, given: Mapping[str, Any]) -> dict[str, str]:
        """The keys of ``given`` (a params mapping) this algorithm never reads (:func:`grueflow.config.parse`
        refuses them)."""
        unread = {key: why for key, why in cls.UNREAD.items() if key in given}
        if given.get("kl_ceiling") is None and "kl_ceiling_action" in given:
            unread["kl_ceiling_action"] = "it applies above kl_ceiling, and kl_ceiling is null"
        eval_samples = given.get("eval_samples")  # an invalid one (0, a string) gets its own message
        if not given.get("eval_every") and isinstance(eval_samples, int) and eval_samples > 0:
            unread["eval_samples"] = ("it sets how many val samples evaluation during training scores, and eval_every "
                                      "is 0")
        epochs = given.get("epochs", {f.name: f.default for f in fields(cls)}.get("epochs"))
        target_kl = given.get("target_kl")
        if epochs == 1 and isinstance(target_kl, (int, float)) and target_kl > 0 and "target_kl" not in unread:
            unread["target_kl"] = ("its early stop is checked after each epoch, and with epochs: 1 there is none to "
                                   "skip")
        return unread

    def __post_init__(self) -> None:
        check(self.iterations > 0, f"iterations must be > 0, got {self.iterations}")
        check_size("iterations", self.iterations, MAX_COUNT)
        check_size("epochs", self.epochs, MAX_COUNT)
        check_size("rollouts_per_iteration", self.rollouts_per_iteration, MAX_BATCH)
        check_size("minibatch_size", self.minibatch_size, MAX_BATCH)
        check(self.processes >= 1, f"processes must be >= 1, got {self.processes}")
        check(self.group_size > 0, f"group_size must be > 0, got {self.group_size}")
        check(self.processes == 1 or (self.rollouts_per_iteration // self.group_size) % self.processes == 0,
               f"processes={self.processes} must divide the {self.rollouts_per_iteration // self.group_size} prompt "
               f"groups of a rollout (rollouts_per_iteration / group_size), so each process gets whole groups")
        check(self.processes == 1 or (self.minibatch_size % self.processes == 0
                                       and (self.minibatch_size // self.processes) % self.group_size == 0),
               f"processes={self.processes} must split minibatch_size={self.minibatch_size} into whole groups of "
               f"group_size={self.group_size}; make minibatch_size a multiple of processes x group_size")
        check(self.kl_ceiling is None or self.kl_ceiling > 0, f"kl_ceiling must be > 0 (or null), got {self.kl_ceiling}")
        check(self.epochs > 0, f"epochs must be > 0, got {self.epochs}")
        check(self.rollouts_per_iteration > 0 and self.minibatch_size > 0,
               f"rollouts_per_iteration and minibatch_size must be > 0, got {self.rollouts_per_iteration} "
               f"and {self.minibatch_size}")
        check(self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}")
        check(self.clip_range > 0, f"clip_range must be > 0, got {self.clip_range}")
        check(self.max_grad_norm > 0, f"max_grad_norm must be > 0, got {self.max_grad_norm} (0 would clip every "
                                      f"gradient to nothing: no update)")
        check(self.target_kl is None or self.target_kl > 0,
               f"target_kl must be > 0 (or null: no early stop), got {self.target_kl}")
        check(self.ent_coef >= 0, f"ent_coef must be >= 0 (an entropy bonus), got {self.ent_coef}")
        check(self.rollouts_per_iteration % self.minibatch_size == 0,
               f"rollouts_per_iteration={self.rollouts_per_iteration} is not a multiple of "
               f"minibatch_size={self.minibatch_size}; make it one")
        check(self.rollouts_per_iteration % self.group_size == 0,
               f"rollouts_per_iteration={self.rollouts_per_iteration} is not a multiple of "
               f"group_size={self.group_size}; make it one")
        check(self.checkpoint_every > 0, f"checkpoint_every must be > 0, got {self.checkpoint_every}")
        check_size("checkpoint_every", self.checkpoint_every, MAX_COUNT)
        check_evaluation(self, self.iterations, "iteration")
        check(self.keep_checkpoints >= 1, f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}; "
               f"the newest checkpoint is what a killed run resumes from")


# The algorithms whose loss adds ``kl_coef x KL`` under ``kl_in_loss``: those whose loss is
# :func:`grueflow.rl.objectives.policy_objective`'s. The others take the KL in the reward only.
KL_IN_LOSS_ALGORITHMS = ("ppo", "nlpo", "grpo", "rloo", "reinforce_pp")


def check_kl_in_reward(cfg: RLConfig, algorithm: str) -> None:
    """Raise ValueError when ``kl_in_loss`` is set for ``algorithm``, whose loss never adds the KL: the trainer
    then leaves the KL out of the reward too, and ``kl.coef`` would change nothing."""
    check(not cfg.kl_in_loss, f"kl_in_loss must be false for {algorithm}, got true: kl_in_loss applies to algorithms "
                              f"whose loss adds the KL ({', '.join(KL_IN_LOSS_ALGORITHMS)}); {algorithm} takes the KL "
                              "in the reward: leave kl_in_loss out")


def check_no_critic(cfg: RLConfig) -> None:
    """Raise ValueError when a critic-free algorithm's config asks for a critic it never builds."""
    check(cfg.critic == "shared", f"critic: {cfg.critic!r} has no effect here: this algorithm has no critic (its "
                                  "baseline comes from the sampled rewards); leave critic out")


@dataclass(frozen=True)
class PPOConfig(RLConfig):
    """PPO on whole sequences (Schulman et al. 2017; RL4LMs' defaults for gamma and lambda)."""

    clip_range_vf: Optional[float] = 0.2
    vf_coef: float = 0.5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    whiten_advantages: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1,
               f"gamma and gae_lambda must be in [0, 1], got {self.gamma} and {self.gae_lambda}")
        check(self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef}")
        check(self.clip_range_vf is None or self.clip_range_vf > 0,
               f"clip_range_vf must be > 0 (or null: no value clipping), got {self.clip_range_vf}")


@dataclass(frozen=True)
class NLPOConfig(PPOConfig):
    """NLPO (Ramamurthy et al. 2023, RL4LMs): PPO whose actions are masked by a lagged copy of the policy.

    At each generated token the mask model keeps its top-p nucleus (and at most ``top_k`` tokens if
    ``top_k`` > 0), never fewer than ``min_tokens_to_keep`` and never masking special tokens; it is
    refreshed from the policy every ``target_update_iterations`` rollouts.

    ``eval_with_masks`` (RL4LMs' behaviour): the final mask model is written beside the trained model and
    ``evaluate`` generates with its masks; false evaluates the policy alone. The table says which.
    """

    top_p: float = 0.9
    top_k: int = 0
    min_tokens_to_keep: int = 1
    target_update_iterations: int = 5
    eval_with_masks: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        check(self.top_k >= 0, f"top_k must be >= 0 (0: no cap), got {self.top_k}")
        check_size("top_k", self.top_k, MAX_VOCAB)
        check(self.min_tokens_to_keep >= 1, f"min_tokens_to_keep must be >= 1, got {self.min_tokens_to_keep}")
        check_size("min_tokens_to_keep", self.min_tokens_to_keep, MAX_VOCAB)
        check(self.target_update_iterations >= 1,
               f"target_update_iterations must be >= 1, got {self.target_update_iterations}")
        check_size("target_update_iterations", self.target_update_iterations, MAX_COUNT)
        check(self.select == "last" or not self.eval_with_masks,
              "select: best hands on an earlier policy, but eval_with_masks evaluates with the final mask model; "
              "set eval_with_masks: false, or select: last")

    def idle_settings(self, vocab: Optional[int] = None) -> list[str]:
        """Settings that leave part of NLPO without effect, each said in a sentence with its fix (warnings, not
        refusals: the run is valid, only not what NLPO is for). The mask model is refreshed before the rollout of
        iteration ``k + 1`` for every ``k`` in ``[1, iterations)`` divisible by ``target_update_iterations``: at or
        above ``iterations`` it is never refreshed, and the start policy masks every rollout. With ``vocab`` (the
        mask model's logits width): ``min_tokens_to_keep`` at or above it keeps every token, so NLPO is PPO."""
        idle = []
        if self.target_update_iterations >= self.iterations:
            idle.append(f"target_update_iterations {self.target_update_iterations} is not below iterations "
                        f"{self.iterations}: the mask model is never refreshed, so the start policy masks every "
                        f"rollout; lower target_update_iterations to refresh it")
        if vocab is not None and self.min_tokens_to_keep >= vocab:
            idle.append(f"min_tokens_to_keep {self.min_tokens_to_keep} is not below the vocabulary ({vocab} tokens): "
                        f"every mask keeps every token, so NLPO trains as PPO; lower min_tokens_to_keep")
        return idle


@dataclass(frozen=True)
class A2CConfig(RLConfig):
    """A2C (Mnih et al. 2016) with stable-baselines3's defaults: RMSprop, n-step returns, one step per rollout.

    Its loss has no KL term: the KL to the reference is in the reward, and ``kl_in_loss`` is refused.
    """

    epochs: int = 1
    learning_rate: float = 7e-4
    optimizer: Literal["adamw", "rmsprop"] = "rmsprop"
    UNREAD: ClassVar[Mapping[str, str]] = {"clip_range": "A2C's policy loss, -A log p, is not clipped"}
    n_steps: int = 5
    gamma: float = 0.99
    vf_coef: float = 0.5
    normalize_advantage: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.n_steps > 0, f"n_steps must be > 0, got {self.n_steps}")
        check_size("n_steps", self.n_steps, MAX_COUNT)
        check(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        check(self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef}")
        check_kl_in_reward(self, "a2c")


@dataclass(frozen=True)
class TRPOConfig(RLConfig):
    """TRPO (Schulman et al. 2015) with sb3-contrib's defaults: natural-gradient policy step under a KL bound.

    The policy step solves ``H s = g`` by conjugate gradient (``cg_max_steps``, ``cg_damping``) and
    backtracks (``line_search_shrinking_factor``, ``line_search_max_iter``) until the mean token
    KL(old || new) is at most ``max_kl`` and the surrogate improved; ``learning_rate`` is the
    critic's (Adam, ``n_critic_updates`` passes over the rollout in minibatches of ``minibatch_size``, as
    sb3-contrib's ``batch_size``). The KL to the reference is in the reward, never the loss.
    Each of ``cg_max_steps``, ``line_search_max_iter`` and ``n_critic_updates`` is at least 1 (0 would leave the
    policy or the critic untrained), and ``cg_damping`` >= 0 keeps the damped Fisher matrix positive semi-definite,
    as conjugate gradient needs.
    """

    learning_rate: float = 1e-3
    max_kl: float = 0.01
    cg_max_steps: int = 15
    cg_damping: float = 0.1
    line_search_shrinking_factor: float = 0.8
    line_search_max_iter: int = 10
    n_critic_updates: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    whiten_advantages: bool = True
    UNREAD: ClassVar[Mapping[str, str]] = {
        "epochs": "TRPO takes one natural-gradient step per rollout",
        "clip_range": "TRPO bounds its step by max_kl, not by a clipped ratio",
        "target_kl": "TRPO's line search keeps each step within max_kl",
        "ent_coef": "TRPO's surrogate has no entropy term",
        "max_grad_norm": "TRPO's step length comes from max_kl, and its critic's steps are not clipped"}

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.max_kl > 0, f"max_kl must be > 0, got {self.max_kl}")
        check(self.processes == 1, f"processes must be 1 for TRPO, got {self.processes}: its natural-gradient "
               "step (conjugate gradient and line search) does not run data-parallel")
        check(0 < self.line_search_shrinking_factor < 1,
               f"line_search_shrinking_factor must be in (0, 1), got {self.line_search_shrinking_factor}")
        check(self.cg_max_steps >= 1, f"cg_max_steps must be >= 1 (0 solves nothing: no policy step), "
                                      f"got {self.cg_max_steps}")
        check(self.cg_damping >= 0, f"cg_damping must be >= 0 (a negative damping breaks conjugate gradient), "
                                    f"got {self.cg_damping}")
        check(self.line_search_max_iter >= 1, f"line_search_max_iter must be >= 1 (0 tries no step: no policy "
                                              f"update), got {self.line_search_max_iter}")
        check(self.n_critic_updates >= 1, f"n_critic_updates must be >= 1 (the critic's steps per rollout), "
                                          f"got {self.n_critic_updates}")
        check_size("cg_max_steps", self.cg_max_steps, MAX_COUNT)
        check_size("line_search_max_iter", self.line_search_max_iter, MAX_COUNT)
        check_size("n_critic_updates", self.n_critic_updates, MAX_COUNT)
        check(0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1,
               f"gamma and gae_lambda must be in [0, 1], got {self.gamma} and {self.gae_lambda}")
        check_kl_in_reward(self, "trpo")


@dataclass(frozen=True)
class GroupConfig(RLConfig):
    """GRPO (Shao et al. 2024) and RLOO (Ahmadian et al. 2024): ``group_size`` samples per prompt, no critic."""

    group_size: int = 4
    epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.group_size >= 2, f"group-relative advantages need group_size >= 2, got {self.group_size}")
        check_no_critic(self)


@dataclass(frozen=True)
class ReinforcePPConfig(RLConfig):
    """REINFORCE++ (Hu 2025): per-token KL-penalised returns, normalised over the whole batch, no critic."""

    gamma: float = 1.0
    epochs: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        check_no_critic(self)
