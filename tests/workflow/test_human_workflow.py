"""The human-evaluation rules in a real Snakemake run (issue 7): export from evaluate outputs, answers
from data/human/, import, the table; and `rule all` (what `make run` builds) does not include them."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from grueflow.human import batch as hb
from grueflow.human.answers import AnswerStore
from grueflow.io import write_stage_record
from tests.conftest import ROOT, copy_project, git_init, run

DATA = Path(os.environ.get("GRUEFLOW_SHARED_DATA", ROOT.parent / "shared" / "data"))
IMDB = DATA / "human_eval_examples" / "likert" / "IMDB_sentiment_completion_example_input.csv"
METHODS = ("zero_shot", "supervised", "ppo", "supervised+ppo")  # the micro suite's methods
PAIR = "supervised+ppo_vs_supervised_seed0"

pytestmark = pytest.mark.slow


def fake_evaluate_outputs(repo: Path) -> int:
    """predictions.jsonl of every micro-suite method on the sentiment task, made from the RL4LMs IMDB example
    rows (each method's completion cut differently); returns the number of samples."""
    if not IMDB.exists():
        pytest.skip(f"shared data file {IMDB} is absent (set GRUEFLOW_SHARED_DATA)")
    with open(IMDB, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for k, method in enumerate(METHODS):
        out = repo / "results" / "eval" / "sentiment" / method / "seed0"
        out.mkdir(parents=True)
        (out / "provenance.json").write_text('{"stage": "evaluate"}\n')  # what a stage writes first: not hand-made
        with open(out / "predictions.jsonl", "w", encoding="utf-8") as handle:
            for i, row in enumerate(rows):
                handle.write(json.dumps({"id": f"s{i}", "prompt": row["prompt"], "references": [], "scores": {},
                                         "generation": row["machine_completion"][3 * k:]}) + "\n")
    return len(rows)


def snakemake(repo: Path, *targets: str, rules: tuple[str, ...]) -> str:
    # --allowed-rules: the faked evaluate outputs are taken as they are, never rebuilt
    return run(["snakemake", *targets, "--cores", "1", "--allowed-rules", *rules], repo).stdout


def test_export_annotate_import_table_through_snakemake(tmp_path: Path) -> None:
    repo = copy_project(tmp_path / "repo")
    n = fake_evaluate_outputs(repo)
    dry = run(["snakemake", "-n", "--cores", "1"], repo).stdout  # the default target: rule all
    assert "export_human" not in dry and "import_human_eval" not in dry and "human_eval_table" not in dry

    snakemake(repo, "results/human/sentiment/batches/likert_seed0", f"results/human/sentiment/batches/{PAIR}",
              rules=("export_human_likert", "export_human_pairwise"))
    batches = repo / "results" / "human" / "sentiment" / "batches"
    likert = hb.read_batch(batches / "likert_seed0")
    pairwise = hb.read_batch(batches / PAIR)
    assert len(likert.items) == 4 * n and {i["algorithm"] for i in likert.items} == set(METHODS)
    assert len(pairwise.items) == n and likert.criteria_set == "sentiment"
    key = hb.read_key(repo / "results" / "human" / "sentiment" / "keys" / f"{PAIR}.json")
    assert sorted(set(key.values())) == ["supervised", "supervised+ppo"]
    # DVC's stage runs the same CLI on the same predictions: the same batch and key, byte for byte
    exported = {p: p.read_bytes() for p in (batches / PAIR / hb.ITEMS, batches / PAIR / hb.UPLOAD,
                                            repo / "results" / "human" / "sentiment" / "keys" / f"{PAIR}.json")}
    git_init(repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "faked evaluate outputs"], repo)
    run(["dvc", "repro", "--single-item", "export_human_pairwise@sentiment-ppo-0"], repo)
    assert {p: p.read_bytes() for p in exported} == exported
    key_file = repo / "results" / "human" / "sentiment" / "keys" / f"{PAIR}.json"  # DVC kept it out of its cache,
    assert key_file.stat().st_mode & 0o777 == 0o600  # so it is neither made 0644 by a checkout nor pushed
    assert (batches / PAIR / "stage.json").stat().st_mtime > (batches / "likert_seed0" / "stage.json").stat().st_mtime

    # the human step: two annotators; alice scores supervised+ppo's coherence 5 and everything else 2,
    # bob gives 4 and 1; in the pairwise batch alice always prefers supervised+ppo, bob does except one tie
    store = AnswerStore(repo / "data" / "human" / "sentiment" / "likert_seed0" / "answers.jsonl", likert)
    for annotator, (high, low) in (("alice", (5, 2)), ("bob", (4, 1))):
        for item in likert.items:
            store.append(annotator, item["item_id"],
                         {"coherence": high if item["algorithm"] == "supervised+ppo" else low, "sentiment": 3})
    pair_store = AnswerStore(repo / "data" / "human" / "sentiment" / PAIR / "answers.jsonl", pairwise)
    for item in pairwise.items:
        side = "A" if key[item["choice_A_id"]] == "supervised+ppo" else "B"
        pair_store.append("alice", item["item_id"], {"choice": side})
        pair_store.append("bob", item["item_id"], {"choice": "tie" if item is pairwise.items[0] else side})

    snakemake(repo, "results/human_eval_table.csv", rules=("import_human_eval", "human_eval_table"))
    with open(repo / "results" / "human_eval_table.csv", newline="", encoding="utf-8") as handle:
        table = {(r["kind"], r["method"], r["measure"]): r for r in csv.DictReader(handle)}
    coherence = table[("likert", "supervised+ppo", "coherence")]
    assert (coherence["n"], coherence["n_judgments"], float(coherence["value"])) == (str(n), str(2 * n), 4.5)
    assert float(table[("likert", "zero_shot", "coherence")]["value"]) == 1.5  # (2 + 1) / 2 on every item
    win = table[("pairwise", "supervised+ppo", "win_rate_vs:supervised")]
    assert (win["n"], win["ties"], float(win["value"]), win["interval"]) == (str(2 * n - 1), "1", 1.0, "Wilson 95%")
    assert "## Agreement" in (repo / "results" / "human_eval_table.md").read_text()
    prefs = [json.loads(line) for line in
             (repo / "results" / "human" / "sentiment" / "imported" / PAIR / "preferences.jsonl").open()]
    assert len(prefs) == 2 * n - 1 and {p["chosen_system"] for p in prefs} == {"supervised+ppo"}
    # the answered batches and the pairwise key, kept before anything could re-export them; once per content
    replaced = repo / ".grueflow" / "replaced" / "results" / "human" / "sentiment"
    assert [p.name.split("@")[0] for p in sorted((replaced / "batches").iterdir())] == ["likert_seed0", PAIR]
    assert [p.name.split("@")[0] for p in (replaced / "keys").iterdir()] == [f"{PAIR}.json"]
    nothing = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", "--allowed-rules",
                   "import_human_eval", "human_eval_table"], repo)
    assert "Nothing to be done" in nothing.stdout and "has answers in" not in nothing.stderr
    # the pairwise key emptied: every run failed on it, and nothing re-exported it (it is in no manifest)
    table_before = (repo / "results" / "human_eval_table.csv").read_bytes()
    key_file.write_text("{}\n")
    exports = ("export_human_likert", "export_human_pairwise", "import_human_eval", "human_eval_table")
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", "--allowed-rules", *exports], repo)
    assert (f"grueflow: results/human/sentiment/keys/{PAIR}.json is stale (it is not what its stage wrote (edited or "
            f"replaced since)); its job reruns") in dry.stderr
    snakemake(repo, "results/human_eval_table.csv", rules=exports)
    assert key_file.read_bytes() == exported[key_file]  # the seeded export: the same key again
    assert (repo / "results" / "human_eval_table.csv").read_bytes() == table_before
    # the table's Markdown deleted, or an answer appended to an answers file in place: each was "Nothing to be done"
    (repo / "results" / "human_eval_table.md").unlink()
    allowed = ["--allowed-rules", "import_human_eval", "human_eval_table"]
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo)
    assert "grueflow: results/human_eval_table.csv is stale (results/human_eval_table.md, written with it, is " \
           "missing); its job reruns" in dry.stderr and "human_eval_table" in dry.stdout
    snakemake(repo, "results/human_eval_table.csv", rules=("import_human_eval", "human_eval_table"))
    assert (repo / "results" / "human_eval_table.md").is_file()
    store.append("carol", likert.items[0]["item_id"], {"coherence": 1, "sentiment": 1})  # the folder keeps its time
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo).stdout
    assert "import_human_eval" in dry and "human_eval_table" in dry
    snakemake(repo, "results/human_eval_table.csv", rules=("import_human_eval", "human_eval_table"))
    answers = repo / "data" / "human" / "sentiment" / "likert_seed0" / "answers.jsonl"
    stamp = answers.stat().st_mtime_ns
    answers.write_text(answers.read_text().replace('"coherence": 1', '"coherence": 2'))  # cp -p: content, old time
    os.utime(answers, ns=(stamp, stamp))
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo).stdout
    assert "import_human_eval" in dry
    snakemake(repo, "results/human_eval_table.csv", rules=("import_human_eval", "human_eval_table"))
    answers.rename(answers.with_name("answers {batch} (1).jsonl"))  # braces: Snakemake read a wildcard there
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo).stdout
    assert "import_human_eval" in dry
    (repo / "data" / "human" / "sentiment" / "likert_seed1").mkdir()  # a placeholder batch folder, no answers yet:
    (repo / "data" / "human" / "sentiment" / "likert_seed1" / ".gitkeep").touch()  # it held back every batch
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo).stdout
    assert "likert_seed1" not in dry
    # answers the table would leave out without a word: a batch folder that is a link (answers on a shared drive;
    # Snakemake's glob never entered it), a folder named as no batch, a batch folder DVC tracks and no pull fetched
    human = repo / "data" / "human" / "sentiment"
    shared = tmp_path / "shared_drive"
    shared.mkdir()
    (human / PAIR).rename(shared / PAIR)
    (human / PAIR).symlink_to(shared / PAIR)
    snakemake(repo, "results/human_eval_table.csv", rules=("import_human_eval", "human_eval_table"))
    with open(repo / "results" / "human_eval_table.csv", newline="", encoding="utf-8") as handle:
        kinds = {r["kind"] for r in csv.DictReader(handle)}
    assert kinds == {"likert", "pairwise"}  # the linked batch is imported
    (human / "likert-seed0").mkdir()
    (human / "likert-seed0" / "answers.jsonl").write_text("")
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo, check=False)
    assert dry.returncode != 0 and "Traceback" not in dry.stdout + dry.stderr
    assert (f"data/human/sentiment/likert-seed0/ is named as no batch: a batch folder is named likert_seed<k> or "
            f"<method_a>_vs_<method_b>_seed<k>") in dry.stdout + dry.stderr
    shutil.rmtree(human / "likert-seed0")
    (human / PAIR).unlink()
    (human / f"{PAIR}.dvc").write_text(f"outs:\n- md5: 0.dir\n  path: {PAIR}\n")
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo, check=False)
    assert dry.returncode != 0 and (f"data/human/sentiment/{PAIR}.dvc tracks data/human/sentiment/{PAIR}, which this "
                                    f"checkout lacks: run dvc pull (or dvc checkout) first") in dry.stdout + dry.stderr
    (human / f"{PAIR}.dvc").unlink()
    (repo / "data" / "human" / "sentimnet").mkdir()  # another suite's task, or a typo: named, not imported
    (shared / PAIR).rename(repo / "data" / "human" / "sentimnet" / PAIR)
    dry = run(["snakemake", "-n", "results/human_eval_table.csv", "--cores", "1", *allowed], repo)
    assert ("grueflow: warning: data/human/sentimnet/ is not imported: sentimnet is no task of this suite (sentiment, "
            "concepts)") in dry.stderr
    assert "human_eval_table" in dry.stdout  # the pairwise batch's rows leave the table


def test_a_batch_exported_again_before_any_answer_is_kept_with_its_key_under_both_engines(tmp_path: Path) -> None:
    """A batch exported and sent to annotators (no answers back yet) was exported again after an upstream change
    with no line and no copy, under Snakemake and DVC alike: its key, the only map from the item ids the annotators
    are answering to the systems, was gone. A fresh export and a run with nothing to do say nothing."""
    repo = copy_project(tmp_path / "repo")
    fake_evaluate_outputs(repo)
    evaluated = repo / "results" / "eval" / "sentiment"
    for method in METHODS:  # whole stage folders, as evaluate leaves them
        write_stage_record(evaluated / method / "seed0", stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    target, rules = f"results/human/sentiment/batches/{PAIR}", ("export_human_pairwise",)
    fresh = run(["snakemake", target, "--cores", "1", "--allowed-rules", *rules], repo)
    assert "grueflow:" not in fresh.stderr
    nothing = run(["snakemake", target, "--cores", "1", "--allowed-rules", *rules], repo)
    assert "Nothing to be done" in nothing.stdout + nothing.stderr and "grueflow:" not in nothing.stderr
    folder, key = repo / target, repo / "results" / "human" / "sentiment" / "keys" / f"{PAIR}.json"
    replaced = repo / ".grueflow" / "replaced" / "results" / "human" / "sentiment"
    assert not replaced.exists()

    def change_predictions(cut: int) -> None:  # an upstream change: evaluate writes other generations
        predictions = repo / "results" / "eval" / "sentiment" / "supervised+ppo" / "seed0" / "predictions.jsonl"
        rows = [json.loads(line) for line in predictions.read_text().splitlines()]
        fresh_file = predictions.with_name(".predictions.jsonl.tmp")
        fresh_file.write_text("".join(json.dumps({**r, "generation": r["generation"][cut:]}) + "\n" for r in rows))
        os.replace(fresh_file, predictions)  # as a stage writes: the folder's time moves
        write_stage_record(predictions.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)

    before, old_key = hb.read_batch(folder), key.read_bytes()
    change_predictions(2)
    again = run(["snakemake", target, "--cores", "1", "--allowed-rules", *rules], repo)
    after = hb.read_batch(folder)
    assert after.tag != before.tag
    kept, = (replaced / "batches").iterdir()
    kept_key, = (replaced / "keys").iterdir()
    assert (f"grueflow: {target} is exported again, replacing it; a copy of it is kept in "
            f".grueflow/replaced/{target}@") in again.stderr
    assert hb.read_batch(kept).tag == before.tag and (kept_key / key.name).read_bytes() == old_key

    git_init(repo)  # DVC removes a stage's outs before its command, unless they persist
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "faked evaluate outputs"], repo)
    run(["dvc", "repro", "--single-item", "export_human_pairwise@sentiment-ppo-0"], repo)  # the same batch: no copy
    assert len(list((replaced / "batches").iterdir())) == 1
    dvc_key = key.read_bytes()
    change_predictions(2)
    dvc = run(["dvc", "repro", "--single-item", "export_human_pairwise@sentiment-ppo-0"], repo)
    assert (f"grueflow: {target} holds batch {after.tag}, which this export replaces by batch "
            f"{hb.read_batch(folder).tag}; a copy of it is kept in .grueflow/replaced/{target}@") in dvc.stderr
    copies = [p for p in (replaced / "keys").iterdir() if p != kept_key]
    assert len(copies) == 1 and (copies[0] / key.name).read_bytes() == dvc_key


def test_dvc_checkout_of_an_older_batch_without_its_key_keeps_the_key_found_and_writes_the_batchs_own(
        tmp_path: Path) -> None:
    """`git checkout` of an older commit and `dvc checkout` put the pairwise batch folder back from DVC's cache, but
    not its key (`cache: false`, results/ git-ignored): `dvc repro` then stopped with "the key exists for batch ...;
    choose another --key path or delete it if that batch is abandoned", and that key, the newer batch's, was in no
    copy. The export keeps it with its digest record, says so, and writes the restored batch's own key."""
    repo = copy_project(tmp_path / "repo")
    fake_evaluate_outputs(repo)
    evaluated = repo / "results" / "eval" / "sentiment"
    for method in METHODS:
        write_stage_record(evaluated / method / "seed0", stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    run_folder = evaluated / "supervised+ppo" / "seed0"
    original = {name: (run_folder / name).read_bytes() for name in ("predictions.jsonl", "stage.json")}
    stage, target = "export_human_pairwise@sentiment-ppo-0", f"results/human/sentiment/batches/{PAIR}"
    folder, key = repo / target, repo / "results" / "human" / "sentiment" / "keys" / f"{PAIR}.json"
    git_init(repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "project"], repo)
    run(["dvc", "repro", "--single-item", stage], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "older batch"], repo)
    older, older_key = hb.read_batch(folder), key.read_bytes()
    rows = [json.loads(line) for line in original["predictions.jsonl"].decode().splitlines()]
    (run_folder / "predictions.jsonl").write_text("".join(json.dumps({**r, "generation": r["generation"][2:]}) + "\n"
                                                          for r in rows))
    write_stage_record(run_folder, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    run(["dvc", "repro", "--single-item", stage], repo)
    run(["git", "add", "-A"], repo)
    run(["git", "commit", "-qm", "newer batch"], repo)
    newer, newer_key = hb.read_batch(folder), key.read_bytes()
    assert newer.tag != older.tag
    run(["git", "checkout", "-q", "HEAD~1"], repo)
    run(["dvc", "checkout", stage], repo)  # the evaluate outputs are faked, in no DVC cache: put back by hand
    for name, content in original.items():  # as dvc checkout restores the evaluate stage's outs in a whole project
        (run_folder / name).write_bytes(content)
    assert hb.read_batch(folder).tag == older.tag and key.read_bytes() == newer_key
    repro = run(["dvc", "repro", "--single-item", stage], repo)
    copy, = (p for p in (repo / ".grueflow" / "replaced" / "results" / "human" / "sentiment" / "keys").iterdir()
             if (p / key.name).read_bytes() == newer_key)
    assert (f"grueflow: results/human/sentiment/keys/{PAIR}.json holds the key of batch {newer.tag}, but {target} "
            f"holds batch {older.tag} (a batch folder put back without its key: `dvc checkout` restores a batch "
            f"folder, but not its key, which DVC does not cache); a copy of that key, with its digest record, is kept "
            f"in {copy.relative_to(repo)}; this export writes the key of batch {older.tag} there") in repro.stderr
    assert key.read_bytes() == older_key and (copy / f".{key.name}.record.json").is_file()
    assert "modified" not in run(["dvc", "status", stage], repo).stdout
