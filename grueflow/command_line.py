"""What Snakemake's command line settles before a Snakefile runs, checked as grueflow checks a params file.

Snakemake merges ``--config KEY=VALUE`` items into one dict before the Snakefile sees them, keeping the last value
of a key; of two ``--config`` (``-C``) options it keeps the last one's items alone; a command-line ``--config``
replaces a profile's ``config`` whole, and a profile's ``config`` replaces that of the profiles before it. Each of
these drops a setting without a word, where a suite file that names a key twice is refused:
:func:`check_config_given_once` refuses them, each naming what to write instead. Of two ``--configfile`` options,
likewise, Snakemake keeps the last one's files alone. A ``--configfile`` value that is no suite file (a target
written after the option, which takes every word up to the next option) is refused by :func:`check_configfiles`.

Snakemake reads a ``--config`` value's nested scalars as strings (``resources={evaluate: {mem_mb: 500}}`` gives
``'500'``), which the suite's schema refuses as no integer: :func:`command_line_resources` converts the integers of
``resources`` (the Snakefile converts ``seeds`` likewise).

``--rerun-triggers`` (a profile's ``rerun-triggers:``) that leaves out a trigger grueflow reruns jobs through would
have Snakemake plan no job for a param edit while the stale check says a job reruns: :func:`check_rerun_triggers`
refuses it. Snakemake hands a Snakefile its DAG settings, the triggers among them, only once the Snakefile has been
read (snakemake.api.DAGApi), after the stale check has run, so they are read here from the command line and the
profiles.
"""

from __future__ import annotations

import json
import os
import re
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import yaml

from grueflow.config import ConfigError, JobResources


# Snakemake's long options that grueflow's checks read, each with the shortest prefix that names it alone among
# Snakemake 9's long options: its parser (snakemake.cli.get_argument_parser()) takes argparse's abbreviations, so
# --prof is --profile. An option that each of its shorter prefixes shares with another (--config, --configfile) is
# read in full only. Kept as data, as SHORT_FLAGS is; a test compares it with the installed Snakemake's parser.
ABBREVIATIONS = {"--profile": "--pro", "--workflow-profile": "--wo", "--directory": "--di", "--config": "--config",
                 "--configfile": "--configfile", "--configfiles": "--configfiles", "--rerun-triggers": "--rerun-t"}
SHORT_OPTIONS = {"--directory": "d", "--config": "C"}  # the one-letter spelling of an option of ABBREVIATIONS


def long_option(arg: str) -> tuple[Optional[str], Optional[str]]:
    """The option of :data:`ABBREVIATIONS` that ``arg`` names as Snakemake's parser reads it (in full, or a prefix at
    least as long as its entry), with the value attached by ``=`` (None where none is); (None, None) for any other
    argument."""
    if not arg.startswith("--"):
        return None, None
    name, equals, value = arg.partition("=")
    for option, shortest in ABBREVIATIONS.items():
        if name == option or (name.startswith(shortest) and option.startswith(name)):
            return option, value if equals else None
    return None, None


def option_values(argv: Sequence[str], option: str) -> list[str]:
    """The values ``argv`` gives ``option`` of :data:`ABBREVIATIONS`, in order, up to a ``--``: ``option VALUE`` or
    ``option=VALUE``, the option written in full or abbreviated as Snakemake's parser takes it, or with its letter of
    :data:`SHORT_OPTIONS` (``-d VALUE``, ``-dVALUE``, bundled after short flags: ``-nd VALUE``)."""
    values = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, attached = long_option(arg)
        if name is None and option in SHORT_OPTIONS:
            attached = _short_value(arg, SHORT_OPTIONS[option])
            name = option if attached is not None else None
        if name != option:
            continue
        if attached:
            values.append(attached)
        elif i + 1 < len(argv):
            values.append(argv[i + 1])
    return values


def _snakemake_lookup(name: str) -> Optional[str]:
    """The profile file Snakemake's own command line finds for ``name`` from the working folder
    (snakemake.cli.get_profile_dir: a folder, a name under its config folders, the versioned ``config.v8+.yaml``
    first), or None."""
    from snakemake.cli import get_profile_dir

    found = get_profile_dir(name)
    return str(found[1]) if found is not None else None


def start_folder(argv: Sequence[str], environ: Mapping[str, str]) -> Optional[Path]:
    """The folder Snakemake was started in, where its command line looked up the profiles given as relative paths:
    the working folder, unless ``-d``/``--directory`` moved Snakemake before the Snakefile ran; then the shell's
    working folder ``$PWD`` where the relative ``-d`` leads from there to here, else None (it cannot be told)."""
    moved = (option_values(argv, "--directory") or [None])[-1]
    if moved is None:
        return Path.cwd()
    shell = Path(environ.get("PWD", ""))
    if shell.is_absolute() and not Path(moved).is_absolute() and (shell / moved).resolve() == Path.cwd().resolve():
        return shell
    return None


def profile_files(argv: Sequence[str], environ: Mapping[str, str], basedir: str | Path,
                  lookup: Callable[[str], Optional[str]] = _snakemake_lookup) -> list[str]:
    """The files of the Snakemake profiles a run uses, lowest priority first, found as Snakemake 9's command line
    finds them (snakemake.cli.parse_args): each ``--profile``, else ``$SNAKEMAKE_PROFILE`` (a name, a path, or a
    ``[a, b]`` list); then the workflow profile: ``--workflow-profile``, a file, or a folder looked for as given,
    under ``profiles/`` and under the Snakefile's folder ``basedir``'s ``profiles/``, else ``profiles/default``
    where there is one. ``none`` turns either off. Relative paths are read from the folder Snakemake was started in
    (:func:`start_folder`). A profile given that cannot be found (Snakemake was moved by ``-d`` from a folder that
    cannot be told, or a ``--workflow-profile`` that names nothing, which Snakemake skips) raises ConfigError:
    its settings could not be checked."""
    profiles = option_values(argv, "--profile")
    if not profiles and environ.get("SNAKEMAKE_PROFILE"):  # configargparse reads the variable only then
        given = environ["SNAKEMAKE_PROFILE"]
        profiles = [given]
        if given.startswith("[") and given.endswith("]"):
            try:
                profiles = [str(name) for name in json.loads(given)]
            except ValueError:
                profiles = [name.strip() for name in given[1:-1].split(",")]
    if profiles == ["none"]:
        profiles = []
    start = start_folder(argv, environ)
    start = Path() if start is None or start.resolve() == Path.cwd().resolve() else start  # unknown: read from here
    found = []
    for name in profiles:
        file = lookup(_started_in(start, name))
        if file is None:
            raise ConfigError(_not_found("--profile", name, argv))
        found.append(file)
    chosen = (option_values(argv, "--workflow-profile") or [None])[-1]
    if chosen == "none":
        return found
    given = _started_in(start, chosen) if chosen else None
    if not given or not Path(given).is_file():
        name = Path(chosen or "default")
        places = (start / name, start / "profiles" / name, Path(basedir) / "profiles" / name)
        given = next((str(place) for place in places if place.exists()), None)
    if given is None and chosen:
        raise ConfigError(_not_found("--workflow-profile", chosen, argv))
    if given is not None:
        file = lookup(given)
        if file is None:
            raise ConfigError(_not_found("--workflow-profile", chosen or given, argv))
        found.append(file)
    return found


def _started_in(start: Path, name: str) -> str:
    """The profile ``name`` as Snakemake read it in the folder ``start`` it was started in: the path from there where
    one is there; else ``name`` (a name under Snakemake's config folders, or a path from here)."""
    return str(start / name) if (start / name).exists() else name


def _not_found(option: str, name: str, argv: Sequence[str]) -> str:
    """Why ``option``'s profile ``name`` was not found, and what to give instead."""
    moved = (option_values(argv, "--directory") or [None])[-1]
    if moved is not None:
        return (f"{option} {name} names no profile found from {Path.cwd()}, where -d/--directory {moved} moved "
                f"Snakemake from the folder it read the profile in, so its settings cannot be checked: give {option} "
                f"the profile's absolute path")
    return (f"{option} {name} names no profile (a folder holding config.yaml, or the file), and Snakemake would run "
            f"without it without a word: give the profile's path")


class _UniqueKeyLoader(yaml.SafeLoader):
    """Plain YAML, as Snakemake reads a profile, but a key given twice in one mapping is an error: YAML keeps the
    last value of a ``config:`` key, or of ``config:`` itself, without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first on line {seen[key] + 1}), and Snakemake "
                    f"would keep the last value without a word; keep one", key_node.start_mark)
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def profile_config(path: str | Path) -> Optional[list[str]]:
    """The ``config`` of the profile file ``path`` as Snakemake passes it on, a list of KEY=VALUE items (a mapping
    gives its items), or None where the profile sets none. The file is read as Snakemake reads it (plain YAML):
    its other keys are Snakemake's business."""
    given = _profile_data(path).get("config")
    if given is None or given == []:
        return None
    if isinstance(given, dict):
        return [f"{key}={value}" for key, value in given.items()]
    return [str(item) for item in given] if isinstance(given, list) else [str(given)]


def profile_configfile(path: str | Path) -> Optional[list[str]]:
    """The suite files the profile file ``path`` gives as ``configfile`` (``configfiles``), or None where it gives
    none. A profile that gives both keys raises ConfigError: they set one option of Snakemake's, which keeps the
    later key's files alone."""
    data = _profile_data(path)
    keys = [key for key in data if key in ("configfile", "configfiles")]
    if len(keys) > 1:
        kept, dropped = keys[-1], keys[0]
        raise ConfigError(f"the profile {path} gives both {dropped} ({_files(data[dropped])}) and {kept} "
                          f"({_files(data[kept])}), one option of Snakemake's; Snakemake keeps the later, {kept}, and "
                          f"drops {_files(data[dropped])}: give every suite file under one of them")
    given = data[keys[0]] if keys else None
    if given is None or given == []:
        return None
    return [str(item) for item in given] if isinstance(given, list) else [str(given)]


def _files(given: object) -> str:
    return " ".join(map(str, given)) if isinstance(given, list) else str(given)


def _profile_data(path: str | Path) -> dict:
    """The profile file ``path`` read as Snakemake reads it (plain YAML, a key given once); {} for no mapping."""
    try:
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as err:
        at = f"line {err.problem_mark.line + 1}: " if err.problem_mark else ""
        raise ConfigError(f"the profile {path}: {at}{err.problem}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"the profile {path} cannot be read ({err})") from None
    return data if isinstance(data, dict) else {}


# Snakemake's short options that take no value, which argparse lets one bundle before another (-nC k=v): those of
# snakemake.cli.get_argument_parser() in Snakemake 9 (building that parser costs a quarter second a run)
SHORT_FLAGS = frozenset("DFSafhklnptv")


def _short_value(arg: str, letter: str) -> Optional[str]:
    """The value the one-letter option ``-<letter>`` takes in a bundle of short options (``-Ck=v`` -> ``k=v``;
    ``-C=k=v`` -> ``k=v``; ``-nC`` -> "", its value in the next arguments), or None where ``arg`` holds no such
    option: argparse reads the letters after ``-`` as flags until one takes a value, which takes the rest."""
    if not arg.startswith("-") or arg.startswith("--") or len(arg) < 2:
        return None
    if arg.startswith(f"-{letter}="):
        return arg[3:]
    for k, found in enumerate(arg[1:], start=1):
        if found == letter:
            return arg[k + 1:]
        if found not in SHORT_FLAGS:
            return None
    return None


def _repeated(items: Sequence[str]) -> list[str]:
    keys = [item.split("=", 1)[0] for item in items]
    return sorted({key for key in keys if keys.count(key) > 1})


def _words_after(argv: Sequence[str], i: int) -> list[str]:
    """The values of the option at ``argv[i]`` that takes one or more: the words after it up to the next option."""
    words = []
    for item in argv[i + 1:]:
        if item.startswith("-"):
            break
        words.append(item)
    return words


CONFIGFILE_OPTIONS = ("--configfile", "--configfiles")  # one option of Snakemake's, two spellings


def configfile_options(argv: Sequence[str]) -> list[list[str]]:
    """The files of each ``--configfile`` (``--configfiles``) option in ``argv``, in order, up to a ``--``: the
    option takes one or more files (``--configfile A B``, the words up to the next option) or one attached
    (``--configfile=A``)."""
    options = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, attached = long_option(arg)
        if name in CONFIGFILE_OPTIONS:
            options.append([attached] if attached is not None else _words_after(argv, i))
    return options


def check_configfile_given_once(argv: Sequence[str]) -> None:
    """Raise ConfigError where ``argv`` gives ``--configfile`` more than once: Snakemake keeps the last option's
    files alone and drops the suite files of the others without a word (``--configfile A B``, one option, lays B
    over A)."""
    options = configfile_options(argv)
    if len(options) > 1:
        dropped = [f for files in options[:-1] for f in files]
        raise ConfigError(f"--configfile is given {len(options)} times; Snakemake keeps only the last one's files "
                          f"({' '.join(options[-1])}) and drops {' '.join(dropped)}: give the suite files after one "
                          f"--configfile")


SUITE_SUFFIXES = (".yaml", ".yml", ".json")  # what a suite file is written in: YAML, or JSON, which YAML reads


def configfile_problem(path: str | Path) -> Optional[str]:
    """Why ``path``, a file Snakemake took as a config file, is no suite file, or None: it lies under ``results/``
    (what the pipeline writes: a target), is a folder, is not a ``.yaml``, ``.yml`` or ``.json`` file, or does not
    exist. Relative paths are read from the working folder, the project's root."""
    results = Path(os.path.abspath("results"))
    where = Path(os.path.abspath(path))
    if where == results or results in where.parents:
        return "it lies under results/, where the pipeline writes what it builds"
    if where.is_dir():
        return "it is a folder"
    if where.suffix.lower() not in SUITE_SUFFIXES:
        return f"a suite file is a {', '.join(SUITE_SUFFIXES[:-1])} or {SUITE_SUFFIXES[-1]} file"
    if not where.exists():
        return "it does not exist"
    return None


def check_configfiles(files: Sequence[str | Path]) -> None:
    """Raise ConfigError naming the first of ``files`` (the ``--configfile`` values, as given or absolute) that is
    no suite file (:func:`configfile_problem`): Snakemake's ``--configfile`` takes every word after it up to the next
    option, so ``--configfile SUITE TARGET`` reads the target as a second suite file, and fails with a traceback
    (a target not built yet), with "Config file must be given as JSON or YAML" (a table), or lays a JSON output's keys
    over the suite. A missing suite file is named with the suites there are."""
    for path in files:
        problem = configfile_problem(path)
        if problem is None:
            continue
        shown = _shown_path(path)
        if problem == "it does not exist":  # a suite file's name, mistyped
            suites = sorted(str(p) for p in Path("params", "suites").glob("*.yaml"))
            raise ConfigError(f"--configfile {shown} does not exist (relative paths are read from {Path.cwd()}); "
                              f"give a suite file, e.g. {', '.join(suites) or 'params/suite.yaml'}")
        raise ConfigError(f"--configfile {shown} is not a suite file ({problem}): Snakemake's --configfile takes "
                          f"every word after it up to the next option as a config file, so a target written after "
                          f"it is read as one; put the targets before --configfile, or write --configfile=SUITE")


DEFAULT_SUITE = "params/suite.yaml"  # the suite file the Snakefile reads where no --configfile is given


def check_working_folder(snakefile_folder: str | Path) -> None:
    """Raise a :class:`ConfigError` where Snakemake runs in another folder than the Snakefile's (``snakemake -s
    ../Snakefile`` from ``results/``) and :data:`DEFAULT_SUITE`, which the Snakefile reads by default, is missing in
    the working folder while it lies beside the Snakefile: the rules read every path relative to the working folder,
    so the project's root is where Snakemake must run."""
    from grueflow.io import working_folder

    root = Path(os.path.realpath(snakefile_folder))
    here = working_folder()
    if os.path.realpath(here) == str(root) or os.path.exists(DEFAULT_SUITE) or not (root / DEFAULT_SUITE).is_file():
        return
    raise ConfigError(f"snakemake runs in the working folder {here}, not the project's root {root}, where "
                      f"{DEFAULT_SUITE} lies: run it from {root} (or add --directory {root})")


def _shown_path(path: str | Path) -> str:
    """``path`` relative to the working folder where it lies in it, else as given."""
    return os.path.relpath(path) if Path(os.path.abspath(path)).is_relative_to(Path.cwd()) else str(path)


def suite_name(files: Sequence[str | Path], config_given: Mapping[str, Any]) -> str:
    """How a message names the suite Snakemake read: its file(s) (``workflow.configfiles``, relative to the working
    folder where they lie in it), and ``--config`` where settings were laid over them (``config_given``: the
    command line's or a profile's ``config``), so that a key the suite refuses is looked for where it was given."""
    named = " ".join(_shown_path(path) for path in files) or "the suite"
    return f"{named} with --config" if config_given else named


def check_config_given_once(argv: Sequence[str], profiles: Sequence[str | Path]) -> None:
    """Raise ConfigError where Snakemake would drop a ``--config`` setting without a word (see the module
    docstring): a key given twice on the command line ``argv`` or in one profile file's ``config`` (``profiles``,
    lowest priority first), two ``--config`` options, a profile's ``config`` beside a command-line ``--config``,
    two profiles that both set ``config``; and two ``--configfile`` options (:func:`check_configfile_given_once`),
    a profile's ``configfile`` beside a command-line ``--configfile``, or two profiles that both set it."""
    check_configfile_given_once(argv)
    suites = [(path, given) for path in profiles if (given := profile_configfile(path)) is not None]
    files = configfile_options(argv)
    _given_in_one_place("configfile", suites, " ".join(files[-1]) if files else None, "suite files", "",
                        "give the suite")
    options, items = [], []
    for i, arg in enumerate(argv):
        name, attached = long_option(arg)
        if name != "--config":  # -C k=v, -Ck=v, or -C among other short flags: -nC k=v, -nCk=v
            attached = _short_value(arg, "C")
            if attached is None:
                continue
        given = [attached] if attached else _words_after(argv, i)
        options.append(" ".join(given))
        items += given
    if len(options) > 1:
        raise ConfigError(f"--config is given {len(options)} times ({'; '.join(options)}); Snakemake keeps only the "
                          f"last one's settings: give every KEY=VALUE after one --config")
    if _repeated(items):
        raise ConfigError(f"--config gives {', '.join(map(repr, _repeated(items)))} twice, and Snakemake would keep "
                          f"the last value without a word; keep one")
    setting: list[tuple[str | Path, list[str]]] = [(path, given) for path in profiles
                                                   if (given := profile_config(path)) is not None]
    for path, given in setting:
        if _repeated(given):
            raise ConfigError(f"the profile {path} gives {', '.join(map(repr, _repeated(given)))} twice in its config, "
                              f"and Snakemake would keep the last value without a word; keep one")
    _given_in_one_place("config", setting, options[0] if options else None, "settings", " settings",
                        "give every KEY=VALUE")


# the keys of a rule's resources that take an integer (threads, mem_mb, runtime, gpu), from their one declaration
RESOURCE_INTEGERS = tuple(name for name, hint in typing.get_type_hints(JobResources).items() if hint == Optional[int])
INTEGER = r"-?(0|[1-9][0-9]*)"  # an integer as YAML 1.1 (Snakemake) and YAML 1.2 (DVC) both read it


def command_line_resources(merged: Mapping[str, Any], given: object) -> dict[str, Any]:
    """The suite's ``resources`` ``merged`` (the suite file's, with the ``--config`` ones laid over them) with each
    value ``given`` on the command line (``--config resources=...``, as Snakemake read it: nested scalars are
    strings) for an integer key (:data:`RESOURCE_INTEGERS`) made an integer. A value written otherwise (``5e2``,
    ``0500``, ``1.5``, ``lots``) raises ConfigError with the spelling that works; other keys and shapes are left as
    they are, for the suite's validation to judge."""
    result = {rule: dict(values) if isinstance(values, Mapping) else values for rule, values in merged.items()}
    if not isinstance(given, Mapping):
        return result
    for rule, values in given.items():
        if not isinstance(values, Mapping) or not isinstance(result.get(rule), dict):
            continue
        for key, value in values.items():
            if key not in RESOURCE_INTEGERS or not isinstance(value, str):
                continue
            if re.fullmatch(INTEGER, value) is None:
                raise ConfigError(f"--config resources: {rule}: {key}: {value!r} is no integer written without "
                                  f"leading zeros; write --config 'resources={{{rule}: {{{key}: N}}}}' with N an "
                                  f"integer, set it in the suite file's resources:, or give --set-resources "
                                  f"{rule}:{key}=N for one run")
            result[rule][key] = int(value)
    return result


def _given_in_one_place(key: str, profiles: Sequence[tuple[str | Path, list[str]]], command_line: Optional[str],
                        kept: str, kept_of_last: str, advice: str) -> None:
    """Raise ConfigError where Snakemake would drop the ``key`` (``config``, ``configfile``) that one place gives: a
    profile's beside the command line's ``--<key>`` (``command_line``, its words; None where it gives none), whose
    ``kept`` alone Snakemake keeps, or two profiles' (``profiles``: each file with the words it gives, lowest
    priority first), of which it keeps the last's (``kept_of_last`` follows its name). ``advice`` starts the way
    out."""
    if profiles and command_line is not None:
        path, given = profiles[-1]
        raise ConfigError(f"the profile {path} sets {key} ({' '.join(given)}) and the command line gives --{key} "
                          f"({command_line}); Snakemake keeps the command line's {kept} alone, dropping the "
                          f"profile's: {advice} in one of them")
    if len(profiles) > 1:
        raise ConfigError(f"the profiles {' and '.join(str(path) for path, _ in profiles)} each set {key}; Snakemake "
                          f"keeps only {profiles[-1][0]}'s{kept_of_last}: {advice} in one")


# Snakemake 9's rerun triggers, in its order, and why grueflow needs each of those it reruns jobs through: modification
# times (a stage's code), params (every rule takes its params slices, method file and suite values, and the stale
# check's tokens and content digests, as params), input (the set of files a job reads: the human-evaluation table's
# imports, one per answered batch) and code (the text of a rule's command, as DVC reruns a stage whose cmd changed).
# software-env is not needed: no rule declares a conda environment or a container.
SNAKEMAKE_RERUN_TRIGGERS = ("mtime", "params", "input", "software-env", "code")
RERUN_TRIGGERS = {"mtime": "a stage's code edited", "params": "a params or method file edited, a stale line",
                  "input": "a batch's answers removed from data/human/", "code": "a rule's command changed"}


def rerun_triggers(argv: Sequence[str], profiles: Sequence[str | Path]) -> tuple[Optional[str], Optional[list[str]]]:
    """Where the rerun triggers of a run come from, and the triggers, as Snakemake 9's command line settles them:
    the last ``--rerun-triggers`` option of ``argv`` (the words after it up to the next option, or the one attached
    by ``=``; up to a ``--``), else the last of the profile files ``profiles`` (lowest priority first,
    :func:`profile_files`) that sets ``rerun-triggers``; (None, None) where none gives them (every trigger)."""
    given = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, attached = long_option(arg)
        if name == "--rerun-triggers":
            given = [attached] if attached is not None else _words_after(argv, i)
    if given is not None:
        return "--rerun-triggers", given
    for path in reversed(profiles):
        data = _profile_data(path)
        keys = [key for key in data if key in ("rerun-triggers", "--rerun-triggers") and data[key] is not None]
        if keys:
            value = data[keys[-1]]
            return f"the profile {path}", [str(item) for item in value] if isinstance(value, list) else [str(value)]
    return None, None


def check_rerun_triggers(argv: Sequence[str], profiles: Sequence[str | Path]) -> None:
    """Raise ConfigError where the rerun triggers the command line ``argv`` or the profile files ``profiles`` give
    (:func:`rerun_triggers`) leave out one of :data:`RERUN_TRIGGERS`: Snakemake would plan no job for what grueflow
    reruns through it ("Nothing to be done" after a param edit, while the stale check says a job reruns)."""
    source, given = rerun_triggers(argv, profiles)
    missing = [trigger for trigger in RERUN_TRIGGERS if given is not None and trigger not in given]
    if given is None or not missing:
        return
    order = {trigger: i for i, trigger in enumerate(SNAKEMAKE_RERUN_TRIGGERS)}
    needed = sorted({*given, *RERUN_TRIGGERS}, key=lambda trigger: (order.get(trigger, len(order)), trigger))
    named = [f"{trigger} ({RERUN_TRIGGERS[trigger]})" for trigger in missing]
    left_out = f"{', '.join(named[:-1])} and {named[-1]}" if len(named) > 1 else named[0]
    why = f"leaves out {left_out}, which grueflow reruns jobs through: Snakemake would plan no job for these changes"
    if source == "--rerun-triggers":
        raise ConfigError(f"--rerun-triggers {' '.join(given)} {why}; drop the option to take Snakemake's default "
                          f"(every trigger), or give --rerun-triggers {' '.join(needed)}")
    raise ConfigError(f"{source}'s rerun-triggers: {' '.join(given)} {why}; drop the key to take Snakemake's "
                      f"default (every trigger), or set rerun-triggers: [{', '.join(needed)}]")


# RL4LMs' task folders (scripts/training/task_configs/<folder>/) whose grueflow task has another name
# (README "RL4LMs' configs by name"); the others are named alike
RL4LMS_TASKS = {"imdb_text_continuation": "imdb", "summarization": "cnn_dailymail", "dialog": "daily_dialog"}
# RL4LMs' config names <model>_<algorithm>[_on_supervised], e.g. t5_ppo_on_supervised (RL4LMs' models, as spelt there)
RL4LMS_CONFIG = re.compile(r"(?:t5|gpt2|bart|blendorbot|blenderbot)_(?P<algorithm>[a-z0-9]+)(?P<on>_on_supervised)?")
WILDCARD = re.compile(r"{(\w+)}")
# how a refused target names the values a wildcard of the stage outputs takes
CHOICE_NAMES = {"task": "tasks", "method": "methods", "rl_method": "RL methods", "dpo_method": "preference methods",
                "method_a": "methods", "method_b": "methods"}


def _template_pattern(template: str) -> re.Pattern[str]:
    """A stage output template (``results/eval/{task}/{method}/seed{seed}``) as a pattern that any name of one path
    part fills, with a named group per wildcard; a path below the output (a file of its folder) matches too."""
    parts = WILDCARD.split(template)
    pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)" for i, part in enumerate(parts))
    return re.compile(f"{pattern}(?:/.*)?")


def _suggestion(wildcard: str, value: str, valid: Sequence[str]) -> str:
    """How a refused target's ``value`` of ``wildcard`` may be meant: RL4LMs' name of a task or of a config's method
    (README "RL4LMs' configs by name"), ``supervised_ppo`` for ``supervised+ppo``, or a close spelling; ""."""
    import difflib

    if wildcard == "task" and value in RL4LMS_TASKS:
        return (f" (RL4LMs' task folder {value} is grueflow's task {RL4LMS_TASKS[value]}: README, \"RL4LMs' configs "
                f"by name\")")
    config = RL4LMS_CONFIG.fullmatch(value)
    if wildcard != "task" and config is not None:
        algorithm = config["algorithm"]
        method = algorithm if algorithm == "supervised" or not config["on"] else f"supervised+{algorithm}"
        return (f" (RL4LMs' config {value} is grueflow's method {method}: README, \"RL4LMs' configs by name\")")
    close = [name for name in (value.replace("_", "+"), value.replace("-", "+")) if name in valid and name != value]
    close = close or difflib.get_close_matches(value, valid, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def target_problem(target: str, outputs: Sequence[str], choices: Mapping[str, Sequence[str]],
                   seed: str) -> Optional[str]:
    """Why Snakemake has no rule for ``target`` (a path under ``results/``, relative to the project), or None: where
    it has the shape of a stage output (one of the templates ``outputs``, or a path below one) whose every match
    names a value outside ``choices`` (wildcard -> the suite's values: task, method, rl_method, ...) or a seed
    ``seed`` (a pattern) does not take, the first such value with the valid ones and how it may be meant
    (:func:`_suggestion`). A path of no output's shape, or one that some output's values all take, is None:
    Snakemake plans it, or says it has no rule."""
    best: Optional[list[str]] = None
    for template in outputs:
        match = _template_pattern(template).fullmatch(target)
        if match is None:
            continue
        problems = []
        for wildcard, value in match.groupdict().items():
            if wildcard == "seed" and not re.fullmatch(seed, value):
                problems.append(f"seed{value} is no seed: write seed<k> with k an integer without leading zeros, "
                                f"e.g. seed0")
            elif wildcard in choices and value not in choices[wildcard]:
                valid = choices[wildcard]
                problems.append(f"{value!r} is not among the suite's {CHOICE_NAMES.get(wildcard, wildcard)} "
                                f"({', '.join(valid) or 'none'}){_suggestion(wildcard, value, valid)}")
        if not problems:
            return None
        best = problems if best is None or len(problems) < len(best) else best
    if best is None:
        return None
    return f"No rule to produce {target}: {'; '.join(best)}"


def check_targets(argv: Sequence[str], outputs: Sequence[str], choices: Mapping[str, Sequence[str]],
                  seed: str) -> None:
    """Raise ConfigError for the first word of ``argv`` (a target, or an option's value such as ``--until``'s) that
    names a path under ``results/`` of a stage output's shape with a task, method or seed the suite does not have
    (:func:`target_problem`); Snakemake says only "No rule to produce" (MissingRuleException). Snakemake hands a
    Snakefile its targets only once the Snakefile has been read, so they are read here from the command line."""
    for arg in argv:
        if arg == "--":
            break
        word = arg.partition("=")[2] if arg.startswith("-") else arg
        if not word or word.startswith("-"):
            continue
        target = os.path.relpath(os.path.abspath(word))
        if not target.startswith("results" + os.sep):
            continue
        problem = target_problem(target, outputs, choices, seed)
        if problem is not None:
            raise ConfigError(problem)
