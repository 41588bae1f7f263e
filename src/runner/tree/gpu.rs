//! Whether a script's processes hold a GPU device open: the runner's own evidence
//! that the script used a GPU, beside what its telemetry says.

use super::TreeSampler;

impl TreeSampler {
    /// Looks through the open files of the tree's processes (the last sample's) for a
    /// GPU device node: the runner's own evidence that the script used a GPU, whatever
    /// its telemetry file says. Stops looking once one is seen.
    pub fn look_for_gpu(&mut self) {
        if self.gpu_opened || self.last_pids.is_empty() {
            return;
        }
        self.gpu_looked = true;
        self.gpu_opened = (self.last_pids.iter()).any(|p| holds_gpu_device(&self.proc_dir(*p)));
    }
}

/// NVIDIA's device nodes, and ROCm's.
const GPU_DEVICES: &[&str] = &["/dev/nvidia", "/dev/kfd", "/dev/dri/"];

fn holds_gpu_device(dir: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("{dir}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            let t = target.to_string_lossy();
            GPU_DEVICES.iter().any(|d| t.starts_with(d))
        })
    })
}
