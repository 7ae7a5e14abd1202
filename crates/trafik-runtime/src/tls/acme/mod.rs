//! Certificates ordered with ACME (`[[listener.tls]] acme = { … }`): what the data plane needs of
//! them. A [`Managed`] certificate is served from a slot the ordering task swaps when a new one
//! arrives, so TLS listeners pick it up at their next handshake, without a reload. Pending
//! challenges are kept here for the listeners that answer them: HTTP-01 by any plain listener
//! (on [`CHALLENGE_PATH`], before routing), TLS-ALPN-01 by the TLS listener (`acme-tls/1`).
//!
//! Managed certificates and challenges belong to the process, not to one configuration: a
//! reload that keeps a certificate's settings keeps serving (and renewing) the same one, so they
//! live in one [`registry`]. [`manager`] orders and renews them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use rustls::sign::CertifiedKey;
use tokio::sync::{Notify, Semaphore};
use trafik_etcd::Etcd;

use super::Certificate;

pub mod manager;

/// Where HTTP-01 challenges are asked for (RFC 8555 §8.3).
pub const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// How the CA checks that we control a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChallengeKind {
    /// A plain-HTTP request for `/.well-known/acme-challenge/TOKEN` on port 80.
    Http01,
    /// A TLS handshake offering only `acme-tls/1` on port 443.
    TlsAlpn01,
}

impl ChallengeKind {
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// What to order and where: one `acme = { … }` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AcmeSpec {
    /// The DNS names of the certificate, in lower case; the first names it in logs.
    pub domains: Vec<String>,
    /// The CA's directory URL.
    pub directory: String,
    /// A CA certificate (PEM file) the directory's own HTTPS is verified with, instead of the
    /// system's roots (a private or test CA such as pebble).
    pub directory_ca: Option<PathBuf>,
    /// The account's contact.
    pub email: Option<String>,
    pub challenge: ChallengeKind,
    /// Where the account key and certificates are kept (a directory; etcd in a fleet).
    pub storage: PathBuf,
}

/// A certificate that orders and renews itself, and what `/status` tells of it.
#[derive(Debug)]
pub struct Managed {
    pub spec: AcmeSpec,
    current: ArcSwapOption<Certificate>,
    state: Mutex<ManagedState>,
    /// Woken by `trafik cert renew` (the admin API).
    renew: Notify,
    /// Part of the configuration being served ([`Registry::keep_only`]): only such a
    /// certificate is ordered, shown and renewed on demand.
    in_force: AtomicBool,
    /// Dropped from the configuration by a reload: its manager stops.
    retired: AtomicBool,
    /// Its manager has been started (once per certificate).
    managed: AtomicBool,
}

/// The story of a managed certificate so far.
#[derive(Clone, Debug, Default)]
pub struct ManagedState {
    /// The served certificate's validity.
    pub not_before: Option<SystemTime>,
    pub not_after: Option<SystemTime>,
    /// When the next order is due.
    pub renew_at: Option<SystemTime>,
    /// The last failed order's error, cleared by a success.
    pub last_error: Option<String>,
    pub last_error_at: Option<SystemTime>,
    /// Certificates served since start: ordered here, or taken from the store (another fleet
    /// instance's order, or one kept from an earlier run).
    pub renewals: u64,
    /// Of those, the ones this instance ordered.
    pub ordered: u64,
    /// Orders that failed since start.
    pub failures: u64,
    /// Failures in a row, for the backoff.
    pub failing: u32,
}

impl Managed {
    pub fn new(spec: AcmeSpec) -> Managed {
        Managed {
            spec,
            current: ArcSwapOption::empty(),
            state: Mutex::new(ManagedState::default()),
            renew: Notify::new(),
            in_force: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            managed: AtomicBool::new(false),
        }
    }

    /// True the first time only: whoever gets it starts the certificate's manager.
    pub fn take_management(&self) -> bool {
        !self.managed.swap(true, Ordering::Relaxed)
    }

    /// A reload dropped it (or changed its settings, which makes another): its manager stops.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// The certificate served now, if one was obtained.
    pub fn current(&self) -> Option<Arc<Certificate>> {
        self.current.load_full()
    }

    /// Serves `certificate` from the next handshake on, valid from `not_before` to `not_after`;
    /// `ordered` when this instance ordered it.
    pub fn install(
        &self,
        certificate: Certificate,
        (not_before, not_after): (SystemTime, SystemTime),
        ordered: bool,
    ) {
        self.current.store(Some(Arc::new(certificate)));
        let mut state = self.state();
        state.not_before = Some(not_before);
        state.not_after = Some(not_after);
        state.renew_at = Some(renew_at(not_before, not_after));
        state.renewals += 1;
        state.ordered += u64::from(ordered);
        state.failing = 0;
        state.last_error = None;
    }

    /// Notes a failed order; the certificate served, if any, stays. Returns the wait before the
    /// next attempt.
    pub fn failed(&self, error: String, now: SystemTime) -> Duration {
        let mut state = self.state();
        state.failures += 1;
        state.failing = state.failing.saturating_add(1);
        state.last_error = Some(error);
        state.last_error_at = Some(now);
        retry_after(state.failing)
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, ManagedState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks for a new certificate now, whatever its age.
    pub fn request_renewal(&self) {
        self.renew.notify_one();
    }

    /// Resolves when a renewal is asked for.
    pub async fn renewal_requested(&self) {
        self.renew.notified().await
    }

    /// The certificate this entry serves for `name`, if it names it.
    pub fn serves(&self, name: &str) -> bool {
        self.spec
            .domains
            .iter()
            .any(|domain| domain.eq_ignore_ascii_case(name))
    }
}

/// The TLS-ALPN-01 certificate for `domain` (RFC 8737 §3): self-signed, naming it, with the
/// key authorization's SHA-256 `digest` in the critical acmeIdentifier extension. WebPKI refuses
/// to parse that extension, so the pair is not checked the way a served certificate is: trafik
/// made both halves itself.
pub fn alpn_certificate(domain: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let failed = |e: rcgen::Error| format!("the TLS-ALPN-01 certificate cannot be made: {e}");
    let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()]).map_err(failed)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let certificate = params.self_signed(&key).map_err(failed)?;
    let pkcs8 = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
    let signing = super::provider()
        .key_provider
        .load_private_key(pkcs8.into())
        .map_err(|e| format!("the challenge key cannot be used: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![certificate.der().clone()],
        signing,
    )))
}

/// When a certificate valid from `not_before` to `not_after` is renewed: at two thirds of its
/// life, so a third is left for retries (Let's Encrypt's own advice for 90-day certificates).
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let life = not_after.duration_since(not_before).unwrap_or_default();
    not_before + life * 2 / 3
}

/// The wait after `failing` failures in a row: 5 s doubled each time, at most an hour.
pub fn retry_after(failing: u32) -> Duration {
    let doubled = 5u64.saturating_mul(1u64 << failing.saturating_sub(1).min(10));
    Duration::from_secs(doubled.min(3600))
}

/// A fleet's etcd and key prefix, where each instance publishes the challenges it offers, so
/// whichever instance the CA's validation reaches can answer it.
#[derive(Clone)]
pub struct SharedChallenges {
    pub etcd: Etcd,
    pub prefix: String,
    /// Turns for asking etcd for a challenge pending elsewhere, shared by the instance.
    lookups: Arc<Semaphore>,
}

/// The most etcd lookups of challenges pending elsewhere at once. Anyone may ask for a
/// well-formed token and each lookup is a connection to etcd; past it a request waits its turn
/// for at most [`SHARED_LOOKUP_WAIT`] (a CA's validation in a flood of junk tokens still gets
/// through, as lookups take milliseconds), then is answered as an unknown token.
pub const SHARED_LOOKUPS_AT_ONCE: usize = 8;

/// How long a challenge request waits for a lookup turn.
const SHARED_LOOKUP_WAIT: Duration = Duration::from_secs(2);

impl SharedChallenges {
    pub fn new(etcd: Etcd, prefix: String) -> SharedChallenges {
        SharedChallenges {
            etcd,
            prefix,
            lookups: Arc::new(Semaphore::new(SHARED_LOOKUPS_AT_ONCE)),
        }
    }

    /// Where an HTTP-01 token's key authorization is published.
    pub fn http_key(&self, token: &str) -> String {
        format!("{}acme/challenges/{token}", self.prefix)
    }

    /// Where the key authorization digest of a TLS-ALPN-01 challenge for `domain` is published.
    pub fn alpn_key(&self, domain: &str) -> String {
        format!(
            "{}acme/alpn-challenges/{}",
            self.prefix,
            domain.to_ascii_lowercase()
        )
    }

    async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let _turn = tokio::time::timeout(SHARED_LOOKUP_WAIT, self.lookups.acquire())
            .await
            .ok()?
            .ok()?;
        Some(self.etcd.get(key).await.ok()??.value)
    }
}

/// The process's managed certificates and pending challenges.
#[derive(Default)]
pub struct Registry {
    shared: Mutex<Option<SharedChallenges>>,
    managed: Mutex<HashMap<AcmeSpec, Arc<Managed>>>,
    /// HTTP-01: token → key authorization.
    http: Mutex<HashMap<String, String>>,
    /// TLS-ALPN-01: domain (lower case) → the challenge certificate.
    alpn: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

/// The one registry of this process.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Registry {
    /// The managed certificate of `spec`: the one already known (kept across reloads), or a new
    /// one, `fresh` says which.
    pub fn managed(&self, spec: AcmeSpec) -> (Arc<Managed>, bool) {
        let mut managed = locked(&self.managed);
        if let Some(known) = managed.get(&spec) {
            return (known.clone(), false);
        }
        let made = Arc::new(Managed::new(spec.clone()));
        managed.insert(spec, made.clone());
        (made, true)
    }

    /// Makes `in_force` the managed certificates of the configuration being served (at start
    /// and after each reload that took): they are ordered, renewed and shown. Every other one
    /// is forgotten and its manager stops: a reload that removed or changed `acme` (a new
    /// challenge makes another certificate), or one refused after its check had made some.
    pub fn keep_only(&self, in_force: &[Arc<Managed>]) {
        let mut managed = locked(&self.managed);
        managed.retain(|_, known| {
            let kept = in_force.iter().any(|m| Arc::ptr_eq(m, known));
            known.in_force.store(kept, Ordering::Relaxed);
            known.retired.store(!kept, Ordering::Relaxed);
            kept
        });
    }

    /// Every managed certificate of the configuration being served, by domains.
    pub fn all(&self) -> Vec<Arc<Managed>> {
        let mut all: Vec<_> = locked(&self.managed)
            .values()
            .filter(|managed| managed.in_force.load(Ordering::Relaxed))
            .cloned()
            .collect();
        all.sort_by(|a, b| a.spec.domains.cmp(&b.spec.domains));
        all
    }

    pub fn offer_http(&self, token: &str, key_authorization: &str) {
        locked(&self.http).insert(token.to_owned(), key_authorization.to_owned());
    }

    pub fn withdraw_http(&self, token: &str) {
        locked(&self.http).remove(token);
    }

    /// The answer to an HTTP-01 request for `path`, when it asks for a token pending here.
    pub fn answer_http(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(CHALLENGE_PATH)?;
        locked(&self.http).get(token).cloned()
    }

    /// In a fleet, where challenges pending at other instances are asked for.
    pub fn share_through(&self, shared: SharedChallenges) {
        *locked(&self.shared) = Some(shared);
    }

    /// The answer to an HTTP-01 request for `path`: pending here, or (in a fleet) at the
    /// instance ordering. Only a well-formed token (base64url, RFC 8555 §8.1) is asked for.
    pub async fn answer_http_anywhere(&self, path: &str) -> Option<String> {
        if let Some(here) = self.answer_http(path) {
            return Some(here);
        }
        let token = path.strip_prefix(CHALLENGE_PATH)?;
        let well_formed = !token.is_empty()
            && token.len() <= 128
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let shared = locked(&self.shared).clone().filter(|_| well_formed)?;
        String::from_utf8(shared.get(&shared.http_key(token)).await?).ok()
    }

    pub fn offer_alpn(&self, domain: &str, key: Arc<CertifiedKey>) {
        locked(&self.alpn).insert(domain.to_ascii_lowercase(), key);
    }

    pub fn withdraw_alpn(&self, domain: &str) {
        locked(&self.alpn).remove(&domain.to_ascii_lowercase());
    }

    /// The TLS-ALPN-01 certificate for `domain`, while its challenge is pending here.
    pub fn answer_alpn(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
        locked(&self.alpn)
            .get(&domain.to_ascii_lowercase())
            .cloned()
    }

    /// The TLS-ALPN-01 certificate for `domain`: pending here, or (in a fleet) made from the
    /// digest the instance ordering published. Only a name of a managed certificate is asked
    /// for, not whatever a client's hello names.
    pub async fn answer_alpn_anywhere(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
        if let Some(here) = self.answer_alpn(domain) {
            return Some(here);
        }
        let managed = locked(&self.managed).values().any(|m| m.serves(domain));
        let shared = locked(&self.shared).clone().filter(|_| managed)?;
        let digest = shared.get(&shared.alpn_key(domain)).await?;
        // A SHA-256 digest (RFC 8737 §3).
        if digest.len() != 32 {
            return None;
        }
        match alpn_certificate(domain, &digest) {
            Ok(key) => Some(key),
            Err(error) => {
                tracing::warn!(%domain, %error, "no TLS-ALPN-01 answer");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probe finding: in a fleet, every request for a well-formed token nobody here offered
    /// opened a connection to etcd, so a flood of them was a flood on etcd. At most
    /// [`SHARED_LOOKUPS_AT_ONCE`] are asked at once; the others wait their turn, briefly.
    #[tokio::test]
    async fn a_flood_of_unknown_tokens_asks_etcd_a_few_at_a_time() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // An etcd that takes connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let etcd = Etcd::new(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counting = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        let registry = Arc::new(Registry::default());
        registry.share_through(SharedChallenges::new(etcd, "/t/".into()));
        let asked: Vec<_> = (0..3 * SHARED_LOOKUPS_AT_ONCE)
            .map(|n| {
                let registry = registry.clone();
                tokio::spawn(async move {
                    let path = format!("{CHALLENGE_PATH}token{n}");
                    registry.answer_http_anywhere(&path).await
                })
            })
            .collect();
        for answer in asked {
            assert_eq!(answer.await.unwrap(), None);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), SHARED_LOOKUPS_AT_ONCE);
    }

    #[test]
    fn renewal_is_due_at_two_thirds_of_the_life() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let end = start + Duration::from_secs(90 * 86_400);
        assert_eq!(
            renew_at(start, end),
            start + Duration::from_secs(60 * 86_400)
        );
        // A certificate that ends before it begins is due at once.
        assert_eq!(renew_at(end, start), end);
    }

    #[test]
    fn retries_back_off_to_an_hour() {
        let waits: Vec<u64> = (1..=12).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(&waits[..5], &[5, 10, 20, 40, 80]);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(retry_after(40).as_secs(), 3600);
    }

    #[test]
    fn a_challenge_is_answered_only_while_pending() {
        let registry = Registry::default();
        let path = format!("{CHALLENGE_PATH}tok3n");
        assert_eq!(registry.answer_http(&path), None);
        registry.offer_http("tok3n", "tok3n.thumb");
        assert_eq!(registry.answer_http(&path).as_deref(), Some("tok3n.thumb"));
        assert_eq!(registry.answer_http("/tok3n"), None);
        registry.withdraw_http("tok3n");
        assert_eq!(registry.answer_http(&path), None);
    }
}
