//! How many scripts this machine can run at once, whatever `--jobs` asks. Each running
//! script holds a handful of the runner's file descriptors (its output pipes, its log
//! files, its cgroup) and needs memory of its own; past either limit, starting one
//! more fails in the runner, and that failure must never be blamed on a script.

/// The runner's descriptors per running script, with room to spare.
const FDS_PER_SCRIPT: u64 = 12;
/// Descriptors kept for the runner itself (reports, the lock, the zygote, tokio).
const FDS_RESERVED: u64 = 128;
/// The least memory a Python interpreter with numpy and jax imported takes.
const MIN_MB_PER_SCRIPT: u64 = 64;

/// Raises the soft open-file limit to the hard one (as most runners do: the soft
/// default of 1024 is a relic) and returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let (Some(soft), max) = (lim.current, lim.maximum) else {
        return u64::MAX;
    };
    if !matches!(max, Some(max) if soft >= max) {
        let raised = Rlimit {
            current: max,
            maximum: max,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return max.unwrap_or(u64::MAX);
        }
    }
    soft
}

/// `jobs`, lowered to what `fd_limit` descriptors and `available_mb` of memory allow,
/// with the reason when it was lowered.
pub fn clamp_jobs(jobs: usize, fd_limit: u64, available_mb: u64) -> (usize, Option<String>) {
    let by_fds = (fd_limit.saturating_sub(FDS_RESERVED) / FDS_PER_SCRIPT).max(1) as usize;
    let by_memory = (available_mb / MIN_MB_PER_SCRIPT).max(1) as usize;
    let most = by_fds.min(by_memory);
    if jobs <= most {
        return (jobs, None);
    }
    let why = if by_fds <= by_memory {
        format!("the open-file limit ({fd_limit}) holds {by_fds} running scripts")
    } else {
        format!("{available_mb} MiB of free memory holds {by_memory} running scripts")
    };
    (
        most,
        Some(format!("--jobs {jobs} lowered to {most}: {why}")),
    )
}

/// [`clamp_jobs`] against this machine, after raising the open-file limit, and the
/// `spare` slots (see `spare.rs`) clamped the same way on top of the jobs kept.
pub fn clamp_jobs_here(jobs: usize, spare: usize) -> (usize, usize, Option<String>) {
    let fds = raise_fd_limit();
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    clamp_with_spare(jobs, spare, fds, sys.available_memory() / (1024 * 1024))
}

/// [`clamp_jobs`], then the spare slots within what is left, without a word: nobody
/// asked for them.
fn clamp_with_spare(
    jobs: usize,
    spare: usize,
    fd_limit: u64,
    available_mb: u64,
) -> (usize, usize, Option<String>) {
    let (jobs, lowered) = clamp_jobs(jobs, fd_limit, available_mb);
    let (with_spare, _) = clamp_jobs(jobs + spare, fd_limit, available_mb);
    (jobs, with_spare - jobs, lowered)
}

/// Whether a failure to start a script is the runner running out of descriptors or
/// processes, not anything the script did.
pub fn is_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::EAGAIN) | Some(libc::ENOMEM)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spare_slots_go_first_and_silently_where_the_limits_hold_fewer() {
        // 1024 descriptors hold (1024 - 128) / 12 = 74 scripts.
        assert_eq!(clamp_with_spare(2, 1, 1024, 8000), (2, 1, None));
        assert_eq!(clamp_with_spare(74, 1, 1024, 100_000), (74, 0, None));
        let (jobs, spare, why) = clamp_with_spare(80, 1, 1024, 100_000);
        assert_eq!((jobs, spare), (74, 0));
        assert!(why.unwrap().starts_with("--jobs 80 lowered to 74"));
    }

    #[test]
    fn jobs_within_the_limits_stay_as_asked() {
        assert_eq!(clamp_jobs(2, 1024, 8000), (2, None));
    }

    #[test]
    fn too_many_jobs_are_lowered_and_say_why() {
        let (jobs, why) = clamp_jobs(10_000, 1024, 100_000);
        assert_eq!(
            jobs,
            (1024 - FDS_RESERVED as usize) / FDS_PER_SCRIPT as usize
        );
        assert!(why.unwrap().contains("open-file limit (1024)"));
        let (jobs, why) = clamp_jobs(10_000, 1 << 20, 640);
        assert_eq!(jobs, 10);
        assert!(why.unwrap().contains("640 MiB of free memory"));
    }

    #[test]
    fn the_soft_fd_limit_is_raised_to_the_hard_one() {
        let soft = raise_fd_limit();
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(Some(soft), lim.current.or(Some(u64::MAX)));
        assert_eq!(lim.current, lim.maximum);
    }

    #[test]
    fn descriptor_exhaustion_is_the_runners_own() {
        assert!(is_exhaustion(&std::io::Error::from_raw_os_error(
            libc::EMFILE
        )));
        assert!(!is_exhaustion(&std::io::Error::from_raw_os_error(
            libc::ENOENT
        )));
    }
}
