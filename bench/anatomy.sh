#!/usr/bin/env bash
# anatomy.sh: where a warm run's time goes against the fork floor, from the kernel's
# process events: when the first script starts, how long the scripts live, how long
# each slot waits between scripts, and how long the scripts' own `main()` takes.
#
# Usage:   bench/anatomy.sh TREE [OPTION…]
#   TREE     `jax-runner render-workload`'s output (the scripts write
#            simulation_results.json with their own `elapsed_s`)
#   OPTION…  given to both runner variants after `--output-dir COPY
#            --compilation-cache DIR -q`, e.g. `--device cpu --jobs 2`
# Env:     BENCH_REPEAT  rounds (default 6)
#          BIN           the jax-runner binary (default target/release/jax-runner)
#          JOBS          the floor's jobs (default 2; match --jobs)
#
# Needs `perf` and the right to record sched tracepoints (root). Each round runs, in
# turn: the defaults, `--sandbox off`, and bench/fork_floor.py, on one compilation cache
# that an unmeasured run of each runner variant fills first (their histories too). Per
# run: bench/anatomy.py's figures (first script's fork after the command's exec, the
# scripts' lifetimes summed, the last exit, the command's end, the waits between a
# script's exit and the next fork) and the scripts' own `elapsed_s` summed.
#
# Output:  the Markdown report on stdout, progress on stderr; also written to
#          bench/results/<date>-<host>-anatomy-<time>.md.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bench_tag=anatomy
. "$bench_dir/lib.sh"

[[ $# -ge 1 && -d ${1:-} ]] || { echo "usage: bench/anatomy.sh TREE [OPTION…]" >&2; exit 2; }
command -v perf >/dev/null || { echo "anatomy.sh needs perf (apt-get install linux-perf)" >&2; exit 2; }
tree=$(cd "$1" && pwd)
shift
repeat=${BENCH_REPEAT:-6}
bin=${BIN:-$root/target/release/jax-runner}
jobs=${JOBS:-2}
PY=$("$bin" setup -q)

scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-anatomy.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
copy_tree "$tree" "$scratch/defaults"
copy_tree "$tree" "$scratch/sandbox-off"
cache=$scratch/cache
mkdir -p "$cache"
mapfile -t scripts < <(find "$scratch/defaults" -path '*/jax/*.py' | sort)

runner_args=("$@")
# command_of NAME: sets `cmd` to the command variant NAME runs.
command_of() {
    case $1 in
        defaults) cmd=("$bin" --output-dir "$scratch/defaults" --compilation-cache "$cache" -q "${runner_args[@]}") ;;
        sandbox-off) cmd=("$bin" --output-dir "$scratch/sandbox-off" --compilation-cache "$cache" -q --sandbox off "${runner_args[@]}") ;;
        floor)
            rm -rf "$scratch/floor"
            cmd=("$PY" "$bench_dir/fork_floor.py" --jobs "$jobs" --cache "$cache" --out "$scratch/floor" "${scripts[@]}")
            ;;
    esac
}
# elapsed_sum NAME: the scripts' own elapsed_s, summed, in ms.
elapsed_sum() {
    local dir=$scratch/$1/execution_results/jax/data
    [[ $1 == floor ]] && dir=$scratch/floor
    python3 -c '
import glob, json, sys
v = [json.load(open(f))["elapsed_s"] for f in glob.glob(sys.argv[1] + "/*/simulation_results.json")]
print("%.1f" % (sum(v) * 1000))' "$dir"
}

log "filling the cache and the histories"
for name in defaults sandbox-off; do
    command_of "$name"
    "${cmd[@]}" >/dev/null 2>&1 || true
done
: >"$scratch/figures"
for r in $(seq 1 "$repeat"); do
    for name in defaults sandbox-off floor; do
        log "round $r of $repeat: $name"
        command_of "$name"
        perf record -q -e sched:sched_process_fork -e sched:sched_process_exec \
            -e sched:sched_process_exit -a -o "$scratch/events.data" -- "${cmd[@]}" \
            >/dev/null 2>&1 || log "$name exited non-zero"
        figures=$(perf script -i "$scratch/events.data" -F comm,pid,tid,time,event,trace 2>/dev/null |
            python3 "$bench_dir/anatomy.py" "${#scripts[@]}") || { log "$name: no figures"; continue; }
        printf '%s\t%s\t%s\n' "$name" "$figures" "$(elapsed_sum "$name")" >>"$scratch/figures"
    done
done

report=$(python3 - "$scratch/figures" "$(provenance "$root")" "${runner_args[*]}" "$repeat" <<'PY'
import json, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
out = ["# jax-runner anatomy of a warm run (bench/anatomy.sh)", "",
       sys.argv[2] + "; runner options: `" + sys.argv[3] + "`; " + sys.argv[4] + " rounds in turn.", "",
       "| variant | first script's fork (ms) | scripts' lifetimes, summed (ms) | their own main(), summed (ms) | waits between scripts (ms) | last exit (ms) | end (ms) |",
       "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
def cell(xs):
    return "%.1f (%.1f–%.1f)" % (statistics.median(xs), min(xs), max(xs))
for name in ("defaults", "sandbox-off", "floor"):
    mine = [(json.loads(f), float(e)) for n, f, e in rows if n == name]
    if not mine:
        continue
    figs = [f for f, _ in mine]
    waits = [w for f in figs for w in f["turnaround_ms"]]
    out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
        name, cell([f["first_fork_ms"] for f in figs]), cell([f["lifetimes_ms"] for f in figs]),
        cell([e for _, e in mine]), cell(waits) if waits else "—",
        cell([f["last_exit_ms"] for f in figs]), cell([f["end_ms"] for f in figs])))
print("\n".join(out))
PY
)
printf '%s\n' "$report"
name=$(stamp anatomy)
printf '%s\n' "$report" >"$bench_dir/results/$name.md"
log "wrote bench/results/$name.md"
