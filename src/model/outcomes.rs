//! The one vocabulary of how scripts end: every script has exactly one final
//! [`Status`], [`Outcomes::count`] counts them and [`Outcomes::words`] says them. The
//! totals of `performance_metrics.json`, the terminal summary, the execution log,
//! `execution_report.md`, `report.html` and `junit.xml` all take their counts and
//! words from here, so a "failed" means the same in each.

use super::Status;

/// Scripts per final status: disjoint, so they add up to the scripts counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    pub succeeded: usize,
    /// Status `failed` only: an error, a crash, a kill (never a timeout or a stop).
    pub failed: usize,
    pub timed_out: usize,
    pub interrupted: usize,
    /// Never started: `--fail-fast`/`--max-fail` stopped the run first.
    pub skipped: usize,
    /// Not run by this run: an earlier run's record stands.
    pub carried: usize,
    /// Of the carried, those whose standing record did not succeed: the tree is red
    /// there though this run did not touch them. Not a status of its own: counted
    /// apart, inside `carried`.
    pub still_failing: usize,
}

/// Every status, in the order the counts are worded: what worked, then what needs
/// attention, worst first, then what this run did not touch.
pub const STATUSES: [Status; 6] = [
    Status::Succeeded,
    Status::Failed,
    Status::TimedOut,
    Status::Interrupted,
    Status::Skipped,
    Status::Carried,
];

impl Outcomes {
    /// Counts final statuses (none of them still failing: see [`Outcomes::still_failing`]).
    pub fn count(statuses: impl IntoIterator<Item = Status>) -> Outcomes {
        let mut o = Outcomes::default();
        for s in statuses {
            o.add(s);
        }
        o
    }

    /// Counts one more script.
    pub fn add(&mut self, status: Status) {
        *self.slot(status) += 1;
    }

    fn slot(&mut self, status: Status) -> &mut usize {
        match status {
            Status::Succeeded => &mut self.succeeded,
            Status::Failed => &mut self.failed,
            Status::TimedOut => &mut self.timed_out,
            Status::Interrupted => &mut self.interrupted,
            Status::Skipped => &mut self.skipped,
            Status::Carried => &mut self.carried,
        }
    }

    /// The scripts of one status.
    pub fn of(&self, status: Status) -> usize {
        match status {
            Status::Succeeded => self.succeeded,
            Status::Failed => self.failed,
            Status::TimedOut => self.timed_out,
            Status::Interrupted => self.interrupted,
            Status::Skipped => self.skipped,
            Status::Carried => self.carried,
        }
    }

    /// Scripts counted.
    pub fn total(&self) -> usize {
        STATUSES.iter().map(|s| self.of(*s)).sum()
    }

    /// Scripts whose status makes the run fail: every one this run ran or meant to
    /// run that did not succeed. A carried script does not count: this run did not
    /// run it, and its earlier record stands for what it was.
    pub fn unsuccessful(&self) -> usize {
        self.failed + self.timed_out + self.interrupted + self.skipped
    }

    /// Scripts of the tree whose current record is not a success: this run's
    /// unsuccessful ones and the carried records still failing. What `show` answers by.
    pub fn standing_failed(&self) -> usize {
        self.unsuccessful() + self.still_failing
    }

    /// A status as the counts word it: `timed out`, not `timed_out`.
    pub fn label(status: Status) -> &'static str {
        match status {
            Status::TimedOut => "timed out",
            other => other.as_str(),
        }
    }

    /// The counts in the words every report uses: `3 of 8 succeeded, 2 failed, 1
    /// timed out, 1 interrupted, 1 skipped`. Succeeded is always said (it is the
    /// sentence's subject); the other statuses only when some script has them, so an
    /// ordinary clean run reads `3 of 3 succeeded`.
    pub fn words(&self) -> String {
        let mut out = format!("{} of {} succeeded", self.succeeded, self.total());
        for part in self.problem_parts() {
            out.push_str(", ");
            out.push_str(&part);
        }
        out
    }

    /// The statuses other than succeeded that some script has, worded (`2 failed`,
    /// `1 carried`); empty when every script succeeded.
    pub fn problems(&self) -> String {
        self.problem_parts().join(", ")
    }

    fn problem_parts(&self) -> Vec<String> {
        STATUSES[1..]
            .iter()
            .filter(|s| self.of(**s) > 0)
            .map(|s| match *s {
                Status::Carried if self.still_failing > 0 => format!(
                    "{} carried ({} still failing)",
                    self.carried, self.still_failing
                ),
                s => format!("{} {}", self.of(s), Outcomes::label(s)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carried_records_still_failing_are_said_and_stand_failed() {
        let mut o = Outcomes::count([Status::Succeeded, Status::Carried, Status::Carried]);
        assert_eq!(o.standing_failed(), 0);
        o.still_failing = 1;
        assert_eq!(o.unsuccessful(), 0, "this run's outcomes are green");
        assert_eq!(o.standing_failed(), 1, "the tree is not");
        assert_eq!(o.words(), "1 of 3 succeeded, 2 carried (1 still failing)");
    }

    #[test]
    fn every_status_is_counted_once_and_worded_in_one_order() {
        let o = Outcomes::count([
            Status::Carried,
            Status::Succeeded,
            Status::Skipped,
            Status::Failed,
            Status::TimedOut,
            Status::Succeeded,
            Status::Interrupted,
            Status::Failed,
            Status::Succeeded,
        ]);
        assert_eq!(
            o,
            Outcomes {
                succeeded: 3,
                failed: 2,
                timed_out: 1,
                interrupted: 1,
                skipped: 1,
                carried: 1,
                still_failing: 0,
            }
        );
        assert_eq!(o.total(), 9);
        assert_eq!(o.unsuccessful(), 5, "carried does not fail the run");
        assert_eq!(
            o.words(),
            "3 of 9 succeeded, 2 failed, 1 timed out, 1 interrupted, 1 skipped, 1 carried"
        );
        assert_eq!(
            o.problems(),
            "2 failed, 1 timed out, 1 interrupted, 1 skipped, 1 carried"
        );
    }

    #[test]
    fn zeros_are_left_out_but_succeeded_is_always_said() {
        assert_eq!(
            Outcomes::count([Status::Succeeded; 3]).words(),
            "3 of 3 succeeded"
        );
        assert_eq!(
            Outcomes::count([Status::Skipped, Status::TimedOut]).words(),
            "0 of 2 succeeded, 1 timed out, 1 skipped"
        );
        assert_eq!(Outcomes::default().words(), "0 of 0 succeeded");
        assert_eq!(Outcomes::count([Status::Succeeded]).problems(), "");
    }

    #[test]
    fn a_fail_fast_run_is_not_six_failures() {
        // Issue 25: 1 timed out, 5 skipped read "6 failed (1 timed out, …)".
        let mut statuses = vec![Status::TimedOut];
        statuses.extend([Status::Skipped; 5]);
        let o = Outcomes::count(statuses);
        assert_eq!(o.failed, 0);
        assert_eq!(o.words(), "0 of 6 succeeded, 1 timed out, 5 skipped");
    }
}
