//! Interpreter choice with fake interpreters: shell scripts that answer the probe.

use super::*;
use std::os::unix::fs::PermissionsExt;

/// Writes an executable that prints a probe answer naming itself.
fn fake_python(dir: &Path, name: &str, has_jax: bool) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body = format!(
        "#!/bin/sh\necho '{{\"executable\": \"{}\", \"prefix\": \"/x\", \"python_version\": \"3.11.0\", \"jax_version\": {}, \"jaxlib_version\": null, \"jax_importable\": {}, \"import_error\": {}}}'\n",
        path.display(),
        if has_jax { "\"0.10.2\"" } else { "null" },
        has_jax,
        if has_jax { "null" } else { "\"ModuleNotFoundError: No module named 'jax'\"" },
    );
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn explicit_choices_win_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let flag = fake_python(d, "flag/python", true);
    let env = fake_python(d, "env/python", true);
    fake_python(d, "venv/bin/python", true);
    let path_dir = d.join("pathbin");
    fake_python(&path_dir, "python3", true);
    let mut r = Resolver {
        flag: Some(flag.clone()),
        env_var: Some(env.clone()),
        virtual_env: Some(d.join("venv")),
        path_var: Some(path_dir.clone().into_os_string()),
    };
    let got = r.resolve().unwrap();
    assert_eq!((got.path, got.source), (flag, Source::Flag));
    r.flag = None;
    let got = r.resolve().unwrap();
    assert_eq!((got.path, got.source), (env, Source::Env));
    r.env_var = None;
    let got = r.resolve().unwrap();
    assert_eq!(got.source, Source::Virtualenv);
    assert_eq!(got.path, d.join("venv/bin/python"));
    r.virtual_env = None;
    let got = r.resolve().unwrap();
    assert_eq!(
        (got.path, got.source),
        (path_dir.join("python3"), Source::Path)
    );
    assert_eq!(got.info.jax_version.as_deref(), Some("0.10.2"));
}

#[test]
fn explicit_interpreter_without_jax_is_an_error_with_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let nojax = fake_python(tmp.path(), "nojax/python", false);
    let r = Resolver {
        flag: Some(nojax.clone()),
        ..Default::default()
    };
    let err = r.resolve().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PythonError::NoJax { .. }));
    assert!(
        msg.contains("-m pip install 'jax==0.10.2' 'jaxlib==0.10.2'"),
        "{msg}"
    );
    assert!(msg.contains(&nojax.display().to_string()));
}

#[test]
fn missing_interpreter_names_where_it_came_from() {
    let r = Resolver {
        env_var: Some(PathBuf::from("/no/such/python")),
        ..Default::default()
    };
    let msg = r.resolve().unwrap_err().to_string();
    assert!(
        msg.contains("/no/such/python") && msg.contains("JAX_RUNNER_PYTHON"),
        "{msg}"
    );
}

#[test]
fn garbage_probe_output_is_a_probe_error() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("python");
    std::fs::write(&path, "#!/bin/sh\necho not json; echo oops >&2; exit 3\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = probe(&path).unwrap_err().to_string();
    assert!(err.contains("oops"), "{err}");
}

#[test]
fn pinned_jax_comes_from_the_requirements_file() {
    assert_eq!(
        setup::Flavor::Cpu.pinned_jax(),
        "'jax==0.10.2' 'jaxlib==0.10.2'"
    );
    assert!(setup::Flavor::Cuda12
        .requirements()
        .contains("jax-cuda12-plugin"));
    assert_ne!(
        setup::Flavor::Cpu.venv_dir(),
        setup::Flavor::Cuda12.venv_dir()
    );
}

#[test]
fn shell_quote_only_when_needed() {
    assert_eq!(
        shell_quote(Path::new("/usr/bin/python3")),
        "/usr/bin/python3"
    );
    assert_eq!(shell_quote(Path::new("/my env/python")), "'/my env/python'");
}

/// A program still open for writing somewhere (here, in this very process) is
/// `ETXTBSY` to exec; the probe's spawn waits for it to be closed rather than fail.
#[test]
fn a_program_still_open_for_writing_starts_once_it_is_closed() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("python");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(b"#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let busy = std::process::Command::new(&path).status().unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::ETXTBSY));
    let closer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(file);
    });
    let mut cmd = std::process::Command::new(&path);
    let status = super::spawn_when_not_busy(&mut cmd)
        .unwrap()
        .wait()
        .unwrap();
    closer.join().unwrap();
    assert!(status.success());
}
