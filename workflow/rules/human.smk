# Human evaluation, outside `rule all`: batches exported from evaluate outputs; the answers,
# a human step outside the DAG, come back as files under data/human/<task>/<batch>/ (the annotation
# page's .jsonl, a platform's results .csv) and are imported into results/human_eval_table.csv.
#   snakemake --cores 1 results/human/sentiment/batches/likert_seed0                      (every method)
#   snakemake --cores 1 results/human/sentiment/batches/supervised+ppo_vs_supervised_seed0  (blinded A/B)
#   snakemake --cores 1 results/human_eval_table.csv        (every batch with answers under data/human/)
# The criteria are the task's registered criteria set (grueflow/human/criteria.py), looked up by task name.
from grueflow.human.layout import answers_tree, hidden
from grueflow.stale import answered_paths

HUMAN_BATCHES = [f"likert_seed{s}" for s in SEEDS] + [f"{a}_vs_{b}_seed{s}" for a in METHODS for b in METHODS
                                                      if a != b for s in SEEDS]
HUMAN_TREE = answers_tree(Path("data/human"), TASKS, HUMAN_BATCHES)  # folder links followed, unlike glob_wildcards
HUMAN_IMPORTS = [f"results/human/{t}/imported/{b}" for t, b in HUMAN_TREE.batches]


IMPORT_FOLDER = re.compile(re.escape(output_of("import_human_eval")).replace(r"\{task\}", "(?P<task>[^/]+)")
                           .replace(r"\{batch\}", "(?P<batch>[^/]+)"))
PREFERENCE_BATCHES = {(m["task"], m["batch"]) for m in (IMPORT_FOLDER.fullmatch(stage_folder_holding(path) or "")
                                                        for path in SUITE.config.preference_files.values()) if m}
# (task, batch) of each import whose preferences.jsonl preference_files names (as written or through a link):
# rule all builds it, its batch and key


def human_target(path):
    """The target whose build reruns the job of ``path``, an output of a human-evaluation stage, which rule all does
    not build: results/human_eval_table.csv for the table, and for a batch with answers under data/human/ (its
    export, key and import); ``path`` itself for another batch (its key: the batch). None for any other path, and for
    those rule all builds (an import preference_files names a file in: :data:`PREFERENCE_BATCHES`)."""
    table = [Path(p) for p in STAGES["human_eval_table"].outputs.values()]
    if Path(path) in table:
        return str(table[0])
    parts = Path(path).parts
    if parts[:2] != ("results", "human") or len(parts) != 5 or parts[3] not in ("batches", "keys", "imported"):
        return None
    task, batch = parts[2], parts[4].removesuffix(".json") if parts[3] == "keys" else parts[4]
    if (task, batch) in PREFERENCE_BATCHES:
        return None
    if (task, batch) in HUMAN_TREE.batches:
        return str(table[0])
    return f"results/human/{task}/batches/{batch}" if parts[3] == "keys" else str(path)


def human_imports(w=None):
    """The imports the table reads: every batch with answers under data/human/, once what lies there and would be
    left out without a word (a folder named as no batch, answers this checkout has not fetched) is refused, and
    what is not imported (another suite's task or batch, a file outside a batch folder) is named."""
    if workflow.is_main_process:
        for line in HUMAN_TREE.warnings:
            print(f"grueflow: warning: {line}", file=sys.stderr)
    HUMAN_TREE.warnings.clear()  # said once, though Snakemake may ask again
    if HUMAN_TREE.errors:
        raise WorkflowError("\n".join(HUMAN_TREE.errors))
    if not HUMAN_IMPORTS:
        raise WorkflowError("no answers under data/human/<task>/<batch>/ yet for the suite's tasks "
                            f"({', '.join(TASKS)}): export a batch, annotate it (README \"Human evaluation\") and "
                            "save its answers there")
    return HUMAN_IMPORTS


# The table named as a target on the command line (the usual way): its check runs now, and a refusal reads as one
# message, where an input function's comes with Snakemake's traceback (the targets are not known to a Snakefile
# while it is read). Asked for another way, the input function checks.
_HUMAN_TABLE = {os.path.abspath(path) for path in STAGES["human_eval_table"].outputs.values()}
if _HUMAN_TABLE & {os.path.abspath(arg) for arg in sys.argv[1:]}:
    human_imports()


wildcard_constraints:
    method_a=_choice(METHODS),
    method_b=_choice(METHODS),
    batch=rf"likert_seed(?:{SEED})|[^/]+_vs_[^/]+_seed(?:{SEED})",


def human_key(w):
    """The key file of a pairwise batch (none for a Likert batch)."""
    return [] if w.batch.startswith("likert_") else [f"results/human/{w.task}/keys/{w.batch}.json"]


def answered_batches():
    """(batch folder, its key file or None, its answers folder) of every batch with answers under data/human/ (the
    imports the table reads): what the check before any job keeps a copy of (grueflow.stale.keep_answered), since a
    re-export deletes the batch its answers belong to."""
    return answered_paths(HUMAN_TREE.batches)


def reexported_batches(jobs):
    """(batch folder, its key file or None) of each export job among ``jobs`` (the jobs a run will run): what
    ``onstart`` keeps a copy of where one is exported already (grueflow.stale.keep_reexported), since Snakemake
    deletes a job's outputs before it runs, and an exported batch is with annotators, answered yet or not."""
    return [(Path(job.output[0]), Path(job.output[1]) if len(job.output) > 1 else None) for job in jobs
            if job.rule.name in ("export_human_likert", "export_human_pairwise")]


rule export_human_likert:
    input:
        runs=lambda w: expand("results/eval/{task}/{method}/seed{seed}", task=w.task, method=METHODS, seed=w.seed),
        code=code("export_human_likert"),
    output:
        directory(output_of("export_human_likert")),
    params:
        stale=stale_params("export_human_likert"),
        predictions=lambda w: [f"{m}=results/eval/{w.task}/{m}/seed{w.seed}" for m in METHODS],
    log:
        "results/logs/human/{task}/likert_seed{seed}.log",
    shell:
        "python stages/export_human_eval.py --kind likert --criteria {wildcards.task:q} --seed {wildcards.seed}"
        " --predictions {params.predictions:q} --out {output:q} 2> {log:q}"


def pairwise_run(which):
    """The evaluate run of one side (``method_a`` or ``method_b``) of a pairwise batch; a batch that names one method
    twice is refused while the DAG is built, since an A/B comparison needs two different methods."""
    def run(w):
        if w.method_a == w.method_b:
            raise WorkflowError(f"results/human/{w.task}/batches/{w.method_a}_vs_{w.method_b}_seed{w.seed}: a pairwise "
                                f"batch compares two different methods, and this one names {w.method_a!r} twice; "
                                f"give <method_a>_vs_<method_b>_seed<k> with two of {', '.join(METHODS)}, or "
                                f"likert_seed<k> to rate every method")
        return f"results/eval/{w.task}/{getattr(w, which)}/seed{w.seed}"

    return run


rule export_human_pairwise:
    input:
        first=pairwise_run("method_a"),
        second=pairwise_run("method_b"),
        code=code("export_human_pairwise"),
    output:
        batch=directory(output_of("export_human_pairwise", "batch")),
        key=output_of("export_human_pairwise", "key"),
    params:
        stale=stale_params("export_human_pairwise"),
        predictions=lambda w, input: [f"{w.method_a}={input.first}", f"{w.method_b}={input.second}"],
    log:
        "results/logs/human/{task}/{method_a}_vs_{method_b}_seed{seed}.log",
    shell:
        "python stages/export_human_eval.py --kind pairwise --criteria {wildcards.task:q} --seed {wildcards.seed}"
        " --predictions {params.predictions:q} --out {output.batch:q} --key {output.key:q} 2> {log:q}"


def answers_files(w):
    """Every file in a batch's answers folder, so that one edited in place (an appended answer, a results CSV saved
    over) reruns the import: Snakemake reads a folder input's own modification time, which editing a file in it
    leaves as it was. Hidden files are left out, as the import leaves them (grueflow.human.layout.hidden)."""
    folder = Path(f"data/human/{w.task}/{w.batch}")
    return sorted(str(p) for p in folder.rglob("*") if p.is_file() and not hidden(p.name)) \
        if folder.is_dir() else []


def answers_inputs(w):
    """:func:`answers_files` as Snakemake inputs, but those whose name holds a brace, which Snakemake would read as
    a wildcard whatever the escaping (:func:`answers_digests` covers them)."""
    return [f for f in answers_files(w) if "{" not in f and "}" not in f]


def answers_digests(w):
    """Each answers file's sha256 (a brace in its name included), a rerun trigger: a file copied over with an
    older time (cp -p) changes no time Snakemake compares, and a new or edited file changes the digests."""
    import hashlib

    return {f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in answers_files(w)}


rule import_human_eval:
    input:
        batch="results/human/{task}/batches/{batch}",
        answers=ancient("data/human/{task}/{batch}"),  # its files are the inputs: the folder's time is no content
        answers_files=answers_inputs,
        key=human_key,
        code=code("import_human_eval"),
    output:
        directory(output_of("import_human_eval")),
    params:
        stale=stale_params("import_human_eval"),
        key=lambda w, input: ["--key", *input.key] if input.key else [],
        answers_digests=answers_digests,
    log:
        "results/logs/human/{task}/import_{batch}.log",
    shell:
        "python stages/import_human_eval.py --batch {input.batch:q} {params.key:q} --answers {input.answers:q}"
        " --task {wildcards.task:q} --out {output:q} 2> {log:q}"


rule human_eval_table:
    input:
        imports=human_imports,
        code=code("human_eval_table"),
    output:
        csv=output_of("human_eval_table", "csv"),
        md=output_of("human_eval_table", "md"),
    params:
        stale=stale_params("human_eval_table"),
    log:
        "results/logs/human_eval_table.log",
    shell:
        "python stages/human_eval_table.py --imports {input.imports:q} --out-csv {output.csv:q}"
        " --out-md {output.md:q} 2> {log:q}"
