//! One request to a running instance's admin API, for `trafik reload`, `trafik top` and
//! `trafik explain --admin`: a plain
//! HTTP/1.1 exchange with the bearer token from `TRAFIK_ADMIN_TOKEN` (so it shows in no process
//! listing).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `METHOD path` to `admin`; the answer's status and its body parsed as JSON.
pub fn exchange(
    admin: SocketAddr,
    method: &str,
    path: &str,
    timeout: Duration,
) -> Result<(u16, serde_json::Value), String> {
    send(admin, method, path, "", timeout)
}

/// [`exchange`] with a JSON `body`.
pub fn send(
    admin: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<(u16, serde_json::Value), String> {
    let unreachable = |e: std::io::Error| {
        format!(
            "no admin API answers on {admin}: {e}; is `trafik serve` running with an [admin] section (or pass --admin)?"
        )
    };
    let mut stream =
        TcpStream::connect_timeout(&admin, Duration::from_secs(5)).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(unreachable)?;
    let authorization = std::env::var("TRAFIK_ADMIN_TOKEN")
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {admin}\r\n{authorization}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(unreachable)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{admin} did not answer with HTTP"))?;
    let status = head.split(' ').nth(1).unwrap_or("");
    let json = serde_json::from_str(body)
        .map_err(|_| format!("{admin} answered {status} without JSON: {body}"))?;
    Ok((status.parse().unwrap_or(0), json))
}
