//! Session stickiness, an overlay on any selection rule: a bound client goes back to its
//! backend while that backend is up; otherwise the pool's rule picks and the client is re-bound,
//! and the lost session is counted.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use http::header::{self, HeaderMap, HeaderValue};
use sha2::Sha256;
use trafik_balance::hash::stable_hash;
use trafik_balance::{BackendSet, HashRing, Modulo, PickContext, Selector};

use crate::plan::StickyPlan;

/// Bytes of HMAC-SHA256 kept in a cookie: 128 bits, beyond guessing.
const MAC_BYTES: usize = 16;

/// A pool's stickiness state and counters.
pub struct Sticky {
    binding: Binding,
    /// Clients bound for the first time (a cookie issued to a client that had none).
    pub bound: AtomicU64,
    /// Requests whose bound backend was down: the session on it is lost.
    pub lost: AtomicU64,
    /// Clients moved to another backend (each lost session, and cookies naming a backend
    /// the pool no longer has).
    pub rebinds: AtomicU64,
}

enum Binding {
    Cookie {
        name: String,
        mac: Hmac<Sha256>,
        /// The stable hash of each backend's identity, as written in cookies.
        ids: Box<[u64]>,
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
    Bind,
}

impl Sticky {
    pub fn new(plan: &StickyPlan, pool_name: &str, backends: &BackendSet) -> Self {
        let binding = match plan {
            StickyPlan::Cookie { name, secret } => {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
                mac.update(pool_name.as_bytes());
                mac.update(&[0]);
                Binding::Cookie {
                    name: name.clone(),
                    mac,
                    ids: (0..backends.len())
                        .map(|i| stable_hash(backends.spec(i).id.as_bytes()))
                        .collect(),
                }
            }
            StickyPlan::Modulo => Binding::Modulo,
            StickyPlan::Consistent { virtual_nodes } => {
                Binding::Ring(HashRing::new(backends, *virtual_nodes))
            }
        };
        Sticky {
            binding,
            bound: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            rebinds: AtomicU64::new(0),
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
        headers: &HeaderMap,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Decision {
        let Binding::Cookie { name, mac, ids } = &self.binding else {
            return Decision::Bind;
        };
        let Some(value) = find_cookie(headers, name) else {
            count(&self.bound);
            return Decision::Bind;
        };
        match verify(mac, ids, value) {
            // A draining backend keeps its sessions until they end; only new bindings avoid it.
            Some(index) if backends.is_up(index) && !context.tried.contains(index) => {
                Decision::Bound(index)
            }
            Some(_) => {
                count(&self.lost);
                count(&self.rebinds);
                Decision::Bind
            }
            None if cookie_shape(value) => {
                // Well formed but unknown: signed for a backend this pool no longer has, or
                // with another secret. The client is re-bound.
                count(&self.rebinds);
                Decision::Bind
            }
            None => {
                count(&self.bound);
                Decision::Bind
            }
        }
    }

    /// For key stickiness: the home backend of the key, or the next one when it is down.
    pub fn pick_by_key(
        &self,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<Option<usize>> {
        let key = context.key;
        let (chosen, home) = match &self.binding {
            Binding::Cookie { .. } => return None,
            Binding::Modulo => (
                Modulo.pick(backends, context),
                key.map(|k| (k % backends.len().max(1) as u64) as usize),
            ),
            Binding::Ring(ring) => (
                ring.pick(backends, context),
                key.and_then(|k| ring.owner(k)),
            ),
        };
        if home.is_some() && chosen.is_some() && chosen != home {
            count(&self.lost);
            count(&self.rebinds);
        }
        Some(chosen)
    }

    /// Counts a session lost because its bound backend could not be reached during the request;
    /// returns whether the client should now get a new cookie.
    pub fn lose_session(&self) -> bool {
        if !self.uses_cookie() {
            return false;
        }
        count(&self.lost);
        count(&self.rebinds);
        true
    }

    /// The `Set-Cookie` value that binds a client to backend `index`.
    pub fn cookie_for(&self, index: usize) -> Option<HeaderValue> {
        let Binding::Cookie { name, mac, ids } = &self.binding else {
            return None;
        };
        let id = ids[index];
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

/// The backend a cookie names, if its signature is valid and the pool has that backend.
fn verify(mac: &Hmac<Sha256>, ids: &[u64], value: &str) -> Option<usize> {
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
    ids.iter().position(|&known| known == id)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn find_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
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
        Sticky::new(&plan, "takip", &backends())
    }

    fn request_with(cookie: &HeaderValue) -> HeaderMap {
        let pair = cookie.to_str().unwrap().split(';').next().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=1; {pair}")).unwrap(),
        );
        headers
    }

    #[test]
    fn a_signed_cookie_returns_the_client_to_its_backend() {
        let sticky = cookie_sticky(b"secret");
        let set = backends();
        let cookie = sticky.cookie_for(2).unwrap();
        assert!(
            cookie
                .to_str()
                .unwrap()
                .ends_with("; Path=/; HttpOnly; SameSite=Lax")
        );
        match sticky.decide(&request_with(&cookie), &set, &PickContext::default()) {
            Decision::Bound(index) => assert_eq!(index, 2),
            Decision::Bind => panic!("a valid cookie must bind"),
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
        let foreign = other.cookie_for(1).unwrap();
        assert!(matches!(
            sticky.decide(&request_with(&foreign), &set, &PickContext::default()),
            Decision::Bind
        ));
        let mut tampered = sticky.cookie_for(1).unwrap().to_str().unwrap().to_owned();
        tampered.replace_range(10..11, if &tampered[10..11] == "0" { "1" } else { "0" });
        let tampered = HeaderValue::from_str(&tampered).unwrap();
        assert!(matches!(
            sticky.decide(&request_with(&tampered), &set, &PickContext::default()),
            Decision::Bind
        ));
        assert_eq!(sticky.rebinds.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_cookie_for_a_down_backend_counts_a_lost_session() {
        let sticky = cookie_sticky(b"secret");
        let set = backends();
        let cookie = sticky.cookie_for(0).unwrap();
        set.set_up(0, false);
        assert!(matches!(
            sticky.decide(&request_with(&cookie), &set, &PickContext::default()),
            Decision::Bind
        ));
        assert_eq!(sticky.lost.load(Ordering::Relaxed), 1);
        assert_eq!(sticky.bound.load(Ordering::Relaxed), 0);
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
            let mut headers = HeaderMap::new();
            headers.insert(
                header::COOKIE,
                HeaderValue::from_str(&format!("trafik={junk}"))
                    .unwrap_or(HeaderValue::from_static("x")),
            );
            assert!(matches!(
                sticky.decide(&headers, &set, &PickContext::default()),
                Decision::Bind
            ));
        }
    }
}
