"""The stage record (issue 9): written last, it records the size of the stage's outputs."""

import time

from grueflow import stage
from grueflow.io import read_json


def test_the_stage_record_counts_the_bytes_of_every_output_file_but_itself(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "model" / "config.json").write_bytes(b"{}")
    (tmp_path / "curve.csv").write_bytes(b"a,b\n1,2\n")
    (tmp_path / "empty").mkdir()
    stage.finish(tmp_path, "demo", {"seed": 0}, {"input": tmp_path / "curve.csv"}, time.perf_counter())
    record = read_json(tmp_path / "stage.json")
    assert record["output_bytes"] == 1000 + 2 + 8
    stage.finish(tmp_path, "demo", {"seed": 0}, {}, time.perf_counter())  # rewriting it does not count the old one
    assert read_json(tmp_path / "stage.json")["output_bytes"] == 1010
