"""The RL sampler and the group-shared passes: exact against the plain computations they replace."""

import pytest
import torch

from grueflow.config import GenerationConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy, _draw, completion_mask, logprobs_from_logits, shared_groups
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything

PROMPTS = {"causal": ["i watched this movie with my sister last week .", "a film ."],
           "seq2seq": ["generate a sentence with: dog kick ball", "cat"]}


def grouped(policy: Policy, kind: str, group: int):
    """Two prompts of different lengths (so padding is exercised), each repeated ``group`` times."""
    return policy.encode([p for p in PROMPTS[kind] for _ in range(group)])


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_group_shared_scoring_equals_scoring_every_row(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = grouped(policy, kind, 3)
    assert shared_groups(prompts, 3) == 3 and shared_groups(prompts, 2) == 1
    torch.manual_seed(0)
    completions = torch.randint(3, tokenizer.vocab_size, (6, 7))
    completions[1, 4], completions[4, 0] = tokenizer.eos_token_id, tokenizer.eos_token_id
    mask = completion_mask(completions, tokenizer.eos_token_id)

    def logprobs_and_grads(group_size: int):
        model.zero_grad()
        scores = policy.score(prompts, completions, with_hidden=True, group_size=group_size)
        logprobs = logprobs_from_logits(scores.logits, completions) * mask
        (logprobs.sum() + scores.hidden.sum()).backward()
        return logprobs.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    shared, shared_grads = logprobs_and_grads(3)
    plain, plain_grads = logprobs_and_grads(1)
    assert torch.allclose(shared, plain, atol=1e-5)
    assert len(shared_grads) == len(plain_grads) > 0
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(shared_grads, plain_grads))


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_greedy_sample_equals_generate(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = grouped(policy, kind, 2)
    gen = GenerationConfig(max_new_tokens=8, min_new_tokens=3, do_sample=False)
    sampled = policy.sample(prompts, gen, group_size=2)
    expected = policy.generate(prompts, gen)
    assert torch.equal(sampled, expected[:, :sampled.shape[1]])
    assert (expected[:, sampled.shape[1]:] == tokenizer.pad_token_id).all()


def test_draw_samples_each_token_with_its_probability():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.0, 0.2])
    logits = probs.log().expand(40_000, 4)  # log(0) = -inf: a masked token
    counts = torch.bincount(_draw(logits), minlength=4).float() / 40_000
    assert counts[2] == 0
    assert torch.allclose(counts, probs, atol=0.01), counts


@pytest.mark.parametrize("fast", [False, True])  # transformers' step, and the lean GPT-2 step
def test_a_reserved_cache_gives_the_logits_of_a_growing_one(tiny_models, fast):
    from grueflow.device import Execution
    from grueflow.models.backend import Backend, CpuKernels

    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = grouped(policy, "causal", 2)
    tokens = torch.randint(3, tokenizer.vocab_size, (4, 5), generator=torch.Generator().manual_seed(0))
    backend = (CpuKernels if fast else Backend)(Execution(torch.device("cpu")))
    with torch.no_grad():
        runs = []
        for reserve in (0, 3, 8):  # 0: every step concatenates; 3: the last steps overflow the reserved room
            decoding = backend.start(model, "causal", prompts, group_size=2, reserve=reserve)
            rows = [decoding.first]
            for t in range(tokens.shape[1]):
                rows.append(decoding.step(tokens[:, t], t))
            runs.append(torch.stack(rows, 1))
    assert torch.allclose(runs[0], runs[1], atol=1e-6) and torch.allclose(runs[0], runs[2], atol=1e-6)


def test_gelu_new_is_swapped_for_the_fused_gelu_with_the_same_outputs(tiny_models):
    from transformers import AutoModelForCausalLM
    from transformers.activations import GELUTanh, NewGELUActivation

    fused, tokenizer = load_pretrained(tiny_models["causal"])
    plain = AutoModelForCausalLM.from_pretrained(tiny_models["causal"], dtype=torch.float32).eval()
    assert plain.config.activation_function == fused.config.activation_function == "gelu_new"
    assert any(isinstance(m, NewGELUActivation) for m in plain.modules())
    assert not any(isinstance(m, NewGELUActivation) for m in fused.modules())
    assert any(isinstance(m, GELUTanh) for m in fused.modules())
    ids = tokenizer(["i watched this movie with my sister"], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(fused(ids).logits, plain(ids).logits, atol=1e-5)


class PreferEos:
    """A logits processor that makes EOS (almost) certain wherever it is allowed."""

    def __init__(self, eos: int) -> None:
        self.eos = eos

    def __call__(self, tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[:, self.eos] += 100.0
        return logits


def test_sample_suppresses_eos_until_min_new_tokens_then_pads(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = grouped(policy, "causal", 4)
    torch.manual_seed(0)
    completions = policy.sample(prompts, GenerationConfig(max_new_tokens=10, min_new_tokens=3, top_k=5), 4,
                                PreferEos(tokenizer.eos_token_id))
    assert completions.shape == (8, 4)  # every row ends at its first allowed step, so the loop stops there
    assert (completions[:, :3] != tokenizer.eos_token_id).all()
    assert (completions[:, 3] == tokenizer.eos_token_id).all()


def test_top_k_one_samples_the_greedy_tokens(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = grouped(policy, "causal", 3)
    greedy = policy.sample(prompts, GenerationConfig(max_new_tokens=6, do_sample=False), 3)
    for gen in (GenerationConfig(max_new_tokens=6, top_k=1, temperature=0.5),
                GenerationConfig(max_new_tokens=6, top_p=1e-6)):
        assert torch.equal(policy.sample(prompts, gen, 3), greedy)


def test_the_fused_single_update_step_equals_collect_then_update(tiny_models):
    """With one epoch of one minibatch, step() reuses the update's forward pass as the behaviour pass, and that
    forward pass is the sampling pass (a GPT-2 replayed by the CPU backend); the weights after it equal those after the
    separate no-grad pass followed by the update (a forward pass over the rollout, then its backward)."""
    loader = DATAPOOLS.get("synthetic_sentiment")
    samples = loader.build(loader.Args(n_train=16, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "diversity", "score": "length", "weight": -0.1}]},
                          "reward"), MetricContext())
    settings = {"iterations": 1, "rollouts_per_iteration": 8, "minibatch_size": 8, "epochs": 1, "group_size": 4,
                "learning_rate": 1e-2, "kl_in_loss": True, "kl_estimator": "k3",
                "kl": {"coef": 0.1, "adaptive": False, "target": None}}

    def trainer() -> RLTrainer:
        seed_everything(0)
        model, tokenizer = load_pretrained(tiny_models["causal"])
        ref_model, _ = load_pretrained(tiny_models["causal"])
        return RLTrainer("grpo", parse(ALGORITHMS.get("grpo").Config, settings, "grpo"),
                         Policy(model, tokenizer, 24), ref_model, reward, samples,
                         GenerationConfig(max_new_tokens=6), seed=0)

    fused = trainer()
    assert fused.single_update and fused.keeps_sampling
    fused.step()
    separate = trainer()
    separate.update(separate.collect())
    pairs = list(zip(fused.policy.model.parameters(), separate.policy.model.parameters()))
    # float rounding only: Adam's first step is lr x g / |g|, so a gradient's rounding moves a 1e-2 step by ~1e-6
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in pairs)
    assert any(not torch.equal(a, b) for a, b in zip(fused.policy.model.parameters(),
                                                       trainer().policy.model.parameters()))  # it did train
