//! The filters at work: real calls in forked children, once without the filters and
//! once under them, so each check shows what the filters change rather than what the
//! machine refuses anyway; and a real Python doing what generated scripts do.
#![cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use libc::{c_int, c_long, c_ulong};

use super::*;

fn prepared() -> Vec<Vec<u8>> {
    programs().unwrap().into_iter().map(|p| p.bytes).collect()
}

/// A raw call's result: what it returned, or minus its errno.
fn result(rc: c_long) -> i64 {
    match rc {
        0.. => rc,
        _ => -i64::from(io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// The result of a call that made a process: 0 once that process is reaped.
fn reaped(rc: c_long) -> i64 {
    if rc > 0 {
        // SAFETY: waiting for the child this probe made.
        unsafe { libc::waitpid(rc as libc::pid_t, std::ptr::null_mut(), 0) };
        return 0;
    }
    result(rc)
}

/// Runs `probe` in a forked child, under the filters when given, and returns its result.
fn in_child(filters: Option<&[Vec<u8>]>, probe: fn() -> i64) -> i64 {
    let mut fds = [0; 2];
    // SAFETY: plain fd calls; the child only makes raw calls, then `_exit`s.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let value = match filters.map_or(Ok(()), apply_prepared) {
                Ok(()) => probe(),
                Err(_) => i64::MIN,
            };
            libc::write(fds[1], (&value as *const i64).cast(), 8);
            libc::_exit(0);
        }
        libc::close(fds[1]);
        let mut value = 0i64;
        let n = libc::read(fds[0], (&mut value as *mut i64).cast(), 8);
        libc::close(fds[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        assert_eq!(
            n, 8,
            "the probe's child died first (wait status {status:#x})"
        );
        assert_ne!(value, i64::MIN, "the filters could not be installed");
        value
    }
}

fn shown(value: i64) -> String {
    match value {
        0.. => format!("success ({value})"),
        _ => io::Error::from_raw_os_error(-value as i32).to_string(),
    }
}

/// The filters make `probe` fail with `errno`. Where it fails so without them too, the
/// check proves nothing here, and says so.
fn refused(name: &str, probe: fn() -> i64, errno: c_int) {
    let without = in_child(None, probe);
    let with = in_child(Some(&prepared()), probe);
    let (before, after) = (shown(without), shown(with));
    eprintln!("{name}: {before} without the filters, {after} under them");
    assert_eq!(with, -i64::from(errno), "{name} under the filters: {after}");
    if without == with {
        eprintln!("note: {name} fails so without the filters too: this proves nothing here");
    }
}

fn allowed(name: &str, probe: fn() -> i64) {
    let with = in_child(Some(&prepared()), probe);
    assert!(with >= 0, "{name} under the filters: {}", shown(with));
}

/// A raw clone with `flags`; the new process exits at once.
fn clone_with(flags: c_int) -> i64 {
    // SAFETY: like fork: the child has a copy of this stack and `_exit`s at once.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as c_ulong,
            0,
            0,
            0,
            0,
        )
    };
    if rc == 0 {
        unsafe { libc::_exit(0) };
    }
    reaped(rc)
}

fn socket(family: c_int, kind: c_int) -> i64 {
    // SAFETY: plain fd calls.
    let fd = result(unsafe { libc::syscall(libc::SYS_socket, family, kind, 0) });
    if fd >= 0 {
        unsafe { libc::close(fd as c_int) };
        return 0;
    }
    fd
}

#[test]
fn namespaces_cannot_be_made() {
    let unshare = || result(unsafe { libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER) });
    refused("unshare(CLONE_NEWUSER)", unshare, libc::EPERM);
    refused(
        "clone(CLONE_NEWUSER)",
        || clone_with(libc::CLONE_NEWUSER),
        libc::EPERM,
    );
    refused(
        "clone(CLONE_NEWNET)",
        || clone_with(libc::CLONE_NEWNET),
        libc::EPERM,
    );
    refused(
        "clone(CLONE_NEWNS)",
        || clone_with(libc::CLONE_NEWNS),
        libc::EPERM,
    );
    let clone3 = || {
        // struct clone_args, version 0: flags, pidfd, child_tid, parent_tid,
        // exit_signal, stack, stack_size, tls.
        let args: [u64; 8] = [
            libc::CLONE_NEWUSER as u64,
            0,
            0,
            0,
            libc::SIGCHLD as u64,
            0,
            0,
            0,
        ];
        // SAFETY: like fork, as in `clone_with`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                args.as_ptr(),
                std::mem::size_of_val(&args),
            )
        };
        if rc == 0 {
            unsafe { libc::_exit(0) };
        }
        reaped(rc)
    };
    refused("clone3(CLONE_NEWUSER)", clone3, libc::ENOSYS);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_x32_abi_is_no_way_around() {
    // With x32 off in the kernel, the call gives ENOSYS without the filters: the
    // filter still sees the number first and must answer EPERM.
    let unshare = || {
        let nr = rules::X32_SYSCALL_BIT | libc::SYS_unshare;
        result(unsafe { libc::syscall(nr, libc::CLONE_NEWUSER) })
    };
    refused("x32 unshare(CLONE_NEWUSER)", unshare, libc::EPERM);
}

#[test]
fn forks_and_threads_still_work() {
    allowed("clone(SIGCHLD)", || clone_with(0));
    allowed("fork", || reaped(unsafe { libc::fork() } as c_long));
    let thread = || match std::thread::Builder::new().spawn(|| 7).map(|t| t.join()) {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => -1,
        Err(e) => -i64::from(e.raw_os_error().unwrap_or(0)),
    };
    allowed("a thread", thread);
}

#[test]
fn host_sockets_are_refused_and_others_are_not() {
    refused(
        "socket(AF_UNIX)",
        || socket(libc::AF_UNIX, libc::SOCK_STREAM),
        libc::EPERM,
    );
    refused(
        "socket(AF_VSOCK)",
        || socket(libc::AF_VSOCK, libc::SOCK_STREAM),
        libc::EPERM,
    );
    allowed("socket(AF_INET, SOCK_DGRAM)", || {
        socket(libc::AF_INET, libc::SOCK_DGRAM)
    });
    let pair = || {
        let mut fds = [0; 2];
        let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
        result(rc.into())
    };
    allowed("socketpair(AF_UNIX)", pair);
}

/// A file made setuid or setgid, by chmod or at creation, is refused; a plain mode is
/// not (the probes work on a file they make in a fresh temporary folder).
#[test]
fn setuid_and_setgid_files_cannot_be_made() {
    fn in_tmp(mode: libc::mode_t, by_chmod: bool) -> i64 {
        let dir = std::env::temp_dir().join(format!("jr-setid-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = std::ffi::CString::new(dir.join("f").as_os_str().as_encoded_bytes()).unwrap();
        let _ = std::fs::remove_file(dir.join("f"));
        // SAFETY: plain calls on a path this test owns.
        unsafe {
            let create = if by_chmod { 0o644 } else { mode };
            let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY, create);
            if fd < 0 || !by_chmod {
                return result(fd.into());
            }
            result(libc::fchmod(fd, mode).into())
        }
    }
    refused("fchmod 04755", || in_tmp(0o4755, true), libc::EPERM);
    refused("fchmod 02755", || in_tmp(0o2755, true), libc::EPERM);
    refused(
        "open(O_CREAT, 04755)",
        || in_tmp(0o4755, false),
        libc::EPERM,
    );
    allowed("fchmod 0755", || in_tmp(0o755, true));
    allowed("open(O_CREAT, 0644)", || in_tmp(0o644, false));
}

/// Extended attributes can be read, never set or removed, by path or descriptor.
#[test]
fn extended_attributes_are_read_only() {
    fn on_file(call: u8) -> i64 {
        let dir = std::env::temp_dir().join(format!("jr-xattr-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("f");
        let _ = std::fs::write(&file, b"x");
        let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        let name = c"user.jax_runner_test";
        // SAFETY: plain calls on a file this test owns, with buffers it owns.
        unsafe {
            let value = b"v";
            let set = |p: *const libc::c_char| {
                libc::setxattr(p, name.as_ptr(), value.as_ptr().cast(), 1, 0)
            };
            let rc = match call {
                0 => set(path.as_ptr()),
                1 => libc::lsetxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), 1, 0),
                2 => {
                    let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                    libc::fsetxattr(fd, name.as_ptr(), value.as_ptr().cast(), 1, 0)
                }
                3 => libc::removexattr(path.as_ptr(), name.as_ptr()),
                4 => {
                    let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                    libc::fremovexattr(fd, name.as_ptr())
                }
                _ => libc::listxattr(path.as_ptr(), std::ptr::null_mut(), 0) as c_int,
            };
            result(rc.into())
        }
    }
    refused("setxattr", || on_file(0), libc::EPERM);
    refused("lsetxattr", || on_file(1), libc::EPERM);
    refused("fsetxattr", || on_file(2), libc::EPERM);
    refused("removexattr", || on_file(3), libc::EPERM);
    refused("fremovexattr", || on_file(4), libc::EPERM);
    allowed("listxattr", || on_file(5));
}

#[test]
fn mounts_io_uring_and_terminal_input_are_refused() {
    let mount = || {
        let (target, fs) = (c"/nonexistent/jax-runner", c"tmpfs");
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                target.as_ptr(),
                fs.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        result(rc.into())
    };
    refused("mount", mount, libc::EPERM);
    // No entries: without the filter the kernel answers EINVAL and makes no ring.
    let io_uring = || {
        let params = [0u8; 120];
        result(unsafe { libc::syscall(libc::SYS_io_uring_setup, 0, params.as_ptr()) })
    };
    refused("io_uring_setup", io_uring, libc::EPERM);
    // On no file: without the filter, EBADF; nothing is typed anywhere.
    let tiocsti = || result(unsafe { libc::ioctl(-1, libc::TIOCSTI, c"x".as_ptr()) }.into());
    refused("ioctl(TIOCSTI)", tiocsti, libc::EPERM);
}

/// What a generated script does, short of the GPU.
const PYTHON_CHECK: &str = r#"
import asyncio, os, socket, subprocess, sys, threading
import multiprocessing as mp
from concurrent.futures import ThreadPoolExecutor

def child(conn):
    conn.send(os.getpid())

t = threading.Thread(target=print, args=("thread ran",)); t.start(); t.join()
assert sum(ThreadPoolExecutor(4).map(abs, range(-5, 5))) == 25
subprocess.run(["true"], check=True)
out = subprocess.run([sys.executable, "-c", "print(6*7)"], capture_output=True, text=True)
assert out.stdout.strip() == "42", out
ctx = mp.get_context("fork")
a, b = ctx.Pipe()
p = ctx.Process(target=child, args=(b,)); p.start()
assert a.recv() == p.pid; p.join(); assert p.exitcode == 0
with ctx.Pool(2) as pool:
    assert pool.map(abs, [-1, -2]) == [1, 2]
s1, s2 = socket.socketpair(); s1.sendall(b"x"); assert s2.recv(1) == b"x"
asyncio.run(asyncio.sleep(0))
# Copies keep the mode and times (chmod, utime stay granted) and pass over the
# refused extended attributes.
import shutil, tempfile
with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "a"); open(src, "w").write("x"); os.chmod(src, 0o640)
    try:
        os.setxattr(src, "user.tag", b"v")
        sys.exit("setting an extended attribute was allowed")
    except PermissionError:
        pass
    shutil.copy2(src, os.path.join(d, "b")); shutil.copy(src, os.path.join(d, "c"))
    assert os.stat(os.path.join(d, "b")).st_mode & 0o777 == 0o640
    print("copies kept their mode")
try:
    socket.socket(socket.AF_UNIX)
    sys.exit("an AF_UNIX socket was allowed")
except PermissionError:
    print("AF_UNIX socket refused")
try:
    import numpy as np
    x = np.ones((256, 256)); assert float((x @ x).sum()) == 256.0 ** 3
    print("numpy", np.__version__)
except ImportError:
    print("numpy not installed here")
try:
    import jax, jax.numpy as jnp
    assert float(jax.jit(lambda v: (v * 2).sum())(jnp.arange(4.0))) == 12.0
    print("jax", jax.__version__)
except ImportError:
    print("jax not installed here")
"#;

/// `JAX_RUNNER_PYTHON`, else the first environment `jax-runner setup` made, else
/// `python3`.
fn test_python() -> PathBuf {
    if let Some(python) = std::env::var_os("JAX_RUNNER_PYTHON") {
        return python.into();
    }
    let venvs = std::fs::read_dir(crate::paths::cache_dir().join("venvs"));
    let made = venvs
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/python"));
    made.into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| "python3".into())
}

#[test]
fn python_still_works_under_the_filters() {
    let python = test_python();
    let progs = prepared();
    let mut cmd = Command::new(&python);
    cmd.args(["-c", PYTHON_CHECK]);
    // SAFETY: apply_prepared allocates nothing and only calls prctl.
    unsafe { cmd.pre_exec(move || apply_prepared(&progs)) };
    let out = cmd.output().expect("python starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{}: {stdout}", python.display());
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sharing the host's network namespace (the built-in layer alone), a script gets no
/// inet, netlink or packet socket; with a namespace of its own it keeps them, and
/// `socketpair` stays allowed either way.
#[test]
fn without_a_network_namespace_the_network_is_refused() {
    let host: Vec<Vec<u8>> = programs_for(Separation::NONE, false)
        .unwrap()
        .into_iter()
        .map(|p| p.bytes)
        .collect();
    for (name, family, kind) in [
        ("AF_INET stream", libc::AF_INET, libc::SOCK_STREAM),
        ("AF_INET datagram", libc::AF_INET, libc::SOCK_DGRAM),
        ("AF_INET6", libc::AF_INET6, libc::SOCK_DGRAM),
        ("AF_NETLINK", libc::AF_NETLINK, libc::SOCK_RAW),
    ] {
        let probe: fn() -> i64 = match (family, kind) {
            (libc::AF_INET, libc::SOCK_STREAM) => || socket(libc::AF_INET, libc::SOCK_STREAM),
            (libc::AF_INET, _) => || socket(libc::AF_INET, libc::SOCK_DGRAM),
            (libc::AF_INET6, _) => || socket(libc::AF_INET6, libc::SOCK_DGRAM),
            _ => || socket(libc::AF_NETLINK, libc::SOCK_RAW),
        };
        let with = in_child(Some(&host), probe);
        assert_eq!(with, -i64::from(libc::EPERM), "{name}: {}", shown(with));
        assert!(
            in_child(Some(&prepared()), probe) >= 0,
            "{name} in a namespace"
        );
    }
    let pair = || {
        let mut fds = [0; 2];
        // SAFETY: socketpair fills two fds the child never uses again.
        let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
        result(rc.into())
    };
    assert!(in_child(Some(&host), pair) >= 0);
}

/// The boundary of a GPU run's grant, in each separation: the CUDA driver's Unix
/// `SOCK_SEQPACKET` socket (with `SOCK_CLOEXEC`, as the driver asks) is made; a Unix
/// stream or datagram socket, which could reach an agent or a daemon, is not; and a
/// run that may not use a GPU makes none.
#[test]
fn a_gpu_run_makes_the_cuda_socket_and_no_other_unix_socket() {
    let filters = |separation, gpu| -> Vec<Vec<u8>> {
        programs_for(separation, gpu)
            .unwrap()
            .into_iter()
            .map(|p| p.bytes)
            .collect()
    };
    let cuda = || socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC);
    let stream = || socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC);
    let datagram = || socket(libc::AF_UNIX, libc::SOCK_DGRAM);
    assert!(
        in_child(None, cuda) >= 0,
        "this machine makes no such socket"
    );
    for separation in [Separation::ALL, Separation::NONE] {
        let gpu = filters(separation, true);
        let cpu = filters(separation, false);
        assert_eq!(in_child(Some(&gpu), cuda), 0, "{separation:?}");
        for other in [stream, datagram] {
            assert_eq!(in_child(Some(&gpu), other), -i64::from(libc::EPERM));
        }
        assert_eq!(in_child(Some(&cpu), cuda), -i64::from(libc::EPERM));
    }
    // The grant adds to a namespace's own network, never takes from it.
    let inet = || socket(libc::AF_INET, libc::SOCK_DGRAM);
    assert_eq!(in_child(Some(&filters(Separation::ALL, true)), inet), 0);
    assert_eq!(
        in_child(Some(&filters(Separation::NONE, true)), inet),
        -i64::from(libc::EPERM)
    );
}

/// Where no PID namespace separates scripts, the calls that change a process's limits
/// and scheduling reach the caller alone: Python's `os.nice`, `resource.setrlimit`
/// and `os.sched_setaffinity(0, …)` keep working, while the same calls on the
/// parent (the runner, the zygote, another script) are refused. SysV IPC is refused
/// where no IPC namespace separates the script from the host's.
#[test]
fn without_a_pid_namespace_calls_on_a_process_reach_only_the_caller() {
    let none: Vec<Vec<u8>> = programs_for(Separation::NONE, false)
        .unwrap()
        .into_iter()
        .map(|p| p.bytes)
        .collect();
    fn rlimit_on(pid: libc::pid_t) -> i64 {
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: reads into a local; the new limit is the old one (nothing changes).
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
        if rc != 0 {
            return result(rc.into());
        }
        // SAFETY: sets the limit to what it was.
        result(
            unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &old, std::ptr::null_mut()) }.into(),
        )
    }
    let own_rlimit = || rlimit_on(0);
    // SAFETY: getppid has no arguments.
    let parent_rlimit = || rlimit_on(unsafe { libc::getppid() });
    let own_nice = || {
        // SAFETY: integer arguments; the caller's own nice value, unchanged.
        let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        result(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, now) }.into())
    };
    let parent_nice = || {
        // SAFETY: integer arguments; the parent's nice value, unchanged.
        let parent = unsafe { libc::getppid() } as libc::id_t;
        let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, parent) };
        result(unsafe { libc::setpriority(libc::PRIO_PROCESS, parent, now) }.into())
    };
    let user_nice = || {
        // SAFETY: integer arguments; every process of the user, unchanged.
        let now = unsafe { libc::getpriority(libc::PRIO_USER, 0) };
        result(unsafe { libc::setpriority(libc::PRIO_USER, 0, now) }.into())
    };
    fn affinity_of(pid: libc::pid_t) -> i64 {
        // SAFETY: a zeroed set filled by the kernel, then given back unchanged.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(pid, size, &mut set) != 0 {
                return result(-1);
            }
            result(libc::sched_setaffinity(pid, size, &set).into())
        }
    }
    let own_affinity = || affinity_of(0);
    // SAFETY: getppid has no arguments.
    let parent_affinity = || affinity_of(unsafe { libc::getppid() });
    let shm = || {
        // SAFETY: a private segment of one page, removed at once when made.
        let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, 0o600) };
        if id >= 0 {
            unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        }
        result(id.into())
    };
    for (name, probe) in [
        ("prlimit on itself", own_rlimit as fn() -> i64),
        ("setpriority on itself", own_nice),
        ("sched_setaffinity on itself", own_affinity),
    ] {
        let got = in_child(Some(&none), probe);
        assert!(got >= 0, "{name}: {}", shown(got));
    }
    for (name, probe) in [
        ("prlimit on the parent", parent_rlimit as fn() -> i64),
        ("setpriority on the parent", parent_nice),
        ("setpriority on the user's processes", user_nice),
        ("sched_setaffinity on the parent", parent_affinity),
        ("shmget on the host's IPC", shm),
    ] {
        let got = in_child(Some(&none), probe);
        assert_eq!(got, -i64::from(libc::EPERM), "{name}: {}", shown(got));
        // Without the filter the same call works: the refusal is the filter's.
        let bare = in_child(None, probe);
        assert!(bare >= 0, "{name} without the filter: {}", shown(bare));
    }
}
