"""Devices and precision without a GPU: the settings' checks, no tensor made off its device (PyTorch's default
device set to ``meta`` while the models stay on the CPU), the bf16 path on the CPU, and the fast paths off
equal to on."""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from grueflow.config import ConfigError, GenerationConfig, RewardConfig
from grueflow.data import DATAPOOLS
from grueflow.device import Execution, device_setting, execution, fast_paths, resolve_device, resolve_precision
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import load_pretrained
from grueflow.models.backend import Backend, CpuKernels, select
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.rl import ALGORITHMS
from grueflow.rl.trainer import RLTrainer
from grueflow.seeding import seed_everything

CPU = torch.device("cpu")
SETTINGS = {"iterations": 2, "rollouts_per_iteration": 8, "minibatch_size": 4, "epochs": 1, "learning_rate": 1e-3,
            "kl": {"coef": 0.05, "adaptive": True, "target": 1.0}}
ALGORITHM_SETTINGS = {  # each algorithm with what its code paths need: groups, a critic, masks, its own step
    "ppo": {"critic": "separate"},
    "nlpo": {"top_p": 0.9, "target_update_iterations": 1},
    "a2c": {"minibatch_size": 8},
    "trpo": {"minibatch_size": 8},
    "grpo": {"group_size": 4, "kl_in_loss": True, "kl_estimator": "k3"},
    "rloo": {"group_size": 4},
    "reinforce_pp": {},
}


# -- the settings ---------------------------------------------------------------------------------------

def test_device_settings_are_checked_before_anything_loads(monkeypatch):
    monkeypatch.delenv("GRUEFLOW_DEVICE", raising=False)
    assert device_setting(None) == ("auto", "default")
    assert device_setting("cuda:1") == ("cuda:1", "--device")
    monkeypatch.setenv("GRUEFLOW_DEVICE", "cpu")
    assert device_setting(None) == ("cpu", "GRUEFLOW_DEVICE")
    assert device_setting("auto") == ("auto", "--device")  # the command line wins
    with pytest.raises(ConfigError, match=r"--device = 'gpu' is not a device; valid: auto, cpu, cuda, cuda:N"):
        device_setting("gpu")
    monkeypatch.setenv("GRUEFLOW_DEVICE", "cuda:x")
    with pytest.raises(ConfigError, match="GRUEFLOW_DEVICE = 'cuda:x' is not a device"):
        device_setting(None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_asking_for_cuda_without_one_fails_naming_the_setting():
    assert resolve_device("auto") == CPU and resolve_device("cpu") == CPU
    for setting in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=rf"--device = '{setting}' asks for a GPU, but CUDA is not available"
                                              rf".*; use --device cpu or auto$"):
            resolve_device(setting, "--device")
    with pytest.raises(ConfigError, match=r"^GRUEFLOW_DEVICE = 'cuda' asks for a GPU.*; unset GRUEFLOW_DEVICE or set "
                                          r"it to cpu or auto$"):
        resolve_device("cuda", "GRUEFLOW_DEVICE")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_snakemake_jobs_gpu_device_names_the_suites_resources_not_a_flag_never_given(monkeypatch):
    """A rule given gpu: 1 in the suite's resources passes its stage --device cuda: the refusal advised "use --device
    cpu or auto", a flag the user never gave."""
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    with pytest.raises(ConfigError) as err:
        resolve_device("cuda", "--device")
    assert "asks for a GPU, but CUDA is not available here" in str(err.value)
    assert str(err.value).endswith("Snakemake passes --device cuda to a stage whose rule the suite's resources give "
                                   "gpu: N (or --set-resources <rule>:device=...): drop that gpu from the suite's "
                                   "resources: (or the --set-resources), or run where CUDA is")


def test_precision_defaults_per_device_and_fast_paths_switch_off(monkeypatch):
    assert resolve_precision("auto", CPU) == "fp32"
    assert resolve_precision("auto", torch.device("cuda", 0)) == "bf16"
    assert resolve_precision("bf16", CPU) == "bf16"
    with pytest.raises(ConfigError, match="precision = 'fp16' is not a precision; valid: auto, fp32, bf16"):
        resolve_precision("fp16", CPU)
    monkeypatch.setenv("GRUEFLOW_FAST", "0")
    assert not fast_paths() and type(select(execution("cpu"))) is Backend
    monkeypatch.setenv("GRUEFLOW_FAST", "maybe")
    with pytest.raises(ConfigError, match="GRUEFLOW_FAST = 'maybe'"):
        fast_paths()
    monkeypatch.delenv("GRUEFLOW_FAST")
    assert type(select(execution("cpu"))) is CpuKernels
    assert type(select(Execution(CPU, "bf16"))) is Backend  # the CPU kernels are float32 kernels


def test_the_record_and_the_log_say_whether_the_fast_paths_ran(monkeypatch, caplog):
    """Under bf16 on the CPU the record said fast_paths: true and the log "fast paths on" (``$GRUEFLOW_FAST`` on),
    though select runs the plain transformers backend there."""
    import argparse
    import logging

    from grueflow import stage

    assert Execution(CPU, "bf16").record()["fast_paths"] is False
    assert Execution(CPU, "fp32").record()["fast_paths"] is True
    assert Execution(CPU, "fp32", fast=False).record()["fast_paths"] is False
    with caplog.at_level(logging.INFO, logger="stage"):
        chosen = stage.execution(argparse.Namespace(device="cpu", precision="bf16"))
    assert type(select(chosen)) is Backend
    assert "device cpu, precision bf16, fast paths off (they are float32 CPU kernels)" in caplog.text


# -- trainers on one device -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def samples():
    loader = DATAPOOLS.get("synthetic_sentiment")
    return loader.build(loader.Args(n_train=16, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]


def trainer(path, kind: str, algorithm: str, samples, backend: Backend, extra: dict | None = None) -> RLTrainer:
    seed_everything(0)
    unread = ALGORITHMS.get(algorithm).Config.UNREAD  # settings an algorithm refuses, as it never reads them
    settings = {**{k: v for k, v in SETTINGS.items() if k not in unread}, **ALGORITHM_SETTINGS[algorithm],
                **(extra or {})}
    model, tokenizer = load_pretrained(path, backend=backend)
    ref_model = None if settings.get("lora") else load_pretrained(path, backend=backend, frozen=True)[0]
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "lexicon_sentiment", "weight": 1.0},
                                                        {"metric": "diversity", "score": "length", "weight": -0.1}]},
                          "reward"), MetricContext())
    return RLTrainer(algorithm, parse(ALGORITHMS.get(algorithm).Config, settings, algorithm),
                     Policy(model, tokenizer, 24, backend), ref_model, reward, samples,
                     GenerationConfig(max_new_tokens=5, min_new_tokens=1), seed=0)


@contextlib.contextmanager
def meta_default() -> Iterator[None]:
    """PyTorch's default device set to ``meta``: a tensor made without ``device=`` has no data, so any
    arithmetic that meets it and a CPU tensor fails loudly."""
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("fast", [True, False], ids=["cpu_kernels", "transformers"])
@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHM_SETTINGS))
def test_no_tensor_is_made_off_its_device(tiny_models, samples, kind, algorithm, fast):
    backend = (CpuKernels if fast else Backend)(Execution(CPU))
    rl = trainer(tiny_models[kind], kind, algorithm, samples, backend)
    with meta_default():
        rows = [rl.step() for _ in range(2)]  # collect, advantages, update, the KL controller, a refresh (NLPO)
        prompts = rl.policy.encode([s.prompt for s in samples[:3]])
        texts = rl.policy.decode(rl.policy.generate(prompts, GenerationConfig(max_new_tokens=4)))
    assert all(torch.isfinite(torch.tensor(row["reward/task"])) for row in rows) and len(texts) == 3
    assert all(p.device == CPU for p in rl.policy.model.parameters())


# -- bf16 on the CPU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,algorithm", [("causal", "ppo"), ("causal", "nlpo"), ("causal", "grpo"),
                                            ("seq2seq", "ppo"), ("seq2seq", "a2c")])
def test_the_bf16_path_trains_float32_master_weights_against_a_bf16_reference(tiny_models, samples, kind, algorithm):
    backend = select(Execution(CPU, "bf16"))
    rl = trainer(tiny_models[kind], kind, algorithm, samples, backend)
    assert all(p.dtype == torch.bfloat16 for p in rl.ref_model.parameters())  # frozen: bf16
    assert all(p.dtype == torch.float32 for p in rl.policy.model.parameters())  # trained: fp32 master weights
    before = [p.detach().clone() for p in rl.policy.model.parameters()]
    rollout = rl.collect()
    for name in ("logprobs", "ref_logprobs", "kl", "values", "rewards"):
        tensor = getattr(rollout, name)
        assert tensor.dtype == torch.float32 and torch.isfinite(tensor).all(), name
    scores = rl.policy.score(rollout.prompts, rollout.completions, with_hidden=True)
    assert scores.logits.dtype == scores.hidden.dtype == torch.float32  # upcast before log_softmax
    with backend.execution.autocast():  # what autocast computes inside: bf16 products
        assert torch.nn.functional.linear(scores.hidden[:, :1], torch.ones(2, scores.hidden.shape[-1])).dtype \
            == torch.bfloat16
    row = rl.step()
    assert all(torch.isfinite(torch.tensor(v)) for v in row.values())
    state = [s for group in rl.optimizer.state.values() for s in group.values() if torch.is_tensor(s) and s.numel() > 1]
    assert state and all(s.dtype == torch.float32 for s in state)  # fp32 optimiser state
    assert any(not torch.equal(a, b) for a, b in zip(before, rl.policy.model.parameters()))


def test_bf16_log_probs_stay_close_to_fp32(tiny_models, samples):
    """The same rollout scored in fp32 and under bf16 autocast: the log-probs differ by bf16 rounding only."""
    fp32 = trainer(tiny_models["causal"], "causal", "ppo", samples, Backend(Execution(CPU, "fp32")))
    bf16 = Policy(fp32.policy.model, fp32.policy.tokenizer, 24, Backend(Execution(CPU, "bf16")))
    rollout = fp32.collect()
    exact = fp32.policy.score(rollout.prompts, rollout.completions).logits.log_softmax(-1)
    rounded = bf16.score(rollout.prompts, rollout.completions).logits.log_softmax(-1)
    mask = rollout.mask.bool()
    assert (exact[mask] - rounded[mask]).abs().max() < 0.1


# -- the fast paths off equal them on ------------------------------------------------------------------

@pytest.fixture(scope="module")
def wide_gpt2(tiny_models, tmp_path_factory):
    """A GPT-2 128 wide (the CPU backend's oneDNN layers apply from 128 features), random weights, tied head."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["causal"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=2, n_embd=128, n_head=4, n_positions=64,
                                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id))
    path = tmp_path_factory.mktemp("wide_gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("algorithm,overrides", [
    ("grpo", {"minibatch_size": 8}),  # one update per rollout: the CPU backend differentiates the sampling pass
    ("nlpo", {}),  # the numba nucleus against the sort, at every token
    ("ppo", {"lora": {"r": 4}}),
])
def test_fast_paths_off_give_the_same_training_to_float_rounding(wide_gpt2, samples, algorithm, overrides):
    runs = []
    for backend in (CpuKernels(Execution(CPU)), Backend(Execution(CPU, fast=False))):
        rl = trainer(wide_gpt2, "causal", algorithm, samples, backend, overrides)
        assert rl.keeps_sampling == (isinstance(backend, CpuKernels) and algorithm == "grpo")
        curve = [rl.step() for _ in range(2)]
        runs.append((curve, [p.detach().clone() for p in rl.policy.model.parameters()]))
    (fast_curve, fast_weights), (plain_curve, plain_weights) = runs
    for fast_row, plain_row in zip(fast_curve, plain_curve):
        for key in ("reward/task", "kl/sequence", "kl/coef", "charts/mean_length", "losses/policy", "losses/approx_kl"):
            assert fast_row[key] == pytest.approx(plain_row[key], rel=1e-4, abs=1e-5), key
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fast_weights, plain_weights))


def test_a_launch_that_shards_the_model_is_refused(monkeypatch):
    from grueflow.distributed import DataParallel

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigError, match="ACCELERATE_USE_FSDP is set by the accelerate config.*distributed_type: "
                                          "MULTI_GPU"):
        DataParallel.from_env(CPU)


@pytest.mark.parametrize("world, expect", [
    ("", "WORLD_SIZE = '' is not a process count; unset it"),
    ("abc", "WORLD_SIZE = 'abc' is not a process count"),
    ("2", "WORLD_SIZE = 2 is set, but no launcher started this process (RANK is unset); unset WORLD_SIZE"),
])
def test_a_world_size_no_launcher_set_is_one_line(monkeypatch, world, expect):
    """WORLD_SIZE left empty, or set by hand, ended in int()'s ValueError or accelerate's MASTER_ADDR traceback."""
    from grueflow.distributed import LAUNCHER_VARIABLES, DataParallel

    monkeypatch.setenv("WORLD_SIZE", world)
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match=re.escape(expect)):
        DataParallel.from_env(CPU)
