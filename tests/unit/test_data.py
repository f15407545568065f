"""The datapools: the embedded ones (deterministic, consistent with their rewards) and the hub ones."""

import json
from pathlib import Path

import pytest

from grueflow.data import DATAPOOLS, Sample, read_split, write_datapool
from grueflow.data.sources import BadRowError
from grueflow.data.synthetic import NEGATIVE_ADJECTIVES, NEGATIVE_VERBS, POSITIVE_ADJECTIVES, POSITIVE_VERBS
from grueflow.hub import HubUnreachableError, hub_reachable
from grueflow.io import DataError, write_jsonl
from grueflow.metrics.task import NEGATIVE_WORDS, POSITIVE_WORDS, coverage, lexicon_polarity


def build(name, **kwargs):
    """The datapool ``name`` builds from ``kwargs``; every sample's meta holds exactly the keys its loader declares
    (``meta_keys``, which the task check reads)."""
    loader = DATAPOOLS.get(name)
    args = loader.Args(**kwargs)
    pool = loader.build(args)
    declared = set(loader.meta_keys(args))
    assert all(set(s.meta) == declared for samples in pool.splits.values() for s in samples), name
    return pool


def test_every_built_in_datapool_declares_its_meta_keys():
    """A task's metric that reads a meta key its datapool never writes is refused from these declarations."""
    built_in = [name for name in DATAPOOLS.names() if name in DATAPOOLS]  # registered here, not entry points
    assert len(built_in) >= 15
    assert [name for name in built_in if not callable(getattr(DATAPOOLS.get(name), "meta_keys", None))] == []


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
    # two test reviews have 10 words: all prompt, no reference
    assert pool.stats == {"skipped_rows": {"train": 0, "val": 0, "test": 0},
                          "without_references": {"train": 0, "val": 0, "test": 2}}
    assert all(s.meta["label"] == 1 for s in pool.splits["train"])  # positive reviews only, as RL4LMs
    assert len(pool.unlabelled) == 950 and all("<br />" not in t for t in pool.unlabelled)
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


def test_imdb_unlabelled_text_without_an_unsupervised_split_leaves_val_out(tmp_path):
    """Built from train and test files only, unlabelled.jsonl held every val review (prompt and reference): the base
    model was trained on the texts val scores."""
    words = "one two three four five six seven eight nine ten".split()
    reviews = [{"text": " ".join(f"{w}{i}" for w in words), "label": i % 2} for i in range(12)]
    write_jsonl(tmp_path / "train.jsonl", reviews)
    write_jsonl(tmp_path / "test.jsonl", reviews[:2])
    pool = build("imdb", path="json", data_files={"train": str(tmp_path / "train.jsonl"),
                                                  "test": str(tmp_path / "test.jsonl")},
                 n_val=5, prompt_words=4, reference_words=4)
    val_texts = tuple(f"{s.prompt} {s.references[0]}" for s in pool.splits["val"])  # each a review's first words
    assert sorted(pool.unlabelled) == sorted(r["text"] for r in reviews if not r["text"].startswith(val_texts))
    assert len(val_texts) == 5 and len(pool.unlabelled) == 7


def test_imdb_loader_takes_its_unlabelled_text_from_an_unsupervised_split():
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "imdb"
    if not shared.is_dir():
        pytest.skip(f"{shared} is not present")
    files = {"train": str(shared / "imdb_train_subset.jsonl"), "test": str(shared / "imdb_test_subset.jsonl")}
    unsupervised = {**files, "unsupervised": str(shared / "imdb_unsup_2k.jsonl")}
    pool = build("imdb", path="json", data_files=unsupervised, n_val=50)
    without = build("imdb", path="json", data_files=files, n_val=50)
    assert len(pool.unlabelled) == 2000 and not set(pool.unlabelled) & set(without.unlabelled)  # the unsup reviews
    assert all("<br />" not in t for t in pool.unlabelled)
    assert pool.splits == without.splits  # the labelled splits do not change


def test_hub_dataset_without_network_fails_at_once_with_a_hint(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_reachable.cache_clear()
    with pytest.raises(HubUnreachableError, match=r"cannot load dataset 'common_gen'.*data_files"):
        build("common_gen")


def test_a_hub_mirror_is_probed_on_its_own_host_and_port(monkeypatch):
    """HF_ENDPOINT=http://127.0.0.1:8089 was probed as host '127.0.0.1:8089' on port 443: a reachable mirror was
    reported as "huggingface.co not reachable"."""
    import socket

    from grueflow.hub import hub_address, offline_state

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with socket.socket() as mirror:
        mirror.bind(("127.0.0.1", 0))
        mirror.listen()
        port = mirror.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}/")
        hub_reachable.cache_clear()
        assert hub_address() == ("127.0.0.1", port) and hub_reachable()
    hub_reachable.cache_clear()
    assert not hub_reachable() and offline_state() == f"127.0.0.1:{port} not reachable"
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example")
    assert hub_address() == ("mirror.example", 80)
    monkeypatch.delenv("HF_ENDPOINT")
    assert hub_address() == ("huggingface.co", 443)
    hub_reachable.cache_clear()


@pytest.mark.parametrize("offline, endpoint, says", [
    ("1", None, "HF_HUB_OFFLINE=1 is set"),
    ("true", "http://mirror.example", "HF_HUB_OFFLINE=true is set"),
    ("0", "not a url", "HF_ENDPOINT='not a url' is not an http(s) URL such as https://huggingface.co"),
    ("0", "ftp://mirror.example", "HF_ENDPOINT='ftp://mirror.example' is not an http(s) URL"),
    ("0", "http://mirror.example:port", "HF_ENDPOINT='http://mirror.example:port' has a port that is not a number"),
])
def test_an_unreachable_hub_is_explained_by_its_own_cause(monkeypatch, offline, endpoint, says):
    """Offline mode and a malformed endpoint were both reported as "huggingface.co:443 not reachable", which sends
    the user looking for a network fault that is not there."""
    from grueflow.hub import offline_state

    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    if endpoint is None:
        monkeypatch.delenv("HF_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
    hub_reachable.cache_clear()
    assert not hub_reachable() and says in offline_state() and "huggingface.co:443" not in offline_state()
    hub_reachable.cache_clear()


@pytest.mark.parametrize("path", ["/nowhere/wmt", "./nowhere", "../nowhere/news"])
def test_a_local_dataset_folder_that_does_not_exist_is_named_as_one(path):
    """A path written as a local one (absolute, ./, ../) is never taken for a hub id."""
    from grueflow.io import MissingDataError

    with pytest.raises(MissingDataError, match=f"dataset folder '{path}' does not exist"):
        build("wmt16newsonly", train_path=path)


def write_reviews(path, texts, label=1):
    path.write_text("".join(json.dumps({"text": t, "label": label}) + "\n" for t in texts), encoding="utf-8")
    return str(path)


TEN_WORDS = "one two three four five six seven eight nine ten"


def test_imdb_refuses_a_review_that_gives_no_prompt_naming_its_row(tmp_path):
    train = write_reviews(tmp_path / "train.jsonl", [TEN_WORDS] * 4)
    cases = [("", None, "line 2: empty review (its text has no words)"),
             (" <br /> ", None, "line 2: empty review (its text has no words)"),
             ("word", 0.5, "line 2: the review has 1 word, too few for prompt_fraction 0.5 to leave a word in the "
                           "prompt")]
    for text, fraction, expect in cases:
        test = write_reviews(tmp_path / "test.jsonl", [TEN_WORDS, text])
        with pytest.raises(BadRowError) as err:
            build("imdb", path="json", data_files={"train": train, "test": test}, n_val=1, prompt_words=3,
                  prompt_fraction=fraction)
        assert str(err.value) == (f"{test} {expect}; fix the data, or set skip_bad_rows: true to drop such rows (they "
                                  f"are counted in stats.json)")
    with pytest.raises(ValueError, match="prompt_words and reference_words must be >= 1, got 0 and 40"):
        build("imdb", prompt_words=0)


@pytest.mark.parametrize("label, shown", [("pos", "'pos' (str)"), (2, "2 (int)"), (1.0, "1.0 (float)")])
@pytest.mark.parametrize("positive_only_train", [False, True])
def test_imdb_refuses_a_label_other_than_0_or_1_naming_its_file_and_row(tmp_path, label, shown, positive_only_train):
    """A float 1.0 (a pandas column with a gap) is refused like "1.0" is: labels are JSON integers or their text."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": TEN_WORDS, "label": value}) + "\n" for value in (1, 0, label, 1)),
                     encoding="utf-8")
    test = write_reviews(tmp_path / "test.jsonl", [TEN_WORDS] * 2)
    with pytest.raises(DataError) as err:
        build("imdb", path="json", data_files={"train": str(train), "test": test}, n_val=1, prompt_words=3,
              positive_only_train=positive_only_train)
    assert str(err.value) == (f"imdb datapool: {train} line 3: label {shown} is not 0 (negative) or 1 (positive); map "
                              f"the labels to the integers 0 and 1 (a float column's 1.0 too), or use the custom "
                              f"datapool, which maps your columns and keeps any label (fields.meta: [label])")


def test_imdb_skip_bad_rows_drops_and_counts_them_and_a_short_review_is_all_prompt(tmp_path):
    train = write_reviews(tmp_path / "train.jsonl", [TEN_WORDS, "", TEN_WORDS, "too short", TEN_WORDS, TEN_WORDS])
    test = write_reviews(tmp_path / "test.jsonl", ["", "a b", TEN_WORDS + " eleven", TEN_WORDS])
    pool = build("imdb", path="json", data_files={"train": train, "test": test}, n_val=1, n_test=2, prompt_words=4,
                 reference_words=3, skip_bad_rows=True)
    assert [len(pool.splits[s]) for s in ("train", "val", "test")] == [4, 1, 2]  # n_test counts samples
    # test's seeded order is rows 4, 1, 3, 2: the empty row 1 is skipped, row 2 is never read (n_test is met)
    assert pool.stats == {"skipped_rows": {"train": 1, "val": 0, "test": 1},
                          "without_references": {"train": 1, "val": 0, "test": 0}}
    samples = [s for split in pool.splits.values() for s in split]
    short = [s for s in samples if s.prompt == "too short"]
    assert len(short) == 1 and short[0].references == ()  # RL4LMs' pools keep it: reference-free scores apply
    assert all(s.prompt == "one two three four" and s.references == ("five six seven",)
               for s in samples if s not in short)
    assert [s.id for s in pool.splits["test"]] == ["test-0", "test-1"]
    written = write_datapool(pool, tmp_path / "pool")
    assert (written["skipped_rows"], written["without_references"]) == (pool.stats["skipped_rows"],
                                                                        pool.stats["without_references"])
    with pytest.raises(BadRowError, match=r"train\.jsonl line 2: empty review"):
        build("imdb", path="json", data_files={"train": train, "test": test}, n_val=1, prompt_words=4)


def test_imdb_refuses_train_and_test_from_one_file(tmp_path, caplog):
    reviews = write_reviews(tmp_path / "reviews.jsonl", [TEN_WORDS] * 4)
    with pytest.raises(DataError) as err:
        build("imdb", path="json", data_files={"train": reviews, "test": reviews}, n_val=1, prompt_words=3)
    assert str(err.value) == (f"imdb datapool: data_files train: {reviews} and test: {reviews} are one file; every "
                              f"test score would be on training data (val is cut from train): give test a separate "
                              f"file of reviews")
    other = write_reviews(tmp_path / "other.jsonl", [TEN_WORDS] * 2)
    pool = build("imdb", path="json", data_files={"train": reviews, "test": other}, n_val=1, prompt_words=3)
    with caplog.at_level("WARNING", logger="grueflow.data.sample"):
        assert write_datapool(pool, tmp_path / "pool")["train_test_prompt_overlap"] == 1  # one prompt, in both
    assert caplog.messages == ["2 of 2 test samples have a prompt that is also a train prompt (1 distinct, e.g. "
                               f"{pool.splits['test'][0].prompt!r}): their scores may reflect what the model "
                               "memorised (stats.json: train_test_prompt_overlap)"]  # two files of one text: said


def test_imdb_suite_slices_have_three_reviews_without_a_reference_word():
    """params/imdb/tasks/imdb_smollm2.yaml's datapool on the real slices: 2 of its 1,000 train reviews and 1 of its
    200 test reviews have at most prompt_words (24) words: all prompt, no reference; no review is bad."""
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "imdb"
    if not shared.is_dir():
        pytest.skip(f"{shared} is not present")
    args = {"path": "json", "data_files": {"train": str(shared / "imdb_train_5k.jsonl"),
                                           "test": str(shared / "imdb_test_subset.jsonl"),
                                           "unsupervised": str(shared / "imdb_unsup_2k.jsonl")},
            "seed": 42, "prompt_words": 24, "reference_words": 18, "positive_only_train": False, "n_train": 1000,
            "n_val": 100, "n_test": 200}
    pool = build("imdb", **args)
    assert [len(pool.splits[s]) for s in ("train", "val", "test")] == [1000, 100, 200]
    assert pool.stats == {"skipped_rows": {"train": 0, "val": 0, "test": 0},
                          "without_references": {"train": 2, "val": 0, "test": 1}}
    assert sorted(s.id for split in pool.splits.values() for s in split if not s.references) == [
        "test-62", "train-749", "train-843"]


def test_train_where_that_matches_nothing_names_the_values_and_their_types():
    from grueflow.supervised import select_samples

    from_csv = [Sample(f"train-{i}", "p", ("r",), {"label": str(i % 2)}) for i in range(4)]
    with pytest.raises(DataError) as err:
        select_samples(from_csv, {"label": 1}, "train")
    assert str(err.value) == ("supervised train_where {'label': 1}: no train sample matches it (of 4); the datapool's "
                              "metadata keys are ['label']; label is '0', '1' (strings) there, not 1 (integer): write "
                              "train_where's values with the data's types (in YAML 1 is an integer, '1' a string, true "
                              "and false booleans; yes and no are text)")
    answers = [Sample("train-0", "p", ("r",), {"answer": "yes"}), Sample("train-1", "p", ("r",), {"answer": "no"})]
    with pytest.raises(DataError, match=r"answer is 'no', 'yes' \(strings\) there, not False \(boolean\): write"):
        select_samples(answers, {"answer": False}, "val")  # YAML's no
    assert [s.id for s in select_samples(from_csv, {"label": "1"}, "train")] == ["train-1", "train-3"]


def test_train_where_without_a_type_mismatch_lists_at_most_ten_values():
    from grueflow.supervised import select_samples

    samples = [Sample(f"train-{i}", "p", ("r",), {"label": i}) for i in range(14)]
    with pytest.raises(DataError) as err:
        select_samples(samples, {"label": 99, "lang": "en"}, "train")
    assert str(err.value).endswith("metadata keys are ['label']; label is 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 (integers) and "
                                   "4 more there, not 99 (integer); no sample has lang: give values the data holds")
