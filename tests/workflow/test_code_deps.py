"""Computed code dependencies under both engines, on the micro suite (with DPO, so every stage is in the DAG).

No stage runs: every output of both engines is created empty, then marked complete by `snakemake --touch
--forceall` (outputs newer than their inputs, in the DAG's order) and by `dvc commit -f --no-relink` (dvc.lock
with every dep's hash; the workspace files are left as they are, so Snakemake's timestamps stay in order).
Then editing grueflow/distributed.py makes exactly warm_start and rl_finetune stale under both engines (an
input newer than the outputs; a changed dep hash), and editing a module that no stage imports makes nothing stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from grueflow.io import files_record, json_text, sha256_bytes
from grueflow.pipeline import PLUGIN_CODE, STAGES, SUITE_CHECK, SUITE_FILE
from tests.conftest import ROOT, copy_project, git_init, run
from tests.workflow.test_plugin_workflow import add_readme_reward

pytestmark = pytest.mark.slow

PROBE = "grueflow/rl/_unused_probe.py"  # a module no stage imports, in a package that stages do import
HUMAN_TARGETS = ("results/human/sentiment/batches/likert_seed0",
                 "results/human/sentiment/batches/supervised+ppo_vs_supervised_seed0", "results/human_eval_table.csv")
FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".md", ".html", ".png")


VALIDATE = ["python", "-m", "grueflow.suite_check", SUITE_FILE, "--out", SUITE_CHECK,
            "--plugin-code", PLUGIN_CODE]  # dvc.yaml's first stage


def dry_run(repo: Path, *args: str) -> list[dict[str, str]]:
    """Every job `snakemake -n [args]` plans (rule `all` left out): its rule and its ``input``/``output``/``reason``."""
    text = run(["snakemake", "-n", "--cores", "1", *(args or ["all"])], repo).stdout
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if head and head.group(1) != "all":
            jobs.append({"rule": head.group(1), **dict(re.findall(r"^    (input|output|reason): (.*)$", block, re.M))})
    return jobs


def dvc_outputs(repo: Path) -> list[str]:
    """The outs, metrics and plots of every stage of the copy's dvc.yaml, as DVC resolves its grid."""
    script = ("from dvc.repo import Repo\n"
              "print('\\n'.join(str(o.def_path) for s in Repo('.').index.stages for o in s.outs))")
    return run(["python", "-c", script], repo).stdout.split()


def create(repo: Path, paths: list[str]) -> None:
    """Each path as a folder holding only a stage record with an empty manifest (as every stage writes one: a
    stage folder without it is stale; in the text a stage writes, so that no run copies it), or an empty file when
    it has a file suffix (``{}`` for JSON; the record for ``stage.json``)."""
    record = json_text({"files": {}})
    for path in map(repo.joinpath, paths):
        if path.suffix in FILE_SUFFIXES:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(record if path.name == "stage.json" else "{}\n" if path.suffix == ".json" else "")
        else:
            path.mkdir(parents=True, exist_ok=True)
            (path / "stage.json").write_text(record)


@contextlib.contextmanager
def edited(path: Path) -> Iterator[None]:
    """A comment appended to ``path`` (newer than every output, other content), then its content and times
    restored."""
    text, stat = path.read_text(), path.stat()
    path.write_text(text + "# edited\n")
    try:
        yield
    finally:
        path.write_text(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def rewrite_in_place(path: Path, old: bytes, new: bytes) -> bytes:
    """Replace the first ``old`` in ``path`` by ``new`` (of the same length) in place, the same inode, and put its
    modification time back: a rewrite that DVC's hash cache and Python's bytecode check both take as no change. The
    bytes it held."""
    assert len(old) == len(new)
    before, held = path.stat(), path.read_bytes()
    assert old in held
    with path.open("r+b") as file:
        file.write(held.replace(old, new, 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return held


UNSEEN_CODE_LINE = (
    "grueflow: grueflow/data/synthetic.py changed since dvc.lock recorded it, and its modification time is not that of "
    "its last change (kept or set over a rewrite), which DVC's own hash cache (kept by inode, size and modification "
    "time) may take as unchanged: its time is set to now so that DVC hashes it again")
DAMAGED_TRAIN_LINE = (
    "grueflow: results/sentiment/datapool/train.jsonl does not match the digest its stage recorded in stage.json at "
    "the size it has, and its modification time is not that of its last change (kept or set over a rewrite), which "
    "DVC's own hash cache (kept by inode, size and modification time) may take as unchanged: its time is set to now "
    "so that DVC hashes it again and restores or reruns {}")


def dvc_datapool(tmp_path: Path) -> tuple[Path, str, Path]:
    """A micro project ``tmp_path/repo`` committed to git whose sentiment datapool ``dvc repro`` built: the project,
    the DVC stage and its train.jsonl."""
    repo = copy_project(tmp_path / "repo")
    git_init(repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "micro suite"], repo)
    target = "prepare_datapool@sentiment"
    run(["dvc", "repro", target], repo)
    return repo, target, repo / "results" / "sentiment" / "datapool" / "train.jsonl"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """The micro suite with DPO, every output created empty and marked complete under both engines."""
    repo = copy_project(tmp_path_factory.mktemp("code_deps"))
    suite = repo / "params" / "suite.yaml"
    suite.write_text(suite.read_text().replace("preference_methods: []", "preference_methods: [dpo]"))
    (repo / PROBE).write_text('"""A module that no stage imports."""\n')
    answers = repo / "data" / "human" / "sentiment" / "likert_seed0" / "answers.jsonl"  # for the import rules
    answers.parent.mkdir(parents=True)
    answers.write_text("")
    git_init(repo)
    mark_complete(repo, "micro suite, marked complete")
    return repo


def mark_complete(repo: Path, message: str) -> None:
    """Every output of both engines created empty, the first DVC stage's (the suite check and the plugin
    digests) written for real, marked complete under both engines and committed."""
    outputs = [out for job in dry_run(repo) for out in job["output"].split(", ")] + dvc_outputs(repo)
    create(repo, [out for out in outputs if out not in (SUITE_CHECK, PLUGIN_CODE)])
    record_digests(repo)
    run(VALIDATE, repo)
    run(["snakemake", "--cores", "1", "--touch", "--forceall", "all"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", message], repo)
    run(["dvc", "commit", "-f", "-q", "--no-relink"], repo)


def record_digests(repo: Path) -> None:
    """The digests the table stages and the pairwise export record beside what they write (grueflow.io.files_record),
    for the files :func:`create` made: without them the Snakefile's stale check rebuilds the tables and keys."""
    tables = [list(STAGES[stage].outputs.values()) for stage in ("aggregate", "human_eval_table")]  # the CSV first
    keys = [[str(key.relative_to(repo))] for key in repo.glob("results/human/*/keys/*.json")]
    for written in [*tables, *keys]:
        present = [path for path in written if (repo / path).is_file()]
        if present:
            record = {path: sha256_bytes(repo / path) for path in present}
            files_record(repo / written[0]).write_text(json.dumps(record) + "\n")


def stale_dvc_stages(repo: Path) -> dict[str, object]:
    """`dvc status --json` without the first stage's "always changed" (it runs on every `dvc repro`): each stage
    that is stale, with why."""
    status = json.loads(run(["dvc", "status", "--json"], repo).stdout)
    check = [entry for entry in status.pop("validate_suite", []) if entry != "always changed"]
    return {**({"validate_suite": check} if check else {}), **status}


def test_every_snakemake_job_has_its_stage_cli_and_import_closure_as_inputs(finished):
    jobs = dry_run(finished, "--forceall", "all", *HUMAN_TARGETS)
    # every rule, the human ones included, but train_classifier: built only when a task names a classifier
    assert {job["rule"] for job in jobs} == set(STAGES) - {"train_classifier"}
    for job in jobs:
        missing = set(STAGES[job["rule"]].code) - set(job["input"].split(", "))
        assert not missing, f"{job['rule']} ({job['output']}) lacks the code inputs {sorted(missing)}"


def test_the_finished_run_is_up_to_date_under_both_engines(finished):
    assert dry_run(finished) == []
    assert stale_dvc_stages(finished) == {}


def test_editing_a_module_no_stage_imports_reruns_nothing(finished):
    with edited(finished / PROBE):
        assert dry_run(finished) == []
        assert stale_dvc_stages(finished) == {}


def test_editing_distributed_py_makes_the_stages_that_import_it_stale_under_both_engines(finished):
    """warm_start and rl_finetune (and any other stage whose CLI reaches the module) become stale, nothing else."""
    importers = {name for name, stage in STAGES.items() if "grueflow/distributed.py" in stage.code}
    assert {"warm_start", "rl_finetune"} <= importers and not {"prepare_datapool", "evaluate", "aggregate"} & importers
    dvc_importers = {v.name for name in importers for v in STAGES[name].dvc}
    with edited(finished / "grueflow" / "distributed.py"):
        jobs = dry_run(finished)
        status = stale_dvc_stages(finished)
    updated = {job["rule"] for job in jobs if "grueflow/distributed.py" in job.get("reason", "")}
    assert {"warm_start", "rl_finetune"} <= updated and updated == importers & {job["rule"] for job in jobs}
    assert not {"prepare_datapool", "base_model"} & {job["rule"] for job in jobs}
    stages = run(["dvc", "stage", "list", "--name-only"], finished).stdout.split()
    assert {"warm_start@sentiment-0", "rl_finetune@sentiment-ppo-0", "rl_finetune_supervised@concepts-ppo-0"} \
        <= set(status)
    assert set(status) == {name for name in stages if name.split("@")[0] in dvc_importers}
    assert all(entry == [{"changed deps": {"grueflow/distributed.py": "modified"}}] for entry in status.values())


def test_a_code_edit_that_kept_an_older_time_reruns_the_stages_that_import_it_under_snakemake(finished):
    """A module edited by a copy that keeps the file's older time (cp -p, rsync -a, tar x, a clock behind) was
    "Nothing to be done" under Snakemake, which judges its code inputs by time, while DVC, which hashes them,
    reran the stages: the digest of each rule's code is a param, so exactly the stages that import it rerun."""
    path = finished / "grueflow" / "distributed.py"
    text, stat = path.read_text(), path.stat()
    importers = {name for name, stage in STAGES.items() if "grueflow/distributed.py" in stage.code}
    try:
        path.write_text(text + "# edited\n")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # its old time: older than every output
        jobs = dry_run(finished)
    finally:
        path.write_text(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = {job["rule"] for job in jobs if "Params have changed since last execution" in job.get("reason", "")}
    assert {"warm_start", "rl_finetune"} <= changed and changed == importers & {job["rule"] for job in jobs}
    assert not {"prepare_datapool", "base_model"} & {job["rule"] for job in jobs}
    assert dry_run(finished) == []  # the code as it was: its digest is the recorded one again


def test_rerun_triggers_without_params_are_refused_before_the_stale_check(finished):
    """With --rerun-triggers mtime, an edited method file and a stale stage folder (its record deleted) were "Nothing
    to be done", after a line saying the folder's job reruns: grueflow reruns both through params. The run is refused
    before the stale check says or marks anything; with Snakemake's default triggers the edit plans its jobs."""
    method, record = finished / "params" / "methods" / "ppo.yaml", finished / "results/sentiment/base_model/stage.json"
    tokens = finished / ".snakemake" / "grueflow-stale.json"  # the stale check's rerun trigger
    saved_tokens = tokens.read_bytes() if tokens.exists() else None
    text, stat = method.read_text(), method.stat()
    refused = ("--rerun-triggers mtime leaves out params (a params or method file edited, a stale line), input (a "
               "batch's answers removed from data/human/) and code (a rule's command changed)")
    mtime = ["snakemake", "-n", "--cores", "1", "all", "--rerun-triggers", "mtime"]
    method.write_text(text.replace("learning_rate: 0.0005", "learning_rate: 0.0004"))
    try:
        assert "rl_finetune" in {job["rule"] for job in dry_run(finished)}
        result = run(mtime, finished, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and refused in output and "Job stats" not in output, output
        record.rename(record.with_name("record.aside"))
        result = run(mtime, finished, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and refused in output and "grueflow:" not in output, output
        assert (tokens.read_bytes() if tokens.exists() else None) == saved_tokens
    finally:
        if record.with_name("record.aside").exists():
            record.with_name("record.aside").rename(record)
        method.write_text(text)
        os.utime(method, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert dry_run(finished) == []


@pytest.fixture(scope="module")
def with_plugin(tmp_path_factory) -> Path:
    """The micro suite whose sentiment task runs the README's reward module (as its reward and a metric), with
    dvc.yaml regenerated for it and every output marked complete."""
    repo = copy_project(tmp_path_factory.mktemp("plugin_deps"))
    add_readme_reward(repo, headline=False)
    git_init(repo)
    stale = subprocess.run(VALIDATE, cwd=repo, capture_output=True, text=True, timeout=300)
    assert stale.returncode == 2 and "my_rewards.py" in stale.stderr, stale.stderr  # dvc.yaml predates the plugin
    assert "python -m grueflow.pipeline dvc --write" in stale.stderr
    run(["python", "-m", "grueflow.pipeline", "dvc", "--write"], repo)
    mark_complete(repo, "micro suite with a plugin, marked complete")
    return repo


def test_the_plugin_digests_name_the_module_for_the_stages_that_run_it(with_plugin):
    code = with_plugin / PLUGIN_CODE
    digest = json.loads((code / "sentiment" / "rl_finetune.json").read_text())
    assert digest["import_paths"] == ["my_rewards:Brevity"] and list(digest["sha256"]) == ["my_rewards.py"]
    for stage in ("warm_start", "evaluate", "build_preferences"):  # a metric; reward and metric; the reward
        assert json.loads((code / "sentiment" / f"{stage}.json").read_text())["sha256"].keys() == {"my_rewards.py"}
    assert json.loads((code / "sentiment" / "prepare_datapool.json").read_text())["sha256"] == {}
    assert all(json.loads(p.read_text())["sha256"] == {} for p in (code / "concepts").iterdir())


def test_editing_a_plugin_reruns_exactly_the_dvc_stages_that_run_it(with_plugin):
    assert stale_dvc_stages(with_plugin) == {}
    with edited(with_plugin / "my_rewards.py"):
        assert set(stale_dvc_stages(with_plugin)) == {"validate_suite"}
        run(["dvc", "repro", "--single-item", "validate_suite"], with_plugin)
        status = stale_dvc_stages(with_plugin)
    table_stage = {v.name: s.name for s in STAGES.values() for v in s.dvc}
    runners = {v.name for s in STAGES.values() if {"reward", "metrics"} & set(s.plugin_parts) for v in s.dvc}
    assert {name.split("@")[0] for name in status} <= runners
    assert {"warm_start@sentiment-0", "rl_finetune@sentiment-ppo-0", "rl_finetune_supervised@sentiment-ppo-0",
            "evaluate_zero_shot@sentiment-0", "evaluate_rl@sentiment-ppo-0"} <= set(status)
    for name, entry in status.items():  # the task's digest of what the stage runs, nothing else
        digest = f"{PLUGIN_CODE}/sentiment/{table_stage[name.split('@')[0]]}.json"
        assert entry == [{"changed deps": {digest: "modified"}}], (name, entry)
    run(["dvc", "repro", "--single-item", "validate_suite"], with_plugin)  # the module as it was: so its digests
    assert stale_dvc_stages(with_plugin) == {}


def test_a_datapools_local_data_is_an_input_under_both_engines(tmp_path):
    """Editing a custom datapool's data file rebuilds the datapool: Snakemake takes the file (and a data_root
    folder) as the job's input; DVC's first stage depends on it and writes its digest into the datapool's."""
    repo = copy_project(tmp_path / "repo")
    (repo / "data").mkdir()
    rows = "".join(json.dumps({"prompt": f"{i} + 1 =", "references": [str(i + 1)]}) + "\n" for i in range(6))
    for split in ("train", "validation", "test"):
        (repo / "data" / f"{split}.jsonl").write_text(rows)
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["datapool"] = {"id": "custom", "args": {"data_files": {s: f"data/{s}.jsonl" for s in
                                                                ("train", "validation", "test")}}}
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))
    jobs = dry_run(repo, "--forceall", "results/sentiment/datapool")
    assert {f"data/{s}.jsonl" for s in ("train", "validation", "test")} <= set(jobs[0]["input"].split(", "))
    git_init(repo)
    stale = subprocess.run(VALIDATE, cwd=repo, capture_output=True, text=True, timeout=300)
    assert stale.returncode == 2 and "user code or data" in stale.stderr and "data/train.jsonl" in stale.stderr
    run(["python", "-m", "grueflow.pipeline", "dvc", "--write"], repo)
    document = yaml.safe_load((repo / "dvc.yaml").read_text())
    assert "data/test.jsonl" in document["stages"]["validate_suite"]["deps"]
    run(VALIDATE, repo)
    digest = json.loads((repo / PLUGIN_CODE / "sentiment" / "prepare_datapool.json").read_text())
    before = digest["sha256"]["data/train.jsonl"]
    (repo / "data" / "train.jsonl").write_text(rows + json.dumps({"prompt": "9 + 1 =", "references": ["10"]}) + "\n")
    run(VALIDATE, repo)
    after = json.loads((repo / PLUGIN_CODE / "sentiment" / "prepare_datapool.json").read_text())["sha256"]
    assert after["data/train.jsonl"] != before and set(after) == {f"data/{s}.jsonl" for s in
                                                                  ("train", "validation", "test")}


def write_data(folder: Path, version: str) -> None:
    """Six rows of train and test data (``<version> ref <i>`` references) as JSON lines in ``folder``."""
    for split in ("train", "test"):
        rows = [{"prompt": f"{split} prompt {i}", "references": [f"{version} ref {i}"]} for i in range(6)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def custom_datapool_project(tmp_path: Path) -> Path:
    """A copy of the micro suite (``tmp_path/repo``) whose sentiment datapool reads local data/train.jsonl and
    data/test.jsonl (:func:`write_data`, version v1; val taken from train)."""
    repo = copy_project(tmp_path / "repo")
    (repo / "data").mkdir()
    write_data(repo / "data", "v1")
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["datapool"] = {"id": "custom", "args": {"data_files": {s: f"data/{s}.jsonl" for s in ("train", "test")},
                                                 "source_splits": {"val": "train"}}}
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))
    return repo


def test_a_datapools_data_replaced_by_an_older_file_rebuilds_it_under_snakemake(tmp_path):
    """A data file swapped for one with an older modification time (moved in from a download folder, cp -p, a
    restored archive) was never read again: Snakemake said "Nothing to be done" and every later stage used the
    old data, while DVC, which compares content, rebuilt it. The digest of the job's local files is a param."""
    repo = custom_datapool_project(tmp_path)
    write_data(tmp_path, "v2")
    target = "results/sentiment/datapool"
    run(["snakemake", "--cores", "1", target], repo)
    assert "v1 ref 0" in (repo / target / "train.jsonl").read_text()
    os.utime(tmp_path / "train.jsonl", (1_577_836_800, 1_577_836_800))  # 2020: older than the datapool
    os.replace(tmp_path / "train.jsonl", repo / "data" / "train.jsonl")
    (job,) = dry_run(repo, target)  # by the content param, and by the stale check's stamp (the recorded digest)
    assert job["rule"] == "prepare_datapool" and "data/train.jsonl" in job["reason"]
    run(["snakemake", "--cores", "1", target], repo)
    assert "v2 ref 0" in (repo / target / "train.jsonl").read_text()
    assert dry_run(repo, target) == []


def test_a_touch_after_a_datapools_data_edit_is_refused_and_a_touched_datapool_still_rebuilds(tmp_path):
    """``snakemake --touch`` after an edit of a datapool's local data recorded the new data's digest as the job's
    param without running it: from then on every run said the datapool "is stale ...; its job reruns", then
    "Nothing to be done", and the datapool kept the old data. The touch is refused, naming the folder and the file;
    a datapool touched anyway (past the refusal, with --no-hooks) is rebuilt from the new data by the next run."""
    repo = custom_datapool_project(tmp_path)
    target = "results/sentiment/datapool"
    run(["snakemake", "--cores", "1", target], repo)
    data = repo / "data" / "train.jsonl"
    data.write_text(data.read_text().replace("v1 ref 0", "v2 ref 0"))
    touch = ["snakemake", "--touch", "--cores", "1", target]
    refused = run(touch, repo, check=False)
    assert refused.returncode != 0
    assert ("--touch would mark 1 stage folder built from other data than now as up to date: results/sentiment/"
            "datapool (data/train.jsonl changed since it was built); their results, and what reads them, would pass "
            "for the new data's. Run without --touch to rebuild them") in refused.stderr, refused.stderr[-3000:]
    run([*touch, "--no-hooks"], repo)  # past the refusal: Snakemake's record holds the new data's digest
    (job,) = dry_run(repo, target)
    assert job["rule"] == "prepare_datapool"
    rebuilt = run(["snakemake", "--cores", "1", target], repo)
    assert ("grueflow: results/sentiment/datapool is stale (its input data/train.jsonl changed since it was built); "
            "its job reruns") in rebuilt.stderr
    assert "v2 ref 0" in (repo / target / "train.jsonl").read_text()
    assert dry_run(repo, target) == []


def test_a_touch_over_a_code_edit_holds_once_snakemakes_record_is_gone(tmp_path):
    """``snakemake --touch`` after a comment edit to a module a stage runs marks its folder up to date; with
    ``.snakemake`` removed since (a clone, a clean-up), the stale check read the code record of the folder's
    provenance, still the old code's, and reran it. The touch now records the code it accepted there."""
    repo = custom_datapool_project(tmp_path)
    target = "results/sentiment/datapool"
    run(["snakemake", "--cores", "1", target], repo)
    module = repo / "grueflow" / "data" / "grue.py"
    module.write_text(module.read_text() + "# a comment\n")
    (job,) = dry_run(repo, target)
    assert job["rule"] == "prepare_datapool"
    run(["snakemake", "--touch", "--cores", "1", target], repo)
    assert dry_run(repo, target) == []
    shutil.rmtree(repo / ".snakemake")
    assert dry_run(repo, target) == []
    module.write_text(module.read_text() + "# another\n")  # an edit after the touch still counts
    os.utime(module, ns=(0, (repo / target / "stage.json").stat().st_mtime_ns - 10**9))
    (job,) = dry_run(repo, target)
    assert job["rule"] == "prepare_datapool"


def test_a_dvc_dep_rewritten_in_place_with_its_size_and_time_kept_reruns_its_stage(tmp_path):
    """A module a stage runs rewritten in place with the same size and its modification time put back: DVC's own
    hash cache (by inode, size and time) still gave the old md5, so `dvc repro` said the stage "didn't change" and
    the datapool kept the old words, while Snakemake rebuilt it. DVC's first stage sets the file's time to now, and
    the same `dvc repro` reruns the stage; the next one finds nothing to do."""
    repo, target, train = dvc_datapool(tmp_path)
    assert "great" in train.read_text()
    run(["python", "-m", "compileall", "-q", "grueflow"], repo)  # the bytecode any earlier import leaves
    rewrite_in_place(repo / "grueflow" / "data" / "synthetic.py", b'"great"', b'"grand"')
    repro = run(["dvc", "repro", target], repo)
    assert UNSEEN_CODE_LINE in repro.stdout + repro.stderr
    assert f"Running stage '{target}'" in repro.stdout, repro.stdout
    assert "great" not in train.read_text() and "grand" in train.read_text()
    again = run(["dvc", "repro", target], repo)
    assert "didn't change" in again.stdout and "grueflow: grueflow/data/synthetic.py" not in again.stdout + again.stderr


@pytest.mark.parametrize("record", ["kept", "removed"])
def test_a_module_rewritten_in_place_with_its_size_and_time_kept_reruns_with_its_new_code_under_snakemake(tmp_path,
                                                                                                         record):
    """A module a stage runs rewritten in place with the same size and its modification time put back, its bytecode
    in __pycache__ (as any earlier run leaves it): the code's digest reran the stage, but Python took the bytecode as
    current (it checks the source's time and size only), so the datapool was built again with the old words while
    recording the new code. The stale check sets the file's time to now where its digest cache knew the file, and
    the stages check grueflow's bytecode by content, so the rerun runs the new code with .snakemake removed too."""
    repo = copy_project(tmp_path / "repo")
    target = "results/sentiment/datapool"
    run(["snakemake", "--cores", "1", target], repo)
    train = repo / target / "train.jsonl"
    assert "great" in train.read_text()
    run(["python", "-m", "compileall", "-q", "grueflow"], repo)  # the bytecode any earlier import leaves
    if record == "removed":
        shutil.rmtree(repo / ".snakemake")
    rewrite_in_place(repo / "grueflow" / "data" / "synthetic.py", b'"great"', b'"grand"')
    result = run(["snakemake", "--cores", "1", target], repo)
    assert "great" not in train.read_text() and "grand" in train.read_text()
    restamped = ("grueflow: grueflow/data/synthetic.py changed with its size and modification time kept, which "
                 "Python's bytecode cache (__pycache__) takes as unchanged: its time is set to now so that the stages "
                 "that run it compile it again")
    assert (restamped in result.stderr) == (record == "kept"), result.stderr[-3000:]
    assert dry_run(repo, target) == []


def test_a_dvc_stage_folders_file_damaged_in_place_with_its_size_and_time_kept_is_restored(tmp_path):
    """A datapool file changed in place with its size and modification time kept: DVC's own hash cache (by inode,
    size and time) still gave the md5 dvc.lock records, so `dvc repro` said the stage "didn't change" and kept the
    damaged file, while Snakemake rebuilt the folder. DVC's first stage finds the file unlike its stage.json
    manifest, names it and sets its time to now, a copy is kept, and the same `dvc repro` puts the stage's own
    bytes back; the next one finds nothing to do."""
    repo, target, train = dvc_datapool(tmp_path)
    built = rewrite_in_place(train, b"great", b"grand")
    repro = run(["dvc", "repro", target], repo)
    said = repro.stdout + repro.stderr
    assert DAMAGED_TRAIN_LINE.format(target) in said, said[-3000:]
    assert train.read_bytes() == built
    copy, = (repo / ".grueflow" / "replaced" / "results" / "sentiment").glob("datapool@*")
    assert (copy / "train.jsonl").read_bytes() == built.replace(b"great", b"grand", 1)
    again = run(["dvc", "repro", target], repo)
    assert "didn't change" in again.stdout and "grueflow:" not in again.stdout + again.stderr


@pytest.mark.parametrize("written", ["by dvc checkout", "ahead"])
def test_a_dvc_stage_folders_file_damaged_with_its_time_kept_is_restored_whatever_its_time(tmp_path, written):
    """The same damage, where the datapool's files are dated after its stage.json (``dvc checkout`` restored the
    folder, after ``rm -rf``, a branch switch or a fresh clone: it writes a folder's files in no fixed order) or in
    the future (built, or ``rsync -a``'d from a host, while the clock ran an hour ahead), after a ``dvc status``:
    `dvc repro` said the stage "didn't change" and kept the damaged file, while a line said a rerun of its stage
    would replace it. It is named and restored in the same `dvc repro`."""
    repo, target, train = dvc_datapool(tmp_path)
    record = train.parent / "stage.json"
    if written == "by dvc checkout":
        shutil.rmtree(train.parent)
        run(["dvc", "checkout", "-q", str(train.parent.relative_to(repo))], repo)
        dated = record.stat().st_mtime_ns + 10**9  # the order DVC happened to write them in this time
        os.utime(train, ns=(dated, dated))
    else:
        ahead = time.time_ns() + 3600 * 10**9
        for file in (repo / "results").rglob("*"):
            os.utime(file, ns=(ahead, ahead))
    run(["dvc", "status"], repo)  # DVC's hash cache holds the files at these times
    built = rewrite_in_place(train, b"great", b"grand")
    repro = run(["dvc", "repro", target], repo)
    said = repro.stdout + repro.stderr
    assert DAMAGED_TRAIN_LINE.format(target) in said, said[-3000:]
    assert train.read_bytes() == built
    again = run(["dvc", "repro", target], repo)
    assert "didn't change" in again.stdout and "grueflow:" not in again.stdout + again.stderr


@pytest.mark.parametrize("dated", ["ahead", "touched"])
def test_a_dvc_dep_rewritten_with_its_time_kept_reruns_its_stage_whatever_its_time(tmp_path, dated):
    """The same rewrite of a module, where the project's files and dvc.lock are dated in the future (built, or
    ``rsync -a``'d from a host, while the clock ran an hour ahead) or the module was touched after dvc.lock (``git
    stash && git stash pop``, a branch switch and back), after a ``dvc status``: `dvc repro` said the stage "didn't
    change". It is named and the same `dvc repro` reruns the stage."""
    repo, target, train = dvc_datapool(tmp_path)
    module = repo / "grueflow" / "data" / "synthetic.py"
    if dated == "ahead":
        ahead = time.time_ns() + 3600 * 10**9
        for file in [repo / "dvc.lock", *(repo / "grueflow").rglob("*.py"), *(repo / "results").rglob("*")]:
            os.utime(file, ns=(ahead, ahead))
    else:
        os.utime(module)
    run(["dvc", "status"], repo)  # DVC's hash cache holds the module at this time, as recorded
    run(["python", "-m", "compileall", "-q", "grueflow"], repo)
    rewrite_in_place(module, b'"great"', b'"grand"')
    repro = run(["dvc", "repro", target], repo)
    assert UNSEEN_CODE_LINE in repro.stdout + repro.stderr, (repro.stdout + repro.stderr)[-3000:]
    assert f"Running stage '{target}'" in repro.stdout, repro.stdout
    assert "great" not in train.read_text() and "grand" in train.read_text()


def test_a_datapools_data_is_an_input_when_grueflow_is_a_link_to_another_checkout(tmp_path):
    """With grueflow/ a symbolic link to a checkout, the data paths were looked up in that checkout: they named
    nothing there, so the datapool had no data input and no content digest, and an edited file rebuilt nothing."""
    repo = copy_project(tmp_path / "repo")
    shutil.rmtree(repo / "grueflow")
    (repo / "grueflow").symlink_to(ROOT / "grueflow")
    (repo / "data").mkdir()
    rows = "".join(json.dumps({"prompt": f"{i} + 1 =", "references": [str(i + 1)]}) + "\n" for i in range(6))
    for split in ("train", "test"):
        (repo / "data" / f"{split}.jsonl").write_text(rows)
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["datapool"] = {"id": "custom", "args": {"data_files": {s: f"data/{s}.jsonl" for s in ("train", "test")},
                                                 "source_splits": {"val": "train"}}}
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))
    (job,) = dry_run(repo, "--forceall", "results/sentiment/datapool")
    assert {"data/train.jsonl", "data/test.jsonl"} <= set(job["input"].split(", "))


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_learned_classifier_named_by_its_path_in_the_project_plans_train_classifier(tmp_path, form):
    """learned_classifier's model given as the absolute path of results/<task>/classifier/model inside the project
    planned no train_classifier: RL trained, and evaluate failed after it, the folder absent."""
    repo = copy_project(tmp_path / "repo")
    (repo / "data").mkdir()
    rows = "".join(json.dumps({"text": f"review {i}", "label": i % 2}) + "\n" for i in range(8))
    (repo / "data" / "reviews.jsonl").write_text(rows)
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["classifier"] = {"train_file": "data/reviews.jsonl", "labels": ["NEGATIVE", "POSITIVE"]}
    model = "results/sentiment/classifier/model"
    task["metrics"].append({"id": "learned_classifier",
                            "args": {"model": str(repo / model) if form == "absolute" else model}})
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))
    jobs = {job["rule"]: job for job in dry_run(repo, "results/eval/sentiment/ppo/seed0")}
    assert jobs["train_classifier"]["output"] == "results/sentiment/classifier"
    assert "results/sentiment/classifier" in jobs["evaluate"]["input"].split(", ")


def test_a_scorers_local_checkpoint_is_an_input_under_both_engines(tmp_path):
    """A metric's args naming a local folder (a classifier checkpoint of one's own): Snakemake takes it as an
    input of the jobs that score with it, and DVC's first stage depends on it and writes its digest into those
    stages' digest files, so replacing the checkpoint reruns exactly them. A hub id is not a path."""
    repo = copy_project(tmp_path / "repo")
    checkpoint = repo / "models" / "judge"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text('{"v": 1}')
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["metrics"].append({"id": "learned_classifier", "args": {"model": "models/judge/", "label": "POSITIVE"}})
    task["metrics"].append({"id": "bert_score", "args": {"model": "roberta-large"}})
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))
    (checkpoint / "sub").mkdir()
    (checkpoint / "sub" / "weights.bin").write_bytes(b"\0")
    jobs = {job["rule"]: job for job in dry_run(repo, "--forceall", "results/eval/sentiment/ppo/seed0")}
    # a folder's files, each: Snakemake compares an input folder's own time only, not its files'
    judge = {"models/judge/config.json", "models/judge/sub/weights.bin"}
    assert judge <= set(jobs["evaluate"]["input"].split(", "))
    assert judge <= set(jobs["rl_finetune"]["input"].split(", "))
    assert not judge & set(jobs["prepare_datapool"]["input"].split(", "))
    git_init(repo)
    run(["python", "-m", "grueflow.pipeline", "dvc", "--write"], repo)
    deps = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]["validate_suite"]["deps"]
    assert "models/judge" in deps and "roberta-large" not in deps
    run(VALIDATE, repo)

    def digests():
        folder = repo / PLUGIN_CODE / "sentiment"
        return {path.stem: json.loads(path.read_text())["sha256"] for path in folder.glob("*.json")}

    before = digests()
    assert {stage for stage, files in before.items() if "models/judge" in files} == {
        "evaluate", "rl_finetune", "warm_start"}  # the warm start scores its val curve with the metrics
    (checkpoint / "config.json").write_text('{"v": 2}')
    run(VALIDATE, repo)
    after = digests()
    assert {stage for stage in after if after[stage] != before[stage]} == {"evaluate", "rl_finetune", "warm_start"}


def test_a_copy_of_the_project_runs_its_own_grueflow_not_the_installed_one(tmp_path):
    """Stages ran as `python stages/<name>.py`, whose sys.path starts at stages/, imported grueflow from the checkout
    installed editable into the venv: a second clone or a git worktree ran that other checkout's code while both
    engines tracked its own grueflow/ files."""
    repo = copy_project(tmp_path / "copy")
    config = repo / "grueflow" / "config.py"
    config.write_text(config.read_text() + "\nraise RuntimeError('the copy imported its own grueflow')\n")
    for command in (["python", "stages/prepare_datapool.py", "--help"], ["snakemake", "-n", "--cores", "1"]):
        result = run(command, repo, check=False)
        assert result.returncode != 0 and "the copy imported its own grueflow" in result.stdout + result.stderr, command


def test_a_human_batch_or_import_without_its_record_is_stale_before_anything_reads_it(finished):
    """A pairwise batch (its folder output is named ``batch``) and an import (named by a batch wildcard) were left
    out of the folders the stale check walks: a batch cut and stripped of its record before its first import was
    never exported again (every run blamed the answers), and an emptied import failed every human table."""
    folders = [finished / "results/human/sentiment/batches/supervised+ppo_vs_supervised_seed0",
               finished / "results/human/sentiment/imported/likert_seed0"]
    made = [folder for folder in folders if not folder.is_dir()]
    for folder in folders:  # a stage's folder without its record: the finished run's, its record set aside, or new
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "items.jsonl").write_text("{}\n")
        (folder / "provenance.json").write_text("{}\n")  # what a stage writes first: not a folder made by hand
        if (folder / "stage.json").is_file():
            (folder / "stage.json").rename(folder.with_name(folder.name + ".record"))
    try:
        lines = run(["snakemake", "-n", "--cores", "1", *HUMAN_TARGETS[1:]], finished).stderr.splitlines()
        # rule all builds neither: the import reruns with the human table, the batch (no answers) when asked for
        reruns = [" once it is asked for (rule all does not build it)",
                  " once results/human_eval_table.csv is built (rule all does not build it)"]
        for folder, when in zip(folders, reruns):  # and a copy of what it holds is kept, the rebuild deleting it
            assert f"grueflow: {folder.relative_to(finished)} is stale (damaged: stage.json is missing); its job " \
                   f"reruns{when}; a copy of what no stage record vouches for (items.jsonl, provenance.json) is kept " \
                   f"in .grueflow/replaced/{folder.relative_to(finished)}@" in "\n".join(lines)
    finally:
        for folder in folders:
            (folder / "items.jsonl").unlink()
            (folder / "provenance.json").unlink()
            if folder in made:
                folder.rmdir()
            else:
                folder.with_name(folder.name + ".record").rename(folder / "stage.json")
