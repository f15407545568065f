"""Fine-tune a sequence classifier on a task's labelled files (its `classifier:` key): a learned reward trained here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.checkpoints import run_key
from grueflow.classifier import (ClassifierTrainer, backbone_path, encode_examples, load_backbone, load_examples,
                                 needs_eos, save_classifier)
from grueflow.config import ClassifierConfig, to_dict
from grueflow.io import MODEL_DIR, digest_inputs, write_csv, write_json
from grueflow.params import load_section
from grueflow.training import TrainingRun, add_arguments, check_final

TASK_KEYS = ("classifier",)


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help=f"params/tasks/<task>.yaml (reads: {', '.join(TASK_KEYS)}; its data files are read from the "
                        "repository root)")
    add_arguments(p, "a folder: model/ (Hugging Face classifier and tokenizer), curves.csv, metrics.json, stage.json; "
                     "a checkpoint after every curve row")
    args = p.parse_args()
    started = stage.setup(args)
    cfg: ClassifierConfig = load_section(ClassifierConfig, args.task_file, "classifier")
    data = {"train_file": Path(cfg.train_file), **({"test_file": Path(cfg.test_file)} if cfg.test_file else {})}
    read = digest_inputs({name: path for name, path in data.items() if path.exists()})  # before they are read
    examples = load_examples(cfg)  # bad data fails here, before any model loads
    run = TrainingRun.start("train_classifier", args, started, cfg.seed)
    model, tokenizer = load_backbone(cfg.backbone, cfg.labels, run.execution, cfg.max_length)
    train, val, test = (encode_examples(tokenizer, part, cfg, needs_eos(model)) for part in examples)
    trainer = ClassifierTrainer(model, tokenizer, train, val, cfg, run.execution)
    backbone = Path(backbone_path(cfg.backbone))
    local = {**read, **digest_inputs({"backbone": backbone} if backbone.exists() else {})}  # a hub one: no digest
    key = run_key("train_classifier", to_dict(cfg), {name: d.sha256 for name, d in local.items()},
                  run.execution.precision, script=__file__)
    curve = run.train(trainer, key, len(trainer.row_steps), "step", "classifier curve rows")
    final = trainer.final_metrics(test)
    check_final(final, "train_classifier", cfg.learning_rate)

    def write(folder: Path) -> None:
        save_classifier(model, tokenizer, cfg, folder / MODEL_DIR)
        write_csv(folder / "curves.csv", curve)
        write_json(folder / "metrics.json", final)

    run.finish(write, {"classifier": to_dict(cfg), "precision": args.precision}, local)


if __name__ == "__main__":
    stage.main_guard(main)
