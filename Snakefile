# grueflow: the GRUE pipeline as cached stages.
#   snakemake --cores all results/grue_table.csv                      (the active suite: params/suite.yaml)
#   snakemake --cores all --configfile params/suites/micro.yaml       (another suite)
import os
import re
import signal
import sys

from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)  # this checkout's grueflow, never another's install
os.environ["GRUEFLOW_ENGINE"] = "snakemake"  # jobs note what they wrote (grueflow.io.note_written); they inherit it


# The suite is exactly one file: params/suite.yaml, or the --configfile(s) given, which replace it (Snakemake would
# merge them over a `configfile:` directive, so a key the chosen suite leaves out would come from params/suite.yaml
# instead of its default). --config key=value settings apply over either.
from grueflow.command_line import (check_config_given_once, check_configfiles, check_rerun_triggers,
                                   check_working_folder, command_line_resources, profile_files, suite_name)
from grueflow.config import ConfigError, read_yaml, yaml11_disagreement
from grueflow.io import shown


def check_suite_yaml(paths):
    """Read each suite file as grueflow reads params: Snakemake's YAML keeps the last of two equal keys, and where
    it cannot parse a file, or the file holds no mapping (it is empty, only comments, or a list), it says "not valid
    JSON or YAML" or "must be given as JSON or YAML with keys at top level" without the file or the cause. Snakemake
    reads it as YAML 1.1 and the DVC engine as YAML 1.2: a value the two read otherwise (1e5, no) is refused."""
    for path in paths:
        try:
            data = read_yaml(path)
        except ConfigError as err:
            raise WorkflowError(f"invalid params: {err}") from None
        if (disagreement := yaml11_disagreement(path, data)) is not None:
            raise WorkflowError(f"invalid params: {disagreement}")
        if not isinstance(data, dict):
            holds = ("is empty (nothing but blank lines or comments)" if data is None else
                     f"holds a {type(data).__name__}, {shown(data)}, not a mapping")
            raise WorkflowError(f"invalid params: {path} {holds}; a suite file maps its settings to values: tasks: "
                                f"[...], algorithms: [...], seeds: [...], ... (as the suites in params/suites/ do)")


if not workflow.overwrite_configfiles:
    try:  # snakemake -s ../Snakefile from a subfolder: one line naming both folders
        check_working_folder(workflow.basedir)
    except ConfigError as err:
        print(err, file=sys.stderr)
        raise SystemExit(1) from None
    check_suite_yaml(["params/suite.yaml"])  # before Snakemake parses it

    configfile: "params/suite.yaml"


report: "workflow/report/workflow.rst"  # snakemake --report report.html


try:  # a target after --configfile that Snakemake could read (a JSON table) reaches here as a suite file
    check_configfiles(workflow.overwrite_configfiles or [])
except ConfigError as err:
    raise WorkflowError(f"invalid params: {err}") from None
check_suite_yaml(workflow.configfiles)  # a --configfile is parsed by Snakemake's command line first
SUITE_NAME = suite_name(workflow.configfiles, workflow.config_settings.config)  # how a suite message names it


# A seed as a suite writes it: digits without leading zeros, so seed00 is never a second folder (and run) of seed 0;
# the seed wildcard's constraint (workflow/rules/common.smk).
SEED = r"0|[1-9][0-9]*"


def command_line_seeds(given):
    """``seeds`` given with ``--config`` as integers: Snakemake passes a list's items as strings ('seeds=[0,1]' gives
    ['0', '1']). Only items written as the suite writes a seed (digits, no leading zero) are taken; anything else
    (a bare number, '01', 'one') is refused with the spelling that works."""
    if isinstance(given, list) and all(isinstance(s, str) and re.fullmatch(SEED, s) for s in given):
        return [int(s) for s in given]
    raise WorkflowError(f"invalid params: --config seeds={given!r}: seeds is a list of integers written without "
                        f"leading zeros, e.g. --config 'seeds=[0,1]' (or list them in the suite file)")


if workflow.is_main_process:  # a job's own process runs the command line Snakemake wrote for it
    try:
        _profiles = profile_files(sys.argv[1:], os.environ, workflow.basedir)
        check_config_given_once(sys.argv[1:], _profiles)
    except ConfigError as err:
        raise WorkflowError(f"invalid params: {err}") from None
    try:  # before the stale check: a job it says reruns must rerun
        check_rerun_triggers(sys.argv[1:], _profiles)
    except ConfigError as err:
        raise WorkflowError(str(err)) from None
    if workflow.resource_settings.cores is not None and workflow.resource_settings.cores < 1:  # it would wait forever
        raise WorkflowError(f"--cores must be a positive integer or all, got {workflow.resource_settings.cores}")
if "seeds" in workflow.config_settings.config:  # --config seeds=...; a suite file's YAML keeps its integers
    config["seeds"] = command_line_seeds(config["seeds"])
if "resources" in workflow.config_settings.config and isinstance(config["resources"], dict):
    try:  # --config resources=...: Snakemake passes its numbers as strings
        config["resources"] = command_line_resources(config["resources"],
                                                     workflow.config_settings.config.get("resources"))
    except ConfigError as err:
        raise WorkflowError(f"invalid params: {err}") from None


def schema_problem(err):
    """The first error of the suite schema (the ValidationError Snakemake's ``validate`` raised its WorkflowError
    from) in one line: where in the suite, what it says, and the schema's file; not Snakemake's dump of the schema
    and the config."""
    found = err.__context__
    if found is None or not hasattr(found, "message"):
        return str(err).splitlines()[-1]
    where = ".".join(str(part) for part in found.absolute_path)
    return f"{where + ': ' if where else ''}{found.message} (workflow/schemas/suite.schema.yaml)"


# The library's own checks of the suite run first (grueflow.params.load_suite, in common.smk, as under DVC): each names
# the file, the key and what to write instead; the schema then checks what they passed, its error in one line too.
include: "workflow/rules/common.smk"


try:
    validate(config, "workflow/schemas/suite.schema.yaml")
except WorkflowError as err:
    raise WorkflowError(f"invalid params: {SUITE_NAME}: {schema_problem(err)}") from None


include: "workflow/rules/datapool.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/classifier.smk"  # a learned reward trained here: built when a task names it
include: "workflow/rules/rl.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/preference.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/human.smk"  # human evaluation: not part of rule all


if workflow.is_main_process:  # a stage folder deleted or damaged under finished readers: their jobs rerun
    import sys

    from grueflow.interrupt import exit_code
    from grueflow.io import DataError
    from grueflow.keep import interrupted_line
    from grueflow.stale import (TABLES, check_records_writable, keep_answered, mark_stale, restamp_set_back,
                                restamped_line, unusable_line)

    _keys = {key: [] for key in Path().glob(re.sub(r"\{\w+\}", "*", STAGES["export_human_pairwise"].outputs["key"]))
             if not key.name.startswith(".")}  # pairwise keys, checked against the digests their export recorded
    try:
        check_records_writable()  # where Snakemake and the stale check write on every run, a dry run's too
        # before any code digest is taken: a stage rerun for its code's bytes runs them, not its cached bytecode
        _lines = [restamped_line(restamp_set_back(code_files()))]
        _lines += keep_answered(Path("."), answered_batches())  # before anything is stamped
        _lines += mark_stale(Path("results"), Path(output_of("aggregate", "csv")),
                             [Path(p) for p in expand(output_of("evaluate"), task=TASKS, method=METHODS, seed=SEEDS)],
                             {**TABLES, **_keys}, folders=[Path(p) for p in stage_folders()],
                             params=stage_params(), load=params_unchanged, built_by=human_target,
                             read=named_inputs())
    except DataError as err:  # a copy of what a rebuild deletes could not be kept: nothing may run
        raise WorkflowError(str(err)) from None
    except OSError as err:  # a stamp or record it could not write (a read-only or full file system): nothing may run
        raise WorkflowError(unusable_line(err)) from None
    except KeyboardInterrupt as err:  # Ctrl-C (a long copy of a user's file): one line, not Snakemake's traceback
        print(interrupted_line(err), file=sys.stderr)
        raise SystemExit(exit_code(signal.SIGINT)) from None
    for _line in filter(None, _lines):
        print(_line, file=sys.stderr)


onstart:  # a real run, under Snakemake's lock, before its first job: its jobs refuse params edited since now
    from grueflow.interrupt import exit_code
    from grueflow.io import PLAN, DataError, write_planned
    from grueflow.keep import interrupted_line
    from grueflow.stale import keep_reexported, refuse_touch, refuse_undeletable

    try:  # --touch rewrites Snakemake's record of each job's params without running it: never over other params or data
        if workflow.touch:
            _touched = [Path(out) for job in workflow.dag.needrun_jobs() for out in job.output]
            refuse_touch(_touched, stage_params(), params_unchanged)
            from grueflow.stage import restamp_code  # the code check agrees with the touch once .snakemake is gone

            restamp_code([path for path in _touched if path.is_dir()])
    except DataError as err:
        raise WorkflowError(str(err)) from None
    try:  # Snakemake deletes a job's outputs as it starts it: a batch exported again is copied first
        for _line in keep_reexported(Path("."), reexported_batches(workflow.dag.needrun_jobs())):
            print(_line, file=sys.stderr)
        # an output or log file it cannot delete would stop the run half done, in Snakemake's traceback
        refuse_undeletable([Path(out) for job in workflow.dag.needrun_jobs() for out in (*job.output, *job.log)])
    except DataError as err:  # a copy could not be kept, or an output cannot be deleted: no job may run
        raise WorkflowError(str(err)) from None
    except KeyboardInterrupt as err:  # Ctrl-C before the first job: one line; Snakemake removes its lock on the way
        print(interrupted_line(err), file=sys.stderr)
        raise SystemExit(exit_code(signal.SIGINT)) from None
    os.environ[PLAN] = write_planned(planned_params())


rule all:
    input:
        "results/grue_table.csv",
        PREFERENCE_TARGETS,
