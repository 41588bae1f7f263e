//! `jax-runner doctor` on real, deliberately broken virtual environments.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use serde_json::Value;

/// A venv whose site-packages links the managed environment's (real jax), with extra
/// fake distributions in front of it.
fn broken_venv(dir: &Path, fakes: &[(&str, &str)], link_real_jax: bool) -> PathBuf {
    let py = bare_venv(&dir.join("venv"));
    let site = purelib(&py);
    if link_real_jax {
        std::fs::write(
            site.join("managed.pth"),
            purelib(python()).as_os_str().as_encoded_bytes(),
        )
        .unwrap();
    }
    for (name, version) in fakes {
        let info = site.join(format!("{}-{version}.dist-info", name.replace('-', "_")));
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(
            info.join("METADATA"),
            format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"),
        )
        .unwrap();
    }
    py
}

/// The interpreter's site-packages folder.
fn purelib(python: &Path) -> PathBuf {
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn doctor(python: &Path, device: &str, env: &[(&str, &str)]) -> (Output, Value) {
    let mut cmd = assert_cmd::Command::cargo_bin("jax-runner").unwrap();
    cmd.args(["doctor", "--json", "--device", device, "--python"])
        .arg(python);
    for k in [
        "JAX_PLATFORM_NAME",
        "JAX_PLATFORMS",
        "XLA_FLAGS",
        "CUDA_VISIBLE_DEVICES",
        "JAX_RUNNER_GPU_COUNT",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json printed no JSON ({e}): {}", stderr(&out)));
    (out, doc)
}

fn finding<'a>(doc: &'a Value, code: &str) -> &'a Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
        .unwrap_or_else(|| panic!("no {code} finding in {}", doc["findings"]))
}

fn verdict(doc: &Value, device: &str) -> bool {
    doc["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["device"] == device)
        .unwrap()["works"]
        .as_bool()
        .unwrap()
}

#[test]
fn both_cuda_plugin_families_installed() {
    let tmp = tempfile::tempdir().unwrap();
    let py = broken_venv(
        tmp.path(),
        &[
            ("jax-cuda12-plugin", "0.10.2"),
            ("jax-cuda12-pjrt", "0.10.2"),
            ("jax-cuda13-plugin", "0.10.2"),
            ("jax-cuda13-pjrt", "0.10.2"),
        ],
        true,
    );
    let (out, doc) = doctor(&py, "gpu", &[("JAX_RUNNER_GPU_COUNT", "1")]);
    assert_eq!(code(&out), 1, "the GPU cannot work");
    let f = finding(&doc, "cuda-plugin-conflict");
    assert!(f["message"]
        .as_str()
        .unwrap()
        .contains("PJRT_Api already exists"));
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.contains("-m pip uninstall -y jax-cuda12-pjrt jax-cuda12-plugin jax-cuda13-pjrt jax-cuda13-plugin"),
        "{fix}"
    );
    assert!(
        fix.contains(py.to_str().unwrap()),
        "the fix names this interpreter: {fix}"
    );
    assert_eq!(doc["python"]["plugins"]["jax-cuda13-plugin"], "0.10.2");
    assert!(verdict(&doc, "cpu"), "the CPU still works: {}", doc["live"]);
    assert!(!verdict(&doc, "gpu"));
}

#[test]
fn jaxlib_newer_than_jax() {
    let tmp = tempfile::tempdir().unwrap();
    let py = broken_venv(tmp.path(), &[("jaxlib", "0.11.0")], true);
    let (out, doc) = doctor(&py, "cpu", &[]);
    assert_eq!(code(&out), 1);
    let f = finding(&doc, "jax-jaxlib-mismatch");
    assert!(f["message"]
        .as_str()
        .unwrap()
        .contains("jaxlib 0.11.0 is newer than jax 0.10.2"));
    assert!(f["fix"]
        .as_str()
        .unwrap()
        .ends_with("-m pip install 'jax==0.10.2' 'jaxlib==0.10.2'"));
    assert_eq!(doc["python"]["jax_jaxlib_compatible"], false);
}

#[test]
fn an_interpreter_without_jax_is_reported_not_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let py = broken_venv(tmp.path(), &[], false);
    let (out, doc) = doctor(&py, "auto", &[]);
    assert_eq!(code(&out), 1);
    assert_eq!(doc["python"]["interpreter"], py.to_str().unwrap());
    assert!(finding(&doc, "jax-missing")["fix"]
        .as_str()
        .unwrap()
        .contains("'jax==0.10.2' 'jaxlib==0.10.2'"));
}

#[test]
fn deprecated_platform_name_and_hidden_gpus() {
    let (out, doc) = doctor(
        python(),
        "auto",
        &[
            ("JAX_PLATFORM_NAME", "gpu"),
            ("CUDA_VISIBLE_DEVICES", ""),
            ("JAX_RUNNER_GPU_COUNT", "1"),
        ],
    );
    assert_eq!(code(&out), 0, "auto: the CPU works");
    assert_eq!(finding(&doc, "jax-platform-name")["severity"], "warning");
    let hidden = finding(&doc, "cuda-visible-devices-hides-all");
    assert_eq!(hidden["severity"], "error");
    assert!(hidden["fix"]
        .as_str()
        .unwrap()
        .starts_with("unset CUDA_VISIBLE_DEVICES"));
    assert_eq!(doc["environment"]["JAX_PLATFORM_NAME"], "gpu");
}

#[test]
fn nvml_absent_is_said_plainly_and_the_cpu_is_checked_live() {
    let (out, doc) = doctor(python(), "gpu", &[("JAX_RUNNER_NO_NVML", "1")]);
    assert_eq!(code(&out), 1);
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["nvml"]["available"], false);
    assert!(finding(&doc, "nvml-absent")["message"]
        .as_str()
        .unwrap()
        .contains("no NVIDIA driver"));
    let live = &doc["live"][0];
    assert_eq!(live["platform"], "cpu");
    assert_eq!(live["ok"], true);
    assert_eq!(live["device"], "cpu:0");
    assert!(live["init_s"].as_f64().unwrap() > 0.0);
    assert!(doc["host"]["logical_cpus"].as_u64().unwrap() >= 1);

    let human = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["doctor", "--python"])
        .arg(python())
        .env("JAX_RUNNER_NO_NVML", "1")
        .env_remove("JAX_RUNNER_GPU_COUNT")
        .output()
        .unwrap();
    assert_eq!(code(&human), 0);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("✓ cpu  works"), "{text}");
    assert!(text.contains("✗ gpu  no NVIDIA driver"), "{text}");
    assert!(text.contains("Driver    none:"), "{text}");
}

#[test]
fn an_unknown_xla_flag_fails_the_live_cpu_check_with_xlas_own_words() {
    let (out, doc) = doctor(python(), "cpu", &[("XLA_FLAGS", "--xla_no_such_flag=1")]);
    assert_eq!(code(&out), 1);
    let live = &doc["live"][0];
    assert_eq!(live["ok"], false);
    assert!(
        live["error"]
            .as_str()
            .unwrap()
            .contains("Unknown flag in XLA_FLAGS"),
        "{live}"
    );
    assert!(!verdict(&doc, "cpu"));
}
