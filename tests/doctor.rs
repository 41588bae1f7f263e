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
    assert_eq!(doc["schema_version"], 2);
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

/// The sandbox finding for `layer`.
fn layer<'a>(doc: &'a Value, layer: &str) -> &'a Value {
    doc["sandbox"]["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no sandbox section: {doc}"))
        .iter()
        .find(|f| f["layer"] == layer)
        .unwrap_or_else(|| panic!("no {layer} finding in {}", doc["sandbox"]))
}

/// The layers a run here uses, from what the library finds on this machine.
fn layers_here(root: bool, bwrap_ok: bool, namespaces: bool) -> Vec<String> {
    let mut out = Vec::new();
    if bwrap_ok {
        out.push("bwrap".to_string());
    } else if root && namespaces {
        out.push("namespaces".to_string());
    }
    if let Some(abi) = jax_runner::sandbox::landlock::abi() {
        out.push(format!("landlock-v{abi}"));
    }
    if root {
        out.push("uid".to_string());
    }
    if jax_runner::sandbox::seccomp::programs().is_some() {
        out.push("seccomp".to_string());
    }
    out
}

fn builtin_namespaces() -> bool {
    jax_runner::sandbox::layers::namespaces_here()
}

#[test]
fn the_sandbox_section_says_what_each_layer_can_do_here() {
    let (_, doc) = doctor(python(), "cpu", &[]);
    assert_valid(&validator("doctor"), &doc, "doctor --json");
    let sb = &doc["sandbox"];
    let root = user::tests_run_as_root();
    assert_eq!(sb["root"], root);
    // What the doctor says of bwrap is checked where it works (CI installs it).
    let bwrap_ok = prereq::require(
        prereq::Prereq::Bwrap,
        prereq::bwrap(),
        "the doctor's sandbox section, bwrap part",
    );
    assert_eq!(sb["bwrap"]["works"], bwrap_ok, "{}", sb["bwrap"]);
    let expected = layers_here(root, bwrap_ok, builtin_namespaces());
    assert_eq!(sb["layers"], serde_json::json!(expected));
    if bwrap_ok {
        assert_eq!(layer(&doc, "bwrap")["state"], "active");
        assert!(sb["bwrap"]["version"]
            .as_str()
            .unwrap()
            .starts_with("bubblewrap "));
    }
    match jax_runner::sandbox::landlock::abi() {
        Some(abi) => {
            assert_eq!(sb["landlock"]["abi"], abi);
            assert!(layer(&doc, "landlock")["message"]
                .as_str()
                .unwrap()
                .contains(&format!("ABI {abi}")));
            assert!(!sb["landlock"]["covers"].as_array().unwrap().is_empty());
        }
        None => assert!(sb["landlock"]["error"].is_string()),
    }
    if cfg!(target_arch = "x86_64") {
        assert_eq!(sb["seccomp"]["filter"], true);
        assert!(sb["seccomp"]["denied_calls"].as_u64().unwrap() > 20);
        assert_eq!(layer(&doc, "seccomp")["state"], "active");
    }
    if root {
        assert_eq!(sb["sandbox_user"]["first_uid"], 61184);
        assert_eq!(layer(&doc, "user-namespaces")["state"], "unused");
    }
    assert_eq!(sb["findings"].as_array().unwrap().len(), 6);

    let human = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["doctor", "--device", "cpu", "--python"])
        .arg(python())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    let line = format!("Sandbox   a run here uses: {}", expected.join(", "));
    assert!(text.contains(&line), "{text}");
    for name in ["bwrap", "landlock", "seccomp", "sandbox-user", "cgroups"] {
        assert!(text.contains(&format!(" {name} ")), "{name}: {text}");
    }
}

#[test]
fn with_bwrap_off_path_the_sandbox_section_gives_the_install_command() {
    let (_, doc) = doctor(python(), "cpu", &[("PATH", "/nonexistent")]);
    let sb = &doc["sandbox"];
    assert_eq!(sb["bwrap"]["works"], false);
    assert_eq!(sb["bwrap"]["path"], Value::Null);
    assert_eq!(sb["bwrap"]["error"], "bwrap is not installed");
    let f = layer(&doc, "bwrap");
    assert_eq!(f["state"], "missing");
    assert!(f["fix"]
        .as_str()
        .unwrap()
        .contains("apt-get install bubblewrap"));
    let root = user::tests_run_as_root();
    let expected = layers_here(root, false, builtin_namespaces());
    assert_eq!(sb["layers"], serde_json::json!(expected));

    let human = assert_cmd::Command::cargo_bin("jax-runner")
        .unwrap()
        .args(["doctor", "--device", "cpu", "--python"])
        .arg(python())
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("✗ bwrap           bwrap is not installed"),
        "{text}"
    );
    assert!(
        text.contains("strengthen: ") && text.contains("apt-get install bubblewrap"),
        "{text}"
    );
}

#[test]
fn an_ordinary_user_is_told_what_its_own_runs_get() {
    let account = user::Account::user();
    let out = account
        .command()
        .args(["doctor", "--json", "--device", "cpu", "--python"])
        .arg(&account.python)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json printed no JSON ({e}): {}", stderr(&out)));
    let sb = &doc["sandbox"];
    assert_eq!(sb["root"], false);
    assert_eq!(sb["sandbox_user"]["switched"], false);
    assert_eq!(sb["sandbox_user"]["uid"], account.uid);
    let user = layer(&doc, "sandbox-user");
    assert_eq!(user["state"], "unused");
    assert!(user["message"]
        .as_str()
        .unwrap()
        .contains(&format!("uid {}", account.uid)));
    let layers: Vec<&str> = sb["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        !layers.contains(&"uid") && !layers.contains(&"namespaces"),
        "{layers:?}"
    );
    // Whatever this machine allows, an ordinary user's bwrap never runs privileged, and
    // a user namespace it cannot make comes with the reason.
    assert_eq!(sb["bwrap"]["privileged"], false);
    let userns = layer(&doc, "user-namespaces");
    assert_ne!(userns["state"], "unused");
    if sb["user_namespaces"]["works"] == true && sb["bwrap"]["works"] == true {
        assert_eq!(sb["bwrap"]["userns"], true, "{}", sb["bwrap"]);
        assert_eq!(layers[0], "bwrap");
    }
    // Per-attempt cgroups the user cannot make come with the delegation command.
    let cg = layer(&doc, "cgroups");
    if cg["state"] == "missing" && sb["cgroups"]["version"] != "none" {
        let fix = cg["fix"].as_str().unwrap();
        assert!(
            fix.contains("systemd-run --user") || fix.contains("cgcreate"),
            "{fix}"
        );
    }
}
