"""Generation settings as ``transformers`` knows them: beam search, length penalty, n-gram ban, repetition
penalty, RL4LMs' ``min_length``. Evaluation's decoding equals a plain ``generate`` call written out with the
same settings, on a model loaded without grueflow's backend."""

import pytest
import torch
from transformers import (AutoModelForCausalLM, AutoModelForSeq2SeqLM, LogitsProcessor, LogitsProcessorList,
                          NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor)

from grueflow.config import ConfigError, GenerationConfig, TaskConfig
from grueflow.data import Sample
from grueflow.evaluation import generate
from grueflow.models import load_pretrained
from grueflow.models.policy import Policy, completion_mask
from grueflow.params import parse
from grueflow.preference.config import PreferencesConfig

PROMPTS = {"causal": ["i watched this movie with my sister last week .", "a film .", "the plot was"],
           "seq2seq": ["generate a sentence with: dog kick ball", "cat", "generate a sentence with: sun"]}
PLAIN = {"causal": AutoModelForCausalLM, "seq2seq": AutoModelForSeq2SeqLM}


def test_min_length_keeps_rl4lms_meaning_per_model_kind():
    # RL4LMs adds the padded prompt length to a causal model's min_length, so it counts new tokens; a
    # seq2seq model's min_length counts the decoder start token as well
    assert GenerationConfig(min_length=5).min_new("causal") == 5
    assert GenerationConfig(min_length=5).min_new("seq2seq") == 4
    assert GenerationConfig(min_length=0).min_new("seq2seq") == 0
    assert GenerationConfig(min_new_tokens=3).min_new("seq2seq") == 3
    assert GenerationConfig().min_new("causal") == GenerationConfig().min_new("seq2seq") == 1


class PastStart(LogitsProcessor):
    """``processors`` over a decoder's tokens after its start token."""

    def __init__(self, processors: LogitsProcessorList) -> None:
        self.processors = processors

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return self.processors(input_ids[:, 1:], scores)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_beam_search_equals_generate_with_the_same_settings(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    samples = [Sample(id=str(i), prompt=p, references=("x",)) for i, p in enumerate(PROMPTS[kind])]
    gen = GenerationConfig(max_new_tokens=10, min_length=4, do_sample=False, num_beams=4, length_penalty=0.6,
                           early_stopping=True, no_repeat_ngram_size=2, repetition_penalty=1.3)
    ours = generate(policy, samples, gen, batch_size=2)

    plain = PLAIN[kind].from_pretrained(tiny_models[kind], dtype=torch.float32).eval()
    prompts = policy.encode(PROMPTS[kind])
    width = prompts.input_ids.shape[1]
    # a seq2seq decoder's start token is no text, which the repetition settings read (BART's is its EOS): they are
    # given past it, as grueflow gives them (the causal padding here is the tokenizer's own <pad>, never chosen, so
    # generate's reading it changes nothing)
    repetition = ({"no_repeat_ngram_size": 2, "repetition_penalty": 1.3} if kind == "causal" else
                  {"logits_processor": LogitsProcessorList([PastStart(LogitsProcessorList([
                      RepetitionPenaltyLogitsProcessor(1.3), NoRepeatNGramLogitsProcessor(2)]))])})
    with torch.no_grad():  # RL4LMs' call: a causal model's min_length is moved past the padded prompt
        out = plain.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                             max_new_tokens=10, min_length=4 + width if kind == "causal" else 4, do_sample=False,
                             num_beams=4, length_penalty=0.6, early_stopping=True, **repetition)
    completions = out[:, width:] if kind == "causal" else out[:, 1:]
    completions = completions.masked_fill(completion_mask(completions, tokenizer.eos_token_id) == 0,
                                          tokenizer.pad_token_id)
    assert ours == policy.decode(completions)

    greedy = generate(policy, samples, GenerationConfig(max_new_tokens=10, min_length=4, do_sample=False))
    assert greedy != ours  # the settings change the decoding: the test would see them dropped


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_rollout_sampler_applies_the_repetition_settings_as_generate_does(tiny_models, kind):
    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode(PROMPTS[kind])
    gen = GenerationConfig(max_new_tokens=10, min_length=3, do_sample=False, no_repeat_ngram_size=2,
                           repetition_penalty=1.5)
    sampled = policy.sample(prompts, gen)
    expected = policy.generate(prompts, gen)
    assert torch.equal(sampled, expected[:, :sampled.shape[1]])
    plain = policy.sample(prompts, GenerationConfig(max_new_tokens=10, min_length=3, do_sample=False))
    assert not torch.equal(plain, sampled)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_a_model_folders_own_generation_settings_never_change_the_decoding(tiny_models, tmp_path, kind):
    """generate fills what a call leaves out from the folder's generation_config.json (BART's forced EOS, banned
    tokens, min_p): evaluation then decoded otherwise than rollouts, which apply none of them."""
    import json
    import shutil

    model, tokenizer = load_pretrained(tiny_models[kind])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode(PROMPTS[kind])
    gen = GenerationConfig(max_new_tokens=10, min_new_tokens=0, do_sample=False)
    plain = policy.generate(prompts, gen)
    assert torch.equal(policy.sample(prompts, gen), plain[:, :policy.sample(prompts, gen).shape[1]])

    folder = tmp_path / "model"
    shutil.copytree(tiny_models[kind], folder)
    config = json.loads((folder / "generation_config.json").read_text())
    first = int(plain[0, 0])  # the first greedy token of row 0, banned below
    config.update(forced_eos_token_id=tokenizer.eos_token_id, suppress_tokens=[first], bad_words_ids=[[first]],
                  min_p=0.9, typical_p=0.2)
    (folder / "generation_config.json").write_text(json.dumps(config))
    model, tokenizer = load_pretrained(folder)
    tampered = Policy(model, tokenizer, max_prompt_length=24)
    assert torch.equal(tampered.generate(prompts, gen), plain)
    kept = model.generation_config  # as the folder wrote it, for the stage to save with the model
    assert kept.forced_eos_token_id == tokenizer.eos_token_id and kept.suppress_tokens == [first]
    from grueflow.config import LoraConfig
    from grueflow.models.lora import with_lora

    lora = Policy(with_lora(model, parse(LoraConfig, {"r": 4}, "lora")), tokenizer, max_prompt_length=24)
    assert torch.equal(lora.generate(prompts, gen), plain)  # under PEFT's wrappers too (a new adapter is a no-op)
    assert model.generation_config.forced_eos_token_id == tokenizer.eos_token_id


def test_a_seq2seq_generation_config_without_its_start_token_decodes_as_the_rollouts_do(tiny_models, tmp_path):
    """A hand-edited generation_config.json without decoder_start_token_id (config.json keeps it) ended evaluate in
    transformers' "decoder_start_token_id or bos_token_id has to be defined", while rollouts read config.json's."""
    import json
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_models["seq2seq"], folder)
    config = json.loads((folder / "generation_config.json").read_text())
    for key in ("decoder_start_token_id", "bos_token_id"):
        config.pop(key, None)
    (folder / "generation_config.json").write_text(json.dumps(config))
    model, tokenizer = load_pretrained(folder)
    assert model.generation_config.decoder_start_token_id is None and model.config.decoder_start_token_id is not None
    policy = Policy(model, tokenizer, max_prompt_length=24)
    prompts = policy.encode(PROMPTS["seq2seq"])
    gen = GenerationConfig(max_new_tokens=10, min_new_tokens=0, do_sample=False)
    sampled = policy.sample(prompts, gen)
    assert torch.equal(policy.generate(prompts, gen)[:, :sampled.shape[1]], sampled)


@pytest.mark.parametrize("decode", ["sample", "generate"])
def test_with_pad_as_eos_the_repetition_settings_never_read_a_rows_padding(tiny_models, decode):
    """GPT-2's and SmolLM2's pad token is EOS: the padding of a short prompt batched with a long one was read as EOS
    already generated, so the n-gram ban forbade EOS (and the penalty lowered it) in that row alone."""
    model, tokenizer = load_pretrained(tiny_models["causal"])
    tokenizer.pad_token = tokenizer.eos_token
    policy = Policy(model, tokenizer, max_prompt_length=24)
    gen = GenerationConfig(max_new_tokens=1, min_new_tokens=0, do_sample=False, no_repeat_ngram_size=1,
                           repetition_penalty=1.3)
    seen = []

    def record(tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:  # the logits after the processors
        seen.append(logits[0].clone())
        return logits

    short, long = PROMPTS["causal"][1], PROMPTS["causal"][0]
    for prompts in ([short], [short, long]):
        getattr(policy, decode)(policy.encode(prompts), gen, logits_processor=record)
    alone, batched = seen
    assert policy.encode([short, long]).attention_mask[0].eq(0).sum() > 0  # the short prompt is padded
    assert torch.isfinite(batched[tokenizer.eos_token_id]) and torch.allclose(alone, batched, atol=1e-4)


@pytest.mark.parametrize("decode", ["sample", "generate"])
def test_the_repetition_settings_never_read_a_seq2seq_decoders_start_token(tiny_models, decode):
    """BART's decoder starts from its EOS: read as a token of the text, a 1-gram ban forbade EOS in every row (0 of
    4 ever stopped) and the penalty lowered it. T5 starts from its pad, which shows the same here."""
    model, tokenizer = load_pretrained(tiny_models["seq2seq"])
    policy = Policy(model, tokenizer, max_prompt_length=24)
    start = model.config.decoder_start_token_id
    seen = []

    def record(tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:  # the logits after the processors
        seen.append(logits.clone())
        return logits

    gen = GenerationConfig(max_new_tokens=1, min_new_tokens=0, do_sample=False, no_repeat_ngram_size=1)
    getattr(policy, decode)(policy.encode(PROMPTS["seq2seq"]), gen, logits_processor=record)
    assert torch.isfinite(seen[0][:, start]).all()


def test_rollouts_and_preference_pairs_refuse_beam_search():
    gen = {"max_new_tokens": 8, "num_beams": 2, "do_sample": True}
    with pytest.raises(ConfigError, match=r"pairs.yaml: generation: num_beams must be 1, got 2: .* pairs are made "
                                          r"of sampled completions"):
        parse(PreferencesConfig, {"generation": gen}, "pairs.yaml:")
    task = {"datapool": {"id": "synthetic_sentiment"}, "model": {"id": "tiny_gpt2"},
            "lengths": {"prompt": 8, "target": 8},
            "rollout_generation": gen, "eval_generation": gen,
            "reward": {"components": [{"metric": "lexicon_sentiment"}]}, "metrics": [], "headline_metrics": []}
    with pytest.raises(ConfigError, match=r"t.yaml: rollout_generation: num_beams must be 1, got 2"):
        parse(TaskConfig, task, "t.yaml:")
