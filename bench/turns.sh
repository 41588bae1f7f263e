#!/usr/bin/env bash
# turns.sh: two builds of jax-runner in turn on one tree: the A/B behind a claim that a
# change makes runs faster or leaner.
#
# Usage:   bench/turns.sh A B TREE [OPTION…]
#   A, B     a jax-runner binary, or a revision of this repository, built once with
#            `cargo build --release` in a worktree under target/turns/
#   TREE     a pipeline output tree: GNN's render tree (what bench/gnn.sh renders), or
#            `jax-runner render-workload`'s
#   OPTION…  given to both builds after `--output-dir COPY --compilation-cache DIR -q`,
#            e.g. `--python /path/to/gnn-venv/bin/python --jobs 2`
# Env:     BENCH_REPEAT  rounds (default 4)
#          BENCH_CACHE   filled (default) or empty
#
# Each build runs on a copy of TREE of its own (files naming TREE's path name the
# copy's), so each keeps its own history, which a rerun reads (the order).
#   filled  both builds use one compilation cache, which one unmeasured run of each fills
#           first; those runs also write the history the measured runs read.
#   empty   every run gets a fresh copy and a fresh empty cache folder: a first run.
# Odd rounds run A first, even rounds B first, so a machine that speeds up or slows down
# over the minutes weighs on both. Per run: the wall time (`date +%s.%N` around the
# command), and from its performance_metrics.json the scripts that succeeded, the
# scripts' CPU (user and system, summed), their median peak memory and the cache misses;
# and from its execution log, how long after the zygote's ready the first script, and
# the last of the first `--jobs`, were forked (the log's debug lines; a build older than
# those lines shows none). Each round's ratio is B's wall over A's in that round.
#
# Output:  the Markdown report on stdout, progress on stderr; the report is also written
#          to bench/results/<date>-<host>-turns-<time>.md and the raw figures to the .json
#          beside it.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bench_tag=turns
. "$bench_dir/lib.sh"

[[ $# -ge 3 && -d ${3:-} ]] || {
    echo "usage: bench/turns.sh A B TREE [OPTION…] (A and B: a jax-runner binary or a revision; TREE: a folder)" >&2
    exit 2
}
side_a=$1 side_b=$2
tree=$(cd "$3" && pwd)
shift 3
repeat=${BENCH_REPEAT:-4}
cache_mode=${BENCH_CACHE:-filled}
[[ $cache_mode == filled || $cache_mode == empty ]] || {
    echo "BENCH_CACHE is filled or empty, not '$cache_mode'" >&2
    exit 2
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-turns.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

# binary SIDE: the executable SIDE names, building a revision once into target/turns/.
binary() {
    if [[ -f $1 && -x $1 ]]; then
        (cd "$(dirname "$1")" && printf '%s/%s' "$(pwd)" "$(basename "$1")")
        return
    fi
    local commit built worktree
    commit=$(git -C "$root" rev-parse --verify --quiet "$1^{commit}") || {
        log "'$1' is neither an executable file nor a revision of $root"
        exit 2
    }
    built=$root/target/turns/jax-runner-${commit:0:12}
    if [[ ! -x $built ]]; then
        worktree=$root/target/turns/src-${commit:0:12}
        log "building ${commit:0:12} ($1) in $worktree"
        rm -rf "$worktree"
        git -C "$root" worktree add -q --detach "$worktree" "$commit"
        (cd "$worktree" && CARGO_TARGET_DIR=$root/target/turns/target cargo build --release -q) || {
            git -C "$root" worktree remove --force "$worktree"
            log "building $1 failed"
            exit 1
        }
        cp "$root/target/turns/target/release/jax-runner" "$built.tmp"
        mv "$built.tmp" "$built"
        git -C "$root" worktree remove --force "$worktree"
    fi
    printf '%s' "$built"
}
bin_a=$(binary "$side_a")
bin_b=$(binary "$side_b")
log "A: $side_a ($bin_a)"
log "B: $side_b ($bin_b)"
log "tree $tree, $cache_mode cache, $repeat rounds, options: $*"

# run SIDE BIN OPTION…: one measured run in round $r; appends a row to $rows.
rows=$scratch/rows.tsv # round, side, seconds, exit code, metrics path, log path
: >"$rows"
run() {
    local side=$1 bin=$2 copy=$scratch/tree-$1 cache=$scratch/cache t0 t1 rc=0
    shift 2
    if [[ $cache_mode == empty ]]; then
        copy_tree "$tree" "$copy"
        cache=$scratch/cache-$side-$r
        mkdir -p "$cache"
    fi
    t0=$(date +%s.%N)
    "$bin" --output-dir "$copy" --compilation-cache "$cache" -q "$@" \
        >"$scratch/$side-$r.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    local metrics=$scratch/metrics-$side-$r.json
    cp "$copy/execution_results/jax/performance_metrics.json" "$metrics" 2>/dev/null || metrics=-
    local runlog=$scratch/log-$side-$r.txt
    cp "$copy/execution_results/jax/execution_log.txt" "$runlog" 2>/dev/null || runlog=-
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$side" "$(elapsed "$t0" "$t1")" "$rc" "$metrics" "$runlog" >>"$rows"
    log "round $r: $side $(elapsed "$t0" "$t1") s, exit $rc"
    [[ $cache_mode == filled ]] || rm -rf "$copy" "$cache"
}

if [[ $cache_mode == filled ]]; then
    mkdir -p "$scratch/cache"
    for side in A B; do
        bin=$bin_a
        [[ $side == B ]] && bin=$bin_b
        copy_tree "$tree" "$scratch/tree-$side"
        log "filling: one unmeasured run of $side"
        "$bin" --output-dir "$scratch/tree-$side" --compilation-cache "$scratch/cache" -q "$@" \
            >"$scratch/fill-$side.log" 2>&1 || log "the filling run of $side exited non-zero"
    done
fi
for r in $(seq 1 "$repeat"); do
    if ((r % 2)); then
        run A "$bin_a" "$@"
        run B "$bin_b" "$@"
    else
        run B "$bin_b" "$@"
        run A "$bin_a" "$@"
    fi
done

stamp=$(stamp turns)
mkdir -p "$root/bench/results"
python3 - "$rows" "$root/bench/results/$stamp" "$side_a" "$side_b" "$tree" "$cache_mode" "$*" <<'PY'
import datetime, json, os, platform, re, statistics, sys

rows_path, out, side_a, side_b, tree, cache_mode, options = sys.argv[1:]
def stamp_s(line):
    # The log's timestamps, `2026-12-06T15:09:24.017192Z`, as seconds (a run may
    # cross midnight).
    return datetime.datetime.fromisoformat(line[:26]).timestamp()

def forks_after_ready(path):
    # Milliseconds from the zygote's ready to the first script forked, and to the last
    # of the first `--jobs` (each slot's first script): None where the log says neither.
    ready, jobs, forks = None, None, []
    for line in open(path, errors="replace"):
        if ready is None and "warm start: the zygote makes" in line:
            ready = stamp_s(line)
        elif jobs is None and (m := re.search(r"script\(s\) on \S+, (\d+) at a time", line)):
            jobs = int(m.group(1))
        elif ready is not None and "warm start: forked " in line:
            forks.append(round((stamp_s(line) - ready) * 1000, 1))
    if ready is None or not forks:
        return None, None
    return forks[0], forks[min(jobs or 1, len(forks)) - 1]

rounds = {}
for line in open(rows_path):
    r, side, seconds, rc, metrics, runlog = line.rstrip("\n").split("\t")
    run = {"seconds": float(seconds), "exit_code": int(rc)}
    if runlog != "-":
        run["ready_to_first_fork_ms"], run["ready_to_first_wave_ms"] = forks_after_ready(runlog)
    if metrics != "-":
        m = json.load(open(metrics))
        scripts = m["scripts"]
        run.update(
            succeeded=m["totals"]["succeeded"], total=m["totals"]["total_scripts"],
            cache_misses=m["totals"].get("cache_misses"),
            scripts_cpu_s=round(sum(s.get("cpu_user_s", 0) + s.get("cpu_system_s", 0) for s in scripts), 3),
            median_peak_mb=round(statistics.median(s["peak_memory_mb"] for s in scripts), 1) if scripts else None)
    rounds.setdefault(int(r), {})[side] = run
for r in rounds.values():
    r["ratio"] = round(r["B"]["seconds"] / r["A"]["seconds"], 3)
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "cpu": model, "a": side_a, "b": side_b,
        "tree": tree, "cache": cache_mode, "options": options}
json.dump({"meta": meta, "rounds": rounds}, open(out + ".json", "w"), indent=2)

def cell(run, key, fmt="%s"):
    return "?" if run.get(key) is None else fmt % run[key]

lines = [
    "# Two builds in turn (`bench/turns.sh`, %s)" % meta["date"], "",
    "Machine: %s, %d CPUs (%s). A: `%s`; B: `%s`. Tree `%s`, %s compilation cache; "
    "options: `%s`. Odd rounds ran A first, even rounds B first." % (
        meta["host"], meta["cpus"], model, side_a, side_b, tree, cache_mode, options or "(none)"), "",
    "| round | A s | B s | B / A | CPU A s | CPU B s | median peak A MiB | median peak B MiB | misses A / B | ok A / B |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
for n in sorted(rounds):
    a, b = rounds[n]["A"], rounds[n]["B"]
    lines.append("| %d | %.2f | %.2f | %.3f | %s | %s | %s | %s | %s / %s | %s/%s, %s/%s |" % (
        n, a["seconds"], b["seconds"], rounds[n]["ratio"], cell(a, "scripts_cpu_s", "%.2f"),
        cell(b, "scripts_cpu_s", "%.2f"), cell(a, "median_peak_mb"), cell(b, "median_peak_mb"),
        cell(a, "cache_misses"), cell(b, "cache_misses"), cell(a, "succeeded"), cell(a, "total"),
        cell(b, "succeeded"), cell(b, "total")))
ratios = [r["ratio"] for r in rounds.values()]
faster = sum(1 for x in ratios if x < 1)
lines += ["", "B's wall over A's, median %.3f (%.3f–%.3f); B faster in %d of %d rounds." % (
    statistics.median(ratios), min(ratios), max(ratios), faster, len(ratios))]

def spread(side, key):
    got = [rounds[n][side].get(key) for n in sorted(rounds)]
    got = [x for x in got if x is not None]
    if not got:
        return "none in its log"
    return "median %.1f ms (%.1f–%.1f, %d runs)" % (statistics.median(got), min(got), max(got), len(got))

for key, what in [("ready_to_first_fork_ms", "the first script forked"),
                  ("ready_to_first_wave_ms", "the last of the first `--jobs` forked")]:
    lines.append("From the zygote's ready to %s (execution log): A %s; B %s." % (
        what, spread("A", key), spread("B", key)))
bad = [(n, s) for n, r in sorted(rounds.items()) for s in "AB" if r[s]["exit_code"] != 0]
if bad:
    lines.append("Runs that exited non-zero: %s." % ", ".join("round %d %s" % x for x in bad))
text = "\n".join(lines) + "\n"
open(out + ".md", "w").write(text)
sys.stdout.write(text)
PY
