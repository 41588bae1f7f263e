//! Findings from hand-made metadata, NVML reports and environments.

use super::*;
use crate::doctor::environment::hides_every_gpu;
use crate::gpu::GpuInfo;
use crate::python::{PythonInfo, Source};

fn interp(dists: &[(&str, &str)]) -> Interpreter {
    Interpreter {
        path: "/venv/bin/python".into(),
        source: Source::Flag,
        info: PythonInfo {
            executable: "/venv/bin/python".into(),
            prefix: "/venv".into(),
            base_prefix: "/usr".into(),
            python_version: "3.11.7".into(),
            jax_version: dists.iter().find(|d| d.0 == "jax").map(|d| d.1.to_string()),
            jaxlib_version: dists
                .iter()
                .find(|d| d.0 == "jaxlib")
                .map(|d| d.1.to_string()),
            jax_importable: true,
            import_error: None,
            distributions: dists
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            jax_plugins: vec![],
            sys_path: vec![],
            user_site: None,
        },
    }
}

fn gpus(n: usize) -> NvmlReport {
    NvmlReport {
        available: true,
        driver_version: Some("550.54".into()),
        cuda_driver_version: Some("12.4".into()),
        gpus: (0..n)
            .map(|i| GpuInfo {
                index: i as u32,
                name: "NVIDIA H100".into(),
                uuid: Some(format!("GPU-0000-{i}")),
                memory_total_mb: 80000.0,
                memory_used_mb: 0.0,
                memory_free_mb: 80000.0,
                utilization_gpu_pct: Some(0),
                utilization_memory_pct: Some(0),
                compute_capability: Some("9.0".into()),
                processes: vec![],
            })
            .collect(),
        ..Default::default()
    }
}

fn codes(i: &Interpreter, nvml: &NvmlReport, env: &[(&str, &str)]) -> Vec<Finding> {
    let py = python_report(i, vec![]);
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    findings(i, &py, nvml, &env, Device::Auto)
}

fn find<'a>(f: &'a [Finding], code: &str) -> &'a Finding {
    f.iter().find(|x| x.code == code).unwrap_or_else(|| {
        panic!(
            "no {code} in {:?}",
            f.iter().map(|x| &x.code).collect::<Vec<_>>()
        )
    })
}

const OK: &[(&str, &str)] = &[("jax", "0.10.2"), ("jaxlib", "0.10.2")];

#[test]
fn versions_compare_numerically() {
    assert_eq!(version_cmp("0.10.2", "0.9.9"), Ordering::Greater);
    assert_eq!(version_cmp("0.4.36.dev20241101", "0.4.36"), Ordering::Equal);
    assert_eq!(version_cmp("9.1.0", "9.10.2"), Ordering::Less);
}

#[test]
fn a_healthy_cpu_install_has_no_errors_but_no_gpu() {
    let f = codes(&interp(OK), &NvmlReport::default(), &[]);
    assert!(!f.iter().any(|x| x.blocks(Platform::Cpu)), "{f:?}");
    assert!(find(&f, "nvml-absent").blocks(Platform::Gpu));
}

#[test]
fn both_cuda_families_conflict() {
    let mut d = OK.to_vec();
    d.extend([
        ("jax-cuda12-plugin", "0.10.2"),
        ("jax-cuda12-pjrt", "0.10.2"),
        ("jax-cuda13-plugin", "0.10.2"),
        ("jax-cuda13-pjrt", "0.10.2"),
    ]);
    let f = codes(&interp(&d), &gpus(1), &[]);
    let c = find(&f, "cuda-plugin-conflict");
    assert!(c.blocks(Platform::Gpu));
    let fix = c.fix.as_deref().unwrap();
    assert!(fix.starts_with("/venv/bin/python -m pip uninstall -y jax-cuda12-pjrt jax-cuda12-plugin jax-cuda13-pjrt jax-cuda13-plugin"), "{fix}");
    assert!(
        fix.contains("'jax[cuda12]==0.10.2'"),
        "driver 12.4 keeps the cuda12 family: {fix}"
    );
}

#[test]
fn jaxlib_newer_than_jax_is_an_error_everywhere() {
    let f = codes(
        &interp(&[("jax", "0.10.2"), ("jaxlib", "0.11.0")]),
        &NvmlReport::default(),
        &[],
    );
    let m = find(&f, "jax-jaxlib-mismatch");
    assert!(m.blocks(Platform::Cpu));
    assert!(m.message.contains("newer"));
    assert_eq!(
        m.fix.as_deref(),
        Some("/venv/bin/python -m pip install 'jax==0.10.2' 'jaxlib==0.10.2'")
    );
}

#[test]
fn gpu_host_without_cuda_plugin_and_mismatched_plugin() {
    let f = codes(&interp(OK), &gpus(2), &[]);
    assert!(find(&f, "cpu-only-jaxlib")
        .fix
        .as_deref()
        .unwrap()
        .contains("'jax[cuda12]==0.10.2'"));
    let mut d = OK.to_vec();
    d.push(("jax-cuda12-plugin", "0.9.0"));
    let f = codes(&interp(&d), &gpus(1), &[]);
    assert!(find(&f, "plugin-version-mismatch")
        .fix
        .as_deref()
        .unwrap()
        .ends_with("'jax-cuda12-plugin==0.10.2'"));
}

#[test]
fn harmful_environment_variables() {
    let f = codes(
        &interp(OK),
        &gpus(2),
        &[
            ("JAX_PLATFORM_NAME", "gpu"),
            ("JAX_PLATFORMS", "cuda,cpu"),
            (
                "XLA_FLAGS",
                "--xla_gpu_enable_latency_hiding_scheduler=true bogus",
            ),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", "1.5"),
            ("CUDA_VISIBLE_DEVICES", "-1"),
        ],
    );
    assert_eq!(
        find(&f, "jax-platform-name").fix.as_deref(),
        Some("unset JAX_PLATFORM_NAME   # choose the device with --device or JAX_PLATFORMS")
    );
    find(&f, "jax-platforms-fallback");
    assert_eq!(
        find(&f, "xla-flags-unknown").fix.as_deref(),
        Some("export XLA_FLAGS='--xla_gpu_enable_latency_hiding_scheduler=true'")
    );
    assert!(find(&f, "xla-mem-fraction").blocks(Platform::Gpu));
    assert!(find(&f, "cuda-visible-devices-hides-all").blocks(Platform::Gpu));
}

#[test]
fn cuda_visible_devices_rules() {
    let two = gpus(2);
    assert!(hides_every_gpu("", &two));
    assert!(hides_every_gpu("-1", &two));
    assert!(
        hides_every_gpu("5,0", &two),
        "CUDA stops at the first invalid entry"
    );
    assert!(!hides_every_gpu("1", &two));
    assert!(!hides_every_gpu("GPU-0000-1", &two));
    assert!(hides_every_gpu("GPU-ffff", &two));
    assert!(hides_every_gpu("NoDevFiles", &two));
}

#[test]
fn an_older_cudnn_first_on_ld_library_path() {
    let mut d = OK.to_vec();
    d.extend([
        ("jax-cuda12-plugin", "0.10.2"),
        ("nvidia-cudnn-cu12", "9.12.0.46"),
    ]);
    let i = interp(&d);
    let libs = vec![
        LibraryDir {
            path: "/opt/old/lib".into(),
            cudnn: vec!["9.10.2".into()],
            cublas: vec![],
        },
        LibraryDir {
            path: "/usr/local/cuda/lib64".into(),
            cudnn: vec![],
            cublas: vec!["12.4.5".into()],
        },
    ];
    let py = python_report(&i, libs);
    assert_eq!(
        py.cudnn_would_load.as_deref(),
        Some("9.10.2 from /opt/old/lib")
    );
    let f = findings(&i, &py, &gpus(1), &BTreeMap::new(), Device::Gpu);
    let c = find(&f, "cudnn-mismatch");
    assert!(c
        .message
        .contains("Loaded runtime CuDNN library: 9.10.2 but source was compiled with: 9.12.0.46"));
    assert_eq!(
        c.fix.as_deref(),
        Some("export LD_LIBRARY_PATH='/usr/local/cuda/lib64'")
    );
}
