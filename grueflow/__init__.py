"""grueflow: RL fine-tuning of language models as a reproducible pipeline of cached stages."""

__version__ = "0.1.0"
