//! A worker slot's home: a zygote of its own (a fork of the run's) that lives in a
//! cgroup of the slot's, made at the slot's first warm attempt and kept for the run.
//! Each warm script is then forked where it is counted, with no move between cgroups
//! per script: on cgroup v1 every move waits for an RCU grace period (6 to 15 ms,
//! measured), more than a trivial script's whole run. The one move of the slot's
//! zygote is its own where it can be (see `AttemptCgroup::self_move_files`).

use std::sync::{Arc, Mutex};

use super::limits::AttemptCgroup;
use super::zygote::Zygote;
use crate::sandbox::view::MountStep;

/// A slot's zygote and the cgroup it lives in.
#[derive(Debug)]
pub struct SlotHome {
    pub zygote: Arc<Zygote>,
    pub cgroup: Arc<AttemptCgroup>,
}

/// What became of a slot's home.
#[derive(Debug, Default)]
enum State {
    #[default]
    Unmade,
    Ready(Arc<SlotHome>),
    /// Tried and refused (no pids controller, the zygote gone): the slot's attempts
    /// use the run's zygote and a cgroup each, as before.
    Refused,
}

/// The run's slot homes, by slot number.
#[derive(Debug, Default)]
pub struct SlotHomes {
    states: Mutex<Vec<State>>,
    /// Homes made again so far, for a fresh cgroup name each time.
    remade: std::sync::atomic::AtomicUsize,
}

impl SlotHomes {
    /// The slots' zygotes made so far.
    pub fn zygotes(&self) -> Vec<Arc<Zygote>> {
        let Ok(states) = self.states.lock() else {
            return Vec::new();
        };
        (states.iter())
            .filter_map(|s| match s {
                State::Ready(home) => Some(home.zygote.clone()),
                _ => None,
            })
            .collect()
    }

    /// The home of `slot`, made from `zygote` at its first call; `None` when it cannot
    /// be made here (then never tried again). `name` names the slot's cgroup; `view`
    /// is the run's part of the scripts' view, which the slot's zygote is made in
    /// (see [`Zygote::slot`]).
    pub async fn get(
        &self,
        slot: usize,
        zygote: &Arc<Zygote>,
        name: String,
        max_procs: Option<u32>,
        view: Option<&[MountStep]>,
    ) -> Option<Arc<SlotHome>> {
        let again = {
            let mut states = self.states.lock().ok()?;
            match states.get(slot) {
                Some(State::Ready(home)) if home.zygote_alive() => return Some(home.clone()),
                // Gone (a script may kill its parent when nothing stops it): made
                // again, once its cgroup is emptied and removed with the old home.
                Some(State::Ready(_)) => {
                    states[slot] = State::Unmade;
                    true
                }
                Some(State::Refused) => return None,
                _ => false,
            }
        };
        // A slot runs one attempt at a time: no one else makes this slot's home now.
        // A home made again gets a cgroup of another name: the old one may still hold
        // its zombie zygote a moment.
        let name = match again {
            false => name,
            true => {
                let n = self
                    .remade
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("{name}.{}", n + 1)
            }
        };
        let zygote = zygote.clone();
        let view = view.map(<[MountStep]>::to_vec);
        let made = tokio::task::spawn_blocking(move || make(&zygote, &name, max_procs, view))
            .await
            .ok()
            .flatten()
            .map(Arc::new);
        let mut states = self.states.lock().ok()?;
        if states.len() <= slot {
            states.resize_with(slot + 1, State::default);
        }
        states[slot] = match &made {
            Some(home) => State::Ready(home.clone()),
            None => State::Refused,
        };
        made
    }
}

impl SlotHome {
    /// Whether the slot's zygote is still there to fork scripts (not gone, not a
    /// zombie).
    fn zygote_alive(&self) -> bool {
        !super::sys::ended(self.zygote.pid() as u32)
    }
}

/// Makes a slot's cgroup, forks the slot's zygote and has it move there (the one move
/// of the slot's life: by itself where the cgroup is v1, else by the runner). Whatever
/// fails leaves nothing behind.
fn make(
    zygote: &Zygote,
    name: &str,
    max_procs: Option<u32>,
    view: Option<Vec<MountStep>>,
) -> Option<SlotHome> {
    let cgroup = AttemptCgroup::for_slot(name, max_procs)?;
    // Closed as soon as the request has gone: the middle child and the slot's zygote
    // hold their own copies, which the slot's zygote closes before any script.
    let (slot, moved) = match zygote.slot(view.as_deref(), &cgroup.self_move_files()) {
        Ok(made) => made,
        Err(e) => {
            tracing::debug!("no slot zygote: {e}");
            return None;
        }
    };
    let settled = match moved {
        true => cgroup.settle_moved(slot.pid()),
        false => cgroup.settle(slot.pid()).map(|()| true),
    };
    match settled {
        Ok(by_runner) => tracing::debug!(
            "slot zygote {} in {name}: moved by {}",
            slot.pid(),
            if by_runner { "the runner" } else { "itself" }
        ),
        Err(e) => {
            tracing::debug!("the slot zygote could not join its cgroup: {e}");
            return None;
        }
    }
    Some(SlotHome {
        zygote: Arc::new(slot.into_resident()),
        cgroup: Arc::new(cgroup),
    })
}
