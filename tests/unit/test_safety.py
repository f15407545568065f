"""Safe loading and safe shells (issue 9): no unpickling of arbitrary objects, no model code run unless a
param says so, and no param value reaching a shell unquoted."""

from __future__ import annotations

import ast
import importlib.util
import string
import sys
from pathlib import Path

import pytest

from grueflow.config import ConfigError, ModelConfig, SuiteConfig
from grueflow.params import parse
from tests.conftest import ROOT

CODE = sorted([*(ROOT / "grueflow").rglob("*.py"), *(ROOT / "stages").glob("*.py")])


def calls(path: Path) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(node, ast.Call)]


def torch_loads(path: Path) -> list[ast.Call]:
    """Calls of ``torch.load`` / ``torch.serialization.load`` in ``path``, under any alias of ``torch``;
    ``from torch import load`` fails the scan outright (its calls would read as a bare ``load``)."""
    tree = ast.parse(path.read_text(), str(path))
    names = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.name == "torch" and a.asname}
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            assert "load" not in {a.name for a in node.names}, f"{path}: import torch and call torch.load"

    def is_load(func: ast.expr) -> bool:
        if not (isinstance(func, ast.Attribute) and func.attr == "load"):
            return False
        owner = func.value
        if isinstance(owner, ast.Attribute) and owner.attr == "serialization":
            owner = owner.value
        return isinstance(owner, ast.Name) and owner.id in names

    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and is_load(node.func)]


def keyword_is_true(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def test_every_torch_load_in_the_library_and_the_stages_is_weights_only():
    loads = {f"{path.relative_to(ROOT)}:{call.lineno}": keyword_is_true(call, "weights_only")
             for path in CODE for call in torch_loads(path)}
    assert len(loads) >= 2, f"the RL and warm-start checkpoints load with torch.load; found only {loads}"
    assert all(loads.values()), f"torch.load without weights_only=True (it unpickles anything): " \
                                f"{[where for where, safe in loads.items() if not safe]}"


def test_no_code_hard_wires_trust_remote_code():
    wired = [f"{path.relative_to(ROOT)}:{call.lineno}" for path in CODE for call in calls(path)
             if keyword_is_true(call, "trust_remote_code")]
    assert not wired, f"trust_remote_code=True must come from the model.trust_remote_code param: {wired}"


def test_trust_remote_code_defaults_false_and_is_for_pretrained_models_only(tiny_models):
    assert parse(ModelConfig, {"id": "tiny_gpt2"}, "model").trust_remote_code is False
    path = str(tiny_models["causal"])
    cfg = parse(ModelConfig, {"id": "pretrained", "name_or_path": path, "kind": "causal"}, "model")
    assert cfg.trust_remote_code is False
    assert parse(ModelConfig, {"id": "pretrained", "name_or_path": path, "kind": "causal",
                               "trust_remote_code": True}, "model").trust_remote_code is True
    with pytest.raises(ConfigError, match="model 'tiny_gpt2' runs no code from its source; remove trust_remote_code"):
        parse(ModelConfig, {"id": "tiny_gpt2", "trust_remote_code": True}, "model")
    with pytest.raises(ConfigError, match="expected true or false, got 'yes'"):
        parse(ModelConfig, {"id": "pretrained", "name_or_path": path, "kind": "causal", "trust_remote_code": "yes"},
              "model")


@pytest.mark.parametrize("setting,expected", [("", False), ("trust_remote_code: true", True)])
def test_the_base_model_stage_hands_trust_remote_code_to_every_from_pretrained(
        tiny_models, tmp_path, monkeypatch, setting, expected):
    import transformers

    seen: list[tuple[str, object]] = []
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        real = cls.from_pretrained

        def spy(*args, _real=real, _name=cls.__name__, **kwargs):
            seen.append((_name, kwargs.get("trust_remote_code", "not passed")))
            return _real(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    task = tmp_path / "task.yaml"
    task.write_text(f"model: {{id: pretrained, name_or_path: {tiny_models['causal']}, kind: causal"
                    f"{', ' + setting if setting else ''}}}\n")
    (tmp_path / "datapool").mkdir()
    spec = importlib.util.spec_from_file_location("stages_base_model", ROOT / "stages" / "base_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", ["base_model.py", "--task-file", str(task), "--datapool", str(tmp_path / "datapool"),
                                      "--out", str(tmp_path / "out"), "--log-level", "WARNING"])
    module.main()
    assert {name for name, _ in seen} == {"AutoConfig", "AutoTokenizer", "AutoModelForCausalLM"}
    assert all(value is expected for _, value in seen), seen
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()


# Placeholders that may stay unquoted in a rule's shell command: values that can only be integers.
UNQUOTED_OK = {
    "threads": "an integer that Snakemake's scheduler sets",
    "wildcards.seed": "an integer: wildcard_constraints has seed=SEED (common.smk), SEED = r\"0|[1-9][0-9]*\" "
                      "(Snakefile)",
}


def shell_commands(rules: Path) -> dict[str, str]:
    """``{"<file>:<line>": command}`` for every ``shell:`` of every rule file: the string literals below it."""
    commands = {}
    for path in sorted(rules.glob("*.smk")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() != "shell:":
                continue
            indent = len(line) - len(line.lstrip())
            body = []
            for following in lines[number + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            commands[f"{path.name}:{number + 1}"] = ast.literal_eval("(" + "\n".join(body) + ")")
    return commands


def test_every_placeholder_in_a_shell_command_is_quoted_but_known_integers():
    commands = shell_commands(ROOT / "workflow" / "rules")
    assert len(commands) == 14, sorted(commands)  # one per stage rule (4 in human.smk, 3 in preference.smk)
    fields = [(where, name, spec) for where, command in commands.items()
              for _, name, spec, _ in string.Formatter().parse(command) if name is not None]
    assert len(fields) > 30
    unquoted = [(where, name) for where, name, spec in fields if spec != "q" and name not in UNQUOTED_OK]
    assert not unquoted, f"use {{name:q}} (shell-quoted) for these placeholders: {unquoted}"
    assert 'SEED = r"0|[1-9][0-9]*"\n' in (ROOT / "Snakefile").read_text()
    assert "    seed=SEED,\n" in (ROOT / "workflow" / "rules" / "common.smk").read_text()


@pytest.mark.parametrize("name", ["a b", "x;rm -rf ~", "../escape", "$(id)", "-flag", ""])
def test_a_task_name_that_a_shell_or_a_path_would_misread_is_refused(name):
    with pytest.raises(ConfigError, match="is not a usable task name; use letters, digits"):
        parse(SuiteConfig, {"tasks": ["sentiment", name], "algorithms": ["ppo"]}, "suite")
    assert parse(SuiteConfig, {"tasks": ["imdb", "common_gen", "iwslt2017", "v1.2-x"], "algorithms": []}, "suite")


def test_a_params_path_with_spaces_quotes_and_a_command_substitution_runs_and_injects_nothing(tmp_path):
    """A real Snakemake job whose params folder is named to break an unquoted shell command."""
    import json
    import shutil
    import subprocess

    from tests.conftest import MICRO, copy_project

    repo = copy_project(tmp_path / "repo")
    odd = "p a'r\"ms $(touch INJECTED)"
    shutil.copytree(repo / "params", repo / odd)
    suite = repo / "suite.yaml"
    suite.write_text((MICRO / "suite.yaml").read_text().replace("params_dir: params", f"params_dir: {json.dumps(odd)}"))
    result = subprocess.run(["snakemake", "results/sentiment/datapool", "-p", "--cores", "1", "--configfile", "suite.yaml"],
                            cwd=repo, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (repo / "results" / "sentiment" / "datapool" / "stage.json").is_file()
    assert "$(touch INJECTED)" in result.stdout + result.stderr  # the job's command did carry the odd path
    assert not list(tmp_path.rglob("INJECTED"))
