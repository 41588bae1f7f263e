//! What the warm zygote makes before its first fork for a run: MLIR contexts for its
//! scripts' lowerings, as many as the run's scripts lowered last time repay, and, for
//! a run of many scripts, its heap in 2 MiB pages.

use crate::runner::zygote::Made;

/// From how many scripts a run has its zygote move its heap into 2 MiB pages before
/// the first fork. The move costs 20 to 130 ms before any script starts (measured:
/// the zygote with jax, 30 MiB of heap; most of it copying the pages, more when the
/// kernel must first compact memory for them), and saves each fork and exit about
/// 1 ms (4.2 to 3.2 ms, measured): a loss below a few hundred scripts.
pub(super) const HUGE_PAGES_FROM: usize = 256;

/// The lowerings counted for a script the history does not know: what a generated
/// POMDP script makes (32 to 36 computations, each lowered into a context of its own),
/// the pool's one size before it was sized from the history.
const UNKNOWN_LOWERINGS: u64 = 32;

/// The most contexts made ahead. Each is 1.1 to 1.5 MiB of the zygote's heap, which
/// every fork copies the page tables of and every proportional-size read walks (0.03
/// ms a fork per context, measured); GNN's rendered scripts lower 53 to 72 each.
const MOST_CONTEXTS: u64 = 64;

/// What the zygote makes ahead for a run whose scripts lowered `lowerings` each last
/// time (`None`: the history does not know the script), `jobs` at a time; `uses_jax`:
/// some script names jax (a run of scripts that lower nothing gets no contexts).
///
/// A context takes 2.5 to 3.5 ms to make, before the first fork, while every slot
/// waits for it; each script that lowers into it saves as much. So the k-th context
/// pays only when more scripts than the run has slots lower k or more computations:
/// the pool holds the (jobs + 1)-th largest count, none at all for a run no larger
/// than its slots.
pub(super) fn ahead(uses_jax: bool, lowerings: &[Option<u64>], jobs: usize) -> Made {
    let contexts = match uses_jax {
        true => contexts(lowerings, jobs),
        false => 0,
    };
    Made {
        contexts,
        huge_pages: lowerings.len() >= HUGE_PAGES_FROM,
    }
}

fn contexts(lowerings: &[Option<u64>], jobs: usize) -> u16 {
    let mut needs: Vec<u64> = lowerings
        .iter()
        .map(|n| n.unwrap_or(UNKNOWN_LOWERINGS))
        .collect();
    needs.sort_unstable_by(|a, b| b.cmp(a));
    let repaid = needs.get(jobs.max(1)).copied().unwrap_or(0);
    // At most MOST_CONTEXTS, which fits.
    repaid.min(MOST_CONTEXTS) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(counts: &[u64]) -> Vec<Option<u64>> {
        counts.iter().copied().map(Some).collect()
    }

    #[test]
    fn only_a_large_run_moves_the_zygote_into_huge_pages() {
        let run = |n: usize| ahead(true, &vec![None; n], 2).huge_pages;
        assert!(!run(8));
        assert!(!run(HUGE_PAGES_FROM - 1));
        assert!(run(HUGE_PAGES_FROM));
        assert!(ahead(false, &vec![None; 1000], 2).huge_pages);
    }

    #[test]
    fn a_run_of_scripts_that_never_name_jax_gets_no_contexts() {
        assert_eq!(ahead(false, &known(&[40, 40, 40, 40]), 1).contexts, 0);
        assert_eq!(ahead(false, &vec![None; 20], 2).contexts, 0);
    }

    /// The boundary: the k-th context is made only while more scripts than slots
    /// lowered k or more.
    #[test]
    fn the_pool_holds_what_more_scripts_than_slots_lowered() {
        // 36 36 35 35 35 32 32 32 at 2 a time: the third largest.
        let eight = known(&[32, 35, 36, 32, 35, 36, 35, 32]);
        assert_eq!(contexts(&eight, 2), 35);
        assert_eq!(contexts(&eight, 1), 36);
        assert_eq!(contexts(&eight, 5), 32);
        assert_eq!(contexts(&eight, 7), 32);
        // No more scripts than slots: every one starts at once, and a context made
        // ahead delays each by what it saves it.
        assert_eq!(contexts(&eight, 8), 0);
        assert_eq!(contexts(&known(&[50]), 1), 0);
        assert_eq!(contexts(&known(&[50, 50]), 2), 0);
        assert_eq!(contexts(&known(&[50, 50, 7]), 2), 7);
        assert_eq!(contexts(&[], 2), 0);
    }

    #[test]
    fn unknown_scripts_count_as_a_generated_script_and_the_pool_is_bounded() {
        assert_eq!(contexts(&[None; 3], 2), UNKNOWN_LOWERINGS as u16);
        assert_eq!(contexts(&[Some(5), None, Some(80)], 1), 32);
        assert_eq!(contexts(&known(&[72, 72, 72]), 2), MOST_CONTEXTS as u16);
        assert_eq!(contexts(&known(&[0, 0, 0]), 1), 0);
        // A slot count of 0 never reaches here (a run has one at least); it counts as 1.
        assert_eq!(contexts(&known(&[9, 8]), 0), 8);
    }
}
