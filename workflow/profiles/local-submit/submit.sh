#!/usr/bin/env bash
# Submit a Snakemake job script "locally": run it in the background and print its job id.
# Usage (by the cluster-generic executor): submit.sh RULE THREADS MEM_MB RUNTIME JOBSCRIPT
# Each job gets .snakemake/local-submit/<id>/ holding a copy of its job script, its output (job.out) and,
# once it ends, its exit status (exit_code); submitted.log has one line per job. status.sh reads exit_code.
set -euo pipefail
if [ "$#" -ne 5 ]; then
    echo "usage: $0 RULE THREADS MEM_MB RUNTIME JOBSCRIPT (got $# arguments)" >&2
    exit 2
fi
rule=$1 threads=$2 mem_mb=$3 runtime=$4 jobscript=$5
queue=.snakemake/local-submit
mkdir -p "$queue"
dir=$(mktemp -d "$queue/job.XXXXXXXX")
id=$(basename "$dir")
cp "$jobscript" "$dir/jobscript.sh"
printf '%s\trule=%s\tthreads=%s\tmem_mb=%s\truntime=%s\t%s\n' "$id" "$rule" "$threads" "$mem_mb" "$runtime" \
    "$jobscript" >> "$queue/submitted.log"
# detached from Snakemake's process group, like a batch system's job; exit_code is written last, atomically
nohup setsid bash -c 'bash "$1/jobscript.sh" > "$1/job.out" 2>&1; echo $? > "$1/exit_code.tmp"; mv "$1/exit_code.tmp" "$1/exit_code"' \
    _ "$dir" < /dev/null > /dev/null 2>&1 &
echo "$id"
