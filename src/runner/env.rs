//! The environment each script starts with: the parent's, plus the device settings,
//! the data folder, the attempt number and the compilation cache.

use std::ffi::OsString;
use std::path::Path;

use crate::gpu::share::GpuSlot;
use crate::model::Platform;

/// Variables removed from the child's environment: `JAX_PLATFORM_NAME` is deprecated,
/// and `gpu` there also means ROCm, so it must not compete with `JAX_PLATFORMS`.
pub const REMOVED: &[&str] = &["JAX_PLATFORM_NAME"];

/// Whether a parent variable passes into a sandboxed script: PATH, HOME, LANG,
/// LC_*, TZ, PYTHON*, and `CUDA_VISIBLE_DEVICES`, the GPUs the user chose (a GPU
/// slot's pin and a CPU attempt's empty list, set by the runner on top, win over it).
/// The runner's own JAX/XLA/CUDA/GNN settings are added on top, and
/// `--env`/`--env-pass` add more.
pub fn allowlisted(name: &str) -> bool {
    matches!(
        name,
        "PATH" | "HOME" | "LANG" | "TZ" | "CUDA_VISIBLE_DEVICES"
    ) || name.starts_with("LC_")
        || name.starts_with("PYTHON")
}

/// What one attempt's environment is built from.
#[derive(Debug, Clone)]
pub struct EnvSpec<'a> {
    pub platform: Platform,
    pub data_dir: &'a Path,
    pub attempt: u32,
    pub compilation_cache: Option<&'a Path>,
    /// Where the telemetry shim writes its report, when the shim is installed.
    pub telemetry: Option<(&'a Path, OsString)>,
    /// `--profile`: where the shim writes the jax.profiler trace.
    pub profile_dir: Option<&'a Path>,
    /// The GPU a GPU attempt was given (see [`crate::gpu::share`]).
    pub gpu: Option<&'a GpuSlot>,
}

/// The variables to set on top of the parent's environment.
pub fn child_env(spec: &EnvSpec<'_>) -> Vec<(&'static str, OsString)> {
    let mut vars: Vec<(&'static str, OsString)> = vec![
        ("JAX_PLATFORMS", spec.platform.jax_platforms().into()),
        ("GNN_OUTPUT_DIR", spec.data_dir.into()),
        ("JAX_OUTPUT_DIR", spec.data_dir.into()),
        ("JAX_RUNNER_ATTEMPT", spec.attempt.to_string().into()),
        // Logs stream to files as the script writes them, not when it exits.
        ("PYTHONUNBUFFERED", "1".into()),
        // The classifier needs jax's internal frames (xla_bridge) in tracebacks.
        ("JAX_TRACEBACK_FILTERING", "off".into()),
    ];
    if let Some((report, python_path)) = &spec.telemetry {
        vars.push(("JAX_RUNNER_TELEMETRY", report.into()));
        vars.push(("PYTHONPATH", python_path.clone()));
    }
    if let Some(dir) = spec.profile_dir {
        vars.push(("JAX_RUNNER_PROFILE_DIR", dir.into()));
    }
    match spec.platform {
        // An empty list hides every GPU, so a CPU run cannot grab GPU memory.
        Platform::Cpu => vars.push(("CUDA_VISIBLE_DEVICES", "".into())),
        // Without this each process takes 75% of GPU memory at start, and a second
        // script on the same GPU fails with out-of-memory.
        Platform::Gpu => vars.push(("XLA_PYTHON_CLIENT_PREALLOCATE", "false".into())),
        Platform::Tpu => {}
    }
    if let Some(slot) = spec.gpu.filter(|_| spec.platform == Platform::Gpu) {
        // One GPU per slot on a host with several: scripts would otherwise all start
        // on the first.
        if let Some(visible) = &slot.visible {
            vars.push(("CUDA_VISIBLE_DEVICES", visible.into()));
        }
        // A shared GPU: each script's allocator stays within its part.
        if let Some(f) = slot.mem_fraction {
            vars.push(("XLA_PYTHON_CLIENT_MEM_FRACTION", format!("{f:.2}").into()));
        }
    }
    if let Some(cache) = spec.compilation_cache {
        vars.push(("JAX_COMPILATION_CACHE_DIR", cache.into()));
        // Cache every compilation: generated scripts compile many small programs.
        vars.push(("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0".into()));
        vars.push(("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1".into()));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(vars: &'a [(&'static str, OsString)], key: &str) -> Option<&'a OsString> {
        vars.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    #[test]
    fn cpu_hides_gpus_and_gpu_disables_preallocation() {
        let data = Path::new("/r/data/x");
        let mut spec = EnvSpec {
            platform: Platform::Cpu,
            data_dir: data,
            attempt: 2,
            compilation_cache: None,
            telemetry: None,
            profile_dir: None,
            gpu: None,
        };
        let cpu = child_env(&spec);
        assert_eq!(get(&cpu, "JAX_PLATFORMS").unwrap(), "cpu");
        assert_eq!(get(&cpu, "CUDA_VISIBLE_DEVICES").unwrap(), "");
        assert_eq!(get(&cpu, "JAX_RUNNER_ATTEMPT").unwrap(), "2");
        assert_eq!(get(&cpu, "GNN_OUTPUT_DIR").unwrap(), "/r/data/x");
        assert!(get(&cpu, "JAX_COMPILATION_CACHE_DIR").is_none());
        assert_eq!(get(&cpu, "JAX_TRACEBACK_FILTERING").unwrap(), "off");
        assert!(get(&cpu, "PYTHONPATH").is_none());
        spec.platform = Platform::Gpu;
        spec.compilation_cache = Some(Path::new("/c"));
        let gpu = child_env(&spec);
        assert_eq!(get(&gpu, "JAX_PLATFORMS").unwrap(), "cuda");
        assert_eq!(get(&gpu, "XLA_PYTHON_CLIENT_PREALLOCATE").unwrap(), "false");
        assert!(get(&gpu, "CUDA_VISIBLE_DEVICES").is_none());
        assert_eq!(get(&gpu, "JAX_COMPILATION_CACHE_DIR").unwrap(), "/c");
        assert_eq!(
            get(&gpu, "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES").unwrap(),
            "-1"
        );
    }

    #[test]
    fn a_gpu_slot_pins_the_gpu_and_caps_a_shared_ones_memory() {
        let slot = GpuSlot {
            index: 1,
            visible: Some("GPU-1".into()),
            mem_fraction: Some(0.23),
        };
        let mut spec = EnvSpec {
            platform: Platform::Gpu,
            data_dir: Path::new("/d"),
            attempt: 1,
            compilation_cache: None,
            telemetry: None,
            profile_dir: None,
            gpu: Some(&slot),
        };
        let vars = child_env(&spec);
        assert_eq!(get(&vars, "CUDA_VISIBLE_DEVICES").unwrap(), "GPU-1");
        assert_eq!(
            get(&vars, "XLA_PYTHON_CLIENT_MEM_FRACTION").unwrap(),
            "0.23"
        );
        assert_eq!(
            get(&vars, "XLA_PYTHON_CLIENT_PREALLOCATE").unwrap(),
            "false"
        );
        // The same slot on a CPU attempt (a fallback) hides every GPU instead.
        spec.platform = Platform::Cpu;
        let vars = child_env(&spec);
        assert_eq!(get(&vars, "CUDA_VISIBLE_DEVICES").unwrap(), "");
        assert!(get(&vars, "XLA_PYTHON_CLIENT_MEM_FRACTION").is_none());
    }
}
