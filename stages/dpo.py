"""Direct Preference Optimisation (or IPO) of a policy on a preference set, against a frozen reference."""

from pathlib import Path

from grueflow import stage
from grueflow.config import LengthsConfig, to_dict
from grueflow.io import MODEL_DIR, atomic_dir, write_csv, write_json
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.lora import merged, with_lora
from grueflow.models.policy import Policy
from grueflow.params import load_section
from grueflow.preference.config import DPOConfig
from grueflow.preference.data import read_preferences
from grueflow.preference.dpo import DPOTrainer
from grueflow.seeding import seed_everything

TASK_KEYS = ("lengths",)


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True, help="params/tasks/<task>.yaml (reads: lengths)")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/dpo.yaml")
    p.add_argument("--preferences", type=Path, required=True, help="a preference set (JSONL of {id, prompt, chosen, rejected})")
    p.add_argument("--init-model", type=Path, required=True,
                   help="start model (a Hugging Face folder: the base model or the warm start); also the frozen reference")
    p.add_argument("--seed", type=stage.seed, required=True)
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--out", type=Path, required=True, help="a folder: model/, curves.csv, train_metrics.json, stage.json")
    args = p.parse_args()
    started = stage.setup(args)
    lengths = load_section(LengthsConfig, args.task_file, "lengths")
    cfg: DPOConfig = load_section(DPOConfig, args.method_file)
    check_context(args.init_model, lengths.prompt, lengths.target, str(args.task_file), ("lengths.prompt", "lengths.target"))
    ex = stage.execution(args)
    prefs = read_preferences(args.preferences)

    seed_everything(args.seed, args.threads)
    backend = select(ex)
    model, tokenizer = load_pretrained(args.init_model, backend=backend)
    # LoRA: the reference is the adapter-free base
    ref_model = load_pretrained(args.init_model, backend=backend, frozen=True)[0] if cfg.lora is None else None
    if cfg.lora is not None:
        model = with_lora(model, cfg.lora)
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    trainer = DPOTrainer(policy, ref_model, prefs, cfg, lengths.target, args.seed)
    steps = cfg.epochs * -(-len(prefs) // cfg.batch_size)
    bar = stage.progress(steps, f"dpo ({cfg.loss_type}) steps")
    curve = trainer.train(progress=lambda _: bar.update())
    bar.close()
    final = trainer.evaluate(prefs)
    with atomic_dir(args.out) as tmp:
        merged(policy.model).save_pretrained(tmp / MODEL_DIR)  # plain Hugging Face weights, LoRA folded in
        tokenizer.save_pretrained(tmp / MODEL_DIR)
        write_csv(tmp / "curves.csv", curve)
        write_json(tmp / "train_metrics.json", {k: round(v, 6) for k, v in final.items()})
        stage.finish(tmp, "dpo", {"dpo": to_dict(cfg), "lengths": to_dict(lengths), "seed": args.seed,
                                  "precision": args.precision},
                     {"preferences": args.preferences, "init_model": args.init_model}, started, execution=ex.record())


if __name__ == "__main__":
    stage.main_guard(main)
