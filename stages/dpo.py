"""Direct Preference Optimisation (or IPO) of a policy on a preference set, against a frozen reference."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.checkpoints import complete, run_key
from grueflow.config import LengthsConfig, to_dict
from grueflow.human.results import check_imported_input
from grueflow.io import MODEL_DIR, fingerprint, rounded, write_csv, write_json
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.lora import merged, with_lora
from grueflow.models.policy import Policy
from grueflow.params import load_section
from grueflow.preference.config import PREFERENCE_METHODS, DPOConfig
from grueflow.preference.data import read_preferences, warn_test_pairs
from grueflow.preference.dpo import CHECKPOINT_UNIT, DPOTrainer, NonFiniteLossError
from grueflow.training import TrainingRun, add_arguments, check_final, check_trained_policy

TASK_KEYS = ("lengths",)


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True, help="params/tasks/<task>.yaml (reads: lengths)")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/dpo.yaml")
    p.add_argument("--preferences", type=Path, required=True, help="a preference set (JSONL of {id, prompt, chosen, rejected})")
    p.add_argument("--init-model", type=Path, required=True,
                   help="start model (a Hugging Face folder: the base model or the warm start); also the frozen reference")
    p.add_argument("--seed", type=stage.seed, required=True)
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="also checkpoint every this many steps (default 0: after each epoch only); when, never what, "
                        "is computed, so not a param")
    add_arguments(p, "a folder: model/, curves.csv, train_metrics.json, stage.json")
    args = p.parse_args()
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every {args.checkpoint_every} is negative; give a step count >= 0 (0: each epoch's end)")
    started = stage.setup(args)
    check_imported_input(args.preferences, "run stages/dpo.py again")
    lengths = load_section(LengthsConfig, args.task_file, "lengths")
    cfg: DPOConfig = load_section(DPOConfig, args.method_file, method=PREFERENCE_METHODS)
    check_context(args.init_model, lengths.prompt, lengths.target, str(args.task_file), ("lengths.prompt", "lengths.target"))
    run = TrainingRun.start("dpo", args, started, args.seed)
    prefs = read_preferences(args.preferences)
    warn_test_pairs(prefs, args.preferences, "dpo")
    backend = select(run.execution)
    model, tokenizer = load_pretrained(args.init_model, backend=backend)
    # LoRA: the reference is the adapter-free base
    ref_model = load_pretrained(args.init_model, backend=backend, frozen=True)[0] if cfg.lora is None else None
    if cfg.lora is not None:
        model = with_lora(model, cfg.lora)
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    prompts_cut = policy.count_cut(list(dict.fromkeys(p.prompt for p in prefs)), "preference")
    trainer = DPOTrainer(policy, ref_model, prefs, cfg, lengths.target, args.seed, args.checkpoint_every)
    key = run_key("dpo", to_dict(lengths), to_dict(cfg), fingerprint(args.init_model), fingerprint(args.preferences),
                  args.seed, run.execution.precision, script=__file__)
    try:
        curve = run.train(trainer, key, trainer.total_steps, CHECKPOINT_UNIT, f"dpo ({cfg.loss_type}) steps")
    except NonFiniteLossError as err:  # as warm_start and rl_finetune end on theirs: one line, exit code 1
        kept = [c.step for c in complete(run.resume_dir, CHECKPOINT_UNIT) if c.key == key]
        where = f"the checkpoint of step {kept[-1]} stays in" if kept else "nothing was checkpointed in"
        raise SystemExit(f"error: {err}; {where} {run.resume_dir}")
    final = trainer.evaluate(prefs)
    check_final(final, "dpo", cfg.learning_rate)
    check_trained_policy(policy, [p.prompt for p in prefs], "dpo", cfg.learning_rate)

    def write(folder: Path) -> None:
        merged(policy.model).save_pretrained(folder / MODEL_DIR)  # plain Hugging Face weights, LoRA folded in
        tokenizer.save_pretrained(folder / MODEL_DIR)
        write_csv(folder / "curves.csv", curve)
        write_json(folder / "train_metrics.json", {k: rounded(v) for k, v in final.items()})

    run.finish(write, {"dpo": to_dict(cfg), "lengths": to_dict(lengths), "seed": args.seed, "precision": args.precision},
               {"preferences": args.preferences, "init_model": args.init_model}, extra={"prompts_cut": prompts_cut})


if __name__ == "__main__":
    stage.main_guard(main)
