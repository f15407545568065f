"""One interface over causal and seq2seq language models: encode, generate, score, supervise.

Everything the trainers need is aligned to *completion tokens*: tensors of shape ``(B, T)`` where
``T`` is the number of generated tokens, with a ``mask`` that is 1 up to and including the first
EOS and 0 after it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
import torch
from transformers import (LogitsProcessor, LogitsProcessorList, NoRepeatNGramLogitsProcessor, PreTrainedModel,
                          RepetitionPenaltyLogitsProcessor)

from grueflow.config import GenerationConfig
from grueflow.models import Kind, model_kind, special_tokens_only
from grueflow.models.backend import Backend, SampledLogits, prefix_forward, select, shared_encoder

log = logging.getLogger(__name__)


class Prompts(NamedTuple):
    input_ids: torch.Tensor  # (B, P)
    attention_mask: torch.Tensor  # (B, P)


class Scores(NamedTuple):
    logits: torch.Tensor  # (B, T, V) float32 next-token logits for each completion token
    hidden: torch.Tensor | None  # (B, T, H) float32 last hidden state before each completion token


def completion_mask(completions: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """1 for tokens up to and including the first EOS, else 0.  (B, T) -> (B, T) float."""
    is_eos = (completions == eos_token_id).long()
    before_first_eos = (is_eos.cumsum(dim=1) - is_eos) == 0
    return before_first_eos.float()


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under ``logits``.  (B, T, V), (B, T) -> (B, T).  See :func:`selective_logprobs`."""
    return selective_logprobs(logits, tokens)[0]


def selective_logprobs(logits: torch.Tensor, tokens: torch.Tensor, action_mask: torch.Tensor | None = None,
                       entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log_softmax(logits)`` at ``tokens``, with the actions ``action_mask`` disallows (NLPO) at -inf, and with
    ``entropy`` the entropy of each position's categorical, without a (B, T, V) log-probability tensor.
    (B, T, V), (B, T)[, (B, T, V) bool] -> (B, T), (B, T) or None.

    Equal to :func:`token_logprobs` of the full ``log_softmax`` and :func:`entropy_from_logprobs` to float
    rounding, and differentiable in ``logits`` (both outputs; not twice). The softmax runs over chunks of rows
    small enough to stay in the CPU's caches, so forward and backward each read the logits once and the
    backward writes one (B, T, V) gradient: the full form makes and reads four or five (B, T, V) tensors, and
    over a 49,152-token vocabulary those passes cost as much as the LM head's products (TRL's
    ``selective_log_softmax`` avoids them the same way).
    """
    return _SelectiveLogSoftmax.apply(logits, tokens, action_mask, entropy)


def _chunk_rows(logits: torch.Tensor) -> int:
    """Rows of a (N, V) logits matrix per chunk: about 1 MiB of float32 on a CPU (its L2 cache), 256 MiB elsewhere."""
    budget = 1 << 18 if logits.device.type == "cpu" else 1 << 26
    return max(1, budget // logits.shape[-1])


class _SelectiveLogSoftmax(torch.autograd.Function):
    """:func:`selective_logprobs` with its backward: ``d log p_k / d z = onehot(k) - p`` and
    ``d H / d z = -p (log p + H)``, masked actions (``p = 0``) getting no gradient."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, tokens: torch.Tensor, action_mask: torch.Tensor | None,
                entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        flat, ids = logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1, 1)
        keep = action_mask.reshape(flat.shape) if action_mask is not None else None
        lse = flat.new_empty(flat.shape[0])
        logprobs = flat.new_empty(flat.shape[0])
        ent = flat.new_empty(flat.shape[0]) if entropy else None
        step = _chunk_rows(flat)
        for start in range(0, flat.shape[0], step):
            rows = slice(start, start + step)
            z = flat[rows] if keep is None else flat[rows].masked_fill(~keep[rows], float("-inf"))
            lse[rows] = torch.logsumexp(z, dim=-1)
            logprobs[rows] = z.gather(1, ids[rows]).squeeze(1) - lse[rows]
            if ent is not None:
                ent[rows] = entropy_from_logprobs(z - lse[rows, None])
        ctx.save_for_backward(logits, tokens, action_mask, lse, ent)
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None, and costs nothing
        return logprobs.view(tokens.shape), ent.view(tokens.shape) if ent is not None else None

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
                 ) -> tuple[torch.Tensor | None, None, None, None]:
        logits, tokens, action_mask, lse, ent = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        flat, ids = logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1, 1)
        keep = action_mask.reshape(flat.shape) if action_mask is not None else None
        g_lp = grad_logprobs.reshape(-1, 1) if grad_logprobs is not None else torch.zeros_like(lse)[:, None]
        g_ent = grad_entropy.reshape(-1, 1) if grad_entropy is not None and ent is not None else None
        grad = torch.empty_like(flat)
        step = _chunk_rows(flat)
        for start in range(0, flat.shape[0], step):
            rows = slice(start, start + step)
            z = flat[rows] if keep is None else flat[rows].masked_fill(~keep[rows], float("-inf"))
            logp = z - lse[rows, None]
            p = logp.exp()
            chunk = p * -g_lp[rows]
            if g_ent is not None:  # masked actions: p = 0 times a finite (clamped) log p
                chunk -= p * (logp.clamp(min=torch.finfo(logp.dtype).min) + ent[rows, None]) * g_ent[rows]
            grad[rows] = chunk.scatter_add_(1, ids[rows], g_lp[rows])
        return grad.view_as(logits), None, None, None


def token_logprobs(logp: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The log-probabilities ``logp`` (B, T, V) gives ``tokens`` (B, T).  -> (B, T)"""
    return torch.gather(logp, 2, tokens.unsqueeze(-1)).squeeze(-1)


def _draw(logits: torch.Tensor) -> torch.Tensor:
    """One token per row from ``softmax(logits)`` by inverse-CDF sampling.  (B, V) -> (B,)

    ``P(token = k) = p_k`` exactly: ``u ~ U[0, sum p)`` falls in ``[cdf_{k-1}, cdf_k)`` with
    probability ``p_k``, and a masked token (``p_k = 0``) has an empty interval. ``u`` comes from the
    generator of the logits' device.
    """
    cdf = logits.softmax(dim=-1).cumsum(dim=-1)
    u = torch.rand(logits.shape[0], 1, device=logits.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=logits.shape[-1] - 1)


def shared_groups(prompts: Prompts, group_size: int) -> int:
    """``group_size`` if the rows come in consecutive groups of that many identical prompts, else 1."""
    batch = prompts.input_ids.shape[0]
    if group_size <= 1 or batch % group_size:
        return 1
    ids = prompts.input_ids.view(batch // group_size, group_size, -1)
    return group_size if bool((ids == ids[:, :1]).all()) else 1


def entropy_from_logprobs(logp: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical over the vocabulary, in nats, from its log-probabilities; a masked
    action (log-prob -inf, NLPO) adds 0.  (B, T, V) -> (B, T).

    Without gradients, -inf is clamped to the lowest finite float (``0 x that = 0``): two passes over the
    (B, T, V) tensor fewer than masking where ``isinf``. With gradients the masked form is kept, whose
    backward never multiplies 0 by an overflowed product.
    """
    if logp.requires_grad:
        return -(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1)
    return -(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1)


def repetition_processors(gen: GenerationConfig) -> LogitsProcessorList:
    """``transformers``' repetition penalty and n-gram ban for ``gen``, in ``generate``'s order; empty when
    both are off. Called as ``processors(tokens (B, L), logits (B, V))`` with every token so far (a causal
    model's prompt included, a seq2seq model's decoder start included), as ``generate`` calls them."""
    processors = LogitsProcessorList()
    if gen.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(gen.repetition_penalty))
    if gen.no_repeat_ngram_size > 0:
        processors.append(NoRepeatNGramLogitsProcessor(gen.no_repeat_ngram_size))
    return processors


class UnpaddedRepetition(LogitsProcessor):
    """:func:`repetition_processors` applied to each row's text alone: a causal row without its prompt's left
    padding, a seq2seq row without the decoder's start token.

    With pad == EOS (GPT-2's and SmolLM2's tokenizers), padding read as tokens is EOS already in the sequence: the
    repetition penalty would lower EOS, and a 1-gram ban forbid it, in the padded rows of a batch alone, so that a
    row's chance to stop would depend on how long its batch-mates' prompts are. BART's decoder starts from its EOS,
    which would likewise lower or ban EOS in every row. ``generate``'s own processors read those tokens so;
    :meth:`Policy.generate` passes this one instead of them, and rollouts use it too.

    ``padding`` (B,): the tokens to leave out at the start of each row. Called with more rows than B (beams), row
    ``i`` is prompt ``i // (rows / B)``'s.
    """

    def __init__(self, gen: GenerationConfig, padding: torch.Tensor) -> None:
        self.processors = repetition_processors(gen)
        self.padding = padding
        self.groups: dict[int, list[tuple[int, torch.Tensor]]] = {}  # rows -> (padding, row indices) per width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.processors:
            return scores
        rows = input_ids.shape[0]
        if rows not in self.groups:
            padding = self.padding.repeat_interleave(rows // self.padding.shape[0]).cpu()
            self.groups[rows] = [(width, (padding == width).nonzero().squeeze(1).to(scores.device))
                                 for width in padding.unique().tolist()]
        groups = self.groups[rows]
        if len(groups) == 1:
            return self.processors(input_ids[:, groups[0][0]:], scores)
        out = scores.clone()
        for width, index in groups:
            out[index] = self.processors(input_ids[index, width:], scores[index])
        return out


def output_head(model: Any, hidden: torch.Tensor, logits: torch.Tensor) -> Optional[torch.nn.Module]:
    """``model``'s LM head if it alone maps the last hidden states to the logits, checked on this pass's own
    (``hidden`` (B, P, H) -> ``logits`` (B, P, V)); else None (a model that caps, scales or biases its logits
    after the head).

    :meth:`Policy.score` then runs the head once over every completion position, instead of once on the
    prompt's last position and once on the rest: one (V, H) weight gradient and no (B, T, V) concatenation
    instead of two and one, the same numbers to float rounding.
    """
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Module):
        return None
    with torch.no_grad():
        same = torch.allclose(head(hidden).float(), logits.float(), rtol=1e-4, atol=1e-4)
    return head if same else None


@dataclass
class Policy:
    """A Hugging Face model with its tokenizer, seen as a text policy, on its ``backend``'s device and precision.

    Every tensor it makes is on the model's device; logits and hidden states come out in float32 whatever the
    precision (under bf16 the forward passes run in autocast and their outputs are upcast).
    """

    model: Any
    tokenizer: Any
    max_prompt_length: int
    backend: Backend = field(default_factory=select)

    @property
    def kind(self) -> Kind:
        """``causal`` or ``seq2seq``, from the model's config (:func:`grueflow.models.model_kind`)."""
        return model_kind(self.model.config)

    def __post_init__(self) -> None:
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left" if self.kind == "causal" else "right"
        self.tokenizer.truncation_side = "left" if self.kind == "causal" else "right"

    @property
    def eos_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def device(self) -> torch.device:
        return self.backend.execution.device

    def count_cut(self, prompts: Sequence[str], split: str, key: str = "lengths.prompt") -> dict[str, Any]:
        """How many of a split's ``prompts`` are longer than ``max_prompt_length`` tokens (special tokens included),
        so that :meth:`encode` cuts them (from the left for a causal model, the right for a seq2seq one): one
        warning naming ``key`` (the params key of the budget) when some are, and the counts for the stage record
        (``{"split", "cut", "prompts", "max_tokens", "side"}``)."""
        lengths = [len(ids) for ids in self.tokenizer(list(prompts), truncation=False, verbose=False)["input_ids"]]
        cut = sum(n > self.max_prompt_length for n in lengths)
        side = self.tokenizer.truncation_side
        if cut:
            log.warning("%d of %d %s prompts longer than %s=%d tokens were cut (%s; the longest has %d): raise %s to "
                        "keep them whole", cut, len(lengths), split, key, self.max_prompt_length, side, max(lengths),
                        key)
        return {"split": split, "cut": cut, "prompts": len(lengths), "max_tokens": self.max_prompt_length,
                "side": side}

    def encode(self, prompts: list[str]) -> Prompts:
        enc = self.tokenizer(prompts, truncation=True, max_length=self.max_prompt_length, padding=True,
                             return_tensors="np")
        return Prompts(*(torch.from_numpy(np.asarray(enc[k], dtype=np.int64)).to(self.device)
                         for k in ("input_ids", "attention_mask")))

    @torch.no_grad()
    def generate(self, prompts: Prompts, gen: GenerationConfig, logits_processor: Any = None) -> torch.Tensor:
        """Completions by ``model.generate`` with every setting of ``gen`` (sampling, greedy or beam search; the
        best beam per row): token ids (B, T), padded after EOS."""
        kwargs = gen.generate_kwargs(self.kind)
        processors = [p for p in (self._repetition(prompts, gen), logits_processor) if p is not None]
        if processors:
            kwargs.update(repetition_penalty=1.0, no_repeat_ngram_size=0,  # given unpadded instead
                          logits_processor=LogitsProcessorList(processors))
        # the task's settings alone: generate would fill what they leave out from the model's own generation config
        model = next(m for m in self.model.modules() if isinstance(m, PreTrainedModel))  # under PEFT's wrappers
        own = model.generation_config
        model.generation_config = special_tokens_only(own, model.config)
        try:
            with self.backend.execution.autocast():
                out = self.model.generate(input_ids=prompts.input_ids, attention_mask=prompts.attention_mask,
                                          pad_token_id=self.tokenizer.pad_token_id, eos_token_id=self.eos_token_id,
                                          **kwargs)
        finally:
            model.generation_config = own
        start = prompts.input_ids.shape[1] if self.kind == "causal" else 1
        completions = out[:, start:]
        mask = completion_mask(completions, self.eos_token_id)
        return completions.masked_fill(mask == 0, self.tokenizer.pad_token_id)

    @torch.no_grad()
    def sample(self, prompts: Prompts, gen: GenerationConfig, group_size: int = 1, logits_processor: Any = None
               ) -> torch.Tensor:
        """Sample completions for RL: token ids (B, T), padded after EOS.

        Unlike :meth:`generate` (evaluation, ``model.generate``, beam search included), this runs its own
        decode loop and draws from exactly the configured distribution, so rollout log-probs are on-policy:
        the repetition penalty and the n-gram ban, EOS suppressed until ``gen.min_new(kind)`` tokens, then
        ``logits_processor`` (NLPO's masks), then temperature, top-k and top-p, as ``generate`` orders them.
        The prompt is encoded once per group of ``group_size`` identical rows and its KV cache repeated
        (:func:`shared_groups`). Tokens are drawn by inverting the cumulative distribution with one uniform per
        row, which is exact and, on CPU, much cheaper than ``torch.multinomial`` over a whole vocabulary.
        """
        return self._sample(prompts, gen, group_size, logits_processor)[0]

    @torch.no_grad()
    def sample_kept(self, prompts: Prompts, gen: GenerationConfig, group_size: int = 1
                    ) -> tuple[torch.Tensor, Optional[SampledLogits]]:
        """:meth:`sample`, and its sampling pass kept differentiable where the backend can keep it (else None):
        the rollout's logits as a function of the weights, valid while the weights stay as they are."""
        return self._sample(prompts, gen, group_size, None, keep=True)

    def _sample(self, prompts: Prompts, gen: GenerationConfig, group_size: int, logits_processor: Any,
                keep: bool = False) -> tuple[torch.Tensor, Optional[SampledLogits]]:
        group_size = shared_groups(prompts, group_size)
        batch = prompts.input_ids.shape[0]
        decoding = self.backend.start(self.model, self.kind, prompts, group_size, gen.max_new_tokens, keep)
        logits = decoding.first
        tokens = (prompts.input_ids if self.kind == "causal"
                  else torch.full((batch, 1), self.model.config.decoder_start_token_id, dtype=torch.long,
                                  device=self.device))
        done = torch.zeros(batch, dtype=torch.bool, device=self.device)
        generated = []
        repeats, min_new = self._repetition(prompts, gen), gen.min_new(self.kind)
        for t in range(gen.max_new_tokens):
            logits = self._warp(repeats(tokens, logits) if repeats else logits, gen, t < min_new, tokens,
                                logits_processor)
            token = _draw(logits) if gen.do_sample else logits.argmax(-1)
            token = token.masked_fill(done, self.tokenizer.pad_token_id)
            generated.append(token)
            tokens = torch.cat([tokens, token[:, None]], dim=1)
            done |= token == self.eos_token_id
            if done.all() or t + 1 == gen.max_new_tokens:
                break
            logits = decoding.step(token, t)
        completions = torch.stack(generated, dim=1)
        return completions, decoding.kept(completions[:, :-1]) if keep else None

    def _repetition(self, prompts: Prompts, gen: GenerationConfig) -> Optional[UnpaddedRepetition]:
        """The repetition penalty and n-gram ban of ``gen`` over each row's text alone: a causal row without the
        prompt's left padding, a seq2seq row without the decoder's start token (None when both are off)."""
        if gen.repetition_penalty == 1.0 and gen.no_repeat_ngram_size == 0:
            return None
        if self.kind == "causal":
            return UnpaddedRepetition(gen, (prompts.attention_mask == 0).sum(1))  # left-padded prompts
        return UnpaddedRepetition(gen, torch.ones(prompts.input_ids.shape[0], dtype=torch.long))

    def _warp(self, logits: torch.Tensor, gen: GenerationConfig, no_eos: bool, tokens: torch.Tensor,
              logits_processor: Any) -> torch.Tensor:
        """Next-token logits (B, V) after EOS suppression (``no_eos``: before ``gen.min_new`` tokens), the
        processor, temperature, top-k and top-p."""
        if no_eos:
            logits = logits.clone()
            logits[:, self.eos_token_id] = float("-inf")
        if logits_processor is not None:
            logits = logits_processor(tokens, logits)
        if not gen.do_sample:
            return logits
        if gen.temperature != 1.0:
            logits = logits / gen.temperature
        if gen.top_k > 0 and gen.top_k < logits.shape[-1]:
            kth = logits.topk(gen.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if gen.top_p < 1.0:
            logits = logits.masked_fill(~self.backend.top_p_keep(logits, gen.top_p), float("-inf"))
        return logits

    def score(self, prompts: Prompts, completions: torch.Tensor, with_hidden: bool = False,
              model: Any = None, group_size: int = 1) -> Scores:
        """One forward pass over prompt + completion: float32 logits (and hidden states) per completion token.

        The last completion token is never fed (nothing is predicted from it). With ``group_size`` > 1
        and rows in groups of identical prompts, each group's prompt is encoded once and its KV cache
        (or encoder output) repeated: exact, gradients included, since autograd sums the copies'.
        """
        with self.backend.execution.autocast():
            logits, hidden = self._forward(model if model is not None else self.model, prompts, completions,
                                           with_hidden, shared_groups(prompts, group_size))
        return Scores(logits.float(), hidden.float() if hidden is not None else None)

    def _forward(self, model: Any, prompts: Prompts, completions: torch.Tensor, with_hidden: bool, group_size: int
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        mask = completion_mask(completions, self.eos_token_id).long()
        if self.kind == "causal":
            out, cache = prefix_forward(model, prompts, group_size, logits_to_keep=1, output_hidden_states=True)
            first_logits = out.logits[:, -1:].repeat_interleave(group_size, 0)
            first_hidden = out.hidden_states[-1][:, -1:].repeat_interleave(group_size, 0)
            if completions.shape[1] == 1:
                return first_logits, first_hidden if with_hidden else None
            head = output_head(model, out.hidden_states[-1][:, -1:], out.logits[:, -1:])
            attention = torch.cat([prompts.attention_mask, mask[:, :-1]], dim=1)
            positions = prompts.attention_mask.sum(1, keepdim=True) + torch.arange(completions.shape[1] - 1,
                                                                                   device=completions.device)
            # padding after a row's EOS, which nothing attends to, at position 0: a short row beside a long one
            # would otherwise index past the position table when each row fills the room after its own prompt
            positions = positions.masked_fill(mask[:, :-1] == 0, 0)
            no_logits = ({"logits_to_keep": torch.empty(0, dtype=torch.long, device=completions.device)}
                         if head is not None else {})
            rest = model(input_ids=completions[:, :-1], attention_mask=attention, position_ids=positions,
                         cache=cache, use_cache=True, output_hidden_states=head is not None or with_hidden,
                         **no_logits)
            hidden = (torch.cat([first_hidden, rest.hidden_states[-1]], dim=1)
                      if head is not None or with_hidden else None)
            logits = head(hidden) if head is not None else torch.cat([first_logits, rest.logits], dim=1)
            return logits, hidden if with_hidden else None
        start = torch.full_like(completions[:, :1], model.config.decoder_start_token_id)
        decoder_ids = torch.cat([start, completions[:, :-1]], dim=1)
        decoder_mask = torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)
        out = model(encoder_outputs=shared_encoder(model, prompts, group_size), attention_mask=prompts.attention_mask,
                    decoder_input_ids=decoder_ids, decoder_attention_mask=decoder_mask,
                    output_hidden_states=with_hidden)
        return out.logits, out.decoder_hidden_states[-1] if with_hidden else None

    def token_texts(self, completions: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        """Each completion's tokens up to and including its EOS (``mask``), each decoded alone: a dense reward's
        inputs, aligned with the completion mask."""
        lengths = mask.sum(1).long().tolist()
        return [[self.tokenizer.decode([token]) for token in row[:n]]
                for row, n in zip(completions.tolist(), lengths)]

    def decode(self, completions: torch.Tensor) -> list[str]:
        return [text.strip() for text in self.tokenizer.batch_decode(completions, skip_special_tokens=True)]

    def encode_targets(self, targets: list[str], max_length: int | Sequence[int]) -> torch.Tensor:
        """Target token ids ending in EOS, right-padded with pad.  (B, T), T <= ``max_length`` (one bound for all
        rows, or each row's own).

        A target longer than ``max_length - 1`` tokens keeps its first tokens, whatever side prompts are cut from
        (a causal policy's prompts keep their end): a target continues its prompt, so its start is what follows
        the prompt."""
        bounds = [max_length] * len(targets) if isinstance(max_length, int) else list(max_length)
        rows = [ids[:bound - 1] + [self.eos_token_id] for ids, bound in zip(self._target_ids(targets), bounds)]
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.tokenizer.pad_token_id] * (width - len(r)) for r in rows], device=self.device)

    def target_lengths(self, targets: list[str]) -> list[int]:
        """Each target's token count before :meth:`encode_targets` cuts it and adds EOS (a target of more than
        ``max_length - 1`` tokens is cut)."""
        return [len(ids) for ids in self._target_ids(targets)]

    def _target_ids(self, targets: list[str]) -> list[list[int]]:
        """Targets' token ids, uncut and without EOS; a causal target is tokenised after a space, as it follows
        its prompt, and an empty target has no token (its EOS alone follows the prompt)."""
        prefix = " " if self.kind == "causal" else ""
        return [self.tokenizer(prefix + t, add_special_tokens=False)["input_ids"] if t else [] for t in targets]

    def supervised_loss(self, prompts: Prompts, targets: torch.Tensor) -> torch.Tensor:
        """Mean token cross-entropy of ``targets`` given the prompts (teacher forcing)."""
        scores = self.score(prompts, targets)
        mask = completion_mask(targets, self.eos_token_id)
        nll = -logprobs_from_logits(scores.logits, targets)
        return (nll * mask).sum() / mask.sum()
