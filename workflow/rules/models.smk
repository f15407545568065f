rule base_model:
    input:
        datapool="results/{task}/datapool",
        code=code("stages/base_model.py", "grueflow/models"),
    output:
        directory("results/{task}/base_model"),
    params:
        slice=task_slice("model"),
        task_file=task_file,
    threads: job_threads("base_model")
    resources:
        **RESOURCES.of("base_model"),
        device=stage_device("base_model"),
    log:
        "results/logs/{task}/base_model.log",
    shell:
        "python stages/base_model.py --task-file {params.task_file:q} --datapool {input.datapool:q}"
        " --threads {threads} --out {output:q} --device {resources.device:q} 2> {log:q}"


rule warm_start:
    input:
        datapool="results/{task}/datapool",
        base_model="results/{task}/base_model",
        code=code("stages/warm_start.py", "grueflow/models", "grueflow/supervised.py", "grueflow/checkpoints.py",
                  "grueflow/data", "grueflow/tracking.py", "grueflow/plots.py"),
    output:
        report(directory("results/{task}/supervised/seed{seed}"), patterns=["{name}.png"],
               caption="../report/loss_curve.rst", category="Learning curves", subcategory="{task}",
               labels={"method": "supervised", "seed": "{seed}"}),
    params:
        precision=PRECISION,
        slice=task_slice("lengths"),
        method=lambda w: read_yaml(method_file("supervised")),
        overrides=method_overrides("supervised"),
        method_file=method_file("supervised"),
        task_file=task_file,
    threads: job_threads("warm_start")
    resources:
        **RESOURCES.of("warm_start"),
        device=stage_device("warm_start"),
    log:
        "results/logs/{task}/supervised/seed{seed}.log",
    shell:
        "python stages/warm_start.py --task-file {params.task_file:q} --method-file {params.method_file:q}"
        " --datapool {input.datapool:q} --base-model {input.base_model:q}/model --seed {wildcards.seed}"
        " --threads {threads} --resume-dir {output:q}.resume --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"
