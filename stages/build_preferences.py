"""Preferences from a metric: sample completions of training prompts, prefer the higher-scoring one of each."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.config import LengthsConfig, RewardConfig, to_dict
from grueflow.data.sample import check_datapool, read_split
from grueflow.io import atomic_dir, write_json
from grueflow.metrics import MetricContext
from grueflow.metrics.reward import Reward
from grueflow.models import check_context, load_pretrained
from grueflow.models.backend import select
from grueflow.models.policy import Policy
from grueflow.params import load_section
from grueflow.preference.build import NonFiniteScoreError, build_preferences, choose_prompts, describe_counts
from grueflow.preference.config import PreferencesConfig
from grueflow.preference.data import PREFERENCES_FILE, write_preferences
from grueflow.seeding import seed_everything

TASK_KEYS = ("lengths", "reward")


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help="params/tasks/<task>.yaml (reads: lengths, reward; the reward only when the method file has none)")
    p.add_argument("--method-file", type=Path, required=True, help="params/methods/preferences.yaml")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--policy", type=Path, required=True, help="the model that writes the completions (a Hugging Face folder)")
    p.add_argument("--base-model", type=Path, required=True, help="the task's base model folder (for fluency rewards)")
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--out", type=Path, required=True, help=f"a folder: {PREFERENCES_FILE}, summary.json, stage.json")
    args = p.parse_args()
    started = stage.setup(args)
    read = stage.params_digest("build_preferences", args)  # before the params are read
    cfg: PreferencesConfig = load_section(PreferencesConfig, args.method_file, method="preferences")
    lengths = load_section(LengthsConfig, args.task_file, "lengths")
    reward_cfg = cfg.reward if cfg.reward is not None else load_section(RewardConfig, args.task_file, "reward")
    source = f"{args.method_file}: reward" if cfg.reward is not None else f"{args.task_file}: reward"
    check_context(args.policy, lengths.prompt, cfg.generation.max_new_tokens, f"{args.task_file} and {args.method_file}",
                  ("lengths.prompt", "generation.max_new_tokens"))
    ex = stage.execution(args)
    check_datapool(args.datapool, args.task_file)
    train = read_split(args.datapool, "train")

    seed_everything(cfg.seed, args.threads)
    backend = select(ex)
    model, tokenizer = load_pretrained(args.policy, backend=backend, frozen=True)  # it only samples
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    prompts_cut = policy.count_cut([s.prompt for s in choose_prompts(train, cfg.n_prompts, cfg.seed)], "train")
    reward = Reward(reward_cfg, MetricContext(base_model=args.base_model, max_prompt_length=lengths.prompt,
                                              execution=ex))
    bar = stage.progress(cfg.n_prompts or len(train), "prompts")
    try:
        prefs, counts = build_preferences(policy, train, reward, cfg, source, progress=bar.update)
    except NonFiniteScoreError as err:  # as rl_finetune ends on a non-finite reward: one line, exit code 1
        raise SystemExit(f"error: {err}")
    finally:
        bar.close()
    if not prefs:
        nan = ", and see why the metric scores NaN" if counts["nan_scored"] else ""
        raise SystemExit(f"error: no pair: {describe_counts(counts, cfg.min_margin)}; a pair needs two scored "
                         f"completions of a prompt whose scores differ by more than min_margin: lower min_margin or "
                         f"raise samples_per_prompt{nan}")
    with atomic_dir(args.out) as tmp:
        write_preferences(tmp / PREFERENCES_FILE, prefs)
        write_json(tmp / "summary.json", counts)
        stage.finish(tmp, "build_preferences", {"preferences": to_dict(cfg), "lengths": to_dict(lengths),
                                                "reward": to_dict(reward_cfg), "precision": args.precision},
                     {"datapool": args.datapool, "policy": args.policy}, started, read, execution=ex.record(),
                     prompts_cut=prompts_cut)


if __name__ == "__main__":
    stage.main_guard(main)
