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
import zipfile

from jax_runner_ray_folders import data_folder, made_marks, remove_made
from jax_runner_ray_procs import ask_for_stacks, guard_group, holds_gpu_device, tree

PREFIX = "JAX_RUNNER_RAY_"
# The job's log is written by the streams' pumps and by the final block: one at a time.
LOCK = threading.Lock()


def pump(src, sink, echo, lock):
    """Copies one of the script's streams into `sink` and, as it comes, into the
    job's log (the cluster's own view of the job stays readable). The log gets whole
    lines only, so a line of one stream never runs into a line of the other; a line
    longer than a read goes out as it is."""
    pending = b""
    while True:
        chunk = src.read1(65536)
        if not chunk:
            break
        sink.write(chunk)
        pending += chunk
        cut = pending.rfind(b"\n") + 1
        if cut == 0:
            if len(pending) < 65536:
                continue
            cut = len(pending)
        with lock:
            echo.write(pending[:cut])
            echo.flush()
        pending = pending[cut:]
    if pending:
        with lock:
            echo.write(pending + b"\n")
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


def tail_of(path, limit):
    """The last `limit` bytes of a file and how many bytes were cut before them."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(max(0, size - limit))
        return fh.read(), max(0, size - limit)


def run(script, env, work, max_procs, memory_limit):
    """Runs the script to its end: its streams into `work` (and the job's log), its
    tree's memory and GPU devices sampled, and held to `max_procs` tasks and
    `memory_limit` bytes (0: none) as the runner's watchdog holds a local one: the
    group is killed at the first sample past either. Returns its report's process
    figures."""
    stopped = []
    # What the watchdog stopped it for: "process_limit" or "memory_limit".
    limit_hit = []
    # A group of its own, which the stops and the watchdog kill whole.
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=os.setpgrp,
    )
    guard, guard_pipe = guard_group(child.pid)

    def on_stop(signum, _frame):
        # The first stop asks for the script's stacks; a second goes straight through.
        if not stopped:
            try:
                ask_for_stacks(child.pid)
            except OSError:
                pass
        stopped.append(signum)
        try:
            os.killpg(child.pid, signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    streams, pumps = [], []
    for name, src in (("stdout", child.stdout), ("stderr", child.stderr)):
        sink = open(os.path.join(work, name), "wb")
        t = threading.Thread(target=pump, args=(src, sink, sys.stdout.buffer, LOCK), daemon=True)
        t.start()
        streams.append(sink)
        pumps.append(t)
    # The peak, what it counts, and the two samples before: as locally, a rise of a
    # tree of several processes counts once three samples in a row show it
    # (proportional sizes read one process after another run over while processes
    # map the same pages).
    peak = [0, "pss", []]
    # Whether a process of the script held a GPU device open: None until first looked.
    gpu = [None]
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                now, proportional, pids, tasks = tree(child.pid)
                # One process has no one to skew with: its figure stands as read.
                kept = now if len(pids) <= 1 else min([now] + peak[2])
                peak[2] = (peak[2] + [now])[-2:]
                if kept > peak[0]:
                    peak[0], peak[1] = kept, "pss" if proportional else "rss"
                if not gpu[0]:
                    gpu[0] = any(holds_gpu_device(p) for p in pids)
                if not limit_hit:
                    if max_procs and tasks > max_procs:
                        limit_hit.append("process_limit")
                    elif memory_limit and kept > memory_limit:
                        limit_hit.append("memory_limit")
                    if limit_hit:
                        os.killpg(child.pid, signal.SIGKILL)
            except OSError:
                pass
            done.wait(0.2)

    threading.Thread(target=sample, daemon=True).start()
    _, status, usage = os.wait4(child.pid, 0)
    done.set()
    # What the script left running would hold its pipes open: a local run kills it too.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    if guard is not None:
        # Closed first: a guard the kill missed ends the group itself.
        os.close(guard_pipe)
        guard.wait()
    for t in pumps:
        t.join(5)
    for f in streams:
        f.close()
    return status, {
        "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "user_cpu_s": usage.ru_utime,
        "system_cpu_s": usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "peak_rss_bytes": peak[0],
        "memory_source": peak[1],
        "gpu_device_opened": gpu[0],
        "stopped": bool(stopped),
        "limit_hit": limit_hit[0] if limit_hit else None,
    }


def pack(report, work, data_dir, files, returned, limit):
    """The zip sent back: both streams (their last `limit` bytes), the data folder
    when it is returned, and the report."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("stdout", "stderr"):
            body, cut = tail_of(os.path.join(work, name), limit)
            report[name + "_cut_bytes"] = cut
            z.writestr(name, body)
        for rel, size in files if returned else []:
            try:
                if size is None:
                    z.writestr("data/" + rel + "/", b"")
                else:
                    z.write(os.path.join(data_dir, rel), "data/" + rel)
            except OSError:
                report["data_left_out"] += 1
        z.writestr("report.json", json.dumps(report))
    return buf.getvalue()


def emit(nonce, archive):
    """Prints the framed block: the last thing in the job's log."""
    payload = base64.b64encode(archive).decode("ascii")
    with LOCK:
        out = sys.stdout
        out.flush()
        out.write("\n==jax-runner-return:%s:begin==\n" % nonce)
        for i in range(0, len(payload), 16384):
            out.write(payload[i:i + 16384] + "\n")
        out.write("==jax-runner-return:%s:end:%d==\n" % (nonce, len(payload)))
        out.flush()


def main():
    env = dict(os.environ)
    script = env.pop(PREFIX + "SCRIPT")
    nonce = env.pop(PREFIX + "NONCE")
    limit = int(env.pop(PREFIX + "MAX_RETURN"))
    max_procs = int(env.pop(PREFIX + "MAX_PROCS", "0") or 0)
    memory_limit = int(env.pop(PREFIX + "MEMORY_LIMIT", "0") or 0)
    for key in [k for k in env if k.startswith(PREFIX)]:
        env.pop(key)
    work = tempfile.mkdtemp(prefix="jax-runner-job-")
    marker = ".jax-runner-ray-" + nonce
    marks = made_marks()
    data_dir, shared, created = data_folder(env, work, marker, marks)
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_runner_shim")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [shim, env.get("PYTHONPATH", "")] if p)
    telemetry = os.path.join(work, "telemetry.json")
    env["JAX_RUNNER_TELEMETRY"] = telemetry

    status, report = run(script, env, work, max_procs, memory_limit)
    report["node"] = os.uname().nodename
    report["shared_filesystem"] = shared
    try:
        with open(telemetry, encoding="utf-8") as fh:
            report["telemetry"] = json.load(fh)
    except (OSError, ValueError):
        report["telemetry"] = None
    files, left_out = folder_files(data_dir, marker) if os.path.isdir(data_dir) else ([], 0)
    size = sum(s for _, s in files if s is not None)
    returned = not shared and size <= limit
    report.update(
        data_bytes=size,
        data_files=sum(1 for _, s in files if s is not None),
        data_left_out=left_out,
        data_returned=returned,
    )
    if not shared and not returned:
        report["data_left_at"] = data_dir
    emit(nonce, pack(report, work, data_dir, files, returned, limit))
    # Files that came back (or were never here) need not stay on the node.
    for name in ("stdout", "stderr", "telemetry.json"):
        try:
            os.remove(os.path.join(work, name))
        except OSError:
            pass
    if shared or returned:
        shutil.rmtree(work, ignore_errors=True)
        if created:
            remove_made(data_dir, marks)
    elif created:
        shutil.rmtree(work, ignore_errors=True)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
