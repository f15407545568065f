"""The ``grueflow`` command: everyday use of the pipeline from a shell.

    grueflow list [tasks|methods|metrics|models]   what the registries hold, one line each
    grueflow run [--suite FILE] [--cores N] ...     snakemake on a suite (other arguments go to snakemake)
    grueflow diff REV_A REV_B                       the GRUE table's changes between two commits (dvc metrics diff)
    grueflow show RUN [-n N]                        sample prompts, generations, references and scores of a run

This module is the user interface, so it writes to stdout. A subcommand is one ``cmd_<name>(args) -> int``
function plus one ``add_<name>(subparsers)`` registration listed in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
from decimal import Context
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from grueflow.command_line import check_configfile_given_once, check_configfiles, configfile_options
from grueflow.config import ConfigError, load_yaml12
from grueflow.grue import grue_table_problem
from grueflow.interrupt import say
from grueflow.io import DataError, copy_note, file_link_target, linked_path, refuse_special_file
from grueflow.stage import GivenOnce, positive

GRUE_JSON = "results/grue_table.json"
METRICS_SUFFIXES = (".json", ".yaml", ".yml", ".toml")  # what `dvc metrics` reads as a metrics file
EVAL_DIR = Path("results") / "eval"
PREDICTIONS = "predictions.jsonl"


class CliError(Exception):
    """A user error: printed as one ``error:`` line, exit code 2."""


# -- list -----------------------------------------------------------------------------------------

def registries() -> dict[str, dict[str, str]]:
    """Every registered name with its one-line description, by kind (imports the registries)."""
    from grueflow.data import DATAPOOLS
    from grueflow.metrics import describe
    from grueflow.models import MODELS
    from grueflow.rl import ALGORITHMS

    methods = {"zero_shot": "the base model as it is (no training)",
               "supervised": "supervised warm start on the references (params/methods/supervised.yaml)",
               **ALGORITHMS.describe(),
               "supervised+<algorithm>": "any RL algorithm started from the warm start",
               "dpo": "DPO (or IPO): learns from a preference set, no reward in the loop (a suite's "
                      "preference_methods; params/methods/dpo.yaml)",
               "supervised+dpo": "DPO started from the warm start"}
    return {"tasks": DATAPOOLS.describe(), "methods": methods, "metrics": describe(), "models": MODELS.describe()}


KINDS = ("tasks", "methods", "metrics", "models")
KIND_HEADINGS = {"tasks": "tasks (datapool ids for a task file's datapool.id)",
                 "methods": "methods (zero_shot, supervised, the RL algorithm ids of a suite's algorithms, its "
                            "preference_methods)",
                 "metrics": "metrics (evaluation metrics and reward components)",
                 "models": "models (model.id in a task file)"}


def _kind(text: str) -> str:
    if text not in KINDS:  # (argparse's choices= misreads an empty nargs="*" list on Python 3.11)
        raise argparse.ArgumentTypeError(f"invalid kind {text!r} (choose from {', '.join(KINDS)})")
    return text


def cmd_list(args: argparse.Namespace) -> int:
    listing = registries()
    for kind in dict.fromkeys(args.kinds or KINDS):  # each kind once, in the order first given
        names = listing[kind]
        width = max(map(len, names))
        print(f"{KIND_HEADINGS[kind]}:")
        for name, description in names.items():
            print(f"  {name:<{width}}  {description}")
        print()
    return 0


def add_list(sub: Any) -> None:
    p = sub.add_parser("list", help="tasks, methods, metrics and models in the registries",
                       description="List what the registries hold, with one-line descriptions.")
    p.add_argument("kinds", nargs="*", type=_kind, metavar="KIND",
                   help=f"only these kinds (choose from {', '.join(KINDS)}; default: all)")
    p.set_defaults(func=cmd_list)


# -- run ------------------------------------------------------------------------------------------

def check_not_in_subfolder(command: str, alternative: str) -> None:
    """Raise CliError where the working folder is a subfolder of a project (a folder above it holds the Snakefile):
    ``command`` names results/ relative to the project's root, so from there it finds nothing and would give the
    wrong cause (no runs yet, a revision without the table)."""
    here = Path.cwd()
    root = next((folder for folder in here.parents if (folder / "Snakefile").is_file()), None)
    if not (here / "Snakefile").is_file() and root is not None:
        raise CliError(f"no Snakefile in {here}; run grueflow {command} from the project's root, {root}{alternative}")


def core_count(text: str) -> str:
    """argparse type of ``run --cores``: a positive integer or ``all``. Snakemake takes 0 (or less) and then waits
    forever for a core to run its first job on."""
    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer or all, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or all, got {value}")
    return str(value)


# Snakemake's command line with a Ctrl-C before its jobs ending in exit code 130, not a traceback
SNAKEMAKE_MAIN = Path(__file__).resolve().with_name("snakemake_main.py")


def snakemake_command(suite: Path | None, cores: str, extra: Sequence[str]) -> list[str]:
    """The snakemake command line ``grueflow run`` executes: this interpreter's snakemake, through
    :data:`SNAKEMAKE_MAIN` (``snakemake`` and the arguments from ``command[2]`` on are what a user would type). The
    suite is one ``--configfile=FILE`` argument: snakemake's ``--configfile`` takes one or more values, so a separate
    FILE would swallow the targets that follow it in ``extra`` as more config files."""
    command = [sys.executable, str(SNAKEMAKE_MAIN), "--cores", cores]
    if suite is not None:
        command.append(f"--configfile={suite}")
    return command + list(extra)


def check_one_suite_option(suite: Path | None, extra: Sequence[str]) -> None:
    """Raise CliError where the suite is given by more than one option (``--suite`` and a ``--configfile`` among
    Snakemake's arguments ``extra``, or two ``--configfile``): Snakemake keeps the last option's files alone; and
    where a ``--configfile`` value is no suite file (:func:`grueflow.command_line.check_configfiles`: a target after
    the option, which Snakemake would fail on with a traceback before the Snakefile runs)."""
    given = configfile_options(extra)
    if suite is not None and given:
        files = " ".join(given[-1])
        raise CliError(f"--suite {suite} and --configfile {files} both give the suite; Snakemake would keep {files} "
                       f"alone and drop {suite}: give one of them, or both after one option (--configfile {suite} "
                       f"{files} lays the second over the first)")
    try:
        check_configfile_given_once(extra)
        check_configfiles([file for files in given for file in files])
    except ConfigError as err:
        raise CliError(str(err)) from None


SUITE_SUFFIXES = (".yaml", ".yml", ".json")  # what a suite file is named (grueflow.command_line.check_configfiles)


def suite_file(text: str) -> Path:
    """argparse type of ``run --suite``: a file name. An empty value is refused here, as ``Path('')`` is ``.``, which
    exists."""
    if not text:
        raise argparse.ArgumentTypeError("--suite needs a file name, got an empty value; give a suite file, e.g. "
                                         "params/suites/algorithms.yaml, or leave --suite out for params/suite.yaml")
    return Path(text)


def check_suite_file(suite: Path) -> None:
    """Raise CliError where ``suite`` is no regular file: a FIFO, socket or device, a folder (naming the suite files
    in it) or a path that does not exist (naming the suites under params/suites)."""
    try:
        refuse_special_file(suite, "give the suite file itself", "suite file")
    except DataError as err:
        raise CliError(str(err)) from None
    if suite.is_dir():
        inside = sorted(str(p) for p in suite.iterdir() if p.suffix in SUITE_SUFFIXES and p.is_file())
        held = f"give a suite file in it: {', '.join(inside)}" if inside else \
            f"it holds no suite file ({', '.join(SUITE_SUFFIXES)}); give a suite file, e.g. params/suite.yaml"
        raise CliError(f"--suite {suite} is a folder; {held}")
    if not suite.is_file():
        suites = sorted(str(p) for p in Path("params", "suites").glob("*.yaml"))
        raise CliError(f"suite file {str(suite)!r} does not exist; suites here: {', '.join(suites) or 'none'}")


# the signals grueflow run passes on to Snakemake, and Python's own handler of each (one set to anything else, e.g.
# ignored by nohup or by the shell that started a background job, is left as it is, and Snakemake inherits it)
FORWARDED = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}
INTERRUPTED = "interrupted: no output was left half-written; rerun the same command"


def run_snakemake(command: Sequence[str]) -> int:
    """Run ``command`` (Snakemake) to its end and return its exit status (128 + the signal's number where a signal ended
    it, as a shell reports it). Snakemake runs in a process group of its own, and the first of :data:`FORWARDED`
    that reaches grueflow (Ctrl-C, which the terminal sends to grueflow's group; a ``kill`` of grueflow alone or of
    its group; a hang-up, passed on as SIGTERM) is passed on to that group once, so that Snakemake and its jobs each
    get it exactly once, as in a plain ``snakemake``: Snakemake then cancels its jobs, which end in their own line,
    and removes its lock before it exits. Later signals are not passed on (a second Ctrl-C cannot cut that clean-up
    short); grueflow waits for Snakemake's exit, then prints :data:`INTERRUPTED`. Ctrl-Z (SIGTSTP) stops Snakemake's
    group with grueflow, and ``fg`` or ``bg`` resumes both."""
    state: dict[str, Any] = {"process": None, "signal": None, "sent": False}

    def pass_on() -> None:
        if state["process"] is not None and state["signal"] is not None and not state["sent"]:
            state["sent"] = True  # a hang-up as SIGTERM: Snakemake ends on SIGHUP before it removes its lock
            _signal_group(state["process"].pid, signal.SIGTERM if state["signal"] == signal.SIGHUP else state["signal"])

    def forward(signum: int, frame: Any) -> None:
        state["signal"] = state["signal"] or signum
        pass_on()

    def stop(signum: int, frame: Any) -> None:
        if state["process"] is not None:
            _signal_group(state["process"].pid, signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until a SIGCONT (fg, bg)
        signal.signal(signal.SIGTSTP, stop)
        if state["process"] is not None:
            _signal_group(state["process"].pid, signal.SIGCONT)

    defaults = {**FORWARDED, signal.SIGTSTP: signal.SIG_DFL}
    taken = {signum: signal.signal(signum, stop if signum == signal.SIGTSTP else forward)
             for signum, default in defaults.items() if signal.getsignal(signum) is default}
    try:
        state["process"] = subprocess.Popen(command, process_group=0)
        pass_on()  # a signal that came before the group existed
        code = state["process"].wait()
    finally:
        for signum, handler in taken.items():
            signal.signal(signum, handler)
    if state["signal"] is not None:
        say(INTERRUPTED)
    return 128 - code if code < 0 else code


def _signal_group(pid: int, signum: int) -> None:
    """Send ``signum`` to the process group led by ``pid``; nothing where it has ended."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def cmd_run(args: argparse.Namespace) -> int:
    if args.suite is not None:
        check_suite_file(args.suite)
    check_one_suite_option(args.suite, args.extra)
    if not Path("Snakefile").is_file():
        raise CliError(f"no Snakefile in {Path.cwd()}; run grueflow run from the project's root")
    command = snakemake_command(args.suite, args.cores, args.extra)
    print("$ snakemake " + " ".join(command[2:]), file=sys.stderr)
    return run_snakemake(command)


def add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a suite with snakemake (other arguments go to snakemake)",
                       description="Run the pipeline with snakemake: `snakemake --cores N [--configfile=SUITE]` "
                                   "plus any other arguments, e.g. -n (dry run), --report report.html, targets.")
    p.add_argument("--suite", type=suite_file, default=None, action=GivenOnce,
                   help="a suite file used instead of params/suite.yaml (keys it leaves out take their defaults), "
                        "e.g. params/suites/algorithms.yaml")
    p.add_argument("--cores", default="all", type=core_count,
                   help="cores snakemake may use: a positive integer or all (default: all)")
    p.set_defaults(func=cmd_run, passthrough=True)


# -- diff -----------------------------------------------------------------------------------------

def key_path(key: str, tables: Sequence[Any]) -> tuple[str, ...]:
    """The names along a dotted key of ``dvc metrics diff`` (``imdb.v2.ppo.reward`` -> ``imdb.v2``, ``ppo``,
    ``reward``), matched against the metrics JSONs of both revisions: a task, method or metric name may hold a dot
    itself, so the key is cut where the tables' own names end. A key that neither table holds (one that could not be
    read) is cut at every dot."""
    for table in tables:
        path = _match_path(table, key)
        if path is not None:
            return path
    return tuple(key.split("."))


def _match_path(node: Any, key: str) -> tuple[str, ...] | None:
    """The names from ``node`` down to the leaf that dvc calls ``key``; None where ``node`` holds no such leaf."""
    if not isinstance(node, dict):
        return None
    for name, child in node.items():
        if name == key and not isinstance(child, dict):
            return (name,)
        if key.startswith(f"{name}."):
            rest = _match_path(child, key[len(name) + 1:])
            if rest is not None:
                return (name, *rest)
    return None


def row_names(path: tuple[str, ...]) -> tuple[str, str, str]:
    """Task, method and metric of a GRUE table key path (``grue_score.<method>`` for the GRUE score); a shorter path
    of another metrics file is all metric."""
    if path[0] == "grue_score" and len(path) == 2:
        return "(all tasks)", path[1], "grue_score"
    if len(path) < 3:
        return "", "", ".".join(path)
    return path[0], path[1], ".".join(path[2:])


def diff_table(diff: dict[str, dict[str, Any]], tables: Sequence[Any]) -> pd.DataFrame:
    """``dvc metrics diff --json`` entries of the GRUE table as rows: task, method, metric, old, new, change; the
    metrics JSONs ``tables`` of both revisions say where each dotted key is cut (:func:`key_path`)."""
    rows = []
    for key, change in diff.items():
        task, method, metric = row_names(key_path(key, tables))
        rows.append({"task": task, "method": method, "metric": metric,
                     "old": change.get("old"), "new": change.get("new"), "change": change.get("diff")})
    frame = pd.DataFrame(rows, columns=["task", "method", "metric", "old", "new", "change"])
    return frame.sort_values(["task", "method", "metric"], kind="stable").reset_index(drop=True)


def _number(value: Any) -> str:
    """A value as diff and show print it: a number signed, to 4 significant digits (``+0.25``, ``-1.235e+22``); None
    and NaN as "—" (unknown); anything else as Python writes it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    try:
        return f"{value:+.4g}"
    except OverflowError:  # an int past a float's range (1.8e308), rounded in decimal: the same digits, no float
        return f"{Context(prec=4).create_decimal(value).normalize():+g}"


ABSENT, NULL = "(absent)", "null"  # a value with no key at that revision; a key whose value is null (—: unknown)


def read_at(rev: str, path: Path, root: Path) -> Any:
    """The content of metrics file ``path`` (relative to the DVC project ``root``; JSON, or YAML for a
    ``.yaml``/``.yml`` name, as dvc reads metrics) at git revision ``rev`` (``workspace``: the file here), through
    DVC (a DVC output is read from the cache, :func:`_bytes_at`); None where it cannot be read."""
    import yaml

    load = yaml.safe_load if path.suffix in (".yaml", ".yml") else json.loads
    try:
        content = (root / path).read_bytes() if rev == "workspace" else _bytes_at(rev, path, root)
        return load(content.decode("utf-8")) if content is not None else None
    except (OSError, ValueError, yaml.YAMLError):  # only the label: "—" says "unknown"
        return None


def holds_values(table: Any) -> bool:
    """Whether a metrics file's content has a leaf dvc can compare: a number (booleans are not) or null."""
    if isinstance(table, dict):
        return any(holds_values(value) for value in table.values())
    return table is None or (isinstance(table, (int, float)) and not isinstance(table, bool))


def flat_keys(table: Any, prefix: str = "") -> list[str]:
    """The dotted keys of a metrics JSON's leaves (``task.method.metric``, ``grue_score.method``), as dvc names
    them; none for a table that could not be read."""
    if not isinstance(table, dict):
        return [prefix[:-1]] if prefix else []
    return [key for name, value in table.items() for key in flat_keys(value, f"{prefix}{name}.")]


def missing_label(table: Any, path: tuple[str, ...]) -> str:
    """How a ``dvc metrics diff`` value of None reads, given the metrics JSON ``table`` of its revision and the key's
    names (:func:`key_path`): :data:`ABSENT` (no such key: a method, task or metric removed or added), :data:`NULL`
    (the key is there, valued null: a metric that could not be computed) or "—" (the table could not be read). dvc
    reports both as null."""
    if not isinstance(table, dict):
        return "—"
    node: Any = table
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return ABSENT
        node = node[part]
    return NULL if node is None else _number(node)


DVC_LOAD_FAILED = "DVC failed to load some metrics for following revisions: '"  # dvc's stderr line (exit code 0)


NOT_A_REPOSITORY = "not a git repository"  # git's error (exit code 128) outside any repository, in the C locale


def check_has_commits(rev_a: str, rev_b: str) -> None:
    """Raise CliError where the working folder is in no git repository (a project built with Snakemake alone), which
    dvc refuses with advice about its own config (``core.no_scm``), or where a revision other than ``workspace`` is
    named in a git repository with no commits yet: dvc reports an empty diff there, and reading a revision fails
    deep in scmrepo. Any other failure of git (exit code 128 for another reason) is left to dvc to report."""
    revisions = [rev for rev in (rev_a, rev_b) if rev != "workspace"]
    head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, text=True, check=False,
                          env={**os.environ, "LC_ALL": "C"})
    if head.returncode == 128 and NOT_A_REPOSITORY in head.stderr:
        raise CliError(f"{Path.cwd()} is not in a git repository: grueflow diff compares the GRUE table (or --target) "
                       f"of git commits whose results dvc repro built; to compare, make it one (git init, dvc repro, "
                       f"git add -A, git commit), then diff two commits, or a commit and workspace (README, "
                       f"\"Comparing across commits\")")
    if revisions and head.returncode == 1:  # 1: a repository without HEAD
        raise CliError(f"the repository has no commits yet, so it has no revision {' or '.join(revisions)}; commit "
                       f"the results first (git add, git commit), then diff two commits, or a commit and workspace")


def metrics_diff(rev_a: str, rev_b: str, target: str, show_all: bool) -> dict[str, dict[str, Any]]:
    """The changes of ``target`` between two git revisions, from ``dvc metrics diff --json``; a revision where dvc
    could not load ``target`` (missing there, not JSON, or a DVC output not in the cache) is a :class:`CliError`
    naming it, never an empty diff. The caller has checked the repository has commits (:func:`check_has_commits`)."""
    command = ["dvc", "metrics", "diff", rev_a, rev_b, "--targets", target, "--json"] + (["--all"] if show_all else [])
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CliError(f"{' '.join(command)} failed: {(result.stderr or result.stdout).strip()}")
    failed = [line.split(DVC_LOAD_FAILED, 1)[1].removesuffix(".").removesuffix("'")
              for line in result.stderr.splitlines() if DVC_LOAD_FAILED in line]
    if failed:
        raise CliError(f"dvc could not load {target} at revision(s) {', '.join(failed)}: it is missing there, not "
                       f"JSON/YAML, or a DVC output not in the cache (`dvc pull` it); give revisions that hold it, "
                       f"or another --target")
    answer = json.loads(result.stdout or "{}")
    if answer and target not in answer:
        raise CliError(f"dvc metrics diff answered for {', '.join(map(str, answer))}, not for {target}: the diff of "
                       f"{target} is unknown; give --target the path dvc names, relative to {Path.cwd()}")
    return answer.get(target, {})


def dvc_root() -> Optional[Path]:
    """The DVC project the working folder lies in: the nearest folder at or above it that holds ``.dvc``; None
    where there is none (dvc itself then says so)."""
    here = Path.cwd()
    return next((folder for folder in (here, *here.parents) if (folder / ".dvc").is_dir()), None)


def in_project(target: str, root: Path) -> Path:
    """``target`` (relative to the working folder, as :func:`metrics_target` gives it) relative to the DVC project
    ``root``, as dvc.lock, the stage records and the tables' records name files: what diff's checks read, so that
    they read and name the same files from any folder of the project."""
    return Path(os.path.relpath(os.path.abspath(target), root))


def metrics_target(target: str) -> str:
    """``target`` as ``dvc metrics diff`` names it in its answer: relative to the working folder, normalised
    (``./results/x.json``, ``results//x.json`` and an absolute path all read ``results/x.json``), links kept as
    given; a target that reaches the project only through a link above it (an absolute path by another name of the
    project's folder, whose working folder is its real path) is named by the real path of its folder. A target
    outside the DVC project (:func:`dvc_root`) either way is a CliError naming it: dvc reads no such file."""
    absolute = Path(os.path.normpath(os.path.abspath(target)))
    root = dvc_root()
    if root is not None and not absolute.is_relative_to(root):
        absolute = Path(os.path.realpath(absolute.parent)) / absolute.name
    if root is not None and not absolute.is_relative_to(root):
        raise CliError(f"--target {target} lies outside the project ({root}): diff compares a metrics file of this "
                       f"project's revisions; give its path inside {root}, e.g. {GRUE_JSON}")
    return Path(os.path.relpath(absolute)).as_posix()


def files_at(rev: str, paths: Sequence[str], root: Path) -> dict[str, bytes | None]:
    """The bytes of each file git tracks (a path relative to the DVC project ``root``, as dvc.lock names it) at git
    revision ``rev`` (``workspace``: the files here that git tracks), read by one ``git cat-file --batch``; None for
    a path that is not a tracked file there (data DVC tracks is never read, so this stays cheap)."""
    if rev == "workspace":
        listed = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=root, capture_output=True,
                                check=False).stdout
        tracked = set(os.fsdecode(listed).split("\0"))
        return {path: (root / path).read_bytes() if path in tracked and (root / path).is_file() else None
                for path in paths}
    names = [f"{rev}:./{path}" for path in paths]  # ./: relative to git's working folder, root
    result = subprocess.run(["git", "cat-file", "--batch"], input="\n".join(names).encode() + b"\n", cwd=root,
                            capture_output=True, check=False)
    found: dict[str, bytes | None] = {}
    out, start = result.stdout, 0
    for path in paths if result.returncode == 0 else []:
        end = out.index(b"\n", start)
        header = out[start:end].split()  # <object> <type> <size>, or <name> missing / ambiguous
        start = end + 1
        if len(header) == 3 and header[1] in (b"blob", b"tree", b"commit", b"tag"):
            size = int(header[2])
            found[path] = out[start:start + size] if header[1] == b"blob" else None
            start += size + 1
    return {path: found.get(path) for path in paths}


def _param(values: Any, key: str) -> Any:
    """The value of a params key as dvc.lock records it (``kl`` or a dotted ``kl.coef``) in a loaded params file;
    :data:`ABSENT` where it is not there."""
    if isinstance(values, dict) and key in values:
        return values[key]
    head, dot, rest = key.partition(".")
    return _param(values[head], rest) if dot and isinstance(values, dict) and head in values else ABSENT


def _locked_at(rev: str, root: Path) -> dict[str, dict]:
    """The stages the dvc.lock of the DVC project ``root`` at git revision ``rev`` records (``workspace``: the one
    there now), by name, as DVC wrote them; empty where there is none or it does not read."""
    import yaml

    lock_text = files_at(rev, ["dvc.lock"], root)["dvc.lock"]
    try:
        stages = load_yaml12(lock_text).get("stages", {}) if lock_text else {}  # as DVC wrote it
    except (yaml.YAMLError, ValueError, AttributeError):
        return {}
    return {name: stage for name, stage in (stages if isinstance(stages, dict) else {}).items()
            if isinstance(stage, dict)}


def out_of_date_files(rev: str, root: Path) -> list[str]:
    """The params files and git-tracked file deps of the DVC project ``root`` (as dvc.lock names them, relative to
    it) whose content at ``rev`` differs from what that revision's dvc.lock recorded when its stages last ran: at
    such a revision the results were not rebuilt after the change. Empty where there is no dvc.lock. What is checked
    is what can be read cheaply at any revision: each params key's value and the md5 of each file dep there; an
    output of another stage (not in git; :func:`unrun_readers` compares those within dvc.lock), a folder dep and a
    params file that is not YAML/JSON are left out, so an empty list does not prove the results are up to date."""
    import hashlib

    import yaml

    stages = _locked_at(rev, root)
    outs = {out.get("path") for stage in stages.values() for out in stage.get("outs", []) or []}
    params = {(file, key): value for stage in stages.values() for file, keys in (stage.get("params") or {}).items()
              for key, value in (keys or {}).items()}
    deps = {dep["path"]: dep for stage in stages.values() for dep in stage.get("deps", []) or []
            if dep.get("path") not in outs and isinstance(dep.get("md5"), str) and not dep["md5"].endswith(".dir")}
    contents = files_at(rev, sorted({file for file, _ in params} | set(deps)), root)
    changed = set()
    for path, dep in deps.items():
        content = contents[path]
        if content is not None and dep.get("hash") != "md5":  # DVC 2's entry: a text file's md5 with CRLF as LF
            content = content.replace(b"\r\n", b"\n")
        if content is not None and hashlib.md5(content).hexdigest() != dep["md5"]:
            changed.add(path)
    for (file, key), value in params.items():
        if Path(file).suffix not in (".yaml", ".yml", ".json") or file in changed or contents[file] is None:
            continue
        try:
            loaded = load_yaml12(contents[file])  # as DVC read it into dvc.lock (JSON is YAML)
        except (yaml.YAMLError, ValueError):
            loaded = None
        if _param(loaded, key) != value:
            changed.add(file)
    return sorted(changed)


def unrun_readers(rev: str, root: Path) -> dict[str, list[str]]:
    """The outputs that the dvc.lock of the DVC project ``root`` at ``rev`` records with another md5 than a stage
    reading them (another stage whose dep it is) recorded when that stage last ran, each with those stages, in
    dvc.lock's order: the output was rebuilt after they ran and they were not rerun (``dvc repro`` stopped between
    them, or run for the upstream stage alone), so what they and the stages after them built, the GRUE table
    included, was not built from it. ``dvc status`` lists such a stage as changed. Read from dvc.lock alone, so it is
    cheap at any revision, and a commit made in that state is seen too; an entry is compared only with one DVC hashed
    the same way (both DVC 3's ``hash: md5``, or both DVC 2's). Empty where there is no dvc.lock."""
    stages = _locked_at(rev, root)
    outs = {out["path"]: out for stage in stages.values() for out in stage.get("outs") or []
            if isinstance(out, dict) and isinstance(out.get("path"), str) and isinstance(out.get("md5"), str)}
    unrun: dict[str, list[str]] = {}
    for name, stage in stages.items():
        for dep in stage.get("deps") or []:
            out = outs.get(dep.get("path")) if isinstance(dep, dict) else None
            if out is not None and isinstance(dep.get("md5"), str) and dep.get("hash") == out.get("hash") and \
                    dep["md5"] != out["md5"] and name not in unrun.get(dep["path"], []):
                unrun.setdefault(dep["path"], []).append(name)
    return unrun


def _some(names: Sequence[str], most: int = 5) -> str:
    """``names`` joined with commas, the first ``most`` of them, then ``"and <n> more"``."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def warn_out_of_date(revs: Sequence[str], root: Path, path: Optional[Path] = None) -> list[str]:
    """Say on stderr which revisions of the DVC project ``root`` hold results not rebuilt after a change of their
    params or code (:func:`out_of_date_files`), or after a stage upstream of others was rebuilt without them
    (:func:`unrun_readers`): a diff that reads "no changes" there means "not rebuilt", not "the change changed
    nothing". Where dvc.lock tells nothing of the workspace and ``path`` (relative to ``root``) is a file of a table
    (:data:`grueflow.stale.TABLES`), what its stage records reading is compared with the stage folders there now
    (:func:`rebuilt_upstream`: one rebuilt, or run by hand, after what read it). One line per revision, naming files
    relative to ``root`` whatever the working folder. The revisions it was said of."""
    warned = []
    for rev in dict.fromkeys(revs):
        changed, unrun = out_of_date_files(rev, root), unrun_readers(rev, root)
        rebuilt = rebuilt_upstream(path, root) if rev == "workspace" and path and not changed and not unrun else []
        if rebuilt:
            warned.append(rev)
            print(f"grueflow diff: warning: the results in the workspace are out of date: {_some(rebuilt, 3)} changed "
                  f"after the stages that read {'it' if len(rebuilt) == 1 else 'them'} were built (their stage records "
                  f"hold another digest: a stage run by hand, or a build stopped before them?); the diff compares the "
                  f"results as built, so rerun them (dvc repro, or grueflow run) to see the change's effect",
                  file=sys.stderr)
            continue
        if not changed and not unrun:
            continue
        warned.append(rev)
        causes = [f"{_some(changed)} changed after dvc.lock was written (its stages were not rerun)"] if changed else []
        if unrun:
            readers = list(dict.fromkeys(name for names in unrun.values() for name in names))
            causes.append(f"{_some(list(unrun), 3)} {'was' if len(unrun) == 1 else 'were'} rebuilt after the stages "
                          f"that read {'it' if len(unrun) == 1 else 'them'} last ran ({_some(readers, 3)} "
                          f"{'was' if len(readers) == 1 else 'were'} not rerun: a dvc repro stopped before "
                          f"{'it' if len(readers) == 1 else 'them'}?)")
        place = "in the workspace" if rev == "workspace" else f"at {rev}"
        print(f"grueflow diff: warning: the results {place} are out of date: {'; '.join(causes)}; the diff compares "
              f"the results as built, so rerun them (dvc repro{'' if rev == 'workspace' else ', then commit'}) to see "
              f"the change's effect", file=sys.stderr)
    return warned


def rebuilt_upstream(path: Path, root: Path) -> list[str]:
    """:func:`grueflow.stale.rebuilt_upstream` of the workspace's table that ``path`` (relative to the DVC project
    ``root``) is a file of (:data:`grueflow.stale.TABLES`); empty for another file."""
    from grueflow import stale

    first = next((first for first, others in stale.TABLES.items() if path in (first, *others)), None)
    return stale.rebuilt_upstream(root, root / first) if first is not None else []


def note_copied(target: str, revs: Sequence[str]) -> bool:
    """Say on stderr where the workspace's ``target`` (one of ``revs`` is ``workspace``) lies in another run's stage
    folder copied or linked there (:func:`grueflow.io.copy_note`): its values are that run's. A commit's file is read
    as that commit holds it, which the workspace's stage record does not describe. Whether it said so."""
    note = copy_note(target) if "workspace" in revs else None
    if note:
        print(f"grueflow diff: note: {note}", file=sys.stderr)
    return bool(note)


def note_edited(path: Path, revs: Sequence[str], root: Path) -> list[str]:
    """Say on stderr where ``path`` (relative to the DVC project ``root``, and so named), at one of ``revs``, is a
    file written with a table (:data:`grueflow.stale.TABLES`: the GRUE table's JSON) whose bytes are not those its
    stage wrote, by the digests the stage recorded beside it (:func:`grueflow.io.files_record`), or a file of a stage
    folder that its ``stage.json`` does not vouch for (an evaluation's ``metrics.json`` edited): edited by hand, so
    its values are no pipeline result. In the workspace (:func:`_edited_here`); at a commit, where the file and its
    record both read from DVC's cache at that commit (:func:`_edited_at`: a hand edit recorded with ``dvc commit``
    and committed). Nothing is said where the record is missing or unreadable (nothing tells). The revisions it was
    said of."""
    noted = []
    for rev in dict.fromkeys(revs):
        record = _edited_here(path, root) if rev == "workspace" else _edited_at(rev, path, root)
        if record is None:
            continue
        noted.append(rev)
        what = f"the digest recorded in {record}" if record.name != "stage.json" else f"what {record} records of it"
        if rev == "workspace":
            print(f"grueflow diff: note: {path} is not what its stage wrote (edited by hand?): it differs from {what}, "
                  f"so its workspace values are no pipeline result; rebuild it (dvc repro, or grueflow run) for the "
                  f"pipeline's values", file=sys.stderr)
        else:
            print(f"grueflow diff: note: {path} at {rev} is not what its stage wrote (edited by hand, then dvc "
                  f"commit?): it differs from {what} at {rev}, so its values there are no pipeline result; rebuild it "
                  f"(dvc repro, which names the stage to rerun) and commit for the pipeline's values", file=sys.stderr)
    return noted


def warn_unlike_lock(path: Path, root: Path) -> None:
    """Say on stderr where the workspace's file ``path`` (relative to the DVC project ``root``, and so named) is an
    output the workspace's dvc.lock records with another md5 (:func:`grueflow.stale.locked_as_is`: one md5 of the file)
    while its params and code are as dvc.lock records them (:func:`warn_out_of_date` said nothing of the workspace; the
    caller checks): not the file DVC built or restored for them, but one built from others and left behind when git
    alone put them back (``git stash``, ``git checkout`` without ``dvc checkout``; ``dvc status`` lists it as modified).
    Its values are then not the results of the workspace's params, though a diff against the commit that holds them
    reads so. A warning, not an error: DVC itself diffs such a file as the workspace's, and the numbers are that file's;
    only their origin is not what the workspace says. Nothing is said where dvc.lock does not record the file (no stage
    writes it, or no dvc.lock); the caller leaves out a file already noted as edited by hand or copied from another
    run."""
    from grueflow.stale import locked_as_is, locked_stages

    stage, entry = locked_stages(root / "dvc.lock").get(path.as_posix(), (None, None))
    if entry is not None and not entry["md5"].endswith(".dir") and not locked_as_is(root / path, entry):
        print(f"grueflow diff: warning: the workspace's {path} is not the one the workspace's dvc.lock records (stage "
              f"{stage}'s out): it was built from other params or code (a git stash, or a git checkout without dvc "
              f"checkout?), so its values are not the workspace's results; run dvc checkout (the results dvc.lock "
              f"records) or dvc repro (rebuild them) first", file=sys.stderr)


def _edited_here(path: Path, root: Path) -> Optional[Path]:
    """The record (relative to ``root``) that the workspace's file ``path`` (relative to the DVC project ``root``) is
    unlike, where it is a file written with a table (:func:`grueflow.stale.edited_files`) or a stage folder's
    (:func:`grueflow.keep.unvouched`); None where it is as written, or nothing tells: no record, or a table's file whose
    bytes the workspace's dvc.lock records where it holds no entry for the table's record
    (:func:`grueflow.stale.locked_as_is`: an earlier result DVC put back under a ``dvc.yaml`` of before, which restored
    no record with it)."""
    from grueflow.io import STAGE_RECORD, files_record
    from grueflow.keep import unvouched
    from grueflow.stale import TABLES, edited_files, locked_as_is, locked_outputs

    first = next((first for first, others in TABLES.items() if path in (first, *others)), None)
    if first is None:
        folder = next((folder for folder in path.parents if (root / folder / STAGE_RECORD).is_file()), None)
        return folder / STAGE_RECORD if folder is not None and (root / path).is_file() and \
            root / path in unvouched(root / folder) else None
    if not (root / files_record(first)).is_file() or path not in edited_files(first, TABLES[first], root):
        return None
    locked = locked_outputs(root / "dvc.lock")
    if files_record(first).as_posix() not in locked and locked_as_is(root / path, locked.get(path.as_posix())):
        return None
    return files_record(first)


def _edited_at(rev: str, path: Path, root: Path) -> Optional[Path]:
    """The record (relative to ``root``) that the file ``path`` (relative to the DVC project ``root``) is unlike at
    the git revision ``rev``, both read through DVC at that revision (:func:`_bytes_at`): a table's
    :func:`grueflow.io.files_record`, or the ``stage.json`` of the nearest folder above it that holds one; None where
    it is as written, or either does not read (a table of a ``dvc.yaml`` of before, whose record DVC did not track),
    and for a ``stage.json`` itself."""
    import hashlib

    from grueflow.io import STAGE_RECORD, files_record, written_digests
    from grueflow.stale import TABLES

    content = _bytes_at(rev, path, root) if path.name != STAGE_RECORD else None  # a record is judged by its own digest
    if content is None:
        return None
    digest = hashlib.sha256(content).hexdigest()
    first = next((first for first, others in TABLES.items() if path in (first, *others)), None)
    if first is not None:
        record = _bytes_at(rev, files_record(first), root)
        try:
            recorded = written_digests(json.loads(record)) if record is not None else None
        except ValueError:
            return None
        return files_record(first) if recorded and path.as_posix() in recorded and \
            recorded[path.as_posix()] != digest else None
    for folder in path.parents[:-1]:
        record = _bytes_at(rev, folder / STAGE_RECORD, root)
        if record is None:
            continue
        try:
            listed = json.loads(record).get("files")
        except (ValueError, AttributeError):
            return None
        meta = listed.get(path.relative_to(folder).as_posix()) if isinstance(listed, dict) else None
        if not isinstance(meta, dict):
            return None
        listed_digest = hashlib.sha256(path.name.encode() + content).hexdigest()  # grueflow.io.fingerprint of a file
        unlike = meta.get("bytes") != len(content) or meta.get("sha256") != listed_digest
        return folder / STAGE_RECORD if unlike else None
    return None


def _bytes_at(rev: str, path: Path, root: Path) -> Optional[bytes]:
    """The bytes of ``path`` (relative to the DVC project ``root``) at git revision ``rev``, through DVC (a DVC
    output read from its cache); None where it cannot be read. DVC's API names a file at a revision relative to the
    root of the git repository, which is ``root`` or holds it (a project made with ``dvc init --subdir``)."""
    import dvc.api
    from dvc.exceptions import DvcException
    from scmrepo.exceptions import SCMError

    prefix = subprocess.run(["git", "rev-parse", "--show-prefix"], cwd=root, capture_output=True, text=True,
                            check=False).stdout.strip()  # root's path in the repository: "" at its root
    try:
        return dvc.api.read((Path(prefix) / path).as_posix(), repo=str(root), rev=rev, mode="rb")
    except (OSError, DvcException, SCMError):
        return None


def flat_values(table: Any, prefix: str = "") -> dict[str, Any]:
    """The leaves of a metrics file's content by their dotted keys (:func:`flat_keys`)."""
    if not isinstance(table, dict):
        return {prefix[:-1]: table} if prefix else {}
    return {key: value for name, item in table.items() for key, value in flat_values(item, f"{prefix}{name}.").items()}


def check_unchanged(target: str, tables: dict[str, Any], revs: Sequence[str]) -> None:
    """Raise CliError where dvc reported no change of ``target`` between ``revs`` while the tables read at them
    (:func:`read_at`) hold a number that differs: dvc's answer then does not describe the file, and "no changes"
    would be false."""
    old, new = (flat_values(tables[rev]) for rev in revs)
    numbers = (int, float)
    differ = [key for key in sorted(set(old) & set(new)) if isinstance(old[key], numbers) and
              isinstance(new[key], numbers) and not isinstance(old[key], bool) and old[key] != new[key]]
    if differ:
        raise CliError(f"dvc metrics diff reported no change of {target} between {revs[0]} and {revs[1]}, though "
                       f"{len(differ)} value(s) differ ({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''}): "
                       f"its answer does not describe the file; run dvc metrics diff {revs[0]} {revs[1]} --targets "
                       f"{target} to see what dvc read")


def check_metrics_target(target: str) -> None:
    """Refuse a ``--target`` that ``dvc metrics diff`` would not read as values: a file that is not JSON, YAML or
    TOML by its name (the GRUE table's CSV, Markdown or HTML), which dvc loads as one text value, or not at all."""
    if Path(target).suffix.lower() not in METRICS_SUFFIXES:
        raise CliError(f"--target {target} is not a metrics file: diff compares JSON, YAML or TOML files of values "
                       f"({', '.join(METRICS_SUFFIXES)}); the GRUE table's values are in {GRUE_JSON}, the default")


def cmd_diff(args: argparse.Namespace) -> int:
    check_metrics_target(args.target)
    if not Path(args.target).is_absolute() and not Path(args.target).exists():  # relative to the project's root
        check_not_in_subfolder("diff", " (or give --target the metrics file's path from here)")
    check_has_commits(args.rev_a, args.rev_b)
    target = metrics_target(args.target)  # as dvc names it: its answer is looked up by that name
    root = dvc_root() or Path.cwd()
    path = in_project(target, root)  # as the checks read and name it, from any folder of the project
    if "workspace" in (args.rev_a, args.rev_b) and not Path(target).exists():
        raise CliError(f"there is no {target} in the workspace (dvc would read the last one built from its cache "
                       f"as the workspace's); build it (grueflow run, or dvc repro), or diff two commits")
    # each revision's table: dvc reports absent and null alike, and leaves out a key null on one side and absent on
    # the other (a method added whose score could not be computed); checked before dvc reads it, which ends in its
    # own error on an integer past a float's range
    tables = {rev: read_at(rev, path, root) for rev in (args.rev_a, args.rev_b)}
    grue = Path(target).name == Path(GRUE_JSON).name
    for rev, table in tables.items():
        problem = grue_table_problem(table, grue) if table is not None else None
        if problem:
            raise CliError(f"{target} at {rev} is not a {'GRUE table' if grue else 'metrics file'}: {problem} "
                           f"({'{task: {method: {metric: value}}}' if grue else 'an object of values'}); give "
                           f"revisions where aggregate wrote it, or another --target")
    diff = metrics_diff(args.rev_a, args.rev_b, target, args.all)
    read = [table for table in tables.values() if table is not None]
    if read and not any(holds_values(table) for table in read):
        raise CliError(f"{target} holds no metric value (a number or null) at {args.rev_a} or {args.rev_b}: it "
                       f"is not a metrics file; give --target a metrics file such as {GRUE_JSON}")
    for key in sorted((set(flat_keys(tables[args.rev_a])) | set(flat_keys(tables[args.rev_b]))) - set(diff)):
        old, new = (missing_label(tables[rev], key_path(key, read)) for rev in (args.rev_a, args.rev_b))
        if old != new and {old, new} <= {ABSENT, NULL}:
            diff[key] = {"old": None, "new": None}
    out_of_date = warn_out_of_date((args.rev_a, args.rev_b), root, path)
    copied = note_copied(target, (args.rev_a, args.rev_b))
    edited = note_edited(path, (args.rev_a, args.rev_b), root)
    if "workspace" in (args.rev_a, args.rev_b) and "workspace" not in out_of_date + edited and not copied:
        warn_unlike_lock(path, root)
    if not diff:
        check_unchanged(target, tables, (args.rev_a, args.rev_b))
        print(f"{target}: no changes between {args.rev_a} and {args.rev_b}")
        return 0
    for key, change in diff.items():
        for side, rev in (("old", args.rev_a), ("new", args.rev_b)):
            if change.get(side) is None:
                change[side] = missing_label(tables[rev], key_path(key, read))
    table = diff_table(diff, read)
    shown = table.assign(old=table.old.map(lambda v: _number(v).lstrip("+")),
                         new=table.new.map(lambda v: _number(v).lstrip("+")), change=table.change.map(_number))
    print(f"{target}: {args.rev_a} -> {args.rev_b} ({len(table)} {'values' if args.all else 'changed values'})")
    print(shown.to_string(index=False))
    return 0


def add_diff(sub: Any) -> None:
    p = sub.add_parser("diff", help="the GRUE table's changes between two commits",
                       description="Compare the GRUE table of two git revisions (built on `dvc metrics diff`), "
                                   "one row per task, method and metric that changed.")
    p.add_argument("rev_a", metavar="REV_A", help="the old revision, e.g. HEAD~1")
    p.add_argument("rev_b", metavar="REV_B", help="the new revision, e.g. HEAD (or workspace)")
    p.add_argument("--target", default=GRUE_JSON, action=GivenOnce, help=f"the metrics file (default: {GRUE_JSON})")
    p.add_argument("--all", action="store_true", help="also list the values that did not change")
    p.set_defaults(func=cmd_diff)


# -- show -----------------------------------------------------------------------------------------

def find_predictions(run: str) -> Path:
    """``predictions.jsonl`` of a run given as a file, a run folder, or ``<task>/<method>/seed<k>``
    under results/eval; an unknown run is an error listing the runs there."""
    for candidate in (Path(run), EVAL_DIR / run):
        path = candidate / PREDICTIONS if candidate.is_dir() else candidate
        if path.is_file():
            return path
    check_not_in_subfolder("show", f" (or give the run folder's path from here, or its {PREDICTIONS})")
    found = sorted(str(p.parent.relative_to(EVAL_DIR)) for p in EVAL_DIR.glob(f"*/*/*/{PREDICTIONS}"))
    hint = f"runs in {EVAL_DIR}: {', '.join(found)}" if found else f"no runs in {EVAL_DIR} yet (grueflow run)"
    raise CliError(f"no {PREDICTIONS} for run {run!r}; give a run folder, a {PREDICTIONS} file or "
                   f"<task>/<method>/seed<k>; {hint}")


def _block(label: str, text: str, width: int = 100) -> list[str]:
    """``text`` under ``label``, wrapped to ``width`` columns (:func:`_wrap`)."""
    lines = _wrap(text, width - 14)
    return [f"  {label:<12}{lines[0]}"] + [f"  {'':<12}{line}" for line in lines[1:]]


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters where it can be, broken only at a space that follows
    another character, which the break stands for: a word longer than ``width`` or a hyphenated one is never split,
    and the rest of a run of spaces begins the next line, so every other character of ``text`` is printed and a
    reader can count the spaces."""
    lines: list[str] = []
    for word in re.split(r"(?<=[^ ]) ", text):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


# how _shown writes these characters inside its quotes (Python's own escapes); others :meth:`str.isprintable` refuses
# as repr writes them (\x1b, \u200b)
ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _shown(text: str) -> str:
    """``text`` as show prints it, so that what a reader sees is what the file holds: as it is where that is
    unambiguous, else in double quotes with Python's escapes (``\\n``, ``\\t``, ``\\x1b``, ``\\u200b``, ``\\"``,
    ``\\\\``). Quoted is a text that is empty, begins or ends with a space, begins with a quote, or holds a character
    that prints as nothing, as a move or as a space that is not U+0020 (what :meth:`str.isprintable` refuses: line
    breaks, tabs, a terminal's escape sequences, zero-width and bidirectional marks): a policy that emits only blanks
    or newlines must not look like one that emits nothing."""
    if text and text.isprintable() and text.strip(" ") == text and not text.startswith('"'):
        return text
    return '"' + "".join(ESCAPES.get(c) or (c if c.isprintable() else repr(c)[1:-1]) for c in text) + '"'


def _text(value: Any) -> str:
    """A field as the text to print: a string as :func:`_shown` shows it, anything else (a number, null) as JSON."""
    return _shown(value) if isinstance(value, str) else json.dumps(value)


def format_sample(row: dict[str, Any]) -> str:
    """One prediction row as text: id, prompt, generation, each reference, then the scores; a field of an
    unexpected type is printed as its JSON, never split or dropped."""
    lines = [f"[{_text(row['id'])}]"] + _block("prompt", _text(row["prompt"])) + \
        _block("generation", _text(row["generation"]))
    references = row.get("references", [])
    references = references if isinstance(references, list) else [references]
    for i, reference in enumerate(references):
        lines += _block(f"reference {i + 1}" if len(references) > 1 else "reference", _text(reference))
    scores = row.get("scores", {})
    text = ", ".join(f"{_shown(k)} {_shown(v) if isinstance(v, str) else _number(v).lstrip('+')}"
                     for k, v in sorted(scores.items())) if isinstance(scores, dict) else _text(scores)
    return "\n".join(lines + _block("scores", text))


def stale_note(path: Path) -> Optional[str]:
    """One sentence where the stage folder holding ``path`` is out of date, itself or through a stage folder it was
    built from, wherever the stale check would rerun it (:func:`grueflow.stale.out_of_date`: params changed since it
    was built, an input it was built from gone or changed, its code changed), so that what it shows is not what the
    params, inputs and code of now give; the code is that of the folder's project (:func:`grueflow.io.project_root`),
    whichever grueflow runs this and from whichever working folder. Where that root holds no CLI of the folder's
    stage (a folder outside any project: the root is then the working folder), it says its code was not compared
    (:func:`grueflow.stale.code_not_compared`). None where none of that holds, or the folder holds no readable
    record. Nothing is written."""
    from grueflow.io import STAGE_RECORD, project_root, read_json
    from grueflow.stale import code_not_compared, out_of_date

    folder = next((p for p in (path, *path.parents) if (p / STAGE_RECORD).is_file()), None)
    if folder is None:
        return None
    try:
        record = read_json(folder / STAGE_RECORD)
    except (OSError, ValueError, DataError):
        return None
    if not isinstance(record, dict):
        return None
    root = project_root(folder)
    reasons = out_of_date(folder, record, root)
    unjudged = code_not_compared(folder, record, root)
    notes = [f"{folder} is stale ({'; '.join(reasons)}): these are the samples and scores of what it was built from "
             f"then, not of the params, inputs and code now; rerun the pipeline (grueflow run, or dvc repro) to "
             f"rebuild it"] if reasons else []
    if unjudged:
        notes.append(f"{folder}'s code was not compared with the code it was built with ({unjudged}): run grueflow "
                     f"show in the root of its project to compare it")
    return "; ".join(notes) or None


PREDICTION_KEYS = ("id", "prompt", "generation")  # what every predictions.jsonl row holds (evaluate writes it)


def cmd_show(args: argparse.Namespace) -> int:
    """Print the first ``args.n`` samples of a run's predictions (:func:`find_predictions`). A run folder whose
    ``stage.json`` names another output path (another run's folder copied or linked there) is shown as it is, after
    one note on stderr naming both paths (:func:`grueflow.io.copy_note`); a link to a run's folder, or to its
    ``predictions.jsonl`` (:func:`grueflow.io.file_link_target`), is that run, so the folder it leads to is noted
    where it is stale (:func:`stale_note`); a file cut or edited since its stage wrote it is refused."""
    from grueflow.io import DataError, check_stage_output, iter_jsonl

    path = find_predictions(args.run)
    judged = file_link_target(path)  # a link to a run's file shows that run: the folder holding its file is judged
    note = copy_note(judged)  # another run's folder copied or linked here: its samples are that run's
    if note:
        print(f"grueflow show: note: {note}", file=sys.stderr)
    try:
        check_stage_output(path)  # a run's file as its stage.json recorded it: a cut or edited one is refused
    except DataError as err:
        raise CliError(str(err)) from None
    linked = linked_path(judged)  # a link to a run's folder shows that run: the folder it links to is judged
    # a copy's params, inputs and code are another run's (the note said whose), so a copy is not judged
    stale = stale_note(linked) if linked is not None else None if note else stale_note(judged)
    if stale:
        print(f"grueflow show: note: {stale}", file=sys.stderr)
    rows = []
    try:
        for number, row in enumerate(iter_jsonl(path), 1):
            if len(rows) == args.n:
                break
            missing = [key for key in PREDICTION_KEYS if key not in row] if isinstance(row, dict) else PREDICTION_KEYS
            if missing:
                raise CliError(f"{path}: row {number} has no {', '.join(missing)}; it is not an evaluate run's "
                               f"{PREDICTIONS} (rows with {', '.join(PREDICTION_KEYS)}, references and scores)")
            rows.append(row)
    except (DataError, UnicodeDecodeError) as err:
        raise CliError(f"{err}; give an evaluate run's {PREDICTIONS}") from None
    print(f"{path}: the first {len(rows)} samples")
    for row in rows:
        print()
        print(format_sample(row))
    return 0


def add_show(sub: Any) -> None:
    p = sub.add_parser("show", help="sample prompts, generations, references and scores of a run",
                       description="Print the first N samples of an evaluate run's predictions.jsonl.")
    p.add_argument("run", metavar="RUN",
                   help="a run folder (results/eval/<task>/<method>/seed<k>), its predictions.jsonl, "
                        "or <task>/<method>/seed<k>")
    p.add_argument("-n", type=positive, default=5, help="how many samples (default: 5)")
    p.set_defaults(func=cmd_show)


def cmd_annotate(args: argparse.Namespace) -> int:
    from grueflow.human.annotate import main as annotate

    return annotate(args.extra)


def add_annotate(sub: Any) -> None:
    p = sub.add_parser("annotate", add_help=False, help="serve a human-evaluation batch on 127.0.0.1 for annotation",
                       description="The local annotation page (README, Human evaluation); "
                                   "`grueflow annotate --help` lists its arguments.")
    p.set_defaults(func=cmd_annotate, passthrough=True)


# -- main -----------------------------------------------------------------------------------------

COMMANDS: tuple[Callable[[Any], None], ...] = (add_list, add_run, add_diff, add_show, add_annotate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grueflow", description="Everyday use of the grueflow pipeline: list the "
                                     "registries, run a suite, diff the GRUE table across commits, show generations.",
                                     epilog="`grueflow COMMAND --help` describes each command.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(sub)
    for command in sub.choices.values():  # a command's own errors print its own usage (see main)
        command.set_defaults(command_parser=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "passthrough", False):  # the command's usage names the options it does take
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        return args.func(args)
    except CliError as err:
        print(f"grueflow {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `grueflow list | head`: the reader left; say nothing more (Python's signal docs)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
