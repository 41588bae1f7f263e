//! The job's wrapper (`ray_job.py`) run here with the system's Python, no cluster: what
//! it prints is what `returned` reads, for a private, an oversized and a shared data
//! folder.

use std::path::Path;
use std::process::Command;

use super::package::{wrapper_package, WRAPPER_MODULE};
use super::returned::{find, Returned};

mod stops;

const SCRIPT: &str = r#"
import os, sys
d = os.environ["GNN_OUTPUT_DIR"]
os.makedirs(os.path.join(d, "sub"), exist_ok=True)
open(os.path.join(d, "a.txt"), "w").write("a" * 100)
open(os.path.join(d, "sub", "b.txt"), "w").write("b")
os.symlink("/etc/passwd", os.path.join(d, "link"))
print("out")
sys.stderr.write("err\n")
sys.exit(3)
"#;

/// Unpacks the wrapper package into `dir` (as Ray does for `py_modules`).
fn unpack_wrapper(dir: &Path) {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(wrapper_package())).unwrap();
    z.extract(dir).unwrap();
}

/// Runs the wrapper on `SCRIPT` with `data` as the local data folder.
fn run(tmp: &Path, data: &Path, max_return: u64) -> Returned {
    let out = Command::new("python3")
        .args(["-m", WRAPPER_MODULE])
        .current_dir(tmp.join("job"))
        .env("PYTHONPATH", tmp.join("pkg"))
        .env("TMPDIR", tmp.join("node-tmp"))
        .env("GNN_OUTPUT_DIR", data)
        .env("JAX_RUNNER_RAY_SCRIPT", "script.py")
        .env("JAX_RUNNER_RAY_NONCE", "n1")
        .env("JAX_RUNNER_RAY_MAX_RETURN", max_return.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "the script's exit status");
    let log = String::from_utf8(out.stdout).unwrap();
    // Both streams echo into the job's log (in whichever order the pipes gave them).
    let before = &log[..log.find("==jax-runner-return").unwrap()];
    assert!(
        before.contains("out\n") && before.contains("err\n"),
        "{log}"
    );
    find(&log, "n1").expect("a return block")
}

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    unpack_wrapper(&tmp.path().join("pkg"));
    std::fs::create_dir(tmp.path().join("job")).unwrap();
    // The node's temporary folder, where the wrapper marks the folders it makes.
    std::fs::create_dir(tmp.path().join("node-tmp")).unwrap();
    std::fs::write(tmp.path().join("job/script.py"), SCRIPT).unwrap();
    tmp
}

#[test]
fn the_wrapper_returns_streams_figures_telemetry_and_the_data_folder() {
    let tmp = setup();
    // Absent here: the wrapper makes the same path, and removes it once packed.
    let node_data = tmp.path().join("node/data");
    let mut r = run(tmp.path(), &node_data, 1 << 20);
    assert_eq!(r.stdout, b"out\n");
    assert_eq!(r.stderr, b"err\n");
    assert_eq!(r.report.code, Some(3));
    assert_eq!(r.report.signal, None);
    assert!(r.report.peak_rss_bytes.max(r.report.max_rss_bytes) > 0);
    let jax = r.report.telemetry().expect("the shim ran in the script");
    assert!(!jax.jax_imported);
    assert!(!r.report.shared_filesystem);
    assert!(r.report.data_returned);
    assert_eq!(r.report.data_files, 2);
    assert_eq!(r.report.data_bytes, 101);
    assert_eq!(r.report.data_left_out, 1, "the link stays behind");
    assert!(!tmp.path().join("node").exists(), "what it made is gone");
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    assert_eq!(r.unpack_data(&local, 1 << 20).unwrap(), 2);
    assert_eq!(std::fs::read(local.join("sub/b.txt")).unwrap(), b"b");
    assert!(std::fs::symlink_metadata(local.join("link")).is_err());
}

#[test]
fn an_oversized_folder_stays_where_it_was_written() {
    let tmp = setup();
    let node_data = tmp.path().join("node/data");
    let mut r = run(tmp.path(), &node_data, 50);
    assert!(!r.report.data_returned);
    assert_eq!(r.report.data_bytes, 101);
    assert_eq!(
        r.report.data_left_at.as_deref(),
        Some(node_data.to_str().unwrap())
    );
    assert!(
        node_data.join("a.txt").is_file(),
        "the files stay on the node"
    );
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    assert_eq!(r.unpack_data(&local, 1 << 20).unwrap(), 0, "nothing came");
    // The folder above it stays marked as the jobs' own while it is there; once
    // removed by other hands, the next job drops its mark.
    assert_eq!(marks(tmp.path()), 1);
    std::fs::remove_dir_all(tmp.path().join("node")).unwrap();
    run(tmp.path(), &tmp.path().join("other/data"), 1 << 20);
    assert_eq!(marks(tmp.path()), 0, "no mark outlives its folder");
    assert!(!tmp.path().join("other").exists());
}

/// The node's folder of marks.
fn marks_dir(tmp: &Path) -> std::path::PathBuf {
    let uid = rustix::process::getuid().as_raw();
    tmp.join(format!("node-tmp/jax-runner-made-{uid}"))
}

/// How many folders the node's marks name (the lock's file is not a mark).
fn marks(tmp: &Path) -> usize {
    std::fs::read_dir(marks_dir(tmp))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != ".lock")
        .count()
}

#[test]
fn a_shared_folder_is_written_in_place_and_not_copied() {
    let tmp = setup();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join(".jax-runner-ray-n1"), b"").unwrap();
    let r = run(tmp.path(), &shared, 1 << 20);
    assert!(r.report.shared_filesystem);
    assert!(!r.report.data_returned);
    assert_eq!(r.report.data_files, 2, "the marker is not the script's");
    assert!(shared.join("sub/b.txt").is_file());
}

/// Waits (at most a minute) until `file` exists.
const WAIT_FOR: &str = r#"
import os, sys, time
def wait_for(f):
    for _ in range(600):
        if os.path.exists(f):
            return
        time.sleep(0.1)
    sys.exit("never came: " + f)
"#;

/// Starts the wrapper on `script` (written as `body`) with `data` as the local data
/// folder; `tmp/node-tmp` is the node's temporary folder, the same for every job.
fn start(tmp: &Path, script: &str, body: &str, data: &Path) -> std::process::Child {
    start_with(tmp, script, body, data, &[])
}

/// [`start`], with more of the wrapper's variables (`env`).
fn start_with(
    tmp: &Path,
    script: &str,
    body: &str,
    data: &Path,
    env: &[(&str, &str)],
) -> std::process::Child {
    std::fs::write(tmp.join("job").join(script), body).unwrap();
    Command::new("python3")
        .envs(env.iter().copied())
        .args(["-m", WRAPPER_MODULE])
        .current_dir(tmp.join("job"))
        .env("PYTHONPATH", tmp.join("pkg"))
        .env("TMPDIR", tmp.join("node-tmp"))
        .env("GNN_OUTPUT_DIR", data)
        .env("JAX_RUNNER_RAY_SCRIPT", script)
        .env("JAX_RUNNER_RAY_NONCE", "n1")
        .env("JAX_RUNNER_RAY_MAX_RETURN", "1000")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a job returned, once it ended.
fn returned(child: std::process::Child) -> Returned {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    find(&String::from_utf8(out.stdout).unwrap(), "n1").expect("a return block")
}

#[test]
fn a_job_that_ends_first_leaves_the_other_jobs_data_folder() {
    let tmp = setup();
    let t = tmp.path();
    // On the node, the folders above the data folders: `keep` was there before (not the
    // jobs' to remove), `res/data` is made by the first job and shared with the second.
    let keep = t.join("keep");
    std::fs::create_dir(&keep).unwrap();
    let flag = |name: &str| t.join(name).display().to_string();
    // The first job's script ends once the second has started; the second's writes
    // its data only after the first job's wrapper has ended and tidied up.
    let first = format!(
        "{WAIT_FOR}open({a:?}, 'w').close()\nwait_for({b:?})\n\
         open(os.path.join(os.environ['GNN_OUTPUT_DIR'], 'a.txt'), 'w').write('a')\n",
        a = flag("a-started"),
        b = flag("b-started"),
    );
    let second = format!(
        "{WAIT_FOR}open({b:?}, 'w').close()\nwait_for({go:?})\n\
         open(os.path.join(os.environ['GNN_OUTPUT_DIR'], 'b.txt'), 'w').write('b')\n",
        b = flag("b-started"),
        go = flag("go"),
    );
    let a = start(t, "first.py", &first, &keep.join("res/data/a"));
    let b_data = keep.join("res/data/b");
    // The second job starts once the first has made its folders.
    let wait = std::time::Instant::now();
    while !t.join("a-started").exists() {
        assert!(wait.elapsed().as_secs() < 60, "the first job never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let b = start(t, "second.py", &second, &b_data);
    let a = returned(a);
    assert_eq!(a.report.data_files, 1);
    assert!(
        b_data.is_dir(),
        "the second job's data folder is still there"
    );
    std::fs::write(t.join("go"), b"").unwrap();
    let mut b = returned(b);
    assert!(b.report.data_returned);
    assert_eq!(b.report.data_files, 1, "the second job's data came back");
    let local = t.join("local");
    std::fs::create_dir(&local).unwrap();
    assert_eq!(b.unpack_data(&local, 1 << 20).unwrap(), 1);
    assert_eq!(std::fs::read(local.join("b.txt")).unwrap(), b"b");
    // The last job to end removed what the jobs made, and nothing that was there.
    assert!(!keep.join("res").exists(), "what the jobs made is gone");
    assert!(keep.is_dir(), "what was there before stays");
    assert_eq!(marks(t), 0, "and their marks");
}

/// Runs `code` with the node's folders module imported as `f` and `marks` its folder
/// of marks, in the background.
fn folders_call(tmp: &Path, code: &str) -> std::process::Child {
    let marks = marks_dir(tmp).display().to_string();
    Command::new("python3")
        .args([
            "-c",
            &format!("import jax_runner_ray_folders as f\nmarks = {marks:?}\n{code}"),
        ])
        .env("PYTHONPATH", tmp.join("pkg"))
        .env("TMPDIR", tmp.join("node-tmp"))
        .spawn()
        .unwrap()
}

#[test]
fn making_removing_and_sweeping_wait_for_the_nodes_lock() {
    use rustix::fs::{flock, FlockOperation};
    let tmp = setup();
    let t = tmp.path();
    let dir = marks_dir(t);
    std::fs::create_dir(&dir).unwrap();
    let lock = std::fs::File::create(dir.join(".lock")).unwrap();
    let data = t.join("node/res/data").display().to_string();
    let stale = dir.join("stale");
    // Each step, and what it has done once it has run.
    let steps: [(&str, &dyn Fn() -> bool); 3] = [
        (&format!("assert f.make_fresh({data:?}, marks)"), &|| {
            t.join("node/res/data").is_dir() && marks(t) == 2
        }),
        (&format!("f.remove_made({data:?}, marks)"), &|| {
            !t.join("node").exists() && marks(t) == 0
        }),
        ("assert f.made_marks() == marks", &|| marks(t) == 0),
    ];
    for (code, done) in steps {
        if code.contains("made_marks") {
            // A mark of a folder that is gone, for the sweep to drop.
            std::fs::write(&stale, t.join("gone").display().to_string()).unwrap();
        }
        // Held here, as by another job between its mkdir and its mark.
        flock(&lock, FlockOperation::LockExclusive).unwrap();
        let mut step = folders_call(t, code);
        // While the lock is held the step does nothing: any wait shows it, and one
        // that did not take the lock is done in a fraction of this.
        for _ in 0..15 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(
                step.try_wait().unwrap().is_none(),
                "{code} ran under another's lock"
            );
        }
        flock(&lock, FlockOperation::Unlock).unwrap();
        assert!(step.wait().unwrap().success(), "{code}");
        assert!(done(), "{code} did its work once the lock was free");
    }
    // The sweep leaves the lock's file: a new one would let two jobs hold "the" lock.
    use std::os::unix::fs::MetadataExt;
    let now = std::fs::metadata(dir.join(".lock")).map(|m| m.ino());
    assert_eq!(now.ok(), Some(lock.metadata().unwrap().ino()));
}
