"""Is the Hugging Face hub reachable? Asked once, quickly, before any hub download is tried."""

from __future__ import annotations

import functools
import os
import socket
import urllib.parse

HUB_HOST = "huggingface.co"


class HubUnreachableError(OSError):
    """A hub id (model or dataset) was asked for, the hub cannot be reached and no local copy exists."""


@functools.lru_cache(maxsize=1)
def hub_reachable(timeout_s: float = 3.0) -> bool:
    """False when offline mode is set or a TCP connection to the hub (``$HF_ENDPOINT``'s host and port, a mirror's
    included) fails within ``timeout_s``."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host, port = hub_address()
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    return True


def hub_address() -> tuple[str, int]:
    """The host and port of ``$HF_ENDPOINT`` (default ``https://huggingface.co``): the URL's own port, else its
    scheme's (443 for https, 80 for http)."""
    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or f"https://{HUB_HOST}")
    try:
        port = endpoint.port
    except ValueError:  # a port that is not a number: the connection fails, and the message names the endpoint
        port = None
    return endpoint.hostname or HUB_HOST, port or (80 if endpoint.scheme == "http" else 443)


def offline_state() -> str:
    host, port = hub_address()
    return f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}, {host}:{port} not reachable"
