rule prepare_datapool:
    input:
        code=code("prepare_datapool"),
        plugins=plugin_code("prepare_datapool"),
        data=datapool_data,
    output:
        directory(output_of("prepare_datapool")),
    params:
        stale=stale_params("prepare_datapool"),
        slice=task_slice("prepare_datapool"),
        task_file=task_file,
    threads: job_threads("prepare_datapool", 1)
    resources:
        **RESOURCES.of("prepare_datapool"),
    log:
        "results/logs/{task}/prepare_datapool.log",
    shell:
        "python stages/prepare_datapool.py --task-file {params.task_file:q} --out {output:q} 2> {log:q}"
