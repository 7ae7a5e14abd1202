//! Answers compressed at the edge (`[listener.route.compress]`): gzip, brotli or zstd, the
//! coding negotiated from `Accept-Encoding` ([`trafik_policy::negotiate`]), for the listed media
//! types at or above a minimum size. An answer already encoded keeps its coding (never twice);
//! a range request's answer stays as it is; answers that could have been compressed say
//! `Vary: Accept-Encoding`; a compressed answer's `ETag` is weakened (its bytes are not the
//! origin's) and it loses `Content-Length` (streamed in chunks) and `Accept-Ranges`.
//!
//! The request goes upstream asking for the negotiated coding only, so an edge cache in front
//! of the target keeps one variant per coding: it compresses what it stores ([`Negotiated`] in
//! the request's extensions tells it how) and serves the stored copy as it is.

use std::io::{self, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use trafik_policy::negotiate::{self, Coding};

use super::body::{BodyFailure, ProxyBody, RequestBody};
use super::filter::{Exchange, Filter, Step};
use super::headers::vary_on;
use crate::ProxyError;
use crate::counters::{PerWorker, add, bump, read};
use crate::http::body::ErrorAnswer;
use crate::plan::CompressPlan;

/// What one worker counted for a route's compression.
#[derive(Debug, Default)]
pub struct CompressCounters {
    pub gzip: AtomicU64,
    pub br: AtomicU64,
    pub zstd: AtomicU64,
    /// Answers that could have been compressed, to clients that accept none of the codings.
    pub identity: AtomicU64,
    /// Answers that arrived encoded: by the upstream, or a compressed copy from the edge cache.
    pub already_encoded: AtomicU64,
    /// Answers below `min_length`.
    pub too_small: AtomicU64,
    /// Answers to range requests, left as they are.
    pub ranges: AtomicU64,
    /// Bytes that went into the compressors, and came out.
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

impl CompressCounters {
    fn coded(&self, coding: Coding) -> &AtomicU64 {
        match coding {
            Coding::Gzip => &self.gzip,
            Coding::Brotli => &self.br,
            Coding::Zstd => &self.zstd,
        }
    }
}

/// A route's compression settings and counters, shared by its filter and its edge cache.
pub struct Shared {
    pub plan: CompressPlan,
    pub counters: PerWorker<CompressCounters>,
}

/// One route's compression counters, for `/status` and `/metrics`.
pub struct CompressStats {
    /// `LISTENER PATH_PREFIX`, as `/status` names routes.
    pub route: String,
    pub shared: Arc<Shared>,
}

impl CompressStats {
    /// Every counter, summed over the workers, by name.
    pub fn totals(&self) -> Vec<(&'static str, i64)> {
        type Read = fn(&CompressCounters) -> &AtomicU64;
        let counters: [(&'static str, Read); 9] = [
            ("gzip", |c| &c.gzip),
            ("br", |c| &c.br),
            ("zstd", |c| &c.zstd),
            ("identity", |c| &c.identity),
            ("already_encoded", |c| &c.already_encoded),
            ("too_small", |c| &c.too_small),
            ("ranges", |c| &c.ranges),
            ("bytes_in", |c| &c.bytes_in),
            ("bytes_out", |c| &c.bytes_out),
        ];
        counters
            .iter()
            .map(|(name, counter)| (*name, self.shared.counters.sum(|c| read(counter(c)))))
            .collect()
    }
}

/// The compression step of a route.
pub struct Compress {
    shared: Arc<Shared>,
}

impl Compress {
    pub fn new(
        plan: &CompressPlan,
        workers: usize,
        route: &str,
        stats: &mut Vec<CompressStats>,
    ) -> Self {
        let shared = Arc::new(Shared {
            plan: plan.clone(),
            counters: PerWorker::new(workers.max(1)),
        });
        stats.push(CompressStats {
            route: route.to_owned(),
            shared: shared.clone(),
        });
        Compress { shared }
    }
}

/// What the step decided for a request, for its answer: the coding the client gets if the
/// answer qualifies (`None`: it accepts none), or that it asked for a range.
#[derive(Clone)]
pub struct Negotiated {
    pub shared: Arc<Shared>,
    pub coding: Option<Coding>,
    pub range: bool,
}

impl Filter for Compress {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        let range = request.headers().contains_key(header::RANGE);
        let coding = match range {
            true => None,
            false => accepted(request.headers(), &self.shared.plan.encodings),
        };
        if let Some(coding) = coding {
            // The upstream may encode in this coding only, and a cache keeps one variant per
            // coding rather than one per spelling of the header.
            request.headers_mut().insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static(coding.token()),
            );
        }
        let negotiated = Negotiated {
            shared: self.shared.clone(),
            coding,
            range,
        };
        request.extensions_mut().insert(negotiated.clone());
        exchange.notes.borrow_mut().insert(negotiated);
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        let Some(negotiated) = exchange.notes.borrow_mut().remove::<Negotiated>() else {
            return;
        };
        let length = body_length(response);
        let status = response.status();
        let Some(coding) =
            negotiated.prepare(status, response.headers_mut(), length, exchange.worker)
        else {
            return;
        };
        let coder = match Coder::new(coding, &self.shared.plan) {
            Ok(coder) => coder,
            Err(error) => {
                // The head says compressed already: the answer cannot go out as it is.
                tracing::warn!(%error, coding = coding.token(), "compressor failed to start");
                *response = ProxyError::UpstreamFailed.response();
                return;
            }
        };
        let inner = std::mem::replace(response.body_mut(), ProxyBody::Local(None));
        *response.body_mut() = ProxyBody::Compressed(Box::new(Compressing {
            inner,
            coder: Some(coder),
            unflushed: false,
            // An answer of unknown length may be a stream (events, a long poll): what it sent
            // goes out when it pauses. One with a length ends soon, compressed whole.
            flush_on_pause: length.is_none(),
            shared: self.shared.clone(),
            worker: exchange.worker,
        }));
    }
}

/// The coding the request's `Accept-Encoding` asks for, among `offered`.
fn accepted(headers: &HeaderMap, offered: &[Coding]) -> Option<Coding> {
    let mut values = headers.get_all(header::ACCEPT_ENCODING).iter();
    let first = values.next()?.to_str().ok()?;
    match values.next() {
        None => negotiate::choose(first, offered),
        Some(_) => {
            let joined: Vec<&str> = headers
                .get_all(header::ACCEPT_ENCODING)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            negotiate::choose(&joined.join(","), offered)
        }
    }
}

/// The answer's length: its `Content-Length`, else its body's exact size.
fn body_length(response: &Response<ProxyBody>) -> Option<u64> {
    response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| response.body().size_hint().exact())
}

impl Negotiated {
    /// Decides whether an answer of this status, with these headers and body length, goes out
    /// compressed, and rewrites its headers for that; the coding when it does. Counted.
    pub fn prepare(
        &self,
        status: StatusCode,
        headers: &mut HeaderMap,
        length: Option<u64>,
        worker: usize,
    ) -> Option<Coding> {
        let plan = &self.shared.plan;
        let counters = self.shared.counters.mine(worker);
        if status == StatusCode::NOT_MODIFIED && self.coding.is_some() {
            // It stands for the compressed copy the client holds, whose validator is weak.
            weaken_etag(headers);
            return None;
        }
        if status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return None;
        }
        if self.range || status == StatusCode::PARTIAL_CONTENT {
            bump(&counters.ranges);
            return None;
        }
        let listed = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| negotiate::type_listed(t, &plan.types));
        if !listed {
            return None;
        }
        let encoded = headers
            .get_all(header::CONTENT_ENCODING)
            .iter()
            .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        if encoded {
            vary_on(headers, "accept-encoding");
            bump(&counters.already_encoded);
            return None;
        }
        if length.is_some_and(|length| length < plan.min_length) {
            bump(&counters.too_small);
            return None;
        }
        vary_on(headers, "accept-encoding");
        let Some(coding) = self.coding else {
            bump(&counters.identity);
            return None;
        };
        bump(counters.coded(coding));
        headers.remove(header::CONTENT_ENCODING);
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(coding.token()),
        );
        headers.remove(header::CONTENT_LENGTH);
        headers.remove(header::ACCEPT_RANGES);
        weaken_etag(headers);
        Some(coding)
    }

    /// `body` compressed whole in `coding` (an edge cache's copy, read whole already).
    pub fn compress_whole(&self, coding: Coding, body: &[u8], worker: usize) -> io::Result<Bytes> {
        let mut coder = Coder::new(coding, &self.shared.plan)?;
        coder.write(body)?;
        let out = Bytes::from(coder.finish()?);
        let counters = self.shared.counters.mine(worker);
        add(&counters.bytes_in, body.len());
        add(&counters.bytes_out, out.len());
        Ok(out)
    }
}

/// `"x"` becomes `W/"x"`: the compressed bytes are not the ones the strong validator names.
fn weaken_etag(headers: &mut HeaderMap) {
    let Some(etag) = headers.get(header::ETAG) else {
        return;
    };
    if etag.as_bytes().starts_with(b"\"") {
        let mut weak = b"W/".to_vec();
        weak.extend_from_slice(etag.as_bytes());
        if let Ok(weak) = HeaderValue::from_bytes(&weak) {
            headers.insert(header::ETAG, weak);
        }
    }
}

/// A compressor writing into memory, drained a piece at a time.
enum Coder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

/// Brotli's window: 1 MiB (`lgwin` 20) bounds the memory a connection's compressor holds.
const BROTLI_WINDOW_BITS: u32 = 20;
/// Brotli's internal buffer between the compressor and its output.
const BROTLI_BUFFER: usize = 16 * 1024;

impl Coder {
    fn new(coding: Coding, plan: &CompressPlan) -> io::Result<Coder> {
        Ok(match coding {
            Coding::Gzip => Coder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(plan.gzip_level),
            )),
            Coding::Brotli => Coder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                plan.br_level,
                BROTLI_WINDOW_BITS,
            ))),
            Coding::Zstd => Coder::Zstd(zstd::stream::write::Encoder::new(
                Vec::new(),
                plan.zstd_level,
            )?),
        })
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Coder::Gzip(coder) => coder.write_all(data),
            Coder::Brotli(coder) => coder.write_all(data),
            Coder::Zstd(coder) => coder.write_all(data),
        }
    }

    /// Pushes out what was written so far (a sync flush), so a client sees a streamed answer's
    /// pieces when its upstream pauses (an answer of unknown length only: a flush costs CPU and
    /// ratio).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Coder::Gzip(coder) => coder.flush(),
            Coder::Brotli(coder) => coder.flush(),
            Coder::Zstd(coder) => coder.flush(),
        }
    }

    /// The compressed bytes produced so far.
    fn take(&mut self) -> Bytes {
        let out = match self {
            Coder::Gzip(coder) => coder.get_mut(),
            Coder::Brotli(coder) => coder.get_mut(),
            Coder::Zstd(coder) => coder.get_mut(),
        };
        Bytes::from(std::mem::take(out))
    }

    /// Ends the stream: the rest of the bytes, with the coding's trailer.
    fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Coder::Gzip(coder) => coder.finish(),
            Coder::Brotli(coder) => Ok(coder.into_inner()),
            Coder::Zstd(coder) => coder.finish(),
        }
    }
}

/// An answer's body compressed as it streams.
pub struct Compressing {
    inner: ProxyBody,
    /// `None` once the stream has ended.
    coder: Option<Coder>,
    /// Bytes written since the last flush.
    unflushed: bool,
    /// Whether a pause of the upstream flushes the compressor.
    flush_on_pause: bool,
    shared: Arc<Shared>,
    worker: usize,
}

impl Compressing {
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let counters = self.shared.counters.mine(self.worker);
        loop {
            let Some(coder) = self.coder.as_mut() else {
                return Poll::Ready(None);
            };
            let produced = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers reach no client (as for any relayed body).
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    add(&counters.bytes_in, data.len());
                    coder.write(&data)?;
                    self.unflushed = true;
                    coder.take()
                }
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => match self.coder.take() {
                    Some(coder) => Bytes::from(coder.finish()?),
                    None => return Poll::Ready(None),
                },
                Poll::Pending if self.unflushed && self.flush_on_pause => {
                    self.unflushed = false;
                    coder.flush()?;
                    let flushed = coder.take();
                    if flushed.is_empty() {
                        return Poll::Pending;
                    }
                    flushed
                }
                Poll::Pending => return Poll::Pending,
            };
            if !produced.is_empty() {
                add(&counters.bytes_out, produced.len());
                return Poll::Ready(Some(Ok(Frame::data(produced))));
            }
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.coder.is_none()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }

    /// Whether the compressed body is a backend's answer.
    pub(crate) fn inner(&self) -> &ProxyBody {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            plan: CompressPlan {
                encodings: vec![Coding::Gzip],
                types: vec!["text/*".into()],
                min_length: 4,
                gzip_level: 5,
                br_level: 4,
                zstd_level: 3,
            },
            counters: PerWorker::new(1),
        })
    }

    fn poll(body: &mut Compressing) -> Poll<Option<Bytes>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        body.poll(&mut cx)
            .map(|frame| frame.map(|f| f.unwrap().into_data().unwrap()))
    }

    #[test]
    fn a_streamed_answer_is_flushed_when_its_upstream_pauses() {
        let (pieces, receiver) = tokio::sync::mpsc::channel(4);
        let shared = shared();
        let mut body = Compressing {
            inner: ProxyBody::Chunks(receiver),
            coder: Some(Coder::new(Coding::Gzip, &shared.plan).unwrap()),
            unflushed: false,
            flush_on_pause: true,
            shared,
            worker: 0,
        };
        let mut decoded = flate2::write::GzDecoder::new(Vec::new());
        pieces
            .try_send(Bytes::from_static(b"data: TR-4821 teslim\n\n"))
            .unwrap();
        // The upstream has nothing more yet: what it sent so far comes out, flushed.
        while let Poll::Ready(Some(piece)) = poll(&mut body) {
            decoded.write_all(&piece).unwrap();
        }
        decoded.flush().unwrap();
        assert_eq!(decoded.get_ref().as_slice(), b"data: TR-4821 teslim\n\n");
        pieces
            .try_send(Bytes::from_static(b"data: son\n\n"))
            .unwrap();
        drop(pieces);
        while let Poll::Ready(Some(piece)) = poll(&mut body) {
            decoded.write_all(&piece).unwrap();
        }
        assert!(body.is_end_stream());
        let decoded = decoded.finish().unwrap();
        assert_eq!(decoded, b"data: TR-4821 teslim\n\ndata: son\n\n");
        let counters = body.shared.counters.mine(0);
        assert_eq!(read(&counters.bytes_in), 33);
    }

    #[test]
    fn only_listed_types_at_the_minimum_size_are_compressed_and_never_twice() {
        let negotiated = Negotiated {
            shared: shared(),
            coding: Some(Coding::Gzip),
            range: false,
        };
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.append(*name, HeaderValue::from_static(value));
            }
            headers
        };
        let mut plain = headers(&[
            ("content-type", "text/plain"),
            ("etag", "\"v1\""),
            ("vary", "origin"),
        ]);
        let chosen = negotiated.prepare(StatusCode::OK, &mut plain, Some(100), 0);
        assert_eq!(chosen, Some(Coding::Gzip));
        assert_eq!(plain["content-encoding"], "gzip");
        assert_eq!(plain["etag"], "W/\"v1\"");
        let vary: Vec<_> = plain.get_all("vary").iter().collect();
        assert_eq!(vary, ["origin", "accept-encoding"]);
        let mut image = headers(&[("content-type", "image/png")]);
        assert_eq!(
            negotiated.prepare(StatusCode::OK, &mut image, Some(100), 0),
            None
        );
        assert!(!image.contains_key("vary"));
        let mut small = headers(&[("content-type", "text/plain")]);
        assert_eq!(
            negotiated.prepare(StatusCode::OK, &mut small, Some(3), 0),
            None
        );
        let mut encoded = headers(&[("content-type", "text/plain"), ("content-encoding", "br")]);
        assert_eq!(
            negotiated.prepare(StatusCode::OK, &mut encoded, None, 0),
            None
        );
        assert_eq!(encoded["content-encoding"], "br");
        assert_eq!(encoded["vary"], "accept-encoding");
        let mut unchanged = headers(&[("etag", "\"v1\"")]);
        assert_eq!(
            negotiated.prepare(StatusCode::NOT_MODIFIED, &mut unchanged, None, 0),
            None
        );
        assert_eq!(unchanged["etag"], "W/\"v1\"");
    }
}
