"""Where answers lie (grueflow.human.layout): the batches the human-evaluation table imports, and what under
data/human/ it would leave out without a word."""

from __future__ import annotations

from pathlib import Path

from grueflow.human.layout import answers_tree

TASKS = ("sentiment", "concepts")
BATCHES = ("likert_seed0", "supervised+ppo_vs_supervised_seed0")


def answers(root: Path, relative: str, text: str = "{}\n") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_every_batch_folder_with_answers_is_found_links_followed_placeholders_passed_over(tmp_path: Path):
    root = tmp_path / "human"
    answers(root, "sentiment/likert_seed0/answers.jsonl")
    shared = answers(tmp_path, "drive/supervised+ppo_vs_supervised_seed0/results.csv").parent
    (root / "sentiment" / shared.name).symlink_to(shared)  # answers on a shared drive
    answers(root, "concepts/likert_seed0/.gitkeep", "")  # a placeholder: no answers yet
    (root / "concepts" / "likert_seed0" / ".#answers.jsonl").symlink_to("alice@host.1:2")  # an editor's lock link
    answers(root, "sentiment/.gitignore", "/likert_seed0\n")  # what dvc add leaves
    tree = answers_tree(root, TASKS, BATCHES)
    assert tree.batches == [("sentiment", "likert_seed0"), ("sentiment", "supervised+ppo_vs_supervised_seed0")]
    assert tree.warnings == [] and tree.errors == []


def test_what_is_not_imported_is_named_in_a_warning(tmp_path: Path):
    """Answers under a task folder the suite lacks (a typo, another suite's) or outside a batch folder were left
    out without a word; so was a batch of another suite's seeds or methods."""
    root = tmp_path / "human"
    answers(root, "sentiment/likert_seed0/answers.jsonl")
    answers(root, "sentimnet/likert_seed0/answers.jsonl")
    answers(root, "sentiment/supervised+ppo_vs_supervised_seed0.jsonl")
    answers(root, "stray.csv")
    answers(root, "README.md", "notes\n")  # not an answers file: nothing to say
    answers(root, "sentiment/likert_seed1/answers.jsonl")
    answers(root, "sentiment/answers")  # a batch's answers saved one level too high, without a suffix
    answers(root, "concepts/readme.txt", "notes\n")
    tree = answers_tree(root, TASKS, BATCHES)
    assert tree.batches == [("sentiment", "likert_seed0")] and tree.errors == []
    assert tree.warnings == [
        f"{root}/sentiment/likert_seed1/ is not imported: it is no batch of this suite (its methods and seeds)",
        f"{root}/sentimnet/ is not imported: sentimnet is no task of this suite (sentiment, concepts)",
        f"{root}/stray.csv is not imported: answers files go in {root}/<task>/<batch>/ (the batch they answer); move "
        f"it there",
        f"{root}/sentiment/answers is not imported: answers files go in {root}/<task>/<batch>/ (the batch they "
        f"answer); move it there",
        f"{root}/sentiment/supervised+ppo_vs_supervised_seed0.jsonl is not imported: answers files go in "
        f"{root}/<task>/<batch>/ (the batch they answer); move it there"]


def test_answers_saved_as_a_file_named_as_a_task_are_an_error(tmp_path: Path):
    """``cp answers.jsonl data/human/concepts`` (or a link to a file there) was passed over as no folder: the
    table left the answers out, exit 0."""
    root = tmp_path / "human"
    answers(root, "sentiment/likert_seed0/answers.jsonl")
    answers(root, "concepts")
    (root / "sentiment.dvc").write_text("outs:\n- path: sentiment\n")  # DVC tracks the folder, which is there
    tree = answers_tree(root, TASKS, BATCHES)
    expected = (f"{root}/concepts is a file named as a task; a task's answers go in a folder of that name, one folder "
                f"per batch: {root}/concepts/<batch>/answers.jsonl (the page's) or {root}/concepts/<batch>/"
                f"<results>.csv")
    assert tree.errors == [expected] and tree.warnings == []
    (root / "concepts").unlink()
    (root / "concepts").symlink_to(answers(tmp_path, "drive/answers.jsonl"))
    assert answers_tree(root, TASKS, BATCHES).errors == [expected]


def test_what_the_table_would_leave_out_without_a_word_is_an_error(tmp_path: Path):
    """A folder named as no batch, a batch folder DVC tracks that no pull fetched, a task folder the same way, a
    link to nothing: each was left out of the table, exit 0."""
    root = tmp_path / "human"
    answers(root, "sentiment/likert-seed0/answers.jsonl")
    (root / "sentiment" / "supervised+ppo_vs_supervised_seed0.dvc").write_text("outs:\n- path: x\n")
    (root / "concepts.dvc").write_text("outs:\n- path: concepts\n")
    (root / "sentiment" / "likert_seed0").symlink_to(tmp_path / "unmounted")
    (root / "other.dvc").write_text("outs:\n- path: other\n")  # another suite's task: none of this suite's concern
    answers(root, "sentiment/likert_seed3")  # answers saved as a file named as a batch (cp answers.jsonl <batch>)
    tree = answers_tree(root, TASKS, BATCHES)
    assert tree.batches == []
    assert tree.errors == [
        f"{root}/concepts.dvc tracks {root}/concepts, which this checkout lacks: run dvc pull (or dvc checkout) first",
        f"{root}/sentiment/likert_seed0 is a symbolic link to nothing ({tmp_path / 'unmounted'}); fetch or mount what "
        f"it points to, or remove the link",
        f"{root}/sentiment/supervised+ppo_vs_supervised_seed0.dvc tracks {root}/sentiment/supervised+ppo_vs_supervised"
        f"_seed0, which this checkout lacks: run dvc pull (or dvc checkout) first",
        f"{root}/sentiment/likert_seed3 is a file named as a batch; a batch's answers go in a folder of that name: "
        f"{root}/sentiment/likert_seed3/answers.jsonl (the page's) or {root}/sentiment/likert_seed3/<results>.csv",
        f"{root}/sentiment/likert-seed0/ is named as no batch: a batch folder is named likert_seed<k> or "
        f"<method_a>_vs_<method_b>_seed<k>, as results/human/sentiment/batches/ names it; rename it, or move it out "
        f"of {root}"]


def test_a_data_human_folder_tracked_by_dvc_and_not_pulled_is_an_error(tmp_path: Path):
    (tmp_path / "human.dvc").write_text("outs:\n- path: human\n")
    assert answers_tree(tmp_path / "human", TASKS, BATCHES).errors == [
        f"{tmp_path}/human.dvc tracks {tmp_path}/human, which this checkout lacks: run dvc pull (or dvc checkout) "
        f"first"]
    (tmp_path / "human.dvc").unlink()
    tree = answers_tree(tmp_path / "human", TASKS, BATCHES)  # no answers at all: the table's rule says so
    assert (tree.batches, tree.warnings, tree.errors) == ([], [], [])
    (tmp_path / "human").symlink_to(tmp_path / "unmounted" / "human")  # answers on a drive not mounted
    assert answers_tree(tmp_path / "human", TASKS, BATCHES).errors == [
        f"{tmp_path}/human is a symbolic link to nothing ({tmp_path}/unmounted/human); fetch or mount what it points "
        f"to, or remove the link"]
    (tmp_path / "human").unlink()
    (tmp_path / "human").write_text("")  # a file where the folder belongs
    assert answers_tree(tmp_path / "human", TASKS, BATCHES).errors == [
        f"{tmp_path}/human is a file; it is the folder of the answers, {tmp_path}/human/<task>/<batch>/<files>"]
