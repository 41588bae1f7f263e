//! Several scripts on one GPU: how many (`--gpu-share N`, or `auto` from free GPU
//! memory and the largest GPU peak in the history), which GPU each worker slot
//! uses, and the memory fraction each sharing script may take.

use super::GpuInfo;

/// The most scripts `--gpu-share auto` puts on one GPU: past this, start-up and
/// context switching cost more than sharing saves.
pub const MAX_AUTO_SHARE: usize = 8;

/// How the run spreads scripts over its GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlan {
    /// The GPUs scripts go to: NVML indices, with their UUIDs where NVML gives them.
    pub devices: Vec<(u32, Option<String>)>,
    /// Scripts per GPU.
    pub share: usize,
    /// How `share` was chosen, in words.
    pub reason: String,
    /// Pin even a lone GPU in `CUDA_VISIBLE_DEVICES`: the user's own value named it,
    /// and a sandboxed script does not inherit the user's variable.
    pub pin_always: bool,
}

/// The GPU one attempt gets.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSlot {
    /// Its NVML index (recorded as the result's `gpu_index`).
    pub index: u32,
    /// `CUDA_VISIBLE_DEVICES` for the attempt, when the host has several GPUs: the
    /// GPU's UUID where known (CUDA's own numbering need not follow NVML's), else its
    /// index.
    pub visible: Option<String>,
    /// `XLA_PYTHON_CLIENT_MEM_FRACTION`, when the GPU is shared.
    pub mem_fraction: Option<f64>,
}

impl GpuPlan {
    /// The GPU of worker slot `slot`: slots go round the GPUs, so a run of as many
    /// scripts as GPUs has one per GPU. An `exclusive` attempt (a retry after running
    /// out of GPU memory, holding every slot) gets the whole GPU.
    pub fn slot(&self, slot: usize, exclusive: bool) -> Option<GpuSlot> {
        let (index, uuid) = self.devices.get(slot % self.devices.len().max(1))?.clone();
        Some(GpuSlot {
            index,
            visible: (self.pin_always || self.devices.len() > 1)
                .then(|| uuid.unwrap_or_else(|| index.to_string())),
            mem_fraction: (self.share > 1 && !exclusive).then(|| mem_fraction(self.share)),
        })
    }

    /// Worker slots: every GPU times its share.
    pub fn jobs(&self) -> usize {
        self.devices.len().max(1) * self.share
    }
}

/// Each of `share` scripts' part of a GPU, leaving a twentieth for CUDA contexts and
/// fragmentation: 2 → 0.47, 4 → 0.23.
pub fn mem_fraction(share: usize) -> f64 {
    (95 / share.max(1)) as f64 / 100.0
}

/// The GPUs a run may use: all `count`, or those `CUDA_VISIBLE_DEVICES` names
/// (indices or UUIDs) when it is set. When it names none that exist (empty, `-1`, a
/// missing device) the list is empty: no slot is pinned to a GPU, so the user's
/// value reaches the scripts, and the pre-flight or the fallback deals with it.
pub fn devices(
    gpus: &[GpuInfo],
    count: usize,
    visible: Option<&str>,
) -> Vec<(u32, Option<String>)> {
    let uuid = |i: u32| {
        gpus.iter()
            .find(|g| g.index == i)
            .and_then(|g| g.uuid.clone())
    };
    let Some(list) = visible else {
        return (0..count as u32).map(|i| (i, uuid(i))).collect();
    };
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .filter_map(|entry| match entry.parse::<u32>() {
            Ok(i) if (i as usize) < count => Some((i, uuid(i))),
            Ok(_) => None,
            Err(_) => gpus
                .iter()
                .find(|g| g.uuid.as_deref().is_some_and(|u| u.starts_with(entry)))
                .map(|g| (g.index, g.uuid.clone())),
        })
        .collect()
}

/// `--gpu-share auto`: as many scripts per GPU as the least free GPU holds at the
/// largest GPU peak the history recorded, keeping a tenth free; one when either
/// figure is missing.
pub fn auto_share(
    gpus: &[GpuInfo],
    devices: &[(u32, Option<String>)],
    peak_mb: Option<f64>,
) -> (usize, String) {
    let free = devices
        .iter()
        .filter_map(|(i, _)| gpus.iter().find(|g| g.index == *i))
        .map(|g| g.memory_free_mb)
        .reduce(f64::min);
    match (free, peak_mb.filter(|p| *p > 0.0)) {
        (None, _) => (
            1,
            "auto: NVML gives no free GPU memory figure, so one script per GPU".into(),
        ),
        (_, None) => (
            1,
            "auto: the history has no GPU memory figures yet, so one script per GPU".into(),
        ),
        (Some(free), Some(peak)) => {
            let n = ((free * 0.9 / peak).floor() as usize).clamp(1, MAX_AUTO_SHARE);
            (
                n,
                format!(
                    "auto: {n} per GPU ({free:.0} MiB free, largest GPU peak in the history {peak:.0} MiB, a tenth kept free)"
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, free: f64) -> GpuInfo {
        GpuInfo {
            index,
            name: "Fake".into(),
            uuid: Some(format!("GPU-{index}aaa")),
            memory_total_mb: 80_000.0,
            memory_used_mb: 80_000.0 - free,
            memory_free_mb: free,
            utilization_gpu_pct: None,
            utilization_memory_pct: None,
            compute_capability: None,
            processes: vec![],
        }
    }

    #[test]
    fn slots_go_round_the_gpus_and_shared_ones_get_a_fraction() {
        let gpus = [gpu(0, 80_000.0), gpu(1, 80_000.0)];
        let plan = GpuPlan {
            devices: devices(&gpus, 2, None),
            share: 2,
            reason: String::new(),
            pin_always: false,
        };
        assert_eq!(plan.jobs(), 4);
        let s: Vec<GpuSlot> = (0..4).map(|i| plan.slot(i, false).unwrap()).collect();
        assert_eq!(s.iter().map(|s| s.index).collect::<Vec<_>>(), [0, 1, 0, 1]);
        assert_eq!(s[1].visible.as_deref(), Some("GPU-1aaa"));
        assert_eq!(s[0].mem_fraction, Some(0.47));
        let alone = plan.slot(2, true).unwrap();
        assert_eq!((alone.index, alone.mem_fraction), (0, None));
        // One GPU: nothing to pin, and unshared it takes what it needs.
        let one = GpuPlan {
            devices: devices(&gpus[..1], 1, None),
            share: 1,
            reason: String::new(),
            pin_always: false,
        };
        assert_eq!(
            one.slot(3, false),
            Some(GpuSlot {
                index: 0,
                visible: None,
                mem_fraction: None
            })
        );
        // The user named that one GPU: it stays named, sandboxed or not.
        let named = GpuPlan {
            pin_always: true,
            ..one
        };
        let visible = named.slot(0, false).unwrap().visible;
        assert_eq!(visible.as_deref(), Some("GPU-0aaa"));
    }

    #[test]
    fn cuda_visible_devices_narrows_the_gpus() {
        let gpus = [gpu(0, 1.0), gpu(1, 1.0), gpu(2, 1.0)];
        let by_index: Vec<u32> = devices(&gpus, 3, Some("2,0")).iter().map(|d| d.0).collect();
        assert_eq!(by_index, [2, 0]);
        assert_eq!(devices(&gpus, 3, Some("GPU-1"))[0].0, 1);
        // Nothing it names exists: no GPU to pin scripts to, so none is.
        for hides_all in ["7", "-1", ""] {
            assert!(
                devices(&gpus, 3, Some(hides_all)).is_empty(),
                "{hides_all:?}"
            );
        }
        let plan = GpuPlan {
            devices: vec![],
            share: 2,
            reason: String::new(),
            pin_always: false,
        };
        assert_eq!((plan.slot(0, false), plan.jobs()), (None, 2));
        // A count override without NVML's list: indices only.
        assert_eq!(devices(&[], 2, None), vec![(0, None), (1, None)]);
    }

    #[test]
    fn auto_share_fits_the_history_peak_into_the_least_free_gpu() {
        let gpus = [gpu(0, 40_000.0), gpu(1, 20_000.0)];
        let both = devices(&gpus, 2, None);
        let (n, why) = auto_share(&gpus, &both, Some(4_000.0));
        assert_eq!(n, 4, "20000 * 0.9 / 4000 = 4.5: {why}");
        assert!(why.contains("20000 MiB free"), "{why}");
        assert_eq!(auto_share(&gpus, &both, Some(100.0)).0, MAX_AUTO_SHARE);
        assert_eq!(auto_share(&gpus, &both, Some(90_000.0)).0, 1);
        let (n, why) = auto_share(&gpus, &both, None);
        assert!(n == 1 && why.contains("no GPU memory figures"), "{why}");
        let (n, why) = auto_share(&[], &[(0, None)], Some(1.0));
        assert!(n == 1 && why.contains("no free GPU memory"), "{why}");
    }
}
