"""contexts.py: what jax's MLIR contexts cost a script that lowers many computations.

One process imports jax and runs eager operations on `--rounds` new shapes (each
round lowers about four computations: `ones`, a multiply, an add, a sum), its
lowerings' contexts made one of three ways:

    fresh    jax's own: a new context for every lowering
    shared   one context per thread for all of them
    rot64    one per thread, a fresh one every 64 lowerings (what jax-runner's zygote
             does for warm scripts: `share_ir_contexts` in src/runner/zygote.py)

    python bench/contexts.py --mode rot64 --rounds 600

Prints one JSON line: the mode, the rounds, the wall seconds and the process's peak
resident memory in MiB (`ru_maxrss`). No compilation cache: every lowering compiles.
Run each mode in its own process; the figures in bench/README.md ("One MLIR context for
a script's lowerings") are from 600 rounds.
"""

import argparse
import json
import os
import resource
import threading
import time

args = argparse.ArgumentParser()
args.add_argument("--mode", choices=["fresh", "shared", "rot64"], required=True)
args.add_argument("--rounds", type=int, default=600)
opts = args.parse_args()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax.numpy as jnp  # noqa: E402
from jax._src.interpreters import mlir  # noqa: E402

make = mlir.make_ir_context
limit = {"fresh": 1, "shared": None, "rot64": 64}[opts.mode]
local = threading.local()


def context():
    if getattr(local, "context", None) is None or (limit and local.uses >= limit):
        local.context, local.uses = make(), 0
    local.uses += 1
    return local.context


mlir.make_ir_context = context
started = time.monotonic()
for i in range(opts.rounds):
    x = jnp.ones((i % 997 + 1,), dtype=jnp.float32)
    (x * 2.0 + 1.0).sum().block_until_ready()
print(json.dumps({
    "mode": opts.mode,
    "rounds": opts.rounds,
    "seconds": round(time.monotonic() - started, 2),
    "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
