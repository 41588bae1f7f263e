# The Ray job's folders on its node (`jax_runner_ray_folders`, beside the wrapper in
# jax-runner's package): where the script writes its data, made on the node with the
# path it has locally when no file system is shared, and removed once the files are
# packed. Jobs running side by side on one node share the folders above their data
# folders: each folder a job makes is marked, and a folder is removed only when it is
# empty and a job made it, so the job that ends first never removes another's data.
# Making, removing and sweeping are done under one lock of the node's, so no job sees
# another's half-done step (a folder made but not yet marked, removed but still marked).
import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile


def made_marks():
    """The folder of marks for folders jobs of this user made on this node (one file
    per folder, named by its path's hash and holding the path), or None where it
    cannot be trusted: several jobs of one run share the folders above their data
    folders, and whichever ends last may remove them only when a job made them."""
    marks = os.path.join(tempfile.gettempdir(), "jax-runner-made-%d" % os.getuid())
    try:
        os.makedirs(marks, mode=0o700, exist_ok=True)
        st = os.lstat(marks)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None
    # Marks of folders gone by other hands (a data folder left on the node over
    # --ray-max-return, removed later) are dropped: each names its folder.
    with node_lock(marks):
        for name in sorted(os.listdir(marks))[:1000]:
            if name == LOCK:
                continue
            mark = os.path.join(marks, name)
            try:
                with open(mark, "rb") as fh:
                    folder = fh.read(4096)
                if not os.path.lexists(folder):
                    os.remove(mark)
            except OSError:
                pass
    return marks


# The lock's file, in the folder of marks.
LOCK = ".lock"


@contextlib.contextmanager
def node_lock(marks):
    """Holds the node's lock (an exclusive `flock` on a file in the folder of marks)
    while the body makes, removes or sweeps: a folder is then always made and marked,
    or removed and unmarked, in one step as other jobs see it. It is held for a few
    system calls, and the kernel drops it with a job that dies. Without the folder of
    marks, or where the lock cannot be taken, the body runs unlocked: making retries
    when a folder above vanishes, and a folder is only ever removed when it is empty."""
    fd = None
    if marks is not None:
        try:
            fd = os.open(
                os.path.join(marks, LOCK),
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            if fd is not None:
                os.close(fd)
                fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def mark_of(marks, path):
    return os.path.join(marks, hashlib.sha256(os.fsencode(path)).hexdigest())


def mark(marks, folder):
    """Notes that a job made `folder` (the mark holds its path)."""
    try:
        with open(mark_of(marks, folder), "wb") as fh:
            fh.write(os.fsencode(folder))
    except OSError:
        pass


def make_fresh(path, marks):
    """Creates `path` on this node when it does not exist here, so the script sees the
    same data folder path as it would locally (and a path it records stays right once
    the files are copied back). Each folder above it that this job makes is marked.
    Returns whether it made `path`; False when the path exists already (another job's,
    or stale) or cannot be made: the script then gets a folder of its own elsewhere."""
    if not path or not os.path.isabs(path):
        return False
    with node_lock(marks):
        return make_levels(path, marks)


def make_levels(path, marks):
    """`make_fresh`'s work, under the node's lock."""
    if os.path.lexists(path):
        return False
    # Made one level at a time, so that what this job made is known exactly: another
    # job of the run may make (or remove) a shared folder above at the same moment.
    for _ in range(5):
        missing = []
        here = path
        while not os.path.lexists(here):
            missing.append(here)
            here = os.path.dirname(here)
        try:
            for folder in reversed(missing):
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    if folder == path:
                        return False
                    continue
                if folder != path and marks is not None:
                    mark(marks, folder)
            return True
        except FileNotFoundError:
            continue  # a folder above was removed by a job that ended: again
        except OSError:
            return False
    return False


def remove_made(path, marks):
    """Removes `path`, then each empty folder above it that a job made (marked), up to
    the first that is not empty or was not made: never a folder another job uses."""
    shutil.rmtree(path, ignore_errors=True)
    if marks is None:
        return
    with node_lock(marks):
        remove_levels(os.path.dirname(path), marks)


def remove_levels(here, marks):
    """`remove_made`'s climb, under the node's lock."""
    while here != os.path.dirname(here):
        made = mark_of(marks, here)
        if not os.path.exists(made):
            return
        try:
            os.rmdir(here)
        except FileNotFoundError:
            pass
        except OSError:
            return  # another job's data folder is still below
        try:
            os.remove(made)
        except OSError:
            pass
        here = os.path.dirname(here)


def data_folder(env, work, marker, marks):
    """Where the script writes its data, set in `env`: the local folder itself when it
    is shared (the runner's marker is seen here), else the same path made fresh on
    this node, else a folder in `work`. Returns (folder, shared, whether it was made)."""
    wanted = env.get("GNN_OUTPUT_DIR", "")
    if wanted and os.path.isfile(os.path.join(wanted, marker)):
        return wanted, True, False
    created = make_fresh(wanted, marks)
    data_dir = wanted if created else os.path.join(work, "data")
    os.makedirs(data_dir, exist_ok=True)
    for key in ("GNN_OUTPUT_DIR", "JAX_OUTPUT_DIR"):
        env[key] = data_dir
    profile = env.get("JAX_RUNNER_PROFILE_DIR", "")
    if wanted and profile.startswith(wanted):
        env["JAX_RUNNER_PROFILE_DIR"] = data_dir + profile[len(wanted):]
    return data_dir, False, created
