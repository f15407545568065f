"""Train a Bradley–Terry reward model (a one-output sequence classifier) on a preference set."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from transformers import AutoConfig

from grueflow import stage
from grueflow.checkpoints import run_key
from grueflow.config import ConfigError, to_dict
from grueflow.human.results import check_imported_input
from grueflow.io import MODEL_DIR, fingerprint, write_csv, write_json
from grueflow.models import position_limit
from grueflow.params import load_section
from grueflow.preference.config import RewardModelConfig
from grueflow.preference.data import read_preferences, warn_test_pairs
from grueflow.preference.reward_model import RewardModelTrainer, load_backbone, save_reward_model
from grueflow.checkpoints import NonFiniteLossError
from grueflow.training import TrainingRun, add_arguments, check_final


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/reward_model.yaml")
    p.add_argument("--preferences", type=Path, required=True,
                   help="a preference set (JSONL of {id, prompt, chosen, rejected}): build_preferences' or the human import's")
    p.add_argument("--backbone", type=Path, required=True,
                   help="a Hugging Face model folder (causal LM, encoder or encoder-decoder), e.g. the base model")
    add_arguments(p, "a folder: model/, curves.csv, metrics.json, stage.json; a checkpoint after every epoch")
    args = p.parse_args()
    started = stage.setup(args)
    check_imported_input(args.preferences, "run stages/train_reward_model.py again")
    cfg: RewardModelConfig = load_section(RewardModelConfig, args.method_file, method="reward_model")
    backbone = args.backbone / "config.json"
    limit = position_limit(AutoConfig.from_pretrained(args.backbone, local_files_only=True)) \
        if backbone.is_file() else None  # a folder without one: load_backbone names it
    if limit is not None and cfg.max_length > limit[0]:
        raise ConfigError(f"{args.method_file}: max_length = {cfg.max_length} is above the {limit[0]} positions of "
                          f"backbone {args.backbone} (its {limit[1]}); lower it to at most {limit[0]}")
    run = TrainingRun.start("train_reward_model", args, started, cfg.seed)
    prefs = read_preferences(args.preferences)
    warn_test_pairs(prefs, args.preferences, "train_reward_model")
    model, tokenizer = load_backbone(args.backbone, run.execution)
    trainer = RewardModelTrainer(model, tokenizer, prefs, cfg, run.execution)
    key = run_key("train_reward_model", to_dict(cfg), fingerprint(args.backbone), fingerprint(args.preferences),
                  run.execution.precision, script=__file__)
    try:
        curve = run.train(trainer, key, cfg.epochs, "epoch", "reward model epochs")
    except NonFiniteLossError as err:  # as warm_start ends on it: one line, exit code 1
        raise SystemExit(err.stop_line(run.resume_dir))
    final = trainer.final_metrics()
    check_final(final, "train_reward_model", cfg.learning_rate)

    def write(folder: Path) -> None:
        save_reward_model(model, tokenizer, cfg, folder / MODEL_DIR)
        write_csv(folder / "curves.csv", curve)
        write_json(folder / "metrics.json", final)

    run.finish(write, {"reward_model": to_dict(cfg), "precision": args.precision},
               {"preferences": args.preferences, "backbone": args.backbone})


if __name__ == "__main__":
    stage.main_guard(main)
