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
# library (--confine-lib), never by this program: see the sandbox half below.
#
# A request {"slot": true} with one descriptor (a socket) forks a worker slot's own
# zygote, which serves that slot on the socket, forking each script as its own child
# and answering its end too (see the slot part, zygote_slot.py).
import ctypes
import json
import os
import socket
import sys

import atexit
import logging

# The exit handlers the preload registers (jax's, jaxlib's, typing's) free what those
# modules hold in memory. They are held back here, not registered: in a forked script
# every page they touch is copied first, 4 ms of a trivial script's 12 (measured), for
# a process that ends with os._exit. See run_preload_exit_handlers.
PRELOAD_EXIT = []
_register = atexit.register


def _hold_exit_handler(func, *args, **kwargs):
    PRELOAD_EXIT.append((func, args, kwargs))
    return func


atexit.register = _hold_exit_handler
try:
    import jax  # noqa: F401  (the point: imported once, here)
    import jax.numpy  # noqa: F401
    import numpy  # noqa: F401
finally:
    atexit.register = _register
import resource  # restore_baseline's, here once: a child would load it every time

# The modules of the preload, for the telemetry shim's question at a script's end
# (did the script take jax up?): made once here, not in every child (0.9 ms there).
PRELOADED = frozenset(sys.modules)


def collapse_into_huge_pages():
    """Asks the kernel (6.1 and later; elsewhere a no-op) to back the zygote's large
    anonymous regions, jax's and numpy's heap, with 2 MiB pages. A fork copies one
    entry for each such page instead of 512, and an exit frees one: every script's
    fork and exit cost a quarter less (4.2 to 3.2 ms, measured with jax imported).
    A child's write still copies only the 4 KiB it touches."""
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
SANDBOXED = "--sandboxed" in sys.argv
CONFINED = SANDBOXED or "--confined" in sys.argv
# The seccomp programs every script installs, in order (handed to the library).
SECCOMP = []
for _arg in sys.argv:
    if _arg.startswith("--seccomp-fd="):
        _fd = int(_arg.split("=", 1)[1])
        with os.fdopen(_fd, "rb") as _fh:
            SECCOMP.append(_fh.read())
LIBC = ctypes.CDLL(None, use_errno=True)


def apply_jax_config(env):
    """jax read JAX_* variables when the zygote imported it; a script's own values
    must be applied again, or settings such as JAX_PLATFORMS and JAX_ENABLE_X64
    silently do not take effect."""
    holders = jax.config._value_holders
    for key, raw in env.items():
        name = key.lower()
        if not key.startswith("JAX_") or name not in holders:
            continue
        current = holders[name].value
        if isinstance(current, bool):
            value = raw.strip().lower() in TRUTHY
        elif isinstance(current, int):
            try:
                value = int(raw)
            except ValueError:
                continue
        elif isinstance(current, float):
            try:
                value = float(raw)
            except ValueError:
                continue
        else:
            value = raw
        try:
            jax.config.update(name, value)
        except Exception as exc:  # same as an unparseable variable at import
            sys.stderr.write("jax-runner warm start: ignored %s=%r: %s\n" % (key, raw, exc))


TOKEN_ENTRY = b"JAX_RUNNER_TOKEN="


def claim_token(token):
    """First thing in a script's forked child: write the attempt's token into this
    process's copy of the environment block the zygote started with, in the slot the
    runner left there (JAX_RUNNER_TOKEN=---...). A forked script never execs, so
    /proc/<pid>/environ, which the kernel reads from that block, shows it: the runner's
    sweep and its sentinel find the script's processes by the token, however they
    detach, and every process forked from this one inherits the copy (one that execs
    gets the token from os.environ). Raises when there is no slot or the token does not
    fit: the zygote then refuses and the script starts cold."""
    with open("/proc/self/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end (50 and 51)
    if not 0 < start < end:
        raise OSError("the environment block is not visible in /proc/self/stat")
    block = ctypes.string_at(start, end - start)
    if block.startswith(TOKEN_ENTRY):
        at = 0
    else:
        at = block.find(b"\0" + TOKEN_ENTRY)
        if at < 0:
            raise OSError("the zygote's environment has no token slot")
        at += 1
    at += len(TOKEN_ENTRY)
    stop = block.find(b"\0", at)
    slot = (stop if stop >= 0 else len(block)) - at
    value = token.encode()
    if block[at:at + slot].strip(b"-") or len(value) > slot:
        raise OSError("the token does not fit the zygote's slot of %d bytes" % slot)
    ctypes.memmove(start + at, value + b"\0" * (slot - len(value)), slot)


def wait_for_reparent(runner_pid):
    import time

    for _ in range(5000):
        if os.getppid() == runner_pid:
            return True
        time.sleep(0.0002)
    return False


def script_frames(tb, script):
    """The traceback from the script's first frame on, as a cold start prints it: the
    zygote's and runpy's frames are the runner's, not the script's. None when the
    script never ran a line (a SyntaxError), so only the error itself is printed."""
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    return tb


def note_frames(note, tb, script):
    """The script's module namespace, from the traceback of how it ended."""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == script:
            note(tb.tb_frame.f_globals)
            return
        tb = tb.tb_next


def restore_baseline(base):
    """First thing in a script's forked child, before the script or its sandbox: the
    run's resource limits, nice value, scheduling policy and CPU affinity (the
    request's "baseline", decided by the runner), whatever an earlier script did to
    the zygote. Raises on any value that does not take (a hard limit lowered for good
    cannot be raised back): the zygote then refuses and the script starts cold."""

    def unlimited(value):
        return resource.RLIM_INFINITY if value is None else value

    for lim in base["rlimits"]:
        want = (unlimited(lim["soft"]), unlimited(lim["hard"]))
        try:
            resource.setrlimit(lim["resource"], want)
        except (OSError, ValueError) as exc:
            raise OSError("cannot restore RLIMIT_%s to %s: %s" % (lim["name"], want, exc))
        if resource.getrlimit(lim["resource"]) != want:
            raise OSError("RLIMIT_%s did not take %s" % (lim["name"], want))
    calls = (
        ("nice value", os.setpriority, (os.PRIO_PROCESS, 0, base["nice"])),
        ("scheduling policy", os.sched_setscheduler,
         (0, base["policy"], os.sched_param(base["priority"]))),
        ("CPU affinity", os.sched_setaffinity, (0, base["cpus"])),
    )
    for what, call, args in calls:
        try:
            call(*args)
        except OSError as exc:
            raise OSError("cannot restore the %s: %s" % (what, exc))
    now = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0),
           os.sched_getparam(0).sched_priority, sorted(os.sched_getaffinity(0)))
    want = (base["nice"], base["policy"], base["priority"], sorted(base["cpus"]))
    if now != want:
        raise OSError("nice, policy, priority and CPUs are %s, not %s" % (now, want))


def become_script(req, fds):
    """In the grandchild: become the script, then exit as Python would."""
    CONTROL.close()
    if not req.get("view") and not req.get("resident"):
        runner = req["runner_pid"]
        os.setpgid(0, 0)
        if wait_for_reparent(runner):
            LIBC.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: die with the runner
            if os.getppid() != runner:
                os._exit(137)
        for procs in req.get("cgroup_procs") or []:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))
        if req.get("confined"):
            confine_plain(req)
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    # Nothing of the zygote's or the runner's reaches the script.
    os.closerange(3, MAX_FD)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    script = req["script"]
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    apply_jax_config(req["env"])
    shim = sys.modules.get("sitecustomize")
    install = getattr(shim, "jax_runner_install_telemetry", None)
    if install and req["env"].get("JAX_RUNNER_TELEMETRY"):
        install(req["env"]["JAX_RUNNER_TELEMETRY"], jax_already_imported=True,
                preloaded=PRELOADED)
    chain = getattr(shim, "jax_runner_chain_sitecustomize", None)
    if chain:
        chain()
    import runpy

    code = 0
    note = getattr(shim, "jax_runner_note_script_globals", None) or (lambda _g: None)
    try:
        note(runpy.run_path(script, run_name="__main__"))
    except SystemExit as exc:
        note_frames(note, exc.__traceback__, script)
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            sys.stderr.write("%s\n" % (exc.code,))
            code = 1
    except BaseException:  # what the interpreter does with an uncaught exception
        etype, value, tb = sys.exc_info()
        note_frames(note, tb, script)
        # The default hook prints the exception's own traceback: trim that one too.
        tb = script_frames(tb, script)
        if value is not None:
            value.__traceback__ = tb
        sys.excepthook(etype, value, tb)
        code = 1
    # Python's own shutdown order: wait for threads, run exit handlers, flush.
    import threading

    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    run_preload_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)


def jax_was_used():
    """Whether the script initialised a jax backend (or jax's distributed client): only
    then can jax's exit handlers release anything outside this process's memory."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is not None and (getattr(bridge, "_backends", None) or
                               getattr(bridge, "_default_backend", None) is not None):
        return True
    dist = sys.modules.get("jax._src.distributed")
    state = getattr(dist, "global_state", None)
    return getattr(state, "client", None) is not None


def run_preload_exit_handlers():
    """After the script's own exit handlers, as a cold start runs them (registered
    first, run last): the preload's, all of them when the script used jax, exactly as
    a cold start would; otherwise only logging's, which flushes the handlers a script
    may have set up (the rest only clear in-memory caches of a process about to end)."""
    used = jax_was_used()
    for func, args, kwargs in reversed(PRELOAD_EXIT):
        if used or func is logging.shutdown:
            try:
                func(*args, **kwargs)
            except Exception:  # reported as the interpreter reports it, then on
                sys.stderr.write("Exception ignored in atexit callback: %r\n" % (func,))
                import traceback

                traceback.print_exc()


def run_script(req, fds):
    """Becomes the script and never returns into the zygote's loop."""
    try:
        become_script(req, fds)
    except BaseException as exc:
        try:
            os.write(2, ("jax-runner warm start failed: %r\n" % (exc,)).encode())
        finally:
            os._exit(70)


def serve():
    collapse_into_huge_pages()
    ready = {"ready": True, "pid": os.getpid()}
    if SANDBOXED:
        ready["sandbox"] = probe_sandbox()
    CONTROL.sendall(json.dumps(ready).encode() + b"\n")
    serve_requests()


def serve_requests():
    """Answers requests on CONTROL until the runner closes it."""
    buf = b""
    # A long request can arrive in more than one read; its descriptors come with the
    # first, so they are kept until the line they belong to is complete.
    pending_fds = []
    while True:
        data, fds, _flags, _addr = socket.recv_fds(CONTROL, 65536, 4)
        if not data:
            return  # the runner is gone
        buf += data
        pending_fds.extend(fds)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            # A slot's socket; the go's pipe besides the stdio of a script in a view,
            # but for a slot's script, which needs no go.
            want = 3
            if req.get("slot"):
                want = 1
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
            CONTROL.sendall(json.dumps(reply).encode() + b"\n")


def spawn(req, fds):
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return {"error": "expected 3 file descriptors, got %d" % len(fds)}
    r, w = os.pipe()
    try:
        child = os.fork()
        if child == 0:
            os.close(r)
            try:
                claim_token(req["env"]["JAX_RUNNER_TOKEN"])
                restore_baseline(req["baseline"])  # the script's process inherits it
            except BaseException as exc:
                os.write(w, ("!%s" % (exc,)).encode())
                os._exit(70)
            grandchild = os.fork()
            if grandchild == 0:
                os.close(w)
                run_script(req, fds)
            os.write(w, b"%d" % grandchild)
            os._exit(0)
        os.close(w)
        for fd in fds:
            os.close(fd)
        got = os.read(r, 4096)
        os.waitpid(child, 0)  # the grandchild is now the runner's
        if got.startswith(b"!"):
            return {"error": got[1:].decode("utf-8", "replace")}
        pid = int(got or b"0")
        return {"pid": pid} if pid else {"error": "fork failed"}
    except OSError as exc:
        return {"error": "fork failed: %s" % exc}
    finally:
        os.close(r)
