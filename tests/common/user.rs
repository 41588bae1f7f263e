//! Who runs the runner in a test: root, or an ordinary user even when the tests run as
//! root (as CI does), each with a home, a cache folder, the binary and an interpreter it
//! can reach; and a parent that leaves descriptors open for the runner to inherit.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::{repo, Tree};

/// The ordinary user the tests switch to when they run as root.
///
/// No account has it, and none needs to: the runner, bwrap and Python only need a
/// `HOME`, which the test gives. A number no account holds owns nothing on the host,
/// so whatever it reaches, the test handed it. It sits above 65535, past every range
/// distributions allocate from (regular users end at 60000, systemd's dynamic users at
/// 65519, `nobody` is 65534), and below 100000, where `useradd` starts subordinate ids
/// for containers. Nor is it 65534, the `nobody` a sandbox shows for a uid it does
/// not map, so the two are never confused in a result.
pub const TEST_UID: u32 = 70_123;
/// The test user's group, likewise held by no account.
pub const TEST_GID: u32 = 70_123;

/// The descriptors a parent leaves open to the runner: a file at 7 and 251, its folder
/// at 8 (see [`Inherited`]).
pub const INHERITED_FILE_FDS: [RawFd; 2] = [7, 251];
/// See [`INHERITED_FILE_FDS`].
pub const INHERITED_DIR_FD: RawFd = 8;

/// Whether the tests themselves run as root.
pub fn tests_run_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Who runs the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Root,
    User,
}

impl Who {
    pub fn name(self) -> &'static str {
        match self {
            Who::Root => "root",
            Who::User => "user",
        }
    }
}

/// An identity that runs jax-runner, and its own folder (`/var/tmp/jr-account-*`,
/// outside `/tmp` as a real pipeline is) that holds its home, its cache folder
/// (`JAX_RUNNER_CACHE_DIR`, so no test touches a real cache), a copy of the binary
/// it may execute, and its trees.
pub struct Account {
    pub who: Who,
    pub uid: u32,
    pub gid: u32,
    /// Whether runs must switch to `uid`/`gid` (root running a test as the user).
    switch: bool,
    space: tempfile::TempDir,
    pub bin: PathBuf,
    pub python: PathBuf,
}

impl Account {
    /// Root, when the tests run as root, with the same interpreter as the user (so the
    /// two differ only in who they are). Otherwise the test fails, unless
    /// `JAX_RUNNER_TEST_SKIP=root` says root is absent on purpose: then `None`, said on
    /// stderr, and the caller skips its root case (see [`super::prereq`]).
    pub fn root(case: &str) -> Option<Account> {
        if !super::prereq::require(super::prereq::Prereq::Root, super::prereq::root(), case) {
            return None;
        }
        Some(Account::new(
            Who::Root,
            (0, 0),
            false,
            shared_python().to_path_buf(),
        ))
    }

    /// An ordinary user: [`TEST_UID`] when the tests run as root (any failure to set it
    /// up fails the test, never skips it), else whoever runs the tests.
    pub fn user() -> Account {
        if !tests_run_as_root() {
            // SAFETY: getuid and getgid have no preconditions.
            let ids = unsafe { (libc::getuid(), libc::getgid()) };
            return Account::new(Who::User, ids, false, super::python().to_path_buf());
        }
        let python = shared_python().to_path_buf();
        Account::new(Who::User, (TEST_UID, TEST_GID), true, python)
    }

    fn new(who: Who, (uid, gid): (u32, u32), switch: bool, python: PathBuf) -> Account {
        let space = tempfile::Builder::new()
            .prefix("jr-account-")
            .tempdir_in("/var/tmp")
            .expect("a folder in /var/tmp");
        set_mode(space.path(), 0o755);
        let mut account = Account {
            who,
            uid,
            gid,
            switch,
            space,
            bin: assert_cmd::cargo::cargo_bin("jax-runner"),
            python,
        };
        for dir in ["home", "cache"] {
            let path = account.space.path().join(dir);
            std::fs::create_dir(&path).unwrap();
            set_mode(&path, 0o700);
        }
        account.give(account.space.path());
        if switch {
            // After `give`: the link is the built binary itself, which stays root's.
            account.bin = account.install_binary();
        }
        account
    }

    /// A hard link to the built binary (a copy across file systems) in a folder the
    /// user may enter, the checkout may sit where only root can. It needs nothing
    /// beside it: it carries the library the warm zygote confines each script with.
    fn install_binary(&self) -> PathBuf {
        let dir = self.space.path().join("bin");
        std::fs::create_dir(&dir).unwrap();
        set_mode(&dir, 0o755);
        let built = assert_cmd::cargo::cargo_bin("jax-runner");
        let to = dir.join("jax-runner");
        if std::fs::hard_link(&built, &to).is_err() {
            std::fs::copy(&built, &to).expect("copy the jax-runner binary");
        }
        set_mode(&to, 0o755);
        to
    }

    pub fn is_root(&self) -> bool {
        self.who == Who::Root
    }

    pub fn home(&self) -> PathBuf {
        self.space.path().join("home")
    }

    /// `JAX_RUNNER_CACHE_DIR` of its runs.
    pub fn cache_dir(&self) -> PathBuf {
        self.space.path().join("cache")
    }

    /// A new tree in the account's folder, outside `/tmp`. Fill it, then [`Account::give`]
    /// it before a run.
    pub fn tree(&self) -> Tree {
        self.tree_in(self.space.path())
    }

    /// A new tree in `parent` (which must outlive it).
    pub fn tree_in(&self, parent: &Path) -> Tree {
        Tree {
            dir: tempfile::Builder::new()
                .prefix("tree-")
                .tempdir_in(parent)
                .unwrap(),
        }
    }

    /// Makes everything under `path` the account's (nothing to do unless the tests
    /// switch users).
    pub fn give(&self, path: &Path) {
        if !self.switch {
            return;
        }
        for entry in walkdir::WalkDir::new(path) {
            let entry = entry.unwrap();
            std::os::unix::fs::lchown(entry.path(), Some(self.uid), Some(self.gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", entry.path().display()));
        }
    }

    /// The runner as this account, with a small, fixed environment: `PATH`, `HOME`,
    /// `LANG` and `JAX_RUNNER_CACHE_DIR`. Switching from root, std drops the
    /// supplementary groups itself (`setgroups(0)` before `setuid`).
    pub fn command(&self) -> Command {
        self.command_of(&self.bin)
    }

    /// `program` as this account, in the environment of [`Account::command`].
    pub fn command_of(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.home())
            .env("LANG", "C.UTF-8")
            .env("JAX_RUNNER_CACHE_DIR", self.cache_dir())
            .stdin(Stdio::null());
        if self.switch {
            cmd.uid(self.uid).gid(self.gid);
        }
        cmd
    }

    /// `jax-runner --output-dir TREE --python PYTHON --device cpu`: otherwise default
    /// options.
    pub fn runner(&self, tree: &Tree) -> Command {
        let mut cmd = self.command();
        cmd.arg("--output-dir")
            .arg(tree.root())
            .arg("--python")
            .arg(&self.python)
            .args(["--device", "cpu"]);
        cmd
    }

    /// [`Account::runner`] started by `/bin/sh`, which execs the runner in its place
    /// with `--env NAME=<its pid>` added: the runner's pid (exec keeps it), told to
    /// the scripts without their looking for it.
    pub fn runner_told_its_pid(&self, tree: &Tree, name: &str) -> Command {
        let mut cmd = self.command_of(Path::new("/bin/sh"));
        cmd.arg("-c")
            .arg(format!("exec \"$0\" \"$@\" --env {name}=$$"))
            .arg(&self.bin)
            .arg("--output-dir")
            .arg(tree.root())
            .arg("--python")
            .arg(&self.python)
            .args(["--device", "cpu"]);
        cmd
    }
}

impl Account {
    /// Starts `cmd` (this account's runner, as [`Account::runner`] prepares it) on a
    /// machine without user namespaces, as only root can make one: in a user namespace
    /// of its own (made by util-linux's `unshare`, its maps written from here by root:
    /// the host's 0 and the account's ids, each to itself) whose limit of further user
    /// namespaces is set to 0, dropped to the account there by `setpriv`. `cmd`'s
    /// program, arguments and environment are taken; its ids and stdio are not.
    /// `adjust` prepares the outer command (stdin is the handshake's; stdout and
    /// stderr are piped unless it says otherwise, descriptors it hands on reach the
    /// runner). The shells and `setpriv` each exec the next, so the child's PID is the
    /// runner's once it has started.
    pub fn spawn_without_user_namespaces(
        &self,
        cmd: &Command,
        adjust: impl FnOnce(&mut Command),
    ) -> Child {
        let mut outer = Command::new("unshare");
        outer
            .args(["--user", "--", "/bin/sh", "-c"])
            // The shell waits for its maps, then execs a new one: an exec as uid 0 of
            // the namespace gives back the capabilities the first exec (as its
            // overflow uid) dropped.
            .arg("read go && inner=$1 && shift && exec /bin/sh -c \"$inner\" sh \"$@\"")
            .arg("sh")
            .arg(format!(
                "echo 0 > /proc/sys/user/max_user_namespaces && \
                 exec setpriv --reuid={} --regid={} --clear-groups -- \"$@\" </dev/null",
                self.uid, self.gid
            ))
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .env_clear()
            .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        adjust(&mut outer);
        outer.stdin(Stdio::piped());
        let mut child = outer.spawn().expect("unshare starts");
        let pid = child.id();
        // The namespace is made once `unshare` execs the shell, which then waits.
        let deadline = Instant::now() + Duration::from_secs(10);
        let own = std::fs::read_link("/proc/self/ns/user").unwrap();
        while std::fs::read_link(format!("/proc/{pid}/ns/user"))
            .ok()
            .as_ref()
            == Some(&own)
        {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("unshare made no user namespace");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for (file, id) in [("uid_map", self.uid), ("gid_map", self.gid)] {
            std::fs::write(
                format!("/proc/{pid}/{file}"),
                format!("0 0 1\n{id} {id} 1\n"),
            )
            .unwrap_or_else(|e| panic!("write {file}: {e}"));
        }
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        child
    }
}

/// The managed environment (`jax-runner setup`) built once for every test binary in a
/// folder any user may read: `/var/tmp/jax-runner-test-env-<hash of the CPU pins>`.
/// Root's own one sits under `/root` (0700) on a base Python under it, which the test
/// user cannot reach, so this one is built on `/usr/bin/python3`. A lock inside the
/// folder makes parallel test binaries wait for the one building it; a marker written
/// last names the finished interpreter. Only for root (see [`Account`]).
pub fn shared_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let pins = std::fs::read(repo().join("requirements/jax-cpu.txt")).unwrap();
        let hash: String = Sha256::digest(&pins)[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = PathBuf::from(format!("/var/tmp/jax-runner-test-env-{hash}"));
        claim_shared_folder(&dir);
        let _lock = jax_runner::lock::FileLock::acquire(&dir.join(".lock")).unwrap();
        let marker = dir.join(".python");
        if let Ok(python) = std::fs::read_to_string(&marker) {
            return PathBuf::from(python);
        }
        let started = std::time::Instant::now();
        let out = Command::new(assert_cmd::cargo::cargo_bin("jax-runner"))
            .args(["setup", "--flavor", "cpu", "-q"])
            // pip keeps the rest of the environment (its proxy and certificate settings).
            .env("PATH", "/usr/bin:/bin")
            .env("JAX_RUNNER_CACHE_DIR", &dir)
            .env_remove("VIRTUAL_ENV")
            .env_remove("JAX_RUNNER_PYTHON")
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME")
            .stdin(Stdio::null())
            .output()
            .expect("jax-runner setup runs");
        assert!(
            out.status.success(),
            "jax-runner setup for the shared test environment failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let python = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(python.starts_with(&dir), "setup chose {}", python.display());
        let chmod = Command::new("chmod")
            .arg("-R")
            .arg("a+rX")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(chmod.success(), "chmod -R a+rX {}", dir.display());
        std::fs::write(&marker, python.as_os_str().as_encoded_bytes()).unwrap();
        visible(&format!(
            "built the shared test environment {} in {:.0?}",
            python.display(),
            started.elapsed()
        ));
        python
    })
}

/// Creates `dir` or takes the one there, refusing one that root does not own alone:
/// in a world-writable `/var/tmp`, anyone could have made it first.
fn claim_shared_folder(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    match std::fs::create_dir(dir) {
        Ok(()) => set_mode(dir, 0o755),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("create {}: {e}", dir.display()),
    }
    let meta = std::fs::symlink_metadata(dir).unwrap();
    assert!(
        meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o022 == 0,
        "{} is not a folder root alone may change; remove it",
        dir.display()
    );
}

/// A line on the real stderr: the test harness captures `eprintln!` and shows it only
/// when the test fails, and a skipped case must be seen.
pub fn visible(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

pub fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// What a parent left open to the runner: a file and its folder (folder 0700, file
/// 0600) outside the tree, which the sandbox shows read-only at most, so the
/// descriptors are the only way to write there. [`Account::give`] them to the account
/// that runs the runner: its own files are what a careless parent of its leaks. See
/// [`Inherited::hand_to`].
pub struct Inherited {
    dir_path: tempfile::TempDir,
    file: File,
    dir: File,
    contents: Vec<u8>,
}

pub const INHERITED_FILE: &str = "parent.txt";

impl Inherited {
    pub fn new() -> Inherited {
        let dir_path = tempfile::Builder::new()
            .prefix("jr-fds-")
            .tempdir_in("/var/tmp")
            .unwrap();
        set_mode(dir_path.path(), 0o700);
        let contents = b"the parent's file\n".to_vec();
        let path = dir_path.path().join(INHERITED_FILE);
        std::fs::write(&path, &contents).unwrap();
        set_mode(&path, 0o600);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let dir = File::open(dir_path.path()).unwrap();
        Inherited {
            dir_path,
            file,
            dir,
            contents,
        }
    }

    /// The folder, which holds the file.
    pub fn dir(&self) -> &Path {
        self.dir_path.path()
    }

    /// Makes `cmd` start with the file at fds 7 and 251 and the folder at 8, without
    /// close-on-exec, as a careless parent would leave them.
    pub fn hand_to(&self, cmd: &mut Command) {
        let (file, dir) = (self.file.as_raw_fd(), self.dir.as_raw_fd());
        let hand = move || -> std::io::Result<()> {
            // First out of the way (above any number the targets could be), then into
            // place; dup2 leaves the copies without close-on-exec.
            let high = |fd| cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 300) });
            let (file, dir) = (high(file)?, high(dir)?);
            for target in INHERITED_FILE_FDS {
                cvt(unsafe { libc::dup2(file, target) })?;
            }
            cvt(unsafe { libc::dup2(dir, INHERITED_DIR_FD) })?;
            Ok(())
        };
        // SAFETY: the closure only calls fcntl and dup2, which are async-signal-safe.
        unsafe { cmd.pre_exec(hand) };
    }

    /// What came through the descriptors: the file changed, or the folder holds
    /// anything else. Empty when nothing did.
    pub fn what_came_through(&self) -> Vec<String> {
        let mut found = Vec::new();
        let path = self.dir_path.path().join(INHERITED_FILE);
        let now = std::fs::read(&path).unwrap();
        if now != self.contents {
            found.push(format!(
                "the parent's file was written through an inherited descriptor: {:?}",
                String::from_utf8_lossy(&now)
            ));
        }
        for entry in std::fs::read_dir(self.dir_path.path()).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name != INHERITED_FILE {
                found.push(format!(
                    "{name} was created in the parent's folder through an inherited descriptor"
                ));
            }
        }
        found
    }
}

impl Default for Inherited {
    fn default() -> Self {
        Inherited::new()
    }
}

fn cvt(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
