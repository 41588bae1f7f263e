//! `--fail-fast` and `--max-fail N`: failures are counted as scripts finish, and once
//! the budget is spent no script starts; running ones finish, unless
//! `--fail-fast=now` stops them as Ctrl-C does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use super::{RunContext, Stop};
use crate::model::Status;

/// The stop running scripts obey: the run's own, and with `--fail-fast=now` also
/// [`Stop::Graceful`] once the budget is spent (SIGTERM, the grace, SIGKILL; they end
/// interrupted). The run's own stop still escalates it.
pub fn stop_for_scripts(
    ctx: &Arc<RunContext>,
    run: watch::Receiver<Stop>,
) -> watch::Receiver<Stop> {
    if !ctx.config.fail_now {
        return run;
    }
    let (tx, rx) = watch::channel(*run.borrow());
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let mut run = run;
        let (mut run_open, mut spent) = (true, false);
        let raise = |to: Stop| tx.send_if_modified(|s| std::mem::replace(s, to.max(*s)) < to);
        loop {
            tokio::select! {
                changed = run.changed(), if run_open => match changed {
                    Ok(()) => { raise(*run.borrow_and_update()); }
                    Err(_) => run_open = false,
                },
                _ = ctx.fail_budget.spent(), if !spent => {
                    spent = true;
                    tracing::warn!("{}: stopping running scripts", ctx.fail_budget.reason());
                    raise(Stop::Graceful);
                }
                _ = tx.closed() => break,
            }
            if !run_open && spent {
                break;
            }
        }
    });
    rx
}

/// How many failures the run takes before it starts nothing new.
#[derive(Debug)]
pub struct FailBudget {
    max: Option<usize>,
    /// `--fail-fast=now`: named in the reason.
    now: bool,
    failed: AtomicUsize,
    spent: watch::Sender<bool>,
}

impl FailBudget {
    /// `None`: no limit.
    pub fn new(max: Option<usize>) -> FailBudget {
        FailBudget {
            max,
            now: false,
            failed: AtomicUsize::new(0),
            spent: watch::channel(false).0,
        }
    }

    /// Counts a finished script. An interrupted script is no failure of its own.
    pub fn record(&self, status: Status) {
        if matches!(
            status,
            Status::Succeeded | Status::Interrupted | Status::Skipped | Status::Carried
        ) {
            return;
        }
        let failed = self.failed.fetch_add(1, Ordering::SeqCst) + 1;
        if self.max.is_some_and(|max| failed >= max) {
            self.spent.send_replace(true);
        }
    }

    /// A budget whose reason names `--fail-fast=now` when `now`.
    pub fn stopping(mut self, now: bool) -> FailBudget {
        self.now = now;
        self
    }

    pub fn is_spent(&self) -> bool {
        *self.spent.borrow()
    }

    /// Resolves once the budget is spent (never, without a limit).
    pub async fn spent(&self) {
        let mut rx = self.spent.subscribe();
        let _ = rx.wait_for(|spent| *spent).await;
    }

    /// Why the scripts left did not start.
    pub fn reason(&self) -> String {
        let failed = self.failed.load(Ordering::SeqCst);
        match self.max {
            Some(1) if self.now => format!("--fail-fast=now: {failed} script(s) failed"),
            Some(1) => format!("--fail-fast: {failed} script(s) failed"),
            Some(max) => format!("--max-fail {max}: {failed} script(s) failed"),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spends_at_the_limit_and_wakes_waiters() {
        let b = std::sync::Arc::new(FailBudget::new(Some(2)));
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.spent().await }
        });
        b.record(Status::Succeeded);
        b.record(Status::Interrupted);
        b.record(Status::Failed);
        assert!(!b.is_spent());
        b.record(Status::TimedOut);
        assert!(b.is_spent());
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter wakes")
            .unwrap();
        assert_eq!(b.reason(), "--max-fail 2: 2 script(s) failed");
    }

    #[test]
    fn no_limit_never_spends() {
        let b = FailBudget::new(None);
        for _ in 0..5 {
            b.record(Status::Failed);
        }
        assert!(!b.is_spent());
    }
}
