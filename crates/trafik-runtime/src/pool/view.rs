//! What a pool's rules read of a request, whichever engine parsed it: hash keys and cookie
//! stickiness take a [`RequestView`], which hyper's `http::Request` and the own engine's head
//! (the proxy's `h1::head::HeadView`) both are, and [`Selection`] is what they decide before the
//! pool's first pick.

use std::net::SocketAddr;

use http::HeaderValue;
use trafik_balance::PickContext;

use crate::key::request_key;
use crate::pool::Pool;
use crate::sticky::{Decision, Rebinding};

/// A request's head as the pool's rules read it.
pub trait RequestView {
    /// The values of header field `name` (lowercase), in the order they came.
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]>;
    /// The path, without the query.
    fn path(&self) -> &str;
    fn query(&self) -> Option<&str>;
}

impl<B> RequestView for http::Request<B> {
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.headers()
            .get_all(name)
            .iter()
            .map(HeaderValue::as_bytes)
    }

    fn path(&self) -> &str {
        self.uri().path()
    }

    fn query(&self) -> Option<&str> {
        self.uri().query()
    }
}

/// What the pool's rules take from a request before its first pick: its hash key, and with
/// cookie stickiness the backend its cookie binds it to, or why it gets a new binding. The
/// default is a request the pool reads nothing of.
#[derive(Default)]
pub struct Selection {
    pub context: PickContext,
    pub bound: Option<usize>,
    rebinding: Option<Rebinding>,
}

impl Selection {
    /// Whether the pool's rules read anything of a request (else the default selection will
    /// do, and an engine need not look at the request's fields).
    pub fn reads_request(pool: &Pool) -> bool {
        pool.needs_key() || pool.sticky.as_ref().is_some_and(|s| s.uses_cookie())
    }

    pub fn of(pool: &Pool, request: &impl RequestView, client: SocketAddr) -> Self {
        let mut context = PickContext::default();
        if pool.needs_key()
            && let Some(key) = &pool.plan.hash_key
        {
            context.key = request_key(key, request, client);
        }
        // Cookie stickiness: a bound client skips the rule; another gets a cookie if answered.
        let (bound, rebinding) = match &pool.sticky {
            Some(sticky) if sticky.uses_cookie() => {
                match sticky.decide(request, &pool.backends, &context) {
                    Decision::Bound(index) => (Some(index), None),
                    Decision::Bind(reason) => (None, Some(reason)),
                }
            }
            _ => (None, None),
        };
        Selection {
            context,
            bound,
            rebinding,
        }
    }

    /// Why the client gets a new binding, if it does.
    pub fn rebinding(&self) -> Option<Rebinding> {
        self.rebinding
    }

    /// A connect failed: a client bound by its cookie cannot be reached at its backend, so its
    /// session is lost.
    pub fn connect_failed(&mut self, pool: &Pool) {
        if self.rebinding.is_none() && pool.sticky.as_ref().is_some_and(|s| s.uses_cookie()) {
            self.rebinding = Some(Rebinding::Lost);
        }
    }

    /// The `Set-Cookie` value for an answer from backend `index`, when the client gets a new
    /// binding (counted now, so bindings count what clients actually got).
    pub fn cookie(&self, pool: &Pool, index: usize) -> Option<HeaderValue> {
        pool.sticky.as_ref()?.bind_cookie(index, self.rebinding?)
    }
}
