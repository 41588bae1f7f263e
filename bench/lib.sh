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
