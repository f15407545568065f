"""What Snakemake's command line settles before the Snakefile runs (grueflow.command_line)."""

from __future__ import annotations

import pytest

from grueflow.command_line import SHORT_FLAGS, check_config_given_once
from grueflow.config import ConfigError


def test_the_short_flags_are_the_installed_snakemakes():
    """The flags one may bundle before -C, kept as data (building Snakemake's parser costs a quarter second a run):
    a Snakemake that adds or drops one fails here, not silently in the check."""
    from snakemake.cli import get_argument_parser

    actions = get_argument_parser()._actions
    assert SHORT_FLAGS == {s[1] for a in actions for s in a.option_strings
                           if len(s) == 2 and s[1] != "-" and a.nargs == 0}


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
