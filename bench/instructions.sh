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
#          RUNNER        1: each script is also forked by the runner's own zygote, as
#                        a one-script tree (`--sandbox off --warm-start on`), and counted
#                        the same way (needs a C compiler, for the shim below)
#          BIN           the runner (default target/release/jax-runner, built)
#
# Each script runs alone under `FLOOR --jobs 1` inside `valgrind --tool=callgrind`.
# callgrind writes one count per process; a forked child would inherit its parent's
# count, so each child's is zeroed where CPython's fork hands it over
# (`PyOS_AfterFork_Child`): the child's figure is what it executed from its fork to
# its exit. Under valgrind, XLA sees another CPU, so the compilation cache's keys
# differ from a native run's: one unmeasured run per script fills a cache of its own
# first, and the measured runs hit it as a warm run does.
#
# The runner's zygote runs in callgrind through an interpreter wrapper given as
# `--python`: the wrapper starts valgrind for the zygote's program only (its `-c`
# loader), the interpreter itself for everything else. valgrind keeps 12 descriptors
# of the hard RLIMIT_NOFILE for itself, and a zygote that cannot restore the run's
# limits in a fork refuses it (the script would start cold); a preloaded shim lets
# that limit read back as set, for this count only. Unsandboxed: the view of a
# sandboxed zygote holds neither the wrapper nor valgrind's tools. A warm script's
# count is the largest file of the run (the zygotes are killed at the run's end and
# write none; a slot's middle process counts under a million).
#
# Needs valgrind (apt-get install valgrind). A script takes 2 to 3 minutes to fill
# and about 40 s per measured run on the development machine.
#
# Output:  one line per run on stdout: script, run, side (floor, runner), the forked
#          script's instructions.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bench_tag=instructions
. "$bench_dir/lib.sh"

[[ $# -ge 1 ]] || { echo "usage: bench/instructions.sh SCRIPT…" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh needs valgrind (apt-get install valgrind)" >&2; exit 2; }
floor=${FLOOR:-$bench_dir/fork_floor.py}
repeat=${BENCH_REPEAT:-2}
bin=${BIN:-$root/target/release/jax-runner}
if [[ -z ${BIN:-} && ( -z ${PY:-} || ${RUNNER:-0} == 1 ) ]]; then
    (cd "$root" && cargo build --release -q)
fi
PY=${PY:-$("$bin" setup -q)}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-instructions.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
# Python's string hashing, fixed: the same dictionary work in every run.
export PYTHONHASHSEED=0
# callgrind, each forked child's count zeroed where CPython hands it the fork.
callgrind="valgrind --tool=callgrind --zero-before=PyOS_AfterFork_Child"

# counted NAME SCRIPT: runs SCRIPT under the floor in callgrind; prints the child's
# total.
counted() {
    local out=$scratch/$1
    mkdir -p "$out"
    $callgrind --callgrind-out-file="$out/cg.%p" \
        "$PY" "$floor" --jobs 1 --cache "$cache" --out "$out/data" "$2" >/dev/null 2>"$out/valgrind.log"
    # The parent is the lower PID, its one child the other file.
    local f
    for f in "$out"/cg.*; do echo "${f##*.} $(awk '/^totals:/ { print $2 }' "$f")"; done |
        sort -n | awk 'NR == 2 { print $2 }'
}

# The runner's side: the shim and the wrapper, made once.
if [[ ${RUNNER:-0} == 1 ]]; then
    cat >"$scratch/rlimit.c" <<'C'
#define _GNU_SOURCE
#define _LARGEFILE64_SOURCE
#include <dlfcn.h>
#include <sys/resource.h>
/* RLIMIT_NOFILE reads back as last set (for counting under valgrind only). */
static struct rlimit64 kept;
static int set;
int setrlimit64(__rlimit_resource_t r, const struct rlimit64 *l) {
    static int (*real)(__rlimit_resource_t, const struct rlimit64 *);
    if (r == RLIMIT_NOFILE) { kept = *l; set = 1; return 0; }
    if (!real) real = dlsym(RTLD_NEXT, "setrlimit64");
    return real(r, l);
}
int getrlimit64(__rlimit_resource_t r, struct rlimit64 *l) {
    static int (*real)(__rlimit_resource_t, struct rlimit64 *);
    if (r == RLIMIT_NOFILE && set) { *l = kept; return 0; }
    if (!real) real = dlsym(RTLD_NEXT, "getrlimit64");
    return real(r, l);
}
C
    cc -shared -fPIC -O2 -o "$scratch/rlimit.so" "$scratch/rlimit.c" -ldl
    cat >"$scratch/python" <<SH
#!/usr/bin/env bash
for a in "\$@"; do
    case \$a in *'exec(compile('*)
        LD_PRELOAD=$scratch/rlimit.so exec $callgrind \\
            --callgrind-out-file="\$JR_COUNT_DIR/cg.%p" "$PY" "\$@" ;;
    esac
done
exec "$PY" "\$@"
SH
    chmod +x "$scratch/python"
fi

# runner_counted NAME SCRIPT: SCRIPT, alone in a tree, forked by the runner's zygote
# in callgrind on the floor's cache; prints its total, or why it started cold.
runner_counted() {
    local out=$scratch/$1 tree=$scratch/$1/tree
    mkdir -p "$out/counts" "$tree/m/jax"
    cp "$2" "$tree/m/jax/"
    JR_COUNT_DIR=$out/counts "$bin" --output-dir "$tree" --python "$scratch/python" --device cpu \
        --compilation-cache "$cache" --sandbox off --warm-start on -q >/dev/null 2>&1 || true
    local cold
    # A warm start's record has no reason: grep finds nothing, which is no failure.
    cold=$(grep -ho '"cold_start_reason": *"[^"]*"' "$tree"/execution_results/jax/*_results.json | head -1 || true)
    if [[ -n $cold ]]; then
        echo "cold (${cold#*: })"
        return
    fi
    awk '/^totals:/ { print $2 }' "$out"/counts/cg.* | sort -n | tail -1
}

echo "# bench/instructions.sh, $(provenance "$root"); floor: ${floor#"$root"/}"
echo "# script run side instructions"
for script in "$@"; do
    script=$(cd "$(dirname "$script")" && pwd)/$(basename "$script")
    cache=$scratch/cache-$(basename "$script" .py)
    log "$(basename "$script"): filling a cache under valgrind (unmeasured)"
    counted fill "$script" >/dev/null
    for r in $(seq 1 "$repeat"); do
        log "$(basename "$script"): run $r of $repeat"
        echo "$(basename "$script") $r floor $(counted "run-$r-$(basename "$script" .py)" "$script")"
        if [[ ${RUNNER:-0} == 1 ]]; then
            echo "$(basename "$script") $r runner $(runner_counted "runner-$r-$(basename "$script" .py)" "$script")"
        fi
    done
done
