//! One request's (or one layer-4 connection's) way through a pool, whatever carries it: the
//! pool's rules decide here, and the transport only reports what happened.
//!
//! The caller asks [`Call::next`] for a backend, tries it (a connect, a send, an answer), and
//! says how that went: [`Call::connect_failed`], [`Call::lost`], [`Call::answered`] (then perhaps
//! [`Call::retry_answer`]) and, for the answer the client gets, [`Call::settled`], which ends the
//! call; the attempt's [`InFlight`] mark outlives it and says how that answer's body ended
//! ([`InFlight::answer_ended`], [`InFlight::answer_cut`]). A retry's backoff is waited out by the next [`Call::next`], after the caller has let go
//! of the failed try's connection and in-flight mark. Everything a pool promises follows from these
//! calls alone, the same on trafik's own HTTP/1 engine, on hyper's pipeline and at layer 4:
//! stickiness by key, the rule's pick and slow start, the circuit breaker and its queue, the
//! adaptive limit, the decision, failure and request counters, passive health, latency for the
//! latency-aware rules, and retries within the budget. When [`Call::next`] has nothing more to
//! offer, [`Call::failure`] says what the client gets.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use trafik_balance::{Nanos, Outcome, PickContext, Tried};

use super::Pool;
use super::PoolSet;
use crate::concurrency::Slot;
use crate::counters::{BackendCounters, bump, move_alone};
use crate::error::{Blame, Cause, ProxyError};
use crate::metrics::Took;

/// A request in the hands of one pool, from its first pick to its answer or failure.
pub struct Call<'s> {
    /// What keeps the pool alive for the attempts' in-flight marks.
    snapshot: Rc<dyn PoolSet>,
    pool_index: usize,
    pool: &'s Pool,
    worker: usize,
    /// The worker's clock origin: the rules' `Nanos` count from it.
    epoch: Instant,
    /// What the rules pick with: the request's key, the backends tried.
    pub context: PickContext,
    /// A backend chosen before the rule (a cookie's), tried first.
    bound: Option<usize>,
    /// Tries of this round, passes over a backend at its request limit included.
    attempt: u32,
    /// No try may follow (the budget said no).
    stopped: bool,
    /// A retry was granted: the next pick waits out its backoff first.
    backing_off: bool,
    /// Whether the pool's backends answer (HTTP): a layer-4 try that fails is no unanswered
    /// request in the backend's recent window.
    answers: bool,
    /// When the first try starts: when the caller's clock for the answer started.
    first_sent_at: Option<Instant>,
    /// Why no backend answered, if none does.
    failure: ProxyError,
    /// The backend that failed last and how, named in the client's answer if none answers.
    blamed: Option<(usize, Cause)>,
    /// Backends passed over only for their request limit, and the queue's deadline once the
    /// request waits there.
    limited: Tried,
    queue_deadline: Option<tokio::time::Instant>,
    /// The adaptive limit's admission, when the pool has one.
    slot: Option<Slot>,
    timed: bool,
}

/// One try on one backend: counted in flight to it while this lives (or the [`InFlight`] taken
/// from it does).
pub struct Attempt<'s> {
    pub index: usize,
    pub counters: &'s BackendCounters,
    pub in_flight: InFlight,
    pub sent_at: Instant,
}

impl<'s> Call<'s> {
    /// Starts a call to the pool at `pool_index` of `snapshot`, for a request whose clock
    /// started at `began`; `bound` is a backend the request is bound to. `Err` when the pool's
    /// adaptive limit lets nothing more in.
    pub fn start<S: PoolSet + 'static>(
        snapshot: &'s Rc<S>,
        pool_index: usize,
        worker: usize,
        epoch: Instant,
        began: Instant,
        context: PickContext,
        bound: Option<usize>,
    ) -> Result<Self, ProxyError> {
        let pool: &'s Pool = &snapshot.pools()[pool_index];
        let slot = match pool.concurrency.as_ref().map(|c| c.admit()) {
            Some(None) => {
                pool.own_errors.count(ProxyError::ConcurrencyLimited);
                return Err(ProxyError::ConcurrencyLimited);
            }
            admitted => admitted.flatten(),
        };
        // The request's own clock reading: no other is needed to start.
        let now = began.saturating_duration_since(epoch).as_nanos() as Nanos;
        pool.retrying.first_try(now);
        let timed = pool.plan.algorithm.uses_latency();
        Ok(Call {
            snapshot: snapshot.clone(),
            pool_index,
            pool,
            worker,
            epoch,
            context: PickContext { now, ..context },
            bound,
            attempt: 0,
            stopped: false,
            backing_off: false,
            answers: true,
            first_sent_at: Some(began),
            failure: ProxyError::NoHealthyBackend,
            blamed: None,
            limited: Tried::default(),
            queue_deadline: None,
            slot,
            timed,
        })
    }

    /// A call for a layer-4 connection, whose backends answer nothing.
    pub fn for_connections(mut self) -> Self {
        self.answers = false;
        self
    }

    /// The next backend to try, counted as a decision and in flight; `None` when the pool has
    /// none left for this request (see [`Call::failure`]). Waits out a granted retry's backoff
    /// first, and in the pool's queue while every backend is at its request limit and the pool
    /// lets requests wait.
    pub async fn next(&mut self) -> Option<Attempt<'s>> {
        let pool = self.pool;
        if std::mem::take(&mut self.backing_off) {
            pool.retrying.back_off(self.attempt).await;
        }
        loop {
            while !self.stopped && self.attempt <= pool.plan.retries {
                if self.timed {
                    self.context.now = self.now();
                }
                let Some(index) = self.pick() else { break };
                if pool.at_request_limit(index) {
                    // A circuit breaker: passed over like a failed backend, nothing charged.
                    self.context.tried.insert(index);
                    self.limited.insert(index);
                    self.failure = ProxyError::BackendsAtLimit;
                    self.attempt += 1;
                    continue;
                }
                let counters = pool.members[index].counters.mine(self.worker);
                bump(&counters.decisions);
                let in_flight =
                    InFlight::start(&self.snapshot, self.pool_index, index, self.worker);
                let sent_at = self.first_sent_at.take().unwrap_or_else(Instant::now);
                return Some(Attempt {
                    index,
                    counters,
                    in_flight,
                    sent_at,
                });
            }
            self.wait_in_queue().await.ok()?;
        }
    }

    /// The backend for the next try: the bound one, a key's home, else the rule's pick, then
    /// slow start; `None` when no backend is left.
    fn pick(&mut self) -> Option<usize> {
        let pool = self.pool;
        pool.pick(self.bound.take(), &self.context)
            .map(|index| pool.warmed(index, &self.context))
    }

    /// After a round that ended with every backend at its limit: waits in the queue for one to
    /// have room, then starts a new round among them. `Err` (with the failure set) otherwise.
    async fn wait_in_queue(&mut self) -> Result<(), ()> {
        let pool = self.pool;
        if self.failure != ProxyError::BackendsAtLimit || pool.plan.max_pending == 0 {
            return Err(());
        }
        let waiting = PickContext {
            tried: self.context.tried.without(self.limited),
            ..self.context
        };
        let deadline = *self
            .queue_deadline
            .get_or_insert_with(|| pool.pending.deadline());
        match pool
            .pending
            .wait(|| pool.saturated(&waiting), deadline)
            .await
        {
            Ok(()) => {
                self.context = waiting;
                self.limited = Tried::default();
                self.failure = ProxyError::NoHealthyBackend;
                // The backend's clock starts when it is asked, not while the request queued.
                self.first_sent_at = None;
                self.attempt = 0;
                self.stopped = false;
                Ok(())
            }
            Err(error) => {
                self.failure = error;
                Err(())
            }
        }
    }

    /// No connection could be made to the attempt's backend (`cause` says why): counted
    /// against it, and another may be tried while retries and the budget allow.
    pub fn connect_failed(&mut self, attempt: Attempt<'s>, cause: Cause) {
        let Attempt {
            index, counters, ..
        } = attempt;
        bump(&counters.failures);
        if self.answers {
            counters.served.unanswered();
        }
        self.pool.report(index, Outcome::ConnectFailure);
        // Said once per outage: a backend nobody checks must not fail in silence.
        let already_said = self.pool.members[index]
            .counters
            .sum(|c| c.unreachable.load(Ordering::Relaxed) as i64)
            > 0;
        counters.unreachable.store(true, Ordering::Relaxed);
        if already_said {
            tracing::debug!(pool = %self.pool.plan.name, backend = %self.pool.address(index), reason = cause.words(), "connect failed");
        } else {
            tracing::warn!(pool = %self.pool.plan.name, backend = %self.pool.address(index), reason = cause.words(), "backend unreachable: connect failed");
        }
        self.context.tried.insert(index);
        self.blamed = Some((index, cause));
        self.failure = ProxyError::ConnectFailed;
        self.stopped = !self.another();
    }

    /// The attempt reached its backend but got no answer (`error`); its in-flight mark ends
    /// here. `Ok` with `replay` (what sends the request again, if it may be) when it goes to
    /// another backend: retries and the budget allow. Else the error the client gets.
    pub fn lost<R>(
        &mut self,
        attempt: Attempt<'s>,
        error: ProxyError,
        replay: Option<R>,
    ) -> Result<R, ProxyError> {
        let Attempt {
            index, counters, ..
        } = attempt;
        if error == ProxyError::UpstreamTimeout {
            self.adapt();
        }
        counters.served.unanswered();
        // A body the client broke is not the backend's fault.
        if error.is_backend_fault() {
            bump(&counters.failures);
            self.pool.report(index, Outcome::Error);
            self.blamed = error.cause().map(|cause| (index, cause));
        }
        match replay {
            Some(replay)
                if error.is_lost_request() && self.others_left(index) && self.another() =>
            {
                tracing::debug!(pool = %self.pool.plan.name, backend = %self.pool.address(index), %error, "sending again elsewhere");
                self.retry_elsewhere(index, error);
                Ok(replay)
            }
            _ => {
                self.failure = error;
                self.pool.own_errors.count(error);
                Err(error)
            }
        }
    }

    /// The attempt's backend answered with `status` at `answered_at`: counted, and told to
    /// the adaptive limit and passive health. A 5xx is an error at once; an answer below 500 is
    /// a success only once its body has ended, told by the attempt's [`InFlight`] mark, so a
    /// body the backend cuts short is one error, not a success and then an error. Returns the
    /// attempt's time, for the caller's own counts.
    pub fn answered(
        &mut self,
        attempt: &mut Attempt<'s>,
        status: u16,
        answered_at: Instant,
    ) -> Took {
        self.adapt();
        bump(&attempt.counters.requests);
        if attempt.counters.unreachable.load(Ordering::Relaxed) {
            attempt.counters.unreachable.store(false, Ordering::Relaxed);
            tracing::info!(pool = %self.pool.plan.name, backend = %self.pool.address(attempt.index), "backend answers again");
        }
        let took = Took::between(attempt.sent_at, answered_at);
        attempt.counters.served.answered_in(status, took);
        match Outcome::of_status(status) {
            Outcome::Success => attempt.in_flight.answer_pending = true,
            outcome => self.pool.report(attempt.index, outcome),
        }
        took
    }

    /// Whether an answer with `status` (and a `Retry-After` field or not) goes to another
    /// backend instead of the client: a status the pool retries, for a request that may be sent
    /// again (`replay`), while others are left and the budget allows. Then `replay` comes back,
    /// and the caller lets go of the attempt, its answer and connection before the next pick.
    pub fn retry_answer<R>(
        &mut self,
        attempt: &mut Attempt<'s>,
        status: u16,
        retry_after: bool,
        replay: Option<R>,
    ) -> Option<R> {
        let replay = replay.filter(|_| {
            self.pool.retrying.retries_answer(status, retry_after)
                && self.others_left(attempt.index)
                && self.another()
        })?;
        // Its body is left unread: its status is all passive health learns of it.
        attempt.in_flight.answer_ended();
        tracing::debug!(pool = %self.pool.plan.name, backend = %self.pool.address(attempt.index), status, "answer retried elsewhere");
        self.retry_elsewhere(attempt.index, ProxyError::UpstreamFailed);
        // It answered: no failure of its own to name.
        self.blamed = None;
        Some(replay)
    }

    /// The answer the client gets came from backend `index`, asked at `sent_at` and answered
    /// at `answered_at` (at layer 4: the connection made): the latency-aware rules learn its
    /// latency, a key's session settles on its backend, and the call ends, with its place
    /// under the adaptive limit (the rest of the answer is the client's time).
    pub fn settled(self, index: usize, sent_at: Instant, answered_at: Instant) {
        let pool = self.pool;
        if self.timed {
            let latency = answered_at.duration_since(sent_at);
            pool.selector.observe(index, latency, self.now());
        }
        if let (Some(sticky), Some(key)) = (&pool.sticky, self.context.key) {
            sticky.settle_key(key, index, &pool.backends);
        }
    }

    /// The backend the client's answer blames for the call's failure: the one that failed
    /// last, unless the failure is not a backend's (every backend at its limit, say).
    pub fn blame(&self) -> Option<Blame> {
        let (index, cause) = self.blamed?;
        self.failure
            .is_backend_fault()
            .then(|| self.pool.blame(index, cause))
    }

    /// What the client gets when no backend answered, counted where the pool keeps it.
    pub fn failure(self) -> ProxyError {
        let me = self.worker;
        if self.failure.is_unreachable() {
            bump(self.pool.unreachable.mine(me));
        }
        if matches!(
            self.failure,
            ProxyError::BackendsAtLimit | ProxyError::QueueFull | ProxyError::QueueTimeout
        ) {
            bump(self.pool.at_limit.mine(me));
        }
        if self.answers {
            self.pool.own_errors.count(self.failure);
        }
        self.failure
    }

    /// Whether a backend other than `index` and those tried could take a retry.
    fn others_left(&self, index: usize) -> bool {
        let mut next = self.context;
        next.tried.insert(index);
        self.pool.backends.available_count(&next) > 0
    }

    /// Whether this try may be followed by another: retries and the budget allow (counted).
    fn another(&mut self) -> bool {
        let granted = self.pool.retrying.another(
            self.attempt,
            self.pool.plan.retries,
            self.worker,
            self.now(),
        );
        self.attempt += 1;
        granted
    }

    fn retry_elsewhere(&mut self, index: usize, failure: ProxyError) {
        self.context.tried.insert(index);
        self.failure = failure;
        self.backing_off = true;
    }

    /// The adaptive limit learns the latency of an answer (or a timeout).
    fn adapt(&self) {
        if let Some(slot) = &self.slot {
            slot.answered(self.now());
        }
    }

    fn now(&self) -> Nanos {
        nanos_since(self.epoch)
    }
}

fn nanos_since(epoch: Instant) -> Nanos {
    epoch.elapsed().as_nanos() as u64
}

/// Marks a request in flight to one backend of one pool for as long as it lives, and tells
/// passive health how its answer's body ended.
pub struct InFlight {
    snapshot: Rc<dyn PoolSet>,
    /// Indexes as `u32`: the mark rides in every answer's body, moved whole at each level an
    /// answer passes.
    pool: u32,
    backend: u32,
    worker: u32,
    /// An answer below 500 whose body passive health has not heard the end of. One dropped
    /// with it unheard (the client went away) is neither a success nor an error.
    answer_pending: bool,
}

impl InFlight {
    /// The backend's answer ended where its framing says (or switched protocols): a success
    /// for passive health, unless its status made it an error already.
    pub fn answer_ended(&mut self) {
        if std::mem::take(&mut self.answer_pending) {
            self.pool().report(self.backend as usize, Outcome::Success);
        }
    }

    /// The backend cut its answer's body short (closed, reset, or broke its framing): a
    /// failure in its counters and, as a lost request is, an error for passive health.
    pub fn answer_cut(&mut self) {
        let pending = std::mem::take(&mut self.answer_pending);
        let (pool, backend) = (self.pool(), self.backend as usize);
        bump(
            &pool.members[backend]
                .counters
                .mine(self.worker as usize)
                .failures,
        );
        tracing::debug!(pool = %pool.plan.name, backend = %pool.address(backend), "answer cut short");
        if pending {
            pool.report(backend, Outcome::Error);
        }
    }

    fn pool(&self) -> &Pool {
        &self.snapshot.pools()[self.pool as usize]
    }
}

impl InFlight {
    fn start(snapshot: &Rc<dyn PoolSet>, pool: usize, backend: usize, worker: usize) -> Self {
        let target = &snapshot.pools()[pool];
        move_alone(&target.members[backend].counters.mine(worker).in_flight, 1);
        if target.tracks_in_flight {
            target.backends.start(backend);
        }
        // Pools, backends and workers number far fewer than 2^32.
        InFlight {
            snapshot: snapshot.clone(),
            pool: pool as u32,
            backend: backend as u32,
            worker: worker as u32,
            answer_pending: false,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (pool, backend) = (self.pool(), self.backend as usize);
        let counters = pool.members[backend].counters.mine(self.worker as usize);
        move_alone(&counters.in_flight, -1);
        if pool.tracks_in_flight {
            pool.backends.finish(backend);
        }
        pool.pending.released();
    }
}
