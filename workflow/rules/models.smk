rule base_model:
    input:
        datapool=output_of("prepare_datapool"),
        code=code("base_model"),
    output:
        directory(output_of("base_model")),
    params:
        stale=stale_params("base_model"),
        slice=task_slice("base_model"),
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


WARM_START_METHOD = stage_method("warm_start")


rule warm_start:
    input:
        datapool=output_of("prepare_datapool"),
        base_model=output_of("base_model"),
        code=code("warm_start"),
        plugins=plugin_code("warm_start"),
    output:
        report(directory(output_of("warm_start")), patterns=["{name}.png"],
               caption="../report/loss_curve.rst", category="Learning curves", subcategory="{task}",
               labels={"method": "supervised", "seed": "{seed}"}),
    params:
        stale=stale_params("warm_start"),
        precision=PRECISION,
        slice=task_slice("warm_start"),
        method=method_params(WARM_START_METHOD),
        overrides=method_overrides(WARM_START_METHOD),
        method_file=method_path(WARM_START_METHOD),
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
