"""One interface over causal and seq2seq language models: encode, generate, score, supervise.

Everything the trainers need is aligned to *completion tokens*: tensors of shape ``(B, T)`` where
``T`` is the number of generated tokens, with a ``mask`` that is 1 up to and including the first
EOS and 0 after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from transformers import LogitsProcessorList

from grueflow.config import GenerationConfig
from grueflow.models import Kind


class Prompts(NamedTuple):
    input_ids: torch.Tensor  # (B, P)
    attention_mask: torch.Tensor  # (B, P)


class Scores(NamedTuple):
    logits: torch.Tensor  # (B, T, V) next-token logits for each completion token
    hidden: torch.Tensor | None  # (B, T, H) last hidden state before each completion token


def completion_mask(completions: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 for tokens up to and including the first EOS, else 0.  (B, T) -> (B, T) float."""
    is_eos = (completions == eos_token_id).long()
    before_first_eos = (is_eos.cumsum(dim=1) - is_eos) == 0
    return before_first_eos.float()


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under ``logits``.  (B, T, V), (B, T) -> (B, T)."""
    return torch.gather(F.log_softmax(logits, dim=-1), 2, tokens.unsqueeze(-1)).squeeze(-1)


def masked_logits(logits: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor:
    """Logits with disallowed actions at -inf (NLPO).  (B, T, V), (B, T, V) bool or None -> (B, T, V)"""
    return logits if action_mask is None else logits.masked_fill(~action_mask, float("-inf"))


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical over the vocabulary, in nats.  (B, T, V) -> (B, T)."""
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1)


@dataclass
class Policy:
    """A Hugging Face model with its tokenizer, seen as a text policy."""

    model: Any
    tokenizer: Any
    kind: Kind
    max_prompt_length: int

    def __post_init__(self) -> None:
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left" if self.kind == "causal" else "right"
        self.tokenizer.truncation_side = "left" if self.kind == "causal" else "right"

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    def encode(self, prompts: list[str]) -> Prompts:
        enc = self.tokenizer(prompts, truncation=True, max_length=self.max_prompt_length, padding=True,
                             return_tensors="pt")
        return Prompts(enc["input_ids"], enc["attention_mask"])

    @torch.no_grad()
    def generate(self, prompts: Prompts, gen: GenerationConfig, logits_processor: Any = None) -> torch.Tensor:
        """Sample completions with the KV cache.  Returns token ids (B, T), padded after EOS."""
        extra = {"logits_processor": LogitsProcessorList([logits_processor])} if logits_processor is not None else {}
        out = self.model.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask,
                                  pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.eos_token_id,
                                  **gen.generate_kwargs(), **extra)
        start = prompts.input_ids.shape[1] if self.kind == "causal" else 1
        completions = out[:, start:]
        mask = completion_mask(completions, self.eos_token_id)
        return completions.masked_fill(mask == 0, self.tokenizer.pad_token_id)

    def score(self, prompts: Prompts, completions: torch.Tensor, with_hidden: bool = False,
              model: Any = None) -> Scores:
        """One forward pass over prompt + completion: logits (and hidden states) per completion token."""
        model = model if model is not None else self.model
        mask = completion_mask(completions, self.eos_token_id).long()
        if self.kind == "causal":
            prompt_len = prompts.input_ids.shape[1]
            input_ids = torch.cat([prompts.input_ids, completions], dim=1)
            attention = torch.cat([prompts.attention_mask, mask], dim=1)
            positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
            out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                        output_hidden_states=with_hidden)
            logits = out.logits[:, prompt_len - 1:-1]
            hidden = out.hidden_states[-1][:, prompt_len - 1:-1] if with_hidden else None
            return Scores(logits, hidden)
        start = torch.full_like(completions[:, :1], model.config.decoder_start_token_id)
        decoder_ids = torch.cat([start, completions[:, :-1]], dim=1)
        decoder_mask = torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)
        out = model(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask,
                    decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask,
                    output_hidden_states=with_hidden)
        hidden = out.decoder_hidden_states[-1] if with_hidden else None
        return Scores(out.logits, hidden)

    def decode(self, completions: torch.Tensor) -> list[str]:
        return [text.strip() for text in self.tokenizer.batch_decode(completions, skip_special_tokens=True)]

    def encode_targets(self, targets: list[str], max_length: int) -> torch.Tensor:
        """Target token ids ending in EOS, right-padded with pad.  (B, T)"""
        prefix = " " if self.kind == "causal" else ""
        rows = [self.tokenizer(prefix + t, add_special_tokens=False, truncation=True,
                               max_length=max_length - 1)["input_ids"] + [self.eos_token_id] for t in targets]
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.tokenizer.pad_token_id] * (width - len(r)) for r in rows])

    def supervised_loss(self, prompts: Prompts, targets: torch.Tensor) -> torch.Tensor:
        """Mean token cross-entropy of ``targets`` given the prompts (teacher forcing)."""
        scores = self.score(prompts, targets)
        mask = completion_mask(targets, self.eos_token_id)
        nll = -logprobs_from_logits(scores.logits, targets)
        return (nll * mask).sum() / mask.sum()
