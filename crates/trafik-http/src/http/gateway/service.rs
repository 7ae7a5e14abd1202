//! A service of the gateway's map as a route target: the pool named, or the one a capture
//! names (among the route's services only), relayed as any pool route is, to a path written
//! from the captures.

use std::net::SocketAddr;
use std::rc::Rc;

use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use trafik_gateway::template::{Captures, UpstreamTemplate};

use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::service::{ClientConnection, WorkerProxy};
use crate::http::target::PoolTarget;
use crate::snapshot::WorkerSnapshot;

pub struct ServiceTarget {
    pub choice: Choice,
    pub upstream_path: Option<UpstreamTemplate>,
}

pub enum Choice {
    Named(PoolTarget),
    /// The capture at `capture` names one of `services`.
    Capture {
        capture: usize,
        services: Vec<(String, PoolTarget)>,
    },
}

impl ServiceTarget {
    /// The pool the route's captures choose: the named one, or the service a capture names.
    pub fn pool_for(&self, captures: &Captures) -> Option<&PoolTarget> {
        match &self.choice {
            Choice::Named(pool) => Some(pool),
            Choice::Capture { capture, services } => captures.0.get(*capture).and_then(|name| {
                services
                    .iter()
                    .find(|(service, _)| service == name)
                    .map(|(_, pool)| pool)
            }),
        }
    }

    pub async fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        mut request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>) {
        let captures = request
            .extensions_mut()
            .remove::<Captures>()
            .unwrap_or_default();
        let Some(pool) = self.pool_for(&captures) else {
            return (ProxyError::NoRoute.response(), None);
        };
        if let Some(template) = &self.upstream_path {
            rewrite(request.uri_mut(), &template.render(&captures));
        }
        pool.serve(worker, snapshot, connection, request).await
    }
}

/// Puts `path` in the URI; the request's query goes on unless the path brings its own.
fn rewrite(uri: &mut Uri, path: &str) {
    let written = match uri.query() {
        Some(query) if !path.contains('?') => format!("{path}?{query}"),
        _ => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = PathAndQuery::try_from(written).ok();
    if let Ok(rewritten) = Uri::from_parts(parts) {
        *uri = rewritten;
    }
}
