//! The host's side of the issue-23 catalogue (`fixtures/hostile_root.py`): what a test
//! sets up before a run (a root-only secret, a unix socket file and an abstract socket
//! listening, descriptors left open to the runner, the core pattern as it was) and
//! checks after it, and the attacks the script records. The same as
//! `tests/hostile.rs` holds for itself, for the other test files that run the
//! catalogue.

use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use super::user::{set_mode, tests_run_as_root, Account, Inherited};

/// Every attack `fixtures/hostile_root.py` records; each must come back "blocked".
pub const ATTACKS: &[&str] = &[
    "open_core_pattern_for_writing",
    "open_printk_ratelimit_for_writing",
    "open_sysrq_trigger_for_writing",
    "read_etc_shadow",
    "read_private_root_file",
    "setuid_copy_of_interpreter",
    "setgid_copy_of_interpreter",
    "write_inherited_fd_7",
    "write_inherited_fd_251",
    "create_through_inherited_dir_fd_8",
    "clone_new_user_namespace",
    "clone_new_mount_namespace",
    "clone_new_net_namespace",
    "clone_new_user_mount_net_namespaces",
    "clone3_new_user_namespace",
    "unshare_new_user_namespace",
    "connect_host_unix_socket",
    "connect_abstract_unix_socket",
    "umount_home",
    "remount_root_rw",
    // Issue 30: reads are granted, not denied; calls on a process reach only the
    // script's own; the host's IPC is out of reach.
    "read_world_readable_file_in_opt",
    "read_project_env_beside_the_tree",
    "read_ungranted_etc_file",
    "prlimit_on_a_bystander",
    "setpriority_on_a_bystander",
    "sched_setaffinity_on_a_bystander",
    "attach_host_shm_segment",
    "make_host_message_queue",
];

/// A folder only root may enter (0700), in `/var/tmp`.
pub fn root_only_folder(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap();
    set_mode(dir.path(), 0o700);
    dir
}

/// What the test sets up on the host around one run of the catalogue, and checks
/// after it.
pub struct Traps {
    /// A project folder in `/opt`: the tree goes in it, beside a world-readable
    /// `.env`, and beside it a world-readable file of `/opt`.
    project: tempfile::TempDir,
    opt: tempfile::TempDir,
    /// A world-readable file in `/etc` that no grant names (removed on drop).
    etc_file: PathBuf,
    /// A process of the account's, outside the sandbox (killed on drop).
    bystander: std::process::Child,
    bystander_nice: i32,
    /// A SysV shared-memory segment of the account's, mode 0600 (removed on drop).
    shm_id: i32,
    private: tempfile::TempDir,
    _sockets: tempfile::TempDir,
    socket_path: PathBuf,
    socket: UnixListener,
    abstract_name: String,
    abstract_socket: UnixListener,
    pub inherited: Inherited,
    core_pattern: String,
}

impl Traps {
    pub fn new(account: &Account) -> Traps {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let private = root_only_folder("jr-secret-");
        std::fs::write(private.path().join("secret.txt"), "root's secret").unwrap();
        let sockets = tempfile::Builder::new()
            .prefix("jr-sock-")
            .tempdir_in("/var/tmp")
            .unwrap();
        set_mode(sockets.path(), 0o755);
        let socket_path = sockets.path().join("s");
        let socket = UnixListener::bind(&socket_path).unwrap();
        set_mode(&socket_path, 0o777);
        let abstract_name = format!(
            "jr-traps-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let abstract_socket = UnixListener::bind_addr(&addr).unwrap();
        for listener in [&socket, &abstract_socket] {
            listener.set_nonblocking(true).unwrap();
        }
        let inherited = Inherited::new();
        account.give(inherited.dir());
        // In `/opt` (which no grant names, and which the deny-list before issue 30 left
        // readable) when the tests run as root; an ordinary user's tests use
        // `/var/tmp`, which is no more granted.
        let in_opt = |prefix: &str| {
            let base = match tests_run_as_root() {
                true => "/opt",
                false => "/var/tmp",
            };
            std::fs::create_dir_all(base).unwrap();
            let dir = tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(base)
                .unwrap();
            set_mode(dir.path(), 0o755);
            dir
        };
        let project = in_opt("jr-project-");
        std::fs::write(project.path().join(".env"), "OPENAI_API_KEY=sk-test\n").unwrap();
        set_mode(&project.path().join(".env"), 0o644);
        account.give(project.path());
        let opt = in_opt("jr-opt-");
        std::fs::write(opt.path().join("secret.txt"), "in /opt").unwrap();
        set_mode(&opt.path().join("secret.txt"), 0o644);
        // A file of /etc of the test's own as root (removed on drop); an ordinary
        // user's tests take a world-readable one the system has.
        let etc_file = match tests_run_as_root() {
            true => {
                let f = PathBuf::from(format!(
                    "/etc/jr-test-{}-{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::write(&f, "not granted").unwrap();
                set_mode(&f, 0o644);
                f
            }
            false => [
                "/etc/login.defs",
                "/etc/issue",
                "/etc/hostname",
                "/etc/adduser.conf",
            ]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| std::fs::read(p).is_ok())
            .expect("a world-readable file in /etc"),
        };
        let bystander = account
            .command_of(std::path::Path::new("/bin/sleep"))
            .arg("600")
            .spawn()
            .unwrap();
        let bystander_nice = nice_of(bystander.id());
        Traps {
            project,
            opt,
            etc_file,
            bystander,
            bystander_nice,
            shm_id: host_shm_segment(account),
            private,
            _sockets: sockets,
            socket_path,
            socket,
            abstract_name,
            abstract_socket,
            inherited,
            core_pattern: std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(),
        }
    }

    /// The `--env` values that tell the script where to aim.
    pub fn env(&self) -> Vec<String> {
        vec![
            format!(
                "TEST_PRIVATE_FILE={}",
                self.private.path().join("secret.txt").display()
            ),
            format!("TEST_UNIX_SOCKET={}", self.socket_path.display()),
            format!("TEST_ABSTRACT_SOCKET={}", self.abstract_name),
            format!(
                "TEST_OPT_FILE={}",
                self.opt.path().join("secret.txt").display()
            ),
            format!(
                "TEST_PROJECT_ENV={}",
                self.project.path().join(".env").display()
            ),
            format!("TEST_ETC_FILE={}", self.etc_file.display()),
            format!("TEST_BYSTANDER_PID={}", self.bystander.id()),
            format!("TEST_SHM_ID={}", self.shm_id),
            format!(
                "TEST_HOST_IPC_NS={}",
                std::fs::read_link("/proc/self/ns/ipc").unwrap().display()
            ),
        ]
    }

    /// The project folder a catalogue's tree goes in (beside its `.env`).
    pub fn project(&self) -> &std::path::Path {
        self.project.path()
    }

    /// What reached the host, seen from the host.
    pub fn what_got_through(&self) -> Vec<String> {
        let mut found = self.inherited.what_came_through();
        for (name, listener) in [
            ("the socket file", &self.socket),
            ("the abstract socket", &self.abstract_socket),
        ] {
            match listener.accept() {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => found.push(format!("{name} accepted a connection: {other:?}")),
            }
        }
        let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
        if core_pattern != self.core_pattern {
            found.push(format!("the core pattern changed: {core_pattern:?}"));
        }
        let nice = nice_of(self.bystander.id());
        if nice != self.bystander_nice {
            found.push(format!(
                "the bystander's nice went {} -> {nice}",
                self.bystander_nice
            ));
        }
        found
    }
}

impl Drop for Traps {
    fn drop(&mut self) {
        if tests_run_as_root() {
            let _ = std::fs::remove_file(&self.etc_file);
        }
        let _ = self.bystander.kill();
        let _ = self.bystander.wait();
        // SAFETY: removes the segment this test made; nothing points into it.
        unsafe { libc::shmctl(self.shm_id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// A process's nice value, read from `/proc/<pid>/stat` (field 19).
fn nice_of(pid: u32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    after.split_whitespace().nth(16).unwrap().parse().unwrap()
}

/// A shared-memory segment of one page holding a secret, the account's own with mode
/// 0600, in the host's IPC namespace.
fn host_shm_segment(account: &Account) -> i32 {
    // SAFETY: a new private segment; the page is written through a mapping made and
    // unmade here; IPC_SET gives it to the account.
    unsafe {
        let id = libc::shmget(libc::IPC_PRIVATE, 4096, 0o600 | libc::IPC_CREAT);
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        let at = libc::shmat(id, std::ptr::null(), 0);
        assert!(
            at as isize != -1,
            "shmat: {}",
            std::io::Error::last_os_error()
        );
        std::ptr::copy_nonoverlapping(b"host secret".as_ptr(), at.cast::<u8>(), 11);
        libc::shmdt(at);
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        libc::shmctl(id, libc::IPC_STAT, &mut ds);
        ds.shm_perm.uid = account.uid;
        ds.shm_perm.gid = account.gid;
        assert_eq!(libc::shmctl(id, libc::IPC_SET, &mut ds), 0);
        id
    }
}

/// Every attack the script recorded came back "blocked" (a tester's own file is
/// theirs to read: only root's is a boundary).
pub fn check_attacks(report: &Value, failures: &mut Vec<String>) {
    for &attack in ATTACKS {
        if attack == "read_private_root_file" && !tests_run_as_root() {
            continue;
        }
        match report[attack].as_str() {
            Some(outcome) if outcome.starts_with("blocked") => {}
            outcome => failures.push(format!("{attack}: {outcome:?}")),
        }
    }
}
