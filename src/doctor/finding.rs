//! What every check shares: building a finding, whether it stops a device, the device
//! lists findings name, and version comparisons. A leaf, so the checks that produce
//! findings import it and never each other.

use std::cmp::Ordering;

use crate::model::doctor::{Finding, Severity};
use crate::model::Platform;

// The type is serialized data in `model::doctor`; how checks build and read it is
// doctor behaviour, so the methods stay here.
impl Finding {
    pub(super) fn new(
        code: &str,
        severity: Severity,
        devices: &[Platform],
        message: String,
        fix: Option<String>,
    ) -> Self {
        Finding {
            code: code.into(),
            severity,
            devices: devices.to_vec(),
            message,
            fix,
        }
    }

    /// Whether it stops `device`.
    pub fn blocks(&self, device: Platform) -> bool {
        self.severity == Severity::Error && self.devices.contains(&device)
    }
}

pub(super) const ALL: &[Platform] = &[Platform::Cpu, Platform::Gpu, Platform::Tpu];
pub(super) const GPU: &[Platform] = &[Platform::Gpu];

/// Compares dotted versions numerically (`0.10.2` > `0.9.1`); non-numeric tails are
/// ignored (`0.4.36.dev20241101` compares as `0.4.36`).
pub fn version_cmp(a: &str, b: &str) -> Ordering {
    let parts =
        |v: &str| -> Vec<u64> { v.split('.').map_while(|p| p.parse::<u64>().ok()).collect() };
    parts(a).cmp(&parts(b))
}

pub(super) fn major_minor(v: &str) -> Vec<u64> {
    v.split('.').take(2).map_while(|p| p.parse().ok()).collect()
}
