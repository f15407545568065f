"""A prepared GPU check, one command of under 8 minutes on a single-GPU machine: the micro pipeline on the
GPU, and grueflow's RL step against TRL's GRPOTrainer at a GPT-2-small and a ~1B Llama shape.

    make gpu-check                                       # on the GPU machine: writes bench/GPU_RESULTS.md
    python bench/gpu_check.py --smoke --out /tmp/r.md    # its rehearsal on a CPU: 80 s on 2 cores (the tests run it)

**The pipeline.** The stage CLIs in the pipeline's order (``workflow/rules/*.smk``), for the micro suite's
``sentiment`` task (``tests/fixtures/micro``) with PPO and GRPO (a micro-sized copy of ``params/methods/grpo.yaml``)
from the base model: prepare_datapool, base_model, warm_start, rl_finetune, evaluate (zero-shot, supervised and
each algorithm) and aggregate, into a temporary results folder. Every stage that runs a model is given ``--device``;
each one's wall time is recorded, and each ``stage.json``'s ``execution.device`` is checked against the device
asked for. The stages of one level (independent jobs, as Snakemake would schedule them) run side by side
(``--jobs``), so their wall times include sharing the GPU and the cores. ``--smoke`` runs GRPO only.

**The RL step.** As ``bench/rl_step.py`` (whose prompts, reward and settings this reuses): grueflow's GRPO, PPO
and NLPO and TRL's GRPOTrainer (transformers generation) on the same device at equal settings, ``prompts`` prompts
x ``group`` samples of exactly ``new_tokens`` tokens, one update epoch of one minibatch, AdamW, KL coefficient
``beta``; on CUDA in bf16 (autocast over float32 master weights; grueflow's frozen reference in bf16, TRL's too;
``--precision`` overrides). Models are built from config with random weights (a tokenizer trained on the task's
text, padded to the shape's vocabulary with ``<extra_i>`` tokens). Each shape runs in two processes, TRL's and
then grueflow's methods together (grueflow's ``seed_everything`` turns on deterministic algorithms process-wide);
each method's peak GPU memory is ``torch.cuda.max_memory_allocated`` above what was allocated when it started.
Phases are timed with the GPU synchronised at their ends (a subclass of each trainer; the libraries' own code is
unchanged).

**Update FLOPs** (the MFU's numerator): ``6 x N x tokens`` for a forward and backward pass over the rollout, or
``4 x N x tokens`` where the update differentiates the sampling pass (no forward pass of its own, as
``bench/rl_step.py`` reasons; grueflow does this on the CPU only). ``N`` counts the parameters that multiply every
token (all but the input embedding lookup; a tied LM head counts once); ``tokens`` are those the update runs
over: grueflow encodes each group's prompt once (``prompts x P + completions x (new_tokens - 1)``), TRL every
row's (``completions x (P + new_tokens)``), with ``P`` the mean prompt length (padding not counted);
attention's quadratic term is left out. MFU is that over the update's seconds over ``--peak-tflops``.

TRL (and the ``datasets`` it imports) may be missing on the GPU machine: its rows and the GRPO-vs-TRL target are
then reported as skipped. A stage or method that fails, on a missing module say, is reported with the line that
says why; a failed stage stops the stages after it, a failed method only itself. ``--time-budget`` seconds (default 420) bound the whole run: a shape or a method
that would not finish inside it is skipped and named in the report; a process still running 20 s after it is
stopped.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
# bench/ is no package; and on a GPU machine grueflow runs from this checkout, uninstalled
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
import rl_step  # noqa: E402
from rl_step import Settings, sentiment_texts  # noqa: E402

task_texts = functools.lru_cache(maxsize=1)(sentiment_texts)  # (prompts, unlabelled text), built once a process

MICRO = ROOT / "tests" / "fixtures" / "micro"
# NVIDIA's datasheet figure for the H200 SXM (and H100 SXM): dense bf16 tensor-core peak, without sparsity.
PEAK_BF16_TFLOPS = 989.0


@dataclass(frozen=True)
class Shape:
    """A causal LM built from config: ``architecture`` (``grueflow.models.tiny``'s ``gpt2`` or ``llama``) and sizes."""

    architecture: str
    layers: int
    width: int
    heads: int
    vocab: int
    kv_heads: int = 0  # Llama: grouped-query attention's key/value heads
    intermediate: int = 0  # Llama: the MLP's width

    def config(self) -> dict[str, Any]:
        """The model config's size keys, for :func:`grueflow.models.tiny.build_model`."""
        if self.architecture == "gpt2":
            return {"n_layer": self.layers, "n_embd": self.width, "n_head": self.heads, "n_positions": 256,
                    "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
        return {"num_hidden_layers": self.layers, "hidden_size": self.width, "num_attention_heads": self.heads,
                "num_key_value_heads": self.kv_heads, "intermediate_size": self.intermediate,
                "max_position_embeddings": 256}


SHAPES = {
    "gpt2-small": Shape("gpt2", layers=12, width=768, heads=12, vocab=50257),
    # Llama 3.2 1B's trunk (tied embeddings) with a 32,000-token vocabulary: 1.04 B parameters
    "llama-1b": Shape("llama", layers=16, width=2048, heads=32, vocab=32000, kv_heads=8, intermediate=8192),
    "tiny-gpt2": Shape("gpt2", layers=2, width=64, heads=2, vocab=2048),
    "tiny-llama": Shape("llama", layers=2, width=64, heads=4, vocab=2048, kv_heads=2, intermediate=128),
}
GPU_SHAPES = ("gpt2-small", "llama-1b")
SMOKE_SHAPES = ("tiny-gpt2", "tiny-llama")
# The order they run in (TRL's process before grueflow's): the GRPO-vs-TRL comparison first, so that a short
# budget still measures it.
METHODS = ("trl_grpo", "grpo", "ppo", "nlpo")
TRL_METHODS = ("trl_grpo",)
# Seconds a shape needs at least (model build, loads, warm-up); with less left it is skipped.
SHAPE_MIN_S = {"gpt2-small": 40.0, "llama-1b": 90.0, "tiny-gpt2": 0.0, "tiny-llama": 0.0}
GPU_SETTINGS = Settings(prompts=16, group=8, new_tokens=64, warmup=1, steps=3, threads=min(8, os.cpu_count() or 1))
SMOKE_SETTINGS = Settings(prompts=2, group=2, new_tokens=4, warmup=1, steps=1, threads=2)
PIPELINE_TASK = "sentiment"
PIPELINE_ALGORITHMS = ("ppo", "grpo")
SMOKE_PIPELINE_ALGORITHMS = ("grpo",)  # the method file the check derives from params/methods (see micro_params)
MICRO_SIZE_KEYS = ("iterations", "rollouts_per_iteration", "minibatch_size", "checkpoint_every")
RESULT = "GPU_CHECK_RESULT "  # the prefix of a worker's result lines (TRL prints to stdout too)
HARD_STOP_GRACE_S = 20.0  # a worker still running this long after the budget is killed
LIBRARIES = ("torch", "transformers", "accelerate", "peft", "trl", "datasets", "stable-baselines3", "dvclive")
TARGETS = "grueflow GRPO <= 0.5 x TRL GRPO; PPO <= 1.5 x GRPO; update MFU >= 30 % at llama-1b"


# -- part 1: the pipeline ------------------------------------------------------------------------


@dataclass(frozen=True)
class StageRun:
    """One stage CLI call: ``python stages/<script>.py <args>``; ``out`` holds its ``stage.json``."""

    label: str
    script: str
    args: tuple[str, ...]
    out: Path
    runs_model: bool  # whether it takes --device


@dataclass
class StageResult:
    """What one stage call did: wall seconds, what its ``stage.json`` recorded, and notes."""

    label: str
    ok: bool
    wall_s: float
    recorded_wall_s: Optional[float] = None
    device: Optional[str] = None  # execution.device in stage.json; None where not recorded
    precision: Optional[str] = None
    runs_model: bool = False
    notes: list[str] = field(default_factory=list)


def micro_params(dest: Path, algorithms: tuple[str, ...]) -> Path:
    """``dest`` filled with the micro suite's task and method files, plus, for each algorithm the micro suite lacks,
    the library's method file with the micro PPO's sizes (``MICRO_SIZE_KEYS``)."""
    import yaml

    from grueflow.config import read_yaml

    shutil.copytree(MICRO / "tasks", dest / "tasks")
    shutil.copytree(MICRO / "methods", dest / "methods")
    micro_ppo = read_yaml(MICRO / "methods" / "ppo.yaml")
    for algorithm in algorithms:
        target = dest / "methods" / f"{algorithm}.yaml"
        if not target.exists():
            method = {**read_yaml(ROOT / "params" / "methods" / f"{algorithm}.yaml"),
                      **{k: micro_ppo[k] for k in MICRO_SIZE_KEYS}}
            target.write_text(yaml.safe_dump(method, sort_keys=False))
    return dest


def pipeline_plan(params: Path, results: Path, algorithms: tuple[str, ...], threads: int) -> list[list[StageRun]]:
    """The stage calls of one task, seed 0, RL from the base model, as the rules spell them, in levels of
    independent calls (each level needs only the ones before it)."""
    task, seed = PIPELINE_TASK, "0"
    task_file, methods = str(params / "tasks" / f"{task}.yaml"), params / "methods"
    pool, base = results / task / "datapool", results / task / "base_model"
    supervised = results / task / "supervised" / "seed0"
    common = ("--task-file", task_file, "--datapool", str(pool))
    run_args = ("--seed", seed, "--threads", str(threads))

    def rl(algorithm: str) -> StageRun:
        out = results / task / algorithm / "seed0"
        return StageRun(f"rl_finetune {algorithm}", "rl_finetune", (
            *common, "--algorithm", algorithm, "--method-file", str(methods / f"{algorithm}.yaml"),
            "--init-model", f"{base}/model", "--base-model", f"{base}/model", *run_args,
            "--resume-dir", f"{out}.resume", "--out", str(out)), out, True)

    def evaluate(method: str, model: Path, start: str, algorithm: Optional[str] = None) -> StageRun:
        out = results / "eval" / task / method / "seed0"
        identity = ("--start", start, *(("--algorithm", algorithm) if algorithm else ()))
        return StageRun(f"evaluate {method}", "evaluate", (
            *common, "--task", task, *identity, "--model", f"{model}/model", "--base-model", f"{base}/model",
            *run_args, "--out", str(out)), out, True)

    aggregate = StageRun("aggregate", "aggregate", (
        "--eval-dir", str(results / "eval"), "--tasks", task, "--algorithms", *algorithms, "--seeds", seed,
        "--rl-starts", "zero_shot", "--out-csv", str(results / "grue_table.csv"),
        "--out-md", str(results / "grue_table.md"), "--out-json", str(results / "grue_table.json")), results, False)
    return [
        [StageRun("prepare_datapool", "prepare_datapool", ("--task-file", task_file, "--out", str(pool)), pool, False)],
        [StageRun("base_model", "base_model", (*common, "--threads", str(threads), "--out", str(base)), base, True)],
        [StageRun("warm_start", "warm_start", (
            *common, "--method-file", str(methods / "supervised.yaml"), "--base-model", f"{base}/model", *run_args,
            "--resume-dir", f"{supervised}.resume", "--out", str(supervised)), supervised, True),
         *(rl(a) for a in algorithms), evaluate("zero_shot", base, "zero_shot")],
        [evaluate("supervised", supervised, "supervised"),
         *(evaluate(a, results / task / a / "seed0", "zero_shot", a) for a in algorithms)],
        [aggregate],
    ]


def stage_command(run: StageRun, device: Optional[str]) -> list[str]:
    return [sys.executable, str(ROOT / "stages" / f"{run.script}.py"), *run.args,
            *(("--device", device) if device and run.runs_model else ())]


def subprocess_env() -> dict[str, str]:
    """This environment with the repository importable (the GPU machine has grueflow uninstalled, and carried
    wheels on ``PYTHONPATH``), offline unless told otherwise (nothing may wait on a hub or DVC's analytics)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DVC_NO_ANALYTICS": "1"}
    return {**offline, **os.environ, "PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def read_record(run: StageRun, result: StageResult) -> None:
    """Fill ``result`` from ``run``'s ``stage.json`` (tolerant: a key not there is noted, not an error)."""
    path = run.out / "stage.json"
    if not path.is_file():
        if run.runs_model:
            result.notes.append("no stage.json")
        return
    record = json.loads(path.read_text())
    provenance = run.out / "provenance.json"  # the run's wall time and execution (older records: stage.json)
    if provenance.is_file():
        record = {**record, **json.loads(provenance.read_text())}
    result.recorded_wall_s = record.get("wall_time_s")
    execution = record.get("execution")
    if isinstance(execution, dict):
        result.device, result.precision = execution.get("device"), execution.get("precision")
    elif run.runs_model:
        result.notes.append(f"stage.json has no execution.device (keys: {', '.join(sorted(record))})")


def failure_note(stderr: str) -> str:
    """The telling line of a failed stage's stderr: a missing module by name, else the last line."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    missing = [line for line in lines if "ModuleNotFoundError" in line or "No module named" in line]
    return (missing or lines or ["(no output)"])[-1].strip()[:300]


def run_level(level: list[StageRun], device: Optional[str], logs: Path, deadline: float, jobs: int
              ) -> list[StageResult]:
    """Run one level's calls, at most ``jobs`` at a time, each started as soon as a slot frees; a call whose CLI
    has no ``--device`` yet runs again without it. Calls still running at ``deadline`` are stopped."""
    pending, running, done = list(level), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            run = pending.pop(0)
            running[run.label] = (run, _start(run, device, logs), time.perf_counter())
        for label, (run, proc, started) in list(running.items()):
            if proc.poll() is not None:
                done[label] = _finish(run, proc.returncode, time.perf_counter() - started, device, logs, deadline)
            elif time.time() >= deadline:
                proc.kill()
                proc.wait()
                done[label] = StageResult(label, False, time.perf_counter() - started, runs_model=run.runs_model,
                                          notes=["stopped at the time budget"])
            else:
                continue
            del running[label]
        time.sleep(0.05)
    return [done[run.label] for run in level]


def _log_path(run: StageRun, logs: Path) -> Path:
    return logs / f"{run.label.replace(' ', '_')}.log"


def _start(run: StageRun, device: Optional[str], logs: Path) -> subprocess.Popen:
    with _log_path(run, logs).open("w") as log:
        return subprocess.Popen(stage_command(run, device), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=subprocess_env())


def _finish(run: StageRun, returncode: int, wall_s: float, device: Optional[str], logs: Path, deadline: float
            ) -> StageResult:
    """The result of a finished call, from its exit status, its log and its ``stage.json``."""
    output = _log_path(run, logs).read_text()
    if returncode != 0 and device and run.runs_model and "unrecognized arguments: --device" in output:
        retry = run_level([run], None, logs, deadline, 1)[0]
        retry.notes.insert(0, "its CLI has no --device yet: ran on its default device")
        return retry
    result = StageResult(run.label, returncode == 0, wall_s, runs_model=run.runs_model)
    if returncode != 0:
        result.notes.append(f"exit {returncode}: {failure_note(output)}")
    read_record(run, result)
    return result


def run_pipeline(algorithms: tuple[str, ...], device: str, work: Path, deadline: float, jobs: int, threads: int
                 ) -> list[StageResult]:
    """The pipeline's stage calls, level by level, until one fails or the budget runs out (the rest noted)."""
    params, results, logs = work / "params", work / "results", work / "logs"
    logs.mkdir(parents=True)
    micro_params(params, algorithms)
    done: list[StageResult] = []
    for level in pipeline_plan(params, results, algorithms, threads):
        failed = [r.label for r in done if not r.ok]
        if failed or time.time() >= deadline:
            why = f"after {failed[0]} failed" if failed else "the time budget ran out"
            done += [StageResult(run.label, False, 0.0, runs_model=run.runs_model, notes=[f"not run: {why}"])
                     for run in level]
            continue
        done += run_level(level, device, logs, deadline, jobs)
        for result in done[-len(level):]:
            print(f"pipeline: {result.label} {'ok' if result.ok else 'FAILED'} in {result.wall_s:.1f} s "
                  f"(device {result.device}) {'; '.join(result.notes)}", flush=True)
    return done


def on_asked_device(result: StageResult, device: str) -> str:
    """Whether the recorded device is the one asked for (``cuda`` matches any ``cuda:N``)."""
    if not result.runs_model:
        return "— (runs no model)"
    if result.device is None:
        return "not recorded"
    asked = device.split(":")[0] if device in ("cuda", "cpu") else device
    return "yes" if result.device == asked or result.device.startswith(f"{asked}:") else "no"


# -- part 2: the RL step -------------------------------------------------------------------------


@dataclass(frozen=True)
class RLRun:
    """What every RL-step measurement of one run shares (handed to each shape's process as JSON)."""

    settings: Settings
    device: str  # cuda, cuda:N or cpu
    precision: str  # auto (bf16 on CUDA, fp32 on the CPU), fp32 or bf16
    cache: str  # the folder the models are built in
    deadline: float  # time.time() by which the whole run should be done

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "RLRun":
        fields = json.loads(text)
        return cls(Settings(**fields.pop("settings")), **fields)

    def bf16(self) -> bool:
        return is_bf16(self.precision, self.device)


def is_bf16(precision: str, device: str) -> bool:
    """Whether ``precision`` (auto, fp32, bf16) means bf16 on ``device``: autocast over float32 master weights."""
    import torch

    from grueflow.device import resolve_precision

    return resolve_precision(precision, torch.device(device)) == "bf16"


def synchronize(device: Any) -> None:
    """Wait for the GPU's queued work, so that a phase's timer stops when its kernels have run."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def build_model(shape: str, folder: Path, device: str) -> Path:
    """``SHAPES[shape]`` with random weights (seed 0), built on ``device`` and saved with ``save_pretrained`` (bf16
    on CUDA, float32 on the CPU) with a BPE tokenizer trained on the task's text, padded to the shape's vocabulary."""
    import torch

    from grueflow.models.tiny import build_model as build, train_tokenizer

    if (folder / "config.json").exists():
        return folder
    spec = SHAPES[shape]
    tokenizer = train_tokenizer(task_texts()[1], min(spec.vocab, 2048))
    tokenizer.add_tokens([f"<extra_{i}>" for i in range(spec.vocab - len(tokenizer))])
    with torch.device(device):
        model = build(spec.architecture, spec.config(), tokenizer, seed=0)
    if torch.device(device).type == "cuda":
        model = model.to(torch.bfloat16)
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(folder)
    return folder


def matmul_parameters(model: Any) -> int:
    """Parameters that multiply every token: all but embedding lookups; the LM head counts (once, tied or not)."""
    import torch

    head = model.get_output_embeddings().weight
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    return sum(p.numel() for p in model.parameters() if id(p) not in lookups or p is head)


def shape_facts(model_dir: Path) -> dict[str, int | float]:
    """Parameter counts (from the config, on the meta device) and the mean prompt length in tokens."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lengths = [len(ids) for ids in tokenizer(task_texts()[0])["input_ids"]]
    return {"parameters": sum(p.numel() for p in model.parameters()), "matmul_parameters": matmul_parameters(model),
            "prompt_tokens": statistics.mean(lengths)}


def grueflow_steps(algorithm: str, model_dir: Path, job: RLRun) -> tuple[list[dict[str, float]], bool]:
    """``warmup + steps`` iterations of grueflow's trainer (bench/rl_step.py's) on the job's device and precision;
    the timing of each measured one, and whether the update differentiated the sampling pass."""
    from grueflow.device import execution
    from grueflow.models.backend import select
    from grueflow.rl.trainer import RLTrainer

    class SyncedTrainer(RLTrainer):
        """The trainer with the GPU synchronised at the end of its scoring and update phases."""

        def reference_logits(self, *args: Any, **kwargs: Any) -> Any:
            logits = super().reference_logits(*args, **kwargs)
            synchronize(self.device)
            return logits

        def update(self, *args: Any, **kwargs: Any) -> Any:
            stats = super().update(*args, **kwargs)
            synchronize(self.device)
            return stats

    backend = select(execution(job.device, job.precision))
    trainer = rl_step.grueflow_trainer(algorithm, model_dir, job.settings, backend, SyncedTrainer)
    return rl_step.timed_steps(trainer, job.settings), trainer.keeps_sampling


def trl_steps(model_dir: Path, job: RLRun, out_dir: Path) -> list[dict[str, float]]:
    """TRL's GRPOTrainer at bench/rl_step.py's settings, on the job's device (bf16 mixed precision where the run
    is bf16, its reference then in bf16 as grueflow's); the timing of each measured step."""
    return rl_step.trl_steps("trl_grpo", model_dir, job.settings, out_dir, device=str(job.device), bf16=job.bf16())


def update_flops(method: str, facts: dict[str, Any], s: Settings, keeps_sampling: bool) -> tuple[float, int]:
    """(FLOPs of one update, the multiplier of ``N x tokens``: 6, or 4 where the update differentiates the
    sampling pass); the tokens are those the method's update runs over (see the module's docstring)."""
    prompt, completions = facts["prompt_tokens"], s.completions
    if method in TRL_METHODS:
        tokens = completions * (prompt + s.new_tokens)
    else:
        tokens = s.prompts * prompt + completions * (s.new_tokens - 1)
    multiplier = 4 if keeps_sampling else 6
    return multiplier * facts["matmul_parameters"] * tokens, multiplier


def measure(method: str, shape: str, model_dir: Path, facts: dict[str, Any], job: RLRun) -> dict[str, Any]:
    """One method at one shape: the measured step with the median wall time (the lower middle one of an even
    number) and its phases (seconds), which split it as per-phase medians need not; tokens/s, peak GPU memory
    (GiB), the update's TFLOP/s."""
    import torch

    cuda = torch.device(job.device).type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(job.device)
    before = torch.cuda.memory_allocated(job.device) if cuda else 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if method in TRL_METHODS:
            rows, keeps = trl_steps(model_dir, job, Path(tmp)), False
        else:
            rows, keeps = grueflow_steps(method, model_dir, job)
    peak = (torch.cuda.max_memory_allocated(job.device) - before) / 2 ** 30 if cuda else None
    median = sorted(rows, key=lambda r: r["step_s"])[(len(rows) - 1) // 2]
    flops, multiplier = update_flops(method, facts, job.settings, keeps)
    return {"kind": "method", "shape": shape, "method": method, "median": median, "steps": len(rows),
            "tokens_per_s": median["tokens"] / median["step_s"],
            "generation_tokens_per_s": median["tokens"] / max(median["generation_s"], 1e-9),
            "peak_gpu_gib": peak, "update_flops": flops, "flop_multiplier": multiplier,
            "update_tflops": flops / max(median["update_s"], 1e-9) / 1e12, "wall_s": time.perf_counter() - started}


def trl_missing() -> Optional[str]:
    """None where TRL's GRPOTrainer can be imported, else which module is missing."""
    for name in ("trl", "datasets"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed"
    return None


def worker(shape: str, methods: list[str], job: RLRun) -> Iterator[dict[str, Any]]:
    """Build ``shape``, then measure each method while the budget allows; one result dict per method."""
    import torch

    started = time.perf_counter()
    model_dir = build_model(shape, Path(job.cache) / shape, job.device)
    gc.collect()
    if torch.device(job.device).type == "cuda":
        torch.cuda.empty_cache()
    facts = shape_facts(model_dir)
    yield {"kind": "shape", "shape": shape, **facts, "build_s": time.perf_counter() - started}
    slowest = 0.0
    for method in methods:
        missing = trl_missing() if method in TRL_METHODS else None
        if missing:
            yield {"kind": "skipped", "shape": shape, "method": method, "reason": missing}
        elif time.time() + slowest > job.deadline:
            yield {"kind": "skipped", "shape": shape, "method": method, "reason": f"time budget: "
                   f"{job.deadline - time.time():.0f} s left, the slowest method so far took {slowest:.0f} s"}
        else:
            method_started = time.perf_counter()
            try:
                yield measure(method, shape, model_dir, facts, job)
            except Exception as err:  # noqa: BLE001  (one method's failure is reported; the others still run)
                yield {"kind": "error", "shape": shape, "method": method, "error": f"{type(err).__name__}: {err}"[:500]}
            slowest = max(slowest, time.perf_counter() - method_started)
            gc.collect()


def run_worker(shape: str, methods: list[str], job: RLRun) -> list[dict[str, Any]]:
    """:func:`worker` in a fresh process, killed ``HARD_STOP_GRACE_S`` after the deadline; what it reported."""
    cmd = [sys.executable, __file__, "--worker", shape, "--methods", ",".join(methods), "--job", job.to_json()]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), cwd=ROOT,
                              timeout=max(job.deadline - time.time(), 0.0) + HARD_STOP_GRACE_S)
        stdout, stderr, problem = done.stdout, done.stderr, (f"exit {done.returncode}" if done.returncode else "")
    except subprocess.TimeoutExpired as err:
        stdout, stderr, problem = _text(err.stdout), _text(err.stderr), "killed at the time budget"
    results = [json.loads(line[len(RESULT):]) for line in stdout.splitlines() if line.startswith(RESULT)]
    reported = {r.get("method") for r in results}
    if problem:
        results += [{"kind": "error", "shape": shape, "method": m, "error": f"{problem}: {failure_note(stderr)}"}
                    for m in methods if m not in reported]
    return results


def _text(data: Any) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def method_groups(methods: list[str]) -> list[list[str]]:
    """The processes a shape's methods run in: TRL's first and alone (grueflow's ``seed_everything`` turns on
    deterministic algorithms process-wide), then grueflow's together (one start-up for all of them)."""
    groups = [[m for m in methods if m in TRL_METHODS], [m for m in methods if m not in TRL_METHODS]]
    return [group for group in groups if group]


def run_rl_steps(shapes: list[str], methods: list[str], job: RLRun) -> list[dict[str, Any]]:
    """Each shape's workers in turn, while the budget leaves a shape its ``SHAPE_MIN_S``."""
    results: list[dict[str, Any]] = []
    for shape in shapes:
        left = job.deadline - time.time()
        if left < max(SHAPE_MIN_S[shape], 1.0):
            results += [{"kind": "skipped", "shape": shape, "method": m,
                         "reason": f"time budget: {left:.0f} s left, the shape needs about {SHAPE_MIN_S[shape]:.0f} s"}
                        for m in methods]
            continue
        for group in method_groups(methods):
            if time.time() >= job.deadline:
                results += [{"kind": "skipped", "shape": shape, "method": m, "reason": "time budget: none left"}
                            for m in group]
                continue
            for result in run_worker(shape, group, job):
                results.append(result)
                print(f"rl step: {json.dumps(result)[:300]}", flush=True)
    return results


# -- the report ---------------------------------------------------------------------------------


def machine(device: str) -> list[str]:
    """Lines naming the device, the libraries (as installed, without importing them) and the host."""
    import torch

    resolved = torch.device(device)
    if resolved.type == "cuda":
        props = torch.cuda.get_device_properties(resolved)
        gpu = (f"{props.name}, {props.total_memory / 2 ** 30:.0f} GiB, {props.multi_processor_count} SMs, "
               f"CUDA {torch.version.cuda}")
    else:
        gpu = f"none: the CPU ({platform.processor() or platform.machine()})"
    libraries = ", ".join(f"{name} {_installed(name)}" for name in LIBRARIES)
    return [f"- GPU: {gpu}", f"- host: {os.cpu_count()} cores; python {platform.python_version()}",
            f"- {libraries}"]


def _installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def pipeline_section(results: list[StageResult], algorithms: tuple[str, ...], device: str, jobs: int) -> list[str]:
    lines = [f"Task `{PIPELINE_TASK}` of the micro suite, seed 0, {' and '.join(algorithms)} from the base "
             f"model; `--device {device}` to every stage that runs a model; up to {jobs} stages of a level side by "
             "side.", "",
             "| stage | ok | wall s | stage.json wall s | execution.device | precision | on the asked device | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        recorded = f"{r.recorded_wall_s:.2f}" if r.recorded_wall_s is not None else "—"
        lines.append(f"| {r.label} | {'yes' if r.ok else 'no'} | {r.wall_s:.1f} | {recorded} | {r.device or '—'} | "
                     f"{r.precision or '—'} | {on_asked_device(r, device)} | {'; '.join(r.notes)} |")
    total = sum(r.wall_s for r in results)
    return lines + ["", f"Sum of stage wall times: {total:.1f} s."]


def _count(n: float) -> str:
    """A parameter count: 124.4 M, 1.04 B, 0.25 M."""
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.{1 if n >= 1e7 else 2}f} M"


def _method_row(r: dict[str, Any], facts: dict[str, Any], peak_tflops: float) -> str:
    m = r["median"]
    peak = f"{r['peak_gpu_gib']:.2f}" if r["peak_gpu_gib"] is not None else "—"
    mfu = 100 * r["update_tflops"] / peak_tflops
    return (f"| {r['shape']} | {_count(facts.get('parameters', 0))} | {r['method']} | {m['step_s']:.3f} | "
            f"{m['generation_s']:.3f} | {m['reward_s']:.4f} | {m['scoring_s']:.3f} | {m['update_s']:.3f} | "
            f"{r['tokens_per_s']:.0f} | {r['generation_tokens_per_s']:.0f} | {peak} | "
            f"{r['flop_multiplier']} | {r['update_tflops']:.3g} | {mfu:.3g} % |")


def rl_section(results: list[dict[str, Any]], s: Settings, peak_tflops: float, bf16: bool) -> list[str]:
    precision = "bf16 autocast over float32 master weights, frozen references in bf16" if bf16 else "float32"
    facts: dict[str, dict[str, Any]] = {}
    for r in results:  # each of a shape's processes reports it; the first one built the model
        if r["kind"] == "shape":
            facts.setdefault(r["shape"], r)
    lines = [f"Settings: {s.prompts} prompts x {s.group} samples = {s.completions} completions per step, exactly "
             f"{s.new_tokens} new tokens, one epoch of one minibatch, AdamW lr {s.learning_rate}, KL coefficient "
             f"{s.beta}; {precision}; the step with the median wall time of {s.steps} after {s.warmup} warm-up "
             "step(s), and its phases. grueflow runs with `torch.use_deterministic_algorithms(True, warn_only=True)`, "
             "as its stages do (TRL, in a process of its own, without).", "",
             "| shape | parameters | matmul parameters N | mean prompt tokens P | build s |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {_count(f['parameters'])} | {_count(f['matmul_parameters'])} | "
              f"{f['prompt_tokens']:.1f} | {f['build_s']:.1f} |" for k, f in facts.items()]
    lines += ["", "Update FLOPs = multiplier x N x the update's tokens: 6 (forward and backward over the rollout), "
              "or 4 where the update differentiates the sampling pass (no forward of its own); grueflow's update "
              "runs over each group's prompt once and every completion's tokens but the last, TRL's over every "
              "row's prompt and completion; attention's quadratic term left out. MFU = update FLOPs / update "
              f"seconds / {peak_tflops:g} TFLOP/s.", "",
              "| shape | parameters | method | step s | generation s | reward s | scoring s | update s | tokens/s "
              "| generation tokens/s | peak GPU GiB | FLOP multiplier | update TFLOP/s | update MFU |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_method_row(r, facts.get(r["shape"], {}), peak_tflops) for r in results if r["kind"] == "method"]
    return lines


def _ratio(by: dict[tuple[str, str], dict], shape: str, a: str, b: str) -> Optional[float]:
    if (shape, a) in by and (shape, b) in by:
        return by[(shape, a)]["median"]["step_s"] / by[(shape, b)]["median"]["step_s"]
    return None


def targets_section(results: list[dict[str, Any]], shapes: list[str], peak_tflops: float) -> list[str]:
    """One line per target and shape: the measured value and whether it holds, or why it was not measured."""
    by = {(r["shape"], r["method"]): r for r in results if r["kind"] == "method"}
    lines = []
    for a, b, bound, text in (("grpo", "trl_grpo", 0.5, "grueflow GRPO step <= 0.5 x TRL GRPOTrainer step"),
                              ("ppo", "grpo", 1.5, "grueflow PPO step <= 1.5 x grueflow GRPO step")):
        for shape in shapes:
            ratio = _ratio(by, shape, a, b)
            verdict = (f"{ratio:.2f} — {'holds' if ratio <= bound else 'does not hold'}" if ratio is not None
                       else f"not measured ({_why_missing(results, shape, (a, b))})")
            lines.append(f"- {text} at {shape}: {verdict}")
    mfu_shape = "llama-1b" if "llama-1b" in shapes else shapes[-1]
    for method in ("grpo", "ppo"):
        r = by.get((mfu_shape, method))
        verdict = (f"{100 * r['update_tflops'] / peak_tflops:.1f} % — "
                   f"{'holds' if r['update_tflops'] / peak_tflops >= 0.3 else 'does not hold'}" if r
                   else f"not measured ({_why_missing(results, mfu_shape, (method,))})")
        lines.append(f"- grueflow {method.upper()} update MFU >= 30 % of {peak_tflops:g} TFLOP/s at {mfu_shape}: "
                     f"{verdict}")
    return lines


def _why_missing(results: list[dict[str, Any]], shape: str, methods: tuple[str, ...]) -> str:
    reasons = [f"{r['method']}: {r.get('reason') or r.get('error')}" for r in results
               if r["shape"] == shape and r.get("method") in methods and r["kind"] in ("skipped", "error")]
    return "; ".join(reasons) or "not asked for"


def skipped_section(pipeline: list[StageResult], results: list[dict[str, Any]], parts: list[str]) -> list[str]:
    lines = [f"- {part}: not asked for (--parts)" for part in ("pipeline", "rl") if part not in parts]
    lines += [f"- stage {r.label}: {'; '.join(r.notes)}" for r in pipeline if not r.ok]
    lines += [f"- {r['shape']} {r['method']}: {r.get('reason') or r.get('error')}" for r in results
              if r["kind"] in ("skipped", "error")]
    return lines or ["- nothing"]


def report(plan: Plan, command: str, used_s: float, pipeline: list[StageResult], results: list[dict[str, Any]]
           ) -> str:
    """The whole report (Markdown): the machine, the pipeline's stages, the RL-step table, the targets, the skips."""
    mode = "smoke (CPU, tiny shapes)" if plan.smoke else "full"
    return "\n".join([
        "# grueflow on a GPU: the micro pipeline, and the RL step against TRL", "",
        f"Command: `{command}`", "",
        f"Mode: {mode}, device `{plan.device}`; time budget {plan.budget_s:.0f} s, used {used_s:.0f} s. "
        f"Targets: {TARGETS}.", "",
        "## Machine", "", *machine(plan.device), "",
        "## Pipeline", "", *(pipeline_section(pipeline, plan.algorithms, plan.device, plan.jobs)
                             if "pipeline" in plan.parts else ["Not run."]), "",
        "## RL step", "", *(rl_section(results, plan.settings, plan.peak_tflops, plan.bf16())
                            if "rl" in plan.parts else ["Not run."]), "",
        "## Targets", "", *targets_section(results, list(plan.shapes), plan.peak_tflops), "",
        "## Skipped", "", *skipped_section(pipeline, results, list(plan.parts)), "",
    ])


# -- the command line ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What one run does, from its command line."""

    smoke: bool
    device: str  # cuda, cuda:N or cpu
    precision: str  # the RL steps': auto, fp32 or bf16
    parts: tuple[str, ...]  # pipeline, rl
    algorithms: tuple[str, ...]  # the pipeline's RL algorithms
    shapes: tuple[str, ...]
    methods: tuple[str, ...]
    settings: Settings
    jobs: int  # pipeline stages side by side
    budget_s: float
    peak_tflops: float

    def bf16(self) -> bool:
        return is_bf16(self.precision, self.device)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help=f"on the CPU: the pipeline with {', '.join(SMOKE_PIPELINE_ALGORITHMS)}, and one step per "
                        f"method at {', '.join(SMOKE_SHAPES)}")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda; cpu with --smoke)")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                   help="the RL steps' precision: auto is bf16 on CUDA, fp32 on the CPU (the stages keep their own)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "GPU_RESULTS.md")
    p.add_argument("--time-budget", type=float, default=420.0,
                   help="seconds for the whole run: shapes and methods that would not fit are skipped (default 420)")
    p.add_argument("--peak-tflops", type=float, default=PEAK_BF16_TFLOPS,
                   help=f"the MFU's denominator, dense bf16 TFLOP/s (default {PEAK_BF16_TFLOPS:g}: the H200's)")
    p.add_argument("--parts", default="pipeline,rl", help="comma-separated, of: pipeline, rl")
    p.add_argument("--shapes", default=None, help=f"comma-separated, of: {', '.join(SHAPES)} "
                   f"(default: {','.join(GPU_SHAPES)}; {','.join(SMOKE_SHAPES)} with --smoke)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of: {', '.join(METHODS)}")
    p.add_argument("--jobs", type=int, default=None, help="pipeline stages side by side (default: 4; 2 with --smoke)")
    for name in ("prompts", "group", "new_tokens", "steps", "warmup"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=f"RL step setting (default: "
                       f"{getattr(GPU_SETTINGS, name)}; {getattr(SMOKE_SETTINGS, name)} with --smoke)")
    p.add_argument("--cache", type=Path, default=None, help="where the models are built (default: a temporary folder)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    return p.parse_args()


def checked(args: argparse.Namespace) -> Plan:
    """The run's plan from the arguments; exits naming the valid choices where one is not."""
    parts, methods = tuple(args.parts.split(",")), tuple(args.methods.split(","))
    shapes = tuple(args.shapes.split(",")) if args.shapes else (SMOKE_SHAPES if args.smoke else GPU_SHAPES)
    for name, given, valid in (("part", parts, ("pipeline", "rl")), ("shape", shapes, tuple(SHAPES)),
                               ("method", methods, METHODS)):
        bad = [g for g in given if g not in valid]
        if bad:
            raise SystemExit(f"error: unknown {name} {', '.join(map(repr, bad))}; valid: {', '.join(valid)}")
    if args.time_budget <= 0 or args.peak_tflops <= 0 or (args.jobs is not None and args.jobs < 1):
        raise SystemExit(f"error: --time-budget and --peak-tflops must be positive and --jobs at least 1, got "
                         f"{args.time_budget:g}, {args.peak_tflops:g} and {args.jobs}")
    given = {k: getattr(args, k) for k in ("prompts", "group", "new_tokens", "steps", "warmup")
             if getattr(args, k) is not None}
    s = replace(SMOKE_SETTINGS if args.smoke else GPU_SETTINGS, **given)
    if min(s.prompts, s.group, s.new_tokens, s.steps) < 1 or s.warmup < 0:
        raise SystemExit(f"error: --prompts, --group, --new-tokens and --steps must be at least 1 and --warmup at "
                         f"least 0, got {asdict(s)}")
    return Plan(smoke=args.smoke, device=args.device or ("cpu" if args.smoke else "cuda"), precision=args.precision,
                parts=parts,
                algorithms=SMOKE_PIPELINE_ALGORITHMS if args.smoke else PIPELINE_ALGORITHMS, shapes=shapes,
                methods=methods, settings=s, jobs=args.jobs or (2 if args.smoke else 4), budget_s=args.time_budget,
                peak_tflops=args.peak_tflops)


def check_device(device: str) -> None:
    """Exit in seconds, before any work, where ``device`` cannot run (e.g. cuda without a GPU)."""
    from grueflow.config import ConfigError
    from grueflow.device import device_setting, resolve_device

    try:
        resolve_device(*device_setting(device))
    except ConfigError as err:
        raise SystemExit(f"error: {err} (on a CPU machine run --smoke)") from None


def run(plan: Plan, cache: Optional[Path], pipeline: list[StageResult], results: list[dict[str, Any]]) -> None:
    """The pipeline, then the RL steps, inside the plan's time budget (both in a temporary folder), appending to
    ``pipeline`` and ``results`` as they finish."""
    deadline = time.time() + plan.budget_s
    with tempfile.TemporaryDirectory(prefix="gpu_check.") as tmp:
        if "pipeline" in plan.parts:
            threads = max(1, (os.cpu_count() or 1) // plan.jobs)  # each stage's --threads: the cores shared out
            pipeline += run_pipeline(plan.algorithms, plan.device, Path(tmp) / "pipeline", deadline, plan.jobs, threads)
        if "rl" in plan.parts:
            cache = cache or Path(tmp) / "models"
            cache.mkdir(parents=True, exist_ok=True)
            job = RLRun(plan.settings, plan.device, plan.precision, str(cache), deadline)
            results += run_rl_steps(list(plan.shapes), list(plan.methods), job)


def main() -> None:
    args = parse_args()
    if args.worker:
        for result in worker(args.worker, args.methods.split(","), RLRun.from_json(args.job)):
            print(RESULT + json.dumps(result), flush=True)
        return
    plan = checked(args)
    check_device(plan.device)
    started = time.time()
    pipeline: list[StageResult] = []
    results: list[dict[str, Any]] = []
    try:
        run(plan, args.cache, pipeline, results)
    except Exception as err:  # noqa: BLE001  (the report is still written, with what was measured and the error)
        results.append({"kind": "error", "shape": "the check", "method": "itself", "error": repr(err)[:500]})
        raise
    finally:
        command = ("python bench/gpu_check.py " + " ".join(sys.argv[1:])).strip()
        write_report(args.out, report(plan, command, time.time() - started, pipeline, results))


def write_report(out: Path, text: str) -> None:
    """``text`` to ``out``, through a temporary name (a report is whole or absent)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
