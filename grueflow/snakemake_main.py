"""Snakemake's own command line, as ``python -m snakemake ARGS`` runs it (the same arguments, the same exit status),
which ``grueflow run`` starts as ``python <this file> ARGS`` instead.

Snakemake handles a Ctrl-C that comes while its jobs run: it cancels them, removes its lock and exits with its own
status. One that comes before (while it imports its modules, reads the Snakefile, which imports grueflow and reads
the params, or builds the DAG) escapes its ``main`` as a KeyboardInterrupt, which Python prints as a traceback of
Snakemake's or grueflow's insides. Here that KeyboardInterrupt ends the process with exit code 130 (128 + SIGINT, as
a shell reports a Ctrl-C) and no traceback; its lock, where it took one, is removed on the way out, as Snakemake
holds it in a ``with`` block. ``grueflow run``, which passed the Ctrl-C on, then prints its one line.

It runs as a file, not as ``-m grueflow.snakemake_main``, and imports the standard library alone: the Snakefile
imports grueflow from its own folder, and a grueflow imported here first (from the working folder or an install)
would be the one it got. Python puts this file's folder, grueflow/, first on ``sys.path``, where grueflow's ``io.py``
would shadow the standard library's: the working folder takes its place, as ``python -m snakemake`` has it, before
anything else is imported.
"""

import os
import sys

HERE = {os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.realpath(__file__))}
if sys.path and sys.path[0] in HERE:  # not where Python runs with -P (no script folder on sys.path)
    sys.path[0] = os.getcwd()

import signal  # noqa: E402 (after the sys.path fix above)

INTERRUPTED_EXIT = 128 + signal.SIGINT  # grueflow.interrupt.exit_code(signal.SIGINT), which this file cannot import


def main() -> None:
    """Run Snakemake's ``main`` on ``sys.argv[1:]`` (it exits with its status); a KeyboardInterrupt that escapes it
    exits with code 130, without a traceback. ``sys.argv[0]`` becomes ``snakemake``, so that Snakemake's usage and
    errors name the command ``grueflow run`` shows."""
    try:
        sys.argv[0] = "snakemake"
        from snakemake.cli import main as snakemake_main

        snakemake_main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C cannot cut the exit short
        raise SystemExit(INTERRUPTED_EXIT) from None


if __name__ == "__main__":
    main()
