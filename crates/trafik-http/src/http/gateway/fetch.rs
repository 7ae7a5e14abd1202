//! A gateway target's call to a part: a body-less GET through the pool's own selection,
//! connect and retry code ([`PoolTarget`]), its answer read whole.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::BodyExt;

use crate::error::ProxyError;
use crate::http::body::RequestBody;
use crate::http::service::{ClientConnection, WorkerProxy};
use crate::http::target::PoolTarget;
use crate::snapshot::WorkerSnapshot;

/// The most a part's answer may carry; a gateway reads answers whole to shape them.
pub const PART_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// The most all part answers of one client request may carry together: a batch's records are
/// held, parsed, until the last arrives, so without it a 100-item batch could gather 100 times
/// what one record may.
pub const PARTS_BUDGET: usize = 32 * 1024 * 1024;

/// What a target needs to call parts on behalf of one client request.
pub struct Caller<'a> {
    pub worker: &'a WorkerProxy,
    pub snapshot: &'a Rc<WorkerSnapshot>,
    pub connection: &'a ClientConnection,
    /// The client's headers after the route's steps (`Host`, `X-Forwarded-*`, credentials),
    /// sent with every part call, less those about the client's own body and encodings.
    pub headers: HeaderMap,
    /// What is left of [`PARTS_BUDGET`] for this request's part answers.
    budget: Cell<usize>,
    /// A part was refused for want of budget: the request's answer is that refusal, whatever
    /// the part's contract says of a missing part.
    overspent: Cell<bool>,
}

/// How a part call ended.
pub enum Fetched {
    Answered {
        status: StatusCode,
        content_type: Option<HeaderValue>,
        body: Bytes,
    },
    /// No answer to pass on: trafik's own error (timeout, no backend, connect failure).
    Failed(ProxyError),
}

impl<'a> Caller<'a> {
    pub fn new(
        worker: &'a WorkerProxy,
        snapshot: &'a Rc<WorkerSnapshot>,
        connection: &'a ClientConnection,
        client: &HeaderMap,
    ) -> Self {
        let mut headers = client.clone();
        for name in [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONTENT_TYPE,
            header::EXPECT,
            // Bodies are read here, so they must come uncompressed.
            header::ACCEPT_ENCODING,
        ] {
            headers.remove(name);
        }
        Caller {
            worker,
            snapshot,
            connection,
            headers,
            budget: Cell::new(PARTS_BUDGET),
            overspent: Cell::new(false),
        }
    }

    /// Whether a part was refused because the request's answers came past [`PARTS_BUDGET`].
    pub fn overspent(&self) -> bool {
        self.overspent.get()
    }

    /// GETs `path` from `pool`; the timeout covers connecting, the answer and its body.
    pub async fn fetch(&self, pool: &PoolTarget, path: &str, timeout: Duration) -> Fetched {
        let Ok(uri) = path.parse::<Uri>() else {
            return Fetched::Failed(ProxyError::BadListItem);
        };
        // Past the budget the answer is a 502 whatever comes next: no more calls.
        if self.overspent.get() {
            return Fetched::Failed(ProxyError::PartsTooLarge);
        }
        let mut request = Request::new(RequestBody::empty());
        *request.uri_mut() = uri;
        *request.headers_mut() = self.headers.clone();
        let exchange = async {
            let (response, _) = pool
                .serve(self.worker, self.snapshot, self.connection, request)
                .await;
            if let Some(error) = response.extensions().get::<ProxyError>() {
                return Fetched::Failed(*error);
            }
            let (head, mut body) = response.into_parts();
            let mut read = BytesMut::new();
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else {
                    return Fetched::Failed(ProxyError::UpstreamFailed);
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if read.len() + data.len() > PART_BODY_LIMIT {
                    return Fetched::Failed(ProxyError::UpstreamFailed);
                }
                // Calls in flight take from the one budget as their bytes arrive.
                let Some(left) = self.budget.get().checked_sub(data.len()) else {
                    self.overspent.set(true);
                    return Fetched::Failed(ProxyError::PartsTooLarge);
                };
                self.budget.set(left);
                read.extend_from_slice(&data);
            }
            Fetched::Answered {
                status: head.status,
                content_type: head.headers.get(header::CONTENT_TYPE).cloned(),
                body: read.freeze(),
            }
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Fetched::Failed(ProxyError::UpstreamTimeout))
    }
}
