#!/usr/bin/env bash
# self_timed.sh: is a script's own work slower under the runner than under the fork
# floor? Four copies of bench/self_timed.py (each times its own Python loop, jitted
# calls and eager operations with its CPU clock) run one at a time under jax-runner's
# defaults and under bench/fork_floor.py on the compilation cache the runner filled,
# in turn, BENCH_REPEAT rounds (default 5). Prints, per round and side, the seconds
# summed over the four scripts.
#
# Usage:   bench/self_timed.sh [BINARY]   (default: target/release/jax-runner, built)
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bench_tag=self-timed
. "$bench_dir/lib.sh"

bin=${1:-$root/target/release/jax-runner}
[[ -n ${1:-} ]] || (cd "$root" && cargo build --release -q)
repeat=${BENCH_REPEAT:-5}
PY=$("$bin" setup -q)
unset JAX_COMPILATION_CACHE_DIR JAX_ENABLE_COMPILATION_CACHE JAX_PLATFORMS
scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-self-timed.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

mkdir -p "$scratch/tree/m/jax"
for i in 1 2 3 4; do cp "$bench_dir/self_timed.py" "$scratch/tree/m/jax/self_timed_$i.py"; done
cache=$scratch/cache
run_runner() {
    rm -rf "$scratch/tree/execution_results"
    "$bin" --output-dir "$scratch/tree" --compilation-cache "$cache" --device cpu --jobs 1 -q \
        >/dev/null 2>&1 || log "the runner exited non-zero"
}
log "filling the cache: one unmeasured run"
run_runner
sums() { # SIDE FOLDER
    "$PY" - "$@" <<'PY'
import glob, json, sys
side, folder = sys.argv[1:]
runs = [json.load(open(f)) for f in sorted(glob.glob(folder + "/**/t.json", recursive=True))]
print("%-6s %s  scripts %d" % (side, "  ".join(
    "%s %.3f s" % (k, sum(r[k] for r in runs)) for k in ("py", "jit_calls", "eager")), len(runs)))
PY
}
echo "# bench/self_timed.sh, $(provenance "$root"); $("$bin" --version)"
for r in $(seq 1 "$repeat"); do
    log "round $r of $repeat"
    run_runner
    sums runner "$scratch/tree/execution_results"
    rm -rf "$scratch/floor"
    "$PY" "$bench_dir/fork_floor.py" --jobs 1 --cache "$cache" --out "$scratch/floor" \
        "$scratch"/tree/m/jax/self_timed_*.py >/dev/null
    sums floor "$scratch/floor"
done
