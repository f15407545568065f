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
from pathlib import Path
from typing import Iterator

import pytest

from grueflow.pipeline import STAGES
from tests.conftest import copy_project, git_init, run

pytestmark = pytest.mark.slow

PROBE = "grueflow/rl/_unused_probe.py"  # a module no stage imports, in a package that stages do import
HUMAN_TARGETS = ("results/human/sentiment/batches/likert_seed0",
                 "results/human/sentiment/batches/supervised+ppo_vs_supervised_seed0", "results/human_eval_table.csv")
FILE_SUFFIXES = (".json", ".jsonl", ".csv", ".md", ".html", ".png")


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
    """Each path as an empty folder, or an empty file when it has a file suffix (``{}`` for JSON; a stage
    record with an empty manifest, as every stage writes one, for ``stage.json``)."""
    for path in map(repo.joinpath, paths):
        if path.suffix in FILE_SUFFIXES:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('{"files": {}}\n' if path.name == "stage.json" else "{}\n" if path.suffix == ".json"
                            else "")
        else:
            path.mkdir(parents=True, exist_ok=True)


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
    create(repo, [out for job in dry_run(repo) for out in job["output"].split(", ")] + dvc_outputs(repo))
    run(["snakemake", "--cores", "1", "--touch", "--forceall", "all"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "micro suite, marked complete"], repo)
    run(["dvc", "commit", "-f", "-q", "--no-relink"], repo)
    return repo


def stale_dvc_stages(repo: Path) -> dict[str, object]:
    return json.loads(run(["dvc", "status", "--json"], repo).stdout)


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
