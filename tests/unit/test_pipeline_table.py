"""The stage table (grueflow/pipeline.py) and the computed code dependencies (grueflow/codedeps.py): what the
engines read from the table, the generated dvc.yaml, and import closures checked against literal files."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grueflow import codedeps, pipeline
from grueflow.pipeline import STAGES
from tests.conftest import ROOT

RULES = ROOT / "workflow" / "rules"


def rule_bodies() -> dict[str, str]:
    """``{rule name: its text}`` for every rule of the rule files."""
    bodies = {}
    for path in sorted(RULES.glob("*.smk")):
        for match in re.finditer(r"^rule (\w+):\n((?:(?:    .*)?\n)+)", path.read_text(), re.M):
            bodies[match.group(1)] = match.group(2)
    return bodies


# -- code dependencies ------------------------------------------------------------------------------

def test_closures_hold_the_modules_the_stages_import_at_run_time():
    for name in ("rl_finetune", "warm_start"):
        assert "grueflow/distributed.py" in STAGES[name].code
    assert "grueflow/hub.py" in STAGES["base_model"].code
    rl = STAGES["rl_finetune"].code
    assert "grueflow/preference/reward_model.py" in rl  # the reward_model metric imports it inside a function
    # the algorithm registry names its implementations as "module:Class" strings
    assert {"grueflow/rl/ppo.py", "grueflow/rl/nlpo.py", "grueflow/rl/a2c.py", "grueflow/rl/trpo.py",
            "grueflow/rl/critic_free.py", "grueflow/rl/trainer.py"} <= set(rl)
    assert "grueflow/distributed.py" not in STAGES["evaluate"].code
    assert "grueflow/human/batch.py" not in rl and "grueflow/cli.py" not in rl


def test_the_aggregate_stage_depends_on_the_table_code_and_no_stage_on_the_command_entry():
    assert {"grueflow/grue.py", "grueflow/report.py", "grueflow/io.py"} <= set(STAGES["aggregate"].code)
    # `python -m grueflow` (grueflow/__main__.py) is the CLI's entry: editing it reruns no stage
    assert (ROOT / "grueflow" / "__main__.py").is_file()
    assert [name for name, stage in STAGES.items() if "grueflow/__main__.py" in stage.code] == []


def test_a_stages_code_is_its_cli_then_the_sorted_closure_of_package_files():
    for stage in STAGES.values():
        script, *closure = stage.code
        assert script == stage.script and (ROOT / script).is_file()
        assert closure == sorted(closure) and closure == codedeps.import_closure(stage.script)
        assert "grueflow/__init__.py" in closure and all(p.startswith("grueflow/") for p in closure)
        assert all((ROOT / p).is_file() for p in closure)


def write_package(root: Path) -> None:
    files = {
        "grueflow/__init__.py": "",
        "grueflow/a.py": "import grueflow.sub.b\n",
        "grueflow/sub/__init__.py": "from . import c\n",
        "grueflow/sub/b.py": "def lazy():\n    from ..d import name\n    return name\n",
        "grueflow/sub/c.py": "SPEC = 'grueflow.e:Cls'\n",
        "grueflow/d.py": "if False:\n    from grueflow.pkg import f\n",
        "grueflow/e.py": "",
        "grueflow/pkg/__init__.py": "",
        "grueflow/pkg/f.py": "import json\n",
        "grueflow/pkg/unreached.py": "",
        "grueflow/unreached.py": "import grueflow.a\n",
        "stages/x.py": "import os\nfrom grueflow import a\nfrom grueflow.e import Cls\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_the_closure_follows_every_kind_of_import_and_each_parent_package(tmp_path):
    write_package(tmp_path)
    assert codedeps.import_closure("stages/x.py", root=tmp_path) == [
        "grueflow/__init__.py", "grueflow/a.py", "grueflow/d.py", "grueflow/e.py", "grueflow/pkg/__init__.py",
        "grueflow/pkg/f.py", "grueflow/sub/__init__.py", "grueflow/sub/b.py", "grueflow/sub/c.py"]
    with pytest.raises(FileNotFoundError, match="no stage script .*stages/missing.py"):
        codedeps.import_closure("stages/missing.py", root=tmp_path)


def test_every_stage_in_the_generated_dvc_yaml_lists_its_cli_and_closure_as_deps():
    document = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    stages = {v.name: s for s in STAGES.values() for v in s.dvc}
    assert list(document["stages"])[0] == pipeline.VALIDATE_SUITE
    assert set(document["stages"]) == {*stages, pipeline.VALIDATE_SUITE}
    check = document["stages"].pop(pipeline.VALIDATE_SUITE)  # before every other stage, over every params file
    assert check["outs"] == [pipeline.SUITE_CHECK, pipeline.PLUGIN_CODE]
    assert check["always_changed"] is True  # a link under results/ is no dependency DVC hashes: checked every run
    assert "params" in check["deps"] and "grueflow/params.py" in check["deps"]
    assert pipeline.SUITE_CHECK in document["stages"]["prepare_datapool"]["do"]["deps"]
    for name, entry in document["stages"].items():
        deps = (entry.get("do") or entry)["deps"]
        assert set(stages[name].code) <= set(deps), name
        digests = [d for d in deps if d.startswith(pipeline.PLUGIN_CODE + "/")]  # the user code the stage runs
        task = "${item}" if entry.get("foreach") else "${item.task}"
        assert digests == ([f"{pipeline.PLUGIN_CODE}/{task}/{stages[name].name}.json"]
                           if stages[name].plugin_parts else []), name
        assert not any(Path(ROOT, d).is_dir() for d in deps if d.startswith(("grueflow", "stages"))), name


@pytest.mark.parametrize("suite", ["params/suite.yaml", "params/suites/preference.yaml"])
def test_the_dvc_outputs_of_a_suite_are_those_dvc_expands_from_dvc_yaml(tmp_path, suite):
    """What DVC's first stage checks for links (:func:`grueflow.pipeline.dvc_outputs`) is every out DVC itself reads
    from the committed dvc.yaml over the suite's grid, the first stage's own left out."""
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "suite.yaml").write_text((ROOT / suite).read_text())
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    listed = subprocess.run([sys.executable, "-c", "from dvc.repo import Repo\nfor stage in Repo('.').index.stages:\n"
                             "    for out in stage.outs:\n        print(stage.addressing, out.def_path)"],
                            cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
    dvc_own = [line.split(" ", 1)[1] for line in listed if not line.startswith(pipeline.VALIDATE_SUITE + " ")]
    grid = yaml.safe_load((ROOT / suite).read_text())
    ours = pipeline.dvc_outputs(yaml.safe_load((ROOT / "dvc.yaml").read_text()), grid)
    assert sorted(ours) == sorted(dvc_own) and len(ours) == len(set(ours))
    assert "results/sentiment/ppo/seed1/stage.json" in ours and pipeline.SUITE_CHECK not in ours
    assert pipeline.dvc_outputs(yaml.safe_load((ROOT / "dvc.yaml").read_text()), {**grid, "tasks": None}) == [
        path for path in ours if "sentiment" not in path and "concepts" not in path]  # no such grid: no paths


def test_every_rule_takes_its_code_inputs_from_the_table():
    bodies = rule_bodies()
    assert set(bodies) == set(STAGES)
    for name, body in bodies.items():
        assert f'code=code("{name}"),' in body, name
        assert (f'plugins=plugin_code("{name}"),' in body) == bool(STAGES[name].plugin_parts), name


# -- the committed dvc.yaml -------------------------------------------------------------------------

def test_the_committed_dvc_yaml_is_the_generated_one():
    assert (ROOT / "dvc.yaml").read_text() == pipeline.dvc_yaml(), \
        f"dvc.yaml is stale: regenerate it with `{pipeline.COMMAND}`"


def test_the_suite_keys_the_dvc_check_requires_are_those_the_generated_dvc_yaml_interpolates():
    interpolated = set(re.findall(r"\$\{(\w+)", pipeline.dvc_yaml())) - {"item"}
    assert sorted(pipeline.SUITE_VARS) == sorted(interpolated)


def test_the_generated_text_is_the_document_with_its_header():
    text = pipeline.dvc_yaml()
    assert text.startswith(f"# GENERATED from the stage table in grueflow/pipeline.py by `{pipeline.COMMAND}`")
    assert yaml.safe_load(text) == pipeline.dvc_document()


def test_a_dvc_stage_renders_the_cli_params_outs_metrics_and_plots():
    entry = pipeline.dvc_stage(STAGES["rl_finetune"], STAGES["rl_finetune"].dvc[1])
    out = "results/${item.task}/supervised+${item.algorithm}/seed${item.seed}"
    assert entry["matrix"] == {"task": "${tasks}", "algorithm": "${algorithms}", "seed": "${seeds}"}
    assert entry["cmd"] == (
        "python stages/rl_finetune.py --task-file params/tasks/${item.task}.yaml --algorithm ${item.algorithm}"
        " --method-file params/methods/${item.algorithm}.yaml --datapool results/${item.task}/datapool"
        " --start supervised --init-model results/${item.task}/supervised/seed${item.seed}/model"
        " --base-model results/${item.task}/base_model/model --seed ${item.seed} --threads ${threads}"
        f" --resume-dir {out}.resume --out {out} --precision ${{precision}}")
    assert entry["deps"][:5] == ["results/${item.task}/datapool", "results/${item.task}/base_model/model",
                                 "results/${item.task}/supervised/seed${item.seed}/model",
                                 "results/plugin_code/${item.task}/rl_finetune.json", "stages/rl_finetune.py"]
    assert entry["params"] == [{"params/suite.yaml": ["precision"]},
                               {"params/tasks/${item.task}.yaml": ["lengths", "rollout_generation", "eval_generation",
                                                                   "reward", "metrics", "method_overrides"]},
                               {"params/methods/${item.algorithm}.yaml": None}]
    assert entry["outs"] == [f"{out}/model", f"{out}/stage.json", f"{out}/validation", f"{out}/checkpoints",
                             f"{out}/decoding"]
    assert entry["metrics"] == [f"{out}/train_metrics.json", f"{out}/dvclive/metrics.json"]
    assert entry["plots"] == [{f"{out}/curves.csv": {"x": "iteration", "y": "reward/task"}},
                              {f"{out}/dvclive/plots/metrics": {"x": "step"}}, f"{out}/curves.png"]
    evaluations = {v.name: pipeline.dvc_stage(STAGES["evaluate"], v) for v in STAGES["evaluate"].dvc}
    assert evaluations["evaluate_rl_supervised"]["deps"][3] == f"{out}/decoding"  # NLPO's masks: how model/ decodes
    assert evaluations["evaluate_rl"]["deps"][3] == "results/${item.task}/${item.algorithm}/seed${item.seed}/decoding"
    assert not any("decoding" in d for name in ("evaluate_supervised", "evaluate_dpo")
                   for d in evaluations[name]["deps"])
    datapool = pipeline.dvc_stage(STAGES["prepare_datapool"], STAGES["prepare_datapool"].dvc[0])
    assert datapool["foreach"] == "${tasks}" and datapool["do"]["outs"] == ["results/${item}/datapool"]


# -- what the table declares ------------------------------------------------------------------------

def test_default_resources_are_the_scheduled_stages_current_numbers():
    assert pipeline.RESOURCE_STAGES == ("prepare_datapool", "base_model", "warm_start", "rl_finetune", "evaluate",
                                        "build_preferences", "train_reward_model", "dpo", "aggregate", "train_classifier")
    assert pipeline.DEFAULT_RESOURCES == {
        "prepare_datapool": {"mem_mb": 1000, "runtime": 10, "gpu": 0},
        "base_model": {"mem_mb": 2000, "runtime": 30, "gpu": 0},
        "warm_start": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
        "rl_finetune": {"mem_mb": 3000, "runtime": 120, "gpu": 0},
        "evaluate": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
        "aggregate": {"mem_mb": 1000, "runtime": 10, "gpu": 0},
        "build_preferences": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
        "train_reward_model": {"mem_mb": 2000, "runtime": 60, "gpu": 0},
        "dpo": {"mem_mb": 3000, "runtime": 120, "gpu": 0},
        "train_classifier": {"mem_mb": 4000, "runtime": 30, "gpu": 0},
    }
    assert pipeline.default_resources("dpo") == {"mem_mb": 3000, "runtime": 120, "gpu": 0}
    with pytest.raises(KeyError, match="stage 'human_eval_table' has no default resources; stages with resources: "
                                       "prepare_datapool, base_model"):
        pipeline.default_resources("human_eval_table")


def test_the_suite_schema_accepts_resources_for_exactly_the_scheduled_stages():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "suite.schema.yaml").read_text())
    (pattern,) = schema["properties"]["resources"]["patternProperties"]
    assert set(re.fullmatch(r"\^\((.*)\)\$", pattern).group(1).split("|")) == set(pipeline.RESOURCE_STAGES)


def test_the_names_no_task_may_take_are_those_the_pipeline_writes_beside_the_task_folders():
    """A task is a folder of results/ (results/<task>/...) and of results/logs/ (results/logs/<task>/...): the suite
    refuses a task named like anything else there (grueflow.config.RESERVED_NAMES). Each stage's outputs, DVC's first
    stage's and the rules' logs name exactly those that the table does not template by task, in each folder that
    holds a task's folder."""
    from grueflow.config import RESERVED_NAMES, RESULTS_NAMES

    written = [path for stage in STAGES.values() for path in stage.outputs.values()]
    written += [pipeline.SUITE_CHECK, pipeline.PLUGIN_CODE]
    written += [match for path in RULES.glob("*.smk") for match in re.findall(r'"(results/[^"]+)"', path.read_text())]
    beside: dict[str, set[str]] = {}  # each folder that holds a task's folder -> the fixed names in it
    for path in written:
        parts = Path(path).parts
        for i in range(1, len(parts)):
            names = {Path(other).parts[i] for other in written if Path(other).parts[:i] == parts[:i]
                     and len(Path(other).parts) > i}
            if any("{" in name and "task" in name for name in names):
                beside["/".join(parts[:i])] = {name for name in names if "{" not in name}
    assert {folder: names for folder, names in beside.items() if names} == \
        {folder: set(names) for folder, names in RESERVED_NAMES.items()}
    assert RESERVED_NAMES["results"] is RESULTS_NAMES
    assert beside["results/logs"] == {"eval", "human", "aggregate.log", "human_eval_table.log"}


def test_an_unknown_stage_is_refused_with_the_valid_names():
    with pytest.raises(KeyError, match="unknown stage 'rl'; valid stages: prepare_datapool, base_model, warm_start"):
        pipeline.stage("rl")


def declared_task_keys(script: Path) -> tuple[str, ...]:
    """The ``TASK_KEYS`` tuple a stage CLI declares (empty if none), read without importing the script."""
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TASK_KEYS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


def test_each_stages_task_keys_are_the_ones_its_cli_declares():
    for stage in STAGES.values():
        assert stage.task_keys == declared_task_keys(ROOT / stage.script), stage.name


def test_a_stage_that_reads_method_overrides_names_the_method_whose_entries_it_reads():
    """Its params digest covers those entries alone (grueflow.pipeline.params_read); a stage that names none reads
    the key not at all."""
    named = {name: stage.overrides for name, stage in STAGES.items() if stage.overrides is not None}
    assert named == {"warm_start": "supervised", "rl_finetune": "{rl_method}", "evaluate": "{method}"}
    assert sorted(named) == sorted(name for name, stage in STAGES.items() if "method_overrides" in stage.task_keys)
    assert {name: pipeline.method_layers(name) for name in ("zero_shot", "supervised", "ppo", "supervised+ppo",
                                                             "dpo", "supervised+dpo")} == {
        "zero_shot": [], "supervised": ["supervised"], "ppo": ["ppo"], "supervised+ppo": ["ppo", "supervised+ppo"],
        "dpo": ["dpo"], "supervised+dpo": ["dpo", "supervised+dpo"]}


@pytest.mark.parametrize("name, flags, folder_method", [
    ("warm_start", {}, "supervised"),
    ("rl_finetune", {"algorithm": "ppo", "start": "zero_shot"}, "ppo"),
    ("rl_finetune", {"algorithm": "ppo", "start": "supervised"}, "supervised+ppo"),
    ("evaluate", {"start": "zero_shot"}, "zero_shot"),
    ("evaluate", {"start": "supervised"}, "supervised"),
    ("evaluate", {"start": "zero_shot", "algorithm": "nlpo"}, "nlpo"),
    ("evaluate", {"start": "supervised", "algorithm": "nlpo"}, "supervised+nlpo"),
    ("prepare_datapool", {}, None),
])
def test_a_stage_run_reads_the_overrides_the_snakefile_gives_its_folder(name, flags, folder_method):
    """The entries a run's command line makes it read (grueflow.stage.overrides_read, what its stage.json digest
    covers) are those the Snakefile gives its folder (method_layers of the folder's method), which it compares."""
    from argparse import Namespace

    from grueflow.stage import overrides_read

    expected = tuple(pipeline.method_layers(folder_method)) if folder_method is not None else ()
    assert overrides_read(name, Namespace(**flags)) == expected


def test_wildcards_come_from_the_output_templates():
    assert STAGES["rl_finetune"].wildcards == ("task", "rl_method", "seed")
    assert STAGES["export_human_pairwise"].wildcards == ("task", "method_a", "method_b", "seed")
    assert STAGES["aggregate"].wildcards == ()


def test_each_rule_reads_its_stage_from_the_table_and_calls_its_cli():
    bodies = rule_bodies()
    for name, stage in STAGES.items():
        body = bodies[name]
        assert re.search(rf'^    shell:\n        "python {re.escape(stage.script)} ', body, re.M), name
        assert f'output_of("{name}"' in body, name
        slice_keys = [k for k in stage.task_keys if k != "method_overrides"]
        assert (f'slice=task_slice("{name}")' in body) == bool(slice_keys), name
        assert ("overrides=method_overrides(" in body) == ("method_overrides" in stage.task_keys), name
        assert ("method_file=method_path(" in body) == (stage.method is not None), name
        assert ("precision=PRECISION" in body) == ("precision" in stage.suite_keys), name
        if stage.resources is not None:
            assert f'**RESOURCES.of("{name}"),' in body, name


def test_the_table_module_imports_no_implementation_package():
    code = "import sys, grueflow.pipeline; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('grueflow', 'torch', 'transformers', 'numba', 'numpy')))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "['grueflow', 'grueflow.codedeps', 'grueflow.pipeline', 'grueflow.plugins']"


def test_a_local_input_is_a_file_or_folder_that_is_neither_an_output_nor_the_project(tmp_path):
    """What the engines track among the strings of a task file's args: existing paths, normalised; never a stage
    output under results/ (its stage tracks it) nor a folder holding the project ('.', '..', '/'), whose digest
    would change with every output written."""
    from grueflow.pipeline import datapool_files, local_input, scorer_files

    (tmp_path / "models" / "judge").mkdir(parents=True)
    (tmp_path / "results" / "x").mkdir(parents=True)
    (tmp_path / "lexicon.txt").write_text("good\n")
    assert [local_input(text, tmp_path) for text in ("./models/judge/", "lexicon.txt", str(tmp_path / "lexicon.txt"))] \
        == ["models/judge", "lexicon.txt", str(tmp_path / "lexicon.txt")]
    assert [local_input(text, tmp_path) for text in (".", "..", "/", "./results/x", "results", "missing", "",
                                                      "a\nb", "\0")] == [None] * 9
    task = {"metrics": [{"id": "m", "args": {"end_token": ".", "model": "models/judge/", "words": ["lexicon.txt"]}}],
            "method_overrides": {"ppo": {"reward": {"components": [{"metric": "m", "args": {"path": "lexicon.txt"}}]}}},
            "datapool": {"id": "wmt16newsonly", "args": {"path": ".", "train_path": "./models/judge"}}}
    assert scorer_files(task, tmp_path) == ["lexicon.txt", "models/judge"]
    assert scorer_files(task, tmp_path, ("reward",)) == ["lexicon.txt"]  # a method's own reward, overridden
    assert datapool_files(task, tmp_path) == ["models/judge"]


def test_a_local_input_in_the_home_folder_is_tracked(tmp_path, monkeypatch):
    """``data_files: {validation: ~/cg.jsonl}`` was read by the loader (which expands ``~``) and tracked by neither
    engine: editing the file rebuilt nothing."""
    from grueflow.pipeline import datapool_files, local_input

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "cg.jsonl").write_text("{}\n")
    assert local_input("~/cg.jsonl", tmp_path / "project") == str(tmp_path / "home" / "cg.jsonl")
    task = {"datapool": {"id": "common_gen", "args": {"path": "json", "data_files": {"validation": "~/cg.jsonl"}}}}
    assert datapool_files(task, tmp_path / "project") == [str(tmp_path / "home" / "cg.jsonl")]


def test_check_names_the_lines_a_stale_dvc_yaml_differs_in(tmp_path, monkeypatch, capsys):
    text = pipeline.dvc_yaml()
    stale = text.replace("      - params\n", "      - params\n      - data/gone.jsonl\n", 1)
    assert stale != text
    (tmp_path / pipeline.DVC_YAML).write_text(stale, encoding="utf-8")
    monkeypatch.setattr(pipeline, "ROOT", tmp_path)
    monkeypatch.setattr(pipeline, "dvc_yaml", lambda: text)
    assert pipeline.main(["dvc", "--check"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{tmp_path / 'dvc.yaml'} is not the generated file; regenerate it with `{pipeline.COMMAND}`"
    assert "-      - data/gone.jsonl" in err
    (tmp_path / pipeline.DVC_YAML).write_text(text, encoding="utf-8")
    assert pipeline.main(["dvc", "--check"]) == 0


@pytest.mark.parametrize("mode", ["--write", "--check"])
def test_a_dvc_yaml_that_is_a_folder_is_refused_in_one_line(tmp_path, monkeypatch, capsys, mode):
    """A folder named dvc.yaml ended `dvc --write` in an IsADirectoryError traceback (rc 1), and `--check` called it
    stale, asking for --write."""
    monkeypatch.setattr(pipeline, "ROOT", tmp_path)
    (tmp_path / "dvc.yaml").mkdir()
    assert pipeline.main(["dvc", mode]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path / 'dvc.yaml'} is a folder, not the file dvc.yaml DVC reads: "
                                       f"move it aside or delete it, then rerun {pipeline.COMMAND}; it is left as it "
                                       f"was\n")
    assert (tmp_path / "dvc.yaml").is_dir() and not list(tmp_path.glob(".dvc.yaml*"))


def test_the_pairwise_key_is_a_dvc_out_kept_out_of_the_cache():
    """A cached key was made 0644 by DVC's checkout (0444 in the cache) and would go with a dvc push."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["export_human_pairwise"]
    outs = stage.get("do", stage)["outs"]  # a foreach stage's body is under do:, a matrix stage's at its top
    private = [next(iter(o)) for o in outs if isinstance(o, dict) and next(iter(o.values())).get("cache") is False]
    assert len(private) == 1 and private[0].startswith("results/human/${item.task}/keys/")


def test_dvc_leaves_an_exported_batch_and_its_key_in_place_for_the_export_to_copy():
    """DVC removed a stage's outs before its command: a re-export deleted the batch sent to annotators and its key
    with no copy. Both outs persist, so that the export keeps a copy of what it replaces (write_batch)."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["export_human_pairwise"]
    outs = stage.get("do", stage)["outs"]
    assert [next(iter(o.values())) for o in outs] == [{"persist": True}, {"cache": False, "persist": True}]


def dvc_paths(name: str, folder: Path) -> list[Path]:
    """What ``dvc.yaml`` declares of table stage ``name`` (outs, metrics, plots) for its output ``folder``."""
    stage = STAGES[name]
    templates = (*stage.outs, *stage.private_outs, *stage.metrics, *(plot.path for plot in stage.plots))
    return [Path(pipeline.render(template, {"out": str(folder)})) for template in templates]


def undeclared(name: str, folder: Path) -> list[str]:
    """The files under ``folder``, an output of table stage ``name``, that none of its DVC outs, metrics or plots
    holds (the names ``.dvcignore`` lists left out): files a DVC restore would leave from another run."""
    declared = dvc_paths(name, folder)
    ignored = {line for line in (ROOT / ".dvcignore").read_text().splitlines() if line and not line.startswith("#")}
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()
                  and path.name not in ignored and not any(path == d or d in path.parents for d in declared))


@pytest.mark.parametrize("name, unit", [("warm_start", "epoch"), ("rl_finetune", "iteration")])
def test_every_file_evaluation_during_training_writes_is_a_dvc_out_of_its_stage(tmp_path, name, unit):
    """val_curves.csv, val_predictions/, dvclive_val/ and checkpoints/ were in no out: a run-cache restore of a
    reverted param brought back the model and left another run's val files beside it, and dvc status was clean."""
    from grueflow.config import SupervisedConfig
    from grueflow.rl.configs import PPOConfig
    from grueflow.training import VALIDATION_DIR
    from grueflow.validation import KEPT, PREDICTIONS, Validation

    config = SupervisedConfig if unit == "epoch" else PPOConfig
    settings = {"epochs" if unit == "epoch" else "iterations": 2}
    for every, folder in ((1, tmp_path / "on"), (0, tmp_path / "off")):
        cfg = config(**settings, eval_every=every, save_every=every)
        resume = tmp_path / f"{folder.name}.resume"
        validation = Validation(resume, [], None, None, (), None, cfg, 0, unit=unit, total=2)
        validation.rows = [{unit: 0, "lexical/bleu": 1.0}, {unit: 1, "lexical/bleu": 2.0}] if every else []
        root = resume / VALIDATION_DIR
        for k in range(2 * every):
            (root / PREDICTIONS).mkdir(parents=True, exist_ok=True)
            (root / PREDICTIONS / f"{unit}{k}.jsonl").write_text("{}\n")
            (root / KEPT / f"{unit}{k + 1}").mkdir(parents=True)
            (root / KEPT / f"{unit}{k + 1}" / "config.json").write_text("{}")
        folder.mkdir()
        validation.write(folder, "val")
        assert undeclared(name, folder) == [], folder.name
    assert sorted(p.relative_to(tmp_path / "on").as_posix() for p in (tmp_path / "on").rglob("*") if p.is_file()
                  and "dvclive" not in p.parts) == [
        f"checkpoints/{unit}1/config.json", f"checkpoints/{unit}2/config.json", "validation/curves.csv",
        "validation/curves.png", f"validation/predictions/{unit}0.jsonl", f"validation/predictions/{unit}1.jsonl"]
    assert sorted(p.name for p in (tmp_path / "off").rglob("*")) == ["checkpoints", "validation"]  # both empty


@pytest.mark.parametrize("added, named", [
    ("  my_report:\n    cmd: python my_report.py\n    deps:\n      - results/grue_table.json\n    outs:\n"
     "      - my_report.html\n", "stage my_report, which grueflow does not generate; python -m grueflow.pipeline dvc "
     "--write would delete it: move it"),
    ("  my_report:\n    cmd: python my_report.py\nplots:\n  - results/curves.csv\n", "stage my_report, section plots, "
     "which grueflow does not generate; python -m grueflow.pipeline dvc --write would delete them: move them"),
], ids=["stage", "stage-and-section"])
def test_write_refuses_a_dvc_yaml_holding_what_it_does_not_generate(tmp_path, monkeypatch, capsys, added, named):
    """A stage added to dvc.yaml (as `dvc stage add` does) was dropped by `dvc --write` without a word or a copy."""
    generated = pipeline.dvc_yaml()
    monkeypatch.setattr(pipeline, "ROOT", tmp_path)
    (tmp_path / "dvc.yaml").write_text(generated + added)
    assert pipeline.main(["dvc", "--write"]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'dvc.yaml'} holds {named} to a dvc.yaml in a subfolder (DVC reads one in any folder of "
        f"the repository), or delete {'them' if 'them' in named else 'it'}, then rerun it; dvc.yaml is left as it "
        f"was\n")
    assert (tmp_path / "dvc.yaml").read_text() == generated + added
    stale = generated.replace(f"  {pipeline.VALIDATE_SUITE}:\n", f"  {pipeline.VALIDATE_SUITE}:\n    frozen: true\n")
    (tmp_path / "dvc.yaml").write_text(stale)
    assert pipeline.main(["dvc", "--write"]) == 0  # a generated stage, stale or edited, is rewritten
    assert (tmp_path / "dvc.yaml").read_text() == generated
    capsys.readouterr()
    broken = generated + "  my_report:\n\tcmd: python my_report.py\n"  # a tab: no YAML, and a stage of the user's
    (tmp_path / "dvc.yaml").write_text(broken)
    assert pipeline.main(["dvc", "--write"]) == 2  # was replaced, the stage lost without a copy
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'dvc.yaml'} cannot be read as YAML (line ")
    assert (tmp_path / "dvc.yaml").read_text() == broken


@pytest.mark.parametrize("stage, folder, task, method, overrides", [
    ("evaluate", "results/eval/sentiment/supervised+ppo/seed0", "sentiment", None, ("ppo", "supervised+ppo")),
    ("evaluate", "results/eval/sentiment/zero_shot/seed1", "sentiment", None, ()),
    ("rl_finetune", "results/sentiment/supervised+nlpo/seed0", "sentiment", "nlpo", ("nlpo", "supervised+nlpo")),
    ("warm_start", "results/concepts/supervised/seed2", "concepts", "supervised", ("supervised",)),
    ("dpo", "results/sentiment/supervised+dpo/seed0", "sentiment", "dpo", ()),
    ("prepare_datapool", "results/sentiment/datapool", "sentiment", None, ()),
    ("train_reward_model", "results/sentiment/reward_model", "sentiment", "reward_model", ()),
])
def test_a_folders_params_source_is_read_from_its_path_as_its_rule_reads_them(stage, folder, task, method, overrides):
    """What grueflow show compares a finished folder's recorded params digests with, outside a run: the files the
    Snakefile's stage_params names for the same folder."""
    source = pipeline.folder_params_source(stage, folder)
    assert source == pipeline.ParamsSource(stage, f"params/tasks/{task}.yaml",
                                           f"params/methods/{method}.yaml" if method else None, {}, overrides)


def test_a_path_that_is_none_of_a_stages_folders_has_no_params_source():
    assert pipeline.folder_params_source("evaluate", "results/sentiment/ppo/seed0") is None
    assert pipeline.folder_params_source("evaluate", "/elsewhere/results/eval/sentiment/ppo/seed0") is None
    assert pipeline.folder_params_source("no_such_stage", "results/eval/sentiment/ppo/seed0") is None
