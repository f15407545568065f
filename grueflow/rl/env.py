"""The token-level MDP as a gymnasium environment, for stable-baselines3 and for checking the trainer.

Observation: the prompt's token ids and the tokens generated so far (fixed-size, padded, with
masks); action: the next token id; the episode ends on EOS (terminated) or after
``max_new_tokens`` (truncated). The task reward of the decoded completion comes at the last step,
0 before: exactly the task part of the trainer's per-token rewards (the KL penalty is the
trainer's, since it needs the policy's log-probs). This is not the hot path: the trainer works on
whole batches of sequences.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from grueflow.data import Sample
from grueflow.metrics.reward import Reward


class TextGenerationEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, tokenizer: Any, samples: list[Sample], reward: Reward, max_prompt_length: int,
                 max_new_tokens: int) -> None:
        if not samples:
            raise ValueError("TextGenerationEnv needs at least one sample")
        self.tokenizer, self.samples, self.reward = tokenizer, samples, reward
        self.max_prompt_length, self.max_new_tokens = max_prompt_length, max_new_tokens
        vocab = len(tokenizer)
        self.action_space = spaces.Discrete(vocab)
        self.observation_space = spaces.Dict({
            "prompt_ids": spaces.Box(0, vocab - 1, (max_prompt_length,), dtype=np.int64),
            "prompt_mask": spaces.Box(0, 1, (max_prompt_length,), dtype=np.int64),
            "generated_ids": spaces.Box(0, vocab - 1, (max_new_tokens,), dtype=np.int64),
            "generated_mask": spaces.Box(0, 1, (max_new_tokens,), dtype=np.int64),
        })
        self.sample: Optional[Sample] = None
        self.prompt_ids: list[int] = []
        self.generated: list[int] = []

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode on ``options['sample']`` if given, else on a sample drawn with the env's RNG."""
        super().reset(seed=seed)
        self.sample = (options or {}).get("sample") or self.samples[int(self.np_random.integers(len(self.samples)))]
        ids = self.tokenizer(self.sample.prompt, truncation=True, max_length=self.max_prompt_length)["input_ids"]
        self.prompt_ids, self.generated = list(ids), []
        return self._observation(), {"sample_id": self.sample.id}

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.sample is None:
            raise RuntimeError("call reset() before step()")
        self.generated.append(int(action))
        terminated = int(action) == self.tokenizer.eos_token_id
        truncated = not terminated and len(self.generated) >= self.max_new_tokens
        reward, info = 0.0, {}
        if terminated or truncated:
            text = self.tokenizer.decode(self.generated, skip_special_tokens=True).strip()
            total, parts = self.reward([self.sample.prompt], [text], [self.sample.references], [self.sample.meta])
            reward, info = float(total[0]), {"text": text, **{k: v[0] for k, v in parts.items()}}
        return self._observation(), reward, terminated, truncated, info

    def _observation(self) -> dict[str, np.ndarray]:
        pad = self.tokenizer.pad_token_id
        prompt = self.prompt_ids[-self.max_prompt_length:]
        generated = self.generated[-self.max_new_tokens:]
        return {
            "prompt_ids": np.array(prompt + [pad] * (self.max_prompt_length - len(prompt)), dtype=np.int64),
            "prompt_mask": np.array([1] * len(prompt) + [0] * (self.max_prompt_length - len(prompt)), dtype=np.int64),
            "generated_ids": np.array(generated + [pad] * (self.max_new_tokens - len(generated)), dtype=np.int64),
            "generated_mask": np.array([1] * len(generated) + [0] * (self.max_new_tokens - len(generated)),
                                       dtype=np.int64),
        }
