//! A real one-node Slurm cluster (22.05, as `.ci/slurm-setup` installs it) that a test
//! starts and stops: munged, slurmctld and slurmd in a temporary folder of their own,
//! for the tests of the Slurm backend, which submit real jobs and read what Slurm says
//! of them. Each cluster lives in a network namespace (and a host-name namespace) of
//! its own: slurmctld and slurmd bind every address, and servers a test starts listen
//! on loopback only, inside a namespace of the test's own when they insist on more. So
//! clusters of tests running side by side never meet, and fixed ports are fine.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

pub use super::netns::processes_in_netns;
use super::netns::{end_in_netns, exited, poll, GRACE};

use super::prereq::{self, Prereq};
use super::slurm_node::slurm_conf;
pub use super::slurm_node::Node;

/// The node's name: slurmd's `-N`, and the host name jobs see.
pub const NODE: &str = "jrnode";

/// The programs a cluster needs (`.ci/slurm-setup` installs them).
#[rustfmt::skip]
pub const TOOLS: [&str; 11] = [
    "munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo",
    "unshare", "nsenter", "ip",
];

/// The job states after which a job never runs again.
#[rustfmt::skip]
pub const TERMINAL: [&str; 9] = [
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
    "DEADLINE", "PREEMPTED",
];

/// Gives the namespace holder its node name and a loopback that works: `lo` starts
/// down in a new namespace, and a second loopback address is there because glibc's
/// `AI_ADDRCONFIG` ignores 127.0.0.1, so without it the daemons' `getaddrinfo` for
/// "every address" finds none and they cannot bind. Says `ready` once `lo` is up, then
/// only holds.
const HOLDER: &str = "hostname \"$1\" && ip link set lo up && ip addr add 127.0.0.2/8 dev lo \
    && ip -o link show lo | grep -q ,UP && echo ready && exec sleep infinity >/dev/null";

/// Where `program` is: PATH, then the sbin folders a non-root PATH may lack.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Whether a cluster can start here, as [`prereq::require`] wants it: root (for the
/// namespaces, and SlurmUser=root) and every one of [`TOOLS`].
pub fn available() -> Result<(), String> {
    prereq::root()?;
    let missing: Vec<&str> = TOOLS.into_iter().filter(|t| which(t).is_none()).collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(format!("{} not found", missing.join(", "))),
    }
}

/// The value of `key` in a line of `scontrol show -o` (`JobState`, `ExitCode`, …).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// A running cluster; dropping it cancels its jobs and ends every process it started.
pub struct TestSlurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    /// `sleep infinity` holding the namespaces; every other process enters them.
    holder: Child,
    netns: PathBuf,
    daemons: Vec<(&'static str, Child)>,
    /// The node came up: the controller answers, so its queue can be emptied at drop.
    up: bool,
}

impl TestSlurm {
    /// A cluster for test `case`, or `None` when Slurm is missing and
    /// `JAX_RUNNER_TEST_SKIP` names it (see [`prereq::require`]); a cluster that
    /// cannot start fails the test with its daemons' logs.
    pub fn for_test(case: &str) -> Option<TestSlurm> {
        if !prereq::require(Prereq::Slurm, available(), case) {
            return None;
        }
        Some(TestSlurm::start().unwrap_or_else(|e| panic!("{case}: {e}")))
    }

    /// Starts munged, slurmctld and slurmd, and waits (30 s at most) until the node
    /// is idle. On failure, what was started is stopped again.
    pub fn start() -> Result<TestSlurm, String> {
        Self::start_with(Node::default())
    }

    /// [`TestSlurm::start`], with the node as `node` describes it.
    pub fn start_with(node: Node<'_>) -> Result<TestSlurm, String> {
        let dir = tempfile::Builder::new().prefix("jr-slurm-").tempdir();
        let dir = dir.map_err(|e| format!("no temporary folder: {e}"))?;
        let d = dir.path().to_path_buf();
        // munged refuses a socket in a folder not everyone may enter.
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let unshare = which("unshare").ok_or("unshare not found")?;
        let mut holder = Command::new(unshare)
            .args(["--net", "--uts", "--", "sh", "-c", HOLDER, "holder", NODE])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(d.join("holder.out")).unwrap())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run unshare: {e}"))?;
        let (mut said, ready) = (String::new(), holder.stdout.take().unwrap());
        let _ = ready.take(6).read_to_string(&mut said);
        let netns = fs::read_link(format!("/proc/{}/ns/net", holder.id()));
        let (true, Ok(netns)) = (said == "ready\n", netns) else {
            let _ = holder.kill();
            let _ = holder.wait();
            let why = fs::read_to_string(d.join("holder.out")).unwrap_or_default();
            return Err(format!("the namespace holder failed: {}", why.trim()));
        };
        let conf = d.join("slurm.conf");
        let daemons = Vec::new();
        let mut cluster = TestSlurm {
            dir,
            conf,
            holder,
            netns,
            daemons,
            up: false,
        };
        // From here on an early return drops `cluster`, which stops what was started.
        fs::create_dir(d.join("state")).unwrap();
        fs::create_dir(d.join("spool")).unwrap();
        let mut random = fs::File::open("/dev/urandom").unwrap().take(1024);
        let mut key = fs::File::create(d.join("munge.key")).unwrap();
        std::io::copy(&mut random, &mut key).unwrap();
        // munged refuses a key others could read.
        fs::set_permissions(d.join("munge.key"), fs::Permissions::from_mode(0o400)).unwrap();
        fs::write(&cluster.conf, slurm_conf(&d, node.fake_gpu)).unwrap();
        if node.fake_gpu {
            fs::write(
                d.join("gres.conf"),
                format!("NodeName={NODE} Name=gpu File=/dev/null\n"),
            )
            .unwrap();
        }

        // The origin as an address: the node's name resolves nowhere.
        let mut munged = vec!["--foreground".to_string(), "--origin=127.0.0.1".into()];
        for (flag, file) in [
            ("socket", "munge.socket"),
            ("key-file", "munge.key"),
            ("pid-file", "munged.pid"),
            ("log-file", "munged.log"),
            ("seed-file", "munged.seed"),
        ] {
            munged.push(format!("--{flag}={}", d.join(file).display()));
        }
        cluster.daemon("munged", &munged)?;
        let socket = d.join("munge.socket");
        cluster.wait("munged's socket", 10, |_| socket.exists())?;
        let conf = cluster.conf.display().to_string();
        // -D: in the foreground, a child of ours; -i: a state file it cannot read is no
        // reason to stop (there are none yet).
        // Each daemon execs in place of this script, in its own mount namespace;
        // slurmctld's -i: a state file it cannot read is no reason to stop.
        let setup = node.setup(&d);
        for (name, args) in [
            ("slurmctld", vec!["-D", "-i", "-f", &conf]),
            ("slurmd", vec!["-D", "-N", NODE, "-f", &conf]),
        ] {
            let program = which(name).ok_or_else(|| format!("{name} not found"))?;
            let program = program.to_str().unwrap();
            let mut all = vec!["-m", "--propagation", "private", "--", "sh", "-c", &setup];
            all.extend(["setup", program]);
            all.extend(args);
            cluster.daemon_as(name, "unshare", &all)?;
        }
        cluster.wait("the node to be idle", 30, |c| {
            // One line per partition the node is in.
            let states = c.stdout("sinfo", &["-h", "-N", "-o", "%T"]);
            states.is_some_and(|s| !s.is_empty() && s.lines().all(|l| l == "idle"))
        })?;
        cluster.up = true;
        Ok(cluster)
    }

    /// Starts daemon `name` in the namespaces, in a process group of its own, its
    /// output in `<name>.out` (in the foreground the daemons log there too).
    fn daemon(&mut self, name: &'static str, args: &[impl AsRef<OsStr>]) -> Result<(), String> {
        self.daemon_as(name, name, args)
    }

    /// [`Self::daemon`], started through `program` (which execs the daemon in place).
    fn daemon_as(
        &mut self,
        name: &'static str,
        program: &str,
        args: &[impl AsRef<OsStr>],
    ) -> Result<(), String> {
        let out = fs::File::create(self.dir().join(format!("{name}.out"))).unwrap();
        let program = which(program).ok_or_else(|| format!("{program} not found"))?;
        let child = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        self.daemons.push((name, child));
        Ok(())
    }

    /// Polls `ready` every 100 ms until it holds; fails with the daemons' logs after
    /// `secs` seconds or once a daemon exits.
    fn wait(&self, what: &str, secs: u64, ready: impl Fn(&Self) -> bool) -> Result<(), String> {
        let dead = || self.daemons.iter().find(|(_, d)| exited(d.id()));
        let done = || dead().is_some() || ready(self);
        let seen = poll(Duration::from_secs(secs), done);
        let why = match dead() {
            None if seen => return Ok(()),
            None => format!("nothing after {secs} s"),
            Some((name, _)) => format!("{name} exited"),
        };
        Err(format!("waiting for {what}: {why}\n{}", self.logs()))
    }

    /// The last lines each daemon wrote, for a failure's message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for (name, _) in &self.daemons {
            let path = self.dir().join(format!("{name}.out"));
            let log = fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            text += &format!("--- {name}.out, the last lines:\n{tail}\n");
        }
        text
    }

    /// A command that runs `program` inside the cluster's namespaces with
    /// `SLURM_CONF` set: `sbatch`, `squeue`, or jax-runner itself.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let pid = self.holder.id();
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/proc/{pid}/ns/net"))
            .arg(format!("--uts=/proc/{pid}/ns/uts"))
            .arg("--")
            .arg(program)
            .envs(self.env());
        cmd
    }

    /// What `program ARGS` in the cluster printed, when it succeeded.
    fn stdout(&self, program: &str, args: &[&str]) -> Option<String> {
        let out = self.command(program).args(args).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success().then_some(text)
    }

    /// What a process needs in its environment to talk to this cluster.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("SLURM_CONF".into(), self.conf.display().to_string())]
    }

    /// The PID of the process holding the cluster's namespaces.
    pub fn netns_pid(&self) -> u32 {
        self.holder.id()
    }

    /// The cluster's network namespace, as `/proc/<pid>/ns/net` links name it.
    pub fn netns(&self) -> &Path {
        &self.netns
    }

    /// The daemons' names and PIDs: munged, slurmctld, slurmd.
    pub fn daemon_pids(&self) -> Vec<(&'static str, u32)> {
        let pids = self.daemons.iter();
        pids.map(|(name, child)| (*name, child.id())).collect()
    }

    /// The cluster's folder: slurm.conf, the daemons' output, state and spool.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The ids of the jobs in the queue, whatever their state.
    pub fn queued(&self) -> Vec<String> {
        let ids = self.stdout("squeue", &["-h", "-o", "%i"]);
        let ids = ids.unwrap_or_default();
        ids.split_whitespace().map(String::from).collect()
    }

    /// `scontrol show job -o <id>`'s (first) line, while Slurm remembers the job.
    pub fn show_job(&self, id: &str) -> Option<String> {
        let out = self.stdout("scontrol", &["show", "job", "-o", id])?;
        // No id at all lists every job.
        let line = out.lines().next().filter(|_| !id.is_empty())?;
        line.starts_with("JobId=").then(|| line.to_string())
    }

    /// The job's `JobState` (`PENDING`, `RUNNING`, `FAILED`, …).
    pub fn job_state(&self, id: &str) -> Option<String> {
        field(&self.show_job(id)?, "JobState").map(String::from)
    }

    /// Waits (every 100 ms, `within` at most) until the job is in one of `states`;
    /// returns its `scontrol show job -o` line then. Panics on the deadline.
    pub fn wait_for_job(&self, id: &str, states: &[&str], within: Duration) -> String {
        let mut line = String::new();
        let reached = poll(within, || {
            line = self.show_job(id).unwrap_or_default();
            field(&line, "JobState").is_some_and(|s| states.contains(&s))
        });
        assert!(reached, "job {id} never got to {states:?}: {line}");
        line
    }
}

impl Drop for TestSlurm {
    fn drop(&mut self) {
        // The cluster is the test's own, so every job in it is the test's: cancelled
        // while the controller still runs, so slurmstepd ends each one as Slurm would.
        let jobs = if self.up { self.queued() } else { Vec::new() };
        if !jobs.is_empty() {
            let _ = self.command("scancel").args(&jobs).output();
            poll(GRACE, || self.queued().is_empty());
        }
        // The daemons are our children: their PIDs stay theirs until reaped.
        for (_, child) in &self.daemons {
            let _ = kill_process(Pid::from_child(child), Signal::TERM);
        }
        poll(GRACE, || self.daemons.iter().all(|(_, d)| exited(d.id())));
        for (_, child) in &mut self.daemons {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever else is in the namespace (a slurmstepd, a job the cancel missed) was
        // started by this cluster; anything in it but the holder goes, by PID.
        let holder = self.holder.id();
        for _ in 0..3 {
            let mut rest = processes_in_netns(&self.netns);
            rest.retain(|&pid| pid != holder);
            if rest.is_empty() {
                break;
            }
            end_in_netns(&rest, &self.netns);
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
