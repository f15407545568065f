"""What every stage CLI shares: logging, progress, timing and the finished-stage record."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Optional

from safetensors import SafetensorError
from tqdm import tqdm

from grueflow import codedeps, interrupt, io, pipeline
from grueflow.config import (MAX_SEED, MAX_THREADS, ConfigError, MetricUnavailableError, PluginFailedError,
                             read_yaml)
from grueflow.device import DEVICE_CHOICES, DEVICE_ENV, PRECISIONS, Execution
from grueflow.hub import HubUnreachableError
from grueflow.interrupt import CHECKPOINTING_STAGES, running_stage
from grueflow.models.gguf import ModelFetchError
from grueflow.keep import copy_root, keep_copy, links_left, listed, unvouched


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def add_execution(p: argparse.ArgumentParser, precision: bool = True) -> None:
    """``--device`` (an execution setting: never a rerun trigger) and, with ``precision``, ``--precision`` (the
    suite's param)."""
    p.add_argument("--device", default=None,
                   help=f"where to compute: {DEVICE_CHOICES} (default: ${DEVICE_ENV}, else auto = CUDA when available)")
    if precision:
        p.add_argument("--precision", default="auto", choices=PRECISIONS,
                       help="the suite's precision param: fp32, bf16, or auto (bf16 on CUDA, fp32 on the CPU)")


def execution(args: argparse.Namespace, precision: Optional[str] = None) -> Execution:
    """The stage's device and precision from ``--device`` / ``$GRUEFLOW_DEVICE`` and ``--precision`` (or the
    ``precision`` given, for a stage without that flag); a device that is not there fails here, before any
    model loads (exit 2 through :func:`main_guard`)."""
    from grueflow.device import execution as resolve

    chosen = resolve(args.device, precision or args.precision)
    fast = "on" if chosen.fast_paths_run else "off (they are float32 CPU kernels)" if chosen.fast else "off"
    logging.getLogger("stage").info("device %s, precision %s, fast paths %s", chosen.device, chosen.precision, fast)
    return chosen


def seed(text: str) -> int:
    """argparse type of ``--seed``: an integer >= 0 (NumPy rejects negative seeds; Python folds -k onto k)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give an integer >= 0")
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is above {MAX_SEED:,}; give a smaller seed")
    return value


def positive(text: str) -> int:
    """argparse type of a count: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive; give an integer >= 1")
    return value


class GivenOnce(argparse.Action):
    """argparse action of a single-value option that may be given once: argparse's ``store`` keeps the last of two
    (``--suite A --suite B`` ran B alone, dropping A without a word), so a second one is an error naming both."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        given = getattr(namespace, f"_given_{self.dest}", None)
        if given is not None:
            raise argparse.ArgumentError(self, f"given twice ({given}, then {values}), and only the last would be "
                                               f"used, dropping {given} without a word: give it once")
        setattr(namespace, f"_given_{self.dest}", values)
        setattr(namespace, self.dest, values)


def setup(args: argparse.Namespace, copies: Collection[str] = ()) -> float:
    """Configure logging, check ``--threads`` (where the stage has it), the inputs (:func:`check_inputs`; ``copies``:
    the arguments that may name another run's folder copied or linked there) and ``--out`` (:func:`check_out`);
    returns the start time for the stage record."""
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    threads = vars(args).get("threads")
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"--threads = {threads} is not a thread count; give 1 to {MAX_THREADS} "
                          f"(this machine has {os.cpu_count()} cores)")
    check_inputs(args, copies)
    if vars(args).get("out") is not None:
        check_out(Path(args.out), args, running_stage())
        out = Path(args.out)  # as given: a results/ that is a link to another disk stays under the project
        io.before_replacing(out, lambda _resolved: _keep_before_replacing(out))
    return time.perf_counter()


def keep_unvouched(out: Path) -> Optional[tuple[Path, str, str]]:
    """Copy what the stage folder ``out`` holds that no stage record vouches for (a file a person put there:
    :func:`grueflow.keep.unvouched`) to ``.grueflow/replaced/`` (:func:`grueflow.keep.keep_copy`); returns the
    copy, the files it holds, named for a line, and what the copy holds as links alone (a ``model/`` moved to
    another disk and linked back: :func:`grueflow.keep.links_left`, ``""`` for none), or None where there was
    nothing to keep. The copy goes under the working folder where ``out`` lies in it (the project, as both engines
    run stages), else beside ``out``."""
    files = unvouched(out)
    if not files:
        return None
    return keep_copy(out, copy_root(out), files), listed(out, files), links_left(out, files)


def _kept_in_results(out: Path) -> str:
    """`` (a copy is kept in <place>)`` after copying what ``out`` holds (:func:`keep_unvouched`) where ``out`` lies
    under the project's ``results/`` (itself, or a link to another disk): a stage refusing it fails its job, and
    Snakemake deletes a failed job's output. "" elsewhere, where nothing deletes it, and it may be large (a home
    folder given by mistake), and where there was nothing to keep."""
    inside = Path(os.path.abspath(out)).is_relative_to(os.path.abspath("results")) or \
        Path(os.path.realpath(out)).is_relative_to(os.path.realpath("results"))
    kept = keep_unvouched(out) if inside else None
    return f" (a copy is kept in {kept[0]}{kept[2]})" if kept else ""


def _keep_before_replacing(out: Path) -> None:
    """What :func:`grueflow.io.atomic_dir` calls before it replaces a stage's ``--out`` folder found there (one a
    person added a file to since the stage began, or its own earlier output): a copy of what no record vouches
    for, and one line saying where."""
    kept = keep_unvouched(out)
    if kept is not None:
        print(f"grueflow: {out} holds what no stage record vouches for ({kept[1]}); a copy is kept in {kept[0]} (the "
              f"stage replaces the folder whole){kept[2]}", file=sys.stderr)


def _paths(value: Any) -> list[Path]:
    """The paths in one parsed argument: a path, or paths inside lists and tuples (``METHOD=PATH`` pairs)."""
    if isinstance(value, Path):
        return [value]
    if isinstance(value, (list, tuple)):
        return [path for item in value for path in _paths(item)]
    return []


OUTPUT_ARGS = ("out", "resume_dir", "tensorboard")  # the arguments that name what a stage writes


def check_inputs(args: argparse.Namespace, copies: Collection[str] = ()) -> None:
    """Every path a stage reads (each argument but :data:`OUTPUT_ARGS` holding paths) that lies in another run's
    stage folder, copied or linked where its path names this run's (:func:`grueflow.io.check_written_here`), is a
    :class:`grueflow.io.DataError` naming the argument, the folder and the path its record names, before any work:
    its content passes its own manifest check, and would be taken for the run its path names. An argument named in
    ``copies`` (by its ``args`` name: ``batch``) is one whose content says what it is, whatever its path (a
    human-evaluation batch: its tag, which its answers and key name): such a folder is taken where its record is as
    its stage wrote it (``copy_ok``)."""
    for name, value in vars(args).items():
        if name in OUTPUT_ARGS or name.startswith(("out_", "_")):  # file outputs; GivenOnce's own note
            continue
        for path in _paths(value):
            io.check_written_here(path, f"--{name.replace('_', '-')}", copy_ok=name in copies)


def _empty_tree(path: Path) -> bool:
    """Whether ``path`` is a folder (not a link to one) with nothing but empty folders under it: what a failed
    ``dvc pull`` leaves of the outs it could not check out, which holds nothing to lose."""
    if path.is_symlink() or not path.is_dir():
        return False
    return all(not names and all(not os.path.islink(os.path.join(top, f)) for f in folders)
               for top, folders, names in os.walk(path))


def check_out(out: Path, args: argparse.Namespace, stage: Optional[str]) -> None:
    """A stage replaces its ``--out`` folder whole, so ``out`` must be new, empty (empty folders under it count as
    nothing) or the output of this same ``stage`` (the stage its :data:`grueflow.io.STAGE_RECORD` names, or else its
    :data:`grueflow.io.PROVENANCE_RECORD`, which stays when DVC removes the stage's declared outs before a rerun),
    and must not be or hold any path the stage reads: a :class:`ConfigError` naming both otherwise, before any
    work. ``stage`` None (not known) skips the check of the writer. Where ``out`` will be made, and the stage's
    ``--resume-dir`` if given, must be inside a folder this process can write in (:func:`check_writable`), and the
    resume folder must lie apart from ``out`` (:func:`check_resume_dir`)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file{_kept_in_results(out)}; give a folder (a stage replaces its --out "
                          f"folder whole)")
    check_writable("--out", out)
    inside_output("--out", out)
    resume_dir = vars(args).get("resume_dir")
    if resume_dir is not None:
        check_writable("--resume-dir", Path(resume_dir))
        check_resume_dir(out, Path(resume_dir))
    stage_owned = any((out / record).is_file() for record in (io.STAGE_RECORD, io.PROVENANCE_RECORD))
    if out.is_dir() and not stage_owned:  # DVC removes a stage's declared outs only: provenance.json stays
        held = sorted(p.name for p in out.iterdir() if not _empty_tree(p))  # a failed `dvc pull` leaves folders
        if held:
            kept = _kept_in_results(out)
            raise ConfigError(f"--out {out} holds {', '.join(map(repr, held[:3]))}{' and more' if len(held) > 3 else ''} "
                              f"and no {io.STAGE_RECORD}, so no stage wrote it{kept}; a stage replaces its --out "
                              f"folder whole: give a new folder")
    mine = out.resolve()
    for name, value in vars(args).items():
        if name in OUTPUT_ARGS:
            continue
        for path in _paths(value):
            theirs = path.resolve()
            if theirs.is_relative_to(mine):
                raise ConfigError(f"--out {out} holds the input --{name.replace('_', '-')} {path}; a stage replaces "
                                  f"its --out folder whole, which would delete it: give a folder of its own")
    writer = _writer(out) if stage_owned else None
    if writer is not None and stage is not None and writer != stage:
        raise ConfigError(f"--out {out} holds the output of stage {writer}, not {stage}: give another --out, or delete "
                          f"it if it is not needed")


def check_file_out(flag: str, path: Path, suffix: Optional[str] = None,
                   ours: Optional[Callable[[Path], bool]] = None) -> None:
    """A file output (``--out-csv`` ...) must not lie inside another stage's output folder (a folder above it holds
    a :data:`grueflow.io.STAGE_RECORD`): writing it would change, or replace, a file of that output behind its
    manifest. It must not be a folder, and must be writable. With ``suffix`` (``.csv``) its name must end in it;
    with ``ours``, an existing file there that is not blank must be one this output wrote before (``ours(path)``),
    so that a slip onto a README, a params file, annotators' answers or a key is refused rather than replaced. A
    :class:`ConfigError` naming the path otherwise, before any work. A symbolic link there is replaced by the new
    file, never written through (it may point into DVC's cache, whose files must not change), with a warning
    naming its target, which keeps its content."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give the path of a file to write")
    inside_output(flag, path)
    if suffix is not None and path.suffix.lower() != suffix:
        raise ConfigError(f"{flag} {path}: this output is written to a {suffix} file; give a path ending in {suffix}")
    if ours is not None and path.is_file() and path.read_bytes().strip() and not ours(path):  # blank: nothing lost
        raise ConfigError(f"{flag} {path} exists and is not what this output writes (an earlier run's table); give "
                          f"a new path, or move the file away if it is to be replaced")
    check_writable(flag, path)
    if path.is_symlink():
        logging.getLogger("stage").warning("%s %s is a symbolic link (to %s): the new file replaces the link, and "
                                           "%s keeps its content; copy the file there if it is to change too", flag,
                                           path, os.readlink(path), os.path.realpath(path))


def starts_with(*heads: bytes) -> Callable[[Path], bool]:
    """For :func:`check_file_out`'s ``ours``: whether a file begins with one of ``heads``."""

    def ours(path: Path) -> bool:
        with open(path, "rb") as handle:
            head = handle.read(max(map(len, heads)))
        return any(head.startswith(expected) for expected in heads)

    return ours


def inside_output(flag: str, path: Path) -> None:
    """A :class:`ConfigError` when a folder above ``path`` holds a :data:`grueflow.io.STAGE_RECORD`: ``path`` lies
    inside another stage's output, and writing it would change that output behind its manifest."""
    for folder in Path(os.path.realpath(path)).parents:
        if (folder / io.STAGE_RECORD).is_file():
            raise ConfigError(f"{flag} {path} lies inside {folder}, the output folder of stage "
                              f"{_writer(folder) or 'unknown'}; give a path outside every stage's output")


def check_writable(flag: str, path: Path) -> None:
    """``path`` (a folder a stage writes, given as ``flag``) is made, or replaced, inside its parent: that parent,
    or where it does not exist yet the nearest folder above it that does, must be a folder this process can write
    in. A :class:`ConfigError` naming it otherwise (a file there, no write permission, an immutable folder, a
    read-only file system, or one such as /proc that takes no new folders: an empty folder is made there and removed
    to know), before any work. A symlinked ``path`` is checked where it points, its target's parent: a folder output
    (:func:`grueflow.io.atomic_dir`) is written through the link."""
    target = Path(os.path.realpath(path))
    parent = next((p for p in target.parents if os.path.lexists(p)), target)  # "/" has no parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: {parent} is not a folder; give a path whose parents are folders")
    if os.statvfs(parent).f_flag & os.ST_RDONLY:
        raise ConfigError(f"{flag} {path}: cannot write in {parent}: a read-only file system; give a folder on a "
                          f"writable one")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write in {parent}: permission denied; give a folder this user can "
                          f"write in, or fix its permissions (ls -ld, lsattr -d)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".grueflow-write-check-", dir=parent))
    except OSError as err:
        raise ConfigError(f"{flag} {path}: cannot make a folder in {parent} ({err.strerror or err}); give a folder on "
                          f"a file system this user can write") from None


def check_resume_dir(out: Path, resume_dir: Path) -> None:
    """The resume folder is deleted when a training run finishes and ``--out`` is replaced whole, so neither may be,
    hold or lie inside the other (compared as resolved paths, symlinks followed): a :class:`ConfigError` naming both
    otherwise. The default resume folder, ``<out>.resume`` beside ``--out``, always passes."""
    mine, resume = Path(os.path.realpath(out)), Path(os.path.realpath(resume_dir))
    if resume == mine:
        how = f"--resume-dir {resume_dir} is --out {out}"
    elif mine.is_relative_to(resume):
        how = f"--out {out} lies inside --resume-dir {resume_dir}"
    elif resume.is_relative_to(mine):
        how = f"--resume-dir {resume_dir} lies inside --out {out}"
    else:
        return
    raise ConfigError(f"{how}: the resume folder is deleted when the run finishes and --out is replaced whole, so one "
                      f"would delete the other; give a --resume-dir apart from --out (default: <out>.resume)")


def _writer(folder: Path) -> Optional[str]:
    """The stage that wrote ``folder``, as its records name it: the ``stage`` of its :data:`grueflow.io.STAGE_RECORD`,
    else of its :data:`grueflow.io.PROVENANCE_RECORD`; None when neither is readable and names one (a provenance
    record written before provenance records named their stage, all that DVC leaves of an output it reruns)."""
    for record in (io.STAGE_RECORD, io.PROVENANCE_RECORD):
        try:
            content = io.read_json(folder / record)
        except (OSError, ValueError):
            continue
        name = content.get("stage") if isinstance(content, dict) else None
        if isinstance(name, str):
            return name
    return None


class LogProgress:
    """tqdm's ``update``/``close`` for logs that are not a terminal (CI, Snakemake and DVC log files): one
    plain line with the count, the elapsed time and the ETA, instead of carriage returns: on the first
    and the last update, and otherwise at most every ``every_s`` seconds."""

    def __init__(self, total: int, desc: str, initial: int = 0, every_s: float = 10.0) -> None:
        self.total, self.desc, self.n, self.initial, self.every_s = total, desc, initial, initial, every_s
        self.started = time.perf_counter()
        self.logged: float | None = None
        self.log = logging.getLogger("progress")

    def update(self, n: int = 1) -> None:
        if n <= 0:
            return
        self.n += n
        now = time.perf_counter()
        if self.logged is not None and self.n < self.total and now - self.logged < self.every_s:
            return
        self.logged = now
        elapsed = now - self.started
        eta = elapsed / (self.n - self.initial) * max(self.total - self.n, 0) if self.n > self.initial else 0.0
        self.log.info("%s: %d/%d, %s elapsed, ETA %s", self.desc, self.n, self.total,
                      tqdm.format_interval(elapsed), tqdm.format_interval(eta))

    def close(self) -> None:
        return None


def progress(total: int, desc: str, initial: int = 0) -> tqdm | LogProgress:
    """A progress bar with ETA on a terminal (tqdm); plain log lines with ETA elsewhere (CI, log files).
    ``initial`` counts what a resumed run already did (not used for the ETA)."""
    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, initial=initial, dynamic_ncols=True)
    return LogProgress(total, desc, initial)


def relaunch_data_parallel(processes: int, threads: int) -> None:
    """Re-run this stage's command line as ``processes`` data-parallel processes under ``accelerate launch``,
    unless it asks for one or already is one of them (``WORLD_SIZE`` set, e.g. by a user's own
    ``accelerate launch --config_file ...``). Does not return when it relaunches.

    accelerate's multi-process launcher (torchrun) starts the processes; with no GPU the process group
    falls back to gloo on the CPU (:class:`grueflow.distributed.DataParallel`). The job's ``threads``
    cores are shared among the processes; a free port keeps concurrent stages apart.
    """
    if processes <= 1 or "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu",
               "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--num_cpu_threads_per_process", str(max(1, threads // processes)),
               "--main_process_port", str(port), sys.argv[0], *sys.argv[1:]]
    logging.getLogger(__name__).info("relaunching as %d data-parallel processes: %s", processes, " ".join(command))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def params_digest(name: str, args: argparse.Namespace) -> dict[str, str]:
    """:func:`grueflow.pipeline.params_digest` of the params this run of the table's stage ``name`` reads: its
    ``--task-file`` and ``--method-file``, and the suite values it is given (``--precision``), as given, whichever
    engine (or person) ran it; for its ``stage.json`` (:data:`grueflow.pipeline.PARAMS_DIGEST`), taken before the
    stage reads them. A file that cannot be read is the ConfigError :func:`grueflow.config.read_yaml` raises; a
    stage outside the table records nothing (``{}``).

    A stage run as a job of a Snakemake run compares it with the digest that run planned for its ``--out``
    (:func:`grueflow.io.planned_params`) and, where they differ (a params file edited while the run went on), raises
    a ConfigError naming the file before any work: Snakemake records the params it planned with, so what the job
    would build from the edited file would never rerun once the file is put back."""
    if name not in pipeline.STAGES:
        return {}
    given = vars(args)
    paths = {flag: str(given[flag]) if given.get(flag) is not None else None for flag in ("task_file", "method_file")}
    suite = {key: given.get(key) for key in pipeline.stage(name).suite_keys}
    source = pipeline.ParamsSource(name, paths["task_file"], paths["method_file"], suite, overrides_read(name, args))
    digest = pipeline.params_digest(source)
    planned = io.planned_params(given["out"]) if given.get("out") is not None else None
    if planned is not None:
        changed = [source.where(part) for part in dict.fromkeys([*digest, *planned])
                   if digest.get(part) != planned.get(part)]
        if changed:
            raise ConfigError(f"{', '.join(changed)} changed after Snakemake planned this job (edited while the run "
                              f"went on): what this job would build in {given['out']} is not what Snakemake "
                              f"recorded for it; run snakemake again once the edit is done")
    _READ.append((source, digest))
    return digest


def overrides_read(name: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The ``method_overrides`` entries a run of the table's stage ``name`` reads, as its code reads them (the
    table's ``overrides``): those its table method names (warm_start: supervised); else those of its
    ``--algorithm`` from its ``--start`` (default zero_shot), or without one the warm start's for ``--start
    supervised``; none for a stage that reads none, or for the zero-shot model."""
    overrides = pipeline.stage(name).overrides
    if overrides is None:
        return ()
    if not pipeline.placeholders(overrides):
        return tuple(pipeline.method_layers(overrides))
    given = vars(args)
    start = given.get("start") or "zero_shot"
    method = given.get("algorithm") or ("supervised" if start == "supervised" else None)
    return tuple(pipeline.override_layers(method, start))


LOADED_NS = time.time_ns()  # about when this process loaded grueflow's code: a file modified since may not be what ran


def code_record(stage: str) -> dict[str, Optional[str]]:
    """What the stage ``stage`` runs, for its provenance record (:data:`grueflow.io.CODE_RAN`): the fingerprint
    (:func:`grueflow.io.fingerprint`) of each file of :func:`grueflow.codedeps.script_code` of its CLI
    ``stages/<stage>.py``, by its path relative to the repository; None for one modified since this process loaded
    grueflow's code (what it runs may be the earlier text, so the stale check takes it as changed) or unreadable;
    ``{}`` where there is no such CLI. Snakemake compares the code's digest with the one its record of the job holds
    (a rule's ``stale`` param); where it holds no record (a folder ``dvc repro`` built, ``.snakemake`` removed),
    :func:`grueflow.stale.code_changed` compares these."""
    try:
        files = codedeps.script_code(f"stages/{stage}.py")
    except (FileNotFoundError, SyntaxError):
        return {}
    record: dict[str, Optional[str]] = {}
    for name in files:
        path = codedeps.ROOT / name
        try:
            record[name] = None if path.stat().st_mtime_ns > LOADED_NS else io.fingerprint(path)
        except OSError:
            record[name] = None
    return record


def named_record(stage: str, source: Optional[pipeline.ParamsSource]) -> dict[str, str]:
    """The files the task file of ``source`` names for the stage ``stage`` (:func:`grueflow.pipeline.named_files` of
    the parts of the stages whose CLI is ``stages/<stage>.py``: a plugin's source, a file a reward's or metric's args
    name; a datapool's data left out, which its stage records as inputs), each with its
    :func:`grueflow.pipeline.path_digest`, by its path in the project (the working folder), and the code of each
    module outside the project behind its import paths by its :func:`grueflow.plugins.module_key`
    (:func:`grueflow.pipeline.named_digests`), for the provenance record
    (:data:`grueflow.io.NAMED_RAN`): where neither Snakemake nor dvc.lock holds a record of the job,
    :func:`grueflow.stale.code_changed` compares them with the files now. ``{}`` where the stage reads no such part,
    no task file, or the task file names none."""
    parts = pipeline.script_parts(f"stages/{stage}.py")
    if not parts or source is None or source.task_file is None:
        return {}
    try:
        task = read_yaml(source.task_file)
        return pipeline.named_digests(task, Path("."), parts, with_data=False)
    except (ConfigError, OSError):  # read before the stage ran: gone since, the stale check sees it
        return {}


def restamp_code(folders: Iterable[Path]) -> list[Path]:
    """Record the code each stage folder of ``folders`` runs now as the code it was built with: the
    :data:`grueflow.io.CODE_RAN` of its provenance record, rewritten with :func:`code_record`, where that record is
    the one written with its stage record (its :data:`grueflow.io.RECORD_DIGEST`) and holds one. For the folders a
    ``snakemake --touch`` run marks up to date over a code edit (what ``--touch`` is for): Snakemake's record of
    their jobs then holds the new code's digest, and :func:`grueflow.stale.code_changed`, which reads the provenance
    record where Snakemake holds none (``.snakemake`` removed), agrees with it instead of rerunning them. The files
    a task names (:data:`grueflow.io.NAMED_RAN`) are left as recorded. Returns the folders rewritten."""
    restamped = []
    for folder in folders:
        try:
            record = io.read_json(folder / io.STAGE_RECORD)
            provenance = io.read_json(folder / io.PROVENANCE_RECORD)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not isinstance(provenance, dict) or io.CODE_RAN not in provenance \
                or provenance.get(io.RECORD_DIGEST) != record.get(io.RECORD_DIGEST):
            continue
        ran = code_record(str(record.get("stage")))
        if ran != provenance[io.CODE_RAN]:
            io.write_json(folder / io.PROVENANCE_RECORD, {**provenance, io.CODE_RAN: ran})
            restamped.append(folder)
    return restamped


_READ: list[tuple[pipeline.ParamsSource, dict[str, str]]] = []  # each params_digest taken, for finish to take again


def finish(out_dir: Path, stage: str, params: Any, inputs: Mapping[str, Path | io.InputDigest], started: float,
           params_digest: Optional[dict[str, str]] = None, **extra: Any) -> None:
    """Write the stage record into the finished ``out_dir`` (see :func:`grueflow.io.write_stage_record`);
    a stage that runs models passes ``execution=<Execution.record()>`` among ``extra``. An input from outside
    results/ that may change while the stage runs is given as its :func:`grueflow.io.digest_inputs` digest, taken
    before the stage read it. ``params_digest``: :func:`params_digest` of the params files the stage read, taken
    before it read them, recorded as :data:`grueflow.pipeline.PARAMS_DIGEST` (left out where empty or None).

    The digest is taken again here: where a params file changed while the stage ran, a ConfigError names it and no
    record is written (the folder is not finished). The engine would file what was built under the edited params:
    DVC saves a stage's params to ``dvc.lock`` once its command ends, and a later rerun of what was built before
    the edit would never come."""
    source = None
    if params_digest:
        source = next((source for source, taken in _READ if taken is params_digest), None)
        now = pipeline.params_digest(source) if source is not None else params_digest
        changed = [source.where(part) for part in dict.fromkeys([*params_digest, *now])
                   if params_digest.get(part) != now.get(part)]
        if changed:
            raise ConfigError(f"{', '.join(changed)} changed while this stage ran (edited during the run): what it "
                              f"built would be recorded under the edited params; run it again once the edit is done")
        extra = {pipeline.PARAMS_DIGEST: params_digest, **extra}
    code, named = code_record(stage), named_record(stage, source)
    read = {part: path for part, path in (("task", source.task_file), ("method", source.method_file)) if path} \
        if source is not None else {}
    extra = {**({io.CODE_RAN: code} if code else {}), **({io.NAMED_RAN: named} if named else {}),
             **({io.PARAMS_READ: read} if read else {}), **extra}
    io.write_stage_record(out_dir, stage=stage, params=params, inputs=inputs,
                          wall_time_s=time.perf_counter() - started, extra=extra or None)


def main_guard(run: Any) -> None:
    """Run a stage's ``main``; bad params, bad data, unobtainable models and a metric this machine cannot run (a
    reward's: evaluate reports an evaluation metric's as missing) exit 2 with their message, a full
    disk, a path it may not write (or read) and a file where a folder is wanted exit 2 saying so, and Ctrl-C exits
    130 saying what is kept: no traceback for any of them (``--log-level DEBUG`` logs the one of a refused path). A
    metric or post_processing function that raised (one's own, named in the task file) exits 1 with its own
    traceback, then one line naming it. A SIGTERM or SIGHUP in a stage script (a scheduler's time limit or
    preemption, ``kill``, a closed terminal) ends as Ctrl-C does, naming the signal, and exits 128 + its number
    (:mod:`grueflow.interrupt`; later ones are ignored while the stage cleans up and exits)."""
    interrupt.release()
    try:
        _run_guarded(run)
    finally:
        interrupt.restore()


def _run_guarded(run: Any) -> None:
    """:func:`main_guard`'s body: ``run()`` with each failure it names turned into its line and exit code."""
    try:
        run()
    except (ConfigError, io.DataError, HubUnreachableError, ModelFetchError, MetricUnavailableError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except (PermissionError, NotADirectoryError, FileExistsError, IsADirectoryError) as err:  # locked, in the way
        logging.getLogger("stage").debug("the failed call", exc_info=True)
        print(f"error: {_path_problem(err)}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            print(f"error: {err.filename}: a name in this path, or the whole path, is longer than the file system "
                  f"allows ({err.strerror}); give a shorter path", file=sys.stderr)
            raise SystemExit(2) from None
        if err.errno not in FULL_DISK_ERRNOS:
            raise
        cause = "the disk is full" if err.errno == errno.ENOSPC else f"no room to write ({err.strerror})"
        print(_no_room(cause, err.filename or err.strerror), file=sys.stderr)
        raise SystemExit(2) from None
    except RuntimeError as err:  # torch.save reports a full disk as a RuntimeError, never an OSError
        if isinstance(err, PluginFailedError) and err.__cause__ is not None:  # a plugin's (one's own) bug
            traceback.print_exception(err.__cause__)  # its own frames, where the bug is; not grueflow's around it
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(1) from None
        if NONFINITE_SAMPLING in str(err):  # torch.multinomial in generate, on a model whose logits are NaN
            print("error: the model's next-token probabilities are not finite (NaN or infinite logits: weights that a "
                  "diverged update left so); retrain it with a lower learning_rate, or give a model that holds finite "
                  "weights", file=sys.stderr)
            raise SystemExit(2) from None
        if any(marker in str(err) for marker in OUT_OF_MEMORY):  # torch.OutOfMemoryError is a RuntimeError too
            print(f"error: out of memory ({str(err).splitlines()[0][:200]}); lower the model's sizes, the batch or "
                  f"the lengths, or run where there is more memory", file=sys.stderr)
            raise SystemExit(2) from None
        if not any(marker in str(err) for marker in TORCH_WRITE_FAILURES) or not _a_disk_nearly_full():
            raise
        print(_no_room("the disk is full", f"torch: {str(err).splitlines()[0]}"), file=sys.stderr)
        raise SystemExit(2) from None
    except SafetensorError as err:  # safetensors reports a full disk as "os error 28" (or 122, 27), no OSError
        if not any(f"(os error {code})" in str(err) for code in FULL_DISK_ERRNOS):
            raise
        cause = "the disk is full" if f"(os error {errno.ENOSPC})" in str(err) else "no room to write"
        print(_no_room(cause, f"safetensors: {str(err).splitlines()[0]}"), file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt as err:  # Ctrl-C, or a SIGTERM or SIGHUP (grueflow.interrupt.Interrupted)
        signum = err.signum if isinstance(err, interrupt.Interrupted) else signal.SIGINT
        interrupt.say(interrupt.sentence(signum))
        raise SystemExit(interrupt.exit_code(signum)) from None


def _path_problem(err: PermissionError | NotADirectoryError | FileExistsError | IsADirectoryError) -> str:
    """One line for a path a stage could not use: the path(s) the call named, the cause and what to do."""
    paths = " -> ".join(str(name) for name in (err.filename, err.filename2) if name is not None) or "a path"
    if isinstance(err, IsADirectoryError):
        return f"{paths}: a folder is where a file is to be written; give the path of a file, and rerun"
    if isinstance(err, FileExistsError):  # makedirs over a file: a folder (--tensorboard, a log) was wanted there
        return (f"{paths}: a file is where a folder is needed ({err.strerror}); move it or give another path, and "
                f"rerun")
    if isinstance(err, NotADirectoryError):
        return (f"{paths}: a part of this path is a file, not a folder ({err.strerror}); give paths whose parents "
                f"are folders and rerun")
    cause = "permission denied" + (" (operation not permitted: an immutable file or folder?)"
                                   if err.errno == errno.EPERM else "")
    return (f"cannot use {paths}: {cause}; give paths this user can read and write, or fix their permissions "
            f"(ls -ld, lsattr -d), and rerun: completed checkpoints stay in the resume folder")


# what a write into a full disk, an exhausted quota (EDQUOT) or a file-size limit (EFBIG) raises
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NONFINITE_SAMPLING = "probability tensor contains either"  # torch.multinomial's message for NaN or inf probabilities
# torch's messages for an allocation that failed: the CPU allocator's, and CUDA's (torch.OutOfMemoryError)
OUT_OF_MEMORY = ("DefaultCPUAllocator: can't allocate memory", "CUDA out of memory")
# torch.save's messages for a write that did not complete: its stream writer's, and its zip writer's position check
TORCH_WRITE_FAILURES = ("write failed", "unexpected pos", "iostream error")


def _nearly_full(free_bytes: int = 64 << 20) -> list[Path]:
    """The working folder and the paths on the command line (``--out``, ``--resume-dir``, or the nearest existing
    folder above one not made yet) whose file system has less than ``free_bytes`` free."""
    folders = {Path.cwd()}
    for arg in sys.argv[1:]:
        if "/" not in arg:
            continue  # a flag, a value or a name in the working folder
        path = Path(arg.partition("=")[2] if arg.startswith("--") else arg).expanduser()
        folders.add(next((p for p in (path, *path.parents) if p.is_dir()), Path.cwd()))
    return sorted(folder for folder in folders if shutil.disk_usage(folder).free < free_bytes)


def _a_disk_nearly_full(free_bytes: int = 64 << 20) -> bool:
    """Whether any folder :func:`_nearly_full` looks at has less than ``free_bytes`` free."""
    return bool(_nearly_full(free_bytes))


def _no_room(cause: str, detail: str) -> str:
    """The line for a write that found no room: ``cause`` and the error's ``detail``, the folders whose disk is
    nearly full, and, for a stage that checkpoints, that its completed checkpoints are kept."""
    full = _nearly_full()
    where = f" on the disk of {', '.join(map(str, full[:2]))}" if full else ""
    kept = (" and completed checkpoints stay in the resume folder" if running_stage() in CHECKPOINTING_STAGES
            else "")
    return (f"error: {cause} ({detail}){where}; nothing half-written is kept as a result{kept}: free space and "
            f"rerun the same command")
