//! Worker slots: at most `jobs` attempts run at once, each on a numbered slot (one row
//! of the report's timeline). A script holds a slot only while an attempt runs: while
//! it waits for a retry, the slot goes to the next script in the queue.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The run's slots.
#[derive(Debug, Clone)]
pub struct Slots {
    permits: Arc<Semaphore>,
    /// Slots in all, the spare ones opened included.
    jobs: Arc<AtomicU32>,
    /// Free slot numbers, lowest last (so slot 0 is taken first).
    free: Arc<Mutex<Vec<usize>>>,
}

/// One slot, held until dropped.
#[derive(Debug)]
pub struct Lease {
    slot: usize,
    free: Arc<Mutex<Vec<usize>>>,
    // Released after the number is back (fields drop after `drop` runs).
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    /// `jobs` slots (at least one).
    pub fn new(jobs: usize) -> Slots {
        let jobs = jobs.max(1);
        Slots {
            permits: Arc::new(Semaphore::new(jobs)),
            jobs: Arc::new(AtomicU32::new(jobs as u32)),
            free: Arc::new(Mutex::new((0..jobs).rev().collect())),
        }
    }

    /// Waits for a free slot; waiters are served in the order they asked.
    pub async fn acquire(&self) -> Lease {
        self.acquire_many(1).await
    }

    /// Waits until every slot is free and holds them all: an attempt that must run
    /// alone (a retry after running out of memory on a shared GPU). Waiters behind it
    /// wait meanwhile, so it cannot starve. The lease's own number is the lowest.
    pub async fn acquire_all(&self) -> Lease {
        self.acquire_many(self.jobs.load(Ordering::SeqCst)).await
    }

    /// Opens `n` more slots, numbered after the last (the spare: see `spare.rs`);
    /// returns the slots in all.
    pub fn open(&self, n: usize) -> usize {
        let before = self.jobs.fetch_add(n as u32, Ordering::SeqCst) as usize;
        if let Ok(mut f) = self.free.lock() {
            f.extend(before..before + n);
            f.sort_unstable_by(|a, b| b.cmp(a));
        }
        self.permits.add_permits(n);
        before + n
    }

    async fn acquire_many(&self, n: u32) -> Lease {
        let permit = self
            .permits
            .clone()
            .acquire_many_owned(n)
            .await
            .expect("the semaphore is never closed");
        let slot = self.free.lock().ok().and_then(|mut f| f.pop()).unwrap_or(0);
        Lease {
            slot,
            free: self.free.clone(),
            _permit: permit,
        }
    }
}

impl Lease {
    /// The slot's number.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Ok(mut f) = self.free.lock() {
            f.push(self.slot);
            // Lowest first, so a lone script keeps to row 0.
            f.sort_unstable_by(|a, b| b.cmp(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_numbered_and_come_back() {
        let slots = Slots::new(2);
        let a = slots.acquire().await;
        let b = slots.acquire().await;
        assert_eq!((a.slot(), b.slot()), (0, 1));
        drop(a);
        let c = slots.acquire().await;
        assert_eq!(c.slot(), 0);
        // Both taken: a third waits until one is dropped.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), slots.acquire());
        assert!(waiting.await.is_err());
    }

    #[tokio::test]
    async fn an_exclusive_lease_waits_for_every_slot_and_holds_them() {
        let slots = Slots::new(3);
        let a = slots.acquire().await;
        let short = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(short, slots.acquire_all())
            .await
            .is_err());
        drop(a);
        let all = slots.acquire_all().await;
        assert_eq!(all.slot(), 0);
        assert!(tokio::time::timeout(short, slots.acquire()).await.is_err());
        drop(all);
        assert_eq!(slots.acquire().await.slot(), 0);
    }

    #[tokio::test]
    async fn opened_slots_come_numbered_after_the_last_and_count_for_the_exclusive_lease() {
        let slots = Slots::new(2);
        let (a, b) = (slots.acquire().await, slots.acquire().await);
        let short = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(short, slots.acquire()).await.is_err());
        assert_eq!(slots.open(1), 3);
        let c = tokio::time::timeout(short, slots.acquire()).await;
        let c = c.expect("the opened slot is free at once");
        assert_eq!(c.slot(), 2);
        drop((a, b));
        // The exclusive lease waits for the opened slot too.
        assert!(tokio::time::timeout(short, slots.acquire_all())
            .await
            .is_err());
        drop(c);
        assert_eq!(slots.acquire_all().await.slot(), 0);
    }
}
