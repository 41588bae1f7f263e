//! Builds the confinement library (`crates/confine`'s cdylib), which the binary
//! carries (`sandbox::bwrap::library`) and writes into the user's cache folder for the
//! warm-start zygote. A nested `cargo build --release` of that one package, in a target
//! folder of its own under `OUT_DIR` (so it takes no lock the outer cargo holds), from
//! the workspace's Cargo.lock: `cargo build`, `run`, `test` and `install` all get a
//! binary that needs nothing beside it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

const PACKAGE: &str = "jax-runner-confine";
const FILE: &str = "libjax_runner_confine.so";

fn main() {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env("OUT_DIR"));
    for path in [
        "crates/confine/src",
        "crates/confine/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    let target_dir = out_dir.join("confine-target");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(&manifest_dir)
        .arg("build")
        .arg("--release")
        .arg("--lib")
        .args(["-p", PACKAGE])
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's own target folder and flags are not the nested build's: its
    // folder is its own, and its flags come from RUSTFLAGS and the config files as for
    // any build. The jobserver (CARGO_MAKEFLAGS, MAKEFLAGS) is kept, so the nested build
    // shares the outer one's job slots instead of starting as many jobs again.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    // The library is loaded, not debugged: no debug info (the release profile keeps
    // some for the binary), symbols stripped (dlopen reads the dynamic table alone).
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    // Built for the target the binary is built for.
    let (target, host) = (env("TARGET"), env("HOST"));
    let mut built = target_dir.clone();
    if target != host {
        cmd.args(["--target", &target]);
        built.push(&target);
    }
    built.push("release");
    built.push(FILE);
    // The nested cargo's messages go to this script's stderr: its stdout is cargo's.
    cmd.stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit());
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("failed to start cargo to build the confinement library ({PACKAGE}): {e}")
    });
    if !status.success() {
        panic!(
            "failed to build the confinement library: `cargo build --release --lib -p {PACKAGE}` \
             {status} (its messages are above)"
        );
    }
    // A `build.target` in a config file puts it under that target's folder.
    if !built.is_file() {
        let under_target = target_dir.join(&target).join("release").join(FILE);
        if under_target.is_file() {
            built = under_target;
        }
    }
    let dest = out_dir.join(FILE);
    std::fs::copy(&built, &dest).unwrap_or_else(|e| {
        panic!(
            "failed to copy the confinement library {} to {}: {e}",
            built.display(),
            dest.display()
        )
    });
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}
