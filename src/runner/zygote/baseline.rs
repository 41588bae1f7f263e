//! What every warm script starts from: the run's nice value, scheduling policy and
//! priority, CPU affinity and resource limits, decided once by the runner when it
//! starts the zygote (what a cold start's child inherits) and sent with every request.
//! Each forked child restores them before anything else, so a script that reached the
//! zygote (`setpriority`, `sched_setscheduler`, `sched_setaffinity`, `prlimit`) changes
//! nothing for the scripts after it; a value the child cannot restore (a hard limit
//! lowered for good) refuses the warm start and the script starts cold.

use serde::Serialize;

/// `SCHED_RESET_ON_FORK`, or-ed into the policy `sched_getscheduler` reports.
const RESET_ON_FORK: i32 = 0x4000_0000;

/// The values a script's process starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Baseline {
    /// `getpriority(PRIO_PROCESS, 0)`.
    pub nice: i32,
    /// `sched_getscheduler(0)`, without `SCHED_RESET_ON_FORK`.
    pub policy: i32,
    /// `sched_getparam(0)`'s priority (0 unless the policy is a real-time one).
    pub priority: i32,
    /// The CPUs of `sched_getaffinity(0)`.
    pub cpus: Vec<usize>,
    /// Every resource limit, in the order the child sets them.
    pub rlimits: Vec<Limit>,
}

/// One resource limit; `None` is `RLIM_INFINITY`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limit {
    /// `RLIMIT_NOFILE` without its prefix, for the messages.
    pub name: &'static str,
    /// The kernel's number of the resource.
    pub resource: u32,
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Every limit Linux has, by name.
const RESOURCES: [(&str, rustix::process::Resource); 16] = {
    use rustix::process::Resource as R;
    [
        ("CPU", R::Cpu),
        ("FSIZE", R::Fsize),
        ("DATA", R::Data),
        ("STACK", R::Stack),
        ("CORE", R::Core),
        ("RSS", R::Rss),
        ("NPROC", R::Nproc),
        ("NOFILE", R::Nofile),
        ("MEMLOCK", R::Memlock),
        ("AS", R::As),
        ("LOCKS", R::Locks),
        ("SIGPENDING", R::Sigpending),
        ("MSGQUEUE", R::Msgqueue),
        ("NICE", R::Nice),
        ("RTPRIO", R::Rtprio),
        ("RTTIME", R::Rttime),
    ]
};

impl Baseline {
    /// The runner's own values now, as a child it forks gets them.
    pub fn of_this_process() -> std::io::Result<Baseline> {
        let nice = rustix::process::getpriority_process(None)?;
        // SAFETY: no pointers; -1 with errno on failure.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if policy < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a zeroed sched_param is valid, and the kernel fills it.
        let priority = unsafe {
            let mut param: libc::sched_param = std::mem::zeroed();
            if libc::sched_getparam(0, &mut param) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            param.sched_priority
        };
        let set = rustix::thread::sched_getaffinity(None)?;
        let cpus = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| set.is_set(cpu))
            .collect();
        let rlimits = RESOURCES
            .iter()
            .map(|&(name, resource)| {
                let lim = rustix::process::getrlimit(resource);
                Limit {
                    name,
                    resource: resource as u32,
                    soft: lim.current,
                    hard: lim.maximum,
                }
            })
            .collect();
        Ok(Baseline {
            nice,
            policy,
            priority,
            cpus,
            rlimits,
        }
        .inherited_by_a_child())
    }

    /// What a forked child holds: with `SCHED_RESET_ON_FORK`, the kernel gives it the
    /// normal policy in place of a real-time one, and nice 0 in place of a negative
    /// value; the flag itself is not inherited.
    fn inherited_by_a_child(mut self) -> Baseline {
        if self.policy & RESET_ON_FORK != 0 {
            self.policy &= !RESET_ON_FORK;
            if ![libc::SCHED_OTHER, libc::SCHED_BATCH, libc::SCHED_IDLE].contains(&self.policy) {
                self.policy = libc::SCHED_OTHER;
                self.priority = 0;
            }
            self.nice = self.nice.max(0);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_every_limit_and_a_cpu() {
        let b = Baseline::of_this_process().unwrap();
        assert_eq!(b.rlimits.len(), 16);
        assert!(!b.cpus.is_empty());
        assert_eq!(b.policy & RESET_ON_FORK, 0);
        let nofile = b.rlimits.iter().find(|l| l.name == "NOFILE").unwrap();
        assert_eq!(nofile.resource, libc::RLIMIT_NOFILE);
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(json["rlimits"][7]["name"], "NOFILE", "{json}");
    }

    #[test]
    fn reset_on_fork_gives_the_child_the_normal_policy() {
        let of = |policy, priority, nice| Baseline {
            nice,
            policy,
            priority,
            cpus: vec![0],
            rlimits: Vec::new(),
        };
        let fifo = of(libc::SCHED_FIFO | RESET_ON_FORK, 10, -5).inherited_by_a_child();
        assert_eq!(
            (fifo.policy, fifo.priority, fifo.nice),
            (libc::SCHED_OTHER, 0, 0)
        );
        let batch = of(libc::SCHED_BATCH | RESET_ON_FORK, 0, 3).inherited_by_a_child();
        assert_eq!((batch.policy, batch.nice), (libc::SCHED_BATCH, 3));
        let plain = of(libc::SCHED_RR, 7, -2).inherited_by_a_child();
        assert_eq!(
            (plain.policy, plain.priority, plain.nice),
            (libc::SCHED_RR, 7, -2)
        );
    }
}
