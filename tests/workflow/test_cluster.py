"""Cluster execution (issue 8): jobs submitted through a Snakemake profile, sized by the suite's resources."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, copy_project, run

pytestmark = pytest.mark.slow
PROFILES = ROOT / "workflow" / "profiles"


def test_local_submit_profile_runs_real_job_scripts_sized_by_the_suite(tmp_path):
    """The generic cluster executor writes a job script per job; submit.sh runs each in the background and
    status.sh reports it, so the datapool and base model are built through the same path Slurm jobs take."""
    repo = copy_project(tmp_path / "repo")
    suite = repo / "params" / "suite.yaml"
    suite.write_text(suite.read_text() + "resources:\n  base_model: {mem_mb: 1234, runtime: 7}\n")
    result = run(["snakemake", "--workflow-profile", "workflow/profiles/local-submit", "results/sentiment/base_model"],
                 repo)
    submitted = re.findall(r"Submitted job \d+ with external jobid '(job\.\w+)'", result.stdout + result.stderr)
    assert len(submitted) == 2

    queue = repo / ".snakemake" / "local-submit"
    rows = [line.split("\t") for line in (queue / "submitted.log").read_text().splitlines()]
    assert [row[0] for row in rows] == submitted
    assert [row[1:5] for row in rows] == [["rule=prepare_datapool", "threads=1", "mem_mb=1000", "runtime=10"],
                                          ["rule=base_model", "threads=1", "mem_mb=1234", "runtime=7"]]
    for job_id, rule in zip(submitted, ("prepare_datapool", "base_model")):
        job = queue / job_id
        assert (job / "exit_code").read_text().strip() == "0"
        assert f"--target-jobs '{rule}:task=sentiment'" in (job / "jobscript.sh").read_text()
        assert subprocess.run([str(PROFILES / "local-submit" / "status.sh"), job_id], cwd=repo, capture_output=True,
                              text=True, check=True).stdout.strip() == "success"

    record = json.loads((repo / "results" / "sentiment" / "base_model" / "stage.json").read_text())
    assert record["stage"] == "base_model"
    assert (repo / "results" / "sentiment" / "base_model" / "model" / "config.json").is_file()
    assert sorted(p.name for p in (repo / "results" / "sentiment" / "datapool").glob("*.jsonl")) == \
        ["test.jsonl", "train.jsonl", "unlabelled.jsonl", "val.jsonl"]


def test_status_script_reports_a_failed_job(tmp_path):
    queue = tmp_path / ".snakemake" / "local-submit"
    job_id = run([str(PROFILES / "local-submit" / "submit.sh"), "r", "1", "10", "1", str(_script(tmp_path, "exit 3"))],
                 tmp_path).stdout.strip()
    for _ in range(100):
        if (queue / job_id / "exit_code").exists():
            break
        subprocess.run(["sleep", "0.1"], check=True)
    assert (queue / job_id / "exit_code").read_text().strip() == "3"
    assert run([str(PROFILES / "local-submit" / "status.sh"), job_id], tmp_path).stdout.strip() == "failed"


def _script(folder, body):
    path = folder / "job.sh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    return path


@pytest.fixture(scope="module")
def snakemake_options() -> set[str]:
    return set(re.findall(r"--([a-z][a-z0-9-]*)", run(["snakemake", "--help"], ROOT).stdout))


@pytest.mark.parametrize("profile", ["slurm", "kubernetes", "local-submit"])
def test_profile_options_are_snakemake_options(profile, snakemake_options):
    """Every key of a profile that is not its executor plugin's own is one of Snakemake's command-line options."""
    options = snakemake_options
    config = yaml.safe_load((PROFILES / profile / "config.yaml").read_text())
    executor = config["executor"]
    general = {key for key in config if not key.startswith(f"{executor}-")}
    assert general - options == set()
    assert set(config.get("set-resources", {})) <= {"prepare_datapool", "base_model", "warm_start", "rl_finetune",
                                                    "evaluate", "aggregate"}
