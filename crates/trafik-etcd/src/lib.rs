//! A small etcd v3 client over etcd's JSON gateway (`/v3/kv/range`, `/v3/kv/put`,
//! `/v3/lease/grant`, `/v3/lease/keepalive`, `/v3/watch`; keys and values in base64).
//!
//! The gateway is part of every etcd server, so this needs no gRPC stack and no `protoc` at build
//! time — only the hyper client the proxy already builds. One connection per call: the calls
//! are control traffic (a configuration change, a heartbeat a second).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};

/// How long one call may take before etcd counts as unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

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
            let text = response
                .into_body()
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            return Err(EtcdError(format!(
                "etcd answered {status} to {path}: {text}"
            )));
        }
        Ok(response.into_body())
    }

    async fn call(&self, path: &str, body: Value) -> Result<Value, EtcdError> {
        let incoming = self.send(path, &body).await?;
        let bytes = tokio::time::timeout(CALL_TIMEOUT, incoming.collect())
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
        })
    }
}

/// A running watch: the gateway streams one JSON object per event batch.
pub struct Watch {
    body: Incoming,
    buffer: BytesMut,
}

impl Watch {
    /// The next batch of changed keys (deleted ones marked `deleted`). An error when the
    /// stream ends: etcd went away, and the caller watches again.
    pub async fn next(&mut self) -> Result<Vec<KeyValue>, EtcdError> {
        loop {
            let mut stream =
                serde_json::Deserializer::from_slice(&self.buffer).into_iter::<Value>();
            if let Some(Ok(message)) = stream.next() {
                let used = stream.byte_offset();
                self.buffer.advance(used);
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
