#!/usr/bin/env bash
# schedstat.sh: what the kernel's scheduler says of each script's time under the
# runner's defaults, under `--sandbox off` and under the fork floor, in turn, with no
# tracer attached (bench/anatomy.sh records with perf, whose events cost every fork,
# exec and exit something). Each script of a copy of the tree reports, as its
# `main()` returns: its `main()`'s wall time, and from /proc its main thread's and all
# its threads' time on a CPU and time runnable but waiting for one (schedstat: the
# run-queue wait, the cost of sharing two cores), its user and system time, its minor
# page faults and its age.
#
# Usage:   bench/schedstat.sh TREE
#   TREE     `jax-runner render-workload`'s output (its scripts end in
#            `sys.exit(main())`, which this wraps)
# Env:     BENCH_REPEAT  rounds (default 6)
#          BIN           the jax-runner binary (default target/release/jax-runner)
#
# Output:  per variant, the medians over rounds of the per-round sums (a script that
#          failed reports nothing) and of the command's wall time; the raw lines go to
#          bench/results/<date>-<host>-schedstat-<time>.jsonl.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bench_tag=schedstat
. "$bench_dir/lib.sh"

[[ $# -ge 1 && -d ${1:-} ]] || { echo "usage: bench/schedstat.sh TREE" >&2; exit 2; }
tree=$(cd "$1" && pwd)
repeat=${BENCH_REPEAT:-6}
bin=${BIN:-$root/target/release/jax-runner}
PY=$("$bin" setup -q)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-schedstat.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
raw=$bench_dir/results/$(stamp schedstat).jsonl

# The report each script writes into its GNN_OUTPUT_DIR (the one folder a sandboxed
# script may write besides its scratch), as main() returns.
copy_tree "$tree" "$scratch/src"
"$PY" - "$scratch/src" <<'PY'
import pathlib, sys
tail = 'if __name__ == "__main__":\n    sys.exit(main())'
dump = '''def _schedstat_report(elapsed):
    import json, os, time
    every = [0, 0]
    for t in os.listdir("/proc/self/task"):
        try:
            fields = open("/proc/self/task/%s/schedstat" % t).read().split()
        except OSError:
            continue
        every = [every[0] + int(fields[0]), every[1] + int(fields[1])]
    own = [int(x) for x in open("/proc/self/schedstat").read().split()]
    stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(stat[19]) / os.sysconf("SC_CLK_TCK")
    times = os.times()
    with open(os.path.join(os.environ["GNN_OUTPUT_DIR"], "schedstat.json"), "w") as fh:
        json.dump({"main_s": elapsed, "age_s": age, "main_run_s": own[0] / 1e9,
                   "main_wait_s": own[1] / 1e9, "all_run_s": every[0] / 1e9,
                   "all_wait_s": every[1] / 1e9, "user_s": times.user,
                   "system_s": times.system, "minflt": int(stat[7])}, fh)


if __name__ == "__main__":
    import time as _time
    _t0 = _time.perf_counter()
    _code = main()
    _schedstat_report(_time.perf_counter() - _t0)
    sys.exit(_code)'''
n = 0
for p in pathlib.Path(sys.argv[1]).glob("**/jax/*.py"):
    text = p.read_text()
    if tail in text:
        p.write_text(text.replace(tail, dump))
        n += 1
if n == 0:
    sys.exit("no script ends in sys.exit(main()): TREE is not render-workload's output")
PY
for v in defaults sandbox-off; do copy_tree "$scratch/src" "$scratch/$v"; done
mapfile -t files < <(find "$scratch/defaults" -path '*/jax/*.py' | sort)
cache=$scratch/cache

# run VARIANT: one run; sets `data` to the folder holding the scripts' reports.
run() {
    case $1 in
        defaults | sandbox-off)
            local extra=()
            [[ $1 == sandbox-off ]] && extra=(--sandbox off)
            "$bin" --output-dir "$scratch/$1" --python "$PY" --device cpu --compilation-cache "$cache" \
                -q "${extra[@]}" >/dev/null 2>&1 || log "$1: the runner exited non-zero"
            data=$scratch/$1/execution_results/jax/data
            ;;
        floor)
            rm -rf "$scratch/floor"
            "$PY" "$bench_dir/fork_floor.py" --jobs 2 --cache "$cache" --out "$scratch/floor" "${files[@]}" >/dev/null
            data=$scratch/floor
            ;;
    esac
}
log "filling the cache and the histories (unmeasured)"
run defaults
run sandbox-off
for r in $(seq 1 "$repeat"); do
    for v in defaults sandbox-off floor; do
        log "round $r of $repeat: $v"
        t0=$(date +%s.%N)
        run "$v"
        t1=$(date +%s.%N)
        for f in "$data"/*/schedstat.json; do
            [[ -f $f ]] || { log "$v: no script reported"; continue; }
            "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); d.update(variant=sys.argv[2], round=int(sys.argv[3]), wall_s=float(sys.argv[4])); print(json.dumps(d))' \
                "$f" "$v" "$r" "$(elapsed "$t0" "$t1")" >>"$raw"
            rm -f "$f"
        done
    done
done
echo "# bench/schedstat.sh, $(provenance "$root"); $repeat rounds; raw: ${raw#"$root"/}"
"$PY" - "$raw" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
keys = ("main_s", "main_run_s", "main_wait_s", "all_run_s", "all_wait_s", "user_s", "system_s", "age_s")
print("| variant | wall (s) | " + " | ".join(k[:-2] + ", summed (s)" for k in keys) + " | minor faults, summed |")
print("| --- | ---: |" + " ---: |" * (len(keys) + 1))
for v in ("defaults", "sandbox-off", "floor"):
    mine = [r for r in rows if r["variant"] == v]
    rounds = sorted({r["round"] for r in mine})
    def med(f):
        return statistics.median(f(n) for n in rounds)
    wall = med(lambda n: next(r["wall_s"] for r in mine if r["round"] == n))
    sums = [med(lambda n, k=k: sum(r[k] for r in mine if r["round"] == n)) for k in keys]
    faults = med(lambda n: sum(r["minflt"] for r in mine if r["round"] == n))
    print("| %s | %.3f | %s | %d |" % (v, wall, " | ".join("%.3f" % s for s in sums), faults))
PY
