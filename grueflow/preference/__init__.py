"""Learning from preferences: the preference-set format, preferences from a metric,
Bradley–Terry reward models and Direct Preference Optimisation.

A preference set is a JSONL file of ``{id, prompt, chosen, rejected}`` rows (:mod:`.data`); people
produce one through the human-evaluation import, a metric through :mod:`.build`. A reward model
(:mod:`.reward_model`) or DPO (:mod:`.dpo`) learns from either.
"""
