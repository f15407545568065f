"""RL4LMs' perplexity (``causal_perplexity``): the references under the evaluated model, strided, against
RL4LMs' own loop run on a plain ``transformers`` model."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from grueflow.config import ConfigError, RewardConfig
from grueflow.metrics import METRICS, MetricContext, MetricUnavailableError
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy
from grueflow.params import parse

REFERENCES = [["i watched this movie with my sister last week and we both loved the acting ."],
              ["a film about a dog , a ball and a long summer .", "the plot was thin but the music was great ."],
              ["terrible . i want my two hours back ."]] * 4


def rl4lms_causal_perplexity(model, tokenizer, references, stride: int, max_length: int) -> float:
    """``rl4lms.envs.text_generation.metric.Perplexity.compute`` as RL4LMs wrote it (its window is
    ``model.config.n_positions``; here ``max_length``)."""
    reference_texts = [ref for refs in references for ref in refs]
    encodings = tokenizer("\n\n".join(reference_texts), return_tensors="pt")
    nlls = []
    for i in range(0, encodings.input_ids.size(1), stride):
        begin_loc = max(i + stride - max_length, 0)
        end_loc = min(i + stride, encodings.input_ids.size(1))
        trg_len = end_loc - i
        input_ids = encodings.input_ids[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            outputs = model(input_ids, labels=target_ids)
            neg_log_likelihood = outputs[0] * trg_len
        nlls.append(neg_log_likelihood)
    return torch.exp(torch.stack(nlls).sum() / end_loc).item()


def build(args: dict, context: MetricContext):
    metric = METRICS.get("reference_perplexity")
    return metric.build(parse(metric.Args, args, "args"), context)


def test_reference_perplexity_is_rl4lms_causal_perplexity(tiny_models):
    model, tokenizer = load_pretrained(tiny_models["causal"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    compute = build({"stride": 16, "max_length": 32}, MetricContext(evaluated=policy))
    result = compute([""] * len(REFERENCES), ["x"] * len(REFERENCES), REFERENCES, [{}] * len(REFERENCES))

    plain = AutoModelForCausalLM.from_pretrained(tiny_models["causal"], dtype=torch.float32).eval()
    assert len(tokenizer("\n\n".join(r for refs in REFERENCES for r in refs)).input_ids) > 4 * 32  # many windows
    expected = rl4lms_causal_perplexity(plain, tokenizer, REFERENCES, stride=16, max_length=32)
    assert result.corpus["fluency/reference_perplexity"] == pytest.approx(expected, rel=1e-5)
    for refs, value in zip(REFERENCES, result.per_sample["fluency/reference_perplexity"]):
        ids = tokenizer("\n\n".join(refs), return_tensors="pt").input_ids[:, :32]
        with torch.no_grad():
            assert value == pytest.approx(math.exp(plain(ids, labels=ids).loss.item()), rel=1e-5)
    # a larger window sees more context: a different number, so the stride is not ignored
    wider = build({"stride": 16, "max_length": 64}, MetricContext(evaluated=policy))(
        [""] * len(REFERENCES), ["x"] * len(REFERENCES), REFERENCES, [{}] * len(REFERENCES))
    assert wider.corpus["fluency/reference_perplexity"] != pytest.approx(expected, rel=1e-6)


def test_reference_perplexity_needs_a_causal_evaluated_model_and_is_never_a_reward(tiny_models):
    with pytest.raises(MetricUnavailableError, match="scores the evaluated model, which only evaluate has"):
        build({}, MetricContext())
    model, tokenizer = load_pretrained(tiny_models["seq2seq"])
    with pytest.raises(MetricUnavailableError, match="defined for causal models"):
        build({}, MetricContext(evaluated=Policy(model, tokenizer, max_prompt_length=24)))
    with pytest.raises(ConfigError, match="stride must be > 0, got 0"):
        build({"stride": 0}, MetricContext())
    with pytest.raises(ConfigError, match=r"t.yaml: components\[0\]: metric 'reference_perplexity' does not score the "
                                          r"generations, so it cannot be a reward component; list it under metrics"):
        parse(RewardConfig, {"components": [{"metric": "reference_perplexity"}]}, "t.yaml:")
