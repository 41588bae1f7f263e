//! A worker slot's cgroup: made once, reused by the slot's attempts one after another,
//! with the slot's zygote living in it (see `homes.rs`), and how that zygote gets there.

use super::AttemptCgroup;

impl AttemptCgroup {
    /// A worker slot's cgroup, for its attempts one after another: a pids cgroup
    /// only (an attempt with a memory limit gets a cgroup of its own), holding the
    /// slot's zygote, which counts as one process more than `--max-procs`.
    pub fn for_slot(name: &str, max_procs: Option<u32>) -> Option<AttemptCgroup> {
        let cg = AttemptCgroup::create(name, max_procs.map(|m| m.saturating_add(1)), None)?;
        // Without the pids controller there is nothing to place the zygote in.
        cg.dirs
            .iter()
            .any(|d| d.join("pids.current").exists())
            .then_some(cg)
    }

    /// Marks `pid` as the slot's zygote once the runner moved it here: it is no
    /// attempt's process, so [`AttemptCgroup::members`] leaves it out.
    pub fn settle(&self, pid: i32) -> std::io::Result<()> {
        self.join(pid)?;
        let _ = self.resident.set(pid);
        Ok(())
    }

    /// Each folder's `tasks` file, opened for writing, for a slot's zygote to move
    /// itself in with (cgroup v1; see `join_cgroup_itself` in `zygote_slot.py`): a
    /// thread that writes `0` there moves itself without the lock on every thread
    /// group that the runner's move of it takes, which on v1 waits for an RCU grace
    /// period (0.04 ms against 7.7 to 12.7 ms, measured). Opened here, by the runner:
    /// the kernel checks the opener's rights, and the zygote may not reach the files.
    /// Empty where any folder has no such file (v2) or one cannot be opened: then the
    /// runner moves it, as [`AttemptCgroup::settle`] does.
    pub fn self_move_files(&self) -> Vec<std::fs::File> {
        let opened: Option<Vec<_>> = (self.dirs.iter())
            .map(|d| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("tasks"))
                    .ok()
            })
            .collect();
        opened.unwrap_or_default()
    }

    /// Marks `pid` as the slot's zygote where it says it moved itself here; moves it
    /// where a folder does not list it after all. Returns whether the runner moved it.
    pub fn settle_moved(&self, pid: i32) -> std::io::Result<bool> {
        if self.lists(pid) {
            let _ = self.resident.set(pid);
            return Ok(false);
        }
        self.settle(pid).map(|()| true)
    }

    /// Whether every folder's `cgroup.procs` lists `pid`.
    pub fn lists(&self, pid: i32) -> bool {
        (self.dirs.iter()).all(|d| super::procs_in(d).is_some_and(|p| p.contains(&pid)))
    }

    /// Whether a slot's zygote lives here.
    pub fn has_resident(&self) -> bool {
        self.resident.get().is_some()
    }
}
