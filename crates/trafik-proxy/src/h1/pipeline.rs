//! Requests whose route needs the full pipeline (configured filters, caches, static files,
//! gateway targets, the hop trace, no route at all): the own engine reads the request and
//! writes the answer, and the pipeline every engine shares decides ([`WorkerProxy::handle`]).
//! A request with a body or an upgrade still goes to hyper with its connection.

use std::io;

use bytes::Buf;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::head::{self, MAX_HEADERS, RequestHead};
use super::{Connection, Exchanged, date};
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::service::{ClientConnection, WorkerProxy};

/// Serves `request` through the pipeline when it carries no body and asks for no protocol
/// switch; else (and for a head `http` cannot hold) `Defer`, with nothing sent.
pub(super) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    proxy: &WorkerProxy,
    client: &ClientConnection,
    connection: &mut Connection<S>,
    request: &RequestHead,
) -> Exchanged {
    let bodiless = request.body == 0 && !request.chunked && !request.expect_continue;
    if !bodiless || request.upgrade {
        return Exchanged::Defer;
    }
    let Some(asked) = http_request(&connection.input, request) else {
        return Exchanged::Defer;
    };
    let answer = proxy.handle(client, asked).await;
    let head_request = request.method == Method::HEAD;
    let written = write_answer(
        &mut connection.client,
        &mut connection.relay,
        answer,
        head_request,
        request.close,
    )
    .await;
    if written.is_err() || request.close {
        return Exchanged::Close;
    }
    connection.input.drain(..request.length);
    Exchanged::KeepAlive
}

/// The request as the pipeline reads it: the head at the start of `input` (parsed once
/// already, so `None` only for a field `http` refuses, which hyper then answers).
fn http_request(input: &[u8], request: &RequestHead) -> Option<http::Request<RequestBody>> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(&input[..request.length]) else {
        return None;
    };
    let mut asked = http::Request::new(RequestBody::empty());
    *asked.method_mut() = request.method.clone();
    *asked.uri_mut() = http::Uri::try_from(head::ascii(&input[request.target.clone()])).ok()?;
    let headers = asked.headers_mut();
    headers.reserve(parsed.headers.len());
    for field in parsed.headers.iter() {
        headers.append(
            HeaderName::from_bytes(field.name.as_bytes()).ok()?,
            HeaderValue::from_bytes(field.value).ok()?,
        );
    }
    Some(asked)
}

/// Writes `answer` as HTTP/1.1 framed as hyper's server frames it: by its `Content-Length`, by
/// its body's exact size, else in chunks; no body after `HEAD`, 1xx, 204 or 304. A body that
/// breaks, or ends short of its length, leaves the client a cut answer (`Err`: the connection
/// closes).
async fn write_answer<W: AsyncWrite + Unpin>(
    client: &mut W,
    out: &mut Vec<u8>,
    answer: Response<ProxyBody>,
    head_request: bool,
    close: bool,
) -> io::Result<()> {
    let (parts, mut body) = answer.into_parts();
    let status = parts.status;
    let bodiless = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    let exact = body.size_hint().exact();
    let chunked = !bodiless && declared.is_none() && exact.is_none();
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == header::CONNECTION || name == header::TRANSFER_ENCODING {
            continue;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let length = match (declared, exact) {
        (Some(declared), _) => Some(declared),
        (None, Some(exact)) if !bodiless => {
            field(out, b"content-length", exact.to_string().as_bytes());
            Some(exact)
        }
        _ => None,
    };
    if chunked {
        field(out, b"transfer-encoding", b"chunked");
    }
    if close {
        field(out, b"connection", b"close");
    }
    if !parts.headers.contains_key(header::DATE) {
        date::field(out);
    }
    out.extend_from_slice(b"\r\n");
    if bodiless {
        return client.write_all(out).await;
    }
    let mut sent = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(io::Error::other)?.into_data() else {
            continue;
        };
        let mut data = data;
        if data.is_empty() {
            continue;
        }
        sent += data.len() as u64;
        if length.is_some_and(|length| sent > length) {
            return Err(io::ErrorKind::InvalidData.into());
        }
        if chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        // The head goes out with the first data, in one write when it is small.
        if out.len() + data.len() <= 16 * 1024 {
            out.extend_from_slice(&data);
            data.advance(data.len());
        }
        client.write_all(out).await?;
        out.clear();
        if data.has_remaining() {
            client.write_all(&data).await?;
        }
        if chunked {
            out.extend_from_slice(b"\r\n");
        }
    }
    if chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    } else if length.is_some_and(|length| sent < length) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if !out.is_empty() {
        client.write_all(out).await?;
    }
    Ok(())
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
