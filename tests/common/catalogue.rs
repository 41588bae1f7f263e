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
        Traps {
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
        ]
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
        found
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
