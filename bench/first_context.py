"""first_context.py: a process's first MLIR context, in the process that imported jax and
in its forks, with and without the mhlo dialect's module imported before the fork.

    JAX_PLATFORMS=cpu PY bench/first_context.py

PY: an interpreter with jax (`jax-runner setup -q` prints the managed one). Prints, for
3 forks each way and for the parent, the first and second `make_ir_context()` in ms:
what a slot's zygote pays for its context (see `import_context_dialects` in
src/runner/zygote.py). No backend is started.
"""

import gc
import os
import time

import jax  # noqa: F401
import jax.numpy  # noqa: F401
import numpy  # noqa: F401
from jax._src.interpreters import mlir

gc.freeze()


def timed():
    t = time.perf_counter()
    mlir.make_ir_context()
    t1 = time.perf_counter()
    mlir.make_ir_context()
    t2 = time.perf_counter()
    return "first %.1f ms, second %.1f ms" % ((t1 - t) * 1e3, (t2 - t1) * 1e3)


def in_forks(label):
    for _ in range(3):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, timed().encode())
            os._exit(0)
        os.close(w)
        print("%s: %s" % (label, os.read(r, 200).decode()))
        os.close(r)
        os.waitpid(pid, 0)


def main():
    # Forks first: the parent's own context would import the module for them.
    in_forks("fork")
    t = time.perf_counter()
    from jax._src.lib.mlir import dialects

    dialects.mhlo  # noqa: B018  (the lazy module's import)
    print("the mhlo module's import: %.1f ms" % ((time.perf_counter() - t) * 1e3))
    in_forks("fork, the module imported before")
    print("parent (the module imported): %s" % timed())


main()
