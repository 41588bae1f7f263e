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
import ctypes
import json
import os
import socket
import sys

import jax  # noqa: F401  (the point: imported once, here)
import jax.numpy  # noqa: F401
import numpy  # noqa: F401

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
    import resource

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
    if not req.get("view"):
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
        install(req["env"]["JAX_RUNNER_TELEMETRY"], jax_already_imported=True)
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
    import atexit
    import threading

    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)


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
    ready = {"ready": True, "pid": os.getpid()}
    if SANDBOXED:
        ready["sandbox"] = probe_sandbox()
    CONTROL.sendall(json.dumps(ready).encode() + b"\n")
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
            want = 4 if req.get("view") else 3
            my_fds, pending_fds = pending_fds[:want], pending_fds[want:]
            mismatch = bool(req.get("view")) != SANDBOXED
            if mismatch or bool(req.get("confined")) != CONFINED:
                for fd in my_fds:
                    os.close(fd)
                reply = {"error": "the request does not match the zygote's sandbox"}
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
