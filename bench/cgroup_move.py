"""cgroup_move.py: how long a move into a fresh cgroup v1 pids cgroup takes, three ways.

    sudo python3 bench/cgroup_move.py [ROUNDS]

Per round, a fresh child process moves into a cgroup of its own: by writing its PID to
`cgroup.procs` (what the runner's move of a slot's zygote does), its PID to `tasks`,
and `0` to `tasks` (a thread moving itself: what a slot's zygote does on v1, see
`join_cgroup_itself` in src/runner/zygote_slot.py). Prints each write's time in ms.
Needs root and a v1 pids hierarchy at /sys/fs/cgroup/pids; the cgroups it makes are
removed.
"""

import os
import sys
import time

BASE = "/sys/fs/cgroup/pids"


def child_move(path, what):
    """Milliseconds a fresh child took to write what(pid) to path."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        fd = os.open(path, os.O_WRONLY)
        t = time.perf_counter()
        os.write(fd, what(os.getpid()))
        os.write(w, b"%.3f" % ((time.perf_counter() - t) * 1e3))
        os._exit(0)
    os.close(w)
    out = os.read(r, 100).decode()
    os.close(r)
    os.waitpid(pid, 0)
    return out


def main():
    if not os.path.exists(os.path.join(BASE, "tasks")):
        sys.exit("cgroup_move.py: no v1 pids hierarchy at %s" % BASE)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    dirs = [os.path.join(BASE, "jax-runner-bench-%d-%d" % (os.getpid(), i)) for i in range(3)]
    for d in dirs:
        os.makedirs(d)
    try:
        for _ in range(rounds):
            a = child_move(os.path.join(dirs[0], "cgroup.procs"), lambda p: str(p).encode())
            time.sleep(0.05)
            b = child_move(os.path.join(dirs[1], "tasks"), lambda p: str(p).encode())
            time.sleep(0.05)
            c = child_move(os.path.join(dirs[2], "tasks"), lambda p: b"0")
            time.sleep(0.05)
            print("cgroup.procs (pid) %s ms   tasks (pid) %s ms   tasks (0) %s ms" % (a, b, c))
    finally:
        for d in dirs:
            os.rmdir(d)


main()
