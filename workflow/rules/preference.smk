# Learning from preferences: preferences from a metric, a Bradley-Terry reward model, DPO.
# On when the suite lists preference_methods (dpo); DPO runs from the base model (dpo) and from the warm
# start (supervised+dpo) as the RL algorithms do, and evaluate / aggregate pick its rows up.
PREFERENCE_TARGETS = expand("results/{task}/reward_model", task=TASKS) if PREFERENCE_METHODS else []


def preferences_input(w):
    """The task's preference set as an input: the suite's preference_files[<task>] (people), else build_preferences'
    folder. A given file inside a stage folder (a human-evaluation import's ``results/human/<task>/imported/<batch>/
    preferences.jsonl``), as written or through a link of the user's to it, is given as that folder
    (:func:`grueflow.params.stage_folder_holding`), so that its job is planned, and reruns with new answers before
    the stages that read the file; :func:`preferences_file` is the file they read."""
    given = SUITE.config.preference_files.get(w.task)
    if not given:
        return f"results/{w.task}/preferences"
    return stage_folder_holding(given) or given


def preferences_file(w):
    given = SUITE.config.preference_files.get(w.task)
    return given if given else f"results/{w.task}/preferences/preferences.jsonl"


def dpo_name(w):
    return w.dpo_method.removeprefix("supervised+")


PREFERENCES_METHOD = stage_method("build_preferences")
REWARD_MODEL_METHOD = stage_method("train_reward_model")
DPO_METHOD = stage_method("dpo", method=dpo_name)  # params/methods/<preference method>.yaml


def dpo_init(w):
    if w.dpo_method.startswith("supervised+"):
        return f"results/{w.task}/supervised/seed{w.seed}"
    return f"results/{w.task}/base_model"


rule build_preferences:
    input:
        datapool=output_of("prepare_datapool"),
        base_model=output_of("base_model"),
        code=code("build_preferences"),
        plugins=plugin_code("build_preferences"),
    output:
        directory(output_of("build_preferences")),
    params:
        stale=stale_params("build_preferences"),
        precision=PRECISION,
        slice=task_slice("build_preferences"),
        method=method_params(PREFERENCES_METHOD),
        method_file=method_path(PREFERENCES_METHOD),
        task_file=task_file,
    threads: job_threads("build_preferences")
    resources:
        **RESOURCES.of("build_preferences"),
        device=stage_device("build_preferences"),
    log:
        "results/logs/{task}/build_preferences.log",
    shell:
        "python stages/build_preferences.py --task-file {params.task_file:q} --method-file {params.method_file:q}"
        " --datapool {input.datapool:q} --policy {input.base_model:q}/model --base-model {input.base_model:q}/model"
        " --threads {threads} --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"


rule train_reward_model:
    input:
        preferences=preferences_input,
        base_model=output_of("base_model"),
        code=code("train_reward_model"),
    output:
        directory(output_of("train_reward_model")),
    params:
        stale=stale_params("train_reward_model"),
        precision=PRECISION,
        preferences=preferences_file,
        method=method_params(REWARD_MODEL_METHOD),
        method_file=method_path(REWARD_MODEL_METHOD),
    threads: job_threads("train_reward_model")
    resources:
        **RESOURCES.of("train_reward_model"),
        device=stage_device("train_reward_model"),
    log:
        "results/logs/{task}/train_reward_model.log",
    shell:
        "python stages/train_reward_model.py --method-file {params.method_file:q}"
        " --preferences {params.preferences:q} --backbone {input.base_model:q}/model"
        " --threads {threads} --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"


rule dpo:
    input:
        preferences=preferences_input,
        init=dpo_init,
        code=code("dpo"),
    output:
        directory(output_of("dpo")),
    params:
        stale=stale_params("dpo"),
        precision=PRECISION,
        preferences=preferences_file,
        slice=task_slice("dpo"),
        method=method_params(DPO_METHOD),
        method_file=method_path(DPO_METHOD),
        task_file=task_file,
    threads: job_threads("dpo")
    resources:
        **RESOURCES.of("dpo"),
        device=stage_device("dpo"),
    log:
        "results/logs/{task}/{dpo_method}/seed{seed}.log",
    shell:
        "python stages/dpo.py --task-file {params.task_file:q} --method-file {params.method_file:q}"
        " --preferences {params.preferences:q} --init-model {input.init:q}/model"
        " --seed {wildcards.seed} --threads {threads} --out {output:q} --device {resources.device:q} --precision {params.precision:q} 2> {log:q}"
