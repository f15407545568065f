"""Stage progress off a terminal: plain log lines with the count and the ETA, not too many of them."""

from __future__ import annotations

import logging

from grueflow.stage import LogProgress, progress


def test_progress_off_a_terminal_logs_plain_lines_with_eta(caplog):
    caplog.set_level(logging.INFO, logger="progress")
    assert isinstance(progress(4, "ppo iterations"), LogProgress)  # pytest's stderr is not a terminal
    bar = LogProgress(4, "ppo iterations", initial=1)
    for _ in range(3):
        bar.update()
    bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # the first and the last update; the middle one within every_s of the first
    assert lines == ["ppo iterations: 2/4, 00:00 elapsed, ETA 00:00", "ppo iterations: 4/4, 00:00 elapsed, ETA 00:00"]


def test_every_update_is_logged_when_every_s_is_zero(caplog):
    caplog.set_level(logging.INFO, logger="progress")
    bar = LogProgress(3, "generating", every_s=0.0)
    bar.update(2)
    bar.update(1)
    bar.update(0)  # nothing done: no line
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["generating: 2/3", "generating: 3/3"]
