"""Components of your own: a metric or datapool by import path or entry point, checked at parse time like a
built-in id, and the project files behind them (code dependencies)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

import pytest

from grueflow import plugins
from grueflow.config import ConfigError, MetricSpec, RewardConfig
from grueflow.data import DATAPOOLS, Datapool, Sample
from grueflow.metrics import METRICS, Metric, MetricContext, MetricResult
from grueflow.metrics.reward import Reward
from grueflow.params import parse


class Exclaims(Metric):
    """1 for a generation that ends with "!"."""

    category = "custom"
    scores = ("exclaims",)

    @dataclass(frozen=True)
    class Args:
        mark: str = "!"

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            scores = [float(g.endswith(args.mark)) for g in generations]
            return MetricResult({cls.key(): scores}, {cls.key(): sum(scores) / len(scores)})
        return compute


class Short(Metric):
    """A metric of one's own that forgets the last generation."""

    category = "custom"
    scores = ("short",)

    @classmethod
    def build(cls, args, context):
        return lambda prompts, generations, references, meta: MetricResult({cls.key(): [1.0] * (len(generations) - 1)},
                                                                           {cls.key(): 1.0})


class ErrorRate(Metric):
    """A metric of one's own where lower is better: 1 for a generation without a full stop."""

    category = "custom"
    scores = ("error_rate",)
    lower_is_better = ("error_rate",)

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            scores = [float(not g.endswith(".")) for g in generations]
            return MetricResult({cls.key(): scores}, {cls.key(): sum(scores) / len(scores)})
        return compute


class ErrorRateUpward(ErrorRate):
    """The same key, where higher is better (another task's metric of its own)."""

    lower_is_better = ()


class EitherWay(ErrorRate):
    """A direction given as a flag, not as score names."""

    lower_is_better = True


class UndefinedElsewhere(ErrorRate):
    """A reason for a NaN given for a score the metric does not have."""

    undefined_when = {"accuracy": "no sample"}


class ScoresAString(Metric):
    """``scores = ("bug")``: a string in parentheses, not a tuple."""

    category = "custom"
    scores = ("bug")


class ArgsNotADataclass(ErrorRate):
    class Args:
        level: int = 1


class BuildWithoutContext(ErrorRate):
    @classmethod
    def build(cls, args):
        return lambda prompts, generations, references, meta: None


class NotAMetric:
    pass


class Echo:
    """A datapool loader: each word of ``text`` is a prompt and its own reference."""

    @dataclass(frozen=True)
    class Args:
        text: str = "a b c"

    @staticmethod
    def build(args):
        samples = [Sample(f"s{i}", w, (w,)) for i, w in enumerate(args.text.split())]
        return Datapool({"train": samples, "val": samples, "test": samples}, args.text.split())


class Window:
    """A class of one's own, which params cannot give."""


class SetArgs(ErrorRate):
    @dataclass(frozen=True)
    class Args:
        ids: set[int] = frozenset()


class ClassArgs(ErrorRate):
    @dataclass(frozen=True)
    class Args:
        level: int = 1
        window: Window | None = None


class EchoWithSetArgs(Echo):
    @dataclass(frozen=True)
    class Args:
        words: tuple[set[str], ...] = ()


class NumberOrAuto(ErrorRate):
    @dataclass(frozen=True)
    class Args:
        level: float | Literal["auto"] = "auto"


class IntOrStr(ErrorRate):
    @dataclass(frozen=True)
    class Args:
        level: Union[int, str] = 1


class EchoWithPairArgs(Echo):
    @dataclass(frozen=True)
    class Args:
        pair: Optional[tuple[str, int]] = None


HERE = "tests.unit.test_plugins"


def test_a_metric_of_your_own_is_a_weighted_reward_by_import_path():
    cfg = parse(RewardConfig, {"components": [{"metric": f"{HERE}:Exclaims", "weight": 2.0, "args": {"mark": "?"}}]},
                "t.yaml: reward")
    total, parts = Reward(cfg, MetricContext())(["p", "p"], ["why?", "so."], [["r"], ["r"]], [{}, {}])
    assert total == [2.0, 0.0] and parts == {"custom/exclaims": [1.0, 0.0]}


def test_a_datapool_of_your_own_by_import_path():
    loader = DATAPOOLS.get(f"{HERE}:Echo")
    pool = loader.build(parse(loader.Args, {"text": "x y"}, "args"))
    assert [s.prompt for s in pool.splits["test"]] == ["x", "y"]


@pytest.mark.parametrize("name, message", [
    (f"{HERE}:NotAMetric", f"metric '{HERE}:NotAMetric': <class '{HERE}.NotAMetric'> is not a subclass of "
                           f"grueflow.metrics.Metric"),
    (f"{HERE}:Exclaim", f"metric '{HERE}:Exclaim': module '{HERE}' has no 'Exclaim'"),
    ("my_missing_rewards:Brevity", "metric 'my_missing_rewards:Brevity': cannot import 'my_missing_rewards'"),
    ("exclaims", "unknown metric 'exclaims'; valid metric ids: bert_score,"),
    (f"{HERE}:EitherWay", f"metric '{HERE}:EitherWay': EitherWay.lower_is_better is True; give a tuple of the names "
                          f"of its scores where lower is better, e.g. ('error_rate',), or () for none (its scores: "
                          f"error_rate)"),
    (f"{HERE}:ScoresAString", f"metric '{HERE}:ScoresAString': ScoresAString.scores is 'bug'; give a tuple of score "
                              f"names, e.g. ('bug',) (a string in parentheses is not a tuple: write the comma)"),
    (f"{HERE}:ArgsNotADataclass", "ArgsNotADataclass.Args is not a dataclass; decorate it with @dataclass(frozen=True) "
                                  "(its fields are the metric's args)"),
    (f"{HERE}:BuildWithoutContext", "BuildWithoutContext.build(args) does not take (args, context); write it as "
                                    "@classmethod def build(cls, args, context) -> a function (prompts, generations, "
                                    "references, meta) -> MetricResult"),
    (f"{HERE}:UndefinedElsewhere", "UndefinedElsewhere.undefined_when is {'accuracy': 'no sample'}; give a dict "
                                   "from names of its scores to why each is undefined (NaN) when it is, or {} (its "
                                   "scores: error_rate)"),
])
def test_a_bad_plugin_name_fails_at_parse_time(name, message):
    with pytest.raises(ConfigError) as error:
        parse(MetricSpec, {"id": name}, "t.yaml: metrics[0]")
    assert message in str(error.value)
    if name == "exclaims":
        assert str(error.value).endswith("; or one of your own by import path (package.module:Class) or entry point "
                                         "(grueflow.metrics)")


SUPPORTED = ("use one of the supported types: str, int, float, bool, Any, Literal[...], Optional[X] (X | None), "
             "tuple[X, ...] or list[X] (a YAML list), dict[str, X] (a mapping), a nested dataclass")


UNION_WHY = ("(a union is read as its one type other than None: give the field one type, e.g. Optional[float] where "
             "None stands for a word such as 'auto')")


@pytest.mark.parametrize("registry, name, message", [
    ("metric", "SetArgs", "SetArgs.Args.ids is of type set[int], which params cannot give"),
    ("metric", "ClassArgs", "ClassArgs.Args.window is of type Window, which params cannot give"),
    ("datapool", "EchoWithSetArgs", "EchoWithSetArgs.Args.words is of type set[str], which params cannot give"),
    ("metric", "NumberOrAuto", "NumberOrAuto.Args.level is of type Union[float, Literal['auto']], which params cannot "
                               f"give {UNION_WHY}"),
    ("metric", "IntOrStr", f"IntOrStr.Args.level is of type Union[int, str], which params cannot give {UNION_WHY}"),
    ("datapool", "EchoWithPairArgs", "EchoWithPairArgs.Args.pair is of type tuple[str, int], which params cannot give "
                                     "(a tuple is read as a YAML list of one item type, of any length: write "
                                     "tuple[X, ...], or a nested dataclass with a field for each item)"),
])
def test_a_plugin_args_field_of_a_type_params_cannot_give_is_refused_naming_it(registry, name, message):
    """A set[int] field (or a class of one's own) ended in config's TypeError traceback once a params file set it;
    a union of two types or a fixed-length tuple loaded, then a value of the type was refused as the user's."""
    if registry == "metric":
        with pytest.raises(ConfigError) as error:
            parse(MetricSpec, {"id": f"{HERE}:{name}", "args": {}}, "t.yaml: metrics[0]")
    else:
        with pytest.raises(ValueError) as error:
            DATAPOOLS.get(f"{HERE}:{name}")
    assert f"{registry} '{HERE}:{name}': {message}; {SUPPORTED}" in str(error.value)
    assert "\n" not in str(error.value)


def scored_run(eval_dir: Path, task: str, method: str, error_rate: float, metrics: list[str]) -> Path:
    """An evaluate output scoring ``custom/error_rate`` as a headline metric, its record naming ``metrics``."""
    from grueflow.io import write_json, write_jsonl, write_stage_record

    params = {"reward": {"components": [{"metric": "lexicon_sentiment", "args": {}}]},
              "metrics": [{"id": metric, "args": {}} for metric in metrics]}
    folder = eval_dir / task / method / "seed0"
    folder.mkdir(parents=True)
    write_json(folder / "metrics.json", {"task": task, "method": method, "seed": 0, "headline": ["custom/error_rate"],
                                         "missing": {}, "metrics": {"reward": 0.5, "fluency/perplexity": 3.0,
                                                                    "custom/error_rate": error_rate}})
    write_jsonl(folder / "predictions.jsonl", [])
    write_stage_record(folder, stage="evaluate", params=params, inputs={}, wall_time_s=0.0)
    return folder / "metrics.json"


def test_a_metric_of_your_own_where_lower_is_better_is_ranked_so_in_the_grue_table(tmp_path):
    """An error rate counted as higher-is-better: the method with the most errors scored best."""
    from grueflow import grue

    paths = [scored_run(tmp_path, "sentiment", method, errors, [f"{HERE}:ErrorRate", "perplexity"])
             for method, errors in (("zero_shot", 0.9), ("ppo", 0.1))]
    table = grue.build_table(grue.load_runs(paths)).set_index("method")
    assert table["normalised_score"].to_dict() == {"zero_shot": 0.0, "ppo": 1.0}
    assert grue.lower_is_better("custom/error_rate", [f"{HERE}:ErrorRate"])
    assert not grue.lower_is_better("custom/error_rate")  # a key no metric declares lower-is-better


def test_each_task_is_normalised_by_the_directions_of_its_own_metrics(tmp_path):
    """Two tasks whose metrics of their own write one key in opposite directions: one direction held for the whole
    table, so one task ranked its methods the wrong way."""
    from grueflow import grue

    paths = [scored_run(tmp_path, task, method, value, [f"{HERE}:{metric}"])
             for task, metric in (("sentiment", "ErrorRate"), ("concepts", "ErrorRateUpward"))
             for method, value in (("zero_shot", 0.9), ("ppo", 0.1))]
    runs = grue.load_runs(paths)
    table = grue.build_table(runs).set_index(["task", "method"])["normalised_score"].to_dict()
    assert table == {("concepts", "ppo"): 0.0, ("concepts", "zero_shot"): 1.0, ("sentiment", "ppo"): 1.0,
                     ("sentiment", "zero_shot"): 0.0}
    lower = grue.lower_keys_by_task(runs)  # the chart marks each task's panels by its own directions too
    assert "custom/error_rate" in lower["sentiment"] and "custom/error_rate" not in lower["concepts"]


def test_every_built_in_metric_names_its_own_scores_where_lower_is_better():
    from grueflow.metrics import check_metric, lower_is_better_keys

    for name in METRICS.names():
        check_metric(METRICS.get(name))
    assert sorted(lower_is_better_keys()) == ["diversity/repetition", "diversity/self_bleu", "fluency/perplexity",
                                              "fluency/reference_perplexity", "lexical/ter"]


def test_an_installed_packages_entry_point_is_a_name(tmp_path, monkeypatch):
    dist = tmp_path / "grueflow_exclaims-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: grueflow-exclaims\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[grueflow.metrics]\nexclaims = {HERE}:Exclaims\n"
                                           f"broken = {HERE}:Nothing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert METRICS.get("exclaims").key() == "custom/exclaims" and "exclaims" in METRICS.names()
    assert parse(MetricSpec, {"id": "exclaims"}, "m").id == "exclaims"
    with pytest.raises(ValueError, match=rf"metric 'broken' \(entry point '{HERE}:Nothing' of 'grueflow.metrics'\) "
                                         r"does not load"):
        METRICS.get("broken")


def test_the_project_files_behind_a_task_files_import_paths(tmp_path):
    (tmp_path / "my_rewards.py").write_text("")
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "__init__.py").write_text("")
    (tmp_path / "pools" / "echo.py").write_text("")
    task = {"datapool": {"id": "pools.echo:Echo"}, "reward": {"components": [{"metric": "my_rewards:Brevity"},
                                                                              {"metric": "rouge"}]},
            "metrics": [{"id": "installed_pkg.metrics:Thing"}], "eval_generation": {"post_processing": "strip"}}
    assert plugins.named_in_task(task) == ["installed_pkg.metrics:Thing", "my_rewards:Brevity", "pools.echo:Echo"]
    assert plugins.source_files(task, tmp_path) == ["my_rewards.py", "pools/echo.py"]  # not the installed one
    assert plugins.source_files(task, tmp_path, parts=("datapool",)) == ["pools/echo.py"]
    assert plugins.source_files(task, tmp_path, parts=("reward", "metrics")) == ["my_rewards.py"]


def test_the_project_modules_a_plugin_imports_are_its_sources_too(tmp_path):
    """A reward that imports a helper module of the project reruns when the helper changes."""
    (tmp_path / "my_rewards.py").write_text("import numpy\nfrom grueflow.metrics import Metric\n"
                                            "from my_helpers import FACTOR\nfrom pools import shared\n")
    (tmp_path / "my_helpers.py").write_text("def f():\n    import deep_helper\n")
    (tmp_path / "deep_helper.py").write_text("")
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "__init__.py").write_text("")
    (tmp_path / "pools" / "shared.py").write_text("from . import other\n")
    (tmp_path / "pools" / "other.py").write_text("")
    (tmp_path / "grueflow").mkdir()  # a project's grueflow/ is the stages' own code dependency
    (tmp_path / "grueflow" / "__init__.py").write_text("")
    task = {"reward": {"components": [{"metric": "my_rewards:Brevity"}]}}
    assert plugins.source_files(task, tmp_path) == ["deep_helper.py", "my_helpers.py", "my_rewards.py",
                                                    "pools/__init__.py", "pools/other.py", "pools/shared.py"]


def test_a_plugin_module_that_fails_to_import_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards.py").write_text("def Brevity(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"metric 'broken_rewards:Brevity': importing 'broken_rewards' failed: "
                                          r"SyntaxError"):
        parse(MetricSpec, {"id": "broken_rewards:Brevity"}, "t.yaml: metrics[0]")


def test_a_metric_of_your_own_giving_too_few_scores_is_named_not_zipped_short():
    """zip would pair the scores with the wrong samples and drop the last reward without a word."""
    from grueflow.data import Sample
    from grueflow.evaluation import Scorer

    cfg = parse(RewardConfig, {"components": [{"metric": f"{HERE}:Short"}]}, "t.yaml: reward")
    with pytest.raises(ValueError, match=rf"metric '{HERE}:Short' returned 1 scores under 'custom/short' for 2 "
                                         r"generations; a metric gives one score per generation"):
        Reward(cfg, MetricContext())(["p", "p"], ["a", "b"], [["r"], ["r"]], [{}, {}])
    scorer = Scorer(None, (parse(MetricSpec, {"id": f"{HERE}:Short"}, "t.yaml: metrics[0]"),), MetricContext())
    with pytest.raises(ValueError, match=rf"metric '{HERE}:Short' returned 1 scores under 'custom/short' for 2"):
        scorer([Sample("a", "p", ("r",)), Sample("b", "p", ("r",))], ["a", "b"])


class Odd(Metric):
    """A metric of one's own that misbehaves as its ``mode`` says."""

    category = "custom"
    scores = ("odd",)

    @dataclass(frozen=True)
    class Args:
        mode: str = "str"

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            if args.mode == "raise":
                return {}["no such key"]
            scores = {"str": ["0.5"] * len(generations), "none": [None] * len(generations),
                      "tensor": __import__("torch").tensor([0.25] * len(generations))}[args.mode]
            return MetricResult({cls.key(): scores}, {cls.key(): 0.25})
        return compute


def odd_reward(mode):
    return Reward(parse(RewardConfig, {"components": [{"metric": f"{HERE}:Odd", "args": {"mode": mode}}]},
                        "t.yaml: reward"), MetricContext())


@pytest.mark.parametrize("mode, found", [("str", "a str"), ("none", "None")])
def test_a_reward_of_your_own_returning_no_numbers_is_named_in_one_line(mode, found):
    """It failed deep in the reward sum: "can't multiply sequence by non-int of type 'float'"."""
    from grueflow.metrics import MetricResultError

    with pytest.raises(MetricResultError, match=rf"^metric '{HERE}:Odd' returned {found} at sample 0 under "
                                                r"'custom/odd'; scores are numbers"):
        odd_reward(mode)(["p", "p"], ["a", "b"], [["r"], ["r"]], [{}, {}])


def test_a_reward_of_your_own_returning_a_tensor_is_its_list():
    assert odd_reward("tensor")(["p", "p"], ["a", "b"], [["r"], ["r"]], [{}, {}]) == \
        ([0.25, 0.25], {"custom/odd": [0.25, 0.25]})


def test_a_reward_component_that_raises_is_named_with_its_exception_as_the_cause():
    """The plugin's traceback alone said nothing of which task component called it."""
    from grueflow.metrics import MetricFailedError

    with pytest.raises(MetricFailedError, match=rf"^reward component '{HERE}:Odd' \(custom/odd\) failed: KeyError: "
                                                r"'no such key'$") as raised:
        odd_reward("raise")(["p"], ["a"], [["r"]], [{}])
    assert isinstance(raised.value.__cause__, KeyError)


def test_a_stage_whose_metric_raises_shows_the_metrics_own_frames_then_one_line(capsys):
    """It ended in a two-part traceback: the metric's, then grueflow's frames around the call."""
    from grueflow.stage import main_guard

    with pytest.raises(SystemExit) as exit:
        main_guard(lambda: odd_reward("raise")(["p"], ["a"], [["r"]], [{}]))
    assert exit.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-2] == "KeyError: 'no such key'"
    assert lines[-1] == f"error: reward component '{HERE}:Odd' (custom/odd) failed: KeyError: 'no such key'"
    assert "direct cause" not in "\n".join(lines) and not any("grueflow/stage.py" in line for line in lines)


def test_an_evaluation_metric_that_raises_is_named_with_its_exception_as_the_cause():
    from grueflow.data import Sample
    from grueflow.evaluation import score
    from grueflow.metrics import MetricFailedError

    metrics = parse(tuple[MetricSpec, ...], [{"id": f"{HERE}:Odd", "args": {"mode": "raise"}}], "t.yaml: metrics")
    with pytest.raises(MetricFailedError, match=rf"^metric '{HERE}:Odd' failed: KeyError: 'no such key'$") as raised:
        score([Sample("s0", "p", ("r",))], ["a"], None, metrics, MetricContext())
    assert isinstance(raised.value.__cause__, KeyError)


class Mutator(Metric):
    """A metric of one's own that edits its inputs in place as it "normalises" them."""

    category = "custom"
    scores = ("mutated",)

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            for i in range(len(generations)):
                generations[i], prompts[i] = "MUTATED", "MUTATED"
                meta[i]["label"] = "MUTATED"
            return MetricResult({cls.key(): [0.0] * len(generations)}, {cls.key(): 0.0})

        return compute


def test_a_metric_that_edits_its_inputs_in_place_changes_nothing_the_others_and_the_predictions_see():
    """Every later metric and predictions.jsonl got "MUTATED" for every generation, with no word."""
    from grueflow.data import Sample
    from grueflow.evaluation import score

    metrics = parse(tuple[MetricSpec, ...], [{"id": f"{HERE}:Mutator"}, {"id": f"{HERE}:Exclaims"}], "metrics")
    samples = [Sample("s0", "p", ("r",), {"label": 1}), Sample("s1", "q", ("r",), {"label": 0})]
    generations = ["wow!", "so."]
    rows, corpus, _ = score(samples, generations, None, metrics, MetricContext())
    assert [row["generation"] for row in rows] == ["wow!", "so."] and [row["prompt"] for row in rows] == ["p", "q"]
    assert corpus["custom/exclaims"] == 0.5 and generations == ["wow!", "so."]
    assert [s.meta for s in samples] == [{"label": 1}, {"label": 0}]


class NoCorpus(Metric):
    """A metric of one's own that gives per-sample scores and, under ``mode``, no corpus score or a NaN one."""

    category = "custom"
    scores = ("odd",)
    corpus_scores = ("spread",)

    @dataclass(frozen=True)
    class Args:
        mode: str = "none"

    @classmethod
    def build(cls, args, context):
        def compute(prompts, generations, references, meta):
            corpus = {"none": {}, "per_sample_only": {cls.key(): 0.5}, "nan": {cls.key(): 0.5, cls.key("spread"):
                                                                                float("nan")}}[args.mode]
            return MetricResult({cls.key(): [0.5] * len(generations)}, corpus)
        return compute


def test_a_metric_of_your_own_without_a_corpus_score_is_refused_naming_the_keys():
    """One that returned per-sample scores but no corpus score was accepted: metrics.json had no value, missing named
    none, and its headline column of the GRUE table was empty with no reason. As a reward component it is kept: a
    reward's corpus score is the mean of its per-sample ones."""
    from grueflow.evaluation import Scorer, undefined_scores
    from grueflow.metrics import MetricResultError

    samples, generations = [Sample("a", "p", ("r",)), Sample("b", "p", ("r",))], ["a", "b"]
    for mode, lacking in (("none", "'custom/odd', 'custom/spread'"), ("per_sample_only", "'custom/spread'")):
        spec = parse(MetricSpec, {"id": f"{HERE}:NoCorpus", "args": {"mode": mode}}, "t.yaml: metrics[0]")
        with pytest.raises(MetricResultError, match=rf"^metric '{HERE}:NoCorpus' returned no corpus score under "
                                                    rf"{lacking}; a metric returns MetricResult\(per_sample=\{{key: one "
                                                    r"score per generation\}, corpus=\{key: one number\}\) with a "
                                                    r"corpus score under each key of its scores and corpus_scores "
                                                    r"\(NaN where it is undefined\)$"):
            Scorer(None, (spec,), MetricContext())(samples, generations)
    cfg = parse(RewardConfig, {"components": [{"metric": f"{HERE}:NoCorpus"}]}, "t.yaml: reward")
    assert Reward(cfg, MetricContext())(["p", "p"], generations, [["r"], ["r"]], [{}, {}])[0] == [0.5, 0.5]
    spec = parse(MetricSpec, {"id": f"{HERE}:NoCorpus", "args": {"mode": "nan"}}, "t.yaml: metrics[0]")
    _, corpus, missing = Scorer(None, (spec,), MetricContext())(samples, generations)
    assert corpus == {"custom/odd": 0.5, "custom/spread": None}
    assert undefined_scores((spec,), corpus, missing) == {
        "custom/spread": f"metric '{HERE}:NoCorpus' gave no value (NaN) on these generations: it is undefined for "
                         f"them (no words to count, or no sample it could score)"}


def test_a_plugin_module_outside_the_project_is_identified_by_its_code(tmp_path, monkeypatch):
    """A reward kept in a folder on PYTHONPATH (or a `pip install -e` package) is no project file: editing it,
    even under its old time, changes what identifies its code, as the stages' digests and records hold it."""
    import os

    from grueflow.pipeline import named_digests, outside_code_digest, plugin_digests

    project, outside = tmp_path / "project", tmp_path / "ext"
    (outside / "my_pkg").mkdir(parents=True)
    project.mkdir()
    (outside / "my_lex.py").write_text("import numpy\nimport my_pkg.scores\nfrom grueflow.metrics import Metric\n")
    (outside / "my_pkg" / "__init__.py").write_text("")
    (outside / "my_pkg" / "scores.py").write_text("from .words import GOOD\n")
    (outside / "my_pkg" / "words.py").write_text("GOOD = 'good'\n")
    (outside / "unused.py").write_text("")
    monkeypatch.syspath_prepend(str(outside))
    task = {"reward": {"components": [{"metric": "my_lex:LexScore"}]},
            "metrics": [{"id": "numpy.linalg:norm"}, {"id": "grueflow.metrics.diversity:Diversity"}]}
    code = plugins.outside_code(task, project)
    assert list(code) == ["my_lex", "my_pkg", "my_pkg.scores", "my_pkg.words", "numpy", "numpy.linalg"]
    assert code["numpy.linalg"] == f"numpy {__import__('numpy').__version__}"  # an installed one: its version
    assert plugins.source_files(task, project) == []
    assert list(plugins.outside_code(task, project, parts=("datapool",))) == []
    digests = plugin_digests({"t": task}, project)["t"]
    assert digests["evaluate"]["modules"] == code and "modules" not in digests["prepare_datapool"]
    named = named_digests(task, project, ("reward",))
    assert list(named) == ["module my_lex", "module my_pkg", "module my_pkg.scores", "module my_pkg.words"]
    assert all(plugins.is_module_key(name) for name in named) and not plugins.is_module_key("my_lex.py")
    token = outside_code_digest(task, ("reward",), project)
    words = outside / "my_pkg" / "words.py"
    info = words.stat()
    words.write_text("GOOD = 'bad'\n")
    os.utime(words, ns=(info.st_atime_ns, info.st_mtime_ns))  # an edit that kept the old time
    assert plugins.outside_code(task, project)["my_pkg.words"] != code["my_pkg.words"]
    assert plugin_digests({"t": task}, project)["t"]["evaluate"] != digests["evaluate"]
    assert outside_code_digest(task, ("reward",), project) != token
    assert plugins.run_inputs(task, {}, None, project)["module my_pkg.words"] == \
        plugins.outside_code(task, project)["my_pkg.words"]
