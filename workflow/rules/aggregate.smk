rule aggregate:
    input:
        runs=expand("results/eval/{task}/{method}/seed{seed}", task=TASKS, method=METHODS, seed=SEEDS),
        code=code("aggregate"),
    output:
        csv=report(output_of("aggregate", "csv"), caption="../report/grue_table_csv.rst", category="GRUE table"),
        md=output_of("aggregate", "md"),
        json=output_of("aggregate", "json"),
        html=report(output_of("aggregate", "html"), caption="../report/grue_table.rst", category="GRUE table"),
        chart=report(output_of("aggregate", "chart"), caption="../report/grue_chart.rst", category="GRUE table"),
        samples=report(output_of("aggregate", "samples"), caption="../report/samples.rst",
                       category="Sample generations"),
    params:
        stale=stale_params("aggregate"),
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
