"""LoRA fine-tuning: only adapter weights move, the reference is the adapter-free base (no copy),
checkpoints hold adapters and resume, and the model handed to evaluate is a plain merged folder.
"""

import re

import pytest
import torch
from transformers import AutoModelForCausalLM

from grueflow.config import ConfigError, GenerationConfig, LoraConfig, RewardConfig, SupervisedConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.lora import is_lora, merged, with_lora
from grueflow.models.policy import Policy, logprobs_from_logits
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.configs import PPOConfig
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything

LORA = {"r": 4, "alpha": 8, "target_modules": ["c_attn"]}
SETTINGS = {"iterations": 1, "rollouts_per_iteration": 8, "minibatch_size": 8, "epochs": 1, "learning_rate": 1e-2,
            "lora": LORA, "kl": {"coef": 0.05, "adaptive": False, "target": None}}


def test_lora_params_are_strict():
    cfg = parse(PPOConfig, {"lora": {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["c_attn"]}}, "ppo")
    assert (cfg.lora.r, cfg.lora.alpha, cfg.lora.target_modules) == (8, 16.0, ("c_attn",))
    assert parse(PPOConfig, {}, "ppo").lora is None and parse(SupervisedConfig, {}, "sft").lora is None
    with pytest.raises(ConfigError, match=r"lora: unknown key 'rank'; valid keys: r, alpha, dropout, target_modules"):
        parse(PPOConfig, {"lora": {"rank": 8}}, "ppo")
    with pytest.raises(ConfigError, match="r must be > 0"):
        parse(SupervisedConfig, {"lora": {"r": 0}}, "sft")


def test_an_unknown_target_module_names_the_layers_there_are(tiny_models):
    model, _ = load_pretrained(tiny_models["causal"])
    with pytest.raises(ConfigError) as refused:
        with_lora(model, parse(SupervisedConfig, {"lora": {"r": 4, "target_modules": ["q_proj"]}}, "sft").lora)
    assert str(refused.value) == ("lora.target_modules ['q_proj'] name no module of gpt2; its linear layers are "
                                  "named: c_attn, c_fc, c_proj: give some of those, or null for peft's default")
    assert not is_lora(model) and not any("lora_" in name for name, _ in model.named_modules())  # left untouched
    with pytest.raises(ConfigError, match=r"lora.target_modules \['c_atn'\] name no module of gpt2"):
        with_lora(model, parse(SupervisedConfig, {"lora": {"target_modules": ["c_attn", "c_atn"]}}, "sft").lora)


@pytest.mark.parametrize("kind, target", [("causal", ["lm_head"]), ("causal", ["c_attn", "lm_head"]),
                                          ("seq2seq", ["lm_head"]), ("seq2seq", ["shared"])])
def test_a_target_tied_to_the_input_embeddings_is_refused(tiny_models, kind, target):
    """GPT-2 and T5 tie lm_head to the input embeddings: merging an adapter on it changed both, and the model handed
    on was not the one trained (val loss 3.776 in training, 3.818 for the saved model; logits off by 13)."""
    model, _ = load_pretrained(tiny_models[kind])
    with pytest.raises(ConfigError) as refused:
        with_lora(model, parse(SupervisedConfig, {"lora": {"target_modules": target}}, "sft").lora)
    message = str(refused.value)
    assert re.match(r"lora.target_modules names (lm_head|shared), whose weight is tied to .*(wte|shared|lm_head)",
                    message)
    assert "merging the adapter into that one matrix would change both, so the model handed on would not be the " \
           "one trained; its linear layers that can take an adapter: " in message and "lm_head" not in \
           message.rsplit(":", 1)[1]
    assert not is_lora(model)


def test_a_target_module_peft_cannot_adapt_is_a_one_line_config_error_that_a_stage_exits_2_on(tiny_models, capsys):
    from grueflow.stage import main_guard

    model, _ = load_pretrained(tiny_models["causal"])
    lora = parse(SupervisedConfig, {"lora": {"target_modules": ["attn"]}}, "sft").lora  # a GPT2Attention block
    capsys.readouterr()  # the loading bar
    with pytest.raises(SystemExit) as exited:
        main_guard(lambda: with_lora(model, lora))
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: cannot add LoRA adapters to gpt2: "), err
    assert err.endswith("; its linear layers are named: c_attn, c_fc, c_proj: give some of those as "
                        "lora.target_modules\n")


def lora_trainer(path, algorithm: str = "ppo", **overrides) -> RLTrainer:
    loader = DATAPOOLS.get("synthetic_sentiment")
    samples = loader.build(loader.Args(n_train=16, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    seed_everything(0)
    model, tokenizer = load_pretrained(path)
    settings = {k: v for k, v in SETTINGS.items() if k not in ALGORITHMS.get(algorithm).Config.UNREAD}
    cfg = parse(ALGORITHMS.get(algorithm).Config, {**settings, **overrides}, algorithm)
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "diversity", "score": "length", "weight": -0.1}]},
                          "reward"), MetricContext())
    return RLTrainer(algorithm, cfg, Policy(model, tokenizer, 24), None, reward, samples,
                     GenerationConfig(max_new_tokens=6), seed=0)


def test_a_lora_step_moves_only_the_adapter_and_the_reference_is_the_base(tiny_models):
    trainer = lora_trainer(tiny_models["causal"])
    assert trainer.ref_model is None and is_lora(trainer.policy.model)
    before = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    trained = {n for n, p in trainer.policy.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    trainer.step()
    after = dict(trainer.policy.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before if n not in trained)  # base bit-identical
    assert any(not torch.equal(before[n], after[n]) for n in trained)

    rollout = trainer.collect()
    base, _ = load_pretrained(tiny_models["causal"])
    with torch.no_grad():
        base_logprobs = logprobs_from_logits(trainer.policy.score(rollout.prompts, rollout.completions, model=base).logits,
                                             rollout.completions)
    # equal to float rounding: peft's wrapped layers lay the hidden states out differently, and the LM head
    # over the last prompt position (logits_to_keep=1) then rounds by up to ~1e-7
    assert torch.allclose(rollout.ref_logprobs, base_logprobs * rollout.mask, rtol=0, atol=1e-5)
    assert not torch.allclose(rollout.logprobs, rollout.ref_logprobs)  # the adapter did change the policy


def test_the_merged_save_is_a_plain_model_with_the_peft_models_logits(tiny_models, tmp_path):
    trainer = lora_trainer(tiny_models["causal"])
    trainer.step()
    trainer.save_to(tmp_path, key="k", final=True)
    assert not (tmp_path / "adapter_config.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert not is_lora(plain) and is_lora(trainer.policy.model)  # merging left the trainer's model alone
    ids = trainer.policy.encode(["i watched this movie with my sister last week ."])
    with torch.no_grad():
        expected = trainer.policy.model(input_ids=ids.input_ids, attention_mask=ids.attention_mask).logits
        got = plain(input_ids=ids.input_ids, attention_mask=ids.attention_mask).logits
    assert torch.allclose(got, expected, atol=1e-5)


def test_a_lora_checkpoint_holds_only_adapters_and_resumes(tiny_models, tmp_path):
    trainer = lora_trainer(tiny_models["causal"], critic="separate", iterations=2)
    critic_ids = {id(p) for p in trainer.critic_model.parameters()}
    assert is_lora(trainer.critic_model) and not critic_ids & {id(p) for p in trainer.policy.model.parameters()}
    trainer.step()
    trainer.save(tmp_path / "ckpt", key="k")
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()
    straight = [r["reward/task"] for r in trainer.train().curve]  # before the resumed run: RNGs are global
    resumed = lora_trainer(tiny_models["causal"], critic="separate", iterations=2)
    resumed.load(tmp_path / "ckpt")
    assert [r["reward/task"] for r in resumed.train().curve] == straight
    for original, restored in ((trainer.policy.model, resumed.policy.model), (trainer.critic_model, resumed.critic_model)):
        restored_params = dict(restored.named_parameters())
        assert all(torch.equal(p, restored_params[n]) for n, p in original.named_parameters())


@pytest.mark.parametrize("algorithm", ["nlpo", "a2c", "trpo", "grpo", "rloo", "reinforce_pp"])
def test_every_algorithm_trains_lora_adapters_only(tiny_models, algorithm):
    group = {"group_size": 4} if algorithm in ("grpo", "rloo") else {}
    trainer = lora_trainer(tiny_models["causal"], algorithm, **group)
    frozen = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters() if not p.requires_grad}
    row = trainer.step()
    assert torch.isfinite(torch.tensor(list(row.values()))).all()
    assert all(torch.equal(p, frozen[n]) for n, p in trainer.policy.model.named_parameters() if n in frozen)


def test_full_fine_tuning_needs_a_reference_and_lora_refuses_one(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    cfg = parse(PPOConfig, {k: v for k, v in SETTINGS.items() if k != "lora"}, "ppo")
    with pytest.raises(ValueError, match="pass a reference model for full fine-tuning"):
        RLTrainer("ppo", cfg, Policy(model, tokenizer, 24), None, None, [], GenerationConfig(), seed=0)


def test_a_lora_warm_start_moves_only_adapters_and_saves_merged(tiny_models, tmp_path):
    from grueflow import supervised

    loader = DATAPOOLS.get("synthetic_concepts")
    pool = loader.build(loader.Args(n_train=8, n_val=2, n_test=2, n_unlabelled=2))
    seed_everything(0)
    cfg = parse(SupervisedConfig, {"epochs": 1, "batch_size": 4, "lora": {"r": 4, "target_modules": ["q", "v"]}}, "sft")
    model, tokenizer = load_pretrained(tiny_models["seq2seq"])
    policy = Policy(with_lora(model, cfg.lora), tokenizer, 16)
    frozen = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    curve = supervised.train(policy, pool.splits["train"], pool.splits["val"], cfg, 16, seed=0)
    assert len(curve) == 1
    assert all(torch.equal(p, frozen[n]) for n, p in policy.model.named_parameters() if n in frozen)
    merged(policy.model).save_pretrained(tmp_path)
    plain, _ = load_pretrained(tmp_path)
    assert not is_lora(plain)


def test_a_rank_above_an_adapted_layers_width_is_warned_about_with_the_width(tiny_models, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_models["causal"])
    width = model.config.n_embd  # c_attn: n_embd -> 3 n_embd
    with caplog.at_level("WARNING", logger="grueflow.models.lora"):
        with_lora(model, parse(LoraConfig, {"r": 4 * width, "alpha": 0.5, "target_modules": ["c_attn"]}, "m:"))
    assert (f"lora.r = {4 * width} exceeds the rank of adapted layers (min(in, out): c_attn {width}): their "
            f"update has at most that rank, and the scale alpha / r = {0.5 / (4 * width):.3g} shrinks it; lower r "
            f"to at most {width}") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="grueflow.models.lora"):
        with_lora(AutoModelForCausalLM.from_pretrained(tiny_models["causal"]),
                  parse(LoraConfig, {"r": width, "target_modules": ["c_attn"]}, "m:"))
    assert "exceeds the rank" not in caplog.text


def test_an_adapter_scale_alpha_over_r_too_small_to_move_the_model_is_warned_about(tiny_models, caplog):
    from grueflow.models.lora import MIN_LORA_SCALE

    assert MIN_LORA_SCALE == 1e-3
    with caplog.at_level("WARNING", logger="grueflow.models.lora"):
        with_lora(AutoModelForCausalLM.from_pretrained(tiny_models["causal"]),
                  parse(LoraConfig, {"r": 4, "alpha": 0.000001, "target_modules": ["c_attn"]}, "m:"))
    assert [r.getMessage() for r in caplog.records] == [
        "lora alpha / r = 1e-06 / 4 = 2.5e-07 is below 0.001: the adapter's update is scaled down so far that training "
        "leaves the model as it was (peft's default scale is 1, and 0.5 to 2 is usual); raise lora.alpha (e.g. to 4, "
        "a scale of 1)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="grueflow.models.lora"):
        for alpha in (0.004, 8.0):  # scales 1e-3 (the bound itself) and 2: meant
            with_lora(AutoModelForCausalLM.from_pretrained(tiny_models["causal"]),
                      parse(LoraConfig, {"r": 4, "alpha": alpha, "target_modules": ["c_attn"]}, "m:"))
    assert caplog.records == []
