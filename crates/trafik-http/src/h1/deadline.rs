//! The response timeout of a connection's exchanges without a timer per request: one sleep per
//! connection stays armed no later than the current deadline, and is moved only when it fires
//! early (then to the deadline) or a new deadline comes before it. A stream of quick exchanges
//! thus moves it about once per timeout, where a `tokio::time::timeout` per request entered and
//! left the timer wheel every time (~5 % of a request's instructions).

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep, sleep_until};

/// One connection's response deadline.
#[derive(Default)]
pub struct Deadline {
    /// Armed at or before `at`; made at the first exchange.
    sleep: Option<Pin<Box<Sleep>>>,
    at: Option<Instant>,
}

impl Deadline {
    /// Runs `future` until it ends or `timeout` has passed since now (`None` then).
    pub async fn within<F: Future>(&mut self, timeout: Duration, future: F) -> Option<F::Output> {
        let at = Instant::now() + timeout;
        self.at = Some(at);
        match &mut self.sleep {
            Some(sleep) if !sleep.is_elapsed() && sleep.deadline() <= at => {}
            Some(sleep) => sleep.as_mut().reset(at),
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
        loop {
            ready!(sleep.as_mut().poll(cx));
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
}
