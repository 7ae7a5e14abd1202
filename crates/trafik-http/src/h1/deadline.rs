//! The response timeout of a connection's exchanges without a timer per request: one sleep per
//! connection stays armed no later than the current deadline, and is moved only when it fires
//! early (then to the deadline) or a new deadline comes before it. A stream of quick exchanges
//! thus moves it about once per timeout, where a `tokio::time::timeout` per request entered and
//! left the timer wheel every time (~5 % of a request's instructions).

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep, sleep_until};

/// One connection's response deadline.
#[derive(Default)]
pub struct Deadline {
    /// Armed at or before `at`; made at the first exchange.
    sleep: Option<Pin<Box<Sleep>>>,
    at: Option<Instant>,
    /// The sleep holds the connection task's waker: it was polled, with coop budget left,
    /// since it was last set, and has not fired. It wakes the task when it fires, so until
    /// then it needs no polling. (A connection's exchanges all run in its one task.)
    waking: bool,
}

impl Deadline {
    /// Runs `future` until it ends or `timeout` has passed since now (`None` then).
    pub async fn within<F: Future>(&mut self, timeout: Duration, future: F) -> Option<F::Output> {
        let at = Instant::now() + timeout;
        self.at = Some(at);
        match &mut self.sleep {
            Some(sleep) if !sleep.is_elapsed() && sleep.deadline() <= at => {}
            Some(sleep) => {
                sleep.as_mut().reset(at);
                self.waking = false;
            }
            None => self.sleep = Some(Box::pin(sleep_until(at))),
        }
        let mut future = pin!(future);
        poll_fn(|cx| {
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            self.poll_passed(cx).map(|()| None)
        })
        .await
    }

    fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let (Some(sleep), Some(at)) = (self.sleep.as_mut(), self.at) else {
            return Poll::Pending;
        };
        if self.waking && !sleep.is_elapsed() {
            return Poll::Pending;
        }
        loop {
            // Out of budget, a sleep answers `Pending` without taking the waker (the task is
            // woken to run again instead): then it is polled again next time.
            let budget_left = tokio::task::coop::has_budget_remaining();
            if sleep.as_mut().poll(cx).is_pending() {
                self.waking = budget_left;
                return Poll::Pending;
            }
            // It fired at its own deadline: past ours once that is no later.
            if sleep.deadline() >= at {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_exchange_gets_its_whole_timeout() {
        let mut deadline = Deadline::default();
        let long = Duration::from_millis(300);
        assert_eq!(deadline.within(long, async { 1 }).await, Some(1));
        // Later, a slow answer: the sleep armed for the first deadline fires early and is moved.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let slow = deadline.within(long, std::future::pending::<()>());
        assert_eq!(slow.await, None);
        assert!(started.elapsed() >= long);
        // A shorter timeout after a longer one.
        let short = Duration::from_millis(50);
        let started = Instant::now();
        let shorter = deadline.within(short, std::future::pending::<()>());
        assert_eq!(shorter.await, None);
        assert!(started.elapsed() >= short);
        let answered = deadline.within(Duration::from_secs(60), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            2
        });
        assert_eq!(answered.await, Some(2));
    }

    /// Exchanges that wait (their sleep polled once, then left alone while it holds the
    /// task's waker) do not keep a later one from timing out, whether the sleep armed for them
    /// fires before its deadline or at it.
    #[tokio::test(start_paused = true)]
    async fn a_sleep_left_unpolled_still_ends_a_later_exchange() {
        let mut deadline = Deadline::default();
        let timeout = Duration::from_secs(30);
        for _ in 0..3 {
            let waits = deadline.within(timeout, async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                1
            });
            assert_eq!(waits.await, Some(1));
        }
        // Each bounded by a timer of its own, so that a deadline missed fails the test
        // rather than hanging it.
        let mut never_answered = async |timeout: Duration| {
            let started = Instant::now();
            let waits = deadline.within(timeout, std::future::pending::<()>());
            let ended = tokio::time::timeout(timeout * 2, waits).await;
            (ended, started.elapsed())
        };
        // The sleep armed at the first exchange fires 3 s before this one's deadline.
        assert_eq!(never_answered(timeout).await, (Ok(None), timeout));
        let short = Duration::from_secs(2);
        assert_eq!(never_answered(short).await, (Ok(None), short));
    }

    /// A first poll that finds the task's coop budget spent (by the exchange's own work
    /// before it waits: a body sent, say) leaves the sleep without the waker; the deadline
    /// still ends the exchange on time.
    #[tokio::test(start_paused = true)]
    async fn a_sleep_first_polled_out_of_budget_still_ends_the_exchange() {
        let mut deadline = Deadline::default();
        let timeout = Duration::from_secs(30);
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        for n in 0..1_000 {
            sender.send(n).unwrap();
        }
        // Drains what it may each poll (each message spends budget), never answers.
        let spends_budget = std::future::poll_fn(|cx| {
            while let Poll::Ready(Some(_)) = receiver.poll_recv(cx) {}
            Poll::<()>::Pending
        });
        let started = Instant::now();
        let waits = deadline.within(timeout, spends_budget);
        let ended = tokio::time::timeout(timeout * 2, waits).await;
        assert_eq!((ended, started.elapsed()), (Ok(None), timeout));
    }
}
