"""The prepared GPU check rehearses on the CPU: the micro pipeline's stages record the CPU, every RL-step method
runs at both tiny shapes, and the report names each section (no timings checked)."""

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run

CHECK = ROOT / "bench" / "gpu_check.py"
SMOKE_STAGES = ["prepare_datapool", "base_model", "warm_start", "rl_finetune grpo", "evaluate zero_shot",
                "evaluate supervised", "evaluate grpo", "aggregate"]
RUNS_NO_MODEL = {"prepare_datapool", "aggregate"}


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("gpu_check") / "GPU_RESULTS.md"
    run([sys.executable, str(CHECK), "--smoke", "--out", str(out)], ROOT)
    assert not out.with_name("GPU_RESULTS.md.tmp").exists()
    return out.read_text()


def table_rows(text: str, first: str) -> list[list[str]]:
    """The cells of every row of the Markdown table whose header starts with ``| first |``."""
    table = re.search(rf"^\| {re.escape(first)} \|.*\n\|[-|]+\|\n((?:\|.*\|\n)+)", text, re.M)
    assert table, text
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.group(1).splitlines()]


def test_the_report_names_each_section(smoke_report):
    for section in ("## Machine", "## Pipeline", "## RL step", "## Targets", "## Skipped"):
        assert f"\n{section}\n" in smoke_report, section
    assert "Mode: smoke (CPU, tiny shapes), device `cpu`" in smoke_report
    assert re.search(r"- torch \S+, transformers \S+, .*trl \S+", smoke_report), smoke_report


def test_every_stage_ran_and_its_record_says_cpu(smoke_report):
    rows = table_rows(smoke_report, "stage")
    assert [r[0] for r in rows] == SMOKE_STAGES
    for label, ok, wall, recorded, device, precision, on_asked, notes in rows:
        assert ok == "yes" and float(wall) > 0, (label, notes)
        if label in RUNS_NO_MODEL:
            assert on_asked == "— (runs no model)", label
        else:
            assert (device, precision, on_asked) == ("cpu", "fp32", "yes"), (label, device, notes)


def test_every_method_ran_at_both_tiny_shapes(smoke_report):
    rows = table_rows(smoke_report, "shape | parameters | method")
    assert {(r[0], r[2]) for r in rows} == {(shape, method) for shape in ("tiny-gpt2", "tiny-llama")
                                           for method in ("trl_grpo", "grpo", "ppo", "nlpo")}
    for shape, _, method, step, *phases, tokens_per_s, generation_tokens_per_s, peak, multiplier, tflops, mfu in rows:
        assert float(step) > 0 and float(tokens_per_s) > 0, (shape, method)
        # the phases split the step; each cell is rounded to 3 or 4 decimals
        assert sum(map(float, phases)) <= float(step) * 1.05 + 0.0005 * (len(phases) + 1), (shape, method, phases)
        assert peak == "—"  # no GPU
        assert multiplier == ("4" if (shape, method) == ("tiny-gpt2", "grpo") else "6"), (shape, method)
        assert mfu.endswith(" %")


def test_each_target_has_a_verdict(smoke_report):
    targets = smoke_report.split("## Targets")[1].split("## Skipped")[0]
    for shape in ("tiny-gpt2", "tiny-llama"):
        assert re.search(rf"GRPO step <= 0.5 x TRL GRPOTrainer step at {shape}: \d+\.\d\d — (holds|does not hold)",
                         targets), targets
        assert re.search(rf"PPO step <= 1.5 x grueflow GRPO step at {shape}: \d+\.\d\d — ", targets), targets
    assert re.search(r"GRPO update MFU >= 30 % of 989 TFLOP/s at tiny-llama: \d+\.\d % — ", targets), targets
    assert smoke_report.split("## Skipped")[1].strip() == "- nothing"


@pytest.mark.parametrize("args, message", [
    (["--shapes", "gpt2-small,gpt3"], "unknown shape 'gpt3'; valid: gpt2-small, llama-1b, tiny-gpt2, tiny-llama"),
    (["--methods", "grpo,rloo"], "unknown method 'rloo'; valid: trl_grpo, grpo, ppo, nlpo"),
    (["--time-budget", "0"], "--time-budget and --peak-tflops must be positive"),
    (["--device", "cuda:0", "--smoke"], "asks for a GPU, but CUDA is not available here"),
])
def test_bad_arguments_are_refused_before_any_run(tmp_path, args, message):
    if "--device" in args:
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(CHECK), *args, "--out", str(tmp_path / "r.md")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0
    assert message in done.stderr
    assert not (tmp_path / "r.md").exists()
