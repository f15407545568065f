"""What annotators are asked, per task: the Likert criteria and the pairwise question.

The criteria follow RL4LMs' human studies (Ramamurthy et al., ICLR 2023, appendix on human
evaluation): every task is rated for coherence plus one task-specific criterion, on a 1-5 scale.
Translation and question answering, which RL4LMs did not study with people, follow the same pattern.
Each set is registered under the task names it serves (the GRUE task files' names, the embedded
default's synthetic tasks, and the plain names), so a stage can look one up by ``{task}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from grueflow.registry import Registry

SCALE_MIN = 1
SCALE_MAX = 5  # Likert scores are integers in [SCALE_MIN, SCALE_MAX]


@dataclass(frozen=True)
class Criterion:
    """One Likert question: ``id`` is the answer field (CSV column ``Answer.<id>``), ``low``/``high``
    label the ends of the 1-5 scale."""

    id: str
    question: str
    low: str
    high: str


@dataclass(frozen=True)
class CriteriaSet:
    """The Likert criteria of a task family and the question of its pairwise comparisons."""

    name: str
    criteria: tuple[Criterion, ...]
    pairwise_question: str


CRITERIA: Registry[CriteriaSet] = Registry("criteria set")

COHERENCE = Criterion("coherence", "Is the text fluent, grammatical and coherent on its own and with the prompt?",
                      "incoherent", "perfectly coherent")


def _register(names: tuple[str, ...], family: str, second: Criterion, pairwise_question: str) -> None:
    criteria_set = CriteriaSet(family, (COHERENCE, second), pairwise_question)
    for name in names:
        CRITERIA.register(name, f"{family}: coherence, {second.id}")(criteria_set)


_register(("imdb", "sentiment"), "imdb",
          Criterion("sentiment", "How positive is the sentiment of the completion?", "very negative", "very positive"),
          "Which continuation is more positive while staying fluent and on topic?")
_register(("commongen", "common_gen", "concepts"), "commongen",
          Criterion("commonsense", "Does the sentence describe a plausible everyday scene that uses every concept?",
                    "implausible or concepts missing", "plausible, all concepts used"),
          "Which sentence describes a more plausible everyday scene using all the concepts?")
_register(("summarization", "cnn_dailymail"), "summarization",
          Criterion("quality", "Does the summary keep the article's key points, and only what the article says?",
                    "misses the point or invents facts", "faithful and complete"),
          "Which summary is the better summary of the article?")
_register(("totto",), "totto",
          Criterion("correctness", "Is everything the sentence says supported by the highlighted table cells?",
                    "unsupported", "fully supported"),
          "Which sentence describes the highlighted cells more correctly?")
_register(("dialogue", "daily_dialog", "dailydialog"), "dialogue",
          Criterion("quality", "Is the reply a sensible, engaging next turn in the conversation?",
                    "makes no sense here", "an excellent reply"),
          "Which reply is the better next turn in the conversation?")
# beyond RL4LMs' five human studies, so that every GRUE task can be exported
_register(("translation", "iwslt2017"), "translation",
          Criterion("adequacy", "Does the translation carry the full meaning of the source sentence?",
                    "meaning lost", "all meaning kept"),
          "Which translation carries the meaning of the source better?")
_register(("qa", "narrative_qa"), "qa",
          Criterion("correctness", "Does the answer correctly answer the question from the story?",
                    "wrong", "fully correct"),
          "Which answer answers the question better?")
