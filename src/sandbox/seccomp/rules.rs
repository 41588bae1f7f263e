//! The calls the filters refuse that matter most on this processor (the parent
//! module's doc says why), and the compilation of every filter by seccompiler. The
//! allow-list (`allowed.rs`) leaves each of [`EPERM`]'s calls out, or grants it only
//! with other arguments; the tests hold it to that.

use std::collections::BTreeMap;

use libc::c_long;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::layout::Insn;
use super::{Denial, Program};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

/// When a call is refused. Arguments are compared on their low 32 bits: every
/// `CLONE_NEW*` flag lies there, and the kernel reads a socket family (`int`) and
/// an ioctl request (`unsigned int`) from those bits alone, so nothing can hide
/// in the high half.
#[derive(Clone, Copy)]
pub(super) enum When {
    Always,
    /// Argument `.0` has any of these flags.
    AnyFlag(u8, &'static [(&'static str, u64)]),
    /// Argument `.0` is one of these values.
    OneOf(u8, &'static [(&'static str, u64)]),
    /// Argument `.0` has none of these flags.
    NoFlag(u8, &'static [(&'static str, u64)]),
    /// Argument `.0` is none of these values.
    NoneOf(u8, &'static [(&'static str, u64)]),
    /// Every one of these arguments is 0: the call acts on the caller itself (a PID
    /// of 0, `PRIO_PROCESS` of 0, `IOPRIO_WHO_PROCESS`'s who of 0).
    OnSelf(&'static [(u8, u64)]),
    /// For every `(arg, mask, value)`, argument `arg` masked with `mask` is `value`.
    Masked(&'static [(u8, u64, u64)]),
    /// Any of these holds.
    Either(&'static [When]),
}

#[derive(Clone)]
pub(super) struct Rule {
    pub(super) call: &'static str,
    pub(super) nr: c_long,
    pub(super) when: When,
}

const fn always(call: &'static str, nr: c_long) -> Rule {
    Rule {
        call,
        nr,
        when: When::Always,
    }
}

/// Refused when argument `arg` (a mode) holds a setuid or setgid bit.
const fn setid(call: &'static str, nr: c_long, arg: u8) -> Rule {
    Rule {
        call,
        nr,
        when: When::AnyFlag(arg, SETID),
    }
}

/// clone's first argument also holds the exit signal in its low byte, so
/// `CLONE_NEWTIME` (0x80) cannot be told apart there; only `unshare` and `clone3`
/// take it, and both are refused.
pub(super) const NAMESPACES: &[(&str, u64)] = &[
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
];
const HOST_SOCKETS: &[(&str, u64)] = &[
    ("AF_UNIX", libc::AF_UNIX as u64),
    ("AF_VSOCK", libc::AF_VSOCK as u64),
];
/// `fchmodat2` (Linux 6.6), numbered 452 on every architecture (calls from 403 on
/// share one table); libc names it only for some.
const FCHMODAT2: c_long = 452;

/// A mode that would make a file run as its owner or group: a script's files belong to
/// the sandbox user, whom a setuid copy would hand to anyone on the host.
pub(super) const SETID: &[(&str, u64)] = &[
    ("S_ISUID", libc::S_ISUID as u64),
    ("S_ISGID", libc::S_ISGID as u64),
];
// `Ioctl` is `c_ulong` on glibc but `c_int` on musl.
#[allow(clippy::unnecessary_cast)]
pub(super) const TERMINAL_INPUT: &[(&str, u64)] = &[
    ("TIOCSTI", libc::TIOCSTI as u64),
    ("TIOCLINUX", libc::TIOCLINUX as u64),
];

/// Refused with `EPERM` (left out of the allow-list, or granted there only with
/// other arguments); the parent module's doc says why, group by group.
pub(super) const EPERM: &[Rule] = &[
    always("mount", libc::SYS_mount),
    always("umount2", libc::SYS_umount2),
    always("pivot_root", libc::SYS_pivot_root),
    always("chroot", libc::SYS_chroot),
    always("open_tree", libc::SYS_open_tree),
    always("move_mount", libc::SYS_move_mount),
    always("fsopen", libc::SYS_fsopen),
    always("fsconfig", libc::SYS_fsconfig),
    always("fsmount", libc::SYS_fsmount),
    always("fspick", libc::SYS_fspick),
    always("mount_setattr", libc::SYS_mount_setattr),
    always("unshare", libc::SYS_unshare),
    always("setns", libc::SYS_setns),
    Rule {
        call: "clone",
        nr: libc::SYS_clone,
        when: When::AnyFlag(0, NAMESPACES),
    },
    always("ptrace", libc::SYS_ptrace),
    always("process_vm_readv", libc::SYS_process_vm_readv),
    always("process_vm_writev", libc::SYS_process_vm_writev),
    always("pidfd_getfd", libc::SYS_pidfd_getfd),
    always("process_madvise", libc::SYS_process_madvise),
    always("kcmp", libc::SYS_kcmp),
    Rule {
        call: "socket",
        nr: libc::SYS_socket,
        when: When::OneOf(0, HOST_SOCKETS),
    },
    Rule {
        call: "ioctl",
        nr: libc::SYS_ioctl,
        when: When::OneOf(1, TERMINAL_INPUT),
    },
    #[cfg(target_arch = "x86_64")]
    setid("chmod", libc::SYS_chmod, 1),
    setid("fchmod", libc::SYS_fchmod, 1),
    setid("fchmodat", libc::SYS_fchmodat, 2),
    setid("fchmodat2", FCHMODAT2, 2),
    #[cfg(target_arch = "x86_64")]
    setid("open", libc::SYS_open, 2),
    setid("openat", libc::SYS_openat, 3),
    #[cfg(target_arch = "x86_64")]
    setid("creat", libc::SYS_creat, 1),
    #[cfg(target_arch = "x86_64")]
    setid("mknod", libc::SYS_mknod, 1),
    setid("mknodat", libc::SYS_mknodat, 2),
    always("keyctl", libc::SYS_keyctl),
    always("add_key", libc::SYS_add_key),
    always("request_key", libc::SYS_request_key),
    always("init_module", libc::SYS_init_module),
    always("finit_module", libc::SYS_finit_module),
    always("delete_module", libc::SYS_delete_module),
    always("kexec_load", libc::SYS_kexec_load),
    // libc names no kexec_file_load for riscv64; kexec needs CAP_SYS_BOOT on the
    // host anyway.
    #[cfg(not(target_arch = "riscv64"))]
    always("kexec_file_load", libc::SYS_kexec_file_load),
    always("bpf", libc::SYS_bpf),
    always("perf_event_open", libc::SYS_perf_event_open),
    always("userfaultfd", libc::SYS_userfaultfd),
    always("io_uring_setup", libc::SYS_io_uring_setup),
    always("io_uring_enter", libc::SYS_io_uring_enter),
    always("io_uring_register", libc::SYS_io_uring_register),
    always("syslog", libc::SYS_syslog),
    always("swapon", libc::SYS_swapon),
    always("swapoff", libc::SYS_swapoff),
    always("reboot", libc::SYS_reboot),
    always("acct", libc::SYS_acct),
    #[cfg(target_arch = "x86_64")]
    always("iopl", libc::SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    always("ioperm", libc::SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    always("modify_ldt", libc::SYS_modify_ldt),
    always("open_by_handle_at", libc::SYS_open_by_handle_at),
    always("name_to_handle_at", libc::SYS_name_to_handle_at),
    always("setxattr", libc::SYS_setxattr),
    always("lsetxattr", libc::SYS_lsetxattr),
    always("fsetxattr", libc::SYS_fsetxattr),
    always("removexattr", libc::SYS_removexattr),
    always("lremovexattr", libc::SYS_lremovexattr),
    always("fremovexattr", libc::SYS_fremovexattr),
];

/// Address families of the network, for a script with no network namespace of its own
/// (the built-in layer alone): inet sockets (TCP, UDP, ICMP), netlink (the host's
/// routing and firewall tables) and raw packets.
const NETWORK: &[(&str, u64)] = &[
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
    ("AF_NETLINK", libc::AF_NETLINK as u64),
    ("AF_PACKET", libc::AF_PACKET as u64),
];

/// Refused with `EPERM` where the script shares the host's network namespace.
pub(super) const NO_NETWORK: &[Rule] = &[Rule {
    call: "socket",
    nr: libc::SYS_socket,
    when: When::OneOf(0, NETWORK),
}];

/// Answered with `ENOSYS`, so that the C library falls back to `clone`, and callers
/// of `openat2` to `openat`: both take their flags (namespaces, a mode) in a struct
/// seccomp cannot read.
pub(super) const ENOSYS: &[Rule] = &[
    always("clone3", libc::SYS_clone3),
    always("openat2", libc::SYS_openat2),
];

/// `__X32_SYSCALL_BIT` of `<asm/unistd.h>` (libc defines it only for x32 builds).
#[cfg(target_arch = "x86_64")]
pub(super) const X32_SYSCALL_BIT: c_long = 0x4000_0000;

/// x32 entries with a number of their own (the `x32` rows 512 to 547 of the
/// kernel's `arch/x86/entry/syscalls/syscall_64.tbl`), beside `X32_SYSCALL_BIT |`
/// the x86_64 number. libc gives these only to x32 builds.
#[cfg(target_arch = "x86_64")]
const X32_OWN_NUMBERS: &[(&str, c_long)] = &[
    ("ioctl", 514),
    ("ptrace", 521),
    ("kexec_load", 528),
    ("process_vm_readv", 539),
    ("process_vm_writev", 540),
];

/// Every number `rule`'s call can be made under here.
pub(super) fn numbers(rule: &Rule) -> Vec<c_long> {
    #[allow(unused_mut)]
    let mut out = vec![rule.nr];
    #[cfg(target_arch = "x86_64")]
    {
        out.push(X32_SYSCALL_BIT | rule.nr);
        out.extend(
            X32_OWN_NUMBERS
                .iter()
                .filter(|(call, _)| *call == rule.call)
                .map(|(_, nr)| X32_SYSCALL_BIT | nr),
        );
    }
    out
}

/// seccompiler's rules for `when`: a call matches when any rule does, a rule when all
/// its conditions hold.
fn conditions(when: When) -> Vec<SeccompRule> {
    let condition = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .expect("argument index below 6")
    };
    let rule = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompRule::new(vec![condition(arg, op, value)]).expect("a rule with one condition")
    };
    let all = |conds: Vec<SeccompCondition>| {
        vec![SeccompRule::new(conds).expect("a rule with conditions")]
    };
    match when {
        When::NoFlag(arg, flags) => {
            let mask = flags.iter().fold(0, |m, &(_, f)| m | f);
            vec![rule(arg, SeccompCmpOp::MaskedEq(mask), 0)]
        }
        When::NoneOf(arg, values) => all(values
            .iter()
            .map(|&(_, v)| condition(arg, SeccompCmpOp::Ne, v))
            .collect()),
        When::OnSelf(args) => all(args
            .iter()
            .map(|&(arg, v)| condition(arg, SeccompCmpOp::Eq, v))
            .collect()),
        // seccompiler matches a call with no rules on its number alone.
        When::Always => Vec::new(),
        When::AnyFlag(arg, flags) => flags
            .iter()
            .map(|&(_, flag)| rule(arg, SeccompCmpOp::MaskedEq(flag), flag))
            .collect(),
        When::OneOf(arg, values) => values
            .iter()
            .map(|&(_, value)| rule(arg, SeccompCmpOp::Eq, value))
            .collect(),
        When::Masked(args) => all(args
            .iter()
            .map(|&(arg, mask, value)| condition(arg, SeccompCmpOp::MaskedEq(mask), value))
            .collect()),
        // seccompiler grants a call when any of its rules holds.
        When::Either(whens) => whens.iter().flat_map(|w| conditions(*w)).collect(),
    }
}

/// Allows every call but `rules`, which answer `errno`: seccompiler's program.
pub(super) fn chain(rules: &[Rule], errno: i32) -> Vec<Insn> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for rule in rules {
        for nr in numbers(rule) {
            let previous = map.insert(nr, conditions(rule.when));
            assert!(previous.is_none(), "{} is listed twice", rule.call);
        }
    }
    let action = SeccompAction::Errno(errno.unsigned_abs());
    compiled(map, SeccompAction::Allow, action)
}

/// Allows `rules` (each when its arguments say so, on this processor's own numbers
/// only) and answers `errno` to every other call: x32 numbers, calls this list does
/// not know, calls a later kernel adds. seccompiler's program.
pub(super) fn chain_allowed(rules: &[Rule], errno: i32) -> Vec<Insn> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for rule in rules {
        let previous = map.insert(rule.nr, conditions(rule.when));
        assert!(previous.is_none(), "{} is listed twice", rule.call);
    }
    let refuse = SeccompAction::Errno(errno.unsigned_abs());
    compiled(map, refuse, SeccompAction::Allow)
}

fn compiled(
    map: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    matched: SeccompAction,
) -> Vec<Insn> {
    let filter = SeccompFilter::new(map, mismatch, matched, ARCH)
        .expect("a filter whose two actions differ");
    let bpf: BpfProgram = filter
        .try_into()
        .expect("the filter fits the kernel's limit");
    bpf.iter()
        .map(|i| Insn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// The program to install: `chain` laid out as a search on the call's number (see
/// `layout`), as the `struct sock_filter` array.
pub(super) fn program(name: &'static str, chain: Vec<Insn>) -> Program {
    let insns = super::layout::by_number(&chain).unwrap_or(chain);
    let mut bytes = Vec::with_capacity(insns.len() * super::INSTRUCTION_LEN);
    for insn in insns {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.extend_from_slice(&[insn.jt, insn.jf]);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    Program { name, bytes }
}

pub(super) fn denials(rules: &[Rule], errno: &'static str) -> Vec<Denial> {
    let names = |list: &'static [(&'static str, u64)]| list.iter().map(|p| p.0).collect();
    let denial = |rule: &Rule| Denial {
        call: rule.call,
        only_with: match rule.when {
            When::Always | When::OnSelf(_) | When::Masked(_) | When::Either(_) => Vec::new(),
            When::AnyFlag(_, list)
            | When::OneOf(_, list)
            | When::NoFlag(_, list)
            | When::NoneOf(_, list) => names(list),
        },
        errno,
    };
    rules.iter().map(denial).collect()
}
