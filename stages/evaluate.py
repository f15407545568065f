"""Stage 5: generate on the test split with the eval settings; write predictions.jsonl and metrics.json."""

import logging
import sys
from pathlib import Path
from typing import get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import evaluation, stage
from grueflow.config import (TRAIN_KL_KEY, ConfigError, GenerationConfig, LengthsConfig, MetricSpec, RLStart,
                             RewardConfig, method_name, read_yaml, to_dict)
from grueflow.data.sample import check_datapool, read_split
from grueflow.io import atomic_dir, read_json, write_json, write_jsonl
from grueflow.metrics import MetricContext
from grueflow.models import check_context, check_same_kind, load_pretrained
from grueflow.models.backend import select
from grueflow.models.policy import Policy
from grueflow.rl.nlpo import DECODING_DIR, evaluation_processor, masks_for
from grueflow.params import (check_headlines, check_metric_keys, load_section, load_task_section, parse, task_key_name,
                             with_fluency)
from grueflow.preference.config import PREFERENCE_METHODS
from grueflow.rl import ALGORITHMS
from grueflow.seeding import rng_state, seed_everything, set_rng_state

log = logging.getLogger("evaluate")

TASK_KEYS = ("lengths", "eval_generation", "reward", "metrics", "headline_metrics", "method_overrides")


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True,
                   help=f"params/tasks/<task>.yaml (reads: {', '.join(TASK_KEYS)})")
    p.add_argument("--task", required=True, help="the task's name in the table")
    p.add_argument("--start", required=True, choices=get_args(RLStart), help="zero_shot or supervised")
    p.add_argument("--algorithm", default=None, choices=(*ALGORITHMS.names(), *PREFERENCE_METHODS),
                   help="the RL algorithm or preference method that trained the model, if any")
    p.add_argument("--datapool", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True, help="the model to evaluate")
    p.add_argument("--base-model", type=Path, required=True, help="the task's base model (fluency perplexity)")
    p.add_argument("--seed", type=stage.seed, required=True)
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    started = stage.setup(args)
    read = stage.params_digest("evaluate", args)  # before the params are read
    if args.task != args.task_file.stem:  # both engines run params/tasks/<task>.yaml as <task>
        log.warning("--task %s labels these scores, but --task-file %s is task %s's by its name: the table would "
                    "show them as %s's", args.task, args.task_file, args.task_file.stem, args.task)
    # the method's lengths and generation (its method_overrides); the reward is the task's own, so that the
    # table's reward column scores every method alike
    method = args.algorithm or ("supervised" if args.start == "supervised" else None)
    lengths = load_task_section(LengthsConfig, args.task_file, "lengths", method, args.start)
    generation = load_task_section(GenerationConfig, args.task_file, "eval_generation", method, args.start)
    reward_cfg = load_section(RewardConfig, args.task_file, "reward")
    raw = read_yaml(args.task_file)
    metrics = parse(tuple[MetricSpec, ...], raw.get("metrics"), f"{args.task_file}: metrics")
    headline = parse(tuple[str, ...], raw.get("headline_metrics"), f"{args.task_file}: headline_metrics")
    try:
        check_metric_keys(reward_cfg, metrics)
        check_headlines(headline, reward_cfg, metrics)
    except ValueError as err:
        raise ConfigError(f"{args.task_file}: {err}") from None
    metrics = with_fluency(metrics)
    check_context(args.model, lengths.prompt, generation.max_new_tokens, str(args.task_file),
                  tuple(task_key_name(args.task_file, key, field, method, args.start)
                        for key, field in (("lengths", "prompt"), ("eval_generation", "max_new_tokens"))))
    check_same_kind(args.model, args.base_model)
    # an NLPO output: RL4LMs evaluates with its action masks; --algorithm nlpo requires them
    masks = masks_for(args.model, nlpo=args.algorithm == "nlpo")
    ex = stage.execution(args)
    check_datapool(args.datapool, args.task_file)
    test = read_split(args.datapool, "test")

    seed_everything(args.seed, args.threads)
    backend = select(ex)
    model, tokenizer = load_pretrained(args.model, backend=backend, frozen=True)
    policy = Policy(model, tokenizer, lengths.prompt, backend)
    prompts_cut = policy.count_cut([s.prompt for s in test], "test",
                                   task_key_name(args.task_file, "lengths", "prompt", method, args.start))
    processor = (evaluation_processor(args.model.parent, policy, generation)
                 if masks and masks["eval_with_masks"] else None)
    # the reward and metrics load first and check the test split's meta, so a bad argument, model or sample stops
    # the stage before generating; the RNGs are restored after, so the generations are those of the seed alone
    state = rng_state()
    scorer = evaluation.Scorer(reward_cfg, metrics, MetricContext(args.base_model, lengths.prompt, ex, policy)
                               ).check(test)
    set_rng_state(state)
    bar = stage.progress(len(test), "generating")
    tokens: list[list[str]] = []  # each completion's tokens: a dense reward's inputs
    generations = evaluation.generate(policy, test, generation, progress=bar.update, processor=processor,
                                      tokens=tokens)
    bar.close()
    bar = stage.progress(1 + len(metrics), "scoring (reward, then each metric)")
    rows, corpus, missing = scorer(test, generations, progress=bar.update, tokens=tokens)
    bar.close()
    corpus, missing = evaluation.missing_references(test, metrics, corpus, missing)
    missing = evaluation.undefined_scores(metrics, corpus, missing)
    trained = args.model.parent / "train_metrics.json"  # an RL stage's folder: <out>/model beside it
    if args.algorithm and trained.is_file() and "kl/sequence" in (final := read_json(trained)):
        corpus[TRAIN_KL_KEY] = final["kl/sequence"]
    method = method_name(args.start, args.algorithm)
    with atomic_dir(args.out) as tmp:
        write_jsonl(tmp / "predictions.jsonl", rows)
        write_json(tmp / "metrics.json", {"task": args.task, "method": method, "seed": args.seed,
                                          "headline": list(headline), "metrics": corpus, "missing": missing,
                                          **({"nlpo_masks": masks["eval_with_masks"]} if masks else {})})
        stage.finish(tmp, "evaluate", {"lengths": to_dict(lengths), "eval_generation": to_dict(generation),
                                       "reward": to_dict(reward_cfg), "metrics": to_dict(metrics), "seed": args.seed,
                                       "precision": args.precision},
                     {"datapool": args.datapool, "model": args.model,
                      **({"decoding": args.model.parent / DECODING_DIR} if masks else {})},
                     started, read, execution=ex.record(), prompts_cut=prompts_cut)


if __name__ == "__main__":
    stage.main_guard(main)
