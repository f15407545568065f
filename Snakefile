# grueflow: the GRUE pipeline as cached stages.
#   snakemake --cores all results/grue_table.csv                      (the active suite: params/suite.yaml)
#   snakemake --cores all --configfile params/suites/micro.yaml       (another suite)
from snakemake.utils import validate


configfile: "params/suite.yaml"


report: "workflow/report/workflow.rst"  # snakemake --report report.html (issue 8)


from grueflow.config import ConfigError, read_yaml

for _configfile in workflow.configfiles:  # Snakemake's YAML keeps the last of two equal keys; read_yaml refuses them
    try:
        read_yaml(_configfile)
    except ConfigError as err:
        raise WorkflowError(f"invalid params: {err}") from None


validate(config, "workflow/schemas/suite.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/datapool.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/classifier.smk"  # a learned reward trained here: built when a task names it
include: "workflow/rules/rl.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/preference.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/human.smk"  # human evaluation (issue 7): not part of rule all


if workflow.is_main_process:  # a stage folder deleted or damaged under finished readers: their jobs rerun
    import sys

    from grueflow.stale import mark_stale

    for _line in mark_stale(Path("results"), Path(output_of("aggregate", "csv")),
                            [Path(p) for p in expand(output_of("evaluate"), task=TASKS, method=METHODS, seed=SEEDS)]):
        print(_line, file=sys.stderr)


rule all:
    input:
        "results/grue_table.csv",
        PREFERENCE_TARGETS,
