"""What Snakemake's command line settles before the Snakefile runs (grueflow.command_line)."""

from __future__ import annotations

import re

import pytest

from grueflow.command_line import (ABBREVIATIONS, SHORT_FLAGS, SNAKEMAKE_RERUN_TRIGGERS, check_config_given_once,
                                   check_rerun_triggers, profile_files, rerun_triggers)
from grueflow.config import ConfigError


def test_the_short_flags_are_the_installed_snakemakes():
    """The flags one may bundle before -C, kept as data (building Snakemake's parser costs a quarter second a run):
    a Snakemake that adds or drops one fails here, not silently in the check."""
    from snakemake.cli import get_argument_parser

    actions = get_argument_parser()._actions
    assert SHORT_FLAGS == {s[1] for a in actions for s in a.option_strings
                           if len(s) == 2 and s[1] != "-" and a.nargs == 0}


def test_the_abbreviations_are_the_installed_snakemakes():
    """Each option the checks read, with the shortest prefix Snakemake's parser takes for it alone: a Snakemake that
    adds an option sharing a prefix (or turns abbreviations off) fails here, not silently in the checks."""
    from snakemake.cli import get_argument_parser

    parser = get_argument_parser()
    longs = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    for option, shortest in ABBREVIATIONS.items():
        alone = [option[:k] for k in range(3, len(option) + 1) if {s for s in longs if s.startswith(option[:k])}
                 == {option}]
        assert shortest == (alone[0] if alone and parser.allow_abbrev else option), option


def _profile(folder, text="configfile: params/suites/algorithms.yaml\n"):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(text)
    return str(folder / "config.yaml")


@pytest.mark.parametrize("argv", [["--prof", "P"], ["--pro=P"], ["--workflow-prof", "P"], ["--wo=P"],
                                  ["--profile", "none", "--workflow-p", "P"]])
def test_an_abbreviated_profile_option_is_read_as_snakemake_reads_it(tmp_path, monkeypatch, argv):
    """--prof P (which Snakemake's parser reads as --profile P) was not seen: the profile checks were skipped."""
    monkeypatch.chdir(tmp_path)
    _profile(tmp_path / "P")
    assert profile_files(argv, {}, tmp_path) == ["P/config.yaml"]


def test_a_relative_profile_with_directory_is_read_from_the_folder_snakemake_started_in(tmp_path, monkeypatch):
    """snakemake -d p1 --profile prof, started outside p1: the Snakefile runs in p1, where prof is not, and the
    profile was skipped. It is found from $PWD where -d leads from there here; else refused, naming it."""
    expected = _profile(tmp_path / "prof")
    (tmp_path / "p1").mkdir()
    monkeypatch.chdir(tmp_path / "p1")
    for argv in (["-d", "p1", "--profile", "prof"], ["--dir=p1", "--pro", "prof"], ["-nd", "p1", "--profile", "prof"]):
        assert profile_files(argv, {"PWD": str(tmp_path)}, tmp_path / "p1") == [expected], argv
    for environ in ({}, {"PWD": str(tmp_path / "p1")}):  # no shell folder, or one -d p1 does not lead here from
        with pytest.raises(ConfigError, match=rf"^--profile prof names no profile found from {tmp_path}/p1, where "
                                              r"-d/--directory p1 moved Snakemake from the folder it read the profile "
                                              r"in, so its settings cannot be checked: give --profile the profile's "
                                              r"absolute path$"):
            profile_files(["-d", "p1", "--profile", "prof"], environ, tmp_path / "p1")


def test_a_workflow_profile_that_names_nothing_is_refused(tmp_path, monkeypatch):
    """Snakemake runs without a --workflow-profile it cannot find, with no word."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^--workflow-profile wf names no profile \(a folder holding config\.yaml, "
                                          r"or the file\), and Snakemake would run without it without a word: give "
                                          r"the profile's path$"):
        profile_files(["--workflow-profile", "wf"], {}, tmp_path)
    assert profile_files([], {}, tmp_path) == []


@pytest.mark.parametrize("argv", [["-nC", "seeds=[0]", "-C", "tasks=[a]"], ["-nCseeds=[0]", "-Cseeds=[1]"],
                                  ["-pC", "seeds=[0]", "--config", "tasks=[a]"]],
                         ids=["bundled-then-separate", "bundled-attached", "bundled-then-long"])
def test_a_config_option_bundled_with_other_short_flags_counts(argv):
    """-nC k=v, -nCk=v and -pC k=v passed the check: a second -C (or --config) dropped the first one's settings."""
    with pytest.raises(ConfigError, match=r"--config is given 2 times"):
        check_config_given_once(argv, [])


@pytest.mark.parametrize("argv", [["-n", "-C", "a=1", "b=2"], ["-j4", "results/x"], ["-pC", "seeds=[0]"]])
def test_one_config_option_passes(argv):
    check_config_given_once(argv, [])


@pytest.mark.parametrize("argv", [["--configfile", "a.yaml", "--configfile", "b.yaml"],
                                  ["--configfile=a.yaml", "-n", "--configfiles", "b.yaml", "c.yaml"],
                                  ["--configfiles", "a.yaml", "x", "-p", "--configfile=b.yaml"]],
                         ids=["twice", "attached-then-plural", "plural-then-attached"])
def test_a_second_configfile_option_is_refused_naming_the_files_it_drops(argv):
    """Snakemake kept the last --configfile option's files alone: the first suite was dropped without a word."""
    with pytest.raises(ConfigError, match=r"^--configfile is given 2 times; Snakemake keeps only the last one's files "
                                          r"\(b\.yaml( c\.yaml)?\) and drops a\.yaml( x)?: give the suite files after "
                                          r"one --configfile$"):
        check_config_given_once(argv, [])


@pytest.mark.parametrize("argv", [["--configfile", "a.yaml", "b.yaml", "-n"], ["--configfile=a.yaml"],
                                  ["-n", "--", "--configfile", "a.yaml", "--configfile", "b.yaml"]])
def test_one_configfile_option_passes(argv):
    check_config_given_once(argv, [])


def test_a_profiles_configfile_beside_another_is_refused(tmp_path):
    """A profile's configfile beside a command-line --configfile, or beside another profile's, was dropped without
    a word: Snakemake reads a profile's settings as the command line's defaults, and a later profile's over an
    earlier one's. A profile's configfile alone passes."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("cores: 1\nconfigfile: params/suites/algorithms.yaml\n")
    second.write_text("configfiles: [params/suite.yaml]\n")
    with pytest.raises(ConfigError, match=rf"^the profile {second} sets configfile \(params/suite\.yaml\) and the "
                                          r"command line gives --configfile \(x\.yaml\); Snakemake keeps the command "
                                          r"line's suite files alone"):
        check_config_given_once(["--configfile", "x.yaml"], [second])
    with pytest.raises(ConfigError, match=rf"^the profiles {first} and {second} each set configfile; Snakemake keeps "
                                          rf"only {second}'s: give the suite in one$"):
        check_config_given_once([], [first, second])
    check_config_given_once(["-n"], [first])


@pytest.mark.parametrize("first, second", [("configfile", "configfiles"), ("configfiles", "configfile")])
def test_a_profile_giving_both_configfile_and_configfiles_is_refused(tmp_path, first, second):
    """configfile: A with configfiles: [B] in one profile planned B alone (Snakemake keeps the later key's files),
    with no word."""
    profile = tmp_path / "config.yaml"
    profile.write_text(f"{first}: a.yaml\n{second}: [b.yaml, c.yaml]\n")
    with pytest.raises(ConfigError, match=rf"^the profile {profile} gives both {first} \(a\.yaml\) and {second} "
                                          rf"\(b\.yaml c\.yaml\), one option of Snakemake's; Snakemake keeps the "
                                          rf"later, {second}, and drops a\.yaml: give every suite file under one of "
                                          r"them$"):
        check_config_given_once(["-n"], [profile])


def test_the_rerun_triggers_are_the_installed_snakemakes_in_its_order():
    from snakemake.settings.enums import RerunTrigger

    assert SNAKEMAKE_RERUN_TRIGGERS == tuple(trigger.item_to_choice() for trigger in RerunTrigger)


@pytest.mark.parametrize("argv, profiles", [
    ([], {}),
    (["--rerun-triggers", "mtime"], {}),
    (["--rerun-t=params", "t"], {}),
    (["--rerun-triggers", "mtime", "params", "--", "t"], {}),
    (["--rerun-triggers", "params", "--rerun-triggers", "code"], {}),
    (["--profile", "P"], {"P": "rerun-triggers: mtime\n"}),
    (["--profile", "P"], {"P": "--rerun-triggers: [mtime, code]\n"}),
    (["--profile", "P"], {"P": "cores: 1\n"}),
    (["--profile", "P", "--rerun-triggers", "params", "input"], {"P": "rerun-triggers: mtime\n"}),
    (["--profile", "P", "--rerun-trig", "params", "-n"], {"P": "rerun-triggers: mtime\n"}),
    (["--profile", "P", "--profile", "Q"], {"P": "rerun-triggers: mtime\n", "Q": "rerun-triggers: [code]\n"}),
    (["--profile", "P", "--profile", "Q"], {"P": "rerun-triggers: mtime\n", "Q": "cores: 1\n"}),
    (["--profile", "P", "--workflow-profile", "Q"],
     {"P": "rerun-triggers: [code]\n", "Q": "rerun-triggers: [input]\n"}),
], ids=["default", "option", "abbreviated-attached", "before-targets", "given-twice", "profile", "profile-option-key",
        "profile-without", "option-over-profile", "abbreviated-over-profile", "later-profile", "earlier-profile",
        "workflow-profile"])
def test_the_rerun_triggers_are_read_as_the_installed_snakemake_reads_them(tmp_path, monkeypatch, argv, profiles):
    """The triggers the check reads from the command line and the profiles are the ones Snakemake's own command line
    settles (snakemake.cli.parse_args): it hands them to the Snakefile only after the stale check has run."""
    from snakemake.cli import parse_args
    from snakemake.settings.enums import RerunTrigger

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    for name, text in profiles.items():
        _profile(tmp_path / name, text)
    settled = {trigger.item_to_choice() for trigger in parse_args(argv)[1].rerun_triggers}
    _, given = rerun_triggers(argv, profile_files(argv, {}, tmp_path))
    assert set(given if given is not None else (t.item_to_choice() for t in RerunTrigger.all())) == settled


@pytest.mark.parametrize("argv", [[], ["-n"], ["--rerun-triggers", "mtime", "params", "input", "code"],
                                  ["--rerun-triggers", "code", "input", "params", "mtime", "software-env"],
                                  ["--", "--rerun-triggers", "mtime"]])
def test_rerun_triggers_that_hold_what_grueflow_reruns_through_pass(argv):
    check_rerun_triggers(argv, [])


def test_rerun_triggers_without_params_are_refused_naming_what_is_left_out_and_the_fix(tmp_path):
    """--rerun-triggers mtime (or a profile's rerun-triggers: mtime) had the stale check say a job reruns, and a param
    edit go unseen, while Snakemake said "Nothing to be done"."""
    with pytest.raises(ConfigError, match=r"^--rerun-triggers mtime leaves out params \(a params or method file "
                                          r"edited, a stale line\), input \(a batch's answers removed from "
                                          r"data/human/\) and code \(a rule's command changed\), which grueflow "
                                          r"reruns jobs through: Snakemake would plan no job for these changes; drop "
                                          r"the option to take Snakemake's default \(every trigger\), or give "
                                          r"--rerun-triggers mtime params input code$"):
        check_rerun_triggers(["--rerun-triggers", "mtime", "-n"], [])
    with pytest.raises(ConfigError, match=r"^--rerun-triggers software-env mtime params input leaves out code \(a "
                                          r"rule's command changed\), which .*; drop the option to take Snakemake's "
                                          r"default \(every trigger\), or give --rerun-triggers mtime params input "
                                          r"software-env code$"):
        check_rerun_triggers(["--rerun-trig=software-env", "--rerun-triggers", "software-env", "mtime", "params",
                              "input"], [])
    profile = tmp_path / "config.yaml"
    profile.write_text("cores: 1\nrerun-triggers: [mtime, params]\n")
    with pytest.raises(ConfigError, match=rf"^the profile {profile}'s rerun-triggers: mtime params leaves out input "
                                          r"\(a batch's answers removed from data/human/\) and code \(a rule's "
                                          r"command changed\), which .*; drop the key to take Snakemake's default "
                                          r"\(every trigger\), or set rerun-triggers: \[mtime, params, input, code\]$"):
        check_rerun_triggers(["-n"], [profile])
    check_rerun_triggers(["--rerun-triggers", "mtime", "params", "input", "code"], [profile])  # over the profile's


def test_the_resources_given_with_config_take_integers_over_the_suite_files():
    """Only the values the command line gives are converted: the suite file's own (a quoted "500" among them) stay as
    its YAML read them, for the schema to judge alike under both engines."""
    from grueflow.command_line import RESOURCE_INTEGERS, command_line_resources

    assert RESOURCE_INTEGERS == ("threads", "mem_mb", "runtime", "gpu")
    merged = {"evaluate": {"mem_mb": "500", "runtime": "60", "gpu_manufacturer": "amd"}, "aggregate": {"mem_mb": "9"}}
    given = {"evaluate": {"mem_mb": "500", "gpu_manufacturer": "amd", "unknown": "1"}}
    assert command_line_resources(merged, given) == {
        "evaluate": {"mem_mb": 500, "runtime": "60", "gpu_manufacturer": "amd"}, "aggregate": {"mem_mb": "9"}}
    assert merged["evaluate"]["mem_mb"] == "500"  # a new mapping: Snakemake's config is not changed in place
    assert command_line_resources(merged, None) == merged


SUITE_CHOICES = {"task": ["imdb", "common_gen"], "method": ["zero_shot", "supervised", "ppo", "supervised+ppo"],
                 "rl_method": ["ppo", "supervised+ppo"], "dpo_method": [], "method_a": [], "method_b": []}


def test_targets_inside_the_suite_or_of_no_output_shape_pass(monkeypatch, tmp_path):
    from grueflow.command_line import check_targets
    from grueflow.pipeline import STAGES

    monkeypatch.chdir(tmp_path)
    outputs = [template for stage in STAGES.values() for template in stage.outputs.values()]
    check_targets(["-n", "results/eval/common_gen/supervised+ppo/seed0", "results/imdb/ppo/seed3/model",
                   "results/grue_table.csv", "results/notes/anything", "--until=results/imdb/datapool",
                   "params/suite.yaml"], outputs, SUITE_CHOICES, r"0|[1-9][0-9]*")


def test_a_target_outside_the_suite_names_the_valid_values_and_rl4lms_names():
    """RL4LMs' config names and misspelt tasks or methods ended in Snakemake's bare MissingRuleException."""
    from grueflow.command_line import check_targets
    from grueflow.pipeline import STAGES

    outputs = [template for stage in STAGES.values() for template in stage.outputs.values()]
    seed = r"0|[1-9][0-9]*"
    with pytest.raises(ConfigError, match=re.escape(
            "No rule to produce results/eval/common_gen/t5_ppo_on_supervised/seed0: 't5_ppo_on_supervised' is not "
            "among the suite's methods (zero_shot, supervised, ppo, supervised+ppo) (RL4LMs' config "
            "t5_ppo_on_supervised is grueflow's method supervised+ppo: README, \"RL4LMs' configs by name\")")):
        check_targets(["results/eval/common_gen/t5_ppo_on_supervised/seed0"], outputs, SUITE_CHOICES, seed)
    with pytest.raises(ConfigError, match=re.escape(
            "'t5_supervised' is not among the suite's methods (zero_shot, supervised, ppo, supervised+ppo) (RL4LMs' "
            "config t5_supervised is grueflow's method supervised")):
        check_targets(["results/eval/common_gen/t5_supervised/seed0"], outputs, SUITE_CHOICES, seed)
    with pytest.raises(ConfigError, match=re.escape(
            "No rule to produce results/eval/imdb_text_continuation/ppo/seed0: 'imdb_text_continuation' is not among "
            "the suite's tasks (imdb, common_gen) (RL4LMs' task folder imdb_text_continuation is grueflow's task "
            "imdb: README, \"RL4LMs' configs by name\")")):
        check_targets(["results/eval/imdb_text_continuation/ppo/seed0"], outputs, SUITE_CHOICES, seed)
    with pytest.raises(ConfigError, match=re.escape(
            "No rule to produce results/commongen/datapool: 'commongen' is not among the suite's tasks (imdb, "
            "common_gen) (did you mean common_gen?)")):
        check_targets(["--until", "results/commongen/datapool"], outputs, SUITE_CHOICES, seed)
    with pytest.raises(ConfigError, match=re.escape(
            "No rule to produce results/eval/imdb/ppo/seed01: seed01 is no seed: write seed<k> with k an integer "
            "without leading zeros, e.g. seed0")):
        check_targets(["results/eval/imdb/ppo/seed01"], outputs, SUITE_CHOICES, seed)
