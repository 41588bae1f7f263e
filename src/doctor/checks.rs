//! The findings: each problem doctor knows, decided from package metadata, NVML, the
//! environment and `LD_LIBRARY_PATH`, with its cause and the command that fixes it.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::Path;

use super::environment::{environment_findings, library_findings};
use super::finding::{major_minor, version_cmp, ALL, GPU};
use crate::environment::Environment;
use crate::model::doctor::{Finding, LibraryDir, LiveCheck, NvmlReport, PythonReport, Severity};
use crate::model::{Device, Platform};
use crate::python::{setup::Flavor, shell_quote, Interpreter};

/// The environment variables that change what jax does.
pub fn relevant_environment(env: &Environment) -> BTreeMap<String, String> {
    env.iter()
        .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v.to_string_lossy().into_owned())))
        .filter(|(k, _)| {
            k.starts_with("JAX_")
                || k.starts_with("XLA_")
                || k == "CUDA_VISIBLE_DEVICES"
                || k == "NVIDIA_VISIBLE_DEVICES"
                || k == "LD_LIBRARY_PATH"
        })
        .filter(|(k, _)| !k.starts_with("JAX_RUNNER_"))
        .collect()
}

fn family(name: &str) -> Option<&'static str> {
    ["cuda12", "cuda13", "rocm"]
        .into_iter()
        .find(|f| name.starts_with(&format!("jax-{f}-")))
}

/// The interpreter section of the report.
pub fn python_report(interp: &Interpreter, libs: Vec<LibraryDir>) -> PythonReport {
    let info = &interp.info;
    let pick = |pred: &dyn Fn(&str) -> bool| -> BTreeMap<String, String> {
        info.distributions
            .iter()
            .filter(|(k, _)| pred(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let plugins = pick(&|k| family(k).is_some() || k.starts_with("libtpu"));
    let cuda_wheels = pick(&|k| k.starts_with("nvidia-"));
    let cudnn_wheel_version = cuda_wheels
        .iter()
        .find(|(k, _)| k.starts_with("nvidia-cudnn-"))
        .map(|(_, v)| v.clone());
    let cudnn_would_load = libs
        .iter()
        .find_map(|d| d.cudnn.first().map(|v| format!("{v} from {}", d.path)))
        .or_else(|| {
            cudnn_wheel_version
                .as_ref()
                .map(|v| format!("{v} from the nvidia-cudnn wheel"))
        });
    let compatible = match (&info.jax_version, &info.jaxlib_version) {
        (Some(jax), Some(lib)) => jax_jaxlib_problem(jax, lib).is_none(),
        _ => false,
    };
    PythonReport {
        interpreter: interp.path.display().to_string(),
        source: interp.source.as_str().into(),
        chosen_because: interp.source.describe().into(),
        python_version: info.python_version.clone(),
        jax_version: info.jax_version.clone(),
        jaxlib_version: info.jaxlib_version.clone(),
        jax_jaxlib_compatible: compatible,
        jax_importable: info.jax_importable,
        plugins,
        discovered_plugins: info.jax_plugins.clone(),
        cuda_wheels,
        cudnn_wheel_version,
        ld_library_path: libs,
        cudnn_would_load,
    }
}

/// jaxlib newer than jax, or a different minor version, does not import.
fn jax_jaxlib_problem(jax: &str, jaxlib: &str) -> Option<String> {
    if version_cmp(jaxlib, jax) == Ordering::Greater {
        Some(format!(
            "jaxlib {jaxlib} is newer than jax {jax}; jax refuses to import with it"
        ))
    } else if major_minor(jaxlib) != major_minor(jax) {
        Some(format!(
            "jaxlib {jaxlib} is too old for jax {jax} (they are released together)"
        ))
    } else {
        None
    }
}

/// Devices worth checking: the CPU always, the GPU when the driver has one, the TPU
/// when libtpu is installed.
pub fn candidate_platforms(py: &PythonReport, nvml: &NvmlReport) -> Vec<Platform> {
    let mut out = vec![Platform::Cpu];
    if nvml.gpu_count() > 0 {
        out.push(Platform::Gpu);
    }
    if py.plugins.keys().any(|k| k.starts_with("libtpu")) {
        out.push(Platform::Tpu);
    }
    out
}

/// Every finding that needs no live run.
pub fn findings(
    interp: &Interpreter,
    py: &PythonReport,
    nvml: &NvmlReport,
    env: &BTreeMap<String, String>,
    device: Device,
) -> Vec<Finding> {
    let fixes = Fixes::new(interp, py, nvml);
    let mut out = install_findings(interp, py, &fixes);
    out.extend(driver_findings(py, nvml, &fixes));
    out.extend(environment_findings(env, nvml, device));
    out.extend(library_findings(py));
    out
}

/// What the fixes are written with.
struct Fixes {
    /// The interpreter, quoted for a shell.
    python: String,
    jax_version: String,
    /// The CUDA plugin family the driver can run.
    driver_family: &'static str,
}

impl Fixes {
    fn new(interp: &Interpreter, py: &PythonReport, nvml: &NvmlReport) -> Fixes {
        Fixes {
            python: shell_quote(&interp.path),
            jax_version: py.jax_version.clone().unwrap_or_else(|| "0.10.2".into()),
            driver_family: if nvml.cuda_major().is_some_and(|m| m >= 13) {
                "cuda13"
            } else {
                "cuda12"
            },
        }
    }

    fn pip(&self, args: &str) -> String {
        format!("{} -m pip install {args}", self.python)
    }
}

/// The plugin families installed (`cuda12`, `cuda13`, …).
fn plugin_families(py: &PythonReport) -> Vec<&str> {
    let mut f: Vec<&str> = py.plugins.keys().filter_map(|k| family(k)).collect();
    f.dedup();
    f
}

/// The Python installation: jax and jaxlib, and the plugins beside them.
fn install_findings(interp: &Interpreter, py: &PythonReport, fixes: &Fixes) -> Vec<Finding> {
    let pip = |args: &str| fixes.pip(args);
    let python = &fixes.python;
    let jax_version = &fixes.jax_version;
    let driver_family = fixes.driver_family;
    let mut out = Vec::new();
    match (&py.jax_version, &py.jaxlib_version) {
        (None, _) | (_, None) => out.push(Finding::new(
            "jax-missing",
            Severity::Error,
            ALL,
            format!("{} has no jax/jaxlib installed", interp.path.display()),
            Some(format!(
                "{} (or run `jax-runner setup`)",
                pip(&Flavor::Cpu.pinned_jax())
            )),
        )),
        (Some(jax), Some(lib)) => {
            if let Some(problem) = jax_jaxlib_problem(jax, lib) {
                out.push(Finding::new(
                    "jax-jaxlib-mismatch",
                    Severity::Error,
                    ALL,
                    problem,
                    Some(pip(&format!("'jax=={jax}' 'jaxlib=={jax}'"))),
                ));
            } else if !py.jax_importable {
                out.push(Finding::new(
                    "jax-import-fails",
                    Severity::Error,
                    ALL,
                    format!(
                        "import jax fails: {}",
                        interp
                            .info
                            .import_error
                            .as_deref()
                            .unwrap_or("unknown error")
                    ),
                    Some(pip(&format!(
                        "--force-reinstall 'jax=={jax}' 'jaxlib=={lib}'"
                    ))),
                ));
            }
        }
    }
    let families = plugin_families(py);
    if families.contains(&"cuda12") && families.contains(&"cuda13") {
        let all: Vec<&String> = py
            .plugins
            .keys()
            .filter(|k| family(k).is_some_and(|f| f.starts_with("cuda")))
            .collect();
        out.push(Finding::new(
            "cuda-plugin-conflict",
            Severity::Error,
            GPU,
            format!(
                "two CUDA plugin families are installed ({}): jax fails with `ALREADY_EXISTS: PJRT_Api already exists for device type cuda`",
                all.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
            Some(format!(
                "{python} -m pip uninstall -y {} && {}",
                all.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "),
                pip(&format!("'jax[{driver_family}]=={jax_version}'"))
            )),
        ));
    }
    if let Some(lib) = &py.jaxlib_version {
        for (name, version) in py.plugins.iter().filter(|(k, _)| family(k).is_some()) {
            if version_cmp(version, lib) != Ordering::Equal {
                out.push(Finding::new(
                    "plugin-version-mismatch",
                    Severity::Error,
                    GPU,
                    format!("{name} {version} does not match jaxlib {lib}: jax reports a plugin configuration error"),
                    Some(pip(&format!("'{name}=={lib}'"))),
                ));
            }
        }
    }
    out
}

/// The driver and the GPUs, against the plugins installed.
fn driver_findings(py: &PythonReport, nvml: &NvmlReport, fixes: &Fixes) -> Vec<Finding> {
    let pip = |args: &str| fixes.pip(args);
    let python = &fixes.python;
    let jax_version = &fixes.jax_version;
    let driver_family = fixes.driver_family;
    let families = plugin_families(py);
    let mut out = Vec::new();
    let gpus = nvml.gpu_count();
    if !nvml.available && nvml.count_override.is_none() {
        out.push(Finding::new(
            "nvml-absent",
            Severity::Error,
            GPU,
            format!(
                "no NVIDIA driver found ({}): this machine cannot run jax on an NVIDIA GPU",
                nvml.error.as_deref().unwrap_or("NVML unavailable")
            ),
            None,
        ));
    } else if gpus == 0 {
        out.push(Finding::new(
            "no-gpu",
            Severity::Error,
            GPU,
            "the NVIDIA driver reports no GPU".into(),
            None,
        ));
    } else if !families.iter().any(|f| f.starts_with("cuda")) {
        out.push(Finding::new(
            "cpu-only-jaxlib",
            Severity::Error,
            GPU,
            "an NVIDIA GPU is present, but no CUDA plugin is installed: jax falls back to the CPU"
                .into(),
            Some(pip(&format!("'jax[{driver_family}]=={jax_version}'"))),
        ));
    } else if driver_family == "cuda12"
        && families.contains(&"cuda13")
        && !families.contains(&"cuda12")
    {
        out.push(Finding::new(
            "driver-too-old",
            Severity::Error,
            GPU,
            format!(
                "the CUDA 13 plugin is installed but the driver supports CUDA {}",
                nvml.cuda_driver_version.as_deref().unwrap_or("12 or older")
            ),
            Some(format!(
                "{python} -m pip uninstall -y jax-cuda13-plugin jax-cuda13-pjrt && {}",
                pip(&format!("'jax[cuda12]=={jax_version}'"))
            )),
        ));
    }
    if !py.plugins.keys().any(|k| k.starts_with("libtpu")) {
        out.push(Finding::new(
            "no-tpu",
            Severity::Error,
            &[Platform::Tpu],
            "libtpu is not installed".into(),
            None,
        ));
    }

    out
}

/// A finding from a failed live check.
pub fn from_live(lc: &LiveCheck, python: &Path) -> Option<Finding> {
    if lc.ok {
        return None;
    }
    let class = lc.class.map(|c| c.as_str()).unwrap_or("script_error");
    let fix = match lc.class {
        Some(crate::model::FailureClass::BrokenInstall) => Some(format!(
            "{} -m pip install --force-reinstall {}",
            shell_quote(python),
            Flavor::Cpu.pinned_jax()
        )),
        _ => None,
    };
    Some(Finding::new(
        &format!("live-{}", lc.platform.as_str()),
        Severity::Error,
        &[lc.platform],
        format!(
            "jax could not run on {} ({class}): {}",
            lc.platform.as_str(),
            lc.error.as_deref().unwrap_or("no detail")
        ),
        fix,
    ))
}

#[cfg(test)]
mod tests;
