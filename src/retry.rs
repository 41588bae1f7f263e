//! Which failures are retried and how long to wait between attempts: exponential
//! backoff with jitter, so scripts that failed together do not retry together.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::model::FailureClass;

/// The retry policy of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = run once).
    pub retries: u32,
    /// Classes worth another attempt.
    pub retry_on: BTreeSet<FailureClass>,
    /// Delay before the first retry; doubles each time.
    pub base_delay: Duration,
    /// Upper bound of a delay.
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// The default classes: a process killed by a signal it did not ask for is the
    /// transient failure here. Time-outs and out-of-memory repeat themselves unless the
    /// machine was busy, so they retry only when asked; script errors never by default;
    /// GPU environment failures go to the CPU fallback instead.
    pub fn default_retry_on() -> BTreeSet<FailureClass> {
        [FailureClass::KilledBySignal].into_iter().collect()
    }

    /// Whether a script that already had `retries_done` retries and whose last attempt
    /// ended in `class` gets another try.
    pub fn should_retry(&self, class: FailureClass, retries_done: u32) -> bool {
        retries_done < self.retries && self.retry_on.contains(&class)
    }

    /// Delay before retry number `n` (from 1): base·2^(n-1), capped, then scaled by a
    /// random factor in [0.5, 1.0].
    pub fn delay(&self, n: u32) -> Duration {
        let exp = self
            .base_delay
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16))
            .min(self.max_delay);
        exp.mul_f64(0.5 + 0.5 * jitter())
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 1,
            retry_on: Self::default_retry_on(),
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

/// A number in [0, 1) from the clock and a counter: jitter needs spread, not secrecy.
fn jitter() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let mut x = COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ nanos;
    // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_only_listed_classes_up_to_the_limit() {
        let p = RetryPolicy::default();
        assert!(p.should_retry(FailureClass::KilledBySignal, 0));
        assert!(!p.should_retry(FailureClass::KilledBySignal, 1));
        assert!(!p.should_retry(FailureClass::ScriptError, 0));
        assert!(!p.should_retry(FailureClass::TimedOut, 0));
        assert!(!p.should_retry(FailureClass::GpuEnvironment, 0));
    }

    #[test]
    fn delays_grow_and_stay_within_jitter_bounds() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            ..RetryPolicy::default()
        };
        for (n, full) in [(1, 100), (2, 200), (3, 350), (10, 350)] {
            for _ in 0..50 {
                let d = p.delay(n).as_millis() as u64;
                assert!(d >= full / 2 && d <= full, "retry {n}: {d}ms");
            }
        }
    }

    #[test]
    fn jitter_spreads() {
        let values: Vec<f64> = (0..200).map(|_| jitter()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((0.3..0.7).contains(&mean), "mean {mean}");
    }
}
