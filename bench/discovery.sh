#!/usr/bin/env bash
# Times discovery (`jax-runner list --json --output-dir TREE`) on a generated tree of
# 100,000 files with odd names and symlinks, for one or more binaries in alternating
# rounds, and prints a Markdown table of the medians (progress on stderr).
# Usage: bench/discovery.sh [BINARY…]     (default: target/release/jax-runner)
#   BENCH_ROUNDS=N  rounds per binary (default 5)
#   e.g. bench/discovery.sh /tmp/before/jax-runner target/release/jax-runner
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(( $# )) || set -- "$root/target/release/jax-runner"
rounds=${BENCH_ROUNDS:-5}
bench_tag=discovery
. "$root/bench/lib.sh"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-discovery.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
tree=$scratch/tree

log "generating a 100,000-file tree in $tree"
python3 - "$tree" <<'PY'
# 1,000 folders x 100 files = 100,000 regular files, the same every time (the tree of
# bench/compare.sh's discovery rows, plus odd names and symlinks):
#   every folder: sim_NNNN.py (imports jax when i % 4 < 2, else numpy),
#                 analysis_NNNN.py (numpy only), the rest data files (.json .txt .log .csv)
#   every 10th folder: jax/ with 4 scripts (counted in that folder's 100)
#   every 50th folder: 3 data files and, when it has jax/, 2 of its scripts named oddly
#                 (a space, Cyrillic, a byte that is not UTF-8)
#   links: a loop back to the top, a second name for one folder, one out of the tree
import os, sys
top = os.fsencode(sys.argv[1])
exts = (".json", ".txt", ".log", ".csv")
odd_data = ["data with space.json", "данные.txt", b"bad\xffname.csv"]
odd_py = ["jax/pomdp solver.py", b"jax/bad\xffname.py"]
for i in range(1000):
    d = os.path.join(top, b"run_%04d" % i)
    os.makedirs(d)
    files = {}
    if i % 10 == 0:
        os.makedirs(os.path.join(d, b"jax"))
        for k in range(4):
            name = odd_py[k] if i % 50 == 0 and k < 2 else f"jax/model_{i:04d}_{k}.py"
            files[name] = "import jax.numpy as jnp\nprint(jnp.ones(3))\n"
    sim = "import jax\n" if i % 4 == 0 else "from jax import lax\n" if i % 4 == 1 else "import numpy as np\n"
    files[f"sim_{i:04d}.py"] = "# generated\n" + sim + "print('sim')\n"
    files[f"analysis_{i:04d}.py"] = "import numpy as np\nprint(np.zeros(2))\n"
    if i % 50 == 0:
        for name in odd_data:
            files[name] = "{}\n"
    k = 0
    while len(files) < 100:
        files[f"data_{k:03d}{exts[k % 4]}"] = f'{{"folder": {i}, "item": {k}}}\n'
        k += 1
    for name, text in files.items():
        name = name if isinstance(name, bytes) else name.encode()
        with open(os.path.join(d, name), "w") as fh:
            fh.write(text)
os.symlink(b"..", os.path.join(top, b"run_0001", b"loop"))
os.symlink(b"../run_0020", os.path.join(top, b"run_0002", b"alias"))
os.symlink(b"/usr", os.path.join(top, b"run_0003", b"out"))
PY
files=$(find "$tree" -type f | wc -l)
log "$files regular files; $(find "$tree" -name '*.py' | wc -l) .py files"

# One run: seconds on stdout, the number of scripts found in $scratch/found.
time_list() {
    local t0 t1
    t0=$(date +%s.%N)
    "$1" list --json --output-dir "$tree" >"$scratch/out.json" 2>/dev/null ||
        { log "$1 list failed: exit $?"; exit 1; }
    t1=$(date +%s.%N)
    python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["scripts"]))' \
        "$scratch/out.json" >"$scratch/found"
    echo "$t1 - $t0" | bc -l
}

declare -A times found
for bin in "$@"; do time_list "$bin" >/dev/null; done # warm the page cache
for r in $(seq 1 "$rounds"); do
    for bin in "$@"; do
        s=$(time_list "$bin")
        times[$bin]+="$s "
        found[$bin]=$(cat "$scratch/found")
        log "round $r: $bin ${s}s"
    done
done

echo "| binary | scripts found | median of $rounds | runs (s) |"
echo "| --- | ---: | ---: | --- |"
for bin in "$@"; do
    # shellcheck disable=SC2086
    median=$(printf '%s\n' ${times[$bin]} | sort -g | awk '{a[NR]=$1} END {print (a[int((NR+1)/2)] + a[int(NR/2)+1]) / 2}')
    runs=$(printf '%.3f ' ${times[$bin]})
    printf '| `%s` | %s | %.3f s | %s|\n' "$bin" "${found[$bin]}" "$median" "$runs"
done
