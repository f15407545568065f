"""Stage 4: RL fine-tuning from the base model or the warm start, against the task reward."""

import logging
import shutil
from pathlib import Path

from grueflow import plots, stage
from grueflow.checkpoints import run_key
from grueflow.config import GenerationConfig, LengthsConfig, RewardConfig, to_dict
from grueflow.data import read_split
from grueflow.distributed import DataParallel, check_replicas
from grueflow.io import MODEL_DIR, atomic_dir, fingerprint, write_csv, write_json
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.policy import Policy
from grueflow.params import load_method, load_section
from grueflow.rl import ALGORITHMS
from grueflow.rl.trainer import WALL_CLOCK_KEYS, KLCeilingError, NonFiniteError, RLTrainer
from grueflow.seeding import seed_everything
from grueflow.tracking import RunTracker, tensorboard_dir

TASK_KEYS = ("lengths", "rollout_generation", "reward", "method_overrides")
log = logging.getLogger("rl_finetune")


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help="params/tasks/<task>.yaml (reads: lengths, rollout_generation, reward, method_overrides.<algorithm>)")
    p.add_argument("--algorithm", required=True, help=f"one of: {', '.join(ALGORITHMS.names())}")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/<algorithm>.yaml")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--init-model", type=Path, required=True, help="start model (a Hugging Face folder); also the frozen KL reference")
    p.add_argument("--base-model", type=Path, required=True, help="the task's base model folder (for fluency rewards)")
    p.add_argument("--seed", type=stage.seed, required=True)
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--resume-dir", type=Path, required=True,
                   help="periodic checkpoints (<out>.resume); resumed from if present, removed at the end")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tensorboard", type=Path, default=None,
                   help="also write TensorBoard event files here (default: $GRUEFLOW_TENSORBOARD/<task>/<method>/seed<k> if set)")
    args = p.parse_args()
    started = stage.setup(args)
    lengths = load_section(LengthsConfig, args.task_file, "lengths")
    generation = load_section(GenerationConfig, args.task_file, "rollout_generation")
    reward_cfg = load_section(RewardConfig, args.task_file, "reward")
    cfg = load_method(args.algorithm, args.method_file, args.task_file)
    check_context(args.init_model, lengths.prompt, generation.max_new_tokens, str(args.task_file),
                  ("lengths.prompt", "rollout_generation.max_new_tokens"))
    stage.relaunch_data_parallel(cfg.processes, args.threads)  # processes > 1: N copies of this command
    ex = stage.execution(args)  # each data-parallel process on its own GPU
    parallel = DataParallel.from_env(ex.device)
    train = read_split(args.datapool, "train")

    seed_everything(args.seed, parallel.threads(args.threads))  # the job's cores, shared
    backend = select(ex)
    model, tokenizer = load_pretrained(args.init_model, backend=backend)
    # the frozen KL reference (bf16 under bf16); under LoRA it is the policy with its adapter disabled
    ref_model = load_pretrained(args.init_model, backend=backend, frozen=True)[0] if cfg.lora is None else None
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    reward = Reward(reward_cfg, MetricContext(base_model=args.base_model, max_prompt_length=lengths.prompt,
                                              execution=ex))
    trainer = RLTrainer(args.algorithm, cfg, policy, ref_model, reward, train, generation, args.seed, parallel)

    key = run_key(args.algorithm, to_dict(cfg), to_dict(generation), to_dict(reward_cfg), fingerprint(args.init_model),
                  fingerprint(args.datapool / "train.jsonl"), args.seed)
    resumed = trainer.resume(args.resume_dir, key)
    if resumed is not None:
        log.info("resumed from %s at iteration %d", resumed, trainer.state.iteration)
    bar = stage.progress(cfg.iterations, f"{args.algorithm} iterations", initial=trainer.state.iteration)
    # DVCLive logs into the resume folder while training (the output folder appears only when complete);
    # a resumed run first replays its checkpoint's curve, so the log holds exactly the checkpoint's rows
    # (the main process's alone when data-parallel: the others' curves are the same averaged rows)
    tracker = RunTracker(args.resume_dir / "dvclive", "iteration", WALL_CLOCK_KEYS,
                         tensorboard_dir(args.out, args.tensorboard)) if parallel.is_main else None
    if tracker is not None:
        tracker.replay(trainer.state.curve)

    def report(row: dict[str, float]) -> None:
        bar.update()
        if tracker is not None:
            tracker.log(trainer.state.curve[-1])  # the row as curves.csv holds it (rounded)
        log.info("iteration %d: reward %.4f, kl %.4f, kl_coef %.4f, value loss %.4f, length %.1f",
                 row["iteration"], row["reward/task"], row["kl/sequence"], row["kl/coef"],
                 row.get("losses/value", float("nan")), row["charts/mean_length"])

    try:
        state = trainer.train(checkpoint=(lambda t: t.save_checkpoint(args.resume_dir, key)) if parallel.is_main else None,
                              progress=report)
    except KLCeilingError as err:
        raise SystemExit(f"error: {err}; the last checkpoint stays in {args.resume_dir}")
    except NonFiniteError as err:  # keep the offending rollout for inspection beside the last checkpoint
        dump = args.resume_dir / f"nonfinite_iteration{err.iteration}.json"
        write_json(dump, err.batch)
        raise SystemExit(f"error: {err}; the rollout is in {dump}; the last checkpoint stays in {args.resume_dir}")
    bar.close()
    if tracker is not None:
        tracker.close()
    extra = {}
    if parallel.enabled:  # every process's weights hash: identical, or an error; only the main process writes
        trained = [m for m in (trainer.policy.model, trainer.value_head, trainer.critic_model) if m is not None]
        extra = {"data_parallel": {"processes": parallel.world_size, "weights_sha256": check_replicas(parallel, trained)}}
        if not parallel.is_main:
            return
    final = state.curve[-1]
    with atomic_dir(args.out) as tmp:
        (tmp / MODEL_DIR).mkdir()
        trainer.save_to(tmp / MODEL_DIR, key, final=True)
        write_csv(tmp / "curves.csv", state.curve)
        shutil.copytree(args.resume_dir / "dvclive", tmp / "dvclive")
        plots.learning_curves(state.curve, "iteration", plots.RL_PANELS, tmp / "curves.png",
                              f"{args.algorithm} on {args.task_file.stem}, seed {args.seed}")
        write_json(tmp / "train_metrics.json", {k: final[k] for k in ("reward/task", "kl/sequence", "kl/coef")})
        stage.finish(tmp, "rl_finetune",
                     {"algorithm": args.algorithm, "method": to_dict(cfg), "lengths": to_dict(lengths),
                      "rollout_generation": to_dict(generation), "reward": to_dict(reward_cfg), "seed": args.seed,
                      "precision": args.precision},
                     {"datapool": args.datapool, "init_model": args.init_model}, started, execution=ex.record(), **extra)
    shutil.rmtree(args.resume_dir, ignore_errors=True)


if __name__ == "__main__":
    stage.main_guard(main)
