"""Shared fixtures: offline environment, tiny saved models, and throwaway copies of the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# stage commands call `python`, `snakemake` and `dvc`: the ones of this interpreter's environment
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

ROOT = Path(__file__).resolve().parents[1]
MICRO = ROOT / "tests" / "fixtures" / "micro"
PROJECT_FILES = ("Snakefile", "dvc.yaml", "pyproject.toml", "workflow", "stages", "grueflow", ".dvc", ".dvcignore", ".gitignore")


def copy_project(dest: Path, suite: Path = MICRO) -> Path:
    """A copy of the pipeline (code, rules, dvc.yaml) whose params/ is the given suite folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    shutil.copytree(suite / "tasks", dest / "params" / "tasks")
    shutil.copytree(suite / "methods", dest / "params" / "methods")
    shutil.copy2(suite / "suite.yaml", dest / "params" / "suite.yaml")
    return dest


SHARED = ROOT.parent / "shared"


def copy_with_shared_data(root: Path, what: str) -> Path:
    """A copy of the project with all of params/ under ``root/repo``, and ``root/shared`` linked to
    ../shared, so the suites' ``../shared/data`` paths resolve; skips the test (naming ``what``) where
    ../shared/data is absent."""
    if not (SHARED / "data").is_dir():
        pytest.skip(f"{what} reads real data slices from {SHARED / 'data'}, which is absent here")
    repo = copy_project(root / "repo")
    shutil.copytree(ROOT / "params", repo / "params", dirs_exist_ok=True)
    (root / "shared").symlink_to(SHARED)
    return repo


def run(cmd: list[str], cwd: Path, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def git_init(path: Path) -> None:
    run(["git", "init", "-q"], path)
    run(["git", "config", "user.email", "tests@grueflow.invalid"], path)
    run(["git", "config", "user.name", "grueflow tests"], path)


def run_both_engines(snakemake: Path, dvc: Path, target: str, cores: int, message: str, timeout: int = 900) -> None:
    """The same suite side by side: Snakemake to ``target`` in ``snakemake``, and `dvc repro` in ``dvc``,
    which becomes a git repository with the project committed (``message``) first."""
    git_init(dvc)
    run(["git", "add", "-A"], dvc)
    run(["git", "commit", "-qm", message], dvc)
    repro = subprocess.Popen(["dvc", "repro"], cwd=dvc, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run(["snakemake", "--cores", str(cores), target], snakemake)
    finally:
        output, _ = repro.communicate(timeout=timeout)
    assert repro.returncode == 0, output[-4000:]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny GPT-2 and a tiny T5, built from config on synthetic text and saved with save_pretrained."""
    from grueflow.config import DatapoolConfig, ModelConfig
    from grueflow.data import DATAPOOLS
    from grueflow.models.tiny import build_tiny
    from grueflow.params import load_section

    out = {}
    for task, kind, architecture in (("sentiment", "causal", "gpt2"), ("concepts", "seq2seq", "t5")):
        cfg = load_section(ModelConfig, MICRO / "tasks" / f"{task}.yaml", "model")
        datapool = load_section(DatapoolConfig, MICRO / "tasks" / f"{task}.yaml", "datapool")
        loader = DATAPOOLS.get(datapool.id)
        pool = loader.build(loader.Args(n_train=32, n_val=4, n_test=4, n_unlabelled=200))
        model, tokenizer, _ = build_tiny(cfg, architecture, pool.unlabelled, seed=0)
        path = tmp_path_factory.mktemp(task)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        out[kind] = path
    return out
