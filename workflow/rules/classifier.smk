# A learned reward trained here: a sequence classifier fine-tuned on a task's labelled files (the
# task file's `classifier:` key), e.g. IMDB sentiment in place of RL4LMs' hub model lvwerra/distilbert-imdb.
# Built when a learned_classifier metric or reward component names results/<task>/classifier/model: such
# folders are inputs of the stages that score with them (classifiers() in common.smk).


def classifier_data(w):
    """The task's classifier data files (train_file, and test_file when given), relative to the repository root:
    inputs, so that a missing file stops the job before it starts and a changed one reruns it."""
    section = params_file(task_file(w)).get("classifier") or {}
    return [section[k] for k in ("train_file", "test_file") if section.get(k)]


rule train_classifier:
    input:
        data=classifier_data,
        code=code("train_classifier"),
    output:
        directory(output_of("train_classifier")),
    params:
        stale=stale_params("train_classifier"),
        precision=PRECISION,
        slice=task_slice("train_classifier"),
        task_file=task_file,
    threads: job_threads("train_classifier")
    resources:
        **RESOURCES.of("train_classifier"),
        device=stage_device("train_classifier"),
    log:
        "results/logs/{task}/train_classifier.log",
    shell:
        "python stages/train_classifier.py --task-file {params.task_file:q} --threads {threads}"
        " --resume-dir {output:q}.resume --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"
