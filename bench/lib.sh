# lib.sh: the helpers every benchmark script shares; sourced (`. bench/lib.sh`), never
# run. A script sets `bench_tag` before its first `log`.

# log MESSAGE…: one progress line on stderr, with the script's tag and the time.
log() { printf '[%s %s] %s\n' "${bench_tag:-bench}" "$(date +%H:%M:%S)" "$*" >&2; }

# elapsed T0 T1: the seconds between two `date +%s.%N` stamps, to the millisecond.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# median X…: the middle value (the mean of the two middle ones for an even count).
median() {
    printf '%s\n' "$@" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# copy_tree FROM TO: a copy of the tree FROM at TO (replacing TO), every file that names
# FROM's absolute path rewritten to name TO's. GNN's step 11 writes its render folder's
# path into its manifests, and a copy that still names the original is not a tree of
# its own (GNN's step 12 finds nothing in it).
copy_tree() {
    local from=$1 to=$2 pattern replacement
    rm -rf "$to"
    cp -a "$from" "$to"
    pattern=$(printf '%s' "$from" | sed 's/[][\\.*^$|]/\\&/g')
    replacement=$(printf '%s' "$to" | sed 's/[\\&|]/\\&/g')
    grep -rlF -- "$from" "$to" | while IFS= read -r f; do
        sed -i "s|$pattern|$replacement|g" "$f"
    done || true
}

# stamp TAG: the name a benchmark's results take, <date>-<host>-TAG-<time> (UTC).
stamp() { printf '%s-%s-%s-%s' "$(date -u +%Y-%m-%d)" "$(hostname -s)" "$1" "$(date -u +%H%M%S)"; }

# provenance ROOT: one line saying when, where and on which checkout a benchmark ran.
provenance() {
    echo "at $(date -u +%FT%TZ) on $(hostname -s), $(nproc) CPUs; checkout $(git -C "$1" describe --always --dirty 2>/dev/null || echo unknown)"
}

# peaks RESULTS_DIR: the runner's own peak memory as a run's results folder gives it,
# "X MiB, Y MiB with its reports": the metrics' figure (up to the end of the scripts)
# and the execution log's last line (once every report is written).
peaks() {
    python3 - "$1" <<'PY'
import json, re, sys
m = json.load(open(sys.argv[1] + "/performance_metrics.json"))
last = open(sys.argv[1] + "/execution_log.txt").read().splitlines()[-1]
whole = re.search(r"reports included: ([0-9.]+) MiB", last)
print("%.1f MiB, %s MiB with its reports" % (m["run"]["runner_peak_rss_mb"], whole.group(1) if whole else "?"))
PY
}
