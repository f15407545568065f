def eval_model(w):
    if w.method == "zero_shot":
        return f"results/{w.task}/base_model"
    return f"results/{w.task}/{w.method}/seed{w.seed}"


def eval_identity(w):
    """--start/--algorithm flags that name the method in metrics.json (a list: each word is quoted)."""
    start = "supervised" if w.method.startswith("supervised") else "zero_shot"
    algorithm = w.method.removeprefix("supervised").removeprefix("+")
    return ["--start", start] + (["--algorithm", algorithm] if algorithm and algorithm != "zero_shot" else [])


def eval_layers(w):
    """The method_overrides entries the evaluated method reads, whose lengths and eval_generation may be laid
    over the task's (grueflow.pipeline.method_layers): none for the zero-shot model."""
    return method_layers(w.method)


rule evaluate:
    input:
        datapool=output_of("prepare_datapool"),
        model=eval_model,
        base_model=output_of("base_model"),
        reward_models=reward_models,
        code=code("evaluate"),
        plugins=plugin_code("evaluate"),
    output:
        directory(output_of("evaluate")),
    params:
        stale=stale_params("evaluate"),
        precision=PRECISION,
        slice=task_slice("evaluate"),
        overrides=method_overrides(eval_layers),
        identity=eval_identity,
        task_file=task_file,
    threads: job_threads("evaluate")
    resources:
        **RESOURCES.of("evaluate"),
        device=stage_device("evaluate"),
    log:
        "results/logs/eval/{task}/{method}/seed{seed}.log",
    shell:
        "python stages/evaluate.py --task-file {params.task_file:q} --task {wildcards.task:q} {params.identity:q}"
        " --datapool {input.datapool:q} --model {input.model:q}/model --base-model {input.base_model:q}/model"
        " --seed {wildcards.seed} --threads {threads} --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"
