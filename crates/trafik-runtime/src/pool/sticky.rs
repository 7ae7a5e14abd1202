//! Session stickiness, an overlay on any selection rule: a bound client goes back to its
//! backend while that backend is up; otherwise the pool's rule picks and the client is re-bound,
//! and the lost session is counted.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hmac::{Hmac, KeyInit, Mac};
use http::header::HeaderValue;
use sha2::Sha256;
use trafik_balance::hash::stable_hash;
use trafik_balance::{BackendSet, HashRing, Modulo, PickContext, Selector};

use crate::plan::StickyPlan;
use crate::view::RequestView;

/// Bytes of HMAC-SHA256 kept in a cookie: 128 bits, beyond guessing.
const MAC_BYTES: usize = 16;

/// Key sessions remembered, at most; past it a shard forgets what it holds and its clients
/// count as new once more.
const MAX_REMEMBERED_KEYS: usize = 1 << 20;
const KEY_SHARDS: usize = 64;

/// A pool's stickiness state and counters.
pub struct Sticky {
    binding: Binding,
    /// The stable hash of each backend's identity (its address), as written in cookies and
    /// remembered for key sessions.
    ids: Box<[u64]>,
    pub counters: Arc<SessionCounters>,
    /// For key modes: the backend each key was last served by, so moves are counted once per
    /// session rather than once per request.
    sessions: Arc<KeySessions>,
}

/// What happened to client sessions; kept across reloads.
#[derive(Debug, Default)]
pub struct SessionCounters {
    /// Clients bound to a backend for the first time.
    pub bound: AtomicU64,
    /// Sessions whose backend could not take them any more (down, draining or removed).
    pub lost: AtomicU64,
    /// Clients moved to another backend (each lost session, and cookies naming a backend the
    /// pool no longer has).
    pub rebinds: AtomicU64,
}

/// Key → backend id, sharded by key so workers rarely wait on each other.
struct KeySessions {
    shards: Box<[Mutex<HashMap<u64, u64>>]>,
}

impl KeySessions {
    fn new() -> Self {
        KeySessions {
            shards: (0..KEY_SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Records that `key` was served by `id`; returns the backend it was served by before.
    fn record(&self, key: u64, id: u64) -> Option<u64> {
        let shard = &self.shards[(key % KEY_SHARDS as u64) as usize];
        let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
        if shard.len() >= MAX_REMEMBERED_KEYS / KEY_SHARDS && !shard.contains_key(&key) {
            shard.clear();
        }
        shard.insert(key, id)
    }
}

enum Binding {
    Cookie {
        name: String,
        mac: Hmac<Sha256>,
    },
    /// The key decides the home backend; the rule walks on from it when it is unavailable.
    Modulo,
    Ring(HashRing),
}

/// What stickiness decided before the pool's rule runs.
pub enum Decision {
    /// Send to this backend; the client is already bound to it.
    Bound(usize),
    /// Pick with the pool's rule, then bind the client to the result.
    Bind(Rebinding),
}

/// Why a client is being bound, counted once the binding is actually made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebinding {
    /// A client with no (valid) binding.
    New,
    /// Its backend could not take it: the session is lost.
    Lost,
    /// A well-formed cookie that this pool did not sign (another secret or another pool).
    Foreign,
}

impl Sticky {
    /// Builds the pool's stickiness, keeping the counters and key sessions of `previous` (the
    /// same pool before a reload).
    pub fn new(
        plan: &StickyPlan,
        pool_name: &str,
        backends: &BackendSet,
        previous: Option<&Sticky>,
    ) -> Self {
        let binding = match plan {
            StickyPlan::Cookie { name, secret } => {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
                mac.update(pool_name.as_bytes());
                mac.update(&[0]);
                Binding::Cookie {
                    name: name.clone(),
                    mac,
                }
            }
            StickyPlan::Modulo => Binding::Modulo,
            StickyPlan::Consistent { virtual_nodes } => {
                Binding::Ring(HashRing::new(backends, *virtual_nodes))
            }
        };
        Sticky {
            binding,
            ids: (0..backends.len())
                .map(|i| stable_hash(backends.spec(i).id.as_bytes()))
                .collect(),
            counters: previous.map_or_else(Arc::default, |p| p.counters.clone()),
            sessions: previous.map_or_else(|| Arc::new(KeySessions::new()), |p| p.sessions.clone()),
        }
    }

    /// Whether clients are bound by a cookie trafik sets (rather than by their hash key).
    pub fn uses_cookie(&self) -> bool {
        matches!(self.binding, Binding::Cookie { .. })
    }

    pub fn mode(&self) -> &'static str {
        match &self.binding {
            Binding::Cookie { .. } => "cookie",
            Binding::Modulo => "modulo",
            Binding::Ring(_) => "consistent",
        }
    }

    /// Decides from the request's cookie, for cookie stickiness.
    pub fn decide(
        &self,
        request: &impl RequestView,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Decision {
        let Binding::Cookie { name, mac } = &self.binding else {
            return Decision::Bind(Rebinding::New);
        };
        let Some(value) = find_cookie(request, name) else {
            return Decision::Bind(Rebinding::New);
        };
        match verify(mac, value) {
            Some(id) => match self.ids.iter().position(|&known| known == id) {
                // A draining backend keeps its sessions until they end; only new bindings
                // avoid it.
                Some(index) if backends.is_up(index) && !context.tried.contains(index) => {
                    Decision::Bound(index)
                }
                // Down, or removed by a reload: the session on it is lost.
                _ => Decision::Bind(Rebinding::Lost),
            },
            None if cookie_shape(value) => Decision::Bind(Rebinding::Foreign),
            None => Decision::Bind(Rebinding::New),
        }
    }

    /// For key stickiness: the home backend of the key, or the next one when it is down.
    pub fn pick_by_key(
        &self,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<Option<usize>> {
        match &self.binding {
            Binding::Cookie { .. } => None,
            Binding::Modulo => Some(Modulo.pick(backends, context)),
            Binding::Ring(ring) => Some(ring.pick(backends, context)),
        }
    }

    /// [`Self::pick_by_key`] told with its reason, taking nothing.
    pub fn explain_by_key(
        &self,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<trafik_balance::Explained> {
        match &self.binding {
            Binding::Cookie { .. } => None,
            Binding::Modulo => Some(Modulo.explain(backends, context)),
            Binding::Ring(ring) => Some(ring.explain(backends, context)),
        }
    }

    /// Records that backend `index` answered a request of a key-sticky client; a key seen for
    /// the first time is a new binding, a key that moved is a rebinding (and a lost session when
    /// its previous backend could not take it).
    pub fn settle_key(&self, key: u64, index: usize, backends: &BackendSet) {
        if self.uses_cookie() {
            return;
        }
        let id = self.ids[index];
        match self.sessions.record(key, id) {
            None => count(&self.counters.bound),
            Some(before) if before == id => {}
            Some(before) => {
                let still_available = self
                    .ids
                    .iter()
                    .position(|&known| known == before)
                    .is_some_and(|old| backends.is_up(old) && !backends.is_draining(old));
                if !still_available {
                    count(&self.counters.lost);
                }
                count(&self.counters.rebinds);
            }
        }
    }

    /// The `Set-Cookie` value that binds a client to backend `index`, counting the binding: the
    /// cookie is only made for a response that is about to be sent.
    pub fn bind_cookie(&self, index: usize, reason: Rebinding) -> Option<HeaderValue> {
        let Binding::Cookie { name, mac } = &self.binding else {
            return None;
        };
        match reason {
            Rebinding::New => count(&self.counters.bound),
            Rebinding::Lost => {
                count(&self.counters.lost);
                count(&self.counters.rebinds);
            }
            Rebinding::Foreign => count(&self.counters.rebinds),
        }
        let id = self.ids[index];
        let mut text = String::with_capacity(name.len() + 90);
        let _ = write!(text, "{name}={id:016x}");
        for byte in signature(mac, id) {
            let _ = write!(text, "{byte:02x}");
        }
        text.push_str("; Path=/; HttpOnly; SameSite=Lax");
        HeaderValue::from_str(&text).ok()
    }
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn signature(mac: &Hmac<Sha256>, id: u64) -> [u8; MAC_BYTES] {
    let mut mac = mac.clone();
    mac.update(&id.to_be_bytes());
    let full = mac.finalize().into_bytes();
    let mut out = [0; MAC_BYTES];
    out.copy_from_slice(&full[..MAC_BYTES]);
    out
}

/// 16 hex digits of backend id, then the signature in hex.
fn cookie_shape(value: &str) -> bool {
    value.len() == 16 + 2 * MAC_BYTES && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The backend id a cookie names, if its signature is valid.
fn verify(mac: &Hmac<Sha256>, value: &str) -> Option<u64> {
    if !cookie_shape(value) {
        return None;
    }
    let id = u64::from_str_radix(&value[..16], 16).ok()?;
    let mut given = [0u8; MAC_BYTES];
    for (i, byte) in given.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&value[16 + 2 * i..18 + 2 * i], 16).ok()?;
    }
    let mut check = mac.clone();
    check.update(&id.to_be_bytes());
    check.verify_truncated_left(&given).ok()?;
    Some(id)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn find_cookie<'a>(request: &'a impl RequestView, name: &str) -> Option<&'a str> {
    request
        .header_values("cookie")
        .filter_map(visible_ascii)
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A header value as text when it is visible ASCII (as `HeaderValue::to_str` takes it).
fn visible_ascii(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trafik_balance::BackendSpec;

    fn backends() -> BackendSet {
        BackendSet::new((1..=3).map(|i| BackendSpec {
            id: format!("127.0.0.1:808{i}"),
            weight: 1,
        }))
    }

    fn cookie_sticky(secret: &[u8]) -> Sticky {
        let plan = StickyPlan::Cookie {
            name: "trafik".into(),
            secret: secret.to_vec(),
        };
        Sticky::new(&plan, "takip", &backends(), None)
    }

    fn request_with(cookie: &HeaderValue) -> http::Request<()> {
        let pair = cookie.to_str().unwrap().split(';').next().unwrap();
        let mut request = http::Request::new(());
        request.headers_mut().insert(
            http::header::COOKIE,
            HeaderValue::from_str(&format!("a=1; {pair}")).unwrap(),
        );
        request
    }

    #[test]
    fn a_signed_cookie_returns_the_client_to_its_backend() {
        let sticky = cookie_sticky(b"secret");
        let set = backends();
        let cookie = sticky.bind_cookie(2, Rebinding::New).unwrap();
        assert!(
            cookie
                .to_str()
                .unwrap()
                .ends_with("; Path=/; HttpOnly; SameSite=Lax")
        );
        match sticky.decide(&request_with(&cookie), &set, &PickContext::default()) {
            Decision::Bound(index) => assert_eq!(index, 2),
            Decision::Bind(_) => panic!("a valid cookie must bind"),
        }
        // Draining does not break an existing session.
        set.set_draining(2, true);
        assert!(matches!(
            sticky.decide(&request_with(&cookie), &set, &PickContext::default()),
            Decision::Bound(2)
        ));
    }

    #[test]
    fn a_forged_or_foreign_cookie_is_not_trusted() {
        let sticky = cookie_sticky(b"secret");
        let other = cookie_sticky(b"another secret");
        let set = backends();
        let foreign = other.bind_cookie(1, Rebinding::New).unwrap();
        assert!(matches!(
            sticky.decide(&request_with(&foreign), &set, &PickContext::default()),
            Decision::Bind(Rebinding::Foreign)
        ));
        let mut tampered = sticky
            .bind_cookie(1, Rebinding::New)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        tampered.replace_range(10..11, if &tampered[10..11] == "0" { "1" } else { "0" });
        let tampered = HeaderValue::from_str(&tampered).unwrap();
        assert!(matches!(
            sticky.decide(&request_with(&tampered), &set, &PickContext::default()),
            Decision::Bind(Rebinding::Foreign)
        ));
    }

    #[test]
    fn a_cookie_for_a_down_backend_counts_a_lost_session() {
        let sticky = cookie_sticky(b"secret");
        let set = backends();
        let cookie = sticky.bind_cookie(0, Rebinding::New).unwrap();
        set.set_up(0, false);
        assert!(matches!(
            sticky.decide(&request_with(&cookie), &set, &PickContext::default()),
            Decision::Bind(Rebinding::Lost)
        ));
        sticky.bind_cookie(1, Rebinding::Lost);
        let counters = &sticky.counters;
        assert_eq!(counters.lost.load(Ordering::Relaxed), 1);
        assert_eq!(counters.rebinds.load(Ordering::Relaxed), 1);
        assert_eq!(
            counters.bound.load(Ordering::Relaxed),
            1,
            "only the first cookie"
        );
    }

    #[test]
    fn garbage_cookies_are_new_clients_and_never_panic() {
        let sticky = cookie_sticky(b"secret");
        let set = backends();
        for junk in [
            "",
            "zz",
            "ééé",
            "0123456789abcdef0123456789abcdef0123456789abcdeg",
        ] {
            let mut request = http::Request::new(());
            request.headers_mut().insert(
                http::header::COOKIE,
                HeaderValue::from_str(&format!("trafik={junk}"))
                    .unwrap_or(HeaderValue::from_static("x")),
            );
            assert!(matches!(
                sticky.decide(&request, &set, &PickContext::default()),
                Decision::Bind(_)
            ));
        }
    }
}
