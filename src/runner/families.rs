//! Families of scripts that compile the same functions (one template rendered with
//! other constants), and the gate that keeps a family's scripts from compiling them
//! at the same moment on an empty compilation cache. Run side by side, two scripts of
//! a family each miss the cache the other is about to fill, and compile everything
//! twice (measured on the generated workload: two of a family, started together, 34
//! and 35 misses of 35). Gated, the family's first script (its pioneer) runs first;
//! the others wait until it ends, or [`FAMILY_WAIT`] has passed since it started,
//! while scripts of other families take the slots, and then load its compilations
//! from the cache.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The longest a family's other scripts wait for its pioneer: past it, its
/// compilations are likely in the cache, and a long simulation after them should
/// not keep the family's scripts apart.
pub const FAMILY_WAIT: Duration = Duration::from_secs(10);

/// A script's family: a hash of its source with comments, whitespace, numbers and
/// the contents of string literals left out, so scripts rendered from one template
/// with other parameters (matrices, names, seeds) share it.
pub fn family_of(source: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut i = 0;
    let mut last_word = false;
    while i < source.len() {
        let c = source[i];
        match c {
            b'#' => {
                while i < source.len() && source[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' => {
                // A string literal (single, or triple-quoted) counts as one token.
                let triple = source[i..].starts_with(&[c, c, c]);
                let close: &[u8] = if triple {
                    &source[i..i + 3]
                } else {
                    &source[i..=i]
                };
                i += close.len();
                while i < source.len() && !source[i..].starts_with(close) {
                    i += if source[i] == b'\\' { 2 } else { 1 };
                }
                i += close.len();
                h.write_u8(b'S');
                last_word = false;
                continue;
            }
            b'0'..=b'9' if !last_word => {
                while i < source.len()
                    && (source[i].is_ascii_alphanumeric() || source[i] == b'.' || source[i] == b'_')
                {
                    i += 1;
                }
                h.write_u8(b'N');
                continue;
            }
            c if c.is_ascii_whitespace() => last_word = false,
            c => {
                h.write_u8(c);
                last_word = c.is_ascii_alphanumeric() || c == b'_';
            }
        }
        i += 1;
    }
    h.finish()
}

/// Which scripts of the run wait for their family's pioneer, and which may start.
#[derive(Debug, Default)]
pub struct Gates {
    /// Each gated script's family (families of one script, and families the cache
    /// already holds, are left out by the schedule).
    family: HashMap<String, u64>,
    /// Each family's pioneer: its first script in the run's order.
    pioneer: HashMap<u64, String>,
    /// When each started pioneer started.
    started: HashMap<u64, Instant>,
    /// Families whose pioneer ended (or waited long enough).
    open: HashSet<u64>,
}

impl Gates {
    /// Gates for `order` (script ids in the run's order), given each gated script's
    /// family.
    pub fn new<'a>(family: HashMap<String, u64>, order: impl Iterator<Item = &'a str>) -> Gates {
        let mut pioneer = HashMap::new();
        for id in order {
            if let Some(f) = family.get(id) {
                pioneer.entry(*f).or_insert_with(|| id.to_string());
            }
        }
        Gates {
            family,
            pioneer,
            ..Gates::default()
        }
    }

    /// Whether `id` may start now: not gated, its family's pioneer, or its pioneer
    /// ended or has run for [`FAMILY_WAIT`].
    pub fn may_start(&mut self, id: &str, now: Instant) -> bool {
        let Some(f) = self.family.get(id).copied() else {
            return true;
        };
        if self.open.contains(&f) || self.pioneer.get(&f).is_some_and(|p| p == id) {
            return true;
        }
        if self
            .started
            .get(&f)
            .is_some_and(|t| now >= *t + FAMILY_WAIT)
        {
            self.open.insert(f);
            return true;
        }
        false
    }

    /// `id` starts now.
    pub fn started(&mut self, id: &str, now: Instant) {
        if let Some(f) = self.family.get(id).copied() {
            if self.pioneer.get(&f).is_some_and(|p| p == id) {
                self.started.insert(f, now);
            }
        }
    }

    /// `id` ended: its family opens if it was the pioneer.
    pub fn ended(&mut self, id: &str) {
        if let Some(f) = self.family.get(id).copied() {
            if self.pioneer.get(&f).is_some_and(|p| p == id) {
                self.open.insert(f);
            }
        }
    }

    /// Opens every family: nothing is left to wait for.
    pub fn open_all(&mut self) {
        self.open.extend(self.pioneer.keys().copied());
    }

    /// When the next waiting family opens by itself, if one waits on a started
    /// pioneer.
    pub fn next_opening(&self) -> Option<Instant> {
        (self.started.iter())
            .filter(|(f, _)| !self.open.contains(f))
            .map(|(_, t)| *t + FAMILY_WAIT)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_template_with_other_constants_is_one_family() {
        let a =
            b"import jax\nA = [[0.9, 0.1], [0.2, 0.8]]  # model one\nname = 'one'\nrun(A, 12)\n";
        let b =
            b"import jax\nA = [[0.5, 0.5], [0.3, 0.7]]  # model two\nname = \"two\"\nrun(A, 7)\n";
        assert_eq!(family_of(a), family_of(b));
        // Another structure (a third row, another call) is another family.
        let c = b"import jax\nA = [[0.5, 0.5], [0.3, 0.7], [1, 0]]\nname = 'x'\nrun(A, 7)\n";
        let d = b"import jax\nA = [[0.5, 0.5], [0.3, 0.7]]\nname = 'x'\nsolve(A, 7)\n";
        assert_ne!(family_of(a), family_of(c));
        assert_ne!(family_of(a), family_of(d));
        // Digits inside a name are the name's.
        assert_ne!(family_of(b"x1 = f(2)\n"), family_of(b"x2 = f(2)\n"));
    }

    #[test]
    fn a_familys_others_wait_for_its_pioneer_to_end_or_for_the_bound() {
        let family: HashMap<String, u64> = [("a1", 1), ("a2", 1), ("a3", 1)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let mut g = Gates::new(family, ["a1", "x", "a2", "a3"].into_iter());
        let t0 = Instant::now();
        assert!(g.may_start("x", t0), "not gated");
        assert!(g.may_start("a1", t0), "the pioneer");
        assert!(!g.may_start("a2", t0));
        g.started("a1", t0);
        assert_eq!(g.next_opening(), Some(t0 + FAMILY_WAIT));
        assert!(!g.may_start("a2", t0 + FAMILY_WAIT - Duration::from_millis(1)));
        assert!(g.may_start("a3", t0 + FAMILY_WAIT));
        let mut g = Gates::new(
            [("b1", 2), ("b2", 2)]
                .map(|(k, v)| (k.to_string(), v))
                .into(),
            ["b1", "b2"].into_iter(),
        );
        g.started("b1", t0);
        g.ended("b2"); // not the pioneer: nothing opens
        assert!(!g.may_start("b2", t0));
        g.ended("b1");
        assert!(g.may_start("b2", t0));
        assert_eq!(g.next_opening(), None);
    }
}
