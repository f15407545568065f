# Shared helpers: the validated suite, params slices and the library code each stage runs.
# Each stage's facts (output paths, code, params keys, method file) come from its entry in the stage table,
# grueflow/pipeline.py (STAGES), which dvc.yaml is generated from; the rules add what only Snakemake needs.
# Shell commands quote every placeholder with :q ({params.task_file:q}; a list param is quoted word by
# word), except {threads} and {wildcards.seed}, which can only be integers (seed=SEED below, the Snakefile's);
# tests/unit/test_safety.py holds every rule to this.
import copy
import functools
import itertools
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

from grueflow import plugins
from grueflow.config import ConfigError, method_name, read_yaml
from grueflow.params import FOLDER_OUTPUTS, load_suite, project_relative, stage_folder_holding
from grueflow.pipeline import (STAGES, ParamsSource, datapool_files, files_in, method_layers, outside_code_digest,
                               params_digest, scorer_files)
from grueflow.stale import content_digest, stale_token

try:
    SUITE = load_suite(config, SUITE_NAME)  # every task and method file, strictly, before any job
except ConfigError as err:
    raise WorkflowError(f"invalid params: {err}") from None

PARAMS = Path(SUITE.config.params_dir)
TASKS = list(SUITE.config.tasks)
ALGORITHMS = list(SUITE.config.algorithms)
SEEDS = list(SUITE.config.seeds)
THREADS = SUITE.config.threads
METHODS = SUITE.config.methods
PREFERENCE_METHODS = list(SUITE.config.preference_methods)  # dpo: learnt from a preference set
RL_METHODS = [m for m in METHODS[2:] if m.removeprefix("supervised+") not in PREFERENCE_METHODS]
DPO_METHODS = [m for m in METHODS[2:] if m.removeprefix("supervised+") in PREFERENCE_METHODS]
RESOURCES = SUITE.config.resources  # per-rule threads, mem_mb, runtime, gpu: the suite's resources: over the defaults
PRECISION = SUITE.config.precision  # a param (rerun trigger) of every stage that runs a model
SUITE_VALUES_GIVEN = {"precision": PRECISION}  # the suite values the rules give their stages' commands


PROJECT = Path.cwd()  # where jobs run, and what a task file's relative paths name: not grueflow's own checkout,
# which a project may hold as a link (grueflow.pipeline.ROOT resolves it)


def job_threads(rule, default=THREADS):
    return RESOURCES.threads(rule, default)


def stage_device(rule):
    """The ``--device`` of a rule's stage, as the string resource ``device``: ``cuda`` when the rule's resources ask
    for a GPU, else ``$GRUEFLOW_DEVICE`` or ``auto`` (CUDA when the machine has it). A resource, not a param: the
    device is an execution setting and never a rerun trigger (``--set-resources rl_finetune:device=cuda:1``)."""
    return "cuda" if RESOURCES.of(rule).get("gpu") else os.environ.get("GRUEFLOW_DEVICE") or "auto"


def _choice(names):
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


wildcard_constraints:
    task=_choice(TASKS),
    seed=SEED,
    rl_method=_choice(RL_METHODS),
    dpo_method=_choice(DPO_METHODS),
    method=_choice(METHODS),


if workflow.is_main_process:  # a target of a task, method or seed these constraints refuse: one line naming the valid
    from grueflow.command_line import check_targets

    try:
        check_targets(sys.argv[1:], [template for stage in STAGES.values() for template in stage.outputs.values()],
                      {"task": TASKS, "method": METHODS, "rl_method": RL_METHODS, "dpo_method": DPO_METHODS,
                       "method_a": METHODS, "method_b": METHODS}, SEED)
    except ConfigError as err:
        raise WorkflowError(str(err)) from None


@functools.lru_cache(maxsize=None)
def _parsed(path):
    return read_yaml(path)


def params_file(path):
    """A params file's content, parsed once per Snakemake run (a copy each call, so no caller shares it):
    every job's params slice reads its task file, and parsing YAML dominates a dry run's time."""
    return copy.deepcopy(_parsed(str(path)))


def params_unchanged(path):
    """A params file's content as :func:`params_file` parses it, that parse itself (no copy): for a reader that
    changes nothing, as grueflow.pipeline.params_digest, which the stale check runs for every stage folder."""
    return _parsed(str(path))


def task_file(w):
    return str(PARAMS / "tasks" / f"{w.task}.yaml")


def stage_folders():
    """Every stage folder the suite's rules may write: each stage's folder template over the suite's tasks, methods
    and seeds, and the human batches' names (HUMAN_BATCHES, human.smk: imports and pairwise batches included)."""
    values = {"task": TASKS, "seed": SEEDS, "method": METHODS, "rl_method": RL_METHODS, "dpo_method": DPO_METHODS,
              "method_a": METHODS, "method_b": METHODS, "batch": HUMAN_BATCHES}
    folders = []
    for stage in STAGES.values():
        for template in (stage.outputs[name] for name in FOLDER_OUTPUTS if name in stage.outputs):
            names = set(re.findall(r"{(\w+)}", template))
            if names <= set(values):
                folders += expand(template, **{name: values[name] for name in names})
    return folders


def stale_params(stage):
    """A rule's ``stale`` param, a rerun trigger for what Snakemake's modification times miss (grueflow/stale.py):
    the tokens the Snakefile's stale check gave the job's outputs (found deleted or damaged), the digest of the
    code its stage runs (:func:`code_digest`), the digest of the files it reads from outside results/
    (:func:`local_files`), so that a code file or one of those files replaced by one with an older time reruns it,
    and the digest of the code of the plugin modules outside the project it runs (a folder on PYTHONPATH, an
    installed package: grueflow/pipeline.py outside_code_digest), which are no inputs.
    A function of the wildcards alone: Snakemake's params trigger passes over a param computed from the rule's
    output."""
    templates = list(STAGES[stage].outputs.values())
    local = local_files(stage)
    plugin_parts = STAGES[stage].plugin_parts

    def token(w):
        digest = content_digest(local(w))
        modules = outside_code_digest(params_file(task_file(w)), plugin_parts, PROJECT) if plugin_parts else ""
        tokens = stale_token([template.format(**dict(w.items())) for template in templates])
        parts = (tokens, f"code={code_digest(stage)}", f"content={digest}" if digest else "",
                 f"modules={modules}" if modules else "")
        return " ".join(part for part in parts if part)

    return token


@functools.lru_cache(maxsize=None)
def code_digest(stage):
    """The content digest (grueflow.stale.content_digest) of the files :func:`code` lists for a stage, once per
    Snakemake run: its inputs are judged by modification time, which a copy keeping an older time (``cp -p``,
    ``rsync -a``, ``tar x``, a clock behind) leaves older than the outputs; DVC hashes the same files."""
    return content_digest(code(stage))


def code_files():
    """Every code file a job of the suite runs: :func:`code` of each stage, and the plugin sources each task names
    (grueflow.plugins.source_files), for the Snakefile's check of code rewritten with its time kept
    (grueflow.stale.restamp_set_back)."""
    files = {name for stage in STAGES for name in code(stage)}
    for task in TASKS:
        files.update(plugins.source_files(params_unchanged(task_file(SimpleNamespace(task=task)))))
    return sorted(files)


def local_files(stage):
    """The files a stage's job reads from outside results/ besides grueflow's code: its plugins' code and the files
    its rewards and metrics name (:func:`plugin_code`), a datapool's local data (:func:`datapool_data`), a
    classifier's data files (classifier_data, classifier.smk)."""
    sources = [plugin_code(stage)] if STAGES[stage].plugin_parts else []
    sources += [datapool_data] if stage == "prepare_datapool" else []
    sources += [lambda w: classifier_data(w)] if stage == "train_classifier" else []
    return lambda w: [f for source in sources for f in source(w)]


def output_of(stage, name="out"):
    """The path template of a stage's output ``name`` (``out``: the stage folder), from the stage table."""
    return STAGES[stage].outputs[name]


def task_slice(stage):
    """The params slice a rule depends on (rerun trigger): the task-file keys its stage reads, from the stage
    table; ``method_overrides`` is left to :func:`method_overrides`, which keeps only the rule's own method."""
    keys = [k for k in STAGES[stage].task_keys if k != "method_overrides"]
    return lambda w: {k: params_file(task_file(w)).get(k) for k in keys}


def method_overrides(method):
    """The task file's overrides of one method's params (rerun trigger for that method's stages only); ``method``
    is a name, or a function of the wildcards giving a name or a list of the entries a job reads."""
    def overrides(w):
        name = method(w) if callable(method) else method
        entries = params_file(task_file(w)).get("method_overrides") or {}
        return [entries.get(n) for n in name] if isinstance(name, list) else entries.get(name)

    return overrides


def method_file(name):
    return str(PARAMS / "methods" / f"{name}.yaml")


STAGE_METHODS = {}  # stage -> its jobs' method-file name, a function of the wildcards (stage_method)


def stage_method(stage, **axes):
    """A job's method-file name (a function of its wildcards): the stage table's ``method``, its grid axis
    (``{algorithm}``) filled by ``axes`` (``algorithm=rl_algorithm``: a function of the wildcards). Kept in
    STAGE_METHODS for :func:`stage_params`."""
    template = STAGES[stage].method
    STAGE_METHODS[stage] = lambda w: template.format(**{axis: of(w) for axis, of in axes.items()})
    return STAGE_METHODS[stage]


def stage_params():
    """Where the job of each stage folder of :func:`stage_folders` that reads params files or suite values reads
    them, as its rule runs it: ``{folder: grueflow.pipeline.ParamsSource}`` (its task file, its method file, the
    suite's precision, the method_overrides entries of its method: grueflow.pipeline.method_layers). The stale
    check compares them with the digests a folder's stage.json records, whoever wrote it (grueflow/stale.py
    params_changed), and a --touch run is refused over a folder they differ for (refuse_touch). A stage with a
    method file but no stage_method of its rule is left out (not checked)."""
    values = {"task": TASKS, "seed": SEEDS, "method": METHODS, "rl_method": RL_METHODS, "dpo_method": DPO_METHODS}
    sources = {}
    for stage in STAGES.values():
        template = stage.outputs.get("out")
        names = list(dict.fromkeys(re.findall(r"{(\w+)}", template or "")))
        method = STAGE_METHODS.get(stage.name)
        if (template is None or not set(names) <= set(values) or (stage.method is not None and method is None)
                or not (stage.task_keys or stage.method or stage.suite_keys)):
            continue
        for combination in itertools.product(*(values[name] for name in names)):
            w = SimpleNamespace(**dict(zip(names, combination)))
            sources[Path(template.format(**vars(w)))] = ParamsSource(
                stage.name, task_file(w) if "task" in names else None,
                method_file(method(w)) if method is not None else None,
                {key: SUITE_VALUES_GIVEN[key] for key in stage.suite_keys if key in SUITE_VALUES_GIVEN},
                tuple(method_layers(stage.overrides.format(**vars(w)))) if stage.overrides is not None else ())
    return sources


def planned_params():
    """The params digest (grueflow.pipeline.params_digest) of each folder of :func:`stage_params` as this run planned
    its job: read through :func:`params_unchanged`, the parse of each file kept for the run that the rules' params
    were computed from. A folder whose params files cannot be read is left out: no job of this run reads them (the
    suite's own files were all read before any job), e.g. the method file of a preference stage the suite leaves
    out."""
    digests = {}
    for folder, source in stage_params().items():
        try:
            digests[folder] = params_digest(source, params_unchanged)
        except ConfigError:
            continue
    return digests


def method_path(method):
    """The method file of a job whose method-file name is ``method(w)`` (a param: the CLI's --method-file)."""
    return lambda w: method_file(method(w))


def method_params(method):
    """The whole method file of a job whose method-file name is ``method(w)`` (rerun trigger)."""
    return lambda w: params_file(method_file(method(w)))


def code(stage):
    """The files a stage runs: its CLI and that CLI's import closure inside grueflow/, computed from the
    imports (grueflow/codedeps.py); inputs, so that editing any of them reruns the stage, and their content's digest
    a param (:func:`code_digest`), so that one whose edit kept an older time reruns it too."""
    return STAGES[stage].code


def plugin_code(stage):
    """The project's source files behind the import paths a stage's parts of the task file name (a datapool,
    reward, metric or post-processor of your own, grueflow/plugins.py; the parts: the stage table's
    plugin_parts), and the local files and folders its reward's and metrics' args name (a checkpoint, a
    lexicon; grueflow/pipeline.py scorer_files): inputs, so that editing one reruns the stages that use it."""
    parts = STAGES[stage].plugin_parts
    return lambda w: (plugins.source_files(params_file(task_file(w)), parts=parts)
                      + files_in(scorer_files(params_file(task_file(w)), PROJECT, parts=parts)))


def datapool_data(w):
    """The local data files and folders a task's datapool reads (data_files, data_root, a local path;
    grueflow/pipeline.py datapool_files): inputs, so that editing one rebuilds the datapool and what reads it. A
    brace in any local path a task names is refused before (grueflow/pipeline.py wildcard_problem, run by
    load_suite): Snakemake would read it as a wildcard."""
    return files_in(datapool_files(params_file(task_file(w)), PROJECT))


def reward_models(w):
    """Reward-model folders a task's reward names (metric reward_model), and the classifier folders
    its reward or metrics name (:func:`classifiers`): inputs of the stages that score with them, so Snakemake
    trains them first; ``.../reward_model/model`` maps to the stage folder. A path is read as
    :func:`grueflow.params.project_relative` writes it: an absolute one inside the project, or a link of the user's
    into a stage folder (``models/rm``), is its relative ``results/`` form, the train_reward_model output it names."""
    components = plugins.reward_components(params_file(task_file(w)))
    paths = [project_relative(str((c.get("args") or {}).get("path", ""))) for c in components
             if c.get("metric") == "reward_model" and (c.get("args") or {}).get("path")]
    folders = [p.removesuffix("/").removesuffix("/model") if p.rstrip("/").endswith("/model") else p for p in paths if p]
    return folders + classifiers(w)


def named_inputs():
    """Each folder the suite's jobs read that a task file or the suite names, by what names it: the reward models and
    classifiers of each task's reward and metrics (:func:`reward_models`), and the folder holding a task's
    preference_files set where the suite learns from preferences (preferences_input, preference.smk). The stale
    check refuses one that is stale where no job of the suite can rebuild it (grueflow.stale.mark_stale's ``read``):
    a reward model trained by hand, an import whose answers are gone."""
    named = {}
    for task in TASKS:
        w = SimpleNamespace(task=task)
        for folder in reward_models(w):
            named.setdefault(Path(folder), f"{task_file(w)} (its reward or metrics)")
        if PREFERENCE_METHODS and SUITE.config.preference_files.get(task):
            named.setdefault(Path(preferences_input(w)), f"preference_files.{task} of {SUITE_NAME}")
    return named


CLASSIFIER_MODEL = re.compile(re.escape(output_of("train_classifier")).replace(r"\{task\}", "[^/]+") + "/model/?")


def classifiers(w):
    """train_classifier folders (results/<task>/classifier) whose model/ a task's learned_classifier reward
    components or metrics name as args.model (relative, absolute inside the project, or a link to it); another path
    (a hub id, a local folder) is not built."""
    cfg = params_file(task_file(w))
    named = [(c.get("metric"), c.get("args")) for c in plugins.reward_components(cfg)]
    named += [(m.get("id"), m.get("args")) for m in cfg.get("metrics") or []]
    paths = {project_relative(str((args or {}).get("model", ""))) for metric, args in named
             if metric == "learned_classifier"}
    return sorted(p.removesuffix("/model") for p in paths if CLASSIFIER_MODEL.fullmatch(p))
