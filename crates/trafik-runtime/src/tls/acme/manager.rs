//! Orders and renews the certificates of `[[listener.tls]] acme = { … }` (RFC 8555, with
//! instant-acme), beside the serving proxy on its control runtime ([`supervise`], spawned by
//! `trafik serve` with the [`Store`] its mode calls for).
//!
//! For each managed certificate: serve what is stored if it is still valid, else order one at
//! start; order again at two thirds of its life or when `trafik cert renew` asks; a failed order
//! leaves the served certificate alone and is retried with backoff. A new certificate is stored,
//! then swapped into the TLS listeners' resolver ([`Managed::install`]) without a reload.
//!
//! In a fleet (`serve --etcd`) the certificate, its key and the account live in etcd, and an
//! order is made under a lock (a key created only if absent, bound to a lease): one instance
//! orders, the others take the stored certificate. The challenges' answers go through etcd too
//! (HTTP-01's key authorization, TLS-ALPN-01's digest), so whichever instance the CA reaches can
//! give them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use trafik_etcd::Etcd;

use super::{AcmeSpec, ChallengeKind, Managed, SharedChallenges, alpn_certificate, registry};
use crate::tls::Certificate;

/// How often the supervisor looks for certificates a reload added.
const NEW_CERTIFICATES: Duration = Duration::from_secs(1);
/// How often a fleet instance looks for a certificate another instance stored.
const FLEET_POLL: Duration = Duration::from_secs(2);
/// How long a fleet's order lock outlives its holder.
const LOCK_TTL: Duration = Duration::from_secs(30);
/// How long the CA may take to check the challenges and to issue.
const ORDER_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest one attempt (account, order, challenges, certificate) may take: the ACME
/// client bounds the waits between its polls, not a request the CA never answers.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where certificates, keys and accounts are kept.
#[derive(Clone)]
pub enum Store {
    /// Each certificate's `storage` folder.
    Folder,
    /// A fleet's etcd, under `prefix`; `holder` names this instance in the order lock.
    Etcd {
        etcd: Etcd,
        prefix: String,
        holder: String,
    },
}

/// Starts a manager for every managed certificate in force, now and whenever a reload adds
/// one (a manager stops when a reload retires its certificate).
pub async fn supervise(store: Store) {
    if let Some(shared) = store.shared() {
        registry().share_through(shared);
    }
    loop {
        for managed in registry().all() {
            if managed.take_management() {
                tokio::spawn(manage(managed, store.clone()));
            }
        }
        tokio::time::sleep(NEW_CERTIFICATES).await;
    }
}

/// What a wake-up of the manager is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    /// Nothing due: a fleet instance looks for what another one stored.
    Look,
    /// No valid certificate, or two thirds of its life are over.
    Due,
    /// `trafik cert renew`.
    Asked,
}

async fn manage(managed: Arc<Managed>, store: Store) {
    let label = managed.spec.domains.join(",");
    if let Err(error) = take_stored(&managed, &store).await {
        tracing::warn!(certificate = %label, %error, "stored certificate not used");
    }
    let mut wait = Duration::ZERO;
    // A renewal `trafik cert renew` asked for stays asked for until one succeeds: its retries
    // order again, as those of an order at start do (the certificate shows as failing
    // meanwhile, which only a success ends).
    let mut still_asked = false;
    loop {
        if managed.is_retired() {
            tracing::info!(certificate = %label, "no longer configured; not renewed");
            return;
        }
        let asked = tokio::select! {
            () = tokio::time::sleep(wait) => still_asked,
            () = managed.renewal_requested() => true,
        };
        let reason = match (asked, due(&managed)) {
            (true, _) => Reason::Asked,
            (false, true) => Reason::Due,
            (false, false) => Reason::Look,
        };
        let (for_attempt, in_store) = (managed.clone(), store.clone());
        let attempted = bounded(ATTEMPT_TIMEOUT, async move {
            attempt(&for_attempt, &in_store, reason).await
        });
        let outcome = attempted.await;
        // Busy: another fleet instance is ordering, and its certificate will do.
        still_asked = reason == Reason::Asked && matches!(outcome, Err(Attempt::Failed(_)));
        wait = match outcome {
            Ok(()) => next_wake(&managed, &store),
            Err(Attempt::Busy) => FLEET_POLL,
            Err(Attempt::Failed(error)) => {
                let retry = managed.failed(error.clone(), SystemTime::now());
                tracing::error!(certificate = %label, %error, retry_in = ?retry, "ACME order failed; the served certificate stays");
                retry
            }
        };
    }
}

/// Whether a new certificate is needed: none served, or its renewal time has come.
fn due(managed: &Managed) -> bool {
    let renew_at = managed.state().renew_at;
    managed.current().is_none() || renew_at.is_none_or(|at| at <= SystemTime::now())
}

/// The time to the renewal (in a fleet, at most the time to the next look at the store).
fn next_wake(managed: &Managed, store: &Store) -> Duration {
    let until = managed
        .state()
        .renew_at
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
        .unwrap_or_default();
    match store {
        // The renewal time is on the wall clock, which may jump (a suspended machine, a
        // corrected clock): it is read again at least hourly.
        Store::Folder => until.min(Duration::from_secs(3600)),
        Store::Etcd { .. } => until.min(FLEET_POLL),
    }
}

enum Attempt {
    /// Another fleet instance holds the order lock.
    Busy,
    Failed(String),
}

impl From<String> for Attempt {
    fn from(error: String) -> Attempt {
        Attempt::Failed(error)
    }
}

/// Runs one attempt in a task of its own for at most `timeout` ([`ATTEMPT_TIMEOUT`]): a CA that stops
/// answering, or a panic in the ACME client (instant-acme adds a CA's `Retry-After` to the
/// clock unchecked), ends it as a failed attempt, retried with backoff, never the manager. The
/// attempt's order lock goes with its task ([`Lock`]'s `Drop`).
async fn bounded<F>(timeout: Duration, attempt: F) -> Result<(), Attempt>
where
    F: Future<Output = Result<(), Attempt>> + Send + 'static,
{
    let mut task = tokio::spawn(attempt);
    match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(result)) => result,
        Ok(Err(stopped)) => Err(Attempt::Failed(format!(
            "the ACME order stopped: {stopped}"
        ))),
        Err(_) => {
            task.abort();
            Err(Attempt::Failed(format!(
                "the CA did not finish the order within {} s",
                timeout.as_secs()
            )))
        }
    }
}

async fn attempt(managed: &Managed, store: &Store, reason: Reason) -> Result<(), Attempt> {
    // What another instance stored (or an earlier run) may be newer than what is served.
    if reason != Reason::Asked && take_stored(managed, store).await? && !due(managed) {
        return Ok(());
    }
    if reason == Reason::Look {
        return Ok(());
    }
    let lock = store.lock(&managed.spec).await?.ok_or(Attempt::Busy)?;
    let result = async {
        // The lock's previous holder may have just stored a fresh one.
        if reason == Reason::Due && take_stored(managed, store).await? && !due(managed) {
            return Ok(());
        }
        let account = account(&managed.spec, store).await?;
        let (chain, key) = order(&managed.spec, &account, store).await?;
        let validity = install(managed, true, &chain, &key)?;
        store.save_certificate(&managed.spec, &chain, &key).await?;
        tracing::info!(
            certificate = %managed.spec.domains.join(","),
            not_after = %humantime::format_rfc3339_seconds(validity.1),
            "ACME certificate obtained and served"
        );
        Ok(())
    }
    .await;
    store.unlock(lock).await;
    result.map_err(Attempt::Failed)
}

/// Serves the stored certificate when it is valid and not the one served; true when it did.
async fn take_stored(managed: &Managed, store: &Store) -> Result<bool, String> {
    let Some((chain, key)) = store.load_certificate(&managed.spec).await? else {
        return Ok(false);
    };
    let stored_until = validity(&chain)?.1;
    let served_until = managed.state().not_after;
    if stored_until <= SystemTime::now() || served_until.is_some_and(|t| t >= stored_until) {
        return Ok(false);
    }
    install(managed, false, &chain, &key)?;
    Ok(true)
}

/// Checks the chain and key and serves them from the next handshake on; `ordered` when this
/// instance ordered them (else they were stored).
fn install(
    managed: &Managed,
    ordered: bool,
    chain: &str,
    key: &str,
) -> Result<(SystemTime, SystemTime), String> {
    let (not_before, not_after) = validity(chain)?;
    let how = if ordered { "ordered" } else { "stored" };
    let origin = format!("acme {how} {}", managed.spec.domains.join(","));
    let certificate =
        Certificate::from_pem(&origin, chain.as_bytes(), key.as_bytes()).map_err(|errors| {
            let messages: Vec<String> = errors.iter().map(|e| format!("{e:?}")).collect();
            format!("the certificate cannot be served: {}", messages.join("; "))
        })?;
    managed.install(certificate, (not_before, not_after), ordered);
    Ok((not_before, not_after))
}

/// The leaf's validity period.
fn validity(chain: &str) -> Result<(SystemTime, SystemTime), String> {
    use rustls::pki_types::pem::PemObject;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(chain.as_bytes())
        .next()
        .ok_or("no certificate in the chain")?
        .map_err(|e| format!("the chain is not PEM: {e}"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf)
        .map_err(|e| format!("the certificate cannot be read: {e}"))?;
    let time = |t: x509_parser::time::ASN1Time| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(t.timestamp().max(0) as u64)
    };
    let validity = parsed.validity();
    Ok((time(validity.not_before), time(validity.not_after)))
}

/// The account for the spec's directory: the stored one, else a new one (then stored).
async fn account(spec: &AcmeSpec, store: &Store) -> Result<Account, String> {
    let builder = || match &spec.directory_ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    let builder = builder().map_err(|e| format!("the ACME client cannot start: {e}"))?;
    if let Some(stored) = store.load_account(spec).await? {
        let credentials: AccountCredentials = serde_json::from_str(&stored)
            .map_err(|e| format!("the stored ACME account cannot be read: {e}"))?;
        return builder
            .from_credentials(credentials)
            .await
            .map_err(|e| format!("the ACME directory {} cannot be used: {e}", spec.directory));
    }
    let contact = spec.email.as_ref().map(|email| format!("mailto:{email}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = builder
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            spec.directory.clone(),
            None,
        )
        .await
        .map_err(|e| format!("no ACME account at {}: {e}", spec.directory))?;
    let text = serde_json::to_string(&credentials)
        .map_err(|e| format!("the ACME account cannot be written: {e}"))?;
    store.save_account(spec, &text).await?;
    Ok(account)
}

/// The challenges offered for one order, withdrawn when it ends however it ends.
#[derive(Default)]
struct Offered {
    tokens: Vec<String>,
    domains: Vec<String>,
    published: Vec<(Etcd, String)>,
}

impl Offered {
    /// Publishes a challenge's answer for the fleet, withdrawn with the others.
    async fn publish(
        &mut self,
        shared: SharedChallenges,
        key: String,
        value: &[u8],
    ) -> Result<(), String> {
        shared
            .etcd
            .put(&key, value, None)
            .await
            .map_err(|e| format!("the challenge cannot be shared: {e}"))?;
        self.published.push((shared.etcd, key));
        Ok(())
    }
}

impl Drop for Offered {
    fn drop(&mut self) {
        for token in &self.tokens {
            registry().withdraw_http(token);
        }
        for domain in &self.domains {
            registry().withdraw_alpn(domain);
        }
        for (etcd, key) in self.published.drain(..) {
            tokio::spawn(async move { etcd.delete(&key).await });
        }
    }
}

/// One order: the challenges answered, the CSR sent, the chain fetched. Returns the chain and
/// the new private key (PEM).
async fn order(
    spec: &AcmeSpec,
    account: &Account,
    store: &Store,
) -> Result<(String, String), String> {
    let acme_error = |what: &str| {
        let what = what.to_owned();
        move |e: instant_acme::Error| format!("{what}: {e}")
    };
    let identifiers: Vec<Identifier> = spec.domains.iter().cloned().map(Identifier::Dns).collect();
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .map_err(acme_error("the CA refused the order"))?;
    let mut offered = Offered::default();
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization.map_err(acme_error("no authorization"))?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("an authorization is {other:?}")),
        }
        let kind = match spec.challenge {
            ChallengeKind::Http01 => ChallengeType::Http01,
            ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
        };
        let mut challenge = authorization
            .challenge(kind)
            .ok_or_else(|| format!("the CA offers no {} challenge", spec.challenge.name()))?;
        let key_authorization = challenge.key_authorization();
        match spec.challenge {
            ChallengeKind::Http01 => {
                let token = challenge.token.clone();
                registry().offer_http(&token, key_authorization.as_str());
                offered.tokens.push(token.clone());
                if let Some(shared) = store.shared() {
                    let key = shared.http_key(&token);
                    offered
                        .publish(shared, key, key_authorization.as_str().as_bytes())
                        .await?;
                }
            }
            ChallengeKind::TlsAlpn01 => {
                let domain = challenge.identifier().to_string();
                let digest = key_authorization.digest();
                registry().offer_alpn(&domain, alpn_certificate(&domain, digest.as_ref())?);
                offered.domains.push(domain.clone());
                if let Some(shared) = store.shared() {
                    let key = shared.alpn_key(&domain);
                    offered.publish(shared, key, digest.as_ref()).await?;
                }
            }
        }
        challenge
            .set_ready()
            .await
            .map_err(acme_error("the challenge cannot be started"))?;
    }
    let retries = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(ORDER_TIMEOUT);
    let status = order
        .poll_ready(&retries)
        .await
        .map_err(acme_error("the order did not become ready"))?;
    if status != OrderStatus::Ready {
        return Err(why_invalid(&mut order, spec).await);
    }
    let key = order
        .finalize()
        .await
        .map_err(acme_error("the CA refused the certificate request"))?;
    let chain = order
        .poll_certificate(&retries)
        .await
        .map_err(acme_error("no certificate"))?;
    Ok((chain, key))
}

/// What the CA said about the failed challenges.
async fn why_invalid(order: &mut instant_acme::Order, spec: &AcmeSpec) -> String {
    let mut problems = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(Ok(mut authorization)) = authorizations.next().await {
        let Ok(state) = authorization.refresh().await else {
            continue;
        };
        problems.extend(
            state
                .challenges
                .iter()
                .filter_map(|c| c.error.as_ref())
                .map(ToString::to_string),
        );
    }
    match problems.is_empty() {
        true => format!(
            "the CA did not accept the {} challenge",
            spec.challenge.name()
        ),
        false => format!(
            "the CA did not accept the {} challenge: {}",
            spec.challenge.name(),
            problems.join("; ")
        ),
    }
}

/// A file or key name for text such as a directory URL.
fn flattened(text: &str) -> String {
    text.chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .collect()
}

/// A held order lock (nothing to hold in a folder: one process orders there); its lease is
/// kept alive while the order runs, and ends within [`LOCK_TTL`] once the lock is dropped —
/// unlocked, or its attempt ended by a timeout or a panic — or its holder dies.
struct Lock {
    key: Option<String>,
    keep_alive: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(keep_alive) = self.keep_alive.take() {
            keep_alive.abort();
        }
    }
}

impl Store {
    /// Where the challenges offered are shared with the fleet (in etcd only).
    fn shared(&self) -> Option<SharedChallenges> {
        match self {
            Store::Folder => None,
            Store::Etcd { etcd, prefix, .. } => {
                Some(SharedChallenges::new(etcd.clone(), prefix.clone()))
            }
        }
    }

    fn certificate_folder(spec: &AcmeSpec) -> PathBuf {
        spec.storage.join(&spec.domains[0])
    }

    fn certificate_key(prefix: &str, spec: &AcmeSpec) -> String {
        format!("{prefix}acme/certificates/{}", spec.domains.join(","))
    }

    async fn load_certificate(&self, spec: &AcmeSpec) -> Result<Option<(String, String)>, String> {
        match self {
            Store::Folder => {
                let folder = Self::certificate_folder(spec);
                let (chain, key) = (folder.join("cert.pem"), folder.join("key.pem"));
                if !chain.exists() {
                    return Ok(None);
                }
                Ok(Some((read(&chain)?, read(&key)?)))
            }
            Store::Etcd { etcd, prefix, .. } => {
                let Some(value) = etcd
                    .get(&Self::certificate_key(prefix, spec))
                    .await
                    .map_err(|e| e.to_string())?
                else {
                    return Ok(None);
                };
                let stored: serde_json::Value = serde_json::from_slice(&value.value)
                    .map_err(|e| format!("the certificate in etcd cannot be read: {e}"))?;
                let field = |name: &str| stored[name].as_str().unwrap_or_default().to_owned();
                Ok(Some((field("chain"), field("key"))))
            }
        }
    }

    async fn save_certificate(
        &self,
        spec: &AcmeSpec,
        chain: &str,
        key: &str,
    ) -> Result<(), String> {
        match self {
            Store::Folder => {
                let folder = Self::certificate_folder(spec);
                write(&folder.join("key.pem"), key)?;
                write(&folder.join("cert.pem"), chain)
            }
            Store::Etcd { etcd, prefix, .. } => {
                let value = serde_json::json!({ "chain": chain, "key": key }).to_string();
                etcd.put(&Self::certificate_key(prefix, spec), value.as_bytes(), None)
                    .await
                    .map(drop)
                    .map_err(|e| format!("the certificate cannot be stored in etcd: {e}"))
            }
        }
    }

    async fn load_account(&self, spec: &AcmeSpec) -> Result<Option<String>, String> {
        let name = flattened(&spec.directory);
        match self {
            Store::Folder => {
                let path = spec.storage.join("accounts").join(format!("{name}.json"));
                match path.exists() {
                    true => read(&path).map(Some),
                    false => Ok(None),
                }
            }
            Store::Etcd { etcd, prefix, .. } => Ok(etcd
                .get(&format!("{prefix}acme/accounts/{name}"))
                .await
                .map_err(|e| e.to_string())?
                .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())),
        }
    }

    async fn save_account(&self, spec: &AcmeSpec, text: &str) -> Result<(), String> {
        let name = flattened(&spec.directory);
        match self {
            Store::Folder => write(
                &spec.storage.join("accounts").join(format!("{name}.json")),
                text,
            ),
            Store::Etcd { etcd, prefix, .. } => etcd
                .put(
                    &format!("{prefix}acme/accounts/{name}"),
                    text.as_bytes(),
                    None,
                )
                .await
                .map(drop)
                .map_err(|e| format!("the ACME account cannot be stored in etcd: {e}")),
        }
    }

    /// The order lock, or `None` while another instance holds it.
    async fn lock(&self, spec: &AcmeSpec) -> Result<Option<Lock>, String> {
        let Store::Etcd {
            etcd,
            prefix,
            holder,
        } = self
        else {
            return Ok(Some(Lock {
                key: None,
                keep_alive: None,
            }));
        };
        let key = format!("{prefix}acme/locks/{}", spec.domains.join(","));
        let lease = etcd.grant(LOCK_TTL).await.map_err(|e| e.to_string())?;
        let taken = etcd
            .create(&key, holder.as_bytes(), Some(lease))
            .await
            .map_err(|e| e.to_string())?;
        if !taken {
            return Ok(None);
        }
        let renewing = etcd.clone();
        let keep_alive = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LOCK_TTL / 3).await;
                let _ = renewing.keep_alive(lease).await;
            }
        });
        Ok(Some(Lock {
            key: Some(key),
            keep_alive: Some(keep_alive),
        }))
    }

    async fn unlock(&self, mut lock: Lock) {
        if let (Store::Etcd { etcd, .. }, Some(key)) = (self, lock.key.take()) {
            drop(lock);
            let _ = etcd.delete(&key).await;
        }
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Writes `text` to `path` through a temporary file renamed over it, so a reader never sees
/// half a file; the folder is made, and a key file is readable by its owner only.
fn write(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder).map_err(failed)?;
    }
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(failed)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probe finding: an attempt the CA never answered never ended, and one that panicked
    /// (instant-acme adds a CA's `Retry-After` to the clock unchecked) ended the manager: the
    /// certificate was never renewed. Both are failed attempts now.
    #[tokio::test]
    async fn an_attempt_that_never_ends_or_panics_is_a_failure_not_the_managers_end() {
        // A short bound stands in for the ten minutes: only the outcome is asserted.
        let bound = Duration::from_millis(20);
        let silent = bounded(bound, std::future::pending()).await;
        assert!(
            matches!(&silent, Err(Attempt::Failed(error)) if error.contains("did not finish")),
            "{:?}",
            silent.err().map(|_| ())
        );
        let panicked = bounded(bound, async {
            panic!("overflow when adding duration to instant")
        })
        .await;
        assert!(
            matches!(&panicked, Err(Attempt::Failed(error)) if error.contains("stopped")),
            "{:?}",
            panicked.err().map(|_| ())
        );
        assert!(bounded(bound, async { Ok(()) }).await.is_ok());
    }

    /// Probe finding: the order lock's lease was kept alive by a task only `unlock` stopped, so
    /// an attempt that ended otherwise held the fleet's lock for the life of the process.
    #[tokio::test]
    async fn a_lock_dropped_on_any_exit_stops_keeping_its_lease_alive() {
        let alive = Arc::new(());
        let held = alive.clone();
        let lock = Lock {
            key: None,
            keep_alive: Some(tokio::spawn(async move {
                let _held = held;
                std::future::pending::<()>().await
            })),
        };
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&alive), 2, "the keep-alive runs");
        drop(lock);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(Arc::strong_count(&alive), 1, "the keep-alive stopped");
    }
}
