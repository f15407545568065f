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
    if offline_mode() or endpoint_problem():
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


def offline_mode() -> bool:
    """True when ``$HF_HUB_OFFLINE`` asks for offline mode (huggingface_hub's truthy spellings)."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on")


def endpoint_problem() -> str | None:
    """Why ``$HF_ENDPOINT`` names no host to connect to, or None when it is unset or names one."""
    endpoint = os.environ.get("HF_ENDPOINT")
    if not endpoint:
        return None
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"HF_ENDPOINT={endpoint!r} is not an http(s) URL such as https://huggingface.co"
    try:
        parts.port
    except ValueError:
        return f"HF_ENDPOINT={endpoint!r} has a port that is not a number from 0 to 65535"
    return None


def offline_state() -> str:
    """Why the hub cannot be reached, for an error message: offline mode, a malformed endpoint, or the endpoint's
    host and port not answering."""
    if offline_mode():
        return f"HF_HUB_OFFLINE={os.environ['HF_HUB_OFFLINE']} is set"
    problem = endpoint_problem()
    if problem:
        return problem
    host, port = hub_address()
    return f"{host}:{port} not reachable"
