#!/usr/bin/env bash
# Runs N trivial scripts (`print(1)`) through jax-runner and prints the wall time and
# the runner's own peak RSS, to check that the runner stays flat as N grows. Default
# options but `--device cpu` and the managed interpreter named; what it prints is also
# written to bench/results/<date>-<host>-many-<time>.txt.
# Usage: bench/many_trivial.sh N [jax-runner binary] [extra jax-runner options…]
#   e.g. bench/many_trivial.sh 200 target/release/jax-runner --jobs 1 --sandbox on
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
n=${1:-1000}
bin=${2:-$root/target/release/jax-runner}
shift $(( $# > 2 ? 2 : $# ))
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/trivial/jax"
for i in $(seq 1 "$n"); do echo 'print(1)' > "$tree/trivial/jax/s$i.py"; done
python=$("$bin" setup -q)
exec > >(tee "$root/bench/results/$(stamp many).txt")
echo "$(provenance "$root"); options: --device cpu $*"
start=$(date +%s.%N)
"$bin" --output-dir "$tree" --python "$python" --device cpu -q "$@" || true
end=$(date +%s.%N)
python3 - "$tree/execution_results/jax/performance_metrics.json" "$start" "$end" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"scripts={t['total_scripts']} succeeded={t['succeeded']} wall={wall:.1f}s "
      f"per_script={1000*wall/t['total_scripts']:.1f}ms", end=" ")
PY
echo "runner peak $(peaks "$tree/execution_results/jax")"
