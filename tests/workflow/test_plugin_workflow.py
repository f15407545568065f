"""A reward of your own, by import path, end to end: the README's example module and task-file lines in a copy
of the micro project, run by Snakemake to the GRUE table; editing the module reruns exactly what runs it."""

from __future__ import annotations

import re
from pathlib import Path

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


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("plugins"))
    add_readme_reward(repo)
    suite_path = repo / "params" / "suite.yaml"
    suite = yaml.safe_load(suite_path.read_text())
    suite.update(tasks=["sentiment"], rl_starts=["zero_shot"])
    suite_path.write_text(yaml.safe_dump(suite, sort_keys=False))
    run(["snakemake", "--cores", "2", "results/grue_table.csv"], repo, timeout=1200)
    return repo


def test_a_reward_of_your_own_trains_and_is_tabled(project):
    table = pd.read_csv(project / "results" / "grue_table.csv")
    assert set(table.method) == {"zero_shot", "supervised", "ppo"}
    assert table["custom/brevity"].between(0, 1).all()
    curve = pd.read_csv(project / "results" / "sentiment" / "ppo" / "seed0" / "curves.csv")
    assert "reward/custom/brevity" in curve.columns  # the component is logged on its own while training


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
