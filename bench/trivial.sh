#!/usr/bin/env bash
# Per-script cost at scale (issue 34): N trivial scripts (`print(i)`, default 1000)
# through jax-runner with DEFAULT options (sandboxed, warm start; `--device cpu` and
# the managed interpreter named, as a user's tree would get them) against
# `xargs -P <jobs> -n 1 python` with the same interpreter, alternating A B A B for
# ROUNDS rounds (default 3), each jax-runner run on a fresh results folder. Prints each
# round's times and ratio, then the median ratio and its spread, and the runner's own
# peak RSS. Nothing else should run on the machine meanwhile. Each round runs on a
# fresh copy of the tree and nothing is deleted until the end: on an ext4 without a
# journal, every inode freed in the last minutes slows each file the next round creates
# (the kernel skips recently deleted inodes one by one), which would charge the
# runner, the side that writes files, for the benchmark's own clean-up. For the same
# reason, start it five minutes after anything deleted many files (this script's own
# clean-up included): the same build measured 1.11x a minute after such a deletion and
# 0.91x five minutes after (bench/results/2026-11-27-vm-trivial-163440.txt, -164115.txt).
# What it prints is also written to bench/results/<date>-<host>-trivial-<time>.txt, so a
# figure quoted in a README has its raw rounds beside it.
# Usage: bench/trivial.sh [N] [jax-runner binary]   (ROUNDS=5 bench/trivial.sh 1000)
# RUNNER_ARGS adds options to the runner's command (a figure taken so says so beside
# it): RUNNER_ARGS="--sandbox off" bench/trivial.sh
# NAMES_JAX=1 ends each script with a comment naming jax (`print(i)  # jax`): the run
# then forks every script from the zygote that imported jax, not the lean one a run of
# scripts that never name jax gets: what a sweep of small jax scripts pays per fork.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
n=${1:-1000}
bin=${2:-$root/target/release/jax-runner}
exec > >(tee "$root/bench/results/$(stamp trivial).txt")
rounds=${ROUNDS:-3}
jobs=$(nproc)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/source/trivial/jax"
suffix=""
if [[ ${NAMES_JAX:-0} == 1 ]]; then suffix="  # jax"; fi
for i in $(seq 1 "$n"); do echo "print($i)$suffix" > "$tree/source/trivial/jax/s$i.py"; done
python=$("$bin" setup -q)
now() { date +%s.%N; }
ratios=()
echo "N=$n jobs=$jobs python=$python binary=$bin ($("$bin" --version)) runner options: ${RUNNER_ARGS:-defaults}${suffix:+, scripts name jax}"
provenance "$root"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
    round="$tree/round$r"
    cp -r "$tree/source" "$round"
    start=$(now)
    find "$round/trivial/jax" -name '*.py' -print0 | xargs -0 -P "$jobs" -n 1 "$python" >/dev/null
    xargs_s=$(echo "$(now) - $start" | bc)
    start=$(now)
    "$bin" --output-dir "$round" --python "$python" --device cpu -q ${RUNNER_ARGS:-} >/dev/null
    runner_s=$(echo "$(now) - $start" | bc)
    # A round counts only if every script succeeded: a fast failure is no figure.
    python3 -c 'import json,sys
ok = json.load(open(sys.argv[1]))["totals"]["succeeded"]
if ok != int(sys.argv[2]):
    sys.exit("only %d of %s scripts succeeded: no figure" % (ok, sys.argv[2]))' \
        "$round/execution_results/jax/performance_metrics.json" "$n"
    rss=$(peaks "$round/execution_results/jax")
    ratio=$(echo "scale=3; $runner_s / $xargs_s" | bc)
    ratios+=("$ratio")
    printf 'round %d: xargs %.2f s, jax-runner %.2f s (runner peak %s): %.2fx\n' \
        "$r" "$xargs_s" "$runner_s" "$rss" "$ratio"
done
# The median of an even count is the mean of the two middle rounds, not the lower one.
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median %.2fx (min %.2fx, max %.2fx) over %d rounds\n", (a[int((NR+1)/2)] + a[int(NR/2)+1]) / 2, a[1], a[NR], NR}'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
