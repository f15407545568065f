"""The issue-6 benchmark harness runs one tiny step per method and writes its report (no timings checked)."""

import re
import subprocess
import sys

from tests.conftest import ROOT, run

BENCH = ROOT / "bench" / "rl_step.py"


def test_the_harness_times_grueflow_and_trl_and_writes_the_report(tmp_path):
    out = tmp_path / "RESULTS.md"
    run([sys.executable, str(BENCH), "--smoke", "--methods", "grpo,trl_grpo", "--out", str(out),
         "--cache", str(tmp_path / "cache")], ROOT)
    text = out.read_text()
    rows = {m.group(1): m.group(2).split(" | ") for m in re.finditer(r"^\| 2x128 \| (\w+) \| (.*) \|$", text, re.M)}
    assert set(rows) == {"grpo", "trl_grpo"}, text
    for method, cells in rows.items():
        step, tokens_per_s, *phases, rss = map(float, cells)
        assert step > 0 and tokens_per_s > 0 and rss > 100, (method, cells)
        assert sum(phases) <= step * 1.05, (method, cells)  # the phases split the step
    assert re.search(r"^\| 2x128 \| \d+\.\d\d \| — \|", text, re.M), text  # the GRPO ratio is there
    assert re.search(r"Versions: torch \S+, transformers \S+, trl \S+", text), text
    assert not (tmp_path / "RESULTS.md.tmp").exists()


def test_an_unknown_method_names_the_valid_ones(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--methods", "grpo,ppo2", "--out", str(tmp_path / "r.md")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert "unknown method 'ppo2'; valid: grpo, rloo, ppo, nlpo, trl_grpo" in done.stderr
    assert not (tmp_path / "r.md").exists()


def test_repeats_below_one_are_refused(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--repeats", "0", "--out", str(tmp_path / "r.md")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert "--repeats must be at least 1, got 0" in done.stderr
    assert not (tmp_path / "r.md").exists()
