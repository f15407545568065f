"""The warm start's learning-rate schedules: transformers' own where RL4LMs' supervised configs name them."""

import math

import pytest
import torch
from transformers import get_scheduler

from grueflow.config import ConfigError, SupervisedConfig
from grueflow.params import parse
from grueflow.supervised import lr_factor, warmup_steps


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant", "constant_with_warmup"])
def test_without_warmup_each_schedule_is_transformers_own(schedule):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    theirs = get_scheduler(schedule, optimizer, num_warmup_steps=0, num_training_steps=10)
    for step in range(10):
        assert lr_factor(schedule, 0, 10, step) == pytest.approx(optimizer.param_groups[0]["lr"]), (schedule, step)
        optimizer.step()
        theirs.step()


def test_the_warmup_then_each_decay_by_hand():
    assert [lr_factor("linear", 2, 6, s) for s in range(6)] == pytest.approx([1 / 3, 2 / 3, 1.0, 0.75, 0.5, 0.25])
    assert [lr_factor("cosine", 2, 6, s) for s in range(2, 6)] == pytest.approx(
        [1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))])
    assert [lr_factor("constant_with_warmup", 2, 6, s) for s in range(4)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    assert parse(SupervisedConfig, {}, "m:").lr_schedule == "linear"  # the default: the schedule it always was


def test_a_constant_schedule_with_a_warmup_is_refused():
    with pytest.raises(ConfigError, match="lr_schedule constant has no warm-up, but warmup_ratio is 0.1"):
        parse(SupervisedConfig, {"lr_schedule": "constant", "warmup_ratio": 0.1}, "m:")
    with pytest.raises(ConfigError, match="lr_schedule"):
        parse(SupervisedConfig, {"lr_schedule": "exponential"}, "m:")


@pytest.mark.parametrize("ratio, total", [(0.1, 64), (0.1, 60), (0.05, 7), (0.0, 10), (0.5, 3)])
def test_warmup_steps_round_up_as_transformers_do(ratio, total):
    from transformers import TrainingArguments

    # transformers 5 takes a ratio as warmup_steps < 1 (4.x: warmup_ratio); RL4LMs' 4.18 rounds it up alike
    theirs = TrainingArguments(output_dir="unused", warmup_steps=ratio, report_to=[]).get_warmup_steps(total)
    assert warmup_steps(ratio, total) == theirs
