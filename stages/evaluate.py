"""Stage 5: generate on the test split with the eval settings; write predictions.jsonl and metrics.json."""

from pathlib import Path
from typing import get_args

from grueflow import evaluation, stage
from grueflow.config import (GenerationConfig, LengthsConfig, MetricSpec, RLStart, RewardConfig, load_section,
                             method_name, parse, read_yaml, to_dict)
from grueflow.data import read_split
from grueflow.io import atomic_dir, write_json, write_jsonl
from grueflow.metrics import MetricContext
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.seeding import seed_everything

TASK_KEYS = ("lengths", "eval_generation", "reward", "metrics", "headline_metrics")
FLUENCY = MetricSpec("perplexity")


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help=f"params/tasks/<task>.yaml (reads: {', '.join(TASK_KEYS)})")
    p.add_argument("--task", required=True, help="the task's name in the table")
    p.add_argument("--start", required=True, choices=get_args(RLStart), help="zero_shot or supervised")
    p.add_argument("--algorithm", default=None, help="the RL algorithm, if the model is an RL output")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True, help="the model to evaluate")
    p.add_argument("--base-model", type=Path, required=True, help="the task's base model (fluency perplexity)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    started = stage.setup(args)
    lengths = load_section(LengthsConfig, args.task_file, "lengths")
    generation = load_section(GenerationConfig, args.task_file, "eval_generation")
    reward_cfg = load_section(RewardConfig, args.task_file, "reward")
    raw = read_yaml(args.task_file)
    metrics = parse(tuple[MetricSpec, ...], raw.get("metrics"), f"{args.task_file}: metrics")
    headline = parse(tuple[str, ...], raw.get("headline_metrics"), f"{args.task_file}: headline_metrics")
    if all(m.id != FLUENCY.id for m in metrics):
        metrics = metrics + (FLUENCY,)
    unknown = sorted(set(headline) - evaluation.produced_keys(reward_cfg, metrics))
    if unknown:
        raise ValueError(f"{args.task_file}: headline_metrics {unknown} are not produced by the task's reward or metrics; "
                         f"produced: {', '.join(sorted(evaluation.produced_keys(reward_cfg, metrics)))}")
    test = read_split(args.datapool, "test")

    seed_everything(args.seed, args.threads)
    model, tokenizer = load_pretrained(args.model)
    policy = Policy(model, tokenizer, "seq2seq" if model.config.is_encoder_decoder else "causal", lengths.prompt)
    generations = evaluation.generate(policy, test, generation)
    rows, corpus, missing = evaluation.score(test, generations, reward_cfg, metrics,
                                             MetricContext(args.base_model, lengths.prompt))
    method = method_name(args.start, args.algorithm)
    with atomic_dir(args.out) as tmp:
        write_jsonl(tmp / "predictions.jsonl", rows)
        write_json(tmp / "metrics.json", {"task": args.task, "method": method, "seed": args.seed,
                                          "headline": list(headline), "metrics": corpus,
                                          "missing": missing})
        stage.finish(tmp, "evaluate", {"lengths": to_dict(lengths), "eval_generation": to_dict(generation),
                                       "reward": to_dict(reward_cfg), "metrics": to_dict(metrics), "seed": args.seed},
                     {"datapool": args.datapool, "model": args.model}, started)


if __name__ == "__main__":
    stage.main_guard(main)
