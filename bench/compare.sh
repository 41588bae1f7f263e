#!/usr/bin/env bash
# compare.sh: jax-runner against plain shell baselines, side by side, in one run.
#
# What it measures (wall time with `date +%s.%N`, one run each unless noted):
#   1. POMDP workload: N scripts rendered from templates/ (`jax-runner render-workload`),
#      for each N in $BENCH_SIZES (default "8 32"), run five ways:
#        sequential    a bash loop, one script after the other, once in every round
#                      of the defaults rows below (the row gives the median)
#        xargs -P      the same per-script command through `xargs -P $(nproc)`
#        runner plain  jax-runner, compilation cache off, warm start off
#        defaults      jax-runner with default options (sandbox auto, warm start auto),
#                      an empty compilation cache, then the cache it filled
#        no bwrap      default options with bwrap hidden from PATH (the built-in layer)
#        sandbox off   the same with --sandbox off (warm start on)
#        fork floor    bench/fork_floor.py after each round's defaults run, on the cache
#                      it filled: jax imported once, each script forked, nothing else
#                      (no runner); what is left between it and the defaults is the
#                      runner's own cost
#      defaults, no bwrap and sandbox off alternate $BENCH_REPEAT times (default 3), each round
#      with fresh cache folders; their rows give the median and list every run.
#      Each row's ratio is to the sequential loop's median; the defaults rows also give
#      each round's ratio to that round's own sequential loop.
#   2. Runner overhead: $BENCH_TRIVIAL (default 200) scripts that only `print(1)`,
#      a bare sequential loop against `jax-runner --jobs 1` (sandbox off, and on when
#      bubblewrap works): milliseconds per script, and the runner's extra per script.
#   3. Discovery: a generated 100,000-file tree, `find` and `find | xargs grep` against
#      `jax-runner list --json`; 3 runs each, the median reported.
#
# Flags the binary does not have (e.g. --warm-start while it is being written) are left
# out and the affected rows say so; nothing here fails because of a missing flag.
#
# Rerun:   bench/compare.sh                      (sizes 8 and 32, ~10 minutes on 2 cores)
#          BENCH_SIZES="8 32 128" bench/compare.sh
# Output:  the Markdown report on stdout, progress on stderr; the report is also written
#          to bench/results/<date>-<host>.md and the raw numbers to the matching .json.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
cd "$root"

sizes=${BENCH_SIZES:-"8 32"}
trivial_count=${BENCH_TRIVIAL:-200}
repeat=${BENCH_REPEAT:-3}
discovery_runs=3
bin=$root/target/release/jax-runner
jobs=$(nproc)
harness_start=$(date +%s.%N)

bench_tag=compare
. "$bench_dir/lib.sh"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-bench.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

rows=$scratch/rows.tsv # section, size, variant, seconds, ok, total, note
notes=$scratch/notes.txt
: >"$rows"
: >"$notes"

# row SECTION SIZE VARIANT SECONDS OK TOTAL NOTE
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$rows"; }
note() { printf '%s\n' "$*" >>"$notes"; log "note: $*"; }

# ---------------------------------------------------------------- build and setup
build_ok=no
for attempt in 1 2 3 4; do
    log "cargo build --release (attempt $attempt)"
    if cargo build --release >"$scratch/build.log" 2>&1; then
        build_ok=yes
        break
    fi
    tail -n 5 "$scratch/build.log" >&2
    if [[ $attempt -lt 4 ]]; then log "build failed; retrying in 60 s"; sleep 60; fi
done
if [[ $build_ok == no ]]; then
    [[ -x $bin ]] || { log "no binary at $bin and the build fails; giving up"; exit 1; }
    note "cargo build --release failed 4 times; measured the existing (older) binary"
fi

PY=$("$bin" setup -q)
log "python: $PY"
# Keep the environment from turning a persistent cache on behind our back.
unset JAX_COMPILATION_CACHE_DIR JAX_ENABLE_COMPILATION_CACHE JAX_PLATFORMS

# accepts ARGS…: true when the binary parses ARGS (clap rejects unknown flags and bad
# values before it acts on the trailing --help).
accepts() { "$bin" "$@" --help >/dev/null 2>&1; }

device_opts=() cache_off=() sandbox_off=() sandbox_on=() warm_on=() warm_off=()
if accepts --device cpu; then device_opts=(--device cpu); else note "no --device flag: runner picks its device itself"; fi
if accepts --compilation-cache off; then cache_off=(--compilation-cache off); else note "no --compilation-cache flag: cold runs may use a cache"; fi
if accepts --sandbox off; then sandbox_off=(--sandbox off); sandbox_on=(--sandbox on); else note "no --sandbox flag"; fi
warm_start=available
if accepts --warm-start on; then warm_on=(--warm-start on)
elif accepts --warm-start; then warm_on=(--warm-start)
else warm_start=missing; note "no --warm-start flag: runner rows ran without it (warm start not available)"
fi
if accepts --warm-start off; then warm_off=(--warm-start off)
elif accepts --no-warm-start; then warm_off=(--no-warm-start)
fi
warm_note=""
if [[ $warm_start == missing ]]; then warm_note="(warm start not available)"; fi
cold_desc="${device_opts[*]} ${cache_off[*]} ${warm_off[*]} ${sandbox_off[*]}"
warm_desc="${device_opts[*]} ${cache_off[*]:+--compilation-cache CACHE} ${warm_on[*]} ${sandbox_off[*]}"

# Words put before the runner's command (an `env PATH=…` that hides bwrap).
runner_prefix=()

# run_runner LOGNAME OUTPUT_DIR ARGS…: timed jax-runner run with a fresh results folder;
# sets `seconds`, `ok` and `total` (succeeded / discovered, from performance_metrics.json).
run_runner() {
    local name=$1 dir=$2
    shift 2
    rm -rf "$dir/execution_results"
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    "${runner_prefix[@]}" "$bin" --output-dir "$dir" --python "$PY" "${device_opts[@]}" -q "$@" \
        >"$scratch/$name.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    seconds=$(elapsed "$t0" "$t1")
    local metrics=$dir/execution_results/jax/performance_metrics.json
    if [[ -f $metrics ]]; then
        read -r ok total < <("$PY" -c 'import json,sys; t=json.load(open(sys.argv[1]))["totals"]; print(t["succeeded"], t["total_scripts"])' "$metrics") || { ok="?" total="?"; }
    else
        ok="?" total="?"
    fi
    if [[ $rc -ne 0 ]]; then
        log "$name: jax-runner exited $rc; last lines of its output:"
        tail -n 5 "$scratch/$name.log" >&2
    fi
}

# ---------------------------------------------------------------- 1. POMDP workload
for n in $sizes; do
    work=$scratch/workload-$n
    log "N=$n: rendering the workload"
    "$bin" render-workload --count "$n" --out "$work/tree" >/dev/null
    mapfile -t files < <(find "$work/tree" -path '*/jax/*.py' | sort)
    [[ ${#files[@]} -eq $n ]] || note "N=$n: render-workload wrote ${#files[@]} scripts"

    # sequential_once: one sequential loop over the scripts; sets `seq_s` and `seq_ok`.
    # It runs once more in every round below (a machine whose speed drifts moves a
    # single baseline run by a quarter), and the row gives their median.
    sequential_once() {
        local out=$work/seq t0 t1 f o
        rm -rf "$out"
        t0=$(date +%s.%N)
        for f in "${files[@]}"; do
            o=$out/$(basename "$f" .py)
            mkdir -p "$o"
            (cd "$(dirname "$f")" && GNN_OUTPUT_DIR="$o" JAX_PLATFORMS=cpu "$PY" "$f" >/dev/null) || true
        done
        t1=$(date +%s.%N)
        seq_s=$(elapsed "$t0" "$t1")
        seq_ok=$(find "$out" -name simulation_results.json | wc -l)
    }

    # floor_once CACHE: bench/fork_floor.py over the scripts on CACHE, timed as the
    # runner is (from the command's start); adds to runs[floor], sets floor_ok.
    floor_once() {
        local out=$work/floor t0 t1
        rm -rf "$out"
        t0=$(date +%s.%N)
        floor_ok=$("$PY" "$bench_dir/fork_floor.py" --jobs "$jobs" --cache "$1" --out "$out" "${files[@]}" |
            "$PY" -c 'import json,sys; print(json.load(sys.stdin)["ok"])') || floor_ok="?"
        t1=$(date +%s.%N)
        runs[floor]+="$(elapsed "$t0" "$t1") "
        [[ $floor_ok == "$n" ]] || note "N=$n: fork floor: $floor_ok of $n scripts ok"
    }

    log "N=$n: xargs -P $jobs"
    out=$work/xargs
    t0=$(date +%s.%N)
    printf '%s\0' "${files[@]}" | OUT_ROOT=$out PY=$PY xargs -0 -n 1 -P "$jobs" bash -c '
        o=$OUT_ROOT/$(basename "$1" .py); mkdir -p "$o"
        cd "$(dirname "$1")" && GNN_OUTPUT_DIR="$o" JAX_PLATFORMS=cpu exec "$PY" "$1" >/dev/null
    ' _ || true
    t1=$(date +%s.%N)
    s=$(elapsed "$t0" "$t1")
    ok=$(find "$out" -name simulation_results.json | wc -l)
    row workload "$n" "xargs -P $jobs" "$s" "$ok" "$n" ""

    log "N=$n: jax-runner, no cache, no warm start"
    run_runner "plain-$n" "$work/tree" "${cache_off[@]}" "${warm_off[@]}" "${sandbox_off[@]}"
    row workload "$n" "jax-runner, no cache, no warm start" "$seconds" "$ok" "$total" "$warm_note"

    # What users get: default options (sandbox auto, warm start auto) with only the
    # device named, cold then warm cache; beside it the same with --sandbox off. A
    # sandboxed run's default cache is one folder per tree, so each round copies the
    # tree to a new folder (a new tree: an empty cache), runs it twice, then removes
    # the cache folder the run's metrics name. The --sandbox off rows name a fresh
    # --compilation-cache folder per round instead (their default one is shared).
    # Each pair runs $repeat times, alternating, so a noisy machine cannot favour one;
    # the rows give the median and every run.
    declare -A runs=() least=()
    seq_least=$n
    for r in $(seq 1 "$repeat"); do
        log "N=$n: sequential loop (round $r of $repeat)"
        sequential_once
        runs[sequential]+="$seq_s "
        [[ $seq_ok -lt $seq_least ]] && seq_least=$seq_ok
        for variant in defaults no-bwrap sandbox-off; do
            extra=()
            if [[ $variant == sandbox-off ]]; then extra=("${warm_on[@]}" "${sandbox_off[@]}"); fi
            cache=()
            tree=$work/tree
            # no-bwrap: default options on a machine without bubblewrap (it is found only
            # through PATH): the built-in layer alone.
            hide=()
            if [[ $variant == no-bwrap ]]; then hide=(env PATH=/nonexistent); fi
            if [[ $variant != sandbox-off ]]; then
                tree=$work/tree-$r
                cp -a "$work/tree" "$tree"
            elif [[ ${#cache_off[@]} -gt 0 ]]; then
                cache=(--compilation-cache "$work/cache-$variant-$r")
            fi
            for state in cold warm; do
                log "N=$n: $variant, $state cache (round $r of $repeat)"
                runner_prefix=("${hide[@]}")
                run_runner "$variant-$state-$n-$r" "$tree" "${cache[@]}" "${extra[@]}"
                runner_prefix=()
                runs[$variant-$state]+="$seconds "
                # The fewest scripts ok in any round is what the row reports.
                prev=${least[$variant-$state]:-$ok}
                if [[ $ok =~ ^[0-9]+$ && $prev =~ ^[0-9]+$ && $ok -lt $prev ]] || [[ ! $ok =~ ^[0-9]+$ ]]; then prev=$ok; fi
                least[$variant-$state]=$prev
                [[ $ok == "$total" ]] || note "N=$n: $variant $state round $r: $ok of $total scripts ok"
            done
            if [[ $variant != sandbox-off ]]; then
                used=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["run"].get("compilation_cache") or "")' \
                    "$tree/execution_results/jax/performance_metrics.json" 2>/dev/null || true)
                # The floor: the same scripts forked from one process that imported
                # jax, on the cache the defaults run just filled (see fork_floor.py).
                if [[ $variant == defaults && -n $used && -d $used ]]; then
                    log "N=$n: fork floor, warm cache (round $r of $repeat)"
                    floor_once "$used"
                fi
                [[ -n $used && -d $used ]] && rm -rf "$used"
                rm -rf "$tree"
            fi
        done
    done
    # Each round's defaults run against that round's sequential loop: the spread of
    # the ratio, beside the ratio of the medians the table gives.
    # round_ratios VARIANT: each round's ratio to that round's sequential loop, and
    # their median (the table's ratio is the medians' ratio, which a slow round of the
    # loop alone can lower).
    round_ratios() {
        local r
        r=$(paste -d' ' <(printf '%s\n' ${runs[sequential]}) <(printf '%s\n' ${runs[$1]}) |
            awk '{ printf "%s%.3f", (NR > 1 ? " " : ""), $2 / $1 }')
        printf '%s (median %s)' "$r" "$(median $r)"
    }
    row workload "$n" sequential "$(median ${runs[sequential]})" "$seq_least" "$n" "median of: ${runs[sequential]% }"
    for state in cold warm; do
        d=$(median ${runs[defaults-$state]})
        o=$(median ${runs[sandbox-off-$state]})
        cost=$(awk -v d="$d" -v o="$o" 'BEGIN { printf "%+.1f%%", (d / o - 1) * 100 }')
        row workload "$n" "jax-runner defaults, $state cache" "$d" "${least[defaults-$state]}" "$n" "default options, median of: ${runs[defaults-$state]% }; each round against its sequential loop: $(round_ratios "defaults-$state"); sandbox cost $cost"
        b=$(median ${runs[no-bwrap-$state]})
        bcost=$(awk -v d="$b" -v o="$o" 'BEGIN { printf "%+.1f%%", (d / o - 1) * 100 }')
        row workload "$n" "jax-runner defaults without bwrap, $state cache" "$b" "${least[no-bwrap-$state]}" "$n" "default options, bwrap hidden from PATH (the built-in layer alone), median of: ${runs[no-bwrap-$state]% }; its cost $bcost"
        row workload "$n" "jax-runner --sandbox off, $state cache" "$o" "${least[sandbox-off-$state]}" "$n" "${warm_note:-warm start on}, median of: ${runs[sandbox-off-$state]% }"
    done
    if [[ -n ${runs[floor]:-} ]]; then
        f=$(median ${runs[floor]})
        d=$(median ${runs[defaults-warm]})
        gap=$(awk -v d="$d" -v f="$f" 'BEGIN { printf "%+.1f%%", (d / f - 1) * 100 }')
        row workload "$n" "fork floor (bench/fork_floor.py), warm cache" "$f" "${floor_ok:-?}" "$n" "no runner: jax imported once (the keeper of frame-stack chunks set, as the zygote does), each script forked $jobs at a time on the defaults run's cache; median of: ${runs[floor]% }; each round against its sequential loop: $(round_ratios floor); the runner's defaults cost $gap over it"
    fi
    rm -rf "$work"
done

# ---------------------------------------------------------------- 2. runner overhead
m=$trivial_count
log "overhead: $m trivial scripts"
tdir=$scratch/trivial
mkdir -p "$tdir/t/jax"
for i in $(seq -w 1 "$m"); do echo 'print(1)' >"$tdir/t/jax/s$i.py"; done
mapfile -t files < <(find "$tdir/t/jax" -name '*.py' | sort)

log "overhead: bare loop"
t0=$(date +%s.%N)
ok=0
for f in "${files[@]}"; do "$PY" "$f" >/dev/null && ok=$((ok + 1)); done
t1=$(date +%s.%N)
row overhead "$m" "bare loop" "$(elapsed "$t0" "$t1")" "$ok" "$m" ""

if accepts --jobs 1; then
    log "overhead: jax-runner --jobs 1, sandbox off"
    run_runner overhead-off "$tdir" --jobs 1 "${sandbox_off[@]}" "${warm_off[@]}" "${cache_off[@]}"
    row overhead "$m" "jax-runner --jobs 1, sandbox off" "$seconds" "$ok" "$total" ""
    if accepts --no-preflight; then
        log "overhead: jax-runner --jobs 1, sandbox off, --no-preflight"
        run_runner overhead-nopre "$tdir" --jobs 1 --no-preflight "${sandbox_off[@]}" "${warm_off[@]}" "${cache_off[@]}"
        row overhead "$m" "jax-runner --jobs 1, sandbox off, --no-preflight" "$seconds" "$ok" "$total" ""
    fi
    if [[ ${#sandbox_on[@]} -gt 0 ]] && bwrap --ro-bind / / --dev /dev --proc /proc true >/dev/null 2>&1; then
        log "overhead: jax-runner --jobs 1, sandbox on"
        run_runner overhead-on "$tdir" --jobs 1 "${sandbox_on[@]}" "${warm_off[@]}" "${cache_off[@]}"
        row overhead "$m" "jax-runner --jobs 1, sandbox on" "$seconds" "$ok" "$total" ""
    else
        note "bubblewrap does not work here (or no --sandbox flag): no sandbox-on overhead row"
    fi
else
    note "no --jobs flag: no runner overhead rows"
fi
rm -rf "$tdir"

# ---------------------------------------------------------------- 3. discovery
tree=$scratch/discovery
log "discovery: generating a 100,000-file tree"
"$PY" - "$tree" <<'PY'
# 1,000 folders x 100 files = 100,000 files, the same every time.
#   every folder: sim_NNNN.py (imports jax when i % 4 < 2, else numpy),
#                 analysis_NNNN.py (numpy only), the rest data files (.json .txt .log .csv)
#   every 10th folder: jax/ with 4 scripts (counted in that folder's 100)
# Discoverable: 100 x 4 jax/ scripts + 500 sim files that import jax = 900.
import os, sys
top = sys.argv[1]
exts = (".json", ".txt", ".log", ".csv")
for i in range(1000):
    d = os.path.join(top, f"run_{i:04d}")
    os.makedirs(d)
    files = {}
    if i % 10 == 0:
        os.makedirs(os.path.join(d, "jax"))
        for k in range(4):
            files[f"jax/model_{i:04d}_{k}.py"] = "import jax.numpy as jnp\nprint(jnp.ones(3))\n"
    sim = "import jax\n" if i % 4 == 0 else "from jax import lax\n" if i % 4 == 1 else "import numpy as np\n"
    files[f"sim_{i:04d}.py"] = "# generated\n" + sim + "print('sim')\n"
    files[f"analysis_{i:04d}.py"] = "import numpy as np\nprint(np.zeros(2))\n"
    k = 0
    while len(files) < 100:
        files[f"data_{k:03d}{exts[k % 4]}"] = f'{{"folder": {i}, "item": {k}}}\n'
        k += 1
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as fh:
            fh.write(text)
PY
file_count=$(find "$tree" -type f | wc -l)
[[ $file_count -eq 100000 ]] || note "discovery tree has $file_count files, not 100000"

jax_re='^(import|from) jax([. ]|$)'
plain_find() { find "$tree" -name '*.py' >/dev/null; }
find_grep() {
    find "$tree" -name '*.py' -print0 | xargs -0 grep -l -m1 -E "$jax_re" >/dev/null || true
}
list_args=(list --output-dir "$tree")
if accepts list --json; then list_args+=(--json); else note "list has no --json: timed the table output"; fi
runner_list() { "$bin" "${list_args[@]}" >/dev/null; }

found_find=$(find "$tree" -name '*.py' | wc -l)
found_grep=$(find "$tree" -name '*.py' -print0 | xargs -0 grep -l -m1 -E "$jax_re" | wc -l || true)
found_list=$("$bin" list --json --output-dir "$tree" 2>/dev/null |
    "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["scripts"]))' 2>/dev/null || echo "?")

for variant in plain_find find_grep runner_list; do
    for r in $(seq 1 "$discovery_runs"); do
        log "discovery: $variant run $r"
        t0=$(date +%s.%N)
        "$variant"
        t1=$(date +%s.%N)
        case $variant in
            plain_find) found=$found_find ;;
            find_grep) found=$found_grep ;;
            runner_list) found=$found_list ;;
        esac
        row discovery "$file_count" "$variant" "$(elapsed "$t0" "$t1")" "$found" "" ""
    done
done
rm -rf "$tree"

# ---------------------------------------------------------------- report
harness_end=$(date +%s.%N)
mkdir -p "$bench_dir/results"
stem=$bench_dir/results/$(date +%Y-%m-%d)-$(hostname -s)
if [[ -e $stem.md || -e $stem.json ]]; then stem=$stem-$(date +%H%M%S); fi

"$PY" - "$rows" "$notes" "$stem" <<PY
import json, platform, statistics, sys
rows_path, notes_path, stem = sys.argv[1:4]
meta = {
    "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
    "host": "$(hostname -s)",
    "cpu": "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')",
    "cores": $jobs,
    "memory_gib": round($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1048576, 1),
    "jax_runner": "$("$bin" --version)",
    "python": "$PY",
    "python_version": platform.python_version(),
    "warm_start_flag": "$warm_start",
    "build": "$build_ok",
    "runner_cold_options": " ".join("$cold_desc".split()),
    "runner_warm_options": " ".join("$warm_desc".split()),
    "loadavg_end": "$(cut -d' ' -f1-3 /proc/loadavg)",
    "harness_seconds": round($(elapsed "$harness_start" "$harness_end"), 1),
}
notes = [l.strip() for l in open(notes_path) if l.strip()]
rows = [l.rstrip("\n").split("\t") for l in open(rows_path) if l.strip()]

def num(text):
    """Counts as ints in the JSON; '?' (no metrics file) and '' stay as they are."""
    return int(text) if text.isdigit() else text


workload, overhead, discovery = [], [], {}
for section, size, variant, seconds, ok, total, note in rows:
    s = float(seconds)
    if section == "workload":
        workload.append(dict(n=int(size), variant=variant, seconds=s, ok=num(ok), total=num(total), note=note))
    elif section == "overhead":
        overhead.append(dict(scripts=int(size), variant=variant, seconds=s, ok=num(ok), total=num(total), note=note))
    else:
        d = discovery.setdefault(variant, dict(files=int(size), variant=variant, runs=[], found=num(ok)))
        d["runs"].append(s)

# Issue 34's targets (issue 14's were 0.40 and 0.12).
targets = {"jax-runner defaults, cold cache": 0.38, "jax-runner defaults, warm cache": 0.10}
# The sequential row (measured once a round, so written after the first rows) leads.
workload.sort(key=lambda w: (w["n"], w["variant"] != "sequential"))
base = {w["n"]: w["seconds"] for w in workload if w["variant"] == "sequential"}
for w in workload:
    exact = w["seconds"] / base[w["n"]] if base.get(w["n"]) else None
    w["ratio"] = round(exact, 3) if exact is not None else None
    w["target"] = targets.get(w["variant"])
    # Met or missed by the ratio itself, not by its rounding (0.1005 misses 0.10).
    w["target_met"] = exact <= w["target"] if exact is not None and w["target"] is not None else None

# What the window gave the parallel rows: "xargs -P J" over the sequential loop is about
# 1/J on J free cores (0.55 to 0.67 on this 2-core machine). Near 1 the window had about
# one core for the J jobs (another run beside the harness, a busy host): its parallel
# rows, the runner's among them, measure the window, not the runner.
for w in workload:
    if w["variant"].startswith("xargs -P ") and w["ratio"] is not None:
        jobs = int(w["variant"].split()[-1])
        if jobs > 1 and w["ratio"] > 0.85:
            notes.append(f"N={w['n']}: xargs -P {jobs} took {w['ratio']:.3f} of the sequential loop: "
                         f"this window gave the {jobs} jobs about one core, so its parallel rows "
                         "(the runner's among them) do not measure the runner; run it again on a quiet machine")

bare = next((o for o in overhead if o["variant"] == "bare loop"), None)
for o in overhead:
    o["per_script_ms"] = round(1000 * o["seconds"] / o["scripts"], 2)
    o["overhead_ms"] = round(o["per_script_ms"] - bare["per_script_ms"], 2) if bare and o is not bare else None

described = {
    "plain_find": ("find TREE -name '*.py'",
                   "walks the tree and matches names; reads no file"),
    "find_grep": ("find TREE -name '*.py' -print0 | xargs -0 grep -l -m1 -E '^(import|from) jax([. ]|\$)'",
                  "walks the tree, then reads every .py until its first jax import (what list does too)"),
    "runner_list": ("jax-runner list --json --output-dir TREE",
                    "walks the tree; takes jax/*.py, reads the head of every other .py for a jax import"),
}
disc = []
for d in discovery.values():
    d["median_seconds"] = statistics.median(d["runs"])
    d["command"], d["what"] = described[d["variant"]]
    disc.append(d)

out = []
out.append(f"# jax-runner benchmark, {meta['date']} on {meta['host']}\n")
out.append(f"{meta['cpu']}, {meta['cores']} cores, {meta['memory_gib']} GiB; {meta['jax_runner']}; "
           f"Python {meta['python_version']}; load average at the end {meta['loadavg_end']}; "
           f"harness wall time {meta['harness_seconds']} s.\n")
out.append(f"Runner options besides --output-dir/--python/-q: \"no cache, no warm start\" \`{meta['runner_cold_options']}\`; "
           f"cold and warm \`{meta['runner_warm_options']}\`, cold with CACHE empty (it fills it), warm with the CACHE the cold run filled.\n")
if notes:
    out.append("Notes:\n")
    out += [f"- {n}" for n in notes]
    out.append("")
out.append("## POMDP workload (rendered from templates/)\n")
out.append("| N | variant | wall (s) | ratio to sequential | target | scripts ok | note |")
out.append("| ---: | --- | ---: | ---: | --- | ---: | --- |")
for w in workload:
    ratio = f"{w['ratio']:.3f}" if w["ratio"] is not None else "n/a"
    tgt = ""
    if w["target"] is not None and w["ratio"] is not None:
        tgt = f"≤ {w['target']} " + ("(met)" if w["target_met"] else "(missed)")
    out.append(f"| {w['n']} | {w['variant']} | {w['seconds']:.2f} | {ratio} | {tgt} | {w['ok']}/{w['total']} | {w['note']} |")
out.append("")
out.append(f"## Runner overhead ({overhead[0]['scripts'] if overhead else 0} scripts that print(1), one at a time)\n")
out.append("| variant | wall (s) | per script (ms) | overhead per script (ms) | scripts ok | note |")
out.append("| --- | ---: | ---: | ---: | ---: | --- |")
for o in overhead:
    ov = f"{o['overhead_ms']:.2f}" if o["overhead_ms"] is not None else "—"
    out.append(f"| {o['variant']} | {o['seconds']:.2f} | {o['per_script_ms']:.2f} | {ov} | {o['ok']}/{o['total']} | {o['note']} |")
out.append("")
out.append(f"## Discovery ({disc[0]['files'] if disc else 0:,} files, warm page cache, median of {len(disc[0]['runs']) if disc else 0})\n")
out.append("| command | what it does | median (s) | runs (s) | found |")
out.append("| --- | --- | ---: | --- | ---: |")
for d in disc:
    runs = ", ".join(f"{r:.3f}" for r in d["runs"])
    cmd = d["command"].replace("|", "\\\\|")
    out.append(f"| \`{cmd}\` | {d['what']} | {d['median_seconds']:.3f} | {runs} | {d['found']} |")
report = "\n".join(out) + "\n"

open(stem + ".md", "w").write(report)
json.dump(dict(meta=meta, notes=notes, workload=workload, overhead=overhead, discovery=disc),
          open(stem + ".json", "w"), indent=2)
print(report)
PY
log "wrote $stem.md and $stem.json"
