//! `trafik explain` and the admin API's `POST /explain`: what trafik would do with a request,
//! told by the code that serves requests — the listener's [`RouteTable`] through
//! [`route::test`], each step's [`Filter::explain`], the pool's
//! [`explain`](crate::pool::explain::explain) — without sending anything upstream or counting
//! anything. Nothing here runs for a request that is served.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, header};
use serde_json::{Value, json};
use trafik_balance::Nanos;
use trafik_gateway::template::Captures;

use crate::connections::ListenerId;
use crate::error::ProxyError;
use crate::http::body::RequestBody;
use crate::http::filter::{Exchange, OwnAnswer};
use crate::http::gateway::aggregate::{AggregateTarget, batch_records};
use crate::http::route::{self, Matching, Route};
use crate::http::service::ClientConnection;
use crate::http::target::{PoolTarget, Target};
use crate::snapshot::Snapshot;
use crate::view::Selection;

/// The request to explain, as `POST /explain` takes it: `{"method", "url", "headers": {…},
/// "client"}`.
pub struct Question {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub client: IpAddr,
}

impl Question {
    /// Reads a question; `method` defaults to GET and `client` to 127.0.0.1.
    pub fn from_json(value: &Value) -> Result<Question, String> {
        let text = |name: &str| value.get(name).and_then(Value::as_str);
        let url = text("url").ok_or("the request needs a \"url\"")?;
        let mut headers = Vec::new();
        match value.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(fields)) => {
                for (name, value) in fields {
                    let value = value
                        .as_str()
                        .ok_or_else(|| format!("header {name:?} must be a string"))?;
                    headers.push((name.clone(), value.to_owned()));
                }
            }
            Some(_) => return Err("\"headers\" must be an object of strings".into()),
        }
        Question::new(
            text("method").unwrap_or("GET"),
            url,
            &headers,
            text("client"),
        )
    }

    /// A question from its parts as the command line gives them.
    pub fn new(
        method: &str,
        url: &str,
        headers: &[(String, String)],
        client: Option<&str>,
    ) -> Result<Question, String> {
        let method = Method::from_bytes(method.as_bytes())
            .map_err(|_| format!("{method:?} is not an HTTP method"))?;
        let uri: Uri = url
            .parse()
            .map_err(|error| format!("{url:?} is not a URL: {error}"))?;
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of {name} cannot be sent in a header"))?;
            map.append(name, value);
        }
        let client = match client {
            Some(text) => text
                .parse()
                .map_err(|_| format!("{text:?} is not an IP address"))?,
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        Ok(Question {
            method,
            uri,
            headers: map,
            client,
        })
    }
}

/// The request header that asks for an explanation, and the answer header that carries it.
pub const EXPLAIN_HEADER: HeaderName = HeaderName::from_static("x-trafik-explain");

/// The longest `x-trafik-explain` answer: a proxy or browser in front may refuse long heads.
const MAX_OWN_EXPLANATION: usize = 2048;

/// The longest text of one field of the `x-trafik-explain` answer, in characters.
const MAX_OWN_FIELD: usize = 120;

/// `x-trafik-explain` on a served request: takes the header off (the upstream never sees it)
/// and, only when the request carries the admin token (`Authorization: Bearer TOKEN`, as the
/// admin API takes it, wrong guesses budgeted as there), returns the request's own
/// explanation for the answer's header — the `Authorization` that carried the token is taken
/// off too, so the secret never leaves trafik. Without the header this is one lookup.
pub fn asked_for(
    snapshot: &Snapshot,
    listener: ListenerId,
    request: &mut Request<RequestBody>,
    peer: SocketAddr,
    now: impl FnOnce() -> Nanos,
) -> Option<HeaderValue> {
    request.headers_mut().remove(EXPLAIN_HEADER)?;
    let token = snapshot.admin_token.as_ref()?;
    if token.check(request, peer.ip()) != crate::admin_token::Verdict::Admitted {
        return None;
    }
    request.headers_mut().remove(header::AUTHORIZATION);
    let mut copy = copy_head(request);
    let mut document = json!({});
    let now = now();
    match crate::http::path::normalize(copy.uri().path()) {
        Ok(None) => explain_request(snapshot, listener, copy, peer, now, &mut document),
        Ok(Some(normal)) => {
            crate::http::service::replace_path(copy.uri_mut(), &normal);
            explain_request(snapshot, listener, copy, peer, now, &mut document)
        }
        Err(_) => document["answer"] = answer(400, "the path is ambiguous and refused", None),
    }
    Some(compact(&document))
}

/// The explanation as one line of JSON for a header: the route, the cache's and the pool's
/// verdicts, the backend or trafik's own answer; texts cut to [`MAX_OWN_FIELD`] characters,
/// non-ASCII escaped, at most [`MAX_OWN_EXPLANATION`] bytes.
fn compact(document: &Value) -> HeaderValue {
    let cut = |value: &Value| match value.as_str() {
        Some(text) if text.chars().count() > MAX_OWN_FIELD => {
            let kept: String = text.chars().take(MAX_OWN_FIELD).collect();
            json!(format!("{kept}…"))
        }
        _ => value.clone(),
    };
    let pool = &document["pool"];
    let answered = &document["answer"];
    let mut fields = serde_json::Map::new();
    let mut put = |name: &str, value: Value| {
        if !value.is_null() {
            fields.insert(name.to_owned(), value);
        }
    };
    put("route", cut(&document["route"]));
    put("cache", document["cache"]["verdict"].clone());
    put("pool", pool["pool"].clone());
    put("decided_by", pool["decided_by"].clone());
    put("reason", cut(&pool["reason"]));
    put("retry_budget_left", pool["retry"]["budget"]["left"].clone());
    put("backend", document["backend"].clone());
    if answered.is_object() {
        put(
            "answer",
            json!({ "status": answered["status"], "reason": cut(&answered["reason"]) }),
        );
    }
    let mut line = ascii_json(&Value::Object(fields));
    if line.len() > MAX_OWN_EXPLANATION {
        line = ascii_json(&json!({
            "backend": document["backend"],
            "answer": answered.get("status"),
            "cut": true,
        }));
    }
    HeaderValue::from_str(&line).unwrap_or(HeaderValue::from_static("{}"))
}

/// `value` as JSON text with every character a header value cannot hold (non-ASCII, DEL)
/// escaped (`\uXXXX`); JSON escapes the other control characters itself.
fn ascii_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        if character.is_ascii() && character != '\x7f' {
            out.push(character);
        } else {
            let mut units = [0u16; 2];
            for unit in character.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// One listener of the instance: its id in the snapshot and the address it is bound to.
pub struct ListenerAddress {
    pub id: ListenerId,
    pub name: String,
    pub address: SocketAddr,
}

/// The explanation as JSON (the same from the command and from `POST /explain`). `now` is the
/// reading of the pools' clock (latency-aware rules decay by it).
pub fn explain(
    snapshot: &Snapshot,
    listeners: &[ListenerAddress],
    question: &Question,
    now: Nanos,
) -> Value {
    let Some(listener) = choose_listener(snapshot, listeners, &question.uri) else {
        return json!({
            "request": describe_question(question),
            "answer": { "status": null, "reason": "no HTTP listener of this configuration takes the URL's port" },
            "routes": [],
        });
    };
    let mut document = json!({
        "request": describe_question(question),
        "listener": { "name": listener.name, "address": listener.address.to_string() },
    });
    match build_request(question) {
        Ok(request) => explain_request(
            snapshot,
            listener.id,
            request,
            SocketAddr::new(question.client, 0),
            now,
            &mut document,
        ),
        Err(reason) => document["answer"] = answer(400, &reason, None),
    }
    document
}

/// The explanation of `request` (path normalized, `Host` set) from `peer` on the listener
/// `listener`, written into `document`: the routes, the filters, the cache, the target. Also
/// what a served request that asks for its own explanation gets ([`own_explanation`]).
pub fn explain_request(
    snapshot: &Snapshot,
    listener: ListenerId,
    request: Request<RequestBody>,
    peer: SocketAddr,
    now: Nanos,
    document: &mut Value,
) {
    let Some(routes) = snapshot.http_routes(listener) else {
        document["answer"] = answer(404, "the listener has no routes", None);
        return;
    };
    let client = route::client_address(peer, request.headers(), snapshot.client.trust_forwarded);
    let host = route::request_host(&request);
    let path = request.uri().path();
    let method = request.method();
    let mut chosen: Option<(&Route, Option<Captures>)> = None;
    let asking = route::Asking {
        view: &request,
        client,
    };
    let considered: Vec<Value> = routes
        .considered(host, path, method, &asking)
        .map(|(candidate, verdict)| {
            let description = describe_route(snapshot, candidate);
            let (matched, why, captures) = match verdict {
                Ok(captures) if chosen.is_none() => {
                    let why = match &captures {
                        Some(c) => format!("matched; captures {}", c.0.join(", ")),
                        None => "matched: the first route in order that takes it".into(),
                    };
                    let shown = captures.as_ref().map(|c| c.0.clone());
                    chosen = Some((candidate, captures));
                    (true, why, shown)
                }
                Ok(_) => (
                    false,
                    "would match too, but is shadowed by the route chosen above".into(),
                    None,
                ),
                Err(miss) => (
                    false,
                    route::why_not(candidate, miss, host, path, method),
                    None,
                ),
            };
            json!({ "route": description, "matched": matched, "why": why, "captures": captures })
        })
        .collect();
    document["routes"] = Value::Array(considered);
    let Some((route, captures)) = chosen else {
        document["answer"] = answer(404, "no route matches", None);
        return;
    };
    document["route"] = json!(describe_route(snapshot, route));
    document["captures"] = json!(captures.as_ref().map(|c| c.0.clone()));

    let connection = ClientConnection::new(listener, peer, "http", None);
    let exchange = Exchange {
        connection: &connection,
        snapshot,
        worker: 0,
        notes: RefCell::default(),
    };
    let mut filters = Vec::new();
    for filter in &route.filters {
        let Some(verdict) = filter.explain(&request, &exchange) else {
            continue;
        };
        filters.push(json!({ "filter": verdict.filter, "verdict": verdict.told }));
        if let Some(OwnAnswer {
            status,
            reason,
            retry_after,
        }) = verdict.answer
        {
            document["filters"] = Value::Array(filters);
            document["answer"] = answer(status, &reason, retry_after);
            return;
        }
    }
    document["filters"] = Value::Array(filters);
    // The route's path rewrites, as the request reaches its target (and the cache's key),
    // written into a copy (the routes' verdicts above read the request as it came).
    let mut request = copy_head(&request);
    let rewritten = route
        .filters
        .iter()
        .fold(None, |rewritten: Option<String>, filter| {
            let path = rewritten.as_deref().unwrap_or(request.uri().path());
            filter.upstream_path(path).or(rewritten)
        });
    if let Some(path) = rewritten {
        crate::http::service::replace_path(request.uri_mut(), &path);
    }
    let captures = captures.unwrap_or_default();
    let told = Told {
        snapshot,
        connection: &connection,
        captures: &captures,
        now,
    };
    request.extensions_mut().insert(captures.clone());
    told.target(&route.target, &request, document);
}

/// What the target part of an explanation reads.
struct Told<'a> {
    snapshot: &'a Snapshot,
    connection: &'a ClientConnection,
    captures: &'a Captures,
    now: Nanos,
}

impl Told<'_> {
    /// What `target` does with `request`: the pool's pick, the cache's verdict, or what
    /// answers instead (a file, a redirect, the gateway's merge).
    fn target(&self, target: &Target, request: &Request<RequestBody>, document: &mut Value) {
        match target {
            Target::Pool(pool) => self.pool(pool, request, document),
            Target::Cached(cached) => {
                let verdict = cached.explain(request);
                document["cache"] = verdict.told;
                match verdict.answer {
                    Some((status, reason)) => document["answer"] = answer(status, &reason, None),
                    None => self.target(&cached.inner, request, document),
                }
            }
            Target::Service(service) => match service.pool_for(self.captures) {
                Some(pool) => {
                    if let Some(template) = &service.upstream_path {
                        document["upstream_path"] = json!(template.render(self.captures));
                    }
                    self.pool(pool, request, document)
                }
                None => {
                    document["answer"] =
                        answer(404, "the capture names no service of the map", None)
                }
            },
            Target::Aggregate(aggregate) => self.aggregate(aggregate, request, document),
            Target::Ambassador(ambassador) => {
                document["upstream_path"] = json!(ambassador.path.render(self.captures));
                self.pool(&ambassador.pool, request, document);
            }
            Target::Static(site) => {
                let (status, reason) = site.explain(request.method(), request.uri().path());
                document["answer"] = answer(status, &reason, None);
            }
            Target::Split(split) => {
                let (pool, why) = split.explain(request);
                document["split"] = json!(why);
                match pool {
                    Some(pool) => self.pool(pool, request, document),
                    None => document["answer"] = json!({ "status": null, "reason": why }),
                }
            }
            Target::Redirect(redirect) => {
                let response = redirect.serve(self.connection, request);
                let reason = match response.headers().get(header::LOCATION) {
                    Some(location) => format!(
                        "a redirect to {}",
                        String::from_utf8_lossy(location.as_bytes())
                    ),
                    None => "this request cannot be redirected".to_owned(),
                };
                document["answer"] = answer(response.status().as_u16(), &reason, None);
            }
        }
    }

    /// An aggregate's parts, each with its pool's pick and the path it asks for; with a batch,
    /// one path per list item (the items' calls go to the same pick, as the explanation
    /// advances no pool).
    fn aggregate(
        &self,
        aggregate: &AggregateTarget,
        request: &Request<RequestBody>,
        document: &mut Value,
    ) {
        let records = match &aggregate.batch {
            None => None,
            Some(batch) => match batch_records(batch, self.captures, request.uri().query()) {
                Some(records) => {
                    document["batch"] = json!({
                        "parameter": batch.parameter,
                        "items": records.len(),
                        "concurrency": batch.concurrency,
                    });
                    Some(records)
                }
                None => {
                    let refusal = ProxyError::BadListItem;
                    document["answer"] =
                        answer(refusal.status().as_u16(), refusal.body().trim_end(), None);
                    return;
                }
            },
        };
        let parts: Vec<Value> = aggregate
            .parts
            .iter()
            .zip(&aggregate.contracts)
            .map(|(part, (name, _))| {
                let mut told = match &records {
                    None => json!({ "part": name, "path": part.path.render(self.captures) }),
                    Some(records) => {
                        let paths: Vec<String> = records
                            .iter()
                            .map(|record| part.path.render(record))
                            .collect();
                        json!({ "part": name, "paths": paths })
                    }
                };
                self.pool(&part.pool, request, &mut told);
                told
            })
            .collect();
        let calls = parts.len() * records.as_ref().map_or(1, Vec::len);
        document["parts"] = Value::Array(parts);
        document["answer"] = json!({
            "status": null,
            "reason": format!("a gateway aggregate: {calls} upstream call(s), each picked as shown under \"parts\", merged by its jq expression"),
        });
    }

    /// The pool's pick, its candidates and its retries, into `document`.
    fn pool(&self, target: &PoolTarget, request: &Request<RequestBody>, document: &mut Value) {
        let pool = &self.snapshot.pools[target.pool];
        let selection = Selection::of(pool, request, self.connection.peer);
        let mut told = crate::pool::explain::explain(pool, &selection, self.now);
        let repeatable = (request.method().is_idempotent() || target.retry_non_idempotent)
            && !declares_body(request.headers());
        told["retry"] = pool
            .retrying
            .explain(pool.plan.retries, repeatable, self.now);
        document["backend"] = told["backend"].clone();
        document["candidates"] = told["candidates"].clone();
        if told["backend"].is_null() {
            document["answer"] = answer(503, "no backend available", None);
        }
        document["pool"] = told;
    }
}

/// A bodiless copy of `request`'s head.
fn copy_head(request: &Request<RequestBody>) -> Request<RequestBody> {
    let mut copy = Request::new(RequestBody::empty());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// Whether a request says it has a body (a length above zero, or chunks).
fn declares_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
            .is_some_and(|length| length > 0)
}

fn answer(status: u16, reason: &str, retry_after: Option<u64>) -> Value {
    json!({ "status": status, "reason": reason, "retry_after": retry_after })
}

/// The listener whose port the URL names (80 or 443 by its scheme when it names none); the only
/// HTTP listener when no port fits.
pub(crate) fn choose_listener<'l>(
    snapshot: &Snapshot,
    listeners: &'l [ListenerAddress],
    uri: &Uri,
) -> Option<&'l ListenerAddress> {
    let http: Vec<&ListenerAddress> = listeners
        .iter()
        .filter(|l| snapshot.http_routes(l.id).is_some())
        .collect();
    let port = uri.port_u16().or_else(|| match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    });
    port.and_then(|port| http.iter().find(|l| l.address.port() == port).copied())
        .or_else(|| (http.len() == 1).then(|| http[0]))
}

/// The request as a listener would parse it: origin form, `Host` from the URL unless given,
/// the path normalized as served requests are.
pub(crate) fn build_request(question: &Question) -> Result<Request<RequestBody>, String> {
    let raw_path = question.uri.path();
    let path = match crate::http::path::normalize(raw_path) {
        Ok(normalized) => normalized.unwrap_or_else(|| raw_path.to_owned()),
        Err(_) => return Err(format!("the path {raw_path:?} is ambiguous and refused")),
    };
    let target = match question.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let mut request = Request::builder()
        .method(question.method.clone())
        .uri(target)
        .body(RequestBody::empty())
        .map_err(|error| error.to_string())?;
    *request.headers_mut() = question.headers.clone();
    if !request.headers().contains_key(header::HOST)
        && let Some(authority) = question.uri.authority()
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().insert(header::HOST, host);
    }
    Ok(request)
}

/// The pool a target sends to, when it sends to one.
pub(crate) fn pool_of(target: &Target, captures: Option<&Captures>) -> Option<usize> {
    match target {
        Target::Pool(pool) => Some(pool.pool),
        Target::Cached(cached) => pool_of(&cached.inner, captures),
        Target::Service(service) => service
            .pool_for(captures.unwrap_or(&Captures::default()))
            .map(|p| p.pool),
        Target::Aggregate(_)
        | Target::Ambassador(_)
        | Target::Static(_)
        | Target::Split(_)
        | Target::Redirect(_) => None,
    }
}

fn describe_target(snapshot: &Snapshot, target: &Target) -> String {
    match target {
        Target::Pool(pool) => format!("pool {}", snapshot.pools[pool.pool].plan.name),
        Target::Cached(cached) => format!("cache → {}", describe_target(snapshot, &cached.inner)),
        Target::Service(_) => "a gateway service".into(),
        Target::Aggregate(_) => "a gateway aggregate".into(),
        Target::Ambassador(_) => "a gateway ambassador".into(),
        Target::Static(site) => format!("static files under {}", site.root.display()),
        Target::Split(_) => "a weighted split of pools".into(),
        Target::Redirect(_) => "a redirect".into(),
    }
}

/// A route as configuration writes it: `host api.local, path /takip, GET → pool takip`.
pub(crate) fn describe_route(snapshot: &Snapshot, route: &Route) -> String {
    let mut parts = Vec::new();
    if let Some(host) = route.host() {
        parts.push(format!("host {host}"));
    }
    match route.path_template() {
        Some(template) => parts.push(format!("path {}", template.text())),
        None => parts.push(format!("path_prefix {}", route.path_prefix())),
    }
    if !route.methods().is_empty() {
        let methods: Vec<&str> = route.methods().iter().map(Method::as_str).collect();
        parts.push(methods.join("|"));
    }
    format!(
        "{} → {}",
        parts.join(", "),
        describe_target(snapshot, &route.target)
    )
}

fn describe_question(question: &Question) -> Value {
    json!({
        "method": question.method.as_str(),
        "url": question.uri.to_string(),
        "client": question.client.to_string(),
    })
}

/// The explanation for people, from its JSON.
pub fn render(document: &Value) -> String {
    let mut out = String::new();
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    let request = &document["request"];
    out.push_str(&format!(
        "{} {} from {}\n",
        text(&request["method"]),
        text(&request["url"]),
        text(&request["client"])
    ));
    if let Some(listener) = document.get("listener") {
        out.push_str(&format!(
            "listener {} on {}\n",
            text(&listener["name"]),
            text(&listener["address"])
        ));
    }
    out.push_str("\nroutes, in the order they are tried:\n");
    for considered in document["routes"].as_array().into_iter().flatten() {
        let mark = if considered["matched"] == true {
            "✔"
        } else {
            "✘"
        };
        out.push_str(&format!(
            "  {mark} {}\n      {}\n",
            text(&considered["route"]),
            text(&considered["why"])
        ));
    }
    if let Some(filters) = document["filters"].as_array()
        && !filters.is_empty()
    {
        out.push_str("\nfilters:\n");
        for filter in filters {
            out.push_str(&format!(
                "  {}: {}\n",
                text(&filter["filter"]),
                text(&filter["verdict"])
            ));
        }
    }
    if let Some(cache) = document["cache"].as_object() {
        let mut line = format!(
            "\ncache {}: {}",
            cache["cache"].as_str().unwrap_or_default(),
            cache["verdict"].as_str().unwrap_or_default()
        );
        if let Some(key) = cache.get("key").and_then(Value::as_str) {
            line.push_str(&format!(", key {key}"));
        }
        if let Some(vary) = cache.get("vary").and_then(Value::as_array)
            && !vary.is_empty()
        {
            let names: Vec<&str> = vary.iter().filter_map(Value::as_str).collect();
            line.push_str(&format!(", stored under Vary: {}", names.join(", ")));
        }
        if let Some(age) = cache.get("age_seconds").and_then(Value::as_u64) {
            line.push_str(&format!(", age {age} s"));
        }
        out.push_str(&format!(
            "{line}\n  {}\n",
            cache["why"].as_str().unwrap_or_default()
        ));
    }
    if let Some(split) = document["split"].as_str() {
        out.push_str(&format!("\n{split}\n"));
    }
    if let Some(path) = document["upstream_path"].as_str() {
        out.push_str(&format!("\nsent upstream as {path}\n"));
    }
    if document["pool"].is_object() {
        render_pool(&mut out, &document["pool"]);
    }
    if let Some(batch) = document["batch"].as_object() {
        out.push_str(&format!(
            "\na batch of {} record(s) from ?{}=, {} at once\n",
            batch["items"],
            text(&batch["parameter"]),
            batch["concurrency"]
        ));
    }
    for part in document["parts"].as_array().into_iter().flatten() {
        let paths = match part["paths"].as_array() {
            Some(paths) => paths.iter().map(text).collect::<Vec<_>>().join(", "),
            None => text(&part["path"]),
        };
        out.push_str(&format!("\npart {} → {paths}:", text(&part["part"])));
        render_pool(&mut out, &part["pool"]);
    }
    if let Some(backend) = document["backend"].as_object() {
        out.push_str(&format!(
            "\n→ backend {} at {}\n",
            backend["name"].as_str().unwrap_or_default(),
            backend["address"].as_str().unwrap_or_default()
        ));
    }
    if let Some(answer) = document["answer"].as_object() {
        let status = answer["status"]
            .as_u64()
            .map_or_else(|| "-".to_owned(), |s| s.to_string());
        let retry = answer
            .get("retry_after")
            .and_then(Value::as_u64)
            .map(|s| format!(" (Retry-After {s})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "\n→ trafik answers itself: {status} {}{retry}\n",
            answer["reason"].as_str().unwrap_or_default()
        ));
    }
    out
}

/// A pool's part of the explanation for people.
fn render_pool(out: &mut String, pool: &Value) {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
    out.push_str(&format!(
        "\npool {} ({}), decided by {}:\n  {}\n",
        text(&pool["pool"]),
        text(&pool["algorithm"]),
        text(&pool["decided_by"]),
        text(&pool["reason"])
    ));
    if let Some(sticky) = pool["sticky"].as_object() {
        out.push_str(&format!(
            "  sticky ({}): {}\n",
            sticky["mode"].as_str().unwrap_or_default(),
            sticky["binding"].as_str().unwrap_or_default()
        ));
    }
    for note in pool["notes"].as_array().into_iter().flatten() {
        out.push_str(&format!("  note: {}\n", text(note)));
    }
    let retry = &pool["retry"];
    if retry.is_object() {
        let budget = &retry["budget"];
        out.push_str(&format!(
                "  retries: {}; budget left {:.1} ({} retries over {} requests in the last 10 s; a share of {} plus {} a second)\n",
                text(&retry["applies"]),
                budget["left"].as_f64().unwrap_or_default(),
                budget["retries_in_window"],
                budget["requests_in_window"],
                budget["ratio"],
                budget["floor_per_second"],
            ));
    }
    out.push_str("  candidates:\n");
    for candidate in pool["candidates"].as_array().into_iter().flatten() {
        let mark = if candidate["chosen"] == true {
            "→"
        } else {
            " "
        };
        let mut state = vec![
            if candidate["up"] == true {
                "up"
            } else {
                "down"
            }
            .to_owned(),
        ];
        if candidate["draining"] == true {
            state.push("draining".into());
        }
        if candidate["ejected"] == true {
            let left = candidate["ejected_seconds_left"]
                .as_f64()
                .map(|s| format!(" ({s:.1} s left)"))
                .unwrap_or_default();
            state.push(format!("ejected{left}"));
        }
        if let Some(share) = candidate["slow_start_share"].as_f64() {
            state.push(format!("slow start {:.0} %", share * 100.0));
        }
        if let Some(ewma) = candidate["ewma_ms"].as_f64() {
            state.push(format!("EWMA {ewma:.3} ms"));
        }
        out.push_str(&format!(
            "   {mark} {} {}: {}, {} in flight, weight {}\n",
            text(&candidate["name"]),
            text(&candidate["address"]),
            state.join(", "),
            candidate["in_flight"],
            candidate["weight"]
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_form_is_visible_ascii_json_that_reads_back_the_same() {
        let value = json!({ "route": "path_prefix / → pool a", "odd": "x\u{7f}y😀\n" });
        let line = ascii_json(&value);
        assert!(HeaderValue::from_str(&line).is_ok(), "{line}");
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), value);
    }
}
