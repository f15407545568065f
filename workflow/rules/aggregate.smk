rule aggregate:
    input:
        runs=expand("results/eval/{task}/{method}/seed{seed}", task=TASKS, method=METHODS, seed=SEEDS),
        code=code("stages/aggregate.py", "grueflow/grue.py", "grueflow/plots.py", "grueflow/report.py"),
    output:
        csv=report("results/grue_table.csv", caption="../report/grue_table_csv.rst", category="GRUE table"),
        md="results/grue_table.md",
        json="results/grue_table.json",
        html=report("results/grue_table.html", caption="../report/grue_table.rst", category="GRUE table"),
        chart=report("results/grue_chart.png", caption="../report/grue_chart.rst", category="GRUE table"),
        samples=report("results/samples.html", caption="../report/samples.rst", category="Sample generations"),
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
        " --out-csv {output.csv:q} --out-md {output.md:q} --out-json {output.json:q}"
        " --out-chart {output.chart:q} --out-html {output.html:q} --out-samples {output.samples:q} > {log:q} 2>&1"
