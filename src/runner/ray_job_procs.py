# The Ray job wrapper's view of the script's processes on the node
# (`jax_runner_ray_procs`, beside `jax_runner_ray_job`): their memory, tasks and GPU
# devices as the runner reads a local script's, the stacks a stop asks for first, and
# the guard that ends the script's group with the wrapper.
import os
import subprocess
import time


# NVIDIA's device nodes, and ROCm's: what a process using a GPU holds open.
GPU_DEVICES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/")


def holds_gpu_device(pid):
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith(GPU_DEVICES):
                return True
        except OSError:
            pass
    return False


def memory(pid, page):
    """One process's memory as the kernel counts it, as the runner reads it locally:
    its proportional set size where smaps_rollup can be read (True beside it), else
    its resident size (True too when nothing is resident)."""
    try:
        with open("/proc/%d/smaps_rollup" % pid, "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024, True
    except (OSError, ValueError, IndexError):
        pass
    with open("/proc/%d/statm" % pid, "rb") as fh:
        pages = int(fh.read().split()[1])
    return pages * page, pages == 0


def tree(root):
    """The memory of `root` and every process below it, whether every figure was a
    proportional one, their PIDs, and their tasks (threads), as the kernel counts them
    against a limit on processes (`num_threads`, as the runner's watchdog reads it),
    from /proc."""
    children, threads = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            ppid, threads[int(name)] = int(fields[1]), int(fields[17])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    page = os.sysconf("SC_PAGE_SIZE")
    total, proportional, todo, pids = 0, True, [root], []
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
        try:
            size, pss = memory(pid, page)
        except (OSError, ValueError, IndexError):
            continue
        total += size
        proportional = proportional and pss
    return total, proportional, pids, sum(threads.get(p, 0) for p in pids)


# The signal the telemetry shim hands to faulthandler, which the runner's own stop sends
# before SIGTERM (src/runner/child/stop.rs): each process that catches it writes every
# thread's stack to its stderr and runs on.
STACKS_SIGNAL = 62


def signal_masks(pid):
    """The masks of /proc/<pid>/status the stop reads, by field: `SigCgt` (caught),
    `SigPnd` and `ShdPnd` (pending for the thread, for the process); bit N-1 for
    signal N. Empty when the file cannot be read."""
    masks = {}
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in ("SigCgt", "SigPnd", "ShdPnd"):
                    masks[name] = int(value, 16)
    except (OSError, ValueError):
        return {}
    return masks


def ask_for_stacks(root):
    """Before the script is stopped, as the runner stops one locally: every process of
    its tree that catches STACKS_SIGNAL is sent it, and the stop waits until each has
    taken it, and 50 ms more for the stacks to be written (at most half a second in
    all: a process that blocks it never takes it)."""
    bit = 1 << (STACKS_SIGNAL - 1)
    asked = []
    for pid in tree(root)[2]:
        if signal_masks(pid).get("SigCgt", 0) & bit:
            try:
                os.kill(pid, STACKS_SIGNAL)
                asked.append(pid)
            except OSError:
                pass
    if not asked:
        return
    until = time.monotonic() + 0.5
    def pending(pid):
        masks = signal_masks(pid)
        return (masks.get("ShdPnd", 0) | masks.get("SigPnd", 0)) & bit

    while time.monotonic() < until and any(pending(p) for p in asked):
        time.sleep(0.01)
    time.sleep(0.05)


def guard_group(pgid):
    """A process in the script's group that kills the group once the wrapper is gone.

    Ray ends a job it gives up on (its supervisor died, a stop's grace ran out) by
    killing the job's own processes, and the script's group is not among them. The
    guard holds the read end of a pipe whose write end only the wrapper holds; the end
    of the wrapper, however it came (SIGKILL included), closes it, and the guard kills
    the group, itself with it. It ignores the stops' signals, which the script's group
    receives and may outlive. Returns the guard and the pipe's write end, to be closed
    once the group is gone; (None, None) when the group already is."""
    read_end, write_end = os.pipe()
    try:
        guard = subprocess.Popen(
            ["/bin/sh", "-c", "trap '' HUP INT TERM; read _; kill -KILL 0"],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.setpgid(0, pgid),
        )
    except (OSError, subprocess.SubprocessError):
        os.close(write_end)
        return None, None
    finally:
        os.close(read_end)
    # Never written: the wrapper's end closes it. The script, started before it, cannot
    # hold it open.
    return guard, write_end
