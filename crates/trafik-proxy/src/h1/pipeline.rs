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
use crate::connections::Control;
use crate::error::ProxyError;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::service::{ClientConnection, WorkerProxy};

/// Serves `request` through the pipeline when it carries no body and asks for no protocol
/// switch; else (and for a head `http` cannot hold) `Defer`, with nothing sent. On a draining
/// connection the answer says `Connection: close`.
pub(super) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    proxy: &WorkerProxy,
    client: &ClientConnection,
    connection: &mut Connection<S>,
    request: &RequestHead,
    control: &Control,
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
        request.close || control.should_drain(),
    )
    .await;
    if !matches!(written, Ok(true)) {
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

/// Writes `answer` as HTTP/1.1 framed as hyper's server frames it: by its length (its
/// `Content-Length`, else its body's exact size), else in chunks; no body (and no framing
/// field) after 204 or 304, no body after `HEAD`. An interim (1xx) answer cannot be final: it
/// becomes trafik's 502 (hyper's server makes it a 500) and closes the connection, as a 101
/// does. `Ok(true)` when the
/// connection may carry another request. A body that breaks, or that is longer or shorter than
/// its length, leaves the client a cut answer (`Err`: the connection closes).
pub(super) async fn write_answer<W: AsyncWrite + Unpin>(
    client: &mut W,
    out: &mut Vec<u8>,
    answer: Response<ProxyBody>,
    head_request: bool,
    close: bool,
) -> io::Result<bool> {
    let interim =
        answer.status().is_informational() && answer.status() != StatusCode::SWITCHING_PROTOCOLS;
    let answer = match interim {
        true => ProxyError::UpstreamFailed.response(),
        false => answer,
    };
    let (parts, mut body) = answer.into_parts();
    let status = parts.status;
    let close = close
        || interim
        || status == StatusCode::SWITCHING_PROTOCOLS
        || parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|value| has_token(value.as_bytes(), b"close"));
    let bodiless_status = status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || status == StatusCode::SWITCHING_PROTOCOLS;
    let length = if bodiless_status {
        None
    } else {
        declared_length(&parts.headers).or(body.size_hint().exact())
    };
    let chunked = !bodiless_status && !head_request && length.is_none();
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        // The framing is written once, below, as decided here.
        if name == header::CONNECTION
            || name == header::TRANSFER_ENCODING
            || name == header::CONTENT_LENGTH
        {
            continue;
        }
        head::write_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(length) = length {
        head::write_field(out, b"content-length", length.to_string().as_bytes());
    }
    if chunked {
        head::write_field(out, b"transfer-encoding", b"chunked");
    }
    if close {
        head::write_field(out, b"connection", b"close");
    }
    if !parts.headers.contains_key(header::DATE) {
        date::field(out);
    }
    out.extend_from_slice(b"\r\n");
    if bodiless_status || head_request {
        client.write_all(out).await?;
        client.flush().await?;
        return Ok(!close);
    }
    let mut sent = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame.map_err(io::Error::other)?.into_data() else {
            continue;
        };
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
    client.write_all(out).await?;
    // Behind TLS, the answer's end may still sit in the session's buffer (a no-op on TCP).
    client.flush().await?;
    Ok(!close)
}

/// The answer's `Content-Length`, when its fields agree on one (`5, 5` included); `None` for
/// none or for values that disagree, and the body's own size decides.
fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    let mut agreed = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.to_str().ok()?.split(',') {
            let length = part.trim().parse::<u64>().ok()?;
            if agreed.is_some_and(|agreed| agreed != length) {
                return None;
            }
            agreed = Some(length);
        }
    }
    agreed
}

/// Whether the comma-separated `value` lists `token`, in any case.
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|part| part.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client reads for `answer`, and whether the connection may go on.
    fn written(answer: Response<ProxyBody>, head_request: bool) -> (String, io::Result<bool>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut client = Vec::new();
        let mut out = Vec::new();
        let kept = runtime.block_on(write_answer(
            &mut client,
            &mut out,
            answer,
            head_request,
            false,
        ));
        let text = String::from_utf8(client).unwrap();
        // The date changes; the rest reads as written.
        let text = text
            .lines()
            .filter(|line| !line.starts_with("date: "))
            .collect::<Vec<_>>()
            .join("\n");
        (text, kept)
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: ProxyBody) -> Response<ProxyBody> {
        let mut answer = Response::new(body);
        *answer.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in headers {
            answer.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        answer
    }

    fn streamed(pieces: &[&'static str]) -> ProxyBody {
        let (sender, receiver) = tokio::sync::mpsc::channel(pieces.len().max(1));
        for piece in pieces {
            sender
                .try_send(bytes::Bytes::from_static(piece.as_bytes()))
                .unwrap();
        }
        ProxyBody::Chunks(receiver)
    }

    #[test]
    fn a_body_of_known_size_goes_with_its_length() {
        let (text, kept) = written(answer(200, &[], ProxyBody::local("merhaba")), false);
        assert_eq!(text, "HTTP/1.1 200 OK\ncontent-length: 7\n\nmerhaba");
        assert!(kept.unwrap());
    }

    #[test]
    fn a_body_of_unknown_size_goes_in_chunks() {
        let body = streamed(&["mer", "haba"]);
        let (text, kept) = written(answer(200, &[("transfer-encoding", "gzip")], body), false);
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\ntransfer-encoding: chunked\n\n3\nmer\n4\nhaba\n0\n"
        );
        assert!(kept.unwrap());
    }

    #[test]
    fn a_204_and_a_304_carry_no_framing_and_no_body() {
        for status in [204, 304] {
            let named = answer(
                status,
                &[("content-length", "5")],
                ProxyBody::local("12345"),
            );
            let (text, kept) = written(named, false);
            assert!(!text.contains("content-length"), "{text}");
            assert!(!text.contains("12345"), "{text}");
            assert!(kept.unwrap());
        }
    }

    #[test]
    fn an_interim_status_cannot_be_the_final_answer() {
        let (text, kept) = written(answer(103, &[], ProxyBody::local("")), false);
        assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\n"), "{text}");
        assert!(text.contains("connection: close"), "{text}");
        assert!(!kept.unwrap());
    }

    #[test]
    fn lengths_that_agree_are_written_once_and_a_close_is_kept() {
        let doubled = answer(
            200,
            &[("content-length", "5, 5"), ("connection", "close")],
            ProxyBody::local("12345"),
        );
        let (text, kept) = written(doubled, false);
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\ncontent-length: 5\nconnection: close\n\n12345"
        );
        assert!(!kept.unwrap());
    }

    #[test]
    fn a_head_answer_names_the_length_and_sends_no_body() {
        let (text, kept) = written(answer(200, &[], ProxyBody::local("merhaba")), true);
        assert_eq!(text, "HTTP/1.1 200 OK\ncontent-length: 7\n");
        assert!(kept.unwrap());
    }

    #[test]
    fn a_body_shorter_or_longer_than_its_length_cuts_the_connection() {
        for (length, pieces) in [("9", &["mer", "haba"]), ("3", &["mer", "haba"])] {
            let body = streamed(pieces);
            let (_, kept) = written(answer(200, &[("content-length", length)], body), false);
            assert!(kept.is_err(), "{length}");
        }
    }
}
