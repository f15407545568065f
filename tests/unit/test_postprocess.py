"""Post-processing of generations before scoring (RL4LMs' ``post_processing_fn``): the built-in functions,
user functions by import path, and where it applies (evaluation's predictions and the RL reward)."""

import pytest

from grueflow.config import ConfigError, GenerationConfig
from grueflow.data import Sample
from grueflow.evaluation import generate
from grueflow.io import DataError
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.params import parse
from grueflow.postprocess import apply


def shout(text: str) -> str:
    """A user post-processor, named by import path in the tests below."""
    return text.upper()


def count_words(text: str) -> int:
    return len(text.split())


def forget_return(text: str) -> None:
    text.strip()


def test_builtin_post_processors():
    article = "  The council met on Monday. It voted 7 to 2.\nThe mayor left early. Nobody knows why.  "
    assert apply("three_sentence_summary", [article]) == [
        "The council met on Monday.\nIt voted 7 to 2.\nThe mayor left early."]
    assert apply("first_line", ["\n  \n  first line  \nsecond", "   "]) == ["first line", ""]
    assert apply("strip", ["  a b \n"]) == ["a b"]
    assert apply(None, [" kept "]) == [" kept "]
    assert apply("tests.unit.test_postprocess:shout", ["a film"]) == ["A FILM"]
    with pytest.raises(DataError, match=r"post_processing 'tests.unit.test_postprocess:count_words' returned int 2; "
                                        r"it must return a str"):
        apply("tests.unit.test_postprocess:count_words", ["a film"])
    with pytest.raises(DataError, match=r"post_processing 'tests.unit.test_postprocess:forget_return' returned "
                                        r"NoneType None; it must return a str"):  # was a metric's traceback on None
        apply("tests.unit.test_postprocess:forget_return", ["a film"])


def boom(text: str) -> str:
    if text == "bad":
        raise ValueError("boom")
    return text


def test_a_post_processor_that_raises_shows_its_own_frames_then_one_line_naming_it_and_the_text(capsys):
    """It ended in a bare traceback, with no line naming the post_processing."""
    from grueflow.config import PluginFailedError
    from grueflow.stage import main_guard

    name = "tests.unit.test_postprocess:boom"
    with pytest.raises(PluginFailedError, match=rf"^post_processing '{name}' failed on text 2: ValueError: boom$"
                       ) as raised:
        apply(name, ["fine", "bad"])
    assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(SystemExit) as exit:
        main_guard(lambda: apply(name, ["bad"]))
    assert exit.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-2] == "ValueError: boom"
    assert lines[-1] == f"error: post_processing '{name}' failed on text 1: ValueError: boom"
    assert "direct cause" not in "\n".join(lines) and not any("grueflow/stage.py" in line for line in lines)


@pytest.mark.parametrize("name, message", [
    ("three_sentences", "unknown post-processor 'three_sentences'; valid post-processor ids: first_line, strip, "
                        "three_sentence_summary"),
    ("no_such_module:fn", "post_processing 'no_such_module:fn': cannot import 'no_such_module' (No module named "
                          "'no_such_module'); install its package or put the module in the project folder"),
    ("tests.unit.test_postprocess:whisper", "post_processing 'tests.unit.test_postprocess:whisper': module "
                                            "'tests.unit.test_postprocess' has no 'whisper'"),
    ("tests.unit.test_postprocess:PROMPT", "post_processing 'tests.unit.test_postprocess:PROMPT' is not callable"),
    ("a b:c", "post_processing 'a b:c' is not an import path; write it as package.module:name"),
])
def test_a_bad_post_processor_fails_at_parse_time(name, message):
    with pytest.raises(ConfigError) as error:
        parse(GenerationConfig, {"post_processing": name}, "t.yaml: eval_generation")
    assert str(error.value).startswith("t.yaml: eval_generation: ") and message in str(error.value)


PROMPT = "i watched this movie with my sister last week ."


def test_evaluation_scores_and_keeps_the_post_processed_generations(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    samples = [Sample(id="0", prompt=PROMPT, references=("x",))]
    raw = generate(policy, samples, GenerationConfig(max_new_tokens=6, do_sample=False))
    shouting = {"max_new_tokens": 6, "do_sample": False, "post_processing": "tests.unit.test_postprocess:shout"}
    shouted = generate(policy, samples, parse(GenerationConfig, shouting, "eval_generation"))
    assert raw[0].strip() and shouted == [raw[0].upper()] != raw


def nothing(text: str) -> str:
    return ""


def test_the_rl_reward_scores_the_post_processed_rollouts(tiny_models):
    from grueflow.config import RewardConfig
    from grueflow.data import DATAPOOLS
    from grueflow.metrics import MetricContext
    from grueflow.metrics.reward import Reward
    from grueflow.rl import ALGORITHMS
    from grueflow.rl.trainer import RLTrainer
    from grueflow.seeding import seed_everything

    loader = DATAPOOLS.get("synthetic_sentiment")
    samples = loader.build(loader.Args(n_train=8, n_val=2, n_test=2, n_unlabelled=2)).splits["train"]
    reward = Reward(parse(RewardConfig, {"components": [{"metric": "diversity", "score": "length"}]}, "reward"),
                    MetricContext())
    settings = {"iterations": 1, "rollouts_per_iteration": 8, "minibatch_size": 8, "epochs": 1, "group_size": 4}

    def rollout(post_processing):
        seed_everything(0)
        model, tokenizer = load_pretrained(tiny_models["causal"])
        generation = parse(GenerationConfig, {"max_new_tokens": 6, "min_new_tokens": 3,
                                              "post_processing": post_processing}, "rollout_generation")
        trainer = RLTrainer("grpo", parse(ALGORITHMS.get("grpo").Config, settings, "grpo"),
                            Policy(model, tokenizer, 24), load_pretrained(tiny_models["causal"])[0], reward, samples,
                            generation, seed=0)
        trainer.collect()
        return trainer.last_batch

    raw, emptied = rollout(None), rollout("tests.unit.test_postprocess:nothing")
    assert all(raw["generations"]) and min(raw["reward"]) >= 1  # min_new_tokens: at least one word each
    assert emptied["generations"] == [""] * 8 and emptied["reward"] == [0.0] * 8
