#!/usr/bin/env bash
# gnn.sh: GNN's own step 12 against jax-runner, on GNN's bundled models (issue 34).
#
# Given a checkout of GNN (ActiveInferenceInstitute/GeneralizedNotationNotation), it
# renders GNN's bundled models once with GNN's own steps 3 and 11 (`--frameworks jax`),
# then times, round after round, on fresh copies of that render tree:
#   gnn    GNN's `src/12_execute.py --frameworks jax --execution-workers $jobs`
#   cold   jax-runner, default options but `--device $device --python <GNN's python>`,
#          with an empty `--compilation-cache` folder of the round's own
#   warm   the same, on the folder the round's cold run filled
# Rounds alternate the order (odd: gnn first; even: jax-runner first), so a machine
# that speeds up or slows down over the minutes weighs on both sides. Each round's
# ratios are to that round's own GNN run; the report gives every round, the median
# and the range.
#
# GNN's step 12 finds the scripts through the absolute paths its step 11 wrote into the
# render tree's manifests: each copy has the render folder's path rewritten to its own
# (without that, GNN's step 12 finds nothing in a copy and stops).
#
# Usage:   bench/gnn.sh GNN_CHECKOUT
# Env:     GNN_PYTHON    an interpreter with GNN's dependencies; default: a venv made once
#                        with `pip install -e GNN_CHECKOUT` in
#                        ${XDG_CACHE_HOME:-~/.cache}/jax-runner/bench/gnn-venv-<hash>
#          GNN_COMMIT    what to name the checkout by when it is not a git work tree
#          BENCH_REPEAT  rounds (default 3)
#          BENCH_JOBS    workers on both sides (default: nproc)
#          BENCH_DEVICE  jax-runner's --device (default cpu)
# Output:  the Markdown report on stdout, progress on stderr; the report is also written
#          to bench/results/<date>-<host>-gnn.md and the raw figures to the .json beside.
set -euo pipefail

[[ $# -eq 1 && -f ${1:-}/src/12_execute.py ]] || {
    echo "usage: bench/gnn.sh GNN_CHECKOUT (a folder holding GNN's src/12_execute.py)" >&2
    exit 2
}
gnn=$(cd "$1" && pwd)
bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
bin=$root/target/release/jax-runner
repeat=${BENCH_REPEAT:-3}
jobs=${BENCH_JOBS:-$(nproc)}
device=${BENCH_DEVICE:-cpu}

bench_tag=gnn
. "$bench_dir/lib.sh"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-gnn-bench.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

log "cargo build --release"
(cd "$root" && cargo build --release -q) || {
    [[ -x $bin ]] || { log "the build fails and there is no binary at $bin"; exit 1; }
    log "the build failed; measuring the existing binary"
}

# GNN's interpreter: the caller's, or a venv of the checkout's own dependencies.
if [[ -n ${GNN_PYTHON:-} ]]; then
    py=$GNN_PYTHON
else
    hash=$(sha256sum "$gnn/pyproject.toml" | cut -c1-12)
    venv=${XDG_CACHE_HOME:-$HOME/.cache}/jax-runner/bench/gnn-venv-$hash
    if [[ ! -x $venv/bin/python ]]; then
        log "making GNN's venv in $venv (pip install -e $gnn; once)"
        python3 -m venv "$venv.tmp.$$"
        "$venv.tmp.$$/bin/pip" install -q -e "$gnn" >&2
        mv "$venv.tmp.$$" "$venv" 2>/dev/null || rm -rf "$venv.tmp.$$"
    fi
    py=$venv/bin/python
fi
commit=${GNN_COMMIT:-$(git -C "$gnn" rev-parse --short HEAD 2>/dev/null || echo "unknown")}
jax_version=$("$py" -c 'import jax; print(jax.__version__)')
log "GNN $commit, python $py (jax $jax_version), $jobs jobs, $repeat rounds"

# Steps 3 and 11 render the models once; every run works on a copy.
render=$scratch/render
log "rendering GNN's models (steps 3 and 11)"
(cd "$gnn" && "$py" src/main.py --only-steps "3,11" --target-dir input/gnn_files \
    --output-dir "$render" --frameworks jax >"$scratch/render.log" 2>&1) || {
    tail -n 20 "$scratch/render.log" >&2
    log "GNN's render failed (log above)"
    exit 1
}
scripts=$(find "$render/11_render_output" -path '*/jax/*.py' | wc -l)
log "$scripts JAX scripts rendered"

# fresh NAME: a copy of the render tree at $scratch/NAME, its manifests' paths its own.
fresh() {
    copy_tree "$render" "$scratch/$1"
    printf '%s' "$scratch/$1"
}

# Each run sets `seconds`, `ok` and `total`, and writes its log to $scratch/NAME.log.
run_gnn() {
    local dir t0 t1
    dir=$(fresh "$1")
    t0=$(date +%s.%N)
    (cd "$gnn" && "$py" src/12_execute.py --target-dir input/gnn_files --output-dir "$dir" \
        --frameworks jax --execution-workers "$jobs" >"$scratch/$1.log" 2>&1) || log "$1: GNN's step 12 exited non-zero"
    t1=$(date +%s.%N)
    seconds=$(elapsed "$t0" "$t1")
    read -r ok total < <("$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
print(d["successful_executions"], d["total_scripts_found"])' \
        "$dir/12_execute_output/summaries/execution_summary.json" 2>/dev/null || echo "? ?")
}

run_runner() {
    local dir t0 t1
    dir=$(fresh "$1")
    t0=$(date +%s.%N)
    "$bin" --output-dir "$dir" --python "$py" --device "$device" --jobs "$jobs" \
        --compilation-cache "$2" -q >"$scratch/$1.log" 2>&1 || log "$1: jax-runner exited non-zero"
    t1=$(date +%s.%N)
    seconds=$(elapsed "$t0" "$t1")
    read -r ok total misses < <("$py" -c 'import json,sys
t = json.load(open(sys.argv[1]))["totals"]
print(t["succeeded"], t["total_scripts"], t.get("cache_misses", "?"))' \
        "$dir/execution_results/jax/performance_metrics.json" 2>/dev/null || echo "? ? ?")
}

rows=$scratch/rows.tsv # round, variant, seconds, ok, total, cache misses
: >"$rows"
side_gnn() {
    log "round $r: GNN's step 12"
    run_gnn "gnn-$r"
    printf '%s\tgnn\t%s\t%s\t%s\t-\n' "$r" "$seconds" "$ok" "$total" >>"$rows"
    log "round $r: GNN ${seconds}s ($ok of $total)"
}
side_runner() {
    local cache=$scratch/cache-$r variant
    for variant in cold warm; do
        log "round $r: jax-runner, $variant compilation cache"
        run_runner "$variant-$r" "$cache"
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$variant" "$seconds" "$ok" "$total" "$misses" >>"$rows"
        log "round $r: $variant ${seconds}s ($ok of $total, $misses cache misses)"
        rm -rf "$scratch/$variant-$r"
    done
}
for r in $(seq 1 "$repeat"); do
    if ((r % 2)); then side_gnn; side_runner; else side_runner; side_gnn; fi
    rm -rf "$scratch/gnn-$r" "$scratch/cache-$r"
done

stamp=$(stamp gnn)
mkdir -p "$root/bench/results"
"$py" - "$rows" "$root/bench/results/$stamp" "$commit" "$jax_version" "$jobs" "$device" "$scripts" <<'PY'
import datetime, json, os, platform, statistics, sys

rows_path, out, commit, jax_version, jobs, device, scripts = sys.argv[1:]
rounds = {}
for line in open(rows_path):
    r, variant, seconds, ok, total, misses = line.rstrip("\n").split("\t")
    rounds.setdefault(int(r), {})[variant] = {
        "seconds": float(seconds), "ok": ok, "total": total,
        "cache_misses": None if misses in ("-", "?") else int(misses)}
for r in rounds.values():
    for variant in ("cold", "warm"):
        r[variant]["ratio"] = round(r[variant]["seconds"] / r["gnn"]["seconds"], 3)
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "cpu": model, "gnn_commit": commit,
        "jax": jax_version, "jobs": int(jobs), "device": device, "scripts": int(scripts)}
json.dump({"meta": meta, "rounds": rounds}, open(out + ".json", "w"), indent=2)

def spread(values):
    return "%.3f (%.3f–%.3f)" % (statistics.median(values), min(values), max(values))

lines = [
    "# GNN's step 12 against jax-runner (`bench/gnn.sh`, %s)" % meta["date"], "",
    "Machine: %s, %d CPUs (%s). GNN %s, jax %s; %s JAX scripts from GNN's steps 3 and 11." % (
        meta["host"], meta["cpus"], model, commit, jax_version, scripts), "",
    "- **gnn**: `src/12_execute.py --frameworks jax --execution-workers %s`." % jobs,
    "- **cold / warm**: `jax-runner --device %s --python <GNN's python> --jobs %s "
    "--compilation-cache <round's folder>`, otherwise default options (sandboxed, warm "
    "start); cold on an empty folder, warm on the one cold filled." % (device, jobs),
    "- Each ratio is to the same round's GNN run; odd rounds ran GNN first, even rounds jax-runner first.",
    "", "| round | gnn s | cold s | cold ratio | cold misses | warm s | warm ratio | scripts ok (gnn / cold / warm) |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
for n in sorted(rounds):
    g, c, w = rounds[n]["gnn"], rounds[n]["cold"], rounds[n]["warm"]
    lines.append("| %d | %.1f | %.1f | %.3f | %s | %.1f | %.3f | %s/%s, %s/%s, %s/%s |" % (
        n, g["seconds"], c["seconds"], c["ratio"], c["cache_misses"], w["seconds"], w["ratio"],
        g["ok"], g["total"], c["ok"], c["total"], w["ok"], w["total"]))
cold = [r["cold"]["ratio"] for r in rounds.values()]
warm = [r["warm"]["ratio"] for r in rounds.values()]
lines += ["", "Ratio to GNN's step 12, median (range): cold %s, warm %s." % (spread(cold), spread(warm))]
text = "\n".join(lines) + "\n"
open(out + ".md", "w").write(text)
sys.stdout.write(text)
PY
