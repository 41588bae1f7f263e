"""fork_floor.py: the least time a warm start can take over a set of jax scripts.

One process imports jax once (its garbage collector off until the heap is frozen), has
each thread's lowerings share one MLIR context (64 to a context, the main thread's made
ahead for more scripts than jobs), freezes its heap as the import leaves it and, before
anything else, sets jax-runner's keeper of frame-stack chunks as the interpreter's arena
allocator (the library the runner writes into its cache folder), as jax-runner's zygote
does, then forks every script (`--jobs` at a time) and runs it with
runpy in its own folder, its output to /dev/null. A script's exit runs its own handlers
and jax's, less the freeing that a process about to end does not need (as the zygote's
children do). Nothing else: no sandbox, no telemetry, no memory sampling, no result
files, no reports. `bench/compare.sh` runs it in each round beside the runner's
defaults, on the compilation cache that run filled, so the gap between the two rows is
what the runner itself costs.

    python bench/fork_floor.py --jobs 2 --cache DIR --out DIR [--keeper LIB|auto|off] script.py ...

--keeper: the library (auto, the default: the newest `libjax_runner_confine-*.so` in
jax-runner's cache folder that has the keeper; off: none, the interpreter's own
allocator).

Prints one JSON line: {"seconds": wall from start to the last exit, "ok": scripts
that exited 0, "total": scripts, "keeper": the library set, or null}.
"""

import argparse
import atexit
import ctypes
import gc
import glob
import json
import os
import runpy
import sys
import threading
import time

started = time.monotonic()
args = argparse.ArgumentParser()
args.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
args.add_argument("--cache", required=True, help="the compilation cache the scripts use")
args.add_argument("--out", required=True, help="where each script's GNN_OUTPUT_DIR goes")
args.add_argument("--platform", default="cpu")
args.add_argument("--keeper", default="auto", help="the library with the keeper, auto or off")
args.add_argument("scripts", nargs="+")
opts = args.parse_args()


def set_keeper(choice):
    """Sets the keeper of frame-stack chunks from the library `choice` names (see the
    module's docstring); returns its path, or None."""
    if choice == "off":
        return None
    if choice != "auto":
        ctypes.CDLL(choice).jax_runner_keep_frame_chunks()
        return choice
    cache = os.environ.get("JAX_RUNNER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "jax-runner")
    found = glob.glob(os.path.join(cache, "libjax_runner_confine-*.so"))
    for path in sorted(found, key=os.path.getmtime, reverse=True):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "jax_runner_keep_frame_chunks"):
            lib.jax_runner_keep_frame_chunks()
            return path
    return None


keeper = set_keeper(opts.keeper)

# The variables jax reads at import, set as the runner sets them for a script.
os.environ.update(
    JAX_PLATFORMS=opts.platform,
    JAX_COMPILATION_CACHE_DIR=opts.cache,
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
    JAX_TRACEBACK_FILTERING="off",
)

# jax's exit handlers are held back at import and run in each child (see child_exit).
held = []
register = atexit.register
# The collector off while jax imports, frozen before it is back on: as the zygote does.
gc.disable()
atexit.register = lambda func, *a, **k: (held.append((func, a, k)), func)[1]
import jax  # noqa: E402,F401
import jax.numpy  # noqa: E402,F401
import numpy  # noqa: E402,F401

atexit.register = register

from jax._src import api, distributed  # noqa: E402
from jax._src.interpreters import mlir  # noqa: E402

# One context per thread for 64 lowerings, the main thread's made ahead: what the
# zygote's share_ir_contexts and make_ir_context_ahead do.
make_context = mlir.make_ir_context
shared = threading.local()


def shared_context():
    if getattr(shared, "context", None) is None or shared.lowerings >= 64:
        shared.context, shared.lowerings = make_context(), 0
    shared.lowerings += 1
    return shared.context


mlir.make_ir_context = shared_context
if len(opts.scripts) > opts.jobs:
    shared.context, shared.lowerings = make_context(), 0
gc.freeze()
gc.enable()


def child_exit():
    """The script's own exit handlers, then jax's, less clean_up's freeing: its wait
    for effects in flight and the distributed client's shutdown stay."""
    atexit._run_exitfuncs()
    for func, a, k in reversed(held):
        if func is api.clean_up:
            api.effects_barrier()
            distributed.shutdown()
        else:
            func(*a, **k)


def run(script):
    name = os.path.splitext(os.path.basename(script))[0]
    out = os.path.join(opts.out, name)
    os.makedirs(out, exist_ok=True)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.environ["GNN_OUTPUT_DIR"] = out
    os.chdir(os.path.dirname(os.path.abspath(script)))
    sys.argv = [script]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code = 1
    try:
        child_exit()
    except BaseException:
        code = code or 1
    sys.stdout.flush()
    os._exit(code)


running = set()
ok = 0


def reap():
    """Waits for one script; counts it if it exited 0."""
    global ok
    pid, status = os.wait()
    running.discard(pid)
    ok += os.waitstatus_to_exitcode(status) == 0


for script in opts.scripts:
    while len(running) >= opts.jobs:
        reap()
    pid = os.fork()
    if pid == 0:
        run(script)
    running.add(pid)
while running:
    reap()
print(json.dumps({"seconds": round(time.monotonic() - started, 3), "ok": ok,
                  "total": len(opts.scripts), "keeper": keeper}))
