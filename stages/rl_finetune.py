"""Stage 4: RL fine-tuning from the base model or the warm start, against the task reward."""

import logging
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import plots, stage
from grueflow.checkpoints import keyed_settings, run_key
from grueflow.config import GenerationConfig, LengthsConfig, RewardConfig, read_yaml, to_dict
from grueflow.data.sample import check_datapool, read_split
from grueflow.evaluation import check_scored_splits
from grueflow.io import MODEL_DIR, TIMINGS_FILE, fingerprint, write_csv, write_json
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.policy import Policy, Prompts
from grueflow.plugins import run_inputs
from grueflow.params import STARTS, check_select_metric, load_method, load_metrics, load_task_section, task_key_name
from grueflow.rl import ALGORITHMS
from grueflow.rl.configs import NLPOConfig
from grueflow.rl.nlpo import NLPO, mask_processors, save_decoding
from grueflow.rl.trainer import WALL_CLOCK_KEYS, KLCeilingError, NonFiniteError, RLTrainer
from grueflow.training import Tracking, TrainingRun, add_arguments, check_trained_policy
from grueflow.validation import Validation

TASK_KEYS = ("lengths", "rollout_generation", "eval_generation", "reward", "metrics", "method_overrides")
log = logging.getLogger("rl_finetune")


def nlpo_processor(cfg: Any, gen: GenerationConfig) -> Optional[Callable[[RLTrainer], Callable[[Prompts], Any]]]:
    """For NLPO evaluated with its masks: each evaluation (decoding with ``gen``) generates with the current mask
    model's masks."""
    if not isinstance(cfg, NLPOConfig) or not cfg.eval_with_masks:
        return None

    return lambda trainer: mask_processors(trainer.algorithm.mask_model, trainer.policy, cfg.top_p, cfg.top_k,
                                           cfg.min_tokens_to_keep, gen)


def log_iteration(row: dict[str, float]) -> None:
    value = f", value loss {row['losses/value']:.4f}" if "losses/value" in row else ""  # critic-free: none
    log.info("iteration %d: reward %.4f, kl %.4f, kl_coef %.4f%s, length %.1f",
             row["iteration"], row["reward/task"], row["kl/sequence"], row["kl/coef"], value, row["charts/mean_length"])


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help=f"params/tasks/<task>.yaml (reads: {', '.join(TASK_KEYS)}; eval_generation and metrics for "
                        f"evaluation during training, method_overrides.<algorithm>)")
    p.add_argument("--algorithm", required=True, help=f"one of: {', '.join(ALGORITHMS.names())}")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/<algorithm>.yaml")
    p.add_argument("--start", choices=STARTS, default="zero_shot",
                   help="the run's start, which picks the task file's overrides: zero_shot (from the base model: "
                        "method_overrides.<algorithm>) or supervised (from the warm start: method_overrides."
                        "<algorithm>, then method_overrides.supervised+<algorithm>); default zero_shot")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--init-model", type=Path, required=True, help="start model (a Hugging Face folder); also the frozen KL reference")
    p.add_argument("--base-model", type=Path, required=True, help="the task's base model folder (for fluency rewards)")
    p.add_argument("--seed", type=stage.seed, required=True)
    add_arguments(p, "a folder: model/, curves.csv, timings.csv, curves.png, train_metrics.json, dvclive/, "
                     "stage.json, decoding/; validation/ (with eval_every: curves.csv/.png, dvclive/, predictions/); "
                     "checkpoints/ (with save_every: iteration<k>/)", tracking=True)
    args = p.parse_args()
    started = stage.setup(args)
    # the task's sections as this method reads them: method_overrides.<algorithm> (and supervised+<algorithm>)
    lengths, generation, reward_cfg, eval_generation = (
        load_task_section(cls, args.task_file, key, args.algorithm, args.start)
        for cls, key in ((LengthsConfig, "lengths"), (GenerationConfig, "rollout_generation"),
                         (RewardConfig, "reward"), (GenerationConfig, "eval_generation")))
    cfg = load_method(args.algorithm, args.method_file, args.task_file, args.start)
    metrics = load_metrics(args.task_file)
    check_select_metric(cfg, str(args.method_file), reward_cfg, metrics)
    for name, decoding in (("rollout_generation", generation), ("eval_generation", eval_generation)):
        # eval_generation: validation (eval_every) and the evaluate stage after training decode with it
        check_context(args.init_model, lengths.prompt, decoding.max_new_tokens, str(args.task_file),
                      tuple(task_key_name(args.task_file, key, field, args.algorithm, args.start)
                            for key, field in (("lengths", "prompt"), (name, "max_new_tokens"))))
    run = TrainingRun.start("rl_finetune", args, started, args.seed, processes=cfg.processes)
    check_datapool(args.datapool, args.task_file)
    train = read_split(args.datapool, "train")
    # the meta every split scored by this run and by evaluate after it needs: checked before any model loads
    check_scored_splits(args.datapool, metrics, cfg.eval_every > 0, reward_cfg, train)
    # the reward loads first and checks the train split's meta and references, so that a sample it can never score
    # stops the stage before the models load
    reward = Reward(reward_cfg, MetricContext(base_model=args.base_model, max_prompt_length=lengths.prompt,
                                              execution=run.execution))
    reward.check([s.meta for s in train], [s.references for s in train])
    backend = select(run.execution)
    model, tokenizer = load_pretrained(args.init_model, backend=backend)
    # the frozen KL reference (bf16 under bf16); under LoRA it is the policy with its adapter disabled
    ref_model = load_pretrained(args.init_model, backend=backend, frozen=True)[0] if cfg.lora is None else None
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    prompts_cut = policy.count_cut([s.prompt for s in train], "train",
                                   task_key_name(args.task_file, "lengths", "prompt", args.algorithm, args.start))
    trainer = RLTrainer(args.algorithm, cfg, policy, ref_model, reward, train, generation, args.seed, run.parallel)
    evaluated = (to_dict(eval_generation), to_dict(metrics), fingerprint(args.datapool / "val.jsonl")) \
        if cfg.eval_every else ()  # what val rows depend on
    # everything the trained weights and the val rows depend on: a checkpoint of another run is never resumed (the
    # base model scores fluency rewards; the plugin code of the reward, the metrics and post-processing, and the
    # folders their args name, by content; this stage's code), but a change of how often the run checkpoints, or
    # how many checkpoints it keeps, resumes it
    key = run_key(args.algorithm, keyed_settings(to_dict(cfg)), to_dict(lengths), to_dict(generation),
                  to_dict(reward_cfg),
                  run_inputs(read_yaml(args.task_file), to_dict(reward_cfg), to_dict(metrics) if evaluated else None),
                  fingerprint(args.init_model), fingerprint(args.base_model),
                  fingerprint(args.datapool / "train.jsonl"), args.seed, run.execution.precision, *evaluated,
                  script=__file__)
    context = MetricContext(args.base_model, lengths.prompt, run.execution, policy)
    validation = Validation(run.resume_dir, read_split(args.datapool, "val") if cfg.eval_every else [],
                            eval_generation, reward_cfg, metrics, context, cfg, args.seed,
                            nlpo_processor(cfg, eval_generation), key)
    try:
        state = run.train(trainer, key, cfg.iterations, "iteration", f"{args.algorithm} iterations",
                          Tracking(args.tensorboard, WALL_CLOCK_KEYS), report=log_iteration,
                          validate=validation if validation.enabled else None)
    except KLCeilingError as err:
        raise SystemExit(f"error: {err}; the last checkpoint stays in {run.resume_dir}")
    except NonFiniteError as err:  # keep the offending rollout for inspection beside the last checkpoint
        dump = run.resume_dir / f"nonfinite_iteration{err.iteration}.json"
        write_json(dump, err.batch)
        raise SystemExit(f"error: {err}; the rollout is in {dump}; the last checkpoint stays in {run.resume_dir}")
    chosen = validation.selected()
    if chosen:
        log.info("handing on the policy of iteration %d: %s", chosen["iteration"], chosen["why"])
    else:  # the last policy is handed on: never one whose last update diverged
        check_trained_policy(policy, [s.prompt for s in train], "rl_finetune", cfg.learning_rate)
    # the curve row of the policy handed on: the last, or the selected iteration's (iteration 0, the start
    # policy, has none: the first row's rollout was sampled from it)
    final = next(row for row in state.curve if row["iteration"] == max(1, chosen["iteration"])) if chosen \
        else state.curve[-1]

    def write(folder: Path) -> None:
        (folder / MODEL_DIR).mkdir()
        trainer.save_to(folder / MODEL_DIR, key, final=True)
        if chosen:  # select: best: the kept policy replaces the final one (the final value head stays)
            for item in validation.selected_model().iterdir():
                shutil.copy2(item, folder / MODEL_DIR / item.name)
        validation.write(folder, f"{args.algorithm} on {args.task_file.stem}, seed {args.seed}: val")
        # the curve DVC hashes (a plot) holds no wall time; the timings go beside it, in no hash
        write_csv(folder / "curves.csv", [{k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS}
                                          for row in state.curve])
        write_csv(folder / TIMINGS_FILE, [{"iteration": row["iteration"], **{k: row[k] for k in WALL_CLOCK_KEYS
                                                                              if k in row}} for row in state.curve])
        plots.learning_curves(state.curve, "iteration", plots.RL_PANELS, folder / "curves.png",
                              f"{args.algorithm} on {args.task_file.stem}, seed {args.seed}")
        write_json(folder / "train_metrics.json", {"iteration": final["iteration"],
                                                   **{k: final[k] for k in ("reward/task", "kl/sequence", "kl/coef")}})
        # how evaluate decodes model/: NLPO with its masks, as RL4LMs
        save_decoding(folder, args.algorithm, trainer.algorithm if isinstance(trainer.algorithm, NLPO) else None,
                      tokenizer)

    def trained() -> list:  # what data-parallel processes compare: every trained module
        return [m for m in (trainer.policy.model, trainer.value_head, trainer.critic_model) if m is not None]

    run.finish(write, {"algorithm": args.algorithm, "method": to_dict(cfg), "lengths": to_dict(lengths),
                       "rollout_generation": to_dict(generation), "reward": to_dict(reward_cfg), "seed": args.seed,
                       "precision": args.precision},
               {"datapool": args.datapool, "init_model": args.init_model}, replicas=trained,
               extra={"selected": chosen or {"select": "last", "iteration": cfg.iterations,
                                             "why": "select: last hands on the final policy"},
                      "prompts_cut": prompts_cut})


if __name__ == "__main__":
    stage.main_guard(main)
