# grueflow: the GRUE pipeline as cached stages.
#   snakemake --cores all results/grue_table.csv                      (the active suite: params/suite.yaml)
#   snakemake --cores all --configfile params/suites/micro.yaml       (another suite)
import json
import os
import re
import sys
from pathlib import Path

from snakemake.cli import get_profile_dir  # the profile lookup of Snakemake's own command line
from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)  # this checkout's grueflow, never another's install


# The suite is exactly one file: params/suite.yaml, or the --configfile(s) given, which replace it (Snakemake would
# merge them over a `configfile:` directive, so a key the chosen suite leaves out would come from params/suite.yaml
# instead of its default). --config key=value settings apply over either.
from grueflow.config import ConfigError, read_yaml


def check_suite_yaml(paths):
    """Read each suite file as grueflow reads params: Snakemake's YAML keeps the last of two equal keys, and where
    it cannot parse a file, or the file holds no mapping (it is empty, only comments, or a list), it says "not valid
    JSON or YAML" or "must be given as JSON or YAML with keys at top level" without the file or the cause."""
    for path in paths:
        try:
            data = read_yaml(path)
        except ConfigError as err:
            raise WorkflowError(f"invalid params: {err}") from None
        if not isinstance(data, dict):
            shown = repr(data) if len(repr(data)) <= 60 else repr(data)[:57] + "..."
            holds = ("is empty (nothing but blank lines or comments)" if data is None else
                     f"holds a {type(data).__name__}, {shown}, not a mapping")
            raise WorkflowError(f"invalid params: {path} {holds}; a suite file maps its settings to values: tasks: "
                                f"[...], algorithms: [...], seeds: [...], ... (as the suites in params/suites/ do)")


if not workflow.overwrite_configfiles:
    check_suite_yaml(["params/suite.yaml"])  # before Snakemake parses it

    configfile: "params/suite.yaml"


report: "workflow/report/workflow.rst"  # snakemake --report report.html (issue 8)


check_suite_yaml(workflow.configfiles)  # a --configfile is parsed by Snakemake's command line first


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


def option_values(argv, option):
    """The values ``argv`` gives ``option`` (``option VALUE`` or ``option=VALUE``), in order, up to a ``--``."""
    values = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == option and i + 1 < len(argv):
            values.append(argv[i + 1])
        elif arg.startswith(f"{option}="):
            values.append(arg.removeprefix(f"{option}="))
    return values


def profile_files(argv, environ):
    """The files of the Snakemake profiles this run uses, lowest priority first, found as Snakemake 9's command line
    finds them (snakemake.cli.parse_args): each --profile, else $SNAKEMAKE_PROFILE (a name, a path, or a "[a, b]"
    list); then the workflow profile: --workflow-profile, a file, or a folder looked for as given, under profiles/
    and under the Snakefile's profiles/, else profiles/default where there is one. 'none' turns either off."""
    profiles = option_values(argv, "--profile")
    if not profiles and environ.get("SNAKEMAKE_PROFILE"):  # configargparse reads the variable only then
        given = environ["SNAKEMAKE_PROFILE"]
        profiles = [given]
        if given.startswith("[") and given.endswith("]"):
            try:
                profiles = [str(name) for name in json.loads(given)]
            except ValueError:
                profiles = [name.strip() for name in given[1:-1].split(",")]
    if profiles == ["none"]:
        profiles = []
    chosen = (option_values(argv, "--workflow-profile") or [None])[-1]
    if chosen != "none":
        if not chosen or not Path(chosen).is_file():
            name = Path(chosen or "default")
            chosen = next((str(place) for place in (name, "profiles" / name, Path(workflow.basedir) / "profiles" / name)
                           if place.exists()), None)
        if chosen:
            profiles.append(chosen)
    return [found[1] for found in map(get_profile_dir, profiles) if found is not None]


def profile_config(path):
    """The ``config`` of the profile file ``path`` as Snakemake passes it on, a list of KEY=VALUE items (a mapping
    gives its items), or None where the profile sets none."""
    try:
        data = read_yaml(path)
    except ConfigError as err:
        raise WorkflowError(f"invalid profile: {err}") from None
    given = data.get("config") if isinstance(data, dict) else None
    if given is None or given == []:
        return None
    if isinstance(given, dict):
        return [f"{key}={value}" for key, value in given.items()]
    return [str(item) for item in given] if isinstance(given, list) else [str(given)]


def check_command_line_config(argv, profiles):
    """Refuse a ``--config`` key given twice on the command line ``argv`` or in the ``config`` of a profile file
    (``profiles``, lowest priority first), as a suite file's key given twice is refused: Snakemake merges the
    KEY=VALUE items into a dict before the Snakefile runs, keeping the last value of a key. Of two ``--config``
    (``-C``) options it keeps the last one's items alone; a command-line ``--config`` replaces a profile's
    ``config`` whole, and a profile's ``config`` replaces that of the profiles before it."""
    options, keys = [], []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-C"):
            items = []
            for item in argv[i + 1:]:
                if item.startswith("-"):
                    break
                items.append(item)
        elif arg.startswith("--config="):
            items = [arg.removeprefix("--config=")]
        else:
            continue
        options.append(" ".join(items))
        keys += [item.split("=", 1)[0] for item in items]
    if len(options) > 1:
        raise WorkflowError(f"invalid params: --config is given {len(options)} times ({'; '.join(options)}); "
                            f"Snakemake keeps only the last one's settings: give every KEY=VALUE after one --config")
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise WorkflowError(f"invalid params: --config gives {', '.join(map(repr, repeated))} twice, and Snakemake "
                            f"would keep the last value without a word; keep one")
    setting = [(path, items) for path in profiles if (items := profile_config(path)) is not None]
    for path, items in setting:
        keys = [item.split("=", 1)[0] for item in items]
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        if repeated:
            raise WorkflowError(f"invalid params: the profile {path} gives {', '.join(map(repr, repeated))} twice in "
                                f"its config, and Snakemake would keep the last value without a word; keep one")
    if setting and options:
        path, items = setting[-1]
        raise WorkflowError(f"invalid params: the profile {path} sets config ({' '.join(items)}) and the command "
                            f"line gives --config ({options[0]}); Snakemake keeps the command line's settings alone, "
                            f"dropping the profile's: give every KEY=VALUE in one of them")
    if len(setting) > 1:
        raise WorkflowError(f"invalid params: the profiles {' and '.join(str(path) for path, _ in setting)} each set "
                            f"config; Snakemake keeps only {setting[-1][0]}'s settings: give every KEY=VALUE in one")


if workflow.is_main_process:  # a job's own process runs the command line Snakemake wrote for it
    check_command_line_config(sys.argv[1:], profile_files(sys.argv[1:], os.environ))
if "seeds" in workflow.config_settings.config:  # --config seeds=...; a suite file's YAML keeps its integers
    config["seeds"] = command_line_seeds(config["seeds"])


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

    _tables = {Path(STAGES[s].outputs["csv"]): [Path(p) for name, p in STAGES[s].outputs.items() if name != "csv"]
               for s in ("aggregate", "human_eval_table")}  # a table and the files written with it
    for _line in mark_stale(Path("results"), Path(output_of("aggregate", "csv")),
                            [Path(p) for p in expand(output_of("evaluate"), task=TASKS, method=METHODS, seed=SEEDS)],
                            _tables, folders=[Path(p) for p in stage_folders()]):
        print(_line, file=sys.stderr)


rule all:
    input:
        "results/grue_table.csv",
        PREFERENCE_TARGETS,
