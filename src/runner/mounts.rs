//! What one sandboxed script sees, as a single list of mount steps. A cold start hands
//! the steps to bubblewrap as arguments; a warm start inside the sandbox hands the same
//! steps to the zygote, whose forked child applies them in a mount namespace of its own.
//! One list, so the two starts cannot drift apart.

use std::path::{Path, PathBuf};

/// What one sandboxed attempt may see, beyond a read-only root.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    /// `$HOME`, hidden behind an empty tmpfs (as `/tmp` is behind a private one).
    pub home: Option<PathBuf>,
    /// Readable again inside a hidden folder (interpreter, script folder, shim).
    pub readable: Vec<PathBuf>,
    /// Writable (data folder, compilation cache).
    pub writable: Vec<PathBuf>,
    /// The script's folder, the working directory.
    pub cwd: PathBuf,
    /// Pass the NVIDIA device nodes.
    pub gpu: bool,
    /// Give the script a user namespace of its own (see `Bwrap::userns`).
    pub userns: bool,
    /// Drop every capability (see `Bwrap::cap_drop`).
    pub cap_drop: bool,
    /// The runner's own outputs (results folder, GNN's step-12 folder): hidden behind an
    /// empty tmpfs, so no script reads another's results, logs or data; the script's
    /// own data folder is bound back (it is among `writable`).
    pub outputs: Vec<PathBuf>,
    /// Where the run's scripts live (`--output-dir`): hidden like the outputs, so no
    /// script reads or rewrites another's source; its own folder is bound back
    /// read-only (it is among `readable`).
    pub sources: Vec<PathBuf>,
}

/// What the host's `/sys` says about its network: no business of a script that has
/// none (hidden like the outputs).
const HOST_DETAILS: &[&str] = &["/sys/class/net", "/sys/devices/virtual/net"];

/// One step, applied in order: later mounts land on top of earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "op", content = "path", rename_all = "snake_case")]
pub enum MountStep {
    /// An empty tmpfs over the folder.
    Tmpfs(PathBuf),
    /// The path, hidden by an earlier tmpfs, bound back onto itself read-only.
    ReadOnly(PathBuf),
    /// The path bound onto itself writable.
    Writable(PathBuf),
    /// A tmpfs made read-only once everything under it is in place: a write there
    /// would only vanish with the sandbox, so it is refused instead.
    RemountReadOnly(PathBuf),
}

impl MountStep {
    /// The folder the step applies to.
    pub fn path(&self) -> &Path {
        match self {
            MountStep::Tmpfs(p)
            | MountStep::ReadOnly(p)
            | MountStep::Writable(p)
            | MountStep::RemountReadOnly(p) => p,
        }
    }
}

/// The steps for `m`, in the order they must be applied.
///
/// The private `/tmp`, the empty home and the hidden sources and outputs come first;
/// a folder inside one already hidden needs no tmpfs of its own. What must stay
/// visible inside them (a script folder under `/tmp`, a venv under `~/.cache`) is
/// bound back afterwards, then the writable folders, then the hidden sources and
/// outputs turn read-only (the binds under them keep their own modes).
pub fn steps(m: &Mounts) -> Vec<MountStep> {
    let mut covers: Vec<&Path> = vec![Path::new("/tmp")];
    covers.extend(
        m.home
            .as_deref()
            .filter(|h| *h != Path::new("/") && *h != Path::new("/tmp")),
    );
    let frozen: Vec<&Path> = m
        .sources
        .iter()
        .chain(&m.outputs)
        .map(PathBuf::as_path)
        .chain(HOST_DETAILS.iter().map(Path::new))
        .filter(|o| *o != Path::new("/") && o.exists())
        .collect();
    covers.extend(frozen.iter().copied());
    let mut kept: Vec<&Path> = Vec::new();
    for c in &covers {
        let inside_another = covers.iter().any(|o| o != c && c.starts_with(o));
        if !inside_another && !kept.contains(c) {
            kept.push(c);
        }
    }
    let mut out: Vec<MountStep> = kept
        .iter()
        .map(|c| MountStep::Tmpfs(c.to_path_buf()))
        .collect();
    out.extend(
        m.readable
            .iter()
            .filter(|p| kept.iter().any(|h| p.starts_with(h)) && p.exists())
            .map(|p| MountStep::ReadOnly(p.clone())),
    );
    out.extend(
        m.writable
            .iter()
            .filter(|p| p.exists())
            .map(|p| MountStep::Writable(p.clone())),
    );
    out.extend(
        kept.iter()
            .filter(|c| frozen.contains(c))
            .map(|c| MountStep::RemountReadOnly(c.to_path_buf())),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path, names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| {
                let d = root.join(n);
                std::fs::create_dir_all(&d).unwrap();
                d
            })
            .collect()
    }

    #[test]
    fn home_is_hidden_then_the_needed_folders_come_back() {
        let tmp = tempfile::tempdir().unwrap();
        let d = dirs(tmp.path(), &["home/.cache/venv", "data"]);
        let home = tmp.path().join("home");
        let s = steps(&Mounts {
            home: Some(home.clone()),
            readable: vec![d[0].clone(), PathBuf::from("/usr")],
            writable: vec![d[1].clone()],
            ..Default::default()
        });
        // home lies under /tmp here: the private /tmp hides it already.
        assert_eq!(s[0], MountStep::Tmpfs("/tmp".into()));
        assert!(!s.contains(&MountStep::Tmpfs(home)), "{s:?}");
        assert!(s.contains(&MountStep::ReadOnly(d[0].clone())));
        assert!(s.contains(&MountStep::Writable(d[1].clone())));
        assert!(
            !s.contains(&MountStep::ReadOnly("/usr".into())),
            "outside a hidden folder nothing needs binding back"
        );
    }

    #[test]
    fn sources_and_outputs_are_hidden_but_the_scripts_own_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        let d = dirs(&tree, &["a/jax", "b/jax", "results/data/a"]);
        let results = tree.join("results");
        let s = steps(&Mounts {
            readable: vec![d[0].clone()],
            writable: vec![d[2].clone()],
            sources: vec![tree.clone()],
            outputs: vec![results.clone(), PathBuf::from("/")],
            ..Default::default()
        });
        let at = |step: MountStep| {
            s.iter()
                .position(|x| *x == step)
                .unwrap_or_else(|| panic!("no {step:?} in {s:?}"))
        };
        // The tree is under /tmp in this test, so the private /tmp hides it already.
        let hidden = at(MountStep::Tmpfs("/tmp".into()));
        let own_source = at(MountStep::ReadOnly(d[0].clone()));
        let own_data = at(MountStep::Writable(d[2].clone()));
        assert!(hidden < own_source && own_source < own_data, "{s:?}");
        assert!(!s.contains(&MountStep::ReadOnly(d[1].clone())));
        assert!(!s.contains(&MountStep::Tmpfs("/".into())), "never hide /");
    }

    #[test]
    fn hidden_folders_outside_tmp_turn_read_only_after_the_binds() {
        // Folders outside /tmp that exist on every Linux machine (only looked at).
        let tree = PathBuf::from("/usr");
        let own = tree.join("bin");
        let data = tree.join("lib");
        let s = steps(&Mounts {
            readable: vec![own.clone()],
            writable: vec![data.clone()],
            sources: vec![tree.clone()],
            outputs: vec![tree.join("share")],
            ..Default::default()
        });
        let host: Vec<MountStep> = s
            .iter()
            .filter(|x| x.path().starts_with("/sys"))
            .cloned()
            .collect();
        if Path::new("/sys/class/net").exists() {
            assert!(host.contains(&MountStep::Tmpfs("/sys/class/net".into())));
            assert!(host.contains(&MountStep::RemountReadOnly("/sys/class/net".into())));
        }
        let s: Vec<MountStep> = s.into_iter().filter(|x| !host.contains(x)).collect();
        assert_eq!(
            s,
            vec![
                MountStep::Tmpfs("/tmp".into()),
                MountStep::Tmpfs(tree.clone()),
                MountStep::ReadOnly(own),
                MountStep::Writable(data),
                MountStep::RemountReadOnly(tree),
            ],
            "a hidden folder inside another gets no tmpfs of its own"
        );
    }
}
