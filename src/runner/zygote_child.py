# jax-runner's warm-start zygote, its child part: appended after zygote.py (one
# program). What each forked child does to become its script: claim the attempt's
# token, restore the run's limits and priorities, take the script's stdio,
# environment and folder, re-apply its JAX_* settings, install the telemetry shim,
# run it as __main__, and end as Python would.
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


def find_token_slot():
    """Where the slot the runner left in this process's environment block lies
    (JAX_RUNNER_TOKEN=---...): its address and length, read once in the zygote, whose
    forks keep both, so a child writes its token there without reading /proc or the
    block again. What is wrong instead (no slot, a slot not empty), for claim_token to
    raise."""
    with open("/proc/self/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end (50 and 51)
    if not 0 < start < end:
        return OSError("the environment block is not visible in /proc/self/stat")
    block = ctypes.string_at(start, end - start)
    if block.startswith(TOKEN_ENTRY):
        at = 0
    else:
        at = block.find(b"\0" + TOKEN_ENTRY)
        if at < 0:
            return OSError("the zygote's environment has no token slot")
        at += 1
    at += len(TOKEN_ENTRY)
    stop = block.find(b"\0", at)
    slot = (stop if stop >= 0 else len(block)) - at
    if block[at:at + slot].strip(b"-"):
        return OSError("the zygote's token slot is not empty")
    return start + at, slot


try:
    TOKEN_SLOT = find_token_slot()
except OSError as exc:  # no /proc to read: each claim says so
    TOKEN_SLOT = exc


def claim_token(token):
    """First thing in a script's forked child: write the attempt's token into this
    process's copy of the environment block the zygote started with, in the slot the
    runner left there (see find_token_slot). A forked script never execs, so
    /proc/<pid>/environ, which the kernel reads from that block, shows it: the runner's
    sweep and its sentinel find the script's processes by the token, however they
    detach, and every process forked from this one inherits the copy (one that execs
    gets the token from os.environ). Raises when there is no slot or the token does not
    fit: the zygote then refuses and the script starts cold."""
    if isinstance(TOKEN_SLOT, OSError):
        raise TOKEN_SLOT
    at, slot = TOKEN_SLOT
    value = token.encode()
    if len(value) > slot:
        raise OSError("the token does not fit the zygote's slot of %d bytes" % slot)
    ctypes.memmove(at, value + b"\0" * (slot - len(value)), slot)


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
    if not LEAN:
        apply_jax_config(req["env"])
    shim = sys.modules.get("sitecustomize")
    install = getattr(shim, "jax_runner_install_telemetry", None)
    if install and req["env"].get("JAX_RUNNER_TELEMETRY"):
        install(req["env"]["JAX_RUNNER_TELEMETRY"], jax_already_imported=not LEAN,
                preloaded=PRELOADED, forked=True)
    chain = getattr(shim, "jax_runner_chain_sitecustomize", None)
    if chain:
        # On the path a cold start's site module searches: without the script's
        # folder, which Python adds only after start-up (searching it also listed the
        # whole folder in every script: 1,000 names per script in a sweep's folder).
        chain(sys.path[1:])

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


def jax_exit_effects():
    """What jax's own exit handler (`jax._src.api.clean_up`) does that anything outside
    this process could see: wait for the effects still in flight (callbacks, ordered
    I/O), then shut its distributed client down. What it does besides, dropping the
    backends and clearing every compiled function, trace and MLIR module, only frees
    this process's memory before an `os._exit` the kernel frees it in at once; in a
    child of the zygote each free first copies the page it writes (the heap is shared
    with the zygote): 45 ms of CPU a generated POMDP script (8 scripts, 0.38 s of 3.3
    s in all, measured), a tenth of its time on a filled compilation cache."""
    from jax._src import api, distributed, xla_bridge

    if xla_bridge._default_backend is not None:
        api.effects_barrier()
    distributed.shutdown()


def exit_handler(func):
    """The handler to run in `func`'s place: jax's clean_up becomes jax_exit_effects
    when this jax has every name that needs (else clean_up runs whole, as ever)."""
    api = sys.modules.get("jax._src.api")
    if func is not getattr(api, "clean_up", None):
        return func
    try:
        from jax._src import distributed, xla_bridge

        api.effects_barrier, distributed.shutdown, xla_bridge._default_backend
    except (ImportError, AttributeError):
        return func
    return jax_exit_effects


def run_preload_exit_handlers():
    """After the script's own exit handlers, as a cold start runs them (registered
    first, run last): the preload's, all of them when the script used jax, as a cold
    start would (jax's own less what only frees memory: see jax_exit_effects);
    otherwise only logging's, which flushes the handlers a script may have set up (the
    rest only clear in-memory caches of a process about to end)."""
    used = jax_was_used()
    for func, args, kwargs in reversed(PRELOAD_EXIT):
        func = exit_handler(func)
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
