"""The real pipeline on the micro suite: Snakemake and DVC runs, caching, staleness, diffs across commits."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from grueflow.io import RECORD_DIGEST, sealed, write_json
from grueflow.metrics import describe
from tests.conftest import copy_project, git_init, run, run_both_engines

pytestmark = pytest.mark.slow

DVC_UP_TO_DATE = {"validate_suite": ["always changed"]}  # `dvc status --json` of a finished project: the first
# stage runs on every `dvc repro` (the suite and the links under results/), and nothing else is stale
SENTIMENT_RL_JOBS = {("rl_finetune", "sentiment", "ppo"), ("rl_finetune", "sentiment", "supervised+ppo"),
                     ("evaluate", "sentiment", "zero_shot"), ("evaluate", "sentiment", "supervised"),
                     ("evaluate", "sentiment", "ppo"), ("evaluate", "sentiment", "supervised+ppo"),
                     ("aggregate", None, None)}


def double_sentiment_reward(repo: Path) -> None:
    """Double one weight of the micro sentiment reward (its length term: the micro model rarely hits the lexicon)."""
    path = repo / "params" / "tasks" / "sentiment.yaml"
    text = path.read_text()
    assert "{metric: diversity, score: length, weight: -0.05}" in text
    path.write_text(text.replace("{metric: diversity, score: length, weight: -0.05}",
                                 "{metric: diversity, score: length, weight: -0.1}"))


def planned_jobs(dry_run_output: str) -> set[tuple[str | None, ...]]:
    """(rule, task, method) of every job a `snakemake -n` plans, the target rule `all` left out."""
    jobs = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if not head or head.group(1) == "all":
            continue
        wildcards = dict(re.findall(r"(\w+)=([^,\s]+)", (re.search(r"wildcards: (.*)", block) or [None, ""])[1]))
        jobs.add((head.group(1), wildcards.get("task"), wildcards.get("method") or wildcards.get("rl_method")))
    return jobs


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory) -> tuple[Path, Path]:
    """The micro suite run twice from scratch, side by side: by Snakemake and by `dvc repro` in a git repo."""
    snakemake = copy_project(tmp_path_factory.mktemp("snakemake"))
    dvc = copy_project(tmp_path_factory.mktemp("dvc"))
    run_both_engines(snakemake, dvc, "results/grue_table.csv", 2, "micro suite", timeout=1200)
    run(["git", "add", "-A"], dvc)
    run(["git", "commit", "-qm", "dvc repro"], dvc)
    return snakemake, dvc


@pytest.fixture(scope="module")
def snakemake_repo(pipelines) -> Path:
    return pipelines[0]


@pytest.fixture(scope="module")
def dvc_repo(pipelines) -> Path:
    return pipelines[1]


def test_snakemake_builds_the_grue_table(snakemake_repo):
    table = pd.read_csv(snakemake_repo / "results" / "grue_table.csv")
    assert sorted(zip(table.task, table.method)) == sorted(
        (t, m) for t in ("sentiment", "concepts") for m in ("zero_shot", "supervised", "ppo", "supervised+ppo"))
    assert (table.n_seeds == 1).all()
    assert table.reward_std.isna().all()  # one seed: no spread, left empty rather than 0
    assert (table.fluency_ppl > 1).all()
    assert {"lexical/rougeL", "diversity/distinct_2", "lexical/bleu", "normalised_score"} <= set(table.columns)
    nested = json.loads((snakemake_repo / "results" / "grue_table.json").read_text())
    assert set(nested["sentiment"]) == {"zero_shot", "supervised", "ppo", "supervised+ppo"}
    metrics = json.loads((snakemake_repo / "results" / "eval" / "concepts" / "ppo" / "seed0" / "metrics.json").read_text())
    if "spice" in metrics["missing"]:  # no Java or CoreNLP jars here: missing with the reason, never 0
        assert metrics["metrics"]["lexical/spice"] is None and "needs Java" in metrics["missing"]["spice"]
        assert "- missing `spice`: metric 'spice' needs Java" in (snakemake_repo / "results" / "grue_table.md").read_text()
    else:
        assert 0 <= metrics["metrics"]["lexical/spice"] <= 1


def test_second_run_has_nothing_to_do(snakemake_repo):
    """A finished run holds nothing its stage records do not vouch for: no line, no copy."""
    result = run(["snakemake", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
    assert "Nothing to be done" in result.stdout + result.stderr and "grueflow:" not in result.stderr
    assert not (snakemake_repo / ".grueflow").exists()


def test_a_users_file_in_a_finished_stage_folder_is_copied_before_any_job(snakemake_repo):
    """A file added to a datapool in order went with the next rerun of its stage for a param, with no line: only a
    folder stale for its own sake had its files copied. Every run and dry run now names it and keeps a copy
    outside results/, once, and nothing reruns for it."""
    pool = snakemake_repo / "results" / "concepts" / "datapool"
    (pool / "mine.txt").write_text("my own text\n")
    try:
        for _ in range(2):
            result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
            copy, = (snakemake_repo / ".grueflow" / "replaced" / "results" / "concepts").glob("datapool@*")
            assert f"grueflow: results/concepts/datapool holds what no stage record vouches for (mine.txt); a copy " \
                   f"is kept in {copy.relative_to(snakemake_repo)} (a rerun of its stage replaces it whole)" \
                   in result.stderr and "Nothing to be done" in result.stdout + result.stderr
        assert sorted(p.name for p in copy.iterdir()) == ["mine.txt"]
    finally:
        (pool / "mine.txt").unlink()
        shutil.rmtree(snakemake_repo / ".grueflow", ignore_errors=True)


def test_the_device_is_recorded_and_changing_it_reruns_nothing(snakemake_repo, dvc_repo):
    """The device is an execution setting: stage.json records it, and neither $GRUEFLOW_DEVICE nor a rule's
    device resource makes a finished stage stale under either engine (precision, a param, would)."""
    for repo in (snakemake_repo, dvc_repo):
        seed0 = repo / "results" / "sentiment" / "ppo" / "seed0"
        assert json.loads((seed0 / "provenance.json").read_text())["execution"] == {
            "device": "cpu", "precision": "fp32", "fast_paths": True, "threads": 1}
        assert json.loads((seed0 / "stage.json").read_text())["params"]["precision"] == "auto"
    env = {**os.environ, "GRUEFLOW_DEVICE": "cpu"}
    for extra in ([], ["--set-resources", "rl_finetune:device=cpu", "evaluate:device=cpu"]):
        result = subprocess.run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv", *extra],
                                cwd=snakemake_repo, env=env, capture_output=True, text=True, timeout=300)
        assert "Nothing to be done" in result.stdout + result.stderr, result.stdout[-2000:]
    result = subprocess.run(["dvc", "status", "--json"], cwd=dvc_repo, env=env, capture_output=True, text=True,
                            timeout=300)
    assert json.loads(result.stdout) == DVC_UP_TO_DATE, result.stdout[-2000:]


def test_editing_one_reward_weight_marks_only_that_tasks_rl_evaluate_and_aggregate(snakemake_repo):
    original = (snakemake_repo / "params" / "tasks" / "sentiment.yaml").read_text()
    try:
        double_sentiment_reward(snakemake_repo)
        result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert planned_jobs(result.stdout) == SENTIMENT_RL_JOBS
    finally:
        (snakemake_repo / "params" / "tasks" / "sentiment.yaml").write_text(original)


def test_overriding_rl_from_the_warm_start_reruns_only_that_start(snakemake_repo):
    path = snakemake_repo / "params" / "tasks" / "sentiment.yaml"
    original = path.read_text()
    try:
        task = yaml.safe_load(original)
        task["method_overrides"] = {**(task.get("method_overrides") or {}), "supervised+ppo": {"learning_rate": 1e-4}}
        path.write_text(yaml.safe_dump(task, sort_keys=False))
        result = run(["snakemake", "-n", "-p", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert planned_jobs(result.stdout) == {("rl_finetune", "sentiment", "supervised+ppo"),
                                               ("evaluate", "sentiment", "supervised+ppo"), ("aggregate", None, None)}
        assert "--start supervised --datapool" in result.stdout
    finally:
        path.write_text(original)


def test_touch_after_a_param_edit_is_refused_and_a_touched_project_still_reruns(snakemake_repo, tmp_path):
    """``snakemake --touch`` after a param edit rewrote Snakemake's record of each job's params without running it:
    "Nothing to be done" from then on, and the GRUE table kept the old params' rows for good. A touch over folders
    built with other params is refused, naming them; one after a code edit alone passes (what --touch is for); and a
    project touched anyway (here past the refusal, with --no-hooks) still reruns the jobs whose params changed."""
    repo = tmp_path / "repo"  # a copy: the module's project stays as built
    shutil.copytree(snakemake_repo, repo, symlinks=True)
    dry_run, touch = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], ["snakemake", "--touch", "--cores",
                                                                                     "2", "results/grue_table.csv"]
    stage = repo / "stages" / "aggregate.py"
    stage.write_text(stage.read_text() + "# a comment\n")  # a code edit that changes no result
    assert planned_jobs(run(dry_run, repo).stdout) == {("aggregate", None, None)}
    touched = run(touch, repo)
    assert "grueflow:" not in touched.stderr and "Nothing to be done" in run(dry_run, repo).stdout
    method = repo / "params" / "methods" / "ppo.yaml"
    method.write_text(method.read_text().replace("coef: 0.05", "coef: 0.5"))
    refused = run(touch, repo, check=False)
    assert refused.returncode != 0
    assert ("--touch would mark 4 stage folders built with other params than now as up to date: results/concepts/ppo/"
            "seed0 (params/methods/ppo.yaml); results/concepts/supervised+ppo/seed0 (params/methods/ppo.yaml); "
            "results/sentiment/ppo/seed0 (params/methods/ppo.yaml); results/sentiment/supervised+ppo/seed0 "
            "(params/methods/ppo.yaml); their results, and what reads them, would pass for the new params'. Run "
            "without --touch to rebuild them (--touch is for code edits that change no result), or put the params "
            "back as they were") in refused.stderr, refused.stderr[-3000:]
    rl_jobs = {(rule, task, method) for task in ("sentiment", "concepts") for method in ("ppo", "supervised+ppo")
               for rule in ("rl_finetune", "evaluate")} | {("aggregate", None, None)}
    assert planned_jobs(run(dry_run, repo).stdout) == rl_jobs  # nothing was touched
    run([*touch, "--no-hooks"], repo)  # past the refusal: Snakemake's records now hold the new params
    result = run(dry_run, repo)
    assert planned_jobs(result.stdout) == rl_jobs
    assert ("grueflow: results/sentiment/ppo/seed0 is stale (its params changed since it was built "
            "(params/methods/ppo.yaml)); its job reruns") in result.stderr


def test_misspelt_reward_fails_before_any_job_and_lists_valid_ids(tmp_path):
    repo = copy_project(tmp_path / "repo")
    path = repo / "params" / "tasks" / "concepts.yaml"
    path.write_text(path.read_text().replace("{metric: concept_coverage, weight: 1.0}", "{metric: rogue, weight: 1.0}"))
    result = run(["snakemake", "--cores", "1", "results/grue_table.csv"], repo, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "unknown metric 'rogue'" in output and "params/tasks/concepts.yaml" in output
    assert "valid metric ids: " + ", ".join(sorted(describe())) in output
    assert not (repo / "results").exists()


def test_same_params_and_seed_give_byte_identical_metrics(dvc_repo, snakemake_repo):
    """Determinism: two independent runs (two engines, separate processes) agree to the byte."""
    for run_dir in ("sentiment/ppo/seed0", "sentiment/supervised+ppo/seed0", "concepts/ppo/seed0",
                    "concepts/zero_shot/seed0"):
        path = Path("results") / "eval" / run_dir / "metrics.json"
        assert (dvc_repo / path).read_bytes() == (snakemake_repo / path).read_bytes(), path
    assert (dvc_repo / "results" / "grue_table.csv").read_text() == \
        (snakemake_repo / "results" / "grue_table.csv").read_text()
    for run_dir in ("sentiment/ppo/seed0", "concepts/supervised+ppo/seed0", "sentiment/supervised/seed0"):
        path = Path("results") / run_dir / "dvclive" / "metrics.json"  # DVCLive's summary: no timestamps, no timings
        assert (dvc_repo / path).read_bytes() == (snakemake_repo / path).read_bytes(), path


def test_a_clone_pulls_the_run_cache_from_a_remote_and_reproduces_without_running(dvc_repo, tmp_path):
    """Sharing results (issue 8): push outputs and run cache to a directory remote; a fresh clone pulls them,
    and even with its dvc.lock removed `dvc repro` restores every stage from the run cache but the suite check,
    which runs on every `dvc repro`, and the pairwise exports: their blinding key stays out of DVC's cache and any
    remote, so the clone writes it again, the same."""
    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "--local", "--default", "shared", str(remote)], dvc_repo)
    run(["dvc", "push", "--run-cache"], dvc_repo)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(dvc_repo), str(clone)], tmp_path)
    run(["dvc", "remote", "add", "--local", "--default", "shared", str(remote)], clone)
    run(["dvc", "pull", "--run-cache"], clone)  # the outputs dvc.lock names, and every pushed run's record
    assert (clone / "results" / "grue_table.csv").read_text() == (dvc_repo / "results" / "grue_table.csv").read_text()
    decoding = Path("results/sentiment/ppo/seed0/decoding/decoding.json")  # how evaluate decodes model/ travels too
    assert (clone / decoding).read_bytes() == (dvc_repo / decoding).read_bytes()
    (clone / "dvc.lock").unlink()  # nothing recorded: only the run cache can tell that a stage already ran
    repro = run(["dvc", "repro"], clone)
    stages = set(run(["dvc", "stage", "list", "--name-only"], clone).stdout.split())
    cached = set(re.findall(r"Stage '(.+?)' is cached - skipping run, checking out outputs", repro.stdout))
    ran = set(re.findall(r"Running stage '(.+?)'", repro.stdout))
    assert len(stages) == 22  # the suite check, 19 pipeline stages, 2 human-evaluation exports
    assert ran == {"validate_suite"} | {s for s in stages if s.startswith("export_human_pairwise@")}  # one a task
    assert cached == stages - ran
    assert (clone / "results" / "grue_table.csv").read_text() == (dvc_repo / "results" / "grue_table.csv").read_text()
    assert (clone / "dvc.lock").read_text() == run(["git", "show", "HEAD:dvc.lock"], clone).stdout


def test_snakemake_reruns_a_dvc_built_run_whose_method_param_changed(dvc_repo, tmp_path):
    """A project built by dvc repro alone: Snakemake holds no record of the params its folders were built with, so a
    learning rate edited after that was "Nothing to be done" and the table kept the old run's rows. Each stage.json
    records digests of the params its stage read; the stale check compares them with the params files now."""
    assert json.loads(run(["dvc", "status", "--json"], dvc_repo).stdout) == DVC_UP_TO_DATE  # digests not volatile
    repo = tmp_path / "repo"  # a copy: the module's DVC project stays as DVC built it
    shutil.copytree(dvc_repo, repo, symlinks=True, ignore=shutil.ignore_patterns(".git", ".dvc"))
    dry_run = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"]
    first = run(dry_run, repo)
    assert "Nothing to be done" in first.stdout + first.stderr and "grueflow:" not in first.stderr
    method = repo / "params" / "methods" / "ppo.yaml"
    text = method.read_text()
    assert "learning_rate: 0.0005\n" in text
    method.write_text(text.replace("learning_rate: 0.0005\n", "learning_rate: 0.05\n"))
    edited = run(dry_run, repo)
    runs = (("rl_finetune", "ppo"), ("rl_finetune", "supervised+ppo"), ("evaluate", "ppo"), ("evaluate", "supervised+ppo"))
    assert planned_jobs(edited.stdout) == {(rule, task, method) for task in ("sentiment", "concepts")
                                           for rule, method in runs} | {("aggregate", None, None)}
    assert "grueflow: results/sentiment/ppo/seed0 is stale (its params changed since it was built " \
           "(params/methods/ppo.yaml), and no Snakemake job of this checkout wrote it (built by dvc repro, or " \
           ".snakemake removed)); its job reruns" in edited.stderr
    method.write_text(text)
    reverted = run(dry_run, repo)
    assert "Nothing to be done" in reverted.stdout + reverted.stderr and "grueflow:" not in reverted.stderr


def test_snakemake_reruns_a_dvc_built_run_whose_code_changed_under_an_older_time(dvc_repo, tmp_path):
    """A project built by dvc repro alone, then a module edited by a copy that keeps its older time (cp -p, rsync -a,
    tar x): Snakemake holds no record of the code's digest its rules take as a param, and its inputs are judged by
    time, so it was "Nothing to be done" while DVC reruns the stages that import the module. The stale check compares
    the md5 of the code dvc.lock records for each folder it holds as it is (the provenance records, which DVC does not
    cache, are gone, as after `dvc pull`), and the fingerprints of the code aggregate ran in the table's record."""
    repo = tmp_path / "repo"  # a copy: the module's DVC project stays as DVC built it
    shutil.copytree(dvc_repo, repo, symlinks=True, ignore=shutil.ignore_patterns(".git", ".dvc", "provenance.json"))
    assert not list((repo / "results").rglob("provenance.json"))
    dry_run = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"]
    edits = [repo / "grueflow" / "rl" / "trainer.py", repo / "grueflow" / "report.py"]  # rl_finetune's, aggregate's
    saved = [(path, path.read_text(), path.stat()) for path in edits]
    for path, text, stat in saved:
        path.write_text(text + "# edited\n")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # its old time: older than every output
    edited = run(dry_run, repo)
    runs = (("rl_finetune", "ppo"), ("rl_finetune", "supervised+ppo"), ("evaluate", "ppo"), ("evaluate", "supervised+ppo"))
    assert planned_jobs(edited.stdout) == {(rule, task, method) for task in ("sentiment", "concepts")
                                           for rule, method in runs} | {("aggregate", None, None)}
    assert "grueflow: results/sentiment/ppo/seed0 is stale (its code changed since it was built " \
           "(grueflow/rl/trainer.py), and no Snakemake job of this checkout wrote it (built by dvc repro, or " \
           ".snakemake removed)); its job reruns" in edited.stderr
    assert "grueflow: results/grue_table.csv is stale (its code changed since it was built (grueflow/report.py), " \
           "and no Snakemake job" in edited.stderr
    assert "results/sentiment/supervised/seed0 is stale" not in edited.stderr  # warm_start runs neither module
    for path, text, stat in saved:
        path.write_text(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    reverted = run(dry_run, repo)
    assert "Nothing to be done" in reverted.stdout + reverted.stderr and "grueflow:" not in reverted.stderr


def test_snakemake_reruns_a_dvc_built_run_for_its_own_methods_override_alone(dvc_repo, tmp_path):
    """A project built by dvc repro alone, whose stage records' params digests took the task file's method_overrides
    whole: an entry for supervised+ppo rebuilt the warm start, ppo and the zero-shot evaluation too, which never read
    it. Each folder's digest covers the entries its method reads; an entry a method reads still rebuilds it (and
    what reads its folder)."""
    repo = tmp_path / "repo"  # a copy: the module's DVC project stays as DVC built it
    shutil.copytree(dvc_repo, repo, symlinks=True, ignore=shutil.ignore_patterns(".git", ".dvc"))
    dry_run = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"]
    task = repo / "params" / "tasks" / "sentiment.yaml"
    text = task.read_text()
    assert "\nmethod_overrides: {}\n" in text
    runs = {("rl_finetune", "ppo"): "sentiment/ppo", ("rl_finetune", "supervised+ppo"): "sentiment/supervised+ppo",
            ("evaluate", "ppo"): "eval/sentiment/ppo", ("evaluate", "supervised+ppo"): "eval/sentiment/supervised+ppo",
            ("warm_start", None): "sentiment/supervised", ("evaluate", "supervised"): "eval/sentiment/supervised"}
    # the entries -> the jobs whose params changed, then those that read their folders
    for entries, changed, downstream in [
            ("{supervised+ppo: {learning_rate: 0.05}}", [("rl_finetune", "supervised+ppo"),
                                                         ("evaluate", "supervised+ppo")], []),
            ("{ppo: {learning_rate: 0.05}}", [job for job in runs if job[1] in ("ppo", "supervised+ppo")], []),
            ("{supervised: {learning_rate: 0.05}}", [("warm_start", None), ("evaluate", "supervised")],
             [("rl_finetune", "supervised+ppo"), ("evaluate", "supervised+ppo")])]:
        task.write_text(text.replace("\nmethod_overrides: {}\n", f"\nmethod_overrides: {entries}\n"))
        edited = run(dry_run, repo)
        assert planned_jobs(edited.stdout) == {(rule, "sentiment", method) for rule, method in changed + downstream} \
            | {("aggregate", None, None)}, entries
        assert set(re.findall(r"grueflow: results/(\S+)/seed0 is stale \(its params changed", edited.stderr)) == \
            {runs[job] for job in changed}, entries
        task.write_text(text)
        reverted = run(dry_run, repo)
        assert "Nothing to be done" in reverted.stdout + reverted.stderr and "grueflow:" not in reverted.stderr


def test_a_param_edited_while_snakemake_runs_stops_the_jobs_that_read_it(tmp_path):
    """A reward weight edited while `snakemake` ran: the jobs that started after the edit read the edited file,
    Snakemake recorded the params it planned with, and once the file was put back the run's folders were "Nothing
    to be done". A real run writes the digests it planned (a dry run writes none); a job whose params differ from
    them stops before any work, naming the file, and the jobs whose params did not change run."""
    repo = copy_project(tmp_path / "repo")
    target = "results/eval/sentiment/zero_shot/seed0"
    planned, task = repo / ".snakemake" / "grueflow-planned.json", repo / "params" / "tasks" / "sentiment.yaml"
    run(["snakemake", "-n", "--cores", "1", target], repo)
    assert not planned.exists()
    text = task.read_text()
    assert "{metric: lexicon_sentiment, weight: 1.0}" in text
    proc = subprocess.Popen(["snakemake", "--cores", "1", target], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        while not planned.exists() and proc.poll() is None:  # written once the run holds the lock, before any job
            time.sleep(0.05)
        task.write_text(text.replace("weight: 1.0}", "weight: 3.0}"))  # edited while the run goes on
        output, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode != 0, output[-4000:]
    assert (repo / "results" / "sentiment" / "base_model" / "stage.json").exists()  # read no reward: ran
    assert not (repo / target).exists()
    assert "error: params/tasks/sentiment.yaml changed after Snakemake planned this job (edited while the run went " \
           "on): what this job would build in results/eval/sentiment/zero_shot/seed0 is not what Snakemake recorded " \
           "for it; run snakemake again once the edit is done" in \
           (repo / "results" / "logs" / "eval" / "sentiment" / "zero_shot" / "seed0.log").read_text()


def test_dvc_reward_edit_status_diff_and_run_cache(dvc_repo):
    table_before = (dvc_repo / "results" / "grue_table.csv").read_text()
    double_sentiment_reward(dvc_repo)
    status = json.loads(run(["dvc", "status", "--json"], dvc_repo).stdout)
    assert set(status) == {"validate_suite", "rl_finetune@sentiment-ppo-0", "rl_finetune_supervised@sentiment-ppo-0",
                           "evaluate_zero_shot@sentiment-0", "evaluate_supervised@sentiment-0",
                           "evaluate_rl@sentiment-ppo-0", "evaluate_rl_supervised@sentiment-ppo-0"}

    run(["dvc", "repro"], dvc_repo)
    run(["git", "commit", "-qam", "double the sentiment reward"], dvc_repo)
    params = json.loads(run(["dvc", "params", "diff", "HEAD~1", "--json"], dvc_repo).stdout)
    assert "'weight': -0.1" in params["params/tasks/sentiment.yaml"]["reward.components"]["new"]
    metrics = json.loads(run(["dvc", "metrics", "diff", "HEAD~1", "--json"], dvc_repo).stdout)
    table_diff = metrics["results/grue_table.json"]
    zero_shot = table_diff["sentiment.zero_shot.reward"]  # same generations, a reward with a doubled term
    assert zero_shot["new"] != zero_shot["old"]
    assert "sentiment.ppo.reward" in table_diff
    assert not any(key.startswith("concepts.") and "reward" in key for key in table_diff)
    shown = run([sys.executable, "-m", "grueflow.cli", "diff", "HEAD~1", "HEAD"], dvc_repo).stdout.splitlines()
    assert shown[0] == f"results/grue_table.json: HEAD~1 -> HEAD ({len(table_diff)} changed values)"
    row = next(line.split() for line in shown if line.split()[:3] == ["sentiment", "zero_shot", "reward"])
    assert float(row[3]) == pytest.approx(zero_shot["old"], rel=1e-3) and float(row[4]) == pytest.approx(zero_shot["new"], rel=1e-3)

    run(["git", "checkout", "HEAD~1", "--", "params/tasks/sentiment.yaml"], dvc_repo)
    restored = run(["dvc", "repro"], dvc_repo)
    assert "rl_finetune@sentiment-ppo-0' is cached - skipping run" in restored.stdout
    assert (dvc_repo / "results" / "grue_table.csv").read_text() == table_before


def report_files(report: str) -> dict[str, bytes]:
    """The files a Snakemake HTML report embeds (base64 data URIs named by filename), by filename."""
    return {name: base64.b64decode(data)
            for name, data in re.findall(r"data:[\w/+.-]+;charset=[\w-]+;filename=([^;\"']+);base64,([A-Za-z0-9+/=]+)", report)}


def test_snakemake_report_holds_the_table_chart_samples_and_curves(snakemake_repo, tmp_path):
    """Issue 8: `snakemake --report` on the finished micro pipeline (reusing its outputs, no rerun)."""
    run(["snakemake", "--report", str(tmp_path / "report.html")], snakemake_repo)
    embedded = report_files((tmp_path / "report.html").read_text())
    assert {"grue_table.html", "grue_table.csv", "grue_chart.png", "samples.html", "curves.png",
            "loss_curve.png"} <= set(embedded)
    table = embedded["grue_table.html"].decode()
    assert "<h2>sentiment</h2>" in table and "<h2>concepts</h2>" in table
    assert all(f">{method}</td>" in table for method in ("zero_shot", "supervised", "ppo", "supervised+ppo"))
    assert embedded["grue_chart.png"].startswith(b"\x89PNG\r\n\x1a\n")
    assert embedded["grue_chart.png"] == (snakemake_repo / "results" / "grue_chart.png").read_bytes()
    samples = embedded["samples.html"].decode()
    first = json.loads((snakemake_repo / "results" / "eval" / "concepts" / "supervised+ppo" / "seed0" /
                        "predictions.jsonl").read_text().splitlines()[0])
    assert html.escape(first["generation"]) in samples and samples.count(">supervised+ppo</td>") == 6  # 2 tasks x 3


def test_grueflow_show_and_dvc_plots_on_the_finished_runs(snakemake_repo, dvc_repo):
    shown = run([sys.executable, "-m", "grueflow.cli", "show", "sentiment/ppo/seed0", "-n", "2"], snakemake_repo).stdout
    assert shown.startswith("results/eval/sentiment/ppo/seed0/predictions.jsonl: the first 2 samples")
    assert shown.count("\n  generation  ") == 2
    plots = json.loads(run(["dvc", "plots", "show", "--json"], dvc_repo).stdout)
    assert "errors" not in plots, plots.get("errors")
    kl = "results/sentiment/ppo/seed0/dvclive/plots/metrics/kl/coef.tsv"
    assert [point["coef"] for point in plots["data"][kl][0]["content"]["data"]["values"]] != []
    assert "results/grue_chart.png" in plots["data"]


@pytest.mark.parametrize("line, message", [
    ('seeds: ["0"]', "params/suite.yaml: seeds[0]: expected an integer, got '0'"),
    ("rl_starts: [zero_shot]", "params/suite.yaml: rl_starts ['zero_shot']: dvc.yaml runs RL from both starts"),
])
def test_an_invalid_suite_stops_dvc_repro_before_any_stage_runs(dvc_repo, line, message):
    """DVC's first stage validates the suite: an edit the pipeline cannot honour fails there, in one line, with
    every training stage left as it was; put back, the check's output is the same constant and nothing reruns."""
    suite = dvc_repo / "params" / "suite.yaml"
    original = suite.read_text()
    key = line.split(":")[0]
    try:
        suite.write_text("\n".join(row for row in original.splitlines() if not row.startswith(f"{key}:")) + f"\n{line}\n")
        repro = run(["dvc", "repro"], dvc_repo, check=False)
        output = repro.stdout + repro.stderr
        assert repro.returncode != 0 and message in output, output[-2000:]
        assert re.findall(r"Running stage '([^']+)'", output) == ["validate_suite"]
    finally:
        suite.write_text(original)
    run(["dvc", "repro"], dvc_repo)
    assert json.loads(run(["dvc", "status", "--json"], dvc_repo).stdout) == DVC_UP_TO_DATE


def test_dvc_repro_stops_on_vars_naming_a_second_suite_before_any_stage_trains(tmp_path):
    """A second suite named in dvc.yaml's vars instead of copied over params/suite.yaml: `dvc repro` trained its grid
    (one task, seed 1) while the first stage checked, and the table stage read, params/suite.yaml, exit 0 with the
    other suite's table. The first stage refuses it, naming the file and the copy to make, before any other runs."""
    repo = copy_project(tmp_path / "repo")
    mine = repo / "params" / "suites" / "mine.yaml"
    mine.parent.mkdir()
    suite = (repo / "params" / "suite.yaml").read_text()
    mine.write_text(suite.replace("tasks: [sentiment, concepts]", "tasks: [sentiment]")
                    .replace("seeds: [0]", "seeds: [1]"))
    assert mine.read_text() != suite
    document = (repo / "dvc.yaml").read_text()
    (repo / "dvc.yaml").write_text(document.replace("vars:\n  - params/suite.yaml\n",
                                                    "vars:\n  - params/suites/mine.yaml\n"))
    git_init(repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "a second suite in vars"], repo)
    repro = run(["dvc", "repro"], repo, check=False)
    output = repro.stdout + repro.stderr
    assert repro.returncode != 0 and ("error: dvc.yaml's vars name params/suites/mine.yaml, but its stages validate "
                                      "and tabulate params/suite.yaml alone") in output, output[-2000:]
    assert "(cp params/suites/mine.yaml params/suite.yaml), then put vars back with " \
           "`python -m grueflow.pipeline dvc --write`" in output
    assert re.findall(r"Running stage '([^']+)'", output) == ["validate_suite"]
    results = repo / "results"
    assert not results.exists() or not any(results.iterdir())  # nothing trained, nor the check's own outputs


def test_dvc_repro_keeps_a_copy_of_a_persons_file_or_edit_in_a_stage_folder_before_restoring_it(dvc_repo):
    """`dvc repro` restores a stage folder's outs from DVC's cache when they differ from dvc.lock, deleting a file a
    person put in an out folder (notes beside the model) and a hand edit (a number changed in metrics.json), with
    no copy and no word. Its first stage, run first on every `dvc repro`, copies both to .grueflow/replaced/ with a
    line, as the Snakefile does; the restore then puts the stages' own files back."""
    notes = dvc_repo / "results" / "sentiment" / "ppo" / "seed0" / "model" / "NOTES.md"
    metrics = dvc_repo / "results" / "eval" / "sentiment" / "ppo" / "seed0" / "metrics.json"
    written = metrics.read_text()
    try:
        notes.write_text("my notes on this run\n")
        record = json.loads(written)
        record["metrics"]["reward"] = record["metrics"]["reward"] - 1
        metrics.write_text(json.dumps(record, indent=2) + "\n")
        edited = metrics.read_text()
        repro = run(["dvc", "repro"], dvc_repo)
        for folder, files in (("results/sentiment/ppo/seed0", "model/NOTES.md"),
                              ("results/eval/sentiment/ppo/seed0", "metrics.json")):
            assert f"grueflow: {folder} holds what no stage record vouches for ({files}); a copy is kept in " \
                   f".grueflow/replaced/{folder}@" in repro.stdout + repro.stderr, (repro.stdout + repro.stderr)[-3000:]
            copy, = (dvc_repo / ".grueflow" / "replaced").glob(f"{folder}@*")
            assert (copy / files).read_text() == (edited if files == "metrics.json" else "my notes on this run\n")
        assert not notes.exists() and metrics.read_text() == written  # restored from DVC's cache
    finally:
        notes.unlink(missing_ok=True)
        shutil.rmtree(dvc_repo / ".grueflow", ignore_errors=True)
    assert json.loads(run(["dvc", "status", "--json"], dvc_repo).stdout) == DVC_UP_TO_DATE


def test_a_note_added_to_a_stage_record_by_hand_is_copied_before_either_engine_replaces_it(snakemake_repo, dvc_repo):
    """A note added by hand to an evaluation's stage.json (valid JSON) was lost with no copy: `dvc repro` checked the
    cached record out over it, and Snakemake, which reran the job as the record is not the one its job wrote, deleted
    it; the record beside a manifest counted as its stage's whatever its bytes. Each engine's run now copies it to
    .grueflow/replaced/ first, with the line other copies get; the stage's own record is back after the run, and a
    run of the finished project then prints no copy line."""
    folder = "results/eval/sentiment/ppo/seed0"
    dry_run = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"]
    for repo, command in ((snakemake_repo, ["snakemake", "--cores", "2", "results/grue_table.csv"]),
                          (dvc_repo, ["dvc", "repro"])):
        record = repo / folder / "stage.json"
        written = record.read_text()
        edited = json.dumps({**json.loads(written), "my_note": "run on the old GPU; numbers suspect"}, indent=2) + "\n"
        try:
            record.write_text(edited)
            result = run(command, repo)
            output = result.stdout + result.stderr
            copy, = (repo / ".grueflow" / "replaced").glob(f"{folder}@*")
            line = f"holds what no stage record vouches for (stage.json); a copy is kept in {copy.relative_to(repo)} " \
                "(a rerun of its stage replaces it whole)" if repo == dvc_repo else \
                f"its job reruns; a copy of what no stage record vouches for (stage.json) is kept in " \
                f"{copy.relative_to(repo)}"
            assert f"grueflow: {folder} " in output and line in output, output[-3000:]
            assert os.listdir(copy) == ["stage.json"] and (copy / "stage.json").read_text() == edited
            assert record.read_text() == written  # the stage's own record, rewritten or restored
        finally:
            record.write_text(written)
            shutil.rmtree(repo / ".grueflow", ignore_errors=True)
        again = run(dry_run if repo == snakemake_repo else command, repo)
        assert "grueflow:" not in again.stdout + again.stderr and not (repo / ".grueflow").exists()
    assert json.loads(run(["dvc", "status", "--json"], dvc_repo).stdout) == DVC_UP_TO_DATE


@pytest.mark.parametrize("link, target", [
    ("results/sentiment", "concepts"),  # a task's folder made a link to another task's
    ("results/sentiment/ppo/seed0", "../supervised+ppo/seed0"),  # a run's folder made a link to another method's
])
def test_dvc_repro_stops_before_writing_through_a_link_to_another_runs_folder(dvc_repo, tmp_path, link, target):
    """DVC restores a cached stage's outputs by checking them out, through any link at or above them, and runs no
    grueflow code first: with results/sentiment a link to results/concepts, `dvc repro` wrote sentiment's datapool,
    models and evaluations over concepts' finished runs, exit 0. Its first stage, run on every `dvc repro`, refuses
    the link before DVC checks out or runs anything else, naming it; what the link leads to is left as it was."""
    path = dvc_repo / link
    led_to = (path.parent / target).resolve()
    before = {p: p.read_bytes() for p in led_to.rglob("*") if p.is_file()}
    shutil.move(path, tmp_path / "aside")
    try:
        path.symlink_to(target)
        repro = run(["dvc", "repro"], dvc_repo, check=False)
        output = repro.stdout + repro.stderr
        assert repro.returncode != 0 and f"a link to {target}" in output and f"(rm {link})" in output, output[-2000:]
        assert re.findall(r"Running stage '([^']+)'", output) == ["validate_suite"] and "checking out" not in output
        assert {p: p.read_bytes() for p in led_to.rglob("*") if p.is_file()} == before
    finally:
        if path.is_symlink():
            path.unlink()
        shutil.move(tmp_path / "aside", path)
    run(["dvc", "repro"], dvc_repo)  # the first stage's outputs again, which DVC removed before its refusal
    assert json.loads(run(["dvc", "status", "--json"], dvc_repo).stdout) == DVC_UP_TO_DATE


def test_snakemake_rebuilds_a_stage_folder_replaced_by_another_runs(snakemake_repo):
    """A stage folder replaced by another valid one (``cp -a`` of supervised+ppo's over ppo's) passes its own checks,
    and Snakemake said "Nothing to be done"; then only its evaluation reran, and scored the other model under ppo's
    row. Its stage.json records the folder it was written to, so the copy is rebuilt, and what read it reruns after
    it; with the original put back (and the dry run's stale mark undone), nothing is planned."""
    results = snakemake_repo / "results"
    ppo, aside = results / "sentiment" / "ppo" / "seed0", results / "ppo_aside"
    tokens = snakemake_repo / ".snakemake" / "grueflow-stale.json"  # the stale check's rerun trigger
    saved_tokens = tokens.read_bytes() if tokens.exists() else None
    dry_run = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"]
    ppo.rename(aside)
    try:
        shutil.copytree(results / "sentiment" / "supervised+ppo" / "seed0", ppo, symlinks=True)  # copy2: times kept
        result = run(dry_run, snakemake_repo)
        assert planned_jobs(result.stdout) == {("rl_finetune", "sentiment", "ppo"), ("evaluate", "sentiment", "ppo"),
                                               ("aggregate", None, None)}
        assert ("grueflow: results/sentiment/ppo/seed0 is stale (damaged: its stage.json records results/sentiment/"
                "supervised+ppo/seed0 as its output: a copy of that folder); its job reruns") in result.stderr
    finally:
        shutil.rmtree(ppo, ignore_errors=True)
        aside.rename(ppo)
        if saved_tokens is None:
            tokens.unlink(missing_ok=True)
        else:
            tokens.write_bytes(saved_tokens)
    assert "Nothing to be done" in run(dry_run, snakemake_repo).stdout


def test_snakemake_rebuilds_an_older_copy_of_a_stage_folder_or_of_the_table_put_back(snakemake_repo):
    """An evaluation folder, and the GRUE table with its record, put back from a copy made before a params change:
    each whole, consistent with itself and at its own path, so that Snakemake, whose record of the params is its last
    job's, said "Nothing to be done". The copies (here: the records of another run's params, and the table's numbers
    and record edited alike) are not what Snakemake's jobs last wrote at those paths, so they are rebuilt; with the
    originals put back, nothing is planned."""
    import hashlib

    results = snakemake_repo / "results"
    evaluation, aside = results / "eval" / "sentiment" / "ppo" / "seed0", results / "eval_aside"
    table, record = results / "grue_table.csv", results / ".grue_table.csv.record.json"
    tokens = snakemake_repo / ".snakemake" / "grueflow-stale.json"  # the stale check's rerun trigger
    saved_table, saved_record, saved_tokens = table.read_bytes(), record.read_bytes(), \
        tokens.read_bytes() if tokens.exists() else None
    table_time = table.stat().st_mtime_ns
    dry_run = ["snakemake", "-n", "--cores", "2", "results/grue_table.csv"]
    evaluation.rename(aside)
    try:
        shutil.copytree(aside, evaluation, symlinks=True)  # copy2: times kept
        older = json.loads((evaluation / "stage.json").read_text())
        older["params"]["seed"] = "another run's params"
        del older[RECORD_DIGEST]
        write_json(evaluation / "stage.json", sealed(older))  # as its stage wrote it: no copy is made
        rows = saved_table.rstrip(b"\n") + b"1\n"  # another number in the last cell
        table.write_bytes(rows)
        record.write_text(json.dumps({**json.loads(saved_record), "results/grue_table.csv":
                                      hashlib.sha256(rows).hexdigest()}, indent=2, sort_keys=True) + "\n")
        os.utime(table, ns=(table_time, table_time))
        result = run(dry_run, snakemake_repo)
        assert planned_jobs(result.stdout) == {("evaluate", "sentiment", "ppo"), ("aggregate", None, None)}
        why = "is not the one its Snakemake job last wrote there (an older copy put back, a stage run by hand or " \
              "by dvc repro)"
        assert f"grueflow: results/eval/sentiment/ppo/seed0 is stale (its stage.json {why}); its job reruns\n" \
            in result.stderr
        assert (f"grueflow: results/grue_table.csv is stale (results/.grue_table.csv.record.json, the digests of what "
                f"its stage wrote, {why}); its job reruns") in result.stderr
    finally:
        shutil.rmtree(evaluation, ignore_errors=True)
        aside.rename(evaluation)
        table.write_bytes(saved_table)
        record.write_bytes(saved_record)
        os.utime(table, ns=(table_time, table_time))
        if saved_tokens is None:
            tokens.unlink(missing_ok=True)
        else:
            tokens.write_bytes(saved_tokens)
    assert "Nothing to be done" in run(dry_run, snakemake_repo).stdout


def test_snakemake_rebuilds_a_deleted_or_damaged_stage_folder_and_what_read_it(snakemake_repo):
    """Snakemake alone says "Nothing to be done" when a finished run's folder is deleted, and the table keeps its
    row; the Snakefile marks what was built from a deleted or damaged folder stale, so the dry run plans it."""
    results = snakemake_repo / "results"
    evaluation, aside = results / "eval" / "sentiment" / "ppo" / "seed0", results / "eval_aside"
    tokenizer = results / "sentiment" / "base_model" / "model" / "tokenizer.json"
    datapool, pool_aside = results / "sentiment" / "datapool", results / "datapool_aside"
    split = datapool / "test.jsonl"
    stamps = [results / "grue_table.csv", *results.rglob(".snakemake_timestamp")]
    times = {p: p.stat().st_mtime_ns for p in stamps}
    tokens = snakemake_repo / ".snakemake" / "grueflow-stale.json"  # the stale check's rerun trigger
    saved, saved_split, saved_tokens = tokenizer.read_bytes(), split.read_bytes(), \
        tokens.read_bytes() if tokens.exists() else None

    def unmark() -> None:
        """Undo the stale marks of a dry run (times and tokens) once the damage is repaired by hand."""
        for path, mtime in times.items():
            os.utime(path, ns=(mtime, mtime))
        if saved_tokens is None:
            tokens.unlink(missing_ok=True)
        else:
            tokens.write_bytes(saved_tokens)

    try:
        evaluation.rename(aside)
        result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert planned_jobs(result.stdout) == {("evaluate", "sentiment", "ppo"), ("aggregate", None, None)}
        assert ("grueflow: results/grue_table.csv is stale (it was built from results/eval/sentiment/ppo/seed0, "
                "which no longer exists); its job reruns") in result.stderr
        aside.rename(evaluation)
        tokenizer.unlink()
        result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert planned_jobs(result.stdout) == {("base_model", "sentiment", None), ("warm_start", "sentiment", None),
                                               *SENTIMENT_RL_JOBS}
        assert ("grueflow: results/sentiment/base_model is stale (damaged: model/tokenizer.json is missing); "
                "its job reruns") in result.stderr
        tokenizer.write_bytes(saved)
        unmark()
        table_md = results / "grue_table.md"  # make run cats it: deleted, it was never rebuilt
        markdown = table_md.read_bytes()
        table_md.unlink()
        result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert planned_jobs(result.stdout) == {("aggregate", None, None)}
        assert ("grueflow: results/grue_table.csv is stale (results/grue_table.md, written with it, is missing); its "
                "job reruns") in result.stderr
        table_md.write_bytes(markdown)
        unmark()
        # a job whose inputs are small files (prepare_datapool's: its code) was never rerun by the 1970 stamp:
        # Snakemake takes an input newer than the output whose checksum it recorded as unchanged
        split.unlink()
        result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert ("grueflow: results/sentiment/datapool is stale (damaged: test.jsonl is missing); its job reruns"
                in result.stderr)
        assert {("prepare_datapool", "sentiment", None), ("base_model", "sentiment", None)} <= \
            planned_jobs(result.stdout)
        split.write_bytes(saved_split)
        unmark()
        datapool.rename(pool_aside)  # gone: what read it reruns, and so it is rebuilt (it was never)
        result = run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"], snakemake_repo)
        assert ("grueflow: results/sentiment/base_model is stale (it was built from results/sentiment/datapool, which "
                "no longer exists); its job reruns") in result.stderr
        assert {("prepare_datapool", "sentiment", None), ("base_model", "sentiment", None)} <= \
            planned_jobs(result.stdout)
    finally:
        if aside.exists():
            aside.rename(evaluation)
        if pool_aside.exists():
            pool_aside.rename(datapool)
        if not (results / "grue_table.md").exists():
            (results / "grue_table.md").write_bytes(markdown)
        tokenizer.write_bytes(saved)
        split.write_bytes(saved_split)
        unmark()
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "2", "results/grue_table.csv"],
                                       snakemake_repo).stdout
