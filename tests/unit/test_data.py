"""The datapools: the embedded ones (deterministic, consistent with their rewards) and the hub ones."""

from pathlib import Path

import pytest

from grueflow.data import DATAPOOLS, read_split, write_datapool
from grueflow.data.synthetic import NEGATIVE_ADJECTIVES, NEGATIVE_VERBS, POSITIVE_ADJECTIVES, POSITIVE_VERBS
from grueflow.hub import HubUnreachableError, hub_reachable
from grueflow.metrics.task import NEGATIVE_WORDS, POSITIVE_WORDS, coverage, lexicon_polarity


def build(name, **kwargs):
    loader = DATAPOOLS.get(name)
    return loader.build(loader.Args(**kwargs))


def test_sentiment_pool_is_seeded_and_positive_in_its_references(tmp_path):
    a = build("synthetic_sentiment", seed=3, n_train=20, n_val=4, n_test=5, n_unlabelled=50)
    b = build("synthetic_sentiment", seed=3, n_train=20, n_val=4, n_test=5, n_unlabelled=50)
    assert a == b
    assert [len(a.splits[s]) for s in ("train", "val", "test")] == [20, 4, 5]
    assert all(lexicon_polarity(s.references[0]) == 1.0 for s in a.splits["train"])
    polarities = [lexicon_polarity(t) for t in a.unlabelled]
    assert polarities.count(1.0) == 25 and polarities.count(-1.0) == 25  # both sentiments, equal parts
    stats = write_datapool(a, tmp_path)
    assert stats["test"]["samples"] == 5
    assert read_split(tmp_path, "test")[0] == a.splits["test"][0]


def test_generator_vocabulary_is_in_the_lexicon():
    assert set(POSITIVE_ADJECTIVES + POSITIVE_VERBS) <= POSITIVE_WORDS
    assert set(NEGATIVE_ADJECTIVES + NEGATIVE_VERBS) <= NEGATIVE_WORDS


def test_concepts_pool_references_cover_their_concepts_and_test_sets_are_unseen():
    pool = build("synthetic_concepts", seed=0, n_train=100, n_val=10, n_test=10, n_unlabelled=10)
    for split in pool.splits.values():
        for sample in split:
            assert sample.prompt.startswith("generate a sentence with: ")
            assert len(sample.meta["concepts"]) == 3
            assert all(coverage(r, sample.meta["concepts"]) == 1.0 for r in sample.references)
    train_sets = {frozenset(s.meta["concepts"]) for s in pool.splits["train"]}
    assert not any(frozenset(s.meta["concepts"]) in train_sets for s in pool.splits["test"])


def test_imdb_loader_reads_the_real_slice_through_datasets():
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "imdb"
    if not shared.is_dir():
        pytest.skip(f"{shared} is not present")
    pool = build("imdb", path="json", data_files={"train": str(shared / "imdb_train_subset.jsonl"),
                                                  "test": str(shared / "imdb_test_subset.jsonl")},
                 n_val=50, prompt_words=10, reference_words=5)
    assert [len(pool.splits[s]) for s in ("train", "val", "test")] == [471, 50, 2000]
    assert all(s.meta["label"] == 1 for s in pool.splits["train"])  # positive reviews only, as RL4LMs
    assert len(pool.unlabelled) == 1000 and all("<br />" not in t for t in pool.unlabelled)
    first = pool.splits["test"][0]
    assert len(first.prompt.split()) == 10 and len(first.references[0].split()) == 5
    few = build("imdb", path="json", data_files={"train": str(shared / "imdb_train_subset.jsonl"),
                                                 "test": str(shared / "imdb_test_subset.jsonl")}, n_test=40)
    labels = [s.meta["label"] for s in few.splits["test"]]  # the file is sorted by label; a slice mixes both
    assert 10 < sum(labels) < 30
    halves = build("imdb", path="json", data_files={"train": str(shared / "imdb_train_subset.jsonl"),
                                                    "test": str(shared / "imdb_test_subset.jsonl")}, prompt_fraction=0.5)
    sample = halves.splits["test"][0]  # RL4LMs' seq2seq variant: half the review in, the rest as the reference
    prompt, reference = sample.prompt.split(), sample.references[0].split()
    assert len(prompt) == (len(prompt) + len(reference)) // 2
    quarter = build("imdb", path="json", data_files={"train": str(shared / "imdb_train_subset.jsonl"),
                                                     "test": str(shared / "imdb_test_subset.jsonl")},
                    n_val=50, prompt_words=10, reference_words=5, positive_ratio=0.25)
    # imdb_seq2seq's positive_ratio: the first int(471 x 0.25) positive train reviews; val and test unchanged
    assert quarter.splits["train"] == pool.splits["train"][:117]
    assert (quarter.splits["val"], quarter.splits["test"]) == (pool.splits["val"], pool.splits["test"])
    for bad, message in ((0.0, r"positive_ratio must be in \(0, 1\], got 0.0"), (1.5, "got 1.5")):
        with pytest.raises(ValueError, match=message):
            build("imdb", positive_ratio=bad)
    with pytest.raises(ValueError, match="positive_ratio 0.5 .* needs positive_only_train: true"):
        build("imdb", positive_ratio=0.5, positive_only_train=False)
    with pytest.raises(ValueError, match=r"imdb datapool: the train split is empty: 1000 train and 2000 test reviews, "
                                         r"n_val 50, positive_only_train True, positive_ratio 0\.001"):
        build("imdb", path="json", data_files={"train": str(shared / "imdb_train_subset.jsonl"),
                                               "test": str(shared / "imdb_test_subset.jsonl")}, n_val=50,
              positive_ratio=0.001)


def test_imdb_loader_takes_its_unlabelled_text_from_an_unsupervised_split():
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "imdb"
    if not shared.is_dir():
        pytest.skip(f"{shared} is not present")
    files = {"train": str(shared / "imdb_train_subset.jsonl"), "test": str(shared / "imdb_test_subset.jsonl")}
    pool = build("imdb", path="json", data_files={**files, "unsupervised": str(shared / "imdb_unsup_2k.jsonl")}, n_val=50)
    without = build("imdb", path="json", data_files=files, n_val=50)
    assert len(pool.unlabelled) == 2000 and not set(pool.unlabelled) & set(without.unlabelled)  # the unsup reviews
    assert all("<br />" not in t for t in pool.unlabelled)
    assert pool.splits == without.splits  # the labelled splits do not change


def test_hub_dataset_without_network_fails_at_once_with_a_hint(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_reachable.cache_clear()
    with pytest.raises(HubUnreachableError, match=r"cannot load dataset 'common_gen'.*data_files"):
        build("common_gen")


@pytest.mark.parametrize("path", ["/nowhere/wmt", "./nowhere", "../nowhere/news"])
def test_a_local_dataset_folder_that_does_not_exist_is_named_as_one(path):
    """A path written as a local one (absolute, ./, ../) is never taken for a hub id."""
    from grueflow.io import MissingDataError

    with pytest.raises(MissingDataError, match=f"dataset folder '{path}' does not exist"):
        build("wmt16newsonly", train_path=path)
