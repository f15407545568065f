"""Metrics and rewards that compute what RL4LMs computes: ROUGE-L max (py-rouge), the TER reward, the intent reward.

The py-rouge literals were computed once with the stock package, outside grueflow: py-rouge 1.1 with setuptools
65's ``pkg_resources`` and nltk 3.10.4, calling ``rouge.Rouge(metrics=["rouge-l"], **args).get_scores(generation,
[reference])["rouge-l"]["f"]`` per reference and taking the maximum, as RL4LMs' RougeLMax does (its punkt step saw
only py-rouge's alphanumeric text, where it finds no sentence end). The sentences are read from ../shared/data.
"""

import csv
import json
import math
import sys
from pathlib import Path

import pytest
import shared_data
import yaml
from test_metrics_library import tiny_classifier

from grueflow.config import ConfigError, RewardConfig
from grueflow.metrics import METRICS, MetricContext
from grueflow.metrics.reward import Reward
from grueflow.params import load_section, parse

CTX = MetricContext()
ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "params" / "grue" / "tasks"
# RL4LMs' narrative_qa reward_fn args (scripts/training/task_configs/narrative_qa/t5_ppo.yml)
NARRATIVE_QA = {"max_n": 4, "limit_length": True, "length_limit": 100, "length_limit_type": "words", "apply_avg": True,
                "apply_best": True, "alpha": 0.5, "weight_factor": 1.2, "stemming": True}


def compute(metric_id, generations, references, prompts=None, meta=None, **args):
    metric = METRICS.get(metric_id)
    fn = metric.build(parse(metric.Args, args, "args"), CTX)
    return fn(prompts or ["p"] * len(generations), generations, references, meta or [{}] * len(generations))


def rouge_l_max(generations, references, **args):
    return compute("rouge_l_max", generations, references, **args).per_sample["lexical/rouge_l_max"]


def test_rouge_l_max_by_hand():
    """LCS "the cat on the mat": 5 of 6 words each way, so P = R = F = 5/6; py-rouge's weight_factor w raises P and
    R to the power 1/w first. Truncated to 3 words, "the cat sat" vs "the cat is": 2 of 3."""
    generation, reference = ["the cat sat on the mat"], [["the cat is on the mat"]]
    assert rouge_l_max(generation, reference) == pytest.approx([5 / 6])  # rouge-score
    assert rouge_l_max(generation, reference, package="py_rouge") == pytest.approx([5 / 6])
    assert rouge_l_max(generation, reference, package="py_rouge", weight_factor=1.2) == pytest.approx(
        [(5 / 6) ** (1 / 1.2)])
    assert rouge_l_max(generation, reference, package="py_rouge", length_limit=3,
                       length_limit_type="words") == pytest.approx([2 / 3])
    assert rouge_l_max(generation, [["a dog", "the cat is on the mat"]], package="py_rouge", **NARRATIVE_QA) == \
        pytest.approx([0.8590444340720371])  # the best of the two references; (5/6) ** (5/6)


def test_rouge_l_max_py_rouge_is_rl4lms_on_real_sentences():
    generations, references = shared_data.cnn_dailymail(2)
    assert rouge_l_max(generations, references, package="py_rouge", **NARRATIVE_QA) == pytest.approx(
        [0.2924647966189111, 0.3336892043930866], rel=1e-12)
    generations, references = shared_data.commongen(3)
    assert rouge_l_max(generations, references, package="py_rouge", **NARRATIVE_QA) == pytest.approx(
        [0.742873785657676, 0.5618426829453645, 0.7132754626224419], rel=1e-12)
    # py-rouge's own defaults (RL4LMs' RougeLMax without args) differ from rouge-score's ROUGE-L, today's default
    assert rouge_l_max(generations, references, package="py_rouge") == pytest.approx([0.7, 0.5, 2 / 3], rel=1e-12)
    assert rouge_l_max(generations, references) == pytest.approx([0.6, 0.5, 2 / 3], rel=1e-12)
    long_text = " ".join(["the cat sat on the mat ."] * 30)  # 210 words: past the 100-word limit
    generations, references = [long_text, "the cat sat on the mat"], [["the cat sat on the mat", "a dog"], [long_text]]
    assert rouge_l_max(generations, references, package="py_rouge", **NARRATIVE_QA) == pytest.approx(
        [0.19614569872439402] * 2, rel=1e-12)
    assert rouge_l_max(generations, references, package="py_rouge") == pytest.approx(
        [0.07228915662650602] * 2, rel=1e-12)
    assert math.isnan(rouge_l_max(["a dog"], [[]], package="py_rouge")[0])  # no reference


def test_rouge_l_max_leaves_no_pkg_resources_stand_in_behind():
    had = "pkg_resources" in sys.modules
    rouge_l_max(["a dog"], [["a dog runs"]], package="py_rouge")
    assert ("pkg_resources" in sys.modules) == had


@pytest.mark.parametrize("args, message", [
    ({"length_limit": 100}, "length_limit are py-rouge's arguments; set package: py_rouge"),
    ({"package": "py_rouge", "use_stemmer": False}, "say stemming: false"),
    ({"package": "py_rouge", "apply_avg": False}, "apply_avg: false needs apply_best: true"),
    ({"package": "py_rouge", "weight_factor": 0.0}, "weight_factor must be > 0"),
    ({"package": "py_rouge", "length_limit_type": "tokens"}, "'words'"),
    ({"package": "py_rouge", "alpha": 3.0}, r"alpha weighs precision against recall, in \[0, 1\]; got 3.0"),
    ({"package": "py_rouge", "length_limit": -3}, "length_limit must be >= 1, got -3"),
    ({"package": "py_rouge", "max_n": 0}, "max_n must be >= 1, got 0"),
])
def test_rouge_l_max_args_say_what_is_wrong(args, message):
    with pytest.raises(ConfigError, match=message):
        parse(METRICS.get("rouge_l_max").Args, args, "args")


def test_narrative_qa_reward_and_metric_are_rl4lms_rouge_l_max():
    with (ROOT / "tests" / "fixtures" / "rl4lms" / "configs.csv").open(newline="", encoding="utf-8") as handle:
        configs = [row for row in csv.DictReader(handle) if row["config"].startswith("narrative_qa/")]
    assert len(configs) == 4 and all(json.loads(row["reward"]) == {"id": "rouge_l_max", "args": NARRATIVE_QA}
                                     for row in configs)
    raw = yaml.safe_load((TASKS / "narrative_qa.yaml").read_text())
    expected = {"package": "py_rouge", **NARRATIVE_QA}
    assert [(c["metric"], c["weight"], c["args"]) for c in raw["reward"]["components"]] == [
        ("rouge_l_max", 1.0, expected)]
    assert [m["args"] for m in raw["metrics"] if m["id"] == "rouge_l_max"] == [expected]


def test_one_minus_ter_is_rl4lms_ter_reward():
    """One word of six deleted: TER = 1/6 (sacrebleu: 16.67), so RL4LMs' reward 1 - TER/100 = 5/6; TER ignores case."""
    result = compute("one_minus_ter", ["The cat sat on mat", "x"], [["the cat sat on the mat"], []])
    assert result.per_sample["lexical/one_minus_ter"][0] == pytest.approx(5 / 6)
    assert math.isnan(result.per_sample["lexical/one_minus_ter"][1])
    assert compute("ter", ["The cat sat on mat"], [["the cat sat on the mat"]]).per_sample["lexical/ter"] == \
        pytest.approx([100 / 6])  # ter itself is unchanged: TER in percent
    generations, references = shared_data.iwslt(3)  # the ter literals of test_metrics_library
    result = compute("one_minus_ter", generations, references)
    assert result.per_sample["lexical/one_minus_ter"] == pytest.approx(
        [1 - 0.1176470588235294, 1 - 0.125, 1 - 0.08695652173913043], rel=1e-12)
    assert result.corpus["lexical/one_minus_ter"] == pytest.approx(1 - 0.10714285714285714, rel=1e-12)


def test_iwslt2017_reward_is_one_minus_ter():
    reward = Reward(load_section(RewardConfig, TASKS / "iwslt2017.yaml", "reward"), CTX)
    total, parts = reward(["p"], ["The cat sat on mat"], [["the cat sat on the mat"]], [{}])
    assert total == pytest.approx([5 / 6]) and list(parts) == ["lexical/one_minus_ter"]


@pytest.mark.parametrize("eou", ["", "  "])
def test_intent_accuracy_refuses_an_invisible_turn_separator(eou):
    with pytest.raises(ConfigError, match="eou must be the visible turn separator the prompts use"):
        parse(METRICS.get("intent_accuracy").Args, {"context": "last_turn", "eou": eou}, "args")


def test_intent_classifier_reads_rl4lms_input():
    args = parse(METRICS.get("intent_accuracy").Args, {"context": "last_turn"}, "args")
    prompt = "Good morning . <EOU> Would you like something to drink ? <EOU>"  # the daily_dialog datapool's layout
    assert args.classifier_input(prompt, "Tea , please .") == " Would you like something to drink ? Tea , please ."
    assert args.classifier_input("no separator", " here") == "no separator here"
    assert args.classifier_input("", "alone") == "alone"
    whole = parse(METRICS.get("intent_accuracy").Args, {"context": "prompt"}, "args")
    assert whole.classifier_input(prompt, "Tea .") == prompt + " Tea ."
    default = parse(METRICS.get("intent_accuracy").Args, {}, "args")  # RL4LMs' input, up to its 512 tokens
    assert default.context == "last_turn" and default.max_length is None


def test_daily_dialog_reward_is_rl4lms_intent_coeff_and_auto_coeff(tiny_models, tmp_path):
    """RL4LMs' IntentAccuracy reward: intent_coeff x (classifier's intent == meta intent) + auto_coeff x METEOR, with
    the task file's 0.75 and 0.25. METEOR of an 8-token exact match: 1 - 0.5 x (1 chunk / 8 matches)^3."""
    acts = ["inform", "question", "directive", "commissive"]
    probs = tiny_classifier(tiny_models["causal"], tmp_path, acts)
    raw = yaml.safe_load((TASKS / "daily_dialog.yaml").read_text())["reward"]
    assert [(c["metric"], c["weight"]) for c in raw["components"]] == [("intent_accuracy", 0.75), ("meteor", 0.25)]
    assert raw["components"][0]["args"] == {"context": "last_turn", "max_length": 512}
    raw["components"][0]["args"] = {**raw["components"][0]["args"], "model": str(tmp_path)}
    reward = Reward(parse(RewardConfig, raw, "reward"), CTX)
    prompt = "Good morning . <EOU> Would you like something to drink ? <EOU>"
    generations = ["i would like a cup of tea .", "no thanks"]
    predicted = [max(range(4), key=probs(" Would you like something to drink ? " + g).__getitem__) for g in generations]
    meta = [{"intent": predicted[0]}, {"intent": (predicted[1] + 1) % 4}]  # the first right, the second wrong
    total, parts = reward([prompt] * 2, generations, [["i would like a cup of tea ."], ["yes please"]], meta)
    assert parts == {"task/intent_accuracy": [1.0, 0.0], "lexical/meteor": pytest.approx([0.9990234375, 0.0])}
    assert total == pytest.approx([0.75 * 1.0 + 0.25 * 0.9990234375, 0.0])
