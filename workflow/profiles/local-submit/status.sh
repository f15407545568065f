#!/usr/bin/env bash
# Status of a job submit.sh started: prints running, success or failed (what the cluster-generic executor expects).
# Usage: status.sh JOBID
set -euo pipefail
dir=.snakemake/local-submit/$1
if [ ! -d "$dir" ]; then
    echo "status.sh: no job $1 under .snakemake/local-submit" >&2
    exit 1
fi
if [ ! -f "$dir/exit_code" ]; then
    echo running
elif [ "$(cat "$dir/exit_code")" = 0 ]; then
    echo success
else
    echo failed
fi
