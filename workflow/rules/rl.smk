def rl_algorithm(w):
    return w.rl_method.removeprefix("supervised+")


RL_METHOD = stage_method("rl_finetune", algorithm=rl_algorithm)  # params/methods/<algorithm>.yaml


def rl_start(w):
    """The run's start, as rl_finetune's --start takes it: zero_shot or supervised."""
    return "supervised" if w.rl_method.startswith("supervised+") else "zero_shot"


def rl_start_overrides(w):
    """RL from the warm start also reads method_overrides.supervised+<algorithm> (rerun trigger)."""
    if not w.rl_method.startswith("supervised+"):
        return None
    return (params_file(task_file(w)).get("method_overrides") or {}).get(w.rl_method)


def rl_init(w):
    """RL from the base model (zero-shot start) or from the warm start (supervised + RL)."""
    if w.rl_method.startswith("supervised+"):
        return f"results/{w.task}/supervised/seed{w.seed}"
    return f"results/{w.task}/base_model"


rule rl_finetune:
    input:
        datapool=output_of("prepare_datapool"),
        init=rl_init,
        base_model=output_of("base_model"),
        reward_models=reward_models,
        code=code("rl_finetune"),
        plugins=plugin_code("rl_finetune"),
    output:
        report(directory(output_of("rl_finetune")), patterns=["{name}.png"], caption="../report/curves.rst",
               category="Learning curves", subcategory="{task}", labels={"method": "{rl_method}", "seed": "{seed}"}),
    params:
        stale=stale_params("rl_finetune"),
        precision=PRECISION,
        slice=task_slice("rl_finetune"),
        method=method_params(RL_METHOD),
        overrides=method_overrides(RL_METHOD),
        start_overrides=rl_start_overrides,
        start=rl_start,
        method_file=method_path(RL_METHOD),
        algorithm=rl_algorithm,
        task_file=task_file,
    threads: job_threads("rl_finetune")
    resources:
        **RESOURCES.of("rl_finetune"),
        device=stage_device("rl_finetune"),
    log:
        "results/logs/{task}/{rl_method}/seed{seed}.log",
    shell:
        "python stages/rl_finetune.py --task-file {params.task_file:q} --algorithm {params.algorithm:q}"
        " --method-file {params.method_file:q} --start {params.start:q} --datapool {input.datapool:q}"
        " --init-model {input.init:q}/model"
        " --base-model {input.base_model:q}/model --seed {wildcards.seed} --threads {threads}"
        " --resume-dir {output:q}.resume --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"
