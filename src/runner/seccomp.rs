//! The seccomp filter bubblewrap installs before a sandboxed script starts: system
//! calls that change mounts, namespaces, keys, kernel modules or other processes'
//! memory fail with `EPERM`, whatever capabilities the process holds. Together with
//! an empty capability set and `no_new_privs`, a script as root cannot undo its
//! sandbox (`umount`, `mount -o remount,rw`, `unshare`, `setns`, `ptrace`).
//!
//! The program is classic BPF, written here for x86_64 and aarch64; other machines
//! run without the filter (and say so).

use std::io::Write;
use std::path::{Path, PathBuf};

/// `struct seccomp_data`: the syscall number at offset 0, the audit arch at 4.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// The audit arch of this build and the calls a script may not make.
#[cfg(target_arch = "x86_64")]
fn target() -> Option<(u32, &'static [u32])> {
    // mount, umount2, pivot_root, chroot, ptrace, process_vm_readv/writev, keyctl,
    // add_key, request_key, setns, unshare, kexec_load, kexec_file_load,
    // init_module, finit_module, delete_module, bpf, perf_event_open,
    // open_by_handle_at, userfaultfd, open_tree, move_mount, fsopen, fsconfig,
    // fsmount, fspick, mount_setattr, swapon, swapoff, reboot, acct, iopl, ioperm.
    const CALLS: &[u32] = &[
        165, 166, 155, 161, 101, 310, 311, 250, 248, 249, 308, 272, 246, 320, 175, 313, 176, 321,
        298, 304, 323, 428, 429, 430, 431, 432, 433, 442, 167, 168, 169, 163, 172, 173,
    ];
    Some((0xc000_003e, CALLS))
}

#[cfg(target_arch = "aarch64")]
fn target() -> Option<(u32, &'static [u32])> {
    // The same calls, by aarch64's numbers (iopl and ioperm do not exist there).
    const CALLS: &[u32] = &[
        40, 39, 41, 51, 117, 270, 271, 219, 217, 218, 268, 97, 104, 294, 105, 273, 106, 280, 241,
        265, 282, 428, 429, 430, 431, 432, 433, 442, 224, 225, 142, 89,
    ];
    Some((0xc000_00b7, CALLS))
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn target() -> Option<(u32, &'static [u32])> {
    None
}

/// One BPF instruction, as the kernel reads it (native byte order).
fn insn(out: &mut Vec<u8>, code: u16, jt: u8, jf: u8, k: u32) {
    out.extend_from_slice(&code.to_ne_bytes());
    out.push(jt);
    out.push(jf);
    out.extend_from_slice(&k.to_ne_bytes());
}

/// The filter program, or `None` on a machine it is not written for.
pub fn program() -> Option<Vec<u8>> {
    let (arch, calls) = target()?;
    let mut p = Vec::new();
    // Another ABI (i386 on x86_64) would renumber every call: refuse it outright.
    insn(&mut p, LD_W_ABS, 0, 0, ARCH_OFFSET);
    insn(&mut p, JEQ_K, 1, 0, arch);
    insn(&mut p, RET_K, 0, 0, RET_KILL_PROCESS);
    insn(&mut p, LD_W_ABS, 0, 0, NR_OFFSET);
    // x32 calls carry bit 30: none of them is needed.
    insn(&mut p, JGE_K, calls.len() as u8 + 1, 0, 0x4000_0000);
    for (i, nr) in calls.iter().enumerate() {
        // Jump to the EPERM return after the last comparison and the ALLOW return.
        let to_deny = (calls.len() - i) as u8;
        insn(&mut p, JEQ_K, to_deny, 0, *nr);
    }
    insn(&mut p, RET_K, 0, 0, RET_ALLOW);
    insn(&mut p, RET_K, 0, 0, RET_EPERM);
    Some(p)
}

/// Writes the program into `dir` (content-named, so runs share it) and returns its
/// path, or `None` where there is no program for this machine.
pub fn install(dir: &Path) -> std::io::Result<Option<Vec<PathBuf>>> {
    let Some(program) = program() else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("seccomp-{}.bpf", program.len()));
    if std::fs::read(&path).ok().as_deref() != Some(program.as_slice()) {
        let tmp = dir.join(format!(".seccomp.{}.tmp", std::process::id()));
        std::fs::File::create(&tmp)?.write_all(&program)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(Some(vec![path]))
}

/// Installs `programs` (raw `sock_filter` arrays) in order into this thread, with
/// `no_new_privs` first. No allocation: safe between fork and exec.
pub fn apply_prepared(programs: &[Vec<u8>]) -> std::io::Result<()> {
    rustix::thread::set_no_new_privs(true)?;
    for p in programs {
        let prog = libc::sock_fprog {
            len: (p.len() / 8) as u16,
            filter: p.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: the program outlives the call; the kernel copies it.
        let rc = unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_on_a_return() {
        let Some(p) = program() else { return };
        assert_eq!(p.len() % 8, 0);
        let n = p.len() / 8;
        let at = |i: usize| {
            let b = &p[i * 8..i * 8 + 8];
            (
                u16::from_ne_bytes([b[0], b[1]]),
                b[2] as usize,
                b[3] as usize,
            )
        };
        let (calls, deny, allow) = (n - 7, n - 1, n - 2);
        for i in 0..n {
            let (code, jt, jf) = at(i);
            if code == JEQ_K || code == JGE_K {
                assert!(
                    i + 1 + jt < n && i + 1 + jf < n,
                    "jump {i} leaves the program"
                );
            }
            if i >= 5 && i < 5 + calls {
                assert_eq!(i + 1 + jt, deny, "comparison {i} must deny");
            }
        }
        assert_eq!(at(allow).0, RET_K);
        assert_eq!(at(deny).0, RET_K);
    }

    #[test]
    fn installs_once_under_a_stable_name() {
        let tmp = tempfile::tempdir().unwrap();
        let a = install(tmp.path()).unwrap();
        let b = install(tmp.path()).unwrap();
        assert_eq!(a, b);
        if let Some(path) = a.map(|p| p[0].clone()) {
            assert_eq!(std::fs::read(path).unwrap(), program().unwrap());
        }
    }
}
