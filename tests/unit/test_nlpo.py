"""NLPO's action masks: nucleus properties, and the KV-cached mask step equal to a full forward pass."""

import pytest
import torch

from grueflow.config import GenerationConfig
from grueflow.models import load_pretrained
from grueflow.models.nucleus import top_p_keep
from grueflow.models.policy import Policy
from grueflow.rl.configs import NLPOConfig
from grueflow.rl.nlpo import MaskProcessor


def test_the_mask_keeps_top_p_mass_min_tokens_and_special_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.06, 0.04], [0.96, 0.01, 0.01, 0.01, 0.01]]))
    keep = top_p_keep(logits, top_p=0.85, top_k=0, min_tokens_to_keep=1, always_keep=[4])
    assert keep.tolist() == [[True, True, True, False, True], [True, False, False, False, True]]
    probs = logits.exp()
    assert ((probs * keep).sum(-1) >= 0.85).all()
    assert top_p_keep(logits, 0.85, top_k=1, min_tokens_to_keep=1)[0].tolist() == \
        [True, False, False, False, False]
    assert top_p_keep(logits, 0.1, top_k=0, min_tokens_to_keep=3)[1].sum() == 3


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_incremental_mask_model_matches_a_full_forward_pass(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    mask_model, _ = load_pretrained(tiny_models[kind])
    cfg = NLPOConfig(top_p=0.6)
    prompts = policy.encode(["i saw this film at the cinema .", "generate a sentence with: dog kick ball park"])
    processor = MaskProcessor(mask_model, kind, prompts, cfg, list(tokenizer.all_special_ids))
    torch.manual_seed(0)
    completions = policy.generate(prompts, GenerationConfig(max_new_tokens=6, min_new_tokens=6), processor)
    masks = processor.action_mask()
    assert masks.shape[:2] == completions.shape
    with torch.no_grad():
        full_logits = policy.score(prompts, completions, model=mask_model).logits  # one pass, no cache
    for t in range(completions.shape[1]):
        expected = top_p_keep(full_logits[:, t], 0.6, 0, 1, list(tokenizer.all_special_ids))
        assert torch.equal(masks[:, t], expected), t


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_evaluations_full_pass_masks_equal_the_rollouts_incremental_ones(tiny_models, kind):
    """RL4LMs evaluates NLPO with its masks; evaluate's processor reruns the mask model over the whole sequence at
    each step (so beams may reorder), and its masks equal the rollouts' cached ones."""
    from grueflow.rl.nlpo import FullPassMaskProcessor

    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    mask_model, _ = load_pretrained(tiny_models[kind])
    torch.manual_seed(0)
    with torch.no_grad():  # a mask model far from the policy, so that its nucleus leaves the policy's choice out
        for p in mask_model.parameters():
            p.add_(torch.randn_like(p))
    prompts = policy.encode(["i saw this film at the cinema .", "generate a sentence with: dog kick ball park", "a"])
    special = [tokenizer.eos_token_id]  # not T5's pad, which its tiny model prefers: the masks must bite
    greedy = GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    cached = policy.generate(prompts, greedy, MaskProcessor(mask_model, kind, prompts, NLPOConfig(top_p=0.3), special))
    full = policy.generate(prompts, greedy, FullPassMaskProcessor(mask_model, kind, prompts, 0.3, 0, 1, special,
                                                                   policy.backend))
    assert torch.equal(cached, full)
    assert not torch.equal(full, policy.generate(prompts, greedy))  # the masks changed the decoding

    # beam search: only the mask model's top token (and specials, EOS banned) is allowed at each step, so every
    # beam follows one path, and the best beam is the masked greedy decoding of a top-1 mask
    beams = GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=3)
    top1 = FullPassMaskProcessor(mask_model, kind, prompts, 1e-9, 1, 1, [], policy.backend)
    greedy_top1 = policy.generate(prompts, greedy, FullPassMaskProcessor(mask_model, kind, prompts, 1e-9, 1, 1, [],
                                                                          policy.backend))
    assert torch.equal(policy.generate(prompts, beams, top1), greedy_top1)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_evaluation_samples_with_the_incremental_masks(tiny_models, kind):
    """Sampling evaluations of NLPO decode as rollouts do (:meth:`Policy.sample` with the incremental processor,
    one mask-model token a step; the full pass per step is for beams and greedy), and every draw lies in the mask
    model's nucleus or the special tokens."""
    from grueflow import evaluation
    from grueflow.data import Sample
    from grueflow.rl.nlpo import FullPassMaskProcessor, mask_processors

    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    mask_model, _ = load_pretrained(tiny_models[kind])
    torch.manual_seed(0)
    with torch.no_grad():
        for p in mask_model.parameters():
            p.add_(torch.randn_like(p))
    texts = ["i saw this film at the cinema .", "generate a sentence with: dog kick ball park", "a"]
    sampling = GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=True, top_k=0)
    greedy = GenerationConfig(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    make = mask_processors(mask_model, policy, 0.3, 0, 1, sampling)
    prompts = policy.encode(texts)
    assert isinstance(mask_processors(mask_model, policy, 0.3, 0, 1, greedy)(prompts), FullPassMaskProcessor)
    torch.manual_seed(1)
    sampled = evaluation.generate(policy, [Sample(f"s{i}", t, ("x",)) for i, t in enumerate(texts)], sampling,
                                  processor=make)
    torch.manual_seed(1)
    processor = make(prompts)
    assert isinstance(processor, MaskProcessor)
    completions = policy.sample(prompts, sampling, 1, processor)
    assert sampled == policy.decode(completions)
    with torch.no_grad():
        mask_logits = policy.score(prompts, completions, model=mask_model).logits
    special = list(tokenizer.all_special_ids)
    for t in range(completions.shape[1]):
        allowed = top_p_keep(mask_logits[:, t], 0.3, 0, 1, special)
        assert allowed.gather(1, completions[:, t:t + 1]).all(), t
        assert not allowed.all()


def test_a_negative_top_k_is_refused_as_generation_refuses_it():
    """top_k: -1 was taken as "off"; GenerationConfig refuses it (a params file gets it as a ConfigError)."""
    with pytest.raises(ValueError, match=r"top_k must be >= 0 \(0: no cap\), got -1"):
        NLPOConfig(top_k=-1)


def test_settings_that_leave_nlpo_without_effect_are_named():
    """A mask model never refreshed, and masks that keep every token (NLPO trains as PPO), ran without a word."""
    assert NLPOConfig(iterations=30, target_update_iterations=5).idle_settings(300) == []
    assert NLPOConfig(iterations=2, target_update_iterations=100, min_tokens_to_keep=300).idle_settings(300) == [
        "target_update_iterations 100 is not below iterations 2: the mask model is never refreshed, so the start "
        "policy masks every rollout; lower target_update_iterations to refresh it",
        "min_tokens_to_keep 300 is not below the vocabulary (300 tokens): every mask keeps every token, so NLPO "
        "trains as PPO; lower min_tokens_to_keep"]
    # iterations 5 refreshes before the rollouts of iterations 1..4 only: a period of 5 never comes
    assert len(NLPOConfig(iterations=5, target_update_iterations=5).idle_settings()) == 1
    assert NLPOConfig(iterations=6, target_update_iterations=5).idle_settings() == []


def test_building_the_mask_model_warns_when_its_masks_keep_the_whole_vocabulary(tiny_models, caplog):
    from grueflow.rl.algorithm import PolicyHandle
    from grueflow.rl.nlpo import NLPO

    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    vocab = model.get_output_embeddings().weight.shape[0]
    nlpo = NLPO(NLPOConfig(iterations=10, min_tokens_to_keep=100_000))
    with caplog.at_level("WARNING", logger="grueflow.rl.nlpo"):
        nlpo.setup(PolicyHandle(model, "causal", tuple(tokenizer.all_special_ids), policy.backend))
    assert [r.getMessage() for r in caplog.records] == [
        f"nlpo: min_tokens_to_keep 100000 is not below the vocabulary ({vocab} tokens): every mask keeps every "
        f"token, so NLPO trains as PPO; lower min_tokens_to_keep"]


def nlpo_output(root, eval_with_masks=True, mask_model=True, saved=(), algorithm="nlpo"):
    """An RL output folder as the RL stage writes it: model/ and decoding/decoding.json (with model/'s fingerprint
    and, for NLPO, its mask settings), with decoding/mask_model/ under eval_with_masks; ``saved`` iterations under
    checkpoints/. Returns the mask settings (None for another algorithm)."""
    from grueflow.io import fingerprint, write_json

    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text("{}")
    (root / "decoding").mkdir()
    if mask_model and eval_with_masks and algorithm == "nlpo":
        (root / "decoding" / "mask_model").mkdir()
    for k in saved:
        (root / "checkpoints" / f"iteration{k}").mkdir(parents=True)
    masks = ({"top_p": 0.5, "top_k": 0, "min_tokens_to_keep": 1, "eval_with_masks": eval_with_masks}
             if algorithm == "nlpo" else None)
    write_json(root / "decoding" / "decoding.json", {"algorithm": algorithm, "policy": fingerprint(root / "model"),
                                                     "masks": masks})
    return masks


def test_evaluate_requires_the_mask_record_of_an_nlpo_model(tmp_path):
    """Without decoding/ beside model/ (model/ copied alone) NLPO was evaluated without its masks."""
    from grueflow.config import ConfigError
    from grueflow.rl.nlpo import masks_for

    (tmp_path / "bare" / "model").mkdir(parents=True)
    assert masks_for(tmp_path / "bare" / "model", nlpo=False) is None  # any other model: the policy alone
    with pytest.raises(ConfigError, match=r"--algorithm nlpo: no decoding/decoding.json beside .*bare/model "
                                          r"\(expected .*bare/decoding/decoding.json, with mask_model/ beside it "
                                          r"under eval_with_masks\).*give the model/ of the RL stage's whole output "
                                          r"folder; both are outputs of the rl stage: restore its whole output "
                                          r"\(dvc checkout <its stage>\), or rerun it"):
        masks_for(tmp_path / "bare" / "model", nlpo=True)
    record = nlpo_output(tmp_path / "run")
    assert masks_for(tmp_path / "run" / "model", nlpo=True) == record
    off = nlpo_output(tmp_path / "off", eval_with_masks=False)
    assert masks_for(tmp_path / "off" / "model", nlpo=True) == off  # evaluated without masks, as it says


def test_evaluate_nlpo_on_another_algorithms_output_is_refused(tmp_path):
    """A PPO output evaluated as NLPO was scored without masks, under NLPO's name."""
    from grueflow.config import ConfigError
    from grueflow.rl.nlpo import masks_for

    assert nlpo_output(tmp_path / "ppo", algorithm="ppo", saved=(1,)) is None
    assert masks_for(tmp_path / "ppo" / "model", nlpo=False) is None
    for model in (tmp_path / "ppo" / "model", tmp_path / "ppo" / "checkpoints" / "iteration1"):
        with pytest.raises(ConfigError, match=r"--algorithm nlpo: .* was trained by ppo \(.*ppo/decoding/"
                                              r"decoding.json\), which has no action masks; give the model/ of an "
                                              r"NLPO output, or --algorithm ppo"):
            masks_for(model, nlpo=True)


def test_evaluate_refuses_masks_that_are_missing_or_of_another_policy(tmp_path):
    from grueflow.config import ConfigError
    from grueflow.rl.nlpo import masks_for

    nlpo_output(tmp_path / "run", mask_model=False)
    with pytest.raises(ConfigError, match=r"decoding.json says eval_with_masks, but .*run/decoding/mask_model/ is "
                                          r"missing"):
        masks_for(tmp_path / "run" / "model", nlpo=False)
    nlpo_output(tmp_path / "switched")
    (tmp_path / "switched" / "model" / "config.json").write_text('{"another": 1}')  # a checkout of another commit
    with pytest.raises(ConfigError, match=r"decoding.json was written for another policy than .*switched/model"):
        masks_for(tmp_path / "switched" / "model", nlpo=True)


def test_a_saved_iteration_of_an_nlpo_run_evaluated_with_masks_is_refused(tmp_path):
    """checkpoints/iteration<k>/ was evaluated without masks, silently, while the run's model/ had them."""
    from grueflow.config import ConfigError
    from grueflow.rl.nlpo import masks_for

    nlpo_output(tmp_path / "run", saved=(1,))
    saved = tmp_path / "run" / "checkpoints" / "iteration1"
    with pytest.raises(ConfigError, match=r"--algorithm nlpo: .*iteration1 is a policy kept with save_every, and its "
                                          r"run evaluates with masks .* but the mask model of that iteration is not "
                                          r"kept"):
        masks_for(saved, nlpo=True)
    assert masks_for(saved, nlpo=False) is None  # the policy alone, asked for
    off = nlpo_output(tmp_path / "off", eval_with_masks=False, saved=(1,))
    assert masks_for(tmp_path / "off" / "checkpoints" / "iteration1", nlpo=True) == off
