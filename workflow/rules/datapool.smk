rule prepare_datapool:
    input:
        code=code("stages/prepare_datapool.py", "grueflow/data"),
    output:
        directory("results/{task}/datapool"),
    params:
        slice=task_slice("datapool"),
        task_file=task_file,
    threads: job_threads("prepare_datapool", 1)
    resources:
        **RESOURCES.of("prepare_datapool"),
    log:
        "results/logs/{task}/prepare_datapool.log",
    shell:
        "python stages/prepare_datapool.py --task-file {params.task_file:q} --out {output:q} 2> {log:q}"
