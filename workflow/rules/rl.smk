def rl_algorithm(w):
    return w.rl_method.removeprefix("supervised+")


def rl_init(w):
    """RL from the base model (zero-shot start) or from the warm start (supervised + RL)."""
    if w.rl_method.startswith("supervised+"):
        return f"results/{w.task}/supervised/seed{w.seed}"
    return f"results/{w.task}/base_model"


rule rl_finetune:
    input:
        datapool="results/{task}/datapool",
        init=rl_init,
        base_model="results/{task}/base_model",
        reward_models=reward_models,
        code=code("stages/rl_finetune.py", "grueflow/models", "grueflow/rl", "grueflow/metrics", "grueflow/data",
                  "grueflow/checkpoints.py", "grueflow/tracking.py", "grueflow/plots.py"),
    output:
        report(directory("results/{task}/{rl_method}/seed{seed}"), patterns=["{name}.png"], caption="../report/curves.rst",
               category="Learning curves", subcategory="{task}", labels={"method": "{rl_method}", "seed": "{seed}"}),
    params:
        precision=PRECISION,
        slice=task_slice("lengths", "rollout_generation", "reward"),
        method=lambda w: read_yaml(method_file(rl_algorithm(w))),
        overrides=method_overrides(rl_algorithm),
        method_file=lambda w: method_file(rl_algorithm(w)),
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
        " --method-file {params.method_file:q} --datapool {input.datapool:q} --init-model {input.init:q}/model"
        " --base-model {input.base_model:q}/model --seed {wildcards.seed} --threads {threads}"
        " --resume-dir {output:q}.resume --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"
