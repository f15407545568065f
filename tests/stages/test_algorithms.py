"""Every registered algorithm raises a micro task's reward on the same trainer (seeded, in-process).

The micro task rewards brevity (-0.1 x words), a dense signal that a barely pre-trained model can
learn in a dozen iterations; the embedded tasks' rewards are exercised by the pipeline.
"""

import pytest
import torch

from grueflow.config import GenerationConfig, ModelConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything

SETTINGS = {"iterations": 10, "rollouts_per_iteration": 32, "minibatch_size": 16, "learning_rate": 3e-3,
            "kl": {"coef": 0.01, "adaptive": False, "target": None}}


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory):
    """Micro sentiment prompts and a tiny GPT-2 pre-trained briefly on reviews."""
    from grueflow.models.tiny import build_tiny

    loader = DATAPOOLS.get("synthetic_sentiment")
    pool = loader.build(loader.Args(n_train=64, n_val=4, n_test=4, n_unlabelled=600))
    cfg = parse(ModelConfig, {"id": "tiny_gpt2", "config": {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64},
                              "tokenizer": {"vocab_size": 300}, "pretrain": {"steps": 150, "batch_size": 16}}, "model")
    model, tokenizer, _ = build_tiny(cfg, "gpt2", pool.unlabelled, seed=0)
    path = tmp_path_factory.mktemp("sentiment_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return pool.splits["train"], path


@pytest.mark.parametrize("algorithm,overrides", [
    ("ppo", {"epochs": 2}),
    ("nlpo", {"epochs": 2, "top_p": 0.9, "target_update_iterations": 3}),
    ("a2c", {"epochs": 1, "minibatch_size": 32, "learning_rate": 3e-3}),
    ("trpo", {"minibatch_size": 32, "max_kl": 0.05}),
    ("grpo", {"group_size": 4, "kl_in_loss": True, "kl_estimator": "k3"}),
    ("rloo", {"group_size": 4}),
    ("reinforce_pp", {}),
])
def test_algorithm_raises_the_reward(sentiment, algorithm, overrides):
    curve = [row["reward/task"] for row in make_trainer(sentiment, algorithm, overrides).train().curve]
    assert sum(curve[-3:]) / 3 > sum(curve[:3]) / 3 + 0.1, curve


def test_every_registered_algorithm_is_tested():
    assert ALGORITHMS.names() == ["a2c", "grpo", "nlpo", "ppo", "reinforce_pp", "rloo", "trpo"]


def make_trainer(sentiment, algorithm: str, overrides: dict) -> RLTrainer:
    samples, path = sentiment
    seed_everything(0)
    model, tokenizer = load_pretrained(path)
    ref_model, _ = load_pretrained(path)
    cfg = parse(ALGORITHMS.get(algorithm).Config, {**SETTINGS, **overrides}, algorithm)
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "diversity", "score": "length", "weight": -0.1}]},
                          "reward"), MetricContext())
    return RLTrainer(algorithm, cfg, Policy(model, tokenizer, 24), ref_model, reward, samples,
                     GenerationConfig(max_new_tokens=16), seed=0)


def test_a_kl_penalty_keeps_the_policy_closer_to_the_reference(sentiment):
    final_kl = {}
    for coef in (0.0, 0.5):
        trainer = make_trainer(sentiment, "ppo", {"kl": {"coef": coef, "adaptive": False, "target": None}})
        final_kl[coef] = sum(row["kl/sequence"] for row in trainer.train().curve[-3:]) / 3
    assert final_kl[0.5] < final_kl[0.0], final_kl


@pytest.mark.parametrize("per", ["sequence", "token"])
def test_the_adaptive_kl_steps_on_the_kl_its_target_is_per(sentiment, per):
    """RL4LMs' target_kl is per token: its controller steps on the mean KL of every transition of the rollout."""
    trainer = make_trainer(sentiment, "ppo", {"iterations": 3, "epochs": 1,
                                              "kl": {"coef": 0.2, "adaptive": True, "target": 0.05, "target_per": per}})
    curve = trainer.train().curve
    for before, after in zip(curve, curve[1:]):  # the coefficient an iteration used, from the one before's KL
        assert before["kl/token"] * before["charts/mean_length"] == pytest.approx(before["kl/sequence"], rel=1e-5)
        measured = before["kl/token"] if per == "token" else before["kl/sequence"]
        error = min(max((measured - 0.05) / 0.05, -0.2), 0.2)
        assert after["kl/coef"] == pytest.approx(before["kl/coef"] * (1 + 0.1 * error), rel=1e-5)


def test_env_passes_check_env_and_replays_the_trainers_per_token_rewards(sentiment):
    from stable_baselines3.common.env_checker import check_env

    from grueflow.rl.env import TextGenerationEnv

    trainer = make_trainer(sentiment, "ppo", {"kl": {"coef": 0.2, "adaptive": False, "target": None}})
    samples = trainer.sampler.samples
    env = TextGenerationEnv(trainer.policy.tokenizer, samples, trainer.reward, max_prompt_length=24, max_new_tokens=16)
    check_env(env, skip_render_check=True)

    rollout = trainer.collect()
    batch_samples = type(trainer.sampler)(samples, seed=0).next(len(rollout.scores))  # the same draw again
    kl = rollout.kl
    for i, sample in enumerate(batch_samples):
        env.reset(options={"sample": sample})
        n = int(rollout.mask[i].sum())
        env_rewards, done = [], False
        for t in range(n):
            _, r, terminated, truncated, _ = env.step(int(rollout.completions[i, t]))
            env_rewards.append(r)
            done = terminated or truncated
        assert done, f"sample {i}: the env episode did not end where the trainer's sequence ended"
        replayed = torch.tensor(env_rewards) - 0.2 * kl[i, :n]
        assert torch.allclose(replayed, rollout.rewards[i, :n], atol=1e-5)


def test_every_accepted_trpo_step_satisfies_the_kl_bound(sentiment):
    trainer = make_trainer(sentiment, "trpo", {"minibatch_size": 32, "max_kl": 0.02, "iterations": 4})
    rows = trainer.train().curve
    accepted = [row for row in rows if row["trpo/accepted"] == 1.0]
    assert accepted, rows
    assert all(0 < row["trpo/step_kl"] <= 0.02 for row in accepted)


def test_nlpo_samples_inside_its_masks_refreshes_on_schedule_and_checkpoints_the_mask_model(sentiment, tmp_path):
    trainer = make_trainer(sentiment, "nlpo", {"iterations": 5, "target_update_iterations": 2, "top_p": 0.5})
    rollout = trainer.collect()
    allowed = rollout.action_mask.gather(2, rollout.completions.unsqueeze(-1)).squeeze(-1)
    assert allowed[rollout.mask.bool()].all()  # every sampled token was inside the mask model's nucleus
    assert rollout.action_mask.sum(-1).float().mean() < rollout.action_mask.shape[-1]  # and it masks something
    trainer.train()
    assert trainer.algorithm.refreshes == 2  # before rollouts 2 and 4 (0-based)
    trainer.save(tmp_path / "ckpt", key="k")
    resumed = make_trainer(sentiment, "nlpo", {"iterations": 5, "target_update_iterations": 2, "top_p": 0.5})
    resumed.load(tmp_path / "ckpt")
    assert resumed.algorithm.refreshes == 2
    for name, tensor in trainer.algorithm.mask_model.state_dict().items():
        assert torch.equal(tensor, resumed.algorithm.mask_model.state_dict()[name]), name


@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_a_separate_critic_trains_and_resumes(sentiment, tmp_path, algorithm):
    overrides = {"critic": "separate", "iterations": 3, "minibatch_size": 32}
    trainer = make_trainer(sentiment, algorithm, overrides)
    policy_params = {id(p) for p in trainer.policy.model.parameters()}
    assert trainer.critic_model is not None
    assert not policy_params & {id(p) for p in trainer.critic_model.parameters()}  # its own weights
    before = [p.detach().clone() for p in trainer.critic_model.parameters()]
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.critic_model.parameters()))
    trainer.save(tmp_path / "ckpt", key="k")
    resumed = make_trainer(sentiment, algorithm, overrides)
    resumed.load(tmp_path / "ckpt")
    assert all(torch.equal(a, b) for a, b in zip(trainer.critic_model.parameters(), resumed.critic_model.parameters()))


@pytest.mark.parametrize("algorithm", ["ppo", "nlpo", "a2c", "trpo", "grpo", "rloo", "reinforce_pp"])
def test_algorithm_runs_on_a_seq2seq_policy(tiny_models, algorithm):
    seed_everything(0)
    loader = DATAPOOLS.get("synthetic_concepts")
    samples = loader.build(loader.Args(n_train=16, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    model, tokenizer = load_pretrained(tiny_models["seq2seq"])
    ref_model, _ = load_pretrained(tiny_models["seq2seq"])
    group = 4 if algorithm in ("grpo", "rloo") else 1
    settings = {"iterations": 2, "rollouts_per_iteration": 8, "minibatch_size": 8, "group_size": group,
                **({} if algorithm == "trpo" else {"epochs": 1})}  # TRPO takes one step per rollout
    cfg = parse(ALGORITHMS.get(algorithm).Config, settings, algorithm)
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "concept_coverage"}]}, "reward"), MetricContext())
    trainer = RLTrainer(algorithm, cfg, Policy(model, tokenizer, 16), ref_model, reward, samples,
                        GenerationConfig(max_new_tokens=6), seed=0)
    curve = trainer.train().curve
    assert [row["iteration"] for row in curve] == [1, 2]
    assert all(torch.isfinite(torch.tensor(list(row.values()))).all() for row in curve)


def test_a_nan_reward_stops_training_before_any_update_and_keeps_the_rollout(sentiment):
    from grueflow.rl.trainer import NonFiniteError

    samples, path = sentiment
    unreferenced = [s.__class__(s.id, s.prompt, (), s.meta) for s in samples]  # ROUGE has nothing to compare: NaN
    seed_everything(0)
    model, tokenizer = load_pretrained(path)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = parse(ALGORITHMS.get("ppo").Config, SETTINGS, "ppo")
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "rouge", "score": "rougeL"}]}, "reward"),
                    MetricContext())
    trainer = RLTrainer("ppo", cfg, Policy(model, tokenizer, 24), load_pretrained(path)[0], reward,
                        unreferenced, GenerationConfig(max_new_tokens=8), seed=0)
    with pytest.raises(NonFiniteError, match="non-finite reward at iteration 1") as err:
        trainer.train()
    assert err.value.batch["reward"] == [None] * 32 and len(err.value.batch["generations"]) == 32
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_kl_ceiling_stops_a_runaway_policy_or_skips_its_update(sentiment):
    from grueflow.rl.trainer import KLCeilingError

    runaway = {"learning_rate": 3e-2, "kl_ceiling": 1e-6, "iterations": 4}  # iteration 1: policy == reference, KL 0
    with pytest.raises(KLCeilingError, match=r"exceeds kl_ceiling 1e-06 at iteration 2"):
        make_trainer(sentiment, "ppo", runaway).train()
    trainer = make_trainer(sentiment, "ppo", {**runaway, "kl_ceiling_action": "skip"})
    trainer.step()
    after_first = [p.detach().clone() for p in trainer.policy.model.parameters()]
    rows = [trainer.step() for _ in range(3)]
    assert [row["charts/update_skipped"] for row in rows] == [1.0, 1.0, 1.0]
    assert all(torch.equal(a, b) for a, b in zip(after_first, trainer.policy.model.parameters()))


def test_a_negative_kl_from_rollouts_not_drawn_from_the_policy_is_named_once(sentiment, caplog):
    """A reference three times sharper than the policy (its final layer norm scaled) and top-k 1 rollouts: every
    sampled token is the policy's argmax, likelier under the reference, so the k1 KL is well below zero."""
    plain = make_trainer(sentiment, "ppo", {"iterations": 2})
    trainer = make_trainer(sentiment, "ppo", {"iterations": 2})
    with torch.no_grad():
        trainer.ref_model.transformer.ln_f.weight.mul_(3)
        trainer.ref_model.transformer.ln_f.bias.mul_(3)
    trainer.generation = GenerationConfig(max_new_tokens=16, top_k=1)
    with caplog.at_level("WARNING", logger="grueflow.rl.trainer"):
        assert plain.step()["kl/sequence"] == 0  # the policy is its reference: no warning
        rows = [trainer.step() for _ in range(2)]
    assert all(row["kl/sequence"] < -1 for row in rows), rows
    warnings = [r.getMessage() for r in caplog.records if "mean KL to the reference" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "iteration 1" in warnings[0] and "(top_k: 1)" in warnings[0] and "kl_estimator: k3" in warnings[0]


def test_nlpos_kl_compares_the_policy_and_the_reference_under_the_same_masks(sentiment):
    """NLPO samples among the mask model's nucleus: its rollout KL is k1 of the policy's and the reference's
    log-probs, each renormalised over the tokens the masks allow (a KL between the two distributions the rollout
    could draw from), not of the full softmaxes. A reference three times sharper makes the two differ."""
    from grueflow.models.policy import logprobs_from_logits, selective_logprobs

    trainer = make_trainer(sentiment, "nlpo", {"iterations": 1, "top_p": 0.5, "min_tokens_to_keep": 1})
    with torch.no_grad():
        trainer.ref_model.transformer.ln_f.weight.mul_(3)
        trainer.ref_model.transformer.ln_f.bias.mul_(3)
    rollout = trainer.collect()
    allowed = rollout.action_mask
    assert allowed is not None and not allowed.all()
    with torch.no_grad():
        policy = trainer.policy.score(rollout.prompts, rollout.completions).logits
        reference = trainer.policy.score(rollout.prompts, rollout.completions, model=trainer.ref_model).logits
    masked = selective_logprobs(policy, rollout.completions, allowed)[0] - \
        selective_logprobs(reference, rollout.completions, allowed)[0]
    full = logprobs_from_logits(policy, rollout.completions) - logprobs_from_logits(reference, rollout.completions)
    assert torch.allclose(rollout.kl, masked * rollout.mask, atol=1e-4)
    assert (rollout.kl - full * rollout.mask).abs().max() > 0.1
    assert torch.allclose(rollout.logprobs - rollout.ref_logprobs, rollout.kl, atol=1e-5)


def test_a_minimum_lengths_eos_ban_is_in_the_log_probs_so_moving_mass_to_eos_earns_no_negative_kl(sentiment):
    """With EOS banned for all 16 tokens (min_new_tokens 16), a policy that puts much more mass on EOS than its
    reference draws the same tokens, renormalised: its rollout log-probs and KL are taken with EOS banned at every
    position, so the k1 KL stays near 0, where the full softmaxes would give it well below 0 and the penalty would
    pay the policy for the mass it moved to a token never drawn."""
    from grueflow.models.policy import logprobs_from_logits, selective_logprobs

    trainer = make_trainer(sentiment, "ppo", {"iterations": 1})
    trainer.generation = GenerationConfig(max_new_tokens=16, min_new_tokens=16)
    eos = trainer.policy.eos_token_id
    with torch.no_grad():  # raise the policy's EOS logit along its mean final hidden state
        prompts = trainer.policy.encode(["i saw this film", "the plot was"])
        hidden = trainer.policy.model(**prompts._asdict(), output_hidden_states=True).hidden_states[-1]
        trainer.policy.model.transformer.wte.weight[eos] += 4 * hidden.mean((0, 1)) / hidden.mean((0, 1)).norm()
    rollout = trainer.collect()
    assert rollout.action_mask is not None and not rollout.action_mask[:, :, eos].any()
    with torch.no_grad():
        policy = trainer.policy.score(rollout.prompts, rollout.completions).logits
        reference = trainer.policy.score(rollout.prompts, rollout.completions, model=trainer.ref_model).logits
    full = (logprobs_from_logits(policy, rollout.completions) - logprobs_from_logits(reference, rollout.completions))
    assert (full * rollout.mask).sum(1).mean() < -1  # the mass on EOS, never drawn
    banned = selective_logprobs(policy, rollout.completions, rollout.action_mask)[0] - \
        selective_logprobs(reference, rollout.completions, rollout.action_mask)[0]
    assert torch.allclose(rollout.kl, banned * rollout.mask, atol=1e-4)
    assert rollout.kl.sum(1).mean() > -0.5


@pytest.mark.parametrize("what", ["loss", "gradient norm", "advantage"])
def test_a_nan_loss_gradient_or_advantage_stops_training_before_the_optimiser_step(sentiment, what, monkeypatch):
    from grueflow.rl.trainer import NonFiniteError

    trainer = make_trainer(sentiment, "ppo", {"iterations": 2})
    algorithm = trainer.algorithm
    if what == "advantage":
        advantages = algorithm.advantages
        monkeypatch.setattr(algorithm, "advantages", lambda *a: tuple(x * float("nan") for x in advantages(*a)))
    elif what == "loss":
        loss = algorithm.loss
        monkeypatch.setattr(algorithm, "loss", lambda *a: (loss(*a)[0] * float("inf"), loss(*a)[1]))
    else:  # a finite loss whose gradient is NaN: sqrt at 0 has an infinite slope, times 0 gives NaN
        loss = algorithm.loss
        monkeypatch.setattr(algorithm, "loss", lambda *a: (loss(*a)[0] + (loss(*a)[0] * 0).sqrt(), loss(*a)[1]))
    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    with pytest.raises(NonFiniteError, match=f"non-finite {what} at iteration 1"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.model.parameters()))
