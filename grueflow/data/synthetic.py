"""The embedded default tasks: GRUE-shaped tasks that grueflow generates itself from a seed.

* ``synthetic_sentiment`` — like GRUE's IMDB: continue the opening of a movie review; the RL
  reward is lexicon sentiment. The unlabelled text holds positive and negative reviews in equal
  parts (the base model learns both); the supervised references are positive continuations
  (RL4LMs trains IMDB's supervised baseline on positive reviews).
* ``synthetic_concepts`` — like GRUE's CommonGen: write a sentence that uses a set of concepts
  (lemmas); the RL reward is concept coverage. Each concept set has several reference scenes.

Both are small, fully offline and deterministic for a given ``seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from grueflow.config import MAX_COUNT, check_size
from grueflow.data import DATAPOOLS
from grueflow.data.sample import Datapool, Sample

POSITIVE_ADJECTIVES = ("great", "wonderful", "brilliant", "superb", "excellent", "lovely", "beautiful",
                       "charming", "delightful", "fantastic")
NEGATIVE_ADJECTIVES = ("awful", "terrible", "boring", "dull", "poor", "weak", "painful", "bad",
                       "horrible", "clumsy")
POSITIVE_VERBS = ("loved", "enjoyed", "liked", "admired")
NEGATIVE_VERBS = ("hated", "disliked", "regretted", "endured")
SUBJECTS = ("the acting", "the plot", "the music", "the story", "the ending", "the cast", "the script",
            "the dialogue", "the camera work", "the lead actor")
ADVERBS = ("really", "truly", "very", "quite", "rather")
COMPANIONS = ("sister", "brother", "friends", "parents", "wife", "husband", "class")
DAYS = ("week", "night", "sunday", "friday", "summer", "winter")
PEOPLE = ("a young teacher", "an old soldier", "a small family", "a lonely painter", "two brothers",
          "a famous singer", "a retired detective")
EVENTS = ("moves to the city", "returns home", "loses a job", "finds a letter", "starts a band",
          "travels across the country", "opens a restaurant")
PLACES_SEEN = ("cinema", "festival", "library", "airport", "theater")


def check_counts(args: Any) -> None:
    """Every split needs a sample and the seed a distinct value (``random.Random(-1)`` equals ``Random(1)``)."""
    if args.seed < 0:
        raise ValueError(f"seed must be >= 0, got {args.seed}")
    for key in ("n_train", "n_val", "n_test", "n_unlabelled"):
        if getattr(args, key) < 1:
            raise ValueError(f"{key} must be >= 1 (a split needs at least one sample), got {getattr(args, key)}")
        check_size(key, getattr(args, key), MAX_COUNT)


def _opening(rng: random.Random) -> str:
    form = rng.randrange(3)
    if form == 0:
        return f"i watched this movie with my {rng.choice(COMPANIONS)} last {rng.choice(DAYS)} ."
    if form == 1:
        return f"this film is about {rng.choice(PEOPLE)} who {rng.choice(EVENTS)} ."
    return f"i saw this film at the {rng.choice(PLACES_SEEN)} with my {rng.choice(COMPANIONS)} ."


def _opinion(rng: random.Random, positive: bool) -> str:
    adjectives = POSITIVE_ADJECTIVES if positive else NEGATIVE_ADJECTIVES
    verbs = POSITIVE_VERBS if positive else NEGATIVE_VERBS
    subject = rng.choice(SUBJECTS)
    form = rng.randrange(5)
    if form == 0:
        return f"{subject} was {rng.choice(adjectives)} ."
    if form == 1:
        return f"{subject} felt {rng.choice(adjectives)} and {rng.choice(adjectives)} ."
    if form == 2:
        return f"i {rng.choice(verbs)} {subject} ."
    if form == 3:
        return f"{subject} is {rng.choice(ADVERBS)} {rng.choice(adjectives)} ."
    return f"overall it was a {rng.choice(adjectives)} film ."


def _review(rng: random.Random, positive: bool) -> tuple[str, str]:
    opinions = " ".join(_opinion(rng, positive) for _ in range(rng.randint(2, 3)))
    return _opening(rng), opinions


@DATAPOOLS.register("synthetic_sentiment", "movie-review continuation steered to positive sentiment (IMDB-shaped)")
class SyntheticSentiment:
    @dataclass(frozen=True)
    class Args:
        seed: int = 0
        n_train: int = 1000
        n_val: int = 64
        n_test: int = 64
        n_unlabelled: int = 4000

        def __post_init__(self) -> None:
            check_counts(self)

    @staticmethod
    def meta_keys(args: "SyntheticSentiment.Args") -> tuple[str, ...]:
        return ("label",)

    @staticmethod
    def build(args: "SyntheticSentiment.Args") -> Datapool:
        rng = random.Random(args.seed)
        splits = {}
        for split, n in (("train", args.n_train), ("val", args.n_val), ("test", args.n_test)):
            samples = []
            for i in range(n):
                prompt, continuation = _review(rng, positive=True)
                samples.append(Sample(f"{split}-{i}", prompt, (continuation,), {"label": 1}))
            splits[split] = samples
        unlabelled = [" ".join(_review(rng, positive=i % 2 == 0)) for i in range(args.n_unlabelled)]
        return Datapool(splits, unlabelled)


NOUNS = ("dog", "cat", "boy", "girl", "man", "woman", "bird", "horse", "child", "farmer", "student", "chef")
VERBS = ("kick", "pull", "push", "paint", "wash", "clean", "watch", "climb", "jump", "walk", "play", "cook")
OBJECTS = ("ball", "fence", "tree", "boat", "car", "door", "box", "rope", "wall", "bike", "cart", "chair")
PLACES = ("park", "river", "garden", "street", "kitchen", "field", "beach", "yard", "lake", "hill")
ADJECTIVES = ("small", "young", "big", "happy", "tall", "little")
TRANSITIVE = {"kick", "pull", "push", "paint", "wash", "clean", "watch", "climb", "cook"}


def _third_person(verb: str) -> str:
    return verb + ("es" if verb.endswith(("sh", "ch", "s", "x")) else "s")


def _scene(rng: random.Random, noun: str, verb: str, thing: str) -> str:
    """A sentence that uses lemma ``noun``, ``verb`` and ``thing`` (an object or a place)."""
    adjective = rng.choice(ADJECTIVES)
    verbs = _third_person(verb)
    is_place = thing in PLACES
    form = rng.randrange(3)
    if is_place:
        if form == 0:
            return f"the {noun} {verbs} in the {thing} ."
        if form == 1:
            return f"a {adjective} {noun} is {verb}ing near the {thing} ."
        return f"the {noun} {verb}ed by the {thing} ."
    if form == 0:
        return f"the {noun} {verbs} the {thing} ."
    if form == 1:
        return f"a {adjective} {noun} is {verb}ing the {thing} ."
    return f"the {noun} {verb}ed the {adjective} {thing} ."


def _concept_set(rng: random.Random) -> tuple[str, str, str]:
    verb = rng.choice(VERBS)
    things = OBJECTS if verb in TRANSITIVE else PLACES
    return rng.choice(NOUNS), verb, rng.choice(things)


@DATAPOOLS.register("synthetic_concepts", "write a sentence that uses every given concept (CommonGen-shaped)")
class SyntheticConcepts:
    @dataclass(frozen=True)
    class Args:
        seed: int = 0
        n_train: int = 1000
        n_val: int = 64
        n_test: int = 64
        n_unlabelled: int = 4000
        references_per_set: int = 3
        prefix: str = "generate a sentence with: "

        def __post_init__(self) -> None:
            check_counts(self)
            if self.references_per_set < 1:
                raise ValueError(f"references_per_set must be >= 1, got {self.references_per_set}")

    @staticmethod
    def meta_keys(args: "SyntheticConcepts.Args") -> tuple[str, ...]:
        return ("concepts",)

    @staticmethod
    def build(args: "SyntheticConcepts.Args") -> Datapool:
        rng = random.Random(args.seed)
        seen: set[tuple[str, str, str]] = set()
        splits = {}
        for split, n in (("train", args.n_train), ("val", args.n_val), ("test", args.n_test)):
            samples = []
            while len(samples) < n:
                concepts = _concept_set(rng)
                if concepts in seen and split != "train":
                    continue  # val/test concept sets are unseen in training, as in CommonGen
                seen.add(concepts)
                shuffled = list(concepts)
                rng.shuffle(shuffled)
                references = tuple(_scene(rng, *concepts) for _ in range(args.references_per_set))
                samples.append(Sample(f"{split}-{len(samples)}", args.prefix + " ".join(shuffled), references,
                                      {"concepts": shuffled}))
            splits[split] = samples
        unlabelled = [_scene(rng, *_concept_set(rng)) for _ in range(args.n_unlabelled)]
        return Datapool(splits, unlabelled)


# -- RL4LMs' synthetic sanity tasks --------------------------------------------------------------------------


@DATAPOOLS.register("dummy_pool", "RL4LMs' dummy_pool: one prompt n_samples times (the synthetic sanity tasks)")
class DummyPool:
    """RL4LMs' ``dummy_pool``: every split holds ``n_samples`` copies of ``prompt`` (no references), so the
    reward alone says what to write: ``increasing_numbers`` and ``sentences_with_dates``. RL4LMs starts from
    a pretrained GPT-2; for a model built here the unlabelled text is ``n_unlabelled`` lines of 8 to 20 numbers
    below 100 in random order (seeded), so its tokenizer and pre-training know numbers but not their order.
    """

    @dataclass(frozen=True)
    class Args:
        n_samples: int = 50
        prompt: str = "<|endoftext|>"  # GPT-2's EOS, as RL4LMs' configs; a tokenizer built here has "</s>"
        seed: int = 0
        n_unlabelled: int = 2000

        def __post_init__(self) -> None:
            if not self.prompt.strip():
                raise ValueError(f"prompt must hold a visible character, got {self.prompt!r}")
            if self.seed < 0:
                raise ValueError(f"seed must be >= 0, got {self.seed}")
            for key in ("n_samples", "n_unlabelled"):
                if getattr(self, key) < 1:
                    raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
                check_size(key, getattr(self, key), MAX_COUNT)

    @staticmethod
    def meta_keys(args: "DummyPool.Args") -> tuple[str, ...]:
        return ()

    @staticmethod
    def build(args: "DummyPool.Args") -> Datapool:
        splits = {split: [Sample(f"{split}-{i}", args.prompt, ()) for i in range(args.n_samples)]
                  for split in ("train", "val", "test")}
        rng = random.Random(args.seed)
        unlabelled = [" ".join(str(rng.randrange(100)) for _ in range(rng.randint(8, 20)))
                      for _ in range(args.n_unlabelled)]
        return Datapool(splits, unlabelled)
