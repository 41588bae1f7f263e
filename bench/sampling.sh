#!/usr/bin/env bash
# sampling.sh: what the runner's own CPU costs while long scripts run, and the memory
# figures it records for them (issue 34: the memory sampler's per-script cost).
#
# $SCRIPTS (default 2) jax scripts that each hold a $HOLD_MB (300) MiB array for
# $HOLD_S (15) seconds with a little work every 100 ms, run with default options
# (`--device cpu`) by each binary given, in turn, $ROUNDS (3) times. For each run it
# prints the runner's own CPU seconds (utime + stime of the runner process, its
# threads, not its children: read from /proc/<pid>/stat until it exits), the wall
# time, and the peak memory each script recorded. One unmeasured run first fills the
# tree's compilation cache.
#
#   bench/sampling.sh [BIN ...]        (default: target/release/jax-runner)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bins=("$@")
[[ ${#bins[@]} -gt 0 ]] || bins=("$root/target/release/jax-runner")
scripts=${SCRIPTS:-2}
hold_mb=${HOLD_MB:-300}
hold_s=${HOLD_S:-15}
rounds=${ROUNDS:-3}
PY=$("${bins[0]}" setup -q)

scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-sampling.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
for i in $(seq 1 "$scripts"); do
    mkdir -p "$scratch/tree/hold_$i/jax"
    cat >"$scratch/tree/hold_$i/jax/hold_$i.py" <<EOF
import time
import jax.numpy as jnp

block = jnp.ones(($hold_mb * 2**20 // 4,), jnp.float32).block_until_ready()
end = time.monotonic() + $hold_s
total = 0.0
while time.monotonic() < end:
    total += float(block[:1024].sum())
    time.sleep(0.1)
print(total > 0)
EOF
done

# ticks_of PID: utime + stime of PID itself, in clock ticks (fields 14 and 15).
ticks_of() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null; }
hz=$(getconf CLK_TCK)

# One run first, not measured: the scripts' compilations go into the tree's cache, so
# every measured run finds them there (a first run that compiles holds 45 MiB more).
"${bins[0]}" --output-dir "$scratch/tree" --python "$PY" --device cpu -q >/dev/null 2>&1 || true

printf '| round | binary | runner CPU (s) | wall (s) | peaks (MiB) |\n| ---: | --- | ---: | ---: | --- |\n'
for r in $(seq 1 "$rounds"); do
    for bin in "${bins[@]}"; do
        rm -rf "$scratch/tree/execution_results"
        t0=$(date +%s.%N)
        "$bin" --output-dir "$scratch/tree" --python "$PY" --device cpu -q >/dev/null 2>&1 &
        pid=$!
        last=0
        while kill -0 "$pid" 2>/dev/null; do
            t=$(ticks_of "$pid") && [[ -n $t ]] && last=$t
            sleep 0.2
        done
        wait "$pid" || true
        t1=$(date +%s.%N)
        peaks=$("$PY" -c '
import glob, json, sys
print(" ".join("%.0f" % json.load(open(f))["attempts"][-1]["peak_memory_mb"]
               for f in sorted(glob.glob(sys.argv[1] + "/*_results.json"))))' \
            "$scratch/tree/execution_results/jax")
        awk -v r="$r" -v b="$bin" -v c="$last" -v hz="$hz" -v a="$t0" -v z="$t1" -v p="$peaks" \
            'BEGIN { printf "| %d | %s | %.2f | %.1f | %s |\n", r, b, c / hz, z - a, p }'
    done
done
