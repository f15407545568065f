rule aggregate:
    input:
        runs=expand("results/eval/{task}/{method}/seed{seed}", task=TASKS, method=METHODS, seed=SEEDS),
        code=code("stages/aggregate.py", "grueflow/grue.py"),
    output:
        csv="results/grue_table.csv",
        md="results/grue_table.md",
        json="results/grue_table.json",
    params:
        grid=f"--tasks {' '.join(TASKS)} --algorithms {' '.join(ALGORITHMS)} --seeds {' '.join(map(str, SEEDS))}",
    log:
        "results/logs/aggregate.log",
    shell:
        "python stages/aggregate.py --eval-dir results/eval {params.grid}"
        " --out-csv {output.csv} --out-md {output.md} --out-json {output.json} > {log} 2>&1"
