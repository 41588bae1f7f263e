//! What `/proc` shows of one process of a script's tree: its threads, CPU time and
//! resident sizes from its `stat` line and `statm`, and its proportional set size from
//! `smaps_rollup` (see `tree.rs`, which sums them over the tree).

/// A process's thread count from its `stat` fields (from the state on: `num_threads`,
/// the line's 20th field, is the 18th); at least 1.
pub(super) fn threads(fields: &[String]) -> usize {
    fields
        .get(17)
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// Where `/proc` shows what process `pid` holds: its own folder, or a live thread's
/// where its main thread alone has exited (`headless`: such processes, each with a
/// thread that lives).
pub(super) fn proc_dir(headless: &[(u32, u32)], pid: u32) -> String {
    match headless.iter().find(|(p, _)| *p == pid) {
        Some((_, tid)) => format!("/proc/{pid}/task/{tid}"),
        None => format!("/proc/{pid}"),
    }
}

/// One process's memory as the kernel counts it (see [`process_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcessMemory {
    /// Its proportional set size, or its resident set size where that could not be
    /// read; bytes.
    pub bytes: u64,
    /// Whether `bytes` is the proportional size.
    pub proportional: bool,
    /// Its anonymous pages as the same read found them, bytes: what the pages it adds
    /// later are counted from, so that a page in `bytes` never counts again whatever
    /// the process did between the read and the next look at it.
    pub anonymous: u64,
}

/// One process's memory as the kernel counts it, from its folder in `/proc` (see
/// [`proc_dir`]): its proportional set size (`Pss` of `smaps_rollup`: a page it
/// shares with n processes counts 1/n) where the runner may read that (the ptrace
/// check), else its resident set size (`statm`), with its anonymous pages from the
/// same walk or the same `statm`. `None` for a process already gone.
pub(super) fn process_memory(dir: &str) -> Option<ProcessMemory> {
    if let Ok(text) = std::fs::read_to_string(format!("{dir}/smaps_rollup")) {
        let field = |name: &str| {
            (text.lines())
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(pss), Some(anonymous)) = (field("Pss:"), field("Anonymous:")) {
            return Some(ProcessMemory {
                bytes: pss * 1024,
                proportional: true,
                anonymous: anonymous * 1024,
            });
        }
    }
    let (resident, anonymous) = statm_sizes(dir)?;
    // A process with nothing resident (a zombie) holds nothing to share or count.
    Some(ProcessMemory {
        bytes: resident,
        proportional: resident == 0,
        anonymous,
    })
}

/// A process's resident set size in bytes (`statm`): no page walk, and never less
/// than its proportional set size.
pub(super) fn resident_size(dir: &str) -> Option<u64> {
    statm_sizes(dir).map(|(resident, _)| resident)
}

/// A process's resident set size and, of it, its anonymous pages (resident less
/// shared: `statm`'s shared field counts file and shared-memory pages), in bytes.
pub(super) fn statm_sizes(dir: &str) -> Option<(u64, u64)> {
    let statm = std::fs::read_to_string(format!("{dir}/statm")).ok()?;
    let mut fields = statm.split_whitespace().skip(1);
    let resident: u64 = fields.next()?.parse().ok()?;
    let shared: u64 = fields.next()?.parse().ok()?;
    let page = rustix::param::page_size() as u64;
    Some((resident * page, resident.saturating_sub(shared) * page))
}

/// A process's resident pages from its `stat` fields (`rss`, the line's 24th field,
/// the 22nd from the state on): what `statm` says, read with the rest.
pub(super) fn resident_pages(fields: &[String]) -> u64 {
    fields.get(21).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// utime and stime of a process, in clock ticks, from its `/proc/<pid>/stat` fields
/// (its threads' together, the main thread's too once it has exited).
pub(super) fn cpu_ticks(fields: &[String]) -> Option<(u64, u64)> {
    Some((fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?))
}
