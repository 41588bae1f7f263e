//! Lays a compiled filter out as a binary search on the call's number. seccompiler
//! tests the number against each listed call in turn (a chain of ~300 tests), and the
//! kernel, when a filter is installed, runs that chain once for every call number to
//! learn which calls it may skip the filter for: ~1 ms in every script's process, a
//! tenth of a trivial warm script's CPU (measured). Laid out as a search, each number
//! takes ~9 tests, and the program is a third as long (less to check and compile).
//!
//! Nothing of the policy is decided here: the program's own code for each call (its
//! argument checks and answers) is kept as seccompiler wrote it, and only the path to
//! it changes. The path for a number is found by running the chain's tests on it, and
//! the chain gives the same path to every number between two of its constants, so
//! trying one number of each such interval maps every number (the tests check the two
//! programs agree on every number and on arguments around every constant).

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

pub(super) const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub(super) const JA: u16 = 0x05; // BPF_JMP | BPF_JA
pub(super) const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
pub(super) const JGT: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
pub(super) const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
pub(super) const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
pub(super) const RET: u16 = 0x06; // BPF_RET | BPF_K
/// The kernel's limit on one program's length.
const MAX_LEN: usize = 4096;
/// `offsetof(struct seccomp_data, nr)` and `arch`.
const NR: u32 = 0;
const ARCH: u32 = 4;

/// Where a call number's path through the chain ends: an answer, or the first
/// instruction of the call's own code (entered with the number still loaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Ret(u32),
    Code(usize),
}

/// `program` with its number chain replaced by a binary search, or `None` when it
/// does not start as seccompiler's do (the architecture check, then the number
/// loaded), so the caller keeps it as it is.
pub(super) fn by_number(program: &[Insn]) -> Option<Vec<Insn>> {
    let prefix_ok = program.len() > 4
        && program[0]
            == Insn {
                code: LD_ABS,
                jt: 0,
                jf: 0,
                k: ARCH,
            }
        && program[1].code == JEQ
        && (program[1].jt, program[1].jf) == (1, 0)
        && program[2].code == RET
        && program[3]
            == Insn {
                code: LD_ABS,
                jt: 0,
                jf: 0,
                k: NR,
            };
    if !prefix_ok {
        return None;
    }
    let intervals = intervals(program)?;
    let (code, index) = kept_code(program, &intervals)?;
    let mut tree = Vec::new();
    search(&intervals, &mut tree)?;
    let start = 4 + tree.len();
    let mut out = program[..4].to_vec();
    for (at, node) in tree.into_iter().enumerate() {
        out.push(match node {
            Node::Insn(i) => i,
            Node::Jump(to) => {
                let from = 4 + at + 1;
                Insn {
                    code: JA,
                    jt: 0,
                    jf: 0,
                    k: u32::try_from(start + index[&to] - from).ok()?,
                }
            }
        });
    }
    out.extend(code);
    (out.len() <= MAX_LEN).then_some(out)
}

/// The chain's path for every call number, as intervals `[start, next start)` with
/// the same end, adjacent equal ones merged; the first starts at 0.
fn intervals(program: &[Insn]) -> Option<Vec<(u32, Target)>> {
    let mut starts = vec![0u32];
    for i in program {
        match i.code {
            JEQ => starts.extend([Some(i.k), i.k.checked_add(1)].into_iter().flatten()),
            JGT => starts.extend(i.k.checked_add(1)),
            JGE => starts.push(i.k),
            _ => {}
        }
    }
    starts.sort_unstable();
    starts.dedup();
    let mut out: Vec<(u32, Target)> = Vec::new();
    for s in starts {
        let t = path(program, s)?;
        if out.last().map(|l| l.1) != Some(t) {
            out.push((s, t));
        }
    }
    Some(out)
}

/// Runs the chain's tests on `nr` from just after the number is loaded, to the first
/// instruction that is not a test of it (or an answer).
fn path(program: &[Insn], nr: u32) -> Option<Target> {
    let mut pc = 4;
    loop {
        let i = program.get(pc)?;
        let taken = match i.code {
            JEQ => nr == i.k,
            JGT => nr > i.k,
            JGE => nr >= i.k,
            JA => {
                pc = pc + 1 + i.k as usize;
                continue;
            }
            RET => return Some(Target::Ret(i.k)),
            _ => return Some(Target::Code(pc)),
        };
        pc += 1 + usize::from(if taken { i.jt } else { i.jf });
    }
}

/// The instructions reachable from the calls' own code, in their order, with their
/// jumps re-aimed; and each kept instruction's new place among them.
fn kept_code(
    program: &[Insn],
    intervals: &[(u32, Target)],
) -> Option<(Vec<Insn>, std::collections::HashMap<usize, usize>)> {
    let mut reach = vec![false; program.len()];
    let mut todo: Vec<usize> = intervals
        .iter()
        .filter_map(|(_, t)| match t {
            Target::Code(pc) => Some(*pc),
            Target::Ret(_) => None,
        })
        .collect();
    while let Some(pc) = todo.pop() {
        if std::mem::replace(reach.get_mut(pc)?, true) {
            continue;
        }
        let i = program[pc];
        match i.code {
            // Any return (of a constant or of the accumulator) ends the path.
            c if c & 0x07 == 0x06 => {}
            JA => todo.push(pc + 1 + i.k as usize),
            JEQ | JGT | JGE | JSET => {
                todo.extend([pc + 1 + usize::from(i.jt), pc + 1 + usize::from(i.jf)])
            }
            // Any other jump would need its own re-aiming: keep the program as it is.
            c if c & 0x07 == 0x05 => return None,
            _ => todo.push(pc + 1),
        }
    }
    let index: std::collections::HashMap<usize, usize> = (0..program.len())
        .filter(|&pc| reach[pc])
        .enumerate()
        .map(|(new, old)| (old, new))
        .collect();
    let aim = |from: usize, off: usize| index[&(from + 1 + off)] - index[&from] - 1;
    let mut out = Vec::with_capacity(index.len());
    for pc in (0..program.len()).filter(|&pc| reach[pc]) {
        let mut i = program[pc];
        match i.code {
            JA => i.k = u32::try_from(aim(pc, i.k as usize)).ok()?,
            JEQ | JGT | JGE | JSET => {
                // Only instructions between are dropped: the distances can but shrink.
                i.jt = u8::try_from(aim(pc, usize::from(i.jt))).ok()?;
                i.jf = u8::try_from(aim(pc, usize::from(i.jf))).ok()?;
            }
            _ => {}
        }
        out.push(i);
    }
    Some((out, index))
}

/// An instruction of the search, or a jump to a call's code (its old place).
enum Node {
    Insn(Insn),
    Jump(usize),
}

/// Appends the search over `intervals` (one is a leaf: its answer, or a jump to its
/// code); each test sends numbers at or above the middle interval's start right.
fn search(intervals: &[(u32, Target)], out: &mut Vec<Node>) -> Option<()> {
    if let [(_, target)] = intervals {
        out.push(match *target {
            Target::Ret(k) => Node::Insn(Insn {
                code: RET,
                jt: 0,
                jf: 0,
                k,
            }),
            Target::Code(pc) => Node::Jump(pc),
        });
        return Some(());
    }
    let (left, right) = intervals.split_at(intervals.len() / 2);
    let mut low = Vec::new();
    search(left, &mut low)?;
    let test = |jt: u8, jf: u8| Insn {
        code: JGE,
        jt,
        jf,
        k: right[0].0,
    };
    match u8::try_from(low.len()) {
        Ok(skip) => out.push(Node::Insn(test(skip, 0))),
        // Too far for a test's own jump: it steps onto a long jump over the left.
        Err(_) => {
            out.push(Node::Insn(test(0, 1)));
            let k = u32::try_from(low.len()).ok()?;
            out.push(Node::Insn(Insn {
                code: JA,
                jt: 0,
                jf: 0,
                k,
            }));
        }
    }
    out.extend(low);
    search(right, out)
}
