"""Stage 3: supervised warm start of the base model on the datapool's (prompt, reference) pairs."""

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import plots, stage
from grueflow.checkpoints import run_key
from grueflow.config import GenerationConfig, LengthsConfig, SupervisedConfig, read_yaml, to_dict
from grueflow.data.sample import check_datapool, read_split
from grueflow.evaluation import check_scored_splits
from grueflow.io import MODEL_DIR, fingerprint, write_csv
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.lora import merged, with_lora
from grueflow.models.policy import Policy
from grueflow.metrics import MetricContext
from grueflow.params import check_select_metric, load_method, load_metrics, load_task_section, task_key_name
from grueflow.plugins import run_inputs
from grueflow.supervised import NonFiniteLossError, SupervisedTrainer, select_splits
from grueflow.training import Tracking, TrainingRun, add_arguments, check_trained_policy
from grueflow.validation import Validation

TASK_KEYS = ("lengths", "eval_generation", "metrics", "method_overrides")


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help=f"params/tasks/<task>.yaml (reads: {', '.join(TASK_KEYS)}; eval_generation and metrics for "
                        f"evaluation during training, method_overrides.supervised)")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/supervised.yaml")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--base-model", type=Path, required=True, help="a Hugging Face model folder")
    p.add_argument("--seed", type=stage.seed, required=True)
    add_arguments(p, "a folder: model/, loss_curve.csv, loss_curve.png, dvclive/, stage.json; validation/ "
                     "(with eval_every: curves.csv/.png, dvclive/, predictions/); checkpoints/ (with save_every: "
                     "epoch<k>/); a checkpoint after every epoch", tracking=True)
    args = p.parse_args()
    started = stage.setup(args)
    lengths: LengthsConfig = load_task_section(LengthsConfig, args.task_file, "lengths", "supervised")
    cfg: SupervisedConfig = load_method("supervised", args.method_file, args.task_file)
    eval_generation = load_task_section(GenerationConfig, args.task_file, "eval_generation", "supervised")
    metrics = load_metrics(args.task_file)
    check_select_metric(cfg, str(args.method_file), None, metrics)
    # and validation (eval_every) and the evaluate stage after training decode with eval_generation
    for budget in (("lengths", "target"), ("eval_generation", "max_new_tokens")):
        check_context(args.base_model, lengths.prompt, lengths.target if budget[0] == "lengths" else
                      eval_generation.max_new_tokens, str(args.task_file),
                      tuple(task_key_name(args.task_file, key, field, "supervised")
                            for key, field in (("lengths", "prompt"), budget)))
    run = TrainingRun.start("warm_start", args, started, args.seed, processes=cfg.processes)
    check_datapool(args.datapool, args.task_file)
    # the meta that evaluation during training and evaluate after it need: checked before any model loads
    check_scored_splits(args.datapool, metrics, cfg.eval_every > 0)
    train, val = select_splits(read_split(args.datapool, "train"), read_split(args.datapool, "val"), cfg.train_where)
    backend = select(run.execution)
    model, tokenizer = load_pretrained(args.base_model, backend=backend)
    if cfg.lora is not None:
        model = with_lora(model, cfg.lora)
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    prompts_cut = policy.count_cut([s.prompt for s in train], "train",
                                   task_key_name(args.task_file, "lengths", "prompt", "supervised"))
    trainer = SupervisedTrainer(policy, train, val, cfg, lengths.target, args.seed, run.parallel)
    data = [fingerprint(args.datapool / f"{split}.jsonl") for split in ("train", "val")]
    # what val rows depend on: the evaluation's settings, and the plugin code of the metrics and post-processing and
    # the folders their args name, by content
    evaluated = (to_dict(eval_generation), to_dict(metrics),
                 run_inputs(read_yaml(args.task_file), None, to_dict(metrics))) if cfg.eval_every else ()
    key = run_key(to_dict(lengths), to_dict(cfg), fingerprint(args.base_model), data, args.seed,
                  run.execution.precision, *evaluated, script=__file__)
    validation = Validation(run.resume_dir, val if cfg.eval_every else [], eval_generation, None, metrics,
                            MetricContext(args.base_model, lengths.prompt, run.execution, policy), cfg, args.seed,
                            key=key, unit="epoch", total=cfg.epochs, step=lambda t: t.state.epoch)
    try:
        curve = run.train(trainer, key, cfg.epochs, "epoch", "warm start epochs", Tracking(args.tensorboard),
                          validate=validation if validation.enabled else None)
    except NonFiniteLossError as err:  # as rl_finetune ends on its NonFiniteError: one line, exit code 1
        raise SystemExit(err.stop_line(run.resume_dir))
    chosen = validation.selected()
    if not chosen:  # the last policy is handed on: never one whose last update diverged
        check_trained_policy(policy, [s.prompt for s in train], "warm_start", cfg.learning_rate)

    def write(folder: Path) -> None:
        if chosen:  # select: best: the kept policy of the epoch it chose (the last one when it fell back)
            shutil.copytree(validation.selected_model(), folder / MODEL_DIR)
        else:
            merged(model).save_pretrained(folder / MODEL_DIR)  # plain Hugging Face weights, LoRA folded in
            tokenizer.save_pretrained(folder / MODEL_DIR)
        validation.write(folder, f"warm start on {args.task_file.stem}, seed {args.seed}: val")
        write_csv(folder / "loss_curve.csv", curve)
        plots.learning_curves(curve, "epoch", plots.WARM_START_PANELS, folder / "loss_curve.png",
                              f"warm start on {args.task_file.stem}, seed {args.seed}")

    run.finish(write, {"lengths": to_dict(lengths), "supervised": to_dict(cfg), "seed": args.seed,
                       "precision": args.precision},
               {"datapool": args.datapool, "base_model": args.base_model}, replicas=lambda: [model],
               extra={"selected": chosen or {"select": "last", "epoch": cfg.epochs,
                                             "why": "select: last hands on the final policy"},
                      "prompts_cut": prompts_cut})


if __name__ == "__main__":
    stage.main_guard(main)
