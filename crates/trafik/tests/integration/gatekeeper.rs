//! The API gateway's stages over real sockets: JWT verification with tokens this test signs, a
//! JWKS rotation, lessons 13 and 16 driven through their example files against the replica's
//! `POST /takip` application, and a global rate limit shared by two instances through a real
//! Redis (its own `redis-server`, stopped by its pid).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use trafik_test_support::{
    INSIDE_NAMESPACE, Redis, Trafik, Upstream, get_json, run_in_own_network_namespace,
};

const SECRET: &str = "trafik-ornek-anahtar";

/// One answer: status, head (lowercase), body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// Whether the application (the replica, which writes `x-kopya`) wrote it, not trafik.
    fn written_by_app(&self) -> bool {
        self.head.contains("\r\nx-kopya:")
    }
}

/// Sends one request on a new connection and reads the whole answer.
fn send(address: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // A refusal may come (and the connection close) before the body is written.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Answer {
        status: head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0),
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hs256(claims: &Value) -> String {
    let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    encode(&Header::new(Algorithm::HS256), claims, &key).unwrap()
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "iss": "trafik-ornek", "aud": "takip", "exp": now() + 300})
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A folder of this test's own for config and key files.
fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "trafik-gateway-{}-{name}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn free_address() -> String {
    format!("127.0.0.1:{}", trafik_test_support::free_port())
}

/// `trafik serve` on `config`'s text (written to a file in `dir`), once it listens.
fn serve(dir: &std::path::Path, config: &str) -> Trafik {
    let path = dir.join("trafik.toml");
    std::fs::write(&path, config).unwrap();
    Trafik::start(
        &["serve", "-c", path.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    )
    .0
}

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

fn serve_example(name: &str, global: &[&str]) -> Trafik {
    let mut args = global.to_vec();
    let path = example(name);
    args.extend_from_slice(&["serve", "-c", &path]);
    Trafik::start(&args, Stdio::piped(), "listening on").0
}

const TAKIP: &[u8] = br#"{"takipNo":"TR-4821"}"#;

#[test]
fn tokens_the_test_signs_are_verified_at_the_edge() {
    let app = Upstream::start(&[]);
    let address = free_address();
    let dir = scratch("jwt");
    let config = format!(
        r#"
[[listener]]
name = "kenar"
listen = "{address}"

[[listener.route]]
path_prefix = "/takip"
pool = "uygulama"

[listener.route.jwt]
algorithm = "HS256"
secret = "{SECRET}"
issuer = "trafik-ornek"
audiences = ["takip"]
leeway = "5s"
forward_claims = ["sub: x-kullanici"]

[[listener.route]]
path_prefix = "/rs"
pool = "uygulama"

[listener.route.jwt]
algorithm = "RS256"
key_file = "{key}"

[[pool]]
name = "uygulama"
backends = [{{ address = "{app}" }}]
"#,
        key = fixture("jwt-rs256.pub.pem"),
        app = app.address,
    );
    let _trafik = serve(&dir, &config);
    let post = |token: Option<String>, extra: &[(&str, &str)]| {
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        let authorization = token.map(|t| bearer(&t));
        if let Some(value) = &authorization {
            headers.push(("authorization", value));
        }
        send(&address, "POST", "/takip", &headers, TAKIP)
    };

    let valid = post(Some(hs256(&claims("M7"))), &[]);
    assert_eq!(
        (valid.status, valid.written_by_app()),
        (200, true),
        "{}",
        valid.body
    );
    // The application judges ownership by the forwarded subject, which the client cannot forge.
    let other = post(Some(hs256(&claims("M3"))), &[("x-kullanici", "M7")]);
    assert_eq!((other.status, other.body.as_str()), (403, "yetki yok\n"));

    let mut refused = Vec::new();
    let mut expired = claims("M7");
    expired["exp"] = json!(now() - 60);
    refused.push(("expired", Some(hs256(&expired)), "token expired"));
    let mut early = claims("M7");
    early["nbf"] = json!(now() + 120);
    refused.push(("not yet valid", Some(hs256(&early)), "token not yet valid"));
    let mut issuer = claims("M7");
    issuer["iss"] = json!("baska");
    refused.push(("wrong issuer", Some(hs256(&issuer)), "wrong issuer"));
    let mut audience = claims("M7");
    audience["aud"] = json!("ucret");
    refused.push(("wrong audience", Some(hs256(&audience)), "wrong audience"));
    // With issuer and audiences configured, both claims are required.
    let bare = json!({"sub": "M7", "exp": now() + 300});
    refused.push(("no iss, no aud", Some(hs256(&bare)), "token has no iss"));
    let mut listed = claims("M7");
    listed["iss"] = json!(["trafik-ornek"]);
    refused.push(("iss as a list", Some(hs256(&listed)), "wrong issuer"));
    // The same signature in standard base64 is another spelling of the token: refused.
    let respellable = (0..)
        .map(|n| hs256(&claims(&format!("M{n}"))))
        .find(|token| token.rsplit('.').next().unwrap().contains(['-', '_']))
        .unwrap();
    let standard = respellable.replace('-', "+").replace('_', "/");
    refused.push(("standard base64", Some(standard), "malformed token"));
    let valid_token = hs256(&claims("M7"));
    let payload = valid_token.split('.').nth(1).unwrap();
    // {"alg":"none","typ":"JWT"}
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
    refused.push(("alg none", Some(none), "malformed token"));
    let forged = hs256(&claims("M3"));
    let tampered = format!(
        "{}.{}.{}",
        valid_token.split('.').next().unwrap(),
        forged.split('.').nth(1).unwrap(),
        valid_token.split('.').nth(2).unwrap()
    );
    refused.push(("tampered payload", Some(tampered), "bad signature"));
    refused.push(("no token", None, "no bearer token"));
    for (case, token, reason) in refused {
        let answer = post(token, &[]);
        assert_eq!(answer.status, 401, "{case}: {}", answer.body);
        assert!(!answer.written_by_app(), "{case} reached the application");
        assert_eq!(answer.body, format!("{reason}\n"), "{case}");
        assert!(
            answer
                .head
                .contains("www-authenticate: bearer realm=\"trafik\""),
            "{case}: {}",
            answer.head
        );
    }

    // RS256 pinned: a token signed with the private key passes; an HS256 token "signed" with the
    // public key's PEM as the HMAC secret (algorithm confusion) does not.
    let private = std::fs::read(fixture("jwt-rs256.key")).unwrap();
    let rs_claims = json!({"sub": "M7", "exp": now() + 300});
    let rs256 = encode(
        &Header::new(Algorithm::RS256),
        &rs_claims,
        &EncodingKey::from_rsa_pem(&private).unwrap(),
    )
    .unwrap();
    let answer = send(
        &address,
        "GET",
        "/rs",
        &[("authorization", &bearer(&rs256))],
        b"",
    );
    assert!(
        answer.written_by_app(),
        "a valid RS256 token reaches the app: {}",
        answer.body
    );
    let public = std::fs::read(fixture("jwt-rs256.pub.pem")).unwrap();
    let confused = encode(
        &Header::new(Algorithm::HS256),
        &rs_claims,
        &EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    let answer = send(
        &address,
        "GET",
        "/rs",
        &[("authorization", &bearer(&confused))],
        b"",
    );
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (401, "algorithm not allowed for this key\n")
    );
}

/// A JWKS with one HS256 key named `kid`.
fn jwks(kid: &str, secret: &str) -> String {
    let k = base64_url(secret.as_bytes());
    json!({"keys": [{"kty": "oct", "kid": kid, "alg": "HS256", "k": k}]}).to_string()
}

/// Unpadded base64url (RFC 4648 §5), as JWK `k` values are written.
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn with_kid(kid: &str, secret: &str) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.into());
    let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
    encode(&header, &json!({"sub": "M7", "exp": now() + 300}), &key).unwrap()
}

/// Polls until `path` with `token` answers `status`, for at most ten seconds.
fn eventually(address: &str, token: &str, status: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = send(
            address,
            "POST",
            "/takip",
            &[("authorization", &bearer(token))],
            TAKIP,
        );
        if answer.status == status {
            return true;
        }
        if Instant::now() > deadline {
            eprintln!(
                "last answer from {address}: {} {}",
                answer.status, answer.body
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Serves `document()` at any path, one connection at a time, for at most 500 connections.
fn serve_jwks(document: std::sync::Arc<std::sync::Mutex<String>>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(500) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 2048];
            let _ = stream.read(&mut request);
            let body = document.lock().unwrap().clone();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    address
}

#[test]
fn a_jwks_rotation_is_picked_up_without_restart() {
    let app = Upstream::start(&[]);
    let dir = scratch("jwks");
    let file = dir.join("jwks.json");
    std::fs::write(&file, jwks("eski", "eski-anahtar")).unwrap();
    let served = std::sync::Arc::new(std::sync::Mutex::new(jwks("eski", "eski-anahtar")));
    let jwks_server = serve_jwks(served.clone());
    let (from_file, from_url) = (free_address(), free_address());
    let route = |address: &str, jwks: &str| {
        format!(
            r#"
[[listener]]
name = "l{port}"
listen = "{address}"

[[listener.route]]
pool = "uygulama"

[listener.route.jwt]
jwks = "{jwks}"
jwks_refresh = "200ms"
forward_claims = ["sub: x-kullanici"]
"#,
            port = address.rsplit(':').next().unwrap()
        )
    };
    let config = format!(
        "{}{}\n[[pool]]\nname = \"uygulama\"\nbackends = [{{ address = \"{}\" }}]\n",
        route(&from_file, file.to_str().unwrap()),
        route(&from_url, &format!("http://{jwks_server}/jwks.json")),
        app.address
    );
    let _trafik = serve(&dir, &config);
    let old = with_kid("eski", "eski-anahtar");
    let new = with_kid("yeni", "yeni-anahtar");
    for address in [&from_file, &from_url] {
        assert!(
            eventually(address, &old, 200),
            "the first key works at {address}"
        );
        let answer = send(
            address,
            "POST",
            "/takip",
            &[("authorization", &bearer(&new))],
            TAKIP,
        );
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (401, "no key for this token\n")
        );
    }

    std::fs::write(&file, jwks("yeni", "yeni-anahtar")).unwrap();
    *served.lock().unwrap() = jwks("yeni", "yeni-anahtar");
    for address in [&from_file, &from_url] {
        assert!(
            eventually(address, &new, 200),
            "the rotated key is used at {address}"
        );
        assert!(
            eventually(address, &old, 401),
            "the retired key is refused at {address}"
        );
    }
    // A JWKS that cannot be read keeps the keys in force.
    std::fs::write(&file, "{").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let answer = send(
        &from_file,
        "POST",
        "/takip",
        &[("authorization", &bearer(&new))],
        TAKIP,
    );
    assert_eq!(answer.status, 200);
}

/// `kapi/istek.mjs`'s `kume()`: 60 requests, one of six defects in every twelve (index 6..11),
/// sent as real requests with bodies of the stated sizes.
fn lesson_16_set() -> Vec<(String, String, Vec<u8>)> {
    (0..60)
        .map(|i| {
            let (mut path, mut number, mut token, mut size) =
                ("/takip", Some("TR-4821"), "b.M7.imza", 120usize);
            match i % 12 {
                6 => path = "/yok",
                7 => number = None,
                8 => size = 9000,
                9 => token = "bozuk",
                10 => number = Some("TR-0001"),
                11 => token = "b.M3.imza",
                _ => {}
            }
            let mut body = match number {
                Some(number) => format!(r#"{{"takipNo":"{number}","dolgu":""#),
                None => r#"{"dolgu":""#.to_owned(),
            };
            let padding = size - body.len() - 2;
            body.push_str(&"x".repeat(padding));
            body.push_str("\"}");
            assert_eq!(body.len(), size);
            (path.to_owned(), token.to_owned(), body.into_bytes())
        })
        .collect()
}

/// Sends the set to `address` and reads the application's counters at `app`: (requests that
/// reached it, invalid ones among them, body bytes it received). A request is invalid by the
/// set's construction (a defect); whether it reached the application is read from its answer.
fn run_lesson_16(address: &str, app: &str) -> (u64, u64, u64) {
    let mut invalid_reached = 0;
    for (index, (path, token, body)) in lesson_16_set().into_iter().enumerate() {
        let answer = send(
            address,
            "POST",
            &path,
            &[("authorization", &bearer(&token))],
            &body,
        );
        if answer.written_by_app() && (6..12).contains(&(index % 12)) {
            invalid_reached += 1;
        }
    }
    let counters = get_json(app, "/sayac");
    (
        counters["istek"].as_u64().unwrap(),
        invalid_reached,
        counters["govde"].as_u64().unwrap(),
    )
}

/// Lesson 16 through `examples/gatekeeper.toml` on the course's ports (in a network namespace
/// of its own): the set straight to an application, then through the gate to another.
#[test]
fn lesson_16_set_through_the_gatekeeper_example() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace("lesson_16_set_through_the_gatekeeper_example");
    }
    let app = |name: &str, listen: &str| {
        Trafik::start(
            &["upstream", "--name", name, "--listen", listen],
            Stdio::null(),
            "on",
        )
        .0
    };
    let _direct = app("dogrudan", "127.0.0.1:8480");
    let _behind = app("uygulama", "127.0.0.1:8477");
    let _gate = serve_example("gatekeeper", &[]);
    let without = run_lesson_16("127.0.0.1:8480", "127.0.0.1:8480");
    let with = run_lesson_16("127.0.0.1:8476", "127.0.0.1:8477");
    let table = format!(
        "{:<36}{:>14}{:>14}\n{:<36}{:>14}{:>14}\n{:<36}{:>14}{:>14}\n{:<36}{:>14}{:>14}\n",
        "olcu",
        "kapi yok",
        "kapi bekcisi",
        "uygulamaya ulasan istek",
        format!("{}/60", without.0),
        format!("{}/60", with.0),
        "uygulamaya ulasan gecersiz istek",
        without.1,
        with.1,
        "uygulamaya ulasan govde bayti",
        without.2,
        with.2,
    );
    // The first rows of the course's `node kapi/olc.mjs`.
    assert_eq!(
        table,
        "olcu                                      kapi yok  kapi bekcisi\n\
         uygulamaya ulasan istek                      60/60         40/60\n\
         uygulamaya ulasan gecersiz istek                30            10\n\
         uygulamaya ulasan govde bayti                51600          4800\n"
    );
    let status = get_json("127.0.0.1:9476", "/status");
    let gate = &status["gates"][0];
    for (check, refused) in [("path", 5), ("token", 5), ("size", 5), ("body", 5)] {
        assert_eq!(gate["checks"][check]["refused"], refused, "{check}: {gate}");
    }
    assert_eq!(gate["checks"]["body"]["passed"], 40, "{gate}");
    assert_eq!(gate["held_back_bytes"], 51600 - 4800, "{gate}");

    // A Content-Length over the limit is answered before a byte of the body is sent.
    let mut stream = TcpStream::connect("127.0.0.1:8476").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST /takip HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer b.M7.imza\r\nContent-Length: 100000\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");

    // A chunked body over the limit is counted while it streams and cut with 413.
    let mut stream = TcpStream::connect("127.0.0.1:8476").unwrap();
    let chunk = "x".repeat(1000);
    let _ = write!(
        stream,
        "POST /takip HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer b.M7.imza\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for _ in 0..3 {
        let _ = write!(stream, "{:x}\r\n{chunk}\r\n", chunk.len());
    }
    let _ = write!(stream, "0\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(get_json("127.0.0.1:8477", "/sayac")["govde"], 4800);
}

/// Lesson 13's table live through `examples/offload.toml`: each of the six checks provoked once,
/// and who refused it read from the answer (the application signs its answers with x-kopya).
#[test]
fn lesson_13_table_which_checks_ran_at_the_edge() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace("lesson_13_table_which_checks_ran_at_the_edge");
    }
    let _app = Trafik::start(
        &[
            "upstream",
            "--name",
            "uygulama",
            "--listen",
            "127.0.0.1:8477",
        ],
        Stdio::null(),
        "on",
    )
    .0;
    let edge = serve_example("offload", &["--log-format", "json"]);
    let address = "127.0.0.1:8478";
    let token = |sub: &str| {
        let mut claims = claims(sub);
        claims.as_object_mut().unwrap().remove("aud");
        bearer(&hs256(&claims))
    };
    let query = |authorization: &str, number: &str, body_size: usize| {
        let mut body = format!(r#"{{"takipNo":"{number}","dolgu":""#);
        body.push_str(&"x".repeat(body_size.saturating_sub(body.len() + 2)));
        body.push_str("\"}");
        send(
            address,
            "POST",
            "/takip",
            &[("authorization", authorization)],
            body.as_bytes(),
        )
    };
    let where_refused = |answer: &Answer| {
        if answer.written_by_app() {
            "uygulama"
        } else {
            "kenar"
        }
    };
    let code = |answer: &Answer| answer.status.to_string();
    let mut rows = Vec::new();
    let good = token("M7");
    let forged_signature = format!("{}AAAA", &good[..good.len() - 4]);
    let signature = query(&forged_signature, "TR-4821", 0);
    rows.push((
        "belirtec imzasi",
        code(&signature),
        where_refused(&signature),
    ));
    let size = query(&token("M7"), "TR-4821", 3000);
    rows.push(("govde boyutu", code(&size), where_refused(&size)));
    let owner = query(&token("M3"), "TR-4821", 0);
    rows.push(("gonderi sahipligi", code(&owner), where_refused(&owner)));
    // M3's contract allows two queries: the third is refused.
    let mut quota = query(&token("M3"), "TR-9007", 0);
    for _ in 0..2 {
        quota = query(&token("M3"), "TR-9007", 0);
    }
    rows.push(("sozlesme kotasi", code(&quota), where_refused(&quota)));
    let limited = (0..20)
        .map(|_| query(&token("M7"), "TR-4821", 0))
        .find(|a| a.status == 429)
        .expect("the rate limit refuses within 20 quick requests");
    assert!(limited.head.contains("retry-after: "), "{}", limited.head);
    assert!(
        limited.head.contains("ratelimit-remaining: 0"),
        "{}",
        limited.head
    );
    rows.push(("hiz siniri", code(&limited), where_refused(&limited)));
    let logs = String::from_utf8_lossy(&edge.stop().stderr).into_owned();
    let logged: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "trafik::access")
        .collect();
    let verdicts = logged
        .iter()
        .filter(|line| line["fields"]["auth"].is_string())
        .count();
    rows.push((
        "erisim kaydi",
        if verdicts == logged.len() && !logged.is_empty() {
            "log".into()
        } else {
            "-".into()
        },
        "kenar",
    ));
    rows.sort_by_key(|(check, ..)| {
        [
            "belirtec imzasi",
            "hiz siniri",
            "govde boyutu",
            "erisim kaydi",
            "gonderi sahipligi",
            "sozlesme kotasi",
        ]
        .iter()
        .position(|c| c == check)
    });
    let table: String = rows
        .iter()
        .map(|(check, status, place)| format!("{check:<19}{status:>6}  {place}\n"))
        .collect();
    let at_edge = rows
        .iter()
        .filter(|(_, _, place)| *place == "kenar")
        .count();
    assert_eq!(
        (table.as_str(), at_edge),
        (
            "belirtec imzasi       401  kenar\n\
             hiz siniri            429  kenar\n\
             govde boyutu          413  kenar\n\
             erisim kaydi          log  kenar\n\
             gonderi sahipligi     403  uygulama\n\
             sozlesme kotasi       429  uygulama\n",
            4
        ),
        "lesson 13: kenara tasinan = 4/6, serviste kalan = 2/6"
    );
    assert!(
        logged
            .iter()
            .any(|l| l["fields"]["rate_limit"] == "refused: over the limit"),
        "{logs}"
    );
}

/// Sends `count` GETs alternating between `instances`, from ten threads at once; the statuses.
fn spread(instances: &[&str], count: usize) -> (Vec<u16>, Duration) {
    let started = Instant::now();
    let statuses = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..10)
            .map(|worker| {
                scope.spawn(move || {
                    (worker..count)
                        .step_by(10)
                        .map(|i| {
                            send(
                                instances[i % instances.len()],
                                "GET",
                                "/takip/TR-4821",
                                &[],
                                b"",
                            )
                            .status
                        })
                        .collect::<Vec<u16>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    (statuses, started.elapsed())
}

/// Two instances from `examples/global-limit-{a,b}.toml` share 20 requests/s (burst 20) through
/// one Redis on the course's 6379, in a network namespace of their own. Then Redis stops:
/// instance a fails open, b fails closed.
#[test]
fn two_instances_share_one_limit_through_redis() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace("two_instances_share_one_limit_through_redis");
    }
    let redis = Redis::start(6379);
    let _app = Trafik::start(
        &[
            "upstream",
            "--name",
            "uygulama",
            "--listen",
            "127.0.0.1:8477",
        ],
        Stdio::null(),
        "on",
    )
    .0;
    let _a = serve_example("global-limit-a", &[]);
    let _b = serve_example("global-limit-b", &[]);
    let (statuses, took) = spread(&["127.0.0.1:8478", "127.0.0.1:8479"], 100);
    let passed = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(passed + limited, 100, "{statuses:?}");
    // The burst, plus what refilled at 20/s while the requests were being sent: true however
    // long they took. Limits of each instance's own would let 20 + 20/s through each, more
    // than this allows at any speed (until sending 100 requests takes 4 s and all pass).
    let refilled = (took.as_secs_f64() * 20.0).ceil() as usize;
    eprintln!("100 requests over both instances in {took:?}: {passed} passed, {limited} refused");
    assert!(
        (18..=22 + refilled).contains(&passed),
        "{passed} passed in {took:?}, expected 20 ± 2 (+{refilled} refilled)"
    );

    drop(redis);
    std::thread::sleep(Duration::from_millis(200));
    let (open, _) = spread(&["127.0.0.1:8478"], 10);
    assert!(open.iter().all(|s| *s == 200), "fail open: {open:?}");
    let (closed, _) = spread(&["127.0.0.1:8479"], 10);
    assert!(closed.iter().all(|s| *s == 503), "fail closed: {closed:?}");

    // Redis back: the instances reconnect by themselves.
    let _redis = Redis::start(6379);
    let deadline = Instant::now() + Duration::from_secs(10);
    while send("127.0.0.1:8479", "GET", "/takip/TR-4821", &[], b"").status == 503 {
        assert!(
            Instant::now() < deadline,
            "instance b did not reconnect to Redis"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Redis killed under a global limit that fails closed: the first request a worker sends to
/// the dead Redis finds the outage, and the requests after it are answered 503 at once, without
/// asking Redis (counted as fast-failed), but for one probe per worker every
/// `redis_probe_interval` (1 s). With Redis back on the same port, a probe finds it and the
/// decisions are Redis's again (200 with `RateLimit-*`).
#[test]
fn a_redis_outage_is_remembered_and_requests_are_decided_at_once() {
    let app = Upstream::start(&[]);
    let redis_address = free_address();
    let redis_port: u16 = redis_address.rsplit(':').next().unwrap().parse().unwrap();
    let redis = Redis::start(redis_port);
    let (address, admin) = (free_address(), free_address());
    let dir = scratch("outage");
    let workers = 2;
    let _edge = serve(
        &dir,
        &format!(
            r#"
[server]
workers = {workers}

[admin]
listen = "{admin}"

[[listener]]
name = "kenar"
listen = "{address}"

[[listener.route]]
path_prefix = "/"
pool = "app"

[listener.route.rate_limit]
rate = 100000
key = "route"
redis = "{redis_address}"
on_redis_error = "closed"

[[pool]]
name = "app"
backends = [{{ address = "{}" }}]
"#,
            app.address
        ),
    );
    let ask = || send(&address, "GET", "/takip/TR-4821", &[], b"");
    let counts = || {
        let status = get_json(&admin, "/status");
        let redis = status["rate_limits"][0]["redis"].clone();
        assert!(redis.is_object(), "no Redis counters in /status: {status}");
        let count = |name: &str| redis[name].as_u64().unwrap();
        (
            count("answered"),
            count("failed"),
            count("fast_failed"),
            count("probes"),
        )
    };
    // Enough requests that both workers have asked Redis.
    for _ in 0..20 {
        let answer = ask();
        assert_eq!(answer.status, 200, "{}", answer.head);
        assert!(answer.head.contains("ratelimit-limit: "), "{}", answer.head);
    }
    let (answered, failed, fast_failed, _) = counts();
    assert_eq!((answered, failed, fast_failed), (20, 0, 0));

    drop(redis);
    let outage = Instant::now();
    let sent = 60;
    for _ in 0..sent {
        let answer = ask();
        assert_eq!(answer.status, 503, "fail closed: {}", answer.head);
    }
    let took = outage.elapsed();
    let (answered_after, failed, fast_failed, probes) = counts();
    eprintln!(
        "{sent} requests with Redis down in {took:?}: {failed} asked Redis and failed, \
         {fast_failed} decided at once, {probes} probes"
    );
    assert_eq!(answered_after, answered);
    assert_eq!(failed + fast_failed, sent, "every decision is counted once");
    // Each worker asks once to find the outage, then once per second that passed (its probes).
    let asked_at_most = workers * (1 + took.as_secs() + 1);
    assert!(
        failed <= asked_at_most,
        "{failed} of {sent} requests asked the dead Redis (at most {asked_at_most} may in {took:?})"
    );

    let _redis = Redis::start(redis_port);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut in_a_row = 0;
    while in_a_row < 10 {
        assert!(
            Instant::now() < deadline,
            "the decisions did not go back to Redis: {:?}",
            counts()
        );
        let answer = ask();
        if answer.status == 200 {
            assert!(answer.head.contains("ratelimit-limit: "), "{}", answer.head);
            in_a_row += 1;
        } else {
            assert_eq!(answer.status, 503, "{}", answer.head);
            in_a_row = 0;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let (answered_again, _, _, probes_after) = counts();
    assert!(answered_again >= answered + 10);
    assert!(
        probes_after > probes,
        "Redis was found again by a probe: {probes} then {probes_after}"
    );
}

#[test]
fn check_refuses_a_limit_at_the_edge_keyed_on_domain_data() {
    let dir = scratch("domain");
    let path = dir.join("quota.toml");
    std::fs::write(
        &path,
        "[[listener]]\nname = \"kenar\"\nlisten = \"127.0.0.1:0\"\n\n[[listener.route]]\npool = \"p\"\n\n[listener.route.rate_limit]\nrate = 100\nkey = \"record:sozlesme\"\n\n[[pool]]\nname = \"p\"\nbackends = [{ address = \"127.0.0.1:1\" }]\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["check", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(errors.contains("quota.toml:10:7"), "{errors}");
    assert!(
        errors.contains("listener[0].route[0].rate_limit.key"),
        "{errors}"
    );
    assert!(
        errors.contains(
            "record:sozlesme is the application's data, so this check belongs in the service"
        ),
        "{errors}"
    );
}

#[test]
fn check_reports_every_gateway_mistake_at_its_place() {
    let dir = scratch("mistakes");
    let path = dir.join("hatali.toml");
    std::fs::write(
        &path,
        r#"[[listener]]
name = "kenar"
listen = "127.0.0.1:0"

[[listener.route]]
pool = "p"

[listener.route.gate]
token = '^b\.M(\d+$'
body_schema = { type = 7 }

[listener.route.jwt]
algorithm = "none"
secret = "s"
key_file = "yok.pem"

[listener.route.rate_limit]
rate = 0
key = "claim:sub"
on_redis_error = "belki"
redis = "127.0.0.1:6379"

[[pool]]
name = "p"
backends = [{ address = "127.0.0.1:1" }]
"#,
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["check", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let errors = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "hatali.toml:9:9: listener[0].route[0].gate.token: not a valid regular expression",
        "hatali.toml:10:15: listener[0].route[0].gate.body_schema: not a valid JSON Schema",
        "hatali.toml:13:13: listener[0].route[0].jwt.algorithm: expected one of HS256",
        "hatali.toml:15:12: listener[0].route[0].jwt.key_file: expected one key source",
        "hatali.toml:18:8: listener[0].route[0].rate_limit.rate: expected at least 1",
        "hatali.toml:20:18: listener[0].route[0].rate_limit.on_redis_error: expected \"open\"",
    ] {
        assert!(errors.contains(expected), "{expected}\n in:\n{errors}");
    }
}

/// Probe finding: the gate judged the last of a repeated key (serde_json's choice) and passed
/// the body on unchanged, so an application that keeps the first key read `"bozuk"`, a value
/// the schema never saw. A body that names a key twice is now refused before the application.
#[test]
fn a_body_that_names_a_key_twice_never_reaches_the_application() {
    let app = Upstream::start(&[]);
    let address = free_address();
    let dir = scratch("duplicate-key");
    let config = format!(
        r#"
[[listener]]
name = "kapi"
listen = "{address}"

[[listener.route]]
pool = "uygulama"

[listener.route.gate]
paths = ["/takip"]
body_schema = {{ type = "object", required = ["takipNo"], properties = {{ takipNo = {{ type = "string", pattern = '^TR-\d{{4}}$' }} }} }}

[[pool]]
name = "uygulama"
backends = [{{ address = "{app}" }}]
"#,
        app = app.address,
    );
    let _trafik = serve(&dir, &config);
    let once = send(&address, "POST", "/takip", &[], TAKIP);
    assert!(once.written_by_app(), "{}", once.head);
    for body in [
        &br#"{"takipNo":"bozuk","takipNo":"TR-4821"}"#[..],
        br#"{"takipNo":"TR-4821","\u0074akipNo":"bozuk"}"#,
    ] {
        let twice = send(&address, "POST", "/takip", &[], body);
        assert_eq!(twice.status, 400, "{}", twice.head);
        assert!(!twice.written_by_app());
        assert_eq!(twice.body, "body names a key twice\n");
    }
}
