# jax-runner's warm-start zygote, its sandbox half: appended to zygote.py (one
# program, read from stdin by zygote.rs's loader). No step of the sandbox is written
# here: each child hands the attempt's plan, as the runner built it, to the confinement
# library the binary carries (`jax_runner_confine`, the same Rust code a cold start
# runs), naming the phase its forks have reached. A child takes the script's
# namespaces and view (phase 1); the grandchild, init of the script's PID namespace,
# waits for the runner's go, takes the rest (phase 2: a fresh /proc, Landlock, the
# user, the capabilities, the filters) and forks the script, then waits for it as the
# namespace's init. A plan the library does not know is refused whole, and the child
# exits 70 without running the script.
PHASE_NAMESPACES, PHASE_PROCESS, PHASE_SCRIPT = 1, 2, 5


def load_confinement():
    """The library's entry point (the library zygote.py loaded before any import,
    which a confined zygote cannot start without); None for an unsandboxed zygote."""
    if not CONFINED or LIBRARY is None:
        return None
    fn = LIBRARY.jax_runner_confine
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                   ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


CONFINE = load_confinement()
FILTERS = b"".join(len(p).to_bytes(4, sys.byteorder) + p for p in SECCOMP)


def confine(plan, phase):
    """Applies `phase` of `plan` (a request's "plan", the record as the runner wrote it:
    text the child hands on as it came, with no object of it made or walked in the
    zygote's shared pages; or a record as the probe's) to this process."""
    if CONFINE is None:
        raise OSError("failed to confine the script: the zygote has no jax-runner library")
    text = plan.encode() if isinstance(plan, str) else json.dumps(plan).encode()
    err = ctypes.create_string_buffer(1024)
    if CONFINE(text, len(text), FILTERS, len(FILTERS), phase, err, len(err)) != 0:
        raise OSError(err.value.decode("utf-8", "replace"))


def confine_plain(req):
    """A script on the host's view (no namespaces): the plan's steps in its own
    process (Landlock, the sandbox user, the capabilities, the filters)."""
    confine(req["plan"], PHASE_PROCESS)


def host_parent():
    """The parent's PID as the runner sees it (the host's /proc is still mounted)."""
    with open("/proc/self/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def seal():
    """Makes this process of the runner's plumbing (a script's init, a slot's zygote)
    non-dumpable: no script beside it can then read or write its memory through /proc
    (`/proc/<pid>/mem` passes the ptrace check only with CAP_SYS_PTRACE over it, which
    the runner holds as the owner of the sandbox's user namespace, or as root). Returns
    whether a script it forks afterwards should be dumpable again (see `unseal`)."""
    was = LIBC.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    if LIBC.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError("failed to make the runner's plumbing non-dumpable")
    return was == 1


def unseal(dumpable):
    """In a script forked from sealed plumbing, first: dumpable as its plumbing was
    before (so the runner reads the script's /proc as before: its environment, its
    memory); a script that changed user on the way stays as the kernel left it."""
    if dumpable:
        LIBC.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE


def be_init(req, fds):
    """In the grandchild, PID 1 of the script's namespace and the runner's child."""
    try:
        os.setpgid(0, 0)
        go = fds[3]
        if os.read(go, 1) != b"g":
            os._exit(70)  # the runner could not place it and starts the script cold
        os.close(go)
        LIBC.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: die with the runner
        if host_parent() != req["runner_pid"]:
            os._exit(137)
        confine(req["plan"], PHASE_PROCESS)
        sealed_r, sealed_w = os.pipe()
        script = os.fork()
    except BaseException as exc:
        os.write(fds[2], ("jax-runner sandbox: %s\n" % (exc,)).encode())
        os._exit(70)
    if script == 0:
        # Forked before the seal, the script stays dumpable (the runner reads it from
        # its first sample); it waits until this init is sealed.
        os.close(sealed_w)
        if os.read(sealed_r, 1) != b"s":
            os._exit(70)
        os.close(sealed_r)
        run_script(req, fds[:3])
    os.close(sealed_r)
    try:
        seal()
    except BaseException as exc:
        os.write(fds[2], ("jax-runner sandbox: %s\n" % (exc,)).encode())
        os._exit(70)
    os.write(sealed_w, b"s")
    os.close(sealed_w)
    for fd in fds[:3]:
        os.close(fd)
    wait_as_init(script)


def take_no_signal_from_inside():
    """For the init of a PID namespace: the kernel's default action for every signal
    Python handles, which for an init is to ignore any sent from inside its namespace
    (a script's SIGINT would otherwise raise KeyboardInterrupt in it)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def wait_as_init(script):
    """The rest of the init's life: wait for the script, reap whatever else ends, and
    exit as a cold sandbox's init does, with the script's code or 128 + the signal
    that killed it. When it exits, the kernel ends the namespace and all left in it.
    Only the kernel's default actions from here: an init ignores what it does not
    handle, so nothing inside can stop it but the end of the script."""
    take_no_signal_from_inside()
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(70)
        if pid == script:
            break
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def read_all(fd):
    out = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return out
        out += chunk


def spawn_sandboxed(req, fds):
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return {"error": "expected 4 file descriptors, got %d" % len(fds)}
    r, w = os.pipe()
    freeze_heap()
    try:
        child = os.fork()
        if child == 0:
            os.close(r)
            try:
                CONTROL.close()
                claim_token(req["env"]["JAX_RUNNER_TOKEN"])  # with the host's /proc
                restore_baseline(req["baseline"])  # before any confinement
                confine(req["plan"], PHASE_NAMESPACES)
                init = os.fork()
                if init == 0:
                    os.close(w)
                    be_init(req, fds)
                try:
                    os.setpgid(init, init)  # before the runner may signal its group
                except OSError:
                    pass
                os.write(w, b"%d" % init)
                os._exit(0)
            except BaseException as exc:
                os.write(w, ("!%s" % (exc,)).encode())
                os._exit(70)
        os.close(w)
        w = None
        for fd in fds:
            os.close(fd)
        got = read_all(r)
        os.waitpid(child, 0)  # the grandchild is now the runner's
        if got.startswith(b"!"):
            return {"error": got[1:].decode("utf-8", "replace")}
        pid = int(got or b"0")
        return {"pid": pid} if pid else {"error": "fork failed"}
    except OSError as exc:
        return {"error": "fork failed: %s" % exc}
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def start_probe():
    """At start: can a child take the probe plan's namespaces (--probe-plan, built by
    the runner), and its init the rest (a fresh /proc, the user, the filters), here?
    Forks that test child and returns it with its pipe, for finish_probe."""
    plan = json.loads(next(a.split("=", 1)[1] for a in sys.argv
                           if a.startswith("--probe-plan=")))
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            confine(plan, PHASE_NAMESPACES)
            init = os.fork()
            if init == 0:
                try:
                    confine(plan, PHASE_PROCESS)
                    os._exit(0)
                except BaseException as exc:
                    os.write(w, str(exc).encode())
                    os._exit(1)
            _, status = os.waitpid(init, 0)
            os._exit(0 if status == 0 else 1)
        except BaseException as exc:
            os.write(w, str(exc).encode())
            os._exit(1)
    os.close(w)
    return child, r


def finish_probe(probe):
    """The test child's answer: "ok", or what failed (the run then starts sandboxed
    scripts cold)."""
    child, r = probe
    message = read_all(r)
    os.close(r)
    _, status = os.waitpid(child, 0)
    if status == 0:
        return "ok"
    return message.decode("utf-8", "replace") or "the test child failed (%d)" % status
