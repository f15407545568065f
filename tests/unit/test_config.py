"""Strict configs: every bad value fails at parse time, naming the value and the valid choices."""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grueflow.config import ConfigError, TaskConfig, to_dict
from grueflow.params import load_suite, load_task, parse
from grueflow.rl.configs import PPOConfig

MICRO = Path(__file__).resolve().parents[1] / "fixtures" / "micro"


def task_data() -> dict:
    return yaml.safe_load((MICRO / "tasks" / "sentiment.yaml").read_text())


def test_micro_task_parses_into_frozen_config():
    task = load_task(MICRO / "tasks" / "sentiment.yaml")
    assert task.reward.components[0].metric == "lexicon_sentiment"
    assert task.reward.components[0].key == "task/sentiment"
    with pytest.raises(AttributeError):
        task.lengths.prompt = 3  # frozen


def test_misspelt_reward_metric_lists_valid_ids():
    data = task_data()
    data["reward"]["components"][0]["metric"] = "rogue"
    with pytest.raises(ConfigError) as err:
        parse(TaskConfig, data, "sentiment.yaml:")
    message = str(err.value)
    assert "unknown metric 'rogue'" in message
    assert "reward.components[0]" in message
    assert "rouge" in message and "lexicon_sentiment" in message
    assert "bert_score, bleu, bleurt, chrf, chrf_plus_plus, cider, common_gen_repeat_penalty, concept_coverage" in message


def test_unknown_key_names_the_valid_keys():
    data = task_data()
    data["rollout_generation"]["top_kk"] = 5
    with pytest.raises(ConfigError, match=r"rollout_generation: unknown key 'top_kk'; valid keys: max_new_tokens, "
                                          r"min_new_tokens, min_length, do_sample, top_k, top_p, temperature, "
                                          r"num_beams, length_penalty, early_stopping, no_repeat_ngram_size, "
                                          r"repetition_penalty, post_processing"):
        parse(TaskConfig, data, "sentiment.yaml:")


def test_wrong_type_and_out_of_range_values():
    data = task_data()
    data["lengths"]["prompt"] = "long"
    with pytest.raises(ConfigError, match=r"lengths.prompt: expected an integer, got 'long'"):
        parse(TaskConfig, data, "t:")
    data = task_data()
    data["eval_generation"]["top_p"] = 1.5
    with pytest.raises(ConfigError, match=r"top_p must be in \(0, 1\], got 1.5"):
        parse(TaskConfig, data, "t:")


def test_unknown_datapool_model_and_datapool_args():
    data = task_data()
    data["datapool"]["id"] = "imbd"
    with pytest.raises(ConfigError, match=r"unknown datapool 'imbd'; valid datapool ids: cnn_dailymail, common_gen, "
                                          r"crd3, custom, daily_dialog, dummy_pool, imdb, iwslt2017, narrative_qa, "
                                          r"synthetic_concepts, synthetic_sentiment, totto, wmt14_processed_en_de, wmt16, "
                                          r"wmt16newsonly;"):
        parse(TaskConfig, data, "t:")
    data = task_data()
    data["model"]["id"] = "gpt3"
    with pytest.raises(ConfigError, match=r"unknown model 'gpt3'; valid model ids: gguf, pretrained, smollm2_135m, tiny_bart, tiny_gpt2, tiny_llama, tiny_t5"):
        parse(TaskConfig, data, "t:")
    data = task_data()
    data["datapool"]["args"]["n_trian"] = 5
    with pytest.raises(ConfigError, match=r"unknown key 'n_trian'"):
        parse(TaskConfig, data, "t:")


def test_pretrained_model_needs_a_path_and_kind():
    data = task_data()
    data["model"] = {"id": "pretrained", "kind": "causal"}
    with pytest.raises(ConfigError, match="needs name_or_path"):
        parse(TaskConfig, data, "t:")


def test_all_zero_reward_weights_fail():
    data = task_data()
    for component in data["reward"]["components"]:
        component["weight"] = 0
    with pytest.raises(ConfigError, match="every reward weight is 0"):
        parse(TaskConfig, data, "t:")


def test_a_reward_component_named_twice_fails():
    data = task_data()
    data["reward"]["components"] = [{"metric": "rouge", "score": "rougeL"}, {"metric": "rouge", "score": "rougeL", "weight": 2}]
    with pytest.raises(ConfigError, match=r"\['lexical/rougeL'\] appear twice"):
        parse(TaskConfig, data, "t:")


def test_ppo_batch_must_divide_into_minibatches():
    with pytest.raises(ConfigError, match=r"rollouts_per_iteration=10 is not a multiple of minibatch_size=4"):
        parse(PPOConfig, {"rollouts_per_iteration": 10, "minibatch_size": 4}, "ppo.yaml:")
    with pytest.raises(ConfigError, match=r"clip_range must be > 0, got 0.0"):
        parse(PPOConfig, {"clip_range": 0.0}, "ppo.yaml:")


def test_suite_with_unknown_algorithm_or_missing_task(tmp_path, monkeypatch):
    shutil.copytree(MICRO / "tasks", tmp_path / "params" / "tasks")
    shutil.copytree(MICRO / "methods", tmp_path / "params" / "methods")
    monkeypatch.chdir(tmp_path)
    suite = yaml.safe_load((MICRO / "suite.yaml").read_text())
    assert list(load_suite(suite).tasks) == ["sentiment", "concepts"]
    with pytest.raises(ConfigError, match=r"unknown algorithm 'ppp'; valid algorithm ids: a2c, grpo, nlpo, ppo, reinforce_pp, rloo, trpo"):
        load_suite({**suite, "algorithms": ["ppp"]})
    with pytest.raises(ConfigError, match=r"task 'imdb' has no task file params/tasks/imdb.yaml; valid tasks: concepts, sentiment"):
        load_suite({**suite, "tasks": ["imdb"]})


def test_a_task_overrides_its_methods_and_bad_overrides_name_the_task_file(tmp_path):
    from grueflow.params import load_method

    data = task_data()
    data["method_overrides"] = {"ppo": {"kl": {"coef": 0.2}, "lora": {"r": 4}}, "supervised": {"epochs": 7}}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    ppo = load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml")
    plain = load_method("ppo", MICRO / "methods" / "ppo.yaml")
    assert ppo.kl.coef == 0.2 and ppo.kl.adaptive == plain.kl.adaptive and ppo.lora.r == 4 and plain.lora is None
    assert ppo.iterations == plain.iterations
    assert load_method("supervised", MICRO / "methods" / "supervised.yaml", tmp_path / "t.yaml").epochs == 7
    data["method_overrides"] = {"ppo": {"kl": {"coef": -1.0}}}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"t\.yaml: method_overrides\.ppo:.*kl.*coef"):
        load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml")
    data["method_overrides"] = {"pop": {"epochs": 1}}
    with pytest.raises(ConfigError, match="unknown method 'pop'; valid: a2c, grpo, nlpo, ppo.*, supervised, "
                                          "supervised\\+a2c, .*supervised\\+ppo"):
        parse(TaskConfig, data, "t:")


def test_rl_from_the_warm_start_lays_its_own_overrides_over_the_algorithms(tmp_path):
    """RL4LMs tunes <task>/<model>_ppo_on_supervised apart from <model>_ppo: supervised+ppo over ppo."""
    from grueflow.params import load_method

    data = task_data()
    data["method_overrides"] = {"ppo": {"kl": {"coef": 0.2}, "epochs": 3},
                                "supervised+ppo": {"kl": {"target": 9.0}, "learning_rate": 1e-6}}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    zero = load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml")
    warm = load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml", "supervised")
    assert (zero.kl.coef, zero.epochs, warm.kl.coef, warm.epochs, warm.kl.target, warm.learning_rate) == \
        (0.2, 3, 0.2, 3, 9.0, 1e-6)
    assert zero.kl.target != 9.0 and zero.learning_rate != 1e-6
    data["method_overrides"]["supervised+ppo"] = {"epochs": 0}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml")  # the zero-shot start never reads it
    with pytest.raises(ConfigError, match=r"t\.yaml: method_overrides\.ppo, method_overrides\.supervised\+ppo:.*epochs"):
        load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml", "supervised")
    with pytest.raises(ConfigError, match="unknown start 'warm'; valid: zero_shot, supervised"):
        load_method("ppo", MICRO / "methods" / "ppo.yaml", tmp_path / "t.yaml", "warm")


def test_a_methods_overrides_may_hold_the_tasks_own_sections(tmp_path, monkeypatch):
    """method_overrides.<method> may hold lengths, rollout_generation, eval_generation or reward, laid over the
    task's for that method's stages only (supervised+<method> over <method> from the warm start); the method file
    never sees them, and the suite's validation checks them as the task's own."""
    from grueflow.config import GenerationConfig, LengthsConfig, RewardConfig
    from grueflow.params import load_method, load_task_section

    data = task_data()
    data["method_overrides"] = {
        "ppo": {"epochs": 3, "lengths": {"prompt": 16}, "rollout_generation": {"top_k": 7},
                "reward": {"components": [{"metric": "lexicon_sentiment", "weight": 2.0}]}},
        "supervised+ppo": {"rollout_generation": {"temperature": 0.5}, "eval_generation": {"top_k": 5}},
        "supervised": {"eval_generation": {"do_sample": False, "top_k": 0, "num_beams": 2}}}  # the task's samples
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    rollout = load_task_section(GenerationConfig, path, "rollout_generation", "ppo")
    assert (rollout.top_k, rollout.temperature, rollout.max_new_tokens) == (7, 1.0, 8)  # laid over, key by key
    warm = load_task_section(GenerationConfig, path, "rollout_generation", "ppo", "supervised")
    assert (warm.top_k, warm.temperature) == (7, 0.5)
    assert load_task_section(GenerationConfig, path, "eval_generation", "ppo").top_k == 50  # the task's own
    assert load_task_section(GenerationConfig, path, "eval_generation", "ppo", "supervised").top_k == 5
    assert load_task_section(GenerationConfig, path, "eval_generation", None).top_k == 50  # zero-shot: no method
    assert load_task_section(GenerationConfig, path, "eval_generation", "supervised").num_beams == 2
    assert load_task_section(LengthsConfig, path, "lengths", "ppo").prompt == 16
    assert load_task_section(LengthsConfig, path, "lengths", "supervised").prompt == 24
    reward = load_task_section(RewardConfig, path, "reward", "ppo")
    assert [(c.metric, c.weight) for c in reward.components] == [("lexicon_sentiment", 2.0)]  # a list: replaced
    assert load_method("ppo", MICRO / "methods" / "ppo.yaml", path).epochs == 3  # the sections are not the method's
    data["method_overrides"]["ppo"]["rollout_generation"] = {"do_sample": False}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"t\.yaml: rollout_generation with "
                                          r"method_overrides\.ppo\.rollout_generation"):
        load_task_section(GenerationConfig, path, "rollout_generation", "ppo")  # a rollout must sample
    shutil.copytree(MICRO / "tasks", tmp_path / "params" / "tasks")
    shutil.copytree(MICRO / "methods", tmp_path / "params" / "methods")
    (tmp_path / "params" / "tasks" / "sentiment.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)
    suite = yaml.safe_load((MICRO / "suite.yaml").read_text())
    with pytest.raises(ConfigError, match=r"rollout_generation with method_overrides\.ppo\.rollout_generation"):
        load_suite(suite)
    data["method_overrides"]["ppo"]["rollout_generation"] = {"top_k": 7}
    data["method_overrides"]["supervised+ppo"]["reward"] = {"components": [{"metric": "rogue", "weight": 1.0}]}
    (tmp_path / "params" / "tasks" / "sentiment.yaml").write_text(yaml.safe_dump(data))
    for entry, key, value, message in (
            ("ppo", "lengths", None, r"method_overrides\.ppo\.lengths is None; give a mapping of the lengths keys"),
            ("ppo", "eval_generation", [], r"method_overrides\.ppo\.eval_generation is \[\]; give a mapping"),
            ("supervised", "reward", {"components": []}, r"method_overrides\.supervised\.reward: the warm start "
                                                          r"trains on the references and never samples rollouts or pays"),
            ("supervised", "rollout_generation", {"top_k": 3}, r"method_overrides\.supervised\.rollout_generation: ")):
        bad = yaml.safe_load(yaml.safe_dump(data))
        bad["method_overrides"].setdefault(entry, {})[key] = value
        with pytest.raises(ConfigError, match=message):
            parse(TaskConfig, bad, "t:")
    with pytest.raises(ConfigError, match=r"reward with method_overrides\.ppo\.reward, "
                                          r"method_overrides\.supervised\+ppo\.reward: "
                                          r"components\[0\]: unknown metric 'rogue'"):
        load_suite(suite)


def test_a_suite_may_run_rl_from_one_start_only():
    from grueflow.config import SuiteConfig

    both = parse(SuiteConfig, {"tasks": ["t"], "algorithms": ["ppo", "grpo"]}, "suite:")
    assert both.methods == ["zero_shot", "supervised", "ppo", "supervised+ppo", "grpo", "supervised+grpo"]
    warm = parse(SuiteConfig, {"tasks": ["t"], "algorithms": ["ppo"], "rl_starts": ["supervised"]}, "suite:")
    assert warm.methods == ["zero_shot", "supervised", "supervised+ppo"]
    with pytest.raises(ConfigError, match="'cold' is not allowed; choose one of 'zero_shot', 'supervised'"):
        parse(SuiteConfig, {"tasks": ["t"], "algorithms": ["ppo"], "rl_starts": ["cold"]}, "suite:")


def test_suite_resources_override_the_rule_defaults_and_name_the_valid_rules():
    from grueflow.config import SuiteConfig

    suite = parse(SuiteConfig, {"tasks": ["t"], "algorithms": ["ppo"], "threads": 2, "resources": {
        "rl_finetune": {"mem_mb": 16000, "gpu": 1, "gpu_manufacturer": "nvidia", "threads": 8},
        "evaluate": {"runtime": 240}}}, "suite:")
    res = suite.resources
    assert res.of("rl_finetune") == {"mem_mb": 16000, "runtime": 120, "gpu": 1, "gpu_manufacturer": "nvidia"}
    assert res.of("evaluate") == {"mem_mb": 2000, "runtime": 240}  # no GPU asked for: no gpu key at all
    assert res.of("aggregate") == {"mem_mb": 1000, "runtime": 10}
    assert (res.threads("rl_finetune", suite.threads), res.threads("evaluate", suite.threads)) == (8, 2)
    with pytest.raises(ConfigError, match="resources: unknown key 'rl'; valid keys: prepare_datapool, base_model, "
                                          "warm_start, rl_finetune, evaluate, build_preferences, train_reward_model, "
                                          "dpo, aggregate"):
        parse(SuiteConfig, {"tasks": ["t"], "algorithms": ["ppo"], "resources": {"rl": {"mem_mb": 1}}}, "suite:")
    with pytest.raises(ConfigError, match="resources.evaluate: mem_mb must be >= 1, got 0"):
        parse(SuiteConfig, {"tasks": ["t"], "algorithms": ["ppo"], "resources": {"evaluate": {"mem_mb": 0}}}, "suite:")


def test_rl_processes_must_split_the_rollout_and_minibatches_into_whole_groups():
    ok = parse(PPOConfig, {"rollouts_per_iteration": 16, "minibatch_size": 8, "processes": 2}, "ppo.yaml:")
    assert ok.processes == 2 and parse(PPOConfig, {}, "ppo.yaml:").processes == 1
    with pytest.raises(ConfigError, match=r"processes=3 must divide the 16 prompt groups of a rollout"):
        parse(PPOConfig, {"rollouts_per_iteration": 16, "minibatch_size": 8, "processes": 3}, "ppo.yaml:")
    with pytest.raises(ConfigError, match=r"processes=2 must split minibatch_size=4 into whole groups of group_size=4"):
        parse(PPOConfig, {"rollouts_per_iteration": 16, "minibatch_size": 4, "group_size": 4, "processes": 2},
              "ppo.yaml:")
    from grueflow.rl.configs import TRPOConfig

    with pytest.raises(ConfigError, match=r"processes must be 1 for TRPO, got 2"):
        parse(TRPOConfig, {"rollouts_per_iteration": 16, "minibatch_size": 8, "processes": 2}, "trpo.yaml:")


def test_validating_every_shipped_suite_imports_no_torch():
    """Params validation (what `snakemake -n` pays for before any job) imports neither torch, transformers nor
    numba: checked in a fresh interpreter, over every suite the repository ships."""
    root = Path(__file__).resolve().parents[2]
    suites = ["params/suite.yaml", *sorted(str(p.relative_to(root)) for p in (root / "params" / "suites").glob("*.yaml"))]
    code = ("import sys\nfrom grueflow.config import read_yaml\nfrom grueflow.params import load_suite\n"
            f"for suite in {suites!r}:\n    load_suite(read_yaml(suite), suite)\n"
            "print(sorted(m for m in ('torch', 'transformers', 'numba') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_the_schema_layer_imports_no_implementation_package():
    """``grueflow.config`` (and the RL configs beside the algorithms) import only the io and registry helpers
    of grueflow, at module level or inside functions: the registry checks live one layer up, in
    ``grueflow.params``."""
    root = Path(__file__).resolve().parents[2]
    for module in ("grueflow/config.py", "grueflow/rl/configs.py", "grueflow/preference/config.py"):
        imported = set()
        for node in ast.walk(ast.parse((root / module).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        internal = sorted(m for m in imported if m.startswith("grueflow"))
        assert set(internal) <= {"grueflow.config", "grueflow.io", "grueflow.registry", "grueflow.pipeline"}, (
            module, internal)


def test_nested_args_are_parsed_once_into_their_typed_args():
    task = load_task(MICRO / "tasks" / "sentiment.yaml")
    assert type(task.datapool.typed_args).__qualname__.endswith("Args")
    assert all(type(c.typed_args).__qualname__.endswith("Args") and c.key for c in task.reward.components)
    assert all(type(m.typed_args).__qualname__.endswith("Args") for m in task.metrics)
    assert "typed_args" not in to_dict(task.datapool) and "key" not in to_dict(task.reward.components[0])


def test_a_component_config_built_without_validation_is_named_when_used():
    from grueflow.config import MetricSpec, typed_args

    with pytest.raises(TypeError, match=r"MetricSpec .* was built without validation: parse it with grueflow.params"):
        typed_args(MetricSpec("bleu"))
    assert typed_args(parse(MetricSpec, {"id": "bleu"}, "metrics")).tokenize == "13a"


def test_the_validation_cli_checks_a_suite_first_and_refuses_what_dvc_cannot_honour(tmp_path, capsys):
    from grueflow.params import VALID, main

    root = Path(__file__).resolve().parents[2]
    assert main([str(root / "params" / "suite.yaml"), "--engine", "dvc", "--out", str(tmp_path / "ok")]) == 0
    assert (tmp_path / "ok").read_text() == VALID
    suite = yaml.safe_load((MICRO / "suite.yaml").read_text())
    for bad, expect in [({"seeds": ["0"]}, "seeds[0]: expected an integer, got '0'"),
                        ({"seeds": [0, 0]}, "repeat a seed"), ({"threads": 0}, "threads must be >= 1, got 0"),
                        # dvc repro ignored it; refused before the file it names is looked for
                        ({"preference_methods": ["dpo"], "preference_files": {"sentiment": "nowhere.jsonl"}},
                         "dvc.yaml builds every task's preferences with build_preferences"),
                        ({"rl_starts": ["supervised"]}, "rl_starts ['supervised']: dvc.yaml runs RL from both starts")]:
        (tmp_path / "suite.yaml").write_text(yaml.safe_dump({**suite, "params_dir": str(MICRO), **bad}))
        assert main([str(tmp_path / "suite.yaml"), "--engine", "dvc", "--out", str(tmp_path / "bad")]) == 2
        assert expect in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert main([str(tmp_path / "suite.yaml")]) == 0  # Snakemake honours rl_starts


def test_optional_settings_still_take_null_and_an_empty_file_is_refused(tmp_path):
    """null is refused for a section (a dataclass field that is not Optional), never for an Optional setting; a
    whole file that is empty (or only comments) is refused, naming it, and one holding ``{}`` parses to every
    default."""
    from grueflow.config import ClassifierConfig, GenerationConfig, read_yaml
    from grueflow.params import load_section
    from grueflow.preference.config import PreferencesConfig

    ppo = parse(PPOConfig, {"lora": None, "target_kl": None, "clip_range_vf": None, "eval_samples": None}, "ppo.yaml:")
    assert (ppo.lora, ppo.target_kl, ppo.clip_range_vf, ppo.eval_samples) == (None, None, None, None)
    gen = parse(GenerationConfig, {"min_new_tokens": None, "min_length": None, "post_processing": None}, "g:")
    assert gen == GenerationConfig()
    data = task_data()
    data["classifier"] = None
    assert parse(TaskConfig, data, "t:").classifier is None
    assert parse(ClassifierConfig, {"train_file": "t.jsonl", "labels": ["a", "b"], "n_test": None,
                                    "backbone": None}, "c:").backbone is None
    assert load_section(PreferencesConfig, Path(__file__).resolve().parents[2] / "params" / "methods" /
                        "preferences.yaml").reward is None  # reward: null, the task's own
    (tmp_path / "ppo.yaml").write_text("# every default\n")
    assert read_yaml(tmp_path / "ppo.yaml") is None
    with pytest.raises(ConfigError, match=r"ppo\.yaml is empty \(nothing but blank lines or comments, or null\); "
                                          r"write \{\} to mean every default, or give the settings that differ from "
                                          r"the defaults$"):
        load_section(PPOConfig, tmp_path / "ppo.yaml")
    (tmp_path / "ppo.yaml").write_text("{}  # every default\n")
    assert load_section(PPOConfig, tmp_path / "ppo.yaml") == parse(PPOConfig, {}, "ppo.yaml:") == PPOConfig()
    with pytest.raises(ConfigError, match=r"^ppo\.yaml: kl: null is not a setting; leave the key out for its "
                                          r"defaults, or give a mapping \(keys: coef, adaptive, target, kl_lr, "
                                          r"target_per\)$"):
        parse(PPOConfig, {"kl": None}, "ppo.yaml:")
    assert parse(PPOConfig, {"kl": {}}, "ppo.yaml:").kl == parse(PPOConfig, {}, "ppo.yaml:").kl


def test_greedy_decoding_takes_the_sampling_settings_at_their_defaults_only():
    from grueflow.config import GenerationConfig

    greedy = parse(GenerationConfig, {"do_sample": False, "top_k": 0, "top_p": 1.0, "temperature": 1.0}, "g:")
    assert greedy == GenerationConfig(do_sample=False)
    assert not {"top_k", "top_p", "temperature"} & set(greedy.generate_kwargs("causal"))
    sampled = parse(GenerationConfig, {"top_k": 50, "top_p": 0.9, "temperature": 0.7}, "g:")
    assert {k: sampled.generate_kwargs("causal")[k] for k in ("top_k", "top_p", "temperature")} == \
        {"top_k": 50, "top_p": 0.9, "temperature": 0.7}
    with pytest.raises(ConfigError, match=r"^g: top_p = 0\.9 applies only when sampling: set do_sample: true, or "
                                          r"leave top_p out$"):
        parse(GenerationConfig, {"do_sample": False, "num_beams": 4, "top_p": 0.9}, "g:")


def test_a_pretrained_source_takes_the_tiny_settings_at_their_defaults_only(tmp_path):
    from grueflow.config import ModelConfig

    given = {"tokenizer": {"vocab_size": 512}, "pretrain": {"steps": 300}, "config": {},
             "adapt": {"steps": 3, "heldout": 2}}
    for source in ({"id": "pretrained", "name_or_path": "gpt2", "kind": "causal"}, {"id": "smollm2_135m"},
                   {"id": "gguf", "name_or_path": str(tmp_path / "m.gguf")}):
        assert parse(ModelConfig, {**source, **given}, "model").adapt.steps == 3
        with pytest.raises(ConfigError, match=rf"^model: model '{source['id']}' is pretrained; remove "
                                              r"tokenizer=\{'vocab_size': 300\} .*use model\.adapt\)$"):
            parse(ModelConfig, {**source, "tokenizer": {"vocab_size": 300}}, "model")


def test_the_strict_loader_reads_every_shipped_params_file_as_the_safe_loader_does(tmp_path):
    """Its refusals (a repeated key, a YAML 1.1 octal integer) change no valid file; 0, floats, hex and quoted
    digits stay what they are."""
    from grueflow.config import read_yaml

    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "params").rglob("*.yaml")) + sorted((root / "tests" / "fixtures").rglob("*.yaml"))
    assert len(files) > 40
    for path in files:
        assert read_yaml(path) == yaml.safe_load(path.read_text(encoding="utf-8")), path
    (tmp_path / "n.yaml").write_text("a: 0\nb: -0\nc: 0.5\nd: 10\ne: 0x10\nf: '010'\ng: 1_000\nh: 00.5\n")
    assert read_yaml(tmp_path / "n.yaml") == {"a": 0, "b": 0, "c": 0.5, "d": 10, "e": 16, "f": "010", "g": 1000,
                                              "h": 0.5}
    (tmp_path / "n.yaml").write_text("tasks: [t]\nseeds: [-010]\n")
    with pytest.raises(ConfigError, match=r"n\.yaml: line 2, column 9: not valid YAML: -010 is an octal number in "
                                          r"YAML 1\.1 \(-8\); write -10, or '-010' for a string$"):
        read_yaml(tmp_path / "n.yaml")


@pytest.mark.parametrize("text, expect", [
    ("a: 2024-13-01\n", r"line 1, column 4: not valid YAML: 2024-13-01 is no date \(month must be in 1\.\.12\); "
                        r"quote it for a string"),
    ("a: [1, 2024-02-30 12:00:00]\n", r"line 1, column 8: not valid YAML: 2024-02-30 12:00:00 is no date \(day is out "
                                      r"of range for month\); quote it for a string"),
    ("a:\n  b: ._\n", r"line 2, column 6: not valid YAML: \._ is no number \(could not convert string to float: "
                      r"'\.'\); quote it for a string"),
    ("a: !!timestamp soon\n", r"line 1, column 4: not valid YAML: soon is no date; remove the !!timestamp tag, or "
                              r"write a date \(2024-02-29\)"),
    ("a: !!bool maybe\n", r"line 1, column 4: not valid YAML: maybe is no boolean; remove the !!bool tag, or write "
                          r"true or false"),
    ("a: !!float\n", r"line 1, column 4: not valid YAML: an empty value is no number; remove the !!float tag, or "
                     r"write a number"),
    ("a: !!set [1]\n", r"line 1, column 4: not valid YAML: expected a mapping node, but found sequence"),
], ids=["month-13", "no-such-day-in-a-list", "float-of-no-digits", "timestamp-tag", "bool-tag", "empty-float-tag",
        "set-of-a-list"])
def test_a_value_its_yaml_tag_cannot_build_is_named_at_its_line(tmp_path, text: str, expect: str):
    """PyYAML's constructors raised a bare ValueError (a date with no such day, !!int 1.5), KeyError or TypeError
    (!!set of a list, in the strict loader's repeated-key check)."""
    from grueflow.config import read_yaml

    (tmp_path / "t.yaml").write_text(text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path / 't.yaml'))}: {expect}$"):
        read_yaml(tmp_path / "t.yaml")


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_read_yaml_refuses_a_yaml_directive_other_than_1_2(tmp_path, version):
    """A params file opening with %YAML 1.1 was read as YAML 1.2 by grueflow and as YAML 1.1 by DVC: a change of
    {label: off} to {label: no} was no change to `dvc params diff` (both false), while the run read 'off', then 'no'."""
    from grueflow.config import read_yaml

    path = tmp_path / "supervised.yaml"
    path.write_text(f"%YAML {version}\n---\nepochs: 2\ntrain_where: {{label: off}}\n")
    with pytest.raises(ConfigError, match=rf"/supervised\.yaml: opens with a %YAML {version} directive; grueflow "
                                          r"reads params as YAML 1\.2 whatever it says, while DVC's reader honours it "
                                          r"\(YAML 1\.1 reads yes, no, on and off as booleans\), so the two would "
                                          r"read its values otherwise: remove the directive \(both then read YAML "
                                          r"1\.2\)$"):
        read_yaml(path)
    path.write_text("%YAML 1.2\n---\nepochs: 2\ntrain_where: {label: off}\n")
    assert read_yaml(path) == {"epochs": 2, "train_where": {"label": "off"}}


# Plain scalars whose YAML 1.1 (PyYAML) and YAML 1.2 (DVC's ruamel.yaml) readings differ, and neighbours that agree
YAML12_SCALARS = ["1e-05", "1E5", "-2.5e+3", ".5e-3", "1.0e5", "+1e5", "1e+5", "1.e5", "01e5", "0e0", "-.5", "+.5",
                  "._5", "1_0e5", "0.5", "1.0e-5", ".inf", "-.inf", ".5e3", "1e", "e5", "inf", "nan", "1e5_0", "true",
                  "False", "yes", "No", "on", "OFF", "y", "n", "~", "0x1f", "1_0"]


@pytest.mark.parametrize("text", YAML12_SCALARS)
def test_read_yaml_reads_a_plain_scalar_as_dvcs_reader_does(tmp_path, text):
    """DVC writes a float below 1e-4 as 1e-05 (``dvc exp run -S``) and reads it, as YAML 1.2 does, as a number;
    grueflow read the string '1e-05' (YAML 1.1: a float needs a dot) and refused it: "expected a number"."""
    from dvc.utils.serialize import loads_yaml

    from grueflow.config import read_yaml

    (tmp_path / "p.yaml").write_text(f"value: {text}\n")
    expected = loads_yaml(f"value: {text}\n")["value"]
    got = read_yaml(tmp_path / "p.yaml")["value"]
    assert type(got) is type(expected) and (got == expected or got != got and expected != expected), (got, expected)


def test_a_params_file_rewritten_by_dvc_exp_run_set_param_reads_back_as_set(tmp_path):
    """DVC's rewrite of a params file (what ``dvc exp run -S`` runs) writes learning_rate=1e-5 as ``1e-05`` and drops
    the quotes of the other strings YAML 1.1 reads as booleans ('no', 'on'); both read back as DVC records them."""
    pytest.importorskip("hydra")
    from dvc.utils.hydra import apply_overrides

    from grueflow.config import read_yaml
    from grueflow.params import load_method

    path = tmp_path / "ppo.yaml"
    shutil.copy(MICRO / "methods" / "ppo.yaml", path)
    apply_overrides(path, ["learning_rate=1e-5"])
    assert "learning_rate: 1e-05\n" in path.read_text()
    assert load_method("ppo", path).learning_rate == 1e-5
    (tmp_path / "args.yaml").write_text("lr: 0.1\nlang: 'no'\ncolumn: 'on'\nflag: true\n")
    apply_overrides(tmp_path / "args.yaml", ["lr=0.000003"])
    assert (tmp_path / "args.yaml").read_text() == "lr: 3e-06\nlang: no\ncolumn: on\nflag: true\n"
    assert read_yaml(tmp_path / "args.yaml") == {"lr": 3e-06, "lang": "no", "column": "on", "flag": True}


@pytest.mark.parametrize("text, where", [
    ("tasks: [a, no]\n", "tasks[1]: YAML 1.1, which Snakemake reads a suite file with, gives False and YAML 1.2, "
                         "which grueflow and DVC read params with, gives 'no'"),
    ("resources:\n  rl_finetune: {mem_mb: 1e5}\n", "resources.rl_finetune.mem_mb: YAML 1.1, which Snakemake reads a "
                                                   "suite file with, gives '1e5' and YAML 1.2, which grueflow and DVC "
                                                   "read params with, gives 100000.0"),
    ("on: 1\n", "key 'on': YAML 1.1, which Snakemake reads a suite file with, gives True and YAML 1.2, which grueflow "
                "and DVC read params with, gives 'on'"),
    ("tasks: [a, 'no']\nseeds: [0, 1]\nlr: 1.0e-05\nx: .nan\n", None),
    ('{"resources": {"rl_finetune": {"mem_mb": 1E4}}}\n', None),  # JSON: Snakemake reads it as JSON, 10000.0 too
    ("resources:\n  rl_finetune: {runtime: 1:30}\n", "resources.rl_finetune.runtime: YAML 1.1, which Snakemake reads "
                                                    "a suite file with, gives 90 and YAML 1.2, which grueflow and DVC "
                                                    "read params with, gives '1:30'"),
], ids=["boolean-word", "float-without-dot", "key", "agree", "json", "base-60"])
def test_yaml11_disagreement_names_the_first_value_the_two_readings_differ_on(tmp_path, text, where):
    from grueflow.config import read_yaml, yaml11_disagreement

    path = tmp_path / "suite.yaml"
    path.write_text(text)
    found = yaml11_disagreement(path, read_yaml(path))
    assert found == (None if where is None else f"{path}: {where}; write it so both read it alike: quote a string, "
                                                f"write a boolean as true or false and a number in plain digits or "
                                                f"as 1.0e-05")


def test_a_json_params_file_indented_with_tabs_is_read_as_json_and_its_repeated_key_refused(tmp_path):
    """A JSON suite indented with tabs (json.dump(..., indent="\\t")), which Snakemake reads, was refused as not valid
    YAML ("found character '\\t' that cannot start any token")."""
    from grueflow.config import read_yaml

    suite = {"tasks": ["sentiment"], "seeds": [0, 1], "threads": 1, "precision": "auto"}
    (tmp_path / "suite.json").write_text(json.dumps(suite, indent="\t"))
    assert read_yaml(tmp_path / "suite.json") == suite
    (tmp_path / "suite.yaml").write_text(json.dumps(suite, indent="\t"))  # the text decides, as in Snakemake
    assert read_yaml(tmp_path / "suite.yaml") == suite
    (tmp_path / "suite.json").write_text('{\n\t"seeds": [0, 1],\n\t"tasks": ["sentiment"],\n\t"seeds": [2]\n}\n')
    with pytest.raises(ConfigError, match=r"suite\.json: the key 'seeds' is written twice in one object \(a JSON "
                                          r"reader keeps the last value without a word\); keep one$"):
        read_yaml(tmp_path / "suite.json")
    (tmp_path / "big.json").write_text(json.dumps({"seeds": list(range(200_000))}))
    with pytest.raises(ConfigError, match=r"big\.json: holds more than 100,000 values"):
        read_yaml(tmp_path / "big.json")


@pytest.mark.parametrize("given, do_sample", [
    ({"max_new_tokens": 8}, True),  # grueflow's default: sampling
    ({"max_new_tokens": 8, "do_sample": False, "num_beams": 4}, False),  # beam search
    ({"max_new_tokens": 8, "do_sample": True, "num_beams": 4}, True),  # beam sampling
])
def test_do_sample_left_out_samples_and_is_recorded_as_given(given, do_sample):
    from grueflow.config import GenerationConfig

    gen = parse(GenerationConfig, given, "task.yaml: eval_generation")
    assert gen.do_sample is do_sample and to_dict(gen)["do_sample"] is do_sample


def test_beams_without_do_sample_are_refused_as_rl4lms_eval_blocks_mean_beam_search():
    from grueflow.config import GenerationConfig

    with pytest.raises(ConfigError) as err:  # RL4LMs' common_gen/t5_ppo evaluation block, as it is written there
        parse(GenerationConfig, {"max_new_tokens": 20, "min_length": 5, "num_beams": 5}, "task.yaml: eval_generation")
    assert ("task.yaml: eval_generation: num_beams = 5 without do_sample: give do_sample: false for beam search "
            "(what transformers and RL4LMs do when it is left out) or true for beam sampling") in str(err.value)


def test_dvc_refuses_a_task_that_scores_with_a_model_a_stage_trains_in_results(tmp_path, capsys, monkeypatch):
    """dvc.yaml has no edge from train_reward_model to the RL and evaluate stages that score with its model: dvc repro
    ran RL before the model existed, and never again once it was retrained. DVC's check refuses such a path (as a
    learned_classifier's results/<task>/classifier/model); Snakemake plans both and takes it; a copy outside
    results/ is a dependency DVC tracks."""
    from grueflow.params import main

    monkeypatch.chdir(tmp_path)  # the project root: DVC's stages read params/
    params = Path("params")
    shutil.copytree(MICRO, params)
    task_file = params / "tasks" / "sentiment.yaml"
    task = yaml.safe_load(task_file.read_text())
    suite = {**yaml.safe_load((MICRO / "suite.yaml").read_text()), "params_dir": "params"}
    Path("suite.yaml").write_text(yaml.safe_dump(suite))
    for path in ("results/sentiment/reward_model/model", "./results/sentiment/reward_model/model/",
                 str(tmp_path / "results" / "sentiment" / "reward_model" / "model")):
        component = {"metric": "reward_model", "weight": 0.1, "args": {"path": path}}
        task_file.write_text(yaml.safe_dump({**task, "reward": {"components": [*task["reward"]["components"],
                                                                                component]}}))
        assert main(["suite.yaml", "--engine", "dvc", "--out", "bad"]) == 2
        assert capsys.readouterr().err == (
            f"error: {params / 'tasks' / 'sentiment.yaml'}: reward component 'reward_model' args.path {path!r} is a "
            f"model a grueflow stage trains in results/; dvc.yaml has no edge from that stage to the ones that score "
            f"with it (dvc repro would run RL before it exists, and never again once it is retrained); run this suite "
            f"with snakemake, which plans it, or copy the trained folder out of results/ (e.g. to models/) and name "
            f"the copy, which DVC tracks as a dependency\n")
        assert main(["suite.yaml", "--out", "ok"]) == 0  # Snakemake plans it
