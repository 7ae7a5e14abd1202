//! A small etcd v3 client over etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/put`,
//! `/v3/lease/grant`, `/v3/lease/keepalive`, `/v3/watch`; keys and values in base64).
//!
//! The gateway is part of every etcd server, so this needs no gRPC stack and no `protoc` at build
//! time — only the hyper client the proxy already builds. One connection per call: the calls
//! are control traffic (a configuration change, a heartbeat a second).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};

/// How long one call may take before etcd counts as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The most of one answer (or one watch message) read: far above what trafik keeps in etcd
/// (configurations, registrations, load results), and a bound on what a broken or hostile
/// endpoint can make an agent hold.
const ANSWER_LIMIT: usize = 64 << 20;

/// The most of an error answer's text kept for the message.
const ERROR_TEXT_LIMIT: usize = 1024;

/// etcd did not answer, or answered with an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdError(pub String);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EtcdError {}

/// A key's value and the revision that last changed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    /// A watch saw the key deleted (at `mod_revision`); `value` is empty.
    pub deleted: bool,
}

/// One etcd endpoint, `http://host:port`.
#[derive(Clone, Debug)]
pub struct Etcd {
    authority: String,
}

impl Etcd {
    pub fn new(url: &str) -> Result<Etcd, EtcdError> {
        let authority = url
            .strip_prefix("http://")
            .map(|rest| rest.trim_end_matches('/'))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .ok_or_else(|| {
                EtcdError(format!(
                    "expected an etcd URL such as http://127.0.0.1:2379, got {url:?}"
                ))
            })?;
        Ok(Etcd {
            authority: authority.to_owned(),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.authority)
    }

    /// POSTs `body` to `path` and returns the response body once the head has arrived.
    async fn send(&self, path: &str, body: &Value) -> Result<Incoming, EtcdError> {
        let unreachable = |e: &dyn std::fmt::Display| {
            EtcdError(format!("etcd at {} did not answer: {e}", self.url()))
        };
        let stream = tokio::time::timeout(
            CALL_TIMEOUT,
            tokio::net::TcpStream::connect(&self.authority),
        )
        .await
        .map_err(|e| unreachable(&e))?
        .map_err(|e| unreachable(&e))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(&e))?;
        tokio::spawn(connection);
        let request = http::Request::post(path)
            .header(http::header::HOST, &self.authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| unreachable(&e))?;
        let response = tokio::time::timeout(CALL_TIMEOUT, sender.send_request(request))
            .await
            .map_err(|e| unreachable(&e))?
            .map_err(|e| unreachable(&e))?;
        if !response.status().is_success() {
            let status = response.status();
            let mut body = response.into_body();
            let mut text = Vec::new();
            // As much of the reason as arrives in time, up to its bound.
            let _ = tokio::time::timeout(CALL_TIMEOUT, async {
                while text.len() < ERROR_TEXT_LIMIT {
                    match body.frame().await {
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                text.extend_from_slice(&data);
                            }
                        }
                        _ => break,
                    }
                }
            })
            .await;
            text.truncate(ERROR_TEXT_LIMIT);
            let text = String::from_utf8_lossy(&text);
            return Err(EtcdError(format!(
                "etcd answered {status} to {path}: {}",
                text.trim_end()
            )));
        }
        Ok(response.into_body())
    }

    async fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let incoming = self.send(path, &body).await?;
        let bytes =
            tokio::time::timeout(CALL_TIMEOUT, Limited::new(incoming, ANSWER_LIMIT).collect())
                .await
                .map_err(|_| EtcdError(format!("etcd at {} stopped answering", self.url())))?
                .map_err(|e| EtcdError(format!("etcd at {} broke off: {e}", self.url())))?
                .to_bytes();
        serde_json::from_slice(&bytes)
            .map_err(|e| EtcdError(format!("etcd answered {path} without JSON: {e}")))
    }

    /// The key's value, or `None` when it is not set.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, EtcdError> {
        let answer = self
            .call("/v3/kv/range", json!({ "key": BASE64.encode(key) }))
            .await?;
        Ok(key_values(&answer["kvs"]).into_iter().next())
    }

    /// The key's value, or `None`, and the store's revision at the read: a watch from the
    /// revision after it misses no change, the key's first creation included.
    pub async fn get_with_revision(&self, key: &str) -> Result<(Option<KeyValue>, i64), EtcdError> {
        let answer = self
            .call("/v3/kv/range", json!({ "key": BASE64.encode(key) }))
            .await?;
        let revision = integer(&answer["header"]["revision"]);
        Ok((key_values(&answer["kvs"]).into_iter().next(), revision))
    }

    /// Removes `key`; returns the store's revision after the delete.
    pub async fn delete(&self, key: &str) -> Result<i64, EtcdError> {
        let answer = self
            .call("/v3/kv/deleterange", json!({ "key": BASE64.encode(key) }))
            .await?;
        Ok(integer(&answer["header"]["revision"]))
    }

    /// Every key under `prefix`.
    pub async fn list(&self, prefix: &str) -> Result<Vec<KeyValue>, EtcdError> {
        let answer = self
            .call(
                "/v3/kv/range",
                json!({ "key": BASE64.encode(prefix), "range_end": BASE64.encode(prefix_end(prefix)) }),
            )
            .await?;
        Ok(key_values(&answer["kvs"]))
    }

    /// Sets `key`, bound to `lease` when given (the key goes when the lease expires); returns
    /// the store's revision after the write.
    pub async fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<i64, EtcdError> {
        let mut body = json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) });
        if let Some(lease) = lease {
            body["lease"] = json!(lease.to_string());
        }
        let answer = self.call("/v3/kv/put", body).await?;
        Ok(integer(&answer["header"]["revision"]))
    }

    /// Sets `key` only if it does not exist (a transaction comparing its create revision with
    /// 0), bound to `lease` when given; false when another writer holds it. This is the lock
    /// a fleet takes: whoever creates the key holds it until deleting it or the lease ends.
    pub async fn create(
        &self,
        key: &str,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<bool, EtcdError> {
        let mut put = json!({ "key": BASE64.encode(key), "value": BASE64.encode(value) });
        if let Some(lease) = lease {
            put["lease"] = json!(lease.to_string());
        }
        let body = json!({
            "compare": [{ "key": BASE64.encode(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": put }],
        });
        let answer = self.call("/v3/kv/txn", body).await?;
        Ok(answer["succeeded"].as_bool().unwrap_or(false))
    }

    /// A new lease that expires after `ttl` without a keep-alive.
    pub async fn grant(&self, ttl: Duration) -> Result<i64, EtcdError> {
        let answer = self
            .call(
                "/v3/lease/grant",
                json!({ "TTL": ttl.as_secs().max(1).to_string() }),
            )
            .await?;
        match integer(&answer["ID"]) {
            0 => Err(EtcdError(format!("etcd granted no lease: {answer}"))),
            id => Ok(id),
        }
    }

    /// Renews `lease`; false when it has already expired (its keys are gone).
    pub async fn keep_alive(&self, lease: i64) -> Result<bool, EtcdError> {
        let answer = self
            .call("/v3/lease/keepalive", json!({ "ID": lease.to_string() }))
            .await?;
        Ok(integer(&answer["result"]["TTL"]) > 0)
    }

    /// Watches `key` for changes from `from_revision` on.
    pub async fn watch(&self, key: &str, from_revision: i64) -> Result<Watch, EtcdError> {
        let body = json!({ "create_request": {
            "key": BASE64.encode(key),
            "start_revision": from_revision.to_string(),
        }});
        Ok(Watch {
            body: self.send("/v3/watch", &body).await?,
            buffer: BytesMut::new(),
            searched: 0,
        })
    }
}

/// A running watch: the gateway streams one JSON object per event batch, each ended by a
/// newline.
pub struct Watch {
    body: Incoming,
    buffer: BytesMut,
    /// How much of `buffer` is known to hold no newline: each byte is searched once, however
    /// many frames a long message comes in.
    searched: usize,
}

impl Watch {
    /// The next batch of changed keys (deleted ones marked `deleted`). An error when the
    /// stream ends, breaks, is not JSON or sends a message past [`ANSWER_LIMIT`]: the caller
    /// watches again.
    pub async fn next(&mut self) -> Result<Vec<KeyValue>, EtcdError> {
        loop {
            if let Some(end) = self.buffer[self.searched..]
                .iter()
                .position(|&byte| byte == b'\n')
            {
                let line = self.buffer.split_to(self.searched + end + 1);
                self.searched = 0;
                if line.trim_ascii().is_empty() {
                    continue;
                }
                let message: Value = serde_json::from_slice(&line)
                    .map_err(|e| EtcdError(format!("etcd's watch stream is not JSON: {e}")))?;
                if let Some(error) = message.get("error") {
                    return Err(EtcdError(format!("etcd ended the watch: {error}")));
                }
                let result = &message["result"];
                if result["canceled"].as_bool() == Some(true) {
                    return Err(EtcdError(format!("etcd cancelled the watch: {result}")));
                }
                let changed: Vec<KeyValue> = result["events"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|event| {
                        let mut kv = key_value(&event["kv"])?;
                        kv.deleted = event["type"] == "DELETE";
                        Some(kv)
                    })
                    .collect();
                if changed.is_empty() {
                    continue;
                }
                return Ok(changed);
            }
            self.searched = self.buffer.len();
            if self.buffer.len() > ANSWER_LIMIT {
                return Err(EtcdError(format!(
                    "etcd's watch sent a message of more than {ANSWER_LIMIT} bytes"
                )));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(EtcdError(format!("the etcd watch broke: {e}"))),
                None => return Err(EtcdError("etcd closed the watch".into())),
            }
        }
    }
}

/// The first key after every key that starts with `prefix` (etcd's `range_end`).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The gateway writes 64-bit integers as JSON strings.
fn integer(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap_or(0),
        other => other.as_i64().unwrap_or(0),
    }
}

fn key_value(kv: &Value) -> Option<KeyValue> {
    let decode = |field: &Value| BASE64.decode(field.as_str().unwrap_or("")).ok();
    Some(KeyValue {
        key: String::from_utf8(decode(&kv["key"])?).ok()?,
        value: decode(&kv["value"])?,
        mod_revision: integer(&kv["mod_revision"]),
        deleted: false,
    })
}

fn key_values(kvs: &Value) -> Vec<KeyValue> {
    kvs.as_array()
        .into_iter()
        .flatten()
        .filter_map(key_value)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An endpoint that answers one request with `head`, then writes `chunks` (as chunked
    /// body parts) one every 10 ms, repeating the last for ever while `endless`; it then holds
    /// the connection open.
    async fn endpoint(head: &'static str, chunks: Vec<String>, endless: bool) -> Etcd {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buffer = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buffer[..n]),
                }
            }
            let mut written = stream.write_all(head.as_bytes()).await;
            let mut chunks =
                chunks
                    .iter()
                    .cycle()
                    .take(if endless { usize::MAX } else { chunks.len() });
            while written.is_ok()
                && let Some(chunk) = chunks.next()
            {
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                written = stream.write_all(framed.as_bytes()).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Held open: the client decides when it has read enough.
            let _ = stream.read(&mut buffer).await;
        });
        Etcd::new(&format!("http://{address}")).unwrap()
    }

    /// A guard against the old behaviour (waiting for ever); never reached when it passes.
    async fn ends<T>(call: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the call ended")
    }

    #[tokio::test]
    async fn an_error_answer_that_never_ends_is_told_by_its_first_kilobyte() {
        let etcd = endpoint(
            "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n",
            vec!["x".repeat(100)],
            true,
        )
        .await;
        let error = ends(etcd.get("/t/config")).await.unwrap_err();
        assert!(error.0.starts_with("etcd answered 500"), "{error}");
        assert!(error.0.len() < ERROR_TEXT_LIMIT + 200, "{}", error.0.len());
    }

    #[tokio::test]
    async fn a_watch_stream_that_is_not_json_ends_the_watch_instead_of_growing() {
        let event = json!({ "result": { "events": [
            { "kv": { "key": BASE64.encode("/t/config"), "value": BASE64.encode("x"), "mod_revision": "9" } }
        ]}});
        let etcd = endpoint(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            vec![
                format!("{event}\n"),
                "{\"result\": nope}\n".to_owned(),
                format!("{event}\n"),
            ],
            false,
        )
        .await;
        let mut watch = etcd.watch("/t/config", 1).await.unwrap();
        let first = ends(watch.next()).await.unwrap();
        assert_eq!(first[0].mod_revision, 9);
        let broken = ends(watch.next()).await.unwrap_err();
        assert!(broken.0.contains("not JSON"), "{broken}");
    }

    #[tokio::test]
    async fn a_watch_message_in_many_frames_is_read_whole() {
        let event = json!({ "result": { "events": [
            { "kv": { "key": BASE64.encode("/t/config"), "value": BASE64.encode("y".repeat(3000)), "mod_revision": "4" } }
        ]}})
        .to_string()
            + "\n";
        let pieces = event
            .as_bytes()
            .chunks(100)
            .map(|piece| String::from_utf8(piece.to_vec()).unwrap())
            .collect();
        let etcd = endpoint(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            pieces,
            false,
        )
        .await;
        let mut watch = etcd.watch("/t/config", 1).await.unwrap();
        let changed = ends(watch.next()).await.unwrap();
        assert_eq!(changed[0].value.len(), 3000);
    }

    #[test]
    fn a_prefix_ends_at_its_last_byte_plus_one() {
        assert_eq!(prefix_end("/trafik/instances/"), b"/trafik/instances0");
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80");
    }

    #[test]
    fn the_gateway_writes_integers_as_strings() {
        assert_eq!(integer(&json!("694d77aa9e38260f")), 0);
        assert_eq!(integer(&json!("7587853211348186127")), 7587853211348186127);
        assert_eq!(integer(&json!(12)), 12);
    }

    #[test]
    fn urls_other_than_plain_http_are_refused() {
        assert!(Etcd::new("http://127.0.0.1:2379").is_ok());
        assert!(Etcd::new("https://127.0.0.1:2379").is_err());
        assert!(Etcd::new("127.0.0.1:2379").is_err());
        assert!(Etcd::new("http://127.0.0.1:2379/v3").is_err());
    }

    #[test]
    fn key_values_decode_base64() {
        let kvs = json!([{ "key": BASE64.encode("/t/config"), "value": BASE64.encode("x = 1"), "mod_revision": "7" }]);
        assert_eq!(
            key_values(&kvs),
            [KeyValue {
                key: "/t/config".into(),
                value: b"x = 1".to_vec(),
                mod_revision: 7,
                deleted: false,
            }]
        );
    }
}
