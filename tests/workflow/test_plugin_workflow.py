"""A reward of your own, by import path, end to end: the README's example module and task-file lines in a copy
of the micro project, run by Snakemake to the GRUE table; editing the module reruns exactly what runs it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, copy_project, run
from tests.workflow.test_pipeline import planned_jobs

pytestmark = pytest.mark.slow


def readme_block(language: str, after: str) -> str:
    """The first ``language`` code block of the README after the line ``after``."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(after):]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


def add_readme_reward(repo: Path, headline: bool = True) -> None:
    """The README's reward module in the copy ``repo``, and its task-file lines in the sentiment task (its reward,
    a metric and, with ``headline``, a headline metric)."""
    (repo / "my_rewards.py").write_text(readme_block("python", "### Your own reward, metric or datapool"))
    lines = yaml.safe_load(readme_block("yaml", "and in `params/tasks/<task>.yaml`"))
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["reward"] = lines["reward"]
    task["metrics"] += lines["metrics"]
    if headline:
        task["headline_metrics"] += lines["headline_metrics"]
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))


OUTSIDE_METRIC = """from dataclasses import dataclass

from grueflow.metrics import Metric, MetricResult


class Words(Metric):
    \"\"\"The words of each generation.\"\"\"

    category = "custom"
    scores = ("words",)

    @dataclass(frozen=True)
    class Args:
        per: float = 1.0

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            scores = [len(g.split()) * args.per for g in generations]
            return MetricResult({cls.key(): scores}, {cls.key(): sum(scores) / len(scores)})
        return compute
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Iterator[Path]:
    """The micro suite's sentiment task with the README's reward module (in the project) and a metric module kept
    outside it, in a folder on PYTHONPATH (as a `pip install -e` package's is), built to the GRUE table."""
    repo = copy_project(tmp_path_factory.mktemp("plugins"))
    outside = tmp_path_factory.mktemp("outside_plugins")
    (outside / "outside_metrics.py").write_text(OUTSIDE_METRIC)
    add_readme_reward(repo)
    task_path = repo / "params" / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_path.read_text())
    task["metrics"].append({"id": "outside_metrics:Words"})
    task_path.write_text(yaml.safe_dump(task, sort_keys=False))
    suite_path = repo / "params" / "suite.yaml"
    suite = yaml.safe_load(suite_path.read_text())
    suite.update(tasks=["sentiment"], rl_starts=["zero_shot"])
    suite_path.write_text(yaml.safe_dump(suite, sort_keys=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(outside), os.environ.get("PYTHONPATH")])))
        run(["snakemake", "--cores", "2", "results/grue_table.csv"], repo, timeout=1200)
        yield repo


def test_a_reward_of_your_own_trains_and_is_tabled(project):
    table = pd.read_csv(project / "results" / "grue_table.csv")
    assert set(table.method) == {"zero_shot", "supervised", "ppo"}
    assert table["custom/brevity"].between(0, 1).all()
    curve = pd.read_csv(project / "results" / "sentiment" / "ppo" / "seed0" / "curves.csv")
    assert "reward/custom/brevity" in curve.columns  # the component is logged on its own while training


def test_editing_a_module_outside_the_project_reruns_the_stages_that_run_it(project):
    """The metric module on PYTHONPATH edited under its old time (no input of any job, no file of the project):
    the stages that run it are planned, with Snakemake's record of the jobs and without it."""
    module = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0]) / "outside_metrics.py"
    dry_run = ["snakemake", "-n", "results/grue_table.csv"]
    assert planned_jobs(run(dry_run, project).stdout) == set()
    text, info = module.read_text(), module.stat()
    record, aside = project / ".snakemake", project / ".snakemake.aside"

    def write(content: str) -> None:
        module.write_text(content)
        os.utime(module, ns=(info.st_atime_ns, info.st_mtime_ns))

    # a metric: the evaluations, and the val scores RL and the warm start compute; never the datapool
    expected = {("rl_finetune", "sentiment", "ppo"), ("warm_start", "sentiment", None),
                ("evaluate", "sentiment", "zero_shot"), ("evaluate", "sentiment", "supervised"),
                ("evaluate", "sentiment", "ppo"), ("aggregate", None, None)}
    edited = text.replace("len(g.split()) * args.per", "len(g.split()) * args.per * 2")
    try:
        write(edited)
        assert planned_jobs(run(dry_run, project).stdout) == expected
        write(text)
        assert planned_jobs(run(dry_run, project).stdout) == set()
        write(edited)
        record.rename(aside)  # the stale check marks them (they rerun on the next run, as the next test's edit does)
        assert planned_jobs(run(dry_run, project).stdout) == expected
    finally:
        if aside.exists():
            shutil.rmtree(record, ignore_errors=True)
            aside.rename(record)
        write(text)


def test_editing_the_module_reruns_exactly_the_stages_that_run_it(project):
    module = project / "my_rewards.py"
    module.write_text(module.read_text().replace("max(0.0,", "max(0.0, 0.0 +"))
    planned = planned_jobs(run(["snakemake", "-n", "results/grue_table.csv"], project).stdout)
    # the module is the task's reward (RL) and one of its metrics (evaluation, and the val scores RL and the warm
    # start may compute): never the datapool or the base model
    assert planned == {("rl_finetune", "sentiment", "ppo"), ("warm_start", "sentiment", None),
                       ("evaluate", "sentiment", "zero_shot"), ("evaluate", "sentiment", "supervised"),
                       ("evaluate", "sentiment", "ppo"), ("aggregate", None, None)}


def test_a_missing_plugin_fails_before_any_job(project, tmp_path):
    task_path = project / "params" / "tasks" / "sentiment.yaml"
    saved = task_path.read_text()
    try:
        task_path.write_text(saved.replace("my_rewards:Brevity", "my_rewards:Brevty", 1))
        result = run(["snakemake", "-n", "results/grue_table.csv"], project, check=False)
    finally:
        task_path.write_text(saved)
    assert result.returncode != 0
    assert "metric 'my_rewards:Brevty': module 'my_rewards' has no 'Brevty'" in result.stdout + result.stderr
