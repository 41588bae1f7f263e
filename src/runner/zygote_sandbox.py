# jax-runner's warm-start zygote, its sandbox half: appended to zygote.py (one
# program, read by `python -` from stdin). A child builds the script's namespaces and mounts
# from the steps a cold start gives bubblewrap; the grandchild, init of the script's
# PID namespace, waits for the runner's go, drops every capability and forks the
# script, then waits for it as the namespace's init.
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
# statvfs flags and their mount twins: a remount inside a user namespace must keep
# the ones the kernel locked on the mount it inherited.
LOCKED = ((2, 2), (4, 4), (8, 8), (1024, 1024), (2048, 2048), (4096, 1 << 21))
def check(ok, what):
    if not ok:
        err = ctypes.get_errno()
        raise OSError(err, "failed to %s: %s" % (what, os.strerror(err)))


def mount(source, target, fstype, flags, data=None):
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    done = LIBC.mount(enc(source), target.encode(), enc(fstype), flags, enc(data)) == 0
    check(done, "mount %s on %s" % (fstype or "a bind", target))


def read_only(path):
    remount(path, MS_RDONLY)


def mount_point(fd, path):
    """Where a bind lands inside a fresh tmpfs, the folder or file must be made."""
    import stat

    if os.path.lexists(path):
        return
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(path)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()


def loopback_up():
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # SIOCSIFFLAGS on lo: IFF_UP | IFF_LOOPBACK | IFF_RUNNING, as bwrap does.
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))


def make_dir(path):
    """A folder on the way to a bind, 0755 whatever the umask."""
    try:
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)
    except FileExistsError:
        pass


def build_namespaces(steps):
    """In the child: the script's own namespaces and view of the files, from the same
    steps a cold start hands bubblewrap."""
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    check(LIBC.unshare(flags) == 0, "unshare the namespaces")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Every source is opened before a tmpfs hides it, and bound from its descriptor.
    held = {}
    for step in steps:
        if step["op"] in ("read_only", "writable"):
            held[step["path"]] = os.open(step["path"], os.O_PATH | os.O_CLOEXEC)
    for step in steps:
        op, path = step["op"], step["path"]
        if op == "tmpfs":
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
        elif op == "scratch":
            # The sandbox user's own (a root runner's), else open to the one user here.
            data = "mode=0700,uid=%d,gid=%d" % USER if USER else "mode=1777"
            if step.get("size") is not None:  # --memory-limit bounds each scratch
                data += ",size=%d" % step["size"]
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, data)
        elif op == "dir":
            make_dir(path)
        elif op in ("read_only", "writable"):
            fd = held.pop(path)
            mount_point(fd, path)
            mount("/proc/self/fd/%d" % fd, path, None, MS_BIND | MS_REC)
            os.close(fd)
            if op == "read_only":
                read_only(path)
            else:
                remount(path, 0)  # nosuid, nodev: nothing planted there gains a thing
        elif op == "mask":
            mount("/dev/null", path, None, MS_BIND)
            read_only(path)
        elif op == "remount_read_only":
            read_only(path)
    loopback_up()


def remount(path, extra):
    """The bind at `path` again, nosuid and nodev, plus `extra` flags, keeping the ones
    the kernel locked on the mount it inherited."""
    flags = os.statvfs(path).f_flag
    kept = sum(ms for st, ms in LOCKED if flags & st)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | extra | kept)


def proc_read_only():
    """The fresh /proc's knobs read-only, as bwrap leaves them."""
    for name in ("sys", "sysrq-trigger", "irq", "bus"):
        path = "/proc/" + name
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            remount(path, MS_RDONLY)


def become_user(user):
    """A root runner's sandbox user, for good: no capability left in the bounding set,
    no supplementary group, the uid and gid (which empties the other sets)."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        check(LIBC.prctl(24, cap, 0, 0, 0) == 0, "drop capability %d" % cap)  # CAPBSET_DROP
    uid, gid = user
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError("failed to become uid %d" % uid)
    # The switch made the process undumpable, which leaves /proc/self to root: a cold
    # start's exec would restore it, so does this (nothing of root's is in memory).
    check(LIBC.prctl(4, 1, 0, 0, 0) == 0, "make the process dumpable")  # PR_SET_DUMPABLE


def has_capability(cap):
    """Whether this process holds `cap` in its effective set (/proc/self/status)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def drop_privileges():
    """Every capability gone (bounding, ambient, effective, permitted, inheritable),
    no_new_privs set, the seccomp filter installed: what bwrap does for a cold start."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    may_drop = LIBC.prctl(23, 8, 0, 0, 0) == 1 and has_capability(8)  # CAP_SETPCAP
    for cap in range(last + 1):
        if may_drop and LIBC.prctl(23, cap, 0, 0, 0) == 1:  # CAPBSET_READ
            check(LIBC.prctl(24, cap, 0, 0, 0) == 0, "drop capability %d" % cap)
    LIBC.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL (older kernels have none)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    check(LIBC.capset(header, (ctypes.c_uint32 * 6)()) == 0, "drop capabilities")
    check(LIBC.prctl(38, 1, 0, 0, 0) == 0, "set no_new_privs")

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    for filt in SECCOMP:
        code = ctypes.create_string_buffer(filt, len(filt))
        program = Program(len(filt) // 8, ctypes.addressof(code))
        done = LIBC.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # SECCOMP_MODE_FILTER
        check(done, "install the seccomp filter")


# struct landlock_path_beneath_attr { __u64 allowed_access; __s32 parent_fd; } (packed)
# and the rights a rule on a file (not a folder) may hold: execute, write_file,
# read_file, truncate, ioctl_dev.
LANDLOCK_FILE_RIGHTS = 1 | 2 | 4 | (1 << 14) | (1 << 15)


def landlock_prepare(plan):
    """Landlock's ruleset for `plan`, filled (paths opened now, while they may all be
    reached): the descriptor, or None without a plan. Same rules as a cold start's."""
    import stat
    import struct

    if not plan:
        return None
    attr = (ctypes.c_uint64 * 3)(plan["fs"], plan["net"], plan["scoped"])
    ruleset = LIBC.syscall(444, ctypes.byref(attr), ctypes.c_size_t(24), ctypes.c_uint32(0))
    check(ruleset >= 0, "create a Landlock ruleset")
    for path, rights in plan["rules"]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # not in this view: nothing to grant
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                rights &= LANDLOCK_FILE_RIGHTS
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
            done = LIBC.syscall(445, ruleset, 1, rule, ctypes.c_uint32(0)) == 0  # PATH_BENEATH
            check(done, "grant %s" % path)
        finally:
            os.close(fd)
    return ruleset


def landlock_restrict(ruleset):
    """Holds this process and all it starts to the ruleset (no_new_privs is set)."""
    if ruleset is None:
        return
    check(LIBC.prctl(38, 1, 0, 0, 0) == 0, "set no_new_privs")
    check(LIBC.syscall(446, ruleset, ctypes.c_uint32(0)) == 0, "apply Landlock's rules")
    os.close(ruleset)


def confine_plain(req):
    """A script on the host's view (no namespaces): Landlock's rules, the sandbox user
    (a root runner's; dying with the runner again, which the switch undid), every
    capability gone, the filter."""
    ruleset = landlock_prepare(req.get("landlock"))
    if USER:
        become_user(USER)
        LIBC.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        if os.getppid() != req["runner_pid"]:
            os._exit(137)
    drop_privileges()
    landlock_restrict(ruleset)


def host_parent():
    """The parent's PID as the runner sees it (the host's /proc is still mounted)."""
    with open("/proc/self/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


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
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        proc_read_only()
        ruleset = landlock_prepare(req.get("landlock"))
        if USER:
            become_user(USER)
        drop_privileges()
        landlock_restrict(ruleset)
        script = os.fork()
    except BaseException as exc:
        os.write(fds[2], ("jax-runner sandbox: %s\n" % (exc,)).encode())
        os._exit(70)
    if script == 0:
        run_script(req, fds[:3])
    for fd in fds[:3]:
        os.close(fd)
    wait_as_init(script)


def wait_as_init(script):
    """The rest of the init's life: wait for the script, reap whatever else ends, and
    exit as a cold sandbox's init does, with the script's code or 128 + the signal
    that killed it. When it exits, the kernel ends the namespace and all left in it.
    Only the kernel's default actions from here: an init ignores what it does not
    handle, so nothing inside can stop it but the end of the script."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
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
    try:
        child = os.fork()
        if child == 0:
            os.close(r)
            try:
                CONTROL.close()
                restore_baseline(req["baseline"])  # before any confinement
                build_namespaces(req["steps"])
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


def probe_sandbox():
    """At start: can a child build a script's namespaces, a fresh /proc and the filter
    here? "ok", or what failed (the run then starts sandboxed scripts cold)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            build_namespaces([{"op": "tmpfs", "path": "/tmp"}])
            init = os.fork()
            if init == 0:
                try:
                    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                    proc_read_only()
                    if USER:
                        become_user(USER)
                    drop_privileges()
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
    message = read_all(r)
    os.close(r)
    _, status = os.waitpid(child, 0)
    if status == 0:
        return "ok"
    return message.decode("utf-8", "replace") or "the test child failed (%d)" % status


serve()
