#!/usr/bin/env bash
# instructions.sh: the instructions a warm-forked script executes itself, counted by
# callgrind: a figure that does not move with the machine's load. Wall and CPU times
# on a shared two-core machine move by 10 to 30% from round to round; this count
# moved by 0.1% or less from run to run (thirty-first pass, bench/README.md). It
# weighs a change to what the zygote does before its forks, tried first in a copy of
# bench/fork_floor.py (FLOOR=that copy), against the floor as it is.
#
# Usage:   bench/instructions.sh SCRIPT…
# Env:     FLOOR         the forking program (default bench/fork_floor.py)
#          BENCH_REPEAT  measured runs per script (default 2)
#          PY            the interpreter (default: the managed one, `jax-runner setup`)
#
# Each script runs alone under `FLOOR --jobs 1` inside `valgrind --tool=callgrind`.
# callgrind writes one count per process; a forked child would inherit its parent's
# count, so each child's is zeroed where CPython's fork hands it over
# (`PyOS_AfterFork_Child`): the child's figure is what it executed from its fork to
# its exit. Under valgrind, XLA sees another CPU, so the compilation cache's keys
# differ from a native run's: one unmeasured run per script fills a cache of its own
# first, and the measured runs hit it as a warm run does.
#
# Needs valgrind (apt-get install valgrind). A script takes 2 to 3 minutes to fill
# and about 40 s per measured run on the development machine.
#
# Output:  one line per run on stdout: script, run, the child's instructions.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bench_tag=instructions
. "$bench_dir/lib.sh"

[[ $# -ge 1 ]] || { echo "usage: bench/instructions.sh SCRIPT…" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh needs valgrind (apt-get install valgrind)" >&2; exit 2; }
floor=${FLOOR:-$bench_dir/fork_floor.py}
repeat=${BENCH_REPEAT:-2}
if [[ -z ${PY:-} ]]; then
    (cd "$root" && cargo build --release -q)
    PY=$("$root/target/release/jax-runner" setup -q)
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-instructions.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
# Python's string hashing, fixed: the same dictionary work in every run.
export PYTHONHASHSEED=0

# counted NAME SCRIPT: runs SCRIPT under the floor in callgrind; prints the child's
# total.
counted() {
    local out=$scratch/$1
    mkdir -p "$out"
    valgrind --tool=callgrind --zero-before=PyOS_AfterFork_Child --callgrind-out-file="$out/cg.%p" \
        "$PY" "$floor" --jobs 1 --cache "$cache" --out "$out/data" "$2" >/dev/null 2>"$out/valgrind.log"
    # The parent is the lower PID, its one child the other file.
    local f
    for f in "$out"/cg.*; do echo "${f##*.} $(awk '/^totals:/ { print $2 }' "$f")"; done |
        sort -n | awk 'NR == 2 { print $2 }'
}

echo "# bench/instructions.sh, $(provenance "$root"); floor: ${floor#"$root"/}"
echo "# script run child_instructions"
for script in "$@"; do
    script=$(cd "$(dirname "$script")" && pwd)/$(basename "$script")
    cache=$scratch/cache-$(basename "$script" .py)
    log "$(basename "$script"): filling a cache under valgrind (unmeasured)"
    counted fill "$script" >/dev/null
    for r in $(seq 1 "$repeat"); do
        log "$(basename "$script"): run $r of $repeat"
        echo "$(basename "$script") $r $(counted "run-$r-$(basename "$script" .py)" "$script")"
    done
done
