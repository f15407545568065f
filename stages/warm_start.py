"""Stage 3: supervised warm start of the base model on the datapool's (prompt, reference) pairs."""

import logging
import shutil
from pathlib import Path

from grueflow import plots, stage
from grueflow.checkpoints import run_key
from grueflow.config import LengthsConfig, SupervisedConfig, to_dict
from grueflow.data import read_split
from grueflow.distributed import DataParallel, check_replicas
from grueflow.io import MODEL_DIR, atomic_dir, fingerprint, write_csv
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.lora import merged, with_lora
from grueflow.models.policy import Policy
from grueflow.params import load_method, load_section
from grueflow.seeding import seed_everything
from grueflow.supervised import SupervisedTrainer
from grueflow.tracking import RunTracker, tensorboard_dir

TASK_KEYS = ("lengths", "method_overrides")
log = logging.getLogger("warm_start")


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True, help="params/tasks/<task>.yaml (reads: lengths, method_overrides.supervised)")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/supervised.yaml")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--base-model", type=Path, required=True, help="a Hugging Face model folder")
    p.add_argument("--seed", type=stage.seed, required=True)
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--resume-dir", type=Path, required=True,
                   help="a checkpoint after every epoch (<out>.resume); resumed from if present, removed at the end")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tensorboard", type=Path, default=None,
                   help="also write TensorBoard event files here (default: $GRUEFLOW_TENSORBOARD/<task>/supervised/seed<k> if set)")
    args = p.parse_args()
    started = stage.setup(args)
    lengths: LengthsConfig = load_section(LengthsConfig, args.task_file, "lengths")
    cfg: SupervisedConfig = load_method("supervised", args.method_file, args.task_file)
    check_context(args.base_model, lengths.prompt, lengths.target, str(args.task_file),
                  ("lengths.prompt", "lengths.target"))
    stage.relaunch_data_parallel(cfg.processes, args.threads)  # processes > 1: N copies of this command
    ex = stage.execution(args)  # each data-parallel process on its own GPU
    parallel = DataParallel.from_env(ex.device)
    train, val = read_split(args.datapool, "train"), read_split(args.datapool, "val")
    seed_everything(args.seed, parallel.threads(args.threads))  # the job's cores, shared
    backend = select(ex)
    model, tokenizer = load_pretrained(args.base_model, backend=backend)
    if cfg.lora is not None:
        model = with_lora(model, cfg.lora)
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    trainer = SupervisedTrainer(policy, train, val, cfg, lengths.target, args.seed, parallel)
    data = [fingerprint(args.datapool / f"{split}.jsonl") for split in ("train", "val")]
    key = run_key(to_dict(lengths), to_dict(cfg), fingerprint(args.base_model), data, args.seed)
    resumed = trainer.resume(args.resume_dir, key)
    if resumed is not None:
        log.info("resumed from %s at epoch %d", resumed, trainer.state.epoch)
    bar = stage.progress(cfg.epochs, "warm start epochs", initial=trainer.state.epoch)
    # DVCLive logs into the resume folder while training; a resumed run replays its checkpoint's curve first
    # (the main process's alone when data-parallel: the others train the same replica)
    tracker = (RunTracker(args.resume_dir / "dvclive", "epoch", tensorboard=tensorboard_dir(args.out, args.tensorboard))
               if parallel.is_main else None)
    if tracker is not None:
        tracker.replay(trainer.state.curve)

    def report(row: dict[str, float]) -> None:
        bar.update()
        if tracker is not None:
            tracker.log(row)

    checkpoint = (lambda t: t.save_checkpoint(args.resume_dir, key)) if parallel.is_main else None
    curve = trainer.train(checkpoint=checkpoint, progress=report)
    bar.close()
    if tracker is not None:
        tracker.close()
    extra = {}
    if parallel.enabled:  # every process's weights hash: identical, or an error; only the main process writes
        extra = {"data_parallel": {"processes": parallel.world_size, "weights_sha256": check_replicas(parallel, [model])}}
        if not parallel.is_main:
            return
    with atomic_dir(args.out) as tmp:
        merged(model).save_pretrained(tmp / MODEL_DIR)  # plain Hugging Face weights, LoRA folded in
        tokenizer.save_pretrained(tmp / MODEL_DIR)
        write_csv(tmp / "loss_curve.csv", curve)
        shutil.copytree(args.resume_dir / "dvclive", tmp / "dvclive")
        plots.learning_curves(curve, "epoch", plots.WARM_START_PANELS, tmp / "loss_curve.png",
                              f"warm start on {args.task_file.stem}, seed {args.seed}")
        stage.finish(tmp, "warm_start", {"lengths": to_dict(lengths), "supervised": to_dict(cfg), "seed": args.seed,
                                         "precision": args.precision},
                     {"datapool": args.datapool, "base_model": args.base_model}, started, execution=ex.record(),
                     **extra)
    shutil.rmtree(args.resume_dir, ignore_errors=True)


if __name__ == "__main__":
    stage.main_guard(main)
