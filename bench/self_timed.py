"""self_timed.py: a jax script that times its own work (bench/self_timed.sh copies it).

A pure-Python loop of 3 million steps, 3,000 calls of a jitted function, 300 eager
operations, each timed with the process's CPU clock, written to
GNN_OUTPUT_DIR/t.json: the same work under the runner and under bench/fork_floor.py,
so a difference is the interpreter's or jax's speed in each, not the runner's time
around the script.
"""
import os, time, json
import jax  # noqa: F401  (what makes it a jax script)
import jax.numpy as jnp

def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s

t0 = time.process_time(); work(3_000_000); py = time.process_time() - t0
x = jnp.arange(1000.0)
f = jax.jit(lambda v: (v * 2.0).sum())
f(x).block_until_ready()
t0 = time.process_time()
for _ in range(3000):
    f(x).block_until_ready()
jx = time.process_time() - t0
t0 = time.process_time()
for _ in range(300):
    (x * 2.0 + 1.0).sum().block_until_ready()
eager = time.process_time() - t0
out = os.environ.get("GNN_OUTPUT_DIR", ".")
os.makedirs(out, exist_ok=True)
json.dump({"py": py, "jit_calls": jx, "eager": eager}, open(os.path.join(out, "t.json"), "w"))
