"""Is the Hugging Face hub reachable? Asked once, quickly, before any hub download is tried."""

from __future__ import annotations

import functools
import os
import socket

HUB_HOST = "huggingface.co"


class HubUnreachableError(OSError):
    """A hub id (model or dataset) was asked for, the hub cannot be reached and no local copy exists."""


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout_s: float = 3.0) -> bool:
    """False when offline mode is set or a TCP connection to the hub fails within ``timeout_s``."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", f"https://{HUB_HOST}").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((endpoint, 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def offline_state() -> str:
    return f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}, {HUB_HOST} not reachable"
