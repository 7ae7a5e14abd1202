//! What to send: one authority, and request paths from a template or a list.

use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};

/// The requests of a run: method, headers, body and the paths to cycle through.
#[derive(Clone, Debug)]
pub struct Target {
    pub address: SocketAddr,
    /// `host[:port]` as written, for the `Host` header.
    pub authority: String,
    /// `https://`: connections speak TLS to `server_name`.
    pub tls: bool,
    /// The host without the port, for TLS's server name.
    pub server_name: String,
    pub method: http::Method,
    pub headers: Vec<(String, String)>,
    pub body: bytes::Bytes,
    paths: Vec<PathTemplate>,
}

/// A path with `{n}` placeholders for the request number.
#[derive(Clone, Debug)]
struct PathTemplate {
    parts: Vec<String>,
}

impl PathTemplate {
    fn new(path: &str) -> Self {
        PathTemplate {
            parts: path.split("{n}").map(str::to_owned).collect(),
        }
    }

    fn is_fixed(&self) -> bool {
        self.parts.len() == 1
    }

    fn render(&self, n: u64, out: &mut String) {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                let _ = write!(out, "{n}");
            }
            out.push_str(part);
        }
    }
}

/// `http[s]://host[:port]/path` → (TLS or not, authority, path).
pub fn parse_url(url: &str) -> Result<(bool, String, String), String> {
    let (tls, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => {
            return Err(format!(
                "{url}: expected a URL such as http://127.0.0.1:8080/takip/TR-{{n}}"
            ));
        }
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("{url}: the URL has no host"));
    }
    Ok((tls, authority.to_owned(), path.to_owned()))
}

/// `http://host:port/path` → (authority, path), for what speaks plain HTTP only (scenario
/// steps, a counters endpoint).
pub fn split_url(url: &str) -> Result<(String, String), String> {
    match parse_url(url)? {
        (true, _, _) => Err(format!(
            "{url}: https is not supported here yet; use http://"
        )),
        (false, authority, path) => Ok((authority, path)),
    }
}

/// The host of `host[:port]` without the port (or an IPv6 address's brackets), for TLS's
/// server name.
pub fn server_name(authority: &str) -> String {
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => authority,
    };
    host.trim_matches(['[', ']']).to_owned()
}

/// The address of `host[:port]` (`default_port` when none is written).
pub fn resolve(authority: &str, default_port: u16) -> Result<SocketAddr, String> {
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority} resolves to no address"))
}

impl Target {
    /// A target from the main URL and optional further URLs (all on the same authority).
    pub fn new(
        urls: &[String],
        method: http::Method,
        headers: Vec<(String, String)>,
        body: bytes::Bytes,
    ) -> Result<Self, String> {
        let (tls, authority, _) = parse_url(urls.first().ok_or("no URL given")?)?;
        let mut paths = Vec::new();
        for url in urls {
            let (this_tls, this_authority, path) = parse_url(url)?;
            if this_authority != authority || this_tls != tls {
                return Err(format!(
                    "{url}: every URL of a run must use {}://{authority}, the first URL's scheme, host and port",
                    if tls { "https" } else { "http" }
                ));
            }
            paths.push(PathTemplate::new(&path));
        }
        Ok(Target {
            address: resolve(&authority, if tls { 443 } else { 80 })?,
            tls,
            server_name: server_name(&authority),
            authority,
            method,
            headers,
            body,
            paths,
        })
    }

    /// Whether every request is the same (no `{n}` and a single path).
    pub fn is_fixed(&self) -> bool {
        self.paths.len() == 1 && self.paths[0].is_fixed()
    }

    /// The path of request `n`: the list is cycled, `{n}` replaced by `n`.
    pub fn path(&self, n: u64, out: &mut String) {
        out.clear();
        self.paths[(n % self.paths.len() as u64) as usize].render(n, out);
    }

    /// The whole HTTP/1.1 request `n` as bytes.
    pub fn http1_request(&self, n: u64, path: &mut String, out: &mut Vec<u8>) {
        self.path(n, path);
        out.clear();
        let _ = write!(
            Writer(out),
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method,
            path,
            self.authority
        );
        for (name, value) in &self.headers {
            let _ = write!(Writer(out), "{name}: {value}\r\n");
        }
        let needs_length = !self.body.is_empty()
            || matches!(
                self.method,
                http::Method::POST | http::Method::PUT | http::Method::PATCH
            );
        if needs_length {
            let _ = write!(Writer(out), "Content-Length: {}\r\n", self.body.len());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
    }
}

/// `fmt::Write` into a byte vector.
struct Writer<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_and_lists_give_each_request_its_path() {
        let urls = vec![
            "http://127.0.0.1:8080/takip/TR-{n}".to_owned(),
            "http://127.0.0.1:8080/takip?no={n}&x={n}".to_owned(),
        ];
        let target = Target::new(&urls, http::Method::GET, vec![], bytes::Bytes::new()).unwrap();
        let mut path = String::new();
        target.path(6, &mut path);
        assert_eq!(path, "/takip/TR-6");
        target.path(7, &mut path);
        assert_eq!(path, "/takip?no=7&x=7");
        assert!(!target.is_fixed());
    }

    #[test]
    fn the_http1_request_carries_host_headers_and_body() {
        let urls = vec!["http://localhost:9/olay".to_owned()];
        let target = Target::new(
            &urls,
            http::Method::POST,
            vec![("x-a".into(), "1".into())],
            bytes::Bytes::from_static(b"{}"),
        )
        .unwrap();
        let (mut path, mut out) = (String::new(), Vec::new());
        target.http1_request(0, &mut path, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /olay HTTP/1.1\r\nHost: localhost:9\r\nx-a: 1\r\nContent-Length: 2\r\n\r\n{}"
        );
    }

    #[test]
    fn bad_urls_say_what_is_expected() {
        assert!(
            split_url("https://a/")
                .unwrap_err()
                .contains("https is not supported here")
        );
        assert_eq!(
            parse_url("https://localhost:8443/a").unwrap(),
            (true, "localhost:8443".to_owned(), "/a".to_owned())
        );
        assert!(
            split_url("ftp://a/")
                .unwrap_err()
                .contains("expected a URL")
        );
        let urls = vec![
            "http://127.0.0.1:1/a".to_owned(),
            "http://127.0.0.1:2/b".to_owned(),
        ];
        let error = Target::new(&urls, http::Method::GET, vec![], bytes::Bytes::new()).unwrap_err();
        assert!(error.contains("must use http://127.0.0.1:1"), "{error}");
    }
}
