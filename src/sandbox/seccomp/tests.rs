//! The compiled programs read as data: a small classic-BPF interpreter runs them on
//! made-up calls, so every refused number (x32 ones and other ABIs included) is checked
//! whatever the kernel enables. `live_tests` makes the real calls.
#![cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]

use std::os::fd::AsRawFd;

use libc::c_long;

use super::*;

/// `__AUDIT_ARCH_64BIT` and `__AUDIT_ARCH_LE` of `<linux/audit.h>` (not in libc).
const AUDIT_64BIT: u32 = 0x8000_0000;
const AUDIT_LE: u32 = 0x4000_0000;

/// This build's audit arch, and that of another ABI the same kernel runs.
#[cfg(target_arch = "x86_64")]
const ARCHES: (u32, u32) = (
    libc::EM_X86_64 as u32 | AUDIT_64BIT | AUDIT_LE,
    libc::EM_386 as u32 | AUDIT_LE,
);
#[cfg(target_arch = "aarch64")]
const ARCHES: (u32, u32) = (
    libc::EM_AARCH64 as u32 | AUDIT_64BIT | AUDIT_LE,
    libc::EM_ARM as u32 | AUDIT_LE,
);
#[cfg(target_arch = "riscv64")]
const ARCHES: (u32, u32) = (
    libc::EM_RISCV as u32 | AUDIT_64BIT | AUDIT_LE,
    libc::EM_RISCV as u32 | AUDIT_LE,
);

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

/// Runs `program` as the kernel would on one `struct seccomp_data`.
fn verdict(program: &[u8], arch: u32, nr: c_long, args: [u64; 6]) -> u32 {
    let mut data = Vec::with_capacity(64);
    data.extend_from_slice(&(nr as i32).to_ne_bytes());
    data.extend_from_slice(&arch.to_ne_bytes());
    data.extend_from_slice(&0u64.to_ne_bytes());
    args.iter()
        .for_each(|a| data.extend_from_slice(&a.to_ne_bytes()));
    let word = |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
    let (mut a, mut pc) = (0u32, 0usize);
    loop {
        let insn = &program[pc * INSTRUCTION_LEN..(pc + 1) * INSTRUCTION_LEN];
        let (code, jt, jf, k) = (
            u16::from_ne_bytes([insn[0], insn[1]]),
            insn[2],
            insn[3],
            word(insn, 4),
        );
        pc += 1;
        let jump = |taken: bool| usize::from(if taken { jt } else { jf });
        match code {
            0x20 => a = word(&data, k as usize), // BPF_LD | BPF_W | BPF_ABS
            0x54 => a &= k,                      // BPF_ALU | BPF_AND | BPF_K
            0x05 => pc += k as usize,            // BPF_JMP | BPF_JA
            0x15 => pc += jump(a == k),          // BPF_JMP | BPF_JEQ | BPF_K
            0x25 => pc += jump(a > k),           // BPF_JMP | BPF_JGT | BPF_K
            0x35 => pc += jump(a >= k),          // BPF_JMP | BPF_JGE | BPF_K
            0x06 => return k,                    // BPF_RET | BPF_K
            _ => panic!("unexpected BPF instruction {code:#x}"),
        }
    }
}

/// What the installed programs answer together: the kernel keeps the most severe
/// action, and of two errnos the one of the program installed last.
fn answer(arch: u32, nr: c_long, args: [u64; 6]) -> u32 {
    answer_for(Separation::ALL, arch, nr, args)
}

fn answer_for(separation: Separation, arch: u32, nr: c_long, args: [u64; 6]) -> u32 {
    let programs = programs_for(separation, false).unwrap();
    let verdicts: Vec<u32> = programs
        .iter()
        .map(|p| verdict(&p.bytes, arch, nr, args))
        .collect();
    if verdicts.contains(&libc::SECCOMP_RET_KILL_PROCESS) {
        return libc::SECCOMP_RET_KILL_PROCESS;
    }
    verdicts
        .into_iter()
        .rev()
        .find(|v| *v != ALLOW)
        .unwrap_or(ALLOW)
}

/// The numbers `call` can be made under here, worked out apart from the filter: its
/// own and, on x86_64, the same with the x32 bit (`__X32_SYSCALL_BIT`), and for a few
/// the x32 row of its own in the kernel's `syscall_64.tbl`.
fn all_numbers(call: &str, nr: c_long) -> Vec<c_long> {
    #[allow(unused_mut)]
    let mut out = vec![nr];
    #[cfg(target_arch = "x86_64")]
    {
        const X32: c_long = 0x4000_0000;
        out.push(X32 | nr);
        let own = match call {
            "ioctl" => Some(514),
            "ptrace" => Some(521),
            "kexec_load" => Some(528),
            "process_vm_readv" => Some(539),
            "process_vm_writev" => Some(540),
            _ => None,
        };
        out.extend(own.map(|n| X32 | n));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = call;
    out
}

#[test]
fn every_refused_call_is_refused_under_each_of_its_numbers() {
    let native = ARCHES.0;
    for rule in rules::EPERM.iter().chain(rules::ENOSYS) {
        let enosys = rules::ENOSYS.iter().any(|r| r.call == rule.call);
        let expected = if enosys { ENOSYS } else { EPERM };
        for nr in all_numbers(rule.call, rule.nr) {
            let cases: Vec<[u64; 6]> = match rule.when {
                rules::When::Always => vec![[0; 6]],
                rules::When::AnyFlag(arg, list) | rules::When::OneOf(arg, list) => list
                    .iter()
                    .map(|&(_, v)| {
                        // A clone also names its exit signal; the kernel reads a
                        // socket family or an ioctl request from the low half alone.
                        let noise = match rule.call {
                            "clone" => libc::SIGCHLD as u64,
                            _ => 1 << 32,
                        };
                        let mut args = [0; 6];
                        args[usize::from(arg)] = v | noise;
                        args
                    })
                    .collect(),
                _ => unreachable!("{}: the refusals are listed by what they refuse", rule.call),
            };
            for args in cases {
                assert_eq!(
                    answer(native, nr, args),
                    expected,
                    "{} as {nr:#x} {args:x?}",
                    rule.call
                );
            }
        }
    }
}

/// `Ioctl` is `c_ulong` on glibc but `c_int` on musl.
#[allow(clippy::unnecessary_cast)]
fn fionread() -> u64 {
    libc::FIONREAD as u64
}

#[test]
fn what_scripts_need_is_allowed() {
    let native = ARCHES.0;
    let thread = libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID;
    let vfork = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    let allowed: &[(&str, c_long, [u64; 6])] = &[
        ("read", libc::SYS_read, [0; 6]),
        (
            "clone (fork)",
            libc::SYS_clone,
            [libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
        ),
        (
            "clone (thread)",
            libc::SYS_clone,
            [thread as u64, 0, 0, 0, 0, 0],
        ),
        (
            "clone (vfork)",
            libc::SYS_clone,
            [vfork as u64, 0, 0, 0, 0, 0],
        ),
        (
            "socket (AF_INET)",
            libc::SYS_socket,
            [libc::AF_INET as u64, 1, 0, 0, 0, 0],
        ),
        (
            "socket (AF_NETLINK)",
            libc::SYS_socket,
            [libc::AF_NETLINK as u64, 3, 0, 0, 0, 0],
        ),
        (
            "socketpair (AF_UNIX)",
            libc::SYS_socketpair,
            [libc::AF_UNIX as u64, 1, 0, 0, 0, 0],
        ),
        (
            "ioctl (FIONREAD)",
            libc::SYS_ioctl,
            [0, fionread(), 0, 0, 0, 0],
        ),
        (
            "prctl (PR_SET_NAME)",
            libc::SYS_prctl,
            [libc::PR_SET_NAME as u64, 0, 0, 0, 0, 0],
        ),
        ("memfd_create", libc::SYS_memfd_create, [0; 6]),
        (
            "openat (O_CREAT, 0644)",
            libc::SYS_openat,
            [0, 0, libc::O_CREAT as u64, 0o644, 0, 0],
        ),
        ("fchmod (0755)", libc::SYS_fchmod, [3, 0o755, 0, 0, 0, 0]),
        (
            "fchmodat (01777)",
            libc::SYS_fchmodat,
            [0, 0, 0o1777, 0, 0, 0],
        ),
        ("getrandom", libc::SYS_getrandom, [0; 6]),
    ];
    for &(name, nr, args) in allowed {
        assert_eq!(answer(native, nr, args), ALLOW, "{name} as {nr:#x}");
        // Granted under this processor's own number only: no x32 call is.
        for other in all_numbers(name, nr).into_iter().filter(|n| *n != nr) {
            assert_eq!(answer(native, other, args), EPERM, "{name} as {other:#x}");
        }
    }
}

#[test]
fn another_abi_of_this_machine_is_killed() {
    for nr in [libc::SYS_read, libc::SYS_unshare, libc::SYS_clone3] {
        for program in programs().unwrap() {
            let got = verdict(&program.bytes, ARCHES.1, nr, [0; 6]);
            assert_eq!(
                got,
                libc::SECCOMP_RET_KILL_PROCESS,
                "{} on nr {nr}",
                program.name
            );
        }
    }
}

#[test]
fn programs_are_whole_and_listed() {
    for program in programs().unwrap() {
        let n = program.bytes.len() / INSTRUCTION_LEN;
        assert_eq!(program.bytes.len() % INSTRUCTION_LEN, 0);
        assert!(0 < n && n < 4096, "{}: {n} instructions", program.name);
        eprintln!("{}: {n} instructions", program.name);
    }
    let lines: Vec<String> = denied().iter().map(ToString::to_string).collect();
    assert!(lines.contains(&"mount: EPERM".to_string()), "{lines:?}");
    assert!(lines.contains(&"clone3: ENOSYS".to_string()), "{lines:?}");
    assert!(
        lines.contains(&"socket with AF_UNIX, AF_VSOCK: EPERM".to_string()),
        "{lines:?}"
    );
}

/// The count `doctor` gives is the program's: every number the program lets through
/// with plain arguments is a granted call's, and a granted call it refuses with them
/// is one granted only with certain arguments.
#[test]
fn the_granted_count_is_what_the_program_lets_through() {
    let native = ARCHES.0;
    let granted_rules = allowed::rules(Separation::ALL, false);
    let through: Vec<c_long> = (0..1024)
        .filter(|&nr| answer(native, nr, [0; 6]) == ALLOW)
        .collect();
    for nr in &through {
        assert!(
            granted_rules.iter().any(|r| r.nr == *nr),
            "number {nr} gets through but is no granted call's"
        );
    }
    let mut conditional: Vec<&str> = granted_rules
        .iter()
        .filter(|r| !matches!(r.when, rules::When::Always))
        .map(|r| r.call)
        .collect();
    conditional.sort_unstable();
    conditional.dedup();
    let n = granted();
    assert!(
        through.len() <= n && n <= through.len() + conditional.len(),
        "granted {n}, through with plain arguments {}, conditional {}",
        through.len(),
        conditional.len()
    );
    assert!(n < 400, "more granted calls than a kernel has: {n}");
}

/// The filter grants: a call it does not list (one a later kernel adds, or one no
/// script needs) is refused; calls on another process and the host's IPC are granted
/// only where namespaces separate the scripts, and on the caller itself always.
#[test]
fn what_is_not_granted_is_refused_and_separation_widens_only_what_it_must() {
    let native = ARCHES.0;
    for nr in [libc::SYS_mount, libc::SYS_ptrace, 470, 999] {
        for sep in [Separation::ALL, Separation::NONE] {
            assert_eq!(answer_for(sep, native, nr, [0; 6]), EPERM, "nr {nr}");
        }
    }
    let other = 4242u64;
    let on_a_process: &[(&str, c_long, [u64; 6], [u64; 6])] = &[
        (
            "prlimit64",
            libc::SYS_prlimit64,
            [0; 6],
            [other, 7, 0, 0, 0, 0],
        ),
        (
            "setpriority",
            libc::SYS_setpriority,
            [0, 0, 5, 0, 0, 0],
            [0, other, 5, 0, 0, 0],
        ),
        (
            "sched_setaffinity",
            libc::SYS_sched_setaffinity,
            [0, 128, 0, 0, 0, 0],
            [other, 128, 0, 0, 0, 0],
        ),
        (
            "sched_setscheduler",
            libc::SYS_sched_setscheduler,
            [0; 6],
            [other, 5, 0, 0, 0, 0],
        ),
        (
            "sched_setparam",
            libc::SYS_sched_setparam,
            [0; 6],
            [other, 0, 0, 0, 0, 0],
        ),
        (
            "sched_setattr",
            libc::SYS_sched_setattr,
            [0; 6],
            [other, 0, 0, 0, 0, 0],
        ),
        (
            "ioprio_set",
            libc::SYS_ioprio_set,
            [1, 0, 0, 0, 0, 0],
            [1, other, 0, 0, 0, 0],
        ),
    ];
    for &(name, nr, own, others) in on_a_process {
        assert_eq!(
            answer_for(Separation::NONE, native, nr, own),
            ALLOW,
            "{name}"
        );
        assert_eq!(
            answer_for(Separation::NONE, native, nr, others),
            EPERM,
            "{name}"
        );
        assert_eq!(
            answer_for(Separation::ALL, native, nr, others),
            ALLOW,
            "{name}"
        );
    }
    // PRIO_USER reaches every process of the user, the runner's among them.
    let user = [2, 0, 5, 0, 0, 0];
    assert_eq!(
        answer_for(Separation::NONE, native, libc::SYS_setpriority, user),
        EPERM
    );
    for nr in [
        libc::SYS_shmget,
        libc::SYS_msgget,
        libc::SYS_semget,
        libc::SYS_mq_open,
    ] {
        assert_eq!(
            answer_for(Separation::NONE, native, nr, [0; 6]),
            EPERM,
            "nr {nr}"
        );
        assert_eq!(
            answer_for(Separation::ALL, native, nr, [0; 6]),
            ALLOW,
            "nr {nr}"
        );
    }
    let inet = [libc::AF_INET as u64, 1, 0, 0, 0, 0];
    assert_eq!(
        answer_for(Separation::NONE, native, libc::SYS_socket, inet),
        EPERM
    );
    assert_eq!(
        answer_for(Separation::ALL, native, libc::SYS_socket, inet),
        ALLOW
    );
}

#[test]
fn filters_are_handed_on_as_sealed_memory_files_never_written_to_disk() {
    use std::io::{Read, Write};
    let filters = Filters::for_run(Separation::NONE, true).unwrap();
    let want: Vec<Vec<u8>> = programs_for(Separation::NONE, true)
        .unwrap()
        .into_iter()
        .map(|p| p.bytes)
        .collect();
    // Twice: each use gets files of its own, each read from its start.
    for _ in 0..2 {
        let fds = filters.to_memfds().unwrap();
        assert_eq!(fds.len(), want.len());
        for (fd, bytes) in fds.into_iter().zip(&want) {
            let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
            assert!(
                path.to_string_lossy()
                    .starts_with("/memfd:jax-runner-seccomp"),
                "{path:?}"
            );
            let mut file = std::fs::File::from(fd);
            let mut read = Vec::new();
            file.read_to_end(&mut read).unwrap();
            assert_eq!(&read, bytes);
            // Sealed: no holder of the descriptor can change what a script installs.
            assert!(file.write_all(b"\0").is_err());
            assert!(file.set_len(0).is_err());
            let flags = rustix::io::fcntl_getfd(&file).unwrap();
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        }
    }
    assert!(Filters::default().is_empty());
    assert!(Filters::default().to_memfds().unwrap().is_empty());
}
