"""Issue 7: the preference loop as real Snakemake and DVC runs on the micro sentiment task.

build_preferences -> train_reward_model, and build_preferences -> dpo (from the base model and from the
warm start) -> evaluate -> aggregate: the GRUE table gets dpo and supervised+dpo rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from grueflow.human import batch as hb
from grueflow.human.answers import AnswerStore
from tests.conftest import copy_project, run, run_both_engines

SUITE = """tasks: [sentiment]
algorithms: []
preference_methods: [dpo]
seeds: [0]
threads: 1
precision: auto
params_dir: params
"""
METHODS = ["zero_shot", "supervised", "dpo", "supervised+dpo"]


def check_results(repo) -> None:
    table = pd.read_csv(repo / "results" / "grue_table.csv")
    assert list(zip(table.task, table.method)) == [("sentiment", m) for m in METHODS]
    assert table.reward.notna().all() and (table.fluency_ppl > 1).all()
    prefs = [json.loads(line) for line in (repo / "results" / "sentiment" / "preferences" / "preferences.jsonl").open()]
    summary = json.loads((repo / "results" / "sentiment" / "preferences" / "summary.json").read_text())
    assert summary["prompts"] == 16 and summary["pairs"] == len(prefs) > 0
    assert all(p["chosen_score"] > p["rejected_score"] for p in prefs)
    metrics = json.loads((repo / "results" / "sentiment" / "reward_model" / "metrics.json").read_text())
    assert {"train/accuracy", "train/loss", "val/accuracy", "val/loss"} <= set(metrics)
    assert (repo / "results" / "sentiment" / "reward_model" / "model" / "config.json").is_file()
    for method in ("dpo", "supervised+dpo"):
        out = repo / "results" / "sentiment" / method / "seed0"
        curve = pd.read_csv(out / "curves.csv")
        assert {"loss", "rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"} <= set(curve.columns)
        assert json.loads((out / "stage.json").read_text())["stage"] == "dpo"
        assert json.loads((repo / "results" / "eval" / "sentiment" / method / "seed0" / "metrics.json").read_text())["method"] == method


@pytest.mark.slow
def test_snakemake_and_dvc_run_the_preference_loop_into_the_grue_table(tmp_path):
    snakemake = copy_project(tmp_path / "snakemake")
    dvc = copy_project(tmp_path / "dvc")
    for repo in (snakemake, dvc):
        (repo / "params" / "suite.yaml").write_text(SUITE)
    run_both_engines(snakemake, dvc, "all", 1, "micro preference suite")
    check_results(snakemake)
    check_results(dvc)
    assert "Nothing to be done" in run(["snakemake", "--cores", "1", "all"], snakemake).stdout + \
        run(["snakemake", "--cores", "1", "all"], snakemake).stderr
    for name in ("preferences/preferences.jsonl", "dpo/seed0/curves.csv"):  # same params and seeds: same bytes
        assert (snakemake / "results" / "sentiment" / name).read_bytes() == (dvc / "results" / "sentiment" / name).read_bytes()


@pytest.mark.parametrize("form", ["relative", "absolute", "link"])
def test_a_reward_model_named_in_a_task_reward_is_trained_before_the_stages_that_score_with_it(tmp_path, form):
    """Named by its absolute path inside the project, the reward model planned no train_reward_model: Snakemake
    stopped on the missing input folder. Named through a link of the user's to it (models/rm), it planned none
    either."""
    repo = copy_project(tmp_path / "repo")
    (repo / "params" / "suite.yaml").write_text(SUITE.replace("algorithms: []", "algorithms: [ppo]"))
    task = repo / "params" / "tasks" / "sentiment.yaml"
    text = task.read_text()
    assert "    - {metric: lexicon_sentiment, weight: 1.0}\n" in text
    model = "results/sentiment/reward_model/model"
    path = {"relative": model, "absolute": str(repo / model), "link": "models/rm"}[form]
    if form == "link":  # not trained yet: the link leads nowhere until train_reward_model runs
        (repo / "models").mkdir()
        (repo / "models" / "rm").symlink_to(f"../{model}")
    task.write_text(text.replace("    - {metric: lexicon_sentiment, weight: 1.0}\n", "    - {metric: reward_model, weight: 1.0, "
                                 f"args: {{path: {path}}}}}\n"))
    with (repo / "params" / "methods" / "preferences.yaml").open("a") as handle:  # preferences from the lexicon, not the model
        handle.write("reward: {components: [{metric: lexicon_sentiment}]}\n")
    result = run(["snakemake", "-n", "--cores", "1", "all"], repo)
    blocks = {b.split(":")[0].split()[-1] + "/" + (b.split("wildcards: ")[1].split("\n")[0] if "wildcards: " in b else ""): b
              for b in result.stdout.split("\nrule ")[1:]}
    rl = next(b for name, b in blocks.items() if name.startswith("rl_finetune/") and "rl_method=ppo," in name)
    evaluate = next(b for name, b in blocks.items() if name.startswith("evaluate/") and "method=dpo," in name)
    for block in (rl, evaluate):
        assert "results/sentiment/reward_model" in block.split("output:")[0]
    assert "results/sentiment/reward_model" in next(b for n, b in blocks.items() if n.startswith("train_reward_model/"))


def test_a_suites_preference_file_replaces_build_preferences(tmp_path):
    repo = copy_project(tmp_path / "repo")
    human = repo / "data" / "human" / "preferences.jsonl"
    human.parent.mkdir(parents=True)
    human.write_text('{"id": "1", "prompt": "p", "chosen": "a great film", "rejected": "a dull film", "annotator": "x"}\n')
    (repo / "params" / "suite.yaml").write_text(SUITE + "preference_files: {sentiment: data/human/preferences.jsonl}\n")
    result = run(["snakemake", "-n", "-p", "--cores", "1", "all"], repo)
    assert "rule build_preferences" not in result.stdout
    assert result.stdout.count("--preferences data/human/preferences.jsonl") == 3  # reward model, dpo, supervised+dpo


def fake_evaluations(repo: Path, methods: tuple[str, ...]) -> None:
    """Evaluation folders of ``methods`` (sentiment, seed 0) in the project ``repo``, three predictions each, made
    without running evaluate: a human-evaluation export reads their predictions alone."""
    for method in methods:
        out = repo / "results" / "eval" / "sentiment" / method / "seed0"
        out.mkdir(parents=True)
        (out / "provenance.json").write_text('{"stage": "evaluate"}\n')
        (out / "predictions.jsonl").write_text("".join(
            json.dumps({"id": f"s{i}", "prompt": f"prompt {i}", "references": [], "scores": {},
                        "generation": f"{method} says {i}"}) + "\n" for i in range(3)))


@pytest.mark.parametrize("given", ["as written", "through a link"])
def test_new_answers_in_a_human_import_named_by_preference_files_rerun_the_import_and_dpo(tmp_path, given):
    """preference_files naming a human-evaluation import's preferences.jsonl (a file inside the import rule's folder
    output): the import is an input of train_reward_model and of both dpo runs, so that a GRUE-table build imports a
    new answer first; with no preference file in it, the stale import's line names the target that reimports it.
    Named through a link of the user's to that file (data/preferences/sentiment.jsonl), the import was planned by no
    build, and DPO trained on the judgements the answers no longer matched."""
    repo = copy_project(tmp_path / "repo")
    batch, methods = "supervised_vs_zero_shot_seed0", ("supervised", "zero_shot")
    fake_evaluations(repo, methods)
    imported = f"results/human/sentiment/imported/{batch}"
    suite = SUITE + f"preference_files: {{sentiment: {imported}/preferences.jsonl}}\n"
    (repo / "params" / "suite.yaml").write_text(suite)
    run(["snakemake", "--cores", "1", f"results/human/sentiment/batches/{batch}", "--allowed-rules",
         "export_human_pairwise"], repo)
    pairwise = hb.read_batch(repo / "results" / "human" / "sentiment" / "batches" / batch)
    store = AnswerStore(repo / "data" / "human" / "sentiment" / batch / "answers.jsonl", pairwise)
    for item in pairwise.items:
        store.append("alice", item["item_id"], {"choice": "A"})
    run(["snakemake", "--cores", "1", imported, "--allowed-rules", "import_human_eval"], repo)
    assert (repo / imported / "preferences.jsonl").read_text().count('"alice"') == len(pairwise.items)
    preferences = f"{imported}/preferences.jsonl"
    if given == "through a link":
        preferences = "data/preferences/sentiment.jsonl"
        (repo / "data" / "preferences").mkdir(parents=True)
        (repo / preferences).symlink_to(f"../../{imported}/preferences.jsonl")
        (repo / "params" / "suite.yaml").write_text(SUITE + f"preference_files: {{sentiment: {preferences}}}\n")

    store.append("carol", pairwise.items[0]["item_id"], {"choice": "B"})  # a new answer, not imported yet
    result = run(["snakemake", "-n", "-p", "--cores", "1", "results/grue_table.csv", "results/sentiment/reward_model"],
                 repo)
    assert f"grueflow: {imported} is stale (its input data/human/sentiment/{batch}/answers.jsonl changed since it " \
           f"was built); its job reruns\n" in result.stderr
    blocks = result.stdout.split("\nrule ")[1:]
    imports = [b for b in blocks if b.startswith("import_human_eval:")]
    assert len(imports) == 1 and f"output: {imported}\n" in imports[0]
    readers = [b for b in blocks if b.startswith(("dpo:", "train_reward_model:"))]
    assert len(readers) == 3  # reward model, dpo, supervised+dpo
    for block in readers:
        assert imported in block.split("output:")[0].split("input:")[1]
        assert f"--preferences {preferences} " in block
    assert "human_eval_table" not in result.stdout
    (repo / "params" / "suite.yaml").write_text(SUITE)  # the import is no input of rule all's stages now
    result = run(["snakemake", "-n", "--cores", "1", "results/grue_table.csv"], repo)
    assert f"grueflow: {imported} is stale (its input data/human/sentiment/{batch}/answers.jsonl changed since it " \
           f"was built); its job reruns once results/human_eval_table.csv is built (rule all does not build it)\n" \
           in result.stderr
    assert "import_human_eval" not in result.stdout


def test_a_withdrawn_import_named_by_preference_files_is_refused_naming_its_answers_folder(tmp_path):
    """The answers folder of an import that preference_files names, moved out of data/human (consent withdrawn):
    the stale line said "its job reruns", no import was planned (there are no answers), dpo was, and dpo's refusal
    said to import again, which cannot work. The plan is refused, naming the folder and the fixes that work."""
    repo = copy_project(tmp_path / "repo")
    batch = "supervised_vs_zero_shot_seed0"
    fake_evaluations(repo, ("supervised", "zero_shot"))
    imported, answers = f"results/human/sentiment/imported/{batch}", f"data/human/sentiment/{batch}"
    suite = SUITE + f"preference_files: {{sentiment: {imported}/preferences.jsonl}}\n"
    (repo / "params" / "suite.yaml").write_text(suite)
    run(["snakemake", "--cores", "1", f"results/human/sentiment/batches/{batch}", "--allowed-rules",
         "export_human_pairwise"], repo)
    pairwise = hb.read_batch(repo / "results" / "human" / "sentiment" / "batches" / batch)
    store = AnswerStore(repo / answers / "answers.jsonl", pairwise)
    for item in pairwise.items:
        store.append("alice", item["item_id"], {"choice": "A"})
    run(["snakemake", "--cores", "1", imported, "--allowed-rules", "import_human_eval"], repo)
    (repo / answers).rename(tmp_path / "withdrawn")
    result = run(["snakemake", "-n", "--cores", "1", "results/grue_table.csv"], repo, check=False)
    why = f"its input {answers}/answers.jsonl no longer exists"
    reader = "preference_files.sentiment of params/suite.yaml"
    assert result.returncode != 0 and "rule dpo" not in result.stdout
    assert (f"{imported} is stale ({why}) and no job can import it again: its answers at {answers} no longer exist, "
            f"yet {reader} names it, so the stages that read it would be built from it as it is: put the answers "
            f"back at {answers}, then run again; or name it no longer in {reader} and delete the import (rm -r "
            f"{imported})\n") in result.stdout + result.stderr  # Snakemake's WorkflowError: on stdout under -n
    (repo / "params" / "suite.yaml").write_text(SUITE.replace("preference_methods: [dpo]", "preference_methods: []"))
    result = run(["snakemake", "-n", "--cores", "1", "results/grue_table.csv"], repo)
    assert (f"grueflow: {imported} is stale ({why}); no job can import it again: its answers at {answers} no longer "
            f"exist, so nothing reruns it: put the answers back at {answers}, or delete the import (rm -r "
            f"{imported})\n") in result.stderr


def test_a_stale_reward_model_trained_by_hand_and_named_by_a_reward_is_refused_before_planning(tmp_path,
                                                                                                monkeypatch):
    """A reward model trained by hand (README's command) on a preference set changed since, named by the task's
    reward: "grueflow: ... is stale (...); its job reruns", then "Nothing to be done" (no rule writes that folder),
    so RL and the table kept the reward of the old judgements. Refused before planning, with the command that
    rebuilds it."""
    from grueflow.io import write_stage_record

    repo = copy_project(tmp_path / "repo")
    (repo / "params" / "suite.yaml").write_text(SUITE.replace("algorithms: []", "algorithms: [ppo]")
                                                .replace("preference_methods: [dpo]", "preference_methods: []"))
    monkeypatch.chdir(repo)
    (repo / "data").mkdir(exist_ok=True)
    (repo / "data" / "prefs.jsonl").write_text('{"id": "1", "prompt": "p", "chosen": "a", "rejected": "b"}\n')
    folder = Path("results/sentiment/reward_model_human")
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    write_stage_record(folder, stage="train_reward_model", params={}, wall_time_s=0.0,
                       inputs={"preferences": Path("data/prefs.jsonl")})
    task = repo / "params" / "tasks" / "sentiment.yaml"
    named = f"    - {{metric: reward_model, weight: 1.0, args: {{path: {folder}/model}}}}\n"
    task.write_text(task.read_text().replace("    - {metric: lexicon_sentiment, weight: 1.0}\n", named))
    (repo / "data" / "prefs.jsonl").write_text('{"id": "1", "prompt": "p", "chosen": "b", "rejected": "a"}\n')
    result = run(["snakemake", "-n", "--cores", "1", "results/grue_table.csv"], repo, check=False)
    assert result.returncode != 0 and "rule rl_finetune" not in result.stdout
    assert (f"{folder} is stale (its input data/prefs.jsonl changed since it was built) and no job of this suite "
            f"writes it (a stage run by hand, or a folder of another suite), yet params/tasks/sentiment.yaml (its "
            f"reward or metrics) names it, so the stages that read it would be built from it as it is: rebuild it "
            f"from its inputs now (python stages/train_reward_model.py --preferences data/prefs.jsonl --out {folder}, "
            f"as its records say it was built), then run again; or name it no longer in params/tasks/sentiment.yaml "
            f"(its reward or metrics) and delete it (rm -r {folder})\n") in result.stdout + result.stderr
