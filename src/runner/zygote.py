# jax-runner's warm-start zygote. It imports jax and numpy once, without initialising
# any backend, then forks one process per script on request, so scripts skip the
# interpreter start and the ~0.7 s `import jax`.
#
# Protocol on the socket at fd 3: the runner sends one JSON line with three file
# descriptors attached (stdin, stdout, stderr of the script); the zygote answers one
# JSON line: {"pid": N} or {"error": "..."}. Each script runs in a grandchild, so it is
# reparented to the runner (a child subreaper), which then waits for it, times it out
# and kills its group exactly as for a cold start. Before anything else each child
# writes its attempt's token into the slot the runner left in the zygote's
# environment (see claim_token), so what the script leaves is found as a cold one's.
#
# With --sandboxed the zygote runs under bubblewrap with capabilities in its own user
# namespace only (or, for a root runner, as root in namespaces of its own), and a
# request carries "view": true, "plan" (the script's confinement, its view included)
# and a fourth descriptor, the runner's go. With --confined it runs on the host's view
# and each request's plan holds the script by Landlock's rules, the seccomp filter
# and, as root, the sandbox user. Either way the plan is applied by the jax-runner
# library (--library), never by this program: see the sandbox half below.
#
# A request {"slot": true} with one descriptor (a socket) forks a worker slot's own
# zygote, which serves that slot on the socket, forking each script as its own child
# and answering its end too (see the slot part, zygote_slot.py).
import ctypes
import gc
import json
import os
import socket
import sys

import atexit
import logging

SANDBOXED = "--sandboxed" in sys.argv
CONFINED = SANDBOXED or "--confined" in sys.argv


def load_library():
    """jax-runner's library (--library=PATH; the runner names it in every mode), with
    its keeper of the interpreter's frame-stack chunks set as the arena allocator
    before anything else is imported: the zygote's import and every script it forks
    then reuse a freed 16 KiB chunk instead of mapping and unmapping one at each call
    on a chunk's edge (crates/confine, arena.rs). None without the library, which only
    an unconfined zygote may run without: it confines every script, so a confined
    zygote fails to start, named or loaded, rather than refuse each script."""
    path = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--library=")), None)
    try:
        if path is None:
            raise OSError("failed to load jax-runner's library: no --library was named")
        lib = ctypes.CDLL(path)
    except OSError:
        if CONFINED:
            raise
        return None  # unsandboxed: no keeper, every result the same
    lib.jax_runner_keep_frame_chunks()
    return lib


LIBRARY = load_library()

# The exit handlers the preload registers (jax's, jaxlib's, typing's) free what those
# modules hold in memory. They are held back here, not registered: in a forked script
# every page they touch is copied first, 4 ms of a trivial script's 12 (measured), for
# a process that ends with os._exit. See run_preload_exit_handlers.
PRELOAD_EXIT = []
_register = atexit.register


def _hold_exit_handler(func, *args, **kwargs):
    PRELOAD_EXIT.append((func, args, kwargs))
    return func


# --lean: the zygote of a run none of whose scripts names jax (the runner starts it
# once discovery has read them): no preload, so each fork and exit copies and frees a
# 10 MiB image, not jax's 150 MiB. A script that imports jax anyway imports it itself,
# as a cold start would.
LEAN = "--lean" in sys.argv
import resource  # restore_baseline's, here once: a child would load it every time
# What each child imports that jax's import chain would have brought: runpy, and the
# pkgutil (with typing and functools' dispatch) that run_path imports on its first call,
# searching the script's folder first, 5 ms a script in a lean zygote (measured).
import runpy
import pkgutil  # noqa: F401

# A process's first compile() sets up the compiler's state (1 ms, measured; 0.2 ms in a
# fork of a process that compiled before): done here, once, not in each script.
compile("pass\n", "<jax-runner zygote>", "exec")
import faulthandler  # noqa: F401  (the telemetry shim's, in each script)


# The MLIR context each thread's lowerings share (see share_ir_contexts): a
# threading.local holding `context` and `lowerings`, None where jax has no such hook.
IR_SHARED = None
IR_MAKE = None
# How many lowerings share one context before the next gets a fresh one.
IR_SHARE_LIMIT = 64
# What had the main thread's context made ahead: "announcement" (the runner's word while
# the zygote imported), "slot" (a slot's zygote, as it began) or "request" (its first
# request, for a zygote that missed the word); None: nothing. tests/warm.rs reads it.
IR_MADE_BY = None


def share_ir_contexts():
    """Has each thread's lowerings share one MLIR context, IR_SHARE_LIMIT of them, then
    the next gets a fresh one. jax makes a context for every computation it lowers,
    with every dialect it uses loaded: 2.5 to 3.5 ms and 1.1 to 1.5 MiB each, 32 to 36
    times in a generated POMDP script, and each stays alive as long as jax keeps the
    lowering (its caches keep most). Shared, the dialects are loaded once and each
    type and attribute is made once: 8 generated scripts forked on a filled cache took
    1.78 s against 1.98 s with a fresh one per lowering made ahead (medians of 6 in
    turn), and 600 rounds of eager operations on new shapes peaked at 0.8 GiB against
    3.2 GiB (bench/contexts.py). What a lowering produces does not depend on the
    context's history: the compilation cache's keys are the same, entry for entry
    (tests/exact.rs fills the cache cold and runs warm on it with no miss). A fresh
    context after IR_SHARE_LIMIT bounds what one gathers from lowerings jax has since
    dropped. One per thread: two threads lowering at once never build into the same
    context. A jax without this function lowers as it does."""
    global IR_MAKE, IR_SHARED
    try:
        import threading

        from jax._src.interpreters import mlir

        make = mlir.make_ir_context
    except Exception:  # another jax, another layout: nothing to share
        return
    shared = threading.local()

    def shared_context():
        context = getattr(shared, "context", None)
        if context is None or shared.lowerings >= IR_SHARE_LIMIT:
            context = shared.context = make()
            shared.lowerings = 0
        shared.lowerings += 1
        return context

    mlir.make_ir_context = shared_context
    IR_MAKE, IR_SHARED = make, shared


def make_ir_context_ahead(by):
    """Makes the main thread's shared context, once, before the first fork of a run
    whose scripts use jax: every forked script's lowerings then start in it (a fork
    keeps the forking thread's thread-local values). A process's first context takes
    13 ms (12.8 to 13.2, measured: jax imports the MLIR mhlo dialect's module, 742 KB of
    bytecode, for it), the next ones 2.8 ms; preload imports that module (see
    import_context_dialects). Asked for by the runner while the zygote still imports
    (`by` "announcement"), so it is made as soon as the zygote is ready;
    where the run's scripts go through slots, each slot's zygote makes its own as it
    begins ("slot", see become_slot), on a core of its own while the runner settles it
    in its cgroup, and the run's zygote forks the slots at once instead of making
    one first; a request says it again ("request"), for a zygote that had no word.
    Tried once, even if making it failed. No backend is touched, and no thread is
    started: the contexts' shared thread pool starts its threads at its first task,
    in the script."""
    global IR_MADE_BY
    if IR_SHARED is None or IR_MADE_BY is not None:
        return
    IR_MADE_BY = by
    try:
        IR_SHARED.context = IR_MAKE()
        IR_SHARED.lowerings = 0
    except Exception:
        pass


def warm_first_lowering():
    """Does once, here, what every forked script's first lowering did for itself, 5 ms
    a script (4.0 to 4.8 ms the import, 1.0 to 1.2 ms the patterns: medians of 30
    forks of a zygote, three times). jax imports the MLIR builtin dialect's Python
    module when it lowers its first computation, and compiles the patterns that tell
    a user's frames from its own and the standard library's when it first records
    where an operation came from. Those patterns stay cached until a module registers
    another path, which clears them: a script that does gets patterns of its own.
    Neither starts a thread or touches a backend; a jax without them is left as it
    is."""
    try:
        import jaxlib.mlir.dialects.builtin  # noqa: F401
        from jax._src import source_info_util

        source_info_util._exclude_path_regex()
        source_info_util._include_path_regex()
    except Exception:  # another jax, another layout: each script does it itself
        pass


def import_context_dialects():
    """Imports the MLIR mhlo dialect's module, which jax loads lazily for the first
    MLIR context a process makes (742 KB of bytecode and its extension, 6.7 ms here).
    Each slot's zygote makes its context in a fresh fork, where that import's writes
    each copy a page first: the first context took 16 to 21 ms in a fork against 13 in
    the process that imported jax, and 4.6 to 9 ms in a fork once that process had
    imported this module (3 forks each, measured). Both slots' zygotes make theirs at
    once on the run's critical path, beside the runner, so the import is done once
    here, while the zygote imports jax anyway. A jax without that lazy module is left
    as it is."""
    try:
        from jax._src.lib.mlir import dialects

        dialects.mhlo  # noqa: B018  (the lazy module's import is the point)
    except Exception:  # another jax, another layout: the first context imports it
        pass


# The modules of the preload, for the telemetry shim's question at a script's end
# (did the script take jax up?): made once by preload, not in every child (0.9 ms there).
PRELOADED = frozenset()


def preload():
    """Imports jax, jax.numpy and numpy once, for every script forked after (not for
    --lean), with their exit handlers held back, then does what each script's
    lowerings would otherwise do first. Called by serve, after a sandboxed zygote
    has forked its test child, which then builds its namespaces on another core
    while this one imports."""
    global PRELOADED, jax  # the children's code (zygote_child.py) reads `jax`
    if not LEAN:
        atexit.register = _hold_exit_handler
        try:
            import jax  # noqa: F401  (the point: imported once, here)
            import jax.numpy  # noqa: F401
            import numpy  # noqa: F401
        finally:
            atexit.register = _register
        share_ir_contexts()
        warm_first_lowering()
        import_context_dialects()
    PRELOADED = frozenset(sys.modules)


def freeze_heap():
    """Moves every object the zygote holds out of the garbage collector's sight
    (gc.freeze), before each fork. A forked script's first full collection would
    otherwise walk jax's and numpy's objects and write to each one's header, copying
    every page they lie on: 6,400 pages and 47 ms for one gc.collect() in a child of
    a zygote that imported jax, against 500 pages and 4 ms frozen (measured). The
    script's own objects are collected as ever."""
    gc.freeze()


COLLAPSED = []


def collapse_into_huge_pages():
    """Asks the kernel (6.1 and later; elsewhere a no-op) to back the zygote's large
    anonymous regions, jax's and numpy's heap, with 2 MiB pages. A fork copies one
    entry for each such page instead of 512, and an exit frees one: every script's
    fork and exit cost a quarter less (4.2 to 3.2 ms, measured with jax imported).
    A child's write still copies only the 4 KiB it touches. Asked for by the runner
    (its word while the zygote imported, or its first request) for a run of many
    scripts, once: the move itself takes 20 to 130 ms before the first fork, more
    than a small run's forks would save."""
    if COLLAPSED:
        return
    COLLAPSED.append(True)
    huge = 1 << 21
    madvise = LIBC.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    try:
        with open("/proc/self/maps") as fh:
            maps = fh.read().splitlines()
    except OSError:
        return
    for line in maps:
        parts = line.split()
        if len(parts) < 5 or parts[1][:2] != "rw" or parts[1][3] != "p":
            continue
        if len(parts) > 5 and parts[5] != "[heap]":
            continue  # a file's pages, or the stack
        start, end = (int(x, 16) for x in parts[0].split("-"))
        lo, hi = (start + huge - 1) & ~(huge - 1), end & ~(huge - 1)
        if hi > lo:
            madvise(lo, hi - lo, 25)  # MADV_COLLAPSE; refused where unsupported

CONTROL = socket.socket(fileno=3)
MAX_FD = os.sysconf("SC_OPEN_MAX")
TRUTHY = ("1", "true", "yes", "on")
# The seccomp programs every script installs, in order (handed to the library).
SECCOMP = []
for _arg in sys.argv:
    if _arg.startswith("--seccomp-fd="):
        _fd = int(_arg.split("=", 1)[1])
        with os.fdopen(_fd, "rb") as _fh:
            SECCOMP.append(_fh.read())
LIBC = ctypes.CDLL(None, use_errno=True)


def serve():
    # The sandbox's test child first: it builds a script's namespaces (8 ms, measured)
    # while the import below runs, not after it with a core idle.
    probe = start_probe() if SANDBOXED else None
    # The collector stays off while jax imports: its ~210 collections there (two full
    # ones, 11 to 18 ms each; 35 to 42 ms in all) free almost nothing, and they lie on
    # the run's critical path, before any script can start: the import took 41 ms less
    # without them (mean of 12 alternating starts, faster in 10; 30 of 30 for a bare
    # import). What they would have freed, 980 objects (functions, tuples, cells, the
    # leftovers of made classes: no file, nothing with a finaliser), is frozen instead.
    gc.disable()
    preload()
    # No gc.collect() first: walking the import's 100,000 objects took 33 ms before the
    # first fork, on one core while the other idled, to free those 980. The heap is
    # frozen as a cold script's is after `import jax`, and frozen before the collector
    # is back on: frozen objects are no generation's, so the import's objects (all
    # young, none collected) cost no collection at all.
    freeze_heap()
    gc.enable()
    ready = {"ready": True, "pid": os.getpid()}
    if probe is not None:
        ready["sandbox"] = finish_probe(probe)
    CONTROL.sendall(json.dumps(ready).encode() + b"\n")
    serve_requests()


def serve_requests():
    """Answers requests on CONTROL until the runner closes it."""
    buf = b""
    # A long request can arrive in more than one read; its descriptors come with the
    # first, so they are kept until the line they belong to is complete.
    pending_fds = []
    while True:
        # A slot's middle child ends a few milliseconds after it forked the slot's
        # zygote: it is reaped then, not left a zombie until the next request.
        CONTROL.settimeout(0.02 if MIDDLES else None)
        try:
            data, fds, _flags, _addr = socket.recv_fds(CONTROL, 65536, 8)
        except socket.timeout:  # TimeoutError from Python 3.10 on
            reap_middles()
            continue
        if not data:
            return  # the runner is gone
        buf += data
        pending_fds.extend(fds)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            if req.get("huge_pages"):
                collapse_into_huge_pages()
            # A slot's zygote makes its own (see become_slot).
            if req.get("ir_context") and not req.get("slot"):
                make_ir_context_ahead("announcement" if req.get("prepare") else "request")
            if req.get("prepare"):
                continue  # the runner's word while it imported: no descriptors, no answer
            # A slot's socket; the go's pipe besides the stdio of a script in a view,
            # but for a slot's script, which needs no go.
            want = 3
            if req.get("slot"):
                want = 1 + int(req.get("cgroup_tasks") or 0)  # its socket, its tasks files
            elif req.get("view") and not req.get("resident"):
                want = 4
            my_fds, pending_fds = pending_fds[:want], pending_fds[want:]
            mismatch = bool(req.get("view")) != SANDBOXED
            if req.get("slot"):
                reply = start_slot(req, my_fds)
            elif mismatch or bool(req.get("confined")) != CONFINED:
                for fd in my_fds:
                    os.close(fd)
                reply = {"error": "the request does not match the zygote's sandbox"}
            elif req.get("resident"):
                reply = run_resident(req, my_fds)
            elif req.get("view"):
                reply = spawn_sandboxed(req, my_fds)
            else:
                reply = spawn(req, my_fds)
            if reply is not None:  # None: spawn answered before the script's go
                CONTROL.sendall(json.dumps(reply).encode() + b"\n")


def spawn(req, fds):
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return {"error": "expected 3 file descriptors, got %d" % len(fds)}
    r, w = os.pipe()
    # The go, once the runner has the script's PID (see run_resident).
    go_r, go_w = os.pipe()
    freeze_heap()
    try:
        child = os.fork()
        if child == 0:
            os.close(r)
            os.close(go_w)
            try:
                claim_token(req["env"]["JAX_RUNNER_TOKEN"])
                restore_baseline(req["baseline"])  # the script's process inherits it
            except BaseException as exc:
                os.write(w, ("!%s" % (exc,)).encode())
                os._exit(70)
            grandchild = os.fork()
            if grandchild == 0:
                os.close(w)
                if os.read(go_r, 1) != b"g":
                    os._exit(70)  # the zygote died before the runner had the PID
                os.close(go_r)
                run_script(req, fds)
            os.write(w, b"%d" % grandchild)
            os._exit(0)
        os.close(w)
        os.close(go_r)
        go_r = None
        for fd in fds:
            os.close(fd)
        got = os.read(r, 4096)
        os.waitpid(child, 0)  # the grandchild is now the runner's
        if got.startswith(b"!"):
            return {"error": got[1:].decode("utf-8", "replace")}
        pid = int(got or b"0")
        if not pid:
            return {"error": "fork failed"}
        CONTROL.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        give_go(go_w)
        go_w = None
        return None  # answered
    except OSError as exc:
        return {"error": "fork failed: %s" % exc}
    finally:
        for fd in (r, go_w, go_r):
            if fd is not None:
                os.close(fd)
