//! The doctor's report as data: what `jax-runner doctor --json` prints and what runs
//! store under `environment` in `performance_metrics.json`. The inspection that fills
//! it lives in `doctor/` and `gpu.rs`; the types live here so the output contract needs
//! nothing from the code that produces them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::FailureClass;
use super::{Device, Platform};

pub mod sandbox;

pub use sandbox::{
    BwrapProbe, CgroupProbe, LandlockProbe, LayerFinding, LayerState, SandboxLayer, SandboxReport,
    SandboxUserProbe, SeccompProbe, UsernsProbe,
};

// Doc comments below are the schema's descriptions (`schemas/doctor.schema.json`):
// changing one changes the committed schema.

/// How bad a finding is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    /// Stops the devices it names.
    Error,
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Stable code (`cuda-plugin-conflict`, …).
    pub code: String,
    /// How bad.
    pub severity: Severity,
    /// Devices it affects (errors stop them).
    pub devices: Vec<Platform>,
    /// The cause, in words.
    pub message: String,
    /// The exact command that fixes it, when there is one.
    pub fix: Option<String>,
}

/// The host's CPU and memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Host {
    /// CPU model name.
    pub cpu_model: String,
    /// Logical CPUs.
    pub logical_cpus: usize,
    /// Physical cores, when known.
    pub physical_cores: Option<usize>,
    /// Memory, MiB.
    pub memory_total_mb: f64,
    /// Memory available, MiB.
    pub memory_available_mb: f64,
}

/// One GPU as NVML sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// NVML UUID (`GPU-…`), matched against `CUDA_VISIBLE_DEVICES` entries.
    pub uuid: Option<String>,
    /// Memory, MiB.
    pub memory_total_mb: f64,
    /// Memory in use, MiB.
    pub memory_used_mb: f64,
    /// Memory free, MiB.
    pub memory_free_mb: f64,
    /// GPU utilization, percent.
    pub utilization_gpu_pct: Option<u32>,
    /// Memory-controller utilization, percent.
    pub utilization_memory_pct: Option<u32>,
    /// CUDA compute capability, `major.minor`.
    pub compute_capability: Option<String>,
    /// Processes running compute work on it.
    pub processes: Vec<GpuProcess>,
}

/// A compute process on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuProcess {
    /// Its PID (in NVML's PID namespace).
    pub pid: u32,
    /// GPU memory it uses, MiB, when NVML can tell.
    pub used_memory_mb: Option<f64>,
}

/// The driver and its GPUs, or why NVML is not there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvmlReport {
    /// Whether NVML could be loaded and initialised.
    pub available: bool,
    /// Why not, when it could not.
    pub error: Option<String>,
    /// Driver version (`550.54.15`).
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports (`12.4`).
    pub cuda_driver_version: Option<String>,
    /// The GPUs.
    pub gpus: Vec<GpuInfo>,
    /// Set when `JAX_RUNNER_GPU_COUNT` overrides the count NVML gives.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub count_override: Option<usize>,
}

/// An `LD_LIBRARY_PATH` folder holding CUDA math libraries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LibraryDir {
    /// The folder.
    pub path: String,
    /// cuDNN versions found (from `libcudnn.so.X.Y.Z` names), highest first.
    pub cudnn: Vec<String>,
    /// cuBLAS versions found, highest first.
    pub cublas: Vec<String>,
}

/// The interpreter and what it has installed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PythonReport {
    /// Its path.
    pub interpreter: String,
    /// How it was chosen (`flag`, `env`, `virtualenv`, `path`, `managed`).
    pub source: String,
    /// The same, in words.
    pub chosen_because: String,
    /// Python version.
    pub python_version: String,
    /// jax version, if installed.
    pub jax_version: Option<String>,
    /// jaxlib version, if installed.
    pub jaxlib_version: Option<String>,
    /// Whether those two fit together.
    pub jax_jaxlib_compatible: bool,
    /// Whether `import jax` works.
    pub jax_importable: bool,
    /// PJRT plugin packages (jax-cuda*, jax-rocm*, libtpu) with versions.
    pub plugins: BTreeMap<String, String>,
    /// Plugins jax would discover by name (entry points, `jax_plugins.*`).
    pub discovered_plugins: Vec<String>,
    /// NVIDIA wheels (nvidia-*) with versions.
    pub cuda_wheels: BTreeMap<String, String>,
    /// The cuDNN version the wheels bring.
    pub cudnn_wheel_version: Option<String>,
    /// `LD_LIBRARY_PATH` folders holding cuDNN or cuBLAS libraries.
    pub ld_library_path: Vec<LibraryDir>,
    /// The cuDNN that would load first (`LD_LIBRARY_PATH` wins over the wheels).
    pub cudnn_would_load: Option<String>,
}

/// What one live check saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LiveCheck {
    /// The backend tried.
    pub platform: Platform,
    /// Whether the computation ran on that platform.
    pub ok: bool,
    /// The device the result lives on (`cuda:0`, `cpu:0`).
    pub device: Option<String>,
    /// Seconds from `import jax` to the backend's devices being listed.
    pub init_s: Option<f64>,
    /// Seconds for the whole check, process start included.
    pub total_s: f64,
    /// The failure class when it did not work.
    pub class: Option<FailureClass>,
    /// The line that explains the failure.
    pub error: Option<String>,
}

/// Whether a device works, and why not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    /// The device.
    pub device: Platform,
    /// True when jax ran a computation on it (or, for a device not checked live, when
    /// nothing stands in its way).
    pub works: bool,
    /// The findings that stop it, by code.
    pub blocked_by: Vec<String>,
}

/// The whole report; `jax-runner doctor --json` prints it, runs store it under
/// `environment` in `performance_metrics.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorReport {
    /// Version of this format.
    pub schema_version: u32,
    /// The device asked about.
    pub device_requested: Device,
    /// CPU and memory.
    pub host: Host,
    /// The NVIDIA driver and GPUs.
    pub nvml: NvmlReport,
    /// The interpreter.
    pub python: PythonReport,
    /// Environment variables that affect jax, as set.
    pub environment: BTreeMap<String, String>,
    /// Live backend checks that ran.
    pub live: Vec<LiveCheck>,
    /// Problems, each with its cause and fix.
    pub findings: Vec<Finding>,
    /// Per device: works or not.
    pub verdicts: Vec<Verdict>,
    /// What each sandbox layer can do here. `jax-runner doctor` fills it; a run's
    /// pre-flight leaves it out (its results say which layers it used).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sandbox: Option<SandboxReport>,
}
