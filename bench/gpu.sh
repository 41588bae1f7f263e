#!/usr/bin/env bash
# gpu.sh: issue 18's check on a machine with an NVIDIA GPU (it cannot run without one).
#
# Usage:   bench/gpu.sh [BIN] [PYTHON]
#   BIN     a built jax-runner (default target/release/jax-runner; nothing is built here,
#           so build elsewhere and carry the binary)
#   PYTHON  an interpreter with jax for CUDA (default /opt/torch/.venv/bin/python3)
#
# What it measures (default options, so the default sandbox: the built-in layer where
# the machine has no bubblewrap; wall time with `date +%s.%N`, one run each):
#   1. doctor: `nvidia-smi -q` and `nvidia-smi --query-gpu=…` beside
#      `jax-runner doctor --device gpu --json` (driver, CUDA, GPUs, memory);
#   2. the sample tree `output/` with `--device gpu` (device_used "gpu", GPU memory),
#      sandboxed as by default and again with `--sandbox off` (the sandbox must not
#      cost the GPU: a GPU lost to it shows as fallbacks);
#   3. 32 scripts rendered from templates/ (`jax-runner render-workload`, as
#      bench/compare.sh does) with `--device gpu`: one script per GPU, then
#      `--gpu-share 4` (throughput and peak GPU memory);
#   4. the same 32 with `--device cpu` (GPU against CPU time per script);
#   5. a forced GPU failure: `CUDA_VISIBLE_DEVICES` naming a missing device, with
#      `--no-preflight`, so each script's GPU attempt fails and falls back to the CPU.
#
# Output: everything raw under bench/results/gpu-<UTC date>-<host>/ (each run's
# results folder with performance_metrics.json and every <id>_results.json, the
# doctor and nvidia-smi output, times.tsv), and summary.md there, also on stdout.
set -euo pipefail

bench_dir=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$bench_dir")
cd "$root"

bin=${1:-$root/target/release/jax-runner}
PY=${2:-/opt/torch/.venv/bin/python3}
count=${GPU_BENCH_COUNT:-32}
[[ -x $bin ]] || { echo "no jax-runner at $bin" >&2; exit 2; }
[[ -x $PY ]] || { echo "no python at $PY" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: not a GPU machine" >&2; exit 2; }

out=$root/bench/results/gpu-$(date -u +%Y-%m-%d-%H%M%S)-$(hostname -s)
mkdir -p "$out"
bench_tag=gpu
. "$bench_dir/lib.sh"
: >"$out/times.tsv"
unset JAX_PLATFORMS JAX_PLATFORM_NAME XLA_PYTHON_CLIENT_MEM_FRACTION

# run NAME OUTPUT_DIR ARGS…: one timed run into $out/NAME (its results folder); the
# exit code is kept, a failing run does not stop the others.
run() {
    local name=$1 dir=$2
    shift 2
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    "$bin" --output-dir "$dir" --results-dir "$out/$name" --python "$PY" \
        --compilation-cache "$out/cache-$name" -q "$@" \
        >"$out/$name.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    printf '%s\t%s\t%s\n' "$name" "$(elapsed "$t0" "$t1")" "$rc" >>"$out/times.tsv"
    log "$name: $(elapsed "$t0" "$t1") s, exit $rc"
}

log "1. doctor against nvidia-smi"
nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1 || true
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,memory.free,utilization.gpu \
    --format=csv >"$out/nvidia-smi.csv" 2>&1 || true
"$bin" doctor --device gpu --python "$PY" --json >"$out/doctor.json" 2>"$out/doctor.stderr" || true

log "2. the sample tree on the GPU"
run sample-gpu "$root/output" --device gpu
run sample-gpu-unsandboxed "$root/output" --device gpu --sandbox off

log "3-4. $count rendered scripts"
work=$(mktemp -d "${TMPDIR:-/tmp}/jax-runner-gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bin" render-workload --count "$count" --out "$work/tree" >/dev/null
run rendered-gpu-1 "$work/tree" --device gpu
run rendered-gpu-share4 "$work/tree" --device gpu --gpu-share 4
run rendered-cpu "$work/tree" --device cpu

log "5. a forced GPU failure"
CUDA_VISIBLE_DEVICES=999 run forced-failure "$work/tree" --device gpu --no-preflight --jobs 4

log "summary"
"$PY" - "$out" "$count" >"$out/summary.md" <<'PYEOF'
import json, os, statistics, sys
out, count = sys.argv[1], sys.argv[2]
times = {}
for line in open(os.path.join(out, "times.tsv")):
    name, seconds, rc = line.rstrip("\n").split("\t")
    times[name] = (float(seconds), int(rc))

def metrics(name):
    try:
        return json.load(open(os.path.join(out, name, "performance_metrics.json")))
    except OSError:
        return None

lines = [f"# GPU check ({os.path.basename(out)})", ""]
try:
    doctor = json.load(open(os.path.join(out, "doctor.json")))
    nvml = doctor.get("nvml", {})
    gpus = ", ".join(f"{g['index']}: {g['name']} {g['memory_total_mb']:.0f} MiB" for g in nvml.get("gpus", []))
    lines += [f"doctor: driver {nvml.get('driver_version')}, CUDA {nvml.get('cuda_driver_version')}, GPUs {gpus}",
              "nvidia-smi: see nvidia-smi.csv", ""]
except (OSError, ValueError) as e:
    lines += [f"doctor: no report ({e})", ""]
lines += ["| run | sandbox | wall s | exit | succeeded | jobs | device_used gpu | fallbacks | max peak GPU MiB | sum peak GPU MiB | scripts/s |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
for name, (seconds, rc) in times.items():
    m = metrics(name)
    if m is None:
        lines.append(f"| {name} | - | {seconds:.2f} | {rc} | - | - | - | - | - | - | - |")
        continue
    s = m["scripts"]
    gpu_peaks = [x["peak_gpu_memory_mb"] for x in s if x.get("peak_gpu_memory_mb") is not None]
    on_gpu = sum(1 for x in s if x.get("device_used") == "gpu")
    lines.append(
        f"| {name} | {'+'.join(m['run'].get('sandbox_layers') or ['off'])} "
        f"| {seconds:.2f} | {rc} | {m['totals']['succeeded']}/{m['totals']['total_scripts']} "
        f"| {m['run']['jobs']} | {on_gpu} | {m['totals']['fallbacks']} "
        f"| {max(gpu_peaks) if gpu_peaks else '-'} | {sum(gpu_peaks) if gpu_peaks else '-'} "
        f"| {len(s) / seconds:.2f} |")
gpu, cpu = metrics("rendered-gpu-1"), metrics("rendered-cpu")
if gpu and cpu:
    g = {x["id"]: x["execution_time_s"] for x in gpu["scripts"]}
    c = {x["id"]: x["execution_time_s"] for x in cpu["scripts"]}
    both = sorted(set(g) & set(c))
    if both:
        lines += ["", f"GPU against CPU per script ({len(both)} scripts, one per GPU against --device cpu): "
                  f"median GPU {statistics.median(g[i] for i in both):.2f} s, "
                  f"median CPU {statistics.median(c[i] for i in both):.2f} s, "
                  f"faster on the CPU: {sum(1 for i in both if c[i] < g[i])}"]
forced = metrics("forced-failure")
if forced:
    lines += ["", f"forced failure: {forced['totals']['fallbacks']} of {forced['totals']['total_scripts']} fell back to the CPU"]
print("\n".join(lines))
PYEOF
cat "$out/summary.md"
log "raw results in $out"
