//! The auth stage: a JWT bearer token verified against the route's keys (algorithm pinned per
//! key), its chosen claims forwarded as request headers. A refusal is a 401 with
//! `WWW-Authenticate` (RFC 6750). JWKS keys are read again in the background every `refresh`
//! (from a file or an http:// URL), so a rotation needs no restart; a failed read keeps the keys
//! in force.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty};

use super::{access_log, refusal};
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::filter::{Exchange, Fields, Filter, OwnAnswer, Verdict, field_text};
use crate::plan::{JwksSource, JwtKeys, JwtPlan};
use trafik_policy::gate::bearer;
use trafik_policy::jwt::{self, Expectations, KeySet, PinnedKey, Refusal};
use trafik_policy::stage::Stage;

/// The verified claims of the request's token, for later stages (a rate limit keyed by claim).
#[derive(Clone)]
pub struct Claims(pub Arc<jwt::Claims>);

pub struct Jwt {
    keys: Arc<ArcSwap<KeySet>>,
    expect: Expectations,
    /// The claims forwarded, and the fields they go in, by position.
    forward_claims: Vec<String>,
    forward_fields: Vec<HeaderName>,
    keep_token: bool,
    /// A later step reads the claims (a rate limit keyed by one): only then are they kept in
    /// the exchange's notes.
    share_claims: bool,
}

impl Jwt {
    pub fn new(plan: &JwtPlan, share_claims: bool) -> Result<Jwt, String> {
        let algorithm = |name: &str| jwt::algorithm(name);
        let keys = match &plan.keys {
            JwtKeys::Secret {
                algorithm: a,
                secret,
            } => KeySet::new(vec![PinnedKey::secret(algorithm(a)?, secret)?]),
            JwtKeys::Pem { algorithm: a, pem } => {
                KeySet::new(vec![PinnedKey::pem(algorithm(a)?, pem)?])
            }
            // A URL is fetched by the refresher at once: an identity provider that is down at
            // start leaves tokens refused (no key) until it answers, instead of stopping trafik.
            JwtKeys::Jwks {
                source: JwksSource::Url(_),
                ..
            } => KeySet::default(),
            JwtKeys::Jwks { source, .. } => KeySet::from_jwks(&read_jwks(source)?)?,
        };
        let keys = Arc::new(ArcSwap::from_pointee(keys));
        if let JwtKeys::Jwks { source, refresh } = &plan.keys {
            refresh_in_background(Arc::downgrade(&keys), source.clone(), *refresh);
        }
        Ok(Jwt {
            keys,
            expect: Expectations {
                issuers: plan.issuers.clone(),
                audiences: plan.audiences.clone(),
                leeway: plan.leeway.as_secs(),
            },
            forward_claims: plan
                .forward
                .iter()
                .map(|(claim, _)| claim.clone())
                .collect(),
            forward_fields: plan
                .forward
                .iter()
                .map(|(_, field)| field.clone())
                .collect(),
            keep_token: plan.keep_token,
            share_claims,
        })
    }

    /// The claims of the request's bearer token and the text of those it forwards, or why it
    /// is refused.
    fn verify(&self, fields: &dyn Fields) -> Result<(jwt::Claims, Vec<Option<String>>), Refusal> {
        let token = field_text(fields, &header::AUTHORIZATION)
            .and_then(bearer)
            .ok_or(Refusal::Missing)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        jwt::verify_forwarding(
            token,
            &self.keys.load(),
            &self.expect,
            now,
            &self.forward_claims,
        )
    }

    fn refuse(&self, exchange: &Exchange<'_>, refused: Refusal) -> Box<Response<ProxyBody>> {
        access_log::record(
            exchange,
            Stage::Auth,
            format!("refused: {}", refused.reason()),
        );
        let mut response = refusal(StatusCode::UNAUTHORIZED, refused.reason());
        let challenge = match refused {
            Refusal::Missing => "Bearer realm=\"trafik\"".to_owned(),
            other => format!(
                "Bearer realm=\"trafik\", error=\"invalid_token\", error_description=\"{}\"",
                other.reason()
            ),
        };
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        Box::new(response)
    }
}

impl Filter for Jwt {
    fn fields_only(&self) -> bool {
        true
    }

    fn on_request_fields(
        &self,
        fields: &mut dyn Fields,
        exchange: &Exchange<'_>,
    ) -> Option<Box<Response<ProxyBody>>> {
        let (claims, texts) = match self.verify(fields) {
            Ok(verified) => verified,
            Err(refused) => return Some(self.refuse(exchange, refused)),
        };
        // Whatever the client says in the headers trafik forwards claims in is not trusted: a
        // claim's header replaces the client's, and a claim the token lacks removes it.
        for (text, name) in texts.into_iter().zip(&self.forward_fields) {
            // The claim's text becomes the value without a copy.
            match text.and_then(|text| HeaderValue::from_maybe_shared(Bytes::from(text)).ok()) {
                Some(value) => fields.insert(name.clone(), value),
                None => fields.remove(name),
            }
        }
        if !self.keep_token {
            fields.remove(&header::AUTHORIZATION);
        }
        access_log::record(exchange, Stage::Auth, "pass");
        if self.share_claims {
            exchange.notes.borrow_mut().insert(Claims(Arc::new(claims)));
        }
        None
    }

    fn explain(&self, request: &Request<RequestBody>, exchange: &Exchange<'_>) -> Option<Verdict> {
        Some(match self.verify(request.headers()) {
            Ok((claims, _)) => {
                let subject = claims.text("sub").unwrap_or_else(|| "-".to_owned());
                // Later stages (a rate limit keyed by a claim) read them as they would.
                exchange.notes.borrow_mut().insert(Claims(Arc::new(claims)));
                Verdict {
                    filter: "jwt",
                    told: format!("the token verifies (sub `{subject}`)"),
                    answer: None,
                }
            }
            Err(refused) => Verdict {
                filter: "jwt",
                told: format!("refused: {}", refused.reason()),
                answer: Some(OwnAnswer {
                    status: 401,
                    reason: refused.reason().into(),
                    retry_after: None,
                }),
            },
        })
    }
}

/// Reads a JWKS document where the plan says it is, blocking: a file at build time, and on the
/// refresher's own thread; never on a worker.
fn read_jwks(source: &JwksSource) -> Result<String, String> {
    match source {
        JwksSource::File(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read JWKS file {}: {e}", path.display())),
        JwksSource::Url(url) => fetch(url),
    }
}

/// Swaps in the keys read every `refresh`, on a thread of its own that ends when the route's
/// filter (the only strong owner of the keys) is dropped by a reload or a stop.
fn refresh_in_background(keys: Weak<ArcSwap<KeySet>>, source: JwksSource, refresh: Duration) {
    let spawned = std::thread::Builder::new()
        .name("trafik-jwks".into())
        .spawn(move || {
            let mut first = matches!(source, JwksSource::Url(_));
            loop {
                if !std::mem::take(&mut first) {
                    std::thread::sleep(refresh);
                }
                let Some(keys) = keys.upgrade() else { return };
                match read_jwks(&source).and_then(|text| KeySet::from_jwks(&text)) {
                    Ok(read) => keys.store(Arc::new(read)),
                    Err(error) => {
                        tracing::warn!(%error, "JWKS refresh failed; keeping the keys in force")
                    }
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the JWKS refresher; the keys read at load stay");
    }
}

/// GET an http:// URL with a small runtime of this thread's own; 10 s at most.
fn fetch(url: &http::Uri) -> Result<String, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // The timer exists only inside the runtime, so the timeout is made there.
    let fetched =
        runtime.block_on(async { tokio::time::timeout(Duration::from_secs(10), get(url)).await });
    fetched
        .map_err(|_| format!("cannot fetch JWKS from {url}: timed out"))?
        .map_err(|e: String| format!("cannot fetch JWKS from {url}: {e}"))
}

async fn get(url: &http::Uri) -> Result<String, String> {
    let host = url.host().ok_or("the JWKS URL has no host")?;
    let port = url.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let path = url.path_and_query().map_or("/", |p| p.as_str());
    let request = Request::get(path)
        .header(header::HOST, url.authority().map_or(host, |a| a.as_str()))
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    String::from_utf8(body.to_bytes().to_vec()).map_err(|e| e.to_string())
}
