"""The GRUE table: means and stds over seeds, empty cells for missing metrics, normalised scores."""

import json
import math
import re

import pandas as pd
import pytest

from grueflow import grue
from grueflow.config import GRUE_SCORE


def run(task, method, seed, reward, ppl, extra):
    return {"task": task, "method": method, "seed": seed, "headline": ["task/score", "lexical/x"],
            "metrics": {"reward": reward, "fluency/perplexity": ppl, "task/score": reward, **extra}}


RUNS = [
    run("a", "zero_shot", 0, 0.1, 10.0, {"lexical/x": None}),
    run("a", "zero_shot", 1, 0.3, 12.0, {"lexical/x": None}),
    run("a", "ppo", 0, 0.8, 14.0, {"lexical/x": None}),
    run("a", "ppo", 1, 1.0, 16.0, {"lexical/x": None}),
    run("a", "supervised", 0, 0.5, 11.0, {"lexical/x": None}),
    run("a", "supervised", 1, 0.5, 11.0, {"lexical/x": None}),
]


def test_table_rows_means_and_stds(tmp_path):
    table = grue.build_table(RUNS)
    assert list(table["method"]) == ["zero_shot", "supervised", "ppo"]
    ppo = table[table.method == "ppo"].iloc[0]
    assert ppo["n_seeds"] == 2
    assert ppo["reward"] == pytest.approx(0.9)
    assert ppo["reward_std"] == pytest.approx(math.sqrt(0.02))
    assert ppo["fluency_ppl"] == pytest.approx(15.0)
    assert math.isnan(ppo["lexical/x"])  # cannot be computed: empty, never 0
    # normalised over methods: reward and task/score (0.2, 0.5, 0.9), inverted perplexity (11, 11, 15)
    assert table["normalised_score"].tolist() == pytest.approx([(0 + 1 + 0) / 3, (3 / 7 + 1 + 3 / 7) / 3, (1 + 0 + 1) / 3])
    missing = grue.missing_metrics([{**RUNS[0], "missing": {"spice": "metric 'spice' needs Java"}}, *RUNS[1:]])
    assert missing == {"a": {"spice": "metric 'spice' needs Java"}}
    grue.write_table(table, tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.json", grue.headlines(RUNS), missing)
    csv = pd.read_csv(tmp_path / "t.csv")
    assert list(csv.columns[:7]) == ["task", "method", "n_seeds", "reward", "reward_std", "fluency_ppl", "fluency_ppl_std"]
    assert csv["lexical/x"].isna().all()
    nested = json.loads((tmp_path / "t.json").read_text())
    assert nested["a"]["ppo"]["reward"] == pytest.approx(0.9)
    assert "lexical/x" not in nested["a"]["ppo"]
    assert set(nested["grue_score"]) == {"zero_shot", "supervised", "ppo"}
    markdown = (tmp_path / "t.md").read_text()
    assert "| lexical/x |" in markdown and "| — |" in markdown  # shown as missing, not dropped, never 0
    assert "- missing `spice`: metric 'spice' needs Java" in markdown
    other = [run("b", "ppo", 0, 0.5, 9.0, {"lexical/y": 1.0}) | {"headline": ["lexical/y"]}]
    both = grue.to_markdown(grue.build_table(RUNS + other), grue.headlines(RUNS + other))
    task_a, task_b = both.split("## a")[1].split("## b")
    assert "lexical/x" in task_a and "lexical/y" not in task_a  # each task shows its own headline metrics
    assert "lexical/y" in task_b and "lexical/x" not in task_b


def test_the_end_of_training_kl_is_a_column_but_not_part_of_the_score():
    kl = {"zero_shot": None, "supervised": None, "ppo": 3.0}
    runs = [{**r, "headline": [*r["headline"], "train/kl"],
             "metrics": {**r["metrics"], **({"train/kl": kl[r["method"]]} if kl[r["method"]] is not None else {})}}
            for r in RUNS]
    table = grue.build_table(runs)
    assert table["train/kl"].isna().tolist() == [True, True, False]  # RL rows only
    assert table["normalised_score"].tolist() == pytest.approx(grue.build_table(RUNS)["normalised_score"].tolist())


def write_run(eval_dir, task, method, seed, value=0.5, stage="evaluate", params=None):
    """An evaluate output folder as the stage writes it: metrics.json and predictions.jsonl, then stage.json with
    their manifest."""
    from grueflow.io import write_json, write_jsonl, write_stage_record

    folder = eval_dir / task / method / f"seed{seed}"
    folder.mkdir(parents=True)
    write_json(folder / "metrics.json", {"task": task, "method": method, "seed": seed, "headline": [],
                                         "metrics": {"reward": value, "fluency/perplexity": 3.0}, "missing": {}})
    write_jsonl(folder / "predictions.jsonl", [{"id": f"test-{i}", "prompt": f"prompt {i}", "generation": "good",
                                                "references": ["ref"], "scores": {"reward": value}} for i in range(2)])
    write_stage_record(folder, stage=stage, params=params or {}, inputs={}, wall_time_s=0.0)
    return folder / "metrics.json"


def test_aggregate_reads_only_runs_that_are_what_their_folder_says(tmp_path):
    import shutil

    from grueflow.io import DataError

    paths = [write_run(tmp_path, "sentiment", m, 0) for m in ("zero_shot", "ppo")]
    assert [r["method"] for r in grue.load_runs(paths)] == ["zero_shot", "ppo"]

    shutil.rmtree(paths[0].parent)  # a run copied over another method's folder: never that method's row
    shutil.copytree(paths[1].parent, paths[0].parent)
    with pytest.raises(DataError, match=r"zero_shot/seed0/metrics.json holds the run \{'task': 'sentiment', "
                                        r"'method': 'ppo', 'seed': '0'\}, not the run its folder names"):
        grue.load_runs(paths)

    edited = write_run(tmp_path / "other", "sentiment", "ppo", 0)
    edited.write_text(edited.read_text().replace("0.5", "0.9"))  # a value edited by hand (same size)
    with pytest.raises(DataError, match=r"is damaged: metrics.json does not match the digest its stage recorded"):
        grue.load_runs([edited])
    cut = write_run(tmp_path / "cut", "sentiment", "ppo", 0)
    cut.write_text("{")
    with pytest.raises(DataError, match="is damaged: metrics.json has 1 bytes where its stage wrote"):
        grue.load_runs([cut])


@pytest.mark.parametrize("text, shown", [("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e400", "Infinity"),
                                         ("NaN", "NaN"), ('"0.5"', "\"0.5\" (a string)"), ("true", "true (a boolean)"),
                                         ("[0.5]", "[0.5] (a list)")])
def test_aggregate_refuses_a_metric_value_that_is_no_finite_number_or_null(tmp_path, text, shown):
    """A metrics.json reward edited to Infinity (its record re-written to match) ended the aggregate in the JSON
    writer's traceback; a string "0.5" or true was averaged as 0.5 or 1 without a word."""
    from grueflow.io import DataError, write_stage_record

    path = write_run(tmp_path, "sentiment", "ppo", 0)
    path.write_text(path.read_text().replace('"reward": 0.5', f'"reward": {text}'))
    write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: metric 'reward' is {re.escape(shown)}; a metric "
                                        r"value is a finite number or null \(not computed\), as evaluate writes it: "
                                        r"rerun evaluate for it \(delete its folder and rerun the pipeline\)$"):
        grue.load_runs([path])
    for text in ("null", "-3", "0.25"):  # what evaluate writes
        path = write_run(tmp_path / text, "sentiment", "ppo", 0)
        path.write_text(path.read_text().replace('"reward": 0.5', f'"reward": {text}'))
        write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
        assert grue.load_runs([path])[0]["metrics"]["reward"] == json.loads(text)


@pytest.mark.parametrize("old, new, shown", [
    ('"headline": []', '"headline": [1]', "headline holds 1, which names no metric"),
    ('"missing": {}', '"missing": {"bleu": 2}', 'missing is {"bleu": 2}, not a mapping of metric names to reasons'),
    ('"missing": {}', '"missing": ["bleu"]', 'missing is ["bleu"], not a mapping of metric names to reasons')])
def test_aggregate_refuses_a_headline_or_missing_entry_that_names_no_metric(tmp_path, old, new, shown):
    """A metrics.json headline entry edited to a number (its record re-written to match) ended the aggregate in a
    TypeError traceback."""
    from grueflow.io import DataError, write_stage_record

    path = write_run(tmp_path, "sentiment", "ppo", 0)
    path.write_text(path.read_text().replace(old, new))
    write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: {re.escape(shown)} \(evaluate writes metric "
                                        r"names there\): rerun evaluate for it"):
        grue.load_runs([path])


def test_aggregate_refuses_a_headline_metric_with_neither_a_value_nor_a_reason(tmp_path):
    """A metrics.json headline naming custom/nothere, which neither metrics nor missing held (a hand edit, its
    record re-written to match), gave a column of empty cells that no note explained."""
    from grueflow.io import DataError, write_stage_record

    path = write_run(tmp_path, "sentiment", "ppo", 0)
    path.write_text(path.read_text().replace('"headline": []', '"headline": ["fluency/perplexity", "custom/nothere"]'))
    write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: headline names custom/nothere, which metrics and "
                                        r"missing do not hold, so its cells would be empty with no reason: rerun "
                                        r"evaluate for it \(delete its folder and rerun the pipeline\)$"):
        grue.load_runs([path])
    for headline, missing in (('"custom/x", "train/kl"', '{"custom/x": "needs Java"}'),  # a reason; a zero-shot KL
                              ('"fluency/perplexity"', "{}")):
        path = write_run(tmp_path / headline[1:5], "sentiment", "zero_shot", 0)
        path.write_text(path.read_text().replace('"headline": []', f'"headline": [{headline}]')
                        .replace('"missing": {}', f'"missing": {missing}'))
        write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
        assert grue.load_runs([path])[0]["headline"] == json.loads(f"[{headline}]")


def test_huge_finite_metric_values_give_finite_means_stds_and_scores(tmp_path):
    """A seed's rougeL of 1e200 (a hand edit evaluate never writes, but finite) overflowed the squares of the std:
    the table held inf, and writing its JSON ended the aggregate in a traceback."""
    runs = [run("a", "zero_shot", 0, 0.1, 10.0, {"lexical/x": 0.2}), run("a", "zero_shot", 1, 0.3, 12.0,
                                                                          {"lexical/x": 1e200}),
            run("a", "ppo", 0, 1e308, 14.0, {"lexical/x": 0.4}), run("a", "ppo", 1, 1.5e308, 16.0, {"lexical/x": 0.6}),
            run("a", "supervised", 0, -1.7e308, 11.0, {"lexical/x": 0.5})]
    table = grue.build_table(runs).set_index("method")
    assert table.loc["zero_shot", "lexical/x"] == pytest.approx(5e199)
    assert table.loc["zero_shot", "lexical/x_std"] == pytest.approx(1e200 / math.sqrt(2))
    assert table.loc["ppo", "reward"] == pytest.approx(1.25e308)  # the seeds' sum is past a float
    assert table.loc["ppo", "reward_std"] == pytest.approx(0.5e308 / math.sqrt(2))
    # the rewards of ppo and supervised differ by more than a float holds: normalised all the same (reward and
    # task/score, inverted perplexity, lexical/x)
    reward = 1.7 / (1.25 + 1.7)
    assert table["normalised_score"].to_dict() == pytest.approx({"zero_shot": (2 * reward + 1 + 1) / 4,
                                                                 "supervised": (0 + 0 + 1 + 0) / 4,
                                                                 "ppo": (1 + 1 + 0 + 0) / 4})
    grue.write_table(table.reset_index(), tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.json",
                     grue.headlines(runs))
    written = [(tmp_path / f"t.{suffix}").read_text() for suffix in ("csv", "md", "json")]
    assert not [text for text in written if "inf" in text.lower()]
    assert json.loads(written[2])["a"]["zero_shot"]["lexical/x"] == pytest.approx(5e199)


def test_seeds_whose_std_no_float_holds_are_refused():
    """Seeds of 1.7e308 and -1.7e308 (hand edits) have a std past a float: it was written as inf."""
    from grueflow.io import DataError

    runs = [run("a", "ppo", 0, 0.1, 10.0, {"lexical/x": 1.7e308}),
            run("a", "ppo", 1, 0.3, 12.0, {"lexical/x": -1.7e308})]
    with pytest.raises(DataError, match=r"^the lexical/x values of a/ppo's seeds \(1.7e\+308, -1.7e\+308\) spread "
                                        r"wider than a float holds \(1.8e308\), so their std cannot be written: check "
                                        r"their metrics.json, or rerun evaluate for them \(delete their folders and "
                                        r"rerun the pipeline\)$"):
        grue.build_table(runs)


@pytest.mark.parametrize("value, shown", [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"),
                                          (10 ** 400, f"{'1' + '0' * 19}... (an integer too large for a float)"),
                                          ("0.5", '"0.5"'), (True, "true")])
def test_a_grue_table_holds_finite_numbers_or_null(value, shown):
    """A GRUE table edited to hold NaN or Infinity passed grueflow diff's check: NaN was shown as unknown and
    Infinity as a change; a 400-digit integer failed inside dvc, naming no key."""
    table = {"sentiment": {"ppo": {"reward": 0.5}}, GRUE_SCORE: {"ppo": 0.5}}
    for where, edited in (("sentiment.ppo.reward", {**table, "sentiment": {"ppo": {"reward": value}}}),
                          ("grue_score.ppo", {**table, GRUE_SCORE: {"ppo": value}})):
        assert grue.grue_table_problem(edited) == f"{where} is {shown}, where a GRUE table holds a finite number or " \
                                                   f"null"
    for value in (None, -3, 10 ** 300, 1e-300):  # aggregate writes null for a metric not computed
        assert grue.grue_table_problem({**table, "sentiment": {"ppo": {"reward": value}}}) is None


def test_a_metric_name_holding_a_pipe_keeps_the_markdown_table_in_columns():
    """A metric of one's own named cus|tom/a|b split the task's Markdown header into more cells than its rows had:
    a viewer showed the values under the wrong headings."""
    runs = [run("a", m, 0, r, 10.0, {"cus|tom/a|b": r}) | {"headline": ["cus|tom/a|b"]}
            for m, r in (("zero_shot", 0.1), ("ppo", 0.9))]
    markdown = grue.to_markdown(grue.build_table(runs), grue.headlines(runs))
    section = markdown.split("## a\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert r"| cus\|tom/a\|b |" in section[0]
    assert len({len(re.split(r"(?<!\\)\|", line)) for line in section}) == 1  # cells split at unescaped pipes


def test_a_missing_metric_reason_over_several_lines_stays_one_note_in_the_markdown():
    """A missing metric's reason with line breaks (evaluate keeps a scorer's error message as it is) wrote its
    lines into grue_table.md as they were: a table row and a section heading of their own."""
    runs = [run("a", m, 0, r, 10.0, {"lexical/x": None}) | {"missing": {"lexical/x": "failed:\n| a | b |\n## x"}}
            for m, r in (("zero_shot", 0.1), ("ppo", 0.9))]
    markdown = grue.to_markdown(grue.build_table(runs), grue.headlines(runs), grue.missing_metrics(runs))
    assert "\n- missing `lexical/x`: failed: | a | b | ## x\n" in markdown
    assert [line for line in markdown.splitlines() if line.startswith("#")] == [
        "# GRUE table", "## a", "## GRUE score (mean normalised score over tasks)"]


def test_the_table_says_whether_nlpo_was_evaluated_with_its_masks():
    runs = RUNS + [run("a", "nlpo", 0, 0.7, 12.0, {}) | {"nlpo_masks": True},
                   run("a", "supervised+nlpo", 0, 0.6, 12.0, {}) | {"nlpo_masks": False}]
    table = grue.build_table(runs)
    masks = dict(zip(table.method, table.nlpo_masks))
    assert masks["nlpo"] == "with masks" and masks["supervised+nlpo"] == "without masks"
    assert pd.isna(masks["ppo"])
    markdown = grue.to_markdown(table, grue.headlines(runs))
    assert "| nlpo_masks |" in markdown and "| with masks |" in markdown and "| without masks |" in markdown
    assert "nlpo_masks" not in grue.to_markdown(grue.build_table(RUNS), grue.headlines(RUNS))


def test_a_method_missing_a_headline_value_gets_no_normalised_score():
    """Ranked on fewer metrics, a degenerate method (no text: no distinct-2) would score best."""
    headline = ["diversity/distinct_2", "lexical/rougeL"]
    runs = [{"task": "t", "method": method, "seed": 0, "headline": headline,
             "metrics": {"reward": reward, "fluency/perplexity": 10.0, "diversity/distinct_2": distinct,
                         "lexical/rougeL": rouge}}
            for method, reward, distinct, rouge in [("zero_shot", 0.5, 0.9, 0.3), ("supervised", 0.6, 0.8, 0.4),
                                                    ("ppo", 0.6, None, None)]]
    table = grue.build_table(runs).set_index("method")
    assert math.isnan(table.loc["ppo", "normalised_score"])
    assert table.loc["zero_shot", "normalised_score"] == pytest.approx(1 / 3)  # reward 0, distinct 1, rouge 0
    assert table.loc["supervised", "normalised_score"] == pytest.approx(2 / 3)


def test_a_method_missing_a_headline_value_the_others_tie_on_gets_no_normalised_score():
    """The methods that had a value tied on it, so the metric was dropped for all and the method lacking it was
    scored on fewer metrics like the others (as if it had the value)."""
    headline = ["diversity/distinct_2", "lexical/rougeL"]
    runs = [{"task": "t", "method": method, "seed": 0, "headline": headline,
             "metrics": {"reward": reward, "fluency/perplexity": 10.0, "diversity/distinct_2": distinct,
                         "lexical/rougeL": rouge}}
            for method, reward, distinct, rouge in [("zero_shot", 0.5, 0.9, 1.0), ("supervised", 0.6, 0.8, 1.0),
                                                    ("ppo", 0.7, 0.7, None)]]
    table = grue.build_table(runs)
    assert table.set_index("method")["normalised_score"].to_dict() == pytest.approx(
        {"zero_shot": 0.5, "supervised": 0.5, "ppo": math.nan}, nan_ok=True)  # the tie adds nothing to theirs
    assert grue.grue_tasks(table) == ([], {"t": "no normalised score for ppo (no lexical/rougeL); left out for every "
                                                "method so that all are scored over the same tasks"})
    alike = [{**r, "metrics": {**r["metrics"], "reward": 0.5, "diversity/distinct_2": 0.9}} for r in runs]
    assert grue.grue_tasks(grue.build_table(alike))[1]["t"].startswith("no method has a normalised score on it")
    present = [{**r, "metrics": {**r["metrics"], "lexical/rougeL": 1.0}} for r in runs]  # a tie all have: dropped
    assert grue.build_table(present)["normalised_score"].tolist() == pytest.approx([0.5, 0.5, 0.5])


def scored_run(task, method, reward, distinct, seed=0):
    return {"task": task, "method": method, "seed": seed, "headline": ["diversity/distinct_2"],
            "metrics": {"reward": reward, "fluency/perplexity": 10.0, "diversity/distinct_2": distinct}}


def test_every_method_is_scored_over_the_same_tasks():
    """ppo has no distinct-2 on task a (no normalised score there): a is left out of every method's GRUE score,
    not only ppo's, which would rank ppo on task b alone."""
    runs = [scored_run("a", "zero_shot", 0.1, 0.9), scored_run("a", "supervised", 0.2, 0.8),
            scored_run("a", "ppo", 0.9, None), scored_run("b", "zero_shot", 0.1, 0.5),
            scored_run("b", "supervised", 0.5, 0.7), scored_run("b", "ppo", 0.3, 0.6)]
    table = grue.build_table(runs)
    assert table["normalised_score"].tolist() == pytest.approx([0.5, 0.0625, math.nan, 0.0, 1.0, 0.5], nan_ok=True)
    assert grue.grue_tasks(table) == (["b"], {"a": "no normalised score for ppo (no diversity/distinct_2); left out "
                                                   "for every method so that all are scored over the same tasks"})
    assert grue.grue_scores(table) == pytest.approx({"zero_shot": 0.0, "supervised": 1.0, "ppo": 0.5})
    assert grue.to_nested(table)["grue_score"] == {"zero_shot": 0.0, "supervised": 1.0, "ppo": 0.5}
    markdown = grue.to_markdown(table, grue.headlines(runs))
    assert markdown.endswith("| zero_shot | 0 |\n| supervised | 1 |\n| ppo | 0.5 |\n\n"
                             "- the GRUE score is the mean over `b`\n"
                             "- `a` is left out of the GRUE score: no normalised score for ppo "
                             "(no diversity/distinct_2); left out for every method so that all are scored over the "
                             "same tasks\n")


def test_a_task_no_metric_separates_is_left_out_for_every_method():
    """Every generation empty (as on the micro suite's concepts task): every value equal or missing, so no method
    has a normalised score on the task, and the scores over the other tasks stay comparable."""
    runs = [scored_run("a", "zero_shot", 0.1, 0.9), scored_run("a", "ppo", 0.9, 0.5),
            scored_run("c", "zero_shot", 0.0, None), scored_run("c", "ppo", 0.0, None)]
    table = grue.build_table(runs)
    assert grue.grue_scores(table) == {"zero_shot": 0.5, "ppo": 0.5}
    markdown = grue.to_markdown(table, grue.headlines(runs))
    assert markdown.endswith("- the GRUE score is the mean over `a`\n- `c` is left out of the GRUE score: no method "
                             "has a normalised score on it: no metric tells its methods apart (each is equal for "
                             "every method, or missing); every method lacks it, so the scores stay comparable\n")
    default = grue.to_markdown(grue.build_table(RUNS), grue.headlines(RUNS))  # every task scored: no note
    assert default.endswith("| ppo | 0.6667 |\n") and "left out" not in default


def test_a_metric_some_seeds_lack_is_the_mean_of_the_others_and_says_so(tmp_path):
    from grueflow import report

    runs = [scored_run("a", "zero_shot", 0.1, 0.5), scored_run("a", "zero_shot", 0.3, 0.7, seed=1),
            scored_run("a", "ppo", 0.8, 0.9), scored_run("a", "ppo", 1.0, None, seed=1)]
    table = grue.build_table(runs)
    grue.write_table(table, tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.json", grue.headlines(runs))
    assert (tmp_path / "t.csv").read_text().splitlines() == [
        "task,method,n_seeds,reward,reward_std,fluency_ppl,fluency_ppl_std,diversity/distinct_2,"
        "diversity/distinct_2_std,diversity/distinct_2_n,normalised_score",
        "a,zero_shot,2,0.2,0.141421,10,0,0.6,0.141421,2,0",
        "a,ppo,2,0.9,0.141421,10,0,0.9,,1,1"]
    markdown = (tmp_path / "t.md").read_text()
    assert "| a | ppo | 2 | 0.9 | 0.1414 | 10 | 0 | 0.9 (1 of 2 seeds) | — | 1 |" in markdown
    assert "| a | zero_shot | 2 | 0.2 | 0.1414 | 10 | 0 | 0.6 | 0.1414 | 0 |" in markdown
    assert "distinct_2_n" not in markdown
    assert "- `diversity/distinct_2` is left out of the normalised score: only some seeds have it: ppo (1 of 2 " \
           "seeds)" in markdown
    assert json.loads((tmp_path / "t.json").read_text())["a"]["ppo"]["diversity/distinct_2_n"] == 1
    page = report.table_html(table, grue.headlines(runs), {})
    assert "<td>0.9 (1 of 2 seeds)</td>" in page
    # the page says what the markdown says: the left-out metric, the GRUE score, the task it leaves out
    assert "<p><code>diversity/distinct_2</code> is left out of the normalised score: only some seeds have it: ppo " \
           "(1 of 2 seeds)" in page
    assert "<h2>GRUE score (mean normalised score over tasks)</h2>" in page
    assert "<tr><td class=\"text\">ppo</td><td>1</td></tr>" in page and "left out of the GRUE score" not in page
    with_b = grue.build_table(runs + [scored_run("b", "zero_shot", 0.1, 0.5)])
    page = report.table_html(with_b, grue.headlines(runs), {})
    assert "<p>the GRUE score is the mean over a</p>\n<p><code>b</code> is left out of the GRUE score: no method has " \
           "a normalised score on it" in page
    # a metric every row has on all seeds, or on none (lexical/x), gets no count column: the default table's columns
    assert not [c for c in grue.build_table(RUNS).columns if c.endswith("_n")]


def test_a_metric_some_seeds_lack_never_decides_the_normalised_score():
    """Two methods alike but for a metric one has on 1 of its 2 seeds: that mean of one seed against a mean of two
    ranks seeds, not methods, so nothing tells them apart and the task is left out of the GRUE score."""
    runs = [scored_run("a", "zero_shot", 0.5, 0.4477), scored_run("a", "zero_shot", 0.5, 0.4477, seed=1),
            scored_run("a", "supervised", 0.5, 0.4453), scored_run("a", "supervised", 0.5, None, seed=1)]
    table = grue.build_table(runs)
    assert table["normalised_score"].isna().all()
    assert grue.grue_tasks(table) == ([], {"a": "no method has a normalised score on it: no metric tells its "
                                                "methods apart (each is equal for every method, or missing); every "
                                                "method lacks it, so the scores stay comparable"})


@pytest.mark.parametrize("section", ["metrics", "eval_generation"])
def test_runs_scored_with_different_settings_are_refused(tmp_path, section):
    """Every run of a task is scored with the task's reward and metrics, and every seed of a method also with one
    decoding: two seeds evaluated under different settings (one stale) never share a row or a normalisation."""
    from grueflow.io import DataError

    params = {"metrics": [{"id": "learned_classifier", "args": {"model": "a"}}], "eval_generation": {"top_k": 50}}
    other = {**params, section: {"changed": True}}
    paths = [write_run(tmp_path, "sentiment", "ppo", 0, params=params),
             write_run(tmp_path, "sentiment", "ppo", 1, params=other)]
    with pytest.raises(DataError, match=rf"ppo/seed0 and .*ppo/seed1 were evaluated with different {section} "
                                        r"settings \(their stage.json params\): one is stale"):
        grue.load_runs(paths)
    if section == "eval_generation":  # another method may decode otherwise (its method_overrides)
        grue.load_runs([paths[0], write_run(tmp_path, "sentiment", "zero_shot", 0, params=other)])


def test_seeds_whose_precision_auto_resolved_differently_are_refused(tmp_path):
    """Precision ``auto`` (every shipped suite's) is bf16 on CUDA and fp32 on the CPU: a seed evaluated on a GPU and
    one on a CPU shared a row, since their stage.json params both say ``auto``. Each run's provenance record says
    what it used; one that does not (a DVC checkout leaves it out) is not compared."""
    from grueflow.io import DataError, write_json

    def ran_in(path, precision):
        write_json(path.parent / "provenance.json", {"stage": "evaluate", "execution": {"precision": precision}})
        return path

    params = {"precision": "auto"}
    gpu = ran_in(write_run(tmp_path, "sentiment", "ppo", 0, params=params), "bf16")
    cpu = ran_in(write_run(tmp_path, "sentiment", "ppo", 1, params=params), "fp32")
    with pytest.raises(DataError, match=r"ppo/seed0 and .*ppo/seed1 were evaluated in different precisions \(bf16 "
                                        r"and fp32: precision 'auto' resolved on different devices\); give the suite "
                                        r"one precision \(fp32 or bf16\)"):
        grue.load_runs([gpu, cpu])
    unknown = write_run(tmp_path, "sentiment", "ppo", 2, params=params)  # its provenance names no execution
    other = ran_in(write_run(tmp_path, "sentiment", "zero_shot", 0, params=params), "fp32")
    assert len(grue.load_runs([unknown, gpu, other])) == 3
    with pytest.raises(DataError, match="different precisions"):  # the first known one is compared, not the first
        grue.load_runs([unknown, gpu, cpu])


def test_seeds_whose_policies_were_trained_in_different_precisions_are_refused(tmp_path):
    """Both seeds evaluated in fp32, but one policy trained on a GPU in bf16 and the other on a CPU: one row."""
    from grueflow.io import DataError, write_json, write_stage_record

    paths = []
    for seed, precision in ((0, "bf16"), (1, "fp32")):
        trained = tmp_path / "ppo" / f"seed{seed}"
        (trained / "model").mkdir(parents=True)
        (trained / "model" / "config.json").write_text("{}")
        write_json(trained / "provenance.json", {"stage": "rl_finetune", "execution": {"precision": precision}})
        path = write_run(tmp_path / "eval", "sentiment", "ppo", seed, params={"precision": "auto"})
        write_stage_record(path.parent, stage="evaluate", params={"precision": "auto"}, wall_time_s=0.0,
                           inputs={"model": trained / "model"})
        write_json(path.parent / "provenance.json", {"stage": "evaluate", "execution": {"precision": "fp32"}})
        paths.append(path)
    with pytest.raises(DataError, match=r"ppo/seed0 and .*ppo/seed1 were trained in different precisions \(bf16 and "
                                        r"fp32: precision 'auto' resolved on different devices\)"):
        grue.load_runs(paths)


def test_a_run_folder_without_the_evaluate_stage_record_is_refused(tmp_path):
    from grueflow.io import DataError

    path = write_run(tmp_path, "sentiment", "ppo", 0)
    (path.parent / "stage.json").unlink()  # the record gone, the hand-edit check would have nothing to compare
    path.write_text(path.read_text().replace("0.5", "0.9"))
    with pytest.raises(DataError, match=r"sentiment/ppo/seed0 has no stage.json: it was not written by the evaluate "
                                        r"stage \(or was damaged\); rerun evaluate for it"):
        grue.load_runs([path])
    other = write_run(tmp_path / "other", "sentiment", "ppo", 0, stage="rl_finetune")
    with pytest.raises(DataError, match=r"seed0/stage.json is not the evaluate stage's record of metrics.json \(stage "
                                        r"'rl_finetune', files \['metrics.json', 'predictions.jsonl'\]\)"):
        grue.load_runs([other])


def test_runs_of_one_task_with_different_headline_metrics_are_refused():
    from grueflow.io import DataError

    runs = [scored_run("a", "zero_shot", 0.1, 0.9), scored_run("a", "ppo", 0.9, 0.5, seed=0),
            scored_run("a", "ppo", 0.9, 0.5, seed=1) | {"headline": ["lexical/bleu", "diversity/distinct_2"]}]
    message = ("the evaluate runs of task 'a' name different headline_metrics (a/zero_shot/seed0, a/ppo/seed0: "
               "[diversity/distinct_2]; a/ppo/seed1: [lexical/bleu, diversity/distinct_2]); rerun evaluate for the "
               "runs whose headline_metrics differ from the task file's")
    for aggregate in (grue.build_table, grue.headlines):
        with pytest.raises(DataError) as refused:
            aggregate(runs)
        assert str(refused.value) == message


def test_sample_generations_are_read_only_from_a_predictions_file_that_matches_its_record(tmp_path):
    from grueflow import report
    from grueflow.io import DataError

    predictions = write_run(tmp_path, "sentiment", "ppo", 0).parent / "predictions.jsonl"
    assert [row["id"] for row in report.read_samples(predictions, 1)] == ["test-0"]
    predictions.write_text(predictions.read_text().replace('"good"', '"fine"'))  # edited by hand, same size
    with pytest.raises(DataError, match=r"sentiment/ppo/seed0 is damaged: predictions.jsonl does not match the "
                                        r"digest its stage recorded"):
        report.read_samples(predictions, 1)


def test_a_reward_over_fewer_test_samples_is_noted_under_its_task_and_in_the_json(tmp_path):
    """A seed whose reward left out samples (a component scored them NaN) was a plain reward cell over fewer
    samples than the other methods', the count only in its metrics.json: the table said nothing."""
    from grueflow import report

    left = {"reward_left_out": 1, "reward_samples": 8}
    runs = [run("sentiment", "zero_shot", 0, 0.1, 10.0, {"lexical/x": 1.0, **left}),
            run("sentiment", "supervised", 0, 0.5, 11.0, {"lexical/x": 1.0}),
            run("sentiment", "supervised", 1, 0.5, 11.0, {"lexical/x": 1.0, "reward_left_out": 4, "reward_samples": 8}),
            run("sentiment", "ppo", 0, 0.9, 11.0, {"lexical/x": 1.0, "reward_left_out": 2}),  # written before the total
            run("other", "zero_shot", 0, 0.1, 10.0, {"lexical/x": 1.0})]
    left_out = grue.reward_left_out(runs)
    assert left_out == {"sentiment": {"zero_shot": {"0": (1, 8)}, "supervised": {"1": (4, 8)}, "ppo": {"0": (2, None)}}}
    table = grue.build_table(runs)
    grue.write_table(table, tmp_path / "t.csv", tmp_path / "t.md", tmp_path / "t.json", grue.headlines(runs), {},
                     left_out)
    notes = ["- sentiment / zero_shot, seed 0: reward over 7 of 8 test samples (1 left out: a reward component could "
             "not score it)",
             "- sentiment / supervised, seed 1: reward over 4 of 8 test samples (4 left out: a reward component could "
             "not score them)",
             "- sentiment / ppo, seed 0: reward over all but 2 of the test samples (2 left out: a reward component "
             "could not score them)"]
    markdown = (tmp_path / "t.md").read_text()
    assert markdown.split("## sentiment")[1].split("\n\n")[2] == "\n".join(notes)  # right under the task's table
    assert "left out" not in markdown.split("## sentiment")[0]  # task "other" left out nothing
    nested = json.loads((tmp_path / "t.json").read_text())
    assert {k: v for k, v in nested["sentiment"]["supervised"].items() if k.startswith("reward_")} == {
        "reward_std": 0.0, "reward_left_out/seed1": 4, "reward_samples/seed1": 8}
    assert nested["sentiment"]["zero_shot"]["reward_left_out/seed0"] == 1
    assert nested["sentiment"]["zero_shot"]["reward_samples/seed0"] == 8
    assert "reward_samples/seed0" not in nested["sentiment"]["ppo"] and grue.grue_table_problem(nested) is None
    assert not [k for k in nested["other"]["zero_shot"] if "left_out" in k]
    page = report.table_html(table, grue.headlines(runs), {}, left_out)
    assert f"<p>{notes[0].removeprefix('- ')}</p>" in page


@pytest.mark.parametrize("counts, shown", [('"reward_left_out": 1.5, "reward_samples": 8', "1.5 and reward_samples 8"),
                                           ('"reward_left_out": 3, "reward_samples": 2', "3 and reward_samples 2"),
                                           ('"reward_left_out": 0, "reward_samples": 2', "0 and reward_samples 2"),
                                           ('"reward_samples": 2', "null and reward_samples 2")])
def test_aggregate_refuses_counts_of_left_out_samples_that_are_no_counts(tmp_path, counts, shown):
    from grueflow.io import DataError, write_stage_record

    path = write_run(tmp_path, "sentiment", "ppo", 0)
    path.write_text(path.read_text().replace('"reward": 0.5', f'"reward": 0.5, {counts}'))
    write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: reward_left_out is {re.escape(shown)}; evaluate "
                                        r"writes the samples its reward left out and the samples it scored as whole "
                                        r"numbers, 1 <= reward_left_out <= reward_samples, or neither: rerun evaluate"):
        grue.load_runs([path])
    path.write_text(path.read_text().replace(counts, '"reward_left_out": 2, "reward_samples": 2'))
    write_stage_record(path.parent, stage="evaluate", params={}, inputs={}, wall_time_s=0.0)
    assert grue.reward_left_out(grue.load_runs([path])) == {"sentiment": {"ppo": {"0": (2, 2)}}}
