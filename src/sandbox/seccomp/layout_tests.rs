//! The search layout against seccompiler's chain: the two programs give the same
//! answer to every call number (and, for the calls whose answer reads arguments, to
//! arguments at, beside and between every constant the programs test), under every
//! separation; and the search does shorten what the kernel runs.

use super::layout::{by_number, Insn, JA, JEQ, JGE, JGT, JSET, LD_ABS, RET};
use super::rules::{chain, chain_allowed, ENOSYS};
use super::{allowed, Separation};

/// What the BPF interpreter saw: the answer, the instructions run, whether it read an
/// argument (or the instruction pointer: anything past `nr` and `arch`).
struct Run {
    answer: u32,
    steps: usize,
    read_args: bool,
}

/// Runs `p` on `data` (a `struct seccomp_data`) as the kernel would; panics on an
/// instruction this model does not know, so a new kind in seccompiler's output fails
/// the test rather than passing it unchecked.
fn run(p: &[Insn], data: &[u8; 64]) -> Run {
    let (mut a, mut pc, mut steps, mut read_args) = (0u32, 0usize, 0usize, false);
    loop {
        let i = p[pc];
        pc += 1;
        steps += 1;
        match i.code {
            LD_ABS => {
                let k = i.k as usize;
                read_args |= k >= 8;
                a = u32::from_ne_bytes(data[k..k + 4].try_into().unwrap());
            }
            0x54 => a &= i.k, // BPF_ALU | BPF_AND | BPF_K
            JA => pc += i.k as usize,
            JEQ | JGT | JGE | JSET => {
                let taken = match i.code {
                    JEQ => a == i.k,
                    JGT => a > i.k,
                    JGE => a >= i.k,
                    _ => a & i.k != 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            RET => {
                return Run {
                    answer: i.k,
                    steps,
                    read_args,
                }
            }
            c => panic!("instruction {c:#x} is not modelled"),
        }
    }
}

fn data(arch: u32, nr: u32, halves: &[u32; 12]) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&nr.to_ne_bytes());
    d[4..8].copy_from_slice(&arch.to_ne_bytes());
    for (n, h) in halves.iter().enumerate() {
        d[16 + 4 * n..20 + 4 * n].copy_from_slice(&h.to_ne_bytes());
    }
    d
}

/// Every constant the program tests or masks with, with its neighbours.
fn values(p: &[Insn]) -> Vec<u32> {
    let mut v = vec![0, 1, u32::MAX];
    for i in p
        .iter()
        .filter(|i| matches!(i.code, JEQ | JGT | JGE | JSET | 0x54))
    {
        v.extend([i.k, i.k.wrapping_sub(1), i.k.wrapping_add(1)]);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Every program the runner can install: each separation, with and without a GPU.
fn chains() -> Vec<(String, Vec<Insn>)> {
    let mut out = vec![("enosys".to_string(), chain(ENOSYS, libc::ENOSYS))];
    for bits in 0..8u8 {
        let s = Separation {
            pid: bits & 1 != 0,
            ipc: bits & 2 != 0,
            net: bits & 4 != 0,
        };
        for gpu in [false, true] {
            let c = chain_allowed(&allowed::rules(s, gpu), libc::EPERM);
            out.push((format!("{s:?} gpu={gpu}"), c));
        }
    }
    out
}

#[test]
fn the_search_answers_every_call_as_the_chain_does() {
    for (name, linear) in chains() {
        let laid = by_number(&linear).unwrap_or_else(|| panic!("{name}: not laid out"));
        let native = linear[1].k;
        let vals = values(&linear);
        let mut numbers: Vec<u32> = (0..1100)
            .chain((0..1100).map(|n| n | 0x4000_0000))
            .collect();
        numbers.extend(vals.iter().copied());
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for arch in [native, native ^ 1, 0] {
            for &nr in &numbers {
                let zero = [0u32; 12];
                let (a, b) = (
                    run(&linear, &data(arch, nr, &zero)),
                    run(&laid, &data(arch, nr, &zero)),
                );
                assert_eq!(a.answer, b.answer, "{name}: arch {arch:#x} nr {nr}");
                if !(a.read_args || b.read_args) {
                    continue; // neither looks past the number: arguments cannot matter
                }
                let mut vectors: Vec<[u32; 12]> = Vec::new();
                for &v in &vals {
                    vectors.push([v; 12]);
                    for h in 0..12 {
                        let mut x = [0u32; 12];
                        x[h] = v;
                        vectors.push(x);
                    }
                }
                for _ in 0..300 {
                    let mut x = [0u32; 12];
                    for h in x.iter_mut() {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        *h = vals[(seed >> 33) as usize % vals.len()];
                    }
                    vectors.push(x);
                }
                for x in &vectors {
                    let d = data(arch, nr, x);
                    assert_eq!(
                        run(&linear, &d).answer,
                        run(&laid, &d).answer,
                        "{name}: nr {nr} args {x:?}"
                    );
                }
            }
        }
    }
}

/// What the layout is for: the kernel's pass over every number at install, and each
/// call a script makes, run a handful of tests where the chain ran hundreds, and the
/// program is shorter to check and compile.
#[test]
fn the_search_is_shorter_than_the_chain() {
    for (name, linear) in chains().into_iter().skip(1) {
        let laid = by_number(&linear).unwrap();
        let native = linear[1].k;
        let worst = |p: &[Insn]| {
            (0..1100)
                .map(|nr| run(p, &data(native, nr, &[0; 12])).steps)
                .max()
                .unwrap()
        };
        let (chained, searched) = (worst(&linear), worst(&laid));
        assert!(searched <= 40, "{name}: {searched} steps at worst");
        assert!(
            chained > 5 * searched,
            "{name}: {chained} against {searched}"
        );
        assert!(
            laid.len() * 2 < linear.len(),
            "{name}: {} against {}",
            laid.len(),
            linear.len()
        );
    }
}

/// A program that does not start as seccompiler's is left as it is.
#[test]
fn a_program_of_another_shape_is_left_alone() {
    let ret = |k| Insn {
        code: RET,
        jt: 0,
        jf: 0,
        k,
    };
    assert_eq!(by_number(&[ret(0), ret(0), ret(0), ret(0), ret(0)]), None);
    let mut linear = chain(ENOSYS, libc::ENOSYS);
    linear[3].k = 8; // loads the instruction pointer, not the number
    assert_eq!(by_number(&linear), None);
}
