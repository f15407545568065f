rule aggregate:
    input:
        runs=expand("results/eval/{task}/{method}/seed{seed}", task=TASKS, method=METHODS, seed=SEEDS),
        code=code("stages/aggregate.py", "grueflow/grue.py"),
    output:
        csv="results/grue_table.csv",
        md="results/grue_table.md",
        json="results/grue_table.json",
    params:
        grid=["--tasks", *TASKS, "--algorithms", *ALGORITHMS, "--seeds", *map(str, SEEDS),
              "--rl-starts", *SUITE.config.rl_starts, "--preference-methods", *PREFERENCE_METHODS],  # each word quoted
    threads: job_threads("aggregate", 1)
    resources:
        **RESOURCES.of("aggregate"),
    log:
        "results/logs/aggregate.log",
    shell:
        "python stages/aggregate.py --eval-dir results/eval {params.grid:q}"
        " --out-csv {output.csv:q} --out-md {output.md:q} --out-json {output.json:q} > {log:q} 2>&1"
