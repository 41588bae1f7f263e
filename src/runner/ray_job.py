# jax-runner's entrypoint for a Ray job (`python -m jax_runner_ray_job`).
#
# It runs the script as a local attempt would (`python <script>` in the script's folder,
# the script as __main__), with the telemetry shim, while it keeps the script's stdout
# and stderr apart and samples its process tree's memory. Then it prints one framed,
# base64-encoded zip to the job's log: its report, the two streams, the telemetry and,
# when no file system is shared and the folder is small enough, the data folder. The
# job's log is the one channel the Jobs REST API gives back, so nothing else is needed
# on the cluster. Its exit status is the script's.
import base64
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

PREFIX = "JAX_RUNNER_RAY_"


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


def tree(root):
    """Resident bytes of `root` and every process below it, and their PIDs, from /proc."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    page = os.sysconf("SC_PAGE_SIZE")
    total, todo, pids = 0, [root], []
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(children.get(pid, []))
        try:
            with open("/proc/%d/statm" % pid, "rb") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            pass
    return total, pids


def pump(src, sink, echo, lock):
    """Copies one of the script's streams into `sink` and, as it comes, into the
    job's log (the cluster's own view of the job stays readable)."""
    while True:
        chunk = src.read1(65536)
        if not chunk:
            break
        sink.write(chunk)
        with lock:
            echo.write(chunk)
            echo.flush()


def folder_files(root, marker):
    """(relative path, size) of the regular files under `root`, folders (size None),
    and how many entries were left out (links, devices): a link could point anywhere.
    The runner's marker is not the script's."""
    files, left_out = [], 0
    for here, dirs, names in os.walk(root):
        rel_here = os.path.relpath(here, root)
        for d in list(dirs):
            if os.path.islink(os.path.join(here, d)):
                dirs.remove(d)
                left_out += 1
            else:
                files.append((os.path.normpath(os.path.join(rel_here, d)), None))
        for n in names:
            if here == root and n == marker:
                continue
            st = os.lstat(os.path.join(here, n))
            if not (st.st_mode & 0o170000) == 0o100000:
                left_out += 1
                continue
            files.append((os.path.normpath(os.path.join(rel_here, n)), st.st_size))
    return files, left_out


def make_fresh(path):
    """Creates `path` on this node when it does not exist here, so the script sees the
    same data folder path as it would locally (and a path it records stays right once
    the files are copied back). Returns the topmost folder created, to be removed
    afterwards; None when the path exists already (another job's, or stale) or cannot
    be made: the script then gets a folder of its own elsewhere."""
    if not path or not os.path.isabs(path) or os.path.lexists(path):
        return None
    top = path
    while not os.path.lexists(os.path.dirname(top)):
        top = os.path.dirname(top)
    try:
        os.makedirs(path)
    except OSError:
        return None
    return top


def tail_of(path, limit):
    """The last `limit` bytes of a file and how many bytes were cut before them."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - limit))
        return fh.read(), max(0, size - limit)


def main():
    env = dict(os.environ)
    script = env.pop(PREFIX + "SCRIPT")
    nonce = env.pop(PREFIX + "NONCE")
    limit = int(env.pop(PREFIX + "MAX_RETURN"))
    node = env.pop(PREFIX + "NODE", "") or os.uname().nodename
    for key in [k for k in env if k.startswith(PREFIX)]:
        env.pop(key)
    work = tempfile.mkdtemp(prefix="jax-runner-job-")
    wanted = env.get("GNN_OUTPUT_DIR", "")
    # The runner leaves a marker in the data folder: seen here, the folder is shared.
    marker = ".jax-runner-ray-" + nonce
    shared = bool(wanted) and os.path.isfile(os.path.join(wanted, marker))
    data_dir, created = wanted, None
    if not shared:
        created = make_fresh(wanted)
        if created is None:
            data_dir = os.path.join(work, "data")
            os.makedirs(data_dir)
        for key in ("GNN_OUTPUT_DIR", "JAX_OUTPUT_DIR"):
            env[key] = data_dir
        profile = env.get("JAX_RUNNER_PROFILE_DIR", "")
        if wanted and profile.startswith(wanted):
            env["JAX_RUNNER_PROFILE_DIR"] = data_dir + profile[len(wanted):]
    here = os.path.dirname(os.path.abspath(__file__))
    shim = os.path.join(here, "jax_runner_shim")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [shim, env.get("PYTHONPATH", "")] if p)
    telemetry = os.path.join(work, "telemetry.json")
    env["JAX_RUNNER_TELEMETRY"] = telemetry

    stopped = []
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )

    def on_stop(signum, _frame):
        stopped.append(signum)
        try:
            os.killpg(child.pid, signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    lock = threading.Lock()
    echo = sys.stdout.buffer
    streams = {}
    pumps = []
    for name, src in (("stdout", child.stdout), ("stderr", child.stderr)):
        streams[name] = open(os.path.join(work, name), "wb")
        t = threading.Thread(target=pump, args=(src, streams[name], echo, lock), daemon=True)
        t.start()
        pumps.append(t)
    peak = [0]
    # Whether a process of the script held a GPU device open: None until first looked.
    gpu = [None]
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                rss, pids = tree(child.pid)
                peak[0] = max(peak[0], rss)
                if not gpu[0]:
                    gpu[0] = any(holds_gpu_device(p) for p in pids)
            except OSError:
                pass
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    while True:
        try:
            _, status, usage = os.wait4(child.pid, 0)
            break
        except InterruptedError:
            continue
    done.set()
    # What the script left running would hold its pipes open: a local run kills it too.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    for t in pumps:
        t.join(5)
    for f in streams.values():
        f.close()

    report = {
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "user_cpu_s": usage.ru_utime,
        "system_cpu_s": usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "peak_rss_bytes": peak[0],
        "gpu_device_opened": gpu[0],
        "stopped": bool(stopped),
        "node": node,
        "shared_filesystem": shared,
    }
    try:
        with open(telemetry, encoding="utf-8") as fh:
            report["telemetry"] = json.load(fh)
    except (OSError, ValueError):
        report["telemetry"] = None

    files, left_out = folder_files(data_dir, marker) if os.path.isdir(data_dir) else ([], 0)
    size = sum(s for _, s in files if s is not None)
    report["data_bytes"] = size
    report["data_files"] = sum(1 for _, s in files if s is not None)
    report["data_left_out"] = left_out
    returned = not shared and size <= limit
    report["data_returned"] = returned
    if not shared and not returned:
        report["data_left_at"] = data_dir
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("stdout", "stderr"):
            body, cut = tail_of(os.path.join(work, name), limit)
            report[name + "_cut_bytes"] = cut
            z.writestr(name, body)
        if returned:
            for rel, s in files:
                path = os.path.join(data_dir, rel)
                if s is None:
                    z.writestr("data/" + rel + "/", b"")
                else:
                    z.write(path, "data/" + rel)
        z.writestr("report.json", json.dumps(report))
    payload = base64.b64encode(buf.getvalue()).decode("ascii")
    with lock:
        out = sys.stdout
        out.flush()
        out.write("\n==jax-runner-return:%s:begin==\n" % nonce)
        for i in range(0, len(payload), 16384):
            out.write(payload[i:i + 16384] + "\n")
        out.write("==jax-runner-return:%s:end:%d==\n" % (nonce, len(payload)))
        out.flush()
    # Files that came back (or were never here) need not stay on the node.
    if shared or returned:
        shutil.rmtree(work, ignore_errors=True)
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
    else:
        for name in ("stdout", "stderr", "telemetry.json"):
            try:
                os.remove(os.path.join(work, name))
            except OSError:
                pass
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
