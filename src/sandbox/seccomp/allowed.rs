//! The calls a sandboxed script is granted, group by group, after Docker's default
//! profile and systemd's `@system-service` set: what Python, numpy, jax and XLA, and
//! the programs a script starts, need to compute, read and write files, run threads
//! and processes, and wait. Every call not named here is refused with `EPERM`
//! (`clone3` and `openat2` answer `ENOSYS` from a second program, so callers fall
//! back to `clone` and `openat`, whose arguments this list can read).
//!
//! Some calls are granted only with safe arguments: `clone` without a namespace flag,
//! `socket` for the families the script's network allows, `ioctl` other than typing
//! into the terminal, modes without a setuid or setgid bit. Calls that act on a
//! process are granted on the caller alone (`pid` 0) wherever no PID namespace of
//! its own separates the script from the runner and the other scripts; SysV IPC and
//! POSIX message queues only where an IPC namespace of its own does.

use libc::c_long;

use super::rules::{Rule, When};
use super::Separation;

const fn any(call: &'static str, nr: c_long) -> Rule {
    Rule {
        call,
        nr,
        when: When::Always,
    }
}

const fn when(call: &'static str, nr: c_long, when: When) -> Rule {
    Rule { call, nr, when }
}

/// A mode without a setuid or setgid bit, in argument `arg`.
const fn no_setid(call: &'static str, nr: c_long, arg: u8) -> Rule {
    when(call, nr, When::NoFlag(arg, super::rules::SETID))
}

// Calls numbered 403 and up share one number on every architecture; libc does not
// name all of them for every target.
const CLOSE_RANGE: c_long = 436;
const FACCESSAT2: c_long = 439;
const EPOLL_PWAIT2: c_long = 441;
const FUTEX_WAITV: c_long = 449;
const FCHMODAT2: c_long = 452;
const PIDFD_OPEN: c_long = 434;
const PIDFD_SEND_SIGNAL: c_long = 424;

/// Files, folders and descriptors.
const FILES: &[Rule] = &[
    any("read", libc::SYS_read),
    any("write", libc::SYS_write),
    any("readv", libc::SYS_readv),
    any("writev", libc::SYS_writev),
    any("pread64", libc::SYS_pread64),
    any("pwrite64", libc::SYS_pwrite64),
    any("preadv", libc::SYS_preadv),
    any("pwritev", libc::SYS_pwritev),
    any("preadv2", libc::SYS_preadv2),
    any("pwritev2", libc::SYS_pwritev2),
    no_setid("openat", libc::SYS_openat, 3),
    any("close", libc::SYS_close),
    any("close_range", CLOSE_RANGE),
    any("fstat", libc::SYS_fstat),
    any("newfstatat", libc::SYS_newfstatat),
    any("statx", libc::SYS_statx),
    any("statfs", libc::SYS_statfs),
    any("fstatfs", libc::SYS_fstatfs),
    any("lseek", libc::SYS_lseek),
    any("getdents64", libc::SYS_getdents64),
    any("getcwd", libc::SYS_getcwd),
    any("chdir", libc::SYS_chdir),
    any("fchdir", libc::SYS_fchdir),
    any("dup", libc::SYS_dup),
    any("dup3", libc::SYS_dup3),
    any("fcntl", libc::SYS_fcntl),
    any("flock", libc::SYS_flock),
    any("fsync", libc::SYS_fsync),
    any("fdatasync", libc::SYS_fdatasync),
    any("sync", libc::SYS_sync),
    any("syncfs", libc::SYS_syncfs),
    any("sync_file_range", libc::SYS_sync_file_range),
    any("truncate", libc::SYS_truncate),
    any("ftruncate", libc::SYS_ftruncate),
    any("fallocate", libc::SYS_fallocate),
    any("fadvise64", libc::SYS_fadvise64),
    any("readahead", libc::SYS_readahead),
    any("mkdirat", libc::SYS_mkdirat),
    any("unlinkat", libc::SYS_unlinkat),
    #[cfg(not(target_arch = "riscv64"))]
    any("renameat", libc::SYS_renameat),
    any("renameat2", libc::SYS_renameat2),
    any("linkat", libc::SYS_linkat),
    any("symlinkat", libc::SYS_symlinkat),
    any("readlinkat", libc::SYS_readlinkat),
    any("faccessat", libc::SYS_faccessat),
    any("faccessat2", FACCESSAT2),
    no_setid("fchmod", libc::SYS_fchmod, 1),
    no_setid("fchmodat", libc::SYS_fchmodat, 2),
    no_setid("fchmodat2", FCHMODAT2, 2),
    any("fchown", libc::SYS_fchown),
    any("fchownat", libc::SYS_fchownat),
    any("umask", libc::SYS_umask),
    any("utimensat", libc::SYS_utimensat),
    no_setid("mknodat", libc::SYS_mknodat, 2),
    any("copy_file_range", libc::SYS_copy_file_range),
    any("sendfile", libc::SYS_sendfile),
    any("splice", libc::SYS_splice),
    any("tee", libc::SYS_tee),
    any("vmsplice", libc::SYS_vmsplice),
    any("pipe2", libc::SYS_pipe2),
    any("getxattr", libc::SYS_getxattr),
    any("lgetxattr", libc::SYS_lgetxattr),
    any("fgetxattr", libc::SYS_fgetxattr),
    any("listxattr", libc::SYS_listxattr),
    any("llistxattr", libc::SYS_llistxattr),
    any("flistxattr", libc::SYS_flistxattr),
    // Extended attributes are read only: no layer but this one holds them (Landlock
    // has no right for them), and Python's copies ignore a refusal (`shutil.copy2`).
    any("inotify_init1", libc::SYS_inotify_init1),
    any("inotify_add_watch", libc::SYS_inotify_add_watch),
    any("inotify_rm_watch", libc::SYS_inotify_rm_watch),
    any("io_setup", libc::SYS_io_setup),
    any("io_destroy", libc::SYS_io_destroy),
    any("io_submit", libc::SYS_io_submit),
    any("io_cancel", libc::SYS_io_cancel),
    any("io_getevents", libc::SYS_io_getevents),
];

/// Memory.
const MEMORY: &[Rule] = &[
    any("brk", libc::SYS_brk),
    any("mmap", libc::SYS_mmap),
    any("munmap", libc::SYS_munmap),
    any("mprotect", libc::SYS_mprotect),
    any("mremap", libc::SYS_mremap),
    any("msync", libc::SYS_msync),
    any("mincore", libc::SYS_mincore),
    any("madvise", libc::SYS_madvise),
    any("mlock", libc::SYS_mlock),
    any("mlock2", libc::SYS_mlock2),
    any("munlock", libc::SYS_munlock),
    any("mlockall", libc::SYS_mlockall),
    any("munlockall", libc::SYS_munlockall),
    any("memfd_create", libc::SYS_memfd_create),
    any("mbind", libc::SYS_mbind),
    any("get_mempolicy", libc::SYS_get_mempolicy),
    any("set_mempolicy", libc::SYS_set_mempolicy),
    any("pkey_alloc", libc::SYS_pkey_alloc),
    any("pkey_free", libc::SYS_pkey_free),
    any("pkey_mprotect", libc::SYS_pkey_mprotect),
    any("membarrier", libc::SYS_membarrier),
];

/// Threads, processes of the script's own, and their signals (a PID namespace, the
/// sandbox uid or Landlock's signal scope keeps signals within the script).
const PROCESSES: &[Rule] = &[
    when(
        "clone",
        libc::SYS_clone,
        When::NoFlag(0, super::rules::NAMESPACES),
    ),
    any("execve", libc::SYS_execve),
    any("execveat", libc::SYS_execveat),
    any("exit", libc::SYS_exit),
    any("exit_group", libc::SYS_exit_group),
    any("wait4", libc::SYS_wait4),
    any("waitid", libc::SYS_waitid),
    any("kill", libc::SYS_kill),
    any("tkill", libc::SYS_tkill),
    any("tgkill", libc::SYS_tgkill),
    any("pidfd_open", PIDFD_OPEN),
    any("pidfd_send_signal", PIDFD_SEND_SIGNAL),
    any("rt_sigaction", libc::SYS_rt_sigaction),
    any("rt_sigprocmask", libc::SYS_rt_sigprocmask),
    any("rt_sigreturn", libc::SYS_rt_sigreturn),
    any("rt_sigpending", libc::SYS_rt_sigpending),
    any("rt_sigtimedwait", libc::SYS_rt_sigtimedwait),
    any("rt_sigqueueinfo", libc::SYS_rt_sigqueueinfo),
    any("rt_tgsigqueueinfo", libc::SYS_rt_tgsigqueueinfo),
    any("rt_sigsuspend", libc::SYS_rt_sigsuspend),
    any("sigaltstack", libc::SYS_sigaltstack),
    any("restart_syscall", libc::SYS_restart_syscall),
    any("getpid", libc::SYS_getpid),
    any("getppid", libc::SYS_getppid),
    any("gettid", libc::SYS_gettid),
    any("getuid", libc::SYS_getuid),
    any("geteuid", libc::SYS_geteuid),
    any("getgid", libc::SYS_getgid),
    any("getegid", libc::SYS_getegid),
    any("getresuid", libc::SYS_getresuid),
    any("getresgid", libc::SYS_getresgid),
    any("getgroups", libc::SYS_getgroups),
    // Without a capability these only keep or swap the ids the process has.
    any("setuid", libc::SYS_setuid),
    any("setgid", libc::SYS_setgid),
    any("setreuid", libc::SYS_setreuid),
    any("setregid", libc::SYS_setregid),
    any("setresuid", libc::SYS_setresuid),
    any("setresgid", libc::SYS_setresgid),
    any("setgroups", libc::SYS_setgroups),
    any("setfsuid", libc::SYS_setfsuid),
    any("setfsgid", libc::SYS_setfsgid),
    any("capget", libc::SYS_capget),
    any("capset", libc::SYS_capset),
    any("getpgid", libc::SYS_getpgid),
    any("setpgid", libc::SYS_setpgid),
    any("getsid", libc::SYS_getsid),
    any("setsid", libc::SYS_setsid),
    any("getpriority", libc::SYS_getpriority),
    any("getrusage", libc::SYS_getrusage),
    any("times", libc::SYS_times),
    any("prctl", libc::SYS_prctl),
    any("set_tid_address", libc::SYS_set_tid_address),
    any("set_robust_list", libc::SYS_set_robust_list),
    any("get_robust_list", libc::SYS_get_robust_list),
    any("rseq", libc::SYS_rseq),
    any("futex", libc::SYS_futex),
    any("futex_waitv", FUTEX_WAITV),
    any("sched_yield", libc::SYS_sched_yield),
    any("sched_getaffinity", libc::SYS_sched_getaffinity),
    any("sched_getparam", libc::SYS_sched_getparam),
    any("sched_getscheduler", libc::SYS_sched_getscheduler),
    any("sched_getattr", libc::SYS_sched_getattr),
    any("sched_get_priority_max", libc::SYS_sched_get_priority_max),
    any("sched_get_priority_min", libc::SYS_sched_get_priority_min),
    any("sched_rr_get_interval", libc::SYS_sched_rr_get_interval),
    any("ioprio_get", libc::SYS_ioprio_get),
    any("getcpu", libc::SYS_getcpu),
    // A script may hold itself to more: a filter or Landlock rules of its own.
    any("seccomp", libc::SYS_seccomp),
    any("landlock_create_ruleset", libc::SYS_landlock_create_ruleset),
    any("landlock_add_rule", libc::SYS_landlock_add_rule),
    any("landlock_restrict_self", libc::SYS_landlock_restrict_self),
    #[cfg(not(target_arch = "riscv64"))]
    any("getrlimit", libc::SYS_getrlimit),
    #[cfg(not(target_arch = "riscv64"))]
    any("setrlimit", libc::SYS_setrlimit),
];

/// `PRIO_PROCESS` and `IOPRIO_WHO_PROCESS`: the `which` that names one process.
const PRIO_PROCESS: u64 = 0;
const IOPRIO_WHO_PROCESS: u64 = 1;

/// Calls that change another process's limits or scheduling, as
/// `(rule on the caller alone, rule on any process)`.
const ON_A_PROCESS: &[(Rule, Rule)] = &[
    (
        when("prlimit64", libc::SYS_prlimit64, When::OnSelf(&[(0, 0)])),
        any("prlimit64", libc::SYS_prlimit64),
    ),
    (
        when(
            "setpriority",
            libc::SYS_setpriority,
            When::OnSelf(&[(0, PRIO_PROCESS), (1, 0)]),
        ),
        any("setpriority", libc::SYS_setpriority),
    ),
    (
        when(
            "sched_setaffinity",
            libc::SYS_sched_setaffinity,
            When::OnSelf(&[(0, 0)]),
        ),
        any("sched_setaffinity", libc::SYS_sched_setaffinity),
    ),
    (
        when(
            "sched_setscheduler",
            libc::SYS_sched_setscheduler,
            When::OnSelf(&[(0, 0)]),
        ),
        any("sched_setscheduler", libc::SYS_sched_setscheduler),
    ),
    (
        when(
            "sched_setparam",
            libc::SYS_sched_setparam,
            When::OnSelf(&[(0, 0)]),
        ),
        any("sched_setparam", libc::SYS_sched_setparam),
    ),
    (
        when(
            "sched_setattr",
            libc::SYS_sched_setattr,
            When::OnSelf(&[(0, 0)]),
        ),
        any("sched_setattr", libc::SYS_sched_setattr),
    ),
    (
        when(
            "ioprio_set",
            libc::SYS_ioprio_set,
            When::OnSelf(&[(0, IOPRIO_WHO_PROCESS), (1, 0)]),
        ),
        any("ioprio_set", libc::SYS_ioprio_set),
    ),
];

/// Time and waiting.
const TIME: &[Rule] = &[
    any("clock_gettime", libc::SYS_clock_gettime),
    any("clock_getres", libc::SYS_clock_getres),
    any("clock_nanosleep", libc::SYS_clock_nanosleep),
    any("nanosleep", libc::SYS_nanosleep),
    any("gettimeofday", libc::SYS_gettimeofday),
    any("getitimer", libc::SYS_getitimer),
    any("setitimer", libc::SYS_setitimer),
    any("timer_create", libc::SYS_timer_create),
    any("timer_settime", libc::SYS_timer_settime),
    any("timer_gettime", libc::SYS_timer_gettime),
    any("timer_getoverrun", libc::SYS_timer_getoverrun),
    any("timer_delete", libc::SYS_timer_delete),
    any("timerfd_create", libc::SYS_timerfd_create),
    any("timerfd_settime", libc::SYS_timerfd_settime),
    any("timerfd_gettime", libc::SYS_timerfd_gettime),
    any("epoll_create1", libc::SYS_epoll_create1),
    any("epoll_ctl", libc::SYS_epoll_ctl),
    any("epoll_pwait", libc::SYS_epoll_pwait),
    any("epoll_pwait2", EPOLL_PWAIT2),
    any("eventfd2", libc::SYS_eventfd2),
    any("signalfd4", libc::SYS_signalfd4),
    any("ppoll", libc::SYS_ppoll),
    any("pselect6", libc::SYS_pselect6),
];

/// The machine, read.
const MACHINE: &[Rule] = &[
    any("uname", libc::SYS_uname),
    any("sysinfo", libc::SYS_sysinfo),
    any("getrandom", libc::SYS_getrandom),
];

/// Sockets, once made: `socket` itself is granted per family ([`families`]).
const SOCKETS: &[Rule] = &[
    any("socketpair", libc::SYS_socketpair),
    any("bind", libc::SYS_bind),
    any("listen", libc::SYS_listen),
    any("accept", libc::SYS_accept),
    any("accept4", libc::SYS_accept4),
    any("connect", libc::SYS_connect),
    any("getsockname", libc::SYS_getsockname),
    any("getpeername", libc::SYS_getpeername),
    any("sendto", libc::SYS_sendto),
    any("recvfrom", libc::SYS_recvfrom),
    any("sendmsg", libc::SYS_sendmsg),
    any("recvmsg", libc::SYS_recvmsg),
    any("sendmmsg", libc::SYS_sendmmsg),
    any("recvmmsg", libc::SYS_recvmmsg),
    any("shutdown", libc::SYS_shutdown),
    any("setsockopt", libc::SYS_setsockopt),
    any("getsockopt", libc::SYS_getsockopt),
];

/// The families a script with a network namespace of its own may open: inet (its
/// own loopback only) and netlink (its own routes). Unix sockets stay refused: a
/// socket file on a read-only bind still accepts a connection.
const OWN_NETWORK: &[(&str, u64)] = &[
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
    ("AF_NETLINK", libc::AF_NETLINK as u64),
];

/// What the CUDA driver's `cuInit` makes: a Unix socket of type `SOCK_SEQPACKET`
/// (driver 580 on an H200, under strace: refused, `cuInit` fails with
/// `CUDA_ERROR_OPERATING_SYSTEM` and jax loses the GPU). Granted to runs that may use
/// a GPU, and of the Unix family only this type: a sequenced-packet socket cannot
/// connect to the stream sockets that agents and daemons listen on (ssh-agent, dbus,
/// docker, a database), and under a view of its own nothing of the host's listens.
const CUDA_SOCKET: When = When::Masked(&[
    (0, 0xffff_ffff, libc::AF_UNIX as u64),
    // The type's low bits; SOCK_CLOEXEC and SOCK_NONBLOCK may be set above them.
    (1, 0xf, libc::SOCK_SEQPACKET as u64),
]);

/// SysV IPC and POSIX message queues: the host's own, unless an IPC namespace
/// separates the script.
const IPC: &[Rule] = &[
    any("shmget", libc::SYS_shmget),
    any("shmat", libc::SYS_shmat),
    any("shmdt", libc::SYS_shmdt),
    any("shmctl", libc::SYS_shmctl),
    any("msgget", libc::SYS_msgget),
    any("msgsnd", libc::SYS_msgsnd),
    any("msgrcv", libc::SYS_msgrcv),
    any("msgctl", libc::SYS_msgctl),
    any("semget", libc::SYS_semget),
    any("semop", libc::SYS_semop),
    any("semtimedop", libc::SYS_semtimedop),
    any("semctl", libc::SYS_semctl),
    any("mq_open", libc::SYS_mq_open),
    any("mq_unlink", libc::SYS_mq_unlink),
    any("mq_timedsend", libc::SYS_mq_timedsend),
    any("mq_timedreceive", libc::SYS_mq_timedreceive),
    any("mq_notify", libc::SYS_mq_notify),
    any("mq_getsetattr", libc::SYS_mq_getsetattr),
];

/// The older calls x86_64 keeps beside their `*at` and `2` forms (aarch64 and
/// riscv64 never had them).
#[cfg(target_arch = "x86_64")]
const LEGACY: &[Rule] = &[
    no_setid("open", libc::SYS_open, 2),
    no_setid("creat", libc::SYS_creat, 1),
    no_setid("chmod", libc::SYS_chmod, 1),
    no_setid("mknod", libc::SYS_mknod, 1),
    any("stat", libc::SYS_stat),
    any("lstat", libc::SYS_lstat),
    any("access", libc::SYS_access),
    any("pipe", libc::SYS_pipe),
    any("dup2", libc::SYS_dup2),
    any("fork", libc::SYS_fork),
    any("vfork", libc::SYS_vfork),
    any("getdents", libc::SYS_getdents),
    any("readlink", libc::SYS_readlink),
    any("unlink", libc::SYS_unlink),
    any("rename", libc::SYS_rename),
    any("mkdir", libc::SYS_mkdir),
    any("rmdir", libc::SYS_rmdir),
    any("link", libc::SYS_link),
    any("symlink", libc::SYS_symlink),
    any("chown", libc::SYS_chown),
    any("lchown", libc::SYS_lchown),
    any("utime", libc::SYS_utime),
    any("utimes", libc::SYS_utimes),
    any("futimesat", libc::SYS_futimesat),
    any("time", libc::SYS_time),
    any("alarm", libc::SYS_alarm),
    any("pause", libc::SYS_pause),
    any("poll", libc::SYS_poll),
    any("select", libc::SYS_select),
    any("epoll_create", libc::SYS_epoll_create),
    any("epoll_wait", libc::SYS_epoll_wait),
    any("eventfd", libc::SYS_eventfd),
    any("signalfd", libc::SYS_signalfd),
    any("inotify_init", libc::SYS_inotify_init),
    any("getpgrp", libc::SYS_getpgrp),
    any("arch_prctl", libc::SYS_arch_prctl),
    // glibc 2.39+ maps a shadow stack for CET-enabled programs.
    any("map_shadow_stack", 453),
];
#[cfg(not(target_arch = "x86_64"))]
const LEGACY: &[Rule] = &[];

/// `ioctl` but typing into the terminal.
const IOCTL: Rule = when(
    "ioctl",
    libc::SYS_ioctl,
    When::NoneOf(1, super::rules::TERMINAL_INPUT),
);

/// Every call a script is granted where `separation` holds; `gpu` for a run that may
/// use a GPU ([`CUDA_SOCKET`]).
pub(super) fn rules(separation: Separation, gpu: bool) -> Vec<Rule> {
    let mut out: Vec<Rule> = [FILES, MEMORY, PROCESSES, TIME, MACHINE, SOCKETS, LEGACY]
        .concat()
        .into_iter()
        .chain([IOCTL])
        .collect();
    out.extend(
        ON_A_PROCESS
            .iter()
            .map(|(own, others)| match separation.pid {
                true => others.clone(),
                false => own.clone(),
            }),
    );
    if separation.ipc {
        out.extend(IPC.iter().cloned());
    }
    let socket = match (separation.net, gpu) {
        (true, true) => Some(When::Either(&[When::OneOf(0, OWN_NETWORK), CUDA_SOCKET])),
        (true, false) => Some(When::OneOf(0, OWN_NETWORK)),
        (false, true) => Some(CUDA_SOCKET),
        (false, false) => None,
    };
    out.extend(socket.map(|w| when("socket", libc::SYS_socket, w)));
    out
}

/// The calls on a process, as refused on another one where no PID namespace
/// separates the script (for `doctor` and the docs).
pub(super) fn on_others() -> Vec<Rule> {
    ON_A_PROCESS.iter().map(|(_, any)| any.clone()).collect()
}
