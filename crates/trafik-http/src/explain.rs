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
use crate::http::body::RequestBody;
use crate::http::filter::{Exchange, OwnAnswer};
use crate::http::route::{self, Matching, Route};
use crate::http::service::ClientConnection;
use crate::http::target::Target;
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
    let Some(routes) = snapshot.http_routes(listener.id) else {
        document["answer"] = answer(404, "the listener has no routes", None);
        return document;
    };
    let request = match build_request(question) {
        Ok(request) => request,
        Err(reason) => {
            document["answer"] = answer(400, &reason, None);
            return document;
        }
    };
    let host = route::request_host(&request);
    let path = request.uri().path();
    let method = request.method();
    let mut chosen: Option<(&Route, Option<Captures>)> = None;
    let asking = route::Asking {
        view: &request,
        client: question.client,
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
        return document;
    };
    document["route"] = json!(describe_route(snapshot, route));
    document["captures"] = json!(captures.as_ref().map(|c| c.0.clone()));

    let peer = SocketAddr::new(question.client, 0);
    let connection = ClientConnection::new(listener.id, peer, "http", None);
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
            return document;
        }
    }
    document["filters"] = Value::Array(filters);

    match pool_of(&route.target, captures.as_ref()) {
        Some(index) => {
            let pool = &snapshot.pools[index];
            let selection = Selection::of(pool, &request, peer);
            let told = crate::pool::explain::explain(pool, &selection, now);
            document["backend"] = told["backend"].clone();
            document["candidates"] = told["candidates"].clone();
            if told["backend"].is_null() {
                document["answer"] = answer(503, "no backend available", None);
            }
            document["pool"] = told;
        }
        None => {
            document["answer"] = json!({
                "status": null,
                "reason": format!("served by {}: no pool pick to explain", describe_target(snapshot, &route.target)),
            });
        }
    }
    document
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
    let pool = &document["pool"];
    if pool.is_object() {
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
