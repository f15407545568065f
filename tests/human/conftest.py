"""A small Likert batch whose completions try to run script, served on a free loopback port."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from grueflow.human import batch as hb
from grueflow.human.annotate import AnnotationServer, build_server

N_ITEMS = 5


def _hostile(i: int) -> str:
    """Completion i: markup that would set ``window.pwned`` if it were ever parsed as HTML."""
    return f'<script>window.pwned = {i}</script><img src=x onerror="window.pwned = {i}"> reply {i}'


@pytest.fixture
def hostile() -> Callable[[int], str]:
    return _hostile


@pytest.fixture
def likert_dir(tmp_path: Path) -> Path:
    predictions = {"ppo": [hb.Prediction(f"s{i}", f"prompt {i} & <b>more</b>", _hostile(i)) for i in range(N_ITEMS)]}
    batch = hb.likert_batch(predictions, "imdb", seed=0)
    hb.write_batch(batch, tmp_path / "batch")
    return tmp_path / "batch"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    """Start a server for (batch dir, annotator) in a thread; all are shut down after the test."""
    servers: list[AnnotationServer] = []

    def start(batch_dir: Path, annotator: str = "alice", answers: Path | None = None) -> AnnotationServer:
        server = build_server(batch_dir, annotator, answers or tmp_path / "answers.jsonl", port=0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
