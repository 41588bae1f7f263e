//! What the warm zygote makes before its first fork for a run: the MLIR context its
//! scripts' lowerings share, where more scripts than slots repay it, and, for a run of
//! many scripts, its heap in 2 MiB pages.

use crate::runner::zygote::Made;

/// From how many scripts a run has its zygote move its heap into 2 MiB pages before
/// the first fork. The move costs 20 to 130 ms before any script starts (measured:
/// the zygote with jax, 30 MiB of heap; most of it copying the pages, more when the
/// kernel must first compact memory for them), and saves each fork and exit about
/// 1 ms (4.2 to 3.2 ms, measured): a loss below a few hundred scripts.
pub(super) const HUGE_PAGES_FROM: usize = 256;

/// What the zygote makes ahead for a run of `scripts` scripts, `jobs` at a time;
/// `uses_jax`: some script names jax (a run of scripts that lower nothing gets no
/// context).
///
/// A script's lowerings share one MLIR context (`share_ir_contexts` in zygote.py),
/// which takes 13 ms to make in a process that made none before (2.8 ms after).
/// Made ahead, before the first fork, every slot waits for it once and every script
/// forked after finds it made; so it pays only where more scripts than the run has
/// slots start from it. A run no larger than its slots starts each script at once,
/// and each makes its own at its first lowering.
pub(super) fn ahead(uses_jax: bool, scripts: usize, jobs: usize) -> Made {
    Made {
        context: uses_jax && scripts > jobs.max(1),
        huge_pages: scripts >= HUGE_PAGES_FROM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_large_run_moves_the_zygote_into_huge_pages() {
        let run = |n: usize| ahead(true, n, 2).huge_pages;
        assert!(!run(8));
        assert!(!run(HUGE_PAGES_FROM - 1));
        assert!(run(HUGE_PAGES_FROM));
        assert!(ahead(false, 1000, 2).huge_pages);
    }

    #[test]
    fn a_run_of_scripts_that_never_name_jax_gets_no_context() {
        assert!(!ahead(false, 4, 1).context);
        assert!(!ahead(false, 20, 2).context);
    }

    /// The boundary: the context is made ahead only where more scripts than slots
    /// start from it.
    #[test]
    fn the_context_is_made_ahead_for_more_scripts_than_slots() {
        assert!(ahead(true, 3, 2).context);
        assert!(ahead(true, 8, 2).context);
        assert!(ahead(true, 2, 1).context);
        assert!(!ahead(true, 2, 2).context);
        assert!(!ahead(true, 8, 8).context);
        assert!(!ahead(true, 1, 1).context);
        assert!(!ahead(true, 0, 2).context);
        // A slot count of 0 never reaches here (a run has one at least); it counts as 1.
        assert!(ahead(true, 2, 0).context);
        assert!(!ahead(true, 1, 0).context);
    }
}
