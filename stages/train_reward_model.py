"""Train a Bradley–Terry reward model (a one-output sequence classifier) on a preference set."""

from pathlib import Path

from grueflow import stage
from grueflow.config import to_dict
from grueflow.io import MODEL_DIR, atomic_dir, write_csv, write_json
from grueflow.params import load_section
from grueflow.preference.config import RewardModelConfig
from grueflow.preference.data import read_preferences
from grueflow.preference.reward_model import load_backbone, save_reward_model, train_reward_model
from grueflow.seeding import seed_everything


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/reward_model.yaml")
    p.add_argument("--preferences", type=Path, required=True,
                   help="a preference set (JSONL of {id, prompt, chosen, rejected}): build_preferences' or the human import's")
    p.add_argument("--backbone", type=Path, required=True,
                   help="a Hugging Face model folder (causal LM, encoder or encoder-decoder), e.g. the base model")
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--out", type=Path, required=True, help="a folder: model/, curves.csv, metrics.json, stage.json")
    args = p.parse_args()
    started = stage.setup(args)
    cfg: RewardModelConfig = load_section(RewardModelConfig, args.method_file)
    ex = stage.execution(args)
    prefs = read_preferences(args.preferences)

    seed_everything(cfg.seed, args.threads)
    model, tokenizer = load_backbone(args.backbone, ex)
    bar = stage.progress(cfg.epochs, "reward model epochs")
    curve, final = train_reward_model(model, tokenizer, prefs, cfg, progress=lambda _: bar.update(), execution=ex)
    bar.close()
    with atomic_dir(args.out) as tmp:
        save_reward_model(model, tokenizer, cfg, tmp / MODEL_DIR)
        write_csv(tmp / "curves.csv", curve)
        write_json(tmp / "metrics.json", final)
        stage.finish(tmp, "train_reward_model", {"reward_model": to_dict(cfg), "precision": args.precision},
                     {"preferences": args.preferences, "backbone": args.backbone}, started, execution=ex.record())


if __name__ == "__main__":
    stage.main_guard(main)
