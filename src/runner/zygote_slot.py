# jax-runner's warm-start zygote, its slot part: appended after the sandbox half (one
# program). A worker slot's zygote is a fork of the run's zygote that the runner moves
# once into a cgroup of the slot's. It forks each of the slot's scripts as its own
# child, so a script is one fork of the 150 MiB image instead of two or three (fork and
# exit of such a process cost 3 ms each, most of a trivial script's CPU), and is in
# the slot's cgroup from its first instruction, with no move. It answers the script's
# PID, waits for it, and answers how it ended, with its resource usage, as wait4 gives
# it. Sandboxed in a view, the slot's zygote is the init of a PID namespace of the
# slot's and lives in a network namespace of the slot's and in a mount namespace
# holding the run's part of every script's view (the runner's "slot_view"): each
# script makes its own mount namespace (a copy of the slot's, where it adds its own
# part of the view), IPC and UTS namespaces and a fresh /proc of the slot's PID
# namespace, through the library (jax_runner_confine, called by the sandbox half's
# confine) as every other start, and shares the slot's network, which the zygote
# clears of everything an earlier script left before each fork (clear_slot).
PHASE_SLOT_PID = 4
# The middle children of the slots this zygote made that have not been reaped yet.
MIDDLES = []
# Whether the scripts this slot's zygote forks are dumpable (see `seal`).
SLOT_DUMPABLE = True


def start_slot(req, fds):
    """Forks the slot's zygote, which serves the slot on fds[0], and answers at once
    with the PID of the middle child that forks it: the slot's zygote says its own PID
    (the host's) as the first line on fds[0] once it is the runner's, or the middle
    child says what failed. So a run's slots are made side by side (each middle child
    builds its part of the view on a core of its own), not one after another. A middle
    child forks the slot's zygote (sandboxed in a view, as the init of a PID namespace
    the middle child makes) and exits, so the runner (a subreaper) adopts it: it dies
    with the runner, not with this zygote, which a script may kill. The middle child is
    reaped as soon as it has ended (see serve_requests)."""
    want = 1 + int(req.get("cgroup_tasks") or 0)  # its socket, its cgroup's tasks files
    if len(fds) != want:
        for fd in fds:
            os.close(fd)
        return {"error": "expected %d file descriptors, got %d" % (want, len(fds))}
    reap_orphans()  # a slot's zygote that died before this one is made again
    try:
        child = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        return {"error": "fork failed: %s" % exc}
    if child == 0:
        del MIDDLES[:]  # its parent's to reap, not this one's
        try:
            middle = os.getpid()
            if SANDBOXED:
                # With the run's part of every script's view, when the runner sent
                # one: this process and the slot's zygote then live in it.
                confine(req["slot_view"], PHASE_SLOT_PID)
            if os.fork():
                os._exit(0)
            become_slot(fds[0], req["runner_pid"], middle, req.get("ir_context"), fds[1:])
        except BaseException as exc:
            try:
                say = json.dumps({"error": str(exc) or type(exc).__name__})
                os.write(fds[0], say.encode() + b"\n")
            finally:
                os._exit(70)
    for fd in fds:
        os.close(fd)
    MIDDLES.append(child)
    return {"pid": child}


def reap_middles():
    """Reaps the slots' middle children that have ended; the rest are left running."""
    for pid in list(MIDDLES):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            MIDDLES.remove(pid)


def join_cgroup_itself(tasks):
    """Moves this process into the slot's cgroup through `tasks`, the `tasks` files of
    its folders (cgroup v1), which the runner opened: a thread that writes 0 there
    moves itself without the lock on every thread group that the runner's move of it
    takes, a lock that waits for an RCU grace period (0.04 ms against 7.7 to 12.7 ms,
    measured), on the run's critical path before its first scripts. `tasks` moves the
    thread that writes: only while this process has that one. Returns whether each
    file took it (the runner checks, and moves it where not); the files are closed
    either way, so no script inherits them."""
    try:
        moved = bool(tasks) and len(os.listdir("/proc/self/task")) == 1
        for fd in tasks if moved else ():
            os.write(fd, b"0")
        return moved
    except OSError:
        return False
    finally:
        for fd in tasks:
            os.close(fd)


def become_slot(sock, runner, middle, context, tasks):
    """The rest of a slot's zygote's life: it moves itself into the slot's cgroup
    where it can (`tasks`, see join_cgroup_itself) and says its PID; with `context`
    it then makes the MLIR context its scripts' lowerings share (see
    make_ir_context_ahead), each slot its own on a core of its own, while the runner
    settles it in the slot's cgroup and prepares its first request, and while the
    middle child exits (a fork of the zygote: 3 to 4 ms to tear down). Once that child
    is gone it is the runner's (a subreaper), tied to it, and serves the slot's
    requests: nothing it was asked runs before."""
    global CONTROL, SLOT_DUMPABLE
    import time

    CONTROL.close()
    CONTROL = socket.socket(fileno=sock)
    # Its PID as the runner knows it (/proc is still the host's): the slot's first word.
    with open("/proc/self/stat") as fh:
        host_pid = int(fh.read().split()[0])
    moved = join_cgroup_itself(tasks)
    CONTROL.sendall(json.dumps({"pid": host_pid, "moved": moved}).encode() + b"\n")
    if context:
        make_ir_context_ahead("slot")
    # Its parent is the middle child until it exits; /proc is still the host's (in a
    # PID namespace of its own, getppid() would say 0).
    for _ in range(5000):
        if host_parent() != middle:
            break
        time.sleep(0.0002)
    LIBC.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: die with the runner
    if host_parent() != runner:
        os._exit(0)
    if SANDBOXED:
        take_no_signal_from_inside()  # the init of the slot's PID namespace
    if CONFINED:
        SLOT_DUMPABLE = seal()  # it holds the slot's earlier requests
    try:
        serve_requests()
    finally:
        os._exit(0)


def reap_orphans():
    """A PID namespace's init reaps what ends in it: processes an earlier script left,
    which the runner killed after it. Returns whether no child is left at all."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def clear_slot():
    """The init of the slot's PID namespace kills every other process in it, and
    reaps them, before it forks the next script: nothing an earlier script left
    (however it hid from the runner's sweep: out of its group and session, its token
    wiped) lives on beside the next one in the namespaces they share, the PID
    namespace and the slot's network namespace. Only as PID 1: there kill(-1)
    reaches this namespace alone; anywhere else it would reach every process the
    user may signal. Bounded: a process stuck in the kernel is left to the runner."""
    import time

    if os.getpid() != 1:
        reap_orphans()
        return
    try:
        os.kill(-1, 9)  # SIGKILL, by number (see the telemetry shim on `signal`)
    except ProcessLookupError:
        return  # nothing but this zygote here
    deadline = time.monotonic() + 2.0
    # Every one reaped ends it: a killed process's children come to init before it
    # can be reaped, so none is missed.
    while not reap_orphans() and time.monotonic() < deadline:
        time.sleep(0.0005)


def run_resident(req, fds):
    """Forks the script as this slot's zygote's own child, confined as its request
    says, answers its PID (the host's) once its confinement took, and returns how it
    ended. A confinement that fails is answered as an error before the script runs:
    the runner then starts it cold."""
    clear_slot()
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return {"error": "expected 3 file descriptors, got %d" % len(fds)}
    me = os.getpid()
    r, w = os.pipe()
    # The go, once the runner has the script's PID: a script that ran before would be
    # run a second time, cold, should this zygote die before it answers (nothing stops
    # an unsandboxed script from killing it).
    go_r, go_w = os.pipe()
    freeze_heap()  # what this zygote made since: requests, replies
    try:
        script = os.fork()
    except OSError as exc:
        for fd in fds + [r, w, go_r, go_w]:
            os.close(fd)
        return {"error": "fork failed: %s" % exc}
    if script == 0:
        unseal(SLOT_DUMPABLE)
        os.close(r)
        os.close(go_w)
        try:
            os.setpgid(0, 0)
            # Its PID as the runner knows it: a fork's answer is this namespace's, but
            # /proc (still the host's) names the reader as the host does. Then what
            # it holds resident now, all of it this zygote's pages: the kernel's peak
            # at its end, less this, is what the script added (see wait_for).
            inherited = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            os.write(w, b"%s %d\n" % (os.readlink("/proc/self").encode(), inherited))
            claim_token(req["env"]["JAX_RUNNER_TOKEN"])  # with the host's /proc
            restore_baseline(req["baseline"])  # before any confinement
            LIBC.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: die with the slot
            if os.getppid() != me:
                os._exit(137)
            if req.get("view"):
                confine(req["plan"], PHASE_SCRIPT)  # both phases, in one call
            elif req.get("confined"):
                confine(req["plan"], PHASE_PROCESS)
        except BaseException as exc:
            os.write(w, ("!%s" % (exc,)).encode())
            os._exit(70)
        os.close(w)
        if os.read(go_r, 1) != b"g":
            os._exit(70)  # this zygote died before the runner had the PID
        os.close(go_r)
        run_script(req, fds)
    os.close(w)
    os.close(go_r)
    for fd in fds:
        os.close(fd)
    try:
        os.setpgid(script, script)  # before the runner may signal its group
    except OSError:
        pass
    got = read_all(r)
    os.close(r)
    line, _, rest = got.partition(b"\n")
    host, _, inherited = line.partition(b" ")
    if rest.startswith(b"!") or not host.isdigit() or not inherited.isdigit():
        os.close(go_w)
        os.waitpid(script, 0)
        return {"error": (rest[1:] or host).decode("utf-8", "replace")}
    CONTROL.sendall(json.dumps({"pid": int(host)}).encode() + b"\n")
    give_go(go_w)
    return wait_for(script, int(inherited))


def give_go(go_w):
    """The script's go, once the runner has its PID. A script already gone (killed
    meanwhile) has closed its end: nothing more to say, and the answer stands."""
    try:
        os.write(go_w, b"g")
    except OSError:
        pass
    os.close(go_w)


def wait_for(script, inherited_kib):
    """Waits for the script (reaping whatever else ends meanwhile, as an init must)
    and returns its wait status and resource usage, with the resident size it had at
    its fork (`inherited_kib`): the runner does not read the proportional size of a
    script this fresh (a walk of 150 MiB of the zygote's page tables, 4 ms, to count
    nothing of the script's), so for a script that ends before its first sample the
    kernel's peak less this is the figure."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return {"error": "the script was not this zygote's child"}
        if pid == script:
            break
    return {"exit": {"status": status, "utime": usage.ru_utime, "stime": usage.ru_stime,
                     "maxrss_kib": usage.ru_maxrss, "inherited_kib": inherited_kib}}


serve()
