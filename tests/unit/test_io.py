"""The stage record (issue 9): written last, it records the size of the stage's outputs."""

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest

from grueflow import stage
from grueflow.io import DataError, read_json, snakemake_metadata, write_json


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


def test_rerunning_a_stage_rewrites_stage_json_byte_for_byte_and_keeps_the_run_apart(tmp_path):
    """What a content hash covers (stage.json) does not change on a re-execution; the commit, the wall time and
    the execution go to provenance.json, which .dvcignore keeps out of every hash."""
    from pathlib import Path

    (tmp_path / "data.txt").write_text("x")
    records = []
    for _ in range(2):
        started = time.perf_counter() - 1.5
        stage.finish(tmp_path, "demo", {"seed": 0}, {"input": tmp_path / "data.txt"}, started,
                     execution={"device": "cpu", "precision": "fp32", "fast_paths": True}, stats={"rows": 1})
        records.append((tmp_path / "stage.json").read_bytes())
    assert records[0] == records[1]
    record, provenance = read_json(tmp_path / "stage.json"), read_json(tmp_path / "provenance.json")
    assert set(record) == {"stage", "params", "inputs", "versions", "output_bytes", "files", "out", "stats",
                           "record_sha256"}
    assert set(provenance) == {"stage", "git_commit", "wall_time_s", "execution", "record_sha256"}
    assert provenance["wall_time_s"] >= 1.5 and provenance["record_sha256"] == record["record_sha256"]
    assert provenance["stage"] == "demo"  # it outlives stage.json when DVC removes the outs: check_out reads it
    assert record["output_bytes"] == 1  # data.txt only: neither record counts
    dvcignore = (Path(__file__).resolve().parents[2] / ".dvcignore").read_text().splitlines()
    assert "provenance.json" in dvcignore and "timings.csv" in dvcignore


def test_a_finished_folder_is_readable_by_the_group_and_replaces_the_old_one(tmp_path):
    import os
    import stat

    from grueflow.io import atomic_dir

    out = tmp_path / "out"
    for text in ("first", "second"):
        with atomic_dir(out) as tmp:
            (tmp / "sub").mkdir()
            (tmp / "sub" / "a.txt").write_text(text)
    assert (out / "sub" / "a.txt").read_text() == "second"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary or set-aside folder left


def test_two_writers_of_one_folder_at_once_both_finish_and_one_complete_folder_stays(tmp_path):
    """Snakemake and dvc repro writing the same stage folder: neither may fail, and the folder is never mixed."""
    import threading

    from grueflow.io import atomic_dir

    out, errors = tmp_path / "out", []

    def write(tag: str) -> None:
        try:
            for _ in range(60):
                with atomic_dir(out) as tmp:
                    for i in range(5):
                        (tmp / f"{i}.txt").write_text(tag)
        except OSError as err:  # the failure this guards against: "Directory not empty"
            errors.append(err)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({p.read_text() for p in out.iterdir()}) == 1 and len(list(out.iterdir())) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_weights_in_a_finished_folder_are_readable_by_the_group_and_a_private_key_stays_private(tmp_path):
    """The safetensors library writes mode 0600: every model.safetensors of a run was unreadable to the group
    inside a folder the group could list."""
    import os
    import stat

    import torch
    from safetensors.torch import save_file

    from grueflow.io import atomic_dir, atomic_path

    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "model").mkdir()
        save_file({"w": torch.zeros(2)}, str(tmp / "model" / "model.safetensors"))
        assert stat.S_IMODE((tmp / "model" / "model.safetensors").stat().st_mode) == 0o600  # the library's
        with atomic_path(tmp / "key.json", mode=0o600) as key:
            key.write_text("{}")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((out / "model" / "model.safetensors").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((out / "key.json").stat().st_mode) == 0o600


def test_a_folder_being_replaced_is_never_missing_to_a_reader(tmp_path, monkeypatch):
    """Between renaming the old folder aside and the new one in, the path did not exist: dvc repro, checking its
    output just as Snakemake replaced it, failed with "output does not exist". The two are now exchanged in one
    step; where the system cannot, the rename aside is what remains."""
    import os

    from grueflow import io

    out = tmp_path / "out"
    with io.atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("first")
    real_rename = os.rename

    def no_gap(src, dst, *args, **kwargs):  # the old way: path renamed aside first, then missing for a moment
        if Path(src) == out:
            raise AssertionError(f"{out} was renamed aside: it would be missing to a reader")
        return real_rename(src, dst, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(io.os, "rename", no_gap)
        with io.atomic_dir(out) as tmp:
            (tmp / "a.txt").write_text("second")
    assert (out / "a.txt").read_text() == "second" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    monkeypatch.setattr(io, "_exchange", lambda tmp, path: False)  # a file system without the exchange
    with io.atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("third")
    assert (out / "a.txt").read_text() == "third" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_stage_folder_damaged_after_it_finished_is_named_before_it_is_read(tmp_path):
    import pytest

    from grueflow.io import MissingDataError, check_stage_output

    out = tmp_path / "base_model"
    (out / "model").mkdir(parents=True)
    (out / "model" / "tokenizer.json").write_text('{"vocab": {}}')
    (out / "model" / "model.safetensors").write_bytes(b"w" * 64)
    stage.finish(out, "demo", {}, {}, time.perf_counter())
    assert set(read_json(out / "stage.json")["files"]) == {"model/model.safetensors", "model/tokenizer.json"}
    check_stage_output(out / "model")  # intact
    (out / "model" / "model.safetensors").write_bytes(b"w" * 63 + b"x")  # a bit flip: same size
    with pytest.raises(MissingDataError, match=r"base_model is damaged: model/model\.safetensors does not match the "
                                               r"digest its stage recorded; delete the folder and rerun"):
        check_stage_output(out / "model")
    check_stage_output(out / "model", deep=False)  # sizes alone cannot see it
    (out / "model" / "tokenizer.json").unlink()
    with pytest.raises(MissingDataError, match=r"model/tokenizer\.json is missing"):
        check_stage_output(out / "model", deep=False)
    check_stage_output(tmp_path / "elsewhere")  # no stage folder: nothing to check


def test_what_a_killed_writer_left_is_deleted_by_the_next_writer_of_that_path(tmp_path):
    import os
    import subprocess
    import sys

    from grueflow.io import _WRITER, atomic_dir

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    host = _WRITER.rsplit("-", 1)[0]
    out = tmp_path / "seed0"
    leftovers = [tmp_path / f".seed0.{host}-{dead}.abc123.tmp", tmp_path / f".seed0.{host}-{dead}.0f0f0f.old"]
    kept = [tmp_path / f".seed0.{host}-{os.getpid()}.live99.tmp",  # a live writer's
            tmp_path / f".seed0.otherhost-{dead}.abc123.tmp",  # another host's: its process is unknown here
            tmp_path / f".seed1.{host}-{dead}.abc123.tmp"]  # another path's
    for folder in leftovers + kept:
        (folder / "model").mkdir(parents=True)
    with atomic_dir(out) as tmp:
        (tmp / "done.txt").write_text("ok")
    assert (out / "done.txt").read_text() == "ok"
    assert not any(p.exists() for p in leftovers) and all(p.exists() for p in kept)


def test_a_file_a_killed_writer_left_is_deleted_by_the_next_writer_of_that_file(tmp_path):
    """A SIGTERM during a table's write left .grue_table.csv.<random>.tmp beside it for good."""
    import os
    import subprocess
    import sys

    from grueflow.io import _WRITER, write_text

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    host = _WRITER.rsplit("-", 1)[0]
    leftover = tmp_path / f".table.csv.{host}-{dead}.abc123.tmp"
    kept = [tmp_path / f".table.csv.{host}-{os.getpid()}.live99.tmp", tmp_path / f".table.md.{host}-{dead}.abc.tmp"]
    for path in [leftover, *kept]:
        path.write_text("half")
    write_text(tmp_path / "table.csv", "a,b\n")
    assert (tmp_path / "table.csv").read_text() == "a,b\n"
    assert not leftover.exists() and all(p.exists() for p in kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p.name for p in kept] + ["table.csv"])


@pytest.mark.parametrize("record", [[], None, {"stage": "x"}, {"files": ["model.bin"]},
                                    {"files": {"model.bin": {"sha256": "0"}}}])
def test_a_stage_record_edited_by_hand_is_named_damaged(tmp_path, record):
    import json

    from grueflow.io import MissingDataError, check_stage_output
    from grueflow.stale import stale_outputs

    folder = tmp_path / "results" / "sentiment" / "datapool"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"w")
    (folder / "stage.json").write_text(json.dumps(record))
    with pytest.raises(MissingDataError, match=r"stage.json is damaged \(no manifest of its files\); delete .*datapool "
                                               r"and rerun the pipeline"):
        check_stage_output(folder / "model.bin")
    assert "no manifest of its files" in stale_outputs(tmp_path / "results", tmp_path / "t.csv", [])[folder]


def test_a_stage_record_whose_inputs_are_not_a_mapping_is_stale(tmp_path):
    import json

    from grueflow.io import write_stage_record
    from grueflow.stale import stale_outputs

    folder = tmp_path / "results" / "sentiment" / "datapool"
    folder.mkdir(parents=True)
    write_stage_record(folder, stage="x", params={}, inputs={}, wall_time_s=0.0)
    record = json.loads((folder / "stage.json").read_text())
    (folder / "stage.json").write_text(json.dumps({**record, "inputs": "x"}))
    assert stale_outputs(tmp_path / "results", tmp_path / "t.csv", []) == {
        folder: f"{folder / 'stage.json'} is damaged (its inputs are not a mapping)"}


def test_a_stage_record_edited_by_hand_is_stale_without_snakemakes_records(tmp_path, monkeypatch):
    """A stage.json whose kl.coef was changed by hand, with .snakemake removed: the folder's record no longer held
    its own digest, and each run copied it "(a rerun of its stage replaces it whole)", but nothing reran, so the
    record kept saying 0.07 for weights trained at 0.05. A record whose record_sha256 fails is damaged: its folder
    is stale, whoever wrote it, and reruns with the copy kept."""
    from grueflow.io import write_stage_record
    from grueflow.keep import REPLACED
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    folder = Path("results/sentiment/ppo/seed0")
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"w")
    write_stage_record(folder, stage="rl_finetune", params={"method": {"kl": {"coef": 0.05}}}, inputs={},
                       wall_time_s=0.0)
    tokens = Path(".snakemake/grueflow-stale.json")
    assert mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[folder]) == []
    record = folder / "stage.json"
    record.write_text(record.read_text().replace('"coef": 0.05', '"coef": 0.07'))
    line, = mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[folder])
    copy, = REPLACED.glob(f"{folder}@*")
    assert line == (f"grueflow: {folder} is stale (damaged: its stage.json is not what its stage wrote (edited "
                    f"since: its record_sha256 no longer matches the rest)); its job reruns; a copy of what no stage "
                    f"record vouches for (stage.json) is kept in {copy}")
    assert str(folder) in json.loads(tokens.read_text())  # a new token: Snakemake reruns the job


def test_a_stale_folder_no_job_writes_is_refused_where_the_suite_reads_it_and_never_said_to_rerun(tmp_path,
                                                                                                   monkeypatch):
    """A reward model trained by hand (README's command, --out results/sentiment/reward_model_human) on a preference
    set rebuilt since, named by the task's reward: "grueflow: ... is stale (...); its job reruns", then "Nothing to
    be done", though no rule writes that folder: RL and the table kept the reward model of the old judgements."""
    from grueflow.io import write_stage_record
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    preferences = Path("results/sentiment/preferences")
    preferences.mkdir(parents=True)
    (preferences / "preferences.jsonl").write_text('{"id": "1"}\n')
    write_stage_record(preferences, stage="build_preferences", params={}, inputs={}, wall_time_s=0.0)
    Path("models/base").mkdir(parents=True)
    Path("models/base/config.json").write_text("{}")
    by_hand = Path("results/sentiment/reward_model_human")
    (by_hand / "model").mkdir(parents=True)
    (by_hand / "model" / "weights.bin").write_bytes(b"w")
    write_stage_record(by_hand, stage="train_reward_model", params={}, wall_time_s=0.0,
                       inputs={"preferences": preferences / "preferences.jsonl", "backbone": Path("models/base")})
    write_json(by_hand / "provenance.json", {**read_json(by_hand / "provenance.json"),
                                             "params_files": {"method": "params/methods/reward_model.yaml"}})
    tokens = Path(".snakemake/grueflow-stale.json")
    assert mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[preferences]) == []
    (preferences / "preferences.jsonl").write_text('{"id": "2"}\n')  # new judgements, the set rebuilt
    write_stage_record(preferences, stage="build_preferences", params={}, inputs={}, wall_time_s=0.0)
    built = by_hand.stat().st_mtime_ns
    why = "its input results/sentiment/preferences/preferences.jsonl changed since it was built"
    command = ("python stages/train_reward_model.py --method-file params/methods/reward_model.yaml --backbone "
               "models/base --preferences results/sentiment/preferences/preferences.jsonl --out "
               "results/sentiment/reward_model_human")
    reader = "params/tasks/sentiment.yaml (its reward or metrics)"
    with pytest.raises(DataError) as err:
        mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[preferences],
                   read={by_hand: reader})
    assert str(err.value) == (
        f"{by_hand} is stale ({why}) and no job of this suite writes it (a stage run by hand, or a folder of another "
        f"suite), yet {reader} names it, so the stages that read it would be built from it as it is: rebuild it from "
        f"its inputs now ({command}, as its records say it was built), then run again; or name it no longer in "
        f"{reader} and delete it (rm -r {by_hand})")
    assert by_hand.stat().st_mtime_ns == built and not tokens.with_name("grueflow-stamped.json").exists()  # unmarked
    line, = mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[preferences])
    assert line == (f"grueflow: {by_hand} is stale ({why}); no job of this suite writes it (a stage run by hand, or "
                    f"a folder of another suite), so nothing reruns it: rebuild it from its inputs now ({command}, as "
                    f"its records say it was built), or delete it (rm -r {by_hand})")


def test_an_import_whose_answers_are_gone_is_refused_where_the_suite_reads_it_and_never_said_to_rerun(tmp_path,
                                                                                                      monkeypatch):
    """An import's answers folder moved out of data/human (consent withdrawn) while preference_files names the import:
    "grueflow: ... is stale (...); its job reruns", yet no import could be planned without answers, and dpo was."""
    from grueflow.io import write_stage_record
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    answers = Path("data/human/sentiment/a_vs_b_seed0")
    answers.mkdir(parents=True)
    (answers / "answers.jsonl").write_text('{"annotator": "alice"}\n')
    imported = Path("results/human/sentiment/imported/a_vs_b_seed0")
    imported.mkdir(parents=True)
    (imported / "preferences.jsonl").write_text('{"id": "1"}\n')
    write_stage_record(imported, stage="import_human_eval", params={}, wall_time_s=0.0,
                       inputs={"answers0": answers / "answers.jsonl"}, extra={"answers_given": [str(answers)]})
    tokens = Path(".snakemake/grueflow-stale.json")
    assert mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[imported]) == []
    shutil.move(answers, tmp_path / "withdrawn")
    why = f"its input {answers}/answers.jsonl no longer exists"
    reader = "preference_files.sentiment of params/suite.yaml"
    with pytest.raises(DataError) as err:
        mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[imported],
                   read={imported: reader})
    assert str(err.value) == (
        f"{imported} is stale ({why}) and no job can import it again: its answers at {answers} no longer exist, yet "
        f"{reader} names it, so the stages that read it would be built from it as it is: put the answers back at "
        f"{answers}, then run again; or name it no longer in {reader} and delete the import (rm -r {imported})")
    line, = mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=tokens, folders=[imported])
    assert line == (f"grueflow: {imported} is stale ({why}); no job can import it again: its answers at {answers} no "
                    f"longer exist, so nothing reruns it: put the answers back at {answers}, or delete the import "
                    f"(rm -r {imported})")


def test_the_provenance_record_holds_the_fingerprints_of_the_code_the_stage_ran(tmp_path):
    """Out of every hash (provenance.json), so that an edit to a comment reruns nothing downstream under DVC: each
    file the stage's CLI runs, by its path in the repository, and nothing for a stage without a CLI of its own."""
    from grueflow.codedeps import ROOT
    from grueflow.io import fingerprint

    stage.finish(tmp_path, "warm_start", {"seed": 0}, {}, time.perf_counter())
    code = read_json(tmp_path / "provenance.json")["code"]
    assert code == stage.code_record("warm_start") and "code" not in read_json(tmp_path / "stage.json")
    assert {"stages/warm_start.py", "grueflow/supervised.py", "grueflow/io.py"} <= set(code)
    assert code["grueflow/supervised.py"] == fingerprint(ROOT / "grueflow" / "supervised.py")
    assert stage.code_record("demo") == {}


@pytest.mark.parametrize("edit, changed", [
    ({"grueflow/supervised.py": "0" * 64}, ["grueflow/supervised.py"]),  # its content then: another digest
    ({"grueflow/supervised.py": None}, ["grueflow/supervised.py"]),  # modified while the stage ran
    ({"grueflow/gone.py": "0" * 64}, ["grueflow/gone.py"]),  # no longer imported
    ({"stages/warm_start.py": "1" * 64, "grueflow/io.py": "2" * 64}, ["grueflow/io.py", "stages/warm_start.py"]),
])
def test_a_folder_snakemake_holds_no_record_of_is_stale_where_its_code_changed(tmp_path, monkeypatch, edit, changed):
    """A warm start dvc repro built (no Snakemake record of its job, whose params hold the code's digest), then a
    module edited under an older time: Snakemake judged its code by time, "Nothing to be done". The fingerprints its
    provenance record holds are compared with the code its stage runs now."""
    from grueflow.io import write_json, write_stage_record
    from grueflow.stale import code_changed, mark_stale, stale_outputs
    from tests.conftest import copy_project

    monkeypatch.chdir(copy_project(tmp_path / "repo"))  # the code its stages run, which the check reads
    folder = Path("results/sentiment/supervised/seed0")
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"w")
    ran = {**stage.code_record("warm_start"), **edit}
    write_stage_record(folder, stage="warm_start", params={}, inputs={}, wall_time_s=0.0, extra={"code": ran})
    record = read_json(folder / "stage.json")
    assert code_changed(folder, record) == code_changed(folder, record, closure=False) == (changed, [])
    why = stale_outputs(Path("results"), Path("results/grue_table.csv"), [], folders=[folder])[folder]
    assert why == f"its code changed since it was built ({', '.join(changed)}), and no Snakemake job of this " \
                  f"checkout wrote it (built by dvc repro, or .snakemake removed)"
    line, = mark_stale(Path("results"), Path("results/grue_table.csv"), [], folders=[folder])
    assert line == f"grueflow: {folder} is stale ({why}); its job reruns"
    provenance = read_json(folder / "provenance.json")
    write_json(folder / "provenance.json", {**provenance, "record_sha256": "0" * 64})  # another build's (dvc checkout)
    assert code_changed(folder, record) == ([], [])
    write_json(folder / "provenance.json", {key: value for key, value in provenance.items() if key != "code"})
    assert code_changed(folder, record) == ([], [])  # written before provenance records held the code: not judged


def _dvc_lock(repo: Path, folder: Path, script: str, plugin_code: Optional[str] = None) -> None:
    """A dvc.lock in ``repo`` whose one stage wrote ``folder``'s stage.json as it is, from the code ``script`` runs
    as it is in ``repo`` (and ``plugin_code``, its plugins' digests file, as it is), as DVC writes one."""
    import yaml

    from grueflow.codedeps import script_code

    def entry(path: str) -> dict:
        return {"path": path, "hash": "md5", "md5": hashlib.md5((repo / path).read_bytes()).hexdigest()}

    deps = [entry(path) for path in script_code(script) + ([plugin_code] if plugin_code else [])]
    stage_record = (folder / "stage.json").as_posix()
    (repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"evaluate@sentiment-ppo-0": {
        "cmd": f"python {script}", "deps": deps, "outs": [entry(stage_record)]}}}, sort_keys=False))


def test_a_dvc_built_folder_is_judged_by_the_code_dvc_lock_records_for_it(tmp_path, monkeypatch):
    """A DVC project fresh from `dvc pull` holds no provenance record (DVC caches none), and DVC's run cache puts back
    a folder beside a later build's: where dvc.lock records the folder's stage.json as it is, the md5 of each code
    file among its stage's deps, and the digests of the plugins and files its task names (results/plugin_code), are
    what it was built with, as `dvc status` compares them."""
    from grueflow.config import read_yaml
    from grueflow.io import write_json, write_stage_record
    from grueflow.pipeline import plugin_digests
    from grueflow.stale import code_changed, stale_outputs
    from tests.conftest import copy_project
    from tests.workflow.test_plugin_workflow import add_readme_reward

    repo = copy_project(tmp_path / "repo")
    add_readme_reward(repo)
    monkeypatch.chdir(repo)
    folder = Path("results/eval/sentiment/ppo/seed0")
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text("{}\n")
    ran = {**stage.code_record("evaluate"), "grueflow/evaluation.py": "0" * 64}  # a later build's (run cache)
    write_stage_record(folder, stage="evaluate", params={}, inputs={}, wall_time_s=0.0, extra={"code": ran})
    record = read_json(folder / "stage.json")
    plugin_code = Path("results/plugin_code/sentiment/evaluate.json")
    plugin_code.parent.mkdir(parents=True)
    entry = plugin_digests({"sentiment": read_yaml(repo / "params/tasks/sentiment.yaml")}, repo)["sentiment"]["evaluate"]
    assert list(entry["sha256"]) == ["my_rewards.py"]
    plugin_code.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    _dvc_lock(repo, folder, "stages/evaluate.py", plugin_code.as_posix())
    assert code_changed(folder, record) == ([], [])  # as dvc.lock records it: the provenance record is not read
    assert code_changed(folder, record, closure=False) == ([], [])  # the locked code files alone: what show looks at
    (folder / "provenance.json").unlink()  # as after dvc pull
    evaluation = repo / "grueflow" / "evaluation.py"
    evaluation.write_text(evaluation.read_text() + "# edited\n")
    assert code_changed(folder, record) == code_changed(folder, record, closure=False) == \
        (["grueflow/evaluation.py"], [])
    reward = repo / "my_rewards.py"
    text = reward.read_text()
    reward.write_text(text + "# edited\n")
    assert code_changed(folder, record) == (["grueflow/evaluation.py", "my_rewards.py"], [])
    built = {**entry, "sha256": {**entry["sha256"], "words.txt": "0" * 64}}  # built with a word list its args name
    plugin_code.write_text(json.dumps(built, indent=1, sort_keys=True) + "\n")
    reward.write_text(text)
    evaluation.write_text(evaluation.read_text().removesuffix("# edited\n"))
    _dvc_lock(repo, folder, "stages/evaluate.py", plugin_code.as_posix())
    assert code_changed(folder, record) == ([], ["words.txt"])  # gone (a disk not mounted): refused, not rerun
    with pytest.raises(DataError) as refused:
        stale_outputs(Path("results"), Path("results/grue_table.csv"), [], folders=[folder])
    assert str(refused.value) == (f"{folder} was built with words.txt, which no longer exists (a disk not mounted, a "
                                  f"file moved or renamed?), and its task file still names it: put it back, or change "
                                  f"its task file to name other files (its job then rebuilds {folder}); nothing was "
                                  f"run, and {folder} is kept")
    plugin_code.write_text("{}\n")  # not the digests file dvc.lock records: judged by the digests' md5
    assert code_changed(folder, record) == ([plugin_code.as_posix()], [])
    write_json(folder / "stage.json", {**record, "note": 1})  # not the stage record dvc.lock records, and no
    assert code_changed(folder, read_json(folder / "stage.json")) == ([], [])  # provenance record: not judged


def evaluation_built_with(named: dict[str, str]) -> Path:
    """An evaluation folder of the working folder's project, recorded as built with the evaluate stage's code of now
    and the files its task named, ``named`` (:func:`grueflow.stage.named_record`), in its provenance record."""
    from grueflow.io import write_stage_record

    folder = Path("results/eval/sentiment/ppo/seed0")
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text("{}\n")
    write_stage_record(folder, stage="evaluate", params={}, inputs={}, wall_time_s=0.0,
                       extra={"code": stage.code_record("evaluate"), "named_files": named})
    return folder


def test_a_folder_without_records_is_stale_where_a_plugin_its_task_names_changed_or_is_gone(tmp_path, monkeypatch):
    """A Snakemake-built evaluation of a task that runs one's own reward, `.snakemake` removed (a clone, a moved
    project), no dvc.lock: the plugin replaced by an older copy was "Nothing to be done". The provenance record holds
    the digest of each file the task names for the stage; the stale check compares them with the files now."""
    from grueflow.pipeline import ParamsSource
    from grueflow.stale import code_changed, stale_outputs
    from tests.conftest import copy_project
    from tests.workflow.test_plugin_workflow import add_readme_reward

    repo = copy_project(tmp_path / "repo")
    add_readme_reward(repo)
    monkeypatch.chdir(repo)
    source = ParamsSource("evaluate", task_file="params/tasks/sentiment.yaml")
    named = stage.named_record("evaluate", source)
    assert list(named) == ["my_rewards.py"] and stage.named_record("evaluate", None) == {}
    folder = evaluation_built_with(named)
    record = read_json(folder / "stage.json")
    assert "named_files" in read_json(folder / "provenance.json") and "named_files" not in record
    assert code_changed(folder, record, source=source) == ([], [])
    reward = Path("my_rewards.py")
    text, info = reward.read_text(), reward.stat()
    reward.write_text(text.replace("return", "return 1.0 or", 1))
    os.utime(reward, ns=(info.st_atime_ns, info.st_mtime_ns))  # an older copy's time
    assert code_changed(folder, record, source=source) == (["my_rewards.py"], [])
    assert code_changed(folder, record) == ([], [])  # no task file given: the named files are not judged
    assert stale_outputs(Path("results"), Path("results/grue_table.csv"), [], folders=[folder],
                         params={folder: source})[folder].startswith("its code changed since it was built "
                                                                     "(my_rewards.py), and no Snakemake job")
    reward.write_text(text)
    assert code_changed(folder, record, source=source) == ([], [])  # as built again: its time alone changed


def test_a_folder_without_records_is_stale_where_a_plugin_module_outside_the_project_changed(tmp_path, monkeypatch):
    """One's own reward in a folder on PYTHONPATH (or a `pip install -e` package), not in the project: the
    provenance record holds what identifies its code by module name, so an edit under its old time is seen where
    Snakemake holds no record of the job, and moving the module's folder is not."""
    from grueflow.pipeline import ParamsSource
    from grueflow.stale import code_changed, named_gone
    from tests.conftest import copy_project
    from tests.workflow.test_plugin_workflow import add_readme_reward

    repo = copy_project(tmp_path / "repo")
    add_readme_reward(repo)
    outside = tmp_path / "ext"
    outside.mkdir()
    (repo / "my_rewards.py").rename(outside / "my_rewards.py")
    monkeypatch.syspath_prepend(str(outside))
    monkeypatch.chdir(repo)
    source = ParamsSource("evaluate", task_file="params/tasks/sentiment.yaml")
    named = stage.named_record("evaluate", source)
    assert list(named) == ["module my_rewards"]
    folder = evaluation_built_with(named)
    record = read_json(folder / "stage.json")
    assert code_changed(folder, record, source=source) == ([], []) and named_gone(folder, record, source=source) == []
    reward = outside / "my_rewards.py"
    text, info = reward.read_text(), reward.stat()
    reward.write_text(text.replace("return", "return 1.0 or", 1))
    os.utime(reward, ns=(info.st_atime_ns, info.st_mtime_ns))  # an older copy's time
    assert code_changed(folder, record, source=source) == (["module my_rewards"], [])
    reward.write_text(text)
    assert code_changed(folder, record, source=source) == ([], [])


def test_a_file_its_task_names_gone_stops_the_run_where_snakemake_knows_the_folder_too(tmp_path, monkeypatch):
    """A Snakemake-built evaluation whose task's reward reads a word list by path: with the list moved away,
    Snakemake (which takes a named file as an input only where it exists) reran the stage without it, which then
    failed in the reward. As where Snakemake holds no record of the job, the run stops before any job."""
    from grueflow.io import ENGINE, note_written, snakemake_metadata
    from grueflow.pipeline import ParamsSource
    from grueflow.stale import named_gone, snakemake_knows, stale_outputs
    from tests.conftest import copy_project
    from tests.workflow.test_plugin_workflow import add_readme_reward

    repo = copy_project(tmp_path / "repo")
    add_readme_reward(repo)
    monkeypatch.chdir(repo)
    source = ParamsSource("evaluate", task_file="params/tasks/sentiment.yaml")
    Path("words.txt").write_text("great\n")
    named = {**stage.named_record("evaluate", source), "words.txt": "0" * 64}  # a file its reward's args named
    folder = evaluation_built_with(named)
    monkeypatch.setenv(ENGINE, "snakemake")
    note_written(folder.as_posix(), folder / "stage.json")
    snakemake_metadata(Path("."), folder).parent.mkdir(parents=True)
    snakemake_metadata(Path("."), folder).write_text("{}")
    record = read_json(folder / "stage.json")
    assert snakemake_knows(Path("."), folder) and named_gone(folder, record, source=source) == []
    assert stale_outputs(Path("results"), Path("results/grue_table.csv"), [], folders=[folder],
                         params={folder: source}) == {}  # Snakemake judges its code: not read here
    Path("words.txt").unlink()
    assert named_gone(folder, record, source=source) == ["words.txt"] and named_gone(folder, record) == []
    with pytest.raises(DataError) as refused:
        stale_outputs(Path("results"), Path("results/grue_table.csv"), [], folders=[folder], params={folder: source})
    assert str(refused.value).startswith(f"{folder} was built with words.txt, which no longer exists (a disk not "
                                         f"mounted, a file moved or renamed?), and params/tasks/sentiment.yaml still "
                                         f"names it: put it back"), refused.value


def test_a_table_snakemake_holds_no_record_of_is_stale_where_its_stages_code_changed(tmp_path, monkeypatch):
    """The GRUE table's files record holds the fingerprints of the code aggregate ran (an out of DVC's, which only
    a code change changes); where no Snakemake job wrote the table, a module edited under an older time reruns it."""
    from grueflow.io import atomic_files
    from grueflow.stale import stale_outputs, table_code_changed
    from tests.conftest import copy_project

    monkeypatch.chdir(copy_project(tmp_path / "repo"))  # the code its stages run, which the check reads
    table = Path("results/grue_table.csv")
    table.parent.mkdir()
    code = stage.code_record("aggregate")
    assert "grueflow/report.py" in code
    with atomic_files([table], code=code) as (tmp,):
        tmp.write_text("task,method\n")
    assert table_code_changed(table) == [] and table not in stale_outputs(Path("results"), table, [])
    with atomic_files([table], code={**code, "grueflow/report.py": "0" * 64}) as (tmp,):
        tmp.write_text("task,method\n")
    assert table_code_changed(table) == ["grueflow/report.py"]
    assert stale_outputs(Path("results"), table, [], {table: []})[table].startswith(
        "its code changed since it was built (grueflow/report.py), and no Snakemake job of this checkout wrote it")


def test_the_content_digest_of_a_jobs_local_files_sees_a_file_replaced_by_an_older_one(tmp_path, monkeypatch):
    """Snakemake compares modification times: a data file replaced by one with an older time was never read again.
    The digest changes with the content whatever the times, and a file is hashed again only when its stat
    signature changed (the cache beside Snakemake's records)."""
    import json

    from grueflow import stale

    monkeypatch.setattr(stale, "_KNOWN", {})
    cache = tmp_path / ".snakemake" / "grueflow-digests.json"
    data, new = tmp_path / "train.jsonl", tmp_path / "new.jsonl"
    data.write_text('{"prompt": "a"}\n')
    assert stale.content_digest([], cache) == "" and not cache.exists()  # no local files: the param stays ""
    first = stale.content_digest([str(data)], cache)
    assert first == stale.content_digest([data, str(data)], cache) and str(data) in json.loads(cache.read_text())
    new.write_text('{"prompt": "b"}\n')
    os.utime(new, (1_577_836_800, 1_577_836_800))  # older than anything the first run wrote
    os.replace(new, data)
    second = stale.content_digest([str(data)], cache)
    assert second != first
    read = []
    monkeypatch.setattr(stale, "fingerprint", lambda path: read.append(path) or "x")
    monkeypatch.setattr(stale, "_KNOWN", {})  # a new process: the cache file is read back
    assert stale.content_digest([str(data)], cache) == second and read == []  # unchanged: not read again
    data.unlink()
    assert stale.content_digest([str(data)], cache) not in ("", second)  # a missing file is a change too


def test_a_module_rewritten_with_its_size_and_time_kept_is_imported_as_it_is_now(tmp_path):
    """Python takes a module's bytecode in __pycache__ as current while the source's whole-second modification time
    and size are those it recorded: a module of one's own (a plugin, grueflow's) rewritten in place with its size
    and time kept ran its earlier code, whether the bytecode was of the version a stage last ran or of one imported
    in between (a check by hand). Once grueflow is imported, such modules' bytecode is checked by the source's
    content; an installed module's is left to Python."""
    module = tmp_path / "probe_module.py"
    module.write_text("VALUE = 1\n")
    old = 1_577_836_800
    os.utime(module, (old, old))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(tmp_path)])

    def imported() -> str:
        return subprocess.run([sys.executable, "-c", "import json, grueflow.grue, probe_module as m; print(m.VALUE, "
                               "*(type(n.__spec__.loader).__name__ for n in (m, grueflow.grue, json)))"],
                              cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout

    assert imported() == "1 _ContentCheckedLoader _ContentCheckedLoader SourceFileLoader\n"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp_path)], env=env, check=True)  # Python's own
    assert imported().startswith("1 ")
    for value in (2, 3):  # the same size, the same inode, the time put back each time
        with module.open("r+") as file:
            file.write(f"VALUE = {value}\n")
        os.utime(module, (old, old))
        assert list((tmp_path / "__pycache__").glob("probe_module.*.pyc"))  # bytecode of the version before
        assert imported().startswith(f"{value} ")


def test_code_rewritten_with_its_size_and_time_kept_is_set_to_now_so_python_compiles_it_again(tmp_path, monkeypatch):
    """Python takes a module's bytecode in __pycache__ as current while the source's modification time and size are
    those it was compiled from: a module rewritten in place with its size and time kept reran its stages (the code
    digest) and they imported the earlier bytecode. Such a file's time is set to now, and the import runs the new
    bytes; a plain edit (newer), a rewrite to another size with its time put back (no bytecode matches it, and a
    new time would rerun stages built from it), an unchanged file and one never recorded are left as they are."""
    from grueflow import stale

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.syspath_prepend(str(tmp_path))
    cache = tmp_path / ".snakemake" / "grueflow-digests.json"
    old = 1_577_836_800
    paths = [tmp_path / f"probe_{name}.py" for name in ("kept", "edited", "resized", "unknown")]
    module, edited, resized, unknown = paths
    for path in paths:
        path.write_text("VALUE = 1\n")
        os.utime(path, (old, old))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import probe_kept"], cwd=tmp_path, env=env, check=True)
    assert list((tmp_path / "__pycache__").glob("probe_kept.*.pyc"))  # its bytecode cached
    names = [str(path) for path in paths]
    stale.content_digest(names[:3], cache)
    assert stale.restamp_set_back(names, cache) == []  # unchanged
    with module.open("r+") as file:  # the same size, the same inode, its time put back
        file.write("VALUE = 2\n")
    edited.write_text("VALUE = 3\n")  # a plain edit: newer
    resized.write_text("VALUE = 40\n")
    for path in (module, resized, unknown):
        os.utime(path, (old, old))
    assert stale.restamp_set_back(names, cache) == [str(module)]
    assert module.stat().st_mtime > old and resized.stat().st_mtime == unknown.stat().st_mtime == old
    ran = subprocess.run([sys.executable, "-c", "import probe_kept; print(probe_kept.VALUE)"], cwd=tmp_path, env=env,
                         check=True, capture_output=True, text=True)
    assert ran.stdout == "2\n"
    assert stale.restamp_set_back(names, cache) == []  # recorded as it is now: once
    monkeypatch.setattr(stale, "_KNOWN", {})
    assert stale.restamp_set_back(names, cache) == []  # and by the next process
    assert stale.restamped_line([str(module)]) == (
        f"grueflow: {module} changed with its size and modification time kept, which Python's bytecode cache "
        f"(__pycache__) takes as unchanged: its time is set to now so that the stages that run it compile it again")


def test_a_stale_output_gets_a_new_token_its_rule_takes_as_a_param(tmp_path):
    """The 1970 stamp alone never reran a job whose inputs are small files Snakemake checksums (a datapool's: its
    code): a token that changes when the output is found stale, and only then, is a params rerun trigger."""
    import json

    from grueflow.io import write_stage_record
    from grueflow.stale import mark_stale, stale_token

    tokens = tmp_path / ".snakemake" / "grueflow-stale.json"
    folder = tmp_path / "results" / "sentiment" / "datapool"
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text("{}\n")
    write_stage_record(folder, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
    assert mark_stale(tmp_path / "results", tmp_path / "t.csv", [], tokens=tokens) == []
    assert stale_token([str(folder)], tokens) == "" and not tokens.exists()  # never stale: no token, no param change
    (folder / "test.jsonl").unlink()
    assert mark_stale(tmp_path / "results", tmp_path / "t.csv", [], tokens=tokens) == [
        f"grueflow: {folder} is stale (damaged: test.jsonl is missing); its job reruns"]
    first = stale_token([str(folder), "results/other"], tokens)
    assert first == f"{folder}={json.loads(tokens.read_text())[str(folder)]}"
    assert stale_token([str(folder)], tokens) == first  # read again: unchanged, so no second rerun
    mark_stale(tmp_path / "results", tmp_path / "t.csv", [], tokens=tokens)
    assert stale_token([str(folder)], tokens) != first  # found stale again: a new token
    assert folder.stat().st_mtime == 1  # and stamped 1970, as before


def test_a_note_added_to_a_table_is_copied_before_the_rerun_writes_it_again(tmp_path, monkeypatch):
    """A note added by hand to grue_table.md made the table stale, and the rerun wrote it again: the note was gone,
    with no copy and no word of one."""
    from grueflow.io import atomic_files
    from grueflow.keep import REPLACED
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    csv, md = Path("results/grue_table.csv"), Path("results/grue_table.md")
    csv.parent.mkdir()
    with atomic_files([csv, md]) as (csv_tmp, md_tmp):
        csv_tmp.write_text("task,method\nsentiment,ppo\n")
        md_tmp.write_text("| task |\n")
    md.write_text("| task |\nMy notes: ppo looks best.\n")
    tokens = Path(".snakemake/grueflow-stale.json")
    line, = mark_stale(Path("results"), csv, [], {csv: [md]}, tokens=tokens)
    copy, = REPLACED.glob("results/grue_table.md@*")
    assert line == (f"grueflow: {csv} is stale ({md}, written with it, is not what its stage wrote (edited or "
                    f"replaced since)); its job reruns; a copy of {md} is kept in {copy}")
    assert (copy / "grue_table.md").read_text() == "| task |\nMy notes: ppo looks best.\n"
    assert [p.name for p in REPLACED.glob("results/*")] == [copy.name]  # the CSV, as written, is not copied
    assert mark_stale(Path("results"), csv, [], {csv: [md]}, tokens=tokens) == [line]  # copied once per content


def test_a_folder_in_a_tables_place_is_moved_aside_so_its_job_reruns(tmp_path, monkeypatch):
    """``mkdir results/grue_table.csv`` (or a link to a folder there): Snakemake took the folder for the table,
    present and up to date ("Nothing to be done"), and would not have deleted it to rerun (it removes an empty folder
    alone); the table's stage refuses to write over it. The json or md as a folder was only caught as missing. A link
    whose target is gone stopped every Snakemake run before any job ("a concurrent process has deleted it"). Each
    is moved aside (a folder's files copied out first; a link deleted, never what it names), the table is missing,
    and its job reruns."""
    from grueflow.io import atomic_files
    from grueflow.keep import REPLACED
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    csv, md = Path("results/grue_table.csv"), Path("results/grue_table.md")
    tokens = Path(".snakemake/grueflow-stale.json")
    csv.mkdir(parents=True)
    (csv / "notes.txt").write_text("mine\n")
    lines = mark_stale(Path("results"), csv, [], {csv: [md]}, tokens=tokens)
    copy, = REPLACED.glob("results/grue_table.csv@*")
    assert lines == [f"grueflow: {csv} is a folder where a table's file belongs; moved aside to {copy}; its job "
                     f"reruns"]
    assert not csv.exists() and (copy / "notes.txt").read_text() == "mine\n"
    with atomic_files([csv, md]) as (csv_tmp, md_tmp):
        csv_tmp.write_text("task,method\nsentiment,ppo\n")
        md_tmp.write_text("| task |\n")
    md.unlink()
    md.mkdir()  # empty
    assert mark_stale(Path("results"), csv, [], {csv: [md]}, tokens=tokens) == [
        f"grueflow: {md} is a folder where a table's file belongs; it is empty, and deleted; its job reruns",
        f"grueflow: {csv} is stale ({md}, written with it, is missing); its job reruns"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("kept\n")
    csv.unlink()
    csv.symlink_to(elsewhere)
    assert mark_stale(Path("results"), csv, [], {csv: []}, tokens=tokens)[0] == (
        f"grueflow: {csv} is a link to a folder where a table's file belongs; the link is deleted ({elsewhere}, what "
        f"it names, is left as it is); its job reruns")
    assert not os.path.lexists(csv) and (elsewhere / "keep.txt").read_text() == "kept\n"
    os.mkfifo(csv)
    assert mark_stale(Path("results"), csv, [], {csv: []}, tokens=tokens)[0] == (
        f"grueflow: {csv} is a FIFO, a socket or a device where a table's file belongs; it holds no data, and is "
        f"deleted; its job reruns")
    assert not os.path.lexists(csv)
    csv.symlink_to(tmp_path / "unmounted" / "grue_table.csv")  # Snakemake cannot read its time: every run stops
    assert mark_stale(Path("results"), csv, [], {csv: []}, tokens=tokens)[0] == (
        f"grueflow: {csv} is a link to nothing where a table's file belongs; the link is deleted (it names "
        f"{tmp_path / 'unmounted' / 'grue_table.csv'}, which does not exist); its job reruns")
    assert not os.path.lexists(csv) and not (tmp_path / "unmounted").exists()


def test_dvcs_own_table_restored_from_its_cache_is_not_copied_as_an_edit(tmp_path, monkeypatch):
    """`dvc repro` after a param is put back restores the earlier table from DVC's cache, with no aggregate run: under
    a dvc.yaml whose table stage does not list the table's record as an out (a project built before it did), the
    record is still the last run's, and DVC's first stage took the restored files for a hand edit (a copy and a line
    on the next `dvc repro`). Where dvc.lock holds no entry for the record, a file whose bytes dvc.lock records for
    it (DVC 3's md5, or DVC 2's of the text with CRLF as LF) is DVC's own; an edit of it is still copied."""
    import hashlib

    from grueflow.io import atomic_files
    from grueflow.stale import keep_edited_tables

    monkeypatch.chdir(tmp_path)
    csv, md = Path("results/grue_table.csv"), Path("results/grue_table.md")
    csv.parent.mkdir()
    with atomic_files([csv, md]) as (csv_tmp, md_tmp):  # the last run's table and its record
        csv_tmp.write_text("task,method\nsentiment,ppo\n")
        md_tmp.write_text("| task |\n")
    earlier = {csv: "task,method\nsentiment,zero_shot\n", md: "| task | method |\r\n"}
    for path, text in earlier.items():  # DVC's restore of the table before the param change
        path.write_bytes(text.encode())
    entries = [f"    - path: {csv}\n      hash: md5\n      md5: {hashlib.md5(earlier[csv].encode()).hexdigest()}\n",
               f"    - path: {md}\n      md5: {hashlib.md5(earlier[md].replace(chr(13), '').encode()).hexdigest()}\n"]
    Path("dvc.lock").write_text("schema: '2.0'\nstages:\n  aggregate:\n    cmd: python stages/aggregate.py\n"
                                "    outs:\n" + "".join(entries))
    assert keep_edited_tables(Path("."), {csv: [md]}) == [] and not Path(".grueflow").exists()
    md.write_text("| task | method |\nmy note\n")  # a note added to DVC's own file: a person's edit
    line, = keep_edited_tables(Path("."), {csv: [md]})
    assert line.startswith(f"grueflow: {csv} is stale (") and f"a copy of {md} is kept in .grueflow/replaced/" in line
    assert "a copy of results/grue_table.csv" not in line


def _lock_entries(stage: str, paths: list[Path]) -> str:
    """A dvc.lock stage recording each of ``paths`` with the md5 of its bytes as they are (DVC 3's entry)."""
    return f"  {stage}:\n    cmd: python stages/{stage}.py\n    outs:\n" + "".join(
        f"    - path: {path}\n      hash: md5\n      md5: {hashlib.md5(path.read_bytes()).hexdigest()}\n"
        for path in paths)


def test_a_table_edit_dvc_commit_took_with_the_tables_own_record_is_copied_and_named(tmp_path, monkeypatch):
    """A number edited in grue_table.json, then `dvc commit -f`: dvc.lock recorded the edit, and DVC's first stage
    took a file whose bytes dvc.lock records as DVC's own, so the edit passed as a pipeline result (no copy, no
    rerun, `dvc status` clean). With the table's record an out of its stage, DVC restores a table with its own
    record: a file unlike it is an edit whatever dvc.lock says, copied, and named with the stage to rerun."""
    from grueflow.io import atomic_files, files_record
    from grueflow.pipeline import STAGES, TABLE_RECORD
    from grueflow.stale import dvc_kept_edits, keep_edited_tables
    from grueflow.suite_check import kept_edits_problem

    assert TABLE_RECORD == files_record(STAGES["aggregate"].outputs["csv"]).as_posix()
    assert TABLE_RECORD in STAGES["aggregate"].outs
    monkeypatch.chdir(tmp_path)
    csv, js = Path("results/grue_table.csv"), Path("results/grue_table.json")
    csv.parent.mkdir()
    with atomic_files([csv, js]) as (csv_tmp, js_tmp):
        csv_tmp.write_text("task,method,reward\nsentiment,ppo,-0.15625\n")
        js_tmp.write_text('{"sentiment": {"ppo": {"reward": -0.15625}}}')
    js.write_text('{"sentiment": {"ppo": {"reward": -0.95625}}}')  # edited, then dvc commit -f
    Path("dvc.lock").write_text("schema: '2.0'\nstages:\n" + _lock_entries("aggregate", [csv, js, Path(TABLE_RECORD)]))
    line, = keep_edited_tables(Path("."), {csv: [js]})
    assert line.startswith(f"grueflow: {csv} is stale ({js}, written with it, is not what its stage wrote") \
        and f"a copy of {js} is kept in .grueflow/replaced/{js}@" in line
    assert dvc_kept_edits(Path("."), {csv: [js]}, []) == [(js, Path(TABLE_RECORD), "aggregate")]
    assert kept_edits_problem([]) == (  # DVC's first stage: exit 2 with this line, once its own files are written
        f"dvc.lock records outputs their stages did not write, as they are (dvc commit took a hand edit as a stage's "
        f"output), so dvc repro would keep them as pipeline results: {js} (unlike what {TABLE_RECORD} records of "
        f"it; stage aggregate); their bytes stay in DVC's cache under this dvc.lock; rebuild them with `dvc repro -f "
        f"-s aggregate`, then `dvc repro`")
    Path("dvc.lock").write_text("schema: '2.0'\nstages:\n" + _lock_entries("aggregate", [csv]))
    assert dvc_kept_edits(Path("."), {csv: [js]}, []) == []  # the edit not in dvc.lock: DVC restores the table


def test_a_dep_dvc_would_take_as_unchanged_is_named_and_its_time_set_to_now(tmp_path, monkeypatch):
    """A code file rewritten in place with its size and time kept: DVC's hash cache, kept by inode, size and time,
    gives its old md5. DVC's first stage names each dep of a later stage whose bytes match none of dvc.lock's md5s
    for it and whose modification time is not that of its last change, whatever that time is (before dvc.lock's,
    after it as a touch or a branch switch leaves it, or in the future after a clock set back), and sets its time to
    now; not one plainly edited (DVC hashes it), one recorded as it is by some stage, the first stage's own deps,
    folders, nor outputs' files. One read and found as recorded is not read again while its stat signature holds."""
    from grueflow import stale
    from grueflow.keep import stat_signature
    from grueflow.stale import VERIFIED_DEPS, dvc_unseen_edits
    from grueflow.suite_check import rehash_unseen_edits

    monkeypatch.chdir(tmp_path)
    Path(".dvc").mkdir()
    files = {name: Path(name) for name in ("grueflow/data/synthetic.py", "stages/evaluate.py", "my_rewards.py",
                                           "results/sentiment/datapool/train.jsonl")}
    synthetic, evaluate = files["grueflow/data/synthetic.py"], files["stages/evaluate.py"]
    built = time.time_ns() - 100 * 10**9
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("WORDS = ['great']\n")
        os.utime(path, ns=(built, built))

    def deps(paths: list[str]) -> str:
        return "    deps:\n" + "".join(f"    - path: {p}\n      hash: md5\n      md5: "
                                       f"{hashlib.md5(Path(p).read_bytes()).hexdigest()}\n" for p in paths)

    def rewrite(path: Path, text: str) -> None:  # the same size, the time kept
        kept = path.stat().st_mtime_ns
        path.write_text(text)
        os.utime(path, ns=(kept, kept))

    lock = Path("dvc.lock")
    lock.write_text("schema: '2.0'\nstages:\n  validate_suite:\n    cmd: check\n" + deps(["my_rewards.py"])
                    + "  prepare_datapool@sentiment:\n    cmd: prepare\n" + deps(["grueflow/data/synthetic.py"])
                    + "    - path: params\n      hash: md5\n      md5: 0cc175b9c0f1b6a831c399e269772661.dir\n"
                    + "  evaluate_zero_shot@sentiment-0:\n    cmd: evaluate\n"
                    + deps(["grueflow/data/synthetic.py", "stages/evaluate.py",
                            "results/sentiment/datapool/train.jsonl"]))
    written = built + 50 * 10**9
    os.utime(lock, ns=(written, written))
    assert dvc_unseen_edits(Path(".")) == [] and rehash_unseen_edits(Path(".")) == ""  # a copy's times, as is
    md5 = hashlib.md5(b"WORDS = ['great']\n").hexdigest()
    assert json.loads(VERIFIED_DEPS.read_text()) == {str(path): [stat_signature(path.stat()), md5]
                                                     for path in (synthetic, evaluate)}
    with monkeypatch.context() as patched:  # found as recorded, unchanged since: not read again
        patched.setattr(stale, "_as_locked", lambda path, entry: pytest.fail(f"{path} read again"))
        assert dvc_unseen_edits(Path(".")) == []
    for path in files.values():
        rewrite(path, "WORDS = ['grand']\n")
    assert dvc_unseen_edits(Path(".")) == ["grueflow/data/synthetic.py", "stages/evaluate.py"]
    evaluate.write_text("WORDS = ['grant']\n")  # a plain edit: its time that of the change, DVC hashes it itself
    assert rehash_unseen_edits(Path(".")) == (
        "grueflow: grueflow/data/synthetic.py changed since dvc.lock recorded it, and its modification time is not "
        "that of its last change (kept or set over a rewrite), which DVC's own hash cache (kept by inode, size and "
        "modification time) may take as unchanged: its time is set to now so that DVC hashes it again")
    assert synthetic.stat().st_mtime_ns > written and dvc_unseen_edits(Path(".")) == []
    evaluate.write_text("WORDS = ['great']\n")  # put back, then touched after dvc.lock (git stash && git stash pop)
    assert dvc_unseen_edits(Path(".")) == []  # DVC hashes it again at this time: as recorded
    rewrite(evaluate, "WORDS = ['grand']\n")  # dated after dvc.lock, its time kept over the rewrite
    assert dvc_unseen_edits(Path(".")) == ["stages/evaluate.py"]
    ahead = time.time_ns() + 3600 * 10**9  # built, or rsync -a'd from a host, while the clock ran an hour ahead
    evaluate.write_text("WORDS = ['great']\n")
    for path in (evaluate, lock):
        os.utime(path, ns=(ahead, ahead))
    assert dvc_unseen_edits(Path(".")) == []
    rewrite(evaluate, "WORDS = ['grand']\n")
    assert dvc_unseen_edits(Path(".")) == ["stages/evaluate.py"]
    lock.write_text(lock.read_text().replace(  # one stage recorded the file as it is: DVC's cache holds its md5
        "  evaluate_zero_shot", "  evaluate_rl@sentiment-ppo-0:\n    cmd: evaluate\n"
        + deps(["stages/evaluate.py"]) + "  evaluate_zero_shot"))
    assert dvc_unseen_edits(Path(".")) == []
    VERIFIED_DEPS.write_text("{not json")  # a damaged cache is no cache
    rewrite(synthetic, "WORDS = ['great']\n")
    rewrite(evaluate, "WORDS = ['grant']\n")
    assert dvc_unseen_edits(Path(".")) == ["stages/evaluate.py"]
    assert list(json.loads(VERIFIED_DEPS.read_text())) == [str(synthetic)]


def test_a_stage_folders_file_dvc_would_take_as_unchanged_is_named_and_its_time_set_to_now(tmp_path, monkeypatch):
    """A datapool file rewritten in place with its size and time kept: DVC's hash cache, kept by inode, size and
    time, gives the md5 dvc.lock records, and `dvc repro` kept it. DVC's first stage names each file of a stage folder
    out of dvc.lock that its stage.json lists at its size but does not vouch for, whose modification time is not that
    of its last change, whatever that time is (before the record's, after it as `dvc checkout` leaves a folder's files
    in no fixed order, or in the future after a clock set back), and sets its time to now; not one plainly edited (DVC
    hashes it), nor one no out holds. A folder as its stage wrote it is not read; one read and found as written (times
    as a `cp -a` leaves them) is not read again while its stat signature holds."""
    from grueflow import suite_check
    from grueflow.io import atomic_dir, fingerprint, write_stage_record
    from grueflow.keep import stat_signature

    monkeypatch.chdir(tmp_path)
    Path(".dvc").mkdir()
    folder = Path("results/sentiment/datapool")
    with atomic_dir(folder) as tmp:
        for name in ("train.jsonl", "test.jsonl", "notes/words.txt"):
            (tmp / name).parent.mkdir(exist_ok=True)
            (tmp / name).write_text('{"text": "great"}\n')
        write_stage_record(tmp, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
    train, test, words = folder / "train.jsonl", folder / "test.jsonl", folder / "notes" / "words.txt"
    record = folder / "stage.json"
    lock = "schema: '2.0'\nstages:\n  prepare_datapool@sentiment:\n    cmd: prepare\n    outs:\n    - path: {}\n" \
           "      hash: md5\n      md5: 0cc175b9c0f1b6a831c399e269772661{}\n"
    Path("dvc.lock").write_text(lock.format(folder, ".dir"))

    def rewrite(path: Path, text: str) -> None:  # the same size, the time kept
        kept = path.stat().st_mtime_ns
        path.write_text(text)
        os.utime(path, ns=(kept, kept))

    with monkeypatch.context() as patched:  # as its stage wrote it: each file's time that of its last change
        patched.setattr(suite_check, "fingerprint", lambda path: pytest.fail(f"{path} read"))
        assert suite_check.damaged_outputs(Path(".")) == {}
    built = time.time_ns() - 100 * 10**9
    for file in folder.rglob("*"):
        os.utime(file, ns=(built, built))
    assert suite_check.damaged_outputs(Path(".")) == {}
    assert json.loads(suite_check.VERIFIED_OUTPUTS.read_text()) == {
        str(file): [stat_signature(file.stat()), fingerprint(file)] for file in (words, test, train)}
    with monkeypatch.context() as patched:  # found as written, unchanged since: not read again
        patched.setattr(suite_check, "fingerprint", lambda path: pytest.fail(f"{path} read again"))
        assert suite_check.damaged_outputs(Path(".")) == {}
    for file in (train, test):
        rewrite(file, '{"text": "grand"}\n')
    assert suite_check.damaged_outputs(Path(".")) == {str(test): "prepare_datapool@sentiment",
                                                      str(train): "prepare_datapool@sentiment"}
    test.write_text('{"text": "grant"}\n')  # a plain edit: its time that of the change, DVC hashes it itself
    assert suite_check.rehash_damaged_outputs(Path(".")) == (
        "grueflow: results/sentiment/datapool/train.jsonl does not match the digest its stage recorded in stage.json "
        "at the size it has, and its modification time is not that of its last change (kept or set over a rewrite), "
        "which DVC's own hash cache (kept by inode, size and modification time) may take as unchanged: its time is "
        "set to now so that DVC hashes it again and restores or reruns prepare_datapool@sentiment")
    assert train.stat().st_mtime_ns > built + 50 * 10**9 and suite_check.damaged_outputs(Path(".")) == {}
    for file in (train, test):  # restored by `dvc checkout`: train.jsonl written after stage.json
        file.write_text('{"text": "great"}\n')
    os.utime(train, ns=(record.stat().st_mtime_ns + 10**9,) * 2)
    assert suite_check.damaged_outputs(Path(".")) == {}
    rewrite(train, '{"text": "grand"}\n')
    assert suite_check.damaged_outputs(Path(".")) == {str(train): "prepare_datapool@sentiment"}
    train.write_text('{"text": "great"}\n')
    ahead = time.time_ns() + 3600 * 10**9  # built, or rsync -a'd from a host, while the clock ran an hour ahead
    for file in folder.rglob("*"):
        os.utime(file, ns=(ahead, ahead))
    assert suite_check.damaged_outputs(Path(".")) == {}
    rewrite(words, '{"text": "grand"}\n')
    assert suite_check.damaged_outputs(Path(".")) == {str(words): "prepare_datapool@sentiment"}
    rewrite(words, '{"text": "great"}\n')
    rewrite(train, '{"text": "grand"}\n')
    Path("dvc.lock").write_text(lock.format(folder / "stage.json", ""))
    assert suite_check.damaged_outputs(Path(".")) == {}  # no out of dvc.lock holds it: DVC would not rerun its stage
    Path("dvc.lock").write_text(lock.format(folder, ".dir"))
    suite_check.VERIFIED_OUTPUTS.write_text("[]")  # a cache of another shape is no cache
    assert suite_check.damaged_outputs(Path(".")) == {str(train): "prepare_datapool@sentiment"}

    def refused(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    with monkeypatch.context() as patched, pytest.raises(DataError) as refusal:
        patched.setattr(os, "utime", refused)
        suite_check.rehash_damaged_outputs(Path("."))
    assert str(refusal.value) == (
        "results/sentiment/datapool/train.jsonl no longer matches the digest its stage recorded at the size it has, "
        "and its modification time is not that of its last change (kept or set over a rewrite), so DVC may take it "
        "as unchanged; its time cannot be set to now (Operation not permitted): `touch "
        "results/sentiment/datapool/train.jsonl` as its owner, then rerun dvc repro")


def test_a_stage_folders_edit_dvc_commit_took_is_named_with_its_stage(tmp_path, monkeypatch):
    """An evaluation's metrics.json edited, then `dvc commit -f`: its stage.json still records the digest of what
    the stage wrote, and dvc.lock records both as they are, so DVC neither reruns nor restores the stage: named,
    whatever the file's time (``dvc checkout`` sets times anew). Not named where dvc.lock records the file as
    the stage wrote it (DVC puts it back), nor where the folder is as written."""
    from grueflow.io import atomic_dir, write_json, write_stage_record
    from grueflow.stale import dvc_kept_edits

    monkeypatch.chdir(tmp_path)
    folder = Path("results/eval/sentiment/ppo/seed0")
    with atomic_dir(folder) as tmp:
        write_json(tmp / "metrics.json", {"reward": -0.15625})
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    metrics, record = folder / "metrics.json", folder / "stage.json"
    lock = Path("dvc.lock")
    lock.write_text("schema: '2.0'\nstages:\n" + _lock_entries("evaluate_rl@sentiment-ppo-0", [metrics, record]))
    assert dvc_kept_edits(Path("."), {}, [folder]) == []
    written = lock.read_text()
    metrics.write_text(metrics.read_text().replace("-0.15625", "0.75"))
    os.utime(metrics, (1, 1))  # older than its record
    assert dvc_kept_edits(Path("."), {}, [folder]) == []  # dvc.lock records what the stage wrote: DVC restores it
    lock.write_text("schema: '2.0'\nstages:\n" + _lock_entries("evaluate_rl@sentiment-ppo-0", [metrics, record]))
    assert dvc_kept_edits(Path("."), {}, [folder]) == [(metrics, record, "evaluate_rl@sentiment-ppo-0")]
    assert written != lock.read_text()


def test_a_table_edited_after_its_stage_wrote_it_is_stale(tmp_path, monkeypatch):
    """The GRUE table cut, or saved back by a spreadsheet, after a finished run: Snakemake said "Nothing to be done"
    and the table stayed as edited, and so it did once the record of its digests was gone too. Its stage records the
    digests of the files it writes together; a table (or blinding key) without that record is rebuilt."""
    from grueflow.io import atomic_files, files_record
    from grueflow.stale import stale_outputs

    monkeypatch.chdir(tmp_path)  # a stage records its paths as given: relative to the project, as Snakemake runs
    csv, md = Path("results/grue_table.csv"), Path("results/grue_table.md")
    csv.parent.mkdir()
    with atomic_files([csv, md]) as (csv_tmp, md_tmp):
        csv_tmp.write_text("task,method\nsentiment,ppo\nsentiment,zero_shot\n")
        md_tmp.write_text("| task |\n")
    assert files_record(csv) == Path("results/.grue_table.csv.record.json") and files_record(csv).is_file()
    assert stale_outputs(Path("results"), csv, [], {csv: [md]}) == {}
    csv.write_text("task,method\nsentiment,ppo\n")
    assert stale_outputs(Path("results"), csv, [], {csv: [md]}) == {
        csv: "it is not what its stage wrote (edited or replaced since)"}
    csv.write_text("task,method\nsentiment,ppo\nsentiment,zero_shot\n")  # as written; its Markdown then edited
    md.write_text("| task | method |\n")
    assert stale_outputs(Path("results"), csv, [], {csv: [md]}) == {
        csv: "results/grue_table.md, written with it, is not what its stage wrote (edited or replaced since)"}
    files_record(csv).unlink()  # a hidden file, lost when `cp results/* ...` and back: nothing vouches for the table
    assert stale_outputs(Path("results"), csv, [], {csv: [md]}) == {
        csv: "results/.grue_table.csv.record.json, the digests of what its stage wrote, is missing"}
    files_record(csv).write_text("[]\n")
    assert stale_outputs(Path("results"), csv, [], {csv: [md]}) == {
        csv: "results/.grue_table.csv.record.json, the digests of what its stage wrote, is damaged"}
    key = Path("results/human/sentiment/keys/ppo_vs_zero_shot_seed0.json")  # a blinding key: the same record beside it
    key.parent.mkdir(parents=True)
    key.write_text("{}\n")
    assert stale_outputs(Path("results"), csv, [], {key: []})[key] == \
        f"{files_record(key)}, the digests of what its stage wrote, is missing"
    files_record(csv).unlink()
    before = csv.read_text()
    with pytest.raises(RuntimeError), atomic_files([csv, md]) as (csv_tmp, md_tmp):
        csv_tmp.write_text("half")
        raise RuntimeError("killed")
    assert not files_record(csv).exists() and csv.read_text() == before


def test_a_stage_whose_input_from_outside_results_changed_is_stale(tmp_path, monkeypatch):
    """A datapool's data file swapped for another with an older time kept the old datapool wherever Snakemake had
    no params of its own to compare (a datapool dvc repro built, or .snakemake removed). Its stage.json records the
    data's digest; the check compares it, whatever the times, and reads a file again only when it changed."""
    from grueflow import stale
    from grueflow.io import write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    results = tmp_path / "results"
    datapool = results / "sentiment" / "datapool"
    datapool.mkdir(parents=True)
    (datapool / "train.jsonl").write_text("{}\n")
    data, folder = tmp_path / "train.jsonl", tmp_path / "data_root"
    data.write_text('{"prompt": "v1"}\n')
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text("a")
    write_stage_record(datapool, stage="prepare_datapool", params={}, wall_time_s=0.0,
                       inputs={"train.jsonl": data, "data_root": folder})
    cache = tmp_path / ".snakemake" / "grueflow-digests.json"
    assert stale.stale_outputs(results, tmp_path / "t.csv", [], cache=cache) == {} and cache.is_file()
    new = tmp_path / "new.jsonl"
    new.write_text('{"prompt": "v2"}\n')
    os.utime(new, (1_577_836_800, 1_577_836_800))  # 2020: older than the datapool
    os.replace(new, data)
    assert stale.stale_outputs(results, tmp_path / "t.csv", [], cache=cache) == {
        datapool: f"its input {data} changed since it was built"}
    new.write_text('{"prompt": "v1"}\n')
    os.replace(new, data)  # the content it was built from, under a new inode: nothing to rebuild
    (folder / "sub" / "a.txt").write_text("b")
    assert stale.stale_outputs(results, tmp_path / "t.csv", [], cache=cache) == {
        datapool: f"its input {folder} changed since it was built"}
    (folder / "sub" / "a.txt").write_text("a")
    built = datapool.stat().st_mtime_ns
    data.rename(new)  # moved aside: stale, but stamped only (no token), so moving it back reruns nothing
    tokens = tmp_path / ".snakemake" / "grueflow-stale.json"
    assert stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens) == [
        f"grueflow: {datapool} is stale (its input {data} no longer exists); its job reruns"]
    assert not tokens.exists()
    assert stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens) != []  # a second dry run: still stamped
    new.rename(data)  # put back as it was: the time before the stamp comes back, so that nothing reruns
    assert stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens) == []
    assert datapool.stat().st_mtime_ns == built != 10 ** 9


@pytest.mark.parametrize("named", ["data/sent/train.jsonl", "data/sent"])
def test_a_suite_datapool_whose_data_is_gone_but_still_named_stops_the_run_and_is_kept(tmp_path, monkeypatch, named):
    """A datapool's local data gone for one run (a data disk not mounted, a folder renamed) was called stale, "its job
    reruns": Snakemake deleted the built datapool as the job started, the job failed for want of the data, and with
    the data back the task's whole chain was rebuilt. Where the task file still names the data (the file, or a folder
    above it), the check stops before anything is marked, naming the data and the two ways on; a task file that names
    other data reruns the job, as any params change does."""
    from grueflow import stale
    from grueflow.io import write_stage_record
    from grueflow.pipeline import ParamsSource

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    datapool, data, task = results / "sentiment" / "datapool", Path("data/sent"), Path("params/tasks/sentiment.yaml")
    datapool.mkdir(parents=True)
    (datapool / "train.jsonl").write_text("{}\n")
    data.mkdir(parents=True)
    (data / "train.jsonl").write_text('{"prompt": "a", "references": ["b"]}\n')
    task.parent.mkdir(parents=True)
    task.write_text(f"datapool: {{id: custom, args: {{data_files: {{train: {named}}}}}}}\n")
    write_stage_record(datapool, stage="prepare_datapool", params={}, wall_time_s=0.0, inputs={named: Path(named)})
    check = dict(tokens=tokens, folders=[datapool], params={datapool: ParamsSource("prepare_datapool", str(task))})
    assert stale.mark_stale(results, results / "t.csv", [], **check) == []
    built = datapool.stat().st_mtime_ns
    os.rename("data", "moved_data")
    with pytest.raises(DataError) as err:
        stale.mark_stale(results, results / "t.csv", [], **check)
    assert str(err.value) == (
        f"results/sentiment/datapool was built from {named}, which no longer exists (a disk not mounted, a folder "
        f"moved or renamed?), and params/tasks/sentiment.yaml still names it (datapool.args.data_files.train): put "
        f"the data back, or change that key to name other data (its job then rebuilds results/sentiment/datapool); "
        f"nothing was run, and results/sentiment/datapool is kept")
    assert datapool.stat().st_mtime_ns == built and not tokens.exists() and not stale.STAMPED.exists()
    os.rename("moved_data", "data")
    assert stale.mark_stale(results, results / "t.csv", [], **check) == []
    os.rename("data", "moved_data")
    task.write_text("datapool: {id: custom, args: {data_files: {train: moved_data/train.jsonl}}}\n")  # other data
    assert stale.mark_stale(results, results / "t.csv", [], **check) == [
        f"grueflow: {datapool} is stale (its input {named} no longer exists); its job reruns"]


def test_a_reader_of_a_stage_folder_replaced_by_another_runs_folder_is_stale(tmp_path, monkeypatch):
    """A trained model's folder replaced by another run's (``cp -a`` of supervised+ppo's onto ppo's) passes its own
    checks and is newer than nothing: Snakemake said "Nothing to be done" and a later evaluation scored the wrong
    model. Its reader's stage.json records the digest of the model it read; the check compares it, and reads each
    input again only when the stat signatures of its files changed (a copy's new inodes: once). The records here
    name no output path, as an earlier version's did (one that does makes the copy stale itself)."""
    import json
    import shutil

    from grueflow import stale
    from grueflow.io import write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)  # a stage records its paths as given: relative to the project, as Snakemake runs
    results, cache = Path("results"), Path(".snakemake") / "grueflow-digests.json"
    runs = {}
    for method, weights in (("ppo", b"ppo weights"), ("supervised+ppo", b"sft then ppo weights")):
        runs[method] = results / "sentiment" / method / "seed0"
        (runs[method] / "model").mkdir(parents=True)
        (runs[method] / "model" / "model.safetensors").write_bytes(weights)
        write_stage_record(runs[method], stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
        record = json.loads((runs[method] / "stage.json").read_text())
        del record["out"], record["record_sha256"]  # written before records held either
        (runs[method] / "stage.json").write_text(json.dumps(record))
    evaluation = results / "eval" / "sentiment" / "ppo" / "seed0"
    evaluation.mkdir(parents=True)
    (evaluation / "metrics.json").write_text("{}\n")
    write_stage_record(evaluation, stage="evaluate", params={}, wall_time_s=0.0,
                       inputs={"model": runs["ppo"] / "model"})
    assert stale.stale_outputs(results, results / "t.csv", [], cache=cache) == {}
    read = []
    fingerprint = stale.fingerprint
    monkeypatch.setattr(stale, "fingerprint", lambda path, *rest: read.append(str(path)) or fingerprint(path, *rest))
    monkeypatch.setattr(stale, "_KNOWN", {})  # a new process: the cache file is read back
    assert stale.stale_outputs(results, results / "t.csv", [], cache=cache) == {} and read == []  # unchanged
    shutil.rmtree(runs["ppo"])
    shutil.copytree(runs["supervised+ppo"], runs["ppo"], copy_function=shutil.copy2)  # cp -a: the times kept
    assert stale.stale_outputs(results, results / "t.csv", [], cache=cache) == {
        evaluation: f"its input {runs['ppo'] / 'model'} changed since it was built"}
    assert stale.stale_outputs(results, results / "t.csv", [], cache=cache) != {}
    assert read == [str(runs["ppo"] / "model"), str(runs["ppo"] / "model" / "model.safetensors")]  # the copy read
    # once as the input, and its file once against its own record, for both dry runs


def _finished_datapool() -> tuple[Path, Path, Path]:
    """``results/``, a finished datapool in it (``results/sentiment/datapool``, one train row) and the path of the
    base model that reads it, not yet written; relative to the working folder, as stages record them."""
    from grueflow.io import write_stage_record

    results = Path("results")
    pool, model = results / "sentiment" / "datapool", results / "sentiment" / "base_model"
    pool.mkdir(parents=True)
    (pool / "train.jsonl").write_text('{"prompt": "a"}\n')
    write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
    return results, pool, model


def test_a_persons_file_in_an_input_stage_folder_leaves_its_readers_as_they_are(tmp_path, monkeypatch):
    """A note put in a finished datapool's folder changed the digest of the datapool, so every stage that read it
    was stale and a plain run would have retrained them all, for a file no stage reads (and that the run copies
    out). The digests left out what no stage record vouches for, on both sides: when a reader records its input,
    and when the check compares it; a file of the stage's own edited still makes the reader stale."""
    from grueflow import stale
    from grueflow.io import write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, pool, model = _finished_datapool()
    model.mkdir(parents=True)
    write_stage_record(model, stage="base_model", params={}, inputs={"datapool": pool}, wall_time_s=0.0)
    (pool / "notes.txt").write_text("mine\n")
    assert stale.stale_outputs(results, results / "t.csv", []) == {}
    write_stage_record(model, stage="base_model", params={}, inputs={"datapool": pool}, wall_time_s=0.0)
    (pool / "notes.txt").unlink()  # recorded while the note lay there: the same digest without it
    assert stale.stale_outputs(results, results / "t.csv", []) == {}
    (pool / "train.jsonl").write_text('{"prompt": "b"}\n')  # the stage's own file, same size: its content read
    write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
    assert stale.stale_outputs(results, results / "t.csv", []) == {
        model: f"its input {pool} changed since it was built"}
    write_stage_record(model, stage="base_model", params={}, inputs={"datapool": pool}, wall_time_s=0.0)
    (model / "model").mkdir()  # a model folder's loaders read what it holds: a file put there is read
    (model / "model" / "model.safetensors").write_bytes(b"weights")
    write_stage_record(model, stage="base_model", params={}, inputs={"datapool": pool}, wall_time_s=0.0)
    tuned = results / "sentiment" / "supervised" / "seed0"
    tuned.mkdir(parents=True)
    write_stage_record(tuned, stage="warm_start", params={}, inputs={"model": model / "model"}, wall_time_s=0.0)
    assert stale.stale_outputs(results, results / "t.csv", []) == {}
    (model / "model" / "special_tokens_map.json").write_text("{}\n")  # the tokenizer loader reads it
    assert stale.stale_outputs(results, results / "t.csv", []) == {
        tuned: f"its input {model / 'model'} changed since it was built"}


def test_a_stage_folder_replaced_by_a_copy_of_another_is_stale_itself(tmp_path, monkeypatch):
    """A trained model's folder replaced by another run's (``cp -a`` of supervised+ppo's onto ppo's) passes its own
    checks: its reader reran and scored the other model under ppo's row. A stage records where it wrote its folder
    (``out``, the path its atomic_dir replaces, relative to the project), so the copy is stale for its own sake and
    rebuilt; the original, a record written before records named their output, and a copy no rule writes are not."""
    import json
    import shutil

    from grueflow import stale
    from grueflow.io import atomic_dir, write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)  # a stage records its paths as given: relative to the project, as Snakemake runs
    results = Path("results")
    runs = {method: results / "sentiment" / method / "seed0" for method in ("ppo", "supervised+ppo")}
    for method, out in runs.items():
        with atomic_dir(out) as tmp:
            (tmp / "model").mkdir()
            (tmp / "model" / "model.safetensors").write_bytes(method.encode())
            write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    assert json.loads((runs["ppo"] / "stage.json").read_text())["out"] == "results/sentiment/ppo/seed0"
    assert stale.stale_outputs(results, results / "t.csv", []) == {}
    shutil.rmtree(runs["ppo"])
    shutil.copytree(runs["supervised+ppo"], runs["ppo"], copy_function=shutil.copy2)  # cp -a: the times kept
    shutil.copytree(runs["supervised+ppo"], results / "backup", copy_function=shutil.copy2)  # no rule writes it
    why = "damaged: its stage.json records results/sentiment/supervised+ppo/seed0 as its output: a copy of that folder"
    assert stale.stale_outputs(results, results / "t.csv", [], folders=list(runs.values())) == {runs["ppo"]: why}
    shutil.rmtree(runs["ppo"])
    runs["ppo"].symlink_to("../supervised+ppo/seed0")  # a link to the other run's folder is not that run
    assert stale.stale_outputs(results, results / "t.csv", [], folders=list(runs.values())) == {
        runs["ppo"]: why.replace("a copy of", "a link to")}
    runs["ppo"].unlink()
    shutil.copytree(runs["supervised+ppo"], runs["ppo"], copy_function=shutil.copy2)
    record = json.loads((runs["ppo"] / "stage.json").read_text())
    del record["out"], record["record_sha256"]  # written by an earlier version, before records held either
    (runs["ppo"] / "stage.json").write_text(json.dumps(record))
    assert stale.stale_outputs(results, results / "t.csv", [], folders=list(runs.values())) == {}


def _two_runs(results: Path, task: str = "sentiment") -> dict[str, Path]:
    """ppo's and supervised+ppo's RL folders under ``results/<task>``, written as rl_finetune writes them, with model
    files of the same sizes (a size check cannot tell them apart)."""
    from grueflow.io import atomic_dir, write_stage_record

    runs = {method: results / task / method / "seed0" for method in ("ppo", "supervised+ppo")}
    for method, out in runs.items():
        with atomic_dir(out) as tmp:
            (tmp / "model").mkdir()
            (tmp / "model" / "model.safetensors").write_bytes(method.ljust(16, "!").encode())
            (tmp / "model" / "config.json").write_text("{}\n")
            write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    return runs


def test_a_stage_folder_under_a_link_to_another_runs_folder_is_stale_or_refused(tmp_path, monkeypatch):
    """A method's folder (``results/sentiment/ppo``) or a task's (``results/sentiment``) replaced by a link to
    another's: the stage folders under it were never looked at (the walk for stage records enters no linked
    folder), and the other run's model was scored under ppo's row. Every suite folder is checked at the path its
    rule writes. One whose record names another path, reached through a link above it (to a backup of another run,
    to another task's or another checkout's folder), is refused naming the link, whatever the suite holds: a rebuild
    would delete what the link leads to; so are two suite folders made one by a link."""
    from grueflow import stale

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    runs, concepts = _two_runs(results), _two_runs(results, "concepts")
    folders = [*runs.values(), *concepts.values()]
    assert stale.stale_outputs(results, results / "t.csv", [], folders=folders) == {}
    shutil.copytree(results / "sentiment" / "supervised+ppo", "backup", copy_function=shutil.copy2)
    shutil.rmtree(results / "sentiment" / "ppo")
    (results / "sentiment" / "ppo").symlink_to(tmp_path / "backup")  # a person's backup of another run, elsewhere
    for suite, expected in ((folders, []), ([], folders)):  # a suite folder; a folder the table aggregates
        with pytest.raises(DataError, match=re.escape(
                "results/sentiment/ppo/seed0 holds the stage folder written at results/sentiment/supervised+ppo/seed0 "
                "(its stage.json records that path), reached through results/sentiment/ppo, a link to "
                f"{tmp_path}/backup: {tmp_path}/backup/seed0 is that other run's folder, and a rebuild of "
                "results/sentiment/ppo/seed0 would delete that run; remove the link (rm results/sentiment/ppo) and run "
                "again, which rebuilds results/sentiment/ppo here")):
            stale.stale_outputs(results, results / "t.csv", expected, folders=suite)
    (results / "sentiment" / "ppo").unlink()
    (results / "sentiment" / "ppo").symlink_to(tmp_path / "results" / "sentiment" / "supervised+ppo")
    with pytest.raises(DataError, match=re.escape(
            f"results/sentiment/ppo/seed0 and results/sentiment/supervised+ppo/seed0, two stage folders of the suite, "
            f"are one folder ({tmp_path}/results/sentiment/supervised+ppo/seed0), as results/sentiment/ppo is a link "
            f"to {tmp_path}/results/sentiment/supervised+ppo: a rerun of either deletes the other's run; remove the "
            f"link (rm results/sentiment/ppo) and run again")):
        stale.stale_outputs(results, results / "t.csv", [], folders=folders)
    shutil.rmtree(results / "sentiment")
    (results / "sentiment").symlink_to("concepts")  # the task's folder a link to another task's
    with pytest.raises(DataError, match=r"results/concepts/ppo/seed0 and results/sentiment/ppo/seed0, two stage "
                                        r"folders of the suite, are one folder .*, as results/sentiment is a link to "
                                        r"concepts: .*\(rm results/sentiment\)"):
        stale.stale_outputs(results, results / "t.csv", [], folders=folders)
    for suite in (list(runs.values()), [runs["ppo"]]):  # the suite cut to the task, or to one run: concepts' runs
        with pytest.raises(DataError, match=re.escape(  # are no suite folder, and the rebuild would delete them
                "results/sentiment/ppo/seed0 holds the stage folder written at results/concepts/ppo/seed0 (its "
                "stage.json records that path), reached through results/sentiment, a link to concepts: "
                f"{tmp_path}/results/concepts/ppo/seed0 is that other run's folder, and a rebuild of "
                "results/sentiment/ppo/seed0 would delete that run; remove the link (rm results/sentiment) and run "
                "again, which rebuilds results/sentiment here")):
            stale.stale_outputs(results, results / "t.csv", [], folders=suite)
    (results / "sentiment").unlink()
    (tmp_path / "checkout").mkdir()
    monkeypatch.chdir(tmp_path / "checkout")
    other = _two_runs(Path("results"), "concepts")  # another checkout's finished runs, written there
    monkeypatch.chdir(tmp_path)
    os.replace(tmp_path / "checkout" / "results", tmp_path / "disk")  # its results/ on another disk, linked back
    (tmp_path / "checkout" / "results").symlink_to(tmp_path / "disk")
    (results / "sentiment").symlink_to(tmp_path / "checkout" / "results" / "concepts")
    with pytest.raises(DataError, match=re.escape(
            "results/sentiment/ppo/seed0 holds the stage folder written at results/concepts/ppo/seed0 (its stage.json "
            f"records that path), reached through results/sentiment, a link to {tmp_path}/checkout/results/concepts: "
            f"{tmp_path}/disk/concepts/ppo/seed0 is that other run's folder, and a rebuild of "
            "results/sentiment/ppo/seed0 would delete that run; remove the link (rm results/sentiment) and run again, "
            "which rebuilds results/sentiment here")):
        stale.stale_outputs(results, results / "t.csv", [], folders=list(runs.values()))
    assert set(other) == {"ppo", "supervised+ppo"}


def test_a_table_with_rows_the_suite_no_longer_names_is_stale(tmp_path, monkeypatch):
    """`tasks: [sentiment]` after a table of two tasks, with Snakemake's record of the aggregate job gone (``rm -rf
    .snakemake``, a project dvc repro built): "Nothing to be done", and the table kept the dropped task's rows. A row
    of a task or method the suite no longer names, or of more seeds than it names, makes the table stale."""
    from grueflow import stale
    from grueflow.io import atomic_dir, write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, table = Path("results"), Path("results/grue_table.csv")
    evals = {(task, seed): results / "eval" / task / "ppo" / f"seed{seed}" for task in ("sentiment", "concepts")
             for seed in (0, 1)}
    for folder in evals.values():
        with atomic_dir(folder) as tmp:
            (tmp / "metrics.json").write_text("{}\n")
            write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    table.write_text("task,method,n_seeds,reward\nconcepts,ppo,2,0.1\nsentiment,ppo,2,0.2\n")
    assert stale.stale_outputs(results, table, list(evals.values())) == {}
    sentiment = [folder for (task, _), folder in evals.items() if task == "sentiment"]
    assert stale.stale_outputs(results, table, sentiment, folders=list(evals.values())) == {
        table: "it holds rows the suite no longer names: concepts/ppo"}
    assert stale.stale_outputs(results, table, [evals["sentiment", 0], evals["concepts", 0]]) == {
        table: "it holds rows the suite no longer names: concepts/ppo (2 seeds), sentiment/ppo (2 seeds)"}
    assert stale.stale_outputs(results, table, []) == {}  # no suite given: nothing to compare with


def test_a_table_lacking_rows_the_suite_names_is_stale(tmp_path, monkeypatch):
    """A table built for one task (``--config tasks=[sentiment]``, or aggregate run by hand with ``--tasks
    sentiment``), then the suite's two tasks with Snakemake's record of the aggregate job gone (``rm -rf
    .snakemake``): every evaluation is on disk and older than the table, and Snakemake said "Nothing to be done"
    with concepts' rows missing. A (task, method) the suite names missing from the table, or fewer seeds than it
    names, makes the table stale, as do rows beyond the suite; a table of the suite's grid exactly is not."""
    from grueflow import stale
    from grueflow.io import atomic_dir, write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, table = Path("results"), Path("results/grue_table.csv")
    methods = ("zero_shot", "supervised", "ppo", "dpo", "supervised+dpo")  # a suite with a preference method
    evals = [results / "eval" / task / method / f"seed{seed}" for task in ("sentiment", "concepts")
             for method in methods for seed in (0, 1)]
    for folder in evals:
        with atomic_dir(folder) as tmp:
            (tmp / "metrics.json").write_text("{}\n")
            write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    rows = {task: "".join(f"{task},{method},2,0.1,0.01\n" for method in methods) for task in ("concepts", "sentiment")}
    head = "task,method,n_seeds,reward,reward_std\n"
    table.write_text(head + rows["concepts"] + rows["sentiment"])
    assert stale.stale_outputs(results, table, evals, folders=evals) == {}  # the suite's grid: kept
    table.write_text(head + rows["sentiment"])
    assert stale.stale_outputs(results, table, evals, folders=evals) == {
        table: "it lacks rows the suite names: concepts/zero_shot, concepts/supervised, concepts/ppo and more"}
    table.write_text(head + rows["concepts"] + rows["sentiment"].replace("sentiment,ppo,2,", "sentiment,ppo,1,"))
    assert stale.stale_outputs(results, table, evals, folders=evals) == {
        table: "it lacks rows the suite names: sentiment/ppo (1 of 2 seeds)"}
    concepts = [folder for folder in evals if folder.parts[2] == "concepts"]
    table.write_text(head + rows["sentiment"])  # built for sentiment, the suite cut to concepts
    assert stale.stale_outputs(results, table, concepts, folders=concepts) == {
        table: "it holds rows the suite no longer names: sentiment/zero_shot, sentiment/supervised, sentiment/ppo "
               "and more, and lacks rows the suite names: concepts/zero_shot, concepts/supervised, concepts/ppo "
               "and more"}
    table.write_text("")  # no header: not read as a table's rows (its digest against its record judges it)
    assert stale._rows_unlike(table, evals) == ([], [])


def test_a_table_built_from_other_evaluations_of_the_same_count_is_stale(tmp_path, monkeypatch):
    """A table built for seeds 0 and 1, then the suite's seeds 2 and 3 with every seed's evaluation on disk and
    Snakemake's record of the aggregate job gone (``rm -rf .snakemake``, a table dvc repro built): the rows' count
    is the same, and Snakemake said "Nothing to be done" with seeds 0 and 1's numbers. The aggregate stage records
    the evaluation folders it read, with the digest of each one's stage.json, beside the table; a table built from
    other folders than the suite names, or from one rebuilt since, is stale. A record the stage wrote before it
    recorded them is judged by its rows, as before."""
    from grueflow import stale
    from grueflow.io import files_record, write_json
    from tests.unit.test_grue import write_run

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, table = Path("results"), Path("results/grue_table.csv")
    siblings = {table: [Path("results/grue_table.md"), Path("results/grue_table.json")]}
    for method in ("zero_shot", "supervised"):
        for seed in range(4):
            write_run(results / "eval", "sentiment", method, seed)

    def evals(*seeds: int) -> list[Path]:
        return [results / "eval" / "sentiment" / method / f"seed{seed}" for method in ("zero_shot", "supervised")
                for seed in seeds]

    aggregate = [sys.executable, str(Path(__file__).resolve().parents[2] / "stages" / "aggregate.py"), "--eval-dir",
                 "results/eval", "--tasks", "sentiment", "--seeds", "0", "1", "--rl-starts", "zero_shot",
                 *(arg for key in ("csv", "md", "json") for arg in (f"--out-{key}", f"results/grue_table.{key}"))]
    subprocess.run(aggregate, check=True, capture_output=True)
    assert sorted(read_json(files_record(table))["built_from"]) == [str(folder) for folder in sorted(evals(0, 1))]
    assert stale.stale_outputs(results, table, evals(0, 1), siblings, folders=evals(0, 1)) == {}
    assert stale.stale_outputs(results, table, evals(2, 3), siblings, folders=evals(2, 3)) == {
        table: "it was built from seed0, seed1 of results/eval/sentiment/zero_shot (the suite names seed2, seed3); "
               "seed0, seed1 of results/eval/sentiment/supervised (the suite names seed2, seed3)"}
    swapped = [evals(0)[0], evals(2)[0], *evals(0, 1)[2:]]  # zero_shot's seed1 for its seed2
    assert stale.stale_outputs(results, table, swapped, siblings) == {
        table: "it was built from seed0, seed1 of results/eval/sentiment/zero_shot (the suite names seed0, seed2)"}
    shutil.rmtree(results / "eval" / "sentiment" / "supervised" / "seed1")  # an evaluation rebuilt by hand
    write_run(results / "eval", "sentiment", "supervised", 1, value=0.9)
    assert stale.stale_outputs(results, table, evals(0, 1), siblings) == {
        table: "its input results/eval/sentiment/supervised/seed1 changed since it was built"}
    line, = stale.mark_stale(results, table, evals(0, 1), siblings)  # stamped alone, as for a stage's input
    assert line == "grueflow: results/grue_table.csv is stale (its input results/eval/sentiment/supervised/seed1 " \
                   "changed since it was built); its job reruns"
    assert table.stat().st_mtime == 1 and not Path(".snakemake/grueflow-stale.json").exists()
    assert stale.edited_files(table, siblings[table]) == []  # the folders are no file the table was written with
    record = read_json(files_record(table))
    write_json(files_record(table), {path: digest for path, digest in record.items() if path != "built_from"})
    assert stale.stale_outputs(results, table, evals(2, 3), siblings) == {}  # an older record: the rows alone judge
    write_json(files_record(table), record)
    table.write_text(table.read_text().replace(",0.5,", ",0.6,"))  # the record no longer vouches for the table
    assert stale.stale_outputs(results, table, evals(2, 3), siblings) == {
        table: "it is not what its stage wrote (edited or replaced since)"}


def test_a_table_lacks_the_rows_of_evaluations_added_since_and_names_only_those_gone_as_gone(tmp_path, monkeypatch):
    """A seed added to the suite (``--config 'seeds=[0,1]'``) made the table "built from
    results/eval/sentiment/zero_shot/seed1, ... which no longer exists", though nothing was deleted: every evaluation
    the suite names that was not on disk was taken as gone. Gone are those the table's record names (or, in a record
    written before tables recorded them, those whose row the table holds with all the suite's seeds); the rest are
    rows it lacks."""
    from grueflow import stale
    from grueflow.io import atomic_files, files_record, record_digest
    from tests.unit.test_grue import write_run

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, table = Path("results"), Path("results/grue_table.csv")
    methods = ("zero_shot", "supervised")

    def evals(*seeds: int, task: str = "sentiment") -> list[Path]:
        return [results / "eval" / task / method / f"seed{seed}" for method in methods for seed in seeds]

    for folder in evals(0):
        write_run(results / "eval", "sentiment", folder.parts[-2], 0)
    with atomic_files([table], {folder: record_digest(folder) for folder in evals(0)}) as (tmp,):
        tmp.write_text("task,method,n_seeds,reward\n" + "".join(f"sentiment,{m},1,0.5\n" for m in methods))
    record = read_json(files_record(table))
    older = {path: digest for path, digest in record.items() if path != "built_from"}
    for written in (record, older):  # as recorded now, and before tables recorded what they were built from
        write_json(files_record(table), written)
        assert stale.stale_outputs(results, table, evals(0, 1)) == {
            table: "it lacks rows the suite names: sentiment/zero_shot (1 of 2 seeds), sentiment/supervised (1 of 2 "
                   "seeds)"}
        assert stale.stale_outputs(results, table, [*evals(0), *evals(0, task="concepts")]) == {
            table: "it lacks rows the suite names: concepts/zero_shot, concepts/supervised"}
    for written in (record, older):
        write_json(files_record(table), written)
        shutil.move(evals(0)[1], tmp_path / "aside")
        assert stale.stale_outputs(results, table, evals(0)) == {
            table: "it was built from results/eval/sentiment/supervised/seed0, which no longer exists"}
        shutil.move(evals(0)[0], tmp_path / "aside0")
        assert stale.stale_outputs(results, table, evals(0)) == {
            table: "it was built from results/eval/sentiment/zero_shot/seed0, results/eval/sentiment/supervised/"
                   "seed0, which no longer exist"}
        shutil.move(tmp_path / "aside", evals(0)[1])
        shutil.move(tmp_path / "aside0", evals(0)[0])


def test_dvcs_outputs_at_or_under_a_link_to_another_runs_folder_are_refused(tmp_path, monkeypatch):
    """DVC checks a cached stage's outs out through any link, the out's own folder included (``<seed0>/model`` with
    ``seed0`` a link), and runs no grueflow code first: its first stage refuses both layouts from the outs DVC
    writes. A folder moved elsewhere and linked back, or one with no record yet, is left to DVC."""
    from grueflow import stale

    monkeypatch.chdir(tmp_path)
    results = Path("results")
    runs = _two_runs(results)
    outs = [path for run in runs.values() for path in (run / "model", run / "stage.json")]
    stale.refuse_links(results, outs)
    os.replace(runs["ppo"], tmp_path / "ppo_seed0")
    runs["ppo"].symlink_to(tmp_path / "ppo_seed0")  # moved to another disk and linked back: its own record
    stale.refuse_links(results, outs)
    runs["ppo"].unlink()
    runs["ppo"].symlink_to("../supervised+ppo/seed0")
    assert stale.stale_outputs(results, results / "t.csv", [], folders=list(runs.values()))  # Snakemake: the link
    with pytest.raises(DataError, match=re.escape(  # is deleted and rebuilt; DVC writes through it
            "results/sentiment/ppo/seed0 holds the stage folder written at results/sentiment/supervised+ppo/seed0 "
            "(its stage.json records that path), reached through results/sentiment/ppo/seed0, a link to "
            "../supervised+ppo/seed0")):
        stale.refuse_links(results, outs)
    runs["ppo"].unlink()
    os.replace(tmp_path / "ppo_seed0", runs["ppo"])
    shutil.rmtree(results / "sentiment" / "supervised+ppo")
    (results / "sentiment" / "supervised+ppo").symlink_to("ppo")  # two suite folders one: refused before records
    with pytest.raises(DataError, match=r"results/sentiment/ppo/seed0 and results/sentiment/supervised\+ppo/seed0, "
                                        r"two stage folders of the suite, are one folder"):
        stale.refuse_links(results, outs)
    (results / "sentiment" / "supervised+ppo").unlink()
    stale.refuse_links(results, outs)  # a suite folder not there yet: nothing to refuse
    (results / "sentiment" / "supervised+ppo").symlink_to(tmp_path / "unmounted")
    unmounted = f"results/sentiment/supervised+ppo is a link to {tmp_path}/unmounted, which does not exist"
    with pytest.raises(DataError, match=re.escape(unmounted)):  # a disk not mounted: nothing DVC writes there
        stale.refuse_links(results, outs)


def test_a_link_to_nothing_at_or_above_a_suite_folder_is_refused_naming_it(tmp_path, monkeypatch):
    """``results/sentiment`` a link to a disk not mounted: the evaluations were said to be stale ("its job reruns"),
    their inputs being gone, and Snakemake, seeing nothing newer, ran nothing; the table kept their rows, on every
    run. A link that leads to nothing at ``results/``, above a suite folder, or at a folder a stage record names as
    an input (or the table aggregates) is refused naming it, before anything is marked; one at a suite folder that
    nothing was built from (made ahead, to a folder not made yet) is left for its stage to write through."""
    from grueflow import stale
    from grueflow.io import atomic_dir, write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, table, tokens = Path("results"), Path("results") / "t.csv", Path(".snakemake") / "grueflow-stale.json"
    runs = _two_runs(results)
    evaluation = results / "eval" / "sentiment" / "ppo" / "seed0"
    with atomic_dir(evaluation) as tmp:
        (tmp / "metrics.json").write_text("{}\n")
        write_stage_record(tmp, stage="evaluate", params={}, inputs={"model": runs["ppo"] / "model"}, wall_time_s=0.0)
    folders = [*runs.values(), evaluation]
    assert stale.stale_outputs(results, table, [evaluation], folders=folders) == {}
    os.replace(results / "sentiment", tmp_path / "aside")
    (results / "sentiment").symlink_to(tmp_path / "not_mounted" / "sentiment")
    for expected, suite in (([evaluation], folders), ([], list(runs.values())), ([], [evaluation])):
        with pytest.raises(DataError) as refused:  # above a suite folder; a folder a record names, under one
            stale.mark_stale(results, table, expected, tokens=tokens, folders=suite)
        assert str(refused.value) == (
            f"results/sentiment is a link to {tmp_path}/not_mounted/sentiment, which does not exist (a disk not "
            "mounted?): mount it, or remove the link (rm results/sentiment) to rebuild what it held here")
        assert not tokens.exists()
    other_task = [results / "concepts" / "datapool"]  # the suite cut to another task: its run is not held up, and
    assert stale.stale_outputs(results, table, [], folders=other_task) == {}  # no rerun is promised for the link's
    (results / "sentiment").unlink()
    os.replace(tmp_path / "aside", results / "sentiment")
    os.replace(results, tmp_path / "disk")
    results.symlink_to(tmp_path / "unmounted" / "results")  # results/ itself
    with pytest.raises(DataError, match=re.escape(
            f"results is a link to {tmp_path}/unmounted/results, which does not exist (a disk not mounted?): mount "
            "it, or remove the link (rm results) to rebuild what it held here")):
        stale.stale_outputs(results, table, [evaluation], folders=folders)
    with pytest.raises(DataError, match=r"^results is a link to"):  # named even where the suite names no folder
        stale.stale_outputs(results, table, [], folders=[])
    results.unlink()
    os.replace(tmp_path / "disk", results)
    shutil.rmtree(runs["ppo"])
    runs["ppo"].symlink_to(tmp_path / "not_mounted" / "seed0")  # the suite folder itself, read by the evaluation
    with pytest.raises(DataError, match=re.escape(
            f"results/sentiment/ppo/seed0 is a link to {tmp_path}/not_mounted/seed0, which does not exist (a disk not "
            "mounted?): mount it, or remove the link (rm results/sentiment/ppo/seed0) to rebuild what it held here")):
        stale.stale_outputs(results, table, [evaluation], folders=folders)
    shutil.rmtree(evaluation)
    assert stale.stale_outputs(results, table, [evaluation], folders=folders) == {}  # nothing built from it yet
    evaluation.symlink_to(tmp_path / "not_mounted" / "eval")
    assert stale.stale_outputs(results, table, [evaluation], folders=folders) == {}
    table.write_text("task,method\n")  # ... but the table aggregates it
    with pytest.raises(DataError, match=re.escape(
            f"results/eval/sentiment/ppo/seed0 is a link to {tmp_path}/not_mounted/eval, which does not exist")):
        stale.stale_outputs(results, table, [evaluation], folders=folders)


def test_a_stale_mark_in_a_checkout_made_with_hard_links_leaves_the_other_checkouts_times(tmp_path, monkeypatch):
    """A second checkout made with ``cp -al``: its stale check set the time of the ``.snakemake_timestamp`` both
    checkouts share (one file), on a dry run too, and the first checkout, untouched, rebuilt a finished evaluation
    for "Updated input files". A stamp that is a hard link (a table too, whose bytes are kept) is replaced by a
    copy of its own before its time is set, and so is one whose time is put back."""
    from grueflow import stale
    from grueflow.io import write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    monkeypatch.chdir(first)
    results, tokens, built = Path("results"), Path(".snakemake") / "grueflow-stale.json", 1_700_000_000 * 10 ** 9
    pools = [results / task / "datapool" for task in ("sentiment", "concepts")]
    Path("train.jsonl").write_text('{"prompt": "v1"}\n')
    for pool in pools:
        pool.mkdir(parents=True)
        (pool / "train.jsonl").write_text("{}\n")
        write_stage_record(pool, stage="prepare_datapool", params={}, inputs={"data": Path("train.jsonl")},
                           wall_time_s=0.0)
        (pool / stale.SNAKEMAKE_TIMESTAMP).touch()
        os.utime(pool / stale.SNAKEMAKE_TIMESTAMP, ns=(built, built))
    table = results / "t.csv"
    table.write_text("task,method\n")  # no record of its digests: stale
    os.utime(table, ns=(built, built))
    Path("v2.jsonl").write_text('{"prompt": "v2"}\n')
    os.replace("v2.jsonl", "train.jsonl")  # a dry run here saw the data edited: both datapools stamped
    assert len(stale.mark_stale(results, Path("none.csv"), [], tokens=tokens)) == 2
    Path("v1.jsonl").write_text('{"prompt": "v1"}\n')
    os.replace("v1.jsonl", "train.jsonl")  # put back; the next run here takes the stamps back
    shutil.copytree(first, second, symlinks=True, copy_function=os.link)  # cp -al
    monkeypatch.chdir(second)
    (pools[1] / "train.jsonl").unlink()  # concepts' datapool damaged here
    lines = stale.mark_stale(results, table, [], {table: []}, tokens=tokens)
    assert [line.split(" (")[0] for line in lines] == [
        "grueflow: results/concepts/datapool is stale", "grueflow: results/t.csv is stale"]
    sentiment, concepts = (pool / stale.SNAKEMAKE_TIMESTAMP for pool in pools)
    assert [os.lstat(path).st_mtime_ns for path in (sentiment, concepts, table)] == [built, 10 ** 9, 10 ** 9]
    assert [os.lstat(first / path).st_mtime_ns for path in (sentiment, concepts, table)] == [10 ** 9, 10 ** 9, built]
    assert [os.lstat(first / path).st_nlink for path in (sentiment, concepts, table)] == [1, 1, 1]
    assert table.read_text() == (first / table).read_text() == "task,method\n"


def test_snakemakes_marker_and_dvcs_symlinked_cache_leave_a_folders_digest_as_it_is(tmp_path, monkeypatch):
    """A datapool a Snakemake job wrote holds Snakemake's empty ``.snakemake_timestamp``; the same datapool ``dvc
    repro`` wrote does not. The marker entered every reader's recorded digest, so a dvc repro with the same params
    (or the marker deleted) made every reader "changed" and, once Snakemake's jobs noted what they wrote, the whole
    pipeline rerun. Digests leave the marker out; a record taken with it (before) still matches. With DVC's
    ``cache.type: symlink`` every file of an output is a link into the cache: such links were a person's files, left
    out of the digest, so every reader was stale and every folder copied out; a link is now judged as the file it
    names, unless it leads into a stage folder."""
    from grueflow import stale
    from grueflow.io import fingerprint, write_stage_record
    from grueflow.keep import unvouched

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, pool, model = _finished_datapool()
    (pool / ".snakemake_timestamp").touch()  # added by Snakemake after the job
    model.mkdir(parents=True)
    write_stage_record(model, stage="base_model", params={}, inputs={"datapool": pool}, wall_time_s=0.0)
    before = fingerprint(pool, markers=True)  # how a reader recorded it before markers were left out
    assert before != fingerprint(pool) and fingerprint(pool) == read_json(model / "stage.json")["inputs"][
        "datapool"]["sha256"]
    (pool / ".snakemake_timestamp").unlink()  # the same datapool as dvc repro writes it
    assert stale.stale_outputs(results, results / "t.csv", []) == {}
    (pool / ".snakemake_timestamp").touch()
    record = read_json(model / "stage.json")
    record["inputs"]["datapool"]["sha256"] = before
    del record["record_sha256"]  # written then, before records held a digest of themselves
    (model / "stage.json").write_text(json.dumps(record))
    assert stale.stale_outputs(results, results / "t.csv", []) == {}

    def rerun(prompt: str) -> None:  # the datapool's stage run again (in a folder of its own), then the marker
        (pool / ".snakemake_timestamp").unlink()
        (pool / "train.jsonl").write_text(f'{{"prompt": "{prompt}"}}\n')
        write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
        (pool / ".snakemake_timestamp").touch()

    rerun("b")  # a real change is seen either way
    assert stale.stale_outputs(results, results / "t.csv", []) == {
        model: f"its input {pool} changed since it was built"}
    rerun("a")
    cache = Path(".dvc") / "cache" / "files" / "md5"  # DVC's cache with cache.type symlink
    cache.mkdir(parents=True)
    for name, digest in (("train.jsonl", "3f2a"), ("stage.json", "9c1e")):  # cache files are named by digest
        os.replace(pool / name, cache / digest)
        (pool / name).symlink_to(tmp_path / cache / digest)
    assert unvouched(pool) == [] and stale.stale_outputs(results, results / "t.csv", []) == {}
    (pool / "train.jsonl").unlink()  # a link into another stage folder is never the stage's own
    (pool / "train.jsonl").symlink_to(tmp_path / model / "stage.json")
    assert unvouched(pool) == [pool / "train.jsonl"]


def test_a_damaged_stage_folder_under_a_linked_results_folder_is_stale(tmp_path, monkeypatch):
    """``results/eval`` moved to another disk and linked back (a usual way to move the big part of results/): a
    deleted ``predictions.jsonl`` there was never found, and the table kept the damaged run's row. The folders
    under it are checked as any other; their records name the paths as written, through the link, so the layout
    itself is in order."""
    from grueflow import stale
    from grueflow.io import atomic_dir, write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    evaluation = results / "eval" / "sentiment" / "ppo" / "seed0"
    with atomic_dir(evaluation) as tmp:
        (tmp / "predictions.jsonl").write_text('{"generated": "a"}\n')
        (tmp / "metrics.json").write_text("{}\n")
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    (tmp_path / "disk").mkdir()
    (results / "eval").rename(tmp_path / "disk" / "eval")
    (results / "eval").symlink_to(tmp_path / "disk" / "eval")
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=[evaluation]) == {}
    (evaluation / "predictions.jsonl").unlink()
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=[evaluation]) == {
        evaluation: "damaged: predictions.jsonl is missing"}


def test_a_link_in_place_of_what_a_stage_wrote_is_damage(tmp_path, monkeypatch):
    """ppo's ``model/`` replaced by a link to supervised+ppo's, every file the same size: the size check read
    through the link and passed, the run only copied the link out, and supervised+ppo's model was scored under
    ppo's row. No stage writes a link in its folder: one in place of a file or folder its manifest lists (or on the
    way to one) into another stage folder is damage, which the stale check rebuilds and a reader refuses. A link
    elsewhere (DVC's symlinked cache) is checked by content, and a link of the user's to a model folder, outside any
    stage folder, is still checked."""
    from grueflow import stale
    from grueflow.io import MissingDataError, check_stage_output

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    runs = _two_runs(results)
    ppo = runs["ppo"]
    Path("mine").symlink_to(ppo / "model")
    check_stage_output("mine")
    shutil.rmtree(ppo / "model")
    (ppo / "model").symlink_to("../../supervised+ppo/seed0/model")
    damaged = rf"{tmp_path / ppo} is damaged: model is a link to \.\./\.\./supervised\+ppo/seed0/model, not what its " \
              r"stage wrote; delete the folder and rerun the pipeline"
    for path in (ppo, ppo / "model", ppo / "model" / "config.json"):
        with pytest.raises(MissingDataError, match=damaged):
            check_stage_output(path, deep=False)
    assert stale.stale_outputs(results, results / "t.csv", [], folders=list(runs.values())) == {
        ppo: "damaged: model is a link to ../../supervised+ppo/seed0/model, not what its stage wrote"}
    (ppo / "model").unlink()
    shutil.copytree(runs["supervised+ppo"] / "model", ppo / "model")
    check_stage_output(ppo, deep=False)  # the same sizes: passes the size check
    (ppo / "model" / "model.safetensors").unlink()
    (ppo / "model" / "model.safetensors").symlink_to(tmp_path / runs["supervised+ppo"] / "model" / "model.safetensors")
    with pytest.raises(MissingDataError, match=r"is damaged: model/model\.safetensors is a link to "):
        check_stage_output("mine")  # found through the user's link, followed
    (ppo / "model" / "model.safetensors").unlink()
    Path("cache").mkdir()  # DVC's cache with cache.type symlink: every file of an output a link into it
    (Path("cache") / "a1b2").write_bytes(b"ppo".ljust(16, b"!"))  # what _two_runs wrote for ppo
    (ppo / "model" / "model.safetensors").symlink_to(tmp_path / "cache" / "a1b2")
    check_stage_output(ppo)  # its content is what the stage wrote
    (Path("cache") / "a1b2").write_bytes(b"x")
    with pytest.raises(MissingDataError, match=r"is damaged: model/model\.safetensors has 1 bytes where its stage "):
        check_stage_output("mine")


def test_a_model_folder_moved_elsewhere_and_linked_back_is_its_stages_and_never_copied_through(tmp_path,
                                                                                                monkeypatch):
    """ppo's ``model/`` moved to another disk and linked back: every run said the folder held what no stage record
    vouches for (model) and kept only the link as its "copy"; once another run's weights of the same size were put
    in the linked folder, every run stopped: the copy recreated the link, then copied each file through it onto
    itself ("... are the same file", with Python's reprs of a temporary path). A link to a folder is vouched for by
    the files under it; where those are damaged, the rebuild deletes the link alone, never what it names, so the
    link is kept as the link, and the line says where the files are."""
    from grueflow import stale
    from grueflow.keep import REPLACED

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    runs = _two_runs(results)
    ppo, disk2 = runs["ppo"], tmp_path / "disk2" / "model"
    disk2.parent.mkdir()
    os.rename(ppo / "model", disk2)
    (ppo / "model").symlink_to(disk2)
    assert stale.mark_stale(results, results / "t.csv", [], tokens=tokens, folders=list(runs.values())) == []
    assert not REPLACED.exists()
    shutil.copyfile(runs["supervised+ppo"] / "model" / "model.safetensors", disk2 / "model.safetensors")
    written = (ppo / "stage.json").stat().st_mtime
    os.utime(disk2 / "model.safetensors", (written + 5, written + 5))  # put there after the stage's record
    line, = stale.mark_stale(results, results / "t.csv", [], tokens=tokens, folders=list(runs.values()))
    copy, = REPLACED.glob("results/sentiment/ppo/seed0@*")
    assert line == (f"grueflow: {ppo} is stale (damaged: model/model.safetensors does not match the digest its stage "
                    f"recorded); its job reruns; a copy of what no stage record vouches for (model) is kept in {copy}; "
                    f"model is a link to {disk2}, which a rerun leaves as it is (it deletes the link alone; the copy "
                    f"holds the link)")
    assert os.readlink(copy / "model") == str(disk2) and sorted(p.name for p in copy.iterdir()) == ["model"]
    assert (disk2 / "model.safetensors").read_bytes() == b"supervised+ppo!!"
    assert stale.mark_stale(results, results / "t.csv", [], tokens=tokens, folders=list(runs.values())) == [line]


def test_an_output_a_run_cannot_delete_is_named_before_any_job(tmp_path, monkeypatch):
    """A file made immutable (``chattr +i``) in an evaluation whose params then changed: Snakemake ran the other
    jobs, then stopped in its 40-line PermissionError traceback as it deleted that folder to rerun it. The outputs
    of the jobs about to run are looked at first (from the Snakefile's onstart), and the first that cannot be deleted
    is named in one line, with what to run."""
    from grueflow.stale import refuse_undeletable

    monkeypatch.chdir(tmp_path)
    out = Path("results/eval/sentiment/ppo/seed0")
    (out / "model").mkdir(parents=True)
    (out / "predictions.jsonl").write_text("{}\n")
    (out / "model" / "config.json").write_text("{}\n")
    (out / "model" / "config.json").chmod(0o444)  # read-only in a writable folder: deletable
    Path("elsewhere").mkdir()
    (out / "linked").symlink_to(tmp_path / "elsewhere")
    refuse_undeletable([out, Path("results/grue_table.csv")])  # as written, and a path not there
    if os.geteuid() == 0:  # root writes any folder: as a user meets a read-only one
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: access(path, mode) and not (
            Path(path) == out / "model" and mode & os.W_OK))
    (out / "model").chmod(0o555)
    try:
        with pytest.raises(DataError) as caught:
            refuse_undeletable([out])
    finally:
        (out / "model").chmod(0o755)
    assert str(caught.value) == (f"{out} is to be rebuilt, which deletes it first, but nothing can be deleted from "
                                 f"the read-only folder {out / 'model'}; run 'chmod u+wx {out / 'model'}' as its "
                                 f"owner, and run again")
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    if subprocess.run(["chattr", "+i", str(out / "predictions.jsonl")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a file system with attributes")
    try:
        with pytest.raises(DataError) as caught:
            refuse_undeletable([out])
    finally:
        subprocess.run(["chattr", "-i", str(out / "predictions.jsonl")], check=True)
    assert str(caught.value) == (f"{out} is to be rebuilt, which deletes it first, but the immutable file "
                                 f"{out / 'predictions.jsonl'} cannot be deleted; run 'chattr -i "
                                 f"{out / 'predictions.jsonl'}' as root, and run again")


def test_an_append_only_output_is_named_before_any_job_even_as_root(tmp_path, monkeypatch):
    """``chattr +a`` on a file (or a folder) of an evaluation whose params then changed: to root (containers) the
    file is writable, so its attributes were never read, and Snakemake ran the other jobs, then stopped in its
    PermissionError traceback as it deleted the folder. Attributes are read whoever runs; a job's log file, which
    Snakemake deletes too, is passed as an output (the Snakefile gives each job's outputs and logs)."""
    from grueflow.stale import refuse_undeletable

    monkeypatch.chdir(tmp_path)
    out, log = Path("results/eval/sentiment/ppo/seed0"), Path("results/logs/eval/sentiment/ppo/seed0.log")
    (out / "notes").mkdir(parents=True)
    (out / "predictions.jsonl").write_text("{}\n")
    log.parent.mkdir(parents=True)
    log.write_text("started\n")
    if subprocess.run(["chattr", "+a", str(out / "predictions.jsonl")], capture_output=True).returncode != 0:
        pytest.skip("chattr +a needs root and a file system with attributes")
    try:
        with pytest.raises(DataError) as caught:
            refuse_undeletable([out, log])
    finally:
        subprocess.run(["chattr", "-a", str(out / "predictions.jsonl")], check=True)
    assert str(caught.value) == (f"{out} is to be rebuilt, which deletes it first, but the append-only file "
                                 f"{out / 'predictions.jsonl'} cannot be deleted; run 'chattr -a "
                                 f"{out / 'predictions.jsonl'}' as root, and run again")
    subprocess.run(["chattr", "+a", str(out / "notes")], check=True)
    try:
        with pytest.raises(DataError) as caught:
            refuse_undeletable([out])
    finally:
        subprocess.run(["chattr", "-a", str(out / "notes")], check=True)
    assert str(caught.value) == (f"{out} is to be rebuilt, which deletes it first, but nothing can be deleted from "
                                 f"the append-only folder {out / 'notes'}; run 'chattr -a {out / 'notes'}' as root, "
                                 f"and run again")
    subprocess.run(["chattr", "+i", str(log)], check=True)
    try:
        with pytest.raises(DataError) as caught:
            refuse_undeletable([out, log])
    finally:
        subprocess.run(["chattr", "-i", str(log)], check=True)
    assert str(caught.value) == (f"{log} is to be rebuilt, which deletes it first, but the immutable file {log} "
                                 f"cannot be deleted; run 'chattr -i {log}' as root, and run again")
    refuse_undeletable([out, log])
    snakefile = (Path(__file__).parents[2] / "Snakefile").read_text()
    assert "for out in (*job.output, *job.log)])" in snakefile  # the rerun jobs' logs are looked at


def test_an_output_snakemake_did_not_write_last_is_stale_itself(tmp_path, monkeypatch):
    """A stage folder, or the GRUE table with its record, put back from a backup after its params changed and its
    stage reran, or written since by the stage run by hand with other settings (or by dvc repro): whole, consistent
    with itself and at its own path, it passed every check, and Snakemake, whose record of the params is its last
    job's, said "Nothing to be done". Each Snakemake job notes the record it wrote at a path; an output whose record
    is another is stale itself. What no note covers (written outside the project, or by no Snakemake job) is
    judged as before."""
    import shutil

    from grueflow import stale
    from grueflow.io import atomic_dir, atomic_files, files_record, write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)  # Snakemake runs its jobs in the project, where they note what they wrote
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")  # as the Snakefile sets it for its jobs
    results, table = Path("results"), Path("results/grue_table.csv")
    run = results / "sentiment" / "ppo" / "seed0"

    def write(lr: float) -> None:
        with atomic_dir(run) as tmp:
            (tmp / "model").mkdir()
            (tmp / "model" / "model.safetensors").write_bytes(str(lr).encode())
            write_stage_record(tmp, stage="rl_finetune", params={"lr": lr}, inputs={}, wall_time_s=0.0)
        with atomic_files([table]) as (csv,):
            csv.write_text(f"task,method,lr\nsentiment,ppo,{lr}\n")

    def check() -> dict:
        return stale.stale_outputs(results, table, [run], {table: []}, folders=[run])

    why = "is not the one its Snakemake job last wrote there (an older copy put back, a stage run by hand or by dvc " \
          "repro)"
    write(1e-5)
    shutil.copytree(results, "backup", copy_function=shutil.copy2)  # cp -a: times and the hidden record kept
    write(2e-5)  # the params changed, and both jobs reran
    assert sorted(p.name for p in Path(".snakemake/grueflow-written").iterdir()) == sorted(
        f"{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.json" for path in (run, table))
    assert check() == {}
    shutil.rmtree(results)
    shutil.copytree("backup", results, copy_function=shutil.copy2)
    assert check() == {run: f"its stage.json {why}",
                       table: f"results/.grue_table.csv.record.json, the digests of what its stage wrote, {why}"}
    assert files_record(table).is_file()
    write(2e-5)  # rebuilt: the same bytes as the last job's, and noted again
    assert check() == {}
    monkeypatch.delenv("GRUEFLOW_ENGINE")
    write(3e-5)  # the stages run by hand (or by dvc repro) with other settings: noted nowhere
    assert set(check()) == {run, table}
    shutil.rmtree(".snakemake")  # no notes (the folder removed, as for a stuck lock): nothing known, as before
    assert check() == {}
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    with atomic_dir(tmp_path.parent / "elsewhere" / "seed0") as tmp:  # outside the project: noted nowhere
        write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    assert not Path(".snakemake").exists()


def test_a_folder_no_snakemake_job_wrote_is_stale_when_a_param_its_stage_read_changed(tmp_path, monkeypatch):
    """A project built by dvc repro (or with .snakemake removed): Snakemake keeps no record of the params its folders
    were built with, and no job note exists, so a learning rate edited after that was "Nothing to be done" and the
    table kept the old run's numbers. Each stage records digests of the params it read (its task file's keys, its
    method file, the suite values it is given); such a folder whose digests differ from those of the params its rule
    reads now is stale itself, naming the file; so is one a Snakemake job wrote (``snakemake --touch`` rewrites
    Snakemake's record of its params without running it), and one recorded before stages wrote the digests is judged
    as before."""
    from argparse import Namespace

    from grueflow import stale
    from grueflow.io import atomic_dir
    from grueflow.pipeline import PARAMS_DIGEST, ParamsSource

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRUEFLOW_ENGINE", raising=False)  # as dvc repro runs the stages
    task, method = Path("params/tasks/sentiment.yaml"), Path("params/methods/ppo.yaml")
    method.parent.mkdir(parents=True)
    task.parent.mkdir(parents=True)
    task.write_text("reward:\n  components: [{metric: diversity, score: length, weight: -0.05}]\nlengths: {prompt: 8}\n"
                    "datapool: {id: imdb}\n")
    method.write_text("learning_rate: 0.0005\nbatch_size: 4\n")
    results = Path("results")
    run, pool = results / "sentiment" / "ppo" / "seed0", results / "sentiment" / "datapool"
    given = Namespace(task_file=task, method_file=method, precision="fp32")

    def write(folder: Path, name: str, digest: bool = True) -> None:
        with atomic_dir(folder) as tmp:
            (tmp / "weights.bin").write_bytes(b"w")
            stage.finish(tmp, name, {}, {}, 0.0, stage.params_digest(name, given) if digest else None)

    def check(precision: str = "fp32") -> dict:
        source = ParamsSource("rl_finetune", str(task), str(method), {"precision": precision})
        return stale.stale_outputs(results, Path("results/grue_table.csv"), [], folders=[run, pool],
                                   params={run: source, pool: ParamsSource("prepare_datapool", str(task))})

    write(run, "rl_finetune")
    write(pool, "prepare_datapool")
    recorded = read_json(run / "stage.json")[PARAMS_DIGEST]
    assert sorted(recorded) == ["method", "suite", "task"]
    assert sorted(read_json(pool / "stage.json")[PARAMS_DIGEST]) == ["task"]
    write(run, "rl_finetune")  # the same params: the same record, byte for byte (DVC's hash of it stays)
    assert read_json(run / "stage.json")[PARAMS_DIGEST] == recorded
    assert check() == {}
    why = "and no Snakemake job of this checkout wrote it (built by dvc repro, or .snakemake removed)"
    method.write_text("learning_rate: 0.05\nbatch_size: 4\n")
    built = run.stat().st_mtime_ns

    def mark() -> list[str]:
        source = ParamsSource("rl_finetune", str(task), str(method), {"precision": "fp32"})
        return stale.mark_stale(results, Path("results/grue_table.csv"), [], folders=[run, pool], params={run: source})

    assert mark() == [f"grueflow: {run} is stale (its params changed since it was built (params/methods/ppo.yaml), "
                      f"{why}); its job reruns"]
    assert run.stat().st_mtime == 1  # older than every input: it reruns (Snakemake has no params of it to compare)
    method.write_text("batch_size: 4\nlearning_rate: 0.0005  # put back, in another order\n")
    assert check() == {}
    assert mark() == [] and run.stat().st_mtime_ns == built  # the stamp taken back: nothing reruns
    assert check("bf16") == {run: f"its params changed since it was built (the suite's precision), {why}"}
    task.write_text(task.read_text().replace("weight: -0.05", "weight: -0.1"))  # the RL stage reads the reward
    assert check() == {run: f"its params changed since it was built (params/tasks/sentiment.yaml), {why}"}
    task.write_text(task.read_text().replace("weight: -0.1", "weight: -0.05").replace("{id: imdb}", "{id: yelp}"))
    assert check() == {pool: f"its params changed since it was built (params/tasks/sentiment.yaml), {why}"}
    write(pool, "prepare_datapool", digest=False)  # recorded before stages wrote the digests: as before
    task.write_text(task.read_text().replace("{id: yelp}", "{id: imdb}"))
    assert check() == {}
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")  # a Snakemake job wrote it, and Snakemake holds its record
    write(run, "rl_finetune")
    record = snakemake_metadata(Path("."), run)
    assert record == Path(".snakemake/metadata/cmVzdWx0cy9zZW50aW1lbnQvcHBvL3NlZWQw")  # as Snakemake names it
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    assert check() == {}
    method.write_text("learning_rate: 0.5\nbatch_size: 4\n")  # a record --touch rewrote holds these params
    assert check() == {run: "its params changed since it was built (params/methods/ppo.yaml)"}
    record.unlink()  # snakemake --cleanup-metadata, or a run with --drop-metadata: nothing compares its params
    assert check() == {run: "its params changed since it was built (params/methods/ppo.yaml), and Snakemake holds "
                            "no record of the job that wrote it (--drop-metadata, --cleanup-metadata)"}
    long = Path("results/" + "x" * 300)
    assert [len(part) for part in snakemake_metadata(Path("."), long).relative_to(".snakemake/metadata").parts] == \
        [255, 158] and snakemake_metadata(Path("."), long).parts[2].startswith("@")  # a name cut as Snakemake cuts it


def test_a_snakemake_jobs_folder_stale_for_its_params_gets_a_token_put_back_once_they_are_as_built(tmp_path,
                                                                                                     monkeypatch):
    """``snakemake --touch`` after a param edit rewrote Snakemake's record of each job's params without running it,
    and the stale check trusted that record: the old params' numbers stayed current for good. The folder's own
    record is compared now; a stamp alone reruns no job whose inputs are all small files whose checksums Snakemake
    recorded (a datapool), so the folder gets a token, which Snakemake's params trigger reads. Once the params are
    as built again (a dry run saw an edit, then it was put back), the token before is put back: nothing reruns;
    once the job was rebuilt with the token, the token stays: nothing reruns twice."""
    from argparse import Namespace

    from grueflow import stale
    from grueflow.io import atomic_dir
    from grueflow.pipeline import ParamsSource

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    task = Path("params/tasks/sentiment.yaml")
    task.parent.mkdir(parents=True)
    task.write_text("datapool: {id: imdb}\nlengths: {prompt: 8}\n")
    results = Path("results")
    pool = results / "sentiment" / "datapool"
    source = ParamsSource("prepare_datapool", str(task))

    def build() -> None:
        with atomic_dir(pool) as tmp:
            (tmp / "train.jsonl").write_bytes(b"{}\n")
            stage.finish(tmp, "prepare_datapool", {}, {}, 0.0,
                         stage.params_digest("prepare_datapool", Namespace(task_file=task)))
        snakemake_metadata(Path("."), pool).parent.mkdir(parents=True, exist_ok=True)
        snakemake_metadata(Path("."), pool).write_text("{}")  # Snakemake's record of the job

    def mark() -> list[str]:
        return stale.mark_stale(results, results / "grue_table.csv", [], folders=[pool], params={pool: source})

    def token() -> str:
        return stale.stale_token([pool])

    build()
    assert mark() == [] and token() == ""
    task.write_text("datapool: {id: yelp}\nlengths: {prompt: 8}\n")  # then snakemake --touch, or a dry run
    assert mark() == [f"grueflow: {pool} is stale (its params changed since it was built "
                      f"(params/tasks/sentiment.yaml)); its job reruns"]
    marked = token()
    assert marked.startswith(f"{pool}=")  # a new params trigger: the job reruns, whatever Snakemake's record says
    task.write_text("datapool: {id: imdb}\nlengths: {prompt: 8}\n")  # put back before any job ran
    assert mark() == [] and token() == ""  # the token Snakemake recorded: nothing reruns
    task.write_text("datapool: {id: yelp}\nlengths: {prompt: 8}\n")
    assert mark() != [] and token() != marked
    ran = token()  # the run: the job reads this token, and Snakemake records it
    build()
    assert mark() == [] and token() == ran  # rebuilt with it: it stays
    task.write_text("datapool: {id: imdb}\nlengths: {prompt: 8}\n")
    assert mark() != [] and token() not in ("", ran)
    build()  # the run
    task.write_text("datapool: {id: yelp}\nlengths: {prompt: 8}\n")  # edited again before any other run
    assert mark() != []
    again = token()
    build()  # the run: its record is an earlier build's byte for byte, yet rebuilt since the edit was first seen
    assert mark() == [] and token() == again


def test_a_touch_over_a_folder_built_with_other_params_is_refused_naming_it(tmp_path, monkeypatch):
    """``snakemake --touch`` after a param edit made the old results current with no word. A run that is to touch a
    stage folder built with other params than now is refused, naming the folder and the file; one that touches
    folders only code changed for passes (what --touch is for)."""
    from argparse import Namespace

    from grueflow import stale
    from grueflow.io import atomic_dir
    from grueflow.pipeline import ParamsSource

    monkeypatch.chdir(tmp_path)
    task, method = Path("params/tasks/sentiment.yaml"), Path("params/methods/ppo.yaml")
    for path, text in ((task, "datapool: {id: imdb}\nlengths: {prompt: 8}\n"), (method, "kl: {coef: 0.05}\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    pool, run = Path("results/sentiment/datapool"), Path("results/sentiment/ppo/seed0")
    given = Namespace(task_file=task, method_file=method, precision="fp32")
    for folder, name in ((pool, "prepare_datapool"), (run, "rl_finetune")):
        with atomic_dir(folder) as tmp:
            stage.finish(tmp, name, {}, {}, 0.0, stage.params_digest(name, given))
    params = {pool: ParamsSource("prepare_datapool", str(task)),
              run: ParamsSource("rl_finetune", str(task), str(method), {"precision": "fp32"})}
    touched = [pool, run, Path("results/grue_table.csv")]
    stale.refuse_touch(touched, params)  # a code edit: the params are as built
    method.write_text("kl: {coef: 0.5}\n")
    with pytest.raises(DataError) as refused:
        stale.refuse_touch(touched, params)
    assert str(refused.value) == (
        "--touch would mark 1 stage folder built with other params than now as up to date: results/sentiment/ppo/seed0 "
        "(params/methods/ppo.yaml); their results, and what reads them, would pass for the new params'. Run without "
        "--touch to rebuild them (--touch is for code edits that change no result), or put the params back as they "
        "were")
    stale.refuse_touch([pool], params)  # a touch of what the edit does not reach


def test_a_touch_over_a_folder_built_from_other_data_is_refused_naming_it(tmp_path, monkeypatch):
    """``snakemake --touch`` after an edit of a datapool's local data was accepted: it recorded the new data's
    content digest as the job's param without running it, and the datapool and table kept the old data's. A run that
    is to touch a stage folder whose inputs from outside results/ changed or are gone since it was built is refused,
    naming the folder and the files, as for params; one whose data is as recorded passes."""
    from argparse import Namespace

    from grueflow import stale
    from grueflow.io import atomic_dir
    from grueflow.pipeline import ParamsSource

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    task = Path("params/tasks/sentiment.yaml")
    task.parent.mkdir(parents=True)
    task.write_text("datapool: {id: custom}\nlengths: {prompt: 8}\n")
    data = [Path("data/plain/train.jsonl"), Path("data/plain/test.jsonl")]
    data[0].parent.mkdir(parents=True)
    for path in data:
        path.write_text('{"prompt": "a bad film", "references": ["bad"]}\n')
    pool = Path("results/sentiment/datapool")
    with atomic_dir(pool) as tmp:
        (tmp / "test.jsonl").write_text("{}\n")
        stage.finish(tmp, "prepare_datapool", {}, {str(path): path for path in data}, 0.0,
                     stage.params_digest("prepare_datapool", Namespace(task_file=task)))
    params = {pool: ParamsSource("prepare_datapool", str(task))}
    touched = [pool, Path("results/grue_table.csv")]
    stale.refuse_touch(touched, params)  # a code edit: the data are as built
    data[1].write_text('{"prompt": "an awful film", "references": ["bad"]}\n')
    with pytest.raises(DataError) as refused:
        stale.refuse_touch(touched, params)
    assert str(refused.value) == (
        "--touch would mark 1 stage folder built from other data than now as up to date: results/sentiment/datapool "
        "(data/plain/test.jsonl changed since it was built); their results, and what reads them, would pass for the "
        "new data's. Run without --touch to rebuild them (--touch is for code edits that change no result), or put "
        "the data back as it was")
    data[0].unlink()
    with pytest.raises(DataError, match=r"results/sentiment/datapool \(data/plain/test.jsonl changed since it was "
                                        r"built, data/plain/train.jsonl no longer exists\)"):
        stale.refuse_touch(touched, params)
    task.write_text("datapool: {id: custom, path: json}\nlengths: {prompt: 8}\n")  # params and data: both named
    with pytest.raises(DataError, match=r"^--touch would mark 1 stage folder built with other params than now .* "
                                        r"\(params/tasks/sentiment.yaml\);.* as they were --touch would mark 1 "
                                        r"stage folder built from other data than now"):
        stale.refuse_touch(touched, params)
    stale.refuse_touch([Path("results/grue_table.csv")], params)  # a touch of what the edit does not reach


def test_a_snakemake_jobs_folder_whose_data_changed_gets_a_token_put_back_once_it_is_as_built(tmp_path, monkeypatch):
    """After a datapool's local data was edited and ``snakemake --touch`` recorded the new data's digest as the job's
    param (and the data's checksums), every run said the datapool "is stale ...; its job reruns" and then "Nothing to
    be done": the stamp alone reruns no job whose inputs are all small files whose checksums Snakemake holds. Such a
    folder gets a token, new on each run while it stays stale, which Snakemake's params trigger reads; once the data
    are as built again (a dry run saw an edit, then it was put back), the token before is put back: nothing reruns;
    once the job was rebuilt, the token stays."""
    from argparse import Namespace

    from grueflow import stale
    from grueflow.io import atomic_dir
    from grueflow.pipeline import ParamsSource

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    task = Path("params/tasks/sentiment.yaml")
    task.parent.mkdir(parents=True)
    task.write_text("datapool: {id: custom}\nlengths: {prompt: 8}\n")
    data = Path("data/plain/test.jsonl")
    data.parent.mkdir(parents=True)
    data.write_text('{"prompt": "a bad film"}\n')
    results = Path("results")
    pool = results / "sentiment" / "datapool"
    source = ParamsSource("prepare_datapool", str(task))

    def build() -> None:
        with atomic_dir(pool) as tmp:
            (tmp / "test.jsonl").write_bytes(data.read_bytes())
            stage.finish(tmp, "prepare_datapool", {}, {str(data): data}, 0.0,
                         stage.params_digest("prepare_datapool", Namespace(task_file=task)))
        snakemake_metadata(Path("."), pool).parent.mkdir(parents=True, exist_ok=True)
        snakemake_metadata(Path("."), pool).write_text("{}")  # Snakemake's record of the job

    def mark() -> list[str]:
        return stale.mark_stale(results, results / "grue_table.csv", [], folders=[pool], params={pool: source})

    def token() -> str:
        return stale.stale_token([pool])

    build()
    assert mark() == [] and token() == ""
    data.write_text('{"prompt": "an awful film"}\n')  # then snakemake --touch (with --no-hooks), or a dry run
    assert mark() == [f"grueflow: {pool} is stale (its input {data} changed since it was built); its job reruns"]
    marked = token()
    assert marked.startswith(f"{pool}=")  # a new params trigger: the job reruns, whatever Snakemake's record says
    assert mark() != [] and token() not in ("", marked)  # a run after a touch recorded that token: a new one
    data.write_text('{"prompt": "a bad film"}\n')  # put back before any job ran
    assert mark() == [] and token() == ""  # the token Snakemake recorded: nothing reruns
    data.write_text('{"prompt": "an awful film"}\n')
    assert mark() != [] and token() != marked
    ran = token()  # the run: the job reads this token, and Snakemake records it
    build()
    assert mark() == [] and token() == ran  # rebuilt with it: it stays
    snakemake_metadata(Path("."), pool).unlink()  # no record of the job (dvc repro, --drop-metadata): the stamp reruns
    data.write_text('{"prompt": "a bad film"}\n')
    assert mark() != [] and token() == ran


def test_snakemakes_records_hard_linked_with_another_checkouts_are_made_this_checkouts_own(tmp_path, monkeypatch):
    """A checkout copied with ``cp -al`` shares Snakemake's records of its jobs (one inode), which Snakemake rewrites
    in place: a run in one checkout changed the params the other compares with, and the other said "Nothing to be
    done" for an edit its folders were never built with. The stale check makes each record this checkout's own."""
    from grueflow import stale

    monkeypatch.setattr(stale, "_KNOWN", {})
    first, second = tmp_path / "first", tmp_path / "second"
    record = first / ".snakemake" / "metadata" / "cmVzdWx0cy9h"
    record.parent.mkdir(parents=True)
    record.write_text('{"params": ["0.0005"]}')
    (second / ".snakemake" / "metadata").mkdir(parents=True)
    os.link(record, second / ".snakemake" / "metadata" / "cmVzdWx0cy9h")
    (second / "results").mkdir()
    monkeypatch.chdir(second)
    assert stale.mark_stale(Path("results"), Path("results/grue_table.csv"), [], tokens=Path(".snakemake/t.json")) \
        == []
    mine = second / ".snakemake" / "metadata" / "cmVzdWx0cy9h"
    assert mine.stat().st_nlink == 1 and record.stat().st_nlink == 1 and mine.read_text() == record.read_text()
    with open(mine, "w") as rewritten:  # as Snakemake writes a record
        rewritten.write('{"params": ["0.05"]}')
    assert record.read_text() == '{"params": ["0.0005"]}'


def test_a_snakemake_job_refuses_params_edited_after_its_run_planned_it(tmp_path, monkeypatch):
    """A reward weight edited while `snakemake` ran: the jobs that started after the edit read the edited file,
    Snakemake recorded the params it planned with, and once the file was put back nothing reran them. A real run
    writes the digest of each folder as it planned it; its jobs compare theirs with it before any work."""
    from argparse import Namespace

    from grueflow.config import ConfigError
    from grueflow.io import PLAN, PLANNED, write_planned
    from grueflow.pipeline import ParamsSource, params_digest

    monkeypatch.chdir(tmp_path)
    task, method = Path("params/tasks/sentiment.yaml"), Path("params/methods/ppo.yaml")
    task.parent.mkdir(parents=True)
    method.parent.mkdir(parents=True)
    task.write_text("reward:\n  components: [{metric: lexicon_sentiment, weight: 2.0}]\nlengths: {prompt: 8}\n")
    method.write_text("learning_rate: 0.0005\n")
    out = "results/sentiment/ppo/seed0"
    given = Namespace(task_file=task, method_file=method, precision="fp32", out=Path(out))
    source = ParamsSource("rl_finetune", str(task), str(method), {"precision": "fp32"})
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    monkeypatch.setenv(PLAN, write_planned({Path(out): params_digest(source)}))
    assert stage.params_digest("rl_finetune", given) == params_digest(source)  # as planned: it runs
    task.write_text(task.read_text().replace("weight: 2.0", "weight: 3.0"))  # edited while the run goes on
    with pytest.raises(ConfigError) as refused:
        stage.params_digest("rl_finetune", given)
    assert str(refused.value) == (
        "params/tasks/sentiment.yaml changed after Snakemake planned this job (edited while the run went on): what "
        "this job would build in results/sentiment/ppo/seed0 is not what Snakemake recorded for it; run snakemake "
        "again once the edit is done")
    method.write_text("learning_rate: 0.05\n")
    with pytest.raises(ConfigError, match=r"^params/tasks/sentiment.yaml, params/methods/ppo.yaml changed after"):
        stage.params_digest("rl_finetune", given)
    assert stage.params_digest("rl_finetune", Namespace(**{**vars(given), "out": Path("results/other")}))  # unplanned
    monkeypatch.setenv(PLAN, "0" * 32)  # a job of another run than the plan's (one that wrote none: --nohooks)
    assert stage.params_digest("rl_finetune", given)
    monkeypatch.delenv("GRUEFLOW_ENGINE")  # run by hand or by dvc repro, the plan of an earlier run still there
    monkeypatch.setenv(PLAN, read_json(PLANNED)["run"])
    assert PLANNED.exists() and stage.params_digest("rl_finetune", given)
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    write_json(PLANNED, {"run": read_json(PLANNED)["run"], "digests": ["damaged"]})
    with pytest.raises(DataError, match=r"holds no digests for results/sentiment/ppo/seed0 as it writes them"):
        stage.params_digest("rl_finetune", given)
    PLANNED.unlink()  # no plan
    assert stage.params_digest("rl_finetune", given)


def test_a_stage_whose_params_file_changed_while_it_ran_writes_no_record(tmp_path, monkeypatch):
    """A learning rate edited while `dvc repro` ran a stage: DVC saved the edited value to dvc.lock once the command
    ended, so a folder trained with the value before the edit was filed under the new one, and nothing reran it. The
    stage takes its params digest again at its end; where it changed, no record is written and the stage fails,
    naming the file; DVC then saves nothing and reruns it."""
    from argparse import Namespace

    from grueflow.config import ConfigError
    from grueflow.io import atomic_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRUEFLOW_ENGINE", raising=False)  # as dvc repro runs it
    method = Path("params/methods/ppo.yaml")
    method.parent.mkdir(parents=True)
    method.write_text("learning_rate: 0.0004\n")
    (Path("params/tasks")).mkdir(parents=True)
    Path("params/tasks/sentiment.yaml").write_text("lengths: {prompt: 8}\n")
    given = Namespace(task_file=Path("params/tasks/sentiment.yaml"), method_file=method, precision="fp32",
                      out=Path("results/sentiment/ppo/seed0"))
    read = stage.params_digest("rl_finetune", given)
    method.write_text("learning_rate: 0.0003\n")  # edited while it trains
    with pytest.raises(ConfigError, match=re.escape(
            "params/methods/ppo.yaml changed while this stage ran (edited during the run): what it built would be "
            "recorded under the edited params; run it again once the edit is done")):
        with atomic_dir(given.out) as tmp:
            stage.finish(tmp, "rl_finetune", {}, {}, 0.0, read)
    assert not given.out.exists()
    method.write_text("learning_rate: 0.0004\n")  # put back before its end: as it was read
    with atomic_dir(given.out) as tmp:
        stage.finish(tmp, "rl_finetune", {}, {}, 0.0, read)
    assert read_json(given.out / "stage.json")["params_digest"] == read


OVERRIDDEN_TASK = ("lengths: {prompt: 8}\nreward:\n  components: [{metric: lexicon_sentiment, weight: 1.0}]\n"
                   "method_overrides:\n  supervised: {learning_rate: 0.0001}\n  ppo: {kl_coef: 0.1}\n"
                   "  supervised+ppo: {kl_coef: 0.2}\n")


def edit_override(task: Path, entry: str, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the task file's ``method_overrides.<entry>`` line."""
    lines = task.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(f"  {entry}: "))
    assert old in lines[at], lines[at]
    lines[at] = lines[at].replace(old, new)
    task.write_text("".join(lines))


def test_a_folder_no_snakemake_job_wrote_is_stale_for_its_own_methods_overrides_alone(tmp_path, monkeypatch):
    """The params digest of a stage folder took the task file's method_overrides whole: a folder dvc repro built
    (no Snakemake record of its params) was rebuilt for an edit of another method's override, which its stage never
    reads. It covers the entries its method reads (grueflow.pipeline.method_layers), as Snakemake's own params do."""
    from argparse import Namespace

    from grueflow import stale
    from grueflow.io import atomic_dir
    from grueflow.pipeline import ParamsSource, method_layers

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRUEFLOW_ENGINE", raising=False)  # as dvc repro runs the stages
    task, results = Path("params/tasks/sentiment.yaml"), Path("results")
    task.parent.mkdir(parents=True)
    task.write_text(OVERRIDDEN_TASK)
    methods = {"supervised": "params/methods/supervised.yaml", "ppo": "params/methods/ppo.yaml"}
    Path("params/methods").mkdir()
    for path in methods.values():
        Path(path).write_text("learning_rate: 0.0005\n")
    # folder -> (stage, its command line's method flags, the folder's method as the Snakefile names it)
    jobs = {results / "sentiment/supervised/seed0": ("warm_start", {"method_file": methods["supervised"]},
                                                     "supervised"),
            results / "sentiment/ppo/seed0": ("rl_finetune", {"method_file": methods["ppo"], "algorithm": "ppo",
                                                              "start": "zero_shot"}, "ppo"),
            results / "sentiment/supervised+ppo/seed0": ("rl_finetune", {"method_file": methods["ppo"],
                                                                         "algorithm": "ppo", "start": "supervised"},
                                                         "supervised+ppo"),
            results / "eval/sentiment/zero_shot/seed0": ("evaluate", {"start": "zero_shot"}, "zero_shot"),
            results / "eval/sentiment/supervised/seed0": ("evaluate", {"start": "supervised"}, "supervised"),
            results / "eval/sentiment/ppo/seed0": ("evaluate", {"start": "zero_shot", "algorithm": "ppo"}, "ppo"),
            results / "eval/sentiment/supervised+ppo/seed0": ("evaluate", {"start": "supervised", "algorithm": "ppo"},
                                                              "supervised+ppo")}
    sources = {folder: ParamsSource(name, str(task), flags.get("method_file"), {"precision": "fp32"},
                                    tuple(method_layers(method)))  # as the Snakefile's stage_params gives them
               for folder, (name, flags, method) in jobs.items()}
    for folder, (name, flags, _) in jobs.items():
        with atomic_dir(folder) as tmp:
            (tmp / "weights.bin").write_bytes(b"w")
            given = Namespace(task_file=task, precision="fp32", out=folder, **flags)
            stage.finish(tmp, name, {}, {}, 0.0, stage.params_digest(name, given))

    def stale_now() -> list[str]:
        found = stale.stale_outputs(results, Path("results/grue_table.csv"), [], folders=list(jobs), params=sources)
        why = "its params changed since it was built (params/tasks/sentiment.yaml), and no Snakemake job of this " \
              "checkout wrote it (built by dvc repro, or .snakemake removed)"
        assert set(found.values()) <= {why}, found
        return sorted(str(folder.relative_to(results)) for folder in found)

    assert stale_now() == []
    for entry, old, new, rebuilt in [
            ("supervised", "0.0001", "0.0002", ["eval/sentiment/supervised/seed0", "sentiment/supervised/seed0"]),
            ("ppo", "0.1", "0.3", ["eval/sentiment/ppo/seed0", "eval/sentiment/supervised+ppo/seed0",
                                   "sentiment/ppo/seed0", "sentiment/supervised+ppo/seed0"]),
            ("supervised+ppo", "0.2", "0.4", ["eval/sentiment/supervised+ppo/seed0",
                                              "sentiment/supervised+ppo/seed0"])]:
        edit_override(task, entry, old, new)
        assert stale_now() == rebuilt, entry
        edit_override(task, entry, new, old)
        assert stale_now() == []
    task.write_text(task.read_text().replace("  supervised+ppo: {kl_coef: 0.2}\n", ""))  # an entry taken out
    assert stale_now() == ["eval/sentiment/supervised+ppo/seed0", "sentiment/supervised+ppo/seed0"]


def test_a_record_of_the_whole_method_overrides_stays_valid_while_the_task_file_is_unchanged(tmp_path, monkeypatch):
    """A stage record whose task digest covers method_overrides whole (ParamsSource.overrides None) is no change
    while that key is as it was; an edit of the folder's own entry still makes it stale."""
    from dataclasses import replace

    from grueflow import stale
    from grueflow.io import RECORD_DIGEST, atomic_dir, sealed
    from grueflow.pipeline import PARAMS_DIGEST, ParamsSource, params_digest

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRUEFLOW_ENGINE", raising=False)
    task, method = Path("params/tasks/sentiment.yaml"), Path("params/methods/ppo.yaml")
    task.parent.mkdir(parents=True)
    method.parent.mkdir(parents=True)
    task.write_text(OVERRIDDEN_TASK)
    method.write_text("learning_rate: 0.0005\n")
    folder, results = Path("results/sentiment/ppo/seed0"), Path("results")
    source = ParamsSource("rl_finetune", str(task), str(method), {"precision": "fp32"}, ("ppo",))
    whole = params_digest(replace(source, overrides=None))
    assert whole["task"] != params_digest(source)["task"]
    with atomic_dir(folder) as tmp:
        stage.finish(tmp, "rl_finetune", {}, {}, 0.0)
    record = read_json(folder / "stage.json")
    del record[RECORD_DIGEST]
    write_json(folder / "stage.json", sealed({**record, PARAMS_DIGEST: whole}))  # as a stage then wrote it

    def check() -> dict:
        return stale.stale_outputs(results, Path("results/grue_table.csv"), [], folders=[folder],
                                   params={folder: source})

    assert check() == {}
    edit_override(task, "ppo", "0.1", "0.3")
    assert check() == {folder: "its params changed since it was built (params/tasks/sentiment.yaml), and no "
                               "Snakemake job of this checkout wrote it (built by dvc repro, or .snakemake removed)"}


def test_a_snakemake_job_runs_on_through_an_edit_of_another_methods_override(tmp_path, monkeypatch):
    """A job of ppo stopped ("changed after Snakemake planned this job") for an edit of method_overrides.supervised
    made while the run went on, and a finished ppo stage refused to write its record for one made while it ran:
    neither reads that entry. An edit of an entry the job reads still stops it."""
    from argparse import Namespace

    from grueflow.config import ConfigError
    from grueflow.io import PLAN, atomic_dir, write_planned

    monkeypatch.chdir(tmp_path)
    task, method = Path("params/tasks/sentiment.yaml"), Path("params/methods/ppo.yaml")
    task.parent.mkdir(parents=True)
    method.parent.mkdir(parents=True)
    task.write_text(OVERRIDDEN_TASK)
    method.write_text("learning_rate: 0.0005\n")
    rl = Namespace(task_file=task, method_file=method, algorithm="ppo", start="supervised", precision="fp32",
                   out=Path("results/sentiment/supervised+ppo/seed0"))
    evaluation = Namespace(task_file=task, start="zero_shot", algorithm="ppo", precision="fp32",
                           out=Path("results/eval/sentiment/ppo/seed0"))
    jobs = {"rl_finetune": rl, "evaluate": evaluation}
    monkeypatch.delenv("GRUEFLOW_ENGINE", raising=False)
    plan = write_planned({given.out: stage.params_digest(name, given) for name, given in jobs.items()})
    monkeypatch.setenv("GRUEFLOW_ENGINE", "snakemake")
    monkeypatch.setenv(PLAN, plan)
    edit_override(task, "supervised", "0.0001", "0.0002")  # the warm start's: read by neither job
    read = {name: stage.params_digest(name, given) for name, given in jobs.items()}
    edit_override(task, "supervised", "0.0002", "0.0003")  # again, while they run
    for name, given in jobs.items():
        with atomic_dir(given.out) as tmp:
            stage.finish(tmp, name, {}, {}, 0.0, read[name])
        assert read_json(given.out / "stage.json")["params_digest"] == read[name]
    edit_override(task, "ppo", "0.1", "0.3")  # read by both
    for name, given in jobs.items():
        with pytest.raises(ConfigError, match=r"^params/tasks/sentiment.yaml changed after Snakemake planned this "
                                              r"job \(edited while the run went on\)"):
            stage.params_digest(name, given)
    edit_override(task, "ppo", "0.3", "0.1")
    edit_override(task, "supervised+ppo", "0.2", "0.4")  # read by the supervised+ppo run alone
    assert stage.params_digest("evaluate", evaluation)
    with pytest.raises(ConfigError, match=r"^params/tasks/sentiment.yaml changed after Snakemake planned"):
        stage.params_digest("rl_finetune", rl)
    monkeypatch.delenv("GRUEFLOW_ENGINE")  # as dvc repro runs it: the end of the run takes the digest again
    taken = stage.params_digest("rl_finetune", rl)
    edit_override(task, "supervised+ppo", "0.4", "0.5")
    with pytest.raises(ConfigError, match=re.escape(
            "params/tasks/sentiment.yaml changed while this stage ran (edited during the run)")):
        with atomic_dir(rl.out) as tmp:
            stage.finish(tmp, "rl_finetune", {}, {}, 0.0, taken)


def test_a_stamp_for_an_input_stays_when_the_stage_is_stale_for_its_own_sake(tmp_path, monkeypatch):
    """A dry run made while a data file was edited stamped its datapool 1970, and putting the file back left the
    stamp: where Snakemake kept no checksum of the file (over 1 MB, or .snakemake removed), the datapool and all it
    fed reran. The time before the stamp is put back once the input is as recorded, but not over a rebuild."""
    from grueflow import stale
    from grueflow.io import write_stage_record

    monkeypatch.setattr(stale, "_KNOWN", {})
    results, data = tmp_path / "results", tmp_path / "train.jsonl"
    datapool = results / "sentiment" / "datapool"
    datapool.mkdir(parents=True)
    (datapool / "train.jsonl").write_text("{}\n")
    (datapool / stale.SNAKEMAKE_TIMESTAMP).touch()
    data.write_text('{"prompt": "v1"}\n')
    write_stage_record(datapool, stage="prepare_datapool", params={}, wall_time_s=0.0, inputs={"data": data})
    tokens, timestamp = tmp_path / ".snakemake" / "grueflow-stale.json", datapool / stale.SNAKEMAKE_TIMESTAMP
    built = timestamp.stat().st_mtime_ns
    data.write_text('{"prompt": "v2"}\n')
    assert stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens) == [
        f"grueflow: {datapool} is stale (its input {data} changed since it was built); its job reruns"]
    assert timestamp.stat().st_mtime == 1
    (datapool / "train.jsonl").unlink()  # damaged as well: rebuilt whatever the input says
    assert "damaged" in stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens)[0]
    data.write_text('{"prompt": "v1"}\n')
    assert "damaged" in stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens)[0]
    assert timestamp.stat().st_mtime == 1 != built / 10 ** 9
    (datapool / "train.jsonl").write_text("{}\n")  # repaired by hand: its token reruns it once, the stamp stays
    assert stale.mark_stale(results, tmp_path / "t.csv", [], tokens=tokens) == []
    assert timestamp.stat().st_mtime == 1


def test_what_a_rebuild_deletes_without_a_stage_record_is_copied_out_of_results_first(tmp_path, monkeypatch):
    """A datapool written by hand where the pipeline writes one, or a stage folder whose record was deleted and a
    file added, was rebuilt, and Snakemake deleted the folder first: the files went with it. A folder a dvc
    checkout restored lacks its provenance record, and one emptied with rm -rf folder/* keeps Snakemake's hidden
    timestamp, so neither tells a stage's output from a person's: a copy of what such a folder holds (or of a file
    in a stage folder's place) is kept outside results/, once for the same content, whichever run (a dry run
    too, and with --no-hooks) finds it. A folder no rule writes is left alone."""
    from grueflow.io import write_stage_record
    from grueflow.keep import REPLACED, SNAKEMAKE_TIMESTAMP, keep_copy, unvouched
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    datapool, emptied = results / "concepts" / "datapool", results / "sentiment" / "datapool"
    placed, fifo = results / "imdb" / "datapool", results / "totto" / "datapool"
    for folder in (datapool, emptied):
        folder.mkdir(parents=True)
        (folder / SNAKEMAKE_TIMESTAMP).touch()
    (datapool / "unlabelled.txt").write_text("my own text\n")
    (datapool / "train.jsonl").write_text("{}\n")
    (datapool / "checkpoints" / "iteration1").mkdir(parents=True)
    (datapool / "checkpoints" / "iteration1" / "w.bin").write_bytes(b"w")
    (datapool / "caf\udce9.txt").write_bytes(b"a name that is no UTF-8")
    placed.parent.mkdir()
    placed.write_text("notes\n")  # a file saved where the folder belongs
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # holds no data, and reading it would wait for a writer
    mine = results / "mypool"  # a datapool of the user's under results/ that a stage run by hand read
    mine.mkdir()
    (mine / "train.jsonl").write_text("{}\n")
    reader = results / "scratch" / "base_model"
    reader.mkdir(parents=True)
    write_stage_record(reader, stage="base_model", params={}, wall_time_s=0.0, inputs={"datapool": mine})
    suite = [datapool, emptied, placed, fifo, results / "dailydialog" / "datapool"]
    lines = mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=suite)
    copies = sorted(REPLACED.glob("results/*/*"))
    assert [p.name.split("@")[0] for p in copies] == ["datapool", "datapool"] and len(copies) == 2
    kept, note = copies if "concepts" in str(copies[0]) else copies[::-1]
    assert lines == [
        f"grueflow: {datapool} is stale (damaged: stage.json is missing); its job reruns; a copy of what no stage "
        f"record vouches for (caf\udce9.txt, checkpoints/iteration1/w.bin, train.jsonl and 1 more) is kept in {kept}",
        f"grueflow: {emptied} is stale (damaged: stage.json is missing); its job reruns",
        f"grueflow: {placed} is stale (a file where the stage's folder belongs); its job reruns; a copy of what no "
        f"stage record vouches for (datapool) is kept in {note}",
        f"grueflow: {fifo} is stale (a file where the stage's folder belongs); its job reruns"]
    assert sorted(p.name for p in kept.iterdir()) == ["caf\udce9.txt", "checkpoints", "train.jsonl", "unlabelled.txt"]
    assert (kept / "unlabelled.txt").read_text() == "my own text\n" and (note / "datapool").read_text() == "notes\n"
    assert (kept / "checkpoints" / "iteration1" / "w.bin").read_bytes() == b"w"
    assert (datapool / "unlabelled.txt").is_file()  # nothing is moved: the rebuild Snakemake runs deletes it
    assert mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=suite) == lines  # a second dry run
    assert sorted(REPLACED.glob("results/*/*")) == copies
    (datapool / "unlabelled.txt").write_text("my own text, edited\n")  # new content: a copy of its own
    mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=suite)
    assert len(list(REPLACED.glob("results/concepts/*"))) == 2
    assert (mine / "train.jsonl").is_file() and not (REPLACED / "results" / "mypool").exists()
    assert all(str(mine) not in line for line in lines)
    shutil.rmtree(".grueflow")
    Path(".grueflow").write_text("")  # nowhere to copy them: refused, so that no rebuild can delete them
    with pytest.raises(DataError, match=rf"keeping a copy of what {datapool} holds, which a rerun of its stage "
                                        r"deletes, in .* failed \(Not a directory: .*\): copy or move it out of "
                                        r"results/ yourself"):
        keep_copy(datapool, Path("."), unvouched(datapool))


def test_a_link_in_a_stage_folders_place_is_copied_and_stamped_as_a_link(tmp_path, monkeypatch):
    """A link where a stage folder belongs, to a FIFO, hung the dry run (the copy read through it), and one to a
    folder of the user's had that folder's .snakemake_timestamp set to 1970. A copy that failed left its temporary
    folder behind, one more each try."""
    from grueflow.keep import REPLACED, SNAKEMAKE_TIMESTAMP, keep_copy
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    fifo, pool = results / "sentiment" / "datapool", results / "concepts" / "datapool"
    fifo.parent.mkdir(parents=True)
    pool.parent.mkdir(parents=True)
    os.mkfifo(tmp_path / "pipe")
    fifo.symlink_to(tmp_path / "pipe")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "train.jsonl").write_text("{}\n")
    (mine / SNAKEMAKE_TIMESTAMP).touch()
    os.utime(mine / SNAKEMAKE_TIMESTAMP, (1_700_000_000, 1_700_000_000))
    pool.symlink_to(mine)
    lines = mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=[fifo, pool])
    assert len(lines) == 2 and all("a copy of what no stage record vouches for" in line for line in lines)
    copy = next(REPLACED.glob("results/sentiment/datapool@*"))
    assert os.readlink(copy / "datapool") == str(tmp_path / "pipe")
    assert (mine / SNAKEMAKE_TIMESTAMP).stat().st_mtime == 1_700_000_000 and pool.lstat().st_mtime == 1
    (mine / "train.jsonl").write_text('{"a": 1}\n')
    (mine / "b.jsonl").write_text("{}\n")
    copied, copy = [], shutil.copy2

    def copy_then_fill_the_disk(source, target):
        if copied:
            raise OSError(28, "No space left on device")
        copied.append(copy(source, target))

    monkeypatch.setattr("grueflow.keep.shutil.copy2", copy_then_fill_the_disk)
    with pytest.raises(DataError, match=r"failed \(No space left on device\)"):
        keep_copy(pool, Path("."), [pool / "b.jsonl", pool / "train.jsonl"])
    assert len(copied) == 1
    assert [p.name for p in REPLACED.joinpath("results", "concepts").iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_copy_interrupted_names_the_file_and_leaves_no_partial_copy(tmp_path, monkeypatch, signum):
    """A Ctrl-C while a user's big file was copied out of a stage folder ended the dry run in a 40-line traceback
    through the stale check and keep_copy; a stage's SIGTERM (grueflow.interrupt.Interrupted) keeps its signal."""
    from grueflow.interrupt import Interrupted
    from grueflow.keep import REPLACED, CopyInterrupted, keep_copy

    monkeypatch.chdir(tmp_path)
    folder = Path("results") / "eval" / "sentiment"
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("mine\n")
    (folder / "big.bin").write_bytes(b"x" * 4096)
    copy = shutil.copy2

    def interrupted_midway(source, target):
        if Path(source).name != "big.bin":
            return copy(source, target)
        Path(target).write_bytes(b"x" * 100)
        raise KeyboardInterrupt if signum == signal.SIGINT else Interrupted(signum)

    monkeypatch.setattr("grueflow.keep.shutil.copy2", interrupted_midway)
    with pytest.raises(CopyInterrupted) as err:
        keep_copy(folder, Path("."), [folder / "a.txt", folder / "big.bin"])
    by = "" if signum == signal.SIGINT else " by SIGTERM"
    assert str(err.value) == (f"interrupted{by} while keeping a copy of {folder / 'big.bin'}: nothing was deleted; "
                              f"rerun the same command")
    assert isinstance(err.value, KeyboardInterrupt) and err.value.signum == signum  # a stage's clean-up still runs
    assert list(REPLACED.joinpath("results", "eval").iterdir()) == []  # the partial copy is gone
    assert (folder / "big.bin").read_bytes() == b"x" * 4096 and (folder / "a.txt").is_file()


def test_a_record_that_is_a_fifo_or_a_device_is_damaged_not_read(tmp_path, monkeypatch):
    """A stage.json replaced by a FIFO (or a link to one) hung every run and dry run of the project, the stale check
    waiting for a writer; a link to /dev/zero read until memory ran out; a provenance.json so replaced hung the
    table's stage."""
    from grueflow.io import write_stage_record
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    pool = Path("results") / "concepts" / "datapool"
    pool.mkdir(parents=True)
    (pool / "train.jsonl").write_text("{}\n")
    write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
    (pool / "stage.json").unlink()
    os.mkfifo(pool / "stage.json")
    with pytest.raises(DataError, match=r"stage.json is not a regular file \(a FIFO, a socket or a device\); put "
                                        r"back the file it should be, or delete it"):
        read_json(pool / "stage.json")
    line, = mark_stale(Path("results"), Path("t.csv"), [], folders=[pool],
                       tokens=Path(".snakemake") / "grueflow-stale.json")
    assert line.startswith(f"grueflow: {pool} is stale (") and "not readable JSON" in line
    (pool / "provenance.json").unlink()
    (pool / "provenance.json").symlink_to("/dev/zero")
    with pytest.raises(DataError, match="is not a regular file"):
        read_json(pool / "provenance.json")


def test_a_damaged_stage_folder_keeps_a_copy_of_what_its_record_does_not_vouch_for(tmp_path, monkeypatch):
    """A stage folder with a file of the user's added and its manifest no longer met (a file deleted, one edited),
    or its stage.json cut, was rebuilt without a copy: only a missing stage.json kept one. The files its manifest
    lists at their recorded size are the stage's own, rebuilt as they were; the rest is copied. A folder stale
    because an input changed is a stage's output as built, replaced whole as under DVC: no copy."""
    from grueflow.io import write_stage_record
    from grueflow.keep import REPLACED
    from grueflow.stale import mark_stale

    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    pool = results / "concepts" / "datapool"
    pool.mkdir(parents=True)
    for name in ("train.jsonl", "test.jsonl", "val.jsonl"):
        (pool / name).write_text('{"prompt": "a"}\n')
    write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=0.0)
    (pool / "mine.txt").write_text("my notes\n")
    line, = mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=[pool])  # in order: no rebuild, a copy
    assert line == f"grueflow: {pool} holds what no stage record vouches for (mine.txt); a copy is kept in " \
                   f"{next(REPLACED.glob('results/concepts/datapool@*'))} (a rerun of its stage replaces it whole)"
    shutil.rmtree(".grueflow")
    (pool / "val.jsonl").unlink()
    (pool / "test.jsonl").write_text('{"prompt": "edited by hand"}\n')
    line, = mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=[pool])
    assert line.startswith(f"grueflow: {pool} is stale (damaged: ") and \
        line.endswith(f"a copy of what no stage record vouches for (mine.txt, test.jsonl) is kept in "
                      f"{next(REPLACED.glob('results/concepts/datapool@*'))}")
    (pool / "stage.json").write_text('{"files": ')  # cut: nothing vouches for anything
    shutil.rmtree(".grueflow")
    line, = mark_stale(results, Path("t.csv"), [], tokens=tokens, folders=[pool])
    assert "a copy of what no stage record vouches for (mine.txt, stage.json, test.jsonl and 1 more)" in line


def test_a_stage_record_is_vouched_for_only_with_the_bytes_a_stage_writes(tmp_path):
    """A stage record beside a manifest counted as its stage's whatever its bytes, so a note added to it by hand was
    never copied. It is vouched for where its text is the one write_json writes and its digest of the rest holds
    (a record written before records held one: by its text alone, so no finished project copies its records);
    anything else (a key added, a number changed in place, the text reformatted) is a person's."""
    from grueflow.io import RECORD_DIGEST, as_written, json_text, write_stage_record
    from grueflow.keep import persons_files, unvouched

    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "train.jsonl").write_text('{"prompt": "a"}\n')
    write_stage_record(pool, stage="prepare_datapool", params={"n": 1}, inputs={}, wall_time_s=0.0)
    written = (pool / "stage.json").read_text()
    record = json.loads(written)
    assert as_written(pool / "stage.json") and unvouched(pool) == [] and len(record[RECORD_DIGEST]) == 64
    older = {key: value for key, value in record.items() if key != RECORD_DIGEST}
    for text, ok in ((json_text(older), True),  # written before records held a digest
                     (json_text({**record, "my_note": "numbers suspect"}), False),
                     (json_text({**record, "params": {"n": 2}}), False),
                     (json.dumps(record), False),  # reformatted: the same content, not the bytes a stage writes
                     (written.replace("}\n", "}\r\n"), False), (written.replace('"n": 1', '"n": NaN'), False)):
        (pool / "stage.json").write_text(text)
        assert unvouched(pool) == ([] if ok else [pool / "stage.json"]), text
        assert persons_files(pool) == []  # a reader's digest of the folder covers its record whatever it holds


def test_a_file_of_the_users_in_any_stage_folder_is_copied_before_any_run(tmp_path, monkeypatch):
    """A folder in order with a file of the user's added lost it to the next rerun for a param, with no line and no
    copy: only a folder stale for its own sake had its files copied. Every stage folder of the suite, and every
    folder holding a stage record, has what no record vouches for copied first, once per content, with a line each
    time; one without such files, or one copied already with its stale line, gets none."""
    from grueflow.io import write_stage_record
    from grueflow.keep import REPLACED
    from grueflow.stale import keep_user_files

    monkeypatch.chdir(tmp_path)
    results = Path("results")
    pool, model = results / "concepts" / "datapool", results / "old_task" / "base_model"  # a task the suite dropped
    placed, clean, absent = results / "sentiment" / "datapool", results / "concepts" / "base_model", \
        results / "imdb" / "datapool"
    for folder in (pool, model, clean):
        folder.mkdir(parents=True)
        (folder / "train.jsonl").write_text("{}\n")
        write_stage_record(folder, stage="x", params={}, inputs={}, wall_time_s=0.0)
    (pool / "mine.txt").write_text("my notes\n")
    (model / "model").mkdir()
    (model / "model" / "notes.md").write_text("# mine\n")
    placed.parent.mkdir()
    placed.write_text("a file\n")
    lines = keep_user_files(results, [pool, placed, clean, absent])
    copies = {p.parent.name + "/" + p.name.split("@")[0]: p for p in REPLACED.glob("results/*/*")}
    assert sorted(copies) == ["concepts/datapool", "old_task/base_model", "sentiment/datapool"]
    assert lines == [
        f"grueflow: {pool} holds what no stage record vouches for (mine.txt); a copy is kept in "
        f"{copies['concepts/datapool']} (a rerun of its stage replaces it whole)",
        f"grueflow: {model} holds what no stage record vouches for (model/notes.md); a copy is kept in "
        f"{copies['old_task/base_model']} (a rerun of its stage replaces it whole)",
        f"grueflow: {placed} is a file where a stage folder belongs; a copy is kept in "
        f"{copies['sentiment/datapool']} (a rerun of its stage replaces it whole)"]
    assert (copies["concepts/datapool"] / "mine.txt").read_text() == "my notes\n"
    assert sorted(p.name for p in copies["concepts/datapool"].iterdir()) == ["mine.txt"]
    assert (copies["old_task/base_model"] / "model" / "notes.md").read_text() == "# mine\n"
    assert (copies["sentiment/datapool"] / "datapool").read_text() == "a file\n"
    assert (pool / "mine.txt").is_file() and placed.is_file()  # copied, never moved
    assert keep_user_files(results, [pool, placed, clean, absent]) == lines  # said again; copied once
    assert len(list(REPLACED.glob("results/*/*"))) == 3
    assert keep_user_files(results, [pool, placed], done=[pool, placed, model]) == []
    mask = os.umask(0)
    os.umask(mask)
    assert all(stat.S_IMODE(copy.stat().st_mode) == 0o777 & ~mask for copy in copies.values())  # as outputs are
    (copies["concepts/datapool"] / "mine.txt").unlink()  # a copy emptied since: left, and made again beside it
    again = keep_user_files(results, [pool])
    assert again[0] == lines[0].replace(str(copies["concepts/datapool"]), f"{copies['concepts/datapool']}.1")
    assert (Path(f"{copies['concepts/datapool']}.1") / "mine.txt").read_text() == "my notes\n"


def test_a_persons_file_under_a_records_name_is_kept_as_any_other(tmp_path):
    """A person's timings.csv or provenance.json in a stage folder passed for the stage's own unhashed records,
    which no manifest lists, and a rerun deleted it without a copy."""
    import json

    from grueflow.io import write_csv, write_stage_record
    from grueflow.keep import unvouched

    folder = tmp_path / "results" / "sentiment" / "ppo" / "seed0"
    folder.mkdir(parents=True)
    write_csv(folder / "timings.csv", [{"iteration": 1, "charts/iteration_s": 0.5}])
    write_stage_record(folder, stage="rl_finetune", params={}, inputs={}, wall_time_s=1.0)
    assert unvouched(folder) == []  # the stage's own records
    (folder / "provenance.json").write_text(json.dumps({"git_commit": None, "wall_time_s": 1.0}))
    assert unvouched(folder) == []  # as records written before they named their stage read
    (folder / "timings.csv").write_text("date,hours\n2026-12-01,3\n")
    (folder / "provenance.json").write_text('{"source": "my lab notebook"}')
    assert unvouched(folder) == [folder / "provenance.json", folder / "timings.csv"]
    (folder / "provenance.json").write_bytes(b"\xff not json")
    (folder / "timings.csv").write_text("")  # empty: nothing to lose
    assert unvouched(folder) == [folder / "provenance.json"]


def test_a_hand_edit_of_a_stage_file_that_keeps_its_size_is_kept_before_a_rerun(tmp_path, monkeypatch):
    """A number changed by hand in an evaluation's metrics.json (115 -> 995), or pad_token_id in a model's
    generation_config.json (0 -> 9), kept the file's size, passed for the stage's own and was rewritten by the next
    rerun with no copy kept, while an edit of another size was kept. A file modified after its folder's stage.json
    is the stage's own only with the digest its manifest lists; one as written (touched, or copied back with new
    times) is, and one no newer than the record is judged by its size alone, unread."""
    from grueflow.io import atomic_dir, write_json, write_stage_record
    from grueflow.keep import REPLACED, keep_copy, unvouched
    from grueflow.stale import keep_user_files

    monkeypatch.chdir(tmp_path)
    results = Path("results")
    evaluation, trained = results / "eval" / "sentiment" / "ppo" / "seed0", results / "sentiment" / "ppo" / "seed0"
    with atomic_dir(evaluation) as tmp:
        write_json(tmp / "metrics.json", {"fluency/perplexity": 115})
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    with atomic_dir(trained) as tmp:
        write_json(tmp / "model" / "generation_config.json", {"pad_token_id": 0})
        write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    written = {folder: (folder / "stage.json").stat().st_mtime_ns for folder in (evaluation, trained)}
    metrics, generation = evaluation / "metrics.json", trained / "model" / "generation_config.json"
    assert unvouched(evaluation) == [] and unvouched(trained) == []
    for file, folder in ((metrics, evaluation), (generation, trained)):  # as written, modified later: read, vouched
        os.utime(file, ns=(written[folder] + 10**9, written[folder] + 10**9))
    assert unvouched(evaluation) == [] and unvouched(trained) == []
    metrics.write_text(metrics.read_text().replace("115", "995"))
    generation.write_text(generation.read_text().replace('"pad_token_id": 0', '"pad_token_id": 9'))
    for file, folder in ((metrics, evaluation), (generation, trained)):  # later than the record, whatever the clock
        os.utime(file, ns=(written[folder] + 2 * 10**9, written[folder] + 2 * 10**9))
    assert unvouched(evaluation) == [metrics] and unvouched(trained) == [generation]
    lines = keep_user_files(results, [evaluation, trained])
    copies = {folder: next(REPLACED.glob(f"{folder}@*")) for folder in (evaluation, trained)}
    assert lines == [f"grueflow: {folder} holds what no stage record vouches for ({name}); a copy is kept in "
                     f"{copies[folder]} (a rerun of its stage replaces it whole)"
                     for folder, name in ((evaluation, "metrics.json"), (trained, "model/generation_config.json"))]
    assert (copies[evaluation] / "metrics.json").read_text() == metrics.read_text()
    assert '"pad_token_id": 9' in (copies[trained] / "model" / "generation_config.json").read_text()
    os.utime(metrics, ns=(written[evaluation], written[evaluation]))  # no newer than its record: its size vouches
    assert unvouched(evaluation) == []
    assert keep_copy(trained, Path("."), unvouched(trained)) == copies[trained]  # the same content: copied once


def two_runs_and_an_evaluation(results: Path) -> tuple[dict[str, Path], Path]:
    """Under ``results``: the RL folders of supervised and ppo (seed 0; 64 bytes of weights each, of the same size and
    other bytes), and ppo's evaluation reading ppo's model, each with its stage record; ({method: folder}, the
    evaluation's folder)."""
    from grueflow.io import atomic_dir, write_json, write_stage_record

    runs = {method: results / "sentiment" / method / "seed0" for method in ("supervised", "ppo")}
    for method, run in runs.items():
        with atomic_dir(run) as tmp:
            (tmp / "model").mkdir()
            (tmp / "model" / "model.safetensors").write_bytes(method.encode().ljust(64, b"w"))
            write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    evaluation = results / "eval" / "sentiment" / "ppo" / "seed0"
    with atomic_dir(evaluation) as tmp:
        write_json(tmp / "metrics.json", {"fluency/perplexity": 115})
        write_stage_record(tmp, stage="evaluate", params={}, inputs={"model": runs["ppo"] / "model"}, wall_time_s=0.0)
    return runs, evaluation


def test_a_stage_file_replaced_at_the_same_size_makes_its_folder_stale_not_only_its_reader(tmp_path, monkeypatch):
    """An RL folder's weights replaced by another run's of the same size (a restore from the wrong backup), or a
    number edited in an evaluation's metrics.json, were copied out and named, but only the reader was stale (or
    nothing was): its rerun refused the folder ("does not match the digest its stage recorded") on every run. A file
    modified after its folder's record with the listed size and another digest makes the folder stale itself, with
    a new token, so its own job reruns and then what reads it; a file touched or copied back as written does not,
    and a finished project reads no file."""
    from grueflow import keep, stale
    from grueflow.io import atomic_dir, write_stage_record
    from grueflow.keep import REPLACED

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    runs, evaluation = two_runs_and_an_evaluation(results)
    suite = [*runs.values(), evaluation]
    read = []
    digest = keep.fingerprint
    monkeypatch.setattr(keep, "fingerprint", lambda path, *rest: read.append(path) or digest(path, *rest))
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite) == {} and read == []
    weights = runs["ppo"] / "model" / "model.safetensors"
    later = (runs["ppo"] / "stage.json").stat().st_mtime_ns + 10**9
    os.utime(weights, ns=(later, later))  # touched: as written, read at most once a process
    for _ in range(2):
        assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite) == {}
    assert read in ([], [weights])
    shutil.copyfile(runs["supervised"] / "model" / "model.safetensors", weights)  # cp: the same size, a new time
    os.utime(weights, ns=(later + 10**9, later + 10**9))
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite) == {
        runs["ppo"]: "damaged: model/model.safetensors does not match the digest its stage recorded"}
    line, = stale.mark_stale(results, results / "t.csv", [evaluation], tokens=tokens, folders=suite)
    copy = next(REPLACED.glob("results/sentiment/ppo/seed0@*"))
    assert line == f"grueflow: {runs['ppo']} is stale (damaged: model/model.safetensors does not match the digest its " \
                   f"stage recorded); its job reruns; a copy of what no stage record vouches for " \
                   f"(model/model.safetensors) is kept in {copy}"
    assert (copy / "model" / "model.safetensors").read_bytes() == weights.read_bytes()
    assert stale.stale_token([runs["ppo"]], tokens) != "" and stale.stale_token([evaluation], tokens) == ""
    with atomic_dir(runs["ppo"]) as tmp:  # its rerun: then the reader's input changed, and it reruns after it
        (tmp / "model").mkdir()
        (tmp / "model" / "model.safetensors").write_bytes(b"ppo again".ljust(64, b"w"))
        write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    assert list(stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite)) == [evaluation]
    write_stage_record(evaluation, stage="evaluate", params={}, inputs={"model": runs["ppo"] / "model"},
                       wall_time_s=0.0)
    metrics = evaluation / "metrics.json"
    metrics.write_text(metrics.read_text().replace("115", "995"))
    later = (evaluation / "stage.json").stat().st_mtime_ns + 10**9
    os.utime(metrics, ns=(later, later))
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite) == {
        evaluation: "damaged: metrics.json does not match the digest its stage recorded"}


def test_a_stage_file_replaced_at_the_same_size_with_an_older_time_makes_its_folder_stale(tmp_path, monkeypatch):
    """The same replacement with ``cp -p`` (or ``cp -a``, ``rsync -a``): the file keeps a time older than its folder's
    record, so the look at the folder's own files (sizes, and digests of files newer than the record) passes, and only
    the reader was stale: its rerun refused the folder on every run. Where a reader's input folder changed, that
    folder is checked against its own record, its files read: it is stale itself, and reruns before its reader."""
    from grueflow import stale

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results = Path("results")
    runs, evaluation = two_runs_and_an_evaluation(results)
    suite = [*runs.values(), evaluation]
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite) == {}
    weights = runs["ppo"] / "model" / "model.safetensors"
    earlier = (runs["ppo"] / "stage.json").stat().st_mtime_ns - 10**9
    shutil.copyfile(runs["supervised"] / "model" / "model.safetensors", weights)
    os.utime(weights, ns=(earlier, earlier))  # cp -p: the source's older time kept
    assert stale.stale_outputs(results, results / "t.csv", [evaluation], folders=suite) == {
        runs["ppo"]: "damaged: model/model.safetensors does not match the digest its stage recorded"}


def test_a_same_size_replacement_with_an_older_time_is_copied_before_its_folder_is_rebuilt(tmp_path, monkeypatch):
    """The folder of a ``cp -p`` replacement was found stale by reading its files, and rebuilt, but the copy of what
    no record vouches for read only the files newer than the record: the replaced weights went with the rebuild, no
    copy kept. Where a folder's files do not match their digests, every file is read for the copy."""
    from grueflow import stale
    from grueflow.keep import REPLACED

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, tokens = Path("results"), Path(".snakemake") / "grueflow-stale.json"
    runs, evaluation = two_runs_and_an_evaluation(results)
    suite = [*runs.values(), evaluation]
    assert stale.mark_stale(results, results / "t.csv", [evaluation], tokens=tokens, folders=suite) == []
    weights = runs["ppo"] / "model" / "model.safetensors"
    earlier = (runs["ppo"] / "stage.json").stat().st_mtime_ns - 10**9
    shutil.copyfile(runs["supervised"] / "model" / "model.safetensors", weights)
    os.utime(weights, ns=(earlier, earlier))  # cp -p: the source's older time kept
    line, = stale.mark_stale(results, results / "t.csv", [evaluation], tokens=tokens, folders=suite)
    copy = next(REPLACED.glob("results/sentiment/ppo/seed0@*"))
    assert line == f"grueflow: {runs['ppo']} is stale (damaged: model/model.safetensors does not match the digest " \
                   f"its stage recorded); its job reruns; a copy of what no stage record vouches for " \
                   f"(model/model.safetensors) is kept in {copy}"
    assert (copy / "model" / "model.safetensors").read_bytes() == b"supervised".ljust(64, b"w")
    assert stale.stale_token([runs["ppo"]], tokens) != ""


def test_an_evaluation_replaced_at_the_same_size_with_an_older_time_is_stale_and_kept(tmp_path, monkeypatch):
    """A number edited in an evaluation's metrics.json (or a letter of its predictions), its older time put back
    (``cp -p`` or ``rsync -a`` from a backup, ``touch -d``): no reader records an evaluation's digest (the GRUE table
    and the human exports read it), so "Nothing to be done", and every run that reran the table failed at it ("is
    damaged: metrics.json does not match the digest its stage recorded"), nothing copied. An evaluation whose files
    changed since they were last found as written is read whole: it is stale itself, with a copy of the replaced
    file, until it is rebuilt; one found as written is not read again in a later run (the cache)."""
    from grueflow import keep, stale
    from grueflow.keep import REPLACED
    from tests.unit.test_grue import write_run

    monkeypatch.setattr(stale, "_KNOWN", {})
    monkeypatch.chdir(tmp_path)
    results, table = Path("results"), Path("results/grue_table.csv")
    tokens = Path(".snakemake") / "grueflow-stale.json"
    cache = tokens.parent / "grueflow-digests.json"
    evals = [write_run(results / "eval", "sentiment", method, 0).parent for method in ("zero_shot", "ppo")]
    assert stale.mark_stale(results, table, evals, tokens=tokens, folders=evals) == []
    read = []
    digest = keep.fingerprint
    for module in (keep, stale):
        monkeypatch.setattr(module, "fingerprint", lambda path, *rest: read.append(path) or digest(path, *rest))
    monkeypatch.setattr(stale, "_KNOWN", {})  # the next run: the cache says both are as written
    assert stale.stale_outputs(results, table, evals, folders=evals, cache=cache) == {} and read == []
    metrics = evals[1] / "metrics.json"
    before = metrics.stat()
    metrics.write_text(metrics.read_text().replace('"reward": 0.5', '"reward": 0.9'))
    os.utime(metrics, ns=(before.st_atime_ns, before.st_mtime_ns))  # its older time put back
    assert metrics.stat().st_size == before.st_size
    why = "damaged: metrics.json does not match the digest its stage recorded"
    assert stale.stale_outputs(results, table, evals, folders=evals, cache=cache) == {evals[1]: why}
    monkeypatch.setattr(stale, "_KNOWN", {})
    line, = stale.mark_stale(results, table, evals, tokens=tokens, folders=evals)
    copy = next(REPLACED.glob("results/eval/sentiment/ppo/seed0@*"))
    assert line == f"grueflow: {evals[1]} is stale ({why}); its job reruns; a copy of what no stage record vouches " \
                   f"for (metrics.json) is kept in {copy}"
    assert '"reward": 0.9' in (copy / "metrics.json").read_text()
    assert stale.stale_token([evals[1]], tokens) != "" and stale.stale_token([evals[0]], tokens) == ""
    monkeypatch.setattr(stale, "_KNOWN", {})  # a later run: still stale, until rebuilt
    assert stale.stale_outputs(results, table, evals, folders=evals, cache=cache) == {evals[1]: why}
    predictions = evals[0] / "predictions.jsonl"  # what the human exports read
    before = predictions.stat()
    predictions.write_text(predictions.read_text().replace('"good"', '"fine"'))
    os.utime(predictions, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert stale.stale_outputs(results, table, evals, folders=evals, cache=cache) == {
        evals[0]: "damaged: predictions.jsonl does not match the digest its stage recorded", evals[1]: why}
    for method, folder in zip(("zero_shot", "ppo"), evals):  # rebuilt
        shutil.rmtree(folder)
        write_run(results / "eval", "sentiment", method, 0)
    assert stale.stale_outputs(results, table, evals, folders=evals, cache=cache) == {}


def test_a_stage_folder_without_its_record_is_stale_when_read_or_aggregated(tmp_path):
    """A datapool emptied (or its stage.json deleted) was found by no stage.json, so it was never rebuilt and its
    readers read what was left; an emptied evaluation failed the table on every run."""
    from grueflow.io import write_stage_record
    from grueflow.stale import stale_outputs

    results = tmp_path / "results"
    datapool, model = results / "sentiment" / "datapool", results / "sentiment" / "base_model"
    evaluation = results / "eval" / "sentiment" / "ppo" / "seed0"
    for folder in (datapool, model, evaluation):
        folder.mkdir(parents=True)
        (folder / "out.txt").write_text("x")
        write_stage_record(folder, stage="x", params={}, wall_time_s=0.0,
                           inputs={"datapool": datapool} if folder != datapool else {})
    (model / "model").mkdir()
    write_stage_record(evaluation, stage="evaluate", params={}, wall_time_s=0.0,
                       inputs={"datapool": datapool, "model": model / "model", "data": tmp_path / "outside"})
    (tmp_path / "outside").mkdir()  # an input from outside results/ holds no record: none of the check's concern
    other = results / "eval" / "sentiment" / "zero_shot" / "seed0"  # an evaluation the table aggregates
    other.mkdir(parents=True)
    write_stage_record(other, stage="evaluate", params={}, wall_time_s=0.0, inputs={})
    assert stale_outputs(results, tmp_path / "t.csv", [evaluation, other]) == {}
    (model / "stage.json").unlink()
    for path in [*datapool.iterdir(), *other.iterdir()]:
        path.unlink()
    assert stale_outputs(results, tmp_path / "t.csv", [evaluation, other]) == {
        datapool: "damaged: stage.json is missing", model: "damaged: stage.json is missing",
        other: "damaged: stage.json is missing"}
    (evaluation / "stage.json").unlink()  # nothing records the datapool now (a first run stopped after it):
    assert datapool not in stale_outputs(results, tmp_path / "t.csv", [])  # only the suite's folders name it
    assert stale_outputs(results, tmp_path / "t.csv", [], folders=[datapool, results / "concepts" / "datapool"]) == {
        datapool: "damaged: stage.json is missing"}  # one that was never built is no concern of the check
    shutil.rmtree(datapool)
    datapool.write_text("x")  # a file where the folder belongs: Snakemake took it for the output, every run failed
    assert stale_outputs(results, tmp_path / "t.csv", [], folders=[datapool]) == {
        datapool: "a file where the stage's folder belongs"}


def test_a_rerun_of_an_input_stage_leaves_the_digest_stage_json_records_for_it(tmp_path):
    """A folder's digest covered its provenance.json (commit, wall time): a forced or no-op rerun of the datapool
    changed the stage.json of every stage that read it, which content hashes (DVC's .dvcignore) leave out."""
    import json

    from grueflow.io import fingerprint, write_stage_record

    pool = tmp_path / "datapool"
    pool.mkdir()
    (pool / "train.jsonl").write_text('{"prompt": "a"}\n')
    write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=1.0)
    before = fingerprint(pool)
    write_stage_record(pool, stage="prepare_datapool", params={}, inputs={}, wall_time_s=2.5)  # the rerun
    assert json.loads((pool / "provenance.json").read_text())["wall_time_s"] == 2.5
    assert fingerprint(pool) == before
    (pool / "train.jsonl").write_text('{"prompt": "b"}\n')
    assert fingerprint(pool) != before  # the content still counts


def test_a_stage_refuses_the_output_folder_of_another_stage_and_reruns_into_its_own(tmp_path):
    """A stage replaces its --out folder whole: the folder of another stage (as its stage.json, or else its
    provenance.json, names it) is refused before any work; its own folder, or what DVC leaves of it, is not."""
    import argparse
    import json

    from grueflow.config import ConfigError

    out = tmp_path / "seed0"
    out.mkdir()
    (out / "train_metrics.json").write_text("{}")
    stage.finish(out, "rl_finetune", {}, {}, time.perf_counter())
    args = argparse.Namespace(out=out, task_file=tmp_path / "task.yaml")
    with pytest.raises(ConfigError) as refused:
        stage.check_out(out, args, "prepare_datapool")
    assert str(refused.value) == (f"--out {out} holds the output of stage rl_finetune, not prepare_datapool: give "
                                  f"another --out, or delete it if it is not needed")
    stage.check_out(out, args, "rl_finetune")  # a rerun into its own folder
    (out / "stage.json").unlink()  # what DVC leaves before a rerun: provenance.json still names the stage
    with pytest.raises(ConfigError, match=r"holds the output of stage rl_finetune, not prepare_datapool"):
        stage.check_out(out, args, "prepare_datapool")
    stage.check_out(out, args, "rl_finetune")
    (out / "provenance.json").write_text(json.dumps({"git_commit": None, "wall_time_s": 1.0}))
    stage.check_out(out, args, "prepare_datapool")  # a provenance record from before records named their stage
    stage.check_out(tmp_path / "new", args, "prepare_datapool")


def test_a_stage_run_into_another_stages_folder_exits_2_in_one_line_and_leaves_it(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    victim = tmp_path / "victim"
    (victim / "model").mkdir(parents=True)
    (victim / "model" / "model.safetensors").write_bytes(b"w" * 64)
    stage.finish(victim, "rl_finetune", {}, {}, time.perf_counter())
    before = sorted((p.relative_to(victim), p.read_bytes()) for p in victim.rglob("*") if p.is_file())
    task = root / "tests" / "fixtures" / "micro" / "tasks" / "sentiment.yaml"

    def prepare(out):
        return subprocess.run([sys.executable, "stages/prepare_datapool.py", "--task-file", str(task), "--out",
                               str(out), "--log-level", "WARNING"], cwd=root, capture_output=True, text=True,
                              timeout=300)

    result = prepare(victim)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.strip() == (f"error: --out {victim} holds the output of stage rl_finetune, not "
                                     f"prepare_datapool: give another --out, or delete it if it is not needed")
    assert sorted((p.relative_to(victim), p.read_bytes()) for p in victim.rglob("*") if p.is_file()) == before
    pool = tmp_path / "pool"
    for _ in range(2):  # a rerun of the same stage replaces its own folder
        again = prepare(pool)
        assert again.returncode == 0, again.stderr
    assert read_json(pool / "stage.json")["stage"] == read_json(pool / "provenance.json")["stage"] == "prepare_datapool"


@contextlib.contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """``folder`` made unwritable for this process: mode 0o555, or for root (which ignores modes) the immutable
    flag (chattr +i; the test is skipped where the file system has none); undone after."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip(f"chattr +i is not available on {folder}'s file system")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_an_out_under_a_file_or_in_a_folder_it_cannot_write_is_refused_naming_that_folder(tmp_path):
    """atomic_dir writes beside --out, so its parent (or the nearest folder above that exists) must be a folder this
    process can write in; the refusal names it and the cause, before any work."""
    import argparse

    from grueflow.config import ConfigError

    args = argparse.Namespace()
    data = tmp_path / "file.jsonl"
    data.write_text("{}\n")
    with pytest.raises(ConfigError) as refused:
        stage.check_out(data / "pool", args, "prepare_datapool")
    assert str(refused.value) == f"--out {data / 'pool'}: {data} is not a folder; give a path whose parents are folders"
    with pytest.raises(ConfigError, match=rf"^--out {re.escape(str(data))}/a/b: {re.escape(str(data))} is not a "):
        stage.check_out(data / "a" / "b", args, None)
    locked = tmp_path / "locked"
    (locked / "seed0").mkdir(parents=True)
    with unwritable(locked):
        for out in (locked / "seed0", locked / "new" / "seed0"):  # a rerun renames the old folder aside: refused too
            with pytest.raises(ConfigError) as refused:
                stage.check_out(out, args, None)
            assert str(refused.value) == (f"--out {out}: cannot write in {locked}: permission denied; give a folder "
                                          f"this user can write in, or fix its permissions (ls -ld, lsattr -d)")
        with pytest.raises(ConfigError, match=rf"^--resume-dir {re.escape(str(locked))}/r: cannot write in "):
            stage.check_out(tmp_path / "out", argparse.Namespace(resume_dir=locked / "r"), None)
    stage.check_out(tmp_path / "new" / "deeper" / "seed0", args, None)  # folders still to be made: fine


def test_an_output_that_is_a_symlink_is_written_through_and_the_link_kept(tmp_path):
    """A rerun into a symlinked --out replaces the folder the link points to and keeps the link; nothing is left
    beside either (it once left the link renamed aside, dangling, forever)."""
    from grueflow.io import atomic_dir

    target = tmp_path / "store" / "pool"
    target.mkdir(parents=True)
    (target / "old.txt").write_text("old")
    link = tmp_path / "results" / "pool"
    link.parent.mkdir()
    link.symlink_to(target)
    with atomic_dir(link) as tmp:
        (tmp / "new.txt").write_text("new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["pool"]
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["pool"]
    dangling = tmp_path / "results" / "later"
    dangling.symlink_to(tmp_path / "store" / "later")  # a link to a folder not made yet: made through the link
    with atomic_dir(dangling) as tmp:
        (tmp / "x.txt").write_text("x")
    assert dangling.is_symlink() and (tmp_path / "store" / "later" / "x.txt").read_text() == "x"


def test_a_killed_writers_leftover_symlink_is_unlinked_and_what_it_points_to_kept(tmp_path):
    from grueflow.io import _WRITER, remove_leftovers

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    host = _WRITER.rsplit("-", 1)[0]
    target = tmp_path / "store"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"w" * 8)
    aside = tmp_path / f".seed0.{host}-{dead}.0f0f0f.old"
    aside.symlink_to(target)
    gone = tmp_path / f".seed0.{host}-{dead}.1f1f1f.old"
    gone.symlink_to(tmp_path / "nowhere")  # dangling
    assert sorted(remove_leftovers(tmp_path / "seed0")) == sorted([aside, gone])
    assert not os.path.lexists(aside) and not os.path.lexists(gone)
    assert (target / "model.safetensors").read_bytes() == b"w" * 8


@pytest.mark.parametrize("value, written", [
    (30.7123456, 30.712346),  # 6 decimals
    (0.0123456789, 0.0123457),  # below 0.1: 6 significant digits, more than 6 decimals keep
    (3e-7, 3e-7), (-1.23456789e-9, -1.23457e-9),  # never written as 0
    (0.0, 0.0), (123456.1234567, 123456.123457), (7, 7),
])
def test_results_keep_6_decimals_or_6_significant_digits_whichever_keeps_more(value, written):
    from grueflow.io import rounded

    assert rounded(value) == written


def test_the_grue_table_json_keeps_small_values_apart():
    import pandas as pd

    from grueflow.grue import to_nested

    table = pd.DataFrame([{"task": "t", "method": "ppo", "reward": 3e-7, "normalised_score": 1.0},
                          {"task": "t", "method": "zero_shot", "reward": 1e-7, "normalised_score": 0.0}])
    nested = to_nested(table)
    assert nested["t"]["ppo"]["reward"] == 3e-7 and nested["t"]["zero_shot"]["reward"] == 1e-7


def test_a_file_written_atomically_gets_the_mode_a_new_file_gets(tmp_path):
    """mkstemp's 0600 reached every table and record: unreadable by the group, unlike DVC's own 0644."""
    import os

    from grueflow.io import write_text

    write_text(tmp_path / "table.csv", "a,b\n")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "table.csv").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_repository_without_a_commit_records_no_commit(tmp_path, monkeypatch):
    """git rev-parse HEAD prints "HEAD" (and fails) before the first commit: provenance recorded it as the commit."""
    from grueflow.io import _git_commit

    monkeypatch.chdir(tmp_path)
    assert _git_commit() is None  # not a repository
    subprocess.run(["git", "init", "-q"], check=True)
    assert _git_commit() is None  # no commit yet
    monkeypatch.chdir(Path(__file__).parent)
    assert re.fullmatch(r"[0-9a-f]{40}", _git_commit() or "")  # this checkout


def test_a_markdown_row_escapes_pipes_and_line_breaks():
    """A name holding `|` (a metric of one's own, a criterion) split its Markdown table cell in two."""
    from grueflow.io import markdown_row

    row = markdown_row(["cus|tom/a|b", 0.5, "two\r\nlines\nhere", ""])
    assert row == r"| cus\|tom/a\|b | 0.5 | two lines here |  |"


def test_a_markdown_line_makes_each_line_break_a_space():
    """A note's free text holding line breaks (a metric's reason) became Markdown table rows and headings."""
    from grueflow.io import markdown_line

    assert markdown_line("failed:\r\n| a | b |\r## x\n- y\n") == "failed: | a | b | ## x - y "
    assert markdown_line("one line, `code` and | kept") == "one line, `code` and | kept"


def test_shown_cuts_a_long_value_to_one_short_line_with_its_size():
    """A value pasted whole into a params file (2,000,000 characters in one key) was echoed whole in the one-line
    error, the key, the choices and the fix lost at the end of a line no terminal shows."""
    from grueflow.io import shown

    assert shown("lexical/bleu") == "'lexical/bleu'" and shown([1, 2]) == "[1, 2]" and shown(None) == "None"
    assert shown("x" * 80) == "'" + "x" * 76 + "... (80 characters)"
    assert shown("x" * 2_000_000) == "'" + "x" * 76 + "... (2,000,000 characters)"
    assert shown(list(range(5000))) == repr(list(range(5000)))[:77] + "... (5,000 items)"
    assert shown(["y" * 100]) == "['" + "y" * 75 + "... (1 item)"
    assert shown(10 ** 100) == repr(10 ** 100)[:77] + "... (101 characters as written)"


@pytest.mark.parametrize("code, cause, remedy", [
    ("EROFS", "a read-only file system", "run from a writable copy of the project (cp -a PROJECT COPY), or remount it "
                                         "read-write"),
    ("ENOSPC", "the disk is full", "free space"),
    ("EACCES", "permission denied", "run as the user who owns the project, or give this one read and write "
                                    "permission (ls -ld)"),
])
def test_records_that_cannot_be_written_are_named_in_one_line(tmp_path, monkeypatch, code, cause, remedy):
    """The stale check's records on a read-only or full file system ended a dry run in an OSError and its stack."""
    import errno
    import tempfile

    from grueflow.stale import check_records_writable, unusable_line

    records = tmp_path / ".snakemake"
    check_records_writable(records)  # made where missing, and writable: nothing to say
    assert records.is_dir() and list(records.iterdir()) == []
    err = OSError(getattr(errno, code), os.strerror(getattr(errno, code)), str(records / "grueflow-stamped.json"))

    def refused(*args, **kwargs):
        raise err

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refused)
    with pytest.raises(DataError) as found:
        check_records_writable(records)
    assert str(found.value) == (f"{records}/ cannot be written ({cause}): Snakemake keeps its lock and records of jobs "
                                f"there, and grueflow its stale check's stamps, on every run, a dry run too; {remedy}, "
                                f"and rerun")
    assert unusable_line(err) == (f"the stale check could not use {records / 'grueflow-stamped.json'} ({cause}); "
                                  f"{remedy}, and rerun (no job ran)")
