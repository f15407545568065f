def eval_model(w):
    if w.method == "zero_shot":
        return f"results/{w.task}/base_model"
    return f"results/{w.task}/{w.method}/seed{w.seed}"


def eval_identity(w):
    """--start/--algorithm flags that name the method in metrics.json (a list: each word is quoted)."""
    start = "supervised" if w.method.startswith("supervised") else "zero_shot"
    algorithm = w.method.removeprefix("supervised").removeprefix("+")
    return ["--start", start] + (["--algorithm", algorithm] if algorithm and algorithm != "zero_shot" else [])


rule evaluate:
    input:
        datapool="results/{task}/datapool",
        model=eval_model,
        base_model="results/{task}/base_model",
        reward_models=reward_models,
        code=code("stages/evaluate.py", "grueflow/models", "grueflow/metrics", "grueflow/evaluation.py", "grueflow/data"),
    output:
        directory("results/eval/{task}/{method}/seed{seed}"),
    params:
        precision=PRECISION,
        slice=task_slice("lengths", "eval_generation", "reward", "metrics", "headline_metrics"),
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
